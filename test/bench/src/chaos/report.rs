//! The chaos scenario's figures: one row of the benchmark table (wall time = convergence from the start,
//! latencies of every Node's initialization and every remaining Service's ingress) and the details
//! (timeline, restarts, injected failures the daemon met, cloud calls, memory per incarnation).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::daemons::Totals;
use super::{Chaos, StoredEvents, Timeline};
use crate::cluster::{DAEMON_USER, describe_requests, event_requests, total_without_leases};
use crate::report::{Outcome, format_duration, percentile};

/// `later - earlier`, or zero.
fn since(later: Instant, earlier: Instant) -> Duration {
    later.saturating_duration_since(earlier)
}

impl Chaos<'_> {
    /// Per-object latencies (create request to goal) of the Nodes and of the remaining Services.
    fn latencies(&self) -> (Vec<Duration>, Vec<Duration>) {
        let of = |done: std::collections::HashMap<String, Instant>| -> Vec<Duration> {
            done.iter()
                .filter_map(|(name, at)| self.created.get(name).map(|sent| since(*at, *sent)))
                .collect()
        };
        (
            of(self.node_tracker.completions()),
            of(self.service_tracker.completions()),
        )
    }

    /// The daemon's requests that got an injected error, by status.
    fn failed_requests(&self) -> BTreeMap<u16, u64> {
        let mut codes = BTreeMap::new();
        for record in self.controls.request_log() {
            if record.user == DAEMON_USER && matches!(record.code, 409 | 429 | 500) {
                *codes.entry(record.code).or_insert(0) += 1;
            }
        }
        codes
    }

    fn timeline_note(&self, t: &Timeline, converged: Instant) -> String {
        format!(
            "timeline from the first create: creates done {}, half the nodes initialized {}, daemon killed \
             {} and restarted {}, Lease taken over {} ({} after the restart: the killed daemon's Lease had \
             to expire), faults stopped {}, converged {} ({} after the kill, {} after the restart, {} \
             after the faults stopped)",
            format_duration(since(t.creates_done, t.start)),
            format_duration(since(t.midway, t.start)),
            format_duration(since(t.killed, t.start)),
            format_duration(since(t.restarted, t.start)),
            format_duration(since(t.takeover, t.start)),
            format_duration(since(t.takeover, t.restarted)),
            format_duration(since(t.faults_end, t.start)),
            format_duration(since(converged, t.start)),
            format_duration(since(converged, t.killed)),
            format_duration(since(converged, t.restarted)),
            format_duration(since(converged, t.faults_end)),
        )
    }

    fn daemon_notes(&self, totals: &Totals) -> Vec<String> {
        let peaks: Vec<String> = totals
            .peaks_kib
            .iter()
            .map(|kib| format!("{:.1} MiB", *kib as f64 / 1024.0))
            .collect();
        let failed: Vec<String> = self
            .failed_requests()
            .iter()
            .map(|(code, n)| format!("{code}: {n}"))
            .collect();
        vec![
            format!(
                "daemon restarts: {} (one kill -9 by the benchmark, {} exits on its own); peak RSS per \
                 incarnation: {}",
                totals.restarts,
                totals.unexpected_exits.len(),
                peaks.join(", ")
            ),
            format!(
                "the daemon's requests answered with an error ({}) — injected ones and the conflicts they \
                 cause",
                failed.join(", ")
            ),
            format!(
                "stopped instances: {}, terminated instances: {}, services deleted midway: {}",
                self.expected.stopped.len(),
                self.expected.terminated.len(),
                self.expected.deleted_services.len()
            ),
        ]
    }

    /// The table row and details of the run.
    pub(super) fn outcome(
        mut self,
        t: &Timeline,
        events: &StoredEvents,
        totals: Totals,
    ) -> Outcome {
        let converged = t.converged.unwrap_or_else(Instant::now);
        let (node_latencies, service_latencies) = self.latencies();
        let mut notes = vec![self.timeline_note(t, converged)];
        notes.push(format!(
            "nodes initialized p50 {} / p99 {}, services' ingress p50 {} / p99 {} (from their create \
             request)",
            format_duration(percentile(&node_latencies, 50.0)),
            format_duration(percentile(&node_latencies, 99.0)),
            format_duration(percentile(&service_latencies, 50.0)),
            format_duration(percentile(&service_latencies, 99.0)),
        ));
        notes.extend(self.daemon_notes(&totals));
        notes.append(&mut self.notes);
        let mut failures = std::mem::take(&mut self.failures);
        failures.extend(totals.unexpected_exits.iter().cloned());
        if !totals.panics.is_empty() {
            failures.push(format!(
                "the daemon panicked: {}",
                totals.panics.join(" | ")
            ));
        }
        if !totals.status.success() {
            failures.push(format!(
                "the daemon exited with {} when asked to stop",
                totals.status
            ));
        }
        let requests = self.cluster.daemon_requests();
        let mut latencies = node_latencies;
        latencies.extend(service_latencies);
        Outcome {
            id: self.scenario.id.to_string(),
            title: self.scenario.title(),
            objects: self.expected.nodes + self.expected.services,
            tracked: self.node_tracker.expected() + self.service_tracker.expected(),
            completed: self.node_tracker.done_count() + self.service_tracker.done_count(),
            settings: self.scenario.settings(),
            wall: since(converged, t.start),
            p50: percentile(&latencies, 50.0),
            p99: percentile(&latencies, 99.0),
            api_requests: total_without_leases(&requests),
            event_requests: event_requests(&requests),
            api_breakdown: describe_requests(&requests),
            cloud_calls: totals.calls.values().sum(),
            cloud_breakdown: totals
                .calls
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(op, n)| format!("{op} {n}"))
                .collect::<Vec<_>>()
                .join(", "),
            events_at_done: events.at_convergence,
            events_after_drain: events.settled.0,
            event_objects: events.settled.1,
            events_expected: 0,
            drain: events.waited,
            events_complete_after: None,
            peak_rss_kib: totals.peaks_kib.iter().copied().max().unwrap_or(0),
            cpu_seconds: totals.cpu_seconds,
            load: String::new(),
            failures,
            notes,
        }
    }
}
