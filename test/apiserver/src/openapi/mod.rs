//! The OpenAPI documents of the served API, generated from the resource table: `/openapi/v3` (the
//! discovery document naming one OpenAPI 3.0 document per group version, each at
//! `/openapi/v3/<api/v1 | apis/group/version>?hash=...`) and `/openapi/v2` (one Swagger 2.0 document,
//! JSON only).
//!
//! kubectl reads them for `kubectl explain`, for the list strategies of `kubectl apply`, and to learn
//! whether the server validates fields itself: when a kind's PATCH operation takes a `fieldValidation`
//! parameter, `kubectl create`/`apply` leave validation to the server (`fieldValidation=Strict`).
//! kubectl fetches `/openapi/v2` only as protobuf, which is not served (406); it falls back to v2 only
//! when v3 lacks a kind, and v3 describes every served kind.

mod paths;
mod schemas;

use std::collections::BTreeMap;
use std::sync::OnceLock;

use bytes::Bytes;
use serde_json::{Value, json};
use sha2::{Digest, Sha512};

use crate::discovery::KUBERNETES_VERSION;
use crate::resources::{self, RESOURCES, ResourceDef};
use schemas::{Definitions, Flavor};

/// One generated document.
#[derive(Debug)]
struct Document {
    /// Upper-case hex SHA-512 of the body: the `hash` of its URL, and its ETag.
    hash: String,
    body: Bytes,
}

impl Document {
    fn new(value: &Value) -> Self {
        let body = Bytes::from(serde_json::to_vec(value).unwrap_or_default());
        let hash = Sha512::digest(&body)
            .iter()
            .map(|b| format!("{b:02X}"))
            .collect();
        Self { hash, body }
    }
}

/// Every document, generated once per process.
#[derive(Debug)]
struct Documents {
    v2: Document,
    v3_root: Document,
    /// By path below `/openapi/v3/` (`api/v1`, `apis/coordination.k8s.io/v1`).
    v3: BTreeMap<String, Document>,
}

/// What a request below `/openapi/` is answered with.
#[derive(Debug)]
pub(crate) enum Answer {
    /// A JSON document and its ETag; `immutable` when the request named the document's hash.
    Json {
        body: Bytes,
        etag: String,
        immutable: bool,
    },
    /// The request named another hash: the document's current URL.
    Redirect(String),
}

/// `api/v1` or `apis/<group>/<version>`.
fn group_version_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// The served group versions, in table order.
fn group_versions() -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&'static str, &'static str)> = Vec::new();
    for def in RESOURCES {
        if !out.contains(&(def.group, def.version)) {
            out.push((def.group, def.version));
        }
    }
    out
}

fn info() -> Value {
    json!({"title": "Kubernetes", "version": KUBERNETES_VERSION})
}

const BEARER: &str = "BearerToken";

fn bearer_scheme() -> Value {
    json!({"type": "apiKey", "description": "Bearer Token authentication", "name": "authorization", "in": "header"})
}

/// The OpenAPI 3.0 document of one group version.
fn v3_document(group: &str, version: &str) -> Value {
    let served = resources::in_group_version(group, version);
    let mut defs = Definitions::new(Flavor::V3);
    let paths = paths::paths(Flavor::V3, &mut defs, &served);
    json!({
        "openapi": "3.0.0",
        "info": info(),
        "paths": paths,
        "components": {
            "schemas": defs.finish(),
            "securitySchemes": {BEARER: bearer_scheme()}
        },
        "security": [{BEARER: []}]
    })
}

/// The Swagger 2.0 document of everything served.
fn v2_document() -> Value {
    let served: Vec<&'static ResourceDef> = RESOURCES.iter().collect();
    let mut defs = Definitions::new(Flavor::V2);
    let paths = paths::paths(Flavor::V2, &mut defs, &served);
    json!({
        "swagger": "2.0",
        "info": info(),
        "paths": paths,
        "definitions": defs.finish(),
        "securityDefinitions": {BEARER: bearer_scheme()},
        "security": [{BEARER: []}]
    })
}

fn documents() -> &'static Documents {
    static DOCUMENTS: OnceLock<Documents> = OnceLock::new();
    DOCUMENTS.get_or_init(|| {
        let mut v3 = BTreeMap::new();
        let mut root = serde_json::Map::new();
        for (group, version) in group_versions() {
            let path = group_version_path(group, version);
            let doc = Document::new(&v3_document(group, version));
            root.insert(
                path.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={}", doc.hash)}),
            );
            v3.insert(path, doc);
        }
        Documents {
            v2: Document::new(&v2_document()),
            v3_root: Document::new(&json!({"paths": root})),
            v3,
        }
    })
}

fn answer(doc: &Document, requested_hash: Option<&str>) -> Answer {
    Answer::Json {
        body: doc.body.clone(),
        etag: format!("\"{}\"", doc.hash),
        immutable: requested_hash == Some(doc.hash.as_str()),
    }
}

/// Answers `GET /openapi/...`: `segments` are the path segments after `openapi`, `hash` the `hash`
/// query parameter. `None` for a path that names no document (404).
pub(crate) fn serve(segments: &[&str], hash: Option<&str>) -> Option<Answer> {
    let docs = documents();
    match segments {
        ["v2"] => Some(answer(&docs.v2, None)),
        ["v3"] => Some(answer(&docs.v3_root, None)),
        ["v3", rest @ ..] => {
            let path = rest.join("/");
            let doc = docs.v3.get(&path)?;
            match hash {
                Some(h) if !h.is_empty() && h != doc.hash => Some(Answer::Redirect(format!(
                    "/openapi/v3/{path}?hash={}",
                    doc.hash
                ))),
                _ => Some(answer(doc, hash)),
            }
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json_of(a: Answer) -> Value {
        match a {
            Answer::Json { body, .. } => serde_json::from_slice(&body).unwrap(),
            Answer::Redirect(to) => panic!("redirected to {to}"),
        }
    }

    #[test]
    fn root_names_every_group_version_with_its_hash() {
        let root = json_of(serve(&["v3"], None).unwrap());
        let paths = root["paths"].as_object().unwrap();
        let names: Vec<&str> = paths.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "api/v1",
                "apis/events.k8s.io/v1",
                "apis/coordination.k8s.io/v1",
                "apis/authentication.k8s.io/v1",
                "apis/authorization.k8s.io/v1"
            ]
        );
        let url = paths["api/v1"]["serverRelativeURL"].as_str().unwrap();
        let (path, hash) = url.split_once("?hash=").unwrap();
        assert_eq!(path, "/openapi/v3/api/v1");
        assert_eq!(hash.len(), 128);
        let doc = json_of(serve(&["v3", "api", "v1"], Some(hash)).unwrap());
        assert_eq!(doc["openapi"], "3.0.0");
        assert!(doc["components"]["schemas"]["io.k8s.api.core.v1.Pod"].is_object());
        match serve(&["v3", "api", "v1"], Some("0")).unwrap() {
            Answer::Redirect(to) => assert_eq!(to, url),
            Answer::Json { .. } => panic!("a stale hash is redirected"),
        }
        assert!(serve(&["v3", "apis", "apps", "v1"], None).is_none());
    }

    #[test]
    fn every_reference_resolves() {
        fn refs<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
            match v {
                Value::Object(m) => {
                    if let Some(Value::String(r)) = m.get("$ref") {
                        out.push(r);
                    }
                    m.values().for_each(|x| refs(x, out));
                }
                Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
                _ => {}
            }
        }
        for (path, doc) in &documents().v3 {
            let v: Value = serde_json::from_slice(&doc.body).unwrap();
            let mut found = Vec::new();
            refs(&v, &mut found);
            for r in found {
                let name = r.strip_prefix("#/components/schemas/").unwrap();
                assert!(
                    v["components"]["schemas"].get(name).is_some(),
                    "{path}: {r}"
                );
            }
        }
        let v2: Value = serde_json::from_slice(&documents().v2.body).unwrap();
        let mut found = Vec::new();
        refs(&v2, &mut found);
        for r in found {
            let name = r.strip_prefix("#/definitions/").unwrap();
            assert!(v2["definitions"].get(name).is_some(), "v2: {r}");
        }
    }
}
