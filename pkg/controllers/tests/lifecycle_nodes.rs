//! cloud-node-lifecycle-controller against the in-memory API server and the fake cloud: stopped versus
//! terminated instances, the shutdown taint, the deletion guard, failed deletions and bulk state checks.

mod common;

use std::time::Duration;

use cloud_controllers::{ControllerConfig, ControllerName};
use cloud_provider::TAINT_SHUTDOWN;
use common::*;
use k8s_openapi::api::core::v1::{Node, NodeSpec, Taint};
use provider_fake::{FakeConfig, FakeControl, FaultKind, FaultSpec, InstanceConfig};
use test_apiserver::FaultRule;

const TIMEOUT: Duration = Duration::from_secs(15);

/// An initialized node (provider ID set, no taints) with the given readiness.
fn initialized_node(name: &str, ready: &str, taints: Vec<Taint>) -> Node {
    let mut node = kubelet_node(name, &[("InternalIP", "10.5.0.1")]);
    node.spec = Some(NodeSpec {
        provider_id: Some(format!("fake://{name}")),
        taints: Some(taints),
        ..NodeSpec::default()
    });
    if let Some(status) = node.status.as_mut() {
        status.conditions = Some(vec![ready_condition(ready)]);
    }
    node
}

fn shutdown_taint() -> Taint {
    Taint {
        key: TAINT_SHUTDOWN.to_string(),
        effect: "NoSchedule".to_string(),
        value: None,
        time_added: None,
    }
}

fn has_shutdown_taint(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == TAINT_SHUTDOWN))
}

/// The lifecycle controller with a fake cloud that has running instances named `instances`.
async fn start(config: ControllerConfig, instances: &[&str]) -> (Harness, FakeControl) {
    let fake = FakeConfig {
        instances: instances
            .iter()
            .map(|n| InstanceConfig::named(*n))
            .collect(),
        ..FakeConfig::default()
    };
    Harness::with_fake(fake, config, &[ControllerName::CloudNodeLifecycle]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_stopped_instances_are_tainted_and_terminated_ones_deleted() {
    let (h, cloud) = start(
        test_config(),
        &[
            "ready-1",
            "ready-2",
            "ready-3",
            "run-1",
            "stopped-1",
            "gone-1",
        ],
    )
    .await;
    for (name, ready) in [
        ("ready-1", "True"),
        ("ready-2", "True"),
        ("ready-3", "True"),
        ("run-1", "Unknown"),
        ("stopped-1", "False"),
        ("gone-1", "Unknown"),
    ] {
        create_node(&h.client, &initialized_node(name, ready, vec![])).await;
    }
    wait_until(TIMEOUT, "first lifecycle pass", || async {
        cloud.call_count("instance_states") >= 1
    })
    .await;
    cloud.stop_instance("stopped-1").unwrap();
    cloud.terminate_instance("gone-1").unwrap();

    wait_until(TIMEOUT, "gone-1 deleted", || async {
        get_node(&h.client, "gone-1").await.is_none()
    })
    .await;
    wait_until(TIMEOUT, "stopped-1 tainted", || async {
        get_node(&h.client, "stopped-1")
            .await
            .is_some_and(|n| has_shutdown_taint(&n))
    })
    .await;
    // Events are written by the recorder's own task, after the deletion it announces may already be done.
    wait_until(TIMEOUT, "DeletingNode event for gone-1", || async {
        !events_for(&h.client, "gone-1", "DeletingNode")
            .await
            .is_empty()
    })
    .await;
    let deleting = events_for(&h.client, "gone-1", "DeletingNode").await;
    assert_eq!(deleting.len(), 1);
    assert_eq!(deleting[0].type_.as_deref(), Some("Normal"));
    assert!(
        deleting[0]
            .note
            .as_deref()
            .unwrap_or("")
            .contains("does not exist in the cloud provider")
    );
    let run = get_node(&h.client, "run-1")
        .await
        .expect("running instance kept");
    assert!(!has_shutdown_taint(&run));
    assert!(
        get_node(&h.client, "stopped-1").await.is_some(),
        "a stopped instance is not deleted"
    );
    assert_eq!(
        cloud.call_count("instance_exists"),
        0,
        "bulk state checks only"
    );
    assert_eq!(h.metrics.node_lifecycle_nodes_deleted.get(), 1);
    h.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_shutdown_taint_is_removed_when_ready_again() {
    let (h, cloud) = start(test_config(), &["back-1", "cycle-1"]).await;
    create_node(
        &h.client,
        &initialized_node("back-1", "True", vec![shutdown_taint()]),
    )
    .await;
    create_node(&h.client, &initialized_node("cycle-1", "False", vec![])).await;
    wait_until(TIMEOUT, "back-1 untainted", || async {
        get_node(&h.client, "back-1")
            .await
            .is_some_and(|n| !has_shutdown_taint(&n))
    })
    .await;
    wait_until(TIMEOUT, "first pass", || async {
        cloud.call_count("instance_states") >= 1
    })
    .await;
    cloud.stop_instance("cycle-1").unwrap();
    wait_until(TIMEOUT, "cycle-1 tainted", || async {
        get_node(&h.client, "cycle-1")
            .await
            .is_some_and(|n| has_shutdown_taint(&n))
    })
    .await;
    cloud.start_instance("cycle-1").unwrap();
    set_ready(&h.client, "cycle-1", "True").await;
    wait_until(TIMEOUT, "cycle-1 untainted", || async {
        get_node(&h.client, "cycle-1")
            .await
            .is_some_and(|n| !has_shutdown_taint(&n))
    })
    .await;
    h.stop().await.unwrap();
}

/// Three of four nodes gone at the default 50%: the first pass deletes two (50% of 4), reports the third
/// with a Warning event, and a later pass deletes it (of 2 nodes left, one may go): the deletions are
/// slowed, never stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_deletions_are_rate_limited_and_converge() {
    let (h, cloud) = start(test_config(), &["keep-1", "lost-1", "lost-2", "lost-3"]).await;
    for name in ["keep-1", "lost-1", "lost-2", "lost-3"] {
        let ready = if name == "keep-1" { "True" } else { "Unknown" };
        create_node(&h.client, &initialized_node(name, ready, vec![])).await;
    }
    wait_until(TIMEOUT, "first pass", || async {
        cloud.call_count("instance_states") >= 1
    })
    .await;
    for name in ["lost-1", "lost-2", "lost-3"] {
        cloud.terminate_instance(name).unwrap();
    }
    wait_until(TIMEOUT, "every lost node deleted", || async {
        get_node(&h.client, "lost-3").await.is_none()
    })
    .await;
    for name in ["lost-1", "lost-2"] {
        assert!(get_node(&h.client, name).await.is_none(), "{name}");
    }
    assert!(get_node(&h.client, "keep-1").await.is_some());
    assert_eq!(h.metrics.node_lifecycle_nodes_deleted.get(), 3);
    assert!(h.metrics.node_lifecycle_deletion_guard_trips.get() >= 1);
    wait_until(TIMEOUT, "rate event", || async {
        !events_with_reason(&h.client, "DeletionGuardTripped")
            .await
            .is_empty()
    })
    .await;
    let events = events_with_reason(&h.client, "DeletionGuardTripped").await;
    assert_eq!(events[0].type_.as_deref(), Some("Warning"));
    let note = events[0].note.clone().unwrap_or_default();
    assert!(
        note.contains("3 of 4 nodes")
            && note.contains("deleting 2 this pass")
            && note.contains("50%")
            && note.contains("the other 1 in later passes"),
        "{note}"
    );
    assert_eq!(
        events[0].regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("lost-3")
    );
    h.stop().await.unwrap();
}

/// At 1%, 60 of 100 nodes gone go one per pass: never more than the rate allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_deletions_never_exceed_the_rate() {
    let names: Vec<String> = (0..100).map(|i| format!("n-{i:03}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let config = ControllerConfig {
        node_deletion_max_percent: cloud_controllers::Percent::new(1).unwrap(),
        ..test_config()
    };
    let (h, cloud) = start(config, &refs).await;
    for (i, name) in names.iter().enumerate() {
        let ready = if i < 60 { "Unknown" } else { "True" };
        create_node(&h.client, &initialized_node(name, ready, vec![])).await;
    }
    wait_until(TIMEOUT, "first pass", || async {
        cloud.call_count("instance_states") >= 1
    })
    .await;
    for name in &names[..60] {
        cloud.terminate_instance(name).unwrap();
    }
    let passes_before = cloud.call_count("instance_states");
    wait_until(TIMEOUT, "five deletions", || async {
        h.metrics.node_lifecycle_nodes_deleted.get() >= 5
    })
    .await;
    // Each pass makes two bulk state calls (the check and the second look) and deletes one node.
    let passes = (cloud.call_count("instance_states") - passes_before).div_ceil(2);
    assert!(
        h.metrics.node_lifecycle_nodes_deleted.get() <= passes + 1,
        "{} deletions in {passes} passes",
        h.metrics.node_lifecycle_nodes_deleted.get()
    );
    h.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_failed_deletion_emits_a_warning_and_is_retried() {
    let (h, cloud) = start(test_config(), &["a-1", "a-2", "doomed-1"]).await;
    for (name, ready) in [("a-1", "True"), ("a-2", "True"), ("doomed-1", "False")] {
        create_node(&h.client, &initialized_node(name, ready, vec![])).await;
    }
    let fault = h.controls.fail(
        FaultRule::new(500)
            .verb("delete")
            .resource("nodes")
            .message("etcd is sad"),
    );
    wait_until(TIMEOUT, "first pass", || async {
        cloud.call_count("instance_states") >= 1
    })
    .await;
    cloud.terminate_instance("doomed-1").unwrap();
    wait_until(TIMEOUT, "DeletingNodeFailed", || async {
        !events_for(&h.client, "doomed-1", "DeletingNodeFailed")
            .await
            .is_empty()
    })
    .await;
    let failed = events_for(&h.client, "doomed-1", "DeletingNodeFailed").await;
    assert_eq!(failed[0].type_.as_deref(), Some("Warning"));
    assert!(get_node(&h.client, "doomed-1").await.is_some());
    h.controls.remove_fault(fault);
    wait_until(TIMEOUT, "doomed-1 deleted", || async {
        get_node(&h.client, "doomed-1").await.is_none()
    })
    .await;
    h.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_checks_not_ready_nodes_with_one_bulk_call_per_pass() {
    let mut config = test_config();
    config.node_monitor_period =
        cloud_controllers::Period::new(Duration::from_millis(200)).unwrap();
    let names: Vec<String> = (0..60).map(|i| format!("nr-{i:02}")).collect();
    let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let (h, cloud) = start(config, &name_refs).await;
    let creates = (0..60).map(|i| {
        let client = h.client.clone();
        async move {
            create_node(
                &client,
                &initialized_node(&format!("nr-{i:02}"), "False", vec![]),
            )
            .await
        }
    });
    futures::future::join_all(creates).await;
    wait_until(TIMEOUT, "a few passes", || async {
        cloud.call_count("instance_states") >= 4
    })
    .await;
    let states = cloud.call_count("instance_states");
    // About five passes of 200 ms: one bulk call each for all 60 NotReady nodes (per-node checks would
    // make hundreds). The bounds leave room for a slow machine.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let calls = cloud.call_count("instance_states") - states;
    assert!((1..=8).contains(&calls), "{calls} bulk calls in ~5 passes");
    assert_eq!(cloud.call_count("instance_exists"), 0);
    assert_eq!(cloud.call_count("instance_shutdown"), 0);
    assert_eq!(
        h.nodes()
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .len(),
        60
    );
    h.stop().await.unwrap();
}

/// Two Ready nodes, so that deleting one more node stays within the deletion guard.
async fn create_ready_nodes(client: &kube::Client) {
    for name in ["ready-1", "ready-2"] {
        create_node(client, &initialized_node(name, "True", vec![])).await;
    }
}

/// The fake cloud's bulk state call reports every instance gone.
fn every_instance_missing() -> FaultSpec {
    FaultSpec {
        error_rate: 1.0,
        kind: FaultKind::NotFound,
        ..FaultSpec::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_an_instance_missing_from_one_lookup_costs_no_node() {
    let (h, cloud) = start(test_config(), &["blink-1", "ready-1", "ready-2"]).await;
    // The first lookup does not list the instance; the second look of the same pass does.
    cloud
        .set_fault("instance_states", every_instance_missing().for_calls(1))
        .unwrap();
    create_ready_nodes(&h.client).await;
    create_node(&h.client, &initialized_node("blink-1", "Unknown", vec![])).await;
    wait_until(TIMEOUT, "a few passes", || async {
        cloud.call_count("instance_states") >= 5
    })
    .await;
    assert!(
        get_node(&h.client, "blink-1").await.is_some(),
        "one lookup that did not find the instance deleted the node"
    );

    // Missing from both looks: deleted.
    cloud
        .set_fault("instance_states", every_instance_missing())
        .unwrap();
    wait_until(TIMEOUT, "blink-1 deleted", || async {
        get_node(&h.client, "blink-1").await.is_none()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_a_node_younger_than_the_grace_period_is_never_deleted() {
    let grace = Duration::from_secs(4);
    let config = ControllerConfig {
        instance_exists_grace_period: grace,
        ..test_config()
    };
    // The cloud does not list the new node's instance.
    let (h, cloud) = start(config, &["fresh-1", "ready-1", "ready-2"]).await;
    cloud
        .set_fault("instance_states", every_instance_missing())
        .unwrap();
    create_ready_nodes(&h.client).await;
    create_node(&h.client, &initialized_node("fresh-1", "Unknown", vec![])).await;
    let created = std::time::Instant::now();
    wait_until(TIMEOUT, "ten passes", || async {
        cloud.call_count("instance_states") >= 10
    })
    .await;
    assert!(
        created.elapsed() < grace,
        "the passes took too long to test the grace"
    );
    assert!(
        get_node(&h.client, "fresh-1").await.is_some(),
        "a node within the grace period was deleted"
    );
    wait_until(
        TIMEOUT,
        "fresh-1 deleted once the grace is over",
        || async { get_node(&h.client, "fresh-1").await.is_none() },
    )
    .await;
    // creationTimestamp has whole seconds: the node may look up to a second older than it is.
    assert!(created.elapsed() + Duration::from_secs(1) >= grace);
}
