//! One running load balancer: its listeners (one task per front-end port and transport), its health
//! checker, and the [`Traffic`] state they share. Applying a new spec changes only what changed: listeners
//! are added and removed by port, node ports and policy are swapped in place, and backends are replaced
//! with draining. Dropping the balancer stops its listeners and closes its connections.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use cloud_provider::CloudError;
use serde::{Deserialize, Serialize};
use tokio::net::{TcpListener, UdpSocket};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::backends::BackendStatus;
use super::spec::{BalancerSpec, ListenerSpec, Transport};
use super::traffic::Traffic;
use super::{health, tcp, udp};
use crate::config::DataPathConfig;

/// A load balancer as the admin API reports its data path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BalancerStatus {
    /// The load balancer's cloud name.
    pub name: String,
    /// `namespace/name` of its Service.
    pub service: String,
    /// The ingress address its listeners bind.
    pub address: String,
    /// `TCP/80->30080` per listener.
    pub listeners: Vec<String>,
    /// The port each backend is health-checked on.
    pub health_check_port: u16,
    /// The backends, current then draining.
    pub backends: Vec<BackendStatus>,
    /// Clients refused by the source ranges.
    pub refused: u64,
    /// Clients turned away: no healthy backend, the connection limit, or every backend tried refused.
    pub rejected: u64,
}

/// A running listener: its task and the token its connections and flows stop on.
#[derive(Debug)]
struct Listener {
    task: JoinHandle<()>,
    stop: CancellationToken,
}

impl Listener {
    fn stop(self) {
        self.stop.cancel();
        self.task.abort();
    }
}

/// A socket bound for a listener, not serving yet.
enum Bound {
    Tcp(TcpListener),
    Udp(UdpSocket),
}

/// A running load balancer.
#[derive(Debug)]
pub(crate) struct Balancer {
    spec: BalancerSpec,
    traffic: Arc<Traffic>,
    listeners: BTreeMap<(Transport, u16), Listener>,
    health: JoinHandle<()>,
}

impl Balancer {
    /// Starts the load balancer of `spec`: binds every listener (failing if one cannot be bound) and starts
    /// its health checks.
    pub(crate) async fn start(
        spec: BalancerSpec,
        config: &DataPathConfig,
    ) -> Result<Balancer, CloudError> {
        let traffic = Arc::new(Traffic::new(&spec, config));
        let health = tokio::spawn(health::run(traffic.clone()));
        let mut balancer = Balancer {
            spec: BalancerSpec {
                listeners: Vec::new(),
                ..spec.clone()
            },
            traffic,
            listeners: BTreeMap::new(),
            health,
        };
        balancer.apply(spec).await?;
        Ok(balancer)
    }

    /// The spec in effect.
    pub(crate) fn spec(&self) -> &BalancerSpec {
        &self.spec
    }

    /// Brings the running load balancer to `spec` (same address). Every new listener is bound before
    /// anything changes, so a port that cannot be bound leaves the load balancer as it was. A listener that
    /// goes closes its connections and flows.
    pub(crate) async fn apply(&mut self, spec: BalancerSpec) -> Result<(), CloudError> {
        let wanted: BTreeMap<(Transport, u16), ListenerSpec> = spec
            .listeners
            .iter()
            .map(|l| ((l.transport, l.port), *l))
            .collect();
        let mut bound = Vec::new();
        for (key, listener) in &wanted {
            if !self.listeners.contains_key(key) {
                bound.push((*key, self.bind(spec.address, listener).await?));
            }
        }
        let gone: Vec<_> = self
            .listeners
            .keys()
            .filter(|key| !wanted.contains_key(key))
            .copied()
            .collect();
        for key in gone {
            if let Some(listener) = self.listeners.remove(&key) {
                listener.stop();
            }
        }
        for (key, socket) in bound {
            self.listeners.insert(key, self.serve(key.1, socket));
        }
        self.traffic.set_node_ports(&spec.listeners);
        let new_port = spec.policy.health_port != self.spec.policy.health_port;
        self.traffic.set_policy(spec.policy.clone());
        self.traffic.backends.replace(spec.backends.clone());
        if new_port {
            self.traffic.backends.decide_on_next_check();
        }
        if new_port || spec.backends != self.spec.backends {
            self.traffic.recheck.notify_one();
        }
        self.spec = spec;
        Ok(())
    }

    async fn bind(&self, address: IpAddr, listener: &ListenerSpec) -> Result<Bound, CloudError> {
        let at = SocketAddr::new(address, listener.port);
        let bind_error = |e: std::io::Error| {
            CloudError::provider(format!(
                "load balancer {}: cannot listen on {at} ({}): {e}; the data path needs ingress addresses \
                 the host has (a loopback loadBalancerCIDR such as 127.240.0.0/24, a pool with a local \
                 route, or dataPath.interface)",
                self.spec.name,
                listener.transport.name()
            ))
        };
        let bound = match listener.transport {
            Transport::Tcp => Bound::Tcp(TcpListener::bind(at).await.map_err(bind_error)?),
            Transport::Udp => Bound::Udp(UdpSocket::bind(at).await.map_err(bind_error)?),
        };
        tracing::info!(load_balancer = %self.spec.name, service = %self.spec.service,
            listener = %format!("{}/{at}->{}", listener.transport.name(), listener.node_port),
            "fake data path: listening");
        Ok(bound)
    }

    fn serve(&self, port: u16, socket: Bound) -> Listener {
        let stop = self.traffic.closed.child_token();
        let traffic = self.traffic.clone();
        let task = match socket {
            Bound::Tcp(socket) => tokio::spawn(tcp::serve(socket, port, traffic, stop.clone())),
            Bound::Udp(socket) => tokio::spawn(udp::serve(socket, port, traffic, stop.clone())),
        };
        Listener { task, stop }
    }

    /// The data path's view of this load balancer.
    pub(crate) fn status(&self) -> BalancerStatus {
        BalancerStatus {
            name: self.spec.name.clone(),
            service: self.spec.service.clone(),
            address: self.spec.address.to_string(),
            listeners: self
                .spec
                .listeners
                .iter()
                .map(|l| format!("{}/{}->{}", l.transport.name(), l.port, l.node_port))
                .collect(),
            health_check_port: self.spec.policy.health_port,
            backends: self.traffic.backends.status(),
            refused: self.traffic.refused(),
            rejected: self.traffic.rejected(),
        }
    }

    /// Stops the load balancer and returns once its listeners, connections and flows have closed their
    /// sockets.
    pub(crate) async fn shutdown(self) {
        let traffic = self.traffic.clone();
        let listeners: Vec<JoinHandle<()>> = {
            let mut this = self;
            std::mem::take(&mut this.listeners)
                .into_values()
                .map(|l| {
                    l.stop.cancel();
                    l.task
                })
                .collect()
        };
        for task in listeners {
            task.abort();
            let _ = task.await;
        }
        traffic.connections.close();
        traffic.connections.wait().await;
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        for listener in std::mem::take(&mut self.listeners).into_values() {
            listener.stop();
        }
        self.health.abort();
        self.traffic.closed.cancel();
        self.traffic.backends.retire_all();
    }
}
