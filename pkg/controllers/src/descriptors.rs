//! The controller table: one [`ControllerDescriptor`] per controller of this crate, in start order
//! ([`CONTROLLERS`]). Everything else derives from it: the names and aliases `--controllers` accepts and
//! which of them `*` includes, the flag and provider capability each one needs, the check it makes before it
//! starts, how it is built, its health check, its `running_managed_controllers` and work-queue names, and
//! the names of its API client and events.
//!
//! A provider contributes controllers of its own in the same shape through the provider contract
//! ([`cloud_provider::ProviderController`]: the same [`ControllerInfo`], a skip reason and a run function);
//! [`crate::run_with_provider_controllers`] starts them after these.
//!
//! [`ControllerName`] is the typed key of a row; its accessors below read the row.

use cloud_provider::{CloudProvider, ControllerInfo};
use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::context::{ControllerConfig, ControllerContext};
use crate::error::ControllersError;
use crate::informers::SharedInformers;
use crate::names::ControllerName;
use crate::workqueue_metrics::queue_names;

/// A constructed controller, ready to run until its token is cancelled.
pub type Runner =
    Box<dyn FnOnce(CancellationToken) -> BoxFuture<'static, Result<(), ControllersError>> + Send>;

/// The provider capability a controller cannot run without.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Capability {
    /// `InstancesV2` or (v1) `Instances`.
    Instances,
    /// `LoadBalancer`.
    LoadBalancer,
    /// `Routes`.
    Routes,
    /// `PvLabeler`.
    PvLabeler,
    /// `ResourceTagger`.
    ResourceTagger,
}

impl Capability {
    /// Why `cloud` cannot run a controller needing this capability, or `None` when it has it.
    pub fn missing(self, cloud: &dyn CloudProvider) -> Option<String> {
        let name = cloud.provider_name();
        match self {
            Capability::Instances => (cloud.instances_v2().is_none()
                && cloud.instances().is_none())
            .then(|| format!("cloud provider {name:?} supports neither InstancesV2 nor Instances")),
            Capability::LoadBalancer => cloud
                .load_balancer()
                .is_none()
                .then(|| format!("cloud provider {name:?} does not support load balancers")),
            Capability::Routes => cloud
                .routes()
                .is_none()
                .then(|| format!("cloud provider {name:?} does not support routes")),
            Capability::PvLabeler => cloud
                .pv_labeler()
                .is_none()
                .then(|| format!("cloud provider {name:?} does not label volumes")),
            Capability::ResourceTagger => cloud
                .resource_tagger()
                .is_none()
                .then(|| format!("tagging controller does not support {name:?} provider")),
        }
    }
}

/// A command-line flag that turns a controller off even when `--controllers` enables it.
#[derive(Clone, Copy, Debug)]
pub struct FlagGate {
    /// Whether the flags turn the controller off.
    pub turns_off: fn(&ControllerConfig) -> bool,
    /// Why it is not started, as the controllers' start-up logs it.
    pub reason: &'static str,
    /// What the daemon logs when it drops the controller from the enabled ones.
    pub notice: &'static str,
}

/// Everything about one controller (see the module documentation).
#[derive(Clone, Copy)]
pub struct ControllerDescriptor {
    /// The typed key of this row.
    pub name: ControllerName,
    /// Canonical name (also the health check's and the logs'), alias, and whether `*` includes it.
    pub info: ControllerInfo,
    /// The provider capability it needs; without it the controller is not started (an info log says why).
    pub needs: Capability,
    /// The flag that turns it off, if any (checked before the capability).
    pub flag_gate: Option<FlagGate>,
    /// Checked once it is known to start: an error stops the whole start-up (a configuration that cannot
    /// work, as upstream refuses it).
    pub precondition: fn(&ControllerContext) -> Result<(), ControllersError>,
    /// Builds it over the shared informers (before they start).
    pub start: fn(&ControllerContext, &SharedInformers) -> Runner,
    /// The label of `running_managed_controllers` (upstream's short name).
    pub metrics_name: &'static str,
    /// The `name` label of its `workqueue_*` metrics, when it has a work queue.
    pub workqueue: Option<&'static str>,
    /// The name upstream's client builder gives its API client (`User-Agent` suffix, ServiceAccount).
    pub client_name: &'static str,
    /// The component its events report as (`source.component`, `reportingComponent`).
    pub event_component: &'static str,
}

impl ControllerDescriptor {
    /// Why it is not started with this configuration and provider, or `None` when it starts.
    pub fn skip_reason(&self, ctx: &ControllerContext) -> Option<String> {
        if let Some(gate) = &self.flag_gate
            && (gate.turns_off)(&ctx.config)
        {
            return Some(gate.reason.to_string());
        }
        self.needs.missing(ctx.cloud.as_ref())
    }

    /// Its health check's name: its canonical name.
    pub fn health_check(&self) -> &'static str {
        self.info.name
    }
}

/// No check before start.
fn no_precondition(_: &ControllerContext) -> Result<(), ControllersError> {
    Ok(())
}

/// Upstream refuses to start the route controller without a cluster CIDR: routes outside a known cluster
/// CIDR cannot be told from others.
fn needs_cluster_cidr(ctx: &ControllerContext) -> Result<(), ControllersError> {
    if !ctx.config.cluster_cidrs.is_empty() {
        return Ok(());
    }
    Err(ControllersError::Config(format!(
        "--configure-cloud-routes is true and cloud provider {:?} supports routes, but \
         --cluster-cidr is empty: set --cluster-cidr, or pass --configure-cloud-routes=false",
        ctx.cloud.provider_name()
    )))
}

/// `--configure-cloud-routes=false` turns the route controller off. Like upstream (since Kubernetes
/// 1.21), `--allocate-node-cidrs` plays no part: pod CIDRs may come from another allocator.
const CONFIGURE_CLOUD_ROUTES: FlagGate = FlagGate {
    turns_off: |config| !config.configure_cloud_routes,
    reason: "--configure-cloud-routes is false",
    notice: "will not configure cloud provider routes, --configure-cloud-routes is false; \
             node-route-controller is not started",
};

/// The tagging controller's flags must be usable with the provider (upstream checks them when the
/// controller starts and exits when they are not).
fn tagging_flags_are_valid(ctx: &ControllerContext) -> Result<(), ControllersError> {
    let kinds = ctx
        .cloud
        .resource_tagger()
        .map(|t| t.resource_kinds())
        .unwrap_or_default();
    let problems = ctx.config.tagging.problems(kinds);
    if problems.is_empty() {
        return Ok(());
    }
    Err(ControllersError::Config(format!(
        "Tagging controller inputs are not properly set: {}",
        problems.join("; ")
    )))
}

fn start_cloud_node(ctx: &ControllerContext, informers: &SharedInformers) -> Runner {
    let c = crate::node::CloudNodeController::new(ctx, informers);
    Box::new(move |token| Box::pin(c.run(token)))
}

fn start_cloud_node_lifecycle(ctx: &ControllerContext, informers: &SharedInformers) -> Runner {
    let c = crate::node_lifecycle::CloudNodeLifecycleController::new(ctx, informers);
    Box::new(move |token| Box::pin(c.run(token)))
}

fn start_service_lb(ctx: &ControllerContext, informers: &SharedInformers) -> Runner {
    let c = crate::service::ServiceLbController::new(ctx, informers);
    Box::new(move |token| Box::pin(c.run(token)))
}

fn start_node_route(ctx: &ControllerContext, informers: &SharedInformers) -> Runner {
    let c = crate::route::NodeRouteController::new(ctx, informers);
    Box::new(move |token| Box::pin(c.run(token)))
}

fn start_pv_label(ctx: &ControllerContext, informers: &SharedInformers) -> Runner {
    let c = crate::pv_label::PvLabelController::new(ctx, informers);
    Box::new(move |token| Box::pin(c.run(token)))
}

fn start_tagging(ctx: &ControllerContext, informers: &SharedInformers) -> Runner {
    let c = crate::tagging::TaggingController::new(ctx, informers);
    Box::new(move |token| Box::pin(c.run(token)))
}

/// Every controller of this crate, in the deterministic order in which they are started.
pub static CONTROLLERS: [ControllerDescriptor; 6] = [
    ControllerDescriptor {
        name: ControllerName::CloudNode,
        info: ControllerInfo::new("cloud-node-controller", "cloud-node"),
        needs: Capability::Instances,
        flag_gate: None,
        precondition: no_precondition,
        start: start_cloud_node,
        metrics_name: "cloud-node",
        workqueue: Some(queue_names::NODES),
        client_name: "node-controller",
        event_component: "cloud-node-controller",
    },
    ControllerDescriptor {
        name: ControllerName::CloudNodeLifecycle,
        info: ControllerInfo::new("cloud-node-lifecycle-controller", "cloud-node-lifecycle"),
        needs: Capability::Instances,
        flag_gate: None,
        precondition: no_precondition,
        start: start_cloud_node_lifecycle,
        metrics_name: "cloud-node-lifecycle",
        workqueue: None,
        client_name: "node-controller",
        event_component: "cloud-node-lifecycle-controller",
    },
    ControllerDescriptor {
        name: ControllerName::ServiceLb,
        info: ControllerInfo::new("service-lb-controller", "service"),
        needs: Capability::LoadBalancer,
        flag_gate: None,
        precondition: no_precondition,
        start: start_service_lb,
        metrics_name: "service",
        workqueue: Some(queue_names::SERVICE),
        client_name: "service-controller",
        event_component: "service-controller",
    },
    ControllerDescriptor {
        name: ControllerName::NodeRoute,
        info: ControllerInfo::new("node-route-controller", "route"),
        needs: Capability::Routes,
        flag_gate: Some(CONFIGURE_CLOUD_ROUTES),
        precondition: needs_cluster_cidr,
        start: start_node_route,
        metrics_name: "route",
        workqueue: None,
        client_name: "route-controller",
        event_component: "route_controller",
    },
    // k8s.io/cloud-provider has no persistent-volume labelling controller, so a cluster switching from
    // upstream keeps its volumes as they are unless the operator names `pv-label` (the "disabled by
    // default" controllers of kube-controller-manager work the same way).
    ControllerDescriptor {
        name: ControllerName::PvLabel,
        info: ControllerInfo::new("pv-label-controller", "pv-label").disabled_by_default(),
        needs: Capability::PvLabeler,
        flag_gate: None,
        precondition: no_precondition,
        start: start_pv_label,
        metrics_name: "pv-label",
        workqueue: Some(queue_names::PV_LABELS),
        client_name: "pvl-controller",
        event_component: "pvl-controller",
    },
    // cloud-provider-aws's tagging controller (`--controllers=*,tagging`), off by default as there.
    ControllerDescriptor {
        name: ControllerName::Tagging,
        info: ControllerInfo::new("tagging-controller", "tagging").disabled_by_default(),
        needs: Capability::ResourceTagger,
        flag_gate: None,
        precondition: tagging_flags_are_valid,
        start: start_tagging,
        metrics_name: "tagging",
        workqueue: Some(queue_names::TAGGING),
        client_name: "tagging-controller",
        event_component: "tagging-controller",
    },
];

/// The controllers' names (canonical, alias, enabled by default), in start order.
pub fn infos() -> impl Iterator<Item = ControllerInfo> {
    CONTROLLERS.iter().map(|d| d.info)
}

impl ControllerName {
    /// Every controller, in the deterministic order in which they are started.
    pub fn all() -> impl Iterator<Item = ControllerName> {
        CONTROLLERS.iter().map(|d| d.name)
    }

    /// Its row of [`CONTROLLERS`].
    pub fn descriptor(&self) -> &'static ControllerDescriptor {
        // The table holds one row per variant, in declaration order (checked by a test).
        &CONTROLLERS[*self as usize]
    }

    /// The canonical (upstream) name, e.g. `cloud-node-controller`.
    pub fn canonical(&self) -> &'static str {
        self.descriptor().info.name
    }

    /// The short alias, e.g. `cloud-node`.
    pub fn alias(&self) -> &'static str {
        self.descriptor().info.alias
    }

    /// Whether `*` in `--controllers` includes this controller.
    pub fn enabled_by_default(&self) -> bool {
        self.descriptor().info.enabled_by_default
    }

    /// The name upstream's client builder gives this controller's API client, the last segment of its
    /// `User-Agent` (and, upstream, of its ServiceAccount's name).
    pub fn client_name(&self) -> &'static str {
        self.descriptor().client_name
    }

    /// The component upstream's event recorder reports this controller's events as (`source.component` and
    /// `reportingComponent` of core Events; what `kubectl describe` shows under "From").
    pub fn event_component(&self) -> &'static str {
        self.descriptor().event_component
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
        CONTROLLERS
            .iter()
            .find(|d| d.info.is_named(name))
            .map(|d| d.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn rows_are_keyed_by_their_variant() {
        for (index, row) in CONTROLLERS.iter().enumerate() {
            assert_eq!(row.name as usize, index, "{}", row.info.name);
            assert_eq!(row.name.descriptor().info, row.info);
        }
    }

    #[test]
    fn names_aliases_and_metrics_names_are_unique() {
        let mut seen = HashSet::new();
        for row in &CONTROLLERS {
            assert!(seen.insert(row.info.name), "{}", row.info.name);
            assert!(seen.insert(row.info.alias), "{}", row.info.alias);
        }
        let metrics: HashSet<_> = CONTROLLERS.iter().map(|r| r.metrics_name).collect();
        assert_eq!(metrics.len(), CONTROLLERS.len());
        let queues: Vec<_> = CONTROLLERS.iter().filter_map(|r| r.workqueue).collect();
        assert_eq!(
            queues,
            ["Nodes", "service", "pvLabels", "tagging-controller"]
        );
    }

    #[test]
    fn names_and_aliases_round_trip() {
        for c in ControllerName::all() {
            assert_eq!(ControllerName::from_name(c.canonical()), Some(c));
            assert_eq!(ControllerName::from_name(c.alias()), Some(c));
            assert_eq!(c.to_string(), c.canonical());
            assert_eq!(c.descriptor().health_check(), c.canonical());
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
        let names: Vec<_> = ControllerName::all().map(|c| c.alias()).collect();
        assert_eq!(
            names,
            [
                "cloud-node",
                "cloud-node-lifecycle",
                "service",
                "route",
                "pv-label",
                "tagging"
            ]
        );
        let by_default: Vec<_> = infos()
            .filter(|i| i.enabled_by_default)
            .map(|i| i.alias)
            .collect();
        assert_eq!(
            by_default,
            ["cloud-node", "cloud-node-lifecycle", "service", "route"]
        );
    }
}
