//! Event recording as core `v1` Events, the way upstream's controllers record them (client-go's event
//! recorder): `source.component` and `reportingComponent` name the controller as upstream does, `count`,
//! `firstTimestamp` and `lastTimestamp` describe repeats, and the writes (`create`, then strategic-merge
//! `patch` of a repeat) are exactly what upstream's published RBAC grants on `events`. Off the controllers'
//! critical path.
//!
//! [`EventRecorder::publish`] never waits: it records the occurrence in memory and wakes a background writer
//! that creates the Event with the event client (which has its own rate budget in the daemon). Repeats of the
//! same event (same object, type, reason and action) within [`SERIES_WINDOW`] are aggregated into the Event's
//! `count` (the latest message wins) instead of creating more Events, so a burst never turns into a burst of
//! writes and nothing is silently lost: a failed write is retried with backoff and, if it finally fails, counted
//! (`cloud_controllers_events_total{outcome="failed"}`) and logged. Memory is bounded: at most
//! [`MAX_PENDING`] distinct events waiting to be written (a distinct event beyond that is counted as
//! `dropped` and logged) and at most [`MAX_REMEMBERED`] already written events remembered for aggregation.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::Patch;
use kube::{Api, Resource, ResourceExt};
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::identity;
use crate::metrics::ControllerMetrics;

/// Isomorphic events observed within this window of the previous occurrence form one series.
pub const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);
/// Distinct events that may wait to be written at the same time.
pub const MAX_PENDING: usize = 16_384;
/// Written events remembered for aggregation (the oldest are forgotten first).
pub const MAX_REMEMBERED: usize = 1_024;
/// Concurrent event writes of one recorder.
const MAX_IN_FLIGHT: usize = 16;
/// Attempts for one event write before it is counted as failed.
const MAX_ATTEMPTS: u32 = 6;
/// Longest message written (bytes; the `events.k8s.io` view of an Event accepts 1 KiB of note).
const MAX_NOTE_BYTES: usize = 1024;
/// Longest reason, action, reporting controller or instance the API accepts.
const MAX_FIELD_CHARS: usize = 128;

/// The type of an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    /// Something expected happened.
    Normal,
    /// Something went wrong or needs attention.
    Warning,
}

impl EventType {
    /// The API string, `Normal` or `Warning`.
    pub fn as_str(&self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// A reference to `obj` for the `involvedObject` field of an event (kind, apiVersion, namespace, name, uid; no
/// resourceVersion, so that events about successive versions of an object aggregate).
pub fn object_ref<K>(obj: &K) -> ObjectReference
where
    K: Resource<DynamicType = ()>,
{
    ObjectReference {
        api_version: Some(K::api_version(&()).into_owned()),
        kind: Some(K::kind(&()).into_owned()),
        name: obj.meta().name.clone(),
        namespace: obj.meta().namespace.clone(),
        uid: obj.meta().uid.clone(),
        ..ObjectReference::default()
    }
}

/// What makes occurrences one event: the object, type, reason and action. The object's reference is
/// held once per event, shared by the entry's key, the queue and the write.
#[derive(Clone, Debug)]
struct EventKey {
    type_: EventType,
    reason: Box<str>,
    action: Box<str>,
    regarding: Arc<ObjectReference>,
}

impl EventKey {
    /// The fields that tell events apart (the reference's kind, apiVersion, namespace, name and uid).
    fn identity(&self) -> (EventType, &str, &str, [&Option<String>; 5]) {
        let r = &*self.regarding;
        (
            self.type_,
            &self.reason,
            &self.action,
            [&r.api_version, &r.kind, &r.namespace, &r.name, &r.uid],
        )
    }
}

impl PartialEq for EventKey {
    fn eq(&self, other: &Self) -> bool {
        self.identity() == other.identity()
    }
}

impl Eq for EventKey {}

impl std::hash::Hash for EventKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.identity().hash(state);
    }
}

#[derive(Debug)]
struct Entry {
    note: String,
    /// Occurrences observed so far.
    count: u32,
    first_time: Timestamp,
    last_time: Timestamp,
    /// Namespace and name of the Event object once created.
    written: Option<(String, String)>,
    /// Waiting in the queue (or to be queued again when its write finishes).
    dirty: bool,
    in_flight: bool,
}

#[derive(Default)]
struct State {
    entries: HashMap<EventKey, Entry>,
    queue: VecDeque<EventKey>,
    pending: usize,
    in_flight: usize,
}

struct Shared {
    state: Mutex<State>,
    wake: Notify,
    idle: Notify,
    closed: AtomicBool,
    sequence: AtomicU64,
    dropped_logged: AtomicU64,
    metrics: ControllerMetrics,
    reporting_controller: String,
    reporting_instance: String,
}

struct Handle {
    shared: Arc<Shared>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::SeqCst);
        self.shared.wake.notify_one();
    }
}

/// Records events for one controller; cheap to clone. The writer task ends once every clone is dropped and
/// everything queued has been written (or has failed).
#[derive(Clone)]
pub struct EventRecorder {
    handle: Arc<Handle>,
}

impl std::fmt::Debug for EventRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventRecorder")
            .field(
                "reporting_controller",
                &self.handle.shared.reporting_controller,
            )
            .field("reporting_instance", &self.handle.shared.reporting_instance)
            .finish()
    }
}

fn truncate_chars(s: &str, max: usize) -> String {
    s.chars().take(max).collect()
}

fn truncate_bytes(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

impl EventRecorder {
    /// A recorder writing with `client` as `reporting_controller` / `reporting_instance`. Starts the
    /// writer task, so it must be called inside a Tokio runtime.
    pub fn new(
        client: kube::Client,
        reporting_controller: &str,
        reporting_instance: &str,
        metrics: ControllerMetrics,
    ) -> Self {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            wake: Notify::new(),
            idle: Notify::new(),
            closed: AtomicBool::new(false),
            sequence: AtomicU64::new(0),
            dropped_logged: AtomicU64::new(0),
            metrics,
            reporting_controller: truncate_chars(reporting_controller, MAX_FIELD_CHARS),
            reporting_instance: truncate_chars(reporting_instance, MAX_FIELD_CHARS),
        });
        tokio::spawn(writer(client, shared.clone()));
        EventRecorder {
            handle: Arc::new(Handle { shared }),
        }
    }

    /// Records an event about `regarding`. Never blocks: the event is written in the background, aggregated
    /// with earlier identical ones (same object, type, reason and action) into a series.
    pub fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let shared = &self.handle.shared;
        let key = EventKey {
            type_,
            reason: truncate_chars(reason, MAX_FIELD_CHARS).into_boxed_str(),
            action: truncate_chars(action, MAX_FIELD_CHARS).into_boxed_str(),
            regarding: Arc::new(regarding.clone()),
        };
        let note = truncate_bytes(&note, MAX_NOTE_BYTES);
        let now = Timestamp::now();
        let mut guard = shared.state.lock();
        let state = &mut *guard;
        if let Some(entry) = state.entries.get_mut(&key) {
            let expired = !entry.dirty
                && !entry.in_flight
                && now.duration_since(entry.last_time).unsigned_abs() > SERIES_WINDOW;
            if !expired {
                entry.count = entry.count.saturating_add(1);
                entry.last_time = now;
                entry.note = note;
                if !entry.dirty {
                    entry.dirty = true;
                    if !entry.in_flight {
                        state.pending += 1;
                        state.queue.push_back(key);
                    }
                }
                shared.metrics.event_outcome("aggregated");
                drop(guard);
                shared.wake.notify_one();
                return;
            }
            state.entries.remove(&key);
        }
        if state.pending >= MAX_PENDING {
            shared.metrics.event_outcome("dropped");
            let n = shared.dropped_logged.fetch_add(1, Ordering::Relaxed);
            if n.is_power_of_two() || n == 0 {
                tracing::warn!(
                    controller = %shared.reporting_controller,
                    reason = %key.reason,
                    object = ?regarding.name,
                    dropped_so_far = n + 1,
                    "event writer is {MAX_PENDING} distinct events behind; dropping a new event"
                );
            }
            return;
        }
        if state.entries.len() - state.pending.min(state.entries.len()) >= MAX_REMEMBERED {
            forget_oldest_written(state);
        }
        state.entries.insert(
            key.clone(),
            Entry {
                note,
                count: 1,
                first_time: now,
                last_time: now,
                written: None,
                dirty: true,
                in_flight: false,
            },
        );
        state.pending += 1;
        state.queue.push_back(key);
        drop(guard);
        shared.wake.notify_one();
    }

    /// Waits until everything published so far has been written (or has failed), at most `timeout`.
    /// Returns whether the queue drained.
    pub async fn flush(&self, timeout: Duration) -> bool {
        let shared = self.handle.shared.clone();
        let wait = async move {
            loop {
                let idle = shared.idle.notified();
                {
                    let state = shared.state.lock();
                    if state.pending == 0 && state.in_flight == 0 {
                        return;
                    }
                }
                idle.await;
            }
        };
        tokio::time::timeout(timeout, wait).await.is_ok()
    }

    /// Number of distinct events waiting to be written or being written.
    pub fn backlog(&self) -> usize {
        let state = self.handle.shared.state.lock();
        state.pending + state.in_flight
    }
}

/// Forgets the older half of the written (clean) entries.
fn forget_oldest_written(state: &mut State) {
    let mut clean: Vec<(Timestamp, EventKey)> = state
        .entries
        .iter()
        .filter(|(_, e)| !e.dirty && !e.in_flight)
        .map(|(k, e)| (e.last_time, k.clone()))
        .collect();
    if clean.is_empty() {
        return;
    }
    let half = clean.len().div_ceil(2);
    clean.select_nth_unstable_by(half - 1, |a, b| a.0.cmp(&b.0));
    for (_, key) in clean.into_iter().take(half) {
        state.entries.remove(&key);
    }
}

/// Forgets written entries whose series window has passed.
fn forget_expired(state: &mut State, now: Timestamp) {
    state.entries.retain(|_, e| {
        e.dirty || e.in_flight || now.duration_since(e.last_time).unsigned_abs() <= SERIES_WINDOW
    });
}

/// A write to perform, snapshotted from an entry.
struct WriteJob {
    key: EventKey,
    note: String,
    count: u32,
    first_time: Timestamp,
    last_time: Timestamp,
    written: Option<(String, String)>,
}

enum WriteOutcome {
    Written { namespace: String, name: String },
    Failed,
}

async fn writer(client: kube::Client, shared: Arc<Shared>) {
    let mut in_flight = FuturesUnordered::new();
    let mut last_expiry = tokio::time::Instant::now();
    loop {
        // Start as many writes as allowed.
        let jobs = take_jobs(&shared, MAX_IN_FLIGHT - in_flight.len());
        for job in jobs {
            in_flight.push(write_event(client.clone(), shared.clone(), job));
        }
        if last_expiry.elapsed() > Duration::from_secs(60) {
            last_expiry = tokio::time::Instant::now();
            forget_expired(&mut shared.state.lock(), Timestamp::now());
        }
        if in_flight.is_empty() {
            {
                let state = shared.state.lock();
                if state.pending == 0 {
                    shared.idle.notify_waiters();
                    if shared.closed.load(Ordering::SeqCst) {
                        return;
                    }
                }
            }
            let notified = shared.wake.notified();
            {
                let state = shared.state.lock();
                if !state.queue.is_empty() {
                    continue;
                }
            }
            if shared.closed.load(Ordering::SeqCst) {
                continue;
            }
            let _ = tokio::time::timeout(Duration::from_secs(60), notified).await;
            continue;
        }
        let notified = shared.wake.notified();
        tokio::select! {
            Some((key, outcome, count)) = in_flight.next() => {
                finish_job(&shared, key, outcome, count);
            }
            _ = notified => {}
        }
    }
}

fn take_jobs(shared: &Shared, room: usize) -> Vec<WriteJob> {
    let mut jobs = Vec::new();
    let mut state = shared.state.lock();
    let state = &mut *state;
    while jobs.len() < room {
        let Some(queued) = state.queue.pop_front() else {
            break;
        };
        // The event's own key: the object reference of its first occurrence, which the write names.
        let Some(key) = state.entries.get_key_value(&queued).map(|(k, _)| k.clone()) else {
            state.pending = state.pending.saturating_sub(1);
            continue;
        };
        let Some(entry) = state.entries.get_mut(&key) else {
            continue;
        };
        entry.dirty = false;
        entry.in_flight = true;
        state.pending = state.pending.saturating_sub(1);
        state.in_flight += 1;
        jobs.push(WriteJob {
            key,
            note: entry.note.clone(),
            count: entry.count,
            first_time: entry.first_time,
            last_time: entry.last_time,
            written: entry.written.clone(),
        });
    }
    jobs
}

fn finish_job(shared: &Shared, key: EventKey, outcome: WriteOutcome, count: u32) {
    let mut state = shared.state.lock();
    let state = &mut *state;
    state.in_flight = state.in_flight.saturating_sub(1);
    let requeue = match state.entries.get_mut(&key) {
        Some(entry) => {
            entry.in_flight = false;
            match outcome {
                WriteOutcome::Written { namespace, name } => {
                    entry.written = Some((namespace, name));
                }
                WriteOutcome::Failed => {
                    // The occurrences covered by the failed write are lost (counted and logged); later
                    // ones start a fresh Event.
                    entry.written = None;
                    entry.count = entry.count.saturating_sub(count);
                }
            }
            entry.dirty
        }
        None => false,
    };
    if requeue {
        state.pending += 1;
        state.queue.push_back(key);
    } else if let Some(entry) = state.entries.get(&key)
        && entry.count == 0
    {
        state.entries.remove(&key);
    }
}

fn event_body(shared: &Shared, job: &WriteJob, namespace: &str, name: &str) -> Event {
    Event {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference::clone(&job.key.regarding),
        reason: Some(job.key.reason.to_string()),
        message: Some(job.note.clone()),
        type_: Some(job.key.type_.as_str().to_string()),
        source: Some(EventSource {
            component: Some(shared.reporting_controller.clone()),
            host: None,
        }),
        first_timestamp: Some(Time(job.first_time)),
        last_timestamp: Some(Time(job.last_time)),
        count: Some(i32::try_from(job.count).unwrap_or(i32::MAX)),
        reporting_component: Some(shared.reporting_controller.clone()),
        reporting_instance: Some(shared.reporting_instance.clone()),
        ..Event::default()
    }
}

/// The strategic-merge patch of a repeat, as client-go's recorder sends it.
fn repeat_patch(job: &WriteJob) -> serde_json::Value {
    serde_json::json!({
        "count": i32::try_from(job.count).unwrap_or(i32::MAX),
        "lastTimestamp": Time(job.last_time),
        "message": job.note,
    })
}

fn retry_delay(attempt: u32) -> Duration {
    Duration::from_millis(100u64 << attempt.min(6)).min(Duration::from_secs(5))
}

async fn write_event(
    client: kube::Client,
    shared: Arc<Shared>,
    job: WriteJob,
) -> (EventKey, WriteOutcome, u32) {
    let namespace = job
        .key
        .regarding
        .namespace
        .clone()
        .filter(|ns| !ns.is_empty())
        .unwrap_or_else(|| "default".to_string());
    let api: Api<Event> = Api::namespaced(client, &namespace);
    let mut written = job.written.clone();
    let mut last_error = String::new();
    for attempt in 0..MAX_ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(retry_delay(attempt)).await;
        }
        let result = match &written {
            Some((ns, name)) if job.count > 1 && ns == &namespace => api
                .patch(
                    name,
                    &identity::patch_params(),
                    &Patch::Strategic(repeat_patch(&job)),
                )
                .await
                .map(|e| (e, "series_updated")),
            _ => {
                let seq = shared.sequence.fetch_add(1, Ordering::Relaxed);
                let nanos = Timestamp::now().as_nanosecond();
                let base = job.key.regarding.name.as_deref().unwrap_or("unknown");
                let name = format!("{base}.{:x}", (nanos as u128).wrapping_add(seq as u128));
                let body = event_body(&shared, &job, &namespace, &name);
                api.create(&identity::post_params(), &body)
                    .await
                    .map(|e| (e, "created"))
            }
        };
        match result {
            Ok((event, outcome)) => {
                shared.metrics.event_outcome(outcome);
                return (
                    job.key,
                    WriteOutcome::Written {
                        namespace,
                        name: event.name_any(),
                    },
                    job.count,
                );
            }
            Err(kube::Error::Api(status)) if status.code == 404 && written.is_some() => {
                // The series' Event is gone (expired or deleted): start a new one.
                written = None;
                last_error = status.message.clone();
            }
            Err(kube::Error::Api(status))
                if status.code == 422 || status.code == 400 || status.code == 403 =>
            {
                last_error = format!("{} ({})", status.message, status.code);
                break;
            }
            Err(e) => {
                last_error = e.to_string();
            }
        }
    }
    shared.metrics.event_outcome("failed");
    tracing::warn!(
        controller = %shared.reporting_controller,
        reason = %job.key.reason,
        object = ?job.key.regarding.name,
        occurrences = job.count,
        error = %last_error,
        "could not write event"
    );
    (job.key, WriteOutcome::Failed, job.count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_respects_limits_and_char_boundaries() {
        assert_eq!(truncate_bytes("abc", 10), "abc");
        let s = "é".repeat(600); // 1200 bytes
        let t = truncate_bytes(&s, MAX_NOTE_BYTES);
        assert!(t.len() <= MAX_NOTE_BYTES);
        assert_eq!(t.len(), 1024);
        assert_eq!(truncate_chars(&"x".repeat(200), MAX_FIELD_CHARS).len(), 128);
    }

    #[test]
    fn forgetting_keeps_pending_entries() {
        let mut state = State::default();
        let now = Timestamp::now();
        for i in 0..10 {
            let key = EventKey {
                type_: EventType::Normal,
                reason: "Synced".into(),
                action: "Sync".into(),
                regarding: Arc::new(ObjectReference {
                    name: Some(format!("n{i}")),
                    ..ObjectReference::default()
                }),
            };
            let t = now
                .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(i))
                .unwrap();
            state.entries.insert(
                key,
                Entry {
                    note: String::new(),
                    count: 1,
                    first_time: t,
                    last_time: t,
                    written: Some(("default".into(), format!("n{i}.1"))),
                    dirty: i % 2 == 0,
                    in_flight: false,
                },
            );
        }
        forget_oldest_written(&mut state);
        // Five clean entries (odd i); the oldest three are forgotten, every dirty one stays.
        assert_eq!(state.entries.len(), 7);
        assert!(state.entries.values().filter(|e| e.dirty).count() == 5);
        let kept: Vec<_> = state
            .entries
            .iter()
            .filter(|(_, e)| !e.dirty)
            .map(|(k, _)| k.regarding.name.clone().unwrap())
            .collect();
        assert_eq!(kept.len(), 2);
        assert!(kept.contains(&"n7".to_string()) && kept.contains(&"n9".to_string()));
        let later = now
            .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(3600))
            .unwrap();
        forget_expired(&mut state, later);
        assert_eq!(state.entries.len(), 5);
    }

    #[test]
    fn object_ref_has_kind_and_no_resource_version() {
        let mut node = k8s_openapi::api::core::v1::Node::default();
        node.metadata.name = Some("n1".into());
        node.metadata.uid = Some("u1".into());
        node.metadata.resource_version = Some("7".into());
        let r = object_ref(&node);
        assert_eq!(r.kind.as_deref(), Some("Node"));
        assert_eq!(r.api_version.as_deref(), Some("v1"));
        assert_eq!(r.name.as_deref(), Some("n1"));
        assert_eq!(r.uid.as_deref(), Some("u1"));
        assert_eq!(r.resource_version, None);
    }
}
