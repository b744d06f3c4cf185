//! Checks of the HTTPS endpoints' flags: secure serving (address, certificate, TLS), delegated
//! authentication and authorization, and the webhook endpoint, with upstream's messages where it has
//! them.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use super::non_empty_path;
use crate::feature_gates::{
    ALLOW_PARSING_USER_UID_FROM_CERT_AUTH, CLOUD_CONTROLLER_MANAGER_WEBHOOK, FeatureGates,
    REMOTE_REQUEST_HEADER_UID,
};
use crate::options::Options;
use crate::options::values::NamedCertKey;
use crate::serving::auth::RequestHeaderConfig;
use crate::serving::tls::{self, TlsSettings};

/// Where the endpoint's certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertChoice {
    /// `--tls-cert-file` and `--tls-private-key-file`.
    Files {
        /// The certificate (chain).
        cert: PathBuf,
        /// Its key.
        key: PathBuf,
    },
    /// `--cert-dir`: its pair of files, generated when missing.
    Dir(PathBuf),
    /// A self-signed certificate made in memory.
    InMemory,
}

/// Delegated authentication settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthenticationSettings {
    /// `--authentication-kubeconfig`.
    pub kubeconfig: Option<PathBuf>,
    /// Read the cluster's `extension-apiserver-authentication` ConfigMap (not `--authentication-skip-lookup`).
    pub lookup: bool,
    /// `--authentication-tolerate-lookup-failure`.
    pub tolerate_lookup_failure: bool,
    /// `--authentication-token-webhook-cache-ttl`.
    pub token_cache_ttl: Duration,
    /// `--client-ca-file`.
    pub client_ca_file: Option<PathBuf>,
    /// `--requestheader-client-ca-file`, with the `--requestheader-*` lists.
    pub request_header: Option<(PathBuf, RequestHeaderConfig)>,
    /// A client certificate's UID attribute names the user's UID (`AllowParsingUserUIDFromCertAuth`).
    pub uid_from_certificates: bool,
    /// Whether request-header UIDs are allowed (`RemoteRequestHeaderUID`): without it, UID headers read
    /// from the cluster are dropped.
    pub request_header_uid: bool,
}

/// Delegated authorization settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorizationSettings {
    /// `--authorization-kubeconfig`.
    pub kubeconfig: Option<PathBuf>,
    /// `--authorization-always-allow-paths`.
    pub always_allow_paths: Vec<String>,
    /// `--authorization-webhook-cache-authorized-ttl`.
    pub allowed_ttl: Duration,
    /// `--authorization-webhook-cache-unauthorized-ttl`.
    pub denied_ttl: Duration,
}

/// Serving settings (present when `--secure-port` is not 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServingSettings {
    /// `--bind-address:--secure-port`.
    pub address: SocketAddr,
    /// The certificate's source.
    pub cert: CertChoice,
    /// Versions, suites, groups, named certificates, HTTP/2.
    pub tls: TlsSettings,
    /// `--http2-max-streams-per-connection` (0: 100).
    pub max_concurrent_streams: u32,
    /// `--permit-port-sharing`.
    pub reuse_port: bool,
    /// `--permit-address-sharing`.
    pub reuse_address: bool,
    /// `--profiling`: `/debug/pprof` and `/debug/flags/v`.
    pub profiling: bool,
    /// Who callers are.
    pub authentication: AuthenticationSettings,
    /// What they may do.
    pub authorization: AuthorizationSettings,
}

/// The webhooks the daemon knows (upstream's command knows none): the admission checks of LoadBalancer
/// Services, served when the provider has them (see [`crate::webhook`]).
pub const KNOWN_WEBHOOKS: &[&str] = &[crate::webhook::LB_SERVICE_WEBHOOK];

/// The webhook flags, checked.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WebhookSettings {
    /// The webhooks `--webhooks` enables, by name.
    pub enabled: Vec<String>,
    /// Where and how to serve them: `None` when nothing is to be served (no webhook enabled,
    /// `--webhook-secure-port=0`, or the `CloudControllerManagerWebhook` gate off, as upstream).
    pub serving: Option<WebhookServing>,
}

/// The webhook endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookServing {
    /// `--webhook-bind-address:--webhook-secure-port`.
    pub address: SocketAddr,
    /// The certificate's source.
    pub cert: CertChoice,
    /// Versions, suites, groups, named certificates, HTTP/2.
    pub tls: TlsSettings,
}

/// The TLS flags of one endpoint, by their flag names' prefix (`` or `webhook-`).
struct TlsFlags<'a> {
    prefix: &'a str,
    cert: &'a Option<PathBuf>,
    key: &'a Option<PathBuf>,
    cert_dir: &'a Option<PathBuf>,
    suites: &'a [String],
    curves: &'a [i32],
    min_version: &'a str,
    sni: &'a [NamedCertKey],
    disable_http2: bool,
}

/// Checks one endpoint's TLS flags.
fn check_tls(flags: TlsFlags<'_>, errors: &mut Vec<String>) -> (CertChoice, TlsSettings) {
    let prefix = flags.prefix;
    let cert = match (non_empty_path(flags.cert), non_empty_path(flags.key)) {
        (Some(cert), Some(key)) => CertChoice::Files { cert, key },
        (None, None) => match non_empty_path(flags.cert_dir) {
            Some(dir) => CertChoice::Dir(dir),
            None => CertChoice::InMemory,
        },
        (Some(_), None) => {
            errors.push(format!(
                "--{prefix}tls-cert-file requires --{prefix}tls-private-key-file"
            ));
            CertChoice::InMemory
        }
        (None, Some(_)) => {
            errors.push(format!(
                "--{prefix}tls-private-key-file requires --{prefix}tls-cert-file"
            ));
            CertChoice::InMemory
        }
    };
    if let Err(err) = tls::check_cipher_suites(flags.suites) {
        errors.push(format!("--{prefix}tls-cipher-suites: {err}"));
    }
    let min_version = match tls::parse_min_version(flags.min_version) {
        Ok((version, _)) => version,
        Err(err) => {
            errors.push(format!("--{prefix}tls-min-version: {err}"));
            Default::default()
        }
    };
    let settings = TlsSettings {
        min_version,
        cipher_suites: flags
            .suites
            .iter()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect(),
        curves: flags.curves.to_vec(),
        sni: flags.sni.to_vec(),
        http2: !flags.disable_http2,
    };
    (cert, settings)
}

/// A port flag: 0 to 65535.
fn port(flag: &str, value: i64, errors: &mut Vec<String>) -> u16 {
    u16::try_from(value).unwrap_or_else(|_| {
        errors.push(format!(
            "--{flag} must be between 0 and 65535 (0 disables serving), got {value}"
        ));
        0
    })
}

/// An IP address flag.
fn ip(flag: &str, value: &str, errors: &mut Vec<String>) -> Option<IpAddr> {
    value
        .trim()
        .parse()
        .map_err(|_| errors.push(format!("--{flag} {value:?} is not an IP address")))
        .ok()
}

/// Every entry of a request-header list flag must be non-blank (upstream's message).
fn header_list(flag: &str, values: &[String], errors: &mut Vec<String>) -> Vec<String> {
    if values.iter().any(|v| v.trim().is_empty()) {
        errors.push(format!("empty value in \"--{flag}\""));
    }
    values.iter().map(|v| v.trim().to_string()).collect()
}

/// `--bind-address`, `--secure-port`, the TLS, debugging and delegated-auth flags; `None` when serving is
/// off.
pub(super) fn validate_serving(
    options: &Options,
    gates: &FeatureGates,
    errors: &mut Vec<String>,
) -> Option<ServingSettings> {
    let before = errors.len();
    let s = &options.serving;
    let port = port("secure-port", s.secure_port, errors);
    let ip = ip("bind-address", &s.bind_address, errors);
    let (cert, tls) = check_tls(
        TlsFlags {
            prefix: "",
            cert: &s.tls_cert_file,
            key: &s.tls_private_key_file,
            cert_dir: &s.cert_dir,
            suites: &s.tls_cipher_suites,
            curves: &s.tls_curve_preferences,
            min_version: &s.tls_min_version,
            sni: &s.tls_sni_cert_key,
            disable_http2: s.disable_http2_serving,
        },
        errors,
    );
    let max_concurrent_streams =
        u32::try_from(s.http2_max_streams_per_connection.max(0)).unwrap_or(u32::MAX);
    let authentication = validate_authentication(options, gates, errors);
    let authorization = validate_authorization(options, errors);
    if errors.len() != before || port == 0 {
        return None;
    }
    Some(ServingSettings {
        address: SocketAddr::new(ip?, port),
        cert,
        tls,
        max_concurrent_streams,
        reuse_port: s.permit_port_sharing,
        reuse_address: s.permit_address_sharing,
        profiling: s.profiling,
        authentication,
        authorization,
    })
}

fn validate_authentication(
    options: &Options,
    gates: &FeatureGates,
    errors: &mut Vec<String>,
) -> AuthenticationSettings {
    let a = &options.authentication;
    let uid_headers = header_list(
        "requestheader-uid-headers",
        &a.requestheader_uid_headers,
        errors,
    );
    let request_header_uid = gates.enabled(REMOTE_REQUEST_HEADER_UID);
    if !uid_headers.is_empty() {
        if !request_header_uid {
            errors.push(format!(
                "--requestheader-uid-headers requires the {REMOTE_REQUEST_HEADER_UID:?} feature to be enabled"
            ));
        } else if !uid_headers
            .iter()
            .any(|h| h.eq_ignore_ascii_case("X-Remote-Uid"))
        {
            errors.push(
                "--requestheader-uid-headers is set without specifying the standard X-Remote-Uid header \
                 - API aggregation will not work"
                    .to_string(),
            );
        }
    }
    let config = RequestHeaderConfig {
        allowed_names: header_list(
            "requestheader-allowed-names",
            &a.requestheader_allowed_names,
            errors,
        ),
        username_headers: header_list(
            "requestheader-username-headers",
            &a.requestheader_username_headers,
            errors,
        ),
        uid_headers,
        group_headers: header_list(
            "requestheader-group-headers",
            &a.requestheader_group_headers,
            errors,
        ),
        extra_headers_prefixes: header_list(
            "requestheader-extra-headers-prefix",
            &a.requestheader_extra_headers_prefix,
            errors,
        ),
    };
    AuthenticationSettings {
        kubeconfig: non_empty_path(&a.authentication_kubeconfig),
        lookup: !a.authentication_skip_lookup,
        tolerate_lookup_failure: a.authentication_tolerate_lookup_failure,
        token_cache_ttl: a.authentication_token_webhook_cache_ttl,
        client_ca_file: non_empty_path(&a.client_ca_file),
        request_header: non_empty_path(&a.requestheader_client_ca_file).map(|ca| (ca, config)),
        uid_from_certificates: gates.enabled(ALLOW_PARSING_USER_UID_FROM_CERT_AUTH),
        request_header_uid,
    }
}

fn validate_authorization(options: &Options, errors: &mut Vec<String>) -> AuthorizationSettings {
    let a = &options.authorization;
    for path in &a.authorization_always_allow_paths {
        if !path.starts_with('/') {
            errors.push(format!(
                "--authorization-always-allow-paths: {path:?} must start with \"/\""
            ));
        } else if path.find('*').is_some_and(|i| i != path.len() - 1) {
            errors.push(format!(
                "--authorization-always-allow-paths: {path:?} may only have \"*\" as its last character"
            ));
        }
    }
    AuthorizationSettings {
        kubeconfig: non_empty_path(&a.authorization_kubeconfig),
        always_allow_paths: a.authorization_always_allow_paths.clone(),
        allowed_ttl: a.authorization_webhook_cache_authorized_ttl,
        denied_ttl: a.authorization_webhook_cache_unauthorized_ttl,
    }
}

/// The webhook flags: `--webhooks` names known webhooks and enables them as `--controllers` does (`*`,
/// `name`, `-name`; none without the flag, as upstream), and the endpoint's flags are checked like the
/// secure serving endpoint's.
pub(super) fn validate_webhook(
    options: &Options,
    gates: &FeatureGates,
    errors: &mut Vec<String>,
) -> WebhookSettings {
    let before = errors.len();
    let w = &options.webhook;
    let entries: Vec<&str> = w.webhooks.iter().map(|e| e.trim()).collect();
    for entry in &entries {
        let name = entry.trim_start_matches('-');
        if *entry != "*" && !name.is_empty() && !KNOWN_WEBHOOKS.contains(&name) {
            errors.push(format!(
                "--webhooks: {name:?} is not in the list of known webhooks ({})",
                KNOWN_WEBHOOKS.join(", ")
            ));
        }
    }
    let enabled: Vec<String> = KNOWN_WEBHOOKS
        .iter()
        .filter(|name| webhook_enabled(name, &entries))
        .map(|name| name.to_string())
        .collect();
    let port = port("webhook-secure-port", w.webhook_secure_port, errors);
    let ip = ip("webhook-bind-address", &w.webhook_bind_address, errors);
    let (cert, tls) = check_tls(
        TlsFlags {
            prefix: "webhook-",
            cert: &w.webhook_tls_cert_file,
            key: &w.webhook_tls_private_key_file,
            cert_dir: &w.webhook_cert_dir,
            suites: &w.webhook_tls_cipher_suites,
            curves: &w.webhook_tls_curve_preferences,
            min_version: &w.webhook_tls_min_version,
            sni: &w.webhook_tls_sni_cert_key,
            disable_http2: w.webhook_disable_http2_serving,
        },
        errors,
    );
    let gate = gates.enabled(CLOUD_CONTROLLER_MANAGER_WEBHOOK);
    let serving = match ip {
        Some(ip) if gate && port != 0 && !enabled.is_empty() && errors.len() == before => {
            Some(WebhookServing {
                address: SocketAddr::new(ip, port),
                cert,
                tls,
            })
        }
        _ => None,
    };
    WebhookSettings { enabled, serving }
}

/// Whether `--webhooks` enables `name`: named, or `*` without `-name` (no webhook is off by default).
fn webhook_enabled(name: &str, entries: &[&str]) -> bool {
    let mut star = false;
    for entry in entries {
        if *entry == name {
            return true;
        }
        if entry.strip_prefix('-') == Some(name) {
            return false;
        }
        star |= *entry == "*";
    }
    star
}
