//! [`TimedCloud`]: the provider as one controller sees it, with every contract call under
//! `--cloud-call-timeout` and accounted to that controller's health check (see [`crate::cloud_calls`]).
//!
//! It is the one place between the controllers and the provider: each controller wraps the provider once,
//! when it is built ([`ControllerContext::for_controller`](crate::ControllerContext::for_controller)), so
//! no call site can forget the timeout. It offers exactly the capabilities of the provider it wraps;
//! synchronous methods (names, accessors, the dry-run gate) pass straight through.

use std::collections::BTreeMap;
use std::sync::Arc;

use cloud_provider::{
    CloudError, CloudProvider, Clusters, InstanceMetadata, InstanceState, Instances, InstancesV2,
    LoadBalancer, MutationGate, ProviderController, PvLabeler, ResourceTagger, Result, Route,
    Routes, TagOutcome, Zone, Zones,
};
use k8s_openapi::api::core::v1::{
    LoadBalancerStatus, Node, NodeAddress, PersistentVolume, Service,
};

use crate::cloud_calls::CloudCalls;

/// A provider whose contract calls run under one controller's [`CloudCalls`].
pub struct TimedCloud {
    inner: Arc<dyn CloudProvider>,
    calls: Arc<CloudCalls>,
}

impl std::fmt::Debug for TimedCloud {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimedCloud")
            .field("provider", &self.inner.provider_name())
            .field("calls", &self.calls)
            .finish()
    }
}

impl TimedCloud {
    /// `inner` with its calls run under `calls`.
    pub fn new(inner: Arc<dyn CloudProvider>, calls: Arc<CloudCalls>) -> Self {
        TimedCloud { inner, calls }
    }

    /// The calls' bookkeeping (timeout, calls in flight, health).
    pub fn calls(&self) -> &Arc<CloudCalls> {
        &self.calls
    }

    // The wrapper only offers a capability the provider has, so these find it; `NotImplemented` keeps a
    // caller that skipped the accessor safe all the same.
    fn lb(&self) -> Result<&dyn LoadBalancer> {
        self.inner.load_balancer().ok_or(CloudError::NotImplemented)
    }
    fn v1(&self) -> Result<&dyn Instances> {
        self.inner.instances().ok_or(CloudError::NotImplemented)
    }
    fn v2(&self) -> Result<&dyn InstancesV2> {
        self.inner.instances_v2().ok_or(CloudError::NotImplemented)
    }
    fn zone_api(&self) -> Result<&dyn Zones> {
        self.inner.zones().ok_or(CloudError::NotImplemented)
    }
    fn cluster_api(&self) -> Result<&dyn Clusters> {
        self.inner.clusters().ok_or(CloudError::NotImplemented)
    }
    fn route_api(&self) -> Result<&dyn Routes> {
        self.inner.routes().ok_or(CloudError::NotImplemented)
    }
    fn labeler(&self) -> Result<&dyn PvLabeler> {
        self.inner.pv_labeler().ok_or(CloudError::NotImplemented)
    }
    fn tagger(&self) -> Result<&dyn ResourceTagger> {
        self.inner
            .resource_tagger()
            .ok_or(CloudError::NotImplemented)
    }
}

#[async_trait::async_trait]
impl CloudProvider for TimedCloud {
    fn provider_name(&self) -> &str {
        self.inner.provider_name()
    }

    /// Passed through without a timeout: start-up, not a controller's call.
    async fn initialize(&self, client: kube::Client) -> Result<()> {
        self.inner.initialize(client).await
    }

    fn load_balancer(&self) -> Option<&dyn LoadBalancer> {
        self.inner
            .load_balancer()
            .map(|_| self as &dyn LoadBalancer)
    }

    fn instances(&self) -> Option<&dyn Instances> {
        self.inner.instances().map(|_| self as &dyn Instances)
    }

    fn instances_v2(&self) -> Option<&dyn InstancesV2> {
        self.inner.instances_v2().map(|_| self as &dyn InstancesV2)
    }

    fn zones(&self) -> Option<&dyn Zones> {
        self.inner.zones().map(|_| self as &dyn Zones)
    }

    fn clusters(&self) -> Option<&dyn Clusters> {
        self.inner.clusters().map(|_| self as &dyn Clusters)
    }

    fn routes(&self) -> Option<&dyn Routes> {
        self.inner.routes().map(|_| self as &dyn Routes)
    }

    fn pv_labeler(&self) -> Option<&dyn PvLabeler> {
        self.inner.pv_labeler().map(|_| self as &dyn PvLabeler)
    }

    fn resource_tagger(&self) -> Option<&dyn ResourceTagger> {
        self.inner
            .resource_tagger()
            .map(|_| self as &dyn ResourceTagger)
    }

    fn controllers(&self) -> Vec<Arc<dyn ProviderController>> {
        self.inner.controllers()
    }

    fn mutation_gate(&self) -> Option<&MutationGate> {
        self.inner.mutation_gate()
    }

    fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        self.inner.register_metrics(registry);
    }

    fn has_cluster_id(&self) -> bool {
        self.inner.has_cluster_id()
    }
}

#[async_trait::async_trait]
impl LoadBalancer for TimedCloud {
    async fn get_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> Result<Option<LoadBalancerStatus>> {
        let lb = self.lb()?;
        self.calls
            .run(
                "get_load_balancer",
                lb.get_load_balancer(cluster_name, service),
            )
            .await
    }

    fn get_load_balancer_name(&self, cluster_name: &str, service: &Service) -> String {
        match self.inner.load_balancer() {
            Some(lb) => lb.get_load_balancer_name(cluster_name, service),
            None => cloud_provider::default_load_balancer_name(service),
        }
    }

    async fn ensure_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Node],
    ) -> Result<LoadBalancerStatus> {
        let lb = self.lb()?;
        self.calls
            .run(
                "ensure_load_balancer",
                lb.ensure_load_balancer(cluster_name, service, nodes),
            )
            .await
    }

    async fn update_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Node],
    ) -> Result<()> {
        let lb = self.lb()?;
        self.calls
            .run(
                "update_load_balancer",
                lb.update_load_balancer(cluster_name, service, nodes),
            )
            .await
    }

    async fn ensure_load_balancer_deleted(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> Result<()> {
        let lb = self.lb()?;
        self.calls
            .run(
                "ensure_load_balancer_deleted",
                lb.ensure_load_balancer_deleted(cluster_name, service),
            )
            .await
    }
}

#[async_trait::async_trait]
impl InstancesV2 for TimedCloud {
    async fn instance_exists(&self, node: &Node) -> Result<bool> {
        let v2 = self.v2()?;
        self.calls
            .run("instance_exists", v2.instance_exists(node))
            .await
    }

    async fn instance_shutdown(&self, node: &Node) -> Result<bool> {
        let v2 = self.v2()?;
        self.calls
            .run("instance_shutdown", v2.instance_shutdown(node))
            .await
    }

    async fn instance_metadata(&self, node: &Node) -> Result<Option<InstanceMetadata>> {
        let v2 = self.v2()?;
        self.calls
            .run("instance_metadata", v2.instance_metadata(node))
            .await
    }

    async fn instance_metadata_bulk(
        &self,
        nodes: &[Node],
    ) -> Vec<Result<Option<InstanceMetadata>>> {
        match self.v2() {
            Ok(v2) => {
                self.calls
                    .run_bulk(
                        "instance_metadata_bulk",
                        nodes.len(),
                        v2.instance_metadata_bulk(nodes),
                    )
                    .await
            }
            Err(_) => not_implemented_for_each(nodes.len()),
        }
    }

    async fn instance_states(&self, nodes: &[Node]) -> Vec<Result<InstanceState>> {
        match self.v2() {
            Ok(v2) => {
                self.calls
                    .run_bulk("instance_states", nodes.len(), v2.instance_states(nodes))
                    .await
            }
            Err(_) => not_implemented_for_each(nodes.len()),
        }
    }
}

#[async_trait::async_trait]
impl Instances for TimedCloud {
    async fn node_addresses(&self, node_name: &str) -> Result<Vec<NodeAddress>> {
        let v1 = self.v1()?;
        self.calls
            .run("node_addresses", v1.node_addresses(node_name))
            .await
    }

    async fn node_addresses_by_provider_id(&self, provider_id: &str) -> Result<Vec<NodeAddress>> {
        let v1 = self.v1()?;
        self.calls
            .run(
                "node_addresses_by_provider_id",
                v1.node_addresses_by_provider_id(provider_id),
            )
            .await
    }

    async fn instance_id(&self, node_name: &str) -> Result<String> {
        let v1 = self.v1()?;
        self.calls
            .run("instance_id", v1.instance_id(node_name))
            .await
    }

    async fn instance_type(&self, node_name: &str) -> Result<String> {
        let v1 = self.v1()?;
        self.calls
            .run("instance_type", v1.instance_type(node_name))
            .await
    }

    async fn instance_type_by_provider_id(&self, provider_id: &str) -> Result<String> {
        let v1 = self.v1()?;
        self.calls
            .run(
                "instance_type_by_provider_id",
                v1.instance_type_by_provider_id(provider_id),
            )
            .await
    }

    async fn current_node_name(&self, hostname: &str) -> Result<String> {
        let v1 = self.v1()?;
        self.calls
            .run("current_node_name", v1.current_node_name(hostname))
            .await
    }

    async fn instance_exists_by_provider_id(&self, provider_id: &str) -> Result<bool> {
        let v1 = self.v1()?;
        self.calls
            .run(
                "instance_exists_by_provider_id",
                v1.instance_exists_by_provider_id(provider_id),
            )
            .await
    }

    async fn instance_shutdown_by_provider_id(&self, provider_id: &str) -> Result<bool> {
        let v1 = self.v1()?;
        self.calls
            .run(
                "instance_shutdown_by_provider_id",
                v1.instance_shutdown_by_provider_id(provider_id),
            )
            .await
    }
}

#[async_trait::async_trait]
impl Zones for TimedCloud {
    async fn get_zone(&self) -> Result<Zone> {
        let zones = self.zone_api()?;
        self.calls.run("get_zone", zones.get_zone()).await
    }

    async fn get_zone_by_provider_id(&self, provider_id: &str) -> Result<Zone> {
        let zones = self.zone_api()?;
        self.calls
            .run(
                "get_zone_by_provider_id",
                zones.get_zone_by_provider_id(provider_id),
            )
            .await
    }

    async fn get_zone_by_node_name(&self, node_name: &str) -> Result<Zone> {
        let zones = self.zone_api()?;
        self.calls
            .run(
                "get_zone_by_node_name",
                zones.get_zone_by_node_name(node_name),
            )
            .await
    }
}

#[async_trait::async_trait]
impl Clusters for TimedCloud {
    async fn list_clusters(&self) -> Result<Vec<String>> {
        let clusters = self.cluster_api()?;
        self.calls
            .run("list_clusters", clusters.list_clusters())
            .await
    }

    async fn master(&self, cluster_name: &str) -> Result<String> {
        let clusters = self.cluster_api()?;
        self.calls
            .run("master", clusters.master(cluster_name))
            .await
    }
}

#[async_trait::async_trait]
impl Routes for TimedCloud {
    async fn list_routes(&self, cluster_name: &str) -> Result<Vec<Route>> {
        let routes = self.route_api()?;
        self.calls
            .run("list_routes", routes.list_routes(cluster_name))
            .await
    }

    async fn create_route(&self, cluster_name: &str, name_hint: &str, route: &Route) -> Result<()> {
        let routes = self.route_api()?;
        self.calls
            .run(
                "create_route",
                routes.create_route(cluster_name, name_hint, route),
            )
            .await
    }

    async fn delete_route(&self, cluster_name: &str, route: &Route) -> Result<()> {
        let routes = self.route_api()?;
        self.calls
            .run("delete_route", routes.delete_route(cluster_name, route))
            .await
    }
}

#[async_trait::async_trait]
impl PvLabeler for TimedCloud {
    async fn get_labels_for_volume(
        &self,
        pv: &PersistentVolume,
    ) -> Result<Option<BTreeMap<String, String>>> {
        let labeler = self.labeler()?;
        self.calls
            .run("get_labels_for_volume", labeler.get_labels_for_volume(pv))
            .await
    }
}

#[async_trait::async_trait]
impl ResourceTagger for TimedCloud {
    fn resource_kinds(&self) -> &'static [&'static str] {
        self.tagger().map(|t| t.resource_kinds()).unwrap_or(&[])
    }

    fn tagged_label(&self) -> &'static str {
        self.tagger().map(|t| t.tagged_label()).unwrap_or_default()
    }

    async fn tag_nodes(
        &self,
        nodes: &[Node],
        resources: &[String],
        tags: &BTreeMap<String, String>,
    ) -> Vec<Result<TagOutcome>> {
        match self.tagger() {
            Ok(tagger) => {
                self.calls
                    .run_bulk(
                        "tag_nodes",
                        nodes.len(),
                        tagger.tag_nodes(nodes, resources, tags),
                    )
                    .await
            }
            Err(_) => not_implemented_for_each(nodes.len()),
        }
    }

    async fn untag_nodes(
        &self,
        nodes: &[Node],
        resources: &[String],
        tags: &BTreeMap<String, String>,
    ) -> Vec<Result<TagOutcome>> {
        match self.tagger() {
            Ok(tagger) => {
                self.calls
                    .run_bulk(
                        "untag_nodes",
                        nodes.len(),
                        tagger.untag_nodes(nodes, resources, tags),
                    )
                    .await
            }
            Err(_) => not_implemented_for_each(nodes.len()),
        }
    }
}

/// `NotImplemented` for each of `count` objects of a bulk call the provider lacks the capability for.
fn not_implemented_for_each<T>(count: usize) -> Vec<Result<T>> {
    (0..count)
        .map(|_| Err(CloudError::NotImplemented))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::future::pending;
    use std::time::Duration;

    use super::*;
    use crate::metrics::ControllerMetrics;

    /// A provider with every capability, whose every call hangs.
    struct Stuck;

    impl CloudProvider for Stuck {
        fn provider_name(&self) -> &str {
            "stuck"
        }
        fn load_balancer(&self) -> Option<&dyn LoadBalancer> {
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
        fn clusters(&self) -> Option<&dyn Clusters> {
            Some(self)
        }
        fn routes(&self) -> Option<&dyn Routes> {
            Some(self)
        }
        fn pv_labeler(&self) -> Option<&dyn PvLabeler> {
            Some(self)
        }
        fn has_cluster_id(&self) -> bool {
            true
        }
    }

    #[async_trait::async_trait]
    impl LoadBalancer for Stuck {
        async fn get_load_balancer(
            &self,
            _: &str,
            _: &Service,
        ) -> Result<Option<LoadBalancerStatus>> {
            pending().await
        }
        fn get_load_balancer_name(&self, _: &str, _: &Service) -> String {
            "stuck-lb".into()
        }
        async fn ensure_load_balancer(
            &self,
            _: &str,
            _: &Service,
            _: &[Node],
        ) -> Result<LoadBalancerStatus> {
            pending().await
        }
        async fn update_load_balancer(&self, _: &str, _: &Service, _: &[Node]) -> Result<()> {
            pending().await
        }
        async fn ensure_load_balancer_deleted(&self, _: &str, _: &Service) -> Result<()> {
            pending().await
        }
    }

    #[async_trait::async_trait]
    impl InstancesV2 for Stuck {
        async fn instance_exists(&self, _: &Node) -> Result<bool> {
            pending().await
        }
        async fn instance_shutdown(&self, _: &Node) -> Result<bool> {
            pending().await
        }
        async fn instance_metadata(&self, _: &Node) -> Result<Option<InstanceMetadata>> {
            pending().await
        }
        async fn instance_metadata_bulk(
            &self,
            _: &[Node],
        ) -> Vec<Result<Option<InstanceMetadata>>> {
            pending().await
        }
        async fn instance_states(&self, _: &[Node]) -> Vec<Result<InstanceState>> {
            pending().await
        }
    }

    #[async_trait::async_trait]
    impl Instances for Stuck {
        async fn node_addresses(&self, _: &str) -> Result<Vec<NodeAddress>> {
            pending().await
        }
        async fn node_addresses_by_provider_id(&self, _: &str) -> Result<Vec<NodeAddress>> {
            pending().await
        }
        async fn instance_id(&self, _: &str) -> Result<String> {
            pending().await
        }
        async fn instance_type(&self, _: &str) -> Result<String> {
            pending().await
        }
        async fn instance_type_by_provider_id(&self, _: &str) -> Result<String> {
            pending().await
        }
        async fn current_node_name(&self, _: &str) -> Result<String> {
            pending().await
        }
        async fn instance_exists_by_provider_id(&self, _: &str) -> Result<bool> {
            pending().await
        }
        async fn instance_shutdown_by_provider_id(&self, _: &str) -> Result<bool> {
            pending().await
        }
    }

    #[async_trait::async_trait]
    impl Zones for Stuck {
        async fn get_zone(&self) -> Result<Zone> {
            pending().await
        }
        async fn get_zone_by_provider_id(&self, _: &str) -> Result<Zone> {
            pending().await
        }
        async fn get_zone_by_node_name(&self, _: &str) -> Result<Zone> {
            pending().await
        }
    }

    #[async_trait::async_trait]
    impl Clusters for Stuck {
        async fn list_clusters(&self) -> Result<Vec<String>> {
            pending().await
        }
        async fn master(&self, _: &str) -> Result<String> {
            pending().await
        }
    }

    #[async_trait::async_trait]
    impl Routes for Stuck {
        async fn list_routes(&self, _: &str) -> Result<Vec<Route>> {
            pending().await
        }
        async fn create_route(&self, _: &str, _: &str, _: &Route) -> Result<()> {
            pending().await
        }
        async fn delete_route(&self, _: &str, _: &Route) -> Result<()> {
            pending().await
        }
    }

    #[async_trait::async_trait]
    impl PvLabeler for Stuck {
        async fn get_labels_for_volume(
            &self,
            _: &PersistentVolume,
        ) -> Result<Option<BTreeMap<String, String>>> {
            pending().await
        }
    }

    /// The operation a timed-out call reports.
    fn operation<T: std::fmt::Debug>(result: Result<T>) -> String {
        match result {
            Err(CloudError::Timeout { operation, after }) => {
                assert_eq!(after, Duration::from_millis(50));
                operation
            }
            other => panic!("expected a timeout, got {other:?}"),
        }
    }

    fn timed(inner: Arc<dyn CloudProvider>) -> TimedCloud {
        let calls = CloudCalls::new(
            "test-controller",
            Duration::from_millis(50),
            ControllerMetrics::default(),
        );
        TimedCloud::new(inner, Arc::new(calls))
    }

    #[tokio::test(start_paused = true)]
    async fn every_contract_call_runs_under_the_timeout() {
        let cloud = timed(Arc::new(Stuck));
        let (svc, node, pv, route) = (
            Service::default(),
            Node::default(),
            PersistentVolume::default(),
            Route::default(),
        );
        let nodes = [node.clone(), node.clone()];
        let lb = cloud.load_balancer().unwrap();
        assert_eq!(lb.get_load_balancer_name("c", &svc), "stuck-lb");
        let mut seen = vec![
            operation(lb.get_load_balancer("c", &svc).await),
            operation(lb.ensure_load_balancer("c", &svc, &nodes).await),
            operation(lb.update_load_balancer("c", &svc, &nodes).await),
            operation(lb.ensure_load_balancer_deleted("c", &svc).await),
        ];
        let v2 = cloud.instances_v2().unwrap();
        seen.push(operation(v2.instance_exists(&node).await));
        seen.push(operation(v2.instance_shutdown(&node).await));
        seen.push(operation(v2.instance_metadata(&node).await));
        let bulk = v2.instance_metadata_bulk(&nodes).await;
        assert_eq!(bulk.len(), 2);
        seen.extend(bulk.into_iter().map(operation));
        let states = v2.instance_states(&nodes).await;
        assert_eq!(states.len(), 2);
        seen.extend(states.into_iter().map(operation));
        let v1 = cloud.instances().unwrap();
        seen.push(operation(v1.node_addresses("n").await));
        seen.push(operation(v1.node_addresses_by_provider_id("p").await));
        seen.push(operation(v1.instance_id("n").await));
        seen.push(operation(v1.instance_type("n").await));
        seen.push(operation(v1.instance_type_by_provider_id("p").await));
        seen.push(operation(v1.current_node_name("h").await));
        seen.push(operation(v1.instance_exists_by_provider_id("p").await));
        seen.push(operation(v1.instance_shutdown_by_provider_id("p").await));
        let zones = cloud.zones().unwrap();
        seen.push(operation(zones.get_zone().await));
        seen.push(operation(zones.get_zone_by_provider_id("p").await));
        seen.push(operation(zones.get_zone_by_node_name("n").await));
        let clusters = cloud.clusters().unwrap();
        seen.push(operation(clusters.list_clusters().await));
        seen.push(operation(clusters.master("c").await));
        let routes = cloud.routes().unwrap();
        seen.push(operation(routes.list_routes("c").await));
        seen.push(operation(routes.create_route("c", "h", &route).await));
        seen.push(operation(routes.delete_route("c", &route).await));
        seen.push(operation(
            cloud.pv_labeler().unwrap().get_labels_for_volume(&pv).await,
        ));
        assert_eq!(
            seen,
            [
                "get_load_balancer",
                "ensure_load_balancer",
                "update_load_balancer",
                "ensure_load_balancer_deleted",
                "instance_exists",
                "instance_shutdown",
                "instance_metadata",
                "instance_metadata_bulk",
                "instance_metadata_bulk",
                "instance_states",
                "instance_states",
                "node_addresses",
                "node_addresses_by_provider_id",
                "instance_id",
                "instance_type",
                "instance_type_by_provider_id",
                "current_node_name",
                "instance_exists_by_provider_id",
                "instance_shutdown_by_provider_id",
                "get_zone",
                "get_zone_by_provider_id",
                "get_zone_by_node_name",
                "list_clusters",
                "master",
                "list_routes",
                "create_route",
                "delete_route",
                "get_labels_for_volume",
            ]
        );
        assert_eq!(cloud.calls().in_flight(), 0);
        let message = cloud.calls().health().unwrap_err();
        assert!(
            message.starts_with("cloud call get_labels_for_volume timed out after 50ms"),
            "{message}"
        );
    }

    /// A provider with no capability but a name.
    struct Bare;

    impl CloudProvider for Bare {
        fn provider_name(&self) -> &str {
            "bare"
        }
        fn has_cluster_id(&self) -> bool {
            false
        }
    }

    #[test]
    fn it_offers_exactly_the_capabilities_of_the_provider() {
        let cloud = timed(Arc::new(Bare));
        assert_eq!(cloud.provider_name(), "bare");
        assert!(!cloud.has_cluster_id());
        assert!(cloud.load_balancer().is_none());
        assert!(cloud.instances().is_none());
        assert!(cloud.instances_v2().is_none());
        assert!(cloud.zones().is_none());
        assert!(cloud.clusters().is_none());
        assert!(cloud.routes().is_none());
        assert!(cloud.pv_labeler().is_none());
        assert!(cloud.mutation_gate().is_none());
        assert!(cloud.controllers().is_empty());
        let stuck = timed(Arc::new(Stuck));
        assert!(stuck.has_cluster_id());
        assert!(stuck.instances().is_some() && stuck.pv_labeler().is_some());
    }
}
