//! Leader election and leader migration flags.

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args};

use super::generic::parse_path;
use super::values::parse_go_bool;
use crate::duration::parse_duration;

/// Leader election on a Lease, and the migration Lease shared with kube-controller-manager.
#[derive(Debug, Clone, Args)]
pub struct LeaderElectionOptions {
    /// Start a leader election client and gain leadership before running the controllers.
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_value = "true",
        default_missing_value = "true",
        action = ArgAction::Set,
        value_parser = parse_go_bool,
        help_heading = "Leader election"
    )]
    pub leader_elect: bool,

    /// How long standbys wait after the last observed renewal before taking the lease over.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = parse_duration, help_heading = "Leader election")]
    pub leader_elect_lease_duration: Duration,

    /// How long the leader keeps trying to renew before it gives up leadership (and exits).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration, help_heading = "Leader election")]
    pub leader_elect_renew_deadline: Duration,

    /// Wait between attempts to acquire or renew the lease.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration, help_heading = "Leader election")]
    pub leader_elect_retry_period: Duration,

    /// The kind of object locked for leader election: `leases`, the only kind upstream still supports.
    #[arg(
        long,
        value_name = "KIND",
        default_value = "leases",
        help_heading = "Leader election"
    )]
    pub leader_elect_resource_lock: String,

    /// Name of the Lease object used for leader election.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "cloud-controller-manager",
        help_heading = "Leader election"
    )]
    pub leader_elect_resource_name: String,

    /// Namespace of the Lease object used for leader election.
    #[arg(
        long,
        value_name = "NAMESPACE",
        default_value = "kube-system",
        help_heading = "Leader election"
    )]
    pub leader_elect_resource_namespace: String,

    /// Run the controllers the leader migration configuration names under a second Lease, shared with
    /// kube-controller-manager, while moving cloud controllers out of it.
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_value = "false",
        default_missing_value = "true",
        action = ArgAction::Set,
        value_parser = parse_go_bool,
        help_heading = "Leader migration"
    )]
    pub enable_leader_migration: bool,

    /// A LeaderMigrationConfiguration file (controllermanager.config.k8s.io v1alpha1, v1beta1 or v1);
    /// empty for upstream's default configuration.
    #[arg(long, value_name = "PATH", value_parser = parse_path, help_heading = "Leader migration")]
    pub leader_migration_config: Option<PathBuf>,
}
