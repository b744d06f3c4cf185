//! InstancesV2: droplets behind nodes, through the droplet cache.
//!
//! - Provider ID `digitalocean://<droplet id>`; nodes without one are matched by droplet name.
//! - Addresses, in order: `Hostname` = droplet name, `InternalIP` = first private IPv4 (required),
//!   `ExternalIP` = first public IPv4, `ExternalIP` = first public IPv6.
//! - Instance type = size slug, region = region slug, no zone.
//! - Exists is `false` only when the API answers 404 for the droplet (or, by name, finds none); shut down
//!   means droplet status `off`.
//! - The bulk lookups resolve every node with at most one droplet-list refresh.

use std::sync::Arc;

use cloud_provider::{
    ADDRESS_EXTERNAL_IP, ADDRESS_HOSTNAME, ADDRESS_INTERNAL_IP, CloudError, InstanceMetadata,
    InstanceState, InstancesV2, Result, node_address,
};
use k8s_openapi::api::core::v1::{Node, NodeAddress};

use crate::api::{DROPLET_STATUS_OFF, Droplet};
use crate::cloud::DigitalOceanCloud;
use crate::droplets::{DropletRef, droplet_ref_of, provider_id_of};

/// The node addresses of a droplet, in the upstream order.
pub fn node_addresses(droplet: &Droplet) -> Result<Vec<NodeAddress>> {
    let private = droplet.first_v4("private").ok_or_else(|| {
        CloudError::provider(format!(
            "droplet {} ({}) has no private IPv4 address",
            droplet.id, droplet.name
        ))
    })?;
    let mut out = vec![
        node_address(ADDRESS_HOSTNAME, &droplet.name),
        node_address(ADDRESS_INTERNAL_IP, private),
    ];
    if let Some(public) = droplet.first_v4("public") {
        out.push(node_address(ADDRESS_EXTERNAL_IP, public));
    }
    if let Some(v6) = droplet.first_public_v6() {
        out.push(node_address(ADDRESS_EXTERNAL_IP, v6));
    }
    Ok(out)
}

/// The instance metadata of a droplet.
pub fn instance_metadata_of(droplet: &Droplet) -> Result<InstanceMetadata> {
    Ok(InstanceMetadata {
        provider_id: provider_id_of(droplet.id),
        instance_type: droplet.size_slug.clone(),
        node_addresses: node_addresses(droplet)?,
        zone: String::new(),
        region: droplet.region.slug.clone(),
        additional_labels: Default::default(),
    })
}

fn state_of(droplet: Option<&Droplet>) -> InstanceState {
    match droplet {
        None => InstanceState::NotFound,
        Some(d) if d.status == DROPLET_STATUS_OFF => InstanceState::Shutdown,
        Some(_) => InstanceState::Running,
    }
}

impl DigitalOceanCloud {
    async fn droplet_of(&self, node: &Node) -> Result<Option<Arc<Droplet>>> {
        let r = droplet_ref_of(node)?;
        self.droplets.lookup(&r).await
    }

    /// Resolves many nodes with one cache pass; a node whose provider ID is invalid gets its own error.
    async fn droplets_of(&self, nodes: &[Node]) -> Vec<Result<Option<Arc<Droplet>>>> {
        let refs: Vec<Result<DropletRef>> = nodes.iter().map(droplet_ref_of).collect();
        let valid: Vec<DropletRef> = refs
            .iter()
            .filter_map(|r| r.as_ref().ok().cloned())
            .collect();
        let mut looked_up = self.droplets.lookup_many(&valid).await.into_iter();
        refs.into_iter()
            .map(|r| match r {
                Ok(_) => looked_up.next().unwrap_or_else(|| {
                    Err(CloudError::provider(
                        "droplet lookup returned too few results",
                    ))
                }),
                Err(e) => Err(e),
            })
            .collect()
    }
}

#[async_trait::async_trait]
impl InstancesV2 for DigitalOceanCloud {
    async fn instance_exists(&self, node: &Node) -> Result<bool> {
        Ok(self.droplet_of(node).await?.is_some())
    }

    async fn instance_shutdown(&self, node: &Node) -> Result<bool> {
        match self.droplet_of(node).await? {
            Some(d) => Ok(d.status == DROPLET_STATUS_OFF),
            None => Err(CloudError::InstanceNotFound),
        }
    }

    async fn instance_metadata(&self, node: &Node) -> Result<Option<InstanceMetadata>> {
        match self.droplet_of(node).await? {
            Some(d) => instance_metadata_of(&d).map(Some),
            None => Err(CloudError::InstanceNotFound),
        }
    }

    async fn instance_metadata_bulk(
        &self,
        nodes: &[Node],
    ) -> Vec<Result<Option<InstanceMetadata>>> {
        self.droplets_of(nodes)
            .await
            .into_iter()
            .map(|found| match found {
                Ok(Some(d)) => instance_metadata_of(&d).map(Some),
                Ok(None) => Err(CloudError::InstanceNotFound),
                Err(e) => Err(e),
            })
            .collect()
    }

    async fn instance_states(&self, nodes: &[Node]) -> Vec<Result<InstanceState>> {
        self.droplets_of(nodes)
            .await
            .into_iter()
            .map(|found| found.map(|d| state_of(d.as_deref())))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{NetworkV4, NetworkV6, Networks, Region};

    fn droplet() -> Droplet {
        Droplet {
            id: 11,
            name: "pool-a-1".into(),
            status: "active".into(),
            size_slug: "s-2vcpu-4gb".into(),
            region: Region {
                slug: "fra1".into(),
                ..Default::default()
            },
            networks: Networks {
                v4: vec![
                    NetworkV4 {
                        ip_address: "203.0.113.9".into(),
                        type_: "public".into(),
                    },
                    NetworkV4 {
                        ip_address: "10.110.0.4".into(),
                        type_: "private".into(),
                    },
                    NetworkV4 {
                        ip_address: "10.110.0.5".into(),
                        type_: "private".into(),
                    },
                ],
                v6: vec![NetworkV6 {
                    ip_address: "2a03:b0c0:3:d0::1".into(),
                    type_: "public".into(),
                }],
            },
            tags: vec![],
        }
    }

    #[test]
    fn addresses_in_upstream_order() {
        let got: Vec<(String, String)> = node_addresses(&droplet())
            .unwrap()
            .into_iter()
            .map(|a| (a.type_, a.address))
            .collect();
        let want = [
            ("Hostname", "pool-a-1"),
            ("InternalIP", "10.110.0.4"),
            ("ExternalIP", "203.0.113.9"),
            ("ExternalIP", "2a03:b0c0:3:d0::1"),
        ];
        assert_eq!(
            got,
            want.map(|(t, a)| (t.to_string(), a.to_string())).to_vec()
        );
    }

    #[test]
    fn private_address_is_required_and_public_ones_optional() {
        let mut d = droplet();
        d.networks.v4.retain(|n| n.type_ == "private");
        d.networks.v6.clear();
        assert_eq!(node_addresses(&d).unwrap().len(), 2);
        d.networks.v4.clear();
        let err = node_addresses(&d).unwrap_err();
        assert!(err.to_string().contains("no private IPv4"), "{err}");
    }

    #[test]
    fn metadata_and_states() {
        let meta = instance_metadata_of(&droplet()).unwrap();
        assert_eq!(meta.provider_id, "digitalocean://11");
        assert_eq!(meta.instance_type, "s-2vcpu-4gb");
        assert_eq!(meta.region, "fra1");
        assert_eq!(meta.zone, "");
        let mut off = droplet();
        off.status = "off".into();
        assert_eq!(state_of(Some(&off)), InstanceState::Shutdown);
        assert_eq!(state_of(Some(&droplet())), InstanceState::Running);
        assert_eq!(state_of(None), InstanceState::NotFound);
    }
}
