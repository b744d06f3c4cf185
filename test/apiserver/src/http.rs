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
use crate::controls::{self, Controls, RequestKey, RequestRecord};
use crate::discovery;
use crate::error::ApiError;
use crate::openapi;
use crate::resources::{self, ResourceDef, SubresourceDef};
use crate::server::State;
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

async fn serve(state: Arc<State>, req: Request<Incoming>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    let query = Query::parse(parts.uri.query());
    let header = |h: http::header::HeaderName| {
        parts
            .headers
            .get(h)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };

    let public = matches!(
        path.as_str(),
        "/healthz" | "/livez" | "/readyz" | "/version" | "/version/"
    );
    let lookup = |ns: &str, name: &str| state.service_account_uid(ns, name);
    let authn = state
        .auth
        .authenticate(header(AUTHORIZATION).as_deref(), &lookup);
    let rejected = matches!(authn, Authn::Rejected(_))
        || (state.cfg.require_auth && !matches!(authn, Authn::Known(_)));
    if rejected && !public {
        return error_response(&ApiError::unauthorized());
    }
    match path.as_str() {
        "/healthz" | "/livez" | "/readyz" => {
            return response(200, "text/plain; charset=utf-8", full("ok"));
        }
        _ => {}
    }
    if path == "/_test" || path.starts_with("/_test/") {
        let bytes = match read_body(&state, body).await {
            Ok(b) => b,
            Err(e) => return error_response(&e),
        };
        let controls = Controls {
            state: state.clone(),
        };
        return match controls::admin(&controls, &parts.method, path.trim_end_matches('/'), &bytes) {
            Ok((code, v)) => json_response(code, serde_json::to_vec(&v).unwrap_or_default()),
            Err(e) => error_response(&e),
        };
    }
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let accept = header(ACCEPT);
    let is_api = matches!(segs.first(), Some(&"api" | &"apis")) && segs.len() > 2;
    let representation = if is_api {
        let include = match IncludeObject::parse(query.get("includeObject")) {
            Ok(i) => i,
            Err(e) => return error_response(&e),
        };
        match table::negotiate(accept.as_deref(), include) {
            Some(r) => r,
            None => return error_response(&ApiError::not_acceptable()),
        }
    } else if acceptable(accept.as_deref()) {
        Representation::Object
    } else {
        return error_response(&ApiError::not_acceptable());
    };
    if let Some(("openapi", rest)) = segs.split_first().map(|(a, b)| (*a, b)) {
        return openapi_response(&parts.method, rest, &query);
    }
    let discovery = match segs.as_slice() {
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
    };
    if let Some(doc) = discovery {
        if parts.method != Method::GET {
            return error_response(&ApiError::method_not_allowed());
        }
        if doc.is_null() {
            return error_response(&ApiError::unknown_resource());
        }
        return json_response(200, serde_json::to_vec(&doc).unwrap_or_default());
    }

    let user_agent = || {
        parts
            .headers
            .get(http::header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let route = match route(&parts.method, &segs, &query) {
        Ok(r) => r,
        Err(e) => {
            if let Some(record) = unrouted_record(
                &parts.method,
                &segs,
                &query,
                (authn.username(), user_agent()),
                e.code,
            ) {
                state.controls.record(record);
            }
            return error_response(&e);
        }
    };
    let key = RequestKey {
        verb: route.verb.to_string(),
        resource: route.def.plural.to_string(),
        subresource: route.subresource.clone().unwrap_or_default(),
    };
    state.controls.count(&key);
    let record = |code: u16| RequestRecord {
        verb: route.verb.to_string(),
        group: route.def.group.to_string(),
        version: route.def.version.to_string(),
        resource: route.def.plural.to_string(),
        subresource: route.subresource.clone().unwrap_or_default(),
        namespace: route.namespace.clone().unwrap_or_default(),
        name: route.name.clone().unwrap_or_default(),
        user: authn.username(),
        user_agent: user_agent(),
        code,
        dry_run: query.get("dryRun") == Some("All"),
    };
    if let Some(e) = state.controls.fault_for(&key) {
        state.controls.record(record(e.code));
        return error_response(&e);
    }
    let delay = state.controls.latency_for(&key);
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let bytes = match read_body(&state, body).await {
        Ok(b) => b,
        Err(e) => {
            state.controls.record(record(e.code));
            return error_response(&e);
        }
    };
    let api_req = ApiRequest {
        def: route.def,
        namespace: route.namespace.clone(),
        name: route.name.clone(),
        subresource: route.subresource.clone(),
        query: &query,
        content_type: header(CONTENT_TYPE),
        body: bytes,
        warnings: parking_lot::Mutex::new(Vec::new()),
    };
    let result = match (route.verb, route.extra) {
        ("create", Some(sub)) if sub.name == "token" => api::create_token(&state, &api_req, sub),
        (_, Some(_)) => Err(ApiError::method_not_allowed()),
        ("get", None) => api::get(&state, &api_req),
        ("list", None) => api::list(&state, &api_req).await,
        ("watch", None) => api::watch(&state, &api_req),
        ("create", None) => api::create(&state, &api_req),
        ("update", None) => api::update(&state, &api_req),
        ("patch", None) => api::patch(&state, &api_req),
        ("delete", None) => api::delete(&state, &api_req),
        ("deletecollection", None) => api::delete_collection(&state, &api_req),
        _ => Err(ApiError::method_not_allowed()),
    };
    let resp = match result.map(|reply| render(route.verb, route.def, &representation, reply)) {
        Ok(Reply::Json(code, body)) => {
            let mut r = json_response(code, body);
            for warning in api_req.warnings.lock().iter() {
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
    };
    state.controls.record(record(resp.status().as_u16()));
    resp
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
