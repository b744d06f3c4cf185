//! Building the EC2, ELBv2 and STS clients: HTTPS through rustls with ring, credentials from the default
//! chain (optionally through `RoleARN`), retries in standard or adaptive mode, endpoint overrides from the
//! `[ServiceOverride]` sections, the metrics interceptor and the mutation gate.
//!
//! Nothing here talks to AWS: the default credential chain is built on first use, so clients can be created
//! outside any particular runtime and used from the controllers' runtime.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_config::BehaviorVersion;
use aws_config::default_provider::credentials::DefaultCredentialsChain;
use aws_config::provider_config::ProviderConfig;
use aws_credential_types::Credentials;
use aws_credential_types::provider::error::CredentialsError;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider, future};
use aws_sdk_ec2::config::retry::RetryConfig;
use aws_sdk_ec2::config::timeout::TimeoutConfig;
use aws_sdk_ec2::config::{IdentityCache, Region, SharedHttpClient, SharedIdentityCache};
use aws_smithy_http_client::tls;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextMut;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;
use cloud_provider::MutationGate;

use crate::config::{AwsService, CloudConfig, RetryMode};
use crate::metrics::{AwsMetrics, MetricsInterceptor};
use crate::mutation_gate::MutationGateInterceptor;

/// Session name of the role sessions created for `RoleARN`.
pub const ROLE_SESSION_NAME: &str = "cloud-controller-manager";

/// The SDK clients the provider uses.
#[derive(Clone, Debug)]
pub struct AwsClients {
    /// EC2.
    pub ec2: aws_sdk_ec2::Client,
    /// Elastic Load Balancing v2 (network load balancers).
    pub elb: aws_sdk_elasticloadbalancingv2::Client,
    /// Elastic Load Balancing (classic load balancers).
    pub elb_classic: aws_sdk_elasticloadbalancing::Client,
    /// The gate every mutating call of the three clients passes through.
    pub gate: Arc<MutationGate>,
}

/// A client of one SDK crate with the shared credentials, identity cache, HTTP client, retries, timeouts
/// and metrics, sent to `endpoint`.
macro_rules! service_client {
    ($sdk:ident, $endpoint:expr, $credentials:expr, $cache:expr, $http:expr, $config:expr, $metrics:expr, $gate:expr) => {{
        let endpoint = &$endpoint;
        let mut builder = $sdk::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region($sdk::config::Region::new(endpoint.signing_region.clone()))
            .credentials_provider($credentials.clone())
            .identity_cache($cache.clone())
            .http_client($http.clone())
            .retry_config(retry_config($config))
            .timeout_config(timeout_config())
            .interceptor(MetricsInterceptor::new($metrics.clone()))
            .interceptor(MutationGateInterceptor::new($gate.clone()));
        if let Some(url) = &endpoint.url {
            builder = builder.endpoint_url(url);
        }
        $sdk::Client::from_conf(builder.build())
    }};
}

/// An HTTPS client using rustls with the ring crypto provider.
pub fn https_client() -> SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https()
}

fn retry_config(config: &CloudConfig) -> RetryConfig {
    let base = match config.retry_mode {
        RetryMode::Standard => RetryConfig::standard(),
        RetryMode::Adaptive => RetryConfig::adaptive(),
    };
    base.with_max_attempts(config.max_attempts)
}

fn timeout_config() -> TimeoutConfig {
    TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(5))
        .operation_attempt_timeout(Duration::from_secs(30))
        .operation_timeout(Duration::from_secs(120))
        .build()
}

/// Where the clients of one service send their requests.
struct Endpoint {
    url: Option<String>,
    signing_region: String,
}

fn endpoint(config: &CloudConfig, service: AwsService, region: &str) -> Endpoint {
    match config.service_override(service, region) {
        Some(o) => Endpoint {
            url: Some(o.url.clone()),
            signing_region: o.signing_region.clone(),
        },
        None => Endpoint {
            url: None,
            signing_region: region.to_string(),
        },
    }
}

/// Builds the clients for `region`. `credentials` replaces the default chain as the base credentials;
/// with `RoleARN` the base credentials assume that role.
pub fn build_clients(
    config: &CloudConfig,
    region: &str,
    credentials: Option<SharedCredentialsProvider>,
    http: SharedHttpClient,
    metrics: &AwsMetrics,
) -> AwsClients {
    let base = credentials.unwrap_or_else(|| {
        SharedCredentialsProvider::new(LazyDefaultChain {
            provider_config: ProviderConfig::default()
                .with_http_client(http.clone())
                .with_region(Some(Region::new(region.to_string()))),
            chain: tokio::sync::OnceCell::new(),
        })
    });
    let credentials = match &config.role_arn {
        None => base,
        Some(role_arn) => assume_role(config, region, role_arn, base, http.clone(), metrics),
    };
    // One cache for every client, so one set of credentials (one AssumeRole call) serves them all.
    let cache: SharedIdentityCache = IdentityCache::lazy().build();

    let ec2_endpoint = endpoint(config, AwsService::Ec2, region);
    let elb_endpoint = endpoint(config, AwsService::ElasticLoadBalancingV2, region);
    let classic_endpoint = endpoint(config, AwsService::ElasticLoadBalancingClassic, region);
    let gate = Arc::new(MutationGate::default());
    AwsClients {
        gate: gate.clone(),
        ec2: service_client!(
            aws_sdk_ec2,
            ec2_endpoint,
            credentials,
            cache,
            http,
            config,
            metrics,
            gate
        ),
        elb: service_client!(
            aws_sdk_elasticloadbalancingv2,
            elb_endpoint,
            credentials,
            cache,
            http,
            config,
            metrics,
            gate
        ),
        elb_classic: service_client!(
            aws_sdk_elasticloadbalancing,
            classic_endpoint,
            credentials,
            cache,
            http,
            config,
            metrics,
            gate
        ),
    }
}

/// Credentials of `role_arn`, assumed through STS with the `base` credentials.
fn assume_role(
    config: &CloudConfig,
    region: &str,
    role_arn: &str,
    base: SharedCredentialsProvider,
    http: SharedHttpClient,
    metrics: &AwsMetrics,
) -> SharedCredentialsProvider {
    let sts_endpoint = endpoint(config, AwsService::Sts, region);
    let mut sts = aws_sdk_sts::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(aws_sdk_sts::config::Region::new(
            sts_endpoint.signing_region,
        ))
        .credentials_provider(base)
        .http_client(http)
        .retry_config(retry_config(config))
        .timeout_config(timeout_config())
        .interceptor(MetricsInterceptor::new(metrics.clone()))
        .interceptor(SourceHeaders(source_headers(
            role_arn,
            config.source_arn.as_deref(),
        )));
    if let Some(url) = sts_endpoint.url {
        sts = sts.endpoint_url(url);
    }
    SharedCredentialsProvider::new(AssumeRoleCredentials {
        sts: aws_sdk_sts::Client::from_conf(sts.build()),
        role_arn: role_arn.to_string(),
    })
}

/// The confused-deputy headers of AssumeRole requests, as upstream sends them: `x-amz-source-account` (the
/// account of `role_arn`) always, `x-amz-source-arn` when `SourceARN` is set.
fn source_headers(role_arn: &str, source_arn: Option<&str>) -> Vec<(&'static str, String)> {
    let mut headers = Vec::new();
    if let Some(account) = role_arn.split(':').nth(4).filter(|a| !a.is_empty()) {
        headers.push(("x-amz-source-account", account.to_string()));
    }
    if let Some(arn) = source_arn {
        headers.push(("x-amz-source-arn", arn.to_string()));
    }
    headers
}

/// Adds fixed headers to every request of the STS client before it is signed.
#[derive(Debug)]
struct SourceHeaders(Vec<(&'static str, String)>);

impl Intercept for SourceHeaders {
    fn name(&self) -> &'static str {
        "CloudProviderAwsSourceHeaders"
    }

    fn modify_before_signing(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let headers = context.request_mut().headers_mut();
        for (name, value) in &self.0 {
            headers.insert(*name, value.clone());
        }
        Ok(())
    }
}

/// The SDK's default credential chain (environment, shared files, web identity, container, instance
/// role), built on first use.
struct LazyDefaultChain {
    provider_config: ProviderConfig,
    chain: tokio::sync::OnceCell<DefaultCredentialsChain>,
}

impl fmt::Debug for LazyDefaultChain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LazyDefaultChain")
            .field("built", &self.chain.initialized())
            .finish()
    }
}

impl ProvideCredentials for LazyDefaultChain {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        future::ProvideCredentials::new(async move {
            let chain = self
                .chain
                .get_or_init(|| {
                    DefaultCredentialsChain::builder()
                        .configure(self.provider_config.clone())
                        .build()
                })
                .await;
            chain.provide_credentials().await
        })
    }
}

/// Credentials of a role session (`RoleARN`), obtained with the base credentials through STS AssumeRole.
/// The clients' identity cache keeps them until shortly before they expire.
struct AssumeRoleCredentials {
    sts: aws_sdk_sts::Client,
    role_arn: String,
}

impl fmt::Debug for AssumeRoleCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AssumeRoleCredentials")
            .field("role_arn", &self.role_arn)
            .finish()
    }
}

impl AssumeRoleCredentials {
    async fn assume(&self) -> Result<Credentials, CredentialsError> {
        tracing::debug!(role_arn = %self.role_arn, "assuming role");
        let out = self
            .sts
            .assume_role()
            .role_arn(&self.role_arn)
            .role_session_name(ROLE_SESSION_NAME)
            .send()
            .await
            .map_err(|e| {
                let err = crate::error::ApiError::from_sdk("AssumeRole", &e);
                CredentialsError::provider_error(err)
            })?;
        let creds = out.credentials.ok_or_else(|| {
            CredentialsError::unhandled("AssumeRole answered without credentials")
        })?;
        let expiry = SystemTime::try_from(*creds.expiration()).ok();
        Ok(Credentials::new(
            creds.access_key_id(),
            creds.secret_access_key(),
            Some(creds.session_token().to_string()),
            expiry,
            "AssumeRole",
        ))
    }
}

impl ProvideCredentials for AssumeRoleCredentials {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        future::ProvideCredentials::new(self.assume())
    }
}

/// Region discovery when `[Global] Region` is not set: the environment (`AWS_REGION`), the shared config
/// profile, then the instance metadata service.
pub async fn discover_region(http: SharedHttpClient) -> Option<String> {
    let sdk = aws_config::defaults(BehaviorVersion::latest())
        .http_client(http)
        .load()
        .await;
    sdk.region().map(|r| r.to_string())
}

/// An instance metadata service client with short timeouts (it is only reachable on EC2), sent to the
/// `ec2imds` override's URL when there is one.
pub fn imds_client(http: SharedHttpClient, config: &CloudConfig) -> aws_config::imds::Client {
    let builder = aws_config::imds::Client::builder()
        .configure(&ProviderConfig::default().with_http_client(http))
        .connect_timeout(Duration::from_secs(1))
        .read_timeout(Duration::from_secs(2))
        .max_attempts(2);
    let url = config
        .service_override(AwsService::Imds, "")
        .map(|o| o.url.as_str());
    match url.map(|u| builder.clone().endpoint(u)) {
        Some(Ok(with_endpoint)) => with_endpoint.build(),
        Some(Err(e)) => {
            tracing::warn!(error = %e, "the ec2imds override's URL is not usable; using the default endpoint");
            builder.build()
        }
        None => builder.build(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_follow_overrides() {
        let cfg = CloudConfig::parse(
            b"[ServiceOverride \"1\"]\nService = ec2\nRegion = r1\nURL = http://127.0.0.1:1\nSigningRegion = s1\n",
        )
        .unwrap();
        let e = endpoint(&cfg, AwsService::Ec2, "r1");
        assert_eq!(e.url.as_deref(), Some("http://127.0.0.1:1"));
        assert_eq!(e.signing_region, "s1");
        let e = endpoint(&cfg, AwsService::Ec2, "r2");
        assert_eq!(e.url, None);
        assert_eq!(e.signing_region, "r2");
        let e = endpoint(&cfg, AwsService::ElasticLoadBalancingV2, "r1");
        assert_eq!(e.url, None);

        // `elasticloadbalancing` serves both load-balancing APIs; upstream's service IDs one each.
        let cfg = CloudConfig::parse(
            b"[ServiceOverride \"1\"]\nService = elasticloadbalancing\nRegion = r1\nURL = http://a\nSigningRegion = r1\n\
              [ServiceOverride \"2\"]\nService = Elastic Load Balancing v2\nRegion = r2\nURL = http://b\nSigningRegion = r2\n",
        )
        .unwrap();
        for api in [
            AwsService::ElasticLoadBalancingV2,
            AwsService::ElasticLoadBalancingClassic,
        ] {
            assert_eq!(endpoint(&cfg, api, "r1").url.as_deref(), Some("http://a"));
        }
        let v2 = endpoint(&cfg, AwsService::ElasticLoadBalancingV2, "r2");
        assert_eq!(v2.url.as_deref(), Some("http://b"));
        let classic = endpoint(&cfg, AwsService::ElasticLoadBalancingClassic, "r2");
        assert_eq!(classic.url, None);
    }

    #[test]
    fn assume_role_sends_upstreams_source_headers() {
        let role = "arn:aws:iam::123456789012:role/ccm";
        assert_eq!(
            source_headers(role, None),
            vec![("x-amz-source-account", "123456789012".to_string())]
        );
        assert_eq!(
            source_headers(role, Some("arn:aws:eks:us-east-1:123456789012:cluster/c")),
            vec![
                ("x-amz-source-account", "123456789012".to_string()),
                (
                    "x-amz-source-arn",
                    "arn:aws:eks:us-east-1:123456789012:cluster/c".to_string()
                ),
            ]
        );
    }

    #[test]
    fn retry_modes() {
        let mut cfg = CloudConfig::default();
        let rc = retry_config(&cfg);
        assert_eq!(rc.max_attempts(), crate::config::DEFAULT_MAX_ATTEMPTS);
        assert_eq!(rc.mode(), aws_sdk_ec2::config::retry::RetryMode::Standard);
        cfg.retry_mode = RetryMode::Adaptive;
        cfg.max_attempts = 9;
        let rc = retry_config(&cfg);
        assert_eq!(rc.max_attempts(), 9);
        assert_eq!(rc.mode(), aws_sdk_ec2::config::retry::RetryMode::Adaptive);
    }
}
