//! Logging: `tracing` with text (default) or JSON lines on stderr; `-v N` maps klog verbosity to filter
//! directives, and `RUST_LOG`, when set, wins.

use tracing_subscriber::EnvFilter;

use crate::options::LogFormat;

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

/// The filter directives for a klog-style verbosity (0..=10).
///
/// - 0-2: info and above (klog's default range of steady-state messages)
/// - 3-4: debug, dependencies at info
/// - 5: trace, dependencies at info
/// - 6-7: trace, dependencies at debug (HTTP requests)
/// - 8-10: trace for everything
pub fn directives_for_verbosity(verbosity: u8) -> String {
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

/// Installs the global subscriber. Returns false when one was already installed (tests, embedding).
pub fn init(verbosity: u8, format: LogFormat) -> bool {
    let filter = match std::env::var("RUST_LOG") {
        Ok(directives) if !directives.trim().is_empty() => {
            EnvFilter::new(with_credential_caps(&directives))
        }
        _ => EnvFilter::new(with_credential_caps(&directives_for_verbosity(verbosity))),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.try_init().is_ok(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init()
            .is_ok(),
    }
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
        for v in 0..=10 {
            // Every level must be a valid filter.
            EnvFilter::try_new(directives_for_verbosity(v)).unwrap();
        }
    }
}
