//! Starting and stopping the server: the builder, TLS with a generated CA, the accept loop serving
//! HTTP/1.1 and HTTP/2, the kubeconfig file and ready-made kube clients.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use base64::Engine;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::api;
use crate::auth::{AuthConfig, UserInfo};
use crate::controls::Controls;
use crate::controls_state::ControlsState;
use crate::error::Error;
use crate::service::{ServiceAllocator, parse_cidr};
use crate::state::{Config, State};
use crate::store::Store;
use crate::tls;

/// Configures and starts a [`TestApiServer`].
#[derive(Debug, Clone)]
pub struct Builder {
    plain_http: bool,
    bind: IpAddr,
    port: u16,
    history_window: usize,
    token: String,
    require_auth: bool,
    users: Vec<(String, UserInfo)>,
    kubeconfig_path: Option<PathBuf>,
    seed: u64,
    service_cidr: String,
    node_ports: (u16, u16),
    bookmark_interval: Duration,
    default_watch_timeout: Duration,
    list_wait: Duration,
    not_ready_taint: bool,
    request_log_capacity: usize,
    watch_channel_capacity: usize,
    min_token_expiration: Duration,
}

impl Default for Builder {
    fn default() -> Self {
        Self {
            plain_http: false,
            bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: 0,
            history_window: 10_000,
            token: "test-apiserver-admin-token".to_string(),
            require_auth: false,
            users: Vec::new(),
            kubeconfig_path: None,
            seed: 0x5eed,
            service_cidr: "10.96.0.0/12".to_string(),
            node_ports: (30000, 32767),
            bookmark_interval: Duration::from_secs(1),
            default_watch_timeout: Duration::from_secs(1800),
            list_wait: Duration::from_secs(3),
            not_ready_taint: true,
            request_log_capacity: 100_000,
            watch_channel_capacity: 4096,
            min_token_expiration: Duration::from_secs(600),
        }
    }
}

impl Builder {
    /// Serve plain HTTP instead of HTTPS (default: HTTPS with a generated certificate).
    pub fn plain_http(mut self, plain: bool) -> Self {
        self.plain_http = plain;
        self
    }

    /// The address to listen on (default 127.0.0.1).
    pub fn bind(mut self, addr: IpAddr) -> Self {
        self.bind = addr;
        self
    }

    /// The port to listen on (default 0: a free port).
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// How many changes the watch history keeps (default 10,000). Watches from older
    /// resourceVersions get 410 Expired.
    pub fn history_window(mut self, events: usize) -> Self {
        self.history_window = events;
        self
    }

    /// The administrator token written into the kubeconfig (identity `admin`, group `system:masters`).
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = token.into();
        self
    }

    /// Require a known token on every request (401 otherwise). By default any bearer token, or none,
    /// is accepted.
    pub fn require_auth(mut self, require: bool) -> Self {
        self.require_auth = require;
        self
    }

    /// Adds a token and the identity it authenticates as (also answered by TokenReview).
    pub fn user(mut self, token: impl Into<String>, user: UserInfo) -> Self {
        self.users.push((token.into(), user));
        self
    }

    /// Writes the kubeconfig to this path instead of a temporary directory.
    pub fn kubeconfig_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.kubeconfig_path = Some(path.into());
        self
    }

    /// Seed of the random choices (fault rates, allocated IPs and ports).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The service cluster-IP range (default `10.96.0.0/12`).
    pub fn service_cidr(mut self, cidr: impl Into<String>) -> Self {
        self.service_cidr = cidr.into();
        self
    }

    /// The node port range (default 30000-32767).
    pub fn node_port_range(mut self, first: u16, last: u16) -> Self {
        self.node_ports = (first, last);
        self
    }

    /// How often watches with `allowWatchBookmarks` get a bookmark when the resourceVersion moved
    /// (default 1 s).
    pub fn bookmark_interval(mut self, every: Duration) -> Self {
        self.bookmark_interval = every;
        self
    }

    /// The watch timeout when a request gives no `timeoutSeconds` (default 30 min).
    pub fn default_watch_timeout(mut self, timeout: Duration) -> Self {
        self.default_watch_timeout = timeout;
        self
    }

    /// How long a LIST at a future resourceVersion waits before answering 504 (default 3 s).
    pub fn list_wait(mut self, wait: Duration) -> Self {
        self.list_wait = wait;
        self
    }

    /// Whether new Nodes get the `node.kubernetes.io/not-ready:NoSchedule` taint, as the
    /// TaintNodesByCondition admission plugin of a real server adds it (default true).
    pub fn not_ready_taint(mut self, add: bool) -> Self {
        self.not_ready_taint = add;
        self
    }

    /// How many entries the request log keeps (default 100,000; 0 disables it).
    pub fn request_log_capacity(mut self, entries: usize) -> Self {
        self.request_log_capacity = entries;
        self
    }

    /// How many changes a watcher may fall behind before its stream is ended (default 4096).
    pub fn watch_channel_capacity(mut self, changes: usize) -> Self {
        self.watch_channel_capacity = changes;
        self
    }

    /// The shortest lifetime a TokenRequest may ask for in `spec.expirationSeconds` (default 10
    /// minutes, as a real server enforces; lower it to test token expiry and refresh quickly).
    pub fn min_token_expiration(mut self, shortest: Duration) -> Self {
        self.min_token_expiration = shortest;
        self
    }

    /// Starts the server.
    pub async fn start(self) -> Result<TestApiServer, Error> {
        TestApiServer::start_with(self).await
    }
}

/// The TLS side of a server: the acceptor and the generated CA (none of them over plain HTTP).
struct ServingTls {
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    ca_pem: Option<String>,
    ca_der: Option<Vec<u8>>,
}

/// The host clients use to reach a listener: loopback for a wildcard bind, IPv6 in brackets.
fn client_host(addr: SocketAddr) -> String {
    match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => "127.0.0.1".to_string(),
        IpAddr::V4(ip) => ip.to_string(),
        IpAddr::V6(ip) if ip.is_unspecified() => "[::1]".to_string(),
        IpAddr::V6(ip) => format!("[{ip}]"),
    }
}

/// The steps of [`Builder::start`].
impl Builder {
    /// The service CIDR, parsed, once the service CIDR and node-port range are checked.
    fn validated_service_cidr(&self) -> Result<(u32, u8), Error> {
        let cidr = parse_cidr(&self.service_cidr).ok_or_else(|| {
            Error::Config(format!("invalid service CIDR {:?}", self.service_cidr))
        })?;
        if self.node_ports.0 == 0 || self.node_ports.0 > self.node_ports.1 {
            return Err(Error::Config(format!(
                "invalid node port range {}-{}",
                self.node_ports.0, self.node_ports.1
            )));
        }
        Ok(cidr)
    }

    /// Binds the listener; returns it with the address it got (the port picked when 0 was asked).
    async fn listen(&self) -> Result<(TcpListener, SocketAddr), Error> {
        let requested = SocketAddr::new(self.bind, self.port);
        let listener = TcpListener::bind(requested)
            .await
            .map_err(|source| Error::Bind {
                addr: requested,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| Error::Bind {
            addr: requested,
            source,
        })?;
        Ok((listener, addr))
    }

    /// Generates a CA and a serving certificate for the bind address, unless serving plain HTTP.
    fn serving_tls(&self) -> Result<ServingTls, Error> {
        if self.plain_http {
            return Ok(ServingTls {
                acceptor: None,
                ca_pem: None,
                ca_der: None,
            });
        }
        let material = tls::generate(self.bind)?;
        Ok(ServingTls {
            acceptor: Some(tls::acceptor(&material)?),
            ca_pem: Some(material.ca_pem.clone()),
            ca_der: Some(material.ca_der.clone()),
        })
    }

    /// The state the handlers share: the store with its allocators, the known tokens (the admin's
    /// and the configured users'), the test controls, the settings, and the initial namespaces.
    fn state(
        &self,
        cidr: (u32, u8),
        address: String,
        shutdown: watch::Receiver<bool>,
    ) -> Result<Arc<State>, Error> {
        let services = ServiceAllocator::new(cidr, self.node_ports.0, self.node_ports.1, self.seed);
        let state = Arc::new(State {
            store: Store::with_channel_capacity(
                self.history_window,
                services,
                self.watch_channel_capacity,
            ),
            auth: AuthConfig::default(),
            controls: ControlsState::new(self.seed, self.request_log_capacity),
            cfg: Config {
                require_auth: self.require_auth,
                not_ready_taint: self.not_ready_taint,
                bookmark_interval: self.bookmark_interval.max(Duration::from_millis(10)),
                default_watch_timeout: self.default_watch_timeout,
                list_wait: self.list_wait,
                max_body: 3 * 1024 * 1024,
                min_token_expiration: self.min_token_expiration.max(Duration::from_secs(1)),
            },
            shutdown,
            address: OnceLock::new(),
        });
        let _ = state.address.set(address);
        state.auth.set_identity(&self.token, UserInfo::admin());
        for (token, user) in &self.users {
            state.auth.set_identity(token, user.clone());
        }
        api::seed_namespaces(&state).map_err(|e| {
            Error::Config(format!(
                "failed to create the initial namespaces: {}",
                e.message
            ))
        })?;
        Ok(state)
    }

    /// Writes the kubeconfig to the configured path, or to a temporary directory that lives as long
    /// as the server (returned with the path).
    fn write_kubeconfig(&self, yaml: &str) -> Result<(PathBuf, Option<tempfile::TempDir>), Error> {
        let (path, tempdir) = match &self.kubeconfig_path {
            Some(p) => (p.clone(), None),
            None => {
                let dir = tempfile::Builder::new()
                    .prefix("test-apiserver-")
                    .tempdir()
                    .map_err(Error::TempDir)?;
                (dir.path().join("kubeconfig"), Some(dir))
            }
        };
        std::fs::write(&path, yaml).map_err(|source| Error::Kubeconfig {
            path: path.clone(),
            source,
        })?;
        Ok((path, tempdir))
    }
}

/// A running in-memory API server. Dropping it (or [`TestApiServer::shutdown`]) stops it.
pub struct TestApiServer {
    url: String,
    addr: SocketAddr,
    kubeconfig_path: PathBuf,
    kubeconfig_yaml: String,
    ca_pem: Option<String>,
    ca_der: Option<Vec<u8>>,
    token: String,
    state: Arc<State>,
    shutdown: watch::Sender<bool>,
    accept: Option<JoinHandle<()>>,
    _tempdir: Option<tempfile::TempDir>,
}

impl std::fmt::Debug for TestApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestApiServer")
            .field("url", &self.url)
            .field("kubeconfig", &self.kubeconfig_path)
            .finish_non_exhaustive()
    }
}

fn kubeconfig_yaml(url: &str, ca_pem: Option<&str>, token: &str) -> String {
    let ca = ca_pem
        .map(|pem| {
            format!(
                "    certificate-authority-data: {}\n",
                base64::engine::general_purpose::STANDARD.encode(pem)
            )
        })
        .unwrap_or_default();
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: test-apiserver\n  cluster:\n    server: {url}\n{ca}contexts:\n- name: test-apiserver\n  context:\n    cluster: test-apiserver\n    user: test-apiserver-admin\n    namespace: default\ncurrent-context: test-apiserver\nusers:\n- name: test-apiserver-admin\n  user:\n    token: {token}\npreferences: {{}}\n"
    )
}

impl TestApiServer {
    /// A builder with the defaults (HTTPS on 127.0.0.1, a free port).
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// Starts a server with the default settings.
    pub async fn start() -> Result<Self, Error> {
        Builder::default().start().await
    }

    /// Starts a server as `b` describes: checks the settings, binds the listener, makes the TLS
    /// material, the shared state and the kubeconfig, then spawns the accept loop.
    async fn start_with(b: Builder) -> Result<Self, Error> {
        let cidr = b.validated_service_cidr()?;
        let (listener, addr) = b.listen().await?;
        let host = client_host(addr);
        let tls = b.serving_tls()?;
        let scheme = if b.plain_http { "http" } else { "https" };
        let url = format!("{scheme}://{host}:{}", addr.port());
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let state = b.state(cidr, format!("{host}:{}", addr.port()), shutdown_rx.clone())?;
        let yaml = kubeconfig_yaml(&url, tls.ca_pem.as_deref(), &b.token);
        let (path, tempdir) = b.write_kubeconfig(&yaml)?;
        let accept = tokio::spawn(accept_loop(
            listener,
            tls.acceptor,
            state.clone(),
            shutdown_rx,
        ));
        tracing::info!(%url, kubeconfig = %path.display(), "test API server listening");
        Ok(Self {
            url,
            addr,
            kubeconfig_path: path,
            kubeconfig_yaml: yaml,
            ca_pem: tls.ca_pem,
            ca_der: tls.ca_der,
            token: b.token,
            state,
            shutdown: shutdown_tx,
            accept: Some(accept),
            _tempdir: tempdir,
        })
    }

    /// The base URL (`https://127.0.0.1:PORT`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where the kubeconfig was written.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    /// The kubeconfig text.
    pub fn kubeconfig_yaml(&self) -> &str {
        &self.kubeconfig_yaml
    }

    /// The PEM of the CA that signed the serving certificate (`None` for plain HTTP).
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// The DER of the CA that signed the serving certificate (`None` for plain HTTP).
    pub fn ca_der(&self) -> Option<&[u8]> {
        self.ca_der.as_deref()
    }

    /// The administrator token of the kubeconfig.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// A kube client configuration for this server (trusting its CA, using the admin token).
    pub fn client_config(&self) -> Result<kube::Config, Error> {
        let uri: http::Uri = self
            .url
            .parse()
            .map_err(|e| Error::Config(format!("invalid server URL {}: {e}", self.url)))?;
        let mut cfg = kube::Config::new(uri);
        cfg.root_cert = self.ca_der.clone().map(|der| vec![der]);
        cfg.auth_info = serde_json::from_value(serde_json::json!({"token": self.token}))
            .map_err(|e| Error::Config(format!("failed to build client credentials: {e}")))?;
        cfg.default_namespace = "default".to_string();
        Ok(cfg)
    }

    /// A ready kube client for this server.
    pub fn client(&self) -> Result<kube::Client, Error> {
        kube::Client::try_from(self.client_config()?).map_err(Error::Client)
    }

    /// A kube client built by reading the written kubeconfig file, the way other programs would.
    pub async fn client_from_kubeconfig(&self) -> Result<kube::Client, Error> {
        let kc = kube::config::Kubeconfig::read_from(&self.kubeconfig_path)
            .map_err(Error::ClientConfig)?;
        let cfg =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(Error::ClientConfig)?;
        kube::Client::try_from(cfg).map_err(Error::Client)
    }

    /// The test controls of this server.
    pub fn controls(&self) -> Controls {
        Controls {
            state: self.state.clone(),
        }
    }

    /// Stops accepting, ends every watch and connection, and waits for the accept loop.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        if let Some(task) = self.accept.take() {
            let _ = task.await;
        }
    }
}

impl Drop for TestApiServer {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}

async fn accept_loop(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    state: Arc<State>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let accepted = tokio::select! {
            _ = shutdown.changed() => break,
            r = listener.accept() => r,
        };
        let (stream, _) = match accepted {
            Ok(x) => x,
            Err(e) => {
                tracing::debug!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let state = state.clone();
        let tls = tls.clone();
        let mut conn_shutdown = shutdown.clone();
        tokio::spawn(async move {
            if *conn_shutdown.borrow_and_update() {
                return;
            }
            let svc_state = state.clone();
            let service = service_fn(move |req| crate::http::handle(svc_state.clone(), req));
            let builder = auto::Builder::new(TokioExecutor::new());
            match tls {
                Some(acceptor) => {
                    let stream = tokio::select! {
                        _ = conn_shutdown.changed() => return,
                        s = acceptor.accept(stream) => match s {
                            Ok(s) => s,
                            Err(e) => {
                                tracing::debug!(error = %e, "TLS handshake failed");
                                return;
                            }
                        },
                    };
                    let conn = builder.serve_connection(TokioIo::new(stream), service);
                    tokio::select! {
                        _ = conn_shutdown.changed() => {}
                        r = conn => if let Err(e) = r { tracing::debug!(error = %e, "connection ended with an error") },
                    }
                }
                None => {
                    let conn = builder.serve_connection(TokioIo::new(stream), service);
                    tokio::select! {
                        _ = conn_shutdown.changed() => {}
                        r = conn => if let Err(e) = r { tracing::debug!(error = %e, "connection ended with an error") },
                    }
                }
            }
        });
    }
}
