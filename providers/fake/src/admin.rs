//! The admin HTTP API (JSON over HTTP/1.1 on a loopback address; `GET /config` answers YAML). See the crate
//! README for the routes.
//!
//! Errors are JSON objects `{"error": "<reason>"}`: 400 for malformed requests (bad JSON, unknown
//! fields, unknown operation or action, invalid values), 404 for unknown instances or paths, 409 when an
//! instance already exists.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::config::InstanceConfig;
use crate::control::FakeControl;
use crate::faults::{FaultKind, FaultSpec};
use crate::shared::Shared;
use crate::state::ControlError;

/// Why the admin API could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AdminError {
    /// The address is not a loopback address.
    #[error("admin address {0} is not a loopback address")]
    NotLoopback(SocketAddr),
    /// This cloud already serves its admin API.
    #[error("the admin API is already listening on {0}")]
    AlreadyServing(SocketAddr),
    /// Binding the listener failed.
    #[error("could not listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The body of `POST /faults`: an operation name plus the fields of a [`FaultSpec`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FaultRequest {
    /// The operation name, or `*`.
    pub operation: String,
    /// Share of calls that fail, 0.0 to 1.0.
    #[serde(default)]
    pub error_rate: f64,
    /// The error returned by failing calls.
    #[serde(default)]
    pub kind: FaultKind,
    /// The delay `retry` errors ask for, in milliseconds.
    #[serde(default = "default_retry_after_ms")]
    pub retry_after_ms: u64,
    /// Added to every call, in milliseconds.
    #[serde(default)]
    pub latency_ms: u64,
    /// The fault is lifted after this many calls (none: it stays).
    #[serde(default)]
    pub calls: Option<u64>,
}

fn default_retry_after_ms() -> u64 {
    FaultSpec::default().retry_after_ms
}

impl FaultRequest {
    fn spec(&self) -> FaultSpec {
        FaultSpec {
            error_rate: self.error_rate,
            kind: self.kind,
            retry_after_ms: self.retry_after_ms,
            latency_ms: self.latency_ms,
            calls: self.calls,
        }
    }
}

pub(crate) async fn serve(shared: Arc<Shared>, addr: SocketAddr) -> Result<SocketAddr, AdminError> {
    if !addr.ip().is_loopback() {
        return Err(AdminError::NotLoopback(addr));
    }
    if let Some(bound) = *shared.admin.lock() {
        return Err(AdminError::AlreadyServing(bound));
    }
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| AdminError::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| AdminError::Bind { addr, source })?;
    {
        let mut slot = shared.admin.lock();
        if let Some(existing) = *slot {
            return Err(AdminError::AlreadyServing(existing));
        }
        *slot = Some(bound);
    }
    let app = router(FakeControl::new(shared));
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(address = %bound, error = %e, "fake cloud admin API stopped");
        }
    });
    Ok(bound)
}

/// The admin API's routes over a control handle.
pub fn router(control: FakeControl) -> Router {
    Router::new()
        .route("/state", get(get_state))
        .route("/config", get(get_config))
        .route("/instances", get(get_instances).post(post_instance))
        .route("/instances/{name}", get(get_instance))
        .route("/instances/{name}/{action}", post(post_instance_action))
        .route("/loadbalancers", get(get_load_balancers))
        .route("/loadbalancers/traffic", get(get_load_balancer_traffic))
        .route("/routes", get(get_routes))
        .route("/calls", get(get_calls).delete(delete_calls))
        .route(
            "/faults",
            get(get_faults).post(post_fault).delete(delete_faults),
        )
        .route("/faults/{operation}", delete(delete_fault))
        .fallback(not_found)
        .with_state(control)
}

type Ctl = State<FakeControl>;

fn error(status: StatusCode, reason: impl Into<String>) -> Response {
    (status, axum::Json(json!({ "error": reason.into() }))).into_response()
}

fn control_error(e: ControlError) -> Response {
    let status = match e {
        ControlError::NotFound(_) => StatusCode::NOT_FOUND,
        ControlError::AlreadyExists(_) => StatusCode::CONFLICT,
        ControlError::Invalid(_) => StatusCode::BAD_REQUEST,
    };
    error(status, e.to_string())
}

fn parse_body<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, Box<Response>> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(Box::new(error(
            StatusCode::BAD_REQUEST,
            "request body is empty; a JSON object is required",
        )));
    }
    serde_json::from_slice(body).map_err(|e| {
        Box::new(error(
            StatusCode::BAD_REQUEST,
            format!("invalid JSON body: {e}"),
        ))
    })
}

fn ok<T: Serialize>(value: T) -> Response {
    axum::Json(value).into_response()
}

async fn get_state(State(c): Ctl) -> Response {
    ok(c.state())
}

async fn get_config(State(c): Ctl) -> Response {
    match serde_saphyr::to_string(&c.cloud_config()) {
        Ok(yaml) => ([(CONTENT_TYPE, "application/yaml")], yaml).into_response(),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("rendering the cloud-config: {e}"),
        ),
    }
}

async fn get_load_balancer_traffic(State(c): Ctl) -> Response {
    ok(c.load_balancer_traffic())
}

async fn get_instances(State(c): Ctl) -> Response {
    ok(c.instances())
}

async fn get_instance(State(c): Ctl, Path(name): Path<String>) -> Response {
    match c.instance(&name) {
        Some(i) => ok(i),
        None => error(
            StatusCode::NOT_FOUND,
            format!("no live instance named {name:?}"),
        ),
    }
}

async fn post_instance(State(c): Ctl, body: Bytes) -> Response {
    let inst: InstanceConfig = match parse_body(&body) {
        Ok(i) => i,
        Err(r) => return *r,
    };
    match c.add_instance(inst) {
        Ok(rec) => (StatusCode::CREATED, axum::Json(rec)).into_response(),
        Err(e) => control_error(e),
    }
}

async fn post_instance_action(
    State(c): Ctl,
    Path((name, action)): Path<(String, String)>,
) -> Response {
    let result = match action.as_str() {
        "stop" => c.stop_instance(&name),
        "start" => c.start_instance(&name),
        "terminate" => c.terminate_instance(&name),
        other => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("unknown instance action {other:?} (use stop, start or terminate)"),
            );
        }
    };
    match result {
        Ok(rec) => ok(rec),
        Err(e) => control_error(e),
    }
}

async fn get_load_balancers(State(c): Ctl) -> Response {
    ok(c.load_balancers())
}

async fn get_routes(State(c): Ctl) -> Response {
    ok(c.routes())
}

async fn get_calls(State(c): Ctl) -> Response {
    ok(c.calls())
}

async fn delete_calls(State(c): Ctl) -> Response {
    c.reset_calls();
    StatusCode::NO_CONTENT.into_response()
}

async fn get_faults(State(c): Ctl) -> Response {
    ok(c.faults())
}

async fn post_fault(State(c): Ctl, body: Bytes) -> Response {
    let req: FaultRequest = match parse_body(&body) {
        Ok(r) => r,
        Err(r) => return *r,
    };
    match c.set_fault(&req.operation, req.spec()) {
        Ok(()) => ok(c.faults()),
        Err(e) => control_error(e),
    }
}

async fn delete_faults(State(c): Ctl) -> Response {
    c.clear_faults();
    StatusCode::NO_CONTENT.into_response()
}

async fn delete_fault(State(c): Ctl, Path(operation): Path<String>) -> Response {
    if c.clear_fault(&operation) {
        StatusCode::NO_CONTENT.into_response()
    } else {
        error(
            StatusCode::NOT_FOUND,
            format!("no fault set for {operation:?}"),
        )
    }
}

async fn not_found() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "no such admin API route (see GET /state, /config, /instances, /loadbalancers, /routes, /calls, /faults)",
    )
}
