//! Tags on the EC2 instances of nodes, for the tagging controller (`--controllers=*,tagging`), as
//! cloud-provider-aws tags them: CreateTags with the `--tags` when a node joins (existing values replaced),
//! DeleteTags of those keys and values when it leaves. The only resource kind is `instance`.
//!
//! The nodes of one batch go into one call; when it fails, each instance is tried on its own, so one
//! missing instance does not fail the others (upstream's batcher does the same). An instance EC2 does not
//! know is [`CloudError::InstanceNotFound`] when tagging (the controller retries a young node) and done when
//! untagging; an ID EC2 calls malformed (`InvalidID`: virtual nodes with made-up IDs) and a provider ID that
//! names no instance (Fargate) are not taggable, as upstream skips them.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::Tag;
use cloud_provider::{CloudError, ResourceTagger, Result, TagOutcome};
use k8s_openapi::api::core::v1::Node;

use crate::cloud::AwsCloud;
use crate::error::{ApiError, SdkResultExt};
use crate::provider_id::instance_id_from_provider_id;

/// The resource kinds `--resources` may name.
pub const RESOURCE_KINDS: &[&str] = &["instance"];
/// The node label recording the checksum of the tags its instance carries (upstream's).
pub const TAGGED_LABEL: &str = "k8s.io/cloud-provider-aws";

/// Whether the tags are added or removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Change {
    Add,
    Remove,
}

/// The instance ID of a node, when it has one.
fn instance_of(node: &Node) -> Option<String> {
    let provider_id = node.spec.as_ref()?.provider_id.as_deref()?;
    instance_id_from_provider_id(provider_id).ok()
}

fn ec2_tags(tags: &BTreeMap<String, String>) -> Vec<Tag> {
    tags.iter()
        .map(|(k, v)| Tag::builder().key(k).value(v).build())
        .collect()
}

/// What one instance's failed call means.
fn outcome_of(change: Change, error: ApiError) -> Result<TagOutcome> {
    if error.is_code("InvalidID") {
        return Ok(TagOutcome::NotTaggable);
    }
    if error.is_code("InvalidInstanceID.NotFound") {
        return match change {
            Change::Add => Err(CloudError::InstanceNotFound),
            Change::Remove => Ok(TagOutcome::Done),
        };
    }
    Err(error.into())
}

impl AwsCloud {
    /// One CreateTags or DeleteTags call for `ids`.
    async fn change_tags(
        &self,
        change: Change,
        ids: &[String],
        tags: &BTreeMap<String, String>,
    ) -> std::result::Result<(), ApiError> {
        let ec2 = &self.clients.ec2;
        match change {
            Change::Add => ec2
                .create_tags()
                .set_resources(Some(ids.to_vec()))
                .set_tags(Some(ec2_tags(tags)))
                .send()
                .await
                .api("CreateTags")
                .map(|_| ()),
            Change::Remove => ec2
                .delete_tags()
                .set_resources(Some(ids.to_vec()))
                .set_tags(Some(ec2_tags(tags)))
                .send()
                .await
                .api("DeleteTags")
                .map(|_| ()),
        }
    }

    /// Adds or removes `tags` on the instances of `nodes`: one call for all, then one per instance if that
    /// fails.
    async fn change_node_tags(
        &self,
        change: Change,
        nodes: &[Node],
        resources: &[String],
        tags: &BTreeMap<String, String>,
    ) -> Vec<Result<TagOutcome>> {
        if !resources.iter().any(|r| r == "instance") {
            return nodes.iter().map(|_| Ok(TagOutcome::Done)).collect();
        }
        let ids: Vec<Option<String>> = nodes.iter().map(instance_of).collect();
        let taggable: Vec<String> = ids.iter().flatten().cloned().collect();
        let all_done =
            taggable.is_empty() || self.change_tags(change, &taggable, tags).await.is_ok();
        let mut out = Vec::with_capacity(nodes.len());
        for id in ids {
            out.push(match id {
                None => Ok(TagOutcome::NotTaggable),
                Some(_) if all_done => Ok(TagOutcome::Done),
                Some(id) => match self
                    .change_tags(change, std::slice::from_ref(&id), tags)
                    .await
                {
                    Ok(()) => Ok(TagOutcome::Done),
                    Err(error) => outcome_of(change, error),
                },
            });
        }
        out
    }
}

#[async_trait::async_trait]
impl ResourceTagger for AwsCloud {
    fn resource_kinds(&self) -> &'static [&'static str] {
        RESOURCE_KINDS
    }

    fn tagged_label(&self) -> &'static str {
        TAGGED_LABEL
    }

    async fn tag_nodes(
        &self,
        nodes: &[Node],
        resources: &[String],
        tags: &BTreeMap<String, String>,
    ) -> Vec<Result<TagOutcome>> {
        self.change_node_tags(Change::Add, nodes, resources, tags)
            .await
    }

    async fn untag_nodes(
        &self,
        nodes: &[Node],
        resources: &[String],
        tags: &BTreeMap<String, String>,
    ) -> Vec<Result<TagOutcome>> {
        self.change_node_tags(Change::Remove, nodes, resources, tags)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(code: &str) -> ApiError {
        ApiError {
            operation: "CreateTags",
            code: Some(code.into()),
            detail: code.into(),
        }
    }

    #[test]
    fn failures_as_upstream_takes_them() {
        assert!(matches!(
            outcome_of(Change::Add, error("InvalidID")),
            Ok(TagOutcome::NotTaggable)
        ));
        assert!(matches!(
            outcome_of(Change::Add, error("InvalidInstanceID.NotFound")),
            Err(CloudError::InstanceNotFound)
        ));
        assert!(matches!(
            outcome_of(Change::Remove, error("InvalidInstanceID.NotFound")),
            Ok(TagOutcome::Done)
        ));
        assert!(outcome_of(Change::Add, error("UnauthorizedOperation")).is_err());
    }

    #[test]
    fn instances_of_nodes() {
        let node = |provider_id: Option<&str>| Node {
            spec: Some(k8s_openapi::api::core::v1::NodeSpec {
                provider_id: provider_id.map(str::to_string),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            instance_of(&node(Some("aws:///us-east-1a/i-0abc"))).as_deref(),
            Some("i-0abc")
        );
        assert_eq!(
            instance_of(&node(Some("aws:///us-east-1a/fargate-ip-10-0-0-1"))),
            None
        );
        assert_eq!(instance_of(&node(None)), None);
    }
}
