//! Whether a load balancer already is what a request would make it: the "is an update needed" check.
//!
//! Upstream sends a full `PUT` on every sync. This provider sends the same body, but only when the load
//! balancer differs from what that `PUT` would leave, so an unchanged Service costs no write. A `PUT`
//! replaces the load balancer: fields the request leaves out take the API's defaults. The comparison
//! therefore applies those defaults (documented in the API reference) to both sides:
//!
//! | field | default when left out |
//! |-------|-----------------------|
//! | `type` | `REGIONAL` |
//! | `size_unit` / `size` | 1 node / `lb-small` (`lb-small` = 1, `lb-medium` = 3, `lb-large` = 6 nodes) |
//! | `health_check` | `http`, port 80, path `/` (not compared for `tcp`), every 10 s, 5 s timeout, unhealthy after 5, healthy after 3 |
//! | `health_check.proxy_protocol` | the load balancer's `enable_proxy_protocol` |
//! | `sticky_sessions` | `none` (cookie fields compared only for `cookies`) |
//! | `http_idle_timeout_seconds` | 60 |
//! | `disable_lets_encrypt_dns_records`, `redirect_http_to_https`, `enable_*` | false |
//! | `firewall` | no rules |
//! | `network` / `network_stack` | `EXTERNAL` / `IPV4` |
//! | `tls_cipher_policy` (never sent) | `DEFAULT` |
//!
//! Forwarding rules, droplets and firewall rules are compared as sets (the API keeps its own order).
//! `tags` (set at creation only), `algorithm` (ignored by the API), `ip` (creation only) are not compared;
//! `vpc_uuid` and `subnet_uuid` only when the request names them. When in doubt the answer is "differs":
//! an extra `PUT` is what upstream does anyway.

use std::fmt;

use crate::annotations::{NETWORK_EXTERNAL, NETWORK_STACK_IPV4};
use crate::api::{ForwardingRule, HealthCheck, LoadBalancer, LoadBalancerRequest};

/// One field whose value the request would change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// The field, e.g. `health_check.port`.
    pub field: String,
    /// What the load balancer has.
    pub have: String,
    /// What the request asks for.
    pub want: String,
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} -> {}", self.field, self.have, self.want)
    }
}

/// Collects differences field by field.
#[derive(Default)]
struct Diffs(Vec<Difference>);

impl Diffs {
    fn check<T: PartialEq + fmt::Debug>(&mut self, field: &str, have: T, want: T) {
        if have != want {
            self.0.push(Difference {
                field: field.to_string(),
                have: format!("{have:?}"),
                want: format!("{want:?}"),
            });
        }
    }
}

/// API default of `http_idle_timeout_seconds`.
pub const DEFAULT_HTTP_IDLE_TIMEOUT_SECONDS: u64 = 60;
/// API default of `type`.
pub const DEFAULT_TYPE: &str = "REGIONAL";
/// API default of `tls_cipher_policy`.
pub const DEFAULT_TLS_CIPHER_POLICY: &str = "DEFAULT";

/// The fields where `lb` differs from what `request` would make of it; empty when a `PUT` would change
/// nothing.
pub fn differences(request: &LoadBalancerRequest, lb: &LoadBalancer) -> Vec<Difference> {
    let mut d = Diffs::default();
    d.check("name", lb.name.as_str(), request.name.as_str());
    if !request.region.is_empty() {
        d.check("region", lb.region.slug.as_str(), request.region.as_str());
    }
    d.check(
        "type",
        answer_or(&lb.type_, DEFAULT_TYPE),
        or_default(&request.type_, DEFAULT_TYPE),
    );
    d.check("size", effective_size_of_lb(lb), effective_size(request));
    d.check(
        "forwarding_rules",
        sorted(lb.forwarding_rules.iter().map(describe_rule).collect()),
        sorted(request.forwarding_rules.iter().map(describe_rule).collect()),
    );
    compare_health_check(&mut d, request, lb);
    compare_sticky_sessions(&mut d, request, lb);
    d.check(
        "droplet_ids",
        sorted_unique(lb.droplet_ids.clone()),
        sorted_unique(request.droplet_ids.clone()),
    );
    d.check("tag", lb.tag.as_deref().unwrap_or_default(), "");
    d.check(
        "redirect_http_to_https",
        lb.redirect_http_to_https,
        request.redirect_http_to_https,
    );
    d.check(
        "enable_proxy_protocol",
        lb.enable_proxy_protocol,
        request.enable_proxy_protocol,
    );
    d.check(
        "enable_backend_keepalive",
        lb.enable_backend_keepalive,
        request.enable_backend_keepalive,
    );
    d.check(
        "disable_lets_encrypt_dns_records",
        lb.disable_lets_encrypt_dns_records.unwrap_or(false),
        request.disable_lets_encrypt_dns_records,
    );
    d.check(
        "http_idle_timeout_seconds",
        lb.http_idle_timeout_seconds
            .filter(|t| *t > 0)
            .unwrap_or(DEFAULT_HTTP_IDLE_TIMEOUT_SECONDS),
        request
            .http_idle_timeout_seconds
            .unwrap_or(DEFAULT_HTTP_IDLE_TIMEOUT_SECONDS),
    );
    let firewall = lb.firewall.clone().unwrap_or_default();
    d.check(
        "firewall.allow",
        sorted(firewall.allow),
        sorted(request.firewall.allow.clone()),
    );
    d.check(
        "firewall.deny",
        sorted(firewall.deny),
        sorted(request.firewall.deny.clone()),
    );
    d.check(
        "network",
        answer_or(&lb.network, NETWORK_EXTERNAL),
        or_default(&request.network, NETWORK_EXTERNAL),
    );
    d.check(
        "network_stack",
        answer_or(&lb.network_stack, NETWORK_STACK_IPV4),
        or_default(&request.network_stack, NETWORK_STACK_IPV4),
    );
    if !request.vpc_uuid.is_empty() {
        d.check(
            "vpc_uuid",
            lb.vpc_uuid.as_deref().unwrap_or_default(),
            request.vpc_uuid.as_str(),
        );
    }
    if !request.subnet_uuid.is_empty() {
        d.check(
            "subnet_uuid",
            lb.subnet_uuid.as_deref().unwrap_or_default(),
            request.subnet_uuid.as_str(),
        );
    }
    d.check(
        "tls_cipher_policy",
        answer_or(&lb.tls_cipher_policy, DEFAULT_TLS_CIPHER_POLICY),
        DEFAULT_TLS_CIPHER_POLICY,
    );
    d.0
}

/// A string field of the API's answer, `default` when absent or empty.
fn answer_or<'a>(value: &'a Option<String>, default: &'a str) -> &'a str {
    or_default(value.as_deref().unwrap_or_default(), default)
}

fn or_default<'a>(value: &'a str, default: &'a str) -> &'a str {
    if value.is_empty() { default } else { value }
}

fn sorted<T: Ord>(mut items: Vec<T>) -> Vec<T> {
    items.sort();
    items
}

fn sorted_unique<T: Ord>(mut items: Vec<T>) -> Vec<T> {
    items.sort();
    items.dedup();
    items
}

/// The nodes of a size slug.
fn slug_units(slug: &str) -> Option<u32> {
    match slug {
        "lb-small" => Some(1),
        "lb-medium" => Some(3),
        "lb-large" => Some(6),
        _ => None,
    }
}

/// The size a request asks for, in nodes when it can be said in nodes (the slug otherwise).
fn effective_size(request: &LoadBalancerRequest) -> String {
    if request.size_unit > 0 {
        return request.size_unit.to_string();
    }
    if request.size_slug.is_empty() {
        return "1".into();
    }
    slug_units(&request.size_slug).map_or_else(|| request.size_slug.clone(), |n| n.to_string())
}

/// A load balancer's size in nodes: its `size_unit`, else its slug's nodes, else the default 1.
fn effective_size_of_lb(lb: &LoadBalancer) -> String {
    match (lb.size_unit.filter(|n| *n > 0), lb.size.as_deref()) {
        (Some(n), _) => n.to_string(),
        (None, Some(slug)) if !slug.is_empty() => {
            slug_units(slug).map_or_else(|| slug.to_string(), |n| n.to_string())
        }
        _ => "1".into(),
    }
}

/// A health check with the API's defaults applied; the path only matters for http(s).
#[derive(Debug, PartialEq)]
struct EffectiveHealthCheck {
    protocol: String,
    port: i64,
    path: String,
    check_interval_seconds: i64,
    response_timeout_seconds: i64,
    unhealthy_threshold: i64,
    healthy_threshold: i64,
    proxy_protocol: bool,
}

fn effective_health_check(hc: &HealthCheck, lb_proxy_protocol: bool) -> EffectiveHealthCheck {
    let positive = |v: i64, default: i64| if v == 0 { default } else { v };
    let protocol = or_default(&hc.protocol, "http").to_string();
    let path = if protocol == "tcp" {
        String::new()
    } else {
        or_default(&hc.path, "/").to_string()
    };
    EffectiveHealthCheck {
        protocol,
        port: positive(hc.port, 80),
        path,
        check_interval_seconds: positive(hc.check_interval_seconds, 10),
        response_timeout_seconds: positive(hc.response_timeout_seconds, 5),
        unhealthy_threshold: positive(hc.unhealthy_threshold, 5),
        healthy_threshold: positive(hc.healthy_threshold, 3),
        proxy_protocol: hc.proxy_protocol.unwrap_or(lb_proxy_protocol),
    }
}

fn compare_health_check(d: &mut Diffs, request: &LoadBalancerRequest, lb: &LoadBalancer) {
    let want = effective_health_check(&request.health_check, request.enable_proxy_protocol);
    let have = effective_health_check(
        &lb.health_check.clone().unwrap_or_default(),
        lb.enable_proxy_protocol,
    );
    d.check("health_check.protocol", &have.protocol, &want.protocol);
    d.check("health_check.port", have.port, want.port);
    d.check("health_check.path", &have.path, &want.path);
    d.check(
        "health_check.check_interval_seconds",
        have.check_interval_seconds,
        want.check_interval_seconds,
    );
    d.check(
        "health_check.response_timeout_seconds",
        have.response_timeout_seconds,
        want.response_timeout_seconds,
    );
    d.check(
        "health_check.unhealthy_threshold",
        have.unhealthy_threshold,
        want.unhealthy_threshold,
    );
    d.check(
        "health_check.healthy_threshold",
        have.healthy_threshold,
        want.healthy_threshold,
    );
    d.check(
        "health_check.proxy_protocol",
        have.proxy_protocol,
        want.proxy_protocol,
    );
}

fn compare_sticky_sessions(d: &mut Diffs, request: &LoadBalancerRequest, lb: &LoadBalancer) {
    let have = lb.sticky_sessions.clone().unwrap_or_default();
    let want = &request.sticky_sessions;
    let want_type = or_default(&want.type_, "none");
    d.check(
        "sticky_sessions.type",
        or_default(&have.type_, "none"),
        want_type,
    );
    if want_type == "cookies" {
        d.check(
            "sticky_sessions.cookie_name",
            have.cookie_name.as_str(),
            want.cookie_name.as_str(),
        );
        d.check(
            "sticky_sessions.cookie_ttl_seconds",
            have.cookie_ttl_seconds,
            want.cookie_ttl_seconds,
        );
    }
}

/// A rule for messages: `https:443 -> http:30443 (cert c)`.
pub fn describe_rule(rule: &ForwardingRule) -> String {
    let mut s = format!(
        "{}:{} -> {}:{}",
        rule.entry_protocol, rule.entry_port, rule.target_protocol, rule.target_port
    );
    if !rule.certificate_id.is_empty() {
        s.push_str(&format!(" (certificate {})", rule.certificate_id));
    }
    if rule.tls_passthrough {
        s.push_str(" (TLS pass-through)");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{LbFirewall, Region, StickySessions};

    fn rule(entry: &str, ep: u16, target: &str, tp: u16) -> ForwardingRule {
        ForwardingRule {
            entry_protocol: entry.into(),
            entry_port: ep,
            target_protocol: target.into(),
            target_port: tp,
            ..Default::default()
        }
    }

    fn request() -> LoadBalancerRequest {
        LoadBalancerRequest {
            name: "a1".into(),
            algorithm: "round_robin".into(),
            region: "nyc3".into(),
            type_: "REGIONAL_NETWORK".into(),
            forwarding_rules: vec![rule("tcp", 80, "tcp", 80), rule("udp", 53, "udp", 53)],
            health_check: HealthCheck {
                protocol: "http".into(),
                port: 10256,
                path: "/healthz".into(),
                check_interval_seconds: 3,
                response_timeout_seconds: 5,
                healthy_threshold: 5,
                unhealthy_threshold: 3,
                proxy_protocol: Some(false),
            },
            sticky_sessions: StickySessions {
                type_: "none".into(),
                ..Default::default()
            },
            droplet_ids: vec![2, 1],
            tags: vec!["k8s:c".into()],
            vpc_uuid: "vpc-1".into(),
            network: "EXTERNAL".into(),
            network_stack: "IPV4".into(),
            ..Default::default()
        }
    }

    /// What the API answers for `request()`.
    fn answered() -> LoadBalancer {
        LoadBalancer {
            id: "id".into(),
            name: "a1".into(),
            ip: "203.0.113.1".into(),
            status: "active".into(),
            type_: Some("REGIONAL_NETWORK".into()),
            size: Some("lb-small".into()),
            size_unit: Some(1),
            algorithm: Some("round_robin".into()),
            region: Region {
                slug: "nyc3".into(),
                ..Default::default()
            },
            forwarding_rules: vec![rule("udp", 53, "udp", 53), rule("tcp", 80, "tcp", 80)],
            health_check: Some(request().health_check),
            sticky_sessions: Some(StickySessions {
                type_: "none".into(),
                ..Default::default()
            }),
            droplet_ids: vec![1, 2],
            tag: Some(String::new()),
            tags: vec!["k8s:c".into()],
            http_idle_timeout_seconds: Some(60),
            disable_lets_encrypt_dns_records: Some(false),
            network: Some("EXTERNAL".into()),
            network_stack: Some("IPV4".into()),
            firewall: Some(LbFirewall::default()),
            vpc_uuid: Some("vpc-1".into()),
            tls_cipher_policy: Some("DEFAULT".into()),
            ..Default::default()
        }
    }

    fn fields(request: &LoadBalancerRequest, lb: &LoadBalancer) -> Vec<String> {
        differences(request, lb)
            .into_iter()
            .map(|d| d.field)
            .collect()
    }

    #[test]
    fn the_api_answer_to_a_request_is_no_change() {
        assert!(differences(&request(), &answered()).is_empty());
        // The API may leave defaulted fields out.
        let sparse = LoadBalancer {
            size: None,
            size_unit: None,
            tag: None,
            http_idle_timeout_seconds: None,
            disable_lets_encrypt_dns_records: None,
            network: None,
            firewall: None,
            tls_cipher_policy: None,
            ..answered()
        };
        assert!(differences(&request(), &sparse).is_empty());
        // ... or answer them empty.
        let empty = LoadBalancer {
            size: Some(String::new()),
            size_unit: Some(0),
            http_idle_timeout_seconds: Some(0),
            network: Some(String::new()),
            tls_cipher_policy: Some(String::new()),
            ..answered()
        };
        assert!(differences(&request(), &empty).is_empty());
    }

    #[test]
    fn every_field_is_named() {
        let mut lb = answered();
        lb.name = "other".into();
        lb.size_unit = Some(3);
        lb.forwarding_rules.pop();
        lb.health_check.as_mut().unwrap().port = 31000;
        lb.health_check.as_mut().unwrap().proxy_protocol = None;
        lb.enable_proxy_protocol = true;
        lb.droplet_ids.push(3);
        lb.http_idle_timeout_seconds = Some(90);
        lb.firewall = Some(LbFirewall {
            allow: vec!["ip:1.2.3.4".into()],
            deny: vec![],
        });
        lb.network_stack = Some("DUALSTACK".into());
        lb.tls_cipher_policy = Some("STRONG".into());
        assert_eq!(
            fields(&request(), &lb),
            vec![
                "name",
                "size",
                "forwarding_rules",
                "health_check.port",
                "health_check.proxy_protocol",
                "droplet_ids",
                "enable_proxy_protocol",
                "http_idle_timeout_seconds",
                "firewall.allow",
                "network_stack",
                "tls_cipher_policy"
            ]
        );
        let d = &differences(&request(), &lb)[0];
        assert_eq!(d.to_string(), "name: \"other\" -> \"a1\"");
    }

    #[test]
    fn sizes_in_nodes_or_slugs() {
        let mut req = request();
        req.size_slug = "lb-medium".into();
        let mut lb = answered();
        lb.size = Some("lb-medium".into());
        lb.size_unit = None;
        assert!(differences(&req, &lb).is_empty());
        lb.size = None;
        lb.size_unit = Some(3);
        assert!(differences(&req, &lb).is_empty());
        req.size_slug.clear();
        req.size_unit = 4;
        assert_eq!(fields(&req, &lb), vec!["size"]);
        lb.size_unit = Some(4);
        assert!(differences(&req, &lb).is_empty());
    }

    #[test]
    fn health_check_defaults_and_proxy_protocol() {
        // An overridden tcp check without path: the API's path is irrelevant, proxy follows the LB.
        let mut req = request();
        req.health_check = HealthCheck {
            protocol: "tcp".into(),
            port: 30080,
            check_interval_seconds: 3,
            response_timeout_seconds: 5,
            healthy_threshold: 5,
            unhealthy_threshold: 3,
            ..Default::default()
        };
        let mut lb = answered();
        lb.health_check = Some(HealthCheck {
            path: "/".into(),
            proxy_protocol: Some(false),
            ..req.health_check.clone()
        });
        assert!(differences(&req, &lb).is_empty());
        // Zero values mean the API defaults.
        req.health_check.check_interval_seconds = 0;
        assert_eq!(
            fields(&req, &lb),
            vec!["health_check.check_interval_seconds"]
        );
        lb.health_check.as_mut().unwrap().check_interval_seconds = 10;
        assert!(differences(&req, &lb).is_empty());
        // With the PROXY protocol on and the check following it, an explicit false differs.
        req.enable_proxy_protocol = true;
        lb.enable_proxy_protocol = true;
        assert_eq!(fields(&req, &lb), vec!["health_check.proxy_protocol"]);
        lb.health_check.as_mut().unwrap().proxy_protocol = None;
        assert!(differences(&req, &lb).is_empty());
    }

    #[test]
    fn sticky_cookies_and_optional_uuids() {
        let mut req = request();
        req.sticky_sessions = StickySessions {
            type_: "cookies".into(),
            cookie_name: "c".into(),
            cookie_ttl_seconds: 60,
        };
        assert_eq!(
            fields(&req, &answered()),
            vec![
                "sticky_sessions.type",
                "sticky_sessions.cookie_name",
                "sticky_sessions.cookie_ttl_seconds"
            ]
        );
        let mut lb = answered();
        lb.sticky_sessions = Some(req.sticky_sessions.clone());
        lb.sticky_sessions.as_mut().unwrap().cookie_ttl_seconds = 30;
        assert_eq!(
            fields(&req, &lb),
            vec!["sticky_sessions.cookie_ttl_seconds"]
        );

        let mut req = request();
        req.vpc_uuid.clear();
        let mut lb = answered();
        lb.vpc_uuid = Some("vpc-default".into());
        assert!(differences(&req, &lb).is_empty());
        req.subnet_uuid = "sub-1".into();
        assert_eq!(fields(&req, &lb), vec!["subnet_uuid"]);
        lb.tag = Some("web".into());
        assert_eq!(fields(&req, &lb), vec!["tag", "subnet_uuid"]);
    }

    #[test]
    fn rules_are_described() {
        let mut r = rule("https", 443, "http", 30443);
        r.certificate_id = "c".into();
        assert_eq!(describe_rule(&r), "https:443 -> http:30443 (certificate c)");
    }
}
