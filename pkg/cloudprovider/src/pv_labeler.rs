//! Zone/region labels for PersistentVolumes backed by the cloud's volumes.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PersistentVolume;

use crate::Result;

/// Computes the topology labels of cloud volumes.
#[async_trait::async_trait]
pub trait PvLabeler: Send + Sync {
    /// The labels to put on `pv`; `Ok(None)` means it is not a volume of this cloud (leave it alone).
    /// [`CloudError::DiskNotFound`](crate::CloudError::DiskNotFound) means it should be but does not exist.
    async fn get_labels_for_volume(
        &self,
        pv: &PersistentVolume,
    ) -> Result<Option<BTreeMap<String, String>>>;
}
