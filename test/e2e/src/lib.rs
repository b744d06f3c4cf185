//! The end-to-end harness of the cloud-controller-manager.
//!
//! The suite (in `tests/`) needs only a kubeconfig, a running CCM with the fake provider and the fake
//! cloud's admin API. Without `E2E_KUBECONFIG` the [`Harness`] provides all three itself: an in-process
//! `test_apiserver`, the CCM binary (`target/debug/cloud-controller-manager`) started as separate
//! processes with the fake provider, and the fake cloud's admin address in the cloud-config it writes.
//! With `E2E_KUBECONFIG` it targets that cluster (for example kind, see `hack/e2e-kind.sh`). See
//! [`config`] for the environment variables.
//!
//! - [`kubectl`]: the real kubectl run against the cluster, and its tables.
//! - [`kubelet`]: simulated kubelets (tainted Nodes with addresses and pod CIDRs, kept Ready).
//! - [`admin`]: a client of the fake cloud's admin API.
//! - [`ccm`]: CCM processes (spawn, kill, logs, leader status).
//! - [`real_nodes`]: real kubelets beside `hack/realkube` (`realkube up --nodes N`) and a client outside the
//!   cluster.
//! - [`rbac`]: the RBAC-honesty comparison of `deploy/base/rbac.yaml` with recorded requests.
//! - [`differential`]: the same scenario against upstream's CCM and ours, and the comparison.
//! - [`audit`]: a real API server's audit log, the record of requests when the target is not in-process.
//! - [`wait`]: bounded waits with clear failure messages.
//! - [`well_known`]: label, taint and finalizer names, and readers of Nodes and Services.
//!
//! The demo (`hack/demo`) uses the same harness.

pub mod admin;
pub mod audit;
pub mod ccm;
pub mod config;
pub mod differential;
pub mod harness;
pub mod http;
pub mod kubectl;
pub mod kubelet;
pub mod rbac;
pub mod real_nodes;
pub mod wait;
pub mod well_known;

use std::path::PathBuf;
use std::time::Duration;

pub use admin::FakeAdmin;
pub use audit::{AuditEntry, AuditedRequest};
pub use ccm::CcmProcess;
pub use config::{HarnessConfig, Mode};
pub use harness::{CCM_SERVICE_ACCOUNT, CCM_USER, Harness, LocalApi, LocalCluster, LocalOptions};
pub use kubelet::{KubeletFleet, SimulatedNode};
pub use rbac::{ApiRequest, RbacCheck, RbacManifest};
pub use wait::{Check, wait_for};

/// Everything that can go wrong in the harness.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HarnessError {
    /// The environment or an argument is wrong.
    #[error("configuration: {0}")]
    Config(String),
    /// The CCM binary has not been built.
    #[error(
        "the cloud-controller-manager binary is missing at {0}; run `cargo build --all-features` first \
         (the end-to-end suite starts it as a separate process)"
    )]
    MissingBinary(PathBuf),
    /// A local file or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The in-process API server could not start.
    #[error("starting the local API server: {0}")]
    ApiServer(String),
    /// A Kubernetes API request failed.
    #[error("{what}: {source}")]
    Kube {
        /// What was being done.
        what: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
    /// An HTTP request (admin API or the CCM's endpoint) failed.
    #[error("{what}: {message}")]
    Http {
        /// The request.
        what: String,
        /// What went wrong.
        message: String,
    },
    /// The fake cloud's admin API answered with an error.
    #[error("fake cloud admin API {what} answered {status}: {body}")]
    Admin {
        /// The request.
        what: String,
        /// The HTTP status.
        status: u16,
        /// The answer.
        body: String,
    },
    /// A bounded wait ran out.
    #[error("timed out after {waited:?} waiting for {what}; last observed: {last}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long.
        waited: Duration,
        /// The last observation.
        last: String,
    },
    /// The RBAC manifest could not be read.
    #[error("RBAC manifest: {0}")]
    Rbac(String),
}

impl HarnessError {
    /// Wraps a kube error with what was being done.
    pub fn kube(what: impl Into<String>, source: kube::Error) -> HarnessError {
        HarnessError::Kube {
            what: what.into(),
            source,
        }
    }
}
