//! The `test-apiserver` binary: runs the in-memory API server until SIGTERM or SIGINT.

use std::net::IpAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use test_apiserver::TestApiServer;

/// An in-memory Kubernetes API server speaking the real protocol (for tests and demos).
#[derive(Debug, Parser)]
#[command(name = "test-apiserver", version)]
struct Args {
    /// Port to listen on (0 picks a free port).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    bind: IpAddr,
    /// Serve plain HTTP instead of HTTPS.
    #[arg(long)]
    plain_http: bool,
    /// Write the kubeconfig to this path (default: a temporary directory, printed on stderr).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Administrator token written into the kubeconfig. Repeat to accept more tokens; every
    /// token authenticates as the administrator.
    #[arg(long = "token")]
    tokens: Vec<String>,
    /// Reject requests without one of the configured tokens (401).
    #[arg(long)]
    require_auth: bool,
    /// How many changes the watch history keeps.
    #[arg(long, default_value_t = 10_000)]
    history_window: usize,
    /// Do not add the node.kubernetes.io/not-ready taint to new Nodes.
    #[arg(long)]
    no_not_ready_taint: bool,
    /// Log filter (tracing `EnvFilter` syntax).
    #[arg(long, default_value = "info", env = "TEST_APISERVER_LOG")]
    log: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_new(&args.log).context("invalid --log filter")?,
        )
        .with_writer(std::io::stderr)
        .init();
    let mut builder = TestApiServer::builder()
        .port(args.port)
        .bind(args.bind)
        .plain_http(args.plain_http)
        .require_auth(args.require_auth)
        .history_window(args.history_window)
        .not_ready_taint(!args.no_not_ready_taint);
    if let Some(path) = &args.kubeconfig {
        builder = builder.kubeconfig_path(path);
    }
    let mut tokens = args.tokens.iter();
    if let Some(first) = tokens.next() {
        builder = builder.token(first.clone());
    }
    for extra in tokens {
        builder = builder.user(extra.clone(), test_apiserver::UserInfo::admin());
    }
    let server = builder
        .start()
        .await
        .context("failed to start the API server")?;
    eprintln!("kubeconfig: {}", server.kubeconfig_path().display());
    println!("{}", server.url());

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("failed to watch SIGTERM")?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutting down");
    server.shutdown().await;
    Ok(())
}
