//! The API client against the stub: pagination, 429 handling, 5xx retries, budgets, client-side rate
//! limits, error messages and request headers.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use provider_digitalocean::api::{Account, Droplet, LoadBalancerRequest};
use provider_digitalocean::stub::{DoStub, DropletSpec, Fault};
use provider_digitalocean::{ApiError, DoClient};
use serde_json::json;
use support::config_for;

fn client(stub: &DoStub) -> DoClient {
    DoClient::new(&config_for(stub)).unwrap()
}

#[tokio::test]
async fn lists_follow_pages_of_200() {
    let stub = DoStub::start().await;
    for i in 0..450 {
        stub.add_droplet(DropletSpec::new(format!("d{i}")));
    }
    let c = client(&stub);
    let all: Vec<Droplet> = c
        .list("list_droplets", "v2/droplets", "droplets", &[])
        .await
        .unwrap();
    assert_eq!(all.len(), 450);
    let names: std::collections::BTreeSet<_> = all.iter().map(|d| d.name.clone()).collect();
    assert_eq!(names.len(), 450);
    let pages: Vec<String> = stub
        .requests()
        .into_iter()
        .filter(|r| r.path == "/v2/droplets")
        .map(|r| r.query)
        .collect();
    assert_eq!(
        pages,
        vec![
            "page=1&per_page=200",
            "page=2&per_page=200",
            "page=3&per_page=200"
        ]
    );
    assert_eq!(c.metrics().request_count("list_droplets", "200"), 3);

    // Filters survive pagination.
    let named: Vec<Droplet> = c
        .list(
            "list_droplets_by_name",
            "v2/droplets",
            "droplets",
            &[("name", "d7")],
        )
        .await
        .unwrap();
    assert_eq!(named.len(), 1);
    assert_eq!(named[0].name, "d7");
}

#[tokio::test]
async fn honours_retry_after_on_429() {
    let stub = DoStub::start().await;
    stub.inject(Fault::retry_after("GET", "/v2/account", 1, 1));
    let c = client(&stub);
    let started = Instant::now();
    let account: Account = c.get("get_account", "v2/account", "account").await.unwrap();
    assert_eq!(account.status, "active");
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(stub.count("GET", "/v2/account"), 2);
    assert_eq!(c.metrics().retry_count("get_account", "rate_limited"), 1);
    assert_eq!(c.metrics().request_count("get_account", "429"), 1);
}

#[tokio::test]
async fn honours_ratelimit_reset_on_429() {
    let stub = DoStub::start().await;
    stub.inject(Fault::rate_limit_reset(
        "GET",
        "/v2/account",
        Duration::from_secs(2),
        1,
    ));
    let c = client(&stub);
    let started = Instant::now();
    let _: Account = c.get("get_account", "v2/account", "account").await.unwrap();
    // The reset is at least one whole second away.
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(stub.count("GET", "/v2/account"), 2);
}

#[tokio::test]
async fn a_long_rate_limit_becomes_a_retry_error_without_waiting() {
    let stub = DoStub::start().await;
    stub.inject(Fault::retry_after("GET", "/v2/account", 120, 1));
    let cloud = support::cloud_for(&stub);
    let started = Instant::now();
    let err = cloud.prepare().await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(err.retry_after(), Some(Duration::from_secs(120)), "{err}");
    assert_eq!(stub.count("GET", "/v2/account"), 1);
}

#[tokio::test]
async fn server_errors_are_retried_with_backoff() {
    let stub = DoStub::start().await;
    let id = stub.add_droplet(DropletSpec::new("n1"));
    stub.inject(Fault::status("GET", "/v2/droplets/", 503, 2));
    let c = client(&stub);
    let d: Droplet = c
        .get("get_droplet", &format!("v2/droplets/{id}"), "droplet")
        .await
        .unwrap();
    assert_eq!(d.id, id);
    assert_eq!(stub.count("GET", &format!("/v2/droplets/{id}")), 3);
    assert_eq!(c.metrics().retry_count("get_droplet", "server_error"), 2);

    // When the errors outlast the retries (3 here), the last error is returned.
    stub.inject(Fault::status("GET", "/v2/droplets/", 500, 10));
    stub.clear_requests();
    let err = c
        .get::<Droplet>("get_droplet", &format!("v2/droplets/{id}"), "droplet")
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(500));
    assert!(err.to_string().contains("server_error"), "{err}");
    assert_eq!(stub.count("GET", &format!("/v2/droplets/{id}")), 4);
}

fn minimal_lb(droplet: u64) -> LoadBalancerRequest {
    LoadBalancerRequest {
        name: "lb".into(),
        region: "nyc3".into(),
        type_: "REGIONAL".into(),
        forwarding_rules: vec![provider_digitalocean::api::ForwardingRule {
            entry_protocol: "tcp".into(),
            entry_port: 80,
            target_protocol: "tcp".into(),
            target_port: 30080,
            ..Default::default()
        }],
        health_check: provider_digitalocean::api::HealthCheck {
            protocol: "tcp".into(),
            port: 30080,
            check_interval_seconds: 3,
            response_timeout_seconds: 5,
            unhealthy_threshold: 3,
            healthy_threshold: 5,
            ..Default::default()
        },
        sticky_sessions: provider_digitalocean::api::StickySessions {
            type_: "none".into(),
            ..Default::default()
        },
        droplet_ids: vec![droplet],
        ..Default::default()
    }
}

#[tokio::test]
async fn post_is_not_retried_after_a_server_error_but_is_after_429() {
    let stub = DoStub::start().await;
    let d = stub.add_droplet(DropletSpec::new("n1"));
    let c = client(&stub);
    stub.inject(Fault::status("POST", "/v2/load_balancers", 500, 1));
    let err = c
        .post::<_, serde_json::Value>(
            "create_load_balancer",
            "v2/load_balancers",
            &minimal_lb(d),
            "load_balancer",
        )
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(500));
    assert_eq!(stub.count("POST", "/v2/load_balancers"), 1);
    assert!(stub.load_balancers().is_empty());

    stub.inject(Fault::retry_after("POST", "/v2/load_balancers", 0, 1));
    let created: serde_json::Value = c
        .post(
            "create_load_balancer",
            "v2/load_balancers",
            &minimal_lb(d),
            "load_balancer",
        )
        .await
        .unwrap();
    assert_eq!(created["name"], "lb");
    assert_eq!(stub.count("POST", "/v2/load_balancers"), 3);
    assert_eq!(stub.load_balancers().len(), 1);
}

#[tokio::test]
async fn a_spent_budget_is_waited_out_before_sending() {
    let stub = DoStub::builder()
        .rate_limit(3, Duration::from_secs(2))
        .start()
        .await;
    let c = client(&stub);
    for _ in 0..5 {
        let _: Account = c.get("get_account", "v2/account", "account").await.unwrap();
    }
    // The client saw RateLimit-Remaining: 0 and waited for the reset instead of getting a 429.
    let statuses: Vec<u16> = stub.requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses, vec![200; 5]);
    assert_eq!(c.metrics().rate_limit_remaining.get(), 1);
}

#[tokio::test]
async fn the_client_side_rate_limit_spaces_calls() {
    let stub = DoStub::start().await;
    let mut config = config_for(&stub);
    config.api_rate_limit_qps = Some(20.0);
    let c = DoClient::new(&config).unwrap();
    let started = Instant::now();
    for _ in 0..6 {
        let _: Account = c.get("get_account", "v2/account", "account").await.unwrap();
    }
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn errors_name_the_call_and_never_the_token() {
    let stub = DoStub::builder().token("the-real-token").start().await;
    let mut config = config_for(&stub);
    config.access_token = provider_digitalocean::AccessToken::new("wrong-token-value");
    let c = DoClient::new(&config).unwrap();
    let err = c
        .get::<Account>("get_account", "v2/account", "account")
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert_eq!(err.status(), Some(401));
    assert!(
        msg.starts_with("GET /v2/account: HTTP 401 Unauthorized: Unable to authenticate you"),
        "{msg}"
    );
    assert!(msg.contains("request ID"), "{msg}");
    assert!(
        !msg.contains("wrong-token-value") && !format!("{err:?}").contains("wrong-token-value")
    );
    assert!(!format!("{c:?}").contains("wrong-token-value"));

    let other = DoStub::start().await;
    let c = client(&other);
    let err = c
        .get::<Droplet>("get_droplet", "v2/droplets/1", "droplet")
        .await
        .unwrap_err();
    assert!(err.is_not_found());
    let none: Option<Droplet> = c
        .get_opt("get_droplet", "v2/droplets/1", "droplet")
        .await
        .unwrap();
    assert!(none.is_none());
}

/// A tiny server recording request headers and answering a droplet list whose next page is elsewhere.
async fn hostile_server(seen: Arc<Mutex<Vec<(String, String)>>>) -> String {
    use axum::http::HeaderMap;
    let app = axum::Router::new().fallback(move |headers: HeaderMap| {
        let seen = seen.clone();
        async move {
            for name in ["user-agent", "authorization", "accept"] {
                if let Some(v) = headers.get(name).and_then(|v| v.to_str().ok()) {
                    seen.lock().push((name.to_string(), v.to_string()));
                }
            }
            axum::Json(json!({
                "droplets": [],
                "links": {"pages": {"next": "http://203.0.113.1:9/v2/droplets?page=2"}},
                "meta": {"total": 400}
            }))
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    format!("http://{addr}/")
}

#[tokio::test]
async fn sends_identity_headers_and_keeps_the_token_on_the_configured_origin() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let url = hostile_server(seen.clone()).await;
    let config = provider_digitalocean::DoConfig::new(
        provider_digitalocean::AccessToken::new("tok-123"),
        &url,
    )
    .unwrap();
    let c = DoClient::new(&config).unwrap();
    let err = c
        .list::<Droplet>("list_droplets", "v2/droplets", "droplets", &[])
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::Pagination { .. }), "{err}");
    assert!(
        err.to_string().contains("leaves the configured API"),
        "{err}"
    );
    let seen = seen.lock().clone();
    assert_eq!(seen.len(), 3, "exactly one request: {seen:?}");
    assert!(seen.contains(&("authorization".into(), "Bearer tok-123".into())));
    assert!(seen.contains(&(
        "user-agent".into(),
        format!(
            "digitalocean-cloud-controller-manager/{}",
            env!("CARGO_PKG_VERSION")
        )
    )));
    assert!(seen.contains(&("accept".into(), "application/json".into())));
}
