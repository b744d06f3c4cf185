//! Pod-network routes in the cloud's route table.

use k8s_openapi::api::core::v1::NodeAddress;

use crate::Result;

/// A route sending a node's pod CIDR to that node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Route {
    /// The route's cloud name (set by the provider on routes it lists).
    pub name: String,
    /// The node the traffic goes to.
    pub target_node: String,
    /// The target node's addresses, for providers that route by address.
    pub target_node_addresses: Vec<NodeAddress>,
    /// The destination CIDR (a pod CIDR of the node).
    pub destination_cidr: String,
    /// True when the route's target no longer exists in the cloud.
    pub blackhole: bool,
}

/// Manages the cluster's routes.
#[async_trait::async_trait]
pub trait Routes: Send + Sync {
    /// Every route of the cluster.
    async fn list_routes(&self, cluster_name: &str) -> Result<Vec<Route>>;
    /// Creates a route; `name_hint` is a stable, unique hint for the route's name (usually the node UID).
    async fn create_route(&self, cluster_name: &str, name_hint: &str, route: &Route) -> Result<()>;
    /// Deletes a route (as returned by [`Routes::list_routes`]).
    async fn delete_route(&self, cluster_name: &str, route: &Route) -> Result<()>;
}
