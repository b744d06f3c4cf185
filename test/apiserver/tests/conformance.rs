//! Conformance suite of the API server, written only against a kubeconfig and `kube::Client`:
//! with `TEST_KUBECONFIG` set it runs against that cluster, otherwise against an in-process server.
//! Object names are unique per run so the suite can be repeated against a shared cluster.

mod common;

use std::time::Duration;

use common::{Raw, assert_status, raw, raw_json, target, unique, watch_lines};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, Service};
use kube::api::{
    DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

async fn create_node(client: &Client, body: Value) -> Value {
    let r = raw_json(client, "POST", "/api/v1/nodes", &body).await;
    assert_eq!(r.code, 201, "create node: {}", r.body);
    r.body
}

async fn delete_node(client: &Client, name: &str) {
    // Best effort cleanup: clear finalizers, then delete.
    let _ = raw(
        client,
        "PATCH",
        &format!("/api/v1/nodes/{name}"),
        Some("application/merge-patch+json"),
        r#"{"metadata":{"finalizers":null}}"#,
    )
    .await;
    let _ = raw(client, "DELETE", &format!("/api/v1/nodes/{name}"), None, "").await;
}

async fn patch(client: &Client, path: &str, ct: &str, body: &str) -> Raw {
    raw(client, "PATCH", path, Some(ct), body).await
}

fn rv(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("resourceVersion")
}

async fn temp_namespace(client: &Client) -> String {
    let ns = unique("ns");
    let r = raw_json(
        client,
        "POST",
        "/api/v1/namespaces",
        &json!({"apiVersion":"v1","kind":"Namespace","metadata":{"name": ns}}),
    )
    .await;
    assert_eq!(r.code, 201, "{}", r.body);
    ns
}

async fn drop_namespace(client: &Client, ns: &str) {
    let _ = raw(
        client,
        "DELETE",
        &format!("/api/v1/namespaces/{ns}"),
        None,
        "",
    )
    .await;
}

#[tokio::test]
async fn discovery_documents() {
    let t = target().await;
    let c = &t.client;
    let version = raw(c, "GET", "/version", None, "").await;
    assert_eq!(version.code, 200);
    assert!(
        version.body["gitVersion"]
            .as_str()
            .unwrap()
            .starts_with("v1.")
    );
    assert!(version.body.get("kind").is_none());
    let api = raw(c, "GET", "/api", None, "").await;
    assert_eq!(api.body["kind"], "APIVersions");
    assert_eq!(api.body["versions"], json!(["v1"]));
    let v1 = raw(c, "GET", "/api/v1", None, "").await;
    assert_eq!(v1.body["kind"], "APIResourceList");
    let resources = v1.body["resources"].as_array().unwrap();
    let nodes = resources.iter().find(|r| r["name"] == "nodes").unwrap();
    assert_eq!(nodes["namespaced"], false);
    assert_eq!(nodes["kind"], "Node");
    assert!(nodes["verbs"].as_array().unwrap().contains(&json!("watch")));
    let status = resources
        .iter()
        .find(|r| r["name"] == "services/status")
        .unwrap();
    assert_eq!(status["verbs"], json!(["get", "patch", "update"]));
    let apis = raw(c, "GET", "/apis", None, "").await;
    let groups: Vec<&str> = apis.body["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    for g in [
        "events.k8s.io",
        "coordination.k8s.io",
        "authentication.k8s.io",
        "authorization.k8s.io",
    ] {
        assert!(groups.contains(&g), "{g} missing from /apis");
    }
    let leases = raw(c, "GET", "/apis/coordination.k8s.io/v1", None, "").await;
    assert_eq!(leases.body["groupVersion"], "coordination.k8s.io/v1");
    assert_eq!(leases.body["resources"][0]["name"], "leases");
    // kube's own discovery understands the documents.
    let info = c.apiserver_version().await.unwrap();
    assert_eq!(info.major, "1");
    let disc = kube::Discovery::new(c.clone())
        .filter(&["", "coordination.k8s.io"])
        .run()
        .await
        .unwrap();
    assert!(disc.groups().any(|g| g.name() == "coordination.k8s.io"));
}

#[tokio::test]
async fn node_create_get_duplicate() {
    let t = target().await;
    let c = &t.client;
    let name = unique("node");
    let body = json!({"apiVersion":"v1","kind":"Node","metadata":{"name":name,"labels":{"env":"test"}},
        "spec":{"taints":[{"key":"node.cloudprovider.kubernetes.io/uninitialized","value":"true","effect":"NoSchedule"}]},
        "status":{"addresses":[{"type":"InternalIP","address":"10.0.1.10"},{"type":"Hostname","address":name}]}});
    let created = create_node(c, body.clone()).await;
    assert_eq!(created["kind"], "Node");
    assert_eq!(created["apiVersion"], "v1");
    assert!(
        created["metadata"]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty())
    );
    assert!(created["metadata"]["creationTimestamp"].is_string());
    // Node create keeps status.
    assert_eq!(created["status"]["addresses"][0]["address"], "10.0.1.10");
    let taints = created["spec"]["taints"].as_array().unwrap();
    assert_eq!(
        taints[0]["key"],
        "node.cloudprovider.kubernetes.io/uninitialized"
    );
    assert_eq!(
        created["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"],
        0
    );

    let dup = raw_json(c, "POST", "/api/v1/nodes", &body).await;
    assert_status(&dup, 409, "AlreadyExists");
    assert_eq!(dup.body["details"], json!({"name": name, "kind": "nodes"}));
    assert_eq!(
        dup.body["message"],
        format!("nodes \"{name}\" already exists")
    );

    let got = raw(c, "GET", &format!("/api/v1/nodes/{name}"), None, "").await;
    assert_eq!(got.code, 200);
    assert_eq!(got.body["metadata"]["uid"], created["metadata"]["uid"]);
    assert_eq!(rv(&got.body), rv(&created));
    delete_node(c, &name).await;
}

#[tokio::test]
async fn stale_writes_conflict() {
    let t = target().await;
    let c = &t.client;
    let name = unique("node");
    let created = create_node(c, json!({"apiVersion":"v1","kind":"Node","metadata":{"name":name,"labels":{"env":"prod"}},"spec":{"unschedulable":true}})).await;
    let old_rv = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let bumped = patch(
        c,
        &format!("/api/v1/nodes/{name}"),
        "application/merge-patch+json",
        r#"{"metadata":{"labels":{"bump":"1"}}}"#,
    )
    .await;
    assert_eq!(bumped.code, 200);
    assert!(rv(&bumped.body) > rv(&created));

    let put = |rv: Option<&str>, label: &str| {
        let mut meta = json!({"name": name, "labels": {"env": "prod", "updated": label}});
        if let Some(rv) = rv {
            meta["resourceVersion"] = json!(rv);
        }
        json!({"apiVersion":"v1","kind":"Node","metadata": meta,"spec":{"unschedulable":true}})
    };
    let stale = raw_json(
        c,
        "PUT",
        &format!("/api/v1/nodes/{name}"),
        &put(Some(&old_rv), "by-put"),
    )
    .await;
    assert_status(&stale, 409, "Conflict");
    assert_eq!(
        stale.body["message"],
        format!(
            "Operation cannot be fulfilled on nodes \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
        )
    );
    assert_eq!(
        stale.body["details"],
        json!({"name": name, "kind": "nodes"})
    );

    let current = bumped.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let ok = raw_json(
        c,
        "PUT",
        &format!("/api/v1/nodes/{name}"),
        &put(Some(&current), "by-put"),
    )
    .await;
    assert_eq!(ok.code, 200, "{}", ok.body);
    assert_eq!(ok.body["metadata"]["labels"]["updated"], "by-put");
    assert!(ok.body["metadata"]["labels"].get("bump").is_none());

    let no_rv = raw_json(
        c,
        "PUT",
        &format!("/api/v1/nodes/{name}"),
        &put(None, "by-put-no-rv"),
    )
    .await;
    assert_eq!(
        no_rv.code, 200,
        "Node allows unconditional update: {}",
        no_rv.body
    );
    assert!(rv(&no_rv.body) > rv(&ok.body));

    let mismatch = raw_json(
        c,
        "PUT",
        &format!("/api/v1/nodes/{name}"),
        &json!({"apiVersion":"v1","kind":"Node","metadata":{"name":"node-x"}}),
    )
    .await;
    assert_status(&mismatch, 400, "BadRequest");
    assert_eq!(
        mismatch.body["message"],
        format!("the name of the object (node-x) does not match the name on the URL ({name})")
    );

    // A resourceVersion inside a patch body is a precondition.
    let stale_patch = patch(
        c,
        &format!("/api/v1/nodes/{name}"),
        "application/strategic-merge-patch+json",
        &json!({"metadata":{"resourceVersion": old_rv},"spec":{"taints":[]}}).to_string(),
    )
    .await;
    assert_status(&stale_patch, 409, "Conflict");

    // Typed client: a stale replace is a 409 error.
    let api: Api<Node> = Api::all(c.clone());
    let mut node = api.get(&name).await.unwrap();
    node.metadata.resource_version = Some(old_rv);
    let err = api
        .replace(&name, &PostParams::default(), &node)
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409),
        "{err:?}"
    );
    delete_node(c, &name).await;
}

#[tokio::test]
async fn watch_sees_writes_in_order() {
    let t = target().await;
    let c = &t.client;
    let name = unique("node-w");
    let api: Api<Node> = Api::all(c.clone());
    let list = api
        .list(&ListParams::default().labels(&format!("w={name}")))
        .await
        .unwrap();
    let start = list.metadata.resource_version.unwrap();
    let mut stream = api
        .watch(
            &WatchParams::default()
                .labels(&format!("w={name}"))
                .timeout(20)
                .disable_bookmarks(),
            &start,
        )
        .await
        .unwrap()
        .boxed();

    create_node(c, json!({"apiVersion":"v1","kind":"Node","metadata":{"name":name,"labels":{"w":name,"phase":"one"}}})).await;
    assert_eq!(
        patch(
            c,
            &format!("/api/v1/nodes/{name}"),
            "application/merge-patch+json",
            r#"{"metadata":{"labels":{"phase":"two"}}}"#
        )
        .await
        .code,
        200
    );
    assert_eq!(
        patch(
            c,
            &format!("/api/v1/nodes/{name}/status"),
            "application/strategic-merge-patch+json",
            r#"{"status":{"addresses":[{"type":"InternalIP","address":"10.0.9.9"}]}}"#
        )
        .await
        .code,
        200
    );
    assert_eq!(
        raw(c, "DELETE", &format!("/api/v1/nodes/{name}"), None, "")
            .await
            .code,
        200
    );

    let mut seen = Vec::new();
    let mut last_rv = 0u64;
    while seen.len() < 4 {
        let ev = tokio::time::timeout(Duration::from_secs(10), stream.try_next())
            .await
            .expect("event in time")
            .unwrap()
            .expect("stream open");
        let (kind, obj) = match ev {
            WatchEvent::Added(o) => ("ADDED", o),
            WatchEvent::Modified(o) => ("MODIFIED", o),
            WatchEvent::Deleted(o) => ("DELETED", o),
            WatchEvent::Bookmark(_) => continue,
            WatchEvent::Error(e) => panic!("watch error {e:?}"),
        };
        let r: u64 = obj.resource_version().unwrap().parse().unwrap();
        assert!(r > last_rv, "resourceVersions increase");
        last_rv = r;
        seen.push((kind, obj));
    }
    let kinds: Vec<&str> = seen.iter().map(|(k, _)| *k).collect();
    assert_eq!(kinds, ["ADDED", "MODIFIED", "MODIFIED", "DELETED"]);
    assert_eq!(seen[1].1.labels()["phase"], "two");
    assert_eq!(
        seen[2]
            .1
            .status
            .as_ref()
            .unwrap()
            .addresses
            .as_ref()
            .unwrap()[0]
            .address,
        "10.0.9.9"
    );
    assert_eq!(seen[3].1.labels()["phase"], "two");
}

#[tokio::test]
async fn bookmarks_are_sent() {
    let t = target().await;
    let c = &t.client;
    let name = unique("node-b");
    let list = raw(c, "GET", "/api/v1/nodes?limit=1", None, "").await;
    let start = list.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let path = format!(
        "/api/v1/nodes?watch=1&resourceVersion={start}&allowWatchBookmarks=true&timeoutSeconds=5&labelSelector=b%3D{name}"
    );
    let c2 = c.clone();
    let watcher = tokio::spawn(async move { watch_lines(&c2, &path).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    create_node(
        c,
        json!({"apiVersion":"v1","kind":"Node","metadata":{"name":name,"labels":{"b":name}}}),
    )
    .await;
    let lines = watcher.await.unwrap();
    assert_eq!(lines[0]["type"], "ADDED");
    let bookmarks: Vec<&Value> = lines.iter().filter(|l| l["type"] == "BOOKMARK").collect();
    assert!(!bookmarks.is_empty(), "no bookmark in {lines:?}");
    let bm = &bookmarks[0]["object"];
    assert_eq!(bm["kind"], "Node");
    assert!(rv(bm) >= rv(&lines[0]["object"]));
    delete_node(c, &name).await;
}

#[tokio::test]
async fn watch_without_version_starts_with_current_objects() {
    let t = target().await;
    let c = &t.client;
    let tag = unique("init");
    let a = format!("{tag}-a");
    let b = format!("{tag}-b");
    for n in [&a, &b] {
        create_node(
            c,
            json!({"apiVersion":"v1","kind":"Node","metadata":{"name":n,"labels":{"init":tag}}}),
        )
        .await;
    }
    let lines = watch_lines(
        c,
        &format!("/api/v1/nodes?watch=1&timeoutSeconds=2&labelSelector=init%3D{tag}"),
    )
    .await;
    let mut names: Vec<&str> = lines
        .iter()
        .filter(|l| l["type"] == "ADDED")
        .map(|l| l["object"]["metadata"]["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, [a.as_str(), b.as_str()]);
    let single = watch_lines(c, &format!("/api/v1/nodes?watch=1&resourceVersion=0&timeoutSeconds=2&fieldSelector=metadata.name%3D{b}")).await;
    assert_eq!(single.len(), 1);
    assert_eq!(single[0]["object"]["metadata"]["name"], b.as_str());
    assert_eq!(single[0]["object"]["kind"], "Node");
    for n in [&a, &b] {
        delete_node(c, n).await;
    }
}

#[tokio::test]
async fn expired_resource_versions_get_410() {
    let t = target().await;
    let c = &t.client;
    let name = unique("node-x");
    create_node(
        c,
        json!({"apiVersion":"v1","kind":"Node","metadata":{"name":name}}),
    )
    .await;
    let before = raw(c, "GET", &format!("/api/v1/nodes/{name}"), None, "").await;
    let old = rv(&before.body);
    match &t.server {
        Some(server) => {
            patch(
                c,
                &format!("/api/v1/nodes/{name}"),
                "application/merge-patch+json",
                r#"{"metadata":{"labels":{"a":"b"}}}"#,
            )
            .await;
            server.controls().compact();
        }
        None => eprintln!(
            "skipping the compaction step: TEST_KUBECONFIG targets a real cluster whose history cannot be compacted on demand; watching from resourceVersion 1 instead"
        ),
    }
    let from = if t.in_process() {
        old.to_string()
    } else {
        "1".to_string()
    };
    let lines = watch_lines(
        c,
        &format!("/api/v1/nodes?watch=1&resourceVersion={from}&timeoutSeconds=5"),
    )
    .await;
    if !t.in_process() && lines.first().is_some_and(|l| l["type"] != "ERROR") {
        // A young real cluster still has its whole history (its watch cache keeps at least the last
        // 75 s, etcd compacts every 5 min): the watch replays it in resourceVersion order instead.
        let versions: Vec<u64> = lines.iter().map(|l| rv(&l["object"])).collect();
        assert!(
            versions.windows(2).all(|w| w[0] < w[1]),
            "a replay is in resourceVersion order: {versions:?}"
        );
        eprintln!(
            "the real cluster still had resourceVersion 1: replayed {} events",
            lines.len()
        );
    } else {
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_eq!(lines[0]["type"], "ERROR");
        let status = &lines[0]["object"];
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["code"], 410);
        assert_eq!(status["reason"], "Expired");
        assert!(
            status["message"]
                .as_str()
                .unwrap()
                .starts_with(&format!("too old resource version: {from} ("))
        );
    }
    delete_node(c, &name).await;

    // A LIST at a future resourceVersion times out with 504 and Retry-After.
    let future = raw(
        c,
        "GET",
        "/api/v1/nodes?resourceVersion=999999999",
        None,
        "",
    )
    .await;
    assert_status(&future, 504, "Timeout");
    assert_eq!(
        future
            .headers
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("1")
    );
    assert_eq!(
        future.body["details"]["causes"][0]["reason"],
        "ResourceVersionTooLarge"
    );
}

#[tokio::test]
async fn finalizers_delay_deletion() {
    let t = target().await;
    let c = &t.client;
    let name = unique("node-f");
    create_node(c, json!({"apiVersion":"v1","kind":"Node","metadata":{"name":name,"finalizers":["example.com/protect"]}})).await;
    let del = raw(c, "DELETE", &format!("/api/v1/nodes/{name}"), None, "").await;
    assert_eq!(del.code, 200);
    assert_eq!(del.body["kind"], "Node");
    assert!(del.body["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(del.body["metadata"]["deletionGracePeriodSeconds"], 0);
    let del_rv = rv(&del.body);
    let again = raw(c, "DELETE", &format!("/api/v1/nodes/{name}"), None, "").await;
    assert_eq!(again.code, 200);
    assert_eq!(rv(&again.body), del_rv, "a repeated DELETE is a no-op");
    let still = raw(c, "GET", &format!("/api/v1/nodes/{name}"), None, "").await;
    assert_eq!(still.code, 200);

    let add = patch(
        c,
        &format!("/api/v1/nodes/{name}"),
        "application/merge-patch+json",
        r#"{"metadata":{"finalizers":["example.com/protect","example.com/another"]}}"#,
    )
    .await;
    assert_status(&add, 422, "Invalid");
    assert_eq!(add.body["details"]["kind"], "Node");
    assert_eq!(
        add.body["details"]["causes"][0]["field"],
        "metadata.finalizers"
    );
    assert_eq!(
        add.body["details"]["causes"][0]["reason"],
        "FieldValueForbidden"
    );

    let label = patch(
        c,
        &format!("/api/v1/nodes/{name}"),
        "application/merge-patch+json",
        r#"{"metadata":{"labels":{"still":"editable"}}}"#,
    )
    .await;
    assert_eq!(label.code, 200);
    let label_rv = rv(&label.body);

    let remove = patch(
        c,
        &format!("/api/v1/nodes/{name}"),
        "application/merge-patch+json",
        r#"{"metadata":{"finalizers":null}}"#,
    )
    .await;
    assert_eq!(remove.code, 200);
    assert_eq!(
        rv(&remove.body),
        label_rv,
        "the write that removes the last finalizer keeps the resourceVersion"
    );
    assert!(remove.body["metadata"].get("finalizers").is_none());
    let gone = raw(c, "GET", &format!("/api/v1/nodes/{name}"), None, "").await;
    assert_status(&gone, 404, "NotFound");
    assert_eq!(gone.body["details"], json!({"name": name, "kind": "nodes"}));
}

#[tokio::test]
async fn delete_bodies_and_preconditions() {
    let t = target().await;
    let c = &t.client;
    let name = unique("node-d");
    let created = create_node(
        c,
        json!({"apiVersion":"v1","kind":"Node","metadata":{"name":name}}),
    )
    .await;
    let uid = created["metadata"]["uid"].as_str().unwrap().to_string();
    let bad_uid = raw_json(c, "DELETE", &format!("/api/v1/nodes/{name}"), &json!({"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"uid":"00000000-0000-0000-0000-000000000000"}})).await;
    assert_status(&bad_uid, 409, "Conflict");
    assert_eq!(
        bad_uid.body["details"],
        json!({"name": name, "kind": "Node"})
    );
    let bad_rv = raw_json(
        c,
        "DELETE",
        &format!("/api/v1/nodes/{name}"),
        &json!({"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"resourceVersion":"1"}}),
    )
    .await;
    assert_status(&bad_rv, 409, "Conflict");
    assert!(
        bad_rv.body["message"]
            .as_str()
            .unwrap()
            .contains("the ResourceVersion in the precondition (1) does not match")
    );
    let dry = raw(
        c,
        "DELETE",
        &format!("/api/v1/nodes/{name}?dryRun=All"),
        None,
        "",
    )
    .await;
    assert_eq!(dry.code, 200);
    assert_eq!(
        raw(c, "GET", &format!("/api/v1/nodes/{name}"), None, "")
            .await
            .code,
        200
    );
    let del = raw(c, "DELETE", &format!("/api/v1/nodes/{name}"), None, "").await;
    assert_eq!(del.code, 200);
    assert_eq!(del.body["kind"], "Status");
    assert_eq!(del.body["status"], "Success");
    assert_eq!(
        del.body["details"],
        json!({"name": name, "kind": "nodes", "uid": uid})
    );
    let missing = raw(c, "DELETE", &format!("/api/v1/nodes/{name}"), None, "").await;
    assert_status(&missing, 404, "NotFound");
    let missing_put = raw_json(
        c,
        "PUT",
        &format!("/api/v1/nodes/{name}"),
        &json!({"apiVersion":"v1","kind":"Node","metadata":{"name":name}}),
    )
    .await;
    assert_status(&missing_put, 404, "NotFound");
    let missing_patch = patch(
        c,
        &format!("/api/v1/nodes/{name}/status"),
        "application/strategic-merge-patch+json",
        r#"{"status":{}}"#,
    )
    .await;
    assert_status(&missing_patch, 404, "NotFound");
}

#[tokio::test]
async fn status_subresource_isolation() {
    let t = target().await;
    let c = &t.client;
    let name = unique("node-s");
    create_node(
        c,
        json!({"apiVersion":"v1","kind":"Node","metadata":{"name":name},
        "status":{"addresses":[{"type":"InternalIP","address":"10.0.1.10"}]}}),
    )
    .await;
    let main = patch(
        c,
        &format!("/api/v1/nodes/{name}"),
        "application/strategic-merge-patch+json",
        r#"{"metadata":{"labels":{"via":"main"}},"status":{"addresses":[{"type":"InternalIP","address":"10.9.9.9"}],"capacity":{"cpu":"4"}}}"#,
    )
    .await;
    assert_eq!(main.code, 200);
    assert_eq!(main.body["metadata"]["labels"]["via"], "main");
    assert_eq!(
        main.body["status"]["addresses"][0]["address"], "10.0.1.10",
        "main resource ignores status"
    );
    assert!(main.body["status"].get("capacity").is_none());

    let status = patch(
        c,
        &format!("/api/v1/nodes/{name}/status"),
        "application/strategic-merge-patch+json",
        r#"{"metadata":{"labels":{"via":"status"},"annotations":{"example.com/note":"set-via-status"}},"spec":{"unschedulable":true,"providerID":"fake://x"},"status":{"capacity":{"cpu":"2","memory":"4Gi","pods":"110"}}}"#,
    )
    .await;
    assert_eq!(status.code, 200);
    assert!(
        status.body["spec"].get("unschedulable").is_none(),
        "status subresource ignores spec"
    );
    assert!(status.body["spec"].get("providerID").is_none());
    assert_eq!(
        status.body["metadata"]["labels"]["via"], "status",
        "status subresource applies labels"
    );
    assert_eq!(
        status.body["metadata"]["annotations"]["example.com/note"],
        "set-via-status"
    );
    assert_eq!(status.body["status"]["capacity"]["cpu"], "2");
    assert_eq!(
        status.body["status"]["allocatable"]["cpu"], "2",
        "allocatable defaults from capacity"
    );

    // Typed status replace through kube.
    let api: Api<Node> = Api::all(c.clone());
    let mut node = api.get_status(&name).await.unwrap();
    node.spec.as_mut().unwrap().unschedulable = Some(true);
    let replaced = api
        .replace_status(&name, &PostParams::default(), &node)
        .await
        .unwrap();
    assert_ne!(replaced.spec.unwrap().unschedulable, Some(true));
    delete_node(c, &name).await;
}

#[tokio::test]
async fn node_taint_patches() {
    let t = target().await;
    let c = &t.client;
    let name = unique("node-t");
    let path = format!("/api/v1/nodes/{name}");
    let created = create_node(c, json!({"apiVersion":"v1","kind":"Node","metadata":{"name":name,"labels":{"team":"cloud"}},
        "spec":{"taints":[{"key":"node.cloudprovider.kubernetes.io/uninitialized","value":"true","effect":"NoSchedule"},{"key":"example.com/other","effect":"NoSchedule"}]}})).await;
    let uninit = json!({"key":"node.cloudprovider.kubernetes.io/uninitialized","value":"true","effect":"NoSchedule"});

    // spec.taints is atomic: `$patch: delete` with only the key replaces the list and fails validation.
    let del_key = patch(
        c,
        &path,
        "application/strategic-merge-patch+json",
        r#"{"spec":{"taints":[{"key":"example.com/other","$patch":"delete"}]}}"#,
    )
    .await;
    assert_status(&del_key, 422, "Invalid");
    assert_eq!(
        del_key.body["details"]["causes"][0]["field"],
        "metadata.taints[0].effect"
    );

    // Replacing the whole list works (the way PatchNodeTaints removes a taint), with a current resourceVersion.
    let current = created["metadata"]["resourceVersion"].as_str().unwrap();
    let smp = patch(
        c,
        &path,
        "application/strategic-merge-patch+json",
        &json!({"metadata":{"resourceVersion": current},"spec":{"taints":[uninit]}}).to_string(),
    )
    .await;
    assert_eq!(smp.code, 200, "{}", smp.body);
    assert_eq!(smp.body["spec"]["taints"], json!([uninit]));

    // Merge patch replaces the list too.
    let merge = patch(
        c,
        &path,
        "application/merge-patch+json",
        r#"{"spec":{"taints":[{"key":"a.example.com/x","effect":"NoExecute"}]}}"#,
    )
    .await;
    assert_eq!(
        merge.body["spec"]["taints"],
        json!([{"key":"a.example.com/x","effect":"NoExecute"}])
    );

    // JSON patch: a failing test is 422 with the generic message and nothing is written.
    let before = rv(&merge.body);
    let failed = patch(c, &path, "application/json-patch+json", r#"[{"op":"test","path":"/metadata/labels/team","value":"wrong"},{"op":"replace","path":"/metadata/labels/team","value":"network"}]"#).await;
    assert_status(&failed, 422, "Invalid");
    assert_eq!(
        failed.body["message"],
        "the server rejected our request due to an error in our request"
    );
    assert_eq!(failed.body["details"], json!({}));
    let missing = patch(
        c,
        &path,
        "application/json-patch+json",
        r#"[{"op":"remove","path":"/metadata/labels/does-not-exist"}]"#,
    )
    .await;
    assert_status(&missing, 422, "Invalid");
    let ok = patch(c, &path, "application/json-patch+json", r#"[{"op":"test","path":"/metadata/labels/team","value":"cloud"},{"op":"replace","path":"/metadata/labels/team","value":"network"},{"op":"add","path":"/spec/taints/-","value":{"key":"b.example.com/y","effect":"NoSchedule"}}]"#).await;
    assert_eq!(ok.code, 200, "{}", ok.body);
    assert_eq!(ok.body["metadata"]["labels"]["team"], "network");
    assert_eq!(ok.body["spec"]["taints"].as_array().unwrap().len(), 2);
    assert!(rv(&ok.body) > before);

    // An empty list removes every taint.
    let empty = patch(
        c,
        &path,
        "application/strategic-merge-patch+json",
        r#"{"spec":{"taints":[]}}"#,
    )
    .await;
    assert_eq!(empty.code, 200);
    assert!(empty.body["spec"].get("taints").is_none());

    // Typed patches through kube.
    let api: Api<Node> = Api::all(c.clone());
    let patched = api
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec":{"unschedulable":true}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.spec.unwrap().unschedulable, Some(true));
    let patched = api
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Strategic(
                json!({"spec":{"taints":[{"key":"c.example.com/z","effect":"NoSchedule"}]}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        patched.spec.unwrap().taints.unwrap()[0].key,
        "c.example.com/z"
    );
    delete_node(c, &name).await;
}

#[tokio::test]
async fn node_address_and_condition_patches() {
    let t = target().await;
    let c = &t.client;
    let name = unique("node-a");
    let status_path = format!("/api/v1/nodes/{name}/status");
    create_node(c, json!({"apiVersion":"v1","kind":"Node","metadata":{"name":name},
        "status":{"addresses":[{"type":"InternalIP","address":"10.0.1.10"},{"type":"Hostname","address":name}]}})).await;
    let smp = "application/strategic-merge-patch+json";

    // Addresses merge by type; a new type goes first.
    let ext = patch(
        c,
        &status_path,
        smp,
        r#"{"status":{"addresses":[{"type":"ExternalIP","address":"203.0.113.7"}]}}"#,
    )
    .await;
    let types: Vec<&str> = ext.body["status"]["addresses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["ExternalIP", "InternalIP", "Hostname"]);
    // `$patch: delete` by type.
    let del = patch(
        c,
        &status_path,
        smp,
        r#"{"status":{"addresses":[{"type":"ExternalIP","$patch":"delete"}]}}"#,
    )
    .await;
    assert_eq!(del.body["status"]["addresses"].as_array().unwrap().len(), 2);
    // The trailing `{"$patch":"replace"}` element replaces the list exactly (duplicates kept).
    let replace = patch(
        c,
        &status_path,
        smp,
        r#"{"status":{"addresses":[{"type":"InternalIP","address":"10.0.1.10"},{"type":"InternalIP","address":"10.0.1.11"},{"$patch":"replace"}]}}"#,
    )
    .await;
    assert_eq!(replace.code, 200, "{}", replace.body);
    assert_eq!(
        replace.body["status"]["addresses"],
        json!([{"type":"InternalIP","address":"10.0.1.10"},{"type":"InternalIP","address":"10.0.1.11"}])
    );

    // Conditions merge field by field by type; omitted fields keep their values.
    let ready = patch(
        c,
        &status_path,
        smp,
        r#"{"status":{"conditions":[{"type":"Ready","status":"True","lastHeartbeatTime":"2026-01-01T00:00:00Z","lastTransitionTime":"2026-01-01T00:00:00Z","reason":"KubeletReady","message":"ready"}]}}"#,
    )
    .await;
    assert_eq!(ready.code, 200);
    let net = patch(
        c,
        &status_path,
        smp,
        r#"{"status":{"conditions":[{"type":"NetworkUnavailable","status":"True","lastHeartbeatTime":"2026-01-01T00:01:00Z","lastTransitionTime":"2026-01-01T00:01:00Z","reason":"NoRouteCreated","message":"no route"}]}}"#,
    )
    .await;
    let conds = net.body["status"]["conditions"].as_array().unwrap();
    assert_eq!(conds.len(), 2);
    assert_eq!(conds[0]["type"], "NetworkUnavailable");
    let upd = patch(
        c,
        &status_path,
        smp,
        r#"{"status":{"$setElementOrder/conditions":[{"type":"Ready"},{"type":"NetworkUnavailable"}],"conditions":[{"type":"NetworkUnavailable","status":"False","lastHeartbeatTime":"2026-01-01T00:02:00Z","reason":"RouteCreated","message":"route created"}]}}"#,
    )
    .await;
    let conds = upd.body["status"]["conditions"].as_array().unwrap();
    assert_eq!(conds[0]["type"], "Ready");
    assert_eq!(conds[1]["status"], "False");
    assert_eq!(
        conds[1]["lastTransitionTime"], "2026-01-01T00:01:00Z",
        "omitted fields keep their value"
    );
    delete_node(c, &name).await;
}

async fn create_service(c: &Client, ns: &str, body: Value) -> Raw {
    raw_json(
        c,
        "POST",
        &format!("/api/v1/namespaces/{ns}/services"),
        &body,
    )
    .await
}

#[tokio::test]
async fn service_defaulting() {
    let t = target().await;
    let c = &t.client;
    let ns = temp_namespace(c).await;
    let lb = create_service(c, &ns, json!({"apiVersion":"v1","kind":"Service","metadata":{"name":"lb-svc","labels":{"app":"web"}},
        "spec":{"type":"LoadBalancer","externalTrafficPolicy":"Local","selector":{"app":"web"},
        "ports":[{"name":"http","protocol":"TCP","port":80,"targetPort":8080},{"name":"dns","protocol":"UDP","port":53}]}})).await;
    assert_eq!(lb.code, 201, "{}", lb.body);
    let s = &lb.body["spec"];
    assert_eq!(lb.body["metadata"]["namespace"], ns.as_str());
    let ip = s["clusterIP"].as_str().unwrap();
    assert!(ip.parse::<std::net::Ipv4Addr>().is_ok());
    assert_eq!(s["clusterIPs"], json!([ip]));
    assert_eq!(s["ipFamilies"], json!(["IPv4"]));
    assert_eq!(s["ipFamilyPolicy"], "SingleStack");
    assert_eq!(s["sessionAffinity"], "None");
    assert_eq!(s["internalTrafficPolicy"], "Cluster");
    assert_eq!(s["allocateLoadBalancerNodePorts"], true);
    assert_eq!(s["ports"][1]["targetPort"], 53);
    assert_eq!(s["ports"][0]["targetPort"], 8080);
    let np: Vec<u64> = s["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["nodePort"].as_u64().unwrap())
        .collect();
    assert!(np.iter().all(|p| (30000..=32767).contains(p)));
    assert_ne!(np[0], np[1]);
    let hc = s["healthCheckNodePort"].as_u64().unwrap();
    assert!((30000..=32767).contains(&hc));
    assert_eq!(lb.body["status"], json!({"loadBalancer": {}}));

    let plain = create_service(c, &ns, json!({"apiVersion":"v1","kind":"Service","metadata":{"name":"plain-svc"},"spec":{"ports":[{"port":443}]}})).await;
    assert_eq!(plain.code, 201);
    let s = &plain.body["spec"];
    assert_eq!(s["type"], "ClusterIP");
    assert_eq!(
        s["ports"][0],
        json!({"protocol":"TCP","port":443,"targetPort":443})
    );
    assert!(s.get("externalTrafficPolicy").is_none());
    assert!(s.get("allocateLoadBalancerNodePorts").is_none());

    // Invalid services.
    let bad = create_service(c, &ns, json!({"apiVersion":"v1","kind":"Service","metadata":{"name":"bad-svc"},"spec":{"type":"LoadBalancer","ports":[{"name":"http","protocol":"TCP","port":0}]}})).await;
    assert_status(&bad, 422, "Invalid");
    assert_eq!(bad.body["details"]["kind"], "Service");
    let fields: Vec<&str> = bad.body["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, ["spec.ports[0].port", "spec.ports[0].targetPort"]);
    let etp = create_service(c, &ns, json!({"apiVersion":"v1","kind":"Service","metadata":{"name":"bad-svc"},"spec":{"externalTrafficPolicy":"Local","ports":[{"port":80}]}})).await;
    assert_status(&etp, 422, "Invalid");
    assert_eq!(
        etp.body["details"]["causes"][0]["field"],
        "spec.externalTrafficPolicy"
    );
    let empty = create_service(c, &ns, json!({"apiVersion":"v1","kind":"Service","metadata":{"name":"bad-svc"},"spec":{"type":"LoadBalancer","ports":[]}})).await;
    assert_status(&empty, 422, "Invalid");
    assert_eq!(
        empty.body["message"],
        "Service \"bad-svc\" is invalid: spec.ports: Required value"
    );
    let name = create_service(c, &ns, json!({"apiVersion":"v1","kind":"Service","metadata":{"name":"Bad_Svc"},"spec":{"ports":[{"name":"a","port":80},{"name":"a","port":80}]}})).await;
    assert_status(&name, 422, "Invalid");
    assert_eq!(name.body["details"]["causes"][0]["field"], "metadata.name");

    let missing_ns = create_service(c, "no-such-ns-x", json!({"apiVersion":"v1","kind":"Service","metadata":{"name":"x"},"spec":{"ports":[{"port":80}]}})).await;
    assert_status(&missing_ns, 404, "NotFound");
    assert_eq!(
        missing_ns.body["details"],
        json!({"name":"no-such-ns-x","kind":"namespaces"})
    );

    // A PUT that leaves allocated values out keeps them.
    let api: Api<Service> = Api::namespaced(c.clone(), &ns);
    let mut svc = api.get("lb-svc").await.unwrap();
    let spec = svc.spec.as_mut().unwrap();
    spec.cluster_ip = None;
    spec.cluster_ips = None;
    for p in spec.ports.as_mut().unwrap() {
        p.node_port = None;
    }
    let put = api
        .replace("lb-svc", &PostParams::default(), &svc)
        .await
        .unwrap();
    let spec = put.spec.unwrap();
    assert_eq!(spec.cluster_ip.as_deref(), Some(ip));
    assert_eq!(
        spec.ports.unwrap()[0].node_port.map(|p| p as u64),
        Some(np[0])
    );
    drop_namespace(c, &ns).await;
}

#[tokio::test]
async fn service_status_and_finalizers() {
    let t = target().await;
    let c = &t.client;
    let ns = temp_namespace(c).await;
    let base = format!("/api/v1/namespaces/{ns}/services/lb-svc");
    let smp = "application/strategic-merge-patch+json";
    let created = create_service(c, &ns, json!({"apiVersion":"v1","kind":"Service","metadata":{"name":"lb-svc"},"spec":{"type":"LoadBalancer","ports":[{"port":80}]}})).await;
    assert_eq!(created.code, 201);

    // The request's object is defaulted before the status strategy restores the stored spec: with
    // `spec.type: ClusterIP` in the body the ingress gets no `ipMode` and the write is invalid.
    let retyped = patch(c, &format!("{base}/status"), smp, r#"{"spec":{"type":"ClusterIP"},"status":{"loadBalancer":{"ingress":[{"ip":"192.0.2.10"}]}}}"#).await;
    assert_status(&retyped, 422, "Invalid");
    assert_eq!(
        retyped.body["details"]["causes"][0]["field"],
        "status.loadBalancer.ingress[0].ipMode"
    );
    assert_eq!(
        retyped.body["details"]["causes"][0]["message"],
        "Required value: must be specified when `ip` is set"
    );
    let bad_mode = patch(
        c,
        &format!("{base}/status"),
        smp,
        r#"{"status":{"loadBalancer":{"ingress":[{"ip":"192.0.2.10","ipMode":"Direct"}]}}}"#,
    )
    .await;
    assert_status(&bad_mode, 422, "Invalid");
    let st = patch(c, &format!("{base}/status"), smp, r#"{"spec":{"selector":{"x":"y"}},"status":{"loadBalancer":{"ingress":[{"ip":"192.0.2.10"}]}}}"#).await;
    assert_eq!(st.code, 200, "{}", st.body);
    assert!(
        st.body["spec"].get("selector").is_none(),
        "status ignores spec"
    );
    assert_eq!(
        st.body["status"]["loadBalancer"]["ingress"],
        json!([{"ip":"192.0.2.10","ipMode":"VIP"}]),
        "ipMode defaults to VIP"
    );
    let st_rv = rv(&st.body);
    let main = patch(
        c,
        &base,
        "application/merge-patch+json",
        r#"{"status":{"loadBalancer":{"ingress":[{"ip":"198.51.100.1"}]}}}"#,
    )
    .await;
    assert_eq!(
        main.body["status"]["loadBalancer"]["ingress"],
        json!([{"ip":"192.0.2.10","ipMode":"VIP"}]),
        "main ignores status"
    );
    assert_eq!(
        rv(&main.body),
        st_rv,
        "a no-op patch keeps the resourceVersion"
    );

    // Finalizer through the status subresource (the CCM path).
    let fin = patch(
        c,
        &format!("{base}/status"),
        smp,
        r#"{"metadata":{"finalizers":["service.kubernetes.io/load-balancer-cleanup"]}}"#,
    )
    .await;
    assert_eq!(
        fin.body["metadata"]["finalizers"],
        json!(["service.kubernetes.io/load-balancer-cleanup"])
    );
    // Strategic merge on the main resource: $setElementOrder append, then $deleteFromPrimitiveList.
    let add = patch(
        c,
        &base,
        smp,
        r#"{"metadata":{"$setElementOrder/finalizers":["service.kubernetes.io/load-balancer-cleanup","example.com/other"],"finalizers":["example.com/other"]}}"#,
    )
    .await;
    assert_eq!(
        add.body["metadata"]["finalizers"],
        json!([
            "service.kubernetes.io/load-balancer-cleanup",
            "example.com/other"
        ])
    );
    let rm = patch(
        c,
        &base,
        smp,
        r#"{"metadata":{"$deleteFromPrimitiveList/finalizers":["example.com/other"]}}"#,
    )
    .await;
    assert_eq!(
        rm.body["metadata"]["finalizers"],
        json!(["service.kubernetes.io/load-balancer-cleanup"])
    );
    let union = patch(
        c,
        &base,
        smp,
        r#"{"metadata":{"finalizers":["example.com/third"]}}"#,
    )
    .await;
    assert_eq!(
        union.body["metadata"]["finalizers"]
            .as_array()
            .unwrap()
            .len(),
        2,
        "SMP on finalizers is a union"
    );
    let merge = patch(
        c,
        &base,
        "application/merge-patch+json",
        r#"{"metadata":{"finalizers":["service.kubernetes.io/load-balancer-cleanup"]}}"#,
    )
    .await;
    assert_eq!(
        merge.body["metadata"]["finalizers"],
        json!(["service.kubernetes.io/load-balancer-cleanup"]),
        "merge patch replaces"
    );

    // Delete: the Service is returned with a deletionTimestamp and stays until the finalizer goes.
    let del = raw(c, "DELETE", &base, None, "").await;
    assert_eq!(del.code, 200);
    assert_eq!(del.body["kind"], "Service");
    assert!(del.body["metadata"]["deletionTimestamp"].is_string());
    let clear = patch(
        c,
        &format!("{base}/status"),
        smp,
        r#"{"metadata":{"finalizers":null}}"#,
    )
    .await;
    assert_eq!(clear.code, 200);
    assert_eq!(rv(&clear.body), rv(&del.body));
    assert_status(&raw(c, "GET", &base, None, "").await, 404, "NotFound");
    // A plain Service delete also returns the object.
    create_service(c, &ns, json!({"apiVersion":"v1","kind":"Service","metadata":{"name":"plain"},"spec":{"ports":[{"port":80}]}})).await;
    let plain = raw(
        c,
        "DELETE",
        &format!("/api/v1/namespaces/{ns}/services/plain"),
        None,
        "",
    )
    .await;
    assert_eq!(plain.code, 200);
    assert_eq!(plain.body["kind"], "Service");
    assert!(plain.body["metadata"].get("deletionTimestamp").is_none());
    drop_namespace(c, &ns).await;
}

#[tokio::test]
async fn label_and_field_selectors() {
    let t = target().await;
    let c = &t.client;
    let tag = unique("sel");
    let names: Vec<String> = ["a", "b", "c"]
        .iter()
        .map(|s| format!("{tag}-{s}"))
        .collect();
    create_node(c, json!({"apiVersion":"v1","kind":"Node","metadata":{"name":names[0],"labels":{"sel":tag,"env":"test","zone":"z1"}}})).await;
    create_node(c, json!({"apiVersion":"v1","kind":"Node","metadata":{"name":names[1],"labels":{"sel":tag,"env":"test"}}})).await;
    create_node(c, json!({"apiVersion":"v1","kind":"Node","metadata":{"name":names[2],"labels":{"sel":tag,"env":"prod"}},"spec":{"unschedulable":true}})).await;
    let api: Api<Node> = Api::all(c.clone());
    let names_of =
        |l: kube::core::ObjectList<Node>| l.items.iter().map(|n| n.name_any()).collect::<Vec<_>>();
    let q = |labels: String| ListParams::default().labels(&labels);
    assert_eq!(
        names_of(api.list(&q(format!("sel={tag},env=test"))).await.unwrap()),
        &names[..2]
    );
    assert_eq!(
        names_of(api.list(&q(format!("sel=={tag},env!=test"))).await.unwrap()),
        &names[2..]
    );
    assert_eq!(
        names_of(
            api.list(&q(format!("sel={tag},env in (test,prod),!nonexistent")))
                .await
                .unwrap()
        ),
        &names[..]
    );
    assert_eq!(
        names_of(
            api.list(&q(format!("sel={tag},env notin (test)")))
                .await
                .unwrap()
        ),
        &names[2..]
    );
    assert_eq!(
        names_of(api.list(&q(format!("sel={tag},zone"))).await.unwrap()),
        &names[..1]
    );
    assert_eq!(
        names_of(api.list(&q(format!("sel={tag},!zone"))).await.unwrap()),
        &names[1..]
    );
    let fields = api
        .list(&q(format!("sel={tag}")).fields(&format!("metadata.name!={}", names[0])))
        .await
        .unwrap();
    assert_eq!(names_of(fields), &names[1..]);
    let unsched = api
        .list(&q(format!("sel={tag}")).fields("spec.unschedulable=true"))
        .await
        .unwrap();
    assert_eq!(names_of(unsched), &names[2..]);
    let none = raw(
        c,
        "GET",
        &format!("/api/v1/nodes?labelSelector=sel%3D{tag},env%3Dnone"),
        None,
        "",
    )
    .await;
    assert_eq!(none.body["items"], json!([]));
    assert!(none.body["items"][0].is_null());
    let bad_field = raw(
        c,
        "GET",
        "/api/v1/nodes?fieldSelector=status.phase%3DRunning",
        None,
        "",
    )
    .await;
    assert_status(&bad_field, 400, "BadRequest");
    assert_eq!(
        bad_field.body["message"],
        "field label not supported: status.phase"
    );
    let bad_label = raw(
        c,
        "GET",
        "/api/v1/nodes?labelSelector=env%3D%3D%3Dx",
        None,
        "",
    )
    .await;
    assert_status(&bad_label, 400, "BadRequest");
    // List items carry no kind/apiVersion.
    let list = raw(
        c,
        "GET",
        &format!("/api/v1/nodes?labelSelector=sel%3D{tag}"),
        None,
        "",
    )
    .await;
    assert_eq!(list.body["kind"], "NodeList");
    assert!(list.body["items"][0].get("kind").is_none());

    // Service field selector on spec.type.
    let ns = temp_namespace(c).await;
    create_service(c, &ns, json!({"apiVersion":"v1","kind":"Service","metadata":{"name":"lb"},"spec":{"type":"LoadBalancer","ports":[{"port":80}]}})).await;
    create_service(c, &ns, json!({"apiVersion":"v1","kind":"Service","metadata":{"name":"cip"},"spec":{"ports":[{"port":80}]}})).await;
    let svcs: Api<Service> = Api::namespaced(c.clone(), &ns);
    let lbs = svcs
        .list(&ListParams::default().fields("spec.type=LoadBalancer"))
        .await
        .unwrap();
    assert_eq!(
        lbs.items.iter().map(|s| s.name_any()).collect::<Vec<_>>(),
        ["lb"]
    );
    drop_namespace(c, &ns).await;
    for n in &names {
        delete_node(c, n).await;
    }
}

#[tokio::test]
async fn paging_with_continue() {
    let t = target().await;
    let c = &t.client;
    let ns = temp_namespace(c).await;
    for i in 0..5 {
        let r = create_service(c, &ns, json!({"apiVersion":"v1","kind":"Service","metadata":{"name":format!("svc-{i}")},"spec":{"ports":[{"port":80}]}})).await;
        assert_eq!(r.code, 201);
    }
    let first = raw(
        c,
        "GET",
        &format!("/api/v1/namespaces/{ns}/services?limit=2"),
        None,
        "",
    )
    .await;
    assert_eq!(first.body["items"].as_array().unwrap().len(), 2);
    assert_eq!(
        first.body["metadata"]["remainingItemCount"], 3,
        "exact remaining count"
    );
    let list_rv = first.body["metadata"]["resourceVersion"].clone();
    let mut names: Vec<String> = first.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    let mut token = first.body["metadata"]["continue"]
        .as_str()
        .unwrap()
        .to_string();
    loop {
        let page = raw(
            c,
            "GET",
            &format!("/api/v1/namespaces/{ns}/services?limit=2&continue={token}"),
            None,
            "",
        )
        .await;
        assert_eq!(page.code, 200, "{}", page.body);
        assert_eq!(
            page.body["metadata"]["resourceVersion"], list_rv,
            "every page reports the first page's resourceVersion"
        );
        names.extend(
            page.body["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["metadata"]["name"].as_str().unwrap().to_string()),
        );
        match page.body["metadata"]["continue"].as_str() {
            Some(t) if !t.is_empty() => token = t.to_string(),
            _ => {
                assert!(page.body["metadata"].get("remainingItemCount").is_none());
                break;
            }
        }
    }
    assert_eq!(
        names,
        ["svc-0", "svc-1", "svc-2", "svc-3", "svc-4"],
        "name order across pages"
    );
    let bad = raw(
        c,
        "GET",
        &format!("/api/v1/namespaces/{ns}/services?limit=1&continue=bogus"),
        None,
        "",
    )
    .await;
    assert_status(&bad, 400, "BadRequest");
    // resourceVersion=0 ignores limit.
    let rv0 = raw(
        c,
        "GET",
        &format!("/api/v1/namespaces/{ns}/services?limit=1&resourceVersion=0"),
        None,
        "",
    )
    .await;
    assert_eq!(rv0.body["items"].as_array().unwrap().len(), 5);
    assert!(rv0.body["metadata"].get("continue").is_none());
    let bad_match = raw(
        c,
        "GET",
        &format!("/api/v1/namespaces/{ns}/services?resourceVersionMatch=NotOlderThan"),
        None,
        "",
    )
    .await;
    assert_status(&bad_match, 422, "Invalid");
    assert_eq!(bad_match.body["details"]["kind"], "ListOptions");
    // kube's typed pager.
    let svcs: Api<Service> = Api::namespaced(c.clone(), &ns);
    let page = svcs.list(&ListParams::default().limit(3)).await.unwrap();
    assert_eq!(page.items.len(), 3);
    assert!(page.metadata.continue_.is_some());
    drop_namespace(c, &ns).await;
}

#[tokio::test]
async fn error_bodies() {
    let t = target().await;
    let c = &t.client;
    let truncated = raw(
        c,
        "POST",
        "/api/v1/nodes",
        Some("application/json"),
        r#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"node-z""#,
    )
    .await;
    assert_status(&truncated, 400, "BadRequest");
    assert!(
        truncated.body["message"]
            .as_str()
            .unwrap()
            .starts_with("the object provided is unrecognized (must be of type Node)")
    );
    let wrong_kind = raw(
        c,
        "POST",
        "/api/v1/nodes",
        Some("application/json"),
        r#"{"apiVersion":"v1","kind":"Service","metadata":{"name":"node-z"}}"#,
    )
    .await;
    assert_status(&wrong_kind, 400, "BadRequest");
    assert!(
        wrong_kind.body["message"]
            .as_str()
            .unwrap()
            .starts_with("Service in version \"v1\" cannot be handled as a Node")
    );
    let wrong_type = raw(
        c,
        "POST",
        "/api/v1/nodes",
        Some("application/json"),
        r#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"node-z","labels":"not-a-map"}}"#,
    )
    .await;
    assert_status(&wrong_type, 400, "BadRequest");
    assert!(wrong_type.body.get("details").is_none());
    let unknown = raw(c, "GET", "/api/v1/frobnicators", None, "").await;
    assert_eq!(unknown.code, 404);
    assert_eq!(unknown.body["reason"], "NotFound");
    let unknown_group = raw(c, "GET", "/apis/example.com/v1/widgets", None, "").await;
    assert_eq!(unknown_group.code, 404);
    let missing = raw(c, "GET", "/api/v1/nodes/no-such-node-at-all", None, "").await;
    assert_status(&missing, 404, "NotFound");
    assert_eq!(
        missing.body["message"],
        "nodes \"no-such-node-at-all\" not found"
    );

    let name = unique("node-e");
    create_node(
        c,
        json!({"apiVersion":"v1","kind":"Node","metadata":{"name":name}}),
    )
    .await;
    let path = format!("/api/v1/nodes/{name}");
    for ct in ["application/json", "text/plain"] {
        let r = patch(c, &path, ct, r#"{"metadata":{"labels":{"x":"y"}}}"#).await;
        assert_status(&r, 415, "UnsupportedMediaType");
        assert_eq!(r.body["message"], "415: Unsupported Media Type");
        assert_eq!(r.body["details"], json!({}));
    }
    let post_patch = raw(
        c,
        "POST",
        "/api/v1/nodes",
        Some("application/merge-patch+json"),
        r#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"node-z"}}"#,
    )
    .await;
    assert_status(&post_patch, 415, "UnsupportedMediaType");
    assert!(post_patch.body.get("details").is_none());
    let apply = patch(
        c,
        &path,
        "application/apply-patch+yaml",
        r#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"x"}}"#,
    )
    .await;
    assert_status(&apply, 422, "Invalid");
    assert_eq!(apply.body["details"]["kind"], "PatchOptions");
    let truncated_merge = patch(
        c,
        &path,
        "application/merge-patch+json",
        r#"{"metadata":{"labels":"#,
    )
    .await;
    assert_status(&truncated_merge, 400, "BadRequest");
    let array_smp = patch(
        c,
        &path,
        "application/strategic-merge-patch+json",
        r#"[{"op":"add"}]"#,
    )
    .await;
    assert_status(&array_smp, 400, "BadRequest");
    let object_json_patch = patch(
        c,
        &path,
        "application/json-patch+json",
        r#"{"op":"remove","path":"/metadata/labels/env"}"#,
    )
    .await;
    assert_status(&object_json_patch, 400, "BadRequest");
    let bad_label = patch(
        c,
        &path,
        "application/merge-patch+json",
        r#"{"metadata":{"labels":{"bad":"has spaces"}}}"#,
    )
    .await;
    assert_status(&bad_label, 422, "Invalid");
    assert_eq!(bad_label.body["details"]["kind"], "Node");
    assert_eq!(
        bad_label.body["details"]["causes"][0]["field"],
        "metadata.labels"
    );
    let put_collection = raw(c, "PUT", "/api/v1/nodes", Some("application/json"), "{}").await;
    assert_status(&put_collection, 405, "MethodNotAllowed");
    delete_node(c, &name).await;
}

#[tokio::test]
async fn leases() {
    let t = target().await;
    let c = &t.client;
    let name = unique("lease");
    let base = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases";
    let body = json!({"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":name},
        "spec":{"holderIdentity":"ccm-1","leaseDurationSeconds":15,"acquireTime":"2026-01-01T00:00:00.000000Z","renewTime":"2026-01-01T00:00:00.000000Z","leaseTransitions":0}});
    let created = raw_json(c, "POST", base, &body).await;
    assert_eq!(created.code, 201, "{}", created.body);
    assert_eq!(created.body["spec"]["leaseTransitions"], 0);
    assert_eq!(
        created.body["spec"]["renewTime"],
        "2026-01-01T00:00:00.000000Z"
    );
    let dup = raw_json(c, "POST", base, &body).await;
    assert_status(&dup, 409, "AlreadyExists");
    assert_eq!(
        dup.body["details"],
        json!({"name": name, "group": "coordination.k8s.io", "kind": "leases"})
    );
    for bad in ["2026-01-01T00:00:00Z", "2026-01-01T00:00:00.123Z"] {
        let r = raw_json(c, "POST", base, &json!({"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":unique("lease-bad")},"spec":{"renewTime":bad}})).await;
        assert_status(&r, 400, "BadRequest");
        assert!(
            r.body["message"]
                .as_str()
                .unwrap()
                .starts_with("Lease in version \"v1\" cannot be handled as a Lease: parsing time")
        );
    }
    let cur = created.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let mut renew = body.clone();
    renew["metadata"]["resourceVersion"] = json!(cur);
    renew["spec"]["renewTime"] = json!("2026-01-01T00:00:10.000000Z");
    let ok = raw_json(c, "PUT", &format!("{base}/{name}"), &renew).await;
    assert_eq!(ok.code, 200);
    let stale = raw_json(c, "PUT", &format!("{base}/{name}"), &renew).await;
    assert_status(&stale, 409, "Conflict");
    assert_eq!(stale.body["details"]["group"], "coordination.k8s.io");
    let mut no_rv = body.clone();
    no_rv["spec"]["renewTime"] = json!("2026-01-01T00:00:30.000000Z");
    let unconditional = raw_json(c, "PUT", &format!("{base}/{name}"), &no_rv).await;
    assert_status(&unconditional, 422, "Invalid");
    assert_eq!(
        unconditional.body["details"]["causes"][0]["field"],
        "metadata.resourceVersion"
    );
    assert_eq!(unconditional.body["details"]["kind"], "leases");

    let other = unique("lease-put");
    let put_create = raw_json(c, "PUT", &format!("{base}/{other}"), &json!({"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":other},"spec":{"holderIdentity":"x","leaseDurationSeconds":15}})).await;
    assert_eq!(
        put_create.code, 201,
        "PUT to a missing Lease creates it: {}",
        put_create.body
    );
    let del = raw(c, "DELETE", &format!("{base}/{other}"), None, "").await;
    assert_eq!(del.code, 200);
    assert_eq!(del.body["kind"], "Status");
    assert_eq!(del.body["details"]["group"], "coordination.k8s.io");

    // Typed access through kube.
    let api: Api<Lease> = Api::namespaced(c.clone(), "kube-system");
    let l = api.get(&name).await.unwrap();
    assert_eq!(l.spec.unwrap().holder_identity.as_deref(), Some("ccm-1"));
    api.delete(&name, &DeleteParams::default()).await.unwrap();
}

#[tokio::test]
async fn events_in_both_groups() {
    let t = target().await;
    let c = &t.client;
    let name = unique("evt");
    let base = "/apis/events.k8s.io/v1/namespaces/default/events";
    let only_name = raw_json(
        c,
        "POST",
        base,
        &json!({"apiVersion":"events.k8s.io/v1","kind":"Event","metadata":{"name":name}}),
    )
    .await;
    assert_status(&only_name, 422, "Invalid");
    let fields: Vec<&str> = only_name.body["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, ["eventTime", "type"]);
    let full = json!({"apiVersion":"events.k8s.io/v1","kind":"Event","metadata":{"name":name},
        "eventTime":"2026-01-01T00:00:00.000000Z","type":"Normal","reason":"Synced","action":"InitializeNode",
        "note":"initialized","reportingController":"cloud-controller-manager","reportingInstance":"ccm-1",
        "regarding":{"kind":"Node","apiVersion":"v1","name":"node-a"}});
    let created = raw_json(c, "POST", base, &full).await;
    assert_eq!(created.code, 201, "{}", created.body);
    assert_eq!(created.body["deprecatedSource"], json!({}));
    assert!(created.body["deprecatedFirstTimestamp"].is_null());
    let core = raw(
        c,
        "GET",
        &format!("/api/v1/namespaces/default/events/{name}"),
        None,
        "",
    )
    .await;
    assert_eq!(core.code, 200);
    assert_eq!(core.body["apiVersion"], "v1");
    assert_eq!(core.body["involvedObject"]["name"], "node-a");
    assert_eq!(core.body["message"], "initialized");
    assert_eq!(core.body["reportingComponent"], "cloud-controller-manager");
    let bad_time = raw_json(c, "POST", base, &json!({"apiVersion":"events.k8s.io/v1","kind":"Event","metadata":{"name":unique("evt")},"eventTime":"2026-01-01T00:00:00Z"})).await;
    assert_status(&bad_time, 400, "BadRequest");
    // A core/v1 event about a cluster-scoped object must live in default.
    let wrong_ns = raw_json(c, "POST", "/api/v1/namespaces/kube-system/events", &json!({"apiVersion":"v1","kind":"Event","metadata":{"name":unique("evt")},"involvedObject":{"kind":"Node","name":"node-a"},"reason":"Synced","message":"x"})).await;
    assert_status(&wrong_ns, 422, "Invalid");
    assert_eq!(
        wrong_ns.body["details"]["causes"][0]["field"],
        "involvedObject.namespace"
    );
    let empty = raw_json(
        c,
        "POST",
        "/api/v1/namespaces/default/events",
        &json!({"apiVersion":"v1","kind":"Event","metadata":{"name":unique("evt")}}),
    )
    .await;
    assert_eq!(empty.code, 201);
    assert_eq!(empty.body["involvedObject"], json!({}));
    let _ = raw(c, "DELETE", &format!("{base}/{name}"), None, "").await;
}

#[tokio::test]
async fn token_and_access_reviews() {
    let t = target().await;
    let c = &t.client;
    let bogus = raw_json(c, "POST", "/apis/authentication.k8s.io/v1/tokenreviews", &json!({"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"bogus-token"}})).await;
    assert_eq!(bogus.code, 201);
    assert!(bogus.body["status"].get("authenticated").is_none());
    assert_eq!(bogus.body["status"]["user"], json!({}));
    assert!(bogus.body["status"]["error"].is_string());
    let empty = raw_json(
        c,
        "POST",
        "/apis/authentication.k8s.io/v1/tokenreviews",
        &json!({"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{}}),
    )
    .await;
    assert_status(&empty, 400, "BadRequest");
    let sar = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
    let alice = raw_json(c, "POST", sar, &json!({"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"user":"alice-nobody","resourceAttributes":{"verb":"get","resource":"nodes","version":"v1"}}})).await;
    assert_eq!(alice.code, 201);
    assert_eq!(alice.body["status"]["allowed"], false);
    let masters = raw_json(c, "POST", sar, &json!({"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"user":"bob","groups":["system:masters"],"resourceAttributes":{"verb":"get","resource":"nodes","name":"node-a"}}})).await;
    assert_eq!(masters.body["status"], json!({"allowed": true}));
    let invalid = raw_json(c, "POST", sar, &json!({"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","spec":{"resourceAttributes":{"verb":"get","resource":"nodes"}}})).await;
    assert_status(&invalid, 422, "Invalid");
    assert_eq!(invalid.body["details"]["group"], "authorization.k8s.io");
}

#[tokio::test]
async fn namespaces_lifecycle() {
    let t = target().await;
    let c = &t.client;
    let api: Api<Namespace> = Api::all(c.clone());
    for ns in ["default", "kube-system", "kube-public"] {
        let n = api.get(ns).await.unwrap();
        assert_eq!(n.labels()["kubernetes.io/metadata.name"], ns);
        assert_eq!(n.status.unwrap().phase.as_deref(), Some("Active"));
    }
    let ns = temp_namespace(c).await;
    create_service(c, &ns, json!({"apiVersion":"v1","kind":"Service","metadata":{"name":"s"},"spec":{"ports":[{"port":80}]}})).await;
    let del = raw(c, "DELETE", &format!("/api/v1/namespaces/{ns}"), None, "").await;
    assert_eq!(del.code, 200);
    assert!(del.body["metadata"]["deletionTimestamp"].is_string());
    // The namespace and its content go away (a real cluster's namespace controller takes a while).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let r = raw(c, "GET", &format!("/api/v1/namespaces/{ns}"), None, "").await;
        if r.code == 404 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "namespace {ns} was not removed"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let svc = raw(
        c,
        "GET",
        &format!("/api/v1/namespaces/{ns}/services/s"),
        None,
        "",
    )
    .await;
    assert_eq!(svc.code, 404);
    let protected = raw(
        c,
        "DELETE",
        "/api/v1/namespaces/kube-system",
        Some("application/json"),
        "",
    )
    .await;
    assert_status(&protected, 403, "Forbidden");
}

#[tokio::test]
async fn generate_name() {
    let t = target().await;
    let c = &t.client;
    let r = raw_json(
        c,
        "POST",
        "/api/v1/nodes",
        &json!({"apiVersion":"v1","kind":"Node","metadata":{"generateName":"gen-"}}),
    )
    .await;
    assert_eq!(r.code, 201);
    let name = r.body["metadata"]["name"].as_str().unwrap().to_string();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");
    delete_node(c, &name).await;
}

#[tokio::test]
async fn watch_with_selector_reports_transitions() {
    let t = target().await;
    let c = &t.client;
    let name = unique("node-sel");
    let list = raw(c, "GET", "/api/v1/nodes?limit=1", None, "").await;
    let start = list.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let path = format!(
        "/api/v1/nodes?watch=1&resourceVersion={start}&timeoutSeconds=3&labelSelector=tr%3D{name}"
    );
    let c2 = c.clone();
    let watcher = tokio::spawn(async move { watch_lines(&c2, &path).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    create_node(
        c,
        json!({"apiVersion":"v1","kind":"Node","metadata":{"name":name,"labels":{"tr":name}}}),
    )
    .await;
    let away = patch(
        c,
        &format!("/api/v1/nodes/{name}"),
        "application/merge-patch+json",
        r#"{"metadata":{"labels":{"tr":"elsewhere"}}}"#,
    )
    .await;
    let back = patch(
        c,
        &format!("/api/v1/nodes/{name}"),
        "application/merge-patch+json",
        &json!({"metadata":{"labels":{"tr": name}}}).to_string(),
    )
    .await;
    let lines = watcher.await.unwrap();
    let events: Vec<(&str, &str)> = lines
        .iter()
        .filter(|l| l["type"] != "BOOKMARK")
        .map(|l| {
            (
                l["type"].as_str().unwrap(),
                l["object"]["metadata"]["resourceVersion"].as_str().unwrap(),
            )
        })
        .collect();
    let away_rv = away.body["metadata"]["resourceVersion"].as_str().unwrap();
    let back_rv = back.body["metadata"]["resourceVersion"].as_str().unwrap();
    assert_eq!(events.len(), 3, "{lines:?}");
    assert_eq!(events[0].0, "ADDED");
    assert_eq!(events[1], ("DELETED", away_rv));
    assert_eq!(events[2], ("ADDED", back_rv));
    delete_node(c, &name).await;
}

/// Sends a request with an `Accept` header; returns the status and the body (parsed as JSON, or as
/// newline-delimited JSON events for a watch).
async fn accept(client: &Client, path: &str, accept: &str) -> (u16, Vec<Value>) {
    let req = http::Request::builder()
        .method("GET")
        .uri(path)
        .header("accept", accept)
        .body(kube::client::Body::from(Vec::new()))
        .expect("request");
    let resp = client.send(req).await.expect("send request");
    let code = resp.status().as_u16();
    let bytes = tokio::time::timeout(
        Duration::from_secs(30),
        http_body_util::BodyExt::collect(resp.into_body()),
    )
    .await
    .expect("the answer ends in time")
    .expect("read the answer")
    .to_bytes();
    let values = bytes
        .split(|b| *b == b'\n')
        .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
        .map(|l| serde_json::from_slice(l).unwrap_or(Value::Null))
        .collect();
    (code, values)
}

const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

fn column_names(table: &Value) -> Vec<&str> {
    table["columnDefinitions"]
        .as_array()
        .map(|c| c.iter().filter_map(|c| c["name"].as_str()).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn table_output_for_get_list_and_watch() {
    let t = target().await;
    let c = &t.client;
    let label = unique("table");
    let names = [unique("table-a"), unique("table-b")];
    for name in &names {
        create_node(
            c,
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"table-test": label}},
                   "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.9"}]}}),
        )
        .await;
    }
    let node_columns = [
        "Name",
        "Status",
        "Roles",
        "Age",
        "Version",
        "Internal-IP",
        "External-IP",
        "OS-Image",
        "Kernel-Version",
        "Container-Runtime",
    ];

    // GET: one row, all cells (the wide ones too), the object as PartialObjectMetadata.
    let (code, body) = accept(c, &format!("/api/v1/nodes/{}", names[0]), TABLE).await;
    assert_eq!(code, 200, "{body:?}");
    let table = &body[0];
    assert_eq!(
        (table["kind"].as_str(), table["apiVersion"].as_str()),
        (Some("Table"), Some("meta.k8s.io/v1"))
    );
    assert_eq!(column_names(table), node_columns);
    assert_eq!(table["columnDefinitions"][5]["priority"], 1);
    let row = &table["rows"][0];
    assert_eq!(row["cells"][0], names[0].as_str());
    assert_eq!(row["cells"][1], "Unknown");
    assert_eq!(row["cells"][5], "10.0.0.9");
    assert_eq!(row["cells"][6], "<none>");
    assert_eq!(row["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(row["object"]["metadata"]["name"], names[0].as_str());

    // LIST: a row per object; includeObject=Object carries the object itself.
    let selector = format!("labelSelector=table-test%3D{label}");
    let (code, body) = accept(
        c,
        &format!("/api/v1/nodes?{selector}&includeObject=Object"),
        TABLE,
    )
    .await;
    assert_eq!(code, 200, "{body:?}");
    let rows = body[0]["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1]["object"]["kind"], "Node");
    assert!(body[0]["metadata"]["resourceVersion"].is_string());
    let (code, _) = accept(
        c,
        &format!("/api/v1/nodes?{selector}&includeObject=Everything"),
        TABLE,
    )
    .await;
    assert_eq!(code, 400);

    // WATCH: the column definitions come with the first event only.
    let (code, events) = accept(
        c,
        &format!("/api/v1/nodes?watch=true&resourceVersion=0&timeoutSeconds=1&{selector}"),
        TABLE,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0]["type"], "ADDED");
    assert_eq!(column_names(&events[0]["object"]), node_columns);
    assert!(
        events[1]["object"]["columnDefinitions"].is_null(),
        "{}",
        events[1]
    );
    assert_eq!(
        events[1]["object"]["rows"][0]["cells"]
            .as_array()
            .map(Vec::len),
        Some(10)
    );

    // A Table nobody can produce is not acceptable.
    let (code, _) = accept(
        c,
        "/api/v1/nodes",
        "application/json;as=Table;v=v9;g=meta.k8s.io",
    )
    .await;
    assert_eq!(code, 406);
    for name in &names {
        delete_node(c, name).await;
    }
}

#[tokio::test]
async fn field_validation_of_writes() {
    let t = target().await;
    let c = &t.client;
    let name = unique("fields");
    let body = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "colour": "blue"},
                      "spec": {"unknownField": 1}});
    let r = raw_json(c, "POST", "/api/v1/nodes?fieldValidation=Strict", &body).await;
    assert_status(&r, 400, "BadRequest");
    assert_eq!(
        r.body["message"],
        r#"Node in version "v1" cannot be handled as a Node: strict decoding error: unknown field "metadata.colour", unknown field "spec.unknownField""#
    );
    let r = raw_json(c, "POST", "/api/v1/nodes?fieldValidation=Warn", &body).await;
    assert_eq!(r.code, 201, "{}", r.body);
    let warnings: Vec<&str> = r
        .headers
        .get_all("warning")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    assert_eq!(
        warnings,
        [
            r#"299 - "unknown field \"metadata.colour\"""#,
            r#"299 - "unknown field \"spec.unknownField\"""#
        ]
    );
    assert!(r.body["spec"].get("unknownField").is_none(), "{}", r.body);
    let r = patch(
        c,
        &format!("/api/v1/nodes/{name}?fieldValidation=Strict"),
        "application/merge-patch+json",
        r#"{"spec":{"providerID":"fake://x","bogus":true}}"#,
    )
    .await;
    // A patch result with an unknown field is invalid (422), the cause naming the patch.
    assert_status(&r, 422, "Invalid");
    let message = r.body["message"].as_str().unwrap_or("");
    assert!(
        message.starts_with(r#" "" is invalid: patch: Invalid value: "#),
        "{message}"
    );
    assert!(
        message.ends_with(r#"strict decoding error: unknown field "spec.bogus""#),
        "{message}"
    );
    assert_eq!(r.body["details"]["causes"][0]["field"], "patch");
    assert_eq!(
        r.body["details"]["causes"][0]["reason"],
        "FieldValueInvalid"
    );
    let r = raw_json(c, "POST", "/api/v1/nodes?fieldValidation=Loud", &body).await;
    assert_status(&r, 422, "Invalid");
    assert_eq!(r.body["details"]["kind"], "CreateOptions");
    delete_node(c, &name).await;
}

#[tokio::test]
async fn pods_by_node_and_phase() {
    let t = target().await;
    let c = &t.client;
    let ns = temp_namespace(c).await;
    let node = unique("pod-node");
    let pod = |name: &str, node: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
               "spec": {"nodeName": node, "automountServiceAccountToken": false,
                        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
               "status": {"phase": "Running"}})
    };
    let mut created = None;
    // A real server's ServiceAccount admission waits for the namespace's default account.
    for _ in 0..40 {
        let r = raw_json(
            c,
            "POST",
            &format!("/api/v1/namespaces/{ns}/pods"),
            &pod("on-node", &node),
        )
        .await;
        if r.code == 201 {
            created = Some(r.body);
            break;
        }
        assert!(
            r.body["message"]
                .as_str()
                .unwrap_or("")
                .contains("serviceaccount"),
            "{}",
            r.body
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let created = created.expect("the pod was created");
    assert_eq!(
        created["status"]["phase"], "Pending",
        "create resets the status"
    );
    assert_eq!(created["status"]["qosClass"], "BestEffort");
    assert_eq!(created["spec"]["restartPolicy"], "Always");
    assert_eq!(
        created["spec"]["containers"][0]["imagePullPolicy"],
        "IfNotPresent"
    );
    let r = raw_json(
        c,
        "POST",
        &format!("/api/v1/namespaces/{ns}/pods"),
        &pod("elsewhere", "other-node"),
    )
    .await;
    assert_eq!(r.code, 201, "{}", r.body);

    let list = |selector: String| {
        let path = format!("/api/v1/pods?fieldSelector={selector}");
        async move {
            let r = raw(c, "GET", &path, None, "").await;
            assert_eq!(r.code, 200, "{}", r.body);
            let mut names: Vec<String> = r.body["items"]
                .as_array()
                .map(|i| {
                    i.iter()
                        .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            names.sort();
            names
        }
    };
    // kubectl describe node's query.
    let describe =
        format!("spec.nodeName%3D{node}%2Cstatus.phase%21%3DSucceeded%2Cstatus.phase%21%3DFailed");
    assert_eq!(list(describe.clone()).await, ["on-node"]);
    let status = json!({"status": {"phase": "Succeeded"}});
    let r = patch(
        c,
        &format!("/api/v1/namespaces/{ns}/pods/on-node/status"),
        "application/merge-patch+json",
        &status.to_string(),
    )
    .await;
    assert_eq!(r.code, 200, "{}", r.body);
    assert!(list(describe).await.is_empty());
    assert_eq!(list(format!("spec.nodeName%3D{node}")).await, ["on-node"]);
    let r = raw(
        c,
        "GET",
        "/api/v1/pods?fieldSelector=spec.colour%3Dred",
        None,
        "",
    )
    .await;
    assert_status(&r, 400, "BadRequest");
    // The spec is immutable but for a few fields.
    let r = patch(
        c,
        &format!("/api/v1/namespaces/{ns}/pods/elsewhere"),
        "application/merge-patch+json",
        r#"{"spec":{"restartPolicy":"Never"}}"#,
    )
    .await;
    assert_status(&r, 422, "Invalid");
    drop_namespace(c, &ns).await;
}
