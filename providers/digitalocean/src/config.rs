//! Configuration of the DigitalOcean provider: environment variables and the `--cloud-config` file.
//!
//! Every setting can come from an environment variable (the names the upstream DigitalOcean
//! cloud-controller-manager uses) or from a YAML `--cloud-config` file. **The environment wins**: a
//! variable that is set and not empty overrides the file, so a token mounted from a Secret as
//! `DO_ACCESS_TOKEN` always takes effect. Settings beyond upstream exist only in the file.
//!
//! | environment             | file key                 | meaning                                               |
//! |-------------------------|--------------------------|-------------------------------------------------------|
//! | `DO_ACCESS_TOKEN`       | `accessToken`            | API token (required, never logged)                    |
//! | `DO_OVERRIDE_URL`       | `overrideURL`            | API base URL (default `https://api.digitalocean.com/`) |
//! | `REGION`                | `region`                 | region slug; else read from the metadata service      |
//! | `DO_CLUSTER_ID`         | `clusterID`              | cluster ID: load balancers get the tag `k8s:<id>`     |
//! | `DO_CLUSTER_VPC_ID`     | `clusterVPCID`           | VPC UUID of new load balancers                        |
//! | `DO_API_RATE_LIMIT_QPS` | `apiRateLimitQPS`        | client-side API rate limit (requests per second)      |
//! | `DEFAULT_LB_TYPE`       | `defaultLBType`          | `REGIONAL` or `REGIONAL_NETWORK` (default; any other value, as upstream) |
//! | `PUBLIC_ACCESS_FIREWALL_NAME` | `publicAccessFirewallName` | name of the public-access firewall (firewall controller) |
//! | `PUBLIC_ACCESS_FIREWALL_TAGS` | `publicAccessFirewallTags` | its tags, comma-separated (both or neither)     |
//! |                         | `metadataURL`            | metadata service base URL                             |
//! |                         | `ipModeProxy`            | `ipMode: Proxy` for terminating load balancers (default true) |
//! |                         | `dropletCacheTTLSeconds` | how long the droplet list is trusted (default 30)     |
//! |                         | `maxRetries`             | retries of a throttled or failed API call (default 5) |
//! |                         | `requestTimeoutSeconds`  | timeout of one API request (default 30)               |
//!
//! ```
//! use provider_digitalocean::{DoConfig, LbType};
//!
//! let file = b"region: fra1\nclusterID: c-1\naccessToken: from-file\n";
//! let env = |name: &str| (name == "DO_ACCESS_TOKEN").then(|| "from-env".to_string());
//! let config = DoConfig::from_sources(Some(file), env).unwrap();
//! assert_eq!(config.access_token.expose(), "from-env"); // the environment wins
//! assert_eq!(config.region.as_deref(), Some("fra1"));
//! assert_eq!(config.default_lb_type, LbType::RegionalNetwork);
//! assert!(!format!("{config:?}").contains("from-env")); // the token is never printed
//! ```

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;
use url::Url;

/// Environment variable holding the API token.
pub const ENV_ACCESS_TOKEN: &str = "DO_ACCESS_TOKEN";
/// Environment variable overriding the API base URL.
pub const ENV_OVERRIDE_URL: &str = "DO_OVERRIDE_URL";
/// Environment variable naming the region.
pub const ENV_REGION: &str = "REGION";
/// Environment variable holding the cluster ID.
pub const ENV_CLUSTER_ID: &str = "DO_CLUSTER_ID";
/// Environment variable holding the cluster's VPC UUID.
pub const ENV_CLUSTER_VPC_ID: &str = "DO_CLUSTER_VPC_ID";
/// Environment variable holding the client-side API rate limit.
pub const ENV_API_RATE_LIMIT_QPS: &str = "DO_API_RATE_LIMIT_QPS";
/// Environment variable holding the default load-balancer type.
pub const ENV_DEFAULT_LB_TYPE: &str = "DEFAULT_LB_TYPE";
/// Environment variable naming the public-access firewall the firewall controller manages.
pub const ENV_PUBLIC_ACCESS_FIREWALL_NAME: &str = "PUBLIC_ACCESS_FIREWALL_NAME";
/// Environment variable holding the public-access firewall's tags (comma-separated).
pub const ENV_PUBLIC_ACCESS_FIREWALL_TAGS: &str = "PUBLIC_ACCESS_FIREWALL_TAGS";

/// The public DigitalOcean API.
pub const DEFAULT_API_URL: &str = "https://api.digitalocean.com/";
/// The droplet metadata service.
pub const DEFAULT_METADATA_URL: &str = "http://169.254.169.254/metadata/v1/";
/// Default lifetime of the cached droplet list.
pub const DEFAULT_DROPLET_CACHE_TTL: Duration = Duration::from_secs(30);
/// Default shortest time between two droplet-list refreshes caused by cache misses.
pub const DEFAULT_DROPLET_MISS_REFRESH_INTERVAL: Duration = Duration::from_secs(5);
/// Default timeout of one API request.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Why the configuration was refused. Messages never contain the token.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The cloud-config file is not valid YAML of the expected shape.
    #[error("invalid DigitalOcean cloud config: {0}")]
    Parse(String),
    /// No token was given.
    #[error(
        "no DigitalOcean API token: set {ENV_ACCESS_TOKEN} (or accessToken in the cloud config)"
    )]
    MissingToken,
    /// A setting has a value the provider cannot use.
    #[error("invalid DigitalOcean setting {setting}: {message}")]
    Invalid {
        /// The environment variable or file key.
        setting: String,
        /// What is wrong with it.
        message: String,
    },
}

impl ConfigError {
    fn invalid(setting: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError::Invalid {
            setting: setting.into(),
            message: message.into(),
        }
    }
}

/// The API token. Its `Debug` output is redacted; only [`AccessToken::expose`] reveals it.
#[derive(Clone, PartialEq, Eq)]
pub struct AccessToken(String);

impl AccessToken {
    /// Wraps a token (surrounding whitespace, e.g. a trailing newline from a Secret file, is removed).
    pub fn new(token: impl Into<String>) -> Self {
        AccessToken(token.into().trim().to_string())
    }

    /// The token itself, for the `Authorization` header.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// True when the token is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AccessToken(<redacted>)")
    }
}

/// The type of a DigitalOcean load balancer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LbType {
    /// A regional HTTP/TCP proxy load balancer (forwards to node ports).
    Regional,
    /// A regional network (layer-4 pass-through) load balancer.
    RegionalNetwork,
}

impl LbType {
    /// The API spelling: `REGIONAL` or `REGIONAL_NETWORK`.
    pub fn as_str(self) -> &'static str {
        match self {
            LbType::Regional => "REGIONAL",
            LbType::RegionalNetwork => "REGIONAL_NETWORK",
        }
    }
}

impl fmt::Display for LbType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The API spellings only, as upstream compares them (case-sensitive).
impl FromStr for LbType {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "REGIONAL" => Ok(LbType::Regional),
            "REGIONAL_NETWORK" => Ok(LbType::RegionalNetwork),
            other => Err(format!(
                "{other:?} is not a load balancer type (REGIONAL or REGIONAL_NETWORK)"
            )),
        }
    }
}

/// The public-access firewall the firewall controller keeps: it opens the cluster's NodePorts (and the
/// ports of network load balancers) to the internet for the droplets carrying its tags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicAccessFirewall {
    /// The firewall's name (it is found by this name when its ID is not known).
    pub name: String,
    /// The tags the firewall applies to, in the configured order.
    pub tags: Vec<String>,
}

impl PublicAccessFirewall {
    /// The firewall of `name` and the comma-separated `tags`, both given or neither (`None`); refused,
    /// naming the variable, when one is missing or either is not valid for the API.
    fn from_settings(
        name: Option<String>,
        tags: Option<String>,
    ) -> Result<Option<Self>, ConfigError> {
        let (name, tags) = match (name, tags) {
            (None, None) => return Ok(None),
            (Some(name), Some(tags)) => (name, tags),
            (None, Some(_)) => return Err(required_with_firewall(ENV_PUBLIC_ACCESS_FIREWALL_NAME)),
            (Some(_), None) => return Err(required_with_firewall(ENV_PUBLIC_ACCESS_FIREWALL_TAGS)),
        };
        if !is_firewall_name(&name) {
            return Err(ConfigError::invalid(
                ENV_PUBLIC_ACCESS_FIREWALL_NAME,
                format!(
                    "{name:?} is not a firewall name: it must start with a letter or digit and hold only \
                     letters, digits, '.' and '-' (at most 255 characters)"
                ),
            ));
        }
        let tags: Vec<String> = tags.split(',').map(str::to_string).collect();
        if let Some(bad) = tags.iter().find(|tag| !is_tag(tag)) {
            return Err(ConfigError::invalid(
                ENV_PUBLIC_ACCESS_FIREWALL_TAGS,
                format!(
                    "{bad:?} is not a tag: tags are comma-separated, non-empty, at most 255 letters, digits, \
                     ':', '-' and '_'"
                ),
            ));
        }
        Ok(Some(PublicAccessFirewall { name, tags }))
    }
}

fn required_with_firewall(variable: &str) -> ConfigError {
    ConfigError::invalid(
        variable,
        format!(
            "is required when managing the public-access firewall (set both \
             {ENV_PUBLIC_ACCESS_FIREWALL_NAME} and {ENV_PUBLIC_ACCESS_FIREWALL_TAGS}, or neither)"
        ),
    )
}

/// A cloud firewall name as the API accepts it.
pub(crate) fn is_firewall_name(name: &str) -> bool {
    name.len() <= 255
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
}

/// A tag as the API accepts it.
pub(crate) fn is_tag(tag: &str) -> bool {
    !tag.is_empty()
        && tag.len() <= 255
        && tag
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, ':' | '-' | '_'))
}

/// How API calls are retried.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0 disables retries).
    pub max_retries: u32,
    /// First backoff delay after a 5xx or transport error; doubled on every retry.
    pub base_delay: Duration,
    /// Largest backoff delay.
    pub max_delay: Duration,
    /// Longest wait the client accepts for a rate-limit reset; a longer one is returned to the caller as a
    /// retry-after error instead of blocking.
    pub max_rate_limit_wait: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 5,
            base_delay: Duration::from_millis(250),
            max_delay: Duration::from_secs(30),
            max_rate_limit_wait: Duration::from_secs(60),
        }
    }
}

/// The provider's settings, resolved from the environment and the cloud-config file.
#[derive(Clone, Debug)]
pub struct DoConfig {
    /// The API token.
    pub access_token: AccessToken,
    /// The API base URL (always ends with `/`).
    pub api_url: Url,
    /// The region slug; `None` means "ask the metadata service" during initialization.
    pub region: Option<String>,
    /// The cluster ID (tags load balancers `k8s:<id>`).
    pub cluster_id: Option<String>,
    /// The VPC UUID given to load balancers.
    pub cluster_vpc_id: Option<String>,
    /// Client-side rate limit in requests per second; `None` = unlimited.
    pub api_rate_limit_qps: Option<f64>,
    /// The type of load balancers whose Service does not name one.
    pub default_lb_type: LbType,
    /// The metadata service base URL (always ends with `/`).
    pub metadata_url: Url,
    /// How long the cached droplet list is trusted.
    pub droplet_cache_ttl: Duration,
    /// The shortest time between two droplet-list refreshes caused by cache misses (default 5 s); misses
    /// within it are answered by single-droplet calls.
    pub droplet_miss_refresh_interval: Duration,
    /// Retry behaviour of API calls.
    pub retry: RetryPolicy,
    /// Timeout of one API request.
    pub request_timeout: Duration,
    /// Whether load balancers that terminate HTTP/TLS or send the PROXY protocol get `ipMode: Proxy` in the
    /// Service status (default), so that kube-proxy sends in-cluster traffic through them; `false` reports
    /// `VIP` for every load balancer, as upstream (which leaves the API server's default).
    pub ip_mode_proxy: bool,
    /// The public-access firewall to manage; `None`: the firewall controller does not run.
    pub public_access_firewall: Option<PublicAccessFirewall>,
}

/// The YAML cloud-config file.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FileConfig {
    access_token: Option<String>,
    #[serde(rename = "overrideURL")]
    override_url: Option<String>,
    region: Option<String>,
    #[serde(rename = "clusterID")]
    cluster_id: Option<String>,
    #[serde(rename = "clusterVPCID")]
    cluster_vpc_id: Option<String>,
    #[serde(rename = "apiRateLimitQPS")]
    api_rate_limit_qps: Option<f64>,
    #[serde(rename = "defaultLBType")]
    default_lb_type: Option<String>,
    #[serde(rename = "metadataURL")]
    metadata_url: Option<String>,
    #[serde(rename = "dropletCacheTTLSeconds")]
    droplet_cache_ttl_seconds: Option<u64>,
    max_retries: Option<u32>,
    request_timeout_seconds: Option<u64>,
    #[serde(rename = "ipModeProxy")]
    ip_mode_proxy: Option<bool>,
    public_access_firewall_name: Option<String>,
    public_access_firewall_tags: Option<String>,
}

impl DoConfig {
    /// A configuration with defaults for everything but the token and the API URL (used by tests and
    /// embedders; the daemon uses [`DoConfig::from_sources`]).
    pub fn new(access_token: AccessToken, api_url: &str) -> Result<Self, ConfigError> {
        Ok(DoConfig {
            access_token,
            api_url: base_url("api URL", api_url)?,
            region: None,
            cluster_id: None,
            cluster_vpc_id: None,
            api_rate_limit_qps: None,
            default_lb_type: LbType::RegionalNetwork,
            metadata_url: base_url("metadataURL", DEFAULT_METADATA_URL)?,
            droplet_cache_ttl: DEFAULT_DROPLET_CACHE_TTL,
            droplet_miss_refresh_interval: DEFAULT_DROPLET_MISS_REFRESH_INTERVAL,
            retry: RetryPolicy::default(),
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            ip_mode_proxy: true,
            public_access_firewall: None,
        })
    }

    /// Resolves the configuration from the cloud-config bytes (if any) and an environment lookup
    /// (`env(name)` returns the variable's value). Empty variables count as unset; the environment wins
    /// over the file.
    pub fn from_sources(
        file: Option<&[u8]>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let file: FileConfig = match file {
            Some(bytes) if !bytes.iter().all(u8::is_ascii_whitespace) => {
                cloud_provider::cloud_config_yaml::parse(bytes).map_err(ConfigError::Parse)?
            }
            _ => FileConfig::default(),
        };
        let env = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        let pick = |name: &str, from_file: Option<String>| {
            env(name).or(from_file.filter(|v| !v.trim().is_empty()))
        };

        let token = pick(ENV_ACCESS_TOKEN, file.access_token.clone())
            .map(AccessToken::new)
            .filter(|t| !t.is_empty())
            .ok_or(ConfigError::MissingToken)?;
        let api_url = pick(ENV_OVERRIDE_URL, file.override_url.clone())
            .unwrap_or_else(|| DEFAULT_API_URL.to_string());
        let mut config = DoConfig::new(token, &api_url).map_err(|e| match e {
            ConfigError::Invalid { message, .. } => ConfigError::invalid(ENV_OVERRIDE_URL, message),
            other => other,
        })?;

        config.region = pick(ENV_REGION, file.region.clone()).map(|r| r.trim().to_string());
        config.cluster_id = pick(ENV_CLUSTER_ID, file.cluster_id.clone()).map(|v| v.trim().into());
        config.cluster_vpc_id =
            pick(ENV_CLUSTER_VPC_ID, file.cluster_vpc_id.clone()).map(|v| v.trim().into());

        let qps = match env(ENV_API_RATE_LIMIT_QPS) {
            Some(raw) => Some(raw.trim().parse::<f64>().map_err(|_| {
                ConfigError::invalid(ENV_API_RATE_LIMIT_QPS, format!("{raw:?} is not a number"))
            })?),
            None => file.api_rate_limit_qps,
        };
        config.api_rate_limit_qps = match qps {
            Some(q) if !q.is_finite() || q < 0.0 => {
                return Err(ConfigError::invalid(
                    ENV_API_RATE_LIMIT_QPS,
                    format!("{q} must be a non-negative number"),
                ));
            }
            Some(0.0) => None,
            other => other,
        };

        if let Some(raw) = pick(ENV_DEFAULT_LB_TYPE, file.default_lb_type.clone()) {
            // As upstream: anything but the exact spellings leaves the default.
            config.default_lb_type = raw.trim().parse().unwrap_or_else(|why: String| {
                tracing::warn!(setting = ENV_DEFAULT_LB_TYPE, %why, "using REGIONAL_NETWORK");
                LbType::RegionalNetwork
            });
        }
        if let Some(raw) = file.metadata_url.as_deref() {
            config.metadata_url = base_url("metadataURL", raw)?;
        }
        if let Some(secs) = file.droplet_cache_ttl_seconds {
            config.droplet_cache_ttl = Duration::from_secs(secs);
        }
        if let Some(n) = file.max_retries {
            config.retry.max_retries = n;
        }
        if let Some(secs) = file.request_timeout_seconds {
            if secs == 0 {
                return Err(ConfigError::invalid(
                    "requestTimeoutSeconds",
                    "must be at least 1",
                ));
            }
            config.request_timeout = Duration::from_secs(secs);
        }
        if let Some(proxy) = file.ip_mode_proxy {
            config.ip_mode_proxy = proxy;
        }
        config.public_access_firewall = PublicAccessFirewall::from_settings(
            pick(
                ENV_PUBLIC_ACCESS_FIREWALL_NAME,
                file.public_access_firewall_name.clone(),
            ),
            pick(
                ENV_PUBLIC_ACCESS_FIREWALL_TAGS,
                file.public_access_firewall_tags.clone(),
            ),
        )?;
        Ok(config)
    }

    /// [`DoConfig::from_sources`] with the process environment.
    pub fn from_env_and_file(file: Option<&[u8]>) -> Result<Self, ConfigError> {
        Self::from_sources(file, |name| std::env::var(name).ok())
    }
}

/// Parses a base URL, adding the trailing slash relative paths need.
fn base_url(setting: &str, raw: &str) -> Result<Url, ConfigError> {
    let raw = raw.trim();
    let with_slash = if raw.ends_with('/') {
        raw.to_string()
    } else {
        format!("{raw}/")
    };
    let url = Url::parse(&with_slash)
        .map_err(|e| ConfigError::invalid(setting, format!("{raw:?} is not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ConfigError::invalid(
            setting,
            format!("{raw:?} must be an http or https URL"),
        ));
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn public_access_firewall_needs_name_and_tags() {
        let config = |pairs: &[(&str, &str)]| {
            let mut all = vec![(ENV_ACCESS_TOKEN, "tok")];
            all.extend_from_slice(pairs);
            DoConfig::from_sources(None, env_of(&all))
        };
        assert_eq!(config(&[]).unwrap().public_access_firewall, None);
        let both = config(&[
            (ENV_PUBLIC_ACCESS_FIREWALL_NAME, "k8s-public-access-c1"),
            (ENV_PUBLIC_ACCESS_FIREWALL_TAGS, "k8s:c1,k8s:worker"),
        ])
        .unwrap();
        assert_eq!(
            both.public_access_firewall,
            Some(PublicAccessFirewall {
                name: "k8s-public-access-c1".into(),
                tags: vec!["k8s:c1".into(), "k8s:worker".into()],
            })
        );
        let from_file = DoConfig::from_sources(
            Some(b"accessToken: t\npublicAccessFirewallName: fw\npublicAccessFirewallTags: k8s\n"),
            env_of(&[]),
        )
        .unwrap();
        assert_eq!(from_file.public_access_firewall.unwrap().tags, ["k8s"]);
        assert!(from_file.ip_mode_proxy);
        let upstream_ip_mode =
            DoConfig::from_sources(Some(b"accessToken: t\nipModeProxy: false\n"), env_of(&[]))
                .unwrap();
        assert!(!upstream_ip_mode.ip_mode_proxy);
        for (pairs, variable) in [
            (
                vec![(ENV_PUBLIC_ACCESS_FIREWALL_NAME, "fw")],
                ENV_PUBLIC_ACCESS_FIREWALL_TAGS,
            ),
            (
                vec![(ENV_PUBLIC_ACCESS_FIREWALL_TAGS, "k8s")],
                ENV_PUBLIC_ACCESS_FIREWALL_NAME,
            ),
            (
                vec![
                    (ENV_PUBLIC_ACCESS_FIREWALL_NAME, "fw"),
                    (ENV_PUBLIC_ACCESS_FIREWALL_TAGS, "a,,b"),
                ],
                ENV_PUBLIC_ACCESS_FIREWALL_TAGS,
            ),
            (
                vec![
                    (ENV_PUBLIC_ACCESS_FIREWALL_NAME, "fw"),
                    (ENV_PUBLIC_ACCESS_FIREWALL_TAGS, "a, b"),
                ],
                ENV_PUBLIC_ACCESS_FIREWALL_TAGS,
            ),
            (
                vec![
                    (ENV_PUBLIC_ACCESS_FIREWALL_NAME, "my fw"),
                    (ENV_PUBLIC_ACCESS_FIREWALL_TAGS, "k8s"),
                ],
                ENV_PUBLIC_ACCESS_FIREWALL_NAME,
            ),
        ] {
            let err = config(&pairs).unwrap_err().to_string();
            assert!(err.contains(variable), "{pairs:?}: {err}");
        }
    }

    #[test]
    fn env_only() {
        let cfg = DoConfig::from_sources(
            None,
            env_of(&[
                (ENV_ACCESS_TOKEN, "tok\n"),
                (ENV_OVERRIDE_URL, "http://127.0.0.1:9/api"),
                (ENV_REGION, "nyc3"),
                (ENV_CLUSTER_ID, "c1"),
                (ENV_CLUSTER_VPC_ID, "vpc-1"),
                (ENV_API_RATE_LIMIT_QPS, "2.5"),
                (ENV_DEFAULT_LB_TYPE, "REGIONAL"),
            ]),
        )
        .unwrap();
        assert_eq!(cfg.access_token.expose(), "tok");
        assert_eq!(cfg.api_url.as_str(), "http://127.0.0.1:9/api/");
        assert_eq!(cfg.region.as_deref(), Some("nyc3"));
        assert_eq!(cfg.cluster_id.as_deref(), Some("c1"));
        assert_eq!(cfg.cluster_vpc_id.as_deref(), Some("vpc-1"));
        assert_eq!(cfg.api_rate_limit_qps, Some(2.5));
        assert_eq!(cfg.default_lb_type, LbType::Regional);
        assert_eq!(cfg.metadata_url.as_str(), DEFAULT_METADATA_URL);
    }

    #[test]
    fn defaults() {
        let cfg = DoConfig::from_sources(None, env_of(&[(ENV_ACCESS_TOKEN, "t")])).unwrap();
        assert_eq!(cfg.api_url.as_str(), DEFAULT_API_URL);
        assert_eq!(cfg.region, None);
        assert_eq!(cfg.cluster_id, None);
        assert_eq!(cfg.api_rate_limit_qps, None);
        assert_eq!(cfg.default_lb_type, LbType::RegionalNetwork);
        assert_eq!(cfg.droplet_cache_ttl, DEFAULT_DROPLET_CACHE_TTL);
        assert_eq!(cfg.retry, RetryPolicy::default());
    }

    #[test]
    fn file_only_and_extra_keys() {
        let file = br#"
accessToken: file-token
overrideURL: https://do.example/
region: ams3
clusterID: abc
clusterVPCID: vpc
apiRateLimitQPS: 4
defaultLBType: REGIONAL
metadataURL: http://127.0.0.1:1/metadata/v1
dropletCacheTTLSeconds: 7
maxRetries: 2
requestTimeoutSeconds: 3
"#;
        let cfg = DoConfig::from_sources(Some(file), env_of(&[])).unwrap();
        assert_eq!(cfg.access_token.expose(), "file-token");
        assert_eq!(cfg.api_url.as_str(), "https://do.example/");
        assert_eq!(cfg.region.as_deref(), Some("ams3"));
        assert_eq!(cfg.api_rate_limit_qps, Some(4.0));
        assert_eq!(cfg.default_lb_type, LbType::Regional);
        assert_eq!(cfg.metadata_url.as_str(), "http://127.0.0.1:1/metadata/v1/");
        assert_eq!(cfg.droplet_cache_ttl, Duration::from_secs(7));
        assert_eq!(cfg.retry.max_retries, 2);
        assert_eq!(cfg.request_timeout, Duration::from_secs(3));
    }

    #[test]
    fn environment_wins_and_empty_env_is_unset() {
        let file = b"accessToken: file-token\nregion: ams3\nclusterID: from-file\n";
        let cfg = DoConfig::from_sources(
            Some(file),
            env_of(&[(ENV_REGION, "sfo3"), (ENV_CLUSTER_ID, "  ")]),
        )
        .unwrap();
        assert_eq!(cfg.access_token.expose(), "file-token");
        assert_eq!(cfg.region.as_deref(), Some("sfo3"));
        assert_eq!(cfg.cluster_id.as_deref(), Some("from-file"));
    }

    #[test]
    fn errors_name_the_setting_and_hide_the_token() {
        let err = DoConfig::from_sources(None, env_of(&[])).unwrap_err();
        assert!(matches!(err, ConfigError::MissingToken));
        assert!(err.to_string().contains(ENV_ACCESS_TOKEN));
        let err = DoConfig::from_sources(None, env_of(&[(ENV_ACCESS_TOKEN, " \n")])).unwrap_err();
        assert!(matches!(err, ConfigError::MissingToken));

        let secret = "s3cr3t-value";
        let cases = [
            ((ENV_API_RATE_LIMIT_QPS, "fast"), ENV_API_RATE_LIMIT_QPS),
            ((ENV_API_RATE_LIMIT_QPS, "-1"), ENV_API_RATE_LIMIT_QPS),
            ((ENV_OVERRIDE_URL, "ftp://x"), ENV_OVERRIDE_URL),
            ((ENV_OVERRIDE_URL, "::nope"), ENV_OVERRIDE_URL),
        ];
        for ((name, value), expected) in cases {
            let err =
                DoConfig::from_sources(None, env_of(&[(ENV_ACCESS_TOKEN, secret), (name, value)]))
                    .unwrap_err();
            let msg = err.to_string();
            assert!(msg.contains(expected), "{msg}");
            assert!(!msg.contains(secret), "{msg}");
        }

        let err = DoConfig::from_sources(Some(b"acessToken: x\n"), env_of(&[])).unwrap_err();
        assert!(
            err.to_string().contains("unknown field `acessToken`"),
            "{err}"
        );
        // A mistake in the file is named by its key and position; the file is never quoted, so the
        // token next to it stays out of the message.
        let cases = [
            (
                "maxRetries: -1\n",
                "maxRetries: invalid u32 at line 2, column 13",
            ),
            (
                "ipModeProxy: yes\n",
                "ipModeProxy: invalid boolean (true or false expected) at line 2, column 14",
            ),
            (
                "region: [fra1\n",
                "region: expected string scalar at line 2, column 9",
            ),
            (
                "accessToken: other\n",
                "duplicate mapping key `accessToken` is not allowed here at line 2, column 1",
            ),
            (
                "---\nregion: fra1\n",
                "only single YAML document expected but multiple found at line 3, column 1",
            ),
        ];
        for (rest, want) in cases {
            let file = format!("accessToken: {secret}\n{rest}");
            let err = DoConfig::from_sources(Some(file.as_bytes()), env_of(&[])).unwrap_err();
            assert!(matches!(err, ConfigError::Parse(_)), "{file}: {err:?}");
            assert_eq!(
                err.to_string(),
                format!("invalid DigitalOcean cloud config: {want}"),
                "{file}"
            );
        }
        let err = DoConfig::from_sources(
            Some(b"requestTimeoutSeconds: 0\n"),
            env_of(&[(ENV_ACCESS_TOKEN, "t")]),
        )
        .unwrap_err();
        assert!(err.to_string().contains("requestTimeoutSeconds"), "{err}");
    }

    #[test]
    fn zero_qps_means_unlimited() {
        let cfg = DoConfig::from_sources(
            None,
            env_of(&[(ENV_ACCESS_TOKEN, "t"), (ENV_API_RATE_LIMIT_QPS, "0")]),
        )
        .unwrap();
        assert_eq!(cfg.api_rate_limit_qps, None);
    }

    #[test]
    fn debug_redacts_token() {
        let cfg = DoConfig::new(AccessToken::new("dop_v1_abcdef"), "http://x/").unwrap();
        let shown = format!("{cfg:?}");
        assert!(!shown.contains("dop_v1_abcdef"), "{shown}");
        assert!(shown.contains("<redacted>"));
    }

    #[test]
    fn lb_type_parsing() {
        assert_eq!("REGIONAL".parse::<LbType>(), Ok(LbType::Regional));
        assert_eq!(
            "REGIONAL_NETWORK".parse::<LbType>(),
            Ok(LbType::RegionalNetwork)
        );
        assert!("regional".parse::<LbType>().is_err());
        assert!("GLOBAL".parse::<LbType>().is_err());
        assert_eq!(LbType::RegionalNetwork.to_string(), "REGIONAL_NETWORK");
    }

    #[test]
    fn unknown_default_types_fall_back_to_regional_network_as_upstream() {
        for raw in ["regional", "GLOBAL", "Regional"] {
            let cfg = DoConfig::from_sources(
                None,
                env_of(&[(ENV_ACCESS_TOKEN, "t"), (ENV_DEFAULT_LB_TYPE, raw)]),
            )
            .unwrap();
            assert_eq!(cfg.default_lb_type, LbType::RegionalNetwork, "{raw}");
        }
    }
}
