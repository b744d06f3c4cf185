//! An out-of-tree cloud provider, kept in the workspace to prove that the public API of `cloud-provider`
//! and `ccm-app` is all a cloud vendor needs.
//!
//! The "cloud" is a static inventory read from the cloud-config file (JSON):
//!
//! ```json
//! {
//!   "instances": [
//!     { "node": "node-a", "id": "i-0001", "type": "small", "zone": "zone-a", "region": "region-1",
//!       "internalIp": "10.0.0.11", "state": "running" }
//!   ]
//! }
//! ```
//!
//! Only [`InstancesV2`] is implemented: nodes get their provider ID (`example://<id>`), instance type, zone,
//! region and addresses, stopped instances get the shutdown taint and missing ones are deleted. Every other
//! capability is absent, so the controllers that need it do not start.
//!
//! The provider also contributes a controller of its own, [`pending_lb`] (`pending-lb-controller`, off by
//! default), declared in the registry next to the factory and returned by
//! [`CloudProvider::controllers`].

pub mod pending_lb;

use std::collections::BTreeMap;
use std::sync::Arc;

use cloud_provider::{
    BoxError, CloudError, CloudProvider, InstanceMetadata, InstancesV2, ProviderController,
    Registry, RegistryError, Result,
};
use k8s_openapi::api::core::v1::{Node, NodeAddress};
use serde::Deserialize;

/// The name this provider registers under (`--cloud-provider=example`).
pub const PROVIDER_NAME: &str = "example";

/// Whether an instance is running or stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PowerState {
    /// The instance runs.
    #[default]
    Running,
    /// The instance exists but is powered off.
    Stopped,
}

/// One instance of the inventory.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Instance {
    /// The Kubernetes node name the instance registers as.
    pub node: String,
    /// The instance ID; the provider ID is `example://<id>`.
    pub id: String,
    /// The machine type.
    #[serde(rename = "type", default)]
    pub instance_type: String,
    /// The zone.
    #[serde(default)]
    pub zone: String,
    /// The region.
    #[serde(default)]
    pub region: String,
    /// The private address, reported as `InternalIP`.
    #[serde(default)]
    pub internal_ip: Option<String>,
    /// Running or stopped.
    #[serde(default)]
    pub state: PowerState,
}

/// The cloud-config document.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExampleConfig {
    /// The inventory.
    #[serde(default)]
    pub instances: Vec<Instance>,
}

/// The provider: a read-only inventory of instances.
#[derive(Debug, Clone, Default)]
pub struct ExampleCloud {
    by_id: BTreeMap<String, Instance>,
}

impl ExampleCloud {
    /// Builds the provider from a parsed configuration. Duplicate instance IDs are an error.
    pub fn new(config: ExampleConfig) -> std::result::Result<Self, BoxError> {
        let mut by_id = BTreeMap::new();
        for instance in config.instances {
            let id = instance.id.clone();
            if by_id.insert(id.clone(), instance).is_some() {
                return Err(format!("instance id {id:?} appears twice in the cloud config").into());
            }
        }
        Ok(Self { by_id })
    }

    /// Builds the provider from the optional cloud-config bytes (no file = an empty inventory).
    pub fn from_config_bytes(bytes: Option<&[u8]>) -> std::result::Result<Self, BoxError> {
        let config = match bytes {
            Some(bytes) => serde_json::from_slice::<ExampleConfig>(bytes)
                .map_err(|err| format!("invalid example cloud config: {err}"))?,
            None => ExampleConfig::default(),
        };
        Self::new(config)
    }

    /// Finds the instance behind a node: by `spec.providerID` when set, else by node name.
    fn find(&self, node: &Node) -> Result<Option<&Instance>> {
        let provider_id = node
            .spec
            .as_ref()
            .and_then(|spec| spec.provider_id.as_deref())
            .filter(|id| !id.is_empty());
        match provider_id {
            Some(provider_id) => {
                let id = provider_id.strip_prefix("example://").ok_or_else(|| {
                    CloudError::provider(format!(
                        "provider ID {provider_id:?} does not belong to the example cloud"
                    ))
                })?;
                Ok(self.by_id.get(id))
            }
            None => {
                let name = node.metadata.name.as_deref().unwrap_or_default();
                Ok(self.by_id.values().find(|i| i.node == name))
            }
        }
    }
}

#[async_trait::async_trait]
impl CloudProvider for ExampleCloud {
    fn provider_name(&self) -> &str {
        PROVIDER_NAME
    }

    fn instances_v2(&self) -> Option<&dyn InstancesV2> {
        Some(self)
    }

    fn controllers(&self) -> Vec<Arc<dyn ProviderController>> {
        vec![Arc::new(pending_lb::PendingLbController)]
    }

    fn has_cluster_id(&self) -> bool {
        true
    }
}

#[async_trait::async_trait]
impl InstancesV2 for ExampleCloud {
    async fn instance_exists(&self, node: &Node) -> Result<bool> {
        Ok(self.find(node)?.is_some())
    }

    async fn instance_shutdown(&self, node: &Node) -> Result<bool> {
        match self.find(node)? {
            Some(instance) => Ok(instance.state == PowerState::Stopped),
            None => Err(CloudError::InstanceNotFound),
        }
    }

    async fn instance_metadata(&self, node: &Node) -> Result<Option<InstanceMetadata>> {
        let Some(instance) = self.find(node)? else {
            return Err(CloudError::InstanceNotFound);
        };
        let mut node_addresses = Vec::new();
        if let Some(ip) = &instance.internal_ip {
            node_addresses.push(NodeAddress {
                type_: "InternalIP".to_string(),
                address: ip.clone(),
            });
        }
        node_addresses.push(NodeAddress {
            type_: "Hostname".to_string(),
            address: instance.node.clone(),
        });
        Ok(Some(InstanceMetadata {
            provider_id: format!("example://{}", instance.id),
            instance_type: instance.instance_type.clone(),
            node_addresses,
            zone: instance.zone.clone(),
            region: instance.region.clone(),
            additional_labels: BTreeMap::new(),
        }))
    }
}

/// Registers the provider under [`PROVIDER_NAME`].
pub fn register(registry: &mut Registry) -> std::result::Result<(), RegistryError> {
    registry.register_fn(PROVIDER_NAME, |bytes| {
        Ok(Arc::new(ExampleCloud::from_config_bytes(bytes)?) as Arc<dyn CloudProvider>)
    })?;
    registry.declare_controllers(PROVIDER_NAME, &[pending_lb::PENDING_LB_CONTROLLER]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"{"instances": [
        {"node": "node-a", "id": "i-1", "type": "small", "zone": "zone-a", "region": "r1",
         "internalIp": "10.0.0.11"},
        {"node": "node-b", "id": "i-2", "state": "stopped"}
    ]}"#;

    fn node(name: &str, provider_id: Option<&str>) -> Node {
        let mut node = Node::default();
        node.metadata.name = Some(name.to_string());
        if let Some(id) = provider_id {
            node.spec.get_or_insert_with(Default::default).provider_id = Some(id.to_string());
        }
        node
    }

    fn cloud() -> Arc<dyn CloudProvider> {
        let mut registry = Registry::new();
        register(&mut registry).unwrap();
        registry
            .init(PROVIDER_NAME, Some(CONFIG.as_bytes()))
            .unwrap()
    }

    #[tokio::test]
    async fn metadata_by_name_and_by_provider_id() {
        let cloud = cloud();
        let instances = cloud.instances_v2().unwrap();
        let by_name = instances
            .instance_metadata(&node("node-a", None))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(by_name.provider_id, "example://i-1");
        assert_eq!(by_name.instance_type, "small");
        assert_eq!(by_name.zone, "zone-a");
        assert_eq!(by_name.region, "r1");
        assert_eq!(by_name.node_addresses[0].address, "10.0.0.11");
        assert_eq!(by_name.node_addresses[0].type_, "InternalIP");
        let by_id = instances
            .instance_metadata(&node("renamed", Some("example://i-1")))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(by_id, by_name);
    }

    #[tokio::test]
    async fn existence_and_shutdown() {
        let cloud = cloud();
        let instances = cloud.instances_v2().unwrap();
        assert!(
            instances
                .instance_exists(&node("node-a", None))
                .await
                .unwrap()
        );
        assert!(
            !instances
                .instance_exists(&node("node-z", None))
                .await
                .unwrap()
        );
        assert!(
            !instances
                .instance_shutdown(&node("node-a", None))
                .await
                .unwrap()
        );
        assert!(
            instances
                .instance_shutdown(&node("node-b", None))
                .await
                .unwrap()
        );
        let err = instances
            .instance_shutdown(&node("node-z", None))
            .await
            .unwrap_err();
        assert!(err.is_instance_not_found());
        let foreign = instances
            .instance_exists(&node("x", Some("aws:///i-1")))
            .await
            .unwrap_err();
        assert!(foreign.to_string().contains("does not belong"));
    }

    #[test]
    fn only_instances_v2_is_offered() {
        let cloud = cloud();
        assert_eq!(cloud.provider_name(), "example");
        assert!(cloud.instances_v2().is_some());
        assert!(cloud.load_balancer().is_none());
        assert!(cloud.routes().is_none());
        assert!(cloud.instances().is_none());
        assert!(cloud.has_cluster_id());
    }

    #[test]
    fn bad_configs_are_refused() {
        let mut registry = Registry::new();
        register(&mut registry).unwrap();
        let err = registry
            .init(PROVIDER_NAME, Some(b"{\"instances\": 3}"))
            .err()
            .unwrap();
        assert!(
            err.to_string().contains("invalid example cloud config"),
            "{err}"
        );
        let dup = br#"{"instances": [{"node": "a", "id": "i"}, {"node": "b", "id": "i"}]}"#;
        let err = registry.init(PROVIDER_NAME, Some(dup)).err().unwrap();
        assert!(err.to_string().contains("appears twice"), "{err}");
        assert!(registry.init(PROVIDER_NAME, None).is_ok());
    }
}
