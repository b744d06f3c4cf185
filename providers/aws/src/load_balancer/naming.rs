//! Names of the resources a load balancer is made of: target groups and security-group rule descriptions.

use sha1::{Digest, Sha1};

use super::spec::{LbSpec, PortMapping};

/// Target type of every target group (instances on their node ports).
pub const TARGET_TYPE: &str = "instance";
/// Description prefix of node security-group rules admitting clients.
pub const RULE_CLIENT: &str = "kubernetes.io/rule/nlb/client";
/// Description prefix of node security-group rules admitting health checks.
pub const RULE_HEALTH: &str = "kubernetes.io/rule/nlb/health";
/// Description of node security-group rules admitting ICMP "fragmentation needed" (path MTU discovery);
/// shared by every load balancer with the same client range.
pub const RULE_MTU: &str = "kubernetes.io/rule/nlb/mtu";

/// The description of this load balancer's client rules.
pub fn client_rule_description(lb_name: &str) -> String {
    format!("{RULE_CLIENT}={lb_name}")
}

/// The description of this load balancer's health-check rules.
pub fn health_rule_description(lb_name: &str) -> String {
    format!("{RULE_HEALTH}={lb_name}")
}

/// Keeps only ASCII letters and digits, as ELBv2 names of upstream's target groups do.
fn sanitize(s: &str) -> String {
    s.chars().filter(char::is_ascii_alphanumeric).collect()
}

/// The target group name of one port, exactly as upstream names it: `k8s-{namespace:.8}-{name:.8}-{hash:.10}`
/// with namespace and name stripped of every character that is not a letter or digit. The hash is the
/// lowercase hex SHA-1 of the concatenation, without separators, of the cluster ID, namespace, name, Service
/// port, node port, target protocol, target type and the health check's protocol and interval.
pub fn target_group_name(cluster: &str, spec: &LbSpec, port: &PortMapping) -> String {
    let mut h = Sha1::new();
    for part in [
        cluster,
        &spec.namespace,
        &spec.name,
        &port.port.to_string(),
        &port.node_port.to_string(),
        port.target_protocol.as_str(),
        TARGET_TYPE,
        spec.health_check.protocol.as_str(),
        &spec.health_check.interval.to_string(),
    ] {
        h.update(part.as_bytes());
    }
    let hash: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    let ns: String = sanitize(&spec.namespace).chars().take(8).collect();
    let name: String = sanitize(&spec.name).chars().take(8).collect();
    format!("k8s-{ns}-{name}-{}", &hash[..10])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load_balancer::spec::{HealthCheck, HealthCheckPort, HealthCheckProtocol, Protocol};

    fn spec(namespace: &str, name: &str) -> LbSpec {
        LbSpec {
            namespace: namespace.into(),
            name: name.into(),
            internal: false,
            subnets: None,
            ports: vec![],
            health_check: HealthCheck {
                protocol: HealthCheckProtocol::Tcp,
                port: HealthCheckPort::TrafficPort,
                path: None,
                interval: 30,
                timeout: 10,
                healthy_threshold: 3,
                unhealthy_threshold: 3,
            },
            additional_tags: Default::default(),
            cross_zone: false,
            access_log: Default::default(),
            target_group_attributes: Default::default(),
            eip_allocations: None,
            private_ipv4_addresses: None,
            target_node_labels: Default::default(),
            source_ranges: vec![],
            local_traffic: false,
            security_groups: vec![],
            uid: String::new(),
        }
    }

    fn port(port: i32, node_port: i32, protocol: Protocol) -> PortMapping {
        PortMapping {
            name: String::new(),
            port,
            node_port,
            service_protocol: protocol,
            listener_protocol: protocol,
            target_protocol: protocol,
            certificate: None,
            ssl_policy: None,
        }
    }

    #[test]
    fn names_are_short_stable_and_sensitive() {
        let s = spec("production-payments", "checkout-frontend");
        let p = port(80, 30080, Protocol::Tcp);
        let name = target_group_name("c1", &s, &p);
        assert!(name.starts_with("k8s-producti-checkout-"), "{name}");
        assert_eq!(name.len(), 32);
        assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
        assert_eq!(name.matches('-').count(), 3, "{name}");
        assert_eq!(name, target_group_name("c1", &s, &p));

        let others = [
            target_group_name("c2", &s, &p),
            target_group_name("c1", &spec("production-payments", "checkout-frontend2"), &p),
            target_group_name("c1", &s, &port(81, 30080, Protocol::Tcp)),
            target_group_name("c1", &s, &port(80, 30081, Protocol::Tcp)),
            target_group_name("c1", &s, &port(80, 30080, Protocol::Udp)),
            {
                let mut s2 = s.clone();
                s2.health_check.protocol = HealthCheckProtocol::Http;
                target_group_name("c1", &s2, &p)
            },
            {
                let mut s2 = s.clone();
                s2.health_check.interval = 10;
                target_group_name("c1", &s2, &p)
            },
        ];
        for other in &others {
            assert_ne!(other, &name);
        }
        // Not part of the name: thresholds, timeout, path.
        let mut s3 = s.clone();
        s3.health_check.timeout = 5;
        s3.health_check.healthy_threshold = 2;
        assert_eq!(target_group_name("c1", &s3, &p), name);

        let short = target_group_name("c1", &spec("a", "b"), &p);
        assert!(short.starts_with("k8s-a-b-"));
        assert_eq!(short.len(), 18);
    }

    /// The name upstream gives the same target group (cluster `c1`, `kube-system/my-svc`, 80 to 30080 over
    /// TCP, TCP health check every 30 s): hyphens go, and the hash is SHA-1 over the bare concatenation.
    #[test]
    fn names_match_upstream() {
        let s = spec("kube-system", "my-svc");
        let p = port(80, 30080, Protocol::Tcp);
        assert_eq!(
            target_group_name("c1", &s, &p),
            "k8s-kubesyst-mysvc-8a373ece62"
        );
    }

    #[test]
    fn rule_descriptions() {
        assert_eq!(
            client_rule_description("abc"),
            "kubernetes.io/rule/nlb/client=abc"
        );
        assert_eq!(
            health_rule_description("abc"),
            "kubernetes.io/rule/nlb/health=abc"
        );
    }
}
