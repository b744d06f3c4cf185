//! `lb-traffic`: the fake cloud's load-balancer data path under load. The daemon (a separate process, the
//! fake provider with `dataPath` on) gives one LoadBalancer Service an address on loopback; the benchmark
//! serves that Service's node ports itself on 127.0.0.1 (an echo server, a sink, and kube-proxy's health
//! endpoint) and measures, through the load balancer and then straight to the node port:
//!
//! - connections per second: workers each connecting, exchanging one byte and closing, for a fixed time;
//! - throughput: one connection sending a fixed amount into a sink that acknowledges the last byte;
//!
//! with the daemon's CPU time per connection and per GiB, and the ratio of the two paths.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::{Node, Service};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::cluster::Cluster;
use crate::daemon::{Daemon, DaemonSpec};
use crate::report;
use crate::scenario::RunSettings;
use crate::workload::ingress_of;

/// Concurrent workers of the connection-rate run.
const WORKERS: usize = 4;
/// How long each connection-rate run lasts.
const RATE_RUN: Duration = Duration::from_secs(5);
/// Bytes sent by a throughput run.
const BULK_BYTES: u64 = 1 << 30;
/// The write size of a throughput run.
const CHUNK: usize = 64 * 1024;

/// The figures of one path.
struct PathFigures {
    connections_per_second: f64,
    mib_per_second: f64,
}

/// Runs the benchmark and returns its Markdown section.
pub async fn run(settings: &RunSettings, dir: &Path) -> anyhow::Result<String> {
    let echo = bind_node_port().await?;
    let sink = bind_node_port().await?;
    let health = TcpListener::bind("127.0.0.1:0").await?;
    let (echo_port, sink_port, health_port) = (
        echo.local_addr()?.port(),
        sink.local_addr()?.port(),
        health.local_addr()?.port(),
    );
    tokio::spawn(serve(echo, echo_one));
    tokio::spawn(serve(sink, sink_all));
    tokio::spawn(serve(health, answer_healthy));

    let cluster = Cluster::start(dir, settings.realkube.as_deref()).await?;
    let cloud_config = dir.join("cloud-config.yaml");
    std::fs::write(
        &cloud_config,
        format!(
            "clusterID: bench\nloadBalancerCIDR: 127.242.0.0/24\ndataPath:\n  kubeProxyHealthPort: {health_port}\n  \
             healthCheckIntervalMillis: 200\n"
        ),
    )?;
    let spec = DaemonSpec {
        binary: settings.binary.clone(),
        kubeconfig: cluster.daemon_kubeconfig().to_path_buf(),
        cloud_config,
        flags: vec![
            "--controllers=service".into(),
            "--leader-elect=false".into(),
        ],
        env: settings.extra_env.clone(),
        secure_port: 0,
    };
    let daemon = Daemon::spawn(&spec, &dir.join("daemon.log"))?;
    let ingress = provision(&cluster, echo_port, sink_port)
        .await
        .with_context(|| {
            format!(
                "the load balancer was not provisioned; the daemon's log:\n{}",
                daemon.log_tail(20)
            )
        })?;
    let (lb_echo, lb_sink) = (
        SocketAddr::new(ingress, 8080),
        SocketAddr::new(ingress, 8081),
    );
    wait_answering(lb_echo).await?;

    let direct = measure(
        ([127, 0, 0, 1], echo_port).into(),
        ([127, 0, 0, 1], sink_port).into(),
    )
    .await?;
    let cpu_before = daemon.cpu_seconds().unwrap_or(0.0);
    let (rate, connections) = connection_rate(lb_echo).await?;
    let cpu_rate = daemon.cpu_seconds().unwrap_or(0.0) - cpu_before;
    let cpu_before = daemon.cpu_seconds().unwrap_or(0.0);
    let mib = bulk_throughput(lb_sink).await?;
    let cpu_bulk = daemon.cpu_seconds().unwrap_or(0.0) - cpu_before;
    let through = PathFigures {
        connections_per_second: rate,
        mib_per_second: mib,
    };
    let rss = daemon.peak_rss_kib().unwrap_or(0);
    daemon.kill().await?;
    cluster.shutdown().await;

    Ok(format!(
        "Run at {} on {} cores (load average at start {}), daemon {}.\n\n\
         | path | connections/s ({WORKERS} workers, 1-byte echo) | throughput, one connection (MiB/s) |\n\
         |---|---:|---:|\n\
         | through the load balancer | {:.0} | {:.0} |\n\
         | straight to the node port | {:.0} | {:.0} |\n\
         | ratio | {:.2} | {:.2} |\n\n\
         The daemon's CPU: {:.0} µs per connection, {:.2} s per GiB; its peak RSS {} MiB.\n",
        k8s_openapi::jiff::Timestamp::now().strftime("%Y-%m-%d %H:%M UTC"),
        report::cores(),
        report::load_average(),
        settings.binary.display(),
        through.connections_per_second,
        through.mib_per_second,
        direct.connections_per_second,
        direct.mib_per_second,
        through.connections_per_second / direct.connections_per_second.max(1.0),
        through.mib_per_second / direct.mib_per_second.max(1.0),
        cpu_rate / connections.max(1) as f64 * 1e6,
        cpu_bulk / (BULK_BYTES as f64 / f64::from(1u32 << 30)),
        rss / 1024,
    ))
}

/// Creates the node (127.0.0.1) and the Service (ports 8080 and 8081 to the echo and sink node ports) and
/// returns the ingress address the daemon gives it.
async fn provision(
    cluster: &Cluster,
    echo_port: u16,
    sink_port: u16,
) -> anyhow::Result<std::net::IpAddr> {
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "bench-node"},
        "status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}]},
    }))?;
    Api::<Node>::all(cluster.client())
        .create(&PostParams::default(), &node)
        .await?;
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": "bench", "namespace": "default"},
        "spec": {"type": "LoadBalancer", "selector": {"app": "bench"}, "ports": [
            {"name": "echo", "port": 8080, "nodePort": echo_port, "protocol": "TCP"},
            {"name": "sink", "port": 8081, "nodePort": sink_port, "protocol": "TCP"},
        ]},
    }))?;
    let services: Api<Service> = Api::namespaced(cluster.client(), "default");
    services.create(&PostParams::default(), &service).await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Some(ip) = ingress_of(&services.get("bench").await?) {
            return Ok(ip.parse()?);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("no ingress address within 30 s")
}

/// A listener on 127.0.0.1 at a free port of the API server's node-port range (30000-32767).
async fn bind_node_port() -> anyhow::Result<TcpListener> {
    for port in 31_000..32_768 {
        if let Ok(listener) = TcpListener::bind(("127.0.0.1", port)).await {
            return Ok(listener);
        }
    }
    bail!("no free port in 31000-32767 on 127.0.0.1")
}

async fn wait_answering(at: SocketAddr) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if exchange_one(at).await.is_ok() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("the load balancer at {at} does not answer")
}

async fn measure(echo: SocketAddr, sink: SocketAddr) -> anyhow::Result<PathFigures> {
    Ok(PathFigures {
        connections_per_second: connection_rate(echo).await?.0,
        mib_per_second: bulk_throughput(sink).await?,
    })
}

/// Connections per second of [`WORKERS`] workers over [`RATE_RUN`], and how many they made.
async fn connection_rate(at: SocketAddr) -> anyhow::Result<(f64, u64)> {
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        let done = done.clone();
        workers.push(tokio::spawn(async move {
            while started.elapsed() < RATE_RUN {
                exchange_one(at).await?;
                done.fetch_add(1, Ordering::Relaxed);
            }
            anyhow::Ok(())
        }));
    }
    for worker in workers {
        worker.await??;
    }
    let done = done.load(Ordering::Relaxed);
    Ok((done as f64 / started.elapsed().as_secs_f64(), done))
}

async fn exchange_one(at: SocketAddr) -> anyhow::Result<()> {
    let mut stream = TcpStream::connect(at).await?;
    stream.set_nodelay(true)?;
    stream.write_all(b"x").await?;
    let mut byte = [0u8; 1];
    stream.read_exact(&mut byte).await?;
    Ok(())
}

/// MiB per second of one connection sending [`BULK_BYTES`] until the sink acknowledges them.
async fn bulk_throughput(at: SocketAddr) -> anyhow::Result<f64> {
    let mut stream = TcpStream::connect(at).await?;
    let chunk = vec![7u8; CHUNK];
    let started = Instant::now();
    let mut sent = 0u64;
    while sent < BULK_BYTES {
        stream.write_all(&chunk).await?;
        sent += CHUNK as u64;
    }
    stream.shutdown().await?;
    let mut ack = [0u8; 8];
    stream.read_exact(&mut ack).await?;
    let received = u64::from_be_bytes(ack);
    if received != sent {
        bail!("the sink got {received} of {sent} bytes");
    }
    Ok(sent as f64 / f64::from(1u32 << 20) / started.elapsed().as_secs_f64())
}

async fn serve<F, Fut>(listener: TcpListener, handle: F)
where
    F: Fn(TcpStream) -> Fut,
    Fut: std::future::Future<Output = std::io::Result<()>> + Send + 'static,
{
    while let Ok((stream, _)) = listener.accept().await {
        let _ = stream.set_nodelay(true);
        tokio::spawn(handle(stream));
    }
}

/// Answers each byte with itself until the client closes.
async fn echo_one(mut stream: TcpStream) -> std::io::Result<()> {
    let mut buf = [0u8; 64];
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        stream.write_all(&buf[..n]).await?;
    }
}

/// Reads until the client's end of stream, then writes the byte count.
async fn sink_all(mut stream: TcpStream) -> std::io::Result<()> {
    let mut buf = vec![0u8; CHUNK];
    let mut total = 0u64;
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        total += n as u64;
    }
    stream.write_all(&total.to_be_bytes()).await
}

/// kube-proxy's `/healthz`, always healthy.
async fn answer_healthy(mut stream: TcpStream) -> std::io::Result<()> {
    let mut buf = [0u8; 512];
    let _ = stream.read(&mut buf).await?;
    stream
        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        .await
}
