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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let objects = args.first().copied().unwrap_or(100_000);
    let concurrency = args.get(1).copied().unwrap_or(32);
    let updates = args.get(2).copied().unwrap_or(50_000);

    let rss_before = rss_mib();
    let server = TestApiServer::builder()
        .request_log_capacity(0)
        .history_window(10_000)
        .start()
        .await
        .context("start the server")?;
    let mut cfg = server.client_config()?;
    cfg.default_retry = false;
    let client = kube::Client::try_from(cfg)?;

    // A watch follows every change while the writers run.
    let seen = Arc::new(AtomicU64::new(0));
    let watch_seen = seen.clone();
    let nodes: Api<Node> = Api::all(client.clone());
    let mut stream = nodes
        .watch(&WatchParams::default().timeout(3600), "0")
        .await?
        .boxed();
    let watcher = tokio::spawn(async move {
        while let Some(ev) = stream.next().await {
            if matches!(
                ev,
                Ok(WatchEvent::Added(_) | WatchEvent::Modified(_) | WatchEvent::Deleted(_))
            ) {
                watch_seen.fetch_add(1, Ordering::Relaxed);
            }
        }
    });

    let body = |i: u64| {
        serde_json::to_vec(&serde_json::json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": format!("node-{i:06}"), "labels": {"bench": "true", "zone": format!("zone-{}", i % 3)}},
            "spec": {"providerID": format!("fake://node-{i:06}")},
            "status": {"addresses": [{"type": "InternalIP", "address": format!("10.{}.{}.{}", i >> 16 & 255, i >> 8 & 255, i & 255)}]}
        }))
        .unwrap_or_default()
    };
    let create = run(&client, objects, concurrency, 201, move |i| {
        (
            "POST",
            "/api/v1/nodes".to_string(),
            "application/json",
            body(i),
        )
    })
    .await?;
    let rss_loaded = rss_mib();

    let update = run(&client, updates, concurrency, 200, move |i| {
        let n = (i * 7919) % objects;
        let patch = format!(r#"{{"metadata":{{"labels":{{"round":"{i}"}}}}}}"#).into_bytes();
        (
            "PATCH",
            format!("/api/v1/nodes/node-{n:06}"),
            "application/merge-patch+json",
            patch,
        )
    })
    .await?;

    let t = Instant::now();
    let (code, full) = send(
        &client,
        "GET",
        "/api/v1/nodes",
        "application/json",
        Vec::new(),
    )
    .await?;
    let list_all = t.elapsed();
    if code != 200 {
        bail!("list failed: {code}");
    }
    let t = Instant::now();
    let mut pages = 0;
    let mut token = String::new();
    loop {
        let path = if token.is_empty() {
            "/api/v1/nodes?limit=500".to_string()
        } else {
            format!("/api/v1/nodes?limit=500&continue={token}")
        };
        let (_, page) = send(&client, "GET", &path, "application/json", Vec::new()).await?;
        let v: serde_json::Value = serde_json::from_slice(&page)?;
        pages += 1;
        match v["metadata"]["continue"].as_str() {
            Some(c) if !c.is_empty() => token = c.to_string(),
            _ => break,
        }
    }
    let paged = t.elapsed();
    let t = Instant::now();
    let (_, selected) = send(
        &client,
        "GET",
        "/api/v1/nodes?labelSelector=zone%3Dzone-1",
        "application/json",
        Vec::new(),
    )
    .await?;
    let select = t.elapsed();

    let expected_events = objects + updates;
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.load(Ordering::Relaxed) < expected_events && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rss_end = rss_mib();
    watcher.abort();

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
        list_all.as_secs_f64() * 1000.0,
        full.len() as f64 / 1048576.0
    );
    println!(
        "| paged LIST (limit=500) | {:.0} ms ({pages} pages) |",
        paged.as_secs_f64() * 1000.0
    );
    println!(
        "| LIST with label selector | {:.0} ms ({:.1} MiB body) |",
        select.as_secs_f64() * 1000.0,
        selected.len() as f64 / 1048576.0
    );
    println!(
        "| watch events received | {} of {expected_events} |",
        seen.load(Ordering::Relaxed)
    );
    println!("| process RSS before start | {rss_before:.0} MiB |");
    println!("| process RSS after creates | {rss_loaded:.0} MiB |");
    println!("| process RSS at the end | {rss_end:.0} MiB |");
    server.shutdown().await;
    Ok(())
}
