//! pv-label-controller against the in-memory API server and the fake cloud: zone/region labels in both
//! generations, existing labels untouched, foreign volumes ignored, failures evented and retried.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use cloud_controllers::ControllerName;
use cloud_provider::{LABEL_REGION, LABEL_REGION_BETA, LABEL_ZONE, LABEL_ZONE_BETA};
use common::*;
use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, PersistentVolume, PersistentVolumeSpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, PostParams};
use provider_fake::{FakeConfig, FaultKind, FaultSpec};

const TIMEOUT: Duration = Duration::from_secs(15);

fn pv(name: &str, driver: &str, zone: Option<&str>, labels: &[(&str, &str)]) -> PersistentVolume {
    let mut pv = PersistentVolume::default();
    pv.metadata.name = Some(name.to_string());
    if !labels.is_empty() {
        pv.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
    }
    pv.spec = Some(PersistentVolumeSpec {
        capacity: Some(BTreeMap::from([(
            "storage".to_string(),
            Quantity("1Gi".to_string()),
        )])),
        access_modes: Some(vec!["ReadWriteOnce".to_string()]),
        csi: Some(CSIPersistentVolumeSource {
            driver: driver.to_string(),
            volume_handle: format!("vol-{name}"),
            volume_attributes: zone.map(|z| BTreeMap::from([("zone".to_string(), z.to_string())])),
            ..CSIPersistentVolumeSource::default()
        }),
        ..PersistentVolumeSpec::default()
    });
    pv
}

fn labels_of(pv: &PersistentVolume) -> BTreeMap<String, String> {
    pv.metadata.labels.clone().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pv_label_cloud_volumes_get_zone_and_region_labels() {
    let (h, cloud) = Harness::with_fake(
        FakeConfig::default(),
        test_config(),
        &[ControllerName::PvLabel],
    )
    .await;
    let api: Api<PersistentVolume> = Api::all(h.client.clone());
    let pp = PostParams::default();
    api.create(
        &pp,
        &pv("cloud-1", "fake.csi.cloud", Some("fake-region-1c"), &[]),
    )
    .await
    .unwrap();
    api.create(
        &pp,
        &pv(
            "cloud-2",
            "fake.csi.cloud",
            Some("fake-region-1a"),
            &[(LABEL_ZONE, "mine"), ("app", "db")],
        ),
    )
    .await
    .unwrap();
    api.create(
        &pp,
        &pv("foreign-1", "other.csi.example.com", None, &[("app", "x")]),
    )
    .await
    .unwrap();

    wait_until(TIMEOUT, "cloud-1 labeled", || async {
        api.get("cloud-1")
            .await
            .is_ok_and(|p| labels_of(&p).contains_key(LABEL_REGION))
    })
    .await;
    let p1 = labels_of(&api.get("cloud-1").await.unwrap());
    assert_eq!(
        p1.get(LABEL_ZONE).map(String::as_str),
        Some("fake-region-1c")
    );
    assert_eq!(
        p1.get(LABEL_ZONE_BETA).map(String::as_str),
        Some("fake-region-1c")
    );
    assert_eq!(
        p1.get(LABEL_REGION).map(String::as_str),
        Some("fake-region-1")
    );
    assert_eq!(
        p1.get(LABEL_REGION_BETA).map(String::as_str),
        Some("fake-region-1")
    );
    // And a node affinity requiring the zone and region, as upstream sets it.
    let affinity = api
        .get("cloud-1")
        .await
        .unwrap()
        .spec
        .and_then(|s| s.node_affinity)
        .and_then(|a| a.required)
        .expect("a required node affinity");
    let requirements: Vec<(String, Vec<String>)> = affinity.node_selector_terms[0]
        .match_expressions
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|r| (r.key, r.values.unwrap_or_default()))
        .collect();
    assert!(
        requirements.contains(&(LABEL_ZONE.to_string(), vec!["fake-region-1c".to_string()]))
            && requirements
                .contains(&(LABEL_REGION.to_string(), vec!["fake-region-1".to_string()])),
        "{requirements:?}"
    );

    wait_until(TIMEOUT, "cloud-2 labeled", || async {
        api.get("cloud-2")
            .await
            .is_ok_and(|p| labels_of(&p).contains_key(LABEL_REGION))
    })
    .await;
    let p2 = labels_of(&api.get("cloud-2").await.unwrap());
    assert_eq!(
        p2.get(LABEL_ZONE).map(String::as_str),
        Some("fake-region-1a"),
        "as upstream, the cloud's zone replaces the PV's"
    );
    assert_eq!(
        p2.get(LABEL_ZONE_BETA).map(String::as_str),
        Some("fake-region-1a")
    );
    assert_eq!(p2.get("app").map(String::as_str), Some("db"));

    // The foreign volume was looked at and left alone.
    wait_until(TIMEOUT, "three lookups", || async {
        cloud.call_count("get_labels_for_volume") >= 3
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let foreign = labels_of(&api.get("foreign-1").await.unwrap());
    assert_eq!(
        foreign,
        BTreeMap::from([("app".to_string(), "x".to_string())])
    );
    assert_eq!(
        cloud.call_count("get_labels_for_volume"),
        3,
        "each volume is examined once"
    );
    h.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pv_label_failures_are_evented_and_retried() {
    let (h, cloud) = Harness::with_fake(
        FakeConfig::default(),
        test_config(),
        &[ControllerName::PvLabel],
    )
    .await;
    cloud
        .set_fault(
            "get_labels_for_volume",
            FaultSpec::errors(1.0, FaultKind::Provider),
        )
        .unwrap();
    let api: Api<PersistentVolume> = Api::all(h.client.clone());
    api.create(
        &PostParams::default(),
        &pv("flaky-1", "fake.csi.cloud", Some("fake-region-1b"), &[]),
    )
    .await
    .unwrap();
    wait_until(TIMEOUT, "FailedLabelVolume", || async {
        !events_for(&h.client, "flaky-1", "FailedLabelVolume")
            .await
            .is_empty()
    })
    .await;
    let ev = events_for(&h.client, "flaky-1", "FailedLabelVolume")
        .await
        .remove(0);
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    assert!(!labels_of(&api.get("flaky-1").await.unwrap()).contains_key(LABEL_ZONE));
    wait_until(TIMEOUT, "retried", || async {
        cloud.call_count("get_labels_for_volume") >= 3
    })
    .await;
    cloud.clear_faults();
    wait_until(TIMEOUT, "flaky-1 labeled", || async {
        api.get("flaky-1").await.is_ok_and(|p| {
            labels_of(&p).get(LABEL_ZONE).map(String::as_str) == Some("fake-region-1b")
        })
    })
    .await;
    h.stop().await.unwrap();
}
