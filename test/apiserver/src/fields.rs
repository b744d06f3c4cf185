//! Server-side field validation (the `fieldValidation` query parameter of create, update and patch):
//! the fields of a request object that its API type does not know. `Strict` refuses the request (400,
//! `strict decoding error: unknown field "spec.foo"`), `Warn` drops them with one `Warning` header
//! each, `Ignore` drops them silently, as the real server does. kubectl sends `Strict` when it
//! validates (its default) and leaves the checking to the server, having read in the OpenAPI documents
//! that the server supports the parameter.
//!
//! Without the parameter the object is stored as sent (a documented difference: the real server
//! defaults to `Warn`).

use serde_json::Value;

use crate::error::{ApiError, quote};
use crate::resources::ResourceDef;
use crate::strategy;

/// The `fieldValidation` directive of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FieldValidation {
    /// No parameter: the object is kept as sent.
    Unset,
    Ignore,
    Warn,
    Strict,
}

impl FieldValidation {
    /// Parses the parameter; an unknown value is a 400, as upstream.
    pub(crate) fn parse(value: Option<&str>) -> Result<Self, ApiError> {
        match value.unwrap_or("") {
            "" => Ok(FieldValidation::Unset),
            "Ignore" => Ok(FieldValidation::Ignore),
            "Warn" => Ok(FieldValidation::Warn),
            "Strict" => Ok(FieldValidation::Strict),
            other => Err(ApiError::bad_request(format!(
                "fieldValidation parameter unsupported: {}",
                quote(other)
            ))),
        }
    }
}

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

/// `spec.containers[0].foo`.
fn display(path: &[Step]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Step::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// Collects the paths of `input` that `kept` lacks (null values in `input` are not fields).
fn missing(input: &Value, kept: &Value, path: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    match (input, kept) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, x) in a {
                if x.is_null() {
                    continue;
                }
                path.push(Step::Key(k.clone()));
                match b.get(k) {
                    None => out.push(path.clone()),
                    Some(y) => missing(x, y, path, out),
                }
                path.pop();
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                path.push(Step::Index(i));
                missing(x, y, path, out);
                path.pop();
            }
        }
        _ => {}
    }
}

fn remove(v: &mut Value, path: &[Step]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = v;
    for step in parents {
        let next = match (step, cur) {
            (Step::Key(k), Value::Object(m)) => m.get_mut(k),
            (Step::Index(i), Value::Array(a)) => a.get_mut(*i),
            _ => None,
        };
        let Some(next) = next else { return };
        cur = next;
    }
    if let (Step::Key(k), Value::Object(m)) = (last, cur) {
        m.shift_remove(k);
    }
}

/// Applies the directive to a request object of `def` (with kind and apiVersion): with `Strict`,
/// unknown fields are a 400; with `Warn` and `Ignore` they are removed from `v`. Returns the warnings
/// to send.
pub(crate) fn check(
    def: &ResourceDef,
    directive: FieldValidation,
    v: &mut Value,
) -> Result<Vec<String>, ApiError> {
    if directive == FieldValidation::Unset {
        return Ok(Vec::new());
    }
    let Some(kept) = strategy::round_trip(def, v) else {
        return Ok(Vec::new());
    };
    let mut unknown = Vec::new();
    missing(v, &kept, &mut Vec::new(), &mut unknown);
    if unknown.is_empty() {
        return Ok(Vec::new());
    }
    let names: Vec<String> = unknown
        .iter()
        .map(|p| format!("unknown field {}", quote(&display(p))))
        .collect();
    match directive {
        FieldValidation::Strict => Err(ApiError::bad_request(format!(
            "{} in version {} cannot be handled as a {}: strict decoding error: {}",
            def.kind,
            quote(def.version),
            def.kind,
            names.join(", ")
        ))),
        FieldValidation::Warn | FieldValidation::Ignore => {
            for p in unknown.iter().rev() {
                remove(v, p);
            }
            Ok(if directive == FieldValidation::Warn {
                names
            } else {
                Vec::new()
            })
        }
        FieldValidation::Unset => Ok(Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::find;
    use serde_json::json;

    fn node() -> Value {
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "creationTimestamp": null, "bogus": 1},
            "spec": {"providerID": "fake://n", "taints": [{"key": "k", "effect": "NoSchedule", "extra": true}]},
            "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}], "capacity": {"cpu": "2"}},
            "foo": "bar"})
    }

    #[test]
    fn strict_names_every_unknown_field() {
        let nodes = find("", "v1", "nodes").unwrap();
        let err = check(nodes, FieldValidation::Strict, &mut node()).unwrap_err();
        assert_eq!(err.code, 400);
        assert_eq!(
            err.message,
            "Node in version \"v1\" cannot be handled as a Node: strict decoding error: unknown field \"metadata.bogus\", unknown field \"spec.taints[0].extra\", unknown field \"foo\""
        );
    }

    #[test]
    fn warn_and_ignore_drop_them() {
        let nodes = find("", "v1", "nodes").unwrap();
        let mut v = node();
        let warnings = check(nodes, FieldValidation::Warn, &mut v).unwrap();
        assert_eq!(warnings.len(), 3);
        assert!(v.get("foo").is_none());
        assert!(v["spec"]["taints"][0].get("extra").is_none());
        assert_eq!(v["status"]["capacity"]["cpu"], "2");
        let mut v = node();
        assert!(
            check(nodes, FieldValidation::Ignore, &mut v)
                .unwrap()
                .is_empty()
        );
        assert!(v["metadata"].get("bogus").is_none());
        let mut v = node();
        assert!(
            check(nodes, FieldValidation::Unset, &mut v)
                .unwrap()
                .is_empty()
        );
        assert_eq!(v, node());
        assert_eq!(FieldValidation::parse(Some("Loud")).unwrap_err().code, 400);
    }

    #[test]
    fn a_known_object_passes() {
        let pods = find("", "v1", "pods").unwrap();
        let mut v = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {}},
            "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80}],
                     "resources": {"limits": {"cpu": "1"}}}], "nodeName": "a"}});
        assert!(
            check(pods, FieldValidation::Strict, &mut v)
                .unwrap()
                .is_empty()
        );
    }
}
