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
use k8s_openapi::api::core::v1::{Event, Node, PersistentVolume, Service};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

/// Differences that are deliberate: (the start of the difference as `compare` words it, the phrase of the
/// README's "Differences from upstream" that documents it).
const ALLOWED: &[(&str, &str)] = &[(
    "event Warning ProvidedNodeIPMismatch ",
    "reported\n  with a Warning event `ProvidedNodeIPMismatch` (upstream only logs it)",
)];

/// A fake cloud with every default: instances are discovered from the nodes.
const PLAIN_CLOUD: &str = "clusterID: differential\n";

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
    let logs = match &config.log_dir {
        Some(dir) => format!("the CCM logs are in {}", dir.display()),
        None => format!(
            "--- upstream log (tail):\n{}\n--- our log (tail):\n{}",
            tail(&upstream_log),
            tail(&ours_log)
        ),
    };
    assert!(
        differences.is_empty(),
        "{} difference(s) from upstream:\n  {}\nupstream's cloud: {}\nour cloud: {}\n{logs}",
        differences.len(),
        differences.join("\n  "),
        serde_json::to_string(&upstream.cloud).unwrap_or_default(),
        serde_json::to_string(&ours.cloud).unwrap_or_default(),
    );
    println!(
        "same as upstream: {} nodes, {} services, cloud {}, events {}",
        ours.nodes.len(),
        ours.services.len(),
        serde_json::to_string(&ours.cloud).unwrap_or_default(),
        serde_json::to_string(&ours.events).unwrap_or_default()
    );
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(60)..].join("\n")
}

/// A node as a kubelet with `--cloud-provider=external` registers it.
struct NodeSpec {
    name: &'static str,
    labels: &'static [(&'static str, &'static str)],
    internal_ip: &'static str,
    pod_cidr: Option<&'static str>,
    /// Whether the node is already initialized: provider ID `fake://<name>`, no uninitialized taint.
    initialized: bool,
    ready: bool,
    provided_ip: Option<&'static str>,
}

impl NodeSpec {
    const fn new(name: &'static str, internal_ip: &'static str) -> NodeSpec {
        NodeSpec {
            name,
            labels: &[],
            internal_ip,
            pod_cidr: None,
            initialized: false,
            ready: true,
            provided_ip: None,
        }
    }

    /// A node the CCM initialized before (provider ID `fake://<name>`, no uninitialized taint).
    const fn initialized(name: &'static str, internal_ip: &'static str) -> NodeSpec {
        NodeSpec {
            initialized: true,
            ..NodeSpec::new(name, internal_ip)
        }
    }

    async fn create(&self, client: &Client) -> Result<(), HarnessError> {
        let mut taints = vec![];
        if !self.initialized {
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
        if self.initialized {
            spec["providerID"] = format!("fake://{}", self.name).into();
        }
        let mut labels =
            serde_json::Map::from_iter([("kubernetes.io/hostname".into(), self.name.into())]);
        labels.extend(
            self.labels
                .iter()
                .map(|(k, v)| (k.to_string(), Value::from(*v))),
        );
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": self.name, "annotations": annotations, "labels": labels},
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
        ready: false,
        ..NodeSpec::initialized("running", "10.0.6.1")
    },
    NodeSpec {
        ready: false,
        ..NodeSpec::initialized("stopped", "10.0.6.2")
    },
    NodeSpec {
        ready: false,
        ..NodeSpec::initialized("gone", "10.0.6.3")
    },
    NodeSpec::initialized("ready-stopped", "10.0.6.4"),
    NodeSpec::initialized("restarted", "10.0.6.5"),
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

/// Load balancers: a plain one (Local traffic policy, deleted at the end), one with a requested IP, one of
/// another class, a ClusterIP Service, and one that becomes a ClusterIP Service after its load balancer
/// exists.
struct LoadBalancers;

/// Creates the Service `name` of the scenarios' namespace: one HTTP port, and `spec` on top.
async fn create_service(client: &Client, name: &str, spec: Value) -> Result<(), HarnessError> {
    let mut full =
        json!({"ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]});
    if let (Some(full), Some(extra)) = (full.as_object_mut(), spec.as_object()) {
        full.extend(extra.clone());
    }
    let service: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": full,
    }))
    .expect("a valid Service");
    Api::<Service>::namespaced(client.clone(), NAMESPACE)
        .create(&PostParams::default(), &service)
        .await
        .map(drop)
        .map_err(|e| HarnessError::kube(format!("creating service {name}"), e))
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
        PLAIN_CLOUD.to_string()
    }

    async fn before(&self, client: Client) -> Result<(), HarnessError> {
        let hosts = [
            NodeSpec::initialized("host-1", "10.0.7.1"),
            NodeSpec::initialized("host-2", "10.0.7.2"),
        ];
        create_nodes(&client, &hosts).await
    }

    async fn during(&self, client: Client) -> Result<(), HarnessError> {
        let services: Api<Service> = Api::namespaced(client.clone(), NAMESPACE);
        create_service(
            &client,
            "plain",
            json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local"}),
        )
        .await?;
        wait_ingress(&services, "plain").await?;
        create_service(
            &client,
            "becomes-cluster-ip",
            json!({"type": "LoadBalancer"}),
        )
        .await?;
        wait_ingress(&services, "becomes-cluster-ip").await?;
        create_service(
            &client,
            "requested-ip",
            json!({"type": "LoadBalancer", "loadBalancerIP": "198.51.100.77"}),
        )
        .await?;
        create_service(
            &client,
            "other-class",
            json!({"type": "LoadBalancer", "loadBalancerClass": "example.com/other"}),
        )
        .await?;
        create_service(&client, "cluster-ip", json!({"type": "ClusterIP"})).await?;
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
        services
            .delete("plain", &Default::default())
            .await
            .map_err(|e| HarnessError::kube("deleting service plain", e))?;
        wait_for(
            "the load balancers of plain and becomes-cluster-ip to go",
            TIMEOUT,
            || async {
                let service = services
                    .get("becomes-cluster-ip")
                    .await
                    .map_err(|e| HarnessError::kube("reading service becomes-cluster-ip", e))?;
                let plain_gone = services
                    .get_opt("plain")
                    .await
                    .map_err(|e| HarnessError::kube("reading service plain", e))?
                    .is_none();
                let gone =
                    plain_gone && !has_lb_finalizer(&service) && ingress(&service).is_empty();
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

/// Initialized nodes: the beta/GA label pairs reconciled, and the periodic address sync (a node whose
/// instance moved, one whose cloud addresses come in another order, one with a provided node IP).
struct InitializedNodes;

const INITIALIZED_NODES: &[NodeSpec] = &[
    NodeSpec {
        labels: &[
            (ZONE_BETA_LABEL, "fake-region-1a"),
            (REGION_BETA_LABEL, "fake-region-1"),
            (INSTANCE_TYPE_BETA_LABEL, "fake.small"),
        ],
        ..NodeSpec::initialized("beta-only", "10.0.8.1")
    },
    NodeSpec {
        labels: &[
            (ZONE_LABEL, "fake-region-1a"),
            (REGION_LABEL, "fake-region-1"),
            (INSTANCE_TYPE_LABEL, "fake.small"),
        ],
        ..NodeSpec::initialized("ga-only", "10.0.8.2")
    },
    NodeSpec {
        labels: &[
            (ZONE_BETA_LABEL, "fake-region-1a"),
            (ZONE_LABEL, "fake-region-1b"),
        ],
        ..NodeSpec::initialized("mismatch", "10.0.8.3")
    },
    NodeSpec::initialized("moved", "10.0.8.4"),
    NodeSpec::initialized("reordered", "10.0.8.5"),
    NodeSpec {
        provided_ip: Some("10.0.8.7"),
        ..NodeSpec::initialized("provided", "10.0.8.6")
    },
];

impl Scenario for InitializedNodes {
    fn cloud_config(&self) -> String {
        r#"
clusterID: differential
autoDiscover: false
instances:
  - {name: beta-only, zone: fake-region-1a, addresses: [{type: InternalIP, address: 10.0.8.1}]}
  - {name: ga-only, zone: fake-region-1a, addresses: [{type: InternalIP, address: 10.0.8.2}]}
  - {name: mismatch, zone: fake-region-1a, addresses: [{type: InternalIP, address: 10.0.8.3}]}
  - name: moved
    addresses: [{type: InternalIP, address: 10.0.9.4}, {type: ExternalIP, address: 203.0.113.4}]
  - name: reordered
    addresses: [{type: Hostname, address: reordered}, {type: InternalIP, address: 10.0.8.5}]
  - name: provided
    addresses:
      - {type: InternalIP, address: 10.0.8.6}
      - {type: InternalIP, address: 10.0.8.7}
      - {type: ExternalIP, address: 203.0.113.6}
"#
        .to_string()
    }

    async fn before(&self, client: Client) -> Result<(), HarnessError> {
        create_nodes(&client, INITIALIZED_NODES).await
    }

    async fn during(&self, client: Client) -> Result<(), HarnessError> {
        wait_nodes(
            &client,
            "the address sync and label reconciliation",
            |nodes| {
                let moved = node(nodes, "moved").is_some_and(|n| {
                    n.status
                        .as_ref()
                        .and_then(|s| s.addresses.as_ref())
                        .is_some_and(|a| a.iter().any(|a| a.address == "203.0.113.4"))
                });
                let copied =
                    node(nodes, "beta-only").is_some_and(|n| labels(n).contains_key(ZONE_LABEL));
                moved && copied
            },
        )
        .await
    }
}

#[tokio::test]
#[ignore = "needs a real API server and the upstream CCM: hack/upstream/test.sh"]
async fn initialized_nodes() {
    differential(InitializedNodes).await;
}

/// Load-balancer updates: the backend set follows node exclusions (label; and the autoscaler's taint, which
/// upstream ignores since KEP-3458) down to no backends at all, and only the Service changes upstream reacts to re-ensure the load balancer.
struct LoadBalancerUpdates;

/// Waits until `object` has `count` occurrences of events with `reason`.
async fn wait_events(
    client: &Client,
    object: &str,
    reason: &str,
    count: i32,
) -> Result<(), HarnessError> {
    let events: Api<Event> = Api::namespaced(client.clone(), NAMESPACE);
    wait_for(
        &format!("{count} {reason} event(s) of {object}"),
        TIMEOUT,
        || async {
            let seen: i32 = events
                .list(&ListParams::default())
                .await
                .map_err(|e| HarnessError::kube("listing events", e))?
                .items
                .iter()
                .filter(|e| {
                    e.reason.as_deref() == Some(reason)
                        && e.involved_object.name.as_deref() == Some(object)
                })
                .map(|e| e.count.unwrap_or(1))
                .sum();
            Ok(Check::when(seen >= count, (), || format!("{seen} so far")))
        },
    )
    .await
}

async fn patch<K>(api: &Api<K>, name: &str, patch: Value) -> Result<(), HarnessError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(drop)
        .map_err(|e| HarnessError::kube(format!("patching {name}"), e))
}

impl Scenario for LoadBalancerUpdates {
    fn cloud_config(&self) -> String {
        PLAIN_CLOUD.to_string()
    }

    async fn before(&self, client: Client) -> Result<(), HarnessError> {
        let hosts = [
            NodeSpec::initialized("h1", "10.0.10.1"),
            NodeSpec::initialized("h2", "10.0.10.2"),
            NodeSpec {
                ready: false,
                ..NodeSpec::initialized("h3", "10.0.10.3")
            },
        ];
        create_nodes(&client, &hosts).await
    }

    async fn during(&self, client: Client) -> Result<(), HarnessError> {
        let services: Api<Service> = Api::namespaced(client.clone(), NAMESPACE);
        let nodes: Api<Node> = Api::all(client.clone());
        create_service(&client, "web", json!({"type": "LoadBalancer"})).await?;
        wait_events(&client, "web", "EnsuredLoadBalancer", 1).await?;
        let exclude = json!({"metadata": {"labels": {EXCLUDE_FROM_LB_LABEL: "true"}}});
        patch(&nodes, "h3", exclude.clone()).await?;
        wait_events(&client, "web", "UpdatedLoadBalancer", 1).await?;
        let to_be_deleted = json!({"spec": {"taints": [{"key": "ToBeDeletedByClusterAutoscaler", "value": "1", "effect": "NoSchedule"}]}});
        patch(&nodes, "h2", to_be_deleted).await?;
        // Whether that taint changes the backends is what is compared: nothing to wait for.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let new_target_port = json!({"spec": {"ports": [{"name": "http", "port": 80, "targetPort": 9090, "protocol": "TCP"}]}});
        patch(&services, "web", new_target_port).await?;
        wait_events(&client, "web", "EnsuredLoadBalancer", 2).await?;
        patch(
            &services,
            "web",
            json!({"metadata": {"labels": {"team": "a"}}}),
        )
        .await?;
        patch(
            &services,
            "web",
            json!({"metadata": {"annotations": {"example.com/note": "b"}}}),
        )
        .await?;
        wait_events(&client, "web", "EnsuredLoadBalancer", 3).await?;
        patch(&nodes, "h1", exclude).await?;
        wait_events(&client, "web", "UnAvailableLoadBalancer", 1).await
    }
}

#[tokio::test]
#[ignore = "needs a real API server and the upstream CCM: hack/upstream/test.sh"]
async fn load_balancer_updates() {
    differential(LoadBalancerUpdates).await;
}

/// Routes: one per pod CIDR of every node, the NetworkUnavailable condition, and the route of a deleted
/// node removed.
struct Routes;

impl Scenario for Routes {
    fn cloud_config(&self) -> String {
        PLAIN_CLOUD.to_string()
    }

    async fn before(&self, client: Client) -> Result<(), HarnessError> {
        let nodes = [
            NodeSpec {
                pod_cidr: Some("10.244.11.0/24"),
                ..NodeSpec::initialized("r1", "10.0.11.1")
            },
            NodeSpec {
                pod_cidr: Some("10.244.12.0/24"),
                ..NodeSpec::initialized("r2", "10.0.11.2")
            },
            NodeSpec {
                pod_cidr: Some("10.244.13.0/24"),
                ..NodeSpec::initialized("r3", "10.0.11.3")
            },
            NodeSpec {
                pod_cidr: Some("192.168.50.0/24"),
                ..NodeSpec::initialized("outside", "10.0.11.4")
            },
        ];
        create_nodes(&client, &nodes).await
    }

    async fn during(&self, client: Client) -> Result<(), HarnessError> {
        let routed =
            |n: &Node| condition(n, "NetworkUnavailable").is_some_and(|c| c.status == "False");
        wait_nodes(&client, "routes for r1, r2 and r3", |nodes| {
            ["r1", "r2", "r3"]
                .iter()
                .all(|name| node(nodes, name).is_some_and(routed))
        })
        .await?;
        Api::<Node>::all(client.clone())
            .delete("r3", &Default::default())
            .await
            .map_err(|e| HarnessError::kube("deleting node r3", e))?;
        // The route of r3 goes with the next reconciliation (every second here).
        tokio::time::sleep(Duration::from_secs(3)).await;
        Ok(())
    }
}

#[tokio::test]
#[ignore = "needs a real API server and the upstream CCM: hack/upstream/test.sh"]
async fn routes() {
    differential(Routes).await;
}

/// Cloud failures: the cloud answers every instance lookup and every load-balancer ensure with an error. A
/// node stays uninitialized, a NotReady node whose instance is gone is kept (its existence is unknown), and a
/// Service gets no ingress; the events and retries are compared.
struct CloudFailures;

impl Scenario for CloudFailures {
    fn cloud_config(&self) -> String {
        // Ours looks instances up in bulk (instance_metadata_bulk, instance_states), upstream one by one.
        r#"
clusterID: differential
instances:
  - {name: gone, state: terminated}
faults:
  instance_metadata: {errorRate: 1.0}
  instance_metadata_bulk: {errorRate: 1.0}
  instance_exists: {errorRate: 1.0}
  instance_states: {errorRate: 1.0}
  ensure_load_balancer: {errorRate: 1.0}
"#
        .to_string()
    }

    async fn before(&self, client: Client) -> Result<(), HarnessError> {
        let nodes = [
            NodeSpec::new("uninitialized", "10.0.12.1"),
            NodeSpec {
                ready: false,
                ..NodeSpec::initialized("gone", "10.0.12.2")
            },
        ];
        create_nodes(&client, &nodes).await
    }

    async fn during(&self, client: Client) -> Result<(), HarnessError> {
        create_service(&client, "lb", json!({"type": "LoadBalancer"})).await?;
        // Upstream retries a failed Service after 5 s, then 10 s: two failures, and the snapshot comes
        // well before the third.
        wait_events(&client, "lb", "SyncLoadBalancerFailed", 2).await
    }
}

#[tokio::test]
#[ignore = "needs a real API server and the upstream CCM: hack/upstream/test.sh"]
async fn cloud_failures() {
    differential(CloudFailures).await;
}

/// A failing load-balancer update: a node leaves the backends but the cloud refuses the update, so the
/// load balancer keeps every backend it had.
struct LoadBalancerUpdateFailures;

impl Scenario for LoadBalancerUpdateFailures {
    fn cloud_config(&self) -> String {
        format!("{PLAIN_CLOUD}faults:\n  update_load_balancer: {{errorRate: 1.0}}\n")
    }

    async fn before(&self, client: Client) -> Result<(), HarnessError> {
        let hosts = [
            NodeSpec::initialized("u1", "10.0.13.1"),
            NodeSpec::initialized("u2", "10.0.13.2"),
        ];
        create_nodes(&client, &hosts).await
    }

    async fn during(&self, client: Client) -> Result<(), HarnessError> {
        create_service(&client, "lb", json!({"type": "LoadBalancer"})).await?;
        wait_events(&client, "lb", "EnsuredLoadBalancer", 1).await?;
        let exclude = json!({"metadata": {"labels": {EXCLUDE_FROM_LB_LABEL: "true"}}});
        patch(&Api::<Node>::all(client.clone()), "u2", exclude).await?;
        wait_events(&client, "lb", "UpdateLoadBalancerFailed", 1).await
    }
}

#[tokio::test]
#[ignore = "needs a real API server and the upstream CCM: hack/upstream/test.sh"]
async fn load_balancer_update_failures() {
    differential(LoadBalancerUpdateFailures).await;
}

/// Volumes: k8s.io/cloud-provider has no persistent-volume labelling controller, so with the default
/// `--controllers` a volume of the cloud's CSI driver stays as it was created.
struct Volumes;

impl Scenario for Volumes {
    fn cloud_config(&self) -> String {
        PLAIN_CLOUD.to_string()
    }

    async fn before(&self, client: Client) -> Result<(), HarnessError> {
        let pv: PersistentVolume = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": "data"},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                     "csi": {"driver": "fake.csi.cloud", "volumeHandle": "vol-1"}},
        }))
        .expect("a valid PersistentVolume");
        Api::<PersistentVolume>::all(client)
            .create(&PostParams::default(), &pv)
            .await
            .map(drop)
            .map_err(|e| HarnessError::kube("creating persistent volume data", e))
    }

    async fn during(&self, client: Client) -> Result<(), HarnessError> {
        // Nothing to wait for: the settle time after this gives a labeller every chance.
        drop(client);
        Ok(())
    }
}

#[tokio::test]
#[ignore = "needs a real API server and the upstream CCM: hack/upstream/test.sh"]
async fn volumes() {
    differential(Volumes).await;
}

/// Initialization on real kubelets (`realkube up --nodes 2`, `DIFF_REAL_NODES_DIR`): every Node is
/// deleted before each run and the kubelets started again, so each CCM finds them as they register,
/// tainted and with their provided node IP. The pod CIDRs (node-ipam gives them anew each time) are not
/// compared; the routes' targets are.
struct RealNodeInitialization {
    cluster: ccm_e2e::real_nodes::RealCluster,
    count: usize,
}

impl Scenario for RealNodeInitialization {
    fn cloud_config(&self) -> String {
        ccm_e2e::real_nodes::cloud_config(self.count, None)
    }

    async fn before(&self, client: Client) -> Result<(), HarnessError> {
        for index in 1..=self.count {
            let name = ccm_e2e::real_nodes::node_name(index);
            self.cluster.stop_kubelet(&name).await?;
            self.cluster.start_kubelet(&name).await?;
        }
        let count = self.count;
        wait_nodes(&client, "the kubelets registered again", |nodes| {
            nodes.len() == count && nodes.iter().all(|n| has_taint(n, UNINITIALIZED_TAINT))
        })
        .await
    }

    async fn during(&self, client: Client) -> Result<(), HarnessError> {
        wait_nodes(&client, "every real node initialized", |nodes| {
            nodes.iter().all(|n| {
                provider_id(n).is_some() && !has_taint(n, UNINITIALIZED_TAINT) && is_ready(n)
            })
        })
        .await
    }

    fn normalize(&self, snapshot: &mut differential::Snapshot) {
        Self::drop_pod_cidrs(snapshot);
    }
}

impl RealNodeInitialization {
    /// Drops the pod CIDRs node-ipam gives anew each run, and the CIDRs from the routes' keys.
    fn drop_pod_cidrs(snapshot: &mut differential::Snapshot) {
        for node in snapshot.nodes.values_mut() {
            if let Some(spec) = node.get_mut("spec").and_then(Value::as_object_mut) {
                spec.remove("podCIDR");
                spec.remove("podCIDRs");
            }
        }
        snapshot.cloud = std::mem::take(&mut snapshot.cloud)
            .into_iter()
            .map(|(key, value)| match key.strip_prefix("route ") {
                Some(route) => (
                    format!("route {}", route.split(' ').next().unwrap_or(route)),
                    value,
                ),
                None => (key, value),
            })
            .collect();
    }
}

/// The lifecycle on real kubelets (`realkube up --nodes 2`, `DIFF_REAL_NODES_DIR`): the kubelets register
/// afresh, become Ready and are stopped before each run; node-1's machine is gone (terminated) and node-2's
/// stopped. Each CCM deletes node-1 (uninitialized: its machine never answered) and taints node-2 shut down
/// once it is NotReady; the run ends when kube-controller-manager's node controller has also marked node-2's
/// status Unknown, so both runs are compared in the same settled state. That controller's own taints
/// (`node.kubernetes.io/not-ready` and `unreachable`, added and lifted as its zone's state changes) are not
/// the CCM's and are left out.
/// The prefix of the taints kube-controller-manager's node controller manages.
const NODE_CONTROLLER_TAINTS: &str = "node.kubernetes.io/";

struct RealNodeLifecycle {
    cluster: ccm_e2e::real_nodes::RealCluster,
}

impl Scenario for RealNodeLifecycle {
    fn cloud_config(&self) -> String {
        let instances = [(1, "terminated"), (2, "stopped")]
            .into_iter()
            .map(|(index, state)| {
                let mut instance = ccm_e2e::real_nodes::instance(index, None);
                instance["state"] = json!(state);
                instance
            })
            .collect();
        ccm_e2e::real_nodes::cloud_config_of(instances)
    }

    async fn before(&self, client: Client) -> Result<(), HarnessError> {
        for index in 1..=2 {
            let name = ccm_e2e::real_nodes::node_name(index);
            self.cluster.stop_kubelet(&name).await?;
            self.cluster.start_kubelet(&name).await?;
        }
        wait_nodes(
            &client,
            "the kubelets registered again and Ready",
            |nodes| {
                nodes.len() == 2
                    && nodes
                        .iter()
                        .all(|n| has_taint(n, UNINITIALIZED_TAINT) && is_ready(n))
            },
        )
        .await?;
        for index in 1..=2 {
            let name = ccm_e2e::real_nodes::node_name(index);
            self.cluster.stop_kubelet(&name).await?;
        }
        Ok(())
    }

    async fn during(&self, client: Client) -> Result<(), HarnessError> {
        wait_nodes(
            &client,
            "node-1 deleted, node-2 tainted shut down and its status Unknown",
            |nodes| {
                node(nodes, "node-1").is_none()
                    && node(nodes, "node-2").is_some_and(|n| {
                        has_taint(n, SHUTDOWN_TAINT)
                            && condition(n, "Ready").is_some_and(|c| c.status == "Unknown")
                    })
            },
        )
        .await
    }

    fn normalize(&self, snapshot: &mut differential::Snapshot) {
        RealNodeInitialization::drop_pod_cidrs(snapshot);
        for node in snapshot.nodes.values_mut() {
            if let Some(taints) = node
                .pointer_mut("/spec/taints")
                .and_then(Value::as_array_mut)
            {
                taints.retain(|t| {
                    !t["key"]
                        .as_str()
                        .is_some_and(|key| key.starts_with(NODE_CONTROLLER_TAINTS))
                });
            }
        }
    }
}

#[tokio::test]
#[ignore = "needs real nodes and the upstream CCM: hack/realkube/test-nodes.sh"]
async fn real_node_lifecycle() {
    let dir = std::env::var("DIFF_REAL_NODES_DIR")
        .expect("DIFF_REAL_NODES_DIR names a `realkube up --nodes 2` directory (hack/realkube/test-nodes.sh sets it)");
    let cluster =
        ccm_e2e::real_nodes::RealCluster::open(dir).expect("a realkube cluster with nodes");
    differential(RealNodeLifecycle { cluster }).await;
}

#[tokio::test]
#[ignore = "needs real nodes and the upstream CCM: hack/realkube/test-nodes.sh"]
async fn real_node_initialization() {
    let dir = std::env::var("DIFF_REAL_NODES_DIR")
        .expect("DIFF_REAL_NODES_DIR names a `realkube up --nodes 2` directory (hack/realkube/test-nodes.sh sets it)");
    let cluster =
        ccm_e2e::real_nodes::RealCluster::open(dir).expect("a realkube cluster with nodes");
    differential(RealNodeInitialization { cluster, count: 2 }).await;
}
