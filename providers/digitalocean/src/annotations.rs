//! Service annotations of DigitalOcean load balancers, read exactly as the upstream DigitalOcean
//! cloud-controller-manager (v0.1.68) reads them.
//!
//! The reading rules are upstream's, so that a Service means the same load balancer to both controllers:
//! - Values are used as written: no trimming and case-sensitive enumerations (`REGIONAL`, `tcp`, ...),
//!   except where noted (`hostname` is lowercased; `ip` and `subnet-uuid` are trimmed).
//! - Booleans are Go's `strconv.ParseBool`: `1`, `t`, `T`, `TRUE`, `true`, `True`, `0`, `f`, `F`,
//!   `FALSE`, `false`, `False`. Anything else, the empty string included, is an error, except for
//!   `tls-passthrough`, which upstream reads as false when it does not parse.
//! - Integers are Go's `strconv.Atoi` (an optional sign and decimal digits); ranges are left to the API,
//!   which refuses out-of-range values, as upstream does.
//! - Most enumerations fall back to their default when absent or empty; `protocol` and
//!   `healthcheck-protocol` present with an unknown value are errors, `sticky-sessions-type` and
//!   `algorithm` silently fall back to `none` and `round_robin`.
//!
//! What the values mean for the load balancer (forwarding rules, health check, network stack, ...) is
//! computed in [`crate::lb_spec`]. Errors name the annotation (or spec field) at fault; the service
//! controller reports them as Warning events on the Service.

use std::collections::BTreeMap;

use cloud_provider::annotations::comma_list_keeping_empty;
use k8s_openapi::api::core::v1::Service;

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
/// The certificate (UUID) terminating TLS; wins over `certificate-name`.
pub const ANN_CERTIFICATE_ID: &str = "service.beta.kubernetes.io/do-loadbalancer-certificate-id";
/// The certificate (by name) terminating TLS; survives Let's Encrypt renewals.
pub const ANN_CERTIFICATE_NAME: &str =
    "service.beta.kubernetes.io/do-loadbalancer-certificate-name";
/// A hostname reported in the Service status instead of the IP addresses.
pub const ANN_HOSTNAME: &str = "service.beta.kubernetes.io/do-loadbalancer-hostname";
/// Deprecated balancing algorithm (`round_robin` or `least_connections`); the API ignores it.
pub const ANN_ALGORITHM: &str = "service.beta.kubernetes.io/do-loadbalancer-algorithm";
/// `lb-small`, `lb-medium` or `lb-large` (deprecated sizing).
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
/// HTTP idle timeout in seconds.
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
/// A reserved (BYOIP) address to create the load balancer with (ignored after creation).
pub const ANN_IP: &str = "service.beta.kubernetes.io/do-loadbalancer-ip";
/// The VPC subnet to place the load balancer in.
pub const ANN_SUBNET_UUID: &str = "service.beta.kubernetes.io/do-loadbalancer-subnet-uuid";
/// Present (with any value): use the `healthcheck-*` port, protocol and path instead of the defaults.
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
/// Seconds between health checks (default 3).
pub const ANN_HEALTH_CHECK_INTERVAL_SECONDS: &str =
    "service.beta.kubernetes.io/do-loadbalancer-healthcheck-check-interval-seconds";
/// Seconds to wait for a health-check answer (default 5).
pub const ANN_HEALTH_CHECK_RESPONSE_TIMEOUT_SECONDS: &str =
    "service.beta.kubernetes.io/do-loadbalancer-healthcheck-response-timeout-seconds";
/// Failed checks before a droplet is taken out (default 3).
pub const ANN_HEALTH_CHECK_UNHEALTHY_THRESHOLD: &str =
    "service.beta.kubernetes.io/do-loadbalancer-healthcheck-unhealthy-threshold";
/// Passed checks before a droplet is put back (default 5).
pub const ANN_HEALTH_CHECK_HEALTHY_THRESHOLD: &str =
    "service.beta.kubernetes.io/do-loadbalancer-healthcheck-healthy-threshold";

/// A Service whose load-balancer configuration cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid load balancer configuration: {field}: {message}")]
pub struct ServiceConfigError {
    /// The annotation or spec field at fault.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

/// A [`ServiceConfigError`] for `field`.
pub(crate) fn invalid(field: impl Into<String>, message: impl Into<String>) -> ServiceConfigError {
    ServiceConfigError {
        field: field.into(),
        message: message.into(),
    }
}

/// Go's `strconv` readings of booleans and integers, shared with the other providers.
pub use cloud_provider::annotations::{parse_go_bool, parse_go_int, parse_go_uint};

/// A Service's annotations, read the way upstream reads them (Go map lookups, values as written).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Annotations<'a>(Option<&'a BTreeMap<String, String>>);

impl<'a> Annotations<'a> {
    /// The annotations of `service`.
    pub(crate) fn of(service: &'a Service) -> Self {
        Annotations(service.metadata.annotations.as_ref())
    }

    /// The value when the annotation is present (possibly empty).
    pub(crate) fn raw(&self, key: &str) -> Option<&'a str> {
        self.0.and_then(|m| m.get(key)).map(String::as_str)
    }

    /// The value when present and not empty.
    pub(crate) fn non_empty(&self, key: &str) -> Option<&'a str> {
        self.raw(key).filter(|v| !v.is_empty())
    }

    /// Upstream's `getBool`: absent is false; present must parse as a Go boolean.
    pub(crate) fn bool(&self, key: &str) -> Result<bool, ServiceConfigError> {
        match self.raw(key) {
            None => Ok(false),
            Some(v) => parse_go_bool(v).ok_or_else(|| {
                invalid(
                    key,
                    format!(
                        "{v:?} is not a boolean (1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False)"
                    ),
                )
            }),
        }
    }

    /// An integer annotation (Go's `Atoi`), `default` when absent; present and empty is an error.
    pub(crate) fn int(&self, key: &str, default: i64) -> Result<i64, ServiceConfigError> {
        match self.raw(key) {
            None => Ok(default),
            Some(v) => parse_go_int(v).ok_or_else(|| not_an_integer(key, v)),
        }
    }

    /// Upstream's `getPorts`: absent is no port; present is split at commas and every piece must be an
    /// integer as written (`"80, 443"` and `""` are errors).
    pub(crate) fn ports(&self, key: &str) -> Result<Vec<i64>, ServiceConfigError> {
        let Some(raw) = self.raw(key) else {
            return Ok(Vec::new());
        };
        raw.split(',')
            .map(|piece| parse_go_int(piece).ok_or_else(|| not_an_integer(key, piece)))
            .collect()
    }

    /// Upstream's `getStrings`: absent or empty is no value; else the comma-separated pieces, each
    /// trimmed (empty pieces kept).
    pub(crate) fn strings(&self, key: &str) -> Vec<String> {
        match self.non_empty(key) {
            None => Vec::new(),
            Some(raw) => comma_list_keeping_empty(raw),
        }
    }
}

fn not_an_integer(key: &str, value: &str) -> ServiceConfigError {
    invalid(key, format!("{value:?} is not an integer"))
}

/// `namespace/name` of a Service, for messages and logs.
pub(crate) fn service_key(service: &Service) -> String {
    format!(
        "{}/{}",
        service.metadata.namespace.as_deref().unwrap_or("default"),
        service.metadata.name.as_deref().unwrap_or("")
    )
}

/// The load-balancer name: the `name` annotation when set (not empty), else the default name `a` + the
/// Service UID. The API validates custom names.
pub fn load_balancer_name(service: &Service) -> String {
    match Annotations::of(service).non_empty(ANN_NAME) {
        Some(name) => name.to_string(),
        None => legacy_load_balancer_name(service),
    }
}

/// The default name (`a` + the Service UID without dashes, 32 characters): what the load balancer was
/// called before a custom name was set; looked up too, so that setting the annotation renames it.
pub fn legacy_load_balancer_name(service: &Service) -> String {
    cloud_provider::default_load_balancer_name(service)
}

/// The names a Service's load balancer may have, in lookup order: the custom name, then the default one.
pub fn load_balancer_name_candidates(service: &Service) -> Vec<String> {
    let name = load_balancer_name(service);
    let legacy = legacy_load_balancer_name(service);
    if name == legacy {
        vec![name]
    } else {
        vec![name, legacy]
    }
}

/// The load-balancer UUID annotation, when set (not empty).
pub fn load_balancer_id(service: &Service) -> Option<String> {
    Annotations::of(service)
        .non_empty(ANN_LOAD_BALANCER_ID)
        .map(str::to_string)
}

/// Whether the Service disowned its load balancer.
pub fn is_disowned(service: &Service) -> Result<bool, ServiceConfigError> {
    Annotations::of(service).bool(ANN_DISOWN)
}

/// Upstream's `getType` on a type value: empty is `default`; else exactly `REGIONAL` or
/// `REGIONAL_NETWORK`.
pub fn parse_lb_type(value: &str, default: LbType) -> Result<LbType, ServiceConfigError> {
    match value {
        "" => Ok(default),
        "REGIONAL" => Ok(LbType::Regional),
        "REGIONAL_NETWORK" => Ok(LbType::RegionalNetwork),
        other => Err(invalid(
            ANN_TYPE,
            format!("{other:?} is not a supported type (REGIONAL, REGIONAL_NETWORK)"),
        )),
    }
}

/// The type the Service asks for: the `type` annotation, else `default`.
pub fn lb_type(service: &Service, default: LbType) -> Result<LbType, ServiceConfigError> {
    parse_lb_type(
        Annotations::of(service).raw(ANN_TYPE).unwrap_or_default(),
        default,
    )
}

/// `EXTERNAL`: reachable from the internet.
pub const NETWORK_EXTERNAL: &str = "EXTERNAL";
/// `INTERNAL`: reachable from the VPC only.
pub const NETWORK_INTERNAL: &str = "INTERNAL";
/// `IPV4`: IPv4 only.
pub const NETWORK_STACK_IPV4: &str = "IPV4";
/// `DUALSTACK`: IPv4 and IPv6.
pub const NETWORK_STACK_DUALSTACK: &str = "DUALSTACK";

/// The network: the `network` annotation (exactly `EXTERNAL` or `INTERNAL`), else `EXTERNAL`.
pub fn network(service: &Service) -> Result<&'static str, ServiceConfigError> {
    match Annotations::of(service)
        .raw(ANN_NETWORK)
        .unwrap_or_default()
    {
        "" | NETWORK_EXTERNAL => Ok(NETWORK_EXTERNAL),
        NETWORK_INTERNAL => Ok(NETWORK_INTERNAL),
        other => Err(invalid(
            ANN_NETWORK,
            format!("{other:?} is not a supported network (EXTERNAL, INTERNAL)"),
        )),
    }
}

/// The `network-stack` annotation, when set (not empty); validated with the nodes in
/// [`crate::lb_spec`].
pub fn network_stack_annotation(service: &Service) -> Option<&str> {
    Annotations::of(service).non_empty(ANN_NETWORK_STACK)
}

/// The hostname annotation, lowercased, when set (not empty).
pub fn hostname(service: &Service) -> Option<String> {
    Annotations::of(service)
        .non_empty(ANN_HOSTNAME)
        .map(str::to_lowercase)
}

/// The `certificate-id` annotation, when set (not empty).
pub fn certificate_id(service: &Service) -> Option<&str> {
    Annotations::of(service).non_empty(ANN_CERTIFICATE_ID)
}

/// The `certificate-name` annotation, when set (not empty); used only without a `certificate-id`.
pub fn certificate_name(service: &Service) -> Option<&str> {
    Annotations::of(service).non_empty(ANN_CERTIFICATE_NAME)
}

/// The `ip` annotation (trimmed), when set: a reserved address for the creation only.
pub fn reserved_ip(service: &Service) -> Option<String> {
    Annotations::of(service)
        .raw(ANN_IP)
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_string)
}

/// The `subnet-uuid` annotation (trimmed), when set.
pub fn subnet_uuid(service: &Service) -> Option<String> {
    Annotations::of(service)
        .raw(ANN_SUBNET_UUID)
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc(annotations: &[(&str, &str)]) -> Service {
        let mut s = Service::default();
        s.metadata.uid = Some("6f0c2b4e-1a2b-4c3d-9e8f-0123456789ab".into());
        s.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        s
    }

    #[test]
    fn go_booleans() {
        for v in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(parse_go_bool(v), Some(true), "{v}");
        }
        for v in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(parse_go_bool(v), Some(false), "{v}");
        }
        for v in ["", "yes", "tRUE", "fALSE", " true", "true ", "2"] {
            assert_eq!(parse_go_bool(v), None, "{v:?}");
        }
        let a = svc(&[(ANN_DISOWN, "")]);
        assert_eq!(is_disowned(&a).unwrap_err().field, ANN_DISOWN);
        assert!(!is_disowned(&svc(&[])).unwrap());
        assert!(is_disowned(&svc(&[(ANN_DISOWN, "T")])).unwrap());
        assert_eq!(
            is_disowned(&svc(&[(ANN_DISOWN, "yes")])).unwrap_err().field,
            ANN_DISOWN
        );
    }

    #[test]
    fn go_integers() {
        assert_eq!(parse_go_int("007"), Some(7));
        assert_eq!(parse_go_int("1_000"), None);
        assert_eq!(parse_go_int("9223372036854775808"), None);
        assert_eq!(parse_go_uint("-1"), None);
        assert_eq!(parse_go_uint(""), None);
        let s = svc(&[(ANN_HTTP_PORTS, "80,8080"), (ANN_TLS_PORTS, "80, 443")]);
        let a = Annotations::of(&s);
        assert_eq!(a.ports(ANN_HTTP_PORTS).unwrap(), vec![80, 8080]);
        assert_eq!(a.ports(ANN_TLS_PORTS).unwrap_err().field, ANN_TLS_PORTS);
        assert_eq!(a.ports(ANN_HTTP2_PORTS).unwrap(), Vec::<i64>::new());
        let s = svc(&[(ANN_HTTP2_PORTS, "")]);
        assert!(Annotations::of(&s).ports(ANN_HTTP2_PORTS).is_err());
        assert_eq!(Annotations::of(&s).int(ANN_SIZE_UNIT, 9).unwrap(), 9);
    }

    #[test]
    fn strings_are_split_and_trimmed_but_kept() {
        let s = svc(&[
            (ANN_ALLOW_RULES, " ip:1.2.3.4 ,cidr:10.0.0.0/8,"),
            (ANN_DENY_RULES, ""),
        ]);
        let a = Annotations::of(&s);
        assert_eq!(
            a.strings(ANN_ALLOW_RULES),
            vec!["ip:1.2.3.4", "cidr:10.0.0.0/8", ""]
        );
        assert!(a.strings(ANN_DENY_RULES).is_empty());
        assert!(a.strings(ANN_NAME).is_empty());
    }

    #[test]
    fn names_and_candidates() {
        assert_eq!(
            load_balancer_name(&svc(&[])),
            "a6f0c2b4e1a2b4c3d9e8f0123456789a"
        );
        assert_eq!(
            load_balancer_name_candidates(&svc(&[])),
            vec!["a6f0c2b4e1a2b4c3d9e8f0123456789a"]
        );
        // An empty name annotation is no name; any other value is used as written (the API validates it).
        assert_eq!(
            load_balancer_name(&svc(&[(ANN_NAME, "")])),
            "a6f0c2b4e1a2b4c3d9e8f0123456789a"
        );
        assert_eq!(
            load_balancer_name(&svc(&[(ANN_NAME, " My LB ")])),
            " My LB "
        );
        assert_eq!(
            load_balancer_name_candidates(&svc(&[(ANN_NAME, "web")])),
            vec!["web", "a6f0c2b4e1a2b4c3d9e8f0123456789a"]
        );
    }

    #[test]
    fn type_and_network_are_exact() {
        let rn = LbType::RegionalNetwork;
        assert_eq!(lb_type(&svc(&[]), rn).unwrap(), rn);
        assert_eq!(lb_type(&svc(&[(ANN_TYPE, "")]), rn).unwrap(), rn);
        assert_eq!(
            lb_type(&svc(&[(ANN_TYPE, "REGIONAL")]), rn).unwrap(),
            LbType::Regional
        );
        for bad in ["regional", "GLOBAL", " REGIONAL"] {
            assert_eq!(
                lb_type(&svc(&[(ANN_TYPE, bad)]), rn).unwrap_err().field,
                ANN_TYPE
            );
        }
        assert_eq!(network(&svc(&[])).unwrap(), "EXTERNAL");
        assert_eq!(network(&svc(&[(ANN_NETWORK, "")])).unwrap(), "EXTERNAL");
        assert_eq!(
            network(&svc(&[(ANN_NETWORK, "INTERNAL")])).unwrap(),
            "INTERNAL"
        );
        assert_eq!(
            network(&svc(&[(ANN_NETWORK, "internal")]))
                .unwrap_err()
                .field,
            ANN_NETWORK
        );
    }

    #[test]
    fn ids_hostnames_certificates_ip_and_subnet() {
        assert_eq!(
            load_balancer_id(&svc(&[(ANN_LOAD_BALANCER_ID, "abc")])).as_deref(),
            Some("abc")
        );
        assert_eq!(load_balancer_id(&svc(&[(ANN_LOAD_BALANCER_ID, "")])), None);
        assert_eq!(
            hostname(&svc(&[(ANN_HOSTNAME, "LB.Example.com")])).as_deref(),
            Some("lb.example.com")
        );
        assert_eq!(hostname(&svc(&[(ANN_HOSTNAME, "")])), None);
        let both = svc(&[(ANN_CERTIFICATE_ID, "id-1"), (ANN_CERTIFICATE_NAME, "n")]);
        assert_eq!(certificate_id(&both), Some("id-1"));
        assert_eq!(certificate_name(&both), Some("n"));
        assert_eq!(
            reserved_ip(&svc(&[(ANN_IP, " 203.0.113.9 ")])).as_deref(),
            Some("203.0.113.9")
        );
        assert_eq!(reserved_ip(&svc(&[(ANN_IP, " ")])), None);
        assert_eq!(
            subnet_uuid(&svc(&[(ANN_SUBNET_UUID, "s-1\n")])).as_deref(),
            Some("s-1")
        );
        assert_eq!(
            network_stack_annotation(&svc(&[(ANN_NETWORK_STACK, "DUALSTACK")])),
            Some("DUALSTACK")
        );
    }

    #[test]
    fn error_message_names_the_field() {
        let err = lb_type(&svc(&[(ANN_TYPE, "GLOBAL")]), LbType::Regional).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "invalid load balancer configuration: {ANN_TYPE}: \"GLOBAL\" is not a supported type (REGIONAL, REGIONAL_NETWORK)"
            )
        );
    }
}
