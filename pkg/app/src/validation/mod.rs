//! Validation of the parsed flags into an [`AppConfig`]: every bad value gets a specific message, and the
//! daemon exits with code 2 (a usage error) when any is found. The HTTPS endpoints' flags are checked in
//! [`serving`].

pub mod serving;

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use cloud_controllers::{
    CloudCallTimeout, CloudCallTimeoutError, ClusterCidrs, ControllerConfig, NonZeroDuration,
    Percent, Period, PeriodError, TaggingConfig,
};
use cloud_provider::RegistryError;

pub use self::serving::{
    AuthenticationSettings, AuthorizationSettings, CertChoice, KNOWN_WEBHOOKS, ServingSettings,
    WebhookServing, WebhookSettings,
};
use crate::build_info::BuildInfo;
use crate::client::RateLimits;
use crate::controllers_flag::ControllerSelection;
use crate::duration::format_duration;
use crate::feature_gates::FeatureGates;
use crate::leader::{LeaderElectionConfig, LeaseDuration, LeaseDurationError};
use crate::leader_migration::{LEASES, LeaderMigrationConfig};
use crate::logging::LogSettings;
use crate::options::values::VersionFlag;
use crate::options::{ControllerOptions, DryRunOutput, IgnoredFlag, Options};

/// client-go's jitter factor for leader-election retries: the renew deadline must exceed
/// `JITTER_FACTOR * retry period`.
pub const JITTER_FACTOR: f64 = 1.2;

/// Leader-election settings (present when `--leader-elect=true`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderElectionSettings {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// `--leader-elect-lease-duration`.
    pub lease_duration: LeaseDuration,
    /// `--leader-elect-renew-deadline`.
    pub renew_deadline: Duration,
    /// `--leader-elect-retry-period`.
    pub retry_period: Duration,
    /// `--enable-leader-migration`: the migration configuration (the file's, or upstream's default).
    pub migration: Option<LeaderMigrationConfig>,
}

impl LeaderElectionSettings {
    /// The elector configuration for `identity`.
    pub fn elector_config(&self, identity: &str) -> LeaderElectionConfig {
        self.elector_config_for(&self.name, identity)
    }

    /// The elector configuration of the Lease `name` (the main one, or leader migration's) for `identity`:
    /// the same namespace and timings.
    pub fn elector_config_for(&self, name: &str, identity: &str) -> LeaderElectionConfig {
        LeaderElectionConfig {
            namespace: self.namespace.clone(),
            name: name.to_string(),
            identity: identity.to_string(),
            lease_duration: self.lease_duration,
            renew_deadline: self.renew_deadline,
            retry_period: self.retry_period,
        }
    }
}

/// The validated configuration of one daemon run.
#[derive(Debug, Clone)]
pub struct AppConfig {
    /// `--cloud-provider`.
    pub cloud_provider: String,
    /// `--cloud-config`.
    pub cloud_config: Option<PathBuf>,
    /// `--allow-untagged-cloud`.
    pub allow_untagged_cloud: bool,
    /// `--kubeconfig`.
    pub kubeconfig: Option<PathBuf>,
    /// `--master`.
    pub master: Option<String>,
    /// `--kube-api-qps` and `--kube-api-burst`: the controllers' budget of API requests.
    pub kube_api_limits: RateLimits,
    /// `--use-service-account-credentials`: each controller writes as its own ServiceAccount.
    pub use_service_account_credentials: bool,
    /// The `--controllers` entries; which controllers they enable is known once the provider is built
    /// ([`ControllerSelection::resolve`]).
    pub controllers: ControllerSelection,
    /// The settings handed to the controllers.
    pub controller_config: Arc<ControllerConfig>,
    /// Leader election, or `None` with `--leader-elect=false`.
    pub leader_election: Option<LeaderElectionSettings>,
    /// Serving, or `None` with `--secure-port=0`.
    pub serving: Option<ServingSettings>,
    /// The webhooks and their endpoint.
    pub webhook: WebhookSettings,
    /// Logging.
    pub logging: LogSettings,
    /// `--feature-gates`.
    pub feature_gates: FeatureGates,
    /// `--dry-run`, with its `--dry-run-output`.
    pub dry_run: Option<DryRunOutput>,
    /// What this build is (with the version `--version=vX.Y.Z` reports).
    pub build_info: BuildInfo,
    /// The `/configz` document.
    pub configz: serde_json::Value,
    /// The flags given that this daemon ignores, each logged once at start-up.
    pub ignored_flags: Vec<IgnoredFlag>,
}

/// Every problem found in the flags, one message each, in flag order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.join("\n"))]
pub struct ValidationErrors(pub Vec<String>);

/// Checks the flags and builds the configuration. `providers` are the compiled-in provider names (they
/// appear in the message for an empty or `external` `--cloud-provider`).
pub fn validate(options: &Options, providers: &[String]) -> Result<AppConfig, ValidationErrors> {
    let mut errors = Vec::new();
    let generic = &options.generic;
    let cloud_provider = validate_cloud_provider(options, providers, &mut errors);
    let kube_api_limits = validate_kube_api(options, &mut errors);
    let controllers = validate_controllers(options, &mut errors);
    let controller_config = validate_controller_config(options, &mut errors);
    let feature_gates = FeatureGates::parse(&generic.feature_gates)
        .map_err(|err| errors.push(format!("--feature-gates: {err}")))
        .unwrap_or_default();
    let leader_election = if options.leader_election.leader_elect {
        validate_leader_election(options, &mut errors)
    } else {
        None
    };
    let serving = serving::validate_serving(options, &feature_gates, &mut errors);
    let webhook = serving::validate_webhook(options, &feature_gates, &mut errors);
    let logging = LogSettings::from_options(&options.logging, &feature_gates)
        .map_err(|mut problems| errors.append(&mut problems))
        .unwrap_or_default();

    let (Some(kube_api_limits), Some(controller_config), true) =
        (kube_api_limits, controller_config, errors.is_empty())
    else {
        return Err(ValidationErrors(errors));
    };
    let reported_version = match &options.version {
        VersionFlag::Report(version) => Some(version.as_str()),
        _ => None,
    };
    Ok(AppConfig {
        cloud_provider,
        cloud_config: non_empty_path(&generic.cloud_config),
        allow_untagged_cloud: generic.allow_untagged_cloud,
        kubeconfig: non_empty_path(&generic.kubeconfig),
        master: generic.master.clone().filter(|m| !m.is_empty()),
        kube_api_limits,
        use_service_account_credentials: generic.use_service_account_credentials,
        controllers,
        controller_config: Arc::new(controller_config),
        leader_election,
        serving,
        webhook,
        logging,
        feature_gates,
        dry_run: options.dry_run.then_some(options.dry_run_output),
        build_info: BuildInfo::current(reported_version),
        configz: crate::configz::document(options),
        ignored_flags: Vec::new(),
    })
}

/// A path flag's value; an empty one means "not given", as upstream treats it.
pub(crate) fn non_empty_path(path: &Option<PathBuf>) -> Option<PathBuf> {
    path.clone().filter(|p| !p.as_os_str().is_empty())
}

/// `--cloud-provider`, trimmed: neither empty nor `external`.
fn validate_cloud_provider(
    options: &Options,
    providers: &[String],
    errors: &mut Vec<String>,
) -> String {
    let known = if providers.is_empty() {
        "none".to_string()
    } else {
        providers.join(", ")
    };
    let cloud_provider = options
        .generic
        .cloud_provider
        .as_deref()
        .map(str::trim)
        .unwrap_or_default()
        .to_string();
    if cloud_provider.is_empty() {
        errors.push(format!(
            "--cloud-provider: {} (compiled-in providers: {known})",
            RegistryError::Empty
        ));
    } else if cloud_provider == cloud_provider::EXTERNAL_PROVIDER_NAME {
        errors.push(format!(
            "--cloud-provider: {} (compiled-in providers: {known})",
            RegistryError::External
        ));
    }
    cloud_provider
}

/// `--master` (a URL), and the budget of `--kube-api-qps` (greater than 0) and `--kube-api-burst` (at
/// least 1).
fn validate_kube_api(options: &Options, errors: &mut Vec<String>) -> Option<RateLimits> {
    let options = &options.generic;
    if let Some(master) = &options.master
        && (master.parse::<http::Uri>().is_err() || !master.contains("://"))
    {
        errors.push(format!(
            "--master {master:?} is not a URL (expected e.g. https://10.0.0.1:6443)"
        ));
    }
    if !RateLimits::is_rate(options.kube_api_qps) {
        errors.push(format!(
            "--kube-api-qps must be greater than 0, got {}",
            options.kube_api_qps
        ));
    }
    match u32::try_from(options.kube_api_burst) {
        Ok(burst) if burst >= 1 => RateLimits::new(options.kube_api_qps, burst),
        _ => {
            errors.push(format!(
                "--kube-api-burst must be at least 1, got {}",
                options.kube_api_burst
            ));
            None
        }
    }
}

/// The `--controllers` entries (which controllers they name is checked once the provider is known).
fn validate_controllers(options: &Options, errors: &mut Vec<String>) -> ControllerSelection {
    match ControllerSelection::parse(&options.generic.controllers) {
        Ok(controllers) => controllers,
        Err(message) => {
            errors.push(message);
            ControllerSelection::parse(&[]).expect("no entries")
        }
    }
}

/// The settings of the controllers, in flag order: `--cluster-name` to `--node-deletion-max-percent`.
/// `None` when one of them is bad (its error is in `errors`).
fn validate_controller_config(
    options: &Options,
    errors: &mut Vec<String>,
) -> Option<ControllerConfig> {
    let generic = &options.generic;
    let options = &options.controllers;
    if generic.cluster_name.trim().is_empty() {
        errors.push("--cluster-name must not be empty".to_string());
    }
    let cluster_cidrs = parse_cluster_cidrs(&generic.cluster_cidr)
        .map_err(|message| errors.push(message))
        .ok();
    let node_monitor_period = period("--node-monitor-period", options.node_monitor_period, errors);
    let node_status_update_frequency = non_zero(
        "--node-status-update-frequency",
        options.node_status_update_frequency,
        errors,
    );
    let route_reconciliation_period = period(
        "--route-reconciliation-period",
        options.route_reconciliation_period,
        errors,
    );
    let cloud_call_timeout = cloud_call_timeout(options.cloud_call_timeout, errors);
    let concurrent_node_syncs = positive_count(
        "--concurrent-node-syncs",
        options.concurrent_node_syncs,
        errors,
    );
    let concurrent_service_syncs = positive_count(
        "--concurrent-service-syncs",
        options.concurrent_service_syncs,
        errors,
    );
    let node_deletion_max_percent = percent(
        "--node-deletion-max-percent",
        options.node_deletion_max_percent,
        errors,
    );
    if options.concurrent_node_lifecycle_syncs < 1 {
        errors.push(format!(
            "--concurrent-node-lifecycle-syncs must be at least 1, got {}",
            options.concurrent_node_lifecycle_syncs
        ));
    }
    Some(ControllerConfig {
        cluster_name: generic.cluster_name.trim().to_string(),
        cluster_cidrs: cluster_cidrs?,
        allocate_node_cidrs: generic.allocate_node_cidrs,
        configure_cloud_routes: generic.configure_cloud_routes,
        node_monitor_period: node_monitor_period?,
        instance_exists_grace_period: options.instance_exists_grace_period,
        node_status_update_frequency: Some(node_status_update_frequency?),
        route_reconciliation_period: route_reconciliation_period?,
        concurrent_node_syncs: concurrent_node_syncs?,
        concurrent_service_syncs: concurrent_service_syncs?,
        node_deletion_max_percent: node_deletion_max_percent?,
        cloud_call_timeout: cloud_call_timeout?,
        controller_start_interval: generic.controller_start_interval,
        // The controllers' own clients need the API server; they are made once leadership is won.
        controller_clients: Default::default(),
        event_clients: Default::default(),
        // A dry run's log is made when the dry run starts.
        dry_run: None,
        tagging: tagging_config(options),
    })
}

/// The tagging controller's flags as given: they are checked when the controller starts (upstream checks
/// them only then). Later `--tags` occurrences add to earlier ones, as pflag merges them.
fn tagging_config(options: &ControllerOptions) -> TaggingConfig {
    TaggingConfig {
        tags: options.tags.iter().flatten().cloned().collect(),
        resources: options.resources.clone(),
        rate_limit: options.tagging_controller_rate_limit,
        burst_limit: options.tagging_controller_burst_limit,
        workers: options.tagging_controller_concurrent_node_syncs,
        batching: options.tagging_controller_enable_batching,
    }
}

/// The period of a controller's pass: at least [`Period::MIN`] (a shorter one is refused, never raised).
fn period(flag: &str, value: Duration, errors: &mut Vec<String>) -> Option<Period> {
    Period::new(value)
        .map_err(|error| {
            errors.push(match error {
                PeriodError::Zero => format!("{flag} must be greater than 0"),
                PeriodError::TooShort { got } => format!(
                    "{flag} must be at least {}, got {}",
                    format_duration(Period::MIN),
                    format_duration(got)
                ),
            })
        })
        .ok()
}

/// A duration greater than 0.
fn non_zero(flag: &str, value: Duration, errors: &mut Vec<String>) -> Option<NonZeroDuration> {
    let duration = NonZeroDuration::new(value);
    if duration.is_none() {
        errors.push(format!("{flag} must be greater than 0"));
    }
    duration
}

/// `--cloud-call-timeout`: greater than 0, at most [`CloudCallTimeout::MAX`].
fn cloud_call_timeout(value: Duration, errors: &mut Vec<String>) -> Option<CloudCallTimeout> {
    CloudCallTimeout::new(value)
        .map_err(|error| {
            errors.push(match error {
                CloudCallTimeoutError::Zero => {
                    "--cloud-call-timeout must be greater than 0".to_string()
                }
                CloudCallTimeoutError::TooLong { got } => format!(
                    "--cloud-call-timeout must be at most {}, got {}",
                    format_duration(CloudCallTimeout::MAX),
                    format_duration(got)
                ),
            })
        })
        .ok()
}

/// A count of workers: at least 1.
fn positive_count(flag: &str, value: i64, errors: &mut Vec<String>) -> Option<NonZeroUsize> {
    let count = usize::try_from(value).ok().and_then(NonZeroUsize::new);
    if count.is_none() {
        errors.push(format!("{flag} must be at least 1, got {value}"));
    }
    count
}

/// A share in percent: 0 to 100.
fn percent(flag: &str, value: i64, errors: &mut Vec<String>) -> Option<Percent> {
    let percent = u32::try_from(value).ok().and_then(Percent::new);
    if percent.is_none() {
        errors.push(format!("{flag} must be between 0 and 100, got {value}"));
    }
    percent
}

/// Parses `--cluster-cidr`: empty, one CIDR, or one IPv4 and one IPv6 CIDR. The one parser of the flag:
/// the controllers take the result as it is.
pub fn parse_cluster_cidrs(value: &str) -> Result<ClusterCidrs, String> {
    ClusterCidrs::parse(value).map_err(|error| error.to_string())
}

/// The `--leader-elect-*` timings and Lease name (checked only with `--leader-elect=true`).
fn validate_leader_election(
    options: &Options,
    errors: &mut Vec<String>,
) -> Option<LeaderElectionSettings> {
    let options = &options.leader_election;
    let lease = options.leader_elect_lease_duration;
    let renew = options.leader_elect_renew_deadline;
    let retry = options.leader_elect_retry_period;
    let before = errors.len();
    let lease_duration = LeaseDuration::new(lease)
        .map_err(|error| {
            errors.push(match error {
                LeaseDurationError::TooShort => format!(
                    "--leader-elect-lease-duration must be at least {} (the Lease stores whole seconds), \
                     got {}",
                    format_duration(LeaseDuration::MIN),
                    format_duration(lease)
                ),
                LeaseDurationError::TooLong => format!(
                    "--leader-elect-lease-duration must be at most {} (the Lease stores whole seconds in \
                     32 bits), got {}",
                    format_duration(LeaseDuration::MAX),
                    format_duration(lease)
                ),
            })
        })
        .ok();
    if renew.is_zero() {
        errors.push("--leader-elect-renew-deadline must be greater than 0".to_string());
    } else if renew >= lease {
        errors.push(format!(
            "--leader-elect-renew-deadline ({}) must be less than --leader-elect-lease-duration ({})",
            format_duration(renew),
            format_duration(lease)
        ));
    }
    if retry.is_zero() {
        errors.push("--leader-elect-retry-period must be greater than 0".to_string());
    } else if !renew.is_zero() && renew.as_secs_f64() <= JITTER_FACTOR * retry.as_secs_f64() {
        errors.push(format!(
            "--leader-elect-renew-deadline ({}) must be greater than {JITTER_FACTOR} x \
             --leader-elect-retry-period ({})",
            format_duration(renew),
            format_duration(retry)
        ));
    }
    if options.leader_elect_resource_name.trim().is_empty() {
        errors.push("--leader-elect-resource-name must not be empty".to_string());
    }
    if options.leader_elect_resource_namespace.trim().is_empty() {
        errors.push("--leader-elect-resource-namespace must not be empty".to_string());
    }
    if options.leader_elect_resource_lock != LEASES {
        errors.push(format!(
            "--leader-elect-resource-lock: resourceLock value must be \"leases\", got {:?}",
            options.leader_elect_resource_lock
        ));
    }
    let migration = options
        .enable_leader_migration
        .then(|| match non_empty_path(&options.leader_migration_config) {
            Some(path) => LeaderMigrationConfig::read(&path).map_err(|err| {
                errors.push(format!(
                    "--leader-migration-config: failed to parse leader migration configuration: {err}"
                ))
            }),
            None => Ok(LeaderMigrationConfig::upstream_default()),
        })
        .transpose()
        .ok()
        .flatten();
    if errors.len() != before {
        return None;
    }
    Some(LeaderElectionSettings {
        namespace: options.leader_elect_resource_namespace.trim().to_string(),
        name: options.leader_elect_resource_name.trim().to_string(),
        lease_duration: lease_duration?,
        renew_deadline: renew,
        retry_period: retry,
        migration,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use cloud_controllers::ControllerName;

    fn providers() -> Vec<String> {
        vec!["aws".to_string(), "fake".to_string()]
    }

    fn options(extra: &[&str]) -> Options {
        let mut args = vec!["ccm", "--cloud-provider=fake"];
        args.extend_from_slice(extra);
        Options::try_parse_from(args).unwrap()
    }

    fn errors_for(extra: &[&str]) -> Vec<String> {
        match validate(&options(extra), &providers()) {
            Ok(_) => Vec::new(),
            Err(ValidationErrors(errors)) => errors,
        }
    }

    /// One bad value per row, with its exact message.
    const BAD_VALUES: &[(&[&str], &str)] = &[
        (
            &["--concurrent-node-syncs=0"],
            "--concurrent-node-syncs must be at least 1, got 0",
        ),
        (
            &["--concurrent-node-syncs=-3"],
            "--concurrent-node-syncs must be at least 1, got -3",
        ),
        (
            &["--concurrent-service-syncs=0"],
            "--concurrent-service-syncs must be at least 1, got 0",
        ),
        (
            &["--cluster-cidr=10.0.0.0/33"],
            "--cluster-cidr: \"10.0.0.0/33\" is not a valid CIDR (expected e.g. 10.244.0.0/16)",
        ),
        (
            &["--cluster-cidr=banana"],
            "--cluster-cidr: \"banana\" is not a valid CIDR (expected e.g. 10.244.0.0/16)",
        ),
        (
            &["--cluster-cidr=10.0.0.0/16,fd00::/48,10.1.0.0/16"],
            "--cluster-cidr accepts at most two CIDRs (one IPv4 and one IPv6), got 3",
        ),
        (
            &["--cluster-cidr=10.0.0.0/16,10.1.0.0/16"],
            "--cluster-cidr \"10.0.0.0/16,10.1.0.0/16\": a dual-stack value needs one IPv4 and one IPv6 \
             CIDR, got two of the same family",
        ),
        (
            &["--cluster-cidr=fd00::/48,fd01::/48"],
            "--cluster-cidr \"fd00::/48,fd01::/48\": a dual-stack value needs one IPv4 and one IPv6 \
             CIDR, got two of the same family",
        ),
        (
            &["--leader-elect-renew-deadline=15s"],
            "--leader-elect-renew-deadline (15s) must be less than --leader-elect-lease-duration (15s)",
        ),
        (
            &[
                "--leader-elect-renew-deadline=20s",
                "--leader-elect-lease-duration=15s",
            ],
            "--leader-elect-renew-deadline (20s) must be less than --leader-elect-lease-duration (15s)",
        ),
        (
            &["--leader-elect-retry-period=0s"],
            "--leader-elect-retry-period must be greater than 0",
        ),
        (
            &["--leader-elect-retry-period=9s"],
            "--leader-elect-renew-deadline (10s) must be greater than 1.2 x --leader-elect-retry-period \
             (9s)",
        ),
        (
            &["--leader-elect-renew-deadline=0s"],
            "--leader-elect-renew-deadline must be greater than 0",
        ),
        (
            &[
                "--leader-elect-lease-duration=500ms",
                "--leader-elect-renew-deadline=400ms",
                "--leader-elect-retry-period=100ms",
            ],
            "--leader-elect-lease-duration must be at least 1s (the Lease stores whole seconds), got 500ms",
        ),
        (
            &[
                "--leader-elect-lease-duration=596523h14m8s",
                "--leader-elect-renew-deadline=10s",
            ],
            "--leader-elect-lease-duration must be at most 596523h14m7s (the Lease stores whole \
             seconds in 32 bits), got 596523h14m8s",
        ),
        (
            &["--leader-elect-resource-name="],
            "--leader-elect-resource-name must not be empty",
        ),
        (
            &["--leader-elect-resource-namespace= "],
            "--leader-elect-resource-namespace must not be empty",
        ),
        (
            &["--secure-port=70000"],
            "--secure-port must be between 0 and 65535 (0 disables serving), got 70000",
        ),
        (
            &["--secure-port=-1"],
            "--secure-port must be between 0 and 65535 (0 disables serving), got -1",
        ),
        (
            &["--tls-cert-file=/tmp/cert.pem"],
            "--tls-cert-file requires --tls-private-key-file",
        ),
        (
            &["--tls-private-key-file=/tmp/key.pem"],
            "--tls-private-key-file requires --tls-cert-file",
        ),
        (
            &["--bind-address=localhost"],
            "--bind-address \"localhost\" is not an IP address",
        ),
        (
            &["--node-deletion-max-percent=101"],
            "--node-deletion-max-percent must be between 0 and 100, got 101",
        ),
        (
            &["--node-deletion-max-percent=-1"],
            "--node-deletion-max-percent must be between 0 and 100, got -1",
        ),
        (
            &["--kube-api-qps=0"],
            "--kube-api-qps must be greater than 0, got 0",
        ),
        (
            &["--kube-api-burst=0"],
            "--kube-api-burst must be at least 1, got 0",
        ),
        (
            &["--node-monitor-period=0s"],
            "--node-monitor-period must be greater than 0",
        ),
        (
            &["--node-monitor-period=1ms"],
            "--node-monitor-period must be at least 10ms, got 1ms",
        ),
        (
            &["--route-reconciliation-period=9.999ms"],
            "--route-reconciliation-period must be at least 10ms, got 9.999ms",
        ),
        (
            &["--node-status-update-frequency=0"],
            "--node-status-update-frequency must be greater than 0",
        ),
        (
            &["--route-reconciliation-period=0ms"],
            "--route-reconciliation-period must be greater than 0",
        ),
        (
            &["--cloud-call-timeout=0s"],
            "--cloud-call-timeout must be greater than 0",
        ),
        (
            &["--cloud-call-timeout=1h0m0.001s"],
            "--cloud-call-timeout must be at most 1h0m0s, got 1h0m0.001s",
        ),
        (
            &["--cloud-call-timeout=48h"],
            "--cloud-call-timeout must be at most 1h0m0s, got 48h0m0s",
        ),
        (&["--cluster-name="], "--cluster-name must not be empty"),
        (
            &["--master=not a url"],
            "--master \"not a url\" is not a URL (expected e.g. https://10.0.0.1:6443)",
        ),
        (
            &["--authorization-always-allow-paths=metrics"],
            "--authorization-always-allow-paths: \"metrics\" must start with \"/\"",
        ),
        (
            &["--authorization-always-allow-paths=/a*b"],
            "--authorization-always-allow-paths: \"/a*b\" may only have \"*\" as its last character",
        ),
        (
            &["--leader-elect-resource-lock=endpointsleases"],
            "--leader-elect-resource-lock: resourceLock value must be \"leases\", got \"endpointsleases\"",
        ),
        (
            &[
                "--enable-leader-migration",
                "--leader-migration-config=/nonexistent",
            ],
            "--leader-migration-config: failed to parse leader migration configuration: unable to read \
             leader migration configuration from \"/nonexistent\": No such file or directory (os error 2)",
        ),
        (
            &["--concurrent-node-lifecycle-syncs=0"],
            "--concurrent-node-lifecycle-syncs must be at least 1, got 0",
        ),
        (
            &["--feature-gates=NoSuchGate=true"],
            "--feature-gates: unrecognized feature gate: NoSuchGate",
        ),
        (
            &["--tls-cipher-suites=FOO"],
            "--tls-cipher-suites: Cipher suite FOO not supported or doesn't exist",
        ),
        (
            &["--tls-min-version=VersionTLS14"],
            "--tls-min-version: unknown tls version \"VersionTLS14\"",
        ),
        (
            &["--webhook-tls-min-version=VersionSSL30"],
            "--webhook-tls-min-version: unknown tls version \"VersionSSL30\"",
        ),
        (
            &["--webhooks=foo"],
            "--webhooks: \"foo\" is not in the list of known webhooks (lb-service)",
        ),
        (
            &["--webhook-secure-port=70000"],
            "--webhook-secure-port must be between 0 and 65535 (0 disables serving), got 70000",
        ),
        (
            &["--requestheader-username-headers=x-remote-user, "],
            "empty value in \"--requestheader-username-headers\"",
        ),
        (
            &["--requestheader-uid-headers=x-uid"],
            "--requestheader-uid-headers is set without specifying the standard X-Remote-Uid header - API \
             aggregation will not work",
        ),
        (
            &[
                "--feature-gates=RemoteRequestHeaderUID=false",
                "--requestheader-uid-headers=X-Remote-Uid",
            ],
            "--requestheader-uid-headers requires the \"RemoteRequestHeaderUID\" feature to be enabled",
        ),
        (
            &["--log-json-split-stream"],
            "--log-json-split-stream: forbidden: the feature gate LoggingAlphaOptions is disabled",
        ),
        (
            &["--cloud-provider="],
            "--cloud-provider: no cloud provider given: the cloud-controller-manager runs the \
             cloud-specific controllers and needs a concrete provider name (--cloud-provider) \
             (compiled-in providers: aws, fake)",
        ),
        (
            &["--cloud-provider=external"],
            "--cloud-provider: cloud provider \"external\" cannot be used here: \"external\" tells \
             kubelets and kube-controller-manager that a separate cloud-controller-manager runs the \
             cloud loops, and this program is that cloud-controller-manager; give it a concrete provider \
             name (--cloud-provider) (compiled-in providers: aws, fake)",
        ),
    ];

    #[test]
    fn bad_values_and_their_messages() {
        for (args, want) in BAD_VALUES {
            assert_eq!(errors_for(args), vec![want.to_string()], "args {args:?}");
        }
    }

    #[test]
    fn service_account_credentials_flag() {
        for (args, want) in [
            (&[][..], false),
            (&["--use-service-account-credentials"][..], true),
            (&["--use-service-account-credentials=true"][..], true),
            (&["--use-service-account-credentials=false"][..], false),
        ] {
            let config = validate(&options(args), &providers()).unwrap();
            assert_eq!(config.use_service_account_credentials, want, "{args:?}");
            assert!(config.controller_config.controller_clients.is_empty());
        }
        let err = Options::try_parse_from([
            "ccm",
            "--cloud-provider=fake",
            "--use-service-account-credentials=maybe",
        ])
        .unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert!(
            err.to_string()
                .contains("invalid value 'maybe' for '--use-service-account-credentials[=<BOOL>]'"),
            "{err}"
        );
    }

    #[test]
    fn leader_election_checks_are_skipped_when_disabled() {
        assert!(errors_for(&["--leader-elect=false", "--leader-elect-retry-period=0s"]).is_empty());
        let config = validate(&options(&["--leader-elect=false"]), &providers()).unwrap();
        assert!(config.leader_election.is_none());
    }

    #[test]
    fn several_errors_are_all_reported() {
        let errors = errors_for(&["--concurrent-node-syncs=0", "--secure-port=99999"]);
        assert_eq!(errors.len(), 2, "{errors:?}");
        let joined = ValidationErrors(errors).to_string();
        assert!(joined.contains('\n'));
    }

    #[test]
    fn no_cloud_provider_flag_is_an_error() {
        let options = Options::try_parse_from(["ccm"]).unwrap();
        let err = validate(&options, &[]).unwrap_err();
        assert!(err.0[0].starts_with("--cloud-provider: no cloud provider given"));
        assert!(err.0[0].ends_with("(compiled-in providers: none)"));
    }

    #[test]
    fn a_good_configuration() {
        let config = validate(
            &options(&[
                "--cluster-cidr=10.244.0.0/16, fd00:10::/56",
                "--allocate-node-cidrs",
                "--controllers=*,-pv-label",
                "--concurrent-node-syncs=4",
                "--node-deletion-max-percent=0",
                "--secure-port=0",
                "--kube-api-qps=5.5",
                "--kube-api-burst=7",
                "--leader-elect-lease-duration=2s",
                "--leader-elect-renew-deadline=1s",
                "--leader-elect-retry-period=500ms",
                "--cloud-config=",
                "--cloud-call-timeout=1h",
            ]),
            &providers(),
        )
        .unwrap();
        assert_eq!(config.cloud_provider, "fake");
        assert_eq!(config.cloud_config, None);
        assert_eq!(config.controller_config.cluster_cidrs.len(), 2);
        assert!(config.controller_config.allocate_node_cidrs);
        assert_eq!(config.controller_config.concurrent_node_syncs.get(), 4);
        assert_eq!(config.controller_config.node_deletion_max_percent.get(), 0);
        assert_eq!(config.controller_config.cluster_name, "kubernetes");
        assert_eq!(
            config.controller_config.cloud_call_timeout.get(),
            Duration::from_secs(3600),
            "the largest value is accepted"
        );
        let controllers = config.controllers.resolve(&[]).unwrap().standard;
        assert!(!controllers.contains(&ControllerName::PvLabel));
        assert_eq!(controllers.len(), 4);
        assert!(config.serving.is_none());
        assert_eq!(config.kube_api_limits.qps(), 5.5);
        assert_eq!(config.kube_api_limits.burst().get(), 7);
        assert!(!config.use_service_account_credentials);
        let le = config.leader_election.unwrap();
        assert_eq!(le.lease_duration.get(), Duration::from_secs(2));
        assert_eq!(le.namespace, "kube-system");
        assert_eq!(le.name, "cloud-controller-manager");
    }

    /// A period the controllers would have to raise is refused at start-up; the minimum itself is taken.
    #[test]
    fn periods_below_the_minimum_are_start_up_errors() {
        let errors = errors_for(&[
            "--node-monitor-period=500us",
            "--route-reconciliation-period=1ms",
        ]);
        assert_eq!(
            errors,
            [
                "--node-monitor-period must be at least 10ms, got 500µs",
                "--route-reconciliation-period must be at least 10ms, got 1ms",
            ]
        );
        let config = validate(
            &options(&[
                "--node-monitor-period=10ms",
                "--route-reconciliation-period=10ms",
            ]),
            &providers(),
        )
        .unwrap();
        let controllers = &config.controller_config;
        assert_eq!(controllers.node_monitor_period.get(), Period::MIN);
        assert_eq!(controllers.route_reconciliation_period.get(), Period::MIN);
    }

    /// The flags' defaults and the controllers' own defaults are the same values, read from one place.
    #[test]
    fn flag_defaults_are_the_controller_defaults() {
        let config = validate(&options(&[]), &providers()).unwrap();
        let flags = &*config.controller_config;
        let own = ControllerConfig::default();
        assert_eq!(flags.cluster_name, own.cluster_name);
        assert_eq!(flags.cluster_cidrs, own.cluster_cidrs);
        assert_eq!(flags.allocate_node_cidrs, own.allocate_node_cidrs);
        assert_eq!(flags.configure_cloud_routes, own.configure_cloud_routes);
        assert_eq!(flags.node_monitor_period, own.node_monitor_period);
        assert_eq!(
            flags.instance_exists_grace_period,
            own.instance_exists_grace_period
        );
        assert_eq!(
            flags.node_status_update_frequency,
            own.node_status_update_frequency
        );
        assert_eq!(
            flags.route_reconciliation_period,
            own.route_reconciliation_period
        );
        assert_eq!(flags.concurrent_node_syncs, own.concurrent_node_syncs);
        assert_eq!(flags.concurrent_service_syncs, own.concurrent_service_syncs);
        assert_eq!(
            flags.node_deletion_max_percent,
            own.node_deletion_max_percent
        );
        assert_eq!(flags.cloud_call_timeout, own.cloud_call_timeout);
    }

    #[test]
    fn serving_settings() {
        let config = validate(
            &options(&[
                "--bind-address=127.0.0.1",
                "--secure-port=8443",
                "--tls-cert-file=/c.pem",
                "--tls-private-key-file=/k.pem",
                "--authorization-always-allow-paths=/healthz,/debug/*",
            ]),
            &providers(),
        )
        .unwrap();
        let serving = config.serving.unwrap();
        assert_eq!(serving.address, "127.0.0.1:8443".parse().unwrap());
        assert_eq!(
            serving.cert,
            CertChoice::Files {
                cert: PathBuf::from("/c.pem"),
                key: PathBuf::from("/k.pem")
            }
        );
        assert_eq!(
            serving.authorization.always_allow_paths,
            vec!["/healthz", "/debug/*"]
        );
        assert!(serving.authentication.lookup);
        assert!(serving.profiling);
        assert!(serving.tls.http2);
    }

    #[test]
    fn upstream_serving_and_auth_flags() {
        let config = validate(
            &options(&[
                "--cert-dir=/var/run/ccm",
                "--tls-min-version=VersionTLS13",
                "--tls-cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_AES_128_GCM_SHA256",
                "--tls-sni-cert-key=a.crt,a.key:a.example.com",
                "--disable-http2-serving",
                "--http2-max-streams-per-connection=42",
                "--permit-port-sharing",
                "--profiling=false",
                "--client-ca-file=/ca.crt",
                "--requestheader-client-ca-file=/front.crt",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-uid-headers=X-Remote-Uid",
                "--authentication-token-webhook-cache-ttl=1m",
                "--authorization-webhook-cache-unauthorized-ttl=2s",
                "--authentication-tolerate-lookup-failure",
            ]),
            &providers(),
        )
        .unwrap();
        let serving = config.serving.unwrap();
        assert_eq!(serving.cert, CertChoice::Dir(PathBuf::from("/var/run/ccm")));
        assert_eq!(
            serving.tls.min_version,
            crate::serving::tls::MinTlsVersion::Tls13
        );
        assert_eq!(serving.tls.cipher_suites.len(), 2);
        assert_eq!(serving.tls.sni[0].names, ["a.example.com"]);
        assert!(!serving.tls.http2);
        assert_eq!(serving.max_concurrent_streams, 42);
        assert!(serving.reuse_port && !serving.reuse_address);
        assert!(!serving.profiling);
        let authn = &serving.authentication;
        assert_eq!(authn.client_ca_file, Some(PathBuf::from("/ca.crt")));
        let (ca, headers) = authn.request_header.clone().unwrap();
        assert_eq!(ca, PathBuf::from("/front.crt"));
        assert_eq!(headers.allowed_names, ["front-proxy-client"]);
        assert_eq!(headers.username_headers, ["x-remote-user"]);
        assert_eq!(headers.uid_headers, ["X-Remote-Uid"]);
        assert_eq!(authn.token_cache_ttl, Duration::from_secs(60));
        assert!(authn.tolerate_lookup_failure);
        assert_eq!(serving.authorization.denied_ttl, Duration::from_secs(2));
    }

    #[test]
    fn generic_upstream_flags() {
        let config = validate(
            &options(&[
                "--controller-start-interval=2s",
                "--feature-gates=LoggingAlphaOptions=true",
                "--log-text-split-stream",
                "--enable-leader-migration",
                "--kube-api-content-type=application/json",
                "--version=v1.37.1",
            ]),
            &providers(),
        )
        .unwrap();
        assert_eq!(
            config.controller_config.controller_start_interval,
            Duration::from_secs(2)
        );
        assert!(config.logging.split_stream);
        let migration = config.leader_election.unwrap().migration.unwrap();
        assert_eq!(migration.leader_name, "cloud-provider-extraction-migration");
        assert_eq!(config.build_info.git_version, "v1.37.1");
        assert_eq!(
            config.configz["cloudcontrollermanager.config.k8s.io"]["Generic"]["ClientConnection"]["contentType"],
            "application/json"
        );
    }

    #[test]
    fn cluster_cidr_parsing() {
        assert!(parse_cluster_cidrs("").unwrap().is_empty());
        assert_eq!(
            parse_cluster_cidrs("10.0.0.0/8").unwrap().as_slice(),
            ["10.0.0.0/8".parse::<ipnet::IpNet>().unwrap()]
        );
        assert_eq!(parse_cluster_cidrs("fd00::/8,10.0.0.0/8").unwrap().len(), 2);
    }
}
