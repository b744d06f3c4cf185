//! Zone and region labels for PersistentVolumes backed by EBS volumes: the in-tree
//! `spec.awsElasticBlockStore.volumeID` and the EBS CSI driver's (`ebs.csi.aws.com`) volume handle.

use std::collections::BTreeMap;

use cloud_provider::{CloudError, LABEL_REGION, LABEL_ZONE, PvLabeler, Result};
use k8s_openapi::api::core::v1::PersistentVolume;

use crate::cloud::AwsCloud;
use crate::error::SdkResultExt;

/// The EBS CSI driver's name.
pub const EBS_CSI_DRIVER: &str = "ebs.csi.aws.com";

/// The EBS volume ID of a PersistentVolume: `None` when the PV is not an EBS volume (or a provisioning
/// placeholder), an error when it claims to be one but its ID is malformed.
pub fn ebs_volume_id(pv: &PersistentVolume) -> Result<Option<String>> {
    let Some(spec) = pv.spec.as_ref() else {
        return Ok(None);
    };
    let raw = if let Some(ebs) = &spec.aws_elastic_block_store {
        ebs.volume_id.clone()
    } else if let Some(csi) = spec.csi.as_ref().filter(|c| c.driver == EBS_CSI_DRIVER) {
        csi.volume_handle.clone()
    } else {
        return Ok(None);
    };
    // Being provisioned: no volume yet.
    if raw == "placeholder-for-provisioning" {
        return Ok(None);
    }
    // `aws://<zone>/vol-...`, `aws:///vol-...` or `vol-...`.
    let id = raw
        .strip_prefix("aws://")
        .map(|rest| rest.rsplit('/').next().unwrap_or(rest))
        .unwrap_or(&raw);
    let valid = id
        .strip_prefix("vol-")
        .is_some_and(|rest| !rest.is_empty() && rest.chars().all(|c| c.is_ascii_alphanumeric()));
    if !valid {
        return Err(CloudError::provider(format!(
            "invalid EBS volume ID {raw:?}: expected vol-<id> or aws://<zone>/vol-<id>"
        )));
    }
    Ok(Some(id.to_string()))
}

#[async_trait::async_trait]
impl PvLabeler for AwsCloud {
    async fn get_labels_for_volume(
        &self,
        pv: &PersistentVolume,
    ) -> Result<Option<BTreeMap<String, String>>> {
        let Some(id) = ebs_volume_id(pv)? else {
            return Ok(None);
        };
        let out = match self
            .clients
            .ec2
            .describe_volumes()
            .volume_ids(&id)
            .send()
            .await
            .api("DescribeVolumes")
        {
            Ok(out) => out,
            Err(e) if e.is_code("InvalidVolume.NotFound") => return Err(CloudError::DiskNotFound),
            Err(e) => return Err(e.into()),
        };
        let Some(zone) = out
            .volumes()
            .first()
            .and_then(|v| v.availability_zone())
            .filter(|z| !z.is_empty())
        else {
            return Err(CloudError::DiskNotFound);
        };
        Ok(Some(BTreeMap::from([
            (LABEL_ZONE.to_string(), zone.to_string()),
            (LABEL_REGION.to_string(), self.region.clone()),
        ])))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        AWSElasticBlockStoreVolumeSource, CSIPersistentVolumeSource, PersistentVolumeSpec,
    };

    fn in_tree(id: &str) -> PersistentVolume {
        PersistentVolume {
            spec: Some(PersistentVolumeSpec {
                aws_elastic_block_store: Some(AWSElasticBlockStoreVolumeSource {
                    volume_id: id.into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn csi(driver: &str, handle: &str) -> PersistentVolume {
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
    fn volume_ids() {
        for (pv, want) in [
            (in_tree("vol-0abc"), Some("vol-0abc")),
            (in_tree("aws://us-east-1a/vol-0abc"), Some("vol-0abc")),
            (in_tree("aws:///vol-0abc"), Some("vol-0abc")),
            (in_tree("placeholder-for-provisioning"), None),
            (csi(EBS_CSI_DRIVER, "vol-0def"), Some("vol-0def")),
            (csi("pd.csi.storage.gke.io", "projects/x/disks/y"), None),
            (PersistentVolume::default(), None),
        ] {
            assert_eq!(ebs_volume_id(&pv).unwrap().as_deref(), want);
        }
        assert!(ebs_volume_id(&in_tree("disk-1")).is_err());
        assert!(ebs_volume_id(&csi(EBS_CSI_DRIVER, "vol-")).is_err());
    }
}
