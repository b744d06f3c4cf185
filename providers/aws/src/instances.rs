//! EC2 instances: node-to-instance resolution, bulk lookups through the bounded-staleness cache of
//! [`ec2_instance`](crate::ec2_instance), and the [`Instances`], [`InstancesV2`] and [`Zones`] capabilities.
//!
//! Every lookup by instance ID uses the `instance-id` filter of DescribeInstances (so missing instances are
//! simply absent instead of failing the whole call) with at most [`FILTER_CHUNK`] values per call; lookups
//! by private DNS name add an instance-state filter and keep only instances tagged for the cluster.

use std::collections::HashMap;
use std::sync::Arc;

use cloud_provider::{
    CloudError, InstanceMetadata, InstanceState, Instances, InstancesV2, Result, Zone, Zones,
};
use k8s_openapi::api::core::v1::{Node, NodeAddress};

use crate::cloud::{AwsCloud, filter};
use crate::ec2_instance::Ec2Instance;
use crate::error::{ApiError, SdkResultExt};
use crate::paginate::for_each_page;
pub use crate::provider_id::instance_id_from_provider_id;
use crate::topology::{LABEL_NETWORK_NODE_PREFIX, Topology};

/// Most values per DescribeInstances filter (AWS allows 200).
pub const FILTER_CHUNK: usize = 150;
/// The additional node label carrying the availability-zone ID (`use1-az1`).
pub const LABEL_ZONE_ID: &str = "topology.k8s.aws/zone-id";
/// Instance states in which a private-DNS-name lookup still finds an instance.
const LIVE_STATES: &[&str] = &["pending", "running", "shutting-down", "stopping", "stopped"];

/// Whether the node has the label `key`.
fn has_label(node: &Node, key: &str) -> bool {
    node.metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(key))
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

impl AwsCloud {
    /// Runs DescribeInstances with `filters`, following pagination.
    pub(crate) async fn describe_instances(
        &self,
        filters: Vec<aws_sdk_ec2::types::Filter>,
    ) -> std::result::Result<Vec<Ec2Instance>, ApiError> {
        let mut out = Vec::new();
        for_each_page(
            |token| {
                self.clients
                    .ec2
                    .describe_instances()
                    .set_filters(Some(filters.clone()))
                    .set_next_token(token)
                    .max_results(1000)
                    .send()
            },
            |page| page.next_token(),
            |page| {
                out.extend(
                    page.reservations()
                        .iter()
                        .flat_map(|r| r.instances())
                        .map(Ec2Instance::from),
                )
            },
        )
        .await
        .api("DescribeInstances")?;
        Ok(out)
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

    /// The metadata of an instance: the zone-ID label unless the node has it, and the network-node
    /// labels from its `topology` lookup.
    pub(crate) async fn instance_metadata_of(
        &self,
        inst: &Ec2Instance,
        node: &Node,
        topology: Option<&Topology>,
    ) -> Result<InstanceMetadata> {
        let mut additional_labels = self.topology_labels_of(inst, topology)?;
        if !inst.zone.is_empty()
            && !has_label(node, LABEL_ZONE_ID)
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
        let resolved: Vec<Result<Arc<Ec2Instance>>> = self
            .resolve(&refs)
            .await
            .into_iter()
            .map(|r| match r? {
                Some(inst) if inst.coarse_state() != InstanceState::NotFound => Ok(inst),
                _ => Err(CloudError::InstanceNotFound),
            })
            .collect();
        // Topologies of the nodes without the labels, in bulk.
        let wanted: Vec<&Ec2Instance> = nodes
            .iter()
            .zip(&resolved)
            .filter(|(node, _)| !has_label(node, &format!("{LABEL_NETWORK_NODE_PREFIX}1")))
            .filter_map(|(_, inst)| inst.as_ref().ok())
            .map(|inst| inst.as_ref())
            .filter(|inst| self.might_have_topology(inst))
            .collect();
        let topologies = if wanted.is_empty() {
            Default::default()
        } else {
            self.instance_topologies(&wanted).await
        };
        let mut out = Vec::with_capacity(nodes.len());
        for (node, inst) in nodes.iter().zip(resolved) {
            out.push(match inst {
                Err(e) => Err(e),
                Ok(inst) => self
                    .instance_metadata_of(&inst, node, topologies.get(&inst.id))
                    .await
                    .map(Some),
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
}
