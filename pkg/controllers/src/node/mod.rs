//! cloud-node-controller: initializes nodes registered with the `node.cloudprovider.kubernetes.io/uninitialized`
//! taint from the cloud, reconciles the labels of initialized nodes, and keeps node addresses current.
//!
//! Initialization costs one API write per node on the critical path: a single merge patch with a
//! resourceVersion precondition sets `spec.providerID` (only when empty), the instance-type/zone/region labels
//! (GA and beta keys) and the provider's additional labels, and removes the uninitialized taint. When the
//! cloud's addresses differ from the node's, `status.addresses` is first replaced whole through the status
//! subresource. The taint is removed only when everything else succeeded: a provided-node-ip that the cloud
//! does not know keeps the node tainted (with a Warning event), as does an error or missing metadata. Nodes
//! that arrive together are looked up with one bulk metadata call per batch; `--concurrent-node-syncs`
//! workers process batches; failures are retried per node with exponential backoff (a cloud `Retry` delay is
//! honoured). Every `--node-status-update-frequency` the addresses of all initialized nodes are refreshed.

pub mod addresses;
pub mod labels;
pub mod metadata;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use cloud_provider::{CloudError, InstanceMetadata, ObjectKey, TAINT_UNINITIALIZED};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{NodeAddress, Taint};
use kube::api::{Api, Patch};
use kube::runtime::reflector::{ObjectRef, Store};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::cached_node::CachedNode;
use crate::context::ControllerContext;
use crate::error::ControllersError;
use crate::events::{EventRecorder, EventType};
use crate::identity;
use crate::informers::{InformerEvent, InformerEvents, SharedInformers};
use crate::names::ControllerName;
use crate::panics::PanicGuard;
use crate::wire_node::WireNode;
use crate::workqueue::WorkQueue;
use crate::workqueue_metrics::queue_names;

use self::addresses::{AddressError, desired_addresses, validate_provided_ips};
use self::labels::{initialization_labels, reconciled_labels};

/// Most nodes initialized with one bulk metadata call.
pub const MAX_BATCH: usize = 100;
/// Nodes per bulk metadata call of the periodic address sync.
const SYNC_CHUNK: usize = 250;
/// Concurrent bulk calls of the periodic address sync.
const SYNC_CONCURRENCY: usize = 2;
/// Attempts of one initialization when the node changed underneath (409 Conflict).
const CONFLICT_ATTEMPTS: usize = 3;
/// How long a conflicting address write waits for the watch to deliver the node's newer version.
const CONFLICT_REREAD_WAIT: Duration = Duration::from_secs(2);
/// How often it looks.
const CONFLICT_REREAD_POLL: Duration = Duration::from_millis(20);
/// Per-node retry backoff (upstream: 5 ms doubling up to 1000 s).
const BACKOFF_BASE: Duration = Duration::from_millis(5);
const BACKOFF_MAX: Duration = Duration::from_secs(1000);
/// How long a graceful stop waits for queued events to be written.
const EVENT_FLUSH_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether the node carries the uninitialized taint (matched by key).
pub fn is_uninitialized(node: &CachedNode) -> bool {
    node.has_taint(TAINT_UNINITIALIZED)
}

/// Why one node could not be synced.
#[derive(Debug, thiserror::Error)]
enum SyncError {
    #[error("cloud lookup failed: {0}")]
    Cloud(#[from] CloudError),
    #[error("the cloud provider returned no instance metadata")]
    NoMetadata,
    #[error(transparent)]
    Address(#[from] AddressError),
    #[error("API request failed: {0}")]
    Kube(#[from] kube::Error),
}

impl SyncError {
    fn retry_after(&self) -> Option<Duration> {
        match self {
            SyncError::Cloud(e) => e.retry_after(),
            _ => None,
        }
    }

    fn is_conflict(&self) -> bool {
        matches!(self, SyncError::Kube(kube::Error::Api(s)) if s.code == 409)
    }
}

/// The merge patch that finishes initialization: providerID, labels and the taints without the
/// uninitialized one, guarded by `resource_version`.
pub fn initialization_patch(
    node: &CachedNode,
    resource_version: Option<&str>,
    metadata: &InstanceMetadata,
) -> Value {
    let labels = initialization_labels(node, metadata);
    let remaining: Vec<&Taint> = node
        .taints
        .iter()
        .filter(|t| t.key != TAINT_UNINITIALIZED)
        .collect();
    let mut meta = serde_json::Map::new();
    if let Some(rv) = resource_version {
        meta.insert("resourceVersion".into(), json!(rv));
    }
    if !labels.is_empty() {
        meta.insert("labels".into(), json!(labels));
    }
    let mut spec = serde_json::Map::new();
    spec.insert(
        "taints".into(),
        if remaining.is_empty() {
            Value::Null
        } else {
            json!(remaining)
        },
    );
    if node.provider_id().is_none() && !metadata.provider_id.is_empty() {
        spec.insert("providerID".into(), json!(metadata.provider_id));
    }
    json!({ "metadata": meta, "spec": spec })
}

/// Resource versions of nodes this controller has just replaced by writing: a store copy with one of these
/// versions is stale and is not worth a sync (the watch delivers the newer copy).
#[derive(Default)]
struct StaleVersions {
    by_node: Mutex<HashMap<String, Vec<String>>>,
}

impl StaleVersions {
    fn record(&self, node: &str, versions: impl IntoIterator<Item = Option<String>>) {
        let mut map = self.by_node.lock();
        let entry = map.entry(node.to_string()).or_default();
        entry.extend(versions.into_iter().flatten());
        if entry.len() > 8 {
            let excess = entry.len() - 8;
            entry.drain(..excess);
        }
    }

    fn is_stale(&self, node: &CachedNode) -> bool {
        let Some(rv) = node.resource_version() else {
            return false;
        };
        self.by_node
            .lock()
            .get(node.name())
            .is_some_and(|v| v.iter().any(|known| known == rv))
    }

    /// Called for every version the watch delivers: a fresh version ends the bookkeeping for the node.
    fn observe(&self, node: &CachedNode) -> bool {
        let stale = self.is_stale(node);
        if !stale {
            self.by_node.lock().remove(node.name());
        }
        stale
    }

    fn forget(&self, name: &str) {
        self.by_node.lock().remove(name);
    }
}

struct Inner {
    ctx: ControllerContext,
    api: Api<WireNode>,
    store: Store<CachedNode>,
    recorder: EventRecorder,
    queue: WorkQueue<String>,
    stale: StaleVersions,
}

/// The cloud-node-controller.
pub struct CloudNodeController {
    inner: Arc<Inner>,
    informers: SharedInformers,
    events: InformerEvents<CachedNode>,
}

impl std::fmt::Debug for CloudNodeController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CloudNodeController")
            .field("queue", &self.inner.queue)
            .finish_non_exhaustive()
    }
}

impl CloudNodeController {
    /// Creates the controller and subscribes to the node informer (before it starts).
    pub fn new(ctx: &ControllerContext, informers: &SharedInformers) -> Self {
        let ctx = &ctx.for_controller(ControllerName::CloudNode);
        let inner = Arc::new(Inner {
            ctx: ctx.clone(),
            api: Api::all(ctx.client_for(ControllerName::CloudNode)),
            store: informers.nodes(),
            recorder: ctx.recorder(ControllerName::CloudNode),
            queue: WorkQueue::new(BACKOFF_BASE, BACKOFF_MAX)
                .with_metrics(queue_names::NODES, &ctx.metrics.workqueues),
            stale: StaleVersions::default(),
        });
        CloudNodeController {
            inner,
            informers: informers.clone(),
            events: informers.node_events(),
        }
    }

    /// Runs until `shutdown` is cancelled; in a dry run, until one pass over the nodes is done.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), ControllersError> {
        let CloudNodeController {
            inner,
            informers,
            events,
        } = self;
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            synced = informers.wait_nodes_synced() => synced?,
        }
        let workers = inner.ctx.config.concurrent_node_syncs.get();
        tracing::info!(
            workers,
            nodes = inner.store.len(),
            "node cache synced; starting workers"
        );
        let single_pass = inner.ctx.is_single_pass();
        let mut tasks = tokio::task::JoinSet::new();
        if single_pass {
            for node in inner.store.state() {
                inner.ctx.visit(ObjectKey::node(node.name()));
                if needs_sync(&node) {
                    inner.queue.add(node.name().to_string());
                }
            }
            inner.queue.finish_when_idle();
        } else {
            tasks.spawn(pump(inner.clone(), events, shutdown.clone()));
            tasks.spawn(address_sync_loop(inner.clone(), shutdown.clone()));
        }
        for _ in 0..workers {
            tasks.spawn(worker(inner.clone(), workers));
        }
        if single_pass {
            if inner.ctx.config.node_status_update_frequency.is_some() {
                inner.sync_addresses().await;
            }
        } else {
            shutdown.cancelled().await;
            inner.queue.shut_down();
        }
        while tasks.join_next().await.is_some() {}
        inner.recorder.flush(EVENT_FLUSH_TIMEOUT).await;
        Ok(())
    }
}

/// Takes batches of nodes from the queue until it shuts down.
async fn worker(inner: Arc<Inner>, workers: usize) {
    let panics = PanicGuard::new(&inner.ctx, ControllerName::CloudNode);
    while let Some(batch) = inner.queue.next_batch(MAX_BATCH, workers).await {
        let object = batch.join(",");
        if panics
            .run(&object, inner.process_batch(&batch))
            .await
            .is_none()
        {
            // Reported by the guard; every node of the batch is tried again with backoff.
            for name in &batch {
                inner.queue.add_rate_limited(name.clone(), None);
                inner.queue.done(name);
            }
        }
    }
}

/// Whether a node needs the worker's attention: tainted, or labels to reconcile.
fn needs_sync(node: &CachedNode) -> bool {
    !node.is_terminating() && (is_uninitialized(node) || !reconciled_labels(node).is_empty())
}

async fn pump(
    inner: Arc<Inner>,
    mut events: InformerEvents<CachedNode>,
    shutdown: CancellationToken,
) {
    loop {
        let event = tokio::select! {
            _ = shutdown.cancelled() => return,
            e = events.recv() => e,
        };
        match event {
            None => return,
            Some(InformerEvent::Applied(node)) => {
                tracing::trace!(node = %node.name(), rv = ?node.resource_version(), "node changed");
                if !inner.stale.observe(&node) && needs_sync(&node) {
                    inner.queue.add(node.name().to_string());
                }
            }
            Some(InformerEvent::Deleted(node)) => {
                let name = node.name().to_string();
                inner.stale.forget(&name);
                inner.queue.forget(&name);
            }
            Some(InformerEvent::Resynced) => {
                for node in inner.store.state() {
                    if needs_sync(&node) {
                        inner.queue.add(node.name().to_string());
                    }
                }
            }
        }
    }
}

async fn address_sync_loop(inner: Arc<Inner>, shutdown: CancellationToken) {
    let Some(period) = inner.ctx.config.node_status_update_frequency else {
        return;
    };
    let mut ticker = tokio::time::interval(period.get());
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = inner.sync_addresses() => {}
        }
    }
}

impl Inner {
    /// In a dry run, reports that the sync of node `name` failed.
    fn record_failure(&self, name: &str, error: &dyn std::fmt::Display) {
        self.ctx.record_failure(
            ControllerName::CloudNode,
            Some(ObjectKey::node(name)),
            error,
        );
    }

    fn finish(&self, name: &str, result: Result<(), SyncError>) {
        match result {
            Ok(()) => self.queue.forget(&name.to_string()),
            Err(error) => {
                let delay = self
                    .queue
                    .add_rate_limited(name.to_string(), error.retry_after());
                tracing::warn!(node = name, %error, retry_in = ?delay, "failed to sync node");
                self.record_failure(name, &error);
            }
        }
    }

    async fn process_batch(&self, names: &[String]) {
        let mut tainted = Vec::new();
        for name in names {
            let Some(node) = self.store.get(&ObjectRef::new(name)) else {
                self.queue.forget(name);
                continue;
            };
            if node.is_terminating() || self.stale.is_stale(&node) {
                continue;
            }
            if is_uninitialized(&node) {
                tainted.push(node);
            } else {
                let result = self.reconcile_labels(&node).await;
                self.finish(name, result);
            }
        }
        if !tainted.is_empty() {
            let results = metadata::lookup(self.ctx.cloud.as_ref(), &tainted).await;
            for (node, result) in tainted.iter().zip(results) {
                let outcome = match result {
                    Ok(Some(md)) => self.initialize(node, &md).await,
                    Ok(None) => Err(SyncError::NoMetadata),
                    Err(e) => Err(SyncError::Cloud(e)),
                };
                self.finish(node.name(), outcome);
            }
        }
        for name in names {
            self.queue.done(name);
        }
    }

    async fn reconcile_labels(&self, node: &CachedNode) -> Result<(), SyncError> {
        let labels: BTreeMap<String, String> = reconciled_labels(node);
        if labels.is_empty() {
            return Ok(());
        }
        let name = node.name();
        let patch = json!({
            "metadata": {
                "resourceVersion": node.resource_version(),
                "labels": labels,
            }
        });
        let updated = self
            .api
            .patch(name, &identity::patch_params(), &Patch::Merge(&patch))
            .await?;
        self.stale
            .record(name, [node.resource_version().map(str::to_string)]);
        tracing::debug!(node = %name, rv = ?updated.metadata.resource_version, "reconciled node labels");
        Ok(())
    }

    async fn initialize(
        &self,
        node: &Arc<CachedNode>,
        metadata: &InstanceMetadata,
    ) -> Result<(), SyncError> {
        let name = node.name();
        let mut current: Arc<CachedNode> = node.clone();
        let mut attempt = 0;
        loop {
            attempt += 1;
            if !is_uninitialized(&current) || current.is_terminating() {
                return Ok(());
            }
            match self.try_initialize(&current, metadata).await {
                Err(e) if e.is_conflict() && attempt < CONFLICT_ATTEMPTS => {
                    tracing::debug!(node = %name, "node changed during initialization; reading it again");
                    current = Arc::new(CachedNode::from(self.api.get(name).await?));
                }
                other => return other,
            }
        }
    }

    async fn try_initialize(
        &self,
        node: &CachedNode,
        metadata: &InstanceMetadata,
    ) -> Result<(), SyncError> {
        let name = node.name();
        let addresses = match validate_provided_ips(node, &metadata.node_addresses)
            .and_then(|()| desired_addresses(node, &metadata.node_addresses))
        {
            Ok(a) => a,
            Err(e) => {
                self.recorder.publish(
                    &node.object_reference(),
                    EventType::Warning,
                    "ProvidedNodeIPMismatch",
                    "InitializeNode",
                    format!("Node stays uninitialized: {e}"),
                );
                return Err(e.into());
            }
        };
        let mut written = vec![node.resource_version().map(str::to_string)];
        let mut resource_version = node.resource_version().map(str::to_string);
        if let Some(addresses) = addresses {
            let patch = json!({
                "metadata": { "resourceVersion": resource_version },
                "status": { "addresses": addresses },
            });
            match self
                .api
                .patch_status(name, &identity::patch_params(), &Patch::Merge(&patch))
                .await
            {
                Ok(updated) => {
                    resource_version = updated.metadata.resource_version.clone();
                    written.push(resource_version.clone());
                }
                // A conflict means a newer node: the caller reads it again and starts over.
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    return Err(kube::Error::Api(status).into());
                }
                // As upstream, addresses never hold up initialization: the periodic sync retries them.
                Err(error) => {
                    tracing::warn!(node = %name, %error,
                        "could not write the cloud's addresses; initializing the node anyway");
                }
            }
        }
        let patch = initialization_patch(node, resource_version.as_deref(), metadata);
        self.api
            .patch(name, &identity::patch_params(), &Patch::Merge(&patch))
            .await?;
        // Only after success: a failed write leaves the store copy current, and the retry must sync it.
        self.stale.record(name, written);
        self.recorder.publish(
            &node.object_reference(),
            EventType::Normal,
            "Synced",
            "InitializeNode",
            "Node synced successfully".to_string(),
        );
        if let Some(created) = node.creation_timestamp() {
            let age = k8s_openapi::jiff::Timestamp::now()
                .duration_since(created.0)
                .as_secs_f64()
                .max(0.0);
            self.ctx.metrics.node_taint_removal_delay.observe(age);
            self.ctx.metrics.node_initial_sync_delay.observe(age);
        }
        tracing::debug!(node = %name, provider_id = %metadata.provider_id, "node initialized");
        Ok(())
    }

    /// Refreshes `status.addresses` of every initialized node from the cloud.
    async fn sync_addresses(&self) {
        let nodes: Vec<Arc<CachedNode>> = self
            .store
            .state()
            .into_iter()
            .filter(|n| !is_uninitialized(n) && !n.is_terminating())
            .collect();
        if nodes.is_empty() {
            return;
        }
        let started = std::time::Instant::now();
        let chunks: Vec<_> = nodes
            .chunks(SYNC_CHUNK)
            .map(|chunk| self.sync_chunk(chunk))
            .collect();
        futures::stream::iter(chunks)
            .buffer_unordered(SYNC_CONCURRENCY)
            .collect::<Vec<()>>()
            .await;
        tracing::debug!(nodes = nodes.len(), took = ?started.elapsed(), "node address sync finished");
    }

    /// Replaces `status.addresses` of `node` with what the cloud's `addresses` make of it, guarded by the
    /// node's resourceVersion; a conflict (the kubelet wrote meanwhile) is retried once on the newer
    /// version the watch delivers.
    async fn write_addresses(
        &self,
        node: &CachedNode,
        addresses: &[NodeAddress],
    ) -> Result<(), SyncError> {
        let mut current = node.clone();
        for attempt in 1..=2 {
            let Some(desired) = desired_addresses(&current, addresses)? else {
                return Ok(());
            };
            let patch = json!({
                "metadata": { "resourceVersion": current.resource_version() },
                "status": { "addresses": desired },
            });
            match self
                .api
                .patch_status(
                    current.name(),
                    &identity::patch_params(),
                    &Patch::Merge(&patch),
                )
                .await
            {
                Err(kube::Error::Api(status)) if status.code == 409 && attempt == 1 => {
                    match self.newer_version(&current).await {
                        Some(newer) => current = newer,
                        None => return Err(SyncError::from(kube::Error::Api(status))),
                    }
                }
                other => return other.map(drop).map_err(SyncError::from),
            }
        }
        Ok(())
    }

    /// The node as the watch delivers it after `node`'s version (the one a write conflicted with), waiting
    /// at most [`CONFLICT_REREAD_WAIT`]. Reading through the watch keeps the controller to the verbs its
    /// role grants (no `get` on nodes).
    async fn newer_version(&self, node: &CachedNode) -> Option<CachedNode> {
        let deadline = tokio::time::Instant::now() + CONFLICT_REREAD_WAIT;
        loop {
            if let Some(latest) = self.store.get(&ObjectRef::new(node.name()))
                && latest.resource_version() != node.resource_version()
            {
                return Some((*latest).clone());
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(CONFLICT_REREAD_POLL).await;
        }
    }

    async fn sync_chunk(&self, chunk: &[Arc<CachedNode>]) {
        let results = metadata::lookup_addresses(self.ctx.cloud.as_ref(), chunk).await;
        for (node, result) in chunk.iter().zip(results) {
            let name = node.name();
            if !reconciled_labels(node.as_ref()).is_empty() {
                self.queue.add(name.to_string());
            }
            let cloud_addresses = match result {
                Ok(Some(addresses)) => addresses,
                Ok(None) => {
                    tracing::debug!(node = %name, "no instance metadata; addresses left as they are");
                    continue;
                }
                Err(e) if e.is_instance_not_found() => {
                    tracing::debug!(node = %name, "instance not found; addresses left as they are");
                    continue;
                }
                Err(error) => {
                    tracing::warn!(node = %name, %error, "could not get node addresses from the cloud");
                    self.record_failure(name, &error);
                    continue;
                }
            };
            // The cloud answered after a while: compare with, and guard the write by, the node as it is now.
            let Some(node) = self.store.get(&ObjectRef::new(name)) else {
                continue;
            };
            match desired_addresses(&node, &cloud_addresses) {
                Ok(None) => {}
                Ok(Some(_)) => match self.write_addresses(&node, &cloud_addresses).await {
                    Ok(()) => tracing::info!(node = %name, "updated node addresses"),
                    Err(error) => {
                        tracing::warn!(node = %name, %error, "could not update node addresses; next sync retries");
                        self.record_failure(name, &error);
                    }
                },
                Err(e) => {
                    tracing::warn!(node = %name, error = %e, "node addresses not updated");
                    self.record_failure(name, &e);
                    self.recorder.publish(
                        &node.object_reference(),
                        EventType::Warning,
                        "ProvidedNodeIPMismatch",
                        "UpdateNodeAddresses",
                        format!("Node addresses not updated: {e}"),
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Node, NodeSpec};

    fn tainted_node(extra_taint: bool, provider_id: Option<&str>) -> CachedNode {
        let mut taints = vec![Taint {
            key: TAINT_UNINITIALIZED.into(),
            value: Some("true".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        }];
        if extra_taint {
            taints.push(Taint {
                key: "dedicated".into(),
                value: Some("gpu".into()),
                effect: "NoExecute".into(),
                time_added: None,
            });
        }
        let mut n = Node::default();
        n.metadata.name = Some("n1".into());
        n.spec = Some(NodeSpec {
            taints: Some(taints),
            provider_id: provider_id.map(str::to_string),
            ..NodeSpec::default()
        });
        CachedNode::from(n)
    }

    fn metadata() -> InstanceMetadata {
        InstanceMetadata {
            provider_id: "fake://n1".into(),
            instance_type: "small".into(),
            zone: "z1".into(),
            region: "r1".into(),
            ..InstanceMetadata::default()
        }
    }

    #[test]
    fn patch_sets_provider_id_labels_and_removes_only_the_uninitialized_taint() {
        let node = tainted_node(true, None);
        assert!(is_uninitialized(&node));
        let patch = initialization_patch(&node, Some("42"), &metadata());
        assert_eq!(patch["metadata"]["resourceVersion"], "42");
        assert_eq!(patch["spec"]["providerID"], "fake://n1");
        assert_eq!(
            patch["metadata"]["labels"]["topology.kubernetes.io/zone"],
            "z1"
        );
        assert_eq!(
            patch["metadata"]["labels"]["failure-domain.beta.kubernetes.io/zone"],
            "z1"
        );
        assert_eq!(
            patch["metadata"]["labels"]["beta.kubernetes.io/instance-type"],
            "small"
        );
        let taints = patch["spec"]["taints"].as_array().unwrap();
        assert_eq!(taints.len(), 1);
        assert_eq!(taints[0]["key"], "dedicated");
    }

    #[test]
    fn patch_keeps_an_existing_provider_id_and_clears_the_last_taint() {
        let node = tainted_node(false, Some("fake://other"));
        let patch = initialization_patch(&node, None, &metadata());
        assert!(patch["spec"].get("providerID").is_none());
        assert!(patch["spec"]["taints"].is_null());
        assert!(patch["metadata"].get("resourceVersion").is_none());
    }

    #[test]
    fn stale_versions_are_recognized_until_a_fresh_one_arrives() {
        let at_version = |rv: &str| {
            let mut n = Node::default();
            n.metadata.name = Some("n1".into());
            n.metadata.resource_version = Some(rv.into());
            CachedNode::from(n)
        };
        let stale = StaleVersions::default();
        stale.record("n1", [Some("5".to_string()), Some("6".to_string())]);
        assert!(stale.is_stale(&at_version("5")));
        assert!(stale.observe(&at_version("5")));
        assert!(!stale.observe(&at_version("7")));
        assert!(
            !stale.is_stale(&at_version("5")),
            "bookkeeping ends with the fresh version"
        );
    }
}
