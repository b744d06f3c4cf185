//! The Kubernetes names the suite checks, spelled out independently of the code under test, and small
//! readers of Node and Service objects.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeCondition, Service};

/// Taint a kubelet with `--cloud-provider=external` registers with.
pub const UNINITIALIZED_TAINT: &str = "node.cloudprovider.kubernetes.io/uninitialized";
/// Taint of a node whose instance is shut down.
pub const SHUTDOWN_TAINT: &str = "node.cloudprovider.kubernetes.io/shutdown";
/// Annotation with the IP(s) given to the kubelet by `--node-ip`.
pub const PROVIDED_NODE_IP_ANNOTATION: &str = "alpha.kubernetes.io/provided-node-ip";
/// Label that keeps a node out of external load balancers.
pub const EXCLUDE_FROM_LB_LABEL: &str = "node.kubernetes.io/exclude-from-external-load-balancers";
/// Finalizer of Services with a cloud load balancer.
pub const LB_CLEANUP_FINALIZER: &str = "service.kubernetes.io/load-balancer-cleanup";

/// Instance type, GA key.
pub const INSTANCE_TYPE_LABEL: &str = "node.kubernetes.io/instance-type";
/// Instance type, beta key.
pub const INSTANCE_TYPE_BETA_LABEL: &str = "beta.kubernetes.io/instance-type";
/// Zone, GA key.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// Zone, beta key.
pub const ZONE_BETA_LABEL: &str = "failure-domain.beta.kubernetes.io/zone";
/// Region, GA key.
pub const REGION_LABEL: &str = "topology.kubernetes.io/region";
/// Region, beta key.
pub const REGION_BETA_LABEL: &str = "failure-domain.beta.kubernetes.io/region";
/// The role label of control-plane nodes.
pub const CONTROL_PLANE_LABEL: &str = "node-role.kubernetes.io/control-plane";

/// The node's name ("" when it has none).
pub fn node_name(node: &Node) -> &str {
    node.metadata.name.as_deref().unwrap_or_default()
}

/// The keys of the node's taints.
pub fn taint_keys(node: &Node) -> Vec<String> {
    node.spec
        .as_ref()
        .and_then(|spec| spec.taints.as_ref())
        .map(|taints| taints.iter().map(|t| t.key.clone()).collect())
        .unwrap_or_default()
}

/// True when the node has a taint with this key.
pub fn has_taint(node: &Node, key: &str) -> bool {
    taint_keys(node).iter().any(|k| k == key)
}

/// The node's labels (empty when it has none).
pub fn labels(node: &Node) -> BTreeMap<String, String> {
    node.metadata.labels.clone().unwrap_or_default()
}

/// The node's `spec.providerID`.
pub fn provider_id(node: &Node) -> Option<&str> {
    node.spec
        .as_ref()
        .and_then(|spec| spec.provider_id.as_deref())
}

/// The node's `spec.podCIDRs` (or the single `podCIDR`).
pub fn pod_cidrs(node: &Node) -> Vec<String> {
    let Some(spec) = node.spec.as_ref() else {
        return Vec::new();
    };
    match (&spec.pod_cidrs, &spec.pod_cidr) {
        (Some(cidrs), _) if !cidrs.is_empty() => cidrs.clone(),
        (_, Some(cidr)) => vec![cidr.clone()],
        _ => Vec::new(),
    }
}

/// The node's condition of this type.
pub fn condition<'a>(node: &'a Node, type_: &str) -> Option<&'a NodeCondition> {
    node.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .and_then(|conditions| conditions.iter().find(|c| c.type_ == type_))
}

/// True when the node's Ready condition is True.
pub fn is_ready(node: &Node) -> bool {
    condition(node, "Ready").is_some_and(|c| c.status == "True")
}

/// The Service's load-balancer ingress addresses (IPs, or hostnames when no IP).
pub fn ingress(service: &Service) -> Vec<String> {
    service
        .status
        .as_ref()
        .and_then(|status| status.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .map(|ingress| {
            ingress
                .iter()
                .filter_map(|i| i.ip.clone().or_else(|| i.hostname.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// True when the Service carries the load-balancer cleanup finalizer.
pub fn has_lb_finalizer(service: &Service) -> bool {
    service
        .metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == LB_CLEANUP_FINALIZER))
}

/// The Service's ports as `port/protocol` strings, in order.
pub fn service_ports(service: &Service) -> Vec<String> {
    service
        .spec
        .as_ref()
        .and_then(|spec| spec.ports.as_ref())
        .map(|ports| {
            ports
                .iter()
                .map(|p| format!("{}/{}", p.port, p.protocol.as_deref().unwrap_or("TCP")))
                .collect()
        })
        .unwrap_or_default()
}

/// The default load-balancer name of a Service: `a` + its UID without dashes, at most 32 characters.
pub fn default_lb_name(service: &Service) -> String {
    let uid = service
        .metadata
        .uid
        .as_deref()
        .unwrap_or_default()
        .replace('-', "");
    let mut name = format!("a{uid}");
    name.truncate(32);
    name
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    #[test]
    fn default_lb_name_follows_the_upstream_rule() {
        let service = Service {
            metadata: ObjectMeta {
                uid: Some("12345678-1234-1234-1234-123456789abc".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(
            default_lb_name(&service),
            "a12345678123412341234123456789ab"
        );
    }

    #[test]
    fn readers_tolerate_empty_objects() {
        let node = Node::default();
        assert!(taint_keys(&node).is_empty());
        assert!(!is_ready(&node));
        assert!(pod_cidrs(&node).is_empty());
        assert_eq!(provider_id(&node), None);
        let service = Service::default();
        assert!(ingress(&service).is_empty());
        assert!(!has_lb_finalizer(&service));
        assert!(service_ports(&service).is_empty());
    }
}
