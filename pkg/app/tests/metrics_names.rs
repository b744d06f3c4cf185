//! The daemon's `/metrics` carries the families dashboards built for upstream's cloud-controller-manager
//! read, with upstream's names, types and label names: the daemon runs in-process with the fake provider
//! against the in-memory API server, initializes a node, programs its route and provisions a load balancer,
//! then `/metrics` is scraped.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Service};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use test_apiserver::TestApiServer;

/// Every family checked: the name in samples, the OpenMetrics type, and the label names of its samples
/// (`le` of histogram buckets aside).
const FAMILIES: &[(&str, &str, &[&str])] = &[
    ("workqueue_adds_total", "counter", &["name"]),
    ("workqueue_depth", "gauge", &["name"]),
    (
        "workqueue_queue_duration_seconds_bucket",
        "histogram",
        &["name"],
    ),
    (
        "workqueue_work_duration_seconds_bucket",
        "histogram",
        &["name"],
    ),
    ("workqueue_unfinished_work_seconds", "gauge", &["name"]),
    (
        "workqueue_longest_running_processor_seconds",
        "gauge",
        &["name"],
    ),
    ("workqueue_retries_total", "counter", &["name"]),
    (
        "rest_client_requests_total",
        "counter",
        &["code", "host", "method"],
    ),
    (
        "rest_client_request_duration_seconds_bucket",
        "histogram",
        &["host", "verb"],
    ),
    (
        "rest_client_rate_limiter_duration_seconds_bucket",
        "histogram",
        &["host", "verb"],
    ),
    ("leader_election_master_status", "gauge", &["name"]),
    ("running_managed_controllers", "gauge", &["manager", "name"]),
    (
        "node_controller_cloud_provider_taint_removal_delay_seconds_bucket",
        "histogram",
        &[],
    ),
    (
        "node_controller_initial_node_sync_delay_seconds_bucket",
        "histogram",
        &[],
    ),
    ("service_controller_loadbalancer_sync_total", "counter", &[]),
    ("service_controller_nodesync_error_total", "counter", &[]),
    (
        "service_controller_nodesync_latency_seconds_bucket",
        "histogram",
        &[],
    ),
    (
        "service_controller_update_loadbalancer_host_latency_seconds_bucket",
        "histogram",
        &[],
    ),
    ("route_controller_route_sync_total", "counter", &[]),
];

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A parsed exposition: family types (by family name) and sample label names (by sample name).
struct Exposition {
    types: BTreeMap<String, String>,
    labels: BTreeMap<String, BTreeSet<String>>,
    samples: Vec<String>,
}

fn parse(text: &str) -> Exposition {
    let mut types = BTreeMap::new();
    let mut labels: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut samples = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            types.insert(name.to_string(), kind.to_string());
        } else if !line.starts_with('#') && !line.is_empty() {
            samples.push(line.to_string());
            let name_end = line.find(['{', ' ']).unwrap();
            let names = labels.entry(line[..name_end].to_string()).or_default();
            if let Some(set) = line[name_end..].strip_prefix('{') {
                let set = &set[..set.find('}').unwrap()];
                for pair in set.split("\",") {
                    let name = pair.split('=').next().unwrap().trim_start_matches(',');
                    if name != "le" && !name.is_empty() {
                        names.insert(name.to_string());
                    }
                }
            }
        }
    }
    Exposition {
        types,
        labels,
        samples,
    }
}

/// The family a sample belongs to, as OpenMetrics names it in its `# TYPE` line.
fn family_of<'a>(sample: &'a str, kind: &str) -> &'a str {
    match kind {
        "counter" => sample.trim_end_matches("_total"),
        "histogram" => sample.trim_end_matches("_bucket"),
        _ => sample,
    }
}

async fn wait_for<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_carry_upstream_names_types_and_labels() {
    let server = TestApiServer::start().await.unwrap();
    let client = server.client().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cloud_config = dir.path().join("cloud.yaml");
    std::fs::write(&cloud_config, "clusterID: metrics\n").unwrap();
    let port = free_port();
    let mut registry = cloud_provider::Registry::new();
    provider_fake::register(&mut registry);
    let args = vec![
        "cloud-controller-manager".to_string(),
        "--cloud-provider=fake".into(),
        format!("--cloud-config={}", cloud_config.display()),
        format!("--kubeconfig={}", server.kubeconfig_path().display()),
        "--cluster-cidr=10.244.0.0/16".into(),
        "--route-reconciliation-period=200ms".into(),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={port}"),
        "--authentication-skip-lookup".into(),
        "--authorization-always-allow-paths=/healthz,/metrics".into(),
    ];
    let daemon = tokio::spawn(ccm_app::run_with_args(registry, args));

    let nodes: Api<Node> = Api::all(client.clone());
    let node = json!({
        "metadata": {"name": "n1"},
        "spec": {
            "podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24"],
            "taints": [{"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"}],
        },
    });
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(node).unwrap(),
        )
        .await
        .unwrap();
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let web = json!({
        "metadata": {"name": "web"},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
    });
    services
        .create(
            &PostParams::default(),
            &serde_json::from_value(web).unwrap(),
        )
        .await
        .unwrap();
    wait_for("the node, its route and the load balancer", || async {
        let node = nodes.get("n1").await.unwrap();
        let initialized = node.spec.and_then(|s| s.provider_id).is_some();
        let routed = node
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "NetworkUnavailable" && c.status == "False");
        let balanced = services
            .get("web")
            .await
            .unwrap()
            .status
            .and_then(|s| s.load_balancer?.ingress)
            .is_some();
        initialized && routed && balanced
    })
    .await;

    let mut config = kube::Config::new(format!("https://127.0.0.1:{port}").parse().unwrap());
    config.accept_invalid_certs = true;
    let endpoint = kube::Client::try_from(config).unwrap();
    let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = endpoint.request_text(request).await.unwrap();
    daemon.abort();
    let exposition = parse(&text);

    let mut problems = Vec::new();
    for (sample, kind, labels) in FAMILIES {
        let family = family_of(sample, kind);
        match exposition.types.get(family) {
            Some(found) if found == kind => {}
            found => problems.push(format!("{family}: type {found:?}, want {kind}")),
        }
        let want: BTreeSet<String> = labels.iter().map(|l| l.to_string()).collect();
        match exposition.labels.get(*sample) {
            Some(found) if *found == want => {}
            found => problems.push(format!("{sample}: labels {found:?}, want {want:?}")),
        }
    }
    assert!(problems.is_empty(), "{problems:#?}\n{text}");

    // The values upstream's dashboards key on.
    for expected in [
        r#"workqueue_adds_total{name="Nodes"}"#,
        r#"workqueue_adds_total{name="service"}"#,
        r#"running_managed_controllers{name="cloud-node",manager="cloud-controller-manager"} 1"#,
        r#"running_managed_controllers{name="service",manager="cloud-controller-manager"} 1"#,
        r#"running_managed_controllers{name="route",manager="cloud-controller-manager"} 1"#,
        r#"leader_election_master_status{name="cloud-controller-manager"} 1"#,
    ] {
        assert!(
            exposition.samples.iter().any(|s| s.starts_with(expected)),
            "no {expected}:\n{text}"
        );
    }
    let host = format!(
        "host=\"{}\"",
        server
            .url()
            .trim_start_matches("https://")
            .trim_start_matches("http://")
            .trim_end_matches('/')
    );
    assert!(
        exposition.samples.iter().any(|s| s
            .starts_with("rest_client_requests_total{code=\"201\",method=\"POST\"")
            && s.contains(&host)),
        "no POST 201 to {host}:\n{text}"
    );
}

/// The AWS provider's families (registered by the daemon with `--cloud-provider=aws`), as upstream's
/// cloud-provider-aws names them.
#[test]
fn aws_metrics_carry_upstream_names_types_and_labels() {
    use provider_aws::metrics::{OperationLabels, RequestLabels};
    let metrics = provider_aws::AwsMetrics::default();
    let request = RequestLabels {
        request: "DescribeInstances".into(),
    };
    metrics
        .request_duration
        .get_or_create(&request)
        .observe(0.1);
    metrics.request_errors.get_or_create(&request).inc();
    metrics
        .throttled_requests
        .get_or_create(&OperationLabels {
            operation_name: "DescribeInstances".into(),
        })
        .inc();
    let mut registry = prometheus_client::registry::Registry::default();
    metrics.register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    let exposition = parse(&text);
    for (sample, family, kind, labels) in [
        (
            "cloudprovider_aws_api_request_duration_seconds_bucket",
            "cloudprovider_aws_api_request_duration_seconds",
            "histogram",
            &["request"][..],
        ),
        (
            // Upstream's exact series name: no `_total`.
            "cloudprovider_aws_api_request_errors",
            "cloudprovider_aws_api_request_errors",
            "unknown",
            &["request"][..],
        ),
        (
            "cloudprovider_aws_api_throttled_requests_total",
            "cloudprovider_aws_api_throttled_requests",
            "counter",
            &["operation_name"][..],
        ),
    ] {
        assert_eq!(
            exposition.types.get(family).map(String::as_str),
            Some(kind),
            "{text}"
        );
        let want: BTreeSet<String> = labels.iter().map(|l| l.to_string()).collect();
        assert_eq!(exposition.labels.get(sample), Some(&want), "{text}");
    }
}
