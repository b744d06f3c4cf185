//! The table of served resources: names, kinds, scopes, verbs and the storage each one uses.

/// The storage tables of the server. Two API resources may share one storage (core/v1 and
/// events.k8s.io/v1 events), exactly as the real API server stores both in one etcd prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Storage {
    Nodes,
    Services,
    PersistentVolumes,
    Namespaces,
    Events,
    Leases,
    ServiceAccounts,
    ConfigMaps,
    Pods,
}

impl Storage {
    /// Every storage, in table order.
    pub(crate) const ALL: [Storage; 9] = [
        Storage::Nodes,
        Storage::Services,
        Storage::PersistentVolumes,
        Storage::Namespaces,
        Storage::Events,
        Storage::Leases,
        Storage::ServiceAccounts,
        Storage::ConfigMaps,
        Storage::Pods,
    ];

    /// The namespaced storages: what a namespace deletion empties.
    pub(crate) const NAMESPACED: [Storage; 6] = [
        Storage::Services,
        Storage::Events,
        Storage::Leases,
        Storage::ServiceAccounts,
        Storage::ConfigMaps,
        Storage::Pods,
    ];

    /// Index into per-storage arrays.
    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// What a resource is backed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backing {
    /// A stored resource.
    Stored(Storage),
    /// authentication.k8s.io TokenReview (create only, not stored).
    TokenReview,
    /// authorization.k8s.io SubjectAccessReview (create only, not stored).
    SubjectAccessReview,
}

/// A subresource other than `status`, served by a handler of its own (e.g. `serviceaccounts/token`,
/// whose requests and answers are objects of another group and kind).
#[derive(Debug)]
pub(crate) struct SubresourceDef {
    pub name: &'static str,
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub verbs: &'static [&'static str],
}

impl SubresourceDef {
    /// `group/version` of the subresource's objects.
    pub(crate) fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

/// One served API resource.
#[derive(Debug)]
pub(crate) struct ResourceDef {
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    pub verbs: &'static [&'static str],
    pub short_names: &'static [&'static str],
    pub categories: &'static [&'static str],
    pub storage_version_hash: &'static str,
    pub status_subresource: bool,
    /// Subresources besides `status`.
    pub subresources: &'static [SubresourceDef],
    pub backing: Backing,
}

const ALL_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
const SUBRESOURCE_VERBS: &[&str] = &["get", "patch", "update"];

impl ResourceDef {
    /// `v1` for the core group, `group/version` otherwise.
    pub(crate) fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `NodeList`, `LeaseList`, ...
    pub(crate) fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// `nodes` for the core group, `leases.coordination.k8s.io` otherwise.
    pub(crate) fn qualified_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// The storage, if the resource is stored.
    pub(crate) fn storage(&self) -> Option<Storage> {
        match self.backing {
            Backing::Stored(s) => Some(s),
            _ => None,
        }
    }

    /// The group and Kind that validation errors name. Events of both groups are validated as the
    /// internal core Event, which is why events.k8s.io errors say `Event "x" is invalid`.
    pub(crate) fn validation_group_kind(&self) -> (&'static str, &'static str) {
        if self.backing == Backing::Stored(Storage::Events) {
            ("", "Event")
        } else {
            (self.group, self.kind)
        }
    }

    /// Whether objects of this resource are served in the events.k8s.io/v1 shape.
    pub(crate) fn is_events_v1(&self) -> bool {
        self.group == "events.k8s.io"
    }

    /// Whether the resource allows `verb`.
    pub(crate) fn allows(&self, verb: &str) -> bool {
        self.verbs.contains(&verb)
    }

    /// A subresource other than `status`, by name.
    pub(crate) fn subresource(&self, name: &str) -> Option<&'static SubresourceDef> {
        self.subresources.iter().find(|s| s.name == name)
    }
}

/// Every resource the server serves.
pub(crate) static RESOURCES: &[ResourceDef] = &[
    ResourceDef {
        group: "",
        version: "v1",
        plural: "events",
        kind: "Event",
        namespaced: true,
        verbs: ALL_VERBS,
        short_names: &["ev"],
        categories: &[],
        storage_version_hash: "r2yiGXH7wu8=",
        status_subresource: false,
        subresources: &[],
        backing: Backing::Stored(Storage::Events),
    },
    ResourceDef {
        group: "",
        version: "v1",
        plural: "namespaces",
        kind: "Namespace",
        namespaced: false,
        verbs: &[
            "create", "delete", "get", "list", "patch", "update", "watch",
        ],
        short_names: &["ns"],
        categories: &[],
        storage_version_hash: "Q3oi5N2YM8M=",
        status_subresource: true,
        subresources: &[],
        backing: Backing::Stored(Storage::Namespaces),
    },
    ResourceDef {
        group: "",
        version: "v1",
        plural: "nodes",
        kind: "Node",
        namespaced: false,
        verbs: ALL_VERBS,
        short_names: &["no"],
        categories: &[],
        storage_version_hash: "XwShjMxG9Fs=",
        status_subresource: true,
        subresources: &[],
        backing: Backing::Stored(Storage::Nodes),
    },
    ResourceDef {
        group: "",
        version: "v1",
        plural: "persistentvolumes",
        kind: "PersistentVolume",
        namespaced: false,
        verbs: ALL_VERBS,
        short_names: &["pv"],
        categories: &[],
        storage_version_hash: "HN/zwEC+JgM=",
        status_subresource: true,
        subresources: &[],
        backing: Backing::Stored(Storage::PersistentVolumes),
    },
    ResourceDef {
        group: "",
        version: "v1",
        plural: "pods",
        kind: "Pod",
        namespaced: true,
        verbs: ALL_VERBS,
        short_names: &["po"],
        categories: &["all"],
        storage_version_hash: "xPOwRZ+Yhw8=",
        status_subresource: true,
        subresources: &[],
        backing: Backing::Stored(Storage::Pods),
    },
    ResourceDef {
        group: "",
        version: "v1",
        plural: "services",
        kind: "Service",
        namespaced: true,
        verbs: ALL_VERBS,
        short_names: &["svc"],
        categories: &["all"],
        storage_version_hash: "0/CO1lhkEBI=",
        status_subresource: true,
        subresources: &[],
        backing: Backing::Stored(Storage::Services),
    },
    ResourceDef {
        group: "",
        version: "v1",
        plural: "serviceaccounts",
        kind: "ServiceAccount",
        namespaced: true,
        verbs: ALL_VERBS,
        short_names: &["sa"],
        categories: &[],
        storage_version_hash: "pbx9ZvyFpBE=",
        status_subresource: false,
        subresources: &[SubresourceDef {
            name: "token",
            group: "authentication.k8s.io",
            version: "v1",
            kind: "TokenRequest",
            verbs: &["create"],
        }],
        backing: Backing::Stored(Storage::ServiceAccounts),
    },
    ResourceDef {
        group: "",
        version: "v1",
        plural: "configmaps",
        kind: "ConfigMap",
        namespaced: true,
        verbs: ALL_VERBS,
        short_names: &["cm"],
        categories: &[],
        storage_version_hash: "qFsyl6wFWjQ=",
        status_subresource: false,
        subresources: &[],
        backing: Backing::Stored(Storage::ConfigMaps),
    },
    ResourceDef {
        group: "events.k8s.io",
        version: "v1",
        plural: "events",
        kind: "Event",
        namespaced: true,
        verbs: ALL_VERBS,
        short_names: &["ev"],
        categories: &[],
        storage_version_hash: "r2yiGXH7wu8=",
        status_subresource: false,
        subresources: &[],
        backing: Backing::Stored(Storage::Events),
    },
    ResourceDef {
        group: "coordination.k8s.io",
        version: "v1",
        plural: "leases",
        kind: "Lease",
        namespaced: true,
        verbs: ALL_VERBS,
        short_names: &[],
        categories: &[],
        storage_version_hash: "gqkMMb/YqFM=",
        status_subresource: false,
        subresources: &[],
        backing: Backing::Stored(Storage::Leases),
    },
    ResourceDef {
        group: "authentication.k8s.io",
        version: "v1",
        plural: "tokenreviews",
        kind: "TokenReview",
        namespaced: false,
        verbs: &["create"],
        short_names: &[],
        categories: &[],
        storage_version_hash: "",
        status_subresource: false,
        subresources: &[],
        backing: Backing::TokenReview,
    },
    ResourceDef {
        group: "authorization.k8s.io",
        version: "v1",
        plural: "subjectaccessreviews",
        kind: "SubjectAccessReview",
        namespaced: false,
        verbs: &["create"],
        short_names: &[],
        categories: &[],
        storage_version_hash: "",
        status_subresource: false,
        subresources: &[],
        backing: Backing::SubjectAccessReview,
    },
];

/// The API groups (other than core), in the order `/apis` lists them.
pub(crate) static GROUPS: &[&str] = &[
    "events.k8s.io",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "coordination.k8s.io",
];

/// Looks a resource up by group, version and plural name.
pub(crate) fn find(group: &str, version: &str, plural: &str) -> Option<&'static ResourceDef> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The resources of one group/version, sorted by name as discovery lists them.
pub(crate) fn in_group_version(group: &str, version: &str) -> Vec<&'static ResourceDef> {
    let mut v: Vec<_> = RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .collect();
    v.sort_by_key(|r| r.plural);
    v
}

/// Whether `group`/`version` is served.
pub(crate) fn serves_group_version(group: &str, version: &str) -> bool {
    RESOURCES
        .iter()
        .any(|r| r.group == group && r.version == version)
}

/// Verbs of a status subresource.
pub(crate) fn subresource_verbs() -> &'static [&'static str] {
    SUBRESOURCE_VERBS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_and_names() {
        let lease = find("coordination.k8s.io", "v1", "leases").unwrap();
        assert_eq!(lease.api_version(), "coordination.k8s.io/v1");
        assert_eq!(lease.qualified_resource(), "leases.coordination.k8s.io");
        assert_eq!(lease.list_kind(), "LeaseList");
        assert!(find("", "v1", "pods").is_some_and(|p| p.namespaced));
        assert!(find("", "v1", "deployments").is_none());
        let ev = find("events.k8s.io", "v1", "events").unwrap();
        assert_eq!(ev.validation_group_kind(), ("", "Event"));
    }
}
