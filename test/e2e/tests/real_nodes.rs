//! The end-to-end suite on real nodes: three kubelets with a containerd each and one kube-proxy beside
//! `hack/realkube`'s control plane (`realkube up --nodes 3`, started by `hack/realkube/test-nodes.sh`), and
//! the CCM (the fake provider, whose cloud knows the nodes' instances) run by the harness as the
//! ServiceAccount of `deploy/base/rbac.yaml`.
//!
//! The cases run in one sequence (they build on each other); each prints its name and outcome, and the
//! failures are reported together at the end with the CCM's log. `E2E_REAL_NODES_DIR` names the cluster's
//! directory; without it the test fails saying so (it is `#[ignore]`d: `make test-real-nodes` runs it).

use std::collections::BTreeSet;
use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::{anyhow, ensure};
use ccm_e2e::harness::{CCM_SERVICE_ACCOUNT, LocalOptions, client_from_kubeconfig};
use ccm_e2e::real_nodes::{
    ExternalClient, RealCluster, cloud_config, host_get, instance, node_ip, node_name,
};
use ccm_e2e::well_known::*;
use ccm_e2e::{Check, Harness, HarnessConfig, Mode, wait_for};
use k8s_openapi::api::core::v1::{Event, Node, Pod, Service};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

/// The nodes the cluster runs.
const NODES: usize = 3;
/// The node whose instance first reports another InternalIP than its kubelet's.
const MISMATCHED: usize = 3;
/// The annotation the kubelet records its `--node-ip` in.
const PROVIDED_NODE_IP: &str = "alpha.kubernetes.io/provided-node-ip";
const NAMESPACE: &str = "default";

struct Suite {
    cluster: RealCluster,
    client: Client,
    harness: Option<Harness>,
}

impl Suite {
    fn h(&self) -> anyhow::Result<&Harness> {
        self.harness
            .as_ref()
            .ok_or_else(|| anyhow!("the CCM is not running yet"))
    }

    async fn node(&self, name: &str) -> anyhow::Result<Option<Node>> {
        Ok(Api::<Node>::all(self.client.clone()).get_opt(name).await?)
    }
}

/// A pod of the busybox image answering HTTP on 8080 with its name, on `node` (by hostname label) when given.
fn web_pod(name: &str, app: &str, node: Option<&str>) -> anyhow::Result<Pod> {
    let mut spec = json!({
        "containers": [{
            "name": "web",
            "image": "realkube.local/busybox:1",
            "imagePullPolicy": "Never",
            "command": ["sh", "-c", "echo -n $(hostname) > /www/index.html; exec httpd -f -p 8080 -h /www"],
            "ports": [{"containerPort": 8080}],
            "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
        }],
        "terminationGracePeriodSeconds": 1,
    });
    if let Some(node) = node {
        spec["nodeSelector"] = json!({"kubernetes.io/hostname": node});
    }
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": spec,
    }))?)
}

async fn create_pod(s: &Suite, pod: &Pod) -> anyhow::Result<()> {
    Api::<Pod>::namespaced(s.client.clone(), NAMESPACE)
        .create(&PostParams::default(), pod)
        .await?;
    Ok(())
}

/// Waits until the pod runs and is ready; returns its IP and node.
async fn wait_pod_ready(s: &Suite, name: &str) -> anyhow::Result<(String, String)> {
    let api: Api<Pod> = Api::namespaced(s.client.clone(), NAMESPACE);
    Ok(wait_for(
        &format!("pod {name} ready"),
        Duration::from_secs(60),
        || {
            let api = api.clone();
            async move {
                let pod = api
                    .get(name)
                    .await
                    .map_err(|e| ccm_e2e::HarnessError::kube("get pod", e))?;
                let status = pod.status.clone().unwrap_or_default();
                let ready = status
                    .conditions
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True");
                let node = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_default();
                let ip = status.pod_ip.unwrap_or_default();
                Ok(Check::when(ready && !ip.is_empty(), (ip, node), || {
                    format!("phase {:?}", status.phase)
                }))
            }
        },
    )
    .await?)
}

fn lb_service(name: &str, app: &str, local: bool) -> anyhow::Result<Service> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "type": "LoadBalancer",
            "selector": {"app": app},
            "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP"}],
            "externalTrafficPolicy": if local { "Local" } else { "Cluster" },
        },
    }))?)
}

/// Creates the Service and waits for its ingress IP.
async fn create_lb(s: &Suite, service: &Service) -> anyhow::Result<(Service, String)> {
    let api: Api<Service> = Api::namespaced(s.client.clone(), NAMESPACE);
    let name = service.metadata.name.clone().unwrap_or_default();
    api.create(&PostParams::default(), service).await?;
    Ok(wait_for(
        &format!("{name}'s ingress IP"),
        Duration::from_secs(30),
        || {
            let api = api.clone();
            let name = name.clone();
            async move {
                let svc = api
                    .get(&name)
                    .await
                    .map_err(|e| ccm_e2e::HarnessError::kube("get service", e))?;
                let ip = ingress(&svc).into_iter().next();
                Ok(match ip {
                    Some(ip) => Check::Done((svc, ip)),
                    None => Check::Pending("no ingress yet".into()),
                })
            }
        },
    )
    .await?)
}

/// The pods answering `GET url` within `tries` requests of `get`.
fn answers(get: impl Fn(&str) -> Option<String>, url: &str, tries: usize) -> BTreeSet<String> {
    (0..tries)
        .filter_map(|_| get(url))
        .map(|a| a.trim().to_string())
        // An empty body names no pod (one was seen once in ten runs, from the data path, not the CCM).
        .filter(|a| !a.is_empty())
        .collect()
}

// ---- before the CCM runs ----

async fn kubelets_register_tainted_with_their_ips(s: &Suite) -> anyhow::Result<()> {
    for index in 1..=NODES {
        let name = node_name(index);
        let node = s
            .node(&name)
            .await?
            .ok_or_else(|| anyhow!("{name} is not registered"))?;
        ensure!(
            has_taint(&node, UNINITIALIZED_TAINT),
            "{name} lacks the uninitialized taint: {:?}",
            taint_keys(&node)
        );
        let provided = node
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(PROVIDED_NODE_IP))
            .cloned();
        ensure!(
            provided.as_deref() == Some(node_ip(index).as_str()),
            "{name}'s provided IP: {provided:?}"
        );
        ensure!(
            provider_id(&node).is_none(),
            "{name} has a provider ID before the CCM runs"
        );
    }
    Ok(())
}

async fn pod_waits_for_the_taint(s: &Suite) -> anyhow::Result<()> {
    create_pod(s, &web_pod("early", "early", None)?).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pod = Api::<Pod>::namespaced(s.client.clone(), NAMESPACE)
        .get("early")
        .await?;
    let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
    ensure!(
        node.is_none(),
        "the pod was scheduled to {node:?} before any node was initialized"
    );
    let unschedulable = pod
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "PodScheduled" && c.status == "False");
    ensure!(unschedulable, "the pod is not reported unschedulable");
    Ok(())
}

// ---- with the CCM ----

async fn nodes_are_initialized(s: &Suite) -> anyhow::Result<()> {
    let started = Instant::now();
    for index in (1..=NODES).filter(|i| *i != MISMATCHED) {
        let name = node_name(index);
        let node = wait_for(
            &format!("{name} initialized"),
            Duration::from_secs(30),
            || async {
                let node = s
                    .node(&name)
                    .await
                    .map_err(|e| ccm_e2e::HarnessError::Config(e.to_string()))?;
                Ok(match node {
                    Some(n) if !has_taint(&n, UNINITIALIZED_TAINT) => Check::Done(n),
                    other => Check::Pending(format!("taints {:?}", other.map(|n| taint_keys(&n)))),
                })
            },
        )
        .await?;
        println!(
            "  {name} initialized {:?} after the CCM started",
            started.elapsed()
        );
        ensure!(
            provider_id(&node) == Some(format!("fake://{name}").as_str()),
            "{name}: {:?}",
            provider_id(&node)
        );
        let labels = labels(&node);
        for (key, value) in [
            ("node.kubernetes.io/instance-type", "real.small"),
            ("topology.kubernetes.io/region", "real-region"),
            (
                "topology.kubernetes.io/zone",
                if index % 2 == 1 {
                    "real-zone-a"
                } else {
                    "real-zone-b"
                },
            ),
        ] {
            ensure!(
                labels.get(key).map(String::as_str) == Some(value),
                "{name}: {key} = {:?}",
                labels.get(key)
            );
        }
        let addresses: Vec<(String, String)> = node
            .status
            .as_ref()
            .and_then(|s| s.addresses.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|a| (a.type_, a.address))
            .collect();
        // The kubelet's provided IP first, the cloud's ExternalIP and hostname with it.
        ensure!(
            addresses.first() == Some(&("InternalIP".to_string(), node_ip(index))),
            "{name}: {addresses:?}"
        );
        ensure!(
            addresses.contains(&("ExternalIP".into(), format!("203.0.113.{index}"))),
            "{name}: {addresses:?}"
        );
    }
    Ok(())
}

/// The node whose cloud instance does not have its provided IP is not initialized (as upstream), until the
/// instance does.
async fn a_provided_ip_the_cloud_lacks_is_refused(s: &Suite) -> anyhow::Result<()> {
    let name = node_name(MISMATCHED);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let node = s
        .node(&name)
        .await?
        .ok_or_else(|| anyhow!("{name} is gone"))?;
    ensure!(
        has_taint(&node, UNINITIALIZED_TAINT),
        "{name} was initialized with an address its instance lacks"
    );
    let events = Api::<Event>::namespaced(s.client.clone(), NAMESPACE)
        .list(&ListParams::default())
        .await?;
    let warned = events.items.iter().any(|e| {
        e.involved_object.name.as_deref() == Some(name.as_str())
            && e.type_.as_deref() == Some("Warning")
    });
    ensure!(warned, "no Warning event on {name}");
    // The instance is replaced by one with the node's address: the node is initialized on a retry.
    let admin = s.h()?.admin();
    admin.terminate_instance(&name).await?;
    admin.add_instance(&instance(MISMATCHED, None)).await?;
    wait_for(
        &format!("{name} initialized"),
        Duration::from_secs(60),
        || async {
            let node = s
                .node(&name)
                .await
                .map_err(|e| ccm_e2e::HarnessError::Config(e.to_string()))?;
            Ok(Check::when(
                node.is_some_and(|n| !has_taint(&n, UNINITIALIZED_TAINT)),
                (),
                || "still tainted".into(),
            ))
        },
    )
    .await?;
    Ok(())
}

async fn the_waiting_pod_runs_once_a_node_is_initialized(s: &Suite) -> anyhow::Result<()> {
    let (ip, node) = wait_pod_ready(s, "early").await?;
    let answer = host_get(&format!("http://{ip}:8080/"));
    ensure!(
        answer.as_deref() == Some("early"),
        "pod early on {node} answered {answer:?}"
    );
    Ok(())
}

async fn routes_for_the_pod_cidrs(s: &Suite) -> anyhow::Result<()> {
    let admin = s.h()?.admin().clone();
    let mut wanted = BTreeSet::new();
    for index in 1..=NODES {
        let node = s
            .node(&node_name(index))
            .await?
            .ok_or_else(|| anyhow!("node gone"))?;
        for cidr in pod_cidrs(&node) {
            wanted.insert((node_name(index), cidr));
        }
    }
    ensure!(wanted.len() == NODES, "node-ipam gave pod CIDRs {wanted:?}");
    wait_for("a route per pod CIDR", Duration::from_secs(30), || {
        let admin = admin.clone();
        let wanted = wanted.clone();
        async move {
            let routes: BTreeSet<(String, String)> = admin
                .routes()
                .await?
                .into_iter()
                .map(|r| (r.target_node, r.destination_cidr))
                .collect();
            Ok(Check::when(wanted.is_subset(&routes), (), || {
                format!("{routes:?}")
            }))
        }
    })
    .await?;
    Ok(())
}

async fn load_balancer_serves_from_pods_on_two_nodes(s: &Suite) -> anyhow::Result<()> {
    for (pod, node) in [("web-1", 1), ("web-2", 2)] {
        create_pod(s, &web_pod(pod, "web", Some(&node_name(node)))?).await?;
    }
    for pod in ["web-1", "web-2"] {
        wait_pod_ready(s, pod).await?;
    }
    let (_, ip) = create_lb(s, &lb_service("web", "web", false)?).await?;
    let url = format!("http://{ip}/");
    let from_host = wait_for(
        "both pods answering the ingress IP from the host",
        Duration::from_secs(30),
        || {
            let url = url.clone();
            async move {
                let seen = answers(host_get, &url, 20);
                Ok(Check::when(seen.len() == 2, seen.clone(), || {
                    format!("answers {seen:?}")
                }))
            }
        },
    )
    .await?;
    ensure!(
        from_host == BTreeSet::from(["web-1".to_string(), "web-2".to_string()]),
        "{from_host:?}"
    );
    let client = ExternalClient::create("rk-ext")?;
    let from_outside = answers(|u| client.get(u), &url, 20);
    ensure!(
        from_outside.len() == 2,
        "a client outside the cluster got {from_outside:?}"
    );
    Ok(())
}

/// `externalTrafficPolicy: Local`: a client outside the cluster is served only through a node that holds an
/// endpoint. The one kube-proxy of the nodes is node-1's, so its health-check node port and the ingress IP
/// answer only once node-1 holds one.
async fn local_traffic_policy_needs_a_local_endpoint(s: &Suite) -> anyhow::Result<()> {
    create_pod(s, &web_pod("local-2", "local", Some(&node_name(2)))?).await?;
    wait_pod_ready(s, "local-2").await?;
    let (svc, ip) = create_lb(s, &lb_service("local", "local", true)?).await?;
    let hc_port = svc
        .spec
        .as_ref()
        .and_then(|s| s.health_check_node_port)
        .ok_or_else(|| anyhow!("no healthCheckNodePort"))?;
    let client = ExternalClient::create("rk-loc")?;
    let url = format!("http://{ip}/");
    let health = format!("http://{}:{hc_port}/", node_ip(1));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let seen = answers(|u| client.get(u), &url, 3);
    ensure!(
        seen.is_empty(),
        "node-1 holds no endpoint, yet the ingress IP answered {seen:?}"
    );
    let status = health_status(&health)?;
    ensure!(
        status == 503,
        "node-1's health check answered {status} without a local endpoint"
    );

    create_pod(s, &web_pod("local-1", "local", Some(&node_name(1)))?).await?;
    wait_pod_ready(s, "local-1").await?;
    let seen = wait_for(
        "the ingress IP answering through node-1",
        Duration::from_secs(30),
        || {
            let seen = answers(|u| client.get(u), &url, 6);
            async move {
                Ok(Check::when(!seen.is_empty(), seen.clone(), || {
                    "no answer".into()
                }))
            }
        },
    )
    .await?;
    ensure!(
        seen == BTreeSet::from(["local-1".to_string()]),
        "only node-1's endpoint may answer: {seen:?}"
    );
    let status = health_status(&health)?;
    ensure!(
        status == 200,
        "node-1's health check answered {status} with a local endpoint"
    );
    Ok(())
}

/// The HTTP status of `url` from the host (curl).
fn health_status(url: &str) -> anyhow::Result<u16> {
    let output = std::process::Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-m",
            "3",
            url,
        ])
        .output()?;
    Ok(String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .unwrap_or(0))
}

async fn wait_node(
    s: &Suite,
    name: &str,
    what: &str,
    check: impl Fn(&Node) -> bool,
) -> anyhow::Result<Node> {
    Ok(wait_for(
        &format!("{name}: {what}"),
        Duration::from_secs(60),
        || async {
            let node = s
                .node(name)
                .await
                .map_err(|e| ccm_e2e::HarnessError::Config(e.to_string()))?;
            Ok(match node {
                Some(n) if check(&n) => Check::Done(n),
                other => Check::Pending(format!(
                    "ready {:?}, taints {:?}",
                    other.as_ref().map(is_ready),
                    other.as_ref().map(taint_keys)
                )),
            })
        },
    )
    .await?)
}

async fn a_restarted_kubelet_keeps_what_the_ccm_set(s: &Suite) -> anyhow::Result<()> {
    let name = node_name(3);
    let before = s.node(&name).await?.ok_or_else(|| anyhow!("{name} gone"))?;
    s.cluster.stop_kubelet(&name).await?;
    s.cluster.start_kubelet(&name).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = wait_node(s, &name, "Ready", is_ready).await?;
    ensure!(
        provider_id(&after) == provider_id(&before),
        "provider ID changed"
    );
    ensure!(
        !has_taint(&after, UNINITIALIZED_TAINT),
        "the kubelet tainted its node again"
    );
    for key in [
        "node.kubernetes.io/instance-type",
        "topology.kubernetes.io/zone",
    ] {
        ensure!(
            labels(&after).get(key) == labels(&before).get(key),
            "{key} changed"
        );
    }
    Ok(())
}

async fn a_stopped_machine_is_tainted_shutdown_until_it_runs(s: &Suite) -> anyhow::Result<()> {
    let name = node_name(3);
    let admin = s.h()?.admin().clone();
    s.cluster.stop_kubelet(&name).await?;
    admin.stop_instance(&name).await?;
    wait_node(s, &name, "NotReady and tainted shutdown", |n| {
        !is_ready(n) && has_taint(n, SHUTDOWN_TAINT)
    })
    .await?;
    admin.start_instance(&name).await?;
    s.cluster.start_kubelet(&name).await?;
    wait_node(s, &name, "Ready without the shutdown taint", |n| {
        is_ready(n) && !has_taint(n, SHUTDOWN_TAINT)
    })
    .await?;
    Ok(())
}

/// Two of three machines gone: both Nodes are deleted, one per lifecycle pass (the deletion rate of the
/// default `--node-deletion-max-percent`), and a kubelet that is gone does not register them again.
async fn two_of_three_terminated_machines_are_deleted(s: &Suite) -> anyhow::Result<()> {
    let admin = s.h()?.admin().clone();
    let gone = [node_name(2), node_name(3)];
    for name in &gone {
        s.cluster.stop_kubelet(name).await?;
        admin.terminate_instance(name).await?;
    }
    let started = Instant::now();
    wait_for(
        "both terminated nodes deleted",
        Duration::from_secs(90),
        || async {
            let mut left = Vec::new();
            for name in &gone {
                if s.node(name)
                    .await
                    .map_err(|e| ccm_e2e::HarnessError::Config(e.to_string()))?
                    .is_some()
                {
                    left.push(name.clone());
                }
            }
            Ok(Check::when(left.is_empty(), (), || {
                format!("left: {left:?}")
            }))
        },
    )
    .await?;
    println!(
        "  deleted {:?} after their machines went",
        started.elapsed()
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    for name in &gone {
        ensure!(s.node(name).await?.is_none(), "{name} was registered again");
    }
    Ok(())
}

async fn the_last_machine_of_a_one_node_cluster_is_deleted(s: &Suite) -> anyhow::Result<()> {
    let name = node_name(1);
    s.cluster.stop_kubelet(&name).await?;
    s.h()?.admin().terminate_instance(&name).await?;
    wait_for(
        &format!("{name} deleted"),
        Duration::from_secs(90),
        || async {
            let node = s
                .node(&name)
                .await
                .map_err(|e| ccm_e2e::HarnessError::Config(e.to_string()))?;
            Ok(Check::when(node.is_none(), (), || "still there".into()))
        },
    )
    .await?;
    Ok(())
}

async fn run_case<F, Fut>(name: &str, failures: &mut Vec<String>, case: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let started = Instant::now();
    match case().await {
        Ok(()) => println!(
            "real-nodes: {name}: ok ({:.1}s)",
            started.elapsed().as_secs_f64()
        ),
        Err(err) => {
            println!("real-nodes: {name}: FAILED: {err:#}");
            failures.push(format!("{name}: {err:#}"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs real nodes (realkube up --nodes 3): make test-real-nodes"]
async fn real_nodes() {
    let dir = std::env::var("E2E_REAL_NODES_DIR")
        .expect("E2E_REAL_NODES_DIR names the directory of `realkube up --nodes 3` (hack/realkube/test-nodes.sh sets it)");
    let cluster = RealCluster::open(&dir).expect("a realkube cluster with nodes");
    let client = client_from_kubeconfig(&cluster.admin_kubeconfig())
        .await
        .expect("the admin's client");
    let mut s = Suite {
        cluster,
        client,
        harness: None,
    };
    let mut failures = Vec::new();

    run_case(
        "kubelets register tainted, with their node IPs",
        &mut failures,
        || kubelets_register_tainted_with_their_ips(&s),
    )
    .await;
    run_case("a pod waits for an initialized node", &mut failures, || {
        pod_waits_for_the_taint(&s)
    })
    .await;

    let config = HarnessConfig {
        kubeconfig: Some(s.cluster.admin_kubeconfig()),
        mode: Mode::Existing,
        fake_admin: None,
        ccm_namespace: "kube-system".into(),
        ccm_kubeconfig: Some(s.cluster.ccm_kubeconfig()),
        audit_log: Some(s.cluster.audit_log()),
        rbac_manifest: None,
        rbac_exact: true,
        ccm_args: Vec::new(),
    };
    let local = LocalOptions {
        replicas: 1,
        cloud_config: cloud_config(NODES, Some(MISMATCHED)),
        ..LocalOptions::default()
    };
    s.harness = Some(Harness::start(config, local).await.expect("the CCM starts"));
    println!("real-nodes: the CCM runs as {CCM_SERVICE_ACCOUNT}");

    run_case("nodes are initialized by the CCM", &mut failures, || {
        nodes_are_initialized(&s)
    })
    .await;
    run_case(
        "a provided IP the cloud lacks is refused",
        &mut failures,
        || a_provided_ip_the_cloud_lacks_is_refused(&s),
    )
    .await;
    run_case(
        "the waiting pod runs once a node is initialized",
        &mut failures,
        || the_waiting_pod_runs_once_a_node_is_initialized(&s),
    )
    .await;
    run_case(
        "routes for the pod CIDRs node-ipam gave",
        &mut failures,
        || routes_for_the_pod_cidrs(&s),
    )
    .await;
    run_case(
        "a load balancer serves from pods on two nodes",
        &mut failures,
        || load_balancer_serves_from_pods_on_two_nodes(&s),
    )
    .await;
    run_case(
        "externalTrafficPolicy: Local needs a local endpoint",
        &mut failures,
        || local_traffic_policy_needs_a_local_endpoint(&s),
    )
    .await;
    run_case(
        "a restarted kubelet keeps what the CCM set",
        &mut failures,
        || a_restarted_kubelet_keeps_what_the_ccm_set(&s),
    )
    .await;
    run_case(
        "a stopped machine is tainted shutdown until it runs",
        &mut failures,
        || a_stopped_machine_is_tainted_shutdown_until_it_runs(&s),
    )
    .await;
    run_case(
        "two of three terminated machines are deleted",
        &mut failures,
        || two_of_three_terminated_machines_are_deleted(&s),
    )
    .await;
    run_case(
        "the last machine of a one-node cluster is deleted",
        &mut failures,
        || the_last_machine_of_a_one_node_cluster_is_deleted(&s),
    )
    .await;

    let services: Api<Service> = Api::namespaced(s.client.clone(), NAMESPACE);
    for name in ["web", "local"] {
        let _ = services.delete(name, &DeleteParams::default()).await;
    }
    if !failures.is_empty() {
        let logs = s
            .harness
            .as_ref()
            .map(|h| h.diagnostics())
            .unwrap_or_default();
        panic!(
            "{} real-node case(s) failed:\n  {}\n{logs}",
            failures.len(),
            failures.join("\n  ")
        );
    }
}
