//! Every Service annotation the AWS provider reads, as one table: the README's annotation table is checked
//! against it and the `aws_annotations` fuzz target takes its keys from it.
//!
//! Rows are in name order (the fuzz corpus selects keys by their index in this table).

use cloud_provider::ANNOTATION_LOAD_BALANCER_SOURCE_RANGES;
use cloud_provider::annotations::{Annotation, ValueType};

use super::classic::spec::{
    ANN_ACCESS_LOG_EMIT_INTERVAL, ANN_CONNECTION_DRAINING_ENABLED, ANN_CONNECTION_DRAINING_TIMEOUT,
    ANN_CONNECTION_IDLE_TIMEOUT, ANN_PROXY_PROTOCOL,
};
use super::spec::*;

/// The load balancers an annotation applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppliesTo {
    /// Classic ELBs only.
    Classic,
    /// Network load balancers only.
    Nlb,
    /// Both kinds.
    Both,
}

const fn row(
    name: &'static str,
    value: ValueType,
    applies_to: AppliesTo,
    default: Option<&'static str>,
    doc: &'static str,
) -> Annotation<AppliesTo> {
    Annotation {
        name,
        value,
        applies_to,
        default,
        doc,
    }
}

use AppliesTo::{Both, Classic, Nlb};
const BOOL: ValueType = ValueType::GoBool;
const INT: ValueType = ValueType::Integer;
const TEXT: ValueType = ValueType::Text;
const LIST: ValueType = ValueType::List;
const PAIRS: ValueType = ValueType::KeyValuePairs;

/// The annotations the provider reads, in name order.
pub const ANNOTATIONS: &[Annotation<AppliesTo>] = &[
    row(
        ANN_ACCESS_LOG_EMIT_INTERVAL,
        INT,
        Classic,
        None,
        "minutes between access-log deliveries (5 or 60)",
    ),
    row(
        ANN_ACCESS_LOG_ENABLED,
        BOOL,
        Both,
        Some("false"),
        "access logs to S3",
    ),
    row(
        ANN_ACCESS_LOG_BUCKET,
        TEXT,
        Both,
        None,
        "the access-log bucket (required when enabled)",
    ),
    row(
        ANN_ACCESS_LOG_PREFIX,
        TEXT,
        Both,
        None,
        "the access-log key prefix",
    ),
    row(
        ANN_ADDITIONAL_TAGS,
        PAIRS,
        Both,
        None,
        "extra tags `k=v,k2=` on the load balancer and its resources",
    ),
    row(
        ANN_BACKEND_PROTOCOL,
        ValueType::OneOf(&["http", "https", "ssl", "tcp"]),
        Both,
        None,
        "protocol towards the nodes",
    ),
    row(
        ANN_CONNECTION_DRAINING_ENABLED,
        BOOL,
        Classic,
        Some("false"),
        "connection draining",
    ),
    row(
        ANN_CONNECTION_DRAINING_TIMEOUT,
        INT,
        Classic,
        None,
        "connection-draining timeout in seconds (1-3600)",
    ),
    row(
        ANN_CONNECTION_IDLE_TIMEOUT,
        INT,
        Classic,
        Some("60"),
        "idle timeout of connections in seconds (1-4000)",
    ),
    row(
        ANN_CROSS_ZONE,
        BOOL,
        Both,
        Some("false"),
        "cross-zone load balancing",
    ),
    row(
        ANN_EIP_ALLOCATIONS,
        LIST,
        Nlb,
        None,
        "Elastic IP allocation IDs, one per subnet, at creation",
    ),
    row(
        ANN_EXTRA_SECURITY_GROUPS,
        LIST,
        Classic,
        None,
        "security groups added to the load balancer's (refused on NLBs)",
    ),
    row(
        ANN_HC_HEALTHY,
        INT,
        Both,
        None,
        "successes before a target is healthy (2-10)",
    ),
    row(
        ANN_HC_INTERVAL,
        INT,
        Both,
        None,
        "seconds between health checks",
    ),
    row(
        ANN_HC_PATH,
        TEXT,
        Both,
        None,
        "the path of HTTP(S) health checks",
    ),
    row(
        ANN_HC_PORT,
        TEXT,
        Both,
        Some("traffic-port"),
        "the health-check port: `traffic-port` or a number",
    ),
    row(
        ANN_HC_PROTOCOL,
        ValueType::OneOf(&["TCP", "SSL", "HTTP", "HTTPS"]),
        Both,
        None,
        "the health-check protocol (SSL: classic only)",
    ),
    row(
        ANN_HC_TIMEOUT,
        INT,
        Both,
        None,
        "health-check timeout in seconds (not sent for NLBs)",
    ),
    row(
        ANN_HC_UNHEALTHY,
        INT,
        Both,
        None,
        "failures before a target is unhealthy (2-10)",
    ),
    row(
        ANN_INTERNAL,
        TEXT,
        Both,
        None,
        "any value but `false`: an internal load balancer, at creation",
    ),
    row(
        ANN_PRIVATE_IPV4,
        LIST,
        Nlb,
        None,
        "private IPv4 addresses, one per subnet, at creation",
    ),
    row(
        ANN_PROXY_PROTOCOL,
        ValueType::OneOf(&["*"]),
        Classic,
        None,
        "the proxy protocol on every backend port",
    ),
    row(
        ANN_SECURITY_GROUPS,
        LIST,
        Classic,
        None,
        "security groups replacing the load balancer's own one",
    ),
    row(
        ANN_SSL_CERT,
        TEXT,
        Both,
        None,
        "certificate ARN: TLS listeners",
    ),
    row(
        ANN_SSL_NEGOTIATION_POLICY,
        TEXT,
        Both,
        None,
        "the TLS listeners' security policy",
    ),
    row(
        ANN_SSL_PORTS,
        LIST,
        Both,
        Some("*"),
        "ports (numbers or names) that get TLS listeners",
    ),
    row(
        ANN_SUBNETS,
        LIST,
        Both,
        None,
        "subnet IDs or Name tags replacing discovery",
    ),
    row(
        ANN_TARGET_GROUP_ATTRIBUTES,
        PAIRS,
        Nlb,
        None,
        "target-group attributes `k=v,...` (refused on classic ELBs)",
    ),
    row(
        ANN_TARGET_NODE_LABELS,
        PAIRS,
        Both,
        None,
        "node labels `k=v,k2=` a node must carry to be a target",
    ),
    row(
        ANN_TYPE,
        ValueType::OneOf(&["nlb", "nlb-ip", "external"]),
        Both,
        None,
        "`nlb`, or left to the AWS Load Balancer Controller; else a classic ELB",
    ),
    row(
        ANNOTATION_LOAD_BALANCER_SOURCE_RANGES,
        ValueType::CidrList,
        Both,
        None,
        "client CIDRs when `spec.loadBalancerSourceRanges` is empty",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    /// The table is in name order, each name once (the fuzz corpus depends on the order), and README.md's
    /// table names exactly its rows.
    #[test]
    fn table_in_name_order_and_in_the_readme() {
        let readme = include_str!("../../README.md");
        cloud_provider::annotations::check_table(
            ANNOTATIONS,
            readme,
            "### Annotations",
            "service.beta.kubernetes.io/",
        )
        .unwrap_or_else(|e| panic!("README.md and the annotation table differ:\n{e}"));
    }
}
