//! service-lb-controller against the in-memory API server and the fake cloud: finalizer ordering, status
//! writes, cleanup on deletion / type change / UID change, loadBalancerClass, Retry delays and node-set
//! changes.

mod service_harness;

use std::time::Duration;

use cloud_controllers::ControllerName;
use kube::api::{DeleteParams, Patch, PatchParams};
use provider_fake::{FakeConfig, FaultKind, FaultSpec};
use serde_json::json;
use service_harness::{
    Env, has_lb_finalizer, ingress_ips, lb_service, ready_node, test_config, wait_until,
};

const WAIT: Duration = Duration::from_secs(15);

async fn started(nodes: &[(&str, &str)]) -> Env {
    let mut env = Env::new(FakeConfig::default()).await;
    for (name, ip) in nodes {
        env.create_node(&ready_node(name, ip)).await;
    }
    env.run_controllers(test_config(), &[ControllerName::ServiceLb]);
    env
}

async fn wait_ingress(env: &Env, namespace: &str, name: &str) -> Vec<String> {
    wait_until(WAIT, &format!("ingress on {namespace}/{name}"), || async {
        env.get_service(namespace, name)
            .await
            .is_some_and(|s| !ingress_ips(&s).is_empty())
    })
    .await;
    ingress_ips(
        &env.get_service(namespace, name)
            .await
            .expect("service exists"),
    )
}

async fn wait_event(env: &Env, namespace: &str, name: &str, reason: &str) {
    wait_until(WAIT, &format!("{reason} event on {name}"), || async {
        !env.events(namespace, name, reason).await.is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalizer_is_added_before_the_cloud_call_and_status_after() {
    let mut env = Env::new(FakeConfig::default()).await;
    env.create_node(&ready_node("n1", "10.0.0.1")).await;
    env.fake
        .set_fault(
            "ensure_load_balancer",
            FaultSpec::errors(1.0, FaultKind::Provider),
        )
        .unwrap();
    env.run_controllers(test_config(), &[ControllerName::ServiceLb]);
    let created = env.create_service(&lb_service("default", "web")).await;

    wait_until(WAIT, "an ensure attempt", || async {
        env.fake.call_count("ensure_load_balancer") >= 1
    })
    .await;
    // Every ensure fails, so the finalizer can only have been written before the cloud call.
    let svc = env.get_service("default", "web").await.unwrap();
    assert!(
        has_lb_finalizer(&svc),
        "finalizer missing while the cloud is being called"
    );
    assert!(ingress_ips(&svc).is_empty());
    assert!(env.fake.load_balancers().is_empty());
    wait_event(&env, "default", "web", "SyncLoadBalancerFailed").await;
    let failed = env.events("default", "web", "SyncLoadBalancerFailed").await;
    assert!(
        failed[0]
            .note
            .as_deref()
            .unwrap_or_default()
            .starts_with("Error syncing load balancer: "),
        "{failed:?}"
    );

    // The cloud recovers: the retry (after the 5 s backoff) ensures it and writes the status.
    env.fake.clear_faults();
    let ips = wait_ingress(&env, "default", "web").await;
    let lbs = env.fake.load_balancers();
    assert_eq!(lbs.len(), 1);
    assert_eq!(ips, vec![lbs[0].ip.clone()]);
    assert_eq!(lbs[0].service_uid, created.metadata.uid.clone().unwrap());
    assert_eq!(*lbs[0].nodes, ["n1".to_string()]);
    wait_event(&env, "default", "web", "EnsuringLoadBalancer").await;
    wait_event(&env, "default", "web", "EnsuredLoadBalancer").await;
    env.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_is_not_written_when_the_ingress_is_unchanged() {
    let mut env = started(&[("n1", "10.0.0.1")]).await;
    env.create_service(&lb_service("default", "web")).await;
    wait_ingress(&env, "default", "web").await;
    let status_patches = env.request_count("patch", "services", "status");
    assert_eq!(
        status_patches, 2,
        "one finalizer patch and one status patch"
    );

    // An annotation change re-syncs the load balancer; the cloud answers with the same ingress.
    let annotated = env
        .services("default")
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"example.com/tier": "gold"}}})),
        )
        .await
        .unwrap();
    wait_until(WAIT, "a second ensure", || async {
        env.fake
            .load_balancers()
            .first()
            .is_some_and(|lb| lb.ensure_count >= 2)
    })
    .await;
    // A status write would follow the ensure within milliseconds.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        env.request_count("patch", "services", "status"),
        status_patches
    );
    let now = env.get_service("default", "web").await.unwrap();
    assert_eq!(
        now.metadata.resource_version, annotated.metadata.resource_version,
        "the service was written although nothing changed"
    );
    env.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn type_change_deletes_the_load_balancer() {
    let mut env = started(&[("n1", "10.0.0.1")]).await;
    env.create_service(&lb_service("default", "web")).await;
    wait_ingress(&env, "default", "web").await;
    assert_eq!(env.fake.load_balancers().len(), 1);
    let status_patches = env.request_count("patch", "services", "status");

    env.services("default")
        .patch(
            "web",
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
    wait_until(
        WAIT,
        "load balancer deleted, finalizer and status cleared",
        || async {
            let svc = env.get_service("default", "web").await.unwrap();
            env.fake.load_balancers().is_empty()
                && !has_lb_finalizer(&svc)
                && ingress_ips(&svc).is_empty()
        },
    )
    .await;
    wait_event(&env, "default", "web", "DeletingLoadBalancer").await;
    wait_event(&env, "default", "web", "DeletedLoadBalancer").await;
    // Finalizer and ingress went in one write, and the cleanup did not run twice.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        env.request_count("patch", "services", "status"),
        status_patches + 1
    );
    assert_eq!(env.fake.call_count("ensure_load_balancer_deleted"), 1);
    env.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_service_deletes_the_load_balancer_then_releases_it() {
    let mut env = started(&[("n1", "10.0.0.1")]).await;
    env.create_service(&lb_service("default", "web")).await;
    wait_ingress(&env, "default", "web").await;

    env.services("default")
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    wait_until(WAIT, "service gone", || async {
        env.get_service("default", "web").await.is_none()
    })
    .await;
    assert!(
        env.fake.load_balancers().is_empty(),
        "the service went before its load balancer"
    );
    assert!(env.fake.call_count("ensure_load_balancer_deleted") >= 1);
    env.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recreated_service_gets_the_old_load_balancer_cleaned_up() {
    let mut env = started(&[("n1", "10.0.0.1")]).await;
    // Slow ensures: the controller is busy with the first Service while it is replaced.
    env.fake
        .set_fault(
            "ensure_load_balancer",
            FaultSpec::latency(Duration::from_millis(800)),
        )
        .unwrap();
    let first = env.create_service(&lb_service("default", "web")).await;
    wait_until(WAIT, "the first ensure to start", || async {
        env.fake.call_count("ensure_load_balancer") >= 1
    })
    .await;
    // Force the Service away without the controller's cooperation, and create a new one in its place.
    env.services("default")
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    env.services("default")
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    wait_until(WAIT, "first service gone", || async {
        env.get_service("default", "web").await.is_none()
    })
    .await;
    let second = env.create_service(&lb_service("default", "web")).await;
    assert_ne!(first.metadata.uid, second.metadata.uid);

    let new_uid = second.metadata.uid.clone().unwrap();
    wait_until(
        WAIT,
        "only the new service's load balancer left",
        || async {
            let lbs = env.fake.load_balancers();
            lbs.len() == 1 && lbs[0].service_uid == new_uid
        },
    )
    .await;
    let ip = env.fake.load_balancers()[0].ip.clone();
    wait_until(WAIT, "the new load balancer's ingress", || async {
        env.get_service("default", "web")
            .await
            .is_some_and(|s| ingress_ips(&s) == vec![ip.clone()])
    })
    .await;
    env.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_with_a_load_balancer_class_are_ignored() {
    let mut env = started(&[("n1", "10.0.0.1")]).await;
    let mut classed = lb_service("default", "other");
    classed.spec.as_mut().unwrap().load_balancer_class = Some("example.com/other-lb".into());
    env.create_service(&classed).await;
    let plain = env.create_service(&lb_service("default", "plain")).await;
    wait_ingress(&env, "default", "plain").await;

    let other = env.get_service("default", "other").await.unwrap();
    assert!(!has_lb_finalizer(&other));
    assert!(ingress_ips(&other).is_empty());
    let lbs = env.fake.load_balancers();
    assert_eq!(lbs.len(), 1);
    assert_eq!(lbs[0].service_uid, plain.metadata.uid.unwrap());
    assert!(
        env.events("default", "other", "EnsuringLoadBalancer")
            .await
            .is_empty()
    );
    env.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_error_is_retried_after_its_own_delay() {
    let mut env = started(&[("n1", "10.0.0.1")]).await;
    env.fake
        .set_fault(
            "ensure_load_balancer",
            FaultSpec::errors(1.0, FaultKind::Retry).with_retry_after(Duration::from_millis(1500)),
        )
        .unwrap();
    env.create_service(&lb_service("default", "web")).await;
    wait_until(WAIT, "the first ensure", || async {
        env.fake.call_count("ensure_load_balancer") >= 1
    })
    .await;
    let failed_at = tokio::time::Instant::now();
    env.fake.clear_faults();
    wait_until(WAIT, "the second ensure", || async {
        env.fake.call_count("ensure_load_balancer") >= 2
    })
    .await;
    let waited = failed_at.elapsed();
    // 1.5 s asked for; the generic backoff would have waited 5 s.
    assert!(
        waited >= Duration::from_millis(1200) && waited < Duration::from_millis(4000),
        "retried after {waited:?}"
    );
    wait_ingress(&env, "default", "web").await;
    assert!(
        env.events("default", "web", "SyncLoadBalancerFailed")
            .await
            .is_empty()
    );
    env.stop().await.unwrap();
}

async fn wait_lb_nodes(env: &Env, expected: &[&str]) {
    let expected: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
    wait_until(
        WAIT,
        &format!("every load balancer on {expected:?}"),
        || async {
            let lbs = env.fake.load_balancers();
            lbs.len() == 2 && lbs.iter().all(|lb| *lb.nodes == *expected)
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_set_changes_update_every_load_balancer() {
    let mut env = Env::new(FakeConfig::default()).await;
    env.create_node(&ready_node("n1", "10.0.0.1")).await;
    // Readiness is not a filter: a NotReady node stays a backend.
    let mut n2 = ready_node("n2", "10.0.0.2");
    n2.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = "False".into();
    env.create_node(&n2).await;
    // An exclusion label whose value does not parse excludes.
    let mut n3 = ready_node("n3", "10.0.0.3");
    n3.metadata.labels.as_mut().unwrap().insert(
        "node.kubernetes.io/exclude-from-external-load-balancers".into(),
        "maybe".into(),
    );
    env.create_node(&n3).await;
    env.run_controllers(test_config(), &[ControllerName::ServiceLb]);
    env.create_service(&lb_service("default", "a")).await;
    env.create_service(&lb_service("default", "b")).await;
    wait_ingress(&env, "default", "a").await;
    wait_ingress(&env, "default", "b").await;
    wait_lb_nodes(&env, &["n1", "n2"]).await;

    let nodes = env.nodes();
    let patch = |body: serde_json::Value| Patch::Merge(body);
    nodes
        .patch(
            "n2",
            &PatchParams::default(),
            &patch(json!({"metadata": {"labels": {
                "node.kubernetes.io/exclude-from-external-load-balancers": "true"}}})),
        )
        .await
        .unwrap();
    wait_lb_nodes(&env, &["n1"]).await;
    wait_event(&env, "default", "a", "UpdatedLoadBalancer").await;
    wait_event(&env, "default", "b", "UpdatedLoadBalancer").await;

    // The autoscaler's taint is no trigger on its own (upstream's stable node set, KEP-3458)...
    nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &patch(json!({"spec": {"taints": [{
                "key": "ToBeDeletedByClusterAutoscaler", "value": "1700000000", "effect": "NoSchedule"}]}})),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        env.fake
            .load_balancers()
            .iter()
            .all(|lb| *lb.nodes == ["n1".to_string()]),
        "a taint alone re-targets nothing"
    );
    // ...but the next node-set change leaves the tainted node out.
    env.create_node(&ready_node("n5", "10.0.0.5")).await;
    wait_lb_nodes(&env, &["n5"]).await;
    nodes
        .patch(
            "n5",
            &PatchParams::default(),
            &patch(json!({"metadata": {"labels": {
                "node.kubernetes.io/exclude-from-external-load-balancers": "true"}}})),
        )
        .await
        .unwrap();
    wait_lb_nodes(&env, &[]).await;
    wait_event(&env, "default", "a", "UnAvailableLoadBalancer").await;

    nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &patch(json!({"spec": {"taints": null}})),
        )
        .await
        .unwrap();
    nodes
        .patch(
            "n2",
            &PatchParams::default(),
            &patch(json!({"metadata": {"labels": {
                "node.kubernetes.io/exclude-from-external-load-balancers": "false"}}})),
        )
        .await
        .unwrap();
    wait_lb_nodes(&env, &["n1", "n2"]).await;

    // A failing host update is reported and retried.
    env.fake
        .set_fault(
            "update_load_balancer",
            FaultSpec::errors(1.0, FaultKind::Provider),
        )
        .unwrap();
    env.create_node(&ready_node("n4", "10.0.0.4")).await;
    wait_event(&env, "default", "a", "UpdateLoadBalancerFailed").await;
    assert!(env.metrics.service_nodesync_error.get() >= 1);
    env.fake.clear_faults();
    wait_lb_nodes(&env, &["n1", "n2", "n4"]).await;
    env.stop().await.unwrap();
}
