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

/// A forwarding rule of a load balancer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ForwardingRule {
    /// `tcp`, `udp`, `http`, `https`, `http2` or `http3`.
    pub entry_protocol: String,
    /// The port clients connect to.
    pub entry_port: u16,
    /// The protocol spoken to the droplets.
    pub target_protocol: String,
    /// The droplet port.
    pub target_port: u16,
    /// The certificate terminating TLS, when the rule does.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub certificate_id: String,
    /// Whether TLS passes through to the droplets.
    pub tls_passthrough: bool,
}

/// A load balancer's health check.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HealthCheck {
    /// `tcp`, `http` or `https`.
    pub protocol: String,
    /// The droplet port checked.
    pub port: u16,
    /// The HTTP path (empty for tcp).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub path: String,
    /// Seconds between checks.
    pub check_interval_seconds: u32,
    /// Seconds to wait for an answer.
    pub response_timeout_seconds: u32,
    /// Failures before a droplet is taken out.
    pub unhealthy_threshold: u32,
    /// Successes before a droplet is put back.
    pub healthy_threshold: u32,
}

/// Sticky-session settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct StickySessions {
    /// `none` or `cookies`.
    #[serde(rename = "type")]
    pub type_: String,
    /// The cookie name, for `cookies`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cookie_name: Option<String>,
    /// The cookie lifetime, for `cookies`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cookie_ttl_seconds: Option<u32>,
}

/// The load balancer's own firewall: `ip:<addr>` and `cidr:<net>` rules.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct LbFirewall {
    /// Sources allowed (empty = everyone).
    pub allow: Vec<String>,
    /// Sources denied.
    pub deny: Vec<String>,
}

/// A load balancer (`{"load_balancer": {...}}`).
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
    /// The tags.
    pub tags: Vec<String>,
    /// `EXTERNAL` or `INTERNAL`.
    pub network: Option<String>,
    /// `IPV4` or `DUALSTACK`.
    pub network_stack: Option<String>,
    /// The firewall.
    pub firewall: Option<LbFirewall>,
    /// The VPC UUID.
    pub vpc_uuid: Option<String>,
}

/// Load-balancer status while it is being provisioned.
pub const LB_STATUS_NEW: &str = "new";
/// Load-balancer status when it serves traffic.
pub const LB_STATUS_ACTIVE: &str = "active";

/// The body of `POST /v2/load_balancers` and `PUT /v2/load_balancers/{id}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LoadBalancerRequest {
    /// The name.
    pub name: String,
    /// The region slug.
    pub region: String,
    /// `REGIONAL` or `REGIONAL_NETWORK`.
    #[serde(rename = "type")]
    pub type_: String,
    /// The size slug.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<String>,
    /// The size in nodes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size_unit: Option<u32>,
    /// `EXTERNAL` or `INTERNAL`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    /// `IPV4` or `DUALSTACK`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_stack: Option<String>,
    /// A reserved IPv4 address to create the load balancer with (create only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
    /// The forwarding rules.
    pub forwarding_rules: Vec<ForwardingRule>,
    /// The health check.
    pub health_check: HealthCheck,
    /// Sticky sessions.
    pub sticky_sessions: StickySessions,
    /// Redirect HTTP to HTTPS.
    pub redirect_http_to_https: bool,
    /// Send the PROXY protocol header to droplets.
    pub enable_proxy_protocol: bool,
    /// Keep HTTP connections to droplets alive.
    pub enable_backend_keepalive: bool,
    /// Idle timeout of HTTP connections.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_idle_timeout_seconds: Option<u32>,
    /// Do not create DNS records for Let's Encrypt certificates.
    pub disable_lets_encrypt_dns_records: bool,
    /// The firewall (always sent, so removed rules are removed).
    pub firewall: LbFirewall,
    /// The VPC UUID.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vpc_uuid: Option<String>,
    /// The backend droplets.
    pub droplet_ids: Vec<u64>,
    /// Tags (`k8s:<cluster ID>`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
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
    fn request_omits_unset_fields() {
        let req = LoadBalancerRequest {
            name: "a1".into(),
            region: "nyc3".into(),
            type_: "REGIONAL".into(),
            forwarding_rules: vec![ForwardingRule {
                entry_protocol: "tcp".into(),
                entry_port: 80,
                target_protocol: "tcp".into(),
                target_port: 30080,
                ..Default::default()
            }],
            ..Default::default()
        };
        let v = serde_json::to_value(&req).unwrap();
        assert_eq!(v["type"], "REGIONAL");
        assert!(v.get("size").is_none());
        assert!(v.get("ip").is_none());
        assert!(v.get("tags").is_none());
        assert!(v["forwarding_rules"][0].get("certificate_id").is_none());
        assert_eq!(v["firewall"], json!({"allow": [], "deny": []}));
    }
}
