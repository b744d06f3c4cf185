//! Zone and region lookups.

use crate::Result;

/// The failure domain (zone) and region of an instance.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Zone {
    /// The zone, e.g. `us-east-1a`.
    pub failure_domain: String,
    /// The region, e.g. `us-east-1`.
    pub region: String,
}

/// Zone and region lookups.
#[async_trait::async_trait]
pub trait Zones: Send + Sync {
    /// The zone of the machine this process runs on (only meaningful when it runs on a cloud instance).
    async fn get_zone(&self) -> Result<Zone>;
    /// The zone of the instance with this provider ID.
    async fn get_zone_by_provider_id(&self, provider_id: &str) -> Result<Zone>;
    /// The zone of the instance backing this node.
    async fn get_zone_by_node_name(&self, node_name: &str) -> Result<Zone>;
}
