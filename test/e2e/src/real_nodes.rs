//! Real nodes: kubelets with a containerd each and one kube-proxy beside `hack/realkube`'s control plane
//! (`realkube up --nodes N`). The cluster's directory gives the kubeconfigs and the control endpoint that
//! stops and starts a node's kubelet; the fake cloud of the CCM the suite runs knows the nodes' instances.
//!
//! An external client (a network namespace with an address outside the cluster, reaching the host over a
//! veth pair) sends requests to load-balancer addresses as a client outside the cluster does: kube-proxy
//! then applies `externalTrafficPolicy` to them (traffic from the host itself or from pods always reaches
//! every endpoint).

use std::path::{Path, PathBuf};
use std::process::Command;

use http::Method;

use crate::HarnessError;
use crate::http::send;

/// The name of node N (1-based).
pub fn node_name(index: usize) -> String {
    format!("node-{index}")
}

/// The address of node N on lo.
pub fn node_ip(index: usize) -> String {
    format!("10.99.0.{index}")
}

/// The fake instance of node N: its address as InternalIP (or `internal_ip`), an ExternalIP of its own,
/// in zone `a` or `b` by turn, as a JSON object (the admin API's and the cloud-config's shape).
pub fn instance(index: usize, internal_ip: Option<&str>) -> serde_json::Value {
    let zone = if index % 2 == 1 { "a" } else { "b" };
    serde_json::json!({
        "name": node_name(index),
        "type": "real.small",
        "zone": format!("real-zone-{zone}"),
        "addresses": [
            {"type": "InternalIP", "address": internal_ip.map(str::to_string).unwrap_or_else(|| node_ip(index))},
            {"type": "ExternalIP", "address": format!("203.0.113.{index}")},
            {"type": "Hostname", "address": node_name(index)},
        ],
    })
}

/// The fake cloud-config of `count` real nodes: one instance per node ([`instance`]; node `mismatched`, if
/// any, with an InternalIP that is not its kubelet's address), no discovery.
pub fn cloud_config(count: usize, mismatched: Option<usize>) -> String {
    let instances: Vec<serde_json::Value> = (1..=count)
        .map(|index| {
            let wrong = (Some(index) == mismatched).then(|| format!("10.99.1.{index}"));
            instance(index, wrong.as_deref())
        })
        .collect();
    cloud_config_of(instances)
}

/// The fake cloud-config with these instances, no discovery.
pub fn cloud_config_of(instances: Vec<serde_json::Value>) -> String {
    let config = serde_json::json!({
        "region": "real-region",
        "zones": ["real-zone-a", "real-zone-b"],
        "instanceTypes": ["real.small"],
        "autoDiscover": false,
        "clusterID": "e2e",
        "clusterName": "e2e",
        "instances": instances,
    });
    serde_saphyr::to_string(&config).expect("a JSON value is YAML")
}

/// The pool of the fake load balancers' ingress addresses in the real-node suite: each is added to `lo`
/// by the data path (so the host and an [`ExternalClient`] reach it) and removed with its load balancer.
pub const LOAD_BALANCER_POOL: &str = "10.250.0.0/24";
/// How long a backend that left a load balancer keeps its connections in the real-node suite.
pub const DRAIN_SECONDS: u64 = 5;

/// [`cloud_config`] with load balancers that carry traffic: ingress addresses of [`LOAD_BALANCER_POOL`]
/// added to `lo`, backends checked every half second, a drain of [`DRAIN_SECONDS`].
pub fn data_path_cloud_config(count: usize, mismatched: Option<usize>) -> String {
    format!(
        "{}loadBalancerCIDR: {LOAD_BALANCER_POOL}\ndataPath:\n  interface: lo\n  drainSeconds: {DRAIN_SECONDS}\n  \
         healthCheckIntervalMillis: 500\n",
        cloud_config(count, mismatched)
    )
}

/// The addresses of [`LOAD_BALANCER_POOL`] on `lo` now (`ADDRESS/PREFIX`).
pub fn pool_addresses_on_lo() -> Vec<String> {
    let output = Command::new("ip")
        .args(["-4", "-o", "address", "show", "dev", "lo"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let pool = provider_fake::Cidr::parse(LOAD_BALANCER_POOL).expect("the pool is a CIDR");
    output
        .split_whitespace()
        .filter(|word| {
            word.split_once('/')
                .and_then(|(ip, _)| ip.parse().ok())
                .is_some_and(|ip| pool.contains(ip))
        })
        .map(str::to_string)
        .collect()
}

/// Removes what [`pool_addresses_on_lo`] lists (after a CCM that could not remove them itself).
pub fn remove_pool_addresses() {
    for address in pool_addresses_on_lo() {
        let _ = Command::new("ip")
            .args(["address", "del", &address, "dev", "lo"])
            .output();
    }
}

/// A `realkube up --nodes N` cluster.
#[derive(Debug, Clone)]
pub struct RealCluster {
    dir: PathBuf,
}

impl RealCluster {
    /// The cluster in `dir`; it must run with nodes (its control endpoint's address is there).
    pub fn open(dir: impl Into<PathBuf>) -> Result<RealCluster, HarnessError> {
        let dir = dir.into();
        let cluster = RealCluster { dir };
        cluster.control_address()?;
        Ok(cluster)
    }

    /// The cluster's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The admin's kubeconfig.
    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.dir.join("admin.kubeconfig")
    }

    /// The kubeconfig of the CCM's ServiceAccount (`--service-account kube-system/cloud-controller-manager`).
    pub fn ccm_kubeconfig(&self) -> PathBuf {
        self.dir.join("cloud-controller-manager.kubeconfig")
    }

    /// The API server's audit log.
    pub fn audit_log(&self) -> PathBuf {
        self.dir.join("audit.log")
    }

    /// A component's log.
    pub fn log(&self, component: &str) -> PathBuf {
        self.dir.join(format!("{component}.log"))
    }

    fn control_address(&self) -> Result<String, HarnessError> {
        let path = self.dir.join("control.addr");
        std::fs::read_to_string(&path)
            .map(|a| a.trim().to_string())
            .map_err(|e| HarnessError::Io {
                what: format!(
                    "reading {} (is `realkube up --nodes N --dir {}` running?)",
                    path.display(),
                    self.dir.display()
                ),
                source: e,
            })
    }

    async fn kubelet(&self, node: &str, action: &str) -> Result<(), HarnessError> {
        let url = format!(
            "http://{}/nodes/{node}/kubelet/{action}",
            self.control_address()?
        );
        let response = send(Method::POST, &url, None, None).await?;
        if response.status != 204 {
            return Err(HarnessError::Http {
                what: format!("{action} the kubelet of {node}"),
                message: format!("{}: {}", response.status, response.text()),
            });
        }
        Ok(())
    }

    /// Stops a node's kubelet (its pods keep running, as on a machine whose kubelet died).
    pub async fn stop_kubelet(&self, node: &str) -> Result<(), HarnessError> {
        self.kubelet(node, "stop").await
    }

    /// Starts a node's kubelet again.
    pub async fn start_kubelet(&self, node: &str) -> Result<(), HarnessError> {
        self.kubelet(node, "start").await
    }
}

/// A client outside the cluster: a network namespace with an address of a /30 routed through the host.
/// Removed when dropped.
#[derive(Debug)]
pub struct ExternalClient {
    namespace: String,
    address: String,
}

/// The /30s a client may take, as (host end, client end): the first the host does not already reach
/// directly (a test machine's own network may be any of them).
const CLIENT_SUBNETS: [(&str, &str); 3] = [
    ("172.31.255.253", "172.31.255.254"),
    ("100.127.255.253", "100.127.255.254"),
    ("10.255.255.253", "10.255.255.254"),
];

impl ExternalClient {
    /// Creates the namespace `name` (at most 11 characters: its veth pair is named after it).
    pub fn create(name: &str) -> Result<ExternalClient, HarnessError> {
        let (host_ip, client_ip) = CLIENT_SUBNETS
            .into_iter()
            .find(|(_, client_ip)| !reached_directly(client_ip))
            .ok_or_else(|| {
                HarnessError::Config(format!(
                    "the host already reaches every client subnet directly: {CLIENT_SUBNETS:?}"
                ))
            })?;
        let (host_end, client_end) = (format!("{name}-h"), format!("{name}-c"));
        let client = ExternalClient {
            namespace: name.to_string(),
            address: client_ip.to_string(),
        };
        let host_addr = format!("{host_ip}/30");
        let client_addr = format!("{client_ip}/30");
        let in_namespace = ["ip", "netns", "exec", name];
        let steps: [Vec<&str>; 8] = [
            vec!["ip", "netns", "add", name],
            vec![
                "ip",
                "link",
                "add",
                &host_end,
                "type",
                "veth",
                "peer",
                "name",
                &client_end,
            ],
            vec!["ip", "link", "set", &client_end, "netns", name],
            vec!["ip", "addr", "add", &host_addr, "dev", &host_end],
            vec!["ip", "link", "set", &host_end, "up"],
            [
                &in_namespace[..],
                &["ip", "addr", "add", &client_addr, "dev", &client_end],
            ]
            .concat(),
            [&in_namespace[..], &["ip", "link", "set", &client_end, "up"]].concat(),
            [
                &in_namespace[..],
                &["ip", "route", "add", "default", "via", host_ip],
            ]
            .concat(),
        ];
        for step in steps {
            run(&step)?;
        }
        Ok(client)
    }

    /// The client's address.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// `GET url` from the client (curl, 3 s timeout): the body, or `None` when nothing answered (or an
    /// HTTP error).
    pub fn get(&self, url: &str) -> Option<String> {
        curl(
            Command::new("ip").args(["netns", "exec", &self.namespace, "curl"]),
            url,
        )
    }
}

impl Drop for ExternalClient {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "delete", &format!("{}-h", self.namespace)])
            .output();
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.namespace])
            .output();
    }
}

/// `GET url` from the host (curl, 3 s timeout): the body, or `None` when nothing answered (or an HTTP
/// error).
pub fn host_get(url: &str) -> Option<String> {
    curl(&mut Command::new("curl"), url)
}

/// Runs `curl` (the command given, to which the arguments are added) for `url` with a 3 s timeout: the
/// body, or `None` when nothing answered or the answer was an HTTP error.
fn curl(command: &mut Command, url: &str) -> Option<String> {
    let output = command.args(["-s", "-f", "-m", "3", url]).output().ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Whether the host reaches `ip` without a gateway: it is the host's own, or on one of its networks.
fn reached_directly(ip: &str) -> bool {
    Command::new("ip")
        .args(["-4", "route", "get", ip])
        .output()
        .map(|out| {
            let route = String::from_utf8_lossy(&out.stdout);
            route.starts_with("local ") || !route.contains(" via ")
        })
        .unwrap_or(true)
}

fn run(args: &[&str]) -> Result<(), HarnessError> {
    let output = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| HarnessError::Io {
            what: format!("running {}", args.join(" ")),
            source: e,
        })?;
    if !output.status.success() {
        return Err(HarnessError::Config(format!(
            "{} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(())
}
