//! Shared harness of the moto tests: one moto server per test binary on a free port of 127.0.0.1
//! (`moto_server.py`: moto's, with the answers it lacks), SDK clients for seeding, a per-test world (VPC,
//! subnets, internet gateway, route tables, security group and tagged instances, all under a cluster ID of
//! its own) and the provider under test pointed at moto through `[ServiceOverride]` sections.

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use aws_credential_types::Credentials;
use aws_credential_types::provider::SharedCredentialsProvider;
use aws_sdk_ec2::types::{Filter, InstanceType, ResourceType, Tag, TagSpecification};
use provider_aws::{AwsCloud, AwsMetrics, AwsOptions, CloudConfig};

pub const REGION: &str = "us-east-1";
pub const ACCESS_KEY: &str = "AKIAMOTOTESTKEY00001";
pub const SECRET_KEY: &str = "moto-test-secret-key-do-not-log-0123456789";
pub const SESSION_TOKEN: &str = "moto-test-session-token-do-not-log-abcdef";
/// An AMI moto knows.
pub const AMI: &str = "ami-12c6146b";

/// The running emulator.
pub struct Moto {
    pub url: String,
    _child: Option<Child>,
}

/// Set to a running emulator's URL, a test process uses it instead of starting its own (a test that runs
/// part of itself in a child process hands its emulator down this way).
pub const MOTO_URL_ENV: &str = "MOTO_URL";

/// The Python that runs the emulator: `MOTO_PYTHON`, else the workspace's `.venv`.
fn moto_python() -> PathBuf {
    if let Some(path) = std::env::var_os("MOTO_PYTHON") {
        return PathBuf::from(path);
    }
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(|p| p.parent())
        .expect("workspace root")
        .to_path_buf();
    workspace.join(".venv/bin/python")
}

/// moto's server with the answers it lacks (`moto_server.py` beside this file).
fn moto_server_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/moto/moto_server.py")
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local addr").port()
}

/// The moto server of this test binary, started on first use. It stops when the test process exits: a
/// small shell watchdog kills it once this process is gone.
pub fn moto() -> &'static Moto {
    static MOTO: OnceLock<Moto> = OnceLock::new();
    MOTO.get_or_init(|| {
        if let Ok(url) = std::env::var(MOTO_URL_ENV) {
            return Moto { url, _child: None };
        }
        let path = moto_python();
        assert!(
            path.exists(),
            "no Python with moto at {}: install it with `python3 -m venv .venv && .venv/bin/pip install 'moto[server]'` \
             in the workspace root, or set MOTO_PYTHON to a Python that has moto[server]",
            path.display()
        );
        let port = free_port();
        let child = Command::new("sh")
            .arg("-c")
            .arg(
                r#"parent=$1; shift; "$@" & child=$!
                   while kill -0 "$parent" 2>/dev/null && kill -0 "$child" 2>/dev/null; do sleep 0.5; done
                   kill "$child" 2>/dev/null; wait"#,
            )
            .arg("moto-watchdog")
            .arg(std::process::id().to_string())
            .arg(&path)
            .arg(moto_server_script())
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start moto's server");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "moto's server ({}) did not start listening on port {port} within 30 s",
                path.display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Moto {
            url: format!("http://127.0.0.1:{port}"),
            _child: Some(child),
        }
    })
}

pub fn credentials() -> SharedCredentialsProvider {
    SharedCredentialsProvider::new(Credentials::new(
        ACCESS_KEY,
        SECRET_KEY,
        Some(SESSION_TOKEN.to_string()),
        None,
        "moto-tests",
    ))
}

/// SDK clients for seeding moto.
pub fn ec2() -> aws_sdk_ec2::Client {
    let conf = aws_sdk_ec2::Config::builder()
        .behavior_version(aws_sdk_ec2::config::BehaviorVersion::latest())
        .region(aws_sdk_ec2::config::Region::new(REGION))
        .credentials_provider(credentials())
        .endpoint_url(&moto().url)
        .http_client(provider_aws::client::https_client())
        .build();
    aws_sdk_ec2::Client::from_conf(conf)
}

pub fn elb() -> aws_sdk_elasticloadbalancingv2::Client {
    let conf = aws_sdk_elasticloadbalancingv2::Config::builder()
        .behavior_version(aws_sdk_elasticloadbalancingv2::config::BehaviorVersion::latest())
        .region(aws_sdk_elasticloadbalancingv2::config::Region::new(REGION))
        .credentials_provider(credentials())
        .endpoint_url(&moto().url)
        .http_client(provider_aws::client::https_client())
        .build();
    aws_sdk_elasticloadbalancingv2::Client::from_conf(conf)
}

/// The cloud config reaching moto, with extra `[Global]` lines.
pub fn cloud_config(cluster_id: &str, extra_global: &str) -> String {
    let url = &moto().url;
    // Fresh reads unless the test is about the cache.
    let ttl = if extra_global.contains("InstanceCacheTTL") {
        ""
    } else {
        "InstanceCacheTTL = 0\n"
    };
    format!(
        "[Global]\nRegion = {REGION}\nKubernetesClusterID = {cluster_id}\n{ttl}{extra_global}\n\
         [ServiceOverride \"ec2\"]\nService = ec2\nRegion = {REGION}\nURL = {url}\nSigningRegion = {REGION}\n\
         [ServiceOverride \"elb\"]\nService = elasticloadbalancing\nRegion = {REGION}\nURL = {url}\nSigningRegion = {REGION}\n"
    )
}

/// The provider under test, with static credentials and metrics of its own.
pub async fn provider(config: &str) -> Arc<AwsCloud> {
    let cfg = CloudConfig::parse(config.as_bytes()).expect("valid cloud config");
    let cloud = AwsCloud::new(
        cfg,
        AwsOptions {
            credentials: Some(credentials()),
            metrics: Some(AwsMetrics::default()),
            http_client: None,
        },
    )
    .await
    .expect("provider builds");
    Arc::new(cloud)
}

fn tag(k: &str, v: &str) -> Tag {
    Tag::builder().key(k).value(v).build()
}

/// A tag specification of `resource` with `tags`.
pub fn tags_for(resource: ResourceType, tags: &[(&str, &str)]) -> TagSpecification {
    TagSpecification::builder()
        .resource_type(resource)
        .set_tags(Some(tags.iter().map(|(k, v)| tag(k, v)).collect()))
        .build()
}

pub fn filter(name: &str, values: &[&str]) -> Filter {
    Filter::builder()
        .name(name)
        .set_values(Some(values.iter().map(|v| v.to_string()).collect()))
        .build()
}

/// A seeded network for one test.
pub struct World {
    pub cluster_id: String,
    pub cluster_tag: String,
    pub vpc_id: String,
    pub vpc_cidr: String,
    /// Public subnets (routed to the internet gateway), one per zone: (id, zone, cidr).
    pub public_subnets: Vec<(String, String, String)>,
    /// Private subnets, one per zone.
    pub private_subnets: Vec<(String, String, String)>,
    /// The cluster-tagged route table of the private subnets (pod routes go here).
    pub route_table_id: String,
    /// The cluster-tagged node security group.
    pub node_sg: String,
    pub ec2: aws_sdk_ec2::Client,
}

static NEXT_NET: AtomicU32 = AtomicU32::new(1);

impl World {
    /// A VPC `10.<n>.0.0/16` with two public and two private subnets in us-east-1a/b, an internet gateway,
    /// a public and a cluster-tagged private route table, and a cluster-tagged node security group.
    pub async fn new(name: &str) -> World {
        let ec2 = ec2();
        let n = NEXT_NET.fetch_add(1, Ordering::SeqCst);
        let cluster_id = format!("{name}-{n}");
        let cluster_tag = format!("kubernetes.io/cluster/{cluster_id}");
        let vpc_cidr = format!("10.{n}.0.0/16");
        let vpc_id = ec2
            .create_vpc()
            .cidr_block(&vpc_cidr)
            .tag_specifications(tags_for(ResourceType::Vpc, &[("Name", &cluster_id)]))
            .send()
            .await
            .expect("create VPC")
            .vpc()
            .and_then(|v| v.vpc_id())
            .expect("VPC ID")
            .to_string();
        let igw = ec2
            .create_internet_gateway()
            .send()
            .await
            .expect("create internet gateway")
            .internet_gateway()
            .and_then(|g| g.internet_gateway_id())
            .expect("IGW ID")
            .to_string();
        ec2.attach_internet_gateway()
            .internet_gateway_id(&igw)
            .vpc_id(&vpc_id)
            .send()
            .await
            .expect("attach internet gateway");
        let public_rt = create_route_table(&ec2, &vpc_id, &[("Name", "public")]).await;
        ec2.create_route()
            .route_table_id(&public_rt)
            .destination_cidr_block("0.0.0.0/0")
            .gateway_id(&igw)
            .send()
            .await
            .expect("default route to the internet gateway");
        let route_table_id = create_route_table(
            &ec2,
            &vpc_id,
            &[(&cluster_tag, "owned"), ("Name", "private")],
        )
        .await;

        let mut public_subnets = Vec::new();
        let mut private_subnets = Vec::new();
        for (i, zone) in ["us-east-1a", "us-east-1b"].iter().enumerate() {
            let cidr = format!("10.{n}.{}.0/24", i + 1);
            let id = create_subnet(
                &ec2,
                &vpc_id,
                &cidr,
                zone,
                &[("Name", &format!("{cluster_id}-public-{zone}"))],
            )
            .await;
            associate(&ec2, &public_rt, &id).await;
            public_subnets.push((id, zone.to_string(), cidr));
            let cidr = format!("10.{n}.{}.0/24", i + 11);
            let id = create_subnet(
                &ec2,
                &vpc_id,
                &cidr,
                zone,
                &[
                    (&cluster_tag, "shared"),
                    ("Name", &format!("{cluster_id}-private-{zone}")),
                ],
            )
            .await;
            associate(&ec2, &route_table_id, &id).await;
            private_subnets.push((id, zone.to_string(), cidr));
        }
        let node_sg = ec2
            .create_security_group()
            .group_name(format!("{cluster_id}-nodes"))
            .description("nodes")
            .vpc_id(&vpc_id)
            .tag_specifications(tags_for(
                ResourceType::SecurityGroup,
                &[(&cluster_tag, "owned")],
            ))
            .send()
            .await
            .expect("create security group")
            .group_id()
            .expect("group ID")
            .to_string();
        World {
            cluster_id,
            cluster_tag,
            vpc_id,
            vpc_cidr,
            public_subnets,
            private_subnets,
            route_table_id,
            node_sg,
            ec2,
        }
    }

    /// The cloud config of this world, with extra `[Global]` lines.
    pub fn config(&self, extra_global: &str) -> String {
        cloud_config(&self.cluster_id, extra_global)
    }

    /// A cluster instance in private subnet `index` with the node security group.
    pub async fn instance(&self, index: usize) -> Instance {
        self.instance_with(index, &[(&self.cluster_tag, "owned")], &[&self.node_sg])
            .await
    }

    /// A security group of the world's VPC made by the user (no cluster tag).
    pub async fn user_security_group(&self, name: &str) -> String {
        self.ec2
            .create_security_group()
            .group_name(name)
            .description("made by the user")
            .vpc_id(&self.vpc_id)
            .send()
            .await
            .expect("create security group")
            .group_id()
            .expect("group ID")
            .to_string()
    }

    /// A cluster instance of `instance_type` in private subnet `index` with the node security group.
    pub async fn instance_of_type(&self, index: usize, instance_type: &str) -> Instance {
        let tags = [(self.cluster_tag.as_str(), "owned")];
        self.launch(index, &tags, &[&self.node_sg], instance_type.into())
            .await
    }

    /// An instance with the given tags and security groups in private subnet `index`.
    pub async fn instance_with(
        &self,
        index: usize,
        tags: &[(&str, &str)],
        groups: &[&str],
    ) -> Instance {
        self.launch(index, tags, groups, InstanceType::M5Large)
            .await
    }

    async fn launch(
        &self,
        index: usize,
        tags: &[(&str, &str)],
        groups: &[&str],
        instance_type: InstanceType,
    ) -> Instance {
        let out = self
            .ec2
            .run_instances()
            .image_id(AMI)
            .instance_type(instance_type)
            .min_count(1)
            .max_count(1)
            .subnet_id(&self.private_subnets[index].0)
            .set_security_group_ids(Some(groups.iter().map(|g| g.to_string()).collect()))
            .tag_specifications(tags_for(ResourceType::Instance, tags))
            .send()
            .await
            .expect("run instance");
        let inst = out.instances().first().expect("one instance");
        Instance {
            id: inst.instance_id().expect("instance ID").to_string(),
            private_dns_name: inst.private_dns_name().unwrap_or_default().to_string(),
            private_ip: inst.private_ip_address().unwrap_or_default().to_string(),
            zone: self.private_subnets[index].1.clone(),
        }
    }

    pub async fn stop(&self, id: &str) {
        self.ec2
            .stop_instances()
            .instance_ids(id)
            .send()
            .await
            .expect("stop instance");
    }

    pub async fn start(&self, id: &str) {
        self.ec2
            .start_instances()
            .instance_ids(id)
            .send()
            .await
            .expect("start instance");
    }

    pub async fn terminate(&self, id: &str) {
        self.ec2
            .terminate_instances()
            .instance_ids(id)
            .send()
            .await
            .expect("terminate instance");
    }
}

/// A seeded instance.
#[derive(Debug, Clone)]
pub struct Instance {
    pub id: String,
    pub private_dns_name: String,
    pub private_ip: String,
    pub zone: String,
}

impl Instance {
    pub fn provider_id(&self) -> String {
        format!("aws:///{}/{}", self.zone, self.id)
    }
}

async fn create_route_table(
    ec2: &aws_sdk_ec2::Client,
    vpc_id: &str,
    tags: &[(&str, &str)],
) -> String {
    ec2.create_route_table()
        .vpc_id(vpc_id)
        .tag_specifications(tags_for(ResourceType::RouteTable, tags))
        .send()
        .await
        .expect("create route table")
        .route_table()
        .and_then(|t| t.route_table_id())
        .expect("route table ID")
        .to_string()
}

async fn create_subnet(
    ec2: &aws_sdk_ec2::Client,
    vpc_id: &str,
    cidr: &str,
    zone: &str,
    tags: &[(&str, &str)],
) -> String {
    ec2.create_subnet()
        .vpc_id(vpc_id)
        .cidr_block(cidr)
        .availability_zone(zone)
        .tag_specifications(tags_for(ResourceType::Subnet, tags))
        .send()
        .await
        .expect("create subnet")
        .subnet()
        .and_then(|s| s.subnet_id())
        .expect("subnet ID")
        .to_string()
}

async fn associate(ec2: &aws_sdk_ec2::Client, table: &str, subnet: &str) {
    ec2.associate_route_table()
        .route_table_id(table)
        .subnet_id(subnet)
        .send()
        .await
        .expect("associate route table");
}

/// A Node as a kubelet registers it (no provider ID yet).
pub fn node(name: &str) -> k8s_openapi::api::core::v1::Node {
    let mut n = k8s_openapi::api::core::v1::Node::default();
    n.metadata.name = Some(name.to_string());
    n
}

/// A Node with a provider ID.
pub fn node_with_id(name: &str, provider_id: &str) -> k8s_openapi::api::core::v1::Node {
    let mut n = node(name);
    n.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
        provider_id: Some(provider_id.to_string()),
        ..Default::default()
    });
    n
}

/// Polls `check` every 50 ms until it returns true; panics naming `what` after `timeout`.
pub async fn wait_until<F, Fut>(timeout: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if check().await {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A LoadBalancer Service with `(name, port, protocol, nodePort)` ports and annotations.
pub fn lb_service(
    name: &str,
    ports: &[(&str, i32, &str, i32)],
    annotations: &[(&str, &str)],
) -> k8s_openapi::api::core::v1::Service {
    use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
    static NEXT_UID: AtomicU32 = AtomicU32::new(1);
    let n = NEXT_UID.fetch_add(1, Ordering::SeqCst);
    let mut s = Service::default();
    s.metadata.name = Some(name.to_string());
    s.metadata.namespace = Some("default".to_string());
    // Unique per Service of this test binary (moto is shared by every test of the binary, and the load
    // balancer name keeps only the first 31 hex digits of the UID).
    s.metadata.uid = Some(format!("{n:08x}-0000-4000-8000-000000000000"));
    s.metadata.annotations = Some(
        annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    s.spec = Some(ServiceSpec {
        type_: Some("LoadBalancer".to_string()),
        ports: Some(
            ports
                .iter()
                .map(|(name, port, protocol, node_port)| ServicePort {
                    name: Some(name.to_string()),
                    port: *port,
                    protocol: Some(protocol.to_string()),
                    node_port: (*node_port != 0).then_some(*node_port),
                    ..Default::default()
                })
                .collect(),
        ),
        ..Default::default()
    });
    s
}

/// A LoadBalancer Service asking for a network load balancer (type `nlb` unless `annotations` give a type).
pub fn nlb_service(
    name: &str,
    ports: &[(&str, i32, &str, i32)],
    annotations: &[(&str, &str)],
) -> k8s_openapi::api::core::v1::Service {
    let type_key = provider_aws::load_balancer::spec::ANN_TYPE;
    let mut all = annotations.to_vec();
    if !all.iter().any(|(k, _)| *k == type_key) {
        all.push((type_key, "nlb"));
    }
    lb_service(name, ports, &all)
}

/// Ingress rules of a security group as (protocol, from, to, cidr, description).
pub async fn sg_rules(
    ec2: &aws_sdk_ec2::Client,
    group_id: &str,
) -> Vec<(String, i32, i32, String, String)> {
    let out = ec2
        .describe_security_groups()
        .group_ids(group_id)
        .send()
        .await
        .expect("describe security group");
    let mut rules = Vec::new();
    for g in out.security_groups() {
        for p in g.ip_permissions() {
            for r in p.ip_ranges() {
                rules.push((
                    p.ip_protocol().unwrap_or_default().to_string(),
                    p.from_port().unwrap_or(-1),
                    p.to_port().unwrap_or(-1),
                    r.cidr_ip().unwrap_or_default().to_string(),
                    r.description().unwrap_or_default().to_string(),
                ));
            }
        }
    }
    rules.sort();
    rules
}

/// An SDK client of the classic ELB API for seeding and observing moto.
pub fn elb_classic() -> aws_sdk_elasticloadbalancing::Client {
    let conf = aws_sdk_elasticloadbalancing::Config::builder()
        .behavior_version(aws_sdk_elasticloadbalancing::config::BehaviorVersion::latest())
        .region(aws_sdk_elasticloadbalancing::config::Region::new(REGION))
        .credentials_provider(credentials())
        .endpoint_url(&moto().url)
        .http_client(provider_aws::client::https_client())
        .build();
    aws_sdk_elasticloadbalancing::Client::from_conf(conf)
}

/// Nodes of seeded instances (named by private DNS name, with provider IDs).
pub fn nodes_for(instances: &[Instance]) -> Vec<k8s_openapi::api::core::v1::Node> {
    instances
        .iter()
        .map(|i| node_with_id(&i.private_dns_name, &i.provider_id()))
        .collect()
}
