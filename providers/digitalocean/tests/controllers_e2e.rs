//! End to end: the real controllers (`run_controllers`) with this provider, built by the registry from a
//! cloud-config, against the in-memory API server and the DigitalOcean API stub. Nodes are initialized,
//! a load balancer is created, follows the node set, reports a bad annotation as a Warning event and is
//! deleted with its Service. Every log line of the run is captured, and the token never appears in it.
//!
//! This file holds a single test because it installs the process-wide log subscriber.

use std::future::Future;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use cloud_controllers::{
    ControllerConfig, ControllerContext, ControllerMetrics, ControllerName, HealthRegistry,
    run_controllers,
};
use cloud_provider::{Registry, TAINT_UNINITIALIZED};
use k8s_openapi::api::core::v1::{
    Node, NodeAddress, NodeCondition, NodeSpec, NodeStatus, Service, ServicePort, ServiceSpec,
    Taint,
};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use parking_lot::Mutex;
use provider_digitalocean::annotations::{ANN_LOAD_BALANCER_ID, ANN_SIZE_SLUG, ANN_TYPE};
use provider_digitalocean::stub::{DoStub, DropletSpec};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "dop_v1_e2e_0f3b9c7d51a2e4f68b0c1d2e3f4a5b6c";

#[derive(Clone)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

static LOGS: std::sync::OnceLock<Arc<Mutex<Vec<u8>>>> = std::sync::OnceLock::new();

/// The last captured log lines (without the token), for failure messages.
fn log_tail() -> String {
    let Some(logs) = LOGS.get() else {
        return String::new();
    };
    let text = String::from_utf8_lossy(&logs.lock()).into_owned();
    let lines: Vec<&str> = text.lines().filter(|l| !l.contains(TOKEN)).collect();
    lines[lines.len().saturating_sub(60)..].join("\n")
}

async fn wait_until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}\nlast log lines:\n{}",
            log_tail()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn ready(status: &str) -> NodeCondition {
    NodeCondition {
        type_: "Ready".into(),
        status: status.into(),
        reason: Some("KubeletReady".into()),
        ..Default::default()
    }
}

/// A node as a kubelet with `--cloud-provider=external` registers it: tainted, no provider ID.
fn kubelet_node(name: &str) -> Node {
    Node {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            taints: Some(vec![Taint {
                key: TAINT_UNINITIALIZED.into(),
                value: Some("true".into()),
                effect: "NoSchedule".into(),
                time_added: None,
            }]),
            ..Default::default()
        }),
        status: Some(NodeStatus {
            addresses: Some(vec![NodeAddress {
                type_: "Hostname".into(),
                address: name.into(),
            }]),
            conditions: Some(vec![ready("True")]),
            ..Default::default()
        }),
    }
}

async fn add_node(nodes: &Api<Node>, name: &str) {
    let node = kubelet_node(name);
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let status = json!({"status": {"conditions": [ready("True")]}});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

fn initialized(node: &Node) -> bool {
    !node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == TAINT_UNINITIALIZED))
}

fn lb_service(name: &str, annotations: &[(&str, &str)]) -> Service {
    Service {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            annotations: Some(
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("LoadBalancer".into()),
            selector: Some([("app".to_string(), name.to_string())].into()),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                port: 80,
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn droplet_ids(stub: &DoStub) -> Option<serde_json::Value> {
    stub.load_balancers()
        .first()
        .map(|lb| lb["droplet_ids"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controllers_run_end_to_end_and_never_log_the_token() {
    let logs = LOGS
        .get_or_init(|| Arc::new(Mutex::new(Vec::new())))
        .clone();
    let writer = Captured(logs.clone());
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();

    let stub = DoStub::builder()
        .token(TOKEN)
        .metadata_region("nyc3")
        .start()
        .await;
    let w1 = stub.add_droplet(DropletSpec::new("worker-1"));
    let w2 = stub.add_droplet(DropletSpec::new("worker-2"));
    let w3 = stub.add_droplet(DropletSpec::new("worker-3"));

    // The provider as the daemon builds it: the registry factory and a cloud-config file. No region is
    // configured: it comes from the metadata service.
    let mut registry = Registry::new();
    provider_digitalocean::register(&mut registry);
    let cloud_config = format!(
        "accessToken: {TOKEN}\noverrideURL: {}\nmetadataURL: {}\nclusterID: e2e\ndropletCacheTTLSeconds: 1\n",
        stub.url(),
        stub.metadata_url()
    );
    let cloud = registry
        .init("digitalocean", Some(cloud_config.as_bytes()))
        .unwrap();

    let server = test_apiserver::TestApiServer::builder()
        .start()
        .await
        .unwrap();
    let client = server.client().unwrap();
    cloud.initialize(client.clone()).await.unwrap();

    let ctx = ControllerContext {
        client: client.clone(),
        event_client: server.client().unwrap(),
        cloud: cloud.clone(),
        config: Arc::new(ControllerConfig {
            node_monitor_period: cloud_controllers::Period::new(Duration::from_millis(200))
                .unwrap(),
            node_status_update_frequency: cloud_controllers::NonZeroDuration::new(
                Duration::from_secs(3600),
            ),
            ..ControllerConfig::default()
        }),
        metrics: ControllerMetrics::register(&mut prometheus_client::registry::Registry::default()),
        health: HealthRegistry::new(),
        identity: "e2e_0".into(),
    };
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    let controllers = tokio::spawn(async move {
        run_controllers(
            ctx,
            &[
                ControllerName::CloudNode,
                ControllerName::CloudNodeLifecycle,
                ControllerName::ServiceLb,
            ],
            token,
        )
        .await
    });

    let nodes: Api<Node> = Api::all(client.clone());
    let services: Api<Service> = Api::namespaced(client.clone(), "default");

    // Nodes get initialized from their droplets (found by name).
    add_node(&nodes, "worker-1").await;
    add_node(&nodes, "worker-2").await;
    for (name, id) in [("worker-1", w1), ("worker-2", w2)] {
        wait_until(&format!("{name} initialized"), || async {
            nodes.get(name).await.is_ok_and(|n| initialized(&n))
        })
        .await;
        let node = nodes.get(name).await.unwrap();
        assert_eq!(
            node.spec.unwrap().provider_id.as_deref(),
            Some(format!("digitalocean://{id}").as_str())
        );
        let labels = node.metadata.labels.unwrap();
        assert_eq!(labels["node.kubernetes.io/instance-type"], "s-2vcpu-4gb");
        assert_eq!(labels["topology.kubernetes.io/region"], "nyc3");
        let private = stub.droplet(id).unwrap()["networks"]["v4"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["type"] == "private")
            .unwrap()["ip_address"]
            .clone();
        let addresses = node.status.unwrap().addresses.unwrap();
        assert!(
            addresses
                .iter()
                .any(|a| a.type_ == "InternalIP" && json!(a.address) == private),
            "{addresses:?}"
        );
    }

    // A LoadBalancer Service gets a load balancer over both droplets, its ID written back, and the
    // load balancer's address in its status.
    services
        .create(&PostParams::default(), &lb_service("web", &[]))
        .await
        .unwrap();
    wait_until("the load balancer is ensured", || async {
        let svc = services.get("web").await.unwrap();
        let ingress = svc
            .status
            .and_then(|s| s.load_balancer)
            .and_then(|lb| lb.ingress)
            .unwrap_or_default();
        !ingress.is_empty()
    })
    .await;
    let lbs = stub.load_balancers();
    assert_eq!(lbs.len(), 1);
    let lb = &lbs[0];
    assert_eq!(lb["droplet_ids"], json!([w1, w2]));
    assert_eq!(lb["type"], "REGIONAL_NETWORK");
    assert_eq!(lb["tags"], json!(["k8s:e2e"]));
    assert_eq!(lb["region"]["slug"], "nyc3");
    let svc = services.get("web").await.unwrap();
    let annotations = svc.metadata.annotations.clone().unwrap();
    assert_eq!(
        annotations[ANN_LOAD_BALANCER_ID],
        lb["id"].as_str().unwrap()
    );
    assert_eq!(annotations[ANN_TYPE], "REGIONAL_NETWORK");
    let ingress = svc.status.unwrap().load_balancer.unwrap().ingress.unwrap();
    assert_eq!(json!(ingress[0].ip), lb["ip"]);

    // A new node joins the load balancer.
    add_node(&nodes, "worker-3").await;
    wait_until("worker-3 joins the load balancer", || async {
        droplet_ids(&stub) == Some(json!([w1, w2, w3]))
    })
    .await;

    // Its droplet is destroyed and the node goes NotReady: the lifecycle controller deletes the node
    // (the droplet API answers 404), and the load balancer drops it.
    stub.remove_droplet(w3);
    let not_ready = json!({"status": {"conditions": [ready("False")]}});
    nodes
        .patch_status(
            "worker-3",
            &PatchParams::default(),
            &Patch::Merge(&not_ready),
        )
        .await
        .unwrap();
    wait_until("worker-3 is deleted", || async {
        nodes.get_opt("worker-3").await.unwrap().is_none()
    })
    .await;
    wait_until("worker-3 leaves the load balancer", || async {
        droplet_ids(&stub) == Some(json!([w1, w2]))
    })
    .await;

    // An invalid annotation is reported as a Warning event on the Service, and nothing is created.
    services
        .create(
            &PostParams::default(),
            &lb_service("bad", &[(ANN_SIZE_SLUG, "lb-huge")]),
        )
        .await
        .unwrap();
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    wait_until("a Warning event for the bad annotation", || async {
        events
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .iter()
            .any(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.reason.as_deref() == Some("SyncLoadBalancerFailed")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("bad")
                    && e.note.as_deref().is_some_and(|n| n.contains(ANN_SIZE_SLUG))
            })
    })
    .await;
    assert_eq!(stub.load_balancers().len(), 1);

    // Deleting the Services deletes the load balancer, then the finalizers go.
    services
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    services
        .delete("bad", &DeleteParams::default())
        .await
        .unwrap();
    wait_until("the load balancer is deleted", || async {
        stub.load_balancers().is_empty()
    })
    .await;
    wait_until("the Services are gone", || async {
        services
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    })
    .await;

    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), controllers)
        .await
        .expect("the controllers stop")
        .unwrap()
        .unwrap();
    server.shutdown().await;

    let logs = String::from_utf8_lossy(&logs.lock()).into_owned();
    // The capture saw the run (API calls, the load balancer's life) ...
    assert!(
        logs.contains("DigitalOcean API call"),
        "no API calls logged"
    );
    assert!(
        logs.contains("created load balancer"),
        "no load balancer creation logged"
    );
    assert!(logs.contains("deleted load balancer"));
    // ... and never the token.
    assert!(
        !logs.contains(TOKEN),
        "the access token appears in the logs"
    );
    assert!(
        !logs.contains(&TOKEN[8..]),
        "part of the access token appears in the logs"
    );
}
