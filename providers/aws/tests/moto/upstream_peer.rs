//! The upstream AWS cloud-controller-manager as a live peer: kubernetes/cloud-provider-aws's AWS provider
//! (`hack/upstream/aws`: built unmodified from its Go module, in k8s.io/cloud-provider's command) runs its
//! service controller against moto and a real kube-apiserver, and this provider must agree with what it does.
//!
//! * Upstream first ([`upstream_load_balancers_are_adopted_without_a_change`]): upstream creates the load
//!   balancers of a set of Services (classic ELBs with and without every annotation family, a classic for an
//!   `externalTrafficPolicy: Local` Service, an internet-facing and an internal NLB); once every Service has
//!   its ingress, upstream is stopped and this provider ensures and updates every Service with the same
//!   Nodes. It must make no mutating AWS call and report the hostname upstream wrote into the status.
//! * Ours first ([`upstream_keeps_our_load_balancers`]): this provider creates the load balancers of the
//!   same kind of Services and their statuses are written, then upstream starts and syncs them through a
//!   counting proxy in front of moto. Upstream must make no mutating call except the re-applies its classic
//!   sync does unconditionally (listed in [`upstream_reapplies`]) and leave the statuses as they are.
//!
//!
//! Each runs twice: with the default cloud config, and in the mode of cloud-provider-aws 1.37's newer
//! features ([`MANAGED`]): `NLBSecurityGroupMode = Managed` (NLBs with a managed security group, and one
//! with the user's group of the security-groups annotation) and the tagging controller on both sides (the
//! instances tagged and the Nodes labelled by one are left alone by the other: no CreateTags).
//!
//! [`every_cloud_config_key_of_upstream_is_accepted`] reads the cloud-config keys of upstream's config
//! struct from the binary and runs the provider with each.
//!
//! They need the binary and a cluster, so they are `#[ignore]`d: `hack/upstream/test.sh` (part of
//! `make test`) builds both and runs them with `UPSTREAM_AWS_CCM` (the binary), `PEER_KUBECONFIG` (an admin
//! kubeconfig of a cluster that runs no CCM of its own) and `PEER_LOG_DIR` (where upstream's logs go,
//! `target/upstream/logs` by default). Run without them, they fail saying what to set. They share the
//! cluster's Nodes, so they run one at a time whatever the test-thread count.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use cloud_provider::{LoadBalancer, default_load_balancer_name};
use k8s_openapi::api::core::v1::{Event, Namespace, Node, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use parking_lot::Mutex;
use provider_aws::load_balancer::classic::spec::*;
use provider_aws::load_balancer::spec::*;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::common::{ACCESS_KEY, Instance, REGION, SECRET_KEY, World, moto, provider};

/// The label on every Node, Namespace and Service these tests create, so a later run can remove them.
const RUN_LABEL: &str = "aws-peer.test/run";
/// How long upstream may take to give every Service an ingress.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(180);
/// The cluster name both CCMs get (`--cluster-name`; it is part of the managed NLB security groups' names).
const CLUSTER_NAME: &str = "kubernetes";
/// The tags of the tagging controller, on both sides.
const TAGS: &str = "team=ml,cost-center=42";

/// What both CCMs run with beyond the defaults: `[Global]` lines of the cloud config, and whether the
/// tagging controller runs (upstream: `--controllers=service,tagging --tags ... --resources instance`).
struct Mode {
    global: &'static str,
    tagging: bool,
    /// The Services, given a security group of the world's VPC that is the user's.
    services: fn(&str) -> Vec<Service>,
}

/// The default cloud config, the service controller only.
const PLAIN: Mode = Mode {
    global: "",
    tagging: false,
    services,
};

/// Managed NLB security groups, the user's groups on an NLB, and the tagging controller.
const MANAGED: Mode = Mode {
    global: "NLBSecurityGroupMode = Managed\n",
    tagging: true,
    services: managed_services,
};

/// Where the peer is, from the environment.
struct Peer {
    ccm: PathBuf,
    kubeconfig: PathBuf,
    log_dir: PathBuf,
}

fn peer() -> Peer {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let (Some(ccm), Some(kubeconfig)) = (var("UPSTREAM_AWS_CCM"), var("PEER_KUBECONFIG")) else {
        panic!(
            "the upstream peer tests need UPSTREAM_AWS_CCM (upstream's aws-cloud-controller-manager, built by \
             hack/upstream/build.sh into target/upstream/bin/upstream-aws-ccm) and PEER_KUBECONFIG (an admin \
             kubeconfig of a cluster without a CCM, e.g. from `target/realkube/bin/realkube up --dir DIR`: \
             DIR/admin.kubeconfig); hack/upstream/test.sh sets both"
        )
    };
    assert!(
        ccm.exists(),
        "UPSTREAM_AWS_CCM={} does not exist",
        ccm.display()
    );
    let log_dir = var("PEER_LOG_DIR").unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/upstream/logs")
    });
    std::fs::create_dir_all(&log_dir).expect("create the log directory");
    Peer {
        ccm,
        kubeconfig,
        log_dir,
    }
}

/// The two tests share the cluster's Nodes: one at a time.
static CLUSTER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn kube_client(peer: &Peer) -> kube::Client {
    let kubeconfig = Kubeconfig::read_from(&peer.kubeconfig).expect("read PEER_KUBECONFIG");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("PEER_KUBECONFIG is usable");
    kube::Client::try_from(config).expect("kube client")
}

fn run_labels(run: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(RUN_LABEL.to_string(), run.to_string())])
}

/// Removes what earlier runs left: their Services (without waiting for a CCM to release their
/// load-balancer finalizer), Nodes and Namespaces.
async fn remove_earlier_runs(client: &kube::Client) {
    let labelled = ListParams::default().labels(RUN_LABEL);
    let services: Api<Service> = Api::all(client.clone());
    for svc in services.list(&labelled).await.expect("list Services") {
        let ns = svc.metadata.namespace.clone().unwrap();
        let name = svc.metadata.name.clone().unwrap();
        let api: Api<Service> = Api::namespaced(client.clone(), &ns);
        let _ = api
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await;
        let _ = api.delete(&name, &DeleteParams::default()).await;
    }
    let nodes: Api<Node> = Api::all(client.clone());
    for node in nodes.list(&labelled).await.expect("list Nodes") {
        let _ = nodes
            .delete(
                node.metadata.name.as_deref().unwrap(),
                &DeleteParams::default(),
            )
            .await;
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in namespaces.list(&labelled).await.expect("list Namespaces") {
        let _ = namespaces
            .delete(
                ns.metadata.name.as_deref().unwrap(),
                &DeleteParams::default(),
            )
            .await;
    }
    // Node deletion is immediate; wait for it so upstream never sees an earlier run's Node.
    crate::common::wait_until(Duration::from_secs(30), "earlier runs' Nodes gone", || {
        let nodes = nodes.clone();
        let labelled = labelled.clone();
        async move {
            nodes
                .list(&labelled)
                .await
                .map(|l| l.items.is_empty())
                .unwrap_or(false)
        }
    })
    .await;
}

/// A Namespace of this run, named after the world's cluster ID and this process (unique across runs).
async fn create_namespace(client: &kube::Client, world: &World) -> String {
    let name = format!("{}-{}", world.cluster_id, std::process::id());
    let mut ns = Namespace::default();
    ns.metadata.name = Some(name.clone());
    ns.metadata.labels = Some(run_labels(&name));
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("create Namespace");
    name
}

/// Registers the instances as a kubelet would (named by private DNS name, with a provider ID, Ready, with
/// the instance's address) and returns the Nodes as the API server has them.
async fn create_nodes(client: &kube::Client, run: &str, instances: &[Instance]) -> Vec<Node> {
    let api: Api<Node> = Api::all(client.clone());
    let mut nodes = Vec::new();
    for instance in instances {
        let mut node =
            crate::common::node_with_id(&instance.private_dns_name, &instance.provider_id());
        node.metadata.labels = Some(run_labels(run));
        api.create(&PostParams::default(), &node)
            .await
            .expect("create Node");
        let status = json!({"status": {
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "kubelet is posting ready status"}],
            "addresses": [{"type": "InternalIP", "address": instance.private_ip},
                          {"type": "Hostname", "address": instance.private_dns_name},
                          {"type": "InternalDNS", "address": instance.private_dns_name}],
        }});
        nodes.push(
            api.patch_status(
                &instance.private_dns_name,
                &PatchParams::default(),
                &Patch::Merge(status),
            )
            .await
            .expect("Node status"),
        );
    }
    nodes
}

/// The Services of managed mode: a managed NLB, an internal one with two ports and a source range, and one
/// with the user's security group (a group of the world's VPC made for it).
fn managed_services(byo: &str) -> Vec<Service> {
    vec![
        service("nlb", &[("http", 80)], &[(ANN_TYPE, "nlb")], &[], false),
        service(
            "nlb-internal",
            &[("http", 80), ("https", 443)],
            &[(ANN_TYPE, "nlb"), (ANN_INTERNAL, "true")],
            &["10.0.0.0/8"],
            false,
        ),
        service(
            "nlb-byo",
            &[("http", 80)],
            &[(ANN_TYPE, "nlb"), (ANN_SECURITY_GROUPS, byo)],
            &[],
            false,
        ),
    ]
}

/// The Services of the default mode.
fn services(_byo: &str) -> Vec<Service> {
    let tls_annotations = crate::takeover::CLASSIC_TLS_ANNOTATIONS;
    vec![
        // Upstream's default: a classic ELB, no annotation at all.
        service("plain", &[("http", 80)], &[], &[], false),
        // Internal, TLS on one port with an SSL backend and a negotiation policy, proxy protocol, every
        // attribute, health-check overrides, extra tags and a source range.
        service(
            "tls",
            &[("http", 80), ("https", 443)],
            tls_annotations,
            &["10.0.0.0/8"],
            false,
        ),
        // externalTrafficPolicy Local: HTTP checks of the health-check node port.
        service("local", &[("http", 80)], &[], &[], true),
        service("nlb", &[("http", 80)], &[(ANN_TYPE, "nlb")], &[], false),
        service(
            "nlb-internal",
            &[("http", 80), ("dns", 53)],
            &[(ANN_TYPE, "nlb"), (ANN_INTERNAL, "true")],
            &[],
            false,
        ),
    ]
}

fn service(
    name: &str,
    ports: &[(&str, i32)],
    annotations: &[(&str, &str)],
    source_ranges: &[&str],
    local: bool,
) -> Service {
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "annotations": annotations.iter().map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        },
        "spec": {
            "type": "LoadBalancer",
            "ports": ports.iter().map(|(name, port)| json!({"name": name, "port": port, "protocol": "TCP"}))
                .collect::<Vec<_>>(),
            "loadBalancerSourceRanges": (!source_ranges.is_empty()).then_some(source_ranges),
            "externalTrafficPolicy": if local { "Local" } else { "Cluster" },
        },
    }))
    .expect("a valid Service")
}

/// Creates `services` in `ns` and returns them as the API server has them (UIDs, node ports).
async fn create_services(client: &kube::Client, ns: &str, services: Vec<Service>) -> Vec<Service> {
    let api: Api<Service> = Api::namespaced(client.clone(), ns);
    let mut created = Vec::new();
    for mut svc in services {
        svc.metadata.labels = Some(run_labels(ns));
        created.push(
            api.create(&PostParams::default(), &svc)
                .await
                .expect("create Service"),
        );
    }
    created
}

fn ingress_hostname(svc: &Service) -> Option<String> {
    svc.status
        .as_ref()?
        .load_balancer
        .as_ref()?
        .ingress
        .as_ref()?
        .first()?
        .hostname
        .clone()
}

fn name_of(svc: &Service) -> &str {
    svc.metadata.name.as_deref().unwrap_or_default()
}

/// Upstream's CCM running as a child process, killed when dropped.
struct Upstream {
    child: Option<Child>,
    log: PathBuf,
}

impl Upstream {
    /// Starts upstream's service controller (and nothing else) for `world`, its AWS endpoints at
    /// `aws_url`: a cloud-config in "master elsewhere" mode (VPC, subnet and cluster ID given, so no
    /// instance metadata is needed) with a `[ServiceOverride]` for every AWS service it calls.
    fn start(peer: &Peer, world: &World, aws_url: &str, run: &str, mode: &Mode) -> Upstream {
        let config = peer.log_dir.join(format!("{run}.cloud-config"));
        let mut text = format!(
            "[Global]\nRegion = {REGION}\nVPC = {}\nSubnetID = {}\nKubernetesClusterID = {}\n{}",
            world.vpc_id, world.private_subnets[0].0, world.cluster_id, mode.global
        );
        for (section, service) in [
            ("ec2", "EC2"),
            ("elb", "Elastic Load Balancing"),
            ("elbv2", "Elastic Load Balancing v2"),
        ] {
            text.push_str(&format!(
                "\n[ServiceOverride \"{section}\"]\nService = {service}\nRegion = {REGION}\nURL = {aws_url}\n\
                 SigningRegion = {REGION}\n"
            ));
        }
        std::fs::write(&config, text).expect("write upstream's cloud-config");
        let log = peer.log_dir.join(format!("{run}.log"));
        let out = std::fs::File::create(&log).expect("create upstream's log");
        let controllers: Vec<String> = if mode.tagging {
            vec![
                "--controllers=service,tagging".to_string(),
                format!("--tags={TAGS}"),
                "--resources=instance".to_string(),
            ]
        } else {
            vec!["--controllers=service".to_string()]
        };
        let child = Command::new(&peer.ccm)
            .args(controllers)
            .args([
                "--cloud-provider=aws",
                &format!("--cloud-config={}", config.display()),
                &format!("--kubeconfig={}", peer.kubeconfig.display()),
                &format!("--authentication-kubeconfig={}", peer.kubeconfig.display()),
                &format!("--authorization-kubeconfig={}", peer.kubeconfig.display()),
                "--leader-elect=false",
                "--secure-port=0",
                &format!("--cluster-name={CLUSTER_NAME}"),
                "--concurrent-service-syncs=5",
                // Every AWS request with its parameters ("AWS API Send: ...").
                "--v=4",
            ])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", std::env::temp_dir())
            .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
            .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
            .env("AWS_REGION", REGION)
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log file"))
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", peer.ccm.display()));
        eprintln!("upstream-peer: upstream runs, logging to {}", log.display());
        Upstream {
            child: Some(child),
            log,
        }
    }

    /// The last `lines` lines of upstream's log.
    fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Panics with upstream's log tail when it has exited.
    fn assert_running(&mut self) {
        if let Some(status) = self
            .child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
        {
            panic!(
                "upstream exited ({status}); the end of its log ({}):\n{}",
                self.log.display(),
                self.log_tail(60)
            );
        }
    }

    /// SIGTERM, then SIGKILL after 10 s.
    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        for _ in 0..100 {
            if child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Waits until every Service of `ns` has an ingress; on timeout panics naming those without one, with
/// upstream's log tail.
async fn wait_for_ingress(
    client: &kube::Client,
    ns: &str,
    upstream: &mut Upstream,
    count: usize,
) -> Vec<Service> {
    let api: Api<Service> = Api::namespaced(client.clone(), ns);
    let deadline = tokio::time::Instant::now() + UPSTREAM_TIMEOUT;
    loop {
        upstream.assert_running();
        let list = api
            .list(&ListParams::default())
            .await
            .expect("list Services")
            .items;
        let missing: Vec<&str> = list
            .iter()
            .filter(|s| ingress_hostname(s).is_none())
            .map(name_of)
            .collect();
        if list.len() == count && missing.is_empty() {
            return list;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!(
                "upstream gave no ingress to {missing:?} within {UPSTREAM_TIMEOUT:?}; the end of its log ({}):\n{}",
                upstream.log.display(),
                upstream.log_tail(80)
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The world of one test: two instances in two zones, registered as Nodes, and the Services created.
struct Setup {
    client: kube::Client,
    world: World,
    ns: String,
    nodes: Vec<Node>,
    services: Vec<Service>,
    /// The user's security group of the world's VPC.
    byo: String,
}

async fn setup(peer: &Peer, name: &str, mode: &Mode) -> Setup {
    let client = kube_client(peer).await;
    remove_earlier_runs(&client).await;
    let world = World::new(name).await;
    let instances = [world.instance(0).await, world.instance(1).await];
    let ns = create_namespace(&client, &world).await;
    let nodes = create_nodes(&client, &ns, &instances).await;
    let byo = world.user_security_group(&format!("{name}-user")).await;
    let services = create_services(&client, &ns, (mode.services)(&byo)).await;
    Setup {
        client,
        world,
        ns,
        nodes,
        services,
        byo,
    }
}

#[tokio::test]
#[ignore = "needs UPSTREAM_AWS_CCM and PEER_KUBECONFIG; hack/upstream/test.sh runs it"]
async fn upstream_load_balancers_are_adopted_without_a_change() {
    adopt_upstreams(&PLAIN, "peerup").await;
}

#[tokio::test]
#[ignore = "needs UPSTREAM_AWS_CCM and PEER_KUBECONFIG; hack/upstream/test.sh runs it"]
async fn upstream_security_groups_and_tags_are_adopted_without_a_change() {
    adopt_upstreams(&MANAGED, "peerupsg").await;
}

/// In managed mode, each NLB has the group it should: the Service's managed group, or the user's group of
/// the annotation.
async fn check_nlb_groups(s: &Setup, differences: &mut Vec<String>) {
    for svc in &s.services {
        let name = name_of(svc);
        let want = if svc
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(ANN_SECURITY_GROUPS))
        {
            s.byo.clone()
        } else {
            let group = provider_aws::load_balancer::nlb_security_group::managed_group_name(
                CLUSTER_NAME,
                &s.ns,
                name,
                svc.metadata.uid.as_deref().unwrap(),
            );
            let found = s
                .world
                .ec2
                .describe_security_groups()
                .filters(crate::common::filter("group-name", &[&group]))
                .send()
                .await
                .expect("describe security groups");
            match found.security_groups().first().and_then(|g| g.group_id()) {
                Some(id) => id.to_string(),
                None => {
                    differences.push(format!("{name}: no managed security group {group}"));
                    continue;
                }
            }
        };
        let lb = crate::common::elb()
            .describe_load_balancers()
            .names(default_load_balancer_name(svc))
            .send()
            .await
            .expect("describe load balancer");
        let have = lb.load_balancers()[0].security_groups().to_vec();
        if have != [want.clone()] {
            differences.push(format!("{name}: the NLB has groups {have:?}, not [{want}]"));
        }
    }
}

/// The nodes' tagged label, by node name.
async fn tagged_labels(client: &kube::Client, nodes: &[Node]) -> BTreeMap<String, Option<String>> {
    let api: Api<Node> = Api::all(client.clone());
    let mut out = BTreeMap::new();
    for node in nodes {
        let name = node.metadata.name.clone().unwrap();
        let now = api.get(&name).await.expect("get Node");
        let label = now
            .metadata
            .labels
            .and_then(|l| l.get(provider_aws::resource_tags::TAGGED_LABEL).cloned());
        out.insert(name, label);
    }
    out
}

/// Waits until every node carries the tagged label of [`TAGS`].
async fn wait_for_tagged_nodes(client: &kube::Client, nodes: &[Node], who: &str) {
    let checksum = cloud_controllers::tagging::tags_checksum(&tags());
    crate::common::wait_until(
        UPSTREAM_TIMEOUT,
        &format!("{who} labels every node"),
        || async {
            tagged_labels(client, nodes)
                .await
                .values()
                .all(|l| l.as_deref() == Some(checksum.as_str()))
        },
    )
    .await;
}

fn tags() -> BTreeMap<String, String> {
    TAGS.split(',')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Runs our tagging controller on the peer cluster with `cloud`, until the nodes are labelled (when
/// `until_labelled`) or for three seconds, and stops it; it must not have failed.
async fn run_our_tagging(
    client: &kube::Client,
    cloud: Arc<provider_aws::AwsCloud>,
    nodes: &[Node],
    until_labelled: bool,
) {
    let ctx = cloud_controllers::ControllerContext {
        client: client.clone(),
        event_client: client.clone(),
        cloud,
        config: Arc::new(cloud_controllers::ControllerConfig {
            tagging: cloud_controllers::TaggingConfig {
                tags: tags(),
                resources: vec!["instance".to_string()],
                ..Default::default()
            },
            ..Default::default()
        }),
        metrics: cloud_controllers::ControllerMetrics::default(),
        health: cloud_controllers::HealthRegistry::new(),
        identity: "aws-peer_0000".to_string(),
    };
    let shutdown = tokio_util::sync::CancellationToken::new();
    let token = shutdown.clone();
    let task = tokio::spawn(async move {
        cloud_controllers::run_controllers(
            ctx,
            &[cloud_controllers::ControllerName::Tagging],
            token,
        )
        .await
    });
    if until_labelled {
        wait_for_tagged_nodes(client, nodes, "ours").await;
    } else {
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    assert!(
        !task.is_finished(),
        "our tagging controller stopped early: {:?}",
        task.await
    );
    shutdown.cancel();
    let stopped = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("our tagging controller stops")
        .expect("no panic");
    assert!(stopped.is_ok(), "{stopped:?}");
}

/// Upstream creates the load balancers (and tags the instances) in `mode`; ours adopts them without a
/// mutating call.
async fn adopt_upstreams(mode: &Mode, name: &str) {
    let peer = peer();
    let _cluster = CLUSTER.lock().await;
    let s = setup(&peer, name, mode).await;

    let proxy = CountingProxy::start(&moto().url).await;
    let run = format!("aws-peer-{}", s.ns);
    let mut upstream = Upstream::start(&peer, &s.world, &proxy.url, &run, mode);
    let synced = wait_for_ingress(&s.client, &s.ns, &mut upstream, s.services.len()).await;
    if mode.tagging {
        wait_for_tagged_nodes(&s.client, &s.nodes, "upstream").await;
    }
    upstream.stop();

    let cloud = provider(&s.world.config(mode.global)).await;
    let mut differences = Vec::new();
    let mut before = BTreeMap::new();
    let node_rules = crate::common::sg_rules(&s.world.ec2, &s.world.node_sg).await;
    for svc in &synced {
        let name = name_of(svc);
        let upstream_hostname = ingress_hostname(svc);
        match cloud
            .ensure_load_balancer(CLUSTER_NAME, svc, &s.nodes)
            .await
        {
            Ok(status) => {
                let ours = status
                    .ingress
                    .and_then(|i| i.first().and_then(|i| i.hostname.clone()));
                if ours != upstream_hostname {
                    differences.push(format!(
                        "{name}: ours reports hostname {ours:?}, upstream wrote {upstream_hostname:?}"
                    ));
                }
            }
            Err(e) => differences.push(format!("{name}: ensure_load_balancer failed: {e}")),
        }
        if let Err(e) = cloud
            .update_load_balancer(CLUSTER_NAME, svc, &s.nodes)
            .await
        {
            differences.push(format!("{name}: update_load_balancer failed: {e}"));
        }
        let after = cloud.metrics().mutating_calls();
        let made: BTreeMap<&String, u64> = after
            .iter()
            .map(|(op, n)| (op, n - before.get(op).copied().unwrap_or(0)))
            .filter(|(_, n)| *n > 0)
            .collect();
        if !made.is_empty() {
            differences.push(format!(
                "{name} ({}): ours made mutating calls {made:?}",
                default_load_balancer_name(svc)
            ));
        }
        before = after;
    }
    let node_rules_after = crate::common::sg_rules(&s.world.ec2, &s.world.node_sg).await;
    for rule in &node_rules {
        if !node_rules_after.contains(rule) {
            differences.push(format!(
                "ours removed the node security group's rule {rule:?}"
            ));
        }
    }
    for rule in &node_rules_after {
        if !node_rules.contains(rule) {
            differences.push(format!(
                "ours added the node security group's rule {rule:?}"
            ));
        }
    }
    if mode.tagging {
        check_nlb_groups(&s, &mut differences).await;
        run_our_tagging(&s.client, cloud.clone(), &s.nodes, false).await;
        for op in ["CreateTags", "DeleteTags"] {
            let calls = cloud.metrics().request_count(op);
            if calls > 0 {
                differences.push(format!("ours made {calls} {op} calls on tagged instances"));
            }
        }
    }
    assert!(
        differences.is_empty(),
        "adopting what upstream created is not a no-op (upstream's log: {}):\n  {}",
        upstream.log.display(),
        differences.join("\n  ")
    );
    remove_earlier_runs(&s.client).await;
}

/// One AWS request upstream made: its `Action` and the other form parameters.
#[derive(Debug, Clone)]
struct Request {
    action: String,
    params: BTreeMap<String, String>,
}

/// A plain-HTTP proxy in front of moto that records every request's form parameters and gives new classic
/// ELBs AWS's default health check ([`default_health_check`]). One request per connection (it answers
/// `Connection: close`), which the AWS SDKs handle by reconnecting.
struct CountingProxy {
    url: String,
    requests: Arc<Mutex<Vec<Request>>>,
    task: tokio::task::JoinHandle<()>,
}

impl CountingProxy {
    async fn start(target: &str) -> CountingProxy {
        let target = target
            .strip_prefix("http://")
            .expect("moto speaks plain HTTP")
            .to_string();
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let recorded = requests.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let (target, recorded) = (target.clone(), recorded.clone());
                tokio::spawn(async move {
                    if let Err(e) = relay(client, &target, &recorded).await {
                        eprintln!("upstream-peer: proxy: {e}");
                    }
                });
            }
        });
        CountingProxy {
            url,
            requests,
            task,
        }
    }

    fn requests(&self) -> Vec<Request> {
        self.requests.lock().clone()
    }
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Relays one request to `target` and its response back, recording the request's form parameters.
async fn relay(
    mut client: TcpStream,
    target: &str,
    recorded: &Mutex<Vec<Request>>,
) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let mut chunk = [0u8; 8192];
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Ok(()); // closed without a request
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let content_length = header_lines(&head)
        .find_map(|(k, v)| {
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.parse::<usize>().ok())
        })
        .flatten()
        .unwrap_or(0);
    while buf.len() < head_end + content_length {
        let mut chunk = [0u8; 8192];
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::Error::other("request body cut short"));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = String::from_utf8_lossy(&buf[head_end..head_end + content_length]).to_string();
    let mut params = form_params(&body);
    let action = params.remove("Action");
    let is_describe_listeners = action.as_deref() == Some("DescribeListeners");
    let classic_instance_port = (action.as_deref() == Some("CreateLoadBalancer"))
        .then(|| params.get("Listeners.member.1.InstancePort").cloned())
        .flatten();
    if let Some(action) = action {
        recorded.lock().push(Request {
            action,
            params: params.clone(),
        });
    }

    let mut server = TcpStream::connect(target).await?;
    server.write_all(&with_connection_close(&head)).await?;
    server.write_all(&buf[head_end..]).await?;
    let mut response = Vec::new();
    server.read_to_end(&mut response).await?;
    let response_head_end = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + 4)
        .ok_or_else(|| std::io::Error::other("response without a head"))?;
    let mut response_head = String::from_utf8_lossy(&response[..response_head_end]).to_string();
    if let (Some(port), true) = (classic_instance_port, response_head.contains(" 200 ")) {
        default_health_check(&params["LoadBalancerName"], &port).await;
    }
    let mut response_body = response[response_head_end..].to_vec();
    if is_describe_listeners {
        let body = without_plain_listener_policies(&String::from_utf8_lossy(&response_body));
        response_head = with_content_length(&response_head, body.len());
        response_body = body.into_bytes();
    }
    client
        .write_all(&with_connection_close(&response_head))
        .await?;
    client.write_all(&response_body).await?;
    client.shutdown().await
}

/// A DescribeListeners answer without the SSL policy of TCP and UDP listeners: moto gives every new listener
/// one (AWS gives them none), and upstream "corrects" a TCP listener with a policy by ModifyListener.
fn without_plain_listener_policies(body: &str) -> String {
    body.split_inclusive("</member>")
        .map(|member| {
            let plain = ["<Protocol>TCP</Protocol>", "<Protocol>UDP</Protocol>"]
                .iter()
                .any(|p| member.contains(p));
            match (
                plain,
                member.find("<SslPolicy>"),
                member.find("</SslPolicy>"),
            ) {
                (true, Some(start), Some(end)) => {
                    format!(
                        "{}{}",
                        &member[..start],
                        &member[end + "</SslPolicy>".len()..]
                    )
                }
                _ => member.to_string(),
            }
        })
        .collect()
}

/// A response head with its Content-Length set to `length`.
fn with_content_length(head: &str, length: usize) -> String {
    head.split("\r\n")
        .map(|line| {
            if line.to_ascii_lowercase().starts_with("content-length:") {
                format!("Content-Length: {length}")
            } else {
                line.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\r\n")
}

/// Gives a new classic ELB the health check AWS gives every classic ELB it creates (TCP to the first
/// listener's instance port, interval 30 s, timeout 5 s, thresholds 10 and 2). moto creates none, and
/// upstream's sync dereferences the described health check.
async fn default_health_check(name: &str, instance_port: &str) {
    use aws_sdk_elasticloadbalancing::types::HealthCheck;
    crate::common::elb_classic()
        .configure_health_check()
        .load_balancer_name(name)
        .health_check(
            HealthCheck::builder()
                .target(format!("TCP:{instance_port}"))
                .interval(30)
                .timeout(5)
                .healthy_threshold(10)
                .unhealthy_threshold(2)
                .build()
                .expect("a complete health check"),
        )
        .send()
        .await
        .expect("configure the default health check in moto");
}

/// The header lines of an HTTP head as (name, value).
fn header_lines(head: &str) -> impl Iterator<Item = (&str, &str)> {
    head.split("\r\n")
        .skip(1)
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.trim(), v.trim()))
}

/// The head with its `Connection` header replaced by `Connection: close`.
fn with_connection_close(head: &str) -> Vec<u8> {
    let mut lines: Vec<&str> = head
        .trim_end_matches("\r\n")
        .split("\r\n")
        .filter(|line| {
            !line
                .split_once(':')
                .is_some_and(|(k, _)| k.trim().eq_ignore_ascii_case("connection"))
        })
        .collect();
    lines.push("Connection: close");
    format!("{}\r\n\r\n", lines.join("\r\n")).into_bytes()
}

/// Decodes an `application/x-www-form-urlencoded` body.
fn form_params(body: &str) -> BTreeMap<String, String> {
    fn decode(s: &str) -> String {
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < bytes.len() => {
                    let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                    match u8::from_str_radix(hex, 16) {
                        Ok(b) => {
                            out.push(b);
                            i += 2;
                        }
                        Err(_) => out.push(b'%'),
                    }
                }
                b => out.push(b),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).to_string()
    }
    body.split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(k), decode(v))
        })
        .collect()
}

/// The mutating calls upstream's classic sync makes on every EnsureLoadBalancer even when the load
/// balancer already is as wanted (kubernetes/cloud-provider-aws pkg/providers/v1), for the Service `svc`:
///
/// * `ModifyLoadBalancerAttributes`: it compares the wanted attributes with the described ones by deep
///   equality of SDK structs, which never holds for a described load balancer;
/// * `CreateLoadBalancerPolicy` of `k8s-proxyprotocol-enabled` with the proxy-protocol annotation ("this
///   will issue an API request every time");
/// * `AddTags` with the additional-tags annotation (written on every sync of an existing load balancer);
/// * `SetLoadBalancerPoliciesOfListener` with the ssl-negotiation-policy annotation (set on every TLS
///   listener on every sync).
fn upstream_reapplies(svc: &Service) -> Vec<&'static str> {
    let annotations = svc.metadata.annotations.clone().unwrap_or_default();
    if annotations
        .get(ANN_TYPE)
        .is_some_and(|t| t == "nlb" || t == "external")
    {
        return vec![];
    }
    let mut allowed = vec!["ModifyLoadBalancerAttributes"];
    if annotations.contains_key(ANN_PROXY_PROTOCOL) {
        allowed.push("CreateLoadBalancerPolicy");
    }
    if annotations.contains_key(ANN_ADDITIONAL_TAGS) {
        allowed.push("AddTags");
    }
    if annotations.contains_key(ANN_SSL_NEGOTIATION_POLICY) {
        allowed.push("SetLoadBalancerPoliciesOfListener");
    }
    allowed
}

/// Waits until upstream's service controller has reported an ensure (or its failure) for every Service of
/// `ns`; returns the failures.
async fn wait_for_upstream_syncs(
    client: &kube::Client,
    ns: &str,
    services: &[Service],
    upstream: &mut Upstream,
) -> Vec<String> {
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    let deadline = tokio::time::Instant::now() + UPSTREAM_TIMEOUT;
    loop {
        upstream.assert_running();
        let events = api
            .list(&ListParams::default())
            .await
            .expect("list Events")
            .items;
        let reported = |svc: &Service, reason: &str| {
            events.iter().any(|e| {
                e.involved_object.name.as_deref() == svc.metadata.name.as_deref()
                    && e.reason.as_deref() == Some(reason)
            })
        };
        let failures: Vec<String> = services
            .iter()
            .filter(|s| reported(s, "SyncLoadBalancerFailed"))
            .map(|s| {
                let messages: Vec<&str> = events
                    .iter()
                    .filter(|e| {
                        e.involved_object.name.as_deref() == s.metadata.name.as_deref()
                            && e.reason.as_deref() == Some("SyncLoadBalancerFailed")
                    })
                    .filter_map(|e| e.message.as_deref())
                    .collect();
                format!("{}: upstream's sync failed: {messages:?}", name_of(s))
            })
            .collect();
        let pending: Vec<&str> = services
            .iter()
            .filter(|s| {
                !reported(s, "EnsuredLoadBalancer") && !reported(s, "SyncLoadBalancerFailed")
            })
            .map(name_of)
            .collect();
        if pending.is_empty() {
            return failures;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!(
                "upstream did not sync {pending:?} within {UPSTREAM_TIMEOUT:?}; the end of its log ({}):\n{}",
                upstream.log.display(),
                upstream.log_tail(80)
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test]
#[ignore = "needs UPSTREAM_AWS_CCM and PEER_KUBECONFIG; hack/upstream/test.sh runs it"]
async fn upstream_keeps_our_load_balancers() {
    upstream_keeps_ours(&PLAIN, "peerdown").await;
}

#[tokio::test]
#[ignore = "needs UPSTREAM_AWS_CCM and PEER_KUBECONFIG; hack/upstream/test.sh runs it"]
async fn upstream_keeps_our_security_groups_and_tags() {
    upstream_keeps_ours(&MANAGED, "peerdownsg").await;
}

/// Ours creates the load balancers (and tags the instances) in `mode`; upstream syncs them without a
/// mutating call beyond its unconditional re-applies.
async fn upstream_keeps_ours(mode: &Mode, name: &str) {
    let peer = peer();
    let _cluster = CLUSTER.lock().await;
    let s = setup(&peer, name, mode).await;

    // Ours first, its hostnames written into the statuses as our service controller does.
    let cloud = provider(&s.world.config(mode.global)).await;
    let api: Api<Service> = Api::namespaced(s.client.clone(), &s.ns);
    let mut ours = BTreeMap::new();
    for svc in &s.services {
        let status = cloud
            .ensure_load_balancer(CLUSTER_NAME, svc, &s.nodes)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "{}: ours cannot create its load balancer: {e}",
                    name_of(svc)
                )
            });
        api.patch_status(
            name_of(svc),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"loadBalancer": status}})),
        )
        .await
        .expect("write the Service status");
        ours.insert(
            name_of(svc).to_string(),
            status.ingress.and_then(|i| i[0].hostname.clone()),
        );
    }

    if mode.tagging {
        run_our_tagging(&s.client, cloud.clone(), &s.nodes, true).await;
    }

    let proxy = CountingProxy::start(&moto().url).await;
    let run = format!("aws-peer-{}", s.ns);
    let mut upstream = Upstream::start(&peer, &s.world, &proxy.url, &run, mode);
    let mut differences =
        wait_for_upstream_syncs(&s.client, &s.ns, &s.services, &mut upstream).await;
    // The node sync that follows the first service syncs.
    tokio::time::sleep(Duration::from_secs(5)).await;
    upstream.stop();

    let lb_names: BTreeMap<String, &Service> = s
        .services
        .iter()
        .map(|svc| (default_load_balancer_name(svc), svc))
        .collect();
    for request in proxy.requests() {
        if provider_aws::metrics::is_read_only(&request.action) {
            continue;
        }
        let lb_name = request
            .params
            .get("LoadBalancerName")
            .or_else(|| request.params.get("LoadBalancerNames.member.1"));
        let allowed = lb_name
            .and_then(|n| lb_names.get(n))
            .is_some_and(|svc| upstream_reapplies(svc).contains(&request.action.as_str()));
        if !allowed {
            differences.push(format!(
                "upstream made {} {:?}",
                request.action, request.params
            ));
        }
    }
    if mode.tagging {
        check_nlb_groups(&s, &mut differences).await;
    }
    for svc in api
        .list(&ListParams::default())
        .await
        .expect("list Services")
    {
        let name = name_of(&svc);
        if ours.get(name) != Some(&ingress_hostname(&svc)) {
            differences.push(format!(
                "{name}: upstream changed the status hostname from {:?} to {:?}",
                ours.get(name),
                ingress_hostname(&svc)
            ));
        }
    }
    assert!(
        differences.is_empty(),
        "upstream does not keep what ours created (its log: {}):\n  {}",
        upstream.log.display(),
        differences.join("\n  ")
    );
    remove_earlier_runs(&s.client).await;
}

/// The cloud-config keys of upstream's config struct, printed by the pinned binary: section -> key -> Go
/// type.
fn upstream_config_keys(
    peer_binary: &std::path::Path,
) -> BTreeMap<String, BTreeMap<String, String>> {
    let output = Command::new(peer_binary)
        .env("UPSTREAM_CCM_PRINT_FLAG_SET", "1")
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", peer_binary.display()));
    assert!(output.status.success(), "{output:?}");
    let document: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    serde_json::from_value(document["cloudConfig"].clone()).expect("the peer lists its config keys")
}

/// A value of each `[Global]` key of upstream's cloud config that fits the moto world (a key upstream adds
/// has none and fails the test until it is handled here and in the provider).
fn global_value(key: &str, world: &World) -> Option<String> {
    Some(match key {
        "Zone" => format!("{REGION}a"),
        "Region" => REGION.to_string(),
        "VPC" => world.vpc_id.clone(),
        "SubnetID" => world.public_subnets[0].0.clone(),
        "RouteTableID" => world.route_table_id.clone(),
        "RoleARN" => "arn:aws:iam::123456789012:role/cloud-controller-manager".to_string(),
        "SourceARN" => "arn:aws:eks:us-east-1:123456789012:cluster/peer".to_string(),
        "KubernetesClusterTag" | "KubernetesClusterID" => world.cluster_id.clone(),
        "DisableSecurityGroupIngress" => "true".to_string(),
        "ElbSecurityGroup" => world.node_sg.clone(),
        "NodeIPFamilies" => "ipv4".to_string(),
        "ClusterServiceLoadBalancerHealthProbeMode" => "Shared".to_string(),
        "ClusterServiceSharedLoadBalancerHealthProbePort" => "10256".to_string(),
        "ClusterServiceSharedLoadBalancerHealthProbePath" => "/healthz".to_string(),
        "SupportedTopologyInstanceTypePattern" => "^p5\\\\..*$".to_string(),
        "NLBSecurityGroupMode" => "Managed".to_string(),
        _ => return None,
    })
}

/// Every cloud-config key of the pinned cloud-provider-aws (enumerated from its config struct by the peer
/// binary) is accepted, and the provider converges with it: with each `[Global]` key set, a node's metadata
/// is read and a network load balancer created, synced again without a mutating call, and deleted. The
/// `[ServiceOverride]` keys are all in every test's cloud config but `SigningMethod` and `SigningName`,
/// which one override here carries.
#[tokio::test]
#[ignore = "needs UPSTREAM_AWS_CCM; hack/upstream/test.sh runs it"]
async fn every_cloud_config_key_of_upstream_is_accepted() {
    use cloud_provider::InstancesV2;
    let binary = std::env::var_os("UPSTREAM_AWS_CCM")
        .map(PathBuf::from)
        .expect("UPSTREAM_AWS_CCM names upstream's aws-cloud-controller-manager (hack/upstream/test.sh sets it)");
    let keys = upstream_config_keys(&binary);
    assert_eq!(
        keys.keys().collect::<Vec<_>>(),
        ["Global", "ServiceOverride"]
    );
    let world = World::new("cfgkeys").await;
    let instance = world.instance(0).await;
    let node = crate::common::node_with_id(&instance.private_dns_name, &instance.provider_id());
    let base = world.config("");
    let url = &moto().url;
    let sts = format!(
        "\n[ServiceOverride \"sts\"]\nService = sts\nRegion = {REGION}\nURL = {url}\nSigningRegion = {REGION}\n\
         SigningMethod = v4\nSigningName = sts\n"
    );
    for key in keys["ServiceOverride"].keys() {
        assert!(
            base.contains(&format!("\n{key} = ")) || sts.contains(&format!("\n{key} = ")),
            "[ServiceOverride] {key} is in no test config"
        );
    }
    for key in keys["Global"].keys() {
        let value = global_value(key, &world)
            .unwrap_or_else(|| panic!("upstream's [Global] key {key} has no test value here"));
        // Region and KubernetesClusterID are in every test config already.
        let config = if base.contains(&format!("\n{key} = ")) {
            format!("{base}{sts}")
        } else {
            format!(
                "{}{sts}",
                base.replacen("[Global]\n", &format!("[Global]\n{key} = {value}\n"), 1)
            )
        };
        let parsed = provider_aws::CloudConfig::parse(config.as_bytes());
        assert!(parsed.is_ok(), "{key} = {value}: {:?}", parsed.err());
        let cloud = provider(&config).await;
        let metadata = cloud.instance_metadata(&node).await;
        assert!(matches!(metadata, Ok(Some(_))), "{key}: {metadata:?}");
        let svc = crate::common::nlb_service(
            &format!("cfg-{}", key.to_lowercase()),
            &[("http", 80, "TCP", 30480)],
            &[],
        );
        let nodes = std::slice::from_ref(&node);
        let created = cloud.ensure_load_balancer(CLUSTER_NAME, &svc, nodes).await;
        assert!(created.is_ok(), "{key}: {:?}", created.err());
        let before = cloud.metrics().mutating_calls();
        let again = cloud.ensure_load_balancer(CLUSTER_NAME, &svc, nodes).await;
        assert!(again.is_ok(), "{key}: {:?}", again.err());
        assert_eq!(
            cloud.metrics().mutating_calls(),
            before,
            "{key}: a second sync changed something"
        );
        let deleted = cloud.ensure_load_balancer_deleted(CLUSTER_NAME, &svc).await;
        assert!(deleted.is_ok(), "{key}: {:?}", deleted.err());
    }
}
