//! What a Service asks of its classic load balancer: the Service spec and the
//! `service.beta.kubernetes.io/aws-load-balancer-*` annotations, read with upstream's rules (the same values
//! give the same listeners, health check and attributes, so an ELB the upstream provider made already
//! matches). Values upstream would pass on to AWS to be refused there are refused here, naming the
//! annotation, before any cloud call.

use std::collections::BTreeMap;

use cloud_provider::annotations::{comma_list_skipping_empty, key_value_pairs};
use ipnet::IpNet;
use k8s_openapi::api::core::v1::Service;

use crate::config::ClusterHealthProbe;
pub use crate::load_balancer::spec::ANN_EXTRA_SECURITY_GROUPS;
use crate::load_balancer::spec::{
    ANN_ACCESS_LOG_BUCKET, ANN_ACCESS_LOG_ENABLED, ANN_ACCESS_LOG_PREFIX, ANN_ADDITIONAL_TAGS,
    ANN_BACKEND_PROTOCOL, ANN_CROSS_ZONE, ANN_HC_HEALTHY, ANN_HC_INTERVAL, ANN_HC_PATH,
    ANN_HC_PORT, ANN_HC_PROTOCOL, ANN_HC_TIMEOUT, ANN_HC_UNHEALTHY, ANN_INTERNAL, ANN_SSL_CERT,
    ANN_SSL_NEGOTIATION_POLICY, ANN_SSL_PORTS, ANN_SUBNETS, ANN_TARGET_GROUP_ATTRIBUTES,
    ANN_TARGET_NODE_LABELS, SpecError, annotated_security_groups, annotation, namespace_and_name,
    parse_bool, parse_int, source_ranges,
};

/// `*`: the proxy protocol towards the instances on every listener.
pub const ANN_PROXY_PROTOCOL: &str = "service.beta.kubernetes.io/aws-load-balancer-proxy-protocol";
/// `true`/`false`: connection draining.
pub const ANN_CONNECTION_DRAINING_ENABLED: &str =
    "service.beta.kubernetes.io/aws-load-balancer-connection-draining-enabled";
/// Connection-draining timeout in seconds.
pub const ANN_CONNECTION_DRAINING_TIMEOUT: &str =
    "service.beta.kubernetes.io/aws-load-balancer-connection-draining-timeout";
/// Idle timeout of connections in seconds (default 60).
pub const ANN_CONNECTION_IDLE_TIMEOUT: &str =
    "service.beta.kubernetes.io/aws-load-balancer-connection-idle-timeout";
/// Minutes between access-log deliveries (5 or 60).
pub const ANN_ACCESS_LOG_EMIT_INTERVAL: &str =
    "service.beta.kubernetes.io/aws-load-balancer-access-log-emit-interval";

/// Name of the backend policy that turns the proxy protocol on.
pub const PROXY_PROTOCOL_POLICY: &str = "k8s-proxyprotocol-enabled";
/// Prefix of the listener policy carrying the ssl-negotiation-policy annotation's security policy.
pub const SSL_NEGOTIATION_POLICY_PREFIX: &str = "k8s-SSLNegotiationPolicy-";

/// One listener, in the ELB API's terms (protocols lower case, as upstream sends them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassicListener {
    /// The Service port.
    pub load_balancer_port: i32,
    /// `tcp`, `ssl`, `http` or `https`.
    pub protocol: String,
    /// The node port.
    pub instance_port: i32,
    /// `tcp`, `ssl`, `http` or `https`.
    pub instance_protocol: String,
    /// The certificate of `ssl` and `https` listeners.
    pub certificate: Option<String>,
}

impl ClassicListener {
    /// Whether `other` is the same listener: protocols and certificate compared without case, as
    /// upstream compares them.
    pub fn same_as(&self, other: &ClassicListener) -> bool {
        let eq = |a: &str, b: &str| a.eq_ignore_ascii_case(b);
        self.load_balancer_port == other.load_balancer_port
            && self.instance_port == other.instance_port
            && eq(&self.protocol, &other.protocol)
            && eq(&self.instance_protocol, &other.instance_protocol)
            && match (&self.certificate, &other.certificate) {
                (None, None) => true,
                (Some(a), Some(b)) => eq(a, b),
                _ => false,
            }
    }

    /// Whether the load balancer terminates TLS on this listener.
    pub fn is_tls(&self) -> bool {
        self.protocol.eq_ignore_ascii_case("ssl") || self.protocol.eq_ignore_ascii_case("https")
    }
}

/// The load balancer's health check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassicHealthCheck {
    /// `<PROTOCOL>:<port>[<path>]`, e.g. `TCP:30080` or `HTTP:32000/healthz`.
    pub target: String,
    /// Successes before healthy.
    pub healthy_threshold: i32,
    /// Failures before unhealthy.
    pub unhealthy_threshold: i32,
    /// Seconds between checks.
    pub interval: i32,
    /// Seconds before a check fails.
    pub timeout: i32,
}

/// The load-balancer attributes upstream sets (and nothing else: attributes it leaves unset are not
/// compared or sent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassicAttributes {
    /// Access logs on.
    pub access_log_enabled: bool,
    /// Minutes between deliveries, when annotated.
    pub access_log_emit_interval: Option<i32>,
    /// The bucket, when annotated.
    pub access_log_bucket: Option<String>,
    /// The key prefix, when annotated.
    pub access_log_prefix: Option<String>,
    /// Connection draining on.
    pub connection_draining_enabled: bool,
    /// The draining timeout, when annotated.
    pub connection_draining_timeout: Option<i32>,
    /// Idle timeout in seconds.
    pub idle_timeout: i32,
    /// Cross-zone load balancing on.
    pub cross_zone: bool,
}

/// Everything a Service asks of its classic load balancer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassicSpec {
    /// The Service's namespace.
    pub namespace: String,
    /// The Service's name.
    pub name: String,
    /// An internal load balancer (fixed at creation).
    pub internal: bool,
    /// Explicit subnets (IDs or Name tags), replacing discovery.
    pub subnets: Option<Vec<String>>,
    /// One listener per Service port with a node port, in port order.
    pub listeners: Vec<ClassicListener>,
    /// Every Service port (the load balancer's security group admits clients on each).
    pub ports: Vec<i32>,
    /// The health check.
    pub health_check: ClassicHealthCheck,
    /// The attributes.
    pub attributes: ClassicAttributes,
    /// The proxy protocol on every backend port.
    pub proxy_protocol: bool,
    /// The security policy of TLS listeners, when annotated (even empty, as upstream).
    pub ssl_negotiation_policy: Option<String>,
    /// Security groups replacing the load balancer's own one.
    pub security_groups: Vec<String>,
    /// Security groups added to the load balancer.
    pub extra_security_groups: Vec<String>,
    /// Extra tags of the load balancer and its security group.
    pub additional_tags: BTreeMap<String, String>,
    /// Labels a node needs to be registered (an empty value: the label must exist).
    pub target_node_labels: BTreeMap<String, String>,
    /// Allowed client CIDRs (0.0.0.0/0 unless restricted).
    pub source_ranges: Vec<IpNet>,
}

impl ClassicSpec {
    /// `<namespace>/<name>`.
    pub fn service_name(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// A non-empty annotation value (upstream treats empty values of attribute annotations as absent).
fn non_empty<'a>(service: &'a Service, key: &str) -> Option<&'a str> {
    annotation(service, key).filter(|v| !v.is_empty())
}

/// The ports of the ssl-ports annotation: `None` for every port (absent, empty or `*`), else port numbers
/// and names exactly as written (upstream does not trim them).
fn ssl_ports(service: &Service) -> Option<(Vec<i32>, Vec<String>)> {
    let raw = service
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANN_SSL_PORTS))?;
    if raw.is_empty() || raw == "*" {
        return None;
    }
    let mut numbers = Vec::new();
    let mut names = Vec::new();
    for item in raw.split(',') {
        match item.parse::<i32>() {
            Ok(n) => numbers.push(n),
            Err(_) => names.push(item.to_string()),
        }
    }
    Some((numbers, names))
}

/// The listener of one Service port, by upstream's rules for certificates, ssl-ports and backend protocol.
fn listener(
    service: &Service,
    port: i32,
    port_name: &str,
    node_port: i32,
    ssl: &Option<(Vec<i32>, Vec<String>)>,
) -> Result<ClassicListener, SpecError> {
    let certificate = annotation(service, ANN_SSL_CERT).filter(|c| !c.is_empty());
    let backend = annotation(service, ANN_BACKEND_PROTOCOL).unwrap_or_default();
    let port_name = port_name.to_ascii_lowercase();
    let tls_port = ssl
        .as_ref()
        .is_none_or(|(numbers, names)| numbers.contains(&port) || names.contains(&port_name));
    let (protocol, instance_protocol, certificate) = match certificate {
        Some(cert) if tls_port => {
            let (front, back) = match backend {
                "" => ("ssl", "tcp"),
                "https" => ("https", "https"),
                "http" => ("https", "http"),
                "ssl" => ("ssl", "ssl"),
                "tcp" => ("ssl", "tcp"),
                other => {
                    return Err(SpecError::new(
                        ANN_BACKEND_PROTOCOL,
                        format!(
                            "{other:?} is not a backend protocol of classic load balancers (use http, https, ssl or tcp, in lower case)"
                        ),
                    ));
                }
            };
            (front, back, Some(cert.to_string()))
        }
        _ if backend == "http" => ("http", "http", None),
        _ => ("tcp", "tcp", None),
    };
    Ok(ClassicListener {
        load_balancer_port: port,
        protocol: protocol.to_string(),
        instance_port: node_port,
        instance_protocol: instance_protocol.to_string(),
        certificate,
    })
}

/// The health check: upstream's defaults (TCP on the first node port, or HTTP `/healthz` on the health-check
/// node port for `externalTrafficPolicy: Local`), then the healthcheck-* annotations.
fn health_check(
    service: &Service,
    listeners: &[ClassicListener],
    cluster_probe: &ClusterHealthProbe,
) -> Result<ClassicHealthCheck, SpecError> {
    let (mut protocol, mut port, mut path) =
        default_health_check(service, listeners, cluster_probe);
    if let Some(p) = annotation(service, ANN_HC_PROTOCOL) {
        protocol = p.to_string();
    }
    if let Some(p) = annotation(service, ANN_HC_PORT).filter(|p| *p != "traffic-port") {
        port = parse_int(ANN_HC_PORT, p, 1, 65535).map_err(|_| {
            SpecError::new(
                ANN_HC_PORT,
                format!("must be \"traffic-port\" or a port number from 1 to 65535, got {p:?}"),
            )
        })?;
    }
    let upper = protocol.to_ascii_uppercase();
    if !["TCP", "SSL", "HTTP", "HTTPS"].contains(&upper.as_str()) {
        return Err(SpecError::new(
            ANN_HC_PROTOCOL,
            format!("must be TCP, SSL, HTTP or HTTPS, got {protocol:?}"),
        ));
    }
    if upper == "HTTP" || upper == "HTTPS" {
        if path.is_empty() {
            path = "/".to_string();
        }
        if let Some(p) = non_empty(service, ANN_HC_PATH) {
            path = p.to_string();
        }
    } else {
        path.clear();
    }
    health_check_timing(service, format!("{protocol}:{port}{path}"))
}

/// Upstream's default protocol, port and path: HTTP `/healthz` on the health-check node port for
/// `externalTrafficPolicy: Local` (the first node port with the port annotation `traffic-port`), the shared
/// probe in `Shared` mode, else TCP (SSL for `https` and `ssl` backends) on the first node port.
fn default_health_check(
    service: &Service,
    listeners: &[ClassicListener],
    cluster_probe: &ClusterHealthProbe,
) -> (String, i32, String) {
    let first_node_port = listeners.first().map_or(0, |l| l.instance_port);
    let local_port = service
        .spec
        .as_ref()
        .filter(|s| s.external_traffic_policy.as_deref() == Some("Local"))
        .and_then(|s| s.health_check_node_port)
        .filter(|p| *p != 0);
    match (local_port, cluster_probe) {
        (Some(hc_port), _) => {
            let port = if annotation(service, ANN_HC_PORT) == Some("traffic-port") {
                first_node_port
            } else {
                hc_port
            };
            ("HTTP".to_string(), port, "/healthz".to_string())
        }
        (None, ClusterHealthProbe::Shared { port, path }) => {
            ("HTTP".to_string(), *port, path.clone())
        }
        (None, ClusterHealthProbe::ServiceNodePort) => {
            let backend = annotation(service, ANN_BACKEND_PROTOCOL)
                .unwrap_or_default()
                .to_ascii_lowercase();
            let protocol = if backend == "https" || backend == "ssl" {
                "SSL"
            } else {
                "TCP"
            };
            (protocol.to_string(), first_node_port, String::new())
        }
    }
}

/// The check on `target` with the threshold, interval and timeout annotations (AWS's ranges, and a timeout
/// below the interval).
fn health_check_timing(service: &Service, target: String) -> Result<ClassicHealthCheck, SpecError> {
    let threshold = |key: &str, default: i32, min: i32, max: i32| {
        annotation(service, key).map_or(Ok(default), |v| parse_int(key, v, min, max))
    };
    let check = ClassicHealthCheck {
        target,
        healthy_threshold: threshold(ANN_HC_HEALTHY, 2, 2, 10)?,
        unhealthy_threshold: threshold(ANN_HC_UNHEALTHY, 6, 2, 10)?,
        interval: threshold(ANN_HC_INTERVAL, 10, 5, 300)?,
        timeout: threshold(ANN_HC_TIMEOUT, 5, 2, 60)?,
    };
    if check.timeout >= check.interval {
        return Err(SpecError::new(
            ANN_HC_TIMEOUT,
            format!(
                "the health-check timeout ({}s) must be less than the interval ({}s, {ANN_HC_INTERVAL})",
                check.timeout, check.interval
            ),
        ));
    }
    Ok(check)
}

/// The attributes: upstream's defaults, then the annotations with a value.
fn attributes(service: &Service) -> Result<ClassicAttributes, SpecError> {
    let flag = |key: &str| non_empty(service, key).map_or(Ok(false), |v| parse_bool(key, v));
    let seconds = |key: &str, min: i32, max: i32| {
        non_empty(service, key)
            .map(|v| parse_int(key, v, min, max))
            .transpose()
    };
    let access_log_emit_interval = seconds(ANN_ACCESS_LOG_EMIT_INTERVAL, 5, 60)?;
    if let Some(minutes) = access_log_emit_interval
        && minutes != 5
        && minutes != 60
    {
        return Err(SpecError::new(
            ANN_ACCESS_LOG_EMIT_INTERVAL,
            format!("must be 5 or 60 (minutes), got {minutes}"),
        ));
    }
    let attributes = ClassicAttributes {
        access_log_enabled: flag(ANN_ACCESS_LOG_ENABLED)?,
        access_log_emit_interval,
        access_log_bucket: non_empty(service, ANN_ACCESS_LOG_BUCKET).map(str::to_string),
        access_log_prefix: non_empty(service, ANN_ACCESS_LOG_PREFIX).map(str::to_string),
        connection_draining_enabled: flag(ANN_CONNECTION_DRAINING_ENABLED)?,
        connection_draining_timeout: seconds(ANN_CONNECTION_DRAINING_TIMEOUT, 1, 3600)?,
        idle_timeout: seconds(ANN_CONNECTION_IDLE_TIMEOUT, 1, 4000)?.unwrap_or(60),
        cross_zone: flag(ANN_CROSS_ZONE)?,
    };
    if attributes.access_log_enabled && attributes.access_log_bucket.is_none() {
        return Err(SpecError::new(
            ANN_ACCESS_LOG_BUCKET,
            format!("is required when {ANN_ACCESS_LOG_ENABLED} is true"),
        ));
    }
    Ok(attributes)
}

/// The Service's ports: every port must be TCP (classic load balancers), of one protocol.
fn check_ports(service: &Service) -> Result<(), SpecError> {
    let spec = service.spec.clone().unwrap_or_default();
    if let Some(affinity) = spec.session_affinity.as_deref()
        && affinity != "None"
    {
        return Err(SpecError::new(
            "spec.sessionAffinity",
            format!("unsupported load balancer affinity: {affinity}"),
        ));
    }
    let ports = spec.ports.unwrap_or_default();
    if ports.is_empty() {
        return Err(SpecError::new(
            "spec.ports",
            "requested load balancer with no ports",
        ));
    }
    let protocol = |p: &k8s_openapi::api::core::v1::ServicePort| {
        p.protocol.clone().unwrap_or_else(|| "TCP".to_string())
    };
    if ports.iter().any(|p| protocol(p) != protocol(&ports[0])) {
        return Err(SpecError::new(
            "spec.ports",
            "mixed protocol is not supported for LoadBalancer",
        ));
    }
    if let Some(p) = ports.iter().find(|p| protocol(p) != "TCP") {
        return Err(SpecError::new(
            "spec.ports",
            format!(
                "Protocol {} not supported by LoadBalancer (classic load balancers carry TCP only; use the {} annotation \"nlb\" for UDP)",
                protocol(p),
                crate::load_balancer::spec::ANN_TYPE
            ),
        ));
    }
    if spec
        .load_balancer_ip
        .as_deref()
        .is_some_and(|ip| !ip.is_empty())
    {
        return Err(SpecError::new(
            "spec.loadBalancerIP",
            "LoadBalancerIP cannot be specified for AWS ELB",
        ));
    }
    if annotation(service, ANN_TARGET_GROUP_ATTRIBUTES).is_some() {
        return Err(SpecError::new(
            ANN_TARGET_GROUP_ATTRIBUTES,
            "target group attributes annotation is only supported for NLB",
        ));
    }
    Ok(())
}

/// The listeners (ports with a node port) and every Service port.
fn listeners_and_ports(service: &Service) -> Result<(Vec<ClassicListener>, Vec<i32>), SpecError> {
    let ssl = ssl_ports(service);
    let mut listeners = Vec::new();
    let mut ports = Vec::new();
    for p in service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .into_iter()
        .flatten()
    {
        ports.push(p.port);
        // A port without a node port yet gets no listener (upstream skips it).
        if let Some(node_port) = p.node_port.filter(|n| *n != 0) {
            listeners.push(listener(
                service,
                p.port,
                p.name.as_deref().unwrap_or_default(),
                node_port,
                &ssl,
            )?);
        }
    }
    Ok((listeners, ports))
}

/// The proxy-protocol annotation: `*` or nothing.
fn proxy_protocol(service: &Service) -> Result<bool, SpecError> {
    match non_empty(service, ANN_PROXY_PROTOCOL) {
        None => Ok(false),
        Some("*") => Ok(true),
        Some(other) => Err(SpecError::new(
            ANN_PROXY_PROTOCOL,
            format!("{other:?} detected, but the only value supported currently is '*'"),
        )),
    }
}

/// The subnets annotation: IDs or Name tags, at least one when present.
fn subnets(service: &Service) -> Result<Option<Vec<String>>, SpecError> {
    let Some(v) = annotation(service, ANN_SUBNETS) else {
        return Ok(None);
    };
    let list = comma_list_skipping_empty(v);
    if list.is_empty() {
        return Err(SpecError::new(ANN_SUBNETS, "lists no subnet"));
    }
    Ok(Some(list))
}

/// Parses and validates a Service whose load balancer is a classic ELB.
pub fn parse(
    service: &Service,
    cluster_probe: &ClusterHealthProbe,
) -> Result<ClassicSpec, SpecError> {
    check_ports(service)?;
    let (listeners, ports) = listeners_and_ports(service)?;
    let proxy_protocol = proxy_protocol(service)?;
    let subnets = subnets(service)?;
    let (security_groups, extra_security_groups) = annotated_security_groups(service);
    let pairs = |key| {
        annotation(service, key)
            .map(key_value_pairs)
            .unwrap_or_default()
    };
    let (namespace, name) = namespace_and_name(service);
    Ok(ClassicSpec {
        namespace,
        name,
        internal: annotation(service, ANN_INTERNAL).is_some_and(|v| !v.is_empty() && v != "false"),
        subnets,
        health_check: health_check(service, &listeners, cluster_probe)?,
        listeners,
        ports,
        attributes: attributes(service)?,
        proxy_protocol,
        ssl_negotiation_policy: annotation(service, ANN_SSL_NEGOTIATION_POLICY).map(str::to_string),
        security_groups,
        extra_security_groups,
        additional_tags: pairs(ANN_ADDITIONAL_TAGS),
        target_node_labels: pairs(ANN_TARGET_NODE_LABELS),
        source_ranges: source_ranges(service)?
            .unwrap_or_else(|| vec![IpNet::V4(ipnet::Ipv4Net::default())]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load_balancer::spec::ANN_SECURITY_GROUPS;
    use k8s_openapi::api::core::v1::{ServicePort, ServiceSpec};

    const CERT: &str = "arn:aws:acm:us-east-1:1:certificate/x";

    fn service(annotations: &[(&str, &str)]) -> Service {
        let mut s = Service::default();
        s.metadata.name = Some("web".into());
        s.metadata.namespace = Some("shop".into());
        s.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        let port = |name: &str, port: i32, node_port: i32| ServicePort {
            name: Some(name.into()),
            port,
            protocol: Some("TCP".into()),
            node_port: Some(node_port),
            ..Default::default()
        };
        s.spec = Some(ServiceSpec {
            type_: Some("LoadBalancer".into()),
            ports: Some(vec![port("http", 80, 30080), port("HTTPS", 443, 30443)]),
            ..Default::default()
        });
        s
    }

    fn parse_default(annotations: &[(&str, &str)]) -> Result<ClassicSpec, SpecError> {
        parse(&service(annotations), &ClusterHealthProbe::ServiceNodePort)
    }

    fn listener(
        port: i32,
        protocol: &str,
        node_port: i32,
        instance: &str,
        cert: bool,
    ) -> ClassicListener {
        ClassicListener {
            load_balancer_port: port,
            protocol: protocol.into(),
            instance_port: node_port,
            instance_protocol: instance.into(),
            certificate: cert.then(|| CERT.to_string()),
        }
    }

    #[test]
    fn upstream_defaults() {
        let spec = parse_default(&[]).unwrap();
        assert_eq!(spec.service_name(), "shop/web");
        assert!(!spec.internal);
        assert_eq!(
            spec.listeners,
            vec![
                listener(80, "tcp", 30080, "tcp", false),
                listener(443, "tcp", 30443, "tcp", false)
            ]
        );
        assert_eq!(
            spec.health_check,
            ClassicHealthCheck {
                target: "TCP:30080".into(),
                healthy_threshold: 2,
                unhealthy_threshold: 6,
                interval: 10,
                timeout: 5,
            }
        );
        assert_eq!(
            spec.attributes,
            ClassicAttributes {
                access_log_enabled: false,
                access_log_emit_interval: None,
                access_log_bucket: None,
                access_log_prefix: None,
                connection_draining_enabled: false,
                connection_draining_timeout: None,
                idle_timeout: 60,
                cross_zone: false,
            }
        );
        assert_eq!(
            spec.source_ranges,
            vec!["0.0.0.0/0".parse::<IpNet>().unwrap()]
        );
        assert_eq!(spec.ports, vec![80, 443]);
        assert!(!spec.proxy_protocol);
        assert_eq!(spec.ssl_negotiation_policy, None);
    }

    /// Listeners from certificates, ssl-ports and backend protocol, by upstream's table.
    #[test]
    fn listeners_by_upstream_rules() {
        let cert = (ANN_SSL_CERT, CERT);
        let spec = parse_default(&[cert]).unwrap();
        assert_eq!(spec.listeners[0], listener(80, "ssl", 30080, "tcp", true));
        for (backend, front, back) in [
            ("https", "https", "https"),
            ("http", "https", "http"),
            ("ssl", "ssl", "ssl"),
            ("tcp", "ssl", "tcp"),
        ] {
            let spec = parse_default(&[cert, (ANN_BACKEND_PROTOCOL, backend)]).unwrap();
            assert_eq!(
                spec.listeners[1],
                listener(443, front, 30443, back, true),
                "{backend}"
            );
        }
        // ssl-ports by number or lower-cased port name, items not trimmed (as upstream).
        let spec = parse_default(&[cert, (ANN_SSL_PORTS, "https")]).unwrap();
        assert!(!spec.listeners[0].is_tls());
        assert!(spec.listeners[1].is_tls());
        let spec = parse_default(&[cert, (ANN_SSL_PORTS, "80, 443")]).unwrap();
        assert!(spec.listeners[0].is_tls());
        assert!(
            !spec.listeners[1].is_tls(),
            "\" 443\" is a name matching no port"
        );
        // Without a certificate: http backends get HTTP listeners, others TCP.
        let spec = parse_default(&[(ANN_BACKEND_PROTOCOL, "http")]).unwrap();
        assert_eq!(
            spec.listeners[0],
            listener(80, "http", 30080, "http", false)
        );
        let spec = parse_default(&[(ANN_BACKEND_PROTOCOL, "https")]).unwrap();
        assert_eq!(spec.listeners[0], listener(80, "tcp", 30080, "tcp", false));
        assert_eq!(spec.health_check.target, "SSL:30080");
        assert_eq!(
            parse_default(&[cert, (ANN_BACKEND_PROTOCOL, "HTTP")])
                .unwrap_err()
                .subject,
            ANN_BACKEND_PROTOCOL
        );
    }

    #[test]
    fn listener_equality_ignores_case() {
        let a = listener(443, "ssl", 30443, "tcp", true);
        let mut b = listener(443, "SSL", 30443, "TCP", true);
        assert!(a.same_as(&b));
        b.certificate = Some(CERT.to_uppercase());
        assert!(a.same_as(&b));
        b.certificate = None;
        assert!(!a.same_as(&b));
        assert!(!a.same_as(&listener(443, "ssl", 30444, "tcp", true)));
    }

    #[test]
    fn health_checks() {
        let mut local = service(&[]);
        let spec = local.spec.as_mut().unwrap();
        spec.external_traffic_policy = Some("Local".into());
        spec.health_check_node_port = Some(32000);
        let probe = ClusterHealthProbe::ServiceNodePort;
        assert_eq!(
            parse(&local, &probe).unwrap().health_check.target,
            "HTTP:32000/healthz"
        );
        local
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(ANN_HC_PORT.into(), "traffic-port".into());
        assert_eq!(
            parse(&local, &probe).unwrap().health_check.target,
            "HTTP:30080/healthz"
        );

        let shared = ClusterHealthProbe::Shared {
            port: 10256,
            path: "/healthz".into(),
        };
        assert_eq!(
            parse(&service(&[]), &shared).unwrap().health_check.target,
            "HTTP:10256/healthz"
        );
        let spec = parse_default(&[
            (ANN_HC_PROTOCOL, "HTTPS"),
            (ANN_HC_PORT, "8443"),
            (ANN_HC_PATH, "/ready"),
            (ANN_HC_HEALTHY, "3"),
            (ANN_HC_UNHEALTHY, "4"),
            (ANN_HC_INTERVAL, "30"),
            (ANN_HC_TIMEOUT, "6"),
        ])
        .unwrap();
        assert_eq!(
            spec.health_check,
            ClassicHealthCheck {
                target: "HTTPS:8443/ready".into(),
                healthy_threshold: 3,
                unhealthy_threshold: 4,
                interval: 30,
                timeout: 6,
            }
        );
        // A path on a TCP check is not used; HTTP without a path checks "/".
        assert_eq!(
            parse_default(&[(ANN_HC_PATH, "/x")])
                .unwrap()
                .health_check
                .target,
            "TCP:30080"
        );
        assert_eq!(
            parse_default(&[(ANN_HC_PROTOCOL, "HTTP")])
                .unwrap()
                .health_check
                .target,
            "HTTP:30080/"
        );
        assert_eq!(
            parse_default(&[(ANN_HC_TIMEOUT, "10")])
                .unwrap_err()
                .subject,
            ANN_HC_TIMEOUT
        );
    }

    #[test]
    fn attributes_and_flags() {
        let spec = parse_default(&[
            (ANN_ACCESS_LOG_ENABLED, "T"),
            (ANN_ACCESS_LOG_BUCKET, "logs"),
            (ANN_ACCESS_LOG_PREFIX, "web"),
            (ANN_ACCESS_LOG_EMIT_INTERVAL, "5"),
            (ANN_CONNECTION_DRAINING_ENABLED, "1"),
            (ANN_CONNECTION_DRAINING_TIMEOUT, "30"),
            (ANN_CONNECTION_IDLE_TIMEOUT, ""),
            (ANN_CROSS_ZONE, "True"),
            (ANN_PROXY_PROTOCOL, "*"),
            (ANN_INTERNAL, "yes"),
            (ANN_SSL_NEGOTIATION_POLICY, ""),
            (ANN_SECURITY_GROUPS, "sg-1, ,sg-2"),
            (ANN_EXTRA_SECURITY_GROUPS, "sg-3"),
            (ANN_ADDITIONAL_TAGS, " a=1=2, b ,=c"),
            (ANN_TARGET_NODE_LABELS, "role=lb,edge"),
        ])
        .unwrap();
        let a = &spec.attributes;
        assert!(a.access_log_enabled && a.connection_draining_enabled && a.cross_zone);
        assert_eq!(a.access_log_bucket.as_deref(), Some("logs"));
        assert_eq!(a.access_log_emit_interval, Some(5));
        assert_eq!(a.connection_draining_timeout, Some(30));
        assert_eq!(a.idle_timeout, 60, "an empty value is the default");
        assert!(spec.proxy_protocol);
        assert!(spec.internal, "any value but \"false\" is internal");
        assert_eq!(spec.ssl_negotiation_policy.as_deref(), Some(""));
        assert_eq!(spec.security_groups, ["sg-1", "sg-2"]);
        assert_eq!(spec.extra_security_groups, ["sg-3"]);
        assert_eq!(
            spec.additional_tags,
            BTreeMap::from([("a".into(), "1".into()), ("b".into(), "".into())])
        );
        assert_eq!(
            spec.target_node_labels,
            BTreeMap::from([("edge".into(), "".into()), ("role".into(), "lb".into())])
        );
        assert!(!parse_default(&[(ANN_INTERNAL, "false")]).unwrap().internal);
    }

    #[test]
    fn preflight_errors_name_their_subject() {
        let mut affinity = service(&[]);
        affinity.spec.as_mut().unwrap().session_affinity = Some("ClientIP".into());
        let mut udp = service(&[]);
        for p in udp.spec.as_mut().unwrap().ports.as_mut().unwrap() {
            p.protocol = Some("UDP".into());
        }
        let mut ip = service(&[]);
        ip.spec.as_mut().unwrap().load_balancer_ip = Some("1.2.3.4".into());
        let probe = ClusterHealthProbe::ServiceNodePort;
        assert_eq!(
            parse(&affinity, &probe).unwrap_err().subject,
            "spec.sessionAffinity"
        );
        assert_eq!(parse(&udp, &probe).unwrap_err().subject, "spec.ports");
        assert_eq!(
            parse(&ip, &probe).unwrap_err().subject,
            "spec.loadBalancerIP"
        );
        // A port without a node port yet gets no listener; its Service port is still admitted.
        let mut pending = service(&[]);
        pending.spec.as_mut().unwrap().ports.as_mut().unwrap()[1].node_port = None;
        let spec = parse(&pending, &probe).unwrap();
        assert_eq!(spec.listeners.len(), 1);
        assert_eq!(spec.ports, vec![80, 443]);
    }
}
