//! What one load balancer's data path does, read from its Service and its backend Nodes: the listeners,
//! the backends' addresses, where they are health-checked, who may connect, affinity and PROXY protocol.

use std::net::IpAddr;
use std::time::Duration;

use cloud_provider::CloudError;
use k8s_openapi::api::core::v1::{Node, Service};

use crate::config::{DataPathConfig, ProxyProtocol};
use crate::pool::Cidr;
use crate::service_annotations::{client_affinity, proxy_protocol, service_key, source_ranges};

/// A transport a listener carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Transport {
    Tcp,
    Udp,
}

impl Transport {
    /// `TCP` or `UDP`, as Kubernetes spells the protocol.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Transport::Tcp => "TCP",
            Transport::Udp => "UDP",
        }
    }
}

/// One front-end port and the node port its traffic goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct ListenerSpec {
    /// TCP or UDP.
    pub(crate) transport: Transport,
    /// The front-end port on the ingress address.
    pub(crate) port: u16,
    /// The node port the traffic goes to on every backend.
    pub(crate) node_port: u16,
}

/// A backend: a node and the address its node ports answer on.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct BackendSpec {
    /// The node's name.
    pub(crate) node: String,
    /// The node's address of the ingress address's family.
    pub(crate) address: IpAddr,
}

/// How traffic is steered, shared by every listener of a load balancer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Policy {
    /// The port each backend is health-checked on (`GET /healthz`).
    pub(crate) health_port: u16,
    /// Client networks allowed to connect; empty: everyone.
    pub(crate) source_ranges: Vec<Cidr>,
    /// How long a client keeps its backend (`sessionAffinity: ClientIP`).
    pub(crate) affinity: Option<Duration>,
    /// The PROXY protocol header written to TCP backends.
    pub(crate) proxy: Option<ProxyProtocol>,
}

impl Policy {
    /// Whether a client at `ip` may connect.
    pub(crate) fn admits(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        self.source_ranges.is_empty() || self.source_ranges.iter().any(|r| r.contains(ip))
    }
}

/// Everything one load balancer's data path is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BalancerSpec {
    /// The load balancer's cloud name.
    pub(crate) name: String,
    /// `namespace/name` of its Service (for logs).
    pub(crate) service: String,
    /// The ingress address the listeners bind.
    pub(crate) address: IpAddr,
    /// The listeners, sorted.
    pub(crate) listeners: Vec<ListenerSpec>,
    /// The backends, sorted.
    pub(crate) backends: Vec<BackendSpec>,
    /// How traffic is steered.
    pub(crate) policy: Policy,
}

impl BalancerSpec {
    /// The data path of the load balancer `name` on `address` for `service` and `nodes`; fails on what
    /// the Service asks that cannot be carried out (a bad source range or PROXY protocol annotation).
    pub(crate) fn new(
        config: &DataPathConfig,
        name: &str,
        address: IpAddr,
        service: &Service,
        nodes: &[Node],
    ) -> Result<BalancerSpec, CloudError> {
        let spec = service.spec.as_ref();
        let local = spec.and_then(|s| s.external_traffic_policy.as_deref()) == Some("Local");
        let health_port = spec
            .and_then(|s| s.health_check_node_port)
            .filter(|_| local)
            .and_then(|p| u16::try_from(p).ok())
            .unwrap_or(config.kube_proxy_health_port);
        Ok(BalancerSpec {
            name: name.to_string(),
            service: service_key(service),
            address,
            listeners: listeners(service),
            backends: backends(nodes, address),
            policy: Policy {
                health_port,
                source_ranges: source_ranges(service)?,
                affinity: client_affinity(service),
                proxy: proxy_protocol(service)?,
            },
        })
    }
}

/// The TCP and UDP ports that have a node port (SCTP and ports without one cannot be forwarded to nodes).
fn listeners(service: &Service) -> Vec<ListenerSpec> {
    let ports = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_deref())
        .unwrap_or_default();
    let mut listeners = Vec::new();
    for p in ports {
        let transport = match p.protocol.as_deref().unwrap_or("TCP") {
            "TCP" => Transport::Tcp,
            "UDP" => Transport::Udp,
            other => {
                tracing::debug!(service = %service_key(service), port = p.port, protocol = other,
                    "fake data path: the protocol is not carried");
                continue;
            }
        };
        let (Ok(port), Some(Ok(node_port))) =
            (u16::try_from(p.port), p.node_port.map(u16::try_from))
        else {
            tracing::debug!(service = %service_key(service), port = p.port,
                "fake data path: the port has no node port to forward to");
            continue;
        };
        listeners.push(ListenerSpec {
            transport,
            port,
            node_port,
        });
    }
    listeners.sort();
    listeners.dedup();
    listeners
}

/// Each node's address of the ingress address's family, InternalIP first, then ExternalIP; nodes without
/// one are left out.
pub(crate) fn backends(nodes: &[Node], ingress: IpAddr) -> Vec<BackendSpec> {
    let mut backends: Vec<BackendSpec> = nodes
        .iter()
        .filter_map(|node| {
            let name = node.metadata.name.clone()?;
            let addresses = node.status.as_ref()?.addresses.as_deref()?;
            let of_type = |wanted: &str| {
                addresses
                    .iter()
                    .filter(|a| a.type_ == wanted)
                    .filter_map(|a| a.address.parse::<IpAddr>().ok())
                    .find(|ip| ip.is_ipv4() == ingress.is_ipv4())
            };
            let address = of_type("InternalIP").or_else(|| of_type("ExternalIP"));
            if address.is_none() {
                tracing::debug!(node = %name, "fake data path: the node has no address to forward to");
            }
            Some(BackendSpec { node: name, address: address? })
        })
        .collect();
    backends.sort();
    backends
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn service(extra: serde_json::Value) -> Service {
        let mut s = json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "u1"},
            "spec": {"type": "LoadBalancer", "ports": [
                {"port": 80, "nodePort": 30080},
                {"port": 53, "nodePort": 30053, "protocol": "UDP"},
                {"port": 9, "nodePort": 30009, "protocol": "SCTP"},
                {"port": 81},
            ]},
        });
        for (k, v) in extra.as_object().unwrap() {
            s["spec"][k] = v.clone();
        }
        serde_json::from_value(s).unwrap()
    }

    fn node(name: &str, addresses: serde_json::Value) -> Node {
        serde_json::from_value(
            json!({"metadata": {"name": name}, "status": {"addresses": addresses}}),
        )
        .unwrap()
    }

    #[test]
    fn listeners_backends_and_policy() {
        let nodes = [
            node(
                "b",
                json!([{"type": "ExternalIP", "address": "203.0.113.2"}]),
            ),
            node(
                "a",
                json!([{"type": "Hostname", "address": "a"},
                             {"type": "InternalIP", "address": "fd00::1"},
                             {"type": "InternalIP", "address": "10.0.0.1"}]),
            ),
            node("c", json!([{"type": "Hostname", "address": "c"}])),
        ];
        let ip: IpAddr = "127.240.0.1".parse().unwrap();
        let spec = BalancerSpec::new(
            &DataPathConfig::default(),
            "lb",
            ip,
            &service(json!({})),
            &nodes,
        )
        .unwrap();
        assert_eq!(
            spec.listeners,
            [
                ListenerSpec {
                    transport: Transport::Tcp,
                    port: 80,
                    node_port: 30080
                },
                ListenerSpec {
                    transport: Transport::Udp,
                    port: 53,
                    node_port: 30053
                },
            ]
        );
        let backends: Vec<(String, String)> = spec
            .backends
            .iter()
            .map(|b| (b.node.clone(), b.address.to_string()))
            .collect();
        assert_eq!(
            backends,
            [
                ("a".into(), "10.0.0.1".into()),
                ("b".into(), "203.0.113.2".into())
            ]
        );
        assert_eq!(spec.policy.health_port, 10256);
        assert!(spec.policy.admits("192.0.2.1".parse().unwrap()));

        let local = service(
            json!({"externalTrafficPolicy": "Local", "healthCheckNodePort": 31000,
                                   "loadBalancerSourceRanges": ["127.0.0.2/32"]}),
        );
        let spec = BalancerSpec::new(&DataPathConfig::default(), "lb", ip, &local, &nodes).unwrap();
        assert_eq!(spec.policy.health_port, 31000);
        assert!(spec.policy.admits("127.0.0.2".parse().unwrap()));
        assert!(spec.policy.admits("::ffff:127.0.0.2".parse().unwrap()));
        assert!(!spec.policy.admits("127.0.0.3".parse().unwrap()));
    }
}
