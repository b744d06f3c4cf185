//! Controllers a provider contributes beyond the standard ones (for example DigitalOcean's public-access
//! firewall controller).
//!
//! A provider lists them in [`CloudProvider::controllers`](crate::CloudProvider::controllers) and declares
//! their [`ControllerInfo`] in the registry. A provider controller is a controller descriptor of the same
//! shape as the controller manager's own (its table in `cloud_controllers::descriptors`): names
//! ([`ControllerInfo`]: canonical name, alias, enabled by default or not), whether it can start
//! ([`ProviderController::skip_reason`]) and how it runs ([`ProviderController::run`]). The controller
//! manager treats each like its own controllers: `--controllers` enables or disables it by its name or
//! alias (`*` includes it when it is enabled by default), it runs only while this process leads, it has a
//! health check under its name, and it stops with the others. It reads Services from the controller
//! manager's shared watch (no second watch of the same objects) through a [`ServiceWatch`].

use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use tokio_util::sync::CancellationToken;

use crate::{DryRunLog, Result};

/// A controller's names, as `--controllers`, logs and health checks show them, and whether `*` in
/// `--controllers` includes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ControllerInfo {
    /// The canonical name, e.g. `firewall-controller`; also the name of its health check.
    pub name: &'static str,
    /// The short alias, e.g. `firewall`.
    pub alias: &'static str,
    /// Whether `*` in `--controllers` includes it (otherwise it runs only when named).
    pub enabled_by_default: bool,
}

impl ControllerInfo {
    /// A controller named `name` (alias `alias`), enabled by default.
    ///
    /// ```
    /// use cloud_provider::ControllerInfo;
    /// const AUDIT: ControllerInfo = ControllerInfo::new("audit-controller", "audit").disabled_by_default();
    /// assert!(!AUDIT.enabled_by_default);
    /// assert!(AUDIT.is_named("audit") && AUDIT.is_named("audit-controller") && !AUDIT.is_named("Audit"));
    /// ```
    pub const fn new(name: &'static str, alias: &'static str) -> Self {
        ControllerInfo {
            name,
            alias,
            enabled_by_default: true,
        }
    }

    /// The same controller, run only when `--controllers` names it.
    pub const fn disabled_by_default(self) -> Self {
        ControllerInfo {
            enabled_by_default: false,
            ..self
        }
    }

    /// Whether `name` is its canonical name or its alias (exact, case-sensitive).
    pub fn is_named(&self, name: &str) -> bool {
        self.name == name || self.alias == name
    }
}

/// The Services of the cluster, as the controller manager's shared watch knows them.
#[async_trait::async_trait]
pub trait ServiceWatch: Send {
    /// Waits until the watch has something new: its first complete list, then each added, changed or
    /// deleted Service, or a re-list. Returns `false` once the watch has stopped for good.
    async fn changed(&mut self) -> bool;

    /// Every Service the watch holds now. Complete only once [`ServiceWatch::changed`] has returned
    /// `true` at least once: a controller must not act on it before.
    fn services(&self) -> Vec<Arc<Service>>;
}

/// What a provider controller gets when it starts.
pub struct ControllerContext {
    /// The controller manager's API client.
    pub client: kube::Client,
    /// The shared Service watch.
    pub services: Box<dyn ServiceWatch>,
    /// `--dry-run`: the controller makes one pass (after the first complete list), runs the sync of each
    /// object it manages inside [`crate::for_object`], notes the objects ([`DryRunLog::visit`]) and the
    /// failures ([`DryRunLog::record_failure`]) here, and returns.
    pub dry_run: Option<DryRunLog>,
}

/// A control loop of a provider's own.
#[async_trait::async_trait]
pub trait ProviderController: Send + Sync {
    /// Its names and whether `*` includes it: the same value the provider declared in the registry.
    fn info(&self) -> ControllerInfo;

    /// Why it cannot run with the provider's configuration (it is then not started, with an info log
    /// giving the reason), or `None` when it can.
    fn skip_reason(&self) -> Option<String> {
        None
    }

    /// Runs until `shutdown` is cancelled. Returning an error ends this controller only: its health check
    /// fails with the error, and the other controllers go on.
    async fn run(&self, context: ControllerContext, shutdown: CancellationToken) -> Result<()>;
}
