//! The controllers' service-account credentials against the in-memory API server: tokens from the
//! TokenRequest API, clients that send only those tokens, refreshing before expiry, and the errors for a
//! missing ServiceAccount.

use std::sync::Arc;
use std::time::Duration;

use ccm_app::client::RateLimits;
use ccm_app::service_accounts::{
    ControllerCredentials, NAMESPACE, TokenIssuer, TokenRequestIssuer,
};
use cloud_controllers::ControllerName;
use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use kube::Api;
use kube::api::{ListParams, PostParams};
use test_apiserver::TestApiServer;

const LIMITS: RateLimits = RateLimits::new(50.0, 100).unwrap();

async fn create_account(client: &kube::Client, name: &str) {
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), NAMESPACE);
    let account: ServiceAccount =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
    api.create(&PostParams::default(), &account).await.unwrap();
}

/// The users of the `list nodes` requests in the log, in order.
fn node_listers(server: &TestApiServer) -> Vec<String> {
    server
        .controls()
        .request_log()
        .into_iter()
        .filter(|r| r.verb == "list" && r.resource == "nodes")
        .map(|r| r.user)
        .collect()
}

#[tokio::test]
async fn controller_clients_authenticate_as_their_service_accounts() {
    let server = TestApiServer::start().await.unwrap();
    let daemon = server.client().unwrap();
    for controller in [ControllerName::CloudNode, ControllerName::ServiceLb] {
        create_account(&daemon, controller.client_name()).await;
    }
    let issuer: Arc<dyn TokenIssuer> = Arc::new(TokenRequestIssuer::new(
        daemon.clone(),
        NAMESPACE,
        Duration::from_secs(3600),
    ));
    let base = server.client_config().unwrap();
    let credentials = ControllerCredentials::start(
        issuer,
        &base,
        &[ControllerName::CloudNode, ControllerName::ServiceLb],
        LIMITS,
    )
    .await
    .unwrap();
    assert_eq!(
        credentials.clients().controllers(),
        [ControllerName::CloudNode, ControllerName::ServiceLb]
    );
    let token = credentials.token(ControllerName::CloudNode).unwrap();
    assert_eq!(token.lifetime(), Duration::from_secs(3600));
    assert!(credentials.token(ControllerName::PvLabel).is_none());

    for controller in [ControllerName::CloudNode, ControllerName::ServiceLb] {
        let client = credentials.clients().get(controller).unwrap().clone();
        let nodes: Api<Node> = Api::all(client);
        nodes.list(&ListParams::default()).await.unwrap();
    }
    assert_eq!(
        node_listers(&server),
        [
            "system:serviceaccount:kube-system:node-controller",
            "system:serviceaccount:kube-system:service-controller"
        ]
    );
    // The tokens were asked for by the daemon's own identity.
    let token_requests: Vec<(String, String)> = server
        .controls()
        .request_log()
        .into_iter()
        .filter(|r| r.resource == "serviceaccounts" && r.subresource == "token")
        .map(|r| (r.name, r.user))
        .collect();
    assert_eq!(
        token_requests,
        [
            ("node-controller".to_string(), "admin".to_string()),
            ("service-controller".to_string(), "admin".to_string())
        ]
    );
    credentials.stop().await;
}

#[tokio::test]
async fn tokens_are_replaced_before_they_expire() {
    let server = TestApiServer::builder()
        .min_token_expiration(Duration::from_secs(1))
        .start()
        .await
        .unwrap();
    let daemon = server.client().unwrap();
    create_account(&daemon, "node-controller").await;
    // Two-second tokens: the next one is asked for after 1.6 s.
    let issuer: Arc<dyn TokenIssuer> = Arc::new(TokenRequestIssuer::new(
        daemon,
        NAMESPACE,
        Duration::from_secs(2),
    ));
    let credentials = ControllerCredentials::start(
        issuer,
        &server.client_config().unwrap(),
        &[ControllerName::CloudNode],
        LIMITS,
    )
    .await
    .unwrap();
    let client = credentials
        .clients()
        .get(ControllerName::CloudNode)
        .unwrap()
        .clone();
    let nodes: Api<Node> = Api::all(client);
    // Well past the first token's expiry, requests still authenticate: the token was replaced.
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        nodes.list(&ListParams::default()).await.unwrap();
    }
    let token_requests = server
        .controls()
        .request_log()
        .iter()
        .filter(|r| r.subresource == "token" && r.code == 201)
        .count();
    assert!(token_requests >= 2, "{token_requests} token requests");
    assert_eq!(
        node_listers(&server),
        ["system:serviceaccount:kube-system:node-controller"; 2]
    );
    credentials.stop().await;
}

#[tokio::test]
async fn a_missing_service_account_is_named() {
    let server = TestApiServer::start().await.unwrap();
    let daemon = server.client().unwrap();
    create_account(&daemon, "node-controller").await;
    let issuer: Arc<dyn TokenIssuer> = Arc::new(TokenRequestIssuer::new(
        daemon,
        NAMESPACE,
        Duration::from_secs(3600),
    ));
    let err = ControllerCredentials::start(
        issuer,
        &server.client_config().unwrap(),
        &[ControllerName::CloudNode, ControllerName::PvLabel],
        LIMITS,
    )
    .await
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "cannot get a token for ServiceAccount kube-system/pvl-controller: 404 NotFound: \
         serviceaccounts \"pvl-controller\" not found (the ServiceAccount must exist: \
         deploy/components/service-account-credentials/rbac.yaml creates them)"
    );
}

/// What each controller writes (`verb resource[/subresource]`); its reads come from the daemon's watches.
const CONTROLLER_WRITES: &[(ControllerName, &[&str])] = &[
    (
        ControllerName::CloudNode,
        &["patch nodes", "patch nodes/status"],
    ),
    (
        ControllerName::CloudNodeLifecycle,
        &["delete nodes", "patch nodes"],
    ),
    (ControllerName::ServiceLb, &["patch services/status"]),
    (ControllerName::NodeRoute, &["patch nodes/status"]),
    (
        ControllerName::PvLabel,
        &["get persistentvolumes", "update persistentvolumes"],
    ),
    (ControllerName::Tagging, &["patch nodes"]),
];

fn strings(value: &serde_json::Value) -> Vec<String> {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|item| item.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The optional manifest creates the ServiceAccounts of the controllers, named like upstream's clients (the
/// two node controllers share node-controller), lets the daemon's account request tokens for exactly those,
/// and grants each controller, through a ClusterRole of its own bound to its account, exactly the writes it
/// makes.
#[test]
fn the_optional_rbac_manifest_matches_the_controllers() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/components/service-account-credentials/rbac.yaml"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).unwrap();
    let of_kind = |kind: &str| -> Vec<&serde_json::Value> {
        docs.iter()
            .filter(|d| d["kind"].as_str() == Some(kind))
            .collect()
    };
    let mut names: Vec<&str> = ControllerName::all().map(|c| c.client_name()).collect();
    names.dedup();
    assert_eq!(
        names,
        [
            "node-controller",
            "service-controller",
            "route-controller",
            "pvl-controller",
            "tagging-controller"
        ]
    );

    let accounts: Vec<(&str, &str)> = of_kind("ServiceAccount")
        .iter()
        .map(|d| {
            (
                d["metadata"]["namespace"].as_str().unwrap(),
                d["metadata"]["name"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        accounts,
        names.iter().map(|n| (NAMESPACE, *n)).collect::<Vec<_>>()
    );

    let roles = of_kind("Role");
    assert_eq!(roles.len(), 1);
    let role = roles[0];
    assert_eq!(role["metadata"]["namespace"].as_str(), Some(NAMESPACE));
    let rules = role["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(strings(&rules[0]["apiGroups"]), [""]);
    assert_eq!(strings(&rules[0]["resources"]), ["serviceaccounts/token"]);
    assert_eq!(strings(&rules[0]["verbs"]), ["create"]);
    assert_eq!(strings(&rules[0]["resourceNames"]), names);
    let bindings = of_kind("RoleBinding");
    assert_eq!(bindings.len(), 1);
    assert_eq!(bindings[0]["roleRef"]["name"], role["metadata"]["name"]);
    assert_eq!(
        bindings[0]["subjects"][0]["name"].as_str(),
        Some("cloud-controller-manager")
    );

    for (controller, writes) in CONTROLLER_WRITES {
        let name = controller.canonical();
        let role_name = format!("cloud-controller-manager:{name}");
        let binding = of_kind("ClusterRoleBinding")
            .into_iter()
            .find(|b| b["roleRef"]["name"].as_str() == Some(role_name.as_str()))
            .unwrap_or_else(|| panic!("no ClusterRoleBinding of {role_name}"));
        assert_eq!(binding["subjects"].as_array().unwrap().len(), 1);
        assert_eq!(
            binding["subjects"][0]["name"].as_str(),
            Some(controller.client_name()),
            "{name}"
        );
        assert_eq!(
            binding["subjects"][0]["namespace"].as_str(),
            Some(NAMESPACE)
        );
        let role = of_kind("ClusterRole")
            .into_iter()
            .find(|r| r["metadata"]["name"].as_str() == Some(role_name.as_str()))
            .unwrap_or_else(|| panic!("no ClusterRole {role_name}"));
        let mut granted: Vec<String> = Vec::new();
        for rule in role["rules"].as_array().unwrap() {
            assert_eq!(strings(&rule["apiGroups"]), [""], "{name}");
            for resource in strings(&rule["resources"]) {
                for verb in strings(&rule["verbs"]) {
                    granted.push(format!("{verb} {resource}"));
                }
            }
        }
        granted.sort();
        assert_eq!(granted, *writes, "{name}");
    }
    assert_eq!(of_kind("ClusterRole").len(), CONTROLLER_WRITES.len());
}
