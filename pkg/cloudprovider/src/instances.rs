//! Instance lookups: the v1 interface (by node name or provider ID) and the v2 interface (by Node object,
//! with bulk lookups for large clusters).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeAddress};

use crate::Result;

/// What a provider knows about the instance backing a node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InstanceMetadata {
    /// The provider ID, `"<provider>://<instance>"`; set on the node when its `spec.providerID` is empty.
    pub provider_id: String,
    /// The instance type (machine size); empty when unknown.
    pub instance_type: String,
    /// The instance's addresses, in the provider's order.
    pub node_addresses: Vec<NodeAddress>,
    /// The zone; empty when unknown.
    pub zone: String,
    /// The region; empty when unknown.
    pub region: String,
    /// Extra labels for the node. Keys in the `kubernetes.io` / `k8s.io` namespaces are ignored by the
    /// node controller, and existing labels are never overwritten.
    pub additional_labels: BTreeMap<String, String>,
}

/// The coarse state of the instance backing a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InstanceState {
    /// The instance exists and is not shut down.
    Running,
    /// The instance exists but is stopped (the node gets the shutdown taint).
    Shutdown,
    /// The instance is gone (the node gets deleted).
    NotFound,
}

/// The v1 instances interface.
#[async_trait::async_trait]
pub trait Instances: Send + Sync {
    /// The addresses of the instance backing the named node.
    async fn node_addresses(&self, node_name: &str) -> Result<Vec<NodeAddress>>;
    /// The addresses of the instance with this provider ID.
    async fn node_addresses_by_provider_id(&self, provider_id: &str) -> Result<Vec<NodeAddress>>;
    /// The cloud instance ID of the named node; [`CloudError::InstanceNotFound`](crate::CloudError) only
    /// when the instance is truly gone, not when it is stopped.
    async fn instance_id(&self, node_name: &str) -> Result<String>;
    /// The instance type of the named node.
    async fn instance_type(&self, node_name: &str) -> Result<String>;
    /// The instance type of the instance with this provider ID.
    async fn instance_type_by_provider_id(&self, provider_id: &str) -> Result<String>;
    /// The node name of the machine with this hostname.
    async fn current_node_name(&self, hostname: &str) -> Result<String>;
    /// Whether the instance exists (a stopped instance exists; `false` gets the node deleted).
    async fn instance_exists_by_provider_id(&self, provider_id: &str) -> Result<bool>;
    /// Whether the instance is shut down.
    async fn instance_shutdown_by_provider_id(&self, provider_id: &str) -> Result<bool>;
}

/// The v2 instances interface: lookups by Node (implementations look at `spec.providerID` first).
#[async_trait::async_trait]
pub trait InstancesV2: Send + Sync {
    /// Whether the node's instance exists (stopped counts as existing).
    async fn instance_exists(&self, node: &Node) -> Result<bool>;

    /// Whether the node's instance is shut down.
    async fn instance_shutdown(&self, node: &Node) -> Result<bool>;

    /// Metadata of the node's instance. `Ok(None)` = the provider returned no metadata (must not crash any
    /// controller).
    async fn instance_metadata(&self, node: &Node) -> Result<Option<InstanceMetadata>>;

    /// Metadata for many nodes, results in input order. The default calls
    /// [`InstancesV2::instance_metadata`] once per node, in order; providers with a bulk API override it.
    async fn instance_metadata_bulk(
        &self,
        nodes: &[Node],
    ) -> Vec<Result<Option<InstanceMetadata>>> {
        let mut out = Vec::with_capacity(nodes.len());
        for node in nodes {
            out.push(self.instance_metadata(node).await);
        }
        out
    }

    /// The state of many nodes' instances, results in input order. The default calls
    /// [`InstancesV2::instance_exists`] and, for existing instances, [`InstancesV2::instance_shutdown`],
    /// node by node in order; an `instance_shutdown` that is not implemented counts as running, as
    /// upstream's lifecycle controller treats it.
    async fn instance_states(&self, nodes: &[Node]) -> Vec<Result<InstanceState>> {
        let mut out = Vec::with_capacity(nodes.len());
        for node in nodes {
            let state = match self.instance_exists(node).await {
                Ok(false) => Ok(InstanceState::NotFound),
                Ok(true) => match self.instance_shutdown(node).await {
                    Ok(true) => Ok(InstanceState::Shutdown),
                    Ok(false) => Ok(InstanceState::Running),
                    Err(e) if e.is_not_implemented() => Ok(InstanceState::Running),
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            };
            out.push(state);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CloudError;
    use std::sync::Mutex;

    /// Records every single-node call; behaviour depends on the node name.
    #[derive(Default)]
    struct Recorder {
        calls: Mutex<Vec<String>>,
    }

    fn node(name: &str) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some(name.to_string());
        n
    }

    fn name(node: &Node) -> String {
        node.metadata.name.clone().unwrap_or_default()
    }

    #[async_trait::async_trait]
    impl InstancesV2 for Recorder {
        async fn instance_exists(&self, node: &Node) -> Result<bool> {
            let n = name(node);
            self.calls.lock().unwrap().push(format!("exists {n}"));
            match n.as_str() {
                "gone" => Ok(false),
                "broken" => Err(CloudError::provider("exists failed")),
                _ => Ok(true),
            }
        }
        async fn instance_shutdown(&self, node: &Node) -> Result<bool> {
            let n = name(node);
            self.calls.lock().unwrap().push(format!("shutdown {n}"));
            match n.as_str() {
                "stopped" => Ok(true),
                "unknowable" => Err(CloudError::NotImplemented),
                "flaky" => Err(CloudError::retry(
                    "later",
                    std::time::Duration::from_secs(1),
                )),
                _ => Ok(false),
            }
        }
        async fn instance_metadata(&self, node: &Node) -> Result<Option<InstanceMetadata>> {
            let n = name(node);
            self.calls.lock().unwrap().push(format!("metadata {n}"));
            match n.as_str() {
                "gone" => Err(CloudError::InstanceNotFound),
                "empty" => Ok(None),
                _ => Ok(Some(InstanceMetadata {
                    provider_id: format!("test://{n}"),
                    ..Default::default()
                })),
            }
        }
    }

    #[tokio::test]
    async fn bulk_metadata_calls_single_in_order() {
        let r = Recorder::default();
        let nodes = [node("b"), node("gone"), node("a"), node("empty")];
        let out = r.instance_metadata_bulk(&nodes).await;
        assert_eq!(out.len(), 4);
        assert_eq!(
            out[0].as_ref().unwrap().as_ref().unwrap().provider_id,
            "test://b"
        );
        assert!(out[1].as_ref().unwrap_err().is_instance_not_found());
        assert_eq!(
            out[2].as_ref().unwrap().as_ref().unwrap().provider_id,
            "test://a"
        );
        assert!(out[3].as_ref().unwrap().is_none());
        assert_eq!(
            *r.calls.lock().unwrap(),
            vec![
                "metadata b",
                "metadata gone",
                "metadata a",
                "metadata empty"
            ]
        );
    }

    #[tokio::test]
    async fn bulk_states_calls_single_in_order() {
        let r = Recorder::default();
        let nodes = [
            node("run"),
            node("gone"),
            node("stopped"),
            node("broken"),
            node("flaky"),
            node("unknowable"),
        ];
        let out = r.instance_states(&nodes).await;
        assert_eq!(out[0].as_ref().unwrap(), &InstanceState::Running);
        assert_eq!(out[1].as_ref().unwrap(), &InstanceState::NotFound);
        assert_eq!(out[2].as_ref().unwrap(), &InstanceState::Shutdown);
        assert_eq!(out[3].as_ref().unwrap_err().to_string(), "exists failed");
        assert!(out[4].as_ref().unwrap_err().retry_after().is_some());
        // A provider that cannot tell shutdown from running: running, not an error every pass.
        assert_eq!(out[5].as_ref().unwrap(), &InstanceState::Running);
        assert_eq!(
            *r.calls.lock().unwrap(),
            vec![
                "exists run",
                "shutdown run",
                "exists gone",
                "exists stopped",
                "shutdown stopped",
                "exists broken",
                "exists flaky",
                "shutdown flaky",
                "exists unknowable",
                "shutdown unknowable"
            ]
        );
    }

    #[tokio::test]
    async fn bulk_of_nothing_is_empty() {
        let r = Recorder::default();
        assert!(r.instance_metadata_bulk(&[]).await.is_empty());
        assert!(r.instance_states(&[]).await.is_empty());
        assert!(r.calls.lock().unwrap().is_empty());
    }
}
