//! How the daemon's clients reach the API server: one HTTP stack, and one connection pool shared by many
//! named clients.
//!
//! The stack ([`http_stack`]) is kube's, layer for layer: the cluster URL, the retries of 429, 503 and 504
//! that honour `Retry-After` (`default_retry`), the kubeconfig's credentials and extra headers, and the
//! connect, read and write timeouts, over one hyper client with the kubeconfig's TLS settings, speaking
//! HTTP/1.1 as kube's does; only the tracing span kube opens per request (at debug level) is left out.
//! Where kube's client hands every request to a buffer task before its stack, this stack is cloned
//! instead, so a named client ([`SharedConnections::client`]) reaches its connection with one task
//! hand-off fewer per request (test/bench/README.md has the figures, and those of HTTP/2, which gained the
//! daemon nothing and cost the API server more).
//!
//! A kubeconfig with a `proxy-url` is refused: the clients connect to the API server directly.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use cloud_controllers::identity;
use cloud_provider::DryRunLog;
use http::header::{HeaderValue, USER_AGENT};
use http::{Request, Response};
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::retry::RetryPolicy;
use kube::client::{Body, ConfigExt};
use tower::retry::RetryLayer;
use tower::util::BoxCloneService;
use tower::{BoxError, Layer, Service, ServiceBuilder};

use crate::client::{ClientError, RateLimitLayer, RateLimits, with_user_agent};
use crate::dry_run;

/// A response body of the stack (a dry run's come from another client).
pub type ResponseBody = UnsyncBoxBody<Bytes, BoxError>;
/// The HTTP stack every client sends through; clones share its connection pool.
pub type HttpStack = BoxCloneService<Request<Body>, Response<ResponseBody>, BoxError>;

/// The HTTP stack for `config` (see the module's documentation).
pub fn http_stack(config: &kube::Config) -> Result<HttpStack, ClientError> {
    if let Some(proxy) = &config.proxy_url {
        return Err(ClientError::Proxy(proxy.to_string()));
    }
    let https = config
        .rustls_https_connector_with_connector(plain_tcp())
        .map_err(ClientError::Build)?;
    let connector = with_timeouts(TimeoutConnector::new(https), config);
    let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .build::<_, Body>(connector);
    let retry = config
        .default_retry
        .then(|| RetryLayer::new(RetryPolicy::server_retry()));
    let stack = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(config.auth_layer().map_err(ClientError::Build)?)
        .layer(config.extra_headers_layer().map_err(ClientError::Build)?)
        .map_err(BoxError::from)
        .map_response(|response: Response<hyper::body::Incoming>| {
            response.map(|body| body.map_err(BoxError::from).boxed_unsync())
        })
        .service(client);
    Ok(BoxCloneService::new(stack))
}

/// A TCP connector that also dials `https` URLs (TLS is the next layer's).
fn plain_tcp() -> HttpConnector {
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp
}

/// `connector` with the kubeconfig's connect, read and write timeouts.
fn with_timeouts<C>(
    mut connector: TimeoutConnector<C>,
    config: &kube::Config,
) -> TimeoutConnector<C>
where
    C: Service<http::Uri> + Send + Clone + 'static,
{
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    connector
}

/// Builds a client named `client_name` from `config` whose requests pass through a token bucket of its own
/// with `limits`. Must be called inside a Tokio runtime (kube's client spawns its request buffer).
pub fn build_client(
    config: kube::Config,
    limits: RateLimits,
    client_name: &str,
) -> Result<kube::Client, ClientError> {
    let limiter = RateLimitLayer::new(limits).for_server(&config.cluster_url);
    let namespace = config.default_namespace.clone();
    let stack = http_stack(&with_user_agent(config, client_name))?;
    Ok(kube::Client::new(limiter.layer(stack), namespace))
}

/// One connection pool for many named clients: each client sends through the same HTTP stack (its TLS
/// configuration, credentials and connections) with its own `User-Agent` and the token bucket of the
/// [`RateLimitLayer`] it is given. Naming every controller's client like upstream's then costs no
/// connection of its own.
#[derive(Clone)]
pub struct SharedConnections {
    stack: HttpStack,
    namespace: String,
    dry_run: Option<DryRun>,
}

/// Where a dry run's writes go: a client over the shared stack (its writes read the object first), and
/// the log they are recorded in.
#[derive(Clone)]
struct DryRun {
    client: kube::Client,
    log: DryRunLog,
}

impl std::fmt::Debug for SharedConnections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedConnections")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl SharedConnections {
    /// The pool for `config` (its own `User-Agent` header, if any, is replaced per client).
    pub fn new(config: &kube::Config) -> Result<Self, ClientError> {
        Ok(SharedConnections {
            stack: http_stack(config)?,
            namespace: config.default_namespace.clone(),
            dry_run: None,
        })
    }

    /// From now on, the clients made send every write with `dryRun=All` and record it in `log`
    /// ([`crate::dry_run::api`]). Must be called inside a Tokio runtime.
    pub fn with_dry_run(mut self, log: DryRunLog) -> Self {
        let client = kube::Client::new(self.stack.clone(), self.namespace.clone());
        self.dry_run = Some(DryRun { client, log });
        self
    }

    /// A client named `client_name` whose requests pass through `limiter`. Must be called inside a Tokio
    /// runtime (kube's client spawns its request buffer).
    pub fn client(&self, limiter: &RateLimitLayer, client_name: &str) -> kube::Client {
        let named = SendThrough {
            stack: self.stack.clone(),
            user_agent: HeaderValue::from_str(&identity::user_agent(client_name)).ok(),
            dry_run: self.dry_run.clone(),
        };
        kube::Client::new(limiter.layer(named), self.namespace.clone())
    }
}

/// Sends a request through the shared stack with a `User-Agent` of its own.
#[derive(Clone)]
struct SendThrough {
    stack: HttpStack,
    user_agent: Option<HeaderValue>,
    dry_run: Option<DryRun>,
}

impl Service<Request<Body>> for SendThrough {
    type Response = Response<ResponseBody>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.stack.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<Body>) -> Self::Future {
        if let Some(agent) = &self.user_agent {
            request.headers_mut().insert(USER_AGENT, agent.clone());
        }
        match &self.dry_run {
            Some(dry) if dry_run::api::is_write(request.method()) => {
                let (client, log) = (dry.client.clone(), dry.log.clone());
                Box::pin(async move {
                    let response = dry_run::api::send_write(client, log, request).await?;
                    Ok(response.map(|body| body.map_err(BoxError::from).boxed_unsync()))
                })
            }
            _ => self.stack.call(request),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proxy_url_is_refused_with_the_reason() {
        let mut config = kube::Config::new("https://127.0.0.1:6443".parse().unwrap());
        config.proxy_url = Some("http://proxy.example:3128".parse().unwrap());
        let err = http_stack(&config).err().unwrap().to_string();
        assert!(
            err.contains("proxy-url http://proxy.example:3128/ is not supported"),
            "{err}"
        );
    }
}
