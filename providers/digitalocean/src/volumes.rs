//! PersistentVolume labels for DigitalOcean block-storage volumes.
//!
//! A PV is a DigitalOcean volume when it is provisioned by the DigitalOcean CSI driver
//! (`spec.csi.driver: dobs.csi.digitalocean.com`, `volumeHandle` = the volume UUID). Its labels are the
//! region of the volume (`GET /v2/volumes/{id}` → `region.slug`) under both region label keys; DigitalOcean
//! has no zones. Any other PV is left alone; a volume the API does not know is
//! [`CloudError::DiskNotFound`].

use std::collections::BTreeMap;

use cloud_provider::{CloudError, PvLabeler, Result, well_known};
use k8s_openapi::api::core::v1::PersistentVolume;

use crate::api::Volume;
use crate::cloud::DigitalOceanCloud;

/// The DigitalOcean block-storage CSI driver.
pub const CSI_DRIVER: &str = "dobs.csi.digitalocean.com";

/// The volume UUID of a PV provisioned by the DigitalOcean CSI driver.
pub fn volume_id_of(pv: &PersistentVolume) -> Option<&str> {
    pv.spec
        .as_ref()
        .and_then(|s| s.csi.as_ref())
        .filter(|csi| csi.driver == CSI_DRIVER)
        .map(|csi| csi.volume_handle.trim())
        .filter(|h| !h.is_empty())
}

#[async_trait::async_trait]
impl PvLabeler for DigitalOceanCloud {
    async fn get_labels_for_volume(
        &self,
        pv: &PersistentVolume,
    ) -> Result<Option<BTreeMap<String, String>>> {
        let Some(id) = volume_id_of(pv) else {
            return Ok(None);
        };
        let volume: Option<Volume> = self
            .client
            .get_opt("get_volume", &format!("v2/volumes/{id}"), "volume")
            .await?;
        let volume = volume.ok_or(CloudError::DiskNotFound)?;
        if volume.region.slug.is_empty() {
            return Err(CloudError::provider(format!("volume {id} has no region")));
        }
        let region = volume.region.slug;
        Ok(Some(BTreeMap::from([
            (well_known::LABEL_REGION.to_string(), region.clone()),
            (well_known::LABEL_REGION_BETA.to_string(), region),
        ])))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{CSIPersistentVolumeSource, PersistentVolumeSpec};

    fn pv(driver: &str, handle: &str) -> PersistentVolume {
        PersistentVolume {
            spec: Some(PersistentVolumeSpec {
                csi: Some(CSIPersistentVolumeSource {
                    driver: driver.into(),
                    volume_handle: handle.into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn recognizes_only_do_csi_volumes() {
        assert_eq!(volume_id_of(&pv(CSI_DRIVER, "vol-1")), Some("vol-1"));
        assert_eq!(volume_id_of(&pv("ebs.csi.aws.com", "vol-1")), None);
        assert_eq!(volume_id_of(&pv(CSI_DRIVER, " ")), None);
        assert_eq!(volume_id_of(&PersistentVolume::default()), None);
    }
}
