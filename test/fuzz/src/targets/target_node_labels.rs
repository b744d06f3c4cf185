//! `target_node_labels`: `k=v,k2=` lists as the AWS provider reads them (the
//! `aws-load-balancer-target-node-labels` and `aws-load-balancer-additional-resource-tags` annotations).
//!
//! Contract: no panic; no empty key; no key or value holds a `,` or a `=` (text after a second `=` is
//! dropped, as upstream drops it); no key starts with blanks (items are trimmed); and the pairs written back
//! as `k=v` items joined by `,` read back to the same map (a value ending in blanks written `k=v=`, so the
//! trim of the item keeps them, as it kept them in the input).

use cloud_provider::annotations::key_value_pairs;

use crate::input;

/// Reads one label list.
pub fn check(data: &[u8]) {
    let value = input::text(data);
    let pairs = key_value_pairs(&value);
    for (key, value) in &pairs {
        assert!(!key.is_empty(), "an empty key accepted");
        assert!(!key.contains([',', '=']), "key {key:?} holds a separator");
        assert!(
            !value.contains([',', '=']),
            "value {value:?} holds a separator"
        );
        assert_eq!(key.trim_start(), key, "key {key:?} starts with blanks");
    }
    let written = pairs
        .iter()
        .map(|(k, v)| match v.ends_with(char::is_whitespace) {
            true => format!("{k}={v}="),
            false => format!("{k}={v}"),
        })
        .collect::<Vec<_>>()
        .join(",");
    assert_eq!(
        key_value_pairs(&written),
        pairs,
        "{written:?} does not round-trip"
    );
}
