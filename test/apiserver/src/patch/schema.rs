//! The strategic-merge schema: how each list field of a resource is merged, taken from the `patchStrategy` and
//! `patchMergeKey` tags of the Kubernetes API types for the fields that controllers, kubelet and kubectl patch.
//! Every list not named here is atomic (a patch replaces it whole), which is also what the real server does for
//! lists without a strategy, such as `spec.taints` and `status.loadBalancer.ingress`.

/// How a strategic merge patch combines a list field with the stored list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ListStrategy {
    /// The patch list replaces the stored list.
    Atomic,
    /// Elements are objects identified by the named member; patch elements merge into the first stored element
    /// with the same key, and `$patch: delete` / `$patch: replace` directives are honoured.
    MergeByKey(&'static str),
    /// Elements are scalars; the patch list is unioned with the stored list.
    PrimitiveSet,
}

/// One list field: its path of member names from the object root, and its strategy.
type ListRule = (&'static [&'static str], ListStrategy);

/// Lists of `metadata`, shared by every resource.
const METADATA_RULES: &[ListRule] = &[
    (&["metadata", "finalizers"], ListStrategy::PrimitiveSet),
    (
        &["metadata", "ownerReferences"],
        ListStrategy::MergeByKey("uid"),
    ),
    (&["metadata", "managedFields"], ListStrategy::Atomic),
];

const NODE_RULES: &[ListRule] = &[
    (&["spec", "taints"], ListStrategy::Atomic),
    (&["spec", "podCIDRs"], ListStrategy::PrimitiveSet),
    (&["status", "addresses"], ListStrategy::MergeByKey("type")),
    (&["status", "conditions"], ListStrategy::MergeByKey("type")),
];

const SERVICE_RULES: &[ListRule] = &[
    (&["spec", "ports"], ListStrategy::MergeByKey("port")),
    (&["status", "conditions"], ListStrategy::MergeByKey("type")),
    (&["status", "loadBalancer", "ingress"], ListStrategy::Atomic),
];

const POD_RULES: &[ListRule] = &[
    (&["spec", "volumes"], ListStrategy::MergeByKey("name")),
    (
        &["spec", "initContainers"],
        ListStrategy::MergeByKey("name"),
    ),
    (&["spec", "containers"], ListStrategy::MergeByKey("name")),
    (
        &["spec", "ephemeralContainers"],
        ListStrategy::MergeByKey("name"),
    ),
    (
        &["spec", "initContainers", "ports"],
        ListStrategy::MergeByKey("containerPort"),
    ),
    (
        &["spec", "containers", "ports"],
        ListStrategy::MergeByKey("containerPort"),
    ),
    (
        &["spec", "initContainers", "env"],
        ListStrategy::MergeByKey("name"),
    ),
    (
        &["spec", "containers", "env"],
        ListStrategy::MergeByKey("name"),
    ),
    (
        &["spec", "initContainers", "volumeMounts"],
        ListStrategy::MergeByKey("mountPath"),
    ),
    (
        &["spec", "containers", "volumeMounts"],
        ListStrategy::MergeByKey("mountPath"),
    ),
    (
        &["spec", "imagePullSecrets"],
        ListStrategy::MergeByKey("name"),
    ),
    (&["spec", "hostAliases"], ListStrategy::MergeByKey("ip")),
    (
        &["spec", "schedulingGates"],
        ListStrategy::MergeByKey("name"),
    ),
    (
        &["spec", "resourceClaims"],
        ListStrategy::MergeByKey("name"),
    ),
    (&["status", "conditions"], ListStrategy::MergeByKey("type")),
    (&["status", "podIPs"], ListStrategy::MergeByKey("ip")),
    (&["status", "hostIPs"], ListStrategy::MergeByKey("ip")),
];

const NAMESPACE_RULES: &[ListRule] =
    &[(&["status", "conditions"], ListStrategy::MergeByKey("type"))];

/// The list strategies of one resource.
#[derive(Debug, Clone, Copy)]
pub(super) struct Schema {
    rules: &'static [ListRule],
}

impl Schema {
    /// The schema of a resource given by its plural name. Resources without list strategies of their own
    /// (leases, events, persistentvolumes, and any unknown name) only get the metadata rules.
    pub(super) fn for_resource(resource: &str) -> Schema {
        let rules = match resource {
            "nodes" => NODE_RULES,
            "services" => SERVICE_RULES,
            "namespaces" => NAMESPACE_RULES,
            "pods" => POD_RULES,
            _ => &[],
        };
        Schema { rules }
    }

    /// The strategy of the list at `path`.
    pub(super) fn list_strategy(&self, path: &FieldPath<'_>) -> ListStrategy {
        METADATA_RULES
            .iter()
            .chain(self.rules)
            .find(|(segments, _)| path.is(segments))
            .map_or(ListStrategy::Atomic, |(_, strategy)| *strategy)
    }
}

/// A list field of `resource` that a strategic merge patch merges rather than replaces: its path of member
/// names from the object root and its merge key (`None` for a set of scalars). This is what the OpenAPI
/// documents publish as `x-kubernetes-patch-strategy` and `x-kubernetes-patch-merge-key`.
pub(crate) fn merged_lists(
    resource: &str,
) -> impl Iterator<Item = (&'static [&'static str], Option<&'static str>)> {
    METADATA_RULES
        .iter()
        .chain(Schema::for_resource(resource).rules)
        .filter_map(|(path, strategy)| match strategy {
            ListStrategy::Atomic => None,
            ListStrategy::MergeByKey(key) => Some((*path, Some(*key))),
            ListStrategy::PrimitiveSet => Some((*path, None)),
        })
}

/// The member names leading from the object root to a field, as a chain of borrowed frames so that descending
/// one level costs no allocation. Elements of lists do not add a segment.
#[derive(Debug, Clone, Copy)]
pub(super) struct FieldPath<'a> {
    parent: Option<&'a FieldPath<'a>>,
    name: &'a str,
}

impl<'a> FieldPath<'a> {
    /// The path of the object root.
    pub(super) const ROOT: FieldPath<'static> = FieldPath {
        parent: None,
        name: "",
    };

    /// The path of member `name` of the field at `self`.
    pub(super) fn child(&'a self, name: &'a str) -> FieldPath<'a> {
        FieldPath {
            parent: Some(self),
            name,
        }
    }

    /// Whether this path is exactly `segments`.
    fn is(&self, segments: &[&str]) -> bool {
        let mut current = Some(self);
        let mut remaining = segments;
        while let Some(frame) = current {
            match frame.parent {
                None => return remaining.is_empty(),
                Some(parent) => match remaining.split_last() {
                    Some((last, rest)) if *last == frame.name => {
                        remaining = rest;
                        current = Some(parent);
                    }
                    _ => return false,
                },
            }
        }
        remaining.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_follow_the_resource() {
        let root = FieldPath::ROOT;
        let status = root.child("status");
        let addresses = status.child("addresses");
        let metadata = root.child("metadata");
        let finalizers = metadata.child("finalizers");
        let nodes = Schema::for_resource("nodes");
        assert_eq!(
            nodes.list_strategy(&addresses),
            ListStrategy::MergeByKey("type")
        );
        assert_eq!(nodes.list_strategy(&finalizers), ListStrategy::PrimitiveSet);
        assert_eq!(
            Schema::for_resource("services").list_strategy(&addresses),
            ListStrategy::Atomic
        );
        assert_eq!(
            Schema::for_resource("leases").list_strategy(&finalizers),
            ListStrategy::PrimitiveSet
        );
        assert_eq!(
            Schema::for_resource("widgets").list_strategy(&finalizers),
            ListStrategy::PrimitiveSet
        );
        let nested = addresses.child("addresses");
        assert_eq!(nodes.list_strategy(&nested), ListStrategy::Atomic);
        assert_eq!(nodes.list_strategy(&status), ListStrategy::Atomic);
        let dotted = root.child("status.addresses");
        assert_eq!(nodes.list_strategy(&dotted), ListStrategy::Atomic);
    }
}
