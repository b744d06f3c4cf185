//! The end-to-end suite on real nodes: three kubelets with a containerd each and one kube-proxy beside
//! `hack/realkube`'s control plane (`realkube up --nodes 3`, started by `hack/realkube/test-nodes.sh`), and
//! the CCM (the fake provider, whose cloud knows the nodes' instances) run by the harness as the
//! ServiceAccount of `deploy/base/rbac.yaml`.
//!
//! The cases run in one sequence (they build on each other); each prints its name and outcome, and the
//! failures are reported together at the end with the CCM's log. `E2E_REAL_NODES_DIR` names the cluster's
//! directory; without it the test fails saying so (it is `#[ignore]`d: `make test-real-nodes` runs it).

use std::collections::BTreeSet;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::{anyhow, ensure};
use ccm_e2e::harness::{CCM_SERVICE_ACCOUNT, LocalOptions, client_from_kubeconfig};
use ccm_e2e::real_nodes::{
    DRAIN_SECONDS, ExternalClient, RealCluster, data_path_cloud_config, host_get, instance,
    node_ip, node_name, pool_addresses_on_lo, remove_pool_addresses,
};
use ccm_e2e::well_known::*;
use ccm_e2e::{Check, Harness, HarnessConfig, Mode, wait_for};
use k8s_openapi::api::core::v1::{Event, Node, Pod, Service};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream, UdpSocket};

/// The nodes the cluster runs.
const NODES: usize = 3;
/// The node whose instance first reports another InternalIP than its kubelet's.
const MISMATCHED: usize = 3;
/// The annotation the kubelet records its `--node-ip` in.
const PROVIDED_NODE_IP: &str = "alpha.kubernetes.io/provided-node-ip";
const NAMESPACE: &str = "default";

struct Suite {
    cluster: RealCluster,
    client: Client,
    harness: Option<Harness>,
}

impl Suite {
    fn h(&self) -> anyhow::Result<&Harness> {
        self.harness
            .as_ref()
            .ok_or_else(|| anyhow!("the CCM is not running yet"))
    }

    async fn node(&self, name: &str) -> anyhow::Result<Option<Node>> {
        Ok(Api::<Node>::all(self.client.clone()).get_opt(name).await?)
    }
}

/// A pod of the busybox image answering HTTP on 8080 with its name, on `node` (by hostname label) when given.
fn web_pod(name: &str, app: &str, node: Option<&str>) -> anyhow::Result<Pod> {
    let mut spec = json!({
        "containers": [{
            "name": "web",
            "image": "realkube.local/busybox:1",
            "imagePullPolicy": "Never",
            "command": ["sh", "-c", "echo -n $(hostname) > /www/index.html; exec httpd -f -p 8080 -h /www"],
            "ports": [{"containerPort": 8080}],
            "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
        }],
        "terminationGracePeriodSeconds": 1,
    });
    if let Some(node) = node {
        spec["nodeSelector"] = json!({"kubernetes.io/hostname": node});
    }
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": spec,
    }))?)
}

async fn create_pod(s: &Suite, pod: &Pod) -> anyhow::Result<()> {
    Api::<Pod>::namespaced(s.client.clone(), NAMESPACE)
        .create(&PostParams::default(), pod)
        .await?;
    Ok(())
}

/// Waits until the pod runs and is ready; returns its IP and node.
async fn wait_pod_ready(s: &Suite, name: &str) -> anyhow::Result<(String, String)> {
    let api: Api<Pod> = Api::namespaced(s.client.clone(), NAMESPACE);
    Ok(wait_for(
        &format!("pod {name} ready"),
        Duration::from_secs(60),
        || {
            let api = api.clone();
            async move {
                let pod = api
                    .get(name)
                    .await
                    .map_err(|e| ccm_e2e::HarnessError::kube("get pod", e))?;
                let status = pod.status.clone().unwrap_or_default();
                let ready = status
                    .conditions
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True");
                let node = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_default();
                let ip = status.pod_ip.unwrap_or_default();
                Ok(Check::when(ready && !ip.is_empty(), (ip, node), || {
                    format!("phase {:?}", status.phase)
                }))
            }
        },
    )
    .await?)
}

fn lb_service(name: &str, app: &str, local: bool) -> anyhow::Result<Service> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "type": "LoadBalancer",
            "selector": {"app": app},
            "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP"}],
            "externalTrafficPolicy": if local { "Local" } else { "Cluster" },
        },
    }))?)
}

/// Creates the Service and waits for its ingress IP.
async fn create_lb(s: &Suite, service: &Service) -> anyhow::Result<(Service, String)> {
    let api: Api<Service> = Api::namespaced(s.client.clone(), NAMESPACE);
    let name = service.metadata.name.clone().unwrap_or_default();
    api.create(&PostParams::default(), service).await?;
    Ok(wait_for(
        &format!("{name}'s ingress IP"),
        Duration::from_secs(30),
        || {
            let api = api.clone();
            let name = name.clone();
            async move {
                let svc = api
                    .get(&name)
                    .await
                    .map_err(|e| ccm_e2e::HarnessError::kube("get service", e))?;
                let ip = ingress(&svc).into_iter().next();
                Ok(match ip {
                    Some(ip) => Check::Done((svc, ip)),
                    None => Check::Pending("no ingress yet".into()),
                })
            }
        },
    )
    .await?)
}

/// The pods answering `GET url` within `tries` requests of `get`.
fn answers(get: impl Fn(&str) -> Option<String>, url: &str, tries: usize) -> BTreeSet<String> {
    (0..tries)
        .filter_map(|_| get(url))
        .map(|a| a.trim().to_string())
        // An empty body names no pod (one was seen once in ten runs, from the data path, not the CCM).
        .filter(|a| !a.is_empty())
        .collect()
}

// ---- before the CCM runs ----

async fn kubelets_register_tainted_with_their_ips(s: &Suite) -> anyhow::Result<()> {
    for index in 1..=NODES {
        let name = node_name(index);
        let node = s
            .node(&name)
            .await?
            .ok_or_else(|| anyhow!("{name} is not registered"))?;
        ensure!(
            has_taint(&node, UNINITIALIZED_TAINT),
            "{name} lacks the uninitialized taint: {:?}",
            taint_keys(&node)
        );
        let provided = node
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(PROVIDED_NODE_IP))
            .cloned();
        ensure!(
            provided.as_deref() == Some(node_ip(index).as_str()),
            "{name}'s provided IP: {provided:?}"
        );
        ensure!(
            provider_id(&node).is_none(),
            "{name} has a provider ID before the CCM runs"
        );
    }
    Ok(())
}

async fn pod_waits_for_the_taint(s: &Suite) -> anyhow::Result<()> {
    create_pod(s, &web_pod("early", "early", None)?).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pod = Api::<Pod>::namespaced(s.client.clone(), NAMESPACE)
        .get("early")
        .await?;
    let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
    ensure!(
        node.is_none(),
        "the pod was scheduled to {node:?} before any node was initialized"
    );
    let unschedulable = pod
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "PodScheduled" && c.status == "False");
    ensure!(unschedulable, "the pod is not reported unschedulable");
    Ok(())
}

// ---- with the CCM ----

async fn nodes_are_initialized(s: &Suite) -> anyhow::Result<()> {
    let started = Instant::now();
    for index in (1..=NODES).filter(|i| *i != MISMATCHED) {
        let name = node_name(index);
        let node = wait_for(
            &format!("{name} initialized"),
            Duration::from_secs(30),
            || async {
                let node = s
                    .node(&name)
                    .await
                    .map_err(|e| ccm_e2e::HarnessError::Config(e.to_string()))?;
                Ok(match node {
                    Some(n) if !has_taint(&n, UNINITIALIZED_TAINT) => Check::Done(n),
                    other => Check::Pending(format!("taints {:?}", other.map(|n| taint_keys(&n)))),
                })
            },
        )
        .await?;
        println!(
            "  {name} initialized {:?} after the CCM started",
            started.elapsed()
        );
        ensure!(
            provider_id(&node) == Some(format!("fake://{name}").as_str()),
            "{name}: {:?}",
            provider_id(&node)
        );
        let labels = labels(&node);
        for (key, value) in [
            ("node.kubernetes.io/instance-type", "real.small"),
            ("topology.kubernetes.io/region", "real-region"),
            (
                "topology.kubernetes.io/zone",
                if index % 2 == 1 {
                    "real-zone-a"
                } else {
                    "real-zone-b"
                },
            ),
        ] {
            ensure!(
                labels.get(key).map(String::as_str) == Some(value),
                "{name}: {key} = {:?}",
                labels.get(key)
            );
        }
        let addresses: Vec<(String, String)> = node
            .status
            .as_ref()
            .and_then(|s| s.addresses.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|a| (a.type_, a.address))
            .collect();
        // The kubelet's provided IP first, the cloud's ExternalIP and hostname with it.
        ensure!(
            addresses.first() == Some(&("InternalIP".to_string(), node_ip(index))),
            "{name}: {addresses:?}"
        );
        ensure!(
            addresses.contains(&("ExternalIP".into(), format!("203.0.113.{index}"))),
            "{name}: {addresses:?}"
        );
    }
    Ok(())
}

/// The node whose cloud instance does not have its provided IP is not initialized (as upstream), until the
/// instance does.
async fn a_provided_ip_the_cloud_lacks_is_refused(s: &Suite) -> anyhow::Result<()> {
    let name = node_name(MISMATCHED);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let node = s
        .node(&name)
        .await?
        .ok_or_else(|| anyhow!("{name} is gone"))?;
    ensure!(
        has_taint(&node, UNINITIALIZED_TAINT),
        "{name} was initialized with an address its instance lacks"
    );
    let events = Api::<Event>::namespaced(s.client.clone(), NAMESPACE)
        .list(&ListParams::default())
        .await?;
    let warned = events.items.iter().any(|e| {
        e.involved_object.name.as_deref() == Some(name.as_str())
            && e.type_.as_deref() == Some("Warning")
    });
    ensure!(warned, "no Warning event on {name}");
    // The instance is replaced by one with the node's address: the node is initialized on a retry.
    let admin = s.h()?.admin();
    admin.terminate_instance(&name).await?;
    admin.add_instance(&instance(MISMATCHED, None)).await?;
    wait_for(
        &format!("{name} initialized"),
        Duration::from_secs(60),
        || async {
            let node = s
                .node(&name)
                .await
                .map_err(|e| ccm_e2e::HarnessError::Config(e.to_string()))?;
            Ok(Check::when(
                node.is_some_and(|n| !has_taint(&n, UNINITIALIZED_TAINT)),
                (),
                || "still tainted".into(),
            ))
        },
    )
    .await?;
    Ok(())
}

async fn the_waiting_pod_runs_once_a_node_is_initialized(s: &Suite) -> anyhow::Result<()> {
    let (ip, node) = wait_pod_ready(s, "early").await?;
    let answer = host_get(&format!("http://{ip}:8080/"));
    ensure!(
        answer.as_deref() == Some("early"),
        "pod early on {node} answered {answer:?}"
    );
    Ok(())
}

async fn routes_for_the_pod_cidrs(s: &Suite) -> anyhow::Result<()> {
    let admin = s.h()?.admin().clone();
    let mut wanted = BTreeSet::new();
    for index in 1..=NODES {
        let node = s
            .node(&node_name(index))
            .await?
            .ok_or_else(|| anyhow!("node gone"))?;
        for cidr in pod_cidrs(&node) {
            wanted.insert((node_name(index), cidr));
        }
    }
    ensure!(wanted.len() == NODES, "node-ipam gave pod CIDRs {wanted:?}");
    wait_for("a route per pod CIDR", Duration::from_secs(30), || {
        let admin = admin.clone();
        let wanted = wanted.clone();
        async move {
            let routes: BTreeSet<(String, String)> = admin
                .routes()
                .await?
                .into_iter()
                .map(|r| (r.target_node, r.destination_cidr))
                .collect();
            Ok(Check::when(wanted.is_subset(&routes), (), || {
                format!("{routes:?}")
            }))
        }
    })
    .await?;
    Ok(())
}

async fn load_balancer_serves_from_pods_on_two_nodes(s: &Suite) -> anyhow::Result<()> {
    for (pod, node) in [("web-1", 1), ("web-2", 2)] {
        create_pod(s, &web_pod(pod, "web", Some(&node_name(node)))?).await?;
    }
    for pod in ["web-1", "web-2"] {
        wait_pod_ready(s, pod).await?;
    }
    let (_, ip) = create_lb(s, &lb_service("web", "web", false)?).await?;
    let url = format!("http://{ip}/");
    let from_host = wait_for(
        "both pods answering the ingress IP from the host",
        Duration::from_secs(30),
        || {
            let url = url.clone();
            async move {
                let seen = answers(host_get, &url, 20);
                Ok(Check::when(seen.len() == 2, seen.clone(), || {
                    format!("answers {seen:?}")
                }))
            }
        },
    )
    .await?;
    ensure!(
        from_host == BTreeSet::from(["web-1".to_string(), "web-2".to_string()]),
        "{from_host:?}"
    );
    let client = ExternalClient::create("rk-ext")?;
    let from_outside = answers(|u| client.get(u), &url, 20);
    ensure!(
        from_outside.len() == 2,
        "a client outside the cluster got {from_outside:?}"
    );
    Ok(())
}

// ---- load balancers that carry traffic (the fake's data path) ----

/// A pod of the busybox image running the image's echo server: TCP 9000 echoes, UDP 5353 answers
/// `<pod name> <payload>`.
fn echo_pod(name: &str, app: &str, node: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {
            "containers": [{
                "name": "echo",
                "image": "realkube.local/busybox:1",
                "imagePullPolicy": "Never",
                "command": ["/bin/echo-server", "--tcp", "9000", "--udp", "5353"],
                "readinessProbe": {"tcpSocket": {"port": 9000}, "periodSeconds": 1},
            }],
            "nodeSelector": {"kubernetes.io/hostname": node},
            "terminationGracePeriodSeconds": 1,
        },
    }))?)
}

/// A LoadBalancer Service of the `echo` pods: `ports` as given, `extra` merged into its object.
fn echo_service(
    name: &str,
    ports: serde_json::Value,
    extra: serde_json::Value,
) -> anyhow::Result<Service> {
    let mut service = json!({
        "metadata": {"name": name},
        "spec": {"type": "LoadBalancer", "selector": {"app": "echo"}, "ports": ports},
    });
    merge(&mut service, extra);
    Ok(serde_json::from_value(service)?)
}

fn merge(into: &mut serde_json::Value, from: serde_json::Value) {
    match (into, from) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

/// The data path of `service`'s load balancer, from the fake cloud's admin API.
async fn traffic_of(s: &Suite, service: &str) -> anyhow::Result<provider_fake::BalancerStatus> {
    let key = format!("{NAMESPACE}/{service}");
    s.h()?
        .admin()
        .load_balancer_traffic()
        .await?
        .into_iter()
        .find(|b| b.service == key)
        .ok_or_else(|| anyhow!("no running load balancer for {key}"))
}

/// Connects to `to` (from the local address `from`, when given), sends `payload`, and returns what comes
/// back until the other side closes or nothing comes for `quiet`.
async fn tcp_exchange(
    to: SocketAddr,
    from: Option<IpAddr>,
    payload: &[u8],
    quiet: Duration,
) -> Vec<u8> {
    let socket = TcpSocket::new_v4().expect("a TCP socket");
    if let Some(from) = from {
        socket
            .bind(SocketAddr::new(from, 0))
            .expect("a local address");
    }
    let Ok(Ok(mut stream)) = tokio::time::timeout(Duration::from_secs(3), socket.connect(to)).await
    else {
        return Vec::new();
    };
    let _ = stream.write_all(payload).await;
    read_until_quiet(&mut stream, quiet).await
}

async fn read_until_quiet(stream: &mut TcpStream, quiet: Duration) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 1024];
    while let Ok(Ok(n)) = tokio::time::timeout(quiet, stream.read(&mut buf)).await {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    out
}

/// Whether a TCP socket of this host listens on `at` (`ss`).
fn listening(at: SocketAddr) -> bool {
    std::process::Command::new("ss")
        .args(["-Hltn", &format!("src {at}")])
        .output()
        .is_ok_and(|o| !String::from_utf8_lossy(&o.stdout).trim().is_empty())
}

/// Sends one datagram to `to` and returns the answer, if one comes within 2 s.
async fn udp_exchange(to: SocketAddr, payload: &[u8]) -> Option<String> {
    let socket = UdpSocket::bind("0.0.0.0:0").await.ok()?;
    socket.send_to(payload, to).await.ok()?;
    let mut buf = [0u8; 1024];
    let (n, from) = tokio::time::timeout(Duration::from_secs(2), socket.recv_from(&mut buf))
        .await
        .ok()?
        .ok()?;
    (from == to).then(|| String::from_utf8_lossy(&buf[..n]).into_owned())
}

fn at(ip: &str, port: u16) -> anyhow::Result<SocketAddr> {
    Ok(SocketAddr::new(ip.parse()?, port))
}

/// Every LoadBalancer Service gets an address of the pool on `lo` and `ipMode: Proxy`, and the load
/// balancer answers TCP and UDP on it: from the host, to the echo pods on two nodes.
async fn tcp_and_udp_through_the_ingress_address(s: &Suite) -> anyhow::Result<()> {
    for (pod, node) in [("echo-1", 1), ("echo-2", 2)] {
        create_pod(s, &echo_pod(pod, "echo", &node_name(node))?).await?;
    }
    for pod in ["echo-1", "echo-2"] {
        wait_pod_ready(s, pod).await?;
    }
    let service = echo_service(
        "echo",
        json!([{"name": "tcp", "port": 9000, "targetPort": 9000, "protocol": "TCP"},
               {"name": "udp", "port": 53, "targetPort": 5353, "protocol": "UDP"}]),
        json!({}),
    )?;
    let (svc, ip) = create_lb(s, &service).await?;
    let mode = svc
        .status
        .as_ref()
        .and_then(|st| st.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .and_then(|i| i.first())
        .and_then(|i| i.ip_mode.clone());
    ensure!(mode.as_deref() == Some("Proxy"), "ipMode {mode:?}");
    ensure!(
        pool_addresses_on_lo().contains(&format!("{ip}/32")),
        "{ip} is not on lo: {:?}",
        pool_addresses_on_lo()
    );
    let tcp = at(&ip, 9000)?;
    ensure!(listening(tcp), "nothing listens on {tcp}");
    let echoed = wait_for(
        "TCP echoed through the load balancer",
        Duration::from_secs(30),
        || async move {
            let answer = tcp_exchange(tcp, None, b"hello\n", Duration::from_millis(500)).await;
            Ok(Check::when(answer == b"hello\n", (), || {
                format!("answer {:?}", String::from_utf8_lossy(&answer))
            }))
        },
    )
    .await;
    echoed?;
    let udp = at(&ip, 53)?;
    let mut pods = BTreeSet::new();
    for _ in 0..20 {
        if let Some(answer) = udp_exchange(udp, b"ping").await {
            let (pod, payload) = answer.split_once(' ').unwrap_or_default();
            ensure!(payload == "ping", "UDP answer {answer:?}");
            pods.insert(pod.to_string());
        }
    }
    ensure!(!pods.is_empty(), "no UDP answer through {udp}");
    println!("  UDP answered by {pods:?}");
    Ok(())
}

/// The fake's PROXY protocol annotation: the echo pod receives (and sends back) a header with the
/// client's address and the load balancer's, version 1 then 2.
async fn a_pod_sees_the_client_through_proxy_protocol(s: &Suite) -> anyhow::Result<()> {
    let client: IpAddr = node_ip(3).parse()?;
    for version in ["v1", "v2"] {
        let name = format!("echo-proxy-{version}");
        let service = echo_service(
            &name,
            json!([{"port": 9000, "targetPort": 9000}]),
            json!({"metadata": {"annotations": {provider_fake::ANN_PROXY_PROTOCOL: version}}}),
        )?;
        let (_, ip) = create_lb(s, &service).await?;
        let to = at(&ip, 9000)?;
        let answer = wait_for(
            &format!("an answer through {name}"),
            Duration::from_secs(30),
            || async move {
                let answer =
                    tcp_exchange(to, Some(client), b"hello\n", Duration::from_millis(500)).await;
                Ok(Check::when(
                    answer.ends_with(b"hello\n"),
                    answer.clone(),
                    || format!("{answer:?}"),
                ))
            },
        )
        .await?;
        let header = &answer[..answer.len() - b"hello\n".len()];
        let lb: std::net::Ipv4Addr = ip.parse()?;
        let client_v4: std::net::Ipv4Addr = node_ip(3).parse()?;
        match version {
            "v1" => {
                let line = String::from_utf8_lossy(header);
                let prefix = format!("PROXY TCP4 {client_v4} {lb} ");
                ensure!(
                    line.starts_with(&prefix) && line.ends_with(" 9000\r\n"),
                    "v1 header {line:?}"
                );
            }
            _ => {
                let mut want = b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x0c".to_vec();
                want.extend_from_slice(&client_v4.octets());
                want.extend_from_slice(&lb.octets());
                ensure!(
                    header.len() == 28 && header.starts_with(&want),
                    "v2 header {header:?}"
                );
                ensure!(
                    header[26..28] == 9000u16.to_be_bytes(),
                    "v2 destination port {header:?}"
                );
            }
        }
        println!("  {version}: the pod saw {client_v4} connecting to {lb}:9000");
    }
    Ok(())
}

/// `loadBalancerSourceRanges`: the client outside the cluster, inside the range, is served; the host is
/// refused.
async fn a_source_range_refuses_others(s: &Suite) -> anyhow::Result<()> {
    let client = ExternalClient::create("rk-src")?;
    let range = format!("{}/32", client.address());
    let mut service = lb_service("ranged", "web", false)?;
    if let Some(spec) = service.spec.as_mut() {
        spec.load_balancer_source_ranges = Some(vec![range.clone()]);
    }
    let (_, ip) = create_lb(s, &service).await?;
    let url = format!("http://{ip}/");
    let seen = wait_for(
        "the client in the range served",
        Duration::from_secs(30),
        || {
            let seen = answers(|u| client.get(u), &url, 4);
            async move {
                Ok(Check::when(!seen.is_empty(), seen.clone(), || {
                    "no answer".into()
                }))
            }
        },
    )
    .await?;
    ensure!(seen.iter().all(|p| p.starts_with("web-")), "{seen:?}");
    let from_host = answers(host_get, &url, 3);
    ensure!(
        from_host.is_empty(),
        "the host, outside {range}, was served: {from_host:?}"
    );
    let refused = traffic_of(s, "ranged").await?.refused;
    ensure!(refused >= 3, "refused {refused}");
    Ok(())
}

/// `sessionAffinity: ClientIP`: every connection of one client goes to one backend.
async fn client_ip_affinity_keeps_a_backend(s: &Suite) -> anyhow::Result<()> {
    let mut service = lb_service("sticky", "web", false)?;
    if let Some(spec) = service.spec.as_mut() {
        spec.session_affinity = Some("ClientIP".into());
    }
    let (_, ip) = create_lb(s, &service).await?;
    let url = format!("http://{ip}/");
    wait_for(
        "the sticky load balancer answering",
        Duration::from_secs(30),
        || {
            let seen = answers(host_get, &url, 1);
            async move { Ok(Check::when(!seen.is_empty(), (), || "no answer".into())) }
        },
    )
    .await?;
    let before = traffic_of(s, "sticky").await?;
    let served = answers(host_get, &url, 10).len();
    ensure!(served > 0, "no answer");
    let after = traffic_of(s, "sticky").await?;
    let grew: Vec<(String, u64)> = after
        .backends
        .iter()
        .map(|b| {
            let was = before
                .backends
                .iter()
                .find(|x| x.node == b.node)
                .map_or(0, |x| x.total);
            (b.node.clone(), b.total - was)
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    ensure!(
        grew.len() == 1 && grew[0].1 == 10,
        "connections per backend: {grew:?}"
    );
    Ok(())
}

/// `externalTrafficPolicy: Local`: backends are checked on the Service's `healthCheckNodePort`, and only
/// healthy ones get connections. The one kube-proxy of the nodes is node-1's and answers on every node's
/// address, so every backend follows node-1: no endpoint there, no connection; one there, served; the
/// pod gone again, refused again.
async fn local_policy_follows_the_health_check_node_port(s: &Suite) -> anyhow::Result<()> {
    let (svc, ip) = create_lb(s, &lb_service("local", "local", true)?).await?;
    let hc_port = svc
        .spec
        .as_ref()
        .and_then(|sp| sp.health_check_node_port)
        .ok_or_else(|| anyhow!("no healthCheckNodePort"))?;
    let url = format!("http://{ip}/");
    create_pod(s, &web_pod("local-2", "local", Some(&node_name(2)))?).await?;
    wait_pod_ready(s, "local-2").await?;
    let health = |want: provider_fake::Health| async move {
        wait_for(
            &format!("every backend {want:?}"),
            Duration::from_secs(30),
            || async move {
                let traffic = traffic_of(s, "local")
                    .await
                    .map_err(|e| ccm_e2e::HarnessError::Config(e.to_string()))?;
                let all = traffic.health_check_port == u16::try_from(hc_port).unwrap_or(0)
                    && !traffic.backends.is_empty()
                    && traffic.backends.iter().all(|b| b.health == want);
                Ok(Check::when(all, (), || format!("{:?}", traffic.backends)))
            },
        )
        .await
    };
    health(provider_fake::Health::Unhealthy).await?;
    ensure!(
        answers(host_get, &url, 3).is_empty(),
        "served without a healthy backend"
    );
    create_pod(s, &web_pod("local-1", "local", Some(&node_name(1)))?).await?;
    wait_pod_ready(s, "local-1").await?;
    health(provider_fake::Health::Healthy).await?;
    ensure!(
        !answers(host_get, &url, 3).is_empty(),
        "no answer with healthy backends"
    );
    Api::<Pod>::namespaced(s.client.clone(), NAMESPACE)
        .delete("local-1", &DeleteParams::default())
        .await?;
    health(provider_fake::Health::Unhealthy).await?;
    ensure!(
        answers(host_get, &url, 3).is_empty(),
        "served after the endpoint left node-1"
    );
    Ok(())
}

/// A node excluded from load balancers leaves them: new connections go to the others, its open
/// connection goes on for the drain time and is then closed.
async fn a_backend_that_leaves_drains(s: &Suite) -> anyhow::Result<()> {
    let service = echo_service(
        "drain",
        json!([{"port": 9000, "targetPort": 9000}]),
        json!({}),
    )?;
    let (_, ip) = create_lb(s, &service).await?;
    let to = at(&ip, 9000)?;
    wait_for(
        "the drain load balancer answering",
        Duration::from_secs(30),
        || async move {
            let answer = tcp_exchange(to, None, b"x", Duration::from_millis(300)).await;
            Ok(Check::when(answer == b"x", (), || format!("{answer:?}")))
        },
    )
    .await?;
    // The connections of that wait have closed: one connection open now is the only one.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut open = TcpStream::connect(to).await?;
    open.write_all(b"one\n").await?;
    ensure!(
        read_until_quiet(&mut open, Duration::from_millis(500)).await == b"one\n",
        "no echo"
    );
    let traffic = traffic_of(s, "drain").await?;
    let node = traffic
        .backends
        .iter()
        .find(|b| b.active == 1)
        .map(|b| b.node.clone())
        .ok_or_else(|| anyhow!("no backend carries the connection: {:?}", traffic.backends))?;
    let nodes: Api<Node> = Api::all(s.client.clone());
    let exclude = json!({"metadata": {"labels": {"node.kubernetes.io/exclude-from-external-load-balancers": "true"}}});
    nodes
        .patch(
            &node,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&exclude),
        )
        .await?;
    let left = Instant::now();
    wait_for(
        &format!("{node} draining"),
        Duration::from_secs(30),
        || async {
            let traffic = traffic_of(s, "drain")
                .await
                .map_err(|e| ccm_e2e::HarnessError::Config(e.to_string()))?;
            let draining = traffic
                .backends
                .iter()
                .any(|b| b.node == node && b.draining && b.active == 1);
            Ok(Check::when(draining, (), || {
                format!("{:?}", traffic.backends)
            }))
        },
    )
    .await?;
    let before: u64 = traffic_of(s, "drain")
        .await?
        .backends
        .iter()
        .filter(|b| b.node == node)
        .map(|b| b.total)
        .sum();
    for _ in 0..4 {
        ensure!(
            tcp_exchange(to, None, b"x", Duration::from_millis(300)).await == b"x",
            "a new connection failed"
        );
    }
    let after: u64 = traffic_of(s, "drain")
        .await?
        .backends
        .iter()
        .filter(|b| b.node == node)
        .map(|b| b.total)
        .sum();
    ensure!(
        after == before,
        "the draining {node} got new connections ({before} -> {after})"
    );
    open.write_all(b"two\n").await?;
    ensure!(
        read_until_quiet(&mut open, Duration::from_millis(500)).await == b"two\n",
        "the draining connection stopped early"
    );
    let mut buf = [0u8; 16];
    let end =
        tokio::time::timeout(Duration::from_secs(DRAIN_SECONDS + 10), open.read(&mut buf)).await;
    ensure!(
        matches!(end, Ok(Ok(0)) | Ok(Err(_))),
        "the connection outlived the drain: {end:?}"
    );
    println!(
        "  closed {:?} after its node left (drain {DRAIN_SECONDS} s)",
        left.elapsed()
    );
    let include = json!({"metadata": {"labels": {"node.kubernetes.io/exclude-from-external-load-balancers": null}}});
    nodes
        .patch(
            &node,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&include),
        )
        .await?;
    Ok(())
}

/// A Service deleted: once the CCM has let it go (its finalizer removed), the load balancer's listeners are
/// closed and its address is off `lo`.
async fn a_deleted_service_frees_its_address(s: &Suite) -> anyhow::Result<()> {
    let traffic = traffic_of(s, "echo-proxy-v1").await?;
    let to = at(&traffic.address, 9000)?;
    let services: Api<Service> = Api::namespaced(s.client.clone(), NAMESPACE);
    services
        .delete("echo-proxy-v1", &DeleteParams::default())
        .await?;
    wait_for("the Service gone", Duration::from_secs(30), || {
        let services = services.clone();
        async move {
            let gone = services
                .get_opt("echo-proxy-v1")
                .await
                .map_err(|e| ccm_e2e::HarnessError::kube("get service", e))?
                .is_none();
            Ok(Check::when(gone, (), || "still there".into()))
        }
    })
    .await?;
    ensure!(
        traffic_of(s, "echo-proxy-v1").await.is_err(),
        "the load balancer still runs"
    );
    // (A connection attempt proves nothing here: once the address is off lo, the host's default route
    // may lead to a network that accepts any connection.)
    ensure!(!listening(to), "a socket still listens on {to}");
    let on_lo = pool_addresses_on_lo();
    ensure!(
        !on_lo.contains(&format!("{}/32", traffic.address)),
        "{} still on lo: {on_lo:?}",
        traffic.address
    );
    Ok(())
}

async fn wait_node(
    s: &Suite,
    name: &str,
    what: &str,
    check: impl Fn(&Node) -> bool,
) -> anyhow::Result<Node> {
    Ok(wait_for(
        &format!("{name}: {what}"),
        Duration::from_secs(60),
        || async {
            let node = s
                .node(name)
                .await
                .map_err(|e| ccm_e2e::HarnessError::Config(e.to_string()))?;
            Ok(match node {
                Some(n) if check(&n) => Check::Done(n),
                other => Check::Pending(format!(
                    "ready {:?}, taints {:?}",
                    other.as_ref().map(is_ready),
                    other.as_ref().map(taint_keys)
                )),
            })
        },
    )
    .await?)
}

async fn a_restarted_kubelet_keeps_what_the_ccm_set(s: &Suite) -> anyhow::Result<()> {
    let name = node_name(3);
    let before = s.node(&name).await?.ok_or_else(|| anyhow!("{name} gone"))?;
    s.cluster.stop_kubelet(&name).await?;
    s.cluster.start_kubelet(&name).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = wait_node(s, &name, "Ready", is_ready).await?;
    ensure!(
        provider_id(&after) == provider_id(&before),
        "provider ID changed"
    );
    ensure!(
        !has_taint(&after, UNINITIALIZED_TAINT),
        "the kubelet tainted its node again"
    );
    for key in [
        "node.kubernetes.io/instance-type",
        "topology.kubernetes.io/zone",
    ] {
        ensure!(
            labels(&after).get(key) == labels(&before).get(key),
            "{key} changed"
        );
    }
    Ok(())
}

async fn a_stopped_machine_is_tainted_shutdown_until_it_runs(s: &Suite) -> anyhow::Result<()> {
    let name = node_name(3);
    let admin = s.h()?.admin().clone();
    s.cluster.stop_kubelet(&name).await?;
    admin.stop_instance(&name).await?;
    wait_node(s, &name, "NotReady and tainted shutdown", |n| {
        !is_ready(n) && has_taint(n, SHUTDOWN_TAINT)
    })
    .await?;
    admin.start_instance(&name).await?;
    s.cluster.start_kubelet(&name).await?;
    wait_node(s, &name, "Ready without the shutdown taint", |n| {
        is_ready(n) && !has_taint(n, SHUTDOWN_TAINT)
    })
    .await?;
    Ok(())
}

/// Two of three machines gone: both Nodes are deleted, one per lifecycle pass (the deletion rate of the
/// default `--node-deletion-max-percent`), and a kubelet that is gone does not register them again.
async fn two_of_three_terminated_machines_are_deleted(s: &Suite) -> anyhow::Result<()> {
    let admin = s.h()?.admin().clone();
    let gone = [node_name(2), node_name(3)];
    for name in &gone {
        s.cluster.stop_kubelet(name).await?;
        admin.terminate_instance(name).await?;
    }
    let started = Instant::now();
    wait_for(
        "both terminated nodes deleted",
        Duration::from_secs(90),
        || async {
            let mut left = Vec::new();
            for name in &gone {
                if s.node(name)
                    .await
                    .map_err(|e| ccm_e2e::HarnessError::Config(e.to_string()))?
                    .is_some()
                {
                    left.push(name.clone());
                }
            }
            Ok(Check::when(left.is_empty(), (), || {
                format!("left: {left:?}")
            }))
        },
    )
    .await?;
    println!(
        "  deleted {:?} after their machines went",
        started.elapsed()
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    for name in &gone {
        ensure!(s.node(name).await?.is_none(), "{name} was registered again");
    }
    Ok(())
}

/// The Nodes of the terminated machines are gone: every load balancer's backends are node-1 alone (the
/// deleted ones at most draining, never chosen), and the web Service still answers through it.
async fn deleted_nodes_leave_the_load_balancers(s: &Suite) -> anyhow::Result<()> {
    let kept = node_name(1);
    wait_for(
        "only node-1 behind every load balancer",
        Duration::from_secs(30),
        || async {
            let admin = s
                .h()
                .map_err(|e| ccm_e2e::HarnessError::Config(e.to_string()))?
                .admin();
            let running = admin.load_balancer_traffic().await?;
            let wrong: Vec<(String, Vec<String>)> = running
                .iter()
                .map(|b| {
                    let current = b
                        .backends
                        .iter()
                        .filter(|x| !x.draining)
                        .map(|x| x.node.clone());
                    (b.service.clone(), current.collect::<Vec<_>>())
                })
                .filter(|(_, nodes)| nodes != std::slice::from_ref(&kept))
                .collect();
            Ok(Check::when(
                !running.is_empty() && wrong.is_empty(),
                (),
                || format!("{wrong:?}"),
            ))
        },
    )
    .await?;
    let before = traffic_of(s, "web").await?;
    let url = format!("http://{}/", before.address);
    let served = answers(host_get, &url, 4);
    ensure!(!served.is_empty(), "web no longer answers");
    let after = traffic_of(s, "web").await?;
    for backend in after.backends.iter().filter(|b| b.node != kept) {
        let was = before
            .backends
            .iter()
            .find(|b| b.node == backend.node)
            .map_or(0, |b| b.total);
        ensure!(
            backend.total == was,
            "the deleted {} got new connections",
            backend.node
        );
    }
    Ok(())
}

async fn the_last_machine_of_a_one_node_cluster_is_deleted(s: &Suite) -> anyhow::Result<()> {
    let name = node_name(1);
    s.cluster.stop_kubelet(&name).await?;
    s.h()?.admin().terminate_instance(&name).await?;
    wait_for(
        &format!("{name} deleted"),
        Duration::from_secs(90),
        || async {
            let node = s
                .node(&name)
                .await
                .map_err(|e| ccm_e2e::HarnessError::Config(e.to_string()))?;
            Ok(Check::when(node.is_none(), (), || "still there".into()))
        },
    )
    .await?;
    Ok(())
}

/// The Services deleted: the CCM stops every load balancer and removes every address it added to `lo`.
async fn every_load_balancer_deleted(s: &Suite) -> anyhow::Result<()> {
    let services: Api<Service> = Api::namespaced(s.client.clone(), NAMESPACE);
    for name in [
        "web",
        "local",
        "echo",
        "echo-proxy-v2",
        "ranged",
        "sticky",
        "drain",
    ] {
        let _ = services.delete(name, &DeleteParams::default()).await;
    }
    wait_for(
        "no load balancer running",
        Duration::from_secs(60),
        || async {
            let running = s
                .h()
                .map_err(|e| ccm_e2e::HarnessError::Config(e.to_string()))?
                .admin()
                .load_balancer_traffic()
                .await?;
            let names: Vec<String> = running.into_iter().map(|b| b.service).collect();
            Ok(Check::when(names.is_empty(), (), || {
                format!("running: {names:?}")
            }))
        },
    )
    .await?;
    let left = pool_addresses_on_lo();
    ensure!(left.is_empty(), "addresses left on lo: {left:?}");
    Ok(())
}

async fn run_case<F, Fut>(name: &str, failures: &mut Vec<String>, case: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let started = Instant::now();
    match case().await {
        Ok(()) => println!(
            "real-nodes: {name}: ok ({:.1}s)",
            started.elapsed().as_secs_f64()
        ),
        Err(err) => {
            println!("real-nodes: {name}: FAILED: {err:#}");
            failures.push(format!("{name}: {err:#}"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs real nodes (realkube up --nodes 3): make test-real-nodes"]
async fn real_nodes() {
    let dir = std::env::var("E2E_REAL_NODES_DIR")
        .expect("E2E_REAL_NODES_DIR names the directory of `realkube up --nodes 3` (hack/realkube/test-nodes.sh sets it)");
    let cluster = RealCluster::open(&dir).expect("a realkube cluster with nodes");
    let client = client_from_kubeconfig(&cluster.admin_kubeconfig())
        .await
        .expect("the admin's client");
    let mut s = Suite {
        cluster,
        client,
        harness: None,
    };
    let mut failures = Vec::new();

    run_case(
        "kubelets register tainted, with their node IPs",
        &mut failures,
        || kubelets_register_tainted_with_their_ips(&s),
    )
    .await;
    run_case("a pod waits for an initialized node", &mut failures, || {
        pod_waits_for_the_taint(&s)
    })
    .await;

    let config = HarnessConfig {
        kubeconfig: Some(s.cluster.admin_kubeconfig()),
        mode: Mode::Existing,
        fake_admin: None,
        ccm_namespace: "kube-system".into(),
        ccm_kubeconfig: Some(s.cluster.ccm_kubeconfig()),
        audit_log: Some(s.cluster.audit_log()),
        rbac_manifest: None,
        rbac_exact: true,
        ccm_args: Vec::new(),
    };
    let local = LocalOptions {
        replicas: 1,
        cloud_config: data_path_cloud_config(NODES, Some(MISMATCHED)),
        ..LocalOptions::default()
    };
    s.harness = Some(Harness::start(config, local).await.expect("the CCM starts"));
    println!("real-nodes: the CCM runs as {CCM_SERVICE_ACCOUNT}");

    run_case("nodes are initialized by the CCM", &mut failures, || {
        nodes_are_initialized(&s)
    })
    .await;
    run_case(
        "a provided IP the cloud lacks is refused",
        &mut failures,
        || a_provided_ip_the_cloud_lacks_is_refused(&s),
    )
    .await;
    run_case(
        "the waiting pod runs once a node is initialized",
        &mut failures,
        || the_waiting_pod_runs_once_a_node_is_initialized(&s),
    )
    .await;
    run_case(
        "routes for the pod CIDRs node-ipam gave",
        &mut failures,
        || routes_for_the_pod_cidrs(&s),
    )
    .await;
    run_case(
        "a load balancer serves from pods on two nodes",
        &mut failures,
        || load_balancer_serves_from_pods_on_two_nodes(&s),
    )
    .await;
    run_case(
        "TCP and UDP through the ingress address",
        &mut failures,
        || tcp_and_udp_through_the_ingress_address(&s),
    )
    .await;
    run_case(
        "a pod sees the client through PROXY protocol",
        &mut failures,
        || a_pod_sees_the_client_through_proxy_protocol(&s),
    )
    .await;
    run_case("a source range refuses others", &mut failures, || {
        a_source_range_refuses_others(&s)
    })
    .await;
    run_case("ClientIP affinity keeps a backend", &mut failures, || {
        client_ip_affinity_keeps_a_backend(&s)
    })
    .await;
    run_case(
        "externalTrafficPolicy: Local follows the health check node port",
        &mut failures,
        || local_policy_follows_the_health_check_node_port(&s),
    )
    .await;
    run_case("a backend that leaves drains", &mut failures, || {
        a_backend_that_leaves_drains(&s)
    })
    .await;
    run_case("a deleted Service frees its address", &mut failures, || {
        a_deleted_service_frees_its_address(&s)
    })
    .await;
    run_case(
        "a restarted kubelet keeps what the CCM set",
        &mut failures,
        || a_restarted_kubelet_keeps_what_the_ccm_set(&s),
    )
    .await;
    run_case(
        "a stopped machine is tainted shutdown until it runs",
        &mut failures,
        || a_stopped_machine_is_tainted_shutdown_until_it_runs(&s),
    )
    .await;
    run_case(
        "two of three terminated machines are deleted",
        &mut failures,
        || two_of_three_terminated_machines_are_deleted(&s),
    )
    .await;
    run_case(
        "deleted nodes leave the load balancers",
        &mut failures,
        || deleted_nodes_leave_the_load_balancers(&s),
    )
    .await;
    run_case(
        "the last machine of a one-node cluster is deleted",
        &mut failures,
        || the_last_machine_of_a_one_node_cluster_is_deleted(&s),
    )
    .await;

    run_case(
        "every load balancer deleted, every address off lo",
        &mut failures,
        || every_load_balancer_deleted(&s),
    )
    .await;
    // Whatever a failed case left on lo.
    remove_pool_addresses();
    if !failures.is_empty() {
        let logs = s
            .harness
            .as_ref()
            .map(|h| h.diagnostics())
            .unwrap_or_default();
        panic!(
            "{} real-node case(s) failed:\n  {}\n{logs}",
            failures.len(),
            failures.join("\n  ")
        );
    }
}
