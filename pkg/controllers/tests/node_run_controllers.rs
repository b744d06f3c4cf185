//! run_controllers: deterministic start order, a health check per started controller, controllers that
//! cannot run are skipped, one watch per resource type for the whole process, graceful shutdown.

mod common;

use std::time::Duration;

use cloud_controllers::{ControllerConfig, ControllerName};
use common::*;
use provider_fake::FakeConfig;

fn watches_by_resource(h: &Harness) -> std::collections::BTreeMap<String, usize> {
    let mut out = std::collections::BTreeMap::new();
    for r in h.controls.request_log() {
        if r.verb == "watch" {
            *out.entry(r.resource.clone()).or_insert(0) += 1;
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_run_controllers_starts_in_order_with_one_watch_per_resource() {
    // --configure-cloud-routes=false: the route controller is skipped; the tagging controller has its tags.
    let config = ControllerConfig {
        configure_cloud_routes: false,
        tagging: cloud_controllers::TaggingConfig {
            tags: [("team".to_string(), "ml".to_string())].into(),
            resources: vec!["instance".to_string()],
            ..Default::default()
        },
        ..test_config()
    };
    let (h, _cloud) = Harness::with_fake(
        FakeConfig::default(),
        config,
        &ControllerName::all().collect::<Vec<_>>(),
    )
    .await;
    wait_until(
        Duration::from_secs(10),
        "health checks registered",
        || async { h.health.checks().len() == 5 },
    )
    .await;
    let names: Vec<String> = h.health.checks().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "cloud-node-controller",
            "cloud-node-lifecycle-controller",
            "service-lb-controller",
            "pv-label-controller",
            "tagging-controller"
        ]
    );
    wait_until(Duration::from_secs(10), "three watches open", || async {
        h.controls.open_watches() == 3
    })
    .await;
    create_node(
        &h.client,
        &kubelet_node("rc-1", &[("InternalIP", "10.6.0.1")]),
    )
    .await;
    wait_until(Duration::from_secs(10), "rc-1 initialized", || async {
        get_node(&h.client, "rc-1")
            .await
            .is_some_and(|n| is_initialized(&n))
    })
    .await;
    let watches = watches_by_resource(&h);
    assert_eq!(watches.get("nodes"), Some(&1), "{watches:?}");
    assert_eq!(watches.get("services"), Some(&1), "{watches:?}");
    assert_eq!(watches.get("persistentvolumes"), Some(&1), "{watches:?}");
    assert!(h.health.all_ok());
    let controls = h.controls.clone();
    h.stop().await.unwrap();
    wait_until(Duration::from_secs(5), "watches closed", || async {
        controls.open_watches() == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_run_controllers_watches_only_what_the_enabled_controllers_need() {
    let (h, _cloud) = Harness::with_fake(
        FakeConfig::default(),
        test_config(),
        &[ControllerName::PvLabel],
    )
    .await;
    wait_until(Duration::from_secs(10), "one watch open", || async {
        h.controls.open_watches() == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let watches = watches_by_resource(&h);
    assert_eq!(watches.len(), 1, "{watches:?}");
    assert_eq!(watches.get("persistentvolumes"), Some(&1));
    let names: Vec<String> = h.health.checks().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["pv-label-controller"]);
    h.stop().await.unwrap();
}
