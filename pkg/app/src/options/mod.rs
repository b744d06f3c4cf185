//! Command-line flags of the daemon, with the upstream names, defaults and meanings.
//!
//! Flags are parsed with clap; values that need cross-checks (ports, counts, CIDRs, leader-election timings)
//! are parsed permissively here and checked by [`crate::validation`], so that every bad value gets a specific
//! message. Boolean flags follow the Go convention: `--leader-elect` means true, `--leader-elect=false`
//! turns it off.
//!
//! The defaults of the controllers' flags are read from [`cloud_controllers::config::defaults`], the one
//! place they are written (the controllers' own [`ControllerConfig::default`] reads it too).
//!
//! [`ControllerConfig::default`]: cloud_controllers::ControllerConfig

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Parser, ValueEnum};
use cloud_controllers::config::defaults;

use crate::duration::parse_duration;

/// The help text of a duration flag's default (e.g. `5m`), written once from the typed default.
macro_rules! duration_default {
    ($default:expr) => {{
        static TEXT: std::sync::LazyLock<String> =
            std::sync::LazyLock::new(|| crate::duration::format_duration_compact($default));
        TEXT.as_str()
    }};
}

/// Any text is a path; an empty value means "not given", as upstream treats it.
fn parse_path(text: &str) -> Result<PathBuf, std::convert::Infallible> {
    Ok(PathBuf::from(text))
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// How a dry run prints its report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum DryRunOutput {
    /// A table, one row per change.
    #[default]
    Table,
    /// One JSON document.
    Json,
}

/// Every flag of the cloud-controller-manager.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "cloud-controller-manager",
    about = "Runs the cloud-specific control loops of a Kubernetes cluster against a cloud provider.",
    long_about = None,
    disable_version_flag = true,
    args_override_self = true,
    max_term_width = 120
)]
pub struct Options {
    /// The cloud provider to use (one of the compiled-in providers; see --version).
    #[arg(long, value_name = "NAME", help_heading = "Cloud provider")]
    pub cloud_provider: Option<String>,

    /// Path to the cloud provider's configuration file. Empty for no configuration file.
    #[arg(long, value_name = "PATH", value_parser = parse_path, help_heading = "Cloud provider")]
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
        value_parser = clap::builder::BoolishValueParser::new(),
        help_heading = "Cloud provider"
    )]
    pub allow_untagged_cloud: bool,

    /// Path to a kubeconfig file with authorization and API server location. Without it (and without
    /// --master) the KUBECONFIG environment variable, ~/.kube/config and then the in-cluster service account
    /// are tried.
    #[arg(long, value_name = "PATH", value_parser = parse_path, help_heading = "Kubernetes API")]
    pub kubeconfig: Option<PathBuf>,

    /// The address of the Kubernetes API server (overrides any value in the kubeconfig).
    #[arg(long, value_name = "URL", help_heading = "Kubernetes API")]
    pub master: Option<String>,

    /// Sustained queries per second to the API server (token-bucket rate; events have their own budget).
    #[arg(
        long,
        value_name = "QPS",
        default_value_t = 20.0,
        help_heading = "Kubernetes API"
    )]
    pub kube_api_qps: f64,

    /// Burst of queries to the API server above the sustained rate.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 30,
        help_heading = "Kubernetes API"
    )]
    pub kube_api_burst: i64,

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
        value_parser = clap::builder::BoolishValueParser::new(),
        help_heading = "Kubernetes API"
    )]
    pub use_service_account_credentials: bool,

    /// Controllers to enable: `*` enables all, `name` enables one, `-name` disables one; first match wins.
    /// Names: cloud-node-controller (cloud-node), cloud-node-lifecycle-controller (cloud-node-lifecycle),
    /// service-lb-controller (service), node-route-controller (route), pv-label-controller (pv-label).
    #[arg(
        long,
        value_name = "NAMES",
        value_delimiter = ',',
        default_value = "*",
        help_heading = "Controllers"
    )]
    pub controllers: Vec<String>,

    /// The instance prefix for the cluster (used in cloud resource names).
    #[arg(
        long,
        value_name = "NAME",
        default_value = defaults::CLUSTER_NAME,
        help_heading = "Controllers"
    )]
    pub cluster_name: String,

    /// CIDR range of pods in the cluster: one CIDR, or an IPv4 and an IPv6 CIDR separated by a comma.
    #[arg(
        long,
        value_name = "CIDRS",
        default_value = "",
        help_heading = "Controllers"
    )]
    pub cluster_cidr: String,

    /// Whether Pod CIDRs are allocated to nodes (node-route-controller runs only when this and
    /// --configure-cloud-routes are both true).
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_value_t = defaults::ALLOCATE_NODE_CIDRS,
        default_missing_value = "true",
        action = ArgAction::Set,
        value_parser = clap::builder::BoolishValueParser::new(),
        help_heading = "Controllers"
    )]
    pub allocate_node_cidrs: bool,

    /// Whether CIDRs allocated by --allocate-node-cidrs should be configured on the cloud provider.
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_value_t = defaults::CONFIGURE_CLOUD_ROUTES,
        default_missing_value = "true",
        action = ArgAction::Set,
        value_parser = clap::builder::BoolishValueParser::new(),
        help_heading = "Controllers"
    )]
    pub configure_cloud_routes: bool,

    /// Period of the node-lifecycle pass over all nodes.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = duration_default!(defaults::NODE_MONITOR_PERIOD.get()),
        value_parser = parse_duration,
        help_heading = "Controllers"
    )]
    pub node_monitor_period: Duration,

    /// How long after a Node's creation cloud-node-lifecycle-controller never deletes it because the cloud
    /// cannot find its instance (clouds such as EC2 may not list a just-launched instance at once); 0 turns
    /// the grace off, as upstream's default.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = duration_default!(defaults::INSTANCE_EXISTS_GRACE_PERIOD),
        value_parser = parse_duration,
        help_heading = "Controllers"
    )]
    pub instance_exists_grace_period: Duration,

    /// Period of the node address sync with the cloud.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = duration_default!(defaults::NODE_STATUS_UPDATE_FREQUENCY.get()),
        value_parser = parse_duration,
        help_heading = "Controllers"
    )]
    pub node_status_update_frequency: Duration,

    /// Period of the full route reconciliation.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = duration_default!(defaults::ROUTE_RECONCILIATION_PERIOD.get()),
        value_parser = parse_duration,
        help_heading = "Controllers"
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
        help_heading = "Controllers"
    )]
    pub cloud_call_timeout: Duration,

    /// Number of nodes synced concurrently by cloud-node-controller (at least 1).
    #[arg(
        long,
        value_name = "N",
        default_value_t = defaults::CONCURRENT_NODE_SYNCS.get() as i64,
        help_heading = "Controllers"
    )]
    pub concurrent_node_syncs: i64,

    /// Number of services synced concurrently by service-lb-controller (at least 1).
    #[arg(
        long,
        value_name = "N",
        default_value_t = defaults::CONCURRENT_SERVICE_SYNCS.get() as i64,
        help_heading = "Controllers"
    )]
    pub concurrent_service_syncs: i64,

    /// Largest share of the nodes (in percent, 0-100) that one node-lifecycle pass may delete because the
    /// cloud says their instances are gone; beyond it the deletions are held back and reported.
    #[arg(
        long,
        value_name = "PERCENT",
        default_value_t = i64::from(defaults::NODE_DELETION_MAX_PERCENT.get()),
        help_heading = "Controllers"
    )]
    pub node_deletion_max_percent: i64,

    /// Start a leader election client and gain leadership before running the controllers.
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_value = "true",
        default_missing_value = "true",
        action = ArgAction::Set,
        value_parser = clap::builder::BoolishValueParser::new(),
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

    /// IP address to serve /healthz, /livez, /readyz and /metrics on.
    #[arg(
        long,
        value_name = "IP",
        default_value = "0.0.0.0",
        help_heading = "Serving"
    )]
    pub bind_address: String,

    /// HTTPS port for /healthz, /livez, /readyz and /metrics; 0 disables serving.
    #[arg(
        long,
        value_name = "PORT",
        default_value_t = 10258,
        help_heading = "Serving"
    )]
    pub secure_port: i64,

    /// PEM certificate (chain) for serving; without it a self-signed certificate is made in memory.
    #[arg(long, value_name = "PATH", value_parser = parse_path, help_heading = "Serving")]
    pub tls_cert_file: Option<PathBuf>,

    /// PEM private key matching --tls-cert-file.
    #[arg(long, value_name = "PATH", value_parser = parse_path, help_heading = "Serving")]
    pub tls_private_key_file: Option<PathBuf>,

    /// kubeconfig pointing at the API server that answers TokenReviews (default: the main kubeconfig).
    #[arg(long, value_name = "PATH", value_parser = parse_path, help_heading = "Serving")]
    pub authentication_kubeconfig: Option<PathBuf>,

    /// Do not look up the client CA (ConfigMap kube-system/extension-apiserver-authentication); only
    /// bearer tokens are then accepted.
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_value = "false",
        default_missing_value = "true",
        action = ArgAction::Set,
        value_parser = clap::builder::BoolishValueParser::new(),
        help_heading = "Serving"
    )]
    pub authentication_skip_lookup: bool,

    /// kubeconfig pointing at the API server that answers SubjectAccessReviews (default: the main
    /// kubeconfig).
    #[arg(long, value_name = "PATH", value_parser = parse_path, help_heading = "Serving")]
    pub authorization_kubeconfig: Option<PathBuf>,

    /// Paths served without authentication and authorization; a trailing `*` matches a prefix.
    #[arg(
        long,
        value_name = "PATHS",
        value_delimiter = ',',
        default_value = "/healthz,/readyz,/livez",
        help_heading = "Serving"
    )]
    pub authorization_always_allow_paths: Vec<String>,

    /// Log verbosity like klog: 0-2 info, 3-4 debug, 5 trace of this program, 6-7 plus client/server
    /// debug, 8-10 trace of everything. RUST_LOG, when set, wins.
    #[arg(short = 'v', long = "v", value_name = "N", default_value_t = 0,
          value_parser = clap::value_parser!(u8).range(0..=10), help_heading = "Logging")]
    pub verbosity: u8,

    /// Log format.
    #[arg(long, value_name = "FORMAT", value_enum, default_value_t = LogFormat::Text, help_heading = "Logging")]
    pub log_format: LogFormat,

    /// Make one pass of every enabled controller over the cluster without changing anything (API writes are
    /// sent with dryRun=All, mutating cloud calls are not made), print what would change and exit: 0 when
    /// everything is in sync, 3 when something would change, 1 on errors. Takes no Lease and serves
    /// nothing, so it can run beside the controller manager in charge.
    #[arg(long, action = ArgAction::SetTrue, help_heading = "Dry run")]
    pub dry_run: bool,

    /// The dry run's report format.
    #[arg(long, value_name = "FORMAT", value_enum, default_value_t = DryRunOutput::Table, help_heading = "Dry run")]
    pub dry_run_output: DryRunOutput,

    /// Print the version and the compiled-in cloud providers, then exit.
    #[arg(long, action = ArgAction::SetTrue)]
    pub version: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Options {
        let mut all = vec!["cloud-controller-manager"];
        all.extend_from_slice(args);
        Options::try_parse_from(all).unwrap()
    }

    #[test]
    fn command_is_consistent() {
        Options::command().debug_assert();
    }

    #[test]
    fn upstream_defaults() {
        let o = parse(&[]);
        assert_eq!(o.cloud_provider, None);
        assert_eq!(o.controllers, vec!["*"]);
        assert_eq!(o.cluster_name, "kubernetes");
        assert_eq!(o.cluster_cidr, "");
        assert!(!o.allocate_node_cidrs);
        assert!(o.configure_cloud_routes);
        assert_eq!(o.node_monitor_period, Duration::from_secs(5));
        assert_eq!(o.node_status_update_frequency, Duration::from_secs(300));
        assert_eq!(o.route_reconciliation_period, Duration::from_secs(10));
        assert_eq!(o.cloud_call_timeout, Duration::from_secs(300));
        assert_eq!(
            o.cloud_call_timeout,
            cloud_controllers::config::defaults::CLOUD_CALL_TIMEOUT.get()
        );
        assert_eq!(o.concurrent_node_syncs, 1);
        assert_eq!(o.concurrent_service_syncs, 1);
        assert_eq!(o.kube_api_qps, 20.0);
        assert_eq!(o.kube_api_burst, 30);
        assert!(!o.allow_untagged_cloud);
        assert!(o.leader_elect);
        assert_eq!(o.leader_elect_lease_duration, Duration::from_secs(15));
        assert_eq!(o.leader_elect_renew_deadline, Duration::from_secs(10));
        assert_eq!(o.leader_elect_retry_period, Duration::from_secs(2));
        assert_eq!(o.leader_elect_resource_name, "cloud-controller-manager");
        assert_eq!(o.leader_elect_resource_namespace, "kube-system");
        assert_eq!(o.bind_address, "0.0.0.0");
        assert_eq!(o.secure_port, 10258);
        assert_eq!(
            o.authorization_always_allow_paths,
            vec!["/healthz", "/readyz", "/livez"]
        );
        assert!(!o.authentication_skip_lookup);
        assert_eq!(o.node_deletion_max_percent, 50);
        assert_eq!(o.verbosity, 0);
        assert_eq!(o.log_format, LogFormat::Text);
        assert!(!o.version);
    }

    #[test]
    fn go_style_booleans() {
        let o = parse(&["--leader-elect=false", "--allow-untagged-cloud"]);
        assert!(!o.leader_elect);
        assert!(o.allow_untagged_cloud);
        let o = parse(&[
            "--configure-cloud-routes=false",
            "--allocate-node-cidrs=true",
            "--authentication-skip-lookup=1",
        ]);
        assert!(!o.configure_cloud_routes);
        assert!(o.allocate_node_cidrs);
        assert!(o.authentication_skip_lookup);
    }

    #[test]
    fn klog_verbosity_spellings() {
        assert_eq!(parse(&["-v", "4"]).verbosity, 4);
        assert_eq!(parse(&["-v=3"]).verbosity, 3);
        assert_eq!(parse(&["--v=2"]).verbosity, 2);
        assert_eq!(parse(&["--v", "10"]).verbosity, 10);
        let err = Options::try_parse_from(["ccm", "-v", "11"]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
    }

    #[test]
    fn durations_and_lists() {
        let o = parse(&[
            "--node-monitor-period=1m30s",
            "--route-reconciliation-period",
            "300ms",
            "--controllers=*,-route",
            "--cluster-cidr=10.0.0.0/16,fd00::/48",
        ]);
        assert_eq!(o.node_monitor_period, Duration::from_secs(90));
        assert_eq!(o.route_reconciliation_period, Duration::from_millis(300));
        assert_eq!(o.controllers, vec!["*", "-route"]);
        assert_eq!(o.cluster_cidr, "10.0.0.0/16,fd00::/48");
        let err = Options::try_parse_from(["ccm", "--node-monitor-period=5"]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert!(err.to_string().contains("missing unit"), "{err}");
    }

    #[test]
    fn cloud_call_timeout_takes_go_durations() {
        assert_eq!(
            parse(&["--cloud-call-timeout=1m30s"]).cloud_call_timeout,
            Duration::from_secs(90)
        );
        assert_eq!(
            parse(&["--cloud-call-timeout", "2.5s"]).cloud_call_timeout,
            Duration::from_millis(2500)
        );
        for bad in ["30", "-5s", "soon", ""] {
            let err = Options::try_parse_from(["ccm", &format!("--cloud-call-timeout={bad}")])
                .unwrap_err();
            assert_eq!(err.exit_code(), 2, "{bad:?}");
            assert!(err.to_string().contains("--cloud-call-timeout"), "{err}");
        }
    }

    #[test]
    fn repeated_flags_take_the_last_value() {
        let o = parse(&[
            "--cloud-provider=a",
            "--cloud-provider=b",
            "--secure-port=1",
            "--secure-port=2",
            "--cloud-config=",
        ]);
        assert_eq!(o.cloud_provider.as_deref(), Some("b"));
        assert_eq!(o.secure_port, 2);
        assert_eq!(o.cloud_config, Some(PathBuf::new()));
        // Lists accumulate over repeated flags, like pflag's string slices.
        let o = parse(&["--controllers=cloud-node", "--controllers=route,service"]);
        assert_eq!(o.controllers, vec!["cloud-node", "route", "service"]);
    }

    #[test]
    fn log_format_values() {
        assert_eq!(parse(&["--log-format=json"]).log_format, LogFormat::Json);
        let err = Options::try_parse_from(["ccm", "--log-format=xml"]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
    }
}
