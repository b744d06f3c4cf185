//! [`DigitalOceanCloud`]: the provider object, its start-up checks and the Service annotation write-back.
//!
//! Construction (the registry factory) is synchronous and only validates the configuration. The checks
//! that need the API run in [`CloudProvider::initialize`], once the controller manager leads: the token is
//! verified with `GET /v2/account`, and the region (from `REGION`, else the metadata service) is validated
//! against `GET /v2/regions`. A failure there stops the controller manager with the reason.

use std::collections::BTreeMap;
use std::sync::Arc;

use cloud_provider::{
    BoxError, CloudError, CloudProvider, InstancesV2, LoadBalancer as LoadBalancerCapability,
    MutationGate, ProviderController, PvLabeler, Result, ServiceAdmission,
};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, Patch, PatchParams};

use crate::api::{Account, Region};
use crate::client::{ApiError, DoClient};
use crate::config::DoConfig;
use crate::droplets::{DropletDirectory, PROVIDER_NAME};
use crate::firewall::FirewallController;
use crate::firewall::metrics::FirewallMetrics;
use crate::metrics::ApiMetrics;
use crate::tags::TagsController;

/// The DigitalOcean cloud provider.
pub struct DigitalOceanCloud {
    pub(crate) config: DoConfig,
    pub(crate) client: DoClient,
    pub(crate) droplets: DropletDirectory,
    firewall_metrics: FirewallMetrics,
    region: parking_lot::RwLock<Option<String>>,
    kube: parking_lot::RwLock<Option<kube::Client>>,
}

impl std::fmt::Debug for DigitalOceanCloud {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DigitalOceanCloud")
            .field("config", &self.config)
            .field("region", &*self.region.read())
            .finish_non_exhaustive()
    }
}

impl DigitalOceanCloud {
    /// Builds the provider (no API call is made).
    pub fn new(config: DoConfig) -> std::result::Result<Self, ApiError> {
        let client = DoClient::new(&config)?;
        let droplets = DropletDirectory::new(
            client.clone(),
            config.droplet_cache_ttl,
            config.droplet_miss_refresh_interval,
        );
        let region = config.region.clone();
        Ok(DigitalOceanCloud {
            config,
            client,
            droplets,
            firewall_metrics: FirewallMetrics::default(),
            region: parking_lot::RwLock::new(region),
            kube: parking_lot::RwLock::new(None),
        })
    }

    /// Builds the provider from the `--cloud-config` bytes and the process environment.
    pub fn from_cloud_config(file: Option<&[u8]>) -> std::result::Result<Self, BoxError> {
        let config = DoConfig::from_env_and_file(file)?;
        Ok(Self::new(config)?)
    }

    /// The firewall controller's metrics.
    pub fn firewall_metrics(&self) -> &FirewallMetrics {
        &self.firewall_metrics
    }

    /// The configuration.
    pub fn config(&self) -> &DoConfig {
        &self.config
    }

    /// The API client.
    pub fn client(&self) -> &DoClient {
        &self.client
    }

    /// The API call metrics.
    pub fn api_metrics(&self) -> &ApiMetrics {
        self.client.metrics()
    }

    /// The region: configured, or resolved by [`DigitalOceanCloud::prepare`].
    pub fn region(&self) -> Option<String> {
        self.region.read().clone()
    }

    /// Sets the Kubernetes client used to write annotations back to Services (done by `initialize`).
    pub fn set_kube_client(&self, client: kube::Client) {
        *self.kube.write() = Some(client);
    }

    /// The Kubernetes client, once set.
    pub(crate) fn kube_client(&self) -> Option<kube::Client> {
        self.kube.read().clone()
    }

    /// The API checks of start-up: the token works and the account is not locked; the region exists
    /// (read from the metadata service when not configured). Idempotent.
    pub async fn prepare(&self) -> Result<()> {
        let account: Account = self
            .client
            .get("get_account", "v2/account", "account")
            .await
            .map_err(|e| match e.status() {
                Some(401) | Some(403) => CloudError::provider_with(
                    "the DigitalOcean API refused the access token (check DO_ACCESS_TOKEN)",
                    e,
                ),
                _ => e.into(),
            })?;
        if account.status == "locked" {
            return Err(CloudError::provider(format!(
                "the DigitalOcean account is locked: {}",
                account.status_message
            )));
        }

        let configured = self.region();
        let region = match configured {
            Some(r) => r,
            None => {
                let url = self
                    .config
                    .metadata_url
                    .join("region")
                    .map_err(|e| CloudError::provider(format!("invalid metadata URL: {e}")))?;
                self.client.fetch_metadata(url).await.map_err(|e| {
                    CloudError::provider_with(
                        "REGION is not set and the droplet metadata service did not answer; set REGION",
                        e,
                    )
                })?
            }
        };
        let regions: Vec<Region> = self
            .client
            .list("list_regions", "v2/regions", "regions", &[])
            .await?;
        let Some(known) = regions.iter().find(|r| r.slug == region) else {
            let mut slugs: Vec<&str> = regions.iter().map(|r| r.slug.as_str()).collect();
            slugs.sort_unstable();
            return Err(CloudError::provider(format!(
                "{region:?} is not a DigitalOcean region (known regions: {})",
                slugs.join(", ")
            )));
        };
        if !known.available {
            tracing::warn!(region = %region, "the region does not accept new resources");
        }
        tracing::info!(region = %region, account_status = %account.status, "DigitalOcean provider ready");
        *self.region.write() = Some(region);
        Ok(())
    }

    /// Merges `wanted` into the Service's annotations (one merge patch, only when something differs).
    pub(crate) async fn write_back_annotations(
        &self,
        service: &Service,
        wanted: &BTreeMap<&str, String>,
    ) -> Result<()> {
        let current = service.metadata.annotations.as_ref();
        let changes: BTreeMap<&str, &str> = wanted
            .iter()
            .filter(|(k, v)| current.and_then(|m| m.get(**k)) != Some(*v))
            .map(|(k, v)| (*k, v.as_str()))
            .collect();
        if changes.is_empty() {
            return Ok(());
        }
        let Some(client) = self.kube.read().clone() else {
            tracing::debug!(
                ?changes,
                "no Kubernetes client; not writing Service annotations"
            );
            return Ok(());
        };
        let (Some(namespace), Some(name)) = (
            service.metadata.namespace.as_deref(),
            service.metadata.name.as_deref(),
        ) else {
            return Err(CloudError::provider(
                "the Service has no namespace or name; cannot write its annotations",
            ));
        };
        let api: Api<Service> = Api::namespaced(client, namespace);
        let patch = serde_json::json!({"metadata": {"annotations": changes}});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| {
                CloudError::provider_with(
                    format!("writing the load balancer annotations of {namespace}/{name}"),
                    e,
                )
            })?;
        tracing::debug!(service = %format!("{namespace}/{name}"), ?changes, "wrote Service annotations");
        Ok(())
    }
}

#[async_trait::async_trait]
impl CloudProvider for DigitalOceanCloud {
    fn provider_name(&self) -> &str {
        PROVIDER_NAME
    }

    async fn initialize(&self, client: kube::Client) -> Result<()> {
        self.set_kube_client(client);
        self.prepare().await
    }

    fn load_balancer(&self) -> Option<&dyn LoadBalancerCapability> {
        Some(self)
    }

    fn service_admission(&self) -> Option<&dyn ServiceAdmission> {
        Some(self)
    }

    fn instances_v2(&self) -> Option<&dyn InstancesV2> {
        Some(self)
    }

    fn pv_labeler(&self) -> Option<&dyn PvLabeler> {
        Some(self)
    }

    fn controllers(&self) -> Vec<Arc<dyn ProviderController>> {
        vec![
            Arc::new(FirewallController::new(
                self.client.clone(),
                self.config.public_access_firewall.clone(),
                self.config.default_lb_type,
                self.firewall_metrics.clone(),
            )),
            Arc::new(TagsController::new(
                self.client.clone(),
                self.config.cluster_id.clone(),
            )),
        ]
    }

    fn mutation_gate(&self) -> Option<&MutationGate> {
        Some(self.client.mutation_gate())
    }

    fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        self.client.metrics().register(registry);
        self.firewall_metrics.register(registry);
    }

    fn has_cluster_id(&self) -> bool {
        self.config.cluster_id.is_some()
    }
}
