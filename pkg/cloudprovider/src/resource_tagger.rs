//! Tags on the cloud resources behind nodes (the tagging controller: `--controllers=...,tagging`, `--tags`,
//! `--resources`), as cloud-provider-aws tags instances for cost allocation and ownership.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;

use crate::Result;

/// What became of one node's resources.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TagOutcome {
    /// The tags were added (or removed).
    Done,
    /// The node's resources cannot carry tags here (a provider ID naming no resource of this cloud, a
    /// serverless node): nothing was called, nothing will be.
    NotTaggable,
}

/// Adds and removes tags on the cloud resources of nodes.
///
/// Each call takes the nodes of one batch (one node unless batching is on), the resource kinds to tag (each
/// one of [`ResourceTagger::resource_kinds`]) and the tags, and answers one result per node, in order. A
/// resource the cloud does not have is [`CloudError::InstanceNotFound`](crate::CloudError::InstanceNotFound)
/// when tagging (a just-created instance may not be visible yet: the controller retries while the node is
/// young) and `Done` when untagging.
#[async_trait::async_trait]
pub trait ResourceTagger: Send + Sync {
    /// The resource kinds `--resources` may name (AWS: `instance`).
    fn resource_kinds(&self) -> &'static [&'static str];

    /// The node label recording which tags a node's resources carry (a checksum of them): a node whose
    /// label matches the configured tags is not tagged again.
    fn tagged_label(&self) -> &'static str;

    /// Adds `tags` to the `resources` of `nodes`, replacing the values of tags they have already.
    async fn tag_nodes(
        &self,
        nodes: &[Node],
        resources: &[String],
        tags: &BTreeMap<String, String>,
    ) -> Vec<Result<TagOutcome>>;

    /// Removes `tags` (those keys with those values) from the `resources` of `nodes`, which left the
    /// cluster.
    async fn untag_nodes(
        &self,
        nodes: &[Node],
        resources: &[String],
        tags: &BTreeMap<String, String>,
    ) -> Vec<Result<TagOutcome>>;
}
