//! Behaviours of k8s.io/cloud-provider's controllers that clusters depend on, pinned one test each against
//! the in-memory API server and the fake cloud. Each test is named after the upstream behaviour.

mod common;
mod service_harness;

use std::sync::Arc;
use std::time::Duration;

use cloud_controllers::metrics::ControllerLabels;
use cloud_controllers::{ControllerConfig, ControllerName};
use cloud_provider::{
    CloudError, CloudProvider, InstanceMetadata, InstancesV2, LABEL_REGION, LABEL_ZONE,
    LoadBalancer, TAINT_SHUTDOWN, TAINT_UNINITIALIZED,
};
use common::{V1Only, set_ready};
use k8s_openapi::api::core::v1::{
    Event, LoadBalancerStatus, Node, NodeSpec, PersistentVolume, Service, Taint,
};
use kube::api::{Patch, PatchParams};
use provider_fake::{AddressConfig, FakeCloud, FakeConfig, FaultKind, FaultSpec, InstanceConfig};
use serde_json::json;
use service_harness::{
    Env, has_lb_finalizer, ingress_ips, lb_service, ready_node, test_config, wait_until,
};
use test_apiserver::FaultRule;

const WAIT: Duration = Duration::from_secs(15);

fn condition_status(node: &Node, type_: &str) -> Option<String> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.clone())
}

fn taints(node: &Node) -> Vec<(String, String)> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .map(|t| {
            t.iter()
                .map(|t| (t.key.clone(), t.effect.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// A registered, Ready node with only its kubelet's address, a provider ID left to set, and the
/// uninitialized taint.
fn uninitialized_node(name: &str, ip: &str) -> Node {
    let mut node = ready_node(name, ip);
    node.spec = Some(NodeSpec {
        taints: Some(vec![Taint {
            key: TAINT_UNINITIALIZED.into(),
            value: Some("true".into()),
            effect: "NoSchedule".into(),
            ..Taint::default()
        }]),
        ..NodeSpec::default()
    });
    node
}

async fn node(env: &Env, name: &str) -> Node {
    env.nodes().get(name).await.expect("node exists")
}

/// A fake cloud with these explicit instances and every other setting at its default.
fn cloud(instances: impl IntoIterator<Item = InstanceConfig>) -> FakeConfig {
    FakeConfig {
        instances: instances.into_iter().collect(),
        ..FakeConfig::default()
    }
}

/// A running instance with these addresses, in order.
fn instance(name: &str, addresses: &[(&str, &str)]) -> InstanceConfig {
    InstanceConfig {
        addresses: addresses
            .iter()
            .map(|(type_, address)| AddressConfig {
                type_: type_.to_string(),
                address: address.to_string(),
            })
            .collect(),
        ..InstanceConfig::named(name)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_controller_skips_nodes_without_pod_cidrs() {
    let mut env = Env::new(FakeConfig::default()).await;
    let mut with_cidr = ready_node("with-cidr", "10.0.0.1");
    with_cidr.spec.as_mut().unwrap().pod_cidr = Some("10.244.1.0/24".into());
    with_cidr.spec.as_mut().unwrap().pod_cidrs = Some(vec!["10.244.1.0/24".into()]);
    env.create_node(&with_cidr).await;
    env.create_node(&ready_node("no-cidr", "10.0.0.2")).await;
    let config = ControllerConfig {
        cluster_cidrs: cloud_controllers::ClusterCidrs::parse("10.244.0.0/16").unwrap(),
        ..test_config()
    };
    env.run_controllers(config, &[ControllerName::NodeRoute]);

    wait_until(WAIT, "NetworkUnavailable=False on with-cidr", || async {
        condition_status(&node(&env, "with-cidr").await, "NetworkUnavailable").as_deref()
            == Some("False")
    })
    .await;
    // Several more passes: the node without pod CIDRs never gets the condition (it would taint it).
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        condition_status(&node(&env, "no-cidr").await, "NetworkUnavailable"),
        None
    );
    assert_eq!(env.fake.routes().len(), 1);
    env.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_matches_the_shutdown_taint_by_key_and_effect() {
    let fake = cloud([InstanceConfig::named("stopped")]);
    let mut env = Env::new(fake).await;
    let mut stopped = ready_node("stopped", "10.0.0.3");
    stopped
        .status
        .as_mut()
        .unwrap()
        .conditions
        .as_mut()
        .unwrap()[0]
        .status = "False".into();
    // Someone else's taint with the same key and another effect.
    stopped.spec.as_mut().unwrap().taints = Some(vec![Taint {
        key: TAINT_SHUTDOWN.into(),
        effect: "NoExecute".into(),
        ..Taint::default()
    }]);
    env.create_node(&stopped).await;
    env.fake.stop_instance("stopped").unwrap();
    let config = ControllerConfig {
        node_monitor_period: cloud_controllers::Period::new(Duration::from_millis(100)).unwrap(),
        ..test_config()
    };
    env.run_controllers(config, &[ControllerName::CloudNodeLifecycle]);

    let both = vec![
        (TAINT_SHUTDOWN.to_string(), "NoExecute".to_string()),
        (TAINT_SHUTDOWN.to_string(), "NoSchedule".to_string()),
    ];
    wait_until(WAIT, "the NoSchedule shutdown taint added", || async {
        taints(&node(&env, "stopped").await) == both
    })
    .await;
    // Ready again: only the NoSchedule taint this controller owns goes.
    env.fake.start_instance("stopped").unwrap();
    set_ready(&env.client, "stopped", "True").await;
    wait_until(WAIT, "the NoSchedule shutdown taint removed", || async {
        taints(&node(&env, "stopped").await)
            == vec![(TAINT_SHUTDOWN.to_string(), "NoExecute".to_string())]
    })
    .await;
    env.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_address_sync_ignores_order_changes() {
    let fake = cloud([instance(
        "n7",
        &[("ExternalIP", "203.0.113.7"), ("InternalIP", "10.0.0.7")],
    )]);
    let mut env = Env::new(fake).await;
    // The node has the cloud's addresses in the other order.
    let mut n7 = ready_node("n7", "10.0.0.7");
    n7.status
        .as_mut()
        .unwrap()
        .addresses
        .as_mut()
        .unwrap()
        .push(k8s_openapi::api::core::v1::NodeAddress {
            type_: "ExternalIP".into(),
            address: "203.0.113.7".into(),
        });
    env.create_node(&n7).await;
    let config = ControllerConfig {
        node_status_update_frequency: cloud_controllers::NonZeroDuration::new(
            Duration::from_millis(100),
        ),
        ..test_config()
    };
    env.run_controllers(config, &[ControllerName::CloudNode]);
    wait_until(WAIT, "several address syncs", || async {
        env.fake.call_count("instance_metadata") + env.fake.call_count("instance_metadata_bulk")
            >= 3
    })
    .await;
    assert_eq!(env.request_count("patch", "nodes", "status"), 0);
    env.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_target_port_change_needs_update() {
    let mut env = Env::new(FakeConfig::default()).await;
    env.create_node(&ready_node("n1", "10.0.0.1")).await;
    env.run_controllers(test_config(), &[ControllerName::ServiceLb]);
    env.create_service(&lb_service("default", "web")).await;
    wait_until(WAIT, "an ingress", || async {
        env.get_service("default", "web")
            .await
            .is_some_and(|s| !ingress_ips(&s).is_empty())
    })
    .await;
    let before = env.fake.call_count("ensure_load_balancer");
    env.services("default")
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Strategic(
                json!({"spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}),
            ),
        )
        .await
        .unwrap();
    wait_until(
        WAIT,
        "an ensure call after the targetPort change",
        || async { env.fake.call_count("ensure_load_balancer") > before },
    )
    .await;
    env.stop().await.unwrap();
}

/// The fake cloud with quirks: the load balancer of the Service named `far` asks to be retried after
/// `u64::MAX` seconds, that of the Service named `boom` panics, and instance metadata passes through `alter`.
struct Quirky {
    fake: Arc<FakeCloud>,
    alter: fn(InstanceMetadata) -> InstanceMetadata,
}

impl Quirky {
    fn new(fake: Arc<FakeCloud>) -> Self {
        Quirky { fake, alter: |m| m }
    }

    fn altering(fake: Arc<FakeCloud>, alter: fn(InstanceMetadata) -> InstanceMetadata) -> Self {
        Quirky { fake, alter }
    }

    fn lb(&self) -> &dyn LoadBalancer {
        self.fake
            .load_balancer()
            .expect("the fake cloud has load balancers")
    }

    fn v2(&self) -> &dyn InstancesV2 {
        self.fake
            .instances_v2()
            .expect("the fake cloud has InstancesV2")
    }
}

#[async_trait::async_trait]
impl CloudProvider for Quirky {
    fn provider_name(&self) -> &str {
        "fake"
    }

    fn has_cluster_id(&self) -> bool {
        true
    }

    fn load_balancer(&self) -> Option<&dyn LoadBalancer> {
        Some(self)
    }

    fn instances_v2(&self) -> Option<&dyn InstancesV2> {
        Some(self)
    }
}

#[async_trait::async_trait]
impl LoadBalancer for Quirky {
    async fn get_load_balancer(
        &self,
        cluster: &str,
        service: &Service,
    ) -> cloud_provider::Result<Option<LoadBalancerStatus>> {
        self.lb().get_load_balancer(cluster, service).await
    }

    async fn ensure_load_balancer(
        &self,
        cluster: &str,
        service: &Service,
        nodes: &[Node],
    ) -> cloud_provider::Result<LoadBalancerStatus> {
        match service.metadata.name.as_deref() {
            Some("far") => {
                return Err(CloudError::retry(
                    "come back much later",
                    Duration::from_secs(u64::MAX),
                ));
            }
            Some("boom") => panic!("a provider bug"),
            _ => {}
        }
        self.lb()
            .ensure_load_balancer(cluster, service, nodes)
            .await
    }

    async fn update_load_balancer(
        &self,
        cluster: &str,
        service: &Service,
        nodes: &[Node],
    ) -> cloud_provider::Result<()> {
        self.lb()
            .update_load_balancer(cluster, service, nodes)
            .await
    }

    async fn ensure_load_balancer_deleted(
        &self,
        cluster: &str,
        service: &Service,
    ) -> cloud_provider::Result<()> {
        self.lb()
            .ensure_load_balancer_deleted(cluster, service)
            .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_delay_of_any_size_is_honoured_without_overflow() {
    let mut env = Env::new(FakeConfig::default()).await;
    env.create_node(&ready_node("n1", "10.0.0.1")).await;
    let cloud = Arc::new(Quirky::new(env.cloud.clone()));
    env.run_controllers_with(cloud, test_config(), &[ControllerName::ServiceLb]);
    env.create_service(&lb_service("default", "far")).await;
    wait_until(
        WAIT,
        "the far Service's finalizer (its sync started)",
        || async {
            env.get_service("default", "far")
                .await
                .is_some_and(|s| has_lb_finalizer(&s))
        },
    )
    .await;
    // The only worker survived a delay of u64::MAX seconds: the next Service gets its load balancer.
    env.create_service(&lb_service("default", "next")).await;
    wait_until(WAIT, "an ingress on the next Service", || async {
        env.get_service("default", "next")
            .await
            .is_some_and(|s| !ingress_ips(&s).is_empty())
    })
    .await;
    assert!(
        ingress_ips(&env.get_service("default", "far").await.unwrap()).is_empty(),
        "the Service asked to wait is not retried early"
    );
    env.stop().await.unwrap();
}

#[async_trait::async_trait]
impl InstancesV2 for Quirky {
    async fn instance_exists(&self, node: &Node) -> cloud_provider::Result<bool> {
        self.v2().instance_exists(node).await
    }

    async fn instance_shutdown(&self, node: &Node) -> cloud_provider::Result<bool> {
        self.v2().instance_shutdown(node).await
    }

    async fn instance_metadata(
        &self,
        node: &Node,
    ) -> cloud_provider::Result<Option<InstanceMetadata>> {
        let metadata = self.v2().instance_metadata(node).await?;
        Ok(metadata.map(self.alter))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_without_a_provider_id_stays_uninitialized() {
    let fake = cloud([
        InstanceConfig::named("anon"),
        InstanceConfig::named("kubelet-set"),
    ]);
    let mut env = Env::new(fake).await;
    env.create_node(&uninitialized_node("anon", "10.0.0.8"))
        .await;
    // A kubelet may set the provider ID itself: that node initializes.
    let mut kubelet_set = uninitialized_node("kubelet-set", "10.0.0.9");
    kubelet_set.spec.as_mut().unwrap().provider_id = Some("fake://kubelet-set".into());
    env.create_node(&kubelet_set).await;
    let cloud = Arc::new(Quirky::altering(env.cloud.clone(), |m| InstanceMetadata {
        provider_id: String::new(),
        ..m
    }));
    env.run_controllers_with(cloud, test_config(), &[ControllerName::CloudNode]);

    wait_until(WAIT, "kubelet-set initialized", || async {
        taints(&node(&env, "kubelet-set").await).is_empty()
    })
    .await;
    wait_until(WAIT, "anon looked up again (a retry)", || async {
        env.fake.call_count("instance_metadata") + env.fake.call_count("instance_metadata_bulk")
            >= 3
    })
    .await;
    let anon = node(&env, "anon").await;
    assert_eq!(
        taints(&anon),
        vec![(TAINT_UNINITIALIZED.to_string(), "NoSchedule".to_string())],
        "the taint stays until the provider ID is known"
    );
    assert_eq!(anon.spec.and_then(|s| s.provider_id), None);
    env.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_controller_starts_without_allocate_node_cidrs() {
    let mut env = Env::new(FakeConfig::default()).await;
    let mut a = ready_node("a", "10.0.0.1");
    a.spec.as_mut().unwrap().pod_cidrs = Some(vec!["10.244.3.0/24".into()]);
    env.create_node(&a).await;
    let config = ControllerConfig {
        allocate_node_cidrs: false,
        configure_cloud_routes: true,
        cluster_cidrs: cloud_controllers::ClusterCidrs::parse("10.244.0.0/16").unwrap(),
        ..test_config()
    };
    env.run_controllers(config, &[ControllerName::NodeRoute]);
    wait_until(WAIT, "a route for a's pod CIDR", || async {
        env.fake.routes().iter().any(|r| r.target_node == "a")
    })
    .await;
    env.stop().await.unwrap();

    // Without --cluster-cidr the controller set refuses to start, as upstream does, instead of silently
    // leaving routes unprogrammed.
    let mut env = Env::new(FakeConfig::default()).await;
    env.run_controllers(
        ControllerConfig {
            configure_cloud_routes: true,
            cluster_cidrs: cloud_controllers::ClusterCidrs::none(),
            ..test_config()
        },
        &[ControllerName::NodeRoute],
    );
    let error = env
        .stop()
        .await
        .expect_err("no cluster CIDR is a start-up error");
    assert!(
        error.to_string().contains("--cluster-cidr is empty"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_sync_is_reported_and_the_worker_goes_on() {
    let mut env = Env::new(FakeConfig::default()).await;
    env.create_node(&ready_node("n1", "10.0.0.1")).await;
    let cloud = Arc::new(Quirky::new(env.cloud.clone()));
    env.run_controllers_with(cloud, test_config(), &[ControllerName::ServiceLb]);
    env.create_service(&lb_service("default", "boom")).await;
    let panics = || {
        env.metrics
            .worker_panics
            .get_or_create(&ControllerLabels {
                controller: "service-lb-controller".into(),
            })
            .get()
    };
    wait_until(WAIT, "the panic counted", || async { panics() >= 1 }).await;
    let health = env
        .health
        .checks()
        .into_iter()
        .find(|(name, _)| name == "service-lb-controller")
        .map(|(_, result)| result);
    let message = health.expect("a health check").expect_err("failed");
    assert!(
        message.contains("default/boom") && message.contains("a provider bug"),
        "{message}"
    );
    // The only worker goes on with the next Service.
    env.create_service(&lb_service("default", "next")).await;
    wait_until(WAIT, "an ingress on the next Service", || async {
        env.get_service("default", "next")
            .await
            .is_some_and(|s| !ingress_ips(&s).is_empty())
    })
    .await;
    env.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provided_node_ip_is_validated_even_without_cloud_addresses() {
    let fake = cloud([InstanceConfig::named("pinned")]);
    let mut env = Env::new(fake).await;
    let mut pinned = uninitialized_node("pinned", "10.0.0.50");
    pinned.metadata.annotations = Some(
        [(
            "alpha.kubernetes.io/provided-node-ip".to_string(),
            "10.0.0.50".to_string(),
        )]
        .into(),
    );

    env.create_node(&pinned).await;
    // The cloud knows the instance but reports no address: the provided IP cannot be confirmed.
    let cloud = Arc::new(Quirky::altering(env.cloud.clone(), |m| InstanceMetadata {
        node_addresses: Vec::new(),
        ..m
    }));
    env.run_controllers_with(cloud, test_config(), &[ControllerName::CloudNode]);
    wait_until(WAIT, "a metadata lookup and its retry", || async {
        env.fake.call_count("instance_metadata") + env.fake.call_count("instance_metadata_bulk")
            >= 2
    })
    .await;
    assert_eq!(
        taints(&node(&env, "pinned").await),
        vec![(TAINT_UNINITIALIZED.to_string(), "NoSchedule".to_string())],
        "the node stays uninitialized"
    );
    env.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn address_sync_writes_against_the_current_resource_version() {
    let fake = cloud([instance(
        "busy",
        &[("InternalIP", "10.0.0.8"), ("ExternalIP", "203.0.113.8")],
    )]);
    let mut env = Env::new(fake).await;
    env.create_node(&ready_node("busy", "10.0.0.8")).await;
    // The cloud answers slowly while the node changes all the time (a kubelet's heartbeats).
    env.fake
        .set_fault(
            "instance_metadata_bulk",
            FaultSpec::latency(Duration::from_millis(400)),
        )
        .unwrap();
    let nodes = env.nodes();
    let heartbeat = tokio::spawn(async move {
        for beat in 0u32.. {
            let patch = json!({"metadata": {"labels": {"heartbeat": beat.to_string()}}});
            let _ = nodes
                .patch("busy", &PatchParams::default(), &Patch::Merge(patch))
                .await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let config = ControllerConfig {
        node_status_update_frequency: cloud_controllers::NonZeroDuration::new(
            Duration::from_millis(100),
        ),
        ..test_config()
    };
    env.run_controllers(config, &[ControllerName::CloudNode]);
    wait_until(
        WAIT,
        "the ExternalIP written despite the heartbeats",
        || async {
            node(&env, "busy")
                .await
                .status
                .and_then(|s| s.addresses)
                .is_some_and(|a| a.iter().any(|a| a.address == "203.0.113.8"))
        },
    )
    .await;
    heartbeat.abort();
    env.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_address_sync_costs_one_call_per_node() {
    let fake = cloud([InstanceConfig::named("v1-a"), InstanceConfig::named("v1-b")]);
    let mut env = Env::new(fake).await;
    env.create_node(&ready_node("v1-a", "10.0.0.21")).await;
    env.create_node(&ready_node("v1-b", "10.0.0.22")).await;
    let config = ControllerConfig {
        node_status_update_frequency: cloud_controllers::NonZeroDuration::new(
            Duration::from_millis(100),
        ),
        ..test_config()
    };
    env.run_controllers_with(
        Arc::new(V1Only(env.cloud.clone())),
        config,
        &[ControllerName::CloudNode],
    );
    wait_until(WAIT, "several address syncs", || async {
        env.fake.call_count("node_addresses_by_provider_id") >= 6
    })
    .await;
    // Only addresses are asked for: no instance-type or zone lookups after initialization.
    for operation in [
        "instance_type",
        "instance_type_by_provider_id",
        "get_zone_by_provider_id",
        "get_zone_by_node_name",
        "instance_id",
    ] {
        assert_eq!(env.fake.call_count(operation), 0, "{operation}");
    }
    env.stop().await.unwrap();
}

/// (type, reason, message, source.component, reportingComponent) of the core events about `name`, oldest first.
async fn core_events(env: &Env, name: &str) -> Vec<(String, String, String, String, String)> {
    let events: kube::Api<Event> = kube::Api::namespaced(env.client.clone(), "default");
    let mut list = events.list(&Default::default()).await.unwrap().items;
    list.retain(|e| e.involved_object.name.as_deref() == Some(name));
    list.sort_by_key(|e| e.first_timestamp.clone().map(|t| t.0));
    list.into_iter()
        .map(|e| {
            (
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default(),
                e.source.and_then(|s| s.component).unwrap_or_default(),
                e.reporting_component.unwrap_or_default(),
            )
        })
        .collect()
}

fn event(type_: &str, reason: &str, message: &str) -> (String, String, String, String, String) {
    let component = "service-controller".to_string();
    (
        type_.into(),
        reason.into(),
        message.into(),
        component.clone(),
        component,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_events_are_upstreams_reasons_messages_and_source() {
    let mut env = Env::new(FakeConfig::default()).await;
    env.create_node(&ready_node("n1", "10.0.0.1")).await;
    env.fake
        .set_fault(
            "ensure_load_balancer_deleted",
            FaultSpec::errors(1.0, FaultKind::Provider),
        )
        .unwrap();
    env.run_controllers(test_config(), &[ControllerName::ServiceLb]);
    env.create_service(&lb_service("default", "web")).await;
    wait_until(WAIT, "the load balancer ensured", || async {
        core_events(&env, "web").await.len() >= 2
    })
    .await;
    env.services("default")
        .delete("web", &Default::default())
        .await
        .unwrap();
    wait_until(WAIT, "a failed deletion reported", || async {
        core_events(&env, "web")
            .await
            .iter()
            .any(|e| e.1 == "DeleteLoadBalancerFailed")
    })
    .await;
    env.fake.clear_faults();
    wait_until(WAIT, "the load balancer deleted", || async {
        core_events(&env, "web")
            .await
            .iter()
            .any(|e| e.1 == "DeletedLoadBalancer")
    })
    .await;
    let events = core_events(&env, "web").await;
    let failed = events
        .iter()
        .find(|e| e.1 == "DeleteLoadBalancerFailed")
        .unwrap();
    assert_eq!(failed.0, "Warning");
    assert!(
        failed.2.starts_with("Error deleting load balancer: "),
        "{failed:?}"
    );
    assert_eq!(
        (failed.3.as_str(), failed.4.as_str()),
        ("service-controller", "service-controller")
    );
    let mut kinds: Vec<_> = events
        .into_iter()
        .filter(|e| e.1 != "DeleteLoadBalancerFailed")
        .collect();
    kinds.dedup();
    assert_eq!(
        kinds,
        vec![
            event("Normal", "EnsuringLoadBalancer", "Ensuring load balancer"),
            event("Normal", "EnsuredLoadBalancer", "Ensured load balancer"),
            event("Normal", "DeletingLoadBalancer", "Deleting load balancer"),
            event("Normal", "DeletedLoadBalancer", "Deleted load balancer"),
        ]
    );
    env.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_address_write_does_not_hold_up_initialization() {
    let fake = cloud([instance("late", &[("InternalIP", "10.0.0.31")])]);
    let mut env = Env::new(fake).await;
    // The kubelet reported another address, so initialization wants to write the cloud's.
    env.create_node(&uninitialized_node("late", "192.168.0.31"))
        .await;
    env.controls.fail(
        FaultRule::new(422)
            .verb("patch")
            .resource("nodes")
            .subresource("status"),
    );
    env.run_controllers(test_config(), &[ControllerName::CloudNode]);
    wait_until(
        WAIT,
        "late initialized despite the refused address write",
        || async {
            let node = node(&env, "late").await;
            taints(&node).is_empty() && node.spec.and_then(|s| s.provider_id).is_some()
        },
    )
    .await;
    assert!(
        env.request_count("patch", "nodes", "status") >= 1,
        "the address write was tried"
    );
    env.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_balancers_follow_the_stable_node_set() {
    let mut env = Env::new(FakeConfig::default()).await;
    env.create_node(&ready_node("n1", "10.0.0.1")).await;
    env.create_node(&ready_node("n2", "10.0.0.2")).await;
    env.run_controllers(test_config(), &[ControllerName::ServiceLb]);
    env.create_service(&lb_service("default", "web")).await;
    wait_until(WAIT, "an ingress", || async {
        env.get_service("default", "web")
            .await
            .is_some_and(|s| !ingress_ips(&s).is_empty())
    })
    .await;
    let updates = env.fake.call_count("update_load_balancer");
    // NotReady and tainted for deletion by the cluster autoscaler: no re-target on its own (KEP-3458).
    env.nodes()
        .patch(
            "n2",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": [{
                "key": "ToBeDeletedByClusterAutoscaler", "value": "1", "effect": "NoSchedule"}]}})),
        )
        .await
        .unwrap();
    set_ready(&env.client, "n2", "False").await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(env.fake.call_count("update_load_balancer"), updates);
    // A new node is a trigger; the sync then leaves the tainted node out.
    env.create_node(&ready_node("n3", "10.0.0.3")).await;
    wait_until(WAIT, "the load balancer on n1 and n3", || async {
        env.fake
            .load_balancers()
            .iter()
            .all(|lb| *lb.nodes == ["n1".to_string(), "n3".to_string()])
    })
    .await;
    env.stop().await.unwrap();
}

fn csi_volume(
    name: &str,
    zone: &str,
    labels: &[(&str, &str)],
    provisioned: bool,
) -> PersistentVolume {
    let mut pv: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "csi": {"driver": "fake.csi.cloud", "volumeHandle": format!("vol-{name}"),
                    "volumeAttributes": {"zone": zone}}
        }
    }))
    .unwrap();
    pv.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    if provisioned {
        pv.metadata.annotations = Some(
            [(
                "pv.kubernetes.io/provisioned-by".to_string(),
                "fake.csi.cloud".to_string(),
            )]
            .into(),
        );
    }
    pv
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volumes_are_labelled_by_upstreams_rules() {
    let mut env = Env::new(FakeConfig::default()).await;
    env.run_controllers(test_config(), &[ControllerName::PvLabel]);
    let volumes: kube::Api<PersistentVolume> = kube::Api::all(env.client.clone());
    let pp = Default::default();
    // A stale zone label is replaced by the cloud's; a zone/region affinity is added.
    volumes
        .create(
            &pp,
            &csi_volume(
                "stale",
                "fake-region-1b",
                &[(LABEL_ZONE, "elsewhere")],
                false,
            ),
        )
        .await
        .unwrap();
    // A provisioned volume that carries both labels is trusted: the cloud is not asked about it.
    volumes
        .create(
            &pp,
            &csi_volume(
                "trusted",
                "fake-region-1b",
                &[
                    (LABEL_ZONE, "fake-region-1c"),
                    (LABEL_REGION, "fake-region-1"),
                ],
                true,
            ),
        )
        .await
        .unwrap();
    wait_until(WAIT, "both volumes pinned", || async {
        let pinned = |pv: PersistentVolume| pv.spec.and_then(|s| s.node_affinity).is_some();
        pinned(volumes.get("stale").await.unwrap()) && pinned(volumes.get("trusted").await.unwrap())
    })
    .await;
    let stale = volumes.get("stale").await.unwrap();
    assert_eq!(
        stale
            .metadata
            .labels
            .unwrap()
            .get(LABEL_ZONE)
            .map(String::as_str),
        Some("fake-region-1b")
    );
    let trusted = volumes.get("trusted").await.unwrap();
    assert_eq!(
        trusted
            .metadata
            .labels
            .unwrap()
            .get(LABEL_ZONE)
            .map(String::as_str),
        Some("fake-region-1c"),
        "the provisioner's zone is kept"
    );
    assert_eq!(
        env.fake.call_count("get_labels_for_volume"),
        1,
        "only the stale one was looked up"
    );
    env.stop().await.unwrap();
}
