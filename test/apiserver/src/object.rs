//! Working with objects held as JSON: metadata access, key ordering, Go-like `omitempty` pruning,
//! timestamps, generated names and strict MicroTime checks.

use serde_json::{Map, Value};

/// The metadata keys in the order Go's `ObjectMeta` serialises them.
const META_ORDER: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// The current time as an RFC 3339 timestamp with second precision (`metav1.Time`).
pub(crate) fn now_rfc3339() -> String {
    let now = jiff::Timestamp::now();
    match jiff::Timestamp::from_second(now.as_second()) {
        Ok(t) => t.to_string(),
        Err(_) => now.to_string(),
    }
}

/// A string field at a path of object keys.
pub(crate) fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    let mut cur = v;
    for p in path {
        cur = cur.get(p)?;
    }
    cur.as_str()
}

/// `metadata.name` or "".
pub(crate) fn name(v: &Value) -> &str {
    str_at(v, &["metadata", "name"]).unwrap_or("")
}

/// The metadata map, created when missing (or replaced when not an object).
pub(crate) fn meta_mut(v: &mut Value) -> &mut Map<String, Value> {
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    let obj = v.as_object_mut().expect("value was just made an object");
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    meta.as_object_mut()
        .expect("metadata was just made an object")
}

/// Sets `metadata.<key>`.
pub(crate) fn set_meta(v: &mut Value, key: &str, value: Value) {
    meta_mut(v).insert(key.to_string(), value);
}

/// Removes `metadata.<key>`.
pub(crate) fn remove_meta(v: &mut Value, key: &str) {
    meta_mut(v).remove(key);
}

/// Removes null values and empty arrays everywhere, and empty label/annotation maps, the way Go's
/// `omitempty` drops them when the object is stored and read back.
pub(crate) fn prune(v: &mut Value) {
    fn walk(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.retain(|_, x| !x.is_null() && !matches!(x, Value::Array(a) if a.is_empty()));
                for x in m.values_mut() {
                    walk(x);
                }
                m.retain(|_, x| !matches!(x, Value::Array(a) if a.is_empty()));
            }
            Value::Array(a) => a.iter_mut().for_each(walk),
            _ => {}
        }
    }
    walk(v);
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for key in ["labels", "annotations"] {
            if meta
                .get(key)
                .and_then(Value::as_object)
                .is_some_and(Map::is_empty)
            {
                meta.remove(key);
            }
        }
    }
}

/// Puts `metadata` keys in Go's order and the top level in `kind, apiVersion, metadata, <rest>` order.
pub(crate) fn order_keys(v: &mut Value) {
    let Value::Object(obj) = v else { return };
    if let Some(Value::Object(meta)) = obj.get_mut("metadata") {
        let mut old = std::mem::take(meta);
        for k in META_ORDER {
            if let Some(x) = old.shift_remove(*k) {
                meta.insert((*k).to_string(), x);
            }
        }
        meta.append(&mut old);
    }
    let mut old = std::mem::take(obj);
    for k in ["kind", "apiVersion", "metadata"] {
        if let Some(x) = old.shift_remove(k) {
            obj.insert(k.to_string(), x);
        }
    }
    obj.append(&mut old);
}

/// Orders `obj`'s keys: first those named in `order` (when present), then the rest as they were.
pub(crate) fn order_map(obj: &mut Map<String, Value>, order: &[&str]) {
    let mut old = std::mem::take(obj);
    for k in order {
        if let Some(x) = old.shift_remove(*k) {
            obj.insert((*k).to_string(), x);
        }
    }
    obj.append(&mut old);
}

/// Removes `kind` and `apiVersion` (the stored item form carries neither).
pub(crate) fn strip_type_meta(v: &mut Value) {
    if let Value::Object(m) = v {
        m.shift_remove("kind");
        m.shift_remove("apiVersion");
    }
}

/// Adds `kind` and `apiVersion` in front of an item.
pub(crate) fn with_type_meta(mut item: Value, kind: &str, api_version: &str) -> Value {
    if let Value::Object(m) = &mut item {
        let mut out = Map::with_capacity(m.len() + 2);
        out.insert("kind".into(), Value::String(kind.to_string()));
        out.insert("apiVersion".into(), Value::String(api_version.to_string()));
        for (k, v) in std::mem::take(m) {
            if k != "kind" && k != "apiVersion" {
                out.insert(k, v);
            }
        }
        return Value::Object(out);
    }
    item
}

/// Prefixes serialised item bytes (`{"metadata":...}`) with `kind` and `apiVersion`.
pub(crate) fn full_bytes(item: &[u8], kind: &str, api_version: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(item.len() + kind.len() + api_version.len() + 32);
    out.extend_from_slice(b"{\"kind\":");
    out.extend_from_slice(crate::error::quote(kind).as_bytes());
    out.extend_from_slice(b",\"apiVersion\":");
    out.extend_from_slice(crate::error::quote(api_version).as_bytes());
    if item.len() > 2 {
        out.push(b',');
        out.extend_from_slice(&item[1..]);
    } else {
        out.push(b'}');
    }
    out
}

const NAME_CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// A name built from `generateName` plus five random characters, like the real server.
pub(crate) fn generate_name(prefix: &str) -> String {
    let prefix = if prefix.len() > 58 {
        &prefix[..58]
    } else {
        prefix
    };
    let bytes = uuid::Uuid::new_v4().into_bytes();
    let suffix: String = bytes
        .iter()
        .take(5)
        .map(|b| NAME_CHARS[usize::from(*b) % NAME_CHARS.len()] as char)
        .collect();
    format!("{prefix}{suffix}")
}

/// Checks a `metav1.MicroTime` value: exactly six fractional digits. Returns the Go parse error
/// text when the value is a string in another format.
pub(crate) fn check_micro_time(value: &str) -> Result<(), String> {
    let b = value.as_bytes();
    let ok_date = b.len() >= 19
        && b[..19].iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            _ => c.is_ascii_digit(),
        });
    let rest = if b.len() >= 19 { &value[19..] } else { "" };
    let rest_ok = rest.len() >= 8
        && rest.as_bytes()[0] == b'.'
        && rest.as_bytes()[1..7].iter().all(u8::is_ascii_digit)
        && (rest[7..] == *"Z" || is_offset(&rest[7..]));
    if ok_date && rest_ok {
        return Ok(());
    }
    let cannot = if ok_date {
        rest.to_string()
    } else {
        value.to_string()
    };
    let layout = if ok_date {
        ".000000"
    } else {
        "2006-01-02T15:04:05.000000Z07:00"
    };
    Err(format!(
        "parsing time {} as \"2006-01-02T15:04:05.000000Z07:00\": cannot parse {} as {}",
        crate::error::quote(value),
        crate::error::quote(&cannot),
        crate::error::quote(layout)
    ))
}

fn is_offset(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 6
        && (b[0] == b'+' || b[0] == b'-')
        && b[1].is_ascii_digit()
        && b[2].is_ascii_digit()
        && b[3] == b':'
        && b[4].is_ascii_digit()
        && b[5].is_ascii_digit()
}

/// Parses a decimal resource version ("" and "0" are handled by callers).
pub(crate) fn parse_rv(s: &str) -> Option<u64> {
    s.parse::<u64>().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn prune_drops_nulls_and_empty_lists() {
        let mut v = json!({"metadata":{"name":"a","labels":{},"finalizers":[]},"spec":{"taints":[],"x":null,"keep":{}}});
        prune(&mut v);
        assert_eq!(v, json!({"metadata":{"name":"a"},"spec":{"keep":{}}}));
    }

    #[test]
    fn ordering() {
        let mut v = json!({"spec":{},"metadata":{"labels":{},"resourceVersion":"1","name":"a","uid":"u"},"apiVersion":"v1","kind":"Node"});
        order_keys(&mut v);
        assert_eq!(
            serde_json::to_string(&v).unwrap(),
            r#"{"kind":"Node","apiVersion":"v1","metadata":{"name":"a","uid":"u","resourceVersion":"1","labels":{}},"spec":{}}"#
        );
    }

    #[test]
    fn full_bytes_prefix() {
        let b = full_bytes(br#"{"metadata":{"name":"a"}}"#, "Node", "v1");
        assert_eq!(
            std::str::from_utf8(&b).unwrap(),
            r#"{"kind":"Node","apiVersion":"v1","metadata":{"name":"a"}}"#
        );
        assert_eq!(
            full_bytes(b"{}", "Node", "v1"),
            br#"{"kind":"Node","apiVersion":"v1"}"#.to_vec()
        );
    }

    #[test]
    fn micro_time() {
        assert!(check_micro_time("2026-01-01T00:00:00.000000Z").is_ok());
        assert!(check_micro_time("2026-01-01T00:00:00.000000+02:00").is_ok());
        assert_eq!(
            check_micro_time("2026-01-01T00:00:00Z").unwrap_err(),
            r#"parsing time "2026-01-01T00:00:00Z" as "2006-01-02T15:04:05.000000Z07:00": cannot parse "Z" as ".000000""#
        );
        assert_eq!(
            check_micro_time("2026-01-01T00:00:00.123Z").unwrap_err(),
            r#"parsing time "2026-01-01T00:00:00.123Z" as "2006-01-02T15:04:05.000000Z07:00": cannot parse ".123Z" as ".000000""#
        );
    }

    #[test]
    fn generated_names() {
        let n = generate_name("node-");
        assert_eq!(n.len(), 10);
        assert!(n.starts_with("node-"));
    }
}
