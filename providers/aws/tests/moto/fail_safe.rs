//! Fail-safety of network load balancers: when a lookup the targets or the node rules depend on fails, the
//! sync fails and nothing is deregistered or revoked; a later successful sync converges.
//!
//! EC2 is reached through a small local proxy that forwards every request to moto except those of one
//! chosen action, which get EC2's InternalError (500).

use std::collections::BTreeSet;
use std::sync::Arc;

use cloud_provider::{InstancesV2, LoadBalancer, default_load_balancer_name};
use k8s_openapi::api::core::v1::Node;
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::common::{
    Instance, REGION, World, elb, moto, nlb_service, node_with_id, provider, sg_rules,
};

const INTERNAL_ERROR: &str = "<Response><Errors><Error><Code>InternalError</Code>\
    <Message>An internal error has occurred.</Message></Error></Errors><RequestID>r1</RequestID></Response>";

/// Reads one HTTP request (head and Content-Length body) from `conn`; `None` when the peer closed.
async fn read_request(conn: &mut TcpStream) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let read = conn.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..read]);
        let text = String::from_utf8_lossy(&buf);
        if let Some(head_end) = text.find("\r\n\r\n") {
            let length = text[..head_end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                })
                .unwrap_or(0);
            if buf.len() >= head_end + 4 + length {
                return Some(buf);
            }
        }
    }
}

/// The request with its `Connection` header replaced by `Connection: close`.
fn with_connection_close(message: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(message);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines: Vec<&str> = head
        .lines()
        .filter(|l| !l.to_ascii_lowercase().starts_with("connection:"))
        .collect();
    lines.push("Connection: close");
    format!("{}\r\n\r\n{body}", lines.join("\r\n")).into_bytes()
}

/// Forwards one request to moto and returns its whole response (moto closes the connection after it).
async fn forward(request: &[u8]) -> Vec<u8> {
    let address = moto().url.trim_start_matches("http://").to_string();
    let mut upstream = TcpStream::connect(address).await.expect("connect to moto");
    upstream
        .write_all(&with_connection_close(request))
        .await
        .expect("forward the request");
    let mut response = Vec::new();
    upstream
        .read_to_end(&mut response)
        .await
        .expect("read moto's response");
    with_connection_close(&response)
}

/// A proxy in front of moto's EC2 API: requests of the action in `failing` get a 500 InternalError, every
/// other request goes to moto. One request per connection.
async fn ec2_proxy() -> (String, Arc<Mutex<Option<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let failing: Arc<Mutex<Option<String>>> = Arc::default();
    let fail = failing.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let fail = fail.clone();
            tokio::spawn(async move {
                let Some(request) = read_request(&mut conn).await else {
                    return;
                };
                let action = fail.lock().clone().map(|a| format!("Action={a}&"));
                let text = String::from_utf8_lossy(&request);
                let response = match action {
                    Some(action) if text.contains(&action) => format!(
                        "HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/xml\r\n\
                         Content-Length: {}\r\nConnection: close\r\n\r\n{INTERNAL_ERROR}",
                        INTERNAL_ERROR.len()
                    )
                    .into_bytes(),
                    _ => forward(&request).await,
                };
                let _ = conn.write_all(&response).await;
                let _ = conn.shutdown().await;
            });
        }
    });
    (url, failing)
}

/// The world's cloud config with EC2 reached through `proxy` and no retries.
fn config_through(world: &World, proxy: &str) -> String {
    let config = world.config("MaxAttempts = 1");
    let direct = format!("Service = ec2\nRegion = {REGION}\nURL = {}\n", moto().url);
    let proxied = format!("Service = ec2\nRegion = {REGION}\nURL = {proxy}\n");
    assert!(config.contains(&direct), "{config}");
    config.replace(&direct, &proxied)
}

fn nodes_of(instances: &[&Instance]) -> Vec<Node> {
    instances
        .iter()
        .map(|i| node_with_id(&i.private_dns_name, &i.provider_id()))
        .collect()
}

/// The registered targets of the load balancer's only listener.
async fn targets(lb_name: &str) -> BTreeSet<String> {
    let elb = elb();
    let lb = elb
        .describe_load_balancers()
        .names(lb_name)
        .send()
        .await
        .unwrap();
    let lb_arn = lb.load_balancers()[0].load_balancer_arn().unwrap();
    let listeners = elb
        .describe_listeners()
        .load_balancer_arn(lb_arn)
        .send()
        .await
        .unwrap();
    let tg = listeners.listeners()[0].default_actions()[0]
        .target_group_arn()
        .unwrap()
        .to_string();
    let health = elb
        .describe_target_health()
        .target_group_arn(tg)
        .send()
        .await
        .unwrap();
    health
        .target_health_descriptions()
        .iter()
        .filter_map(|d| d.target()?.id().map(str::to_string))
        .collect()
}

#[tokio::test]
async fn failed_lookups_change_nothing_and_a_later_sync_converges() {
    let world = World::new("failsafe").await;
    let a = world.instance(0).await;
    let b = world.instance(1).await;
    let (proxy, failing) = ec2_proxy().await;
    let cloud = provider(&config_through(&world, &proxy)).await;
    // Source ranges, so the node rules include health rules from the load balancer's subnets.
    let mut svc = nlb_service("safe", &[("http", 80, "TCP", 30993)], &[]);
    svc.spec.as_mut().unwrap().load_balancer_source_ranges = Some(vec!["192.168.0.0/16".into()]);
    let name = default_load_balancer_name(&svc);
    cloud
        .ensure_load_balancer("k", &svc, &nodes_of(&[&a, &b]))
        .await
        .unwrap();
    let both = BTreeSet::from([a.id.clone(), b.id.clone()]);
    assert_eq!(targets(&name).await, both);
    let rules = sg_rules(&world.ec2, &world.node_sg).await;
    assert!(rules.len() > 2, "{rules:?}");

    // Without instance data, neither a host update nor a full sync may act on the node list: b would be
    // deregistered from partial information.
    let mutations = [
        "DeregisterTargets",
        "RegisterTargets",
        "RevokeSecurityGroupIngress",
    ];
    let before: Vec<u64> = mutations
        .iter()
        .map(|m| cloud.metrics().request_count(m))
        .collect();
    let only_a = nodes_of(&[&a]);
    *failing.lock() = Some("DescribeInstances".into());
    let err = cloud
        .update_load_balancer("k", &svc, &only_a)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("InternalError"), "{err}");
    cloud
        .ensure_load_balancer("k", &svc, &only_a)
        .await
        .unwrap_err();
    // Nor may the node rules follow new source ranges when the load balancer's subnets cannot be read.
    let mut narrowed = svc.clone();
    narrowed.spec.as_mut().unwrap().load_balancer_source_ranges =
        Some(vec!["172.16.0.0/12".into()]);
    *failing.lock() = Some("DescribeSubnets".into());
    let err = cloud
        .ensure_load_balancer("k", &narrowed, &nodes_of(&[&a, &b]))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("InternalError"), "{err}");
    let after: Vec<u64> = mutations
        .iter()
        .map(|m| cloud.metrics().request_count(m))
        .collect();
    assert_eq!(before, after, "{mutations:?}");
    assert_eq!(targets(&name).await, both);
    assert_eq!(sg_rules(&world.ec2, &world.node_sg).await, rules);

    // Once EC2 answers again, the next sync converges.
    *failing.lock() = None;
    cloud
        .update_load_balancer("k", &svc, &only_a)
        .await
        .unwrap();
    assert_eq!(targets(&name).await, BTreeSet::from([a.id.clone()]));
    cloud.ensure_load_balancer_deleted("k", &svc).await.unwrap();
    assert!(sg_rules(&world.ec2, &world.node_sg).await.is_empty());
}

/// The same for classic ELBs: without instance data or security groups, no instance is deregistered and no
/// node rule revoked.
#[tokio::test]
async fn classic_failed_lookups_change_nothing_and_a_later_sync_converges() {
    let world = World::new("failclb").await;
    let a = world.instance(0).await;
    let b = world.instance(1).await;
    let (proxy, failing) = ec2_proxy().await;
    let cloud = provider(&config_through(&world, &proxy)).await;
    let svc = crate::common::lb_service("safe", &[("http", 80, "TCP", 30994)], &[]);
    let name = default_load_balancer_name(&svc);
    cloud
        .ensure_load_balancer("k", &svc, &nodes_of(&[&a, &b]))
        .await
        .unwrap();
    let both = BTreeSet::from([a.id.clone(), b.id.clone()]);
    let registered = || async {
        crate::classic::observe_classic(&name)
            .await
            .unwrap()
            .instances()
    };
    assert_eq!(registered().await, both);
    let rules = crate::classic::ingress(&world, &world.node_sg).await;

    let only_a = nodes_of(&[&a]);
    for action in ["DescribeInstances", "DescribeSecurityGroups"] {
        let before = cloud.metrics().mutating_calls();
        *failing.lock() = Some(action.into());
        let err = cloud
            .update_load_balancer("k", &svc, &only_a)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("InternalError"), "{action}: {err}");
        cloud
            .ensure_load_balancer("k", &svc, &only_a)
            .await
            .unwrap_err();
        assert_eq!(cloud.metrics().mutating_calls(), before, "{action}");
        assert_eq!(registered().await, both, "{action}");
        assert_eq!(crate::classic::ingress(&world, &world.node_sg).await, rules);
    }

    *failing.lock() = None;
    cloud
        .update_load_balancer("k", &svc, &only_a)
        .await
        .unwrap();
    assert_eq!(registered().await, BTreeSet::from([a.id.clone()]));
    cloud.ensure_load_balancer_deleted("k", &svc).await.unwrap();
    assert!(crate::classic::observe_classic(&name).await.is_none());
}

/// A failed topology lookup fails the metadata of an instance whose type should have a topology (its node
/// stays uninitialized and is retried), and lets any other go on without the labels, as upstream.
#[tokio::test]
async fn failed_topology_lookup_fails_only_types_that_need_one() {
    let world = World::new("failtopo").await;
    let gpu = world.instance_of_type(0, "p5.48xlarge").await;
    let plain = world.instance(1).await;
    let (proxy, failing) = ec2_proxy().await;
    let cloud = provider(&config_through(&world, &proxy)).await;
    *failing.lock() = Some("DescribeInstanceTopology".into());
    let results = cloud
        .instance_metadata_bulk(&nodes_of(&[&gpu, &plain]))
        .await;
    let err = results[0].as_ref().unwrap_err();
    assert!(err.to_string().contains("p5.48xlarge"), "{err}");
    assert!(err.to_string().contains("InternalError"), "{err}");
    let plain_meta = results[1].as_ref().unwrap().as_ref().unwrap();
    assert!(
        plain_meta
            .additional_labels
            .contains_key("topology.k8s.aws/zone-id")
    );
    assert!(
        !plain_meta
            .additional_labels
            .keys()
            .any(|k| k.contains("network-node"))
    );

    *failing.lock() = None;
    let results = cloud.instance_metadata_bulk(&nodes_of(&[&gpu])).await;
    let labels = &results[0]
        .as_ref()
        .unwrap()
        .as_ref()
        .unwrap()
        .additional_labels;
    assert!(
        labels.contains_key("topology.k8s.aws/network-node-layer-1"),
        "{labels:?}"
    );
}
