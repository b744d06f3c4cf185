//! Events: one storage, two views. Objects are stored in the core/v1 shape; events.k8s.io/v1
//! requests and responses are converted, and each view has its own validation rules.

use serde_json::{Value, json};

use crate::error::FieldError;
use crate::object;
use crate::validation;

/// (events.k8s.io/v1 name, core/v1 name) of the renamed fields.
const RENAMES: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

const CORE_ORDER: &[&str] = &[
    "kind",
    "apiVersion",
    "metadata",
    "involvedObject",
    "reason",
    "message",
    "source",
    "firstTimestamp",
    "lastTimestamp",
    "count",
    "type",
    "eventTime",
    "series",
    "action",
    "related",
    "reportingComponent",
    "reportingInstance",
];

const V1_ORDER: &[&str] = &[
    "kind",
    "apiVersion",
    "metadata",
    "eventTime",
    "series",
    "reportingController",
    "reportingInstance",
    "action",
    "reason",
    "regarding",
    "related",
    "note",
    "type",
    "deprecatedSource",
    "deprecatedFirstTimestamp",
    "deprecatedLastTimestamp",
    "deprecatedCount",
];

fn rename(v: &mut Value, from_v1: bool) {
    let Value::Object(m) = v else { return };
    for (v1, core) in RENAMES {
        let (from, to) = if from_v1 { (v1, core) } else { (core, v1) };
        if let Some(x) = m.shift_remove(*from) {
            m.insert((*to).to_string(), x);
        }
    }
}

/// Converts an events.k8s.io/v1 object to the stored core/v1 shape (type meta removed).
pub(crate) fn v1_to_core(mut v: Value) -> Value {
    object::strip_type_meta(&mut v);
    rename(&mut v, true);
    v
}

/// Converts a stored core/v1 item to the events.k8s.io/v1 item shape (no type meta).
pub(crate) fn core_to_v1(mut v: Value) -> Value {
    object::strip_type_meta(&mut v);
    rename(&mut v, false);
    if let Value::Object(m) = &mut v {
        m.entry("eventTime").or_insert(Value::Null);
        m.entry("deprecatedSource").or_insert_with(|| json!({}));
        m.entry("deprecatedFirstTimestamp").or_insert(Value::Null);
        m.entry("deprecatedLastTimestamp").or_insert(Value::Null);
        object::order_map(m, V1_ORDER);
    }
    v
}

/// Fills the fields a core/v1 Event always serialises and orders the keys.
pub(crate) fn normalize_core(v: &mut Value) {
    if let Value::Object(m) = v {
        m.entry("involvedObject").or_insert_with(|| json!({}));
        m.entry("source").or_insert_with(|| json!({}));
        m.entry("firstTimestamp").or_insert(Value::Null);
        m.entry("lastTimestamp").or_insert(Value::Null);
        m.entry("eventTime").or_insert(Value::Null);
        m.entry("reportingComponent").or_insert_with(|| json!(""));
        m.entry("reportingInstance").or_insert_with(|| json!(""));
        object::order_map(m, CORE_ORDER);
    }
}

/// Field selector labels of core/v1 events (the stored shape).
pub(crate) const CORE_FIELDS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
];

/// Field selector labels of events.k8s.io/v1 events.
pub(crate) const V1_FIELDS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "regarding.kind",
    "regarding.namespace",
    "regarding.name",
    "regarding.uid",
    "regarding.apiVersion",
    "regarding.resourceVersion",
    "regarding.fieldPath",
    "reason",
    "reportingController",
    "type",
];

/// Maps an events.k8s.io/v1 field label to the stored core name.
pub(crate) fn v1_field_to_core(field: &str) -> String {
    if let Some(rest) = field.strip_prefix("regarding.") {
        return format!("involvedObject.{rest}");
    }
    if field == "reportingController" {
        return "reportingComponent".to_string();
    }
    field.to_string()
}

/// The selectable fields of a stored (core shape) event.
pub(crate) fn selectable_fields(v: &Value) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let s = |path: &[&str]| object::str_at(v, path).unwrap_or("").to_string();
    for (label, path) in [
        ("involvedObject.kind", &["involvedObject", "kind"][..]),
        (
            "involvedObject.namespace",
            &["involvedObject", "namespace"][..],
        ),
        ("involvedObject.name", &["involvedObject", "name"][..]),
        ("involvedObject.uid", &["involvedObject", "uid"][..]),
        (
            "involvedObject.apiVersion",
            &["involvedObject", "apiVersion"][..],
        ),
        (
            "involvedObject.resourceVersion",
            &["involvedObject", "resourceVersion"][..],
        ),
        (
            "involvedObject.fieldPath",
            &["involvedObject", "fieldPath"][..],
        ),
        ("reason", &["reason"][..]),
        ("reportingComponent", &["reportingComponent"][..]),
        ("source", &["source", "component"][..]),
        ("type", &["type"][..]),
    ] {
        out.push((label, s(path)));
    }
    out
}

fn has_time(v: &Value, key: &str) -> bool {
    v.get(key)
        .and_then(Value::as_str)
        .is_some_and(|s| !s.is_empty())
}

/// The legacy checks every event create passes, whatever the group (namespace agreement for
/// events without an eventTime; required reporting fields for events with one).
fn legacy(v: &Value, namespace: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let involved_ns = object::str_at(v, &["involvedObject", "namespace"]).unwrap_or("");
    let mismatch = || {
        FieldError::invalid_str(
            "involvedObject.namespace",
            involved_ns,
            "does not match event.namespace",
        )
    };
    if !has_time(v, "eventTime") {
        if involved_ns.is_empty() {
            if !namespace.is_empty() && namespace != "default" {
                errs.push(mismatch());
            }
        } else if namespace != involved_ns {
            errs.push(mismatch());
        }
    } else {
        if involved_ns.is_empty() && namespace != "default" && namespace != "kube-system" {
            errs.push(mismatch());
        }
        let controller = v["reportingComponent"].as_str().unwrap_or("");
        if controller.is_empty() {
            errs.push(FieldError::required("reportingController", ""));
        }
        for m in validation::qualified_name(controller) {
            errs.push(FieldError::invalid_str(
                "reportingController",
                controller,
                m,
            ));
        }
        for (field, key, limit) in [
            ("reportingInstance", "reportingInstance", 128usize),
            ("action", "action", 128),
            ("reason", "reason", 128),
        ] {
            let val = v[key].as_str().unwrap_or("");
            if val.is_empty() {
                errs.push(FieldError::required(field, ""));
            }
            if val.len() > limit {
                errs.push(FieldError::too_long(field, limit));
            }
        }
        if v["message"].as_str().map_or(0, str::len) > 1024 {
            errs.push(FieldError::too_long("note", 1024));
        }
    }
    errs
}

/// Validation of an event created through core/v1 (legacy rules only).
pub(crate) fn validate_core_create(v: &Value, namespace: &str) -> Vec<FieldError> {
    let mut errs = validation::object_meta(v, validation::NameRule::Dns1123Subdomain);
    errs.extend(legacy(v, namespace));
    errs
}

/// Validation of an event created through events.k8s.io/v1 (legacy plus the strict rules), on the
/// stored shape. The strict part reports `eventTime` and `type` the way the real server does.
pub(crate) fn validate_v1_create(v: &Value, namespace: &str) -> Vec<FieldError> {
    let mut errs = legacy(v, namespace);
    errs.extend(validation::object_meta(
        v,
        validation::NameRule::Dns1123Subdomain,
    ));
    if let Some(series) = v.get("series").filter(|s| !s.is_null()) {
        if series["count"].as_i64().unwrap_or(0) < 2 {
            errs.push(FieldError::invalid(
                "series.count",
                series["count"].to_string(),
                "should be at least 2",
            ));
        }
        if !has_time(series, "lastObservedTime") {
            errs.push(FieldError::required("series.lastObservedTime", ""));
        }
    }
    if !has_time(v, "eventTime") {
        errs.push(FieldError::required("eventTime", ""));
    }
    let ty = v["type"].as_str().unwrap_or("");
    if ty != "Normal" && ty != "Warning" {
        errs.push(FieldError::invalid(
            "type",
            "\"\"",
            format!("has invalid value: {ty}"),
        ));
    }
    for (field, key) in [
        ("deprecatedFirstTimestamp", "firstTimestamp"),
        ("deprecatedLastTimestamp", "lastTimestamp"),
    ] {
        if has_time(v, key) {
            errs.push(FieldError::invalid(field, "\"\"", "needs to be unset"));
        }
    }
    if v["count"].as_i64().unwrap_or(0) != 0 {
        errs.push(FieldError::invalid(
            "deprecatedCount",
            "\"\"",
            "needs to be unset",
        ));
    }
    errs
}

/// MicroTime fields of an event body in the view it was sent in.
pub(crate) fn micro_time_fields(v: &Value) -> Vec<&str> {
    let mut out = Vec::new();
    if let Some(s) = v.get("eventTime").and_then(Value::as_str) {
        out.push(s);
    }
    if let Some(s) = v
        .get("series")
        .and_then(|s| s.get("lastObservedTime"))
        .and_then(Value::as_str)
    {
        out.push(s);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_between_views() {
        let v1 = json!({"apiVersion":"events.k8s.io/v1","kind":"Event","metadata":{"name":"e"},
            "eventTime":"2026-01-01T00:00:00.000000Z","type":"Normal","reason":"Synced","action":"InitializeNode",
            "note":"n","reportingController":"ccm","reportingInstance":"ccm-1","regarding":{"kind":"Node","name":"a"}});
        let mut core = v1_to_core(v1);
        normalize_core(&mut core);
        assert_eq!(core["involvedObject"]["name"], "a");
        assert_eq!(core["message"], "n");
        assert_eq!(core["reportingComponent"], "ccm");
        assert_eq!(core["source"], json!({}));
        assert!(core["firstTimestamp"].is_null());
        let back = core_to_v1(core);
        assert_eq!(back["regarding"]["name"], "a");
        assert_eq!(back["deprecatedSource"], json!({}));
        let keys: Vec<&String> = back.as_object().unwrap().keys().collect();
        assert_eq!(keys[0], "metadata");
        assert_eq!(keys[1], "eventTime");
    }

    #[test]
    fn staged_v1_validation() {
        let only_name = v1_to_core(json!({"metadata":{"name":"node-a.evt1"}}));
        let errs = validate_v1_create(&only_name, "default");
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["eventTime", "type"]);
        assert_eq!(
            errs[1].message(),
            "Invalid value: \"\": has invalid value: "
        );

        let with_time = v1_to_core(
            json!({"metadata":{"name":"node-a.evt1"},"eventTime":"2026-01-01T00:00:00.000000Z"}),
        );
        let fields: Vec<String> = validate_v1_create(&with_time, "default")
            .iter()
            .map(|e| e.field.clone())
            .collect();
        assert_eq!(
            fields,
            [
                "reportingController",
                "reportingController",
                "reportingController",
                "reportingInstance",
                "action",
                "reason",
                "type"
            ]
        );
    }

    #[test]
    fn core_namespace_rule() {
        let ev = json!({"metadata":{"name":"x"},"involvedObject":{"kind":"Node","name":"node-a"}});
        assert_eq!(validate_core_create(&ev, "kube-system").len(), 1);
        assert!(validate_core_create(&ev, "default").is_empty());
        let v1 = v1_to_core(
            json!({"metadata":{"name":"x"},"eventTime":"2026-01-01T00:00:00.000000Z","type":"Normal",
            "reason":"Synced","action":"Sync","reportingController":"ccm","reportingInstance":"i-1","regarding":{"kind":"Node","name":"node-a"}}),
        );
        assert!(validate_v1_create(&v1, "kube-system").is_empty());
    }
}
