//! EC2 instances: provider IDs, node-to-instance resolution, node addresses, bulk lookups with a bounded-
//! staleness cache, and the [`Instances`], [`InstancesV2`] and [`Zones`] capabilities.
//!
//! Every lookup by instance ID uses the `instance-id` filter of DescribeInstances (so missing instances are
//! simply absent instead of failing the whole call) with at most [`FILTER_CHUNK`] values per call; lookups
//! by private DNS name add an instance-state filter and keep only instances tagged for the cluster.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_ec2::types::Instance;
use cloud_provider::{
    ADDRESS_EXTERNAL_DNS, ADDRESS_EXTERNAL_IP, ADDRESS_HOSTNAME, ADDRESS_INTERNAL_DNS,
    ADDRESS_INTERNAL_IP, CloudError, InstanceMetadata, InstanceState, Instances, InstancesV2,
    Result, Zone, Zones, node_address,
};
use k8s_openapi::api::core::v1::{Node, NodeAddress};
use parking_lot::Mutex;

use crate::cloud::{AwsCloud, PROVIDER_NAME, filter};
use crate::config::IpFamily;
use crate::error::{ApiError, SdkResultExt};

/// Most values per DescribeInstances filter (AWS allows 200).
pub const FILTER_CHUNK: usize = 150;
/// The additional node label carrying the availability-zone ID (`use1-az1`).
pub const LABEL_ZONE_ID: &str = "topology.k8s.aws/zone-id";
/// Instance states in which a private-DNS-name lookup still finds an instance.
const LIVE_STATES: &[&str] = &["pending", "running", "shutting-down", "stopping", "stopped"];

/// An EC2 network interface as the provider uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Interface {
    pub(crate) device_index: i32,
    pub(crate) in_use: bool,
    pub(crate) private_ips: Vec<String>,
    pub(crate) ipv6_addresses: Vec<String>,
}

/// An EC2 instance as the provider uses it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Ec2Instance {
    pub(crate) id: String,
    pub(crate) state: String,
    pub(crate) instance_type: String,
    pub(crate) zone: String,
    pub(crate) private_dns_name: String,
    pub(crate) public_dns_name: String,
    pub(crate) private_ip: String,
    pub(crate) public_ip: String,
    pub(crate) vpc_id: String,
    pub(crate) subnet_id: String,
    pub(crate) interfaces: Vec<Interface>,
    pub(crate) security_groups: Vec<String>,
    pub(crate) tags: Vec<(String, String)>,
    pub(crate) source_dest_check: Option<bool>,
}

fn s(v: Option<&str>) -> String {
    v.unwrap_or_default().to_string()
}

impl From<&Instance> for Ec2Instance {
    fn from(i: &Instance) -> Self {
        Ec2Instance {
            id: s(i.instance_id()),
            state: s(i.state().and_then(|st| st.name()).map(|n| n.as_str())),
            instance_type: s(i.instance_type().map(|t| t.as_str())),
            zone: s(i.placement().and_then(|p| p.availability_zone())),
            private_dns_name: s(i.private_dns_name()),
            public_dns_name: s(i.public_dns_name()),
            private_ip: s(i.private_ip_address()),
            public_ip: s(i.public_ip_address()),
            vpc_id: s(i.vpc_id()),
            subnet_id: s(i.subnet_id()),
            interfaces: i
                .network_interfaces()
                .iter()
                .map(|ni| Interface {
                    device_index: ni
                        .attachment()
                        .and_then(|a| a.device_index())
                        .unwrap_or(i32::MAX),
                    in_use: ni.status().map(|st| st.as_str()) == Some("in-use"),
                    private_ips: ni
                        .private_ip_addresses()
                        .iter()
                        .filter_map(|p| p.private_ip_address())
                        .map(str::to_string)
                        .collect(),
                    ipv6_addresses: ni
                        .ipv6_addresses()
                        .iter()
                        .filter_map(|a| a.ipv6_address())
                        .map(str::to_string)
                        .collect(),
                })
                .collect(),
            security_groups: i
                .security_groups()
                .iter()
                .filter_map(|g| g.group_id())
                .map(str::to_string)
                .collect(),
            tags: i
                .tags()
                .iter()
                .map(|t| (s(t.key()), s(t.value())))
                .collect(),
            source_dest_check: i.source_dest_check(),
        }
    }
}

impl Ec2Instance {
    /// The instance's provider ID, `aws:///<zone>/<id>`.
    pub(crate) fn provider_id(&self) -> String {
        format!("{PROVIDER_NAME}:///{}/{}", self.zone, self.id)
    }

    /// The tags as string pairs.
    pub(crate) fn tag_pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.tags.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The coarse state: terminated instances are gone, stopped ones shut down.
    pub(crate) fn coarse_state(&self) -> InstanceState {
        match self.state.as_str() {
            "terminated" => InstanceState::NotFound,
            "stopped" => InstanceState::Shutdown,
            _ => InstanceState::Running,
        }
    }

    /// The node addresses in the upstream order for each family in `families`.
    ///
    /// IPv4: every private IP of each in-use interface (by device index) as InternalIP, the public IP as
    /// ExternalIP, the private DNS name as InternalDNS and Hostname, the public DNS name as ExternalDNS.
    /// IPv6: the first IPv6 address of each in-use interface as InternalIP.
    pub(crate) fn node_addresses(&self, families: &[IpFamily]) -> Vec<NodeAddress> {
        let mut interfaces: Vec<&Interface> = self.interfaces.iter().filter(|i| i.in_use).collect();
        interfaces.sort_by_key(|i| i.device_index);
        let mut out = Vec::new();
        for family in families {
            match family {
                IpFamily::Ipv4 => {
                    if self.interfaces.is_empty() {
                        if !self.private_ip.is_empty() {
                            out.push(node_address(ADDRESS_INTERNAL_IP, &self.private_ip));
                        }
                    } else {
                        for ip in interfaces.iter().flat_map(|i| &i.private_ips) {
                            out.push(node_address(ADDRESS_INTERNAL_IP, ip));
                        }
                    }
                    if !self.public_ip.is_empty() {
                        out.push(node_address(ADDRESS_EXTERNAL_IP, &self.public_ip));
                    }
                    if !self.private_dns_name.is_empty() {
                        out.push(node_address(ADDRESS_INTERNAL_DNS, &self.private_dns_name));
                        out.push(node_address(ADDRESS_HOSTNAME, &self.private_dns_name));
                    }
                    if !self.public_dns_name.is_empty() {
                        out.push(node_address(ADDRESS_EXTERNAL_DNS, &self.public_dns_name));
                    }
                }
                IpFamily::Ipv6 => {
                    for ip in interfaces.iter().filter_map(|i| i.ipv6_addresses.first()) {
                        out.push(node_address(ADDRESS_INTERNAL_IP, ip));
                    }
                }
            }
        }
        out
    }
}

/// Extracts the instance ID from the accepted provider-ID forms: `aws:///<zone>/<id>`, `aws:////<id>`,
/// `aws:///<id>` and a bare `i-...`.
pub fn instance_id_from_provider_id(provider_id: &str) -> Result<String> {
    let invalid = || {
        CloudError::provider(format!(
            "invalid AWS provider ID {provider_id:?}: expected aws:///<zone>/<instance-id> or i-<id>"
        ))
    };
    let path = match provider_id.strip_prefix("aws://") {
        Some(rest) => rest,
        None if provider_id.contains("://") => return Err(invalid()),
        None => provider_id,
    };
    let tokens: Vec<&str> = path.trim_matches('/').split('/').collect();
    let id = match tokens.as_slice() {
        [id] => *id,
        [_zone, id] => *id,
        _ => return Err(invalid()),
    };
    let valid = id
        .strip_prefix("i-")
        .is_some_and(|rest| !rest.is_empty() && rest.chars().all(|c| c.is_ascii_alphanumeric()));
    if valid {
        Ok(id.to_string())
    } else {
        Err(invalid())
    }
}

/// How a node maps to its instance.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum InstanceRef {
    /// By instance ID.
    Id(String),
    /// By private DNS name (the node name).
    PrivateDns(String),
}

/// How a node name maps to its instance: a name starting `i-` is the instance ID (up to the first `.`),
/// any other name is the instance's private DNS name.
pub(crate) fn instance_ref_for_name(node_name: &str) -> InstanceRef {
    if node_name.starts_with("i-") {
        let id = node_name.split('.').next().unwrap_or(node_name);
        InstanceRef::Id(id.to_string())
    } else {
        InstanceRef::PrivateDns(node_name.to_string())
    }
}

/// How a node maps to its instance: its provider ID when set, else its name.
pub(crate) fn instance_ref_for_node(node: &Node) -> Result<InstanceRef> {
    if let Some(provider_id) = node
        .spec
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .filter(|p| !p.is_empty())
    {
        return instance_id_from_provider_id(provider_id).map(InstanceRef::Id);
    }
    let name = node
        .metadata
        .name
        .as_deref()
        .ok_or_else(|| CloudError::provider("node without a name"))?;
    Ok(instance_ref_for_name(name))
}

type CacheEntry = (Instant, Option<Arc<Ec2Instance>>);

/// Instances by ID, with the time they were read; entries older than the TTL are not served.
#[derive(Debug)]
pub(crate) struct InstanceCache {
    ttl: Duration,
    entries: Mutex<HashMap<String, CacheEntry>>,
}

impl InstanceCache {
    pub(crate) fn new(ttl: Duration) -> Self {
        InstanceCache {
            ttl,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The fresh entry for `id`: `Some(None)` caches "no such instance".
    fn get(&self, id: &str) -> Option<Option<Arc<Ec2Instance>>> {
        if self.ttl.is_zero() {
            return None;
        }
        let entries = self.entries.lock();
        entries
            .get(id)
            .filter(|(at, _)| at.elapsed() < self.ttl)
            .map(|(_, inst)| inst.clone())
    }

    fn put(&self, id: String, instance: Option<Arc<Ec2Instance>>) {
        if self.ttl.is_zero() {
            return;
        }
        let mut entries = self.entries.lock();
        if entries.len() >= 4096 {
            let ttl = self.ttl;
            entries.retain(|_, (at, _)| at.elapsed() < ttl);
        }
        entries.insert(id, (Instant::now(), instance));
    }

    /// Forgets `id`, so the next lookup reads it from EC2.
    pub(crate) fn invalidate(&self, id: &str) {
        self.entries.lock().remove(id);
    }
}

impl AwsCloud {
    /// Runs DescribeInstances with `filters`, following pagination.
    pub(crate) async fn describe_instances(
        &self,
        filters: Vec<aws_sdk_ec2::types::Filter>,
    ) -> std::result::Result<Vec<Ec2Instance>, ApiError> {
        let mut out = Vec::new();
        let mut token = None;
        loop {
            let page = self
                .clients
                .ec2
                .describe_instances()
                .set_filters(Some(filters.clone()))
                .set_next_token(token)
                .max_results(1000)
                .send()
                .await
                .api("DescribeInstances")?;
            out.extend(
                page.reservations()
                    .iter()
                    .flat_map(|r| r.instances())
                    .map(Ec2Instance::from),
            );
            token = page
                .next_token()
                .filter(|t| !t.is_empty())
                .map(str::to_string);
            if token.is_none() {
                return Ok(out);
            }
        }
    }

    /// Reads the instances with these IDs from EC2 (terminated ones included), [`FILTER_CHUNK`] IDs per call,
    /// and refreshes the cache. Missing IDs map to `None`.
    pub(crate) async fn fetch_instances(
        &self,
        ids: &[String],
    ) -> std::result::Result<HashMap<String, Option<Arc<Ec2Instance>>>, ApiError> {
        let mut found: HashMap<String, Option<Arc<Ec2Instance>>> =
            ids.iter().map(|id| (id.clone(), None)).collect();
        for chunk in ids.chunks(FILTER_CHUNK) {
            for inst in self
                .describe_instances(vec![filter("instance-id", chunk.iter().cloned())])
                .await?
            {
                found.insert(inst.id.clone(), Some(Arc::new(inst)));
            }
        }
        for (id, inst) in &found {
            self.instances.put(id.clone(), inst.clone());
        }
        Ok(found)
    }

    /// The instances with these IDs, from the cache when fresh enough, else from EC2.
    pub(crate) async fn instances_by_id(
        &self,
        ids: &[String],
    ) -> std::result::Result<HashMap<String, Option<Arc<Ec2Instance>>>, ApiError> {
        let mut out = HashMap::with_capacity(ids.len());
        let mut missing = Vec::new();
        for id in ids {
            if out.contains_key(id) || missing.contains(id) {
                continue;
            }
            match self.instances.get(id) {
                Some(inst) => {
                    out.insert(id.clone(), inst);
                }
                None => missing.push(id.clone()),
            }
        }
        if !missing.is_empty() {
            out.extend(self.fetch_instances(&missing).await?);
        }
        Ok(out)
    }

    /// Live instances (not terminated) of the cluster by private DNS name, [`FILTER_CHUNK`] names per call.
    async fn instances_by_private_dns(
        &self,
        names: &[String],
    ) -> std::result::Result<HashMap<String, Vec<Arc<Ec2Instance>>>, ApiError> {
        let mut out: HashMap<String, Vec<Arc<Ec2Instance>>> = HashMap::new();
        for chunk in names.chunks(FILTER_CHUNK) {
            let filters = vec![
                filter("private-dns-name", chunk.iter().cloned()),
                filter("instance-state-name", LIVE_STATES.iter().copied()),
            ];
            for inst in self.describe_instances(filters).await? {
                if !self.tagging.is_ours(inst.tag_pairs()) {
                    continue;
                }
                let inst = Arc::new(inst);
                self.instances.put(inst.id.clone(), Some(inst.clone()));
                out.entry(inst.private_dns_name.clone())
                    .or_default()
                    .push(inst);
            }
        }
        Ok(out)
    }

    /// Resolves many instance references at once; results in input order. `Ok(None)` = no such instance.
    pub(crate) async fn resolve(
        &self,
        refs: &[Result<InstanceRef>],
    ) -> Vec<Result<Option<Arc<Ec2Instance>>>> {
        let ids: Vec<String> = refs
            .iter()
            .filter_map(|r| match r {
                Ok(InstanceRef::Id(id)) => Some(id.clone()),
                _ => None,
            })
            .collect();
        let names: Vec<String> = refs
            .iter()
            .filter_map(|r| match r {
                Ok(InstanceRef::PrivateDns(name)) => Some(name.clone()),
                _ => None,
            })
            .collect();
        let by_id = if ids.is_empty() {
            Ok(HashMap::new())
        } else {
            self.instances_by_id(&ids).await
        };
        let mut unique_names = names.clone();
        unique_names.sort();
        unique_names.dedup();
        let by_name = if unique_names.is_empty() {
            Ok(HashMap::new())
        } else {
            self.instances_by_private_dns(&unique_names).await
        };
        refs.iter()
            .map(|r| match r {
                Err(e) => Err(CloudError::provider(e.to_string())),
                Ok(InstanceRef::Id(id)) => match &by_id {
                    Ok(map) => Ok(map.get(id).cloned().flatten()),
                    Err(e) => Err(e.clone().into()),
                },
                Ok(InstanceRef::PrivateDns(name)) => match &by_name {
                    Ok(map) => match map.get(name).map(Vec::as_slice) {
                        None | Some([]) => Ok(None),
                        Some([one]) => Ok(Some(one.clone())),
                        Some(many) => Err(CloudError::provider(format!(
                            "found {} instances of this cluster with private DNS name {name:?}: {}",
                            many.len(),
                            many.iter()
                                .map(|i| i.id.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ))),
                    },
                    Err(e) => Err(e.clone().into()),
                },
            })
            .collect()
    }

    /// Resolves one reference.
    pub(crate) async fn resolve_one(&self, r: InstanceRef) -> Result<Option<Arc<Ec2Instance>>> {
        self.resolve(&[Ok(r)]).await.pop().unwrap_or(Ok(None))
    }

    /// The instance behind a reference that must exist (terminated counts as gone).
    async fn existing(&self, r: InstanceRef) -> Result<Arc<Ec2Instance>> {
        match self.resolve_one(r).await? {
            Some(inst) if inst.coarse_state() != InstanceState::NotFound => Ok(inst),
            _ => Err(CloudError::InstanceNotFound),
        }
    }

    /// The availability-zone ID of `zone`, read once per zone with DescribeAvailabilityZones.
    pub(crate) async fn zone_id(&self, zone: &str) -> Result<Option<String>> {
        if let Some(id) = self.zone_ids.read().get(zone) {
            return Ok(Some(id.clone()));
        }
        let out = self
            .clients
            .ec2
            .describe_availability_zones()
            .zone_names(zone)
            .send()
            .await
            .api("DescribeAvailabilityZones")?;
        let mut ids = self.zone_ids.write();
        for az in out.availability_zones() {
            if let (Some(name), Some(id)) = (az.zone_name(), az.zone_id()) {
                ids.insert(name.to_string(), id.to_string());
            }
        }
        Ok(ids.get(zone).cloned())
    }

    /// The metadata of an instance.
    pub(crate) async fn instance_metadata_of(
        &self,
        inst: &Ec2Instance,
    ) -> Result<InstanceMetadata> {
        let mut additional_labels = BTreeMap::new();
        if !inst.zone.is_empty()
            && let Some(zone_id) = self.zone_id(&inst.zone).await?
        {
            additional_labels.insert(LABEL_ZONE_ID.to_string(), zone_id);
        }
        Ok(InstanceMetadata {
            provider_id: inst.provider_id(),
            instance_type: inst.instance_type.clone(),
            node_addresses: inst.node_addresses(&self.config.node_ip_families),
            zone: inst.zone.clone(),
            region: self.region.clone(),
            additional_labels,
        })
    }

    /// The coarse states of many nodes' instances, in input order.
    async fn states(&self, nodes: &[Node]) -> Vec<Result<InstanceState>> {
        let refs: Vec<Result<InstanceRef>> = nodes.iter().map(instance_ref_for_node).collect();
        self.resolve(&refs)
            .await
            .into_iter()
            .map(|r| {
                r.map(|inst| {
                    inst.map(|i| i.coarse_state())
                        .unwrap_or(InstanceState::NotFound)
                })
            })
            .collect()
    }
}

#[async_trait::async_trait]
impl InstancesV2 for AwsCloud {
    async fn instance_exists(&self, node: &Node) -> Result<bool> {
        let state = self.states(std::slice::from_ref(node)).await.pop();
        Ok(state.unwrap_or(Ok(InstanceState::NotFound))? != InstanceState::NotFound)
    }

    async fn instance_shutdown(&self, node: &Node) -> Result<bool> {
        let state = self.states(std::slice::from_ref(node)).await.pop();
        Ok(state.unwrap_or(Ok(InstanceState::NotFound))? == InstanceState::Shutdown)
    }

    async fn instance_metadata(&self, node: &Node) -> Result<Option<InstanceMetadata>> {
        self.instance_metadata_bulk(std::slice::from_ref(node))
            .await
            .pop()
            .unwrap_or(Ok(None))
    }

    async fn instance_metadata_bulk(
        &self,
        nodes: &[Node],
    ) -> Vec<Result<Option<InstanceMetadata>>> {
        let refs: Vec<Result<InstanceRef>> = nodes.iter().map(instance_ref_for_node).collect();
        let resolved = self.resolve(&refs).await;
        let mut out = Vec::with_capacity(nodes.len());
        for r in resolved {
            out.push(match r {
                Err(e) => Err(e),
                Ok(None) => Err(CloudError::InstanceNotFound),
                Ok(Some(inst)) if inst.coarse_state() == InstanceState::NotFound => {
                    Err(CloudError::InstanceNotFound)
                }
                Ok(Some(inst)) => self.instance_metadata_of(&inst).await.map(Some),
            });
        }
        out
    }

    async fn instance_states(&self, nodes: &[Node]) -> Vec<Result<InstanceState>> {
        self.states(nodes).await
    }
}

#[async_trait::async_trait]
impl Instances for AwsCloud {
    async fn node_addresses(&self, node_name: &str) -> Result<Vec<NodeAddress>> {
        let inst = self.existing(instance_ref_for_name(node_name)).await?;
        Ok(inst.node_addresses(&self.config.node_ip_families))
    }

    async fn node_addresses_by_provider_id(&self, provider_id: &str) -> Result<Vec<NodeAddress>> {
        let id = instance_id_from_provider_id(provider_id)?;
        let inst = self.existing(InstanceRef::Id(id)).await?;
        Ok(inst.node_addresses(&self.config.node_ip_families))
    }

    async fn instance_id(&self, node_name: &str) -> Result<String> {
        // Stopped instances still have an ID; only a missing or terminated one is "not found".
        let inst = self.existing(instance_ref_for_name(node_name)).await?;
        Ok(format!("/{}/{}", inst.zone, inst.id))
    }

    async fn instance_type(&self, node_name: &str) -> Result<String> {
        let inst = self.existing(instance_ref_for_name(node_name)).await?;
        Ok(inst.instance_type.clone())
    }

    async fn instance_type_by_provider_id(&self, provider_id: &str) -> Result<String> {
        let id = instance_id_from_provider_id(provider_id)?;
        let inst = self.existing(InstanceRef::Id(id)).await?;
        Ok(inst.instance_type.clone())
    }

    async fn current_node_name(&self, _hostname: &str) -> Result<String> {
        // Node names are the instances' private DNS names; this machine's comes from the metadata service.
        self.metadata("/latest/meta-data/local-hostname").await
    }

    async fn instance_exists_by_provider_id(&self, provider_id: &str) -> Result<bool> {
        let id = instance_id_from_provider_id(provider_id)?;
        let inst = self.resolve_one(InstanceRef::Id(id)).await?;
        Ok(inst.is_some_and(|i| i.coarse_state() != InstanceState::NotFound))
    }

    async fn instance_shutdown_by_provider_id(&self, provider_id: &str) -> Result<bool> {
        let id = instance_id_from_provider_id(provider_id)?;
        let inst = self.resolve_one(InstanceRef::Id(id)).await?;
        Ok(inst.is_some_and(|i| i.coarse_state() == InstanceState::Shutdown))
    }
}

#[async_trait::async_trait]
impl Zones for AwsCloud {
    async fn get_zone(&self) -> Result<Zone> {
        let zone = match &self.config.zone {
            Some(zone) => zone.clone(),
            None => {
                self.metadata("/latest/meta-data/placement/availability-zone")
                    .await?
            }
        };
        Ok(Zone {
            failure_domain: zone,
            region: self.region.clone(),
        })
    }

    async fn get_zone_by_provider_id(&self, provider_id: &str) -> Result<Zone> {
        let id = instance_id_from_provider_id(provider_id)?;
        let inst = self.existing(InstanceRef::Id(id)).await?;
        Ok(Zone {
            failure_domain: inst.zone.clone(),
            region: self.region.clone(),
        })
    }

    async fn get_zone_by_node_name(&self, node_name: &str) -> Result<Zone> {
        let inst = self.existing(instance_ref_for_name(node_name)).await?;
        Ok(Zone {
            failure_domain: inst.zone.clone(),
            region: self.region.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_id_forms() {
        for ok in [
            "aws:///us-east-1a/i-0123456789abcdef0",
            "aws:////i-0123456789abcdef0",
            "aws:///i-0123456789abcdef0",
            "i-0123456789abcdef0",
        ] {
            assert_eq!(
                instance_id_from_provider_id(ok).unwrap(),
                "i-0123456789abcdef0",
                "{ok}"
            );
        }
        for bad in [
            "",
            "aws:///",
            "aws:///us-east-1a/vol-1",
            "aws:///a/b/i-1",
            "gce://p/z/i-1",
            "i-",
            "node-1",
            "aws:///us-east-1a/i-12/x",
        ] {
            let err = instance_id_from_provider_id(bad).unwrap_err();
            assert!(
                err.to_string().contains("invalid AWS provider ID"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn node_names_to_references() {
        assert_eq!(
            instance_ref_for_name("i-0abc.ec2.internal"),
            InstanceRef::Id("i-0abc".into())
        );
        assert_eq!(
            instance_ref_for_name("ip-10-0-0-1.ec2.internal"),
            InstanceRef::PrivateDns("ip-10-0-0-1.ec2.internal".into())
        );
        let mut node = Node::default();
        node.metadata.name = Some("ip-10-0-0-1.ec2.internal".into());
        node.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
            provider_id: Some("aws:///us-east-1a/i-0def".into()),
            ..Default::default()
        });
        assert_eq!(
            instance_ref_for_node(&node).unwrap(),
            InstanceRef::Id("i-0def".into())
        );
        node.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
            provider_id: Some("gce://x".into()),
            ..Default::default()
        });
        assert!(instance_ref_for_node(&node).is_err());
        node.spec = None;
        assert_eq!(
            instance_ref_for_node(&node).unwrap(),
            InstanceRef::PrivateDns("ip-10-0-0-1.ec2.internal".into())
        );
    }

    fn sample() -> Ec2Instance {
        Ec2Instance {
            id: "i-1".into(),
            state: "running".into(),
            zone: "us-east-1a".into(),
            private_dns_name: "ip-10-0-0-5.ec2.internal".into(),
            public_dns_name: "ec2-3-3-3-3.compute-1.amazonaws.com".into(),
            private_ip: "10.0.0.5".into(),
            public_ip: "3.3.3.3".into(),
            interfaces: vec![
                Interface {
                    device_index: 1,
                    in_use: true,
                    private_ips: vec!["10.0.1.7".into()],
                    ipv6_addresses: vec!["2600::7".into(), "2600::8".into()],
                },
                Interface {
                    device_index: 0,
                    in_use: true,
                    private_ips: vec!["10.0.0.5".into(), "10.0.0.6".into()],
                    ipv6_addresses: vec!["2600::5".into()],
                },
                Interface {
                    device_index: 2,
                    in_use: false,
                    private_ips: vec!["10.0.2.9".into()],
                    ipv6_addresses: vec!["2600::9".into()],
                },
            ],
            ..Default::default()
        }
    }

    fn pairs(list: &[NodeAddress]) -> Vec<(String, String)> {
        list.iter()
            .map(|a| (a.type_.clone(), a.address.clone()))
            .collect()
    }

    #[test]
    fn addresses_in_upstream_order() {
        let inst = sample();
        let v4 = pairs(&inst.node_addresses(&[IpFamily::Ipv4]));
        let expect = |list: &[(&str, &str)]| -> Vec<(String, String)> {
            list.iter()
                .map(|(t, a)| (t.to_string(), a.to_string()))
                .collect()
        };
        assert_eq!(
            v4,
            expect(&[
                ("InternalIP", "10.0.0.5"),
                ("InternalIP", "10.0.0.6"),
                ("InternalIP", "10.0.1.7"),
                ("ExternalIP", "3.3.3.3"),
                ("InternalDNS", "ip-10-0-0-5.ec2.internal"),
                ("Hostname", "ip-10-0-0-5.ec2.internal"),
                ("ExternalDNS", "ec2-3-3-3-3.compute-1.amazonaws.com"),
            ])
        );
        let v6 = pairs(&inst.node_addresses(&[IpFamily::Ipv6]));
        assert_eq!(
            v6,
            expect(&[("InternalIP", "2600::5"), ("InternalIP", "2600::7")])
        );
        let dual = inst.node_addresses(&[IpFamily::Ipv6, IpFamily::Ipv4]);
        assert_eq!(dual.len(), 9);
        assert_eq!(dual[0].address, "2600::5");
        assert_eq!(dual[2].address, "10.0.0.5");

        // Without interface data the primary private IP is used.
        let bare = Ec2Instance {
            interfaces: vec![],
            public_dns_name: String::new(),
            ..sample()
        };
        assert_eq!(
            pairs(&bare.node_addresses(&[IpFamily::Ipv4])),
            expect(&[
                ("InternalIP", "10.0.0.5"),
                ("ExternalIP", "3.3.3.3"),
                ("InternalDNS", "ip-10-0-0-5.ec2.internal"),
                ("Hostname", "ip-10-0-0-5.ec2.internal"),
            ])
        );
    }

    #[test]
    fn states_and_provider_ids() {
        let mut inst = sample();
        assert_eq!(inst.provider_id(), "aws:///us-east-1a/i-1");
        for (state, coarse) in [
            ("pending", InstanceState::Running),
            ("running", InstanceState::Running),
            ("stopping", InstanceState::Running),
            ("shutting-down", InstanceState::Running),
            ("stopped", InstanceState::Shutdown),
            ("terminated", InstanceState::NotFound),
        ] {
            inst.state = state.into();
            assert_eq!(inst.coarse_state(), coarse, "{state}");
        }
    }

    #[test]
    fn cache_serves_fresh_entries_only() {
        let cache = InstanceCache::new(Duration::from_millis(50));
        cache.put("i-1".into(), Some(Arc::new(sample())));
        cache.put("i-2".into(), None);
        assert_eq!(cache.get("i-1").unwrap().unwrap().id, "i-1");
        assert_eq!(cache.get("i-2"), Some(None));
        assert_eq!(cache.get("i-3"), None);
        cache.invalidate("i-1");
        assert_eq!(cache.get("i-1"), None);
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(cache.get("i-2"), None);

        let off = InstanceCache::new(Duration::ZERO);
        off.put("i-1".into(), Some(Arc::new(sample())));
        assert_eq!(off.get("i-1"), None);
    }
}
