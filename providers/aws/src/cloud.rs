//! The provider value: configuration, cluster identity, SDK clients and caches, and its
//! [`CloudProvider`] implementation.

use std::collections::HashMap;
use std::sync::Arc;

use aws_credential_types::provider::SharedCredentialsProvider;
use aws_sdk_ec2::config::SharedHttpClient;
use aws_sdk_ec2::types::Filter;
use cloud_provider::{
    CloudProvider, Instances, InstancesV2, LoadBalancer, PvLabeler, Routes, ServiceAdmission, Zones,
};
use parking_lot::{Mutex, RwLock};

use crate::client::{AwsClients, build_clients, discover_region, https_client, imds_client};
use crate::config::{CloudConfig, ConfigError};
use crate::ec2_instance::InstanceCache;
use crate::error::{ApiError, SdkResultExt};
use crate::metrics::AwsMetrics;
pub use crate::provider_id::PROVIDER_NAME;
use crate::tagging::{ClusterTagging, ec2_tag_pairs};

/// Why the provider could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The cloud-config file is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// No region could be determined.
    #[error(
        "no AWS region: set Region in the [Global] section of the cloud config, set AWS_REGION, or run on EC2 \
         where the instance metadata service gives it"
    )]
    NoRegion,
    /// The helper thread running discovery could not be started or failed.
    #[error("AWS provider set-up failed: {0}")]
    Setup(String),
}

/// Options for building the provider from code (tests and programs embedding it). The registry factory
/// uses the defaults.
#[derive(Clone, Debug, Default)]
pub struct AwsOptions {
    /// Base credentials to use instead of the default chain (with `RoleARN` they assume that role).
    pub credentials: Option<SharedCredentialsProvider>,
    /// Where to record API metrics (default: [`AwsMetrics::global`]).
    pub metrics: Option<AwsMetrics>,
    /// The HTTP client (default: HTTPS through rustls with ring).
    pub http_client: Option<SharedHttpClient>,
}

/// The AWS cloud provider.
pub struct AwsCloud {
    pub(crate) config: CloudConfig,
    pub(crate) region: String,
    pub(crate) tagging: ClusterTagging,
    pub(crate) clients: AwsClients,
    pub(crate) metrics: AwsMetrics,
    pub(crate) instances: InstanceCache,
    /// Availability-zone name -> zone ID (`use1-az1`), filled on demand.
    pub(crate) zone_ids: RwLock<HashMap<String, String>>,
    pub(crate) imds: aws_config::imds::Client,
    pub(crate) route_targets: RouteTargets,
    /// What is known to have no network topology ([`crate::topology`]).
    pub(crate) no_topology: crate::topology_cache::NoTopology,
}

/// Instance ID -> node name, learnt from created routes (node names need not be private DNS names).
#[derive(Debug, Default)]
pub(crate) struct RouteTargets(pub(crate) Mutex<HashMap<String, String>>);

impl std::fmt::Debug for AwsCloud {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsCloud")
            .field("region", &self.region)
            .field("cluster_id", &self.tagging.cluster_id())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Region and cluster identity, from the config or discovered.
#[derive(Debug, Clone)]
pub(crate) struct Identity {
    pub(crate) region: String,
    pub(crate) tagging: ClusterTagging,
}

impl AwsCloud {
    /// Builds the provider, discovering what the config leaves open: the region (environment, profile or
    /// instance metadata) and the cluster ID (tags of the instance this process runs on). Without a cluster
    /// ID the provider still builds; [`CloudProvider::has_cluster_id`] then answers `false`.
    pub async fn new(config: CloudConfig, options: AwsOptions) -> Result<Self, BuildError> {
        let identity = discover_identity(&config, &options).await?;
        Ok(Self::with_identity(config, identity, options))
    }

    /// Builds the provider without any network call when the config names the region (or zone) and the
    /// cluster; `None` when discovery is needed.
    pub(crate) fn without_discovery(config: &CloudConfig) -> Option<Identity> {
        let region = configured_region(config)?;
        let tagging = configured_tagging(config)?;
        Some(Identity { region, tagging })
    }

    pub(crate) fn with_identity(
        config: CloudConfig,
        identity: Identity,
        options: AwsOptions,
    ) -> Self {
        let metrics = options
            .metrics
            .unwrap_or_else(|| AwsMetrics::global().clone());
        let http = options.http_client.unwrap_or_else(https_client);
        let clients = build_clients(
            &config,
            &identity.region,
            options.credentials,
            http.clone(),
            &metrics,
        );
        tracing::info!(
            region = %identity.region,
            cluster_id = identity.tagging.cluster_id().unwrap_or("<none>"),
            "AWS cloud provider configured"
        );
        for ignored in &config.ignored {
            tracing::warn!("{ignored}");
        }
        if let crate::config::NlbSecurityGroupMode::Invalid(error) = &config.nlb_security_group_mode
        {
            tracing::warn!(
                "[Global] NLBSecurityGroupMode: {error}; every network load balancer sync fails until it is fixed, as upstream"
            );
        }
        if config.source_arn.is_some() && config.role_arn.is_none() {
            tracing::warn!(
                "[Global] SourceARN has no effect without RoleARN (it is sent when assuming that role)"
            );
        }
        for o in &config.service_overrides {
            if o.service == crate::config::AwsService::Unused {
                tracing::warn!(section = %o.name, service = %o.service_name,
                    "[ServiceOverride] of a service this provider never calls; it has no effect");
            }
        }
        let imds = imds_client(http.clone(), &config);
        AwsCloud {
            instances: InstanceCache::new(config.instance_cache_ttl),
            config,
            region: identity.region,
            tagging: identity.tagging,
            clients,
            metrics,
            zone_ids: RwLock::new(HashMap::new()),
            imds,
            route_targets: Default::default(),
            no_topology: Default::default(),
        }
    }

    /// The region the provider works in.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// The cluster ID, when known.
    pub fn cluster_id(&self) -> Option<&str> {
        self.tagging.cluster_id()
    }

    /// The metrics the provider records into.
    pub fn metrics(&self) -> &AwsMetrics {
        &self.metrics
    }

    /// The parsed cloud config.
    pub fn config(&self) -> &CloudConfig {
        &self.config
    }

    /// Reads a path of the instance metadata service (only reachable on EC2).
    pub(crate) async fn metadata(&self, path: &str) -> cloud_provider::Result<String> {
        self.imds
            .get(path)
            .await
            .map(|v| v.as_ref().to_string())
            .map_err(|e| {
                cloud_provider::CloudError::provider_with(
                    format!("reading {path} from the EC2 instance metadata service"),
                    e,
                )
            })
    }
}

/// An EC2 filter.
pub(crate) fn filter(name: &str, values: impl IntoIterator<Item = impl Into<String>>) -> Filter {
    Filter::builder()
        .name(name)
        .set_values(Some(values.into_iter().map(Into::into).collect()))
        .build()
}

/// The configured region, or the region of the configured zone (`us-east-1a` -> `us-east-1`).
/// The configured region: that of `Zone` when set (it takes precedence, as upstream), else `Region`.
fn configured_region(config: &CloudConfig) -> Option<String> {
    config
        .zone
        .as_deref()
        .and_then(region_of_zone)
        .or_else(|| config.region.clone())
}

/// The region of a zone name as upstream reads it: the leading `<letters>-...<letters>-<digits>`
/// (`us-east-1` of `us-east-1a` and of the Local Zone `us-east-1-bos-1a`).
pub(crate) fn region_of_zone(zone: &str) -> Option<String> {
    let mut end = 0;
    let mut rest = zone;
    while let Some((word, after)) = rest.split_once('-') {
        if word.is_empty() || !word.chars().all(|c| c.is_ascii_alphabetic()) {
            break;
        }
        end += word.len() + 1;
        rest = after;
    }
    let digits = zone[end..].chars().take_while(char::is_ascii_digit).count();
    (end > 0 && digits > 0).then(|| zone[..end + digits].to_string())
}

fn configured_tagging(config: &CloudConfig) -> Option<ClusterTagging> {
    (config.kubernetes_cluster_id.is_some() || config.kubernetes_cluster_tag.is_some()).then(|| {
        ClusterTagging::new(
            config.kubernetes_cluster_id.clone(),
            config.kubernetes_cluster_tag.clone(),
        )
    })
}

/// Discovers the region and cluster identity the config does not give. Uses a throw-away HTTP client so no
/// connection outlives the runtime this runs on.
pub(crate) async fn discover_identity(
    config: &CloudConfig,
    options: &AwsOptions,
) -> Result<Identity, BuildError> {
    let http = options.http_client.clone().unwrap_or_else(https_client);
    let region = match configured_region(config) {
        Some(region) => region,
        None => discover_region(http.clone())
            .await
            .ok_or(BuildError::NoRegion)?,
    };
    let tagging = match configured_tagging(config) {
        Some(tagging) => tagging,
        None => discover_tagging(config, &region, options, http).await,
    };
    Ok(Identity { region, tagging })
}

/// Reads the cluster tags of the instance this process runs on. Any failure means "no cluster ID".
async fn discover_tagging(
    config: &CloudConfig,
    region: &str,
    options: &AwsOptions,
    http: SharedHttpClient,
) -> ClusterTagging {
    let instance_id = match imds_client(http.clone(), config)
        .get("/latest/meta-data/instance-id")
        .await
    {
        Ok(id) => id.as_ref().to_string(),
        Err(e) => {
            tracing::warn!(error = %e, "no cluster ID in the cloud config and the instance metadata service is not reachable");
            return ClusterTagging::default();
        }
    };
    let metrics = AwsMetrics::default();
    let clients = build_clients(config, region, options.credentials.clone(), http, &metrics);
    match own_instance_tags(&clients, &instance_id).await {
        Ok(tags) => {
            let found =
                ClusterTagging::from_tags(tags.iter().map(|(k, v)| (k.as_str(), v.as_str())));
            if found.is_none() {
                tracing::warn!(instance = %instance_id, "this instance carries no kubernetes.io/cluster/<id> tag");
            }
            found.unwrap_or_default()
        }
        Err(e) => {
            tracing::warn!(error = %e, instance = %instance_id, "could not read this instance's tags");
            ClusterTagging::default()
        }
    }
}

async fn own_instance_tags(
    clients: &AwsClients,
    instance_id: &str,
) -> Result<Vec<(String, String)>, ApiError> {
    let out = clients
        .ec2
        .describe_instances()
        .filters(filter("instance-id", [instance_id]))
        .send()
        .await
        .api("DescribeInstances")?;
    Ok(ec2_tag_pairs(
        out.reservations()
            .iter()
            .flat_map(|r| r.instances())
            .flat_map(|i| i.tags()),
    ))
}

impl CloudProvider for AwsCloud {
    fn provider_name(&self) -> &str {
        PROVIDER_NAME
    }

    fn load_balancer(&self) -> Option<&dyn LoadBalancer> {
        Some(self)
    }

    fn service_admission(&self) -> Option<&dyn ServiceAdmission> {
        Some(self)
    }

    fn instances(&self) -> Option<&dyn Instances> {
        Some(self)
    }

    fn instances_v2(&self) -> Option<&dyn InstancesV2> {
        Some(self)
    }

    fn zones(&self) -> Option<&dyn Zones> {
        Some(self)
    }

    fn routes(&self) -> Option<&dyn Routes> {
        Some(self)
    }

    fn pv_labeler(&self) -> Option<&dyn PvLabeler> {
        Some(self)
    }

    fn resource_tagger(&self) -> Option<&dyn cloud_provider::ResourceTagger> {
        Some(self)
    }

    fn mutation_gate(&self) -> Option<&cloud_provider::MutationGate> {
        Some(&self.clients.gate)
    }

    fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        crate::metrics::AwsMetrics::global().register(registry);
    }

    fn has_cluster_id(&self) -> bool {
        self.tagging.cluster_id().is_some()
    }
}

/// Builds the provider from cloud-config bytes: parses and validates the config, then discovers what it
/// leaves open on a short-lived helper thread (the registry calls factories synchronously, possibly from
/// inside an async runtime).
pub fn build_from_config_bytes(bytes: Option<&[u8]>) -> Result<Arc<AwsCloud>, BuildError> {
    let config = CloudConfig::parse(bytes.unwrap_or_default())?;
    if let Some(identity) = AwsCloud::without_discovery(&config) {
        return Ok(Arc::new(AwsCloud::with_identity(
            config,
            identity,
            AwsOptions::default(),
        )));
    }
    let identity = std::thread::scope(|scope| {
        let handle = std::thread::Builder::new()
            .name("aws-discovery".to_string())
            .spawn_scoped(scope, || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| BuildError::Setup(format!("starting a runtime: {e}")))?;
                runtime.block_on(discover_identity(&config, &AwsOptions::default()))
            })
            .map_err(|e| BuildError::Setup(format!("starting the discovery thread: {e}")))?;
        handle
            .join()
            .map_err(|_| BuildError::Setup("the discovery thread panicked".to_string()))?
    })?;
    Ok(Arc::new(AwsCloud::with_identity(
        config,
        identity,
        AwsOptions::default(),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const THROTTLED: &str = "<Response><Errors><Error><Code>RequestLimitExceeded</Code>\
        <Message>Request limit exceeded.</Message></Error></Errors><RequestID>r1</RequestID></Response>";
    const ZONES: &str = "<DescribeAvailabilityZonesResponse xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\">\
        <requestId>r2</requestId><availabilityZoneInfo><item><zoneName>us-east-1a</zoneName>\
        <zoneId>use1-az1</zoneId><zoneState>available</zoneState></item></availabilityZoneInfo>\
        </DescribeAvailabilityZonesResponse>";

    /// A one-purpose HTTP endpoint answering the first `throttled` requests with EC2's
    /// RequestLimitExceeded (503) and the rest with one availability zone. moto never throttles, so the
    /// retry, metrics and error mapping of throttled calls are checked against this instead.
    async fn throttling_endpoint(throttled: usize) -> (String, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(AtomicUsize::new(0));
        let counter = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let n = counter.fetch_add(1, Ordering::SeqCst);
                // Read the request head and body (form-encoded, with Content-Length).
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let read = conn.read(&mut chunk).await.unwrap_or(0);
                    if read == 0 {
                        break;
                    }
                    buf.extend_from_slice(&chunk[..read]);
                    let text = String::from_utf8_lossy(&buf).to_string();
                    if let Some(head_end) = text.find("\r\n\r\n") {
                        let length = text[..head_end]
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                            })
                            .unwrap_or(0);
                        if buf.len() >= head_end + 4 + length {
                            break;
                        }
                    }
                }
                let (status, body) = if n < throttled {
                    ("503 Service Unavailable", THROTTLED)
                } else {
                    ("200 OK", ZONES)
                };
                let response = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: text/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(response.as_bytes()).await;
                let _ = conn.shutdown().await;
            }
        });
        (url, seen)
    }

    fn cloud_at(url: &str, max_attempts: u32) -> AwsCloud {
        let config = CloudConfig::parse(
            format!(
                "[Global]\nRegion = us-east-1\nKubernetesClusterID = c\nMaxAttempts = {max_attempts}\n\
                 [ServiceOverride \"1\"]\nService = ec2\nRegion = us-east-1\nURL = {url}\nSigningRegion = us-east-1\n"
            )
            .as_bytes(),
        )
        .unwrap();
        let identity = AwsCloud::without_discovery(&config).unwrap();
        AwsCloud::with_identity(
            config,
            identity,
            AwsOptions {
                credentials: Some(SharedCredentialsProvider::new(
                    aws_credential_types::Credentials::new(
                        "AKIDTEST", "secret", None, None, "test",
                    ),
                )),
                metrics: Some(AwsMetrics::default()),
                http_client: None,
            },
        )
    }

    #[tokio::test]
    async fn throttled_attempts_are_retried_and_counted() {
        let (url, seen) = throttling_endpoint(2).await;
        let cloud = cloud_at(&url, 3);
        assert_eq!(
            cloud.zone_id("us-east-1a").await.unwrap().as_deref(),
            Some("use1-az1")
        );
        assert_eq!(seen.load(Ordering::SeqCst), 3);
        let m = cloud.metrics();
        assert_eq!(m.throttled_count("DescribeAvailabilityZones"), 2);
        assert_eq!(m.request_count("DescribeAvailabilityZones"), 1);
        assert_eq!(m.error_count("DescribeAvailabilityZones"), 0);
        // Cached: no second call.
        cloud.zone_id("us-east-1a").await.unwrap();
        assert_eq!(seen.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn throttling_through_every_retry_asks_the_controllers_to_retry_later() {
        let (url, seen) = throttling_endpoint(usize::MAX).await;
        let cloud = cloud_at(&url, 2);
        let err = cloud.zone_id("us-east-1a").await.unwrap_err();
        assert_eq!(
            err.retry_after(),
            Some(crate::error::THROTTLED_RETRY_AFTER),
            "{err}"
        );
        assert!(err.to_string().contains("RequestLimitExceeded"), "{err}");
        assert_eq!(seen.load(Ordering::SeqCst), 2);
        let m = cloud.metrics();
        assert_eq!(m.throttled_count("DescribeAvailabilityZones"), 2);
        assert_eq!(m.error_count("DescribeAvailabilityZones"), 1);
    }

    #[test]
    fn regions_of_zones() {
        assert_eq!(region_of_zone("us-east-1a").as_deref(), Some("us-east-1"));
        assert_eq!(
            region_of_zone("eu-central-1c").as_deref(),
            Some("eu-central-1")
        );
        assert_eq!(
            region_of_zone("us-east-1-bos-1a").as_deref(),
            Some("us-east-1")
        );
        assert_eq!(
            region_of_zone("us-east-1-wl1-bos-wlz-1").as_deref(),
            Some("us-east-1")
        );
        assert_eq!(region_of_zone("us-east-1").as_deref(), Some("us-east-1"));
        assert_eq!(region_of_zone("local"), None);
        assert_eq!(region_of_zone("1a"), None);
    }

    #[test]
    fn identity_from_config_alone() {
        let cfg =
            CloudConfig::parse(b"[Global]\nZone = us-west-2b\nKubernetesClusterID = c1\n").unwrap();
        let id = AwsCloud::without_discovery(&cfg).unwrap();
        assert_eq!(id.region, "us-west-2");
        assert_eq!(id.tagging.cluster_id(), Some("c1"));
        let cfg = CloudConfig::parse(b"[Global]\nRegion = us-west-2\n").unwrap();
        assert!(AwsCloud::without_discovery(&cfg).is_none());
        let cfg = CloudConfig::parse(b"[Global]\nKubernetesClusterTag = old\n").unwrap();
        assert!(AwsCloud::without_discovery(&cfg).is_none());
    }
}
