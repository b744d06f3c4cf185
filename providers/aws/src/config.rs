//! The provider's `--cloud-config` file: an INI file with a `[Global]` section and any number of
//! `[ServiceOverride "N"]` sections (custom endpoints, for example a local AWS API emulator).
//!
//! Every key of upstream's cloud config is accepted and does what it does upstream (a `SigningName` other
//! than the service's own, which this provider cannot sign as, fails start-up saying why). Every key is
//! checked when the provider is built: a repeated key or a bad value is an error naming the key and its line.
//! A section or key upstream does not know is ignored, as upstream ignores it, and listed in
//! [`CloudConfig::ignored`], which the provider logs as a warning naming the key and its line (a typo shows
//! in the log instead of silently dropping a setting).
//!
//! ```
//! use provider_aws::CloudConfig;
//!
//! let cfg = CloudConfig::parse(br#"
//! [Global]
//! Region = eu-west-1
//! KubernetesClusterID = prod
//! DisableSecurityGroupIngress = true
//!
//! [ServiceOverride "1"]
//! Service = ec2
//! Region = eu-west-1
//! URL = http://127.0.0.1:5000
//! SigningRegion = eu-west-1
//! "#).unwrap();
//! assert_eq!(cfg.region.as_deref(), Some("eu-west-1"));
//! assert!(cfg.disable_security_group_ingress);
//! assert_eq!(cfg.service_overrides.len(), 1);
//!
//! let typo = CloudConfig::parse(b"[Global]\nRegoin = eu-west-1\n").unwrap();
//! assert!(typo.ignored[0].contains("Regoin"));
//! ```

use std::time::Duration;

use crate::ini::{self, Entry, Section, SyntaxError};

/// The AWS services whose endpoints a `[ServiceOverride]` section may replace, by the names upstream
/// matches: the SDK service IDs of aws-sdk-go-v2 (`EC2`, `Elastic Load Balancing`, `Elastic Load Balancing
/// v2`, `KMS`, `ec2imds`) and the endpoint IDs of the older aws-sdk-go (`ec2`, `elasticloadbalancing`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AwsService {
    /// EC2 (`EC2`, `ec2`): instances, subnets, route tables, security groups, volumes.
    Ec2,
    /// Both Elastic Load Balancing APIs (`elasticloadbalancing`, the endpoint ID they share).
    ElasticLoadBalancing,
    /// Elastic Load Balancing for classic load balancers (`Elastic Load Balancing`).
    ElasticLoadBalancingClassic,
    /// Elastic Load Balancing v2 for network load balancers (`Elastic Load Balancing v2`,
    /// `elasticloadbalancingv2`, `elbv2`).
    ElasticLoadBalancingV2,
    /// STS (`sts`): role assumption for `RoleARN` (upstream cannot override it).
    Sts,
    /// The instance metadata service (`ec2imds`); the override's region is not compared, as upstream.
    Imds,
    /// A service this provider never calls (`KMS`, or any other name upstream accepts and ignores).
    Unused,
}

impl AwsService {
    /// Reads a `Service = ...` value.
    fn parse(value: &str) -> Self {
        match value {
            "EC2" => return AwsService::Ec2,
            "Elastic Load Balancing" => return AwsService::ElasticLoadBalancingClassic,
            "Elastic Load Balancing v2" => return AwsService::ElasticLoadBalancingV2,
            "ec2imds" => return AwsService::Imds,
            _ => {}
        }
        match value.to_ascii_lowercase().as_str() {
            "ec2" => AwsService::Ec2,
            "elasticloadbalancing" => AwsService::ElasticLoadBalancing,
            "elasticloadbalancingv2" | "elbv2" => AwsService::ElasticLoadBalancingV2,
            "sts" => AwsService::Sts,
            _ => AwsService::Unused,
        }
    }

    /// Whether an override of `self` redirects the requests of `client` (one of the services a client
    /// calls: EC2, either load-balancing API, STS or IMDS).
    pub fn covers(self, client: AwsService) -> bool {
        self == client
            || (self == AwsService::ElasticLoadBalancing
                && matches!(
                    client,
                    AwsService::ElasticLoadBalancingClassic | AwsService::ElasticLoadBalancingV2
                ))
    }

    fn overlaps(self, other: AwsService) -> bool {
        self != AwsService::Unused && (self.covers(other) || other.covers(self))
    }
}

/// An IP family of node addresses (`NodeIPFamilies`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpFamily {
    /// IPv4 addresses.
    Ipv4,
    /// IPv6 addresses.
    Ipv6,
}

/// How the SDK retries failed requests (`RetryMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RetryMode {
    /// Exponential backoff with jitter, bounded by a retry quota (the SDK's standard mode).
    #[default]
    Standard,
    /// Standard retries plus a client-side rate limiter that slows down after throttling responses.
    Adaptive,
}

/// A `[ServiceOverride "N"]` section: requests to `service` in `region` go to `url`, signed for
/// `signing_region`. `SigningName` may only name the service's own signing name (or be empty), and
/// `SigningMethod` is read and ignored, as upstream ignores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceOverride {
    /// The section's name (the `N` in `[ServiceOverride "N"]`).
    pub name: String,
    /// The `Service` value as written.
    pub service_name: String,
    /// The service whose endpoint is replaced.
    pub service: AwsService,
    /// The region the override applies to.
    pub region: String,
    /// The endpoint URL.
    pub url: String,
    /// The region requests are signed for.
    pub signing_region: String,
}

/// Default for `MaxAttempts`.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;
/// Default for `InstanceCacheTTL`.
pub const DEFAULT_INSTANCE_CACHE_TTL: Duration = Duration::from_secs(30);
/// Default for `SecurityGroupRulesLimit`: AWS's default quota of inbound (and of outbound) rules per security
/// group.
pub const DEFAULT_SECURITY_GROUP_RULES_LIMIT: u32 = 60;
/// The highest `SecurityGroupRulesLimit`: AWS's ceiling of rules per group times groups per network interface
/// (1,000) with a single group per interface.
pub const MAX_SECURITY_GROUP_RULES_LIMIT: u32 = 1000;

/// The parsed cloud-config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudConfig {
    /// `Zone`: the availability zone this process runs in (otherwise read from the instance metadata service).
    pub zone: Option<String>,
    /// `Region`: the AWS region (otherwise from the environment, the profile or the instance metadata service).
    pub region: Option<String>,
    /// `VPC`: the cluster's VPC (otherwise the VPC of the nodes' instances).
    pub vpc: Option<String>,
    /// `SubnetID`: the subnet load balancers fall back to when no subnet is tagged for the cluster.
    pub subnet_id: Option<String>,
    /// `RouteTableID`: the route table for pod routes (otherwise the single table tagged for the cluster).
    pub route_table_id: Option<String>,
    /// `RoleARN`: a role to assume, with credentials from the default chain.
    pub role_arn: Option<String>,
    /// `SourceARN`: sent as `x-amz-source-arn` when assuming `RoleARN` (for the role's confused-deputy
    /// conditions); the role's account always goes as `x-amz-source-account`.
    pub source_arn: Option<String>,
    /// `KubernetesClusterTag`: the legacy cluster ID, the value of the `KubernetesCluster` tag.
    pub kubernetes_cluster_tag: Option<String>,
    /// `KubernetesClusterID`: the cluster ID in `kubernetes.io/cluster/<id>` tags.
    pub kubernetes_cluster_id: Option<String>,
    /// `DisableSecurityGroupIngress`: never add load-balancer rules to the nodes' security groups.
    pub disable_security_group_ingress: bool,
    /// `ElbSecurityGroup`: the security group attached to classic load balancers without a
    /// `service.beta.kubernetes.io/aws-load-balancer-security-groups` annotation; never attached to network
    /// load balancers, and never changed by node-rule syncs.
    pub elb_security_group: Option<String>,
    /// `NodeIPFamilies`: the address families reported for nodes, in order (default IPv4 only).
    pub node_ip_families: Vec<IpFamily>,
    /// `RetryMode`: `standard` (default) or `adaptive`.
    pub retry_mode: RetryMode,
    /// `MaxAttempts`: attempts per request including the first (default 5).
    pub max_attempts: u32,
    /// `InstanceCacheTTL`: how stale cached instance data may be for the node lifecycle and address loops
    /// (default 30s; `0` disables the cache).
    pub instance_cache_ttl: Duration,
    /// `SecurityGroupRulesLimit`: the rules a security group may hold per direction (and per IP family), as
    /// the account's quota allows; `None` when not set (then [`DEFAULT_SECURITY_GROUP_RULES_LIMIT`], see
    /// [`CloudConfig::security_group_rules_limit`]).
    pub security_group_rules_limit: Option<u32>,
    /// The `[ServiceOverride "N"]` sections, in file order.
    pub service_overrides: Vec<ServiceOverride>,
    /// `ClusterServiceLoadBalancerHealthProbeMode` with `ClusterServiceSharedLoadBalancerHealthProbePort` and
    /// `...Path`: how load balancers (classic and network) of `externalTrafficPolicy: Cluster` Services check
    /// nodes.
    pub cluster_health_probe: ClusterHealthProbe,
    /// `NLBSecurityGroupMode`: with `Managed` each network load balancer gets a security group of its own,
    /// which admits its clients (see [`crate::load_balancer::nlb_security_group`]).
    pub nlb_security_group_mode: NlbSecurityGroupMode,
    /// `SupportedTopologyInstanceTypePattern`: instance types whose nodes must get their network topology
    /// labels (`topology.k8s.aws/network-node-layer-N`) before they are initialized.
    pub topology_instance_types: TopologyPattern,
    /// The sections and keys upstream does not know, ignored (as upstream ignores them), each with its line.
    pub ignored: Vec<String>,
}

/// The instance types that support EC2's instance topology, as a regular expression (upstream's default
/// when not configured).
#[derive(Debug, Clone)]
pub struct TopologyPattern(regex::Regex);

/// Upstream's default `SupportedTopologyInstanceTypePattern`.
pub const DEFAULT_TOPOLOGY_PATTERN: &str = r"^(hpc|trn|p)[0-9]+[a-z]*(-[a-z0-9]+)?(\.[0-9a-z]*)$";

impl TopologyPattern {
    /// The pattern `text`.
    pub fn new(text: &str) -> Result<Self, regex::Error> {
        regex::Regex::new(text).map(TopologyPattern)
    }

    /// Whether instances of `instance_type` must have a topology.
    pub fn matches(&self, instance_type: &str) -> bool {
        self.0.is_match(instance_type)
    }

    /// The pattern's text.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl Default for TopologyPattern {
    fn default() -> Self {
        TopologyPattern(
            regex::Regex::new(DEFAULT_TOPOLOGY_PATTERN).expect("the default pattern parses"),
        )
    }
}

impl PartialEq for TopologyPattern {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for TopologyPattern {}

/// How load balancers of `externalTrafficPolicy: Cluster` Services check their nodes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ClusterHealthProbe {
    /// Each Service's own node port (upstream's default, `ServiceNodePort`).
    #[default]
    ServiceNodePort,
    /// One HTTP endpoint shared by every Service, kube-proxy's health port by default (`Shared`).
    Shared {
        /// The port (default 10256).
        port: i32,
        /// The path (default `/healthz`).
        path: String,
    },
}

/// Default port of the shared health probe (kube-proxy's health-check port).
pub const DEFAULT_SHARED_PROBE_PORT: i32 = 10256;
/// Default path of the shared health probe.
pub const DEFAULT_SHARED_PROBE_PATH: &str = "/healthz";

impl Default for CloudConfig {
    fn default() -> Self {
        CloudConfig {
            zone: None,
            region: None,
            vpc: None,
            subnet_id: None,
            route_table_id: None,
            role_arn: None,
            source_arn: None,
            kubernetes_cluster_tag: None,
            kubernetes_cluster_id: None,
            disable_security_group_ingress: false,
            elb_security_group: None,
            node_ip_families: vec![IpFamily::Ipv4],
            retry_mode: RetryMode::Standard,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            instance_cache_ttl: DEFAULT_INSTANCE_CACHE_TTL,
            security_group_rules_limit: None,
            service_overrides: Vec::new(),
            ignored: Vec::new(),
            cluster_health_probe: ClusterHealthProbe::default(),
            nlb_security_group_mode: NlbSecurityGroupMode::Unmanaged,
            topology_instance_types: TopologyPattern::default(),
        }
    }
}

/// Why a cloud-config file was refused. Every message names the offending section, key and line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file is not UTF-8.
    #[error("cloud config is not valid UTF-8")]
    NotUtf8,
    /// The file is not valid INI.
    #[error("cloud config {0}")]
    Syntax(#[from] SyntaxError),
    /// A section other than `[Global]` and `[ServiceOverride "N"]`.
    #[error(
        "cloud config line {line}: unknown section {header} (allowed: [Global], [ServiceOverride \"N\"])"
    )]
    UnknownSection {
        /// The header as written.
        header: String,
        /// Its line.
        line: usize,
    },
    /// A key the section does not have.
    #[error("cloud config line {line}: unknown key {key:?} in {section} (allowed: {allowed})")]
    UnknownKey {
        /// The section header.
        section: String,
        /// The key as written.
        key: String,
        /// Its line.
        line: usize,
        /// The keys the section accepts.
        allowed: String,
    },
    /// A key given twice where only one value is allowed (the last one is used, as upstream's parser
    /// does; listed in [`CloudConfig::ignored`]).
    #[error("cloud config line {line}: key {key} is given more than once in {section}")]
    DuplicateKey {
        /// The section header.
        section: String,
        /// The key.
        key: String,
        /// The line of the repetition.
        line: usize,
    },
    /// A key with a value it cannot have.
    #[error(
        "cloud config line {line}: invalid value {value:?} for key {key} in {section}: {reason}"
    )]
    InvalidValue {
        /// The section header.
        section: String,
        /// The key.
        key: String,
        /// The value as written.
        value: String,
        /// Its line.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// A required key is missing.
    #[error("cloud config: key {key} is required in {section} (line {line})")]
    MissingKey {
        /// The section header.
        section: String,
        /// The missing key.
        key: String,
        /// The line of the section header.
        line: usize,
    },
    /// A key this provider cannot honour with the value given.
    #[error("cloud config line {line}: key {key} in {section} is not supported: {reason}")]
    Unsupported {
        /// The section header.
        section: String,
        /// The key.
        key: String,
        /// Its line.
        line: usize,
        /// Why it cannot be honoured.
        reason: String,
    },
    /// `KubernetesClusterID` and `KubernetesClusterTag` name different clusters.
    #[error(
        "cloud config: KubernetesClusterID {id:?} and KubernetesClusterTag {legacy:?} differ (clusterID tags did not match)"
    )]
    ClusterIdsDiffer {
        /// `KubernetesClusterID`.
        id: String,
        /// `KubernetesClusterTag`.
        legacy: String,
    },
    /// Two sections override the same service in the same region.
    #[error(
        "cloud config: {section} overrides service {service} in region {region} again (already overridden by {first})"
    )]
    DuplicateOverride {
        /// The second section.
        section: String,
        /// The first section.
        first: String,
        /// The service.
        service: String,
        /// The region.
        region: String,
    },
}

/// The keys of `[Global]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GlobalKey {
    Zone,
    Region,
    Vpc,
    SubnetId,
    RouteTableId,
    RoleArn,
    SourceArn,
    KubernetesClusterTag,
    KubernetesClusterId,
    DisableSecurityGroupIngress,
    ElbSecurityGroup,
    NodeIpFamilies,
    RetryMode,
    MaxAttempts,
    InstanceCacheTtl,
    SecurityGroupRulesLimit,
    HealthProbeMode,
    SharedHealthProbePort,
    SharedHealthProbePath,
    TopologyPattern,
    NlbSecurityGroupMode,
}

const GLOBAL_KEYS: &[(&str, GlobalKey)] = &[
    ("Zone", GlobalKey::Zone),
    ("Region", GlobalKey::Region),
    ("VPC", GlobalKey::Vpc),
    ("SubnetID", GlobalKey::SubnetId),
    ("RouteTableID", GlobalKey::RouteTableId),
    ("RoleARN", GlobalKey::RoleArn),
    ("SourceARN", GlobalKey::SourceArn),
    ("KubernetesClusterTag", GlobalKey::KubernetesClusterTag),
    ("KubernetesClusterID", GlobalKey::KubernetesClusterId),
    (
        "DisableSecurityGroupIngress",
        GlobalKey::DisableSecurityGroupIngress,
    ),
    ("ElbSecurityGroup", GlobalKey::ElbSecurityGroup),
    ("NodeIPFamilies", GlobalKey::NodeIpFamilies),
    ("RetryMode", GlobalKey::RetryMode),
    ("MaxAttempts", GlobalKey::MaxAttempts),
    ("InstanceCacheTTL", GlobalKey::InstanceCacheTtl),
    (
        "SecurityGroupRulesLimit",
        GlobalKey::SecurityGroupRulesLimit,
    ),
    (
        "ClusterServiceLoadBalancerHealthProbeMode",
        GlobalKey::HealthProbeMode,
    ),
    (
        "ClusterServiceSharedLoadBalancerHealthProbePort",
        GlobalKey::SharedHealthProbePort,
    ),
    (
        "ClusterServiceSharedLoadBalancerHealthProbePath",
        GlobalKey::SharedHealthProbePath,
    ),
    (
        "SupportedTopologyInstanceTypePattern",
        GlobalKey::TopologyPattern,
    ),
    ("NLBSecurityGroupMode", GlobalKey::NlbSecurityGroupMode),
];

/// The keys of `[ServiceOverride "N"]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OverrideKey {
    Service,
    Region,
    Url,
    SigningRegion,
    SigningName,
    SigningMethod,
}

const OVERRIDE_KEYS: &[(&str, OverrideKey)] = &[
    ("Service", OverrideKey::Service),
    ("Region", OverrideKey::Region),
    ("URL", OverrideKey::Url),
    ("SigningRegion", OverrideKey::SigningRegion),
    ("SigningName", OverrideKey::SigningName),
    ("SigningMethod", OverrideKey::SigningMethod),
];

/// A key's value with its section and line, for error messages.
struct Value<'a> {
    section: &'a str,
    key: &'static str,
    entry: &'a Entry,
}

impl Value<'_> {
    fn text(&self) -> &str {
        self.entry.value.as_deref().unwrap_or("")
    }

    fn invalid(&self, reason: impl Into<String>) -> ConfigError {
        ConfigError::InvalidValue {
            section: self.section.to_string(),
            key: self.key.to_string(),
            value: self.text().to_string(),
            line: self.entry.line,
            reason: reason.into(),
        }
    }

    /// A non-empty single token.
    fn word(&self) -> Result<String, ConfigError> {
        let text = self.text().trim();
        if text.is_empty() {
            return Err(self.invalid("must not be empty"));
        }
        if text.chars().any(char::is_whitespace) {
            return Err(self.invalid("must not contain spaces"));
        }
        Ok(text.to_string())
    }

    /// A resource ID with the given prefix, e.g. `vpc-`.
    fn id(&self, prefix: &str) -> Result<String, ConfigError> {
        let text = self.word()?;
        let ok = text.strip_prefix(prefix).is_some_and(|rest| {
            !rest.is_empty() && rest.chars().all(|c| c.is_ascii_alphanumeric())
        });
        if !ok {
            return Err(self.invalid(format!("must be an ID of the form {prefix}<hex digits>")));
        }
        Ok(text)
    }

    fn bool(&self) -> Result<bool, ConfigError> {
        match self.entry.value.as_deref().map(str::trim) {
            None => Ok(true),
            Some(v) => match v.to_ascii_lowercase().as_str() {
                "true" | "yes" | "on" | "1" => Ok(true),
                "false" | "no" | "off" | "0" => Ok(false),
                _ => Err(self.invalid("must be true or false")),
            },
        }
    }
}

/// The health-probe keys as read, resolved once the section is read (their order does not matter).
#[derive(Default)]
struct ProbeKeys {
    shared: bool,
    port: Option<i32>,
    path: Option<String>,
}

impl ProbeKeys {
    /// A `ClusterServiceLoadBalancerHealthProbeMode`, `...Port` or `...Path` entry.
    fn apply(&mut self, key: GlobalKey, v: &Value<'_>) -> Result<(), ConfigError> {
        match key {
            GlobalKey::HealthProbeMode => {
                self.shared = match v.text().trim() {
                    "" | "ServiceNodePort" => false,
                    "Shared" => true,
                    _ => return Err(v.invalid("must be ServiceNodePort or Shared")),
                }
            }
            GlobalKey::SharedHealthProbePort => {
                self.port = match v.text().trim().parse::<i32>() {
                    Ok(0) => None,
                    Ok(n @ 1..=65535) => Some(n),
                    _ => return Err(v.invalid("must be a port number from 1 to 65535")),
                }
            }
            // GlobalKey::SharedHealthProbePath, the one key left.
            _ => {
                let path = v.text().trim();
                if !path.is_empty()
                    && (!path.starts_with('/') || path.contains(char::is_whitespace))
                {
                    return Err(v.invalid("must be a path starting with /"));
                }
                self.path = Some(path.to_string()).filter(|p| !p.is_empty());
            }
        }
        Ok(())
    }

    fn resolve(&self) -> ClusterHealthProbe {
        if !self.shared {
            return ClusterHealthProbe::ServiceNodePort;
        }
        ClusterHealthProbe::Shared {
            port: self.port.unwrap_or(DEFAULT_SHARED_PROBE_PORT),
            path: self
                .path
                .clone()
                .unwrap_or_else(|| DEFAULT_SHARED_PROBE_PATH.to_string()),
        }
    }
}

impl CloudConfig {
    /// Parses and validates a cloud-config file.
    pub fn parse(bytes: &[u8]) -> Result<Self, ConfigError> {
        let text = std::str::from_utf8(bytes).map_err(|_| ConfigError::NotUtf8)?;
        let sections = ini::parse(text)?;
        let mut config = CloudConfig::default();
        let mut families_seen = false;
        let mut probe = ProbeKeys::default();
        for section in &sections {
            if section.name.eq_ignore_ascii_case("Global") && section.subsection.is_none() {
                config.apply_global(section, &mut families_seen, &mut probe)?;
            } else if section.name.eq_ignore_ascii_case("ServiceOverride") {
                let over = parse_override(section, &mut config.ignored)?;
                if let Some(first) = config.service_overrides.iter().find(|o| {
                    o.service.overlaps(over.service)
                        && (o.region == over.region || over.service == AwsService::Imds)
                }) {
                    return Err(ConfigError::DuplicateOverride {
                        section: section.header(),
                        first: format!("[ServiceOverride {:?}]", first.name),
                        service: over.service_name,
                        region: over.region,
                    });
                }
                config.service_overrides.push(over);
            } else {
                config.ignored.push(ignored(ConfigError::UnknownSection {
                    header: section.header(),
                    line: section.line,
                }));
            }
        }
        if let (Some(id), Some(legacy)) = (
            &config.kubernetes_cluster_id,
            &config.kubernetes_cluster_tag,
        ) && id != legacy
        {
            return Err(ConfigError::ClusterIdsDiffer {
                id: id.clone(),
                legacy: legacy.clone(),
            });
        }
        Ok(config)
    }

    fn apply_global(
        &mut self,
        section: &Section,
        families_seen: &mut bool,
        probe: &mut ProbeKeys,
    ) -> Result<(), ConfigError> {
        let header = section.header();
        let mut seen: Vec<GlobalKey> = Vec::new();
        for entry in &section.entries {
            let (name, key) = match canonical_key(&header, entry, GLOBAL_KEYS) {
                Ok(known) => known,
                Err(unknown) => {
                    self.ignored.push(ignored(unknown));
                    continue;
                }
            };
            if key != GlobalKey::NodeIpFamilies {
                if seen.contains(&key) {
                    self.ignored.push(repeated(ConfigError::DuplicateKey {
                        section: header.clone(),
                        key: name.to_string(),
                        line: entry.line,
                    }));
                }
                seen.push(key);
            }
            let v = Value {
                section: &header,
                key: name,
                entry,
            };
            self.apply_global_key(key, &v, families_seen, probe)?;
        }
        self.cluster_health_probe = probe.resolve();
        Ok(())
    }

    /// One `[Global]` entry.
    fn apply_global_key(
        &mut self,
        key: GlobalKey,
        v: &Value<'_>,
        families_seen: &mut bool,
        probe: &mut ProbeKeys,
    ) -> Result<(), ConfigError> {
        match key {
            GlobalKey::Zone => self.zone = Some(v.word()?),
            GlobalKey::Region => self.region = Some(v.word()?),
            GlobalKey::Vpc => self.vpc = Some(v.id("vpc-")?),
            GlobalKey::SubnetId => self.subnet_id = Some(v.id("subnet-")?),
            GlobalKey::RouteTableId => self.route_table_id = Some(v.id("rtb-")?),
            GlobalKey::RoleArn => self.role_arn = Some(role_arn(v)?),
            GlobalKey::SourceArn => self.source_arn = Some(v.word()?),
            GlobalKey::TopologyPattern => {
                self.topology_instance_types = TopologyPattern::new(v.text().trim())
                    .map_err(|err| v.invalid(format!("not a regular expression: {err}")))?
            }
            GlobalKey::NlbSecurityGroupMode => {
                self.nlb_security_group_mode = NlbSecurityGroupMode::parse(v.text())
            }
            GlobalKey::KubernetesClusterTag => {
                self.kubernetes_cluster_tag = Some(legacy_cluster_id(v)?)
            }
            GlobalKey::KubernetesClusterId => self.kubernetes_cluster_id = Some(cluster_id(v)?),
            GlobalKey::DisableSecurityGroupIngress => {
                self.disable_security_group_ingress = v.bool()?
            }
            GlobalKey::ElbSecurityGroup => self.elb_security_group = Some(v.id("sg-")?),
            GlobalKey::NodeIpFamilies => self.add_node_ip_families(v, families_seen)?,
            GlobalKey::RetryMode => {
                self.retry_mode = match v.text().trim().to_ascii_lowercase().as_str() {
                    "standard" => RetryMode::Standard,
                    "adaptive" => RetryMode::Adaptive,
                    _ => return Err(v.invalid("must be standard or adaptive")),
                }
            }
            GlobalKey::MaxAttempts => {
                self.max_attempts = match v.text().trim().parse::<u32>() {
                    Ok(n @ 1..=20) => n,
                    _ => return Err(v.invalid("must be a whole number from 1 to 20")),
                }
            }
            GlobalKey::InstanceCacheTtl => {
                self.instance_cache_ttl = parse_duration(v.text().trim()).ok_or_else(|| {
                    v.invalid("must be a duration such as 30s, 2m or 0 (at most 1h)")
                })?
            }
            GlobalKey::SecurityGroupRulesLimit => {
                self.security_group_rules_limit = Some(rules_limit(v)?)
            }
            GlobalKey::HealthProbeMode
            | GlobalKey::SharedHealthProbePort
            | GlobalKey::SharedHealthProbePath => probe.apply(key, v)?,
        }
        Ok(())
    }

    /// A `NodeIPFamilies` entry: the first one replaces the default, later ones add to it.
    fn add_node_ip_families(
        &mut self,
        v: &Value<'_>,
        families_seen: &mut bool,
    ) -> Result<(), ConfigError> {
        if !*families_seen {
            self.node_ip_families.clear();
            *families_seen = true;
        }
        for item in v.text().split(',').map(str::trim) {
            let family = match item.to_ascii_lowercase().as_str() {
                "ipv4" => IpFamily::Ipv4,
                "ipv6" => IpFamily::Ipv6,
                _ => return Err(v.invalid("each family must be ipv4 or ipv6")),
            };
            if self.node_ip_families.contains(&family) {
                return Err(v.invalid("a family is listed twice"));
            }
            self.node_ip_families.push(family);
        }
        Ok(())
    }

    /// The rules a security group may hold per direction and IP family: `SecurityGroupRulesLimit`, else
    /// [`DEFAULT_SECURITY_GROUP_RULES_LIMIT`].
    pub fn security_group_rules_limit(&self) -> u32 {
        self.security_group_rules_limit
            .unwrap_or(DEFAULT_SECURITY_GROUP_RULES_LIMIT)
    }

    /// The override redirecting the requests of a client of `service` in `region`, if any (the region does
    /// not matter for the instance metadata service).
    pub fn service_override(&self, service: AwsService, region: &str) -> Option<&ServiceOverride> {
        self.service_overrides.iter().find(|o| {
            o.service.covers(service) && (o.region == region || service == AwsService::Imds)
        })
    }
}

/// `RoleARN`: an IAM role ARN.
fn role_arn(v: &Value<'_>) -> Result<String, ConfigError> {
    let arn = v.word()?;
    if !arn.starts_with("arn:") || !arn.contains(":role/") {
        return Err(
            v.invalid("must be an IAM role ARN (arn:<partition>:iam::<account>:role/<name>)")
        );
    }
    Ok(arn)
}

/// `NLBSecurityGroupMode`: empty (network load balancers get no security group) or `Managed`, exactly as
/// upstream spells it. As upstream, another value does not stop start-up: it fails the sync of every network
/// load balancer with upstream's error (their deletion still works), and the provider warns at start.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum NlbSecurityGroupMode {
    /// Empty or absent: no security group.
    #[default]
    Unmanaged,
    /// `Managed`.
    Managed,
    /// Another value, with upstream's error about it.
    Invalid(String),
}

impl NlbSecurityGroupMode {
    fn parse(text: &str) -> Self {
        match text.trim() {
            "" => NlbSecurityGroupMode::Unmanaged,
            "Managed" => NlbSecurityGroupMode::Managed,
            other => NlbSecurityGroupMode::Invalid(format!(
                "invalid NLB security group mode: {other:?}. Expected: \"Managed\""
            )),
        }
    }
}

/// A `SecurityGroupRulesLimit` value: a whole number from 1 to [`MAX_SECURITY_GROUP_RULES_LIMIT`].
fn rules_limit(v: &Value<'_>) -> Result<u32, ConfigError> {
    match v.text().trim().parse::<u32>() {
        Ok(n @ 1..=MAX_SECURITY_GROUP_RULES_LIMIT) => Ok(n),
        _ => Err(v.invalid(format!(
            "must be a whole number from 1 to {MAX_SECURITY_GROUP_RULES_LIMIT} (the account's quota of \
             rules per security group; AWS's default is {DEFAULT_SECURITY_GROUP_RULES_LIMIT})"
        ))),
    }
}

/// The message of a section or key that is ignored.
fn ignored(unknown: ConfigError) -> String {
    format!("{unknown}; ignored, as upstream ignores it")
}

/// The message of a key given again, whose last value is used.
fn repeated(duplicate: ConfigError) -> String {
    format!("{duplicate}; the last value is used, as upstream uses it")
}

fn canonical_key<K: Copy>(
    header: &str,
    entry: &Entry,
    allowed: &[(&'static str, K)],
) -> Result<(&'static str, K), ConfigError> {
    allowed
        .iter()
        .copied()
        .find(|(name, _)| name.eq_ignore_ascii_case(&entry.key))
        .ok_or_else(|| ConfigError::UnknownKey {
            section: header.to_string(),
            key: entry.key.clone(),
            line: entry.line,
            allowed: allowed
                .iter()
                .map(|(name, _)| *name)
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// A cluster ID: it becomes part of the tag key `kubernetes.io/cluster/<id>` (at most 128 characters of
/// letters, digits, spaces and `_ . : / = + - @`).
fn cluster_id(v: &Value<'_>) -> Result<String, ConfigError> {
    let id = v.word()?;
    let max = 128 - crate::tagging::TAG_CLUSTER_PREFIX.len();
    if id.len() > max || !id.chars().all(tag_char) {
        return Err(v.invalid(format!(
            "must be at most {max} letters, digits or '_ . : / = + - @' (it becomes part of a tag key)"
        )));
    }
    Ok(id)
}

/// The legacy cluster ID: the value of the `KubernetesCluster` tag (at most 256 characters of letters,
/// digits, spaces and `_ . : / = + - @`).
fn legacy_cluster_id(v: &Value<'_>) -> Result<String, ConfigError> {
    let id = v.word()?;
    if id.len() > 256 || !id.chars().all(tag_char) {
        return Err(v.invalid(
            "must be at most 256 letters, digits or '_ . : / = + - @' (it becomes a tag value)",
        ));
    }
    Ok(id)
}

fn tag_char(c: char) -> bool {
    c.is_alphanumeric() || "_.:/=+-@".contains(c)
}

/// The signing name of the service's own requests, which `SigningName` may repeat.
fn own_signing_name(service: AwsService) -> Option<&'static str> {
    match service {
        AwsService::Ec2 => Some("ec2"),
        AwsService::ElasticLoadBalancing
        | AwsService::ElasticLoadBalancingClassic
        | AwsService::ElasticLoadBalancingV2 => Some("elasticloadbalancing"),
        AwsService::Sts => Some("sts"),
        AwsService::Imds | AwsService::Unused => None,
    }
}

/// The values of one `[ServiceOverride]` section as read.
#[derive(Default)]
struct OverrideValues {
    service: Option<String>,
    region: Option<String>,
    url: Option<String>,
    signing_region: Option<String>,
    signing_name: Option<String>,
    signing_method: Option<String>,
}

impl OverrideValues {
    fn slot(&mut self, key: OverrideKey) -> &mut Option<String> {
        match key {
            OverrideKey::Service => &mut self.service,
            OverrideKey::Region => &mut self.region,
            OverrideKey::Url => &mut self.url,
            OverrideKey::SigningRegion => &mut self.signing_region,
            OverrideKey::SigningName => &mut self.signing_name,
            OverrideKey::SigningMethod => &mut self.signing_method,
        }
    }
}

/// One value of a `[ServiceOverride]` section, checked.
fn override_value(key: OverrideKey, v: &Value<'_>) -> Result<String, ConfigError> {
    match key {
        // Upstream's service IDs contain spaces ("Elastic Load Balancing v2").
        OverrideKey::Service => {
            let text = v.text().trim();
            if text.is_empty() {
                return Err(v.invalid("must not be empty"));
            }
            Ok(text.to_string())
        }
        OverrideKey::Url => {
            let text = v.word()?;
            let rest = text
                .strip_prefix("http://")
                .or_else(|| text.strip_prefix("https://"));
            if rest.is_none_or(|r| r.is_empty() || r.starts_with('/')) {
                return Err(v.invalid("must be an http:// or https:// URL with a host"));
            }
            Ok(text)
        }
        // Empty means the service's own; the method is never used (as upstream).
        OverrideKey::SigningName | OverrideKey::SigningMethod => Ok(v.text().trim().to_string()),
        OverrideKey::Region | OverrideKey::SigningRegion => v.word(),
    }
}

fn parse_override(
    section: &Section,
    ignored_keys: &mut Vec<String>,
) -> Result<ServiceOverride, ConfigError> {
    let header = section.header();
    let mut values = OverrideValues::default();
    let mut signing_name_line = 0;
    for entry in &section.entries {
        let (name, key) = match canonical_key(&header, entry, OVERRIDE_KEYS) {
            Ok(known) => known,
            Err(unknown) => {
                ignored_keys.push(ignored(unknown));
                continue;
            }
        };
        let v = Value {
            section: &header,
            key: name,
            entry,
        };
        let slot = values.slot(key);
        if slot.is_some() {
            ignored_keys.push(repeated(ConfigError::DuplicateKey {
                section: header.clone(),
                key: name.to_string(),
                line: entry.line,
            }));
        }
        *slot = Some(override_value(key, &v)?);
        if key == OverrideKey::SigningName {
            signing_name_line = entry.line;
        }
    }
    let missing = |key: &str| ConfigError::MissingKey {
        section: header.clone(),
        key: key.to_string(),
        line: section.line,
    };
    let service_name = values.service.ok_or_else(|| missing("Service"))?;
    let service = AwsService::parse(&service_name);
    let signing_name = values.signing_name.unwrap_or_default();
    if let Some(own) = own_signing_name(service)
        && !signing_name.is_empty()
        && signing_name != own
    {
        return Err(ConfigError::Unsupported {
            section: header.clone(),
            key: "SigningName".to_string(),
            line: signing_name_line,
            reason: format!(
                "requests to {service_name} can only be signed as {own:?} by this provider (leave it empty)"
            ),
        });
    }
    Ok(ServiceOverride {
        name: section.subsection.clone().unwrap_or_default(),
        service_name,
        service,
        region: values.region.ok_or_else(|| missing("Region"))?,
        url: values.url.ok_or_else(|| missing("URL"))?,
        signing_region: values
            .signing_region
            .ok_or_else(|| missing("SigningRegion"))?,
    })
}

/// `0`, `<n>s`, `<n>m`, `<n>ms` or a bare number of seconds, at most one hour.
fn parse_duration(text: &str) -> Option<Duration> {
    let (digits, unit_ms) = if let Some(n) = text.strip_suffix("ms") {
        (n, 1)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1000)
    } else if let Some(n) = text.strip_suffix('m') {
        (n, 60_000)
    } else {
        (text, 1000)
    };
    let n: u64 = digits.parse().ok()?;
    let d = Duration::from_millis(n.checked_mul(unit_ms)?);
    (d <= Duration::from_secs(3600)).then_some(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        CloudConfig::parse(text.as_bytes()).unwrap_err().to_string()
    }

    #[test]
    fn empty_config_is_the_default() {
        assert_eq!(CloudConfig::parse(b"").unwrap(), CloudConfig::default());
        let d = CloudConfig::default();
        assert_eq!(d.node_ip_families, vec![IpFamily::Ipv4]);
        assert_eq!(d.retry_mode, RetryMode::Standard);
        assert_eq!(d.max_attempts, DEFAULT_MAX_ATTEMPTS);
        assert_eq!(d.security_group_rules_limit, None);
        assert_eq!(d.security_group_rules_limit(), 60);
    }

    /// `SecurityGroupRulesLimit` takes 1 to 1,000; anything else stops start-up naming the key and line.
    #[test]
    fn security_group_rules_limit() {
        let limit = |value: &str| {
            CloudConfig::parse(format!("[Global]\nSecurityGroupRulesLimit = {value}\n").as_bytes())
                .map(|c| c.security_group_rules_limit())
        };
        assert_eq!(limit("1"), Ok(1));
        assert_eq!(limit(" 120 "), Ok(120));
        assert_eq!(limit("1000"), Ok(1000));
        for bad in ["0", "-1", "1001", "sixty", "60.5", "", "6 0", "0x3c"] {
            let message = limit(bad).unwrap_err().to_string();
            for fragment in [
                "SecurityGroupRulesLimit",
                "line 2",
                "must be a whole number from 1 to 1000",
            ] {
                assert!(message.contains(fragment), "{bad:?}: {message}");
            }
        }
        // Given twice: the last one, as for every key.
        assert_eq!(
            CloudConfig::parse(
                b"[Global]\nSecurityGroupRulesLimit = 100\nSecurityGroupRulesLimit = 200\n"
            )
            .unwrap()
            .security_group_rules_limit,
            Some(200)
        );
    }

    #[test]
    fn every_global_key() {
        let cfg = CloudConfig::parse(
            br#"
[global]
zone = us-east-1b
Region = us-east-1
VPC = vpc-0123abcd
SubnetID = subnet-0a1b
RouteTableID = rtb-99
RoleARN = arn:aws:iam::123456789012:role/ccm
SourceARN = arn:aws:eks:us-east-1:123456789012:cluster/prod-1
KubernetesClusterTag = prod-1
KubernetesClusterID = prod-1
DisableSecurityGroupIngress = yes
ElbSecurityGroup = sg-0f
NodeIPFamilies = ipv6
NodeIPFamilies = ipv4
RetryMode = adaptive
MaxAttempts = 8
InstanceCacheTTL = 2m
SecurityGroupRulesLimit = 200
ClusterServiceLoadBalancerHealthProbeMode = Shared
ClusterServiceSharedLoadBalancerHealthProbePort = 8080
ClusterServiceSharedLoadBalancerHealthProbePath = /ready
NLBSecurityGroupMode = Managed
SupportedTopologyInstanceTypePattern = ^(p5|trn2)\\..*$
"#,
        )
        .unwrap();
        assert_eq!(cfg.zone.as_deref(), Some("us-east-1b"));
        assert_eq!(cfg.region.as_deref(), Some("us-east-1"));
        assert_eq!(cfg.vpc.as_deref(), Some("vpc-0123abcd"));
        assert_eq!(cfg.subnet_id.as_deref(), Some("subnet-0a1b"));
        assert_eq!(cfg.route_table_id.as_deref(), Some("rtb-99"));
        assert_eq!(
            cfg.role_arn.as_deref(),
            Some("arn:aws:iam::123456789012:role/ccm")
        );
        assert_eq!(
            cfg.source_arn.as_deref(),
            Some("arn:aws:eks:us-east-1:123456789012:cluster/prod-1")
        );
        assert_eq!(cfg.kubernetes_cluster_tag.as_deref(), Some("prod-1"));
        assert_eq!(cfg.kubernetes_cluster_id.as_deref(), Some("prod-1"));
        assert!(cfg.disable_security_group_ingress);
        assert_eq!(cfg.elb_security_group.as_deref(), Some("sg-0f"));
        assert_eq!(cfg.node_ip_families, vec![IpFamily::Ipv6, IpFamily::Ipv4]);
        assert_eq!(cfg.retry_mode, RetryMode::Adaptive);
        assert_eq!(cfg.max_attempts, 8);
        assert_eq!(cfg.instance_cache_ttl, Duration::from_secs(120));
        assert_eq!(cfg.security_group_rules_limit, Some(200));
        assert_eq!(cfg.security_group_rules_limit(), 200);
        assert_eq!(cfg.nlb_security_group_mode, NlbSecurityGroupMode::Managed);
        assert!(cfg.topology_instance_types.matches("p5.48xlarge"));
        assert!(!cfg.topology_instance_types.matches("p4d.24xlarge"));
        assert_eq!(
            cfg.cluster_health_probe,
            ClusterHealthProbe::Shared {
                port: 8080,
                path: "/ready".into()
            }
        );
    }

    /// Every key of upstream's `[ServiceOverride]`, and the service names upstream matches.
    #[test]
    fn upstream_override_keys_and_service_names() {
        let section = |n: usize, service: &str, extra: &str| {
            format!(
                "[ServiceOverride \"{n}\"]\nService = {service}\nRegion = r{n}\nURL = http://h{n}\n\
                 SigningRegion = r{n}\n{extra}"
            )
        };
        let text = [
            section(1, "EC2", "SigningName = ec2\nSigningMethod = v4\n"),
            section(2, "Elastic Load Balancing", "SigningName =\n"),
            section(3, "Elastic Load Balancing v2", ""),
            section(4, "KMS", "SigningName = kms\n"),
            section(5, "ec2imds", ""),
            section(6, "s3", ""),
            section(7, "ec2", ""),
        ]
        .concat();
        let cfg = CloudConfig::parse(text.as_bytes()).unwrap();
        let services: Vec<AwsService> = cfg.service_overrides.iter().map(|o| o.service).collect();
        assert_eq!(
            services,
            [
                AwsService::Ec2,
                AwsService::ElasticLoadBalancingClassic,
                AwsService::ElasticLoadBalancingV2,
                AwsService::Unused,
                AwsService::Imds,
                AwsService::Unused,
                AwsService::Ec2,
            ]
        );
        assert_eq!(
            cfg.service_overrides[2].service_name,
            "Elastic Load Balancing v2"
        );
        // The metadata service's override applies whatever the region.
        assert_eq!(
            cfg.service_override(AwsService::Imds, "")
                .map(|o| o.url.as_str()),
            Some("http://h5")
        );
    }

    /// Keys this provider cannot honour fail start-up, naming the key and why.
    #[test]
    fn keys_that_cannot_be_honoured() {
        let cases: &[(&str, &[&str])] = &[
            (
                "[Global]\nSupportedTopologyInstanceTypePattern = ^p5.*($\n",
                &[
                    "SupportedTopologyInstanceTypePattern",
                    "not a regular expression",
                ],
            ),
            (
                "[ServiceOverride \"1\"]\nService = ec2\nRegion = r\nURL = http://h\nSigningRegion = r\nSigningName = ec2-custom\n",
                &["SigningName", "line 6", "not supported"],
            ),
            (
                "[Global]\nKubernetesClusterID = a\nKubernetesClusterTag = b\n",
                &[
                    "KubernetesClusterID",
                    "KubernetesClusterTag",
                    "did not match",
                ],
            ),
        ];
        for (text, fragments) in cases {
            let message = err(text);
            for fragment in *fragments {
                assert!(message.contains(fragment), "{text:?}: {message}");
            }
        }
    }

    /// As upstream: unknown sections and keys are ignored (and listed), a bad `NLBSecurityGroupMode` is
    /// kept for the network load balancers' syncs to fail with.
    #[test]
    fn what_upstream_starts_with() {
        let cfg = CloudConfig::parse(
            b"[Global]\nRegion = r\nDisableStrictZoneCheck = true\nNLBSecurityGroupMode = managed\n\
              [Other]\nKey = x\n\
              [ServiceOverride \"1\"]\nService = ec2\nRegion = r\nURL = http://h\nSigningRegion = r\nEndpoint = x\n",
        )
        .unwrap();
        assert_eq!(cfg.region.as_deref(), Some("r"));
        assert_eq!(cfg.ignored.len(), 3, "{:?}", cfg.ignored);
        assert!(cfg.ignored[0].contains("line 3: unknown key \"DisableStrictZoneCheck\""));
        assert!(cfg.ignored[1].contains("unknown section [Other]"));
        assert!(cfg.ignored[2].contains("\"Endpoint\" in [ServiceOverride \"1\"]"));
        assert!(
            cfg.ignored
                .iter()
                .all(|m| m.ends_with("ignored, as upstream ignores it"))
        );
        assert_eq!(
            cfg.nlb_security_group_mode,
            NlbSecurityGroupMode::Invalid(
                "invalid NLB security group mode: \"managed\". Expected: \"Managed\"".into()
            )
        );
        // A repeated key: the last value, as gcfg sets it; a section name with a subsection it does not
        // take is ignored; an override section without a name is one named "".
        let cfg = CloudConfig::parse(
            b"[Global]\nRegion = a\nregion = b\n[Global \"x\"]\nZone = z\n\
              [ServiceOverride]\nService = ec2\nService = sts\nRegion = r\nURL = http://h\nSigningRegion = r\n",
        )
        .unwrap();
        assert_eq!(cfg.region.as_deref(), Some("b"));
        assert_eq!(cfg.zone, None);
        assert_eq!(cfg.service_overrides[0].name, "");
        assert_eq!(cfg.service_overrides[0].service_name, "sts");
        assert_eq!(cfg.ignored.len(), 3, "{:?}", cfg.ignored);
        assert!(cfg.ignored[0].contains("line 3: key Region is given more than once"));
        assert!(cfg.ignored[0].ends_with("the last value is used, as upstream uses it"));
        assert!(cfg.ignored[1].contains("unknown section [Global \"x\"]"));
    }

    #[test]
    fn families_comma_separated_and_bare_bool() {
        let cfg = CloudConfig::parse(
            b"[Global]\nNodeIPFamilies = ipv4, ipv6\nDisableSecurityGroupIngress\nInstanceCacheTTL = 0\n",
        )
        .unwrap();
        assert_eq!(cfg.node_ip_families, vec![IpFamily::Ipv4, IpFamily::Ipv6]);
        assert!(cfg.disable_security_group_ingress);
        assert_eq!(cfg.instance_cache_ttl, Duration::ZERO);
    }

    #[test]
    fn service_overrides() {
        let cfg = CloudConfig::parse(
            br#"
[ServiceOverride "a"]
Service = EC2
Region = r1
URL = http://127.0.0.1:5000
SigningRegion = r1
[ServiceOverride "b"]
Service = elasticloadbalancing
Region = r1
URL = https://elb.example
SigningRegion = s1
"#,
        )
        .unwrap();
        assert_eq!(cfg.service_overrides.len(), 2);
        let ec2 = cfg.service_override(AwsService::Ec2, "r1").unwrap();
        assert_eq!(ec2.name, "a");
        assert_eq!(ec2.url, "http://127.0.0.1:5000");
        let elb = cfg
            .service_override(AwsService::ElasticLoadBalancing, "r1")
            .unwrap();
        assert_eq!(elb.signing_region, "s1");
        assert!(cfg.service_override(AwsService::Ec2, "r2").is_none());
        assert!(cfg.service_override(AwsService::Sts, "r1").is_none());
    }

    #[test]
    fn errors_name_the_key() {
        let cases: &[(&str, &[&str])] = &[
            ("[Global]\nVPC = 1234\n", &["VPC", "vpc-"]),
            ("[Global]\nSubnetID = sn-1\n", &["SubnetID"]),
            ("[Global]\nRouteTableID = rtb-\n", &["RouteTableID"]),
            (
                "[Global]\nElbSecurityGroup = group\n",
                &["ElbSecurityGroup"],
            ),
            ("[Global]\nRoleARN = ccm-role\n", &["RoleARN", "role ARN"]),
            (
                "[Global]\nKubernetesClusterID = a b\n",
                &["KubernetesClusterID", "spaces"],
            ),
            (
                "[Global]\nKubernetesClusterTag = a,b\n",
                &["KubernetesClusterTag"],
            ),
            (
                "[Global]\nDisableSecurityGroupIngress = maybe\n",
                &["DisableSecurityGroupIngress", "true or false"],
            ),
            (
                "[Global]\nNodeIPFamilies = ipv5\n",
                &["NodeIPFamilies", "ipv4 or ipv6"],
            ),
            (
                "[Global]\nNodeIPFamilies = ipv4,ipv4\n",
                &["NodeIPFamilies", "twice"],
            ),
            (
                "[Global]\nRetryMode = legacy\n",
                &["RetryMode", "standard or adaptive"],
            ),
            ("[Global]\nMaxAttempts = 0\n", &["MaxAttempts"]),
            ("[Global]\nInstanceCacheTTL = 5h\n", &["InstanceCacheTTL"]),
            ("[Global]\nZone =\n", &["Zone", "empty"]),
            (
                "[ServiceOverride \"1\"]\nURL = 127.0.0.1:5000\n",
                &["URL", "http://"],
            ),
            (
                "[ServiceOverride \"1\"]\nService = ec2\nRegion = r\nURL = http://h\n",
                &["SigningRegion is required", "[ServiceOverride \"1\"]"],
            ),
            (
                "[ServiceOverride \"1\"]\nService = ec2\nRegion = r\nURL = http://h\nSigningRegion = r\n\
                 [ServiceOverride \"2\"]\nService = ec2\nRegion = r\nURL = http://i\nSigningRegion = r\n",
                &[
                    "[ServiceOverride \"2\"]",
                    "already overridden by [ServiceOverride \"1\"]",
                ],
            ),
            ("Region = x\n", &["line 1", "outside any section"]),
        ];
        for (text, fragments) in cases {
            let message = err(text);
            for fragment in *fragments {
                assert!(message.contains(fragment), "{text:?}: {message}");
            }
        }
        assert_eq!(
            CloudConfig::parse(&[0xff, 0xfe]).unwrap_err(),
            ConfigError::NotUtf8
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("0"), Some(Duration::ZERO));
        assert_eq!(parse_duration("45"), Some(Duration::from_secs(45)));
        assert_eq!(parse_duration("45s"), Some(Duration::from_secs(45)));
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("60m"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_duration("61m"), None);
        assert_eq!(parse_duration("-1s"), None);
        assert_eq!(parse_duration("s"), None);
    }
}
