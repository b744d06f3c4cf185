//! Benchmark of the in-memory API server over real HTTPS: creates N Nodes (default 100,000) with a
//! pool of concurrent clients, then updates them, lists them and measures memory, while a watch
//! follows every change.
//!
//! Run with `cargo run --release -p test-apiserver --example bench -- [objects] [concurrency] [updates]`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::StreamExt;
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{WatchEvent, WatchParams};
use test_apiserver::TestApiServer;

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

async fn send(
    client: &kube::Client,
    method: &str,
    path: &str,
    ct: &str,
    body: Vec<u8>,
) -> anyhow::Result<(u16, bytes::Bytes)> {
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", ct)
        .body(kube::client::Body::from(body))?;
    let resp = client.send(req).await?;
    let code = resp.status().as_u16();
    let bytes = resp.into_body().collect().await?.to_bytes();
    Ok((code, bytes))
}

/// Runs `total` requests built by `make(i)` over `concurrency` workers; returns the elapsed time.
async fn run<F>(
    client: &kube::Client,
    total: u64,
    concurrency: u64,
    expect: u16,
    make: F,
) -> anyhow::Result<Duration>
where
    F: Fn(u64) -> (&'static str, String, &'static str, Vec<u8>) + Send + Sync + 'static,
{
    let next = Arc::new(AtomicU64::new(0));
    let make = Arc::new(make);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let client = client.clone();
        let next = next.clone();
        let make = make.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    return Ok::<_, anyhow::Error>(());
                }
                let (method, path, ct, body) = make(i);
                let (code, bytes) = send(&client, method, &path, ct, body).await?;
                if code != expect {
                    bail!(
                        "{method} {path}: {code} {}",
                        String::from_utf8_lossy(&bytes)
                    );
                }
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(start.elapsed())
}

/// The command line: `[objects] [concurrency] [updates]`.
struct Args {
    /// Nodes to create (default 100,000).
    objects: u64,
    /// Concurrent clients (default 32).
    concurrency: u64,
    /// Merge patches to send (default 50,000).
    updates: u64,
}

impl Args {
    fn from_env() -> Self {
        let args: Vec<u64> = std::env::args()
            .skip(1)
            .filter_map(|a| a.parse().ok())
            .collect();
        Args {
            objects: args.first().copied().unwrap_or(100_000),
            concurrency: args.get(1).copied().unwrap_or(32),
            updates: args.get(2).copied().unwrap_or(50_000),
        }
    }
}

/// Starts the server (no request log) and a client that does not retry.
async fn start_server() -> anyhow::Result<(TestApiServer, kube::Client)> {
    let server = TestApiServer::builder()
        .request_log_capacity(0)
        .history_window(10_000)
        .start()
        .await
        .context("start the server")?;
    let mut cfg = server.client_config()?;
    cfg.default_retry = false;
    let client = kube::Client::try_from(cfg)?;
    Ok((server, client))
}

/// A watch on Nodes counting every change while the writers run.
struct NodeWatch {
    seen: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl NodeWatch {
    async fn start(client: &kube::Client) -> anyhow::Result<Self> {
        let seen = Arc::new(AtomicU64::new(0));
        let watch_seen = seen.clone();
        let nodes: Api<Node> = Api::all(client.clone());
        let mut stream = nodes
            .watch(&WatchParams::default().timeout(3600), "0")
            .await?
            .boxed();
        let task = tokio::spawn(async move {
            while let Some(ev) = stream.next().await {
                if matches!(
                    ev,
                    Ok(WatchEvent::Added(_) | WatchEvent::Modified(_) | WatchEvent::Deleted(_))
                ) {
                    watch_seen.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        Ok(NodeWatch { seen, task })
    }

    /// The changes seen so far.
    fn seen(&self) -> u64 {
        self.seen.load(Ordering::Relaxed)
    }

    /// Waits until `expected` changes were seen, or `timeout` passed.
    async fn wait_for(&self, expected: u64, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self.seen() < expected && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The JSON of Node number `i`: labels, a provider ID and an internal address.
fn node_body(i: u64) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": format!("node-{i:06}"), "labels": {"bench": "true", "zone": format!("zone-{}", i % 3)}},
        "spec": {"providerID": format!("fake://node-{i:06}")},
        "status": {"addresses": [{"type": "InternalIP", "address": format!("10.{}.{}.{}", i >> 16 & 255, i >> 8 & 255, i & 255)}]}
    }))
    .unwrap_or_default()
}

/// Creates the Nodes; returns the elapsed time.
async fn create_nodes(client: &kube::Client, args: &Args) -> anyhow::Result<Duration> {
    run(client, args.objects, args.concurrency, 201, move |i| {
        (
            "POST",
            "/api/v1/nodes".to_string(),
            "application/json",
            node_body(i),
        )
    })
    .await
}

/// Merge-patches a label onto Nodes spread over all of them; returns the elapsed time.
async fn patch_nodes(client: &kube::Client, args: &Args) -> anyhow::Result<Duration> {
    let objects = args.objects;
    run(client, args.updates, args.concurrency, 200, move |i| {
        let n = (i * 7919) % objects;
        let patch = format!(r#"{{"metadata":{{"labels":{{"round":"{i}"}}}}}}"#).into_bytes();
        (
            "PATCH",
            format!("/api/v1/nodes/node-{n:06}"),
            "application/merge-patch+json",
            patch,
        )
    })
    .await
}

/// How long the three kinds of LIST took, and how much they answered.
struct ListTimings {
    /// One LIST of every Node.
    all: Duration,
    /// Its body's size in bytes.
    all_bytes: usize,
    /// Every Node in pages of 500.
    paged: Duration,
    /// How many pages.
    pages: u64,
    /// A LIST with a label selector (a third of the Nodes).
    selected: Duration,
    /// Its body's size in bytes.
    selected_bytes: usize,
}

/// Times a full LIST, a paged LIST and a LIST with a label selector.
async fn measure_lists(client: &kube::Client) -> anyhow::Result<ListTimings> {
    let t = Instant::now();
    let (code, full) = send(
        client,
        "GET",
        "/api/v1/nodes",
        "application/json",
        Vec::new(),
    )
    .await?;
    let all = t.elapsed();
    if code != 200 {
        bail!("list failed: {code}");
    }
    let t = Instant::now();
    let pages = list_in_pages(client).await?;
    let paged = t.elapsed();
    let t = Instant::now();
    let (_, selected_body) = send(
        client,
        "GET",
        "/api/v1/nodes?labelSelector=zone%3Dzone-1",
        "application/json",
        Vec::new(),
    )
    .await?;
    let selected = t.elapsed();
    Ok(ListTimings {
        all,
        all_bytes: full.len(),
        paged,
        pages,
        selected,
        selected_bytes: selected_body.len(),
    })
}

/// Lists every Node in pages of 500, following the continue tokens; returns the number of pages.
async fn list_in_pages(client: &kube::Client) -> anyhow::Result<u64> {
    let mut pages = 0;
    let mut token = String::new();
    loop {
        let path = if token.is_empty() {
            "/api/v1/nodes?limit=500".to_string()
        } else {
            format!("/api/v1/nodes?limit=500&continue={token}")
        };
        let (_, page) = send(client, "GET", &path, "application/json", Vec::new()).await?;
        let v: serde_json::Value = serde_json::from_slice(&page)?;
        pages += 1;
        match v["metadata"]["continue"].as_str() {
            Some(c) if !c.is_empty() => token = c.to_string(),
            _ => break,
        }
    }
    Ok(pages)
}

/// The figures of a run, printed as a Markdown table.
struct Report<'a> {
    args: &'a Args,
    create: Duration,
    update: Duration,
    lists: ListTimings,
    events_seen: u64,
    rss_before: f64,
    rss_loaded: f64,
    rss_end: f64,
}

impl Report<'_> {
    fn print(&self) {
        let Args {
            objects,
            concurrency,
            updates,
        } = *self.args;
        let (create, update, lists) = (self.create, self.update, &self.lists);
        let expected_events = objects + updates;
        println!("| measurement | value |");
        println!("|---|---|");
        println!("| objects created | {objects} ({concurrency} concurrent clients, HTTPS/1.1) |");
        println!(
            "| create throughput | {:.0} writes/s ({:.1} s) |",
            objects as f64 / create.as_secs_f64(),
            create.as_secs_f64()
        );
        println!(
            "| merge-patch throughput | {:.0} writes/s ({updates} patches, {:.1} s) |",
            updates as f64 / update.as_secs_f64(),
            update.as_secs_f64()
        );
        println!(
            "| LIST of all objects | {:.0} ms ({:.1} MiB body) |",
            lists.all.as_secs_f64() * 1000.0,
            lists.all_bytes as f64 / 1048576.0
        );
        println!(
            "| paged LIST (limit=500) | {:.0} ms ({} pages) |",
            lists.paged.as_secs_f64() * 1000.0,
            lists.pages
        );
        println!(
            "| LIST with label selector | {:.0} ms ({:.1} MiB body) |",
            lists.selected.as_secs_f64() * 1000.0,
            lists.selected_bytes as f64 / 1048576.0
        );
        println!(
            "| watch events received | {} of {expected_events} |",
            self.events_seen
        );
        println!("| process RSS before start | {:.0} MiB |", self.rss_before);
        println!("| process RSS after creates | {:.0} MiB |", self.rss_loaded);
        println!("| process RSS at the end | {:.0} MiB |", self.rss_end);
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::from_env();
    let rss_before = rss_mib();
    let (server, client) = start_server().await?;
    let watch = NodeWatch::start(&client).await?;
    let create = create_nodes(&client, &args).await?;
    let rss_loaded = rss_mib();
    let update = patch_nodes(&client, &args).await?;
    let lists = measure_lists(&client).await?;
    watch
        .wait_for(args.objects + args.updates, Duration::from_secs(60))
        .await;
    let rss_end = rss_mib();
    watch.task.abort();
    Report {
        args: &args,
        create,
        update,
        lists,
        events_seen: watch.seen(),
        rss_before,
        rss_loaded,
        rss_end,
    }
    .print();
    server.shutdown().await;
    Ok(())
}
