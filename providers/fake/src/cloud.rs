//! [`FakeCloud`]: the provider itself and its implementation of every capability trait.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use cloud_provider::{
    CloudError, CloudProvider, Clusters, InstanceMetadata, InstanceState, Instances, InstancesV2,
    LoadBalancer, MutationGate, ProviderId, PvLabeler, ResourceTagger, Result, Route, Routes,
    ServiceAdmission, TagOutcome, Verdict, Zone, Zones, well_known,
};
use k8s_openapi::api::core::v1::{
    LoadBalancerStatus, Node, NodeAddress, PersistentVolume, Service,
};
use parking_lot::Mutex;

use crate::admin::{self, AdminError};
use crate::config::{ConfigError, FakeConfig, PROVIDER_NAME};
use crate::control::FakeControl;
use crate::data_path::{Change, DataPath};
use crate::faults::stable_hash;
use crate::shared::Shared;
use crate::state::{Injected, InstanceRecord, PowerState, State};

/// How often a hanging call looks whether the faults changed.
const HANG_POLL: Duration = Duration::from_millis(10);

/// An in-memory cloud implementing every provider capability.
///
/// Cloning is cheap and every clone (and every [`FakeControl`]) sees the same cloud.
///
/// ```
/// use provider_fake::FakeCloud;
/// use cloud_provider::{CloudProvider, InstancesV2};
/// use k8s_openapi::api::core::v1::Node;
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let cloud = FakeCloud::from_yaml(b"zones: [z1, z2]\nclusterID: demo\n").unwrap();
/// let mut node = Node::default();
/// node.metadata.name = Some("worker-1".into());
///
/// let meta = cloud.instances_v2().unwrap().instance_metadata(&node).await.unwrap().unwrap();
/// assert_eq!(meta.provider_id, "fake://worker-1");
///
/// cloud.handle().stop_instance("worker-1").unwrap();
/// assert!(cloud.instance_shutdown(&node).await.unwrap());
/// # });
/// ```
#[derive(Debug, Clone)]
pub struct FakeCloud {
    shared: Arc<Shared>,
}

impl FakeCloud {
    /// Builds a cloud from a configuration (validated here).
    pub fn new(mut config: FakeConfig) -> std::result::Result<Self, ConfigError> {
        config.use_data_path_pool();
        config.validate()?;
        config.zones = Some(config.effective_zones());
        let state = State::new(&config)?;
        let data_path = config
            .data_path
            .enabled
            .then(|| DataPath::new(config.data_path.clone()));
        Ok(FakeCloud {
            shared: Arc::new(Shared {
                config,
                state: Mutex::new(state),
                admin: Mutex::new(None),
                mutations: MutationGate::default(),
                data_path,
            }),
        })
    }

    /// Builds a cloud from YAML cloud-config bytes (empty input gives the defaults).
    pub fn from_yaml(bytes: &[u8]) -> std::result::Result<Self, ConfigError> {
        Self::new(FakeConfig::from_yaml(bytes)?)
    }

    /// The control surface for tests: instance control, faults, state dumps.
    pub fn handle(&self) -> FakeControl {
        FakeControl::new(self.shared.clone())
    }

    /// The configuration in effect.
    pub fn config(&self) -> &FakeConfig {
        &self.shared.config
    }

    /// Starts the admin HTTP API on `addr` (must be loopback; port 0 picks a free port) and returns the
    /// bound address. [`CloudProvider::initialize`] calls this with the configured `adminAddress`; call it
    /// directly to serve the API without initializing. The server runs on the current Tokio runtime
    /// until that runtime shuts down. Only one admin server per cloud: a second call fails.
    pub async fn serve_admin(
        &self,
        addr: SocketAddr,
    ) -> std::result::Result<SocketAddr, AdminError> {
        admin::serve(self.shared.clone(), addr).await
    }

    /// The admin API's address, once started.
    pub fn admin_address(&self) -> Option<SocketAddr> {
        *self.shared.admin.lock()
    }

    fn cfg(&self) -> &FakeConfig {
        &self.shared.config
    }

    /// Counts the call, applies latency (outside the lock) and reports an injected failure; an injected
    /// hang first waits for the faults to change.
    async fn gate(&self, op: &'static str) -> Option<Injected> {
        let (latency, injected, fault_changes) = {
            let mut state = self.shared.state.lock();
            let (latency, injected) = state.gate(op);
            (latency, injected, state.fault_changes())
        };
        if !latency.is_zero() {
            crate::latency::wait(latency, self.cfg().precise_latency).await;
        }
        if injected == Some(Injected::Hang) {
            tracing::debug!(
                operation = op,
                "fake cloud hangs the call until the faults change"
            );
            while self.shared.state.lock().fault_changes() == fault_changes {
                tokio::time::sleep(HANG_POLL).await;
            }
        }
        if let Some(i) = injected {
            tracing::debug!(operation = op, fault = ?i, "fake cloud injected a fault");
        }
        injected
    }

    /// Gate for operations where an injected `notFound` means the instance is missing.
    async fn gate_instance(&self, op: &'static str) -> Result<()> {
        match self.gate(op).await {
            Some(i) => Err(i.error(op, CloudError::InstanceNotFound)),
            None => Ok(()),
        }
    }

    /// Gate of every operation that can change the cloud: when it would (`changes`), a dry run refuses it
    /// before anything else (not counted, no latency), with `details` naming what it would have changed.
    async fn gate_mutation(
        &self,
        op: &'static str,
        changes: bool,
        details: impl FnOnce() -> String,
    ) -> Result<()> {
        if changes {
            self.shared.mutations.check(op, details)?;
        }
        self.gate_plain(op).await
    }

    /// Gate for operations where `notFound` has no meaning (it becomes a provider error).
    async fn gate_plain(&self, op: &'static str) -> Result<()> {
        match self.gate(op).await {
            Some(Injected::NotFound) => {
                Err(Injected::Provider.error(op, CloudError::InstanceNotFound))
            }
            Some(i) => Err(i.error(op, CloudError::InstanceNotFound)),
            None => Ok(()),
        }
    }

    fn metadata_of(&self, id: &str) -> Result<InstanceMetadata> {
        let rec = self
            .shared
            .state
            .lock()
            .instance(self.cfg(), id)
            .ok_or(CloudError::InstanceNotFound)?;
        Ok(InstanceMetadata {
            provider_id: rec.provider_id,
            instance_type: rec.instance_type,
            node_addresses: rec.addresses,
            zone: rec.zone,
            region: rec.region,
            additional_labels: rec.labels,
        })
    }

    fn node_metadata(&self, node: &Node) -> Result<Option<InstanceMetadata>> {
        let id = self.shared.state.lock().resolve_node(self.cfg(), node)?;
        match id {
            Some(id) => self.metadata_of(&id).map(Some),
            None => Err(CloudError::InstanceNotFound),
        }
    }

    fn node_state(&self, node: &Node) -> Result<InstanceState> {
        let mut st = self.shared.state.lock();
        let id = st.resolve_node(self.cfg(), node)?;
        Ok(match id.and_then(|id| st.is_running(&id)) {
            None => InstanceState::NotFound,
            Some(true) => InstanceState::Running,
            Some(false) => InstanceState::Shutdown,
        })
    }

    fn by_name(&self, node_name: &str) -> Result<InstanceRecord> {
        let mut st = self.shared.state.lock();
        let id = st
            .resolve_name(self.cfg(), node_name)
            .ok_or(CloudError::InstanceNotFound)?;
        st.instance(self.cfg(), &id)
            .ok_or(CloudError::InstanceNotFound)
    }

    fn by_provider_id(&self, provider_id: &str) -> Result<Option<InstanceRecord>> {
        let mut st = self.shared.state.lock();
        Ok(st
            .resolve_provider_id(self.cfg(), provider_id)?
            .and_then(|id| st.instance(self.cfg(), &id)))
    }

    fn zone_of(&self, rec: &InstanceRecord) -> Zone {
        Zone {
            failure_domain: rec.zone.clone(),
            region: rec.region.clone(),
        }
    }

    fn volume_zone(&self, pv: &PersistentVolume) -> Option<String> {
        let cfg = self.cfg();
        if let Some(name) = pv.metadata.name.as_deref()
            && let Some(v) = cfg.volumes.iter().find(|v| v.name == name)
        {
            return Some(v.zone.clone());
        }
        let csi = pv.spec.as_ref()?.csi.as_ref()?;
        if csi.driver != cfg.csi_driver {
            return None;
        }
        let zones = cfg.effective_zones();
        if let Some(z) = csi.volume_attributes.as_ref().and_then(|a| a.get("zone"))
            && zones.contains(z)
        {
            return Some(z.clone());
        }
        let idx = usize::try_from(stable_hash(&csi.volume_handle) % zones.len().max(1) as u64)
            .unwrap_or(0);
        zones.get(idx).cloned()
    }
}

#[async_trait::async_trait]
impl CloudProvider for FakeCloud {
    fn provider_name(&self) -> &str {
        PROVIDER_NAME
    }

    fn mutation_gate(&self) -> Option<&MutationGate> {
        Some(&self.shared.mutations)
    }

    /// Starts the admin HTTP API when `adminAddress` is configured (and not already serving).
    async fn initialize(&self, client: cloud_provider::kube::Client) -> Result<()> {
        drop(client);
        if let Some(addr) = self.cfg().admin_address
            && self.admin_address().is_none()
        {
            let bound = self
                .serve_admin(addr)
                .await
                .map_err(|e| CloudError::provider_with("start the fake cloud admin API", e))?;
            tracing::info!(address = %bound, "fake cloud admin API listening");
        }
        Ok(())
    }

    fn load_balancer(&self) -> Option<&dyn LoadBalancer> {
        Some(self)
    }
    fn service_admission(&self) -> Option<&dyn ServiceAdmission> {
        Some(self)
    }
    fn instances(&self) -> Option<&dyn Instances> {
        Some(self)
    }
    fn instances_v2(&self) -> Option<&dyn InstancesV2> {
        Some(self)
    }
    fn zones(&self) -> Option<&dyn Zones> {
        Some(self)
    }
    fn clusters(&self) -> Option<&dyn Clusters> {
        Some(self)
    }
    fn routes(&self) -> Option<&dyn Routes> {
        Some(self)
    }
    fn pv_labeler(&self) -> Option<&dyn PvLabeler> {
        Some(self)
    }
    fn resource_tagger(&self) -> Option<&dyn ResourceTagger> {
        Some(self)
    }
    fn has_cluster_id(&self) -> bool {
        self.cfg().cluster_id.is_some()
    }
}

#[async_trait::async_trait]
impl InstancesV2 for FakeCloud {
    async fn instance_exists(&self, node: &Node) -> Result<bool> {
        match self.gate("instance_exists").await {
            Some(Injected::NotFound) => return Ok(false),
            Some(i) => return Err(i.error("instance_exists", CloudError::InstanceNotFound)),
            None => {}
        }
        Ok(self.node_state(node)? != InstanceState::NotFound)
    }

    async fn instance_shutdown(&self, node: &Node) -> Result<bool> {
        self.gate_instance("instance_shutdown").await?;
        match self.node_state(node)? {
            InstanceState::NotFound => Err(CloudError::InstanceNotFound),
            state => Ok(state == InstanceState::Shutdown),
        }
    }

    async fn instance_metadata(&self, node: &Node) -> Result<Option<InstanceMetadata>> {
        self.gate_instance("instance_metadata").await?;
        self.node_metadata(node)
    }

    /// One cloud call for the whole batch: one counter increment, one latency, one fault decision.
    async fn instance_metadata_bulk(
        &self,
        nodes: &[Node],
    ) -> Vec<Result<Option<InstanceMetadata>>> {
        const OP: &str = "instance_metadata_bulk";
        if let Some(i) = self.gate(OP).await {
            return nodes
                .iter()
                .map(|_| Err(i.error(OP, CloudError::InstanceNotFound)))
                .collect();
        }
        nodes.iter().map(|n| self.node_metadata(n)).collect()
    }

    /// One cloud call for the whole batch; an injected `notFound` reports every instance gone.
    async fn instance_states(&self, nodes: &[Node]) -> Vec<Result<InstanceState>> {
        const OP: &str = "instance_states";
        match self.gate(OP).await {
            Some(Injected::NotFound) => {
                return nodes.iter().map(|_| Ok(InstanceState::NotFound)).collect();
            }
            Some(i) => {
                return nodes
                    .iter()
                    .map(|_| Err(i.error(OP, CloudError::InstanceNotFound)))
                    .collect();
            }
            None => {}
        }
        nodes.iter().map(|n| self.node_state(n)).collect()
    }
}

#[async_trait::async_trait]
impl Instances for FakeCloud {
    async fn node_addresses(&self, node_name: &str) -> Result<Vec<NodeAddress>> {
        self.gate_instance("node_addresses").await?;
        Ok(self.by_name(node_name)?.addresses)
    }

    async fn node_addresses_by_provider_id(&self, provider_id: &str) -> Result<Vec<NodeAddress>> {
        self.gate_instance("node_addresses_by_provider_id").await?;
        Ok(self
            .by_provider_id(provider_id)?
            .ok_or(CloudError::InstanceNotFound)?
            .addresses)
    }

    async fn instance_id(&self, node_name: &str) -> Result<String> {
        self.gate_instance("instance_id").await?;
        Ok(self.by_name(node_name)?.id)
    }

    async fn instance_type(&self, node_name: &str) -> Result<String> {
        self.gate_instance("instance_type").await?;
        Ok(self.by_name(node_name)?.instance_type)
    }

    async fn instance_type_by_provider_id(&self, provider_id: &str) -> Result<String> {
        self.gate_instance("instance_type_by_provider_id").await?;
        Ok(self
            .by_provider_id(provider_id)?
            .ok_or(CloudError::InstanceNotFound)?
            .instance_type)
    }

    async fn current_node_name(&self, hostname: &str) -> Result<String> {
        self.gate_plain("current_node_name").await?;
        Ok(self.shared.state.lock().node_name_for_hostname(hostname))
    }

    async fn instance_exists_by_provider_id(&self, provider_id: &str) -> Result<bool> {
        match self.gate("instance_exists_by_provider_id").await {
            Some(Injected::NotFound) => return Ok(false),
            Some(i) => {
                return Err(i.error(
                    "instance_exists_by_provider_id",
                    CloudError::InstanceNotFound,
                ));
            }
            None => {}
        }
        Ok(self.by_provider_id(provider_id)?.is_some())
    }

    async fn instance_shutdown_by_provider_id(&self, provider_id: &str) -> Result<bool> {
        self.gate_instance("instance_shutdown_by_provider_id")
            .await?;
        let rec = self
            .by_provider_id(provider_id)?
            .ok_or(CloudError::InstanceNotFound)?;
        Ok(rec.state == PowerState::Stopped)
    }
}

#[async_trait::async_trait]
impl Zones for FakeCloud {
    /// The fake cloud does not run the controller manager on an instance: this is the first zone.
    async fn get_zone(&self) -> Result<Zone> {
        self.gate_plain("get_zone").await?;
        let zones = self.cfg().effective_zones();
        Ok(Zone {
            failure_domain: zones.first().cloned().unwrap_or_default(),
            region: self.cfg().region.clone(),
        })
    }

    async fn get_zone_by_provider_id(&self, provider_id: &str) -> Result<Zone> {
        self.gate_instance("get_zone_by_provider_id").await?;
        let rec = self
            .by_provider_id(provider_id)?
            .ok_or(CloudError::InstanceNotFound)?;
        Ok(self.zone_of(&rec))
    }

    async fn get_zone_by_node_name(&self, node_name: &str) -> Result<Zone> {
        self.gate_instance("get_zone_by_node_name").await?;
        let rec = self.by_name(node_name)?;
        Ok(self.zone_of(&rec))
    }
}

#[async_trait::async_trait]
impl LoadBalancer for FakeCloud {
    async fn get_load_balancer(
        &self,
        _cluster_name: &str,
        service: &Service,
    ) -> Result<Option<LoadBalancerStatus>> {
        match self.gate("get_load_balancer").await {
            Some(Injected::NotFound) => return Ok(None),
            Some(i) => return Err(i.error("get_load_balancer", CloudError::InstanceNotFound)),
            None => {}
        }
        self.shared.state.lock().get_lb(service)
    }

    async fn ensure_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Node],
    ) -> Result<LoadBalancerStatus> {
        let (current, address) = {
            let state = self.shared.state.lock();
            (
                state.lb_is_current(cluster_name, service, nodes),
                state.lb_address(service),
            )
        };
        // What the data path would run on the current address: computed once, used again below when
        // the address stays.
        let planned = match (&self.shared.data_path, address) {
            (Some(data_path), Some(address)) => Some(data_path.spec(address, service, nodes)?),
            _ => None,
        };
        let data_path_current = match (&self.shared.data_path, &planned) {
            (None, _) => true,
            (Some(data_path), Some(spec)) => data_path.is_current(spec),
            (Some(_), None) => false,
        };
        let changes = !current || !data_path_current;
        self.gate_mutation("ensure_load_balancer", changes, || {
            service_and_nodes(service, nodes)
        })
        .await?;
        let status = self
            .shared
            .state
            .lock()
            .ensure_lb(cluster_name, service, nodes)?;
        if let Some(data_path) = &self.shared.data_path {
            let address = self
                .shared
                .state
                .lock()
                .lb_address(service)
                .ok_or_else(|| CloudError::provider("the load balancer has no address"))?;
            let spec = match planned {
                Some(spec) if spec.address == address => spec,
                _ => data_path.spec(address, service, nodes)?,
            };
            self.on_data_path(Change::Apply(spec)).await?;
        }
        Ok(status)
    }

    async fn update_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Node],
    ) -> Result<()> {
        let changes = !self
            .shared
            .state
            .lock()
            .lb_is_current(cluster_name, service, nodes)
            || self
                .shared
                .data_path
                .as_ref()
                .is_some_and(|d| !d.has_backends(service, nodes));
        self.gate_mutation("update_load_balancer", changes, || {
            service_and_nodes(service, nodes)
        })
        .await?;
        self.shared.state.lock().update_lb(service, nodes)?;
        if self.shared.data_path.is_some() {
            self.on_data_path(Change::Backends(service.clone(), nodes.to_vec()))
                .await?;
        }
        Ok(())
    }

    async fn ensure_load_balancer_deleted(
        &self,
        _cluster_name: &str,
        service: &Service,
    ) -> Result<()> {
        let changes = self.shared.state.lock().has_lb(service);
        self.gate_mutation("ensure_load_balancer_deleted", changes, || {
            service_name(service)
        })
        .await?;
        // Listeners first: the address goes back to the pool only once nothing listens on it.
        if self.shared.data_path.is_some() {
            self.on_data_path(Change::Remove(service.clone())).await?;
        }
        self.shared.state.lock().delete_lb(service)
    }
}

impl FakeCloud {
    /// Runs `change` on the data path in a task of its own and waits for it: a caller that gives up (a
    /// cloud-call timeout drops its future) does not leave a load balancer half changed.
    async fn on_data_path(&self, change: Change) -> Result<()> {
        let shared = self.shared.clone();
        tokio::spawn(async move {
            match &shared.data_path {
                Some(data_path) => data_path.change(change).await,
                None => Ok(()),
            }
        })
        .await
        .map_err(|e| CloudError::provider(format!("the data path's task failed: {e}")))?
    }
}

#[async_trait::async_trait]
impl ServiceAdmission for FakeCloud {
    /// The checks `ensure_load_balancer` makes before it changes anything; no fault or latency applies
    /// (the webhook is not a cloud call).
    async fn admit_service(
        &self,
        _cluster_name: &str,
        service: &Service,
        _old: Option<&Service>,
    ) -> Verdict {
        Verdict::from_check(self.shared.state.lock().check_lb(service))
    }
}

/// What a dry run reports of a load-balancer call: the Service and the nodes.
fn service_and_nodes(service: &Service, nodes: &[Node]) -> String {
    let names: Vec<&str> = nodes
        .iter()
        .filter_map(|n| n.metadata.name.as_deref())
        .collect();
    format!(
        "service {}, nodes [{}]",
        service_name(service),
        names.join(", ")
    )
}

/// `namespace/name` of a Service.
fn service_name(service: &Service) -> String {
    format!(
        "{}/{}",
        service.metadata.namespace.as_deref().unwrap_or_default(),
        service.metadata.name.as_deref().unwrap_or_default()
    )
}

/// What a dry run reports of a route call.
fn route_text(route: &Route) -> String {
    format!("{} via {}", route.destination_cidr, route.target_node)
}

#[async_trait::async_trait]
impl Routes for FakeCloud {
    async fn list_routes(&self, cluster_name: &str) -> Result<Vec<Route>> {
        self.gate_plain("list_routes").await?;
        Ok(self
            .shared
            .state
            .lock()
            .list_routes(self.cfg(), cluster_name))
    }

    async fn create_route(&self, cluster_name: &str, name_hint: &str, route: &Route) -> Result<()> {
        self.gate_mutation("create_route", true, || route_text(route))
            .await?;
        self.shared
            .state
            .lock()
            .create_route(cluster_name, name_hint, route)
    }

    async fn delete_route(&self, cluster_name: &str, route: &Route) -> Result<()> {
        self.gate_mutation("delete_route", true, || route_text(route))
            .await?;
        self.shared.state.lock().delete_route(cluster_name, route);
        Ok(())
    }
}

#[async_trait::async_trait]
impl Clusters for FakeCloud {
    async fn list_clusters(&self) -> Result<Vec<String>> {
        self.gate_plain("list_clusters").await?;
        Ok(vec![self.cfg().cluster_name.clone()])
    }

    async fn master(&self, cluster_name: &str) -> Result<String> {
        self.gate_plain("master").await?;
        if cluster_name == self.cfg().cluster_name {
            Ok(self.cfg().master_address.clone())
        } else {
            Err(CloudError::provider(format!(
                "unknown cluster {cluster_name:?}"
            )))
        }
    }
}

#[async_trait::async_trait]
impl PvLabeler for FakeCloud {
    async fn get_labels_for_volume(
        &self,
        pv: &PersistentVolume,
    ) -> Result<Option<BTreeMap<String, String>>> {
        self.gate("get_labels_for_volume")
            .await
            .map_or(Ok(()), |i| {
                Err(i.error("get_labels_for_volume", CloudError::DiskNotFound))
            })?;
        let Some(zone) = self.volume_zone(pv) else {
            return Ok(None);
        };
        let region = self.cfg().region.clone();
        Ok(Some(BTreeMap::from([
            (well_known::LABEL_ZONE.to_string(), zone.clone()),
            (well_known::LABEL_ZONE_BETA.to_string(), zone),
            (well_known::LABEL_REGION.to_string(), region.clone()),
            (well_known::LABEL_REGION_BETA.to_string(), region),
        ])))
    }
}

/// The node label recording the checksum of the tags on a node's fake instance.
pub const TAGGED_LABEL: &str = "k8s.io/cloud-provider-fake";

impl FakeCloud {
    /// Adds or removes `tags` on the instances of `nodes` (one gated call for the batch): an unknown
    /// instance is `InstanceNotFound` when adding and done when removing; a node without a provider ID
    /// cannot be tagged.
    async fn change_tags(
        &self,
        op: &'static str,
        nodes: &[Node],
        tags: &BTreeMap<String, String>,
        add: bool,
    ) -> Vec<Result<TagOutcome>> {
        if !nodes.is_empty()
            && let Err(CloudError::WouldChange { operation }) = self
                .shared
                .mutations
                .check(op, || format!("{} nodes: {tags:?}", nodes.len()))
        {
            return nodes
                .iter()
                .map(|_| {
                    Err(CloudError::WouldChange {
                        operation: operation.clone(),
                    })
                })
                .collect();
        }
        if let Some(injected) = self.gate(op).await {
            return nodes
                .iter()
                .map(|_| Err(injected.error(op, CloudError::InstanceNotFound)))
                .collect();
        }
        nodes
            .iter()
            .map(|node| {
                let Some(provider_id) = node.spec.as_ref().and_then(|s| s.provider_id.as_deref())
                else {
                    return Ok(TagOutcome::NotTaggable);
                };
                match self
                    .shared
                    .state
                    .lock()
                    .change_tags(self.cfg(), provider_id, tags, add)?
                {
                    true => Ok(TagOutcome::Done),
                    false if add => Err(CloudError::InstanceNotFound),
                    false => Ok(TagOutcome::Done),
                }
            })
            .collect()
    }
}

#[async_trait::async_trait]
impl ResourceTagger for FakeCloud {
    fn resource_kinds(&self) -> &'static [&'static str] {
        &["instance"]
    }

    fn tagged_label(&self) -> &'static str {
        TAGGED_LABEL
    }

    async fn tag_nodes(
        &self,
        nodes: &[Node],
        _resources: &[String],
        tags: &BTreeMap<String, String>,
    ) -> Vec<Result<TagOutcome>> {
        self.change_tags("tag_nodes", nodes, tags, true).await
    }

    async fn untag_nodes(
        &self,
        nodes: &[Node],
        _resources: &[String],
        tags: &BTreeMap<String, String>,
    ) -> Vec<Result<TagOutcome>> {
        self.change_tags("untag_nodes", nodes, tags, false).await
    }
}

/// The provider ID of an instance ID: `fake://<id>`.
pub fn provider_id_of(instance_id: &str) -> String {
    ProviderId::new(PROVIDER_NAME, instance_id).to_string()
}
