//! cloud-node-controller against the in-memory API server and the fake cloud: initialization, labels,
//! addresses, provided-node-ip, batching, retries and the periodic address sync.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use cloud_controllers::ControllerName;
use cloud_provider::{
    ANNOTATION_PROVIDED_NODE_IP, LABEL_INSTANCE_TYPE, LABEL_INSTANCE_TYPE_BETA, LABEL_REGION,
    LABEL_REGION_BETA, LABEL_ZONE, LABEL_ZONE_BETA,
};
use common::*;
use k8s_openapi::api::core::v1::NodeSpec;
use kube::api::{Patch, PatchParams};
use provider_fake::{AddressConfig, FakeConfig, FaultKind, FaultSpec, InstanceConfig};

const TIMEOUT: Duration = Duration::from_secs(15);

fn instance(name: &str, zone: &str, addresses: &[(&str, &str)]) -> InstanceConfig {
    let mut i = InstanceConfig::named(name);
    i.zone = Some(zone.to_string());
    i.addresses = addresses
        .iter()
        .map(|(t, a)| AddressConfig {
            type_: t.to_string(),
            address: a.to_string(),
        })
        .collect();
    i
}

fn node_writes(h: &Harness, name: &str) -> Vec<(String, String)> {
    h.controls
        .request_log()
        .into_iter()
        .filter(|r| r.resource == "nodes" && r.name == name)
        .filter(|r| matches!(r.verb.as_str(), "patch" | "update"))
        .map(|r| (r.verb.clone(), r.subresource.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_initialization_sets_both_label_generations_and_removes_the_taint_in_one_write() {
    let mut inst = instance(
        "n1",
        "fake-region-1b",
        &[("InternalIP", "10.0.0.1"), ("Hostname", "n1")],
    );
    inst.instance_type = Some("fake.large".to_string());
    inst.labels = BTreeMap::from([
        ("example.com/rack".to_string(), "r1".to_string()),
        ("team".to_string(), "red".to_string()),
        ("node.kubernetes.io/sneaky".to_string(), "x".to_string()),
    ]);
    let fake = FakeConfig {
        instances: vec![inst],
        ..FakeConfig::default()
    };
    let (h, cloud) = Harness::with_fake(fake, test_config(), &[ControllerName::CloudNode]).await;
    let mut node = kubelet_node("n1", &[("InternalIP", "10.0.0.1"), ("Hostname", "n1")]);
    node.metadata
        .labels
        .get_or_insert_default()
        .insert("team".to_string(), "blue".to_string());
    h.controls.clear_request_log();
    let created = create_node(&h.client, &node).await;

    wait_until(TIMEOUT, "n1 initialized", || async {
        get_node(&h.client, "n1")
            .await
            .is_some_and(|n| is_initialized(&n))
    })
    .await;
    let n = get_node(&h.client, "n1").await.unwrap();
    assert_eq!(
        n.spec.as_ref().and_then(|s| s.provider_id.as_deref()),
        Some("fake://n1")
    );
    for (key, want) in [
        (LABEL_INSTANCE_TYPE, "fake.large"),
        (LABEL_INSTANCE_TYPE_BETA, "fake.large"),
        (LABEL_ZONE, "fake-region-1b"),
        (LABEL_ZONE_BETA, "fake-region-1b"),
        (LABEL_REGION, "fake-region-1"),
        (LABEL_REGION_BETA, "fake-region-1"),
        ("example.com/rack", "r1"),
        ("team", "blue"),
    ] {
        assert_eq!(label(&n, key), Some(want), "label {key}");
    }
    assert_eq!(
        label(&n, "node.kubernetes.io/sneaky"),
        None,
        "reserved additional label ignored"
    );
    // Only the uninitialized taint is removed (the server's not-ready taint, if any, stays).
    let taint_keys = |n: &k8s_openapi::api::core::v1::Node| -> Vec<String> {
        n.spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .map(|t| t.iter().map(|t| t.key.clone()).collect())
            .unwrap_or_default()
    };
    let mut expected_taints = taint_keys(&created);
    expected_taints.retain(|k| k != cloud_provider::TAINT_UNINITIALIZED);
    assert_eq!(taint_keys(&n), expected_taints);
    // Addresses were already right: one write on the critical path, no status write.
    assert_eq!(
        node_writes(&h, "n1"),
        vec![("patch".to_string(), String::new())]
    );

    wait_until(TIMEOUT, "Synced event", || async {
        !events_for(&h.client, "n1", "Synced").await.is_empty()
    })
    .await;
    let ev = events_for(&h.client, "n1", "Synced").await.remove(0);
    assert_eq!(ev.type_.as_deref(), Some("Normal"));
    assert_eq!(ev.note.as_deref(), Some("Node synced successfully"));
    assert_eq!(
        ev.reporting_controller.as_deref(),
        Some("cloud-node-controller")
    );
    assert_eq!(
        cloud.call_count("instance_metadata"),
        0,
        "bulk lookups only"
    );
    assert!(
        h.metrics_text()
            .contains("node_controller_cloud_provider_taint_removal_delay_seconds_count 1"),
        "{}",
        h.metrics_text()
    );
    h.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_addresses_are_replaced_whole() {
    let fake = FakeConfig {
        instances: vec![instance(
            "n2",
            "fake-region-1a",
            &[("InternalIP", "10.0.0.2"), ("ExternalIP", "203.0.113.2")],
        )],
        ..FakeConfig::default()
    };
    let (h, _cloud) = Harness::with_fake(fake, test_config(), &[ControllerName::CloudNode]).await;
    let node = kubelet_node(
        "n2",
        &[
            ("InternalIP", "192.168.0.9"),
            ("InternalDNS", "n2.internal"),
            ("Hostname", "n2"),
        ],
    );
    h.controls.clear_request_log();
    create_node(&h.client, &node).await;
    wait_until(TIMEOUT, "n2 initialized", || async {
        get_node(&h.client, "n2")
            .await
            .is_some_and(|n| is_initialized(&n))
    })
    .await;
    let n = get_node(&h.client, "n2").await.unwrap();
    let want: Vec<(String, String)> = [
        ("InternalIP", "10.0.0.2"),
        ("ExternalIP", "203.0.113.2"),
        ("Hostname", "n2"),
    ]
    .iter()
    .map(|(t, a)| (t.to_string(), a.to_string()))
    .collect();
    assert_eq!(
        addresses(&n),
        want,
        "kubelet-only entries are gone, the cloud order is kept"
    );
    // The status write comes first, the taint removal last.
    assert_eq!(
        node_writes(&h, "n2"),
        vec![
            ("patch".to_string(), "status".to_string()),
            ("patch".to_string(), String::new())
        ]
    );
    h.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_provided_ip_mismatch_keeps_the_taint_until_fixed() {
    let fake = FakeConfig {
        instances: vec![instance(
            "n3",
            "fake-region-1a",
            &[("InternalIP", "10.0.0.3")],
        )],
        ..FakeConfig::default()
    };
    let (h, _cloud) = Harness::with_fake(fake, test_config(), &[ControllerName::CloudNode]).await;
    let mut node = kubelet_node("n3", &[("InternalIP", "10.0.0.3")]);
    node.metadata.annotations.get_or_insert_default().insert(
        ANNOTATION_PROVIDED_NODE_IP.to_string(),
        "10.9.9.9".to_string(),
    );
    create_node(&h.client, &node).await;
    wait_until(TIMEOUT, "mismatch warning", || async {
        !events_for(&h.client, "n3", "ProvidedNodeIPMismatch")
            .await
            .is_empty()
    })
    .await;
    let ev = events_for(&h.client, "n3", "ProvidedNodeIPMismatch")
        .await
        .remove(0);
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    assert!(
        ev.note.as_deref().unwrap_or("").contains("10.9.9.9"),
        "{:?}",
        ev.note
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let n = get_node(&h.client, "n3").await.unwrap();
    assert!(!is_initialized(&n), "taint kept on mismatch");
    assert!(
        n.spec
            .as_ref()
            .and_then(|s| s.provider_id.as_ref())
            .is_none()
    );

    let patch =
        serde_json::json!({"metadata": {"annotations": {ANNOTATION_PROVIDED_NODE_IP: "10.0.0.3"}}});
    h.nodes()
        .patch("n3", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    wait_until(TIMEOUT, "n3 initialized after the fix", || async {
        get_node(&h.client, "n3")
            .await
            .is_some_and(|n| is_initialized(&n))
    })
    .await;
    h.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_initialized_nodes_get_ga_labels_from_beta_ones_without_cloud_calls() {
    let (h, cloud) = Harness::with_fake(
        FakeConfig::default(),
        test_config(),
        &[ControllerName::CloudNode],
    )
    .await;
    let mut node = kubelet_node("old-1", &[("InternalIP", "10.0.0.4")]);
    node.spec = Some(NodeSpec {
        provider_id: Some("fake://old-1".to_string()),
        ..NodeSpec::default()
    });
    let labels = node.metadata.labels.get_or_insert_default();
    labels.insert(LABEL_ZONE_BETA.to_string(), "z9".to_string());
    labels.insert(LABEL_REGION_BETA.to_string(), "r9".to_string());
    labels.insert(LABEL_INSTANCE_TYPE.to_string(), "only-ga".to_string());
    create_node(&h.client, &node).await;
    wait_until(TIMEOUT, "GA labels", || async {
        get_node(&h.client, "old-1").await.is_some_and(|n| {
            label(&n, LABEL_ZONE) == Some("z9") && label(&n, LABEL_REGION) == Some("r9")
        })
    })
    .await;
    let n = get_node(&h.client, "old-1").await.unwrap();
    assert_eq!(
        label(&n, LABEL_INSTANCE_TYPE_BETA),
        None,
        "only beta -> GA is reconciled"
    );
    assert_eq!(label(&n, LABEL_INSTANCE_TYPE), Some("only-ga"));
    // No lookups for the labels; at most the start-up address sync asked the cloud once.
    assert!(cloud.call_count("instance_metadata_bulk") <= 1);
    assert_eq!(cloud.call_count("instance_metadata"), 0);
    h.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_arrivals_are_batched_into_bulk_lookups() {
    let (h, cloud) = Harness::with_fake(
        FakeConfig::default(),
        test_config(),
        &[ControllerName::CloudNode],
    )
    .await;
    cloud
        .set_fault(
            "instance_metadata_bulk",
            FaultSpec::latency(Duration::from_millis(100)),
        )
        .unwrap();
    let creates = (0..40).map(|i| {
        let client = h.client.clone();
        async move {
            let name = format!("batch-{i:02}");
            create_node(
                &client,
                &kubelet_node(&name, &[("InternalIP", &format!("10.2.0.{i}"))]),
            )
            .await
        }
    });
    futures::future::join_all(creates).await;
    wait_until(TIMEOUT, "40 nodes initialized", || async {
        h.nodes()
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|n| is_initialized(n))
            .count()
            == 40
    })
    .await;
    let bulk = cloud.call_count("instance_metadata_bulk");
    assert!(bulk <= 10, "40 nodes took {bulk} bulk calls");
    assert_eq!(cloud.call_count("instance_metadata"), 0);
    h.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_cloud_failures_are_retried_and_retry_delays_honoured() {
    let (h, cloud) = Harness::with_fake(
        FakeConfig::default(),
        test_config(),
        &[ControllerName::CloudNode],
    )
    .await;
    cloud
        .set_fault(
            "instance_metadata_bulk",
            FaultSpec::errors(1.0, FaultKind::Retry).with_retry_after(Duration::from_millis(800)),
        )
        .unwrap();
    let started = Instant::now();
    create_node(
        &h.client,
        &kubelet_node("retry-1", &[("InternalIP", "10.3.0.1")]),
    )
    .await;
    wait_until(TIMEOUT, "first lookup", || async {
        cloud.call_count("instance_metadata_bulk") >= 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        cloud.call_count("instance_metadata_bulk"),
        1,
        "Retry delay not honoured"
    );
    cloud
        .set_fault(
            "instance_metadata_bulk",
            FaultSpec::errors(1.0, FaultKind::Provider),
        )
        .unwrap();
    wait_until(TIMEOUT, "retries with backoff", || async {
        cloud.call_count("instance_metadata_bulk") >= 4
    })
    .await;
    assert!(!is_initialized(
        &get_node(&h.client, "retry-1").await.unwrap()
    ));
    cloud.clear_faults();
    wait_until(TIMEOUT, "retry-1 initialized", || async {
        get_node(&h.client, "retry-1")
            .await
            .is_some_and(|n| is_initialized(&n))
    })
    .await;
    assert!(started.elapsed() >= Duration::from_millis(800));
    h.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_addresses_are_synced_periodically() {
    let fake = FakeConfig {
        instances: vec![instance(
            "sync-1",
            "fake-region-1a",
            &[("InternalIP", "10.1.0.1")],
        )],
        ..FakeConfig::default()
    };
    let mut config = test_config();
    config.node_status_update_frequency =
        cloud_controllers::NonZeroDuration::new(Duration::from_millis(200));
    let (h, _cloud) = Harness::with_fake(fake, config, &[ControllerName::CloudNode]).await;
    let mut node = kubelet_node("sync-1", &[("InternalIP", "10.1.0.99")]);
    node.spec = Some(NodeSpec {
        provider_id: Some("fake://sync-1".to_string()),
        ..NodeSpec::default()
    });
    create_node(&h.client, &node).await;
    wait_until(TIMEOUT, "addresses synced", || async {
        get_node(&h.client, "sync-1").await.is_some_and(|n| {
            addresses(&n) == vec![("InternalIP".to_string(), "10.1.0.1".to_string())]
        })
    })
    .await;
    // Unchanged addresses are not written again.
    h.controls.clear_request_log();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        node_writes(&h, "sync-1").is_empty(),
        "{:?}",
        node_writes(&h, "sync-1")
    );
    h.stop().await.unwrap();
}
