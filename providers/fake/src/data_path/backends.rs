//! The backends of one load balancer as its listeners see them: each backend's health and connection
//! counts, the choice of a backend for a new connection (round robin over the healthy ones, or the
//! client's previous backend under ClientIP affinity), and the draining of backends that left.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::spec::{BackendSpec, Policy};

/// Affinity entries kept before expired ones are swept.
const AFFINITY_SWEEP_AT: usize = 4096;

/// What health checks say of a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Health {
    /// Not checked yet: receives no traffic.
    Unknown,
    /// Receives new connections.
    Healthy,
    /// Receives no new connections.
    Unhealthy,
}

/// One backend and what happened on it.
#[derive(Debug)]
pub(crate) struct Backend {
    pub(crate) spec: BackendSpec,
    health: AtomicU8,
    /// Checks in a row that disagree with the current health.
    streak: AtomicU32,
    /// The next check decides alone (the health port changed).
    decide_next: AtomicBool,
    active: AtomicU64,
    total: AtomicU64,
    /// Cancelled when the backend's drain ends: its connections close.
    retired: CancellationToken,
}

impl Backend {
    fn new(spec: BackendSpec) -> Backend {
        Backend {
            spec,
            health: AtomicU8::new(Health::Unknown as u8),
            streak: AtomicU32::new(0),
            decide_next: AtomicBool::new(false),
            active: AtomicU64::new(0),
            total: AtomicU64::new(0),
            retired: CancellationToken::new(),
        }
    }

    /// What the health checks say now.
    pub(crate) fn health(&self) -> Health {
        match self.health.load(Ordering::Relaxed) {
            h if h == Health::Healthy as u8 => Health::Healthy,
            h if h == Health::Unhealthy as u8 => Health::Unhealthy,
            _ => Health::Unknown,
        }
    }

    /// Records one check: the first decides alone (and the first after [`Backends::decide_on_next_check`]);
    /// later, `healthy` or `unhealthy` checks in a row flip the health. Returns the new health when it
    /// changed.
    pub(crate) fn record_check(
        &self,
        passed: bool,
        healthy: u32,
        unhealthy: u32,
    ) -> Option<Health> {
        let now = if self.decide_next.swap(false, Ordering::Relaxed) {
            Health::Unknown
        } else {
            self.health()
        };
        let next = match (now, passed) {
            (Health::Unknown, true) => Health::Healthy,
            (Health::Unknown, false) => Health::Unhealthy,
            (Health::Healthy, true) | (Health::Unhealthy, false) => {
                self.streak.store(0, Ordering::Relaxed);
                return None;
            }
            (Health::Healthy, false) | (Health::Unhealthy, true) => {
                let needed = if passed { healthy } else { unhealthy };
                if self.streak.fetch_add(1, Ordering::Relaxed) + 1 < needed {
                    return None;
                }
                if passed {
                    Health::Healthy
                } else {
                    Health::Unhealthy
                }
            }
        };
        self.streak.store(0, Ordering::Relaxed);
        let before = self.health.swap(next as u8, Ordering::Relaxed);
        (before != next as u8).then_some(next)
    }

    /// Counts a connection for as long as the guard lives.
    pub(crate) fn open(self: &Arc<Self>) -> ConnectionGuard {
        self.active.fetch_add(1, Ordering::Relaxed);
        self.total.fetch_add(1, Ordering::Relaxed);
        ConnectionGuard(self.clone())
    }

    /// Resolves when the backend's drain has ended.
    pub(crate) async fn retired(&self) {
        self.retired.cancelled().await;
    }
}

/// Keeps a connection counted on its backend.
#[derive(Debug)]
pub(crate) struct ConnectionGuard(Arc<Backend>);

impl ConnectionGuard {
    pub(crate) fn backend(&self) -> &Arc<Backend> {
        &self.0
    }
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A backend as the admin API reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendStatus {
    /// The node.
    pub node: String,
    /// The address its node ports are reached on.
    pub address: String,
    /// What health checks say.
    pub health: Health,
    /// True while it drains after leaving the load balancer.
    pub draining: bool,
    /// Connections (and UDP flows) open now.
    pub active: u64,
    /// Connections (and UDP flows) since it joined.
    pub total: u64,
}

/// The backends of one load balancer.
#[derive(Debug)]
pub(crate) struct Backends {
    current: RwLock<Vec<Arc<Backend>>>,
    draining: Mutex<Vec<Arc<Backend>>>,
    next: AtomicUsize,
    affinity: Mutex<HashMap<IpAddr, (String, Instant)>>,
    drain: Duration,
}

impl Backends {
    pub(crate) fn new(specs: Vec<BackendSpec>, drain: Duration) -> Backends {
        Backends {
            current: RwLock::new(
                specs
                    .into_iter()
                    .map(|s| Arc::new(Backend::new(s)))
                    .collect(),
            ),
            draining: Mutex::new(Vec::new()),
            next: AtomicUsize::new(0),
            affinity: Mutex::new(HashMap::new()),
            drain,
        }
    }

    /// The backends now in the load balancer.
    pub(crate) fn current(&self) -> Vec<Arc<Backend>> {
        self.current.read().clone()
    }

    /// Makes `specs` the backends: those staying keep their health and connections, new ones start
    /// unchecked, and those leaving drain: their connections go on for the drain time, then close.
    pub(crate) fn replace(&self, specs: Vec<BackendSpec>) {
        let mut current = self.current.write();
        let (stay, leave): (Vec<_>, Vec<_>) =
            current.drain(..).partition(|b| specs.contains(&b.spec));
        *current = specs
            .into_iter()
            .map(|s| {
                stay.iter()
                    .find(|b| b.spec == s)
                    .cloned()
                    .unwrap_or_else(|| Arc::new(Backend::new(s)))
            })
            .collect();
        drop(current);
        let mut draining = self.draining.lock();
        draining.retain(|b| !b.retired.is_cancelled() || b.active.load(Ordering::Relaxed) > 0);
        drop(draining);
        for backend in leave {
            tracing::info!(node = %backend.spec.node, drain = ?self.drain,
                "fake data path: backend left the load balancer; draining its connections");
            self.draining.lock().push(backend.clone());
            self.retire_after_drain(backend);
        }
    }

    fn retire_after_drain(&self, backend: Arc<Backend>) {
        let drain = self.drain;
        tokio::spawn(async move {
            tokio::time::sleep(drain).await;
            backend.retired.cancel();
        });
    }

    /// Makes the next check of every backend decide its health alone (its target changed).
    pub(crate) fn decide_on_next_check(&self) {
        for backend in self.current.read().iter() {
            backend.decide_next.store(true, Ordering::Relaxed);
        }
    }

    /// Ends every drain now (the load balancer is going away).
    pub(crate) fn retire_all(&self) {
        for backend in self.draining.lock().drain(..) {
            backend.retired.cancel();
        }
        for backend in self.current.read().iter() {
            backend.retired.cancel();
        }
    }

    /// The backend for a new connection from `client`, or none when no backend is healthy.
    pub(crate) fn pick(
        &self,
        client: IpAddr,
        policy: &Policy,
        skip: Option<&Backend>,
    ) -> Option<Arc<Backend>> {
        let current = self.current.read();
        let healthy: Vec<&Arc<Backend>> = current
            .iter()
            .filter(|b| b.health() == Health::Healthy)
            .filter(|b| skip.is_none_or(|s| !std::ptr::eq(s, b.as_ref())))
            .collect();
        if healthy.is_empty() {
            return None;
        }
        let now = Instant::now();
        if let Some(timeout) = policy.affinity {
            let mut affinity = self.affinity.lock();
            if let Some((node, last)) = affinity.get(&client)
                && now.duration_since(*last) < timeout
                && let Some(b) = healthy.iter().find(|b| &b.spec.node == node)
            {
                let chosen = Arc::clone(b);
                affinity.insert(client, (chosen.spec.node.clone(), now));
                return Some(chosen);
            }
            let chosen = self.round_robin(&healthy);
            if affinity.len() >= AFFINITY_SWEEP_AT {
                affinity.retain(|_, (_, last)| now.duration_since(*last) < timeout);
            }
            affinity.insert(client, (chosen.spec.node.clone(), now));
            return Some(chosen);
        }
        Some(self.round_robin(&healthy))
    }

    fn round_robin(&self, healthy: &[&Arc<Backend>]) -> Arc<Backend> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        Arc::clone(healthy[n % healthy.len()])
    }

    /// Every backend, current and draining (while it has connections).
    pub(crate) fn status(&self) -> Vec<BackendStatus> {
        let mut draining = self.draining.lock();
        draining.retain(|b| !b.retired.is_cancelled() || b.active.load(Ordering::Relaxed) > 0);
        let status = |b: &Arc<Backend>, draining: bool| BackendStatus {
            node: b.spec.node.clone(),
            address: b.spec.address.to_string(),
            health: b.health(),
            draining,
            active: b.active.load(Ordering::Relaxed),
            total: b.total.load(Ordering::Relaxed),
        };
        let current = self.current.read();
        current
            .iter()
            .map(|b| status(b, false))
            .chain(draining.iter().map(|b| status(b, true)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(node: &str, last: u8) -> BackendSpec {
        BackendSpec {
            node: node.into(),
            address: IpAddr::from([10, 0, 0, last]),
        }
    }

    fn policy(affinity: Option<Duration>) -> Policy {
        Policy {
            health_port: 1,
            source_ranges: Vec::new(),
            affinity,
            proxy: None,
        }
    }

    fn healthy(backends: &Backends) {
        for b in backends.current() {
            b.record_check(true, 1, 2);
        }
    }

    #[test]
    fn thresholds_flip_health_after_streaks() {
        let b = Backend::new(spec("a", 1));
        assert_eq!(b.health(), Health::Unknown);
        assert_eq!(b.record_check(true, 2, 3), Some(Health::Healthy));
        assert_eq!(b.record_check(false, 2, 3), None);
        assert_eq!(b.record_check(false, 2, 3), None);
        assert_eq!(b.record_check(true, 2, 3), None, "a pass breaks the streak");
        assert_eq!(b.record_check(false, 2, 3), None);
        assert_eq!(b.record_check(false, 2, 3), None);
        assert_eq!(b.record_check(false, 2, 3), Some(Health::Unhealthy));
        assert_eq!(b.record_check(true, 2, 3), None);
        assert_eq!(b.record_check(true, 2, 3), Some(Health::Healthy));
    }

    #[tokio::test]
    async fn round_robin_over_healthy_backends_only() {
        let backends = Backends::new(
            vec![spec("a", 1), spec("b", 2), spec("c", 3)],
            Duration::ZERO,
        );
        let client = IpAddr::from([127, 0, 0, 1]);
        assert!(
            backends.pick(client, &policy(None), None).is_none(),
            "unchecked backends get nothing"
        );
        healthy(&backends);
        backends.current()[1].record_check(false, 1, 1);
        let picked: Vec<String> = (0..4)
            .map(|_| {
                backends
                    .pick(client, &policy(None), None)
                    .unwrap()
                    .spec
                    .node
                    .clone()
            })
            .collect();
        assert_eq!(picked, ["a", "c", "a", "c"]);
    }

    #[tokio::test]
    async fn client_affinity_keeps_a_client_on_its_backend() {
        let backends = Backends::new(vec![spec("a", 1), spec("b", 2)], Duration::ZERO);
        healthy(&backends);
        let p = policy(Some(Duration::from_secs(60)));
        let (x, y) = (IpAddr::from([127, 0, 0, 2]), IpAddr::from([127, 0, 0, 3]));
        let first = backends.pick(x, &p, None).unwrap().spec.node.clone();
        let other = backends.pick(y, &p, None).unwrap().spec.node.clone();
        assert_ne!(first, other);
        for _ in 0..5 {
            assert_eq!(backends.pick(x, &p, None).unwrap().spec.node, first);
        }
        // Its backend unhealthy, the client moves.
        backends
            .current()
            .iter()
            .find(|b| b.spec.node == first)
            .unwrap()
            .record_check(false, 1, 1);
        assert_eq!(backends.pick(x, &p, None).unwrap().spec.node, other);
    }

    #[tokio::test]
    async fn a_replaced_backend_drains_then_retires() {
        let backends = Backends::new(vec![spec("a", 1), spec("b", 2)], Duration::from_millis(50));
        healthy(&backends);
        let a = backends.current()[0].clone();
        let guard = a.open();
        backends.replace(vec![spec("b", 2), spec("c", 3)]);
        let status = backends.status();
        let nodes: Vec<(&str, bool, Health)> = status
            .iter()
            .map(|s| (s.node.as_str(), s.draining, s.health))
            .collect();
        assert_eq!(
            nodes,
            [
                ("b", false, Health::Healthy),
                ("c", false, Health::Unknown),
                ("a", true, Health::Healthy)
            ]
        );
        tokio::time::timeout(Duration::from_secs(2), guard.backend().retired())
            .await
            .unwrap();
        drop(guard);
        assert_eq!(
            backends.status().len(),
            2,
            "a retired backend without connections is forgotten"
        );
    }
}
