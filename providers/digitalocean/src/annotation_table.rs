//! Every Service annotation the DigitalOcean provider reads, as one table: the README's annotation table
//! is checked against it and the `do_annotations` fuzz target takes its keys from it.
//!
//! Rows are in name order (the fuzz corpus selects keys by their index in this table).

use cloud_provider::annotations::{AllKinds, Annotation, ValueType};

use crate::annotations::*;
use crate::firewall::rules::ANN_FIREWALL_MANAGED;

const fn row(
    name: &'static str,
    value: ValueType,
    default: Option<&'static str>,
    doc: &'static str,
) -> Annotation<AllKinds> {
    Annotation {
        name,
        value,
        applies_to: AllKinds,
        default,
        doc,
    }
}

const BOOL: ValueType = ValueType::GoBool;
const INT: ValueType = ValueType::Integer;
const TEXT: ValueType = ValueType::Text;
const LIST: ValueType = ValueType::List;

/// The annotations the provider reads, in name order.
pub const ANNOTATIONS: &[Annotation<AllKinds>] = &[
    row(
        ANN_FIREWALL_MANAGED,
        BOOL,
        Some("true"),
        "`false`: the public-access firewall leaves a NodePort Service's ports alone",
    ),
    row(
        ANN_LOAD_BALANCER_ID,
        TEXT,
        None,
        "the load balancer's UUID, written back; pre-set to adopt one",
    ),
    row(
        ANN_ALGORITHM,
        ValueType::OneOf(&["round_robin", "least_connections"]),
        Some("round_robin"),
        "deprecated balancing algorithm, ignored by the API",
    ),
    row(
        ANN_ALLOW_RULES,
        LIST,
        None,
        "firewall allow rules (`ip:<address>`, `cidr:<network>`)",
    ),
    row(
        ANN_CERTIFICATE_ID,
        TEXT,
        None,
        "the certificate (UUID) terminating TLS",
    ),
    row(
        ANN_CERTIFICATE_NAME,
        TEXT,
        None,
        "the certificate (by name) terminating TLS",
    ),
    row(
        ANN_DENY_RULES,
        LIST,
        None,
        "firewall deny rules (`ip:<address>`, `cidr:<network>`)",
    ),
    row(
        ANN_DISABLE_LETS_ENCRYPT_DNS_RECORDS,
        BOOL,
        Some("false"),
        "no DNS records for Let's Encrypt certificates",
    ),
    row(
        ANN_ENABLE_BACKEND_KEEPALIVE,
        BOOL,
        Some("false"),
        "keep HTTP connections to droplets alive",
    ),
    row(
        ANN_ENABLE_PROXY_PROTOCOL,
        BOOL,
        Some("false"),
        "send the PROXY protocol header",
    ),
    row(
        ANN_HEALTH_CHECK_INTERVAL_SECONDS,
        INT,
        Some("3"),
        "seconds between health checks",
    ),
    row(
        ANN_HEALTH_CHECK_HEALTHY_THRESHOLD,
        INT,
        Some("5"),
        "passed checks before a droplet is put back",
    ),
    row(
        ANN_HEALTH_CHECK_PATH,
        TEXT,
        None,
        "the health-check path (with the override)",
    ),
    row(
        ANN_HEALTH_CHECK_PORT,
        INT,
        None,
        "the service port whose node port is checked (with the override)",
    ),
    row(
        ANN_HEALTH_CHECK_PROTOCOL,
        ValueType::OneOf(&["tcp", "http", "https"]),
        None,
        "the health-check protocol (with the override)",
    ),
    row(
        ANN_HEALTH_CHECK_RESPONSE_TIMEOUT_SECONDS,
        INT,
        Some("5"),
        "seconds to wait for a health-check answer",
    ),
    row(
        ANN_HEALTH_CHECK_UNHEALTHY_THRESHOLD,
        INT,
        Some("3"),
        "failed checks before a droplet is taken out",
    ),
    row(
        ANN_HOSTNAME,
        TEXT,
        None,
        "a hostname reported in the Service status instead of the addresses",
    ),
    row(
        ANN_HTTP_IDLE_TIMEOUT_SECONDS,
        ValueType::Unsigned,
        None,
        "HTTP idle timeout in seconds",
    ),
    row(ANN_HTTP_PORTS, LIST, None, "ports speaking HTTP"),
    row(ANN_HTTP2_PORTS, LIST, None, "ports speaking HTTP/2"),
    row(ANN_HTTP3_PORT, INT, None, "the one port speaking HTTP/3"),
    row(
        ANN_IP,
        TEXT,
        None,
        "a reserved address to create the load balancer with",
    ),
    row(
        ANN_NAME,
        TEXT,
        None,
        "custom load-balancer name (default `a` + the Service UID)",
    ),
    row(
        ANN_NETWORK,
        ValueType::OneOf(&[NETWORK_EXTERNAL, NETWORK_INTERNAL]),
        Some(NETWORK_EXTERNAL),
        "reachable from the internet or the VPC only",
    ),
    row(
        ANN_NETWORK_STACK,
        ValueType::OneOf(&[NETWORK_STACK_IPV4, NETWORK_STACK_DUALSTACK]),
        None,
        "IPv4 only or dual-stack",
    ),
    row(
        ANN_OVERRIDE_HEALTH_CHECK,
        ValueType::Presence,
        None,
        "present: use the healthcheck-port, -protocol and -path annotations",
    ),
    row(
        ANN_PROTOCOL,
        ValueType::OneOf(&["tcp", "http", "https", "http2", "http3"]),
        Some("tcp"),
        "default protocol of TCP ports",
    ),
    row(
        ANN_REDIRECT_HTTP_TO_HTTPS,
        BOOL,
        Some("false"),
        "redirect HTTP to HTTPS",
    ),
    row(
        ANN_SIZE_SLUG,
        ValueType::OneOf(&["lb-small", "lb-medium", "lb-large"]),
        None,
        "deprecated sizing",
    ),
    row(ANN_SIZE_UNIT, INT, None, "the size in load-balancer nodes"),
    row(
        ANN_STICKY_SESSIONS_COOKIE_NAME,
        TEXT,
        None,
        "the sticky-session cookie name",
    ),
    row(
        ANN_STICKY_SESSIONS_COOKIE_TTL,
        INT,
        None,
        "the sticky-session cookie lifetime in seconds",
    ),
    row(
        ANN_STICKY_SESSIONS_TYPE,
        ValueType::OneOf(&["none", "cookies"]),
        Some("none"),
        "sticky sessions by cookie or none",
    ),
    row(
        ANN_SUBNET_UUID,
        TEXT,
        None,
        "the VPC subnet to place the load balancer in",
    ),
    row(
        ANN_TLS_PASSTHROUGH,
        BOOL,
        Some("false"),
        "TLS passes through to the droplets",
    ),
    row(ANN_TLS_PORTS, LIST, None, "ports speaking HTTPS"),
    row(
        ANN_TYPE,
        ValueType::OneOf(&["REGIONAL", "REGIONAL_NETWORK"]),
        None,
        "load-balancer type (default `DEFAULT_LB_TYPE`), written back",
    ),
    row(
        ANN_DISOWN,
        BOOL,
        Some("false"),
        "the provider leaves the load balancer alone",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    /// The table is in name order, each name once (the fuzz corpus depends on the order), and README.md's
    /// table names exactly its rows.
    #[test]
    fn table_in_name_order_and_in_the_readme() {
        let readme = include_str!("../README.md");
        cloud_provider::annotations::check_table(
            ANNOTATIONS,
            readme,
            "## Load-balancer annotations",
            ANN_PREFIX,
        )
        .unwrap_or_else(|e| panic!("README.md and the annotation table differ:\n{e}"));
    }
}
