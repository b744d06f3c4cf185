//! The fake cloud's in-memory state and the operations on it. Everything here is synchronous and runs under
//! the cloud's mutex; latency is applied by the caller outside the lock.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use cloud_provider::{CloudError, ProviderId, default_load_balancer_name, node_address};
use k8s_openapi::api::core::v1::{
    LoadBalancerIngress, LoadBalancerStatus, Node, NodeAddress, Service,
};
use serde::{Deserialize, Serialize};

use crate::config::{
    AddressConfig, ConfigError, FakeConfig, InitialState, InstanceConfig, LoadBalancerConfig,
    LoadBalancerPortConfig, PROVIDER_NAME, ProxyProtocol, RouteConfig, route_name,
};
use crate::faults::{ALL_OPERATIONS, FaultKind, FaultSpec, Rng, stable_hash, validate_fault};
use crate::pool::{Cidr, IpPool};
use crate::service_annotations::{proxy_protocol, requested_ip, service_key, source_ranges};

/// Why a control operation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ControlError {
    /// The named instance (or other object) does not exist or is terminated.
    #[error("not found: {0}")]
    NotFound(String),
    /// An instance with this name or ID already exists.
    #[error("already exists: {0}")]
    AlreadyExists(String),
    /// The request is malformed (unknown operation, bad rate, bad instance definition, ...).
    #[error("invalid request: {0}")]
    Invalid(String),
}

/// Whether an instance is running or shut down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PowerState {
    /// Running.
    Running,
    /// Exists but shut down.
    Stopped,
}

/// An instance of the fake cloud, as the control surface reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceRecord {
    /// The node name.
    pub name: String,
    /// The instance ID.
    pub id: String,
    /// `fake://<id>`.
    #[serde(rename = "providerID")]
    pub provider_id: String,
    /// The instance type.
    #[serde(rename = "type")]
    pub instance_type: String,
    /// The zone.
    pub zone: String,
    /// The region.
    pub region: String,
    /// Running or stopped.
    pub state: PowerState,
    /// The addresses, in order.
    pub addresses: Vec<NodeAddress>,
    /// Extra labels reported in the metadata.
    pub labels: BTreeMap<String, String>,
    /// True when the instance was created by auto-discovery from a node.
    pub auto_discovered: bool,
    /// The tags the tagging controller put on it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
}

/// One port of a load balancer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancerPort {
    /// The Service port name.
    pub name: Option<String>,
    /// TCP, UDP or SCTP.
    pub protocol: String,
    /// The front-end port.
    pub port: i32,
    /// The node port traffic goes to.
    pub node_port: Option<i32>,
}

/// A load balancer of the fake cloud.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancerRecord {
    /// The cloud name (the default load-balancer name of the Service).
    pub name: String,
    /// The cluster name given by the controller.
    pub cluster: String,
    /// `namespace/name` of the Service.
    pub service: String,
    /// The Service UID.
    pub service_uid: String,
    /// The ingress IP.
    pub ip: String,
    /// The ports, in Service order.
    pub ports: Vec<LoadBalancerPort>,
    /// The backend node names, sorted (one shared list for all load balancers with the same backends).
    pub nodes: Arc<[String]>,
    /// How many times `ensure_load_balancer` succeeded for it.
    pub ensure_count: u64,
    /// How many times `update_load_balancer` succeeded for it.
    pub update_count: u64,
    /// The PROXY protocol version sent to the backends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_protocol: Option<ProxyProtocol>,
}

/// A route of the fake cloud.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteRecord {
    /// The route name (`<cluster>-<name hint>`).
    pub name: String,
    /// The cluster name given by the controller.
    pub cluster: String,
    /// The target node.
    pub target_node: String,
    /// The destination CIDR.
    #[serde(rename = "destinationCIDR")]
    pub destination_cidr: String,
    /// The target node's addresses given at creation.
    pub target_node_addresses: Vec<NodeAddress>,
    /// True when the target node's instance is gone.
    pub blackhole: bool,
}

/// Everything the fake cloud holds, as `GET /state` and `FakeControl::state` report it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CloudSnapshot {
    /// The region.
    pub region: String,
    /// The zones.
    pub zones: Vec<String>,
    /// The cluster name.
    pub cluster_name: String,
    /// The cluster ID, if configured.
    #[serde(rename = "clusterID")]
    pub cluster_id: Option<String>,
    /// Whether auto-discovery is on.
    pub auto_discover: bool,
    /// The load-balancer IP pool.
    #[serde(rename = "loadBalancerCIDR")]
    pub load_balancer_cidr: String,
    /// Instances, by instance ID order.
    pub instances: Vec<InstanceRecord>,
    /// Names of terminated instances (auto-discovery does not bring them back).
    pub terminated: Vec<String>,
    /// Load balancers, by name.
    pub load_balancers: Vec<LoadBalancerRecord>,
    /// Routes, by name.
    pub routes: Vec<RouteRecord>,
    /// Active faults, by operation.
    pub faults: BTreeMap<String, FaultSpec>,
    /// Calls per operation.
    pub calls: BTreeMap<String, u64>,
}

/// An injected failure decided by [`State::gate`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Injected {
    Provider,
    Retry(Duration),
    NotFound,
    /// A hang that ended because the faults changed.
    Hang,
}

impl Injected {
    /// The error for this failure; `not_found` is what a missing object means for the operation.
    pub(crate) fn error(self, op: &str, not_found: CloudError) -> CloudError {
        match self {
            Injected::Provider => CloudError::provider(format!("injected fault in {op}")),
            Injected::Retry(after) => CloudError::retry(format!("injected retry in {op}"), after),
            Injected::NotFound => not_found,
            Injected::Hang => CloudError::provider(format!(
                "injected hang in {op} ended (the faults changed): connection reset"
            )),
        }
    }
}

#[derive(Debug, Clone)]
struct Instance {
    name: String,
    id: String,
    instance_type: String,
    zone: String,
    running: bool,
    addresses: Vec<NodeAddress>,
    labels: BTreeMap<String, String>,
    auto: bool,
    tags: BTreeMap<String, String>,
}

/// The mutable state of one fake cloud.
#[derive(Debug)]
pub(crate) struct State {
    instances: BTreeMap<String, Instance>,
    by_name: BTreeMap<String, String>,
    dead_ids: BTreeSet<String>,
    /// Terminated node names, with the ID their instance had.
    dead_names: BTreeMap<String, String>,
    lbs: BTreeMap<String, LoadBalancerRecord>,
    /// The backend list given last, shared by the load balancers that have the same backends.
    last_backends: Arc<[String]>,
    pool: IpPool,
    routes: BTreeMap<String, RouteRecord>,
    faults: BTreeMap<String, FaultSpec>,
    /// Bumped by every change of the faults through the control surface: ends injected hangs.
    fault_changes: u64,
    streams: BTreeMap<String, Rng>,
    calls: BTreeMap<String, u64>,
    seed: u64,
    /// Whether load balancers carry traffic themselves (their ingress is then `ipMode: Proxy`).
    proxies_traffic: bool,
}

fn node_name(node: &Node) -> Result<&str, CloudError> {
    node.metadata
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| CloudError::provider("node has no name"))
}

fn node_provider_id(node: &Node) -> Option<&str> {
    node.spec
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .filter(|p| !p.is_empty())
}

fn parse_fake_id(provider_id: &str) -> Result<String, CloudError> {
    ProviderId::parse_for(PROVIDER_NAME, provider_id)
        .map(|p| p.instance)
        .map_err(|e| CloudError::provider_with("not a fake cloud provider ID", e))
}

impl State {
    /// Builds the initial state from a validated config.
    pub(crate) fn new(cfg: &FakeConfig) -> Result<Self, ConfigError> {
        let cidr = Cidr::parse(&cfg.load_balancer_cidr)
            .map_err(|m| ConfigError::invalid("loadBalancerCIDR", m))?;
        let mut st = State {
            instances: BTreeMap::new(),
            by_name: BTreeMap::new(),
            dead_ids: BTreeSet::new(),
            dead_names: BTreeMap::new(),
            lbs: BTreeMap::new(),
            last_backends: Arc::from([]),
            pool: IpPool::new(cidr),
            routes: BTreeMap::new(),
            faults: cfg.faults.clone(),
            fault_changes: 0,
            streams: BTreeMap::new(),
            calls: BTreeMap::new(),
            seed: cfg.seed,
            proxies_traffic: cfg.data_path.enabled,
        };
        for (i, inst) in cfg.instances.iter().enumerate() {
            st.add_instance(cfg, inst.clone())
                .map_err(|e| ConfigError::invalid(format!("instances[{i}]"), e.to_string()))?;
        }
        let ips = cfg.load_balancer_ips(&mut st.pool)?;
        // One shared list per declared node set.
        let mut sets: Vec<Option<Arc<[String]>>> = vec![None; cfg.load_balancer_node_sets.len()];
        for (lb, ip) in cfg.load_balancers.iter().zip(ips) {
            let declared = cfg.load_balancer_nodes(lb);
            let nodes = match lb.node_set.and_then(|i| sets.get_mut(i)) {
                Some(Some(shared)) => shared.clone(),
                Some(slot) => {
                    let shared =
                        st.backends_named(sorted_unique(declared.iter().map(String::as_str)));
                    *slot = Some(shared.clone());
                    shared
                }
                None => st.backends_named(sorted_unique(declared.iter().map(String::as_str))),
            };
            let name = lb.name();
            st.lbs.insert(
                name.clone(),
                LoadBalancerRecord {
                    name,
                    cluster: cfg.load_balancer_cluster(lb).to_string(),
                    service: lb.service.clone(),
                    service_uid: lb.service_uid.clone(),
                    ip: ip.to_string(),
                    ports: lb
                        .ports
                        .iter()
                        .map(|p| LoadBalancerPort {
                            name: p.name.clone(),
                            protocol: p.protocol.clone(),
                            port: p.port,
                            node_port: p.node_port,
                        })
                        .collect(),
                    nodes,
                    ensure_count: 0,
                    update_count: 0,
                    proxy_protocol: lb.proxy_protocol,
                },
            );
        }
        for r in &cfg.routes {
            let name = cfg.route_name(r);
            st.routes.insert(
                name.clone(),
                RouteRecord {
                    name,
                    cluster: cfg.route_cluster(r).to_string(),
                    target_node: r.target_node.clone(),
                    destination_cidr: r.destination_cidr.clone(),
                    target_node_addresses: r
                        .target_node_addresses
                        .iter()
                        .map(|a| node_address(&a.type_, &a.address))
                        .collect(),
                    blackhole: false,
                },
            );
        }
        Ok(st)
    }

    // ---- faults and counters ----

    /// Counts a call of `op` and decides its latency and whether it fails.
    /// Counts one call against a fault limited to a number of calls, lifting it after the last one.
    fn count_down_fault(&mut self, key: &str, spec: FaultSpec) {
        match spec.calls {
            Some(left) if left <= 1 => {
                self.faults.remove(key);
            }
            Some(left) => {
                if let Some(fault) = self.faults.get_mut(key) {
                    fault.calls = Some(left - 1);
                }
            }
            None => {}
        }
    }

    pub(crate) fn gate(&mut self, op: &str) -> (Duration, Option<Injected>) {
        *self.calls.entry(op.to_string()).or_default() += 1;
        let key = if self.faults.contains_key(op) {
            op
        } else {
            ALL_OPERATIONS
        };
        let Some(spec) = self.faults.get(key).copied() else {
            return (Duration::ZERO, None);
        };
        self.count_down_fault(key, spec);
        let latency = Duration::from_millis(spec.latency_ms);
        if spec.error_rate <= 0.0 {
            return (latency, None);
        }
        let seed = self.seed ^ stable_hash(op);
        let draw = self
            .streams
            .entry(op.to_string())
            .or_insert_with(|| Rng::new(seed))
            .next_f64();
        if draw >= spec.error_rate {
            return (latency, None);
        }
        let injected = match spec.kind {
            FaultKind::Provider => Injected::Provider,
            FaultKind::Retry => Injected::Retry(Duration::from_millis(spec.retry_after_ms)),
            FaultKind::NotFound => Injected::NotFound,
            FaultKind::Hang => Injected::Hang,
        };
        (latency, Some(injected))
    }

    pub(crate) fn set_fault(&mut self, op: &str, spec: FaultSpec) -> Result<(), ControlError> {
        validate_fault(op, &spec).map_err(ControlError::Invalid)?;
        self.faults.insert(op.to_string(), spec);
        self.fault_changes += 1;
        Ok(())
    }

    pub(crate) fn clear_fault(&mut self, op: &str) -> bool {
        self.fault_changes += 1;
        self.faults.remove(op).is_some()
    }

    pub(crate) fn clear_faults(&mut self) {
        self.fault_changes += 1;
        self.faults.clear();
    }

    /// How many times the faults were changed through the control surface (injected hangs wait for it to
    /// move).
    pub(crate) fn fault_changes(&self) -> u64 {
        self.fault_changes
    }

    pub(crate) fn faults(&self) -> BTreeMap<String, FaultSpec> {
        self.faults.clone()
    }

    pub(crate) fn calls(&self) -> BTreeMap<String, u64> {
        self.calls.clone()
    }

    pub(crate) fn reset_calls(&mut self) {
        self.calls.clear();
    }

    // ---- instances ----

    fn auto_zone(cfg: &FakeConfig, key: &str) -> String {
        let zones = cfg.effective_zones();
        let n = zones.len().max(1) as u64;
        let idx = usize::try_from(stable_hash(key) % n).unwrap_or(0);
        zones.get(idx).cloned().unwrap_or_default()
    }

    fn record(cfg: &FakeConfig, i: &Instance) -> InstanceRecord {
        InstanceRecord {
            name: i.name.clone(),
            id: i.id.clone(),
            provider_id: ProviderId::new(PROVIDER_NAME, &i.id).to_string(),
            instance_type: i.instance_type.clone(),
            zone: i.zone.clone(),
            region: cfg.region.clone(),
            state: if i.running {
                PowerState::Running
            } else {
                PowerState::Stopped
            },
            addresses: i.addresses.clone(),
            labels: i.labels.clone(),
            auto_discovered: i.auto,
            tags: i.tags.clone(),
        }
    }

    fn insert(&mut self, inst: Instance) {
        self.dead_ids.remove(&inst.id);
        self.dead_names.remove(&inst.name);
        self.by_name.insert(inst.name.clone(), inst.id.clone());
        self.instances.insert(inst.id.clone(), inst);
    }

    /// Creates an auto-discovered running instance.
    fn discover(
        &mut self,
        cfg: &FakeConfig,
        id: &str,
        name: &str,
        addresses: &[NodeAddress],
    ) -> String {
        let inst = Instance {
            name: name.to_string(),
            id: id.to_string(),
            instance_type: cfg.default_instance_type().to_string(),
            zone: Self::auto_zone(cfg, name),
            running: true,
            addresses: discovered_addresses(cfg, addresses),
            labels: BTreeMap::new(),
            auto: true,
            tags: BTreeMap::new(),
        };
        tracing::debug!(node = name, instance = id, zone = %inst.zone, "fake cloud discovered an instance");
        self.insert(inst);
        id.to_string()
    }

    /// The instance ID of a node, discovering it when allowed; `None` when the instance is gone.
    pub(crate) fn resolve_node(
        &mut self,
        cfg: &FakeConfig,
        node: &Node,
    ) -> Result<Option<String>, CloudError> {
        let name = node_name(node)?;
        let addresses = cloud_provider::node_addresses_of(node);
        let id = match node_provider_id(node) {
            Some(pid) => {
                let id = parse_fake_id(pid)?;
                if self.instances.contains_key(&id) {
                    Some(id)
                } else if self.dead_ids.contains(&id)
                    || !cfg.auto_discover
                    || self.by_name.contains_key(name)
                {
                    // Gone, not discoverable, or the node's name belongs to another instance.
                    None
                } else {
                    Some(self.discover(cfg, &id, name, addresses))
                }
            }
            None => match self.by_name.get(name) {
                Some(id) => Some(id.clone()),
                None if self.dead_names.contains_key(name) || !cfg.auto_discover => None,
                None => Some(self.discover(cfg, name, name, addresses)),
            },
        };
        // Auto-discovered instances follow the kubelet-reported addresses.
        if let Some(inst) = id.as_ref().and_then(|id| self.instances.get_mut(id))
            && inst.auto
            && !addresses.is_empty()
        {
            let reported = discovered_addresses(cfg, addresses);
            if inst.addresses != reported {
                inst.addresses = reported;
            }
        }
        Ok(id)
    }

    /// The instance ID of a node name, discovering it when allowed.
    pub(crate) fn resolve_name(&mut self, cfg: &FakeConfig, name: &str) -> Option<String> {
        if let Some(id) = self.by_name.get(name) {
            return Some(id.clone());
        }
        if name.is_empty() || self.dead_names.contains_key(name) || !cfg.auto_discover {
            return None;
        }
        Some(self.discover(cfg, name, name, &[]))
    }

    /// The instance ID of a provider ID, discovering it when allowed.
    pub(crate) fn resolve_provider_id(
        &mut self,
        cfg: &FakeConfig,
        provider_id: &str,
    ) -> Result<Option<String>, CloudError> {
        let id = parse_fake_id(provider_id)?;
        if self.instances.contains_key(&id) {
            return Ok(Some(id));
        }
        if self.dead_ids.contains(&id) || !cfg.auto_discover || self.by_name.contains_key(&id) {
            return Ok(None);
        }
        Ok(Some(self.discover(cfg, &id, &id, &[])))
    }

    /// Adds `tags` to the instance of `provider_id` (`add`; an instance is discovered as lookups discover
    /// it), or removes those keys with those values. `Ok(false)` when there is no such instance.
    pub(crate) fn change_tags(
        &mut self,
        cfg: &FakeConfig,
        provider_id: &str,
        tags: &BTreeMap<String, String>,
        add: bool,
    ) -> Result<bool, CloudError> {
        let id = if add {
            self.resolve_provider_id(cfg, provider_id)?
        } else {
            Some(parse_fake_id(provider_id)?)
        };
        let Some(instance) = id.and_then(|id| self.instances.get_mut(&id)) else {
            return Ok(false);
        };
        for (key, value) in tags {
            if add {
                instance.tags.insert(key.clone(), value.clone());
            } else if instance.tags.get(key) == Some(value) {
                instance.tags.remove(key);
            }
        }
        Ok(true)
    }

    /// The instance with this ID, as a record.
    pub(crate) fn instance(&self, cfg: &FakeConfig, id: &str) -> Option<InstanceRecord> {
        self.instances.get(id).map(|i| Self::record(cfg, i))
    }

    /// Looks an instance up by node name, then by instance ID.
    pub(crate) fn find(&self, cfg: &FakeConfig, name_or_id: &str) -> Option<InstanceRecord> {
        let id = self
            .by_name
            .get(name_or_id)
            .map(String::as_str)
            .unwrap_or(name_or_id);
        self.instance(cfg, id)
    }

    fn find_id(&self, name_or_id: &str) -> Result<String, ControlError> {
        if let Some(id) = self.by_name.get(name_or_id) {
            return Ok(id.clone());
        }
        if self.instances.contains_key(name_or_id) {
            return Ok(name_or_id.to_string());
        }
        if self.dead_names.contains_key(name_or_id) || self.dead_ids.contains(name_or_id) {
            return Err(ControlError::NotFound(format!(
                "instance {name_or_id:?} is terminated"
            )));
        }
        Err(ControlError::NotFound(format!(
            "no instance named {name_or_id:?}"
        )))
    }

    pub(crate) fn add_instance(
        &mut self,
        cfg: &FakeConfig,
        inst: InstanceConfig,
    ) -> Result<InstanceRecord, ControlError> {
        let zones = cfg.effective_zones();
        let id = cfg
            .validate_instance(&inst, &zones, "instance")
            .map_err(|e| ControlError::Invalid(e.to_string()))?;
        if self.by_name.contains_key(&inst.name) {
            return Err(ControlError::AlreadyExists(format!(
                "instance named {:?}",
                inst.name
            )));
        }
        if self.instances.contains_key(&id) {
            return Err(ControlError::AlreadyExists(format!("instance ID {id:?}")));
        }
        let record_zone = inst
            .zone
            .clone()
            .unwrap_or_else(|| Self::auto_zone(cfg, &inst.name));
        let instance = Instance {
            name: inst.name.clone(),
            id: id.clone(),
            instance_type: inst
                .instance_type
                .clone()
                .unwrap_or_else(|| cfg.default_instance_type().to_string()),
            zone: record_zone,
            running: inst.state == InitialState::Running,
            addresses: inst
                .addresses
                .iter()
                .map(|a| node_address(&a.type_, &a.address))
                .collect(),
            labels: inst.labels.clone(),
            auto: false,
            tags: BTreeMap::new(),
        };
        let record = Self::record(cfg, &instance);
        if inst.state == InitialState::Terminated {
            // Present in the config only as a tombstone.
            self.by_name.remove(&inst.name);
            self.dead_ids.insert(id.clone());
            self.dead_names.insert(inst.name, id);
        } else {
            self.insert(instance);
        }
        Ok(record)
    }

    pub(crate) fn set_running(
        &mut self,
        cfg: &FakeConfig,
        name_or_id: &str,
        running: bool,
    ) -> Result<InstanceRecord, ControlError> {
        let id = self.find_id(name_or_id)?;
        let inst = self
            .instances
            .get_mut(&id)
            .ok_or_else(|| ControlError::NotFound(format!("no instance {id:?}")))?;
        inst.running = running;
        Ok(Self::record(cfg, inst))
    }

    pub(crate) fn terminate(
        &mut self,
        cfg: &FakeConfig,
        name_or_id: &str,
    ) -> Result<InstanceRecord, ControlError> {
        let id = self.find_id(name_or_id)?;
        let inst = self
            .instances
            .remove(&id)
            .ok_or_else(|| ControlError::NotFound(format!("no instance {id:?}")))?;
        self.by_name.remove(&inst.name);
        self.dead_ids.insert(inst.id.clone());
        self.dead_names.insert(inst.name.clone(), inst.id.clone());
        Ok(Self::record(cfg, &inst))
    }

    /// Whether the instance with this ID is running (`None` = unknown).
    pub(crate) fn is_running(&self, id: &str) -> Option<bool> {
        self.instances.get(id).map(|i| i.running)
    }

    /// The node name of the machine with this hostname.
    pub(crate) fn node_name_for_hostname(&self, hostname: &str) -> String {
        self.instances
            .values()
            .find(|i| {
                i.addresses
                    .iter()
                    .any(|a| a.type_ == cloud_provider::ADDRESS_HOSTNAME && a.address == hostname)
            })
            .map(|i| i.name.clone())
            .unwrap_or_else(|| hostname.to_string())
    }

    // ---- load balancers ----

    fn lb_name(service: &Service) -> Result<String, CloudError> {
        match service.metadata.uid.as_deref() {
            Some(uid) if !uid.is_empty() => Ok(default_load_balancer_name(service)),
            _ => Err(CloudError::provider(format!(
                "service {} has no UID, so its load balancer has no name",
                service_key(service)
            ))),
        }
    }

    /// The status of a load balancer on `ip`: `ipMode: Proxy` when it sends the PROXY protocol or carries
    /// the traffic itself (clients in the cluster must then go through it), else `VIP`.
    fn status_of(&self, ip: &str, proxy: Option<ProxyProtocol>) -> LoadBalancerStatus {
        let mode = if proxy.is_some() || self.proxies_traffic {
            "Proxy"
        } else {
            "VIP"
        };
        LoadBalancerStatus {
            ingress: Some(vec![LoadBalancerIngress {
                ip: Some(ip.to_string()),
                ip_mode: Some(mode.to_string()),
                ..Default::default()
            }]),
        }
    }

    fn ports_of(service: &Service) -> Vec<LoadBalancerPort> {
        service
            .spec
            .as_ref()
            .and_then(|s| s.ports.as_ref())
            .map(|ports| {
                ports
                    .iter()
                    .map(|p| LoadBalancerPort {
                        name: p.name.clone(),
                        protocol: p.protocol.clone().unwrap_or_else(|| "TCP".to_string()),
                        port: p.port,
                        node_port: p.node_port,
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The sorted backend names of `nodes`, shared with the previous load balancer's when they are the same.
    fn backends(&mut self, nodes: &[Node]) -> Arc<[String]> {
        self.backends_named(backend_names(nodes))
    }

    /// [`Self::backends`] for node names sorted without duplicates.
    fn backends_named(&mut self, names: Vec<&str>) -> Arc<[String]> {
        if !names
            .iter()
            .copied()
            .eq(self.last_backends.iter().map(String::as_str))
        {
            self.last_backends = names.into_iter().map(str::to_string).collect();
        }
        self.last_backends.clone()
    }

    pub(crate) fn get_lb(
        &self,
        service: &Service,
    ) -> Result<Option<LoadBalancerStatus>, CloudError> {
        let name = Self::lb_name(service)?;
        Ok(self
            .lbs
            .get(&name)
            .map(|lb| self.status_of(&lb.ip, lb.proxy_protocol)))
    }

    pub(crate) fn ensure_lb(
        &mut self,
        cluster: &str,
        service: &Service,
        nodes: &[Node],
    ) -> Result<LoadBalancerStatus, CloudError> {
        let name = Self::lb_name(service)?;
        let requested = requested_ip(service)?;
        let proxy = proxy_protocol(service)?;
        source_ranges(service)?;
        let pool_err = |e: crate::pool::PoolError| CloudError::provider(e.to_string());
        let ip = match self.lbs.get(&name) {
            Some(lb) => {
                let current: Option<IpAddr> = lb.ip.parse().ok();
                match requested {
                    Some(want) if Some(want) != current => {
                        let ip = self.pool.allocate_specific(want).map_err(pool_err)?;
                        if let Some(old) = current {
                            self.pool.release(old);
                        }
                        ip.to_string()
                    }
                    _ => lb.ip.clone(),
                }
            }
            None => match requested {
                Some(want) => self
                    .pool
                    .allocate_specific(want)
                    .map_err(pool_err)?
                    .to_string(),
                None => self.pool.allocate().map_err(pool_err)?.to_string(),
            },
        };
        self.lbs
            .entry(name.clone())
            .or_insert_with(|| LoadBalancerRecord {
                name: name.clone(),
                cluster: cluster.to_string(),
                service: service_key(service),
                service_uid: service.metadata.uid.clone().unwrap_or_default(),
                ip: ip.clone(),
                ports: Vec::new(),
                nodes: Arc::from([]),
                ensure_count: 0,
                update_count: 0,
                proxy_protocol: None,
            });
        let backends = self.backends(nodes);
        let record = self.lbs.get_mut(&name).expect("inserted above");
        record.ip = ip.clone();
        record.cluster = cluster.to_string();
        record.service = service_key(service);
        record.ports = Self::ports_of(service);
        record.nodes = backends;
        record.proxy_protocol = proxy;
        record.ensure_count += 1;
        Ok(self.status_of(&ip, proxy))
    }

    /// Whether `ensure_lb` (or `update_lb`) with these arguments would leave the load balancer as it is.
    pub(crate) fn lb_is_current(&self, cluster: &str, service: &Service, nodes: &[Node]) -> bool {
        let (Ok(name), Ok(requested), Ok(proxy)) = (
            Self::lb_name(service),
            requested_ip(service),
            proxy_protocol(service),
        ) else {
            return false;
        };
        let Some(lb) = self.lbs.get(&name) else {
            return false;
        };
        let backends = backend_names(nodes);
        requested.is_none_or(|want| lb.ip.parse().ok() == Some(want))
            && lb.cluster == cluster
            && lb.service == service_key(service)
            && lb.ports == Self::ports_of(service)
            && lb.proxy_protocol == proxy
            && backends
                .iter()
                .copied()
                .eq(lb.nodes.iter().map(String::as_str))
    }

    /// The checks of a Service at admission, with the errors `ensure_lb` would return: the PROXY protocol
    /// annotation, the source ranges, and a `loadBalancerIP` that is a free host address of the pool (or already the
    /// Service's own).
    pub(crate) fn check_lb(&self, service: &Service) -> Result<(), CloudError> {
        proxy_protocol(service)?;
        source_ranges(service)?;
        let Some(ip) = requested_ip(service)? else {
            return Ok(());
        };
        let own = Self::lb_name(service)
            .ok()
            .and_then(|name| self.lbs.get(&name))
            .is_some_and(|lb| lb.ip.parse().ok() == Some(ip));
        if own {
            return Ok(());
        }
        self.pool
            .check_specific(ip)
            .map_err(|e| CloudError::provider(e.to_string()))
    }

    /// The ingress address of `service`'s load balancer, if it exists.
    pub(crate) fn lb_address(&self, service: &Service) -> Option<IpAddr> {
        let name = Self::lb_name(service).ok()?;
        self.lbs.get(&name)?.ip.parse().ok()
    }

    /// Whether the load balancer of `service` exists.
    pub(crate) fn has_lb(&self, service: &Service) -> bool {
        Self::lb_name(service).is_ok_and(|name| self.lbs.contains_key(&name))
    }

    pub(crate) fn update_lb(
        &mut self,
        service: &Service,
        nodes: &[Node],
    ) -> Result<(), CloudError> {
        let name = Self::lb_name(service)?;
        if !self.lbs.contains_key(&name) {
            return Err(CloudError::provider(format!(
                "load balancer {name} of service {} does not exist",
                service_key(service)
            )));
        }
        let backends = self.backends(nodes);
        let record = self.lbs.get_mut(&name).expect("checked above");
        record.nodes = backends;
        record.update_count += 1;
        Ok(())
    }

    pub(crate) fn delete_lb(&mut self, service: &Service) -> Result<(), CloudError> {
        let name = Self::lb_name(service)?;
        if let Some(lb) = self.lbs.remove(&name)
            && let Ok(ip) = lb.ip.parse::<IpAddr>()
        {
            self.pool.release(ip);
        }
        Ok(())
    }

    pub(crate) fn load_balancers(&self) -> Vec<LoadBalancerRecord> {
        self.lbs.values().cloned().collect()
    }

    // ---- routes ----

    fn is_blackhole(&self, cfg: &FakeConfig, target: &str) -> bool {
        if self.by_name.contains_key(target) {
            return false;
        }
        self.dead_names.contains_key(target) || !cfg.auto_discover
    }

    fn with_blackhole(&self, cfg: &FakeConfig, r: &RouteRecord) -> RouteRecord {
        let mut r = r.clone();
        r.blackhole = self.is_blackhole(cfg, &r.target_node);
        r
    }

    pub(crate) fn list_routes(
        &self,
        cfg: &FakeConfig,
        cluster: &str,
    ) -> Vec<cloud_provider::Route> {
        self.routes
            .values()
            .filter(|r| r.cluster == cluster)
            .map(|r| cloud_provider::Route {
                name: r.name.clone(),
                target_node: r.target_node.clone(),
                target_node_addresses: r.target_node_addresses.clone(),
                destination_cidr: r.destination_cidr.clone(),
                blackhole: self.is_blackhole(cfg, &r.target_node),
            })
            .collect()
    }

    pub(crate) fn create_route(
        &mut self,
        cluster: &str,
        name_hint: &str,
        route: &cloud_provider::Route,
    ) -> Result<(), CloudError> {
        if name_hint.is_empty() {
            return Err(CloudError::provider("create route: empty name hint"));
        }
        if route.target_node.is_empty() {
            return Err(CloudError::provider("create route: empty target node"));
        }
        Cidr::parse(&route.destination_cidr)
            .map_err(|m| CloudError::provider(format!("create route: {m}")))?;
        // The controllers pass one hint per node (its UID), so the destination makes the name unique for
        // the second pod CIDR of a dual-stack node.
        let name = route_name(cluster, name_hint, &route.destination_cidr);
        if let Some(existing) = self.routes.get(&name) {
            if existing.destination_cidr == route.destination_cidr
                && existing.target_node == route.target_node
            {
                return Ok(());
            }
            return Err(CloudError::provider(format!(
                "route {name} already exists (to {} via {})",
                existing.destination_cidr, existing.target_node
            )));
        }
        if let Some(other) = self
            .routes
            .values()
            .find(|r| r.cluster == cluster && r.destination_cidr == route.destination_cidr)
        {
            return Err(CloudError::provider(format!(
                "destination {} is already routed by route {}",
                route.destination_cidr, other.name
            )));
        }
        self.routes.insert(
            name.clone(),
            RouteRecord {
                name,
                cluster: cluster.to_string(),
                target_node: route.target_node.clone(),
                destination_cidr: route.destination_cidr.clone(),
                target_node_addresses: route.target_node_addresses.clone(),
                blackhole: false,
            },
        );
        Ok(())
    }

    pub(crate) fn delete_route(&mut self, cluster: &str, route: &cloud_provider::Route) {
        let by_name = self
            .routes
            .get(&route.name)
            .is_some_and(|r| r.cluster == cluster);
        let key = if by_name {
            Some(route.name.clone())
        } else {
            self.routes
                .values()
                .find(|r| {
                    r.cluster == cluster
                        && r.destination_cidr == route.destination_cidr
                        && r.target_node == route.target_node
                })
                .map(|r| r.name.clone())
        };
        if let Some(key) = key {
            self.routes.remove(&key);
        }
    }

    pub(crate) fn routes(&self, cfg: &FakeConfig) -> Vec<RouteRecord> {
        self.routes
            .values()
            .map(|r| self.with_blackhole(cfg, r))
            .collect()
    }

    // ---- snapshot ----

    pub(crate) fn snapshot(&self, cfg: &FakeConfig) -> CloudSnapshot {
        CloudSnapshot {
            region: cfg.region.clone(),
            zones: cfg.effective_zones(),
            cluster_name: cfg.cluster_name.clone(),
            cluster_id: cfg.cluster_id.clone(),
            auto_discover: cfg.auto_discover,
            load_balancer_cidr: self.pool.cidr().to_string(),
            instances: self
                .instances
                .values()
                .map(|i| Self::record(cfg, i))
                .collect(),
            terminated: self.dead_names.keys().cloned().collect(),
            load_balancers: self.load_balancers(),
            routes: self.routes(cfg),
            faults: self.faults(),
            calls: self.calls(),
        }
    }

    pub(crate) fn instances(&self, cfg: &FakeConfig) -> Vec<InstanceRecord> {
        self.instances
            .values()
            .map(|i| Self::record(cfg, i))
            .collect()
    }

    // ---- export ----

    /// The cloud as a cloud-config: `cfg` with the current instances, load balancers, routes and faults,
    /// so that a cloud built from it starts in this cloud's state.
    ///
    /// Running auto-discovered instances are left out (the new cloud discovers them again from the same
    /// nodes); stopped ones become explicit instances. Terminated instances become `state: terminated`
    /// entries, one per terminated instance ID; when a later instance took over a terminated instance's
    /// name or ID, the other half of that tombstone is not carried over. Call counters and the position
    /// of the fault streams are not part of a cloud-config.
    pub(crate) fn cloud_config(&self, cfg: &FakeConfig) -> FakeConfig {
        let addresses = |list: &[NodeAddress]| -> Vec<AddressConfig> {
            list.iter()
                .map(|a| AddressConfig {
                    type_: a.type_.clone(),
                    address: a.address.clone(),
                })
                .collect()
        };
        let id_unless_name = |id: &str, name: &str| (id != name).then(|| id.to_string());
        let other_cluster = |c: &str| (c != cfg.cluster_name).then(|| c.to_string());
        let mut instances: Vec<InstanceConfig> = self
            .instances
            .values()
            .filter(|i| !i.auto || !i.running)
            .map(|i| InstanceConfig {
                id: id_unless_name(&i.id, &i.name),
                instance_type: Some(i.instance_type.clone()),
                zone: Some(i.zone.clone()),
                addresses: addresses(&i.addresses),
                state: if i.running {
                    InitialState::Running
                } else {
                    InitialState::Stopped
                },
                labels: i.labels.clone(),
                ..InstanceConfig::named(&i.name)
            })
            .collect();
        let mut tombstone_ids = BTreeSet::new();
        for (name, id) in &self.dead_names {
            if self.dead_ids.contains(id) && tombstone_ids.insert(id) {
                instances.push(InstanceConfig {
                    id: id_unless_name(id, name),
                    state: InitialState::Terminated,
                    ..InstanceConfig::named(name)
                });
            }
        }
        let (load_balancer_node_sets, node_set_of) = shared_node_sets(self.lbs.values());
        let load_balancers = self
            .lbs
            .values()
            .map(|lb| LoadBalancerConfig {
                service_uid: lb.service_uid.clone(),
                service: lb.service.clone(),
                ip: Some(lb.ip.clone()),
                cluster: other_cluster(&lb.cluster),
                ports: lb
                    .ports
                    .iter()
                    .map(|p| LoadBalancerPortConfig {
                        name: p.name.clone(),
                        protocol: p.protocol.clone(),
                        port: p.port,
                        node_port: p.node_port,
                    })
                    .collect(),
                nodes: match node_set_of.get(&list_address(&lb.nodes)) {
                    Some(_) => Vec::new(),
                    None => lb.nodes.to_vec(),
                },
                node_set: node_set_of.get(&list_address(&lb.nodes)).copied(),
                proxy_protocol: lb.proxy_protocol,
            })
            .collect();
        let routes = self
            .routes
            .values()
            .map(|r| RouteConfig {
                name: Some(r.name.clone()),
                cluster: other_cluster(&r.cluster),
                target_node: r.target_node.clone(),
                destination_cidr: r.destination_cidr.clone(),
                target_node_addresses: addresses(&r.target_node_addresses),
            })
            .collect();
        FakeConfig {
            instances,
            load_balancers,
            load_balancer_node_sets,
            routes,
            faults: self.faults.clone(),
            ..cfg.clone()
        }
    }
}

/// The backend lists that two or more load balancers have (non-empty ones), in order of first use, and the
/// index of each, by the address of the list a record holds: a cloud-config names them once in
/// `loadBalancerNodeSets`. Records share lists already; equal lists held apart are merged by content.
fn shared_node_sets<'a>(
    lbs: impl Iterator<Item = &'a LoadBalancerRecord>,
) -> (Vec<Vec<String>>, HashMap<usize, usize>) {
    // Distinct lists (by content) in order of first use, with their use count.
    let mut distinct: Vec<(&'a [String], usize)> = Vec::new();
    let mut group_of: HashMap<usize, usize> = HashMap::new();
    for lb in lbs.filter(|lb| !lb.nodes.is_empty()) {
        let address = list_address(&lb.nodes);
        let group = match group_of.get(&address) {
            Some(&g) => g,
            None => {
                let g = distinct
                    .iter()
                    .position(|(nodes, _)| **nodes == *lb.nodes)
                    .unwrap_or_else(|| {
                        distinct.push((&lb.nodes[..], 0));
                        distinct.len() - 1
                    });
                group_of.insert(address, g);
                g
            }
        };
        distinct[group].1 += 1;
    }
    let mut sets = Vec::new();
    let mut set_of_group = HashMap::new();
    for (g, (nodes, uses)) in distinct.into_iter().enumerate() {
        if uses > 1 {
            set_of_group.insert(g, sets.len());
            sets.push(nodes.to_vec());
        }
    }
    let index = group_of
        .into_iter()
        .filter_map(|(address, g)| set_of_group.get(&g).map(|&set| (address, set)))
        .collect();
    (sets, index)
}

/// The address of a shared backend list, which identifies it while the records are borrowed.
fn list_address(nodes: &Arc<[String]>) -> usize {
    Arc::as_ptr(nodes).cast::<String>().addr()
}

/// The addresses an auto-discovered instance reports: the kubelet's and, with `discoveredExternalIPs`, an
/// `ExternalIP` `198.18.<c>.<d>` for an IPv4 `InternalIP` `a.b.c.d` when the kubelet reports no ExternalIP.
fn discovered_addresses(cfg: &FakeConfig, kubelet: &[NodeAddress]) -> Vec<NodeAddress> {
    let mut addresses = kubelet.to_vec();
    if !cfg.discovered_external_ips || kubelet.iter().any(|a| a.type_ == "ExternalIP") {
        return addresses;
    }
    let internal = kubelet
        .iter()
        .filter(|a| a.type_ == "InternalIP")
        .find_map(|a| a.address.parse::<std::net::Ipv4Addr>().ok());
    if let Some(ip) = internal {
        let [_, _, c, d] = ip.octets();
        addresses.push(node_address("ExternalIP", &format!("198.18.{c}.{d}")));
    }
    addresses
}

/// The names sorted, without duplicates; a list that already is (the controllers pass hosts sorted by name)
/// costs one pass and no tree.
fn sorted_unique<'a>(names: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut names: Vec<&str> = names.collect();
    if !names.windows(2).all(|pair| pair[0] < pair[1]) {
        names.sort_unstable();
        names.dedup();
    }
    names
}

/// The backend names of a load balancer over `nodes`: their names, sorted, without duplicates.
fn backend_names(nodes: &[Node]) -> Vec<&str> {
    sorted_unique(nodes.iter().filter_map(|n| n.metadata.name.as_deref()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_names_are_sorted_and_unique_whatever_the_input_order() {
        assert_eq!(sorted_unique(["a", "b", "c"].into_iter()), ["a", "b", "c"]);
        assert_eq!(
            sorted_unique(["c", "a", "c", "b"].into_iter()),
            ["a", "b", "c"]
        );
        assert_eq!(sorted_unique(["a", "a"].into_iter()), ["a"]);
        assert!(sorted_unique(std::iter::empty()).is_empty());
    }
}
