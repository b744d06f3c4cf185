//! The cloud provider webhook flags of upstream's command: which webhooks run and the HTTPS endpoint that
//! serves them (the same settings as the secure serving endpoint's, `webhook-` prefixed).

use std::path::PathBuf;

use clap::{ArgAction, Args};

use super::generic::parse_path;
use super::values::{NamedCertKey, parse_go_bool, parse_named_cert_key};

/// Webhooks and their endpoint.
#[derive(Debug, Clone, Args)]
pub struct WebhookOptions {
    /// Webhooks to enable: `*`, `name` or `-name`, as --controllers (none without the flag). Known:
    /// lb-service (admission of LoadBalancer Services). Served with the CloudControllerManagerWebhook gate.
    #[arg(
        long,
        value_name = "NAMES",
        value_delimiter = ',',
        help_heading = "Webhook"
    )]
    pub webhooks: Vec<String>,

    /// IP address of the webhook endpoint.
    #[arg(
        long,
        value_name = "IP",
        default_value = "0.0.0.0",
        help_heading = "Webhook serving"
    )]
    pub webhook_bind_address: String,

    /// HTTPS port of the webhook endpoint; 0 serves no webhook.
    #[arg(
        long,
        value_name = "PORT",
        default_value_t = 10260,
        help_heading = "Webhook serving"
    )]
    pub webhook_secure_port: i64,

    /// Directory of the webhook endpoint's certificate when --webhook-tls-cert-file is not given.
    #[arg(long, value_name = "DIR", value_parser = parse_path, help_heading = "Webhook serving")]
    pub webhook_cert_dir: Option<PathBuf>,

    /// PEM certificate (chain) of the webhook endpoint.
    #[arg(long, value_name = "PATH", value_parser = parse_path, help_heading = "Webhook serving")]
    pub webhook_tls_cert_file: Option<PathBuf>,

    /// PEM private key matching --webhook-tls-cert-file.
    #[arg(long, value_name = "PATH", value_parser = parse_path, help_heading = "Webhook serving")]
    pub webhook_tls_private_key_file: Option<PathBuf>,

    /// Cipher suites of the webhook endpoint, as --tls-cipher-suites.
    #[arg(
        long,
        value_name = "SUITES",
        value_delimiter = ',',
        help_heading = "Webhook serving"
    )]
    pub webhook_tls_cipher_suites: Vec<String>,

    /// Key exchange groups of the webhook endpoint, as --tls-curve-preferences.
    #[arg(
        long,
        value_name = "IDS",
        value_delimiter = ',',
        help_heading = "Webhook serving"
    )]
    pub webhook_tls_curve_preferences: Vec<i32>,

    /// Minimum TLS version of the webhook endpoint, as --tls-min-version.
    #[arg(
        long,
        value_name = "VERSION",
        default_value = "",
        help_heading = "Webhook serving"
    )]
    pub webhook_tls_min_version: String,

    /// A named certificate of the webhook endpoint, as --tls-sni-cert-key. Repeatable.
    #[arg(
        long,
        value_name = "CERT,KEY[:NAMES]",
        action = ArgAction::Append,
        value_parser = parse_named_cert_key,
        help_heading = "Webhook serving"
    )]
    pub webhook_tls_sni_cert_key: Vec<NamedCertKey>,

    /// Serve the webhooks over HTTP/1.1 only.
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_value = "false",
        default_missing_value = "true",
        action = ArgAction::Set,
        value_parser = parse_go_bool,
        help_heading = "Webhook serving"
    )]
    pub webhook_disable_http2_serving: bool,
}
