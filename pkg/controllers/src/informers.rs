//! Shared informers: one watch per resource type (nodes, services, persistentvolumes) for the whole
//! process, each feeding a reflector store that every controller reads.
//!
//! Controllers read the stores and subscribe before the informers start with an [`InformerEvents`] receiver,
//! which reports changes, deletions and complete re-lists. Only the resource types somebody asked for (a
//! store or a subscription) are watched. Objects are reduced before they are stored to keep memory flat at
//! scale: nodes to a [`CachedNode`] (decoded as a [`WireNode`], only the fields it keeps), Services and
//! PersistentVolumes by [`trim_metadata`].

use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{PersistentVolume, Service};
use kube::Api;
use kube::Resource;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{self, Lookup, Store};
use kube::runtime::{WatchStreamExt, watcher};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::cached_node::CachedNode;
use crate::error::ControllersError;
pub use crate::trim::trim_metadata;
use crate::trim::trimmed;
use crate::wire_node::WireNode;

/// Page size of the initial and recovery lists.
const LIST_PAGE_SIZE: u32 = 500;

/// A change seen by an informer, delivered to [`InformerEvents`] subscribers after the store was updated.
#[derive(Debug)]
pub enum InformerEvent<K> {
    /// The object was added or modified (the store's current copy).
    Applied(Arc<K>),
    /// The object was deleted (its last known state).
    Deleted(Arc<K>),
    /// A complete list replaced the store (start-up, or recovery after an expired watch): subscribers should
    /// re-examine every object in the store.
    Resynced,
}

/// The receiving end of an informer subscription; events arrive in watch order.
pub type InformerEvents<K> = mpsc::Receiver<InformerEvent<K>>;

/// Events one subscriber may have waiting. A subscriber that falls this far behind is not waited for (a
/// slow controller must not stall the watch every other controller reads): further events are dropped and
/// replaced by one [`InformerEvent::Resynced`], delivered as soon as it has room, after which it re-examines
/// the store, which already holds every dropped change. Memory stays bounded however slow a consumer is.
pub const SUBSCRIBER_CAPACITY: usize = 4096;

/// One subscription: its channel, and whether events were dropped and a resync is on its way.
struct Subscriber<T> {
    tx: mpsc::Sender<InformerEvent<T>>,
    behind: Arc<AtomicBool>,
}

impl<T: Send + Sync + 'static> Subscriber<T> {
    /// Delivers `event` without waiting; false when the subscriber is gone.
    fn deliver(&self, event: InformerEvent<T>) -> bool {
        if self.behind.load(Ordering::SeqCst) {
            // A resync is already on its way: it covers this change (the store holds it).
            return !self.tx.is_closed();
        }
        match self.tx.try_send(event) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Closed(_)) => false,
            Err(mpsc::error::TrySendError::Full(_)) => {
                if !self.behind.swap(true, Ordering::SeqCst) {
                    let tx = self.tx.clone();
                    let behind = self.behind.clone();
                    tokio::spawn(async move {
                        if let Ok(permit) = tx.reserve().await {
                            // Cleared before the resync is sent: a change dropped until now is in the store
                            // before the subscriber can read the resync.
                            behind.store(false, Ordering::SeqCst);
                            permit.send(InformerEvent::Resynced);
                        }
                    });
                }
                true
            }
        }
    }
}

/// Whether an informer's store holds a complete list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Readiness {
    Pending,
    Ready,
    Stopped,
}

/// Watches objects of type `K` and stores them as `T` (`K` itself, trimmed, or a projection).
struct Informer<K, T>
where
    T: Lookup<DynamicType = ()> + Clone + 'static,
{
    resource: &'static str,
    /// Reduces an object to what the controllers read before it enters the store (memory at scale).
    project: fn(K) -> T,
    store: Store<T>,
    /// Readiness for any number of concurrent waiters (kube-runtime's `Store::wait_until_ready` wakes
    /// only the most recent of several concurrent waiters).
    ready: tokio::sync::watch::Sender<Readiness>,
    writer: Mutex<Option<Writer<T>>>,
    subscribers: Mutex<Vec<Subscriber<T>>>,
    wanted: AtomicBool,
}

impl<K, T> Informer<K, T>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    T: Lookup<DynamicType = ()> + Clone + Debug + Send + Sync + 'static,
{
    fn new(resource: &'static str, project: fn(K) -> T) -> Self {
        let (store, writer) = reflector::store();
        Informer {
            resource,
            project,
            store,
            ready: tokio::sync::watch::Sender::new(Readiness::Pending),
            writer: Mutex::new(Some(writer)),
            subscribers: Mutex::new(Vec::new()),
            wanted: AtomicBool::new(false),
        }
    }

    fn store(&self) -> Store<T> {
        self.wanted.store(true, Ordering::SeqCst);
        self.store.clone()
    }

    fn events(&self) -> InformerEvents<T> {
        self.wanted.store(true, Ordering::SeqCst);
        let (tx, rx) = mpsc::channel(SUBSCRIBER_CAPACITY);
        self.subscribers.lock().push(Subscriber {
            tx,
            behind: Arc::new(AtomicBool::new(false)),
        });
        rx
    }

    fn broadcast(&self, make: impl Fn() -> InformerEvent<T>) {
        self.subscribers.lock().retain(|s| s.deliver(make()));
    }

    fn start(
        self: &Arc<Self>,
        client: &kube::Client,
        shutdown: &CancellationToken,
    ) -> Option<JoinHandle<()>> {
        if !self.wanted.load(Ordering::SeqCst) {
            return None;
        }
        let writer = self.writer.lock().take()?;
        let api: Api<K> = Api::all(client.clone());
        let this = self.clone();
        let shutdown = shutdown.clone();
        Some(tokio::spawn(async move {
            this.run(api, writer, shutdown).await;
        }))
    }

    async fn run(&self, api: Api<K>, writer: Writer<T>, shutdown: CancellationToken) {
        let config = watcher::Config::default().page_size(LIST_PAGE_SIZE);
        let project = self.project;
        let events = watcher(api, config)
            .default_backoff()
            .map_ok(move |event| project_event(event, project));
        let stream = reflector::reflector(writer, events);
        let mut stream = std::pin::pin!(stream);
        tracing::debug!(resource = self.resource, "informer started");
        loop {
            let item = tokio::select! {
                _ = shutdown.cancelled() => break,
                item = stream.next() => item,
            };
            match item {
                None => break,
                Some(Ok(watcher::Event::Apply(obj))) => {
                    let current = self
                        .store
                        .get(&obj.to_object_ref(()))
                        .unwrap_or_else(|| Arc::new(obj));
                    self.broadcast(|| InformerEvent::Applied(current.clone()));
                }
                Some(Ok(watcher::Event::Delete(obj))) => {
                    let obj = Arc::new(obj);
                    self.broadcast(|| InformerEvent::Deleted(obj.clone()));
                }
                Some(Ok(watcher::Event::InitDone)) => {
                    tracing::debug!(
                        resource = self.resource,
                        objects = self.store.len(),
                        "informer (re)listed"
                    );
                    self.ready.send_if_modified(|r| {
                        let changed = *r != Readiness::Ready;
                        *r = Readiness::Ready;
                        changed
                    });
                    self.broadcast(|| InformerEvent::Resynced);
                }
                Some(Ok(watcher::Event::Init | watcher::Event::InitApply(_))) => {}
                Some(Err(error)) => {
                    tracing::warn!(resource = self.resource, %error, "watch failed; retrying with backoff");
                }
            }
        }
        self.ready.send_if_modified(|r| {
            let pending = *r == Readiness::Pending;
            if pending {
                *r = Readiness::Stopped;
            }
            pending
        });
        tracing::debug!(resource = self.resource, "informer stopped");
    }

    async fn wait_ready(&self) -> Result<(), ControllersError> {
        let mut rx = self.ready.subscribe();
        match rx.wait_for(|r| *r != Readiness::Pending).await {
            Ok(r) if *r == Readiness::Ready => Ok(()),
            _ => Err(ControllersError::InformerStopped {
                resource: self.resource,
            }),
        }
    }
}

/// The same watcher event about the projected object.
fn project_event<K, T>(event: watcher::Event<K>, project: fn(K) -> T) -> watcher::Event<T> {
    match event {
        watcher::Event::Apply(obj) => watcher::Event::Apply(project(obj)),
        watcher::Event::Delete(obj) => watcher::Event::Delete(project(obj)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(obj) => watcher::Event::InitApply(project(obj)),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

struct Inner {
    client: kube::Client,
    nodes: Arc<Informer<WireNode, CachedNode>>,
    services: Arc<Informer<Service, Service>>,
    persistent_volumes: Arc<Informer<PersistentVolume, PersistentVolume>>,
    started: AtomicBool,
}

/// The process-wide informers; cheap to clone.
#[derive(Clone)]
pub struct SharedInformers {
    inner: Arc<Inner>,
}

impl Debug for SharedInformers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedInformers")
            .field("nodes", &self.inner.nodes.store.len())
            .field("services", &self.inner.services.store.len())
            .field(
                "persistent_volumes",
                &self.inner.persistent_volumes.store.len(),
            )
            .field("started", &self.inner.started.load(Ordering::SeqCst))
            .finish()
    }
}

impl SharedInformers {
    /// Informers (not yet started) that will watch through `client`.
    pub fn new(client: kube::Client) -> Self {
        SharedInformers {
            inner: Arc::new(Inner {
                client,
                nodes: Arc::new(Informer::new("nodes", CachedNode::from)),
                services: Arc::new(Informer::new("services", trimmed::<Service>)),
                persistent_volumes: Arc::new(Informer::new(
                    "persistentvolumes",
                    trimmed::<PersistentVolume>,
                )),
                started: AtomicBool::new(false),
            }),
        }
    }

    /// The node store of compact node copies (the node informer will run).
    pub fn nodes(&self) -> Store<CachedNode> {
        self.inner.nodes.store()
    }

    /// The service store (the service informer will run).
    pub fn services(&self) -> Store<Service> {
        self.inner.services.store()
    }

    /// The PersistentVolume store (the PV informer will run).
    pub fn persistent_volumes(&self) -> Store<PersistentVolume> {
        self.inner.persistent_volumes.store()
    }

    /// Node changes including deletions and re-lists. Subscribe before starting to see the initial list.
    pub fn node_events(&self) -> InformerEvents<CachedNode> {
        self.inner.nodes.events()
    }

    /// Service changes including deletions and re-lists.
    pub fn service_events(&self) -> InformerEvents<Service> {
        self.inner.services.events()
    }

    /// PersistentVolume changes including deletions and re-lists.
    pub fn persistent_volume_events(&self) -> InformerEvents<PersistentVolume> {
        self.inner.persistent_volumes.events()
    }

    /// Starts one watch for each resource type somebody asked for; they stop when `shutdown` is cancelled.
    /// Calling it again does nothing.
    pub fn start(&self, shutdown: &CancellationToken) -> Vec<JoinHandle<()>> {
        if self.inner.started.swap(true, Ordering::SeqCst) {
            return Vec::new();
        }
        let client = &self.inner.client;
        [
            self.inner.nodes.start(client, shutdown),
            self.inner.services.start(client, shutdown),
            self.inner.persistent_volumes.start(client, shutdown),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// Whether [`SharedInformers::start`] was called.
    pub fn is_started(&self) -> bool {
        self.inner.started.load(Ordering::SeqCst)
    }

    /// Waits until the node store holds its first complete list. Any number of tasks may wait at once
    /// (unlike `Store::wait_until_ready`, which wakes only one of several concurrent waiters).
    pub async fn wait_nodes_synced(&self) -> Result<(), ControllersError> {
        self.inner.nodes.wait_ready().await
    }

    /// Waits until the service store holds its first complete list.
    pub async fn wait_services_synced(&self) -> Result<(), ControllersError> {
        self.inner.services.wait_ready().await
    }

    /// Waits until the PersistentVolume store holds its first complete list.
    pub async fn wait_persistent_volumes_synced(&self) -> Result<(), ControllersError> {
        self.inner.persistent_volumes.wait_ready().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_subscriber_that_falls_behind_gets_one_resync_instead_of_unbounded_events() {
        let (tx, mut rx) = mpsc::channel(2);
        let subscriber = Subscriber {
            tx,
            behind: Arc::new(AtomicBool::new(false)),
        };
        for n in 0..10u32 {
            assert!(subscriber.deliver(InformerEvent::Applied(Arc::new(n))));
        }
        // Two events fit; the other eight are dropped for one resync, sent once there is room.
        assert!(matches!(rx.recv().await, Some(InformerEvent::Applied(n)) if *n == 0));
        assert!(matches!(rx.recv().await, Some(InformerEvent::Applied(n)) if *n == 1));
        assert!(matches!(rx.recv().await, Some(InformerEvent::Resynced)));
        assert!(!subscriber.behind.load(Ordering::SeqCst));
        // Caught up: events flow again.
        assert!(subscriber.deliver(InformerEvent::Applied(Arc::new(10))));
        assert!(matches!(rx.recv().await, Some(InformerEvent::Applied(n)) if *n == 10));
        drop(rx);
        assert!(
            !subscriber.deliver(InformerEvent::Resynced),
            "a gone subscriber is dropped"
        );
    }
}
