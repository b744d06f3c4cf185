//! Fuzz target for the PATCH engine of test-apiserver.
//!
//! Input layout: the first byte selects the patch type (modulo 3) and the resource (divided by 3); the rest is
//! split at the first `0xff` byte (which never occurs in UTF-8 JSON) into the stored document and the patch body.
//! Without a separator, or when the document is not JSON, a realistic Node is the stored document. The target
//! checks that `apply` returns instead of panicking or overflowing the stack, that results respect the nesting
//! limit and serialize, and that errors map to 400 or 422.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

// The engine is compiled from its sources so the fuzz build does not need the whole server and its dependencies.
#[allow(dead_code)]
#[path = "../../src/patch/mod.rs"]
mod patch;

use patch::{MAX_DEPTH, PatchType, apply};

const RESOURCES: [&str; 7] = [
    "nodes",
    "services",
    "leases",
    "events",
    "persistentvolumes",
    "namespaces",
    "widgets",
];

fn default_node() -> Value {
    json!({
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": "node-a",
            "labels": {"topology.kubernetes.io/zone": "zone-1"},
            "finalizers": ["example.com/a", "example.com/b"]
        },
        "spec": {"taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]},
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": "10.0.1.10"},
                {"type": "InternalIP", "address": "10.0.1.11"},
                {"type": "Hostname", "address": "node-a"}
            ],
            "conditions": [{"type": "Ready", "status": "True"}]
        }
    })
}

/// Nesting depth, iteratively.
fn depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 0usize)];
    while let Some((current, level)) = stack.pop() {
        let children: Vec<&Value> = match current {
            Value::Object(members) => members.values().collect(),
            Value::Array(items) => items.iter().collect(),
            _ => continue,
        };
        deepest = deepest.max(level + 1);
        stack.extend(children.into_iter().map(|child| (child, level + 1)));
    }
    deepest
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let kind =
        [PatchType::Json, PatchType::Merge, PatchType::StrategicMerge][usize::from(selector % 3)];
    let resource = RESOURCES[usize::from(selector / 3) % RESOURCES.len()];
    let (document, body) = match rest.iter().position(|byte| *byte == 0xff) {
        Some(at) => (&rest[..at], &rest[at + 1..]),
        None => (&[][..], rest),
    };
    let original: Value = serde_json::from_slice(document).unwrap_or_else(|_| default_node());
    match apply(kind, resource, &original, body) {
        Ok(result) => {
            assert!(
                depth(&result) <= MAX_DEPTH,
                "result nested deeper than the limit"
            );
            assert!(
                serde_json::to_vec(&result).is_ok(),
                "result does not serialize"
            );
        }
        Err(error) => {
            assert!(matches!(error.status_code(), 400 | 422));
            assert!(!error.to_string().is_empty());
        }
    }
});
