//! Controller names: the typed key of each row of the controller table. What a name stands for (canonical
//! name, alias, health check, metrics, ...) is in the table, [`crate::descriptors::CONTROLLERS`]; the
//! accessors are defined there.

use std::fmt;

/// One of the control loops this crate runs. The variants are declared in start order, the order of the
/// rows of [`crate::descriptors::CONTROLLERS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ControllerName {
    /// `cloud-node-controller`: initializes new nodes from the cloud and keeps their addresses current.
    CloudNode,
    /// `cloud-node-lifecycle-controller`: deletes nodes whose instances are gone, taints shut-down ones.
    CloudNodeLifecycle,
    /// `service-lb-controller`: cloud load balancers for `type: LoadBalancer` Services.
    ServiceLb,
    /// `node-route-controller`: cloud routes for the pod CIDRs of the nodes.
    NodeRoute,
    /// `pv-label-controller`: zone and region labels on PersistentVolumes backed by cloud volumes.
    PvLabel,
    /// `tagging-controller`: tags on the cloud resources of nodes (cloud-provider-aws's `tagging`).
    Tagging,
}

impl fmt::Display for ControllerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.canonical())
    }
}
