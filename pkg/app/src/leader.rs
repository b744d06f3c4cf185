//! Leader election on a `coordination.k8s.io/v1` Lease, with the semantics of client-go's
//! `leaderelection` package.
//!
//! - A candidate reads the Lease; if it does not exist it creates it (holding it). If another identity
//!   holds it, the candidate waits until it has seen the same Lease record unchanged for the record's
//!   `leaseDurationSeconds` (measured on the candidate's own clock, so clock skew does not matter), then
//!   takes it over with an update carrying the observed `resourceVersion` (a lost race is a 409).
//! - The leader renews every retry period; when no renewal succeeds within the renew deadline, or the
//!   Lease turns out to be held by someone else, leadership is lost.
//! - Releasing clears `holderIdentity`. A standby watches the Lease while it waits, so it takes over as soon
//!   as it sees the release (otherwise at its next attempt).
//!
//! `acquireTime` and `renewTime` are MicroTime values with exactly six fractional digits.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{PostParams, WatchEvent, WatchParams};
use parking_lot::Mutex;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::duration::format_duration;

/// How often, at most, a candidate retries after a failure, relative to the retry period: attempts happen
/// every `retry_period * [1, 1 + RETRY_JITTER)`.
const RETRY_JITTER: f64 = 0.2;

/// How long a Lease holds without renewal (`--leader-elect-lease-duration`): from [`LeaseDuration::MIN`]
/// to [`LeaseDuration::MAX`], the range `leaseDurationSeconds` (whole seconds, rounded up, in 32 bits)
/// can say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct LeaseDuration {
    duration: Duration,
    seconds: i32,
}

/// Why a duration is not a [`LeaseDuration`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LeaseDurationError {
    /// Shorter than [`LeaseDuration::MIN`].
    #[error("shorter than {:?}", LeaseDuration::MIN)]
    TooShort,
    /// Longer than [`LeaseDuration::MAX`].
    #[error("longer than {:?}", LeaseDuration::MAX)]
    TooLong,
}

impl LeaseDuration {
    /// The shortest lease: the Lease stores whole seconds.
    pub const MIN: Duration = Duration::from_secs(1);
    /// The longest lease: `leaseDurationSeconds` is a 32-bit number.
    pub const MAX: Duration = Duration::from_secs(i32::MAX as u64);

    /// `duration`, when it is between [`LeaseDuration::MIN`] and [`LeaseDuration::MAX`].
    pub fn new(duration: Duration) -> Result<Self, LeaseDurationError> {
        if duration < Self::MIN {
            return Err(LeaseDurationError::TooShort);
        }
        let whole = duration.as_secs() + u64::from(duration.subsec_nanos() > 0);
        let seconds = i32::try_from(whole).map_err(|_| LeaseDurationError::TooLong)?;
        Ok(LeaseDuration { duration, seconds })
    }

    /// The lease as a duration.
    pub fn get(self) -> Duration {
        self.duration
    }

    /// `leaseDurationSeconds`: the duration in whole seconds, rounded up.
    pub fn seconds(self) -> i32 {
        self.seconds
    }
}

/// Where and how to elect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderElectionConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This candidate's identity (`<hostname>_<uuid>`).
    pub identity: String,
    /// Written to `leaseDurationSeconds` (rounded up to whole seconds).
    pub lease_duration: LeaseDuration,
    /// How long the leader keeps trying to renew before giving up.
    pub renew_deadline: Duration,
    /// Wait between attempts.
    pub retry_period: Duration,
}

/// Errors talking to the API server about the Lease.
#[derive(Debug, thiserror::Error)]
pub enum LeaderElectionError {
    /// A request for the Lease failed.
    #[error("{action} lease {namespace}/{name}: {source}")]
    Api {
        /// What was attempted ("get", "create", "update").
        action: &'static str,
        /// Lease namespace.
        namespace: String,
        /// Lease name.
        name: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
}

/// How the renew loop ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RenewOutcome {
    /// The stop token was cancelled while still leading.
    Stopped,
    /// Leadership was lost; the text says why.
    Lost(String),
}

/// Leadership state shared with the health checks and the metrics.
#[derive(Clone, Debug, Default)]
pub struct LeaderStatus {
    inner: Arc<StatusInner>,
}

#[derive(Debug, Default)]
struct StatusInner {
    enabled: AtomicBool,
    leading: AtomicBool,
    last_renew: Mutex<Option<Instant>>,
    tolerance: Mutex<Duration>,
    gauge: Family<Vec<(String, String)>, Gauge>,
    lease_name: Mutex<String>,
}

impl LeaderStatus {
    /// A status for an elector on the Lease `lease_name`; `tolerance` is how long after the last renewal the
    /// health check still passes.
    pub fn new(lease_name: &str, tolerance: Duration) -> Self {
        let status = Self::default();
        status.inner.enabled.store(true, Ordering::SeqCst);
        *status.inner.lease_name.lock() = lease_name.to_string();
        *status.inner.tolerance.lock() = tolerance;
        status.gauge().set(0);
        status
    }

    /// A status for a second elector of this process on the Lease `lease_name` (leader migration's): its
    /// own state, reported in the same `leader_election_master_status` family.
    pub fn sibling(&self, lease_name: &str) -> Self {
        let status = LeaderStatus {
            inner: Arc::new(StatusInner {
                enabled: AtomicBool::new(true),
                leading: AtomicBool::new(false),
                last_renew: Mutex::new(None),
                tolerance: Mutex::new(*self.inner.tolerance.lock()),
                gauge: self.inner.gauge.clone(),
                lease_name: Mutex::new(lease_name.to_string()),
            }),
        };
        status.gauge().set(0);
        status
    }

    /// A status for a daemon running without leader election (always "leading").
    pub fn disabled() -> Self {
        let status = Self::default();
        *status.inner.lease_name.lock() = "cloud-controller-manager".to_string();
        status
    }

    fn gauge(&self) -> Gauge {
        let name = self.inner.lease_name.lock().clone();
        self.inner
            .gauge
            .get_or_create(&vec![("name".to_string(), name)])
            .clone()
    }

    /// Registers `leader_election_master_status{name="<lease>"}` (1 while leading).
    pub fn register_metrics(&self, registry: &mut Registry) {
        // Make the series exist before the first scrape.
        let gauge = self.gauge();
        if !self.inner.enabled.load(Ordering::SeqCst) {
            gauge.set(1);
        }
        registry.register(
            "leader_election_master_status",
            "Whether this process is the leader (1) or a standby (0), by lease name.",
            self.inner.gauge.clone(),
        );
    }

    /// Whether this process leads (always true without leader election).
    pub fn is_leader(&self) -> bool {
        !self.inner.enabled.load(Ordering::SeqCst) || self.inner.leading.load(Ordering::SeqCst)
    }

    fn set_leading(&self, leading: bool) {
        self.inner.leading.store(leading, Ordering::SeqCst);
        *self.inner.last_renew.lock() = leading.then(Instant::now);
        self.gauge().set(i64::from(leading));
    }

    fn renewed(&self) {
        *self.inner.last_renew.lock() = Some(Instant::now());
    }

    /// The leader-election health check: fails when this process leads but has not renewed the Lease for
    /// longer than the tolerance (a stuck renew loop).
    pub fn check(&self) -> Result<(), String> {
        if !self.inner.enabled.load(Ordering::SeqCst) || !self.inner.leading.load(Ordering::SeqCst)
        {
            return Ok(());
        }
        let tolerance = *self.inner.tolerance.lock();
        match *self.inner.last_renew.lock() {
            Some(at) if at.elapsed() <= tolerance => Ok(()),
            Some(at) => Err(format!(
                "the lease was last renewed {} ago (tolerance {})",
                format_duration(at.elapsed()),
                format_duration(tolerance)
            )),
            None => Err("leading without a renewal".to_string()),
        }
    }
}

/// What the candidate last saw of the Lease, and when (by its own clock).
#[derive(Debug, Clone)]
struct Observed {
    spec: LeaseSpec,
    resource_version: Option<String>,
    at: Instant,
}

/// One candidate in the election.
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaderElectionConfig,
    status: LeaderStatus,
    observed: Option<Observed>,
    leading: bool,
}

impl std::fmt::Debug for LeaderElector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderElector")
            .field("config", &self.config)
            .field("leading", &self.leading)
            .finish()
    }
}

/// The current time truncated to microseconds, as a Lease MicroTime.
pub fn now_micro() -> MicroTime {
    let now = Timestamp::now();
    MicroTime(Timestamp::from_microsecond(now.as_microsecond()).unwrap_or(now))
}

/// How long one watch of a waiting candidate on its Lease lasts before it is started again.
const LEASE_WATCH_TIMEOUT_SECONDS: u32 = 290;

/// Changes of the Lease, as a waiting candidate watches them.
type LeaseEvents = BoxStream<'static, Result<WatchEvent<Lease>, kube::Error>>;

/// How long after the observed expiry of a holder's lease a candidate tries to take it over (the
/// expiry is judged with a strict comparison).
const EXPIRY_MARGIN: Duration = Duration::from_millis(20);

/// What a waiting candidate's watch saw.
enum LeaseChange {
    /// The holder released the Lease (cleared its holder) or it was deleted.
    Released,
    /// The Lease was written (a renewal): the holder is alive.
    Written(Box<Lease>),
}

/// A waiting candidate's watch on the Lease. It wakes the candidate as soon as the holder releases the
/// Lease (as a leader stopping cleanly does), so a clean hand-over takes a round trip instead of up to a
/// retry period; and it sees each renewal when it happens, so a holder that stopped renewing is taken
/// over one lease duration after its last renewal instead of up to a retry period later. Polling every
/// retry period goes on regardless. A watch the candidate may not make (no `watch` on leases in its role)
/// is not tried again.
#[derive(Default)]
struct LeaseWatch {
    events: Option<LeaseEvents>,
    forbidden: bool,
}

impl LeaseWatch {
    /// Starts the watch unless it runs, is forbidden, or there is nothing observed to watch from.
    async fn start(&mut self, elector: &LeaderElector) {
        if self.events.is_some() || self.forbidden {
            return;
        }
        match elector.watch_lease().await {
            Some(Ok(events)) => self.events = Some(events),
            Some(Err(kube::Error::Api(status))) if status.code == 403 => {
                tracing::info!(
                    lease = %elector.config.name,
                    "may not watch the leader lease; a release is noticed at the next retry"
                );
                self.forbidden = true;
            }
            Some(Err(err)) => {
                tracing::debug!(error = %err, "cannot watch the leader lease; retrying later");
            }
            None => {}
        }
    }

    /// The next change; never resolves while no watch runs. A watch that ends or fails is dropped
    /// (started again at the next attempt).
    async fn next_change(&mut self) -> LeaseChange {
        if let Some(events) = self.events.as_mut() {
            while let Some(event) = events.next().await {
                match event {
                    Ok(WatchEvent::Modified(lease)) if is_released(&lease) => {
                        return LeaseChange::Released;
                    }
                    Ok(WatchEvent::Modified(lease)) => {
                        return LeaseChange::Written(Box::new(lease));
                    }
                    Ok(WatchEvent::Deleted(_)) => return LeaseChange::Released,
                    Ok(WatchEvent::Error(_)) | Err(_) => break,
                    Ok(_) => {}
                }
            }
            self.events = None;
        }
        std::future::pending().await
    }
}

/// Whether the Lease has no holder.
fn is_released(lease: &Lease) -> bool {
    lease
        .spec
        .as_ref()
        .and_then(|spec| spec.holder_identity.as_deref())
        .is_none_or(str::is_empty)
}

impl LeaderElector {
    /// A candidate using `client` (give it a client of its own so controller traffic cannot starve the
    /// renewals).
    pub fn new(client: kube::Client, config: LeaderElectionConfig, status: LeaderStatus) -> Self {
        let api = Api::namespaced(client, &config.namespace);
        Self {
            api,
            config,
            status,
            observed: None,
            leading: false,
        }
    }

    /// This candidate's identity.
    pub fn identity(&self) -> &str {
        &self.config.identity
    }

    /// Whether the last attempt left this candidate holding the Lease.
    pub fn is_leader(&self) -> bool {
        self.leading
    }

    fn lease_duration_seconds(&self) -> i32 {
        self.config.lease_duration.seconds()
    }

    fn api_error(&self, action: &'static str, source: kube::Error) -> LeaderElectionError {
        LeaderElectionError::Api {
            action,
            namespace: self.config.namespace.clone(),
            name: self.config.name.clone(),
            source,
        }
    }

    /// The holder other than us, if the last observed Lease has one.
    fn other_holder(&self) -> Option<String> {
        let holder = self
            .observed
            .as_ref()?
            .spec
            .holder_identity
            .clone()
            .filter(|h| !h.is_empty())?;
        (holder != self.config.identity).then_some(holder)
    }

    /// One attempt to acquire or renew. `Ok(true)` = we hold the Lease now.
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool, LeaderElectionError> {
        let now = now_micro();
        let current = match self.api.get_opt(&self.config.name).await {
            Ok(current) => current,
            Err(err) => return Err(self.api_error("get", err)),
        };
        let Some(current) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.config.identity.clone()),
                    lease_duration_seconds: Some(self.lease_duration_seconds()),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.observe(&created, true);
                    self.mark_holding();
                    Ok(true)
                }
                Err(kube::Error::Api(status)) if status.is_already_exists() => {
                    tracing::debug!(lease = %self.config.name, "lost the race to create the lease");
                    Ok(false)
                }
                Err(err) => Err(self.api_error("create", err)),
            };
        };

        self.observe(&current, false);
        let spec = current.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let we_hold = holder == self.config.identity;
        if !holder.is_empty() && !we_hold && !self.observed_expired(&spec) {
            return Ok(false);
        }

        let mut new_spec = LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(self.lease_duration_seconds()),
            renew_time: Some(now.clone()),
            ..spec.clone()
        };
        if !(we_hold && self.leading) {
            new_spec.acquire_time = Some(now);
            new_spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(
                // A takeover from a holder (or from an empty holder) is a transition; re-acquiring our own
                // lease after a restart of this elector is one too, as in client-go.
                1,
            ));
        }
        let updated = Lease {
            metadata: ObjectMeta {
                name: Some(self.config.name.clone()),
                namespace: Some(self.config.namespace.clone()),
                resource_version: current.metadata.resource_version.clone(),
                ..ObjectMeta::default()
            },
            spec: Some(new_spec),
        };
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &updated)
            .await
        {
            Ok(written) => {
                self.observe(&written, true);
                self.mark_holding();
                Ok(true)
            }
            Err(kube::Error::Api(status)) if status.is_conflict() => {
                tracing::debug!(lease = %self.config.name, "lease changed while updating it (409)");
                Ok(false)
            }
            Err(err) => Err(self.api_error("update", err)),
        }
    }

    /// Notes a successful create or update of the Lease as holder.
    fn mark_holding(&mut self) {
        if self.leading {
            self.status.renewed();
        } else {
            self.leading = true;
            self.status.set_leading(true);
        }
    }

    /// Records what we saw; the observation time moves only when the record changed (or we wrote it).
    fn observe(&mut self, lease: &Lease, written_by_us: bool) {
        let spec = lease.spec.clone().unwrap_or_default();
        let changed = match &self.observed {
            Some(observed) => observed.spec != spec,
            None => true,
        };
        if changed || written_by_us {
            self.observed = Some(Observed {
                spec,
                resource_version: lease.metadata.resource_version.clone(),
                at: Instant::now(),
            });
        } else if let Some(observed) = &mut self.observed {
            observed.resource_version = lease.metadata.resource_version.clone();
        }
    }

    /// Whether the holder's lease has run out, judged by how long we have seen the same record.
    fn observed_expired(&self, spec: &LeaseSpec) -> bool {
        let Some(observed) = &self.observed else {
            return false;
        };
        let seconds = spec.lease_duration_seconds.unwrap_or(0).max(0);
        observed.at.elapsed() > Duration::from_secs(u64::try_from(seconds).unwrap_or(0))
    }

    fn retry_delay(&self) -> Duration {
        let jitter = rand::random::<f64>() * RETRY_JITTER;
        self.config.retry_period.mul_f64(1.0 + jitter)
    }

    /// Tries until the Lease is ours (`true`) or `cancel` fires (`false`).
    pub async fn acquire(&mut self, cancel: &CancellationToken) -> bool {
        tracing::info!(
            lease = %format!("{}/{}", self.config.namespace, self.config.name),
            identity = %self.config.identity,
            "attempting to acquire the leader lease"
        );
        let mut last_holder: Option<String> = None;
        let mut lease_watch = LeaseWatch::default();
        loop {
            if cancel.is_cancelled() {
                return false;
            }
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    tracing::info!(
                        lease = %format!("{}/{}", self.config.namespace, self.config.name),
                        identity = %self.config.identity,
                        "successfully acquired the lease; this process is the leader"
                    );
                    return true;
                }
                Ok(false) => {
                    let holder = self.other_holder();
                    if holder != last_holder {
                        if let Some(holder) = &holder {
                            tracing::info!(%holder, "the lease is held by another candidate; waiting");
                        }
                        last_holder = holder;
                    }
                }
                Err(err) => tracing::warn!(error = %err, "failed to acquire the leader lease"),
            }
            lease_watch.start(self).await;
            if !self.wait_for_next_attempt(&mut lease_watch, cancel).await {
                return false;
            }
        }
    }

    /// Waits until the next attempt is due: a retry period from now, or sooner when the observed holder's
    /// lease runs out first or the Lease is released. Renewals the watch reports move the observation
    /// (the holder is alive). `false` when `cancel` fired.
    async fn wait_for_next_attempt(
        &mut self,
        lease_watch: &mut LeaseWatch,
        cancel: &CancellationToken,
    ) -> bool {
        let deadline = Instant::now() + self.retry_delay().min(self.until_observed_expiry());
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return false,
                _ = tokio::time::sleep_until(deadline) => return true,
                change = lease_watch.next_change() => match change {
                    LeaseChange::Released => {
                        tracing::debug!(lease = %self.config.name, "the lease was released; trying at once");
                        return true;
                    }
                    LeaseChange::Written(lease) => self.observe(&lease, false),
                },
            }
        }
    }

    /// How long until the observed holder's lease runs out on our clock (just past it); `Duration::MAX`
    /// with nothing observed or when it has run out already (the last attempt failed: wait a retry period).
    fn until_observed_expiry(&self) -> Duration {
        let Some(observed) = &self.observed else {
            return Duration::MAX;
        };
        let seconds = observed.spec.lease_duration_seconds.unwrap_or(0).max(0);
        let expiry = observed.at + Duration::from_secs(u64::try_from(seconds).unwrap_or(0));
        expiry
            .checked_duration_since(Instant::now())
            .map_or(Duration::MAX, |left| left + EXPIRY_MARGIN)
    }

    /// A watch on our Lease from the last observed version, when there is a holder to wait for.
    async fn watch_lease(&self) -> Option<Result<LeaseEvents, kube::Error>> {
        let observed = self.observed.as_ref()?;
        let version = observed.resource_version.clone()?;
        let params = WatchParams::default()
            .fields(&format!("metadata.name={}", self.config.name))
            .timeout(LEASE_WATCH_TIMEOUT_SECONDS);
        Some(
            self.api
                .watch(&params, &version)
                .await
                .map(StreamExt::boxed),
        )
    }

    /// Renews every retry period until `stop` fires ([`RenewOutcome::Stopped`]) or leadership is lost
    /// ([`RenewOutcome::Lost`]): no successful renewal within the renew deadline, or another holder.
    pub async fn renew_until_lost(&mut self, stop: &CancellationToken) -> RenewOutcome {
        let mut last_renew = Instant::now();
        loop {
            tokio::select! {
                _ = stop.cancelled() => return RenewOutcome::Stopped,
                _ = tokio::time::sleep(self.config.retry_period) => {}
            }
            let deadline = last_renew + self.config.renew_deadline;
            let attempt = tokio::select! {
                _ = stop.cancelled() => return RenewOutcome::Stopped,
                attempt = tokio::time::timeout_at(deadline, self.try_acquire_or_renew()) => attempt,
            };
            match attempt {
                Ok(Ok(true)) => {
                    last_renew = Instant::now();
                    tracing::trace!(lease = %self.config.name, "renewed the lease");
                    continue;
                }
                Ok(Ok(false)) => {
                    if let Some(holder) = self.other_holder() {
                        return self.lose(format!("the lease is now held by {holder:?}"));
                    }
                }
                Ok(Err(err)) => tracing::warn!(error = %err, "failed to renew the leader lease"),
                Err(_elapsed) => {}
            }
            if Instant::now() >= deadline {
                return self.lose(format!(
                    "failed to renew lease {}/{} within the renew deadline ({})",
                    self.config.namespace,
                    self.config.name,
                    format_duration(self.config.renew_deadline)
                ));
            }
        }
    }

    fn lose(&mut self, reason: String) -> RenewOutcome {
        self.leading = false;
        self.status.set_leading(false);
        RenewOutcome::Lost(reason)
    }

    /// Gives the Lease up (clears the holder) so a standby takes over at once. Does nothing unless we hold it.
    pub async fn release(&mut self) -> Result<bool, LeaderElectionError> {
        if !self.leading {
            return Ok(false);
        }
        self.leading = false;
        self.status.set_leading(false);
        let current = match self.api.get_opt(&self.config.name).await {
            Ok(Some(current)) => current,
            Ok(None) => return Ok(false),
            Err(err) => return Err(self.api_error("get", err)),
        };
        let spec = current.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(false);
        }
        let now = now_micro();
        let released = Lease {
            metadata: ObjectMeta {
                name: Some(self.config.name.clone()),
                namespace: Some(self.config.namespace.clone()),
                resource_version: current.metadata.resource_version.clone(),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(String::new()),
                lease_duration_seconds: Some(1),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                ..spec
            }),
        };
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &released)
            .await
        {
            Ok(written) => {
                self.observe(&written, true);
                tracing::info!(lease = %self.config.name, "released the leader lease");
                Ok(true)
            }
            Err(err) => Err(self.api_error("update", err)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_durations_fit_lease_duration_seconds() {
        let seconds = |duration| LeaseDuration::new(duration).map(LeaseDuration::seconds);
        assert_eq!(
            seconds(Duration::from_millis(999)),
            Err(LeaseDurationError::TooShort)
        );
        assert_eq!(seconds(Duration::from_secs(1)), Ok(1));
        assert_eq!(seconds(Duration::from_millis(1_500)), Ok(2), "rounded up");
        assert_eq!(seconds(Duration::new(15, 1)), Ok(16));
        assert_eq!(seconds(LeaseDuration::MAX), Ok(i32::MAX));
        assert_eq!(
            seconds(LeaseDuration::MAX + Duration::from_nanos(1)),
            Err(LeaseDurationError::TooLong)
        );
        let lease = LeaseDuration::new(Duration::from_secs(15)).unwrap();
        assert_eq!(lease.get(), Duration::from_secs(15));
    }

    #[test]
    fn micro_time_has_six_fractional_digits() {
        let text = serde_json::to_string(&now_micro()).unwrap();
        // "2026-01-01T00:00:00.123456Z"
        let fraction = text
            .trim_matches('"')
            .split('.')
            .nth(1)
            .unwrap()
            .trim_end_matches('Z');
        assert_eq!(fraction.len(), 6, "{text}");
        assert!(fraction.chars().all(|c| c.is_ascii_digit()));
    }

    #[test]
    fn status_without_election_always_leads() {
        let status = LeaderStatus::disabled();
        assert!(status.is_leader());
        assert!(status.check().is_ok());
        let mut registry = Registry::default();
        status.register_metrics(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("leader_election_master_status{name=\"cloud-controller-manager\"} 1"),
            "{text}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn status_check_follows_renewals() {
        let status = LeaderStatus::new("ccm", Duration::from_secs(10));
        assert!(!status.is_leader());
        assert!(status.check().is_ok(), "a standby is healthy");
        let mut registry = Registry::default();
        status.register_metrics(&mut registry);
        status.set_leading(true);
        assert!(status.is_leader());
        assert!(status.check().is_ok());
        tokio::time::advance(Duration::from_secs(11)).await;
        assert_eq!(
            status.check().unwrap_err(),
            "the lease was last renewed 11s ago (tolerance 10s)"
        );
        status.renewed();
        assert!(status.check().is_ok());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("leader_election_master_status{name=\"ccm\"} 1"),
            "{text}"
        );
        status.set_leading(false);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("leader_election_master_status{name=\"ccm\"} 0"),
            "{text}"
        );
    }
}
