//! The LoadBalancer capability against the stub (and, for annotation write-back, the in-memory API server).

mod support;

use std::time::Duration;

use cloud_provider::{CloudProvider, LoadBalancer as _, PvLabeler};
use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, PersistentVolume, PersistentVolumeSpec, Service,
};
use kube::Api;
use provider_digitalocean::annotations::*;
use provider_digitalocean::stub::{DoStub, DropletSpec, Fault};
use serde_json::json;
use support::{cloud_for, cloud_with, droplet_node, dual_stack_node, lb_service, node};

const UID: &str = "6f0c2b4e-1a2b-4c3d-9e8f-0123456789ab";
const DEFAULT_NAME: &str = "a6f0c2b4e1a2b4c3d9e8f0123456789a";

fn two_droplets(stub: &DoStub) -> (u64, u64) {
    (
        stub.add_droplet(DropletSpec::new("n1")),
        stub.add_droplet(DropletSpec::new("n2")),
    )
}

fn writes(stub: &DoStub) -> usize {
    stub.count_prefix("POST", "/v2/load_balancers")
        + stub.count_prefix("PUT", "/v2/load_balancers")
        + stub.count_prefix("DELETE", "/v2/load_balancers")
}

#[tokio::test]
async fn creates_a_regional_network_load_balancer_by_default() {
    let stub = DoStub::start().await;
    let (a, b) = two_droplets(&stub);
    let cloud = cloud_with(&stub, |c| c.cluster_vpc_id = Some("vpc-cluster".into()));
    let svc = lb_service("web", UID, &[]);
    let status = cloud
        .ensure_load_balancer(
            "kubernetes",
            &svc,
            &[droplet_node("n2", b), droplet_node("n1", a)],
        )
        .await
        .unwrap();

    let lbs = stub.load_balancers();
    assert_eq!(lbs.len(), 1);
    let lb = &lbs[0];
    assert_eq!(lb["name"], DEFAULT_NAME);
    assert_eq!(lb["type"], "REGIONAL_NETWORK");
    assert_eq!(lb["region"]["slug"], "nyc3");
    assert_eq!(lb["vpc_uuid"], "vpc-cluster");
    assert_eq!(lb["tags"], json!(["k8s:c-1"]));
    assert_eq!(lb["droplet_ids"], json!([a, b]));
    assert_eq!(
        lb["forwarding_rules"],
        json!([
            {"entry_protocol": "tcp", "entry_port": 80, "target_protocol": "tcp", "target_port": 80, "certificate_id": "", "tls_passthrough": false},
            {"entry_protocol": "tcp", "entry_port": 443, "target_protocol": "tcp", "target_port": 443, "certificate_id": "", "tls_passthrough": false}
        ])
    );
    assert_eq!(
        lb["health_check"],
        json!({"protocol": "http", "port": 10256, "path": "/healthz", "check_interval_seconds": 3,
               "response_timeout_seconds": 5, "unhealthy_threshold": 3, "healthy_threshold": 5,
               "proxy_protocol": false})
    );
    assert_eq!(lb["sticky_sessions"], json!({"type": "none"}));
    assert_eq!(lb["firewall"], json!({"allow": [], "deny": []}));
    assert_eq!(lb["network"], "EXTERNAL");
    // IPv4-only nodes: a network load balancer defaults to IPv4.
    assert_eq!(lb["network_stack"], "IPV4");

    let ingress = status.ingress.unwrap();
    assert_eq!(ingress.len(), 1);
    assert_eq!(
        ingress[0].ip.as_ref(),
        lb["ip"].as_str().map(str::to_string).as_ref()
    );
    assert_eq!(ingress[0].ip_mode.as_deref(), Some("VIP"));

    // Ensuring again with the same nodes changes nothing: no write at all.
    cloud
        .ensure_load_balancer(
            "kubernetes",
            &svc,
            &[droplet_node("n1", a), droplet_node("n2", b)],
        )
        .await
        .unwrap();
    assert_eq!(writes(&stub), 1);
    // Another node set updates in place (a full PUT), never creates a second one.
    cloud
        .ensure_load_balancer("kubernetes", &svc, &[droplet_node("n1", a)])
        .await
        .unwrap();
    assert_eq!(stub.load_balancers().len(), 1);
    assert_eq!(stub.count_prefix("POST", "/v2/load_balancers"), 1);
    assert_eq!(stub.count_prefix("PUT", "/v2/load_balancers/"), 1);
    assert_eq!(stub.load_balancers()[0]["droplet_ids"], json!([a]));
}

#[tokio::test]
async fn regional_rules_certificates_and_options() {
    let stub = DoStub::start().await;
    let (a, _) = two_droplets(&stub);
    let cert = stub.add_certificate("www-cert", "custom");
    let cloud = cloud_for(&stub);
    let svc = lb_service(
        "web",
        UID,
        &[
            (ANN_TYPE, "REGIONAL"),
            (ANN_NAME, "web-lb"),
            (ANN_HTTP_PORTS, "80"),
            (ANN_CERTIFICATE_NAME, "www-cert"),
            (ANN_REDIRECT_HTTP_TO_HTTPS, "true"),
            (ANN_SIZE_UNIT, "2"),
            (ANN_ALLOW_RULES, "cidr:10.0.0.0/8"),
            (ANN_DENY_RULES, "ip:192.0.2.1"),
            (ANN_STICKY_SESSIONS_TYPE, "cookies"),
            (ANN_STICKY_SESSIONS_COOKIE_NAME, "lb"),
            (ANN_STICKY_SESSIONS_COOKIE_TTL, "60"),
            (ANN_HTTP_IDLE_TIMEOUT_SECONDS, "90"),
            (ANN_ENABLE_BACKEND_KEEPALIVE, "true"),
        ],
    );
    let status = cloud
        .ensure_load_balancer("kubernetes", &svc, &[droplet_node("n1", a)])
        .await
        .unwrap();
    let lb = &stub.load_balancers()[0];
    assert_eq!(lb["name"], "web-lb");
    assert_eq!(lb["type"], "REGIONAL");
    assert_eq!(
        lb["forwarding_rules"],
        json!([
            {"entry_protocol": "http", "entry_port": 80, "target_protocol": "http", "target_port": 30080, "certificate_id": "", "tls_passthrough": false},
            {"entry_protocol": "https", "entry_port": 443, "target_protocol": "http", "target_port": 30443,
             "certificate_id": cert, "tls_passthrough": false}
        ])
    );
    assert_eq!(lb["redirect_http_to_https"], true);
    assert_eq!(lb["enable_backend_keepalive"], true);
    assert_eq!(lb["size_unit"], 2);
    assert_eq!(lb["http_idle_timeout_seconds"], 90);
    assert_eq!(
        lb["firewall"],
        json!({"allow": ["cidr:10.0.0.0/8"], "deny": ["ip:192.0.2.1"]})
    );
    assert_eq!(
        lb["sticky_sessions"],
        json!({"type": "cookies", "cookie_name": "lb", "cookie_ttl_seconds": 60})
    );
    // The load balancer terminates HTTP: in-cluster clients must go through it.
    assert_eq!(status.ingress.unwrap()[0].ip_mode.as_deref(), Some("Proxy"));
    assert_eq!(cloud.get_load_balancer_name("kubernetes", &svc), "web-lb");

    // An unknown certificate name is an error before any write.
    let svc = lb_service(
        "api",
        "11111111-2222-3333-4444-555555555555",
        &[(ANN_TYPE, "REGIONAL"), (ANN_CERTIFICATE_NAME, "nope")],
    );
    stub.clear_requests();
    let err = cloud
        .ensure_load_balancer("kubernetes", &svc, &[droplet_node("n1", a)])
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("certificate with name \"nope\" not found"),
        "{err}"
    );
    assert_eq!(writes(&stub), 0);

    // An unknown certificate ID is refused by the API (422) and reported.
    let svc = lb_service(
        "api",
        "11111111-2222-3333-4444-555555555555",
        &[(ANN_TYPE, "REGIONAL"), (ANN_CERTIFICATE_ID, "0000-missing")],
    );
    let err = cloud
        .ensure_load_balancer("kubernetes", &svc, &[droplet_node("n1", a)])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("422"), "{err}");
    assert!(
        err.to_string()
            .contains("certificate 0000-missing not found"),
        "{err}"
    );
}

#[tokio::test]
async fn invalid_annotations_fail_before_any_write() {
    let stub = DoStub::start().await;
    let (a, _) = two_droplets(&stub);
    let cloud = cloud_for(&stub);
    // What upstream refuses itself: no request to the API.
    let cases: &[&[(&str, &str)]] = &[
        &[(ANN_TYPE, "GLOBAL")],
        &[(ANN_TYPE, "regional")],
        &[
            (ANN_TYPE, "REGIONAL"),
            (ANN_PROTOCOL, "https"),
            (ANN_CERTIFICATE_ID, ""),
        ],
        &[(ANN_SIZE_SLUG, "lb-small"), (ANN_SIZE_UNIT, "1")],
        &[(ANN_HEALTH_CHECK_INTERVAL_SECONDS, "3s")],
        &[(ANN_ENABLE_PROXY_PROTOCOL, "yes")],
        &[(ANN_DISOWN, "perhaps")],
        &[(ANN_NETWORK, "internal")],
    ];
    for annotations in cases {
        let svc = lb_service("web", UID, annotations);
        let err = cloud
            .ensure_load_balancer("kubernetes", &svc, &[droplet_node("n1", a)])
            .await
            .unwrap_err();
        let key = annotations.last().unwrap().0;
        assert!(err.to_string().contains(key), "{key}: {err}");
    }
    assert_eq!(writes(&stub), 0);

    // What upstream leaves to the API (which refuses it): nothing is created.
    let cases: &[&[(&str, &str)]] = &[
        &[(ANN_DENY_RULES, "everyone")],
        &[(ANN_HEALTH_CHECK_INTERVAL_SECONDS, "1")],
        &[(ANN_HTTP_IDLE_TIMEOUT_SECONDS, "10")],
        &[(ANN_NAME, "bad name")],
    ];
    for annotations in cases {
        let svc = lb_service("web", UID, annotations);
        let err = cloud
            .ensure_load_balancer("kubernetes", &svc, &[droplet_node("n1", a)])
            .await
            .unwrap_err();
        assert!(err.to_string().contains("422"), "{annotations:?}: {err}");
    }
    assert!(stub.load_balancers().is_empty());

    // Annotations upstream does not read for network load balancers are ignored.
    let svc = lb_service(
        "web",
        UID,
        &[(ANN_PROTOCOL, "http"), (ANN_TLS_PORTS, "443")],
    );
    cloud
        .ensure_load_balancer("kubernetes", &svc, &[droplet_node("n1", a)])
        .await
        .unwrap();
    assert_eq!(
        stub.load_balancers()[0]["forwarding_rules"][1]["entry_protocol"],
        "tcp"
    );
}

#[tokio::test]
async fn a_new_load_balancer_asks_for_a_retry_in_15_seconds() {
    let stub = DoStub::builder().activate_after_reads(1).start().await;
    let (a, _) = two_droplets(&stub);
    let cloud = cloud_for(&stub);
    let svc = lb_service("web", UID, &[]);
    let nodes = [droplet_node("n1", a)];
    let err = cloud
        .ensure_load_balancer("kubernetes", &svc, &nodes)
        .await
        .unwrap_err();
    assert_eq!(err.retry_after(), Some(Duration::from_secs(15)), "{err}");
    assert_eq!(stub.load_balancers()[0]["status"], "new");
    // The next sync finds it (by name: no annotation written without a Kubernetes client) and, once
    // active, reports its address.
    let status = cloud
        .ensure_load_balancer("kubernetes", &svc, &nodes)
        .await
        .unwrap();
    assert!(
        status.ingress.unwrap()[0]
            .ip
            .as_deref()
            .is_some_and(|ip| !ip.is_empty())
    );
    assert_eq!(stub.count_prefix("POST", "/v2/load_balancers"), 1);
}

#[tokio::test]
async fn updates_follow_the_node_set() {
    let stub = DoStub::start().await;
    let (a, b) = two_droplets(&stub);
    let c = stub.add_droplet(DropletSpec::new("n3"));
    let cloud = cloud_for(&stub);
    let svc = lb_service("web", UID, &[]);

    // Updating a load balancer that does not exist is an error, and does not create one.
    let err = cloud
        .update_load_balancer("kubernetes", &svc, &[droplet_node("n1", a)])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("does not exist"), "{err}");
    assert_eq!(writes(&stub), 0);

    cloud
        .ensure_load_balancer("kubernetes", &svc, &[droplet_node("n1", a)])
        .await
        .unwrap();
    // A node with another cloud's provider ID fails the sync (as upstream), before any write.
    let err = cloud
        .update_load_balancer(
            "kubernetes",
            &svc,
            &[
                droplet_node("n1", a),
                node("elsewhere", Some("aws:///us-east-1a/i-1")),
            ],
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("aws:///us-east-1a/i-1"), "{err}");
    assert_eq!(stub.count_prefix("PUT", "/v2/load_balancers/"), 0);
    // Nodes without a provider ID are matched by droplet name, or by one of the droplet's addresses.
    let private_of_c = stub.droplet(c).unwrap()["networks"]["v4"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["type"] == "private")
        .unwrap()["ip_address"]
        .as_str()
        .unwrap()
        .to_string();
    cloud
        .update_load_balancer(
            "kubernetes",
            &svc,
            &[
                droplet_node("n1", a),
                node("n2", None),
                node(&private_of_c, None),
            ],
        )
        .await
        .unwrap();
    let lb = &stub.load_balancers()[0];
    assert_eq!(lb["droplet_ids"], json!([a, b, c]));
    // Every update is a full PUT: the rules and health check are still there.
    assert_eq!(lb["forwarding_rules"].as_array().unwrap().len(), 2);
    assert_eq!(lb["health_check"]["port"], 10256);
    assert_eq!(stub.count_prefix("PUT", "/v2/load_balancers/"), 1);

    // No node mapping to a droplet is an error and leaves the load balancer as it was (upstream would
    // empty it).
    let err = cloud
        .update_load_balancer("kubernetes", &svc, &[node("ghost", None)])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no eligible nodes"), "{err}");
    assert_eq!(stub.load_balancers()[0]["droplet_ids"], json!([a, b, c]));
    let err = cloud
        .ensure_load_balancer("kubernetes", &svc, &[])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no ready nodes"), "{err}");
    // Nodes without a public address cannot back an external network load balancer.
    let err = cloud
        .ensure_load_balancer(
            "kubernetes",
            &svc,
            &[support::bare_node(
                "n1",
                Some(&format!("digitalocean://{a}")),
            )],
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no eligible backends"), "{err}");
    assert_eq!(stub.count_prefix("PUT", "/v2/load_balancers/"), 1);
}

#[tokio::test]
async fn adopts_a_load_balancer_by_id_and_keeps_its_type() {
    let stub = DoStub::start().await;
    let (a, _) = two_droplets(&stub);
    let existing = stub.insert_load_balancer(json!({
        "name": "made-by-hand",
        "region": "nyc3",
        "type": "REGIONAL",
        "forwarding_rules": [{"entry_protocol": "tcp", "entry_port": 8080, "target_protocol": "tcp", "target_port": 31000}],
        "droplet_ids": [a],
    }));
    let cloud = cloud_for(&stub);
    // The hand-made load balancer is IPv4 (the API default) and its stack cannot change.
    let svc = lb_service(
        "web",
        UID,
        &[
            (ANN_LOAD_BALANCER_ID, &existing),
            (ANN_NETWORK_STACK, "IPV4"),
        ],
    );
    cloud
        .ensure_load_balancer("kubernetes", &svc, &[droplet_node("n1", a)])
        .await
        .unwrap();
    let lbs = stub.load_balancers();
    assert_eq!(lbs.len(), 1);
    assert_eq!(lbs[0]["id"], existing.as_str());
    // Renamed and reconfigured for the Service, still REGIONAL (node ports as targets).
    assert_eq!(lbs[0]["name"], DEFAULT_NAME);
    assert_eq!(lbs[0]["type"], "REGIONAL");
    assert_eq!(lbs[0]["forwarding_rules"][0]["target_port"], 30080);
    assert_eq!(
        stub.count("GET", &format!("/v2/load_balancers/{existing}")),
        1
    );
    assert_eq!(stub.count_prefix("POST", "/v2/load_balancers"), 0);

    // Asking for another type than the existing one keeps the existing type (as upstream, which also
    // overwrites the annotation): nothing to change.
    let svc = lb_service(
        "web",
        UID,
        &[
            (ANN_LOAD_BALANCER_ID, &existing),
            (ANN_TYPE, "REGIONAL_NETWORK"),
            (ANN_NETWORK_STACK, "IPV4"),
        ],
    );
    cloud
        .ensure_load_balancer("kubernetes", &svc, &[droplet_node("n1", a)])
        .await
        .unwrap();
    assert_eq!(stub.load_balancers()[0]["type"], "REGIONAL");
    assert_eq!(stub.count_prefix("PUT", "/v2/load_balancers/"), 1);

    // A stale ID falls back to the name.
    let svc = lb_service(
        "web",
        UID,
        &[
            (ANN_LOAD_BALANCER_ID, "00000000-dead"),
            (ANN_NETWORK_STACK, "IPV4"),
        ],
    );
    cloud
        .ensure_load_balancer("kubernetes", &svc, &[droplet_node("n1", a)])
        .await
        .unwrap();
    assert_eq!(stub.load_balancers().len(), 1);
    assert_eq!(stub.count_prefix("POST", "/v2/load_balancers"), 0);
}

#[tokio::test]
async fn keeps_a_renewed_lets_encrypt_certificate() {
    let stub = DoStub::start().await;
    let (a, _) = two_droplets(&stub);
    let old = stub.add_certificate("le", "lets_encrypt");
    let renewed = stub.add_certificate("le", "lets_encrypt");
    let custom = stub.add_certificate("custom", "custom");
    let cloud = cloud_for(&stub);
    let svc = lb_service(
        "web",
        UID,
        &[(ANN_TYPE, "REGIONAL"), (ANN_CERTIFICATE_ID, &old)],
    );
    let nodes = [droplet_node("n1", a)];
    cloud
        .ensure_load_balancer("kubernetes", &svc, &nodes)
        .await
        .unwrap();
    let id = stub.load_balancers()[0]["id"].as_str().unwrap().to_string();
    assert_eq!(
        stub.load_balancers()[0]["forwarding_rules"][1]["certificate_id"],
        old.as_str()
    );

    // DigitalOcean renewed the certificate: the load balancer now carries another UUID.
    stub.modify_load_balancer(&id, |lb| {
        lb["forwarding_rules"][1]["certificate_id"] = json!(renewed)
    });
    cloud
        .ensure_load_balancer("kubernetes", &svc, &nodes)
        .await
        .unwrap();
    assert_eq!(
        stub.load_balancers()[0]["forwarding_rules"][1]["certificate_id"],
        renewed.as_str()
    );

    // A custom certificate on the load balancer is replaced by the annotated one.
    stub.modify_load_balancer(&id, |lb| {
        lb["forwarding_rules"][1]["certificate_id"] = json!(custom)
    });
    cloud
        .ensure_load_balancer("kubernetes", &svc, &nodes)
        .await
        .unwrap();
    assert_eq!(
        stub.load_balancers()[0]["forwarding_rules"][1]["certificate_id"],
        old.as_str()
    );

    // So is a Let's Encrypt certificate of another name (not a renewal of the annotated one).
    let other_le = stub.add_certificate("other-le", "lets_encrypt");
    stub.modify_load_balancer(&id, |lb| {
        lb["forwarding_rules"][1]["certificate_id"] = json!(other_le)
    });
    cloud
        .ensure_load_balancer("kubernetes", &svc, &nodes)
        .await
        .unwrap();
    assert_eq!(
        stub.load_balancers()[0]["forwarding_rules"][1]["certificate_id"],
        old.as_str()
    );

    // When the annotated certificate no longer exists, the load balancer's Let's Encrypt one is kept.
    let gone = "00000000-0000-4000-8000-00000000dead";
    let svc = lb_service(
        "web",
        UID,
        &[(ANN_TYPE, "REGIONAL"), (ANN_CERTIFICATE_ID, gone)],
    );
    stub.modify_load_balancer(&id, |lb| {
        lb["forwarding_rules"][1]["certificate_id"] = json!(renewed)
    });
    stub.clear_requests();
    cloud
        .ensure_load_balancer("kubernetes", &svc, &nodes)
        .await
        .unwrap();
    assert_eq!(stub.count_prefix("PUT", "/v2/load_balancers/"), 0);
    assert_eq!(stub.count("GET", &format!("/v2/certificates/{gone}")), 1);
}

#[tokio::test]
async fn disowned_load_balancers_are_never_mutated() {
    let stub = DoStub::start().await;
    let (a, b) = two_droplets(&stub);
    let cloud = cloud_for(&stub);
    let nodes = [droplet_node("n1", a)];
    let svc = lb_service("web", UID, &[]);
    cloud
        .ensure_load_balancer("kubernetes", &svc, &nodes)
        .await
        .unwrap();
    let before = stub.load_balancers();

    let mut disowned = lb_service("web", UID, &[(ANN_DISOWN, "true"), (ANN_SIZE_UNIT, "4")]);
    let reported = k8s_openapi::api::core::v1::LoadBalancerStatus {
        ingress: Some(vec![k8s_openapi::api::core::v1::LoadBalancerIngress {
            ip: Some("192.0.2.99".into()),
            ..Default::default()
        }]),
    };
    disowned.status = Some(k8s_openapi::api::core::v1::ServiceStatus {
        load_balancer: Some(reported.clone()),
        ..Default::default()
    });
    stub.clear_requests();
    // The Service's own status is reported, as upstream does, without asking the API.
    let status = cloud
        .ensure_load_balancer(
            "kubernetes",
            &disowned,
            &[droplet_node("n1", a), droplet_node("n2", b)],
        )
        .await
        .unwrap();
    assert_eq!(status, reported);
    assert!(stub.requests().is_empty());
    cloud
        .update_load_balancer("kubernetes", &disowned, &[droplet_node("n2", b)])
        .await
        .unwrap();
    cloud
        .ensure_load_balancer_deleted("kubernetes", &disowned)
        .await
        .unwrap();
    assert_eq!(writes(&stub), 0);
    assert_eq!(stub.load_balancers(), before);

    // A disowned Service without a load balancer does not get one.
    let other = lb_service(
        "other",
        "99999999-2222-3333-4444-555555555555",
        &[(ANN_DISOWN, "1")],
    );
    let status = cloud
        .ensure_load_balancer("kubernetes", &other, &nodes)
        .await
        .unwrap();
    assert_eq!(status.ingress, None);
    assert_eq!(writes(&stub), 0);
}

#[tokio::test]
async fn deletion_is_idempotent() {
    let stub = DoStub::start().await;
    let (a, _) = two_droplets(&stub);
    let cloud = cloud_for(&stub);
    let svc = lb_service("web", UID, &[]);
    assert!(
        cloud
            .get_load_balancer("kubernetes", &svc)
            .await
            .unwrap()
            .is_none()
    );
    // Nothing to delete.
    cloud
        .ensure_load_balancer_deleted("kubernetes", &svc)
        .await
        .unwrap();
    assert_eq!(writes(&stub), 0);

    cloud
        .ensure_load_balancer("kubernetes", &svc, &[droplet_node("n1", a)])
        .await
        .unwrap();
    let status = cloud
        .get_load_balancer("kubernetes", &svc)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.ingress.unwrap().len(), 1);
    cloud
        .ensure_load_balancer_deleted("kubernetes", &svc)
        .await
        .unwrap();
    assert!(stub.load_balancers().is_empty());
    assert_eq!(stub.count_prefix("DELETE", "/v2/load_balancers/"), 1);

    // A 404 on DELETE (someone else deleted it first) is success too.
    cloud
        .ensure_load_balancer("kubernetes", &svc, &[droplet_node("n1", a)])
        .await
        .unwrap();
    stub.inject(Fault::status("DELETE", "/v2/load_balancers/", 404, 1));
    cloud
        .ensure_load_balancer_deleted("kubernetes", &svc)
        .await
        .unwrap();
    // Other failures are errors.
    stub.inject(Fault::status("DELETE", "/v2/load_balancers/", 403, 1));
    let err = cloud
        .ensure_load_balancer_deleted("kubernetes", &svc)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("403"), "{err}");
}

#[tokio::test]
async fn hostname_and_dual_stack_status() {
    let stub = DoStub::start().await;
    let (a, b) = two_droplets(&stub);
    let cloud = cloud_for(&stub);
    // The hostname is reported lowercased instead of the addresses.
    let svc = lb_service(
        "web",
        UID,
        &[(ANN_HOSTNAME, "LB.example.com"), (ANN_TYPE, "REGIONAL")],
    );
    let status = cloud
        .ensure_load_balancer("kubernetes", &svc, &[droplet_node("n1", a)])
        .await
        .unwrap();
    let ingress = status.ingress.unwrap();
    assert_eq!(ingress.len(), 1);
    assert_eq!(ingress[0].hostname.as_deref(), Some("lb.example.com"));
    assert_eq!(ingress[0].ip, None);
    // REGIONAL load balancers are dual-stack by default.
    assert_eq!(stub.load_balancers()[0]["network_stack"], "DUALSTACK");

    // A network load balancer over dual-stack nodes is dual-stack, created with the reserved address.
    let svc = lb_service(
        "dual",
        "77777777-2222-3333-4444-555555555555",
        &[(ANN_IP, "203.0.113.200")],
    );
    let dual = [dual_stack_node("n1", a), dual_stack_node("n2", b)];
    let status = cloud
        .ensure_load_balancer("kubernetes", &svc, &dual)
        .await
        .unwrap();
    let ips: Vec<String> = status
        .ingress
        .unwrap()
        .into_iter()
        .filter_map(|i| i.ip)
        .collect();
    assert_eq!(ips.len(), 2);
    assert_eq!(ips[0], "203.0.113.200");
    assert!(ips[1].contains(':'));

    // Asking for dual-stack with an IPv4-only node is refused, naming the node.
    let svc = lb_service(
        "v4",
        "88888888-2222-3333-4444-555555555555",
        &[(ANN_NETWORK_STACK, "DUALSTACK")],
    );
    let err = cloud
        .ensure_load_balancer(
            "kubernetes",
            &svc,
            &[dual_stack_node("n1", a), droplet_node("n2", b)],
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("lack IPv6 addresses: n2"), "{err}");
    assert_eq!(stub.load_balancers().len(), 2);
}

async fn create_service(client: &kube::Client, svc: &Service) -> Service {
    let api: Api<Service> = Api::namespaced(client.clone(), "default");
    let mut svc = svc.clone();
    svc.metadata.uid = None;
    for p in svc.spec.as_mut().unwrap().ports.as_mut().unwrap() {
        p.node_port = None;
    }
    api.create(&Default::default(), &svc).await.unwrap()
}

#[tokio::test]
async fn writes_the_id_type_and_renewed_certificate_back_to_the_service() {
    let apiserver = test_apiserver::TestApiServer::builder()
        .start()
        .await
        .unwrap();
    let client = apiserver.client().unwrap();
    let stub = DoStub::start().await;
    let (a, _) = two_droplets(&stub);
    let cloud = cloud_for(&stub);
    cloud.set_kube_client(client.clone());
    let services: Api<Service> = Api::namespaced(client.clone(), "default");

    let svc = create_service(&client, &lb_service("web", UID, &[])).await;
    cloud
        .ensure_load_balancer("kubernetes", &svc, &[droplet_node("n1", a)])
        .await
        .unwrap();
    let stored = services.get("web").await.unwrap();
    let annotations = stored.metadata.annotations.unwrap();
    let lb = &stub.load_balancers()[0];
    assert_eq!(
        annotations.get(ANN_LOAD_BALANCER_ID).map(String::as_str),
        lb["id"].as_str()
    );
    assert_eq!(
        annotations.get(ANN_TYPE).map(String::as_str),
        Some("REGIONAL_NETWORK")
    );

    // With the annotations in place, the next sync looks the load balancer up by ID and writes nothing.
    let stored = services.get("web").await.unwrap();
    stub.clear_requests();
    cloud
        .ensure_load_balancer("kubernetes", &stored, &[droplet_node("n1", a)])
        .await
        .unwrap();
    assert_eq!(stub.count_prefix("GET", "/v2/load_balancers/"), 1);
    assert_eq!(stub.count("GET", "/v2/load_balancers"), 0);
    let rv = stored.metadata.resource_version.clone();
    assert_eq!(
        services.get("web").await.unwrap().metadata.resource_version,
        rv
    );

    // A renewed Let's Encrypt certificate is recorded on the Service.
    let old = stub.add_certificate("le", "lets_encrypt");
    let renewed = stub.add_certificate("le", "lets_encrypt");
    let tls = create_service(
        &client,
        &lb_service(
            "tls",
            UID,
            &[(ANN_TYPE, "REGIONAL"), (ANN_CERTIFICATE_ID, &old)],
        ),
    )
    .await;
    cloud
        .ensure_load_balancer("kubernetes", &tls, &[droplet_node("n1", a)])
        .await
        .unwrap();
    let tls = services.get("tls").await.unwrap();
    let id = tls.metadata.annotations.as_ref().unwrap()[ANN_LOAD_BALANCER_ID].clone();
    stub.modify_load_balancer(&id, |lb| {
        lb["forwarding_rules"][1]["certificate_id"] = json!(renewed)
    });
    cloud
        .ensure_load_balancer("kubernetes", &tls, &[droplet_node("n1", a)])
        .await
        .unwrap();
    let tls = services.get("tls").await.unwrap();
    assert_eq!(
        tls.metadata.annotations.unwrap()[ANN_CERTIFICATE_ID],
        renewed
    );
    apiserver.shutdown().await;
}

#[tokio::test]
async fn node_and_stack_conflicts_are_also_reported_as_load_balancer_config_error_events() {
    let apiserver = test_apiserver::TestApiServer::builder()
        .start()
        .await
        .unwrap();
    let client = apiserver.client().unwrap();
    let stub = DoStub::start().await;
    let (a, _) = two_droplets(&stub);
    let cloud = cloud_for(&stub);
    cloud.set_kube_client(client.clone());
    let svc = create_service(
        &client,
        &lb_service(
            "web",
            UID,
            &[(ANN_NETWORK, "INTERNAL"), (ANN_NETWORK_STACK, "DUALSTACK")],
        ),
    )
    .await;
    let err = cloud
        .ensure_load_balancer("kubernetes", &svc, &[droplet_node("n1", a)])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("internal load balancer"), "{err}");
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client, "default");
    let listed = events.list(&Default::default()).await.unwrap().items;
    let event = listed
        .iter()
        .find(|e| e.reason.as_deref() == Some("LoadBalancerConfigError"))
        .unwrap_or_else(|| panic!("no LoadBalancerConfigError event in {listed:?}"));
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(event.involved_object.name.as_deref(), Some("web"));
    assert_eq!(event.involved_object.uid, svc.metadata.uid);
    assert!(
        event
            .message
            .as_deref()
            .is_some_and(|m| m.contains(ANN_NETWORK_STACK))
    );
    assert_eq!(writes(&stub), 0);
    apiserver.shutdown().await;
}

fn do_pv(handle: &str, driver: &str) -> PersistentVolume {
    PersistentVolume {
        spec: Some(PersistentVolumeSpec {
            csi: Some(CSIPersistentVolumeSource {
                driver: driver.into(),
                volume_handle: handle.into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[tokio::test]
async fn volume_labels() {
    let stub = DoStub::start().await;
    let vol = stub.add_volume("pvc-1", "fra1");
    let cloud = cloud_for(&stub);
    let labels = cloud
        .get_labels_for_volume(&do_pv(&vol, "dobs.csi.digitalocean.com"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        labels
            .get("topology.kubernetes.io/region")
            .map(String::as_str),
        Some("fra1")
    );
    assert_eq!(
        labels
            .get("failure-domain.beta.kubernetes.io/region")
            .map(String::as_str),
        Some("fra1")
    );
    assert_eq!(labels.len(), 2);
    assert!(
        cloud
            .get_labels_for_volume(&do_pv(&vol, "ebs.csi.aws.com"))
            .await
            .unwrap()
            .is_none()
    );
    let err = cloud
        .get_labels_for_volume(&do_pv("missing", "dobs.csi.digitalocean.com"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, cloud_provider::CloudError::DiskNotFound),
        "{err}"
    );
    assert!(cloud.pv_labeler().is_some());
}
