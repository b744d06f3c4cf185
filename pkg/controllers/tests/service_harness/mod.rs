//! Helpers of the service-lb-controller and node-route-controller integration tests: the in-memory API
//! server, the fake cloud, the real controllers, and object builders.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use cloud_controllers::route::NodeRouteController;
use cloud_controllers::service::ServiceLbController;
use cloud_controllers::{
    ControllerConfig, ControllerContext, ControllerMetrics, ControllerName, ControllersError,
    HealthRegistry, SharedInformers, run_controllers,
};
use cloud_provider::CloudProvider;
use k8s_openapi::api::core::v1::{
    Node, NodeAddress, NodeCondition, NodeSpec, NodeStatus, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, PostParams};
use provider_fake::{FakeCloud, FakeConfig, FakeControl};
use test_apiserver::{Controls, TestApiServer};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// An API server and a fake cloud, with controllers started on demand.
pub struct Env {
    pub server: TestApiServer,
    pub client: kube::Client,
    pub controls: Controls,
    pub cloud: Arc<FakeCloud>,
    pub fake: FakeControl,
    pub metrics: ControllerMetrics,
    /// The health checks of the controllers started through [`Env::context`].
    pub health: HealthRegistry,
    shutdown: CancellationToken,
    task: Option<JoinHandle<Result<(), ControllersError>>>,
}

impl Env {
    /// A fresh API server and a fake cloud built from `fake`.
    pub async fn new(fake: FakeConfig) -> Env {
        let server = TestApiServer::builder()
            .not_ready_taint(false)
            .start()
            .await
            .expect("start the in-memory API server");
        let client = server
            .client()
            .expect("client for the in-memory API server");
        let controls = server.controls();
        let cloud = Arc::new(FakeCloud::new(fake).expect("valid fake cloud config"));
        let fake = cloud.handle();
        Env {
            server,
            client,
            controls,
            cloud,
            fake,
            metrics: ControllerMetrics::default(),
            health: HealthRegistry::new(),
            shutdown: CancellationToken::new(),
            task: None,
        }
    }

    /// The controller context the controllers get.
    pub fn context(&self, config: ControllerConfig) -> ControllerContext {
        self.context_with(self.cloud.clone(), config)
    }

    /// A controller context with another cloud provider.
    pub fn context_with(
        &self,
        cloud: Arc<dyn CloudProvider>,
        config: ControllerConfig,
    ) -> ControllerContext {
        ControllerContext {
            client: self.client.clone(),
            event_client: self.server.client().expect("event client"),
            cloud,
            config: Arc::new(config),
            metrics: self.metrics.clone(),
            health: self.health.clone(),
            identity: "test-host_0000".to_string(),
        }
    }

    /// Starts `enabled` through `run_controllers`, as the daemon does.
    pub fn run_controllers(&mut self, config: ControllerConfig, enabled: &[ControllerName]) {
        let ctx = self.context(config);
        let token = self.shutdown.clone();
        let enabled = enabled.to_vec();
        self.task = Some(tokio::spawn(async move {
            run_controllers(ctx, &enabled, token).await
        }));
    }

    /// Starts `enabled` through `run_controllers` with another cloud provider.
    pub fn run_controllers_with(
        &mut self,
        cloud: Arc<dyn CloudProvider>,
        config: ControllerConfig,
        enabled: &[ControllerName],
    ) {
        let ctx = self.context_with(cloud, config);
        let token = self.shutdown.clone();
        let enabled = enabled.to_vec();
        self.task = Some(tokio::spawn(async move {
            run_controllers(ctx, &enabled, token).await
        }));
    }

    /// Starts the service-lb-controller alone with a shorter retry backoff than upstream's 5 s..300 s.
    pub async fn run_service_controller(
        &mut self,
        config: ControllerConfig,
        min_retry: Duration,
        max_retry: Duration,
    ) {
        let ctx = self.context(config);
        let informers = SharedInformers::new(self.client.clone());
        let controller =
            ServiceLbController::new(&ctx, &informers).with_retry_delays(min_retry, max_retry);
        let token = self.shutdown.clone();
        informers.start(&token);
        self.task = Some(tokio::spawn(controller.run(token)));
    }

    /// Starts the node-route-controller alone, over its own shared informers, with another cloud provider.
    pub fn run_route_controller_with(
        &mut self,
        cloud: Arc<dyn CloudProvider>,
        config: ControllerConfig,
    ) {
        let ctx = self.context_with(cloud, config);
        let informers = SharedInformers::new(self.client.clone());
        let controller = NodeRouteController::new(&ctx, &informers);
        let token = self.shutdown.clone();
        informers.start(&token);
        self.task = Some(tokio::spawn(controller.run(token)));
    }

    /// Stops the controllers and returns what they returned.
    pub async fn stop(&mut self) -> Result<(), ControllersError> {
        self.shutdown.cancel();
        let task = self.task.take().expect("controllers were started");
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("controllers stop within 10 s")
            .expect("controller task did not panic")
    }

    pub fn services(&self, namespace: &str) -> Api<Service> {
        Api::namespaced(self.client.clone(), namespace)
    }

    pub fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    pub async fn create_service(&self, service: &Service) -> Service {
        let namespace = service.metadata.namespace.as_deref().unwrap_or("default");
        self.services(namespace)
            .create(&PostParams::default(), service)
            .await
            .expect("create service")
    }

    pub async fn create_node(&self, node: &Node) -> Node {
        self.nodes()
            .create(&PostParams::default(), node)
            .await
            .expect("create node")
    }

    pub async fn get_service(&self, namespace: &str, name: &str) -> Option<Service> {
        self.services(namespace)
            .get_opt(name)
            .await
            .expect("get service")
    }

    /// The events.k8s.io events about the object `name` with `reason`.
    pub async fn events(&self, namespace: &str, name: &str, reason: &str) -> Vec<Event> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
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

    /// Requests of `verb` on `resource/subresource` seen by the API server.
    pub fn request_count(&self, verb: &str, resource: &str, subresource: &str) -> u64 {
        self.controls
            .request_counts()
            .into_iter()
            .filter(|(k, _)| {
                k.verb == verb && k.resource == resource && k.subresource == subresource
            })
            .map(|(_, n)| n)
            .sum()
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

/// Controller settings for tests: upstream defaults with a short route period.
pub fn test_config() -> ControllerConfig {
    ControllerConfig {
        route_reconciliation_period: cloud_controllers::Period::new(Duration::from_millis(200))
            .unwrap(),
        ..ControllerConfig::default()
    }
}

/// A `type: LoadBalancer` Service with one TCP port 80.
pub fn lb_service(namespace: &str, name: &str) -> Service {
    Service {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("LoadBalancer".to_string()),
            selector: Some(BTreeMap::from([("app".to_string(), name.to_string())])),
            ports: Some(vec![ServicePort {
                name: Some("http".to_string()),
                port: 80,
                protocol: Some("TCP".to_string()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    }
}

/// An initialized, Ready node with a provider ID and one InternalIP.
pub fn ready_node(name: &str, ip: &str) -> Node {
    Node {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(BTreeMap::from([(
                "kubernetes.io/hostname".to_string(),
                name.to_string(),
            )])),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            provider_id: Some(format!("fake://{name}")),
            ..Default::default()
        }),
        status: Some(NodeStatus {
            addresses: Some(vec![NodeAddress {
                type_: "InternalIP".to_string(),
                address: ip.to_string(),
            }]),
            conditions: Some(vec![NodeCondition {
                type_: "Ready".to_string(),
                status: "True".to_string(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

/// The load-balancer ingress IPs recorded on a Service.
pub fn ingress_ips(service: &Service) -> Vec<String> {
    service
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .map(|list| list.iter().filter_map(|i| i.ip.clone()).collect())
        .unwrap_or_default()
}

/// Whether the Service carries the load-balancer cleanup finalizer.
pub fn has_lb_finalizer(service: &Service) -> bool {
    service.metadata.finalizers.as_ref().is_some_and(|f| {
        f.iter()
            .any(|f| f == "service.kubernetes.io/load-balancer-cleanup")
    })
}
