//! tagging-controller: puts `--tags` on the cloud resources (`--resources`) of every node and removes them
//! when the node leaves, as cloud-provider-aws's tagging controller does (`--controllers=*,tagging`; off by
//! default, as there). The provider does the tagging ([`cloud_provider::ResourceTagger`]).
//!
//! As upstream:
//!
//! - A node is tagged when it has a provider ID and its tagged label (AWS: `k8s.io/cloud-provider-aws`) is
//!   not the MD5 checksum of the sorted `key=value` pairs of `--tags` joined by commas: new nodes, every node
//!   when the tags change (tags no longer configured are not removed from live resources). After tagging,
//!   the label is set to the checksum. A node whose resource the cloud cannot find is retried while it is
//!   younger than five minutes (a new instance may not be visible yet), then given up.
//! - A deleted node's resources lose the tags (a resource that is gone counts as done).
//! - A failed sync is retried with per-node exponential backoff (5 ms doubling up to 1000 s) at most nine
//!   times, then given up (`cloudprovider_aws_tagging_controller_work_item_errors_total` counts both:
//!   `total_errors`, `errors_after_retries_exhausted`); a later change of the node queues it again.
//! - `--tagging-controller-rate-limit` and `--tagging-controller-burst-limit`, when both are greater than
//!   0, limit the cloud calls to that rate with that burst; `--tagging-controller-concurrent-node-syncs`
//!   workers sync nodes at once; with `--tagging-controller-enable-batching` a worker hands up to 50 queued
//!   nodes to the provider in one call.
//!
//! Unlike upstream, a node without a provider ID is not queued (it would only fail until it has one), and a
//! failed sync also gets a Warning event `FailedTagging` on the node.

mod rate;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use cloud_provider::{CloudError, ObjectKey, ResourceTagger, Result as CloudResult, TagOutcome};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch};
use kube::runtime::reflector::{ObjectRef, Store};
use md5::{Digest, Md5};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use self::rate::RateLimiter;
use crate::cached_node::CachedNode;
use crate::context::ControllerContext;
use crate::error::ControllersError;
use crate::events::{EventRecorder, EventType, object_ref};
use crate::identity;
use crate::informers::{InformerEvent, InformerEvents, SharedInformers};
use crate::names::ControllerName;
use crate::panics::PanicGuard;
use crate::workqueue::WorkQueue;
use crate::workqueue_metrics::queue_names;

/// Upstream's per-item backoff: 5 ms doubling up to 1000 s.
const BACKOFF_BASE: Duration = Duration::from_millis(5);
const BACKOFF_MAX: Duration = Duration::from_secs(1000);
/// Retries of one node before it is given up (upstream's `maxRequeuingCount`).
pub const MAX_RETRIES: u32 = 9;
/// How long a node's resource may be missing from the cloud before tagging it is given up.
pub const NEW_NODE_GRACE: Duration = Duration::from_secs(5 * 60);
/// Most nodes in one batched call (upstream's batcher).
pub const BATCH_SIZE: usize = 50;
const EVENT_FLUSH_TIMEOUT: Duration = Duration::from_secs(2);

/// The value of the tagged label for `tags`: the hex MD5 of the sorted `key=value` pairs joined by `,`.
///
/// ```
/// use std::collections::BTreeMap;
/// let tags = BTreeMap::from([("team".to_string(), "ml".to_string())]);
/// assert_eq!(cloud_controllers::tagging::tags_checksum(&tags), "de2d8c7ffb6f8ef993de3e4d3884dba9");
/// ```
pub fn tags_checksum(tags: &BTreeMap<String, String>) -> String {
    let pairs: Vec<String> = tags.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let digest = Md5::digest(pairs.join(",").as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// One unit of work: tag a node's resources, or untag those of a node that was deleted (its provider ID is
/// kept: the node is gone from the store).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Work {
    Tag { node: String },
    Untag { node: String, provider_id: String },
}

impl Work {
    fn node(&self) -> &str {
        match self {
            Work::Tag { node } | Work::Untag { node, .. } => node,
        }
    }
}

/// The instance part of a provider ID (`aws:///zone/i-1` -> `i-1`), the metrics' `instance_id`.
fn instance_label(provider_id: &str) -> String {
    provider_id
        .rsplit('/')
        .next()
        .unwrap_or(provider_id)
        .to_string()
}

struct Inner {
    ctx: ControllerContext,
    api: Api<Node>,
    store: Store<CachedNode>,
    recorder: EventRecorder,
    queue: WorkQueue<Work>,
    rate: Option<RateLimiter>,
    /// The tagged label's value for the configured tags.
    checksum: String,
    label: &'static str,
}

/// The tagging-controller.
pub struct TaggingController {
    inner: Arc<Inner>,
    informers: SharedInformers,
    events: InformerEvents<CachedNode>,
}

impl std::fmt::Debug for TaggingController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaggingController")
            .field("queue", &self.inner.queue)
            .finish_non_exhaustive()
    }
}

impl TaggingController {
    /// Creates the controller and subscribes to the node informer.
    pub fn new(ctx: &ControllerContext, informers: &SharedInformers) -> Self {
        let ctx = &ctx.for_controller(ControllerName::Tagging);
        let tagging = &ctx.config.tagging;
        let label = ctx
            .cloud
            .resource_tagger()
            .map(|t| t.tagged_label())
            .unwrap_or_default();
        TaggingController {
            inner: Arc::new(Inner {
                ctx: ctx.clone(),
                api: Api::all(ctx.client_for(ControllerName::Tagging)),
                store: informers.nodes(),
                recorder: ctx.recorder(ControllerName::Tagging),
                queue: WorkQueue::new(BACKOFF_BASE, BACKOFF_MAX)
                    .with_metrics(queue_names::TAGGING, &ctx.metrics.workqueues),
                rate: tagging
                    .rate()
                    .map(|(rate, burst)| RateLimiter::new(rate, burst)),
                checksum: tags_checksum(&tagging.tags),
                label,
            }),
            informers: informers.clone(),
            events: informers.node_events(),
        }
    }

    /// Runs until `shutdown` is cancelled; in a dry run, until one pass over the nodes is done.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), ControllersError> {
        let TaggingController {
            inner,
            informers,
            mut events,
        } = self;
        if inner.ctx.cloud.resource_tagger().is_none() {
            return Err(ControllersError::Config(format!(
                "tagging controller does not support {:?} provider",
                inner.ctx.cloud.provider_name()
            )));
        }
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            synced = informers.wait_nodes_synced() => synced?,
        }
        tracing::info!(tags = ?inner.ctx.config.tagging.tags, resources = ?inner.ctx.config.tagging.resources,
            "starting the tagging controller");
        let mut workers = tokio::task::JoinSet::new();
        let count = usize::try_from(inner.ctx.config.tagging.workers)
            .unwrap_or(1)
            .max(1);
        for _ in 0..count {
            workers.spawn(worker(inner.clone(), count));
        }
        if inner.ctx.is_single_pass() {
            for node in inner.store.state() {
                inner.ctx.visit(ObjectKey::node(node.name()));
                inner.enqueue(&node);
            }
            inner.queue.finish_when_idle();
            while workers.join_next().await.is_some() {}
            inner.recorder.flush(EVENT_FLUSH_TIMEOUT).await;
            return Ok(());
        }
        for node in inner.store.state() {
            inner.enqueue(&node);
        }
        loop {
            let event = tokio::select! {
                _ = shutdown.cancelled() => break,
                e = events.recv() => e,
            };
            match event {
                None => break,
                Some(InformerEvent::Applied(node)) => inner.enqueue(&node),
                Some(InformerEvent::Deleted(node)) => inner.enqueue_untag(&node),
                Some(InformerEvent::Resynced) => {
                    for node in inner.store.state() {
                        inner.enqueue(&node);
                    }
                }
            }
        }
        inner.queue.shut_down();
        while workers.join_next().await.is_some() {}
        inner.recorder.flush(EVENT_FLUSH_TIMEOUT).await;
        Ok(())
    }
}

/// Syncs nodes from the queue until it shuts down: one at a time, or with batching up to [`BATCH_SIZE`]
/// (a share of what is queued, so that `workers` split a burst).
async fn worker(inner: Arc<Inner>, workers: usize) {
    let panics = PanicGuard::new(&inner.ctx, ControllerName::Tagging);
    let max = if inner.ctx.config.tagging.batching {
        BATCH_SIZE
    } else {
        1
    };
    while let Some(batch) = inner.queue.next_batch(max, workers).await {
        let label = batch
            .first()
            .map(Work::node)
            .unwrap_or_default()
            .to_string();
        if panics.run(&label, inner.sync_batch(&batch)).await.is_none() {
            // Reported by the guard; the nodes are tried again with backoff.
            for work in &batch {
                inner.queue.add_rate_limited(work.clone(), None);
            }
        }
        for work in &batch {
            inner.queue.done(work);
        }
    }
}

impl Inner {
    fn tagger(&self) -> &dyn ResourceTagger {
        self.ctx
            .cloud
            .resource_tagger()
            .expect("checked when the controller started")
    }

    /// Whether the node's resources lack the configured tags (its tagged label differs).
    fn needs_tags(&self, node: &CachedNode) -> bool {
        node.labels().get(self.label) != Some(self.checksum.as_str())
    }

    fn enqueue(&self, node: &CachedNode) {
        if node.provider_id().is_some() && self.needs_tags(node) {
            self.queue.add(Work::Tag {
                node: node.name().to_string(),
            });
        }
    }

    fn enqueue_untag(&self, node: &CachedNode) {
        if let Some(provider_id) = node.provider_id() {
            self.queue.add(Work::Untag {
                node: node.name().to_string(),
                provider_id: provider_id.to_string(),
            });
        }
    }

    /// Tags and untags the nodes of one batch.
    async fn sync_batch(&self, batch: &[Work]) {
        let config = &self.ctx.config.tagging;
        let mut tag: Vec<(Work, Arc<CachedNode>)> = Vec::new();
        let mut untag: Vec<(Work, Node)> = Vec::new();
        for work in batch {
            match work {
                Work::Tag { node } => match self.store.get(&ObjectRef::new(node)) {
                    Some(cached) if cached.provider_id().is_some() && self.needs_tags(&cached) => {
                        tag.push((work.clone(), cached))
                    }
                    // Deleted, tagged meanwhile, or without a provider ID: nothing to do.
                    _ => self.queue.forget(work),
                },
                Work::Untag { node, provider_id } => {
                    untag.push((work.clone(), gone_node(node, provider_id)))
                }
            }
        }
        if !tag.is_empty() {
            self.wait_for_rate().await;
            let nodes: Vec<Node> = tag.iter().map(|(_, n)| n.to_node()).collect();
            let results = self
                .tagger()
                .tag_nodes(&nodes, &config.resources, &config.tags)
                .await;
            for ((work, cached), result) in tag.iter().zip(results) {
                self.tagged(work, cached, result).await;
            }
        }
        if !untag.is_empty() {
            self.wait_for_rate().await;
            let nodes: Vec<Node> = untag.iter().map(|(_, n)| n.clone()).collect();
            let results = self
                .tagger()
                .untag_nodes(&nodes, &config.resources, &config.tags)
                .await;
            for ((work, _), result) in untag.iter().zip(results) {
                match result {
                    Ok(_) => {
                        tracing::info!(
                            node = work.node(),
                            "removed the tags from the resources of a deleted node"
                        );
                        self.queue.forget(work);
                    }
                    Err(error) => self.failed(work, &error.to_string(), None),
                }
            }
        }
    }

    async fn wait_for_rate(&self) {
        if let Some(rate) = &self.rate {
            rate.acquire().await;
        }
    }

    /// Finishes the tagging of one node: its label on success, a retry or a give-up on failure.
    async fn tagged(&self, work: &Work, cached: &CachedNode, result: CloudResult<TagOutcome>) {
        let name = cached.name();
        match result {
            Ok(TagOutcome::Done) => match self.label_node(name).await {
                Ok(()) => {
                    tracing::info!(node = name, "tagged the node's resources");
                    if cached.labels().get(self.label).is_none()
                        && let Some(created) = cached.creation_timestamp()
                    {
                        let age = k8s_openapi::jiff::Timestamp::now().duration_since(created.0);
                        self.ctx
                            .metrics
                            .tagging_initial_delay
                            .observe(age.as_secs_f64().max(0.0));
                    }
                    self.queue.forget(work);
                }
                Err(error) => self.failed(
                    work,
                    &format!(
                        "couldn't apply label {}={} to node {name}: {error}",
                        self.label, self.checksum
                    ),
                    Some(cached),
                ),
            },
            Ok(TagOutcome::NotTaggable) => {
                tracing::info!(
                    node = name,
                    "the node's resources cannot be tagged; skipping it"
                );
                self.queue.forget(work);
            }
            Err(CloudError::InstanceNotFound) if !self.is_young(cached) => {
                tracing::info!(
                    node = name,
                    "the node's instance does not exist; skipping it"
                );
                self.queue.forget(work);
            }
            Err(CloudError::InstanceNotFound) => self.failed(
                work,
                "the node's instance does not exist yet (the node is younger than five minutes)",
                Some(cached),
            ),
            Err(error) => self.failed(work, &error.to_string(), Some(cached)),
        }
    }

    /// Whether the node is within the grace period in which its resource may not be visible yet.
    fn is_young(&self, node: &CachedNode) -> bool {
        node.creation_timestamp().is_none_or(|created| {
            let age = k8s_openapi::jiff::Timestamp::now().duration_since(created.0);
            age.as_secs_f64() < NEW_NODE_GRACE.as_secs_f64()
        })
    }

    /// Sets the tagged label to the checksum of the configured tags.
    async fn label_node(&self, name: &str) -> Result<(), kube::Error> {
        let patch = json!({"metadata": {"labels": {self.label: self.checksum}}});
        self.api
            .patch(name, &identity::patch_params(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
    }

    /// Retries `work` with backoff (at most [`MAX_RETRIES`] times) and says why.
    fn failed(&self, work: &Work, error: &str, node: Option<&CachedNode>) {
        let instance = match (work, node) {
            (Work::Untag { provider_id, .. }, _) => instance_label(provider_id),
            (Work::Tag { .. }, Some(n)) => instance_label(n.provider_id().unwrap_or_default()),
            (Work::Tag { node }, None) => node.clone(),
        };
        let retries = self.queue.failures(work);
        let (error_type, give_up) = if retries < MAX_RETRIES {
            ("total_errors", false)
        } else {
            ("errors_after_retries_exhausted", true)
        };
        self.ctx
            .metrics
            .tagging_work_item_errors
            .get_or_create(&crate::metrics::TaggingErrorLabels {
                error_type: error_type.to_string(),
                instance_id: instance,
            })
            .inc();
        self.ctx.record_failure(
            ControllerName::Tagging,
            Some(ObjectKey::node(work.node())),
            &error,
        );
        if give_up {
            tracing::error!(
                node = work.node(),
                error,
                retries,
                "tagging failed; giving up after the last retry"
            );
            self.queue.forget(work);
        } else {
            let delay = self.queue.add_rate_limited(work.clone(), None);
            tracing::warn!(node = work.node(), error, retry_in = ?delay, "tagging failed");
        }
        if let (Work::Tag { .. }, Some(node)) = (work, node) {
            self.recorder.publish(
                &object_ref(&node.to_node()),
                EventType::Warning,
                "FailedTagging",
                "TagResources",
                format!("Failed to tag the node's cloud resources: {error}"),
            );
        }
    }
}

/// The Node of a deleted node as the provider needs it to untag: its name and provider ID.
fn gone_node(name: &str, provider_id: &str) -> Node {
    let mut node = Node::default();
    node.metadata.name = Some(name.to_string());
    node.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
        provider_id: Some(provider_id.to_string()),
        ..Default::default()
    });
    node
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_of_the_sorted_pairs() {
        let tags = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        // md5("a=1,b=2"), whatever order the flags gave them in.
        assert_eq!(
            tags_checksum(&tags(&[("b", "2"), ("a", "1")])),
            "9dc867b7f2bf1e40160f90e46628512e"
        );
        assert_ne!(
            tags_checksum(&tags(&[("a", "1")])),
            tags_checksum(&tags(&[("a", "2")]))
        );
    }

    #[test]
    fn instance_of_a_provider_id() {
        assert_eq!(instance_label("aws:///us-east-1a/i-0abc"), "i-0abc");
        assert_eq!(instance_label("i-0abc"), "i-0abc");
    }
}
