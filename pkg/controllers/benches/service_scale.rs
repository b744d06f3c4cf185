//! Service load-balancer benchmark (scenario d): LoadBalancer Services against the in-memory API server,
//! with the fake cloud adding 20 ms of latency to every call and the service-lb-controller running with
//! 10 workers through `run_controllers`, as the daemon starts it.
//!
//! `cargo bench -p cloud-controllers --bench service_scale -- [--services N] [--nodes N] [--workers N]
//! [--qps Q] [--burst B] [--rate R]`
//!
//! Defaults: 2,000 Services, 100 nodes, 10 workers, a client budget of 500 QPS / 1,000 burst for the
//! controller (and the same, separately, for its events), Services created as fast as 32 concurrent
//! creators manage (`--rate R` paces creation at R Services per second instead).
//!
//! Reported: wall time (first create until the last ingress), p50/p99/max latency from a Service's
//! creation until a watch in this process sees its ingress, the controller's API requests per Service
//! (by verb), cloud calls per Service, events stored, and the peak RSS of this process (the API server,
//! the fake cloud and the controller together). Figures, not assertions.
//!
//! Measured on a 2-core machine shared with other work (release build, 2,000 Services, 100 nodes):
//!
//! | creation                        | last ingress | p50     | p99     | API writes / Service | cloud calls / Service |
//! |---------------------------------|--------------|---------|---------|----------------------|-----------------------|
//! | paced, 200 per second           | 10.0 s       | 24 ms   | 26 ms   | 2.00                 | 1.00                  |
//! | all at once, 500/1000 QPS       | 6.0 s        | 2.5 s   | 5.8 s   | 2.00                 | 1.00                  |
//! | all at once, unthrottled client | 5.1 s        | 2.5 s   | 4.9 s   | 2.00                 | 1.00                  |
//!
//! 4,002 events stored in each run (`EnsuringLoadBalancer` and `EnsuredLoadBalancer` per Service, on the
//! event client's own budget); peak RSS of the whole process 77-81 MiB. The two writes per Service are the
//! floor the semantics allow (the finalizer before the cloud call, the ingress after it). A burst of 2,000
//! is bounded by the workers, not by the controller's overhead: 10 workers with 20 ms per `EnsureLoadBalancer`
//! need at least 2,000 x 20 ms / 10 = 4 s, and a 500 QPS budget needs (4,000 - 1,000 burst) / 500 = 6 s
//! for the writes; a steady 200 Services per second stays far below one second per Service.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use cloud_controllers::{
    ControllerConfig, ControllerContext, ControllerMetrics, ControllerName, HealthRegistry,
    run_controllers,
};
use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{
    Node, NodeAddress, NodeSpec, NodeStatus, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use parking_lot::Mutex;
use provider_fake::{FakeCloud, FakeConfig, FaultSpec};
use test_apiserver::{TestApiServer, UserInfo};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const CONTROLLER_TOKEN: &str = "service-scale-controller-token";
const CONTROLLER_USER: &str = "service-scale-controller";
const CLOUD_LATENCY: Duration = Duration::from_millis(20);
const CREATORS: usize = 32;
const WAIT_SECS: u64 = 600;

struct Args {
    services: usize,
    nodes: usize,
    workers: usize,
    qps: f64,
    burst: f64,
    rate: f64,
}

fn parse_args() -> Result<Args, BoxError> {
    let mut args = Args {
        services: 2_000,
        nodes: 100,
        workers: 10,
        qps: 500.0,
        burst: 1_000.0,
        rate: 0.0,
    };
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < raw.len() {
        let flag = raw[i].as_str();
        // `cargo bench` passes `--bench`; ignore it.
        if flag == "--bench" {
            i += 1;
            continue;
        }
        let value = raw
            .get(i + 1)
            .ok_or_else(|| format!("{flag} needs a value"))?;
        match flag {
            "--services" => args.services = value.parse()?,
            "--nodes" => args.nodes = value.parse()?,
            "--workers" => args.workers = value.parse()?,
            "--qps" => args.qps = value.parse()?,
            "--burst" => args.burst = value.parse()?,
            "--rate" => args.rate = value.parse()?,
            other => return Err(format!("unknown flag {other}").into()),
        }
        i += 2;
    }
    Ok(args)
}

/// A token bucket shared by every request of one client.
struct TokenBucket {
    per_second: f64,
    capacity: f64,
    /// (tokens available, when they were counted)
    level: Mutex<(f64, Instant)>,
}

impl TokenBucket {
    /// Reserves a token and says how long to wait until it is ours.
    fn take(&self) -> Duration {
        let mut level = self.level.lock();
        let now = Instant::now();
        let refilled = level.0 + now.duration_since(level.1).as_secs_f64() * self.per_second;
        *level = (refilled.min(self.capacity) - 1.0, now);
        if level.0 >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-level.0 / self.per_second)
        }
    }
}

/// A tower layer delaying each request until the bucket grants it.
#[derive(Clone)]
struct Throttle(Arc<TokenBucket>);

impl<S> tower::Layer<S> for Throttle {
    type Service = Throttled<S>;
    fn layer(&self, inner: S) -> Throttled<S> {
        Throttled {
            inner,
            bucket: self.0.clone(),
        }
    }
}

struct Throttled<S> {
    inner: S,
    bucket: Arc<TokenBucket>,
}

impl<S, Req> tower::Service<Req> for Throttled<S>
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

    fn call(&mut self, request: Req) -> Self::Future {
        let wait = self.bucket.take();
        let response = self.inner.call(request);
        Box::pin(async move {
            tokio::time::sleep(wait).await;
            response.await
        })
    }
}

async fn throttled_client(
    kubeconfig: &str,
    qps: f64,
    burst: f64,
) -> Result<kube::Client, BoxError> {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    let bucket = TokenBucket {
        per_second: qps,
        capacity: burst,
        level: Mutex::new((burst, Instant::now())),
    };
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&Throttle(Arc::new(bucket)))
        .build())
}

fn node(i: usize) -> Node {
    let name = format!("node-{i:05}");
    Node {
        metadata: kube::api::ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            provider_id: Some(format!("fake://{name}")),
            ..Default::default()
        }),
        status: Some(NodeStatus {
            addresses: Some(vec![NodeAddress {
                type_: "InternalIP".into(),
                address: format!("10.{}.{}.{}", i / 65_536, (i / 256) % 256, i % 256),
            }]),
            ..Default::default()
        }),
    }
}

fn service(name: &str) -> Service {
    Service {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("LoadBalancer".into()),
            ports: Some(vec![ServicePort {
                port: 80,
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    }
}

fn has_ingress(service: &Service) -> bool {
    service
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .is_some_and(|i| !i.is_empty())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kib| kib.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

/// When the watch first saw an ingress, by Service name.
#[derive(Default)]
struct Seen {
    at: Mutex<HashMap<String, Instant>>,
    changed: Notify,
}

async fn run(args: Args) -> Result<(), BoxError> {
    let server = TestApiServer::builder()
        .user(
            CONTROLLER_TOKEN,
            UserInfo::new(CONTROLLER_USER, &["system:masters"]),
        )
        .request_log_capacity(1_000_000)
        .not_ready_taint(false)
        .start()
        .await?;
    let admin = server.client()?;
    let controller_kubeconfig = server
        .kubeconfig_yaml()
        .replace(server.token(), CONTROLLER_TOKEN);

    let nodes: Api<Node> = Api::all(admin.clone());
    futures::stream::iter(0..args.nodes)
        .map(|i| {
            let nodes = nodes.clone();
            async move { nodes.create(&PostParams::default(), &node(i)).await }
        })
        .buffer_unordered(CREATORS)
        .try_collect::<Vec<_>>()
        .await?;

    let mut fake = FakeConfig {
        // Room for every ingress IP (the default pool is a /24).
        load_balancer_cidr: "198.18.0.0/15".into(),
        ..FakeConfig::default()
    };
    fake.faults
        .insert("*".into(), FaultSpec::latency(CLOUD_LATENCY));
    let cloud = Arc::new(FakeCloud::new(fake)?);
    let control = cloud.handle();
    let ctx = ControllerContext {
        client: throttled_client(&controller_kubeconfig, args.qps, args.burst).await?,
        event_client: throttled_client(&controller_kubeconfig, args.qps, args.burst).await?,
        cloud,
        config: Arc::new(ControllerConfig {
            concurrent_service_syncs: args.workers,
            ..ControllerConfig::default()
        }),
        metrics: ControllerMetrics::default(),
        health: HealthRegistry::new(),
        identity: "service-scale_bench".into(),
    };
    let shutdown = CancellationToken::new();
    let controllers = tokio::spawn(run_controllers(
        ctx,
        &[ControllerName::ServiceLb],
        shutdown.clone(),
    ));

    let seen = Arc::new(Seen::default());
    let services: Api<Service> = Api::namespaced(admin.clone(), "default");
    let watch = {
        let seen = seen.clone();
        let stream = watcher(services.clone(), watcher::Config::default()).applied_objects();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(item) = stream.next().await {
                if let Ok(svc) = item
                    && has_ingress(&svc)
                {
                    let name = svc.metadata.name.clone().unwrap_or_default();
                    seen.at.lock().entry(name).or_insert_with(Instant::now);
                    seen.changed.notify_waiters();
                }
            }
        })
    };

    // Warm up: the controller has listed everything once this Service has its ingress.
    services
        .create(&PostParams::default(), &service("warmup"))
        .await?;
    wait_for(&seen, 1, Duration::from_secs(60)).await?;
    server.controls().clear_request_log();
    control.reset_calls();

    println!(
        "scenario d: {} LoadBalancer Services, {} nodes, {} workers, {}/{} QPS, {} ms cloud latency, {}",
        args.services,
        args.nodes,
        args.workers,
        args.qps,
        args.burst,
        CLOUD_LATENCY.as_millis(),
        if args.rate > 0.0 {
            format!("created at {} per second", args.rate)
        } else {
            format!("created by {CREATORS} concurrent creators")
        }
    );
    let created_at: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let start = Instant::now();
    futures::stream::iter(0..args.services)
        .map(|i| {
            let services = services.clone();
            let created_at = created_at.clone();
            let rate = args.rate;
            async move {
                if rate > 0.0 {
                    tokio::time::sleep_until(
                        (start + Duration::from_secs_f64(i as f64 / rate)).into(),
                    )
                    .await;
                }
                let name = format!("svc-{i:05}");
                let sent = Instant::now();
                services
                    .create(&PostParams::default(), &service(&name))
                    .await?;
                created_at.lock().insert(name, sent);
                Ok::<(), kube::Error>(())
            }
        })
        .buffer_unordered(CREATORS)
        .try_collect::<Vec<_>>()
        .await?;
    let created = start.elapsed();
    let progress = {
        let seen = seen.clone();
        let control = control.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(5)).await;
                eprintln!(
                    "  ... {:>6.1} s: {} ingresses seen, {} ensure calls",
                    start.elapsed().as_secs_f64(),
                    seen.at.lock().len().saturating_sub(1),
                    control.call_count("ensure_load_balancer")
                );
            }
        })
    };
    let finished = wait_for(&seen, args.services + 1, Duration::from_secs(WAIT_SECS)).await;
    progress.abort();
    if finished.is_err() {
        let mut codes: BTreeMap<String, u64> = BTreeMap::new();
        for r in server.controls().request_log() {
            *codes
                .entry(format!(
                    "{} {} {} {} {}",
                    r.user, r.verb, r.resource, r.subresource, r.code
                ))
                .or_default() += 1;
        }
        eprintln!("requests: {codes:#?}");
        let events: Api<Event> = Api::all(admin.clone());
        for e in events.list(&ListParams::default()).await?.items {
            if e.reason.as_deref() == Some("SyncLoadBalancerFailed") {
                eprintln!("first failure: {:?}", e.note);
                break;
            }
        }
    }
    finished?;
    let wall = start.elapsed();

    let mut latencies: Vec<Duration> = {
        let at = seen.at.lock();
        created_at
            .lock()
            .iter()
            .filter_map(|(name, sent)| at.get(name).map(|t| t.saturating_duration_since(*sent)))
            .collect()
    };
    latencies.sort();
    let mut requests: BTreeMap<String, u64> = BTreeMap::new();
    for r in server.controls().request_log() {
        if r.user != CONTROLLER_USER || r.resource == "events" {
            continue;
        }
        let key = if r.subresource.is_empty() {
            format!("{} {}", r.verb, r.resource)
        } else {
            format!("{} {}/{}", r.verb, r.resource, r.subresource)
        };
        *requests.entry(key).or_default() += 1;
    }
    let per = |n: u64| n as f64 / args.services as f64;
    let events: Api<Event> = Api::all(admin.clone());
    let stored = events.list(&ListParams::default()).await?.items.len();
    let cloud_calls: u64 = control.calls().values().sum();

    println!(
        "  creates finished after      {:>8.2} s",
        created.as_secs_f64()
    );
    println!(
        "  wall time (last ingress)    {:>8.2} s",
        wall.as_secs_f64()
    );
    println!(
        "  create -> ingress p50       {:>8.0} ms",
        percentile(&latencies, 50.0).as_secs_f64() * 1e3
    );
    println!(
        "  create -> ingress p99       {:>8.0} ms",
        percentile(&latencies, 99.0).as_secs_f64() * 1e3
    );
    println!(
        "  create -> ingress max       {:>8.0} ms",
        percentile(&latencies, 100.0).as_secs_f64() * 1e3
    );
    for (verb, n) in &requests {
        println!("  API {verb:<24} {:>8.2} per Service", per(*n));
    }
    println!(
        "  cloud calls                 {:>8.2} per Service",
        per(cloud_calls)
    );
    println!("  events stored               {stored:>8}");
    println!("  peak RSS (whole process)    {:>8.1} MiB", peak_rss_mib());

    shutdown.cancel();
    controllers.await??;
    watch.abort();
    server.shutdown().await;
    Ok(())
}

async fn wait_for(seen: &Seen, count: usize, timeout: Duration) -> Result<(), BoxError> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let notified = seen.changed.notified();
        if seen.at.lock().len() >= count {
            return Ok(());
        }
        if tokio::time::timeout_at(deadline, notified).await.is_err() {
            return Err(format!(
                "only {} of {count} Services got an ingress within {timeout:?}",
                seen.at.lock().len()
            )
            .into());
        }
    }
}

fn main() -> Result<(), BoxError> {
    let args = parse_args()?;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run(args))
}
