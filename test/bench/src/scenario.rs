//! The scenarios and how one runs: a fresh API server, the pre-existing objects, the daemon as a separate
//! process, the workload, a watch timestamping every object's completion, then the figures and a
//! correctness check of the end state.
//!
//! | id | workload | daemon flags |
//! |---|---|---|
//! | `a` | 1,000 tainted Nodes created at once | `--kube-api-qps=20 --kube-api-burst=30 --concurrent-node-syncs=1` (upstream defaults) |
//! | `b` | 5,000 tainted Nodes created at once | `--kube-api-qps=500 --kube-api-burst=1000 --concurrent-node-syncs=10` |
//! | `c` | one lifecycle pass over 5,000 initialized NotReady Nodes, 5% stopped and 5% terminated instances | as `b` |
//! | `d` | 2,000 LoadBalancer Services created at once (100 Ready Nodes exist) | as `b`, `--concurrent-service-syncs=10` |
//! | `d-paced` | as `d`, created at 200 Services/s | as `d` |
//! | `chaos` | 5,000 tainted Nodes and 2,000 LoadBalancer Services under cloud and API faults, watch cuts and a `kill -9` of the daemon ([`crate::chaos`]; not in `all`) | as `d` |
//!
//! Every cloud call of the fake provider takes `--latency-ms` (20 ms).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Service};
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};

use crate::cluster::{Cluster, describe_requests, event_requests, total_without_leases};
use crate::daemon::{Daemon, DaemonSpec, process_cpu_seconds};
use crate::fake_admin::{FakeAdmin, free_port};
use crate::report::{Outcome, load_average, percentile};
use crate::tracker::{Goal, Tracker};
use crate::workload::{
    self, ExplicitInstances, INSTANCE_TYPE, PROVIDER_PREFIX, TAINT_SHUTDOWN, ZONE, has_taint,
    ingress_of, initialized_node, is_uninitialized, load_balancer_service, node_name, service_name,
    tainted_node,
};

/// How long the daemon may take to start its informers.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
/// Quiet time after the daemon is ready, before the workload starts (first lifecycle pass, first
/// address sync).
pub(crate) const SETTLE: Duration = Duration::from_secs(1);
/// Why the measuring run below refuses the chaos scenario.
const CHAOS_ELSEWHERE: &str = "the chaos scenario runs through chaos::run, not the measuring run";
/// How often the fake cloud's counters are polled to find the start of the lifecycle pass.
const PASS_POLL: Duration = Duration::from_millis(2);

/// What a scenario measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Tainted Nodes are created; each completes when the uninitialized taint is gone.
    NodeInit,
    /// Initialized NotReady Nodes exist before the daemon starts; its first lifecycle pass must taint the
    /// ones whose instance is stopped and delete the ones whose instance is terminated.
    Lifecycle,
    /// LoadBalancer Services are created; each completes when its ingress is set.
    LoadBalancers,
    /// Tainted Nodes and LoadBalancer Services under faults and a daemon kill; the end state is asserted
    /// ([`crate::chaos`]).
    Chaos,
}

/// One scenario's parameters.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Short id.
    pub id: &'static str,
    /// What is measured.
    pub kind: Kind,
    /// Nodes or Services measured.
    pub objects: usize,
    /// `--kube-api-qps`.
    pub qps: f64,
    /// `--kube-api-burst`.
    pub burst: u32,
    /// `--concurrent-node-syncs`.
    pub node_workers: u32,
    /// `--concurrent-service-syncs`.
    pub service_workers: u32,
    /// Lifecycle: percent of the Nodes whose instance is stopped.
    pub stopped_percent: u32,
    /// Lifecycle: percent of the Nodes whose instance is terminated.
    pub terminated_percent: u32,
    /// LoadBalancers: Ready initialized Nodes that exist before the Services.
    pub lb_nodes: usize,
    /// Chaos: Services created (the Nodes are `objects`).
    pub services: usize,
    /// Chaos: fault rates and duration.
    pub chaos: crate::chaos::ChaosOptions,
    /// LoadBalancers: Services created per second (0: all at once).
    pub create_rate: f64,
    /// NodeInit: the fake cloud reports an ExternalIP besides the kubelet's addresses, so initialization
    /// writes the node's addresses too.
    pub cloud_adds_addresses: bool,
}

impl Scenario {
    /// The scenario called `id`, with its default parameters.
    pub fn preset(id: &str) -> Option<Scenario> {
        let fast = |s: Scenario| Scenario {
            qps: 500.0,
            burst: 1000,
            node_workers: 10,
            service_workers: 10,
            ..s
        };
        let base = Scenario {
            id: "a",
            kind: Kind::NodeInit,
            objects: 1000,
            qps: 20.0,
            burst: 30,
            node_workers: 1,
            service_workers: 1,
            stopped_percent: 5,
            terminated_percent: 5,
            lb_nodes: 100,
            services: 0,
            chaos: crate::chaos::ChaosOptions::default(),
            create_rate: 0.0,
            cloud_adds_addresses: false,
        };
        Some(match id {
            "a" => base,
            "b" => fast(Scenario {
                id: "b",
                objects: 5000,
                ..base
            }),
            "b-addr" => fast(Scenario {
                id: "b-addr",
                objects: 5000,
                cloud_adds_addresses: true,
                ..base
            }),
            "c" => fast(Scenario {
                id: "c",
                kind: Kind::Lifecycle,
                objects: 5000,
                ..base
            }),
            "d" => fast(Scenario {
                id: "d",
                kind: Kind::LoadBalancers,
                objects: 2000,
                ..base
            }),
            "d-paced" => fast(Scenario {
                id: "d-paced",
                kind: Kind::LoadBalancers,
                objects: 2000,
                create_rate: 200.0,
                ..base
            }),
            "chaos" => fast(Scenario {
                id: "chaos",
                kind: Kind::Chaos,
                objects: 5000,
                services: 2000,
                ..base
            }),
            _ => return None,
        })
    }

    /// The preset ids `all` runs, in run order.
    pub const ALL: [&'static str; 6] = ["a", "b", "b-addr", "c", "d", "d-paced"];
    /// Presets only run when named: they assert an end state under faults and take minutes.
    pub const NAMED_ONLY: [&'static str; 1] = ["chaos"];

    /// What the scenario does, in a few words.
    pub fn title(&self) -> String {
        let n = thousands(self.objects);
        match self.kind {
            Kind::NodeInit if self.cloud_adds_addresses => format!(
                "initialize {n} tainted nodes created at once, the cloud adding an ExternalIP"
            ),
            Kind::NodeInit => format!("initialize {n} tainted nodes created at once"),
            Kind::Lifecycle => format!(
                "one lifecycle pass over {n} NotReady nodes ({}% stopped, {}% terminated)",
                self.stopped_percent, self.terminated_percent
            ),
            Kind::LoadBalancers if self.create_rate > 0.0 => format!(
                "{n} LoadBalancer services created at {}/s",
                self.create_rate
            ),
            Kind::LoadBalancers => format!("{n} LoadBalancer services created at once"),
            Kind::Chaos => format!(
                "{n} tainted nodes and {} LoadBalancer services under {}% cloud errors, {}% API write \
                 errors, watch cuts and a kill -9",
                thousands(self.services),
                self.chaos.cloud_error_percent,
                self.chaos.api_error_percent
            ),
        }
    }

    /// The daemon flags this scenario sets.
    pub fn daemon_flags(&self) -> Vec<String> {
        vec![
            format!("--kube-api-qps={}", self.qps),
            format!("--kube-api-burst={}", self.burst),
            format!("--concurrent-node-syncs={}", self.node_workers),
            format!("--concurrent-service-syncs={}", self.service_workers),
        ]
    }

    /// The flags as shown in the table.
    pub fn settings(&self) -> String {
        let workers = match self.kind {
            Kind::LoadBalancers => format!("service workers {}", self.service_workers),
            Kind::Chaos => format!(
                "node workers {}, service workers {}",
                self.node_workers, self.service_workers
            ),
            _ => format!("node workers {}", self.node_workers),
        };
        format!("qps {} / burst {}, {workers}", self.qps, self.burst)
    }

    /// Lifecycle: the Nodes whose instances are stopped and terminated, spread over the whole range.
    pub fn explicit_instances(&self) -> ExplicitInstances {
        let mut explicit = ExplicitInstances::default();
        if self.kind != Kind::Lifecycle {
            return explicit;
        }
        for i in 0..self.objects {
            let slot = (i % 100) as u32;
            if slot < self.stopped_percent {
                explicit.stopped.push(node_name(i));
            } else if slot < self.stopped_percent + self.terminated_percent {
                explicit.terminated.push(node_name(i));
            }
        }
        explicit
    }

    /// Event occurrences the scenario must produce at least.
    pub fn expected_events(&self) -> u64 {
        match self.kind {
            // One `Synced` per node.
            Kind::NodeInit => self.objects as u64,
            // One `DeletingNode` per deleted node (the shutdown taint has no event).
            Kind::Lifecycle => self.explicit_instances().terminated.len() as u64,
            // `EnsuringLoadBalancer` and `EnsuredLoadBalancer` per service.
            Kind::LoadBalancers => 2 * self.objects as u64,
            // Events pending in a killed daemon are lost; chaos bounds events per object instead.
            Kind::Chaos => 0,
        }
    }
}

/// Settings shared by every scenario of a run.
#[derive(Debug, Clone)]
pub struct RunSettings {
    /// The daemon binary.
    pub binary: std::path::PathBuf,
    /// `hack/realkube`'s binary: each scenario runs on a real control plane started for it, instead of the
    /// in-memory API server.
    pub realkube: Option<std::path::PathBuf>,
    /// Extra daemon flags.
    pub extra_flags: Vec<String>,
    /// Extra environment variables of the daemon.
    pub extra_env: Vec<(String, String)>,
    /// Latency of every fake cloud call, ms.
    pub latency_ms: u64,
    /// Longest wait for all objects to complete.
    pub timeout: Duration,
    /// Longest wait, after the last completion, for the expected events to be stored.
    pub event_drain: Duration,
    /// Concurrent create requests of the workload.
    pub create_concurrency: usize,
    /// Whether dying of the SIGTERM that stops it counts as a clean stop (the Go peer's runtime does not
    /// handle the signal; ours must exit 0).
    pub sigterm_death_is_clean: bool,
}

/// Runs one scenario; a scenario that cannot run at all is an error, wrong end states are failures in the
/// outcome.
pub async fn run(scenario: &Scenario, settings: &RunSettings) -> anyhow::Result<Outcome> {
    if scenario.kind == Kind::Chaos {
        return crate::chaos::run(scenario, settings).await;
    }
    let load = load_average();
    let dir = tempfile::Builder::new()
        .prefix(&format!("ccm-bench-{}-", scenario.id))
        .tempdir()
        .context("cannot create a temporary directory")?;
    let cluster = Cluster::start(dir.path(), settings.realkube.as_deref()).await?;
    let result = run_on(scenario, settings, &cluster, dir.path()).await;
    cluster.shutdown().await;
    let mut outcome = result?;
    outcome.load = load;
    Ok(outcome)
}

/// Objects created by the benchmark and when each create request was sent.
type Created = HashMap<String, Instant>;

async fn create_nodes(
    client: &kube::Client,
    indexes: impl Iterator<Item = usize>,
    make: fn(usize) -> Node,
    concurrency: usize,
) -> anyhow::Result<Created> {
    let api: Api<Node> = Api::all(client.clone());
    let results: Vec<anyhow::Result<(String, Instant)>> = futures::stream::iter(indexes)
        .map(|i| {
            let api = api.clone();
            async move {
                let node = make(i);
                let sent = Instant::now();
                api.create(&PostParams::default(), &node)
                    .await
                    .with_context(|| format!("cannot create node {}", node.name_any()))?;
                Ok((node.name_any(), sent))
            }
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    results.into_iter().collect()
}

async fn create_services(
    client: &kube::Client,
    count: usize,
    rate: f64,
    concurrency: usize,
) -> anyhow::Result<Created> {
    let api: Api<Service> = Api::namespaced(client.clone(), "default");
    let create = |i: usize| {
        let api = api.clone();
        async move {
            let service = load_balancer_service(i);
            let sent = Instant::now();
            api.create(&PostParams::default(), &service)
                .await
                .with_context(|| format!("cannot create service {}", service.name_any()))?;
            Ok::<_, anyhow::Error>((service.name_any(), sent))
        }
    };
    if rate <= 0.0 {
        let results: Vec<_> = futures::stream::iter(0..count)
            .map(create)
            .buffer_unordered(concurrency.max(1))
            .collect()
            .await;
        return results.into_iter().collect();
    }
    let start = tokio::time::Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..count {
        tokio::time::sleep_until(start + Duration::from_secs_f64(i as f64 / rate)).await;
        tasks.spawn(create(i));
    }
    let mut created = Created::new();
    while let Some(joined) = tasks.join_next().await {
        let (name, sent) = joined.context("a create task panicked")??;
        created.insert(name, sent);
    }
    Ok(created)
}

/// Waits until the daemon has listed and watches every resource in `resources`.
pub(crate) async fn wait_for_informers(
    daemon: &mut Daemon,
    cluster: &Cluster,
    resources: &[&str],
) -> anyhow::Result<()> {
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    loop {
        daemon.check_running()?;
        if resources.iter().all(|r| cluster.daemon_watches(r)) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!(
                "the daemon did not watch {resources:?} within {STARTUP_TIMEOUT:?}; end of its log:\n{}",
                daemon.log_tail(30)
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Lifecycle: the moment the first bulk instance-state call is seen (the pass has started).
async fn wait_for_pass_start(daemon: &mut Daemon, admin: &FakeAdmin) -> anyhow::Result<Instant> {
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    loop {
        daemon.check_running()?;
        if let Ok(calls) = admin.calls().await {
            let checks = ["instance_states", "instance_exists", "instance_shutdown"]
                .iter()
                .map(|op| calls.get(*op).copied().unwrap_or(0))
                .sum::<u64>();
            if checks > 0 {
                return Ok(Instant::now());
            }
        }
        if Instant::now() >= deadline {
            bail!(
                "no lifecycle check reached the cloud within {STARTUP_TIMEOUT:?}; end of the daemon's log:\n{}",
                daemon.log_tail(30)
            );
        }
        tokio::time::sleep(PASS_POLL).await;
    }
}

async fn run_on(
    scenario: &Scenario,
    settings: &RunSettings,
    cluster: &Cluster,
    dir: &std::path::Path,
) -> anyhow::Result<Outcome> {
    let id = scenario.id;
    let client = cluster.client();
    let explicit = scenario.explicit_instances();
    let mut notes = Vec::new();
    let own_pid = std::process::id();

    // Objects that exist before the daemon starts.
    match scenario.kind {
        Kind::Lifecycle => {
            eprintln!(
                "[{id}] creating {} initialized NotReady nodes",
                scenario.objects
            );
            create_nodes(
                &client,
                0..scenario.objects,
                |i| initialized_node(i, false),
                settings.create_concurrency,
            )
            .await?;
        }
        Kind::LoadBalancers => {
            eprintln!("[{id}] creating {} Ready nodes", scenario.lb_nodes);
            create_nodes(
                &client,
                0..scenario.lb_nodes,
                |i| initialized_node(i, true),
                settings.create_concurrency,
            )
            .await?;
        }
        Kind::NodeInit => {}
        Kind::Chaos => bail!(CHAOS_ELSEWHERE),
    }

    // The completion watch.
    let tracker = match scenario.kind {
        Kind::NodeInit => Tracker::start(
            Api::<Node>::all(client.clone()),
            (0..scenario.objects).map(node_name),
            Goal {
                reached: |n: &Node| !is_uninitialized(n),
                deletion_completes: false,
            },
        ),
        Kind::Lifecycle => Tracker::start(
            Api::<Node>::all(client.clone()),
            explicit
                .stopped
                .iter()
                .chain(explicit.terminated.iter())
                .cloned(),
            Goal {
                reached: |n: &Node| has_taint(n, TAINT_SHUTDOWN),
                deletion_completes: true,
            },
        ),
        Kind::LoadBalancers => Tracker::start(
            Api::<Service>::namespaced(client.clone(), "default"),
            (0..scenario.objects).map(service_name),
            Goal {
                reached: |s: &Service| ingress_of(s).is_some(),
                deletion_completes: false,
            },
        ),
        Kind::Chaos => bail!(CHAOS_ELSEWHERE),
    };
    tracker.wait_synced(Duration::from_secs(60)).await?;

    // The daemon.
    let admin_port = free_port()?;
    let admin = FakeAdmin::new(([127, 0, 0, 1], admin_port).into());
    let cloud_config = dir.join("cloud-config.yaml");
    std::fs::write(
        &cloud_config,
        workload::cloud_config(
            settings.latency_ms,
            admin_port,
            &explicit,
            scenario.cloud_adds_addresses,
        ),
    )
    .context("cannot write the cloud config")?;
    let mut flags = scenario.daemon_flags();
    flags.extend(settings.extra_flags.iter().cloned());
    let spec = DaemonSpec {
        binary: settings.binary.clone(),
        kubeconfig: cluster.daemon_kubeconfig().to_path_buf(),
        cloud_config,
        flags,
        env: settings.extra_env.clone(),
    };
    eprintln!(
        "[{id}] starting {} {}",
        spec.binary.display(),
        spec.args().join(" ")
    );
    let spawned = Instant::now();
    let mut daemon = Daemon::spawn(&spec, &dir.join("daemon.log"))?;

    let mut own_cpu_before = process_cpu_seconds(own_pid).unwrap_or(0.0);
    let (start, created, cpu_before) = match scenario.kind {
        Kind::Lifecycle => {
            let pass_start = wait_for_pass_start(&mut daemon, &admin).await?;
            notes.push(format!(
                "the pass started {} after the daemon process was spawned (start-up, leader election, \
                 listing {} nodes)",
                crate::report::format_duration(pass_start - spawned),
                scenario.objects
            ));
            (pass_start, Created::new(), 0.0)
        }
        Kind::NodeInit | Kind::LoadBalancers => {
            let watched: &[&str] = if scenario.kind == Kind::NodeInit {
                &["nodes"]
            } else {
                &["nodes", "services"]
            };
            wait_for_informers(&mut daemon, cluster, watched).await?;
            tokio::time::sleep(SETTLE).await;
            daemon.check_running()?;
            cluster.clear_requests();
            admin
                .reset_calls()
                .await
                .context("cannot reset the fake cloud's call counters")?;
            let cpu_before = daemon.cpu_seconds().unwrap_or(0.0);
            own_cpu_before = process_cpu_seconds(own_pid).unwrap_or(0.0);
            let start = Instant::now();
            eprintln!("[{id}] creating {} objects", scenario.objects);
            let created = if scenario.kind == Kind::NodeInit {
                create_nodes(
                    &client,
                    0..scenario.objects,
                    tainted_node,
                    settings.create_concurrency,
                )
                .await?
            } else {
                create_services(
                    &client,
                    scenario.objects,
                    scenario.create_rate,
                    settings.create_concurrency,
                )
                .await?
            };
            notes.push(format!(
                "the benchmark's create requests took {} in all",
                crate::report::format_duration(start.elapsed())
            ));
            (start, created, cpu_before)
        }
        Kind::Chaos => bail!(CHAOS_ELSEWHERE),
    };

    // Completion.
    let deadline = tokio::time::Instant::from_std(start) + settings.timeout;
    let all_done = tracker.wait_all(deadline).await;
    daemon.check_running()?;
    let finished = Instant::now();
    let completions = tracker.completions();
    let requests = cluster.daemon_requests();
    let calls = admin.calls().await.unwrap_or_default();
    let cpu_seconds = daemon.cpu_seconds().unwrap_or(0.0) - cpu_before;
    notes.push(format!(
        "the benchmark process (API server, workload, watch) used {:.2} s of CPU over the same span",
        process_cpu_seconds(own_pid).unwrap_or(0.0) - own_cpu_before
    ));
    let (events_at_done, _) = cluster.stored_events().await?;
    eprintln!(
        "[{id}] {} of {} objects done after {:.2} s",
        completions.len(),
        tracker.expected(),
        (finished - start).as_secs_f64()
    );

    let latencies: Vec<Duration> = completions
        .iter()
        .map(|(name, at)| at.saturating_duration_since(*created.get(name).unwrap_or(&start)))
        .collect();
    let last = completions.values().max().copied().unwrap_or(finished);
    let wall = if all_done {
        last.saturating_duration_since(start)
    } else {
        finished - start
    };
    if tracker.watch_errors() > 0 {
        notes.push(format!(
            "the benchmark's watch recovered from {} errors",
            tracker.watch_errors()
        ));
    }

    // Events: wait for the expected ones to be stored.
    let expected_events = scenario.expected_events();
    let drain_start = Instant::now();
    let mut stored = cluster.stored_events().await?;
    let mut complete_after = (stored.0 >= expected_events).then(|| drain_start - start);
    while complete_after.is_none() && drain_start.elapsed() < settings.event_drain {
        tokio::time::sleep(Duration::from_millis(500)).await;
        stored = cluster.stored_events().await?;
        if stored.0 >= expected_events {
            complete_after = Some(Instant::now() - start);
        }
    }
    let drain = drain_start.elapsed();

    // Memory is read before the end-state checks: they query the fake cloud's admin API, which runs inside
    // the daemon process and would add the buffers of its answers to the daemon's peak. VmHWM is updated
    // lazily by the kernel; the current RSS may be above it for a moment.
    let rss_kib = daemon.rss_kib().unwrap_or(0);
    let peak_rss_kib = daemon.peak_rss_kib().unwrap_or(0).max(rss_kib);

    // End state.
    let mut failures = Vec::new();
    if !all_done {
        failures.push(format!(
            "only {} of {} objects completed within {:?}",
            completions.len(),
            tracker.expected(),
            settings.timeout
        ));
    }
    match scenario.kind {
        Kind::NodeInit => check_initialized(&client, scenario.objects, &mut failures).await?,
        Kind::Lifecycle => {
            check_lifecycle(&client, scenario.objects, &explicit, &mut failures).await?
        }
        Kind::LoadBalancers => {
            check_load_balancers(&client, &admin, scenario.objects, &mut failures).await?
        }
        Kind::Chaos => bail!(CHAOS_ELSEWHERE),
    }

    notes.push(format!(
        "daemon at the end: {:.1} MiB resident (peak {:.1} MiB), {} open sockets",
        rss_kib as f64 / 1024.0,
        peak_rss_kib as f64 / 1024.0,
        daemon.open_sockets()
    ));
    let warnings = daemon.warnings();
    if warnings > 0 {
        notes.push(format!("the daemon logged {warnings} warnings or errors"));
    }
    let status = daemon.stop(Duration::from_secs(15)).await?;
    let killed_by_sigterm = {
        use std::os::unix::process::ExitStatusExt;
        status.signal() == Some(15)
    };
    let clean = status.success() || (settings.sigterm_death_is_clean && killed_by_sigterm);
    if !clean {
        failures.push(format!(
            "the daemon exited with {status} when asked to stop"
        ));
    }

    Ok(Outcome {
        id: id.to_string(),
        title: scenario.title(),
        objects: scenario.objects,
        tracked: tracker.expected(),
        completed: completions.len(),
        settings: scenario.settings(),
        wall,
        p50: percentile(&latencies, 50.0),
        p99: percentile(&latencies, 99.0),
        api_requests: total_without_leases(&requests),
        event_requests: event_requests(&requests),
        api_breakdown: describe_requests(&requests),
        cloud_calls: calls.values().sum(),
        cloud_breakdown: calls
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(op, n)| format!("{op} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
        events_at_done,
        events_after_drain: stored.0,
        event_objects: stored.1,
        events_expected: expected_events,
        drain,
        events_complete_after: complete_after,
        peak_rss_kib,
        cpu_seconds,
        load: String::new(),
        failures,
        notes,
    })
}

async fn check_initialized(
    client: &kube::Client,
    count: usize,
    failures: &mut Vec<String>,
) -> anyhow::Result<()> {
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    let by_name: HashMap<String, &Node> = nodes.items.iter().map(|n| (n.name_any(), n)).collect();
    let mut wrong = Vec::new();
    for name in (0..count).map(node_name) {
        let Some(node) = by_name.get(&name) else {
            wrong.push(format!("{name}: missing"));
            continue;
        };
        let provider_id = node.spec.as_ref().and_then(|s| s.provider_id.as_deref());
        let labels = node.metadata.labels.clone().unwrap_or_default();
        let ok = !is_uninitialized(node)
            && provider_id == Some(format!("{PROVIDER_PREFIX}{name}").as_str())
            && labels
                .get("topology.kubernetes.io/zone")
                .map(String::as_str)
                == Some(ZONE)
            && labels
                .get("node.kubernetes.io/instance-type")
                .map(String::as_str)
                == Some(INSTANCE_TYPE);
        if !ok {
            wrong.push(format!("{name}: not initialized as expected"));
        }
    }
    if !wrong.is_empty() {
        failures.push(summarize(&wrong));
    }
    Ok(())
}

async fn check_lifecycle(
    client: &kube::Client,
    count: usize,
    explicit: &ExplicitInstances,
    failures: &mut Vec<String>,
) -> anyhow::Result<()> {
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    let by_name: HashMap<String, &Node> = nodes.items.iter().map(|n| (n.name_any(), n)).collect();
    let stopped: HashSet<&String> = explicit.stopped.iter().collect();
    let terminated: HashSet<&String> = explicit.terminated.iter().collect();
    let mut wrong = Vec::new();
    for name in (0..count).map(node_name) {
        let node = by_name.get(&name);
        let problem = if terminated.contains(&name) {
            node.map(|_| "instance terminated but the node still exists")
        } else {
            match node {
                None => Some("deleted although its instance exists"),
                Some(n) if stopped.contains(&name) && !has_taint(n, TAINT_SHUTDOWN) => {
                    Some("instance stopped but no shutdown taint")
                }
                Some(n) if !stopped.contains(&name) && has_taint(n, TAINT_SHUTDOWN) => {
                    Some("shutdown taint on a running instance")
                }
                Some(_) => None,
            }
        };
        if let Some(problem) = problem {
            wrong.push(format!("{name}: {problem}"));
        }
    }
    if !wrong.is_empty() {
        failures.push(summarize(&wrong));
    }
    Ok(())
}

async fn check_load_balancers(
    client: &kube::Client,
    admin: &FakeAdmin,
    count: usize,
    failures: &mut Vec<String>,
) -> anyhow::Result<()> {
    let services = Api::<Service>::namespaced(client.clone(), "default")
        .list(&ListParams::default())
        .await?;
    let wanted: HashSet<String> = (0..count).map(service_name).collect();
    let mut ips = HashSet::new();
    let mut wrong = Vec::new();
    for service in services
        .items
        .iter()
        .filter(|s| wanted.contains(&s.name_any()))
    {
        match ingress_of(service) {
            Some(ip) if !ips.insert(ip.clone()) => {
                wrong.push(format!("{}: ingress {ip} given twice", service.name_any()))
            }
            Some(_) => {}
            None => wrong.push(format!("{}: no ingress", service.name_any())),
        }
    }
    if ips.len() + wrong.len() < count {
        wrong.push(format!(
            "{} services missing",
            count - ips.len() - wrong.len()
        ));
    }
    if !wrong.is_empty() {
        failures.push(summarize(&wrong));
    }
    let balancers = admin
        .load_balancer_count()
        .await
        .context("cannot count the fake cloud's load balancers")?;
    if balancers != count {
        failures.push(format!(
            "the fake cloud holds {balancers} load balancers for {count} services"
        ));
    }
    Ok(())
}

/// `12345` as `12,345`.
pub fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The first few problems and how many there are.
fn summarize(problems: &[String]) -> String {
    let shown: Vec<&str> = problems.iter().take(5).map(String::as_str).collect();
    format!("{} objects wrong: {}", problems.len(), shown.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_match_the_issue() {
        let a = Scenario::preset("a").unwrap();
        assert_eq!(
            (a.objects, a.qps, a.burst, a.node_workers),
            (1000, 20.0, 30, 1)
        );
        let b = Scenario::preset("b").unwrap();
        assert_eq!(
            (b.objects, b.qps, b.burst, b.node_workers),
            (5000, 500.0, 1000, 10)
        );
        let c = Scenario::preset("c").unwrap();
        assert_eq!((c.kind, c.objects), (Kind::Lifecycle, 5000));
        let d = Scenario::preset("d").unwrap();
        assert_eq!(
            (d.kind, d.objects, d.service_workers),
            (Kind::LoadBalancers, 2000, 10)
        );
        assert!(Scenario::preset("d-paced").unwrap().create_rate > 0.0);
        let b_addr = Scenario::preset("b-addr").unwrap();
        assert!(b_addr.cloud_adds_addresses && !b.cloud_adds_addresses);
        assert_eq!((b_addr.objects, b_addr.qps), (5000, 500.0));
        assert!(Scenario::preset("z").is_none());
        assert!(
            Scenario::ALL
                .iter()
                .all(|id| Scenario::preset(id).is_some())
        );
        assert!(
            b.daemon_flags()
                .contains(&"--kube-api-burst=1000".to_string())
        );
        assert_eq!(a.settings(), "qps 20 / burst 30, node workers 1");
        assert_eq!(d.settings(), "qps 500 / burst 1000, service workers 10");
    }

    #[test]
    fn lifecycle_instances_are_spread_and_disjoint() {
        let c = Scenario::preset("c").unwrap();
        let explicit = c.explicit_instances();
        assert_eq!(explicit.stopped.len(), 250);
        assert_eq!(explicit.terminated.len(), 250);
        let stopped: HashSet<_> = explicit.stopped.iter().collect();
        assert!(explicit.terminated.iter().all(|n| !stopped.contains(n)));
        assert!(explicit.stopped.contains(&node_name(4900)));
        assert_eq!(c.expected_events(), 250);
        assert!(
            Scenario::preset("a")
                .unwrap()
                .explicit_instances()
                .stopped
                .is_empty()
        );
        assert_eq!(Scenario::preset("d").unwrap().expected_events(), 4000);
    }

    #[test]
    fn titles_follow_the_sizes() {
        assert_eq!(thousands(5), "5");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1234567), "1,234,567");
        let mut a = Scenario::preset("a").unwrap();
        a.objects = 60;
        assert_eq!(a.title(), "initialize 60 tainted nodes created at once");
        assert_eq!(
            Scenario::preset("c").unwrap().title(),
            "one lifecycle pass over 5,000 NotReady nodes (5% stopped, 5% terminated)"
        );
        assert_eq!(
            Scenario::preset("d-paced").unwrap().title(),
            "2,000 LoadBalancer services created at 200/s"
        );
    }

    #[test]
    fn summaries_show_the_first_problems() {
        let problems: Vec<String> = (0..8).map(|i| format!("p{i}")).collect();
        assert_eq!(summarize(&problems), "8 objects wrong: p0; p1; p2; p3; p4");
    }
}
