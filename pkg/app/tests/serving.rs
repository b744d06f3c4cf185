//! The HTTPS endpoint with delegated authentication and authorization through the in-memory API server:
//! health endpoints, metrics, 401/403 Status bodies, caching of reviews, client certificates, proxies
//! naming callers in request headers, and the debugging handlers.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ccm_app::leader::LeaderStatus;
use ccm_app::serving::auth::{Authorizer, DelegatedAuth, RequestHeaderConfig, TokenAuthenticator};
use ccm_app::serving::certificates::{CaSource, CertSource, ServerTls, TlsMaterial};
use ccm_app::serving::health::HealthChecks;
use ccm_app::serving::process_metrics::ProcessCollector;
use ccm_app::serving::tls::TlsSettings;
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

/// What an endpoint of a test trusts and serves beyond tokens and health.
#[derive(Default)]
struct Setup {
    /// A client CA (PEM).
    client_ca: Option<String>,
    /// A request-header CA (PEM) and how proxies name callers.
    proxy: Option<(String, RequestHeaderConfig)>,
    /// `--profiling`.
    profiling: bool,
}

async fn start_endpoint(server: &TestApiServer, setup: Setup) -> Endpoint {
    let health = HealthRegistry::default();
    let leader = LeaderStatus::disabled();
    let mut registry = prometheus_client::registry::Registry::default();
    ccm_app::build_info::BuildInfo::current(None).register(&mut registry);
    registry.register_collector(Box::new(ProcessCollector));
    leader.register_metrics(&mut registry);
    let ttl = Duration::from_secs(10);
    let auth = DelegatedAuth {
        authenticator: Arc::new(TokenAuthenticator::new(server.client().unwrap(), ttl)),
        authorizer: Arc::new(Authorizer::new(server.client().unwrap(), ttl, ttl)),
        always_allow_paths: vec!["/healthz".into(), "/readyz".into(), "/livez".into()],
        request_header: setup.proxy.as_ref().map(|(_, config)| config.clone()),
    };
    let state = ServingState {
        health: HealthChecks::new(health.clone(), leader),
        metrics: Arc::new(registry),
        auth: Some(auth),
        configz: serde_json::json!({"cloudcontrollermanager.config.k8s.io": {"kind": "CloudControllerManagerConfiguration"}}),
    };
    let tls = ServerTls::new(TlsMaterial {
        cert: CertSource::InMemory(tls::self_signed("127.0.0.1".parse().unwrap()).unwrap()),
        settings: TlsSettings {
            http2: true,
            ..TlsSettings::default()
        },
        client_cas: setup.client_ca.into_iter().map(CaSource::Pem).collect(),
        proxy_cas: setup
            .proxy
            .into_iter()
            .map(|(pem, _)| CaSource::Pem(pem))
            .collect(),
        uid_from_certificates: true,
    })
    .unwrap();
    let listener = serving::bind("127.0.0.1:0".parse().unwrap(), false, false)
        .await
        .unwrap();
    let address = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    serving::spawn(
        listener,
        Arc::new(tls),
        0,
        serving::router(Arc::new(state), setup.profiling),
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
    let endpoint = start_endpoint(&server, Setup::default()).await;
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
    let endpoint = start_endpoint(&server, Setup::default()).await;

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
    let endpoint = start_endpoint(&server, Setup::default()).await;
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
    let endpoint = start_endpoint(&server, Setup::default()).await;
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
    let endpoint = start_endpoint(
        &server,
        Setup {
            client_ca: Some(ca.pem()),
            ..Setup::default()
        },
    )
    .await;
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

/// A CA: its PEM and an issuer for the certificates it signs.
fn new_ca(name: &str) -> (String, rcgen::Issuer<'static, rcgen::KeyPair>) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    let cert = params.clone().self_signed(&key).unwrap();
    (cert.pem(), rcgen::Issuer::new(params, key))
}

/// `client` with extra request headers, as a proxy sends them.
async fn get_with_headers(
    client: &kube::Client,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, String) {
    let mut request = http::Request::get(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = client
        .send(request.body(kube::client::Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status().as_u16();
    let bytes = response.into_body().collect_bytes().await.unwrap();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

#[tokio::test]
async fn proxies_of_the_request_header_ca_name_callers_in_headers() {
    let server = apiserver().await;
    let dir = tempfile::tempdir().unwrap();
    let (proxy_pem, proxy_issuer) = new_ca("front-proxy-ca");
    let (client_pem, client_issuer) = new_ca("client-ca");
    let config = RequestHeaderConfig {
        allowed_names: vec!["front-proxy-client".into()],
        username_headers: vec!["x-remote-user".into()],
        uid_headers: Vec::new(),
        group_headers: vec!["x-remote-group".into()],
        extra_headers_prefixes: vec!["x-remote-extra-".into()],
    };
    let endpoint = start_endpoint(
        &server,
        Setup {
            client_ca: Some(client_pem),
            proxy: Some((proxy_pem, config)),
            profiling: false,
        },
    )
    .await;
    let proxy = certificate_client(
        &endpoint.url,
        dir.path(),
        &proxy_issuer,
        "front-proxy-client",
        &[],
    )
    .await;
    // The caller the proxy names is authorized, not the proxy.
    let (status, body) = get_with_headers(
        &proxy,
        "/metrics",
        &[("x-remote-user", "alice"), ("x-remote-group", "readers")],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = get_with_headers(&proxy, "/metrics", &[("x-remote-user", "bob")]).await;
    assert_eq!(status, 403);
    assert!(body.contains("User \\\"bob\\\""), "{body}");
    // A proxy certificate with a name not allowed is refused.
    let other = certificate_client(&endpoint.url, dir.path(), &proxy_issuer, "intruder", &[]).await;
    assert_eq!(
        get_with_headers(&other, "/metrics", &[("x-remote-user", "alice")])
            .await
            .0,
        401
    );
    // A client of the client CA cannot name someone else in headers.
    let stranger =
        certificate_client(&endpoint.url, dir.path(), &client_issuer, "stranger", &[]).await;
    let (status, body) = get_with_headers(
        &stranger,
        "/metrics",
        &[("x-remote-user", "alice"), ("x-remote-group", "readers")],
    )
    .await;
    assert_eq!(status, 403);
    assert!(body.contains("User \\\"stranger\\\""), "{body}");
}

#[tokio::test]
async fn a_member_of_system_masters_needs_no_access_review() {
    let server = apiserver().await;
    let dir = tempfile::tempdir().unwrap();
    let (client_pem, client_issuer) = new_ca("client-ca");
    let endpoint = start_endpoint(
        &server,
        Setup {
            client_ca: Some(client_pem),
            ..Setup::default()
        },
    )
    .await;
    let admin = certificate_client(
        &endpoint.url,
        dir.path(),
        &client_issuer,
        "admin",
        &["system:masters"],
    )
    .await;
    assert_eq!(get(&admin, "/metrics").await.0, 200);
    assert_eq!(
        server
            .controls()
            .request_count("create", "subjectaccessreviews"),
        0
    );
}

#[tokio::test]
async fn configz_slis_and_the_build_information() {
    let server = apiserver().await;
    server
        .controls()
        .allow(AccessRule::group_can_path("readers", "get", "/configz"));
    server.controls().allow(AccessRule::group_can_path(
        "readers",
        "get",
        "/metrics/slis",
    ));
    let endpoint = start_endpoint(&server, Setup::default()).await;
    let reader = client(&endpoint.url, Some(READER_TOKEN));
    let (status, body) = get(&reader, "/configz").await;
    assert_eq!(status, 200, "{body}");
    let configz: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        configz["cloudcontrollermanager.config.k8s.io"]["kind"],
        "CloudControllerManagerConfiguration"
    );
    let (_, metrics) = get(&reader, "/metrics").await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("kubernetes_build_info{") && l.contains("compiler=\"rustc\"")),
        "{metrics}"
    );
    get(&client(&endpoint.url, None), "/healthz").await;
    let (status, slis) = get(&reader, "/metrics/slis").await;
    assert_eq!(status, 200, "{slis}");
    assert!(
        slis.contains(
            "kubernetes_healthchecks_total{name=\"ping\",status=\"success\",type=\"healthz\"} 1"
        ),
        "{slis}"
    );
    // Without --profiling the debugging handlers are not there.
    assert_eq!(get(&reader, "/debug/pprof/").await.0, 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn profiling_serves_profiles_and_the_verbosity_handler() {
    let server = apiserver().await;
    for path in ["/debug/pprof/*", "/debug/flags/v"] {
        server
            .controls()
            .allow(AccessRule::group_can_path("readers", "get", path));
    }
    server.controls().allow(AccessRule::group_can_path(
        "readers",
        "put",
        "/debug/flags/v",
    ));
    let endpoint = start_endpoint(
        &server,
        Setup {
            profiling: true,
            ..Setup::default()
        },
    )
    .await;
    let reader = client(&endpoint.url, Some(READER_TOKEN));
    let (status, index) = get(&reader, "/debug/pprof/").await;
    assert_eq!(status, 200);
    assert!(
        index.contains("profile") && index.contains("heap"),
        "{index}"
    );
    let request = http::Request::get("/debug/pprof/profile?seconds=1")
        .body(kube::client::Body::empty())
        .unwrap();
    let response = reader.send(request).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-disposition"],
        "attachment; filename=\"profile\""
    );
    let profile = response.into_body().collect_bytes().await.unwrap();
    assert!(!profile.is_empty());
    assert_eq!(
        get(&reader, "/debug/pprof/goroutine").await,
        (404, "Unknown profile\n".to_string())
    );
    // Only PUT changes the verbosity, with a bare number.
    assert_eq!(
        get(&reader, "/debug/flags/v").await,
        (406, "unsupported http method\n".to_string())
    );
    let put = |body: &'static str| {
        http::Request::put("/debug/flags/v")
            .body(kube::client::Body::from(body.as_bytes().to_vec()))
            .unwrap()
    };
    let response = reader.send(put("3\n")).await.unwrap();
    assert_eq!(response.status(), 400);
    // No subscriber of this test process is managed by the daemon's logging: the change is refused
    // with upstream's message form.
    let response = reader.send(put("3")).await.unwrap();
    let status = response.status();
    let body =
        String::from_utf8(response.into_body().collect_bytes().await.unwrap().to_vec()).unwrap();
    assert_eq!(status, 400, "{body}");
    assert!(
        body.starts_with("failed set klog.logging.verbosity 3: "),
        "{body}"
    );
}
