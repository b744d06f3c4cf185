//! The node informer's wire type: a Node decoded with only the fields [`CachedNode`] keeps.
//!
//! Most of a Node's JSON is read by no controller: managed fields (a tree per field manager), node info,
//! capacity and allocatable, the images list, volumes, daemon endpoints and all but two conditions. Decoding
//! a list page or a watch event into a whole `k8s_openapi` `Node` builds every one of those strings, maps
//! and lists only for the projection to drop them. [`WireNode`] names only what the projection reads; the
//! decoder passes over everything else without allocating, so a Node costs the informer what it keeps.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeAddress, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::{ClusterResourceScope, Metadata, Resource};
use serde::Deserialize;

/// A Node as the informer decodes it (see the module documentation).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct WireNode {
    /// The metadata the controllers read (no managed fields).
    #[serde(default, deserialize_with = "wire_metadata")]
    pub metadata: ObjectMeta,
    /// `spec`.
    #[serde(default)]
    pub spec: Option<WireNodeSpec>,
    /// `status`.
    #[serde(default)]
    pub status: Option<WireNodeStatus>,
}

/// The fields of `spec` the controllers read.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct WireNodeSpec {
    /// `spec.providerID`.
    #[serde(default, rename = "providerID")]
    pub provider_id: Option<String>,
    /// `spec.podCIDR`.
    #[serde(default, rename = "podCIDR")]
    pub pod_cidr: Option<String>,
    /// `spec.podCIDRs`.
    #[serde(default, rename = "podCIDRs")]
    pub pod_cidrs: Option<Vec<String>>,
    /// `spec.taints`.
    #[serde(default)]
    pub taints: Option<Vec<Taint>>,
}

/// The fields of `status` the controllers read.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct WireNodeStatus {
    /// `status.addresses`.
    #[serde(default)]
    pub addresses: Option<Vec<NodeAddress>>,
    /// `status.conditions`, type and status only.
    #[serde(default)]
    pub conditions: Option<Vec<WireCondition>>,
}

/// A node condition's type and status.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct WireCondition {
    /// `type`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `status`.
    pub status: String,
}

/// The metadata fields the controllers read.
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireMetadata {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default)]
    creation_timestamp: Option<Time>,
    #[serde(default)]
    deletion_timestamp: Option<Time>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    annotations: Option<BTreeMap<String, String>>,
}

fn wire_metadata<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<ObjectMeta, D::Error> {
    let wire = Option::<WireMetadata>::deserialize(deserializer)?.unwrap_or_default();
    Ok(ObjectMeta {
        name: wire.name,
        uid: wire.uid,
        resource_version: wire.resource_version,
        creation_timestamp: wire.creation_timestamp,
        deletion_timestamp: wire.deletion_timestamp,
        labels: wire.labels,
        annotations: wire.annotations,
        ..ObjectMeta::default()
    })
}

impl Resource for WireNode {
    const API_VERSION: &'static str = "v1";
    const GROUP: &'static str = "";
    const KIND: &'static str = "Node";
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "nodes";
    type Scope = ClusterResourceScope;
}

impl Metadata for WireNode {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}
