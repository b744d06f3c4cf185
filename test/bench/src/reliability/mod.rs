//! The reliability scenarios: the daemon on the real control plane (`hack/realkube`) while the control
//! plane's own components fail as they do in clusters, through realkube's control endpoint
//! ([`control`]): kube-apiserver and etcd restarted, etcd compacted, and a TCP fault proxy between each
//! daemon and the API server (latency, resets, a blackhole, a one-way cut). Each case starts a fresh
//! control plane, asserts the end state, and reports its figures; the requests are read from the API
//! server's audit log ([`crate::audit`]).
//!
//! | case                | what happens                                                                  |
//! |---------------------|-------------------------------------------------------------------------------|
//! | `apiserver-restarts`| kube-apiserver restarted twice while Nodes initialize and load balancers sync |
//! | `etcd-compaction`   | etcd compacted and restarted (then kube-apiserver) while the daemon is cut off |
//! | `leader-blackhole`  | two replicas; the leader's proxy drops everything                             |
//! | `leader-one-way`    | two replicas; the leader's requests arrive, the answers are dropped           |
//! | `leader-kill`       | two replicas; the leader is killed with SIGKILL                               |
//! | `leader-sigterm`    | two replicas; the leader is stopped with SIGTERM                              |
//! | `slow-apiserver`    | every request 2 s late for a minute                                           |
//! | `cloud-faults-restart` | a slow cloud failing 30% of its calls during a kube-apiserver restart      |

mod bed;
mod compaction;
mod control;
mod failover;
mod restarts;
mod slow;

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::bail;

use crate::report::load_average;
use crate::scenario::RunSettings;
use bed::Bed;
use failover::Fault;
use restarts::RestartCase;

/// Every case, in the order they run.
pub const CASES: &[&str] = &[
    "apiserver-restarts",
    "etcd-compaction",
    "leader-blackhole",
    "leader-one-way",
    "leader-kill",
    "leader-sigterm",
    "slow-apiserver",
    "cloud-faults-restart",
];

/// The workload sizes.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    /// Nodes of the restart cases (the slow case creates a fifth).
    pub nodes: usize,
    /// LoadBalancer Services of the restart cases (the slow case creates a fifth).
    pub services: usize,
    /// The longest wait for any end state.
    pub timeout: Duration,
}

/// What one case found.
#[derive(Debug, Default)]
pub struct CaseReport {
    /// Figures, in the order measured.
    pub figures: Vec<(String, String)>,
    /// Assertions that failed.
    pub failures: Vec<String>,
}

impl CaseReport {
    /// Records a figure.
    pub fn figure(&mut self, what: &str, value: String) {
        eprintln!("[reliability]   {what}: {value}");
        self.figures.push((what.to_string(), value));
    }

    /// Records a failed assertion.
    pub fn fail(&mut self, failure: String) {
        eprintln!("[reliability]   FAILED: {failure}");
        self.failures.push(failure);
    }
}

/// The first five of `items`, comma-separated, for a failure line.
pub fn first_few(items: &[String]) -> String {
    items.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
}

/// A duration in seconds with two decimals (milliseconds below a second).
pub fn seconds(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else {
        format!("{:.2} s", d.as_secs_f64())
    }
}

/// Runs `cases` (all when empty), each on a fresh control plane, and returns the Markdown section; fails
/// when any case failed, after all ran.
pub async fn run(settings: &RunSettings, sizes: Sizes, cases: &[String]) -> anyhow::Result<String> {
    for case in cases {
        if !CASES.contains(&case.as_str()) {
            bail!(
                "unknown reliability case {case:?}; the cases: {}",
                CASES.join(", ")
            );
        }
    }
    let selected: Vec<&str> = CASES
        .iter()
        .copied()
        .filter(|c| cases.is_empty() || cases.iter().any(|s| s == c))
        .collect();
    let load = load_average();
    let mut text = format!(
        "### Reliability on the real control plane\n\n{} nodes and {} LoadBalancer Services where a case \
         says so; load before: {load}.\n\n| case | result | seconds | figures |\n|---|---|---|---|\n",
        sizes.nodes, sizes.services
    );
    let mut failed = Vec::new();
    for case in selected {
        eprintln!("[reliability] {case}");
        let started = Instant::now();
        let (report, kept) = run_case(settings, sizes, case).await;
        let result = if report.failures.is_empty() {
            "passed"
        } else {
            "FAILED"
        };
        let figures: Vec<String> = report
            .figures
            .iter()
            .map(|(what, value)| format!("{what}: {value}"))
            .chain(report.failures.iter().map(|f| format!("**{f}**")))
            .chain(kept.map(|dir| format!("logs kept in {dir}")))
            .collect();
        let _ = writeln!(
            text,
            "| `{case}` | {result} | {:.0} | {} |",
            started.elapsed().as_secs_f64(),
            figures.join("; ")
        );
        if !report.failures.is_empty() {
            failed.push(case);
        }
    }
    println!("{text}");
    if !failed.is_empty() {
        bail!("reliability cases failed: {}\n\n{text}", failed.join(", "));
    }
    Ok(text)
}

/// Runs one case on a control plane of its own; an error is a failure of the case. The directory is kept
/// (and named) when the case failed.
async fn run_case(
    settings: &RunSettings,
    sizes: Sizes,
    case: &str,
) -> (CaseReport, Option<String>) {
    let mut report = CaseReport::default();
    let dir = match tempfile::Builder::new()
        .prefix(&format!("ccm-reliability-{case}-"))
        .tempdir()
    {
        Ok(dir) => dir,
        Err(err) => {
            report.fail(format!("cannot create a scratch directory: {err}"));
            return (report, None);
        }
    };
    let result = match Bed::start(settings, dir.path()).await {
        Ok(bed) => {
            let result = run_on(&bed, sizes, case, &mut report).await;
            bed.shutdown().await;
            result
        }
        Err(err) => Err(err),
    };
    if let Err(err) = result {
        report.fail(format!("{err:#}"));
    }
    let kept = (!report.failures.is_empty()).then(|| keep(dir));
    (report, kept)
}

fn keep(dir: tempfile::TempDir) -> String {
    let path: &Path = &dir.keep();
    path.display().to_string()
}

async fn run_on(
    bed: &Bed,
    sizes: Sizes,
    case: &str,
    report: &mut CaseReport,
) -> anyhow::Result<()> {
    match case {
        "apiserver-restarts" => {
            let case = RestartCase {
                restart_at_percent: &[20, 60],
                failing_cloud: false,
            };
            restarts::run(bed, sizes, &case, report).await
        }
        "cloud-faults-restart" => {
            let case = RestartCase {
                restart_at_percent: &[40],
                failing_cloud: true,
            };
            restarts::run(bed, sizes, &case, report).await
        }
        "etcd-compaction" => compaction::run(bed, sizes, report).await,
        "leader-blackhole" => failover::run(bed, sizes, Fault::Blackhole, report).await,
        "leader-one-way" => failover::run(bed, sizes, Fault::CutResponses, report).await,
        "leader-kill" => failover::run(bed, sizes, Fault::Kill, report).await,
        "leader-sigterm" => failover::run(bed, sizes, Fault::Term, report).await,
        "slow-apiserver" => slow::run(bed, sizes, report).await,
        other => bail!("unknown reliability case {other:?}"),
    }
}
