//! Controller names: the canonical names and aliases accepted by `--controllers`, used in logs, metrics,
//! health checks and as the reporting controller of events.

use std::fmt;

/// One of the control loops this crate runs.
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
}

impl ControllerName {
    /// Every controller, in the deterministic order in which they are started.
    pub const ALL: [ControllerName; 5] = [
        ControllerName::CloudNode,
        ControllerName::CloudNodeLifecycle,
        ControllerName::ServiceLb,
        ControllerName::NodeRoute,
        ControllerName::PvLabel,
    ];

    /// The canonical (upstream) name, e.g. `cloud-node-controller`.
    pub fn canonical(&self) -> &'static str {
        match self {
            ControllerName::CloudNode => "cloud-node-controller",
            ControllerName::CloudNodeLifecycle => "cloud-node-lifecycle-controller",
            ControllerName::ServiceLb => "service-lb-controller",
            ControllerName::NodeRoute => "node-route-controller",
            ControllerName::PvLabel => "pv-label-controller",
        }
    }

    /// The name upstream's client builder gives this controller's API client, the last segment of its
    /// `User-Agent` (and, upstream, of its ServiceAccount's name).
    pub fn client_name(&self) -> &'static str {
        match self {
            ControllerName::CloudNode | ControllerName::CloudNodeLifecycle => "node-controller",
            ControllerName::ServiceLb => "service-controller",
            ControllerName::NodeRoute => "route-controller",
            ControllerName::PvLabel => "pvl-controller",
        }
    }

    /// The component upstream's event recorder reports this controller's events as (`source.component` and
    /// `reportingComponent` of core Events; what `kubectl describe` shows under "From").
    pub fn event_component(&self) -> &'static str {
        match self {
            ControllerName::CloudNode => "cloud-node-controller",
            ControllerName::CloudNodeLifecycle => "cloud-node-lifecycle-controller",
            ControllerName::ServiceLb => "service-controller",
            ControllerName::NodeRoute => "route_controller",
            ControllerName::PvLabel => "pvl-controller",
        }
    }

    /// Whether `*` in `--controllers` includes this controller. k8s.io/cloud-provider has no
    /// persistent-volume labelling controller, so a cluster switching from upstream keeps its volumes as they
    /// are unless the operator names `pv-label` (the "disabled by default" controllers of
    /// kube-controller-manager work the same way).
    pub fn enabled_by_default(&self) -> bool {
        !matches!(self, ControllerName::PvLabel)
    }

    /// The short alias, e.g. `cloud-node`.
    pub fn alias(&self) -> &'static str {
        match self {
            ControllerName::CloudNode => "cloud-node",
            ControllerName::CloudNodeLifecycle => "cloud-node-lifecycle",
            ControllerName::ServiceLb => "service",
            ControllerName::NodeRoute => "route",
            ControllerName::PvLabel => "pv-label",
        }
    }

    /// Looks a controller up by its canonical name or its alias (exact, case-sensitive match).
    ///
    /// ```
    /// use cloud_controllers::ControllerName;
    /// assert_eq!(ControllerName::from_name("route"), Some(ControllerName::NodeRoute));
    /// assert_eq!(ControllerName::from_name("cloud-node-controller"), Some(ControllerName::CloudNode));
    /// assert_eq!(ControllerName::from_name("nodeipam"), None);
    /// ```
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|c| c.canonical() == name || c.alias() == name)
    }
}

impl fmt::Display for ControllerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.canonical())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_aliases_round_trip() {
        for c in ControllerName::ALL {
            assert_eq!(ControllerName::from_name(c.canonical()), Some(c));
            assert_eq!(ControllerName::from_name(c.alias()), Some(c));
            assert_eq!(c.to_string(), c.canonical());
        }
        assert_eq!(
            ControllerName::from_name("service"),
            Some(ControllerName::ServiceLb)
        );
        assert_eq!(ControllerName::from_name("Service"), None);
        assert_eq!(ControllerName::from_name(""), None);
    }

    #[test]
    fn start_order_is_the_declared_order() {
        let names: Vec<_> = ControllerName::ALL.iter().map(|c| c.alias()).collect();
        assert_eq!(
            names,
            [
                "cloud-node",
                "cloud-node-lifecycle",
                "service",
                "route",
                "pv-label"
            ]
        );
    }
}
