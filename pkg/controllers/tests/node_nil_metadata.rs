//! A provider answering `Ok(None)` for instance metadata must not crash the node controller: the node stays
//! tainted and is retried, other nodes are initialized, the address sync skips it, health stays ok.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use cloud_controllers::ControllerName;
use cloud_provider::{CloudProvider, InstanceMetadata, InstancesV2, LABEL_ZONE, Result};
use common::*;
use k8s_openapi::api::core::v1::{Node, NodeSpec};
use kube::ResourceExt;

/// Knows every node except those named `nometa-*`, for which it has no metadata.
#[derive(Default)]
struct SparseCloud {
    nometa_calls: AtomicUsize,
}

#[async_trait::async_trait]
impl CloudProvider for SparseCloud {
    fn provider_name(&self) -> &str {
        "sparse"
    }
    fn instances_v2(&self) -> Option<&dyn InstancesV2> {
        Some(self)
    }
    fn has_cluster_id(&self) -> bool {
        true
    }
}

#[async_trait::async_trait]
impl InstancesV2 for SparseCloud {
    async fn instance_exists(&self, _node: &Node) -> Result<bool> {
        Ok(true)
    }
    async fn instance_shutdown(&self, _node: &Node) -> Result<bool> {
        Ok(false)
    }
    async fn instance_metadata(&self, node: &Node) -> Result<Option<InstanceMetadata>> {
        let name = node.name_any();
        if name.starts_with("nometa") {
            self.nometa_calls.fetch_add(1, Ordering::SeqCst);
            return Ok(None);
        }
        Ok(Some(InstanceMetadata {
            provider_id: format!("sparse://{name}"),
            instance_type: "t1".to_string(),
            zone: "z1".to_string(),
            region: "r1".to_string(),
            ..InstanceMetadata::default()
        }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_nil_metadata_does_not_crash_and_keeps_the_taint() {
    let cloud = Arc::new(SparseCloud::default());
    let server = start_server().await;
    let mut config = test_config();
    config.node_status_update_frequency =
        cloud_controllers::NonZeroDuration::new(Duration::from_millis(100));
    let h = Harness::start(
        server,
        cloud.clone(),
        config,
        &[
            ControllerName::CloudNode,
            ControllerName::CloudNodeLifecycle,
        ],
    )
    .await;
    // An initialized node without metadata exercises the periodic address sync.
    let mut initialized = kubelet_node("nometa-initialized", &[("InternalIP", "10.4.0.2")]);
    initialized.spec = Some(NodeSpec {
        provider_id: Some("sparse://nometa-initialized".to_string()),
        ..NodeSpec::default()
    });
    create_node(&h.client, &initialized).await;
    create_node(
        &h.client,
        &kubelet_node("nometa-1", &[("InternalIP", "10.4.0.1")]),
    )
    .await;
    create_node(
        &h.client,
        &kubelet_node("ok-1", &[("InternalIP", "10.4.0.3")]),
    )
    .await;

    wait_until(Duration::from_secs(15), "ok-1 initialized", || async {
        get_node(&h.client, "ok-1")
            .await
            .is_some_and(|n| is_initialized(&n))
    })
    .await;
    let ok = get_node(&h.client, "ok-1").await.unwrap();
    assert_eq!(label(&ok, LABEL_ZONE), Some("z1"));
    wait_until(Duration::from_secs(15), "nometa retried", || async {
        cloud.nometa_calls.load(Ordering::SeqCst) >= 5
    })
    .await;
    let n = get_node(&h.client, "nometa-1").await.unwrap();
    assert!(!is_initialized(&n), "no metadata, no initialization");
    assert!(
        n.spec
            .as_ref()
            .and_then(|s| s.provider_id.as_ref())
            .is_none()
    );
    let untouched = get_node(&h.client, "nometa-initialized").await.unwrap();
    assert_eq!(
        addresses(&untouched),
        vec![("InternalIP".to_string(), "10.4.0.2".to_string())]
    );
    for (name, state) in h.health.checks() {
        assert_eq!(state, Ok(()), "health of {name}");
    }
    h.stop().await.unwrap();
}
