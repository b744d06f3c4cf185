//! Logging flags, as component-base's logging options have them: verbosity (`-v`, `--vmodule`), format,
//! and the split and buffered output streams of the alpha `LoggingAlphaOptions` feature.

use std::time::Duration;

use clap::{ArgAction, Args, ValueEnum};

use super::values::{parse_byte_quantity, parse_go_bool, parse_level};
use crate::duration::parse_duration;

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Verbosity, format and output streams of the log.
#[derive(Debug, Clone, Args)]
pub struct LoggingOptions {
    /// Log verbosity like klog: 0-2 info, 3-4 debug, 5 trace of this program, 6-7 plus client/server
    /// debug, 8 and more trace of everything. RUST_LOG, when set, wins.
    #[arg(short = 'v', long = "v", value_name = "N", default_value_t = 0,
          value_parser = parse_level, help_heading = "Global")]
    pub verbosity: u32,

    /// Verbosity per source file: `pattern=N,...`, where a pattern is a file's name without its extension
    /// (`*` and `?` wildcards), or a path when it contains a `/` (text format only, as upstream).
    #[arg(
        long,
        value_name = "PATTERN=N,...",
        default_value = "",
        help_heading = "Global"
    )]
    pub vmodule: String,

    /// Log format: text, or json (one object per line with upstream's keys ts, caller, msg, v, err).
    #[arg(long = "logging-format", visible_alias = "log-format", value_name = "FORMAT",
          value_enum, default_value_t = LogFormat::Text, help_heading = "Global")]
    pub logging_format: LogFormat,

    /// Most time between flushes of the buffered info stream (--log-text-info-buffer-size,
    /// --log-json-info-buffer-size); greater than 0. Unbuffered lines are written as they are logged.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "5s",
        value_parser = parse_duration,
        help_heading = "Global"
    )]
    pub log_flush_frequency: Duration,

    /// In text format, write error messages to stderr and info messages to stdout (needs the
    /// LoggingAlphaOptions feature gate).
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_value = "false",
        default_missing_value = "true",
        action = ArgAction::Set,
        value_parser = parse_go_bool,
        help_heading = "Global"
    )]
    pub log_text_split_stream: bool,

    /// In text format with split streams, buffer up to this many bytes of info messages (a quantity such as
    /// 512, 64Ki or 1M; needs LoggingAlphaOptions).
    #[arg(long, value_name = "QUANTITY", default_value = "0", value_parser = parse_byte_quantity, help_heading = "Global")]
    pub log_text_info_buffer_size: u64,

    /// In JSON format, write error messages to stderr and info messages to stdout (needs
    /// LoggingAlphaOptions).
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_value = "false",
        default_missing_value = "true",
        action = ArgAction::Set,
        value_parser = parse_go_bool,
        help_heading = "Global"
    )]
    pub log_json_split_stream: bool,

    /// In JSON format with split streams, buffer up to this many bytes of info messages (needs
    /// LoggingAlphaOptions).
    #[arg(long, value_name = "QUANTITY", default_value = "0", value_parser = parse_byte_quantity, help_heading = "Global")]
    pub log_json_info_buffer_size: u64,
}
