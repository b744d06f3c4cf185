//! The debugging handlers of upstream's endpoint: `/configz` (always), and with `--profiling`
//! `/debug/pprof/` (CPU and heap profiles, see [`super::profiles`]) and `/debug/flags/v` (the log
//! verbosity, changed with a `PUT` of a number), with upstream's status codes and messages.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{any, get};

use super::ServingState;
use super::profiles::{self, DEFAULT_CPU_SECONDS, PROFILES, ProfileError};

/// The routes of `/configz`, and with `profiling` those of `/debug/pprof` and `/debug/flags`.
pub fn routes(profiling: bool) -> Router<Arc<ServingState>> {
    let router = Router::new().route("/configz", any(configz));
    if !profiling {
        return router;
    }
    router
        .route(
            "/debug/pprof",
            get(|| async { Redirect::to("/debug/pprof/") }),
        )
        .route("/debug/pprof/", get(pprof_index))
        .route("/debug/pprof/profile", get(cpu_profile))
        .route("/debug/pprof/{name}", get(named_profile))
        .route("/debug/flags", get(flags_index))
        .route("/debug/flags/", get(flags_index))
        .route("/debug/flags/v", any(set_verbosity))
}

/// A plain-text answer, as upstream's debugging handlers write them.
fn plain(status: StatusCode, text: String) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, HeaderValue::from_static("text/plain")),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
        ],
        format!("{text}\n"),
    )
        .into_response()
}

async fn configz(State(state): State<Arc<ServingState>>) -> Response {
    match serde_json::to_string(&state.configz) {
        Ok(body) => (
            [
                (
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                ),
                (
                    header::X_CONTENT_TYPE_OPTIONS,
                    HeaderValue::from_static("nosniff"),
                ),
            ],
            body,
        )
            .into_response(),
        Err(err) => plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("error marshaling json: {err}"),
        ),
    }
}

async fn pprof_index() -> Response {
    let rows: String = PROFILES
        .iter()
        .map(|(name, what)| {
            format!("<tr><td><a href=\"{name}\">{name}</a></td><td>{what}</td></tr>\n")
        })
        .collect();
    let page = format!(
        "<html>\n<head><title>/debug/pprof/</title></head>\n<body>\n/debug/pprof/\n<br>\n\
         <p>Profiles of the cloud-controller-manager, in pprof's format (go tool pprof URL):</p>\n\
         <table>\n{rows}</table>\n</body>\n</html>\n"
    );
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        )],
        page,
    )
        .into_response()
}

/// A profile as an attachment, as Go's handlers send one.
fn attachment(name: &str, bytes: Vec<u8>) -> Response {
    let disposition = HeaderValue::from_str(&format!("attachment; filename=\"{name}\""))
        .unwrap_or_else(|_| HeaderValue::from_static("attachment"));
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            ),
            (header::CONTENT_DISPOSITION, disposition),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
        ],
        bytes,
    )
        .into_response()
}

fn profile_error(err: ProfileError) -> Response {
    let status = match err {
        ProfileError::HeapUnavailable(_) => StatusCode::NOT_FOUND,
        ProfileError::CpuBusy(_) | ProfileError::Write(_) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    plain(status, err.to_string())
}

async fn cpu_profile(Query(query): Query<Vec<(String, String)>>) -> Response {
    // Go takes a missing, malformed or non-positive value as the default.
    let seconds = query
        .iter()
        .find(|(key, _)| key == "seconds")
        .and_then(|(_, value)| value.parse::<u64>().ok())
        .filter(|s| *s > 0)
        .unwrap_or(DEFAULT_CPU_SECONDS);
    match profiles::cpu(seconds).await {
        Ok(bytes) => attachment("profile", bytes),
        Err(err) => profile_error(err),
    }
}

async fn named_profile(Path(name): Path<String>) -> Response {
    match name.as_str() {
        "heap" | "allocs" => match profiles::heap().await {
            Ok(bytes) => attachment(&name, bytes),
            Err(err) => profile_error(err),
        },
        _ => plain(StatusCode::NOT_FOUND, "Unknown profile".to_string()),
    }
}

async fn flags_index() -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        )],
        "<html>\n<head><title>/debug/flags/</title></head>\n<body>\n/debug/flags/<br>\n<br>\nflags:<br>\n\
         <table>\n<tr><td><a href=\"v\">v</a></td></tr>\n</table>\n</body>\n</html>\n",
    )
        .into_response()
}

async fn set_verbosity(method: Method, body: Bytes) -> Response {
    if method != Method::PUT {
        return plain(
            StatusCode::NOT_ACCEPTABLE,
            "unsupported http method".to_string(),
        );
    }
    let text = String::from_utf8_lossy(&body);
    let level = match text.parse::<u32>() {
        Ok(level) if level <= i32::MAX as u32 => level,
        Ok(_) => {
            return plain(
                StatusCode::BAD_REQUEST,
                format!("strconv.ParseUint: parsing {text:?}: value out of range"),
            );
        }
        Err(_) => {
            return plain(
                StatusCode::BAD_REQUEST,
                format!("strconv.ParseUint: parsing {text:?}: invalid syntax"),
            );
        }
    };
    match crate::logging::set_verbosity(level) {
        Ok(()) => {
            tracing::info!(
                verbosity = level,
                "log verbosity changed through /debug/flags/v"
            );
            plain(
                StatusCode::OK,
                format!("successfully set klog.logging.verbosity to {text}"),
            )
        }
        Err(err) => plain(
            StatusCode::BAD_REQUEST,
            format!("failed set klog.logging.verbosity {text}: {err}"),
        ),
    }
}
