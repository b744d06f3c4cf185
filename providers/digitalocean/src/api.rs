//! The DigitalOcean v2 API objects this provider reads and writes, with the API's JSON field names.
//!
//! Response types default every missing field and ignore unknown ones, so additions to the API never
//! break decoding. Request types serialize only what the provider sets.

use serde::{Deserialize, Serialize};

/// A region, as embedded in droplets, volumes and load balancers and listed by `GET /v2/regions`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Region {
    /// The region slug, e.g. `nyc3`.
    pub slug: String,
    /// The display name, e.g. `New York 3`.
    pub name: String,
    /// Whether new resources can be created there.
    pub available: bool,
}

/// One IPv4 network interface address of a droplet.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NetworkV4 {
    /// The address.
    pub ip_address: String,
    /// `public` or `private`.
    #[serde(rename = "type")]
    pub type_: String,
}

/// One IPv6 network interface address of a droplet.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NetworkV6 {
    /// The address.
    pub ip_address: String,
    /// `public` (DigitalOcean only has public IPv6).
    #[serde(rename = "type")]
    pub type_: String,
}

/// The networks of a droplet.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Networks {
    /// IPv4 addresses.
    pub v4: Vec<NetworkV4>,
    /// IPv6 addresses.
    pub v6: Vec<NetworkV6>,
}

/// A droplet (`{"droplet": {...}}`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Droplet {
    /// The droplet ID.
    pub id: u64,
    /// The droplet name (usually the node name).
    pub name: String,
    /// `new`, `active`, `off` or `archive`.
    pub status: String,
    /// The size slug, e.g. `s-2vcpu-4gb`.
    pub size_slug: String,
    /// The region.
    pub region: Region,
    /// The addresses.
    pub networks: Networks,
    /// The tags.
    pub tags: Vec<String>,
}

/// Droplet status of a powered-off droplet.
pub const DROPLET_STATUS_OFF: &str = "off";

impl Droplet {
    /// The first IPv4 address of the given type (`public` or `private`).
    pub fn first_v4(&self, type_: &str) -> Option<&str> {
        self.networks
            .v4
            .iter()
            .find(|n| n.type_ == type_ && !n.ip_address.is_empty())
            .map(|n| n.ip_address.as_str())
    }

    /// The first public IPv6 address.
    pub fn first_public_v6(&self) -> Option<&str> {
        self.networks
            .v6
            .iter()
            .find(|n| n.type_ == "public" && !n.ip_address.is_empty())
            .map(|n| n.ip_address.as_str())
    }
}

/// `skip_serializing_if` helper: Go's `omitempty` for integers.
fn is_zero<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

/// `skip_serializing_if` helper: Go's `omitempty` for booleans.
fn is_false(v: &bool) -> bool {
    !*v
}

/// A forwarding rule of a load balancer. Serialized like godo's `ForwardingRule` (zero values omitted).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(default)]
pub struct ForwardingRule {
    /// `tcp`, `udp`, `http`, `https`, `http2` or `http3`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub entry_protocol: String,
    /// The port clients connect to.
    #[serde(skip_serializing_if = "is_zero")]
    pub entry_port: u16,
    /// The protocol spoken to the droplets.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub target_protocol: String,
    /// The droplet port.
    #[serde(skip_serializing_if = "is_zero")]
    pub target_port: u16,
    /// The certificate terminating TLS, when the rule does.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub certificate_id: String,
    /// Whether TLS passes through to the droplets.
    #[serde(skip_serializing_if = "is_false")]
    pub tls_passthrough: bool,
}

/// A load balancer's health check. Serialized like godo's `HealthCheck` (zero values omitted; the API
/// then applies its defaults). The integers are Go `int`s parsed from annotations: the API validates them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HealthCheck {
    /// `tcp`, `http` or `https`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub protocol: String,
    /// The droplet port checked.
    #[serde(skip_serializing_if = "is_zero")]
    pub port: i64,
    /// The HTTP path.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub path: String,
    /// Seconds between checks.
    #[serde(skip_serializing_if = "is_zero")]
    pub check_interval_seconds: i64,
    /// Seconds to wait for an answer.
    #[serde(skip_serializing_if = "is_zero")]
    pub response_timeout_seconds: i64,
    /// Successes before a droplet is put back.
    #[serde(skip_serializing_if = "is_zero")]
    pub healthy_threshold: i64,
    /// Failures before a droplet is taken out.
    #[serde(skip_serializing_if = "is_zero")]
    pub unhealthy_threshold: i64,
    /// Whether the check speaks the PROXY protocol; absent = as the load balancer's
    /// `enable_proxy_protocol`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proxy_protocol: Option<bool>,
}

/// Sticky-session settings. Serialized like godo's `StickySessions` (zero values omitted).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct StickySessions {
    /// `none` or `cookies`.
    #[serde(rename = "type", skip_serializing_if = "String::is_empty")]
    pub type_: String,
    /// The cookie name, for `cookies`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub cookie_name: String,
    /// The cookie lifetime, for `cookies`.
    #[serde(skip_serializing_if = "is_zero")]
    pub cookie_ttl_seconds: i64,
}

/// The load balancer's own firewall: `ip:<addr>` and `cidr:<net>` rules. Serialized like godo's
/// `LBFirewall` (empty lists omitted, so no rules at all is `{}`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct LbFirewall {
    /// Sources allowed (empty = everyone).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    /// Sources denied.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
}

/// A load balancer (`{"load_balancer": {...}}`), as the API answers. Fields the API may leave out are
/// `Option`s; [`crate::lb_diff`] knows the API's defaults for them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LoadBalancer {
    /// The UUID.
    pub id: String,
    /// The name.
    pub name: String,
    /// The public (or, for INTERNAL, private) IPv4 address; empty until assigned.
    pub ip: String,
    /// The IPv6 address of DUALSTACK load balancers.
    pub ipv6: Option<String>,
    /// `new`, `active` or `errored`.
    pub status: String,
    /// `REGIONAL`, `REGIONAL_NETWORK` or `GLOBAL`.
    #[serde(rename = "type")]
    pub type_: Option<String>,
    /// The size slug (deprecated sizing).
    pub size: Option<String>,
    /// The size in nodes.
    pub size_unit: Option<u32>,
    /// The (deprecated, ignored) balancing algorithm.
    pub algorithm: Option<String>,
    /// The region.
    pub region: Region,
    /// The forwarding rules.
    pub forwarding_rules: Vec<ForwardingRule>,
    /// The health check.
    pub health_check: Option<HealthCheck>,
    /// Sticky sessions.
    pub sticky_sessions: Option<StickySessions>,
    /// The backend droplets.
    pub droplet_ids: Vec<u64>,
    /// The droplet tag selecting the backends (instead of `droplet_ids`).
    pub tag: Option<String>,
    /// The tags.
    pub tags: Vec<String>,
    /// Redirect HTTP to HTTPS.
    pub redirect_http_to_https: bool,
    /// PROXY protocol to the droplets.
    pub enable_proxy_protocol: bool,
    /// HTTP keepalive to the droplets.
    pub enable_backend_keepalive: bool,
    /// Idle timeout of HTTP connections.
    pub http_idle_timeout_seconds: Option<u64>,
    /// No DNS records for Let's Encrypt certificates.
    pub disable_lets_encrypt_dns_records: Option<bool>,
    /// `EXTERNAL` or `INTERNAL`.
    pub network: Option<String>,
    /// `IPV4` or `DUALSTACK`.
    pub network_stack: Option<String>,
    /// The firewall.
    pub firewall: Option<LbFirewall>,
    /// The VPC UUID.
    pub vpc_uuid: Option<String>,
    /// The VPC subnet UUID.
    pub subnet_uuid: Option<String>,
    /// `DEFAULT` or `STRONG`.
    pub tls_cipher_policy: Option<String>,
}

/// Load-balancer status while it is being provisioned.
pub const LB_STATUS_NEW: &str = "new";
/// Load-balancer status when it serves traffic.
pub const LB_STATUS_ACTIVE: &str = "active";

/// The body of `POST /v2/load_balancers` and `PUT /v2/load_balancers/{id}`: the fields upstream's
/// `godo.LoadBalancerRequest` carries, serialized with the same names and the same omissions (Go's
/// `omitempty`), so the API sees the same body from both controllers.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LoadBalancerRequest {
    /// The name.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The (deprecated, ignored) algorithm: `round_robin` or `least_connections`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub algorithm: String,
    /// The region slug.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub region: String,
    /// The size slug.
    #[serde(rename = "size", skip_serializing_if = "String::is_empty")]
    pub size_slug: String,
    /// The size in nodes (0 = not set).
    #[serde(skip_serializing_if = "is_zero")]
    pub size_unit: u32,
    /// `REGIONAL` or `REGIONAL_NETWORK`.
    #[serde(rename = "type", skip_serializing_if = "String::is_empty")]
    pub type_: String,
    /// The forwarding rules.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub forwarding_rules: Vec<ForwardingRule>,
    /// The health check.
    pub health_check: HealthCheck,
    /// Sticky sessions.
    pub sticky_sessions: StickySessions,
    /// The backend droplets.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub droplet_ids: Vec<u64>,
    /// Tags (`k8s:<cluster ID>`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Redirect HTTP to HTTPS.
    #[serde(skip_serializing_if = "is_false")]
    pub redirect_http_to_https: bool,
    /// Send the PROXY protocol header to droplets.
    #[serde(skip_serializing_if = "is_false")]
    pub enable_proxy_protocol: bool,
    /// Keep HTTP connections to droplets alive.
    #[serde(skip_serializing_if = "is_false")]
    pub enable_backend_keepalive: bool,
    /// The VPC UUID.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub vpc_uuid: String,
    /// Do not create DNS records for Let's Encrypt certificates (always sent).
    pub disable_lets_encrypt_dns_records: bool,
    /// Idle timeout of HTTP connections.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_idle_timeout_seconds: Option<u64>,
    /// The firewall (always sent, so removed rules are removed).
    pub firewall: LbFirewall,
    /// `EXTERNAL` or `INTERNAL`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub network: String,
    /// `IPV4` or `DUALSTACK`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub network_stack: String,
    /// A reserved (BYOIP) address to create the load balancer with (creation only).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub ip: String,
    /// The VPC subnet UUID.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subnet_uuid: String,
    /// Only validate the request: nothing is created or changed (the admission webhook's check).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub validate_only: bool,
}

/// A TLS certificate (`{"certificate": {...}}`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Certificate {
    /// The UUID.
    pub id: String,
    /// The name.
    pub name: String,
    /// `custom` or `lets_encrypt`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `pending`, `verified` or `error`.
    pub state: String,
}

/// Certificate type of certificates DigitalOcean issues and renews through Let's Encrypt.
pub const CERTIFICATE_TYPE_LETS_ENCRYPT: &str = "lets_encrypt";

/// A block-storage volume (`{"volume": {...}}`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Volume {
    /// The UUID.
    pub id: String,
    /// The name.
    pub name: String,
    /// The region.
    pub region: Region,
    /// Droplets it is attached to.
    pub droplet_ids: Vec<u64>,
}

/// The account of the token (`{"account": {...}}`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Account {
    /// The account UUID.
    pub uuid: String,
    /// `active`, `warning` or `locked`.
    pub status: String,
    /// Why the account has its status.
    pub status_message: String,
}

/// The `links.pages` object of a list response.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Pages {
    /// The URL of the next page, absent on the last page.
    pub next: Option<String>,
    /// The URL of the last page.
    pub last: Option<String>,
}

/// The `links` object of a list response.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Links {
    /// Page links.
    pub pages: Option<Pages>,
}

/// The `meta` object of a list response.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Meta {
    /// The number of objects over all pages.
    pub total: u64,
}

/// The body of an API error response.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ErrorBody {
    /// A machine-readable error ID, e.g. `not_found`.
    pub id: String,
    /// A human-readable message.
    pub message: String,
    /// The request ID, for support.
    pub request_id: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn droplet_decodes_the_api_shape() {
        let d: Droplet = serde_json::from_value(json!({
            "id": 3164444, "name": "node-1", "memory": 1024, "status": "active", "locked": false,
            "size_slug": "s-1vcpu-1gb",
            "networks": {
                "v4": [
                    {"ip_address": "104.236.32.182", "netmask": "255.255.192.0", "gateway": "104.236.0.1", "type": "public"},
                    {"ip_address": "10.128.0.5", "netmask": "255.255.0.0", "gateway": "10.128.0.1", "type": "private"}
                ],
                "v6": [{"ip_address": "2604:a880:0:1010::18a:a001", "netmask": 64, "gateway": "2604:a880:0:1010::1", "type": "public"}]
            },
            "region": {"name": "New York 3", "slug": "nyc3", "features": ["ipv6"], "available": true, "sizes": []},
            "tags": ["k8s"], "vpc_uuid": "u"
        }))
        .unwrap();
        assert_eq!(d.id, 3164444);
        assert_eq!(d.first_v4("private"), Some("10.128.0.5"));
        assert_eq!(d.first_v4("public"), Some("104.236.32.182"));
        assert_eq!(d.first_public_v6(), Some("2604:a880:0:1010::18a:a001"));
        assert_eq!(d.region.slug, "nyc3");
    }

    #[test]
    fn request_omits_what_go_omits() {
        let req = LoadBalancerRequest {
            name: "a1".into(),
            algorithm: "round_robin".into(),
            region: "nyc3".into(),
            type_: "REGIONAL".into(),
            forwarding_rules: vec![ForwardingRule {
                entry_protocol: "tcp".into(),
                entry_port: 80,
                target_protocol: "tcp".into(),
                target_port: 30080,
                ..Default::default()
            }],
            health_check: HealthCheck {
                protocol: "http".into(),
                port: 10256,
                path: "/healthz".into(),
                check_interval_seconds: 3,
                proxy_protocol: Some(false),
                ..Default::default()
            },
            sticky_sessions: StickySessions {
                type_: "none".into(),
                ..Default::default()
            },
            network: "EXTERNAL".into(),
            network_stack: "IPV4".into(),
            ..Default::default()
        };
        let v = serde_json::to_value(&req).unwrap();
        assert_eq!(
            v,
            json!({
                "name": "a1", "algorithm": "round_robin", "region": "nyc3", "type": "REGIONAL",
                "forwarding_rules": [{"entry_protocol": "tcp", "entry_port": 80, "target_protocol": "tcp", "target_port": 30080}],
                "health_check": {"protocol": "http", "port": 10256, "path": "/healthz", "check_interval_seconds": 3, "proxy_protocol": false},
                "sticky_sessions": {"type": "none"},
                "disable_lets_encrypt_dns_records": false,
                "firewall": {},
                "network": "EXTERNAL", "network_stack": "IPV4"
            })
        );
    }
}
