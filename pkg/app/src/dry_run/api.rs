//! The API side of a dry run: every write of the controllers' clients is sent with `dryRun=All` (the API
//! server validates and answers as if it wrote, and persists nothing) and recorded, with the object it
//! changes and the change: the patch, the created object, or for an update, a merge patch from the object
//! as it is to the object sent.

use bytes::Bytes;
use cloud_provider::{ApiWrite, DryRunLog, ObjectKey, ObjectKind};
use http::{Method, Request, Response, Uri};
use kube::client::Body;
use serde_json::{Map, Value};

/// Whether `method` writes.
pub(crate) fn is_write(method: &Method) -> bool {
    matches!(
        *method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    )
}

/// Sends the write `request` through `base` with `dryRun=All`, recording it in `log`.
pub(crate) async fn send_write(
    base: kube::Client,
    log: DryRunLog,
    request: Request<Body>,
) -> Result<Response<Body>, kube::Error> {
    let (mut parts, body) = request.into_parts();
    let body = body.collect_bytes().await?;
    let path = parts.uri.path().to_string();
    let event = is_event_path(&path);
    let change = if parts.method == Method::PUT && !event {
        update_change(&base, &parts, &body).await
    } else {
        String::from_utf8_lossy(&body).into_owned()
    };
    log.record_api_write(ApiWrite {
        object: if event {
            event_subject(&body)
        } else {
            object_of(&path)
        },
        method: parts.method.to_string(),
        path,
        change,
        event,
    });
    parts.uri = with_dry_run(&parts.uri)?;
    base.send(Request::from_parts(parts, Body::from(body)))
        .await
}

/// `uri` with `dryRun=All` added to its query.
fn with_dry_run(uri: &Uri) -> Result<Uri, kube::Error> {
    let path_and_query = match uri.query() {
        Some(query) if !query.is_empty() => format!("{}?{query}&dryRun=All", uri.path()),
        _ => format!("{}?dryRun=All", uri.path()),
    };
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(path_and_query.parse().map_err(|_| invalid_uri(uri))?);
    Uri::from_parts(parts).map_err(|_| invalid_uri(uri))
}

fn invalid_uri(uri: &Uri) -> kube::Error {
    kube::Error::Service(format!("cannot add dryRun=All to {uri}").into())
}

/// An update's change: a merge patch from the object as the API server has it to the object sent (the
/// whole object when it cannot be read).
async fn update_change(base: &kube::Client, parts: &http::request::Parts, body: &Bytes) -> String {
    let sent: Option<Value> = serde_json::from_slice(body).ok();
    let current = async {
        let request = Request::get(parts.uri.path())
            .body(Vec::new())
            .map_err(kube::Error::HttpError)?;
        base.request::<Value>(request).await
    };
    match (sent, current.await) {
        (Some(sent), Ok(current)) => merge_patch(&current, &sent).to_string(),
        _ => String::from_utf8_lossy(body).into_owned(),
    }
}

/// The JSON merge patch that turns `old` into `new`, leaving out the server's bookkeeping
/// (`resourceVersion`, `managedFields`, `generation`).
pub(crate) fn merge_patch(old: &Value, new: &Value) -> Value {
    let (Value::Object(old), Value::Object(new)) = (old, new) else {
        return new.clone();
    };
    let mut patch = Map::new();
    for (key, value) in new {
        if matches!(
            key.as_str(),
            "resourceVersion" | "managedFields" | "generation"
        ) {
            continue;
        }
        match old.get(key) {
            Some(before) if before == value => {}
            Some(before @ Value::Object(_)) if value.is_object() => {
                patch.insert(key.clone(), merge_patch(before, value));
            }
            _ => {
                patch.insert(key.clone(), value.clone());
            }
        }
    }
    for key in old.keys() {
        if !new.contains_key(key) && !matches!(key.as_str(), "status" | "managedFields") {
            patch.insert(key.clone(), Value::Null);
        }
    }
    Value::Object(patch)
}

fn is_event_path(path: &str) -> bool {
    let mut segments = path.trim_start_matches('/').split('/');
    let resource = match segments.next() {
        Some("api") => segments.nth(3),
        Some("apis") => segments.nth(4),
        _ => None,
    };
    resource == Some("events")
}

/// The object a write to `path` changes: a Node, Service or PersistentVolume (with any subresource);
/// other resources are reported as such.
pub(crate) fn object_of(path: &str) -> Option<ObjectKey> {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let rest = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", namespace, rest @ ..] if !rest.is_empty() => (Some(*namespace), rest),
        _ => (None, rest),
    };
    let [resource, name, ..] = rest else {
        return None;
    };
    let kind = match *resource {
        "nodes" => ObjectKind::Node,
        "services" => ObjectKind::Service,
        "persistentvolumes" => ObjectKind::PersistentVolume,
        _ => ObjectKind::Other,
    };
    let name = match (kind, namespace) {
        (ObjectKind::Other, Some(ns)) => format!("{resource}/{ns}/{name}"),
        (ObjectKind::Other, None) => format!("{resource}/{name}"),
        (_, Some(ns)) => format!("{ns}/{name}"),
        (_, None) => name.to_string(),
    };
    Some(ObjectKey::new(kind, name))
}

/// The object an Event is about (`involvedObject` of core `v1` Events, `regarding` of `events.k8s.io`).
fn event_subject(body: &[u8]) -> Option<ObjectKey> {
    let event: Value = serde_json::from_slice(body).ok()?;
    let subject = event
        .get("regarding")
        .or_else(|| event.get("involvedObject"))?;
    let name = subject.get("name")?.as_str()?;
    let namespace = subject.get("namespace").and_then(Value::as_str);
    let kind = match subject.get("kind").and_then(Value::as_str)? {
        "Node" => ObjectKind::Node,
        "Service" => ObjectKind::Service,
        "PersistentVolume" => ObjectKind::PersistentVolume,
        _ => ObjectKind::Other,
    };
    let name = match namespace.filter(|ns| !ns.is_empty()) {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    };
    Some(ObjectKey::new(kind, name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn writes_are_filed_under_their_object() {
        assert_eq!(object_of("/api/v1/nodes/n1"), Some(ObjectKey::node("n1")));
        assert_eq!(
            object_of("/api/v1/nodes/n1/status"),
            Some(ObjectKey::node("n1"))
        );
        assert_eq!(
            object_of("/api/v1/namespaces/default/services/web/status"),
            Some(ObjectKey::service("default", "web"))
        );
        assert_eq!(
            object_of("/api/v1/persistentvolumes/pv1"),
            Some(ObjectKey::persistent_volume("pv1"))
        );
        assert_eq!(
            object_of("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/ccm"),
            Some(ObjectKey::new(ObjectKind::Other, "leases/kube-system/ccm"))
        );
        assert_eq!(object_of("/api/v1/namespaces/default/events"), None);
        assert!(is_event_path("/api/v1/namespaces/default/events"));
        assert!(is_event_path(
            "/apis/events.k8s.io/v1/namespaces/default/events/x"
        ));
        assert!(!is_event_path("/api/v1/nodes/events"));
    }

    #[test]
    fn events_are_filed_under_their_subject() {
        let core =
            json!({"involvedObject": {"kind": "Service", "namespace": "default", "name": "web"}});
        assert_eq!(
            event_subject(core.to_string().as_bytes()),
            Some(ObjectKey::service("default", "web"))
        );
        let new = json!({"regarding": {"kind": "Node", "name": "n1"}});
        assert_eq!(
            event_subject(new.to_string().as_bytes()),
            Some(ObjectKey::node("n1"))
        );
        assert_eq!(event_subject(b"{\"count\": 2}"), None);
    }

    #[test]
    fn dry_run_is_added_to_the_query() {
        let uri: Uri = "https://h/api/v1/nodes/n1?fieldManager=x".parse().unwrap();
        assert_eq!(
            with_dry_run(&uri).unwrap().to_string(),
            "https://h/api/v1/nodes/n1?fieldManager=x&dryRun=All"
        );
        let uri: Uri = "/api/v1/nodes/n1".parse().unwrap();
        assert_eq!(
            with_dry_run(&uri).unwrap().to_string(),
            "/api/v1/nodes/n1?dryRun=All"
        );
    }

    #[test]
    fn updates_show_what_they_change() {
        let old = json!({"metadata": {"name": "pv", "resourceVersion": "1", "labels": {"a": "1"}},
                         "spec": {"capacity": "1Gi"}, "status": {"phase": "Bound"}});
        let new = json!({"metadata": {"name": "pv", "resourceVersion": "1",
                                      "labels": {"a": "1", "zone": "z1"}},
                         "spec": {"capacity": "1Gi"}});
        assert_eq!(
            merge_patch(&old, &new),
            json!({"metadata": {"labels": {"zone": "z1"}}})
        );
        assert_eq!(
            merge_patch(&json!({"a": 1, "b": 2}), &json!({"a": 1})),
            json!({"b": null})
        );
    }
}
