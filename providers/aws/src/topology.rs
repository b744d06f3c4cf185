//! Network topology labels of nodes, as upstream writes them (cloud-provider-aws 1.37):
//! `topology.k8s.aws/network-node-layer-<N>` is the N-th network node (from the top) EC2's
//! DescribeInstanceTopology lists for the node's instance.
//!
//! Labels are computed with the rest of a node's metadata, for nodes that lack the first layer label and
//! whose instance has a type; the cloud-node controller applies them when it initializes the node. Upstream
//! asks for one instance per call; here the instances of one bulk metadata lookup go into calls of up to
//! 100 IDs (the API's limit). What AWS says cannot have a topology is remembered for 24 hours, as upstream
//! remembers it, so it is not asked again: a region where the call is unsupported or not permitted, an
//! instance type none of whose instances has a topology, and an instance of a type that should have one
//! (`SupportedTopologyInstanceTypePattern`) but has none (it may be stopping). A failed call fails the
//! metadata of the instances whose type should have a topology (their nodes stay uninitialized and are
//! retried) and leaves the others without the labels, as upstream.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use cloud_provider::{CloudError, Result};

use crate::cloud::AwsCloud;
use crate::ec2_instance::Ec2Instance;
use crate::error::{ApiError, SdkResultExt};
use crate::paginate::for_each_page;

/// The prefix of the network-node labels; the first layer is `...-layer-1`.
pub const LABEL_NETWORK_NODE_PREFIX: &str = "topology.k8s.aws/network-node-layer-";
/// Most instance IDs DescribeInstanceTopology takes in one call.
pub const MAX_IDS_PER_CALL: usize = 100;

/// The labels of a topology: one per network node, layer 1 first.
pub fn topology_labels(network_nodes: &[String]) -> BTreeMap<String, String> {
    network_nodes
        .iter()
        .enumerate()
        .map(|(i, node)| {
            (
                format!("{LABEL_NETWORK_NODE_PREFIX}{}", i + 1),
                node.clone(),
            )
        })
        .collect()
}

/// What became of one instance's topology lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Topology {
    /// Its network nodes, layer 1 first.
    Nodes(Vec<String>),
    /// None to be had (not asked, or AWS lists none).
    None,
    /// The call failed.
    Failed(String),
}

/// How a failed DescribeInstanceTopology call is taken.
#[derive(Debug, Clone, PartialEq, Eq)]
enum CallFailure {
    /// Not available, or not permitted, in the region: never asked again there for a while.
    RegionUnsupported,
    /// Anything else (throttling included): the instances' lookups fail.
    Failed(String),
}

fn classify(err: &ApiError) -> CallFailure {
    if err.is_code("UnsupportedOperation") || err.is_code("UnauthorizedOperation") {
        CallFailure::RegionUnsupported
    } else {
        CallFailure::Failed(err.to_string())
    }
}

impl AwsCloud {
    /// Whether the instance's topology is worth asking for: it has a type, and neither the region, its type
    /// nor the instance is known to have none.
    pub(crate) fn might_have_topology(&self, inst: &Ec2Instance) -> bool {
        let now = Instant::now();
        !inst.instance_type.is_empty()
            && ![&self.region, &inst.instance_type, &inst.id]
                .iter()
                .any(|key| self.no_topology.contains(key, now))
    }

    /// Whether an instance of this type must have a topology (`SupportedTopologyInstanceTypePattern`).
    pub(crate) fn topology_expected(&self, instance_type: &str) -> bool {
        self.config.topology_instance_types.matches(instance_type)
    }

    /// The topologies of `instances` (those worth asking for), by instance ID, in calls of up to
    /// [`MAX_IDS_PER_CALL`] IDs.
    pub(crate) async fn instance_topologies(
        &self,
        instances: &[&Ec2Instance],
    ) -> HashMap<String, Topology> {
        let mut out = HashMap::new();
        for chunk in instances.chunks(MAX_IDS_PER_CALL) {
            let ids: Vec<String> = chunk.iter().map(|i| i.id.clone()).collect();
            match self.describe_instance_topology(&ids).await {
                Ok(found) => self.record_answer(chunk, found, &mut out),
                Err(err) => {
                    let failure = classify(&err);
                    if failure == CallFailure::RegionUnsupported {
                        tracing::warn!(region = %self.region, error = %err,
                            "ec2:DescribeInstanceTopology is not available (or not permitted) in the region; \
                             nodes get no network topology labels");
                        self.no_topology.insert(&self.region, Instant::now());
                    } else {
                        tracing::warn!(error = %err, instances = ids.len(), "describing instance topology failed");
                    }
                    for inst in chunk {
                        let topology = match &failure {
                            CallFailure::RegionUnsupported => Topology::None,
                            CallFailure::Failed(e) => Topology::Failed(e.clone()),
                        };
                        out.insert(inst.id.clone(), topology);
                    }
                }
            }
        }
        out
    }

    /// Records AWS's answer for `asked`: the instances it lists have their nodes; for the others, upstream's
    /// negative cache (the instance when its type should have a topology, else its type when no instance of
    /// the type has one).
    fn record_answer(
        &self,
        asked: &[&Ec2Instance],
        mut found: HashMap<String, Vec<String>>,
        out: &mut HashMap<String, Topology>,
    ) {
        let now = Instant::now();
        let types_with_topology: Vec<&str> = asked
            .iter()
            .filter(|i| found.contains_key(&i.id))
            .map(|i| i.instance_type.as_str())
            .collect();
        for inst in asked {
            let topology = match found.remove(&inst.id) {
                Some(nodes) if !nodes.is_empty() => Topology::Nodes(nodes),
                _ if self.topology_expected(&inst.instance_type) => {
                    tracing::warn!(instance = %inst.id, instance_type = %inst.instance_type,
                        "instance has no instance topology listed but may be a supported type");
                    self.no_topology.insert(&inst.id, now);
                    Topology::None
                }
                _ => {
                    if !types_with_topology.contains(&inst.instance_type.as_str()) {
                        tracing::info!(instance_type = %inst.instance_type,
                            "instance type unsupported for getting instance topology");
                        self.no_topology.insert(&inst.instance_type, now);
                    }
                    Topology::None
                }
            };
            out.insert(inst.id.clone(), topology);
        }
    }

    /// One DescribeInstanceTopology lookup of `ids` (every page): instance ID -> network nodes.
    async fn describe_instance_topology(
        &self,
        ids: &[String],
    ) -> std::result::Result<HashMap<String, Vec<String>>, ApiError> {
        let mut found = HashMap::new();
        for_each_page(
            |token| {
                self.clients
                    .ec2
                    .describe_instance_topology()
                    .set_instance_ids(Some(ids.to_vec()))
                    .set_next_token(token)
                    .send()
            },
            |page| page.next_token(),
            |page| {
                for inst in page.instances() {
                    if let Some(id) = inst.instance_id() {
                        found.insert(id.to_string(), inst.network_nodes().to_vec());
                    }
                }
            },
        )
        .await
        .api("DescribeInstanceTopology")?;
        Ok(found)
    }

    /// The network-node labels of an instance from its lookup: an instance whose type should have a
    /// topology fails when the lookup failed; any other goes on without the labels.
    pub(crate) fn topology_labels_of(
        &self,
        inst: &Ec2Instance,
        topology: Option<&Topology>,
    ) -> Result<BTreeMap<String, String>> {
        match topology {
            Some(Topology::Nodes(nodes)) => Ok(topology_labels(nodes)),
            Some(Topology::Failed(err)) if self.topology_expected(&inst.instance_type) => {
                Err(CloudError::provider(format!(
                    "failed to get the network topology of instance {} of type {}, which should have one: {err}",
                    inst.id, inst.instance_type
                )))
            }
            Some(Topology::Failed(err)) => {
                tracing::warn!(instance = %inst.id, instance_type = %inst.instance_type, error = %err,
                    "failed to get the instance's network topology; going on without the labels");
                Ok(BTreeMap::new())
            }
            Some(Topology::None) | None => Ok(BTreeMap::new()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_by_layer() {
        let labels = topology_labels(&["nn-a".into(), "nn-b".into(), "nn-c".into()]);
        assert_eq!(
            labels.into_iter().collect::<Vec<_>>(),
            vec![
                (
                    "topology.k8s.aws/network-node-layer-1".into(),
                    "nn-a".into()
                ),
                (
                    "topology.k8s.aws/network-node-layer-2".into(),
                    "nn-b".into()
                ),
                (
                    "topology.k8s.aws/network-node-layer-3".into(),
                    "nn-c".into()
                ),
            ]
        );
    }

    #[test]
    fn unsupported_and_unauthorized_stop_asking_in_the_region() {
        let err = |code: &str| ApiError {
            operation: "DescribeInstanceTopology",
            code: Some(code.into()),
            detail: code.into(),
        };
        assert_eq!(
            classify(&err("UnsupportedOperation")),
            CallFailure::RegionUnsupported
        );
        assert_eq!(
            classify(&err("UnauthorizedOperation")),
            CallFailure::RegionUnsupported
        );
        assert!(matches!(
            classify(&err("RequestLimitExceeded")),
            CallFailure::Failed(_)
        ));
        assert!(matches!(
            classify(&err("InternalError")),
            CallFailure::Failed(_)
        ));
    }
}
