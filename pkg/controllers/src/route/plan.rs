//! Pure route planning for the node-route-controller: cluster-CIDR rules, which cloud routes the controller
//! is responsible for, and the keep / update / add / delete decisions for one reconciliation.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use cloud_provider::Route;
use ipnet::IpNet;
use k8s_openapi::api::core::v1::NodeAddress;

use crate::cached_node::CachedNode;
use crate::config::ClusterCidrs;

/// Why the cluster CIDRs cannot drive route reconciliation ([`ClusterCidrs`] holds no other bad value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterCidrError {
    /// No cluster CIDR was given.
    #[error("the node-route-controller needs --cluster-cidr (one CIDR, or an IPv4/IPv6 pair)")]
    Missing,
}

/// Checks that there is a cluster CIDR (one, or a dual-stack pair: the type allows no other).
pub fn require_cluster_cidrs(cidrs: &ClusterCidrs) -> Result<(), ClusterCidrError> {
    if cidrs.is_empty() {
        return Err(ClusterCidrError::Missing);
    }
    Ok(())
}

/// Whether the controller manages a route with this destination: its first or last address lies inside a
/// cluster CIDR. `None` when the destination does not parse as a CIDR (such routes are left alone).
pub fn is_responsible_for(cluster_cidrs: &[IpNet], destination_cidr: &str) -> Option<bool> {
    let net: IpNet = destination_cidr.trim().parse().ok()?;
    let first: IpAddr = net.network();
    let last: IpAddr = net.broadcast();
    Some(
        cluster_cidrs
            .iter()
            .any(|c| c.contains(&first) || c.contains(&last)),
    )
}

/// Compares two CIDR strings by value when both parse (so `10.0.0.0/24` equals `10.0.0.0/24 `, and IPv6
/// spellings compare by address), else textually.
pub fn same_cidr(a: &str, b: &str) -> bool {
    match (a.trim().parse::<IpNet>(), b.trim().parse::<IpNet>()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// True when the addresses recorded on a cloud route no longer match the node's. Providers that do not
/// report target addresses (an empty list) are never asked to update.
pub fn addresses_changed(route_addresses: &[NodeAddress], node_addresses: &[NodeAddress]) -> bool {
    if route_addresses.is_empty() {
        return false;
    }
    let set = |list: &[NodeAddress]| -> BTreeSet<(String, String)> {
        list.iter()
            .map(|a| (a.type_.clone(), a.address.clone()))
            .collect()
    };
    set(route_addresses) != set(node_addresses)
}

/// The facts about one Node that route planning needs.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRouting {
    /// Node name (the route target).
    pub name: String,
    /// Node UID, used as the route name hint.
    pub uid: String,
    /// `spec.podCIDRs` (falling back to `spec.podCIDR`).
    pub pod_cidrs: Vec<String>,
    /// `status.addresses` (shared with the node store).
    pub addresses: Arc<[NodeAddress]>,
}

impl NodeRouting {
    /// Extracts the routing facts of a Node.
    pub fn of(node: &CachedNode) -> Self {
        NodeRouting {
            name: node.name().to_string(),
            uid: node.uid().unwrap_or_default().to_string(),
            pod_cidrs: node.pod_cidrs.to_vec(),
            addresses: node.addresses.clone(),
        }
    }
}

/// A route to create for a node's pod CIDR.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteCreation {
    /// The node the route targets.
    pub node: String,
    /// Stable name hint passed to the provider (the node UID).
    pub name_hint: String,
    /// The route to create.
    pub route: Route,
}

/// One cloud operation of a reconciliation.
#[derive(Debug, Clone, PartialEq)]
pub enum RouteOp {
    /// Create a missing route.
    Create(RouteCreation),
    /// Replace a route whose target addresses changed or that became a blackhole: delete, then create.
    Update {
        /// The route to delete first.
        old: Route,
        /// The route to create once the old one is gone.
        new: RouteCreation,
    },
    /// Delete a route in range that is a blackhole, targets an unknown node, or whose CIDR the node no
    /// longer has.
    Delete(Route),
}

/// The outcome of planning one reconciliation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RoutePlan {
    /// Cloud operations to run.
    pub ops: Vec<RouteOp>,
    /// Per node: each pod CIDR and whether its route already exists and is correct.
    pub node_cidrs: BTreeMap<String, BTreeMap<String, bool>>,
    /// Deletions skipped because the node list was empty (never delete every route on an empty list).
    pub suppressed_deletions: usize,
    /// Routes ignored because their destination did not parse.
    pub unparsable: Vec<String>,
}

impl RoutePlan {
    /// Number of operations of each kind: (create, update, delete).
    pub fn counts(&self) -> (usize, usize, usize) {
        self.ops.iter().fold((0, 0, 0), |(c, u, d), op| match op {
            RouteOp::Create(_) => (c + 1, u, d),
            RouteOp::Update { .. } => (c, u + 1, d),
            RouteOp::Delete(_) => (c, u, d + 1),
        })
    }
}

fn creation(node: &NodeRouting, cidr: &str) -> RouteCreation {
    RouteCreation {
        node: node.name.clone(),
        name_hint: node.uid.clone(),
        route: Route {
            name: String::new(),
            target_node: node.name.clone(),
            target_node_addresses: node.addresses.to_vec(),
            destination_cidr: cidr.to_string(),
            blackhole: false,
        },
    }
}

/// Plans one reconciliation of `routes` (the cloud's current routes) against `nodes`.
///
/// - Every pod CIDR of every node gets a route: kept when one exists with up-to-date addresses, updated
///   (delete + create) when its addresses changed or it is a blackhole, created otherwise.
/// - A route the controller is responsible for (see [`is_responsible_for`]) is deleted when it is a
///   blackhole, its node is unknown, or its CIDR is no longer the node's.
/// - When `nodes` is empty nothing is deleted: an empty list is far more likely a transient view than a
///   cluster without nodes, and deleting every route would cut the whole pod network.
pub fn plan(nodes: &[NodeRouting], routes: &[Route], cluster_cidrs: &[IpNet]) -> RoutePlan {
    let mut result = RoutePlan::default();
    let mut by_node: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, route) in routes.iter().enumerate() {
        if !route.target_node.is_empty() {
            by_node
                .entry(route.target_node.as_str())
                .or_default()
                .push(i);
        }
    }
    // Routes claimed by a node's pod CIDR (kept or replaced); every other route is a deletion candidate.
    let mut claimed = vec![false; routes.len()];

    for node in nodes {
        let statuses = result.node_cidrs.entry(node.name.clone()).or_default();
        for cidr in &node.pod_cidrs {
            let existing = by_node.get(node.name.as_str()).and_then(|candidates| {
                // Prefer a healthy route when several claim the same CIDR.
                candidates
                    .iter()
                    .copied()
                    .filter(|i| same_cidr(&routes[*i].destination_cidr, cidr) && !claimed[*i])
                    .min_by_key(|i| routes[*i].blackhole)
            });
            match existing {
                Some(i) => {
                    claimed[i] = true;
                    let route = &routes[i];
                    if route.blackhole
                        || addresses_changed(&route.target_node_addresses, &node.addresses)
                    {
                        statuses.insert(cidr.clone(), false);
                        result.ops.push(RouteOp::Update {
                            old: route.clone(),
                            new: creation(node, cidr),
                        });
                    } else {
                        statuses.insert(cidr.clone(), true);
                    }
                }
                None => {
                    statuses.insert(cidr.clone(), false);
                    result.ops.push(RouteOp::Create(creation(node, cidr)));
                }
            }
        }
    }

    for (i, route) in routes.iter().enumerate() {
        if claimed[i] {
            continue;
        }
        match is_responsible_for(cluster_cidrs, &route.destination_cidr) {
            None => result.unparsable.push(route.name.clone()),
            Some(false) => {}
            Some(true) => {
                if nodes.is_empty() {
                    result.suppressed_deletions += 1;
                } else {
                    // Unclaimed: a blackhole, an unknown node, a CIDR the node no longer has, or a duplicate
                    // of a route that was kept.
                    let duplicate_of_kept = !route.blackhole
                        && result
                            .node_cidrs
                            .get(&route.target_node)
                            .is_some_and(|cidrs| {
                                cidrs
                                    .iter()
                                    .any(|(c, ok)| *ok && same_cidr(c, &route.destination_cidr))
                            });
                    if !duplicate_of_kept {
                        result.ops.push(RouteOp::Delete(route.clone()));
                    }
                }
            }
        }
    }
    result
}

/// The `NetworkUnavailable` verdict for a node after a reconciliation: `true` when every pod CIDR of the
/// node has its route, `false` when one is missing or the node has no pod CIDR yet.
pub fn all_routes_created(cidrs: Option<&BTreeMap<String, bool>>) -> bool {
    cidrs.is_some_and(|c| !c.is_empty() && c.values().all(|created| *created))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Node;

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    fn addr(ip: &str) -> NodeAddress {
        NodeAddress {
            type_: "InternalIP".into(),
            address: ip.into(),
        }
    }

    fn node(name: &str, cidrs: &[&str], ip: &str) -> NodeRouting {
        NodeRouting {
            name: name.into(),
            uid: format!("uid-{name}"),
            pod_cidrs: cidrs.iter().map(|c| c.to_string()).collect(),
            addresses: vec![addr(ip)].into(),
        }
    }

    fn route(node: &str, cidr: &str, ip: Option<&str>) -> Route {
        Route {
            name: format!("r-{node}-{cidr}"),
            target_node: node.into(),
            target_node_addresses: ip.map(addr).into_iter().collect(),
            destination_cidr: cidr.into(),
            blackhole: false,
        }
    }

    #[test]
    fn cluster_cidr_validation() {
        let cidrs = |text: &str| ClusterCidrs::parse(text).unwrap();
        assert_eq!(
            require_cluster_cidrs(&ClusterCidrs::none()),
            Err(ClusterCidrError::Missing)
        );
        assert!(require_cluster_cidrs(&cidrs("10.244.0.0/16")).is_ok());
        assert!(require_cluster_cidrs(&cidrs("10.244.0.0/16,fd00::/48")).is_ok());
        assert!(
            ClusterCidrError::Missing
                .to_string()
                .contains("--cluster-cidr")
        );
    }

    #[test]
    fn responsibility_uses_first_or_last_address() {
        let cluster = [net("10.244.0.0/16"), net("fd00:10::/56")];
        assert_eq!(is_responsible_for(&cluster, "10.244.3.0/24"), Some(true));
        assert_eq!(is_responsible_for(&cluster, "10.245.3.0/24"), Some(false));
        // A supernet whose first address is inside the cluster CIDR counts.
        assert_eq!(is_responsible_for(&cluster, "10.244.0.0/15"), Some(true));
        // A supernet whose first and last addresses both lie outside is not ours.
        assert_eq!(is_responsible_for(&cluster, "10.0.0.0/8"), Some(false));
        assert_eq!(is_responsible_for(&cluster, "fd00:10:0:1::/64"), Some(true));
        assert_eq!(is_responsible_for(&cluster, "not-a-cidr"), None);
    }

    #[test]
    fn keeps_adds_and_updates() {
        let cluster = [net("10.244.0.0/16")];
        let nodes = [
            node("a", &["10.244.1.0/24"], "192.168.0.1"),
            node("b", &["10.244.2.0/24"], "192.168.0.2"),
            node("c", &["10.244.3.0/24"], "192.168.0.3"),
            node("d", &[], "192.168.0.4"),
        ];
        let mut blackholed = route("c", "10.244.3.0/24", None);
        blackholed.blackhole = true;
        let routes = [
            route("a", "10.244.1.0/24", Some("192.168.0.1")),
            route("b", "10.244.2.0/24", Some("192.168.9.9")),
            blackholed.clone(),
        ];
        let p = plan(&nodes, &routes, &cluster);
        assert_eq!(p.counts(), (0, 2, 0));
        assert!(matches!(&p.ops[0], RouteOp::Update { old, new }
            if old.target_node == "b" && new.route.target_node_addresses == vec![addr("192.168.0.2")]
               && new.name_hint == "uid-b"));
        assert!(matches!(&p.ops[1], RouteOp::Update { old, .. } if *old == blackholed));
        assert!(p.node_cidrs["a"]["10.244.1.0/24"]);
        assert!(!p.node_cidrs["b"]["10.244.2.0/24"]);
        assert!(all_routes_created(p.node_cidrs.get("a")));
        assert!(!all_routes_created(p.node_cidrs.get("b")));
        assert!(!all_routes_created(p.node_cidrs.get("d")));
        assert!(!all_routes_created(p.node_cidrs.get("zzz")));

        // A missing route is added, addressed to the node.
        let p = plan(&nodes[..1], &[], &cluster);
        assert_eq!(
            p.ops,
            vec![RouteOp::Create(RouteCreation {
                node: "a".into(),
                name_hint: "uid-a".into(),
                route: Route {
                    name: String::new(),
                    target_node: "a".into(),
                    target_node_addresses: vec![addr("192.168.0.1")],
                    destination_cidr: "10.244.1.0/24".into(),
                    blackhole: false,
                },
            })]
        );
    }

    #[test]
    fn routes_without_addresses_are_kept() {
        let cluster = [net("10.244.0.0/16")];
        let nodes = [node("a", &["10.244.1.0/24"], "192.168.0.1")];
        let p = plan(&nodes, &[route("a", "10.244.1.0/24", None)], &cluster);
        assert!(p.ops.is_empty());
        assert!(all_routes_created(p.node_cidrs.get("a")));
    }

    #[test]
    fn deletes_only_managed_stale_routes() {
        let cluster = [net("10.244.0.0/16")];
        let nodes = [node("a", &["10.244.1.0/24"], "192.168.0.1")];
        let mut outside_blackhole = route("x", "172.16.0.0/24", None);
        outside_blackhole.blackhole = true;
        let routes = [
            route("a", "10.244.1.0/24", None),
            route("a", "10.244.9.0/24", None), // stale CIDR for a known node
            route("gone", "10.244.7.0/24", None), // orphaned
            route("x", "172.16.1.0/24", None), // outside the cluster CIDR
            outside_blackhole,                 // outside: never touched, even as a blackhole
            route("a", "garbage", None),       // unparsable
            route("a", "10.244.1.0/24", None), // duplicate of a kept route
        ];
        let p = plan(&nodes, &routes, &cluster);
        let deleted: Vec<&str> = p
            .ops
            .iter()
            .map(|op| match op {
                RouteOp::Delete(r) => r.destination_cidr.as_str(),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(deleted, vec!["10.244.9.0/24", "10.244.7.0/24"]);
        assert_eq!(p.unparsable, vec!["r-a-garbage".to_string()]);
    }

    #[test]
    fn empty_node_list_deletes_nothing() {
        let cluster = [net("10.244.0.0/16")];
        let routes = [
            route("a", "10.244.1.0/24", None),
            route("b", "10.244.2.0/24", None),
        ];
        let p = plan(&[], &routes, &cluster);
        assert!(p.ops.is_empty());
        assert_eq!(p.suppressed_deletions, 2);
    }

    #[test]
    fn dual_stack_nodes_get_one_route_per_cidr() {
        let cluster = [net("10.244.0.0/16"), net("fd00:10::/56")];
        let nodes = [node(
            "a",
            &["10.244.1.0/24", "fd00:10:0:1::/64"],
            "192.168.0.1",
        )];
        let routes = [route("a", "fd00:10:0:1:0::/64", None)];
        let p = plan(&nodes, &routes, &cluster);
        assert_eq!(p.counts(), (1, 0, 0));
        assert!(p.node_cidrs["a"]["fd00:10:0:1::/64"]);
        assert!(!p.node_cidrs["a"]["10.244.1.0/24"]);
    }

    #[test]
    fn node_routing_facts() {
        let mut n = Node::default();
        n.metadata.name = Some("n1".into());
        n.metadata.uid = Some("u1".into());
        n.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
            pod_cidr: Some("10.244.5.0/24".into()),
            ..Default::default()
        });
        let facts = NodeRouting::of(&CachedNode::from(n));
        assert_eq!(facts.pod_cidrs, vec!["10.244.5.0/24".to_string()]);
        assert_eq!(facts.uid, "u1");
        assert!(facts.addresses.is_empty());
        assert!(addresses_changed(&[addr("1.1.1.1")], &[]));
        assert!(!addresses_changed(&[addr("1.1.1.1")], &[addr("1.1.1.1")]));
    }
}
