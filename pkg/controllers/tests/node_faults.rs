//! The fault run: the fake cloud fails 30% of its calls and adds latency, the API server fails some node
//! writes, closes every watch and compacts its history mid-run; every node still ends initialized, and
//! none is deleted.

mod common;

use std::time::Duration;

use cloud_controllers::ControllerName;
use common::*;
use provider_fake::{FakeConfig, FaultKind, FaultSpec};
use test_apiserver::{FaultRule, LatencyRule};

const NODES_PER_BURST: usize = 60;
const BURSTS: usize = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_fault_run_every_node_ends_initialized() {
    let mut fake = FakeConfig::default();
    fake.faults.insert(
        "*".to_string(),
        FaultSpec::errors(0.3, FaultKind::Provider).with_latency(Duration::from_millis(5)),
    );
    let mut config = test_config();
    config.concurrent_node_syncs = std::num::NonZeroUsize::new(4).unwrap();
    config.node_monitor_period =
        cloud_controllers::Period::new(Duration::from_millis(200)).unwrap();
    let (h, cloud) = Harness::with_fake(
        fake,
        config,
        &[
            ControllerName::CloudNode,
            ControllerName::CloudNodeLifecycle,
        ],
    )
    .await;
    h.controls.fail(
        FaultRule::new(503)
            .verb("patch")
            .resource("nodes")
            .rate(0.1),
    );
    for burst in 0..BURSTS {
        let creates = (0..NODES_PER_BURST).map(|i| {
            let client = h.client.clone();
            async move {
                let name = format!("f{burst}-{i:03}");
                let mut node = kubelet_node(
                    &name,
                    &[(
                        "InternalIP",
                        &format!("10.{burst}.{}.{}", i / 200, i % 200 + 1),
                    )],
                );
                // Some nodes are not Ready, so the lifecycle controller asks the failing cloud about them.
                if i % 5 == 0
                    && let Some(status) = node.status.as_mut()
                {
                    status.conditions = Some(vec![ready_condition("Unknown")]);
                }
                create_node(&client, &node).await
            }
        });
        futures::future::join_all(creates).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        h.controls.close_watches();
        h.controls.compact();
    }
    // Whether those compactions beat the informer's reconnect is a race; make one re-list certain: hold new
    // node watches back while the history moves past the informer's last resourceVersion, so its reconnect
    // gets 410 Expired and it has to list again.
    h.controls.add_latency(
        LatencyRule::new(Duration::from_millis(500))
            .verb("watch")
            .resource("nodes"),
    );
    h.controls.close_watches();
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(h.client.clone());
    let marker = serde_json::from_value(serde_json::json!({"metadata": {"name": "relist-marker"}}))
        .expect("a valid Namespace");
    namespaces
        .create(&Default::default(), &marker)
        .await
        .expect("creating a namespace moves the resourceVersion");
    h.controls.compact();
    tokio::time::sleep(Duration::from_millis(600)).await;
    h.controls.clear_latency();
    // The informer listed again (the first list plus at least one more).
    wait_until(
        Duration::from_secs(30),
        "node informer re-listed",
        || async { h.controls.request_count("list", "nodes") >= 2 },
    )
    .await;
    let total = NODES_PER_BURST * BURSTS;
    wait_until(
        Duration::from_secs(90),
        "every node initialized",
        || async {
            h.nodes()
                .list(&Default::default())
                .await
                .map(|l| l.items.iter().filter(|n| is_initialized(n)).count() == total)
                .unwrap_or(false)
        },
    )
    .await;
    let nodes = h.nodes().list(&Default::default()).await.unwrap().items;
    assert_eq!(nodes.len(), total, "no node deleted");
    for n in &nodes {
        let name = n.metadata.name.clone().unwrap_or_default();
        assert_eq!(
            n.spec.as_ref().and_then(|s| s.provider_id.clone()),
            Some(format!("fake://{name}"))
        );
    }
    assert!(cloud.call_count("instance_metadata_bulk") > 0);
    // Every initialization was reported: one Synced event per node, none lost.
    wait_until(
        Duration::from_secs(30),
        "a Synced event per node",
        || async {
            let mut named: Vec<String> = events_with_reason(&h.client, "Synced")
                .await
                .iter()
                .filter_map(|e| e.regarding.as_ref().and_then(|r| r.name.clone()))
                .collect();
            named.sort();
            named.dedup();
            named.len() == total
        },
    )
    .await;
    for (name, state) in h.health.checks() {
        assert_eq!(state, Ok(()), "health of {name}");
    }
    h.stop().await.unwrap();
}
