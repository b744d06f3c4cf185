//! Kubernetes clients: configuration from `--kubeconfig` / `--master` / the environment, and a token-bucket
//! rate limit (`--kube-api-qps` / `--kube-api-burst`) as a tower layer on kube's own service stack.
//!
//! The limiter charges one token when a request is sent. A watch is one request however long its response
//! streams, so open watches never hold any budget.
//!
//! The daemon builds several clients, each with its own bucket so that one kind of traffic cannot starve
//! another:
//!
//! | client            | budget                                           |
//! |-------------------|--------------------------------------------------|
//! | controllers       | `--kube-api-qps` / `--kube-api-burst` (20 / 30)  |
//! | events            | [`events_limits`]: the controllers' numbers, at least 10 qps, burst 25 |
//! | leader election   | [`LEADER_ELECTION_LIMITS`]: 5 qps, burst 10      |
//! | delegated auth    | [`AUTH_LIMITS`]: 20 qps, burst 40 (TokenReview / SubjectAccessReview, cached) |
//!
//! Every client names itself in its `User-Agent` the way upstream's client builder does
//! ([`with_user_agent`], `cloud_controllers::identity`): the controllers' clients (one per controller,
//! sharing the controllers' bucket) and their event clients (sharing the events' bucket) by upstream's client
//! name of the controller, the shared watches as `shared-informers`, leader election as `leader-election`.
//! The controllers' and event clients share one connection pool (`crate::connections::SharedConnections`).

use std::future::Future;
use std::num::NonZeroU32;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use cloud_controllers::identity;
use http::header::{HeaderValue, USER_AGENT};
use kube::config::{KubeConfigOptions, Kubeconfig};
use parking_lot::Mutex;
use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

use crate::rest_client_metrics::{NO_RESPONSE, RestClientMetrics};

/// A token-bucket budget: `qps` tokens per second, at most `burst` saved up. Both are greater than 0
/// ([`RateLimits::new`] refuses other values), so a bucket never has to adjust them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimits {
    /// Sustained requests per second: finite and greater than 0.
    qps: f64,
    /// Requests that may be sent at once after an idle period.
    burst: NonZeroU32,
}

impl RateLimits {
    /// The budget, when `qps` is a rate ([`RateLimits::is_rate`]) and `burst` at least 1.
    pub const fn new(qps: f64, burst: u32) -> Option<Self> {
        match NonZeroU32::new(burst) {
            Some(burst) if Self::is_rate(qps) => Some(RateLimits { qps, burst }),
            _ => None,
        }
    }

    /// Whether `qps` can be a budget's rate: finite and greater than 0.
    pub const fn is_rate(qps: f64) -> bool {
        qps.is_finite() && qps > 0.0
    }

    /// Sustained requests per second.
    pub const fn qps(self) -> f64 {
        self.qps
    }

    /// Requests that may be sent at once after an idle period.
    pub const fn burst(self) -> NonZeroU32 {
        self.burst
    }
}

/// The smallest budget of the events client.
pub const EVENTS_LIMITS: RateLimits = RateLimits::new(10.0, 25).unwrap();

/// The budget of the events client for a given controllers' budget: a bucket of its own with the same
/// numbers (never below [`EVENTS_LIMITS`]), so every write that produces an event can also record it
/// without the events taking from the controllers' requests.
pub fn events_limits(controllers: RateLimits) -> RateLimits {
    RateLimits {
        qps: controllers.qps.max(EVENTS_LIMITS.qps),
        burst: controllers.burst.max(EVENTS_LIMITS.burst),
    }
}

/// The budget of the leader-election client (renewals every retry period need very little).
pub const LEADER_ELECTION_LIMITS: RateLimits = RateLimits::new(5.0, 10).unwrap();

/// The budget of the delegated authentication/authorization clients.
pub const AUTH_LIMITS: RateLimits = RateLimits::new(20.0, 40).unwrap();

/// Errors building a client.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The kubeconfig file could not be read or used.
    #[error("cannot load kubeconfig {path}: {source}")]
    Kubeconfig {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// No configuration could be found in the environment.
    #[error(
        "no Kubernetes client configuration: give --kubeconfig or --master, set KUBECONFIG, or run in a \
         cluster: {0}"
    )]
    Infer(#[source] kube::config::InferConfigError),
    /// `--master` is not a URL.
    #[error("invalid --master {master:?}: {source}")]
    Master {
        /// The value.
        master: String,
        /// Why.
        #[source]
        source: http::uri::InvalidUri,
    },
    /// kube could not build its HTTP stack (TLS material, credentials...).
    #[error("cannot build the Kubernetes client: {0}")]
    Build(#[source] kube::Error),
    /// The kubeconfig names a proxy.
    #[error(
        "cannot build the Kubernetes client: the kubeconfig's proxy-url {0} is not supported; the \
         cloud-controller-manager connects to the API server directly"
    )]
    Proxy(String),
}

/// Loads the client configuration: the kubeconfig file if given, else (without `--master`) KUBECONFIG,
/// `~/.kube/config` and the in-cluster service account; `--master` overrides the server address.
pub async fn load_config(
    kubeconfig: Option<&Path>,
    master: Option<&str>,
) -> Result<kube::Config, ClientError> {
    let mut config = match (kubeconfig, master) {
        (Some(path), _) => {
            let file = Kubeconfig::read_from(path).map_err(|source| ClientError::Kubeconfig {
                path: path.display().to_string(),
                source,
            })?;
            kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
                .await
                .map_err(|source| ClientError::Kubeconfig {
                    path: path.display().to_string(),
                    source,
                })?
        }
        (None, Some(master)) => {
            let url = master.parse().map_err(|source| ClientError::Master {
                master: master.to_string(),
                source,
            })?;
            kube::Config::new(url)
        }
        (None, None) => kube::Config::infer().await.map_err(ClientError::Infer)?,
    };
    if let Some(master) = master {
        config.cluster_url = master.parse().map_err(|source| ClientError::Master {
            master: master.to_string(),
            source,
        })?;
    }
    Ok(config)
}

/// `config` with the `User-Agent` of a client named `client_name` (replacing any other).
pub fn with_user_agent(mut config: kube::Config, client_name: &str) -> kube::Config {
    config.headers.retain(|(name, _)| *name != USER_AGENT);
    // The value is built from the binary's name: a name that is no valid header value gets none.
    if let Ok(value) = HeaderValue::from_str(&identity::user_agent(client_name)) {
        config.headers.push((USER_AGENT, value));
    }
    config
}

/// A token bucket shared by every clone of a [`RateLimitLayer`].
#[derive(Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    state: Mutex<BucketState>,
}

#[derive(Debug)]
struct BucketState {
    /// Tokens available; negative when requests have reserved tokens not yet earned.
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(limits: RateLimits) -> Self {
        let burst = f64::from(limits.burst.get());
        Self {
            qps: limits.qps,
            burst,
            state: Mutex::new(BucketState {
                tokens: burst,
                last: Instant::now(),
            }),
        }
    }

    /// Takes one token and returns how long the caller must wait before using it (zero when one was
    /// available). Reservations are served in call order.
    pub fn reserve(&self) -> Duration {
        let mut state = self.state.lock();
        let now = Instant::now();
        let earned = now.saturating_duration_since(state.last).as_secs_f64() * self.qps;
        state.tokens = (state.tokens + earned).min(self.burst);
        state.last = now;
        state.tokens -= 1.0;
        if state.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-state.tokens / self.qps)
        }
    }
}

/// A tower layer that rate-limits requests with a shared [`TokenBucket`] and records the `rest_client_*`
/// metrics of every request ([`RestClientMetrics`]).
#[derive(Debug, Clone)]
pub struct RateLimitLayer {
    bucket: Arc<TokenBucket>,
    host: Arc<str>,
}

impl RateLimitLayer {
    /// A layer with a fresh, full bucket.
    pub fn new(limits: RateLimits) -> Self {
        Self {
            bucket: Arc::new(TokenBucket::new(limits)),
            host: Arc::from(""),
        }
    }

    /// The layer, for clients of the API server at `server` (the `host` label of the metrics).
    pub fn for_server(mut self, server: &http::Uri) -> Self {
        self.host = server
            .authority()
            .map_or_else(String::new, |a| a.to_string())
            .into();
        self
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit {
            inner,
            bucket: self.bucket.clone(),
            host: self.host.clone(),
            permit: Permit::None,
            waited: Duration::ZERO,
        }
    }
}

/// The rate-limiting service made by [`RateLimitLayer`].
pub struct RateLimit<S> {
    inner: S,
    bucket: Arc<TokenBucket>,
    host: Arc<str>,
    permit: Permit,
    /// How long the reserved token made the next request wait.
    waited: Duration,
}

enum Permit {
    /// No token reserved yet.
    None,
    /// A token is reserved and becomes usable when the timer fires.
    Waiting(Pin<Box<Sleep>>),
    /// A token is ready for the next call.
    Ready,
}

impl<S: std::fmt::Debug> std::fmt::Debug for RateLimit<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .field("bucket", &self.bucket)
            .finish()
    }
}

impl<S, B, R> Service<http::Request<B>> for RateLimit<S>
where
    S: Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        loop {
            match &mut self.permit {
                Permit::None => {
                    let wait = self.bucket.reserve();
                    self.waited = wait;
                    self.permit = if wait.is_zero() {
                        Permit::Ready
                    } else {
                        Permit::Waiting(Box::pin(tokio::time::sleep(wait)))
                    };
                }
                Permit::Waiting(sleep) => {
                    ready!(sleep.as_mut().poll(cx));
                    self.permit = Permit::Ready;
                }
                Permit::Ready => return self.inner.poll_ready(cx),
            }
        }
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        self.permit = Permit::None;
        let metrics = RestClientMetrics::global();
        let method = request.method().to_string();
        let host = match request.uri().authority() {
            Some(authority) => authority.to_string(),
            None => self.host.to_string(),
        };
        metrics.waited(&method, &host, self.waited);
        let started = std::time::Instant::now();
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await;
            let code = match &response {
                Ok(response) => response.status().as_u16().to_string(),
                Err(_) => NO_RESPONSE.to_string(),
            };
            metrics.finished(&method, &host, &code, started.elapsed());
            response
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use tower::ServiceExt;

    #[test]
    fn events_budget_follows_the_controllers_budget_with_a_floor() {
        let small = RateLimits::new(5.0, 10).unwrap();
        assert_eq!(events_limits(small), EVENTS_LIMITS);
        let large = RateLimits::new(500.0, 1000).unwrap();
        assert_eq!(events_limits(large), large);
    }

    #[test]
    fn budgets_are_greater_than_zero() {
        assert_eq!(RateLimits::new(0.0, 1), None);
        assert_eq!(RateLimits::new(-1.0, 1), None);
        assert_eq!(RateLimits::new(f64::NAN, 1), None);
        assert_eq!(RateLimits::new(f64::INFINITY, 1), None);
        assert_eq!(RateLimits::new(1.0, 0), None);
        let limits = RateLimits::new(0.5, 1).unwrap();
        assert_eq!((limits.qps(), limits.burst().get()), (0.5, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn burst_then_qps() {
        let start = Instant::now();
        let sent = Arc::new(Mutex::new(Vec::new()));
        let record = sent.clone();
        let inner = tower::service_fn(move |_: http::Request<()>| {
            record.lock().push(start.elapsed());
            async { Ok::<_, Infallible>(http::Response::new(())) }
        });
        let mut service = RateLimitLayer::new(RateLimits::new(10.0, 3).unwrap()).layer(inner);
        for _ in 0..6 {
            let request = http::Request::new(());
            service.ready().await.unwrap().call(request).await.unwrap();
        }
        let millis: Vec<u128> = sent.lock().iter().map(|d| d.as_millis()).collect();
        assert_eq!(millis, vec![0, 0, 0, 100, 200, 300]);
    }

    #[tokio::test(start_paused = true)]
    async fn idle_time_refills_up_to_the_burst_only() {
        let bucket = TokenBucket::new(RateLimits::new(2.0, 2).unwrap());
        assert_eq!(bucket.reserve(), Duration::ZERO);
        assert_eq!(bucket.reserve(), Duration::ZERO);
        assert_eq!(bucket.reserve(), Duration::from_millis(500));
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(bucket.reserve(), Duration::ZERO);
        assert_eq!(bucket.reserve(), Duration::ZERO);
        assert_eq!(bucket.reserve(), Duration::from_millis(500));
    }

    /// Responses that never finish (like watches) hold no budget: later requests are sent at the token
    /// rate regardless of how many earlier ones are still streaming.
    #[tokio::test(start_paused = true)]
    async fn long_running_requests_do_not_hold_budget() {
        let start = Instant::now();
        let sent = Arc::new(Mutex::new(Vec::new()));
        let record = sent.clone();
        let inner = tower::service_fn(move |request: http::Request<bool>| {
            record.lock().push(start.elapsed().as_millis());
            let long = *request.body();
            async move {
                if long {
                    std::future::pending::<()>().await;
                }
                Ok::<_, Infallible>(http::Response::new(()))
            }
        });
        let mut service = RateLimitLayer::new(RateLimits::new(4.0, 2).unwrap()).layer(inner);
        let mut watches = Vec::new();
        for _ in 0..2 {
            let call = service
                .ready()
                .await
                .unwrap()
                .call(http::Request::new(true));
            watches.push(tokio::spawn(call));
        }
        for _ in 0..3 {
            let request = http::Request::new(false);
            service.ready().await.unwrap().call(request).await.unwrap();
        }
        assert_eq!(*sent.lock(), vec![0, 0, 250, 500, 750]);
        assert!(watches.iter().all(|w| !w.is_finished()));
    }

    #[tokio::test]
    async fn master_overrides_and_bad_files_are_named() {
        let config = load_config(None, Some("https://10.1.2.3:6443"))
            .await
            .unwrap();
        assert_eq!(config.cluster_url.to_string(), "https://10.1.2.3:6443/");
        let err = load_config(Some(Path::new("/nonexistent/kubeconfig")), None)
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("cannot load kubeconfig /nonexistent/kubeconfig: "),
            "{err}"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        let kubeconfig = r#"
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://1.2.3.4:6443
contexts:
- name: x
  context:
    cluster: c
    user: u
current-context: x
users:
- name: u
  user:
    token: abc
"#;
        std::fs::write(&path, kubeconfig).unwrap();
        let config = load_config(Some(&path), Some("https://5.6.7.8:443"))
            .await
            .unwrap();
        assert_eq!(config.cluster_url.to_string(), "https://5.6.7.8:443/");
        let config = load_config(Some(&path), None).await.unwrap();
        assert_eq!(config.cluster_url.to_string(), "https://1.2.3.4:6443/");
    }
}
