//! The service-lb-controller under faults: the fake cloud fails 30% of its load-balancer calls with added
//! latency, the API server fails some status writes, closes every watch and compacts its history while
//! Services are created, deleted and changed. In the end every LoadBalancer Service has exactly one load
//! balancer and its ingress, and no deleted Service left one behind.

mod service_harness;

use std::collections::BTreeMap;
use std::time::Duration;

use kube::api::{DeleteParams, Patch, PatchParams};
use provider_fake::{FakeConfig, FaultKind, FaultSpec};
use serde_json::json;
use service_harness::{
    Env, has_lb_finalizer, ingress_ips, lb_service, ready_node, test_config, wait_until,
};
use test_apiserver::FaultRule;

const SERVICES: usize = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_load_balancer_converges_despite_faults() {
    let mut env = Env::new(FakeConfig::default()).await;
    for i in 0..3 {
        env.create_node(&ready_node(&format!("n{i}"), &format!("10.0.0.{}", i + 1)))
            .await;
    }
    for op in [
        "ensure_load_balancer",
        "update_load_balancer",
        "ensure_load_balancer_deleted",
        "get_load_balancer",
    ] {
        env.fake
            .set_fault(
                op,
                FaultSpec::errors(0.3, FaultKind::Provider).with_latency(Duration::from_millis(20)),
            )
            .unwrap();
    }
    env.controls.fail(
        FaultRule::new(500)
            .verb("patch")
            .resource("services")
            .subresource("status")
            .rate(0.1),
    );
    let config = cloud_controllers::ControllerConfig {
        concurrent_service_syncs: std::num::NonZeroUsize::new(4).unwrap(),
        ..test_config()
    };
    env.run_service_controller(config, Duration::from_millis(100), Duration::from_secs(1))
        .await;

    // Watches are cut and history compacted over and over while the Services change.
    let controls = env.controls.clone();
    let disruptor = tokio::spawn(async move {
        for _ in 0..12 {
            tokio::time::sleep(Duration::from_millis(250)).await;
            controls.compact();
            controls.close_watches();
        }
    });

    for i in 0..SERVICES {
        env.create_service(&lb_service("default", &format!("svc-{i}")))
            .await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Delete a quarter of them, and turn a few into ClusterIP Services.
    for i in (0..SERVICES).step_by(4) {
        env.services("default")
            .delete(&format!("svc-{i}"), &DeleteParams::default())
            .await
            .unwrap();
    }
    for i in (1..SERVICES).step_by(8) {
        env.services("default")
            .patch(
                &format!("svc-{i}"),
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {
                    "type": "ClusterIP",
                    "externalTrafficPolicy": null,
                    "allocateLoadBalancerNodePorts": null,
                    "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 80}]
                }})),
            )
            .await
            .unwrap();
    }
    // A node change in the middle of it all.
    env.create_node(&ready_node("n3", "10.0.0.4")).await;
    disruptor.await.unwrap();

    let deleted: Vec<usize> = (0..SERVICES).step_by(4).collect();
    let demoted: Vec<usize> = (1..SERVICES).step_by(8).collect();
    let kept: Vec<usize> = (0..SERVICES)
        .filter(|i| !deleted.contains(i) && !demoted.contains(i))
        .collect();

    wait_until(
        Duration::from_secs(60),
        "the cloud to match the Services",
        || async {
            let lbs = env.fake.load_balancers();
            if lbs.len() != kept.len() {
                return false;
            }
            for i in &kept {
                let Some(svc) = env.get_service("default", &format!("svc-{i}")).await else {
                    return false;
                };
                let uid = svc.metadata.uid.clone().unwrap_or_default();
                let Some(lb) = lbs.iter().find(|lb| lb.service_uid == uid) else {
                    return false;
                };
                if ingress_ips(&svc) != vec![lb.ip.clone()] || !has_lb_finalizer(&svc) {
                    return false;
                }
                if lb.nodes.len() != 4 {
                    return false;
                }
            }
            for i in &deleted {
                if env
                    .get_service("default", &format!("svc-{i}"))
                    .await
                    .is_some()
                {
                    return false;
                }
            }
            for i in &demoted {
                let svc = env
                    .get_service("default", &format!("svc-{i}"))
                    .await
                    .unwrap();
                if has_lb_finalizer(&svc) || !ingress_ips(&svc).is_empty() {
                    return false;
                }
            }
            true
        },
    )
    .await;

    // No Service ever got two load balancers, and no two load balancers share an IP.
    let lbs = env.fake.load_balancers();
    let mut per_service: BTreeMap<String, usize> = BTreeMap::new();
    for lb in &lbs {
        *per_service.entry(lb.service.clone()).or_default() += 1;
    }
    assert!(per_service.values().all(|n| *n == 1), "{per_service:?}");
    let mut ips: Vec<&str> = lbs.iter().map(|lb| lb.ip.as_str()).collect();
    ips.sort();
    ips.dedup();
    assert_eq!(ips.len(), lbs.len());
    assert!(env.fake.call_count("ensure_load_balancer") > kept.len() as u64);
    // The watches really were cut: the informer had to list again after the compactions.
    assert!(env.request_count("list", "services", "") >= 2);
    env.stop().await.unwrap();
}
