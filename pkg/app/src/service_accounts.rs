//! `--use-service-account-credentials`: every controller talks to the API server as a ServiceAccount of its
//! own, the way upstream's controller client builder does it.
//!
//! For each controller the daemon asks the TokenRequest API, with its own client, for a token of the
//! ServiceAccount in `kube-system` named like upstream's client of that controller
//! ([`ControllerName::client_name`]: `node-controller` for both node controllers, `service-controller`,
//! `route-controller`, `pvl-controller`), so that a cluster that ran upstream's CCM with the flag keeps its
//! accounts and their RBAC (`POST /api/v1/namespaces/kube-system/serviceaccounts/<name>/token`), and
//! builds a client that
//! sends that token instead of the daemon's credentials: same server and CA, nothing else of the daemon's
//! identity (no token, client certificate or exec plugin), and a token bucket of its own with the
//! `--kube-api-qps` / `--kube-api-burst` numbers. A background task asks for the next token once 80% of the
//! current one's lifetime has passed and retries with backoff when that fails, so a running controller never
//! sends an expired token while the API server answers.
//!
//! The ServiceAccounts must exist (`deploy/components/service-account-credentials/rbac.yaml` creates
//! them with the roles they need); the daemon does not create them, and a missing one stops the start-up
//! with an error naming it. Tokens are secrets: they are never logged, their header values are marked
//! sensitive and the `Debug` output of the types holding them is redacted.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use cloud_controllers::ControllerName;
use cloud_controllers::context::ControllerClients;
use futures::future::BoxFuture;
use http::HeaderValue;
use http::header::AUTHORIZATION;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;
use kube::api::PostParams;
use parking_lot::RwLock;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::{Layer, Service};

use crate::client::{ClientError, RateLimitLayer, RateLimits, with_user_agent};
use crate::connections::http_stack;

/// The namespace of the controllers' ServiceAccounts.
pub const NAMESPACE: &str = "kube-system";
/// The token lifetime the daemon asks for (`expirationSeconds`), as upstream does.
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(3600);
/// The share of a token's lifetime after which the next token is requested.
pub const REFRESH_FRACTION: f64 = 0.8;
/// The first wait after a failed token request; it doubles on every further failure.
pub const RETRY_INITIAL: Duration = Duration::from_secs(1);
/// The longest wait between failed token requests.
pub const RETRY_MAX: Duration = Duration::from_secs(30);
/// How long transient failures (429, 5xx, connection errors) of the first token request of a controller are
/// retried before the start-up fails.
pub const FIRST_TOKEN_WAIT: Duration = Duration::from_secs(30);

/// A bearer token of a ServiceAccount and its lifetime.
#[derive(Clone)]
pub struct ServiceAccountToken {
    header: HeaderValue,
    issued_at: Instant,
    lifetime: Duration,
}

impl ServiceAccountToken {
    /// A token obtained at `issued_at` (when it was asked for) valid for `lifetime`; `None` when the token
    /// cannot be sent in an HTTP header.
    pub fn new(token: &str, issued_at: Instant, lifetime: Duration) -> Option<Self> {
        let mut header = HeaderValue::from_str(&format!("Bearer {token}")).ok()?;
        header.set_sensitive(true);
        Some(Self {
            header,
            issued_at,
            lifetime,
        })
    }

    /// When the token stops being valid.
    pub fn expires_at(&self) -> Instant {
        self.issued_at + self.lifetime
    }

    /// When the next token is asked for: after [`REFRESH_FRACTION`] of the lifetime.
    pub fn refresh_at(&self) -> Instant {
        self.issued_at + self.lifetime.mul_f64(REFRESH_FRACTION)
    }

    /// The lifetime the API server granted.
    pub fn lifetime(&self) -> Duration {
        self.lifetime
    }

    /// Whether the token carries `token` (for tests and checks; compares without exposing it).
    pub fn is(&self, token: &str) -> bool {
        self.header.as_bytes().strip_prefix(b"Bearer ") == Some(token.as_bytes())
    }
}

impl std::fmt::Debug for ServiceAccountToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceAccountToken")
            .field("token", &"<redacted>")
            .field("lifetime", &self.lifetime)
            .finish()
    }
}

/// Why a token could not be obtained.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The TokenRequest failed.
    #[error("cannot get a token for ServiceAccount {namespace}/{name}: {message}")]
    Request {
        /// Namespace of the ServiceAccount.
        namespace: String,
        /// Name of the ServiceAccount.
        name: String,
        /// What went wrong, with a hint for the usual causes.
        message: String,
        /// Whether asking again may succeed (429, 5xx, connection errors).
        transient: bool,
    },
    /// The answer had no usable token.
    #[error(
        "the API server answered the TokenRequest for ServiceAccount {namespace}/{name} without a usable token"
    )]
    NoToken {
        /// Namespace of the ServiceAccount.
        namespace: String,
        /// Name of the ServiceAccount.
        name: String,
    },
}

impl TokenError {
    /// Whether asking again may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            TokenError::Request {
                transient: true,
                ..
            }
        )
    }
}

/// Where tokens come from: the TokenRequest API ([`TokenRequestIssuer`]), or a stand-in in tests.
pub trait TokenIssuer: Send + Sync + 'static {
    /// Asks for a new token of the ServiceAccount `name`.
    fn issue<'a>(&'a self, name: &'a str)
    -> BoxFuture<'a, Result<ServiceAccountToken, TokenError>>;
}

/// Tokens from `POST .../serviceaccounts/<name>/token`, made with the daemon's own client.
#[derive(Clone)]
pub struct TokenRequestIssuer {
    client: kube::Client,
    namespace: String,
    lifetime: Duration,
}

impl std::fmt::Debug for TokenRequestIssuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenRequestIssuer")
            .field("namespace", &self.namespace)
            .field("lifetime", &self.lifetime)
            .finish_non_exhaustive()
    }
}

impl TokenRequestIssuer {
    /// Asks with `client` for tokens of ServiceAccounts in `namespace`, valid for `lifetime` (whole seconds).
    pub fn new(client: kube::Client, namespace: impl Into<String>, lifetime: Duration) -> Self {
        Self {
            client,
            namespace: namespace.into(),
            lifetime,
        }
    }

    fn error(&self, name: &str, err: kube::Error) -> TokenError {
        let (message, transient) = match &err {
            kube::Error::Api(status) => {
                let hint = match status.code {
                    404 => {
                        " (the ServiceAccount must exist: \
                         deploy/components/service-account-credentials/rbac.yaml creates them)"
                    }
                    401 | 403 => {
                        " (the daemon's own credentials need `create` on serviceaccounts/token for this \
                         ServiceAccount)"
                    }
                    _ => "",
                };
                (
                    format!(
                        "{} {}: {}{hint}",
                        status.code, status.reason, status.message
                    ),
                    status.code == 429 || status.code >= 500,
                )
            }
            other => (other.to_string(), true),
        };
        TokenError::Request {
            namespace: self.namespace.clone(),
            name: name.to_string(),
            message,
            transient,
        }
    }
}

impl TokenIssuer for TokenRequestIssuer {
    fn issue<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<ServiceAccountToken, TokenError>> {
        Box::pin(async move {
            let asked_at = Instant::now();
            let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), &self.namespace);
            let request = TokenRequest {
                spec: Some(TokenRequestSpec {
                    expiration_seconds: Some(
                        i64::try_from(self.lifetime.as_secs()).unwrap_or(i64::MAX),
                    ),
                    ..TokenRequestSpec::default()
                }),
                ..TokenRequest::default()
            };
            let answer = api
                .create_token_request(name, &PostParams::default(), &request)
                .await
                .map_err(|err| self.error(name, err))?;
            // The server may grant another lifetime than the one asked for; its answer counts, from the
            // moment the request was sent.
            let lifetime = answer
                .spec
                .and_then(|spec| spec.expiration_seconds)
                .and_then(|seconds| u64::try_from(seconds).ok())
                .filter(|seconds| *seconds > 0)
                .map_or(self.lifetime, Duration::from_secs);
            answer
                .status
                .and_then(|status| status.token)
                .filter(|token| !token.is_empty())
                .and_then(|token| ServiceAccountToken::new(&token, asked_at, lifetime))
                .ok_or_else(|| TokenError::NoToken {
                    namespace: self.namespace.clone(),
                    name: name.to_string(),
                })
        })
    }
}

/// The current token of one ServiceAccount, shared by its client and its refresher.
#[derive(Clone)]
pub struct SharedToken {
    current: Arc<RwLock<ServiceAccountToken>>,
}

impl SharedToken {
    /// Starts with `token`.
    pub fn new(token: ServiceAccountToken) -> Self {
        Self {
            current: Arc::new(RwLock::new(token)),
        }
    }

    /// The token requests are sent with now.
    pub fn current(&self) -> ServiceAccountToken {
        self.current.read().clone()
    }

    /// Replaces the token.
    pub fn replace(&self, token: ServiceAccountToken) {
        *self.current.write() = token;
    }
}

impl std::fmt::Debug for SharedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("SharedToken").field(&self.current()).finish()
    }
}

/// Gets the first token of ServiceAccount `name`: transient failures are retried with backoff for up to
/// `wait`; others (a missing ServiceAccount, a refused request) fail at once.
pub async fn first_token(
    issuer: &dyn TokenIssuer,
    name: &str,
    wait: Duration,
) -> Result<ServiceAccountToken, TokenError> {
    let deadline = Instant::now() + wait;
    let mut delay = RETRY_INITIAL;
    loop {
        match issuer.issue(name).await {
            Ok(token) => return Ok(token),
            Err(err) if err.is_transient() && Instant::now() + delay <= deadline => {
                tracing::warn!(error = %err, retry_in = ?delay, "cannot get a service-account token yet");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(RETRY_MAX);
            }
            Err(err) => return Err(err),
        }
    }
}

/// Keeps `shared` fresh until `stop`: asks `issuer` for the next token of ServiceAccount `name` once the
/// current one reaches its [`refresh time`](ServiceAccountToken::refresh_at), and when that fails asks
/// again after [`RETRY_INITIAL`], doubling up to [`RETRY_MAX`], until it succeeds.
pub async fn keep_fresh(
    issuer: Arc<dyn TokenIssuer>,
    name: String,
    shared: SharedToken,
    stop: CancellationToken,
) {
    loop {
        let refresh_at = shared.current().refresh_at();
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep_until(refresh_at) => {}
        }
        let mut delay = RETRY_INITIAL;
        loop {
            let result = tokio::select! {
                _ = stop.cancelled() => return,
                result = issuer.issue(&name) => result,
            };
            match result {
                Ok(token) => {
                    tracing::debug!(service_account = %name, lifetime = ?token.lifetime(),
                        "refreshed the service-account token");
                    shared.replace(token);
                    break;
                }
                Err(err) => {
                    let expired = Instant::now() >= shared.current().expires_at();
                    tracing::warn!(service_account = %name, error = %err, retry_in = ?delay, expired,
                        "cannot refresh the service-account token");
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(delay) => {}
                    }
                    delay = (delay * 2).min(RETRY_MAX);
                }
            }
        }
    }
}

/// A tower layer that sends the current [`SharedToken`] as the `Authorization` header of every request.
#[derive(Debug, Clone)]
pub struct BearerTokenLayer {
    token: SharedToken,
}

impl BearerTokenLayer {
    /// A layer sending `token`.
    pub fn new(token: SharedToken) -> Self {
        Self { token }
    }
}

impl<S> Layer<S> for BearerTokenLayer {
    type Service = BearerToken<S>;

    fn layer(&self, inner: S) -> Self::Service {
        BearerToken {
            inner,
            token: self.token.clone(),
        }
    }
}

/// The service made by [`BearerTokenLayer`].
#[derive(Debug, Clone)]
pub struct BearerToken<S> {
    inner: S,
    token: SharedToken,
}

impl<S, B> Service<http::Request<B>> for BearerToken<S>
where
    S: Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        request
            .headers_mut()
            .insert(AUTHORIZATION, self.token.current().header);
        self.inner.call(request)
    }
}

/// A client named `client_name` for the server of `base` that authenticates only with `token` (none of
/// `base`'s credentials) and has a token bucket of its own with `limits`.
pub fn service_account_client(
    base: &kube::Config,
    token: SharedToken,
    limits: RateLimits,
    client_name: &str,
) -> Result<kube::Client, ClientError> {
    let limiter = RateLimitLayer::new(limits).for_server(&base.cluster_url);
    let mut config = with_user_agent(base.clone(), client_name);
    config.auth_info = kube::config::AuthInfo::default();
    config.headers.retain(|(name, _)| *name != AUTHORIZATION);
    let namespace = config.default_namespace.clone();
    let stack = BearerTokenLayer::new(token).layer(http_stack(&config)?);
    Ok(kube::Client::new(limiter.layer(stack), namespace))
}

/// Why the controllers' credentials could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// A token could not be obtained.
    #[error(transparent)]
    Token(#[from] TokenError),
    /// A client could not be built.
    #[error(transparent)]
    Client(#[from] ClientError),
}

/// The clients of the controllers, authenticated as their ServiceAccounts, and the tasks keeping their
/// tokens fresh. Dropping it (or [`ControllerCredentials::stop`]) stops the refreshing.
pub struct ControllerCredentials {
    clients: ControllerClients,
    tokens: Vec<(ControllerName, SharedToken)>,
    refreshers: Vec<JoinHandle<()>>,
    stop: CancellationToken,
}

impl std::fmt::Debug for ControllerCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerCredentials")
            .field("clients", &self.clients)
            .finish_non_exhaustive()
    }
}

impl ControllerCredentials {
    /// Gets a first token for the ServiceAccount of every controller in `controllers` (named after the
    /// controller's client name, as upstream), builds their clients for the server of `base` with `limits`, and starts
    /// refreshing the tokens. Must be called inside a Tokio runtime.
    pub async fn start(
        issuer: Arc<dyn TokenIssuer>,
        base: &kube::Config,
        controllers: &[ControllerName],
        limits: RateLimits,
    ) -> Result<Self, CredentialsError> {
        let mut credentials = ControllerCredentials {
            clients: ControllerClients::new(),
            tokens: Vec::new(),
            refreshers: Vec::new(),
            stop: CancellationToken::new(),
        };
        for controller in controllers {
            let name = controller.client_name();
            let token = first_token(issuer.as_ref(), name, FIRST_TOKEN_WAIT).await?;
            tracing::info!(controller = %controller, service_account = %format!("{NAMESPACE}/{name}"),
                lifetime = ?token.lifetime(), "the controller uses the credentials of its service account");
            let shared = SharedToken::new(token);
            let client =
                service_account_client(base, shared.clone(), limits, controller.client_name())?;
            credentials.clients.insert(*controller, client);
            credentials.tokens.push((*controller, shared.clone()));
            credentials.refreshers.push(tokio::spawn(keep_fresh(
                issuer.clone(),
                name.to_string(),
                shared,
                credentials.stop.clone(),
            )));
        }
        Ok(credentials)
    }

    /// The controllers' clients.
    pub fn clients(&self) -> &ControllerClients {
        &self.clients
    }

    /// The current token of `controller`, if it has credentials of its own.
    pub fn token(&self, controller: ControllerName) -> Option<ServiceAccountToken> {
        self.tokens
            .iter()
            .find(|(name, _)| *name == controller)
            .map(|(_, shared)| shared.current())
    }

    /// Stops refreshing the tokens and waits for the refreshers.
    pub async fn stop(mut self) {
        self.stop.cancel();
        for refresher in std::mem::take(&mut self.refreshers) {
            let _ = refresher.await;
        }
    }
}

impl Drop for ControllerCredentials {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;
    use std::collections::VecDeque;
    use std::convert::Infallible;
    use tower::ServiceExt;

    /// Hands out `token-1`, `token-2`, ... valid for `lifetime`, failing where the script says so; records
    /// when it was asked, relative to its creation.
    struct ScriptedIssuer {
        start: Instant,
        lifetime: Duration,
        failures: Mutex<VecDeque<bool>>,
        calls: Mutex<Vec<Duration>>,
        issued: Mutex<u32>,
    }

    impl ScriptedIssuer {
        fn new(lifetime: Duration, failures: &[bool]) -> Arc<Self> {
            Arc::new(Self {
                start: Instant::now(),
                lifetime,
                failures: Mutex::new(failures.iter().copied().collect()),
                calls: Mutex::new(Vec::new()),
                issued: Mutex::new(0),
            })
        }

        fn calls(&self) -> Vec<u64> {
            self.calls.lock().iter().map(Duration::as_secs).collect()
        }
    }

    impl TokenIssuer for ScriptedIssuer {
        fn issue<'a>(
            &'a self,
            name: &'a str,
        ) -> BoxFuture<'a, Result<ServiceAccountToken, TokenError>> {
            Box::pin(async move {
                self.calls.lock().push(self.start.elapsed());
                if self.failures.lock().pop_front().unwrap_or(false) {
                    return Err(TokenError::Request {
                        namespace: NAMESPACE.to_string(),
                        name: name.to_string(),
                        message: "503 ServiceUnavailable: try later".to_string(),
                        transient: true,
                    });
                }
                let mut issued = self.issued.lock();
                *issued += 1;
                Ok(ServiceAccountToken::new(
                    &format!("token-{issued}"),
                    Instant::now(),
                    self.lifetime,
                )
                .unwrap())
            })
        }
    }

    fn refresher(
        issuer: &Arc<ScriptedIssuer>,
        shared: &SharedToken,
    ) -> (CancellationToken, JoinHandle<()>) {
        let stop = CancellationToken::new();
        let task = tokio::spawn(keep_fresh(
            issuer.clone(),
            "node-controller".to_string(),
            shared.clone(),
            stop.clone(),
        ));
        (stop, task)
    }

    #[tokio::test(start_paused = true)]
    async fn tokens_are_refreshed_at_80_percent_of_their_lifetime() {
        let issuer = ScriptedIssuer::new(Duration::from_secs(100), &[]);
        let first = first_token(issuer.as_ref(), "node-controller", FIRST_TOKEN_WAIT)
            .await
            .unwrap();
        assert_eq!(first.refresh_at() - issuer.start, Duration::from_secs(80));
        assert_eq!(first.expires_at() - issuer.start, Duration::from_secs(100));
        let shared = SharedToken::new(first);
        let (stop, task) = refresher(&issuer, &shared);

        tokio::time::sleep(Duration::from_secs(79)).await;
        assert!(shared.current().is("token-1"));
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(shared.current().is("token-2"));
        // The next refresh is 80 s after the second token was issued.
        tokio::time::sleep(Duration::from_secs(78)).await;
        assert!(shared.current().is("token-2"));
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(shared.current().is("token-3"));
        assert_eq!(issuer.calls(), [0, 80, 160]);

        stop.cancel();
        task.await.unwrap();
        tokio::time::sleep(Duration::from_secs(1000)).await;
        assert_eq!(issuer.calls().len(), 3, "no refresh after stop");
    }

    #[tokio::test(start_paused = true)]
    async fn failed_refreshes_are_retried_with_backoff_past_the_expiry() {
        // Refresh at 8 s; the attempts at 8, 9, 11, 15, 23 s fail, the one at 39 s (after the old token's
        // expiry at 10 s) succeeds; the backoff is capped at RETRY_MAX.
        let issuer = ScriptedIssuer::new(
            Duration::from_secs(10),
            &[false, true, true, true, true, true],
        );
        let shared = SharedToken::new(
            first_token(issuer.as_ref(), "node-controller", FIRST_TOKEN_WAIT)
                .await
                .unwrap(),
        );
        let (stop, task) = refresher(&issuer, &shared);
        tokio::time::sleep(Duration::from_secs(38)).await;
        assert!(shared.current().is("token-1"), "kept while refreshes fail");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(shared.current().is("token-2"));
        assert_eq!(issuer.calls(), [0, 8, 9, 11, 15, 23, 39]);
        stop.cancel();
        task.await.unwrap();

        // The waits between attempts double up to RETRY_MAX.
        let mut script = vec![false];
        script.extend([true; 8]);
        let capped = ScriptedIssuer::new(Duration::from_secs(1000), &script);
        let shared = SharedToken::new(
            first_token(capped.as_ref(), "node-controller", FIRST_TOKEN_WAIT)
                .await
                .unwrap(),
        );
        let (stop, task) = refresher(&capped, &shared);
        tokio::time::sleep(Duration::from_secs(950)).await;
        let calls = capped.calls();
        assert_eq!(calls[1], 800);
        let gaps: Vec<u64> = calls.windows(2).skip(1).map(|w| w[1] - w[0]).collect();
        assert_eq!(gaps, [1, 2, 4, 8, 16, 30, 30, 30], "{calls:?}");
        assert!(shared.current().is("token-2"));
        stop.cancel();
        task.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn first_token_retries_transient_failures_only() {
        let issuer = ScriptedIssuer::new(Duration::from_secs(100), &[true, true]);
        let token = first_token(issuer.as_ref(), "service-controller", FIRST_TOKEN_WAIT)
            .await
            .unwrap();
        assert!(token.is("token-1"));
        assert_eq!(issuer.calls(), [0, 1, 3]);

        // Transient failures past the wait give up.
        let failing = ScriptedIssuer::new(Duration::from_secs(100), &[true; 10]);
        let err = first_token(
            failing.as_ref(),
            "service-controller",
            Duration::from_secs(5),
        )
        .await
        .unwrap_err();
        assert!(err.is_transient());
        assert_eq!(failing.calls(), [0, 1, 3]);

        // A refused request is not retried.
        struct Refusing;
        impl TokenIssuer for Refusing {
            fn issue<'a>(
                &'a self,
                name: &'a str,
            ) -> BoxFuture<'a, Result<ServiceAccountToken, TokenError>> {
                Box::pin(async move {
                    Err(TokenError::Request {
                        namespace: NAMESPACE.to_string(),
                        name: name.to_string(),
                        message: "404 NotFound".to_string(),
                        transient: false,
                    })
                })
            }
        }
        let started = Instant::now();
        let err = first_token(&Refusing, "service-controller", FIRST_TOKEN_WAIT)
            .await
            .unwrap_err();
        assert_eq!(started.elapsed(), Duration::ZERO);
        assert_eq!(
            err.to_string(),
            "cannot get a token for ServiceAccount kube-system/service-controller: 404 NotFound"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn requests_carry_the_current_token() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        let inner = tower::service_fn(move |request: http::Request<()>| {
            let header = request.headers().get(AUTHORIZATION).cloned();
            record.lock().push(header);
            async { Ok::<_, Infallible>(()) }
        });
        let now = Instant::now();
        let shared = SharedToken::new(
            ServiceAccountToken::new("first", now, Duration::from_secs(60)).unwrap(),
        );
        let mut service = BearerTokenLayer::new(shared.clone()).layer(inner);
        let request = http::Request::builder()
            .header(AUTHORIZATION, "Bearer daemon-token")
            .body(())
            .unwrap();
        service.ready().await.unwrap().call(request).await.unwrap();
        shared.replace(ServiceAccountToken::new("second", now, Duration::from_secs(60)).unwrap());
        service
            .ready()
            .await
            .unwrap()
            .call(http::Request::new(()))
            .await
            .unwrap();
        let seen = seen.lock();
        assert_eq!(seen[0].as_ref().unwrap(), "Bearer first");
        assert!(seen[0].as_ref().unwrap().is_sensitive());
        assert_eq!(seen[1].as_ref().unwrap(), "Bearer second");
        assert!(!format!("{shared:?}").contains("second"), "{shared:?}");
        assert!(ServiceAccountToken::new("bad\ntoken", now, Duration::from_secs(1)).is_none());
    }
}
