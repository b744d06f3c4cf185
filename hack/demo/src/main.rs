//! `ccm-demo`: the whole cloud-controller-manager at work, on one machine, narrated.
//!
//! It starts the in-process API server and the CCM binary (a separate process, fake provider), plays the
//! kubelets of four nodes, creates three LoadBalancer Services, then stops one instance and terminates
//! another. A watch on Nodes and Services narrates what the CCM does as it happens; at the end it prints
//! the state as tables and checks every expected outcome; last, a second process runs with `--dry-run` beside
//! the CCM and reports every object in sync. Exit code 0 only when all of them happened.
//!
//! Run it with `make demo` (or `cargo build --all-features && cargo run -p ccm-demo`). It prints the kubeconfig
//! of the embedded API server, so `kubectl` can look at the cluster while the demo runs; with `KEEP=1` the API
//! server, the CCM and the simulated kubelets keep running after the demo until Ctrl-C. With `DEMO_KUBECONFIG`
//! (an admin's kubeconfig) and `DEMO_CCM_KUBECONFIG` (the CCM's) it runs against that cluster instead, as
//! `make demo REAL=1` does with `hack/realkube`'s real control plane (which keeps its own cluster with
//! `KEEP=1`). With `DEMO_REAL_NODES=N` as well (`make demo REAL=1 NODES=N`) the cluster's nodes are real
//! kubelets, and the story ends with a request through a load balancer to a pod ([`real_nodes`]).

mod narrator;
mod real_nodes;
mod tables;

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use ccm_e2e::harness::LocalOptions;
use ccm_e2e::kubelet::SimulatedNode;
use ccm_e2e::well_known::*;
use ccm_e2e::{Check, Harness, HarnessConfig, HarnessError, Mode, wait_for};
use k8s_openapi::api::core::v1::{Node, Service};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

/// The demo cloud: two zones, two instance types, one explicitly configured (large) instance, the rest
/// discovered from the nodes.
const CLOUD_CONFIG: &str = "\
region: demo-region-1
zones: [demo-zone-a, demo-zone-b]
instanceTypes: [demo.small, demo.large]
autoDiscover: true
clusterID: demo
clusterName: demo
instances:
  - name: node-0
    type: demo.large
    zone: demo-zone-a
    addresses:
      - {type: InternalIP, address: 10.0.0.10}
      - {type: Hostname, address: node-0}
";

const NODES: u8 = 4;
/// The node whose instance is stopped.
const STOPPED: &str = "node-2";
/// The node whose instance is terminated.
const TERMINATED: &str = "node-3";
/// The Services: name and ports.
const SERVICES: &[(&str, &[i32])] = &[("web", &[80, 443]), ("api", &[8080]), ("dns", &[53])];
/// Bound on every wait.
const WAIT: Duration = Duration::from_secs(30);

/// The variable that keeps the embedded cluster running after the demo (`make demo KEEP=1`, the name
/// `make demo REAL=1` uses for the real control plane).
const KEEP_VARIABLE: &str = "KEEP";

/// Whether `KEEP=1` asks to keep the cluster running.
fn keep_requested() -> bool {
    std::env::var(KEEP_VARIABLE).is_ok_and(|v| v == "1")
}

/// The expected outcomes, in order, with whether each happened.
#[derive(Default)]
struct Outcomes {
    results: Vec<(String, Result<(), String>)>,
}

impl Outcomes {
    fn record<T>(&mut self, what: impl Into<String>, result: Result<T, HarnessError>) -> Option<T> {
        let what = what.into();
        match result {
            Ok(value) => {
                self.results.push((what, Ok(())));
                Some(value)
            }
            Err(err) => {
                self.results.push((what, Err(err.to_string())));
                None
            }
        }
    }

    fn all_ok(&self) -> bool {
        self.results.iter().all(|(_, r)| r.is_ok())
    }

    fn print(&self) {
        println!("\nExpected outcomes:");
        for (what, result) in &self.results {
            match result {
                Ok(()) => println!("  [ok]      {what}"),
                Err(err) => println!("  [MISSING] {what}\n            {err}"),
            }
        }
    }
}

fn service(name: &str, ports: &[i32]) -> anyhow::Result<Service> {
    let ports: Vec<serde_json::Value> = ports
        .iter()
        .map(|p| {
            let protocol = if *p == 53 { "UDP" } else { "TCP" };
            json!({"name": format!("p{p}"), "port": p, "targetPort": p, "protocol": protocol})
        })
        .collect();
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"type": "LoadBalancer", "selector": {"app": name}, "ports": ports},
    }))?)
}

/// Waits until `node` satisfies `accept`.
async fn wait_node(
    nodes: &Api<Node>,
    what: &str,
    name: &str,
    accept: impl Fn(Option<&Node>) -> bool,
) -> Result<(), HarnessError> {
    let accept = &accept;
    wait_for(what, WAIT, || {
        let nodes = nodes.clone();
        async move {
            let node = nodes
                .get_opt(name)
                .await
                .map_err(|e| HarnessError::kube(format!("reading node {name}"), e))?;
            let seen = match &node {
                Some(n) => format!(
                    "taints {:?}, providerID {:?}",
                    taint_keys(n),
                    provider_id(n)
                ),
                None => "no such node".to_string(),
            };
            Ok(Check::when(accept(node.as_ref()), (), || seen))
        }
    })
    .await
}

async fn run() -> anyhow::Result<bool> {
    let started = Instant::now();
    println!("Starting the API server and the cloud-controller-manager (fake cloud provider)...");
    // `make demo REAL=1` runs on hack/realkube's control plane: the admin's kubeconfig and the CCM's
    // (the ServiceAccount of deploy/base/rbac.yaml); by default the in-memory API server.
    let real = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(Into::into)
    };
    let real_nodes: Option<usize> = std::env::var("DEMO_REAL_NODES")
        .ok()
        .and_then(|n| n.parse().ok())
        .filter(|n| *n > 0);
    let config = HarnessConfig {
        kubeconfig: real("DEMO_KUBECONFIG"),
        mode: if real_nodes.is_some() {
            Mode::Existing
        } else {
            Mode::Simulated
        },
        fake_admin: None,
        ccm_namespace: "kube-system".into(),
        ccm_kubeconfig: real("DEMO_CCM_KUBECONFIG"),
        audit_log: None,
        rbac_manifest: None,
        rbac_exact: true,
        ccm_args: Vec::new(),
    };
    if let Some(path) = &config.kubeconfig {
        println!(
            "  API server:           the real control plane of {}",
            path.display()
        );
    }
    let options = LocalOptions {
        replicas: 1,
        cloud_config: match real_nodes {
            // The load balancers carry the traffic themselves (on loopback addresses): the last act's
            // request goes through the fake cloud's load balancer to a node port, not kube-proxy's rules.
            Some(count) => format!(
                "{}dataPath: true\n",
                ccm_e2e::real_nodes::cloud_config(count, None)
            ),
            None => CLOUD_CONFIG.to_string(),
        },
        extra_args: vec!["--cluster-name=demo".into()],
        keep_files: true,
    };
    let harness = Harness::start(config, options)
        .await
        .context("starting the demo")?;
    if let Some(local) = harness.local() {
        if let Some(server) = local.server() {
            println!("  API server:           {}", server.url());
            println!(
                "  kubeconfig:           {}  (kubectl --kubeconfig {} get nodes -o wide)",
                server.kubeconfig_path().display(),
                server.kubeconfig_path().display()
            );
        }
        println!("  fake cloud admin API: http://{}", local.admin_address());
        println!(
            "  CCM log:              {}",
            local
                .replicas()
                .first()
                .map(|r| r.log_path().display().to_string())
                .unwrap_or_default()
        );
    }
    println!();
    let narrator = narrator::Narrator::start(harness.client(), started);
    let mut outcomes = Outcomes::default();
    let result = match real_nodes {
        Some(count) => real_nodes::script(&harness, count, &mut outcomes).await,
        None => script(&harness, &mut outcomes).await,
    };
    // Let the narrator print the last changes.
    tokio::time::sleep(Duration::from_millis(500)).await;
    narrator.stop();

    tables::print(&harness).await?;
    if let Err(err) = result {
        outcomes.results.push((
            "the demo script ran to the end".into(),
            Err(format!("{err:#}")),
        ));
    }
    outcomes.print();
    let ok = outcomes.all_ok();
    if !ok {
        println!("\nThe CCM's log:\n{}", harness.diagnostics());
    }
    println!("\nDone in {:.1}s.", started.elapsed().as_secs_f32());
    if let Some(server) = harness.local().and_then(|l| l.server()) {
        if keep_requested() {
            keep_running(server.kubeconfig_path()).await?;
        } else {
            println!(
                "The API server and the CCM stop now; `make demo {KEEP_VARIABLE}=1` keeps them running to look around with kubectl."
            );
        }
    }
    Ok(ok)
}

/// `KEEP=1`: says how to point kubectl at the cluster, then keeps the API server, the CCM and the simulated
/// kubelets running until Ctrl-C (or SIGTERM).
async fn keep_running(kubeconfig: &std::path::Path) -> anyhow::Result<()> {
    let path = kubeconfig.display();
    println!(
        "\nThe API server, the CCM and the simulated kubelets keep running ({KEEP_VARIABLE}=1). Look around with kubectl:\n  \
         export KUBECONFIG={path}\n  \
         kubectl get nodes -o wide\n  \
         kubectl describe node node-0\n  \
         kubectl get services -o wide\n  \
         kubectl describe service web\n  \
         kubectl get events -A\n\
         Stop with Ctrl-C."
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("watching SIGTERM")?;
    tokio::select! {
        signal = tokio::signal::ctrl_c() => signal.context("waiting for Ctrl-C")?,
        _ = term.recv() => {}
    }
    println!("Stopping the CCM and the API server.");
    Ok(())
}

/// The demo's story, act by act: nodes join, Services get load balancers, one instance stops, another
/// is terminated and the cloud follows, then a dry run checks everything is in sync. Each expected outcome
/// is recorded as it happens (or does not); a failing API call ends the story.
async fn script(h: &Harness, outcomes: &mut Outcomes) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(h.client());
    let services: Api<Service> = Api::namespaced(h.client(), "default");
    nodes_join(h, &nodes, outcomes).await?;
    routes_created(h, outcomes).await;
    services_get_load_balancers(&services, outcomes).await?;
    instance_stopped(h, &nodes, outcomes).await?;
    instance_terminated(h, &nodes, outcomes).await?;
    load_balancers_drop_terminated(h, outcomes).await;
    route_of_terminated_removed(h, outcomes).await;
    if let Some(local) = h.local() {
        let report = dry_run(h, local).await;
        outcomes.record(
            "a dry run beside the CCM finds every object in sync (exit 0)",
            report,
        );
    }
    Ok(())
}

/// The kubelets register their nodes; the CCM initializes each one (provider ID, zone, type) and lifts
/// the uninitialized taint.
async fn nodes_join(h: &Harness, nodes: &Api<Node>, outcomes: &mut Outcomes) -> anyhow::Result<()> {
    narrator::say("The kubelets of four nodes register, tainted until the cloud initializes them.");
    for index in 0..NODES {
        h.kubelets()
            .register(&SimulatedNode::numbered("node", index))
            .await?;
    }
    for index in 0..NODES {
        let name = format!("node-{index}");
        let result = wait_node(nodes, &format!("{name} to be initialized"), &name, |n| {
            n.is_some_and(|n| provider_id(n).is_some() && !has_taint(n, UNINITIALIZED_TAINT))
        })
        .await;
        outcomes.record(
            format!("{name} initialized (provider ID, zone, type; taint removed)"),
            result,
        );
    }
    Ok(())
}

/// The route controller creates a cloud route for every node's pod CIDR.
async fn routes_created(h: &Harness, outcomes: &mut Outcomes) {
    let routes = wait_for("a route for every node", WAIT, || async {
        let routes = h.admin().routes().await?;
        let mut targets: Vec<String> = routes.iter().map(|r| r.target_node.clone()).collect();
        targets.sort();
        targets.dedup();
        Ok(Check::when(targets.len() == usize::from(NODES), (), || {
            format!("routes for {targets:?}")
        }))
    })
    .await;
    outcomes.record("a route in the cloud for each node's pod CIDR", routes);
}

/// Three LoadBalancer Services are created; the service controller gives each an external IP.
async fn services_get_load_balancers(
    services: &Api<Service>,
    outcomes: &mut Outcomes,
) -> anyhow::Result<()> {
    narrator::say("Three Services of type LoadBalancer are created.");
    for (name, ports) in SERVICES {
        services
            .create(&PostParams::default(), &service(name, ports)?)
            .await?;
    }
    for (name, _) in SERVICES {
        let result = wait_for(
            &format!("Service {name} to get an external IP"),
            WAIT,
            || {
                let services = services.clone();
                async move {
                    let svc = services
                        .get(name)
                        .await
                        .map_err(|e| HarnessError::kube(format!("reading Service {name}"), e))?;
                    Ok(Check::when(!ingress(&svc).is_empty(), (), || {
                        "no ingress yet".to_string()
                    }))
                }
            },
        )
        .await;
        outcomes.record(format!("Service {name} got a load-balancer IP"), result);
    }
    Ok(())
}

/// An instance is shut down in the cloud; the node lifecycle controller taints its node.
async fn instance_stopped(
    h: &Harness,
    nodes: &Api<Node>,
    outcomes: &mut Outcomes,
) -> anyhow::Result<()> {
    narrator::say(format!(
        "The instance of {STOPPED} is shut down in the cloud (its kubelet stops reporting)."
    ));
    h.admin().stop_instance(STOPPED).await?;
    h.kubelets().set_ready(STOPPED, false).await?;
    let shutdown = wait_node(
        nodes,
        &format!("{STOPPED} to get the shutdown taint"),
        STOPPED,
        |n| n.is_some_and(|n| has_taint(n, SHUTDOWN_TAINT)),
    )
    .await;
    outcomes.record(format!("{STOPPED} tainted {SHUTDOWN_TAINT}"), shutdown);
    Ok(())
}

/// An instance is terminated in the cloud; the node lifecycle controller deletes its node.
async fn instance_terminated(
    h: &Harness,
    nodes: &Api<Node>,
    outcomes: &mut Outcomes,
) -> anyhow::Result<()> {
    narrator::say(format!(
        "The instance of {TERMINATED} is terminated in the cloud."
    ));
    h.admin().terminate_instance(TERMINATED).await?;
    h.kubelets().set_ready(TERMINATED, false).await?;
    let deleted = wait_node(
        nodes,
        &format!("{TERMINATED} to be deleted"),
        TERMINATED,
        |n| n.is_none(),
    )
    .await;
    h.kubelets().forget(TERMINATED);
    outcomes.record(
        format!("{TERMINATED} deleted once its instance was gone"),
        deleted,
    );
    Ok(())
}

/// The service controller updates every load balancer so that none targets the deleted node.
async fn load_balancers_drop_terminated(h: &Harness, outcomes: &mut Outcomes) {
    let lb_nodes = wait_for(
        "the load balancers to drop the deleted node",
        WAIT,
        || async {
            let lbs = h.admin().load_balancers().await?;
            let targets: std::collections::BTreeSet<String> =
                lbs.iter().flat_map(|lb| lb.nodes.iter().cloned()).collect();
            let stale: BTreeMap<String, Vec<String>> = lbs
                .iter()
                .filter(|lb| lb.nodes.iter().any(|n| n == TERMINATED))
                .map(|lb| (lb.service.clone(), lb.nodes.to_vec()))
                .collect();
            let done = lbs.len() == SERVICES.len() && stale.is_empty();
            Ok(Check::when(done, targets, || {
                format!(
                    "{} load balancers; still targeting {TERMINATED}: {stale:?}",
                    lbs.len()
                )
            }))
        },
    )
    .await;
    if let Ok(targets) = &lb_nodes {
        narrator::tell(format!(
            "the cloud's load balancers were updated: they now target {}",
            targets.iter().cloned().collect::<Vec<_>>().join(", ")
        ));
    }
    outcomes.record(
        format!("load balancers no longer target {TERMINATED}"),
        lb_nodes,
    );
}

/// The route controller removes the cloud route of the deleted node.
async fn route_of_terminated_removed(h: &Harness, outcomes: &mut Outcomes) {
    let route_gone = wait_for(
        &format!("the route of {TERMINATED} to be removed"),
        WAIT,
        || async {
            let routes = h.admin().routes().await?;
            let left = routes
                .iter()
                .filter(|r| r.target_node == TERMINATED)
                .count();
            Ok(Check::when(left == 0, (), || {
                format!("{left} route(s) still target {TERMINATED}")
            }))
        },
    )
    .await;
    if route_gone.is_ok() {
        narrator::tell(format!("the cloud route of {TERMINATED} was removed"));
    }
    outcomes.record(
        format!("the route of {TERMINATED} removed from the cloud"),
        route_gone,
    );
}

/// What an operator runs before switching: a second process with `--dry-run`, beside the CCM in charge,
/// against the cloud as it is now. Prints its report.
async fn dry_run(h: &Harness, local: &ccm_e2e::harness::LocalCluster) -> Result<(), HarnessError> {
    narrator::say(
        "A second process runs with --dry-run beside the CCM (no Lease, no writes, no cloud changes) \
         and reports what it would change:",
    );
    // The fake cloud as it is now; its admin address is the running CCM's.
    let cloud_config: String = h
        .admin()
        .cloud_config()
        .await?
        .lines()
        .filter(|line| !line.starts_with("adminAddress:"))
        .map(|line| format!("{line}\n"))
        .collect();
    let (code, report) = local.dry_run(&cloud_config).await?;
    println!("\n{report}");
    if code == 0 {
        Ok(())
    } else {
        Err(HarnessError::Config(format!(
            "the dry run exited {code}, not 0"
        )))
    }
}

fn main() -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("ccm-demo: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("ccm-demo: some expected outcomes did not happen (see above)");
            ExitCode::FAILURE
        }
        Err(err) => {
            eprintln!("ccm-demo: {err:#}");
            ExitCode::FAILURE
        }
    }
}
