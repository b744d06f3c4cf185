//! Instance metadata lookups for nodes: one bulk `InstancesV2` call for a batch of nodes, or, for providers
//! with only the v1 `Instances` interface, the individual v1 and `Zones` calls per node.

use std::future::Future;
use std::sync::Arc;

use cloud_provider::{CloudError, CloudProvider, InstanceMetadata, Instances};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, NodeAddress};

use crate::cached_node::CachedNode;

/// Concurrent per-node lookups with the v1 interface.
const V1_CONCURRENCY: usize = 16;

/// The result of one node's lookup: `Ok(None)` when the provider has no metadata for it.
pub type MetadataResult = Result<Option<InstanceMetadata>, CloudError>;

/// Looks up the metadata of every node, in input order, with one cloud call for the whole slice when the
/// provider has `InstancesV2`.
pub async fn lookup(cloud: &dyn CloudProvider, nodes: &[Arc<CachedNode>]) -> Vec<MetadataResult> {
    if nodes.is_empty() {
        return Vec::new();
    }
    if let Some(v2) = cloud.instances_v2() {
        let owned: Vec<Node> = nodes.iter().map(|n| n.to_node()).collect();
        let results = v2.instance_metadata_bulk(&owned).await;
        return fit_bulk_results(results, nodes.len(), "metadata")
            .into_iter()
            .zip(nodes)
            .map(|(result, node)| require_provider_id(node, result?))
            .collect();
    }
    if let Some(v1) = cloud.instances() {
        let lookups = nodes
            .iter()
            .cloned()
            .map(|node| async move { lookup_v1(cloud, v1, &node).await });
        return futures::stream::iter(lookups)
            .buffered(V1_CONCURRENCY)
            .collect()
            .await;
    }
    nodes
        .iter()
        .map(|_| Err(CloudError::NotImplemented))
        .collect()
}

/// The cloud's addresses of every node, in input order, for the periodic address sync: one bulk
/// `InstancesV2` metadata call for the whole slice, or one v1 address lookup per node (by provider ID,
/// then by name), never the instance-type and zone calls initialization needs.
pub async fn lookup_addresses(
    cloud: &dyn CloudProvider,
    nodes: &[Arc<CachedNode>],
) -> Vec<Result<Option<Vec<NodeAddress>>, CloudError>> {
    if cloud.instances_v2().is_some() {
        return lookup(cloud, nodes)
            .await
            .into_iter()
            .map(|result| result.map(|md| md.map(|md| md.node_addresses)))
            .collect();
    }
    let Some(v1) = cloud.instances() else {
        return nodes
            .iter()
            .map(|_| Err(CloudError::NotImplemented))
            .collect();
    };
    let lookups = nodes.iter().cloned().map(|node| async move {
        let provider_id = node.provider_id().unwrap_or_default().to_string();
        by_id_or_name(
            "NodeAddresses",
            v1.node_addresses_by_provider_id(&provider_id),
            v1.node_addresses(node.name()),
        )
        .await
        .map(Some)
    });
    futures::stream::iter(lookups)
        .buffered(V1_CONCURRENCY)
        .collect()
        .await
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

/// A bulk answer with exactly one result per node asked about: a provider that answered with fewer results
/// gets an error for each missing one, extra results are dropped.
pub(crate) fn fit_bulk_results<T>(
    mut results: Vec<Result<T, CloudError>>,
    expected: usize,
    what: &str,
) -> Vec<Result<T, CloudError>> {
    if results.len() != expected {
        let message = format!(
            "provider answered a bulk {what} request for {expected} nodes with {} results",
            results.len()
        );
        results.truncate(expected);
        results.resize_with(expected, || Err(CloudError::provider(message.clone())));
    }
    results
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
