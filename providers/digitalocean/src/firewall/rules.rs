//! The public-access firewall's wire shapes, the firewall the cluster's Services call for, and the
//! comparison that decides whether the cloud's copy needs an update.
//!
//! The rule set is the upstream DigitalOcean cloud-controller-manager's, so a takeover finds its firewall
//! already right:
//! - every port of a `NodePort` Service (TCP and UDP; other protocols are skipped) opens its node port to
//!   `0.0.0.0/0` and `::/0`, unless the Service is annotated
//!   `kubernetes.digitalocean.com/firewall-managed: "false"` (an unreadable value counts as managed);
//! - an external `REGIONAL_NETWORK` load balancer (the packets reach the nodes on the Service's own ports)
//!   opens each TCP/UDP service port to everyone, and its health-check port (the Service's health-check
//!   node port with `externalTrafficPolicy: Local`, else kube-proxy's 10256) to the load balancer alone
//!   when its ID is known (`kubernetes.digitalocean.com/load-balancer-id`), else to everyone;
//! - every outbound TCP, UDP and ICMP packet is allowed.
//!
//! Rules are sorted by protocol, then port (as text). Two firewalls are equal when their names, tags (in
//! order) and rules (in any order) are, comparing rules by protocol, port range (`all`, empty and `0`
//! all mean every port) and the addresses and load-balancer IDs of their sources or destinations.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use serde::{Deserialize, Deserializer, Serialize};

use crate::annotations::{
    ANN_LOAD_BALANCER_ID, Annotations, NETWORK_EXTERNAL, ServiceConfigError, lb_type, network,
    parse_go_bool, service_key,
};
use crate::config::{LbType, PublicAccessFirewall};
use crate::lb_spec::default_health_check_port;

/// The annotation that takes a `NodePort` Service's ports out of the public-access firewall.
pub const ANN_FIREWALL_MANAGED: &str = "kubernetes.digitalocean.com/firewall-managed";

/// Everyone, IPv4 and IPv6.
const EVERYWHERE: [&str; 2] = ["0.0.0.0/0", "::/0"];

/// A cloud firewall as the API returns it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct Firewall {
    /// Its ID.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Inbound rules.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub inbound_rules: Vec<InboundRule>,
    /// Outbound rules.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub outbound_rules: Vec<OutboundRule>,
    /// The tags it applies to.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub tags: Vec<String>,
}

/// The body of a create or update (the whole firewall: an update replaces every field).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FirewallRequest {
    /// The name.
    pub name: String,
    /// Inbound rules.
    pub inbound_rules: Vec<InboundRule>,
    /// Outbound rules.
    pub outbound_rules: Vec<OutboundRule>,
    /// Droplets by ID: none, the firewall applies by tag (sent as `null`, like upstream).
    pub droplet_ids: Option<Vec<u64>>,
    /// The tags it applies to.
    pub tags: Vec<String>,
}

/// An inbound rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InboundRule {
    /// `tcp`, `udp` or `icmp`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub protocol: String,
    /// A port, a range, or `all`/`0`/empty for every port.
    #[serde(default, rename = "ports", skip_serializing_if = "String::is_empty")]
    pub port_range: String,
    /// Who may send.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub sources: Targets,
}

/// An outbound rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboundRule {
    /// `tcp`, `udp` or `icmp`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub protocol: String,
    /// A port, a range, or `all`/`0`/empty for every port.
    #[serde(default, rename = "ports", skip_serializing_if = "String::is_empty")]
    pub port_range: String,
    /// Where to.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub destinations: Targets,
}

/// Sources of an inbound rule or destinations of an outbound one. Only addresses and load-balancer IDs
/// are compared; the other kinds are kept as the API returns them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Targets {
    /// IP addresses and CIDRs.
    #[serde(
        default,
        deserialize_with = "null_as_empty",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub addresses: Vec<String>,
    /// Load-balancer IDs.
    #[serde(
        default,
        deserialize_with = "null_as_empty",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub load_balancer_uids: Vec<String>,
}

fn null_as_empty<'de, D: Deserializer<'de>, T: Default + Deserialize<'de>>(
    deserializer: D,
) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// A Service whose annotations make the firewall's rule set unknowable (the whole reconcile fails, and
/// nothing is changed, like upstream).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("service {service}: {source}")]
pub struct RulesError {
    /// `namespace/name`.
    pub service: String,
    /// The annotation at fault and what is wrong with it.
    #[source]
    pub source: ServiceConfigError,
}

/// The firewall the cluster's `services` call for.
pub fn desired_firewall(
    firewall: &PublicAccessFirewall,
    services: &[Arc<Service>],
    default_lb_type: LbType,
) -> Result<FirewallRequest, RulesError> {
    let mut rules = Vec::new();
    // Load-balancer rules open to everyone are listed once however many Services share them.
    let mut open_ports = BTreeSet::new();
    for service in services {
        let spec = service.spec.as_ref();
        match spec.and_then(|s| s.type_.as_deref()) {
            Some("NodePort") if is_managed(service) => rules.extend(node_port_rules(service)),
            Some("LoadBalancer") if is_external_network_lb(service, default_lb_type)? => {
                let (health, ports) = network_lb_rules(service);
                match health {
                    HealthRule::Open(port) => {
                        open_ports.insert(("tcp", port));
                    }
                    HealthRule::FromLoadBalancer(rule) => rules.push(rule),
                }
                open_ports.extend(ports);
            }
            _ => {}
        }
    }
    rules.extend(
        open_ports
            .into_iter()
            .map(|(protocol, port)| open_rule(protocol, port)),
    );
    // Stable: rules with the same protocol and port keep their Service order.
    rules.sort_by(|a, b| (&a.protocol, &a.port_range).cmp(&(&b.protocol, &b.port_range)));
    Ok(FirewallRequest {
        name: firewall.name.clone(),
        inbound_rules: rules,
        outbound_rules: allow_all_outbound(),
        droplet_ids: None,
        tags: firewall.tags.clone(),
    })
}

/// Whether a `NodePort` Service's ports belong in the firewall (default yes; an unreadable annotation
/// counts as yes, with a warning).
fn is_managed(service: &Service) -> bool {
    let Some(raw) = Annotations::of(service).raw(ANN_FIREWALL_MANAGED) else {
        return true;
    };
    parse_go_bool(raw).unwrap_or_else(|| {
        tracing::warn!(
            service = %service_key(service),
            annotation = ANN_FIREWALL_MANAGED,
            value = raw,
            "not a boolean; managing the service's node ports in the public-access firewall"
        );
        true
    })
}

/// One rule per TCP/UDP port of a `NodePort` Service, open to everyone.
fn node_port_rules(service: &Service) -> Vec<InboundRule> {
    let ports = service.spec.as_ref().and_then(|s| s.ports.as_deref());
    ports
        .unwrap_or_default()
        .iter()
        .filter_map(|port| {
            let node_port = port.node_port.filter(|p| *p > 0)?;
            Some(open_rule(
                firewall_protocol(port.protocol.as_deref())?,
                i64::from(node_port),
            ))
        })
        .collect()
}

/// The health-check rule of a network load balancer.
enum HealthRule {
    /// Open to everyone on this TCP port.
    Open(i64),
    /// Open to the load balancer only.
    FromLoadBalancer(InboundRule),
}

/// The rules of an external `REGIONAL_NETWORK` load balancer: its health check, and its service ports
/// `(protocol, port)` open to everyone.
fn network_lb_rules(service: &Service) -> (HealthRule, Vec<(&'static str, i64)>) {
    let spec = service.spec.as_ref();
    let health_port = default_health_check_port(service);
    let health = match Annotations::of(service).non_empty(ANN_LOAD_BALANCER_ID) {
        Some(id) => HealthRule::FromLoadBalancer(InboundRule {
            protocol: "tcp".into(),
            port_range: health_port.to_string(),
            sources: Targets {
                addresses: Vec::new(),
                load_balancer_uids: vec![id.to_string()],
            },
        }),
        None => HealthRule::Open(health_port),
    };
    let ports = spec
        .and_then(|s| s.ports.as_deref())
        .unwrap_or_default()
        .iter()
        .filter_map(|p| Some((firewall_protocol(p.protocol.as_deref())?, i64::from(p.port))))
        .collect();
    (health, ports)
}

/// Whether a `LoadBalancer` Service has an external `REGIONAL_NETWORK` load balancer, its annotations
/// read as the load balancer's own are.
fn is_external_network_lb(service: &Service, default_lb_type: LbType) -> Result<bool, RulesError> {
    let unreadable = |source| RulesError {
        service: service_key(service),
        source,
    };
    let lb_type = lb_type(service, default_lb_type).map_err(unreadable)?;
    let network = network(service).map_err(unreadable)?;
    Ok(lb_type == LbType::RegionalNetwork && network == NETWORK_EXTERNAL)
}

/// `tcp`/`udp` for a Service port's protocol (default TCP); `None` for the others (SCTP).
fn firewall_protocol(protocol: Option<&str>) -> Option<&'static str> {
    match protocol.unwrap_or("TCP") {
        "TCP" => Some("tcp"),
        "UDP" => Some("udp"),
        other => {
            tracing::warn!(
                protocol = other,
                "unsupported service protocol; the port is left out of the public-access firewall"
            );
            None
        }
    }
}

fn open_rule(protocol: &str, port: i64) -> InboundRule {
    InboundRule {
        protocol: protocol.into(),
        port_range: port.to_string(),
        sources: Targets {
            addresses: EVERYWHERE.map(String::from).to_vec(),
            load_balancer_uids: Vec::new(),
        },
    }
}

fn allow_all_outbound() -> Vec<OutboundRule> {
    ["tcp", "udp", "icmp"]
        .into_iter()
        .map(|protocol| OutboundRule {
            protocol: protocol.into(),
            port_range: if protocol == "icmp" { "" } else { "all" }.into(),
            destinations: Targets {
                addresses: EVERYWHERE.map(String::from).to_vec(),
                load_balancer_uids: Vec::new(),
            },
        })
        .collect()
}

/// Whether the cloud's firewall already is what `request` asks for.
pub fn is_up_to_date(firewall: &Firewall, request: &FirewallRequest) -> bool {
    firewall.name == request.name
        && firewall.tags == request.tags
        && rule_set(&firewall.inbound_rules) == rule_set(&request.inbound_rules)
        && outbound_set(&firewall.outbound_rules) == outbound_set(&request.outbound_rules)
}

/// A rule reduced to what is compared: protocol, port range, addresses, load-balancer IDs.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct ComparableRule<'a> {
    protocol: &'a str,
    ports: &'a str,
    addresses: &'a [String],
    load_balancer_uids: &'a [String],
}

fn comparable<'a>(protocol: &'a str, ports: &'a str, targets: &'a Targets) -> ComparableRule<'a> {
    ComparableRule {
        protocol,
        ports: match ports {
            "" | "all" => "0",
            other => other,
        },
        addresses: &targets.addresses,
        load_balancer_uids: &targets.load_balancer_uids,
    }
}

fn rule_set(rules: &[InboundRule]) -> Vec<ComparableRule<'_>> {
    let mut set: Vec<_> = rules
        .iter()
        .map(|r| comparable(&r.protocol, &r.port_range, &r.sources))
        .collect();
    set.sort();
    set
}

fn outbound_set(rules: &[OutboundRule]) -> Vec<ComparableRule<'_>> {
    let mut set: Vec<_> = rules
        .iter()
        .map(|r| comparable(&r.protocol, &r.port_range, &r.destinations))
        .collect();
    set.sort();
    set
}

/// What differs between the cloud's firewall and the request, for the log of an update.
pub fn describe_difference(firewall: &Firewall, request: &FirewallRequest) -> String {
    let mut parts = Vec::new();
    if firewall.name != request.name {
        parts.push(format!("name {:?} -> {:?}", firewall.name, request.name));
    }
    if firewall.tags != request.tags {
        parts.push(format!("tags {:?} -> {:?}", firewall.tags, request.tags));
    }
    let (have, want) = (
        rule_set(&firewall.inbound_rules),
        rule_set(&request.inbound_rules),
    );
    let removed: Vec<String> = have
        .iter()
        .filter(|r| !want.contains(r))
        .map(|r| r.to_string())
        .collect();
    let added: Vec<String> = want
        .iter()
        .filter(|r| !have.contains(r))
        .map(|r| r.to_string())
        .collect();
    if !removed.is_empty() {
        parts.push(format!("inbound rules removed: {}", removed.join(", ")));
    }
    if !added.is_empty() {
        parts.push(format!("inbound rules added: {}", added.join(", ")));
    }
    if outbound_set(&firewall.outbound_rules) != outbound_set(&request.outbound_rules) {
        parts.push("outbound rules reset to allow everything".into());
    }
    parts.join("; ")
}

impl fmt::Display for ComparableRule<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.protocol, self.ports)?;
        if !self.addresses.is_empty() {
            write!(f, " from {}", self.addresses.join(" "))?;
        }
        if !self.load_balancer_uids.is_empty() {
            write!(
                f,
                " from load balancer {}",
                self.load_balancer_uids.join(" ")
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::annotations::{ANN_NETWORK, ANN_TYPE};
    use k8s_openapi::api::core::v1::{ServicePort, ServiceSpec};
    use serde_json::json;

    fn firewall_settings() -> PublicAccessFirewall {
        PublicAccessFirewall {
            name: "k8s-public-access".into(),
            tags: vec!["k8s:c1".into()],
        }
    }

    fn service(
        name: &str,
        type_: &str,
        ports: &[(&str, i32, i32)],
        annotations: &[(&str, &str)],
    ) -> Arc<Service> {
        Arc::new(Service {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                annotations: Some(
                    annotations
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                type_: Some(type_.into()),
                ports: Some(
                    ports
                        .iter()
                        .map(|(protocol, port, node_port)| ServicePort {
                            protocol: Some(protocol.to_string()),
                            port: *port,
                            node_port: Some(*node_port),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    fn inbound(request: &FirewallRequest) -> Vec<String> {
        rule_set(&request.inbound_rules)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn node_ports_open_to_everyone_unless_unmanaged() {
        let services = [
            service(
                "web",
                "NodePort",
                &[("TCP", 80, 30080), ("UDP", 53, 30053), ("SCTP", 9, 30009)],
                &[],
            ),
            service(
                "off",
                "NodePort",
                &[("TCP", 80, 30081)],
                &[(ANN_FIREWALL_MANAGED, "false")],
            ),
            service(
                "bad",
                "NodePort",
                &[("TCP", 80, 30082)],
                &[(ANN_FIREWALL_MANAGED, "nope")],
            ),
            service("pending", "NodePort", &[("TCP", 80, 0)], &[]),
            service("internal", "ClusterIP", &[("TCP", 80, 0)], &[]),
        ];
        let request =
            desired_firewall(&firewall_settings(), &services, LbType::RegionalNetwork).unwrap();
        assert_eq!(
            inbound(&request),
            [
                "tcp/30080 from 0.0.0.0/0 ::/0",
                "tcp/30082 from 0.0.0.0/0 ::/0",
                "udp/30053 from 0.0.0.0/0 ::/0",
            ]
        );
        assert_eq!(request.name, "k8s-public-access");
        assert_eq!(request.tags, ["k8s:c1"]);
        // The body upstream sends: droplet_ids null, icmp without ports, sources with addresses only.
        let body = serde_json::to_value(&request).unwrap();
        assert_eq!(body["droplet_ids"], json!(null));
        assert_eq!(
            body["outbound_rules"],
            json!([
                {"protocol": "tcp", "ports": "all", "destinations": {"addresses": ["0.0.0.0/0", "::/0"]}},
                {"protocol": "udp", "ports": "all", "destinations": {"addresses": ["0.0.0.0/0", "::/0"]}},
                {"protocol": "icmp", "destinations": {"addresses": ["0.0.0.0/0", "::/0"]}},
            ])
        );
        assert_eq!(
            body["inbound_rules"][0],
            json!({"protocol": "tcp", "ports": "30080", "sources": {"addresses": ["0.0.0.0/0", "::/0"]}})
        );
    }

    #[test]
    fn external_network_load_balancers_open_their_ports_and_health_check() {
        let mut local = (*service(
            "local",
            "LoadBalancer",
            &[("TCP", 443, 31443)],
            &[(ANN_LOAD_BALANCER_ID, "lb-1")],
        ))
        .clone();
        let spec = local.spec.as_mut().unwrap();
        spec.external_traffic_policy = Some("Local".into());
        spec.health_check_node_port = Some(32000);
        let services = [
            Arc::new(local),
            service(
                "a",
                "LoadBalancer",
                &[("TCP", 80, 31080), ("UDP", 53, 31053)],
                &[],
            ),
            service("b", "LoadBalancer", &[("TCP", 80, 31081)], &[]),
            service(
                "proxy",
                "LoadBalancer",
                &[("TCP", 8080, 31082)],
                &[(ANN_TYPE, "REGIONAL")],
            ),
            service(
                "private",
                "LoadBalancer",
                &[("TCP", 8081, 31083)],
                &[(ANN_NETWORK, "INTERNAL")],
            ),
        ];
        let request =
            desired_firewall(&firewall_settings(), &services, LbType::RegionalNetwork).unwrap();
        assert_eq!(
            inbound(&request),
            [
                "tcp/10256 from 0.0.0.0/0 ::/0",
                "tcp/32000 from load balancer lb-1",
                "tcp/443 from 0.0.0.0/0 ::/0",
                "tcp/80 from 0.0.0.0/0 ::/0",
                "udp/53 from 0.0.0.0/0 ::/0",
            ]
        );
        // With REGIONAL as the default type, only annotated network load balancers count.
        let request =
            desired_firewall(&firewall_settings(), &services[1..], LbType::Regional).unwrap();
        assert!(request.inbound_rules.is_empty());
    }

    #[test]
    fn an_unreadable_type_or_network_fails_the_whole_firewall() {
        for (annotation, value) in [(ANN_TYPE, "regional_network"), (ANN_NETWORK, "PUBLIC")] {
            let services = [
                service("ok", "NodePort", &[("TCP", 80, 30080)], &[]),
                service(
                    "bad",
                    "LoadBalancer",
                    &[("TCP", 80, 31080)],
                    &[(annotation, value)],
                ),
            ];
            let err = desired_firewall(&firewall_settings(), &services, LbType::RegionalNetwork)
                .unwrap_err();
            assert_eq!(
                (err.service.as_str(), err.source.field.as_str()),
                ("default/bad", annotation)
            );
        }
    }

    #[test]
    fn comparison_ignores_order_all_port_spellings_and_other_target_kinds() {
        let services = [service(
            "web",
            "NodePort",
            &[("TCP", 80, 30080), ("UDP", 53, 30053)],
            &[],
        )];
        let request =
            desired_firewall(&firewall_settings(), &services, LbType::RegionalNetwork).unwrap();
        let everywhere = json!({"addresses": ["0.0.0.0/0", "::/0"], "tags": [], "droplet_ids": []});
        let cloud: Firewall = serde_json::from_value(json!({
            "id": "fw-1",
            "name": "k8s-public-access",
            "status": "succeeded",
            "inbound_rules": [
                {"protocol": "udp", "ports": "30053", "sources": everywhere},
                {"protocol": "tcp", "ports": "30080", "sources": everywhere},
            ],
            "outbound_rules": [
                {"protocol": "icmp", "ports": "0", "destinations": everywhere},
                {"protocol": "udp", "ports": "0", "destinations": everywhere},
                {"protocol": "tcp", "ports": "0", "destinations": everywhere},
            ],
            "droplet_ids": null,
            "tags": ["k8s:c1"],
        }))
        .unwrap();
        assert!(
            is_up_to_date(&cloud, &request),
            "{}",
            describe_difference(&cloud, &request)
        );

        let mut drifted = cloud.clone();
        drifted.inbound_rules[0].port_range = "30054".into();
        assert!(!is_up_to_date(&drifted, &request));
        assert_eq!(
            describe_difference(&drifted, &request),
            "inbound rules removed: udp/30054 from 0.0.0.0/0 ::/0; inbound rules added: udp/30053 from 0.0.0.0/0 ::/0"
        );
        let mut retagged = cloud.clone();
        retagged.tags = vec!["k8s:c2".into()];
        assert!(!is_up_to_date(&retagged, &request));
        let mut renamed = cloud;
        renamed.name = "other".into();
        assert!(!is_up_to_date(&renamed, &request));
    }
}
