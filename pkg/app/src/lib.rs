//! The cloud-controller-manager application: flags, validation, Kubernetes clients, provider start-up,
//! the health/metrics endpoint, leader election and the controllers.
//!
//! A cloud vendor's `main.rs` registers its provider and hands over:
//!
//! ```no_run
//! use std::process::ExitCode;
//! # use std::sync::Arc;
//! # struct MyCloud;
//! # impl cloud_provider::CloudProvider for MyCloud {
//! #     fn provider_name(&self) -> &str { "mycloud" }
//! #     fn has_cluster_id(&self) -> bool { true }
//! # }
//!
//! fn main() -> ExitCode {
//!     let mut registry = cloud_provider::Registry::new();
//!     registry
//!         .register_fn("mycloud", |_config| Ok(Arc::new(MyCloud) as Arc<dyn cloud_provider::CloudProvider>))
//!         .expect("the name is registered once");
//!     ccm_app::run_main(registry)
//! }
//! ```
//!
//! Exit codes: 0 after a clean shutdown (SIGTERM/SIGINT) or `--help`/`--version`, 2 for usage errors
//! (bad flags), 1 for everything else (provider initialization, lost leadership, controller failure).
//! `--dry-run` exits 0 when everything is in sync, 3 when something would change, 1 on errors.

pub mod app;
pub mod build_info;
pub mod client;
pub mod configz;
pub mod connections;
pub mod controllers_flag;
pub mod dry_run;
pub mod duration;
pub mod feature_gates;
pub mod leader;
pub mod leader_migration;
pub mod logging;
pub mod options;
pub mod rest_client_metrics;
pub mod service_accounts;
pub mod serving;
pub mod validation;
pub mod webhook;

use std::ffi::OsString;
use std::process::ExitCode;

pub use app::{AppError, run_daemon};
pub use options::{DryRunOutput, LogFormat, Options};
pub use validation::{AppConfig, ValidationErrors, validate};

/// Exit code for usage errors (bad flags), as clap uses.
pub const EXIT_USAGE: u8 = 2;

/// The environment variable that sets the runtime's worker threads (tokio's own name).
pub const WORKER_THREADS_VAR: &str = "TOKIO_WORKER_THREADS";
/// The runtime's worker threads unless [`WORKER_THREADS_VAR`] says otherwise. The daemon waits on the API
/// server and the cloud nearly all the time; with a second worker it spent a fifth more CPU, most of it
/// waking the other thread for each response (test/bench/README.md, "One worker thread").
pub const DEFAULT_WORKER_THREADS: usize = 1;

/// The worker threads for the value of [`WORKER_THREADS_VAR`] (`None`: unset).
pub fn worker_threads(value: Option<&str>) -> Result<usize, String> {
    match value {
        None => Ok(DEFAULT_WORKER_THREADS),
        Some(text) => match text.trim().parse::<usize>() {
            Ok(threads) if threads > 0 => Ok(threads),
            _ => Err(format!(
                "{WORKER_THREADS_VAR} must be a whole number greater than 0, not {text:?}"
            )),
        },
    }
}

/// Builds a multi-threaded tokio runtime ([`worker_threads`]) and runs [`run`] on it. This is the whole
/// `main` of a daemon.
pub fn run_main(registry: cloud_provider::Registry) -> ExitCode {
    let value = std::env::var_os(WORKER_THREADS_VAR);
    let threads = match worker_threads(value.as_ref().map(|v| v.to_string_lossy()).as_deref()) {
        Ok(threads) => threads,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .thread_name("ccm-worker")
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let code = runtime.block_on(run(registry));
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    code
}

/// Runs the daemon with the process' command-line arguments.
pub async fn run(registry: cloud_provider::Registry) -> ExitCode {
    run_with_args(registry, std::env::args_os()).await
}

/// Parses the command line as upstream's command does (flag names normalised first), with the matches
/// (which tell the flags given from the defaults).
fn parse_args(args: Vec<OsString>) -> Result<(Options, clap::ArgMatches), clap::Error> {
    use clap::{CommandFactory, FromArgMatches};
    let matches = Options::command().try_get_matches_from(options::normalize_args(args))?;
    let options = Options::from_arg_matches(&matches)?;
    Ok((options, matches))
}

/// Runs the daemon with explicit arguments (the first one is the program name).
pub async fn run_with_args<I, T>(registry: cloud_provider::Registry, args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let program = args
        .first()
        .and_then(|arg0| std::path::Path::new(arg0).file_name())
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|| "cloud-controller-manager".to_string());
    let (options, matches) = match parse_args(args) {
        Ok(parsed) => parsed,
        Err(err) => {
            let _ = err.print();
            return ExitCode::from(u8::try_from(err.exit_code()).unwrap_or(EXIT_USAGE));
        }
    };
    match &options.version {
        options::values::VersionFlag::Print => {
            println!("{}", version_text(&program, &registry.names()));
            return ExitCode::SUCCESS;
        }
        options::values::VersionFlag::Raw => {
            let info = build_info::BuildInfo::current(None);
            println!(
                "{}",
                serde_json::to_string_pretty(&info).unwrap_or_default()
            );
            return ExitCode::SUCCESS;
        }
        options::values::VersionFlag::Off | options::values::VersionFlag::Report(_) => {}
    }
    let mut config = match validate(&options, &registry.names()) {
        Ok(config) => config,
        Err(ValidationErrors(errors)) => {
            for error in errors {
                eprintln!("error: {error}");
            }
            return ExitCode::from(EXIT_USAGE);
        }
    };
    // Which controllers a name means is known once the provider's own are: still a usage error.
    if let Err(message) = config
        .controllers
        .resolve(registry.controllers_of(&config.cloud_provider))
    {
        eprintln!("error: {message}");
        return ExitCode::from(EXIT_USAGE);
    }
    config.ignored_flags = options::ignored_flags_given(&matches);
    // The whole program uses rustls with ring; installing it as the process default keeps every TLS user
    // (kube's client included) on it. An error only means a default was installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let _log_guard = logging::init(&config.logging);
    for flag in &config.ignored_flags {
        tracing::info!(flag = %format!("--{}", flag.name), reason = flag.reason, "flag accepted and ignored");
    }
    let code = if let Some(output) = config.dry_run {
        dry_run_main(config, registry, output).await
    } else {
        match run_daemon(config, registry).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                tracing::error!("{err}");
                ExitCode::FAILURE
            }
        }
    };
    logging::flush();
    code
}

/// A dry run with explicit arguments (the program name first; `--dry-run` is implied): the report, or why
/// the arguments or the dry run failed. For a provider's tests, which run it against their own cloud.
pub async fn dry_run_with_args<I, T>(
    registry: cloud_provider::Registry,
    args: I,
) -> Result<dry_run::DryRunReport, String>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let mut args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    args.push("--dry-run".into());
    let (options, _) = parse_args(args).map_err(|e| e.to_string())?;
    let config = validate(&options, &registry.names()).map_err(|e| e.to_string())?;
    app::run_dry_run(config, registry)
        .await
        .map_err(|e| e.to_string())
}

/// `--dry-run`: prints the report on stdout and exits with its code (1 when the dry run could not run).
async fn dry_run_main(
    config: AppConfig,
    registry: cloud_provider::Registry,
    output: DryRunOutput,
) -> ExitCode {
    match app::run_dry_run(config, registry).await {
        Ok(report) => {
            match output {
                DryRunOutput::Table => print!("{}", report.table()),
                DryRunOutput::Json => println!("{}", report.json()),
            }
            ExitCode::from(report.exit_code())
        }
        Err(err) => {
            tracing::error!("{err}");
            ExitCode::FAILURE
        }
    }
}

/// The `--version` text: program and version, then the compiled-in providers.
pub fn version_text(program: &str, providers: &[String]) -> String {
    let providers = if providers.is_empty() {
        "none".to_string()
    } else {
        providers.join(", ")
    };
    format!(
        "{program} v{}\ncompiled-in cloud providers: {providers}",
        env!("CARGO_PKG_VERSION")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_threads_default_to_one_and_follow_the_variable() {
        assert_eq!(worker_threads(None), Ok(1));
        assert_eq!(worker_threads(Some("4")), Ok(4));
        assert_eq!(worker_threads(Some(" 2 ")), Ok(2));
        for bad in ["0", "", "two", "-1"] {
            let err = worker_threads(Some(bad)).unwrap_err();
            assert!(err.contains("TOKIO_WORKER_THREADS"), "{err}");
        }
    }

    #[test]
    fn version_lists_providers() {
        assert_eq!(
            version_text("ccm", &["aws".into(), "fake".into()]),
            format!(
                "ccm v{}\ncompiled-in cloud providers: aws, fake",
                env!("CARGO_PKG_VERSION")
            )
        );
        assert!(version_text("ccm", &[]).ends_with("providers: none"));
    }

    #[tokio::test]
    async fn usage_errors_exit_2_and_version_exits_0() {
        let registry = cloud_provider::Registry::new();
        assert_eq!(
            run_with_args(registry.clone(), ["ccm", "--version"]).await,
            ExitCode::SUCCESS
        );
        assert_eq!(
            run_with_args(registry.clone(), ["ccm", "--no-such-flag"]).await,
            ExitCode::from(2)
        );
        assert_eq!(
            run_with_args(
                registry.clone(),
                ["ccm", "--cloud-provider=x", "--concurrent-node-syncs=0"]
            )
            .await,
            ExitCode::from(2)
        );
        assert_eq!(
            run_with_args(registry, ["ccm", "--help"]).await,
            ExitCode::SUCCESS
        );
    }
}
