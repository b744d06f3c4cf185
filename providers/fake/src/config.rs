//! The fake cloud's YAML cloud-config: parsing, defaults and validation.
//!
//! Every field is optional; an empty file (or no file) gives a three-zone cloud with auto-discovery on.
//! Unknown fields are rejected, and every error names the offending field, e.g.
//! `invalid fake cloud config: instances[1].zone: "zz" is not a configured zone (fake-region-1a, ...)`.
//!
//! Besides instances, the config can declare load balancers ([`LoadBalancerConfig`]) and routes
//! ([`RouteConfig`]) that exist from the start, as if `ensure_load_balancer` and `create_route` had made
//! them, and validated by the same rules (distinct host addresses of the pool, unique names, one route per
//! destination and cluster).
//!
//! ```
//! use provider_fake::FakeConfig;
//!
//! let config = FakeConfig::from_yaml(br#"
//! region: eu-1
//! zones: [eu-1a, eu-1b]
//! instanceTypes: [small, large]
//! clusterID: demo
//! instances:
//!   - name: node-1
//!     type: large
//!     zone: eu-1b
//!     addresses: [{type: InternalIP, address: 10.0.0.1}]
//! "#).unwrap();
//! assert_eq!(config.default_instance_type(), "small");
//! assert!(config.auto_discover);
//!
//! let err = FakeConfig::from_yaml(b"zones: [a]\nregoin: x\n").unwrap_err();
//! assert!(err.to_string().contains("unknown field `regoin`"));
//!
//! let config = FakeConfig::from_yaml(br#"
//! loadBalancers:
//!   - serviceUID: 6f0c2b4e-1a2b-4c3d-9e8f-0123456789ab
//!     service: default/web
//!     ip: 198.51.100.10
//!     ports: [{port: 80, nodePort: 30080}]
//!     nodes: [node-1, node-2]
//! routes:
//!   - {targetNode: node-1, destinationCIDR: 10.244.1.0/24}
//! "#).unwrap();
//! assert_eq!(config.load_balancers[0].name(), "a6f0c2b4e1a2b4c3d9e8f0123456789a");
//!
//! let err = FakeConfig::from_yaml(b"routes: [{targetNode: n1, destinationCIDR: 10.244.1.1/24}]").unwrap_err();
//! assert_eq!(
//!     err.to_string(),
//!     r#"invalid fake cloud config: routes[0].destinationCIDR: "10.244.1.1/24" has host bits set"#
//! );
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

use serde::{Deserialize, Serialize};

use crate::faults::{FaultSpec, validate_fault};
use crate::pool::{Cidr, IpPool, PoolError};

/// The provider name and provider-ID scheme of the fake cloud.
pub const PROVIDER_NAME: &str = "fake";
/// The CSI driver whose volumes the fake cloud labels by default.
pub const DEFAULT_CSI_DRIVER: &str = "fake.csi.cloud";
/// The default load-balancer IP pool (TEST-NET-2).
pub const DEFAULT_LOAD_BALANCER_CIDR: &str = "198.51.100.0/24";
/// The default region.
pub const DEFAULT_REGION: &str = "fake-region-1";
/// The default cluster name returned by `Clusters::list_clusters`.
pub const DEFAULT_CLUSTER_NAME: &str = "kubernetes";

/// Why a cloud-config was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The YAML could not be parsed into the schema (the message names the field and position).
    #[error("invalid fake cloud config: {0}")]
    Parse(String),
    /// A field has a value the fake cloud cannot use.
    #[error("invalid fake cloud config: {field}: {message}")]
    Invalid {
        /// The field path, e.g. `instances[2].zone`.
        field: String,
        /// What is wrong with it.
        message: String,
    },
}

impl ConfigError {
    pub(crate) fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// The fake cloud's configuration (the `--cloud-config` file, YAML).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FakeConfig {
    /// The region of every instance (default `fake-region-1`).
    #[serde(default = "default_region")]
    pub region: String,
    /// The zones; default `<region>a`, `<region>b`, `<region>c`. Must not be empty when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zones: Option<Vec<String>>,
    /// The known instance types (default `fake.small`, `fake.medium`, `fake.large`).
    #[serde(default = "default_instance_types")]
    pub instance_types: Vec<String>,
    /// The type of instances that do not name one (default: the first of `instanceTypes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_instance_type: Option<String>,
    /// Whether a node without an explicit instance is a running instance `fake://<node-name>` (default true).
    #[serde(default = "default_true")]
    pub auto_discover: bool,
    /// Whether auto-discovered instances also report an `ExternalIP` (in `198.18.0.0/15`, the last two
    /// octets of their `InternalIP`) besides the kubelet's addresses, so that initialization has addresses
    /// to write (default false: they report exactly the kubelet's).
    #[serde(rename = "discoveredExternalIPs", default)]
    pub discovered_external_ips: bool,
    /// Explicit instances.
    #[serde(default)]
    pub instances: Vec<InstanceConfig>,
    /// Load balancers that exist from the start, as `ensure_load_balancer` made them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub load_balancers: Vec<LoadBalancerConfig>,
    /// Backend node lists that several load balancers share: a load balancer's `nodeSet` is an index into
    /// this list (so that thousands of load balancers with the same thousands of backends are written once).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub load_balancer_node_sets: Vec<Vec<String>>,
    /// Routes that exist from the start, as `create_route` made them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<RouteConfig>,
    /// The pool load-balancer ingress IPs come from (default `198.51.100.0/24`).
    #[serde(rename = "loadBalancerCIDR", default = "default_lb_cidr")]
    pub load_balancer_cidr: String,
    /// The cluster ID; without one, `has_cluster_id()` is false (refused unless `--allow-untagged-cloud`).
    #[serde(rename = "clusterID", default, skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
    /// The cluster name `Clusters::list_clusters` reports (default `kubernetes`).
    #[serde(default = "default_cluster_name")]
    pub cluster_name: String,
    /// What `Clusters::master` returns (default `127.0.0.1`).
    #[serde(default = "default_master_address")]
    pub master_address: String,
    /// Loopback `host:port` of the admin HTTP API, started by `initialize` (port 0 picks a free port).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_address: Option<SocketAddr>,
    /// PersistentVolumes with this CSI driver are volumes of this cloud (default `fake.csi.cloud`).
    #[serde(default = "default_csi_driver")]
    pub csi_driver: String,
    /// Explicit volumes, matched by PersistentVolume name.
    #[serde(default)]
    pub volumes: Vec<VolumeConfig>,
    /// Seed of the fault-injection random streams (default 1).
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Faults active from the start, by operation name (or `*`).
    #[serde(default)]
    pub faults: BTreeMap<String, FaultSpec>,
    /// Wait each call's latency to within tens of microseconds, on a thread of the fake cloud's own,
    /// instead of on the runtime's timer (whole milliseconds, rounded up: a 20 ms call lasts 20.5 to
    /// 21 ms). Costs the process about 40 µs of CPU per call; for benchmarks whose figures are compared
    /// with a floor computed from the latency.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub precise_latency: bool,
    /// Load balancers that carry traffic: `dataPath: true`, or the options of [`DataPathConfig`] (off by
    /// default: a load balancer is then only a record with an address).
    #[serde(
        default,
        skip_serializing_if = "DataPathConfig::is_off",
        deserialize_with = "DataPathConfig::from_bool_or_options"
    )]
    pub data_path: DataPathConfig,
}

/// The pool of ingress addresses when the data path is on and `loadBalancerCIDR` is left at its default:
/// loopback addresses, which every Linux host has without configuration.
pub const DEFAULT_DATA_PATH_CIDR: &str = "127.240.0.0/24";

/// The most connections and flows one load balancer may be configured to carry.
const MAX_CONNECTIONS_LIMIT: usize = 1_000_000;

/// The data path of the fake cloud's load balancers: each listens on its ingress address, for each Service
/// port, and forwards to the backends' `NodeIP:NodePort` (`dataPath: true` for the defaults).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    rename_all = "camelCase",
    deny_unknown_fields,
    default = "DataPathConfig::enabled_by_default"
)]
pub struct DataPathConfig {
    /// Whether load balancers carry traffic.
    pub enabled: bool,
    /// An interface to add each ingress address to (as a /32 or /128, over rtnetlink; needs
    /// `CAP_NET_ADMIN`) and to remove it from when the load balancer goes. Without one, the addresses must
    /// already be local: a loopback range, or a pool with a `local` route.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    /// How long connections to a backend that left the load balancer may go on, in seconds (default 30).
    pub drain_seconds: u64,
    /// Connections (TCP) and flows (UDP) one load balancer carries at once (default 1024); more are refused.
    pub max_connections: usize,
    /// The port of kube-proxy's `/healthz` on every node, which backends of a Service with
    /// `externalTrafficPolicy: Cluster` are checked on (default 10256); `Local` Services are checked on their
    /// `healthCheckNodePort`.
    pub kube_proxy_health_port: u16,
    /// Time between two health checks of a backend, in milliseconds (default 2000).
    pub health_check_interval_millis: u64,
    /// How long a health check may take, in milliseconds (default 1000).
    pub health_check_timeout_millis: u64,
    /// Passing checks in a row that make an unhealthy backend healthy (default 1; the first check of a new
    /// backend decides alone).
    pub healthy_threshold: u32,
    /// Failing checks in a row that make a healthy backend unhealthy (default 2).
    pub unhealthy_threshold: u32,
    /// How long a UDP flow lives without a datagram, in seconds (default 60).
    pub udp_idle_seconds: u64,
}

impl Default for DataPathConfig {
    fn default() -> Self {
        DataPathConfig {
            enabled: false,
            interface: None,
            drain_seconds: 30,
            max_connections: 1024,
            kube_proxy_health_port: 10256,
            health_check_interval_millis: 2000,
            health_check_timeout_millis: 1000,
            healthy_threshold: 1,
            unhealthy_threshold: 2,
            udp_idle_seconds: 60,
        }
    }
}

impl DataPathConfig {
    fn is_off(&self) -> bool {
        *self == DataPathConfig::default()
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let positive = [
            ("maxConnections", self.max_connections as u64),
            (
                "kubeProxyHealthPort",
                u64::from(self.kube_proxy_health_port),
            ),
            (
                "healthCheckIntervalMillis",
                self.health_check_interval_millis,
            ),
            ("healthCheckTimeoutMillis", self.health_check_timeout_millis),
            ("healthyThreshold", u64::from(self.healthy_threshold)),
            ("unhealthyThreshold", u64::from(self.unhealthy_threshold)),
            ("udpIdleSeconds", self.udp_idle_seconds),
        ];
        for (field, value) in positive {
            if value == 0 {
                return Err(ConfigError::invalid(
                    format!("dataPath.{field}"),
                    "must be at least 1",
                ));
            }
        }
        if self.max_connections > MAX_CONNECTIONS_LIMIT {
            return Err(ConfigError::invalid(
                "dataPath.maxConnections",
                format!("must be at most {MAX_CONNECTIONS_LIMIT}"),
            ));
        }
        if let Some(interface) = &self.interface
            && (interface.is_empty()
                || !interface
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.@".contains(c)))
        {
            return Err(ConfigError::invalid(
                "dataPath.interface",
                format!("{interface:?} is not an interface name"),
            ));
        }
        Ok(())
    }
}

impl DataPathConfig {
    /// The options a `dataPath` mapping starts from: the defaults, enabled.
    fn enabled_by_default() -> DataPathConfig {
        DataPathConfig {
            enabled: true,
            ..DataPathConfig::default()
        }
    }

    /// `dataPath` is a boolean, or a mapping of options whose `enabled` defaults to true.
    fn from_bool_or_options<'de, D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> Result<DataPathConfig, D::Error> {
        struct Form;
        impl<'de> serde::de::Visitor<'de> for Form {
            type Value = DataPathConfig;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a boolean or a mapping of data-path options")
            }
            fn visit_bool<E: serde::de::Error>(self, enabled: bool) -> Result<Self::Value, E> {
                Ok(DataPathConfig {
                    enabled,
                    ..DataPathConfig::default()
                })
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<Self::Value, A::Error> {
                DataPathConfig::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            }
        }
        deserializer.deserialize_any(Form)
    }
}

/// An explicit instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InstanceConfig {
    /// The node name of the instance.
    pub name: String,
    /// The full provider ID (`fake://<id>`); exclusive with `id`.
    #[serde(
        rename = "providerID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    /// The instance ID (the provider ID is `fake://<id>`); default: the name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The instance type (default: the default instance type).
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
    /// The zone (default: chosen from the name like an auto-discovered instance).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// The addresses, in order.
    #[serde(default)]
    pub addresses: Vec<AddressConfig>,
    /// The initial state (default `running`).
    #[serde(default)]
    pub state: InitialState,
    /// Extra labels reported in the instance metadata.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

impl InstanceConfig {
    /// A running instance with this node name and every other field defaulted.
    pub fn named(name: impl Into<String>) -> Self {
        InstanceConfig {
            name: name.into(),
            provider_id: None,
            id: None,
            instance_type: None,
            zone: None,
            addresses: Vec::new(),
            state: InitialState::Running,
            labels: BTreeMap::new(),
        }
    }
}

/// One address of an explicit instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddressConfig {
    /// `InternalIP`, `ExternalIP`, `Hostname`, `InternalDNS` or `ExternalDNS`.
    #[serde(rename = "type")]
    pub type_: String,
    /// The address.
    pub address: String,
}

/// The state an explicit instance starts in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InitialState {
    /// Running.
    #[default]
    Running,
    /// Exists but shut down.
    Stopped,
    /// Gone (a tombstone: auto-discovery does not bring it back).
    Terminated,
}

/// A load balancer that exists from the start: what `ensure_load_balancer` records for a Service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LoadBalancerConfig {
    /// The Service UID. The load balancer's name is derived from it like the provider derives it
    /// ([`default_load_balancer_name`](cloud_provider::default_load_balancer_name)).
    #[serde(rename = "serviceUID")]
    pub service_uid: String,
    /// `namespace/name` of the Service.
    pub service: String,
    /// The ingress IP, a free host address of `loadBalancerCIDR` (default: the lowest free one once the
    /// given ones are taken).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
    /// The cluster name the controller passes (default: `clusterName`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// The ports, in Service order.
    #[serde(default)]
    pub ports: Vec<LoadBalancerPortConfig>,
    /// The backend node names (kept sorted, without duplicates).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
    /// Instead of `nodes`: the index of the backend list in `loadBalancerNodeSets`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_set: Option<usize>,
    /// The PROXY protocol version sent to the backends (none: plain TCP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_protocol: Option<ProxyProtocol>,
}

/// A PROXY protocol version a load balancer speaks to its backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProxyProtocol {
    /// The text header of version 1.
    V1,
    /// The binary header of version 2.
    V2,
}

impl LoadBalancerConfig {
    /// The load balancer's cloud name: the default load-balancer name of a Service with this UID.
    pub fn name(&self) -> String {
        let mut service = k8s_openapi::api::core::v1::Service::default();
        service.metadata.uid = Some(self.service_uid.clone());
        cloud_provider::default_load_balancer_name(&service)
    }
}

/// One port of a declared load balancer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LoadBalancerPortConfig {
    /// The Service port name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `TCP` (default), `UDP` or `SCTP`.
    #[serde(default = "default_protocol")]
    pub protocol: String,
    /// The front-end port.
    pub port: i32,
    /// The node port traffic goes to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_port: Option<i32>,
}

/// A route that exists from the start: what `create_route` records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RouteConfig {
    /// The route name (default `<cluster>-<targetNode>-<destination>`, the destination with `.`, `:` and
    /// `/` as `-`; routes the provider creates have the node UID in place of the node name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The cluster name the controller passes (default: `clusterName`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// The target node name.
    pub target_node: String,
    /// The destination CIDR.
    #[serde(rename = "destinationCIDR")]
    pub destination_cidr: String,
    /// The target node's addresses given at creation (default none: the route controller then never
    /// replaces the route for changed addresses).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub target_node_addresses: Vec<AddressConfig>,
}

/// An explicit volume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VolumeConfig {
    /// The PersistentVolume name.
    pub name: String,
    /// The zone of the volume.
    pub zone: String,
}

fn default_region() -> String {
    DEFAULT_REGION.to_string()
}
fn default_instance_types() -> Vec<String> {
    ["fake.small", "fake.medium", "fake.large"]
        .map(String::from)
        .to_vec()
}
fn default_true() -> bool {
    true
}
fn default_lb_cidr() -> String {
    DEFAULT_LOAD_BALANCER_CIDR.to_string()
}
fn default_cluster_name() -> String {
    DEFAULT_CLUSTER_NAME.to_string()
}
fn default_master_address() -> String {
    "127.0.0.1".to_string()
}
fn default_csi_driver() -> String {
    DEFAULT_CSI_DRIVER.to_string()
}
fn default_seed() -> u64 {
    1
}
fn default_protocol() -> String {
    "TCP".to_string()
}

impl Default for FakeConfig {
    fn default() -> Self {
        FakeConfig {
            region: default_region(),
            zones: None,
            instance_types: default_instance_types(),
            default_instance_type: None,
            auto_discover: true,
            discovered_external_ips: false,
            instances: Vec::new(),
            load_balancers: Vec::new(),
            load_balancer_node_sets: Vec::new(),
            routes: Vec::new(),
            load_balancer_cidr: default_lb_cidr(),
            cluster_id: None,
            cluster_name: default_cluster_name(),
            master_address: default_master_address(),
            admin_address: None,
            csi_driver: default_csi_driver(),
            volumes: Vec::new(),
            seed: default_seed(),
            faults: BTreeMap::new(),
            precise_latency: false,
            data_path: DataPathConfig::default(),
        }
    }
}

const ADDRESS_TYPES: [&str; 5] = [
    "InternalIP",
    "ExternalIP",
    "Hostname",
    "InternalDNS",
    "ExternalDNS",
];

const PROTOCOLS: [&str; 3] = ["TCP", "UDP", "SCTP"];

impl FakeConfig {
    /// Parses and validates a YAML cloud-config. Empty (or whitespace-only) input gives the defaults.
    pub fn from_yaml(bytes: &[u8]) -> Result<Self, ConfigError> {
        let text = std::str::from_utf8(bytes)
            .map_err(|e| ConfigError::invalid("(file)", format!("not UTF-8: {e}")))?;
        let mut config: FakeConfig = if text.trim().is_empty() {
            FakeConfig::default()
        } else {
            cloud_provider::cloud_config_yaml::parse(text.as_bytes()).map_err(ConfigError::Parse)?
        };
        config.use_data_path_pool();
        config.validate()?;
        Ok(config)
    }

    /// With the data path on, a pool left at the default (or set to it) becomes [`DEFAULT_DATA_PATH_CIDR`]:
    /// the default pool routes nowhere, and a load balancer that carries traffic needs addresses the host
    /// has.
    pub fn use_data_path_pool(&mut self) {
        if self.data_path.enabled && self.load_balancer_cidr == DEFAULT_LOAD_BALANCER_CIDR {
            self.load_balancer_cidr = DEFAULT_DATA_PATH_CIDR.to_string();
        }
    }

    /// The zones in effect (the configured ones or the defaults derived from the region).
    pub fn effective_zones(&self) -> Vec<String> {
        match &self.zones {
            Some(z) => z.clone(),
            None => ["a", "b", "c"]
                .iter()
                .map(|s| format!("{}{s}", self.region))
                .collect(),
        }
    }

    /// The instance type of instances that do not name one.
    pub fn default_instance_type(&self) -> &str {
        self.default_instance_type
            .as_deref()
            .or(self.instance_types.first().map(String::as_str))
            .unwrap_or("fake.medium")
    }

    /// Checks every field; the error names the first bad one.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let zones = self.validate_zones()?;
        self.validate_instance_types()?;
        let lb_cidr = Cidr::parse(&self.load_balancer_cidr)
            .map_err(|m| ConfigError::invalid("loadBalancerCIDR", m))?;
        self.validate_cluster()?;
        self.validate_admin_address()?;
        self.validate_volumes(&zones)?;
        self.validate_faults()?;
        self.data_path.validate()?;
        self.validate_instances(&zones)?;
        self.validate_load_balancers()?;
        self.load_balancer_ips(&mut IpPool::new(lb_cidr))?;
        self.validate_routes()?;
        Ok(())
    }

    /// Validates the region and the zones (at least one, none empty, no duplicates) and returns the zones
    /// in effect.
    fn validate_zones(&self) -> Result<Vec<String>, ConfigError> {
        if self.region.trim().is_empty() {
            return Err(ConfigError::invalid("region", "must not be empty"));
        }
        let zones = self.effective_zones();
        if zones.is_empty() {
            return Err(ConfigError::invalid(
                "zones",
                "at least one zone is required",
            ));
        }
        let mut seen = BTreeSet::new();
        for (i, z) in zones.iter().enumerate() {
            if z.trim().is_empty() {
                return Err(ConfigError::invalid(
                    format!("zones[{i}]"),
                    "must not be empty",
                ));
            }
            if !seen.insert(z) {
                return Err(ConfigError::invalid(
                    format!("zones[{i}]"),
                    format!("duplicate zone {z:?}"),
                ));
            }
        }
        Ok(zones)
    }

    /// Validates the instance types: at least one, and the default among them.
    fn validate_instance_types(&self) -> Result<(), ConfigError> {
        if self.instance_types.is_empty() {
            return Err(ConfigError::invalid(
                "instanceTypes",
                "at least one instance type is required",
            ));
        }
        if let Some(t) = &self.default_instance_type
            && !self.instance_types.contains(t)
        {
            return Err(ConfigError::invalid(
                "defaultInstanceType",
                format!(
                    "{t:?} is not one of instanceTypes ({})",
                    self.instance_types.join(", ")
                ),
            ));
        }
        Ok(())
    }

    /// Validates the cluster's identity: the cluster ID (when given) and the cluster name are not empty.
    fn validate_cluster(&self) -> Result<(), ConfigError> {
        if let Some(id) = &self.cluster_id
            && id.trim().is_empty()
        {
            return Err(ConfigError::invalid(
                "clusterID",
                "must not be empty when given",
            ));
        }
        if self.cluster_name.trim().is_empty() {
            return Err(ConfigError::invalid("clusterName", "must not be empty"));
        }
        Ok(())
    }

    /// Validates the admin API's address: loopback only.
    fn validate_admin_address(&self) -> Result<(), ConfigError> {
        if let Some(addr) = self.admin_address
            && !addr.ip().is_loopback()
        {
            return Err(ConfigError::invalid(
                "adminAddress",
                format!("{addr} is not a loopback address (use 127.0.0.1 or [::1])"),
            ));
        }
        Ok(())
    }

    /// Validates the CSI driver name and the declared volumes: unique, non-empty names in configured zones.
    fn validate_volumes(&self, zones: &[String]) -> Result<(), ConfigError> {
        if self.csi_driver.trim().is_empty() {
            return Err(ConfigError::invalid("csiDriver", "must not be empty"));
        }
        let mut volume_names = BTreeSet::new();
        for (i, v) in self.volumes.iter().enumerate() {
            if v.name.trim().is_empty() {
                return Err(ConfigError::invalid(
                    format!("volumes[{i}].name"),
                    "must not be empty",
                ));
            }
            if !volume_names.insert(&v.name) {
                return Err(ConfigError::invalid(
                    format!("volumes[{i}].name"),
                    format!("duplicate volume {:?}", v.name),
                ));
            }
            check_zone(zones, &v.zone, &format!("volumes[{i}].zone"))?;
        }
        Ok(())
    }

    /// Validates the configured faults by the rules of the control surface.
    fn validate_faults(&self) -> Result<(), ConfigError> {
        for (op, spec) in &self.faults {
            validate_fault(op, spec)
                .map_err(|m| ConfigError::invalid(format!("faults.{op}"), m))?;
        }
        Ok(())
    }

    /// Validates the declared instances, each on its own and then for unique names and instance IDs.
    fn validate_instances(&self, zones: &[String]) -> Result<(), ConfigError> {
        let mut names = BTreeSet::new();
        let mut ids = BTreeSet::new();
        for (i, inst) in self.instances.iter().enumerate() {
            let id = self.validate_instance(inst, zones, &format!("instances[{i}]"))?;
            if !names.insert(inst.name.clone()) {
                return Err(ConfigError::invalid(
                    format!("instances[{i}].name"),
                    format!("duplicate instance name {:?}", inst.name),
                ));
            }
            if !ids.insert(id.clone()) {
                return Err(ConfigError::invalid(
                    format!("instances[{i}]"),
                    format!("duplicate instance ID {id:?}"),
                ));
            }
        }
        Ok(())
    }

    /// Validates one instance (at `field`) and returns its instance ID.
    pub(crate) fn validate_instance(
        &self,
        inst: &InstanceConfig,
        zones: &[String],
        field: &str,
    ) -> Result<String, ConfigError> {
        if inst.name.trim().is_empty() {
            return Err(ConfigError::invalid(
                format!("{field}.name"),
                "must not be empty",
            ));
        }
        let id = match (&inst.provider_id, &inst.id) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::invalid(
                    format!("{field}.providerID"),
                    "give either providerID or id, not both",
                ));
            }
            (Some(pid), None) => {
                cloud_provider::ProviderId::parse_for(PROVIDER_NAME, pid)
                    .map_err(|e| {
                        ConfigError::invalid(format!("{field}.providerID"), e.to_string())
                    })?
                    .instance
            }
            (None, Some(id)) => {
                if id.trim().is_empty() {
                    return Err(ConfigError::invalid(
                        format!("{field}.id"),
                        "must not be empty",
                    ));
                }
                id.clone()
            }
            (None, None) => inst.name.clone(),
        };
        if let Some(t) = &inst.instance_type
            && !self.instance_types.contains(t)
        {
            return Err(ConfigError::invalid(
                format!("{field}.type"),
                format!(
                    "{t:?} is not one of instanceTypes ({})",
                    self.instance_types.join(", ")
                ),
            ));
        }
        if let Some(z) = &inst.zone {
            check_zone(zones, z, &format!("{field}.zone"))?;
        }
        check_addresses(&inst.addresses, &format!("{field}.addresses"))?;
        Ok(id)
    }

    /// Validates the declared load balancers (their IPs are checked by [`Self::load_balancer_ips`]).
    fn validate_load_balancers(&self) -> Result<(), ConfigError> {
        let mut names = BTreeMap::new();
        for (i, lb) in self.load_balancers.iter().enumerate() {
            let field = format!("loadBalancers[{i}]");
            if lb.service_uid.trim().is_empty() {
                return Err(ConfigError::invalid(
                    format!("{field}.serviceUID"),
                    "must not be empty",
                ));
            }
            let name = lb.name();
            if let Some(first) = names.insert(name.clone(), i) {
                return Err(ConfigError::invalid(
                    format!("{field}.serviceUID"),
                    format!(
                        "duplicate load balancer name {name:?} (that of loadBalancers[{first}])"
                    ),
                ));
            }
            match lb.service.split_once('/') {
                Some((ns, n))
                    if !ns.trim().is_empty() && !n.trim().is_empty() && !n.contains('/') => {}
                _ => {
                    return Err(ConfigError::invalid(
                        format!("{field}.service"),
                        format!("{:?} is not namespace/name", lb.service),
                    ));
                }
            }
            check_optional_name(lb.cluster.as_deref(), &format!("{field}.cluster"))?;
            for (j, p) in lb.ports.iter().enumerate() {
                let pf = format!("{field}.ports[{j}]");
                if !PROTOCOLS.contains(&p.protocol.as_str()) {
                    return Err(ConfigError::invalid(
                        format!("{pf}.protocol"),
                        format!("{:?} is not one of {}", p.protocol, PROTOCOLS.join(", ")),
                    ));
                }
                check_port(p.port, &format!("{pf}.port"))?;
                if let Some(np) = p.node_port {
                    check_port(np, &format!("{pf}.nodePort"))?;
                }
            }
            check_node_names(&lb.nodes, &format!("{field}.nodes"))?;
            if let Some(set) = lb.node_set {
                if !lb.nodes.is_empty() {
                    return Err(ConfigError::invalid(
                        format!("{field}.nodeSet"),
                        "give either nodes or nodeSet, not both",
                    ));
                }
                if set >= self.load_balancer_node_sets.len() {
                    return Err(ConfigError::invalid(
                        format!("{field}.nodeSet"),
                        format!(
                            "{set} is not an index of loadBalancerNodeSets ({} sets)",
                            self.load_balancer_node_sets.len()
                        ),
                    ));
                }
            }
        }
        for (i, set) in self.load_balancer_node_sets.iter().enumerate() {
            check_node_names(set, &format!("loadBalancerNodeSets[{i}]"))?;
        }
        Ok(())
    }

    /// The backend node names of a declared load balancer: its `nodes`, or its `nodeSet`.
    pub fn load_balancer_nodes<'a>(&'a self, lb: &'a LoadBalancerConfig) -> &'a [String] {
        match lb.node_set {
            Some(set) => self
                .load_balancer_node_sets
                .get(set)
                .map_or(&[][..], Vec::as_slice),
            None => &lb.nodes,
        }
    }

    /// The ingress IP of every declared load balancer, in order, allocated from `pool`: the given ones
    /// first, then the lowest free address for each load balancer without one.
    pub(crate) fn load_balancer_ips(&self, pool: &mut IpPool) -> Result<Vec<IpAddr>, ConfigError> {
        let mut ips = vec![None; self.load_balancers.len()];
        for (i, (lb, slot)) in self.load_balancers.iter().zip(&mut ips).enumerate() {
            let Some(raw) = &lb.ip else { continue };
            let field = format!("loadBalancers[{i}].ip");
            let ip: IpAddr = raw.parse().map_err(|_| {
                ConfigError::invalid(&field, format!("{raw:?} is not an IP address"))
            })?;
            pool.allocate_specific(ip).map_err(|e| {
                let message = match e {
                    PoolError::InUse { ip } => format!("duplicate load balancer IP {ip}"),
                    PoolError::OutOfPool { ip, cidr } => {
                        format!("{ip} is not a host address of loadBalancerCIDR {cidr}")
                    }
                    e @ PoolError::Exhausted { .. } => e.to_string(),
                };
                ConfigError::invalid(&field, message)
            })?;
            *slot = Some(ip);
        }
        let mut out = Vec::with_capacity(ips.len());
        for (i, slot) in ips.into_iter().enumerate() {
            let ip = match slot {
                Some(ip) => ip,
                None => pool.allocate().map_err(|e| {
                    ConfigError::invalid(
                        format!("loadBalancers[{i}].ip"),
                        format!("none given and {e}"),
                    )
                })?,
            };
            out.push(ip);
        }
        Ok(out)
    }

    /// The cluster of a declared load balancer.
    pub(crate) fn load_balancer_cluster<'a>(&'a self, lb: &'a LoadBalancerConfig) -> &'a str {
        lb.cluster.as_deref().unwrap_or(&self.cluster_name)
    }

    /// The cluster of a declared route.
    pub(crate) fn route_cluster<'a>(&'a self, route: &'a RouteConfig) -> &'a str {
        route.cluster.as_deref().unwrap_or(&self.cluster_name)
    }

    /// The name of a declared route: the given one, or the one `create_route` makes with the target node
    /// name as the name hint.
    pub(crate) fn route_name(&self, route: &RouteConfig) -> String {
        route.name.clone().unwrap_or_else(|| {
            route_name(
                self.route_cluster(route),
                &route.target_node,
                &route.destination_cidr,
            )
        })
    }

    /// Validates the declared routes by the rules of `create_route`: unique names, one route per
    /// destination and cluster.
    fn validate_routes(&self) -> Result<(), ConfigError> {
        let mut names = BTreeSet::new();
        let mut destinations: BTreeMap<(&str, String), String> = BTreeMap::new();
        for (i, r) in self.routes.iter().enumerate() {
            let field = format!("routes[{i}]");
            check_optional_name(r.name.as_deref(), &format!("{field}.name"))?;
            check_optional_name(r.cluster.as_deref(), &format!("{field}.cluster"))?;
            if r.target_node.trim().is_empty() {
                return Err(ConfigError::invalid(
                    format!("{field}.targetNode"),
                    "must not be empty",
                ));
            }
            let cidr = Cidr::parse(&r.destination_cidr)
                .map_err(|m| ConfigError::invalid(format!("{field}.destinationCIDR"), m))?;
            check_addresses(
                &r.target_node_addresses,
                &format!("{field}.targetNodeAddresses"),
            )?;
            let name = self.route_name(r);
            if !names.insert(name.clone()) {
                return Err(ConfigError::invalid(
                    format!("{field}.name"),
                    format!("duplicate route name {name:?}"),
                ));
            }
            if let Some(other) =
                destinations.insert((self.route_cluster(r), cidr.to_string()), name)
            {
                return Err(ConfigError::invalid(
                    format!("{field}.destinationCIDR"),
                    format!(
                        "destination {} is already routed by route {other:?}",
                        r.destination_cidr
                    ),
                ));
            }
        }
        Ok(())
    }
}

fn check_addresses(addresses: &[AddressConfig], field: &str) -> Result<(), ConfigError> {
    for (j, a) in addresses.iter().enumerate() {
        let af = format!("{field}[{j}]");
        if !ADDRESS_TYPES.contains(&a.type_.as_str()) {
            return Err(ConfigError::invalid(
                format!("{af}.type"),
                format!("{:?} is not one of {}", a.type_, ADDRESS_TYPES.join(", ")),
            ));
        }
        if a.address.trim().is_empty() {
            return Err(ConfigError::invalid(
                format!("{af}.address"),
                "must not be empty",
            ));
        }
        if a.type_.ends_with("IP") && a.address.parse::<IpAddr>().is_err() {
            return Err(ConfigError::invalid(
                format!("{af}.address"),
                format!("{:?} is not an IP address", a.address),
            ));
        }
    }
    Ok(())
}

fn check_optional_name(value: Option<&str>, field: &str) -> Result<(), ConfigError> {
    match value {
        Some(v) if v.trim().is_empty() => {
            Err(ConfigError::invalid(field, "must not be empty when given"))
        }
        _ => Ok(()),
    }
}

/// Every backend node name of a list at `field` is non-empty.
fn check_node_names(names: &[String], field: &str) -> Result<(), ConfigError> {
    match names.iter().position(|n| n.trim().is_empty()) {
        Some(j) => Err(ConfigError::invalid(
            format!("{field}[{j}]"),
            "must not be empty",
        )),
        None => Ok(()),
    }
}

fn check_port(port: i32, field: &str) -> Result<(), ConfigError> {
    if (1..=65535).contains(&port) {
        Ok(())
    } else {
        Err(ConfigError::invalid(
            field,
            format!("{port} is not a port number (1-65535)"),
        ))
    }
}

fn check_zone(zones: &[String], zone: &str, field: &str) -> Result<(), ConfigError> {
    if zones.iter().any(|z| z == zone) {
        Ok(())
    } else {
        Err(ConfigError::invalid(
            field,
            format!("{zone:?} is not a configured zone ({})", zones.join(", ")),
        ))
    }
}

/// The name `create_route` gives a route: `<cluster>-<name hint>-<destination>`, the destination with `.`,
/// `:` and `/` as `-`.
pub(crate) fn route_name(cluster: &str, name_hint: &str, destination_cidr: &str) -> String {
    format!(
        "{cluster}-{name_hint}-{}",
        destination_cidr.replace(['.', ':', '/'], "-")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(yaml: &str) -> String {
        FakeConfig::from_yaml(yaml.as_bytes())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn empty_gives_defaults() {
        let c = FakeConfig::from_yaml(b"  \n").unwrap();
        assert_eq!(c, FakeConfig::default());
        assert_eq!(
            c.effective_zones(),
            vec!["fake-region-1a", "fake-region-1b", "fake-region-1c"]
        );
        assert_eq!(c.default_instance_type(), "fake.small");
        assert!(c.auto_discover);
        assert_eq!(c.load_balancer_cidr, "198.51.100.0/24");
        assert!(c.cluster_id.is_none());
    }

    #[test]
    fn full_config_parses() {
        let c = FakeConfig::from_yaml(
            br#"
region: r1
zones: [z1, z2]
instanceTypes: [t1, t2]
defaultInstanceType: t2
autoDiscover: false
loadBalancerCIDR: 10.9.0.0/29
clusterID: c-1
clusterName: prod
adminAddress: 127.0.0.1:0
csiDriver: disks.example
volumes: [{name: pv-1, zone: z2}]
seed: 7
faults:
  ensure_load_balancer: {errorRate: 0.5, kind: retry, retryAfterMs: 250}
  "*": {latencyMs: 5}
preciseLatency: true
instances:
  - name: n1
    providerID: fake://i-1
    type: t1
    zone: z1
    state: stopped
    labels: {team: a}
    addresses:
      - {type: InternalIP, address: 10.0.0.1}
      - {type: Hostname, address: n1}
  - name: n2
    id: i-2
"#,
        )
        .unwrap();
        assert_eq!(c.default_instance_type(), "t2");
        assert!(!c.auto_discover);
        assert_eq!(c.instances.len(), 2);
        assert_eq!(c.instances[0].state, InitialState::Stopped);
        assert_eq!(c.instances[1].id.as_deref(), Some("i-2"));
        assert_eq!(c.faults.len(), 2);
        assert!(c.precise_latency);
        assert_eq!(c.admin_address.map(|a| a.port()), Some(0));
    }

    #[test]
    fn parse_errors_name_the_field() {
        let m = err("regoin: x\n");
        assert!(m.contains("unknown field `regoin`"), "{m}");
        let m = err("instances:\n  - name: a\n    typ: x\n");
        assert!(
            m.contains("instances[0]") && m.contains("unknown field `typ`"),
            "{m}"
        );
        let m = err("instances:\n  - name: a\n    state: sleeping\n");
        assert!(
            m.contains("instances[0].state") && m.contains("sleeping"),
            "{m}"
        );
        let m = err("autoDiscover: maybe\n");
        assert!(m.contains("autoDiscover"), "{m}");
        let m = err("instances:\n  - id: x\n");
        assert!(
            m.contains("instances[0]") && m.contains("missing field `name`"),
            "{m}"
        );
        let m =
            err("instances:\n  - name: a\n    addresses: [{type: InternalIP, addr: 1.2.3.4}]\n");
        assert!(m.contains("unknown field `addr`"), "{m}");
        let m = err("faults:\n  create_route: {errorRate: 0.1, kind: explode}\n");
        assert!(
            m.contains("faults.create_route.kind") || m.contains("explode"),
            "{m}"
        );

        // The whole message: our prefix, the field path, the parser's message and position.
        let cases = [
            (
                "instances:\n  - name: a\n    state: sleeping\n",
                "instances[0].state: unknown variant `sleeping`, expected one of running, stopped, \
                 terminated at line 3, column 12",
            ),
            (
                "instances:\n  - name: a\n    addresses: [{type: InternalIP, addr: 1.2.3.4}]\n",
                "instances[0].addresses[0]: unknown field `addr`, expected one of type, address at \
                 line 3, column 36",
            ),
            ("seed: abc\n", "seed: invalid u64 at line 1, column 7"),
            // `yes` is not a boolean, as in YAML 1.2.
            (
                "autoDiscover: yes\n",
                "autoDiscover: invalid boolean (true or false expected) at line 1, column 15",
            ),
            (
                "region: a\nregion: b\n",
                "duplicate mapping key `region` is not allowed here at line 2, column 1",
            ),
            (
                "region: a\n---\nregion: b\n",
                "only single YAML document expected but multiple found at line 3, column 1",
            ),
            // `<<` is no merge key: an unknown field.
            (
                "instances:\n  - &n {name: a}\n  - <<: *n\n    name: b\n",
                "instances[1]: unknown field `<<`, expected one of name, providerID, id, type, zone, \
                 addresses, state, labels at line 3, column 5",
            ),
        ];
        for (yaml, want) in cases {
            assert_eq!(
                err(yaml),
                format!("invalid fake cloud config: {want}"),
                "{yaml}"
            );
        }
    }

    #[test]
    fn anchors_and_aliases_are_resolved() {
        let c = FakeConfig::from_yaml(
            b"zones: &zones [z1, z2]\ninstances:\n  - {name: n1, zone: z2, labels: &team {team: a}}\n  \
              - {name: n2, labels: *team}\nvolumes: [{name: v1, zone: z1}]\n",
        )
        .unwrap();
        assert_eq!(c.effective_zones(), ["z1", "z2"]);
        assert_eq!(c.instances[1].labels, c.instances[0].labels);
        assert_eq!(c.instances[1].labels["team"], "a");
    }

    #[test]
    fn declared_load_balancers_and_routes_parse() {
        let c = FakeConfig::from_yaml(
            br#"
loadBalancerCIDR: 192.0.2.0/29
loadBalancers:
  - serviceUID: 6f0c2b4e-1a2b-4c3d-9e8f-0123456789ab
    service: default/web
    ip: 192.0.2.5
    ports:
      - {name: http, port: 80, nodePort: 30080}
      - {protocol: UDP, port: 53}
    nodes: [node-2, node-1]
  - serviceUID: 11111111-2222-3333-4444-555555555555
    service: shop/api
    cluster: other
routes:
  - targetNode: node-1
    destinationCIDR: 10.244.1.0/24
    targetNodeAddresses: [{type: InternalIP, address: 10.0.0.11}]
  - name: kubernetes-uid-2-fd00-10-244-2---64
    targetNode: node-2
    destinationCIDR: fd00:10:244:2::/64
"#,
        )
        .unwrap();
        let web = &c.load_balancers[0];
        assert_eq!(web.name(), "a6f0c2b4e1a2b4c3d9e8f0123456789a");
        assert_eq!(web.ports[0].protocol, "TCP");
        assert_eq!(web.ports[0].node_port, Some(30080));
        assert_eq!(web.ports[1].name, None);
        assert_eq!(c.load_balancer_cluster(web), "kubernetes");
        assert_eq!(c.load_balancer_cluster(&c.load_balancers[1]), "other");
        // The given IP is taken first; the load balancer without one gets the lowest free address.
        let mut pool = IpPool::new(Cidr::parse(&c.load_balancer_cidr).unwrap());
        let ips = c.load_balancer_ips(&mut pool).unwrap();
        assert_eq!(
            ips,
            ["192.0.2.5", "192.0.2.1"].map(|s| s.parse::<IpAddr>().unwrap())
        );
        assert_eq!(
            c.route_name(&c.routes[0]),
            "kubernetes-node-1-10-244-1-0-24"
        );
        assert_eq!(
            c.route_name(&c.routes[1]),
            "kubernetes-uid-2-fd00-10-244-2---64"
        );
        assert_eq!(c.route_cluster(&c.routes[1]), "kubernetes");
    }

    #[test]
    fn declared_load_balancer_and_route_errors() {
        let m = err("loadBalancers: [{serviceUID: u, service: a/b, nodes: [], ipp: x}]\n");
        assert!(
            m.contains("loadBalancers[0]") && m.contains("unknown field `ipp`"),
            "{m}"
        );
        let m = err("loadBalancers: [{service: a/b}]\n");
        assert!(m.contains("missing field `serviceUID`"), "{m}");
        let m = err("routes: [{targetNode: n, destinationCIDR: 10.0.0.0/24, blackhole: true}]\n");
        assert!(
            m.contains("routes[0]") && m.contains("unknown field `blackhole`"),
            "{m}"
        );
        let m = err("routes: [{targetNode: n}]\n");
        assert!(m.contains("missing field `destinationCIDR`"), "{m}");

        let lb = "loadBalancers:\n  - {serviceUID: 11111111-2222, service: default/web}\n";
        let cases = [
            (
                "loadBalancers: [{serviceUID: ' ', service: default/web}]\n".to_string(),
                "loadBalancers[0].serviceUID: must not be empty",
            ),
            (
                format!("{lb}  - {{serviceUID: 1111111122-22, service: default/api}}\n"),
                "loadBalancers[1].serviceUID: duplicate load balancer name \"a111111112222\" \
                 (that of loadBalancers[0])",
            ),
            (
                "loadBalancers: [{serviceUID: u, service: web}]\n".to_string(),
                "loadBalancers[0].service: \"web\" is not namespace/name",
            ),
            (
                "loadBalancers: [{serviceUID: u, service: a/b/c}]\n".to_string(),
                "loadBalancers[0].service: \"a/b/c\" is not namespace/name",
            ),
            (
                "loadBalancers: [{serviceUID: u, service: a/b, cluster: ''}]\n".to_string(),
                "loadBalancers[0].cluster: must not be empty when given",
            ),
            (
                "loadBalancers: [{serviceUID: u, service: a/b, ports: [{port: 80, protocol: HTTP}]}]\n"
                    .to_string(),
                "loadBalancers[0].ports[0].protocol: \"HTTP\" is not one of TCP, UDP, SCTP",
            ),
            (
                "loadBalancers: [{serviceUID: u, service: a/b, ports: [{port: 0}]}]\n".to_string(),
                "loadBalancers[0].ports[0].port: 0 is not a port number (1-65535)",
            ),
            (
                "loadBalancers: [{serviceUID: u, service: a/b, ports: [{port: 80, nodePort: 70000}]}]\n"
                    .to_string(),
                "loadBalancers[0].ports[0].nodePort: 70000 is not a port number (1-65535)",
            ),
            (
                "loadBalancers: [{serviceUID: u, service: a/b, nodes: [n1, '']}]\n".to_string(),
                "loadBalancers[0].nodes[1]: must not be empty",
            ),
            (
                "loadBalancers: [{serviceUID: u, service: a/b, nodeSet: 0}]\n".to_string(),
                "loadBalancers[0].nodeSet: 0 is not an index of loadBalancerNodeSets (0 sets)",
            ),
            (
                "loadBalancerNodeSets: [[n1]]\nloadBalancers: [{serviceUID: u, service: a/b, nodes: [n1], nodeSet: 0}]\n"
                    .to_string(),
                "loadBalancers[0].nodeSet: give either nodes or nodeSet, not both",
            ),
            (
                "loadBalancerNodeSets: [[n1], [n2, ' ']]\n".to_string(),
                "loadBalancerNodeSets[1][1]: must not be empty",
            ),
            (
                "loadBalancers: [{serviceUID: u, service: a/b, ip: banana}]\n".to_string(),
                "loadBalancers[0].ip: \"banana\" is not an IP address",
            ),
            (
                "loadBalancers: [{serviceUID: u, service: a/b, ip: 10.0.0.1}]\n".to_string(),
                "loadBalancers[0].ip: 10.0.0.1 is not a host address of loadBalancerCIDR \
                 198.51.100.0/24",
            ),
            (
                "loadBalancers: [{serviceUID: u, service: a/b, ip: 198.51.100.255}]\n".to_string(),
                "loadBalancers[0].ip: 198.51.100.255 is not a host address of loadBalancerCIDR \
                 198.51.100.0/24",
            ),
            (
                "loadBalancers:\n  - {serviceUID: u, service: a/b, ip: 198.51.100.7}\n  \
                 - {serviceUID: v, service: a/c, ip: 198.51.100.7}\n"
                    .to_string(),
                "loadBalancers[1].ip: duplicate load balancer IP 198.51.100.7",
            ),
            (
                "loadBalancerCIDR: 192.0.2.0/30\nloadBalancers:\n  - {serviceUID: u, service: a/b}\n  \
                 - {serviceUID: v, service: a/c}\n  - {serviceUID: w, service: a/d, ip: 192.0.2.2}\n"
                    .to_string(),
                "loadBalancers[1].ip: none given and load balancer IP pool 192.0.2.0/30 is exhausted \
                 (2 addresses in use)",
            ),
            (
                "routes: [{targetNode: '', destinationCIDR: 10.244.0.0/24}]\n".to_string(),
                "routes[0].targetNode: must not be empty",
            ),
            (
                "routes: [{targetNode: n, destinationCIDR: 10.244.0.1/24}]\n".to_string(),
                "routes[0].destinationCIDR: \"10.244.0.1/24\" has host bits set",
            ),
            (
                "routes: [{targetNode: n, destinationCIDR: 10.244.0.0}]\n".to_string(),
                "routes[0].destinationCIDR: \"10.244.0.0\" is not a CIDR (address/prefix)",
            ),
            (
                "routes: [{name: '', targetNode: n, destinationCIDR: 10.244.0.0/24}]\n".to_string(),
                "routes[0].name: must not be empty when given",
            ),
            (
                "routes: [{cluster: ' ', targetNode: n, destinationCIDR: 10.244.0.0/24}]\n".to_string(),
                "routes[0].cluster: must not be empty when given",
            ),
            (
                "routes: [{targetNode: n, destinationCIDR: 10.244.0.0/24, \
                 targetNodeAddresses: [{type: InternalIP, address: x}]}]\n"
                    .to_string(),
                "routes[0].targetNodeAddresses[0].address: \"x\" is not an IP address",
            ),
            (
                "routes:\n  - {name: r, targetNode: n1, destinationCIDR: 10.244.1.0/24}\n  \
                 - {name: r, targetNode: n2, destinationCIDR: 10.244.2.0/24}\n"
                    .to_string(),
                "routes[1].name: duplicate route name \"r\"",
            ),
            (
                "routes:\n  - {targetNode: n1, destinationCIDR: 10.244.1.0/24}\n  \
                 - {targetNode: n1, destinationCIDR: 10.244.1.0/24}\n"
                    .to_string(),
                "routes[1].name: duplicate route name \"kubernetes-n1-10-244-1-0-24\"",
            ),
            (
                "routes:\n  - {targetNode: n1, destinationCIDR: 'fd00::/64'}\n  \
                 - {targetNode: n2, destinationCIDR: 'fd00:0::/64'}\n"
                    .to_string(),
                "routes[1].destinationCIDR: destination fd00:0::/64 is already routed by route \
                 \"kubernetes-n1-fd00---64\"",
            ),
        ];
        for (yaml, want) in cases {
            assert_eq!(
                err(&yaml),
                format!("invalid fake cloud config: {want}"),
                "{yaml}"
            );
        }
        // The same destination in another cluster is another route table.
        FakeConfig::from_yaml(
            b"routes:\n  - {targetNode: n1, destinationCIDR: 10.244.1.0/24}\n  \
              - {cluster: other, targetNode: n1, destinationCIDR: 10.244.1.0/24}\n",
        )
        .unwrap();
    }

    #[test]
    fn validation_errors_name_the_field() {
        let cases = [
            ("zones: []\n", "zones: at least one zone"),
            ("zones: [a, a]\n", "zones[1]: duplicate zone"),
            ("region: ''\n", "region: must not be empty"),
            ("instanceTypes: []\n", "instanceTypes: at least one"),
            (
                "defaultInstanceType: huge\n",
                "defaultInstanceType: \"huge\" is not one of",
            ),
            ("loadBalancerCIDR: 10.0.0.0/33\n", "loadBalancerCIDR:"),
            ("loadBalancerCIDR: banana\n", "loadBalancerCIDR:"),
            (
                "adminAddress: 0.0.0.0:9000\n",
                "adminAddress: 0.0.0.0:9000 is not a loopback",
            ),
            ("clusterID: ''\n", "clusterID: must not be empty"),
            (
                "volumes: [{name: v, zone: nowhere}]\n",
                "volumes[0].zone: \"nowhere\" is not a configured zone",
            ),
            (
                "faults: {no_such_op: {errorRate: 0.1}}\n",
                "faults.no_such_op: unknown operation",
            ),
            (
                "faults: {create_route: {errorRate: 1.5}}\n",
                "faults.create_route: errorRate",
            ),
            (
                "instances: [{name: a, zone: nowhere}]\n",
                "instances[0].zone: \"nowhere\" is not a configured zone",
            ),
            (
                "instances: [{name: a, type: huge}]\n",
                "instances[0].type: \"huge\" is not one of",
            ),
            (
                "instances: [{name: a, providerID: 'aws://x'}]\n",
                "instances[0].providerID:",
            ),
            (
                "instances: [{name: a, providerID: 'x'}]\n",
                "instances[0].providerID:",
            ),
            (
                "instances: [{name: a, providerID: 'fake://x', id: x}]\n",
                "instances[0].providerID: give either",
            ),
            (
                "instances: [{name: a}, {name: a, id: b}]\n",
                "instances[1].name: duplicate instance name",
            ),
            (
                "instances: [{name: a}, {name: b, id: a}]\n",
                "instances[1]: duplicate instance ID",
            ),
            (
                "instances: [{name: a, addresses: [{type: Public, address: x}]}]\n",
                "instances[0].addresses[0].type",
            ),
            (
                "instances: [{name: a, addresses: [{type: InternalIP, address: x}]}]\n",
                "instances[0].addresses[0].address: \"x\" is not an IP",
            ),
        ];
        for (yaml, want) in cases {
            let m = err(yaml);
            assert!(m.starts_with("invalid fake cloud config: "), "{yaml}: {m}");
            assert!(m.contains(want), "{yaml}: got {m:?}, want {want:?}");
        }
    }
}
