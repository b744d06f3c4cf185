//! Dry runs: one gate for every mutating cloud call of a provider, and the log a dry run fills.
//!
//! A provider owns one [`MutationGate`] and passes each mutating cloud call through it (one place in the
//! provider: its HTTP client, its SDK interceptor, its state store), naming the operation and its key
//! arguments. Normally the gate lets every call through. Once the controller manager starts a dry run
//! ([`MutationGate::start_dry_run`]) the gate records the call in the [`DryRunLog`] instead and refuses it
//! with [`CloudError::WouldChange`], so the sync of that object stops there: what would follow depends on
//! the call's result, which cannot be known without making it.
//!
//! The controllers run each object's sync inside [`for_object`], so that a refused call is filed under the
//! object it was made for; the controller manager adds the API writes it would have sent and the errors.
//!
//! ```
//! use cloud_provider::{CloudError, DryRunLog, MutationGate, ObjectKey, for_object};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let gate = MutationGate::default();
//! assert!(gate.check("CreateLoadBalancer", || "name=a1".into()).is_ok());
//!
//! let log = DryRunLog::default();
//! gate.start_dry_run(log.clone());
//! let service = ObjectKey::service("default", "web");
//! let refused = for_object(service.clone(), async {
//!     gate.check("CreateLoadBalancer", || "name=a1".into())
//! })
//! .await;
//! assert!(matches!(refused, Err(CloudError::WouldChange { .. })));
//! let records = log.records();
//! assert_eq!(records.cloud_calls[0].object, Some(service));
//! assert_eq!(records.cloud_calls[0].operation, "CreateLoadBalancer");
//! # });
//! ```

use std::collections::{BTreeSet, HashSet};
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};

use crate::{CloudError, Result};

/// The end of the message of every [`CloudError::WouldChange`]: text carrying it (an event about a failed
/// sync, say) reports the dry run's refusal, not something that would happen.
pub const REFUSED_BY_DRY_RUN: &str = "would change the cloud; not called";

/// The kinds of object a dry run reports on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ObjectKind {
    /// A Node.
    Node,
    /// A Service.
    Service,
    /// A pod-network route in the cloud, named `<node>/<destination CIDR>`.
    Route,
    /// A PersistentVolume.
    #[serde(rename = "persistentvolume")]
    PersistentVolume,
    /// A cloud resource a provider's own controller manages, named `<type>/<name>`.
    Cloud,
    /// Any other Kubernetes object.
    Other,
}

impl ObjectKind {
    /// The lower-case name shown in reports, e.g. `node`.
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectKind::Node => "node",
            ObjectKind::Service => "service",
            ObjectKind::Route => "route",
            ObjectKind::PersistentVolume => "persistentvolume",
            ObjectKind::Cloud => "cloud",
            ObjectKind::Other => "other",
        }
    }
}

/// An object a dry run reports on: its kind and name (`namespace/name` for namespaced objects).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct ObjectKey {
    /// The kind.
    pub kind: ObjectKind,
    /// The name, `namespace/name` for namespaced objects.
    pub name: String,
}

impl ObjectKey {
    /// An object of `kind` named `name`.
    pub fn new(kind: ObjectKind, name: impl Into<String>) -> Self {
        ObjectKey {
            kind,
            name: name.into(),
        }
    }

    /// The Node `name`.
    pub fn node(name: impl Into<String>) -> Self {
        Self::new(ObjectKind::Node, name)
    }

    /// The Service `namespace/name`.
    pub fn service(namespace: &str, name: &str) -> Self {
        Self::new(ObjectKind::Service, format!("{namespace}/{name}"))
    }

    /// The route to `destination_cidr` through the node `node`.
    pub fn route(node: &str, destination_cidr: &str) -> Self {
        Self::new(ObjectKind::Route, format!("{node}/{destination_cidr}"))
    }

    /// The PersistentVolume `name`.
    pub fn persistent_volume(name: impl Into<String>) -> Self {
        Self::new(ObjectKind::PersistentVolume, name)
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.kind.as_str(), self.name)
    }
}

/// A mutating cloud call a dry run did not make.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CloudCall {
    /// The object whose sync made the call, when known.
    pub object: Option<ObjectKey>,
    /// The provider's name of the operation, e.g. `CreateLoadBalancer` or `POST /v2/load_balancers`.
    pub operation: String,
    /// Its key arguments, as the provider renders them.
    pub details: String,
}

/// A write to the API server a dry run sent with `dryRun=All` (so nothing was persisted).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ApiWrite {
    /// The object written (for an Event: the object it is about).
    pub object: Option<ObjectKey>,
    /// The HTTP method.
    pub method: String,
    /// The request path.
    pub path: String,
    /// The change: the patch, or the object sent, as JSON.
    pub change: String,
    /// Whether the write records an Event (not a change of the object itself).
    pub event: bool,
}

/// A sync that failed during a dry run (not one that stopped at a refused cloud call).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SyncFailure {
    /// The object whose sync failed, when known.
    pub object: Option<ObjectKey>,
    /// The controller that ran the sync.
    pub controller: String,
    /// What went wrong.
    pub message: String,
}

/// Everything a dry run recorded.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct DryRunRecords {
    /// Every object the controllers looked at.
    pub objects: BTreeSet<ObjectKey>,
    /// Mutating cloud calls refused by the gate, in order.
    pub cloud_calls: Vec<CloudCall>,
    /// API writes, in order.
    pub api_writes: Vec<ApiWrite>,
    /// Syncs that failed.
    pub failures: Vec<SyncFailure>,
}

/// The shared log of a dry run; cheap to clone (clones share the log).
#[derive(Clone, Default)]
pub struct DryRunLog {
    inner: Arc<Mutex<LogState>>,
}

#[derive(Default)]
struct LogState {
    records: DryRunRecords,
    /// The objects with a refused cloud call.
    refused: HashSet<ObjectKey>,
}

impl fmt::Debug for DryRunLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DryRunLog")
    }
}

impl DryRunLog {
    fn with<T>(&self, f: impl FnOnce(&mut LogState) -> T) -> T {
        let mut state = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut state)
    }

    /// Notes that a controller looked at `object`.
    pub fn visit(&self, object: ObjectKey) {
        self.with(|s| s.records.objects.insert(object));
    }

    /// Records a refused cloud call.
    pub fn record_cloud_call(&self, call: CloudCall) {
        self.with(|s| {
            if let Some(object) = &call.object {
                s.refused.insert(object.clone());
            }
            s.records.cloud_calls.push(call);
        });
    }

    /// Records an API write sent with `dryRun=All`.
    pub fn record_api_write(&self, write: ApiWrite) {
        self.with(|s| s.records.api_writes.push(write));
    }

    /// Records that `controller`'s sync of `object` failed, unless it stopped at a cloud call the gate
    /// refused for that object (that is the dry run working, not a failure).
    pub fn record_failure(&self, controller: &str, object: Option<ObjectKey>, message: String) {
        self.with(|s| {
            let refused = object.as_ref().is_some_and(|o| s.refused.contains(o));
            if !refused {
                s.records.failures.push(SyncFailure {
                    object,
                    controller: controller.to_string(),
                    message,
                });
            }
        });
    }

    /// A copy of everything recorded so far.
    pub fn records(&self) -> DryRunRecords {
        self.with(|s| s.records.clone())
    }
}

tokio::task_local! {
    static CURRENT_OBJECT: ObjectKey;
}

/// Runs `future` (one object's sync) with `object` as the object its refused cloud calls are filed under.
pub async fn for_object<F: Future>(object: ObjectKey, future: F) -> F::Output {
    CURRENT_OBJECT.scope(object, future).await
}

/// The object of the sync running on this task, if it runs inside [`for_object`].
pub fn current_object() -> Option<ObjectKey> {
    CURRENT_OBJECT.try_with(Clone::clone).ok()
}

/// The one place a provider's mutating cloud calls pass through; see the [module docs](self).
#[derive(Debug, Default)]
pub struct MutationGate {
    dry_run: OnceLock<DryRunLog>,
}

impl MutationGate {
    /// From now on, record mutating calls in `log` and refuse them. A second call is ignored (a dry run
    /// does not end).
    pub fn start_dry_run(&self, log: DryRunLog) {
        let _ = self.dry_run.set(log);
    }

    /// Whether a dry run is in progress.
    pub fn is_dry_run(&self) -> bool {
        self.dry_run.get().is_some()
    }

    /// Lets the mutating call `operation` through, or, in a dry run, records it with `details` (its key
    /// arguments, rendered only then) and refuses it with [`CloudError::WouldChange`].
    pub fn check(&self, operation: &str, details: impl FnOnce() -> String) -> Result<()> {
        let Some(log) = self.dry_run.get() else {
            return Ok(());
        };
        log.record_cloud_call(CloudCall {
            object: current_object(),
            operation: operation.to_string(),
            details: details(),
        });
        Err(CloudError::WouldChange {
            operation: operation.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_failure_after_a_refused_call_is_not_a_failure() {
        let gate = MutationGate::default();
        let log = DryRunLog::default();
        gate.start_dry_run(log.clone());
        assert!(gate.is_dry_run());
        let web = ObjectKey::service("default", "web");
        let err = for_object(web.clone(), async { gate.check("Create", || "x".into()) })
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "dry run: Create would change the cloud; not called"
        );
        assert!(err.to_string().ends_with(REFUSED_BY_DRY_RUN));
        log.record_failure("service-lb-controller", Some(web), err.to_string());
        let other = ObjectKey::node("n1");
        log.record_failure("cloud-node-controller", Some(other.clone()), "boom".into());
        log.record_failure("cloud-node-controller", None, "unattributed".into());
        let records = log.records();
        assert_eq!(records.failures.len(), 2);
        assert_eq!(records.failures[0].object, Some(other));
        assert_eq!(records.failures[1].object, None);
    }

    #[test]
    fn calls_outside_a_sync_have_no_object() {
        let gate = MutationGate::default();
        let log = DryRunLog::default();
        gate.start_dry_run(log.clone());
        assert!(gate.check("Delete", || "y".into()).is_err());
        assert_eq!(log.records().cloud_calls[0].object, None);
        assert_eq!(current_object(), None);
    }

    #[test]
    fn keys_display_kind_and_name() {
        assert_eq!(ObjectKey::service("ns", "a").to_string(), "service/ns/a");
        assert_eq!(
            ObjectKey::persistent_volume("pv").to_string(),
            "persistentvolume/pv"
        );
        assert_eq!(
            serde_json::to_value(ObjectKey::route("n1", "10.0.1.0/24")).unwrap(),
            serde_json::json!({"kind": "route", "name": "n1/10.0.1.0/24"})
        );
    }
}
