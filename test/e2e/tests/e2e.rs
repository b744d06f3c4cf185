//! The end-to-end suite: the cloud-controller-manager with the fake provider against a real API server
//! protocol peer, driven only through the Kubernetes API and the fake cloud's admin API.
//!
//! Without environment variables it runs against the in-process `test_apiserver` with two CCM replicas
//! started from `target/debug/cloud-controller-manager` (build it first with `cargo build --all-features`)
//! and simulated kubelets. With `E2E_KUBECONFIG`, `E2E_FAKE_ADMIN` (and `E2E_MODE=existing`) it runs against
//! a real cluster such as the kind cluster of `hack/e2e-kind.sh`.
//!
//! The cases run in one sequence (they share the cluster and build on each other) and each prints its
//! name and outcome; every failure is collected and reported at the end together with the CCM's logs.

use std::collections::BTreeSet;
use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail, ensure};
use ccm_e2e::harness::{CCM_SERVICE_ACCOUNT, LocalOptions};
use ccm_e2e::kubectl::Table;
use ccm_e2e::kubelet::SimulatedNode;
use ccm_e2e::rbac::RbacManifest;
use ccm_e2e::well_known::*;
use ccm_e2e::{Check, Harness, HarnessConfig, Mode, wait_for};
use k8s_openapi::api::core::v1::{Event, Node, PersistentVolume, Pod, Service};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use provider_fake::LoadBalancerRecord;
use serde_json::json;

/// Namespace of the suite's Services.
const NAMESPACE: &str = "default";
/// Simulated nodes registered at the start.
const SIMULATED_NODES: u8 = 3;

struct Suite {
    h: Harness,
    /// The nodes the cases work with.
    nodes: Vec<String>,
    /// A node to shut down and start again.
    shutdown_victim: String,
    /// A node to terminate (last, it does not come back).
    termination_victim: String,
    /// A node to exclude from load balancers.
    exclusion_target: String,
    /// Scales every wait (real clusters run the CCM with its default, slower periods).
    patience: u32,
}

impl Suite {
    async fn start() -> anyhow::Result<Suite> {
        let config = HarnessConfig::from_env()?;
        println!(
            "e2e: mode={} target={}",
            config.mode.as_str(),
            config
                .kubeconfig
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "local API server + 2 CCM processes".into())
        );
        let local = LocalOptions {
            replicas: 2,
            extra_args: config.ccm_args.clone(),
            ..LocalOptions::default()
        };
        let patience = if config.runs_ccm() { 1 } else { 4 };
        let h = Harness::start(config, local).await?;
        let nodes = match h.mode() {
            Mode::Simulated => {
                let mut names = Vec::new();
                for index in 0..SIMULATED_NODES {
                    let node = SimulatedNode::numbered("e2e-node", index);
                    h.kubelets().register(&node).await?;
                    names.push(node.name);
                }
                names
            }
            Mode::Existing => h
                .nodes()
                .await?
                .iter()
                .map(|n| node_name(n).to_string())
                .collect(),
        };
        // Pick victims among the nodes that do not run the control plane (the CCM itself runs there).
        let workers: Vec<String> = match h.mode() {
            Mode::Simulated => nodes.clone(),
            Mode::Existing => h
                .nodes()
                .await?
                .iter()
                .filter(|n| !labels(n).contains_key(CONTROL_PLANE_LABEL))
                .map(|n| node_name(n).to_string())
                .collect(),
        };
        ensure!(
            workers.len() >= 2,
            "the suite needs at least two worker nodes, found {workers:?}"
        );
        let last = workers.len() - 1;
        Ok(Suite {
            shutdown_victim: workers[1.min(last - 1)].clone(),
            termination_victim: workers[last].clone(),
            exclusion_target: workers[0].clone(),
            nodes,
            h,
            patience,
        })
    }

    fn timeout(&self, seconds: u64) -> Duration {
        Duration::from_secs(seconds * u64::from(self.patience))
    }

    fn services(&self) -> Api<Service> {
        Api::namespaced(self.h.client(), NAMESPACE)
    }

    fn node_api(&self) -> Api<Node> {
        Api::all(self.h.client())
    }
}

/// The outcome of every case, reported at the end.
#[derive(Default)]
struct Report {
    failures: Vec<String>,
}

impl Report {
    async fn case<F>(&mut self, name: &str, body: F)
    where
        F: Future<Output = anyhow::Result<()>>,
    {
        let start = Instant::now();
        let outcome = body.await;
        let elapsed = start.elapsed().as_secs_f32();
        match outcome {
            Ok(()) => println!("e2e: case {name} ... ok ({elapsed:.1}s)"),
            Err(err) => {
                println!("e2e: case {name} ... FAILED ({elapsed:.1}s): {err:#}");
                self.failures.push(format!("{name}: {err:#}"));
            }
        }
    }

    /// Records a CCM replica that died on its own (not killed by the suite).
    fn check_replicas(&mut self, s: &mut Suite) {
        if let Some(local) = s.h.local_mut()
            && let Err(err) = local.check_running()
        {
            self.failures.push(err.to_string());
        }
    }

    fn finish(self, s: &Suite) {
        if self.failures.is_empty() {
            println!("e2e: all cases passed");
            return;
        }
        panic!(
            "{} end-to-end case(s) failed:\n  - {}\n\nCCM logs:\n{}",
            self.failures.len(),
            self.failures.join("\n  - "),
            s.h.diagnostics()
        );
    }
}

fn lb_service(name: &str) -> anyhow::Result<Service> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app.kubernetes.io/part-of": "ccm-e2e"}},
        "spec": {
            "type": "LoadBalancer",
            "selector": {"app": name},
            "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}],
        },
    }))?)
}

async fn create_lb_service(s: &Suite, name: &str) -> anyhow::Result<Service> {
    s.services()
        .create(&PostParams::default(), &lb_service(name)?)
        .await
        .with_context(|| format!("creating Service {name}"))
}

/// Waits until the Service has an ingress address and the cleanup finalizer; returns it and the address.
async fn wait_ingress(s: &Suite, name: &str) -> anyhow::Result<(Service, String)> {
    let api = s.services();
    let found = wait_for(
        &format!("Service {name} to get a load-balancer ingress"),
        s.timeout(30),
        || {
            let api = api.clone();
            async move {
                let svc = api.get(name).await.map_err(|e| {
                    ccm_e2e::HarnessError::kube(format!("reading Service {name}"), e)
                })?;
                let ingress = ingress(&svc);
                let ready = !ingress.is_empty() && has_lb_finalizer(&svc);
                let seen = format!(
                    "ingress {ingress:?}, finalizers {:?}",
                    svc.metadata.finalizers
                );
                Ok(Check::when(
                    ready,
                    (svc.clone(), ingress.first().cloned().unwrap_or_default()),
                    || seen,
                ))
            }
        },
    )
    .await?;
    Ok(found)
}

/// Waits until the fake cloud's load balancer `lb_name` satisfies `accept`; returns it.
async fn wait_lb(
    s: &Suite,
    what: &str,
    lb_name: &str,
    accept: impl Fn(&LoadBalancerRecord) -> bool,
) -> anyhow::Result<LoadBalancerRecord> {
    let admin = s.h.admin();
    let accept = &accept;
    Ok(wait_for(what, s.timeout(30), move || async move {
        let lbs = admin.load_balancers().await?;
        let Some(lb) = lbs.iter().find(|lb| lb.name == lb_name) else {
            return Ok(Check::Pending(format!(
                "no load balancer {lb_name} among {} in the cloud",
                lbs.len()
            )));
        };
        Ok(Check::when(accept(lb), lb.clone(), || format!("{lb:?}")))
    })
    .await?)
}

/// Waits until the cloud has no load balancer `lb_name` and none holds `ip`.
async fn wait_lb_gone(s: &Suite, lb_name: &str, ip: &str) -> anyhow::Result<()> {
    let admin = s.h.admin();
    wait_for(
        &format!("load balancer {lb_name} ({ip}) to leave the cloud"),
        s.timeout(30),
        move || async move {
            let lbs = admin.load_balancers().await?;
            let left: Vec<String> = lbs
                .iter()
                .filter(|lb| lb.name == lb_name || lb.ip == ip)
                .map(|lb| format!("{} {}", lb.name, lb.ip))
                .collect();
            Ok(Check::when(left.is_empty(), (), || {
                format!("still there: {left:?}")
            }))
        },
    )
    .await?;
    Ok(())
}

async fn delete_service_and_wait(s: &Suite, name: &str) -> anyhow::Result<()> {
    let api = s.services();
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
        Err(e) => return Err(anyhow!(e).context(format!("deleting Service {name}"))),
    }
    wait_for(
        &format!("Service {name} to be deleted (finalizer released)"),
        s.timeout(30),
        || {
            let api = api.clone();
            async move {
                let svc = api.get_opt(name).await.map_err(|e| {
                    ccm_e2e::HarnessError::kube(format!("reading Service {name}"), e)
                })?;
                Ok(match svc {
                    None => Check::Done(()),
                    Some(svc) => Check::Pending(format!(
                        "still present, finalizers {:?}",
                        svc.metadata.finalizers
                    )),
                })
            }
        },
    )
    .await?;
    Ok(())
}

/// The nodes a load balancer should target right now: not excluded by label, not being deleted.
async fn eligible_lb_nodes(s: &Suite) -> anyhow::Result<BTreeSet<String>> {
    Ok(s.h
        .nodes()
        .await?
        .iter()
        .filter(|n| {
            n.metadata.deletion_timestamp.is_none()
                && !labels(n).contains_key(EXCLUDE_FROM_LB_LABEL)
        })
        .map(|n| node_name(n).to_string())
        .collect())
}

fn lb_ports(lb: &LoadBalancerRecord) -> BTreeSet<i32> {
    lb.ports.iter().map(|p| p.port).collect()
}

fn lb_nodes(lb: &LoadBalancerRecord) -> BTreeSet<String> {
    lb.nodes.iter().cloned().collect()
}

// ----- cases -----

async fn node_initialization_and_labels(s: &Suite) -> anyhow::Result<()> {
    for name in &s.nodes {
        let instance =
            s.h.admin()
                .instance(name)
                .await?
                .ok_or_else(|| anyhow!("the fake cloud has no instance for node {name}"))?;
        let api = s.node_api();
        let expected = [
            (INSTANCE_TYPE_LABEL, instance.instance_type.clone()),
            (INSTANCE_TYPE_BETA_LABEL, instance.instance_type.clone()),
            (ZONE_LABEL, instance.zone.clone()),
            (ZONE_BETA_LABEL, instance.zone.clone()),
            (REGION_LABEL, instance.region.clone()),
            (REGION_BETA_LABEL, instance.region.clone()),
        ];
        let expected = &expected;
        let instance = &instance;
        wait_for(
            &format!(
                "node {name} to get provider ID {} and its cloud labels",
                instance.provider_id
            ),
            s.timeout(30),
            move || {
                let api = api.clone();
                async move {
                    let node = api
                        .get(name)
                        .await
                        .map_err(|e| ccm_e2e::HarnessError::kube("reading a node", e))?;
                    let labels = labels(&node);
                    let wrong: Vec<String> = expected
                        .iter()
                        .filter(|(k, v)| labels.get(*k) != Some(v))
                        .map(|(k, v)| format!("{k}={:?} (want {v})", labels.get(*k)))
                        .collect();
                    let id_ok = provider_id(&node) == Some(instance.provider_id.as_str());
                    Ok(Check::when(id_ok && wrong.is_empty(), (), || {
                        format!(
                            "providerID {:?}, wrong labels {wrong:?}",
                            provider_id(&node)
                        )
                    }))
                }
            },
        )
        .await?;
    }
    if s.h.mode() == Mode::Simulated && s.h.local().is_some() {
        // The explicit instance of the local cloud-config, so the labels are not just self-consistent.
        let node = s.node_api().get("e2e-node-0").await?;
        let labels = labels(&node);
        ensure!(
            labels.get(INSTANCE_TYPE_LABEL).map(String::as_str) == Some("e2e.large")
                && labels.get(ZONE_LABEL).map(String::as_str) == Some("e2e-zone-c")
                && labels.get(REGION_LABEL).map(String::as_str) == Some("e2e-region")
                && provider_id(&node) == Some("fake://e2e-node-0"),
            "e2e-node-0 should carry the configured instance's type, zone and region, has {labels:?}"
        );
        // Its addresses come from the cloud, which knows an ExternalIP the kubelet did not report.
        let api = s.node_api();
        wait_for(
            "e2e-node-0 to get the cloud's addresses (with its ExternalIP)",
            s.timeout(30),
            || {
                let api = api.clone();
                async move {
                    let node = api
                        .get("e2e-node-0")
                        .await
                        .map_err(|e| ccm_e2e::HarnessError::kube("reading a node", e))?;
                    let addresses: Vec<(String, String)> = node
                        .status
                        .and_then(|st| st.addresses)
                        .unwrap_or_default()
                        .into_iter()
                        .map(|a| (a.type_, a.address))
                        .collect();
                    let want = vec![
                        ("InternalIP".to_string(), "10.0.0.10".to_string()),
                        ("ExternalIP".to_string(), "203.0.113.10".to_string()),
                        ("Hostname".to_string(), "e2e-node-0".to_string()),
                    ];
                    Ok(Check::when(addresses == want, (), || {
                        format!("addresses {addresses:?}")
                    }))
                }
            },
        )
        .await?;
    }
    Ok(())
}

async fn uninitialized_taint_removed(s: &Suite) -> anyhow::Result<()> {
    let api = s.node_api();
    let nodes = &s.nodes;
    wait_for(
        "every node to lose the uninitialized taint",
        s.timeout(30),
        move || {
            let api = api.clone();
            async move {
                let mut tainted = Vec::new();
                for name in nodes {
                    let node = api
                        .get(name)
                        .await
                        .map_err(|e| ccm_e2e::HarnessError::kube("reading a node", e))?;
                    if has_taint(&node, UNINITIALIZED_TAINT) {
                        tainted.push(name.clone());
                    }
                }
                Ok(Check::when(tainted.is_empty(), (), || {
                    format!("still tainted: {tainted:?}")
                }))
            }
        },
    )
    .await?;
    Ok(())
}

async fn routes_created(s: &Suite) -> anyhow::Result<()> {
    let api = s.node_api();
    let admin = s.h.admin();
    let nodes = &s.nodes;
    wait_for(
        "NetworkUnavailable=False (RouteCreated) on every node with pod CIDRs, and their routes in the cloud",
        s.timeout(30),
        move || {
            let api = api.clone();
            async move {
                let routes = admin.routes().await?;
                let mut problems = Vec::new();
                for name in nodes {
                    let node = api.get(name).await.map_err(|e| ccm_e2e::HarnessError::kube("reading a node", e))?;
                    let cidrs = pod_cidrs(&node);
                    if cidrs.is_empty() {
                        continue;
                    }
                    match condition(&node, "NetworkUnavailable") {
                        Some(c) if c.status == "False" && c.reason.as_deref() == Some("RouteCreated") => {}
                        other => problems.push(format!(
                            "{name}: NetworkUnavailable {:?}",
                            other.map(|c| (c.status.clone(), c.reason.clone()))
                        )),
                    }
                    for cidr in cidrs {
                        if !routes.iter().any(|r| r.target_node == *name && r.destination_cidr == cidr && !r.blackhole) {
                            problems.push(format!("{name}: no route for {cidr}"));
                        }
                    }
                }
                Ok(Check::when(problems.is_empty(), (), || problems.join("; ")))
            }
        },
    )
    .await?;
    Ok(())
}

async fn load_balancer_lifecycle(s: &Suite) -> anyhow::Result<()> {
    let name = "e2e-lb";
    create_lb_service(s, name).await?;
    let (svc, ip) = wait_ingress(s, name).await?;
    let lb_name = default_lb_name(&svc);
    let expected_nodes = eligible_lb_nodes(s).await?;
    let expected = &expected_nodes;
    let lb = wait_lb(
        s,
        &format!("load balancer {lb_name} with IP {ip}, port 80 and nodes {expected_nodes:?}"),
        &lb_name,
        |lb| lb.ip == ip && lb_ports(lb) == BTreeSet::from([80]) && lb_nodes(lb) == *expected,
    )
    .await?;
    ensure!(
        lb.service == format!("{NAMESPACE}/{name}") || lb.service.ends_with(name),
        "LB records service {:?}",
        lb.service
    );

    // Change the ports: the load balancer follows, the address stays.
    let patch = json!({"spec": {"ports": [{"name": "https", "port": 443, "targetPort": 8443, "protocol": "TCP"}]}});
    s.services()
        .patch(name, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .context("adding port 443")?;
    let ensures_before = lb.ensure_count;
    wait_lb(
        s,
        "the load balancer to serve ports 80 and 443",
        &lb_name,
        |lb| {
            lb_ports(lb) == BTreeSet::from([80, 443])
                && lb.ip == ip
                && lb.ensure_count > ensures_before
        },
    )
    .await?;
    let (svc, ip_after) = wait_ingress(s, name).await?;
    ensure!(
        ip_after == ip,
        "the ingress changed from {ip} to {ip_after} when ports changed"
    );
    let ports: BTreeSet<String> = service_ports(&svc).into_iter().collect();
    ensure!(
        ports == BTreeSet::from(["80/TCP".to_string(), "443/TCP".to_string()]),
        "Service ports are {ports:?}"
    );

    // Delete: the finalizer is released only after the cloud load balancer is gone.
    delete_service_and_wait(s, name).await?;
    wait_lb_gone(s, &lb_name, &ip).await?;

    // The address went back to the pool: the pool hands out its lowest free address, so the next load
    // balancer gets it again.
    let again = "e2e-lb-again";
    create_lb_service(s, again).await?;
    let (_, ip_again) = wait_ingress(s, again).await?;
    ensure!(
        ip_again == ip,
        "the released address {ip} was not reused (got {ip_again})"
    );
    delete_service_and_wait(s, again).await?;
    Ok(())
}

async fn type_change_cleans_up(s: &Suite) -> anyhow::Result<()> {
    let name = "e2e-type-change";
    create_lb_service(s, name).await?;
    let (svc, ip) = wait_ingress(s, name).await?;
    let lb_name = default_lb_name(&svc);
    wait_lb(s, "the load balancer to exist", &lb_name, |_| true).await?;
    let patch = json!({"spec": {
        "type": "ClusterIP",
        "externalTrafficPolicy": null,
        "allocateLoadBalancerNodePorts": null,
        "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}],
    }});
    s.services()
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .context("changing the type to ClusterIP")?;
    let api = s.services();
    wait_for(
        "the ClusterIP Service to lose its ingress and finalizer",
        s.timeout(30),
        || {
            let api = api.clone();
            async move {
                let svc = api
                    .get(name)
                    .await
                    .map_err(|e| ccm_e2e::HarnessError::kube("reading a Service", e))?;
                let clean = ingress(&svc).is_empty() && !has_lb_finalizer(&svc);
                Ok(Check::when(clean, (), || {
                    format!(
                        "ingress {:?}, finalizers {:?}",
                        ingress(&svc),
                        svc.metadata.finalizers
                    )
                }))
            }
        },
    )
    .await?;
    wait_lb_gone(s, &lb_name, &ip).await?;
    delete_service_and_wait(s, name).await?;
    Ok(())
}

async fn set_exclusion_label(s: &Suite, node: &str, excluded: bool) -> anyhow::Result<()> {
    let value = if excluded {
        json!("true")
    } else {
        serde_json::Value::Null
    };
    let patch = json!({"metadata": {"labels": {EXCLUDE_FROM_LB_LABEL: value}}});
    s.node_api()
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("labelling node {node}"))?;
    Ok(())
}

async fn exclusion_label(s: &Suite) -> anyhow::Result<()> {
    let name = "e2e-exclusion";
    let target = s.exclusion_target.as_str();
    create_lb_service(s, name).await?;
    let (svc, _) = wait_ingress(s, name).await?;
    let lb_name = default_lb_name(&svc);
    wait_lb(
        s,
        &format!("node {target} in the load balancer"),
        &lb_name,
        |lb| lb.nodes.iter().any(|n| n == target),
    )
    .await?;

    set_exclusion_label(s, target, true).await?;
    let result = async {
        let others = eligible_lb_nodes(s).await?;
        let others = &others;
        wait_lb(
            s,
            &format!("node {target} to leave the load balancer (nodes {others:?})"),
            &lb_name,
            |lb| lb_nodes(lb) == *others,
        )
        .await
    }
    .await;
    set_exclusion_label(s, target, false).await?;
    result?;
    wait_lb(
        s,
        &format!("node {target} back in the load balancer"),
        &lb_name,
        |lb| lb.nodes.iter().any(|n| n == target),
    )
    .await?;
    delete_service_and_wait(s, name).await?;
    Ok(())
}

async fn cloud_errors_are_retried_and_reported(s: &Suite) -> anyhow::Result<()> {
    let name = "e2e-cloud-errors";
    s.h.admin()
        .fail_operation("ensure_load_balancer", 1.0)
        .await?;
    let result = async {
        create_lb_service(s, name).await?;
        let events: Api<Event> = Api::namespaced(s.h.client(), NAMESPACE);
        wait_for(
            "a repeated Warning SyncLoadBalancerFailed event on the Service",
            s.timeout(40),
            || {
                let events = events.clone();
                async move {
                    let list = events
                        .list(&ListParams::default())
                        .await
                        .map_err(|e| ccm_e2e::HarnessError::kube("listing events", e))?;
                    let counts: Vec<i32> = list
                        .items
                        .iter()
                        .filter(|e| {
                            e.reason.as_deref() == Some("SyncLoadBalancerFailed")
                                && e.type_.as_deref() == Some("Warning")
                                && e.involved_object.name.as_deref() == Some(name)
                        })
                        .map(|e| e.count.unwrap_or(1))
                        .collect();
                    let repeated = counts.iter().any(|c| *c >= 2);
                    Ok(Check::when(repeated, (), || {
                        format!("counts of matching events: {counts:?}")
                    }))
                }
            },
        )
        .await?;
        anyhow::Ok(())
    }
    .await;
    s.h.admin().clear_faults().await?;
    result?;
    // Once the cloud recovers, the next attempt succeeds. A changed annotation makes it happen now rather
    // than after the backoff.
    let patch = json!({"metadata": {"annotations": {"e2e.ccm.example/retry": "now"}}});
    s.services()
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    wait_ingress(s, name).await?;
    delete_service_and_wait(s, name).await?;
    Ok(())
}

async fn volume_labels(s: &Suite) -> anyhow::Result<()> {
    let name = "e2e-volume";
    let pvs: Api<PersistentVolume> = Api::all(s.h.client());
    let pv: PersistentVolume = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "csi": {"driver": provider_fake::DEFAULT_CSI_DRIVER, "volumeHandle": "vol-e2e-1"},
        },
    }))?;
    pvs.create(&PostParams::default(), &pv)
        .await
        .context("creating a PersistentVolume")?;
    let cloud = s.h.admin().state().await?;
    let (zones, region) = (&cloud.zones, &cloud.region);
    let result = wait_for(
        "the PersistentVolume to get its zone and region labels (GA and beta keys)",
        s.timeout(30),
        || {
            let pvs = pvs.clone();
            async move {
                let pv = pvs
                    .get(name)
                    .await
                    .map_err(|e| ccm_e2e::HarnessError::kube("reading a PV", e))?;
                let labels = pv.metadata.labels.clone().unwrap_or_default();
                let zone = labels.get(ZONE_LABEL);
                let done = zone.is_some_and(|z| zones.contains(z))
                    && labels.get(ZONE_BETA_LABEL) == zone
                    && labels.get(REGION_LABEL) == Some(region)
                    && labels.get(REGION_BETA_LABEL) == Some(region);
                Ok(Check::when(done, (), || format!("labels {labels:?}")))
            }
        },
    )
    .await;
    pvs.delete(name, &DeleteParams::default())
        .await
        .context("deleting the PersistentVolume")?;
    result?;
    Ok(())
}

async fn instance_shutdown(s: &Suite) -> anyhow::Result<()> {
    let victim = s.shutdown_victim.as_str();
    let api = s.node_api();
    s.h.admin().stop_instance(victim).await?;
    s.h.kubelets().set_ready(victim, false).await?;
    let tainted = wait_for(
        &format!("node {victim} to get the shutdown taint"),
        s.timeout(30),
        || {
            let api = api.clone();
            async move {
                let node = api
                    .get(victim)
                    .await
                    .map_err(|e| ccm_e2e::HarnessError::kube("reading a node", e))?;
                Ok(Check::when(has_taint(&node, SHUTDOWN_TAINT), (), || {
                    format!("taints {:?}", taint_keys(&node))
                }))
            }
        },
    )
    .await;
    s.h.admin().start_instance(victim).await?;
    s.h.kubelets().set_ready(victim, true).await?;
    tainted?;
    wait_for(
        &format!("node {victim} to lose the shutdown taint once Ready"),
        s.timeout(30),
        || {
            let api = api.clone();
            async move {
                let node = api
                    .get(victim)
                    .await
                    .map_err(|e| ccm_e2e::HarnessError::kube("reading a node", e))?;
                Ok(Check::when(!has_taint(&node, SHUTDOWN_TAINT), (), || {
                    format!("taints {:?}, ready {}", taint_keys(&node), is_ready(&node))
                }))
            }
        },
    )
    .await?;
    Ok(())
}

async fn instance_termination(s: &Suite) -> anyhow::Result<()> {
    let victim = s.termination_victim.as_str();
    let api = s.node_api();
    let uid = api
        .get(victim)
        .await?
        .uid()
        .ok_or_else(|| anyhow!("node {victim} has no uid"))?;
    s.h.admin().terminate_instance(victim).await?;
    // Its kubelet went with it.
    s.h.kubelets().set_ready(victim, false).await?;
    let uid = uid.as_str();
    wait_for(
        &format!("node {victim} to be deleted"),
        s.timeout(30),
        || {
            let api = api.clone();
            async move {
                let node = api
                    .get_opt(victim)
                    .await
                    .map_err(|e| ccm_e2e::HarnessError::kube("reading a node", e))?;
                Ok(match node {
                    None => Check::Done(()),
                    // A real kubelet re-registers its node: a new object is fine too.
                    Some(n) if n.uid().as_deref() != Some(uid) => Check::Done(()),
                    Some(n) => Check::Pending(format!("still there, ready {}", is_ready(&n))),
                })
            }
        },
    )
    .await?;
    s.h.kubelets().forget(victim);
    if s.h.mode() == Mode::Simulated {
        let admin = s.h.admin();
        wait_for(
            &format!("the routes of {victim} to leave the cloud"),
            s.timeout(30),
            move || async move {
                let routes = admin.routes().await?;
                let left: Vec<String> = routes
                    .iter()
                    .filter(|r| r.target_node == victim)
                    .map(|r| r.destination_cidr.clone())
                    .collect();
                Ok(Check::when(left.is_empty(), (), || {
                    format!("routes still there: {left:?}")
                }))
            },
        )
        .await?;
    }
    Ok(())
}

async fn leader_failover(s: &mut Suite) -> anyhow::Result<()> {
    let before =
        s.h.lease_holder()
            .await?
            .ok_or_else(|| anyhow!("the Lease has no holder"))?;
    if s.h.local().is_some() {
        let local = s.h.local().ok_or_else(|| anyhow!("no local cluster"))?;
        let leader = wait_for(
            "exactly one CCM replica to report itself leader",
            s.timeout(15),
            || async {
                Ok(match local.leader_index().await? {
                    Some(index) => Check::Done(index),
                    None => Check::Pending("zero or two leaders".into()),
                })
            },
        )
        .await?;
        let local = s.h.local_mut().ok_or_else(|| anyhow!("no local cluster"))?;
        let killed = local.replicas()[leader].name().to_string();
        local.replicas_mut()[leader].kill().await?;
        println!("e2e:   killed the leader {killed} (SIGKILL: it cannot release the lease)");
    } else {
        delete_ccm_pods_until_the_lease_moves(s, &before).await?;
    }
    let h = &s.h;
    let before = before.as_str();
    let holder = wait_for(
        "another replica to take the lease over",
        s.timeout(15),
        move || async move {
            let holder = h.lease_holder().await?;
            Ok(match holder {
                Some(holder) if holder != before => Check::Done(holder),
                other => Check::Pending(format!("holder {other:?}")),
            })
        },
    )
    .await?;
    println!("e2e:   lease holder moved to {holder}");
    if let Some(local) = s.h.local() {
        let survivor = wait_for(
            "the surviving replica to report itself leader",
            s.timeout(15),
            || async {
                Ok(match local.leader_index().await? {
                    Some(index) => Check::Done(index),
                    None => Check::Pending("no single leader".into()),
                })
            },
        )
        .await?;
        ensure!(
            local.replicas()[survivor].pid().is_some(),
            "the leader is not a live replica"
        );
    }

    // New work still gets done.
    let name = "e2e-after-failover";
    create_lb_service(s, name).await?;
    wait_ingress(s, name).await?;
    if s.h.mode() == Mode::Simulated {
        let node = SimulatedNode::numbered("e2e-node", SIMULATED_NODES);
        s.h.kubelets().register(&node).await?;
        let api = s.node_api();
        let node_name = node.name.as_str();
        wait_for(
            &format!("the new node {node_name} to be initialized by the new leader"),
            s.timeout(30),
            || {
                let api = api.clone();
                async move {
                    let node = api
                        .get(node_name)
                        .await
                        .map_err(|e| ccm_e2e::HarnessError::kube("reading a node", e))?;
                    let done =
                        provider_id(&node).is_some() && !has_taint(&node, UNINITIALIZED_TAINT);
                    Ok(Check::when(done, (), || {
                        format!(
                            "providerID {:?}, taints {:?}",
                            provider_id(&node),
                            taint_keys(&node)
                        )
                    }))
                }
            },
        )
        .await?;
    }
    delete_service_and_wait(s, name).await?;
    Ok(())
}

/// In a real cluster: delete the CCM pods one at a time until the Lease changes hands. A deleted leader
/// releases its lease on SIGTERM; a deleted standby changes nothing, so the next pod is tried.
async fn delete_ccm_pods_until_the_lease_moves(s: &Suite, before: &str) -> anyhow::Result<()> {
    let namespace = &s.h.config().ccm_namespace;
    let pods: Api<Pod> = Api::namespaced(s.h.client(), namespace);
    let selector = "app.kubernetes.io/name=cloud-controller-manager";
    let names: Vec<String> = pods
        .list(&ListParams::default().labels(selector))
        .await
        .with_context(|| format!("listing the CCM pods ({selector}) in {namespace}"))?
        .items
        .iter()
        .map(|p| p.name_any())
        .collect();
    ensure!(
        names.len() >= 2,
        "need two CCM pods ({selector}) in {namespace}, found {names:?}"
    );
    for pod in names {
        pods.delete(&pod, &DeleteParams::default()).await?;
        println!("e2e:   deleted CCM pod {pod}");
        let h = &s.h;
        let moved = wait_for(
            "the lease to change hands",
            s.timeout(5),
            move || async move {
                let holder = h.lease_holder().await?;
                Ok(Check::when(holder.as_deref() != Some(before), (), || {
                    format!("holder {holder:?}")
                }))
            },
        )
        .await;
        if moved.is_ok() {
            return Ok(());
        }
    }
    bail!("the lease stayed with {before} after deleting every CCM pod")
}

fn rbac_honesty(s: &Suite) -> anyhow::Result<()> {
    let local =
        s.h.local()
            .ok_or_else(|| anyhow!("RBAC honesty needs CCM replicas run by the harness"))?;
    let recorded = local.ccm_requests()?.ok_or_else(|| {
        anyhow!("RBAC honesty needs a record of the CCM's requests (the in-process server's request log, or E2E_AUDIT_LOG)")
    })?;
    // A real API server enforces the manifest: a request authorization refused is a missing permission (a
    // 403 of admission, such as an event into a namespace being deleted, is not).
    let forbidden: BTreeSet<String> = recorded
        .iter()
        .filter(|r| r.authorization_denied)
        .map(|r| r.request.permission().to_string())
        .collect();
    ensure!(
        forbidden.is_empty(),
        "the API server refused the CCM: {forbidden:?}"
    );
    let requests: Vec<_> = recorded.into_iter().map(|r| r.request).collect();
    ensure!(
        !requests.is_empty(),
        "the request log has no request of the CCM's identity"
    );
    // At start-up the CCM reads the client CA from kube-system/extension-apiserver-authentication; the
    // local API server serves ConfigMaps, so the lookup is in the request log like every other call.
    let config = s.h.config();
    let path = config.rbac_manifest.clone().unwrap_or_else(|| {
        ccm_e2e::ccm::workspace_root()
            .join("deploy")
            .join("base")
            .join("rbac.yaml")
    });
    let yaml =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let manifest = RbacManifest::parse(&yaml, "kube-system", CCM_SERVICE_ACCOUNT)?;
    let used: BTreeSet<String> = requests
        .iter()
        .map(|r| r.permission().to_string())
        .collect();
    println!(
        "e2e:   the CCM used: {}",
        used.into_iter().collect::<Vec<_>>().join(", ")
    );
    let check = manifest.check(&requests);
    if config.rbac_exact {
        ensure!(
            check.is_exact(),
            "{} does not match what the CCM did:\n{check}",
            path.display()
        );
    } else {
        ensure!(
            check.missing.is_empty(),
            "{} does not grant what the CCM did:\n{check}",
            path.display()
        );
    }
    Ok(())
}

/// Client names the CCM's requests may carry (the last segment of the `User-Agent`), as upstream's client
/// builder names them.
const CLIENT_NAMES: &[&str] = &[
    "shared-informers",
    "node-controller",
    "service-controller",
    "route-controller",
    "pvl-controller",
    "leader-election",
    "cloud-controller-manager",
];

/// Checks a `User-Agent` against client-go's shape, `<command>/v<version> (<os>/<arch>) kubernetes/<commit>/<client>`,
/// and returns the client name.
fn client_name_of(user_agent: &str) -> anyhow::Result<&str> {
    let bad = || {
        anyhow!(
            "User-Agent {user_agent:?} is not <command>/v<version> (<os>/<arch>) kubernetes/<commit>/<client>"
        )
    };
    let (command, rest) = user_agent.split_once('/').ok_or_else(bad)?;
    let (version, rest) = rest.split_once(" (").ok_or_else(bad)?;
    let (platform, rest) = rest.split_once(") kubernetes/").ok_or_else(bad)?;
    let (commit, client) = rest.split_once('/').ok_or_else(bad)?;
    ensure!(
        command == "cloud-controller-manager"
            && version.starts_with('v')
            && version[1..].split('.').all(|p| p.parse::<u32>().is_ok())
            && platform.split('/').count() == 2
            && (commit == "unknown" || commit.len() == 7),
        bad()
    );
    Ok(client)
}

async fn client_identity(s: &Suite) -> anyhow::Result<()> {
    let local =
        s.h.local()
            .ok_or_else(|| anyhow!("client identity needs CCM replicas run by the harness"))?;
    let recorded = local.ccm_requests()?.ok_or_else(|| {
        anyhow!("client identity needs a record of the CCM's requests (E2E_AUDIT_LOG)")
    })?;
    let mut clients = BTreeSet::new();
    for request in &recorded {
        let agent = request
            .user_agent
            .as_deref()
            .ok_or_else(|| anyhow!("a request without User-Agent: {:?}", request.request))?;
        let client = client_name_of(agent)?;
        ensure!(
            CLIENT_NAMES.contains(&client),
            "unexpected client name {client:?} in {agent:?}"
        );
        clients.insert(client);
    }
    println!("e2e:   client names seen: {clients:?}");
    for expected in [
        "shared-informers",
        "node-controller",
        "service-controller",
        "route-controller",
        "leader-election",
    ] {
        ensure!(
            clients.contains(expected),
            "no request of the {expected} client"
        );
    }
    // Events are core v1 events reported as upstream's controllers report them.
    let events: Api<Event> = Api::namespaced(s.h.client(), NAMESPACE);
    let list = events.list(&ListParams::default()).await?;
    let node_synced = list
        .items
        .iter()
        .find(|e| {
            e.reason.as_deref() == Some("Synced")
                && e.involved_object.kind.as_deref() == Some("Node")
        })
        .ok_or_else(|| anyhow!("no Synced event about a node"))?;
    let component = node_synced
        .source
        .as_ref()
        .and_then(|s| s.component.as_deref());
    ensure!(
        component == Some("cloud-node-controller")
            && node_synced.reporting_component.as_deref() == component,
        "the Synced event reports as {component:?} / {:?}",
        node_synced.reporting_component
    );
    let lb_event = list
        .items
        .iter()
        .find(|e| e.reason.as_deref() == Some("EnsuredLoadBalancer"))
        .ok_or_else(|| anyhow!("no EnsuredLoadBalancer event"))?;
    let component = lb_event
        .source
        .as_ref()
        .and_then(|s| s.component.as_deref());
    ensure!(
        component == Some("service-controller"),
        "the EnsuredLoadBalancer event reports as {component:?}"
    );
    // A real API server records who wrote which fields: the CCM's writes name its field manager.
    if local.server().is_none() {
        let nodes = s.h.nodes().await?;
        let node = nodes
            .into_iter()
            .find(|n| provider_id(n).is_some())
            .ok_or_else(|| anyhow!("no initialized node"))?;
        let managers: Vec<(String, String)> = node
            .metadata
            .managed_fields
            .unwrap_or_default()
            .into_iter()
            .map(|m| {
                let fields = m.fields_v1.map(|f| f.0.to_string()).unwrap_or_default();
                (m.manager.unwrap_or_default(), fields)
            })
            .collect();
        ensure!(
            managers
                .iter()
                .any(|(manager, fields)| manager == "cloud-controller-manager"
                    && fields.contains("f:providerID")),
            "no managedFields entry of cloud-controller-manager owning spec.providerID: {managers:?}"
        );
    }
    Ok(())
}

/// The first address of `ty` of a node, as `kubectl get nodes -o wide` prints it.
fn node_address(node: &Node, ty: &str) -> String {
    node.status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .and_then(|a| a.iter().find(|a| a.type_ == ty))
        .map_or_else(|| "<none>".to_string(), |a| a.address.clone())
}

/// The section of `kubectl describe` output after `Events:`.
fn events_section(described: &str) -> &str {
    described.split("\nEvents:").nth(1).unwrap_or_default()
}

/// Waits until an event with `reason` about the object `kind`/`name` exists in `namespace`.
async fn wait_event(
    s: &Suite,
    namespace: &str,
    kind: &str,
    name: &str,
    reason: &str,
) -> anyhow::Result<()> {
    let events: Api<Event> = Api::namespaced(s.h.client(), namespace);
    let selector = format!("involvedObject.kind={kind},involvedObject.name={name},reason={reason}");
    wait_for(
        &format!("a {reason} event about {kind} {name}"),
        s.timeout(30),
        || {
            let events = events.clone();
            let selector = selector.clone();
            async move {
                let list = events
                    .list(&ListParams::default().fields(&selector))
                    .await
                    .map_err(|e| ccm_e2e::HarnessError::kube("listing events", e))?;
                Ok(Check::when(!list.items.is_empty(), (), || {
                    "no such event yet".to_string()
                }))
            }
        },
    )
    .await?;
    Ok(())
}

/// What an operator sees with kubectl: `get nodes -o wide` with the real server's columns and the addresses
/// the CCM set, and `describe node` / `describe service` with the CCM's events and their reasons.
async fn kubectl_shows_the_ccm_work(s: &Suite) -> anyhow::Result<()> {
    let kubeconfig =
        s.h.kubeconfig()
            .ok_or_else(|| anyhow!("no kubeconfig of the cluster under test"))?;
    let kubectl = ccm_e2e::kubectl::Kubectl::new(&kubeconfig)?;

    let table = Table::parse(&kubectl.run(&["get", "nodes", "-o", "wide"]).await?);
    ensure!(
        table.header
            == [
                "NAME",
                "STATUS",
                "ROLES",
                "AGE",
                "VERSION",
                "INTERNAL-IP",
                "EXTERNAL-IP",
                "OS-IMAGE",
                "KERNEL-VERSION",
                "CONTAINER-RUNTIME"
            ],
        "kubectl get nodes -o wide printed the columns {:?}",
        table.header
    );
    let mut external = 0;
    for name in &s.nodes {
        let node = s.node_api().get(name).await?;
        let row = table
            .row(name)
            .ok_or_else(|| anyhow!("kubectl get nodes -o wide has no row for {name}"))?;
        for (column, ty) in [("INTERNAL-IP", "InternalIP"), ("EXTERNAL-IP", "ExternalIP")] {
            let want = node_address(&node, ty);
            let shown = table.cell(row, column).unwrap_or_default();
            ensure!(
                shown == want,
                "{name}: kubectl shows {column} {shown:?}, the node has {want:?}"
            );
        }
        if table.cell(row, "EXTERNAL-IP") != Some("<none>") {
            external += 1;
        }
    }
    if s.h.local().is_some() {
        ensure!(
            external > 0,
            "no node shows the ExternalIP the fake cloud reports for e2e-node-0"
        );
    }

    // describe node: the node controller's Synced event.
    let node = s.nodes.first().ok_or_else(|| anyhow!("no nodes"))?;
    wait_event(s, NAMESPACE, "Node", node, "Synced").await?;
    let described = kubectl.run(&["describe", "node", node]).await?;
    ensure!(
        events_section(&described).contains("Synced"),
        "kubectl describe node {node} shows no Synced event:\n{described}"
    );

    // describe service: the service controller's load-balancer events and the ingress address.
    let name = "e2e-kubectl";
    create_lb_service(s, name).await?;
    let (_, ip) = wait_ingress(s, name).await?;
    wait_event(s, NAMESPACE, "Service", name, "EnsuredLoadBalancer").await?;
    let described = kubectl
        .run(&["describe", "service", name, "-n", NAMESPACE])
        .await?;
    let events = events_section(&described);
    ensure!(
        events.contains("EnsuringLoadBalancer") && events.contains("EnsuredLoadBalancer"),
        "kubectl describe service {name} shows no load-balancer events:\n{described}"
    );
    ensure!(
        described
            .lines()
            .any(|l| l.starts_with("LoadBalancer Ingress:") && l.contains(ip.as_str())),
        "kubectl describe service {name} does not show the ingress {ip}:\n{described}"
    );
    let table = Table::parse(
        &kubectl
            .run(&["get", "service", name, "-n", NAMESPACE, "-o", "wide"])
            .await?,
    );
    let row = table
        .row(name)
        .ok_or_else(|| anyhow!("kubectl get service has no row for {name}"))?;
    ensure!(
        table.cell(row, "EXTERNAL-IP") == Some(ip.as_str()),
        "kubectl get service shows EXTERNAL-IP {:?}, the ingress is {ip}",
        table.cell(row, "EXTERNAL-IP")
    );
    delete_service_and_wait(s, name).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn end_to_end() {
    let mut s = match Suite::start().await {
        Ok(s) => s,
        Err(err) => panic!("end-to-end setup failed: {err:#}"),
    };
    let mut report = Report::default();
    report
        .case(
            "node initialization and labels",
            node_initialization_and_labels(&s),
        )
        .await;
    report
        .case(
            "uninitialized taint removed",
            uninitialized_taint_removed(&s),
        )
        .await;
    report
        .case(
            "routes created, NetworkUnavailable=False",
            routes_created(&s),
        )
        .await;
    report
        .case(
            "load balancer: ingress, port change, release",
            load_balancer_lifecycle(&s),
        )
        .await;
    report
        .case(
            "kubectl: get nodes -o wide, describe node and service with the CCM's events",
            kubectl_shows_the_ccm_work(&s),
        )
        .await;
    report
        .case(
            "type change away from LoadBalancer cleans up",
            type_change_cleans_up(&s),
        )
        .await;
    report
        .case(
            "exclusion label removes the node from load balancers",
            exclusion_label(&s),
        )
        .await;
    report
        .case(
            "cloud errors are retried and reported",
            cloud_errors_are_retried_and_reported(&s),
        )
        .await;
    report
        .case(
            "persistent volumes get zone and region labels",
            volume_labels(&s),
        )
        .await;
    report
        .case(
            "instance shutdown taints the node, start removes it",
            instance_shutdown(&s),
        )
        .await;
    report
        .case(
            "instance termination deletes the node",
            instance_termination(&s),
        )
        .await;
    report.check_replicas(&mut s);
    if s.h.local().is_some() {
        report
            .case(
                "client identity: User-Agents, field manager and events as upstream's",
                client_identity(&s),
            )
            .await;
    } else {
        println!("e2e: case client identity ... skipped: it needs CCM replicas run by the harness");
    }
    report
        .case("leader failover", leader_failover(&mut s))
        .await;
    if s.h.local().is_some() {
        report
            .case(
                "RBAC honesty: the CCM's role grants what was used (deploy/base/rbac.yaml: exactly)",
                async { rbac_honesty(&s) },
            )
            .await;
    } else {
        println!("e2e: case RBAC honesty ... skipped: it needs CCM replicas run by the harness");
    }
    report.finish(&s);
}
