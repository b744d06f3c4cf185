//! The load balancer a Service asks for, computed field by field as upstream's `buildLoadBalancerRequest`
//! (DigitalOcean cloud-controller-manager v0.1.68) computes it, so both controllers send the same body.
//!
//! Forwarding rules:
//! - `REGIONAL`: one rule per service port, entry port = port, target port = node port. A port takes the
//!   `protocol` annotation (default `tcp`), then `http` when listed in `http-ports`, `https` in `tls-ports`,
//!   `http2` in `http2-ports` (the later list wins), and `udp` when it is a UDP port. A port may appear only
//!   once over those three lists. With a certificate or TLS pass-through and no `tls-ports`, port 443 is
//!   https unless `http2-ports` lists it. `https` and `http2` rules terminate TLS with the certificate
//!   (target `http`) or pass it through (`tls_passthrough`, target = entry protocol). The `http3-port`
//!   adds one more rule (`http3` to `http` on the node port of the first service port with that number),
//!   which needs a certificate and no pass-through. A certificate is `certificate-id`, else the one named
//!   `certificate-name` (looked up even when no rule uses it).
//! - `REGIONAL_NETWORK`: `tcp`/`udp` only, entry port = target port = service port; the protocol, port
//!   list and certificate annotations are not read.
//! - Other port protocols (SCTP) are refused.
//!
//! Health check: `http` `GET /healthz` on the Service's `healthCheckNodePort` when it is a
//! `LoadBalancer` with `externalTrafficPolicy: Local` and a health-check node port, else on kube-proxy's
//! port 10256, with the PROXY protocol explicitly off (neither speaks it). When the
//! `override-health-check` annotation is present (whatever its value): `healthcheck-path` (default
//! none), `healthcheck-port` (a service port, whose node port is checked; default the first TCP port),
//! `healthcheck-protocol` (default `http` with a path, else `tcp`), and the PROXY protocol as the load
//! balancer's. The interval (3), response timeout (5), unhealthy (3) and healthy (5) thresholds apply in
//! both modes; the API checks their ranges.
//!
//! Network stack: the `network-stack` annotation, else `IPV4` for `INTERNAL`, `DUALSTACK` for `REGIONAL`,
//! and for `REGIONAL_NETWORK` `DUALSTACK` only when every backing node is dual-stack. `DUALSTACK` is
//! refused for `INTERNAL`, and for `REGIONAL_NETWORK` when a backing node has no IPv6 address.

use cloud_provider::annotations::parse_cidr_go_sloppy;
use k8s_openapi::api::core::v1::{Service, ServicePort};

use crate::annotations::*;
use crate::api::{ForwardingRule, HealthCheck, LbFirewall, LoadBalancerRequest, StickySessions};
use crate::config::LbType;
use crate::lb_nodes::{NodeSelection, format_node_names};

/// kube-proxy's health-check port.
pub const KUBE_PROXY_HEALTH_CHECK_PORT: i64 = 10256;
/// The port that becomes https when a certificate or pass-through is set and no `tls-ports` are.
pub const DEFAULT_SECURE_PORT: i64 = 443;

/// Why the Service's load balancer cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// An annotation or spec field is invalid.
    #[error(transparent)]
    Invalid(#[from] ServiceConfigError),
    /// The nodes do not fit the requested network stack, or none can back an external network load
    /// balancer (upstream's `ErrNetworkStackConfig` and `ErrNoEligibleBackends`, which it also reports as
    /// `LoadBalancerConfigError` events).
    #[error("load balancer configuration error: {0}")]
    NodeConfig(String),
    /// No node can back the load balancer.
    #[error("no ready nodes available for load balancer")]
    NoReadyNodes,
}

/// Everything the Service says about its load balancer, as upstream puts it in the request.
#[derive(Debug, Clone, PartialEq)]
pub struct LbSpec {
    /// The name.
    pub name: String,
    /// The type.
    pub lb_type: LbType,
    /// `EXTERNAL` or `INTERNAL`.
    pub network: &'static str,
    /// `IPV4` or `DUALSTACK`.
    pub network_stack: &'static str,
    /// The forwarding rules.
    pub forwarding_rules: Vec<ForwardingRule>,
    /// The health check.
    pub health_check: HealthCheck,
    /// Sticky sessions.
    pub sticky_sessions: StickySessions,
    /// The deprecated algorithm.
    pub algorithm: &'static str,
    /// The size slug (empty = not set).
    pub size_slug: String,
    /// The size in nodes (0 = not set).
    pub size_unit: u32,
    /// Redirect HTTP to HTTPS.
    pub redirect_http_to_https: bool,
    /// PROXY protocol to the droplets.
    pub enable_proxy_protocol: bool,
    /// HTTP keepalive to the droplets.
    pub enable_backend_keepalive: bool,
    /// No DNS records for Let's Encrypt certificates.
    pub disable_lets_encrypt_dns_records: bool,
    /// HTTP idle timeout.
    pub http_idle_timeout_seconds: Option<u64>,
    /// The firewall.
    pub firewall: LbFirewall,
    /// The VPC subnet (empty = the API chooses).
    pub subnet_uuid: String,
}

/// Where the load balancer lives and what backs it: the parts of the request that do not come from the
/// Service.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Placement {
    /// The region slug.
    pub region: String,
    /// The VPC UUID (empty = not sent).
    pub vpc_uuid: String,
    /// The tags (`k8s:<cluster ID>`).
    pub tags: Vec<String>,
    /// The backend droplets.
    pub droplet_ids: Vec<u64>,
}

impl LbSpec {
    /// The request body: the spec, where it lives and what backs it. `ip` is sent on creation only.
    pub fn request(&self, placement: Placement, ip: Option<String>) -> LoadBalancerRequest {
        LoadBalancerRequest {
            name: self.name.clone(),
            algorithm: self.algorithm.to_string(),
            region: placement.region,
            size_slug: self.size_slug.clone(),
            size_unit: self.size_unit,
            type_: self.lb_type.as_str().to_string(),
            forwarding_rules: self.forwarding_rules.clone(),
            health_check: self.health_check.clone(),
            sticky_sessions: self.sticky_sessions.clone(),
            droplet_ids: placement.droplet_ids,
            tags: placement.tags,
            redirect_http_to_https: self.redirect_http_to_https,
            enable_proxy_protocol: self.enable_proxy_protocol,
            enable_backend_keepalive: self.enable_backend_keepalive,
            vpc_uuid: placement.vpc_uuid,
            disable_lets_encrypt_dns_records: self.disable_lets_encrypt_dns_records,
            http_idle_timeout_seconds: self.http_idle_timeout_seconds,
            firewall: self.firewall.clone(),
            network: self.network.to_string(),
            network_stack: self.network_stack.to_string(),
            ip: ip.unwrap_or_default(),
            subnet_uuid: self.subnet_uuid.clone(),
            validate_only: false,
        }
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

/// Upstream's checks of the node set before building: an external `REGIONAL_NETWORK` load balancer needs
/// a node with a public IPv4 address, and every load balancer needs a backing node.
pub fn check_backends(
    nodes: &NodeSelection<'_>,
    lb_type: LbType,
    network: &str,
) -> Result<(), SpecError> {
    if nodes.ready.is_empty()
        && !nodes.public_net_unready.is_empty()
        && lb_type == LbType::RegionalNetwork
        && network == NETWORK_EXTERNAL
    {
        return Err(SpecError::NodeConfig(format!(
            "REGIONAL_NETWORK EXTERNAL load balancers require at least one node with a public IPv4 address; no eligible backends found. For private-only nodes, set {ANN_TYPE} to \"REGIONAL\" or {ANN_NETWORK} to \"INTERNAL\"."
        )));
    }
    if nodes.ready.is_empty() {
        return Err(SpecError::NoReadyNodes);
    }
    Ok(())
}

/// Builds the spec of a load balancer of `lb_type` for `service` backed by `nodes`. `certificate_id` is
/// the resolved certificate (`certificate-id`, else the one named `certificate-name`), empty when none;
/// only `REGIONAL` rules use it.
pub fn build_spec(
    service: &Service,
    lb_type: LbType,
    nodes: &NodeSelection<'_>,
    certificate_id: &str,
) -> Result<LbSpec, SpecError> {
    spec_of(service, lb_type, Some(nodes), certificate_id)
}

/// The spec as [`build_spec`] builds it from the Service alone, as upstream's admission server does: no
/// check of the backends, and the network stack defaulted as for nodes of unknown families.
pub fn build_spec_without_nodes(
    service: &Service,
    lb_type: LbType,
    certificate_id: &str,
) -> Result<LbSpec, SpecError> {
    spec_of(service, lb_type, None, certificate_id)
}

/// [`build_spec`], with the backend checks only when `nodes` are known.
fn spec_of(
    service: &Service,
    lb_type: LbType,
    nodes: Option<&NodeSelection<'_>>,
    certificate_id: &str,
) -> Result<LbSpec, SpecError> {
    let a = Annotations::of(service);
    let ports = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_deref())
        .unwrap_or_default();
    if ports.is_empty() {
        return Err(invalid("spec.ports", "the Service has no ports").into());
    }
    let network = network(service)?;
    let unknown = NodeSelection::default();
    if let Some(nodes) = nodes {
        check_backends(nodes, lb_type, network)?;
    }
    let network_stack = network_stack(service, lb_type, network, nodes.unwrap_or(&unknown))?;
    let forwarding_rules = match lb_type {
        LbType::RegionalNetwork => network_rules(ports)?,
        LbType::Regional => regional_rules(&a, ports, certificate_id)?,
    };
    let health_check = health_check(&a, service, ports)?;
    let sticky_sessions = sticky_sessions(&a)?;
    let algorithm = algorithm(&a);
    let (size_slug, size_unit) = size(&a)?;
    Ok(LbSpec {
        name: load_balancer_name(service),
        lb_type,
        network,
        network_stack,
        forwarding_rules,
        health_check,
        sticky_sessions,
        algorithm,
        size_slug,
        size_unit,
        redirect_http_to_https: a.bool(ANN_REDIRECT_HTTP_TO_HTTPS)?,
        enable_proxy_protocol: a.bool(ANN_ENABLE_PROXY_PROTOCOL)?,
        enable_backend_keepalive: a.bool(ANN_ENABLE_BACKEND_KEEPALIVE)?,
        disable_lets_encrypt_dns_records: a.bool(ANN_DISABLE_LETS_ENCRYPT_DNS_RECORDS)?,
        http_idle_timeout_seconds: http_idle_timeout(&a)?,
        firewall: firewall(&a, service)?,
        subnet_uuid: subnet_uuid(service).unwrap_or_default(),
    })
}

/// The network stack, see the module documentation.
fn network_stack(
    service: &Service,
    lb_type: LbType,
    network: &str,
    nodes: &NodeSelection<'_>,
) -> Result<&'static str, SpecError> {
    let internal = network == NETWORK_INTERNAL;
    let stack = match network_stack_annotation(service) {
        Some(NETWORK_STACK_IPV4) => NETWORK_STACK_IPV4,
        Some(NETWORK_STACK_DUALSTACK) => NETWORK_STACK_DUALSTACK,
        Some(other) => {
            return Err(invalid(
                ANN_NETWORK_STACK,
                format!("{other:?} is not a supported network stack (IPV4, DUALSTACK)"),
            )
            .into());
        }
        None if internal => NETWORK_STACK_IPV4,
        None if lb_type == LbType::RegionalNetwork && nodes.all_dual_stack() => {
            NETWORK_STACK_DUALSTACK
        }
        None if lb_type == LbType::RegionalNetwork => NETWORK_STACK_IPV4,
        None => NETWORK_STACK_DUALSTACK,
    };
    if stack == NETWORK_STACK_DUALSTACK {
        if internal {
            return Err(SpecError::NodeConfig(format!(
                "{ANN_NETWORK_STACK}: dual stack networking is not supported for internal load balancer"
            )));
        }
        if lb_type == LbType::RegionalNetwork && !nodes.single_stack_v4.is_empty() {
            return Err(SpecError::NodeConfig(format!(
                "{ANN_NETWORK_STACK}: dual-stack networking requested but {} nodes lack IPv6 addresses: {}. REGIONAL_NETWORK load balancers require all nodes to have IPv6 for dual-stack mode",
                nodes.single_stack_v4.len(),
                format_node_names(&nodes.single_stack_v4, 3)
            )));
        }
    }
    Ok(stack)
}

/// A service port's protocol as Kubernetes defaults it (`TCP` when unset).
fn port_protocol(port: &ServicePort) -> &str {
    port.protocol.as_deref().unwrap_or("TCP")
}

/// The entry/target protocol of a TCP or UDP port of a network load balancer.
fn network_rules(ports: &[ServicePort]) -> Result<Vec<ForwardingRule>, ServiceConfigError> {
    ports
        .iter()
        .enumerate()
        .map(|(i, port)| {
            let protocol = match port_protocol(port) {
                "TCP" => "tcp",
                "UDP" => "udp",
                other => return Err(unsupported_port_protocol(i, other)),
            };
            let p = service_port(i, port)?;
            Ok(ForwardingRule {
                entry_protocol: protocol.into(),
                entry_port: p,
                target_protocol: protocol.into(),
                target_port: p,
                ..Default::default()
            })
        })
        .collect()
}

fn unsupported_port_protocol(index: usize, protocol: &str) -> ServiceConfigError {
    invalid(
        format!("spec.ports[{index}].protocol"),
        format!("only TCP or UDP protocol is supported, got: {protocol:?}"),
    )
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

/// The node port of a service port, 0 when none is allocated (the API then refuses the rule).
fn node_port_of(port: &ServicePort) -> u16 {
    port.node_port
        .and_then(|p| u16::try_from(p).ok())
        .unwrap_or(0)
}

/// Upstream's `getProtocol`: absent is `tcp`; present must be one of the five protocols as written.
fn default_protocol(a: &Annotations<'_>) -> Result<&'static str, ServiceConfigError> {
    match a.raw(ANN_PROTOCOL) {
        None => Ok("tcp"),
        Some(p) => ["tcp", "http", "https", "http2", "http3"]
            .into_iter()
            .find(|known| *known == p)
            .ok_or_else(|| {
                invalid(
                    ANN_PROTOCOL,
                    format!("invalid protocol {p:?} (tcp, http, https, http2, http3)"),
                )
            }),
    }
}

/// The ports listed more than once over the http, https and http2 lists, sorted as strings.
fn duplicated_ports(lists: &[&[i64]]) -> Vec<String> {
    let mut counts = std::collections::BTreeMap::<i64, usize>::new();
    for port in lists.iter().flat_map(|l| l.iter()) {
        *counts.entry(*port).or_default() += 1;
    }
    let mut dups: Vec<String> = counts
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(p, _)| p.to_string())
        .collect();
    dups.sort();
    dups
}

/// Upstream's `getTLSPassThrough`: a Go boolean; anything else (the empty string too) is false.
fn tls_passthrough(a: &Annotations<'_>) -> bool {
    a.raw(ANN_TLS_PASSTHROUGH)
        .and_then(parse_go_bool)
        .unwrap_or(false)
}

fn regional_rules(
    a: &Annotations<'_>,
    ports: &[ServicePort],
    certificate_id: &str,
) -> Result<Vec<ForwardingRule>, ServiceConfigError> {
    let default = default_protocol(a)?;
    let http = a.ports(ANN_HTTP_PORTS)?;
    let mut https = a.ports(ANN_TLS_PORTS)?;
    let http2 = a.ports(ANN_HTTP2_PORTS)?;
    let dups = duplicated_ports(&[&http, &https, &http2]);
    if !dups.is_empty() {
        return Err(invalid(
            format!("{ANN_PREFIX}*-ports"),
            format!("ports cannot be shared but found: {}", dups.join(", ")),
        ));
    }
    let passthrough = tls_passthrough(a);
    if (!certificate_id.is_empty() || passthrough)
        && https.is_empty()
        && !http2.contains(&DEFAULT_SECURE_PORT)
    {
        https.push(DEFAULT_SECURE_PORT);
    }

    let mut rules = Vec::with_capacity(ports.len() + 1);
    for (i, port) in ports.iter().enumerate() {
        let number = i64::from(port.port);
        let mut protocol = default;
        if http.contains(&number) {
            protocol = "http";
        }
        if https.contains(&number) {
            protocol = "https";
        }
        if http2.contains(&number) {
            protocol = "http2";
        }
        if port_protocol(port) == "UDP" {
            protocol = "udp";
        }
        rules.push(regional_rule(
            i,
            port,
            protocol,
            certificate_id,
            passthrough,
        )?);
    }
    if let Some(rule) = http3_rule(a, ports, certificate_id, passthrough)? {
        rules.push(rule);
    }
    Ok(rules)
}

/// One rule of a `REGIONAL` load balancer; https and http2 terminate or pass TLS.
fn regional_rule(
    index: usize,
    port: &ServicePort,
    protocol: &str,
    certificate_id: &str,
    passthrough: bool,
) -> Result<ForwardingRule, ServiceConfigError> {
    match port_protocol(port) {
        "TCP" | "UDP" => {}
        other => return Err(unsupported_port_protocol(index, other)),
    }
    let target_port = node_port_of(port);
    if target_port == 0 {
        return Err(invalid(
            format!("spec.ports[{index}].nodePort"),
            "no node port is allocated (REGIONAL load balancers forward to node ports)",
        ));
    }
    let mut rule = ForwardingRule {
        entry_protocol: protocol.into(),
        entry_port: service_port(index, port)?,
        target_protocol: protocol.into(),
        target_port,
        ..Default::default()
    };
    if matches!(protocol, "https" | "http2") {
        match (certificate_id.is_empty(), passthrough) {
            (true, false) => {
                return Err(invalid(
                    format!("spec.ports[{index}]"),
                    format!(
                        "port {} speaks {protocol}: set {ANN_CERTIFICATE_ID}, {ANN_CERTIFICATE_NAME} or {ANN_TLS_PASSTHROUGH}",
                        port.port
                    ),
                ));
            }
            (false, true) => {
                return Err(invalid(
                    ANN_TLS_PASSTHROUGH,
                    "either a certificate should be set or TLS pass-through enabled, not both",
                ));
            }
            (true, true) => rule.tls_passthrough = true,
            (false, false) => {
                rule.certificate_id = certificate_id.into();
                rule.target_protocol = "http".into();
            }
        }
    }
    Ok(rule)
}

/// The extra rule of `http3-port` (`-1` means none, as upstream reads it).
fn http3_rule(
    a: &Annotations<'_>,
    ports: &[ServicePort],
    certificate_id: &str,
    passthrough: bool,
) -> Result<Option<ForwardingRule>, ServiceConfigError> {
    let Some(raw) = a.raw(ANN_HTTP3_PORT) else {
        return Ok(None);
    };
    let wanted = parse_go_int(raw)
        .ok_or_else(|| invalid(ANN_HTTP3_PORT, format!("{raw:?} is not an integer")))?;
    if wanted == -1 {
        return Ok(None);
    }
    if passthrough {
        return Err(invalid(
            ANN_TLS_PASSTHROUGH,
            "TLS passthrough is not allowed to be used in conjunction with HTTP3",
        ));
    }
    if certificate_id.is_empty() {
        return Err(invalid(
            ANN_HTTP3_PORT,
            format!("HTTP3 needs a certificate ({ANN_CERTIFICATE_ID} or {ANN_CERTIFICATE_NAME})"),
        ));
    }
    Ok(ports
        .iter()
        .find(|p| i64::from(p.port) == wanted)
        .map(|port| ForwardingRule {
            entry_protocol: "http3".into(),
            entry_port: u16::try_from(port.port).unwrap_or(0),
            target_protocol: "http".into(),
            target_port: node_port_of(port),
            certificate_id: certificate_id.into(),
            tls_passthrough: false,
        }))
}

/// The default health-check path and port: the Service's health-check node port for a `LoadBalancer`
/// with `externalTrafficPolicy: Local`, else kube-proxy's.
pub(crate) fn default_health_check_port(service: &Service) -> i64 {
    let spec = service.spec.as_ref();
    let local = spec.is_some_and(|s| {
        s.type_.as_deref() == Some("LoadBalancer")
            && s.external_traffic_policy.as_deref() == Some("Local")
    });
    let node_port = spec
        .and_then(|s| s.health_check_node_port)
        .filter(|p| *p != 0);
    match node_port {
        Some(p) if local => i64::from(p),
        _ => KUBE_PROXY_HEALTH_CHECK_PORT,
    }
}

fn health_check(
    a: &Annotations<'_>,
    service: &Service,
    ports: &[ServicePort],
) -> Result<HealthCheck, ServiceConfigError> {
    let mut check = HealthCheck {
        protocol: "http".into(),
        port: default_health_check_port(service),
        path: "/healthz".into(),
        proxy_protocol: Some(false),
        ..Default::default()
    };
    if a.raw(ANN_OVERRIDE_HEALTH_CHECK).is_some() {
        check.path = a.raw(ANN_HEALTH_CHECK_PATH).unwrap_or_default().to_string();
        check.port = health_check_port(a, service, ports)?;
        check.protocol = health_check_protocol(a, &check.path)?.into();
        check.proxy_protocol = None;
    }
    check.check_interval_seconds = a.int(ANN_HEALTH_CHECK_INTERVAL_SECONDS, 3)?;
    check.response_timeout_seconds = a.int(ANN_HEALTH_CHECK_RESPONSE_TIMEOUT_SECONDS, 5)?;
    check.unhealthy_threshold = a.int(ANN_HEALTH_CHECK_UNHEALTHY_THRESHOLD, 3)?;
    check.healthy_threshold = a.int(ANN_HEALTH_CHECK_HEALTHY_THRESHOLD, 5)?;
    Ok(check)
}

/// The node port of the `healthcheck-port` service port, else of the first TCP port.
fn health_check_port(
    a: &Annotations<'_>,
    service: &Service,
    ports: &[ServicePort],
) -> Result<i64, ServiceConfigError> {
    let wanted = a.ports(ANN_HEALTH_CHECK_PORT)?;
    match wanted.as_slice() {
        [] => ports
            .iter()
            .find(|p| port_protocol(p) == "TCP")
            .map(|p| i64::from(node_port_of(p)))
            .ok_or_else(|| {
                invalid(
                    ANN_HEALTH_CHECK_PORT,
                    "no health check port of protocol TCP found",
                )
            }),
        [one] => {
            let port = ports
                .iter()
                .find(|p| i64::from(p.port) == *one)
                .ok_or_else(|| {
                    invalid(
                        ANN_HEALTH_CHECK_PORT,
                        format!(
                            "port {one} does not exist on service {}/{}",
                            service.metadata.namespace.as_deref().unwrap_or_default(),
                            service.metadata.name.as_deref().unwrap_or_default()
                        ),
                    )
                })?;
            if port_protocol(port) == "UDP" {
                return Err(invalid(
                    ANN_HEALTH_CHECK_PORT,
                    format!("port {one} is a UDP port and cannot be health-checked"),
                ));
            }
            Ok(i64::from(node_port_of(port)))
        }
        many => Err(invalid(
            ANN_HEALTH_CHECK_PORT,
            format!("only a single port is supported, but found multiple: {many:?}"),
        )),
    }
}

/// Upstream's `healthCheckProtocol`: unset or empty is `http` with a path, else `tcp`.
fn health_check_protocol(
    a: &Annotations<'_>,
    path: &str,
) -> Result<&'static str, ServiceConfigError> {
    match a.raw(ANN_HEALTH_CHECK_PROTOCOL).unwrap_or_default() {
        "" if !path.is_empty() => Ok("http"),
        "" | "tcp" => Ok("tcp"),
        "http" => Ok("http"),
        "https" => Ok("https"),
        other => Err(invalid(
            ANN_HEALTH_CHECK_PROTOCOL,
            format!("invalid protocol {other:?} (tcp, http, https)"),
        )),
    }
}

/// Sticky sessions: `cookies` (exactly) with a cookie name and TTL, anything else `none`.
fn sticky_sessions(a: &Annotations<'_>) -> Result<StickySessions, ServiceConfigError> {
    if a.raw(ANN_STICKY_SESSIONS_TYPE) != Some("cookies") {
        return Ok(StickySessions {
            type_: "none".into(),
            ..Default::default()
        });
    }
    let name = a
        .non_empty(ANN_STICKY_SESSIONS_COOKIE_NAME)
        .ok_or_else(|| {
            invalid(
                ANN_STICKY_SESSIONS_COOKIE_NAME,
                "sticky session cookie name not specified, but required",
            )
        })?;
    let ttl = a.non_empty(ANN_STICKY_SESSIONS_COOKIE_TTL).ok_or_else(|| {
        invalid(
            ANN_STICKY_SESSIONS_COOKIE_TTL,
            "sticky session cookie ttl not specified, but required",
        )
    })?;
    let ttl = parse_go_int(ttl).ok_or_else(|| {
        invalid(
            ANN_STICKY_SESSIONS_COOKIE_TTL,
            format!("{ttl:?} is not an integer"),
        )
    })?;
    Ok(StickySessions {
        type_: "cookies".into(),
        cookie_name: name.into(),
        cookie_ttl_seconds: ttl,
    })
}

/// The deprecated algorithm: `least_connections` (exactly), else `round_robin`.
fn algorithm(a: &Annotations<'_>) -> &'static str {
    if a.raw(ANN_ALGORITHM) == Some("least_connections") {
        "least_connections"
    } else {
        "round_robin"
    }
}

/// The size slug (empty = unset) and size unit (0 = unset); a slug and a positive unit are exclusive.
fn size(a: &Annotations<'_>) -> Result<(String, u32), ServiceConfigError> {
    let slug = a.raw(ANN_SIZE_SLUG).unwrap_or_default();
    if !slug.is_empty() && !["lb-small", "lb-medium", "lb-large"].contains(&slug) {
        return Err(invalid(
            ANN_SIZE_SLUG,
            format!("invalid size slug {slug:?} (lb-small, lb-medium, lb-large)"),
        ));
    }
    let unit = match a.non_empty(ANN_SIZE_UNIT) {
        None => 0,
        Some(raw) => {
            let n = parse_go_int(raw)
                .ok_or_else(|| invalid(ANN_SIZE_UNIT, format!("{raw:?} is not an integer")))?;
            u32::try_from(n).map_err(|_| {
                invalid(
                    ANN_SIZE_UNIT,
                    format!("{n} is not a non-negative 32-bit number"),
                )
            })?
        }
    };
    if !slug.is_empty() && unit > 0 {
        return Err(invalid(
            ANN_SIZE_UNIT,
            format!("only one of {ANN_SIZE_SLUG} and {ANN_SIZE_UNIT} can be provided"),
        ));
    }
    Ok((slug.to_string(), unit))
}

/// The idle timeout: Go's `ParseUint` of the annotation, when present.
fn http_idle_timeout(a: &Annotations<'_>) -> Result<Option<u64>, ServiceConfigError> {
    a.raw(ANN_HTTP_IDLE_TIMEOUT_SECONDS)
        .map(|raw| {
            parse_go_uint(raw).ok_or_else(|| {
                invalid(
                    ANN_HTTP_IDLE_TIMEOUT_SECONDS,
                    format!("{raw:?} is not an unsigned integer"),
                )
            })
        })
        .transpose()
}

/// The firewall: `spec.loadBalancerSourceRanges` as `cidr:` allow rules when set, else the `allow-rules`
/// annotation; the `deny-rules` annotation. Annotation rules are sent as written (trimmed); the API
/// validates them.
fn firewall(a: &Annotations<'_>, service: &Service) -> Result<LbFirewall, ServiceConfigError> {
    let ranges = source_range_rules(service)?;
    Ok(LbFirewall {
        allow: if ranges.is_empty() {
            a.strings(ANN_ALLOW_RULES)
        } else {
            ranges
        },
        deny: a.strings(ANN_DENY_RULES),
    })
}

/// `spec.loadBalancerSourceRanges` as `cidr:<network>` rules: each range trimmed, parsed like Go's
/// `ParseCIDRSloppy` (leading zeros allowed in IPv4), reduced to its network address, duplicates once.
fn source_range_rules(service: &Service) -> Result<Vec<String>, ServiceConfigError> {
    let ranges = service
        .spec
        .as_ref()
        .and_then(|s| s.load_balancer_source_ranges.as_deref())
        .unwrap_or_default();
    let mut rules: Vec<String> = Vec::with_capacity(ranges.len());
    for (i, range) in ranges.iter().enumerate() {
        let network = parse_cidr_go_sloppy(range.trim()).ok_or_else(|| {
            invalid(
                format!("spec.loadBalancerSourceRanges[{i}]"),
                format!(
                    "{range:?} is not a CIDR (expected format for an IP address is 10.0.0.0/24)"
                ),
            )
        })?;
        let rule = format!("cidr:{network}");
        if !rules.contains(&rule) {
            rules.push(rule);
        }
    }
    Ok(rules)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::annotations::NETWORK_EXTERNAL;
    use crate::lb_nodes::select_nodes;
    use k8s_openapi::api::core::v1::{Node, ServiceSpec};

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

    fn node(addresses: &[(&str, &str)]) -> Node {
        crate::lb_nodes::tests::node(&format!("n{}", addresses.len()), addresses)
    }

    fn v4_nodes() -> Vec<Node> {
        vec![node(&[
            ("InternalIP", "10.0.0.1"),
            ("ExternalIP", "198.51.100.1"),
        ])]
    }

    fn dual_nodes() -> Vec<Node> {
        vec![node(&[
            ("InternalIP", "10.0.0.1"),
            ("ExternalIP", "198.51.100.1"),
            ("ExternalIP", "2001:db8::1"),
        ])]
    }

    fn build_with(
        service: &Service,
        lb_type: LbType,
        nodes: &[Node],
        cert: &str,
    ) -> Result<LbSpec, SpecError> {
        let network = network(service).unwrap_or(NETWORK_EXTERNAL);
        let selection = select_nodes(nodes, lb_type, network);
        build_spec(service, lb_type, &selection, cert)
    }

    fn regional(annotations: &[(&str, &str)], cert: &str) -> Result<LbSpec, SpecError> {
        build_with(&web(annotations), LbType::Regional, &v4_nodes(), cert)
    }

    fn network_lb(annotations: &[(&str, &str)]) -> Result<LbSpec, SpecError> {
        build_with(&web(annotations), LbType::RegionalNetwork, &v4_nodes(), "")
    }

    fn field(r: Result<LbSpec, SpecError>) -> String {
        match r.unwrap_err() {
            SpecError::Invalid(e) => e.field,
            other => panic!("not an annotation error: {other}"),
        }
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

    fn tls(mut r: ForwardingRule, cert: &str) -> ForwardingRule {
        r.certificate_id = cert.into();
        r
    }

    fn passthrough(mut r: ForwardingRule) -> ForwardingRule {
        r.tls_passthrough = true;
        r
    }

    #[test]
    fn defaults_of_a_plain_network_load_balancer() {
        let s = network_lb(&[]).unwrap();
        assert_eq!(s.name, "a6f0c2b4e1a2b4c3d9e8f0123456789a");
        assert_eq!(
            s.forwarding_rules,
            vec![rule("tcp", 80, "tcp", 80), rule("tcp", 443, "tcp", 443)]
        );
        assert_eq!(
            s.health_check,
            HealthCheck {
                protocol: "http".into(),
                port: 10256,
                path: "/healthz".into(),
                check_interval_seconds: 3,
                response_timeout_seconds: 5,
                healthy_threshold: 5,
                unhealthy_threshold: 3,
                proxy_protocol: Some(false),
            }
        );
        assert_eq!(s.sticky_sessions.type_, "none");
        assert_eq!(s.algorithm, "round_robin");
        assert_eq!((s.network, s.network_stack), ("EXTERNAL", "IPV4"));
        assert_eq!(s.firewall, LbFirewall::default());
        assert_eq!((s.size_slug.as_str(), s.size_unit), ("", 0));
        assert!(!s.disable_lets_encrypt_dns_records && !s.proxies_traffic());
        assert_eq!(s.http_idle_timeout_seconds, None);
    }

    #[test]
    fn network_load_balancers_ignore_http_and_tls_annotations() {
        let s = network_lb(&[
            (ANN_PROTOCOL, "http"),
            (ANN_TLS_PORTS, "443"),
            (ANN_CERTIFICATE_ID, "c"),
            (ANN_TLS_PASSTHROUGH, "true"),
            (ANN_HTTP3_PORT, "443"),
        ])
        .unwrap();
        assert_eq!(
            s.forwarding_rules,
            vec![rule("tcp", 80, "tcp", 80), rule("tcp", 443, "tcp", 443)]
        );
        let udp = svc(&[], vec![port(53, 30053, "UDP"), port(9, 0, "SCTP")]);
        let err = build_with(&udp, LbType::RegionalNetwork, &v4_nodes(), "").unwrap_err();
        assert!(matches!(err, SpecError::Invalid(e) if e.field == "spec.ports[1].protocol"));
    }

    #[test]
    fn regional_protocols_follow_the_port_lists_later_list_winning() {
        let s = regional(&[(ANN_PROTOCOL, "http")], "").unwrap();
        assert_eq!(
            s.forwarding_rules,
            vec![
                rule("http", 80, "http", 30080),
                rule("http", 443, "http", 30443)
            ]
        );
        assert!(s.proxies_traffic());
        // A certificate makes 443 https even when http-ports lists it.
        let s = regional(&[(ANN_HTTP_PORTS, "80,443")], "cert-1").unwrap();
        assert_eq!(
            s.forwarding_rules,
            vec![
                rule("http", 80, "http", 30080),
                tls(rule("https", 443, "http", 30443), "cert-1")
            ]
        );
        // ... unless http2 claims it.
        let s = regional(&[(ANN_HTTP2_PORTS, "443")], "cert-1").unwrap();
        assert_eq!(
            s.forwarding_rules[1],
            tls(rule("http2", 443, "http", 30443), "cert-1")
        );
        // A certificate without any secure port in the Service changes nothing.
        let only80 = svc(&[], vec![port(80, 30080, "TCP")]);
        let s = build_with(&only80, LbType::Regional, &v4_nodes(), "c").unwrap();
        assert_eq!(s.forwarding_rules, vec![rule("tcp", 80, "tcp", 30080)]);
        // UDP ports stay udp whatever the lists say.
        let mixed = svc(
            &[(ANN_HTTP_PORTS, "53")],
            vec![port(53, 30053, "UDP"), port(80, 30080, "TCP")],
        );
        let s = build_with(&mixed, LbType::Regional, &v4_nodes(), "").unwrap();
        assert_eq!(s.forwarding_rules[0], rule("udp", 53, "udp", 30053));
    }

    #[test]
    fn port_list_errors() {
        assert_eq!(
            field(regional(
                &[(ANN_HTTP_PORTS, "80"), (ANN_TLS_PORTS, "80")],
                "c"
            )),
            format!("{ANN_PREFIX}*-ports")
        );
        // Within one list too.
        assert_eq!(
            field(regional(&[(ANN_HTTP_PORTS, "80,80")], "")),
            format!("{ANN_PREFIX}*-ports")
        );
        assert_eq!(
            field(regional(&[(ANN_HTTP_PORTS, "80, 8080")], "")),
            ANN_HTTP_PORTS
        );
        assert_eq!(field(regional(&[(ANN_TLS_PORTS, "")], "c")), ANN_TLS_PORTS);
        assert_eq!(field(regional(&[(ANN_PROTOCOL, "HTTP")], "")), ANN_PROTOCOL);
        assert_eq!(field(regional(&[(ANN_PROTOCOL, "")], "")), ANN_PROTOCOL);
        // https without a certificate or pass-through.
        assert_eq!(
            field(regional(&[(ANN_PROTOCOL, "https")], "")),
            "spec.ports[0]"
        );
    }

    #[test]
    fn tls_passthrough_and_its_lenient_boolean() {
        let s = regional(
            &[(ANN_TLS_PASSTHROUGH, "true"), (ANN_HTTP2_PORTS, "80")],
            "",
        )
        .unwrap();
        assert_eq!(
            s.forwarding_rules,
            vec![
                passthrough(rule("http2", 80, "http2", 30080)),
                passthrough(rule("https", 443, "https", 30443))
            ]
        );
        assert!(!s.proxies_traffic());
        // Not a Go boolean: no pass-through (and no error).
        let s = regional(&[(ANN_TLS_PASSTHROUGH, "yes")], "").unwrap();
        assert_eq!(s.forwarding_rules[1], rule("tcp", 443, "tcp", 30443));
        assert_eq!(
            field(regional(&[(ANN_TLS_PASSTHROUGH, "1")], "cert")),
            ANN_TLS_PASSTHROUGH
        );
    }

    #[test]
    fn http3_adds_a_rule_on_a_shared_port() {
        let s = regional(&[(ANN_HTTP3_PORT, "443")], "c").unwrap();
        assert_eq!(
            s.forwarding_rules,
            vec![
                rule("tcp", 80, "tcp", 30080),
                tls(rule("https", 443, "http", 30443), "c"),
                tls(rule("http3", 443, "http", 30443), "c"),
            ]
        );
        // A port the Service does not have adds nothing; -1 means none.
        assert_eq!(
            regional(&[(ANN_HTTP3_PORT, "8443")], "c")
                .unwrap()
                .forwarding_rules
                .len(),
            2
        );
        assert_eq!(
            regional(&[(ANN_HTTP3_PORT, "-1")], "")
                .unwrap()
                .forwarding_rules
                .len(),
            2
        );
        assert_eq!(
            field(regional(&[(ANN_HTTP3_PORT, "443")], "")),
            ANN_HTTP3_PORT
        );
        assert_eq!(
            field(regional(&[(ANN_HTTP3_PORT, "x")], "c")),
            ANN_HTTP3_PORT
        );
        assert_eq!(
            field(regional(
                &[(ANN_HTTP3_PORT, "443"), (ANN_TLS_PASSTHROUGH, "true")],
                ""
            )),
            ANN_TLS_PASSTHROUGH
        );
        // protocol http3 as the default: rules without TLS, as upstream builds them.
        let s = regional(&[(ANN_PROTOCOL, "http3")], "").unwrap();
        assert_eq!(s.forwarding_rules[0], rule("http3", 80, "http3", 30080));
    }

    #[test]
    fn sctp_and_missing_node_ports_are_refused() {
        let sctp = svc(&[], vec![port(9, 30009, "SCTP")]);
        let err = build_with(&sctp, LbType::Regional, &v4_nodes(), "").unwrap_err();
        assert!(matches!(err, SpecError::Invalid(e) if e.field == "spec.ports[0].protocol"));
        let mut p = port(80, 0, "TCP");
        p.node_port = None;
        let no_node_port = svc(&[], vec![p]);
        let err = build_with(&no_node_port, LbType::Regional, &v4_nodes(), "").unwrap_err();
        assert!(matches!(err, SpecError::Invalid(e) if e.field == "spec.ports[0].nodePort"));
        assert!(build_with(&no_node_port, LbType::RegionalNetwork, &v4_nodes(), "").is_ok());
        let err = build_with(&svc(&[], vec![]), LbType::Regional, &v4_nodes(), "").unwrap_err();
        assert!(matches!(err, SpecError::Invalid(e) if e.field == "spec.ports"));
    }

    #[test]
    fn default_health_check_follows_the_traffic_policy() {
        let mut s = web(&[]);
        let spec = s.spec.as_mut().unwrap();
        spec.external_traffic_policy = Some("Local".into());
        spec.health_check_node_port = Some(32100);
        let hc = build_with(&s, LbType::RegionalNetwork, &v4_nodes(), "")
            .unwrap()
            .health_check;
        assert_eq!(
            (hc.protocol.as_str(), hc.port, hc.path.as_str()),
            ("http", 32100, "/healthz")
        );
        assert_eq!(hc.proxy_protocol, Some(false));
        // Local without an allocated port falls back to kube-proxy.
        s.spec.as_mut().unwrap().health_check_node_port = None;
        let hc = build_with(&s, LbType::Regional, &v4_nodes(), "")
            .unwrap()
            .health_check;
        assert_eq!(hc.port, 10256);
        // Without the override the healthcheck-port/protocol/path annotations are not read.
        let hc = regional(
            &[
                (ANN_HEALTH_CHECK_PORT, "443"),
                (ANN_HEALTH_CHECK_PROTOCOL, "udp"),
            ],
            "",
        )
        .unwrap()
        .health_check;
        assert_eq!((hc.protocol.as_str(), hc.port), ("http", 10256));
    }

    #[test]
    fn overridden_health_check() {
        // Any value enables the override, "false" too.
        let hc = regional(&[(ANN_OVERRIDE_HEALTH_CHECK, "false")], "")
            .unwrap()
            .health_check;
        assert_eq!(
            hc,
            HealthCheck {
                protocol: "tcp".into(),
                port: 30080,
                path: String::new(),
                check_interval_seconds: 3,
                response_timeout_seconds: 5,
                healthy_threshold: 5,
                unhealthy_threshold: 3,
                proxy_protocol: None,
            }
        );
        let hc = regional(
            &[
                (ANN_OVERRIDE_HEALTH_CHECK, ""),
                (ANN_HEALTH_CHECK_PORT, "443"),
                (ANN_HEALTH_CHECK_PATH, "/ready"),
                (ANN_HEALTH_CHECK_INTERVAL_SECONDS, "10"),
                (ANN_HEALTH_CHECK_RESPONSE_TIMEOUT_SECONDS, "8"),
                (ANN_HEALTH_CHECK_UNHEALTHY_THRESHOLD, "4"),
                (ANN_HEALTH_CHECK_HEALTHY_THRESHOLD, "2"),
            ],
            "",
        )
        .unwrap()
        .health_check;
        // A path without a protocol means http.
        assert_eq!(
            (hc.protocol.as_str(), hc.port, hc.path.as_str()),
            ("http", 30443, "/ready")
        );
        assert_eq!(
            (
                hc.check_interval_seconds,
                hc.response_timeout_seconds,
                hc.unhealthy_threshold,
                hc.healthy_threshold
            ),
            (10, 8, 4, 2)
        );
        let o = (ANN_OVERRIDE_HEALTH_CHECK, "true");
        for (key, value) in [
            (ANN_HEALTH_CHECK_PORT, "30080"),
            (ANN_HEALTH_CHECK_PORT, "80,443"),
            (ANN_HEALTH_CHECK_PORT, "x"),
            (ANN_HEALTH_CHECK_PROTOCOL, "udp"),
            (ANN_HEALTH_CHECK_PROTOCOL, "HTTP"),
            (ANN_HEALTH_CHECK_RESPONSE_TIMEOUT_SECONDS, "x"),
            (ANN_HEALTH_CHECK_UNHEALTHY_THRESHOLD, ""),
        ] {
            assert_eq!(
                field(regional(&[o, (key, value)], "")),
                key,
                "{key}={value}"
            );
        }
        // Ranges are the API's to check: out-of-range numbers are sent as they are.
        let hc = regional(&[(ANN_HEALTH_CHECK_INTERVAL_SECONDS, "1")], "")
            .unwrap()
            .health_check;
        assert_eq!(hc.check_interval_seconds, 1);
        let udp_only = svc(&[o], vec![port(53, 30053, "UDP")]);
        let err = build_with(&udp_only, LbType::Regional, &v4_nodes(), "").unwrap_err();
        assert!(matches!(err, SpecError::Invalid(e) if e.field == ANN_HEALTH_CHECK_PORT));
        let udp_named = svc(
            &[o, (ANN_HEALTH_CHECK_PORT, "53")],
            vec![port(53, 30053, "UDP"), port(80, 30080, "TCP")],
        );
        let err = build_with(&udp_named, LbType::Regional, &v4_nodes(), "").unwrap_err();
        assert!(matches!(err, SpecError::Invalid(e) if e.field == ANN_HEALTH_CHECK_PORT));
    }

    #[test]
    fn sticky_sessions_need_a_name_and_a_ttl() {
        let cookies = [
            (ANN_STICKY_SESSIONS_TYPE, "cookies"),
            (ANN_STICKY_SESSIONS_COOKIE_NAME, "route"),
            (ANN_STICKY_SESSIONS_COOKIE_TTL, "300"),
        ];
        // Over plain tcp too: the API decides.
        let s = regional(&cookies, "").unwrap();
        assert_eq!(
            s.sticky_sessions,
            StickySessions {
                type_: "cookies".into(),
                cookie_name: "route".into(),
                cookie_ttl_seconds: 300,
            }
        );
        assert_eq!(
            field(regional(&cookies[..2], "")),
            ANN_STICKY_SESSIONS_COOKIE_TTL
        );
        assert_eq!(
            field(regional(&[cookies[0], cookies[2]], "")),
            ANN_STICKY_SESSIONS_COOKIE_NAME
        );
        assert_eq!(
            field(regional(
                &[
                    cookies[0],
                    cookies[1],
                    (ANN_STICKY_SESSIONS_COOKIE_TTL, "5m")
                ],
                ""
            )),
            ANN_STICKY_SESSIONS_COOKIE_TTL
        );
        // Any other type is none.
        for t in ["Cookies", "ip_hash", ""] {
            let s = regional(&[(ANN_STICKY_SESSIONS_TYPE, t)], "").unwrap();
            assert_eq!(s.sticky_sessions.type_, "none", "{t}");
        }
    }

    #[test]
    fn sizes_algorithm_booleans_and_timeouts() {
        assert_eq!(
            regional(&[(ANN_SIZE_SLUG, "lb-medium")], "")
                .unwrap()
                .size_slug,
            "lb-medium"
        );
        assert_eq!(regional(&[(ANN_SIZE_UNIT, "3")], "").unwrap().size_unit, 3);
        assert_eq!(regional(&[(ANN_SIZE_UNIT, "")], "").unwrap().size_unit, 0);
        // A slug with a zero unit is fine: the unit is not set.
        assert!(regional(&[(ANN_SIZE_SLUG, "lb-small"), (ANN_SIZE_UNIT, "0")], "").is_ok());
        for (key, value) in [
            (ANN_SIZE_UNIT, "-1"),
            (ANN_SIZE_UNIT, "big"),
            (ANN_SIZE_SLUG, "lb-huge"),
            (ANN_SIZE_SLUG, "LB-SMALL"),
        ] {
            assert_eq!(field(regional(&[(key, value)], "")), key, "{key}={value}");
        }
        assert_eq!(
            field(regional(
                &[(ANN_SIZE_SLUG, "lb-small"), (ANN_SIZE_UNIT, "2")],
                ""
            )),
            ANN_SIZE_UNIT
        );
        assert_eq!(
            regional(&[(ANN_ALGORITHM, "least_connections")], "")
                .unwrap()
                .algorithm,
            "least_connections"
        );
        assert_eq!(
            regional(&[(ANN_ALGORITHM, "LEAST_CONNECTIONS")], "")
                .unwrap()
                .algorithm,
            "round_robin"
        );
        let s = regional(
            &[
                (ANN_REDIRECT_HTTP_TO_HTTPS, "true"),
                (ANN_ENABLE_PROXY_PROTOCOL, "1"),
                (ANN_ENABLE_BACKEND_KEEPALIVE, "True"),
                (ANN_DISABLE_LETS_ENCRYPT_DNS_RECORDS, "t"),
                (ANN_HTTP_IDLE_TIMEOUT_SECONDS, "120"),
            ],
            "",
        )
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
            assert_eq!(field(regional(&[(key, "yes")], "")), key);
            assert_eq!(field(regional(&[(key, "")], "")), key);
        }
        for bad in ["", "+90", "-1", "ninety"] {
            assert_eq!(
                field(regional(&[(ANN_HTTP_IDLE_TIMEOUT_SECONDS, bad)], "")),
                ANN_HTTP_IDLE_TIMEOUT_SECONDS
            );
        }
        assert_eq!(
            regional(&[(ANN_HTTP_IDLE_TIMEOUT_SECONDS, "10")], "")
                .unwrap()
                .http_idle_timeout_seconds,
            Some(10)
        );
    }

    #[test]
    fn firewall_rules_and_source_ranges() {
        let s = regional(
            &[
                (ANN_ALLOW_RULES, "ip:1.2.3.4, cidr:10.0.0.0/16,ip:1.2.3.4"),
                (ANN_DENY_RULES, "cidr:2001:db8::/32"),
            ],
            "",
        )
        .unwrap();
        // As written (trimmed), duplicates and all: the API validates.
        assert_eq!(
            s.firewall.allow,
            vec!["ip:1.2.3.4", "cidr:10.0.0.0/16", "ip:1.2.3.4"]
        );
        assert_eq!(s.firewall.deny, vec!["cidr:2001:db8::/32"]);
        assert_eq!(
            regional(&[(ANN_DENY_RULES, "everyone")], "")
                .unwrap()
                .firewall
                .deny,
            vec!["everyone"]
        );
        // Source ranges replace the allow rules, as networks.
        let mut service = web(&[(ANN_ALLOW_RULES, "ip:1.2.3.4")]);
        service.spec.as_mut().unwrap().load_balancer_source_ranges = Some(vec![
            "192.0.2.7/24".into(),
            " 198.51.100.7/32".into(),
            "192.0.2.0/24".into(),
            "010.0.0.0/8".into(),
            "2001:db8::1/32".into(),
            "::ffff:10.1.0.0/112".into(),
        ]);
        let s = build_with(&service, LbType::Regional, &v4_nodes(), "").unwrap();
        assert_eq!(
            s.firewall.allow,
            vec![
                "cidr:192.0.2.0/24",
                "cidr:198.51.100.7/32",
                "cidr:10.0.0.0/8",
                "cidr:2001:db8::/32",
                "cidr:10.1.0.0/16"
            ]
        );
        service.spec.as_mut().unwrap().load_balancer_source_ranges = Some(vec!["nope".into()]);
        let err = build_with(&service, LbType::Regional, &v4_nodes(), "").unwrap_err();
        assert!(
            matches!(err, SpecError::Invalid(e) if e.field == "spec.loadBalancerSourceRanges[0]")
        );
    }

    #[test]
    fn network_stack_defaults_and_conflicts() {
        let plain = web(&[]);
        let stack =
            |s: &Service, t, nodes: &[Node]| build_with(s, t, nodes, "").map(|s| s.network_stack);
        assert_eq!(
            stack(&plain, LbType::Regional, &v4_nodes()).unwrap(),
            "DUALSTACK"
        );
        assert_eq!(
            stack(&plain, LbType::RegionalNetwork, &v4_nodes()).unwrap(),
            "IPV4"
        );
        assert_eq!(
            stack(&plain, LbType::RegionalNetwork, &dual_nodes()).unwrap(),
            "DUALSTACK"
        );
        let mut mixed = dual_nodes();
        mixed.extend(v4_nodes());
        assert_eq!(
            stack(&plain, LbType::RegionalNetwork, &mixed).unwrap(),
            "IPV4"
        );
        let internal = web(&[(ANN_NETWORK, "INTERNAL")]);
        assert_eq!(
            stack(&internal, LbType::Regional, &dual_nodes()).unwrap(),
            "IPV4"
        );
        let ipv4 = web(&[(ANN_NETWORK_STACK, "IPV4")]);
        assert_eq!(
            stack(&ipv4, LbType::Regional, &dual_nodes()).unwrap(),
            "IPV4"
        );

        let explicit = web(&[(ANN_NETWORK_STACK, "DUALSTACK")]);
        assert!(matches!(
            stack(&explicit, LbType::RegionalNetwork, &mixed).unwrap_err(),
            SpecError::NodeConfig(m) if m.contains("lack IPv6")
        ));
        assert_eq!(
            stack(&explicit, LbType::Regional, &v4_nodes()).unwrap(),
            "DUALSTACK"
        );
        let internal_dual = web(&[(ANN_NETWORK, "INTERNAL"), (ANN_NETWORK_STACK, "DUALSTACK")]);
        assert!(matches!(
            stack(&internal_dual, LbType::Regional, &dual_nodes()).unwrap_err(),
            SpecError::NodeConfig(m) if m.contains("internal")
        ));
        assert_eq!(
            field(build_with(
                &web(&[(ANN_NETWORK_STACK, "dualstack")]),
                LbType::Regional,
                &v4_nodes(),
                ""
            )),
            ANN_NETWORK_STACK
        );
    }

    #[test]
    fn backends_are_required() {
        let private_only = vec![node(&[("InternalIP", "10.0.0.1")])];
        // Private-only nodes may back REGIONAL load balancers ...
        assert!(build_with(&web(&[]), LbType::Regional, &private_only, "").is_ok());
        // ... not external REGIONAL_NETWORK ones.
        assert!(matches!(
            build_with(&web(&[]), LbType::RegionalNetwork, &private_only, "").unwrap_err(),
            SpecError::NodeConfig(m) if m.contains("no eligible backends")
        ));
        assert_eq!(
            build_with(&web(&[]), LbType::RegionalNetwork, &[], "").unwrap_err(),
            SpecError::NoReadyNodes
        );
        let internal = web(&[(ANN_NETWORK, "INTERNAL")]);
        assert!(build_with(&internal, LbType::RegionalNetwork, &private_only, "").is_ok());
    }

    #[test]
    fn the_request_carries_placement_and_creation_ip() {
        let s = regional(&[(ANN_SUBNET_UUID, " sub-1 ")], "").unwrap();
        let request = s.request(
            Placement {
                region: "nyc3".into(),
                vpc_uuid: "vpc-1".into(),
                tags: vec!["k8s:c".into()],
                droplet_ids: vec![3, 1],
            },
            Some("203.0.113.9".into()),
        );
        assert_eq!(request.region, "nyc3");
        assert_eq!(request.vpc_uuid, "vpc-1");
        assert_eq!(request.droplet_ids, vec![3, 1]);
        assert_eq!(request.ip, "203.0.113.9");
        assert_eq!(request.subnet_uuid, "sub-1");
        assert_eq!(request.type_, "REGIONAL");
        assert_eq!(request.algorithm, "round_robin");
    }
}
