//! kube-rs `watcher`, `reflector` and `Controller` run unchanged against the in-process server,
//! including across closed watches and a compacted history.

mod common;

use std::future::ready;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use test_apiserver::TestApiServer;

fn node(name: &str, labels: serde_json::Value) -> Node {
    serde_json::from_value(
        json!({"apiVersion":"v1","kind":"Node","metadata":{"name":name,"labels":labels}}),
    )
    .unwrap()
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn names(store: &Store<Node>) -> Vec<String> {
    let mut v: Vec<String> = store.state().iter().map(|n| n.name_any()).collect();
    v.sort();
    v
}

fn start_reflector(
    api: Api<Node>,
    cfg: watcher::Config,
) -> (Store<Node>, tokio::task::JoinHandle<()>) {
    let (reader, writer) = reflector::store::<Node>();
    let stream = reflector::reflector(writer, watcher(api, cfg).default_backoff());
    let task = tokio::spawn(stream.applied_objects().for_each(|_| ready(())));
    (reader, task)
}

#[tokio::test]
async fn reflector_follows_writes_closed_watches_and_compaction() {
    let server = TestApiServer::builder()
        .bookmark_interval(Duration::from_millis(100))
        .start()
        .await
        .unwrap();
    let client = server.client().unwrap();
    let api: Api<Node> = Api::all(client.clone());
    api.create(&PostParams::default(), &node("a", json!({"r": "1"})))
        .await
        .unwrap();

    let (store, task) = start_reflector(api.clone(), watcher::Config::default());
    let (streamed, task2) =
        start_reflector(api.clone(), watcher::Config::default().streaming_lists());
    store.wait_until_ready().await.unwrap();
    streamed.wait_until_ready().await.unwrap();
    assert_eq!(names(&store), ["a"]);
    assert_eq!(names(&streamed), ["a"]);

    api.create(&PostParams::default(), &node("b", json!({})))
        .await
        .unwrap();
    eventually("b in the store", || names(&store) == ["a", "b"]).await;
    eventually("b in the streaming-list store", || {
        names(&streamed) == ["a", "b"]
    })
    .await;

    // Closing every watch: the watchers re-watch and keep following.
    let controls = server.controls();
    eventually("open watches", || controls.open_watches() >= 2).await;
    controls.close_watches();
    api.create(&PostParams::default(), &node("c", json!({})))
        .await
        .unwrap();
    eventually("c after closed watches", || {
        names(&store) == ["a", "b", "c"]
    })
    .await;

    // Compacting the history: a resumed watch gets 410 and the watcher re-lists.
    controls.compact();
    controls.close_watches();
    api.delete("a", &DeleteParams::default()).await.unwrap();
    api.create(&PostParams::default(), &node("d", json!({})))
        .await
        .unwrap();
    eventually("state after compaction", || {
        names(&store) == ["b", "c", "d"]
    })
    .await;
    eventually("streaming state after compaction", || {
        names(&streamed) == ["b", "c", "d"]
    })
    .await;
    assert!(
        controls.request_count("watch", "nodes") >= 4,
        "the watchers re-watched"
    );
    task.abort();
    task2.abort();
}

#[derive(Debug, thiserror::Error)]
#[error("reconcile failed: {0}")]
struct ReconcileError(#[from] kube::Error);

struct Ctx {
    client: Client,
}

async fn reconcile(node: Arc<Node>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    let api: Api<Node> = Api::all(ctx.client.clone());
    if node.labels().get("reconciled").map(String::as_str) != Some("true") {
        api.patch(
            &node.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata":{"labels":{"reconciled":"true"}}})),
        )
        .await?;
    }
    // Remove the uninitialized taint the way a CCM does: the full remaining list in a strategic merge patch.
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let rest: Vec<_> = taints
        .iter()
        .filter(|t| t.key != "node.cloudprovider.kubernetes.io/uninitialized")
        .cloned()
        .collect();
    if rest.len() != taints.len() {
        let patch = json!({"metadata":{"resourceVersion": node.resource_version()},"spec":{"taints": rest}});
        api.patch(
            &node.name_any(),
            &PatchParams::default(),
            &Patch::Strategic(patch),
        )
        .await?;
    }
    Ok(Action::await_change())
}

fn error_policy(_: Arc<Node>, _: &ReconcileError, _: Arc<Ctx>) -> Action {
    Action::requeue(Duration::from_millis(50))
}

#[tokio::test]
async fn controller_reconciles_nodes() {
    let server = TestApiServer::builder().start().await.unwrap();
    let client = server.client().unwrap();
    let api: Api<Node> = Api::all(client.clone());
    let ctx = Arc::new(Ctx {
        client: client.clone(),
    });
    let controller = Controller::new(api.clone(), watcher::Config::default())
        .run(reconcile, error_policy, ctx)
        .for_each(|_| ready(()));
    let task = tokio::spawn(controller);

    for n in ["n1", "n2"] {
        let mut node = node(n, json!({}));
        node.spec = Some(serde_json::from_value(json!({"taints":[{"key":"node.cloudprovider.kubernetes.io/uninitialized","value":"true","effect":"NoSchedule"}]})).unwrap());
        api.create(&PostParams::default(), &node).await.unwrap();
    }
    // Injected failures are retried by the controller's error policy.
    server.controls().fail(
        test_apiserver::FaultRule::new(500)
            .verb("patch")
            .resource("nodes")
            .times(2),
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let list = api.list(&Default::default()).await.unwrap();
        let done = list.items.iter().all(|n| {
            n.labels().get("reconciled").map(String::as_str) == Some("true")
                && !n
                    .spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .is_some_and(|t| {
                        t.iter()
                            .any(|t| t.key == "node.cloudprovider.kubernetes.io/uninitialized")
                    })
        });
        if done && list.items.len() == 2 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "controller did not reconcile: {list:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = server.controls().request_log();
    assert!(
        log.iter()
            .filter(|r| r.verb == "patch" && r.code == 500)
            .count()
            == 2,
        "the injected failures happened"
    );
    task.abort();
}
