//! The client of `hack/realkube`'s control endpoint (its address in `DIR/control.addr`): restart etcd or
//! kube-apiserver, compact etcd, and create and set the TCP fault proxies between a daemon and the API
//! server.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, SystemTime};

use anyhow::{Context, bail};
use bytes::Bytes;
use http::Method;
use serde::Deserialize;

use crate::audit::parse_time;
use crate::fake_admin::http1_request;

/// How long a restart may take (SIGTERM, the shortened grace, the start, the API server's readiness).
const RESTART_TIMEOUT: Duration = Duration::from_secs(300);
/// How long any other request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// What a fault proxy does with the bytes (see `hack/realkube/faultproxy.go`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyMode {
    /// Forward both ways.
    Pass,
    /// Drop every byte both ways; new connections are accepted and never answered.
    Blackhole,
    /// Reset every connection, open or new.
    Reset,
    /// Forward the client's requests, drop the API server's answers.
    CutResponses,
}

impl ProxyMode {
    fn as_str(self) -> &'static str {
        match self {
            ProxyMode::Pass => "pass",
            ProxyMode::Blackhole => "blackhole",
            ProxyMode::Reset => "reset",
            ProxyMode::CutResponses => "cut-responses",
        }
    }
}

/// A fault proxy as the control endpoint describes it.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Proxy {
    /// Where its client connects instead of the API server.
    pub address: String,
    /// The loopback address its connections to the API server come from (the audit log's source IP).
    #[serde(rename = "sourceIP")]
    pub source_ip: String,
    /// Bytes dropped so far.
    pub dropped: u64,
    /// Connections reset so far.
    pub reset: u64,
}

/// The steps of a restart, on the wall clock.
#[derive(Debug, Clone, Copy)]
pub struct Restart {
    /// SIGTERM sent.
    pub stopping: SystemTime,
    /// The API server answering `/readyz` again.
    pub ready: SystemTime,
}

#[derive(Deserialize)]
struct RestartAnswer {
    stopping: String,
    ready: String,
}

/// The control endpoint of one running cluster.
#[derive(Debug, Clone, Copy)]
pub struct ControlEndpoint {
    addr: SocketAddr,
}

impl ControlEndpoint {
    /// The endpoint of the cluster in `dir`.
    pub fn open(dir: &Path) -> anyhow::Result<Self> {
        let path = dir.join("control.addr");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {} (is realkube up?)", path.display()))?;
        let addr = text
            .trim()
            .parse()
            .with_context(|| format!("{} holds no address: {text:?}", path.display()))?;
        Ok(ControlEndpoint { addr })
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Bytes,
        timeout: Duration,
    ) -> anyhow::Result<Bytes> {
        let (status, body) = http1_request(self.addr, method.clone(), path, body, timeout).await?;
        if !(200..300).contains(&status) {
            bail!(
                "{method} {path}: {status}: {}",
                String::from_utf8_lossy(&body).trim()
            );
        }
        Ok(body)
    }

    /// Restarts `etcd` or `kube-apiserver` and returns once the API server is ready again.
    pub async fn restart(&self, component: &str) -> anyhow::Result<Restart> {
        let path = format!("/components/{component}/restart");
        let body = self
            .call(Method::POST, &path, Bytes::new(), RESTART_TIMEOUT)
            .await?;
        let answer: RestartAnswer =
            serde_json::from_slice(&body).context("the restart's answer")?;
        Ok(Restart {
            stopping: parse_time(&answer.stopping)?,
            ready: parse_time(&answer.ready)?,
        })
    }

    /// Compacts etcd's history to its current revision, which it returns.
    pub async fn compact(&self) -> anyhow::Result<i64> {
        let body = self
            .call(Method::POST, "/etcd/compact", Bytes::new(), REQUEST_TIMEOUT)
            .await?;
        let answer: serde_json::Value = serde_json::from_slice(&body)?;
        answer["revision"]
            .as_i64()
            .context("the compaction's answer has no revision")
    }

    /// Creates the named proxy (or returns the one that exists).
    pub async fn proxy(&self, name: &str) -> anyhow::Result<Proxy> {
        let body = self
            .call(
                Method::POST,
                &format!("/proxies/{name}"),
                Bytes::new(),
                REQUEST_TIMEOUT,
            )
            .await?;
        serde_json::from_slice(&body).context("the proxy's description")
    }

    /// Sets the mode and the latency of the client's bytes.
    pub async fn set_proxy(
        &self,
        name: &str,
        mode: ProxyMode,
        latency: Duration,
    ) -> anyhow::Result<Proxy> {
        let setting = serde_json::json!({
            "mode": mode.as_str(),
            "latency": format!("{}ms", latency.as_millis()),
        });
        let body = self
            .call(
                Method::PUT,
                &format!("/proxies/{name}"),
                Bytes::from(setting.to_string()),
                REQUEST_TIMEOUT,
            )
            .await?;
        serde_json::from_slice(&body).context("the proxy's description")
    }
}
