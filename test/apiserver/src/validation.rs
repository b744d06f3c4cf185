//! Generic validation: DNS names, qualified names, label values, and the object metadata checks
//! every resource shares.

use serde_json::Value;

use crate::error::FieldError;

const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const DNS1035_LABEL_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
const QUALIFIED_NAME_PART_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

fn lower_alnum(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

fn dns_label_chars(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && lower_alnum(b[0])
        && lower_alnum(b[b.len() - 1])
        && b.iter().all(|&c| lower_alnum(c) || c == b'-')
}

/// RFC 1123 label errors (empty when valid).
pub(crate) fn dns1123_label(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > 63 {
        out.push("must be no more than 63 characters".to_string());
    }
    if !dns_label_chars(s) {
        out.push(DNS1123_LABEL_MSG.to_string());
    }
    out
}

/// RFC 1123 subdomain errors (empty when valid).
pub(crate) fn dns1123_subdomain(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > 253 {
        out.push("must be no more than 253 characters".to_string());
    }
    if s.is_empty() || !s.split('.').all(dns_label_chars) {
        out.push(DNS1123_SUBDOMAIN_MSG.to_string());
    }
    out
}

/// DNS-1035 label errors (empty when valid).
pub(crate) fn dns1035_label(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > 63 {
        out.push("must be no more than 63 characters".to_string());
    }
    let ok = dns_label_chars(s) && s.as_bytes()[0].is_ascii_lowercase();
    if !ok {
        out.push(DNS1035_LABEL_MSG.to_string());
    }
    out
}

fn name_part_ok(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|&c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_' || c == b'.')
}

/// Qualified name (`[prefix/]name`) errors, as used for label keys, annotation keys and finalizers.
pub(crate) fn qualified_name(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    if s.matches('/').count() > 1 {
        out.push(
            "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')".to_string(),
        );
        return out;
    }
    if let Some(p) = prefix {
        if p.is_empty() {
            out.push("prefix part must be non-empty".to_string());
        } else {
            for m in dns1123_subdomain(p) {
                out.push(format!("prefix part {m}"));
            }
        }
    }
    if name.is_empty() {
        out.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        out.push("name part must be no more than 63 characters".to_string());
    }
    if !name_part_ok(name) {
        out.push(QUALIFIED_NAME_PART_MSG.to_string());
    }
    out
}

/// Label value errors (empty when valid).
pub(crate) fn label_value(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > 63 {
        out.push("must be no more than 63 characters".to_string());
    }
    if !s.is_empty() && !name_part_ok(s) {
        out.push(LABEL_VALUE_MSG.to_string());
    }
    out
}

/// Which name rule a resource applies to `metadata.name`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NameRule {
    Dns1123Subdomain,
    Dns1123Label,
    Dns1035Label,
}

impl NameRule {
    fn check(self, s: &str) -> Vec<String> {
        match self {
            NameRule::Dns1123Subdomain => dns1123_subdomain(s),
            NameRule::Dns1123Label => dns1123_label(s),
            NameRule::Dns1035Label => dns1035_label(s),
        }
    }
}

const STANDARD_FINALIZERS: &[&str] = &["kubernetes", "orphan", "foregroundDeletion"];

/// Validates `metadata` (name, labels, annotations, finalizers).
pub(crate) fn object_meta(obj: &Value, rule: NameRule) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let meta = &obj["metadata"];
    let name = meta["name"].as_str().unwrap_or("");
    let generate = meta["generateName"].as_str().unwrap_or("");
    if name.is_empty() {
        if generate.is_empty() {
            errs.push(FieldError::required(
                "metadata.name",
                "name or generateName is required",
            ));
        }
    } else {
        for m in rule.check(name) {
            errs.push(FieldError::invalid_str("metadata.name", name, m));
        }
    }
    errs.extend(labels(&meta["labels"], "metadata.labels"));
    if let Some(ann) = meta["annotations"].as_object() {
        let mut total = 0usize;
        for (k, v) in ann {
            for m in qualified_name(&k.to_lowercase()) {
                errs.push(FieldError::invalid_str("metadata.annotations", k, m));
            }
            total += k.len() + v.as_str().map_or(0, str::len);
        }
        if total > 256 * 1024 {
            errs.push(FieldError::too_long("metadata.annotations", 256 * 1024));
        }
    }
    if let Some(fins) = meta["finalizers"].as_array() {
        for (i, f) in fins.iter().enumerate() {
            let f = f.as_str().unwrap_or("");
            let path = format!("metadata.finalizers[{i}]");
            let msgs = qualified_name(f);
            if !msgs.is_empty() {
                for m in msgs {
                    errs.push(FieldError::invalid_str(path.clone(), f, m));
                }
            } else if !f.contains('/') && !STANDARD_FINALIZERS.contains(&f) {
                errs.push(FieldError::invalid_str(
                    path,
                    f,
                    "name is neither a standard finalizer name nor is it fully qualified",
                ));
            }
        }
    }
    errs
}

/// Validates a label map at `path`.
pub(crate) fn labels(labels: &Value, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(map) = labels.as_object() {
        for (k, v) in map {
            for m in qualified_name(k) {
                errs.push(FieldError::invalid_str(path, k, m));
            }
            let v = v.as_str().unwrap_or("");
            for m in label_value(v) {
                errs.push(FieldError::invalid_str(path, v, m));
            }
        }
    }
    errs
}

/// The finalizers of an object, in order.
pub(crate) fn finalizers(obj: &Value) -> Vec<String> {
    obj["metadata"]["finalizers"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|f| f.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The 422 cause for finalizers added to an object that is being deleted, or `None`.
pub(crate) fn new_finalizers_while_deleting(new: &Value, old: &Value) -> Option<FieldError> {
    if old["metadata"]["deletionTimestamp"].is_null() {
        return None;
    }
    let before = finalizers(old);
    let added: Vec<String> = finalizers(new)
        .into_iter()
        .filter(|f| !before.contains(f))
        .collect();
    if added.is_empty() {
        return None;
    }
    let list = added
        .iter()
        .map(|f| crate::error::quote(f))
        .collect::<Vec<_>>()
        .join(", ");
    Some(FieldError::forbidden(
        "metadata.finalizers",
        format!(
            "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{list}}}"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names() {
        assert!(dns1123_subdomain("node-a.example").is_empty());
        assert!(!dns1123_subdomain("Node_A").is_empty());
        assert!(dns1123_label("default").is_empty());
        assert!(!dns1123_label("a.b").is_empty());
        assert!(dns1035_label("lb-svc").is_empty());
        assert!(!dns1035_label("1abc").is_empty());
        assert!(!dns1035_label("Bad_Svc").is_empty());
    }

    #[test]
    fn qualified_names_and_values() {
        assert!(qualified_name("topology.kubernetes.io/zone").is_empty());
        assert!(qualified_name("env").is_empty());
        assert_eq!(
            qualified_name(""),
            vec![
                "name part must be non-empty".to_string(),
                QUALIFIED_NAME_PART_MSG.to_string()
            ]
        );
        assert!(!qualified_name("a/b/c").is_empty());
        assert!(label_value("").is_empty());
        assert!(label_value("my_value").is_empty());
        assert_eq!(label_value("has spaces"), vec![LABEL_VALUE_MSG.to_string()]);
    }

    #[test]
    fn meta_checks() {
        let ok = json!({"metadata":{"name":"n","labels":{"a":"b"},"finalizers":["example.com/x","kubernetes"]}});
        assert!(object_meta(&ok, NameRule::Dns1123Subdomain).is_empty());
        let missing = json!({"metadata":{}});
        assert_eq!(
            object_meta(&missing, NameRule::Dns1123Subdomain)[0].full(),
            "metadata.name: Required value: name or generateName is required"
        );
        let bad_fin = json!({"metadata":{"name":"n","finalizers":["custom"]}});
        assert_eq!(object_meta(&bad_fin, NameRule::Dns1123Subdomain).len(), 1);
    }

    #[test]
    fn finalizer_while_deleting() {
        let old = json!({"metadata":{"deletionTimestamp":"2026-01-01T00:00:00Z","finalizers":["example.com/protect"]}});
        let new = json!({"metadata":{"finalizers":["example.com/protect","example.com/another"]}});
        let e = new_finalizers_while_deleting(&new, &old).unwrap();
        assert_eq!(
            e.message(),
            "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"example.com/another\"}"
        );
        assert!(new_finalizers_while_deleting(&old, &old).is_none());
    }
}
