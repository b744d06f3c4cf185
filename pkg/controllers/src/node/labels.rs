//! Node label rules: the labels set at initialization (instance type, zone and region in both the GA and the
//! deprecated beta keys, plus the provider's additional labels) and the beta -> GA reconciliation of
//! initialized nodes.

use std::collections::BTreeMap;

use cloud_provider::{
    InstanceMetadata, LABEL_INSTANCE_TYPE, LABEL_INSTANCE_TYPE_BETA, LABEL_REGION,
    LABEL_REGION_BETA, LABEL_ZONE, LABEL_ZONE_BETA,
};

use crate::cached_node::CachedNode;

/// (beta key, GA key) pairs kept in sync on initialized nodes: the GA label copies the beta one.
pub const RECONCILED_LABELS: [(&str, &str); 3] = [
    (LABEL_ZONE_BETA, LABEL_ZONE),
    (LABEL_REGION_BETA, LABEL_REGION),
    (LABEL_INSTANCE_TYPE_BETA, LABEL_INSTANCE_TYPE),
];

/// Whether `key` belongs to a Kubernetes-reserved domain (`kubernetes.io` or `k8s.io`, or a subdomain of
/// either), i.e. matches `(^|\.)(kubernetes|k8s)\.io/`. Providers may not set such labels through
/// additional labels.
pub fn is_reserved_label_key(key: &str) -> bool {
    ["kubernetes.io/", "k8s.io/"].iter().any(|domain| {
        key.match_indices(domain)
            .any(|(at, _)| at == 0 || key.as_bytes()[at - 1] == b'.')
    })
}

/// The labels to set when initializing `node` from `metadata`: only keys whose value differs from the
/// node's current value. Instance type, zone and region overwrite; additional labels never do, and reserved
/// keys among them are ignored.
pub fn initialization_labels(
    node: &CachedNode,
    metadata: &InstanceMetadata,
) -> BTreeMap<String, String> {
    let value_of = |k: &str| node.label(k);
    let mut wanted: BTreeMap<String, String> = BTreeMap::new();
    let pairs = [
        (
            &metadata.instance_type,
            LABEL_INSTANCE_TYPE,
            LABEL_INSTANCE_TYPE_BETA,
        ),
        (&metadata.zone, LABEL_ZONE, LABEL_ZONE_BETA),
        (&metadata.region, LABEL_REGION, LABEL_REGION_BETA),
    ];
    for (value, ga, beta) in pairs {
        if value.is_empty() {
            continue;
        }
        for key in [ga, beta] {
            if value_of(key) != Some(value.as_str()) {
                wanted.insert(key.to_string(), value.clone());
            }
        }
    }
    for (key, value) in &metadata.additional_labels {
        if is_reserved_label_key(key) {
            tracing::debug!(label = %key, "ignoring additional label in a reserved domain");
            continue;
        }
        if value_of(key).is_none() && !wanted.contains_key(key) {
            wanted.insert(key.clone(), value.clone());
        }
    }
    wanted
}

/// The GA labels an initialized node is missing or has out of sync with its beta label.
pub fn reconciled_labels(node: &CachedNode) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (beta, ga) in RECONCILED_LABELS {
        if let Some(value) = node.label(beta)
            && node.label(ga) != Some(value)
        {
            out.insert(ga.to_string(), value.to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Node;

    fn node(labels: &[(&str, &str)]) -> CachedNode {
        let mut n = Node::default();
        n.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        CachedNode::from(n)
    }

    #[test]
    fn reserved_domains() {
        for key in [
            "kubernetes.io/hostname",
            "node.kubernetes.io/foo",
            "k8s.io/x",
            "a.b.k8s.io/x",
            "topology.kubernetes.io/zone",
        ] {
            assert!(is_reserved_label_key(key), "{key}");
        }
        for key in [
            "example.com/kubernetes.io",
            "mykubernetes.io/x",
            "xk8s.io/y",
            "team",
            "example.com/zone",
        ] {
            assert!(!is_reserved_label_key(key), "{key}");
        }
    }

    #[test]
    fn both_label_generations_are_set_and_additional_labels_never_overwrite() {
        let n = node(&[
            (LABEL_ZONE, "old-zone"),
            ("team", "blue"),
            (LABEL_REGION, "r1"),
            (LABEL_REGION_BETA, "r1"),
        ]);
        let md = InstanceMetadata {
            provider_id: "fake://n".into(),
            instance_type: "m5.large".into(),
            node_addresses: vec![],
            zone: "z-a".into(),
            region: "r1".into(),
            additional_labels: [
                ("team".to_string(), "red".to_string()),
                ("example.com/rack".to_string(), "r7".to_string()),
                ("node.kubernetes.io/evil".to_string(), "x".to_string()),
            ]
            .into(),
        };
        let labels = initialization_labels(&n, &md);
        let expected: BTreeMap<String, String> = [
            (LABEL_INSTANCE_TYPE, "m5.large"),
            (LABEL_INSTANCE_TYPE_BETA, "m5.large"),
            (LABEL_ZONE, "z-a"),
            (LABEL_ZONE_BETA, "z-a"),
            ("example.com/rack", "r7"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(labels, expected);
    }

    #[test]
    fn empty_metadata_values_set_nothing() {
        let n = node(&[]);
        let md = InstanceMetadata::default();
        assert!(initialization_labels(&n, &md).is_empty());
    }

    #[test]
    fn reconciliation_copies_beta_to_ga() {
        let n = node(&[
            (LABEL_ZONE_BETA, "z1"),
            (LABEL_REGION_BETA, "r1"),
            (LABEL_REGION, "r-other"),
            (LABEL_INSTANCE_TYPE, "t-only-ga"),
        ]);
        let got = reconciled_labels(&n);
        assert_eq!(got.len(), 2);
        assert_eq!(got[LABEL_ZONE], "z1");
        assert_eq!(got[LABEL_REGION], "r1");
        assert!(reconciled_labels(&node(&[(LABEL_ZONE_BETA, "z"), (LABEL_ZONE, "z")])).is_empty());
        assert!(reconciled_labels(&CachedNode::default()).is_empty());
    }
}
