//! Logging: `tracing` with text (default) or JSON lines, as component-base's logging options configure
//! klog: `-v N` maps klog verbosity to filter directives (`RUST_LOG`, when set, wins), `--vmodule` sets the
//! verbosity per source file, the JSON format has upstream's keys (`ts`, `caller`, `msg`, `v`, `err`), and
//! with `LoggingAlphaOptions` info and error messages can go to separate streams, the info stream buffered.
//! The verbosity can be changed while the daemon runs ([`set_verbosity`], served as `/debug/flags/v`).

use std::io::Write;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;
use tracing::{Level, Metadata};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::{Context, Filter, Layer, SubscriberExt};
use tracing_subscriber::registry::Registry;
use tracing_subscriber::util::SubscriberInitExt;

use crate::feature_gates::{FeatureGates, LOGGING_ALPHA_OPTIONS, LOGGING_BETA_OPTIONS};
use crate::options::{LogFormat, LoggingOptions};

mod json;
mod streams;

/// Crates whose debug output is only wanted at high verbosity.
const NOISY: &[&str] = &[
    "hyper",
    "hyper_util",
    "h2",
    "rustls",
    "tower",
    "kube_client",
    "kube_runtime",
];

/// Targets capped at `info` at every verbosity, even under `RUST_LOG`: cloud SDKs that log resolved
/// credentials or signed requests at `debug`/`trace`. Directive targets match by prefix, so
/// `aws_smithy` covers every `aws_smithy_*` crate and `aws_sdk` every service crate.
pub const CREDENTIAL_SAFE_CAPS: &[&str] = &[
    "aws_config",
    "aws_credential_types",
    "aws_runtime",
    "aws_sigv4",
    "aws_smithy",
    "aws_sdk",
];

/// Appends the [`CREDENTIAL_SAFE_CAPS`] directives to `directives`; later directives for the same target win.
pub fn with_credential_caps(directives: &str) -> String {
    std::iter::once(directives.to_string())
        .chain(
            CREDENTIAL_SAFE_CAPS
                .iter()
                .map(|target| format!("{target}=info")),
        )
        .collect::<Vec<_>>()
        .join(",")
}

/// The filter directives for a klog-style verbosity.
///
/// - 0-2: info and above (klog's default range of steady-state messages)
/// - 3-4: debug, dependencies at info
/// - 5: trace, dependencies at info
/// - 6-7: trace, dependencies at debug (HTTP requests)
/// - 8 and more: trace for everything
pub fn directives_for_verbosity(verbosity: u32) -> String {
    let with_dependencies = |ours: &str, theirs: &str| {
        std::iter::once(ours.to_string())
            .chain(NOISY.iter().map(|c| format!("{c}={theirs}")))
            .collect::<Vec<_>>()
            .join(",")
    };
    match verbosity {
        0..=2 => "info".to_string(),
        3..=4 => with_dependencies("debug", "info"),
        5 => with_dependencies("trace", "info"),
        6..=7 => with_dependencies("trace", "debug"),
        _ => "trace".to_string(),
    }
}

/// The most detailed level a klog verbosity shows of this program's own messages.
fn level_for_verbosity(verbosity: u32) -> Level {
    match verbosity {
        0..=2 => Level::INFO,
        3..=4 => Level::DEBUG,
        _ => Level::TRACE,
    }
}

/// One `--vmodule` entry: source files matching `pattern` log at `verbosity`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmoduleEntry {
    /// A file name without its extension (`*`, `?` wildcards), or a path pattern when it contains `/`.
    pub pattern: String,
    /// The verbosity of those files.
    pub verbosity: u32,
}

impl VmoduleEntry {
    /// Whether the source file `file` (a path such as `pkg/controllers/src/node/mod.rs`) matches. A
    /// `mod.rs` is named by its directory, as its module is.
    fn matches(&self, file: &str) -> bool {
        let stem = file.strip_suffix(".rs").unwrap_or(file);
        if self.pattern.contains('/') {
            return glob_match(&self.pattern, stem)
                || stem
                    .char_indices()
                    .filter(|(_, c)| *c == '/')
                    .any(|(i, _)| glob_match(&self.pattern, &stem[i + 1..]));
        }
        let mut parts = stem.rsplit('/');
        let name = match parts.next() {
            Some("mod") => parts.next().unwrap_or("mod"),
            Some(name) => name,
            None => stem,
        };
        glob_match(&self.pattern, name)
    }
}

/// Parses `--vmodule` (`pattern=N,...`; empty items are skipped), with upstream's messages.
pub fn parse_vmodule(text: &str) -> Result<Vec<VmoduleEntry>, String> {
    let mut entries = Vec::new();
    for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let Some((pattern, level)) = item.split_once('=') else {
            return Err(format!("{item:?} does not have the pattern=N format"));
        };
        let verbosity = crate::options::values::parse_level(level)
            .map_err(|_| format!("parsing verbosity in {item:?}: invalid level {level:?}"))?;
        if pattern.is_empty() {
            return Err(format!("{item:?} does not have the pattern=N format"));
        }
        entries.push(VmoduleEntry {
            pattern: pattern.to_string(),
            verbosity,
        });
    }
    Ok(entries)
}

/// Shell-style matching of `*` (any run of characters) and `?` (one character).
fn glob_match(pattern: &str, text: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let text: Vec<char> = text.chars().collect();
    let (mut p, mut t) = (0, 0);
    let mut backtrack: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && (pattern[p] == '?' || pattern[p] == text[t]) {
            p += 1;
            t += 1;
        } else if p < pattern.len() && pattern[p] == '*' {
            backtrack = Some((p, t));
            p += 1;
        } else if let Some((star, matched)) = backtrack {
            p = star + 1;
            t = matched + 1;
            backtrack = Some((star, matched + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|c| *c == '*')
}

/// The validated logging flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSettings {
    /// `-v`.
    pub verbosity: u32,
    /// `--vmodule`.
    pub vmodule: Vec<VmoduleEntry>,
    /// `--logging-format`.
    pub format: LogFormat,
    /// `--log-*-split-stream`: info messages on stdout, the rest on stderr.
    pub split_stream: bool,
    /// `--log-*-info-buffer-size`: bytes of info messages buffered (0: unbuffered).
    pub info_buffer_size: u64,
    /// `--log-flush-frequency`: the longest a buffered info message waits.
    pub flush_frequency: Duration,
}

impl Default for LogSettings {
    fn default() -> Self {
        LogSettings {
            verbosity: 0,
            vmodule: Vec::new(),
            format: LogFormat::Text,
            split_stream: false,
            info_buffer_size: 0,
            flush_frequency: Duration::from_secs(5),
        }
    }
}

impl LogSettings {
    /// Checks the logging flags as upstream does; each problem is one message.
    pub fn from_options(
        options: &LoggingOptions,
        gates: &FeatureGates,
    ) -> Result<Self, Vec<String>> {
        let mut errors = Vec::new();
        let vmodule = parse_vmodule(&options.vmodule)
            .map_err(|err| errors.push(format!("--vmodule: {err}")))
            .unwrap_or_default();
        if options.log_flush_frequency.is_zero() {
            errors.push("--log-flush-frequency must be greater than 0".to_string());
        }
        let (split_stream, info_buffer_size, prefix) = match options.logging_format {
            LogFormat::Text => (
                options.log_text_split_stream,
                options.log_text_info_buffer_size,
                "--log-text",
            ),
            LogFormat::Json => (
                options.log_json_split_stream,
                options.log_json_info_buffer_size,
                "--log-json",
            ),
        };
        if !gates.enabled(LOGGING_ALPHA_OPTIONS) {
            for (flag, set) in [
                ("--log-text-split-stream", options.log_text_split_stream),
                (
                    "--log-text-info-buffer-size",
                    options.log_text_info_buffer_size > 0,
                ),
                ("--log-json-split-stream", options.log_json_split_stream),
                (
                    "--log-json-info-buffer-size",
                    options.log_json_info_buffer_size > 0,
                ),
            ] {
                if set {
                    errors.push(format!(
                        "{flag}: forbidden: the feature gate {LOGGING_ALPHA_OPTIONS} is disabled"
                    ));
                }
            }
        }
        if info_buffer_size > 0 && !split_stream {
            tracing_free_notice(&format!(
                "{prefix}-info-buffer-size has no effect without {prefix}-split-stream"
            ));
        }
        if options.logging_format == LogFormat::Json {
            if !gates.enabled(LOGGING_BETA_OPTIONS) {
                errors.push(format!(
                    "--logging-format: forbidden: the json format is disabled by the feature gate \
                     {LOGGING_BETA_OPTIONS}"
                ));
            }
            if !vmodule.is_empty() {
                errors.push(
                    "--vmodule: forbidden: only supported for the text log format".to_string(),
                );
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(LogSettings {
            verbosity: options.verbosity,
            vmodule,
            format: options.logging_format,
            split_stream,
            info_buffer_size: if split_stream { info_buffer_size } else { 0 },
            flush_frequency: options.log_flush_frequency,
        })
    }
}

/// A notice printed before logging is set up.
fn tracing_free_notice(message: &str) {
    eprintln!("warning: {message}");
}

/// The filter of every log line: the verbosity's directives (or `RUST_LOG`), with the `--vmodule` files
/// at their own verbosity.
struct LogFilter {
    global: EnvFilter,
    vmodule: Vec<VmoduleEntry>,
}

impl LogFilter {
    fn new(verbosity: u32, vmodule: Vec<VmoduleEntry>, honour_rust_log: bool) -> Self {
        let global = match std::env::var("RUST_LOG") {
            Ok(directives) if honour_rust_log && !directives.trim().is_empty() => {
                EnvFilter::new(with_credential_caps(&directives))
            }
            _ => EnvFilter::new(with_credential_caps(&directives_for_verbosity(verbosity))),
        };
        LogFilter { global, vmodule }
    }

    /// The level `--vmodule` sets for the callsite, if one of its patterns matches its file. Credential
    /// caps still apply.
    fn vmodule_level(&self, meta: &Metadata<'_>) -> Option<Level> {
        if self.vmodule.is_empty()
            || CREDENTIAL_SAFE_CAPS
                .iter()
                .any(|target| meta.target().starts_with(target))
        {
            return None;
        }
        let file = meta.file()?;
        self.vmodule
            .iter()
            .find(|entry| entry.matches(file))
            .map(|entry| level_for_verbosity(entry.verbosity))
    }
}

impl<S: tracing::Subscriber> Filter<S> for LogFilter {
    fn enabled(&self, meta: &Metadata<'_>, cx: &Context<'_, S>) -> bool {
        match self.vmodule_level(meta) {
            Some(level) => meta.level() <= &level,
            None => Filter::<S>::enabled(&self.global, meta, cx),
        }
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> tracing::subscriber::Interest {
        match self.vmodule_level(meta) {
            Some(level) if meta.level() <= &level => tracing::subscriber::Interest::always(),
            Some(_) => tracing::subscriber::Interest::never(),
            None => Filter::<S>::callsite_enabled(&self.global, meta),
        }
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        let vmodule = self
            .vmodule
            .iter()
            .map(|e| {
                tracing::level_filters::LevelFilter::from_level(level_for_verbosity(e.verbosity))
            })
            .max();
        match (Filter::<S>::max_level_hint(&self.global), vmodule) {
            (Some(global), Some(vmodule)) => Some(global.max(vmodule)),
            (global, None) => global,
            (None, Some(_)) => None,
        }
    }
}

/// What changes the filter of the running process.
struct Reloader {
    handle: tracing_subscriber::reload::Handle<LogFilter, Registry>,
    vmodule: Vec<VmoduleEntry>,
}

/// The reload handle of the installed subscriber, for [`set_verbosity`].
static RELOADER: OnceLock<Mutex<Reloader>> = OnceLock::new();

/// Sets the verbosity of the running process (as `-v` would have; `--vmodule` stays, `RUST_LOG` no longer
/// applies). An error when logging was not set up by [`init`].
pub fn set_verbosity(verbosity: u32) -> Result<(), String> {
    let reloader = RELOADER
        .get()
        .ok_or_else(|| "logging is not managed by this process".to_string())?
        .lock();
    reloader
        .handle
        .reload(LogFilter::new(verbosity, reloader.vmodule.clone(), false))
        .map_err(|err| err.to_string())
}

/// Keeps the buffered info stream flushing; dropping it flushes what is left.
#[must_use = "dropping the guard flushes and stops the buffered log stream"]
pub struct LogGuard {
    streams: Option<Arc<streams::BufferedStdout>>,
}

impl Drop for LogGuard {
    fn drop(&mut self) {
        if let Some(stdout) = &self.streams {
            stdout.flush_now();
        }
    }
}

/// Installs the global subscriber. `None` when one was already installed (tests, embedding).
pub fn init(settings: &LogSettings) -> Option<LogGuard> {
    let filter = LogFilter::new(settings.verbosity, settings.vmodule.clone(), true);
    let (filter, handle) = tracing_subscriber::reload::Layer::new(filter);
    let (writer, buffered) = streams::Streams::new(settings);
    let ansi = !settings.split_stream && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let layer = match settings.format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_ansi(ansi)
            .with_writer(writer)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .event_format(json::UpstreamJson)
            .with_writer(writer)
            .boxed(),
    };
    let installed = tracing_subscriber::registry()
        .with(layer.with_filter(filter))
        .try_init()
        .is_ok();
    if !installed {
        return None;
    }
    let _ = RELOADER.set(Mutex::new(Reloader {
        handle,
        vmodule: settings.vmodule.clone(),
    }));
    if let Some(stdout) = &buffered {
        stdout.flush_every(settings.flush_frequency);
    }
    Some(LogGuard { streams: buffered })
}

/// Flushes stdout and stderr (before the process exits).
pub fn flush() {
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_caps_follow_every_directive_set() {
        let directives = with_credential_caps("trace");
        assert!(directives.starts_with("trace,"));
        for target in CREDENTIAL_SAFE_CAPS {
            assert!(
                directives.contains(&format!(",{target}=info")),
                "{directives}"
            );
        }
        // The caps parse as a filter and keep the SDK's debug output out at the highest verbosity.
        let filter = EnvFilter::new(with_credential_caps(&directives_for_verbosity(10)));
        assert!(filter.to_string().contains("aws_sigv4=info"));
    }

    #[test]
    fn verbosity_levels() {
        assert_eq!(directives_for_verbosity(0), "info");
        assert_eq!(directives_for_verbosity(2), "info");
        assert!(directives_for_verbosity(4).starts_with("debug,hyper=info,"));
        assert!(directives_for_verbosity(5).starts_with("trace,hyper=info,"));
        assert!(directives_for_verbosity(6).contains("kube_client=debug"));
        assert_eq!(directives_for_verbosity(10), "trace");
        assert_eq!(directives_for_verbosity(1000), "trace");
        for v in 0..=10 {
            // Every level must be a valid filter.
            EnvFilter::try_new(directives_for_verbosity(v)).unwrap();
        }
    }

    #[test]
    fn vmodule_syntax_and_matching() {
        let entries = parse_vmodule("node=4, route*=2,,pkg/controllers/src/service/*=5").unwrap();
        assert_eq!(entries.len(), 3);
        assert!(entries[0].matches("pkg/controllers/src/node/mod.rs"));
        assert!(!entries[0].matches("pkg/controllers/src/node/addresses.rs"));
        assert!(entries[1].matches("pkg/controllers/src/route/mod.rs"));
        assert!(entries[1].matches("/src/routes.rs"));
        assert!(entries[2].matches("pkg/controllers/src/service/mod.rs"));
        assert!(entries[2].matches("/work/x/pkg/controllers/src/service/cache.rs"));
        assert!(!entries[2].matches("pkg/controllers/src/node/mod.rs"));
        assert_eq!(
            parse_vmodule("foo").unwrap_err(),
            "\"foo\" does not have the pattern=N format"
        );
        assert!(
            parse_vmodule("foo=x")
                .unwrap_err()
                .starts_with("parsing verbosity in \"foo=x\"")
        );
    }

    #[test]
    fn globs() {
        assert!(glob_match("a*c", "abbbc"));
        assert!(glob_match("a?c", "abc"));
        assert!(!glob_match("a?c", "abbc"));
        assert!(glob_match("*", ""));
        assert!(glob_match("*x*", "axb"));
        assert!(!glob_match("x", "xy"));
    }

    fn logging_options(args: &[&str]) -> LoggingOptions {
        let mut all = vec!["ccm"];
        all.extend_from_slice(args);
        <crate::Options as clap::Parser>::try_parse_from(all)
            .unwrap()
            .logging
    }

    #[test]
    fn alpha_options_need_their_gate() {
        let gates = FeatureGates::default();
        let errors =
            LogSettings::from_options(&logging_options(&["--log-text-split-stream"]), &gates)
                .unwrap_err();
        assert_eq!(
            errors,
            [
                "--log-text-split-stream: forbidden: the feature gate LoggingAlphaOptions is disabled"
            ]
        );
        let gates = FeatureGates::parse(&["LoggingAlphaOptions=true".to_string()]).unwrap();
        let settings = LogSettings::from_options(
            &logging_options(&[
                "--log-text-split-stream",
                "--log-text-info-buffer-size=64Ki",
            ]),
            &gates,
        )
        .unwrap();
        assert!(settings.split_stream);
        assert_eq!(settings.info_buffer_size, 65536);
    }

    #[test]
    fn json_needs_its_gate_and_no_vmodule() {
        let gates = FeatureGates::parse(&["LoggingBetaOptions=false".to_string()]).unwrap();
        assert!(
            LogSettings::from_options(&logging_options(&["--logging-format=json"]), &gates)
                .unwrap_err()[0]
                .contains("LoggingBetaOptions")
        );
        let errors = LogSettings::from_options(
            &logging_options(&["--logging-format=json", "--vmodule=a=1"]),
            &FeatureGates::default(),
        )
        .unwrap_err();
        assert_eq!(
            errors,
            ["--vmodule: forbidden: only supported for the text log format"]
        );
        let errors = LogSettings::from_options(
            &logging_options(&["--log-flush-frequency=0s"]),
            &FeatureGates::default(),
        )
        .unwrap_err();
        assert_eq!(errors, ["--log-flush-frequency must be greater than 0"]);
    }
}
