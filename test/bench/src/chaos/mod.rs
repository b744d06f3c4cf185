//! The chaos scenario: the daemon initializes 5,000 tainted Nodes and gives 2,000 LoadBalancer Services
//! their load balancers while everything around it fails, and must still end in exactly the right state.
//!
//! 1. The daemon starts (leader election on, flags as scenario b and d) with a fake cloud that fails
//!    `--cloud-error-percent` (30%) of the calls of every operation ([`faults::cloud_faults`]); the API
//!    server fails `--api-error-percent` (10%) of the writes of Nodes, Services and Events with 500, 409 or
//!    429 ([`faults::api_write_faults`]), and every 5 s every watch is cut and the history compacted, every
//!    other time so that the informers get `410 Gone` and list again ([`faults::Disruptor`]).
//! 2. The Nodes, then the Services are created (the benchmark's own writes are retried through the faults).
//! 3. When half the Nodes are initialized: the instances of some initialized Nodes are stopped or
//!    terminated in the cloud (`--stopped-percent`, `--terminated-percent` of all Nodes) and those Nodes
//!    marked NotReady, every tenth Service is deleted; a second later the daemon is killed with SIGKILL
//!    and started again with the same flags on the cloud it left ([`daemons`]). The new one waits for the
//!    killed one's Lease to expire.
//! 4. The faults go on for `--fault-seconds` after the new daemon took the Lease, then stop (the cloud
//!    keeps its latency).
//! 5. The benchmark waits for the end state ([`checks`]), reports the convergence time from the start,
//!    the kill and the end of the faults, waits for the events to settle and checks that no object got
//!    more than [`EVENT_BOUND`] event occurrences ([`events`]).

pub mod checks;
mod daemons;
pub mod events;
pub mod faults;
mod report;
mod writes;

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node, Service};
use kube::Api;
use kube::api::ListParams;
use provider_fake::{FakeConfig, FaultSpec};
use test_apiserver::Controls;

use crate::cluster::Cluster;
use crate::daemon::DaemonSpec;
use crate::fake_admin::free_port;
use crate::report::{Outcome, load_average};
use crate::scenario::{ChaosOptions, RunSettings, Scenario};
use crate::tracker::{Goal, Tracker};
use crate::workload::{
    CloudBehaviour, ExplicitInstances, ingress_of, is_uninitialized, load_balancer_service,
    node_name, tainted_node,
};
use checks::{Expected, Problems};
use daemons::Incarnations;

/// The most event occurrences (an aggregated Event counts its `count`) one object may get. A Service's
/// events report sync steps: two per ensure attempt (`EnsuringLoadBalancer`, then `EnsuredLoadBalancer`
/// or `SyncLoadBalancerFailed`), one per host update (`UpdatedLoadBalancer` or
/// `UpdateLoadBalancerFailed`). The 5 s, 10 s, 20 s backoff allows 4 ensure attempts in an incarnation's
/// ≤ 35 s of faults (8 for two incarnations); host updates come once per node-sync pass, which runs back
/// to back (≥ 4 s each over 2,000 load balancers) while the node set changes: ≤ 15 passes over the run's
/// minute of initializations and deletions, 30% of which fail and queue one more ensure. So
/// 2 × (8 + 0.3 × 15) + 15 ≈ 40. Nodes get far fewer (`Synced` once, `DeletingNode` per deletion
/// attempt). A sync loop without backoff would make hundreds.
pub const EVENT_BOUND: u64 = 40;
/// Share of the Nodes initialized when the daemon is killed, percent.
const KILL_AT_PERCENT: usize = 50;
/// Every this many Services, one is deleted midway.
const DELETE_EVERY: usize = 10;
/// Time between the midway changes and the kill.
const KILL_DELAY: Duration = Duration::from_secs(1);
/// How often watches are cut and the history compacted.
const DISRUPT_EVERY: Duration = Duration::from_secs(5);
/// How often the daemon is looked after while waiting.
const POLL: Duration = Duration::from_millis(100);
/// How often the end state is checked while converging.
const CONVERGENCE_POLL: Duration = Duration::from_millis(500);
/// How long the restarted daemon may take to get the Lease.
const TAKEOVER_TIMEOUT: Duration = Duration::from_secs(90);
/// Events are settled when their count did not change for this long.
const EVENT_QUIET: Duration = Duration::from_secs(5);
/// How long the daemon has to start its informers.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
/// The Lease of the daemon's leader election.
const LEASE_NAMESPACE: &str = "kube-system";
const LEASE_NAME: &str = "cloud-controller-manager";

/// When things happened.
#[derive(Debug, Clone, Copy)]
struct Timeline {
    start: Instant,
    creates_done: Instant,
    midway: Instant,
    killed: Instant,
    restarted: Instant,
    takeover: Instant,
    faults_end: Instant,
    converged: Option<Instant>,
}

/// Events stored at convergence and once they settled.
#[derive(Debug, Clone, Copy)]
struct StoredEvents {
    /// Occurrences at convergence.
    at_convergence: u64,
    /// (occurrences, Event objects) once settled.
    settled: (u64, u64),
    /// How long the settling took.
    waited: Duration,
}

/// Runs the chaos scenario on a fresh in-memory API server. The daemon logs are kept (and their place
/// noted) when the scenario fails.
pub async fn run(scenario: &Scenario, settings: &RunSettings) -> anyhow::Result<Outcome> {
    if settings.realkube.is_some() {
        bail!(
            "the chaos scenario needs the in-memory API server's fault controls; it cannot run with --realkube"
        );
    }
    let load = load_average();
    let dir = tempfile::Builder::new()
        .prefix("ccm-bench-chaos-")
        .tempdir()
        .context("cannot create a temporary directory")?;
    let cluster = Cluster::start(dir.path(), None).await?;
    let result = run_on(scenario, settings, &cluster, dir.path()).await;
    cluster.shutdown().await;
    match result {
        Ok(mut outcome) => {
            outcome.load = load;
            if !outcome.failures.is_empty() {
                let kept = dir.keep();
                outcome
                    .notes
                    .push(format!("daemon logs kept in {}", kept.display()));
            }
            Ok(outcome)
        }
        Err(error) => {
            let kept = dir.keep();
            Err(error.context(format!("daemon logs kept in {}", kept.display())))
        }
    }
}

/// The fake cloud of the first daemon: the benchmark's cloud with the chaos faults.
fn first_cloud(settings: &RunSettings, options: &ChaosOptions) -> anyhow::Result<FakeConfig> {
    let yaml = crate::workload::cloud_config(
        settings.latency_ms,
        free_port()?,
        &ExplicitInstances::default(),
        CloudBehaviour::default(),
    );
    let mut config =
        FakeConfig::from_yaml(yaml.as_bytes()).context("the benchmark's cloud-config")?;
    config.faults = faults::cloud_faults(options.cloud_error_percent, settings.latency_ms);
    Ok(config)
}

async fn run_on(
    scenario: &Scenario,
    settings: &RunSettings,
    cluster: &Cluster,
    dir: &Path,
) -> anyhow::Result<Outcome> {
    let controls = cluster
        .controls()
        .context("the chaos scenario needs the in-memory API server")?;
    let client = cluster.client();
    let expected = Expected {
        nodes: scenario.objects,
        services: scenario.services,
        deleted_services: (0..scenario.services)
            .filter(|i| i % DELETE_EVERY == 0)
            .map(crate::workload::service_name)
            .collect(),
        ..Expected::default()
    };
    let node_tracker = Tracker::start(
        Api::<Node>::all(client.clone()),
        (0..expected.nodes).map(node_name),
        Goal {
            reached: |n: &Node| !is_uninitialized(n),
            deletion_completes: false,
        },
    );
    let service_tracker = Tracker::start(
        Api::<Service>::namespaced(client.clone(), "default"),
        expected.kept_services(),
        Goal {
            reached: |s: &Service| ingress_of(s).is_some(),
            deletion_completes: false,
        },
    );
    node_tracker.wait_synced(STARTUP_TIMEOUT).await?;
    service_tracker.wait_synced(STARTUP_TIMEOUT).await?;

    let mut flags = scenario.daemon_flags();
    flags.extend(settings.extra_flags.iter().cloned());
    let spec = DaemonSpec {
        binary: settings.binary.clone(),
        kubeconfig: cluster.daemon_kubeconfig().to_path_buf(),
        cloud_config: dir.join("cloud-config-1.yaml"),
        flags,
        env: settings.extra_env.clone(),
        secure_port: 0,
    };
    eprintln!(
        "[chaos] starting {} {}",
        spec.binary.display(),
        spec.args().join(" ")
    );
    let mut daemons = Incarnations::start(spec, &first_cloud(settings, &scenario.chaos)?, dir)?;
    crate::scenario::wait_for_informers(daemons.current()?, cluster, &["nodes", "services"])
        .await?;
    tokio::time::sleep(crate::scenario::SETTLE).await;
    cluster.clear_requests();
    daemons.admin().reset_calls().await?;
    let chaos = Chaos {
        scenario,
        settings,
        cluster,
        controls,
        client,
        daemons,
        node_tracker,
        service_tracker,
        expected,
        created: HashMap::new(),
        notes: Vec::new(),
        failures: Vec::new(),
    };
    chaos.run().await
}

/// One run of the scenario.
struct Chaos<'a> {
    scenario: &'a Scenario,
    settings: &'a RunSettings,
    cluster: &'a Cluster,
    controls: Controls,
    client: kube::Client,
    daemons: Incarnations,
    node_tracker: Tracker,
    service_tracker: Tracker,
    expected: Expected,
    /// When each object's create request was first sent.
    created: HashMap<String, Instant>,
    notes: Vec<String>,
    failures: Vec<String>,
}

impl Chaos<'_> {
    async fn run(mut self) -> anyhow::Result<Outcome> {
        let own_cpu = crate::daemon::process_cpu_seconds(std::process::id()).unwrap_or(0.0);
        let timeline = self.faulty_phase().await?;
        let events = self.settle_events().await?;
        self.final_checks().await?;
        self.notes.push(format!(
            "the benchmark process (API server, workload, watches, checks) used {:.2} s of CPU",
            crate::daemon::process_cpu_seconds(std::process::id()).unwrap_or(0.0) - own_cpu
        ));
        let totals = self.daemons.finish(Duration::from_secs(15)).await?;
        Ok(self.outcome(&timeline, &events, totals))
    }

    /// Everything until the end state is reached (or the timeout passed): faults, workload, kill and
    /// restart, the end of the faults, convergence.
    async fn faulty_phase(&mut self) -> anyhow::Result<Timeline> {
        let options = self.scenario.chaos;
        let latency = self.settings.latency_ms;
        let start = Instant::now();
        for rule in faults::api_write_faults(options.api_error_percent) {
            self.controls.fail(rule);
        }
        let disruptor =
            faults::Disruptor::start(self.controls.clone(), self.client.clone(), DISRUPT_EVERY);
        self.create_workload().await?;
        let creates_done = Instant::now();
        self.wait_for_kill_point(start + self.settings.timeout)
            .await?;
        let midway = Instant::now();
        self.midway_changes().await?;
        self.pause(KILL_DELAY).await?;
        let holder = self.lease_holder().await?;
        let with_ingress = self.service_tracker.done_count();
        let restart = self
            .daemons
            .kill_and_restart(
                &faults::cloud_faults(options.cloud_error_percent, latency),
                latency,
            )
            .await?;
        self.notes.push(format!(
            "when the daemon was killed the cloud held {} load balancers, {with_ingress} remaining \
             services showed their ingress and {} nodes were initialized",
            restart.load_balancers,
            self.node_tracker.done_count()
        ));
        let takeover = self.wait_for_takeover(holder.as_deref()).await?;
        self.pause(Duration::from_secs(options.fault_seconds))
            .await?;
        let (cuts, compactions) = disruptor.stop().await;
        self.controls.clear_faults();
        let admin = self.daemons.admin();
        admin.clear_faults().await?;
        admin
            .set_fault("*", &FaultSpec::latency(Duration::from_millis(latency)))
            .await?;
        let faults_end = Instant::now();
        self.notes.push(format!(
            "watches cut {cuts} times, history compacted {compactions} times (every other time with \
             re-watches held back so that they got 410 Gone)"
        ));
        let converged = self
            .wait_for_convergence(faults_end + self.settings.timeout)
            .await?;
        Ok(Timeline {
            start,
            creates_done,
            midway,
            killed: restart.killed_at,
            restarted: restart.restarted_at,
            takeover,
            faults_end,
            converged,
        })
    }

    /// Creates the Nodes, then the Services (so that every load balancer's backends are the full node set
    /// from its first ensure on).
    async fn create_workload(&mut self) -> anyhow::Result<()> {
        let concurrency = self.settings.create_concurrency;
        let nodes: Api<Node> = Api::all(self.client.clone());
        eprintln!("[chaos] creating {} nodes", self.expected.nodes);
        let created = writes::create_all(
            &nodes,
            (0..self.expected.nodes).map(tainted_node).collect(),
            concurrency,
        )
        .await?;
        self.created.extend(created);
        let services: Api<Service> = Api::namespaced(self.client.clone(), "default");
        eprintln!("[chaos] creating {} services", self.expected.services);
        let created = writes::create_all(
            &services,
            (0..self.expected.services)
                .map(load_balancer_service)
                .collect(),
            concurrency,
        )
        .await?;
        self.created.extend(created);
        Ok(())
    }

    /// Looks after the daemon for `duration`.
    async fn pause(&mut self, duration: Duration) -> anyhow::Result<()> {
        let until = Instant::now() + duration;
        while Instant::now() < until {
            self.daemons.supervise().await?;
            tokio::time::sleep(POLL.min(until.saturating_duration_since(Instant::now()))).await;
        }
        Ok(())
    }

    /// Waits until [`KILL_AT_PERCENT`] of the Nodes are initialized.
    async fn wait_for_kill_point(&mut self, deadline: Instant) -> anyhow::Result<()> {
        let target = self.expected.nodes * KILL_AT_PERCENT / 100;
        while self.node_tracker.done_count() < target {
            if Instant::now() >= deadline {
                bail!(
                    "only {} of {} nodes were initialized within {:?}; end of the daemon's log:\n{}",
                    self.node_tracker.done_count(),
                    self.expected.nodes,
                    self.settings.timeout,
                    self.daemons.current()?.log_tail(30)
                );
            }
            self.pause(POLL).await?;
        }
        Ok(())
    }

    /// Stops and terminates instances of initialized Nodes (marking those NotReady) and deletes every
    /// [`DELETE_EVERY`]th Service.
    async fn midway_changes(&mut self) -> anyhow::Result<()> {
        let mut initialized: Vec<String> = self.node_tracker.completions().into_keys().collect();
        initialized.sort();
        let percent = |p: u32| self.expected.nodes * p as usize / 100;
        let (stopped, terminated) = pick_victims(
            &initialized,
            percent(self.scenario.stopped_percent),
            percent(self.scenario.terminated_percent),
        )?;
        eprintln!(
            "[chaos] stopping {} and terminating {} instances, deleting {} services",
            stopped.len(),
            terminated.len(),
            self.expected.deleted_services.len()
        );
        let admin = self.daemons.admin();
        let actions = stopped
            .iter()
            .map(|n| (n, "stop"))
            .chain(terminated.iter().map(|n| (n, "terminate")));
        let done: Vec<anyhow::Result<()>> = futures::stream::iter(actions)
            .map(|(name, action)| admin.instance_action(name, action))
            .buffer_unordered(16)
            .collect()
            .await;
        done.into_iter().collect::<anyhow::Result<()>>()?;
        let victims: Vec<String> = stopped.iter().chain(&terminated).cloned().collect();
        writes::mark_not_ready(&Api::all(self.client.clone()), &victims).await?;
        let deleted: Vec<String> = self.expected.deleted_services.iter().cloned().collect();
        writes::delete_services(&Api::namespaced(self.client.clone(), "default"), &deleted).await?;
        self.expected.stopped = stopped.into_iter().collect();
        self.expected.terminated = terminated.into_iter().collect();
        Ok(())
    }

    /// The holder of the daemon's Lease.
    async fn lease_holder(&self) -> anyhow::Result<Option<String>> {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), LEASE_NAMESPACE);
        let lease = leases
            .get_opt(LEASE_NAME)
            .await
            .with_context(|| format!("cannot read the Lease {LEASE_NAMESPACE}/{LEASE_NAME}"))?;
        Ok(lease.and_then(|l| l.spec).and_then(|s| s.holder_identity))
    }

    /// Waits until someone other than `killed` holds the Lease.
    async fn wait_for_takeover(&mut self, killed: Option<&str>) -> anyhow::Result<Instant> {
        let deadline = Instant::now() + TAKEOVER_TIMEOUT;
        loop {
            let holder = self.lease_holder().await?;
            if holder.is_some() && holder.as_deref() != killed {
                return Ok(Instant::now());
            }
            if Instant::now() >= deadline {
                bail!(
                    "the restarted daemon did not take the Lease within {TAKEOVER_TIMEOUT:?} (holder {holder:?}); \
                     end of its log:\n{}",
                    self.daemons.current()?.log_tail(30)
                );
            }
            self.pause(POLL).await?;
        }
    }

    /// The end state's problems now (the cloud is only asked once the API side is right).
    async fn problems(&self) -> anyhow::Result<Problems> {
        let nodes = Api::<Node>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .context("cannot list nodes")?;
        let services = Api::<Service>::namespaced(self.client.clone(), "default")
            .list(&ListParams::default())
            .await
            .context("cannot list services")?;
        let mut problems = Problems::default();
        checks::check_nodes(&nodes.items, &self.expected, &mut problems);
        let facts = checks::check_services(&services.items, &self.expected, &mut problems);
        if problems.is_empty() {
            let cloud = self
                .daemons
                .admin()
                .cloud_config()
                .await
                .context("cannot export the fake cloud")?;
            checks::check_cloud(&cloud, &self.expected, &facts, &mut problems);
        }
        Ok(problems)
    }

    /// Waits for the end state; `None` (and a failure) when `deadline` passed first.
    async fn wait_for_convergence(&mut self, deadline: Instant) -> anyhow::Result<Option<Instant>> {
        let mut last_report = Instant::now();
        loop {
            self.daemons.supervise().await?;
            let problems = self.problems().await?;
            if problems.is_empty() {
                return Ok(Some(Instant::now()));
            }
            if Instant::now() >= deadline {
                self.failures.push(format!(
                    "no convergence within {:?} after the faults stopped: {}",
                    self.settings.timeout,
                    problems.lines().join("; ")
                ));
                return Ok(None);
            }
            if last_report.elapsed() >= Duration::from_secs(10) {
                eprintln!("[chaos] converging: {}", problems.lines().join("; "));
                last_report = Instant::now();
            }
            tokio::time::sleep(CONVERGENCE_POLL).await;
        }
    }

    /// Waits until the stored events stop changing (at most the event drain).
    async fn settle_events(&mut self) -> anyhow::Result<StoredEvents> {
        let begin = Instant::now();
        let at_convergence = self.cluster.stored_events().await?;
        let mut stored = at_convergence;
        let mut unchanged_since = Instant::now();
        while unchanged_since.elapsed() < EVENT_QUIET && begin.elapsed() < self.settings.event_drain
        {
            self.pause(Duration::from_millis(500)).await?;
            let now = self.cluster.stored_events().await?;
            if now != stored {
                stored = now;
                unchanged_since = Instant::now();
            }
        }
        Ok(StoredEvents {
            at_convergence: at_convergence.0,
            settled: stored,
            waited: begin.elapsed(),
        })
    }

    /// The end state once more (it must hold after the events settled), the events per object, the
    /// evidence that the informers listed again.
    async fn final_checks(&mut self) -> anyhow::Result<()> {
        let problems = self.problems().await?;
        self.failures.extend(
            problems
                .lines()
                .into_iter()
                .map(|l| format!("end state: {l}")),
        );
        let events = Api::<Event>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .context("cannot list events")?;
        for (kind, objects) in events::by_object(&events.items) {
            self.notes
                .push(format!("events of {}", objects.describe(&kind)));
            if let Some((name, worst)) = objects.worst()
                && worst.occurrences > EVENT_BOUND
            {
                self.failures.push(format!(
                    "event storm: {kind} {name} got {} event occurrences (bound {EVENT_BOUND}): {:?}",
                    worst.occurrences, worst.reasons
                ));
            }
        }
        self.check_relists();
        Ok(())
    }

    /// Fails unless the daemon listed Nodes or Services more often than its restarted incarnations' first
    /// lists need: then an informer listed again after a watch was cut with its history compacted.
    fn check_relists(&mut self) {
        let requests = self.cluster.daemon_requests();
        let lists = |resource: &str| {
            requests
                .get(&("list".to_string(), resource.to_string(), String::new()))
                .copied()
                .unwrap_or(0)
        };
        let pages = |objects: usize| objects.div_ceil(500).max(1) as u64;
        let first_lists = u64::from(self.daemons.restarts())
            * (pages(self.expected.nodes) + pages(self.expected.services));
        let (nodes, services) = (lists("nodes"), lists("services"));
        self.notes.push(format!(
            "the daemon sent {nodes} node and {services} service list requests (the first lists of its \
             restarted incarnations take at most {first_lists} pages of 500)"
        ));
        if nodes + services <= first_lists {
            self.failures.push(
                "the daemon never listed again after its watches were cut and the history compacted"
                    .to_string(),
            );
        }
    }
}

/// `stopped + terminated` of the `initialized` Nodes (sorted), spread evenly over them, alternately
/// stopped and terminated.
fn pick_victims(
    initialized: &[String],
    stopped: usize,
    terminated: usize,
) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let wanted = stopped + terminated;
    if wanted > initialized.len() {
        bail!(
            "{wanted} instances to stop or terminate, but only {} nodes are initialized",
            initialized.len()
        );
    }
    let mut picked = (Vec::new(), Vec::new());
    if wanted == 0 {
        return Ok(picked);
    }
    let stride = initialized.len() / wanted;
    for (j, name) in initialized.iter().step_by(stride).take(wanted).enumerate() {
        if (j % 2 == 0 && picked.0.len() < stopped) || picked.1.len() >= terminated {
            picked.0.push(name.clone());
        } else {
            picked.1.push(name.clone());
        }
    }
    Ok(picked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn victims_are_spread_and_split() {
        let names: Vec<String> = (0..100).map(node_name).collect();
        let (stopped, terminated) = pick_victims(&names, 5, 3).unwrap();
        assert_eq!((stopped.len(), terminated.len()), (5, 3));
        assert_eq!(stopped[0], node_name(0));
        assert_eq!(terminated[0], node_name(12));
        assert!(stopped.iter().all(|n| !terminated.contains(n)));
        assert_eq!(pick_victims(&names, 0, 0).unwrap(), (vec![], vec![]));
        assert!(pick_victims(&names[..5], 3, 3).is_err());
        let (s, t) = pick_victims(&names, 0, 4).unwrap();
        assert_eq!((s.len(), t.len()), (0, 4));
    }
}
