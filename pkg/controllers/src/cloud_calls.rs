//! Cloud calls under a timeout, and what a controller's health check says about them.
//!
//! Every call a controller makes into the provider contract goes through [`CloudCalls::run`] (the
//! [`TimedCloud`](crate::timed_cloud::TimedCloud) wrapper each controller gets in place of the provider does
//! this): the call is given `--cloud-call-timeout`; one that does not answer in time is abandoned (its
//! future dropped, which frees the worker) and becomes a [`CloudError::Timeout`] naming the operation and
//! the timeout. That error is an ordinary failure to every controller: the object is retried with backoff,
//! the sync's Warning event and log appear, and nothing is concluded about the object (a timeout is never
//! "instance not found").
//!
//! The controller's health check (`/healthz`, `/readyz`) fails while
//! - a call has been in flight for longer than the timeout (by more than [`HUNG_GRACE`], the time a timeout
//!   that fired may take to be acted on): the timeout could not free the worker (a provider future that
//!   blocks its thread instead of yielding), so the worker is hung; or
//! - the controller's last cloud call timed out and no call has been answered since.
//!
//! It passes again with the next answered call (a result, or an answer about the object such as "instance
//! not found"); calls that fail otherwise neither set nor clear it. Bookkeeping costs one uncontended lock
//! when a call starts and one when it ends, and no allocation once the slot table has grown to the
//! controller's concurrency.

use std::future::Future;
use std::time::Duration;

use cloud_provider::{CloudError, Result};
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::metrics::ControllerMetrics;

/// How long past the timeout a call must still be in flight to count as hung: a timeout that fired needs
/// its task to be run to take effect, and a busy runtime may take a moment.
pub const HUNG_GRACE: Duration = Duration::from_secs(1);

/// A call in flight: its operation and when it started.
#[derive(Clone, Copy)]
struct InFlight {
    operation: &'static str,
    started: Instant,
}

/// The last call that timed out.
#[derive(Clone, Copy)]
struct TimedOut {
    operation: &'static str,
    at: Instant,
    wall: k8s_openapi::jiff::Timestamp,
}

#[derive(Default)]
struct CallState {
    /// One slot per call in flight; `None` slots are free and listed in `free`.
    slots: Vec<Option<InFlight>>,
    free: Vec<usize>,
    /// Set by a timeout, cleared by the next answered call.
    last_timeout: Option<TimedOut>,
}

/// How a call ended, for the health check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// The cloud answered: clears an earlier timeout.
    Answered,
    /// It failed another way, or was cancelled by its caller: changes nothing.
    Other,
    /// It timed out.
    TimedOut,
}

/// The cloud calls of one controller: their timeout, the calls in flight and the last timeout.
pub struct CloudCalls {
    controller: &'static str,
    timeout: Duration,
    metrics: ControllerMetrics,
    state: Mutex<CallState>,
}

impl std::fmt::Debug for CloudCalls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CloudCalls")
            .field("controller", &self.controller)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// Marks one call in flight until it is finished or dropped (a caller that stops waiting).
struct CallGuard<'a> {
    calls: &'a CloudCalls,
    slot: usize,
    outcome: Outcome,
}

impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        let mut state = self.calls.state.lock();
        let operation = state.slots[self.slot].take().map(|c| c.operation);
        state.free.push(self.slot);
        match self.outcome {
            Outcome::Answered => state.last_timeout = None,
            Outcome::TimedOut => {
                state.last_timeout = operation.map(|operation| TimedOut {
                    operation,
                    at: Instant::now(),
                    wall: k8s_openapi::jiff::Timestamp::now(),
                });
            }
            Outcome::Other => {}
        }
    }
}

/// Whether an error is the cloud's answer about the object (not a failure to answer).
fn is_answer(error: &CloudError) -> bool {
    matches!(
        error,
        CloudError::InstanceNotFound | CloudError::DiskNotFound
    )
}

impl CloudCalls {
    /// The calls of `controller` (its canonical name), each given `timeout`; timeouts are counted in
    /// `metrics`.
    pub fn new(controller: &'static str, timeout: Duration, metrics: ControllerMetrics) -> Self {
        CloudCalls {
            controller,
            timeout,
            metrics,
            state: Mutex::new(CallState::default()),
        }
    }

    /// The controller these calls belong to.
    pub fn controller(&self) -> &'static str {
        self.controller
    }

    /// How long each call is given.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    fn begin(&self, operation: &'static str) -> CallGuard<'_> {
        let call = InFlight {
            operation,
            started: Instant::now(),
        };
        let mut state = self.state.lock();
        let slot = match state.free.pop() {
            Some(slot) => {
                state.slots[slot] = Some(call);
                slot
            }
            None => {
                state.slots.push(Some(call));
                state.slots.len() - 1
            }
        };
        CallGuard {
            calls: self,
            slot,
            outcome: Outcome::Other,
        }
    }

    /// Runs the contract call `operation` under the timeout; see the [module docs](self).
    pub async fn run<T>(
        &self,
        operation: &'static str,
        call: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let mut guard = self.begin(operation);
        match tokio::time::timeout(self.timeout, call).await {
            Ok(result) => {
                if result.as_ref().map_or_else(is_answer, |_| true) {
                    guard.outcome = Outcome::Answered;
                }
                result
            }
            Err(_) => {
                guard.outcome = Outcome::TimedOut;
                Err(self.timed_out(operation))
            }
        }
    }

    /// Runs the bulk contract call `operation` about `count` objects under the timeout: a timeout gives
    /// each object a [`CloudError::Timeout`]. An answer with at least one result the cloud answered (or
    /// none at all) counts as answered.
    pub async fn run_bulk<T>(
        &self,
        operation: &'static str,
        count: usize,
        call: impl Future<Output = Vec<Result<T>>>,
    ) -> Vec<Result<T>> {
        let mut guard = self.begin(operation);
        match tokio::time::timeout(self.timeout, call).await {
            Ok(results) => {
                let answered = results.is_empty()
                    || results
                        .iter()
                        .any(|r| r.as_ref().map_or_else(is_answer, |_| true));
                if answered {
                    guard.outcome = Outcome::Answered;
                }
                results
            }
            Err(_) => {
                guard.outcome = Outcome::TimedOut;
                let first = self.timed_out(operation);
                let mut results = Vec::with_capacity(count);
                if count > 0 {
                    results.push(Err(first));
                }
                results.resize_with(count, || Err(CloudError::timeout(operation, self.timeout)));
                results
            }
        }
    }

    /// Logs and counts a timeout; the error the caller gets.
    fn timed_out(&self, operation: &'static str) -> CloudError {
        tracing::warn!(controller = self.controller, operation, timeout = ?self.timeout,
            "cloud call did not answer within --cloud-call-timeout; abandoned it (the sync is retried)");
        self.metrics.cloud_call_timeout(self.controller, operation);
        CloudError::timeout(operation, self.timeout)
    }

    /// Healthy unless a call is hung (in flight for longer than the timeout and [`HUNG_GRACE`]) or the last
    /// call timed out
    /// and none has been answered since; the message names the operation and for how long.
    pub fn health(&self) -> std::result::Result<(), String> {
        let now = Instant::now();
        let state = self.state.lock();
        let limit = self.timeout + HUNG_GRACE;
        let is_hung = |call: &&InFlight| now.saturating_duration_since(call.started) > limit;
        let hung = state.slots.iter().flatten().filter(is_hung).count();
        let oldest = state
            .slots
            .iter()
            .flatten()
            .filter(is_hung)
            .min_by_key(|call| call.started);
        if let Some(oldest) = oldest {
            let mut message = format!(
                "cloud call {} has been in flight for {:.1?}, longer than --cloud-call-timeout ({:?}): \
                 the worker making it is hung",
                oldest.operation,
                now.saturating_duration_since(oldest.started),
                self.timeout
            );
            if hung > 1 {
                message.push_str(&format!(" ({} more calls hung)", hung - 1));
            }
            return Err(message);
        }
        if let Some(last) = state.last_timeout {
            return Err(format!(
                "cloud call {} timed out after {:?} at {} ({:.1?} ago); no cloud call has succeeded since",
                last.operation,
                self.timeout,
                last.wall.strftime("%Y-%m-%dT%H:%M:%SZ"),
                now.saturating_duration_since(last.at)
            ));
        }
        Ok(())
    }

    /// Calls in flight now (for tests and debugging).
    pub fn in_flight(&self) -> usize {
        self.state.lock().slots.iter().flatten().count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calls(timeout_ms: u64) -> CloudCalls {
        CloudCalls::new(
            "node-route-controller",
            Duration::from_millis(timeout_ms),
            ControllerMetrics::default(),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_that_answers_in_time_passes_through() {
        let c = calls(100);
        assert_eq!(c.run("list_routes", async { Ok(7) }).await.unwrap(), 7);
        let err = c
            .run::<()>("create_route", async { Err(CloudError::provider("quota")) })
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "quota");
        assert_eq!(c.health(), Ok(()));
        assert_eq!(c.in_flight(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_timeout_fails_the_check_until_a_call_is_answered() {
        let c = calls(100);
        let err = c
            .run::<()>("list_routes", std::future::pending())
            .await
            .unwrap_err();
        assert!(err.is_timeout());
        assert_eq!(
            err.to_string(),
            "cloud call list_routes timed out after 100ms"
        );
        assert_eq!(
            c.in_flight(),
            0,
            "the abandoned call is no longer in flight"
        );
        assert_eq!(
            c.metrics
                .cloud_call_timeouts
                .get_or_create(&crate::metrics::CloudCallLabels {
                    controller: "node-route-controller".into(),
                    operation: "list_routes".into(),
                })
                .get(),
            1
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        let message = c.health().unwrap_err();
        assert!(
            message.starts_with("cloud call list_routes timed out after 100ms at ")
                && message.contains("(2.0s ago)")
                && message.ends_with("no cloud call has succeeded since"),
            "{message}"
        );
        // A failure that is not an answer leaves it failed; an answer (even "not found") clears it.
        let _ = c
            .run::<()>("create_route", async { Err(CloudError::provider("x")) })
            .await;
        assert!(c.health().is_err());
        let _ = c
            .run::<()>("instance_metadata", async {
                Err(CloudError::InstanceNotFound)
            })
            .await;
        assert_eq!(c.health(), Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_in_flight_past_the_timeout_is_hung() {
        let c = calls(100);
        // A call whose future cannot be dropped by the timeout (it blocks instead of yielding) stays in
        // flight: hold its slot as such a call would.
        let first = c.begin("instance_states");
        let second = c.begin("list_routes");
        tokio::time::sleep(Duration::from_millis(1050)).await;
        assert_eq!(
            c.health(),
            Ok(()),
            "in flight, not past the timeout and the grace"
        );
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert_eq!(
            c.health().unwrap_err(),
            "cloud call instance_states has been in flight for 1.2s, longer than --cloud-call-timeout \
             (100ms): the worker making it is hung (1 more calls hung)"
        );
        drop(first);
        let message = c.health().unwrap_err();
        assert!(message.starts_with("cloud call list_routes"), "{message}");
        assert!(!message.contains("more calls"), "{message}");
        drop(second);
        assert_eq!(
            c.health(),
            Ok(()),
            "a call that ended without an answer clears a hang"
        );
        assert_eq!(c.in_flight(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_call_frees_its_slot_and_slots_are_reused() {
        let c = calls(100);
        let cancelled = tokio::time::timeout(
            Duration::from_millis(10),
            c.run::<()>("get_load_balancer", std::future::pending()),
        )
        .await;
        assert!(cancelled.is_err());
        assert_eq!(c.in_flight(), 0);
        assert_eq!(c.health(), Ok(()), "cancelled by its caller: no timeout");
        for _ in 0..100 {
            c.run("get_zone", async { Ok(()) }).await.unwrap();
        }
        assert_eq!(c.state.lock().slots.len(), 1, "one slot, reused");
    }

    #[tokio::test(start_paused = true)]
    async fn a_bulk_timeout_fails_every_object() {
        let c = calls(100);
        let results = c
            .run_bulk::<bool>("instance_states", 3, std::future::pending())
            .await;
        assert_eq!(results.len(), 3);
        assert!(results.iter().all(|r| r.as_ref().unwrap_err().is_timeout()));
        assert!(c.health().is_err());
        // An answer with one good result clears it; one with only failures does not.
        let failed = c
            .run_bulk::<bool>("instance_states", 1, async {
                vec![Err(CloudError::provider("x"))]
            })
            .await;
        assert_eq!(failed.len(), 1);
        assert!(c.health().is_err());
        c.run_bulk("instance_states", 2, async {
            vec![Ok(true), Err(CloudError::provider("x"))]
        })
        .await;
        assert_eq!(c.health(), Ok(()));
    }
}
