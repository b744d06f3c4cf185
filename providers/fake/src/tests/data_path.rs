//! The data path with real packets on loopback: each test's "nodes" are loopback addresses where a TCP
//! and UDP echo server (the node port, answering `<node>:` and then what it got) and a health server
//! (kube-proxy's, answering 200 or 503 as the test says) listen; the load balancer listens on an address
//! of its own pool. Tests use distinct loopback networks so they can run in parallel.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Service};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream, UdpSocket};

use super::{cloud, node_with, service};
use crate::{ANN_PROXY_PROTOCOL, FakeCloud, Health};
use cloud_provider::LoadBalancer;

/// A node of a test: its address, node ports and health.
struct FakeNode {
    name: String,
    ip: IpAddr,
    healthy: Arc<AtomicBool>,
}

/// Starts `count` nodes on `127.<net>.0.<10+i>`: TCP and UDP echo on one node port, health on another.
/// Returns them with (node port, health port).
async fn nodes(net: u8, count: u8) -> (Vec<FakeNode>, u16, u16) {
    let mut node_port = 0;
    let mut health_port = 0;
    let mut out = Vec::new();
    for i in 1..=count {
        let ip = IpAddr::from([127, net, 0, 10 + i]);
        let name = format!("node-{i}");
        let tcp = TcpListener::bind((ip, node_port)).await.unwrap();
        node_port = tcp.local_addr().unwrap().port();
        let udp = UdpSocket::bind((ip, node_port)).await.unwrap();
        let health = TcpListener::bind((ip, health_port)).await.unwrap();
        health_port = health.local_addr().unwrap().port();
        let healthy = Arc::new(AtomicBool::new(true));
        tokio::spawn(echo_tcp(tcp, name.clone()));
        tokio::spawn(echo_udp(udp, name.clone()));
        tokio::spawn(health_server(health, healthy.clone()));
        out.push(FakeNode { name, ip, healthy });
    }
    (out, node_port, health_port)
}

async fn echo_tcp(listener: TcpListener, name: String) {
    while let Ok((mut s, _)) = listener.accept().await {
        let name = name.clone();
        tokio::spawn(async move {
            let _ = s.write_all(format!("{name}:").as_bytes()).await;
            let mut buf = [0u8; 1024];
            while let Ok(n) = s.read(&mut buf).await {
                if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
        });
    }
}

async fn echo_udp(socket: UdpSocket, name: String) {
    let mut buf = [0u8; 1024];
    while let Ok((n, from)) = socket.recv_from(&mut buf).await {
        let reply = [format!("{name}:").as_bytes(), &buf[..n]].concat();
        let _ = socket.send_to(&reply, from).await;
    }
}

async fn health_server(listener: TcpListener, healthy: Arc<AtomicBool>) {
    while let Ok((mut s, _)) = listener.accept().await {
        let healthy = healthy.load(Ordering::Relaxed);
        tokio::spawn(async move {
            let mut buf = [0u8; 512];
            let _ = s.read(&mut buf).await;
            let status = if healthy {
                "200 OK"
            } else {
                "503 Service Unavailable"
            };
            let _ = s
                .write_all(format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n").as_bytes())
                .await;
        });
    }
}

fn k8s_nodes(nodes: &[FakeNode]) -> Vec<Node> {
    nodes
        .iter()
        .map(|n| node_with(&n.name, None, &[("InternalIP", &n.ip.to_string())]))
        .collect()
}

/// A cloud with the data path on, its pool `127.<net>.1.0/24`, kube-proxy's health port `health_port`.
fn data_path_cloud(net: u8, health_port: u16, extra: &str) -> FakeCloud {
    cloud(&format!(
        "loadBalancerCIDR: 127.{net}.1.0/24\ndataPath:\n  kubeProxyHealthPort: {health_port}\n  \
         healthCheckIntervalMillis: 100\n  drainSeconds: 1\n{extra}"
    ))
}

fn web(node_port: u16, extra: serde_json::Value) -> Service {
    let mut s = service("web", "uid-web", &[(8080, i32::from(node_port))]);
    let mut value = serde_json::to_value(&s).unwrap();
    for (k, v) in extra.as_object().unwrap() {
        if k == "annotations" {
            value["metadata"]["annotations"] = v.clone();
        } else {
            value["spec"][k] = v.clone();
        }
    }
    s = serde_json::from_value(value).unwrap();
    s
}

/// Adds a port to the Service.
fn add_port(svc: &mut Service, port: i32, node_port: u16, protocol: &str, name: &str) {
    if let Some(ports) = svc.spec.as_mut().and_then(|s| s.ports.as_mut()) {
        ports.push(k8s_openapi::api::core::v1::ServicePort {
            port,
            node_port: Some(i32::from(node_port)),
            protocol: Some(protocol.into()),
            name: Some(name.into()),
            ..Default::default()
        });
    }
}

async fn ensure(cloud: &FakeCloud, svc: &Service, nodes: &[Node]) -> SocketAddr {
    let status = cloud.ensure_load_balancer("c", svc, nodes).await.unwrap();
    let ingress = &status.ingress.unwrap()[0];
    assert_eq!(
        ingress.ip_mode.as_deref(),
        Some("Proxy"),
        "a load balancer that proxies says so"
    );
    SocketAddr::new(ingress.ip.as_deref().unwrap().parse().unwrap(), 8080)
}

/// Waits until every backend has the wanted health.
async fn wait_health(cloud: &FakeCloud, want: &[Health]) {
    for _ in 0..100 {
        let traffic = cloud.handle().load_balancer_traffic();
        let health: Vec<Health> = traffic[0]
            .backends
            .iter()
            .filter(|b| !b.draining)
            .map(|b| b.health)
            .collect();
        if health == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "health never became {want:?}: {:?}",
        cloud.handle().load_balancer_traffic()
    );
}

/// Connects from `from` (a loopback address) to `lb`, sends `payload`, reads what comes back within 2 s.
async fn exchange(lb: SocketAddr, from: Option<IpAddr>, payload: &[u8]) -> Vec<u8> {
    let socket = TcpSocket::new_v4().unwrap();
    if let Some(from) = from {
        socket.bind(SocketAddr::new(from, 0)).unwrap();
    }
    let Ok(mut stream) = socket.connect(lb).await else {
        return Vec::new();
    };
    let _ = stream.write_all(payload).await;
    let mut out = Vec::new();
    let mut buf = [0u8; 256];
    while let Ok(Ok(n)) =
        tokio::time::timeout(Duration::from_millis(300), stream.read(&mut buf)).await
    {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    out
}

async fn answering_nodes(lb: SocketAddr, from: Option<IpAddr>, tries: usize) -> Vec<String> {
    let mut seen = Vec::new();
    for _ in 0..tries {
        let answer = String::from_utf8(exchange(lb, from, b"x").await).unwrap();
        if let Some((node, _)) = answer.split_once(':') {
            seen.push(node.to_string());
        }
    }
    seen
}

#[tokio::test]
async fn tcp_and_udp_reach_healthy_backends_in_turn() {
    let (nodes, node_port, health_port) = nodes(201, 2).await;
    let cloud = data_path_cloud(201, health_port, "");
    let mut svc = web(node_port, serde_json::json!({}));
    add_port(&mut svc, 8080, node_port, "UDP", "udp");
    let lb = ensure(&cloud, &svc, &k8s_nodes(&nodes)).await;
    wait_health(&cloud, &[Health::Healthy, Health::Healthy]).await;
    let mut seen = answering_nodes(lb, None, 4).await;
    seen.sort();
    assert_eq!(seen, ["node-1", "node-1", "node-2", "node-2"]);

    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    client.send_to(b"ping", lb).await.unwrap();
    let mut buf = [0u8; 64];
    let (n, from) = tokio::time::timeout(Duration::from_secs(2), client.recv_from(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(from, lb, "the reply comes from the load balancer's address");
    let reply = String::from_utf8_lossy(&buf[..n]).to_string();
    assert!(
        reply.ends_with(":ping") && reply.starts_with("node-"),
        "{reply}"
    );

    // A node failing its health checks gets no new connections.
    nodes[0].healthy.store(false, Ordering::Relaxed);
    wait_health(&cloud, &[Health::Unhealthy, Health::Healthy]).await;
    assert_eq!(answering_nodes(lb, None, 3).await, ["node-2"; 3]);
    // None healthy: connections are turned away.
    nodes[1].healthy.store(false, Ordering::Relaxed);
    wait_health(&cloud, &[Health::Unhealthy, Health::Unhealthy]).await;
    assert!(answering_nodes(lb, None, 2).await.is_empty());
    assert!(cloud.handle().load_balancer_traffic()[0].rejected >= 2);

    // Deleted: the listeners close and the address is free.
    cloud.ensure_load_balancer_deleted("c", &svc).await.unwrap();
    assert!(cloud.handle().load_balancer_traffic().is_empty());
    assert!(
        TcpStream::connect(lb).await.is_err(),
        "nothing listens after the delete"
    );
}

#[tokio::test]
async fn local_traffic_policy_checks_the_health_check_node_port() {
    let (nodes, node_port, health_port) = nodes(202, 2).await;
    // kube-proxy's own port answers nowhere: only the Service's health-check node port counts.
    let cloud = data_path_cloud(202, 1, "");
    let svc = web(
        node_port,
        serde_json::json!({
            "externalTrafficPolicy": "Local", "healthCheckNodePort": health_port,
        }),
    );
    nodes[1].healthy.store(false, Ordering::Relaxed);
    let lb = ensure(&cloud, &svc, &k8s_nodes(&nodes)).await;
    wait_health(&cloud, &[Health::Healthy, Health::Unhealthy]).await;
    assert_eq!(answering_nodes(lb, None, 3).await, ["node-1"; 3]);
    // The endpoint moves to node-2.
    nodes[0].healthy.store(false, Ordering::Relaxed);
    nodes[1].healthy.store(true, Ordering::Relaxed);
    wait_health(&cloud, &[Health::Unhealthy, Health::Healthy]).await;
    assert_eq!(answering_nodes(lb, None, 3).await, ["node-2"; 3]);
    assert_eq!(
        cloud.handle().load_balancer_traffic()[0].health_check_port,
        health_port
    );
}

#[tokio::test]
async fn source_ranges_and_client_affinity() {
    let (nodes, node_port, health_port) = nodes(203, 2).await;
    let cloud = data_path_cloud(203, health_port, "");
    let allowed = IpAddr::from([127, 0, 0, 2]);
    let other = IpAddr::from([127, 0, 0, 3]);
    let svc = web(
        node_port,
        serde_json::json!({
            "loadBalancerSourceRanges": ["127.0.0.2/32"], "sessionAffinity": "ClientIP",
        }),
    );
    let lb = ensure(&cloud, &svc, &k8s_nodes(&nodes)).await;
    wait_health(&cloud, &[Health::Healthy, Health::Healthy]).await;
    let seen = answering_nodes(lb, Some(allowed), 4).await;
    assert_eq!(seen.len(), 4);
    assert!(
        seen.iter().all(|n| *n == seen[0]),
        "ClientIP affinity keeps one backend: {seen:?}"
    );
    assert!(
        answering_nodes(lb, Some(other), 2).await.is_empty(),
        "outside the source ranges"
    );
    assert_eq!(cloud.handle().load_balancer_traffic()[0].refused, 2);
}

#[tokio::test]
async fn connections_over_the_limit_are_turned_away() {
    let (nodes, node_port, health_port) = nodes(206, 1).await;
    let cloud = data_path_cloud(206, health_port, "  maxConnections: 1\n");
    let allowed = IpAddr::from([127, 0, 0, 1]);
    let lb = ensure(
        &cloud,
        &web(node_port, serde_json::json!({})),
        &k8s_nodes(&nodes),
    )
    .await;
    wait_health(&cloud, &[Health::Healthy]).await;
    // One connection at a time: a second is turned away while the first is open.
    let first = TcpSocket::new_v4().unwrap();
    first.bind(SocketAddr::new(allowed, 0)).unwrap();
    let mut first = first.connect(lb).await.unwrap();
    let mut buf = [0u8; 16];
    let n = first.read(&mut buf).await.unwrap();
    assert!(n > 0);
    assert!(
        answering_nodes(lb, Some(allowed), 1).await.is_empty(),
        "over the limit"
    );
    drop(first);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(answering_nodes(lb, Some(allowed), 1).await.len(), 1);
}

#[tokio::test]
async fn proxy_protocol_headers_carry_the_client_address() {
    let (nodes, node_port, health_port) = nodes(204, 1).await;
    let cloud = data_path_cloud(204, health_port, "");
    let client = IpAddr::from([127, 0, 0, 7]);
    for (version, prefix) in [
        ("v1", b"PROXY TCP4 127.0.0.7 127.204.1.1 ".as_slice()),
        (
            "v2",
            b"\r\n\r\n\0\r\nQUIT\n\x21\x11\0\x0c\x7f\0\0\x07\x7f\xcc\x01\x01".as_slice(),
        ),
    ] {
        let svc = web(
            node_port,
            serde_json::json!({"annotations": {ANN_PROXY_PROTOCOL: version}}),
        );
        let lb = ensure(&cloud, &svc, &k8s_nodes(&nodes)).await;
        wait_health(&cloud, &[Health::Healthy]).await;
        let answer = exchange(lb, Some(client), b"hello").await;
        let body = answer
            .strip_prefix(b"node-1:".as_slice())
            .unwrap_or_else(|| panic!("{answer:?}"));
        assert!(body.starts_with(prefix), "{version}: {body:?}");
        assert!(body.ends_with(b"hello"), "{version}: {body:?}");
    }
}

#[tokio::test]
async fn a_backend_that_leaves_drains_its_connections() {
    let (nodes, node_port, health_port) = nodes(205, 2).await;
    let cloud = data_path_cloud(205, health_port, "");
    let svc = web(node_port, serde_json::json!({}));
    let all = k8s_nodes(&nodes);
    let lb = ensure(&cloud, &svc, &all).await;
    wait_health(&cloud, &[Health::Healthy, Health::Healthy]).await;
    // An open connection, and the node it went to.
    let mut open = TcpStream::connect(lb).await.unwrap();
    let mut buf = [0u8; 64];
    let n = open.read(&mut buf).await.unwrap();
    let node = String::from_utf8_lossy(&buf[..n])
        .trim_end_matches(':')
        .to_string();
    let staying: Vec<Node> = all
        .iter()
        .filter(|n| n.metadata.name.as_deref() != Some(&node))
        .cloned()
        .collect();
    cloud
        .update_load_balancer("c", &svc, &staying)
        .await
        .unwrap();
    let other = staying[0].metadata.name.clone().unwrap();
    // New connections go to the other node; the open one still works while it drains.
    assert_eq!(answering_nodes(lb, None, 2).await, [other.clone(), other]);
    open.write_all(b"still").await.unwrap();
    let n = open.read(&mut buf).await.unwrap();
    assert_eq!(&buf[..n], b"still");
    let draining: Vec<(String, bool, u64)> = cloud.handle().load_balancer_traffic()[0]
        .backends
        .iter()
        .map(|b| (b.node.clone(), b.draining, b.active))
        .collect();
    assert!(draining.contains(&(node.clone(), true, 1)), "{draining:?}");
    // After the drain (1 s) the connection is closed.
    let closed = tokio::time::timeout(Duration::from_secs(3), open.read(&mut buf))
        .await
        .unwrap();
    assert!(matches!(closed, Ok(0) | Err(_)), "{closed:?}");
}

#[tokio::test]
async fn an_address_the_host_lacks_fails_the_sync_with_a_hint() {
    let cloud = cloud("loadBalancerCIDR: 192.0.2.0/24\ndataPath: true\n");
    let err = cloud
        .ensure_load_balancer("c", &web(30080, serde_json::json!({})), &[])
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("cannot listen on 192.0.2.1:8080 (TCP)"),
        "{err}"
    );
    assert!(err.contains("loopback loadBalancerCIDR"), "{err}");
    // A bad source range is refused before anything changes.
    let bad = web(
        30080,
        serde_json::json!({"loadBalancerSourceRanges": ["nonsense"]}),
    );
    let err = cloud
        .ensure_load_balancer("c", &bad, &[])
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("is not a CIDR"), "{err}");
}

#[test]
fn data_path_config_forms() {
    let on = crate::FakeConfig::from_yaml(b"dataPath: true").unwrap();
    assert!(on.data_path.enabled);
    assert_eq!(on.load_balancer_cidr, crate::DEFAULT_DATA_PATH_CIDR);
    let tuned =
        crate::FakeConfig::from_yaml(b"dataPath: {drainSeconds: 5, interface: lo}").unwrap();
    assert!(tuned.data_path.enabled);
    assert_eq!(tuned.data_path.drain_seconds, 5);
    assert_eq!(tuned.data_path.max_connections, 1024);
    let off = crate::FakeConfig::from_yaml(b"dataPath: false").unwrap();
    assert_eq!(off.load_balancer_cidr, crate::DEFAULT_LOAD_BALANCER_CIDR);
    let err = crate::FakeConfig::from_yaml(b"dataPath: {drainSecs: 5}")
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown field `drainSecs`"), "{err}");
    let err = crate::FakeConfig::from_yaml(b"dataPath: {maxConnections: 0}")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("dataPath.maxConnections: must be at least 1"),
        "{err}"
    );
    let err = crate::FakeConfig::from_yaml(b"dataPath: {interface: 'lo; rm'}")
        .unwrap_err()
        .to_string();
    assert!(err.contains("is not an interface name"), "{err}");
}

#[tokio::test]
async fn a_port_that_cannot_be_bound_leaves_nothing_bound() {
    let (nodes, node_port, health_port) = nodes(207, 1).await;
    let cloud = data_path_cloud(207, health_port, "");
    let mut svc = web(node_port, serde_json::json!({}));
    add_port(&mut svc, 8081, node_port, "TCP", "second");
    // Something else holds the second port on the address the load balancer gets.
    let squatter = TcpListener::bind("127.207.1.1:8081").await.unwrap();
    let err = cloud
        .ensure_load_balancer("c", &svc, &k8s_nodes(&nodes))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("127.207.1.1:8081"), "{err}");
    drop(squatter);
    // Nothing of the failed attempt holds the first port: the retry binds both.
    let lb = ensure(&cloud, &svc, &k8s_nodes(&nodes)).await;
    wait_health(&cloud, &[Health::Healthy]).await;
    assert_eq!(answering_nodes(lb, None, 1).await, ["node-1"]);
}

#[tokio::test]
async fn a_port_removed_from_the_service_is_released() {
    let (nodes, node_port, health_port) = nodes(208, 1).await;
    let cloud = data_path_cloud(208, health_port, "");
    let mut svc = web(node_port, serde_json::json!({}));
    add_port(&mut svc, 8080, node_port, "UDP", "udp");
    let lb = ensure(&cloud, &svc, &k8s_nodes(&nodes)).await;
    wait_health(&cloud, &[Health::Healthy]).await;
    // A UDP flow is open when the port goes.
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    client.send_to(b"ping", lb).await.unwrap();
    let mut buf = [0u8; 64];
    tokio::time::timeout(Duration::from_secs(2), client.recv_from(&mut buf))
        .await
        .unwrap()
        .unwrap();
    svc.spec.as_mut().unwrap().ports.as_mut().unwrap().pop();
    ensure(&cloud, &svc, &k8s_nodes(&nodes)).await;
    let mut bound = None;
    for _ in 0..50 {
        if let Ok(socket) = UdpSocket::bind(lb).await {
            bound = Some(socket);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        bound.is_some(),
        "the removed UDP port (and its flow) still holds {lb}"
    );
}

#[tokio::test]
async fn a_new_health_port_is_decided_by_its_first_check() {
    let (nodes, node_port, health_port) = nodes(209, 1).await;
    // kube-proxy's port answers healthy; a Local Service's port (nothing listens there) fails. With 200
    // failures needed to flip, only the first-check rule makes the change show within the wait.
    let cloud = data_path_cloud(209, health_port, "  unhealthyThreshold: 200\n");
    let lb = ensure(
        &cloud,
        &web(node_port, serde_json::json!({})),
        &k8s_nodes(&nodes),
    )
    .await;
    wait_health(&cloud, &[Health::Healthy]).await;
    let closed_port = TcpListener::bind((nodes[0].ip, 0))
        .await
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let local = web(
        node_port,
        serde_json::json!({
            "externalTrafficPolicy": "Local", "healthCheckNodePort": closed_port,
        }),
    );
    ensure(&cloud, &local, &k8s_nodes(&nodes)).await;
    wait_health(&cloud, &[Health::Unhealthy]).await;
    assert!(answering_nodes(lb, None, 1).await.is_empty());
}
