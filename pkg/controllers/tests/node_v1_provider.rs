//! Providers with only the v1 `Instances` and `Zones` interfaces (no `InstancesV2`): the node controller
//! initializes through the per-node v1 calls and the lifecycle controller checks existence and shutdown by
//! provider ID.

mod common;

use std::sync::Arc;
use std::time::Duration;

use cloud_controllers::ControllerName;
use cloud_provider::{LABEL_INSTANCE_TYPE, LABEL_REGION_BETA, LABEL_ZONE, LABEL_ZONE_BETA};
use common::*;
use provider_fake::{AddressConfig, FakeConfig, InstanceConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_v1_provider_initializes_and_lifecycle_deletes() {
    let mut inst = InstanceConfig::named("v1-node");
    inst.zone = Some("fake-region-1c".to_string());
    inst.instance_type = Some("fake.medium".to_string());
    inst.addresses = vec![AddressConfig {
        type_: "InternalIP".to_string(),
        address: "10.7.0.1".to_string(),
    }];
    let fake = FakeConfig {
        instances: vec![
            inst,
            InstanceConfig::named("v1-keep-1"),
            InstanceConfig::named("v1-keep-2"),
            InstanceConfig::named("v1-gone"),
        ],
        ..FakeConfig::default()
    };
    let (cloud, control) = fake_cloud(fake);
    let server = start_server().await;
    let h = Harness::start(
        server,
        Arc::new(V1Only(cloud)),
        test_config(),
        &[
            ControllerName::CloudNode,
            ControllerName::CloudNodeLifecycle,
        ],
    )
    .await;
    create_node(
        &h.client,
        &kubelet_node("v1-node", &[("InternalIP", "10.7.0.1")]),
    )
    .await;
    wait_until(Duration::from_secs(15), "v1-node initialized", || async {
        get_node(&h.client, "v1-node")
            .await
            .is_some_and(|n| is_initialized(&n))
    })
    .await;
    let n = get_node(&h.client, "v1-node").await.unwrap();
    assert_eq!(
        n.spec.as_ref().and_then(|s| s.provider_id.as_deref()),
        Some("fake://v1-node")
    );
    assert_eq!(label(&n, LABEL_ZONE), Some("fake-region-1c"));
    assert_eq!(label(&n, LABEL_ZONE_BETA), Some("fake-region-1c"));
    assert_eq!(label(&n, LABEL_REGION_BETA), Some("fake-region-1"));
    assert_eq!(label(&n, LABEL_INSTANCE_TYPE), Some("fake.medium"));
    assert_eq!(control.call_count("instance_metadata_bulk"), 0);
    assert!(control.call_count("instance_id") >= 1);

    // Lifecycle through the v1 calls: the NotReady node whose instance is gone is deleted.
    for name in ["v1-keep-1", "v1-keep-2", "v1-gone"] {
        let mut node = kubelet_node(name, &[("InternalIP", "10.7.0.9")]);
        node.spec = None;
        if name == "v1-gone" {
            node.status.as_mut().unwrap().conditions = Some(vec![ready_condition("False")]);
        }
        create_node(&h.client, &node).await;
    }
    control.terminate_instance("v1-gone").unwrap();
    wait_until(Duration::from_secs(15), "v1-gone deleted", || async {
        get_node(&h.client, "v1-gone").await.is_none()
    })
    .await;
    assert!(
        control.call_count("instance_exists_by_provider_id") + control.call_count("instance_id")
            >= 1
    );
    assert_eq!(control.call_count("instance_states"), 0);
    h.stop().await.unwrap();
}
