//! Server-side field validation (the `fieldValidation` query parameter of create, update and patch):
//! the fields of a request object that its API type does not know. `Strict` refuses the request
//! (`strict decoding error: unknown field "spec.foo"`: 400 for a create or update body, 422 naming the
//! patched object for a patch), `Warn` drops them with one `Warning` header each, `Ignore` drops them
//! silently, as the real server does. kubectl sends `Strict` when it
//! validates (its default) and leaves the checking to the server, having read in the OpenAPI documents
//! that the server supports the parameter.
//!
//! Without the parameter the object is stored as sent (a documented difference: the real server
//! defaults to `Warn`).

use serde_json::Value;

use crate::error::{ApiError, FieldError, quote};
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
    /// Parses the parameter of a request whose options are `options` (`CreateOptions`,
    /// `UpdateOptions`, `PatchOptions`); an unknown value is a 422 on those options, as upstream.
    pub(crate) fn parse(value: Option<&str>, options: &str) -> Result<Self, ApiError> {
        match value.unwrap_or("") {
            "" => Ok(FieldValidation::Unset),
            "Ignore" => Ok(FieldValidation::Ignore),
            "Warn" => Ok(FieldValidation::Warn),
            "Strict" => Ok(FieldValidation::Strict),
            other => Err(ApiError::invalid_options(
                options,
                &[FieldError::not_supported(
                    "fieldValidation",
                    other,
                    &["", "Ignore", "Strict", "Warn"],
                )],
            )),
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

/// Where the checked object comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// The body of a create or update.
    Body,
    /// The result of applying a patch.
    Patch,
}

/// The `Strict` refusal of unknown fields.
fn strict_error(def: &ResourceDef, origin: Origin, v: &Value, names: &[String]) -> ApiError {
    let detail = format!("strict decoding error: {}", names.join(", "));
    match origin {
        Origin::Body => ApiError::bad_request(format!(
            "{} in version {} cannot be handled as a {}: {detail}",
            def.kind,
            quote(def.version),
            def.kind
        )),
        Origin::Patch => {
            let object = serde_json::to_string(v).unwrap_or_default();
            ApiError::invalid_named(
                "",
                "",
                "",
                "",
                &[FieldError::invalid_str("patch", &object, detail)],
            )
        }
    }
}

/// Applies the directive to a request object of `def` (with kind and apiVersion): with `Strict`,
/// unknown fields fail the request; with `Warn` and `Ignore` they are removed from `v`. Returns the
/// warnings to send.
pub(crate) fn check(
    def: &ResourceDef,
    directive: FieldValidation,
    origin: Origin,
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
        FieldValidation::Strict => Err(strict_error(def, origin, v, &names)),
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
        let err = check(nodes, FieldValidation::Strict, Origin::Body, &mut node()).unwrap_err();
        assert_eq!(err.code, 400);
        assert_eq!(
            err.message,
            "Node in version \"v1\" cannot be handled as a Node: strict decoding error: unknown field \"metadata.bogus\", unknown field \"spec.taints[0].extra\", unknown field \"foo\""
        );
    }

    #[test]
    fn a_patch_result_is_invalid() {
        let nodes = find("", "v1", "nodes").unwrap();
        let err = check(nodes, FieldValidation::Strict, Origin::Patch, &mut node()).unwrap_err();
        assert_eq!(err.code, 422);
        assert!(
            err.message
                .starts_with(r#" "" is invalid: patch: Invalid value: "{"#),
            "{}",
            err.message
        );
        assert!(err.message.ends_with(r#"strict decoding error: unknown field "metadata.bogus", unknown field "spec.taints[0].extra", unknown field "foo""#));
        let details = err.details.unwrap();
        assert_eq!(details["causes"][0]["field"], "patch");
        assert!(details.get("kind").is_none());
    }

    #[test]
    fn warn_and_ignore_drop_them() {
        let nodes = find("", "v1", "nodes").unwrap();
        let mut v = node();
        let warnings = check(nodes, FieldValidation::Warn, Origin::Body, &mut v).unwrap();
        assert_eq!(warnings.len(), 3);
        assert!(v.get("foo").is_none());
        assert!(v["spec"]["taints"][0].get("extra").is_none());
        assert_eq!(v["status"]["capacity"]["cpu"], "2");
        let mut v = node();
        assert!(
            check(nodes, FieldValidation::Ignore, Origin::Body, &mut v)
                .unwrap()
                .is_empty()
        );
        assert!(v["metadata"].get("bogus").is_none());
        let mut v = node();
        assert!(
            check(nodes, FieldValidation::Unset, Origin::Body, &mut v)
                .unwrap()
                .is_empty()
        );
        assert_eq!(v, node());
        let err = FieldValidation::parse(Some("Loud"), "CreateOptions").unwrap_err();
        assert_eq!(err.code, 422);
        assert_eq!(
            err.message,
            r#"CreateOptions.meta.k8s.io "" is invalid: fieldValidation: Unsupported value: "Loud": supported values: "", "Ignore", "Strict", "Warn""#
        );
    }

    #[test]
    fn a_known_object_passes() {
        let pods = find("", "v1", "pods").unwrap();
        let mut v = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {}},
            "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80}],
                     "resources": {"limits": {"cpu": "1"}}}], "nodeName": "a"}});
        assert!(
            check(pods, FieldValidation::Strict, Origin::Body, &mut v)
                .unwrap()
                .is_empty()
        );
    }
}
