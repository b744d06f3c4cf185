//! Cluster identity: which AWS resources belong to this cluster, and the tags put on resources it creates.
//!
//! A resource is the cluster's ("ours") when it carries `kubernetes.io/cluster/<id>` (any value) or the
//! legacy `KubernetesCluster=<id>`; it is "owned" (created for the cluster, deleted with it) when the value of
//! `kubernetes.io/cluster/<id>` is `owned` or it carries the legacy tag, as upstream decides. Without a
//! cluster ID (only possible with `--allow-untagged-cloud`) every resource counts as ours, none as owned,
//! and nothing gets a cluster tag.

/// Prefix of the cluster tag key, followed by the cluster ID.
pub const TAG_CLUSTER_PREFIX: &str = "kubernetes.io/cluster/";
/// Legacy cluster tag key; its value is the cluster ID.
pub const TAG_LEGACY_CLUSTER: &str = "KubernetesCluster";
/// Cluster tag value of resources created for (and deleted with) the cluster.
pub const TAG_VALUE_OWNED: &str = "owned";
/// Tag naming the Service (`<namespace>/<name>`) a load-balancer resource belongs to.
pub const TAG_SERVICE_NAME: &str = "kubernetes.io/service-name";
/// Subnet role tag preferred for internet-facing load balancers.
pub const TAG_ROLE_ELB: &str = "kubernetes.io/role/elb";
/// Subnet role tag preferred for internal load balancers.
pub const TAG_ROLE_INTERNAL_ELB: &str = "kubernetes.io/role/internal-elb";

/// The cluster's identity and the tag checks built on it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterTagging {
    cluster_id: Option<String>,
    legacy_cluster_id: Option<String>,
}

impl ClusterTagging {
    /// Tagging for `cluster_id` (`kubernetes.io/cluster/<id>`) and/or `legacy_cluster_id`
    /// (`KubernetesCluster=<id>`). With only a legacy ID, that ID is also the cluster ID.
    pub fn new(cluster_id: Option<String>, legacy_cluster_id: Option<String>) -> Self {
        let cluster_id = cluster_id.or_else(|| legacy_cluster_id.clone());
        ClusterTagging {
            cluster_id,
            legacy_cluster_id,
        }
    }

    /// Finds the cluster identity in an instance's tags: `kubernetes.io/cluster/<id>` and/or
    /// `KubernetesCluster`. `None` when neither is present.
    pub fn from_tags<'a>(tags: impl IntoIterator<Item = (&'a str, &'a str)>) -> Option<Self> {
        let mut id = None;
        let mut legacy = None;
        for (key, value) in tags {
            if let Some(cluster) = key.strip_prefix(TAG_CLUSTER_PREFIX) {
                if !cluster.is_empty() && id.is_none() {
                    id = Some(cluster.to_string());
                }
            } else if key == TAG_LEGACY_CLUSTER && !value.is_empty() {
                legacy = Some(value.to_string());
            }
        }
        (id.is_some() || legacy.is_some()).then(|| ClusterTagging::new(id, legacy))
    }

    /// The cluster ID, if known.
    pub fn cluster_id(&self) -> Option<&str> {
        self.cluster_id.as_deref()
    }

    /// The key of the cluster tag, `kubernetes.io/cluster/<id>`.
    pub fn cluster_tag_key(&self) -> Option<String> {
        self.cluster_id
            .as_deref()
            .map(|id| format!("{TAG_CLUSTER_PREFIX}{id}"))
    }

    /// Whether a resource with these tags belongs to the cluster (always true without a cluster ID).
    pub fn is_ours<'a>(&self, tags: impl IntoIterator<Item = (&'a str, &'a str)>) -> bool {
        let Some(id) = self.cluster_id.as_deref() else {
            return true;
        };
        tags.into_iter().any(|(key, value)| {
            key.strip_prefix(TAG_CLUSTER_PREFIX) == Some(id)
                || (key == TAG_LEGACY_CLUSTER
                    && Some(value) == self.legacy_cluster_id.as_deref().or(Some(id)))
        })
    }

    /// The value of the legacy `KubernetesCluster` tag that marks the cluster's resources: the legacy ID,
    /// else the cluster ID.
    pub fn legacy_tag_value(&self) -> Option<&str> {
        self.legacy_cluster_id
            .as_deref()
            .or(self.cluster_id.as_deref())
    }

    /// Whether a resource with these tags was created for the cluster, as upstream's `hasClusterTagOwned`
    /// decides: `kubernetes.io/cluster/<id>=owned`, or the legacy `KubernetesCluster=<id>` (legacy resources
    /// were always the cluster's own). Never without a cluster ID: nothing can be proven owned then.
    pub fn is_owned<'a>(&self, tags: impl IntoIterator<Item = (&'a str, &'a str)>) -> bool {
        let (Some(key), Some(legacy)) = (self.cluster_tag_key(), self.legacy_tag_value()) else {
            return false;
        };
        tags.into_iter().any(|(k, v)| {
            (k == key && v == TAG_VALUE_OWNED) || (k == TAG_LEGACY_CLUSTER && v == legacy)
        })
    }

    /// Whether a resource carries our cluster tag itself (not merely "ours" because there is no cluster ID).
    pub fn has_cluster_tag<'a>(&self, tags: impl IntoIterator<Item = (&'a str, &'a str)>) -> bool {
        self.cluster_id.is_some() && self.is_ours(tags)
    }

    /// Whether a resource carries no `kubernetes.io/cluster/` tag of any cluster (shared infrastructure); as
    /// upstream's `hasNoClusterPrefixTag`, the legacy `KubernetesCluster` tag is not looked at.
    pub fn has_no_cluster_tag<'a>(tags: impl IntoIterator<Item = (&'a str, &'a str)>) -> bool {
        !tags
            .into_iter()
            .any(|(key, _)| key.starts_with(TAG_CLUSTER_PREFIX))
    }

    /// The tags marking a new resource as owned by the cluster (empty without a cluster ID).
    pub fn owned_tags(&self) -> Vec<(String, String)> {
        let mut tags = Vec::new();
        if let Some(key) = self.cluster_tag_key() {
            tags.push((key, TAG_VALUE_OWNED.to_string()));
        }
        if let Some(legacy) = &self.legacy_cluster_id {
            tags.push((TAG_LEGACY_CLUSTER.to_string(), legacy.clone()));
        }
        tags
    }
}

/// EC2 tags as `(key, value)` pairs (an absent key or value reads as empty).
pub(crate) fn ec2_tag_pairs<'a>(
    tags: impl IntoIterator<Item = &'a aws_sdk_ec2::types::Tag>,
) -> Vec<(String, String)> {
    tags.into_iter()
        .map(|t| {
            (
                t.key().unwrap_or_default().to_string(),
                t.value().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Iterator<Item = (&'a str, &'a str)> {
        pairs.iter().copied()
    }

    #[test]
    fn ownership() {
        let t = ClusterTagging::new(Some("prod".into()), None);
        assert_eq!(t.cluster_id(), Some("prod"));
        assert_eq!(
            t.cluster_tag_key().as_deref(),
            Some("kubernetes.io/cluster/prod")
        );
        assert!(t.is_ours(tags(&[("kubernetes.io/cluster/prod", "shared")])));
        assert!(t.is_ours(tags(&[("KubernetesCluster", "prod")])));
        assert!(!t.is_ours(tags(&[("kubernetes.io/cluster/dev", "owned")])));
        assert!(!t.is_ours(tags(&[("Name", "prod")])));
        assert!(t.is_owned(tags(&[("kubernetes.io/cluster/prod", "owned")])));
        assert!(!t.is_owned(tags(&[("kubernetes.io/cluster/prod", "shared")])));
        assert!(t.is_owned(tags(&[("KubernetesCluster", "prod")])));
        assert!(!t.is_owned(tags(&[("KubernetesCluster", "dev")])));
        assert!(t.has_cluster_tag(tags(&[("kubernetes.io/cluster/prod", "")])));
        assert_eq!(
            t.owned_tags(),
            vec![(
                "kubernetes.io/cluster/prod".to_string(),
                "owned".to_string()
            )]
        );
    }

    #[test]
    fn legacy_tag() {
        let t = ClusterTagging::new(None, Some("old".into()));
        assert_eq!(t.cluster_id(), Some("old"));
        assert!(t.is_ours(tags(&[("KubernetesCluster", "old")])));
        assert!(t.is_ours(tags(&[("kubernetes.io/cluster/old", "owned")])));
        assert!(!t.is_ours(tags(&[("KubernetesCluster", "new")])));
        assert_eq!(t.owned_tags().len(), 2);
        let both = ClusterTagging::new(Some("new".into()), Some("old".into()));
        assert!(both.is_ours(tags(&[("KubernetesCluster", "old")])));
        assert!(both.is_ours(tags(&[("kubernetes.io/cluster/new", "shared")])));
        assert!(!both.is_ours(tags(&[("kubernetes.io/cluster/old", "shared")])));
        assert!(both.is_owned(tags(&[("KubernetesCluster", "old")])));
    }

    #[test]
    fn without_cluster_id_everything_is_ours() {
        let t = ClusterTagging::default();
        assert_eq!(t.cluster_id(), None);
        assert!(t.is_ours(tags(&[])));
        assert!(!t.is_owned(tags(&[("kubernetes.io/cluster/x", "owned")])));
        assert!(!t.has_cluster_tag(tags(&[("kubernetes.io/cluster/x", "owned")])));
        assert!(t.owned_tags().is_empty());
    }

    #[test]
    fn discovery_and_untagged() {
        let found = ClusterTagging::from_tags(tags(&[
            ("Name", "node"),
            ("kubernetes.io/cluster/prod", "owned"),
        ]))
        .unwrap();
        assert_eq!(found.cluster_id(), Some("prod"));
        let legacy = ClusterTagging::from_tags(tags(&[("KubernetesCluster", "old")])).unwrap();
        assert_eq!(legacy.cluster_id(), Some("old"));
        assert!(ClusterTagging::from_tags(tags(&[("Name", "node")])).is_none());
        assert!(ClusterTagging::has_no_cluster_tag(tags(&[("Name", "x")])));
        assert!(!ClusterTagging::has_no_cluster_tag(tags(&[(
            "kubernetes.io/cluster/other",
            "shared"
        )])));
        assert!(ClusterTagging::has_no_cluster_tag(tags(&[(
            "KubernetesCluster",
            "a"
        )])));
    }
}
