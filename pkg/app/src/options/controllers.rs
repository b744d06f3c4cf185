//! The controllers' own flags: upstream's cloud-node, cloud-node-lifecycle, service-lb and route flags,
//! cloud-provider-aws's tagging controller flags, and the daemon's (`--cloud-call-timeout`,
//! `--node-deletion-max-percent`, `--instance-exists-grace-period`).

use std::time::Duration;

use clap::{ArgAction, Args};
use cloud_controllers::config::defaults;

use super::duration_default;
use super::values::{parse_go_bool, parse_key_value_pairs};
use crate::duration::parse_duration;

/// The controllers' settings.
#[derive(Debug, Clone, Args)]
pub struct ControllerOptions {
    /// Period of the node-lifecycle pass over all nodes.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = duration_default!(defaults::NODE_MONITOR_PERIOD.get()),
        value_parser = parse_duration,
        help_heading = "Cloud-node-lifecycle-controller"
    )]
    pub node_monitor_period: Duration,

    /// Workers of upstream's lifecycle pass (at least 1). Accepted and ignored: the pass looks instances up
    /// in bulk calls whose concurrency follows the number of nodes.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        help_heading = "Cloud-node-lifecycle-controller"
    )]
    pub concurrent_node_lifecycle_syncs: i64,

    /// How long after a Node's creation cloud-node-lifecycle-controller never deletes it because the cloud
    /// cannot find its instance (clouds such as EC2 may not list a just-launched instance at once); 0 turns
    /// the grace off, as upstream's default.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = duration_default!(defaults::INSTANCE_EXISTS_GRACE_PERIOD),
        value_parser = parse_duration,
        help_heading = "Cloud-node-lifecycle-controller"
    )]
    pub instance_exists_grace_period: Duration,

    /// Largest share of the nodes (in percent, 0-100) that one node-lifecycle pass may delete because the
    /// cloud says their instances are gone; beyond it the deletions are held back and reported.
    #[arg(
        long,
        value_name = "PERCENT",
        default_value_t = i64::from(defaults::NODE_DELETION_MAX_PERCENT.get()),
        help_heading = "Cloud-node-lifecycle-controller"
    )]
    pub node_deletion_max_percent: i64,

    /// Period of the node address sync with the cloud.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = duration_default!(defaults::NODE_STATUS_UPDATE_FREQUENCY.get()),
        value_parser = parse_duration,
        help_heading = "Misc"
    )]
    pub node_status_update_frequency: Duration,

    /// Number of nodes initialized concurrently by cloud-node-controller (at least 1).
    #[arg(
        long,
        value_name = "N",
        default_value_t = defaults::CONCURRENT_NODE_SYNCS.get() as i64,
        help_heading = "Cloud-node-controller"
    )]
    pub concurrent_node_syncs: i64,

    /// Workers of upstream's periodic address sync (0: --concurrent-node-syncs). Accepted and ignored: the
    /// sync looks instances up in bulk calls.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        help_heading = "Cloud-node-controller"
    )]
    pub concurrent_node_status_updates: i64,

    /// Number of services synced concurrently by service-lb-controller (at least 1).
    #[arg(
        long,
        value_name = "N",
        default_value_t = defaults::CONCURRENT_SERVICE_SYNCS.get() as i64,
        help_heading = "Service-lb-controller"
    )]
    pub concurrent_service_syncs: i64,

    /// Period of the full route reconciliation.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = duration_default!(defaults::ROUTE_RECONCILIATION_PERIOD.get()),
        value_parser = parse_duration,
        help_heading = "Generic"
    )]
    pub route_reconciliation_period: Duration,

    /// How long one cloud provider call of a controller may take before it is abandoned: the object is
    /// retried with backoff and the controller's health check fails until a call is answered again; a call
    /// still running past it (a provider blocking its thread) also fails the check. Greater than 0, at most
    /// 1h. The default leaves room for the providers' own limits (an AWS SDK operation may take 120s with
    /// retries and a bulk lookup makes two; a DigitalOcean request 30s per attempt over 6 attempts);
    /// upstream has no timeout.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = duration_default!(defaults::CLOUD_CALL_TIMEOUT.get()),
        value_parser = parse_duration,
        help_heading = "Generic"
    )]
    pub cloud_call_timeout: Duration,

    /// Tags to put on the cloud resources of every node (`key=value,key2=value2`; repeat the flag to add
    /// more). Required when the tagging controller runs.
    #[arg(
        long = "tags",
        value_name = "KEY=VALUE,...",
        action = ArgAction::Append,
        value_parser = parse_key_value_pairs,
        help_heading = "Tagging controller"
    )]
    pub tags: Vec<Vec<(String, String)>>,

    /// A kind of cloud resource of the nodes to tag (AWS: instance); repeat the flag for more. Required
    /// when the tagging controller runs.
    #[arg(
        long = "resources",
        value_name = "RESOURCE",
        action = ArgAction::Append,
        help_heading = "Tagging controller"
    )]
    pub resources: Vec<String>,

    /// Tagging calls per second (with --tagging-controller-burst-limit; both greater than 0 to limit).
    #[arg(
        long,
        value_name = "RATE",
        default_value_t = 0.0,
        help_heading = "Tagging controller"
    )]
    pub tagging_controller_rate_limit: f64,

    /// Tagging calls allowed at once beyond the rate (with --tagging-controller-rate-limit).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        help_heading = "Tagging controller"
    )]
    pub tagging_controller_burst_limit: i64,

    /// Nodes the tagging controller syncs at once (at least 1).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        help_heading = "Tagging controller"
    )]
    pub tagging_controller_concurrent_node_syncs: i64,

    /// Tag the resources of up to 50 nodes in one cloud call.
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_value = "false",
        default_missing_value = "true",
        action = ArgAction::Set,
        value_parser = parse_go_bool,
        help_heading = "Tagging controller"
    )]
    pub tagging_controller_enable_batching: bool,
}
