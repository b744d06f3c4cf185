//! The HTTPS endpoint on `--bind-address:--secure-port`: `/healthz`, `/livez`, `/readyz` (see
//! [`health`]), `/metrics`, `/metrics/slis`, `/configz` and with `--profiling` the debugging handlers (see
//! [`debug`]), behind delegated authentication and authorization (see [`auth`]) except for the
//! `--authorization-always-allow-paths`.
//!
//! Connections are TLS (rustls with ring, see [`tls`] and [`certificates`]), HTTP/1.1 or HTTP/2 by ALPN.
//! A caller is named by a proxy's certificate and request headers (request-header CA), by a verified
//! client certificate (client CA) or by a bearer token checked with a TokenReview, in that order; no
//! credentials gives 401, a SubjectAccessReview denial 403, both with Kubernetes `Status` JSON bodies.
//!
//! The endpoint runs on a thread and a Tokio runtime of its own: a controller whose cloud call blocks a
//! worker thread of the daemon's runtime (which can also stall that runtime's I/O and timers) does not keep
//! `/healthz` from answering, and saying so.

pub mod auth;
pub mod certificates;
pub mod debug;
pub mod health;
pub mod process_metrics;
pub mod profiles;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use self::auth::{AUTHENTICATED_GROUP, DelegatedAuth, UserInfo};
use self::certificates::{PeerCertificate, ServerTls};
use self::health::{Endpoint, HealthChecks};

/// How long a client has to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Errors starting the endpoint.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The endpoint's thread or runtime could not be started.
    #[error("cannot start the serving thread: {0}")]
    Thread(#[source] std::io::Error),
    /// The address could not be bound.
    #[error("cannot listen on {address}: {source}")]
    Bind {
        /// The address.
        address: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// What the handlers share.
#[derive(Debug)]
pub struct ServingState {
    /// Health checks.
    pub health: HealthChecks,
    /// Every metric of the process, encoded on each scrape.
    pub metrics: Arc<prometheus_client::registry::Registry>,
    /// Delegated authentication and authorization; `None` serves everything without checks (used by
    /// embedders that put the endpoint behind their own protection, never by the daemon).
    pub auth: Option<DelegatedAuth>,
    /// The `/configz` document.
    pub configz: serde_json::Value,
}

/// What the connection's verified client certificate proves, if it has one.
#[derive(Debug, Clone, Default)]
struct PeerIdentity(PeerCertificate);

/// The routes, with authentication and authorization in front of them; `profiling` adds the debugging
/// handlers.
pub fn router(state: Arc<ServingState>, profiling: bool) -> Router {
    Router::new()
        .route("/healthz", get(|s, q| endpoint(s, q, Endpoint::Healthz)))
        .route("/livez", get(|s, q| endpoint(s, q, Endpoint::Livez)))
        .route("/readyz", get(|s, q| endpoint(s, q, Endpoint::Readyz)))
        .route(
            "/healthz/{check}",
            get(|s, p| single_check(s, p, Endpoint::Healthz)),
        )
        .route(
            "/livez/{check}",
            get(|s, p| single_check(s, p, Endpoint::Livez)),
        )
        .route(
            "/readyz/{check}",
            get(|s, p| single_check(s, p, Endpoint::Readyz)),
        )
        .route("/metrics", get(metrics))
        .route("/metrics/slis", get(slis).delete(reset_slis))
        .merge(debug::routes(profiling))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(
            state.clone(),
            authenticate_and_authorize,
        ))
        .with_state(state)
}

async fn endpoint(
    State(state): State<Arc<ServingState>>,
    Query(query): Query<Vec<(String, String)>>,
    which: Endpoint,
) -> Response {
    let verbose = query.iter().any(|(key, _)| key == "verbose");
    let exclude: Vec<String> = query
        .iter()
        .filter(|(key, _)| key == "exclude")
        .map(|(_, value)| value.clone())
        .collect();
    let answer = state.health.answer(which, verbose, &exclude);
    text_response(answer.status, answer.body)
}

async fn single_check(
    State(state): State<Arc<ServingState>>,
    Path(check): Path<String>,
    which: Endpoint,
) -> Response {
    let answer = state.health.answer_one(which, &check);
    text_response(answer.status, answer.body)
}

async fn metrics(State(state): State<Arc<ServingState>>) -> Response {
    let mut text = String::new();
    match prometheus_client::encoding::text::encode(&mut text, &state.metrics) {
        Ok(()) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
            )],
            text,
        )
            .into_response(),
        Err(err) => {
            tracing::error!(error = %err, "cannot encode metrics");
            text_response(
                500,
                "internal server error: cannot encode metrics\n".to_string(),
            )
        }
    }
}

async fn slis(State(state): State<Arc<ServingState>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        )],
        state.health.slis(),
    )
        .into_response()
}

async fn reset_slis(State(state): State<Arc<ServingState>>) -> Response {
    state.health.reset_slis();
    text_response(200, "metrics reset\n".to_string())
}

async fn not_found() -> Response {
    text_response(404, "404 page not found\n".to_string())
}

fn text_response(status: u16, body: String) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            ),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
        ],
        body,
    )
        .into_response()
}

/// A Kubernetes `Status` failure body.
pub fn status_body(code: u16, reason: &str, message: &str) -> serde_json::Value {
    serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": {},
        "code": code,
    })
}

fn status_response(code: u16, reason: &str, message: &str) -> Response {
    let mut body = status_body(code, reason, message);
    if code == 401 {
        // Kubernetes' 401 carries no details.
        if let Some(object) = body.as_object_mut() {
            object.remove("details");
        }
    }
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body.to_string(),
    )
        .into_response()
}

/// The bearer token of the request, if any (never logged).
fn bearer_token(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then(|| token.to_string())
}

async fn authenticate_and_authorize(
    State(state): State<Arc<ServingState>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(auth) = &state.auth else {
        return next.run(request).await;
    };
    let path = request.uri().path().to_string();
    if auth.always_allowed(&path) {
        return next.run(request).await;
    }
    let peer = request
        .extensions()
        .get::<PeerIdentity>()
        .map(|peer| peer.0.clone())
        .unwrap_or_default();
    let from_proxy = match (&peer.proxy, &auth.request_header) {
        (Some(proxy), Some(config)) => match config.user(proxy, request.headers()) {
            Ok(user) => user,
            Err(err) => {
                tracing::debug!(error = %err, %path, "request-header authentication refused");
                return status_response(401, "Unauthorized", "Unauthorized");
            }
        },
        _ => None,
    };
    let from_certificate = peer.user.map(|(username, groups, uid)| UserInfo {
        username,
        uid,
        groups,
        ..UserInfo::default()
    });
    let user = match from_proxy.or(from_certificate) {
        Some(user) => with_authenticated_group(user),
        None => {
            let Some(token) = bearer_token(request.headers()) else {
                return status_response(401, "Unauthorized", "Unauthorized");
            };
            match auth.authenticator.authenticate(&token).await {
                Ok(Some(user)) => with_authenticated_group(user),
                Ok(None) => return status_response(401, "Unauthorized", "Unauthorized"),
                Err(err) => {
                    tracing::warn!(error = %err, %path, "cannot authenticate a request");
                    return status_response(401, "Unauthorized", "Unauthorized");
                }
            }
        }
    };
    let verb = request.method().as_str().to_ascii_lowercase();
    match auth.authorizer.authorize(&user, &verb, &path).await {
        Ok(decision) if decision.allowed => next.run(request).await,
        Ok(decision) => {
            let mut message = format!(
                "forbidden: User {:?} cannot {verb} path {path:?}",
                user.username
            );
            if let Some(reason) = decision.reason {
                message.push_str(": ");
                message.push_str(&reason);
            }
            tracing::debug!(user = %user.username, %verb, %path, "request forbidden");
            status_response(403, "Forbidden", &message)
        }
        Err(err) => {
            tracing::warn!(error = %err, user = %user.username, %path, "cannot authorize a request");
            status_response(
                500,
                "InternalError",
                &format!("Internal error occurred: {err}"),
            )
        }
    }
}

/// `user` with the group every authenticated user is in.
fn with_authenticated_group(mut user: UserInfo) -> UserInfo {
    if !user.groups.iter().any(|g| g == AUTHENTICATED_GROUP) {
        user.groups.push(AUTHENTICATED_GROUP.to_string());
    }
    user
}

/// Binds the listening socket, with `SO_REUSEPORT` when asked (`--permit-port-sharing`). `SO_REUSEADDR`
/// (`--permit-address-sharing`) is set on Unix in any case, as Go's listeners (upstream's) set it, so that
/// a restarted process binds its port at once despite connections of the previous one in TIME_WAIT.
pub async fn bind(
    address: SocketAddr,
    reuse_port: bool,
    reuse_address: bool,
) -> Result<TcpListener, ServeError> {
    let bind = || -> std::io::Result<TcpListener> {
        let socket = match address {
            SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
            SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
        };
        if reuse_address || cfg!(unix) {
            socket.set_reuseaddr(true)?;
        }
        #[cfg(unix)]
        if reuse_port {
            socket.set_reuseport(true)?;
        }
        #[cfg(not(unix))]
        let _ = reuse_port;
        socket.bind(address)?;
        socket.listen(1024)
    };
    bind().map_err(|source| ServeError::Bind { address, source })
}

/// HTTP/2's concurrent streams per connection when `--http2-max-streams-per-connection` is 0 (upstream's).
pub const DEFAULT_MAX_CONCURRENT_STREAMS: u32 = 100;

/// Serves `router` over TLS on `listener` until `shutdown` fires, on a thread with a single-threaded Tokio
/// runtime of its own (see the [module docs](self)); the thread ends when `shutdown` fires. The listener is
/// moved onto that runtime.
pub fn spawn(
    listener: TcpListener,
    tls: Arc<ServerTls>,
    max_concurrent_streams: u32,
    router: Router,
    shutdown: CancellationToken,
) -> Result<std::thread::JoinHandle<()>, ServeError> {
    let listener = listener.into_std().map_err(ServeError::Thread)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ServeError::Thread)?;
    std::thread::Builder::new()
        .name("serving".to_string())
        .spawn(move || {
            runtime.block_on(async move {
                match TcpListener::from_std(listener) {
                    Ok(listener) => {
                        serve(listener, tls, max_concurrent_streams, router, shutdown).await
                    }
                    Err(err) => tracing::error!(error = %err, "cannot serve on the bound socket"),
                }
            });
        })
        .map_err(ServeError::Thread)
}

/// Accepts connections until `shutdown` fires, each served by a task of its own.
async fn serve(
    listener: TcpListener,
    tls: Arc<ServerTls>,
    max_concurrent_streams: u32,
    router: Router,
    shutdown: CancellationToken,
) {
    let max_concurrent_streams = if max_concurrent_streams == 0 {
        DEFAULT_MAX_CONCURRENT_STREAMS
    } else {
        max_concurrent_streams
    };
    loop {
        let (stream, remote) = tokio::select! {
            _ = shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    tracing::warn!(error = %err, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let state = tls.current();
        let acceptor = TlsAcceptor::from(state.config.clone());
        let router = router.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(err)) => {
                    tracing::debug!(%remote, error = %err, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%remote, "TLS handshake timed out");
                    return;
                }
            };
            let peer = PeerIdentity(
                tls.get_ref()
                    .1
                    .peer_certificates()
                    .map(|chain| state.identify(chain))
                    .unwrap_or_default(),
            );
            let service = hyper::service::service_fn(
                move |mut request: http::Request<hyper::body::Incoming>| {
                    request.extensions_mut().insert(peer.clone());
                    router.clone().oneshot(request.map(Body::new))
                },
            );
            let mut builder = auto::Builder::new(TokioExecutor::new());
            builder
                .http2()
                .max_concurrent_streams(max_concurrent_streams);
            let connection = builder.serve_connection(TokioIo::new(tls), service);
            tokio::pin!(connection);
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(err) = result {
                        tracing::debug!(%remote, error = %err, "connection ended with an error");
                    }
                }
                _ = shutdown.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(Duration::from_secs(5), connection).await;
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens() {
        let mut headers = HeaderMap::new();
        assert_eq!(bearer_token(&headers), None);
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer abc"),
        );
        assert_eq!(bearer_token(&headers).as_deref(), Some("abc"));
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("bearer  xyz "),
        );
        assert_eq!(bearer_token(&headers).as_deref(), Some("xyz"));
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic abc"));
        assert_eq!(bearer_token(&headers), None);
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer "));
        assert_eq!(bearer_token(&headers), None);
    }

    #[test]
    fn status_bodies() {
        let body = status_body(403, "Forbidden", "no");
        assert_eq!(body["kind"], "Status");
        assert_eq!(body["code"], 403);
        assert_eq!(body["details"], serde_json::json!({}));
    }
}
