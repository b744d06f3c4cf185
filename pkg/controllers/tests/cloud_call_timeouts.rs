//! `--cloud-call-timeout`: a cloud call that hangs frees its worker after the timeout, the object is
//! retried, the controller's health check names the call until one is answered again, and no timeout
//! leads to a destructive step (the route controller deletes no route when its list hangs). A provider call
//! that blocks its thread, which no timeout can free, shows as hung.

mod service_harness;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cloud_controllers::metrics::CloudCallLabels;
use cloud_controllers::{ControllerConfig, ControllerName};
use cloud_provider::{CloudProvider, Route, Routes};
use k8s_openapi::api::core::v1::Node;
use provider_fake::{FakeCloud, FakeConfig, FaultKind, FaultSpec};
use service_harness::{
    Env, has_lb_finalizer, ingress_ips, lb_service, ready_node, test_config, wait_until,
};

const WAIT: Duration = Duration::from_secs(15);
const TIMEOUT: Duration = Duration::from_millis(300);

fn hang() -> FaultSpec {
    FaultSpec::errors(1.0, FaultKind::Hang)
}

/// The result of the health check named `name`.
fn health(env: &Env, name: &str) -> Result<(), String> {
    env.health
        .checks()
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, result)| result)
        .unwrap_or_else(|| panic!("no health check {name}"))
}

fn timeouts_counted(env: &Env, controller: &str, operation: &str) -> u64 {
    env.metrics
        .cloud_call_timeouts
        .get_or_create(&CloudCallLabels {
            controller: controller.into(),
            operation: operation.into(),
        })
        .get()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_load_balancer_call_frees_the_worker_and_the_service_is_retried() {
    let mut env = Env::new(FakeConfig::default()).await;
    env.create_node(&ready_node("n1", "10.0.0.1")).await;
    env.fake.set_fault("ensure_load_balancer", hang()).unwrap();
    let config = ControllerConfig {
        cloud_call_timeout: cloud_controllers::CloudCallTimeout::new(TIMEOUT).unwrap(),
        ..test_config()
    };
    env.run_service_controller(
        config,
        Duration::from_millis(100),
        Duration::from_millis(200),
    )
    .await;
    env.create_service(&lb_service("default", "web")).await;

    // Each ensure hangs until the timeout frees the only worker; the Service is tried again and again.
    wait_until(
        WAIT,
        "three ensure calls (retries after timeouts)",
        || async { env.fake.call_count("ensure_load_balancer") >= 3 },
    )
    .await;
    let message = health(&env, "service-lb-controller").expect_err("the check fails");
    assert!(
        message.starts_with("cloud call ensure_load_balancer timed out after 300ms at "),
        "{message}"
    );
    assert!(timeouts_counted(&env, "service-lb-controller", "ensure_load_balancer") >= 2);
    wait_until(WAIT, "a SyncLoadBalancerFailed event", || async {
        !env.events("default", "web", "SyncLoadBalancerFailed")
            .await
            .is_empty()
    })
    .await;
    let failed = env.events("default", "web", "SyncLoadBalancerFailed").await;
    assert_eq!(failed[0].type_.as_deref(), Some("Warning"));
    let note = failed[0].note.as_deref().unwrap_or_default();
    assert!(
        note.contains("cloud call ensure_load_balancer timed out after 300ms"),
        "{note}"
    );
    let web = env.get_service("default", "web").await.unwrap();
    assert!(has_lb_finalizer(&web));
    assert!(ingress_ips(&web).is_empty());

    // The cloud answers again: the next retry provisions the load balancer and the check recovers.
    env.fake.clear_faults();
    wait_until(WAIT, "an ingress on web", || async {
        env.get_service("default", "web")
            .await
            .is_some_and(|s| !ingress_ips(&s).is_empty())
    })
    .await;
    assert_eq!(health(&env, "service-lb-controller"), Ok(()));
    env.stop().await.unwrap();
}

fn route_config() -> ControllerConfig {
    ControllerConfig {
        cluster_cidrs: cloud_controllers::ClusterCidrs::parse("10.244.0.0/16").unwrap(),
        cloud_call_timeout: cloud_controllers::CloudCallTimeout::new(TIMEOUT).unwrap(),
        ..test_config()
    }
}

fn pod_node(name: &str, ip: &str, cidr: &str) -> Node {
    let mut node = ready_node(name, ip);
    let spec = node.spec.as_mut().unwrap();
    spec.pod_cidr = Some(cidr.to_string());
    spec.pod_cidrs = Some(vec![cidr.to_string()]);
    node
}

async fn seed_route(cloud: &FakeCloud, node: &str, cidr: &str) {
    let route = Route {
        target_node: node.to_string(),
        destination_cidr: cidr.to_string(),
        ..Route::default()
    };
    cloud
        .routes()
        .unwrap()
        .create_route("kubernetes", node, &route)
        .await
        .unwrap();
}

/// (target node, destination) of every cloud route, sorted.
fn routes(env: &Env) -> Vec<(String, String)> {
    let mut list: Vec<_> = env
        .fake
        .routes()
        .into_iter()
        .map(|r| (r.target_node, r.destination_cidr))
        .collect();
    list.sort();
    list
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_route_list_deletes_no_route() {
    let mut env = Env::new(FakeConfig::default()).await;
    env.create_node(&pod_node("a", "10.0.0.1", "10.244.1.0/24"))
        .await;
    // A route to a node the cluster no longer has: a reconciliation that lists it deletes it.
    seed_route(&env.cloud, "gone", "10.244.9.0/24").await;
    env.fake.set_fault("list_routes", hang()).unwrap();
    env.fake.reset_calls();
    env.run_controllers(route_config(), &[ControllerName::NodeRoute]);

    wait_until(
        WAIT,
        "three route lists (a new one every period)",
        || async { env.fake.call_count("list_routes") >= 3 },
    )
    .await;
    let message = health(&env, "node-route-controller").expect_err("the check fails");
    assert!(
        message.starts_with("cloud call list_routes timed out after 300ms"),
        "{message}"
    );
    assert_eq!(env.fake.call_count("delete_route"), 0);
    assert_eq!(env.fake.call_count("create_route"), 0);
    assert_eq!(
        routes(&env),
        [("gone".to_string(), "10.244.9.0/24".to_string())]
    );

    // Once the list answers, the same reconciliation does its work and the check recovers.
    env.fake.clear_faults();
    wait_until(WAIT, "the stale route replaced by a's", || async {
        routes(&env) == [("a".to_string(), "10.244.1.0/24".to_string())]
    })
    .await;
    wait_until(WAIT, "the check passes again", || async {
        health(&env, "node-route-controller").is_ok()
    })
    .await;
    env.stop().await.unwrap();
}

/// The fake cloud's routes, with one `list_routes` that blocks its thread (a provider calling a blocking
/// SDK inside async code): no timeout can take the worker back from it.
struct BlockingRoutes {
    fake: Arc<FakeCloud>,
    block_next: AtomicBool,
}

impl CloudProvider for BlockingRoutes {
    fn provider_name(&self) -> &str {
        "fake"
    }

    fn has_cluster_id(&self) -> bool {
        true
    }

    fn routes(&self) -> Option<&dyn Routes> {
        Some(self)
    }
}

#[async_trait::async_trait]
impl Routes for BlockingRoutes {
    async fn list_routes(&self, cluster_name: &str) -> cloud_provider::Result<Vec<Route>> {
        if self.block_next.swap(false, Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(2500));
        }
        self.fake.list_routes(cluster_name).await
    }

    async fn create_route(
        &self,
        cluster_name: &str,
        name_hint: &str,
        route: &Route,
    ) -> cloud_provider::Result<()> {
        self.fake.create_route(cluster_name, name_hint, route).await
    }

    async fn delete_route(&self, cluster_name: &str, route: &Route) -> cloud_provider::Result<()> {
        self.fake.delete_route(cluster_name, route).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn a_call_blocking_its_thread_past_the_timeout_shows_as_hung() {
    let mut env = Env::new(FakeConfig::default()).await;
    env.create_node(&pod_node("a", "10.0.0.1", "10.244.1.0/24"))
        .await;
    let cloud = Arc::new(BlockingRoutes {
        fake: env.cloud.clone(),
        block_next: AtomicBool::new(true),
    });
    let config = ControllerConfig {
        cloud_call_timeout: cloud_controllers::CloudCallTimeout::new(Duration::from_millis(200))
            .unwrap(),
        ..route_config()
    };
    env.run_route_controller_with(cloud.clone(), config);

    // A worker blocked in a poll may also stall the runtime's timers (nothing else drives them), so the
    // check is read from a thread of its own, as the daemon's health endpoint does.
    let health_registry = env.health.clone();
    let reported = std::thread::spawn(move || {
        let deadline = std::time::Instant::now() + WAIT;
        while std::time::Instant::now() < deadline {
            let check = health_registry
                .checks()
                .into_iter()
                .find(|(name, _)| name == "node-route-controller");
            if let Some((_, Err(message))) = check {
                return Some(message);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    })
    .join()
    .unwrap()
    .expect("the check reports the hung call");
    assert!(
        reported.starts_with("cloud call list_routes has been in flight for ")
            && reported.ends_with(
                "longer than --cloud-call-timeout (200ms): the worker making it is hung"
            ),
        "{reported}"
    );
    assert!(
        !cloud.block_next.load(Ordering::SeqCst),
        "the blocking call is the one reported"
    );
    // The call returns in the end, with the cloud's answer: the worker is back and the check passes.
    wait_until(WAIT, "a's route and a passing check", || async {
        routes(&env) == [("a".to_string(), "10.244.1.0/24".to_string())]
            && health(&env, "node-route-controller").is_ok()
    })
    .await;
    env.stop().await.unwrap();
}
