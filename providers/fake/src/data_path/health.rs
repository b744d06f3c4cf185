//! Health checks of a load balancer's backends, the way cloud load balancers use kube-proxy's health
//! servers: `GET /healthz` on each node, on the Service's `healthCheckNodePort` for
//! `externalTrafficPolicy: Local` (200 only while the node holds a ready endpoint) and on kube-proxy's own
//! port otherwise. A 2xx answer passes; anything else, or no answer in time, fails.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;

use super::backends::Backend;
use super::traffic::Traffic;
use crate::config::DataPathConfig;

/// The longest status line read from a health server.
const STATUS_LINE_LIMIT: usize = 512;

/// Checks every backend each interval, and at once when the traffic's `recheck` is notified (new backends
/// or another health port), until aborted.
pub(crate) async fn run(traffic: Arc<Traffic>) {
    let config = &traffic.config;
    let interval = Duration::from_millis(config.health_check_interval_millis);
    let timeout = Duration::from_millis(config.health_check_timeout_millis);
    loop {
        let port = traffic.policy().health_port;
        let mut checks = JoinSet::new();
        for backend in traffic.backends.current() {
            checks.spawn(async move {
                let target = SocketAddr::new(backend.spec.address, port);
                let passed = check(target, timeout).await;
                (backend, passed)
            });
        }
        while let Some(Ok((backend, outcome))) = checks.join_next().await {
            // A result for a port no longer checked is stale.
            if traffic.policy().health_port == port {
                record(&backend, outcome, port, config);
            }
        }
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = traffic.recheck.notified() => {}
        }
    }
}

fn record(backend: &Backend, outcome: Result<(), String>, port: u16, config: &DataPathConfig) {
    let result = outcome
        .as_ref()
        .map(|()| "passed")
        .unwrap_or_else(|e| e.as_str());
    if let Some(health) = backend.record_check(
        outcome.is_ok(),
        config.healthy_threshold,
        config.unhealthy_threshold,
    ) {
        tracing::info!(node = %backend.spec.node, address = %backend.spec.address, port, ?health,
            check = result, "fake data path: backend health changed");
    }
}

/// One `GET /healthz` on `target`: `Ok` for a 2xx answer within `timeout`, else why not.
pub(crate) async fn check(target: SocketAddr, timeout: Duration) -> Result<(), String> {
    match tokio::time::timeout(timeout, get_status(target)).await {
        Err(_) => Err(format!("no answer from {target} within {timeout:?}")),
        Ok(Err(e)) => Err(format!("{target}: {e}")),
        Ok(Ok(status)) if (200..300).contains(&status) => Ok(()),
        Ok(Ok(status)) => Err(format!("{target} answered {status}")),
    }
}

async fn get_status(target: SocketAddr) -> std::io::Result<u16> {
    let mut stream = TcpStream::connect(target).await?;
    let request = format!(
        "GET /healthz HTTP/1.1\r\nHost: {target}\r\nUser-Agent: fake-cloud-load-balancer\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    let mut head = Vec::with_capacity(64);
    let mut chunk = [0u8; 128];
    while !head.windows(2).any(|w| w == b"\r\n") && head.len() < STATUS_LINE_LIMIT {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&chunk[..n]);
    }
    parse_status(&head)
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, "not an HTTP answer"))
}

/// The status code of an HTTP/1.x status line.
fn parse_status(head: &[u8]) -> Option<u16> {
    let line = head.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.split_whitespace();
    parts.next().filter(|v| v.starts_with("HTTP/1."))?;
    parts.next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    #[test]
    fn status_lines() {
        assert_eq!(
            parse_status(b"HTTP/1.1 200 OK\r\nContent-Type: x\r\n"),
            Some(200)
        );
        assert_eq!(
            parse_status(b"HTTP/1.0 503 Service Unavailable\r\n"),
            Some(503)
        );
        assert_eq!(parse_status(b"SSH-2.0-OpenSSH\r\n"), None);
        assert_eq!(parse_status(b""), None);
    }

    async fn server(answer: &'static [u8]) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let mut buf = [0u8; 512];
                let _ = s.read(&mut buf).await;
                let _ = s.write_all(answer).await;
            }
        });
        addr
    }

    #[tokio::test]
    async fn checks_pass_on_2xx_only() {
        let t = Duration::from_secs(2);
        let ok = server(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n").await;
        assert_eq!(check(ok, t).await, Ok(()));
        let busy = server(b"HTTP/1.1 503 Service Unavailable\r\n\r\n").await;
        assert!(check(busy, t).await.unwrap_err().contains("answered 503"));
        let closed = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap();
        assert!(check(closed, t).await.is_err());
        // A server that accepts and never answers fails on the timeout.
        let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let err = check(silent.local_addr().unwrap(), Duration::from_millis(100))
            .await
            .unwrap_err();
        assert!(err.contains("no answer"), "{err}");
    }
}
