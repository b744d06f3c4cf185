//! The firewall controller on the controller manager's real run path (`run_with_provider_controllers`),
//! the in-memory API server and the DigitalOcean API stub: the public-access firewall follows the
//! Services, an existing one is adopted without a change, drift and out-of-band deletion are repaired,
//! a rate-limited call waits for `Retry-After`, and an unreadable annotation changes nothing.

mod support;

use std::sync::Arc;
use std::time::Duration;

use cloud_provider::CloudProvider;
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use provider_digitalocean::annotations::{ANN_LOAD_BALANCER_ID, ANN_TYPE};
use provider_digitalocean::firewall::FirewallController;
use provider_digitalocean::firewall::metrics::FirewallMetrics;
use provider_digitalocean::firewall::rules::ANN_FIREWALL_MANAGED;
use provider_digitalocean::stub::{DoStub, Fault};
use provider_digitalocean::{DoClient, LbType, PublicAccessFirewall};
use serde_json::{Value, json};
use support::wait_until;
use test_apiserver::TestApiServer;
use tokio_util::sync::CancellationToken;

const NAME: &str = "k8s-c1-public-access";
const TAG: &str = "k8s:c1";

/// The stub, an API server and the firewall controller running until dropped.
struct Harness {
    stub: DoStub,
    metrics: FirewallMetrics,
    services: Api<Service>,
    shutdown: CancellationToken,
    _server: TestApiServer,
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl Harness {
    /// A stub prepared by `seed` (before the controller starts), Services `initial` in the cluster, and
    /// the controller refreshing every `resync`.
    async fn start(seed: impl FnOnce(&DoStub), initial: Vec<Service>, resync: Duration) -> Self {
        let stub = DoStub::start().await;
        seed(&stub);
        let server = TestApiServer::builder().start().await.unwrap();
        let client = server.client().unwrap();
        let services: Api<Service> = Api::namespaced(client.clone(), "default");
        for service in &initial {
            services
                .create(&PostParams::default(), service)
                .await
                .unwrap();
        }
        let cloud = support::cloud_for(&stub);
        let metrics = FirewallMetrics::default();
        let controller = FirewallController::new(
            DoClient::new(&support::config_for(&stub)).unwrap(),
            Some(PublicAccessFirewall {
                name: NAME.into(),
                tags: vec![TAG.into()],
            }),
            LbType::RegionalNetwork,
            metrics.clone(),
        )
        .with_resync_period(resync);
        let shutdown = support::spawn_provider_controller(client, cloud, Arc::new(controller));
        Harness {
            stub,
            metrics,
            services,
            shutdown,
            _server: server,
        }
    }

    /// The one firewall of the stub (fails if there are several).
    fn firewall(&self) -> Option<Value> {
        let firewalls = self.stub.firewalls();
        assert!(firewalls.len() <= 1, "several firewalls: {firewalls:#?}");
        firewalls.into_iter().next()
    }

    /// The inbound rules of the firewall as `protocol/port from sources`, sorted.
    fn inbound(&self) -> Vec<String> {
        let Some(firewall) = self.firewall() else {
            return Vec::new();
        };
        let mut rules: Vec<String> = firewall["inbound_rules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|rule| {
                let sources = &rule["sources"];
                let from: Vec<String> = ["addresses", "load_balancer_uids"]
                    .iter()
                    .flat_map(|k| sources[k].as_array().cloned().unwrap_or_default())
                    .map(|v| v.as_str().unwrap().to_string())
                    .collect();
                format!(
                    "{}/{} from {}",
                    rule["protocol"].as_str().unwrap(),
                    rule["ports"].as_str().unwrap(),
                    from.join(" ")
                )
            })
            .collect();
        rules.sort();
        rules
    }

    /// Create, update and delete requests the stub saw for firewalls.
    fn firewall_writes(&self) -> usize {
        self.stub.mutations("/v2/firewalls").len()
    }

    async fn wait_for_inbound(&self, want: &[&str]) {
        wait_until(&format!("inbound rules {want:?}"), || async {
            self.inbound() == want
        })
        .await;
    }
}

fn service(
    name: &str,
    type_: &str,
    ports: &[(&str, i32, i32)],
    annotations: &[(&str, &str)],
) -> Service {
    Service {
        metadata: kube::api::ObjectMeta {
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
            type_: Some(type_.into()),
            ports: Some(
                ports
                    .iter()
                    .map(|(protocol, port, node_port)| ServicePort {
                        name: Some(format!("{}-{port}", protocol.to_lowercase())),
                        protocol: Some(protocol.to_string()),
                        port: *port,
                        node_port: Some(*node_port),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The firewall request the upstream DigitalOcean CCM sends for NodePort Services on these node ports.
fn upstream_firewall(node_ports: &[(&str, i32)]) -> Value {
    let everywhere = json!({"addresses": ["0.0.0.0/0", "::/0"]});
    json!({
        "name": NAME,
        "inbound_rules": node_ports.iter().map(|(protocol, port)| json!({
            "protocol": protocol, "ports": port.to_string(), "sources": everywhere,
        })).collect::<Vec<_>>(),
        "outbound_rules": [
            {"protocol": "tcp", "ports": "all", "destinations": everywhere},
            {"protocol": "udp", "ports": "all", "destinations": everywhere},
            {"protocol": "icmp", "destinations": everywhere},
        ],
        "droplet_ids": null,
        "tags": [TAG],
    })
}

const EVERYWHERE: &str = "0.0.0.0/0 ::/0";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_follow_the_services() {
    let h = Harness::start(|_| {}, Vec::new(), Duration::from_secs(300)).await;
    let pp = PostParams::default();
    h.services
        .create(
            &pp,
            &service(
                "web",
                "NodePort",
                &[("TCP", 80, 30080), ("UDP", 53, 30053)],
                &[],
            ),
        )
        .await
        .unwrap();
    h.wait_for_inbound(&[
        &format!("tcp/30080 from {EVERYWHERE}"),
        &format!("udp/30053 from {EVERYWHERE}"),
    ])
    .await;
    let firewall = h.firewall().unwrap();
    assert_eq!(firewall["name"], NAME);
    assert_eq!(firewall["tags"], json!([TAG]));
    assert_eq!(h.stub.count("POST", "/v2/firewalls"), 1);

    // A network load balancer opens its service ports and, from the load balancer, its health check.
    h.services
        .create(
            &pp,
            &service(
                "lb",
                "LoadBalancer",
                &[("TCP", 443, 31443)],
                &[(ANN_LOAD_BALANCER_ID, "lb-1")],
            ),
        )
        .await
        .unwrap();
    h.wait_for_inbound(&[
        "tcp/10256 from lb-1",
        &format!("tcp/30080 from {EVERYWHERE}"),
        &format!("tcp/443 from {EVERYWHERE}"),
        &format!("udp/30053 from {EVERYWHERE}"),
    ])
    .await;

    // Opting a Service out, and deleting one, remove their rules.
    let opt_out = json!({"metadata": {"annotations": {ANN_FIREWALL_MANAGED: "false"}}});
    h.services
        .patch("web", &PatchParams::default(), &Patch::Merge(&opt_out))
        .await
        .unwrap();
    h.wait_for_inbound(&["tcp/10256 from lb-1", &format!("tcp/443 from {EVERYWHERE}")])
        .await;
    h.services
        .delete("lb", &DeleteParams::default())
        .await
        .unwrap();
    h.wait_for_inbound(&[]).await;
    assert!(h.firewall().is_some(), "an empty firewall stays");

    // A change that does not touch the rules costs no write.
    let writes = h.firewall_writes();
    let label = json!({"metadata": {"labels": {"team": "a"}}});
    h.services
        .patch("web", &PatchParams::default(), &Patch::Merge(&label))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(h.firewall_writes(), writes);
    assert_eq!(
        h.stub.count("POST", "/v2/firewalls"),
        1,
        "one firewall, created once"
    );
    // Upstream's firewall_* families count the same: one create, the updates, the reconciles.
    assert_eq!(h.metrics.operation_count("create", "succeeded", "202"), 1);
    assert_eq!(
        h.metrics.operation_count("update", "succeeded", "200") as usize,
        h.firewall_writes() - 1
    );
    assert!(h.metrics.operation_count("get_by_list", "succeeded", "200") >= 1);
    assert!(h.metrics.reconcile_count("reconciled", "") >= 4);
    assert!(h.metrics.reconcile_count("skipped", "") >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upstream_firewall_is_adopted_without_a_change() {
    let services = vec![
        service(
            "web",
            "NodePort",
            &[("TCP", 80, 30080), ("UDP", 53, 30053)],
            &[],
        ),
        service("api", "NodePort", &[("TCP", 8080, 30090)], &[]),
        service(
            "hidden",
            "NodePort",
            &[("TCP", 8081, 30091)],
            &[(ANN_FIREWALL_MANAGED, "false")],
        ),
        service(
            "proxied",
            "LoadBalancer",
            &[("TCP", 80, 31080)],
            &[(ANN_TYPE, "REGIONAL")],
        ),
    ];
    let h = Harness::start(
        |stub| {
            // Listed before ours: adoption goes by name.
            stub.insert_firewall(json!({"name": "another-firewall", "tags": ["other"]}));
            stub.insert_firewall(upstream_firewall(&[
                ("tcp", 30080),
                ("tcp", 30090),
                ("udp", 30053),
            ]));
        },
        services,
        Duration::from_millis(200),
    )
    .await;
    // Several refreshes and a Service change later, nothing was written.
    wait_until("two refreshes", || async {
        h.stub.count_prefix("GET", "/v2/firewalls/") >= 2
    })
    .await;
    let label = json!({"metadata": {"labels": {"team": "a"}}});
    h.services
        .patch("web", &PatchParams::default(), &Patch::Merge(&label))
        .await
        .unwrap();
    wait_until("a third refresh", || async {
        h.stub.count_prefix("GET", "/v2/firewalls/") >= 3
    })
    .await;
    assert_eq!(h.firewall_writes(), 0, "requests: {:#?}", h.stub.requests());
    assert_eq!(
        h.stub.count("GET", "/v2/firewalls"),
        1,
        "listed once, then read by ID"
    );
    assert!(h.metrics.resource_sync_count("updated") >= 2);
    assert!(h.metrics.operation_count("get_by_id", "succeeded", "200") >= 2);
    assert_eq!(h.metrics.reconcile_count("reconciled", ""), 0);
    assert!(h.metrics.reconcile_count("skipped", "") >= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_and_out_of_band_deletion_are_repaired_at_the_next_refresh() {
    let services = vec![service("web", "NodePort", &[("TCP", 80, 30080)], &[])];
    let h = Harness::start(|_| {}, services, Duration::from_millis(300)).await;
    let want = [format!("tcp/30080 from {EVERYWHERE}")];
    let want: Vec<&str> = want.iter().map(String::as_str).collect();
    h.wait_for_inbound(&want).await;

    let id = h.firewall().unwrap()["id"].as_str().unwrap().to_string();
    h.stub.modify_firewall(&id, |fw| {
        fw["inbound_rules"][0]["ports"] = json!("22");
        fw["tags"] = json!(["someone-else"]);
    });
    wait_until("drift repaired", || async {
        h.firewall().is_some_and(|fw| fw["tags"] == json!([TAG])) && h.inbound() == want
    })
    .await;
    assert_eq!(h.stub.count("PUT", &format!("/v2/firewalls/{id}")), 1);

    assert!(h.stub.remove_firewall(&id));
    wait_until("firewall recreated", || async { h.firewall().is_some() }).await;
    assert_ne!(h.firewall().unwrap()["id"], json!(id));
    assert_eq!(h.inbound(), want);
    assert_eq!(h.stub.count("POST", "/v2/firewalls"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_create_waits_for_retry_after() {
    let services = vec![service("web", "NodePort", &[("TCP", 80, 30080)], &[])];
    let started = tokio::time::Instant::now();
    let h = Harness::start(
        |stub| stub.inject(Fault::retry_after("POST", "/v2/firewalls", 1, 1)),
        services,
        Duration::from_secs(300),
    )
    .await;
    wait_until("firewall created", || async { h.firewall().is_some() }).await;
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "created before Retry-After passed"
    );
    let posts: Vec<u16> = h
        .stub
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path == "/v2/firewalls")
        .map(|r| r.status)
        .collect();
    assert_eq!(posts, [429, 202]);
    // The call retried after the 429 counts as one operation.
    assert_eq!(h.metrics.operation_count("create", "succeeded", "202"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_load_balancer_annotation_changes_nothing_until_fixed() {
    let services = vec![service("web", "NodePort", &[("TCP", 80, 30080)], &[])];
    let h = Harness::start(|_| {}, services, Duration::from_secs(300)).await;
    h.wait_for_inbound(&[&format!("tcp/30080 from {EVERYWHERE}")])
        .await;
    let writes = h.firewall_writes();

    let bad = service(
        "bad",
        "LoadBalancer",
        &[("TCP", 81, 31081)],
        &[(ANN_TYPE, "regional-network")],
    );
    h.services
        .create(&PostParams::default(), &bad)
        .await
        .unwrap();
    h.services
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        h.firewall_writes(),
        writes,
        "nothing changes while a Service is unreadable"
    );
    assert_eq!(h.inbound(), [format!("tcp/30080 from {EVERYWHERE}")]);
    assert!(h.metrics.reconcile_count("failed", "generic") >= 1);

    let fixed = json!({"metadata": {"annotations": {ANN_TYPE: "REGIONAL_NETWORK"}}});
    h.services
        .patch("bad", &PatchParams::default(), &Patch::Merge(&fixed))
        .await
        .unwrap();
    h.wait_for_inbound(&[
        &format!("tcp/10256 from {EVERYWHERE}"),
        &format!("tcp/81 from {EVERYWHERE}"),
    ])
    .await;
}

#[tokio::test]
async fn the_provider_offers_the_controller_and_runs_it_only_when_configured() {
    let stub = DoStub::start().await;
    let unconfigured = support::cloud_for(&stub).controllers();
    assert_eq!(unconfigured.len(), 2);
    assert_eq!(unconfigured[0].info().name, "firewall-controller");
    assert_eq!(unconfigured[0].info().alias, "firewall");
    let reason = unconfigured[0].skip_reason().unwrap();
    assert!(reason.contains("PUBLIC_ACCESS_FIREWALL_NAME"), "{reason}");

    let configured = support::cloud_with(&stub, |config| {
        config.public_access_firewall = Some(PublicAccessFirewall {
            name: NAME.into(),
            tags: vec![TAG.into()],
        });
    });
    assert_eq!(configured.controllers()[0].skip_reason(), None);

    // Declared with the factory, so that `--controllers` knows the name before the provider is built.
    let mut registry = cloud_provider::Registry::new();
    provider_digitalocean::register(&mut registry);
    assert_eq!(
        registry.controllers_of("digitalocean"),
        [unconfigured[0].info(), unconfigured[1].info()]
    );
}
