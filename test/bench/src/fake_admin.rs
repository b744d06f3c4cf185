//! A small HTTP/1.1 client for the fake cloud's admin API (plain HTTP on a loopback address), used to read
//! and reset the per-operation call counters, count the load balancers the cloud holds, and (chaos) set
//! faults, stop and terminate instances and export the cloud as a cloud-config.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use http::{Method, Request, header};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use provider_fake::{FakeConfig, FaultSpec};
use tokio::net::TcpStream;

/// How long one admin request may take, connection included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The admin API of the fake cloud running inside the daemon.
#[derive(Debug, Clone, Copy)]
pub struct FakeAdmin {
    addr: SocketAddr,
}

impl FakeAdmin {
    /// A client for the admin API listening on `addr`.
    pub fn new(addr: SocketAddr) -> Self {
        FakeAdmin { addr }
    }

    async fn request(&self, method: Method, path: &str) -> anyhow::Result<(u16, Bytes)> {
        self.request_with(method, path, Bytes::new()).await
    }

    async fn request_with(
        &self,
        method: Method,
        path: &str,
        body: Bytes,
    ) -> anyhow::Result<(u16, Bytes)> {
        http1_request(self.addr, method, path, body, REQUEST_TIMEOUT).await
    }

    /// Calls per cloud operation since the start or the last reset.
    pub async fn calls(&self) -> anyhow::Result<BTreeMap<String, u64>> {
        let (status, body) = self.request(Method::GET, "/calls").await?;
        if status != 200 {
            bail!(
                "GET /calls answered {status}: {}",
                String::from_utf8_lossy(&body)
            );
        }
        serde_json::from_slice(&body).context("GET /calls: unexpected body")
    }

    /// Zeroes the call counters.
    pub async fn reset_calls(&self) -> anyhow::Result<()> {
        let (status, body) = self.request(Method::DELETE, "/calls").await?;
        if status != 204 {
            bail!(
                "DELETE /calls answered {status}: {}",
                String::from_utf8_lossy(&body)
            );
        }
        Ok(())
    }

    /// The number of load balancers the cloud holds.
    pub async fn load_balancer_count(&self) -> anyhow::Result<usize> {
        let (status, body) = self.request(Method::GET, "/loadbalancers").await?;
        if status != 200 {
            bail!(
                "GET /loadbalancers answered {status}: {}",
                String::from_utf8_lossy(&body)
            );
        }
        let list: Vec<serde_json::Value> =
            serde_json::from_slice(&body).context("GET /loadbalancers: unexpected body")?;
        Ok(list.len())
    }
}

impl FakeAdmin {
    /// Sets the fault of one operation (or `*`): `POST /faults`.
    pub async fn set_fault(&self, operation: &str, fault: &FaultSpec) -> anyhow::Result<()> {
        let mut body = serde_json::to_value(fault).context("cannot encode a fault")?;
        body["operation"] = serde_json::Value::from(operation);
        let (status, answer) = self
            .request_with(Method::POST, "/faults", Bytes::from(body.to_string()))
            .await?;
        if status != 200 {
            bail!(
                "POST /faults for {operation} answered {status}: {}",
                String::from_utf8_lossy(&answer)
            );
        }
        Ok(())
    }

    /// Removes every fault: `DELETE /faults`.
    pub async fn clear_faults(&self) -> anyhow::Result<()> {
        let (status, body) = self.request(Method::DELETE, "/faults").await?;
        if status != 204 {
            bail!(
                "DELETE /faults answered {status}: {}",
                String::from_utf8_lossy(&body)
            );
        }
        Ok(())
    }

    /// Stops (`stop`) or terminates (`terminate`) the instance of a node.
    pub async fn instance_action(&self, name: &str, action: &str) -> anyhow::Result<()> {
        let path = format!("/instances/{name}/{action}");
        let (status, answer) = self.request(Method::POST, &path).await?;
        if status != 200 {
            bail!(
                "POST {path} answered {status}: {}",
                String::from_utf8_lossy(&answer)
            );
        }
        Ok(())
    }

    /// The cloud as a cloud-config (`GET /config`): a fake cloud started from it is in this one's state.
    pub async fn cloud_config(&self) -> anyhow::Result<FakeConfig> {
        let (status, body) = self.request(Method::GET, "/config").await?;
        if status != 200 {
            bail!(
                "GET /config answered {status}: {}",
                String::from_utf8_lossy(&body)
            );
        }
        FakeConfig::from_yaml(&body).context("GET /config: not a valid fake cloud config")
    }
}

/// One HTTP/1.1 request with a JSON body to a plain-HTTP loopback server, answered within `timeout`
/// (connection included): the status and the body.
pub async fn http1_request(
    addr: SocketAddr,
    method: Method,
    path: &str,
    body: Bytes,
    timeout: Duration,
) -> anyhow::Result<(u16, Bytes)> {
    let what = format!("{method} http://{addr}{path}");
    let exchange = async {
        let stream = TcpStream::connect(addr).await?;
        let _ = stream.set_nodelay(true);
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, addr.to_string())
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(body))?;
        let response = sender.send_request(request).await?;
        let status = response.status().as_u16();
        let body = response.into_body().collect().await?.to_bytes();
        Ok::<_, anyhow::Error>((status, body))
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .with_context(|| format!("{what}: no answer within {timeout:?}"))?
        .with_context(|| what)
}

/// A free TCP port on 127.0.0.1 (bound once and released, so another process can take it).
pub fn free_port() -> anyhow::Result<u16> {
    let listener =
        std::net::TcpListener::bind("127.0.0.1:0").context("cannot bind a free loopback port")?;
    Ok(listener.local_addr()?.port())
}
