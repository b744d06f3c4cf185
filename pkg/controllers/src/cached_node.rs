//! The compact copy of a Node that the shared node informer keeps.
//!
//! A `k8s_openapi` `Node` is about 1.5 KB before any of its strings, maps or lists, and most of it (node
//! info, capacity, images, volumes, daemon endpoints, all but two conditions) is read by no controller. At
//! thousands of nodes the store of whole objects dominates the process's memory, so the node informer
//! projects every Node into a [`CachedNode`] before storing it: the metadata the controllers read, the spec
//! fields that matter to cloud calls, the addresses and the status of the two conditions the controllers
//! act on. Provider calls, which take `Node`s, get a slim `Node` rebuilt from it ([`CachedNode::to_node`]).
//! The informer decodes Nodes straight into the fields kept here ([`WireNode`]).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, LazyLock};

use k8s_openapi::api::core::v1::{
    Node, NodeAddress, NodeCondition, NodeSpec, NodeStatus, ObjectReference, Taint,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Resource;
use kube::api::ObjectMeta;
use kube::runtime::reflector::Lookup;
use parking_lot::Mutex;

use crate::trim::trim_metadata;
use crate::wire_node::{WireCondition, WireNode, WireNodeSpec, WireNodeStatus};

/// Type of the node condition the kubelet reports readiness with.
pub const CONDITION_READY: &str = "Ready";
/// Type of the node condition the node-route-controller maintains.
pub const CONDITION_NETWORK_UNAVAILABLE: &str = "NetworkUnavailable";

/// What the controllers read of a Node: name, UID, resourceVersion, creation and deletion timestamps, labels
/// and annotations (interned: most keys and many values repeat across nodes); provider ID, pod CIDRs and
/// taints; addresses; the status of the `Ready` and `NetworkUnavailable` conditions.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CachedNode {
    name: Box<str>,
    uid: Option<Box<str>>,
    resource_version: Option<Box<str>>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
    labels: StringMap,
    annotations: StringMap,
    provider_id: Option<Box<str>>,
    /// `spec.podCIDRs`, or `spec.podCIDR` when the list is empty.
    pub pod_cidrs: Box<[String]>,
    /// `spec.taints`.
    pub taints: Box<[Taint]>,
    /// `status.addresses`, shared with the views controllers keep for change detection.
    pub addresses: Arc<[NodeAddress]>,
    /// Status (`True`, `False`, `Unknown`) of the `Ready` condition, when the node has one.
    pub ready: Option<Box<str>>,
    /// Status of the `NetworkUnavailable` condition, when the node has one.
    pub network_unavailable: Option<Box<str>>,
}

impl CachedNode {
    /// The node's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `metadata.uid`.
    pub fn uid(&self) -> Option<&str> {
        self.uid.as_deref()
    }

    /// `metadata.resourceVersion` of the copy.
    pub fn resource_version(&self) -> Option<&str> {
        self.resource_version.as_deref()
    }

    /// `metadata.creationTimestamp`.
    pub fn creation_timestamp(&self) -> Option<&Time> {
        self.creation_timestamp.as_ref()
    }

    /// The node's labels.
    pub fn labels(&self) -> &StringMap {
        &self.labels
    }

    /// The value of one label.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key)
    }

    /// The value of one annotation (kubectl's last-applied copy is not kept).
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.get(key)
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
        self.deletion_timestamp.is_some()
    }

    /// The reference events about this node point to.
    pub fn object_reference(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some(<Node as Resource>::api_version(&()).into_owned()),
            kind: Some(<Node as Resource>::kind(&()).into_owned()),
            name: Some(self.name.to_string()),
            uid: self.uid.as_deref().map(str::to_string),
            ..ObjectReference::default()
        }
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
                status: status.to_string(),
                ..NodeCondition::default()
            })
        })
        .collect();
        Node {
            metadata: ObjectMeta {
                name: Some(self.name.to_string()),
                uid: self.uid.as_deref().map(str::to_string),
                resource_version: self.resource_version.as_deref().map(str::to_string),
                creation_timestamp: self.creation_timestamp.clone(),
                deletion_timestamp: self.deletion_timestamp.clone(),
                labels: self.labels.to_btree_map(),
                annotations: self.annotations.to_btree_map(),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec {
                provider_id: self.provider_id.as_deref().map(str::to_string),
                pod_cidr: self.pod_cidrs.first().cloned(),
                pod_cidrs: (!self.pod_cidrs.is_empty()).then(|| self.pod_cidrs.to_vec()),
                taints: (!self.taints.is_empty()).then(|| self.taints.to_vec()),
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
    fn from(node: Node) -> Self {
        CachedNode::from(WireNode::from(node))
    }
}

impl From<Node> for WireNode {
    fn from(node: Node) -> Self {
        let spec = node.spec.unwrap_or_default();
        let status = node.status.unwrap_or_default();
        WireNode {
            metadata: node.metadata,
            spec: Some(WireNodeSpec {
                provider_id: spec.provider_id,
                pod_cidr: spec.pod_cidr,
                pod_cidrs: spec.pod_cidrs,
                taints: spec.taints,
            }),
            status: Some(WireNodeStatus {
                addresses: status.addresses,
                conditions: status.conditions.map(|conditions| {
                    conditions
                        .into_iter()
                        .map(|c| WireCondition {
                            type_: c.type_,
                            status: c.status,
                        })
                        .collect()
                }),
            }),
        }
    }
}

impl From<WireNode> for CachedNode {
    fn from(mut node: WireNode) -> Self {
        trim_metadata(&mut node);
        let meta = node.metadata;
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
                CONDITION_READY => ready = Some(condition.status.into_boxed_str()),
                CONDITION_NETWORK_UNAVAILABLE => {
                    network_unavailable = Some(condition.status.into_boxed_str());
                }
                _ => {}
            }
        }
        CachedNode {
            name: meta.name.unwrap_or_default().into_boxed_str(),
            uid: meta.uid.map(String::into_boxed_str),
            resource_version: meta.resource_version.map(String::into_boxed_str),
            creation_timestamp: meta.creation_timestamp,
            deletion_timestamp: meta.deletion_timestamp,
            labels: StringMap::from(meta.labels.unwrap_or_default()),
            annotations: StringMap::from(meta.annotations.unwrap_or_default()),
            provider_id: spec.provider_id.map(String::into_boxed_str),
            pod_cidrs: pod_cidrs.into_boxed_slice(),
            taints: spec.taints.unwrap_or_default().into_boxed_slice(),
            addresses: status.addresses.unwrap_or_default().into(),
            ready,
            network_unavailable,
        }
    }
}

impl Lookup for CachedNode {
    type DynamicType = ();

    fn kind(_: &()) -> Cow<'_, str> {
        <Node as Resource>::kind(&())
    }

    fn group(_: &()) -> Cow<'_, str> {
        <Node as Resource>::group(&())
    }

    fn version(_: &()) -> Cow<'_, str> {
        <Node as Resource>::version(&())
    }

    fn plural(_: &()) -> Cow<'_, str> {
        <Node as Resource>::plural(&())
    }

    fn name(&self) -> Option<Cow<'_, str>> {
        Some(Cow::Borrowed(&self.name))
    }

    fn namespace(&self) -> Option<Cow<'_, str>> {
        None
    }

    fn resource_version(&self) -> Option<Cow<'_, str>> {
        self.resource_version.as_deref().map(Cow::Borrowed)
    }

    fn uid(&self) -> Option<Cow<'_, str>> {
        self.uid.as_deref().map(Cow::Borrowed)
    }
}

/// A string-to-string map (labels, annotations) sorted by key, with keys and values interned: thousands of
/// nodes share one copy of `topology.kubernetes.io/zone` and of each zone name, and an entry is two
/// pointers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StringMap(Box<[(Interned, Interned)]>);

/// An interned string behind a thin pointer (8 bytes, where an `Arc<str>` is 16): label and annotation
/// entries outnumber the distinct strings many times over.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Interned(Arc<Box<str>>);

impl AsRef<str> for Interned {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for Interned {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl StringMap {
    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(k, _)| k.as_ref().cmp(key))
            .ok()
            .map(|i| self.0[i].1.as_ref())
    }

    /// The entries in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_ref(), v.as_ref()))
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The map as a Kubernetes object carries it (`None` when empty).
    fn to_btree_map(&self) -> Option<BTreeMap<String, String>> {
        (!self.is_empty()).then(|| {
            self.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
    }
}

impl From<BTreeMap<String, String>> for StringMap {
    fn from(map: BTreeMap<String, String>) -> Self {
        // A BTreeMap iterates in key order, which `get` relies on.
        StringMap(
            map.into_iter()
                .map(|(k, v)| (intern(k), intern(v)))
                .collect(),
        )
    }
}

/// A pool of interned strings, pruned of strings nobody holds any more whenever it has grown to twice its
/// size after the last pruning.
struct Interner {
    strings: HashSet<Interned>,
    prune_at: usize,
}

/// Size below which the pool is never pruned.
const INTERNER_MIN_PRUNE: usize = 4_096;

impl Interner {
    fn new() -> Self {
        Interner {
            strings: HashSet::new(),
            prune_at: INTERNER_MIN_PRUNE,
        }
    }

    /// The shared copy of `s`.
    fn intern(&mut self, s: String) -> Interned {
        if let Some(shared) = self.strings.get(s.as_str()) {
            return shared.clone();
        }
        if self.strings.len() >= self.prune_at {
            self.strings.retain(|s| Arc::strong_count(&s.0) > 1);
            self.prune_at = (self.strings.len() * 2).max(INTERNER_MIN_PRUNE);
        }
        let shared = Interned(Arc::new(s.into_boxed_str()));
        self.strings.insert(shared.clone());
        shared
    }
}

/// The process's pool, shared by every node copy.
static INTERNER: LazyLock<Mutex<Interner>> = LazyLock::new(|| Mutex::new(Interner::new()));

fn intern(s: String) -> Interned {
    INTERNER.lock().intern(s)
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
    fn the_wire_decoding_keeps_exactly_what_the_whole_node_gives() {
        let mut node = full_node();
        node.metadata.creation_timestamp = Some(Time("2026-01-02T03:04:05Z".parse().unwrap()));
        node.metadata.deletion_timestamp = Some(Time("2026-01-02T03:05:05Z".parse().unwrap()));
        node.spec.as_mut().unwrap().pod_cidrs =
            Some(vec!["10.244.1.0/24".into(), "fd00::/64".into()]);
        let mut json = serde_json::to_value(&node).unwrap();
        // Fields no version of the projection reads, and ones a newer server may add, are passed over.
        json["status"]["newerField"] = serde_json::json!({"deep": [1, 2, {"x": null}]});
        json["metadata"]["generateName"] = serde_json::json!("n-");
        let wire: WireNode = serde_json::from_value(json).unwrap();
        assert_eq!(CachedNode::from(wire), CachedNode::from(node));

        let bare: WireNode = serde_json::from_str(r#"{"metadata": {"name": "n2"}}"#).unwrap();
        let cached = CachedNode::from(bare);
        assert_eq!((cached.name(), cached.provider_id()), ("n2", None));
        assert!(cached.addresses.is_empty() && cached.ready.is_none());
    }

    #[test]
    fn keeps_what_controllers_read_and_drops_the_rest() {
        let cached = CachedNode::from(full_node());
        assert_eq!(cached.name(), "n1");
        assert_eq!(cached.uid(), Some("u1"));
        assert_eq!(cached.resource_version(), Some("7"));
        assert_eq!(cached.label("zone"), Some("a"));
        assert_eq!(cached.labels().len(), 1);
        assert_eq!(cached.annotation("keep"), Some("me"));
        assert_eq!(
            cached.annotation("kubectl.kubernetes.io/last-applied-configuration"),
            None
        );
        assert_eq!(cached.provider_id(), Some("fake://n1"));
        assert_eq!(*cached.pod_cidrs, ["10.244.1.0/24".to_string()]);
        assert!(cached.has_taint("dedicated"));
        assert!(!cached.has_taint("other"));
        assert_eq!(cached.addresses.len(), 1);
        assert!(cached.is_ready());
        assert_eq!(cached.network_unavailable.as_deref(), Some("False"));
        assert!(!cached.is_terminating());
        let reference = cached.object_reference();
        assert_eq!(reference.kind.as_deref(), Some("Node"));
        assert_eq!(reference.api_version.as_deref(), Some("v1"));
        assert_eq!(reference.name.as_deref(), Some("n1"));
        assert_eq!(reference.uid.as_deref(), Some("u1"));
    }

    #[test]
    fn rebuilt_node_carries_the_kept_fields() {
        let cached = CachedNode::from(full_node());
        let node = cached.to_node();
        assert_eq!(node.metadata.name.as_deref(), Some("n1"));
        assert_eq!(node.metadata.resource_version.as_deref(), Some("7"));
        assert!(node.metadata.managed_fields.is_none());
        assert_eq!(node.metadata.annotations.as_ref().unwrap().len(), 1);
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
    }

    #[test]
    fn maps_share_interned_strings_and_look_up_by_key() {
        let map = |pairs: &[(&str, &str)]| {
            StringMap::from(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>(),
            )
        };
        let a = map(&[
            ("topology.kubernetes.io/zone", "z1"),
            ("b", "2"),
            ("a", "1"),
        ]);
        let b = map(&[("topology.kubernetes.io/zone", "z1")]);
        assert_eq!(a.get("a"), Some("1"));
        assert_eq!(a.get("b"), Some("2"));
        assert_eq!(a.get("c"), None);
        assert_eq!(
            a.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            vec!["a", "b", "topology.kubernetes.io/zone"]
        );
        let key_a = &a.0[2].0;
        let key_b = &b.0[0].0;
        assert!(
            Arc::ptr_eq(&key_a.0, &key_b.0),
            "one copy of a repeated key"
        );
        assert!(StringMap::default().to_btree_map().is_none());
        assert_eq!(
            b.to_btree_map().unwrap()["topology.kubernetes.io/zone"],
            "z1"
        );
    }

    #[test]
    fn the_pool_forgets_strings_nobody_holds() {
        let mut pool = Interner::new();
        let kept = pool.intern("kept".to_string());
        for i in 1..INTERNER_MIN_PRUNE {
            pool.intern(format!("gone-{i}"));
        }
        assert_eq!(pool.strings.len(), INTERNER_MIN_PRUNE);
        let again = pool.intern("kept".to_string());
        assert!(
            Arc::ptr_eq(&kept.0, &again.0),
            "a held string is found, not copied"
        );
        pool.intern("new".to_string());
        assert_eq!(
            pool.strings.len(),
            2,
            "pruned to the held string, then the new one"
        );
        assert!(pool.strings.contains("kept"));
    }
}
