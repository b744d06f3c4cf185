//! HTTP handling: authentication, routing of paths to discovery, admin and resource handlers,
//! request counting, fault injection, latency, the request log, and JSON or streaming answers.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited, StreamBody};
use hyper::body::{Frame, Incoming};

use crate::api::{self, ApiRequest, Query, Reply};
use crate::auth::Authn;
use crate::controls::{self, Controls};
use crate::controls_state::{RequestKey, RequestRecord};
use crate::discovery;
use crate::error::ApiError;
use crate::openapi;
use crate::resources::{self, ResourceDef, SubresourceDef};
use crate::state::State;
use crate::table::{self, IncludeObject, Representation};
use crate::watch;

/// The response body type: full JSON bodies and streamed watch events.
pub(crate) type Body = http_body_util::combinators::UnsyncBoxBody<Bytes, Infallible>;

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed_unsync()
}

fn response(code: u16, content_type: &str, body: Body) -> Response<Body> {
    let mut r = Response::new(body);
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(v) = http::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(CONTENT_TYPE, v);
    }
    r
}

fn json_response(code: u16, body: Vec<u8>) -> Response<Body> {
    response(code, "application/json", full(body))
}

fn error_response(e: &ApiError) -> Response<Body> {
    let mut r = json_response(
        e.code,
        serde_json::to_vec(&e.status_body()).unwrap_or_default(),
    );
    if let Some(s) = e.retry_after
        && let Ok(v) = http::HeaderValue::from_str(&s.to_string())
    {
        r.headers_mut().insert(RETRY_AFTER, v);
    }
    r
}

/// Whether plain JSON is acceptable (what discovery and OpenAPI documents are served as).
fn acceptable(accept: Option<&str>) -> bool {
    let Some(accept) = accept else { return true };
    accept.trim().is_empty()
        || accept.split(',').any(|range| {
            table::negotiate(Some(range), IncludeObject::Metadata) == Some(Representation::Object)
        })
}

/// Answers `GET /openapi/...` (`segments` after `openapi`).
fn openapi_response(method: &Method, segments: &[&str], query: &Query) -> Response<Body> {
    if *method != Method::GET {
        return error_response(&ApiError::method_not_allowed());
    }
    match openapi::serve(segments, query.get("hash")) {
        None => error_response(&ApiError::unknown_resource()),
        Some(openapi::Answer::Redirect(location)) => {
            let mut r = response(301, "text/plain; charset=utf-8", full(""));
            if let Ok(v) = http::HeaderValue::from_str(&location) {
                r.headers_mut().insert(http::header::LOCATION, v);
            }
            r
        }
        Some(openapi::Answer::Json {
            body,
            etag,
            immutable,
        }) => {
            let mut r = response(200, "application/json", full(body));
            let cache = if immutable {
                "public, immutable"
            } else {
                "no-cache, private"
            };
            let headers = r.headers_mut();
            headers.insert(
                http::header::CACHE_CONTROL,
                http::HeaderValue::from_static(cache),
            );
            if let Ok(v) = http::HeaderValue::from_str(&etag) {
                headers.insert(http::header::ETAG, v);
            }
            r
        }
    }
}

/// Renders a GET or LIST answer as the client asked (a Table, partial metadata); other answers and
/// plain JSON pass through.
fn render(verb: &str, def: &ResourceDef, repr: &Representation, reply: Reply) -> Reply {
    let Reply::Json(200, body) = reply else {
        return reply;
    };
    if *repr == Representation::Object || !matches!(verb, "get" | "list") {
        return Reply::Json(200, body);
    }
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(&body) else {
        return Reply::Json(200, body);
    };
    let rendered = if verb == "list" {
        table::render_list(def, &value, repr)
    } else {
        table::render_object(def, &value, repr)
    };
    match rendered.and_then(|v| serde_json::to_vec(&v).ok()) {
        Some(out) => Reply::Json(200, out),
        None => Reply::Json(200, body),
    }
}

/// A request on a resource, as routed.
struct Route {
    verb: &'static str,
    def: &'static ResourceDef,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
    /// The subresource's definition when it is not `status` (e.g. `serviceaccounts/token`).
    extra: Option<&'static SubresourceDef>,
}

/// The Kubernetes verb of a request from its method and shape (also for requests that cannot be
/// routed, so that the request log names them).
fn verb_of(method: &Method, named: bool, watch: bool) -> Option<&'static str> {
    Some(match (method, named) {
        (&Method::GET, _) if watch => "watch",
        (&Method::GET, true) => "get",
        (&Method::GET, false) => "list",
        (&Method::POST, _) => "create",
        (&Method::PUT, _) => "update",
        (&Method::PATCH, _) => "patch",
        (&Method::DELETE, true) => "delete",
        (&Method::DELETE, false) => "deletecollection",
        _ => return None,
    })
}

/// The request-log entry of an `/api` or `/apis` request that could not be routed (an unknown
/// resource or subresource, or a verb the resource does not serve), read from its path as far as it
/// goes. `None` for other paths.
fn unrouted_record(
    method: &Method,
    segs: &[&str],
    q: &Query,
    (user, user_agent): (String, String),
    code: u16,
) -> Option<RequestRecord> {
    let (group, version, rest) = match segs {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return None,
    };
    let (watch_path, rest) = match rest {
        ["watch", tail @ ..] => (true, tail),
        _ => (false, rest),
    };
    let (namespace, plural, after) = match rest {
        ["namespaces", ns, plural, after @ ..] => (*ns, *plural, after),
        [plural, after @ ..] => ("", *plural, after),
        [] => ("", "", rest),
    };
    let name = after.first().copied().unwrap_or("");
    let verb = verb_of(method, !name.is_empty(), watch_path || q.flag("watch"))
        .map_or_else(|| method.as_str().to_ascii_lowercase(), str::to_string);
    Some(RequestRecord {
        verb,
        group: group.to_string(),
        version: version.to_string(),
        resource: plural.to_string(),
        subresource: after.get(1..).map(|s| s.join("/")).unwrap_or_default(),
        namespace: namespace.to_string(),
        name: name.to_string(),
        user,
        user_agent,
        code,
        dry_run: q.get("dryRun") == Some("All"),
    })
}

/// Routes `/api/v1/...` and `/apis/{group}/{version}/...` below the discovery documents.
fn route(method: &Method, segs: &[&str], q: &Query) -> Result<Route, ApiError> {
    let (group, version, rest) = match segs {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Err(ApiError::unknown_resource()),
    };
    let (watch_path, rest) = match rest {
        ["watch", tail @ ..] => (true, tail),
        _ => (false, rest),
    };
    let namespaced_path = rest.len() >= 3
        && rest[0] == "namespaces"
        && resources::find(group, version, rest[2]).is_some_and(|d| d.namespaced);
    let (namespace, plural, after) = if namespaced_path {
        (Some(rest[1].to_string()), rest[2], &rest[3..])
    } else {
        match rest {
            [plural, after @ ..] => (None, *plural, after),
            [] => return Err(ApiError::unknown_resource()),
        }
    };
    let def = resources::find(group, version, plural).ok_or_else(ApiError::unknown_resource)?;
    if after.len() > 2 {
        return Err(ApiError::unknown_resource());
    }
    let name = after.first().map(|s| (*s).to_string());
    let subresource = after.get(1).map(|s| (*s).to_string());
    let extra = match subresource.as_deref() {
        None => None,
        Some("status") if def.status_subresource => None,
        Some(sub) => Some(
            def.subresource(sub)
                .ok_or_else(ApiError::unknown_resource)?,
        ),
    };
    if def.namespaced && namespace.is_none() && name.is_some() {
        return Err(ApiError::unknown_resource());
    }
    if let Some(sub) = extra {
        let verb = verb_of(method, true, false)
            .filter(|v| !watch_path && sub.verbs.contains(v))
            .ok_or_else(ApiError::method_not_allowed)?;
        return Ok(Route {
            verb,
            def,
            namespace,
            name,
            subresource,
            extra,
        });
    }
    let verb = if watch_path {
        if *method != Method::GET {
            return Err(ApiError::method_not_allowed());
        }
        "watch"
    } else {
        match (method, name.is_some()) {
            (&Method::GET, true) if q.flag("watch") => "watch",
            (&Method::GET, true) => "get",
            (&Method::GET, false) if q.flag("watch") => "watch",
            (&Method::GET, false) => "list",
            (&Method::POST, false) => "create",
            (&Method::PUT, true) => "update",
            (&Method::PATCH, true) => "patch",
            (&Method::DELETE, true) => "delete",
            (&Method::DELETE, false) => "deletecollection",
            _ => return Err(ApiError::method_not_allowed()),
        }
    };
    if subresource.is_some() {
        if !resources::subresource_verbs().contains(&verb) {
            return Err(ApiError::method_not_allowed());
        }
    } else if !def.allows(verb) {
        return Err(ApiError::method_not_allowed());
    }
    if def.namespaced && namespace.is_none() && !matches!(verb, "list" | "watch") {
        return Err(ApiError::method_not_allowed());
    }
    Ok(Route {
        verb,
        def,
        namespace,
        name,
        subresource,
        extra: None,
    })
}

async fn read_body(state: &State, body: Incoming) -> Result<Bytes, ApiError> {
    match Limited::new(body, state.cfg.max_body).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            Err(ApiError::too_large_body())
        }
        Err(e) => Err(ApiError::bad_request(format!(
            "failed to read the request body: {e}"
        ))),
    }
}

fn watch_response(state: Arc<State>, plan: api::WatchPlan) -> Response<Body> {
    let rx = watch::start(state, plan);
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|line| (Ok::<_, Infallible>(Frame::data(line)), rx))
    });
    response(
        200,
        "application/json",
        StreamBody::new(stream).boxed_unsync(),
    )
}

/// Serves one request; never fails (errors become `Status` responses).
pub(crate) async fn handle(
    state: Arc<State>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    Ok(serve(state, req).await)
}

/// The head of a request: what every handler reads besides the body.
struct RequestHead {
    method: Method,
    path: String,
    query: Query,
    headers: http::HeaderMap,
}

impl RequestHead {
    fn new(parts: http::request::Parts) -> Self {
        RequestHead {
            query: Query::parse(parts.uri.query()),
            path: parts.uri.path().to_string(),
            method: parts.method,
            headers: parts.headers,
        }
    }

    /// A header's value, when it is present and visible ASCII.
    fn header(&self, name: http::header::HeaderName) -> Option<String> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    }

    /// The `User-Agent` header, empty when absent.
    fn user_agent(&self) -> String {
        self.header(http::header::USER_AGENT).unwrap_or_default()
    }

    /// The path's non-empty segments.
    fn segments(&self) -> Vec<&str> {
        self.path
            .trim_matches('/')
            .split('/')
            .filter(|s| !s.is_empty())
            .collect()
    }

    /// Whether the path is served to anyone, even with authentication required or a bad token.
    fn is_public(&self) -> bool {
        matches!(
            self.path.as_str(),
            "/healthz" | "/livez" | "/readyz" | "/version" | "/version/"
        )
    }

    /// Whether the request is for the test controls (`/_test/...`).
    fn is_controls(&self) -> bool {
        self.path == "/_test" || self.path.starts_with("/_test/")
    }

    /// Whether the request is `dryRun=All`.
    fn dry_run(&self) -> bool {
        self.query.get("dryRun") == Some("All")
    }
}

/// Serves one request: authentication, then the health checks, the test controls, OpenAPI, discovery
/// and finally the resources, each on its own path family.
async fn serve(state: Arc<State>, req: Request<Incoming>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let head = RequestHead::new(parts);
    let authn = match authenticate(&state, &head) {
        Ok(authn) => authn,
        Err(e) => return error_response(&e),
    };
    if matches!(head.path.as_str(), "/healthz" | "/livez" | "/readyz") {
        return response(200, "text/plain; charset=utf-8", full("ok"));
    }
    if head.is_controls() {
        return serve_controls(&state, &head, body).await;
    }
    let segs = head.segments();
    let representation = match negotiate(&head, &segs) {
        Ok(r) => r,
        Err(e) => return error_response(&e),
    };
    if let Some(("openapi", rest)) = segs.split_first().map(|(a, b)| (*a, b)) {
        return openapi_response(&head.method, rest, &head.query);
    }
    if let Some(doc) = discovery_document(&state, &segs) {
        return discovery_response(&head.method, &doc);
    }
    serve_resource(state, &head, body, &segs, &authn, representation).await
}

/// Authenticates the bearer token. A rejected token, or any caller but a known one when authentication
/// is required, is refused with 401, except on the public paths.
fn authenticate(state: &State, head: &RequestHead) -> Result<Authn, ApiError> {
    let lookup = |ns: &str, name: &str| state.service_account_uid(ns, name);
    let authn = state
        .auth
        .authenticate(head.header(AUTHORIZATION).as_deref(), &lookup);
    let rejected = matches!(authn, Authn::Rejected(_))
        || (state.cfg.require_auth && !matches!(authn, Authn::Known(_)));
    if rejected && !head.is_public() {
        return Err(ApiError::unauthorized());
    }
    Ok(authn)
}

/// Serves `/_test/...`, the test controls (faults, latency, request counts and log, ...).
async fn serve_controls(state: &Arc<State>, head: &RequestHead, body: Incoming) -> Response<Body> {
    let bytes = match read_body(state, body).await {
        Ok(b) => b,
        Err(e) => return error_response(&e),
    };
    let controls = Controls {
        state: state.clone(),
    };
    match controls::admin(
        &controls,
        &head.method,
        head.path.trim_end_matches('/'),
        &bytes,
    ) {
        Ok((code, v)) => json_response(code, serde_json::to_vec(&v).unwrap_or_default()),
        Err(e) => error_response(&e),
    }
}

/// The representation the client accepts: for resource paths as negotiated from `Accept` and
/// `includeObject` (a Table, partial metadata or the object), elsewhere plain JSON or nothing.
fn negotiate(head: &RequestHead, segs: &[&str]) -> Result<Representation, ApiError> {
    let accept = head.header(ACCEPT);
    let is_api = matches!(segs.first(), Some(&"api" | &"apis")) && segs.len() > 2;
    if is_api {
        let include = IncludeObject::parse(head.query.get("includeObject"))?;
        table::negotiate(accept.as_deref(), include).ok_or_else(ApiError::not_acceptable)
    } else if acceptable(accept.as_deref()) {
        Ok(Representation::Object)
    } else {
        Err(ApiError::not_acceptable())
    }
}

/// The discovery document of a path (the root path list, `/version`, `/api`, `/apis` and the groups and
/// versions below them); `Null` for an unknown group or version, `None` for paths that are not discovery.
fn discovery_document(state: &State, segs: &[&str]) -> Option<serde_json::Value> {
    match segs {
        [] => Some(
            serde_json::json!({"paths": ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/openapi/v2", "/openapi/v3", "/readyz", "/version"]}),
        ),
        ["version"] => Some(discovery::version()),
        ["api"] => Some(discovery::core_versions(&state.server_address())),
        ["api", "v1"] => Some(discovery::core_resources()),
        ["apis"] => Some(discovery::groups()),
        ["apis", g] => Some(discovery::group(g).unwrap_or(serde_json::Value::Null)),
        ["apis", g, v] => Some(discovery::group_resources(g, v).unwrap_or(serde_json::Value::Null)),
        _ => None,
    }
}

/// Answers a discovery path: GET only, 404 for an unknown group or version.
fn discovery_response(method: &Method, doc: &serde_json::Value) -> Response<Body> {
    if *method != Method::GET {
        return error_response(&ApiError::method_not_allowed());
    }
    if doc.is_null() {
        return error_response(&ApiError::unknown_resource());
    }
    json_response(200, serde_json::to_vec(doc).unwrap_or_default())
}

impl Route {
    /// The key the request counters, faults and latencies of the test controls use.
    fn key(&self) -> RequestKey {
        RequestKey {
            verb: self.verb.to_string(),
            resource: self.def.plural.to_string(),
            subresource: self.subresource.clone().unwrap_or_default(),
        }
    }

    /// The request-log entry of this request, answered with `code`.
    fn record(&self, head: &RequestHead, authn: &Authn, code: u16) -> RequestRecord {
        RequestRecord {
            verb: self.verb.to_string(),
            group: self.def.group.to_string(),
            version: self.def.version.to_string(),
            resource: self.def.plural.to_string(),
            subresource: self.subresource.clone().unwrap_or_default(),
            namespace: self.namespace.clone().unwrap_or_default(),
            name: self.name.clone().unwrap_or_default(),
            user: authn.username(),
            user_agent: head.user_agent(),
            code,
            dry_run: head.dry_run(),
        }
    }
}

/// Serves a request on a resource: routes it, counts it, applies the injected fault and latency, runs
/// the verb, and logs the request with its answer's code.
async fn serve_resource(
    state: Arc<State>,
    head: &RequestHead,
    body: Incoming,
    segs: &[&str],
    authn: &Authn,
    representation: Representation,
) -> Response<Body> {
    let route = match route(&head.method, segs, &head.query) {
        Ok(r) => r,
        Err(e) => {
            let who = (authn.username(), head.user_agent());
            if let Some(record) = unrouted_record(&head.method, segs, &head.query, who, e.code) {
                state.controls.record(record);
            }
            return error_response(&e);
        }
    };
    let key = route.key();
    state.controls.count(&key);
    if let Some(e) = state.controls.fault_for(&key) {
        state.controls.record(route.record(head, authn, e.code));
        return error_response(&e);
    }
    let delay = state.controls.latency_for(&key);
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let bytes = match read_body(&state, body).await {
        Ok(b) => b,
        Err(e) => {
            state.controls.record(route.record(head, authn, e.code));
            return error_response(&e);
        }
    };
    let api_req = ApiRequest {
        def: route.def,
        namespace: route.namespace.clone(),
        name: route.name.clone(),
        subresource: route.subresource.clone(),
        query: &head.query,
        content_type: head.header(CONTENT_TYPE),
        body: bytes,
        warnings: parking_lot::Mutex::new(Vec::new()),
    };
    let result = run_verb(&state, &route, &api_req)
        .await
        .map(|reply| render(route.verb, route.def, &representation, reply));
    let resp = reply_response(&state, result, representation, &api_req.warnings.lock());
    state
        .controls
        .record(route.record(head, authn, resp.status().as_u16()));
    resp
}

/// Runs the verb of a routed request on its resource (or the `token` subresource's `create`).
async fn run_verb(
    state: &State,
    route: &Route,
    api_req: &ApiRequest<'_>,
) -> Result<Reply, ApiError> {
    match (route.verb, route.extra) {
        ("create", Some(sub)) if sub.name == "token" => api::create_token(state, api_req, sub),
        (_, Some(_)) => Err(ApiError::method_not_allowed()),
        ("get", None) => api::get(state, api_req),
        ("list", None) => api::list(state, api_req).await,
        ("watch", None) => api::watch(state, api_req),
        ("create", None) => api::create(state, api_req),
        ("update", None) => api::update(state, api_req),
        ("patch", None) => api::patch(state, api_req),
        ("delete", None) => api::delete(state, api_req),
        ("deletecollection", None) => api::delete_collection(state, api_req),
        _ => Err(ApiError::method_not_allowed()),
    }
}

/// The response of a verb's outcome: JSON with the request's warnings as `Warning` headers, a watch
/// stream in the negotiated representation, or a `Status` error.
fn reply_response(
    state: &Arc<State>,
    result: Result<Reply, ApiError>,
    representation: Representation,
    warnings: &[String],
) -> Response<Body> {
    match result {
        Ok(Reply::Json(code, body)) => {
            let mut r = json_response(code, body);
            for warning in warnings {
                if let Ok(v) =
                    http::HeaderValue::from_str(&format!("299 - {}", crate::error::quote(warning)))
                {
                    r.headers_mut().append(http::header::WARNING, v);
                }
            }
            r
        }
        Ok(Reply::Watch(mut plan)) => {
            plan.representation = representation;
            watch_response(state.clone(), plan)
        }
        Err(e) => error_response(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(method: Method, path: &str, query: &str) -> Result<Route, ApiError> {
        let segs: Vec<&str> = path
            .trim_matches('/')
            .split('/')
            .filter(|s| !s.is_empty())
            .collect();
        route(&method, &segs, &Query::parse(Some(query)))
    }

    #[test]
    fn routing() {
        let x = r(Method::GET, "/api/v1/nodes", "").unwrap();
        assert_eq!((x.verb, x.def.plural), ("list", "nodes"));
        let x = r(Method::GET, "/api/v1/nodes", "watch=true").unwrap();
        assert_eq!(x.verb, "watch");
        let x = r(Method::PATCH, "/api/v1/nodes/a/status", "").unwrap();
        assert_eq!(
            (x.verb, x.subresource.as_deref()),
            ("patch", Some("status"))
        );
        let x = r(Method::GET, "/api/v1/namespaces/default/services/s", "").unwrap();
        assert_eq!(
            (x.verb, x.namespace.as_deref(), x.name.as_deref()),
            ("get", Some("default"), Some("s"))
        );
        let x = r(Method::GET, "/api/v1/namespaces/default", "").unwrap();
        assert_eq!(
            (x.def.plural, x.name.as_deref()),
            ("namespaces", Some("default"))
        );
        let x = r(Method::PUT, "/api/v1/namespaces/kube-system/status", "").unwrap();
        assert_eq!(
            (x.def.plural, x.verb, x.subresource.as_deref()),
            ("namespaces", "update", Some("status"))
        );
        let x = r(
            Method::POST,
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases",
            "",
        )
        .unwrap();
        assert_eq!((x.verb, x.def.plural), ("create", "leases"));
        let x = r(Method::GET, "/api/v1/watch/namespaces/default/events", "").unwrap();
        assert_eq!(x.verb, "watch");
        let x = r(
            Method::POST,
            "/api/v1/namespaces/kube-system/serviceaccounts/sa/token",
            "",
        )
        .unwrap();
        assert_eq!(
            (x.verb, x.subresource.as_deref(), x.extra.map(|e| e.kind)),
            ("create", Some("token"), Some("TokenRequest"))
        );
        assert_eq!(
            r(
                Method::GET,
                "/api/v1/namespaces/kube-system/serviceaccounts/sa/token",
                ""
            )
            .err()
            .unwrap()
            .code,
            405
        );
        assert_eq!(
            r(
                Method::POST,
                "/api/v1/namespaces/default/services/s/token",
                ""
            )
            .err()
            .unwrap()
            .code,
            404
        );
        let x = r(
            Method::GET,
            "/api/v1/namespaces/kube-system/configmaps/c",
            "",
        )
        .unwrap();
        assert_eq!((x.verb, x.def.kind), ("get", "ConfigMap"));
        let x = r(
            Method::GET,
            "/api/v1/pods",
            "fieldSelector=spec.nodeName%3Da",
        )
        .unwrap();
        assert_eq!((x.verb, x.def.plural, x.namespace), ("list", "pods", None));
        assert_eq!(
            r(Method::GET, "/api/v1/deployments", "")
                .err()
                .unwrap()
                .code,
            404
        );
        assert_eq!(
            r(Method::GET, "/api/v1/nodes/a/proxy", "")
                .err()
                .unwrap()
                .code,
            404
        );
        assert_eq!(r(Method::PUT, "/api/v1/nodes", "").err().unwrap().code, 405);
        assert_eq!(
            r(Method::DELETE, "/api/v1/nodes/a/status", "")
                .err()
                .unwrap()
                .code,
            405
        );
        assert_eq!(
            r(
                Method::GET,
                "/apis/authentication.k8s.io/v1/tokenreviews",
                ""
            )
            .err()
            .unwrap()
            .code,
            405
        );
        assert_eq!(
            r(Method::DELETE, "/api/v1/namespaces", "")
                .err()
                .unwrap()
                .code,
            405
        );
        assert_eq!(
            r(Method::POST, "/api/v1/services", "").err().unwrap().code,
            405
        );
    }

    #[test]
    fn unrouted_requests_are_described() {
        let record = |method: Method, segs: &[&str], code: u16| {
            unrouted_record(
                &method,
                segs,
                &Query::default(),
                ("u".into(), String::new()),
                code,
            )
        };
        let rec = record(
            Method::GET,
            &["api", "v1", "namespaces", "default", "pods", "web-0", "log"],
            404,
        )
        .unwrap();
        assert_eq!(
            (
                rec.verb.as_str(),
                rec.resource.as_str(),
                rec.namespace.as_str(),
                rec.name.as_str(),
                rec.subresource.as_str(),
                rec.code
            ),
            ("get", "pods", "default", "web-0", "log", 404)
        );
        let rec = record(
            Method::GET,
            &["apis", "apps", "v1", "watch", "deployments"],
            404,
        )
        .unwrap();
        assert_eq!(
            (rec.verb.as_str(), rec.group.as_str(), rec.resource.as_str()),
            ("watch", "apps", "deployments")
        );
        let rec = record(Method::PUT, &["api", "v1", "nodes"], 405).unwrap();
        assert_eq!((rec.verb.as_str(), rec.code), ("update", 405));
        assert!(record(Method::GET, &["metrics"], 404).is_none());
    }

    #[test]
    fn accept_header() {
        assert!(acceptable(None));
        assert!(acceptable(Some("application/json")));
        assert!(acceptable(Some(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
        )));
        assert!(acceptable(Some("*/*")));
        assert!(!acceptable(Some("application/vnd.kubernetes.protobuf")));
        assert!(!acceptable(Some(
            "application/json;as=Table;v=v1;g=meta.k8s.io"
        )));
        assert!(acceptable(Some(
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
        )));
    }
}
