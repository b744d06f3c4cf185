//! Node controller benchmarks at scale, whole-process: the controllers run in a child process (this binary
//! re-executed with `--child`) against an in-memory API server in the parent, with the fake cloud adding
//! 20 ms of latency to every call.
//!
//! Scenarios (`cargo bench -p cloud-controllers --bench node_scale -- <a|b|c> [nodes]`):
//! - `a`: upstream default flags (`--kube-api-qps=20 --kube-api-burst=30`, 1 node worker), 1,000 tainted
//!   nodes created at once, until every node is initialized.
//! - `b`: `--kube-api-qps=500 --kube-api-burst=1000 --concurrent-node-syncs=10`, 5,000 tainted nodes.
//! - `c`: one node-lifecycle pass over 5,000 NotReady nodes (all instances running).
//!
//! Reported: wall time, p50/p99 per-node latency (node created -> taint gone, seen by a watch in the
//! parent), API requests and cloud calls per node, events stored, and the controller process's peak RSS.
//! The event client has its own token bucket with the same numbers as the main client. These are figures
//! for the README, not assertions.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use cloud_controllers::node_lifecycle::CloudNodeLifecycleController;
use cloud_controllers::{
    ControllerConfig, ControllerContext, ControllerMetrics, ControllerName, HealthRegistry,
    SharedInformers, run_controllers,
};
use cloud_provider::TAINT_UNINITIALIZED;
use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeCondition, NodeSpec, NodeStatus, Taint};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::watcher;
use parking_lot::Mutex;
use provider_fake::{FakeCloud, FakeConfig, FaultSpec};
use test_apiserver::{TestApiServer, UserInfo};
use tokio_util::sync::CancellationToken;

const CONTROLLER_TOKEN: &str = "node-scale-controller-token";
const CONTROLLER_USER: &str = "cloud-controller-manager";
const CLOUD_LATENCY: Duration = Duration::from_millis(20);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

// ---------------------------------------------------------------------------------------------------------
// Client-side rate limiting (a token bucket per client, like the daemon's --kube-api-qps/--kube-api-burst).

struct Bucket {
    qps: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl Bucket {
    fn new(qps: f64, burst: f64) -> Self {
        Bucket {
            qps,
            burst,
            state: Mutex::new((burst, Instant::now())),
        }
    }

    /// Takes one token, returning how long to wait for it (tokens may be reserved ahead).
    fn reserve(&self) -> Duration {
        let mut s = self.state.lock();
        let now = Instant::now();
        let refill = now.duration_since(s.1).as_secs_f64() * self.qps;
        s.0 = (s.0 + refill).min(self.burst);
        s.1 = now;
        s.0 -= 1.0;
        if s.0 >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-s.0 / self.qps)
        }
    }
}

#[derive(Clone)]
struct RateLimitLayer(Arc<Bucket>);

impl<S> tower::Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;
    fn layer(&self, inner: S) -> RateLimited<S> {
        RateLimited {
            inner,
            bucket: self.0.clone(),
        }
    }
}

struct RateLimited<S> {
    inner: S,
    bucket: Arc<Bucket>,
}

impl<S, Req> tower::Service<Req> for RateLimited<S>
where
    S: tower::Service<Req>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let delay = self.bucket.reserve();
        // The inner future does not send anything until it is polled, i.e. after the delay.
        let fut = self.inner.call(req);
        Box::pin(async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            fut.await
        })
    }
}

async fn limited_client(kubeconfig: &str, qps: f64, burst: f64) -> Result<kube::Client, BoxError> {
    let kc = kube::config::Kubeconfig::from_yaml(kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    let builder = kube::client::ClientBuilder::try_from(config)?;
    Ok(builder
        .with_layer(&RateLimitLayer(Arc::new(Bucket::new(qps, burst))))
        .build())
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------------------
// The controller process.

struct ChildArgs {
    kubeconfig: String,
    qps: f64,
    burst: f64,
    workers: usize,
    mode: String,
}

fn parse_child_args(args: &[String]) -> Result<ChildArgs, BoxError> {
    let get = |flag: &str| -> Result<String, BoxError> {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
            .ok_or_else(|| format!("missing {flag}").into())
    };
    Ok(ChildArgs {
        kubeconfig: get("--kubeconfig")?,
        qps: get("--qps")?.parse()?,
        burst: get("--burst")?.parse()?,
        workers: get("--workers")?.parse()?,
        mode: get("--mode")?,
    })
}

async fn child_main(args: ChildArgs) -> Result<(), BoxError> {
    let yaml = std::fs::read_to_string(&args.kubeconfig)?;
    let client = limited_client(&yaml, args.qps, args.burst).await?;
    let event_client = limited_client(&yaml, args.qps, args.burst).await?;
    let mut fake = FakeConfig::default();
    fake.faults
        .insert("*".to_string(), FaultSpec::latency(CLOUD_LATENCY));
    let cloud = Arc::new(FakeCloud::new(fake)?);
    let control = cloud.handle();
    let config = ControllerConfig {
        concurrent_node_syncs: args.workers,
        node_monitor_period: Duration::from_secs(3600),
        ..ControllerConfig::default()
    };
    let ctx = ControllerContext {
        client: client.clone(),
        event_client,
        cloud,
        config: Arc::new(config),
        metrics: ControllerMetrics::default(),
        health: HealthRegistry::new(),
        identity: "node-scale_bench".to_string(),
    };
    let mut stats = serde_json::Map::new();
    if args.mode == "lifecycle-pass" {
        let informers = SharedInformers::new(client.clone());
        let controller = CloudNodeLifecycleController::new(&ctx, &informers);
        let shutdown = CancellationToken::new();
        let started = Instant::now();
        let tasks = informers.start(&shutdown);
        informers.wait_nodes_synced().await?;
        let synced = started.elapsed();
        let pass_started = Instant::now();
        let summary = controller.monitor_nodes().await;
        let pass = pass_started.elapsed();
        shutdown.cancel();
        for t in tasks {
            let _ = t.await;
        }
        stats.insert(
            "list_ms".into(),
            serde_json::json!(synced.as_millis() as u64),
        );
        stats.insert("pass_ms".into(), serde_json::json!(pass.as_millis() as u64));
        stats.insert("summary".into(), serde_json::json!(format!("{summary:?}")));
    } else {
        let shutdown = CancellationToken::new();
        let token = shutdown.clone();
        let run =
            tokio::spawn(
                async move { run_controllers(ctx, &[ControllerName::CloudNode], token).await },
            );
        tokio::time::sleep(Duration::from_millis(500)).await;
        println!("READY");
        std::io::stdout().flush()?;
        // Run until the parent closes our stdin.
        tokio::task::spawn_blocking(|| {
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
        })
        .await?;
        shutdown.cancel();
        run.await??;
    }
    stats.insert("cloud_calls".into(), serde_json::to_value(control.calls())?);
    stats.insert("peak_rss_kib".into(), serde_json::json!(peak_rss_kib()));
    println!("STATS {}", serde_json::Value::Object(stats));
    Ok(())
}

// ---------------------------------------------------------------------------------------------------------
// The parent: API server, load, measurement.

struct Scenario {
    name: &'static str,
    nodes: usize,
    qps: f64,
    burst: f64,
    workers: usize,
}

fn kubelet_node(name: &str, i: usize, tainted: bool, ready: &str) -> Node {
    let mut node = Node::default();
    node.metadata.name = Some(name.to_string());
    node.metadata.labels = Some(BTreeMap::from([(
        "kubernetes.io/hostname".to_string(),
        name.to_string(),
    )]));
    node.spec = Some(NodeSpec {
        provider_id: (!tainted).then(|| format!("fake://{name}")),
        taints: tainted.then(|| {
            vec![Taint {
                key: TAINT_UNINITIALIZED.to_string(),
                value: Some("true".to_string()),
                effect: "NoSchedule".to_string(),
                time_added: None,
            }]
        }),
        ..NodeSpec::default()
    });
    node.status = Some(NodeStatus {
        addresses: Some(vec![
            NodeAddress {
                type_: "InternalIP".to_string(),
                address: format!("10.{}.{}.{}", i / 65536 % 256, i / 256 % 256, i % 256),
            },
            NodeAddress {
                type_: "Hostname".to_string(),
                address: name.to_string(),
            },
        ]),
        conditions: Some(vec![NodeCondition {
            type_: "Ready".to_string(),
            status: ready.to_string(),
            ..NodeCondition::default()
        }]),
        ..NodeStatus::default()
    });
    node
}

fn is_tainted(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == TAINT_UNINITIALIZED))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// Creates the nodes with `concurrency` requests in flight; returns when each create finished.
async fn create_nodes(
    client: &kube::Client,
    nodes: Vec<Node>,
    concurrency: usize,
) -> HashMap<String, Instant> {
    let api: Api<Node> = Api::all(client.clone());
    let creates: Vec<_> = nodes
        .into_iter()
        .map(|node| {
            let api = api.clone();
            async move {
                let name = node.metadata.name.clone().unwrap_or_default();
                api.create(&PostParams::default(), &node)
                    .await
                    .unwrap_or_else(|e| panic!("create node {name}: {e}"));
                (name, Instant::now())
            }
        })
        .collect();
    futures::stream::iter(creates)
        .buffer_unordered(concurrency)
        .collect()
        .await
}

struct Child {
    process: std::process::Child,
    stdout: BufReader<std::process::ChildStdout>,
}

impl Child {
    fn spawn(kubeconfig: &std::path::Path, s: &Scenario, mode: &str) -> Result<Child, BoxError> {
        let mut process = Command::new(std::env::current_exe()?)
            .arg("--child")
            .args(["--kubeconfig", &kubeconfig.display().to_string()])
            .args(["--qps", &s.qps.to_string(), "--burst", &s.burst.to_string()])
            .args(["--workers", &s.workers.to_string(), "--mode", mode])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let stdout = BufReader::new(process.stdout.take().ok_or("no child stdout")?);
        Ok(Child { process, stdout })
    }

    fn read_line_starting(&mut self, prefix: &str) -> Result<String, BoxError> {
        let mut line = String::new();
        loop {
            line.clear();
            if self.stdout.read_line(&mut line)? == 0 {
                return Err(format!("controller process ended before printing {prefix}").into());
            }
            if let Some(rest) = line.trim_end().strip_prefix(prefix) {
                return Ok(rest.trim().to_string());
            }
        }
    }

    fn finish(mut self) -> Result<serde_json::Value, BoxError> {
        drop(self.process.stdin.take());
        let stats = self.read_line_starting("STATS")?;
        self.process.wait()?;
        Ok(serde_json::from_str(&stats)?)
    }
}

fn controller_requests(server: &TestApiServer) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for r in server.controls().request_log() {
        if r.user != CONTROLLER_USER {
            continue;
        }
        let key = if r.subresource.is_empty() {
            format!("{} {}", r.verb, r.resource)
        } else {
            format!("{} {}/{}", r.verb, r.resource, r.subresource)
        };
        *out.entry(key).or_insert(0) += 1;
    }
    out
}

async fn start_server() -> Result<(TestApiServer, std::path::PathBuf), BoxError> {
    let server = TestApiServer::builder()
        .user(
            CONTROLLER_TOKEN,
            UserInfo::new(CONTROLLER_USER, &["system:masters"]),
        )
        .request_log_capacity(500_000)
        .not_ready_taint(false)
        .start()
        .await?;
    let yaml = server
        .kubeconfig_yaml()
        .replace(server.token(), CONTROLLER_TOKEN);
    let path = std::env::temp_dir().join(format!("node-scale-{}.kubeconfig", std::process::id()));
    std::fs::write(&path, yaml)?;
    Ok((server, path))
}

async fn count_events(client: &kube::Client, reason: &str) -> usize {
    let api: Api<Event> = Api::all(client.clone());
    match api.list(&ListParams::default()).await {
        Ok(list) => list
            .items
            .iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .count(),
        Err(_) => 0,
    }
}

async fn initialization_scenario(s: Scenario) -> Result<(), BoxError> {
    let (server, kubeconfig) = start_server().await?;
    let admin = server.client()?;
    let mut child = Child::spawn(&kubeconfig, &s, "run")?;
    child.read_line_starting("READY")?;

    // Watch for initialized nodes from the outside.
    let initialized: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let seen = initialized.clone();
    let watch_client = admin.clone();
    let watch = tokio::spawn(async move {
        let stream = watcher(Api::<Node>::all(watch_client), watcher::Config::default());
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            let nodes: Vec<Node> = match event {
                Ok(watcher::Event::Apply(n)) | Ok(watcher::Event::InitApply(n)) => vec![n],
                _ => continue,
            };
            let now = Instant::now();
            let mut seen = seen.lock();
            for n in nodes {
                if !is_tainted(&n) {
                    seen.entry(n.metadata.name.clone().unwrap_or_default())
                        .or_insert(now);
                }
            }
        }
    });

    let nodes: Vec<Node> = (0..s.nodes)
        .map(|i| kubelet_node(&format!("node-{i:05}"), i, true, "True"))
        .collect();
    let started = Instant::now();
    let created = create_nodes(&admin, nodes, 64).await;
    let created_in = started.elapsed();
    let deadline = Instant::now() + Duration::from_secs(600);
    while initialized.lock().len() < s.nodes {
        if Instant::now() > deadline {
            return Err(format!(
                "only {} of {} nodes initialized",
                initialized.lock().len(),
                s.nodes
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let wall = started.elapsed();
    let events_at_end = count_events(&admin, "Synced").await;
    let requests_at_end = controller_requests(&server);
    // Give the event writer time to drain before counting what was stored.
    let drain_deadline = Instant::now() + wall.max(Duration::from_secs(10)) * 2;
    let mut events_final = events_at_end;
    while events_final < s.nodes && Instant::now() < drain_deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
        events_final = count_events(&admin, "Synced").await;
    }
    let stats = child.finish()?;
    watch.abort();

    let mut latencies: Vec<Duration> = {
        let init = initialized.lock();
        created
            .iter()
            .filter_map(|(name, at)| {
                init.get(name)
                    .map(|done| done.saturating_duration_since(*at))
            })
            .collect()
    };
    latencies.sort();
    let writes: u64 = requests_at_end
        .iter()
        .filter(|(k, _)| !k.starts_with("watch ") && !k.starts_with("list "))
        .map(|(_, v)| *v)
        .sum();
    let cloud_calls: u64 = stats["cloud_calls"]
        .as_object()
        .map(|m| m.values().filter_map(|v| v.as_u64()).sum())
        .unwrap_or(0);
    println!(
        "scenario {}: {} nodes, qps {} burst {}, {} workers",
        s.name, s.nodes, s.qps, s.burst, s.workers
    );
    println!(
        "  nodes created in        {:.2} s",
        created_in.as_secs_f64()
    );
    println!("  wall time (all init)    {:.2} s", wall.as_secs_f64());
    println!(
        "  per-node latency        p50 {:.2} s, p99 {:.2} s",
        percentile(&latencies, 0.5).as_secs_f64(),
        percentile(&latencies, 0.99).as_secs_f64()
    );
    println!(
        "  API requests per node   {:.2} (at completion, excluding list/watch): {:?}",
        writes as f64 / s.nodes as f64,
        requests_at_end
    );
    println!(
        "  cloud calls per node    {:.3} ({:?})",
        cloud_calls as f64 / s.nodes as f64,
        stats["cloud_calls"]
    );
    println!(
        "  Synced events stored    {} at completion, {} after draining",
        events_at_end, events_final
    );
    println!(
        "  peak RSS (controllers)  {:.1} MiB",
        stats["peak_rss_kib"].as_u64().unwrap_or(0) as f64 / 1024.0
    );
    let _ = std::fs::remove_file(&kubeconfig);
    server.shutdown().await;
    Ok(())
}

async fn lifecycle_scenario(s: Scenario) -> Result<(), BoxError> {
    let (server, kubeconfig) = start_server().await?;
    let admin = server.client()?;
    let nodes: Vec<Node> = (0..s.nodes)
        .map(|i| kubelet_node(&format!("node-{i:05}"), i, false, "Unknown"))
        .collect();
    create_nodes(&admin, nodes, 64).await;
    let child = Child::spawn(&kubeconfig, &s, "lifecycle-pass")?;
    let stats = child.finish()?;
    let requests = controller_requests(&server);
    let cloud_calls: u64 = stats["cloud_calls"]
        .as_object()
        .map(|m| m.values().filter_map(|v| v.as_u64()).sum())
        .unwrap_or(0);
    println!(
        "scenario {}: one lifecycle pass over {} NotReady nodes, qps {} burst {}",
        s.name, s.nodes, s.qps, s.burst
    );
    println!("  initial list            {} ms", stats["list_ms"]);
    println!("  pass time               {} ms", stats["pass_ms"]);
    println!("  pass summary            {}", stats["summary"]);
    println!(
        "  cloud calls             {cloud_calls} ({:?})",
        stats["cloud_calls"]
    );
    println!("  API requests            {requests:?}");
    println!(
        "  peak RSS (controllers)  {:.1} MiB",
        stats["peak_rss_kib"].as_u64().unwrap_or(0) as f64 / 1024.0
    );
    let _ = std::fs::remove_file(&kubeconfig);
    server.shutdown().await;
    Ok(())
}

fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    if args.first().map(String::as_str) == Some("--child") {
        let child = parse_child_args(&args)?;
        return runtime.block_on(child_main(child));
    }
    let which = args.first().cloned().unwrap_or_else(|| "all".to_string());
    let nodes_override: Option<usize> = args.get(1).and_then(|n| n.parse().ok());
    let scenario_a = Scenario {
        name: "a",
        nodes: nodes_override.unwrap_or(1_000),
        qps: 20.0,
        burst: 30.0,
        workers: 1,
    };
    let scenario_b = Scenario {
        name: "b",
        nodes: nodes_override.unwrap_or(5_000),
        qps: 500.0,
        burst: 1000.0,
        workers: 10,
    };
    let scenario_c = Scenario {
        name: "c",
        nodes: nodes_override.unwrap_or(5_000),
        qps: 20.0,
        burst: 30.0,
        workers: 1,
    };
    runtime.block_on(async {
        match which.as_str() {
            "a" => initialization_scenario(scenario_a).await,
            "b" => initialization_scenario(scenario_b).await,
            "c" => lifecycle_scenario(scenario_c).await,
            "all" => {
                initialization_scenario(scenario_a).await?;
                initialization_scenario(scenario_b).await?;
                lifecycle_scenario(scenario_c).await
            }
            other => Err(format!("unknown scenario {other:?}: use a, b, c or all").into()),
        }
    })
}
