//! Watch streams: newline-delimited JSON events (ADDED, MODIFIED, DELETED, BOOKMARK, ERROR),
//! one task per watch, fed by the storage's broadcast channel. A watcher that falls too far behind
//! is ended (it re-lists, as it would against a real server); writers never wait for watchers.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use serde_json::{Map, Value, json};
use tokio::sync::{broadcast, mpsc};
use tokio::time::{Instant, sleep_until};

use crate::api::{Filter, WatchPlan, view_full, view_full_value};
use crate::error::ApiError;
use crate::object;
use crate::resources::ResourceDef;
use crate::state::State;
use crate::store::{Change, ChangeType, Stored, WatchStart};
use crate::strategy;
use crate::table::{self, Representation};

/// Decrements the open-watch counter when the watch task ends.
struct OpenGuard(Arc<State>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.controls.open_watches.fetch_sub(1, Ordering::SeqCst);
    }
}

fn event_line(kind: &str, object: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(object.len() + 32);
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\",\"object\":");
    out.extend_from_slice(object);
    out.extend_from_slice(b"}\n");
    Bytes::from(out)
}

fn bookmark(def: &ResourceDef, rv: u64, initial_end: bool) -> Vec<u8> {
    let mut meta = Map::new();
    meta.insert("resourceVersion".into(), json!(rv.to_string()));
    meta.insert("creationTimestamp".into(), Value::Null);
    if initial_end {
        meta.insert(
            "annotations".into(),
            json!({"k8s.io/initial-events-end": "true"}),
        );
    }
    let mut obj = Map::new();
    obj.insert("kind".into(), json!(def.kind));
    obj.insert("apiVersion".into(), json!(def.api_version()));
    obj.insert("metadata".into(), Value::Object(meta));
    for (k, v) in strategy::bookmark_body(def) {
        obj.insert(k, v);
    }
    serde_json::to_vec(&Value::Object(obj)).unwrap_or_default()
}

/// Renders the objects of a watch's events as the client asked (a Table sends its column
/// definitions with the first event only, as upstream).
struct Renderer {
    repr: Representation,
}

impl Renderer {
    /// The event line of `object` (its full JSON).
    fn line(&mut self, def: &ResourceDef, kind: &str, object: Vec<u8>) -> Bytes {
        if self.repr == Representation::Object {
            return event_line(kind, &object);
        }
        let value: Value = serde_json::from_slice(&object).unwrap_or(Value::Null);
        let rendered = table::render_object(def, &value, &self.repr)
            .and_then(|v| serde_json::to_vec(&v).ok())
            .unwrap_or(object);
        if let Representation::Table(opts) = &mut self.repr {
            opts.no_headers = true;
        }
        event_line(kind, &rendered)
    }
}

/// The event (type and full object JSON) a change produces for a filtered watch, if any. An object
/// that stops matching the selectors is reported DELETED with its previous state at the change's
/// resourceVersion, as the real watch cache does.
fn event_for(def: &ResourceDef, filter: &Filter, c: &Change) -> Option<(&'static str, Vec<u8>)> {
    let now = filter.matches(&c.key, &c.object);
    let before = c.prev.as_ref().is_some_and(|p| filter.matches(&c.key, p));
    let event = |kind: &'static str, obj: &Stored| Some((kind, view_full(def, obj)));
    match c.kind {
        ChangeType::Added if now => event("ADDED", &c.object),
        ChangeType::Added => None,
        ChangeType::Modified => match (before, now, &c.prev) {
            (true, true, _) => event("MODIFIED", &c.object),
            (false, true, _) => event("ADDED", &c.object),
            (true, false, Some(prev)) => {
                let mut v = prev.value();
                object::set_meta(&mut v, "resourceVersion", json!(c.rv.to_string()));
                Some(("DELETED", view_full_value(def, v)))
            }
            _ => None,
        },
        ChangeType::Deleted if before || now => event("DELETED", &c.object),
        ChangeType::Deleted => None,
    }
}

/// The ERROR event line for an error that happens after the stream has started (e.g. 410).
pub(crate) fn error_line(e: &ApiError) -> Bytes {
    event_line(
        "ERROR",
        &serde_json::to_vec(&e.status_body()).unwrap_or_default(),
    )
}

/// Starts a watch; returns the receiving end of the stream's lines.
pub(crate) fn start(state: Arc<State>, plan: WatchPlan) -> mpsc::Receiver<Bytes> {
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    let storage = plan.def.storage();
    let subscribed = match storage {
        Some(s) => state.store.watch(s, plan.from),
        None => Err(ApiError::method_not_allowed()),
    };
    state.controls.open_watches.fetch_add(1, Ordering::SeqCst);
    let guard = OpenGuard(state.clone());
    tokio::spawn(async move {
        let _guard = guard;
        let (rx_changes, start, after) = match subscribed {
            Ok(x) => x,
            Err(e) => {
                let _ = tx.send(error_line(&e)).await;
                return;
            }
        };
        run(state, plan, tx, rx_changes, start, after).await;
    });
    rx
}

struct Sender {
    tx: mpsc::Sender<Bytes>,
    deadline: Instant,
    close: tokio::sync::watch::Receiver<u64>,
    shutdown: tokio::sync::watch::Receiver<bool>,
}

impl Sender {
    /// Sends a line unless the watch ends first; false when the stream is over.
    async fn send(&mut self, line: Bytes) -> bool {
        tokio::select! {
            r = self.tx.send(line) => r.is_ok(),
            _ = sleep_until(self.deadline) => false,
            _ = self.close.changed() => false,
            _ = self.shutdown.changed() => false,
        }
    }
}

async fn run(
    state: Arc<State>,
    plan: WatchPlan,
    tx: mpsc::Sender<Bytes>,
    mut changes: broadcast::Receiver<Arc<Change>>,
    start: WatchStart,
    after: u64,
) {
    let def = plan.def;
    let mut close = state.controls.close_watches.subscribe();
    close.borrow_and_update();
    let mut shutdown = state.shutdown.clone();
    if *shutdown.borrow_and_update() {
        return;
    }
    let mut out = Sender {
        tx,
        deadline: Instant::now() + plan.timeout,
        close: close.clone(),
        shutdown: shutdown.clone(),
    };
    let mut last_seen = after;
    let mut last_bookmark = after;
    let mut render = Renderer {
        repr: plan.representation,
    };
    match start {
        WatchStart::Snapshot(items) => {
            for (key, obj) in items.iter() {
                if plan.filter.matches(key, obj)
                    && !out
                        .send(render.line(def, "ADDED", view_full(def, obj)))
                        .await
                {
                    return;
                }
            }
            if plan.send_initial_events && plan.bookmarks {
                if !out
                    .send(render.line(def, "BOOKMARK", bookmark(def, after, true)))
                    .await
                {
                    return;
                }
                last_bookmark = after;
            }
        }
        WatchStart::Replay(list) => {
            for c in list.iter() {
                last_seen = c.rv;
                if let Some((kind, obj)) = event_for(def, &plan.filter, c)
                    && !out.send(render.line(def, kind, obj)).await
                {
                    return;
                }
            }
        }
    }
    let mut tick = tokio::time::interval(state.cfg.bookmark_interval);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = close.changed() => break,
            _ = shutdown.changed() => break,
            _ = sleep_until(out.deadline) => break,
            _ = out.tx.closed() => break,
            r = changes.recv() => match r {
                Ok(c) => {
                    if c.rv <= after {
                        continue;
                    }
                    last_seen = c.rv;
                    if let Some((kind, obj)) = event_for(def, &plan.filter, &c)
                        && !out.send(render.line(def, kind, obj)).await
                    {
                        break;
                    }
                }
                // Too far behind (or the server is going away): end the stream.
                Err(_) => break,
            },
            _ = tick.tick(), if plan.bookmarks => {
                if last_seen > last_bookmark {
                    if !out.send(render.line(def, "BOOKMARK", bookmark(def, last_seen, false))).await {
                        break;
                    }
                    last_bookmark = last_seen;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines() {
        let l = event_line("ADDED", br#"{"a":1}"#);
        assert_eq!(&l[..], b"{\"type\":\"ADDED\",\"object\":{\"a\":1}}\n");
        let nodes = crate::resources::find("", "v1", "nodes").unwrap();
        let mut render = Renderer {
            repr: Representation::Object,
        };
        let b = render.line(nodes, "BOOKMARK", bookmark(nodes, 7, true));
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["type"], "BOOKMARK");
        assert_eq!(v["object"]["kind"], "Node");
        assert_eq!(v["object"]["metadata"]["resourceVersion"], "7");
        assert_eq!(
            v["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
            "true"
        );
        let e = error_line(&ApiError::expired("too old resource version: 1 (2)"));
        let v: Value = serde_json::from_slice(&e).unwrap();
        assert_eq!(
            v,
            json!({"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (2)","reason":"Expired","code":410}})
        );
    }
}
