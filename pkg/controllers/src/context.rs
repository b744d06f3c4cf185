//! What every controller gets: the configuration from the command line, the API clients, the cloud provider,
//! metrics, health checks and the reporting identity.

use std::sync::Arc;
use std::time::Duration;

use crate::events::EventRecorder;
use crate::health::HealthRegistry;
use crate::metrics::ControllerMetrics;
use crate::names::ControllerName;

/// Controller settings derived from the command-line flags.
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    /// `--cluster-name`: the cluster's name as the cloud knows it.
    pub cluster_name: String,
    /// `--cluster-cidr`, parsed: none, one CIDR, or a dual-stack pair.
    pub cluster_cidrs: Vec<ipnet::IpNet>,
    /// `--allocate-node-cidrs`.
    pub allocate_node_cidrs: bool,
    /// `--configure-cloud-routes`.
    pub configure_cloud_routes: bool,
    /// `--node-monitor-period`: period of the node-lifecycle pass.
    pub node_monitor_period: Duration,
    /// `--node-status-update-frequency`: period of the node address sync.
    pub node_status_update_frequency: Duration,
    /// `--route-reconciliation-period`.
    pub route_reconciliation_period: Duration,
    /// `--concurrent-node-syncs`: node controller workers (at least 1).
    pub concurrent_node_syncs: usize,
    /// `--concurrent-service-syncs`: service controller workers (at least 1).
    pub concurrent_service_syncs: usize,
    /// `--node-deletion-max-percent`: the largest share (0..=100) of all nodes one lifecycle pass may delete.
    pub node_deletion_max_percent: u32,
}

impl Default for ControllerConfig {
    /// The upstream defaults.
    fn default() -> Self {
        ControllerConfig {
            cluster_name: "kubernetes".to_string(),
            cluster_cidrs: Vec::new(),
            allocate_node_cidrs: false,
            configure_cloud_routes: true,
            node_monitor_period: Duration::from_secs(5),
            node_status_update_frequency: Duration::from_secs(5 * 60),
            route_reconciliation_period: Duration::from_secs(10),
            concurrent_node_syncs: 1,
            concurrent_service_syncs: 1,
            node_deletion_max_percent: 50,
        }
    }
}

/// Everything the controllers share; cheap to clone.
#[derive(Clone)]
pub struct ControllerContext {
    /// The main API client (rate limited by `--kube-api-qps` / `--kube-api-burst`).
    pub client: kube::Client,
    /// A separate client with its own rate budget, used only to write events.
    pub event_client: kube::Client,
    /// The cloud provider.
    pub cloud: Arc<dyn cloud_provider::CloudProvider>,
    /// Controller settings.
    pub config: Arc<ControllerConfig>,
    /// Metrics, registered on the process registry.
    pub metrics: ControllerMetrics,
    /// Health checks, one per started controller.
    pub health: HealthRegistry,
    /// Reporting instance of events, e.g. `<hostname>_<uuid>`.
    pub identity: String,
}

impl std::fmt::Debug for ControllerContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerContext")
            .field("cloud", &self.cloud.provider_name())
            .field("config", &self.config)
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

impl ControllerContext {
    /// An event recorder reporting as `controller`, writing through [`ControllerContext::event_client`].
    /// Must be called inside a Tokio runtime (it starts the recorder's writer task).
    pub fn recorder(&self, controller: ControllerName) -> EventRecorder {
        EventRecorder::new(
            self.event_client.clone(),
            controller.canonical(),
            &self.identity,
            self.metrics.clone(),
        )
    }
}
