//! A TCP listener of a load balancer: admits clients by source range and connection limit, connects each
//! to a healthy backend's node port (a second backend if the first refuses), writes the PROXY protocol
//! header when asked, and copies bytes both ways with bounded buffers until either side closes, the
//! backend's drain ends or the load balancer goes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use super::backends::ConnectionGuard;
use super::proxy_protocol;
use super::spec::Transport;
use super::traffic::Traffic;

/// The buffer of each direction of a connection.
const BUFFER: usize = 16 * 1024;
/// How long connecting to a backend may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Backends tried for one connection.
const ATTEMPTS: usize = 2;

/// Accepts connections on `listener` (front-end `port`) until aborted; its connections close when `stop`
/// is cancelled.
pub(crate) async fn serve(
    listener: TcpListener,
    port: u16,
    traffic: Arc<Traffic>,
    stop: CancellationToken,
) {
    loop {
        let (stream, client) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(load_balancer = %traffic.name, port, error = %e,
                    "fake data path: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        if !traffic.policy().admits(client.ip()) {
            traffic.count_refused();
            continue;
        }
        let Ok(slot) = traffic.slots.clone().try_acquire_owned() else {
            traffic.count_rejected();
            continue;
        };
        let (traffic_of_task, stop) = (traffic.clone(), stop.clone());
        traffic.connections.spawn(async move {
            let _slot = slot;
            connection(stream, client, port, &traffic_of_task, stop).await;
        });
    }
}

async fn connection(
    mut client_stream: TcpStream,
    client: SocketAddr,
    port: u16,
    traffic: &Traffic,
    stop: CancellationToken,
) {
    let Some(node_port) = traffic.node_port(Transport::Tcp, port) else {
        traffic.count_rejected();
        return;
    };
    let Some((guard, mut upstream)) = connect(client, node_port, traffic).await else {
        traffic.count_rejected();
        return;
    };
    let proxy = traffic.policy().proxy;
    if let Some(version) = proxy {
        let destination = client_stream
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::new(client.ip(), port));
        let header = proxy_protocol::header(version, client, destination);
        if upstream.write_all(&header).await.is_err() {
            return;
        }
    }
    let backend = guard.backend().clone();
    tokio::select! {
        _ = tokio::io::copy_bidirectional_with_sizes(&mut client_stream, &mut upstream, BUFFER, BUFFER) => {}
        () = backend.retired() => {
            tracing::debug!(node = %backend.spec.node, %client, "fake data path: drain over, connection closed");
        }
        () = stop.cancelled() => {}
    }
}

/// A connection to a healthy backend's node port, counted on it.
async fn connect(
    client: SocketAddr,
    node_port: u16,
    traffic: &Traffic,
) -> Option<(ConnectionGuard, TcpStream)> {
    let mut failed = None;
    for _ in 0..ATTEMPTS {
        let policy = traffic.policy();
        let backend = traffic
            .backends
            .pick(client.ip(), &policy, failed.as_deref())?;
        let target = SocketAddr::new(backend.spec.address, node_port);
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(target)).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Some((backend.open(), stream));
            }
            Ok(Err(e)) => tracing::debug!(%target, error = %e, "fake data path: backend refused"),
            Err(_) => tracing::debug!(%target, "fake data path: backend did not answer"),
        }
        failed = Some(backend);
    }
    None
}
