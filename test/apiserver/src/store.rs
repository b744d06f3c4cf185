//! The in-memory storage: one `BTreeMap` per storage keyed by (namespace, name), a single global
//! resourceVersion counter, a bounded history of changes for watches, and a broadcast channel per
//! storage. Objects are kept serialised (the list item form, without kind/apiVersion).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::RwLock;
use serde_json::Value;
use tokio::sync::{broadcast, watch};

use crate::error::ApiError;
use crate::object;
use crate::resources::Storage;
use crate::service::ServiceAllocator;
use crate::strategy;

/// (namespace, name); the namespace is empty for cluster-scoped objects.
pub(crate) type ObjKey = (String, String);

/// One stored object version.
#[derive(Debug)]
pub(crate) struct Stored {
    pub rv: u64,
    pub uid: Box<str>,
    /// The object serialised without kind/apiVersion.
    pub bytes: Bytes,
    labels: Box<[(Box<str>, Box<str>)]>,
    fields: Box<[(&'static str, Box<str>)]>,
}

impl Stored {
    /// A label value.
    pub(crate) fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| &**k == key)
            .map(|(_, v)| &**v)
    }

    /// A selectable field value (other than metadata.name/namespace).
    pub(crate) fn field(&self, key: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| &**v)
    }

    /// The object as JSON (item form).
    pub(crate) fn value(&self) -> Value {
        serde_json::from_slice(&self.bytes).unwrap_or(Value::Null)
    }
}

/// The type of a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChangeType {
    Added,
    Modified,
    Deleted,
}

/// One committed change, as watchers see it.
#[derive(Debug)]
pub(crate) struct Change {
    pub rv: u64,
    pub storage: Storage,
    pub key: ObjKey,
    pub kind: ChangeType,
    /// The new state (for deletions: the last state, at the deletion's resourceVersion).
    pub object: Arc<Stored>,
    /// The previous state, for updates and deletions.
    pub prev: Option<Arc<Stored>>,
}

struct Tables {
    rv: u64,
    maps: Vec<BTreeMap<ObjKey, Arc<Stored>>>,
    history: VecDeque<Arc<Change>>,
    /// Every change with rv > history_start is in `history`.
    history_start: u64,
    /// Continue tokens older than this are rejected with 410.
    compacted: u64,
    window: usize,
    services: ServiceAllocator,
}

/// The storage of the server.
pub(crate) struct Store {
    inner: RwLock<Tables>,
    senders: Vec<broadcast::Sender<Arc<Change>>>,
    rv_tx: watch::Sender<u64>,
}

/// What a new watch starts with.
pub(crate) enum WatchStart {
    /// Replay of the changes after the requested resourceVersion.
    Replay(Vec<Arc<Change>>),
    /// The current objects (for watches without a resourceVersion), at the snapshot resourceVersion.
    Snapshot(Vec<(ObjKey, Arc<Stored>)>),
}

/// A write transaction: holds the write lock; changes are published when it ends.
pub(crate) struct Txn<'a> {
    t: &'a mut Tables,
    senders: &'a [broadcast::Sender<Arc<Change>>],
    changed: bool,
}

fn labels_of(v: &Value) -> Box<[(Box<str>, Box<str>)]> {
    v["metadata"]["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.as_str().into(), v.as_str().unwrap_or("").into()))
                .collect()
        })
        .unwrap_or_default()
}

impl Txn<'_> {
    /// The current object at `key`.
    pub(crate) fn get(&self, s: Storage, key: &ObjKey) -> Option<Arc<Stored>> {
        self.t.maps[s.index()].get(key).cloned()
    }

    /// The service allocator.
    pub(crate) fn services(&mut self) -> &mut ServiceAllocator {
        &mut self.t.services
    }

    /// Whether a namespace exists, and whether it is terminating.
    pub(crate) fn namespace(&self, ns: &str) -> Option<bool> {
        self.t.maps[Storage::Namespaces.index()]
            .get(&(String::new(), ns.to_string()))
            .map(|n| n.value()["metadata"]["deletionTimestamp"].is_string())
    }

    /// The keys of every object of `s` in namespace `ns`.
    pub(crate) fn keys_in_namespace(&self, s: Storage, ns: &str) -> Vec<ObjKey> {
        self.t.maps[s.index()]
            .range((ns.to_string(), String::new())..)
            .take_while(|(k, _)| k.0 == ns)
            .map(|(k, _)| k.clone())
            .collect()
    }

    fn publish(&mut self, change: Change) {
        let change = Arc::new(change);
        self.t.history.push_back(change.clone());
        while self.t.history.len() > self.t.window {
            if let Some(old) = self.t.history.pop_front() {
                self.t.history_start = old.rv;
            }
        }
        // No receivers is not an error.
        let _ = self.senders[change.storage.index()].send(change);
        self.changed = true;
    }

    fn encode(s: Storage, rv: u64, mut value: Value) -> Stored {
        object::set_meta(&mut value, "resourceVersion", Value::String(rv.to_string()));
        object::strip_type_meta(&mut value);
        object::order_keys(&mut value);
        let uid = object::str_at(&value, &["metadata", "uid"])
            .unwrap_or("")
            .into();
        let labels = labels_of(&value);
        let fields = strategy::selectable_fields(s, &value)
            .into_iter()
            .map(|(k, v)| (k, v.into_boxed_str()))
            .collect();
        let bytes = Bytes::from(serde_json::to_vec(&value).unwrap_or_else(|_| b"{}".to_vec()));
        Stored {
            rv,
            uid,
            bytes,
            labels,
            fields,
        }
    }

    /// Stores `value` (item form; its resourceVersion is assigned here) and publishes the change.
    pub(crate) fn put(&mut self, s: Storage, key: ObjKey, value: Value) -> Arc<Stored> {
        self.t.rv += 1;
        let rv = self.t.rv;
        let stored = Arc::new(Self::encode(s, rv, value));
        let prev = self.t.maps[s.index()].insert(key.clone(), stored.clone());
        let kind = if prev.is_some() {
            ChangeType::Modified
        } else {
            ChangeType::Added
        };
        self.publish(Change {
            rv,
            storage: s,
            key,
            kind,
            object: stored.clone(),
            prev,
        });
        stored
    }

    /// Removes the object at `key`; `last` is its final state, stored in the DELETED event at a new
    /// resourceVersion.
    pub(crate) fn delete(&mut self, s: Storage, key: &ObjKey, last: Value) -> Option<Arc<Stored>> {
        let prev = self.t.maps[s.index()].remove(key)?;
        if s == Storage::Services {
            self.t.services.release(&last);
        }
        self.t.rv += 1;
        let rv = self.t.rv;
        let stored = Arc::new(Self::encode(s, rv, last));
        self.publish(Change {
            rv,
            storage: s,
            key: key.clone(),
            kind: ChangeType::Deleted,
            object: stored.clone(),
            prev: Some(prev),
        });
        Some(stored)
    }
}

/// A read view for listing.
pub(crate) struct ReadView<'a> {
    t: &'a Tables,
}

impl ReadView<'_> {
    /// The current resourceVersion.
    pub(crate) fn rv(&self) -> u64 {
        self.t.rv
    }

    /// The objects of `s` from `lower`, in key order.
    pub(crate) fn range_from<'k>(
        &self,
        s: Storage,
        lower: std::ops::Bound<&'k ObjKey>,
    ) -> impl Iterator<Item = (&ObjKey, &Arc<Stored>)> + use<'_, 'k> {
        self.t.maps[s.index()].range((lower, std::ops::Bound::Unbounded))
    }

    /// The continue-token compaction mark.
    pub(crate) fn compacted(&self) -> u64 {
        self.t.compacted
    }
}

impl Store {
    /// An empty store whose watch channels hold `capacity` pending changes per storage.
    pub(crate) fn with_channel_capacity(
        window: usize,
        services: ServiceAllocator,
        capacity: usize,
    ) -> Self {
        let senders = Storage::ALL
            .iter()
            .map(|_| broadcast::channel(capacity.max(16)).0)
            .collect();
        Self {
            inner: RwLock::new(Tables {
                rv: 0,
                maps: Storage::ALL.iter().map(|_| BTreeMap::new()).collect(),
                history: VecDeque::new(),
                history_start: 0,
                compacted: 0,
                window: window.max(1),
                services,
            }),
            senders,
            rv_tx: watch::channel(0).0,
        }
    }

    /// Runs `f` under the write lock. Changes are visible to watchers in commit order.
    pub(crate) fn write<R>(&self, f: impl FnOnce(&mut Txn<'_>) -> R) -> R {
        let mut guard = self.inner.write();
        let mut txn = Txn {
            t: &mut guard,
            senders: &self.senders,
            changed: false,
        };
        let r = f(&mut txn);
        if txn.changed {
            let rv = txn.t.rv;
            self.rv_tx.send_replace(rv);
        }
        r
    }

    /// Runs `f` under the read lock.
    pub(crate) fn read<R>(&self, f: impl FnOnce(&ReadView<'_>) -> R) -> R {
        let guard = self.inner.read();
        f(&ReadView { t: &guard })
    }

    /// The object at `key`.
    pub(crate) fn get(&self, s: Storage, key: &ObjKey) -> Option<Arc<Stored>> {
        self.inner.read().maps[s.index()].get(key).cloned()
    }

    /// The current resourceVersion.
    pub(crate) fn current_rv(&self) -> u64 {
        self.inner.read().rv
    }

    /// A receiver of resourceVersion progress.
    pub(crate) fn rv_receiver(&self) -> watch::Receiver<u64> {
        self.rv_tx.subscribe()
    }

    /// Drops the whole history: every resourceVersion older than the current one becomes too old
    /// for watches (410) and for continue tokens. Returns the current resourceVersion.
    pub(crate) fn compact(&self) -> u64 {
        let mut t = self.inner.write();
        t.history.clear();
        t.history_start = t.rv;
        t.compacted = t.rv;
        t.rv
    }

    /// Changes the history window (trimming the history if needed).
    pub(crate) fn set_window(&self, window: usize) {
        let mut t = self.inner.write();
        t.window = window.max(1);
        while t.history.len() > t.window {
            if let Some(old) = t.history.pop_front() {
                t.history_start = old.rv;
            }
        }
    }

    /// Subscribes a watch on `s`. `from` is the requested resourceVersion (`None`: start with the
    /// current objects). Returns the receiver, what to send first, and the resourceVersion the
    /// stream starts after.
    pub(crate) fn watch(
        &self,
        s: Storage,
        from: Option<u64>,
    ) -> Result<(broadcast::Receiver<Arc<Change>>, WatchStart, u64), ApiError> {
        let t = self.inner.read();
        let rx = self.senders[s.index()].subscribe();
        match from {
            None => {
                let snapshot = t.maps[s.index()]
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                Ok((rx, WatchStart::Snapshot(snapshot), t.rv))
            }
            Some(rv) => {
                if rv < t.history_start {
                    return Err(ApiError::expired(format!(
                        "too old resource version: {rv} ({})",
                        t.history_start
                    )));
                }
                let replay = t
                    .history
                    .iter()
                    .filter(|c| c.rv > rv && c.storage == s)
                    .cloned()
                    .collect();
                Ok((rx, WatchStart::Replay(replay), rv))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::parse_cidr;
    use serde_json::json;

    fn store(window: usize) -> Store {
        Store::with_channel_capacity(
            window,
            ServiceAllocator::new(parse_cidr("10.96.0.0/12").unwrap(), 30000, 32767, 1),
            64,
        )
    }

    fn key(n: &str) -> ObjKey {
        (String::new(), n.to_string())
    }

    #[test]
    fn put_assigns_versions_and_publishes() {
        let st = store(100);
        let (mut rx, start, after) = st.watch(Storage::Nodes, Some(0)).unwrap();
        assert!(matches!(start, WatchStart::Replay(ref v) if v.is_empty()));
        assert_eq!(after, 0);
        let a = st.write(|t| {
            t.put(
                Storage::Nodes,
                key("a"),
                json!({"kind":"Node","metadata":{"name":"a","labels":{"x":"1"}}}),
            )
        });
        assert_eq!(a.rv, 1);
        assert_eq!(a.label("x"), Some("1"));
        assert_eq!(a.value()["metadata"]["resourceVersion"], "1");
        assert!(a.value().get("kind").is_none());
        let c = rx.try_recv().unwrap();
        assert_eq!(c.kind, ChangeType::Added);
        let b = st.write(|t| t.put(Storage::Nodes, key("a"), json!({"metadata":{"name":"a"}})));
        assert_eq!(b.rv, 2);
        assert_eq!(rx.try_recv().unwrap().kind, ChangeType::Modified);
        let d = st
            .write(|t| t.delete(Storage::Nodes, &key("a"), b.value()))
            .unwrap();
        assert_eq!(d.rv, 3);
        let c = rx.try_recv().unwrap();
        assert_eq!(c.kind, ChangeType::Deleted);
        assert_eq!(c.prev.as_ref().unwrap().rv, 2);
        assert!(st.get(Storage::Nodes, &key("a")).is_none());
    }

    #[test]
    fn history_window_and_compaction() {
        let st = store(2);
        for n in ["a", "b", "c"] {
            st.write(|t| t.put(Storage::Nodes, key(n), json!({"metadata":{"name":n}})));
        }
        // Events 2 and 3 are held; 1 fell out of the window.
        let err = st.watch(Storage::Nodes, Some(0)).err().unwrap();
        assert_eq!(err.code, 410);
        assert_eq!(err.message, "too old resource version: 0 (1)");
        let (_, start, _) = st.watch(Storage::Nodes, Some(1)).unwrap();
        assert!(matches!(start, WatchStart::Replay(ref v) if v.len() == 2));
        assert_eq!(st.compact(), 3);
        assert!(st.watch(Storage::Nodes, Some(2)).is_err());
        let (_, start, _) = st.watch(Storage::Nodes, Some(3)).unwrap();
        assert!(matches!(start, WatchStart::Replay(ref v) if v.is_empty()));
        let (_, start, at) = st.watch(Storage::Nodes, None).unwrap();
        assert!(matches!(start, WatchStart::Snapshot(ref v) if v.len() == 3));
        assert_eq!(at, 3);
    }

    #[test]
    fn a_slow_watcher_never_blocks_writers() {
        let st = Store::with_channel_capacity(
            100,
            ServiceAllocator::new(parse_cidr("10.96.0.0/12").unwrap(), 30000, 32767, 1),
            16,
        );
        let (mut rx, _, _) = st.watch(Storage::Nodes, None).unwrap();
        for i in 0..100 {
            let n = format!("n{i}");
            st.write(|t| t.put(Storage::Nodes, key(&n), json!({"metadata":{"name":n}})));
        }
        assert_eq!(st.current_rv(), 100);
        assert!(matches!(
            rx.try_recv(),
            Err(broadcast::error::TryRecvError::Lagged(_))
        ));
    }
}
