//! The HTTPS endpoint with delegated authentication and authorization through the in-memory API server:
//! health endpoints, metrics, 401/403 Status bodies, caching of reviews, and client certificates.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ccm_app::leader::LeaderStatus;
use ccm_app::serving::auth::{Authorizer, DelegatedAuth, TokenAuthenticator};
use ccm_app::serving::health::HealthChecks;
use ccm_app::serving::process_metrics::ProcessCollector;
use ccm_app::serving::{self, ServingState, tls};
use cloud_controllers::HealthRegistry;
use http::HeaderValue;
use test_apiserver::{AccessRule, TestApiServer, UserInfo};
use tokio_util::sync::CancellationToken;

const READER_TOKEN: &str = "reader-token";
const NOBODY_TOKEN: &str = "nobody-token";

struct Endpoint {
    url: String,
    health: HealthRegistry,
    _stop: tokio_util::sync::DropGuard,
}

async fn apiserver() -> TestApiServer {
    let server = TestApiServer::builder()
        .user(
            READER_TOKEN,
            UserInfo::new("reader", &["readers", "system:authenticated"]),
        )
        .user(
            NOBODY_TOKEN,
            UserInfo::new("nobody", &["system:authenticated"]),
        )
        .start()
        .await
        .unwrap();
    server
        .controls()
        .allow(AccessRule::group_can_path("readers", "get", "/metrics"));
    server
}

async fn start_endpoint(
    server: &TestApiServer,
    client_ca: Option<rustls::RootCertStore>,
) -> Endpoint {
    let health = HealthRegistry::default();
    let leader = LeaderStatus::disabled();
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(ProcessCollector));
    leader.register_metrics(&mut registry);
    let auth = DelegatedAuth {
        authenticator: Arc::new(TokenAuthenticator::new(server.client().unwrap())),
        authorizer: Arc::new(Authorizer::new(server.client().unwrap())),
        always_allow_paths: vec!["/healthz".into(), "/readyz".into(), "/livez".into()],
    };
    let state = ServingState {
        health: HealthChecks {
            controllers: health.clone(),
            leader,
        },
        metrics: Arc::new(registry),
        auth: Some(auth),
    };
    let tls_config = tls::server_config(
        tls::self_signed("127.0.0.1".parse().unwrap()).unwrap(),
        client_ca,
    )
    .unwrap();
    let listener = serving::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let address = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    serving::spawn(
        listener,
        tls_config,
        serving::router(Arc::new(state)),
        stop.clone(),
    )
    .unwrap();
    Endpoint {
        url: format!("https://{address}"),
        health,
        _stop: stop.drop_guard(),
    }
}

/// A client for the endpoint (its certificate is self-signed), with an optional bearer token.
fn client(url: &str, token: Option<&str>) -> kube::Client {
    let mut config = kube::Config::new(url.parse().unwrap());
    config.accept_invalid_certs = true;
    config.default_retry = false;
    if let Some(token) = token {
        config.headers.push((
            http::header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
        ));
    }
    kube::Client::try_from(config).unwrap()
}

async fn get(client: &kube::Client, path: &str) -> (u16, String) {
    let request = http::Request::get(path)
        .body(kube::client::Body::empty())
        .unwrap();
    let response = client.send(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = response.into_body().collect_bytes().await.unwrap();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

#[tokio::test]
async fn health_endpoints_need_no_credentials() {
    let server = apiserver().await;
    let endpoint = start_endpoint(&server, None).await;
    let anonymous = client(&endpoint.url, None);

    assert_eq!(get(&anonymous, "/healthz").await, (200, "ok".to_string()));
    assert_eq!(get(&anonymous, "/livez").await, (200, "ok".to_string()));
    let check = endpoint.health.register("cloud-node-controller");
    assert_eq!(
        get(&anonymous, "/readyz?verbose").await,
        (
            200,
            "[+]ping ok\n[+]leaderElection ok\n[+]cloud-node-controller ok\nreadyz check passed\n"
                .to_string()
        )
    );
    check.set_failed("informer not synced");
    let (status, body) = get(&anonymous, "/readyz").await;
    assert_eq!(status, 500);
    assert!(
        body.contains("[-]cloud-node-controller failed: reason withheld\nreadyz check failed"),
        "{body}"
    );
    assert_eq!(get(&anonymous, "/livez").await.0, 200);
    assert_eq!(
        get(&anonymous, "/readyz?exclude=cloud-node-controller").await,
        (200, "ok".to_string())
    );
    // Single checks are not in the always-allowed list.
    assert_eq!(get(&anonymous, "/readyz/ping").await.0, 401);
}

#[tokio::test]
async fn metrics_require_a_valid_token_and_permission() {
    let server = apiserver().await;
    let endpoint = start_endpoint(&server, None).await;

    // No credentials: 401 with a Status body.
    let (status, body) = get(&client(&endpoint.url, None), "/metrics").await;
    assert_eq!(status, 401);
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        body,
        serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "Unauthorized", "reason": "Unauthorized", "code": 401
        })
    );
    // An unknown token: 401.
    let (status, _) = get(&client(&endpoint.url, Some("bogus")), "/metrics").await;
    assert_eq!(status, 401);

    // A valid token without permission: 403.
    let (status, body) = get(&client(&endpoint.url, Some(NOBODY_TOKEN)), "/metrics").await;
    assert_eq!(status, 403);
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["reason"], "Forbidden");
    assert_eq!(body["code"], 403);
    assert_eq!(
        body["message"],
        "forbidden: User \"nobody\" cannot get path \"/metrics\""
    );

    // Permission granted through the group: the metrics.
    let reader = client(&endpoint.url, Some(READER_TOKEN));
    let (status, text) = get(&reader, "/metrics").await;
    assert_eq!(status, 200, "{text}");
    for series in [
        "process_cpu_seconds_total ",
        "process_resident_memory_bytes ",
        "process_open_fds ",
        "process_start_time_seconds ",
        "leader_election_master_status{name=\"cloud-controller-manager\"} 1",
    ] {
        assert!(text.contains(series), "{series} missing from\n{text}");
    }
    assert!(text.ends_with("# EOF\n"));

    // The reader may not read other paths (SAR denies), and an admin gets a plain 404 for them.
    assert_eq!(get(&reader, "/debug/pprof").await.0, 403);
    assert_eq!(
        get(&client(&endpoint.url, Some(server.token())), "/nope").await,
        (404, "404 page not found\n".to_string())
    );
}

#[tokio::test]
async fn reviews_are_cached() {
    let server = apiserver().await;
    let endpoint = start_endpoint(&server, None).await;
    let controls = server.controls();
    let reader = client(&endpoint.url, Some(READER_TOKEN));
    assert_eq!(get(&reader, "/metrics").await.0, 200);
    let token_reviews = controls.request_count("create", "tokenreviews");
    let access_reviews = controls.request_count("create", "subjectaccessreviews");
    assert_eq!((token_reviews, access_reviews), (1, 1));
    for _ in 0..3 {
        assert_eq!(get(&reader, "/metrics").await.0, 200);
    }
    assert_eq!(controls.request_count("create", "tokenreviews"), 1);
    assert_eq!(controls.request_count("create", "subjectaccessreviews"), 1);
    // Denials are cached too.
    let nobody = client(&endpoint.url, Some(NOBODY_TOKEN));
    assert_eq!(get(&nobody, "/metrics").await.0, 403);
    assert_eq!(get(&nobody, "/metrics").await.0, 403);
    assert_eq!(controls.request_count("create", "subjectaccessreviews"), 2);
    // Health paths never reach the API server.
    assert_eq!(get(&nobody, "/healthz").await.0, 200);
    assert_eq!(controls.request_count("create", "tokenreviews"), 2);
}

#[tokio::test]
async fn an_unreachable_authorizer_is_an_internal_error() {
    let server = apiserver().await;
    let endpoint = start_endpoint(&server, None).await;
    server.controls().fail(
        test_apiserver::FaultRule::new(500)
            .verb("create")
            .resource("subjectaccessreviews"),
    );
    let (status, body) = get(&client(&endpoint.url, Some(READER_TOKEN)), "/metrics").await;
    assert_eq!(status, 500, "{body}");
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["reason"], "InternalError");
}

/// Writes a PEM file and returns its path.
fn write(dir: &Path, name: &str, pem: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, pem).unwrap();
    path.display().to_string()
}

/// A client presenting a certificate for `user` (with `groups`) signed by the CA.
async fn certificate_client(
    url: &str,
    dir: &Path,
    issuer: &rcgen::Issuer<'_, rcgen::KeyPair>,
    user: &str,
    groups: &[&str],
) -> kube::Client {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, user);
    for group in groups {
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, *group);
    }
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, issuer).unwrap();
    let cert_path = write(dir, &format!("{user}.crt"), &cert.pem());
    let key_path = write(dir, &format!("{user}.key"), &key.serialize_pem());
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {url}\n    \
         insecure-skip-tls-verify: true\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\n\
         current-context: x\nusers:\n- name: u\n  user:\n    client-certificate: {cert_path}\n    \
         client-key: {key_path}\n"
    );
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&kubeconfig).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

#[tokio::test]
async fn client_certificates_signed_by_the_client_ca_authenticate() {
    let server = apiserver().await;
    let dir = tempfile::tempdir().unwrap();
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "client-ca");
    let ca = ca_params.clone().self_signed(&ca_key).unwrap();
    let roots = tls::client_ca_roots(&ca.pem()).unwrap();
    let endpoint = start_endpoint(&server, Some(roots)).await;
    let issuer = rcgen::Issuer::new(ca_params, ca_key);

    let reader = certificate_client(
        &endpoint.url,
        dir.path(),
        &issuer,
        "cert-reader",
        &["readers"],
    )
    .await;
    let (status, text) = get(&reader, "/metrics").await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("process_cpu_seconds_total"));

    let stranger = certificate_client(&endpoint.url, dir.path(), &issuer, "stranger", &[]).await;
    let (status, body) = get(&stranger, "/metrics").await;
    assert_eq!(status, 403);
    assert!(
        body.contains("forbidden: User \\\"stranger\\\" cannot get path \\\"/metrics\\\""),
        "{body}"
    );

    // Certificates from another CA are refused during the handshake.
    let other_key = rcgen::KeyPair::generate().unwrap();
    let mut other_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    other_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let other_issuer = rcgen::Issuer::new(other_params, other_key);
    let forged = certificate_client(
        &endpoint.url,
        dir.path(),
        &other_issuer,
        "forged",
        &["readers"],
    )
    .await;
    let request = http::Request::get("/metrics")
        .body(kube::client::Body::empty())
        .unwrap();
    assert!(
        tokio::time::timeout(Duration::from_secs(5), forged.send(request))
            .await
            .unwrap()
            .is_err()
    );
    // Without a certificate a bearer token still works.
    assert_eq!(
        get(&client(&endpoint.url, Some(READER_TOKEN)), "/metrics")
            .await
            .0,
        200
    );
}
