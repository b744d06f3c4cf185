use std::net::SocketAddr;

use cloud_provider::{CloudProvider, InstancesV2, LoadBalancer};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{cloud, node, service};
use crate::{AdminError, FakeCloud, FakeConfig};

/// A minimal HTTP/1.1 client: one request per connection; the status, the head and the body.
async fn call_text(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> (u16, String, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let body = body.unwrap_or("");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, payload) = text.split_once("\r\n\r\n").unwrap();
    let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head.to_string(), payload.to_string())
}

/// [`call_text`] with a JSON answer.
async fn call(addr: SocketAddr, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
    let (status, _, payload) = call_text(addr, method, path, body).await;
    let value = if payload.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&payload).unwrap()
    };
    (status, value)
}

async fn served(yaml: &str) -> (FakeCloud, SocketAddr) {
    let c = cloud(yaml);
    let addr = c.serve_admin("127.0.0.1:0".parse().unwrap()).await.unwrap();
    (c, addr)
}

#[tokio::test]
async fn state_and_instance_control() {
    let (c, addr) = served("zones: [z1]\n").await;
    c.instance_exists(&node("n1")).await.unwrap();
    let (status, state) = call(addr, "GET", "/state", None).await;
    assert_eq!(status, 200);
    assert_eq!(state["zones"], json!(["z1"]));
    assert_eq!(state["instances"][0]["name"], "n1");
    assert_eq!(state["instances"][0]["zone"], "z1");
    assert_eq!(state["calls"]["instance_exists"], 1);

    let (status, rec) = call(addr, "POST", "/instances/n1/stop", None).await;
    assert_eq!((status, rec["state"].clone()), (200, json!("stopped")));
    assert!(c.instance_shutdown(&node("n1")).await.unwrap());
    let (status, rec) = call(addr, "POST", "/instances/n1/start", None).await;
    assert_eq!((status, rec["state"].clone()), (200, json!("running")));
    let (status, _) = call(addr, "POST", "/instances/n1/terminate", None).await;
    assert_eq!(status, 200);
    assert!(!c.instance_exists(&node("n1")).await.unwrap());
    let (status, body) = call(addr, "POST", "/instances/n1/start", None).await;
    assert_eq!(status, 404);
    assert!(body["error"].as_str().unwrap().contains("terminated"));
    let (status, body) = call(addr, "GET", "/instances/n1", None).await;
    assert_eq!(status, 404, "{body}");

    let (status, rec) = call(addr, "POST", "/instances", Some(r#"{"name":"n2","id":"i-2","state":"stopped","addresses":[{"type":"InternalIP","address":"10.0.0.2"}]}"#)).await;
    assert_eq!(status, 201, "{rec}");
    assert_eq!(rec["providerID"], "fake://i-2");
    let (status, rec) = call(addr, "GET", "/instances/n2", None).await;
    assert_eq!(
        (status, rec["addresses"][0]["address"].clone()),
        (200, json!("10.0.0.2"))
    );
    let (status, list) = call(addr, "GET", "/instances", None).await;
    assert_eq!((status, list.as_array().unwrap().len()), (200, 1));
    let (status, body) = call(addr, "POST", "/instances", Some(r#"{"name":"n2"}"#)).await;
    assert_eq!(status, 409, "{body}");
}

#[tokio::test]
async fn bad_requests_get_400_with_a_reason() {
    let (_c, addr) = served("").await;
    let cases = [
        (
            "POST",
            "/instances/n1/reboot",
            None,
            "unknown instance action \"reboot\"",
        ),
        ("POST", "/faults", Some("{not json"), "invalid JSON body"),
        ("POST", "/faults", None, "request body is empty"),
        (
            "POST",
            "/faults",
            Some(r#"{"operation":"nope","errorRate":0.5}"#),
            "unknown operation \"nope\"",
        ),
        (
            "POST",
            "/faults",
            Some(r#"{"operation":"master","errorRate":2}"#),
            "errorRate must be between 0 and 1",
        ),
        (
            "POST",
            "/faults",
            Some(r#"{"operation":"master","errorRate":0.5,"colour":"red"}"#),
            "unknown field `colour`",
        ),
        (
            "POST",
            "/faults",
            Some(r#"{"operation":"master","kind":"explode"}"#),
            "unknown variant `explode`",
        ),
        (
            "POST",
            "/faults",
            Some(r#"{"operation":"create_route","kind":"notFound","errorRate":1}"#),
            "notFound has no meaning",
        ),
        (
            "POST",
            "/instances",
            Some(r#"{"id":"x"}"#),
            "missing field `name`",
        ),
        (
            "POST",
            "/instances",
            Some(r#"{"name":"a","zone":"mars"}"#),
            "instance.zone: \"mars\" is not a configured zone",
        ),
    ];
    for (method, path, body, want) in cases {
        let (status, value) = call(addr, method, path, body).await;
        assert_eq!(status, 400, "{method} {path} {body:?}: {value}");
        let reason = value["error"].as_str().unwrap();
        assert!(
            reason.contains(want),
            "{method} {path}: {reason:?} should contain {want:?}"
        );
    }
    let (status, value) = call(addr, "GET", "/nowhere", None).await;
    assert_eq!(status, 404);
    assert!(
        value["error"]
            .as_str()
            .unwrap()
            .contains("no such admin API route")
    );
    let (status, _) = call(addr, "POST", "/instances/ghost/stop", None).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn faults_calls_lbs_and_routes_over_http() {
    let (c, addr) = served("").await;
    let (status, faults) = call(addr, "POST", "/faults", Some(r#"{"operation":"ensure_load_balancer","errorRate":1,"kind":"retry","retryAfterMs":250}"#)).await;
    assert_eq!(status, 200);
    assert_eq!(faults["ensure_load_balancer"]["kind"], "retry");
    let svc = service(
        "web",
        "12345678-0000-0000-0000-000000000000",
        &[(80, 30080)],
    );
    let err = c
        .ensure_load_balancer("k", &svc, &[node("n")])
        .await
        .unwrap_err();
    assert_eq!(
        err.retry_after(),
        Some(std::time::Duration::from_millis(250))
    );
    let (status, _) = call(addr, "DELETE", "/faults/ensure_load_balancer", None).await;
    assert_eq!(status, 204);
    let (status, _) = call(addr, "DELETE", "/faults/ensure_load_balancer", None).await;
    assert_eq!(status, 404);
    c.ensure_load_balancer("k", &svc, &[node("n")])
        .await
        .unwrap();

    let (status, lbs) = call(addr, "GET", "/loadbalancers", None).await;
    assert_eq!(status, 200);
    assert_eq!(lbs[0]["ip"], "198.51.100.1");
    assert_eq!(lbs[0]["service"], "default/web");
    assert_eq!(lbs[0]["nodes"], json!(["n"]));

    let routes = c.routes().unwrap();
    let route = cloud_provider::Route {
        target_node: "n".into(),
        destination_cidr: "10.244.0.0/24".into(),
        ..Default::default()
    };
    routes.create_route("k", "hint", &route).await.unwrap();
    let (status, rs) = call(addr, "GET", "/routes", None).await;
    assert_eq!(status, 200);
    assert_eq!(rs[0]["name"], "k-hint-10-244-0-0-24");
    assert_eq!(rs[0]["destinationCIDR"], "10.244.0.0/24");

    let (status, calls) = call(addr, "GET", "/calls", None).await;
    assert_eq!(
        (status, calls["ensure_load_balancer"].clone()),
        (200, json!(2))
    );
    let (status, _) = call(addr, "DELETE", "/calls", None).await;
    assert_eq!(status, 204);
    assert!(c.handle().calls().is_empty());

    call(
        addr,
        "POST",
        "/faults",
        Some(r#"{"operation":"*","latencyMs":5}"#),
    )
    .await;
    let (status, faults) = call(addr, "GET", "/faults", None).await;
    assert_eq!((status, faults["*"]["latencyMs"].clone()), (200, json!(5)));
    let (status, _) = call(addr, "DELETE", "/faults", None).await;
    assert_eq!(status, 204);
    assert!(c.handle().faults().is_empty());
}

#[tokio::test]
async fn the_cloud_as_a_cloud_config_over_http() {
    let (c, addr) = served("zones: [z1]\n").await;
    let svc = service(
        "web",
        "12345678-0000-0000-0000-000000000000",
        &[(80, 30080)],
    );
    c.ensure_load_balancer("kubernetes", &svc, &[node("n")])
        .await
        .unwrap();
    let route = cloud_provider::Route {
        target_node: "n".into(),
        destination_cidr: "10.244.0.0/24".into(),
        ..Default::default()
    };
    c.routes()
        .unwrap()
        .create_route("kubernetes", "hint", &route)
        .await
        .unwrap();
    let (status, head, yaml) = call_text(addr, "GET", "/config", None).await;
    assert_eq!(status, 200);
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/yaml"),
        "{head}"
    );
    let config = FakeConfig::from_yaml(yaml.as_bytes()).unwrap();
    assert_eq!(config, c.handle().cloud_config());
    assert_eq!(config.load_balancers[0].ip.as_deref(), Some("198.51.100.1"));
    assert_eq!(
        config.routes[0].name.as_deref(),
        Some("kubernetes-hint-10-244-0-0-24")
    );
    let second = FakeCloud::from_yaml(yaml.as_bytes()).unwrap();
    assert_eq!(
        second.get_load_balancer("kubernetes", &svc).await.unwrap(),
        c.get_load_balancer("kubernetes", &svc).await.unwrap()
    );
}

#[tokio::test]
async fn serve_admin_rules() {
    let c = cloud("");
    let err = c
        .serve_admin("192.0.2.1:8080".parse().unwrap())
        .await
        .unwrap_err();
    assert!(matches!(err, AdminError::NotLoopback(_)));
    let addr = c.serve_admin("127.0.0.1:0".parse().unwrap()).await.unwrap();
    assert_eq!(c.admin_address(), Some(addr));
    assert_eq!(c.handle().admin_address(), Some(addr));
    assert!(matches!(
        c.serve_admin("127.0.0.1:0".parse().unwrap()).await,
        Err(AdminError::AlreadyServing(a)) if a == addr
    ));
    // A port already in use is a bind error naming the address.
    let other = cloud("");
    let err = other.serve_admin(addr).await.unwrap_err();
    assert!(
        err.to_string()
            .starts_with(&format!("could not listen on {addr}")),
        "{err}"
    );
}

#[tokio::test]
async fn initialize_starts_the_configured_admin_api() {
    // Reserve a free port, release it, and configure it.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let c = cloud(&format!("adminAddress: 127.0.0.1:{port}\n"));
    assert_eq!(c.admin_address(), None);
    let client = offline_client();
    c.initialize(client.clone()).await.unwrap();
    let addr = c.admin_address().unwrap();
    assert_eq!(addr.port(), port);
    // Initializing again keeps the running server.
    c.initialize(client).await.unwrap();
    let (status, state) = call(addr, "GET", "/state", None).await;
    assert_eq!(
        (status, state["region"].clone()),
        (200, json!("fake-region-1"))
    );
    // Without adminAddress nothing is served.
    let quiet = cloud("");
    quiet.initialize(offline_client()).await.unwrap();
    assert_eq!(quiet.admin_address(), None);
}

/// A kube client pointing at an address nothing listens on; `initialize` never uses it.
fn offline_client() -> cloud_provider::kube::Client {
    let config = cloud_provider::kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    cloud_provider::kube::Client::try_from(config).unwrap()
}
