//! Command-line flags of the daemon: every flag of upstream's cloud-controller-manager command
//! (k8s.io/cloud-provider with k8s.io/controller-manager, component-base and apiserver's serving options),
//! with upstream's names, defaults and meanings, and the daemon's own (`--dry-run`, `--cloud-call-timeout`,
//! ...).
//!
//! Flags are parsed with clap, grouped as upstream's help groups them (one module per group); values that
//! need cross-checks (ports, counts, CIDRs, leader-election timings, TLS settings, feature gates) are parsed
//! permissively here and checked by [`crate::validation`], so that every bad value gets a specific message.
//! Boolean flags follow the Go convention: `--leader-elect` means true, `--leader-elect=false` turns it off.
//! Flag names are normalised as upstream's command does (`--min_resync_period` is `--min-resync-period`,
//! see [`normalize_args`]).
//!
//! A flag upstream accepts that cannot mean anything here is accepted, checked like upstream checks it, and
//! named once at start-up as ignored, with the reason ([`IGNORED_FLAGS`]).
//!
//! The defaults of the controllers' flags are read from [`cloud_controllers::config::defaults`], the one
//! place they are written (the controllers' own [`ControllerConfig::default`] reads it too).
//!
//! [`ControllerConfig::default`]: cloud_controllers::ControllerConfig

pub mod controllers;
pub mod generic;
pub mod leader_election;
pub mod logging;
pub mod serving;
pub mod values;
pub mod webhook;

use std::ffi::OsString;

use clap::{ArgAction, ArgMatches, Parser, ValueEnum};

pub use self::controllers::ControllerOptions;
pub use self::generic::GenericOptions;
pub use self::leader_election::LeaderElectionOptions;
pub use self::logging::{LogFormat, LoggingOptions};
pub use self::serving::{AuthenticationOptions, AuthorizationOptions, SecureServingOptions};
pub use self::webhook::WebhookOptions;

/// The help text of a duration flag's default (e.g. `5m`), written once from the typed default.
macro_rules! duration_default {
    ($default:expr) => {{
        static TEXT: std::sync::LazyLock<String> =
            std::sync::LazyLock::new(|| crate::duration::format_duration_compact($default));
        TEXT.as_str()
    }};
}
pub(crate) use duration_default;

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
    /// Cloud provider, API client and the settings every controller shares.
    #[command(flatten)]
    pub generic: GenericOptions,

    /// The controllers' own settings.
    #[command(flatten)]
    pub controllers: ControllerOptions,

    /// Leader election and leader migration.
    #[command(flatten)]
    pub leader_election: LeaderElectionOptions,

    /// The HTTPS endpoint: address, TLS and the debugging handlers.
    #[command(flatten)]
    pub serving: SecureServingOptions,

    /// Who the endpoint's callers are.
    #[command(flatten)]
    pub authentication: AuthenticationOptions,

    /// What the endpoint's callers may do.
    #[command(flatten)]
    pub authorization: AuthorizationOptions,

    /// Cloud provider webhooks and their endpoint.
    #[command(flatten)]
    pub webhook: WebhookOptions,

    /// Log format, verbosity and streams.
    #[command(flatten)]
    pub logging: LoggingOptions,

    /// Make one pass of every enabled controller over the cluster without changing anything (API writes are
    /// sent with dryRun=All, mutating cloud calls are not made), print what would change and exit: 0 when
    /// everything is in sync, 3 when something would change, 1 on errors. Takes no Lease and serves
    /// nothing, so it can run beside the controller manager in charge.
    #[arg(long, action = ArgAction::SetTrue, help_heading = "Dry run")]
    pub dry_run: bool,

    /// The dry run's report format.
    #[arg(long, value_name = "FORMAT", value_enum, default_value_t = DryRunOutput::Table, help_heading = "Dry run")]
    pub dry_run_output: DryRunOutput,

    /// `--version` prints the version and the compiled-in cloud providers and exits; `--version=raw` prints
    /// the version information as JSON; `--version=vX.Y.Z` runs with that version reported (in the build
    /// information metric and `/configz`); `--version=false` runs normally.
    #[arg(
        long,
        value_name = "VERSION",
        num_args = 0..=1,
        require_equals = true,
        default_value = "false",
        default_missing_value = "true",
        value_parser = values::parse_version_flag,
        help_heading = "Global"
    )]
    pub version: values::VersionFlag,
}

/// A flag upstream accepts that does nothing in this daemon, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IgnoredFlag {
    /// The flag's name, without dashes.
    pub name: &'static str,
    /// Why it cannot mean anything here.
    pub reason: &'static str,
}

/// Every upstream flag this daemon accepts and ignores, with the reason (also in the README's flag table:
/// a test compares the two). Each is logged once at start-up when it is given.
pub const IGNORED_FLAGS: &[IgnoredFlag] = &[
    IgnoredFlag {
        name: "cidr-allocator-type",
        reason: "no controller of a cloud-controller-manager allocates pod CIDRs (upstream stores the value \
                 and never reads it either)",
    },
    IgnoredFlag {
        name: "concurrent-node-lifecycle-syncs",
        reason: "the lifecycle pass looks instances up in bulk calls whose concurrency follows the number of \
                 nodes, not one call per node and worker",
    },
    IgnoredFlag {
        name: "concurrent-node-status-updates",
        reason: "the address sync looks instances up in bulk calls (two at a time), not one call per node \
                 and worker",
    },
    IgnoredFlag {
        name: "contention-profiling",
        reason: "Rust has no blocking profile like Go's; --profiling serves CPU and heap profiles",
    },
    IgnoredFlag {
        name: "external-cloud-volume-plugin",
        reason: "it is read by kube-controller-manager's volume controllers, none of which runs here \
                 (upstream's cloud-controller-manager ignores it too)",
    },
    IgnoredFlag {
        name: "kube-api-content-type",
        reason: "the API client speaks JSON only, which every API server serves",
    },
    IgnoredFlag {
        name: "min-resync-period",
        reason: "the shared watches do not replay their caches; the controllers' periodic passes and retries \
                 with backoff do what a resync does for upstream's controllers",
    },
    IgnoredFlag {
        name: "node-sync-period",
        reason: "deprecated upstream, where it does nothing either",
    },
];

/// Normalises flag names as upstream's command does (component-base's word-separator normaliser): in a
/// flag's name, `_` becomes `-`, so `--min_resync_period=1h` is `--min-resync-period=1h`. Values and
/// positional arguments are left alone; everything after `--` too.
pub fn normalize_args(args: Vec<OsString>) -> Vec<OsString> {
    let mut done = false;
    args.into_iter()
        .enumerate()
        .map(|(index, arg)| {
            if index == 0 || done {
                return arg;
            }
            let Some(text) = arg.to_str() else {
                return arg;
            };
            if text == "--" {
                done = true;
                return arg;
            }
            let Some(flag) = text.strip_prefix("--") else {
                return arg;
            };
            let (name, value) = match flag.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None => (flag, None),
            };
            if !name.contains('_') {
                return arg;
            }
            let name = name.replace('_', "-");
            OsString::from(match value {
                Some(value) => format!("--{name}={value}"),
                None => format!("--{name}"),
            })
        })
        .collect()
}

/// The ignored flags (see [`IGNORED_FLAGS`]) given on the command line, each with its reason.
pub fn ignored_flags_given(matches: &ArgMatches) -> Vec<IgnoredFlag> {
    IGNORED_FLAGS
        .iter()
        .filter(|flag| given(matches, flag.name))
        .copied()
        .collect()
}

/// Whether the flag `name` (without dashes) was given on the command line.
pub fn given(matches: &ArgMatches, name: &str) -> bool {
    let id = name.replace('-', "_");
    matches
        .try_get_raw(&id)
        .ok()
        .flatten()
        .is_some_and(|_| matches.value_source(&id) == Some(clap::parser::ValueSource::CommandLine))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use std::path::PathBuf;
    use std::time::Duration;

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
        let g = &o.generic;
        assert_eq!(g.cloud_provider, None);
        assert_eq!(g.controllers, vec!["*"]);
        assert_eq!(g.cluster_name, "kubernetes");
        assert_eq!(g.cluster_cidr, "");
        assert!(!g.allocate_node_cidrs);
        assert!(g.configure_cloud_routes);
        assert_eq!(g.kube_api_qps, 20.0);
        assert_eq!(g.kube_api_burst, 30);
        assert_eq!(
            g.kube_api_content_type,
            "application/vnd.kubernetes.protobuf"
        );
        assert_eq!(g.cidr_allocator_type, "RangeAllocator");
        assert_eq!(g.min_resync_period, Duration::from_secs(12 * 3600));
        assert_eq!(g.controller_start_interval, Duration::ZERO);
        assert!(!g.allow_untagged_cloud);
        let c = &o.controllers;
        assert_eq!(c.node_monitor_period, Duration::from_secs(5));
        assert_eq!(c.node_status_update_frequency, Duration::from_secs(300));
        assert_eq!(c.route_reconciliation_period, Duration::from_secs(10));
        assert_eq!(c.cloud_call_timeout, Duration::from_secs(300));
        assert_eq!(
            c.cloud_call_timeout,
            cloud_controllers::config::defaults::CLOUD_CALL_TIMEOUT.get()
        );
        assert_eq!(c.concurrent_node_syncs, 1);
        assert_eq!(c.concurrent_node_status_updates, 0);
        assert_eq!(c.concurrent_node_lifecycle_syncs, 1);
        assert_eq!(c.concurrent_service_syncs, 1);
        assert_eq!(c.node_deletion_max_percent, 50);
        let le = &o.leader_election;
        assert!(le.leader_elect);
        assert_eq!(le.leader_elect_lease_duration, Duration::from_secs(15));
        assert_eq!(le.leader_elect_renew_deadline, Duration::from_secs(10));
        assert_eq!(le.leader_elect_retry_period, Duration::from_secs(2));
        assert_eq!(le.leader_elect_resource_lock, "leases");
        assert_eq!(le.leader_elect_resource_name, "cloud-controller-manager");
        assert_eq!(le.leader_elect_resource_namespace, "kube-system");
        assert!(!le.enable_leader_migration);
        let s = &o.serving;
        assert_eq!(s.bind_address, "0.0.0.0");
        assert_eq!(s.secure_port, 10258);
        assert!(s.profiling);
        assert!(!s.contention_profiling);
        assert_eq!(
            o.authorization.authorization_always_allow_paths,
            vec!["/healthz", "/readyz", "/livez"]
        );
        assert_eq!(
            o.authorization.authorization_webhook_cache_authorized_ttl,
            Duration::from_secs(10)
        );
        let a = &o.authentication;
        assert!(!a.authentication_skip_lookup);
        assert!(!a.authentication_tolerate_lookup_failure);
        assert_eq!(
            a.authentication_token_webhook_cache_ttl,
            Duration::from_secs(10)
        );
        assert_eq!(a.requestheader_username_headers, vec!["x-remote-user"]);
        assert_eq!(a.requestheader_group_headers, vec!["x-remote-group"]);
        assert_eq!(
            a.requestheader_extra_headers_prefix,
            vec!["x-remote-extra-"]
        );
        assert!(a.requestheader_uid_headers.is_empty());
        assert_eq!(o.webhook.webhook_secure_port, 10260);
        assert!(o.webhook.webhooks.is_empty());
        assert_eq!(o.logging.verbosity, 0);
        assert_eq!(o.logging.logging_format, LogFormat::Text);
        assert_eq!(o.logging.log_flush_frequency, Duration::from_secs(5));
        assert_eq!(o.version, values::VersionFlag::Off);
    }

    #[test]
    fn go_style_booleans() {
        let o = parse(&["--leader-elect=false", "--allow-untagged-cloud"]);
        assert!(!o.leader_election.leader_elect);
        assert!(o.generic.allow_untagged_cloud);
        let o = parse(&[
            "--configure-cloud-routes=false",
            "--allocate-node-cidrs=true",
            "--authentication-skip-lookup=1",
            "--profiling=false",
            "--permit-port-sharing=t",
        ]);
        assert!(!o.generic.configure_cloud_routes);
        assert!(o.generic.allocate_node_cidrs);
        assert!(o.authentication.authentication_skip_lookup);
        assert!(!o.serving.profiling);
        assert!(o.serving.permit_port_sharing);
    }

    #[test]
    fn klog_verbosity_spellings() {
        assert_eq!(parse(&["-v", "4"]).logging.verbosity, 4);
        assert_eq!(parse(&["-v=3"]).logging.verbosity, 3);
        assert_eq!(parse(&["--v=2"]).logging.verbosity, 2);
        assert_eq!(parse(&["--v", "10"]).logging.verbosity, 10);
        // klog takes any 31-bit level; past 10 nothing more is logged.
        assert_eq!(parse(&["--v=100"]).logging.verbosity, 100);
        let err = Options::try_parse_from(["ccm", "-v", "x"]).unwrap_err();
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
        assert_eq!(o.controllers.node_monitor_period, Duration::from_secs(90));
        assert_eq!(
            o.controllers.route_reconciliation_period,
            Duration::from_millis(300)
        );
        assert_eq!(o.generic.controllers, vec!["*", "-route"]);
        assert_eq!(o.generic.cluster_cidr, "10.0.0.0/16,fd00::/48");
        let err = Options::try_parse_from(["ccm", "--node-monitor-period=5"]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert!(err.to_string().contains("missing unit"), "{err}");
    }

    #[test]
    fn cloud_call_timeout_takes_go_durations() {
        assert_eq!(
            parse(&["--cloud-call-timeout=1m30s"])
                .controllers
                .cloud_call_timeout,
            Duration::from_secs(90)
        );
        assert_eq!(
            parse(&["--cloud-call-timeout", "2.5s"])
                .controllers
                .cloud_call_timeout,
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
        assert_eq!(o.generic.cloud_provider.as_deref(), Some("b"));
        assert_eq!(o.serving.secure_port, 2);
        assert_eq!(o.generic.cloud_config, Some(PathBuf::new()));
        // Lists accumulate over repeated flags, like pflag's string slices.
        let o = parse(&["--controllers=cloud-node", "--controllers=route,service"]);
        assert_eq!(
            o.generic.controllers,
            vec!["cloud-node", "route", "service"]
        );
        let o = parse(&["--feature-gates=A=true", "--feature-gates=B=false,C=true"]);
        assert_eq!(o.generic.feature_gates, vec!["A=true", "B=false", "C=true"]);
    }

    #[test]
    fn log_format_values_and_the_older_spelling() {
        assert_eq!(
            parse(&["--logging-format=json"]).logging.logging_format,
            LogFormat::Json
        );
        assert_eq!(
            parse(&["--log-format=json"]).logging.logging_format,
            LogFormat::Json
        );
        let err = Options::try_parse_from(["ccm", "--logging-format=xml"]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
    }

    #[test]
    fn version_flag_forms() {
        assert_eq!(parse(&["--version"]).version, values::VersionFlag::Print);
        assert_eq!(
            parse(&["--version=true"]).version,
            values::VersionFlag::Print
        );
        assert_eq!(
            parse(&["--version=false"]).version,
            values::VersionFlag::Off
        );
        assert_eq!(parse(&["--version=raw"]).version, values::VersionFlag::Raw);
        assert_eq!(
            parse(&["--version=v1.2.3"]).version,
            values::VersionFlag::Report("v1.2.3".to_string())
        );
        assert!(Options::try_parse_from(["ccm", "--version=banana"]).is_err());
    }

    #[test]
    fn flag_names_are_normalised_like_upstream() {
        let args: Vec<OsString> = [
            "ccm",
            "--min_resync_period=1h",
            "--leader_elect",
            "--cluster-name=a_b",
            "-v=2",
            "--",
            "--x_y",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        let normalised: Vec<String> = normalize_args(args)
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        assert_eq!(
            normalised,
            [
                "ccm",
                "--min-resync-period=1h",
                "--leader-elect",
                "--cluster-name=a_b",
                "-v=2",
                "--",
                "--x_y"
            ]
        );
    }

    #[test]
    fn ignored_flags_are_named_only_when_given() {
        let command = Options::command();
        let matches = command
            .clone()
            .try_get_matches_from(["ccm", "--kube-api-content-type=application/json"])
            .unwrap();
        let given: Vec<&str> = ignored_flags_given(&matches)
            .iter()
            .map(|f| f.name)
            .collect();
        assert_eq!(given, ["kube-api-content-type"]);
        let matches = command.try_get_matches_from(["ccm"]).unwrap();
        assert!(ignored_flags_given(&matches).is_empty());
        // Every ignored flag is a flag of the command.
        let names: Vec<String> = Options::command()
            .get_arguments()
            .filter_map(|a| a.get_long().map(str::to_string))
            .collect();
        for flag in IGNORED_FLAGS {
            assert!(names.iter().any(|n| n == flag.name), "{}", flag.name);
        }
    }
}
