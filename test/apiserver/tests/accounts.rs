//! ServiceAccounts and their `token` subresource (TokenRequest), the tokens it issues (accepted,
//! named in the request log and in TokenReviews, rejected once expired or once their account is
//! gone), ConfigMaps, and the request log entries of unknown resources.

mod common;

use std::time::Duration;

use common::{assert_status, client_for, raw, raw_json};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};
use test_apiserver::{DEFAULT_AUDIENCE, TestApiServer};

const SA_USER: &str = "system:serviceaccount:kube-system:cloud-node-controller";

async fn server(shortest_token: Duration) -> (TestApiServer, kube::Client) {
    let s = TestApiServer::builder()
        .min_token_expiration(shortest_token)
        .start()
        .await
        .unwrap();
    let c = client_for(s.kubeconfig_path()).await;
    (s, c)
}

/// A client of `server` that authenticates with `token` (and no retries).
fn token_client(server: &TestApiServer, token: &str) -> kube::Client {
    let mut cfg = server.client_config().unwrap();
    cfg.auth_info = serde_json::from_value(json!({ "token": token })).unwrap();
    cfg.default_retry = false;
    kube::Client::try_from(cfg).unwrap()
}

fn account(name: &str) -> ServiceAccount {
    serde_json::from_value(json!({"metadata": {"name": name}})).unwrap()
}

/// Asks for a token of `kube-system/<name>` through kube's typed `create_token_request`; the token and its lifetime.
async fn request_token(c: &kube::Client, name: &str, seconds: Option<i64>) -> (String, i64) {
    let api: Api<ServiceAccount> = Api::namespaced(c.clone(), "kube-system");
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: seconds,
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let answer = api
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .unwrap();
    let lifetime = answer.spec.and_then(|s| s.expiration_seconds).unwrap();
    (answer.status.and_then(|s| s.token).unwrap(), lifetime)
}

async fn token_review(c: &kube::Client, token: &str, audiences: Option<&[&str]>) -> Value {
    let mut spec = json!({ "token": token });
    if let Some(a) = audiences {
        spec["audiences"] = json!(a);
    }
    let r = raw_json(
        c,
        "POST",
        "/apis/authentication.k8s.io/v1/tokenreviews",
        &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}),
    )
    .await;
    assert_eq!(r.code, 201, "{}", r.body);
    r.body["status"].clone()
}

#[tokio::test]
async fn service_accounts_are_created_listed_read_and_deleted() {
    let (s, c) = server(Duration::from_secs(600)).await;
    let api: Api<ServiceAccount> = Api::namespaced(c.clone(), "kube-system");
    let created = api
        .create(&PostParams::default(), &account("cloud-node-controller"))
        .await
        .unwrap();
    assert!(created.metadata.uid.is_some());
    api.create(&PostParams::default(), &account("service-lb-controller"))
        .await
        .unwrap();
    let duplicate = raw_json(
        &c,
        "POST",
        "/api/v1/namespaces/kube-system/serviceaccounts",
        &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "service-lb-controller"}}),
    )
    .await;
    assert_status(&duplicate, 409, "AlreadyExists");
    assert_eq!(
        duplicate.body["message"],
        "serviceaccounts \"service-lb-controller\" already exists"
    );
    let invalid = raw_json(
        &c,
        "POST",
        "/api/v1/namespaces/kube-system/serviceaccounts",
        &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "Not_Valid"}}),
    )
    .await;
    assert_status(&invalid, 422, "Invalid");

    let names: Vec<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|a| a.metadata.name)
        .collect();
    assert_eq!(names, ["cloud-node-controller", "service-lb-controller"]);
    let everywhere: Api<ServiceAccount> = Api::all(c.clone());
    assert_eq!(
        everywhere
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        2
    );
    let got = api.get("cloud-node-controller").await.unwrap();
    assert_eq!(got.metadata.uid, created.metadata.uid);

    // DELETE answers with the deleted object, then the name is gone.
    let deleted = raw(
        &c,
        "DELETE",
        "/api/v1/namespaces/kube-system/serviceaccounts/service-lb-controller",
        None,
        "",
    )
    .await;
    assert_eq!(deleted.code, 200, "{}", deleted.body);
    assert_eq!(deleted.body["kind"], "ServiceAccount");
    assert_eq!(deleted.body["metadata"]["name"], "service-lb-controller");
    let missing = raw(
        &c,
        "GET",
        "/api/v1/namespaces/kube-system/serviceaccounts/service-lb-controller",
        None,
        "",
    )
    .await;
    assert_status(&missing, 404, "NotFound");
    assert_eq!(
        missing.body["message"],
        "serviceaccounts \"service-lb-controller\" not found"
    );
    assert!(
        api.delete("cloud-node-controller", &DeleteParams::default())
            .await
            .is_ok()
    );
    s.shutdown().await;
}

#[tokio::test]
async fn issued_tokens_authenticate_as_the_service_account() {
    let (s, c) = server(Duration::from_secs(600)).await;
    let api: Api<ServiceAccount> = Api::namespaced(c.clone(), "kube-system");
    let sa = api
        .create(&PostParams::default(), &account("cloud-node-controller"))
        .await
        .unwrap();

    // Raw answer: 201 with the TokenRequest shape of a real server.
    let r = raw_json(
        &c,
        "POST",
        "/api/v1/namespaces/kube-system/serviceaccounts/cloud-node-controller/token",
        &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 600}}),
    )
    .await;
    assert_eq!(r.code, 201, "{}", r.body);
    assert_eq!(r.body["kind"], "TokenRequest");
    assert_eq!(r.body["apiVersion"], "authentication.k8s.io/v1");
    assert_eq!(r.body["metadata"]["name"], "cloud-node-controller");
    assert_eq!(r.body["metadata"]["namespace"], "kube-system");
    assert_eq!(
        r.body["spec"],
        json!({"audiences": [DEFAULT_AUDIENCE], "expirationSeconds": 600, "boundObjectRef": null})
    );
    let raw_token = r.body["status"]["token"].as_str().unwrap().to_string();
    assert_eq!(raw_token.split('.').count(), 3, "JWT-shaped: {raw_token}");
    let seconds = |v: &Value| {
        v.as_str()
            .unwrap()
            .parse::<jiff::Timestamp>()
            .unwrap()
            .as_second()
    };
    assert_eq!(
        seconds(&r.body["status"]["expirationTimestamp"])
            - seconds(&r.body["metadata"]["creationTimestamp"]),
        600
    );

    // Through kube's typed `create_token_request`, with the default lifetime of one hour.
    let (token, lifetime) = request_token(&c, "cloud-node-controller", None).await;
    assert_eq!(lifetime, 3600);
    assert_ne!(token, raw_token);

    // Requests with the token are served and logged as the service account.
    s.controls().clear_request_log();
    let as_sa = token_client(&s, &token);
    let nodes = raw(&as_sa, "GET", "/api/v1/nodes", None, "").await;
    assert_eq!(nodes.code, 200);
    let log = s.controls().request_log();
    assert_eq!(log.len(), 1);
    assert_eq!(
        (
            log[0].verb.as_str(),
            log[0].resource.as_str(),
            log[0].user.as_str()
        ),
        ("list", "nodes", SA_USER)
    );
    assert_eq!(s.controls().live_service_account_tokens(), 2);

    // The token request itself is logged as a create of serviceaccounts/token by its caller.
    request_token(&as_sa, "cloud-node-controller", Some(600)).await;
    let last = s.controls().request_log().pop().unwrap();
    assert_eq!(
        (
            last.verb.as_str(),
            last.resource.as_str(),
            last.subresource.as_str(),
            last.name.as_str(),
            last.user.as_str(),
            last.code
        ),
        (
            "create",
            "serviceaccounts",
            "token",
            "cloud-node-controller",
            SA_USER,
            201
        )
    );

    // TokenReview: the user with the account's uid and groups; other audiences are refused.
    let review = token_review(&c, &token, None).await;
    assert_eq!(review["authenticated"], true);
    assert_eq!(
        review["user"],
        json!({
            "username": SA_USER,
            "uid": sa.metadata.uid.unwrap(),
            "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"]
        })
    );
    assert_eq!(review["audiences"], json!([DEFAULT_AUDIENCE]));
    let review = token_review(&c, &token, Some(&["some-other-audience"])).await;
    assert_eq!(
        review,
        json!({"user": {}, "error": format!("[invalid bearer token, token audiences [\"{DEFAULT_AUDIENCE}\"] is invalid for the target audiences [\"some-other-audience\"]]")})
    );

    // A token for another audience does not authenticate API requests.
    let r = raw_json(
        &c,
        "POST",
        "/api/v1/namespaces/kube-system/serviceaccounts/cloud-node-controller/token",
        &json!({"spec": {"audiences": ["vault"]}}),
    )
    .await;
    assert_eq!(r.code, 201, "{}", r.body);
    let vault = token_client(&s, r.body["status"]["token"].as_str().unwrap());
    assert_status(
        &raw(&vault, "GET", "/api/v1/nodes", None, "").await,
        401,
        "Unauthorized",
    );

    // Deleting the account invalidates its tokens, even if it is created again.
    api.delete("cloud-node-controller", &DeleteParams::default())
        .await
        .unwrap();
    api.create(&PostParams::default(), &account("cloud-node-controller"))
        .await
        .unwrap();
    assert_status(
        &raw(&as_sa, "GET", "/api/v1/nodes", None, "").await,
        401,
        "Unauthorized",
    );
    assert_eq!(
        token_review(&c, &token, None).await["error"],
        "[invalid bearer token, service account token has been invalidated]"
    );
    s.shutdown().await;
}

#[tokio::test]
async fn tokens_expire_after_their_lifetime() {
    let (s, c) = server(Duration::from_secs(1)).await;
    let api: Api<ServiceAccount> = Api::namespaced(c.clone(), "kube-system");
    api.create(&PostParams::default(), &account("cloud-node-controller"))
        .await
        .unwrap();
    let (token, _) = request_token(&c, "cloud-node-controller", Some(1)).await;
    let as_sa = token_client(&s, &token);
    assert_eq!(
        raw(&as_sa, "GET", "/api/v1/nodes", None, "").await.code,
        200
    );
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let expired = raw(&as_sa, "GET", "/api/v1/nodes", None, "").await;
    assert_status(&expired, 401, "Unauthorized");
    assert_eq!(
        token_review(&c, &token, None).await,
        json!({"user": {}, "error": "[invalid bearer token, service account token has expired]"})
    );
    assert_eq!(s.controls().live_service_account_tokens(), 0);
    s.shutdown().await;
}

#[tokio::test]
async fn bad_token_requests() {
    let (s, c) = server(Duration::from_secs(600)).await;
    let path = "/api/v1/namespaces/kube-system/serviceaccounts/cloud-node-controller/token";
    // No such account.
    let r = raw_json(&c, "POST", path, &json!({"spec": {}})).await;
    assert_status(&r, 404, "NotFound");
    assert_eq!(
        r.body["message"],
        "serviceaccounts \"cloud-node-controller\" not found"
    );
    let api: Api<ServiceAccount> = Api::namespaced(c.clone(), "kube-system");
    api.create(&PostParams::default(), &account("cloud-node-controller"))
        .await
        .unwrap();
    // Too short a lifetime, as a real server refuses it.
    let r = raw_json(
        &c,
        "POST",
        path,
        &json!({"spec": {"expirationSeconds": 599}}),
    )
    .await;
    assert_status(&r, 422, "Invalid");
    assert_eq!(
        r.body["message"],
        "TokenRequest.authentication.k8s.io \"cloud-node-controller\" is invalid: spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes"
    );
    let r = raw_json(
        &c,
        "POST",
        path,
        &json!({"spec": {"expirationSeconds": 5_000_000_000_i64}}),
    )
    .await;
    assert_status(&r, 422, "Invalid");
    // Wrong kind, wrong field type, object-bound tokens, other verbs.
    let r = raw_json(
        &c,
        "POST",
        path,
        &json!({"apiVersion": "v1", "kind": "Node"}),
    )
    .await;
    assert_status(&r, 400, "BadRequest");
    let r = raw_json(
        &c,
        "POST",
        path,
        &json!({"spec": {"expirationSeconds": "soon"}}),
    )
    .await;
    assert_status(&r, 400, "BadRequest");
    let r = raw_json(
        &c,
        "POST",
        path,
        &json!({"spec": {"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p"}}}),
    )
    .await;
    assert_status(&r, 400, "BadRequest");
    assert_status(
        &raw(&c, "GET", path, None, "").await,
        405,
        "MethodNotAllowed",
    );
    assert_eq!(s.controls().live_service_account_tokens(), 0);

    // Discovery lists the subresource.
    let v1 = raw(&c, "GET", "/api/v1", None, "").await;
    let token = v1.body["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "serviceaccounts/token")
        .cloned()
        .unwrap();
    assert_eq!(token["kind"], "TokenRequest");
    assert_eq!(token["verbs"], json!(["create"]));
    s.shutdown().await;
}

fn config_map(name: &str, data: Value) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).unwrap()
}

#[tokio::test]
async fn config_maps_are_served() {
    let (s, c) = server(Duration::from_secs(600)).await;
    let api: Api<ConfigMap> = Api::namespaced(c.clone(), "kube-system");
    // The lookup the daemon makes at start-up is an ordinary NotFound until the map exists.
    let r = raw(
        &c,
        "GET",
        "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication",
        None,
        "",
    )
    .await;
    assert_status(&r, 404, "NotFound");
    assert_eq!(
        r.body["message"],
        "configmaps \"extension-apiserver-authentication\" not found"
    );
    let created = api
        .create(
            &PostParams::default(),
            &config_map(
                "extension-apiserver-authentication",
                json!({"client-ca-file": "-----BEGIN CERTIFICATE-----\n"}),
            ),
        )
        .await
        .unwrap();
    let got = api.get("extension-apiserver-authentication").await.unwrap();
    assert_eq!(got.data, created.data);
    let mut updated = got.clone();
    updated
        .data
        .get_or_insert_with(Default::default)
        .insert("requestheader-allowed-names".into(), "[]".into());
    let updated = api
        .replace(
            "extension-apiserver-authentication",
            &PostParams::default(),
            &updated,
        )
        .await
        .unwrap();
    assert_eq!(updated.data.as_ref().unwrap().len(), 2);
    assert_eq!(
        api.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );

    // Keys are validated; immutable maps keep their data.
    let bad = raw_json(
        &c,
        "POST",
        "/api/v1/namespaces/kube-system/configmaps",
        &json!({"metadata": {"name": "bad"}, "data": {"no spaces": "x"}}),
    )
    .await;
    assert_status(&bad, 422, "Invalid");
    assert_eq!(bad.body["details"]["causes"][0]["field"], "data[no spaces]");
    let frozen = raw_json(
        &c,
        "POST",
        "/api/v1/namespaces/kube-system/configmaps",
        &json!({"metadata": {"name": "frozen"}, "data": {"a": "1"}, "immutable": true}),
    )
    .await;
    assert_eq!(frozen.code, 201, "{}", frozen.body);
    let change = raw(
        &c,
        "PATCH",
        "/api/v1/namespaces/kube-system/configmaps/frozen",
        Some("application/merge-patch+json"),
        r#"{"data":{"a":"2"}}"#,
    )
    .await;
    assert_status(&change, 422, "Invalid");
    assert_eq!(
        change.body["details"]["causes"][0]["message"],
        "Forbidden: field is immutable when `immutable` is set"
    );

    // DELETE answers a Status.
    let deleted = raw(
        &c,
        "DELETE",
        "/api/v1/namespaces/kube-system/configmaps/frozen",
        None,
        "",
    )
    .await;
    assert_eq!(deleted.code, 200);
    assert_eq!(deleted.body["kind"], "Status");
    assert_eq!(deleted.body["status"], "Success");
    api.delete(
        "extension-apiserver-authentication",
        &DeleteParams::default(),
    )
    .await
    .unwrap();
    assert!(
        api.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    s.shutdown().await;
}

#[tokio::test]
async fn namespace_deletion_removes_accounts_and_config_maps() {
    let (s, c) = server(Duration::from_secs(600)).await;
    let ns = raw_json(
        &c,
        "POST",
        "/api/v1/namespaces",
        &json!({"metadata": {"name": "scratch"}}),
    )
    .await;
    assert_eq!(ns.code, 201);
    let accounts: Api<ServiceAccount> = Api::namespaced(c.clone(), "scratch");
    accounts
        .create(&PostParams::default(), &account("a"))
        .await
        .unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(c.clone(), "scratch");
    maps.create(&PostParams::default(), &config_map("m", json!({})))
        .await
        .unwrap();
    let r = raw(&c, "DELETE", "/api/v1/namespaces/scratch", None, "").await;
    assert_eq!(r.code, 200);
    assert!(
        accounts
            .list(&ListParams::default())
            .await
            .map(|l| l.items.is_empty())
            .unwrap_or(true)
    );
    assert_status(
        &raw(&c, "GET", "/api/v1/namespaces/scratch", None, "").await,
        404,
        "NotFound",
    );
    s.shutdown().await;
}

#[tokio::test]
async fn requests_for_unknown_resources_are_logged() {
    let (s, c) = server(Duration::from_secs(600)).await;
    s.controls().clear_request_log();
    let r = raw(&c, "GET", "/api/v1/namespaces/default/secrets", None, "").await;
    assert_status(&r, 404, "NotFound");
    raw(&c, "GET", "/apis/apps/v1/deployments?watch=true", None, "").await;
    raw(&c, "PUT", "/api/v1/nodes", Some("application/json"), "{}").await;
    let log = s.controls().request_log();
    assert_eq!(log.len(), 3, "{log:?}");
    assert_eq!(
        (
            log[0].verb.as_str(),
            log[0].resource.as_str(),
            log[0].namespace.as_str(),
            log[0].user.as_str(),
            log[0].code
        ),
        ("list", "secrets", "default", "admin", 404)
    );
    assert_eq!(
        (
            log[1].verb.as_str(),
            log[1].group.as_str(),
            log[1].resource.as_str(),
            log[1].code
        ),
        ("watch", "apps", "deployments", 404)
    );
    assert_eq!(
        (log[2].verb.as_str(), log[2].resource.as_str(), log[2].code),
        ("update", "nodes", 405)
    );
    s.shutdown().await;
}
