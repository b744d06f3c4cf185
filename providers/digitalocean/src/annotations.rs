//! Service annotations of DigitalOcean load balancers, parsed and validated into [`LbSettings`].
//!
//! Everything here is pure: it looks at the Service only. Errors name the annotation (or spec field) at
//! fault; the service controller reports them as Warning events on the Service.
//!
//! Forwarding rules:
//! - `REGIONAL`: one rule per service port, entry port = port, target port = node port. UDP ports become
//!   `udp` rules. TCP ports take the protocol of the first port list naming them (`http-ports`,
//!   `tls-ports` = https, `http2-ports`, `http3-port`), else the `protocol` annotation (default `tcp`).
//!   `https`/`http2`/`http3` rules terminate TLS with the certificate (`certificate-id` or
//!   `certificate-name`) and speak `http` to the droplets, or with `tls-passthrough` keep their protocol
//!   (`http3` cannot pass TLS through). With a certificate or pass-through and no `tls-ports`, port 443 is
//!   https unless `http2-ports` or `http3-port` already claims it.
//! - `REGIONAL_NETWORK`: `tcp` and `udp` only, entry port = target port = service port.
//! - SCTP is refused by both.
//!
//! Health check: unless `override-health-check` is true, `http` `GET /healthz` on the Service's
//! `healthCheckNodePort` when `externalTrafficPolicy: Local`, else on kube-proxy's port 10256 — so the load
//! balancer follows the nodes that can really serve. With the override, `healthcheck-port` (a service port;
//! its node port is checked; default the first TCP port), `healthcheck-protocol` (`tcp`, `http`, `https`;
//! default `tcp`) and `healthcheck-path` (default `/`) apply. Interval (3..=300, default 3), response
//! timeout (3..=300, default 5), unhealthy (2..=10, default 3) and healthy (2..=10, default 5) thresholds
//! apply in both modes.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};

use k8s_openapi::api::core::v1::{Service, ServicePort};

use crate::api::{ForwardingRule, HealthCheck, LbFirewall, StickySessions};
use crate::config::LbType;

/// The prefix of the `service.beta.kubernetes.io/do-loadbalancer-*` annotations.
pub const ANN_PREFIX: &str = "service.beta.kubernetes.io/do-loadbalancer-";
/// The load balancer's UUID, written back by the provider; pre-set it to adopt an existing load balancer.
pub const ANN_LOAD_BALANCER_ID: &str = "kubernetes.digitalocean.com/load-balancer-id";
/// `"true"`: the provider leaves the load balancer alone (no create, update or delete).
pub const ANN_DISOWN: &str = "service.kubernetes.io/do-loadbalancer-disown";
/// Custom load-balancer name.
pub const ANN_NAME: &str = "service.beta.kubernetes.io/do-loadbalancer-name";
/// Default protocol of TCP ports: `tcp`, `http`, `https`, `http2` or `http3`.
pub const ANN_PROTOCOL: &str = "service.beta.kubernetes.io/do-loadbalancer-protocol";
/// Comma-separated ports speaking HTTP.
pub const ANN_HTTP_PORTS: &str = "service.beta.kubernetes.io/do-loadbalancer-http-ports";
/// Comma-separated ports speaking HTTPS.
pub const ANN_TLS_PORTS: &str = "service.beta.kubernetes.io/do-loadbalancer-tls-ports";
/// Comma-separated ports speaking HTTP/2.
pub const ANN_HTTP2_PORTS: &str = "service.beta.kubernetes.io/do-loadbalancer-http2-ports";
/// The one port speaking HTTP/3.
pub const ANN_HTTP3_PORT: &str = "service.beta.kubernetes.io/do-loadbalancer-http3-port";
/// `"true"`: TLS passes through to the droplets.
pub const ANN_TLS_PASSTHROUGH: &str = "service.beta.kubernetes.io/do-loadbalancer-tls-passthrough";
/// The certificate (UUID) terminating TLS.
pub const ANN_CERTIFICATE_ID: &str = "service.beta.kubernetes.io/do-loadbalancer-certificate-id";
/// The certificate (by name) terminating TLS; survives Let's Encrypt renewals.
pub const ANN_CERTIFICATE_NAME: &str =
    "service.beta.kubernetes.io/do-loadbalancer-certificate-name";
/// A hostname reported in the Service status instead of the IP addresses.
pub const ANN_HOSTNAME: &str = "service.beta.kubernetes.io/do-loadbalancer-hostname";
/// `lb-small`, `lb-medium` or `lb-large`.
pub const ANN_SIZE_SLUG: &str = "service.beta.kubernetes.io/do-loadbalancer-size-slug";
/// The size in load-balancer nodes.
pub const ANN_SIZE_UNIT: &str = "service.beta.kubernetes.io/do-loadbalancer-size-unit";
/// `none` or `cookies`.
pub const ANN_STICKY_SESSIONS_TYPE: &str =
    "service.beta.kubernetes.io/do-loadbalancer-sticky-sessions-type";
/// The sticky-session cookie name.
pub const ANN_STICKY_SESSIONS_COOKIE_NAME: &str =
    "service.beta.kubernetes.io/do-loadbalancer-sticky-sessions-cookie-name";
/// The sticky-session cookie lifetime in seconds.
pub const ANN_STICKY_SESSIONS_COOKIE_TTL: &str =
    "service.beta.kubernetes.io/do-loadbalancer-sticky-sessions-cookie-ttl";
/// `"true"`: redirect HTTP to HTTPS.
pub const ANN_REDIRECT_HTTP_TO_HTTPS: &str =
    "service.beta.kubernetes.io/do-loadbalancer-redirect-http-to-https";
/// `"true"`: send the PROXY protocol header.
pub const ANN_ENABLE_PROXY_PROTOCOL: &str =
    "service.beta.kubernetes.io/do-loadbalancer-enable-proxy-protocol";
/// `"true"`: keep HTTP connections to droplets alive.
pub const ANN_ENABLE_BACKEND_KEEPALIVE: &str =
    "service.beta.kubernetes.io/do-loadbalancer-enable-backend-keepalive";
/// `"true"`: no DNS records for Let's Encrypt certificates.
pub const ANN_DISABLE_LETS_ENCRYPT_DNS_RECORDS: &str =
    "service.beta.kubernetes.io/do-loadbalancer-disable-lets-encrypt-dns-records";
/// HTTP idle timeout in seconds (30..=600).
pub const ANN_HTTP_IDLE_TIMEOUT_SECONDS: &str =
    "service.beta.kubernetes.io/do-loadbalancer-http-idle-timeout-seconds";
/// Comma-separated firewall allow rules (`ip:<addr>`, `cidr:<net>`).
pub const ANN_ALLOW_RULES: &str = "service.beta.kubernetes.io/do-loadbalancer-allow-rules";
/// Comma-separated firewall deny rules (`ip:<addr>`, `cidr:<net>`).
pub const ANN_DENY_RULES: &str = "service.beta.kubernetes.io/do-loadbalancer-deny-rules";
/// `REGIONAL` or `REGIONAL_NETWORK`; written back by the provider.
pub const ANN_TYPE: &str = "service.beta.kubernetes.io/do-loadbalancer-type";
/// `EXTERNAL` or `INTERNAL`.
pub const ANN_NETWORK: &str = "service.beta.kubernetes.io/do-loadbalancer-network";
/// `IPV4` or `DUALSTACK`.
pub const ANN_NETWORK_STACK: &str = "service.beta.kubernetes.io/do-loadbalancer-network-stack";
/// A reserved IPv4 address to create the load balancer with (ignored after creation).
pub const ANN_IP: &str = "service.beta.kubernetes.io/do-loadbalancer-ip";
/// `"true"`: use the `healthcheck-*` port, protocol and path instead of kube-proxy's health check.
pub const ANN_OVERRIDE_HEALTH_CHECK: &str =
    "service.beta.kubernetes.io/do-loadbalancer-override-health-check";
/// The service port whose node port is health-checked (with the override).
pub const ANN_HEALTH_CHECK_PORT: &str =
    "service.beta.kubernetes.io/do-loadbalancer-healthcheck-port";
/// The health-check path (with the override).
pub const ANN_HEALTH_CHECK_PATH: &str =
    "service.beta.kubernetes.io/do-loadbalancer-healthcheck-path";
/// The health-check protocol (with the override).
pub const ANN_HEALTH_CHECK_PROTOCOL: &str =
    "service.beta.kubernetes.io/do-loadbalancer-healthcheck-protocol";
/// Seconds between health checks (3..=300).
pub const ANN_HEALTH_CHECK_INTERVAL_SECONDS: &str =
    "service.beta.kubernetes.io/do-loadbalancer-healthcheck-check-interval-seconds";
/// Seconds to wait for a health-check answer (3..=300).
pub const ANN_HEALTH_CHECK_RESPONSE_TIMEOUT_SECONDS: &str =
    "service.beta.kubernetes.io/do-loadbalancer-healthcheck-response-timeout-seconds";
/// Failed checks before a droplet is taken out (2..=10).
pub const ANN_HEALTH_CHECK_UNHEALTHY_THRESHOLD: &str =
    "service.beta.kubernetes.io/do-loadbalancer-healthcheck-unhealthy-threshold";
/// Passed checks before a droplet is put back (2..=10).
pub const ANN_HEALTH_CHECK_HEALTHY_THRESHOLD: &str =
    "service.beta.kubernetes.io/do-loadbalancer-healthcheck-healthy-threshold";

/// kube-proxy's health-check port.
pub const KUBE_PROXY_HEALTH_CHECK_PORT: u16 = 10256;

/// A Service whose load-balancer configuration cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid load balancer configuration: {field}: {message}")]
pub struct ServiceConfigError {
    /// The annotation or spec field at fault.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> ServiceConfigError {
    ServiceConfigError {
        field: field.into(),
        message: message.into(),
    }
}

/// How the TLS certificate is named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertificateRef {
    /// By UUID (`certificate-id`).
    Id(String),
    /// By name (`certificate-name`), resolved through `GET /v2/certificates`.
    Name(String),
}

/// Everything the Service says about its load balancer, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct LbSettings {
    /// The load-balancer name.
    pub name: String,
    /// The load-balancer type.
    pub lb_type: LbType,
    /// Forwarding rules; rules terminating TLS have an empty `certificate_id` until it is resolved.
    pub forwarding_rules: Vec<ForwardingRule>,
    /// The certificate for rules terminating TLS.
    pub certificate: Option<CertificateRef>,
    /// The health check.
    pub health_check: HealthCheck,
    /// Sticky sessions.
    pub sticky_sessions: StickySessions,
    /// Size slug.
    pub size: Option<String>,
    /// Size in nodes.
    pub size_unit: Option<u32>,
    /// Redirect HTTP to HTTPS.
    pub redirect_http_to_https: bool,
    /// PROXY protocol.
    pub enable_proxy_protocol: bool,
    /// Backend keepalive.
    pub enable_backend_keepalive: bool,
    /// No Let's Encrypt DNS records.
    pub disable_lets_encrypt_dns_records: bool,
    /// HTTP idle timeout.
    pub http_idle_timeout_seconds: Option<u32>,
    /// The firewall.
    pub firewall: LbFirewall,
    /// `EXTERNAL` or `INTERNAL`.
    pub network: Option<String>,
    /// `IPV4` or `DUALSTACK`.
    pub network_stack: Option<String>,
    /// Reserved IP for creation.
    pub ip: Option<String>,
    /// Hostname for the status.
    pub hostname: Option<String>,
}

/// True for a rule that terminates TLS and so needs a certificate.
pub fn needs_certificate(rule: &ForwardingRule) -> bool {
    matches!(rule.entry_protocol.as_str(), "https" | "http2" | "http3") && !rule.tls_passthrough
}

impl LbSettings {
    /// The forwarding rules with `certificate_id` set on the rules terminating TLS.
    pub fn rules_with_certificate(&self, certificate_id: &str) -> Vec<ForwardingRule> {
        self.forwarding_rules
            .iter()
            .cloned()
            .map(|mut r| {
                if needs_certificate(&r) {
                    r.certificate_id = certificate_id.to_string();
                }
                r
            })
            .collect()
    }

    /// True when the load balancer terminates connections in a way in-cluster clients must not bypass:
    /// it terminates TLS or HTTP, or adds the PROXY protocol header. The Service status then reports
    /// `ipMode: Proxy`, so kube-proxy sends in-cluster traffic through the load balancer.
    pub fn proxies_traffic(&self) -> bool {
        self.enable_proxy_protocol
            || self.forwarding_rules.iter().any(|r| {
                !r.tls_passthrough
                    && matches!(
                        r.entry_protocol.as_str(),
                        "http" | "https" | "http2" | "http3"
                    )
            })
    }
}

/// Annotation access with trimming and typed parsing.
struct Annotations<'a>(Option<&'a BTreeMap<String, String>>);

impl<'a> Annotations<'a> {
    fn of(service: &'a Service) -> Self {
        Annotations(service.metadata.annotations.as_ref())
    }

    fn get(&self, key: &str) -> Option<&'a str> {
        self.0
            .and_then(|m| m.get(key))
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
    }

    fn bool(&self, key: &str) -> Result<bool, ServiceConfigError> {
        match self.get(key) {
            None => Ok(false),
            Some(v) => parse_bool(v).ok_or_else(|| {
                invalid(
                    key,
                    format!("{v:?} is not a boolean (use \"true\" or \"false\")"),
                )
            }),
        }
    }

    fn int_in(
        &self,
        key: &str,
        min: u32,
        max: u32,
        default: u32,
    ) -> Result<u32, ServiceConfigError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => match v.parse::<i64>() {
                Ok(n) if n >= i64::from(min) && n <= i64::from(max) => Ok(n as u32),
                Ok(n) => Err(invalid(key, format!("{n} is not between {min} and {max}"))),
                Err(_) => Err(invalid(key, format!("{v:?} is not an integer"))),
            },
        }
    }

    fn ports(&self, key: &str) -> Result<Vec<u16>, ServiceConfigError> {
        let Some(raw) = self.get(key) else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for part in raw.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            out.push(parse_port(key, part)?);
        }
        Ok(out)
    }

    fn one_of(&self, key: &str, allowed: &[&str]) -> Result<Option<String>, ServiceConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => {
                let norm = v.to_ascii_lowercase();
                allowed
                    .iter()
                    .find(|a| a.eq_ignore_ascii_case(&norm))
                    .map(|a| Some(a.to_string()))
                    .ok_or_else(|| {
                        invalid(key, format!("{v:?} is not one of {}", allowed.join(", ")))
                    })
            }
        }
    }
}

/// Parses a boolean the way Kubernetes users expect (`true`/`false`, `1`/`0`, `t`/`f`, any case).
pub fn parse_bool(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "t" | "true" => Some(true),
        "0" | "f" | "false" => Some(false),
        _ => None,
    }
}

fn parse_port(key: &str, raw: &str) -> Result<u16, ServiceConfigError> {
    match raw.parse::<u32>() {
        Ok(p) if (1..=65535).contains(&p) => Ok(p as u16),
        Ok(p) => Err(invalid(key, format!("port {p} is out of range 1-65535"))),
        Err(_) => Err(invalid(key, format!("{raw:?} is not a port number"))),
    }
}

/// The load-balancer name: the `do-loadbalancer-name` annotation (validated), else the default name.
pub fn load_balancer_name(service: &Service) -> Result<String, ServiceConfigError> {
    match Annotations::of(service).get(ANN_NAME) {
        None => Ok(cloud_provider::default_load_balancer_name(service)),
        Some(name) => {
            validate_name(name)?;
            Ok(name.to_string())
        }
    }
}

fn validate_name(name: &str) -> Result<(), ServiceConfigError> {
    let err = |m: &str| Err(invalid(ANN_NAME, format!("{name:?} {m}")));
    if name.len() > 255 {
        return err("is longer than 255 characters");
    }
    if !name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric())
    {
        return err("must start with a letter or digit");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
    {
        return err("may only contain letters, digits, '.' and '-'");
    }
    if name.ends_with('-') {
        return err("must not end with '-'");
    }
    Ok(())
}

/// The load-balancer UUID annotation.
pub fn load_balancer_id(service: &Service) -> Option<String> {
    Annotations::of(service)
        .get(ANN_LOAD_BALANCER_ID)
        .map(str::to_string)
}

/// Whether the Service disowned its load balancer.
pub fn is_disowned(service: &Service) -> Result<bool, ServiceConfigError> {
    Annotations::of(service).bool(ANN_DISOWN)
}

/// The type the Service asks for, if it names one.
pub fn annotated_type(service: &Service) -> Result<Option<LbType>, ServiceConfigError> {
    Annotations::of(service)
        .get(ANN_TYPE)
        .map(|v| v.parse::<LbType>().map_err(|m| invalid(ANN_TYPE, m)))
        .transpose()
}

/// The hostname annotation.
pub fn hostname(service: &Service) -> Option<String> {
    Annotations::of(service)
        .get(ANN_HOSTNAME)
        .map(str::to_string)
}

/// The certificate the Service names, if any (both forms at once is an error).
pub fn certificate_ref(service: &Service) -> Result<Option<CertificateRef>, ServiceConfigError> {
    let a = Annotations::of(service);
    match (a.get(ANN_CERTIFICATE_ID), a.get(ANN_CERTIFICATE_NAME)) {
        (Some(_), Some(_)) => Err(invalid(
            ANN_CERTIFICATE_NAME,
            format!("set either {ANN_CERTIFICATE_ID} or {ANN_CERTIFICATE_NAME}, not both"),
        )),
        (Some(id), None) => Ok(Some(CertificateRef::Id(id.to_string()))),
        (None, Some(name)) => Ok(Some(CertificateRef::Name(name.to_string()))),
        (None, None) => Ok(None),
    }
}

/// Parses and validates the Service's load-balancer configuration for a load balancer of `lb_type`.
pub fn parse_service(service: &Service, lb_type: LbType) -> Result<LbSettings, ServiceConfigError> {
    let a = Annotations::of(service);
    let ports = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_deref())
        .unwrap_or_default();
    if ports.is_empty() {
        return Err(invalid("spec.ports", "the Service has no ports"));
    }

    let certificate = certificate_ref(service)?;
    let passthrough = a.bool(ANN_TLS_PASSTHROUGH)?;
    let forwarding_rules = match lb_type {
        LbType::Regional => regional_rules(&a, ports, certificate.as_ref(), passthrough)?,
        LbType::RegionalNetwork => network_rules(&a, ports, certificate.as_ref(), passthrough)?,
    };
    let health_check = health_check(&a, service, ports)?;
    let sticky_sessions = sticky_sessions(&a)?;
    if sticky_sessions.type_ == "cookies"
        && !forwarding_rules.iter().any(|r| {
            !r.tls_passthrough
                && matches!(
                    r.entry_protocol.as_str(),
                    "http" | "https" | "http2" | "http3"
                )
        })
    {
        return Err(invalid(
            ANN_STICKY_SESSIONS_TYPE,
            "cookie sticky sessions need an http, https, http2 or http3 forwarding rule that is not TLS pass-through",
        ));
    }
    let redirect_http_to_https = a.bool(ANN_REDIRECT_HTTP_TO_HTTPS)?;
    if redirect_http_to_https && lb_type == LbType::RegionalNetwork {
        return Err(invalid(
            ANN_REDIRECT_HTTP_TO_HTTPS,
            "REGIONAL_NETWORK load balancers forward tcp and udp only and cannot redirect HTTP",
        ));
    }

    let size = a.one_of(ANN_SIZE_SLUG, &["lb-small", "lb-medium", "lb-large"])?;
    let size_unit = match a.get(ANN_SIZE_UNIT) {
        None => None,
        Some(v) => match v.parse::<i64>() {
            Ok(n) if (0..=i64::from(u32::MAX)).contains(&n) => Some(n as u32),
            Ok(n) => return Err(invalid(ANN_SIZE_UNIT, format!("{n} must not be negative"))),
            Err(_) => return Err(invalid(ANN_SIZE_UNIT, format!("{v:?} is not an integer"))),
        },
    };
    if size.is_some() && size_unit.is_some() {
        return Err(invalid(
            ANN_SIZE_UNIT,
            format!("set either {ANN_SIZE_SLUG} or {ANN_SIZE_UNIT}, not both"),
        ));
    }

    let http_idle_timeout_seconds = match a.get(ANN_HTTP_IDLE_TIMEOUT_SECONDS) {
        None => None,
        Some(_) => Some(a.int_in(ANN_HTTP_IDLE_TIMEOUT_SECONDS, 30, 600, 60)?),
    };

    let network = a
        .one_of(ANN_NETWORK, &["EXTERNAL", "INTERNAL"])?
        .map(|v| v.to_ascii_uppercase());
    let network_stack = a
        .one_of(ANN_NETWORK_STACK, &["IPV4", "DUALSTACK"])?
        .map(|v| v.to_ascii_uppercase());
    let ip = match a.get(ANN_IP) {
        None => None,
        Some(v) => Some(
            v.parse::<Ipv4Addr>()
                .map_err(|_| invalid(ANN_IP, format!("{v:?} is not an IPv4 address")))?
                .to_string(),
        ),
    };

    Ok(LbSettings {
        name: load_balancer_name(service)?,
        lb_type,
        forwarding_rules,
        certificate,
        health_check,
        sticky_sessions,
        size,
        size_unit,
        redirect_http_to_https,
        enable_proxy_protocol: a.bool(ANN_ENABLE_PROXY_PROTOCOL)?,
        enable_backend_keepalive: a.bool(ANN_ENABLE_BACKEND_KEEPALIVE)?,
        disable_lets_encrypt_dns_records: a.bool(ANN_DISABLE_LETS_ENCRYPT_DNS_RECORDS)?,
        http_idle_timeout_seconds,
        firewall: firewall(&a, service)?,
        network,
        network_stack,
        ip,
        hostname: hostname(service),
    })
}

const PROTOCOLS: [&str; 5] = ["tcp", "http", "https", "http2", "http3"];

fn port_protocol(index: usize, port: &ServicePort) -> Result<&str, ServiceConfigError> {
    match port.protocol.as_deref().unwrap_or("TCP") {
        "TCP" => Ok("TCP"),
        "UDP" => Ok("UDP"),
        other => Err(invalid(
            format!("spec.ports[{index}].protocol"),
            format!("{other} is not supported by DigitalOcean load balancers (TCP and UDP only)"),
        )),
    }
}

fn service_port(index: usize, port: &ServicePort) -> Result<u16, ServiceConfigError> {
    u16::try_from(port.port)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| {
            invalid(
                format!("spec.ports[{index}].port"),
                format!("{} is not a port", port.port),
            )
        })
}

fn node_port(index: usize, port: &ServicePort) -> Result<u16, ServiceConfigError> {
    port.node_port
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p > 0)
        .ok_or_else(|| {
            invalid(
                format!("spec.ports[{index}].nodePort"),
                "no node port is allocated (yet)",
            )
        })
}

fn regional_rules(
    a: &Annotations<'_>,
    ports: &[ServicePort],
    certificate: Option<&CertificateRef>,
    passthrough: bool,
) -> Result<Vec<ForwardingRule>, ServiceConfigError> {
    let default_protocol = a
        .one_of(ANN_PROTOCOL, &PROTOCOLS)?
        .unwrap_or_else(|| "tcp".into());
    let http_ports = a.ports(ANN_HTTP_PORTS)?;
    let mut tls_ports = a.ports(ANN_TLS_PORTS)?;
    let http2_ports = a.ports(ANN_HTTP2_PORTS)?;
    let http3_port = match a.get(ANN_HTTP3_PORT) {
        None => None,
        Some(v) => Some(parse_port(ANN_HTTP3_PORT, v)?),
    };

    let lists: [(&str, &[u16]); 4] = [
        (ANN_HTTP_PORTS, &http_ports),
        (ANN_TLS_PORTS, &tls_ports),
        (ANN_HTTP2_PORTS, &http2_ports),
        (ANN_HTTP3_PORT, http3_port.as_slice()),
    ];
    let mut seen: BTreeMap<u16, &str> = BTreeMap::new();
    for (key, list) in lists {
        for p in list {
            if let Some(other) = seen.insert(*p, key)
                && other != key
            {
                return Err(invalid(key, format!("port {p} is also listed in {other}")));
            }
        }
    }

    if certificate.is_some() && passthrough {
        return Err(invalid(
            ANN_TLS_PASSTHROUGH,
            "either name a certificate or enable TLS pass-through, not both",
        ));
    }
    let secure = certificate.is_some() || passthrough;
    if secure && tls_ports.is_empty() && !seen.contains_key(&443) {
        tls_ports.push(443);
    }
    if http3_port.is_some() || default_protocol == "http3" {
        if passthrough {
            return Err(invalid(
                ANN_TLS_PASSTHROUGH,
                "http3 cannot pass TLS through; name a certificate instead",
            ));
        }
        if certificate.is_none() {
            return Err(invalid(
                ANN_HTTP3_PORT,
                format!("http3 needs {ANN_CERTIFICATE_ID} or {ANN_CERTIFICATE_NAME}"),
            ));
        }
        if http3_port.is_some() && tls_ports.is_empty() && http2_ports.is_empty() {
            return Err(invalid(
                ANN_HTTP3_PORT,
                format!(
                    "http3 needs an https or http2 port too ({ANN_TLS_PORTS} or {ANN_HTTP2_PORTS})"
                ),
            ));
        }
    }

    let mut rules = Vec::with_capacity(ports.len());
    for (i, port) in ports.iter().enumerate() {
        let entry_port = service_port(i, port)?;
        let target_port = node_port(i, port)?;
        if port_protocol(i, port)? == "UDP" {
            rules.push(ForwardingRule {
                entry_protocol: "udp".into(),
                entry_port,
                target_protocol: "udp".into(),
                target_port,
                ..Default::default()
            });
            continue;
        }
        let protocol = if http_ports.contains(&entry_port) {
            "http"
        } else if tls_ports.contains(&entry_port) {
            "https"
        } else if http2_ports.contains(&entry_port) {
            "http2"
        } else if http3_port == Some(entry_port) {
            "http3"
        } else {
            default_protocol.as_str()
        };
        let mut rule = ForwardingRule {
            entry_protocol: protocol.into(),
            entry_port,
            target_protocol: protocol.into(),
            target_port,
            ..Default::default()
        };
        if matches!(protocol, "https" | "http2" | "http3") {
            if passthrough {
                rule.tls_passthrough = true;
            } else if certificate.is_some() {
                rule.target_protocol = "http".into();
            } else {
                return Err(invalid(
                    format!("spec.ports[{i}]"),
                    format!(
                        "port {entry_port} speaks {protocol}: set {ANN_CERTIFICATE_ID}, {ANN_CERTIFICATE_NAME} or {ANN_TLS_PASSTHROUGH}"
                    ),
                ));
            }
        }
        rules.push(rule);
    }
    Ok(rules)
}

fn network_rules(
    a: &Annotations<'_>,
    ports: &[ServicePort],
    certificate: Option<&CertificateRef>,
    passthrough: bool,
) -> Result<Vec<ForwardingRule>, ServiceConfigError> {
    let why = "REGIONAL_NETWORK load balancers forward tcp and udp only";
    if let Some(p) = a.one_of(ANN_PROTOCOL, &PROTOCOLS)?
        && p != "tcp"
    {
        return Err(invalid(ANN_PROTOCOL, format!("{p}: {why}")));
    }
    for key in [
        ANN_HTTP_PORTS,
        ANN_TLS_PORTS,
        ANN_HTTP2_PORTS,
        ANN_HTTP3_PORT,
    ] {
        if a.get(key).is_some() {
            return Err(invalid(key, why));
        }
    }
    if certificate.is_some() || passthrough {
        let key = if passthrough {
            ANN_TLS_PASSTHROUGH
        } else if a.get(ANN_CERTIFICATE_ID).is_some() {
            ANN_CERTIFICATE_ID
        } else {
            ANN_CERTIFICATE_NAME
        };
        return Err(invalid(key, format!("{why}; TLS is not available")));
    }
    let mut rules = Vec::with_capacity(ports.len());
    for (i, port) in ports.iter().enumerate() {
        let p = service_port(i, port)?;
        let protocol = if port_protocol(i, port)? == "UDP" {
            "udp"
        } else {
            "tcp"
        };
        rules.push(ForwardingRule {
            entry_protocol: protocol.into(),
            entry_port: p,
            target_protocol: protocol.into(),
            target_port: p,
            ..Default::default()
        });
    }
    Ok(rules)
}

fn health_check(
    a: &Annotations<'_>,
    service: &Service,
    ports: &[ServicePort],
) -> Result<HealthCheck, ServiceConfigError> {
    let check_interval_seconds = a.int_in(ANN_HEALTH_CHECK_INTERVAL_SECONDS, 3, 300, 3)?;
    let response_timeout_seconds =
        a.int_in(ANN_HEALTH_CHECK_RESPONSE_TIMEOUT_SECONDS, 3, 300, 5)?;
    let unhealthy_threshold = a.int_in(ANN_HEALTH_CHECK_UNHEALTHY_THRESHOLD, 2, 10, 3)?;
    let healthy_threshold = a.int_in(ANN_HEALTH_CHECK_HEALTHY_THRESHOLD, 2, 10, 5)?;
    let mut check = HealthCheck {
        check_interval_seconds,
        response_timeout_seconds,
        unhealthy_threshold,
        healthy_threshold,
        ..Default::default()
    };

    if !a.bool(ANN_OVERRIDE_HEALTH_CHECK)? {
        let spec = service.spec.as_ref();
        let local = spec
            .and_then(|s| s.external_traffic_policy.as_deref())
            .is_some_and(|p| p == "Local");
        check.protocol = "http".into();
        check.path = "/healthz".into();
        check.port = if local {
            spec.and_then(|s| s.health_check_node_port)
                .and_then(|p| u16::try_from(p).ok())
                .filter(|p| *p > 0)
                .ok_or_else(|| {
                    invalid(
                        "spec.healthCheckNodePort",
                        "externalTrafficPolicy is Local but no health check node port is allocated (yet)",
                    )
                })?
        } else {
            KUBE_PROXY_HEALTH_CHECK_PORT
        };
        return Ok(check);
    }

    check.protocol = a
        .one_of(ANN_HEALTH_CHECK_PROTOCOL, &["tcp", "http", "https"])?
        .unwrap_or_else(|| "tcp".into());
    let (index, port) = match a.get(ANN_HEALTH_CHECK_PORT) {
        Some(raw) => {
            let wanted = parse_port(ANN_HEALTH_CHECK_PORT, raw)?;
            ports
                .iter()
                .enumerate()
                .find(|(_, p)| p.port == i32::from(wanted))
                .ok_or_else(|| {
                    invalid(
                        ANN_HEALTH_CHECK_PORT,
                        format!("{wanted} is not a port of the Service (use the service port, not the node port)"),
                    )
                })?
        }
        None => ports
            .iter()
            .enumerate()
            .find(|(_, p)| p.protocol.as_deref().unwrap_or("TCP") == "TCP")
            .ok_or_else(|| {
                invalid(
                    ANN_HEALTH_CHECK_PORT,
                    "the Service has no TCP port to health-check; name one",
                )
            })?,
    };
    check.port = node_port(index, port)?;
    if check.protocol != "tcp" {
        check.path = a.get(ANN_HEALTH_CHECK_PATH).unwrap_or("/").to_string();
        if !check.path.starts_with('/') {
            return Err(invalid(
                ANN_HEALTH_CHECK_PATH,
                format!("{:?} must start with '/'", check.path),
            ));
        }
    }
    Ok(check)
}

fn sticky_sessions(a: &Annotations<'_>) -> Result<StickySessions, ServiceConfigError> {
    let kind = a
        .one_of(ANN_STICKY_SESSIONS_TYPE, &["none", "cookies"])?
        .unwrap_or_else(|| "none".into());
    if kind == "none" {
        return Ok(StickySessions {
            type_: kind,
            ..Default::default()
        });
    }
    let name = a.get(ANN_STICKY_SESSIONS_COOKIE_NAME).ok_or_else(|| {
        invalid(
            ANN_STICKY_SESSIONS_COOKIE_NAME,
            "required when the sticky sessions type is cookies",
        )
    })?;
    let ttl = match a.get(ANN_STICKY_SESSIONS_COOKIE_TTL) {
        None => {
            return Err(invalid(
                ANN_STICKY_SESSIONS_COOKIE_TTL,
                "required when the sticky sessions type is cookies",
            ));
        }
        Some(v) => match v.parse::<u32>() {
            Ok(n) if n > 0 => n,
            _ => {
                return Err(invalid(
                    ANN_STICKY_SESSIONS_COOKIE_TTL,
                    format!("{v:?} is not a positive number of seconds"),
                ));
            }
        },
    };
    Ok(StickySessions {
        type_: kind,
        cookie_name: Some(name.to_string()),
        cookie_ttl_seconds: Some(ttl),
    })
}

fn firewall_rules(key: &str, raw: Option<&str>) -> Result<Vec<String>, ServiceConfigError> {
    let Some(raw) = raw else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for rule in raw.split(',').map(str::trim).filter(|r| !r.is_empty()) {
        let normalized = match rule.split_once(':') {
            Some(("ip", addr)) => {
                let ip: IpAddr = addr.trim().parse().map_err(|_| {
                    invalid(key, format!("{rule:?}: {addr:?} is not an IP address"))
                })?;
                format!("ip:{ip}")
            }
            Some(("cidr", net)) => {
                let net: ipnet::IpNet = net
                    .trim()
                    .parse()
                    .map_err(|_| invalid(key, format!("{rule:?}: {net:?} is not a CIDR")))?;
                format!("cidr:{net}")
            }
            _ => {
                return Err(invalid(
                    key,
                    format!("{rule:?} must look like ip:<address> or cidr:<network>"),
                ));
            }
        };
        if seen.insert(normalized.clone()) {
            out.push(normalized);
        }
    }
    Ok(out)
}

fn firewall(a: &Annotations<'_>, service: &Service) -> Result<LbFirewall, ServiceConfigError> {
    let ranges = service
        .spec
        .as_ref()
        .and_then(|s| s.load_balancer_source_ranges.as_deref())
        .unwrap_or_default();
    let allow = if ranges.is_empty() {
        firewall_rules(ANN_ALLOW_RULES, a.get(ANN_ALLOW_RULES))?
    } else {
        let mut out = Vec::with_capacity(ranges.len());
        for (i, r) in ranges.iter().enumerate() {
            let net: ipnet::IpNet = r.trim().parse().map_err(|_| {
                invalid(
                    format!("spec.loadBalancerSourceRanges[{i}]"),
                    format!("{r:?} is not a CIDR"),
                )
            })?;
            let rule = format!("cidr:{net}");
            if !out.contains(&rule) {
                out.push(rule);
            }
        }
        out
    };
    Ok(LbFirewall {
        allow,
        deny: firewall_rules(ANN_DENY_RULES, a.get(ANN_DENY_RULES))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ServiceSpec;

    fn port(port: i32, node_port: i32, protocol: &str) -> ServicePort {
        ServicePort {
            port,
            node_port: Some(node_port),
            protocol: Some(protocol.into()),
            ..Default::default()
        }
    }

    fn svc(annotations: &[(&str, &str)], ports: Vec<ServicePort>) -> Service {
        let mut s = Service::default();
        s.metadata.name = Some("web".into());
        s.metadata.namespace = Some("default".into());
        s.metadata.uid = Some("6f0c2b4e-1a2b-4c3d-9e8f-0123456789ab".into());
        s.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        s.spec = Some(ServiceSpec {
            type_: Some("LoadBalancer".into()),
            ports: Some(ports),
            ..Default::default()
        });
        s
    }

    fn web(annotations: &[(&str, &str)]) -> Service {
        svc(
            annotations,
            vec![port(80, 30080, "TCP"), port(443, 30443, "TCP")],
        )
    }

    fn regional(annotations: &[(&str, &str)]) -> Result<LbSettings, ServiceConfigError> {
        parse_service(&web(annotations), LbType::Regional)
    }

    fn err_field(r: Result<LbSettings, ServiceConfigError>) -> String {
        r.unwrap_err().field
    }

    fn rule(entry: &str, ep: u16, target: &str, tp: u16) -> ForwardingRule {
        ForwardingRule {
            entry_protocol: entry.into(),
            entry_port: ep,
            target_protocol: target.into(),
            target_port: tp,
            ..Default::default()
        }
    }

    #[test]
    fn defaults_for_a_plain_service() {
        let s = regional(&[]).unwrap();
        assert_eq!(s.name, "a6f0c2b4e1a2b4c3d9e8f0123456789a");
        assert_eq!(
            s.forwarding_rules,
            vec![
                rule("tcp", 80, "tcp", 30080),
                rule("tcp", 443, "tcp", 30443)
            ]
        );
        assert_eq!(
            s.health_check,
            HealthCheck {
                protocol: "http".into(),
                port: 10256,
                path: "/healthz".into(),
                check_interval_seconds: 3,
                response_timeout_seconds: 5,
                unhealthy_threshold: 3,
                healthy_threshold: 5,
            }
        );
        assert_eq!(s.sticky_sessions.type_, "none");
        assert_eq!(s.firewall, LbFirewall::default());
        assert!(s.certificate.is_none());
        assert!(!s.proxies_traffic());
        assert_eq!((s.size.clone(), s.size_unit), (None, None));
    }

    #[test]
    fn custom_name_is_validated() {
        assert_eq!(
            regional(&[(ANN_NAME, "my-lb.v2")]).unwrap().name,
            "my-lb.v2"
        );
        for bad in ["-lead", "trail-", "sp ace", "under_score", &"x".repeat(256)] {
            assert_eq!(err_field(regional(&[(ANN_NAME, bad)])), ANN_NAME, "{bad}");
        }
    }

    #[test]
    fn protocol_annotation_sets_the_default() {
        let s = regional(&[(ANN_PROTOCOL, "http")]).unwrap();
        assert_eq!(
            s.forwarding_rules,
            vec![
                rule("http", 80, "http", 30080),
                rule("http", 443, "http", 30443)
            ]
        );
        assert!(s.proxies_traffic());
        assert_eq!(err_field(regional(&[(ANN_PROTOCOL, "ftp")])), ANN_PROTOCOL);
        // https without a certificate or pass-through is refused.
        let err = regional(&[(ANN_PROTOCOL, "https")]).unwrap_err();
        assert!(err.message.contains(ANN_CERTIFICATE_ID), "{err}");
    }

    #[test]
    fn port_lists_pick_protocols_and_tls_terminates_with_a_certificate() {
        let s = regional(&[
            (ANN_HTTP_PORTS, "80"),
            (ANN_TLS_PORTS, "443"),
            (ANN_CERTIFICATE_ID, "cert-1"),
        ])
        .unwrap();
        assert_eq!(
            s.forwarding_rules,
            vec![
                rule("http", 80, "http", 30080),
                rule("https", 443, "http", 30443)
            ]
        );
        assert_eq!(s.certificate, Some(CertificateRef::Id("cert-1".into())));
        let filled = s.rules_with_certificate("cert-1");
        assert_eq!(filled[0].certificate_id, "");
        assert_eq!(filled[1].certificate_id, "cert-1");
    }

    #[test]
    fn certificate_implies_https_on_443() {
        let s = regional(&[(ANN_CERTIFICATE_NAME, "www")]).unwrap();
        assert_eq!(s.forwarding_rules[0], rule("tcp", 80, "tcp", 30080));
        assert_eq!(s.forwarding_rules[1], rule("https", 443, "http", 30443));
        assert_eq!(s.certificate, Some(CertificateRef::Name("www".into())));
        // ... unless http2 already claims 443.
        let s = regional(&[(ANN_CERTIFICATE_ID, "c"), (ANN_HTTP2_PORTS, "443")]).unwrap();
        assert_eq!(s.forwarding_rules[1], rule("http2", 443, "http", 30443));
    }

    #[test]
    fn passthrough_keeps_the_protocol() {
        let s = regional(&[(ANN_TLS_PASSTHROUGH, "true"), (ANN_HTTP2_PORTS, "80")]).unwrap();
        let mut https = rule("https", 443, "https", 30443);
        https.tls_passthrough = true;
        let mut h2 = rule("http2", 80, "http2", 30080);
        h2.tls_passthrough = true;
        assert_eq!(s.forwarding_rules, vec![h2, https]);
        assert!(
            s.rules_with_certificate("x")
                .iter()
                .all(|r| r.certificate_id.is_empty())
        );
        assert!(!s.proxies_traffic());
    }

    #[test]
    fn tls_conflicts() {
        let err =
            regional(&[(ANN_CERTIFICATE_ID, "c"), (ANN_TLS_PASSTHROUGH, "true")]).unwrap_err();
        assert_eq!(err.field, ANN_TLS_PASSTHROUGH);
        let err = regional(&[(ANN_CERTIFICATE_ID, "c"), (ANN_CERTIFICATE_NAME, "n")]).unwrap_err();
        assert_eq!(err.field, ANN_CERTIFICATE_NAME);
        let err = regional(&[(ANN_HTTP_PORTS, "80,443"), (ANN_TLS_PORTS, "443")]).unwrap_err();
        assert!(err.message.contains("443"), "{err}");
        assert_eq!(
            err_field(regional(&[(ANN_HTTP_PORTS, "80,x")])),
            ANN_HTTP_PORTS
        );
        assert_eq!(err_field(regional(&[(ANN_TLS_PORTS, "0")])), ANN_TLS_PORTS);
        assert_eq!(
            err_field(regional(&[(ANN_HTTP2_PORTS, "70000")])),
            ANN_HTTP2_PORTS
        );
        assert_eq!(
            err_field(regional(&[(ANN_TLS_PASSTHROUGH, "maybe")])),
            ANN_TLS_PASSTHROUGH
        );
    }

    #[test]
    fn http3_rules() {
        let s = regional(&[
            (ANN_HTTP3_PORT, "443"),
            (ANN_HTTP2_PORTS, "80"),
            (ANN_CERTIFICATE_ID, "c"),
        ])
        .unwrap();
        assert_eq!(
            s.forwarding_rules,
            vec![
                rule("http2", 80, "http", 30080),
                rule("http3", 443, "http", 30443)
            ]
        );
        assert_eq!(
            err_field(regional(&[(ANN_HTTP3_PORT, "443")])),
            ANN_HTTP3_PORT
        );
        assert_eq!(
            err_field(regional(&[
                (ANN_HTTP3_PORT, "443"),
                (ANN_TLS_PASSTHROUGH, "1")
            ])),
            ANN_TLS_PASSTHROUGH
        );
        // http3 alone on 443 leaves no https or http2 port.
        let err = regional(&[(ANN_HTTP3_PORT, "443"), (ANN_CERTIFICATE_ID, "c")]).unwrap_err();
        assert!(err.message.contains("https or http2"), "{err}");
    }

    #[test]
    fn udp_and_sctp_ports() {
        let s = parse_service(
            &svc(&[], vec![port(53, 30053, "UDP"), port(80, 30080, "TCP")]),
            LbType::Regional,
        )
        .unwrap();
        assert_eq!(
            s.forwarding_rules,
            vec![rule("udp", 53, "udp", 30053), rule("tcp", 80, "tcp", 30080)]
        );
        let err =
            parse_service(&svc(&[], vec![port(9, 30009, "SCTP")]), LbType::Regional).unwrap_err();
        assert_eq!(err.field, "spec.ports[0].protocol");
        let err = parse_service(
            &svc(&[], vec![port(9, 30009, "SCTP")]),
            LbType::RegionalNetwork,
        )
        .unwrap_err();
        assert_eq!(err.field, "spec.ports[0].protocol");
    }

    #[test]
    fn missing_ports_and_node_ports() {
        let err = parse_service(&svc(&[], vec![]), LbType::Regional).unwrap_err();
        assert_eq!(err.field, "spec.ports");
        let mut p = port(80, 0, "TCP");
        p.node_port = None;
        let err = parse_service(&svc(&[], vec![p.clone()]), LbType::Regional).unwrap_err();
        assert_eq!(err.field, "spec.ports[0].nodePort");
        // Network load balancers do not need node ports.
        assert!(parse_service(&svc(&[], vec![p]), LbType::RegionalNetwork).is_ok());
    }

    #[test]
    fn regional_network_rules() {
        let s = parse_service(
            &svc(&[], vec![port(80, 30080, "TCP"), port(53, 30053, "UDP")]),
            LbType::RegionalNetwork,
        )
        .unwrap();
        assert_eq!(
            s.forwarding_rules,
            vec![rule("tcp", 80, "tcp", 80), rule("udp", 53, "udp", 53)]
        );
        let net = |ann: &[(&str, &str)]| parse_service(&web(ann), LbType::RegionalNetwork);
        assert!(net(&[(ANN_PROTOCOL, "tcp")]).is_ok());
        for (key, value) in [
            (ANN_PROTOCOL, "http"),
            (ANN_HTTP_PORTS, "80"),
            (ANN_TLS_PORTS, "443"),
            (ANN_HTTP2_PORTS, "443"),
            (ANN_HTTP3_PORT, "443"),
            (ANN_CERTIFICATE_ID, "c"),
            (ANN_CERTIFICATE_NAME, "n"),
            (ANN_TLS_PASSTHROUGH, "true"),
            (ANN_REDIRECT_HTTP_TO_HTTPS, "true"),
        ] {
            assert_eq!(err_field(net(&[(key, value)])), key, "{key}");
        }
        let err = net(&[
            (ANN_STICKY_SESSIONS_TYPE, "cookies"),
            (ANN_STICKY_SESSIONS_COOKIE_NAME, "c"),
            (ANN_STICKY_SESSIONS_COOKIE_TTL, "60"),
        ])
        .unwrap_err();
        assert_eq!(err.field, ANN_STICKY_SESSIONS_TYPE);
    }

    #[test]
    fn default_health_check_follows_traffic_policy() {
        let mut s = web(&[]);
        let spec = s.spec.as_mut().unwrap();
        spec.external_traffic_policy = Some("Local".into());
        spec.health_check_node_port = Some(32100);
        let hc = parse_service(&s, LbType::RegionalNetwork)
            .unwrap()
            .health_check;
        assert_eq!(
            (hc.protocol.as_str(), hc.port, hc.path.as_str()),
            ("http", 32100, "/healthz")
        );
        s.spec.as_mut().unwrap().health_check_node_port = None;
        let err = parse_service(&s, LbType::Regional).unwrap_err();
        assert_eq!(err.field, "spec.healthCheckNodePort");
        // Without the override the healthcheck-port/protocol/path annotations are not used.
        let hc = regional(&[
            (ANN_HEALTH_CHECK_PORT, "443"),
            (ANN_HEALTH_CHECK_PROTOCOL, "tcp"),
        ])
        .unwrap()
        .health_check;
        assert_eq!((hc.protocol.as_str(), hc.port), ("http", 10256));
    }

    #[test]
    fn overridden_health_check() {
        let hc = regional(&[(ANN_OVERRIDE_HEALTH_CHECK, "true")])
            .unwrap()
            .health_check;
        assert_eq!(
            (hc.protocol.as_str(), hc.port, hc.path.as_str()),
            ("tcp", 30080, "")
        );
        let hc = regional(&[
            (ANN_OVERRIDE_HEALTH_CHECK, "true"),
            (ANN_HEALTH_CHECK_PORT, "443"),
            (ANN_HEALTH_CHECK_PROTOCOL, "http"),
            (ANN_HEALTH_CHECK_PATH, "/ready"),
            (ANN_HEALTH_CHECK_INTERVAL_SECONDS, "10"),
            (ANN_HEALTH_CHECK_RESPONSE_TIMEOUT_SECONDS, "8"),
            (ANN_HEALTH_CHECK_UNHEALTHY_THRESHOLD, "4"),
            (ANN_HEALTH_CHECK_HEALTHY_THRESHOLD, "2"),
        ])
        .unwrap()
        .health_check;
        assert_eq!(
            hc,
            HealthCheck {
                protocol: "http".into(),
                port: 30443,
                path: "/ready".into(),
                check_interval_seconds: 10,
                response_timeout_seconds: 8,
                unhealthy_threshold: 4,
                healthy_threshold: 2,
            }
        );
        let hc = regional(&[
            (ANN_OVERRIDE_HEALTH_CHECK, "true"),
            (ANN_HEALTH_CHECK_PROTOCOL, "https"),
        ])
        .unwrap()
        .health_check;
        assert_eq!(hc.path, "/");
        let o = (ANN_OVERRIDE_HEALTH_CHECK, "true");
        for (key, value) in [
            (ANN_HEALTH_CHECK_PORT, "30080"),
            (ANN_HEALTH_CHECK_PROTOCOL, "udp"),
            (ANN_HEALTH_CHECK_INTERVAL_SECONDS, "2"),
            (ANN_HEALTH_CHECK_INTERVAL_SECONDS, "301"),
            (ANN_HEALTH_CHECK_RESPONSE_TIMEOUT_SECONDS, "x"),
            (ANN_HEALTH_CHECK_UNHEALTHY_THRESHOLD, "1"),
            (ANN_HEALTH_CHECK_HEALTHY_THRESHOLD, "11"),
        ] {
            assert_eq!(
                err_field(regional(&[o, (key, value)])),
                key,
                "{key}={value}"
            );
        }
        let err = regional(&[
            o,
            (ANN_HEALTH_CHECK_PROTOCOL, "http"),
            (ANN_HEALTH_CHECK_PATH, "ready"),
        ])
        .unwrap_err();
        assert_eq!(err.field, ANN_HEALTH_CHECK_PATH);
        // Thresholds are validated without the override too.
        assert_eq!(
            err_field(regional(&[(ANN_HEALTH_CHECK_HEALTHY_THRESHOLD, "0")])),
            ANN_HEALTH_CHECK_HEALTHY_THRESHOLD
        );
        let udp_only = svc(&[o], vec![port(53, 30053, "UDP")]);
        let err = parse_service(&udp_only, LbType::Regional).unwrap_err();
        assert_eq!(err.field, ANN_HEALTH_CHECK_PORT);
    }

    #[test]
    fn sticky_sessions_need_cookie_settings_and_http() {
        let cookies = [
            (ANN_PROTOCOL, "http"),
            (ANN_STICKY_SESSIONS_TYPE, "cookies"),
            (ANN_STICKY_SESSIONS_COOKIE_NAME, "route"),
            (ANN_STICKY_SESSIONS_COOKIE_TTL, "300"),
        ];
        let s = regional(&cookies).unwrap();
        assert_eq!(
            s.sticky_sessions,
            StickySessions {
                type_: "cookies".into(),
                cookie_name: Some("route".into()),
                cookie_ttl_seconds: Some(300),
            }
        );
        assert_eq!(
            err_field(regional(&cookies[..3])),
            ANN_STICKY_SESSIONS_COOKIE_TTL
        );
        assert_eq!(
            err_field(regional(&[cookies[0], cookies[1], cookies[3]])),
            ANN_STICKY_SESSIONS_COOKIE_NAME
        );
        assert_eq!(
            err_field(regional(&[
                cookies[0],
                cookies[1],
                cookies[2],
                (ANN_STICKY_SESSIONS_COOKIE_TTL, "-5")
            ])),
            ANN_STICKY_SESSIONS_COOKIE_TTL
        );
        // Cookies over plain tcp cannot work.
        assert_eq!(err_field(regional(&cookies[1..])), ANN_STICKY_SESSIONS_TYPE);
        assert_eq!(
            err_field(regional(&[(ANN_STICKY_SESSIONS_TYPE, "ip_hash")])),
            ANN_STICKY_SESSIONS_TYPE
        );
    }

    #[test]
    fn sizes() {
        assert_eq!(
            regional(&[(ANN_SIZE_SLUG, "lb-medium")])
                .unwrap()
                .size
                .as_deref(),
            Some("lb-medium")
        );
        assert_eq!(
            regional(&[(ANN_SIZE_UNIT, "3")]).unwrap().size_unit,
            Some(3)
        );
        assert_eq!(
            regional(&[(ANN_SIZE_UNIT, "0")]).unwrap().size_unit,
            Some(0)
        );
        assert_eq!(err_field(regional(&[(ANN_SIZE_UNIT, "-1")])), ANN_SIZE_UNIT);
        assert_eq!(
            err_field(regional(&[(ANN_SIZE_UNIT, "big")])),
            ANN_SIZE_UNIT
        );
        assert_eq!(
            err_field(regional(&[(ANN_SIZE_SLUG, "lb-huge")])),
            ANN_SIZE_SLUG
        );
        assert_eq!(
            err_field(regional(&[
                (ANN_SIZE_SLUG, "lb-small"),
                (ANN_SIZE_UNIT, "2")
            ])),
            ANN_SIZE_UNIT
        );
    }

    #[test]
    fn booleans_and_timeouts() {
        let s = regional(&[
            (ANN_REDIRECT_HTTP_TO_HTTPS, "true"),
            (ANN_ENABLE_PROXY_PROTOCOL, "1"),
            (ANN_ENABLE_BACKEND_KEEPALIVE, "True"),
            (ANN_DISABLE_LETS_ENCRYPT_DNS_RECORDS, "t"),
            (ANN_HTTP_IDLE_TIMEOUT_SECONDS, "120"),
        ])
        .unwrap();
        assert!(s.redirect_http_to_https && s.enable_proxy_protocol);
        assert!(s.enable_backend_keepalive && s.disable_lets_encrypt_dns_records);
        assert!(s.proxies_traffic());
        assert_eq!(s.http_idle_timeout_seconds, Some(120));
        for key in [
            ANN_REDIRECT_HTTP_TO_HTTPS,
            ANN_ENABLE_PROXY_PROTOCOL,
            ANN_ENABLE_BACKEND_KEEPALIVE,
            ANN_DISABLE_LETS_ENCRYPT_DNS_RECORDS,
        ] {
            assert_eq!(err_field(regional(&[(key, "yes")])), key);
        }
        assert_eq!(
            err_field(regional(&[(ANN_HTTP_IDLE_TIMEOUT_SECONDS, "10")])),
            ANN_HTTP_IDLE_TIMEOUT_SECONDS
        );
        assert_eq!(
            err_field(regional(&[(ANN_HTTP_IDLE_TIMEOUT_SECONDS, "601")])),
            ANN_HTTP_IDLE_TIMEOUT_SECONDS
        );
    }

    #[test]
    fn firewall_rules_and_source_ranges() {
        let s = regional(&[
            (ANN_ALLOW_RULES, "ip:1.2.3.4, cidr:10.0.0.0/16,ip:1.2.3.4"),
            (ANN_DENY_RULES, "cidr:2001:db8::/32"),
        ])
        .unwrap();
        assert_eq!(s.firewall.allow, vec!["ip:1.2.3.4", "cidr:10.0.0.0/16"]);
        assert_eq!(s.firewall.deny, vec!["cidr:2001:db8::/32"]);
        for bad in ["1.2.3.4", "ip:300.1.1.1", "cidr:10.0.0.0/33", "host:a"] {
            assert_eq!(
                err_field(regional(&[(ANN_DENY_RULES, bad)])),
                ANN_DENY_RULES,
                "{bad}"
            );
        }
        // Source ranges replace the allow rules.
        let mut service = web(&[(ANN_ALLOW_RULES, "ip:1.2.3.4")]);
        service.spec.as_mut().unwrap().load_balancer_source_ranges =
            Some(vec!["192.0.2.0/24".into(), "198.51.100.7/32".into()]);
        let s = parse_service(&service, LbType::Regional).unwrap();
        assert_eq!(
            s.firewall.allow,
            vec!["cidr:192.0.2.0/24", "cidr:198.51.100.7/32"]
        );
        service.spec.as_mut().unwrap().load_balancer_source_ranges = Some(vec!["nope".into()]);
        let err = parse_service(&service, LbType::Regional).unwrap_err();
        assert_eq!(err.field, "spec.loadBalancerSourceRanges[0]");
    }

    #[test]
    fn network_settings_ip_and_hostname() {
        let s = regional(&[
            (ANN_NETWORK, "internal"),
            (ANN_NETWORK_STACK, "dualstack"),
            (ANN_IP, "203.0.113.10"),
            (ANN_HOSTNAME, "lb.example.com"),
        ])
        .unwrap();
        assert_eq!(s.network.as_deref(), Some("INTERNAL"));
        assert_eq!(s.network_stack.as_deref(), Some("DUALSTACK"));
        assert_eq!(s.ip.as_deref(), Some("203.0.113.10"));
        assert_eq!(s.hostname.as_deref(), Some("lb.example.com"));
        assert_eq!(err_field(regional(&[(ANN_NETWORK, "PUBLIC")])), ANN_NETWORK);
        assert_eq!(
            err_field(regional(&[(ANN_NETWORK_STACK, "IPV6")])),
            ANN_NETWORK_STACK
        );
        assert_eq!(err_field(regional(&[(ANN_IP, "2001:db8::1")])), ANN_IP);
    }

    #[test]
    fn type_disown_and_id() {
        assert_eq!(annotated_type(&web(&[])).unwrap(), None);
        assert_eq!(
            annotated_type(&web(&[(ANN_TYPE, "REGIONAL")])).unwrap(),
            Some(LbType::Regional)
        );
        assert_eq!(
            annotated_type(&web(&[(ANN_TYPE, "GLOBAL")]))
                .unwrap_err()
                .field,
            ANN_TYPE
        );
        assert!(is_disowned(&web(&[(ANN_DISOWN, "true")])).unwrap());
        assert!(!is_disowned(&web(&[])).unwrap());
        assert_eq!(
            is_disowned(&web(&[(ANN_DISOWN, "sure")]))
                .unwrap_err()
                .field,
            ANN_DISOWN
        );
        assert_eq!(
            load_balancer_id(&web(&[(ANN_LOAD_BALANCER_ID, " abc ")])).as_deref(),
            Some("abc")
        );
        assert_eq!(load_balancer_id(&web(&[(ANN_LOAD_BALANCER_ID, "")])), None);
    }

    #[test]
    fn error_message_names_the_field() {
        let err = regional(&[(ANN_SIZE_SLUG, "lb-huge")]).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "invalid load balancer configuration: {ANN_SIZE_SLUG}: \"lb-huge\" is not one of lb-small, lb-medium, lb-large"
            )
        );
    }
}
