//! Shared code of the integration tests: the target cluster (a kubeconfig from
//! `TEST_KUBECONFIG`, or an in-process server), raw requests and unique names.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http_body_util::BodyExt;
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::Value;
use test_apiserver::TestApiServer;

/// The cluster a test talks to.
pub struct Target {
    /// A client built from a kubeconfig.
    pub client: Client,
    /// The in-process server, when `TEST_KUBECONFIG` is not set.
    pub server: Option<TestApiServer>,
}

impl Target {
    /// Whether the target is the in-process server (so its test controls exist).
    pub fn in_process(&self) -> bool {
        self.server.is_some()
    }
}

/// A client for a kubeconfig file, without kube's automatic retries (so tests see every 429/5xx).
pub async fn client_for(path: &std::path::Path) -> Client {
    let kc = Kubeconfig::read_from(path)
        .unwrap_or_else(|e| panic!("cannot read kubeconfig {}: {e}", path.display()));
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap_or_else(|e| panic!("cannot use kubeconfig {}: {e}", path.display()));
    cfg.default_retry = false;
    Client::try_from(cfg).expect("client from kubeconfig")
}

/// Connects to `TEST_KUBECONFIG`, or starts an in-process server and connects through the
/// kubeconfig it wrote.
pub async fn target() -> Target {
    match std::env::var("TEST_KUBECONFIG") {
        Ok(path) if !path.is_empty() => Target {
            client: client_for(std::path::Path::new(&path)).await,
            server: None,
        },
        _ => {
            let server = TestApiServer::builder()
                .start()
                .await
                .expect("start the in-process API server");
            let client = client_for(server.kubeconfig_path()).await;
            Target {
                client,
                server: Some(server),
            }
        }
    }
}

/// A response: status code, headers and JSON body (`Null` when the body is not JSON).
pub struct Raw {
    pub code: u16,
    pub headers: http::HeaderMap,
    pub body: Value,
}

/// Sends a raw request and returns the status and the JSON body.
pub async fn raw(
    client: &Client,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &str,
) -> Raw {
    let mut b = http::Request::builder().method(method).uri(path);
    if let Some(ct) = content_type {
        b = b.header("content-type", ct);
    }
    let req = b
        .body(kube::client::Body::from(body.as_bytes().to_vec()))
        .expect("request");
    let resp = client.send(req).await.expect("send request");
    let code = resp.status().as_u16();
    let headers = resp.headers().clone();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .expect("read body")
        .to_bytes();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Raw {
        code,
        headers,
        body,
    }
}

/// Sends a raw JSON request.
pub async fn raw_json(client: &Client, method: &str, path: &str, body: &Value) -> Raw {
    raw(
        client,
        method,
        path,
        Some("application/json"),
        &body.to_string(),
    )
    .await
}

/// Reads a whole (finite) watch stream as raw lines.
pub async fn watch_lines(client: &Client, path: &str) -> Vec<Value> {
    let req = http::Request::builder()
        .method("GET")
        .uri(path)
        .body(kube::client::Body::from(Vec::new()))
        .expect("request");
    let resp = client.send(req).await.expect("send watch");
    assert_eq!(resp.status().as_u16(), 200, "watch {path}");
    let bytes = tokio::time::timeout(Duration::from_secs(30), resp.into_body().collect())
        .await
        .expect("watch stream ended in time")
        .expect("read watch body")
        .to_bytes();
    bytes
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).expect("watch line is JSON"))
        .collect()
}

/// A name unique to this process and call, valid as a DNS-1035 label.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}-{}-{n}-{:x}",
        std::process::id() % 100_000,
        nanos % 0xfffff
    )
}

/// Asserts the common shape of a failure `Status`.
pub fn assert_status(raw: &Raw, code: u16, reason: &str) {
    assert_eq!(raw.code, code, "unexpected status code; body: {}", raw.body);
    assert_eq!(raw.body["kind"], "Status", "body: {}", raw.body);
    assert_eq!(raw.body["status"], "Failure", "body: {}", raw.body);
    assert_eq!(raw.body["reason"], reason, "body: {}", raw.body);
    assert_eq!(raw.body["code"], code, "body: {}", raw.body);
}
