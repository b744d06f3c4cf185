//! What every controller gets: the configuration from the command line, the API clients, the cloud provider,
//! metrics, health checks and the reporting identity.
//!
//! With `--use-service-account-credentials` each controller has an API client of its own, authenticated as
//! the controller's ServiceAccount ([`ControllerClients`]); [`ControllerContext::client_for`] picks it for
//! the controller's writes and direct reads. The shared watches and the events keep the process' clients.
//!
//! Each controller sees the cloud through [`ControllerContext::for_controller`]: the provider wrapped so that
//! every call runs under `--cloud-call-timeout` and is reported by the controller's health check.

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use cloud_provider::{DryRunLog, ObjectKey};

use crate::cloud_calls::CloudCalls;
use crate::config::{CloudCallTimeout, ClusterCidrs, NonZeroDuration, Percent, Period, defaults};
use crate::events::EventRecorder;
use crate::health::HealthRegistry;
use crate::metrics::ControllerMetrics;
use crate::names::ControllerName;
use crate::timed_cloud::TimedCloud;

/// Controller settings derived from the command-line flags.
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    /// `--cluster-name`: the cluster's name as the cloud knows it.
    pub cluster_name: String,
    /// `--cluster-cidr`, parsed: none, one CIDR, or a dual-stack pair.
    pub cluster_cidrs: ClusterCidrs,
    /// `--allocate-node-cidrs`.
    pub allocate_node_cidrs: bool,
    /// `--configure-cloud-routes`.
    pub configure_cloud_routes: bool,
    /// `--node-monitor-period`: period of the node-lifecycle pass.
    pub node_monitor_period: Period,
    /// `--instance-exists-grace-period`: how long after its creation a node is never deleted because the
    /// cloud cannot find its instance (zero: no grace).
    pub instance_exists_grace_period: Duration,
    /// `--node-status-update-frequency`: period of the node address sync (`None`: no periodic sync; the
    /// flag always sets one).
    pub node_status_update_frequency: Option<NonZeroDuration>,
    /// `--route-reconciliation-period`.
    pub route_reconciliation_period: Period,
    /// `--concurrent-node-syncs`: node controller workers.
    pub concurrent_node_syncs: NonZeroUsize,
    /// `--concurrent-service-syncs`: service controller workers.
    pub concurrent_service_syncs: NonZeroUsize,
    /// `--node-deletion-max-percent`: the largest share of all nodes one lifecycle pass may delete.
    pub node_deletion_max_percent: Percent,
    /// `--cloud-call-timeout`: how long one cloud provider call of a controller may take before it is
    /// abandoned and fails (see [`crate::cloud_calls`]).
    pub cloud_call_timeout: CloudCallTimeout,
    /// `--controller-start-interval`: after each controller that starts, the next waits a random time
    /// between this and twice this (zero: they start together).
    pub controller_start_interval: Duration,
    /// The controllers' own API clients (named like upstream's in their `User-Agent`; with
    /// `--use-service-account-credentials` authenticated as the controller's ServiceAccount). A controller
    /// without one uses [`ControllerContext::client`].
    pub controller_clients: ControllerClients,
    /// The controllers' own event clients; a controller without one writes events with
    /// [`ControllerContext::event_client`].
    pub event_clients: ControllerClients,
    /// `--dry-run`: every controller makes one pass over the cluster and stops, noting the objects it
    /// looked at and the syncs that failed in this log (the provider's gate and the API clients record the
    /// changes).
    pub dry_run: Option<DryRunLog>,
    /// The tagging controller's settings.
    pub tagging: TaggingConfig,
}

/// The tagging controller's settings: `--tags`, `--resources` and the `--tagging-controller-*` flags of
/// cloud-provider-aws. They are checked when the controller starts ([`TaggingConfig::problems`]), as
/// upstream checks them: a cluster that does not run it need not set them.
#[derive(Clone, Debug, PartialEq)]
pub struct TaggingConfig {
    /// `--tags`: the tags to put on the resources of every node.
    pub tags: BTreeMap<String, String>,
    /// `--resources`: the kinds of resources to tag.
    pub resources: Vec<String>,
    /// `--tagging-controller-rate-limit`: syncs per second (limited only when it and the burst are both
    /// greater than 0, as upstream).
    pub rate_limit: f64,
    /// `--tagging-controller-burst-limit`.
    pub burst_limit: i64,
    /// `--tagging-controller-concurrent-node-syncs`: workers.
    pub workers: i64,
    /// `--tagging-controller-enable-batching`: up to 50 nodes per cloud call.
    pub batching: bool,
}

impl Default for TaggingConfig {
    /// Upstream's defaults: no tags, no resources, no rate limit, one worker, no batching.
    fn default() -> Self {
        TaggingConfig {
            tags: BTreeMap::new(),
            resources: Vec::new(),
            rate_limit: 0.0,
            burst_limit: 0,
            workers: 1,
            batching: false,
        }
    }
}

impl TaggingConfig {
    /// What is wrong with the settings for a provider that tags `kinds` of resources, in upstream's words.
    pub fn problems(&self, kinds: &[&str]) -> Vec<String> {
        let mut problems = Vec::new();
        if self.tags.is_empty() {
            problems.push("--tags must not be empty and must be a form of key=value".to_string());
        }
        if self.resources.is_empty() {
            problems.push("--resources must not be empty".to_string());
        }
        for resource in self
            .resources
            .iter()
            .filter(|r| !kinds.contains(&r.as_str()))
        {
            problems.push(format!(
                "{resource} is not a supported resource. Current supported resources {kinds:?}"
            ));
        }
        if self.rate_limit < 0.0 || self.rate_limit.is_nan() {
            problems
                .push("--tagging-controller-rate-limit should not be less than zero".to_string());
        }
        if self.burst_limit < 0 {
            problems
                .push("--tagging-controller-burst-limit should not be less than zero".to_string());
        }
        if self.workers <= 0 {
            problems.push(
                "--tagging-controller-concurrent-node-syncs must be a positive number".to_string(),
            );
        }
        problems
    }

    /// The limit on syncs per second and its burst, when both flags are greater than 0.
    pub fn rate(&self) -> Option<(f64, u32)> {
        (self.rate_limit > 0.0 && self.burst_limit > 0).then(|| {
            (
                self.rate_limit,
                u32::try_from(self.burst_limit).unwrap_or(u32::MAX),
            )
        })
    }
}

/// API clients of individual controllers, by controller (see [`ControllerContext::client_for`]).
#[derive(Clone, Default)]
pub struct ControllerClients {
    clients: BTreeMap<ControllerName, kube::Client>,
}

impl ControllerClients {
    /// No controller has a client of its own.
    pub fn new() -> Self {
        Self::default()
    }

    /// Gives `controller` a client of its own (replacing any earlier one).
    pub fn insert(&mut self, controller: ControllerName, client: kube::Client) {
        self.clients.insert(controller, client);
    }

    /// The client of `controller`, if it has one.
    pub fn get(&self, controller: ControllerName) -> Option<&kube::Client> {
        self.clients.get(&controller)
    }

    /// The controllers with a client of their own, in start order.
    pub fn controllers(&self) -> Vec<ControllerName> {
        self.clients.keys().copied().collect()
    }

    /// Whether no controller has a client of its own.
    pub fn is_empty(&self) -> bool {
        self.clients.is_empty()
    }
}

impl std::fmt::Debug for ControllerClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set()
            .entries(self.clients.keys().map(ControllerName::canonical))
            .finish()
    }
}

impl Default for ControllerConfig {
    /// The defaults of the flags ([`defaults`], upstream's), without cluster CIDRs (`--cluster-cidr` is
    /// empty by default).
    fn default() -> Self {
        ControllerConfig {
            cluster_name: defaults::CLUSTER_NAME.to_string(),
            cluster_cidrs: ClusterCidrs::none(),
            allocate_node_cidrs: defaults::ALLOCATE_NODE_CIDRS,
            configure_cloud_routes: defaults::CONFIGURE_CLOUD_ROUTES,
            node_monitor_period: defaults::NODE_MONITOR_PERIOD,
            instance_exists_grace_period: defaults::INSTANCE_EXISTS_GRACE_PERIOD,
            node_status_update_frequency: Some(defaults::NODE_STATUS_UPDATE_FREQUENCY),
            route_reconciliation_period: defaults::ROUTE_RECONCILIATION_PERIOD,
            concurrent_node_syncs: defaults::CONCURRENT_NODE_SYNCS,
            concurrent_service_syncs: defaults::CONCURRENT_SERVICE_SYNCS,
            node_deletion_max_percent: defaults::NODE_DELETION_MAX_PERCENT,
            cloud_call_timeout: defaults::CLOUD_CALL_TIMEOUT,
            controller_start_interval: Duration::ZERO,
            controller_clients: ControllerClients::default(),
            event_clients: ControllerClients::default(),
            dry_run: None,
            tagging: TaggingConfig::default(),
        }
    }
}

/// Everything the controllers share; cheap to clone.
#[derive(Clone)]
pub struct ControllerContext {
    /// The main API client (rate limited by `--kube-api-qps` / `--kube-api-burst`): the shared watches, and
    /// the writes of every controller without a client of its own.
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
    /// The client `controller` writes (and reads outside the shared informers) with: its own client from
    /// [`ControllerConfig::controller_clients`] when it has one, else [`ControllerContext::client`].
    pub fn client_for(&self, controller: ControllerName) -> kube::Client {
        self.config
            .controller_clients
            .get(controller)
            .cloned()
            .unwrap_or_else(|| self.client.clone())
    }

    /// The context `controller` runs with: the same, but for a cloud whose every call runs under
    /// `--cloud-call-timeout` and is reported by the controller's health check (registered now, healthy,
    /// if it is not yet). Each controller calls this once, when it is built.
    pub fn for_controller(&self, controller: ControllerName) -> ControllerContext {
        let calls = Arc::new(CloudCalls::new(
            controller.canonical(),
            self.config.cloud_call_timeout.get(),
            self.metrics.clone(),
        ));
        self.health
            .watch_cloud_calls(controller.canonical(), calls.clone());
        ControllerContext {
            cloud: Arc::new(TimedCloud::new(self.cloud.clone(), calls)),
            ..self.clone()
        }
    }

    /// Whether this is a dry run: one pass over the cluster, then stop.
    pub fn is_single_pass(&self) -> bool {
        self.config.dry_run.is_some()
    }

    /// In a dry run, notes that `object` was looked at (it is reported, in sync or not).
    pub fn visit(&self, object: ObjectKey) {
        if let Some(log) = &self.config.dry_run {
            log.visit(object);
        }
    }

    /// In a dry run, reports that `controller`'s sync of `object` failed with `error`.
    pub fn record_failure(
        &self,
        controller: ControllerName,
        object: Option<ObjectKey>,
        error: &dyn std::fmt::Display,
    ) {
        if let Some(log) = &self.config.dry_run {
            log.record_failure(controller.canonical(), object, error.to_string());
        }
    }

    /// An event recorder reporting as `controller`, writing through [`ControllerContext::event_client`].
    /// Must be called inside a Tokio runtime (it starts the recorder's writer task).
    pub fn recorder(&self, controller: ControllerName) -> EventRecorder {
        let client = self
            .config
            .event_clients
            .get(controller)
            .cloned()
            .unwrap_or_else(|| self.event_client.clone());
        EventRecorder::new(
            client,
            controller.event_component(),
            &self.identity,
            self.metrics.clone(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Node;
    use kube::Api;
    use test_apiserver::{TestApiServer, UserInfo};

    struct NoCloud;

    impl cloud_provider::CloudProvider for NoCloud {
        fn provider_name(&self) -> &str {
            "none"
        }

        fn has_cluster_id(&self) -> bool {
            true
        }
    }

    fn context(client: kube::Client, controller_clients: ControllerClients) -> ControllerContext {
        ControllerContext {
            client: client.clone(),
            event_client: client,
            cloud: Arc::new(NoCloud),
            config: Arc::new(ControllerConfig {
                controller_clients,
                ..ControllerConfig::default()
            }),
            metrics: ControllerMetrics::default(),
            health: HealthRegistry::new(),
            identity: "host_0".to_string(),
        }
    }

    /// The users that listed nodes, in order.
    fn node_listers(server: &TestApiServer) -> Vec<String> {
        server
            .controls()
            .request_log()
            .into_iter()
            .filter(|r| r.verb == "list" && r.resource == "nodes")
            .map(|r| r.user)
            .collect()
    }

    #[tokio::test]
    async fn controllers_use_their_own_client_when_they_have_one() {
        let server = TestApiServer::builder()
            .user(
                "node-token",
                UserInfo::new("node-controller-user", &["system:authenticated"]),
            )
            .start()
            .await
            .unwrap();
        let mut config = server.client_config().unwrap();
        config.auth_info =
            serde_json::from_value(serde_json::json!({"token": "node-token"})).unwrap();
        let own = kube::Client::try_from(config).unwrap();
        let mut clients = ControllerClients::new();
        assert!(clients.is_empty());
        clients.insert(ControllerName::CloudNode, own);
        assert_eq!(clients.controllers(), [ControllerName::CloudNode]);
        assert_eq!(format!("{clients:?}"), r#"{"cloud-node-controller"}"#);
        let ctx = context(server.client().unwrap(), clients);

        for controller in [ControllerName::CloudNode, ControllerName::ServiceLb] {
            let nodes: Api<Node> = Api::all(ctx.client_for(controller));
            nodes.list(&Default::default()).await.unwrap();
        }
        assert_eq!(node_listers(&server), ["node-controller-user", "admin"]);

        // Without clients of their own every controller uses the shared client.
        server.controls().clear_request_log();
        let ctx = context(server.client().unwrap(), ControllerClients::default());
        let nodes: Api<Node> = Api::all(ctx.client_for(ControllerName::CloudNode));
        nodes.list(&Default::default()).await.unwrap();
        assert_eq!(node_listers(&server), ["admin"]);
    }
}
