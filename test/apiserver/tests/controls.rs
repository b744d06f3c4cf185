//! Test controls of the in-process server: fault injection, latency, closing watches, counters,
//! the request log, the admin endpoints, required authentication and HTTP/2.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{assert_status, client_for, raw, raw_json};
use http_body_util::BodyExt;
use hyper_util::rt::{TokioExecutor, TokioIo};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{ListParams, WatchParams};
use serde_json::{Value, json};
use test_apiserver::{AccessRule, FaultRule, LatencyRule, RequestKey, TestApiServer, UserInfo};

async fn server() -> (TestApiServer, kube::Client) {
    let s = TestApiServer::builder().start().await.unwrap();
    let c = client_for(s.kubeconfig_path()).await;
    (s, c)
}

async fn new_node(c: &kube::Client, name: &str) {
    let r = raw_json(
        c,
        "POST",
        "/api/v1/nodes",
        &json!({"apiVersion":"v1","kind":"Node","metadata":{"name":name}}),
    )
    .await;
    assert_eq!(r.code, 201);
}

#[tokio::test]
async fn faults_fire_as_configured() {
    let (s, c) = server().await;
    let controls = s.controls();
    new_node(&c, "a").await;
    controls.fail(FaultRule::new(500).verb("patch").resource("nodes").times(2));
    let patch = || {
        raw(
            &c,
            "PATCH",
            "/api/v1/nodes/a",
            Some("application/merge-patch+json"),
            r#"{"metadata":{"labels":{"x":"y"}}}"#,
        )
    };
    let first = patch().await;
    assert_status(&first, 500, "InternalError");
    assert_eq!(patch().await.code, 500);
    assert_eq!(
        patch().await.code,
        200,
        "the rule is spent after two failures"
    );
    assert!(controls.faults().is_empty());
    // Status subresource requests match a rule without subresource, but not one for "" only.
    controls.fail(
        FaultRule::new(503)
            .verb("patch")
            .resource("nodes")
            .subresource("")
            .retry_after(2),
    );
    let st = raw(
        &c,
        "PATCH",
        "/api/v1/nodes/a/status",
        Some("application/merge-patch+json"),
        r#"{"status":{}}"#,
    )
    .await;
    assert_eq!(st.code, 200);
    let main = patch().await;
    assert_status(&main, 503, "ServiceUnavailable");
    assert_eq!(main.headers.get("retry-after").unwrap(), "2");
    assert_eq!(main.body["details"]["retryAfterSeconds"], 2);
    controls.clear_faults();

    // A rate draws from the seeded generator.
    let id = controls.fail(FaultRule::new(429).verb("get").rate(0.5));
    let mut failed = 0;
    for _ in 0..200 {
        let r = raw(&c, "GET", "/api/v1/nodes/a", None, "").await;
        if r.code == 429 {
            assert_eq!(r.body["reason"], "TooManyRequests");
            failed += 1;
        } else {
            assert_eq!(r.code, 200);
        }
    }
    assert!((50..150).contains(&failed), "{failed} of 200 failed");
    assert!(controls.remove_fault(id));
    assert_eq!(raw(&c, "GET", "/api/v1/nodes/a", None, "").await.code, 200);

    // Watches can fail too (before the stream starts).
    controls.fail(FaultRule::new(500).verb("watch").times(1));
    let api: Api<Node> = Api::all(c.clone());
    assert!(
        api.watch(&WatchParams::default().timeout(1), "0")
            .await
            .is_err()
    );
}

#[tokio::test]
async fn latency_applies_to_matching_requests() {
    let (s, c) = server().await;
    s.controls().add_latency(
        LatencyRule::new(Duration::from_millis(300))
            .verb("list")
            .resource("nodes"),
    );
    let t = Instant::now();
    assert_eq!(raw(&c, "GET", "/api/v1/nodes", None, "").await.code, 200);
    assert!(t.elapsed() >= Duration::from_millis(300));
    let t = Instant::now();
    assert_eq!(
        raw(&c, "GET", "/api/v1/namespaces", None, "").await.code,
        200
    );
    assert!(t.elapsed() < Duration::from_millis(300));
    s.controls().clear_latency();
    let t = Instant::now();
    raw(&c, "GET", "/api/v1/nodes", None, "").await;
    assert!(t.elapsed() < Duration::from_millis(300));
}

#[tokio::test]
async fn closing_watches_ends_streams() {
    let (s, c) = server().await;
    let controls = s.controls();
    let api: Api<Node> = Api::all(c.clone());
    let mut stream = api
        .watch(&WatchParams::default().timeout(60), "0")
        .await
        .unwrap()
        .boxed();
    let deadline = Instant::now() + Duration::from_secs(5);
    while controls.open_watches() != 1 {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    controls.close_watches();
    let end = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(ev) = stream.next().await {
            ev.unwrap();
        }
    })
    .await;
    assert!(end.is_ok(), "the stream ended");
    let deadline = Instant::now() + Duration::from_secs(5);
    while controls.open_watches() != 0 {
        assert!(Instant::now() < deadline, "watch counter went back to 0");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

use futures::StreamExt;

#[tokio::test]
async fn counters_and_request_log() {
    let (s, c) = server().await;
    let controls = s.controls();
    controls.reset_counts();
    controls.clear_request_log();
    new_node(&c, "n").await;
    raw(&c, "GET", "/api/v1/nodes/n", None, "").await;
    raw(&c, "GET", "/api/v1/nodes/missing", None, "").await;
    raw(
        &c,
        "PATCH",
        "/api/v1/nodes/n/status",
        Some("application/merge-patch+json"),
        r#"{"status":{}}"#,
    )
    .await;
    raw(
        &c,
        "GET",
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases",
        None,
        "",
    )
    .await;
    let counts = controls.request_counts();
    assert_eq!(counts[&RequestKey::new("create", "nodes")], 1);
    assert_eq!(counts[&RequestKey::new("get", "nodes")], 2);
    assert_eq!(
        counts[&RequestKey::with_subresource("patch", "nodes", "status")],
        1
    );
    assert_eq!(controls.request_count("list", "leases"), 1);
    let log = controls.request_log();
    assert_eq!(log.len(), 5);
    assert_eq!(log[0].verb, "create");
    assert_eq!(log[0].user, "admin");
    assert_eq!(log[2].code, 404);
    assert_eq!(log[2].name, "missing");
    assert_eq!(log[3].subresource, "status");
    assert_eq!(log[4].group, "coordination.k8s.io");
    assert_eq!(log[4].namespace, "kube-system");
    controls.clear_request_log();
    assert!(controls.request_log().is_empty());
}

#[tokio::test]
async fn admin_endpoints() {
    let (s, c) = server().await;
    new_node(&c, "n").await;
    let add = raw_json(
        &c,
        "POST",
        "/_test/faults",
        &json!({"verb":"get","resource":"nodes","status":500,"times":1}),
    )
    .await;
    assert_eq!(add.code, 201);
    assert_eq!(raw(&c, "GET", "/api/v1/nodes/n", None, "").await.code, 500);
    assert_eq!(raw(&c, "GET", "/api/v1/nodes/n", None, "").await.code, 200);
    let bad = raw_json(
        &c,
        "POST",
        "/_test/faults",
        &json!({"status":500,"rate":3.0}),
    )
    .await;
    assert_status(&bad, 400, "BadRequest");
    let lat = raw_json(
        &c,
        "POST",
        "/_test/latency",
        &json!({"verb":"get","millis":200}),
    )
    .await;
    assert_eq!(lat.code, 201);
    let t = Instant::now();
    raw(&c, "GET", "/api/v1/nodes/n", None, "").await;
    assert!(t.elapsed() >= Duration::from_millis(200));
    assert_eq!(
        raw(&c, "DELETE", "/_test/latency", None, "").await.code,
        200
    );
    let counters = raw(&c, "GET", "/_test/counters", None, "").await;
    let gets = counters.body["requests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["verb"] == "get" && r["resource"] == "nodes")
        .unwrap();
    assert_eq!(gets["count"], 3);
    assert_eq!(counters.body["openWatches"], 0);
    let log = raw(&c, "GET", "/_test/requests", None, "").await;
    let codes: Vec<u64> = log.body["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["code"].as_u64().unwrap())
        .collect();
    assert_eq!(codes, [201, 500, 200, 200]);
    assert_eq!(
        raw(&c, "DELETE", "/_test/requests", None, "").await.code,
        200
    );
    let compact = raw(&c, "POST", "/_test/compact", None, "").await;
    let rv = compact.body["resourceVersion"]
        .as_str()
        .unwrap()
        .parse::<u64>()
        .unwrap();
    assert_eq!(rv, s.controls().resource_version());
    let closed = raw(&c, "POST", "/_test/watches/close", None, "").await;
    assert_eq!(closed.code, 200);
    let tokens = raw_json(&c, "POST", "/_test/tokens", &json!({"token":"sa-token","user":{"username":"system:serviceaccount:kube-system:ccm","groups":["system:serviceaccounts"]}})).await;
    assert_eq!(tokens.code, 201);
    let review = raw_json(&c, "POST", "/apis/authentication.k8s.io/v1/tokenreviews", &json!({"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"sa-token"}})).await;
    assert_eq!(review.body["status"]["authenticated"], true);
    assert_eq!(
        review.body["status"]["user"]["username"],
        "system:serviceaccount:kube-system:ccm"
    );
    let rule = raw_json(&c, "POST", "/_test/access-rules", &json!({"user":"system:serviceaccount:kube-system:ccm","verb":"get","path":"/metrics","reason":"allowed by test"})).await;
    assert_eq!(rule.code, 201);
    let sar = raw_json(&c, "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", &json!({"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"user":"system:serviceaccount:kube-system:ccm","nonResourceAttributes":{"path":"/metrics","verb":"get"}}})).await;
    assert_eq!(
        sar.body["status"],
        json!({"allowed": true, "reason": "allowed by test"})
    );
    assert_eq!(raw(&c, "GET", "/_test/nope", None, "").await.code, 404);
    assert_eq!(raw(&c, "PUT", "/_test/faults", None, "").await.code, 405);
}

#[tokio::test]
async fn required_authentication() {
    let s = TestApiServer::builder()
        .require_auth(true)
        .user(
            "viewer-token",
            UserInfo::new("viewer", &["system:authenticated"]),
        )
        .start()
        .await
        .unwrap();
    let good = client_for(s.kubeconfig_path()).await;
    assert_eq!(raw(&good, "GET", "/api/v1/nodes", None, "").await.code, 200);
    // A client without credentials.
    let mut cfg = s.client_config().unwrap();
    cfg.auth_info = Default::default();
    let anonymous = kube::Client::try_from(cfg.clone()).unwrap();
    let r = raw(&anonymous, "GET", "/api/v1/nodes", None, "").await;
    assert_status(&r, 401, "Unauthorized");
    assert_eq!(r.body["message"], "Unauthorized");
    assert_eq!(raw(&anonymous, "GET", "/healthz", None, "").await.code, 200);
    cfg.auth_info = serde_json::from_value(json!({"token":"wrong"})).unwrap();
    let wrong = kube::Client::try_from(cfg.clone()).unwrap();
    assert_eq!(
        raw(&wrong, "GET", "/api/v1/nodes", None, "").await.code,
        401
    );
    cfg.auth_info = serde_json::from_value(json!({"token":"viewer-token"})).unwrap();
    let viewer = kube::Client::try_from(cfg).unwrap();
    assert_eq!(
        raw(&viewer, "GET", "/api/v1/nodes", None, "").await.code,
        200
    );
    assert_eq!(s.controls().request_log().last().unwrap().user, "viewer");
    s.controls()
        .allow(AccessRule::user_can("viewer", "list", "nodes"));
    let sar = raw_json(&viewer, "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", &json!({"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"user":"viewer","resourceAttributes":{"verb":"list","resource":"nodes"}}})).await;
    assert_eq!(sar.body["status"]["allowed"], true);
}

async fn h2_get(
    io: impl hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    authority: &str,
    token: &str,
) -> (u16, Value) {
    let (mut sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = http::Request::builder()
        .uri(format!("https://{authority}/api/v1/namespaces"))
        .header("authorization", format!("Bearer {token}"))
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    assert_eq!(resp.version(), http::Version::HTTP_2);
    let code = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (code, serde_json::from_slice(&body).unwrap())
}

#[tokio::test]
async fn serves_http2() {
    // TLS with ALPN h2.
    let s = TestApiServer::builder().start().await.unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from(
            s.ca_der().unwrap().to_vec(),
        ))
        .unwrap();
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(s.addr()).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(name, tcp)
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (code, body) = h2_get(TokioIo::new(tls), &s.addr().to_string(), s.token()).await;
    assert_eq!(code, 200);
    assert_eq!(body["kind"], "NamespaceList");

    // Plain HTTP with prior knowledge.
    let p = TestApiServer::builder()
        .plain_http(true)
        .start()
        .await
        .unwrap();
    assert!(p.url().starts_with("http://"));
    let tcp = tokio::net::TcpStream::connect(p.addr()).await.unwrap();
    let (code, body) = h2_get(TokioIo::new(tcp), &p.addr().to_string(), p.token()).await;
    assert_eq!(code, 200);
    assert_eq!(body["items"].as_array().unwrap().len(), 3);
    // And HTTP/1.1 through kube on plain HTTP.
    let c = p.client().unwrap();
    let list = Api::<Node>::all(c)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(list.items.is_empty());
}
