//! Results: per-object latency percentiles, one Markdown table row per scenario plus a details list, and
//! the host facts (cores, load) that put the figures in context.

use std::fmt::Write as _;
use std::time::Duration;

/// What one scenario measured.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Short scenario id (`a`, `b`, ...).
    pub id: String,
    /// What the scenario does.
    pub title: String,
    /// Objects in the scenario (nodes or services): the base of the per-object figures.
    pub objects: usize,
    /// Objects whose completion is timestamped (all of them, except in the lifecycle scenario: the nodes
    /// the pass must change).
    pub tracked: usize,
    /// Tracked objects that reached their goal before the timeout.
    pub completed: usize,
    /// The daemon's flags that matter for the scenario.
    pub settings: String,
    /// From the start of the measurement to the last completion.
    pub wall: Duration,
    /// Median per-object latency.
    pub p50: Duration,
    /// 99th percentile per-object latency.
    pub p99: Duration,
    /// API requests of the daemon during the measurement (Leases left out).
    pub api_requests: u64,
    /// Of those, requests on Events (written through their own client and budget).
    pub event_requests: u64,
    /// The same, by verb and resource.
    pub api_breakdown: String,
    /// Cloud calls during the measurement.
    pub cloud_calls: u64,
    /// The same, by operation.
    pub cloud_breakdown: String,
    /// Event occurrences stored when the last object completed.
    pub events_at_done: u64,
    /// Event occurrences stored after the drain wait.
    pub events_after_drain: u64,
    /// Event objects stored after the drain wait.
    pub event_objects: u64,
    /// Event occurrences the scenario must produce at least.
    pub events_expected: u64,
    /// How long the drain wait lasted.
    pub drain: Duration,
    /// When every expected event was stored, from the start of the measurement.
    pub events_complete_after: Option<Duration>,
    /// Peak resident set size of the daemon (VmHWM), KiB.
    pub peak_rss_kib: u64,
    /// CPU time the daemon used during the measurement, seconds.
    pub cpu_seconds: f64,
    /// Load average (1, 5, 15 min) when the scenario started.
    pub load: String,
    /// Failed correctness checks (empty: every object ended as it should).
    pub failures: Vec<String>,
    /// Further facts worth reading next to the figures.
    pub notes: Vec<String>,
}

impl Outcome {
    /// An outcome for a scenario that could not run at all.
    pub fn failed(id: &str, title: &str, error: &anyhow::Error) -> Outcome {
        Outcome {
            id: id.to_string(),
            title: title.to_string(),
            failures: vec![format!("scenario failed: {error:#}")],
            ..Outcome::default()
        }
    }
}

/// The `pct` percentile (nearest rank) of `values`; zero for no values.
pub fn percentile(values: &[Duration], pct: f64) -> Duration {
    if values.is_empty() {
        return Duration::ZERO;
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let rank = ((pct / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// `1.23 s` from one second on, `45 ms` below.
pub fn format_duration(d: Duration) -> String {
    if d >= Duration::from_secs(1) {
        format!("{:.2} s", d.as_secs_f64())
    } else {
        format!("{} ms", d.as_millis())
    }
}

fn per_object(total: u64, objects: usize) -> String {
    if objects == 0 {
        "-".to_string()
    } else {
        let ratio = total as f64 / objects as f64;
        if ratio > 0.0 && ratio < 0.1 {
            format!("{ratio:.3}")
        } else {
            format!("{ratio:.2}")
        }
    }
}

/// A latency percentile, or `-` for a scenario that timestamps no object's completion.
fn format_latency(o: &Outcome, latency: Duration) -> String {
    if o.p50.is_zero() && o.p99.is_zero() && o.completed > 0 {
        "-".to_string()
    } else {
        format_duration(latency)
    }
}

/// The Markdown table of `outcomes`.
pub fn table(outcomes: &[Outcome]) -> String {
    let mut out = String::from(
        "| Scenario | Objects | Daemon flags | Wall time | p50 | p99 | API req/obj (of which events) | Cloud calls/obj \
         | Events stored (at done / after drain / expected) | Peak RSS | Daemon CPU | Load 1/5/15 | Result |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for o in outcomes {
        let result = if o.failures.is_empty() {
            "ok".to_string()
        } else {
            format!("FAILED ({})", o.failures.len())
        };
        let drained = match o.events_complete_after {
            Some(at) => format!("{} (all at {})", o.events_after_drain, format_duration(at)),
            None => format!("{} (+{:.0} s)", o.events_after_drain, o.drain.as_secs_f64()),
        };
        let done = if o.tracked == o.objects {
            format!("{}/{}", o.completed, o.tracked)
        } else {
            format!("{}/{} of {}", o.completed, o.tracked, o.objects)
        };
        let api = format!(
            "{} ({} events)",
            per_object(o.api_requests, o.objects),
            per_object(o.event_requests, o.objects)
        );
        let _ = writeln!(
            out,
            "| {id}: {title} | {done} | {settings} | {wall} | {p50} | {p99} | {api} | {cloud} \
             | {at_done} / {drained} / {expected} | {rss:.1} MiB | {cpu:.2} s | {load} | {result} |",
            id = o.id,
            title = o.title,
            settings = o.settings,
            wall = format_duration(o.wall),
            p50 = format_latency(o, o.p50),
            p99 = format_latency(o, o.p99),
            cloud = per_object(o.cloud_calls, o.objects),
            at_done = o.events_at_done,
            expected = o.events_expected,
            rss = o.peak_rss_kib as f64 / 1024.0,
            cpu = o.cpu_seconds,
            load = o.load,
        );
    }
    out
}

/// Ours against upstream, scenario by scenario: each cell is "ours / upstream = ratio" (below 1: ours is
/// faster, smaller, or stores fewer events).
pub fn ratios(ours: &[Outcome], upstream: &[Outcome]) -> String {
    let mut out = String::from(
        "| Scenario | Wall time | p50 | p99 | Peak RSS | Daemon CPU | Events stored after drain |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for theirs in upstream {
        let Some(o) = ours.iter().find(|o| o.id == theirs.id) else {
            continue;
        };
        let seconds = |d: Duration| d.as_secs_f64();
        let cell = |a: f64, b: f64, shown: &dyn Fn(f64) -> String| {
            let ratio = match a / b {
                r if !r.is_finite() => "-".to_string(),
                r if r >= 0.1 || r == 0.0 => format!("{r:.2}"),
                // A small ratio reads better as "one part in n".
                r => format!("1/{:.0}", 1.0 / r),
            };
            format!("{} / {} = {ratio}", shown(a), shown(b))
        };
        let time = |v: f64| format_duration(Duration::from_secs_f64(v));
        let mib = |v: f64| format!("{:.1} MiB", v / 1024.0);
        let cpu = |v: f64| format!("{v:.2} s");
        let count = |v: f64| format!("{v:.0}");
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} |",
            o.id,
            cell(seconds(o.wall), seconds(theirs.wall), &time),
            cell(seconds(o.p50), seconds(theirs.p50), &time),
            cell(seconds(o.p99), seconds(theirs.p99), &time),
            cell(o.peak_rss_kib as f64, theirs.peak_rss_kib as f64, &mib),
            cell(o.cpu_seconds, theirs.cpu_seconds, &cpu),
            cell(
                o.events_after_drain as f64,
                theirs.events_after_drain as f64,
                &count
            ),
        );
    }
    out
}

/// The details list: request and call breakdowns, notes and failures per scenario.
pub fn details(outcomes: &[Outcome]) -> String {
    let mut out = String::new();
    for o in outcomes {
        let _ = writeln!(out, "- **{}: {}**", o.id, o.title);
        if !o.api_breakdown.is_empty() {
            let _ = writeln!(
                out,
                "  - API requests ({}): {}",
                o.api_requests, o.api_breakdown
            );
        }
        if !o.cloud_breakdown.is_empty() {
            let _ = writeln!(
                out,
                "  - cloud calls ({}): {}",
                o.cloud_calls, o.cloud_breakdown
            );
        }
        if o.event_objects > 0 {
            let _ = writeln!(
                out,
                "  - events: {} occurrences in {} Event objects after the drain",
                o.events_after_drain, o.event_objects
            );
        }
        for note in &o.notes {
            let _ = writeln!(out, "  - {note}");
        }
        for failure in &o.failures {
            let _ = writeln!(out, "  - FAILED: {failure}");
        }
    }
    out
}

/// The load average (1, 5 and 15 minutes) as `a / b / c`.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" / ")
        })
        .unwrap_or_else(|| "?".to_string())
}

/// Cores available to this process.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn ratios_pair_scenarios_by_id() {
        let outcome = |id: &str, wall_ms: u64, rss_kib: u64, events: u64| Outcome {
            id: id.to_string(),
            wall: ms(wall_ms),
            peak_rss_kib: rss_kib,
            events_after_drain: events,
            ..Outcome::default()
        };
        let ours = [
            outcome("a", 500, 1024, 10),
            outcome("b", 8000, 2048, 10),
            outcome("c", 300, 0, 0),
        ];
        let upstream = [outcome("b", 16000, 8192, 5), outcome("c", 198_000, 0, 0)];
        let table = ratios(&ours, &upstream);
        let rows: Vec<&str> = table.lines().skip(2).collect();
        assert_eq!(rows.len(), 2, "{table}");
        assert!(
            rows[1].starts_with("| c | 300 ms / 198.00 s = 1/660 |"),
            "{table}"
        );
        assert!(rows[1].contains("| 0.0 MiB / 0.0 MiB = - |"), "{table}");
        assert!(
            rows[0].starts_with("| b | 8.00 s / 16.00 s = 0.50 |"),
            "{table}"
        );
        assert!(rows[0].contains("| 2.0 MiB / 8.0 MiB = 0.25 |"), "{table}");
        assert!(rows[0].ends_with("| 10 / 5 = 2.00 |"), "{table}");
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let values: Vec<Duration> = (1..=100).rev().map(ms).collect();
        assert_eq!(percentile(&values, 50.0), ms(50));
        assert_eq!(percentile(&values, 99.0), ms(99));
        assert_eq!(percentile(&values, 100.0), ms(100));
        assert_eq!(percentile(&[ms(7)], 99.0), ms(7));
        assert_eq!(percentile(&[ms(1), ms(9)], 50.0), ms(1));
        assert_eq!(percentile(&[], 50.0), Duration::ZERO);
    }

    #[test]
    fn small_ratios_keep_three_decimals() {
        assert_eq!(per_object(20, 5000), "0.004");
        assert_eq!(per_object(0, 5000), "0.00");
        assert_eq!(per_object(9998, 5000), "2.00");
        assert_eq!(per_object(3, 0), "-");
    }

    #[test]
    fn durations_switch_units_at_one_second() {
        assert_eq!(format_duration(ms(999)), "999 ms");
        assert_eq!(format_duration(ms(48_560)), "48.56 s");
    }

    #[test]
    fn table_rows_carry_per_object_figures_and_failures() {
        let ok = Outcome {
            id: "a".into(),
            title: "init".into(),
            objects: 4,
            tracked: 4,
            completed: 4,
            settings: "qps 20".into(),
            wall: ms(2_500),
            p50: ms(300),
            p99: ms(1_200),
            api_requests: 6,
            event_requests: 4,
            cloud_calls: 2,
            events_at_done: 3,
            events_after_drain: 4,
            events_expected: 4,
            events_complete_after: Some(ms(3_000)),
            peak_rss_kib: 20_480,
            cpu_seconds: 0.5,
            load: "1.00 / 0.50 / 0.25".into(),
            ..Outcome::default()
        };
        let partial = Outcome {
            id: "c".into(),
            objects: 10,
            tracked: 2,
            completed: 1,
            ..Outcome::default()
        };
        let broken = Outcome::failed("b", "big", &anyhow::anyhow!("no daemon"));
        let text = table(&[ok, broken.clone(), partial]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 5);
        assert!(lines[4].starts_with("| c:  | 1/2 of 10 |"));
        assert!(lines[2].starts_with(
            "| a: init | 4/4 | qps 20 | 2.50 s | 300 ms | 1.20 s | 1.50 (1.00 events) | 0.50 |"
        ));
        assert!(lines[2].contains("| 3 / 4 (all at 3.00 s) / 4 | 20.0 MiB | 0.50 s |"));
        assert!(lines[2].ends_with("| ok |"));
        assert!(lines[3].ends_with("| FAILED (1) |"));
        assert!(details(&[broken]).contains("FAILED: scenario failed: no daemon"));
    }
}
