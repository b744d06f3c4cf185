//! EBS volume labels against moto.

use cloud_provider::{CloudProvider, PvLabeler};
use k8s_openapi::api::core::v1::{
    AWSElasticBlockStoreVolumeSource, CSIPersistentVolumeSource, NFSVolumeSource, PersistentVolume,
    PersistentVolumeSpec,
};

use crate::common::{World, provider};

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

fn csi(handle: &str) -> PersistentVolume {
    PersistentVolume {
        spec: Some(PersistentVolumeSpec {
            csi: Some(CSIPersistentVolumeSource {
                driver: "ebs.csi.aws.com".into(),
                volume_handle: handle.into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[tokio::test]
async fn ebs_volumes_get_zone_and_region_labels() {
    let world = World::new("ebs").await;
    let volume = world
        .ec2
        .create_volume()
        .availability_zone("us-east-1b")
        .size(10)
        .send()
        .await
        .unwrap()
        .volume_id()
        .unwrap()
        .to_string();
    let cloud = provider(&world.config("")).await;
    let labeler = cloud.pv_labeler().unwrap();
    for pv in [
        in_tree(&volume),
        in_tree(&format!("aws://us-east-1b/{volume}")),
        csi(&volume),
    ] {
        let labels = labeler.get_labels_for_volume(&pv).await.unwrap().unwrap();
        assert_eq!(
            labels
                .get("topology.kubernetes.io/zone")
                .map(String::as_str),
            Some("us-east-1b")
        );
        assert_eq!(
            labels
                .get("topology.kubernetes.io/region")
                .map(String::as_str),
            Some("us-east-1")
        );
        assert_eq!(labels.len(), 2);
    }
    // A missing volume.
    let err = labeler
        .get_labels_for_volume(&in_tree("vol-0000000000000dead"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, cloud_provider::CloudError::DiskNotFound),
        "{err}"
    );
    // Not an EBS volume: left alone.
    let nfs = PersistentVolume {
        spec: Some(PersistentVolumeSpec {
            nfs: Some(NFSVolumeSource {
                server: "nfs".into(),
                path: "/export".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(cloud.get_labels_for_volume(&nfs).await.unwrap(), None);
}
