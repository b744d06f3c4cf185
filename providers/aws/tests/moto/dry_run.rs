//! `--dry-run` with the AWS provider, through the daemon's own dry-run path (`ccm_app::app::run_dry_run`)
//! against the in-memory API server and moto: a classic ELB left by upstream's CCM is in sync, and a
//! Service without a load balancer is reported with the call that would create it, which moto never sees.

use cloud_provider::{Registry, default_load_balancer_name};
use k8s_openapi::api::core::v1::{Node, Service};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use test_apiserver::TestApiServer;

use std::sync::Arc;

use crate::common::{World, elb_classic, lb_service, nodes_for, provider};
use crate::takeover::{UpstreamClassic, seed_upstream_classic, upstream_cloud_config};

/// Creates `service` in the API server; returns it with the UID the API server gave it.
async fn create_service(client: &kube::Client, service: &Service) -> Service {
    let api: Api<Service> = Api::namespaced(client.clone(), "default");
    let mut fresh = service.clone();
    fresh.metadata.uid = None;
    api.create(&PostParams::default(), &fresh).await.unwrap()
}

/// A dry run of the service controller with upstream's cloud config of `world` (the provider built with
/// the test's credentials, registered as `aws`).
async fn dry_run(server: &TestApiServer, world: &World) -> ccm_app::dry_run::DryRunReport {
    let cloud = provider(&upstream_cloud_config(world)).await;
    let mut registry = Registry::new();
    registry
        .register_fn("aws", move |_config| {
            Ok(cloud.clone() as Arc<dyn cloud_provider::CloudProvider>)
        })
        .unwrap();
    let args = [
        "cloud-controller-manager".to_string(),
        "--cloud-provider=aws".to_string(),
        format!("--kubeconfig={}", server.kubeconfig_path().display()),
        "--controllers=service-lb-controller".to_string(),
    ];
    ccm_app::dry_run_with_args(registry, args).await.unwrap()
}

#[tokio::test]
async fn a_dry_run_adopts_upstream_load_balancers_and_creates_nothing() {
    let world = World::new("dryrun").await;
    let (a, b) = (world.instance(0).await, world.instance(1).await);
    let server = TestApiServer::builder()
        .not_ready_taint(false)
        .start()
        .await
        .unwrap();
    let client = server.client().unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    for node in nodes_for(&[a.clone(), b.clone()]) {
        nodes.create(&PostParams::default(), &node).await.unwrap();
    }

    // A Service whose classic ELB upstream's CCM made.
    let template = lb_service("plain", &[("http", 80, "TCP", 30080)], &[]);
    let plain = create_service(&client, &template).await;
    let dns = seed_upstream_classic(
        &world,
        &plain,
        &UpstreamClassic::plain(&world, 30080, "TCP:30080", vec![&a, &b]),
    )
    .await;
    upstream_status(&client, &dns).await;
    let report = dry_run(&server, &world).await;
    assert_eq!(report.exit_code(), 0, "{}", report.table());
    assert_eq!(
        report.objects["service/default/plain"].status(),
        "in sync",
        "{}",
        report.table()
    );

    // A Service without a load balancer: the first call that would create one is reported, not made.
    let template = lb_service("missing", &[("http", 80, "TCP", 30081)], &[]);
    let missing = create_service(&client, &template).await;
    let report = dry_run(&server, &world).await;
    assert_eq!(report.exit_code(), 3, "{}", report.table());
    assert_eq!(report.objects["service/default/plain"].status(), "in sync");
    let changes = &report.objects["service/default/missing"].changes;
    assert!(
        changes.iter().any(|c| c.starts_with("cloud Create")),
        "{}",
        report.table()
    );
    let name = default_load_balancer_name(&missing);
    let described = elb_classic()
        .describe_load_balancers()
        .load_balancer_names(&name)
        .send()
        .await;
    assert!(described.is_err(), "moto has a load balancer {name}");
    let groups = world
        .ec2
        .describe_security_groups()
        .filters(crate::common::filter(
            "group-name",
            &[&format!("k8s-elb-{name}")],
        ))
        .send()
        .await
        .unwrap();
    assert!(
        groups.security_groups().is_empty(),
        "moto has a group for {name}"
    );
}

/// Gives `plain` the finalizer and ingress upstream's CCM left on it.
async fn upstream_status(client: &kube::Client, hostname: &str) {
    let api: Api<Service> = Api::namespaced(client.clone(), "default");
    let finalizer =
        json!({"metadata": {"finalizers": ["service.kubernetes.io/load-balancer-cleanup"]}});
    api.patch("plain", &PatchParams::default(), &Patch::Merge(&finalizer))
        .await
        .unwrap();
    let status = json!({"status": {"loadBalancer": {"ingress": [{"hostname": hostname}]}}});
    api.patch_status("plain", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}
