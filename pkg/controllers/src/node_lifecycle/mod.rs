//! cloud-node-lifecycle-controller: every `--node-monitor-period`, checks the nodes that are not Ready
//! against the cloud.
//!
//! - Ready nodes lose the `node.cloudprovider.kubernetes.io/shutdown` taint if they have it.
//! - NotReady nodes whose instance is shut down get that taint (`NoSchedule`).
//! - NotReady nodes whose instance no longer exists are deleted (Normal event `DeletingNode`; a failed delete
//!   emits Warning `DeletingNodeFailed`) at a bounded rate: one pass deletes at most
//!   `--node-deletion-max-percent` of all nodes, and never fewer than one; the others wait for later passes,
//!   with a Warning event `DeletionGuardTripped` and a log line saying how many. A mass disappearance (a
//!   broken cloud answer, a pool scaled to zero) is slowed and reported, and still converges: a one-node
//!   cluster loses its node, two of three nodes go in two passes.
//!
//! The cloud is asked with bulk `instance_states` calls (one per chunk of NotReady nodes) when the provider
//! has `InstancesV2`, instead of one or two calls per node.

use std::sync::Arc;
use std::time::Duration;

use cloud_provider::{
    CloudError, CloudProvider, InstanceState, Instances, ObjectKey, TAINT_SHUTDOWN,
};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Taint};
use kube::api::{Api, DeleteParams, Patch, Preconditions};
use kube::runtime::reflector::Store;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::bulk_lookup::{BulkCalls, lookup_each_node};
use crate::cached_node::CachedNode;
use crate::config::Percent;
use crate::context::ControllerContext;
use crate::error::ControllersError;
use crate::events::{EventRecorder, EventType};
use crate::identity;
use crate::informers::SharedInformers;
use crate::names::ControllerName;
use crate::panics::PanicGuard;

/// NotReady nodes per bulk state call.
const STATE_CHUNK: usize = 250;
/// Rounds of concurrent bulk state calls a pass aims at: with 20 ms calls, 2 s for any number of nodes.
const STATE_ROUNDS: usize = 100;
/// Fewest and most concurrent bulk state calls. Each call holds a copy of its chunk of nodes (about 0.7 MB
/// for 250), so the concurrency bounds memory too: small clusters keep two in flight.
const STATE_CONCURRENCY: (usize, usize) = (2, 8);
/// Concurrent node writes (taints, deletions) in one pass.
const WRITE_CONCURRENCY: usize = 16;
/// How long a graceful stop waits for queued events to be written.
const EVENT_FLUSH_TIMEOUT: Duration = Duration::from_secs(2);

/// The effect of the shutdown taint.
const SHUTDOWN_EFFECT: &str = "NoSchedule";

/// Whether `taint` is the shutdown taint: key *and* effect, as upstream matches it (a taint with the same key
/// and another effect is someone else's and is left alone).
fn is_shutdown_taint(taint: &Taint) -> bool {
    taint.key == TAINT_SHUTDOWN && taint.effect == SHUTDOWN_EFFECT
}

/// Whether the node carries the shutdown taint.
pub fn has_shutdown_taint(node: &CachedNode) -> bool {
    node.taints.iter().any(is_shutdown_taint)
}

/// The most nodes one pass may delete out of `total`: `max_percent` percent of them, rounded down, and at
/// least one (a share that rounds to zero would keep a gone node forever).
pub fn deletion_budget(total: usize, max_percent: Percent) -> usize {
    (total.saturating_mul(max_percent.get() as usize) / 100).max(1)
}

/// The merge patch that sets the node's taints to `taints`, guarded by its resourceVersion.
fn taints_patch(node: &CachedNode, taints: Vec<Taint>) -> Value {
    json!({
        "metadata": { "resourceVersion": node.resource_version() },
        "spec": { "taints": if taints.is_empty() { Value::Null } else { json!(taints) } },
    })
}

/// The cloud-node-lifecycle-controller.
pub struct CloudNodeLifecycleController {
    ctx: ControllerContext,
    api: Api<Node>,
    store: Store<CachedNode>,
    informers: SharedInformers,
    recorder: EventRecorder,
}

impl std::fmt::Debug for CloudNodeLifecycleController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CloudNodeLifecycleController")
            .field("period", &self.ctx.config.node_monitor_period)
            .finish_non_exhaustive()
    }
}

/// What one pass did, for logs and tests.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PassSummary {
    /// Nodes seen.
    pub nodes: usize,
    /// NotReady nodes checked against the cloud.
    pub checked: usize,
    /// Nodes deleted.
    pub deleted: usize,
    /// Nodes whose instance is gone but which the guard kept.
    pub guarded: usize,
    /// Shutdown taints added.
    pub tainted: usize,
    /// Shutdown taints removed.
    pub untainted: usize,
    /// Cloud lookups that failed.
    pub errors: usize,
}

impl CloudNodeLifecycleController {
    /// Creates the controller (reads the shared node store).
    pub fn new(ctx: &ControllerContext, informers: &SharedInformers) -> Self {
        let ctx = &ctx.for_controller(ControllerName::CloudNodeLifecycle);
        CloudNodeLifecycleController {
            ctx: ctx.clone(),
            api: Api::all(ctx.client_for(ControllerName::CloudNodeLifecycle)),
            store: informers.nodes(),
            informers: informers.clone(),
            recorder: ctx.recorder(ControllerName::CloudNodeLifecycle),
        }
    }

    /// Runs a pass every `--node-monitor-period` until `shutdown` is cancelled; in a dry run, one pass.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), ControllersError> {
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            synced = self.informers.wait_nodes_synced() => synced?,
        }
        if self.ctx.is_single_pass() {
            let pass = self.monitor_nodes().await;
            tracing::debug!(?pass, "node lifecycle pass finished");
            self.recorder.flush(EVENT_FLUSH_TIMEOUT).await;
            return Ok(());
        }
        let mut ticker = tokio::time::interval(self.ctx.config.node_monitor_period.get());
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let panics = PanicGuard::new(&self.ctx, ControllerName::CloudNodeLifecycle);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = ticker.tick() => {}
            }
            let pass = tokio::select! {
                _ = shutdown.cancelled() => break,
                summary = panics.run("a lifecycle pass", self.monitor_nodes()) => summary,
            };
            // A panicked pass is reported by the guard; the next tick starts a fresh one.
            tracing::debug!(?pass, "node lifecycle pass finished");
        }
        self.recorder.flush(EVENT_FLUSH_TIMEOUT).await;
        Ok(())
    }

    /// One pass over all nodes.
    pub async fn monitor_nodes(&self) -> PassSummary {
        let nodes = self.store.state();
        let mut summary = PassSummary {
            nodes: nodes.len(),
            ..PassSummary::default()
        };
        let mut ready_tainted = Vec::new();
        let mut not_ready = Vec::new();
        for node in nodes.iter() {
            self.ctx.visit(ObjectKey::node(node.name()));
            if node.is_terminating() {
                continue;
            }
            if node.is_ready() {
                if has_shutdown_taint(node) {
                    ready_tainted.push(node.clone());
                }
            } else {
                not_ready.push(node.clone());
            }
        }
        summary.untainted = self.remove_shutdown_taints(&ready_tainted).await;
        if not_ready.is_empty() {
            return summary;
        }
        summary.checked = not_ready.len();
        let states = instance_states(self.ctx.cloud.as_ref(), &not_ready).await;
        let mut missing = Vec::new();
        let mut stopped = Vec::new();
        for (node, state) in not_ready.iter().zip(states) {
            match state {
                Ok(InstanceState::NotFound) => missing.push(node.clone()),
                Ok(InstanceState::Shutdown) => {
                    if !has_shutdown_taint(node) {
                        stopped.push(node.clone());
                    }
                }
                Ok(InstanceState::Running) => {}
                Err(error) => {
                    summary.errors += 1;
                    tracing::warn!(node = %node.name(), %error, "could not check the node's instance; skipping it this pass");
                    self.record_failure(node.name(), &error);
                }
            }
        }
        // The second look at the missing instances overlaps the taint writes: neither waits for the other.
        let (tainted, gone) = tokio::join!(
            self.add_shutdown_taints(&stopped),
            self.confirm_missing(missing)
        );
        summary.tainted = tainted;
        (summary.deleted, summary.guarded) = self.delete_if_allowed(&gone, nodes.len()).await;
        summary
    }

    /// Deletes the nodes of `gone` (of `total` nodes), at most [`deletion_budget`] of them (by name); the
    /// others wait for later passes, reported. Returns how many were deleted and how many wait.
    async fn delete_if_allowed(&self, gone: &[Arc<CachedNode>], total: usize) -> (usize, usize) {
        let pct = self.ctx.config.node_deletion_max_percent;
        let budget = deletion_budget(total, pct);
        if gone.len() <= budget {
            return (self.delete_nodes(gone).await, 0);
        }
        let mut gone: Vec<Arc<CachedNode>> = gone.to_vec();
        gone.sort_by(|a, b| a.name().cmp(b.name()));
        let (now, later) = gone.split_at(budget);
        self.ctx.metrics.node_lifecycle_deletion_guard_trips.inc();
        let message = format!(
            "{} of {} nodes have instances the cloud reports gone: deleting {} this pass (at most {}% of the \
             nodes per pass, --node-deletion-max-percent), the other {} in later passes",
            gone.len(),
            total,
            now.len(),
            pct,
            later.len()
        );
        tracing::warn!(
            candidates = gone.len(),
            nodes = total,
            max_percent = pct.get(),
            budget,
            waiting = ?later.iter().take(10).map(|n| n.name()).collect::<Vec<_>>(),
            "node deletion rate limited: {message}"
        );
        if let Some(first) = later.first() {
            self.record_failure(first.name(), &message);
            self.recorder.publish(
                &first.object_reference(),
                EventType::Warning,
                "DeletionGuardTripped",
                "DeleteNode",
                message,
            );
        }
        (self.delete_nodes(now).await, later.len())
    }

    /// The nodes of `missing` (their instances not found this pass) to delete: those past
    /// `--instance-exists-grace-period` since their creation whose instances a second lookup (one bulk
    /// call) does not find either. A cloud that misses an instance for a moment, or does not list a
    /// just-launched one yet, costs no Node.
    async fn confirm_missing(&self, missing: Vec<Arc<CachedNode>>) -> Vec<Arc<CachedNode>> {
        let grace = self.ctx.config.instance_exists_grace_period;
        let (young, candidates): (Vec<_>, Vec<_>) = missing
            .into_iter()
            .partition(|node| node_age(node).is_some_and(|age| age < grace));
        for node in &young {
            tracing::info!(node = %node.name(), ?grace,
                "instance not found, but the node is within --instance-exists-grace-period; keeping it");
        }
        if candidates.is_empty() {
            return candidates;
        }
        let second_look = instance_states(self.ctx.cloud.as_ref(), &candidates).await;
        candidates
            .into_iter()
            .zip(second_look)
            .filter_map(|(node, state)| match state {
                Ok(InstanceState::NotFound) => Some(node),
                Ok(_) => {
                    tracing::info!(node = %node.name(), "instance found on a second look; keeping the node");
                    None
                }
                Err(error) => {
                    tracing::warn!(node = %node.name(), %error,
                        "could not look at the node's instance again; keeping it this pass");
                    self.record_failure(node.name(), &error);
                    None
                }
            })
            .collect()
    }

    /// In a dry run, reports that a step of the pass failed for node `name`.
    fn record_failure(&self, name: &str, error: &dyn std::fmt::Display) {
        self.ctx.record_failure(
            ControllerName::CloudNodeLifecycle,
            Some(ObjectKey::node(name)),
            error,
        );
    }

    async fn remove_shutdown_taints(&self, nodes: &[Arc<CachedNode>]) -> usize {
        let writes = nodes.iter().cloned().map(|node| async move {
            let remaining: Vec<Taint> = node
                .taints
                .iter()
                .filter(|t| !is_shutdown_taint(t))
                .cloned()
                .collect();
            self.patch_taints(&node, remaining, "remove the shutdown taint")
                .await
        });
        count_successes(writes).await
    }

    async fn add_shutdown_taints(&self, nodes: &[Arc<CachedNode>]) -> usize {
        let writes = nodes.iter().cloned().map(|node| async move {
            let mut all = node.taints.to_vec();
            all.push(Taint {
                key: TAINT_SHUTDOWN.to_string(),
                effect: SHUTDOWN_EFFECT.to_string(),
                value: None,
                time_added: None,
            });
            self.patch_taints(&node, all, "add the shutdown taint")
                .await
        });
        count_successes(writes).await
    }

    async fn patch_taints(&self, node: &CachedNode, taints: Vec<Taint>, what: &str) -> bool {
        let name = node.name();
        let patch = taints_patch(node, taints);
        match self
            .api
            .patch(name, &identity::patch_params(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                tracing::info!(node = %name, "{what}: done");
                true
            }
            Err(error) => {
                tracing::warn!(node = %name, %error, "could not {what}; next pass retries");
                self.record_failure(name, &format!("could not {what}: {error}"));
                false
            }
        }
    }

    async fn delete_nodes(&self, nodes: &[Arc<CachedNode>]) -> usize {
        let deletes = nodes
            .iter()
            .cloned()
            .map(|node| async move { self.delete_node(&node).await });
        count_successes(deletes).await
    }

    async fn delete_node(&self, node: &CachedNode) -> bool {
        let name = node.name();
        let reference = node.object_reference();
        tracing::info!(node = %name, "deleting node since it is no longer present in the cloud provider");
        self.recorder.publish(
            &reference,
            EventType::Normal,
            "DeletingNode",
            "DeleteNode",
            format!("Deleting node {name} because it does not exist in the cloud provider"),
        );
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: node.uid().map(str::to_string),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match self.api.delete(name, &params).await {
            Ok(_) => {
                self.ctx.metrics.node_lifecycle_nodes_deleted.inc();
                true
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {
                tracing::debug!(node = %name, "node already gone");
                false
            }
            Err(error) => {
                tracing::warn!(node = %name, %error, "unable to delete node");
                self.record_failure(name, &format!("could not delete the node: {error}"));
                self.recorder.publish(
                    &reference,
                    EventType::Warning,
                    "DeletingNodeFailed",
                    "DeleteNode",
                    format!("Error deleting node {name}: {error}"),
                );
                false
            }
        }
    }
}

/// How long ago `node` was created, when it says (zero when its creation time is ahead of this clock).
fn node_age(node: &CachedNode) -> Option<Duration> {
    let created = node.creation_timestamp()?;
    let age = k8s_openapi::jiff::Timestamp::now().duration_since(created.0);
    Some(Duration::try_from(age).unwrap_or(Duration::ZERO))
}

/// Runs the writes with bounded concurrency and counts the successful ones. The writes are created
/// lazily, as slots free up: a request future is large, and a pass may write thousands of nodes.
async fn count_successes<F>(writes: impl Iterator<Item = F>) -> usize
where
    F: std::future::Future<Output = bool>,
{
    futures::stream::iter(writes)
        .buffer_unordered(WRITE_CONCURRENCY)
        .filter(|ok| futures::future::ready(*ok))
        .count()
        .await
}

/// The cloud state of each node, in input order: bulk calls with `InstancesV2`, per-node v1 calls
/// otherwise.
pub async fn instance_states(
    cloud: &dyn CloudProvider,
    nodes: &[Arc<CachedNode>],
) -> Vec<Result<InstanceState, CloudError>> {
    let calls = BulkCalls {
        what: "state",
        nodes_per_call: STATE_CHUNK,
        concurrent_calls: state_concurrency(nodes.len().div_ceil(STATE_CHUNK)),
    };
    lookup_each_node(
        cloud,
        nodes,
        calls,
        |v2, _, owned| async move { v2.instance_states(&owned).await },
        move |v1, node| async move { state_v1(cloud, v1, &node).await },
    )
    .await
}

/// Concurrent bulk state calls for `chunks` chunks: enough to finish in about [`STATE_ROUNDS`] rounds
/// (100,000 nodes: 400 chunks, four at a time), within [`STATE_CONCURRENCY`].
fn state_concurrency(chunks: usize) -> usize {
    let (fewest, most) = STATE_CONCURRENCY;
    chunks.div_ceil(STATE_ROUNDS).clamp(fewest, most)
}

async fn state_v1(
    cloud: &dyn CloudProvider,
    v1: &dyn Instances,
    node: &CachedNode,
) -> Result<InstanceState, CloudError> {
    let provider_id = match node.provider_id() {
        Some(id) => id.to_string(),
        None => match v1.instance_id(node.name()).await {
            Ok(id) if id.contains("://") => id,
            Ok(id) => format!("{}://{}", cloud.provider_name(), id),
            Err(CloudError::InstanceNotFound) => return Ok(InstanceState::NotFound),
            Err(e) => return Err(e),
        },
    };
    if !v1.instance_exists_by_provider_id(&provider_id).await? {
        return Ok(InstanceState::NotFound);
    }
    match v1.instance_shutdown_by_provider_id(&provider_id).await {
        Ok(true) => Ok(InstanceState::Shutdown),
        Ok(false) => Ok(InstanceState::Running),
        // A provider that cannot tell shutdown instances apart: running, as upstream treats it.
        Err(e) if e.is_not_implemented() => Ok(InstanceState::Running),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeCondition, NodeSpec, NodeStatus};

    fn pct(value: u32) -> Percent {
        Percent::new(value).unwrap()
    }

    #[test]
    fn bulk_state_calls_grow_with_the_pass_within_bounds() {
        assert_eq!(state_concurrency(1), 2);
        assert_eq!(state_concurrency(20), 2);
        assert_eq!(state_concurrency(400), 4);
        assert_eq!(state_concurrency(1_000), 8);
        assert_eq!(state_concurrency(100_000), 8);
    }

    #[test]
    fn deletion_budget_is_a_share_and_never_zero() {
        assert_eq!(deletion_budget(10, pct(50)), 5);
        assert_eq!(
            deletion_budget(1, pct(50)),
            1,
            "a one-node cluster loses its node"
        );
        assert_eq!(deletion_budget(3, pct(50)), 1);
        assert_eq!(
            deletion_budget(10, pct(0)),
            1,
            "the slowest rate: one node a pass"
        );
        assert_eq!(deletion_budget(10, pct(100)), 10);
        assert_eq!(deletion_budget(1000, pct(33)), 330);
        assert_eq!(deletion_budget(0, pct(50)), 1);
        // 2 of 3 gone at 50%: one this pass (of 3), the other the next (of 2).
        assert_eq!(deletion_budget(3, pct(50)) + deletion_budget(2, pct(50)), 2);
    }

    fn node(ready: Option<&str>, taints: Vec<Taint>) -> CachedNode {
        let mut n = Node::default();
        n.metadata.resource_version = Some("9".into());
        n.spec = Some(NodeSpec {
            taints: Some(taints),
            ..NodeSpec::default()
        });
        n.status = Some(NodeStatus {
            conditions: ready.map(|s| {
                vec![NodeCondition {
                    type_: "Ready".into(),
                    status: s.into(),
                    ..NodeCondition::default()
                }]
            }),
            ..NodeStatus::default()
        });
        CachedNode::from(n)
    }

    #[test]
    fn readiness_and_taints() {
        let shutdown = Taint {
            key: TAINT_SHUTDOWN.into(),
            effect: "NoSchedule".into(),
            ..Taint::default()
        };
        assert!(node(Some("True"), vec![]).is_ready());
        assert!(!node(Some("False"), vec![]).is_ready());
        assert!(!node(Some("Unknown"), vec![]).is_ready());
        assert!(!node(None, vec![]).is_ready());
        let n = node(Some("True"), vec![shutdown.clone()]);
        assert!(has_shutdown_taint(&n));
        let patch = taints_patch(&n, vec![]);
        assert!(patch["spec"]["taints"].is_null());
        assert_eq!(patch["metadata"]["resourceVersion"], "9");
        let patch = taints_patch(&n, vec![shutdown]);
        assert_eq!(patch["spec"]["taints"][0]["key"], TAINT_SHUTDOWN);
        assert_eq!(patch["spec"]["taints"][0]["effect"], "NoSchedule");
    }
}
