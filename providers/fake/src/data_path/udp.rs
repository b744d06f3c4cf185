//! A UDP listener of a load balancer: each client address is a flow, admitted by source range and the
//! connection limit, bound to a healthy backend's node port through a socket of its own. Replies come back
//! to the client from the listener's address. A flow ends when it has been idle for the configured time,
//! when its backend's drain ends, or when the load balancer goes; the next datagram starts a new one.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::net::UdpSocket;
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;

use super::backends::ConnectionGuard;
use super::spec::Transport;
use super::traffic::Traffic;

/// The largest datagram carried.
const DATAGRAM: usize = 64 * 1024;

/// One client's flow.
struct Flow {
    upstream: Arc<UdpSocket>,
    /// Milliseconds since the listener started, at the flow's last datagram either way.
    last: Arc<AtomicU64>,
    ended: Arc<AtomicBool>,
}

/// Relays datagrams on `socket` (front-end `port`) until aborted; its flows end when `stop` is cancelled.
pub(crate) async fn serve(
    socket: UdpSocket,
    port: u16,
    traffic: Arc<Traffic>,
    stop: CancellationToken,
) {
    let socket = Arc::new(socket);
    let started = Instant::now();
    let mut flows: HashMap<SocketAddr, Flow> = HashMap::new();
    let mut buf = vec![0u8; DATAGRAM];
    loop {
        let (len, client) = match socket.recv_from(&mut buf).await {
            Ok(received) => received,
            Err(e) => {
                tracing::debug!(load_balancer = %traffic.name, port, error = %e, "fake data path: UDP receive failed");
                continue;
            }
        };
        if !traffic.policy().admits(client.ip()) {
            traffic.count_refused();
            continue;
        }
        if flows
            .get(&client)
            .is_none_or(|f| f.ended.load(Ordering::Relaxed))
        {
            match open_flow(client, port, &socket, &traffic, &stop, started).await {
                Some(flow) => {
                    // Ended flows go when a new one comes: the map holds at most the open flows and one.
                    flows.retain(|_, f| !f.ended.load(Ordering::Relaxed));
                    flows.insert(client, flow);
                }
                None => {
                    traffic.count_rejected();
                    continue;
                }
            }
        }
        if let Some(flow) = flows.get(&client) {
            flow.last.store(millis_since(started), Ordering::Relaxed);
            let _ = flow.upstream.send(&buf[..len]).await;
        }
    }
}

fn millis_since(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
}

async fn open_flow(
    client: SocketAddr,
    port: u16,
    listener: &Arc<UdpSocket>,
    traffic: &Arc<Traffic>,
    stop: &CancellationToken,
    started: Instant,
) -> Option<Flow> {
    let node_port = traffic.node_port(Transport::Udp, port)?;
    let slot = traffic.slots.clone().try_acquire_owned().ok()?;
    let backend = traffic
        .backends
        .pick(client.ip(), &traffic.policy(), None)?;
    let target = SocketAddr::new(backend.spec.address, node_port);
    let any = match target.ip() {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    };
    let upstream = UdpSocket::bind(SocketAddr::new(any, 0)).await.ok()?;
    upstream.connect(target).await.ok()?;
    let flow = Flow {
        upstream: Arc::new(upstream),
        last: Arc::new(AtomicU64::new(millis_since(started))),
        ended: Arc::new(AtomicBool::new(false)),
    };
    let replies = Replies {
        upstream: flow.upstream.clone(),
        listener: listener.clone(),
        client,
        last: flow.last.clone(),
        ended: flow.ended.clone(),
        started,
        idle: Duration::from_secs(traffic.config.udp_idle_seconds),
        guard: backend.open(),
        stop: stop.clone(),
        _slot: slot,
    };
    traffic.connections.spawn(replies.run());
    Some(flow)
}

/// The half of a flow that carries the backend's replies to the client.
struct Replies {
    upstream: Arc<UdpSocket>,
    listener: Arc<UdpSocket>,
    client: SocketAddr,
    last: Arc<AtomicU64>,
    ended: Arc<AtomicBool>,
    started: Instant,
    idle: Duration,
    guard: ConnectionGuard,
    stop: CancellationToken,
    _slot: OwnedSemaphorePermit,
}

impl Replies {
    async fn run(self) {
        let backend = self.guard.backend().clone();
        let mut buf = vec![0u8; DATAGRAM];
        loop {
            let idle_for = Duration::from_millis(
                millis_since(self.started).saturating_sub(self.last.load(Ordering::Relaxed)),
            );
            let Some(left) = self.idle.checked_sub(idle_for).filter(|d| !d.is_zero()) else {
                break;
            };
            tokio::select! {
                received = self.upstream.recv(&mut buf) => match received {
                    Ok(len) => {
                        self.last.store(millis_since(self.started), Ordering::Relaxed);
                        let _ = self.listener.send_to(&buf[..len], self.client).await;
                    }
                    // An ICMP error from the backend (nothing listens): the flow waits for more datagrams.
                    Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                },
                () = tokio::time::sleep(left) => {}
                () = backend.retired() => break,
                () = self.stop.cancelled() => break,
            }
        }
        self.ended.store(true, Ordering::Relaxed);
    }
}
