//! `--cloud-call-timeout` seen through the daemon's HTTPS health endpoint: a hanging instance lookup of the
//! lifecycle controller fails its `/healthz` check with the operation, deletes no node, and the check
//! recovers once the cloud answers; a cloud call that blocks the runtime's only thread is reported as hung
//! while it blocks, because the endpoint runs on a thread of its own.

use std::sync::Arc;
use std::time::Duration;

use ccm_app::leader::LeaderStatus;
use ccm_app::serving::certificates::ServerTls;
use ccm_app::serving::health::HealthChecks;
use ccm_app::serving::{self, ServingState};
use cloud_controllers::cloud_calls::CloudCalls;
use cloud_controllers::{
    ControllerConfig, ControllerContext, ControllerMetrics, ControllerName, HealthRegistry,
    run_controllers,
};
use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use provider_fake::{FakeCloud, FakeConfig, FaultKind, FaultSpec, InstanceConfig};
use test_apiserver::TestApiServer;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(15);

/// Serves the health checks of `health` over HTTPS on a free loopback port; returns the URL and the guard
/// that stops the endpoint.
async fn serve(health: HealthRegistry) -> (String, tokio_util::sync::DropGuard) {
    let state = ServingState {
        health: HealthChecks::new(health, LeaderStatus::disabled()),
        metrics: Arc::new(prometheus_client::registry::Registry::default()),
        auth: None,
        configz: serde_json::Value::Null,
    };
    let tls = ServerTls::self_signed("127.0.0.1".parse().unwrap()).unwrap();
    let listener = serving::bind("127.0.0.1:0".parse().unwrap(), false, false)
        .await
        .unwrap();
    let address = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    serving::spawn(
        listener,
        Arc::new(tls),
        0,
        serving::router(Arc::new(state), false),
        stop.clone(),
    )
    .unwrap();
    (format!("https://{address}"), stop.drop_guard())
}

/// `GET url+path` (the endpoint's certificate is self-signed): status and body.
async fn get(url: &str, path: &str) -> (u16, String) {
    let mut config = kube::Config::new(url.parse().unwrap());
    config.accept_invalid_certs = true;
    config.default_retry = false;
    let client = kube::Client::try_from(config).unwrap();
    let request = http::Request::get(path)
        .body(kube::client::Body::empty())
        .unwrap();
    let response = client.send(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = response.into_body().collect_bytes().await.unwrap();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

/// Polls `check` every 50 ms until it holds; panics naming `what` after [`WAIT`].
async fn wait_until<F: std::future::Future<Output = bool>>(
    what: &str,
    mut check: impl FnMut() -> F,
) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// An initialized node with the given `Ready` status.
async fn create_node(client: &kube::Client, name: &str, ready: &str) {
    let api: Api<Node> = Api::all(client.clone());
    let mut node = Node::default();
    node.metadata.name = Some(name.to_string());
    node.spec = Some(NodeSpec {
        provider_id: Some(format!("fake://{name}")),
        ..NodeSpec::default()
    });
    api.create(&PostParams::default(), &node).await.unwrap();
    let status = NodeStatus {
        conditions: Some(vec![NodeCondition {
            type_: "Ready".to_string(),
            status: ready.to_string(),
            ..NodeCondition::default()
        }]),
        ..NodeStatus::default()
    };
    let patch = serde_json::json!({ "status": status });
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_instance_lookup_fails_healthz_and_deletes_no_node() {
    let server = TestApiServer::builder().start().await.unwrap();
    let client = server.client().unwrap();
    let fake = FakeConfig {
        instances: ["keep-1", "keep-2", "gone-1"]
            .into_iter()
            .map(InstanceConfig::named)
            .collect(),
        ..FakeConfig::default()
    };
    let cloud = Arc::new(FakeCloud::new(fake).unwrap());
    let control = cloud.handle();
    for (name, ready) in [
        ("keep-1", "True"),
        ("keep-2", "True"),
        ("gone-1", "Unknown"),
    ] {
        create_node(&client, name, ready).await;
    }
    // The instance is gone, but the cloud does not answer: the node must stay.
    control.terminate_instance("gone-1").unwrap();
    control
        .set_fault("instance_states", FaultSpec::errors(1.0, FaultKind::Hang))
        .unwrap();

    let health = HealthRegistry::new();
    let (url, _stop) = serve(health.clone()).await;
    let ctx = ControllerContext {
        client: client.clone(),
        event_client: server.client().unwrap(),
        cloud,
        config: Arc::new(ControllerConfig {
            node_monitor_period: cloud_controllers::Period::new(Duration::from_millis(100))
                .unwrap(),
            cloud_call_timeout: cloud_controllers::CloudCallTimeout::new(Duration::from_millis(
                300,
            ))
            .unwrap(),
            ..ControllerConfig::default()
        }),
        metrics: ControllerMetrics::default(),
        health,
        identity: "test-host_0000".to_string(),
    };
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    let controllers = tokio::spawn(async move {
        run_controllers(ctx, &[ControllerName::CloudNodeLifecycle], token).await
    });

    // Every pass's lookup is abandoned after the timeout and the next pass asks again.
    wait_until("three lifecycle passes", || async {
        control.call_count("instance_states") >= 3
    })
    .await;
    let (status, body) = get(&url, "/healthz/cloud-node-lifecycle-controller").await;
    assert_eq!(status, 500, "{body}");
    assert!(
        body.starts_with(
            "internal server error: cloud call instance_states timed out after 300ms at "
        ) && body.contains("no cloud call has succeeded since"),
        "{body}"
    );
    let (status, body) = get(&url, "/healthz?verbose").await;
    assert_eq!(status, 500);
    assert!(
        body.contains("[-]cloud-node-lifecycle-controller failed: reason withheld"),
        "{body}"
    );
    let nodes: Api<Node> = Api::all(client.clone());
    assert!(nodes.get_opt("gone-1").await.unwrap().is_some());

    // The cloud answers again: the node of the gone instance is deleted and the check passes.
    control.clear_faults();
    wait_until("gone-1 deleted", || async {
        nodes.get_opt("gone-1").await.unwrap().is_none()
    })
    .await;
    wait_until("/healthz passing", || async {
        get(&url, "/healthz").await == (200, "ok".to_string())
    })
    .await;
    assert!(nodes.get_opt("keep-1").await.unwrap().is_some());
    shutdown.cancel();
    controllers.await.unwrap().unwrap();
}

/// The only thread of this test's runtime is blocked by a cloud call that does not yield: the endpoint
/// still answers, from its own thread, that the call is hung.
#[tokio::test]
async fn a_call_blocking_the_runtime_is_reported_while_it_blocks() {
    let health = HealthRegistry::new();
    let calls = Arc::new(CloudCalls::new(
        "cloud-node-controller",
        Duration::from_millis(200),
        ControllerMetrics::default(),
    ));
    health.watch_cloud_calls("cloud-node-controller", calls.clone());
    health.register("cloud-node-controller");
    let (url, _stop) = serve(health).await;

    let asker = {
        let url = url.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(1700));
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(get(&url, "/healthz/cloud-node-controller"))
        })
    };
    let answer = calls
        .run("instance_metadata_bulk", async {
            std::thread::sleep(Duration::from_millis(2700));
            Ok(())
        })
        .await;
    assert!(answer.is_ok(), "the call answered in the end");
    let (status, body) = asker.join().unwrap();
    assert_eq!(status, 500, "{body}");
    assert!(
        body.starts_with(
            "internal server error: cloud call instance_metadata_bulk has been in flight for "
        ) && body
            .contains("longer than --cloud-call-timeout (200ms): the worker making it is hung"),
        "{body}"
    );
    // It answered: the check passes again.
    assert_eq!(
        get(&url, "/healthz/cloud-node-controller").await,
        (200, "ok".to_string())
    );
}
