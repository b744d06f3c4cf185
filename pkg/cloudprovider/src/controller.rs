//! Controllers a provider contributes beyond the standard ones (for example DigitalOcean's public-access
//! firewall controller).
//!
//! A provider lists them in [`CloudProvider::controllers`](crate::CloudProvider::controllers). The
//! controller manager treats each like its own controllers: `--controllers` enables or disables it by its
//! name or alias (`*` includes it), it runs only while this process leads, it has a health check under its
//! name, and it stops with the others. It reads Services from the controller manager's shared watch (no
//! second watch of the same objects) through a [`ServiceWatch`].

use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use tokio_util::sync::CancellationToken;

use crate::{DryRunLog, Result};

/// A provider controller's names, as `--controllers`, logs and health checks show them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ControllerInfo {
    /// The canonical name, e.g. `firewall-controller`.
    pub name: &'static str,
    /// The short alias, e.g. `firewall`.
    pub alias: &'static str,
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
    /// Its names.
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
