//! The real controllers (cloud-controllers) running on the in-memory API server (test-apiserver) with this
//! provider against moto: node initialization and lifecycle, Services and their validation errors as
//! Warning events, pod routes and volume labels.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use cloud_controllers::route::NodeRouteController;
use cloud_controllers::service::ServiceLbController;
use cloud_controllers::{
    ControllerConfig, ControllerContext, ControllerMetrics, ControllerName, ControllersError,
    HealthRegistry, SharedInformers, run_controllers,
};
use cloud_provider::{TAINT_SHUTDOWN, TAINT_UNINITIALIZED, default_load_balancer_name};
use k8s_openapi::api::core::v1::{
    AWSElasticBlockStoreVolumeSource, Node, NodeCondition, NodeSpec, NodeStatus, PersistentVolume,
    PersistentVolumeSpec, Service, Taint,
};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use provider_aws::AwsCloud;
use provider_aws::load_balancer::spec::*;
use test_apiserver::TestApiServer;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::common::{World, elb, nlb_service, provider, wait_until};
use provider_aws::load_balancer::classic::spec::{ANN_EXTRA_SECURITY_GROUPS, ANN_PROXY_PROTOCOL};

/// The API server, the provider and the running controllers.
struct Env {
    _server: TestApiServer,
    client: kube::Client,
    event_client: kube::Client,
    cloud: Arc<AwsCloud>,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<Result<(), ControllersError>>>,
}

impl Env {
    async fn new(cloud: Arc<AwsCloud>) -> Env {
        let server = TestApiServer::builder()
            .not_ready_taint(false)
            .start()
            .await
            .expect("start the in-memory API server");
        Env {
            client: server.client().expect("client"),
            event_client: server.client().expect("event client"),
            _server: server,
            cloud,
            shutdown: CancellationToken::new(),
            tasks: Vec::new(),
        }
    }

    fn context(&self, config: ControllerConfig) -> ControllerContext {
        ControllerContext {
            client: self.client.clone(),
            event_client: self.event_client.clone(),
            cloud: self.cloud.clone(),
            config: Arc::new(config),
            metrics: ControllerMetrics::default(),
            health: HealthRegistry::new(),
            identity: "moto-test_0000".to_string(),
        }
    }

    /// Starts `enabled` through `run_controllers`, as the daemon does.
    fn run(&mut self, config: ControllerConfig, enabled: &[ControllerName]) {
        let ctx = self.context(config);
        let token = self.shutdown.clone();
        let enabled = enabled.to_vec();
        self.tasks.push(tokio::spawn(async move {
            run_controllers(ctx, &enabled, token).await
        }));
    }

    /// Starts the service-lb-controller with short retry delays.
    fn run_service_controller(&mut self) {
        let ctx = self.context(ControllerConfig::default());
        let informers = SharedInformers::new(self.client.clone());
        let controller = ServiceLbController::new(&ctx, &informers)
            .with_retry_delays(Duration::from_millis(200), Duration::from_secs(2));
        informers.start(&self.shutdown);
        self.tasks
            .push(tokio::spawn(controller.run(self.shutdown.clone())));
    }

    /// Starts the node-route-controller for `cluster_cidr`.
    fn run_route_controller(&mut self, cluster_cidr: &str) {
        let ctx = self.context(ControllerConfig {
            cluster_name: "moto".to_string(),
            cluster_cidrs: cloud_controllers::ClusterCidrs::parse(cluster_cidr).unwrap(),
            allocate_node_cidrs: true,
            configure_cloud_routes: true,
            route_reconciliation_period: cloud_controllers::Period::new(Duration::from_millis(300))
                .unwrap(),
            ..ControllerConfig::default()
        });
        let informers = SharedInformers::new(self.client.clone());
        let controller = NodeRouteController::new(&ctx, &informers);
        informers.start(&self.shutdown);
        self.tasks
            .push(tokio::spawn(controller.run(self.shutdown.clone())));
    }

    async fn stop(self) {
        self.shutdown.cancel();
        for task in self.tasks {
            let result = tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .expect("controllers stop within 10 s")
                .expect("controller task did not panic");
            assert!(result.is_ok(), "controllers failed: {result:?}");
        }
    }

    fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    fn services(&self) -> Api<Service> {
        Api::namespaced(self.client.clone(), "default")
    }

    async fn create_node(&self, node: &Node) {
        let created = self
            .nodes()
            .create(&PostParams::default(), node)
            .await
            .expect("create node");
        if let Some(status) = &node.status {
            let patch = serde_json::json!({ "status": { "conditions": status.conditions } });
            self.nodes()
                .patch_status(
                    created.metadata.name.as_deref().unwrap(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
                .expect("write node status");
        }
    }

    async fn node(&self, name: &str) -> Option<Node> {
        self.nodes().get_opt(name).await.expect("get node")
    }

    async fn set_ready(&self, name: &str, status: &str) {
        let patch = serde_json::json!({ "status": { "conditions": [ready(status)] } });
        self.nodes()
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("patch node condition");
    }

    /// Notes of the Warning events about Service `name` with `reason`.
    async fn warnings(&self, name: &str, reason: &str) -> Vec<String> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), "default");
        api.list(&ListParams::default())
            .await
            .expect("list events")
            .items
            .into_iter()
            .filter(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.reason.as_deref() == Some(reason)
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
            })
            .filter_map(|e| e.note)
            .collect()
    }
}

fn ready(status: &str) -> NodeCondition {
    NodeCondition {
        type_: "Ready".to_string(),
        status: status.to_string(),
        reason: Some("KubeletReady".to_string()),
        ..Default::default()
    }
}

/// A Node as a kubelet with `--cloud-provider=external` registers it.
fn kubelet_node(name: &str) -> Node {
    let mut node = Node::default();
    node.metadata.name = Some(name.to_string());
    node.spec = Some(NodeSpec {
        taints: Some(vec![Taint {
            key: TAINT_UNINITIALIZED.to_string(),
            value: Some("true".to_string()),
            effect: "NoSchedule".to_string(),
            time_added: None,
        }]),
        ..Default::default()
    });
    node.status = Some(NodeStatus {
        conditions: Some(vec![ready("True")]),
        ..Default::default()
    });
    node
}

/// An initialized, Ready node backed by `inst`.
fn ready_node(inst: &crate::common::Instance) -> Node {
    let mut node = Node::default();
    node.metadata.name = Some(inst.private_dns_name.clone());
    node.spec = Some(NodeSpec {
        provider_id: Some(inst.provider_id()),
        ..Default::default()
    });
    node.status = Some(NodeStatus {
        conditions: Some(vec![ready("True")]),
        ..Default::default()
    });
    node
}

fn has_taint(node: &Node, key: &str) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == key))
}

fn label<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

#[tokio::test]
async fn nodes_are_initialized_and_follow_their_instances() {
    let world = World::new("ctlnodes").await;
    let a = world.instance(0).await;
    let b = world.instance(1).await;
    let cloud = provider(&world.config("")).await;
    let mut env = Env::new(cloud).await;
    env.run(
        ControllerConfig {
            node_monitor_period: cloud_controllers::Period::new(Duration::from_millis(200))
                .unwrap(),
            ..ControllerConfig::default()
        },
        &[
            ControllerName::CloudNode,
            ControllerName::CloudNodeLifecycle,
        ],
    );

    // One node named by private DNS name, one by instance ID.
    let b_name = b.id.clone();
    env.create_node(&kubelet_node(&a.private_dns_name)).await;
    env.create_node(&kubelet_node(&b_name)).await;
    for name in [a.private_dns_name.as_str(), b_name.as_str()] {
        wait_until(
            Duration::from_secs(20),
            &format!("node {name} initialized"),
            || async {
                env.node(name)
                    .await
                    .is_some_and(|n| !has_taint(&n, TAINT_UNINITIALIZED))
            },
        )
        .await;
    }
    let node = env.node(&a.private_dns_name).await.unwrap();
    assert_eq!(
        node.spec.as_ref().unwrap().provider_id.as_deref(),
        Some(a.provider_id().as_str())
    );
    assert_eq!(
        label(&node, "node.kubernetes.io/instance-type"),
        Some("m5.large")
    );
    assert_eq!(
        label(&node, "topology.kubernetes.io/zone"),
        Some("us-east-1a")
    );
    assert_eq!(
        label(&node, "topology.kubernetes.io/region"),
        Some("us-east-1")
    );
    assert!(label(&node, "topology.k8s.aws/zone-id").is_some_and(|z| !z.is_empty()));
    let addresses: Vec<(String, String)> = node
        .status
        .as_ref()
        .and_then(|s| s.addresses.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|x| (x.type_, x.address))
        .collect();
    assert!(
        addresses.contains(&("InternalIP".into(), a.private_ip.clone())),
        "{addresses:?}"
    );
    assert!(
        addresses.contains(&("Hostname".into(), a.private_dns_name.clone())),
        "{addresses:?}"
    );
    let node_b = env.node(&b_name).await.unwrap();
    assert_eq!(
        node_b.spec.as_ref().unwrap().provider_id.as_deref(),
        Some(b.provider_id().as_str())
    );
    assert_eq!(
        label(&node_b, "topology.kubernetes.io/zone"),
        Some("us-east-1b")
    );

    // A NotReady node whose instance is stopped gets the shutdown taint...
    world.stop(&b.id).await;
    env.set_ready(&b_name, "False").await;
    wait_until(Duration::from_secs(20), "shutdown taint", || async {
        env.node(&b_name)
            .await
            .is_some_and(|n| has_taint(&n, TAINT_SHUTDOWN))
    })
    .await;
    // ... and is deleted once the instance is terminated.
    world.terminate(&b.id).await;
    wait_until(
        Duration::from_secs(20),
        "node of the terminated instance deleted",
        || async { env.node(&b_name).await.is_none() },
    )
    .await;
    assert!(env.node(&a.private_dns_name).await.is_some());
    env.stop().await;
}

#[tokio::test]
async fn services_get_load_balancers_and_validation_errors_become_warnings() {
    let world = World::new("ctlsvc").await;
    let a = world.instance(0).await;
    let cloud = provider(&world.config("")).await;
    let mut env = Env::new(cloud.clone()).await;
    env.create_node(&ready_node(&a)).await;
    env.run_service_controller();

    // A valid Service gets its NLB and the DNS name as status.
    let good = nlb_service("good", &[("http", 80, "TCP", 0)], &[]);
    let created = env
        .services()
        .create(&PostParams::default(), &good)
        .await
        .unwrap();
    let lb_name = default_load_balancer_name(&created);
    wait_until(
        Duration::from_secs(30),
        "status of Service good",
        || async {
            env.services()
                .get("good")
                .await
                .ok()
                .and_then(|s| s.status?.load_balancer?.ingress)
                .is_some_and(|i| {
                    i.first()
                        .and_then(|x| x.hostname.as_deref())
                        .is_some_and(|h| h.starts_with(&lb_name))
                })
        },
    )
    .await;

    // Every validation error reaches its Service as a Warning naming the annotation or field.
    let internal = (ANN_INTERNAL, "true");
    let eip = (ANN_EIP_ALLOCATIONS, "eipalloc-0123");
    let private_ip = (ANN_PRIVATE_IPV4, "192.168.7.7,192.168.8.8");
    // (Service name, annotations, the annotation the Warning must name)
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, &'a str);
    let cases: Vec<Case> = vec![
        (
            "v-classic-proxy",
            vec![(ANN_TYPE, "classic"), (ANN_PROXY_PROTOCOL, "yes")],
            ANN_PROXY_PROTOCOL,
        ),
        ("v-subnets", vec![(ANN_SUBNETS, "a,,b")], ANN_SUBNETS),
        (
            "v-subnets-unknown",
            vec![(ANN_SUBNETS, "no-such-subnet")],
            ANN_SUBNETS,
        ),
        ("v-cert", vec![(ANN_SSL_CERT, "my-cert")], ANN_SSL_CERT),
        (
            "v-tags-reserved",
            vec![(ANN_ADDITIONAL_TAGS, "aws:x=1")],
            ANN_ADDITIONAL_TAGS,
        ),
        (
            "v-hc-protocol",
            vec![(ANN_HC_PROTOCOL, "UDP")],
            ANN_HC_PROTOCOL,
        ),
        ("v-hc-port", vec![(ANN_HC_PORT, "0")], ANN_HC_PORT),
        (
            "v-hc-path-form",
            vec![(ANN_HC_PROTOCOL, "HTTP"), (ANN_HC_PATH, "x")],
            ANN_HC_PATH,
        ),
        ("v-hc-healthy", vec![(ANN_HC_HEALTHY, "11")], ANN_HC_HEALTHY),
        (
            "v-hc-unhealthy",
            vec![(ANN_HC_UNHEALTHY, "1")],
            ANN_HC_UNHEALTHY,
        ),
        (
            "v-hc-interval",
            vec![(ANN_HC_INTERVAL, "301")],
            ANN_HC_INTERVAL,
        ),
        (
            "v-hc-timeout",
            vec![(ANN_HC_TIMEOUT, "ten")],
            ANN_HC_TIMEOUT,
        ),
        (
            "v-cross-zone",
            vec![(ANN_CROSS_ZONE, "yes")],
            ANN_CROSS_ZONE,
        ),
        (
            "v-log-enabled",
            vec![(ANN_ACCESS_LOG_ENABLED, "on")],
            ANN_ACCESS_LOG_ENABLED,
        ),
        (
            "v-log-bucket",
            vec![(ANN_ACCESS_LOG_ENABLED, "true")],
            ANN_ACCESS_LOG_BUCKET,
        ),
        (
            "v-tg-attr",
            vec![(ANN_TARGET_GROUP_ATTRIBUTES, "unknown.attribute=1")],
            ANN_TARGET_GROUP_ATTRIBUTES,
        ),
        (
            "v-tg-attr-value",
            vec![(ANN_TARGET_GROUP_ATTRIBUTES, "proxy_protocol_v2.enabled=yes")],
            ANN_TARGET_GROUP_ATTRIBUTES,
        ),
        (
            "v-eip-form",
            vec![(ANN_EIP_ALLOCATIONS, "1.2.3.4")],
            ANN_EIP_ALLOCATIONS,
        ),
        ("v-eip-internal", vec![eip, internal], ANN_EIP_ALLOCATIONS),
        ("v-eip-count", vec![eip], ANN_EIP_ALLOCATIONS),
        (
            "v-ip-form",
            vec![(ANN_PRIVATE_IPV4, "10.0.0.256"), internal],
            ANN_PRIVATE_IPV4,
        ),
        (
            "v-ip-public",
            vec![(ANN_PRIVATE_IPV4, "10.0.0.1")],
            ANN_PRIVATE_IPV4,
        ),
        ("v-ip-subnet", vec![private_ip, internal], ANN_PRIVATE_IPV4),
        (
            "v-extra-sgs",
            vec![(ANN_EXTRA_SECURITY_GROUPS, "sg-1")],
            ANN_EXTRA_SECURITY_GROUPS,
        ),
        (
            "v-ranges",
            vec![(
                cloud_provider::ANNOTATION_LOAD_BALANCER_SOURCE_RANGES,
                "10.0.0.0/99",
            )],
            cloud_provider::ANNOTATION_LOAD_BALANCER_SOURCE_RANGES,
        ),
    ];
    for (name, annotations, _) in &cases {
        let svc = nlb_service(name, &[("http", 80, "TCP", 0)], annotations);
        env.services()
            .create(&PostParams::default(), &svc)
            .await
            .unwrap();
    }
    // Spec errors name the field.
    let mut affinity = nlb_service("v-affinity", &[("http", 80, "TCP", 0)], &[]);
    affinity.spec.as_mut().unwrap().session_affinity = Some("ClientIP".into());
    let mut lb_ip = nlb_service("v-lb-ip", &[("http", 80, "TCP", 0)], &[]);
    lb_ip.spec.as_mut().unwrap().load_balancer_ip = Some("203.0.113.9".into());
    let mixed = nlb_service(
        "v-mixed",
        &[("dns-tcp", 53, "TCP", 0), ("dns-udp", 53, "UDP", 0)],
        &[],
    );
    for svc in [&affinity, &lb_ip, &mixed] {
        env.services()
            .create(&PostParams::default(), svc)
            .await
            .unwrap();
    }
    let mut expected: Vec<(String, String)> = cases
        .iter()
        .map(|(name, _, subject)| (name.to_string(), subject.to_string()))
        .collect();
    expected.push(("v-affinity".into(), "spec.sessionAffinity".into()));
    expected.push(("v-lb-ip".into(), "spec.loadBalancerIP".into()));
    expected.push(("v-mixed".into(), "spec.ports".into()));
    for (name, subject) in &expected {
        wait_until(
            Duration::from_secs(30),
            &format!("Warning naming {subject} on {name}"),
            || async {
                env.warnings(name, "SyncLoadBalancerFailed")
                    .await
                    .iter()
                    .any(|note| note.contains(&format!("{subject}: ")))
            },
        )
        .await;
    }
    // None of them got a load balancer.
    for (name, _) in &expected {
        let svc = env.services().get(name).await.unwrap();
        let found = elb()
            .describe_load_balancers()
            .names(default_load_balancer_name(&svc))
            .send()
            .await;
        assert!(found.is_err(), "{name} must not have a load balancer");
    }

    // Changing the type or the scheme of an existing load balancer is refused with a Warning too (one
    // Service each: repeated Warnings of one Service are aggregated into a series keeping the first note).
    for (name, key, value) in [
        ("t-type", ANN_TYPE, "nlb-ip"),
        ("t-scheme", ANN_INTERNAL, "true"),
    ] {
        let svc = nlb_service(name, &[("http", 80, "TCP", 0)], &[]);
        env.services()
            .create(&PostParams::default(), &svc)
            .await
            .unwrap();
        wait_until(
            Duration::from_secs(30),
            &format!("status of Service {name}"),
            || async {
                env.services()
                    .get(name)
                    .await
                    .ok()
                    .and_then(|s| s.status?.load_balancer?.ingress)
                    .is_some_and(|i| !i.is_empty())
            },
        )
        .await;
        let patch = serde_json::json!({ "metadata": { "annotations": { key: value } } });
        env.services()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        wait_until(
            Duration::from_secs(30),
            &format!("Warning naming {key} on {name}"),
            || async {
                env.warnings(name, "SyncLoadBalancerFailed")
                    .await
                    .iter()
                    .any(|note| note.contains(&format!("{key}: ")))
            },
        )
        .await;
    }

    // Deleting the Service deletes its load balancer.
    env.services()
        .delete("good", &DeleteParams::default())
        .await
        .unwrap();
    wait_until(Duration::from_secs(30), "load balancer deleted", || async {
        elb()
            .describe_load_balancers()
            .names(&lb_name)
            .send()
            .await
            .is_err()
    })
    .await;
    wait_until(Duration::from_secs(30), "Service good gone", || async {
        env.services().get_opt("good").await.unwrap().is_none()
    })
    .await;
    env.stop().await;
}

#[tokio::test]
async fn routes_follow_node_pod_cidrs() {
    let world = World::new("ctlroutes").await;
    let a = world.instance(0).await;
    let cloud = provider(&world.config("")).await;
    let mut env = Env::new(cloud).await;
    let mut node = ready_node(&a);
    node.spec.as_mut().unwrap().pod_cidr = Some("10.244.7.0/24".into());
    node.spec.as_mut().unwrap().pod_cidrs = Some(vec!["10.244.7.0/24".into()]);
    env.create_node(&node).await;
    env.run_route_controller("10.244.0.0/16");

    let table = world.route_table_id.clone();
    let has_route = |present: bool| {
        let ec2 = world.ec2.clone();
        let table = table.clone();
        let id = a.id.clone();
        async move {
            let out = ec2
                .describe_route_tables()
                .route_table_ids(&table)
                .send()
                .await
                .unwrap();
            let found = out.route_tables()[0].routes().iter().any(|r| {
                r.destination_cidr_block() == Some("10.244.7.0/24")
                    && r.instance_id() == Some(id.as_str())
            });
            found == present
        }
    };
    wait_until(
        Duration::from_secs(20),
        "route to the node's pod CIDR",
        || has_route(true),
    )
    .await;
    env.nodes()
        .delete(&a.private_dns_name, &DeleteParams::default())
        .await
        .unwrap();
    // The controller never deletes every route on an empty node list; a second node keeps the list
    // non-empty so the deleted node's route goes.
    let b = world.instance(1).await;
    let mut other = ready_node(&b);
    other.spec.as_mut().unwrap().pod_cidrs = Some(vec!["10.244.8.0/24".into()]);
    other.spec.as_mut().unwrap().pod_cidr = Some("10.244.8.0/24".into());
    env.create_node(&other).await;
    wait_until(
        Duration::from_secs(20),
        "route of the deleted node removed",
        || has_route(false),
    )
    .await;
    env.stop().await;
}

#[tokio::test]
async fn ebs_volumes_are_labelled_by_the_controller() {
    let world = World::new("ctlpv").await;
    let volume = world
        .ec2
        .create_volume()
        .availability_zone("us-east-1a")
        .size(8)
        .send()
        .await
        .unwrap()
        .volume_id()
        .unwrap()
        .to_string();
    let cloud = provider(&world.config("")).await;
    let mut env = Env::new(cloud).await;
    env.run(ControllerConfig::default(), &[ControllerName::PvLabel]);
    let pv = PersistentVolume {
        metadata: kube::api::ObjectMeta {
            name: Some("data".into()),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            aws_elastic_block_store: Some(AWSElasticBlockStoreVolumeSource {
                volume_id: volume.clone(),
                ..Default::default()
            }),
            capacity: Some(BTreeMap::from([(
                "storage".to_string(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity("8Gi".into()),
            )])),
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let api: Api<PersistentVolume> = Api::all(env.client.clone());
    api.create(&PostParams::default(), &pv).await.unwrap();
    wait_until(Duration::from_secs(20), "zone label on the PV", || async {
        api.get("data").await.ok().is_some_and(|pv| {
            let labels = pv.metadata.labels.unwrap_or_default();
            labels
                .get("topology.kubernetes.io/zone")
                .map(String::as_str)
                == Some("us-east-1a")
                && labels
                    .get("topology.kubernetes.io/region")
                    .map(String::as_str)
                    == Some("us-east-1")
        })
    })
    .await;
    env.stop().await;
}

/// A Service whose node rules would take the node group past the rule limit gets a `SyncLoadBalancerFailed`
/// Warning naming the group, the limit, where it comes from and how to raise it; no rule is written and no
/// load balancer made. A Service that fits gets its load balancer.
#[tokio::test]
async fn rule_limit_refusals_become_warnings() {
    let world = World::new("ctlbudget").await;
    let a = world.instance(0).await;
    let cloud = provider(&world.config("SecurityGroupRulesLimit = 3\n")).await;
    let mut env = Env::new(cloud.clone()).await;
    env.create_node(&ready_node(&a)).await;
    env.run_service_controller();

    // Two source ranges: 2 client, 2 health-check and 2 ICMP rules in the node group.
    let ranges = (
        cloud_provider::ANNOTATION_LOAD_BALANCER_SOURCE_RANGES,
        "203.0.113.0/24,198.51.100.0/24",
    );
    let wide = nlb_service("wide", &[("http", 80, "TCP", 0)], &[ranges]);
    let created = env
        .services()
        .create(&PostParams::default(), &wide)
        .await
        .unwrap();
    let expected = format!(
        "security group rule limit: node security group {} would need 6 inbound IPv4 rules (it holds 0), \
         more than the limit of 3 (SecurityGroupRulesLimit in the [Global] section of the cloud config); no \
         security group rule was changed. To raise it, raise the AWS quota \"Inbound or outbound rules per \
         security group\" (Service Quotas code L-0EA8095F",
        world.node_sg
    );
    wait_until(
        Duration::from_secs(30),
        "rule-limit Warning on Service wide",
        || async {
            env.warnings("wide", "SyncLoadBalancerFailed")
                .await
                .iter()
                .any(|note| note.contains(&expected))
        },
    )
    .await;
    assert!(
        crate::common::sg_rules(&world.ec2, &world.node_sg)
            .await
            .is_empty()
    );
    let found = elb()
        .describe_load_balancers()
        .names(default_load_balancer_name(&created))
        .send()
        .await;
    assert!(
        found.is_err(),
        "the refused Service must have no load balancer"
    );

    // From everyone: one client rule and one ICMP rule fit.
    let fits = nlb_service("fits", &[("http", 80, "TCP", 0)], &[]);
    env.services()
        .create(&PostParams::default(), &fits)
        .await
        .unwrap();
    wait_until(
        Duration::from_secs(30),
        "status of Service fits",
        || async {
            env.services()
                .get("fits")
                .await
                .ok()
                .and_then(|s| s.status?.load_balancer?.ingress)
                .is_some_and(|i| !i.is_empty())
        },
    )
    .await;
    assert_eq!(
        crate::common::sg_rules(&world.ec2, &world.node_sg)
            .await
            .len(),
        2
    );
    env.stop().await;
}

/// The tags of an instance, as EC2 holds them.
async fn instance_tags(world: &World, id: &str) -> BTreeMap<String, String> {
    let out = world
        .ec2
        .describe_tags()
        .filters(crate::common::filter("resource-id", &[id]))
        .send()
        .await
        .expect("describe tags");
    out.tags()
        .iter()
        .map(|t| {
            (
                t.key().unwrap_or_default().to_string(),
                t.value().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// The tagging controller with this provider, as cloud-provider-aws's: `--tags` on the instances of the
/// nodes (batched, a missing instance not failing the others), the `k8s.io/cloud-provider-aws` label with
/// the tags' checksum, a node whose provider ID names no instance (Fargate) skipped, and the tags removed
/// from the instance of a deleted node while the cluster's own tags stay.
#[tokio::test]
async fn tagging_controller_tags_instances_of_nodes() {
    let world = World::new("ctltagging").await;
    let a = world.instance(0).await;
    let b = world.instance(1).await;
    let cloud = provider(&world.config("")).await;
    let mut env = Env::new(cloud).await;
    let tags = BTreeMap::from([
        ("team".to_string(), "ml".to_string()),
        ("cost-center".to_string(), "42".to_string()),
    ]);
    env.run(
        ControllerConfig {
            tagging: cloud_controllers::TaggingConfig {
                tags: tags.clone(),
                resources: vec!["instance".to_string()],
                batching: true,
                ..Default::default()
            },
            ..ControllerConfig::default()
        },
        &[ControllerName::Tagging],
    );
    env.create_node(&ready_node(&a)).await;
    env.create_node(&ready_node(&b)).await;
    let mut fargate = Node::default();
    fargate.metadata.name = Some("fargate-ip-10-0-0-1".to_string());
    fargate.spec = Some(NodeSpec {
        provider_id: Some("aws:///us-east-1a/fargate-ip-10-0-0-1".to_string()),
        ..Default::default()
    });
    env.create_node(&fargate).await;
    let checksum = cloud_controllers::tagging::tags_checksum(&tags);
    for inst in [&a, &b] {
        wait_until(
            Duration::from_secs(20),
            "instance tagged, node labelled",
            || async {
                let have = instance_tags(&world, &inst.id).await;
                let node = env.node(&inst.private_dns_name).await.unwrap();
                tags.iter().all(|(k, v)| have.get(k) == Some(v))
                    && label(&node, "k8s.io/cloud-provider-aws") == Some(checksum.as_str())
            },
        )
        .await;
    }
    let fargate = env.node("fargate-ip-10-0-0-1").await.unwrap();
    assert_eq!(label(&fargate, "k8s.io/cloud-provider-aws"), None);

    env.nodes()
        .delete(&b.private_dns_name, &DeleteParams::default())
        .await
        .unwrap();
    wait_until(
        Duration::from_secs(20),
        "the deleted node's instance untagged",
        || async {
            let have = instance_tags(&world, &b.id).await;
            !have.contains_key("team") && !have.contains_key("cost-center")
        },
    )
    .await;
    let left = instance_tags(&world, &b.id).await;
    assert_eq!(
        left.get(&world.cluster_tag).map(String::as_str),
        Some("owned")
    );
    assert!(instance_tags(&world, &a.id).await.contains_key("team"));
    assert!(env.cloud.metrics().request_count("CreateTags") >= 1);
    env.stop().await;
}
