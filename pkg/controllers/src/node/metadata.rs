//! Instance metadata lookups for nodes: one bulk `InstancesV2` call for a batch of nodes, or, for providers
//! with only the v1 `Instances` interface, the individual v1 and `Zones` calls per node (both through
//! [`bulk_lookup`](crate::bulk_lookup)).

use std::future::Future;
use std::sync::Arc;

use cloud_provider::{CloudError, CloudProvider, InstanceMetadata, Instances, InstancesV2};
use k8s_openapi::api::core::v1::{Node, NodeAddress};

use crate::bulk_lookup::{BulkCalls, lookup_each_node};
use crate::cached_node::CachedNode;

/// The result of one node's lookup: `Ok(None)` when the provider has no metadata for it.
pub type MetadataResult = Result<Option<InstanceMetadata>, CloudError>;

/// Looks up the metadata of every node, in input order, with one cloud call for the whole slice when the
/// provider has `InstancesV2`.
pub async fn lookup(cloud: &dyn CloudProvider, nodes: &[Arc<CachedNode>]) -> Vec<MetadataResult> {
    lookup_each_node(
        cloud,
        nodes,
        BulkCalls::one("metadata"),
        bulk_metadata,
        move |v1, node| async move { lookup_v1(cloud, v1, &node).await },
    )
    .await
}

/// The cloud's addresses of every node, in input order, for the periodic address sync: one bulk
/// `InstancesV2` metadata call for the whole slice, or one v1 address lookup per node (by provider ID,
/// then by name), never the instance-type and zone calls initialization needs.
pub async fn lookup_addresses(
    cloud: &dyn CloudProvider,
    nodes: &[Arc<CachedNode>],
) -> Vec<Result<Option<Vec<NodeAddress>>, CloudError>> {
    lookup_each_node(
        cloud,
        nodes,
        BulkCalls::one("metadata"),
        |v2, nodes, owned| async move {
            bulk_metadata(v2, nodes, owned)
                .await
                .into_iter()
                .map(|result| result.map(|md| md.map(|md| md.node_addresses)))
                .collect()
        },
        |v1, node| async move {
            let provider_id = node.provider_id().unwrap_or_default().to_string();
            by_id_or_name(
                "NodeAddresses",
                v1.node_addresses_by_provider_id(&provider_id),
                v1.node_addresses(node.name()),
            )
            .await
            .map(Some)
        },
    )
    .await
}

/// One bulk `InstancesV2` metadata call for `nodes` (`owned`: their slim `Node`s), each answer checked by
/// [`require_provider_id`].
async fn bulk_metadata(
    v2: &dyn InstancesV2,
    nodes: &[Arc<CachedNode>],
    owned: Vec<Node>,
) -> Vec<MetadataResult> {
    v2.instance_metadata_bulk(&owned)
        .await
        .into_iter()
        .zip(nodes)
        .map(|(result, node)| require_provider_id(node, result?))
        .collect()
}

/// `InstancesV2` metadata must name the instance: the provider ID is set once, at initialization, and load
/// balancers and routes need it. A node without one (kubelets may set it) and an answer without one is an
/// error, so that the node stays tainted and is retried, as upstream does. The node's own ID wins.
fn require_provider_id(node: &CachedNode, metadata: Option<InstanceMetadata>) -> MetadataResult {
    let Some(mut metadata) = metadata else {
        return Ok(None);
    };
    if metadata.provider_id.is_empty() {
        match node.provider_id() {
            Some(id) => metadata.provider_id = id.to_string(),
            None => {
                return Err(CloudError::provider(format!(
                    "cloud provider does not set node provider ID for node {}",
                    node.name()
                )));
            }
        }
    }
    Ok(Some(metadata))
}

/// The provider ID of `node`: its `spec.providerID`, else `<provider>://<instance id>` from the cloud; empty
/// when the provider does not implement instance IDs (the node is then looked up by name, as upstream does).
async fn provider_id_v1(
    cloud: &dyn CloudProvider,
    v1: &dyn Instances,
    node: &CachedNode,
) -> Result<String, CloudError> {
    if let Some(id) = node.provider_id() {
        return Ok(id.to_string());
    }
    match v1.instance_id(node.name()).await {
        Err(e) if e.is_not_implemented() => Ok(String::new()),
        Err(e) => Err(e),
        Ok(id) if id.contains("://") => Ok(id),
        Ok(id) => Ok(format!("{}://{}", cloud.provider_name(), id)),
    }
}

/// Asks by provider ID first and, when that fails for any reason, by node name, as upstream's
/// `...ByProviderIDOrName` helpers do; both failing is an error naming both.
async fn by_id_or_name<T, ById, ByName>(
    what: &str,
    by_id: ById,
    by_name: ByName,
) -> Result<T, CloudError>
where
    ById: Future<Output = Result<T, CloudError>>,
    ByName: Future<Output = Result<T, CloudError>>,
{
    let id_error = match by_id.await {
        Ok(value) => return Ok(value),
        Err(e) => e,
    };
    by_name.await.map_err(|name_error| {
        CloudError::provider(format!(
            "{what}: error fetching by provider ID: {id_error}; error fetching by node name: {name_error}"
        ))
    })
}

async fn lookup_v1(
    cloud: &dyn CloudProvider,
    v1: &dyn Instances,
    node: &CachedNode,
) -> MetadataResult {
    let name = node.name();
    let provider_id = provider_id_v1(cloud, v1, node).await?;
    let node_addresses = by_id_or_name(
        "NodeAddresses",
        v1.node_addresses_by_provider_id(&provider_id),
        v1.node_addresses(name),
    )
    .await?;
    let instance_type = by_id_or_name(
        "InstanceType",
        v1.instance_type_by_provider_id(&provider_id),
        v1.instance_type(name),
    )
    .await?;
    let (zone, region) = match cloud.zones() {
        Some(zones) => {
            let zone = by_id_or_name(
                "Zone",
                zones.get_zone_by_provider_id(&provider_id),
                zones.get_zone_by_node_name(name),
            )
            .await?;
            (zone.failure_domain, zone.region)
        }
        None => (String::new(), String::new()),
    };
    Ok(Some(InstanceMetadata {
        provider_id,
        instance_type,
        node_addresses,
        zone,
        region,
        additional_labels: Default::default(),
    }))
}
