//! Node address rules: the `alpha.kubernetes.io/provided-node-ip` annotation and how the cloud's address list
//! becomes `status.addresses`.
//!
//! - An empty cloud list changes nothing.
//! - When the cloud gives no `Hostname` entry, the node's own `Hostname` entries are kept (appended).
//! - With provided node IPs (one IP, or a `v4,v6` pair): every one must be among the cloud's addresses
//!   (otherwise an error, and the node stays uninitialized); the entries with those IPs go first, in the
//!   annotation's order; entries of other types follow in cloud order; other entries of the matched types
//!   are dropped. Nothing is sorted.

use std::net::IpAddr;

use cloud_provider::{ADDRESS_HOSTNAME, ANNOTATION_PROVIDED_NODE_IP};
use k8s_openapi::api::core::v1::NodeAddress;

use crate::cached_node::CachedNode;

/// Why the addresses of a node could not be computed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    /// The annotation is not one IP or a pair of IPs of different families.
    #[error("invalid {ANNOTATION_PROVIDED_NODE_IP} annotation {value:?}: {reason}")]
    InvalidProvidedIp {
        /// The annotation value.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A provided node IP is not among the cloud's addresses of the node.
    #[error("failed to get node address from cloud provider that matches ip: {ip}")]
    ProvidedIpNotFound {
        /// The unmatched IP.
        ip: IpAddr,
    },
}

/// The provided node IPs of `node` from its annotation (empty when absent or empty).
pub fn provided_node_ips(node: &CachedNode) -> Result<Vec<IpAddr>, AddressError> {
    let Some(value) = node.annotation(ANNOTATION_PROVIDED_NODE_IP) else {
        return Ok(Vec::new());
    };
    parse_provided_node_ips(value)
}

/// Checks, before a node is initialized, that the IPs its kubelet was given
/// (`alpha.kubernetes.io/provided-node-ip`) are among the cloud's addresses, as upstream does: an empty cloud
/// list does not pass (the node must not lose its taint with an IP the cloud does not know).
pub fn validate_provided_ips(node: &CachedNode, cloud: &[NodeAddress]) -> Result<(), AddressError> {
    apply_provided_ips(&provided_node_ips(node)?, cloud).map(drop)
}

/// Parses a provided-node-ip value: one IP, or two comma-separated IPs of different families.
pub fn parse_provided_node_ips(value: &str) -> Result<Vec<IpAddr>, AddressError> {
    let invalid = |reason: &str| AddressError::InvalidProvidedIp {
        value: value.to_string(),
        reason: reason.to_string(),
    };
    if value.trim().is_empty() {
        return Ok(Vec::new());
    }
    let ips = value
        .split(',')
        .map(|part| part.trim().parse::<IpAddr>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(&e.to_string()))?;
    match ips.as_slice() {
        [_] => Ok(ips),
        [a, b] if a.is_ipv4() != b.is_ipv4() => Ok(ips),
        [_, _] => Err(invalid("a pair must be one IPv4 and one IPv6 address")),
        _ => Err(invalid("expected one IP or a dual-stack pair")),
    }
}

/// Whether a cloud address string is this IP (compared as IPs, so `::1` equals `0:0::1`).
fn same_ip(address: &str, ip: &IpAddr) -> bool {
    address.parse::<IpAddr>().is_ok_and(|a| a == *ip)
}

/// Applies the provided node IPs to a cloud address list (see the module docs).
pub fn apply_provided_ips(
    node_ips: &[IpAddr],
    cloud: &[NodeAddress],
) -> Result<Vec<NodeAddress>, AddressError> {
    if node_ips.is_empty() {
        return Ok(cloud.to_vec());
    }
    for ip in node_ips {
        if !cloud.iter().any(|a| same_ip(&a.address, ip)) {
            return Err(AddressError::ProvidedIpNotFound { ip: *ip });
        }
    }
    let mut out = Vec::with_capacity(cloud.len());
    let mut matched_types: Vec<&str> = Vec::new();
    for ip in node_ips {
        for a in cloud.iter().filter(|a| same_ip(&a.address, ip)) {
            out.push(a.clone());
            if !matched_types.contains(&a.type_.as_str()) {
                matched_types.push(a.type_.as_str());
            }
        }
    }
    for a in cloud {
        if !matched_types.contains(&a.type_.as_str()) {
            out.push(a.clone());
        }
    }
    Ok(out)
}

/// The addresses `node` should have given the cloud's list, or `None` when `status.addresses` should stay
/// as it is (empty cloud list, or the same addresses in any order, as upstream compares them).
pub fn desired_addresses(
    node: &CachedNode,
    cloud: &[NodeAddress],
) -> Result<Option<Vec<NodeAddress>>, AddressError> {
    if cloud.is_empty() {
        return Ok(None);
    }
    let node_ips = provided_node_ips(node)?;
    let current: &[NodeAddress] = &node.addresses;
    let mut merged = cloud.to_vec();
    if !merged.iter().any(|a| a.type_ == ADDRESS_HOSTNAME) {
        merged.extend(
            current
                .iter()
                .filter(|a| a.type_ == ADDRESS_HOSTNAME)
                .cloned(),
        );
    }
    let desired = apply_provided_ips(&node_ips, &merged)?;
    if addresses_equal(current, &desired) {
        Ok(None)
    } else {
        Ok(Some(desired))
    }
}

/// Whether two address lists hold the same (type, address) entries, in any order: upstream writes the node's
/// addresses only when the set changed, so a cloud that reports them in another order costs no write.
pub fn addresses_equal(a: &[NodeAddress], b: &[NodeAddress]) -> bool {
    let mut left: Vec<(&str, &str)> = a
        .iter()
        .map(|x| (x.type_.as_str(), x.address.as_str()))
        .collect();
    let mut right: Vec<(&str, &str)> = b
        .iter()
        .map(|x| (x.type_.as_str(), x.address.as_str()))
        .collect();
    left.sort_unstable();
    right.sort_unstable();
    left == right
}

#[cfg(test)]
mod tests {
    use super::*;
    use cloud_provider::node_address as addr;
    use k8s_openapi::api::core::v1::{Node, NodeStatus};

    fn node(annotation: Option<&str>, current: Vec<NodeAddress>) -> CachedNode {
        let mut n = Node::default();
        n.metadata.name = Some("n1".into());
        if let Some(v) = annotation {
            n.metadata.annotations =
                Some([(ANNOTATION_PROVIDED_NODE_IP.to_string(), v.to_string())].into());
        }
        n.status = Some(NodeStatus {
            addresses: Some(current),
            ..NodeStatus::default()
        });
        CachedNode::from(n)
    }

    #[test]
    fn parses_single_and_dual_stack_values() {
        assert_eq!(parse_provided_node_ips("10.0.0.1").unwrap().len(), 1);
        assert_eq!(
            parse_provided_node_ips("10.0.0.1, fd00::1").unwrap().len(),
            2
        );
        assert!(parse_provided_node_ips("").unwrap().is_empty());
        assert!(matches!(
            parse_provided_node_ips("10.0.0.1,10.0.0.2"),
            Err(AddressError::InvalidProvidedIp { .. })
        ));
        assert!(matches!(
            parse_provided_node_ips("not-an-ip"),
            Err(AddressError::InvalidProvidedIp { .. })
        ));
        assert!(parse_provided_node_ips("10.0.0.1,fd00::1,10.0.0.3").is_err());
    }

    #[test]
    fn empty_cloud_list_changes_nothing() {
        let n = node(None, vec![addr("InternalIP", "10.0.0.9")]);
        assert_eq!(desired_addresses(&n, &[]).unwrap(), None);
    }

    #[test]
    fn cloud_list_replaces_whole_and_keeps_hostname_when_cloud_has_none() {
        let n = node(
            None,
            vec![
                addr("InternalIP", "10.0.0.9"),
                addr("Hostname", "host-1"),
                addr("ExternalIP", "1.1.1.1"),
            ],
        );
        let cloud = [
            addr("InternalIP", "10.0.0.1"),
            addr("ExternalIP", "2.2.2.2"),
        ];
        assert_eq!(
            desired_addresses(&n, &cloud).unwrap(),
            Some(vec![
                addr("InternalIP", "10.0.0.1"),
                addr("ExternalIP", "2.2.2.2"),
                addr("Hostname", "host-1"),
            ])
        );
        // The cloud's own hostname wins.
        let cloud = [
            addr("Hostname", "cloud-host"),
            addr("InternalIP", "10.0.0.1"),
        ];
        assert_eq!(desired_addresses(&n, &cloud).unwrap(), Some(cloud.to_vec()));
    }

    #[test]
    fn unchanged_or_reordered_lists() {
        let current = vec![addr("InternalIP", "10.0.0.1"), addr("Hostname", "h")];
        let n = node(None, current.clone());
        assert_eq!(desired_addresses(&n, &current).unwrap(), None);
        let reordered = [addr("Hostname", "h"), addr("InternalIP", "10.0.0.1")];
        assert_eq!(
            desired_addresses(&n, &reordered).unwrap(),
            None,
            "as upstream, a reordered list is no change"
        );
        let moved = [addr("InternalIP", "10.0.0.2"), addr("Hostname", "h")];
        assert_eq!(desired_addresses(&n, &moved).unwrap(), Some(moved.to_vec()));
    }

    #[test]
    fn provided_ip_goes_first_and_drops_other_addresses_of_its_type() {
        let n = node(Some("10.0.0.2"), vec![]);
        let cloud = [
            addr("InternalIP", "10.0.0.1"),
            addr("ExternalIP", "3.3.3.3"),
            addr("InternalIP", "10.0.0.2"),
            addr("Hostname", "h"),
        ];
        assert_eq!(
            desired_addresses(&n, &cloud).unwrap(),
            Some(vec![
                addr("InternalIP", "10.0.0.2"),
                addr("ExternalIP", "3.3.3.3"),
                addr("Hostname", "h")
            ])
        );
    }

    #[test]
    fn dual_stack_provided_ips_keep_annotation_order() {
        let n = node(Some("fd00::2,10.0.0.2"), vec![]);
        let cloud = [
            addr("InternalIP", "10.0.0.1"),
            addr("InternalIP", "10.0.0.2"),
            addr("InternalIP", "fd00::1"),
            addr("InternalIP", "fd00:0::2"),
            addr("ExternalIP", "3.3.3.3"),
        ];
        assert_eq!(
            desired_addresses(&n, &cloud).unwrap(),
            Some(vec![
                addr("InternalIP", "fd00:0::2"),
                addr("InternalIP", "10.0.0.2"),
                addr("ExternalIP", "3.3.3.3")
            ])
        );
    }

    #[test]
    fn unmatched_provided_ip_is_an_error() {
        let n = node(Some("10.9.9.9"), vec![]);
        let cloud = [addr("InternalIP", "10.0.0.1")];
        assert_eq!(
            desired_addresses(&n, &cloud),
            Err(AddressError::ProvidedIpNotFound {
                ip: "10.9.9.9".parse().unwrap()
            })
        );
        let n = node(Some("garbage"), vec![]);
        assert!(matches!(
            desired_addresses(&n, &cloud),
            Err(AddressError::InvalidProvidedIp { .. })
        ));
    }
}
