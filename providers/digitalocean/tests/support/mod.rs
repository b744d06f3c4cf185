//! Shared building blocks of the integration tests: a provider wired to the API stub, and Kubernetes objects.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Node, NodeAddress, NodeSpec, NodeStatus, Service, ServicePort, ServiceSpec,
};
use provider_digitalocean::stub::DoStub;
use provider_digitalocean::{AccessToken, DigitalOceanCloud, DoConfig, RetryPolicy};

/// A configuration pointing at the stub, region `nyc3`, cluster `c-1`, fast retries.
pub fn config_for(stub: &DoStub) -> DoConfig {
    let mut config = DoConfig::new(AccessToken::new(stub.token()), &stub.url()).unwrap();
    config.region = Some("nyc3".into());
    config.cluster_id = Some("c-1".into());
    config.metadata_url = stub.metadata_url().parse().unwrap();
    config.retry = RetryPolicy {
        max_retries: 3,
        base_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(50),
        max_rate_limit_wait: Duration::from_secs(5),
    };
    config
}

/// A provider for the stub.
pub fn cloud_for(stub: &DoStub) -> DigitalOceanCloud {
    DigitalOceanCloud::new(config_for(stub)).unwrap()
}

/// A provider for the stub, after adjusting the configuration.
pub fn cloud_with(stub: &DoStub, adjust: impl FnOnce(&mut DoConfig)) -> DigitalOceanCloud {
    let mut config = config_for(stub);
    adjust(&mut config);
    DigitalOceanCloud::new(config).unwrap()
}

/// A node with an optional provider ID and no address (it backs no external load balancer).
pub fn bare_node(name: &str, provider_id: Option<&str>) -> Node {
    let mut n = Node::default();
    n.metadata.name = Some(name.into());
    n.spec = Some(NodeSpec {
        provider_id: provider_id.map(str::to_string),
        ..Default::default()
    });
    n
}

/// `node` with the given `(type, address)` pairs.
pub fn with_addresses(mut node: Node, addresses: &[(&str, &str)]) -> Node {
    node.status = Some(NodeStatus {
        addresses: Some(
            addresses
                .iter()
                .map(|(t, a)| NodeAddress {
                    type_: t.to_string(),
                    address: a.to_string(),
                })
                .collect(),
        ),
        ..Default::default()
    });
    node
}

/// A node with an optional provider ID and IPv4 addresses as the node controller sets them (a private
/// `InternalIP` and a public `ExternalIP` derived from the name).
pub fn node(name: &str, provider_id: Option<&str>) -> Node {
    let n = name
        .bytes()
        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)))
        % 250
        + 1;
    with_addresses(
        bare_node(name, provider_id),
        &[
            ("Hostname", name),
            ("InternalIP", &format!("10.110.0.{n}")),
            ("ExternalIP", &format!("198.51.100.{n}")),
        ],
    )
}

/// A node whose provider ID names droplet `id`, with IPv4 addresses.
pub fn droplet_node(name: &str, id: u64) -> Node {
    node(name, Some(&format!("digitalocean://{id}")))
}

/// A node whose provider ID names droplet `id`, with IPv4 and IPv6 addresses.
pub fn dual_stack_node(name: &str, id: u64) -> Node {
    let mut node = droplet_node(name, id);
    if let Some(addresses) = node.status.as_mut().and_then(|s| s.addresses.as_mut()) {
        addresses.push(NodeAddress {
            type_: "ExternalIP".into(),
            address: format!("2604:a880:400:d1::{:x}:{:x}", id >> 16, id & 0xffff),
        });
    }
    node
}

/// A TCP service port.
pub fn tcp_port(port: i32, node_port: i32) -> ServicePort {
    ServicePort {
        name: Some(format!("p{port}")),
        port,
        node_port: Some(node_port),
        protocol: Some("TCP".into()),
        ..Default::default()
    }
}

/// A LoadBalancer Service `default/<name>` with the given annotations and ports 80 and 443.
pub fn lb_service(name: &str, uid: &str, annotations: &[(&str, &str)]) -> Service {
    let mut s = Service::default();
    s.metadata.name = Some(name.into());
    s.metadata.namespace = Some("default".into());
    s.metadata.uid = Some(uid.into());
    s.metadata.annotations = Some(
        annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>(),
    );
    s.spec = Some(ServiceSpec {
        type_: Some("LoadBalancer".into()),
        ports: Some(vec![tcp_port(80, 30080), tcp_port(443, 30443)]),
        ..Default::default()
    });
    s
}

/// Runs `controller` on the controller manager's real run path (`run_with_provider_controllers`, with the
/// shared Service watch) against the API server of `client`, with `cloud` as the provider, until the
/// returned token is cancelled.
pub fn spawn_provider_controller(
    client: kube::Client,
    cloud: DigitalOceanCloud,
    controller: std::sync::Arc<dyn cloud_provider::ProviderController>,
) -> tokio_util::sync::CancellationToken {
    use cloud_controllers::{
        ControllerConfig, ControllerContext, ControllerMetrics, HealthRegistry,
    };
    let context = ControllerContext {
        client: client.clone(),
        event_client: client,
        cloud: std::sync::Arc::new(cloud),
        config: std::sync::Arc::new(ControllerConfig::default()),
        metrics: ControllerMetrics::register(&mut prometheus_client::registry::Registry::default()),
        health: HealthRegistry::new(),
        identity: "provider-controller-test_0".into(),
    };
    let shutdown = tokio_util::sync::CancellationToken::new();
    tokio::spawn(cloud_controllers::run_with_provider_controllers(
        context,
        &[],
        vec![controller],
        shutdown.clone(),
    ));
    shutdown
}

/// Waits up to 20 s for `check`, failing the test naming `what`.
pub async fn wait_until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
