//! The compact copy of a Node that the shared node informer keeps.
//!
//! A `k8s_openapi` `Node` is about 1.5 KB before any of its strings, maps or lists, and most of it (node
//! info, capacity, images, volumes, daemon endpoints, all but two conditions) is read by no controller. At
//! thousands of nodes the store of whole objects dominates the process's memory, so the node informer
//! projects every Node into a [`CachedNode`] before storing it: the metadata the controllers read, the spec
//! fields that matter to cloud calls, the addresses and the status of the two conditions the controllers
//! act on. Provider calls, which take `Node`s, get a slim `Node` rebuilt from it ([`CachedNode::to_node`]).

use std::borrow::Cow;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeCondition, NodeSpec, NodeStatus, Taint};
use kube::Resource;
use kube::api::ObjectMeta;

use crate::informers::trim_metadata;

/// Type of the node condition the kubelet reports readiness with.
pub const CONDITION_READY: &str = "Ready";
/// Type of the node condition the node-route-controller maintains.
pub const CONDITION_NETWORK_UNAVAILABLE: &str = "NetworkUnavailable";

/// What the controllers read of a Node: name, UID, resourceVersion, creation and deletion timestamps, labels
/// and annotations; provider ID, pod CIDRs and taints; addresses; the status of the `Ready` and
/// `NetworkUnavailable` conditions.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CachedNode {
    /// The kept metadata (no managed fields, owner references or kubectl's last-applied copy).
    pub metadata: ObjectMeta,
    /// `spec.providerID`.
    pub provider_id: Option<String>,
    /// `spec.podCIDRs`, or `spec.podCIDR` when the list is empty.
    pub pod_cidrs: Vec<String>,
    /// `spec.taints`.
    pub taints: Vec<Taint>,
    /// `status.addresses`, shared with the views controllers keep for change detection.
    pub addresses: Arc<[NodeAddress]>,
    /// Status (`True`, `False`, `Unknown`) of the `Ready` condition, when the node has one.
    pub ready: Option<String>,
    /// Status of the `NetworkUnavailable` condition, when the node has one.
    pub network_unavailable: Option<String>,
}

impl CachedNode {
    /// The node's name.
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// `spec.providerID` when set and not empty.
    pub fn provider_id(&self) -> Option<&str> {
        self.provider_id.as_deref().filter(|id| !id.is_empty())
    }

    /// Whether the `Ready` condition is `True` (a missing condition counts as Unknown).
    pub fn is_ready(&self) -> bool {
        self.ready.as_deref() == Some("True")
    }

    /// Whether the node has a taint with `key`.
    pub fn has_taint(&self, key: &str) -> bool {
        self.taints.iter().any(|t| t.key == key)
    }

    /// Whether the node is being deleted.
    pub fn is_terminating(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
    }

    /// A `Node` with everything this copy holds (the two conditions with their type and status only), for
    /// cloud provider calls and helpers written against `Node`.
    pub fn to_node(&self) -> Node {
        let conditions: Vec<NodeCondition> = [
            (CONDITION_READY, &self.ready),
            (CONDITION_NETWORK_UNAVAILABLE, &self.network_unavailable),
        ]
        .into_iter()
        .filter_map(|(type_, status)| {
            status.as_ref().map(|status| NodeCondition {
                type_: type_.to_string(),
                status: status.clone(),
                ..NodeCondition::default()
            })
        })
        .collect();
        Node {
            metadata: self.metadata.clone(),
            spec: Some(NodeSpec {
                provider_id: self.provider_id.clone(),
                pod_cidr: self.pod_cidrs.first().cloned(),
                pod_cidrs: (!self.pod_cidrs.is_empty()).then(|| self.pod_cidrs.clone()),
                taints: (!self.taints.is_empty()).then(|| self.taints.clone()),
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus {
                addresses: (!self.addresses.is_empty()).then(|| self.addresses.to_vec()),
                conditions: (!conditions.is_empty()).then_some(conditions),
                ..NodeStatus::default()
            }),
        }
    }
}

impl From<Node> for CachedNode {
    fn from(mut node: Node) -> Self {
        trim_metadata(&mut node);
        let meta = node.metadata;
        let metadata = ObjectMeta {
            name: meta.name,
            uid: meta.uid,
            resource_version: meta.resource_version,
            creation_timestamp: meta.creation_timestamp,
            deletion_timestamp: meta.deletion_timestamp,
            labels: meta.labels.filter(|l| !l.is_empty()),
            annotations: meta.annotations.filter(|a| !a.is_empty()),
            ..ObjectMeta::default()
        };
        let spec = node.spec.unwrap_or_default();
        let mut pod_cidrs = spec.pod_cidrs.unwrap_or_default();
        if pod_cidrs.is_empty()
            && let Some(single) = spec.pod_cidr.filter(|c| !c.is_empty())
        {
            pod_cidrs.push(single);
        }
        let status = node.status.unwrap_or_default();
        let mut ready = None;
        let mut network_unavailable = None;
        for condition in status.conditions.unwrap_or_default() {
            match condition.type_.as_str() {
                CONDITION_READY => ready = Some(condition.status),
                CONDITION_NETWORK_UNAVAILABLE => network_unavailable = Some(condition.status),
                _ => {}
            }
        }
        CachedNode {
            metadata,
            provider_id: spec.provider_id,
            pod_cidrs,
            taints: spec.taints.unwrap_or_default(),
            addresses: status.addresses.unwrap_or_default().into(),
            ready,
            network_unavailable,
        }
    }
}

impl Resource for CachedNode {
    type DynamicType = ();
    type Scope = k8s_openapi::ClusterResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Node::kind(&())
    }

    fn group(_: &()) -> Cow<'_, str> {
        Node::group(&())
    }

    fn version(_: &()) -> Cow<'_, str> {
        Node::version(&())
    }

    fn plural(_: &()) -> Cow<'_, str> {
        Node::plural(&())
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerImage, NodeSystemInfo};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;

    fn condition(type_: &str, status: &str) -> NodeCondition {
        NodeCondition {
            type_: type_.into(),
            status: status.into(),
            message: Some("kubelet is posting ready status".into()),
            ..NodeCondition::default()
        }
    }

    fn full_node() -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                uid: Some("u1".into()),
                resource_version: Some("7".into()),
                labels: Some([("zone".to_string(), "a".to_string())].into()),
                annotations: Some(
                    [
                        (
                            "kubectl.kubernetes.io/last-applied-configuration".to_string(),
                            "{}".to_string(),
                        ),
                        ("keep".to_string(), "me".to_string()),
                    ]
                    .into(),
                ),
                managed_fields: Some(vec![ManagedFieldsEntry::default()]),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec {
                provider_id: Some("fake://n1".into()),
                pod_cidr: Some("10.244.1.0/24".into()),
                taints: Some(vec![Taint {
                    key: "dedicated".into(),
                    effect: "NoSchedule".into(),
                    ..Taint::default()
                }]),
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus {
                addresses: Some(vec![NodeAddress {
                    type_: "InternalIP".into(),
                    address: "10.0.0.1".into(),
                }]),
                conditions: Some(vec![
                    condition("MemoryPressure", "False"),
                    condition(CONDITION_READY, "True"),
                    condition(CONDITION_NETWORK_UNAVAILABLE, "False"),
                ]),
                images: Some(vec![ContainerImage::default()]),
                node_info: Some(NodeSystemInfo::default()),
                ..NodeStatus::default()
            }),
        }
    }

    #[test]
    fn keeps_what_controllers_read_and_drops_the_rest() {
        let cached = CachedNode::from(full_node());
        assert_eq!(cached.name(), "n1");
        assert_eq!(cached.metadata.uid.as_deref(), Some("u1"));
        assert_eq!(cached.metadata.resource_version.as_deref(), Some("7"));
        assert!(cached.metadata.managed_fields.is_none());
        let annotations = cached.metadata.annotations.as_ref().unwrap();
        assert_eq!(annotations.len(), 1);
        assert_eq!(annotations["keep"], "me");
        assert_eq!(cached.provider_id(), Some("fake://n1"));
        assert_eq!(cached.pod_cidrs, vec!["10.244.1.0/24".to_string()]);
        assert!(cached.has_taint("dedicated"));
        assert!(!cached.has_taint("other"));
        assert_eq!(cached.addresses.len(), 1);
        assert!(cached.is_ready());
        assert_eq!(cached.network_unavailable.as_deref(), Some("False"));
        assert!(!cached.is_terminating());
    }

    #[test]
    fn rebuilt_node_carries_the_kept_fields() {
        let cached = CachedNode::from(full_node());
        let node = cached.to_node();
        assert_eq!(node.metadata, cached.metadata);
        let spec = node.spec.as_ref().unwrap();
        assert_eq!(spec.provider_id.as_deref(), Some("fake://n1"));
        assert_eq!(
            spec.pod_cidrs.as_deref(),
            Some(&["10.244.1.0/24".to_string()][..])
        );
        assert_eq!(spec.taints.as_ref().unwrap().len(), 1);
        let status = node.status.as_ref().unwrap();
        assert!(status.images.is_none() && status.node_info.is_none());
        let conditions = status.conditions.as_ref().unwrap();
        let types: Vec<(&str, &str)> = conditions
            .iter()
            .map(|c| (c.type_.as_str(), c.status.as_str()))
            .collect();
        assert_eq!(
            types,
            vec![
                (CONDITION_READY, "True"),
                (CONDITION_NETWORK_UNAVAILABLE, "False")
            ]
        );
        assert_eq!(CachedNode::from(node), cached);
    }

    #[test]
    fn empty_provider_id_and_missing_conditions() {
        let mut node = full_node();
        node.spec.as_mut().unwrap().provider_id = Some(String::new());
        node.status = None;
        let cached = CachedNode::from(node);
        assert_eq!(cached.provider_id(), None);
        assert!(!cached.is_ready());
        assert!(cached.addresses.is_empty());
        assert_eq!(
            crate::events::object_ref(&cached).kind.as_deref(),
            Some("Node")
        );
    }
}
