//! Takeover from the upstream DigitalOcean cloud-controller-manager (v0.1.68).
//!
//! Every case is a Service (covering one or more annotation families) with the body upstream's
//! `buildLoadBalancerRequest` sends to create its load balancer, written out here by hand from upstream's
//! code: godo's JSON names and `omitempty` omissions, the health check with `proxy_protocol: false`
//! unless overridden, `algorithm`, `disable_lets_encrypt_dns_records` and `firewall` always sent, the
//! network-stack defaults, and so on.
//!
//! - `our_create_requests_equal_upstreams`: for each Service, the body of our `POST` equals upstream's.
//! - `takeover_makes_no_mutating_call`: the stub is seeded with each load balancer as upstream's body and
//!   the API's completion of it make it, each Service carries the annotations upstream wrote back
//!   (load-balancer ID and type), and our provider ensures and updates every Service: the stub must see no
//!   `POST`, `PUT`, `PATCH` or `DELETE` on `/v2/load_balancers`, and no Service is patched (but for the
//!   certificate annotation upstream itself rewrites after a Let's Encrypt renewal). A failure names the
//!   fields our `PUT` would have changed.
//! - `takeover_through_the_controllers_makes_no_mutating_call`: the same on the daemon's run path, the
//!   service and firewall controllers starting on a converged upstream cluster (the cases that share one
//!   node set, a NodePort Service, and the public-access firewall upstream keeps for them): no create,
//!   update or delete of a load balancer or a firewall.

mod support;

use std::collections::BTreeMap;

use cloud_provider::LoadBalancer as _;
use k8s_openapi::api::core::v1::{Node, Service, ServicePort, ServiceSpec};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use provider_digitalocean::DigitalOceanCloud;
use provider_digitalocean::annotations::*;
use provider_digitalocean::stub::{DoStub, DropletSpec, RecordedRequest};
use serde_json::{Value, json};
use support::{cloud_with, droplet_node, dual_stack_node, node};

/// The public-access firewall of the converged cluster.
const FIREWALL_NAME: &str = "k8s-c-1-public-access";

/// The UID of the Services of the create test.
const UID: &str = "0b7c5a3e-6d21-4f0a-9c8e-5b4a3f2e1d0c";
const LB_PATH: &str = "/v2/load_balancers";

/// Droplets and certificates every case may use (created in this order on a fresh stub, so their IDs
/// are the same on every stub).
struct Env {
    stub: DoStub,
    droplets: [u64; 3],
    /// A custom certificate.
    custom: String,
    /// A Let's Encrypt certificate used by name.
    www: String,
    /// A Let's Encrypt certificate and its renewal, both named `shop-le`.
    shop_le_old: String,
    shop_le_renewed: String,
}

impl Env {
    async fn new() -> Env {
        let stub = DoStub::start().await;
        let droplets = ["n1", "n2", "n3"].map(|n| stub.add_droplet(DropletSpec::new(n)));
        Env {
            custom: stub.add_certificate("shop-custom", "custom"),
            www: stub.add_certificate("www", "lets_encrypt"),
            shop_le_old: stub.add_certificate("shop-le", "lets_encrypt"),
            shop_le_renewed: stub.add_certificate("shop-le", "lets_encrypt"),
            stub,
            droplets,
        }
    }

    /// The provider, with the cluster's VPC configured.
    fn cloud(&self) -> DigitalOceanCloud {
        cloud_with(&self.stub, |c| {
            c.cluster_vpc_id = Some("vpc-cluster".into())
        })
    }

    /// The nodes of the cluster: IPv4-only or dual-stack; the third without a provider ID when asked.
    fn nodes(&self, case: &Case) -> Vec<Node> {
        let [a, b, c] = self.droplets;
        let make = |name: &str, id: u64| {
            if case.dual_stack {
                dual_stack_node(name, id)
            } else {
                droplet_node(name, id)
            }
        };
        let third = if case.nameless_node {
            node("n3", None)
        } else {
            make("n3", c)
        };
        vec![make("n1", a), make("n2", b), third]
    }
}

/// A Service, and what upstream made of it.
struct Case {
    what: &'static str,
    /// The Service as its user wrote it.
    service: Service,
    /// Whether the nodes are dual-stack.
    dual_stack: bool,
    /// Whether the third node has no provider ID (matched by droplet name).
    nameless_node: bool,
    /// Upstream's create body; a `null` name stands for the default name of the Service's UID.
    body: Value,
    /// Whether the Service carries the load-balancer ID annotation upstream wrote (else it is found by
    /// name, and the annotation written, as upstream does).
    annotated_id: bool,
    /// Annotations upstream writes on the next sync besides ID and type (expected patches).
    rewritten: Vec<(&'static str, String)>,
    /// Whether our provider may create this case from scratch with `body` (not for disowned Services or
    /// state only a later sync produces).
    creatable: bool,
}

/// A TCP or UDP service port.
fn port(name: &str, port: i32, node_port: i32, protocol: &str) -> ServicePort {
    ServicePort {
        name: Some(name.into()),
        port,
        node_port: Some(node_port),
        protocol: Some(protocol.into()),
        ..Default::default()
    }
}

/// A LoadBalancer Service `default/<name>` with the given annotations and ports.
fn service(name: &str, annotations: &[(&str, &str)], ports: Vec<ServicePort>) -> Service {
    let mut s = Service::default();
    s.metadata.name = Some(name.into());
    s.metadata.namespace = Some("default".into());
    s.metadata.annotations = Some(
        annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>(),
    );
    s.spec = Some(ServiceSpec {
        type_: Some("LoadBalancer".into()),
        selector: Some([("app".to_string(), name.to_string())].into()),
        ports: Some(ports),
        ..Default::default()
    });
    s
}

/// The TCP ports 80 and 443 on node ports `base` and `base + 1`.
fn web_ports(base: i32) -> Vec<ServicePort> {
    vec![
        port("http", 80, base, "TCP"),
        port("https", 443, base + 1, "TCP"),
    ]
}

/// A forwarding rule as upstream builds it (zero values omitted).
fn rule(entry: &str, entry_port: i32, target: &str, target_port: i32) -> Value {
    json!({"entry_protocol": entry, "entry_port": entry_port, "target_protocol": target, "target_port": target_port})
}

/// Upstream's default health check: kube-proxy's `/healthz`, PROXY protocol off.
fn kube_proxy_check() -> Value {
    json!({"protocol": "http", "port": 10256, "path": "/healthz", "check_interval_seconds": 3,
           "response_timeout_seconds": 5, "healthy_threshold": 5, "unhealthy_threshold": 3,
           "proxy_protocol": false})
}

/// Upstream's create body of a Service without annotations (a REGIONAL_NETWORK load balancer over IPv4
/// nodes, ports 80 and 443) in region nyc3 of cluster `c-1` with VPC `vpc-cluster`, with `changes`
/// applied (a `null` removes a field).
fn upstream_body(droplets: &[u64], changes: Value) -> Value {
    let mut body = json!({
        "name": null,
        "algorithm": "round_robin",
        "region": "nyc3",
        "type": "REGIONAL_NETWORK",
        "forwarding_rules": [rule("tcp", 80, "tcp", 80), rule("tcp", 443, "tcp", 443)],
        "health_check": kube_proxy_check(),
        "sticky_sessions": {"type": "none"},
        "droplet_ids": droplets,
        "tags": ["k8s:c-1"],
        "vpc_uuid": "vpc-cluster",
        "disable_lets_encrypt_dns_records": false,
        "firewall": {},
        "network": "EXTERNAL",
        "network_stack": "IPV4",
    });
    for (key, value) in changes.as_object().cloned().unwrap_or_default() {
        if value.is_null() && key != "name" {
            body.as_object_mut().map(|b| b.remove(&key));
        } else {
            body[key.as_str()] = value;
        }
    }
    body
}

fn cases(env: &Env) -> Vec<Case> {
    let ids = env.droplets.to_vec();
    let plain = |what, service, body| Case {
        what,
        service,
        dual_stack: false,
        nameless_node: false,
        body,
        annotated_id: true,
        rewritten: vec![],
        creatable: true,
    };
    vec![
        plain(
            "no annotation: REGIONAL_NETWORK (DEFAULT_LB_TYPE), tcp, kube-proxy health check, IPv4",
            service("plain", &[], web_ports(30010)),
            upstream_body(&ids, json!({})),
        ),
        Case {
            dual_stack: true,
            ..plain(
                "REGIONAL_NETWORK over dual-stack nodes: UDP, PROXY protocol, Local traffic, source ranges over allow rules, deny rules",
                local_traffic(service(
                    "dns",
                    &[
                        (ANN_ENABLE_PROXY_PROTOCOL, "true"),
                        (ANN_ALLOW_RULES, "ip:1.1.1.1"),
                        (ANN_DENY_RULES, "ip:203.0.113.66, cidr:198.51.100.0/24"),
                    ],
                    vec![port("tcp", 80, 30020, "TCP"), port("dns", 53, 30021, "UDP")],
                )),
                upstream_body(
                    &ids,
                    json!({
                        "forwarding_rules": [rule("tcp", 80, "tcp", 80), rule("udp", 53, "udp", 53)],
                        "health_check": {"protocol": "http", "port": 31999, "path": "/healthz",
                            "check_interval_seconds": 3, "response_timeout_seconds": 5,
                            "healthy_threshold": 5, "unhealthy_threshold": 3, "proxy_protocol": false},
                        "enable_proxy_protocol": true,
                        "firewall": {"allow": ["cidr:10.0.0.0/8", "cidr:192.168.1.0/24"],
                                     "deny": ["ip:203.0.113.66", "cidr:198.51.100.0/24"]},
                        "network_stack": "DUALSTACK",
                    }),
                ),
            )
        },
        plain(
            "REGIONAL: http and https with certificate-id, redirect, cookies, idle timeout, keepalive, size unit, no Let's Encrypt DNS, hostname",
            service(
                "shop",
                &[
                    (ANN_TYPE, "REGIONAL"),
                    (ANN_HTTP_PORTS, "80"),
                    (ANN_CERTIFICATE_ID, &env.custom),
                    (ANN_REDIRECT_HTTP_TO_HTTPS, "true"),
                    (ANN_STICKY_SESSIONS_TYPE, "cookies"),
                    (ANN_STICKY_SESSIONS_COOKIE_NAME, "DO-LB"),
                    (ANN_STICKY_SESSIONS_COOKIE_TTL, "300"),
                    (ANN_HTTP_IDLE_TIMEOUT_SECONDS, "120"),
                    (ANN_ENABLE_BACKEND_KEEPALIVE, "True"),
                    (ANN_SIZE_UNIT, "2"),
                    (ANN_DISABLE_LETS_ENCRYPT_DNS_RECORDS, "t"),
                    (ANN_HOSTNAME, "Shop.Example.com"),
                ],
                web_ports(30030),
            ),
            upstream_body(
                &ids,
                json!({
                    "type": "REGIONAL",
                    "forwarding_rules": [
                        rule("http", 80, "http", 30030),
                        {"entry_protocol": "https", "entry_port": 443, "target_protocol": "http",
                         "target_port": 30031, "certificate_id": env.custom},
                    ],
                    "redirect_http_to_https": true,
                    "sticky_sessions": {"type": "cookies", "cookie_name": "DO-LB", "cookie_ttl_seconds": 300},
                    "http_idle_timeout_seconds": 120,
                    "enable_backend_keepalive": true,
                    "size_unit": 2,
                    "disable_lets_encrypt_dns_records": true,
                    "network_stack": "DUALSTACK",
                }),
            ),
        ),
        plain(
            "REGIONAL: TLS pass-through on the implied 443 and an http2 port, deprecated algorithm and size slug",
            service(
                "passthrough",
                &[
                    (ANN_TYPE, "REGIONAL"),
                    (ANN_TLS_PASSTHROUGH, "true"),
                    (ANN_HTTP2_PORTS, "8443"),
                    (ANN_ALGORITHM, "least_connections"),
                    (ANN_SIZE_SLUG, "lb-medium"),
                ],
                vec![
                    port("http", 80, 30040, "TCP"),
                    port("https", 443, 30041, "TCP"),
                    port("h2", 8443, 30042, "TCP"),
                ],
            ),
            upstream_body(
                &ids,
                json!({
                    "type": "REGIONAL",
                    "algorithm": "least_connections",
                    "size": "lb-medium",
                    "forwarding_rules": [
                        rule("tcp", 80, "tcp", 30040),
                        {"entry_protocol": "https", "entry_port": 443, "target_protocol": "https",
                         "target_port": 30041, "tls_passthrough": true},
                        {"entry_protocol": "http2", "entry_port": 8443, "target_protocol": "http2",
                         "target_port": 30042, "tls_passthrough": true},
                    ],
                    "network_stack": "DUALSTACK",
                }),
            ),
        ),
        plain(
            "REGIONAL: http3 next to https on 443 with certificate-name",
            service(
                "www",
                &[
                    (ANN_TYPE, "REGIONAL"),
                    (ANN_CERTIFICATE_NAME, "www"),
                    (ANN_HTTP_PORTS, "80"),
                    (ANN_TLS_PORTS, "443"),
                    (ANN_HTTP3_PORT, "443"),
                ],
                web_ports(30050),
            ),
            upstream_body(
                &ids,
                json!({
                    "type": "REGIONAL",
                    "forwarding_rules": [
                        rule("http", 80, "http", 30050),
                        {"entry_protocol": "https", "entry_port": 443, "target_protocol": "http",
                         "target_port": 30051, "certificate_id": env.www},
                        {"entry_protocol": "http3", "entry_port": 443, "target_protocol": "http",
                         "target_port": 30051, "certificate_id": env.www},
                    ],
                    "network_stack": "DUALSTACK",
                }),
            ),
        ),
        plain(
            "REGIONAL INTERNAL: overridden health check (port, protocol, path, timings), PROXY protocol",
            service(
                "internal",
                &[
                    (ANN_TYPE, "REGIONAL"),
                    (ANN_NETWORK, "INTERNAL"),
                    (ANN_OVERRIDE_HEALTH_CHECK, "true"),
                    (ANN_HEALTH_CHECK_PORT, "443"),
                    (ANN_HEALTH_CHECK_PROTOCOL, "https"),
                    (ANN_HEALTH_CHECK_PATH, "/ready"),
                    (ANN_HEALTH_CHECK_INTERVAL_SECONDS, "10"),
                    (ANN_HEALTH_CHECK_RESPONSE_TIMEOUT_SECONDS, "8"),
                    (ANN_HEALTH_CHECK_UNHEALTHY_THRESHOLD, "4"),
                    (ANN_HEALTH_CHECK_HEALTHY_THRESHOLD, "2"),
                    (ANN_ENABLE_PROXY_PROTOCOL, "1"),
                ],
                web_ports(30060),
            ),
            upstream_body(
                &ids,
                json!({
                    "type": "REGIONAL",
                    "network": "INTERNAL",
                    "forwarding_rules": [rule("tcp", 80, "tcp", 30060), rule("tcp", 443, "tcp", 30061)],
                    "health_check": {"protocol": "https", "port": 30061, "path": "/ready",
                        "check_interval_seconds": 10, "response_timeout_seconds": 8,
                        "healthy_threshold": 2, "unhealthy_threshold": 4},
                    "enable_proxy_protocol": true,
                }),
            ),
        ),
        plain(
            "override-health-check \"false\" still overrides; a path alone means http",
            service(
                "override-false",
                &[
                    (ANN_OVERRIDE_HEALTH_CHECK, "false"),
                    (ANN_HEALTH_CHECK_PATH, "/healthz/ready"),
                ],
                web_ports(30070),
            ),
            upstream_body(
                &ids,
                json!({
                    "health_check": {"protocol": "http", "port": 30070, "path": "/healthz/ready",
                        "check_interval_seconds": 3, "response_timeout_seconds": 5,
                        "healthy_threshold": 5, "unhealthy_threshold": 3},
                }),
            ),
        ),
        plain(
            "annotations upstream ignores or reads leniently: http annotations on a network load balancer, unknown sticky type, non-boolean tls-passthrough",
            service(
                "lenient",
                &[
                    (ANN_PROTOCOL, "http"),
                    (ANN_HTTP_PORTS, "80"),
                    (ANN_STICKY_SESSIONS_TYPE, "Cookies"),
                    (ANN_TLS_PASSTHROUGH, "yes"),
                    (ANN_SIZE_UNIT, ""),
                    (ANN_NETWORK_STACK, ""),
                ],
                web_ports(30080),
            ),
            upstream_body(&ids, json!({})),
        ),
        Case {
            annotated_id: false,
            nameless_node: true,
            ..plain(
                "custom name, found by name (no ID annotation), a node matched by droplet name",
                service("named", &[(ANN_NAME, "shop-lb")], web_ports(30090)),
                upstream_body(&ids, json!({"name": "shop-lb"})),
            )
        },
        Case {
            rewritten: vec![(ANN_CERTIFICATE_ID, env.shop_le_renewed.clone())],
            creatable: false,
            ..plain(
                "Let's Encrypt renewal: the load balancer carries the renewed certificate of the same name",
                service(
                    "renewed",
                    &[
                        (ANN_TYPE, "REGIONAL"),
                        (ANN_CERTIFICATE_ID, &env.shop_le_old),
                    ],
                    web_ports(30100),
                ),
                upstream_body(
                    &ids,
                    json!({
                        "type": "REGIONAL",
                        "forwarding_rules": [
                            rule("tcp", 80, "tcp", 30100),
                            {"entry_protocol": "https", "entry_port": 443, "target_protocol": "http",
                             "target_port": 30101, "certificate_id": env.shop_le_renewed},
                        ],
                        "network_stack": "DUALSTACK",
                    }),
                ),
            )
        },
        Case {
            creatable: false,
            ..plain(
                "disowned: annotations that no longer match the load balancer are not applied",
                service(
                    "disowned",
                    &[
                        (ANN_DISOWN, "true"),
                        (ANN_SIZE_UNIT, "5"),
                        (ANN_TYPE, "REGIONAL"),
                    ],
                    web_ports(30110),
                ),
                upstream_body(&ids, json!({})),
            )
        },
    ]
}

/// `service` with `externalTrafficPolicy: Local` and health-check node port 31999.
fn local_traffic(mut service: Service) -> Service {
    let spec = service.spec.as_mut().expect("a Service spec");
    spec.external_traffic_policy = Some("Local".into());
    spec.health_check_node_port = Some(31999);
    spec.load_balancer_source_ranges = Some(vec!["10.0.0.0/8".into(), "192.168.1.7/24".into()]);
    service
}

/// The default load-balancer name of a UID: `a` and the UID without dashes, 32 characters.
fn default_name(uid: &str) -> String {
    let mut name = String::from("a");
    name.extend(uid.chars().filter(|c| *c != '-').take(31));
    name
}

/// `body` with the name filled in for a Service of `uid`.
fn named(body: &Value, uid: &str) -> Value {
    let mut body = body.clone();
    if body["name"].is_null() {
        body["name"] = json!(default_name(uid));
    }
    body
}

/// A body with its unordered lists sorted: droplets, and allow rules (upstream sends source ranges in
/// Go map order).
fn normalized(body: &Value) -> Value {
    let mut body = body.clone();
    if let Some(ids) = body["droplet_ids"].as_array_mut() {
        ids.sort_by_key(|v| v.as_u64());
    }
    if let Some(allow) = body["firewall"]
        .get_mut("allow")
        .and_then(Value::as_array_mut)
    {
        allow.sort_by_key(Value::to_string);
    }
    body
}

/// The paths where `a` and `b` differ (lists compared as sets), as `path: a -> b`.
fn changed_fields(a: &Value, b: &Value, path: &str, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for key in keys {
                let sub = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                let null = Value::Null;
                changed_fields(
                    x.get(key).unwrap_or(&null),
                    y.get(key).unwrap_or(&null),
                    &sub,
                    out,
                );
            }
        }
        _ if unordered(a) != unordered(b) => out.push(format!("{path}: {a} -> {b}")),
        _ => {}
    }
}

fn unordered(v: &Value) -> Value {
    match v {
        Value::Array(items) => {
            let mut items = items.clone();
            items.sort_by_key(Value::to_string);
            Value::Array(items)
        }
        other => other.clone(),
    }
}

/// What our provider's mutating calls did to the load balancers, field by field (`before` is the
/// stub's state before them).
fn describe_mutations(env: &Env, before: &[Value], mutations: &[RecordedRequest]) -> String {
    mutations
        .iter()
        .map(|m| {
            let id = m.path.rsplit('/').next().unwrap_or_default();
            let old = before.iter().find(|lb| lb["id"] == json!(id));
            let mut fields = Vec::new();
            if let (Some(old), Some(new)) = (old, env.stub.load_balancer(id)) {
                changed_fields(old, &new, "", &mut fields);
            }
            let what = if fields.is_empty() {
                format!(
                    "no visible change; body {}",
                    m.body.clone().unwrap_or_default()
                )
            } else {
                fields.join("; ")
            };
            format!("{} {} ({}): {what}", m.method, m.path, m.status)
        })
        .collect::<Vec<_>>()
        .join("\n    ")
}

#[tokio::test]
async fn our_create_requests_equal_upstreams() {
    let mut failures = Vec::new();
    let reference = Env::new().await;
    for case in cases(&reference).into_iter().filter(|c| c.creatable) {
        // A fresh stub per Service: same droplet and certificate IDs, nothing else.
        let env = Env::new().await;
        let cloud = env.cloud();
        let mut svc = case.service.clone();
        svc.metadata.uid = Some(UID.into());
        if let Err(e) = cloud
            .ensure_load_balancer("kubernetes", &svc, &env.nodes(&case))
            .await
        {
            failures.push(format!("{}: ensure failed: {e}", case.what));
            continue;
        }
        let posts: Vec<RecordedRequest> = env
            .stub
            .mutations(LB_PATH)
            .into_iter()
            .filter(|m| m.method == "POST")
            .collect();
        let [post] = posts.as_slice() else {
            failures.push(format!("{}: {} POSTs", case.what, posts.len()));
            continue;
        };
        let sent: Value = serde_json::from_str(post.body.as_deref().unwrap_or("null")).unwrap();
        let expected = named(&case.body, UID);
        if normalized(&sent) != normalized(&expected) {
            let mut fields = Vec::new();
            changed_fields(&normalized(&expected), &normalized(&sent), "", &mut fields);
            failures.push(format!(
                "{}: our POST differs from upstream's (upstream -> ours):\n    {}",
                case.what,
                fields.join("\n    ")
            ));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

/// Upstream's state of one case: the Service as stored after upstream's syncs, and its load balancer.
struct Seeded {
    what: &'static str,
    service: Service,
    nodes: Vec<Node>,
    lb_id: String,
    rewritten: Vec<(&'static str, String)>,
}

/// Creates the Service in the API server, the load balancer in the stub, and the annotations upstream
/// wrote back.
async fn seed(env: &Env, services: &Api<Service>, case: &Case) -> Seeded {
    let created = services
        .create(&PostParams::default(), &case.service)
        .await
        .unwrap_or_else(|e| panic!("{}: creating the Service: {e}", case.what));
    let uid = created.metadata.uid.clone().expect("a UID");
    let lb_id = env.stub.insert_load_balancer(named(&case.body, &uid));
    let lb = env
        .stub
        .load_balancer(&lb_id)
        .expect("the seeded load balancer");
    let mut written = BTreeMap::from([(ANN_TYPE.to_string(), lb["type"].clone())]);
    if case.annotated_id {
        written.insert(ANN_LOAD_BALANCER_ID.to_string(), json!(lb_id));
    }
    let name = created.metadata.name.clone().unwrap_or_default();
    let patch = json!({"metadata": {"annotations": written}});
    let service = services
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("{}: annotating the Service: {e}", case.what));
    let mut rewritten = case.rewritten.clone();
    if !case.annotated_id {
        rewritten.push((ANN_LOAD_BALANCER_ID, lb_id.clone()));
    }
    Seeded {
        what: case.what,
        service,
        nodes: env.nodes(case),
        lb_id,
        rewritten,
    }
}

#[tokio::test]
async fn takeover_makes_no_mutating_call() {
    let apiserver = test_apiserver::TestApiServer::builder()
        .start()
        .await
        .unwrap();
    let client = apiserver.client().unwrap();
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let env = Env::new().await;
    let mut seeded = Vec::new();
    for case in cases(&env) {
        seeded.push(seed(&env, &services, &case).await);
    }
    let lbs_before = env.stub.load_balancers();

    let cloud = env.cloud();
    cloud.set_kube_client(client.clone());
    let mut failures = Vec::new();
    for s in &seeded {
        env.stub.clear_requests();
        let before = env.stub.load_balancers();
        let ensured = cloud
            .ensure_load_balancer("kubernetes", &s.service, &s.nodes)
            .await;
        let updated = cloud
            .update_load_balancer("kubernetes", &s.service, &s.nodes)
            .await;
        for (call, result) in [("ensure", ensured.map(|_| ())), ("update", updated)] {
            if let Err(e) = result {
                failures.push(format!("{}: {call} failed: {e}", s.what));
            }
        }
        let mutations = env.stub.mutations(LB_PATH);
        if !mutations.is_empty() {
            failures.push(format!(
                "{}: mutating calls on the load balancer {}:\n    {}",
                s.what,
                s.lb_id,
                describe_mutations(&env, &before, &mutations)
            ));
        }
        let name = s.service.metadata.name.clone().unwrap_or_default();
        let now = services.get(&name).await.unwrap();
        let expected_rv = if s.rewritten.is_empty() {
            s.service.metadata.resource_version.clone()
        } else {
            now.metadata.resource_version.clone()
        };
        if now.metadata.resource_version != expected_rv {
            failures.push(format!(
                "{}: the Service was patched: {:?}",
                s.what, now.metadata.annotations
            ));
        }
        for (key, value) in &s.rewritten {
            let annotations = now.metadata.annotations.clone().unwrap_or_default();
            if annotations.get(*key) != Some(value) {
                failures.push(format!(
                    "{}: {key} is {:?}, upstream writes {value:?}",
                    s.what,
                    annotations.get(*key)
                ));
            }
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
    assert_eq!(env.stub.load_balancers(), lbs_before);
    apiserver.shutdown().await;
}

/// The public-access firewall upstream's firewall controller keeps for these Services, written out from
/// upstream's `createReconciledFirewallRequest`: a NodePort Service's node ports open to everyone; an
/// external `REGIONAL_NETWORK` load balancer's service ports open to everyone and its health-check port
/// (kube-proxy's, or the health-check node port with `externalTrafficPolicy: Local`) open to the load
/// balancer; outbound everything.
fn upstream_firewall(services: &[Service], load_balancers: &[(Service, Value)]) -> Value {
    let everywhere = json!({"addresses": ["0.0.0.0/0", "::/0"]});
    let mut inbound = Vec::new();
    let mut open = std::collections::BTreeSet::new();
    for service in services {
        let spec = service.spec.clone().unwrap_or_default();
        if spec.type_.as_deref() == Some("NodePort") {
            for p in spec.ports.unwrap_or_default() {
                let protocol = p.protocol.as_deref().unwrap_or("TCP").to_lowercase();
                let ports = p.node_port.unwrap().to_string();
                inbound.push(json!({"protocol": protocol, "ports": ports, "sources": everywhere}));
            }
        }
    }
    for (service, lb) in load_balancers {
        if lb["type"] != "REGIONAL_NETWORK" || lb["network"] != "EXTERNAL" {
            continue;
        }
        let spec = service.spec.clone().unwrap_or_default();
        let health_port = match (
            spec.external_traffic_policy.as_deref(),
            spec.health_check_node_port,
        ) {
            (Some("Local"), Some(port)) if port != 0 => port,
            _ => 10256,
        };
        let id = service
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANN_LOAD_BALANCER_ID));
        match id {
            Some(id) => inbound.push(json!({
                "protocol": "tcp", "ports": health_port.to_string(), "sources": {"load_balancer_uids": [id]},
            })),
            None => {
                open.insert(("tcp".to_string(), health_port));
            }
        }
        for p in spec.ports.unwrap_or_default() {
            open.insert((
                p.protocol.as_deref().unwrap_or("TCP").to_lowercase(),
                p.port,
            ));
        }
    }
    for (protocol, port) in open {
        inbound
            .push(json!({"protocol": protocol, "ports": port.to_string(), "sources": everywhere}));
    }
    json!({
        "name": FIREWALL_NAME,
        "inbound_rules": inbound,
        "outbound_rules": [
            {"protocol": "tcp", "ports": "all", "destinations": everywhere},
            {"protocol": "udp", "ports": "all", "destinations": everywhere},
            {"protocol": "icmp", "destinations": everywhere},
        ],
        "droplet_ids": null,
        "tags": ["k8s:c-1:worker"],
    })
}

/// The whole takeover on the daemon's run path: the service and firewall controllers start on a cluster
/// upstream ran (every load balancer of the cases that share one node set, a NodePort Service, and the
/// public-access firewall upstream keeps for them) and sync every Service; the DigitalOcean API sees no
/// create, update or delete of a load balancer or a firewall.
/// A cluster upstream has converged: nodes, the LoadBalancer Services of [`cases`] that share one node
/// set (each with the load-balancer ID upstream wrote), a NodePort Service, and upstream's public-access
/// firewall. Returns the load-balancer cases.
async fn seed_converged_cluster(env: &Env, client: &kube::Client) -> Vec<Case> {
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let nodes: Api<Node> = Api::all(client.clone());
    let shared = cases(env)
        .into_iter()
        .filter(|c| !c.dual_stack && !c.nameless_node)
        .map(|c| Case {
            annotated_id: true,
            ..c
        })
        .collect::<Vec<_>>();
    assert!(
        shared.len() >= 7,
        "too few cases share one node set: {}",
        shared.len()
    );
    for node in env.nodes(&shared[0]) {
        let status = json!({"status": node.status});
        let name = node.metadata.name.clone().unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
        nodes
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
    }
    let mut seeded = Vec::new();
    let mut load_balancers = Vec::new();
    for case in &shared {
        let s = seed(env, &services, case).await;
        load_balancers.push((s.service.clone(), env.stub.load_balancer(&s.lb_id).unwrap()));
        seeded.push(s.service);
    }
    let mut node_port = service("plain-nodeport", &[], vec![port("http", 80, 30999, "TCP")]);
    node_port.spec.as_mut().unwrap().type_ = Some("NodePort".into());
    seeded.push(
        services
            .create(&PostParams::default(), &node_port)
            .await
            .unwrap(),
    );
    env.stub
        .insert_firewall(upstream_firewall(&seeded, &load_balancers));
    shared
}

/// The provider as the converged cluster's upstream CCM ran: its VPC and public-access firewall.
fn takeover_cloud(env: &Env) -> DigitalOceanCloud {
    cloud_with(&env.stub, |c| {
        c.cluster_vpc_id = Some("vpc-cluster".into());
        c.public_access_firewall = Some(provider_digitalocean::PublicAccessFirewall {
            name: FIREWALL_NAME.into(),
            tags: vec!["k8s:c-1:worker".into()],
        });
    })
}

/// Runs the service controller and the provider's own (firewall, tags) on the converged cluster until every one of its `ensured`
/// load balancers was ensured and the firewall was read, then stops them.
async fn run_controllers_until_ensured(env: &Env, client: &kube::Client, ensured: usize) {
    use cloud_controllers::{
        ControllerConfig, ControllerContext, ControllerMetrics, ControllerName, HealthRegistry,
        run_with_provider_controllers,
    };
    use cloud_provider::CloudProvider;
    use k8s_openapi::api::events::v1::Event;

    let cloud = takeover_cloud(env);
    cloud.initialize(client.clone()).await.unwrap();
    let cloud: std::sync::Arc<dyn CloudProvider> = std::sync::Arc::new(cloud);
    let context = ControllerContext {
        client: client.clone(),
        event_client: client.clone(),
        cloud: cloud.clone(),
        config: std::sync::Arc::new(ControllerConfig::default()),
        metrics: ControllerMetrics::register(&mut prometheus_client::registry::Registry::default()),
        health: HealthRegistry::new(),
        identity: "takeover_0".into(),
    };
    let shutdown = tokio_util::sync::CancellationToken::new();
    let controllers = tokio::spawn(run_with_provider_controllers(
        context,
        &[ControllerName::ServiceLb],
        cloud.controllers(),
        shutdown.clone(),
    ));

    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let done = events
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|e| e.reason.as_deref() == Some("EnsuredLoadBalancer"))
            .count();
        let firewall_read = env.stub.count_prefix("GET", "/v2/firewalls") > 0;
        if done >= ensured && firewall_read {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{done} of {ensured} load balancers ensured, firewall read: {firewall_read}; requests: {:#?}",
            env.stub.requests()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // A moment for any write that would follow.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    shutdown.cancel();
    controllers.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takeover_through_the_controllers_makes_no_mutating_call() {
    let apiserver = test_apiserver::TestApiServer::builder()
        .start()
        .await
        .unwrap();
    let client = apiserver.client().unwrap();
    let env = Env::new().await;
    let shared = seed_converged_cluster(&env, &client).await;
    let lbs_before = env.stub.load_balancers();
    let firewalls_before = env.stub.firewalls();
    env.stub.clear_requests();
    run_controllers_until_ensured(&env, &client, shared.len()).await;

    let mut failures = Vec::new();
    for path in [LB_PATH, "/v2/firewalls"] {
        let mutations = env.stub.mutations(path);
        if !mutations.is_empty() {
            failures.push(describe_mutations(&env, &lbs_before, &mutations));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
    assert_eq!(env.stub.load_balancers(), lbs_before);
    assert_eq!(env.stub.firewalls(), firewalls_before);
    apiserver.shutdown().await;
}

/// A dry run of the service, firewall and tags controllers, through the daemon's own dry-run path, with
/// `cloud`.
async fn dry_run(
    apiserver: &test_apiserver::TestApiServer,
    cloud: DigitalOceanCloud,
) -> ccm_app::dry_run::DryRunReport {
    let cloud = std::sync::Arc::new(cloud);
    let mut registry = cloud_provider::Registry::new();
    registry
        .register_fn("digitalocean", move |_config| {
            Ok(cloud.clone() as std::sync::Arc<dyn cloud_provider::CloudProvider>)
        })
        .unwrap();
    registry.declare_controllers(
        "digitalocean",
        &[
            provider_digitalocean::firewall::FIREWALL_CONTROLLER,
            provider_digitalocean::tags::TAGS_CONTROLLER,
        ],
    );
    let args = [
        "cloud-controller-manager".to_string(),
        "--cloud-provider=digitalocean".to_string(),
        format!("--kubeconfig={}", apiserver.kubeconfig_path().display()),
        "--controllers=service-lb-controller,firewall-controller,tags-controller".to_string(),
    ];
    ccm_app::dry_run_with_args(registry, args).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_of_a_converged_cluster_is_in_sync_and_sends_no_mutating_request() {
    let apiserver = test_apiserver::TestApiServer::builder()
        .start()
        .await
        .unwrap();
    let client = apiserver.client().unwrap();
    let env = Env::new().await;
    let shared = seed_converged_cluster(&env, &client).await;
    // The Services as upstream's CCM left them (finalizers, ingress, annotations): what the controllers
    // write on a converged cluster, without a cloud change (see the test above).
    run_controllers_until_ensured(&env, &client, shared.len()).await;
    env.stub.clear_requests();

    let report = dry_run(&apiserver, takeover_cloud(&env)).await;
    assert_eq!(report.exit_code(), 0, "{}", report.table());
    let firewall = format!("cloud/firewall/{FIREWALL_NAME}");
    assert_eq!(
        report.objects[&firewall].status(),
        "in sync",
        "{}",
        report.table()
    );
    // Upstream tagged every load balancer it made: the tags controller has nothing to do.
    assert_eq!(
        report.objects["cloud/tag/k8s:c-1"].status(),
        "in sync",
        "{}",
        report.table()
    );
    let in_sync = report
        .objects
        .iter()
        .filter(|(name, r)| name.starts_with("service/") && r.status() == "in sync")
        .count();
    assert_eq!(in_sync, shared.len(), "{}", report.table());

    // A Service without a load balancer: the create is reported, and the stub never sees it.
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let missing = service("missing", &[], web_ports(31500));
    services
        .create(&PostParams::default(), &missing)
        .await
        .unwrap();
    let report = dry_run(&apiserver, takeover_cloud(&env)).await;
    assert_eq!(report.exit_code(), 3, "{}", report.table());
    let changes = &report.objects["service/default/missing"].changes;
    assert!(
        changes
            .iter()
            .any(|c| c.starts_with("cloud POST /v2/load_balancers")),
        "{}",
        report.table()
    );
    let mutations: Vec<_> = env
        .stub
        .requests()
        .into_iter()
        .filter(|r| r.is_mutating())
        .collect();
    assert!(mutations.is_empty(), "{mutations:#?}");
    apiserver.shutdown().await;
}
