//! `ccm-bench`: whole-process benchmarks of the cloud-controller-manager.
//!
//! Each scenario starts the in-memory API server (`test_apiserver`, in this process; with `--realkube`, a
//! real control plane started for it), runs the release
//! build of the daemon as a separate process with the fake provider (every cloud call delayed by 20 ms),
//! creates the workload, timestamps every object's completion through a watch, and reports wall time,
//! per-object latency percentiles, the daemon's API requests and cloud calls per object, the events
//! stored, and the daemon's peak RSS and CPU time, as a Markdown table. See `README.md`.
//!
//! ```text
//! cargo build --release -p cloud-controller-manager
//! cargo run --release -p ccm-bench -- [--scenario a,b,c,d,d-paced] [--nodes N] [--write FILE]
//! cargo run --release -p ccm-bench -- --scenario chaos     # asserts the end state under faults
//! ```

mod audit;
mod chaos;
mod cluster;
mod daemon;
mod fake_admin;
mod lb_traffic;
mod reliability;
mod report;
mod runner;
mod scale;
mod scenario;
mod tracker;
mod workload;

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;

use crate::report::Outcome;
use crate::scenario::{DaemonKind, Kind, RunSettings, Scenario};

/// Whole-process benchmarks of the cloud-controller-manager (the daemon runs as a separate process
/// against an in-memory API server, with the fake cloud provider).
#[derive(Debug, Parser)]
#[command(name = "ccm-bench", max_term_width = 110)]
struct Args {
    /// Scenarios to run, comma-separated: a, b, b-addr, c, d, d-paced, chaos, e, e-start, e-pass, f, all
    /// (a to d-paced), scale (e to f), lb-traffic (the fake load balancers' data path, alone), or
    /// reliability (faults of the real control plane, alone; needs --realkube; 1,000 nodes and 200
    /// services by default).
    #[arg(long, value_delimiter = ',', default_value = "all")]
    scenario: Vec<String>,
    /// With --scenario reliability: the cases to run, comma-separated (default: all of them).
    #[arg(long, value_delimiter = ',')]
    case: Vec<String>,
    /// Nodes of the node scenarios (a, b, c, e, e-start, e-pass) and of chaos, instead of their defaults.
    #[arg(long)]
    nodes: Option<usize>,
    /// Services of the load-balancer scenarios (d, d-paced, f) and of chaos, instead of their defaults.
    #[arg(long)]
    services: Option<usize>,
    /// --kube-api-qps of the daemon, instead of the scenario's.
    #[arg(long)]
    qps: Option<f64>,
    /// --kube-api-burst of the daemon, instead of the scenario's.
    #[arg(long)]
    burst: Option<u32>,
    /// --concurrent-node-syncs of the daemon, instead of the scenario's.
    #[arg(long)]
    node_workers: Option<u32>,
    /// --concurrent-service-syncs of the daemon, instead of the scenario's.
    #[arg(long)]
    service_workers: Option<u32>,
    /// Latency of every fake cloud call, in milliseconds.
    #[arg(long, default_value_t = 20)]
    latency_ms: u64,
    /// Lifecycle and chaos scenarios: percent of the nodes whose instance is stopped.
    #[arg(long, default_value_t = 5)]
    stopped_percent: u32,
    /// Lifecycle and chaos scenarios: percent of the nodes whose instance is terminated.
    #[arg(long, default_value_t = 5)]
    terminated_percent: u32,
    /// Chaos: percent of the calls of every cloud operation that fail.
    #[arg(long, default_value_t = 30)]
    cloud_error_percent: u32,
    /// Chaos: percent of the writes of nodes, services and events the API server fails (500, 409, 429).
    #[arg(long, default_value_t = 10)]
    api_error_percent: u32,
    /// Chaos: seconds the faults go on after the restarted daemon took the Lease.
    #[arg(long, default_value_t = 30)]
    fault_seconds: u64,
    /// Load-balancer scenarios: Ready nodes that exist before the services (d: 100, f: 5,000).
    #[arg(long)]
    lb_nodes: Option<usize>,
    /// f: seconds of steady state measured before the node changes.
    #[arg(long, default_value_t = 30)]
    steady_seconds: u64,
    /// e: nodes created per second, instead of 1,000 (0: all at once).
    #[arg(long)]
    node_rate: Option<f64>,
    /// Services created per second by d-paced.
    #[arg(long, default_value_t = 200.0)]
    service_rate: f64,
    /// Longest wait for every object of a scenario to complete, in seconds.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// Longest wait after the last completion for the expected events to be stored, in seconds.
    #[arg(long, default_value_t = 60)]
    event_drain: u64,
    /// Concurrent create requests of the workload.
    #[arg(long, default_value_t = 64)]
    create_concurrency: usize,
    /// The daemon binary (default: target/release/cloud-controller-manager).
    #[arg(long)]
    daemon: Option<PathBuf>,
    /// k8s.io/cloud-provider's CCM (hack/upstream, `make upstream`): scenarios a, b, c, e, e-start and
    /// e-pass run with it too, on the same API server and fake cloud, and a table gives ours / upstream.
    #[arg(long)]
    upstream: Option<PathBuf>,
    /// Longest wait of the upstream runs, in seconds (default: --timeout): a capped run reports how far it
    /// got.
    #[arg(long)]
    upstream_timeout: Option<u64>,
    /// Run every scenario on a real control plane started for it with this `hack/realkube` binary
    /// (`make realkube`: target/realkube/bin/realkube) instead of the in-memory API server.
    #[arg(long)]
    realkube: Option<PathBuf>,
    /// An extra daemon flag (repeatable), e.g. --daemon-arg=--node-monitor-period=2s.
    #[arg(long = "daemon-arg", allow_hyphen_values = true)]
    daemon_args: Vec<String>,
    /// An extra environment variable of the daemon (repeatable), e.g. --daemon-env=MALLOC_ARENA_MAX=2.
    #[arg(long = "daemon-env", value_parser = parse_env)]
    daemon_env: Vec<(String, String)>,
    /// Append the results (table and details) to this file.
    #[arg(long)]
    write: Option<PathBuf>,
}

/// `KEY=VALUE`.
fn parse_env(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => Err(format!("expected KEY=VALUE, got {text:?}")),
    }
}

impl Args {
    /// The cap of each upstream run.
    fn upstream_timeout(&self) -> Duration {
        Duration::from_secs(self.upstream_timeout.unwrap_or(self.timeout))
    }

    /// The settings of every run.
    fn run_settings(&self) -> RunSettings {
        RunSettings {
            binary: self.daemon.clone().unwrap_or_else(daemon::default_binary),
            realkube: self.realkube.clone(),
            extra_flags: self.daemon_args.clone(),
            extra_env: self.daemon_env.clone(),
            latency_ms: self.latency_ms,
            timeout: Duration::from_secs(self.timeout),
            event_drain: Duration::from_secs(self.event_drain),
            create_concurrency: self.create_concurrency,
            daemon_kind: DaemonKind::Ours,
        }
    }

    fn scenarios(&self) -> anyhow::Result<Vec<Scenario>> {
        let mut ids: Vec<&str> = Vec::new();
        for id in &self.scenario {
            match id.trim() {
                "all" => ids.extend(Scenario::ALL),
                "scale" => ids.extend(Scenario::SCALE),
                other => ids.push(other),
            }
        }
        let mut out = Vec::new();
        for id in ids {
            let Some(mut s) = Scenario::preset(id) else {
                bail!(
                    "unknown scenario {id:?} (known: {}, {}, all, scale)",
                    Scenario::ALL.join(", "),
                    Scenario::NAMED_ONLY.join(", ")
                );
            };
            match s.kind {
                Kind::NodeInit | Kind::Lifecycle | Kind::Startup => {
                    s.objects = self.nodes.unwrap_or(s.objects);
                    if s.create_rate > 0.0 {
                        s.create_rate = self.node_rate.unwrap_or(s.create_rate);
                    }
                }
                Kind::NodeChange => {
                    s.objects = self.services.unwrap_or(s.objects);
                    s.lb_nodes = self.lb_nodes.unwrap_or(s.lb_nodes);
                    s.steady_seconds = self.steady_seconds;
                }
                Kind::LoadBalancers => {
                    s.objects = self.services.unwrap_or(s.objects);
                    s.lb_nodes = self.lb_nodes.unwrap_or(s.lb_nodes);
                    if s.create_rate > 0.0 {
                        s.create_rate = self.service_rate;
                    }
                }
                Kind::Chaos => {
                    s.objects = self.nodes.unwrap_or(s.objects);
                    s.services = self.services.unwrap_or(s.services);
                    s.chaos = scenario::ChaosOptions {
                        cloud_error_percent: self.cloud_error_percent,
                        api_error_percent: self.api_error_percent,
                        fault_seconds: self.fault_seconds,
                    };
                    if s.chaos.cloud_error_percent > 100 || s.chaos.api_error_percent > 100 {
                        bail!("--cloud-error-percent and --api-error-percent are at most 100");
                    }
                }
            }
            s.qps = self.qps.unwrap_or(s.qps);
            s.burst = self.burst.unwrap_or(s.burst);
            s.node_workers = self.node_workers.unwrap_or(s.node_workers);
            s.service_workers = self.service_workers.unwrap_or(s.service_workers);
            s.stopped_percent = self.stopped_percent;
            s.terminated_percent = self.terminated_percent;
            if s.stopped_percent + s.terminated_percent > 100 {
                bail!("--stopped-percent plus --terminated-percent exceeds 100");
            }
            out.push(s);
        }
        Ok(out)
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.scenario.iter().any(|s| s.trim() == LB_TRAFFIC) {
        return run_lb_traffic(&args).await;
    }
    if args.scenario.iter().any(|s| s.trim() == RELIABILITY) {
        return run_reliability(&args).await;
    }
    let scenarios = args.scenarios()?;
    let settings = args.run_settings();
    if !settings.binary.is_file() {
        bail!(
            "the daemon binary {} does not exist; build it with `cargo build --release -p \
             cloud-controller-manager` (or pass --daemon PATH)",
            settings.binary.display()
        );
    }
    eprintln!(
        "ccm-bench: {} cores, load {}, daemon {}, cloud latency {} ms",
        report::cores(),
        report::load_average(),
        settings.binary.display(),
        settings.latency_ms
    );

    let outcomes = run_all(&scenarios, &settings, "").await;
    let upstream = match &args.upstream {
        Some(binary) => {
            let compared: Vec<Scenario> = scenarios
                .iter()
                .filter(|s| UPSTREAM_SCENARIOS.contains(&s.id))
                .cloned()
                .collect();
            run_all(
                &compared,
                &upstream_settings(&settings, binary, args.upstream_timeout())?,
                " (upstream)",
            )
            .await
        }
        None => Vec::new(),
    };
    let api_server = match &args.realkube {
        Some(_) => "a real kube-apiserver (hack/realkube)",
        None => "the in-memory API server",
    };
    let header = format!(
        "Run at {} on {} cores (load average at start {}) on {api_server}, fake cloud latency {} ms per call, daemon {}.\n",
        k8s_openapi::jiff::Timestamp::now().strftime("%Y-%m-%d %H:%M UTC"),
        report::cores(),
        outcomes
            .first()
            .map(|o| o.load.clone())
            .unwrap_or_else(report::load_average),
        settings.latency_ms,
        settings.binary.display(),
    );
    let mut text = format!(
        "{header}\n{}\n{}",
        report::table(&outcomes),
        report::details(&outcomes)
    );
    if let Some(binary) = &args.upstream {
        text.push_str(&format!(
            "\nThe same scenarios with k8s.io/cloud-provider's CCM ({}), on the same API server and fake cloud:\n\n{}\n{}\n{}",
            binary.display(),
            report::table(&upstream),
            report::details(&upstream),
            report::ratios(&outcomes, &upstream)
        ));
    }
    println!("{text}");
    if let Some(path) = &args.write {
        append(path, &text)?;
    }
    if outcomes
        .iter()
        .chain(&upstream)
        .any(|o| !o.failures.is_empty())
    {
        bail!("some scenarios failed (see the table)");
    }
    Ok(())
}

/// Appends `text` to the file at `path`.
fn append(path: &std::path::Path, text: &str) -> anyhow::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    writeln!(file, "{text}").with_context(|| format!("cannot write {}", path.display()))
}

/// The scenario of the fake load balancers' data path ([`lb_traffic`]), run on its own.
const LB_TRAFFIC: &str = "lb-traffic";

/// Runs `lb-traffic` and prints (and appends to `--write`) its section.
async fn run_lb_traffic(args: &Args) -> anyhow::Result<()> {
    if args.scenario.len() > 1 {
        bail!("{LB_TRAFFIC} runs alone");
    }
    let settings = args.run_settings();
    let dir = tempfile::tempdir().context("cannot create a scratch directory")?;
    let text = lb_traffic::run(&settings, dir.path()).await?;
    println!("{text}");
    if let Some(path) = &args.write {
        append(path, &text)?;
    }
    Ok(())
}

/// The reliability scenarios ([`reliability`]), run on their own on the real control plane.
const RELIABILITY: &str = "reliability";

/// Runs the reliability cases and prints (and appends to `--write`) their section.
async fn run_reliability(args: &Args) -> anyhow::Result<()> {
    if args.scenario.len() > 1 {
        bail!("{RELIABILITY} runs alone");
    }
    let settings = args.run_settings();
    if settings.realkube.is_none() {
        bail!("{RELIABILITY} runs on the real control plane: pass --realkube (make realkube)");
    }
    let sizes = reliability::Sizes {
        nodes: args.nodes.unwrap_or(1_000),
        services: args.services.unwrap_or(200),
        timeout: Duration::from_secs(args.timeout),
    };
    let text = reliability::run(&settings, sizes, &args.case).await?;
    if let Some(path) = &args.write {
        append(path, &text)?;
    }
    Ok(())
}

/// The scenarios the upstream CCM runs too (the node scenarios, at 5,000 and at 100,000 nodes; the fake
/// cloud of k8s.io/cloud-provider is not safe for concurrent load-balancer syncs).
const UPSTREAM_SCENARIOS: &[&str] = &["a", "b", "c", "e", "e-start", "e-pass"];

/// Runs `scenarios` one after the other, `label` appended to their titles.
async fn run_all(scenarios: &[Scenario], settings: &RunSettings, label: &str) -> Vec<Outcome> {
    let mut outcomes = Vec::new();
    for s in scenarios {
        eprintln!("[{}{label}] {}", s.id, s.title());
        let mut outcome = match runner::run(s, settings).await {
            Ok(outcome) => outcome,
            Err(error) => {
                eprintln!("[{}{label}] failed: {error:#}", s.id);
                Outcome::failed(s.id, &s.title(), &error)
            }
        };
        outcome.title.push_str(label);
        eprint!("{}", report::table(std::slice::from_ref(&outcome)));
        outcomes.push(outcome);
    }
    outcomes
}

/// The settings of the upstream runs: its binary, the same extra flags, and on the in-memory API server
/// (which does not speak protobuf, client-go's default for controller managers) the JSON content type;
/// `timeout` caps each of its scenarios.
fn upstream_settings(
    ours: &RunSettings,
    binary: &std::path::Path,
    timeout: Duration,
) -> anyhow::Result<RunSettings> {
    if !binary.is_file() {
        bail!(
            "the upstream CCM {} does not exist; build it with `make upstream`",
            binary.display()
        );
    }
    let mut extra_flags = Vec::new();
    if ours.realkube.is_none() {
        extra_flags.push("--kube-api-content-type=application/json".to_string());
    }
    extra_flags.extend(ours.extra_flags.iter().cloned());
    Ok(RunSettings {
        binary: binary.to_path_buf(),
        extra_flags,
        daemon_kind: DaemonKind::Upstream,
        timeout,
        ..ours.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_apply_to_the_matching_scenarios() {
        let args = Args::parse_from([
            "ccm-bench",
            "--scenario=a,d",
            "--nodes=10",
            "--services=20",
            "--qps=50",
            "--daemon-arg=--node-monitor-period=1s",
            "--daemon-env=MALLOC_ARENA_MAX=2",
        ]);
        let s = args.scenarios().unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].id, s[0].objects, s[0].qps), ("a", 10, 50.0));
        assert_eq!((s[1].id, s[1].objects, s[1].qps), ("d", 20, 50.0));
        assert_eq!(args.daemon_args, ["--node-monitor-period=1s"]);
        assert_eq!(
            args.daemon_env,
            [("MALLOC_ARENA_MAX".to_string(), "2".to_string())]
        );
        assert!(parse_env("novalue").is_err());
        assert!(parse_env("=x").is_err());
        let all = Args::parse_from(["ccm-bench"]).scenarios().unwrap();
        assert_eq!(all.len(), Scenario::ALL.len());
        assert!(all.iter().all(|s| s.id != "chaos"));
        let chaos = Args::parse_from([
            "ccm-bench",
            "--scenario=chaos",
            "--nodes=100",
            "--services=40",
            "--cloud-error-percent=50",
            "--fault-seconds=5",
        ])
        .scenarios()
        .unwrap();
        assert_eq!((chaos[0].objects, chaos[0].services), (100, 40));
        assert_eq!(chaos[0].chaos.cloud_error_percent, 50);
        assert_eq!(chaos[0].chaos.api_error_percent, 10);
        assert_eq!(chaos[0].chaos.fault_seconds, 5);
        assert!(
            Args::parse_from(["ccm-bench", "--scenario=chaos", "--api-error-percent=101"])
                .scenarios()
                .is_err()
        );
        assert!(
            Args::parse_from(["ccm-bench", "--scenario=x"])
                .scenarios()
                .is_err()
        );
        assert!(
            Args::parse_from([
                "ccm-bench",
                "--stopped-percent=60",
                "--terminated-percent=50"
            ])
            .scenarios()
            .is_err()
        );
    }
}
