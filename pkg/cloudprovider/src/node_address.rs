//! Functions over `NodeAddress` lists (`node.status.addresses` and what providers return).

use k8s_openapi::api::core::v1::{Node, NodeAddress};

/// Address type `Hostname`.
pub const ADDRESS_HOSTNAME: &str = "Hostname";
/// Address type `InternalIP`.
pub const ADDRESS_INTERNAL_IP: &str = "InternalIP";
/// Address type `ExternalIP`.
pub const ADDRESS_EXTERNAL_IP: &str = "ExternalIP";
/// Address type `InternalDNS`.
pub const ADDRESS_INTERNAL_DNS: &str = "InternalDNS";
/// Address type `ExternalDNS`.
pub const ADDRESS_EXTERNAL_DNS: &str = "ExternalDNS";

/// Builds a `NodeAddress`.
///
/// ```
/// use cloud_provider::{node_address, ADDRESS_INTERNAL_IP};
/// let a = node_address(ADDRESS_INTERNAL_IP, "10.0.0.1");
/// assert_eq!(a.type_, "InternalIP");
/// assert_eq!(a.address, "10.0.0.1");
/// ```
pub fn node_address(type_: &str, address: &str) -> NodeAddress {
    NodeAddress {
        type_: type_.to_string(),
        address: address.to_string(),
    }
}

/// The addresses the kubelet reported for a node (`status.addresses`), empty when unset.
pub fn node_addresses_of(node: &Node) -> &[NodeAddress] {
    node.status
        .as_ref()
        .and_then(|s| s.addresses.as_deref())
        .unwrap_or(&[])
}

/// Every address of the given type, in list order.
///
/// ```
/// use cloud_provider::{addresses_of_type, node_address};
/// let list = [node_address("InternalIP", "10.0.0.1"), node_address("Hostname", "n"),
///             node_address("InternalIP", "fd00::1")];
/// assert_eq!(addresses_of_type(&list, "InternalIP"), vec!["10.0.0.1", "fd00::1"]);
/// ```
pub fn addresses_of_type<'a>(addresses: &'a [NodeAddress], type_: &str) -> Vec<&'a str> {
    addresses
        .iter()
        .filter(|a| a.type_ == type_)
        .map(|a| a.address.as_str())
        .collect()
}

/// The first address of the given type.
pub fn first_address_of_type<'a>(addresses: &'a [NodeAddress], type_: &str) -> Option<&'a str> {
    addresses
        .iter()
        .find(|a| a.type_ == type_)
        .map(|a| a.address.as_str())
}

/// The first address whose type comes first in `preference` (e.g. InternalIP before ExternalIP).
///
/// ```
/// use cloud_provider::{preferred_address, node_address};
/// let list = [node_address("ExternalIP", "1.2.3.4"), node_address("InternalIP", "10.0.0.1")];
/// assert_eq!(preferred_address(&list, &["InternalIP", "ExternalIP"]), Some("10.0.0.1"));
/// assert_eq!(preferred_address(&list, &["Hostname"]), None);
/// ```
pub fn preferred_address<'a>(addresses: &'a [NodeAddress], preference: &[&str]) -> Option<&'a str> {
    preference
        .iter()
        .find_map(|t| first_address_of_type(addresses, t))
}

/// True when any entry (of any type) has exactly this address.
pub fn has_address(addresses: &[NodeAddress], address: &str) -> bool {
    addresses.iter().any(|a| a.address == address)
}

/// True when an entry of this type has exactly this address.
pub fn has_address_of_type(addresses: &[NodeAddress], type_: &str, address: &str) -> bool {
    addresses
        .iter()
        .any(|a| a.type_ == type_ && a.address == address)
}

/// True for the IP address types (`InternalIP`, `ExternalIP`).
pub fn is_ip_address_type(type_: &str) -> bool {
    type_ == ADDRESS_INTERNAL_IP || type_ == ADDRESS_EXTERNAL_IP
}

/// Removes repeated (type, address) pairs, keeping the first occurrence and the original order.
///
/// ```
/// use cloud_provider::{dedup_addresses, node_address};
/// let list = vec![node_address("InternalIP", "10.0.0.1"), node_address("InternalIP", "10.0.0.1"),
///                 node_address("ExternalIP", "10.0.0.1")];
/// assert_eq!(dedup_addresses(list).len(), 2);
/// ```
pub fn dedup_addresses(addresses: Vec<NodeAddress>) -> Vec<NodeAddress> {
    let mut out: Vec<NodeAddress> = Vec::with_capacity(addresses.len());
    for a in addresses {
        if !out
            .iter()
            .any(|o| o.type_ == a.type_ && o.address == a.address)
        {
            out.push(a);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeStatus;

    fn sample() -> Vec<NodeAddress> {
        vec![
            node_address(ADDRESS_HOSTNAME, "node-a"),
            node_address(ADDRESS_EXTERNAL_IP, "203.0.113.5"),
            node_address(ADDRESS_INTERNAL_IP, "10.0.0.5"),
            node_address(ADDRESS_INTERNAL_IP, "fd00::5"),
        ]
    }

    #[test]
    fn lookups() {
        let list = sample();
        assert_eq!(
            addresses_of_type(&list, ADDRESS_INTERNAL_IP),
            vec!["10.0.0.5", "fd00::5"]
        );
        assert!(addresses_of_type(&list, ADDRESS_INTERNAL_DNS).is_empty());
        assert_eq!(
            first_address_of_type(&list, ADDRESS_INTERNAL_IP),
            Some("10.0.0.5")
        );
        assert_eq!(first_address_of_type(&list, ADDRESS_EXTERNAL_DNS), None);
        assert!(has_address(&list, "203.0.113.5"));
        assert!(!has_address(&list, "203.0.113.6"));
        assert!(has_address_of_type(
            &list,
            ADDRESS_EXTERNAL_IP,
            "203.0.113.5"
        ));
        assert!(!has_address_of_type(
            &list,
            ADDRESS_INTERNAL_IP,
            "203.0.113.5"
        ));
        assert_eq!(
            preferred_address(
                &list,
                &[
                    ADDRESS_INTERNAL_DNS,
                    ADDRESS_EXTERNAL_IP,
                    ADDRESS_INTERNAL_IP
                ]
            ),
            Some("203.0.113.5")
        );
        assert!(is_ip_address_type(ADDRESS_INTERNAL_IP));
        assert!(!is_ip_address_type(ADDRESS_HOSTNAME));
    }

    #[test]
    fn dedup_keeps_first_and_order() {
        let mut list = sample();
        list.push(node_address(ADDRESS_HOSTNAME, "node-a"));
        list.insert(1, node_address(ADDRESS_INTERNAL_IP, "10.0.0.5"));
        let out = dedup_addresses(list);
        assert_eq!(out, sample_with_internal_second());
    }

    fn sample_with_internal_second() -> Vec<NodeAddress> {
        vec![
            node_address(ADDRESS_HOSTNAME, "node-a"),
            node_address(ADDRESS_INTERNAL_IP, "10.0.0.5"),
            node_address(ADDRESS_EXTERNAL_IP, "203.0.113.5"),
            node_address(ADDRESS_INTERNAL_IP, "fd00::5"),
        ]
    }

    #[test]
    fn node_status_addresses() {
        let mut node = Node::default();
        assert!(node_addresses_of(&node).is_empty());
        node.status = Some(NodeStatus {
            addresses: Some(sample()),
            ..Default::default()
        });
        assert_eq!(node_addresses_of(&node), sample().as_slice());
    }
}
