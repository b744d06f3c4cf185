//! Flags of the HTTPS endpoint: secure serving (address, TLS), the debugging handlers, and delegated
//! authentication and authorization of its callers, as upstream's generic API server options have them.

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args};

use super::generic::parse_path;
use super::values::{NamedCertKey, parse_go_bool, parse_named_cert_key};
use crate::duration::parse_duration;

/// Where and how the endpoint serves.
#[derive(Debug, Clone, Args)]
pub struct SecureServingOptions {
    /// IP address to serve /healthz, /livez, /readyz, /metrics and the debugging handlers on.
    #[arg(
        long,
        value_name = "IP",
        default_value = "0.0.0.0",
        help_heading = "Secure serving"
    )]
    pub bind_address: String,

    /// HTTPS port of the endpoint; 0 disables serving.
    #[arg(
        long,
        value_name = "PORT",
        default_value_t = 10258,
        help_heading = "Secure serving"
    )]
    pub secure_port: i64,

    /// Directory of the serving certificate when --tls-cert-file is not given: cloud-controller-manager.crt
    /// and .key are read from it, or generated (self-signed) and written there. Empty: an in-memory
    /// self-signed certificate.
    #[arg(long, value_name = "DIR", value_parser = parse_path, help_heading = "Secure serving")]
    pub cert_dir: Option<PathBuf>,

    /// PEM certificate (chain) for serving; reloaded when the file changes.
    #[arg(long, value_name = "PATH", value_parser = parse_path, help_heading = "Secure serving")]
    pub tls_cert_file: Option<PathBuf>,

    /// PEM private key matching --tls-cert-file.
    #[arg(long, value_name = "PATH", value_parser = parse_path, help_heading = "Secure serving")]
    pub tls_private_key_file: Option<PathBuf>,

    /// Cipher suites (IANA names, as Go names them) for TLS 1.2; TLS 1.3 suites are always on, as in Go.
    /// Empty: the defaults.
    #[arg(
        long,
        value_name = "SUITES",
        value_delimiter = ',',
        help_heading = "Secure serving"
    )]
    pub tls_cipher_suites: Vec<String>,

    /// Key exchange groups as Go's numeric CurveIDs (23 P-256, 24 P-384, 29 X25519). Empty: the defaults.
    #[arg(
        long,
        value_name = "IDS",
        value_delimiter = ',',
        help_heading = "Secure serving"
    )]
    pub tls_curve_preferences: Vec<i32>,

    /// Minimum TLS version: VersionTLS10, VersionTLS11, VersionTLS12 or VersionTLS13 (TLS 1.2 is the lowest
    /// this endpoint speaks). Empty: TLS 1.2.
    #[arg(
        long,
        value_name = "VERSION",
        default_value = "",
        help_heading = "Secure serving"
    )]
    pub tls_min_version: String,

    /// A certificate and key served for the names given (`cert,key:name1,name2`) or, without names, for the
    /// names in the certificate. Repeatable.
    #[arg(
        long,
        value_name = "CERT,KEY[:NAMES]",
        action = ArgAction::Append,
        value_parser = parse_named_cert_key,
        help_heading = "Secure serving"
    )]
    pub tls_sni_cert_key: Vec<NamedCertKey>,

    /// Serve HTTP/1.1 only.
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_value = "false",
        default_missing_value = "true",
        action = ArgAction::Set,
        value_parser = parse_go_bool,
        help_heading = "Secure serving"
    )]
    pub disable_http2_serving: bool,

    /// Most concurrent streams of one HTTP/2 connection; 0: 100, as upstream.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        help_heading = "Secure serving"
    )]
    pub http2_max_streams_per_connection: i64,

    /// Bind with SO_REUSEADDR.
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_value = "false",
        default_missing_value = "true",
        action = ArgAction::Set,
        value_parser = parse_go_bool,
        help_heading = "Secure serving"
    )]
    pub permit_address_sharing: bool,

    /// Bind with SO_REUSEPORT, so that more than one process can listen on the port.
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_value = "false",
        default_missing_value = "true",
        action = ArgAction::Set,
        value_parser = parse_go_bool,
        help_heading = "Secure serving"
    )]
    pub permit_port_sharing: bool,

    /// Serve CPU and heap profiles under /debug/pprof/ and the run-time verbosity handler /debug/flags/v.
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_value = "true",
        default_missing_value = "true",
        action = ArgAction::Set,
        value_parser = parse_go_bool,
        help_heading = "Debugging"
    )]
    pub profiling: bool,

    /// Go's blocking profile. Accepted and ignored: Rust has no such profile.
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_value = "false",
        default_missing_value = "true",
        action = ArgAction::Set,
        value_parser = parse_go_bool,
        help_heading = "Debugging"
    )]
    pub contention_profiling: bool,
}

/// Who the endpoint's callers are.
#[derive(Debug, Clone, Args)]
pub struct AuthenticationOptions {
    /// kubeconfig pointing at the API server that answers TokenReviews (default: the main kubeconfig).
    #[arg(long, value_name = "PATH", value_parser = parse_path, help_heading = "Authentication")]
    pub authentication_kubeconfig: Option<PathBuf>,

    /// Do not look up the client CA and request-header settings in the ConfigMap
    /// kube-system/extension-apiserver-authentication.
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_value = "false",
        default_missing_value = "true",
        action = ArgAction::Set,
        value_parser = parse_go_bool,
        help_heading = "Authentication"
    )]
    pub authentication_skip_lookup: bool,

    /// Start even when that lookup fails (callers are then authenticated by bearer token only).
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_value = "false",
        default_missing_value = "true",
        action = ArgAction::Set,
        value_parser = parse_go_bool,
        help_heading = "Authentication"
    )]
    pub authentication_tolerate_lookup_failure: bool,

    /// How long a TokenReview's answer is reused.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "10s",
        value_parser = parse_duration,
        help_heading = "Authentication"
    )]
    pub authentication_token_webhook_cache_ttl: Duration,

    /// Client certificates signed by this CA authenticate as their common name (groups: organizations).
    #[arg(long, value_name = "PATH", value_parser = parse_path, help_heading = "Authentication")]
    pub client_ca_file: Option<PathBuf>,

    /// CA of the proxies (the API server's aggregator) allowed to name the caller in request headers.
    #[arg(long, value_name = "PATH", value_parser = parse_path, help_heading = "Authentication")]
    pub requestheader_client_ca_file: Option<PathBuf>,

    /// Common names of the proxy certificates allowed to name callers in headers; empty: any the
    /// request-header CA signed.
    #[arg(
        long,
        value_name = "NAMES",
        value_delimiter = ',',
        help_heading = "Authentication"
    )]
    pub requestheader_allowed_names: Vec<String>,

    /// Request headers that name the user.
    #[arg(
        long,
        value_name = "HEADERS",
        value_delimiter = ',',
        default_value = "x-remote-user",
        help_heading = "Authentication"
    )]
    pub requestheader_username_headers: Vec<String>,

    /// Request headers that name the user's UID.
    #[arg(
        long,
        value_name = "HEADERS",
        value_delimiter = ',',
        help_heading = "Authentication"
    )]
    pub requestheader_uid_headers: Vec<String>,

    /// Request headers that name the user's groups.
    #[arg(
        long,
        value_name = "HEADERS",
        value_delimiter = ',',
        default_value = "x-remote-group",
        help_heading = "Authentication"
    )]
    pub requestheader_group_headers: Vec<String>,

    /// Prefixes of request headers that carry the user's extra attributes.
    #[arg(
        long,
        value_name = "PREFIXES",
        value_delimiter = ',',
        default_value = "x-remote-extra-",
        help_heading = "Authentication"
    )]
    pub requestheader_extra_headers_prefix: Vec<String>,
}

/// What the endpoint's callers may do.
#[derive(Debug, Clone, Args)]
pub struct AuthorizationOptions {
    /// kubeconfig pointing at the API server that answers SubjectAccessReviews (default: the main
    /// kubeconfig).
    #[arg(long, value_name = "PATH", value_parser = parse_path, help_heading = "Authorization")]
    pub authorization_kubeconfig: Option<PathBuf>,

    /// Paths served without authorization; a trailing `*` matches a prefix.
    #[arg(
        long,
        value_name = "PATHS",
        value_delimiter = ',',
        default_value = "/healthz,/readyz,/livez",
        help_heading = "Authorization"
    )]
    pub authorization_always_allow_paths: Vec<String>,

    /// How long an "allowed" SubjectAccessReview answer is reused.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "10s",
        value_parser = parse_duration,
        help_heading = "Authorization"
    )]
    pub authorization_webhook_cache_authorized_ttl: Duration,

    /// How long a "denied" SubjectAccessReview answer is reused.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "10s",
        value_parser = parse_duration,
        help_heading = "Authorization"
    )]
    pub authorization_webhook_cache_unauthorized_ttl: Duration,
}
