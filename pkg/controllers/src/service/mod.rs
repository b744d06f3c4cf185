//! service-lb-controller: cloud load balancers for `type: LoadBalancer` Services.
//!
//! The controller keeps one cloud load balancer per Service that wants one (`type: LoadBalancer` without
//! `spec.loadBalancerClass`):
//!
//! - **Ensure**: the finalizer `service.kubernetes.io/load-balancer-cleanup` is added (through
//!   `services/status`) *before* the cloud is called, so a Service can never disappear while its load
//!   balancer still exists; then `EnsureLoadBalancer` with the current load-balancer nodes, and the ingress
//!   is written to `services/status` only when it changed. Events `EnsuringLoadBalancer`,
//!   `EnsuredLoadBalancer`, `SyncLoadBalancerFailed`, `UnAvailableLoadBalancer`.
//! - **Delete**: a Service being deleted, changed away from `type: LoadBalancer`, or given a class gets its
//!   load balancer deleted, its status cleared and the finalizer removed. A Service recreated under the same
//!   name (a new UID) first has the old Service's load balancer deleted. Events `DeletingLoadBalancer`,
//!   `DeletedLoadBalancer`, `DeleteLoadBalancerFailed`.
//! - **Node sync**: as upstream's stable node set (KEP-3458), when a node is added or removed, its
//!   exclusion label changes ([`predicates::is_included`]) or its provider ID changes, every load balancer
//!   gets `UpdateLoadBalancer` with the current backends ([`predicates::is_load_balancer_node`]: a node being
//!   deleted or tainted `ToBeDeletedByClusterAutoscaler` is left out then, but is no trigger on its own).
//!   Events `UpdatedLoadBalancer`, `UpdateLoadBalancerFailed`, `UnAvailableLoadBalancer`.
//!
//! Failures are retried per Service: a cloud [`CloudError::Retry`] exactly after its delay, anything else
//! with exponential backoff from 5 s to 300 s. `--concurrent-service-syncs` workers process Services; one
//! Service is never synced by two workers, nor synced and host-updated at the same time.

pub mod predicates;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use cloud_provider::well_known::FINALIZER_LOAD_BALANCER_CLEANUP;
use cloud_provider::{CloudError, CloudProvider, LoadBalancer, ObjectKey, ObjectKind, for_object};
use k8s_openapi::api::core::v1::{LoadBalancerStatus, Node, Service};
use kube::api::{Api, Patch};
use kube::runtime::reflector::{ObjectRef, Store};
use parking_lot::{Mutex, RwLock};
use serde_json::json;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::cached_node::CachedNode;
use crate::context::ControllerContext;
use crate::error::ControllersError;
use crate::events::{EventRecorder, EventType, object_ref};
use crate::identity;
use crate::informers::{InformerEvent, InformerEvents, SharedInformers};
use crate::metrics::ControllerMetrics;
use crate::names::ControllerName;
use crate::panics::PanicGuard;
use crate::workqueue::WorkQueue;
use crate::workqueue_metrics::queue_names;

use predicates::{
    SyncFingerprint, current_status, differs_in_status_only, has_cleanup_finalizer,
    load_balancer_nodes, load_balancer_status_equal, should_delete, should_enqueue,
    wants_load_balancer,
};

/// Delay before the first retry of a failed sync.
pub const MIN_RETRY_DELAY: Duration = Duration::from_secs(5);
/// Longest delay between retries of a failing sync.
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(300);
/// How long a stopping controller waits for its events to be written.
const EVENT_FLUSH_TIMEOUT: Duration = Duration::from_secs(2);
/// At most this many node names are listed in an `UpdateLoadBalancerFailed` event.
const EVENT_NODE_NAMES: usize = 5;

/// Reason of the event emitted when a sync starts ensuring a load balancer.
pub const REASON_ENSURING: &str = "EnsuringLoadBalancer";
/// Reason of the event emitted when a load balancer was ensured.
pub const REASON_ENSURED: &str = "EnsuredLoadBalancer";
/// Reason of the Warning emitted when a sync failed.
pub const REASON_SYNC_FAILED: &str = "SyncLoadBalancerFailed";
/// Reason of the event emitted before a load balancer is deleted.
pub const REASON_DELETING: &str = "DeletingLoadBalancer";
/// Reason of the event emitted once a load balancer is deleted.
pub const REASON_DELETED: &str = "DeletedLoadBalancer";
/// Reason of the Warning emitted when deleting a load balancer failed.
pub const REASON_DELETE_FAILED: &str = "DeleteLoadBalancerFailed";
/// Reason of the event emitted when a load balancer's hosts were updated.
pub const REASON_UPDATED: &str = "UpdatedLoadBalancer";
/// Reason of the Warning emitted when updating a load balancer's hosts failed.
pub const REASON_UPDATE_FAILED: &str = "UpdateLoadBalancerFailed";
/// Reason of the Warning emitted when a load balancer has no node to send traffic to.
pub const REASON_UNAVAILABLE: &str = "UnAvailableLoadBalancer";

const ACTION_ENSURE: &str = "EnsureLoadBalancer";
const ACTION_DELETE: &str = "DeleteLoadBalancer";
const ACTION_UPDATE: &str = "UpdateLoadBalancer";

/// A failed sync of one Service.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
struct SyncError {
    message: String,
    /// Set when the cloud asked for a retry after a fixed delay.
    retry_after: Option<Duration>,
}

impl SyncError {
    fn new(message: String, retry_after: Option<Duration>) -> Self {
        SyncError {
            message,
            retry_after,
        }
    }
}

/// What a sync did with the Service's load balancer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operation {
    Ensured,
    Deleted,
}

/// The service-lb-controller. Build it with [`ServiceLbController::new`] before the informers start, then
/// [`ServiceLbController::run`] it.
pub struct ServiceLbController {
    shared: Arc<Shared>,
    informers: SharedInformers,
    service_events: InformerEvents<Service>,
    node_events: InformerEvents<CachedNode>,
}

impl std::fmt::Debug for ServiceLbController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceLbController")
            .field("cluster_name", &self.shared.cluster_name)
            .field("workers", &self.shared.workers)
            .finish_non_exhaustive()
    }
}

struct Shared {
    ctx: ControllerContext,
    client: kube::Client,
    cloud: Arc<dyn CloudProvider>,
    cluster_name: String,
    workers: usize,
    recorder: EventRecorder,
    metrics: ControllerMetrics,
    panics: PanicGuard,
    services: Store<Service>,
    nodes: Store<CachedNode>,
    queue: WorkQueue<String>,
    /// The last state of every Service whose load balancer this controller manages, by `namespace/name`:
    /// what to clean up when the Service disappears or is recreated with another UID.
    cache: Mutex<HashMap<String, Arc<Service>>>,
    /// Per-Service locks serializing syncs and host updates of the same Service.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// The load-balancer nodes, built from the node store on the first load-balancer operation that needs
    /// them and dropped whenever a node's load-balancer view changes. Nothing is held while no
    /// LoadBalancer Service is synced.
    hosts: RwLock<Option<Arc<Vec<Node>>>>,
}

/// `namespace/name` of a Service.
fn service_key(service: &Service) -> String {
    format!(
        "{}/{}",
        service.metadata.namespace.as_deref().unwrap_or_default(),
        service.metadata.name.as_deref().unwrap_or_default()
    )
}

fn split_key(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or(("", key))
}

impl ServiceLbController {
    /// Creates the controller and subscribes it to the shared node and service informers.
    pub fn new(ctx: &ControllerContext, informers: &SharedInformers) -> Self {
        let ctx = &ctx.for_controller(ControllerName::ServiceLb);
        let shared = Shared {
            ctx: ctx.clone(),
            client: ctx.client_for(ControllerName::ServiceLb),
            cloud: ctx.cloud.clone(),
            cluster_name: ctx.config.cluster_name.clone(),
            workers: ctx.config.concurrent_service_syncs.get(),
            recorder: ctx.recorder(ControllerName::ServiceLb),
            metrics: ctx.metrics.clone(),
            panics: PanicGuard::new(ctx, ControllerName::ServiceLb),
            services: informers.services(),
            nodes: informers.nodes(),
            queue: WorkQueue::new(MIN_RETRY_DELAY, MAX_RETRY_DELAY)
                .with_metrics(queue_names::SERVICE, &ctx.metrics.workqueues),
            cache: Mutex::new(HashMap::new()),
            locks: Mutex::new(HashMap::new()),
            hosts: RwLock::new(None),
        };
        ServiceLbController {
            shared: Arc::new(shared),
            informers: informers.clone(),
            service_events: informers.service_events(),
            node_events: informers.node_events(),
        }
    }

    /// Replaces the retry backoff of failed syncs (default [`MIN_RETRY_DELAY`] to [`MAX_RETRY_DELAY`], as
    /// upstream). Cloud `Retry` errors keep their own delay.
    pub fn with_retry_delays(mut self, min: Duration, max: Duration) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.queue = WorkQueue::new(min, max.max(min))
                .with_metrics(queue_names::SERVICE, &shared.ctx.metrics.workqueues);
        }
        self
    }

    /// Runs the controller until `shutdown` is cancelled. Waits for the node and service informers to list
    /// everything first. Fails when the provider has no load-balancer support or an informer stops early.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), ControllersError> {
        let ServiceLbController {
            shared,
            informers,
            service_events,
            node_events,
        } = self;
        if shared.cloud.load_balancer().is_none() {
            return Err(ControllersError::Config(format!(
                "cloud provider {:?} does not support load balancers",
                shared.cloud.provider_name()
            )));
        }
        let synced = async {
            informers.wait_nodes_synced().await?;
            informers.wait_services_synced().await
        };
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            result = synced => result?,
        }
        // One snapshot of the nodes seeds the change detection, so that every later change arrives as an
        // event.
        let nodes = shared.nodes.state();
        let seen_nodes: HashMap<String, NodeView> = nodes
            .iter()
            .map(|n| (n.name().to_string(), NodeView::of(n)))
            .collect();
        drop(nodes);
        tracing::info!(
            controller = %ControllerName::ServiceLb,
            workers = shared.workers,
            hosts = seen_nodes.values().filter(|v| v.eligible).count(),
            "caches synced; starting workers"
        );

        let single_pass = shared.ctx.is_single_pass();
        let mut tasks = JoinSet::new();
        if single_pass {
            shared.queue_every_load_balancer();
        } else {
            tasks.spawn(watch_services(
                shared.clone(),
                service_events,
                shutdown.clone(),
            ));
            tasks.spawn(watch_nodes(
                shared.clone(),
                node_events,
                seen_nodes,
                shutdown.clone(),
            ));
        }
        for _ in 0..shared.workers {
            tasks.spawn(worker(shared.clone()));
        }
        if !single_pass {
            shutdown.cancelled().await;
            shared.queue.shut_down();
        }
        let mut failure = None;
        while let Some(joined) = tasks.join_next().await {
            if let Err(error) = joined
                && failure.is_none()
            {
                failure = Some(ControllersError::Controller {
                    name: ControllerName::ServiceLb.canonical().to_string(),
                    message: format!("task failed: {error}"),
                });
            }
        }
        shared.recorder.flush(EVENT_FLUSH_TIMEOUT).await;
        failure.map_or(Ok(()), Err)
    }
}

/// Turns service notifications into queued keys: new LoadBalancer Services, changes that matter to the load
/// balancer, cleanups and deletions.
async fn watch_services(
    shared: Arc<Shared>,
    mut events: InformerEvents<Service>,
    shutdown: CancellationToken,
) {
    let mut seen: HashMap<String, SyncFingerprint> = HashMap::new();
    loop {
        let event = tokio::select! {
            _ = shutdown.cancelled() => return,
            event = events.recv() => event,
        };
        match event {
            None => return,
            Some(InformerEvent::Applied(service)) => shared.observe(&mut seen, &service),
            Some(InformerEvent::Deleted(service)) => {
                let key = service_key(&service);
                seen.remove(&key);
                shared.queue.add(key);
            }
            Some(InformerEvent::Resynced) => {
                let current = shared.services.state();
                let present: HashSet<String> = current.iter().map(|s| service_key(s)).collect();
                for service in &current {
                    shared.observe(&mut seen, service);
                }
                // Services that vanished while the watch was down.
                let gone: Vec<String> = seen
                    .keys()
                    .filter(|k| !present.contains(*k))
                    .cloned()
                    .collect();
                for key in gone {
                    seen.remove(&key);
                    shared.queue.add(key);
                }
                let cached: Vec<String> = shared.cache.lock().keys().cloned().collect();
                for key in cached {
                    if !present.contains(&key) {
                        shared.queue.add(key);
                    }
                }
            }
        }
    }
}

/// Keeps the load-balancer node set current and updates every load balancer when it changes.
async fn watch_nodes(
    shared: Arc<Shared>,
    mut events: InformerEvents<CachedNode>,
    seen: HashMap<String, NodeView>,
    shutdown: CancellationToken,
) {
    let mut nodes = NodeTracker {
        seen,
        unsynced: HashMap::new(),
    };
    loop {
        let event = tokio::select! {
            _ = shutdown.cancelled() => return,
            event = events.recv() => event,
        };
        let Some(event) = event else { return };
        let mut changed = nodes.apply(&shared, event);
        // Coalesce everything that is already waiting.
        while let Ok(event) = events.try_recv() {
            changed |= nodes.apply(&shared, event);
        }
        if changed {
            shared.invalidate_hosts();
        }
        if !nodes.unsynced.is_empty() {
            nodes.unsynced.clear();
            shared.node_sync(&shutdown).await;
        }
    }
}

/// The load-balancer view of every node, and the difference of the load-balancer node set (by name and
/// provider ID) to the one the load balancers were last updated with.
#[derive(Debug, Default)]
struct NodeTracker {
    /// The view of every node in the store, by name.
    seen: HashMap<String, NodeView>,
    /// For every node whose set membership changed since the last node sync: its membership then (the
    /// provider ID when it was a load-balancer node). Empty when the set is the synced one.
    unsynced: HashMap<String, Option<String>>,
}

impl NodeTracker {
    /// Records a node notification; true when the load-balancer view of the nodes changed.
    fn apply(&mut self, shared: &Shared, event: InformerEvent<CachedNode>) -> bool {
        match event {
            InformerEvent::Applied(node) => {
                self.set(node.name().to_string(), Some(NodeView::of(&node)))
            }
            InformerEvent::Deleted(node) => self.set(node.name().to_string(), None),
            InformerEvent::Resynced => {
                let fresh: HashMap<String, NodeView> = shared
                    .nodes
                    .state()
                    .iter()
                    .map(|n| (n.name().to_string(), NodeView::of(n)))
                    .collect();
                let gone: Vec<String> = self
                    .seen
                    .keys()
                    .filter(|k| !fresh.contains_key(*k))
                    .cloned()
                    .collect();
                let mut changed = false;
                for name in gone {
                    changed |= self.set(name, None);
                }
                for (name, view) in fresh {
                    changed |= self.set(name, Some(view));
                }
                changed
            }
        }
    }

    /// Replaces the view of one node (`None`: the node is gone); true when it changed.
    fn set(&mut self, name: String, view: Option<NodeView>) -> bool {
        let new_member = view.as_ref().and_then(NodeView::member);
        let old = match view {
            Some(view) => {
                if self.seen.get(&name) == Some(&view) {
                    return false;
                }
                self.seen.insert(name.clone(), view)
            }
            None => match self.seen.remove(&name) {
                Some(old) => Some(old),
                None => return false,
            },
        };
        let old_member = old.as_ref().and_then(NodeView::member);
        if old_member != new_member {
            let back_to_synced = match self.unsynced.get(&name) {
                Some(synced) => *synced == new_member,
                None => {
                    self.unsynced.insert(name.clone(), old_member);
                    false
                }
            };
            if back_to_synced {
                self.unsynced.remove(&name);
            }
        }
        true
    }
}

/// What of a Node matters to load balancers.
#[derive(Debug, Clone, PartialEq)]
struct NodeView {
    /// A backend now ([`predicates::is_load_balancer_node`]).
    eligible: bool,
    /// Not excluded by label ([`predicates::is_included`]).
    included: bool,
    provider_id: Option<String>,
    /// Shared with the node store.
    addresses: Arc<[k8s_openapi::api::core::v1::NodeAddress]>,
}

impl NodeView {
    /// The node's place in the set whose changes re-target every load balancer, as upstream's (KEP-3458):
    /// its provider ID while the exclusion label does not exclude it. Readiness, taints and deletion
    /// timestamps change the backends only at the next sync.
    fn member(&self) -> Option<String> {
        self.included
            .then(|| self.provider_id.clone().unwrap_or_default())
    }

    fn of(node: &CachedNode) -> Self {
        NodeView {
            eligible: predicates::is_load_balancer_node(node),
            included: predicates::is_included(node),
            provider_id: node.provider_id().map(str::to_string),
            addresses: node.addresses.clone(),
        }
    }
}

async fn worker(shared: Arc<Shared>) {
    while let Some(key) = shared.queue.next().await {
        let object = ObjectKey::new(ObjectKind::Service, key.clone());
        let sync = for_object(object.clone(), shared.sync(&key));
        let Some(outcome) = shared.panics.run(&key, sync).await else {
            // Reported by the guard; the Service is tried again with backoff.
            shared.queue.add_rate_limited(key.clone(), None);
            shared.queue.done(&key);
            continue;
        };
        match outcome {
            Ok(()) => shared.queue.forget(&key),
            Err(error) => {
                // In a dry run the failure is reported, and the queue drops the retry.
                shared
                    .ctx
                    .record_failure(ControllerName::ServiceLb, Some(object), &error);
                match error.retry_after {
                    Some(delay) => {
                        tracing::info!(service = %key, %error, ?delay, "cloud asked to retry the load balancer sync later");
                        shared.queue.add_after(key.clone(), delay);
                    }
                    None => {
                        let delay = shared.queue.add_rate_limited(key.clone(), None);
                        tracing::warn!(service = %key, %error, ?delay, "load balancer sync failed; retrying with backoff");
                    }
                }
            }
        }
        shared.queue.done(&key);
    }
}

impl Shared {
    fn balancer(&self) -> Result<&dyn LoadBalancer, SyncError> {
        self.cloud.load_balancer().ok_or_else(|| {
            SyncError::new(
                format!(
                    "cloud provider {:?} does not support load balancers",
                    self.cloud.provider_name()
                ),
                None,
            )
        })
    }

    fn publish(
        &self,
        service: &Service,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        self.recorder
            .publish(&object_ref(service), type_, reason, action, note);
    }

    /// A dry run's pass: queues every Service that has or wants a load balancer (or a cleanup).
    fn queue_every_load_balancer(&self) {
        for service in self.services.state() {
            if should_enqueue(None, &service) {
                let key = service_key(&service);
                self.ctx
                    .visit(ObjectKey::new(ObjectKind::Service, key.clone()));
                self.queue.add(key);
            }
        }
        self.queue.finish_when_idle();
    }

    /// Queues the Service when the notification matters to its load balancer.
    fn observe(&self, seen: &mut HashMap<String, SyncFingerprint>, service: &Arc<Service>) {
        let key = service_key(service);
        if should_enqueue(seen.get(&key), service) {
            self.queue.add(key.clone());
        } else {
            self.adopt_status_change(&key, service);
        }
        seen.insert(key, SyncFingerprint::of(service));
    }

    /// Holds `service` as the last synced state of `key` when it differs from that state only where this
    /// controller writes (the load-balancer status and cleanup finalizer it just wrote), instead of holding
    /// both versions: the provider would be handed the same labels, annotations and spec.
    fn adopt_status_change(&self, key: &str, service: &Arc<Service>) {
        let mut cache = self.cache.lock();
        if let Some(cached) = cache.get_mut(key)
            && !Arc::ptr_eq(cached, service)
            && differs_in_status_only(cached, service)
        {
            *cached = service.clone();
        }
    }

    /// The current load-balancer nodes, built from the node store when no current list is held.
    fn hosts(&self) -> Arc<Vec<Node>> {
        if let Some(hosts) = self.hosts.read().as_ref() {
            return hosts.clone();
        }
        let mut held = self.hosts.write();
        if let Some(hosts) = held.as_ref() {
            return hosts.clone();
        }
        let hosts = Arc::new(load_balancer_nodes(
            self.nodes.state().iter().map(|n| n.as_ref()),
        ));
        *held = Some(hosts.clone());
        hosts
    }

    /// Drops the held load-balancer nodes after a node changed; the next operation rebuilds them.
    fn invalidate_hosts(&self) {
        *self.hosts.write() = None;
    }

    fn key_lock(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.locks
            .lock()
            .entry(key.to_string())
            .or_default()
            .clone()
    }

    /// Drops the lock of a Service this controller no longer tracks (when nobody else holds it).
    fn release_key_lock(&self, key: &str, lock: Arc<tokio::sync::Mutex<()>>) {
        let mut locks = self.locks.lock();
        // Two references: the map's and ours.
        if Arc::strong_count(&lock) <= 2 && !self.cache.lock().contains_key(key) {
            locks.remove(key);
        }
    }

    /// Syncs one Service by key.
    async fn sync(&self, key: &str) -> Result<(), SyncError> {
        let lock = self.key_lock(key);
        let result = {
            let _guard = lock.lock().await;
            let (namespace, name) = split_key(key);
            match self.services.get(&ObjectRef::new(name).within(namespace)) {
                None => self.process_deletion(key).await,
                Some(service) => self.process_create_or_update(key, service).await,
            }
        };
        self.release_key_lock(key, lock);
        result
    }

    /// The Service is gone: delete the load balancer of its last known state.
    async fn process_deletion(&self, key: &str) -> Result<(), SyncError> {
        let cached = self.cache.lock().get(key).cloned();
        let Some(cached) = cached else {
            return Ok(());
        };
        tracing::info!(service = %key, "service was deleted; cleaning up its load balancer");
        self.delete_load_balancer_of(&cached).await?;
        self.cache.lock().remove(key);
        Ok(())
    }

    async fn process_create_or_update(
        &self,
        key: &str,
        service: Arc<Service>,
    ) -> Result<(), SyncError> {
        let previous = self.cache.lock().get(key).cloned();
        if let Some(previous) = previous
            && previous.metadata.uid != service.metadata.uid
        {
            // Deleted and recreated under the same name: the old load balancer belongs to the old UID.
            tracing::info!(service = %key, old_uid = ?previous.metadata.uid, new_uid = ?service.metadata.uid,
                "service was recreated; cleaning up the previous load balancer");
            self.delete_load_balancer_of(&previous).await?;
        }
        self.cache.lock().insert(key.to_string(), service.clone());
        if self.sync_load_balancer(&service).await? == Operation::Deleted {
            self.cache.lock().remove(key);
        }
        Ok(())
    }

    /// Deletes the load balancer of a Service that no longer exists in this form (deleted, or replaced by
    /// a Service with another UID).
    async fn delete_load_balancer_of(&self, service: &Service) -> Result<(), SyncError> {
        if !wants_load_balancer(service) {
            return Ok(());
        }
        let balancer = self.balancer()?;
        // A load balancer another controller implements counts as deleted here.
        self.delete_in_cloud(balancer, service).await?;
        self.publish_deleted(service);
        Ok(())
    }

    /// Asks the cloud to delete the Service's load balancer, announced by a `DeletingLoadBalancer` event:
    /// `Ok(true)` when it did, `Ok(false)` when another controller implements the load balancer
    /// (`ImplementedElsewhere`); a failure is a [`delete_failed`](Self::delete_failed) error. The
    /// `DeletedLoadBalancer` event is the caller's ([`publish_deleted`](Self::publish_deleted)).
    async fn delete_in_cloud(
        &self,
        balancer: &dyn LoadBalancer,
        service: &Service,
    ) -> Result<bool, SyncError> {
        self.publish(
            service,
            EventType::Normal,
            REASON_DELETING,
            ACTION_DELETE,
            "Deleting load balancer".into(),
        );
        match balancer
            .ensure_load_balancer_deleted(&self.cluster_name, service)
            .await
        {
            Ok(()) => Ok(true),
            Err(CloudError::ImplementedElsewhere) => Ok(false),
            Err(error) => Err(self.delete_failed(service, error)),
        }
    }

    /// The `DeletedLoadBalancer` event that ends both delete flows.
    fn publish_deleted(&self, service: &Service) {
        self.publish(
            service,
            EventType::Normal,
            REASON_DELETED,
            ACTION_DELETE,
            "Deleted load balancer".into(),
        );
    }

    fn delete_failed(&self, service: &Service, error: CloudError) -> SyncError {
        let retry_after = error.retry_after();
        if retry_after.is_none() {
            self.publish(
                service,
                EventType::Warning,
                REASON_DELETE_FAILED,
                ACTION_DELETE,
                format!("Error deleting load balancer: {error}"),
            );
        }
        SyncError::new(
            format!("failed to delete load balancer: {error}"),
            retry_after,
        )
    }

    /// A failed ensure-side step: a `SyncLoadBalancerFailed` Warning (except for cloud-requested retries).
    fn sync_failed(
        &self,
        service: &Service,
        message: String,
        retry_after: Option<Duration>,
    ) -> SyncError {
        if retry_after.is_none() {
            self.publish(
                service,
                EventType::Warning,
                REASON_SYNC_FAILED,
                ACTION_ENSURE,
                format!("Error syncing load balancer: {message}"),
            );
        }
        SyncError::new(message, retry_after)
    }

    async fn sync_load_balancer(&self, service: &Arc<Service>) -> Result<Operation, SyncError> {
        if should_delete(service) || service.metadata.deletion_timestamp.is_some() {
            self.cleanup(service).await?;
            Ok(Operation::Deleted)
        } else {
            self.ensure(service).await?;
            Ok(Operation::Ensured)
        }
    }

    /// Deletion flow: delete the load balancer when it exists, clear the status, release the finalizer.
    async fn cleanup(&self, service: &Service) -> Result<(), SyncError> {
        let balancer = self.balancer()?;
        let existing = balancer
            .get_load_balancer(&self.cluster_name, service)
            .await
            .map_err(|e| {
                let retry = e.retry_after();
                self.sync_failed(
                    service,
                    format!("failed to check if load balancer exists before cleanup: {e}"),
                    retry,
                )
            })?;
        let mut acted = false;
        if existing.is_some() {
            acted = self.delete_in_cloud(balancer, service).await?;
            if !acted {
                tracing::info!(service = %service_key(service),
                    "load balancer is implemented by another controller; not deleting it");
            }
        }
        // A Service that stays (its type changed) gets its ingress cleared; one being deleted goes away
        // once the finalizer is released. Both happen in one write.
        let clear_status = service.metadata.deletion_timestamp.is_none()
            && !current_status(service)
                .ingress
                .unwrap_or_default()
                .is_empty();
        let release = has_cleanup_finalizer(service);
        if clear_status || release {
            self.release_service(service, release, clear_status)
                .await
                .map_err(|e| {
                    self.sync_failed(
                        service,
                        format!("failed to remove load balancer cleanup finalizer or status: {e}"),
                        None,
                    )
                })?;
            acted |= release;
        }
        if acted {
            self.publish_deleted(service);
        }
        Ok(())
    }

    /// Ensure flow: finalizer first, then the cloud, then the status when it changed.
    async fn ensure(&self, service: &Arc<Service>) -> Result<(), SyncError> {
        let balancer = self.balancer()?;
        self.publish(
            service,
            EventType::Normal,
            REASON_ENSURING,
            ACTION_ENSURE,
            "Ensuring load balancer".into(),
        );
        let service: Arc<Service> = if has_cleanup_finalizer(service) {
            service.clone()
        } else {
            let updated = self.add_finalizer(service).await.map_err(|e| {
                self.sync_failed(
                    service,
                    format!("failed to add load balancer cleanup finalizer: {e}"),
                    None,
                )
            })?;
            Arc::new(updated)
        };
        let hosts = self.hosts();
        if hosts.is_empty() {
            self.publish(
                &service,
                EventType::Warning,
                REASON_UNAVAILABLE,
                ACTION_ENSURE,
                "There are no available nodes for LoadBalancer".into(),
            );
        }
        let status = match balancer
            .ensure_load_balancer(&self.cluster_name, &service, &hosts)
            .await
        {
            Ok(status) => status,
            Err(CloudError::ImplementedElsewhere) => {
                tracing::debug!(service = %service_key(&service),
                    "load balancer is implemented by another controller");
                return Ok(());
            }
            Err(error) => {
                let retry = error.retry_after();
                return Err(self.sync_failed(
                    &service,
                    format!("failed to ensure load balancer: {error}"),
                    retry,
                ));
            }
        };
        self.metrics.service_loadbalancer_sync.inc();
        self.publish(
            &service,
            EventType::Normal,
            REASON_ENSURED,
            ACTION_ENSURE,
            "Ensured load balancer".into(),
        );
        if !load_balancer_status_equal(&current_status(&service), &status) {
            self.patch_status(&service, &status).await.map_err(|e| {
                self.sync_failed(
                    &service,
                    format!("failed to update load balancer status: {e}"),
                    None,
                )
            })?;
        }
        Ok(())
    }

    fn api(&self, service: &Service) -> Api<Service> {
        Api::namespaced(
            self.client.clone(),
            service.metadata.namespace.as_deref().unwrap_or("default"),
        )
    }

    fn name(service: &Service) -> &str {
        service.metadata.name.as_deref().unwrap_or_default()
    }

    /// Adds the cleanup finalizer through `services/status` (a strategic merge: finalizers are a set).
    async fn add_finalizer(&self, service: &Service) -> Result<Service, kube::Error> {
        let patch = json!({ "metadata": { "finalizers": [FINALIZER_LOAD_BALANCER_CLEANUP] } });
        self.api(service)
            .patch_status(
                Self::name(service),
                &identity::patch_params(),
                &Patch::Strategic(patch),
            )
            .await
    }

    /// Removes the cleanup finalizer and/or clears the ingress, in one strategic merge patch of
    /// `services/status` (which applies metadata changes too). A Service that is already gone is fine.
    async fn release_service(
        &self,
        service: &Service,
        remove_finalizer: bool,
        clear_status: bool,
    ) -> Result<(), kube::Error> {
        let mut patch = serde_json::Map::new();
        if remove_finalizer {
            patch.insert(
                "metadata".into(),
                json!({ "$deleteFromPrimitiveList/finalizers": [FINALIZER_LOAD_BALANCER_CLEANUP] }),
            );
        }
        if clear_status {
            patch.insert(
                "status".into(),
                json!({ "loadBalancer": { "ingress": null } }),
            );
        }
        let result = self
            .api(service)
            .patch_status(
                Self::name(service),
                &identity::patch_params(),
                &Patch::Strategic(serde_json::Value::Object(patch)),
            )
            .await;
        ignore_not_found(result)
    }

    /// Writes the load-balancer status (the ingress list is replaced whole). A Service that is already
    /// gone is fine.
    async fn patch_status(
        &self,
        service: &Service,
        status: &LoadBalancerStatus,
    ) -> Result<(), kube::Error> {
        let ingress = match status.ingress.as_deref() {
            Some(list) if !list.is_empty() => {
                serde_json::to_value(list).map_err(kube::Error::SerdeError)?
            }
            _ => serde_json::Value::Null,
        };
        let patch = json!({ "status": { "loadBalancer": { "ingress": ingress } } });
        let result = self
            .api(service)
            .patch_status(
                Self::name(service),
                &identity::patch_params(),
                &Patch::Merge(patch),
            )
            .await;
        ignore_not_found(result)
    }

    /// Updates the hosts of every load balancer after the node set changed, `--concurrent-service-syncs`
    /// at a time, each worker a task of its own (as upstream's are goroutines), so that the work around one
    /// update never waits for another's. A load balancer whose update fails is queued for a full sync
    /// (which ensures it with the current nodes) with the usual retry delays.
    async fn node_sync(self: &Arc<Self>, shutdown: &CancellationToken) {
        let keys: Vec<String> = self
            .cache
            .lock()
            .iter()
            .filter(|(_, s)| wants_load_balancer(s))
            .map(|(k, _)| k.clone())
            .collect();
        if keys.is_empty() {
            return;
        }
        let hosts = self.hosts();
        tracing::info!(
            controller = %ControllerName::ServiceLb,
            nodes = hosts.len(),
            load_balancers = keys.len(),
            "load balancer node set changed; updating every load balancer"
        );
        let start = Instant::now();
        let workers = self.workers.min(keys.len());
        let pending = Arc::new(Mutex::new(keys.into_iter()));
        let mut running = JoinSet::new();
        for _ in 0..workers {
            let (shared, pending) = (self.clone(), pending.clone());
            let (hosts, shutdown) = (hosts.clone(), shutdown.clone());
            running.spawn(async move {
                let mut failed = Vec::new();
                loop {
                    let next = pending.lock().next();
                    let Some(key) = next else { break };
                    if shutdown.is_cancelled() {
                        break;
                    }
                    if let Err(error) = shared.update_hosts(&key, &hosts).await {
                        failed.push((key, error.retry_after));
                    }
                }
                failed
            });
        }
        let mut failed = Vec::new();
        while let Some(joined) = running.join_next().await {
            match joined {
                Ok(worker_failures) => failed.extend(worker_failures),
                Err(error) => tracing::error!(
                    controller = %ControllerName::ServiceLb,
                    %error,
                    "a load-balancer host update worker failed; the other workers go on"
                ),
            }
        }
        self.metrics
            .service_nodesync_latency
            .observe(start.elapsed().as_secs_f64());
        if !failed.is_empty() {
            tracing::warn!(
                controller = %ControllerName::ServiceLb,
                failed = failed.len(),
                "some load balancers could not be updated with the new hosts; re-syncing them"
            );
        }
        // As upstream, a Service whose hosts could not be updated gets a full sync (an ensure with the
        // current hosts) at once; its own backoff applies when that fails too.
        for (key, retry_after) in failed {
            match retry_after {
                Some(delay) => self.queue.add_after(key, delay),
                None => self.queue.add(key),
            }
        }
    }

    /// Updates the hosts of one Service's load balancer.
    async fn update_hosts(&self, key: &str, hosts: &[Node]) -> Result<(), SyncError> {
        let balancer = self.balancer()?;
        let lock = self.key_lock(key);
        let _guard = lock.lock().await;
        let (namespace, name) = split_key(key);
        let Some(service) = self.services.get(&ObjectRef::new(name).within(namespace)) else {
            return Ok(());
        };
        if should_delete(&service) || service.metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        let start = Instant::now();
        let result = balancer
            .update_load_balancer(&self.cluster_name, &service, hosts)
            .await;
        match result {
            Ok(()) => {
                self.metrics
                    .service_update_loadbalancer_host_latency
                    .observe(start.elapsed().as_secs_f64());
                self.metrics.service_loadbalancer_sync.inc();
                if hosts.is_empty() {
                    self.publish(
                        &service,
                        EventType::Warning,
                        REASON_UNAVAILABLE,
                        ACTION_UPDATE,
                        "There are no available nodes for LoadBalancer".into(),
                    );
                } else {
                    self.publish(
                        &service,
                        EventType::Normal,
                        REASON_UPDATED,
                        ACTION_UPDATE,
                        "Updated load balancer with new hosts".into(),
                    );
                }
                Ok(())
            }
            Err(CloudError::ImplementedElsewhere) => Ok(()),
            Err(error) => {
                // Only an error when the load balancer still exists.
                match balancer
                    .get_load_balancer(&self.cluster_name, &service)
                    .await
                {
                    Ok(None) => return Ok(()),
                    Ok(Some(_)) => {}
                    Err(check) => {
                        tracing::warn!(service = %key, error = %check,
                            "could not check whether the load balancer still exists");
                    }
                }
                self.metrics.service_nodesync_error.inc();
                let names = predicates::limited_node_names(hosts, EVENT_NODE_NAMES);
                self.publish(
                    &service,
                    EventType::Warning,
                    REASON_UPDATE_FAILED,
                    ACTION_UPDATE,
                    format!(
                        "Error updating load balancer with new hosts {names:?} [node names limited, total number of nodes: {}], error: {error}",
                        hosts.len()
                    ),
                );
                Err(SyncError::new(
                    format!("failed to update load balancer hosts: {error}"),
                    error.retry_after(),
                ))
            }
        }
    }
}

fn ignore_not_found(result: Result<Service, kube::Error>) -> Result<(), kube::Error> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(error) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_static<T: Send + 'static>(_: &T) {}

    /// Compiles only while `run` can be spawned (run_controllers boxes it as a `Send` future).
    #[allow(dead_code)]
    fn run_future_is_send(controller: ServiceLbController) {
        let future = controller.run(CancellationToken::new());
        assert_send_static(&future);
    }

    fn view(included: bool, provider_id: &str) -> NodeView {
        NodeView {
            eligible: included,
            included,
            provider_id: Some(provider_id.to_string()),
            addresses: Arc::from([]),
        }
    }

    #[test]
    fn taints_and_deletion_change_the_view_but_not_the_set() {
        let mut tracker = NodeTracker::default();
        assert!(tracker.set("a".into(), Some(view(true, "fake://a"))));
        tracker.unsynced.clear();
        // Marked for deletion or tainted by the autoscaler: no longer a backend, but no re-target now.
        let mut leaving = view(true, "fake://a");
        leaving.eligible = false;
        assert!(tracker.set("a".into(), Some(leaving)));
        assert!(tracker.unsynced.is_empty());
    }

    #[test]
    fn node_tracker_reports_set_changes_exactly() {
        let mut tracker = NodeTracker::default();
        // A new load-balancer node changes the set.
        assert!(tracker.set("a".into(), Some(view(true, "fake://a"))));
        assert_eq!(tracker.unsynced.len(), 1);
        tracker.unsynced.clear();
        // The same view again changes nothing.
        assert!(!tracker.set("a".into(), Some(view(true, "fake://a"))));
        // Another address is a view change but not a set change.
        let mut moved = view(true, "fake://a");
        moved.addresses = Arc::from([cloud_provider::node_address("InternalIP", "10.0.0.9")]);
        assert!(tracker.set("a".into(), Some(moved)));
        assert!(tracker.unsynced.is_empty());
        // Excluded, then eligible again before a sync: back to the synced set.
        assert!(tracker.set("a".into(), Some(view(false, "fake://a"))));
        assert_eq!(
            tracker.unsynced.get("a"),
            Some(&Some("fake://a".to_string()))
        );
        assert!(tracker.set("a".into(), Some(view(true, "fake://a"))));
        assert!(tracker.unsynced.is_empty());
        // A new provider ID changes the set; deletion of an unknown node does not.
        assert!(tracker.set("a".into(), Some(view(true, "fake://b"))));
        assert_eq!(tracker.unsynced.len(), 1);
        assert!(!tracker.set("ghost".into(), None));
        // A node that is not a load-balancer node comes and goes without changing the set.
        assert!(tracker.set("c".into(), Some(view(false, "fake://c"))));
        assert!(tracker.set("c".into(), None));
        assert_eq!(tracker.unsynced.len(), 1);
        // Deleting the member whose change is pending leaves a real difference (it was synced as a member).
        assert!(tracker.set("a".into(), None));
        assert_eq!(
            tracker.unsynced.get("a"),
            Some(&Some("fake://a".to_string()))
        );
    }

    #[test]
    fn keys_round_trip() {
        let mut svc = Service::default();
        svc.metadata.namespace = Some("team".into());
        svc.metadata.name = Some("web".into());
        let key = service_key(&svc);
        assert_eq!(key, "team/web");
        assert_eq!(split_key(&key), ("team", "web"));
        assert_eq!(split_key("bare"), ("", "bare"));
    }

    #[test]
    fn retry_bounds_match_upstream() {
        assert_eq!(
            crate::workqueue::backoff_delay(MIN_RETRY_DELAY, MAX_RETRY_DELAY, 1),
            Duration::from_secs(5)
        );
        assert_eq!(
            crate::workqueue::backoff_delay(MIN_RETRY_DELAY, MAX_RETRY_DELAY, 3),
            Duration::from_secs(20)
        );
        assert_eq!(
            crate::workqueue::backoff_delay(MIN_RETRY_DELAY, MAX_RETRY_DELAY, 20),
            Duration::from_secs(300)
        );
    }
}
