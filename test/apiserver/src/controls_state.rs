//! The rules and counters behind the test controls: fault and latency rules, the keys requests are
//! counted by, the request log, and [`ControlsState`], which holds them (with the open-watch count and
//! the signal that closes watches) inside the shared [`State`](crate::state::State). The handle and the
//! admin endpoints that change them are in [`crate::controls`].

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::error::ApiError;
use crate::rng::SplitMix64;

/// How often a fault fires.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FaultMode {
    /// Every matching request fails.
    Always,
    /// The next `n` matching requests fail, then the rule is spent.
    Times(u64),
    /// Each matching request fails with this probability (0.0 to 1.0), drawn from the seeded RNG.
    Rate(f64),
}

/// A rule that makes matching requests fail with an HTTP status and a `Status` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultRule {
    /// Verb to match (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection`); unset matches every verb.
    #[serde(default)]
    pub verb: Option<String>,
    /// Resource plural to match; unset matches every resource.
    #[serde(default)]
    pub resource: Option<String>,
    /// Subresource to match (`status`); unset matches with or without a subresource, `""` only the
    /// main resource.
    #[serde(default)]
    pub subresource: Option<String>,
    /// The HTTP status to answer with.
    pub status: u16,
    /// How often the rule fires.
    pub mode: FaultMode,
    /// Adds `Retry-After` (and `details.retryAfterSeconds`).
    #[serde(default)]
    pub retry_after_seconds: Option<u32>,
    /// Overrides the Status message.
    #[serde(default)]
    pub message: Option<String>,
}

impl FaultRule {
    /// A rule failing every request with `status`; narrow it with the other methods.
    pub fn new(status: u16) -> Self {
        Self {
            verb: None,
            resource: None,
            subresource: None,
            status,
            mode: FaultMode::Always,
            retry_after_seconds: None,
            message: None,
        }
    }

    /// Only requests with this verb.
    pub fn verb(mut self, verb: impl Into<String>) -> Self {
        self.verb = Some(verb.into());
        self
    }

    /// Only requests for this resource plural.
    pub fn resource(mut self, resource: impl Into<String>) -> Self {
        self.resource = Some(resource.into());
        self
    }

    /// Only requests for this subresource (`""` for the main resource only).
    pub fn subresource(mut self, subresource: impl Into<String>) -> Self {
        self.subresource = Some(subresource.into());
        self
    }

    /// Fire for the next `n` matching requests only.
    pub fn times(mut self, n: u64) -> Self {
        self.mode = FaultMode::Times(n);
        self
    }

    /// Fire with probability `rate`.
    pub fn rate(mut self, rate: f64) -> Self {
        self.mode = FaultMode::Rate(rate);
        self
    }

    /// Add a `Retry-After` header.
    pub fn retry_after(mut self, seconds: u32) -> Self {
        self.retry_after_seconds = Some(seconds);
        self
    }

    /// Use this Status message.
    pub fn message(mut self, message: impl Into<String>) -> Self {
        self.message = Some(message.into());
        self
    }

    fn matches(&self, key: &RequestKey) -> bool {
        key.matches(&self.verb, &self.resource, &self.subresource)
    }
}

/// Extra latency for matching requests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LatencyRule {
    /// Verb to match; unset matches every verb.
    #[serde(default)]
    pub verb: Option<String>,
    /// Resource plural to match; unset matches every resource.
    #[serde(default)]
    pub resource: Option<String>,
    /// Subresource to match; unset matches any.
    #[serde(default)]
    pub subresource: Option<String>,
    /// The added delay.
    #[serde(with = "millis")]
    pub delay: Duration,
}

impl LatencyRule {
    /// Delay every request by `delay`; narrow it with the other methods.
    pub fn new(delay: Duration) -> Self {
        Self {
            verb: None,
            resource: None,
            subresource: None,
            delay,
        }
    }

    /// Only requests with this verb.
    pub fn verb(mut self, verb: impl Into<String>) -> Self {
        self.verb = Some(verb.into());
        self
    }

    /// Only requests for this resource plural.
    pub fn resource(mut self, resource: impl Into<String>) -> Self {
        self.resource = Some(resource.into());
        self
    }

    /// Only requests for this subresource.
    pub fn subresource(mut self, subresource: impl Into<String>) -> Self {
        self.subresource = Some(subresource.into());
        self
    }

    fn matches(&self, key: &RequestKey) -> bool {
        key.matches(&self.verb, &self.resource, &self.subresource)
    }
}

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}

/// What requests are counted by.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RequestKey {
    /// Kubernetes verb (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`).
    pub verb: String,
    /// Resource plural.
    pub resource: String,
    /// Subresource, or "".
    pub subresource: String,
}

impl RequestKey {
    /// A key for `verb` on `resource` (no subresource).
    pub fn new(verb: &str, resource: &str) -> Self {
        Self {
            verb: verb.to_string(),
            resource: resource.to_string(),
            subresource: String::new(),
        }
    }

    /// A key for `verb` on `resource/subresource`.
    pub fn with_subresource(verb: &str, resource: &str, subresource: &str) -> Self {
        Self {
            verb: verb.to_string(),
            resource: resource.to_string(),
            subresource: subresource.to_string(),
        }
    }

    /// Whether a rule's filters select this request: each unset filter matches anything.
    fn matches(
        &self,
        verb: &Option<String>,
        resource: &Option<String>,
        subresource: &Option<String>,
    ) -> bool {
        verb.as_deref().is_none_or(|v| v == self.verb)
            && resource.as_deref().is_none_or(|r| r == self.resource)
            && subresource.as_deref().is_none_or(|s| s == self.subresource)
    }
}

/// One entry of the request log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestRecord {
    /// Kubernetes verb.
    pub verb: String,
    /// API group ("" for core).
    pub group: String,
    /// API version.
    pub version: String,
    /// Resource plural.
    pub resource: String,
    /// Subresource, or "".
    pub subresource: String,
    /// Namespace, or "".
    pub namespace: String,
    /// Object name, or "".
    pub name: String,
    /// The authenticated user (`system:anonymous` without a token).
    pub user: String,
    /// The `User-Agent` header ("" without one).
    #[serde(default)]
    pub user_agent: String,
    /// The HTTP status code of the answer.
    pub code: u16,
    /// Whether the request asked for `dryRun=All` (nothing persisted).
    #[serde(default)]
    pub dry_run: bool,
}

/// Identifier of an installed fault rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FaultId(pub u64);

struct FaultEntry {
    id: u64,
    rule: FaultRule,
}

/// The mutable state behind [`Controls`](crate::controls::Controls).
pub(crate) struct ControlsState {
    faults: Mutex<Vec<FaultEntry>>,
    next_fault: AtomicU64,
    latency: Mutex<Vec<LatencyRule>>,
    rng: Mutex<SplitMix64>,
    counts: Mutex<HashMap<RequestKey, u64>>,
    log: Mutex<VecDeque<RequestRecord>>,
    log_capacity: usize,
    pub(crate) open_watches: AtomicUsize,
    pub(crate) close_watches: watch::Sender<u64>,
}

impl ControlsState {
    pub(crate) fn new(seed: u64, log_capacity: usize) -> Self {
        Self {
            faults: Mutex::new(Vec::new()),
            next_fault: AtomicU64::new(1),
            latency: Mutex::new(Vec::new()),
            rng: Mutex::new(SplitMix64::new(seed)),
            counts: Mutex::new(HashMap::new()),
            log: Mutex::new(VecDeque::new()),
            log_capacity,
            open_watches: AtomicUsize::new(0),
            close_watches: watch::channel(0).0,
        }
    }

    /// Counts a request.
    pub(crate) fn count(&self, key: &RequestKey) {
        *self.counts.lock().entry(key.clone()).or_insert(0) += 1;
    }

    /// The injected failure for a request, if a rule fires.
    pub(crate) fn fault_for(&self, key: &RequestKey) -> Option<ApiError> {
        let mut faults = self.faults.lock();
        let mut fired: Option<(usize, FaultRule)> = None;
        for (i, f) in faults.iter_mut().enumerate() {
            if !f.rule.matches(key) {
                continue;
            }
            let fire = match &mut f.rule.mode {
                FaultMode::Always => true,
                FaultMode::Times(n) => {
                    if *n == 0 {
                        false
                    } else {
                        *n -= 1;
                        true
                    }
                }
                FaultMode::Rate(r) => self.rng.lock().next_f64() < *r,
            };
            if fire {
                fired = Some((i, f.rule.clone()));
                break;
            }
        }
        let (i, rule) = fired?;
        if matches!(faults[i].rule.mode, FaultMode::Times(0)) {
            faults.remove(i);
        }
        Some(ApiError::injected(
            rule.status,
            rule.message.as_deref(),
            rule.retry_after_seconds,
        ))
    }

    /// The added latency for a request (the sum of every matching rule).
    pub(crate) fn latency_for(&self, key: &RequestKey) -> Duration {
        self.latency
            .lock()
            .iter()
            .filter(|l| l.matches(key))
            .map(|l| l.delay)
            .sum()
    }

    /// Appends to the request log (dropping the oldest entries beyond the capacity).
    pub(crate) fn record(&self, rec: RequestRecord) {
        let mut log = self.log.lock();
        if self.log_capacity == 0 {
            return;
        }
        while log.len() >= self.log_capacity {
            log.pop_front();
        }
        log.push_back(rec);
    }
    /// Installs a fault rule, answering its new ID.
    pub(crate) fn add_fault(&self, rule: FaultRule) -> FaultId {
        let id = self.next_fault.fetch_add(1, Ordering::Relaxed);
        self.faults.lock().push(FaultEntry { id, rule });
        FaultId(id)
    }

    /// Removes one fault rule; false if it was not installed (or already spent).
    pub(crate) fn remove_fault(&self, id: FaultId) -> bool {
        let mut f = self.faults.lock();
        let before = f.len();
        f.retain(|e| e.id != id.0);
        f.len() != before
    }

    /// Removes every fault rule.
    pub(crate) fn clear_faults(&self) {
        self.faults.lock().clear();
    }

    /// The installed fault rules.
    pub(crate) fn faults(&self) -> Vec<(FaultId, FaultRule)> {
        self.faults
            .lock()
            .iter()
            .map(|e| (FaultId(e.id), e.rule.clone()))
            .collect()
    }

    /// Adds a latency rule.
    pub(crate) fn add_latency(&self, rule: LatencyRule) {
        self.latency.lock().push(rule);
    }

    /// Removes every latency rule.
    pub(crate) fn clear_latency(&self) {
        self.latency.lock().clear();
    }

    /// The request counters.
    pub(crate) fn request_counts(&self) -> BTreeMap<RequestKey, u64> {
        self.counts
            .lock()
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }

    /// The counter of one key (0 when never counted).
    pub(crate) fn request_count(&self, key: &RequestKey) -> u64 {
        self.counts.lock().get(key).copied().unwrap_or(0)
    }

    /// Resets the request counters.
    pub(crate) fn reset_counts(&self) {
        self.counts.lock().clear();
    }

    /// The request log, oldest first.
    pub(crate) fn request_log(&self) -> Vec<RequestRecord> {
        self.log.lock().iter().cloned().collect()
    }

    /// Clears the request log.
    pub(crate) fn clear_request_log(&self) {
        self.log.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_modes() {
        let c = ControlsState::new(3, 10);
        let key = RequestKey::new("update", "nodes");
        let status_key = RequestKey::with_subresource("update", "nodes", "status");
        c.faults.lock().push(FaultEntry {
            id: 1,
            rule: FaultRule::new(500)
                .verb("update")
                .resource("nodes")
                .subresource("")
                .times(2),
        });
        assert_eq!(c.fault_for(&status_key), None);
        assert_eq!(c.fault_for(&key).unwrap().code, 500);
        assert_eq!(c.fault_for(&key).unwrap().code, 500);
        assert_eq!(c.fault_for(&key), None);
        assert!(c.faults.lock().is_empty());

        c.faults.lock().push(FaultEntry {
            id: 2,
            rule: FaultRule::new(429).rate(0.5).retry_after(2),
        });
        let fired = (0..1000).filter(|_| c.fault_for(&key).is_some()).count();
        assert!((400..600).contains(&fired), "{fired}");
        let e = c
            .fault_for(&key)
            .or_else(|| c.fault_for(&key))
            .or_else(|| c.fault_for(&key))
            .unwrap();
        assert_eq!(e.reason, "TooManyRequests");
        assert_eq!(e.retry_after, Some(2));
    }

    #[test]
    fn latency_and_log() {
        let c = ControlsState::new(1, 2);
        c.latency
            .lock()
            .push(LatencyRule::new(Duration::from_millis(5)).verb("get"));
        c.latency
            .lock()
            .push(LatencyRule::new(Duration::from_millis(7)).resource("nodes"));
        assert_eq!(
            c.latency_for(&RequestKey::new("get", "nodes")),
            Duration::from_millis(12)
        );
        assert_eq!(
            c.latency_for(&RequestKey::new("list", "services")),
            Duration::ZERO
        );
        for i in 0..3 {
            c.record(RequestRecord {
                verb: "get".into(),
                group: String::new(),
                version: "v1".into(),
                resource: "nodes".into(),
                subresource: String::new(),
                namespace: String::new(),
                name: format!("n{i}"),
                user: "admin".into(),
                user_agent: "test".into(),
                code: 200,
                dry_run: false,
            });
        }
        let log: Vec<String> = c.log.lock().iter().map(|r| r.name.clone()).collect();
        assert_eq!(log, ["n1", "n2"]);
    }
}
