//! The faults of the chaos scenario: the fake cloud's error rates (every operation), the API server's
//! failing writes, and a task that cuts every watch and compacts the history while the faults last.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::PostParams;
use provider_fake::{FaultKind, FaultSpec};
use test_apiserver::{Controls, FaultRule, LatencyRule};
use tokio::task::JoinHandle;

/// Operations whose injected errors ask for a retry after [`RETRY_AFTER`] (`CloudError::Retry`); every
/// other operation fails with a plain provider error.
pub const RETRY_OPERATIONS: &[&str] = &["update_load_balancer", "ensure_load_balancer_deleted"];
/// The delay injected `Retry` errors ask for.
pub const RETRY_AFTER: Duration = Duration::from_secs(1);
/// The operations that change the cloud (frozen before the daemon is killed).
pub const MUTATING_OPERATIONS: &[&str] = &[
    "ensure_load_balancer",
    "update_load_balancer",
    "ensure_load_balancer_deleted",
    "create_route",
    "delete_route",
];
/// The verbs of writes.
const WRITE_VERBS: &[&str] = &["create", "update", "patch", "delete"];
/// The resources whose writes fail (Leases are left alone: leader election is exercised by the kill).
const FAULTED_RESOURCES: &[&str] = &["nodes", "services", "events"];
/// How the failing writes split between statuses: (HTTP status, share, Retry-After seconds).
const WRITE_FAILURES: &[(u16, f64, Option<u32>)] =
    &[(500, 0.4, None), (409, 0.3, None), (429, 0.3, Some(1))];
/// How long re-watches are held back while the history moves past them (forcing `410 Gone`).
const WATCH_HOLD: Duration = Duration::from_millis(400);

/// The fake cloud's faults while the chaos lasts: `percent`% errors on every operation, all calls
/// delayed by `latency_ms`.
pub fn cloud_faults(percent: u32, latency_ms: u64) -> BTreeMap<String, FaultSpec> {
    let rate = f64::from(percent) / 100.0;
    let latency = Duration::from_millis(latency_ms);
    let mut faults = BTreeMap::new();
    faults.insert(
        "*".to_string(),
        FaultSpec::errors(rate, FaultKind::Provider).with_latency(latency),
    );
    for op in RETRY_OPERATIONS {
        faults.insert(
            (*op).to_string(),
            FaultSpec::errors(rate, FaultKind::Retry)
                .with_retry_after(RETRY_AFTER)
                .with_latency(latency),
        );
    }
    faults
}

/// The fault that makes every call of a mutating operation fail (the cloud is frozen).
pub fn freeze_fault(latency_ms: u64) -> FaultSpec {
    FaultSpec::errors(1.0, FaultKind::Provider).with_latency(Duration::from_millis(latency_ms))
}

/// The fault rules that make `percent`% of the writes (create, update, patch, delete) of Nodes, Services
/// and Events fail: 40% of them with 500, 30% with 409 Conflict, 30% with 429 and `Retry-After: 1`.
/// Rules are tried in order and the first that fires wins, so each rate is the share left by the ones
/// before it.
pub fn api_write_faults(percent: u32) -> Vec<FaultRule> {
    let total = f64::from(percent) / 100.0;
    let mut rules = Vec::new();
    for verb in WRITE_VERBS {
        for resource in FAULTED_RESOURCES {
            let mut untouched = 1.0;
            for (status, share, retry_after) in WRITE_FAILURES {
                let p = total * share;
                let mut rule = FaultRule::new(*status)
                    .verb(*verb)
                    .resource(*resource)
                    .rate(if untouched > 0.0 { p / untouched } else { 0.0 });
                if let Some(seconds) = retry_after {
                    rule = rule.retry_after(*seconds);
                }
                rules.push(rule);
                untouched -= p;
            }
        }
    }
    rules
}

/// What the disruptor did.
#[derive(Debug, Default)]
pub struct Disruptions {
    /// Times every watch was cut.
    pub cuts: AtomicU64,
    /// Times the history was compacted.
    pub compactions: AtomicU64,
}

/// Cuts every watch and compacts the history every `every`; every other time it holds re-watches back
/// while a write moves the history past them, so that they get `410 Gone` and the informers list again.
pub struct Disruptor {
    task: JoinHandle<()>,
    controls: Controls,
    counts: Arc<Disruptions>,
}

impl Disruptor {
    /// Starts disrupting.
    pub fn start(controls: Controls, client: kube::Client, every: Duration) -> Disruptor {
        let counts = Arc::new(Disruptions::default());
        let task = tokio::spawn(disrupt(
            controls.clone(),
            Api::all(client),
            every,
            counts.clone(),
        ));
        Disruptor {
            task,
            controls,
            counts,
        }
    }

    /// Stops disrupting (and lifts a hold on re-watches); returns (cuts, compactions).
    pub async fn stop(mut self) -> (u64, u64) {
        self.task.abort();
        // Once the task is gone it cannot add a hold after the one cleared here.
        let _ = (&mut self.task).await;
        self.controls.clear_latency();
        (
            self.counts.cuts.load(Ordering::Relaxed),
            self.counts.compactions.load(Ordering::Relaxed),
        )
    }
}

impl Drop for Disruptor {
    fn drop(&mut self) {
        // Also when the scenario ends early with an error.
        self.task.abort();
    }
}

async fn disrupt(
    controls: Controls,
    namespaces: Api<Namespace>,
    every: Duration,
    counts: Arc<Disruptions>,
) {
    for round in 1u64.. {
        tokio::time::sleep(every).await;
        let hold = round % 2 == 0;
        if hold {
            controls.add_latency(LatencyRule::new(WATCH_HOLD).verb("watch"));
        }
        controls.close_watches();
        counts.cuts.fetch_add(1, Ordering::Relaxed);
        if hold {
            // A write of its own, so that the history surely moves past every watcher's resourceVersion.
            let marker: Namespace = serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("chaos-marker-{round}")}
            }))
            .expect("a valid Namespace");
            if let Err(error) = namespaces.create(&PostParams::default(), &marker).await {
                eprintln!("[chaos] cannot create a marker namespace: {error}");
            }
        }
        controls.compact();
        counts.compactions.fetch_add(1, Ordering::Relaxed);
        if hold {
            tokio::time::sleep(WATCH_HOLD + Duration::from_millis(100)).await;
            controls.clear_latency();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_faults_add_up_to_the_rate() {
        let rules = api_write_faults(10);
        assert_eq!(
            rules.len(),
            WRITE_VERBS.len() * FAULTED_RESOURCES.len() * WRITE_FAILURES.len()
        );
        // For one (verb, resource): the chance that some rule fires is the asked rate.
        let rates: Vec<f64> = rules
            .iter()
            .filter(|r| {
                r.verb.as_deref() == Some("patch") && r.resource.as_deref() == Some("nodes")
            })
            .map(|r| match r.mode {
                test_apiserver::FaultMode::Rate(rate) => rate,
                other => panic!("unexpected mode {other:?}"),
            })
            .collect();
        let none_fires: f64 = rates.iter().map(|r| 1.0 - r).product();
        assert!((1.0 - none_fires - 0.10).abs() < 1e-9, "{rates:?}");
        // Each status gets its share.
        assert!((rates[0] - 0.04).abs() < 1e-9);
        assert!((rates[1] * (1.0 - rates[0]) - 0.03).abs() < 1e-9);
        assert!(
            rules
                .iter()
                .all(|r| r.resource.as_deref() != Some("leases"))
        );
        assert!(
            rules
                .iter()
                .filter(|r| r.status == 429)
                .all(|r| r.retry_after_seconds == Some(1))
        );
    }

    #[test]
    fn cloud_faults_cover_every_operation() {
        let faults = cloud_faults(30, 20);
        assert_eq!(faults["*"].error_rate, 0.3);
        assert_eq!(faults["*"].kind, FaultKind::Provider);
        assert_eq!(faults["update_load_balancer"].kind, FaultKind::Retry);
        assert!(faults.values().all(|f| f.latency_ms == 20));
        for op in MUTATING_OPERATIONS {
            assert!(provider_fake::OPERATIONS.contains(op), "{op}");
        }
        assert_eq!(freeze_fault(20).error_rate, 1.0);
    }
}
