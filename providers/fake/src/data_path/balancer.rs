//! One running load balancer: its listeners (one task per front-end port and transport), its health
//! checker, and the [`Traffic`] state they share. Applying a new spec changes only what changed: listeners
//! are added and removed by port, node ports and policy are swapped in place, and backends are replaced
//! with draining. Dropping the balancer stops its listeners and closes its connections.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use cloud_provider::CloudError;
use serde::{Deserialize, Serialize};
use tokio::net::{TcpListener, UdpSocket};
use tokio::task::JoinHandle;

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

/// A running load balancer.
#[derive(Debug)]
pub(crate) struct Balancer {
    spec: BalancerSpec,
    traffic: Arc<Traffic>,
    listeners: BTreeMap<(Transport, u16), JoinHandle<()>>,
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

    /// Brings the running load balancer to `spec` (same address): new listeners are bound before anything
    /// else changes, so a port that cannot be bound leaves the load balancer as it was.
    pub(crate) async fn apply(&mut self, spec: BalancerSpec) -> Result<(), CloudError> {
        let wanted: BTreeMap<(Transport, u16), ListenerSpec> = spec
            .listeners
            .iter()
            .map(|l| ((l.transport, l.port), *l))
            .collect();
        let mut started = BTreeMap::new();
        for (key, listener) in &wanted {
            if !self.listeners.contains_key(key) {
                started.insert(*key, self.listen(spec.address, listener).await?);
            }
        }
        self.listeners.retain(|key, task| {
            let keep = wanted.contains_key(key);
            if !keep {
                task.abort();
            }
            keep
        });
        self.listeners.extend(started);
        self.traffic.set_node_ports(&spec.listeners);
        let recheck = spec.policy.health_port != self.spec.policy.health_port
            || spec.backends != self.spec.backends;
        self.traffic.set_policy(spec.policy.clone());
        self.traffic.backends.replace(spec.backends.clone());
        if recheck {
            self.traffic.recheck.notify_one();
        }
        self.spec = spec;
        Ok(())
    }

    async fn listen(
        &self,
        address: std::net::IpAddr,
        listener: &ListenerSpec,
    ) -> Result<JoinHandle<()>, CloudError> {
        let at = SocketAddr::new(address, listener.port);
        let traffic = self.traffic.clone();
        let bind_error = |e: std::io::Error| {
            CloudError::provider(format!(
                "load balancer {}: cannot listen on {at} ({}): {e}; the data path needs ingress addresses \
                 the host has (a loopback loadBalancerCIDR such as 127.240.0.0/24, a pool with a local \
                 route, or dataPath.interface)",
                self.spec.name,
                listener.transport.name()
            ))
        };
        let task = match listener.transport {
            Transport::Tcp => {
                let socket = TcpListener::bind(at).await.map_err(bind_error)?;
                tokio::spawn(tcp::serve(socket, listener.port, traffic))
            }
            Transport::Udp => {
                let socket = UdpSocket::bind(at).await.map_err(bind_error)?;
                tokio::spawn(udp::serve(socket, listener.port, traffic))
            }
        };
        tracing::info!(load_balancer = %self.spec.name, service = %self.spec.service,
            listener = %format!("{}/{at}->{}", listener.transport.name(), listener.node_port),
            "fake data path: listening");
        Ok(task)
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
}

impl Balancer {
    /// Stops the load balancer and returns once its listeners are closed (their sockets dropped) and its
    /// connections told to close.
    pub(crate) async fn shutdown(mut self) {
        let listeners = std::mem::take(&mut self.listeners);
        drop(self);
        for task in listeners.into_values() {
            task.abort();
            let _ = task.await;
        }
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        for task in self.listeners.values() {
            task.abort();
        }
        self.health.abort();
        self.traffic.closed.cancel();
        self.traffic.backends.retire_all();
    }
}
