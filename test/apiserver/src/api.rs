//! The verbs: get, list, create, update, patch, delete, deletecollection and the preparation of
//! watches, for stored resources; and the create-only review resources. Independent of HTTP.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::auth::IssuedToken;
use crate::error::{ApiError, FieldError, quote};
use crate::events;
use crate::fields::{self, FieldValidation};
use crate::object;
use crate::patch::{self, PatchError, PatchType};
use crate::resources::{Backing, ResourceDef, Storage, SubresourceDef};
use crate::selector::{FieldSelector, LabelSelector};
use crate::service;
use crate::state::State;
use crate::store::{ObjKey, ReadView, Stored, Txn};
use crate::strategy;
use crate::table::Representation;
use crate::validation;

/// Parsed query parameters (the last value of a repeated parameter wins).
#[derive(Debug, Default, Clone)]
pub(crate) struct Query(HashMap<String, String>);

impl Query {
    /// Parses a raw query string.
    pub(crate) fn parse(raw: Option<&str>) -> Self {
        let mut m = HashMap::new();
        if let Some(q) = raw {
            for (k, v) in url::form_urlencoded::parse(q.as_bytes()) {
                m.insert(k.into_owned(), v.into_owned());
            }
        }
        Self(m)
    }

    /// A parameter's value.
    pub(crate) fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(String::as_str)
    }

    /// A boolean parameter (`true`/`1`).
    pub(crate) fn flag(&self, k: &str) -> bool {
        matches!(self.get(k), Some("true" | "1" | "True" | "TRUE"))
    }
}

/// One API request on a resource.
pub(crate) struct ApiRequest<'a> {
    pub def: &'static ResourceDef,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
    pub query: &'a Query,
    pub content_type: Option<String>,
    pub body: Bytes,
    /// `Warning` headers for the answer (unknown fields dropped under `fieldValidation=Warn`).
    pub warnings: parking_lot::Mutex<Vec<String>>,
}

impl ApiRequest<'_> {
    /// Applies the request's `fieldValidation` to an object of `def` (with kind and apiVersion):
    /// unknown fields fail the request (`Strict`) or are dropped from `v`, with warnings (`Warn`).
    fn validate_fields(
        &self,
        def: &ResourceDef,
        origin: fields::Origin,
        v: &mut Value,
    ) -> Result<(), ApiError> {
        let options = match (origin, self.name.is_some()) {
            (fields::Origin::Patch, _) => "PatchOptions",
            (fields::Origin::Body, true) => "UpdateOptions",
            (fields::Origin::Body, false) => "CreateOptions",
        };
        let directive = FieldValidation::parse(self.query.get("fieldValidation"), options)?;
        let warnings = fields::check(def, directive, origin, v)?;
        *self.warnings.lock() = warnings;
        Ok(())
    }

    fn ns(&self) -> &str {
        self.namespace.as_deref().unwrap_or("")
    }

    fn name(&self) -> &str {
        self.name.as_deref().unwrap_or("")
    }

    fn key(&self) -> ObjKey {
        (
            if self.def.namespaced {
                self.ns().to_string()
            } else {
                String::new()
            },
            self.name().to_string(),
        )
    }

    fn status_sub(&self) -> bool {
        self.subresource.as_deref() == Some("status")
    }

    fn dry_run(&self) -> bool {
        self.query.get("dryRun").is_some_and(|d| d == "All")
    }
}

/// What a watch request asks for.
pub(crate) struct WatchPlan {
    pub def: &'static ResourceDef,
    pub filter: Filter,
    /// `None`: start with the current objects.
    pub from: Option<u64>,
    pub send_initial_events: bool,
    pub bookmarks: bool,
    pub timeout: Duration,
    /// How event objects are sent (set by the HTTP layer from the `Accept` header).
    pub representation: Representation,
}

/// An API answer.
pub(crate) enum Reply {
    /// A JSON body with a status code.
    Json(u16, Vec<u8>),
    /// A watch stream to start.
    Watch(WatchPlan),
}

fn json_reply(code: u16, v: &Value) -> Reply {
    Reply::Json(code, serde_json::to_vec(v).unwrap_or_default())
}

/// Namespace and selector filtering, shared by list and watch.
pub(crate) struct Filter {
    def: &'static ResourceDef,
    namespace: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
}

impl Filter {
    fn from_query(
        def: &'static ResourceDef,
        namespace: Option<String>,
        q: &Query,
    ) -> Result<Self, ApiError> {
        let labels = LabelSelector::parse(q.get("labelSelector").unwrap_or(""))
            .map_err(|e| ApiError::bad_request(e.0))?;
        let fields = FieldSelector::parse(
            q.get("fieldSelector").unwrap_or(""),
            strategy::field_labels(def),
        )
        .map_err(|e| ApiError::bad_request(e.0))?;
        Ok(Self {
            def,
            namespace: if def.namespaced { namespace } else { None },
            labels,
            fields,
        })
    }

    fn selects(&self) -> bool {
        !self.labels.is_empty() || !self.fields.is_empty()
    }

    /// Whether an object at `key` passes the namespace and selectors.
    pub(crate) fn matches(&self, key: &ObjKey, obj: &Stored) -> bool {
        if let Some(ns) = &self.namespace
            && &key.0 != ns
        {
            return false;
        }
        self.labels.matches(|k| obj.label(k))
            && self.fields.matches(|f| match f {
                "metadata.name" => Some(key.1.as_str()),
                "metadata.namespace" => Some(key.0.as_str()),
                other => {
                    let stored = strategy::stored_field_label(self.def, other);
                    obj.field(&stored)
                }
            })
    }
}

/// The full (kind + apiVersion) JSON of a stored object, in the view of `def`.
pub(crate) fn view_full(def: &ResourceDef, obj: &Stored) -> Vec<u8> {
    if def.is_events_v1() {
        let v = object::with_type_meta(
            events::core_to_v1(obj.value()),
            def.kind,
            &def.api_version(),
        );
        serde_json::to_vec(&v).unwrap_or_default()
    } else {
        object::full_bytes(&obj.bytes, def.kind, &def.api_version())
    }
}

/// The full JSON of a stored-shape value, in the view of `def`.
pub(crate) fn view_full_value(def: &ResourceDef, stored_shape: Value) -> Vec<u8> {
    serde_json::to_vec(&view_value(def, stored_shape)).unwrap_or_default()
}

/// The list-item JSON of a stored object, in the view of `def`.
fn view_item<'a>(def: &ResourceDef, obj: &'a Stored) -> Cow<'a, [u8]> {
    if def.is_events_v1() {
        Cow::Owned(serde_json::to_vec(&events::core_to_v1(obj.value())).unwrap_or_default())
    } else {
        Cow::Borrowed(&obj.bytes)
    }
}

/// A stored-shape value in the view of `def`, with type meta.
fn view_value(def: &ResourceDef, stored_shape: Value) -> Value {
    let item = if def.is_events_v1() {
        events::core_to_v1(stored_shape)
    } else {
        stored_shape
    };
    object::with_type_meta(item, def.kind, &def.api_version())
}

/// Converts a request-shape object of `def` to the stored shape (no type meta).
fn to_storage(def: &ResourceDef, v: Value) -> Value {
    if def.is_events_v1() {
        events::v1_to_core(v)
    } else {
        let mut v = v;
        object::strip_type_meta(&mut v);
        v
    }
}

fn internal_group(def: &ResourceDef) -> &'static str {
    match def.group {
        "" | "events.k8s.io" => "core",
        "coordination.k8s.io" => "coordination",
        "authentication.k8s.io" => "authentication",
        "authorization.k8s.io" => "authorization",
        _ => "core",
    }
}

/// Decodes a create/update body of `def`: JSON syntax, type meta, field types, MicroTime fields.
pub(crate) fn decode_body(def: &ResourceDef, body: &[u8]) -> Result<Value, ApiError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        let text = String::from_utf8_lossy(body);
        let snippet: String = text.chars().take(30).collect();
        let more = if text.chars().count() > 30 { " ..." } else { "" };
        ApiError::bad_request(format!(
            "the object provided is unrecognized (must be of type {}): couldn't get version/kind; json parse error: {e} ({snippet}{more})",
            def.kind
        ))
    })?;
    if !v.is_object() {
        return Err(ApiError::bad_request(format!(
            "the object provided is unrecognized (must be of type {}): couldn't get version/kind; json parse error: the body is not a JSON object",
            def.kind
        )));
    }
    let api_version = v.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = v.get("kind").and_then(Value::as_str).unwrap_or("");
    let version = api_version.rsplit('/').next().unwrap_or("");
    if !kind.is_empty() && kind != def.kind {
        return Err(ApiError::bad_request(format!(
            "{kind} in version {} cannot be handled as a {}: converting ({}.{kind}) to ({}.{}): unknown conversion",
            quote(version),
            def.kind,
            if version.is_empty() {
                def.version
            } else {
                version
            },
            internal_group(def),
            def.kind
        )));
    }
    if !api_version.is_empty() && api_version != def.api_version() {
        return Err(ApiError::bad_request(format!(
            "no kind {} is registered for version {} in scheme \"pkg/api/legacyscheme/scheme.go:30\"",
            quote(def.kind),
            quote(api_version)
        )));
    }
    if v.get("kind").is_some_and(|k| !k.is_string())
        || v.get("apiVersion").is_some_and(|a| !a.is_string())
    {
        return Err(ApiError::bad_request(format!(
            "the object provided is unrecognized (must be of type {}): couldn't get version/kind; json parse error: kind and apiVersion must be strings",
            def.kind
        )));
    }
    strategy::decode_check(def, &v).map_err(ApiError::bad_request)?;
    Ok(v)
}

fn storage_of(def: &ResourceDef) -> Result<Storage, ApiError> {
    def.storage().ok_or_else(ApiError::method_not_allowed)
}

fn ns_check(state: &State, def: &ResourceDef, ns: &str) -> Result<(), ApiError> {
    if !def.namespaced {
        return Ok(());
    }
    let found = state
        .store
        .get(Storage::Namespaces, &(String::new(), ns.to_string()));
    match found {
        None => Err(ApiError::namespace_not_found(ns)),
        Some(n) if n.value()["metadata"]["deletionTimestamp"].is_string() => {
            Err(terminating(ns, def))
        }
        Some(_) => Ok(()),
    }
}

fn terminating(ns: &str, def: &ResourceDef) -> ApiError {
    ApiError::forbidden(
        format!(
            "{} is forbidden: unable to create new content in namespace {ns} because it is being terminated",
            def.qualified_resource()
        ),
        Some(json!({"name": ns, "kind": def.plural})),
    )
}

// ---------------------------------------------------------------------------------------------
// get / list

/// GET of one object (main resource or status subresource: both return the whole object).
pub(crate) fn get(state: &State, req: &ApiRequest<'_>) -> Result<Reply, ApiError> {
    let s = storage_of(req.def)?;
    match state.store.get(s, &req.key()) {
        Some(obj) => Ok(Reply::Json(200, view_full(req.def, &obj))),
        None => Err(ApiError::not_found(req.def, req.name())),
    }
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct ContinueToken {
    v: String,
    rv: u64,
    start: String,
}

fn encode_continue(rv: u64, rel: &str) -> String {
    let token = ContinueToken {
        v: "meta.k8s.io/v1".into(),
        rv,
        start: format!("{rel}\u{0}"),
    };
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(serde_json::to_vec(&token).unwrap_or_default())
}

fn decode_continue(token: &str) -> Result<ContinueToken, ApiError> {
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token.trim_end_matches('='))
        .or_else(|_| base64::engine::general_purpose::STANDARD.decode(token))
        .map_err(|e| {
            ApiError::bad_request(format!(
                "invalid continue token: continue key is not valid: {e}"
            ))
        })?;
    let t: ContinueToken = serde_json::from_slice(&raw).map_err(|e| {
        ApiError::bad_request(format!(
            "invalid continue token: continue key is not valid: {e}"
        ))
    })?;
    if t.v != "meta.k8s.io/v1" {
        return Err(ApiError::bad_request(format!(
            "invalid continue token: continue key is not valid: incorrect encoded start resourceVersion (version {})",
            t.v
        )));
    }
    Ok(t)
}

/// The key a list continues after, relative to its scope.
fn rel_key(def: &ResourceDef, scoped_ns: Option<&str>, key: &ObjKey) -> String {
    if def.namespaced && scoped_ns.is_none() {
        format!("{}/{}", key.0, key.1)
    } else {
        key.1.clone()
    }
}

fn parse_rel_key(
    def: &ResourceDef,
    scoped_ns: Option<&str>,
    rel: &str,
) -> Result<ObjKey, ApiError> {
    let rel = rel.strip_suffix('\u{0}').unwrap_or(rel);
    if !def.namespaced {
        return Ok((String::new(), rel.to_string()));
    }
    match scoped_ns {
        Some(ns) => Ok((ns.to_string(), rel.to_string())),
        None => rel
            .split_once('/')
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .ok_or_else(|| ApiError::bad_request("invalid continue token: continue key is not valid: the key does not name a namespace")),
    }
}

async fn wait_for_rv(state: &State, rv: u64) -> Result<(), ApiError> {
    let mut rx = state.store.rv_receiver();
    let waited = tokio::time::timeout(state.cfg.list_wait, rx.wait_for(|cur| *cur >= rv)).await;
    match waited {
        Ok(Ok(_)) => Ok(()),
        _ => Err(ApiError::too_large_resource_version(
            rv,
            state.store.current_rv(),
        )),
    }
}

fn parse_rv_param(s: &str) -> Result<u64, ApiError> {
    object::parse_rv(s)
        .ok_or_else(|| ApiError::bad_request(format!("invalid resource version {}", quote(s))))
}

/// Why a continue token older than the compaction mark is refused (the real server's words).
const CONTINUE_EXPIRED: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

/// LIST: checks the list options, waits for the requested resource version, then reads one page
/// from the store.
pub(crate) async fn list(state: &State, req: &ApiRequest<'_>) -> Result<Reply, ApiError> {
    let def = req.def;
    let storage = storage_of(def)?;
    let q = req.query;
    let filter = Filter::from_query(def, req.namespace.clone(), q)?;
    let rv_param = q.get("resourceVersion").unwrap_or("");
    let rvm = q.get("resourceVersionMatch").unwrap_or("");
    check_resource_version_match(rv_param, rvm)?;
    let cont = q.get("continue").filter(|c| !c.is_empty());
    if cont.is_some() && !rv_param.is_empty() {
        return Err(ApiError::bad_request(
            "specifying resource version is not allowed when using continue",
        ));
    }
    let limit = list_limit(q, rv_param)?;
    wait_for_list_rv(state, rv_param, rvm).await?;
    let scoped_ns = if def.namespaced {
        req.namespace.as_deref()
    } else {
        None
    };
    let token = cont.map(decode_continue).transpose()?;
    let start = token
        .as_ref()
        .map(|t| parse_rel_key(def, scoped_ns, &t.start))
        .transpose()?;
    let scan = ListScan {
        def,
        storage,
        filter: &filter,
        scoped_ns,
        start,
        limit,
        name_only: filter
            .fields
            .required_value("metadata.name")
            .map(str::to_string),
    };
    state.store.read(|r| {
        if let Some(t) = &token
            && t.rv < r.compacted()
        {
            return Err(ApiError::expired(CONTINUE_EXPIRED));
        }
        let list_rv = token.as_ref().map_or(r.rv(), |t| t.rv);
        let page = scan.read(r);
        Ok(Reply::Json(200, scan.body(list_rv, &page)))
    })
}

/// Checks `resourceVersionMatch`: only with a `resourceVersion`, only `Exact` or `NotOlderThan`, and
/// not `Exact` for resource version 0.
fn check_resource_version_match(rv_param: &str, rvm: &str) -> Result<(), ApiError> {
    if rvm.is_empty() {
        return Ok(());
    }
    if rv_param.is_empty() {
        return Err(ApiError::invalid_options(
            "ListOptions",
            &[FieldError::forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            )],
        ));
    }
    if rvm != "Exact" && rvm != "NotOlderThan" {
        return Err(ApiError::invalid_options(
            "ListOptions",
            &[FieldError::not_supported(
                "resourceVersionMatch",
                rvm,
                &["Exact", "NotOlderThan"],
            )],
        ));
    }
    if rvm == "Exact" && rv_param == "0" {
        return Err(ApiError::invalid_options(
            "ListOptions",
            &[FieldError::forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
            )],
        ));
    }
    Ok(())
}

/// The page size a LIST asks for (0: everything); `resourceVersion=0` ignores it, as the real server's
/// cache does.
fn list_limit(q: &Query, rv_param: &str) -> Result<i64, ApiError> {
    let limit = match q.get("limit").filter(|l| !l.is_empty()) {
        Some(l) => l
            .parse::<i64>()
            .map_err(|_| ApiError::bad_request(format!("invalid limit {}", quote(l))))?,
        None => 0,
    };
    Ok(if rv_param == "0" { 0 } else { limit })
}

/// Waits until the store has the resource version a LIST names (other than 0); with `Exact`, one
/// older than the current one has expired.
async fn wait_for_list_rv(state: &State, rv_param: &str, rvm: &str) -> Result<(), ApiError> {
    if rv_param.is_empty() || rv_param == "0" {
        return Ok(());
    }
    let n = parse_rv_param(rv_param)?;
    wait_for_rv(state, n).await?;
    let cur = state.store.current_rv();
    if rvm == "Exact" && n < cur {
        return Err(ApiError::expired(format!(
            "too old resource version: {n} ({cur})"
        )));
    }
    Ok(())
}

/// What one LIST page reads: which objects, from where, and how many.
struct ListScan<'a> {
    def: &'static ResourceDef,
    storage: Storage,
    filter: &'a Filter,
    /// The namespace of a list in one namespace (`None` across namespaces or for cluster-scoped
    /// resources).
    scoped_ns: Option<&'a str>,
    /// The key a continued list resumes after.
    start: Option<ObjKey>,
    /// The page size (0: everything).
    limit: i64,
    /// The name a `metadata.name=` field selector requires.
    name_only: Option<String>,
}

/// The objects of a LIST page, and what its continue token needs.
#[derive(Default)]
struct ListPage {
    /// The items' JSON, comma-separated.
    items: Vec<u8>,
    /// The key of the last item.
    last: Option<ObjKey>,
    /// More objects match after the page.
    more: bool,
    /// How many (counted only without selectors).
    remaining: u64,
}

impl ListPage {
    fn push(&mut self, def: &ResourceDef, key: &ObjKey, obj: &Stored) {
        if !self.items.is_empty() {
            self.items.push(b',');
        }
        self.items.extend_from_slice(&view_item(def, obj));
        self.last = Some(key.clone());
    }
}

impl ListScan<'_> {
    /// Reads the page from a view of the store.
    fn read(&self, r: &ReadView<'_>) -> ListPage {
        let mut page = ListPage {
            items: Vec::with_capacity(1024),
            ..ListPage::default()
        };
        match self.direct_key() {
            Some(k) => self.look_up(r, &k, &mut page),
            None => self.scan(r, &mut page),
        }
        page
    }

    /// The key a name-only field selector on a scoped list names: such a list is a direct lookup.
    fn direct_key(&self) -> Option<ObjKey> {
        match (
            &self.name_only,
            self.scoped_ns,
            self.def.namespaced,
            &self.start,
        ) {
            (Some(n), Some(ns), true, None) => Some((ns.to_string(), n.clone())),
            (Some(n), _, false, None) => Some((String::new(), n.clone())),
            _ => None,
        }
    }

    /// The page of a direct lookup: the object at `k`, if it passes the filter.
    fn look_up(&self, r: &ReadView<'_>, k: &ObjKey, page: &mut ListPage) {
        if let Some((key, obj)) = r
            .range_from(self.storage, std::ops::Bound::Included(k))
            .next()
            && key == k
            && self.filter.matches(key, obj)
        {
            page.push(self.def, key, obj);
        }
    }

    /// The page of a scan in key order from the continue point (or the namespace's first key), up to
    /// the limit; past it, the rest is counted without selectors, and not read with them.
    fn scan(&self, r: &ReadView<'_>, page: &mut ListPage) {
        let lower = match (&self.start, self.scoped_ns) {
            (Some(k), _) => std::ops::Bound::Excluded(k.clone()),
            (None, Some(ns)) => std::ops::Bound::Included((ns.to_string(), String::new())),
            (None, None) => std::ops::Bound::Unbounded,
        };
        let mut count: i64 = 0;
        for (key, obj) in r.range_from(self.storage, lower.as_ref()) {
            if let Some(ns) = self.scoped_ns
                && key.0 != ns
            {
                break;
            }
            if !self.filter.matches(key, obj) {
                continue;
            }
            if self.limit > 0 && count >= self.limit {
                page.more = true;
                if self.filter.selects() {
                    break;
                }
                page.remaining += 1;
                continue;
            }
            page.push(self.def, key, obj);
            count += 1;
        }
    }

    /// The list's JSON: kind, apiVersion, metadata (resourceVersion, and for a partial page the
    /// continue token and, without selectors, the remaining item count) and the items.
    fn body(&self, list_rv: u64, page: &ListPage) -> Vec<u8> {
        let def = self.def;
        let mut meta = Map::new();
        meta.insert("resourceVersion".into(), json!(list_rv.to_string()));
        if page.more
            && let Some(k) = &page.last
        {
            meta.insert(
                "continue".into(),
                json!(encode_continue(list_rv, &rel_key(def, self.scoped_ns, k))),
            );
            if !self.filter.selects() {
                meta.insert("remainingItemCount".into(), json!(page.remaining));
            }
        }
        let head =
            json!({"kind": def.list_kind(), "apiVersion": def.api_version(), "metadata": meta});
        let mut out = serde_json::to_vec(&head).unwrap_or_default();
        out.pop();
        out.extend_from_slice(b",\"items\":[");
        out.extend_from_slice(&page.items);
        out.extend_from_slice(b"]}");
        out
    }
}

/// Prepares a WATCH.
pub(crate) fn watch(state: &State, req: &ApiRequest<'_>) -> Result<Reply, ApiError> {
    let def = req.def;
    storage_of(def)?;
    let q = req.query;
    let mut filter = Filter::from_query(def, req.namespace.clone(), q)?;
    if let Some(name) = &req.name {
        let sel = format!("metadata.name={name}");
        let extra = FieldSelector::parse(&sel, strategy::field_labels(def))
            .map_err(|e| ApiError::bad_request(e.0))?;
        filter.fields = match q.get("fieldSelector").filter(|f| !f.is_empty()) {
            Some(f) => FieldSelector::parse(&format!("{f},{sel}"), strategy::field_labels(def))
                .map_err(|e| ApiError::bad_request(e.0))?,
            None => extra,
        };
    }
    let rv_param = q.get("resourceVersion").unwrap_or("");
    let send_initial_events = q.flag("sendInitialEvents");
    let bookmarks = q.flag("allowWatchBookmarks");
    if send_initial_events {
        let mut errs = Vec::new();
        if q.get("resourceVersionMatch") != Some("NotOlderThan") {
            errs.push(FieldError::forbidden(
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        if !bookmarks {
            errs.push(FieldError::forbidden(
                "allowWatchBookmarks",
                "sendInitialEvents requires setting allowWatchBookmarks to true",
            ));
        }
        if !errs.is_empty() {
            return Err(ApiError::invalid_options("ListOptions", &errs));
        }
    }
    let from = if send_initial_events || rv_param.is_empty() || rv_param == "0" {
        None
    } else {
        Some(parse_rv_param(rv_param)?)
    };
    let timeout =
        match q.get("timeoutSeconds").filter(|t| !t.is_empty()) {
            Some(t) => Duration::from_secs(t.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!("invalid timeoutSeconds {}", quote(t)))
            })?),
            None => state.cfg.default_watch_timeout,
        };
    Ok(Reply::Watch(WatchPlan {
        def,
        filter,
        from,
        send_initial_events,
        bookmarks,
        timeout,
        representation: Representation::Object,
    }))
}

// ---------------------------------------------------------------------------------------------
// create

enum Created {
    Stored(Arc<Stored>),
    DryRun(Value),
}

fn reply_created(def: &ResourceDef, c: Created, code: u16) -> Reply {
    match c {
        Created::Stored(obj) => Reply::Json(code, view_full(def, &obj)),
        Created::DryRun(v) => json_reply(code, &view_value(def, v)),
    }
}

/// Creates `v` (stored shape, decoded) in `ns`.
fn do_create(
    state: &State,
    def: &'static ResourceDef,
    ns: &str,
    mut v: Value,
    dry_run: bool,
) -> Result<Created, ApiError> {
    let s = storage_of(def)?;
    if def.namespaced {
        object::set_meta(&mut v, "namespace", json!(ns));
    } else {
        object::remove_meta(&mut v, "namespace");
    }
    let mut name = object::name(&v).to_string();
    let generate = object::str_at(&v, &["metadata", "generateName"])
        .unwrap_or("")
        .to_string();
    let generated = name.is_empty() && !generate.is_empty();
    if generated {
        name = object::generate_name(&generate);
        object::set_meta(&mut v, "name", json!(name));
    }
    if object::str_at(&v, &["metadata", "resourceVersion"]).is_some_and(|r| !r.is_empty()) {
        return Err(ApiError::bad_request(
            "resourceVersion should not be set on objects to be created",
        ));
    }
    for k in [
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
        "selfLink",
        "generation",
        "resourceVersion",
    ] {
        object::remove_meta(&mut v, k);
    }
    object::set_meta(&mut v, "uid", json!(uuid::Uuid::new_v4().to_string()));
    object::set_meta(&mut v, "creationTimestamp", json!(object::now_rfc3339()));
    ns_check(state, def, ns)?;
    strategy::admit_create(s, &mut v, state.cfg.not_ready_taint);
    strategy::defaults(s, &mut v);
    let errs = strategy::validate_create(def, &v, ns);
    if !errs.is_empty() {
        return Err(ApiError::invalid(def, &name, &errs));
    }
    if dry_run {
        return Ok(Created::DryRun(v));
    }
    state.store.write(|t| {
        if def.namespaced {
            match t.namespace(ns) {
                None => return Err(ApiError::namespace_not_found(ns)),
                Some(true) => return Err(terminating(ns, def)),
                Some(false) => {}
            }
        }
        let mut key: ObjKey = (
            if def.namespaced {
                ns.to_string()
            } else {
                String::new()
            },
            name.clone(),
        );
        if generated {
            while t.get(s, &key).is_some() {
                key.1 = object::generate_name(&generate);
                object::set_meta(&mut v, "name", json!(key.1));
            }
        }
        if t.get(s, &key).is_some() {
            return Err(ApiError::already_exists(def, &key.1));
        }
        if s == Storage::Services {
            t.services()
                .allocate(&mut v, None)
                .map_err(|e| ApiError::invalid(def, &key.1, &e))?;
        }
        Ok(Created::Stored(t.put(s, key, v)))
    })
}

fn check_create_content_type(req: &ApiRequest<'_>) -> Result<(), ApiError> {
    match req.content_type.as_deref().map(|c| {
        c.split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
    }) {
        None => Ok(()),
        Some(c) if c.is_empty() || c == "application/json" || c == "*/*" => Ok(()),
        Some(_) => Err(ApiError::unsupported_body_type()),
    }
}

/// POST to a collection.
pub(crate) fn create(state: &State, req: &ApiRequest<'_>) -> Result<Reply, ApiError> {
    check_create_content_type(req)?;
    let def = req.def;
    match def.backing {
        Backing::TokenReview => {
            let v = decode_body(def, &req.body)?;
            let lookup = |ns: &str, name: &str| state.service_account_uid(ns, name);
            return Ok(json_reply(201, &state.auth.token_review(&v, &lookup)?));
        }
        Backing::SubjectAccessReview => {
            let v = decode_body(def, &req.body)?;
            return Ok(json_reply(201, &state.auth.subject_access_review(&v)?));
        }
        Backing::Stored(_) => {}
    }
    let mut v = decode_body(def, &req.body)?;
    if def.namespaced
        && let Some(body_ns) =
            object::str_at(&v, &["metadata", "namespace"]).filter(|n| !n.is_empty())
        && body_ns != req.ns()
    {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    req.validate_fields(def, fields::Origin::Body, &mut v)?;
    let v = to_storage(def, v);
    let created = do_create(state, def, req.ns(), v, req.dry_run())?;
    Ok(reply_created(def, created, 201))
}

// ---------------------------------------------------------------------------------------------
// serviceaccounts/token

/// The lifetime of a token when a TokenRequest does not ask for one (one hour, as upstream).
const DEFAULT_TOKEN_EXPIRATION_SECONDS: i64 = 3600;
/// The longest lifetime a TokenRequest may ask for (2^32 seconds).
const MAX_TOKEN_EXPIRATION_SECONDS: i64 = 1 << 32;

fn duration_words(d: Duration) -> String {
    let secs = d.as_secs();
    if secs >= 60 && secs.is_multiple_of(60) {
        let minutes = secs / 60;
        format!("{minutes} minute{}", if minutes == 1 { "" } else { "s" })
    } else {
        format!("{secs} second{}", if secs == 1 { "" } else { "s" })
    }
}

fn base64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// A JWT-shaped token with the claims a real service-account token carries. The signature part is
/// random: this server recognizes the tokens it issued by looking them up, never by verifying them.
fn service_account_jwt(claims: &Value) -> String {
    let header = json!({"alg": "RS256", "kid": "test-apiserver"});
    let mut signature = Vec::with_capacity(32);
    signature.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
    signature.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
    format!(
        "{}.{}.{}",
        base64url(&serde_json::to_vec(&header).unwrap_or_default()),
        base64url(&serde_json::to_vec(claims).unwrap_or_default()),
        base64url(&signature)
    )
}

/// POST `serviceaccounts/{name}/token`: a TokenRequest (authentication.k8s.io/v1) for an existing
/// ServiceAccount. The token it answers authenticates as `system:serviceaccount:<ns>:<name>` until
/// `expirationSeconds` have passed or the ServiceAccount is deleted.
pub(crate) fn create_token(
    state: &State,
    req: &ApiRequest<'_>,
    sub: &SubresourceDef,
) -> Result<Reply, ApiError> {
    check_create_content_type(req)?;
    let body = decode_token_request(&req.body, sub)?;
    let name = req.name().to_string();
    let Some(account) = state.store.get(Storage::ServiceAccounts, &req.key()) else {
        return Err(ApiError::not_found(req.def, &name));
    };
    let spec = &body["spec"];
    if !spec["boundObjectRef"].is_null() {
        return Err(ApiError::bad_request(
            "spec.boundObjectRef: this server does not issue object-bound tokens",
        ));
    }
    let expiration_seconds = token_expiration(state, spec, sub, &name)?;
    let grant = TokenGrant {
        audiences: token_audiences(spec),
        namespace: req.ns().to_string(),
        service_account: name,
        uid: account.uid.to_string(),
        expiration_seconds,
        issued_at: jiff::Timestamp::now().as_second(),
    };
    let token = grant.issue(state);
    Ok(json_reply(201, &grant.reply(sub, &token)))
}

/// Decodes a TokenRequest body: a JSON object whose kind and apiVersion, when given, are the
/// subresource's, and whose fields have the TokenRequest types.
fn decode_token_request(body: &[u8], sub: &SubresourceDef) -> Result<Value, ApiError> {
    let body: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "the object provided is unrecognized (must be of type {}): couldn't get version/kind; json parse error: {e}",
            sub.kind
        ))
    })?;
    if !body.is_object() {
        return Err(ApiError::bad_request(format!(
            "the object provided is unrecognized (must be of type {}): couldn't get version/kind; json parse error: the body is not a JSON object",
            sub.kind
        )));
    }
    let kind = body.get("kind").and_then(Value::as_str).unwrap_or("");
    let api_version = body.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    if (!kind.is_empty() && kind != sub.kind)
        || (!api_version.is_empty() && api_version != sub.api_version())
    {
        return Err(ApiError::bad_request(format!(
            "{} in version {} cannot be handled as a {}",
            if kind.is_empty() { sub.kind } else { kind },
            quote(api_version),
            sub.kind
        )));
    }
    if let Err(e) = k8s_openapi::api::authentication::v1::TokenRequest::deserialize(&body)
        && !e.to_string().starts_with("missing field")
    {
        return Err(ApiError::bad_request(format!(
            "{} in version {} cannot be handled as a {}: {e}",
            sub.kind,
            quote(sub.version),
            sub.kind
        )));
    }
    Ok(body)
}

/// The lifetime a TokenRequest asks for (`spec.expirationSeconds`, one hour by default), between the
/// server's shortest and 2^32 seconds.
fn token_expiration(
    state: &State,
    spec: &Value,
    sub: &SubresourceDef,
    name: &str,
) -> Result<i64, ApiError> {
    let expiration = spec["expirationSeconds"]
        .as_i64()
        .unwrap_or(DEFAULT_TOKEN_EXPIRATION_SECONDS);
    let shortest = state.cfg.min_token_expiration;
    let invalid = |message: String| {
        ApiError::invalid_named(
            &format!("{}.{}", sub.kind, sub.group),
            sub.group,
            sub.kind,
            name,
            &[FieldError::invalid(
                "spec.expirationSeconds",
                expiration.to_string(),
                message,
            )],
        )
    };
    if expiration < i64::try_from(shortest.as_secs()).unwrap_or(i64::MAX) {
        return Err(invalid(format!(
            "may not specify a duration less than {}",
            duration_words(shortest)
        )));
    }
    if expiration > MAX_TOKEN_EXPIRATION_SECONDS {
        return Err(invalid(
            "may not specify a duration larger than 2^32 seconds".to_string(),
        ));
    }
    Ok(expiration)
}

/// The audiences a TokenRequest asks for (`spec.audiences`), or the API server's when none.
fn token_audiences(spec: &Value) -> Vec<String> {
    spec["audiences"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .filter(|a: &Vec<String>| !a.is_empty())
        .unwrap_or_else(|| vec![crate::auth::DEFAULT_AUDIENCE.to_string()])
}

/// A service-account token being granted: for whom, to which audiences, and for how long.
struct TokenGrant {
    namespace: String,
    service_account: String,
    /// The ServiceAccount's UID.
    uid: String,
    audiences: Vec<String>,
    expiration_seconds: i64,
    /// When it is issued, in Unix seconds.
    issued_at: i64,
}

impl TokenGrant {
    /// When it expires, in Unix seconds.
    fn expires_at(&self) -> i64 {
        self.issued_at.saturating_add(self.expiration_seconds)
    }

    /// The claims a real service-account token carries.
    fn claims(&self) -> Value {
        let (namespace, name) = (&self.namespace, &self.service_account);
        json!({
            "aud": self.audiences,
            "exp": self.expires_at(),
            "iat": self.issued_at,
            "iss": crate::auth::DEFAULT_AUDIENCE,
            "kubernetes.io": {
                "namespace": namespace,
                "serviceaccount": {"name": name, "uid": self.uid}
            },
            "nbf": self.issued_at,
            "sub": format!("system:serviceaccount:{namespace}:{name}")
        })
    }

    /// Makes the token and registers it with the authenticator until it expires.
    fn issue(&self, state: &State) -> String {
        let lifetime = Duration::from_secs(u64::try_from(self.expiration_seconds).unwrap_or(0));
        let token = service_account_jwt(&self.claims());
        state.auth.issue(
            &token,
            IssuedToken {
                namespace: self.namespace.clone(),
                service_account: self.service_account.clone(),
                uid: self.uid.clone(),
                audiences: self.audiences.clone(),
                expires: std::time::Instant::now() + lifetime,
            },
        );
        token
    }

    /// The TokenRequest answered: the request's spec as granted, and the token in its status.
    fn reply(&self, sub: &SubresourceDef, token: &str) -> Value {
        let timestamp = |secs: i64| {
            jiff::Timestamp::from_second(secs)
                .map(|t| t.to_string())
                .unwrap_or_default()
        };
        json!({
            "kind": sub.kind,
            "apiVersion": sub.api_version(),
            "metadata": {
                "name": self.service_account,
                "namespace": self.namespace,
                "creationTimestamp": timestamp(self.issued_at)
            },
            "spec": {
                "audiences": self.audiences,
                "expirationSeconds": self.expiration_seconds,
                "boundObjectRef": null
            },
            "status": {
                "token": token,
                "expirationTimestamp": timestamp(self.expires_at())
            }
        })
    }
}

// ---------------------------------------------------------------------------------------------
// update / patch

enum Outcome {
    Unchanged(Arc<Stored>),
    Updated(Arc<Stored>),
    /// The last finalizer went away on a terminating object: it was removed. The body is the final
    /// state with the previous resourceVersion.
    Removed(Value),
    DryRun(Value),
}

fn reply_outcome(def: &ResourceDef, o: Outcome) -> Reply {
    match o {
        Outcome::Unchanged(obj) | Outcome::Updated(obj) => Reply::Json(200, view_full(def, &obj)),
        Outcome::Removed(v) | Outcome::DryRun(v) => json_reply(200, &view_value(def, v)),
    }
}

/// Removes a terminating namespace once it holds no objects.
fn finalize_namespace(t: &mut Txn<'_>, ns: &str) {
    if ns.is_empty() || t.namespace(ns) != Some(true) {
        return;
    }
    let empty = Storage::NAMESPACED
        .iter()
        .all(|s| t.keys_in_namespace(*s, ns).is_empty());
    if empty {
        let key = (String::new(), ns.to_string());
        if let Some(cur) = t.get(Storage::Namespaces, &key) {
            let mut last = cur.value();
            if let Some(spec) = last.get_mut("spec").and_then(Value::as_object_mut) {
                spec.remove("finalizers");
            }
            t.delete(Storage::Namespaces, &key, last);
        }
    }
}

/// The optimistic-concurrency update loop shared by PUT and PATCH. `compute` builds the new object
/// (stored shape) from the current one, and applies the request's preconditions.
fn guaranteed_update(
    state: &State,
    req: &ApiRequest<'_>,
    mut compute: impl FnMut(&Stored, &Value) -> Result<Value, ApiError>,
) -> Result<Outcome, ApiError> {
    let def = req.def;
    let s = storage_of(def)?;
    let key = req.key();
    let status_sub = req.status_sub();
    loop {
        let Some(cur) = state.store.get(s, &key) else {
            return Err(ApiError::not_found(def, req.name()));
        };
        let old = cur.value();
        let mut new = compute(&cur, &old)?;
        strategy::copy_server_meta(&mut new, &old);
        if def.namespaced {
            object::set_meta(&mut new, "namespace", json!(key.0));
        } else {
            object::remove_meta(&mut new, "namespace");
        }
        if s == Storage::Services {
            service::default_ingress_ip_mode(&mut new);
        }
        strategy::isolate(def, status_sub, &mut new, &old);
        if s == Storage::Services && !status_sub {
            service::carry_allocations(&mut new, &old);
        }
        strategy::defaults(s, &mut new);
        object::set_meta(&mut new, "resourceVersion", json!(cur.rv.to_string()));
        let errs = strategy::validate_update(def, &new, &old, &key.0);
        if !errs.is_empty() {
            return Err(ApiError::invalid(def, &key.1, &errs));
        }
        let remove = new["metadata"]["deletionTimestamp"].is_string()
            && validation::finalizers(&new).is_empty();
        if new == old && !remove {
            return Ok(Outcome::Unchanged(cur));
        }
        if req.dry_run() {
            return Ok(Outcome::DryRun(new));
        }
        let committed = state.store.write(|t| {
            match t.get(s, &key) {
                Some(now) if now.rv == cur.rv => {}
                _ => return None,
            }
            if s == Storage::Services
                && !status_sub
                && let Err(e) = t.services().allocate(&mut new, Some(&old))
            {
                return Some(Err(ApiError::invalid(def, &key.1, &e)));
            }
            if remove {
                t.delete(s, &key, new.clone());
                finalize_namespace(t, &key.0);
                Some(Ok(Outcome::Removed(new.clone())))
            } else {
                Some(Ok(Outcome::Updated(t.put(s, key.clone(), new.clone()))))
            }
        });
        if let Some(r) = committed {
            return r;
        }
    }
}

fn rv_precondition(
    def: &ResourceDef,
    name: &str,
    requested: Option<&str>,
    cur: &Stored,
) -> Result<(), ApiError> {
    match requested.filter(|r| !r.is_empty()) {
        None => {
            if def
                .storage()
                .is_some_and(|s| strategy::behaviour(s).unconditional_update)
            {
                Ok(())
            } else {
                Err(ApiError::invalid_by_resource(
                    def,
                    name,
                    &[FieldError::invalid(
                        "metadata.resourceVersion",
                        "0x0",
                        "must be specified for an update",
                    )],
                ))
            }
        }
        Some(r) if r == cur.rv.to_string() => Ok(()),
        Some(r) if object::parse_rv(r).is_none() => Err(ApiError::bad_request(format!(
            "invalid resource version {}",
            quote(r)
        ))),
        Some(_) => Err(ApiError::conflict(def, name)),
    }
}

/// PUT of an object or of its status.
pub(crate) fn update(state: &State, req: &ApiRequest<'_>) -> Result<Reply, ApiError> {
    check_create_content_type(req)?;
    let def = req.def;
    let s = storage_of(def)?;
    let mut body = decode_body(def, &req.body)?;
    req.validate_fields(def, fields::Origin::Body, &mut body)?;
    let body_name = object::name(&body).to_string();
    if body_name != req.name() {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({})",
            req.name()
        )));
    }
    if def.namespaced
        && let Some(body_ns) =
            object::str_at(&body, &["metadata", "namespace"]).filter(|n| !n.is_empty())
        && body_ns != req.ns()
    {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    let requested_rv = object::str_at(&body, &["metadata", "resourceVersion"]).map(str::to_string);
    let stored_body = to_storage(def, body);
    if state.store.get(s, &req.key()).is_none()
        && strategy::behaviour(s).create_on_update
        && !req.status_sub()
    {
        let mut v = stored_body;
        object::remove_meta(&mut v, "resourceVersion");
        let created = do_create(state, def, req.ns(), v, req.dry_run())?;
        return Ok(reply_created(def, created, 201));
    }
    let outcome = guaranteed_update(state, req, |cur, _old| {
        rv_precondition(def, req.name(), requested_rv.as_deref(), cur)?;
        Ok(stored_body.clone())
    })?;
    Ok(reply_outcome(def, outcome))
}

/// PATCH of an object or of its status.
pub(crate) fn patch(state: &State, req: &ApiRequest<'_>) -> Result<Reply, ApiError> {
    let def = req.def;
    storage_of(def)?;
    let ct = req.content_type.as_deref().unwrap_or("");
    let essence = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let kind = match PatchType::from_content_type(ct) {
        Some(k) => k,
        None if essence == "application/apply-patch+yaml"
            || essence == "application/apply-patch+cbor" =>
        {
            if req.query.get("fieldManager").is_none_or(str::is_empty) {
                return Err(ApiError::invalid_options(
                    "PatchOptions",
                    &[FieldError::required(
                        "fieldManager",
                        "is required for apply patch",
                    )],
                ));
            }
            return Err(ApiError::unsupported_patch_type());
        }
        None => return Err(ApiError::unsupported_patch_type()),
    };
    let outcome = guaranteed_update(state, req, |cur, old| {
        let base = view_value(def, old.clone());
        let patched = patch::apply(kind, def.plural, &base, &req.body).map_err(|e| match e {
            PatchError::BadRequest(m) => ApiError::bad_request(m),
            PatchError::Invalid(m) => ApiError::invalid_generic(m),
        })?;
        if !patched.is_object() {
            return Err(ApiError::bad_request(format!(
                "the patched object is not a {}",
                def.kind
            )));
        }
        let patched_name = object::name(&patched).to_string();
        if patched_name != req.name() {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({patched_name}) does not match the name on the URL ({})",
                req.name()
            )));
        }
        let mut patched = patched;
        if let Value::Object(m) = &mut patched {
            m.insert("kind".into(), json!(def.kind));
            m.insert("apiVersion".into(), json!(def.api_version()));
        }
        strategy::decode_check(def, &patched).map_err(ApiError::bad_request)?;
        req.validate_fields(def, fields::Origin::Patch, &mut patched)?;
        let requested = object::str_at(&patched, &["metadata", "resourceVersion"]);
        rv_precondition(def, req.name(), requested, cur)?;
        Ok(to_storage(def, patched))
    })?;
    Ok(reply_outcome(def, outcome))
}

// ---------------------------------------------------------------------------------------------
// delete

#[derive(Debug, Default)]
struct DeleteOptions {
    uid: Option<String>,
    rv: Option<String>,
}

fn delete_options(req: &ApiRequest<'_>) -> Result<DeleteOptions, ApiError> {
    let mut o = DeleteOptions::default();
    if req.body.iter().all(u8::is_ascii_whitespace) {
        return Ok(o);
    }
    let v: Value = serde_json::from_slice(&req.body)
        .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?;
    if !v.is_object() {
        return Err(ApiError::bad_request(
            "invalid DeleteOptions: not a JSON object",
        ));
    }
    if let Some(k) = v.get("kind").and_then(Value::as_str)
        && k != "DeleteOptions"
    {
        return Err(ApiError::bad_request(format!(
            "invalid DeleteOptions: unexpected kind {}",
            quote(k)
        )));
    }
    o.uid = v["preconditions"]["uid"].as_str().map(str::to_string);
    o.rv = v["preconditions"]["resourceVersion"]
        .as_str()
        .map(str::to_string);
    Ok(o)
}

fn success_status(def: &ResourceDef, name: &str, uid: &str) -> Value {
    let mut d = Map::new();
    d.insert("name".into(), json!(name));
    if !def.group.is_empty() {
        d.insert("group".into(), json!(def.group));
    }
    d.insert("kind".into(), json!(def.plural));
    d.insert("uid".into(), json!(uid));
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": d})
}

const PROTECTED_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public"];

fn mark_deleting(v: &mut Value) {
    object::set_meta(v, "deletionTimestamp", json!(object::now_rfc3339()));
    object::set_meta(v, "deletionGracePeriodSeconds", json!(0));
    object::order_keys(v);
}

/// Deletes one object inside a transaction: objects with finalizers are marked, others removed.
/// Returns the reply body value (stored shape) and whether the object was removed.
fn delete_in_txn(t: &mut Txn<'_>, s: Storage, key: &ObjKey, cur: &Stored) -> (Value, bool) {
    let old = cur.value();
    if !validation::finalizers(&old).is_empty() {
        if old["metadata"]["deletionTimestamp"].is_string() {
            return (old, false);
        }
        let mut new = old;
        mark_deleting(&mut new);
        let stored = t.put(s, key.clone(), new);
        return (stored.value(), false);
    }
    t.delete(s, key, old.clone());
    finalize_namespace(t, &key.0);
    (old, true)
}

fn delete_namespace(state: &State, req: &ApiRequest<'_>, cur: &Stored) -> Result<Reply, ApiError> {
    let def = req.def;
    let name = req.name().to_string();
    if PROTECTED_NAMESPACES.contains(&name.as_str()) {
        return Err(ApiError::forbidden(
            format!(
                "namespaces {} is forbidden: this namespace may not be deleted",
                quote(&name)
            ),
            Some(json!({"name": name, "kind": "namespaces"})),
        ));
    }
    let old = cur.value();
    if old["metadata"]["deletionTimestamp"].is_string() {
        return Ok(Reply::Json(200, view_full(def, cur)));
    }
    let mut new = old.clone();
    mark_deleting(&mut new);
    if let Some(status) = new.get_mut("status").and_then(Value::as_object_mut) {
        status.insert("phase".into(), json!("Terminating"));
    }
    if req.dry_run() {
        return Ok(json_reply(200, &view_value(def, new)));
    }
    let reply = state.store.write(|t| {
        let key = (String::new(), name.clone());
        let stored = t.put(Storage::Namespaces, key, new);
        let body = view_full(def, &stored);
        for s in Storage::NAMESPACED {
            for k in t.keys_in_namespace(s, &name) {
                if let Some(obj) = t.get(s, &k) {
                    delete_in_txn(t, s, &k, &obj);
                }
            }
        }
        finalize_namespace(t, &name);
        body
    });
    Ok(Reply::Json(200, reply))
}

/// DELETE of one object.
pub(crate) fn delete(state: &State, req: &ApiRequest<'_>) -> Result<Reply, ApiError> {
    let def = req.def;
    let s = storage_of(def)?;
    let opts = delete_options(req)?;
    let key = req.key();
    loop {
        let Some(cur) = state.store.get(s, &key) else {
            return Err(ApiError::not_found(def, req.name()));
        };
        if let Some(uid) = opts.uid.as_deref().filter(|u| !u.is_empty())
            && uid != &*cur.uid
        {
            return Err(ApiError::precondition_conflict(
                def,
                req.name(),
                &format!(
                    "the UID in the precondition ({uid}) does not match the UID in record ({}). The object might have been deleted and then recreated",
                    cur.uid
                ),
            ));
        }
        if let Some(rv) = opts.rv.as_deref().filter(|r| !r.is_empty())
            && rv != cur.rv.to_string()
        {
            return Err(ApiError::precondition_conflict(
                def,
                req.name(),
                &format!(
                    "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({}). The object might have been modified",
                    cur.rv
                ),
            ));
        }
        if s == Storage::Namespaces {
            return delete_namespace(state, req, &cur);
        }
        if req.dry_run() {
            let old = cur.value();
            if !validation::finalizers(&old).is_empty() {
                let mut new = old;
                if !new["metadata"]["deletionTimestamp"].is_string() {
                    mark_deleting(&mut new);
                }
                return Ok(json_reply(200, &view_value(def, new)));
            }
            return Ok(deleted_reply(def, &cur));
        }
        let done = state.store.write(|t| {
            match t.get(s, &key) {
                Some(now) if now.rv == cur.rv => {}
                _ => return None,
            }
            Some(delete_in_txn(t, s, &key, &cur))
        });
        match done {
            None => continue,
            Some((_, true)) => return Ok(deleted_reply(def, &cur)),
            Some((v, false)) => return Ok(json_reply(200, &view_value(def, v))),
        }
    }
}

fn deleted_reply(def: &ResourceDef, cur: &Stored) -> Reply {
    let b = strategy::behaviour(def.storage().unwrap_or(Storage::Nodes));
    if b.return_deleted_object {
        Reply::Json(200, view_full(def, cur))
    } else {
        json_reply(
            200,
            &success_status(def, object::name(&cur.value()), &cur.uid),
        )
    }
}

/// DELETE of a collection (with optional selectors): answers the list of affected objects.
pub(crate) fn delete_collection(state: &State, req: &ApiRequest<'_>) -> Result<Reply, ApiError> {
    let def = req.def;
    let s = storage_of(def)?;
    delete_options(req)?;
    let filter = Filter::from_query(def, req.namespace.clone(), req.query)?;
    let keys: Vec<ObjKey> = state.store.read(|r| {
        r.range_from(s, std::ops::Bound::Unbounded)
            .filter(|(k, o)| filter.matches(k, o))
            .map(|(k, _)| k.clone())
            .collect()
    });
    let mut items: Vec<Value> = Vec::new();
    for key in keys {
        let r = state.store.write(|t| {
            let cur = t.get(s, &key)?;
            if req.dry_run() {
                return Some(cur.value());
            }
            Some(delete_in_txn(t, s, &key, &cur).0)
        });
        if let Some(v) = r {
            let mut item = if def.is_events_v1() {
                events::core_to_v1(v)
            } else {
                v
            };
            object::strip_type_meta(&mut item);
            items.push(item);
        }
    }
    let list = json!({
        "kind": def.list_kind(),
        "apiVersion": def.api_version(),
        "metadata": {"resourceVersion": state.store.current_rv().to_string()},
        "items": items
    });
    Ok(json_reply(200, &list))
}

/// Creates the namespaces every cluster has.
pub(crate) fn seed_namespaces(state: &State) -> Result<(), ApiError> {
    let def = crate::resources::find("", "v1", "namespaces")
        .ok_or_else(|| ApiError::internal("namespaces are not served"))?;
    for ns in PROTECTED_NAMESPACES {
        do_create(state, def, "", json!({"metadata": {"name": ns}}), false)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip() {
        let nodes = crate::resources::find("", "v1", "nodes").unwrap();
        let token = encode_continue(200, "node-a");
        assert_eq!(
            token,
            "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MjAwLCJzdGFydCI6Im5vZGUtYVx1MDAwMCJ9"
        );
        let t = decode_continue(&token).unwrap();
        assert_eq!(t.rv, 200);
        assert_eq!(
            parse_rel_key(nodes, None, &t.start).unwrap(),
            (String::new(), "node-a".to_string())
        );
        assert_eq!(decode_continue("bogus").unwrap_err().code, 400);
        let svcs = crate::resources::find("", "v1", "services").unwrap();
        let k = ("default".to_string(), "a".to_string());
        assert_eq!(rel_key(svcs, None, &k), "default/a");
        assert_eq!(parse_rel_key(svcs, None, "default/a\u{0}").unwrap(), k);
        assert_eq!(rel_key(svcs, Some("default"), &k), "a");
    }

    #[test]
    fn body_decoding_errors() {
        let nodes = crate::resources::find("", "v1", "nodes").unwrap();
        let e = decode_body(
            nodes,
            br#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"node-z""#,
        )
        .unwrap_err();
        assert_eq!(e.code, 400);
        assert!(e.message.starts_with("the object provided is unrecognized (must be of type Node): couldn't get version/kind; json parse error: "));
        assert!(
            e.message
                .ends_with(r#"({"apiVersion":"v1","kind":"Nod ...)"#),
            "{}",
            e.message
        );
        let e = decode_body(
            nodes,
            br#"{"apiVersion":"v1","kind":"Service","metadata":{"name":"node-z"}}"#,
        )
        .unwrap_err();
        assert_eq!(
            e.message,
            "Service in version \"v1\" cannot be handled as a Node: converting (v1.Service) to (core.Node): unknown conversion"
        );
        let e = decode_body(nodes, br#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"node-z","labels":"not-a-map"}}"#).unwrap_err();
        assert!(
            e.message
                .starts_with("Node in version \"v1\" cannot be handled as a Node: ")
        );
        assert!(decode_body(nodes, br#"{"metadata":{"name":"n"}}"#).is_ok());
    }

    #[test]
    fn queries() {
        let q = Query::parse(Some(
            "labelSelector=env+in+(test,prod),!x&watch=1&fieldSelector=metadata.name%3Dnode-b",
        ));
        assert_eq!(q.get("labelSelector"), Some("env in (test,prod),!x"));
        assert_eq!(q.get("fieldSelector"), Some("metadata.name=node-b"));
        assert!(q.flag("watch"));
        assert!(!q.flag("allowWatchBookmarks"));
    }
}
