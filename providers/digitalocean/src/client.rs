//! The DigitalOcean API client: authentication, pagination, retries, rate limits and metrics.
//!
//! - Every request carries `Authorization: Bearer <token>` (a header marked sensitive; the token never
//!   appears in logs or error messages) and `User-Agent: digitalocean-cloud-controller-manager/<version>`.
//! - Lists ask for `per_page=200` and follow `links.pages.next`, only to the configured API origin.
//! - `429 Too Many Requests` is retried after the server's `Retry-After` or `RateLimit-Reset`; `5xx` and
//!   transport errors are retried with exponential backoff and jitter. `POST` is not idempotent, so it is
//!   retried only after a 429 or a failed connection (when the request cannot have been applied).
//! - When a response says `RateLimit-Remaining: 0`, the next call waits for `RateLimit-Reset` instead of
//!   burning a request on a certain 429. A wait longer than
//!   [`RetryPolicy::max_rate_limit_wait`](crate::RetryPolicy) is not slept: the call fails with
//!   [`ApiError::RateLimited`], which becomes a [`CloudError::Retry`] for the controllers.
//! - `DO_API_RATE_LIMIT_QPS` spaces calls client-side ([`RateLimiter`]).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use cloud_provider::{CloudError, MutationGate};
use reqwest::header::{self, HeaderMap, HeaderValue};
use reqwest::{Method, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use url::Url;

use crate::api::{ErrorBody, Links, LoadBalancer};
use crate::config::{DoConfig, RetryPolicy};
use crate::metrics::{ApiMetrics, OperationLabels};
use crate::ratelimit::RateLimiter;

/// The `User-Agent` of every API request.
pub const USER_AGENT: &str = concat!(
    "digitalocean-cloud-controller-manager/",
    env!("CARGO_PKG_VERSION")
);
/// Page size of list requests (the API maximum).
pub const PER_PAGE: u32 = 200;
/// Header with the request budget of the current window.
pub const HEADER_RATELIMIT_LIMIT: &str = "ratelimit-limit";
/// Header with the requests left in the current window.
pub const HEADER_RATELIMIT_REMAINING: &str = "ratelimit-remaining";
/// Header with the end of the current window, in unix seconds.
pub const HEADER_RATELIMIT_RESET: &str = "ratelimit-reset";
/// Header with the request ID.
pub const HEADER_REQUEST_ID: &str = "x-request-id";

/// Safety net against a server that never stops paginating.
const MAX_PAGES: usize = 10_000;

/// A failed API call. Messages name the call (`GET /v2/droplets/1`) and never contain the token.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApiError {
    /// The API answered with an error status.
    #[error("{request}: HTTP {status} {id}: {message}{}", request_id.as_ref().map(|r| format!(" (request ID {r})")).unwrap_or_default())]
    Status {
        /// The call, e.g. `GET /v2/droplets/1`.
        request: String,
        /// The HTTP status.
        status: u16,
        /// The API's error ID, e.g. `not_found`.
        id: String,
        /// The API's message.
        message: String,
        /// The request ID, from the body or `x-request-id`.
        request_id: Option<String>,
    },
    /// The API kept answering 429, or asked to wait longer than the client accepts.
    #[error("{request}: rate limited by the DigitalOcean API (retry after {after:?})")]
    RateLimited {
        /// The call.
        request: String,
        /// When the budget is expected back.
        after: Duration,
    },
    /// No response (connection, TLS or timeout failure).
    #[error("{request}: {source}")]
    Transport {
        /// The call.
        request: String,
        /// The transport error.
        #[source]
        source: reqwest::Error,
    },
    /// The response body is not what the API documents.
    #[error("{request}: unexpected response body: {message}")]
    Decode {
        /// The call.
        request: String,
        /// What was wrong.
        message: String,
    },
    /// A pagination link points away from the configured API, or pagination does not end.
    #[error("{request}: {message}")]
    Pagination {
        /// The call.
        request: String,
        /// What was wrong.
        message: String,
    },
    /// The HTTP client could not be built.
    #[error("cannot build the DigitalOcean HTTP client: {0}")]
    Build(#[source] reqwest::Error),
    /// A dry run did not send this mutating call ([`DoClient::mutation_gate`]).
    #[error("{request}: dry run: not sent")]
    DryRun {
        /// The call.
        request: String,
    },
}

impl ApiError {
    /// The HTTP status of a [`ApiError::Status`].
    pub fn status(&self) -> Option<u16> {
        match self {
            ApiError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// True for HTTP 404.
    pub fn is_not_found(&self) -> bool {
        self.status() == Some(404)
    }
}

impl From<ApiError> for CloudError {
    fn from(err: ApiError) -> Self {
        match err {
            ApiError::RateLimited { after, .. } => {
                CloudError::retry(err.to_string(), after.max(Duration::from_secs(1)))
            }
            ApiError::DryRun { request } => CloudError::WouldChange { operation: request },
            other => CloudError::provider_with("DigitalOcean API", other),
        }
    }
}

#[derive(Debug, Default)]
struct RateState {
    remaining: Option<u64>,
    reset: Option<SystemTime>,
}

struct Inner {
    http: reqwest::Client,
    base: Url,
    auth: HeaderValue,
    retry: RetryPolicy,
    limiter: Option<RateLimiter>,
    metrics: ApiMetrics,
    rate: parking_lot::Mutex<RateState>,
    gate: MutationGate,
}

/// The API client; cloning shares connections, limits and metrics.
#[derive(Clone)]
pub struct DoClient {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for DoClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DoClient")
            .field("base", &self.inner.base.as_str())
            .field("auth", &"<redacted>")
            .finish_non_exhaustive()
    }
}

/// A successful response.
struct Response {
    status: u16,
    body: bytes::Bytes,
}

/// A successful answer with its HTTP status (for metrics that label by it).
#[derive(Debug)]
pub struct Answered<T> {
    /// The decoded object.
    pub value: T,
    /// The HTTP status of the (last) response.
    pub status: u16,
}

impl DoClient {
    /// Builds a client from the configuration.
    pub fn new(config: &DoConfig) -> Result<Self, ApiError> {
        // reqwest is built without a bundled crypto provider; use ring (a no-op when the process already
        // installed one).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .user_agent(USER_AGENT)
            .timeout(config.request_timeout)
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(ApiError::Build)?;
        let mut auth = HeaderValue::from_str(&format!("Bearer {}", config.access_token.expose()))
            .map_err(|_| ApiError::Decode {
            request: "configuration".into(),
            message: "the access token contains characters not allowed in an HTTP header".into(),
        })?;
        auth.set_sensitive(true);
        Ok(DoClient {
            inner: Arc::new(Inner {
                http,
                base: config.api_url.clone(),
                auth,
                retry: config.retry.clone(),
                limiter: config.api_rate_limit_qps.map(RateLimiter::new),
                metrics: ApiMetrics::default(),
                rate: parking_lot::Mutex::new(RateState::default()),
                gate: MutationGate::default(),
            }),
        })
    }

    /// The API metrics of this client.
    pub fn metrics(&self) -> &ApiMetrics {
        &self.inner.metrics
    }

    /// The gate every mutating call (any method but `GET`) passes through, in [`DoClient::send`].
    pub fn mutation_gate(&self) -> &MutationGate {
        &self.inner.gate
    }

    /// The API base URL.
    pub fn base_url(&self) -> &Url {
        &self.inner.base
    }

    fn url(&self, path: &str) -> Result<Url, ApiError> {
        self.inner
            .base
            .join(path.trim_start_matches('/'))
            .map_err(|e| ApiError::Pagination {
                request: path.to_string(),
                message: format!("invalid API path: {e}"),
            })
    }

    /// `GET path`, returning the object under `key` of the response envelope.
    pub async fn get<T: DeserializeOwned>(
        &self,
        op: &'static str,
        path: &str,
        key: &str,
    ) -> Result<T, ApiError> {
        self.get_answered(op, path, key).await.map(|a| a.value)
    }

    /// Like [`DoClient::get`], with the HTTP status.
    pub async fn get_answered<T: DeserializeOwned>(
        &self,
        op: &'static str,
        path: &str,
        key: &str,
    ) -> Result<Answered<T>, ApiError> {
        let url = self.url(path)?;
        let resp = self.send(op, Method::GET, url, None).await?;
        Ok(Answered {
            value: decode_key(&describe(&Method::GET, path), &resp.body, key)?,
            status: resp.status,
        })
    }

    /// Like [`DoClient::get`], with HTTP 404 as `None`.
    pub async fn get_opt<T: DeserializeOwned>(
        &self,
        op: &'static str,
        path: &str,
        key: &str,
    ) -> Result<Option<T>, ApiError> {
        match self.get(op, path, key).await {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Every object of a paginated list: `GET path?<query>&per_page=200`, then `links.pages.next` until
    /// the last page; the objects are under `key`.
    pub async fn list<T: DeserializeOwned>(
        &self,
        op: &'static str,
        path: &str,
        key: &str,
        query: &[(&str, &str)],
    ) -> Result<Vec<T>, ApiError> {
        self.list_answered(op, path, key, query)
            .await
            .map(|a| a.value)
    }

    /// Like [`DoClient::list`], with the HTTP status of the last page.
    pub async fn list_answered<T: DeserializeOwned>(
        &self,
        op: &'static str,
        path: &str,
        key: &str,
        query: &[(&str, &str)],
    ) -> Result<Answered<Vec<T>>, ApiError> {
        let request = describe(&Method::GET, path);
        let mut url = self.url(path)?;
        {
            let mut pairs = url.query_pairs_mut();
            for (k, v) in query {
                pairs.append_pair(k, v);
            }
            pairs.append_pair("page", "1");
            pairs.append_pair("per_page", &PER_PAGE.to_string());
        }
        let mut out = Vec::new();
        for _ in 0..MAX_PAGES {
            let resp = self.send(op, Method::GET, url.clone(), None).await?;
            let mut page: Value = parse(&request, &resp.body)?;
            let items = page.get_mut(key).map(Value::take).unwrap_or(Value::Null);
            let items: Vec<T> = match items {
                Value::Null => Vec::new(),
                other => serde_json::from_value(other).map_err(|e| ApiError::Decode {
                    request: request.clone(),
                    message: format!("field {key:?}: {e}"),
                })?,
            };
            out.extend(items);
            let links: Links = page
                .get_mut("links")
                .map(Value::take)
                .and_then(|l| serde_json::from_value(l).ok())
                .unwrap_or_default();
            let Some(next) = links.pages.and_then(|p| p.next).filter(|n| !n.is_empty()) else {
                return Ok(Answered {
                    value: out,
                    status: resp.status,
                });
            };
            let next = self
                .inner
                .base
                .join(&next)
                .map_err(|e| ApiError::Pagination {
                    request: request.clone(),
                    message: format!("invalid next-page link: {e}"),
                })?;
            if next.origin() != self.inner.base.origin() {
                return Err(ApiError::Pagination {
                    request,
                    message: format!(
                        "next-page link leaves the configured API ({}); not following it",
                        next.origin().ascii_serialization()
                    ),
                });
            }
            if next == url {
                return Err(ApiError::Pagination {
                    request,
                    message: "next-page link points at the current page".into(),
                });
            }
            url = next;
        }
        Err(ApiError::Pagination {
            request,
            message: format!("more than {MAX_PAGES} pages"),
        })
    }

    /// Every load balancer of the account (`GET /v2/load_balancers`, all pages).
    pub async fn load_balancers(&self) -> Result<Vec<LoadBalancer>, ApiError> {
        self.list(
            "list_load_balancers",
            "v2/load_balancers",
            "load_balancers",
            &[],
        )
        .await
    }

    /// `POST path` with a JSON body, returning the object under `key`.
    pub async fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        op: &'static str,
        path: &str,
        body: &B,
        key: &str,
    ) -> Result<T, ApiError> {
        self.write(op, Method::POST, path, body, key)
            .await
            .map(|a| a.value)
    }

    /// `PUT path` with a JSON body, returning the object under `key`.
    pub async fn put<B: Serialize, T: DeserializeOwned>(
        &self,
        op: &'static str,
        path: &str,
        body: &B,
        key: &str,
    ) -> Result<T, ApiError> {
        self.write(op, Method::PUT, path, body, key)
            .await
            .map(|a| a.value)
    }

    /// `method path` (`POST`, `PUT`) with a JSON body: the object under `key`, with the HTTP status.
    pub async fn write<B: Serialize, T: DeserializeOwned>(
        &self,
        op: &'static str,
        method: Method,
        path: &str,
        body: &B,
        key: &str,
    ) -> Result<Answered<T>, ApiError> {
        let request = describe(&method, path);
        let resp = self.send_json(op, method, path, body).await?;
        Ok(Answered {
            value: decode_key(&request, &resp.body, key)?,
            status: resp.status,
        })
    }

    /// `POST path` with a JSON body, for calls whose answer has no content (`204`).
    pub async fn post_without_answer<B: Serialize>(
        &self,
        op: &'static str,
        path: &str,
        body: &B,
    ) -> Result<(), ApiError> {
        self.send_json(op, Method::POST, path, body)
            .await
            .map(|_| ())
    }

    /// A write the API only validates (the body asks `validate_only`): nothing changes in the cloud, so it
    /// does not pass the mutation gate. Returns the HTTP status of the answer.
    pub async fn validate_only<B: Serialize>(
        &self,
        op: &'static str,
        method: Method,
        path: &str,
        body: &B,
    ) -> Result<u16, ApiError> {
        let bytes = encode(&method, path, body)?;
        let url = self.url(path)?;
        let answer = self.send_counted(op, method, url, Some(bytes)).await?;
        Ok(answer.status)
    }

    /// `DELETE path`.
    pub async fn delete(&self, op: &'static str, path: &str) -> Result<(), ApiError> {
        let url = self.url(path)?;
        self.send(op, Method::DELETE, url, None).await.map(|_| ())
    }

    /// Sends `body` as JSON.
    async fn send_json<B: Serialize>(
        &self,
        op: &'static str,
        method: Method,
        path: &str,
        body: &B,
    ) -> Result<Response, ApiError> {
        let bytes = encode(&method, path, body)?;
        let url = self.url(path)?;
        self.send(op, method, url, Some(bytes)).await
    }

    /// Fetches a metadata-service document (plain text, no credentials sent).
    pub async fn fetch_metadata(&self, url: Url) -> Result<String, ApiError> {
        let request = describe(&Method::GET, url.path());
        let resp = self
            .inner
            .http
            .get(url)
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .map_err(|source| ApiError::Transport {
                request: request.clone(),
                source,
            })?;
        let status = resp.status();
        let text = resp.text().await.map_err(|source| ApiError::Transport {
            request: request.clone(),
            source,
        })?;
        if !status.is_success() {
            return Err(ApiError::Status {
                request,
                status: status.as_u16(),
                id: String::new(),
                message: text.trim().to_string(),
                request_id: None,
            });
        }
        Ok(text.trim().to_string())
    }

    /// Sends one call through the mutation gate, with rate limiting and retries.
    async fn send(
        &self,
        op: &'static str,
        method: Method,
        url: Url,
        body: Option<bytes::Bytes>,
    ) -> Result<Response, ApiError> {
        let request = describe(&method, url.path());
        self.pass_gate(&method, request, body.as_deref())?;
        self.send_counted(op, method, url, body).await
    }

    /// Sends one call, with rate limiting and retries; a failure is counted.
    async fn send_counted(
        &self,
        op: &'static str,
        method: Method,
        url: Url,
        body: Option<bytes::Bytes>,
    ) -> Result<Response, ApiError> {
        let result = self.send_with_retries(op, method, url, body).await;
        if result.is_err() {
            self.inner
                .metrics
                .errors
                .get_or_create(&OperationLabels {
                    request: op.to_string(),
                })
                .inc();
        }
        result
    }

    /// [`DoClient::send`] without the error count.
    async fn send_with_retries(
        &self,
        op: &'static str,
        method: Method,
        url: Url,
        body: Option<bytes::Bytes>,
    ) -> Result<Response, ApiError> {
        let inner = &self.inner;
        let request = describe(&method, url.path());
        let mut attempt: u32 = 0;
        loop {
            if let Some(limiter) = &inner.limiter {
                limiter.acquire().await;
            }
            self.wait_for_budget(&request).await?;

            let builder = self.request_builder(&method, &url, body.as_ref());
            let started = std::time::Instant::now();
            let result = builder.send().await;
            let resp = match result {
                Ok(resp) => resp,
                Err(source) => {
                    inner
                        .metrics
                        .observe(op, "transport", started.elapsed().as_secs_f64());
                    let retryable = source.is_connect() || method != Method::POST;
                    if retryable && attempt < inner.retry.max_retries {
                        let delay = backoff(&inner.retry, attempt);
                        tracing::warn!(request = %request, attempt, ?delay, error = %source, "DigitalOcean API call failed; retrying");
                        inner.metrics.retried(op, "transport");
                        tokio::time::sleep(delay).await;
                        attempt += 1;
                        continue;
                    }
                    return Err(ApiError::Transport { request, source });
                }
            };
            let status = resp.status();
            let headers = resp.headers().clone();
            self.record_budget(&headers);
            let body_bytes = resp.bytes().await;
            inner
                .metrics
                .observe(op, status.as_str(), started.elapsed().as_secs_f64());
            let body_bytes = match body_bytes {
                Ok(b) => b,
                Err(source) => {
                    if method != Method::POST && attempt < inner.retry.max_retries {
                        let delay = backoff(&inner.retry, attempt);
                        inner.metrics.retried(op, "transport");
                        tokio::time::sleep(delay).await;
                        attempt += 1;
                        continue;
                    }
                    return Err(ApiError::Transport { request, source });
                }
            };
            tracing::debug!(request = %request, status = status.as_u16(), attempt, elapsed_ms = started.elapsed().as_millis() as u64, "DigitalOcean API call");
            if status.is_success() {
                return Ok(Response {
                    status: status.as_u16(),
                    body: body_bytes,
                });
            }
            if status == StatusCode::TOO_MANY_REQUESTS {
                let wait = rate_limit_wait(&headers, SystemTime::now())
                    .unwrap_or_else(|| backoff(&inner.retry, attempt));
                if attempt < inner.retry.max_retries && wait <= inner.retry.max_rate_limit_wait {
                    tracing::warn!(request = %request, attempt, ?wait, "DigitalOcean API rate limit reached; waiting for the reset");
                    inner.metrics.retried(op, "rate_limited");
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                    continue;
                }
                return Err(ApiError::RateLimited {
                    request,
                    after: wait,
                });
            }
            if status.is_server_error()
                && method != Method::POST
                && attempt < inner.retry.max_retries
            {
                let delay = backoff(&inner.retry, attempt);
                tracing::warn!(request = %request, status = status.as_u16(), attempt, ?delay, "DigitalOcean API server error; retrying");
                inner.metrics.retried(op, "server_error");
                tokio::time::sleep(delay).await;
                attempt += 1;
                continue;
            }
            return Err(status_error(request, status, &headers, &body_bytes));
        }
    }

    /// The mutation gate: every call but a `GET` passes through it (a dry run refuses it).
    fn pass_gate(
        &self,
        method: &Method,
        request: String,
        body: Option<&[u8]>,
    ) -> Result<(), ApiError> {
        if *method == Method::GET {
            return Ok(());
        }
        let details = || {
            body.map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default()
        };
        if self.inner.gate.check(&request, details).is_err() {
            return Err(ApiError::DryRun { request });
        }
        Ok(())
    }

    /// One attempt's request: the token, JSON accepted, and the JSON body when there is one.
    fn request_builder(
        &self,
        method: &Method,
        url: &Url,
        body: Option<&bytes::Bytes>,
    ) -> reqwest::RequestBuilder {
        let inner = &self.inner;
        let builder = inner
            .http
            .request(method.clone(), url.clone())
            .header(header::AUTHORIZATION, inner.auth.clone())
            .header(header::ACCEPT, "application/json");
        match body {
            Some(body) => builder
                .header(header::CONTENT_TYPE, "application/json")
                .body(body.clone()),
            None => builder,
        }
    }

    /// Waits for the rate-limit window to reset when the last response said the budget is spent.
    async fn wait_for_budget(&self, request: &str) -> Result<(), ApiError> {
        let wait = {
            let state = self.inner.rate.lock();
            match (state.remaining, state.reset) {
                (Some(0), Some(reset)) => reset.duration_since(SystemTime::now()).ok(),
                _ => None,
            }
        };
        let Some(wait) = wait else {
            return Ok(());
        };
        if wait > self.inner.retry.max_rate_limit_wait {
            return Err(ApiError::RateLimited {
                request: request.to_string(),
                after: wait,
            });
        }
        tracing::info!(request = %request, ?wait, "DigitalOcean API budget spent; waiting for the rate-limit reset");
        tokio::time::sleep(wait).await;
        self.inner.rate.lock().remaining = None;
        Ok(())
    }

    fn record_budget(&self, headers: &HeaderMap) {
        let remaining = header_u64(headers, HEADER_RATELIMIT_REMAINING);
        let reset = reset_time(headers);
        if let Some(r) = remaining {
            self.inner
                .metrics
                .rate_limit_remaining
                .set(i64::try_from(r).unwrap_or(i64::MAX));
        }
        if remaining.is_some() || reset.is_some() {
            let mut state = self.inner.rate.lock();
            state.remaining = remaining;
            state.reset = reset;
        }
    }
}

fn describe(method: &Method, path: &str) -> String {
    let path = path.split('?').next().unwrap_or(path);
    if path.starts_with('/') {
        format!("{method} {path}")
    } else {
        format!("{method} /{path}")
    }
}

fn header_u64(headers: &HeaderMap, name: &str) -> Option<u64> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
}

/// The JSON body of a `method path` call.
fn encode<B: Serialize>(method: &Method, path: &str, body: &B) -> Result<bytes::Bytes, ApiError> {
    serde_json::to_vec(body)
        .map(bytes::Bytes::from)
        .map_err(|e| ApiError::Decode {
            request: describe(method, path),
            message: format!("cannot encode the request: {e}"),
        })
}

/// How long a 429 response asks to wait: `Retry-After` (seconds or an HTTP date), else `RateLimit-Reset`
/// (unix seconds).
pub fn rate_limit_wait(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    if let Some(raw) = headers
        .get(header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
    {
        let raw = raw.trim();
        if let Ok(secs) = raw.parse::<u64>() {
            return Some(Duration::from_secs(secs));
        }
        if let Ok(at) = jiff::fmt::rfc2822::parse(raw) {
            let at = SystemTime::from(at.timestamp());
            return Some(at.duration_since(now).unwrap_or_default());
        }
    }
    reset_time(headers).map(|at| at.duration_since(now).unwrap_or_default())
}

/// `RateLimit-Reset` (unix seconds) as a time; a value past what the clock can hold is not a time and is
/// ignored (a retry then backs off as usual).
fn reset_time(headers: &HeaderMap) -> Option<SystemTime> {
    let secs = header_u64(headers, HEADER_RATELIMIT_RESET)?;
    SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}

/// Exponential backoff with jitter: between half and all of `base * 2^attempt`, capped at `max_delay`.
pub fn backoff(policy: &RetryPolicy, attempt: u32) -> Duration {
    let full = policy
        .base_delay
        .saturating_mul(2u32.saturating_pow(attempt.min(20)))
        .min(policy.max_delay);
    let half = full / 2;
    let jitter = rand::random_range(0..=half.as_millis() as u64);
    half + Duration::from_millis(jitter)
}

fn parse(request: &str, body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::Decode {
        request: request.to_string(),
        message: e.to_string(),
    })
}

fn decode_key<T: DeserializeOwned>(request: &str, body: &[u8], key: &str) -> Result<T, ApiError> {
    let mut value = parse(request, body)?;
    let inner = match value.get_mut(key) {
        Some(v) => v.take(),
        None => {
            return Err(ApiError::Decode {
                request: request.to_string(),
                message: format!("no {key:?} object in the response"),
            });
        }
    };
    serde_json::from_value(inner).map_err(|e| ApiError::Decode {
        request: request.to_string(),
        message: format!("field {key:?}: {e}"),
    })
}

fn status_error(request: String, status: StatusCode, headers: &HeaderMap, body: &[u8]) -> ApiError {
    let parsed: ErrorBody = serde_json::from_slice(body).unwrap_or_default();
    let message = if parsed.message.is_empty() {
        status
            .canonical_reason()
            .unwrap_or("unexpected status")
            .to_string()
    } else {
        parsed.message
    };
    let request_id = parsed.request_id.filter(|r| !r.is_empty()).or_else(|| {
        headers
            .get(HEADER_REQUEST_ID)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    });
    ApiError::Status {
        request,
        status: status.as_u16(),
        id: parsed.id,
        message,
        request_id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn wait_prefers_retry_after_then_reset() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        assert_eq!(
            rate_limit_wait(
                &headers(&[("retry-after", "7"), (HEADER_RATELIMIT_RESET, "1003")]),
                now
            ),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            rate_limit_wait(&headers(&[(HEADER_RATELIMIT_RESET, "1003")]), now),
            Some(Duration::from_secs(3))
        );
        // A reset in the past means "now".
        assert_eq!(
            rate_limit_wait(&headers(&[(HEADER_RATELIMIT_RESET, "900")]), now),
            Some(Duration::ZERO)
        );
        let date_now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_770);
        assert_eq!(
            rate_limit_wait(
                &headers(&[("retry-after", "Sun, 06 Nov 1994 08:49:37 GMT")]),
                date_now
            ),
            Some(Duration::from_secs(7))
        );
        assert_eq!(rate_limit_wait(&headers(&[]), now), None);
    }

    #[test]
    fn a_reset_beyond_the_clock_is_ignored() {
        let huge = u64::MAX.to_string();
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        assert_eq!(
            rate_limit_wait(&headers(&[(HEADER_RATELIMIT_RESET, &huge)]), now),
            None
        );
        assert_eq!(
            reset_time(&headers(&[(HEADER_RATELIMIT_RESET, &huge)])),
            None
        );
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let policy = RetryPolicy {
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(1000),
            ..RetryPolicy::default()
        };
        for _ in 0..50 {
            let d0 = backoff(&policy, 0);
            assert!(
                d0 >= Duration::from_millis(50) && d0 <= Duration::from_millis(100),
                "{d0:?}"
            );
            let d3 = backoff(&policy, 3);
            assert!(
                d3 >= Duration::from_millis(400) && d3 <= Duration::from_millis(800),
                "{d3:?}"
            );
            let d9 = backoff(&policy, 9);
            assert!(
                d9 >= Duration::from_millis(500) && d9 <= Duration::from_millis(1000),
                "{d9:?}"
            );
        }
    }

    #[test]
    fn status_error_uses_body_then_header() {
        let body = br#"{"id":"not_found","message":"The resource you were accessing could not be found.","request_id":"r-1"}"#;
        let err = status_error(
            "GET /v2/droplets/9".into(),
            StatusCode::NOT_FOUND,
            &HeaderMap::new(),
            body,
        );
        assert!(err.is_not_found());
        assert_eq!(
            err.to_string(),
            "GET /v2/droplets/9: HTTP 404 not_found: The resource you were accessing could not be found. (request ID r-1)"
        );
        let err = status_error(
            "GET /v2/account".into(),
            StatusCode::BAD_GATEWAY,
            &headers(&[(HEADER_REQUEST_ID, "r-2")]),
            b"<html>",
        );
        assert_eq!(err.status(), Some(502));
        assert!(
            err.to_string().contains("Bad Gateway (request ID r-2)"),
            "{err}"
        );
    }

    #[test]
    fn rate_limited_becomes_retry() {
        let err: CloudError = ApiError::RateLimited {
            request: "GET /v2/droplets".into(),
            after: Duration::from_secs(90),
        }
        .into();
        assert_eq!(err.retry_after(), Some(Duration::from_secs(90)));
        let err: CloudError = ApiError::Decode {
            request: "GET /v2/account".into(),
            message: "bad".into(),
        }
        .into();
        assert!(
            err.to_string()
                .starts_with("DigitalOcean API: GET /v2/account"),
            "{err}"
        );
    }

    #[test]
    fn describe_strips_queries() {
        assert_eq!(
            describe(&Method::GET, "v2/droplets?page=2"),
            "GET /v2/droplets"
        );
        assert_eq!(
            describe(&Method::PUT, "/v2/load_balancers/x"),
            "PUT /v2/load_balancers/x"
        );
    }
}
