//! Instance metadata lookups for nodes: one bulk `InstancesV2` call for a batch of nodes, or, for providers
//! with only the v1 `Instances` interface, the individual v1 and `Zones` calls per node.

use std::sync::Arc;

use cloud_provider::{CloudError, CloudProvider, InstanceMetadata, Instances};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;

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
        return fit_bulk_results(results, nodes.len(), "metadata");
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

/// The provider ID of `node`: its `spec.providerID`, else `<provider>://<instance id>` from the cloud.
async fn provider_id_v1(
    cloud: &dyn CloudProvider,
    v1: &dyn Instances,
    node: &CachedNode,
) -> Result<String, CloudError> {
    if let Some(id) = node.provider_id() {
        return Ok(id.to_string());
    }
    let instance_id = v1.instance_id(node.name()).await?;
    if instance_id.contains("://") {
        Ok(instance_id)
    } else {
        Ok(format!("{}://{}", cloud.provider_name(), instance_id))
    }
}

async fn lookup_v1(
    cloud: &dyn CloudProvider,
    v1: &dyn Instances,
    node: &CachedNode,
) -> MetadataResult {
    let name = node.name();
    let provider_id = provider_id_v1(cloud, v1, node).await?;
    let instance_type = match v1.instance_type_by_provider_id(&provider_id).await {
        Err(e) if e.is_not_implemented() => v1.instance_type(name).await?,
        other => other?,
    };
    let node_addresses = match v1.node_addresses_by_provider_id(&provider_id).await {
        Err(e) if e.is_not_implemented() => v1.node_addresses(name).await?,
        other => other?,
    };
    let (zone, region) = match cloud.zones() {
        Some(zones) => {
            let zone = match zones.get_zone_by_provider_id(&provider_id).await {
                Err(e) if e.is_not_implemented() => zones.get_zone_by_node_name(name).await?,
                other => other?,
            };
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
