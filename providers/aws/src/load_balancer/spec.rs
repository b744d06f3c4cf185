//! What a LoadBalancer Service asks for: its spec and `service.beta.kubernetes.io/aws-load-balancer-*`
//! annotations, parsed and validated into an [`LbSpec`]. Every validation error names the annotation or
//! field at fault; the service controller shows it to the user as a Warning event on the Service.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use cloud_provider::ANNOTATION_LOAD_BALANCER_SOURCE_RANGES;
use cloud_provider::annotations::{
    cidr_list, comma_list_skipping_empty, comma_list_without_empty, key_value_pairs_trimmed,
    parse_go_bool,
};
use ipnet::IpNet;
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};

use crate::config::ClusterHealthProbe;

/// `nlb` (a network load balancer), `nlb-ip` or `external` (the AWS Load Balancer Controller's); anything
/// else, absent included, is a classic ELB.
pub const ANN_TYPE: &str = "service.beta.kubernetes.io/aws-load-balancer-type";
/// `true`: an internal load balancer (fixed at creation).
pub const ANN_INTERNAL: &str = "service.beta.kubernetes.io/aws-load-balancer-internal";
/// Subnet IDs or Name tags, replacing subnet discovery.
pub const ANN_SUBNETS: &str = "service.beta.kubernetes.io/aws-load-balancer-subnets";
/// Certificate ARN: TLS listeners.
pub const ANN_SSL_CERT: &str = "service.beta.kubernetes.io/aws-load-balancer-ssl-cert";
/// Which ports get TLS listeners (`*` or port names/numbers; default `*`).
pub const ANN_SSL_PORTS: &str = "service.beta.kubernetes.io/aws-load-balancer-ssl-ports";
/// The TLS listeners' security policy.
pub const ANN_SSL_NEGOTIATION_POLICY: &str =
    "service.beta.kubernetes.io/aws-load-balancer-ssl-negotiation-policy";
/// `tcp` (default) or `ssl`/`tls`: TLS from the load balancer to the nodes on TLS ports.
pub const ANN_BACKEND_PROTOCOL: &str =
    "service.beta.kubernetes.io/aws-load-balancer-backend-protocol";
/// Extra tags `k=v,k2=` on the load balancer, its listeners and target groups.
pub const ANN_ADDITIONAL_TAGS: &str =
    "service.beta.kubernetes.io/aws-load-balancer-additional-resource-tags";
/// Health-check protocol `TCP`, `HTTP` or `HTTPS`.
pub const ANN_HC_PROTOCOL: &str =
    "service.beta.kubernetes.io/aws-load-balancer-healthcheck-protocol";
/// Health-check port: `traffic-port` or a number.
pub const ANN_HC_PORT: &str = "service.beta.kubernetes.io/aws-load-balancer-healthcheck-port";
/// Health-check path (HTTP and HTTPS checks).
pub const ANN_HC_PATH: &str = "service.beta.kubernetes.io/aws-load-balancer-healthcheck-path";
/// Consecutive successes before a target is healthy (2-10).
pub const ANN_HC_HEALTHY: &str =
    "service.beta.kubernetes.io/aws-load-balancer-healthcheck-healthy-threshold";
/// Consecutive failures before a target is unhealthy (2-10).
pub const ANN_HC_UNHEALTHY: &str =
    "service.beta.kubernetes.io/aws-load-balancer-healthcheck-unhealthy-threshold";
/// Seconds between health checks (5-300).
pub const ANN_HC_INTERVAL: &str =
    "service.beta.kubernetes.io/aws-load-balancer-healthcheck-interval";
/// Health-check timeout in seconds: parsed (a whole number) but, as upstream, never sent; AWS applies its
/// default.
pub const ANN_HC_TIMEOUT: &str = "service.beta.kubernetes.io/aws-load-balancer-healthcheck-timeout";
/// `true`/`false`: cross-zone load balancing.
pub const ANN_CROSS_ZONE: &str =
    "service.beta.kubernetes.io/aws-load-balancer-cross-zone-load-balancing-enabled";
/// `true`/`false`: access logs to S3.
pub const ANN_ACCESS_LOG_ENABLED: &str =
    "service.beta.kubernetes.io/aws-load-balancer-access-log-enabled";
/// The access-log bucket.
pub const ANN_ACCESS_LOG_BUCKET: &str =
    "service.beta.kubernetes.io/aws-load-balancer-access-log-s3-bucket-name";
/// The access-log key prefix.
pub const ANN_ACCESS_LOG_PREFIX: &str =
    "service.beta.kubernetes.io/aws-load-balancer-access-log-s3-bucket-prefix";
/// Target-group attributes `k=v,...`.
pub const ANN_TARGET_GROUP_ATTRIBUTES: &str =
    "service.beta.kubernetes.io/aws-load-balancer-target-group-attributes";
/// Elastic IP allocation IDs, one per subnet (internet-facing only, at creation).
pub const ANN_EIP_ALLOCATIONS: &str =
    "service.beta.kubernetes.io/aws-load-balancer-eip-allocations";
/// Private IPv4 addresses, one per subnet (internal only, at creation).
pub const ANN_PRIVATE_IPV4: &str =
    "service.beta.kubernetes.io/aws-load-balancer-private-ipv4-addresses";
/// Node labels `k=v,k2=` a node must carry to be a target.
pub const ANN_TARGET_NODE_LABELS: &str =
    "service.beta.kubernetes.io/aws-load-balancer-target-node-labels";
/// Security-group IDs attached to a classic load balancer. Network load balancers ignore it, as upstream
/// does without `NLBSecurityGroupMode = Managed`: a new one gets no security group, an existing one keeps
/// its own.
pub const ANN_SECURITY_GROUPS: &str =
    "service.beta.kubernetes.io/aws-load-balancer-security-groups";
/// Security groups added to a classic load balancer's own (or annotated) ones; network load balancers
/// refuse it.
pub const ANN_EXTRA_SECURITY_GROUPS: &str =
    "service.beta.kubernetes.io/aws-load-balancer-extra-security-groups";

/// Target-group attributes the target-group-attributes annotation may set, with their value checks.
const TARGET_GROUP_ATTRIBUTES: &[(&str, AttrKind)] = &[
    ("preserve_client_ip.enabled", AttrKind::Bool),
    ("proxy_protocol_v2.enabled", AttrKind::Bool),
    (
        "deregistration_delay.timeout_seconds",
        AttrKind::Seconds(3600),
    ),
    (
        "deregistration_delay.connection_termination.enabled",
        AttrKind::Bool,
    ),
    ("stickiness.enabled", AttrKind::Bool),
    ("stickiness.type", AttrKind::SourceIp),
];

#[derive(Debug, Clone, Copy)]
enum AttrKind {
    Bool,
    Seconds(u32),
    SourceIp,
}

/// A validation error: the annotation or field at fault and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{subject}: {message}")]
pub struct SpecError {
    /// The annotation key or spec field.
    pub subject: String,
    /// What is wrong.
    pub message: String,
}

impl SpecError {
    pub(crate) fn new(subject: &str, message: impl Into<String>) -> Self {
        SpecError {
            subject: subject.to_string(),
            message: message.into(),
        }
    }
}

impl From<SpecError> for cloud_provider::CloudError {
    fn from(e: SpecError) -> Self {
        cloud_provider::CloudError::provider(e.to_string())
    }
}

/// Who implements the Service's load balancer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LbKind {
    /// A classic ELB managed here (upstream's default).
    Classic,
    /// A network load balancer managed here.
    Nlb,
    /// The AWS Load Balancer Controller (`nlb-ip` or `external`).
    Elsewhere(String),
}

/// A TCP or UDP port protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
    /// TLS (TCP with TLS termination on the load balancer).
    Tls,
}

impl Protocol {
    /// The ELBv2 spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Tls => "TLS",
        }
    }
}

/// One listener: a Service port forwarded to a target group on the node port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortMapping {
    /// The Service port's name (may be empty).
    pub name: String,
    /// The listener port (the Service port).
    pub port: i32,
    /// The node port the targets listen on.
    pub node_port: i32,
    /// The Service port's protocol (TCP or UDP).
    pub service_protocol: Protocol,
    /// The listener protocol (TCP, UDP or TLS).
    pub listener_protocol: Protocol,
    /// The target-group protocol (TCP, UDP or TLS).
    pub target_protocol: Protocol,
    /// The certificate of a TLS listener.
    pub certificate: Option<String>,
    /// The security policy of a TLS listener.
    pub ssl_policy: Option<String>,
}

/// Health-check protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthCheckProtocol {
    /// A TCP connection.
    Tcp,
    /// An HTTP GET.
    Http,
    /// An HTTPS GET.
    Https,
}

impl HealthCheckProtocol {
    /// The ELBv2 spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            HealthCheckProtocol::Tcp => "TCP",
            HealthCheckProtocol::Http => "HTTP",
            HealthCheckProtocol::Https => "HTTPS",
        }
    }
}

/// Health-check port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthCheckPort {
    /// The target's traffic port (the node port).
    TrafficPort,
    /// A fixed port.
    Port(i32),
}

impl HealthCheckPort {
    /// The ELBv2 spelling.
    pub fn to_aws(self) -> String {
        match self {
            HealthCheckPort::TrafficPort => "traffic-port".to_string(),
            HealthCheckPort::Port(p) => p.to_string(),
        }
    }

    /// The node port the check reaches for a target group on `node_port`.
    pub fn resolve(self, node_port: i32) -> i32 {
        match self {
            HealthCheckPort::TrafficPort => node_port,
            HealthCheckPort::Port(p) => p,
        }
    }
}

/// The target groups' health check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    /// Protocol.
    pub protocol: HealthCheckProtocol,
    /// Port.
    pub port: HealthCheckPort,
    /// Path of HTTP(S) checks.
    pub path: Option<String>,
    /// Seconds between checks.
    pub interval: i32,
    /// Seconds before a check fails, as annotated; never sent (AWS's default applies, as upstream).
    pub timeout: i32,
    /// Successes before healthy.
    pub healthy_threshold: i32,
    /// Failures before unhealthy.
    pub unhealthy_threshold: i32,
}

/// Access logging.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AccessLog {
    /// Whether logs are written.
    pub enabled: bool,
    /// The bucket (required when enabled).
    pub bucket: Option<String>,
    /// The key prefix.
    pub prefix: Option<String>,
}

/// Everything the Service asks of its network load balancer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LbSpec {
    /// The Service's namespace.
    pub namespace: String,
    /// The Service's name.
    pub name: String,
    /// An internal load balancer.
    pub internal: bool,
    /// Explicit subnets (IDs or Name tags), replacing discovery.
    pub subnets: Option<Vec<String>>,
    /// One mapping per Service port.
    pub ports: Vec<PortMapping>,
    /// The health check of every target group.
    pub health_check: HealthCheck,
    /// Extra tags.
    pub additional_tags: BTreeMap<String, String>,
    /// Cross-zone load balancing (off unless annotated true).
    pub cross_zone: bool,
    /// Access logging (off unless annotated true).
    pub access_log: AccessLog,
    /// Target-group attributes, when annotated.
    pub target_group_attributes: BTreeMap<String, String>,
    /// Elastic IP allocations, one per subnet.
    pub eip_allocations: Option<Vec<String>>,
    /// Private IPv4 addresses, one per subnet.
    pub private_ipv4_addresses: Option<Vec<Ipv4Addr>>,
    /// Labels a node needs to be a target.
    pub target_node_labels: BTreeMap<String, String>,
    /// Allowed client CIDRs (empty: everyone, internal load balancers included).
    pub source_ranges: Vec<IpNet>,
    /// `externalTrafficPolicy: Local`.
    pub local_traffic: bool,
    /// The groups of the security-groups annotation: with `NLBSecurityGroupMode = Managed` they are the
    /// load balancer's instead of a managed one (ignored otherwise, as upstream).
    pub security_groups: Vec<String>,
    /// The Service's UID (part of the managed security group's name).
    pub uid: String,
}

impl LbSpec {
    /// `<namespace>/<name>`.
    pub fn service_name(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// The groups of the security-groups and extra-security-groups annotations (read on their own, so a
/// deletion knows them even when another annotation is malformed).
pub fn annotated_security_groups(service: &Service) -> (Vec<String>, Vec<String>) {
    let list = |key| {
        annotation(service, key)
            .map(comma_list_skipping_empty)
            .unwrap_or_default()
    };
    (list(ANN_SECURITY_GROUPS), list(ANN_EXTRA_SECURITY_GROUPS))
}

/// The annotation's value, trimmed.
pub(crate) fn annotation<'a>(service: &'a Service, key: &str) -> Option<&'a str> {
    service
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(|v| v.trim())
}

/// The client CIDRs the Service admits: `spec.loadBalancerSourceRanges`, else the
/// `service.beta.kubernetes.io/load-balancer-source-ranges` annotation; `None` when neither restricts them.
pub(crate) fn source_ranges(service: &Service) -> Result<Option<Vec<IpNet>>, SpecError> {
    let from_spec = service
        .spec
        .as_ref()
        .and_then(|s| s.load_balancer_source_ranges.clone())
        .filter(|list| !list.is_empty());
    let (subject, raw): (&str, Vec<String>) = match from_spec {
        Some(list) => ("spec.loadBalancerSourceRanges", list),
        None => match annotation(service, ANNOTATION_LOAD_BALANCER_SOURCE_RANGES) {
            Some(v) if !v.is_empty() => (
                ANNOTATION_LOAD_BALANCER_SOURCE_RANGES,
                parse_list(ANNOTATION_LOAD_BALANCER_SOURCE_RANGES, v)?,
            ),
            _ => return Ok(None),
        },
    };
    let ranges = cidr_list(&raw)
        .map_err(|item| SpecError::new(subject, format!("{item:?} is not a CIDR")))?;
    Ok(Some(ranges))
}

/// Who implements the Service's load balancer, from the type annotation, as upstream reads it: `nlb` is a
/// network load balancer, `nlb-ip` and `external` belong to the AWS Load Balancer Controller, anything else
/// (absent included) is a classic ELB.
pub fn lb_kind(service: &Service) -> LbKind {
    match annotation(service, ANN_TYPE) {
        Some("nlb") => LbKind::Nlb,
        Some(v @ ("nlb-ip" | "external")) => LbKind::Elsewhere(v.to_string()),
        _ => LbKind::Classic,
    }
}

/// A boolean as Go's `strconv.ParseBool` reads it (upstream's parser): `1`, `t`, `T`, `TRUE`, `true`,
/// `True` and their false counterparts.
pub(crate) fn parse_bool(key: &str, value: &str) -> Result<bool, SpecError> {
    parse_go_bool(value)
        .ok_or_else(|| SpecError::new(key, format!("must be \"true\" or \"false\", got {value:?}")))
}

/// An optional boolean annotation: absent or empty is `false`, as upstream reads it.
fn annotated_bool(service: &Service, key: &str) -> Result<bool, SpecError> {
    match annotation(service, key) {
        None | Some("") => Ok(false),
        Some(v) => parse_bool(key, v),
    }
}

/// A whole number within the range AWS accepts.
pub(crate) fn parse_int(key: &str, value: &str, min: i32, max: i32) -> Result<i32, SpecError> {
    match value.parse::<i32>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(SpecError::new(
            key,
            format!("must be a whole number from {min} to {max}, got {value:?}"),
        )),
    }
}

/// A comma-separated list without empty items.
fn parse_list(key: &str, value: &str) -> Result<Vec<String>, SpecError> {
    comma_list_without_empty(value).ok_or_else(|| {
        SpecError::new(
            key,
            format!("{value:?} is not a comma-separated list without empty items"),
        )
    })
}

fn resource_id(key: &str, item: &str, prefix: &str) -> Result<(), SpecError> {
    let ok = item
        .strip_prefix(prefix)
        .is_some_and(|rest| !rest.is_empty() && rest.chars().all(|c| c.is_ascii_alphanumeric()));
    if ok {
        Ok(())
    } else {
        Err(SpecError::new(
            key,
            format!("{item:?} is not an ID of the form {prefix}<hex digits>"),
        ))
    }
}

/// Access logging: off unless the enabled annotation is true; then the bucket is required (ELBv2 refuses
/// logs without one) and the prefix defaults to none.
fn access_log(service: &Service) -> Result<AccessLog, SpecError> {
    let enabled = annotated_bool(service, ANN_ACCESS_LOG_ENABLED)?;
    let bucket = annotation(service, ANN_ACCESS_LOG_BUCKET)
        .filter(|b| !b.is_empty())
        .map(str::to_string);
    if enabled && bucket.is_none() {
        return Err(SpecError::new(
            ANN_ACCESS_LOG_BUCKET,
            format!("is required when {ANN_ACCESS_LOG_ENABLED} is \"true\""),
        ));
    }
    Ok(AccessLog {
        enabled,
        bucket,
        prefix: annotation(service, ANN_ACCESS_LOG_PREFIX).map(str::to_string),
    })
}

/// The TLS annotations, read as upstream reads them: a policy, ports or backend protocol without a
/// certificate, ports the Service does not have and UDP ports in the list are ignored, not errors.
struct TlsAnnotations {
    certificate: Option<String>,
    ssl_policy: Option<String>,
    /// Only "ssl" makes TLS target groups; upstream ignores every other value.
    backend_tls: bool,
    /// The ssl-ports list (names or numbers); `None` for every port.
    ssl_ports: Option<Vec<String>>,
}

impl TlsAnnotations {
    fn read(service: &Service) -> Result<Self, SpecError> {
        let certificate = annotation(service, ANN_SSL_CERT)
            .filter(|c| !c.is_empty())
            .map(str::to_string);
        if let Some(cert) = &certificate
            && (!cert.starts_with("arn:") || cert.chars().any(char::is_whitespace))
        {
            return Err(SpecError::new(
                ANN_SSL_CERT,
                format!("{cert:?} is not a certificate ARN"),
            ));
        }
        Ok(TlsAnnotations {
            certificate,
            ssl_policy: annotation(service, ANN_SSL_NEGOTIATION_POLICY)
                .filter(|p| !p.is_empty())
                .map(str::to_string),
            backend_tls: annotation(service, ANN_BACKEND_PROTOCOL) == Some("ssl"),
            ssl_ports: match annotation(service, ANN_SSL_PORTS) {
                None | Some("" | "*") => None,
                Some(v) => Some(comma_list_skipping_empty(v)),
            },
        })
    }

    /// Whether a listener on the Service port gets TLS.
    fn on(&self, port: &ServicePort, protocol: Protocol) -> bool {
        let name = port.name.as_deref().unwrap_or_default();
        self.certificate.is_some()
            && protocol == Protocol::Tcp
            && self.ssl_ports.as_ref().is_none_or(|list| {
                list.iter()
                    .any(|i| *i == name || *i == port.port.to_string())
            })
    }
}

/// The listeners of the Service's ports (each with its protocol), TLS as the ssl-cert, ssl-ports,
/// negotiation-policy and backend-protocol annotations ask.
fn port_mappings(
    service: &Service,
    service_ports: &[ServicePort],
    protocols: &[Protocol],
) -> Result<Vec<PortMapping>, SpecError> {
    let tls_annotations = TlsAnnotations::read(service)?;
    // As upstream, a port without a node port (allocateLoadBalancerNodePorts: false) gets no listener.
    let ports = service_ports
        .iter()
        .zip(protocols)
        .filter(|(p, _)| p.node_port.unwrap_or(0) != 0)
        .map(|(p, protocol)| {
            let tls = tls_annotations.on(p, *protocol);
            let if_tls = |v: &Option<String>| if tls { v.clone() } else { None };
            PortMapping {
                name: p.name.clone().unwrap_or_default(),
                port: p.port,
                node_port: p.node_port.unwrap_or(0),
                service_protocol: *protocol,
                listener_protocol: if tls { Protocol::Tls } else { *protocol },
                target_protocol: if tls && tls_annotations.backend_tls {
                    Protocol::Tls
                } else {
                    *protocol
                },
                certificate: if_tls(&tls_annotations.certificate),
                ssl_policy: if_tls(&tls_annotations.ssl_policy),
            }
        })
        .collect();
    Ok(ports)
}

/// The target groups' health check, as upstream builds it: the default of the traffic policy, then the
/// protocol, port and path annotations, then the shared probe (Cluster policy in `Shared` mode), then the
/// interval, timeout and threshold annotations.
fn health_check(
    service: &Service,
    spec: &ServiceSpec,
    probe: &ClusterHealthProbe,
) -> Result<HealthCheck, SpecError> {
    let local_traffic = spec.external_traffic_policy.as_deref() == Some("Local");
    let mut hc = default_health_check(spec, local_traffic)?;
    annotated_health_check_target(service, &mut hc)?;
    if let (false, ClusterHealthProbe::Shared { port, path }) = (local_traffic, probe) {
        hc.protocol = HealthCheckProtocol::Http;
        hc.port = HealthCheckPort::Port(*port);
        hc.path = Some(path.clone());
    }
    annotated_health_check_timing(service, &mut hc)?;
    Ok(hc)
}

/// Upstream's default check: HTTP `/healthz` on the health-check node port for `externalTrafficPolicy:
/// Local`, else TCP on the traffic port.
fn default_health_check(spec: &ServiceSpec, local_traffic: bool) -> Result<HealthCheck, SpecError> {
    if !local_traffic {
        return Ok(HealthCheck {
            protocol: HealthCheckProtocol::Tcp,
            port: HealthCheckPort::TrafficPort,
            path: None,
            interval: 30,
            timeout: 10,
            healthy_threshold: 3,
            unhealthy_threshold: 3,
        });
    }
    let port = spec
        .health_check_node_port
        .filter(|p| *p > 0)
        .ok_or_else(|| {
            SpecError::new(
                "spec.healthCheckNodePort",
                "is not set although externalTrafficPolicy is Local",
            )
        })?;
    Ok(HealthCheck {
        protocol: HealthCheckProtocol::Http,
        port: HealthCheckPort::Port(port),
        path: Some("/healthz".to_string()),
        interval: 10,
        timeout: 10,
        healthy_threshold: 2,
        unhealthy_threshold: 2,
    })
}

/// The healthcheck-protocol, -port and -path annotations.
fn annotated_health_check_target(service: &Service, hc: &mut HealthCheck) -> Result<(), SpecError> {
    if let Some(v) = annotation(service, ANN_HC_PROTOCOL) {
        hc.protocol = match v.to_ascii_uppercase().as_str() {
            "TCP" => HealthCheckProtocol::Tcp,
            "HTTP" => HealthCheckProtocol::Http,
            "HTTPS" => HealthCheckProtocol::Https,
            _ => {
                return Err(SpecError::new(
                    ANN_HC_PROTOCOL,
                    format!("must be TCP, HTTP or HTTPS, got {v:?}"),
                ));
            }
        };
    }
    if let Some(v) = annotation(service, ANN_HC_PORT) {
        hc.port = if v == "traffic-port" {
            HealthCheckPort::TrafficPort
        } else {
            HealthCheckPort::Port(parse_int(ANN_HC_PORT, v, 1, 65535).map_err(|_| {
                SpecError::new(
                    ANN_HC_PORT,
                    format!("must be \"traffic-port\" or a port number from 1 to 65535, got {v:?}"),
                )
            })?)
        };
    }
    match hc.protocol {
        // As upstream: TCP checks have no path, and the path annotation is ignored for them.
        HealthCheckProtocol::Tcp => hc.path = None,
        HealthCheckProtocol::Http | HealthCheckProtocol::Https => {
            if let Some(v) = annotation(service, ANN_HC_PATH) {
                if !v.starts_with('/') || v.chars().any(char::is_whitespace) {
                    return Err(SpecError::new(
                        ANN_HC_PATH,
                        format!("must be a path starting with \"/\", got {v:?}"),
                    ));
                }
                hc.path = Some(v.to_string());
            } else if hc.path.is_none() {
                hc.path = Some("/".to_string());
            }
        }
    }
    Ok(())
}

/// The healthcheck-healthy-threshold, -unhealthy-threshold, -interval and -timeout annotations.
fn annotated_health_check_timing(service: &Service, hc: &mut HealthCheck) -> Result<(), SpecError> {
    if let Some(v) = annotation(service, ANN_HC_HEALTHY) {
        hc.healthy_threshold = parse_int(ANN_HC_HEALTHY, v, 2, 10)?;
    }
    if let Some(v) = annotation(service, ANN_HC_UNHEALTHY) {
        hc.unhealthy_threshold = parse_int(ANN_HC_UNHEALTHY, v, 2, 10)?;
    }
    if let Some(v) = annotation(service, ANN_HC_INTERVAL) {
        hc.interval = parse_int(ANN_HC_INTERVAL, v, 5, 300)?;
    }
    if let Some(v) = annotation(service, ANN_HC_TIMEOUT) {
        hc.timeout = v.parse().map_err(|_| {
            SpecError::new(ANN_HC_TIMEOUT, format!("must be a whole number, got {v:?}"))
        })?;
    }
    Ok(())
}

/// The additional-resource-tags annotation: only tags AWS would refuse (`aws:` keys, over-long keys or
/// values) are errors.
fn additional_tags(service: &Service) -> Result<BTreeMap<String, String>, SpecError> {
    Ok(match annotation(service, ANN_ADDITIONAL_TAGS) {
        None => BTreeMap::new(),
        Some(v) => {
            let tags = key_value_pairs_trimmed(v);
            for (k, val) in &tags {
                if k.len() > 128 || val.len() > 256 {
                    return Err(SpecError::new(
                        ANN_ADDITIONAL_TAGS,
                        format!(
                            "tag {k:?} is too long (keys up to 128, values up to 256 characters)"
                        ),
                    ));
                }
                if k.starts_with("aws:") {
                    return Err(SpecError::new(
                        ANN_ADDITIONAL_TAGS,
                        format!("tag key {k:?} is reserved"),
                    ));
                }
            }
            tags
        }
    })
}

/// The target-group-attributes annotation: supported keys with valid values; client IP preservation cannot
/// be disabled on UDP ports (upstream's rule).
fn target_group_attributes(
    service: &Service,
    protocols: &[Protocol],
) -> Result<BTreeMap<String, String>, SpecError> {
    Ok(match annotation(service, ANN_TARGET_GROUP_ATTRIBUTES) {
        None => BTreeMap::new(),
        Some(v) => {
            let attrs = key_value_pairs_trimmed(v);
            for (k, val) in &attrs {
                let Some((_, kind)) = TARGET_GROUP_ATTRIBUTES.iter().find(|(name, _)| name == k)
                else {
                    return Err(SpecError::new(
                        ANN_TARGET_GROUP_ATTRIBUTES,
                        format!(
                            "unsupported attribute {k:?} (supported: {})",
                            TARGET_GROUP_ATTRIBUTES
                                .iter()
                                .map(|(n, _)| *n)
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ));
                };
                let ok = match kind {
                    AttrKind::Bool => val == "true" || val == "false",
                    AttrKind::Seconds(max) => val.parse::<u32>().is_ok_and(|n| n <= *max),
                    AttrKind::SourceIp => val == "source_ip",
                };
                if !ok {
                    return Err(SpecError::new(
                        ANN_TARGET_GROUP_ATTRIBUTES,
                        format!("invalid value {val:?} for attribute {k:?}"),
                    ));
                }
            }
            let udp = protocols.contains(&Protocol::Udp);
            if udp && attrs.get("preserve_client_ip.enabled").map(String::as_str) == Some("false") {
                return Err(SpecError::new(
                    ANN_TARGET_GROUP_ATTRIBUTES,
                    "client IP preservation can't be disabled for UDP ports",
                ));
            }
            attrs
        }
    })
}

/// The Service fields a network load balancer cannot honour: session affinity and a requested IP.
fn check_spec_fields(spec: &ServiceSpec) -> Result<(), SpecError> {
    if let Some(affinity) = spec.session_affinity.as_deref()
        && affinity != "None"
    {
        return Err(SpecError::new(
            "spec.sessionAffinity",
            format!("{affinity:?} is not supported by AWS network load balancers (use None)"),
        ));
    }
    if spec
        .load_balancer_ip
        .as_deref()
        .is_some_and(|ip| !ip.is_empty())
    {
        return Err(SpecError::new(
            "spec.loadBalancerIP",
            format!(
                "is not supported by AWS load balancers; use the {ANN_EIP_ALLOCATIONS} or {ANN_PRIVATE_IPV4} annotation"
            ),
        ));
    }
    Ok(())
}

/// The protocol of each Service port: TCP or UDP, one for all ports.
fn port_protocols(service_ports: &[ServicePort]) -> Result<Vec<Protocol>, SpecError> {
    if service_ports.is_empty() {
        return Err(SpecError::new(
            "spec.ports",
            "a load balancer needs at least one port",
        ));
    }
    let mut protocols = Vec::new();
    for p in service_ports {
        let protocol = match p.protocol.as_deref().unwrap_or("TCP") {
            "TCP" => Protocol::Tcp,
            "UDP" => Protocol::Udp,
            other => {
                return Err(SpecError::new(
                    "spec.ports",
                    format!(
                        "protocol {other} (port {}) is not supported by AWS network load balancers (use TCP or UDP)",
                        p.port
                    ),
                ));
            }
        };
        protocols.push(protocol);
    }
    if protocols.iter().any(|p| *p != protocols[0]) {
        return Err(SpecError::new(
            "spec.ports",
            "mixed protocols (TCP and UDP) are not supported for AWS load balancers",
        ));
    }
    Ok(protocols)
}

/// Scheme and placement: internal or not, explicit subnets, Elastic IPs and private addresses.
struct Placement {
    internal: bool,
    subnets: Option<Vec<String>>,
    eip_allocations: Option<Vec<String>>,
    private_ipv4_addresses: Option<Vec<Ipv4Addr>>,
}

/// The internal, subnets, eip-allocations and private-ipv4-addresses annotations; the
/// extra-security-groups annotation is refused (upstream refuses it on NLBs).
fn placement(service: &Service) -> Result<Placement, SpecError> {
    // As upstream: any value but "false" (and empty) makes the load balancer internal.
    let internal = !matches!(annotation(service, ANN_INTERNAL), None | Some("false" | ""));
    // Empty items are skipped, as upstream splits the list.
    let subnets = annotation(service, ANN_SUBNETS)
        .map(comma_list_skipping_empty)
        .filter(|list| !list.is_empty());
    let eip_allocations = eip_allocations(service, internal)?;
    let private_ipv4_addresses = private_ipv4_addresses(service, internal)?;
    if annotation(service, ANN_EXTRA_SECURITY_GROUPS).is_some() {
        return Err(SpecError::new(
            ANN_EXTRA_SECURITY_GROUPS,
            "BYO extra security groups are not supported by NLB",
        ));
    }
    Ok(Placement {
        internal,
        subnets,
        eip_allocations,
        private_ipv4_addresses,
    })
}

/// The eip-allocations annotation: allocation IDs, internet-facing load balancers only.
fn eip_allocations(service: &Service, internal: bool) -> Result<Option<Vec<String>>, SpecError> {
    let Some(v) = annotation(service, ANN_EIP_ALLOCATIONS) else {
        return Ok(None);
    };
    let ids = parse_list(ANN_EIP_ALLOCATIONS, v)?;
    for id in &ids {
        resource_id(ANN_EIP_ALLOCATIONS, id, "eipalloc-")?;
    }
    if internal {
        return Err(SpecError::new(
            ANN_EIP_ALLOCATIONS,
            "Elastic IPs can only be used with internet-facing load balancers",
        ));
    }
    Ok(Some(ids))
}

/// The private-ipv4-addresses annotation: IPv4 addresses, internal load balancers only.
fn private_ipv4_addresses(
    service: &Service,
    internal: bool,
) -> Result<Option<Vec<Ipv4Addr>>, SpecError> {
    let Some(v) = annotation(service, ANN_PRIVATE_IPV4) else {
        return Ok(None);
    };
    let mut ips = Vec::new();
    for item in parse_list(ANN_PRIVATE_IPV4, v)? {
        ips.push(item.parse::<Ipv4Addr>().map_err(|_| {
            SpecError::new(ANN_PRIVATE_IPV4, format!("{item:?} is not an IPv4 address"))
        })?);
    }
    if !internal {
        return Err(SpecError::new(
            ANN_PRIVATE_IPV4,
            format!(
                "private IPv4 addresses can only be used with internal load balancers ({ANN_INTERNAL}: \"true\")"
            ),
        ));
    }
    Ok(Some(ips))
}

/// Parses and validates the Service. `lb_kind` must have returned [`LbKind::Nlb`]. `probe` is the
/// cluster's `ClusterServiceLoadBalancerHealthProbeMode`: in `Shared` mode the target groups of
/// `externalTrafficPolicy: Cluster` Services check the shared HTTP endpoint instead of the annotated or
/// default check (its interval and thresholds still apply), as upstream does.
///
/// Errors come in a fixed order: the spec fields, the ports, placement, listeners, health check, tags,
/// attributes, source ranges.
pub fn parse(service: &Service, probe: &ClusterHealthProbe) -> Result<LbSpec, SpecError> {
    let spec = service.spec.clone().unwrap_or_default();
    check_spec_fields(&spec)?;
    let service_ports = spec.ports.clone().unwrap_or_default();
    let protocols = port_protocols(&service_ports)?;
    let placement = placement(service)?;
    let ports = port_mappings(service, &service_ports, &protocols)?;
    let health_check = health_check(service, &spec, probe)?;
    let additional_tags = additional_tags(service)?;
    let cross_zone = annotated_bool(service, ANN_CROSS_ZONE)?;
    let access_log = access_log(service)?;
    let target_group_attributes = target_group_attributes(service, &protocols)?;
    let (namespace, name) = namespace_and_name(service);
    Ok(LbSpec {
        namespace,
        name,
        internal: placement.internal,
        subnets: placement.subnets,
        ports,
        health_check,
        additional_tags,
        cross_zone,
        access_log,
        target_group_attributes,
        eip_allocations: placement.eip_allocations,
        private_ipv4_addresses: placement.private_ipv4_addresses,
        target_node_labels: annotation(service, ANN_TARGET_NODE_LABELS)
            .map(key_value_pairs_trimmed)
            .unwrap_or_default(),
        source_ranges: source_ranges(service)?.unwrap_or_default(),
        local_traffic: spec.external_traffic_policy.as_deref() == Some("Local"),
        security_groups: annotated_security_groups(service).0,
        uid: service.metadata.uid.clone().unwrap_or_default(),
    })
}

/// The Service's namespace (`default` when unset, as the API server defaults it) and name.
pub(crate) fn namespace_and_name(service: &Service) -> (String, String) {
    (
        service
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_string()),
        service.metadata.name.clone().unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ServicePort, ServiceSpec};

    fn service(annotations: &[(&str, &str)], ports: &[(&str, i32, &str, i32)]) -> Service {
        let mut s = Service::default();
        s.metadata.name = Some("web".into());
        s.metadata.namespace = Some("shop".into());
        s.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        s.spec = Some(ServiceSpec {
            type_: Some("LoadBalancer".into()),
            ports: Some(
                ports
                    .iter()
                    .map(|(name, port, protocol, node_port)| ServicePort {
                        name: Some(name.to_string()),
                        port: *port,
                        protocol: Some(protocol.to_string()),
                        node_port: Some(*node_port),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        });
        s
    }

    /// Parsing with upstream's default probe mode (each Service's own node port).
    fn parse(service: &Service) -> Result<LbSpec, SpecError> {
        super::parse(service, &ClusterHealthProbe::ServiceNodePort)
    }

    fn web(annotations: &[(&str, &str)]) -> Service {
        service(
            annotations,
            &[("http", 80, "TCP", 30080), ("https", 443, "TCP", 30443)],
        )
    }

    #[test]
    fn defaults() {
        let spec = parse(&web(&[])).unwrap();
        assert_eq!(spec.service_name(), "shop/web");
        assert!(!spec.internal);
        assert_eq!(spec.ports.len(), 2);
        let p = &spec.ports[0];
        assert_eq!((p.port, p.node_port), (80, 30080));
        assert_eq!(p.listener_protocol, Protocol::Tcp);
        assert_eq!(p.target_protocol, Protocol::Tcp);
        assert_eq!(p.certificate, None);
        assert_eq!(
            spec.health_check,
            HealthCheck {
                protocol: HealthCheckProtocol::Tcp,
                port: HealthCheckPort::TrafficPort,
                path: None,
                interval: 30,
                timeout: 10,
                healthy_threshold: 3,
                unhealthy_threshold: 3,
            }
        );
        assert!(spec.additional_tags.is_empty());
        assert!(!spec.cross_zone);
        assert_eq!(spec.access_log, AccessLog::default());
        assert!(spec.source_ranges.is_empty());
    }

    #[test]
    fn local_traffic_health_check() {
        let mut svc = web(&[]);
        let spec = svc.spec.as_mut().unwrap();
        spec.external_traffic_policy = Some("Local".into());
        spec.health_check_node_port = Some(32000);
        let parsed = parse(&svc).unwrap();
        assert!(parsed.local_traffic);
        assert_eq!(
            parsed.health_check,
            HealthCheck {
                protocol: HealthCheckProtocol::Http,
                port: HealthCheckPort::Port(32000),
                path: Some("/healthz".into()),
                interval: 10,
                timeout: 10,
                healthy_threshold: 2,
                unhealthy_threshold: 2,
            }
        );
        svc.spec.as_mut().unwrap().health_check_node_port = None;
        assert_eq!(parse(&svc).unwrap_err().subject, "spec.healthCheckNodePort");
    }

    #[test]
    fn every_annotation_takes_effect() {
        let spec = parse(&web(&[
            (ANN_INTERNAL, "true"),
            (ANN_SUBNETS, "subnet-1, private-a"),
            (ANN_SSL_CERT, "arn:aws:acm:us-east-1:1:certificate/x"),
            (ANN_SSL_PORTS, "https"),
            (
                ANN_SSL_NEGOTIATION_POLICY,
                "ELBSecurityPolicy-TLS13-1-2-2021-06",
            ),
            (ANN_BACKEND_PROTOCOL, "ssl"),
            (ANN_ADDITIONAL_TAGS, "team=shop, cost-center="),
            (ANN_HC_PROTOCOL, "http"),
            (ANN_HC_PORT, "8080"),
            (ANN_HC_PATH, "/ready"),
            (ANN_HC_HEALTHY, "4"),
            (ANN_HC_UNHEALTHY, "5"),
            (ANN_HC_INTERVAL, "20"),
            (ANN_HC_TIMEOUT, "6"),
            (ANN_CROSS_ZONE, "true"),
            (ANN_ACCESS_LOG_ENABLED, "true"),
            (ANN_ACCESS_LOG_BUCKET, "logs"),
            (ANN_ACCESS_LOG_PREFIX, "nlb/"),
            (
                ANN_TARGET_GROUP_ATTRIBUTES,
                "preserve_client_ip.enabled=false,proxy_protocol_v2.enabled=true",
            ),
            (ANN_PRIVATE_IPV4, "10.0.1.10,10.0.2.10"),
            (ANN_TARGET_NODE_LABELS, "lb=yes,edge="),
            (ANN_SECURITY_GROUPS, "sg-1, sg-2"),
            (
                ANNOTATION_LOAD_BALANCER_SOURCE_RANGES,
                "10.0.0.0/8, 192.168.1.7/24",
            ),
        ]))
        .unwrap();
        assert!(spec.internal);
        assert_eq!(spec.security_groups, ["sg-1", "sg-2"]);
        assert_eq!(
            spec.subnets,
            Some(vec!["subnet-1".into(), "private-a".into()])
        );
        let http = &spec.ports[0];
        assert_eq!(http.listener_protocol, Protocol::Tcp);
        assert_eq!(http.certificate, None);
        let https = &spec.ports[1];
        assert_eq!(https.listener_protocol, Protocol::Tls);
        assert_eq!(https.target_protocol, Protocol::Tls);
        assert_eq!(
            https.certificate.as_deref(),
            Some("arn:aws:acm:us-east-1:1:certificate/x")
        );
        assert_eq!(
            https.ssl_policy.as_deref(),
            Some("ELBSecurityPolicy-TLS13-1-2-2021-06")
        );
        assert_eq!(
            spec.additional_tags,
            BTreeMap::from([
                ("cost-center".into(), "".into()),
                ("team".into(), "shop".into())
            ])
        );
        assert_eq!(
            spec.health_check,
            HealthCheck {
                protocol: HealthCheckProtocol::Http,
                port: HealthCheckPort::Port(8080),
                path: Some("/ready".into()),
                interval: 20,
                timeout: 6,
                healthy_threshold: 4,
                unhealthy_threshold: 5,
            }
        );
        assert!(spec.cross_zone);
        assert_eq!(
            spec.access_log,
            AccessLog {
                enabled: true,
                bucket: Some("logs".into()),
                prefix: Some("nlb/".into())
            }
        );
        assert_eq!(spec.target_group_attributes.len(), 2);
        assert_eq!(
            spec.private_ipv4_addresses,
            Some(vec![
                Ipv4Addr::new(10, 0, 1, 10),
                Ipv4Addr::new(10, 0, 2, 10)
            ])
        );
        assert_eq!(
            spec.target_node_labels.get("edge").map(String::as_str),
            Some("")
        );
        assert_eq!(
            spec.source_ranges,
            vec![
                "10.0.0.0/8".parse::<IpNet>().unwrap(),
                "192.168.1.0/24".parse().unwrap()
            ]
        );
    }

    #[test]
    fn tls_on_all_tcp_ports_by_default_and_eips() {
        let spec = parse(&web(&[
            (ANN_SSL_CERT, "arn:aws:iam::1:server-certificate/x"),
            (ANN_EIP_ALLOCATIONS, "eipalloc-1,eipalloc-2"),
            (ANN_INTERNAL, "false"),
        ]))
        .unwrap();
        assert!(
            spec.ports
                .iter()
                .all(|p| p.listener_protocol == Protocol::Tls)
        );
        assert!(
            spec.ports
                .iter()
                .all(|p| p.target_protocol == Protocol::Tcp)
        );
        assert_eq!(spec.eip_allocations.as_ref().map(Vec::len), Some(2));
        // Legacy value of the internal annotation.
        assert!(
            parse(&web(&[(ANN_INTERNAL, "0.0.0.0/0")]))
                .unwrap()
                .internal
        );
        // Port numbers work in the ssl-ports list too.
        let spec = parse(&web(&[
            (ANN_SSL_CERT, "arn:aws:iam::1:server-certificate/x"),
            (ANN_SSL_PORTS, "443"),
        ]))
        .unwrap();
        assert_eq!(spec.ports[0].listener_protocol, Protocol::Tcp);
        assert_eq!(spec.ports[1].listener_protocol, Protocol::Tls);
    }

    #[test]
    fn kinds() {
        assert_eq!(lb_kind(&web(&[(ANN_TYPE, "nlb")])), LbKind::Nlb);
        assert_eq!(
            lb_kind(&web(&[(ANN_TYPE, "nlb-ip")])),
            LbKind::Elsewhere("nlb-ip".into())
        );
        assert_eq!(
            lb_kind(&web(&[(ANN_TYPE, "external")])),
            LbKind::Elsewhere("external".into())
        );
        // Upstream's default, and its reading of any other value (case matters).
        for classic in [None, Some("classic"), Some("NLB"), Some("")] {
            let annotations: Vec<(&str, &str)> =
                classic.map(|v| (ANN_TYPE, v)).into_iter().collect();
            assert_eq!(lb_kind(&web(&annotations)), LbKind::Classic, "{classic:?}");
        }
    }

    /// Every validation error names the annotation or field at fault.
    #[test]
    fn validation_errors_name_their_subject() {
        let cases: Vec<(Vec<(&str, &str)>, &str)> = vec![
            (vec![(ANN_SSL_CERT, "my-cert")], ANN_SSL_CERT),
            (vec![(ANN_ADDITIONAL_TAGS, "aws:x=1")], ANN_ADDITIONAL_TAGS),
            (vec![(ANN_HC_PROTOCOL, "udp")], ANN_HC_PROTOCOL),
            (vec![(ANN_HC_PORT, "70000")], ANN_HC_PORT),
            (vec![(ANN_HC_PORT, "http")], ANN_HC_PORT),
            (
                vec![(ANN_HC_PROTOCOL, "HTTP"), (ANN_HC_PATH, "healthz")],
                ANN_HC_PATH,
            ),
            (vec![(ANN_HC_HEALTHY, "1")], ANN_HC_HEALTHY),
            (vec![(ANN_HC_UNHEALTHY, "11")], ANN_HC_UNHEALTHY),
            (vec![(ANN_HC_INTERVAL, "4")], ANN_HC_INTERVAL),
            (vec![(ANN_HC_TIMEOUT, "ten")], ANN_HC_TIMEOUT),
            (vec![(ANN_ACCESS_LOG_ENABLED, "on")], ANN_ACCESS_LOG_ENABLED),
            (vec![(ANN_CROSS_ZONE, "yes")], ANN_CROSS_ZONE),
            (vec![(ANN_CROSS_ZONE, "tRuE")], ANN_CROSS_ZONE),
            (
                vec![(ANN_ACCESS_LOG_ENABLED, "true")],
                ANN_ACCESS_LOG_BUCKET,
            ),
            (
                vec![(ANN_TARGET_GROUP_ATTRIBUTES, "stickiness.type=lb_cookie")],
                ANN_TARGET_GROUP_ATTRIBUTES,
            ),
            (
                vec![(ANN_TARGET_GROUP_ATTRIBUTES, "load_balancing.algorithm=x")],
                ANN_TARGET_GROUP_ATTRIBUTES,
            ),
            (
                vec![(
                    ANN_TARGET_GROUP_ATTRIBUTES,
                    "preserve_client_ip.enabled=yes",
                )],
                ANN_TARGET_GROUP_ATTRIBUTES,
            ),
            (vec![(ANN_EIP_ALLOCATIONS, "1.2.3.4")], ANN_EIP_ALLOCATIONS),
            (
                vec![(ANN_EIP_ALLOCATIONS, "eipalloc-1"), (ANN_INTERNAL, "true")],
                ANN_EIP_ALLOCATIONS,
            ),
            (
                vec![(ANN_PRIVATE_IPV4, "10.0.0.300"), (ANN_INTERNAL, "true")],
                ANN_PRIVATE_IPV4,
            ),
            (vec![(ANN_PRIVATE_IPV4, "10.0.0.3")], ANN_PRIVATE_IPV4),
            (
                vec![(ANN_EXTRA_SECURITY_GROUPS, "sg-1")],
                ANN_EXTRA_SECURITY_GROUPS,
            ),
            (
                vec![(ANNOTATION_LOAD_BALANCER_SOURCE_RANGES, "10.0.0.0/33")],
                ANNOTATION_LOAD_BALANCER_SOURCE_RANGES,
            ),
        ];
        for (annotations, subject) in cases {
            let err = parse(&web(&annotations)).unwrap_err();
            assert_eq!(err.subject, subject, "{annotations:?}: {err}");
            assert!(
                err.to_string().starts_with(&format!("{subject}: ")),
                "{err}"
            );
        }
    }

    /// Annotation values read as upstream reads them, where it accepts what a stricter reading would refuse.
    #[test]
    fn annotations_read_as_upstream() {
        for (value, internal) in [
            ("true", true),
            ("yes", true),
            ("0.0.0.0/0", true),
            ("false", false),
            ("", false),
        ] {
            let spec = parse(&web(&[(ANN_INTERNAL, value)])).unwrap();
            assert_eq!(spec.internal, internal, "{value:?}");
        }
        for (value, on) in [
            ("1", true),
            ("T", true),
            ("True", true),
            ("0", false),
            ("f", false),
        ] {
            let spec = parse(&web(&[(ANN_CROSS_ZONE, value)])).unwrap();
            assert_eq!(spec.cross_zone, on, "{value:?}");
        }
        // A path does not make a TCP check an error; it is ignored.
        let spec = parse(&web(&[(ANN_HC_PATH, "/ignored")])).unwrap();
        assert_eq!(spec.health_check.path, None);
        // Tags: empty keys skipped, the last value of a key kept, the value ending at a further "=".
        let spec = parse(&web(&[(ANN_ADDITIONAL_TAGS, "=v, a=1, a=2=3, b")])).unwrap();
        assert_eq!(
            spec.additional_tags,
            BTreeMap::from([("a".into(), "2".into()), ("b".into(), "".into())])
        );
        // A timeout is only checked to be a whole number.
        assert_eq!(
            parse(&web(&[(ANN_HC_TIMEOUT, "60")]))
                .unwrap()
                .health_check
                .timeout,
            60
        );
    }

    /// In Shared mode, Cluster-policy Services check the shared endpoint whatever their health-check
    /// protocol, port and path annotations say; interval and thresholds still come from the annotations.
    /// Local-policy Services keep their own check.
    #[test]
    fn shared_health_probe() {
        let shared = ClusterHealthProbe::Shared {
            port: 10256,
            path: "/healthz".into(),
        };
        let svc = web(&[
            (ANN_HC_PROTOCOL, "TCP"),
            (ANN_HC_PORT, "8080"),
            (ANN_HC_PATH, "/ready"),
            (ANN_HC_INTERVAL, "10"),
        ]);
        let spec = super::parse(&svc, &shared).unwrap();
        assert_eq!(
            spec.health_check,
            HealthCheck {
                protocol: HealthCheckProtocol::Http,
                port: HealthCheckPort::Port(10256),
                path: Some("/healthz".into()),
                interval: 10,
                timeout: 10,
                healthy_threshold: 3,
                unhealthy_threshold: 3,
            }
        );
        let mut local = web(&[]);
        let s = local.spec.as_mut().unwrap();
        s.external_traffic_policy = Some("Local".into());
        s.health_check_node_port = Some(32000);
        let spec = super::parse(&local, &shared).unwrap();
        assert_eq!(spec.health_check.port, HealthCheckPort::Port(32000));
    }

    #[test]
    fn udp_keeps_client_ips() {
        let udp = |attrs: &str| {
            parse(&service(
                &[(ANN_TARGET_GROUP_ATTRIBUTES, attrs)],
                &[("dns", 53, "UDP", 30053)],
            ))
        };
        assert!(udp("preserve_client_ip.enabled=true").is_ok());
        let err = udp("preserve_client_ip.enabled=false").unwrap_err();
        assert_eq!(err.subject, ANN_TARGET_GROUP_ATTRIBUTES);
        assert!(err.message.contains("UDP"), "{err}");
    }

    #[test]
    fn spec_preflight_errors() {
        let mut svc = web(&[]);
        svc.spec.as_mut().unwrap().session_affinity = Some("ClientIP".into());
        assert_eq!(parse(&svc).unwrap_err().subject, "spec.sessionAffinity");

        let mut svc = web(&[]);
        svc.spec.as_mut().unwrap().load_balancer_ip = Some("1.2.3.4".into());
        assert_eq!(parse(&svc).unwrap_err().subject, "spec.loadBalancerIP");

        let svc = service(&[], &[]);
        assert_eq!(parse(&svc).unwrap_err().subject, "spec.ports");

        let svc = service(&[], &[("a", 53, "TCP", 30053), ("b", 53, "UDP", 30054)]);
        let err = parse(&svc).unwrap_err();
        assert!(err.message.contains("mixed protocols"), "{err}");

        let svc = service(&[], &[("a", 9, "SCTP", 30009)]);
        assert!(parse(&svc).unwrap_err().message.contains("SCTP"));

        // A port without a node port gets no listener, as upstream ignores it.
        let svc = service(&[], &[("a", 9, "TCP", 0), ("b", 10, "TCP", 30010)]);
        let ports: Vec<i32> = parse(&svc).unwrap().ports.iter().map(|p| p.port).collect();
        assert_eq!(ports, [10]);

        let mut svc = web(&[]);
        svc.spec.as_mut().unwrap().load_balancer_source_ranges = Some(vec!["nope".into()]);
        assert_eq!(
            parse(&svc).unwrap_err().subject,
            "spec.loadBalancerSourceRanges"
        );
    }

    /// TLS annotations upstream ignores rather than refuses: a policy, ports or backend protocol without a
    /// certificate, unknown or UDP ports in the list, backend protocols other than `ssl`, empty values.
    #[test]
    fn tls_annotations_ignored_as_upstream_ignores_them() {
        let ignored: &[&[(&str, &str)]] = &[
            &[(ANN_SSL_NEGOTIATION_POLICY, "p")],
            &[(ANN_SSL_PORTS, "443")],
            &[(ANN_BACKEND_PROTOCOL, "ssl")],
            &[(ANN_BACKEND_PROTOCOL, "http")],
            &[(ANN_SSL_CERT, "")],
        ];
        for annotations in ignored {
            let spec = parse(&web(annotations)).unwrap();
            assert!(
                spec.ports
                    .iter()
                    .all(|p| p.listener_protocol == Protocol::Tcp
                        && p.target_protocol == Protocol::Tcp),
                "{annotations:?}"
            );
        }
        let cert = (ANN_SSL_CERT, "arn:aws:acm:r:1:certificate/x");
        let spec = parse(&web(&[
            cert,
            (ANN_SSL_PORTS, "8443, https"),
            (ANN_SSL_NEGOTIATION_POLICY, ""),
        ]))
        .unwrap();
        assert_eq!(spec.ports[0].listener_protocol, Protocol::Tcp);
        assert_eq!(spec.ports[1].listener_protocol, Protocol::Tls);
        assert_eq!(spec.ports[1].ssl_policy, None);
        // Only "ssl" (as written) makes TLS target groups.
        let spec = parse(&web(&[cert, (ANN_BACKEND_PROTOCOL, "tls")])).unwrap();
        assert_eq!(spec.ports[1].target_protocol, Protocol::Tcp);
        let svc = service(
            &[cert, (ANN_SSL_PORTS, "dns")],
            &[("dns", 53, "UDP", 30053)],
        );
        assert_eq!(
            parse(&svc).unwrap().ports[0].listener_protocol,
            Protocol::Udp
        );
        let spec = parse(&web(&[(ANN_SUBNETS, "subnet-1,,subnet-2")])).unwrap();
        assert_eq!(
            spec.subnets,
            Some(vec!["subnet-1".into(), "subnet-2".into()])
        );
    }

    #[test]
    fn udp_ports_never_get_tls() {
        let svc = service(
            &[(ANN_SSL_CERT, "arn:aws:acm:r:1:certificate/x")],
            &[("dns", 53, "UDP", 30053)],
        );
        let spec = parse(&svc).unwrap();
        assert_eq!(spec.ports[0].listener_protocol, Protocol::Udp);
        assert_eq!(spec.ports[0].target_protocol, Protocol::Udp);
        assert_eq!(spec.ports[0].certificate, None);
    }
}
