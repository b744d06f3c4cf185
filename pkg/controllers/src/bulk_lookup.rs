//! Cloud lookups about many nodes at once, shared by the cloud-node and cloud-node-lifecycle controllers:
//! the provider's bulk `InstancesV2` call per chunk of nodes, its answer fitted to the chunk (a provider that
//! answers with too few results gets an error for each missing one); per-node v1 `Instances` calls for a
//! provider without `InstancesV2`; `NotImplemented` for every node of a provider with neither.

use std::future::Future;
use std::sync::Arc;

use cloud_provider::{CloudError, CloudProvider, Instances, InstancesV2};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;

use crate::cached_node::CachedNode;

/// Concurrent per-node lookups with the v1 interface.
const V1_CONCURRENCY: usize = 16;

/// How the nodes of a lookup are split into bulk calls.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BulkCalls {
    /// What a call asks for (`metadata`, `state`), named in the error about an incomplete answer.
    pub(crate) what: &'static str,
    /// Most nodes per call.
    pub(crate) nodes_per_call: usize,
    /// Most calls in flight at once.
    pub(crate) concurrent_calls: usize,
}

impl BulkCalls {
    /// One call for all the nodes.
    pub(crate) const fn one(what: &'static str) -> Self {
        BulkCalls {
            what,
            nodes_per_call: usize::MAX,
            concurrent_calls: 1,
        }
    }
}

/// One result per node, in input order. With `InstancesV2`, `bulk(v2, chunk, owned)` is called for each
/// chunk of [`BulkCalls`] (`owned`: the chunk's slim `Node`s, made only when its call starts, so the calls
/// in flight bound the copies); otherwise, with `Instances`, `per_node(v1, node)` for each node,
/// [`V1_CONCURRENCY`] at once. No call for no nodes.
pub(crate) async fn lookup_each_node<'a, T, Bulk, BulkFut, PerNode, PerNodeFut>(
    cloud: &'a dyn CloudProvider,
    nodes: &'a [Arc<CachedNode>],
    calls: BulkCalls,
    bulk: Bulk,
    per_node: PerNode,
) -> Vec<Result<T, CloudError>>
where
    Bulk: Fn(&'a dyn InstancesV2, &'a [Arc<CachedNode>], Vec<Node>) -> BulkFut,
    BulkFut: Future<Output = Vec<Result<T, CloudError>>>,
    PerNode: Fn(&'a dyn Instances, Arc<CachedNode>) -> PerNodeFut,
    PerNodeFut: Future<Output = Result<T, CloudError>>,
{
    if nodes.is_empty() {
        return Vec::new();
    }
    if let Some(v2) = cloud.instances_v2() {
        let bulk = &bulk;
        let requests: Vec<_> = nodes
            .chunks(calls.nodes_per_call)
            .map(|chunk| async move {
                let owned: Vec<Node> = chunk.iter().map(|n| n.to_node()).collect();
                fit_bulk_results(bulk(v2, chunk, owned).await, chunk.len(), calls.what)
            })
            .collect();
        // Each answer moves into the results as it comes: never every answer and their copy at once.
        let mut results = Vec::with_capacity(nodes.len());
        let mut answers = futures::stream::iter(requests).buffered(calls.concurrent_calls);
        while let Some(answer) = answers.next().await {
            results.extend(answer);
        }
        return results;
    }
    if let Some(v1) = cloud.instances() {
        let lookups = nodes.iter().cloned().map(|node| per_node(v1, node));
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
fn fit_bulk_results<T>(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bulk_answers_are_fitted_to_the_nodes_asked_about() {
        let exact = fit_bulk_results(vec![Ok(1), Ok(2)], 2, "state");
        assert!(matches!(exact.as_slice(), [Ok(1), Ok(2)]));

        let long = fit_bulk_results(vec![Ok(1), Ok(2), Ok(3)], 2, "state");
        assert!(matches!(long.as_slice(), [Ok(1), Ok(2)]));

        let short = fit_bulk_results(vec![Ok(1)], 3, "state");
        assert!(matches!(short[0], Ok(1)));
        for missing in &short[1..] {
            let error = missing.as_ref().unwrap_err().to_string();
            assert!(
                error.contains("provider answered a bulk state request for 3 nodes with 1 results"),
                "{error}"
            );
        }
    }
}
