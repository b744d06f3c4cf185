//! Which nodes may back a load balancer, and their IP stacks: upstream's node filtering (v0.1.66+).
//!
//! - `INTERNAL` load balancers take every node.
//! - Otherwise a node is classified by its `ExternalIP` addresses: dual-stack (IPv4 and IPv6), IPv4-only
//!   or IPv6-only. `REGIONAL` `EXTERNAL` load balancers also accept nodes without an external address
//!   when they have an IPv4 `InternalIP` (private-only droplets); `REGIONAL_NETWORK` `EXTERNAL` ones
//!   leave them out. IPv6-only nodes are always left out.
//! - The classes decide the default network stack of `REGIONAL_NETWORK` load balancers (dual-stack only
//!   when every node is), see [`crate::lb_spec`].

use std::net::Ipv6Addr;

use k8s_openapi::api::core::v1::Node;

use crate::annotations::NETWORK_INTERNAL;
use crate::config::LbType;

/// The IP stack of a node, from its addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeStack {
    /// IPv4 only.
    SingleStackV4,
    /// IPv6 only.
    SingleStackV6,
    /// IPv4 and IPv6.
    DualStack,
    /// No usable address (yet).
    PublicNetUnready,
}

/// The nodes of a load balancer, filtered and classified.
#[derive(Debug, Clone, Default)]
pub struct NodeSelection<'a> {
    /// The nodes that back the load balancer, in input order.
    pub ready: Vec<&'a Node>,
    /// Nodes left out because they have no usable address.
    pub public_net_unready: Vec<&'a Node>,
    /// Nodes left out because they are IPv6-only.
    pub single_stack_v6: Vec<&'a Node>,
    /// Backing nodes with IPv4 only.
    pub single_stack_v4: Vec<&'a Node>,
    /// Backing nodes with IPv4 and IPv6.
    pub dual_stack: Vec<&'a Node>,
}

impl NodeSelection<'_> {
    /// True when there are dual-stack nodes and no IPv4-only ones (IPv6-only nodes are left out and so
    /// do not count).
    pub fn all_dual_stack(&self) -> bool {
        !self.dual_stack.is_empty() && self.single_stack_v4.is_empty()
    }
}

/// Whether nodes without an external address may back a load balancer of this type and network.
pub fn allows_private_only_backends(lb_type: LbType, network: &str) -> bool {
    network == NETWORK_INTERNAL || lb_type == LbType::Regional
}

/// Filters and classifies `nodes` for a load balancer of `lb_type` on `network`.
pub fn select_nodes<'a>(nodes: &'a [Node], lb_type: LbType, network: &str) -> NodeSelection<'a> {
    let mut selection = NodeSelection::default();
    if network == NETWORK_INTERNAL {
        selection.ready = nodes.iter().collect();
        return selection;
    }
    let allow_private_only = allows_private_only_backends(lb_type, network);
    for node in nodes {
        match classify_node(node, allow_private_only) {
            NodeStack::PublicNetUnready => selection.public_net_unready.push(node),
            NodeStack::SingleStackV6 => selection.single_stack_v6.push(node),
            NodeStack::SingleStackV4 => {
                selection.ready.push(node);
                selection.single_stack_v4.push(node);
            }
            NodeStack::DualStack => {
                selection.ready.push(node);
                selection.dual_stack.push(node);
            }
        }
    }
    selection
}

/// The IP stack of a node from its `ExternalIP` addresses (any address that is not IPv6 counts as IPv4);
/// without any, an IPv4 `InternalIP` counts when `internal_fallback` is true.
pub fn classify_node(node: &Node, internal_fallback: bool) -> NodeStack {
    let addresses = node
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_deref())
        .unwrap_or_default();
    let external = addresses.iter().filter(|a| a.type_ == "ExternalIP");
    let (mut v4, mut v6) = (false, false);
    for address in external {
        if is_ipv6(&address.address) {
            v6 = true;
        } else {
            v4 = true;
        }
    }
    if !v4 && !v6 && internal_fallback {
        v4 = addresses
            .iter()
            .any(|a| a.type_ == "InternalIP" && !is_ipv6(&a.address));
    }
    match (v4, v6) {
        (true, true) => NodeStack::DualStack,
        (true, false) => NodeStack::SingleStackV4,
        (false, true) => NodeStack::SingleStackV6,
        (false, false) => NodeStack::PublicNetUnready,
    }
}

/// Whether `address` is an IPv6 address (a zone suffix allowed, as Go's `netip.ParseAddr` does).
fn is_ipv6(address: &str) -> bool {
    let without_zone = address.split_once('%').map_or(address, |(a, _)| a);
    without_zone.parse::<Ipv6Addr>().is_ok()
}

/// Node names for messages: at most `max`, sorted, then `[+N more]`.
pub fn format_node_names(nodes: &[&Node], max: usize) -> String {
    let mut names: Vec<&str> = nodes
        .iter()
        .map(|n| n.metadata.name.as_deref().unwrap_or_default())
        .collect();
    names.sort_unstable();
    if names.len() <= max {
        return names.join(", ");
    }
    format!("{} [+{} more]", names[..max].join(", "), names.len() - max)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::annotations::NETWORK_EXTERNAL;
    use k8s_openapi::api::core::v1::{NodeAddress, NodeStatus};

    /// A node named `name` with these `(type, address)` pairs (also used by `lb_spec`'s tests).
    pub(crate) fn node(name: &str, addresses: &[(&str, &str)]) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some(name.into());
        n.status = Some(NodeStatus {
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
        n
    }

    #[test]
    fn classification() {
        let dual = node(
            "d",
            &[
                ("ExternalIP", "198.51.100.1"),
                ("ExternalIP", "2001:db8::1"),
            ],
        );
        let v4 = node(
            "4",
            &[("InternalIP", "10.0.0.1"), ("ExternalIP", "198.51.100.2")],
        );
        let v6 = node("6", &[("ExternalIP", "2001:db8::2")]);
        let private = node("p", &[("InternalIP", "10.0.0.3"), ("Hostname", "p")]);
        assert_eq!(classify_node(&dual, false), NodeStack::DualStack);
        assert_eq!(classify_node(&v4, false), NodeStack::SingleStackV4);
        assert_eq!(classify_node(&v6, true), NodeStack::SingleStackV6);
        assert_eq!(classify_node(&private, false), NodeStack::PublicNetUnready);
        assert_eq!(classify_node(&private, true), NodeStack::SingleStackV4);
        assert_eq!(
            classify_node(&Node::default(), true),
            NodeStack::PublicNetUnready
        );
        assert!(is_ipv6("fe80::1%eth0"));
        assert!(!is_ipv6("not-an-address"));
    }

    #[test]
    fn selection_by_type_and_network() {
        let nodes = vec![
            node(
                "d",
                &[
                    ("ExternalIP", "198.51.100.1"),
                    ("ExternalIP", "2001:db8::1"),
                ],
            ),
            node("p", &[("InternalIP", "10.0.0.3")]),
            node("6", &[("ExternalIP", "2001:db8::2")]),
        ];
        let rn = select_nodes(&nodes, LbType::RegionalNetwork, NETWORK_EXTERNAL);
        assert_eq!(rn.ready.len(), 1);
        assert_eq!(rn.public_net_unready.len(), 1);
        assert_eq!(rn.single_stack_v6.len(), 1);
        assert!(rn.all_dual_stack());
        let regional = select_nodes(&nodes, LbType::Regional, NETWORK_EXTERNAL);
        assert_eq!(regional.ready.len(), 2);
        assert!(!regional.all_dual_stack());
        let internal = select_nodes(&nodes, LbType::RegionalNetwork, NETWORK_INTERNAL);
        assert_eq!(internal.ready.len(), 3);
        assert!(!internal.all_dual_stack());
    }

    #[test]
    fn node_name_lists_are_capped() {
        let nodes: Vec<Node> = ["c", "a", "d", "b"].iter().map(|n| node(n, &[])).collect();
        let refs: Vec<&Node> = nodes.iter().collect();
        assert_eq!(format_node_names(&refs, 3), "a, b, c [+1 more]");
        assert_eq!(format_node_names(&refs[..2], 3), "a, c");
    }
}
