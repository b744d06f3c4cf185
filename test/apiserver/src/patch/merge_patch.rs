//! RFC 7386 JSON Merge Patch: objects merge member by member, `null` deletes a member, anything else (arrays
//! included) replaces the target.
//!
//! Like the real server, the whole body must be a JSON object or array; any other body, or one that is not JSON
//! at all, is a 400 "Invalid JSON Patch" (sic: the server uses that text for merge patches too).

use serde_json::{Map, Value};

use super::PatchError;

/// The message of the real server for a merge patch body it cannot use.
pub(super) const INVALID_MERGE_PATCH: &str = "Invalid JSON Patch";

/// Decodes `body` as a merge patch and applies it to a copy of `original`.
pub(super) fn apply(original: &Value, body: &[u8]) -> Result<Value, PatchError> {
    let patch: Value = serde_json::from_slice(body)
        .map_err(|_| PatchError::BadRequest(INVALID_MERGE_PATCH.to_owned()))?;
    match &patch {
        Value::Object(_) => {
            let mut document = original.clone();
            merge(&mut document, &patch);
            Ok(document)
        }
        Value::Array(_) => Ok(patch),
        _ => Err(PatchError::BadRequest(INVALID_MERGE_PATCH.to_owned())),
    }
}

/// `target = MergePatch(target, patch)` as RFC 7386 defines it. Recursion follows the patch, whose depth the
/// decoder bounds.
pub(super) fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(members) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(target_members) = target else {
        return;
    };
    for (name, value) in members {
        if value.is_null() {
            target_members.shift_remove(name);
        } else {
            let slot = target_members.entry(name.clone()).or_insert(Value::Null);
            merge(slot, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn run(original: Value, patch: Value) -> Result<Value, PatchError> {
        apply(&original, patch.to_string().as_bytes())
    }

    #[test]
    fn members_merge_and_null_deletes() {
        assert_eq!(
            run(json!({"a": "b"}), json!({"a": "c"})),
            Ok(json!({"a": "c"}))
        );
        assert_eq!(
            run(json!({"a": "b"}), json!({"b": "c"})),
            Ok(json!({"a": "b", "b": "c"}))
        );
        assert_eq!(run(json!({"a": "b"}), json!({"a": null})), Ok(json!({})));
        assert_eq!(
            run(json!({"a": "b", "b": "c"}), json!({"a": null})),
            Ok(json!({"b": "c"}))
        );
        assert_eq!(
            run(
                json!({"a": {"b": "c"}}),
                json!({"a": {"b": "d", "c": null}})
            ),
            Ok(json!({"a": {"b": "d"}}))
        );
        assert_eq!(
            run(json!({}), json!({"a": {"bb": {"ccc": null}}})),
            Ok(json!({"a": {"bb": {}}}))
        );
        assert_eq!(
            run(json!({"e": null}), json!({"a": 1})),
            Ok(json!({"e": null, "a": 1}))
        );
    }

    #[test]
    fn arrays_and_scalars_replace() {
        assert_eq!(
            run(json!({"a": ["b"]}), json!({"a": "c"})),
            Ok(json!({"a": "c"}))
        );
        assert_eq!(
            run(json!({"a": "c"}), json!({"a": ["b"]})),
            Ok(json!({"a": ["b"]}))
        );
        assert_eq!(
            run(json!({"a": [{"b": "c"}]}), json!({"a": [1]})),
            Ok(json!({"a": [1]}))
        );
        assert_eq!(
            run(json!({"a": [1, 2]}), json!({"a": [null, {"x": null}]})),
            Ok(json!({"a": [null, {"x": null}]}))
        );
        assert_eq!(
            run(json!({"a": {"b": 1}}), json!({"a": "x"})),
            Ok(json!({"a": "x"}))
        );
        assert_eq!(
            run(json!({"a": "x"}), json!({"a": {"b": 1, "c": null}})),
            Ok(json!({"a": {"b": 1}}))
        );
        assert_eq!(run(json!({"a": "b"}), json!(["c"])), Ok(json!(["c"])));
    }

    #[test]
    fn new_members_are_appended_and_deletion_keeps_order() {
        let result = run(
            json!({"x": 1, "y": 2, "z": 3}),
            json!({"x": null, "w": 0, "y": 5}),
        )
        .unwrap();
        let keys: Vec<&String> = result.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["y", "z", "w"]);
    }

    #[test]
    fn unusable_bodies_are_bad_requests() {
        let bad = Err(PatchError::BadRequest(INVALID_MERGE_PATCH.to_owned()));
        for body in [
            &b"{\"metadata\":{\"labels\":"[..],
            b"",
            b"null",
            b"\"s\"",
            b"12",
            b"true",
            b"{} {}",
        ] {
            assert_eq!(apply(&json!({"a": 1}), body), bad);
        }
    }
}
