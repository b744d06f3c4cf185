//! The differential controller suite: each scenario runs once with k8s.io/cloud-provider's controllers
//! (the Go peer of `hack/upstream/cloud-provider`) and once with ours, against the same real API server
//! and the same fake cloud, and the Nodes, Services and Events they leave must be the same
//! (see `ccm_e2e::differential`). A difference fails the scenario unless it is listed in [`ALLOWED`],
//! each entry pointing at its line in the README's "Differences from upstream".
//!
//! The scenarios need the cluster and the upstream binary, so they are ignored in a plain `cargo test`;
//! `hack/upstream/test.sh` (the last step of `make test`) runs them one at a time.

use std::time::Duration;

use ccm_e2e::differential::{self, DiffConfig, Implementation, NAMESPACE, Scenario};
use ccm_e2e::well_known::*;
use ccm_e2e::{Check, HarnessError, wait_for};
use k8s_openapi::api::core::v1::{Node, Service};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

/// Differences that are deliberate: (the start of the difference as `compare` words it, the phrase of the
/// README's "Differences from upstream" that documents it).
const ALLOWED: &[(&str, &str)] = &[(
    "event Warning ProvidedNodeIPMismatch ",
    "reported\n  with a Warning event `ProvidedNodeIPMismatch` (upstream only logs it)",
)];

/// How long a scenario may take to reach its end state.
const TIMEOUT: Duration = Duration::from_secs(60);

async fn differential(scenario: impl Scenario) {
    let config = DiffConfig::from_env().expect("configuration");
    let readme = std::fs::read_to_string(ccm_e2e::ccm::workspace_root().join("README.md"))
        .expect("reading README.md");
    for (_, phrase) in ALLOWED {
        assert!(
            readme.contains(phrase),
            "README.md does not document {phrase:?}"
        );
    }
    let (upstream, upstream_log) = differential::run(&config, Implementation::Upstream, &scenario)
        .await
        .unwrap_or_else(|e| panic!("upstream run: {e}"));
    let (ours, ours_log) = differential::run(&config, Implementation::Ours, &scenario)
        .await
        .unwrap_or_else(|e| panic!("our run: {e}"));
    let differences: Vec<String> = differential::compare(&upstream, &ours)
        .into_iter()
        .filter(|d| !ALLOWED.iter().any(|(prefix, _)| d.starts_with(prefix)))
        .collect();
    assert!(
        differences.is_empty(),
        "{} difference(s) from upstream:\n  {}\n--- upstream log (tail):\n{}\n--- our log (tail):\n{}",
        differences.len(),
        differences.join("\n  "),
        tail(&upstream_log),
        tail(&ours_log)
    );
    println!(
        "same as upstream: {} nodes, {} services, events {:?}",
        ours.nodes.len(),
        ours.services.len(),
        ours.events
    );
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(60)..].join("\n")
}

/// A node as a kubelet with `--cloud-provider=external` registers it.
struct NodeSpec {
    name: &'static str,
    internal_ip: &'static str,
    pod_cidr: Option<&'static str>,
    provider_id: Option<&'static str>,
    uninitialized: bool,
    ready: bool,
    provided_ip: Option<&'static str>,
}

impl NodeSpec {
    const fn new(name: &'static str, internal_ip: &'static str) -> NodeSpec {
        NodeSpec {
            name,
            internal_ip,
            pod_cidr: None,
            provider_id: None,
            uninitialized: true,
            ready: true,
            provided_ip: None,
        }
    }

    async fn create(&self, client: &Client) -> Result<(), HarnessError> {
        let mut taints = vec![];
        if self.uninitialized {
            taints
                .push(json!({"key": UNINITIALIZED_TAINT, "value": "true", "effect": "NoSchedule"}));
        }
        let mut annotations = serde_json::Map::new();
        if let Some(ip) = self.provided_ip {
            annotations.insert(PROVIDED_NODE_IP_ANNOTATION.into(), ip.into());
        }
        let mut spec = json!({"taints": taints});
        if let Some(cidr) = self.pod_cidr {
            spec["podCIDR"] = cidr.into();
            spec["podCIDRs"] = json!([cidr]);
        }
        if let Some(id) = self.provider_id {
            spec["providerID"] = id.into();
        }
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": self.name, "annotations": annotations,
                         "labels": {"kubernetes.io/hostname": self.name}},
            "spec": spec,
        }))
        .expect("a valid Node");
        let nodes: Api<Node> = Api::all(client.clone());
        nodes
            .create(&PostParams::default(), &node)
            .await
            .map_err(|e| HarnessError::kube(format!("creating node {}", self.name), e))?;
        let (status, reason) = if self.ready {
            ("True", "KubeletReady")
        } else {
            ("False", "KubeletNotReady")
        };
        let status = json!({"status": {
            "addresses": [{"type": "InternalIP", "address": self.internal_ip},
                          {"type": "Hostname", "address": self.name}],
            "conditions": [{"type": "Ready", "status": status, "reason": reason, "message": reason,
                            "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                            "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        }});
        nodes
            .patch_status(self.name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .map_err(|e| HarnessError::kube(format!("writing node {}'s status", self.name), e))?;
        Ok(())
    }
}

async fn create_nodes(client: &Client, specs: &[NodeSpec]) -> Result<(), HarnessError> {
    for spec in specs {
        spec.create(client).await?;
    }
    Ok(())
}

/// Waits until `done` holds for the list of nodes.
async fn wait_nodes(
    client: &Client,
    what: &str,
    done: impl Fn(&[Node]) -> bool,
) -> Result<(), HarnessError> {
    let nodes: Api<Node> = Api::all(client.clone());
    wait_for(what, TIMEOUT, || async {
        let list = nodes
            .list(&ListParams::default())
            .await
            .map_err(|e| HarnessError::kube("listing nodes", e))?
            .items;
        let observed = || {
            list.iter()
                .map(|n| format!("{} taints {:?}", node_name(n), taint_keys(n)))
                .collect::<Vec<_>>()
                .join("; ")
        };
        Ok(Check::when(done(&list), (), observed))
    })
    .await
}

fn node<'a>(nodes: &'a [Node], name: &str) -> Option<&'a Node> {
    nodes.iter().find(|n| node_name(n) == name)
}

/// Initialization: an explicit instance (type, zone, addresses, extra labels), auto-discovered ones with and
/// without a pod CIDR, a node whose provided IP is the cloud's, one whose provided IP the cloud does not
/// have, one whose instance is stopped, and a NotReady one whose instance is gone.
struct NodeInitialization;

const INIT_NODES: &[NodeSpec] = &[
    NodeSpec {
        pod_cidr: Some("10.244.1.0/24"),
        ..NodeSpec::new("explicit", "10.0.1.1")
    },
    NodeSpec {
        pod_cidr: Some("10.244.2.0/24"),
        ..NodeSpec::new("discovered", "10.0.2.1")
    },
    NodeSpec::new("discovered-no-cidr", "10.0.2.2"),
    NodeSpec {
        provided_ip: Some("10.0.3.1"),
        ..NodeSpec::new("provided-ip", "10.0.3.1")
    },
    NodeSpec {
        provided_ip: Some("10.9.9.9"),
        ..NodeSpec::new("provided-ip-unknown", "10.0.3.2")
    },
    NodeSpec::new("stopped", "10.0.4.1"),
    NodeSpec {
        ready: false,
        ..NodeSpec::new("terminated", "10.0.5.1")
    },
];

impl Scenario for NodeInitialization {
    fn cloud_config(&self) -> String {
        r#"
clusterID: differential
discoveredExternalIPs: true
instances:
  - name: explicit
    id: i-explicit
    type: fake.large
    zone: fake-region-1b
    addresses:
      - {type: InternalIP, address: 10.0.1.1}
      - {type: ExternalIP, address: 203.0.113.1}
      - {type: Hostname, address: explicit}
    labels: {example.com/rack: r1}
  - {name: stopped, state: stopped, addresses: [{type: InternalIP, address: 10.0.4.1}]}
  - {name: terminated, state: terminated}
"#
        .to_string()
    }

    async fn before(&self, _client: Client) -> Result<(), HarnessError> {
        Ok(())
    }

    async fn during(&self, client: Client) -> Result<(), HarnessError> {
        create_nodes(&client, INIT_NODES).await?;
        wait_nodes(&client, "initialization", |nodes| {
            let initialized =
                |name: &str| node(nodes, name).is_some_and(|n| !has_taint(n, UNINITIALIZED_TAINT));
            [
                "explicit",
                "discovered",
                "discovered-no-cidr",
                "provided-ip",
                "stopped",
            ]
            .iter()
            .all(|n| initialized(n))
                && node(nodes, "terminated").is_none()
        })
        .await
    }
}

#[tokio::test]
#[ignore = "needs a real API server and the upstream CCM: hack/upstream/test.sh"]
async fn node_initialization() {
    differential(NodeInitialization).await;
}

/// The lifecycle pass over initialized nodes: NotReady ones whose instance runs, is stopped or is gone, a
/// Ready one whose instance is stopped, and a Ready one that still has the shutdown taint.
struct NodeLifecycle;

const LIFECYCLE_NODES: &[NodeSpec] = &[
    NodeSpec {
        provider_id: Some("fake://running"),
        uninitialized: false,
        ready: false,
        ..NodeSpec::new("running", "10.0.6.1")
    },
    NodeSpec {
        provider_id: Some("fake://stopped"),
        uninitialized: false,
        ready: false,
        ..NodeSpec::new("stopped", "10.0.6.2")
    },
    NodeSpec {
        provider_id: Some("fake://gone"),
        uninitialized: false,
        ready: false,
        ..NodeSpec::new("gone", "10.0.6.3")
    },
    NodeSpec {
        provider_id: Some("fake://ready-stopped"),
        uninitialized: false,
        ..NodeSpec::new("ready-stopped", "10.0.6.4")
    },
    NodeSpec {
        provider_id: Some("fake://restarted"),
        uninitialized: false,
        ..NodeSpec::new("restarted", "10.0.6.5")
    },
];

impl Scenario for NodeLifecycle {
    fn cloud_config(&self) -> String {
        r#"
clusterID: differential
autoDiscover: false
instances:
  - {name: running, zone: fake-region-1a}
  - {name: stopped, state: stopped, zone: fake-region-1a}
  - {name: gone, state: terminated}
  - {name: ready-stopped, state: stopped, zone: fake-region-1a}
  - {name: restarted, zone: fake-region-1a}
"#
        .to_string()
    }

    async fn before(&self, client: Client) -> Result<(), HarnessError> {
        create_nodes(&client, LIFECYCLE_NODES).await?;
        let shutdown =
            json!({"spec": {"taints": [{"key": SHUTDOWN_TAINT, "effect": "NoSchedule"}]}});
        Api::<Node>::all(client)
            .patch(
                "restarted",
                &PatchParams::default(),
                &Patch::Merge(&shutdown),
            )
            .await
            .map_err(|e| HarnessError::kube("tainting node restarted", e))?;
        Ok(())
    }

    async fn during(&self, client: Client) -> Result<(), HarnessError> {
        wait_nodes(&client, "the lifecycle pass", |nodes| {
            node(nodes, "gone").is_none()
                && node(nodes, "stopped").is_some_and(|n| has_taint(n, SHUTDOWN_TAINT))
                && node(nodes, "restarted").is_some_and(|n| !has_taint(n, SHUTDOWN_TAINT))
        })
        .await
    }
}

#[tokio::test]
#[ignore = "needs a real API server and the upstream CCM: hack/upstream/test.sh"]
async fn node_lifecycle() {
    differential(NodeLifecycle).await;
}

/// Load balancers: a plain one (Local traffic policy), one with a requested IP, one of another class, a
/// ClusterIP Service, and one that becomes a ClusterIP Service after its load balancer exists.
struct LoadBalancers;

fn service(name: &str, spec: Value) -> Service {
    let mut full =
        json!({"ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]});
    if let (Some(full), Some(extra)) = (full.as_object_mut(), spec.as_object()) {
        full.extend(extra.clone());
    }
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": full,
    }))
    .expect("a valid Service")
}

async fn wait_ingress(services: &Api<Service>, name: &str) -> Result<(), HarnessError> {
    wait_for(&format!("service {name}'s ingress"), TIMEOUT, || async {
        let service = services
            .get(name)
            .await
            .map_err(|e| HarnessError::kube(format!("reading service {name}"), e))?;
        let ingress = ingress(&service);
        Ok(Check::when(!ingress.is_empty(), (), || {
            format!("ingress {ingress:?}")
        }))
    })
    .await
}

impl Scenario for LoadBalancers {
    fn cloud_config(&self) -> String {
        "clusterID: differential\n".to_string()
    }

    async fn before(&self, client: Client) -> Result<(), HarnessError> {
        let hosts = [
            NodeSpec {
                provider_id: Some("fake://host-1"),
                uninitialized: false,
                ..NodeSpec::new("host-1", "10.0.7.1")
            },
            NodeSpec {
                provider_id: Some("fake://host-2"),
                uninitialized: false,
                ..NodeSpec::new("host-2", "10.0.7.2")
            },
        ];
        create_nodes(&client, &hosts).await
    }

    async fn during(&self, client: Client) -> Result<(), HarnessError> {
        let services: Api<Service> = Api::namespaced(client, NAMESPACE);
        let create = |s: Service| {
            let services = services.clone();
            async move {
                services
                    .create(&PostParams::default(), &s)
                    .await
                    .map_err(|e| HarnessError::kube("creating a service", e))
            }
        };
        create(service(
            "plain",
            json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local"}),
        ))
        .await?;
        wait_ingress(&services, "plain").await?;
        create(service(
            "becomes-cluster-ip",
            json!({"type": "LoadBalancer"}),
        ))
        .await?;
        wait_ingress(&services, "becomes-cluster-ip").await?;
        create(service(
            "requested-ip",
            json!({"type": "LoadBalancer", "loadBalancerIP": "198.51.100.77"}),
        ))
        .await?;
        create(service(
            "other-class",
            json!({"type": "LoadBalancer", "loadBalancerClass": "example.com/other"}),
        ))
        .await?;
        create(service("cluster-ip", json!({"type": "ClusterIP"}))).await?;
        wait_ingress(&services, "requested-ip").await?;
        let to_cluster_ip = json!({"spec": {"type": "ClusterIP", "externalTrafficPolicy": null}});
        services
            .patch(
                "becomes-cluster-ip",
                &PatchParams::default(),
                &Patch::Merge(&to_cluster_ip),
            )
            .await
            .map_err(|e| HarnessError::kube("changing a service to ClusterIP", e))?;
        wait_for(
            "the load balancer of becomes-cluster-ip to go",
            TIMEOUT,
            || async {
                let service = services
                    .get("becomes-cluster-ip")
                    .await
                    .map_err(|e| HarnessError::kube("reading service becomes-cluster-ip", e))?;
                let gone = !has_lb_finalizer(&service) && ingress(&service).is_empty();
                Ok(Check::when(gone, (), || {
                    format!(
                        "finalizer {}, ingress {:?}",
                        has_lb_finalizer(&service),
                        ingress(&service)
                    )
                }))
            },
        )
        .await
    }
}

#[tokio::test]
#[ignore = "needs a real API server and the upstream CCM: hack/upstream/test.sh"]
async fn load_balancers() {
    differential(LoadBalancers).await;
}
