//! The top-level provider interface and its capability accessors.

use std::sync::Arc;

use crate::{
    Clusters, Instances, InstancesV2, LoadBalancer, MutationGate, ProviderController, PvLabeler,
    ResourceTagger, Result, Routes, ServiceAdmission, Zones,
};

/// A cloud provider: the entry point the controller manager gets from the [`Registry`](crate::Registry).
///
/// Each capability accessor returns `Some` when the provider supports it; the controllers that need an
/// unsupported capability do not start. Providers usually implement the capability traits on the same type
/// and return `Some(self)`.
#[async_trait::async_trait]
pub trait CloudProvider: Send + Sync + 'static {
    /// The provider's registered name, e.g. `"fake"`; provider IDs of its instances are `"<name>://..."`.
    fn provider_name(&self) -> &str;

    /// Called once, after the leader lease is won and before any controller starts. The client is the
    /// controller manager's own; providers may keep a clone to read or watch Kubernetes objects.
    async fn initialize(&self, client: kube::Client) -> Result<()> {
        let _ = client;
        Ok(())
    }

    /// Load balancers for `type: LoadBalancer` Services.
    fn load_balancer(&self) -> Option<&dyn LoadBalancer> {
        None
    }

    /// Admission checks of LoadBalancer Services (the `lb-service` webhook, see [`crate::admission`]).
    fn service_admission(&self) -> Option<&dyn ServiceAdmission> {
        None
    }

    /// The v1 instances interface (by node name and provider ID).
    fn instances(&self) -> Option<&dyn Instances> {
        None
    }

    /// The v2 instances interface (by Node object); preferred over [`CloudProvider::instances`] when present.
    fn instances_v2(&self) -> Option<&dyn InstancesV2> {
        None
    }

    /// Zone and region lookups.
    fn zones(&self) -> Option<&dyn Zones> {
        None
    }

    /// Cluster enumeration.
    fn clusters(&self) -> Option<&dyn Clusters> {
        None
    }

    /// Pod-network routes.
    fn routes(&self) -> Option<&dyn Routes> {
        None
    }

    /// Zone/region labels for PersistentVolumes backed by this cloud's volumes.
    fn pv_labeler(&self) -> Option<&dyn PvLabeler> {
        None
    }

    /// Tags on the cloud resources behind nodes (the tagging controller).
    fn resource_tagger(&self) -> Option<&dyn ResourceTagger> {
        None
    }

    /// Control loops of the provider's own, run next to the standard controllers (see
    /// [`crate::controller`]). Asked once, when the controller manager starts; the selected ones run after
    /// [`CloudProvider::initialize`]. The default has none.
    fn controllers(&self) -> Vec<Arc<dyn ProviderController>> {
        Vec::new()
    }

    /// The gate every mutating cloud call of the provider passes through (see [`crate::dry_run`]). A
    /// provider without one cannot be dry-run: `--dry-run` refuses to start with it. The default has none.
    fn mutation_gate(&self) -> Option<&MutationGate> {
        None
    }

    /// Registers the provider's own metrics (cloud API calls, latencies, throttling) on the daemon's
    /// registry, so they are served on `/metrics` next to the controllers' metrics. Called once, before
    /// serving starts. The default registers nothing.
    fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        let _ = registry;
    }

    /// Whether the provider knows which cluster its resources belong to (a cluster ID or tag). A provider
    /// answering `false` is refused unless the controller manager runs with `--allow-untagged-cloud`.
    fn has_cluster_id(&self) -> bool;
}
