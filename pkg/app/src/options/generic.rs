//! Upstream's "Generic" and "Misc" flags: the cloud provider, the API client, which controllers run and
//! the settings they share, feature gates.

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args};
use cloud_controllers::config::defaults;

use super::values::parse_go_bool;
use crate::duration::parse_duration;

/// Any text is a path; an empty value means "not given", as upstream treats it.
pub(crate) fn parse_path(text: &str) -> Result<PathBuf, std::convert::Infallible> {
    Ok(PathBuf::from(text))
}

/// The cloud provider, the Kubernetes API client and the settings every controller shares.
#[derive(Debug, Clone, Args)]
pub struct GenericOptions {
    /// The cloud provider to use (one of the compiled-in providers; see --version).
    #[arg(long, value_name = "NAME", help_heading = "Generic")]
    pub cloud_provider: Option<String>,

    /// Path to the cloud provider's configuration file. Empty for no configuration file.
    #[arg(long, value_name = "PATH", value_parser = parse_path, help_heading = "Generic")]
    pub cloud_config: Option<PathBuf>,

    /// Allow the provider to run without a cluster ID (resources of several clusters cannot be told apart).
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_value = "false",
        default_missing_value = "true",
        action = ArgAction::Set,
        value_parser = parse_go_bool,
        help_heading = "Generic"
    )]
    pub allow_untagged_cloud: bool,

    /// Path to a kubeconfig file with authorization and API server location. Without it (and without
    /// --master) the KUBECONFIG environment variable, ~/.kube/config and then the in-cluster service account
    /// are tried.
    #[arg(long, value_name = "PATH", value_parser = parse_path, help_heading = "Misc")]
    pub kubeconfig: Option<PathBuf>,

    /// The address of the Kubernetes API server (overrides any value in the kubeconfig).
    #[arg(long, value_name = "URL", help_heading = "Misc")]
    pub master: Option<String>,

    /// Sustained queries per second to the API server (token-bucket rate; events have their own budget).
    #[arg(
        long,
        value_name = "QPS",
        default_value_t = 20.0,
        help_heading = "Generic"
    )]
    pub kube_api_qps: f64,

    /// Burst of queries to the API server above the sustained rate.
    #[arg(long, value_name = "N", default_value_t = 30, help_heading = "Generic")]
    pub kube_api_burst: i64,

    /// Content type of requests sent to the API server. Accepted and ignored: the API client speaks JSON.
    #[arg(
        long,
        value_name = "TYPE",
        default_value = "application/vnd.kubernetes.protobuf",
        help_heading = "Generic"
    )]
    pub kube_api_content_type: String,

    /// Give every controller an API client of its own that authenticates as the controller's ServiceAccount
    /// in kube-system (named after the controller, e.g. cloud-node-controller), with tokens from the
    /// TokenRequest API refreshed before they expire. Watches and events keep this process' credentials.
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_value = "false",
        default_missing_value = "true",
        action = ArgAction::Set,
        value_parser = parse_go_bool,
        help_heading = "Generic"
    )]
    pub use_service_account_credentials: bool,

    /// Controllers to enable: `*` enables all, `name` enables one, `-name` disables one; first match wins.
    /// Names: cloud-node-controller (cloud-node), cloud-node-lifecycle-controller (cloud-node-lifecycle),
    /// service-lb-controller (service), node-route-controller (route), pv-label-controller (pv-label),
    /// tagging-controller (tagging), and the provider's own.
    #[arg(
        long,
        value_name = "NAMES",
        value_delimiter = ',',
        default_value = "*",
        help_heading = "Generic"
    )]
    pub controllers: Vec<String>,

    /// The instance prefix for the cluster (used in cloud resource names).
    #[arg(
        long,
        value_name = "NAME",
        default_value = defaults::CLUSTER_NAME,
        help_heading = "Generic"
    )]
    pub cluster_name: String,

    /// CIDR range of pods in the cluster: one CIDR, or an IPv4 and an IPv6 CIDR separated by a comma.
    #[arg(
        long,
        value_name = "CIDRS",
        default_value = "",
        help_heading = "Generic"
    )]
    pub cluster_cidr: String,

    /// Accepted as upstream's: pod CIDRs come from kube-controller-manager or another allocator, and, as
    /// upstream since Kubernetes 1.21, the flag does not decide whether routes are configured.
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_value_t = defaults::ALLOCATE_NODE_CIDRS,
        default_missing_value = "true",
        action = ArgAction::Set,
        value_parser = parse_go_bool,
        help_heading = "Generic"
    )]
    pub allocate_node_cidrs: bool,

    /// Type of CIDR allocator. Accepted and ignored: no controller here allocates pod CIDRs.
    #[arg(
        long,
        value_name = "TYPE",
        default_value = "RangeAllocator",
        help_heading = "Generic"
    )]
    pub cidr_allocator_type: String,

    /// Configure cloud routes for the nodes' pod CIDRs (node-route-controller; needs --cluster-cidr).
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_value_t = defaults::CONFIGURE_CLOUD_ROUTES,
        default_missing_value = "true",
        action = ArgAction::Set,
        value_parser = parse_go_bool,
        help_heading = "Generic"
    )]
    pub configure_cloud_routes: bool,

    /// The volume plugin kube-controller-manager uses with an external cloud provider. Accepted and
    /// ignored: no volume controller runs here.
    #[arg(
        long,
        value_name = "PLUGIN",
        default_value = "",
        help_heading = "Generic"
    )]
    pub external_cloud_volume_plugin: String,

    /// Deprecated upstream, where it does nothing either. Accepted and ignored.
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = parse_duration, hide = true)]
    pub node_sync_period: Duration,

    /// Wait between starting controllers: after each controller that starts, a random time between this
    /// and twice this.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "0s",
        value_parser = parse_duration,
        help_heading = "Generic"
    )]
    pub controller_start_interval: Duration,

    /// Resync period of upstream's informers. Accepted and ignored: the shared watches do not replay their
    /// caches; the controllers' periodic passes and retries do what a resync does upstream.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "12h",
        value_parser = parse_duration,
        help_heading = "Generic"
    )]
    pub min_resync_period: Duration,

    /// Feature gates as key=value pairs (e.g. LoggingAlphaOptions=true); every gate of upstream's
    /// cloud-controller-manager is known (see the README for what each does here).
    #[arg(
        long,
        value_name = "NAME=BOOL,...",
        value_delimiter = ',',
        help_heading = "Generic"
    )]
    pub feature_gates: Vec<String>,
}
