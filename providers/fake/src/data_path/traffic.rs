//! [`Traffic`]: what the listeners and the health checker of one load balancer share (policy, node ports,
//! backends, connection slots, counters), changed in place when the load balancer's spec changes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::RwLock;
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::backends::Backends;
use super::spec::{BalancerSpec, ListenerSpec, Policy, Transport};
use crate::config::DataPathConfig;

/// What the listeners and the health checker of one load balancer share.
#[derive(Debug)]
pub(crate) struct Traffic {
    /// The load balancer's cloud name (for logs).
    pub(crate) name: String,
    /// The data path's settings.
    pub(crate) config: DataPathConfig,
    policy: RwLock<Arc<Policy>>,
    node_ports: RwLock<BTreeMap<(Transport, u16), u16>>,
    /// The backends and their state.
    pub(crate) backends: Backends,
    /// One permit per open connection or UDP flow.
    pub(crate) slots: Arc<Semaphore>,
    /// Cancelled when the load balancer goes; each listener's token is a child of it.
    pub(crate) closed: CancellationToken,
    /// Every connection and UDP flow task, so that stopping waits for their sockets to close.
    pub(crate) connections: TaskTracker,
    /// Wakes the health checker (new backends, another health port).
    pub(crate) recheck: Notify,
    refused: AtomicU64,
    rejected: AtomicU64,
}

impl Traffic {
    /// The policy in effect.
    pub(crate) fn policy(&self) -> Arc<Policy> {
        self.policy.read().clone()
    }

    /// The node port of a front-end port.
    pub(crate) fn node_port(&self, transport: Transport, port: u16) -> Option<u16> {
        self.node_ports.read().get(&(transport, port)).copied()
    }

    /// Counts a client refused by the source ranges.
    pub(crate) fn count_refused(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a client turned away for want of a connection slot or a healthy backend.
    pub(crate) fn count_rejected(&self) {
        self.rejected.fetch_add(1, Ordering::Relaxed);
    }

    /// The traffic state of a load balancer starting with `spec`.
    pub(crate) fn new(spec: &BalancerSpec, config: &DataPathConfig) -> Traffic {
        Traffic {
            name: spec.name.clone(),
            config: config.clone(),
            policy: RwLock::new(Arc::new(spec.policy.clone())),
            node_ports: RwLock::new(node_ports(&spec.listeners)),
            backends: Backends::new(
                spec.backends.clone(),
                Duration::from_secs(config.drain_seconds),
            ),
            slots: Arc::new(Semaphore::new(config.max_connections)),
            closed: CancellationToken::new(),
            connections: TaskTracker::new(),
            recheck: Notify::new(),
            refused: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
        }
    }

    /// Puts `policy` in effect for new connections.
    pub(crate) fn set_policy(&self, policy: Policy) {
        *self.policy.write() = Arc::new(policy);
    }

    /// Puts the node ports of `listeners` in effect for new connections.
    pub(crate) fn set_node_ports(&self, listeners: &[ListenerSpec]) {
        *self.node_ports.write() = node_ports(listeners);
    }

    /// Clients refused by the source ranges so far.
    pub(crate) fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Clients turned away so far.
    pub(crate) fn rejected(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
    }
}

fn node_ports(listeners: &[ListenerSpec]) -> BTreeMap<(Transport, u16), u16> {
    listeners
        .iter()
        .map(|l| ((l.transport, l.port), l.node_port))
        .collect()
}
