//! Controller metrics with the upstream names (`node_controller_*`, `service_controller_*`,
//! `route_controller_*`, the tagging controller's of cloud-provider-aws, `workqueue_*`,
//! `running_managed_controllers`), plus a few of our own for the
//! node-lifecycle deletion guard, worker panics, cloud calls that timed out and the event recorder.
//!
//! prometheus-client appends `_total` to counters when encoding, so counters are registered without it.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::workqueue_metrics::WorkqueueMetrics;

/// Label set of the event recorder counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventOutcomeLabels {
    /// What happened to the event: `created`, `series_updated`, `aggregated`, `failed` or `dropped`.
    pub outcome: String,
}

/// Label set of the worker panic counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    /// The controller's canonical name.
    pub controller: String,
}

/// Label set of the cloud-call timeout counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CloudCallLabels {
    /// The controller's canonical name.
    pub controller: String,
    /// The provider-contract method, e.g. `list_routes`.
    pub operation: String,
}

/// Label set of the tagging controller's error counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TaggingErrorLabels {
    /// `total_errors` (a failed sync, retried) or `errors_after_retries_exhausted` (given up).
    pub error_type: String,
    /// The node's instance (the last part of its provider ID).
    pub instance_id: String,
}

/// Label set of `running_managed_controllers`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ManagedControllerLabels {
    /// The controller's upstream short name (`cloud-node`, `service`, `route`...).
    pub name: String,
    /// The controller manager: `cloud-controller-manager`.
    pub manager: String,
}

/// The `manager` label of `running_managed_controllers`, as upstream's.
pub const MANAGER: &str = "cloud-controller-manager";

/// Every metric the controllers export. Cloning shares the underlying metrics.
#[derive(Clone, Debug)]
pub struct ControllerMetrics {
    /// `node_controller_cloud_provider_taint_removal_delay_seconds`: seconds from node creation until the
    /// uninitialized taint was removed.
    pub node_taint_removal_delay: Histogram,
    /// `node_controller_initial_node_sync_delay_seconds`: seconds from node creation until its first
    /// complete sync.
    pub node_initial_sync_delay: Histogram,
    /// `service_controller_loadbalancer_sync_total`: load balancer configurations caused by service or
    /// node changes.
    pub service_loadbalancer_sync: Counter,
    /// `service_controller_nodesync_error_total`: load balancer updates after node changes that failed.
    pub service_nodesync_error: Counter,
    /// `service_controller_nodesync_latency_seconds`: duration of one node sync over all load balancers.
    pub service_nodesync_latency: Histogram,
    /// `service_controller_update_loadbalancer_host_latency_seconds`: duration of updating the hosts of one
    /// load balancer.
    pub service_update_loadbalancer_host_latency: Histogram,
    /// `route_controller_route_sync_total`: route reconciliations against the cloud.
    pub route_sync: Counter,
    /// `node_lifecycle_controller_deletion_guard_trips_total`: lifecycle passes in which the deletion guard
    /// refused to delete nodes.
    pub node_lifecycle_deletion_guard_trips: Counter,
    /// `node_lifecycle_controller_nodes_deleted_total`: nodes deleted because their instance is gone.
    pub node_lifecycle_nodes_deleted: Counter,
    /// `cloud_controllers_events_total{outcome}`: what happened to recorded events.
    pub events: Family<EventOutcomeLabels, Counter>,
    /// `cloud_controllers_worker_panics_total{controller}`: panics caught while syncing one object.
    pub worker_panics: Family<ControllerLabels, Counter>,
    /// `cloud_controllers_cloud_call_timeouts_total{controller,operation}`: cloud calls abandoned after
    /// `--cloud-call-timeout`.
    pub cloud_call_timeouts: Family<CloudCallLabels, Counter>,
    /// `cloudprovider_aws_tagging_controller_work_item_errors_total{error_type,instance_id}`: failed
    /// tagging syncs (cloud-provider-aws's name, kept for every provider).
    pub tagging_work_item_errors: Family<TaggingErrorLabels, Counter>,
    /// `tagging_controller_inital_node_tagging_delay_seconds` (upstream's spelling): seconds from node
    /// creation until its resources were first tagged.
    pub tagging_initial_delay: Histogram,
    /// `workqueue_*{name}`: the controllers' work queues.
    pub workqueues: WorkqueueMetrics,
    /// `running_managed_controllers{name,manager}`: 1 while a controller runs, 0 once it stopped.
    pub running_controllers: Family<ManagedControllerLabels, Gauge>,
}

impl Default for ControllerMetrics {
    fn default() -> Self {
        ControllerMetrics {
            node_taint_removal_delay: Histogram::new(exponential_buckets(1.0, 4.0, 6)),
            node_initial_sync_delay: Histogram::new(exponential_buckets(1.0, 4.0, 6)),
            service_loadbalancer_sync: Counter::default(),
            service_nodesync_error: Counter::default(),
            service_nodesync_latency: Histogram::new(exponential_buckets(1.0, 2.0, 15)),
            service_update_loadbalancer_host_latency: Histogram::new(exponential_buckets(
                1.0, 2.0, 15,
            )),
            route_sync: Counter::default(),
            node_lifecycle_deletion_guard_trips: Counter::default(),
            node_lifecycle_nodes_deleted: Counter::default(),
            events: Family::default(),
            worker_panics: Family::default(),
            cloud_call_timeouts: Family::default(),
            tagging_work_item_errors: Family::default(),
            tagging_initial_delay: Histogram::new(exponential_buckets(1.0, 4.0, 6)),
            workqueues: WorkqueueMetrics::default(),
            running_controllers: Family::default(),
        }
    }
}

impl ControllerMetrics {
    /// Creates the metrics and registers them in `registry` (served on `/metrics`).
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "node_controller_cloud_provider_taint_removal_delay_seconds",
            "Number of seconds after node creation when the node controller removed the cloud-provider taint of a single node",
            m.node_taint_removal_delay.clone(),
        );
        registry.register(
            "node_controller_initial_node_sync_delay_seconds",
            "Number of seconds after node creation when the node controller finished the initial synchronization of a single node",
            m.node_initial_sync_delay.clone(),
        );
        registry.register(
            "service_controller_loadbalancer_sync",
            "Number of times any load balancer has been configured, as an effect of service or node changes on the cluster",
            m.service_loadbalancer_sync.clone(),
        );
        registry.register(
            "service_controller_nodesync_error",
            "Number of times a load balancer update after node changes failed",
            m.service_nodesync_error.clone(),
        );
        registry.register(
            "service_controller_nodesync_latency_seconds",
            "Latency of a node sync that updates the hosts of every load balancer after node changes",
            m.service_nodesync_latency.clone(),
        );
        registry.register(
            "service_controller_update_loadbalancer_host_latency_seconds",
            "Latency of updating the hosts of one load balancer",
            m.service_update_loadbalancer_host_latency.clone(),
        );
        registry.register(
            "route_controller_route_sync",
            "Number of times routes have been synced with the cloud provider",
            m.route_sync.clone(),
        );
        registry.register(
            "node_lifecycle_controller_deletion_guard_trips",
            "Number of node-lifecycle passes in which the deletion guard refused to delete nodes",
            m.node_lifecycle_deletion_guard_trips.clone(),
        );
        registry.register(
            "node_lifecycle_controller_nodes_deleted",
            "Number of nodes deleted because their cloud instance no longer exists",
            m.node_lifecycle_nodes_deleted.clone(),
        );
        registry.register(
            "cloud_controllers_worker_panics",
            "Panics caught while a controller synced one object (the worker goes on; see the controller's health check)",
            m.worker_panics.clone(),
        );
        registry.register(
            "cloud_controllers_cloud_call_timeouts",
            "Cloud provider calls abandoned after --cloud-call-timeout, by controller and provider-contract method (see the controller's health check)",
            m.cloud_call_timeouts.clone(),
        );
        registry.register(
            "cloud_controllers_events",
            "Events recorded by the controllers, by outcome (created, series_updated, aggregated, failed, dropped)",
            m.events.clone(),
        );
        registry.register(
            "cloudprovider_aws_tagging_controller_work_item_errors",
            "any error in dequeueing the work queue and processing workItem",
            m.tagging_work_item_errors.clone(),
        );
        registry.register(
            "tagging_controller_inital_node_tagging_delay_seconds",
            "Latency (in seconds) between node creation and its first successful tagging by TaggingController.",
            m.tagging_initial_delay.clone(),
        );
        registry.register(
            "running_managed_controllers",
            "Indicates where instances of a controller are currently running",
            m.running_controllers.clone(),
        );
        m.workqueues.register(registry);
        m
    }

    /// Sets `running_managed_controllers` of the controller with upstream short name `name`.
    pub fn set_running(&self, name: &str, running: bool) {
        self.running_controllers
            .get_or_create(&ManagedControllerLabels {
                name: name.to_string(),
                manager: MANAGER.to_string(),
            })
            .set(i64::from(running));
    }

    /// Counts one caught worker panic of `controller`.
    pub fn worker_panic(&self, controller: &str) {
        self.worker_panics
            .get_or_create(&ControllerLabels {
                controller: controller.to_string(),
            })
            .inc();
    }

    /// Counts one cloud call of `controller` to `operation` that timed out.
    pub fn cloud_call_timeout(&self, controller: &str, operation: &str) {
        self.cloud_call_timeouts
            .get_or_create(&CloudCallLabels {
                controller: controller.to_string(),
                operation: operation.to_string(),
            })
            .inc();
    }

    /// Counts one event outcome (see [`EventOutcomeLabels`]).
    pub fn event_outcome(&self, outcome: &str) {
        self.events
            .get_or_create(&EventOutcomeLabels {
                outcome: outcome.to_string(),
            })
            .inc();
    }

    /// The current count of an event outcome.
    pub fn event_outcome_count(&self, outcome: &str) -> u64 {
        self.events
            .get_or_create(&EventOutcomeLabels {
                outcome: outcome.to_string(),
            })
            .get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    #[test]
    fn upstream_names_are_exported() {
        let mut registry = Registry::default();
        let m = ControllerMetrics::register(&mut registry);
        m.service_loadbalancer_sync.inc();
        m.route_sync.inc();
        m.node_taint_removal_delay.observe(3.0);
        m.event_outcome("created");
        m.cloud_call_timeout("node-route-controller", "list_routes");
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        for name in [
            "node_controller_cloud_provider_taint_removal_delay_seconds_bucket",
            "node_controller_initial_node_sync_delay_seconds_count",
            "service_controller_loadbalancer_sync_total 1",
            "service_controller_nodesync_error_total 0",
            "service_controller_nodesync_latency_seconds_count",
            "service_controller_update_loadbalancer_host_latency_seconds_count",
            "route_controller_route_sync_total 1",
            "node_lifecycle_controller_deletion_guard_trips_total 0",
            "cloud_controllers_events_total{outcome=\"created\"} 1",
            "cloud_controllers_cloud_call_timeouts_total{controller=\"node-route-controller\",operation=\"list_routes\"} 1",
        ] {
            assert!(text.contains(name), "missing {name} in:\n{text}");
        }
        assert_eq!(m.event_outcome_count("created"), 1);
    }
}
