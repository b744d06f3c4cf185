//! Shared helpers of the controller integration tests: the in-memory API server, the fake cloud (or a
//! custom provider), and the real controllers started through `run_controllers`.

#![allow(dead_code)]

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use cloud_controllers::{
    ControllerConfig, ControllerContext, ControllerMetrics, ControllerName, ControllersError,
    HealthRegistry, run_controllers,
};
use cloud_provider::{CloudProvider, TAINT_UNINITIALIZED};
use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeCondition, NodeSpec, NodeStatus, Taint};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use prometheus_client::registry::Registry;
use provider_fake::{FakeCloud, FakeConfig, FakeControl};
use test_apiserver::{Controls, TestApiServer};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Controller settings with short periods for tests.
pub fn test_config() -> ControllerConfig {
    ControllerConfig {
        node_monitor_period: cloud_controllers::Period::new(Duration::from_millis(100)).unwrap(),
        node_status_update_frequency: cloud_controllers::NonZeroDuration::new(Duration::from_secs(
            3600,
        )),
        concurrent_node_syncs: std::num::NonZeroUsize::new(2).unwrap(),
        ..ControllerConfig::default()
    }
}

/// A running API server with the controllers on top.
pub struct Harness {
    pub server: TestApiServer,
    pub client: kube::Client,
    pub controls: Controls,
    pub health: HealthRegistry,
    pub metrics: ControllerMetrics,
    registry: Arc<Registry>,
    shutdown: CancellationToken,
    task: Option<JoinHandle<Result<(), ControllersError>>>,
}

/// Installs a log subscriber when `TEST_LOG` is set (e.g. `TEST_LOG=debug`), for debugging a test.
pub fn init_logs() {
    if let Ok(filter) = std::env::var("TEST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_test_writer()
            .try_init();
    }
}

/// Starts an API server.
pub async fn start_server() -> TestApiServer {
    init_logs();
    TestApiServer::builder()
        .start()
        .await
        .expect("start the in-memory API server")
}

/// A fake cloud from `config`, with its control handle.
pub fn fake_cloud(config: FakeConfig) -> (Arc<FakeCloud>, FakeControl) {
    let cloud = FakeCloud::new(config).expect("valid fake cloud config");
    let control = cloud.handle();
    (Arc::new(cloud), control)
}

impl Harness {
    /// Starts the `enabled` controllers with the fake cloud on a fresh API server.
    pub async fn with_fake(
        fake: FakeConfig,
        config: ControllerConfig,
        enabled: &[ControllerName],
    ) -> (Self, FakeControl) {
        let (cloud, control) = fake_cloud(fake);
        let server = start_server().await;
        let h = Harness::start(server, cloud, config, enabled).await;
        (h, control)
    }

    /// Starts the `enabled` controllers with `cloud` against `server`.
    pub async fn start(
        server: TestApiServer,
        cloud: Arc<dyn CloudProvider>,
        config: ControllerConfig,
        enabled: &[ControllerName],
    ) -> Self {
        let client = server.client().expect("API client");
        let controls = server.controls();
        let health = HealthRegistry::new();
        let mut registry = Registry::default();
        let metrics = ControllerMetrics::register(&mut registry);
        let ctx = ControllerContext {
            client: client.clone(),
            event_client: server.client().expect("event client"),
            cloud,
            config: Arc::new(config),
            metrics: metrics.clone(),
            health: health.clone(),
            identity: "test-host_0000".to_string(),
        };
        let shutdown = CancellationToken::new();
        let enabled = enabled.to_vec();
        let token = shutdown.clone();
        let task = tokio::spawn(async move { run_controllers(ctx, &enabled, token).await });
        Harness {
            server,
            client,
            controls,
            health,
            metrics,
            registry: Arc::new(registry),
            shutdown,
            task: Some(task),
        }
    }

    /// The controller metrics in the Prometheus text format.
    pub fn metrics_text(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("encode metrics");
        text
    }

    /// The node API.
    pub fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    /// Stops the controllers and returns what `run_controllers` returned.
    pub async fn stop(mut self) -> Result<(), ControllersError> {
        self.shutdown.cancel();
        let task = self.task.take().expect("started");
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("controllers stop within 10 s")
            .expect("run_controllers task did not panic")
    }
}

/// Polls `check` every 20 ms until it returns true; panics with `what` after `timeout`.
pub async fn wait_until<F, Fut>(timeout: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if check().await {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A node as a kubelet with `--cloud-provider=external` registers it: the uninitialized taint, Ready, and
/// the given addresses.
pub fn kubelet_node(name: &str, addresses: &[(&str, &str)]) -> Node {
    let mut node = Node::default();
    node.metadata.name = Some(name.to_string());
    node.metadata.labels = Some([("kubernetes.io/hostname".to_string(), name.to_string())].into());
    node.spec = Some(NodeSpec {
        taints: Some(vec![Taint {
            key: TAINT_UNINITIALIZED.to_string(),
            value: Some("true".to_string()),
            effect: "NoSchedule".to_string(),
            time_added: None,
        }]),
        ..NodeSpec::default()
    });
    node.status = Some(NodeStatus {
        addresses: Some(
            addresses
                .iter()
                .map(|(t, a)| NodeAddress {
                    type_: t.to_string(),
                    address: a.to_string(),
                })
                .collect(),
        ),
        conditions: Some(vec![ready_condition("True")]),
        ..NodeStatus::default()
    });
    node
}

/// A `Ready` condition with the given status.
pub fn ready_condition(status: &str) -> NodeCondition {
    NodeCondition {
        type_: "Ready".to_string(),
        status: status.to_string(),
        reason: Some(
            if status == "True" {
                "KubeletReady"
            } else {
                "KubeletNotReady"
            }
            .to_string(),
        ),
        message: Some("set by the test".to_string()),
        ..NodeCondition::default()
    }
}

/// Creates `node`, then writes its status through the status subresource if the create did not keep it.
pub async fn create_node(client: &kube::Client, node: &Node) -> Node {
    let api: Api<Node> = Api::all(client.clone());
    let created = api
        .create(&PostParams::default(), node)
        .await
        .expect("create node");
    let wanted = node.status.clone().unwrap_or_default();
    let got = created.status.clone().unwrap_or_default();
    if wanted.addresses != got.addresses || wanted.conditions != got.conditions {
        let patch = serde_json::json!({ "status": {
            "addresses": wanted.addresses,
            "conditions": wanted.conditions,
        }});
        return api
            .patch_status(
                &created.metadata.name.clone().unwrap_or_default(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .expect("write node status");
    }
    created
}

/// Sets the node's Ready condition.
pub async fn set_ready(client: &kube::Client, name: &str, status: &str) {
    let api: Api<Node> = Api::all(client.clone());
    let patch = serde_json::json!({ "status": { "conditions": [ready_condition(status)] } });
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch node condition");
}

/// Whether the node exists and no longer has the uninitialized taint.
pub fn is_initialized(node: &Node) -> bool {
    !node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == TAINT_UNINITIALIZED))
}

/// Reads a node (None when absent).
pub async fn get_node(client: &kube::Client, name: &str) -> Option<Node> {
    Api::<Node>::all(client.clone())
        .get_opt(name)
        .await
        .expect("get node")
}

/// Every events.k8s.io/v1 event whose regarding object has `name` and whose reason is `reason`.
pub async fn events_for(client: &kube::Client, name: &str, reason: &str) -> Vec<Event> {
    let api: Api<Event> = Api::all(client.clone());
    api.list(&ListParams::default())
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
        })
        .collect()
}

/// Every events.k8s.io/v1 event with `reason`.
pub async fn events_with_reason(client: &kube::Client, reason: &str) -> Vec<Event> {
    let api: Api<Event> = Api::all(client.clone());
    api.list(&ListParams::default())
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect()
}

/// A label of the node.
pub fn label<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// The node's `status.addresses` as (type, address) pairs.
pub fn addresses(node: &Node) -> Vec<(String, String)> {
    node.status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .map(|a| {
            a.iter()
                .map(|a| (a.type_.clone(), a.address.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// The fake cloud seen through the v1 `Instances` and `Zones` interfaces only (no `InstancesV2`).
pub struct V1Only(pub Arc<FakeCloud>);

#[async_trait::async_trait]
impl CloudProvider for V1Only {
    fn provider_name(&self) -> &str {
        self.0.provider_name()
    }

    fn instances(&self) -> Option<&dyn cloud_provider::Instances> {
        self.0.instances()
    }

    fn zones(&self) -> Option<&dyn cloud_provider::Zones> {
        self.0.zones()
    }

    fn has_cluster_id(&self) -> bool {
        true
    }
}
