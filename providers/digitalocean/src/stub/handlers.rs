//! Request handling of the stub: authentication, rate limiting, faults, routing and the resources.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use axum::body::{Body, Bytes};
use axum::extract::State as AxumState;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::Response;
use parking_lot::Mutex;
use serde_json::{Value, json};

use super::answer::{Answer, paginate, parse_body};
use super::{FaultKind, RecordedRequest, State, StubLb, region_json, timestamp, uuid_like};

const ENTRY_PROTOCOLS: [&str; 6] = ["http", "https", "http2", "http3", "tcp", "udp"];

fn unix_ceil(t: SystemTime) -> u64 {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

pub(crate) async fn handle(
    AxumState(state): AxumState<Arc<Mutex<State>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_string();
    let query_string = uri.query().unwrap_or_default().to_string();
    let query: BTreeMap<String, String> = url::form_urlencoded::parse(query_string.as_bytes())
        .into_owned()
        .collect();

    let mut st = state.lock();
    if path == "/metadata/v1/region" && method == Method::GET {
        let region = st.metadata_region.clone();
        return Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "text/plain")
            .body(Body::from(region))
            .unwrap_or_default();
    }

    let request_id = uuid_like(st.next_id());
    let authorized = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == format!("Bearer {}", st.token));

    let now = SystemTime::now();
    if now >= st.rate.reset_at {
        st.rate.remaining = st.rate.limit;
        st.rate.reset_at = now + st.rate.window;
    }

    let answer = if !authorized {
        Answer::error(
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
            "Unable to authenticate you",
        )
    } else if let Some(kind) = take_fault(&mut st, &method, &path) {
        fault_answer(kind, now)
    } else if st.rate.remaining == 0 {
        let mut a = Answer::error(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_requests",
            "API Rate limit exceeded.",
        );
        a.extra.push((
            "retry-after",
            unix_ceil(st.rate.reset_at)
                .saturating_sub(unix_ceil(now))
                .to_string(),
        ));
        a
    } else {
        st.rate.remaining -= 1;
        route(&mut st, &method, &path, &query, &body)
    };

    let mutating = !matches!(method, Method::GET | Method::HEAD | Method::OPTIONS);
    st.requests.push(RecordedRequest {
        method: method.to_string(),
        path: path.clone(),
        query: query_string,
        status: answer.status.as_u16(),
        body: (mutating && !body.is_empty()).then(|| String::from_utf8_lossy(&body).into_owned()),
    });

    respond(&st, answer, request_id)
}

/// The answer of an injected fault.
fn fault_answer(kind: FaultKind, now: SystemTime) -> Answer {
    match kind {
        FaultKind::TooManyRequests {
            reset_in,
            retry_after,
        } => {
            let mut a = Answer::error(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_requests",
                "API Rate limit exceeded.",
            );
            a.extra.push(("ratelimit-remaining", "0".into()));
            a.extra
                .push(("ratelimit-reset", unix_ceil(now + reset_in).to_string()));
            if let Some(secs) = retry_after {
                a.extra.push(("retry-after", secs.to_string()));
            }
            a
        }
        FaultKind::Status(code) => {
            let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let (id, message) = match code {
                503 => ("service_unavailable", "Service is temporarily unavailable."),
                500..=599 => ("server_error", "Unexpected server-side error"),
                404 => (
                    "not_found",
                    "The resource you were accessing could not be found.",
                ),
                _ => ("error", "Injected error"),
            };
            Answer::error(status, id, message)
        }
    }
}

/// The HTTP response of an answer, with the rate-limit and request-ID headers the API sends.
fn respond(st: &State, answer: Answer, request_id: String) -> Response {
    let mut builder = Response::builder()
        .status(answer.status)
        .header("ratelimit-limit", st.rate.limit.to_string())
        .header("x-request-id", request_id.clone());
    let has_remaining = answer
        .extra
        .iter()
        .any(|(k, _)| *k == "ratelimit-remaining");
    if !has_remaining {
        builder = builder
            .header("ratelimit-remaining", st.rate.remaining.to_string())
            .header("ratelimit-reset", unix_ceil(st.rate.reset_at).to_string());
    }
    for (k, v) in &answer.extra {
        if let Ok(v) = HeaderValue::from_str(v) {
            builder = builder.header(*k, v);
        }
    }
    let body = match answer.body {
        Some(mut v) => {
            if answer.status.as_u16() >= 400 {
                v["request_id"] = json!(request_id);
            }
            builder = builder.header(header::CONTENT_TYPE, "application/json; charset=utf-8");
            Body::from(v.to_string())
        }
        None => Body::empty(),
    };
    builder.body(body).unwrap_or_default()
}

fn take_fault(st: &mut State, method: &Method, path: &str) -> Option<FaultKind> {
    let pos = st.faults.iter().position(|f| {
        f.times > 0
            && f.method
                .as_deref()
                .is_none_or(|m| m.eq_ignore_ascii_case(method.as_str()))
            && path.starts_with(&f.path_prefix)
    })?;
    let fault = &mut st.faults[pos];
    fault.times -= 1;
    let kind = fault.kind.clone();
    if fault.times == 0 {
        st.faults.remove(pos);
    }
    Some(kind)
}

/// The account `GET /v2/account` describes.
fn account_json() -> Value {
    json!({"account": {
        "droplet_limit": 25, "floating_ip_limit": 3, "volume_limit": 100,
        "email": "ops@example.com", "uuid": "b6fr89dbf6d9156cace5f3c78dc9851d957381ef",
        "email_verified": true, "status": "active", "status_message": "",
        "team": {"uuid": "5df3e3004a17e242b7c20ca6c9fc25b701a47ece", "name": "Kubernetes"}
    }})
}

/// The droplets the `name` and `tag_name` query parameters select.
fn matching_droplets(st: &State, query: &BTreeMap<String, String>) -> Vec<Value> {
    st.droplets
        .values()
        .filter(|d| query.get("name").is_none_or(|n| d["name"] == json!(n)))
        .filter(|d| {
            query.get("tag_name").is_none_or(|t| {
                d["tags"]
                    .as_array()
                    .is_some_and(|tags| tags.contains(&json!(t)))
            })
        })
        .cloned()
        .collect()
}

fn route(
    st: &mut State,
    method: &Method,
    path: &str,
    query: &BTreeMap<String, String>,
    body: &[u8],
) -> Answer {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (method.as_str(), segments.as_slice()) {
        ("GET", ["v2", "account"]) => Answer::json(StatusCode::OK, account_json()),
        ("GET", ["v2", "regions"]) => {
            let items = st.regions.iter().map(|r| region_json(r)).collect();
            paginate(st, path, query, "regions", items)
        }
        ("GET", ["v2", "droplets"]) => {
            let items = matching_droplets(st, query);
            paginate(st, path, query, "droplets", items)
        }
        ("GET", ["v2", "droplets", id]) => {
            match id.parse::<u64>().ok().and_then(|id| st.droplets.get(&id)) {
                Some(d) => Answer::json(StatusCode::OK, json!({"droplet": d})),
                None => Answer::not_found(),
            }
        }
        ("GET", ["v2", "load_balancers"]) => {
            let items: Vec<Value> = st
                .load_balancers
                .values_mut()
                .map(|lb| {
                    read_load_balancer(lb);
                    lb.value.clone()
                })
                .collect();
            paginate(st, path, query, "load_balancers", items)
        }
        ("POST", ["v2", "load_balancers"]) => create_load_balancer(st, body),
        ("GET", ["v2", "load_balancers", id]) => match st.load_balancers.get_mut(*id) {
            Some(lb) => {
                read_load_balancer(lb);
                Answer::json(StatusCode::OK, json!({"load_balancer": lb.value}))
            }
            None => Answer::not_found(),
        },
        ("PUT", ["v2", "load_balancers", id]) => update_load_balancer(st, id, body),
        ("DELETE", ["v2", "load_balancers", id]) => match st.load_balancers.remove(*id) {
            Some(_) => Answer::empty(StatusCode::NO_CONTENT),
            None => Answer::not_found(),
        },
        ("GET", ["v2", "certificates"]) => {
            let items = st
                .certificates
                .values()
                .filter(|c| query.get("name").is_none_or(|n| c["name"] == json!(n)))
                .cloned()
                .collect();
            paginate(st, path, query, "certificates", items)
        }
        ("GET", ["v2", "certificates", id]) => match st.certificates.get(*id) {
            Some(c) => Answer::json(StatusCode::OK, json!({"certificate": c})),
            None => Answer::not_found(),
        },
        ("GET", ["v2", "volumes"]) => {
            let items = st.volumes.values().cloned().collect();
            paginate(st, path, query, "volumes", items)
        }
        ("GET", ["v2", "volumes", id]) => match st.volumes.get(*id) {
            Some(v) => Answer::json(StatusCode::OK, json!({"volume": v})),
            None => Answer::not_found(),
        },
        (_, ["v2", "firewalls", rest @ ..]) => {
            super::firewalls::route(st, method.as_str(), path, rest, query, body)
        }
        (_, ["v2", "tags", rest @ ..]) => super::tags::route(st, method.as_str(), rest, body),
        (
            _,
            [
                "v2",
                "account" | "regions" | "droplets" | "load_balancers" | "certificates" | "volumes",
                ..,
            ],
        ) => Answer::error(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "Method not allowed",
        ),
        _ => Answer::not_found(),
    }
}

fn read_load_balancer(lb: &mut StubLb) {
    if let Some(n) = lb.reads_until_active.as_mut() {
        *n = n.saturating_sub(1);
        if *n == 0 {
            lb.value["status"] = json!("active");
            if let Some(ip) = lb.pending_ip.take() {
                lb.value["ip"] = json!(ip);
            }
            lb.reads_until_active = None;
        }
    }
}

fn as_port(v: &Value) -> Option<u64> {
    v.as_u64().filter(|p| (1..=65535).contains(p))
}

/// The API's name rules: at most 255 characters, letters, digits, `.` and `-`, starting with a letter or
/// digit and not ending with `-`.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
}

/// A string field of a request body (`""` when absent or not a string).
fn text<'a>(obj: &'a serde_json::Map<String, Value>, key: &str) -> &'a str {
    obj.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// An integer field that, when present and not zero, must be within `range`.
fn check_range(
    obj: &Value,
    key: &str,
    range: std::ops::RangeInclusive<i64>,
    what: &str,
) -> Result<(), String> {
    match obj.get(key).filter(|v| !v.is_null()) {
        None => Ok(()),
        Some(v) => match v.as_i64() {
            Some(0) => Ok(()),
            Some(n) if range.contains(&n) => Ok(()),
            _ => Err(format!(
                "{what}.{key} must be between {} and {}",
                range.start(),
                range.end()
            )),
        },
    }
}

/// Validates a create or update body the way the API does; `existing` is the load balancer being updated.
pub(crate) fn validate(st: &State, body: &Value, existing: Option<&Value>) -> Result<(), String> {
    let obj = body
        .as_object()
        .ok_or("the request body must be a JSON object")?;
    let name = text(obj, "name");
    if !valid_name(name) {
        return Err(format!("name {name:?} is not valid"));
    }
    let region = text(obj, "region");
    match existing {
        None if !st.regions.iter().any(|r| r == region) => {
            return Err(format!("region {region:?} is not available"));
        }
        Some(lb) if !region.is_empty() && lb["region"]["slug"] != json!(region) => {
            return Err("the region of a load balancer cannot be changed".into());
        }
        _ => {}
    }
    let type_ = obj
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("REGIONAL");
    if !["REGIONAL", "REGIONAL_NETWORK", "GLOBAL"].contains(&type_) {
        return Err(format!("type {type_:?} is not valid"));
    }
    let network = obj
        .get("network")
        .and_then(Value::as_str)
        .unwrap_or("EXTERNAL");
    let stack = obj
        .get("network_stack")
        .and_then(Value::as_str)
        .unwrap_or("IPV4");
    if !["EXTERNAL", "INTERNAL"].contains(&network) || !["IPV4", "DUALSTACK"].contains(&stack) {
        return Err(format!(
            "invalid network {network:?} or network_stack {stack:?}"
        ));
    }
    if network == "INTERNAL" && stack == "DUALSTACK" {
        return Err("internal load balancers do not support DUALSTACK".into());
    }
    if let Some(lb) = existing {
        for (key, value, default) in [
            ("type", type_, "REGIONAL"),
            ("network", network, "EXTERNAL"),
            ("network_stack", stack, "IPV4"),
        ] {
            if lb[key].as_str().unwrap_or(default) != value {
                return Err(format!("the {key} of a load balancer cannot be changed"));
            }
        }
        let vpc = text(obj, "vpc_uuid");
        if !vpc.is_empty() && lb["vpc_uuid"] != json!(vpc) {
            return Err("the VPC of a load balancer cannot be changed".into());
        }
    }
    validate_size(obj)?;
    validate_rules(st, obj, type_)?;
    if let Some(hc) = obj.get("health_check").filter(|v| !v.is_null()) {
        let protocol = hc["protocol"].as_str().unwrap_or("http");
        if !["http", "https", "tcp"].contains(&protocol)
            || hc.get("port").is_some_and(|p| as_port(p).is_none())
        {
            return Err("health_check: invalid protocol or port".into());
        }
        check_range(hc, "check_interval_seconds", 3..=300, "health_check")?;
        check_range(hc, "response_timeout_seconds", 3..=300, "health_check")?;
        check_range(hc, "unhealthy_threshold", 2..=10, "health_check")?;
        check_range(hc, "healthy_threshold", 2..=10, "health_check")?;
    }
    check_range(body, "http_idle_timeout_seconds", 30..=600, "load_balancer")?;
    if let Some(ss) = obj.get("sticky_sessions").filter(|v| !v.is_null()) {
        match ss["type"].as_str().unwrap_or("none") {
            "none" => {}
            "cookies" => {
                if ss["cookie_name"].as_str().unwrap_or_default().is_empty()
                    || ss["cookie_ttl_seconds"].as_i64().unwrap_or(0) <= 0
                {
                    return Err(
                        "sticky_sessions: cookies need cookie_name and cookie_ttl_seconds".into(),
                    );
                }
            }
            other => return Err(format!("sticky_sessions: invalid type {other:?}")),
        }
    }
    validate_firewall(obj)?;
    validate_droplets(st, obj)
}

fn validate_size(obj: &serde_json::Map<String, Value>) -> Result<(), String> {
    let slug = text(obj, "size");
    if !slug.is_empty() && !["lb-small", "lb-medium", "lb-large"].contains(&slug) {
        return Err(format!("size {slug:?} is not valid"));
    }
    let unit = obj.get("size_unit").and_then(Value::as_u64).unwrap_or(0);
    if unit > 100 {
        return Err("size_unit must be between 1 and 100".into());
    }
    if !slug.is_empty() && unit > 0 {
        return Err("only one of size and size_unit may be set".into());
    }
    Ok(())
}

fn validate_rules(
    st: &State,
    obj: &serde_json::Map<String, Value>,
    type_: &str,
) -> Result<(), String> {
    let rules = obj
        .get("forwarding_rules")
        .and_then(Value::as_array)
        .filter(|r| !r.is_empty())
        .ok_or("at least one forwarding rule is required")?;
    for (i, rule) in rules.iter().enumerate() {
        let entry = rule["entry_protocol"].as_str().unwrap_or_default();
        let target = rule["target_protocol"].as_str().unwrap_or_default();
        if !ENTRY_PROTOCOLS.contains(&entry) || !ENTRY_PROTOCOLS.contains(&target) {
            return Err(format!(
                "forwarding_rules[{i}]: invalid protocol {entry:?} -> {target:?}"
            ));
        }
        if as_port(&rule["entry_port"]).is_none() || as_port(&rule["target_port"]).is_none() {
            return Err(format!(
                "forwarding_rules[{i}]: ports must be between 1 and 65535"
            ));
        }
        if type_ == "REGIONAL_NETWORK" && !matches!(entry, "tcp" | "udp") {
            return Err(format!(
                "forwarding_rules[{i}]: REGIONAL_NETWORK supports tcp and udp only"
            ));
        }
        let passthrough = rule["tls_passthrough"].as_bool().unwrap_or(false);
        let cert = rule["certificate_id"].as_str().unwrap_or_default();
        if passthrough && !cert.is_empty() {
            return Err(format!(
                "forwarding_rules[{i}]: tls_passthrough and certificate_id are exclusive"
            ));
        }
        if matches!(entry, "https" | "http2" | "http3") && !passthrough {
            if cert.is_empty() {
                return Err(format!("forwarding_rules[{i}]: a certificate is required"));
            }
            if !st.certificates.contains_key(cert) {
                return Err(format!(
                    "forwarding_rules[{i}]: certificate {cert} not found"
                ));
            }
        }
    }
    Ok(())
}

fn validate_firewall(obj: &serde_json::Map<String, Value>) -> Result<(), String> {
    let Some(fw) = obj.get("firewall").filter(|v| !v.is_null()) else {
        return Ok(());
    };
    for list in ["allow", "deny"] {
        for rule in fw[list].as_array().map(Vec::as_slice).unwrap_or_default() {
            let r = rule.as_str().unwrap_or_default();
            let valid = match r.split_once(':') {
                Some(("ip", ip)) => ip.parse::<std::net::IpAddr>().is_ok(),
                Some(("cidr", net)) => net.parse::<ipnet::IpNet>().is_ok(),
                _ => false,
            };
            if !valid {
                return Err(format!("firewall: invalid rule {r:?}"));
            }
        }
    }
    Ok(())
}

fn validate_droplets(st: &State, obj: &serde_json::Map<String, Value>) -> Result<(), String> {
    let droplets = obj.get("droplet_ids").and_then(Value::as_array);
    if droplets.is_some_and(|d| !d.is_empty()) && !text(obj, "tag").is_empty() {
        return Err("only one of droplet_ids and tag may be set".into());
    }
    for id in droplets.map(Vec::as_slice).unwrap_or_default() {
        if !id.as_u64().is_some_and(|id| st.droplets.contains_key(&id)) {
            return Err(format!("droplet {id} not found"));
        }
    }
    Ok(())
}

/// Fields a request may set, with the API's default for each when the request leaves it out (a `PUT`
/// resets what it leaves out to these).
fn defaults() -> [(&'static str, Value); 16] {
    [
        ("type", json!("REGIONAL")),
        ("health_check", json!({})),
        ("sticky_sessions", json!({"type": "none"})),
        ("droplet_ids", json!([])),
        ("tag", json!("")),
        ("tags", json!([])),
        ("redirect_http_to_https", json!(false)),
        ("enable_proxy_protocol", json!(false)),
        ("enable_backend_keepalive", json!(false)),
        ("http_idle_timeout_seconds", json!(60)),
        ("disable_lets_encrypt_dns_records", json!(false)),
        ("firewall", json!({})),
        ("network", json!("EXTERNAL")),
        ("network_stack", json!("IPV4")),
        ("tls_cipher_policy", json!("DEFAULT")),
        ("project_id", json!("9cc10173-e9ea-4176-9dbc-a4cee4c4ff30")),
    ]
}

/// Treats JSON zero values like absent fields, as the API does for Go clients' omitted fields.
fn is_unset(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::Number(n)) => n.as_f64() == Some(0.0),
        Some(Value::String(s)) => s.is_empty(),
        _ => false,
    }
}

/// The health check with the API's defaults for what the request left out.
fn complete_health_check(hc: &Value) -> Value {
    let mut out = hc.clone();
    for (key, default) in [
        ("protocol", json!("http")),
        ("port", json!(80)),
        ("path", json!("/")),
        ("check_interval_seconds", json!(10)),
        ("response_timeout_seconds", json!(5)),
        ("healthy_threshold", json!(3)),
        ("unhealthy_threshold", json!(5)),
    ] {
        if is_unset(out.get(key)) {
            out[key] = default;
        }
    }
    out
}

/// The nodes of a size slug.
fn slug_units(slug: &str) -> Option<u64> {
    match slug {
        "lb-small" => Some(1),
        "lb-medium" => Some(3),
        "lb-large" => Some(6),
        _ => None,
    }
}

/// The slug of a size in nodes, when there is one.
fn units_slug(units: u64) -> Option<&'static str> {
    match units {
        1 => Some("lb-small"),
        3 => Some("lb-medium"),
        6 => Some("lb-large"),
        _ => None,
    }
}

/// Fills the defaulted fields of a load balancer from a request body, as the API answers them.
fn complete(mut lb: Value) -> Value {
    for (k, v) in defaults() {
        if is_unset(lb.get(k)) {
            lb[k] = v;
        }
    }
    lb["health_check"] = complete_health_check(&lb["health_check"]);
    for list in ["allow", "deny"] {
        if lb["firewall"].get(list).is_none_or(Value::is_null) {
            lb["firewall"][list] = json!([]);
        }
    }
    for rule in lb["forwarding_rules"]
        .as_array_mut()
        .map(Vec::as_mut_slice)
        .unwrap_or_default()
    {
        if is_unset(rule.get("certificate_id")) {
            rule["certificate_id"] = json!("");
        }
        if rule.get("tls_passthrough").is_none_or(Value::is_null) {
            rule["tls_passthrough"] = json!(false);
        }
    }
    let mut droplets: Vec<u64> = lb["droplet_ids"]
        .as_array()
        .map(|ids| ids.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    droplets.sort_unstable();
    droplets.dedup();
    lb["droplet_ids"] = json!(droplets);
    let slug = lb["size"].as_str().unwrap_or_default().to_string();
    let units = match slug_units(&slug) {
        Some(n) => n,
        None => lb["size_unit"].as_u64().filter(|n| *n > 0).unwrap_or(1),
    };
    lb["size_unit"] = json!(units);
    lb["size"] = units_slug(units).map_or(Value::Null, |s| json!(s));
    if lb["size"].is_null()
        && let Some(obj) = lb.as_object_mut()
    {
        obj.remove("size");
    }
    // The algorithm is deprecated: whatever is asked, the API answers round_robin.
    lb["algorithm"] = json!("round_robin");
    lb
}

pub(crate) fn new_load_balancer(st: &mut State, body: Value) -> Value {
    let n = st.next_id();
    let region = body["region"].as_str().unwrap_or_default().to_string();
    let mut lb = complete(body);
    let internal = lb["network"] == json!("INTERNAL");
    let requested_ip = lb["ip"]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    lb["ip"] = json!(requested_ip.unwrap_or_else(|| if internal {
        format!("10.250.{}.{}", (n / 250) % 250, n % 250 + 1)
    } else {
        format!("203.0.{}.{}", (n / 250) % 250 + 113, n % 250 + 1)
    }));
    if lb["network_stack"] == json!("DUALSTACK") {
        lb["ipv6"] = json!(format!("2001:db8:5::{:x}:{:x}", n >> 16, n & 0xffff));
    }
    lb["id"] = json!(uuid_like(n));
    lb["created_at"] = json!(timestamp());
    lb["region"] = region_json(&region);
    if is_unset(lb.get("vpc_uuid")) {
        lb["vpc_uuid"] = json!(format!("vpc-{region}"));
    }
    lb
}

/// Whether a load-balancer request only asks to be validated (`validate_only`): it is checked as a real
/// one and nothing is stored.
fn is_validate_only(body: &Value) -> bool {
    body["validate_only"] == json!(true)
}

fn create_load_balancer(st: &mut State, body: &[u8]) -> Answer {
    let body = match parse_body(body) {
        Ok(b) => b,
        Err(a) => return a,
    };
    if let Err(m) = validate(st, &body, None) {
        return Answer::unprocessable(m);
    }
    if is_validate_only(&body) {
        return Answer::json(StatusCode::OK, json!({"load_balancer": complete(body)}));
    }
    let mut lb = new_load_balancer(st, body);
    super::tags::note_created_tags(st, &lb);
    let reads = st.activation_reads;
    let mut pending_ip = None;
    lb["status"] = json!(if reads.is_some() { "new" } else { "active" });
    if reads.is_some() {
        pending_ip = lb["ip"].as_str().map(str::to_string);
        lb["ip"] = json!("");
    }
    let id = lb["id"].as_str().unwrap_or_default().to_string();
    st.load_balancers.insert(
        id,
        StubLb {
            value: lb.clone(),
            reads_until_active: reads.map(|r| r.max(1)),
            pending_ip,
        },
    );
    Answer::json(StatusCode::ACCEPTED, json!({"load_balancer": lb}))
}

fn update_load_balancer(st: &mut State, id: &str, body: &[u8]) -> Answer {
    let body = match parse_body(body) {
        Ok(b) => b,
        Err(a) => return a,
    };
    let Some(existing) = st.load_balancers.get(id).map(|lb| lb.value.clone()) else {
        return Answer::not_found();
    };
    if let Err(m) = validate(st, &body, Some(&existing)) {
        return Answer::unprocessable(m);
    }
    if is_validate_only(&body) {
        return Answer::json(StatusCode::OK, json!({"load_balancer": complete(body)}));
    }
    let mut lb = complete(body);
    // Server-owned and creation-only fields stay; tags can only be set at creation.
    for key in [
        "id",
        "ip",
        "ipv6",
        "status",
        "created_at",
        "region",
        "tags",
        "vpc_uuid",
        "subnet_uuid",
        "project_id",
    ] {
        match existing.get(key) {
            Some(v) => lb[key] = v.clone(),
            None => {
                if let Some(obj) = lb.as_object_mut() {
                    obj.remove(key);
                }
            }
        }
    }
    if let Some(stored) = st.load_balancers.get_mut(id) {
        stored.value = lb.clone();
    }
    Answer::json(StatusCode::OK, json!({"load_balancer": lb}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn ceil_of_unix_time() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1500);
        assert_eq!(unix_ceil(t), 2);
        assert_eq!(
            unix_ceil(SystemTime::UNIX_EPOCH + Duration::from_secs(3)),
            3
        );
    }
}
