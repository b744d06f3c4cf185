//! The scale scenarios whose figures are not one completion per object:
//!
//! - `e-start`: the daemon starts against 100,000 initialized Ready Nodes; measured from the spawn until
//!   it answers `/healthz` and until its first cloud-node-lifecycle pass has finished (the pass's debug log
//!   line, enabled for that module alone).
//! - `f`: 10,000 LoadBalancer Services over 5,000 Ready Nodes. Once every Service has its load balancer
//!   and the setup's events are stored, the steady state is measured (cloud calls and API requests over
//!   `--steady-seconds`), then a Node labelled out of load balancers is added (it must cost no cloud call),
//!   then a plain Node is added: measured until every load balancer was updated once.
//!
//! The other scale presets (`e`, `e-pass`) are measuring scenarios of kinds a to c at 100,000 Nodes.

use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::core::v1::{Node, Service};
use kube::Api;
use kube::api::PostParams;

use crate::cluster::{Cluster, total_without_leases};
use crate::daemon::Daemon;
use crate::fake_admin::{FakeAdmin, free_port};
use crate::report::{Outcome, format_duration};
use crate::scenario::{
    DaemonExtras, DaemonKind, RunSettings, Scenario, Span, create_initialized_nodes,
    create_objects, drain_events, memory_kib, record_traffic, start_daemon, stop_daemon, thousands,
    wait_for_informers,
};
use crate::tracker::{Goal, Tracker};
use crate::workload::{
    ExplicitInstances, excluded_node, ingress_of, initialized_node,
    load_balancer_service_without_node_ports, node_name, service_name,
};

/// The daemon's log filter in `e-start`: its usual level, plus the lifecycle controller's debug line that
/// ends each pass.
const PASS_LOG_FILTER: &str = "info,cloud_controllers::node_lifecycle=debug";
/// The line the lifecycle controller logs at the end of each pass.
const PASS_FINISHED: &str = "node lifecycle pass finished";
/// The line client-go's reflector logs (at `--v=2`) once upstream's node informer holds every node.
/// Upstream logs no end of its lifecycle passes; over Ready nodes a pass only reads that cache, so its
/// `e-start` is measured to this line.
const UPSTREAM_NODES_LISTED: &str = "\"Caches populated\" type=\"*v1.Node\"";
/// How often `e-start` looks at the daemon's health endpoint and log.
const STARTUP_POLL: Duration = Duration::from_millis(10);
/// How often `f` polls the fake cloud's call counters while load balancers are updated.
const UPDATE_POLL: Duration = Duration::from_millis(20);
/// How long `f` waits after adding a Node that every load balancer excludes.
const EXCLUDED_WAIT: Duration = Duration::from_secs(5);

/// `e-start`: start-up against existing initialized Ready Nodes.
pub async fn run_startup(
    scenario: &Scenario,
    settings: &RunSettings,
    cluster: &Cluster,
    dir: &std::path::Path,
) -> anyhow::Result<Outcome> {
    let nodes = scenario.objects;
    eprintln!(
        "[{}] creating {} initialized Ready nodes",
        scenario.id,
        thousands(nodes)
    );
    create_initialized_nodes(cluster, nodes, true, settings.create_concurrency).await?;
    cluster.clear_requests();
    let port = free_port()?;
    let (end_line, flags) = match settings.daemon_kind {
        DaemonKind::Ours => (PASS_FINISHED, Vec::new()),
        DaemonKind::Upstream => (UPSTREAM_NODES_LISTED, vec!["--v=2".to_string()]),
    };
    let extras = DaemonExtras {
        secure_port: port,
        env: vec![("RUST_LOG".to_string(), PASS_LOG_FILTER.to_string())],
        flags,
    };
    let (mut daemon, admin) = start_daemon(
        scenario,
        settings,
        cluster,
        dir,
        &ExplicitInstances::default(),
        extras,
    )?;
    let span = Span::now(&daemon, cluster);
    let deadline = span.start + settings.timeout;
    let milestones = follow_startup(&mut daemon, cluster, port, deadline, end_line).await?;
    let mut notes = milestones.notes(span.start, end_line);

    let mut outcome = Outcome {
        id: scenario.id.to_string(),
        title: scenario.title(),
        objects: nodes,
        tracked: 1,
        completed: usize::from(milestones.pass_finished.is_some()),
        settings: scenario.settings(),
        cpu_seconds: daemon.cpu_seconds().unwrap_or(0.0),
        ..Outcome::default()
    };
    let since_spawn = |at: Option<Instant>| at.map(|at| at - span.start);
    outcome.wall = since_spawn(milestones.pass_finished).unwrap_or(settings.timeout);
    (outcome.p50, outcome.p99) = (outcome.wall, outcome.wall);
    record_traffic(cluster, &admin, &mut outcome).await;
    let memory = memory_kib(&daemon);
    outcome.peak_rss_kib = memory.peak;
    let mut failures = Vec::new();
    if milestones.pass_finished.is_none() || milestones.serving.is_none() {
        failures.push(format!(
            "within {:?} the daemon was {} and its first lifecycle pass {}",
            settings.timeout,
            if milestones.serving.is_some() {
                "serving"
            } else {
                "not serving"
            },
            if milestones.pass_finished.is_some() {
                "finished"
            } else {
                "not finished"
            },
        ));
    }
    notes.extend(span.cpu_notes(cluster));
    stop_daemon(daemon, settings, memory, &mut notes, &mut failures).await?;
    outcome.failures = failures;
    outcome.notes = notes;
    Ok(outcome)
}

/// When, during start-up, the daemon answered `/healthz`, opened its node watch (its informer listed
/// every node) and finished its first lifecycle pass.
#[derive(Debug, Default)]
struct StartupMilestones {
    serving: Option<Instant>,
    listed: Option<Instant>,
    pass_finished: Option<Instant>,
}

impl StartupMilestones {
    /// When each milestone came, `end_line` naming the log line that ended the start-up.
    fn notes(&self, spawned: Instant, end_line: &str) -> Vec<String> {
        let at = |what: &str, when: Option<Instant>| match when {
            Some(when) => format!("{what} {} after the spawn", format_duration(when - spawned)),
            None => format!("{what}: not reached"),
        };
        vec![
            at("/healthz answered 200", self.serving),
            at(
                "node watch opened (after the list; a streaming list opens it first)",
                self.listed,
            ),
            at(
                &format!("first lifecycle pass finished (log line `{end_line}`)"),
                self.pass_finished,
            ),
        ]
    }
}

/// Follows the daemon's start-up until it serves and has logged `end_line` (its first pass finished), or
/// until `deadline`.
async fn follow_startup(
    daemon: &mut Daemon,
    cluster: &Cluster,
    port: u16,
    deadline: Instant,
    end_line: &str,
) -> anyhow::Result<StartupMilestones> {
    let health = health_client(port)?;
    let mut seen = StartupMilestones::default();
    while (seen.serving.is_none() || seen.pass_finished.is_none()) && Instant::now() < deadline {
        daemon.check_running()?;
        if seen.serving.is_none() && healthy(&health).await {
            seen.serving = Some(Instant::now());
        }
        if seen.listed.is_none() && cluster.daemon_watches("nodes") {
            seen.listed = Some(Instant::now());
        }
        if seen.pass_finished.is_none() && daemon.log_contains(end_line) {
            seen.pass_finished = Some(Instant::now());
        }
        tokio::time::sleep(STARTUP_POLL).await;
    }
    Ok(seen)
}

/// A client for the daemon's serving endpoint (a self-signed certificate).
pub(crate) fn health_client(port: u16) -> anyhow::Result<kube::Client> {
    let url = format!("https://127.0.0.1:{port}")
        .parse()
        .context("the health URL is valid")?;
    let mut config = kube::Config::new(url);
    config.accept_invalid_certs = true;
    config.connect_timeout = Some(Duration::from_millis(500));
    config.read_timeout = Some(Duration::from_secs(2));
    kube::Client::try_from(config).context("cannot build the health client")
}

pub(crate) async fn healthy(client: &kube::Client) -> bool {
    let Ok(request) = http::Request::get("/healthz").body(Vec::new()) else {
        return false;
    };
    client.request_text(request).await.is_ok()
}

/// `f`: the steady state of many load balancers, then a Node excluded from them and a Node added.
pub async fn run_node_change(
    scenario: &Scenario,
    settings: &RunSettings,
    cluster: &Cluster,
    dir: &std::path::Path,
) -> anyhow::Result<Outcome> {
    let services = scenario.objects;
    let mut notes = Vec::new();
    eprintln!(
        "[{}] creating {} Ready nodes",
        scenario.id,
        thousands(scenario.lb_nodes)
    );
    create_initialized_nodes(
        cluster,
        scenario.lb_nodes,
        true,
        settings.create_concurrency,
    )
    .await?;
    let (mut daemon, admin) = start_daemon(
        scenario,
        settings,
        cluster,
        dir,
        &ExplicitInstances::default(),
        DaemonExtras::default(),
    )?;
    wait_for_informers(&mut daemon, cluster, &["nodes", "services"]).await?;
    set_up_load_balancers(scenario, settings, cluster, &mut notes).await?;
    notes.push(steady_state(scenario, cluster, &admin, &mut daemon).await?);
    let excluded = node_name(scenario.lb_nodes);
    notes.push(add_excluded_node(scenario, cluster, &admin, &mut daemon).await?);

    let added = node_name(scenario.lb_nodes + 1);
    let before = cluster.stored_events().await?;
    let (mut outcome, span, updated) =
        add_node(scenario, settings, cluster, &admin, &mut daemon, &mut notes).await?;
    outcome.events_at_done = cluster.stored_events().await?.0 - before.0;
    let expected = before.0 + outcome.events_expected;
    let drained = drain_events(cluster, expected, span.start, settings.event_drain).await?;
    outcome.events_after_drain = drained.stored.0 - before.0;
    outcome.event_objects = drained.stored.1 - before.1;
    outcome.events_complete_after = drained.complete_after;
    outcome.drain = drained.waited;
    record_traffic(cluster, &admin, &mut outcome).await;
    let memory = memory_kib(&daemon);
    outcome.peak_rss_kib = memory.peak;
    let mut failures = Vec::new();
    if updated.count < services as u64 {
        failures.push(format!(
            "only {} of {} load balancers were updated within {:?}",
            updated.count, services, settings.timeout
        ));
    }
    check_backends(&admin, services, &added, &excluded, &mut failures).await?;
    stop_daemon(daemon, settings, memory, &mut notes, &mut failures).await?;
    outcome.failures = failures;
    outcome.notes = notes;
    Ok(outcome)
}

/// Adds a plain Ready Node and waits until every load balancer was updated: the outcome's figures for
/// that span, the span, and the updates seen.
async fn add_node(
    scenario: &Scenario,
    settings: &RunSettings,
    cluster: &Cluster,
    admin: &FakeAdmin,
    daemon: &mut Daemon,
    notes: &mut Vec<String>,
) -> anyhow::Result<(Outcome, Span, Updates)> {
    let services = scenario.objects;
    cluster.clear_requests();
    admin.reset_calls().await?;
    let span = Span::now(daemon, cluster);
    let added = scenario.lb_nodes + 1;
    Api::<Node>::all(cluster.client())
        .create(&PostParams::default(), &initialized_node(added, true))
        .await
        .context("cannot add the node")?;
    let updated = wait_for_updates(daemon, admin, services, span.start + settings.timeout).await?;
    let outcome = Outcome {
        id: scenario.id.to_string(),
        title: scenario.title(),
        objects: services,
        tracked: services,
        completed: updated.count.min(services as u64) as usize,
        settings: scenario.settings(),
        wall: updated.at.saturating_duration_since(span.start),
        cpu_seconds: daemon.cpu_seconds().unwrap_or(0.0) - span.daemon_cpu,
        events_expected: scenario.expected_events(),
        ..Outcome::default()
    };
    let floor = Duration::from_millis(services as u64 * settings.latency_ms)
        / scenario.service_workers.max(1);
    notes.push(format!(
        "the node added: {} update_load_balancer calls in {}; the cloud-call floor {} × {} ms / {} workers is {}: {:.3}× the floor",
        thousands(updated.count as usize),
        format_duration(outcome.wall),
        thousands(services),
        settings.latency_ms,
        scenario.service_workers,
        format_duration(floor),
        outcome.wall.as_secs_f64() / floor.as_secs_f64().max(f64::EPSILON)
    ));
    Ok((outcome, span, updated))
}

/// Events the set-up of `services` load balancers stores: `EnsuringLoadBalancer` and
/// `EnsuredLoadBalancer` each.
fn setup_events(services: usize) -> u64 {
    2 * services as u64
}

/// Creates the Services (no NodePorts: more than the NodePort range holds) and waits until each has its
/// load balancer and the setup's events are stored.
async fn set_up_load_balancers(
    scenario: &Scenario,
    settings: &RunSettings,
    cluster: &Cluster,
    notes: &mut Vec<String>,
) -> anyhow::Result<()> {
    let services = scenario.objects;
    let api = Api::<Service>::namespaced(cluster.client(), "default");
    let tracker = Tracker::start(
        api.clone(),
        (0..services).map(service_name),
        Goal {
            reached: |s: &Service| ingress_of(s).is_some(),
            deletion_completes: false,
        },
    );
    tracker.wait_synced(Duration::from_secs(60)).await?;
    eprintln!(
        "[{}] creating {} services",
        scenario.id,
        thousands(services)
    );
    let start = Instant::now();
    let make = load_balancer_service_without_node_ports;
    create_objects(&api, 0..services, make, 0.0, settings.create_concurrency).await?;
    if !tracker
        .wait_all(tokio::time::Instant::now() + settings.timeout)
        .await
    {
        anyhow::bail!(
            "set-up: only {} of {services} services got a load balancer within {:?}",
            tracker.done_count(),
            settings.timeout
        );
    }
    let ready = start.elapsed();
    let drained =
        drain_events(cluster, setup_events(services), start, settings.event_drain).await?;
    notes.push(format!(
        "set-up: {} services got their load balancers in {}, their {} events were stored after {}",
        thousands(services),
        format_duration(ready),
        thousands(setup_events(services) as usize),
        drained
            .complete_after
            .map_or_else(|| "the drain timeout".to_string(), format_duration),
    ));
    Ok(())
}

/// Counts the daemon's cloud calls and API requests over `--steady-seconds` of nothing changing.
async fn steady_state(
    scenario: &Scenario,
    cluster: &Cluster,
    admin: &FakeAdmin,
    daemon: &mut Daemon,
) -> anyhow::Result<String> {
    tokio::time::sleep(Duration::from_secs(1)).await;
    cluster.clear_requests();
    admin.reset_calls().await?;
    tokio::time::sleep(Duration::from_secs(scenario.steady_seconds)).await;
    daemon.check_running()?;
    let calls: u64 = admin.calls().await?.values().sum();
    let requests = total_without_leases(&cluster.daemon_requests());
    Ok(format!(
        "steady state over {} s: {calls} cloud calls, {requests} API requests besides the Lease",
        scenario.steady_seconds
    ))
}

/// Adds a Node labelled out of every load balancer: no load balancer may be updated for it.
async fn add_excluded_node(
    scenario: &Scenario,
    cluster: &Cluster,
    admin: &FakeAdmin,
    daemon: &mut Daemon,
) -> anyhow::Result<String> {
    cluster.clear_requests();
    admin.reset_calls().await?;
    Api::<Node>::all(cluster.client())
        .create(&PostParams::default(), &excluded_node(scenario.lb_nodes))
        .await
        .context("cannot add the excluded node")?;
    tokio::time::sleep(EXCLUDED_WAIT).await;
    daemon.check_running()?;
    let calls: u64 = admin.calls().await?.values().sum();
    let requests = total_without_leases(&cluster.daemon_requests());
    Ok(format!(
        "a node labelled node.kubernetes.io/exclude-from-external-load-balancers added: {calls} cloud calls, \
         {requests} API requests in the {} s after",
        EXCLUDED_WAIT.as_secs()
    ))
}

/// How many load balancers were updated, and when the count last rose.
struct Updates {
    count: u64,
    at: Instant,
}

async fn wait_for_updates(
    daemon: &mut Daemon,
    admin: &FakeAdmin,
    expected: usize,
    deadline: Instant,
) -> anyhow::Result<Updates> {
    let mut seen = Updates {
        count: 0,
        at: Instant::now(),
    };
    while seen.count < expected as u64 && Instant::now() < deadline {
        daemon.check_running()?;
        let count = admin
            .calls()
            .await?
            .get("update_load_balancer")
            .copied()
            .unwrap_or(0);
        if count > seen.count {
            seen = Updates {
                count,
                at: Instant::now(),
            };
        }
        tokio::time::sleep(UPDATE_POLL).await;
    }
    Ok(seen)
}

/// Every load balancer of the cloud targets the added Node and not the excluded one, one per Service.
async fn check_backends(
    admin: &FakeAdmin,
    services: usize,
    added: &str,
    excluded: &str,
    failures: &mut Vec<String>,
) -> anyhow::Result<()> {
    let cloud = admin.cloud_config().await?;
    if cloud.load_balancers.len() != services {
        failures.push(format!(
            "the fake cloud holds {} load balancers for {services} services",
            cloud.load_balancers.len()
        ));
    }
    let mut wrong = 0;
    for balancer in &cloud.load_balancers {
        let nodes = match balancer.node_set {
            Some(set) => cloud.load_balancer_node_sets.get(set).map(Vec::as_slice),
            None => Some(balancer.nodes.as_slice()),
        }
        .unwrap_or_default();
        let has = |name: &str| nodes.iter().any(|n| n == name);
        if !has(added) || has(excluded) {
            wrong += 1;
        }
    }
    if wrong > 0 {
        failures.push(format!(
            "{wrong} load balancers do not target the added node {added} or target the excluded node {excluded}"
        ));
    }
    Ok(())
}
