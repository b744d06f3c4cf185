//! Test controls: fault injection, latency, closing watches, compaction, request counters and the
//! request log, as a cloneable library handle ([`Controls`]) and as `/_test/...` admin endpoints. The
//! rules and counters themselves live in [`crate::controls_state`], inside the shared [`State`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use http::Method;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::auth::{AccessRule, UserInfo};
use crate::controls_state::{
    ControlsState, FaultId, FaultMode, FaultRule, LatencyRule, RequestKey, RequestRecord,
};
use crate::error::ApiError;
use crate::state::State;

/// A cloneable handle on the test controls of a running server.
#[derive(Clone)]
pub struct Controls {
    pub(crate) state: Arc<State>,
}

impl std::fmt::Debug for Controls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controls").finish_non_exhaustive()
    }
}

impl Controls {
    fn c(&self) -> &ControlsState {
        &self.state.controls
    }

    /// Ends every open watch stream (clients see the stream close and re-watch).
    pub fn close_watches(&self) {
        self.c().close_watches.send_modify(|g| *g += 1);
    }

    /// Installs a fault rule; the first matching rule that fires wins.
    pub fn fail(&self, rule: FaultRule) -> FaultId {
        self.c().add_fault(rule)
    }

    /// Removes one fault rule; false if it was not installed (or already spent).
    pub fn remove_fault(&self, id: FaultId) -> bool {
        self.c().remove_fault(id)
    }

    /// Removes every fault rule.
    pub fn clear_faults(&self) {
        self.c().clear_faults();
    }

    /// The installed fault rules (spent `Times` rules are removed automatically).
    pub fn faults(&self) -> Vec<(FaultId, FaultRule)> {
        self.c().faults()
    }

    /// Adds latency to matching requests.
    pub fn add_latency(&self, rule: LatencyRule) {
        self.c().add_latency(rule);
    }

    /// Removes every latency rule.
    pub fn clear_latency(&self) {
        self.c().clear_latency();
    }

    /// Compacts the history: watches and continue tokens from any earlier resourceVersion get 410.
    /// Returns the current resourceVersion.
    pub fn compact(&self) -> u64 {
        self.state.store.compact()
    }

    /// Changes how many changes the watch history keeps.
    pub fn set_history_window(&self, window: usize) {
        self.state.store.set_window(window);
    }

    /// The current resourceVersion of the server.
    pub fn resource_version(&self) -> u64 {
        self.state.store.current_rv()
    }

    /// How many requests were served, by (verb, resource, subresource).
    pub fn request_counts(&self) -> BTreeMap<RequestKey, u64> {
        self.c().request_counts()
    }

    /// How many `verb` requests on `resource` (without subresource) were served.
    pub fn request_count(&self, verb: &str, resource: &str) -> u64 {
        self.c().request_count(&RequestKey::new(verb, resource))
    }

    /// Resets the request counters.
    pub fn reset_counts(&self) {
        self.c().reset_counts();
    }

    /// The number of watch streams currently open.
    pub fn open_watches(&self) -> usize {
        self.c().open_watches.load(Ordering::SeqCst)
    }

    /// The request log, oldest first.
    pub fn request_log(&self) -> Vec<RequestRecord> {
        self.c().request_log()
    }

    /// Clears the request log.
    pub fn clear_request_log(&self) {
        self.c().clear_request_log();
    }

    /// Maps a bearer token to a user (for request authentication and TokenReview answers).
    pub fn set_token(&self, token: &str, user: UserInfo) {
        self.state.auth.set_identity(token, user);
    }

    /// How many tokens issued through `serviceaccounts/token` are within their lifetime.
    pub fn live_service_account_tokens(&self) -> usize {
        self.state.auth.live_issued_tokens()
    }

    /// Forgets a token; false if it was unknown.
    pub fn remove_token(&self, token: &str) -> bool {
        self.state.auth.remove_identity(token)
    }

    /// Adds a rule that makes SubjectAccessReviews answer `allowed: true`.
    pub fn allow(&self, rule: AccessRule) {
        self.state.auth.add_rule(rule);
    }

    /// Removes every SubjectAccessReview rule.
    pub fn clear_access_rules(&self) {
        self.state.auth.clear_rules();
    }
}

/// Body of `POST /_test/faults`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct FaultRequest {
    #[serde(default)]
    verb: Option<String>,
    #[serde(default)]
    resource: Option<String>,
    #[serde(default)]
    subresource: Option<String>,
    status: u16,
    #[serde(default)]
    times: Option<u64>,
    #[serde(default)]
    rate: Option<f64>,
    #[serde(default)]
    retry_after_seconds: Option<u32>,
    #[serde(default)]
    message: Option<String>,
}

impl FaultRequest {
    /// The rule asked for: a status between 100 and 599, and at most one of `times` and `rate` (a
    /// probability) to say how often it fires (always, without either).
    fn into_rule(self) -> Result<FaultRule, ApiError> {
        if !(100..=599).contains(&self.status) {
            return Err(ApiError::bad_request(format!(
                "invalid status {}",
                self.status
            )));
        }
        let mode = match (self.times, self.rate) {
            (Some(_), Some(_)) => {
                return Err(ApiError::bad_request("set at most one of times and rate"));
            }
            (Some(n), None) => FaultMode::Times(n),
            (None, Some(rate)) if (0.0..=1.0).contains(&rate) => FaultMode::Rate(rate),
            (None, Some(rate)) => {
                return Err(ApiError::bad_request(format!(
                    "rate {rate} is not between 0 and 1"
                )));
            }
            (None, None) => FaultMode::Always,
        };
        Ok(FaultRule {
            verb: self.verb,
            resource: self.resource,
            subresource: self.subresource,
            status: self.status,
            mode,
            retry_after_seconds: self.retry_after_seconds,
            message: self.message,
        })
    }
}

/// Body of `POST /_test/latency`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct LatencyRequest {
    #[serde(default)]
    verb: Option<String>,
    #[serde(default)]
    resource: Option<String>,
    #[serde(default)]
    subresource: Option<String>,
    millis: u64,
}

/// Body of `POST /_test/tokens`.
#[derive(Debug, Deserialize)]
struct TokenRequest {
    token: String,
    user: UserInfo,
}

fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("invalid admin request body: {e}")))
}

/// The answer of an admin endpoint: a status code and a JSON body.
type AdminReply = Result<(u16, Value), ApiError>;

fn ok(v: Value) -> AdminReply {
    Ok((200, v))
}

fn created(v: Value) -> AdminReply {
    Ok((201, v))
}

/// Serves `/_test/...`: each path is one family of controls, whose handler answers its methods (405
/// for the others). Returns (status code, JSON body).
pub(crate) fn admin(controls: &Controls, method: &Method, path: &str, body: &[u8]) -> AdminReply {
    match path {
        "/_test/watches/close" => admin_watches(controls, method),
        "/_test/faults" => admin_faults(controls, method, body),
        "/_test/latency" => admin_latency(controls, method, body),
        "/_test/compact" => admin_compact(controls, method),
        "/_test/counters" => admin_counters(controls, method),
        "/_test/requests" => admin_requests(controls, method),
        "/_test/tokens" => admin_tokens(controls, method, body),
        "/_test/access-rules" => admin_access_rules(controls, method, body),
        _ => Err(ApiError::unknown_resource()),
    }
}

/// `POST /_test/watches/close`: closes every open watch, answering how many there were.
fn admin_watches(controls: &Controls, method: &Method) -> AdminReply {
    match *method {
        Method::POST => {
            let open = controls.open_watches();
            controls.close_watches();
            ok(json!({"closed": open}))
        }
        _ => Err(ApiError::method_not_allowed()),
    }
}

/// `/_test/faults`: GET lists the fault rules, POST adds one ([`FaultRequest`]), DELETE removes them all.
fn admin_faults(controls: &Controls, method: &Method, body: &[u8]) -> AdminReply {
    match *method {
        Method::GET => ok(json!({"faults": controls
            .faults()
            .into_iter()
            .map(|(id, r)| json!({"id": id.0, "rule": r}))
            .collect::<Vec<_>>()})),
        Method::POST => {
            let rule = parse::<FaultRequest>(body)?.into_rule()?;
            let id = controls.fail(rule);
            created(json!({"id": id.0}))
        }
        Method::DELETE => {
            controls.clear_faults();
            ok(json!({}))
        }
        _ => Err(ApiError::method_not_allowed()),
    }
}

/// `/_test/latency`: POST adds a latency rule ([`LatencyRequest`]), DELETE removes them all.
fn admin_latency(controls: &Controls, method: &Method, body: &[u8]) -> AdminReply {
    match *method {
        Method::POST => {
            let r: LatencyRequest = parse(body)?;
            controls.add_latency(LatencyRule {
                verb: r.verb,
                resource: r.resource,
                subresource: r.subresource,
                delay: Duration::from_millis(r.millis),
            });
            created(json!({}))
        }
        Method::DELETE => {
            controls.clear_latency();
            ok(json!({}))
        }
        _ => Err(ApiError::method_not_allowed()),
    }
}

/// `POST /_test/compact`: compacts the history, answering the current resourceVersion.
fn admin_compact(controls: &Controls, method: &Method) -> AdminReply {
    match *method {
        Method::POST => ok(json!({"resourceVersion": controls.compact().to_string()})),
        _ => Err(ApiError::method_not_allowed()),
    }
}

/// `/_test/counters`: GET answers the request counts and open watches, DELETE resets the counts.
fn admin_counters(controls: &Controls, method: &Method) -> AdminReply {
    match *method {
        Method::GET => {
            let requests: Vec<Value> = controls
                .request_counts()
                .into_iter()
                .map(|(k, n)| json!({"verb": k.verb, "resource": k.resource, "subresource": k.subresource, "count": n}))
                .collect();
            ok(json!({"requests": requests, "openWatches": controls.open_watches()}))
        }
        Method::DELETE => {
            controls.reset_counts();
            ok(json!({}))
        }
        _ => Err(ApiError::method_not_allowed()),
    }
}

/// `/_test/requests`: GET answers the request log, DELETE clears it.
fn admin_requests(controls: &Controls, method: &Method) -> AdminReply {
    match *method {
        Method::GET => ok(json!({"requests": controls.request_log()})),
        Method::DELETE => {
            controls.clear_request_log();
            ok(json!({}))
        }
        _ => Err(ApiError::method_not_allowed()),
    }
}

/// `POST /_test/tokens`: maps a bearer token to a user ([`TokenRequest`]).
fn admin_tokens(controls: &Controls, method: &Method, body: &[u8]) -> AdminReply {
    match *method {
        Method::POST => {
            let r: TokenRequest = parse(body)?;
            controls.set_token(&r.token, r.user);
            created(json!({}))
        }
        _ => Err(ApiError::method_not_allowed()),
    }
}

/// `/_test/access-rules`: POST adds a SubjectAccessReview rule, DELETE removes them all.
fn admin_access_rules(controls: &Controls, method: &Method, body: &[u8]) -> AdminReply {
    match *method {
        Method::POST => {
            let r: AccessRule = parse(body)?;
            controls.allow(r);
            created(json!({}))
        }
        Method::DELETE => {
            controls.clear_access_rules();
            ok(json!({}))
        }
        _ => Err(ApiError::method_not_allowed()),
    }
}
