//! Cluster enumeration.

use crate::Result;

/// Lists the clusters a provider knows about.
#[async_trait::async_trait]
pub trait Clusters: Send + Sync {
    /// The names of all clusters.
    async fn list_clusters(&self) -> Result<Vec<String>>;
    /// The address of the cluster's control plane (API server).
    async fn master(&self, cluster_name: &str) -> Result<String>;
}
