//! Shared informers: one watch per resource type (nodes, services, persistentvolumes) for the whole
//! process, each feeding a reflector store that every controller reads.
//!
//! Controllers subscribe before the informers start, either with a kube-runtime [`ReflectHandle`] (usable
//! with `kube::runtime::Controller::for_shared_stream`, or as a stream of `Arc<K>`), or with an
//! [`InformerEvents`] receiver that also reports deletions and complete re-lists. Only the resource types
//! somebody asked for (a store or a subscription) are watched. Objects are trimmed before they are stored
//! ([`trim_node`], [`trim_metadata`]) to keep memory flat at scale.

use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, Service};
use kube::Api;
use kube::Resource;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, ReflectHandle, Store, store_shared};
use kube::runtime::{WatchStreamExt, watcher};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::error::ControllersError;

/// Buffer of the kube-runtime subscription channel (object references; a full buffer slows the watch
/// until every [`ReflectHandle`] has caught up).
const SUBSCRIPTION_BUFFER: usize = 8_192;
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
pub type InformerEvents<K> = mpsc::UnboundedReceiver<InformerEvent<K>>;

/// Whether an informer's store holds a complete list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Readiness {
    Pending,
    Ready,
    Stopped,
}

struct Informer<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    resource: &'static str,
    /// Drops fields no controller reads before an object enters the store (memory at scale).
    trim: fn(&mut K),
    store: Store<K>,
    /// Readiness for any number of concurrent waiters (kube-runtime's `Store::wait_until_ready` wakes
    /// only the most recent of several concurrent waiters).
    ready: tokio::sync::watch::Sender<Readiness>,
    writer: Mutex<Option<Writer<K>>>,
    subscribers: Mutex<Vec<mpsc::UnboundedSender<InformerEvent<K>>>>,
    wanted: AtomicBool,
}

impl<K> Informer<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    fn new(resource: &'static str, trim: fn(&mut K)) -> Self {
        let (store, writer) = store_shared(SUBSCRIPTION_BUFFER);
        Informer {
            resource,
            trim,
            store,
            ready: tokio::sync::watch::Sender::new(Readiness::Pending),
            writer: Mutex::new(Some(writer)),
            subscribers: Mutex::new(Vec::new()),
            wanted: AtomicBool::new(false),
        }
    }

    fn store(&self) -> Store<K> {
        self.wanted.store(true, Ordering::SeqCst);
        self.store.clone()
    }

    fn subscribe(&self) -> ReflectHandle<K> {
        self.wanted.store(true, Ordering::SeqCst);
        let writer = self.writer.lock();
        match writer.as_ref().and_then(|w| w.subscribe()) {
            Some(handle) => handle,
            None => panic!(
                "the {} informer was already started: subscribe before SharedInformers::start",
                self.resource
            ),
        }
    }

    fn events(&self) -> InformerEvents<K> {
        self.wanted.store(true, Ordering::SeqCst);
        let (tx, rx) = mpsc::unbounded_channel();
        self.subscribers.lock().push(tx);
        rx
    }

    fn broadcast(&self, make: impl Fn() -> InformerEvent<K>) {
        self.subscribers.lock().retain(|tx| tx.send(make()).is_ok());
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

    async fn run(&self, api: Api<K>, writer: Writer<K>, shutdown: CancellationToken) {
        let config = watcher::Config::default().page_size(LIST_PAGE_SIZE);
        let stream = watcher(api, config)
            .default_backoff()
            .modify(self.trim)
            .reflect_shared(writer);
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
                        .get(&ObjectRef::from_obj(&obj))
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

/// Annotation `kubectl apply` keeps the whole previous object in.
const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Removes server-side bookkeeping no controller reads: managed fields and kubectl's last-applied copy.
pub fn trim_metadata<K: Resource>(obj: &mut K) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED_ANNOTATION);
    }
}

/// [`trim_metadata`] plus the node status no controller or provider reads: container images, volume
/// attachments, `nodeInfo`, capacity, allocatable, daemon endpoints, config, runtime handlers, features and
/// phase. The spec, addresses and conditions are kept.
pub fn trim_node(node: &mut Node) {
    trim_metadata(node);
    if let Some(status) = node.status.as_mut() {
        status.images = None;
        status.volumes_attached = None;
        status.volumes_in_use = None;
        status.node_info = None;
        status.capacity = None;
        status.allocatable = None;
        status.daemon_endpoints = None;
        status.config = None;
        status.runtime_handlers = None;
        status.features = None;
        status.phase = None;
    }
}

/// A copy of `node` with only what cloud providers read from the nodes handed to them: name, UID, labels,
/// annotations, the spec (provider ID, taints, pod CIDRs) and the status addresses and conditions. Used for
/// the node lists of cloud calls so that they do not duplicate whole store objects.
pub fn slim_node(node: &Node) -> Node {
    let meta = &node.metadata;
    Node {
        metadata: kube::api::ObjectMeta {
            name: meta.name.clone(),
            uid: meta.uid.clone(),
            labels: meta.labels.clone(),
            annotations: meta.annotations.clone(),
            ..Default::default()
        },
        spec: node.spec.clone(),
        status: node
            .status
            .as_ref()
            .map(|s| k8s_openapi::api::core::v1::NodeStatus {
                addresses: s.addresses.clone(),
                conditions: s.conditions.clone(),
                ..Default::default()
            }),
    }
}

struct Inner {
    client: kube::Client,
    nodes: Arc<Informer<Node>>,
    services: Arc<Informer<Service>>,
    persistent_volumes: Arc<Informer<PersistentVolume>>,
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
                nodes: Arc::new(Informer::new("nodes", trim_node)),
                services: Arc::new(Informer::new("services", trim_metadata::<Service>)),
                persistent_volumes: Arc::new(Informer::new(
                    "persistentvolumes",
                    trim_metadata::<PersistentVolume>,
                )),
                started: AtomicBool::new(false),
            }),
        }
    }

    /// The node store (the node informer will run).
    pub fn nodes(&self) -> Store<Node> {
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

    /// A kube-runtime subscription to node changes.
    ///
    /// # Panics
    /// When called after [`SharedInformers::start`].
    pub fn subscribe_nodes(&self) -> ReflectHandle<Node> {
        self.inner.nodes.subscribe()
    }

    /// A kube-runtime subscription to service changes.
    ///
    /// # Panics
    /// When called after [`SharedInformers::start`].
    pub fn subscribe_services(&self) -> ReflectHandle<Service> {
        self.inner.services.subscribe()
    }

    /// A kube-runtime subscription to PersistentVolume changes.
    ///
    /// # Panics
    /// When called after [`SharedInformers::start`].
    pub fn subscribe_persistent_volumes(&self) -> ReflectHandle<PersistentVolume> {
        self.inner.persistent_volumes.subscribe()
    }

    /// Node changes including deletions and re-lists. Subscribe before starting to see the initial list.
    pub fn node_events(&self) -> InformerEvents<Node> {
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
    use k8s_openapi::api::core::v1::{ContainerImage, NodeAddress, NodeStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;

    #[test]
    fn trimming_keeps_what_controllers_read() {
        let mut node = Node::default();
        node.metadata.managed_fields = Some(vec![ManagedFieldsEntry::default()]);
        node.metadata.annotations = Some(
            [
                (LAST_APPLIED_ANNOTATION.to_string(), "{}".to_string()),
                ("keep".to_string(), "me".to_string()),
            ]
            .into(),
        );
        node.status = Some(NodeStatus {
            images: Some(vec![ContainerImage::default()]),
            addresses: Some(vec![NodeAddress {
                type_: "InternalIP".into(),
                address: "10.0.0.1".into(),
            }]),
            ..NodeStatus::default()
        });
        let full = node.clone();
        trim_node(&mut node);
        assert!(node.metadata.managed_fields.is_none());
        let slim = slim_node(&full);
        assert!(slim.status.as_ref().unwrap().images.is_none());
        assert_eq!(slim.metadata.name, full.metadata.name);
        assert_eq!(
            slim.status.as_ref().unwrap().addresses,
            full.status.as_ref().unwrap().addresses
        );
        let annotations = node.metadata.annotations.as_ref().unwrap();
        assert_eq!(annotations.len(), 1);
        assert_eq!(annotations["keep"], "me");
        let status = node.status.as_ref().unwrap();
        assert!(status.images.is_none());
        assert_eq!(status.addresses.as_ref().unwrap().len(), 1);
    }
}
