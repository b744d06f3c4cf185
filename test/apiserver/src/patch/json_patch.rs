//! RFC 6902 JSON Patch: `add`, `remove`, `replace`, `move`, `copy` and `test`, addressed by RFC 6901 JSON Pointers
//! (`~0` and `~1` escapes, `-` for the end of an array).
//!
//! A body that is not a JSON array of objects is a 400. Every operation that cannot be applied (a failing `test`, a
//! missing path, a bad pointer, an unknown `op`) makes the whole patch fail with a 422 carrying the server's
//! generic message; nothing of the patch is kept. The stored values that `copy` duplicates and that a `move` to a
//! deeper place must walk share one accumulated size budget, and every insertion is bounded by [`MAX_DEPTH`], so a
//! short patch can blow up neither memory, nor nesting, nor time.

use serde_json::Value;

use super::value::{
    depth_within, go_kind, json_equal, node_count_within, parse_error_message, too_deep,
};
use super::{GENERIC_INVALID_MESSAGE, MAX_DEPTH, PatchError};

/// The most operations one patch may carry (the real server's limit).
pub(super) const MAX_OPERATIONS: usize = 10_000;

/// The most stored JSON nodes the operations of one patch may duplicate (`copy`) or walk (a `move` to a deeper
/// place, whose nesting must be checked) together.
pub(super) const WORK_BUDGET: usize = 1 << 20;

/// Why one operation could not be applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OperationError {
    /// The operation is malformed or does not fit the document (422).
    Failed,
    /// The operation would nest the document deeper than [`MAX_DEPTH`] (400).
    TooDeep,
}

impl From<OperationError> for PatchError {
    fn from(error: OperationError) -> PatchError {
        match error {
            OperationError::Failed => PatchError::Invalid(GENERIC_INVALID_MESSAGE.to_owned()),
            OperationError::TooDeep => too_deep(),
        }
    }
}

/// Decodes `body` as a JSON patch and applies it to a copy of `original`.
pub(super) fn apply(original: &Value, body: &[u8]) -> Result<Value, PatchError> {
    let parsed: Value = serde_json::from_slice(body)
        .map_err(|error| PatchError::BadRequest(parse_error_message(&error)))?;
    let operations = match parsed {
        Value::Array(items) => items,
        // The Go decoder reads `null` as an empty patch.
        Value::Null => Vec::new(),
        other => {
            return Err(PatchError::BadRequest(format!(
                "json: cannot unmarshal {} into Go value of type jsonpatch.Patch",
                go_kind(&other)
            )));
        }
    };
    if let Some(bad) = operations
        .iter()
        .find(|op| !matches!(op, Value::Object(_) | Value::Null))
    {
        return Err(PatchError::BadRequest(format!(
            "json: cannot unmarshal {} into Go value of type jsonpatch.Operation",
            go_kind(bad)
        )));
    }
    if operations.len() > MAX_OPERATIONS {
        return Err(PatchError::BadRequest(format!(
            "the JSON patch has {} operations, more than the allowed maximum of {MAX_OPERATIONS}",
            operations.len()
        )));
    }
    let mut document = original.clone();
    let mut spent = 0usize;
    for operation in operations {
        apply_operation(&mut document, operation, &mut spent)?;
    }
    Ok(document)
}

fn apply_operation(
    document: &mut Value,
    operation: Value,
    spent: &mut usize,
) -> Result<(), OperationError> {
    let Value::Object(mut fields) = operation else {
        return Err(OperationError::Failed);
    };
    let kind = match fields.get("op") {
        Some(Value::String(kind)) => kind.clone(),
        _ => return Err(OperationError::Failed),
    };
    let path = parse_pointer(fields.get("path"))?;
    match kind.as_str() {
        "add" => {
            let value = fields.shift_remove("value").ok_or(OperationError::Failed)?;
            add(document, &path, value)
        }
        "remove" => remove(document, &path).map(drop),
        "replace" => {
            let value = fields.shift_remove("value").ok_or(OperationError::Failed)?;
            replace(document, &path, value)
        }
        "move" => {
            let from = parse_pointer(fields.get("from"))?;
            if from == path {
                return get(document, &from).map(drop).ok_or(OperationError::Failed);
            }
            if path.len() > from.len() && path.starts_with(&from) {
                // A value cannot be moved into one of its own children.
                return Err(OperationError::Failed);
            }
            if path.len() > from.len() {
                // Deeper than before: the nesting check walks the value, which counts against the budget.
                let source = get(document, &from).ok_or(OperationError::Failed)?;
                charge(source, spent)?;
                let value = remove(document, &from)?;
                add(document, &path, value)
            } else {
                // No deeper than where it was, so the document stays within the nesting limit.
                let value = remove(document, &from)?;
                insert(document, &path, value)
            }
        }
        "copy" => {
            let from = parse_pointer(fields.get("from"))?;
            let source = get(document, &from).ok_or(OperationError::Failed)?;
            charge(source, spent)?;
            let value = source.clone();
            add(document, &path, value)
        }
        "test" => {
            let expected = fields.get("value").ok_or(OperationError::Failed)?;
            let actual = get(document, &path).ok_or(OperationError::Failed)?;
            if json_equal(actual, expected) {
                Ok(())
            } else {
                Err(OperationError::Failed)
            }
        }
        _ => Err(OperationError::Failed),
    }
}

/// Splits a JSON Pointer into unescaped reference tokens. The empty pointer is the whole document.
fn parse_pointer(raw: Option<&Value>) -> Result<Vec<String>, OperationError> {
    let Some(Value::String(text)) = raw else {
        return Err(OperationError::Failed);
    };
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let rest = text.strip_prefix('/').ok_or(OperationError::Failed)?;
    rest.split('/').map(unescape_token).collect()
}

fn unescape_token(token: &str) -> Result<String, OperationError> {
    if !token.contains('~') {
        return Ok(token.to_owned());
    }
    let mut out = String::with_capacity(token.len());
    let mut chars = token.chars();
    while let Some(c) = chars.next() {
        if c == '~' {
            match chars.next() {
                Some('0') => out.push('~'),
                Some('1') => out.push('/'),
                _ => return Err(OperationError::Failed),
            }
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

/// The array position a token names: decimal digits without leading zeros, below `len` (or equal to it, or `-`,
/// when `allow_end` is set for insertion).
fn array_index(token: &str, len: usize, allow_end: bool) -> Option<usize> {
    if token == "-" {
        return allow_end.then_some(len);
    }
    let well_formed = !token.is_empty()
        && token.bytes().all(|b| b.is_ascii_digit())
        && !(token.len() > 1 && token.starts_with('0'));
    if !well_formed {
        return None;
    }
    let index: usize = token.parse().ok()?;
    (index < len || (allow_end && index == len)).then_some(index)
}

fn get<'a>(document: &'a Value, tokens: &[String]) -> Option<&'a Value> {
    let mut current = document;
    for token in tokens {
        current = match current {
            Value::Object(map) => map.get(token)?,
            Value::Array(items) => items.get(array_index(token, items.len(), false)?)?,
            _ => return None,
        };
    }
    Some(current)
}

fn get_mut<'a>(document: &'a mut Value, tokens: &[String]) -> Option<&'a mut Value> {
    let mut current = document;
    for token in tokens {
        current = match current {
            Value::Object(map) => map.get_mut(token)?,
            Value::Array(items) => {
                let index = array_index(token, items.len(), false)?;
                items.get_mut(index)?
            }
            _ => return None,
        };
    }
    Some(current)
}

/// Refuses to place `value` under `tokens` when the result would be nested deeper than [`MAX_DEPTH`].
fn check_depth(tokens: &[String], value: &Value) -> Result<(), OperationError> {
    let room = MAX_DEPTH
        .checked_sub(tokens.len())
        .ok_or(OperationError::TooDeep)?;
    depth_within(value, room)
        .map(drop)
        .ok_or(OperationError::TooDeep)
}

/// Counts the nodes of `value` against the work budget of the patch.
fn charge(value: &Value, spent: &mut usize) -> Result<(), OperationError> {
    let size = node_count_within(value, WORK_BUDGET.saturating_sub(*spent))
        .ok_or(OperationError::Failed)?;
    *spent += size;
    Ok(())
}

fn add(document: &mut Value, tokens: &[String], value: Value) -> Result<(), OperationError> {
    check_depth(tokens, &value)?;
    insert(document, tokens, value)
}

/// Adds `value` at `tokens` without checking the nesting.
fn insert(document: &mut Value, tokens: &[String], value: Value) -> Result<(), OperationError> {
    let Some((last, parent_tokens)) = tokens.split_last() else {
        *document = value;
        return Ok(());
    };
    match get_mut(document, parent_tokens).ok_or(OperationError::Failed)? {
        Value::Object(map) => {
            map.insert(last.clone(), value);
            Ok(())
        }
        Value::Array(items) => {
            let index = array_index(last, items.len(), true).ok_or(OperationError::Failed)?;
            items.insert(index, value);
            Ok(())
        }
        _ => Err(OperationError::Failed),
    }
}

fn remove(document: &mut Value, tokens: &[String]) -> Result<Value, OperationError> {
    let (last, parent_tokens) = tokens.split_last().ok_or(OperationError::Failed)?;
    match get_mut(document, parent_tokens).ok_or(OperationError::Failed)? {
        Value::Object(map) => map.shift_remove(last).ok_or(OperationError::Failed),
        Value::Array(items) => {
            let index = array_index(last, items.len(), false).ok_or(OperationError::Failed)?;
            Ok(items.remove(index))
        }
        _ => Err(OperationError::Failed),
    }
}

fn replace(document: &mut Value, tokens: &[String], value: Value) -> Result<(), OperationError> {
    check_depth(tokens, &value)?;
    let target = get_mut(document, tokens).ok_or(OperationError::Failed)?;
    *target = value;
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn run(document: Value, patch: Value) -> Result<Value, PatchError> {
        apply(&document, patch.to_string().as_bytes())
    }

    fn invalid() -> Result<Value, PatchError> {
        Err(PatchError::Invalid(GENERIC_INVALID_MESSAGE.to_owned()))
    }

    #[test]
    fn add_to_object_and_array() {
        let doc = json!({"a": {"b": [1, 2]}});
        let patch = json!([
            {"op": "add", "path": "/a/c", "value": "x"},
            {"op": "add", "path": "/a/b/1", "value": 9},
            {"op": "add", "path": "/a/b/-", "value": 3},
            {"op": "add", "path": "/a/b/4", "value": 4}
        ]);
        assert_eq!(
            run(doc, patch),
            Ok(json!({"a": {"b": [1, 9, 2, 3, 4], "c": "x"}}))
        );
    }

    #[test]
    fn add_replaces_an_existing_member_and_the_root() {
        assert_eq!(
            run(
                json!({"a": 1}),
                json!([{"op": "add", "path": "/a", "value": 2}])
            ),
            Ok(json!({"a": 2}))
        );
        assert_eq!(
            run(
                json!({"a": 1}),
                json!([{"op": "add", "path": "", "value": [1]}])
            ),
            Ok(json!([1]))
        );
    }

    #[test]
    fn add_needs_an_existing_parent_and_a_valid_index() {
        assert_eq!(
            run(
                json!({}),
                json!([{"op": "add", "path": "/a/b", "value": 1}])
            ),
            invalid()
        );
        assert_eq!(
            run(
                json!({"a": [1]}),
                json!([{"op": "add", "path": "/a/2", "value": 1}])
            ),
            invalid()
        );
        assert_eq!(
            run(
                json!({"a": [1]}),
                json!([{"op": "add", "path": "/a/01", "value": 1}])
            ),
            invalid()
        );
        assert_eq!(
            run(
                json!({"a": "s"}),
                json!([{"op": "add", "path": "/a/x", "value": 1}])
            ),
            invalid()
        );
        assert_eq!(
            run(
                json!({"a": [1]}),
                json!([{"op": "add", "path": "/a/-1", "value": 1}])
            ),
            invalid()
        );
    }

    #[test]
    fn pointer_escapes() {
        let doc = json!({"a/b": 1, "m~n": 2, "": 3});
        let patch = json!([
            {"op": "replace", "path": "/a~1b", "value": 10},
            {"op": "replace", "path": "/m~0n", "value": 20},
            {"op": "replace", "path": "/", "value": 30}
        ]);
        assert_eq!(
            run(doc.clone(), patch),
            Ok(json!({"a/b": 10, "m~n": 20, "": 30}))
        );
        assert_eq!(
            run(doc.clone(), json!([{"op": "remove", "path": "/m~2n"}])),
            invalid()
        );
        assert_eq!(
            run(doc, json!([{"op": "remove", "path": "a~1b"}])),
            invalid()
        );
    }

    #[test]
    fn remove_and_replace() {
        let doc = json!({"a": [1, 2, 3], "b": {"c": 1, "d": 2}});
        let patch = json!([
            {"op": "remove", "path": "/a/0"},
            {"op": "remove", "path": "/b/c"},
            {"op": "replace", "path": "/a/1", "value": "z"}
        ]);
        assert_eq!(
            run(doc.clone(), patch),
            Ok(json!({"a": [2, "z"], "b": {"d": 2}}))
        );
        assert_eq!(
            run(
                doc.clone(),
                json!([{"op": "replace", "path": "/x", "value": 1}])
            ),
            invalid()
        );
        assert_eq!(
            run(
                doc.clone(),
                json!([{"op": "replace", "path": "/a/-", "value": 1}])
            ),
            invalid()
        );
        assert_eq!(
            run(doc.clone(), json!([{"op": "remove", "path": "/a/3"}])),
            invalid()
        );
        assert_eq!(run(doc, json!([{"op": "remove", "path": ""}])), invalid());
    }

    #[test]
    fn remove_keeps_member_order() {
        let result = run(
            json!({"a": 1, "b": 2, "c": 3}),
            json!([{"op": "remove", "path": "/a"}]),
        )
        .unwrap();
        let keys: Vec<&String> = result.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["b", "c"]);
    }

    #[test]
    fn move_and_copy() {
        let doc = json!({"a": {"x": [1]}, "b": {}});
        let patch = json!([
            {"op": "copy", "from": "/a/x", "path": "/b/y"},
            {"op": "move", "from": "/a/x", "path": "/b/z"},
            {"op": "move", "from": "/b/z", "path": "/b/z"}
        ]);
        assert_eq!(
            run(doc.clone(), patch),
            Ok(json!({"a": {}, "b": {"y": [1], "z": [1]}}))
        );
        assert_eq!(
            run(
                doc.clone(),
                json!([{"op": "move", "from": "/a", "path": "/a/x/0"}])
            ),
            invalid()
        );
        assert_eq!(
            run(
                doc.clone(),
                json!([{"op": "move", "from": "/nope", "path": "/c"}])
            ),
            invalid()
        );
        assert_eq!(
            run(doc, json!([{"op": "copy", "from": "/nope", "path": "/c"}])),
            invalid()
        );
    }

    #[test]
    fn test_operation_uses_json_equality() {
        let doc = json!({"n": 1, "o": {"a": [1, "x"], "b": null}});
        let patch = json!([
            {"op": "test", "path": "/n", "value": 1.0},
            {"op": "test", "path": "/o", "value": {"b": null, "a": [1, "x"]}}
        ]);
        assert_eq!(run(doc.clone(), patch), Ok(doc.clone()));
        assert_eq!(
            run(
                doc.clone(),
                json!([{"op": "test", "path": "/n", "value": "1"}])
            ),
            invalid()
        );
        assert_eq!(
            run(
                doc.clone(),
                json!([{"op": "test", "path": "/missing", "value": null}])
            ),
            invalid()
        );
        assert_eq!(run(doc, json!([{"op": "test", "path": "/n"}])), invalid());
    }

    #[test]
    fn malformed_operations_are_invalid() {
        let doc = json!({"a": 1});
        for patch in [
            json!([{"path": "/a"}]),
            json!([{"op": "frobnicate", "path": "/a"}]),
            json!([{"op": "remove"}]),
            json!([{"op": "remove", "path": 5}]),
            json!([{"op": "add", "path": "/b"}]),
            json!([{"op": "move", "path": "/b"}]),
            json!([null]),
        ] {
            assert_eq!(run(doc.clone(), patch), invalid());
        }
    }

    #[test]
    fn a_failing_operation_discards_the_whole_patch() {
        let doc = json!({"a": 1});
        let patch =
            json!([{"op": "add", "path": "/b", "value": 2}, {"op": "remove", "path": "/c"}]);
        assert_eq!(run(doc, patch), invalid());
    }

    #[test]
    fn bodies_that_are_not_patches_are_bad_requests() {
        let doc = json!({});
        assert_eq!(
            apply(&doc, br#"{"op":"remove","path":"/metadata/labels/env"}"#),
            Err(PatchError::BadRequest(
                "json: cannot unmarshal object into Go value of type jsonpatch.Patch".into()
            ))
        );
        assert_eq!(
            apply(&doc, br#"[{"op":"add"}, "x"]"#),
            Err(PatchError::BadRequest(
                "json: cannot unmarshal string into Go value of type jsonpatch.Operation".into()
            ))
        );
        assert_eq!(
            apply(&doc, br#"[{"op":"#),
            Err(PatchError::BadRequest(
                "unexpected end of JSON input".into()
            ))
        );
        assert!(matches!(
            apply(&doc, b"[] x"),
            Err(PatchError::BadRequest(_))
        ));
        assert_eq!(apply(&doc, b"null"), Ok(doc.clone()));
    }

    #[test]
    fn too_many_operations() {
        let ops: Vec<Value> = (0..=MAX_OPERATIONS)
            .map(|_| json!({"op": "test", "path": "", "value": {}}))
            .collect();
        assert!(matches!(
            run(json!({}), Value::Array(ops)),
            Err(PatchError::BadRequest(_))
        ));
    }

    #[test]
    fn doubling_copies_hit_the_budget() {
        let mut ops = vec![json!({"op": "add", "path": "/a", "value": [0, 1, 2, 3, 4, 5, 6, 7]})];
        for _ in 0..40 {
            ops.push(json!({"op": "copy", "from": "/a", "path": "/a/-"}));
        }
        assert_eq!(run(json!({}), Value::Array(ops)), invalid());
    }

    #[test]
    fn deepening_moves_are_charged_to_the_budget() {
        let big: Vec<Value> = (0..2000).map(|i| json!(i)).collect();
        let doc = json!({"a": big, "b": {}});
        let mut ops = Vec::new();
        for _ in 0..1000 {
            ops.push(json!({"op": "move", "from": "/a", "path": "/b/a"}));
            ops.push(json!({"op": "move", "from": "/b/a", "path": "/a"}));
        }
        assert_eq!(run(doc.clone(), Value::Array(ops.clone())), invalid());
        // Moves that do not go deeper cost nothing.
        let sideways: Vec<Value> = ops
            .iter()
            .map(|_| json!({"op": "move", "from": "/a", "path": "/c"}))
            .zip(
                ops.iter()
                    .map(|_| json!({"op": "move", "from": "/c", "path": "/a"})),
            )
            .flat_map(|(there, back)| [there, back])
            .collect();
        assert_eq!(run(doc.clone(), Value::Array(sideways)), Ok(doc));
    }

    #[test]
    fn copies_cannot_nest_without_bound() {
        let mut doc = json!(0);
        for _ in 0..100 {
            doc = json!({"a": doc});
        }
        let mut ops = Vec::new();
        let mut path = String::new();
        for _ in 0..99 {
            path.push_str("/a");
        }
        for _ in 0..10 {
            ops.push(json!({"op": "copy", "from": "", "path": format!("{path}/b")}));
        }
        assert_eq!(run(doc, Value::Array(ops)), Err(too_deep()));
    }
}
