//! JSON value helpers shared by the three patch formats: nesting depth, equality with JSON number semantics,
//! hashable identities for list elements, and decoding error texts in the wording of the real server.

use serde_json::Value;

use super::{MAX_DEPTH, PatchError};

/// Whether `value` is nested deeper than `limit` levels (every object or array is one level; a scalar is zero).
pub(super) fn depth_exceeds(value: &Value, limit: usize) -> bool {
    depth_within(value, limit).is_none()
}

/// The nesting depth of `value`, or `None` when it is deeper than `limit`. Iterative, so any depth is safe to
/// measure.
pub(super) fn depth_within(value: &Value, limit: usize) -> Option<usize> {
    let mut deepest = 0;
    let mut stack: Vec<(&Value, usize)> = vec![(value, 0)];
    while let Some((current, depth)) = stack.pop() {
        let level = depth + 1;
        match current {
            Value::Object(map) => stack.extend(map.values().map(|child| (child, level))),
            Value::Array(items) => stack.extend(items.iter().map(|child| (child, level))),
            _ => continue,
        }
        if level > limit {
            return None;
        }
        deepest = deepest.max(level);
    }
    Some(deepest)
}

/// The number of JSON nodes in `value`, or `None` once it exceeds `budget`. Iterative.
pub(super) fn node_count_within(value: &Value, budget: usize) -> Option<usize> {
    let mut count = 0usize;
    let mut stack: Vec<&Value> = vec![value];
    while let Some(current) = stack.pop() {
        count += 1;
        if count > budget {
            return None;
        }
        match current {
            Value::Object(map) => stack.extend(map.values()),
            Value::Array(items) => stack.extend(items.iter()),
            _ => {}
        }
    }
    Some(count)
}

/// The error for input nested deeper than [`MAX_DEPTH`].
pub(super) fn too_deep() -> PatchError {
    PatchError::BadRequest(format!(
        "the object or patch is nested deeper than the limit of {MAX_DEPTH} levels"
    ))
}

/// Structural equality with JSON number semantics: `1`, `1.0` and `1e0` are equal (as for the Go decoder, which
/// reads every number as a float64). Object member order is irrelevant. Recursion is bounded by the shallower of
/// the two values.
pub(super) fn json_equal(left: &Value, right: &Value) -> bool {
    match (left, right) {
        (Value::Number(l), Value::Number(r)) => l == r || number_as_f64(l) == number_as_f64(r),
        (Value::Array(l), Value::Array(r)) => {
            l.len() == r.len() && l.iter().zip(r).all(|(a, b)| json_equal(a, b))
        }
        (Value::Object(l), Value::Object(r)) => {
            l.len() == r.len()
                && l.iter()
                    .all(|(key, a)| r.get(key).is_some_and(|b| json_equal(a, b)))
        }
        _ => left == right,
    }
}

fn number_as_f64(number: &serde_json::Number) -> f64 {
    number.as_f64().unwrap_or(f64::NAN)
}

/// A string that is equal for two values exactly when [`json_equal`] holds, used to hash list elements and merge
/// keys. Object members are sorted; numbers are written as float64.
pub(super) fn identity(value: &Value) -> String {
    let mut out = String::new();
    write_identity(value, &mut out);
    out
}

fn write_identity(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push('n'),
        Value::Bool(flag) => out.push(if *flag { 't' } else { 'f' }),
        Value::Number(number) => {
            out.push('#');
            out.push_str(&number_as_f64(number).to_string());
            out.push(';');
        }
        Value::String(text) => {
            out.push('s');
            out.push_str(&text.len().to_string());
            out.push(':');
            out.push_str(text);
        }
        Value::Array(items) => {
            out.push('[');
            for item in items {
                write_identity(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (key, member) in members {
                out.push_str(&key.len().to_string());
                out.push(':');
                out.push_str(key);
                write_identity(member, out);
            }
            out.push('}');
        }
    }
}

/// The name the Go JSON decoder uses for the kind of `value` in "cannot unmarshal" errors.
pub(super) fn go_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The message for a body that is not valid JSON, worded like the Go decoder where the cases coincide.
pub(super) fn parse_error_message(error: &serde_json::Error) -> String {
    match error.classify() {
        serde_json::error::Category::Eof => "unexpected end of JSON input".to_owned(),
        _ => format!("invalid JSON in patch: {error}"),
    }
}
