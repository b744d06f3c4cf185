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
//! | `e` | 100,000 tainted Nodes created at 1,000/s | as `b` |
//! | `e-start` | start-up against 100,000 initialized Ready Nodes: serving, and the first lifecycle pass done ([`crate::scale`]) | as `b` |
//! | `e-pass` | `c` over 100,000 Nodes | as `b` |
//! | `f` | 10,000 LoadBalancer Services over 5,000 Nodes: steady state, then one Node excluded from load balancers and one Node added ([`crate::scale`]) | as `d` |
//! | `chaos` | 5,000 tainted Nodes and 2,000 LoadBalancer Services under cloud and API faults, watch cuts and a `kill -9` of the daemon ([`crate::chaos`]; not in `all`) | as `d` |
//!
//! Every cloud call of the fake provider takes `--latency-ms` (20 ms).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Service};
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};

use crate::cluster::{
    Cluster, ControlPlaneCpu, describe_requests, event_requests, total_without_leases,
};
use crate::daemon::{Daemon, DaemonSpec, process_cpu_seconds};
use crate::fake_admin::{FakeAdmin, free_port};
use crate::report::{Outcome, percentile};
use crate::tracker::{Goal, Tracker};
use crate::workload::{
    self, CloudBehaviour, ExplicitInstances, INSTANCE_TYPE, PROVIDER_PREFIX, TAINT_SHUTDOWN, ZONE,
    has_taint, ingress_of, initialized_node, is_uninitialized, load_balancer_service, node_name,
    service_name, tainted_node,
};

/// How long the daemon may take to start its informers.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
/// Quiet time after the daemon is ready, before the workload starts (first lifecycle pass, first
/// address sync).
pub(crate) const SETTLE: Duration = Duration::from_secs(1);
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
    /// Initialized Ready Nodes exist; the daemon starts: until it serves and has finished its first
    /// lifecycle pass ([`crate::scale`]).
    Startup,
    /// LoadBalancer Services exist over Ready Nodes; the steady state is measured, then a Node is added
    /// ([`crate::scale`]).
    NodeChange,
    /// Tainted Nodes and LoadBalancer Services under faults and a daemon kill; the end state is asserted
    /// ([`crate::chaos`]).
    Chaos,
}

/// The knobs of the chaos scenario beyond its sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChaosOptions {
    /// Percent of the calls of every cloud operation that fail.
    pub cloud_error_percent: u32,
    /// Percent of the writes of Nodes, Services and Events that the API server fails.
    pub api_error_percent: u32,
    /// How long the faults go on after the restarted daemon took the Lease, seconds.
    pub fault_seconds: u64,
}

impl Default for ChaosOptions {
    fn default() -> Self {
        ChaosOptions {
            cloud_error_percent: 30,
            api_error_percent: 10,
            fault_seconds: 30,
        }
    }
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
    pub chaos: ChaosOptions,
    /// NodeInit: Nodes, LoadBalancers: Services created per second (0: all at once).
    pub create_rate: f64,
    /// NodeChange: seconds of steady state measured before the Node changes.
    pub steady_seconds: u64,
    /// NodeInit: the fake cloud reports an ExternalIP besides the kubelet's addresses, so initialization
    /// writes the node's addresses too.
    pub cloud_adds_addresses: bool,
    /// The fake cloud waits each call's latency precisely (`preciseLatency`): the scale scenarios, whose
    /// goals compare times with a floor computed from the latency.
    pub precise_latency: bool,
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
            chaos: ChaosOptions::default(),
            create_rate: 0.0,
            steady_seconds: 30,
            cloud_adds_addresses: false,
            precise_latency: Scenario::SCALE.contains(&id),
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
            "e" => fast(Scenario {
                id: "e",
                objects: 100_000,
                create_rate: 1000.0,
                ..base
            }),
            "e-start" => fast(Scenario {
                id: "e-start",
                kind: Kind::Startup,
                objects: 100_000,
                ..base
            }),
            "e-pass" => fast(Scenario {
                id: "e-pass",
                kind: Kind::Lifecycle,
                objects: 100_000,
                ..base
            }),
            "f" => fast(Scenario {
                id: "f",
                kind: Kind::NodeChange,
                objects: 10_000,
                lb_nodes: 5_000,
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
    /// The scale presets (`scale` runs them all); like `chaos`, only run when named: they take minutes.
    pub const SCALE: [&'static str; 4] = ["e", "e-start", "e-pass", "f"];
    /// Presets only run when named: they assert an end state under faults and take minutes.
    pub const NAMED_ONLY: [&'static str; 5] = ["chaos", "e", "e-start", "e-pass", "f"];

    /// What the scenario does, in a few words.
    pub fn title(&self) -> String {
        let n = thousands(self.objects);
        match self.kind {
            Kind::NodeInit if self.cloud_adds_addresses => format!(
                "initialize {n} tainted nodes created at once, the cloud adding an ExternalIP"
            ),
            Kind::NodeInit if self.create_rate > 0.0 => format!(
                "initialize {n} tainted nodes created at {}/s",
                thousands(self.create_rate as usize)
            ),
            Kind::NodeInit => format!("initialize {n} tainted nodes created at once"),
            Kind::Startup => format!(
                "start-up against {n} initialized nodes: serving and the first lifecycle pass done"
            ),
            Kind::NodeChange => format!(
                "{n} LoadBalancer services over {} nodes: steady state, then one node added",
                thousands(self.lb_nodes)
            ),
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
            Kind::LoadBalancers | Kind::NodeChange => {
                format!("service workers {}", self.service_workers)
            }
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
            // A start-up over initialized Ready nodes emits none.
            Kind::Startup => 0,
            // `UpdatedLoadBalancer` per service when the node is added.
            Kind::NodeChange => self.objects as u64,
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
    /// Whose daemon the run measures.
    pub daemon_kind: DaemonKind,
}

/// Whose daemon a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DaemonKind {
    /// This project's: it must exit 0 on SIGTERM, and logs the end of each lifecycle pass at debug level.
    Ours,
    /// k8s.io/cloud-provider's CCM (`hack/upstream`): its Go runtime does not handle SIGTERM (dying of it
    /// is a clean stop), and it logs no end of its lifecycle passes.
    Upstream,
}

/// Objects created by the benchmark and when each create request was sent.
pub(crate) type Created = HashMap<String, Instant>;

/// Creates the objects `make` builds for `indexes`: at `rate` per second, or, when `rate` is 0, as fast as
/// `concurrency` concurrent create requests go.
pub(crate) async fn create_objects<K>(
    api: &Api<K>,
    indexes: std::ops::Range<usize>,
    make: fn(usize) -> K,
    rate: f64,
    concurrency: usize,
) -> anyhow::Result<Created>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
    K: Send + Sync + 'static,
{
    let create = |i: usize| {
        let api = api.clone();
        async move {
            let object = make(i);
            let name = object.name_any();
            let sent = Instant::now();
            api.create(&PostParams::default(), &object)
                .await
                .with_context(|| format!("cannot create {name}"))?;
            Ok::<_, anyhow::Error>((name, sent))
        }
    };
    if rate <= 0.0 {
        let results: Vec<_> = futures::stream::iter(indexes)
            .map(create)
            .buffer_unordered(concurrency.max(1))
            .collect()
            .await;
        return results.into_iter().collect();
    }
    // Paced, with at most `concurrency` requests in flight: a real API server that answers more slowly
    // than the pace slows the creation down instead of piling up connections.
    let in_flight = Arc::new(tokio::sync::Semaphore::new(concurrency.max(1)));
    let start = tokio::time::Instant::now();
    let first = indexes.start;
    let mut tasks = tokio::task::JoinSet::new();
    for i in indexes {
        tokio::time::sleep_until(start + Duration::from_secs_f64((i - first) as f64 / rate)).await;
        let permit = in_flight
            .clone()
            .acquire_owned()
            .await
            .context("the create semaphore closed")?;
        let request = create(i);
        tasks.spawn(async move {
            let created = request.await;
            drop(permit);
            created
        });
    }
    let mut created = Created::new();
    while let Some(joined) = tasks.join_next().await {
        let (name, sent) = joined.context("a create task panicked")??;
        created.insert(name, sent);
    }
    Ok(created)
}

/// Creates `count` initialized Nodes (Ready or not) before the daemon starts.
pub(crate) async fn create_initialized_nodes(
    cluster: &Cluster,
    count: usize,
    ready: bool,
    concurrency: usize,
) -> anyhow::Result<()> {
    let make: fn(usize) -> Node = if ready {
        |i| initialized_node(i, true)
    } else {
        |i| initialized_node(i, false)
    };
    let api = Api::<Node>::all(cluster.client());
    create_objects(&api, 0..count, make, 0.0, concurrency).await?;
    Ok(())
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

/// How a scenario's daemon is started beyond the scenario's own flags.
#[derive(Debug, Default)]
pub(crate) struct DaemonExtras {
    /// `--secure-port` (0: serving off).
    pub secure_port: u16,
    /// Environment variables besides the run's.
    pub env: Vec<(String, String)>,
    /// Flags besides the scenario's and the run's.
    pub flags: Vec<String>,
}

/// Starts the daemon with the scenario's flags and a fake cloud whose admin API listens on a free port.
pub(crate) fn start_daemon(
    scenario: &Scenario,
    settings: &RunSettings,
    cluster: &Cluster,
    dir: &std::path::Path,
    explicit: &ExplicitInstances,
    extras: DaemonExtras,
) -> anyhow::Result<(Daemon, FakeAdmin)> {
    let admin_port = free_port()?;
    let admin = FakeAdmin::new(([127, 0, 0, 1], admin_port).into());
    let cloud_config = dir.join("cloud-config.yaml");
    std::fs::write(
        &cloud_config,
        workload::cloud_config(
            settings.latency_ms,
            admin_port,
            explicit,
            CloudBehaviour {
                external_ips: scenario.cloud_adds_addresses,
                precise_latency: scenario.precise_latency,
            },
        ),
    )
    .context("cannot write the cloud config")?;
    let mut flags = scenario.daemon_flags();
    flags.extend(settings.extra_flags.iter().cloned());
    flags.extend(extras.flags);
    let mut env = settings.extra_env.clone();
    env.extend(extras.env);
    let spec = DaemonSpec {
        binary: settings.binary.clone(),
        kubeconfig: cluster.daemon_kubeconfig().to_path_buf(),
        cloud_config,
        flags,
        env,
        secure_port: extras.secure_port,
    };
    eprintln!(
        "[{}] starting {} {}",
        scenario.id,
        spec.binary.display(),
        spec.args().join(" ")
    );
    Ok((Daemon::spawn(&spec, &dir.join("daemon.log"))?, admin))
}

/// The start of a measured span: when it began, the objects created in it, and the CPU time the daemon
/// and the benchmark had used before it.
pub(crate) struct Span {
    /// The start.
    pub start: Instant,
    /// The objects created, with their create times.
    pub created: Created,
    /// The daemon's CPU seconds at the start.
    pub daemon_cpu: f64,
    /// The benchmark's own CPU seconds at the start.
    pub own_cpu: f64,
    /// The real control plane's CPU seconds at the start.
    pub control_plane_cpu: Option<ControlPlaneCpu>,
}

impl Span {
    /// A span starting now.
    pub(crate) fn now(daemon: &Daemon, cluster: &Cluster) -> Span {
        Span {
            start: Instant::now(),
            created: Created::new(),
            daemon_cpu: daemon.cpu_seconds().unwrap_or(0.0),
            own_cpu: process_cpu_seconds(std::process::id()).unwrap_or(0.0),
            control_plane_cpu: cluster.control_plane_cpu(),
        }
    }

    /// What the benchmark process and, on a real control plane, kube-apiserver and etcd used of the CPU
    /// since the start.
    pub(crate) fn cpu_notes(&self, cluster: &Cluster) -> Vec<String> {
        let mut notes = vec![format!(
            "the benchmark process (API server when in memory, workload, watch) used {:.2} s of CPU over \
             the same span",
            process_cpu_seconds(std::process::id()).unwrap_or(0.0) - self.own_cpu
        )];
        if let (Some(start), Some(now)) = (self.control_plane_cpu, cluster.control_plane_cpu()) {
            notes.push(format!(
                "the control plane used {:.2} s of CPU over the same span: kube-apiserver {:.2} s, etcd \
                 {:.2} s",
                now.api_server - start.api_server + now.etcd - start.etcd,
                now.api_server - start.api_server,
                now.etcd - start.etcd
            ));
        }
        notes
    }
}

/// Waits until the daemon watches what the workload changes, lets it settle, clears the counters and
/// creates the workload (Nodes or Services).
async fn create_workload(
    scenario: &Scenario,
    settings: &RunSettings,
    cluster: &Cluster,
    daemon: &mut Daemon,
    admin: &FakeAdmin,
    notes: &mut Vec<String>,
) -> anyhow::Result<Span> {
    let watched: &[&str] = if scenario.kind == Kind::NodeInit {
        &["nodes"]
    } else {
        &["nodes", "services"]
    };
    wait_for_informers(daemon, cluster, watched).await?;
    tokio::time::sleep(SETTLE).await;
    daemon.check_running()?;
    cluster.clear_requests();
    admin
        .reset_calls()
        .await
        .context("cannot reset the fake cloud's call counters")?;
    let mut span = Span::now(daemon, cluster);
    eprintln!("[{}] creating {} objects", scenario.id, scenario.objects);
    let client = cluster.client();
    let (rate, concurrency) = (scenario.create_rate, settings.create_concurrency);
    span.created = if scenario.kind == Kind::NodeInit {
        let api = Api::<Node>::all(client);
        create_objects(&api, 0..scenario.objects, tainted_node, rate, concurrency).await?
    } else {
        let api = Api::<Service>::namespaced(client, "default");
        let make = load_balancer_service;
        create_objects(&api, 0..scenario.objects, make, rate, concurrency).await?
    };
    notes.push(format!(
        "the benchmark's create requests took {} in all",
        crate::report::format_duration(span.start.elapsed())
    ));
    Ok(span)
}

/// The completion watch of a measuring scenario.
fn start_tracker(
    scenario: &Scenario,
    client: kube::Client,
    explicit: &ExplicitInstances,
) -> Tracker {
    match scenario.kind {
        Kind::Lifecycle => Tracker::start(
            Api::<Node>::all(client),
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
            Api::<Service>::namespaced(client, "default"),
            (0..scenario.objects).map(service_name),
            Goal {
                reached: |s: &Service| ingress_of(s).is_some(),
                deletion_completes: false,
            },
        ),
        _ => Tracker::start(
            Api::<Node>::all(client),
            (0..scenario.objects).map(node_name),
            Goal {
                reached: |n: &Node| !is_uninitialized(n),
                deletion_completes: false,
            },
        ),
    }
}

/// Event occurrences and objects stored after waiting (at most `drain`) for `expected` occurrences, and
/// when, from `start`, they were all there.
pub(crate) struct Drained {
    /// Occurrences and Event objects stored at the end of the wait.
    pub stored: (u64, u64),
    /// When every expected occurrence was stored, from the start of the measurement.
    pub complete_after: Option<Duration>,
    /// How long the wait lasted.
    pub waited: Duration,
}

/// Waits (at most `drain`) until `expected` event occurrences are stored.
pub(crate) async fn drain_events(
    cluster: &Cluster,
    expected: u64,
    start: Instant,
    drain: Duration,
) -> anyhow::Result<Drained> {
    let drain_start = Instant::now();
    let mut stored = cluster.stored_events().await?;
    let mut complete_after = (stored.0 >= expected).then(|| drain_start - start);
    while complete_after.is_none() && drain_start.elapsed() < drain {
        tokio::time::sleep(Duration::from_millis(500)).await;
        stored = cluster.stored_events().await?;
        if stored.0 >= expected {
            complete_after = Some(Instant::now() - start);
        }
    }
    Ok(Drained {
        stored,
        complete_after,
        waited: drain_start.elapsed(),
    })
}

/// The daemon's resident memory, KiB.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Memory {
    /// Resident now (`VmRSS`).
    pub rss: u64,
    /// The peak (`VmHWM`).
    pub peak: u64,
    /// Of the resident now: anonymous memory (heap, stacks) and file-backed pages (the binary's code and the
    /// shared libraries, which move with the linker's layout of the code).
    pub anon_and_file: Option<(u64, u64)>,
}

/// The daemon's memory. Read before the end-state checks: they query the fake cloud's admin API, which runs
/// inside the daemon process and would add the buffers of its answers to the daemon's peak. VmHWM is updated
/// lazily by the kernel; the current RSS may be above it for a moment.
pub(crate) fn memory_kib(daemon: &Daemon) -> Memory {
    let rss = daemon.rss_kib().unwrap_or(0);
    Memory {
        rss,
        peak: daemon.peak_rss_kib().unwrap_or(0).max(rss),
        anon_and_file: daemon.rss_anon_and_file_kib(),
    }
}

/// Notes the daemon's memory, sockets and warnings, stops it and fails the scenario when it does not exit
/// cleanly.
pub(crate) async fn stop_daemon(
    daemon: Daemon,
    settings: &RunSettings,
    memory: Memory,
    notes: &mut Vec<String>,
    failures: &mut Vec<String>,
) -> anyhow::Result<()> {
    let mib = |kib: u64| kib as f64 / 1024.0;
    let split = memory
        .anon_and_file
        .map_or_else(String::new, |(anon, file)| {
            format!(
                ": {:.1} MiB anonymous, {:.1} MiB file-backed",
                mib(anon),
                mib(file)
            )
        });
    notes.push(format!(
        "daemon at the end: {:.1} MiB resident{split} (peak {:.1} MiB), {} open sockets",
        mib(memory.rss),
        mib(memory.peak),
        daemon.open_sockets()
    ));
    let warnings = daemon.warnings();
    if let Some(first) = warnings.first() {
        notes.push(format!(
            "the daemon logged {} warnings or errors, the first: `{}`",
            warnings.len(),
            first.chars().take(240).collect::<String>()
        ));
    }
    let status = daemon.stop(Duration::from_secs(15)).await?;
    let killed_by_sigterm = {
        use std::os::unix::process::ExitStatusExt;
        status.signal() == Some(15)
    };
    if !(status.success() || (settings.daemon_kind == DaemonKind::Upstream && killed_by_sigterm)) {
        failures.push(format!(
            "the daemon exited with {status} when asked to stop"
        ));
    }
    Ok(())
}

/// The daemon's API requests and cloud calls since the counters were cleared, as the outcome shows them.
pub(crate) async fn record_traffic(cluster: &Cluster, admin: &FakeAdmin, outcome: &mut Outcome) {
    let requests = cluster.daemon_requests();
    let calls = admin.calls().await.unwrap_or_default();
    outcome.api_requests = total_without_leases(&requests);
    outcome.event_requests = event_requests(&requests);
    outcome.api_breakdown = describe_requests(&requests);
    outcome.cloud_calls = calls.values().sum();
    outcome.cloud_breakdown = calls
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(op, n)| format!("{op} {n}"))
        .collect::<Vec<_>>()
        .join(", ");
}

/// Runs a measuring scenario (a to d-paced, e, e-pass) on `cluster`.
pub(crate) async fn run_on(
    scenario: &Scenario,
    settings: &RunSettings,
    cluster: &Cluster,
    dir: &std::path::Path,
) -> anyhow::Result<Outcome> {
    let explicit = scenario.explicit_instances();
    create_existing(scenario, settings, cluster).await?;
    let tracker = start_tracker(scenario, cluster.client(), &explicit);
    tracker.wait_synced(Duration::from_secs(60)).await?;
    let mut notes = Vec::new();
    let spawned = Instant::now();
    let extras = DaemonExtras::default();
    let (mut daemon, admin) = start_daemon(scenario, settings, cluster, dir, &explicit, extras)?;
    let (span, pass_calls) = if scenario.kind == Kind::Lifecycle {
        let mut span = Span::now(&daemon, cluster);
        span.start = wait_for_pass_start(&mut daemon, &admin).await?;
        span.daemon_cpu = 0.0;
        notes.push(format!(
            "the pass started {} after the daemon process was spawned (start-up, leader election, \
             listing {} nodes)",
            crate::report::format_duration(span.start - spawned),
            scenario.objects
        ));
        (span, Some(CallTimeline::follow(admin, "instance_states")))
    } else {
        let span =
            create_workload(scenario, settings, cluster, &mut daemon, &admin, &mut notes).await?;
        (span, None)
    };

    let deadline = tokio::time::Instant::from_std(span.start) + settings.timeout;
    let all_done = tracker.wait_all(deadline).await;
    daemon.check_running()?;
    let mut outcome = completion_figures(scenario, &tracker, &span, all_done, &daemon, &mut notes);
    notes.extend(span.cpu_notes(cluster));
    record_traffic(cluster, &admin, &mut outcome).await;
    if let Some(timeline) = pass_calls {
        let (completions, timeline) = (tracker.completions(), timeline.stop().await);
        notes.extend(pass_phases(scenario, &span, &completions, &timeline));
    }
    outcome.events_at_done = cluster.stored_events().await?.0;
    outcome.events_expected = scenario.expected_events();
    let drained = drain_events(
        cluster,
        outcome.events_expected,
        span.start,
        settings.event_drain,
    )
    .await?;
    (outcome.events_after_drain, outcome.event_objects) = drained.stored;
    outcome.events_complete_after = drained.complete_after;
    outcome.drain = drained.waited;
    let memory = memory_kib(&daemon);
    outcome.peak_rss_kib = memory.peak;

    let mut failures = Vec::new();
    if !all_done {
        failures.push(format!(
            "only {} of {} objects completed within {:?}",
            outcome.completed, outcome.tracked, settings.timeout
        ));
    }
    check_end_state(scenario, cluster, &admin, &explicit, &daemon, &mut failures).await?;
    stop_daemon(daemon, settings, memory, &mut notes, &mut failures).await?;
    outcome.failures = failures;
    outcome.notes = notes;
    Ok(outcome)
}

/// Creates the objects that exist before the daemon starts: NotReady initialized Nodes for a lifecycle
/// pass, Ready ones under load balancers.
async fn create_existing(
    scenario: &Scenario,
    settings: &RunSettings,
    cluster: &Cluster,
) -> anyhow::Result<()> {
    let (count, ready) = match scenario.kind {
        Kind::Lifecycle => (scenario.objects, false),
        Kind::LoadBalancers => (scenario.lb_nodes, true),
        _ => return Ok(()),
    };
    eprintln!(
        "[{}] creating {} initialized {} nodes",
        scenario.id,
        thousands(count),
        if ready { "Ready" } else { "NotReady" }
    );
    create_initialized_nodes(cluster, count, ready, settings.create_concurrency).await
}

/// The outcome's completion figures: wall time, latency percentiles, the daemon's CPU time.
fn completion_figures(
    scenario: &Scenario,
    tracker: &Tracker,
    span: &Span,
    all_done: bool,
    daemon: &Daemon,
    notes: &mut Vec<String>,
) -> Outcome {
    let finished = Instant::now();
    let completions = tracker.completions();
    eprintln!(
        "[{}] {} of {} objects done after {:.2} s",
        scenario.id,
        completions.len(),
        tracker.expected(),
        (finished - span.start).as_secs_f64()
    );
    let latencies: Vec<Duration> = completions
        .iter()
        .map(|(name, at)| {
            at.saturating_duration_since(*span.created.get(name).unwrap_or(&span.start))
        })
        .collect();
    let last = completions.values().max().copied().unwrap_or(finished);
    let wall = if all_done {
        last.saturating_duration_since(span.start)
    } else {
        finished - span.start
    };
    if scenario.kind == Kind::NodeInit {
        let arrival = match scenario.create_rate {
            rate if rate > 0.0 => {
                Duration::from_secs_f64(completions.len().saturating_sub(1) as f64 / rate)
            }
            _ => Duration::ZERO,
        };
        let limits = (scenario.qps, scenario.burst);
        // A node whose cloud addresses differ from its own costs a second write (its addresses).
        let writes_per_node = if scenario.cloud_adds_addresses { 2 } else { 1 };
        let writes = completions.len() * writes_per_node;
        notes.push(write_floor_note(writes, limits, arrival, wall));
    }
    if tracker.watch_errors() > 0 {
        notes.push(format!(
            "the benchmark's watch recovered from {} errors",
            tracker.watch_errors()
        ));
    }
    Outcome {
        id: scenario.id.to_string(),
        title: scenario.title(),
        objects: scenario.objects,
        tracked: tracker.expected(),
        completed: completions.len(),
        settings: scenario.settings(),
        cpu_seconds: daemon.cpu_seconds().unwrap_or(0.0) - span.daemon_cpu,
        wall,
        p50: percentile(&latencies, 50.0),
        p99: percentile(&latencies, 99.0),
        ..Outcome::default()
    }
}

/// Checks that every object ended as the scenario requires.
async fn check_end_state(
    scenario: &Scenario,
    cluster: &Cluster,
    admin: &FakeAdmin,
    explicit: &ExplicitInstances,
    daemon: &Daemon,
    failures: &mut Vec<String>,
) -> anyhow::Result<()> {
    let client = cluster.client();
    match scenario.kind {
        Kind::NodeInit => check_initialized(&client, scenario.objects, failures).await,
        Kind::Lifecycle => {
            if daemon.log_contains("node deletion rate limited") {
                failures.push("the node deletion rate was reached".to_string());
            }
            check_lifecycle(&client, scenario.objects, explicit, failures).await
        }
        Kind::LoadBalancers => {
            check_load_balancers(&client, admin, scenario.objects, failures).await
        }
        _ => bail!("{} is not a measuring scenario", scenario.id),
    }
}

/// `writes` API writes at `qps` with `burst` saved up take at least `(writes − burst) / qps`, and no less
/// than the `arrival` of the objects they are for; the note compares `took` with that floor.
pub(crate) fn write_floor_note(
    writes: usize,
    (qps, burst): (f64, u32),
    arrival: Duration,
    took: Duration,
) -> String {
    let bucket = writes.saturating_sub(burst as usize) as f64 / qps;
    let floor = bucket.max(arrival.as_secs_f64());
    let took_text = crate::report::format_duration(took);
    if floor <= 0.0 {
        return format!(
            "{} writes took {took_text}, within the burst of {burst}",
            thousands(writes)
        );
    }
    format!(
        "{} writes took {took_text}; the floor is {floor:.1} s (token bucket: ({} − burst {burst}) / qps {qps} = \
         {bucket:.1} s; the objects arrived over {:.1} s): {:.3}× the floor",
        thousands(writes),
        thousands(writes),
        arrival.as_secs_f64(),
        took.as_secs_f64() / floor
    )
}

/// Lifecycle: how long the pass's cloud checks took (pass start to the last bulk call before the first
/// write landed) and how its writes compare with the token-bucket floor (first to last completion).
fn pass_phases(
    scenario: &Scenario,
    span: &Span,
    completions: &HashMap<String, Instant>,
    timeline: &[(Instant, u64)],
) -> Vec<String> {
    let mut notes = Vec::new();
    let (Some(first), Some(last)) = (completions.values().min(), completions.values().max()) else {
        return notes;
    };
    let before_writes: Vec<&(Instant, u64)> =
        timeline.iter().filter(|(at, _)| at <= first).collect();
    if let Some((checks_done, calls)) = before_writes.last() {
        notes.push(format!(
            "cloud checks of the {} NotReady nodes: {calls} bulk instance_states calls, the last {} after the pass started",
            thousands(scenario.objects),
            crate::report::format_duration(checks_done.saturating_duration_since(span.start)),
        ));
    }
    let deleted = scenario.explicit_instances().terminated.len();
    notes.push(format!(
        "{} of {} nodes deleted ({:.1}%, --node-deletion-max-percent allows 50%)",
        thousands(deleted),
        thousands(scenario.objects),
        deleted as f64 * 100.0 / scenario.objects.max(1) as f64
    ));
    notes.push(write_floor_note(
        completions.len(),
        (scenario.qps, scenario.burst),
        Duration::ZERO,
        last.saturating_duration_since(*first),
    ));
    notes
}

/// Follows one fake cloud operation's call count in the background: when it changed, and to what.
pub(crate) struct CallTimeline {
    task: tokio::task::JoinHandle<Vec<(Instant, u64)>>,
    stop: tokio::sync::watch::Sender<bool>,
}

impl CallTimeline {
    /// Polls the count of `operation` every 20 ms (often enough for passes of seconds, rarely enough not to
    /// load the daemon, whose process serves the admin API).
    pub(crate) fn follow(admin: FakeAdmin, operation: &'static str) -> CallTimeline {
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            let mut changes: Vec<(Instant, u64)> = Vec::new();
            while !*stopped.borrow() {
                if let Ok(calls) = admin.calls().await {
                    let count = calls.get(operation).copied().unwrap_or(0);
                    if changes.last().is_none_or(|(_, seen)| *seen != count) {
                        changes.push((Instant::now(), count));
                    }
                }
                let _ = tokio::time::timeout(Duration::from_millis(20), stopped.changed()).await;
            }
            changes
        });
        CallTimeline { task, stop }
    }

    /// Stops following; the changes seen.
    pub(crate) async fn stop(self) -> Vec<(Instant, u64)> {
        let _ = self.stop.send(true);
        self.task.await.unwrap_or_default()
    }
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
        assert!(!b.precise_latency && !d.precise_latency);
        assert!(Scenario::preset("f").unwrap().precise_latency);
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
    fn scale_presets_match_the_issue() {
        let e = Scenario::preset("e").unwrap();
        assert_eq!(
            (e.kind, e.objects, e.create_rate),
            (Kind::NodeInit, 100_000, 1000.0)
        );
        assert_eq!((e.qps, e.burst, e.node_workers), (500.0, 1000, 10));
        assert_eq!(
            e.title(),
            "initialize 100,000 tainted nodes created at 1,000/s"
        );
        let start = Scenario::preset("e-start").unwrap();
        assert_eq!((start.kind, start.objects), (Kind::Startup, 100_000));
        assert_eq!(start.expected_events(), 0);
        let pass = Scenario::preset("e-pass").unwrap();
        assert_eq!((pass.kind, pass.objects), (Kind::Lifecycle, 100_000));
        assert_eq!(pass.explicit_instances().terminated.len(), 5_000);
        let f = Scenario::preset("f").unwrap();
        assert_eq!(
            (f.kind, f.objects, f.lb_nodes),
            (Kind::NodeChange, 10_000, 5_000)
        );
        assert_eq!(f.expected_events(), 10_000);
        assert_eq!(f.settings(), "qps 500 / burst 1000, service workers 10");
        assert!(
            Scenario::SCALE
                .iter()
                .all(|id| Scenario::NAMED_ONLY.contains(id))
        );
        assert!(Scenario::SCALE.iter().all(|id| !Scenario::ALL.contains(id)));
    }

    #[test]
    fn write_floors_take_the_bucket_and_the_arrivals() {
        let limits = (500.0, 1000);
        let bucket_bound = write_floor_note(
            100_000,
            limits,
            Duration::from_secs(100),
            Duration::from_secs(200),
        );
        assert!(
            bucket_bound.contains("the floor is 198.0 s"),
            "{bucket_bound}"
        );
        assert!(bucket_bound.contains("1.010× the floor"), "{bucket_bound}");
        let arrival_bound = write_floor_note(
            3_000,
            limits,
            Duration::from_secs(6),
            Duration::from_secs(6),
        );
        assert!(
            arrival_bound.contains("the floor is 6.0 s"),
            "{arrival_bound}"
        );
        let within = write_floor_note(300, limits, Duration::ZERO, Duration::from_millis(289));
        assert_eq!(within, "300 writes took 289 ms, within the burst of 1000");
    }

    #[test]
    fn summaries_show_the_first_problems() {
        let problems: Vec<String> = (0..8).map(|i| format!("p{i}")).collect();
        assert_eq!(summarize(&problems), "8 objects wrong: p0; p1; p2; p3; p4");
    }
}
