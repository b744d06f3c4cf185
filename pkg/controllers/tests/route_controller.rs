//! node-route-controller against the in-memory API server and the fake cloud: add / update / delete of
//! routes, routes it must leave alone, the empty-node-list guard, the NetworkUnavailable condition and
//! the cap on concurrent cloud operations.

mod service_harness;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use cloud_controllers::route::MAX_CONCURRENT_ROUTE_OPS;
use cloud_controllers::{ControllerConfig, ControllerName};
use cloud_provider::{CloudProvider, Route, Routes};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, NodeAddress};
use kube::api::{Patch, PatchParams};
use provider_fake::{FakeConfig, FaultKind, FaultSpec, RouteRecord};
use serde_json::json;
use service_harness::{Env, ready_node, test_config, wait_until};

const WAIT: Duration = Duration::from_secs(15);

fn route_config() -> ControllerConfig {
    ControllerConfig {
        cluster_cidrs: cloud_controllers::ClusterCidrs::parse("10.244.0.0/16").unwrap(),
        ..test_config()
    }
}

fn pod_node(name: &str, ip: &str, cidr: Option<&str>) -> Node {
    let mut node = ready_node(name, ip);
    if let Some(cidr) = cidr {
        let spec = node.spec.as_mut().unwrap();
        spec.pod_cidr = Some(cidr.to_string());
        spec.pod_cidrs = Some(vec![cidr.to_string()]);
    }
    node
}

/// (target node, destination) of every fake-cloud route, sorted.
fn routes(env: &Env) -> Vec<(String, String)> {
    let mut list: Vec<(String, String)> = env
        .fake
        .routes()
        .into_iter()
        .map(|r: RouteRecord| (r.target_node, r.destination_cidr))
        .collect();
    list.sort();
    list
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut list: Vec<(String, String)> = expected
        .iter()
        .map(|(n, c)| (n.to_string(), c.to_string()))
        .collect();
    list.sort();
    list
}

async fn wait_routes(env: &Env, expected: &[(&str, &str)]) {
    let expected = pairs(expected);
    wait_until(WAIT, &format!("cloud routes {expected:?}"), || async {
        routes(env) == expected
    })
    .await;
}

/// (status, reason) of the node's NetworkUnavailable condition.
async fn network_condition(env: &Env, node: &str) -> Option<(String, String)> {
    let node = env.nodes().get(node).await.unwrap();
    node.status?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == "NetworkUnavailable")
        .map(|c| (c.status, c.reason.unwrap_or_default()))
}

async fn wait_condition(env: &Env, node: &str, status: &str, reason: &str) {
    let wanted = Some((status.to_string(), reason.to_string()));
    wait_until(
        WAIT,
        &format!("{node} NetworkUnavailable={status}/{reason}"),
        || async { network_condition(env, node).await == wanted },
    )
    .await;
}

async fn seed_route(env: &Env, hint: &str, node: &str, cidr: &str) {
    let route = Route {
        name: String::new(),
        target_node: node.to_string(),
        target_node_addresses: Vec::new(),
        destination_cidr: cidr.to_string(),
        blackhole: false,
    };
    env.cloud
        .routes()
        .unwrap()
        .create_route("kubernetes", hint, &route)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_are_added_and_updated_and_conditions_follow() {
    let mut env = Env::new(FakeConfig::default()).await;
    env.create_node(&pod_node("a", "10.0.0.1", Some("10.244.1.0/24")))
        .await;
    env.create_node(&pod_node("b", "10.0.0.2", Some("10.244.2.0/24")))
        .await;
    env.create_node(&pod_node("c", "10.0.0.3", None)).await;
    env.run_controllers(route_config(), &[ControllerName::NodeRoute]);

    wait_routes(&env, &[("a", "10.244.1.0/24"), ("b", "10.244.2.0/24")]).await;
    let a = env
        .fake
        .routes()
        .into_iter()
        .find(|r| r.target_node == "a")
        .unwrap();
    assert_eq!(
        a.target_node_addresses,
        vec![NodeAddress {
            type_: "InternalIP".into(),
            address: "10.0.0.1".into()
        }]
    );
    wait_condition(&env, "a", "False", "RouteCreated").await;
    wait_condition(&env, "b", "False", "RouteCreated").await;
    // A node without a pod CIDR has no route yet and, as upstream, no NetworkUnavailable condition.
    assert_eq!(network_condition(&env, "c").await, None);

    // New addresses: the route is replaced with one carrying them.
    env.nodes()
        .patch_status(
            "a",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.99"}]}}),
            ),
        )
        .await
        .unwrap();
    wait_until(WAIT, "the route of a carries its new address", || async {
        env.fake.routes().iter().any(|r| {
            r.target_node == "a"
                && r.destination_cidr == "10.244.1.0/24"
                && r.target_node_addresses
                    .iter()
                    .any(|x| x.address == "10.0.0.99")
        })
    })
    .await;
    assert_eq!(routes(&env).len(), 2);

    // c gets its pod CIDR: a route is added and the condition flips.
    env.nodes()
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"podCIDR": "10.244.3.0/24", "podCIDRs": ["10.244.3.0/24"]}}),
            ),
        )
        .await
        .unwrap();
    wait_routes(
        &env,
        &[
            ("a", "10.244.1.0/24"),
            ("b", "10.244.2.0/24"),
            ("c", "10.244.3.0/24"),
        ],
    )
    .await;
    wait_condition(&env, "c", "False", "RouteCreated").await;
    assert!(env.metrics.route_sync.get() >= 1);
    env.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_managed_routes_that_are_stale_orphaned_or_blackholes_are_deleted() {
    let mut env = Env::new(FakeConfig::default()).await;
    let a = env
        .create_node(&pod_node("a", "10.0.0.1", Some("10.244.1.0/24")))
        .await;
    let a_uid = a.metadata.uid.unwrap();
    // The right route of a, created earlier.
    seed_route(&env, &a_uid, "a", "10.244.1.0/24").await;
    // A CIDR a no longer has.
    seed_route(&env, "stale", "a", "10.244.7.0/24").await;
    // A node that does not exist.
    seed_route(&env, "orphan", "ghost", "10.244.9.0/24").await;
    // Outside the cluster CIDR: not ours, even for an unknown node.
    seed_route(&env, "foreign", "ghost", "192.168.50.0/24").await;
    // A blackhole: its instance was terminated.
    env.fake
        .add_instance(provider_fake::InstanceConfig::named("dead"))
        .unwrap();
    seed_route(&env, "blackhole", "dead", "10.244.8.0/24").await;
    env.fake.terminate_instance("dead").unwrap();
    assert!(env.fake.routes().iter().any(|r| r.blackhole));
    let creates_before = env.fake.call_count("create_route");

    env.run_controllers(route_config(), &[ControllerName::NodeRoute]);
    wait_routes(
        &env,
        &[("a", "10.244.1.0/24"), ("ghost", "192.168.50.0/24")],
    )
    .await;
    wait_condition(&env, "a", "False", "RouteCreated").await;
    // The existing route of a was kept, not recreated.
    assert_eq!(env.fake.call_count("create_route"), creates_before);
    env.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_node_list_never_deletes_routes() {
    let mut env = Env::new(FakeConfig::default()).await;
    seed_route(&env, "one", "x", "10.244.1.0/24").await;
    seed_route(&env, "two", "y", "10.244.2.0/24").await;
    env.run_controllers(route_config(), &[ControllerName::NodeRoute]);
    wait_until(WAIT, "three reconciliations", || async {
        env.metrics.route_sync.get() >= 3
    })
    .await;
    assert_eq!(
        routes(&env),
        pairs(&[("x", "10.244.1.0/24"), ("y", "10.244.2.0/24")])
    );
    assert_eq!(env.fake.call_count("delete_route"), 0);

    // Once nodes exist, routes of unknown nodes are cleaned up as usual.
    env.create_node(&pod_node("x", "10.0.0.1", Some("10.244.1.0/24")))
        .await;
    wait_routes(&env, &[("x", "10.244.1.0/24")]).await;
    env.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_creations_mark_the_network_unavailable_until_they_succeed() {
    let mut env = Env::new(FakeConfig::default()).await;
    env.fake
        .set_fault("create_route", FaultSpec::errors(1.0, FaultKind::Provider))
        .unwrap();
    env.create_node(&pod_node("a", "10.0.0.1", Some("10.244.1.0/24")))
        .await;
    env.run_controllers(route_config(), &[ControllerName::NodeRoute]);

    wait_condition(&env, "a", "True", "NoRouteCreated").await;
    wait_until(WAIT, "FailedToCreateRoute event on a", || async {
        !env.events("default", "a", "FailedToCreateRoute")
            .await
            .is_empty()
    })
    .await;
    let event = env
        .events("default", "a", "FailedToCreateRoute")
        .await
        .remove(0);
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert!(
        event
            .note
            .as_deref()
            .unwrap_or_default()
            .starts_with("Could not create route"),
        "{event:?}"
    );
    assert!(routes(&env).is_empty());

    env.fake.clear_faults();
    wait_routes(&env, &[("a", "10.244.1.0/24")]).await;
    wait_condition(&env, "a", "False", "RouteCreated").await;
    env.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_cluster_cidr_stops_the_controller() {
    // Two CIDRs of one family cannot even be configured: the type refuses them.
    let same_family = cloud_controllers::ClusterCidrs::parse("10.244.0.0/16,10.245.0.0/16");
    assert!(
        same_family
            .unwrap_err()
            .to_string()
            .contains("one IPv4 and one IPv6"),
    );
    let env = Env::new(FakeConfig::default()).await;
    let config = ControllerConfig {
        cluster_cidrs: cloud_controllers::ClusterCidrs::none(),
        ..test_config()
    };
    let ctx = env.context(config);
    let informers = cloud_controllers::SharedInformers::new(env.client.clone());
    let controller = cloud_controllers::route::NodeRouteController::new(&ctx, &informers);
    let token = tokio_util::sync::CancellationToken::new();
    let error = tokio::time::timeout(Duration::from_secs(5), controller.run(token))
        .await
        .expect("fails at once")
        .expect_err("routes need a cluster CIDR");
    assert!(
        error.to_string().contains("needs --cluster-cidr"),
        "{error}"
    );
    assert!(env.fake.routes().is_empty());
}

/// Routes that take 100 ms per creation and record how many creations overlap.
#[derive(Default)]
struct SlowRoutes {
    in_flight: AtomicUsize,
    peak: AtomicUsize,
    created: parking_lot::Mutex<Vec<Route>>,
}

#[async_trait::async_trait]
impl Routes for SlowRoutes {
    async fn list_routes(&self, _cluster_name: &str) -> cloud_provider::Result<Vec<Route>> {
        Ok(self.created.lock().clone())
    }

    async fn create_route(
        &self,
        _cluster_name: &str,
        _name_hint: &str,
        route: &Route,
    ) -> cloud_provider::Result<()> {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(100)).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.created.lock().push(route.clone());
        Ok(())
    }

    async fn delete_route(
        &self,
        _cluster_name: &str,
        _route: &Route,
    ) -> cloud_provider::Result<()> {
        Ok(())
    }
}

struct RoutesOnly(SlowRoutes);

impl CloudProvider for RoutesOnly {
    fn provider_name(&self) -> &str {
        "slow-routes"
    }

    fn routes(&self) -> Option<&dyn Routes> {
        Some(&self.0)
    }

    fn has_cluster_id(&self) -> bool {
        true
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_200_route_operations_run_at_once() {
    const NODES: usize = 300;
    let mut env = Env::new(FakeConfig::default()).await;
    let nodes = env.nodes();
    futures::stream::iter(0..NODES)
        .map(|i| {
            let nodes = nodes.clone();
            async move {
                let node = pod_node(
                    &format!("node-{i}"),
                    "10.0.0.1",
                    Some(&format!("10.{}.{}.0/24", 128 + i / 256, i % 256)),
                );
                nodes.create(&Default::default(), &node).await.unwrap();
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    let cloud = Arc::new(RoutesOnly(SlowRoutes::default()));
    let config = ControllerConfig {
        cluster_cidrs: cloud_controllers::ClusterCidrs::parse("10.128.0.0/9").unwrap(),
        route_reconciliation_period: cloud_controllers::Period::new(Duration::from_secs(60))
            .unwrap(),
        ..test_config()
    };
    env.run_route_controller_with(cloud.clone(), config);
    wait_until(WAIT, "every route created", || async {
        cloud.0.created.lock().len() == NODES
    })
    .await;
    assert_eq!(
        cloud.0.peak.load(Ordering::SeqCst),
        MAX_CONCURRENT_ROUTE_OPS
    );
    env.stop().await.unwrap();
}
