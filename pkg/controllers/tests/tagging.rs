//! tagging-controller against the in-memory API server and the fake cloud: nodes' instances get the tags
//! and the nodes the checksum label, deleted nodes' instances lose them, tagged nodes are not tagged again,
//! failures are retried with backoff and given up after nine retries, batching and the rate limit, and bad
//! flags refused at start.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use cloud_controllers::tagging::tags_checksum;
use cloud_controllers::{ControllerConfig, ControllerName, ControllersError, TaggingConfig};
use common::*;
use k8s_openapi::api::core::v1::{Event, Node, NodeSpec};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use provider_fake::{FakeConfig, FaultKind, FaultSpec, InstanceConfig, TAGGED_LABEL};

const TIMEOUT: Duration = Duration::from_secs(15);

fn tags() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("team".to_string(), "ml".to_string()),
        ("env".to_string(), "prod".to_string()),
    ])
}

fn config(tagging: TaggingConfig) -> ControllerConfig {
    ControllerConfig {
        tagging,
        ..test_config()
    }
}

fn tagging() -> TaggingConfig {
    TaggingConfig {
        tags: tags(),
        resources: vec!["instance".to_string()],
        ..TaggingConfig::default()
    }
}

fn cloud_with(instances: &[&str]) -> FakeConfig {
    FakeConfig {
        auto_discover: false,
        instances: instances
            .iter()
            .map(|n| InstanceConfig::named(*n))
            .collect(),
        ..FakeConfig::default()
    }
}

/// A registered node with the provider ID of the fake instance `instance`, if any.
fn node(name: &str, instance: Option<&str>) -> Node {
    let mut node = Node::default();
    node.metadata.name = Some(name.to_string());
    node.spec = Some(NodeSpec {
        provider_id: instance.map(|i| format!("fake://{i}")),
        ..NodeSpec::default()
    });
    node
}

async fn create(h: &Harness, node: &Node) {
    h.nodes()
        .create(&PostParams::default(), node)
        .await
        .expect("create node");
}

async fn label_of(h: &Harness, name: &str) -> Option<String> {
    let node = h.nodes().get(name).await.ok()?;
    node.metadata.labels?.get(TAGGED_LABEL).cloned()
}

fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tagging_tags_instances_labels_nodes_and_untags_deleted_ones() {
    let (h, cloud) = Harness::with_fake(
        cloud_with(&["a", "b", "c"]),
        config(tagging()),
        &[ControllerName::Tagging],
    )
    .await;
    create(&h, &node("node-a", Some("a"))).await;
    create(&h, &node("node-b", Some("b"))).await;
    // No provider ID yet: not tagged until it has one.
    create(&h, &node("node-c", None)).await;
    let checksum = tags_checksum(&tags());
    for (name, instance) in [("node-a", "a"), ("node-b", "b")] {
        wait_until(
            TIMEOUT,
            "the node's instance is tagged and the node labelled",
            || async {
                cloud.instance(instance).unwrap().tags == tags()
                    && label_of(&h, name).await.as_deref() == Some(checksum.as_str())
            },
        )
        .await;
    }
    assert!(cloud.instance("c").unwrap().tags.is_empty());
    assert_eq!(label_of(&h, "node-c").await, None);

    h.nodes()
        .patch(
            "node-c",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"providerID": "fake://c"}})),
        )
        .await
        .unwrap();
    wait_until(
        TIMEOUT,
        "node-c's instance is tagged once it has a provider ID",
        || async { cloud.instance("c").unwrap().tags == tags() },
    )
    .await;

    // Deleting a node takes the tags off its instance.
    let calls = cloud.call_count("tag_nodes");
    h.nodes()
        .delete("node-b", &DeleteParams::default())
        .await
        .unwrap();
    wait_until(TIMEOUT, "node-b's instance loses the tags", || async {
        cloud.instance("b").unwrap().tags.is_empty()
    })
    .await;
    assert_eq!(cloud.instance("a").unwrap().tags, tags());
    // The labelled nodes were not tagged again.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(cloud.call_count("tag_nodes"), calls);
    let text = h.metrics_text();
    assert_eq!(
        metric(
            &text,
            "tagging_controller_inital_node_tagging_delay_seconds_count"
        ),
        3.0,
        "{text}"
    );
    assert!(
        text.contains("workqueue_adds_total{name=\"tagging-controller\"}"),
        "{text}"
    );
    h.stop().await.unwrap();
}

/// Starts the tagging controller with `config` on a fresh API server holding `node-a` (instance `a`)
/// labelled with the checksum of `labelled_tags`.
async fn with_labelled_node(
    labelled_tags: &BTreeMap<String, String>,
    tagging: TaggingConfig,
) -> (Harness, provider_fake::FakeControl) {
    let (cloud, control) = fake_cloud(cloud_with(&["a"]));
    let server = start_server().await;
    let mut labelled = node("node-a", Some("a"));
    labelled.metadata.labels = Some(BTreeMap::from([(
        TAGGED_LABEL.to_string(),
        tags_checksum(labelled_tags),
    )]));
    Api::<Node>::all(server.client().unwrap())
        .create(&PostParams::default(), &labelled)
        .await
        .unwrap();
    let h = Harness::start(server, cloud, config(tagging), &[ControllerName::Tagging]).await;
    (h, control)
}

/// A restarted controller (another leader) finds the nodes labelled and calls the cloud for none of them;
/// once other tags are configured, the label no longer matches and the node is tagged again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tagging_labelled_nodes_are_tagged_again_only_for_other_tags() {
    let (h, control) = with_labelled_node(&tags(), tagging()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(control.call_count("tag_nodes"), 0);
    h.stop().await.unwrap();

    let mut more = tagging();
    more.tags.insert("cost-center".into(), "42".into());
    let wanted = more.tags.clone();
    let (h, control) = with_labelled_node(&tags(), more).await;
    wait_until(TIMEOUT, "tagged with the new tags", || async {
        control.instance("a").unwrap().tags == wanted
            && label_of(&h, "node-a").await == Some(tags_checksum(&wanted))
    })
    .await;
    h.stop().await.unwrap();
}

/// Failures are retried with growing delays, at most nine times, each counted, with a Warning event; a later
/// change of the node queues it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tagging_failures_are_retried_nine_times_then_given_up() {
    let (h, cloud) = Harness::with_fake(
        cloud_with(&["a"]),
        config(tagging()),
        &[ControllerName::Tagging],
    )
    .await;
    cloud
        .set_fault(
            "tag_nodes",
            FaultSpec {
                error_rate: 1.0,
                kind: FaultKind::Provider,
                ..FaultSpec::default()
            },
        )
        .unwrap();
    create(&h, &node("node-a", Some("a"))).await;
    wait_until(Duration::from_secs(30), "ten attempts, then given up", || async {
        metric(
            &h.metrics_text(),
            "cloudprovider_aws_tagging_controller_work_item_errors_total{error_type=\"errors_after_retries_exhausted\",instance_id=\"a\"}",
        ) == 1.0
    })
    .await;
    let text = h.metrics_text();
    assert_eq!(
        metric(
            &text,
            "cloudprovider_aws_tagging_controller_work_item_errors_total{error_type=\"total_errors\",instance_id=\"a\"}"
        ),
        9.0,
        "{text}"
    );
    assert_eq!(cloud.call_count("tag_nodes"), 10);
    let events: Api<Event> = Api::namespaced(h.client.clone(), "default");
    let warned = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .any(|e| e.reason.as_deref() == Some("FailedTagging"));
    assert!(warned);

    cloud.clear_faults();
    h.nodes()
        .patch(
            "node-a",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {"touched": "yes"}}})),
        )
        .await
        .unwrap();
    wait_until(TIMEOUT, "tagged after the node changed", || async {
        cloud.instance("a").unwrap().tags == tags()
    })
    .await;
    h.stop().await.unwrap();
}

/// An instance the cloud does not know yet (a young node) is retried until it appears.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tagging_a_missing_instance_of_a_young_node_is_retried() {
    let (h, cloud) = Harness::with_fake(
        cloud_with(&["a"]),
        config(tagging()),
        &[ControllerName::Tagging],
    )
    .await;
    cloud
        .set_fault(
            "tag_nodes",
            FaultSpec {
                error_rate: 1.0,
                kind: FaultKind::NotFound,
                calls: Some(2),
                ..FaultSpec::default()
            },
        )
        .unwrap();
    create(&h, &node("node-a", Some("a"))).await;
    wait_until(TIMEOUT, "tagged on the third attempt", || async {
        cloud.instance("a").unwrap().tags == tags()
    })
    .await;
    assert_eq!(cloud.call_count("tag_nodes"), 3);
    h.stop().await.unwrap();
}

/// With batching the nodes go to the cloud in few calls; with a rate limit, no faster than the rate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tagging_batches_and_rate_limit() {
    let names: Vec<String> = (0..20).map(|i| format!("i{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let batched = TaggingConfig {
        batching: true,
        ..tagging()
    };
    let (cloud, control) = fake_cloud(cloud_with(&refs));
    let server = start_server().await;
    let client = server.client().unwrap();
    for name in &names {
        Api::<Node>::all(client.clone())
            .create(&PostParams::default(), &node(name, Some(name)))
            .await
            .unwrap();
    }
    let h = Harness::start(server, cloud, config(batched), &[ControllerName::Tagging]).await;
    wait_until(TIMEOUT, "every instance tagged", || async {
        control.instances().iter().all(|i| i.tags == tags())
    })
    .await;
    assert!(
        control.call_count("tag_nodes") <= 2,
        "{} calls for 20 queued nodes",
        control.call_count("tag_nodes")
    );
    h.stop().await.unwrap();

    // Five calls a second, one at a time: six nodes take at least a second.
    let limited = TaggingConfig {
        rate_limit: 5.0,
        burst_limit: 1,
        ..tagging()
    };
    let started = Instant::now();
    let (h, cloud) = Harness::with_fake(
        cloud_with(&refs[..6]),
        config(limited),
        &[ControllerName::Tagging],
    )
    .await;
    for name in &refs[..6] {
        create(&h, &node(name, Some(name))).await;
    }
    wait_until(TIMEOUT, "six instances tagged", || async {
        cloud.instances().iter().all(|i| i.tags == tags())
    })
    .await;
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    h.stop().await.unwrap();
}

/// Flags that cannot work stop the controllers at start, with upstream's words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tagging_bad_flags_stop_the_start() {
    let bad = TaggingConfig {
        tags: BTreeMap::new(),
        resources: vec!["volume".to_string()],
        ..TaggingConfig::default()
    };
    let (h, _cloud) =
        Harness::with_fake(cloud_with(&[]), config(bad), &[ControllerName::Tagging]).await;
    let err = h.stop().await.unwrap_err();
    assert!(matches!(err, ControllersError::Config(_)), "{err}");
    let message = err.to_string();
    assert!(
        message.contains("Tagging controller inputs are not properly set"),
        "{message}"
    );
    assert!(message.contains("--tags must not be empty"), "{message}");
    assert!(
        message.contains("volume is not a supported resource"),
        "{message}"
    );
}
