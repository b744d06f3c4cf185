//! The LoadBalancer capability: DigitalOcean load balancers for `type: LoadBalancer` Services, managed as
//! the upstream DigitalOcean cloud-controller-manager (v0.1.68) manages them.
//!
//! - Lookup: by the `kubernetes.digitalocean.com/load-balancer-id` annotation (`GET
//!   /v2/load_balancers/{id}`), else by name in the list: the custom name, then the default one (so
//!   setting a custom name renames the existing load balancer). Unlike upstream, a stale ID falls back to
//!   the name lookup instead of creating a second load balancer.
//! - Ensure: the Service is validated with its own type (the `type` annotation, else `DEFAULT_LB_TYPE`);
//!   an existing load balancer keeps its type (the annotation is overwritten with it, as upstream does),
//!   a missing one is created (`POST /v2/load_balancers`). The request is built field by field as upstream
//!   builds it ([`crate::lb_spec`]); an existing load balancer is updated with a full `PUT` only when it
//!   differs from what that `PUT` would leave ([`crate::lb_diff`]), where upstream updates on every sync.
//! - The load balancer's UUID and type are written back to the Service annotations (even when the update
//!   then fails, as upstream does). Status `new` asks the controller to retry in 15 s; any other status
//!   but `active` is an error.
//! - Certificates: when the load balancer carries another certificate than the Service names, and it is
//!   a Let's Encrypt certificate with the same name (DigitalOcean renewed it), the load balancer keeps it
//!   and the `certificate-id` annotation is updated to it.
//! - Backends: the droplets of the nodes that may back the load balancer ([`crate::lb_nodes`]), by
//!   provider ID, else by droplet name or address; an invalid provider ID fails the sync. Unlike upstream,
//!   a sync where no node maps to a droplet fails instead of emptying the load balancer.
//! - Disowned Services (`service.kubernetes.io/do-loadbalancer-disown: "true"`) are never mutated;
//!   ensuring one reports the Service's current status.
//! - Delete: by ID, else by name; absent or 404 is success.

use std::collections::BTreeMap;
use std::time::Duration;

use cloud_provider::{CloudError, LoadBalancer as LoadBalancerCapability, Result};
use k8s_openapi::api::core::v1::{LoadBalancerIngress, LoadBalancerStatus, Node, Service};

use crate::annotations::{
    ANN_CERTIFICATE_ID, ANN_LOAD_BALANCER_ID, ANN_TYPE, ServiceConfigError, certificate_id,
    certificate_name, hostname, is_disowned, lb_type, load_balancer_id, load_balancer_name,
    load_balancer_name_candidates, network, parse_lb_type, reserved_ip, service_key,
};
use crate::api::{
    CERTIFICATE_TYPE_LETS_ENCRYPT, Certificate, Droplet, LB_STATUS_ACTIVE, LB_STATUS_NEW,
    LoadBalancer, LoadBalancerRequest,
};
use crate::client::ApiError;
use crate::cloud::DigitalOceanCloud;
use crate::config::LbType;
use crate::droplets::{DropletRef, PROVIDER_NAME, droplet_ref_of};
use crate::lb_diff::differences;
use crate::lb_nodes::select_nodes;
use crate::lb_spec::{LbSpec, Placement, SpecError, build_spec};

/// How long the controller waits before checking a load balancer that is still being created.
pub const NEW_LOAD_BALANCER_RETRY: Duration = Duration::from_secs(15);
/// The reason of the Warning events upstream adds for node and network-stack conflicts.
pub const REASON_LOAD_BALANCER_CONFIG_ERROR: &str = "LoadBalancerConfigError";

impl From<ServiceConfigError> for CloudError {
    fn from(err: ServiceConfigError) -> Self {
        CloudError::provider(err.to_string())
    }
}

impl From<SpecError> for CloudError {
    fn from(err: SpecError) -> Self {
        CloudError::provider(err.to_string())
    }
}

/// An API error with what was being done; rate limits stay retries for the controller.
/// The error of a `certificate-name` annotation naming no certificate.
pub(crate) fn certificate_not_found(name: &str) -> CloudError {
    CloudError::provider(format!("certificate with name {name:?} not found"))
}

fn api_error(context: impl Into<String>) -> impl FnOnce(ApiError) -> CloudError {
    move |e| match e {
        ApiError::RateLimited { .. } => e.into(),
        other => CloudError::provider_with(context, other),
    }
}

/// Whether a load balancer terminates traffic in-cluster clients must not bypass: it terminates HTTP or
/// TLS, or sends the PROXY protocol header.
pub fn proxies_traffic(lb: &LoadBalancer) -> bool {
    lb.enable_proxy_protocol
        || lb.forwarding_rules.iter().any(|r| {
            !r.tls_passthrough
                && matches!(
                    r.entry_protocol.as_str(),
                    "http" | "https" | "http2" | "http3"
                )
        })
}

/// The ingress of an active load balancer: the hostname annotation when set, else its IPv4 (and IPv6)
/// addresses, with `ipMode: Proxy` when the load balancer terminates traffic in-cluster clients must not
/// bypass.
pub fn ingress_of(
    lb: &LoadBalancer,
    hostname: Option<&str>,
    proxied: bool,
) -> Vec<LoadBalancerIngress> {
    if let Some(h) = hostname {
        return vec![LoadBalancerIngress {
            hostname: Some(h.to_string()),
            ..Default::default()
        }];
    }
    let mode = Some(if proxied { "Proxy" } else { "VIP" }.to_string());
    [Some(lb.ip.as_str()), lb.ipv6.as_deref()]
        .into_iter()
        .flatten()
        .filter(|ip| !ip.is_empty())
        .map(|ip| LoadBalancerIngress {
            ip: Some(ip.to_string()),
            ip_mode: mode.clone(),
            ..Default::default()
        })
        .collect()
}

/// The status to report for an ensured load balancer, or the error asking to wait. `ip_mode_proxy`
/// (the `ipModeProxy` setting) allows `ipMode: Proxy` for load balancers that terminate traffic.
pub fn ensured_status(
    lb: &LoadBalancer,
    hostname: Option<&str>,
    ip_mode_proxy: bool,
) -> Result<LoadBalancerStatus> {
    match lb.status.as_str() {
        LB_STATUS_ACTIVE => {}
        LB_STATUS_NEW => {
            return Err(CloudError::retry(
                format!("load balancer {} ({}) is being created", lb.name, lb.id),
                NEW_LOAD_BALANCER_RETRY,
            ));
        }
        other => {
            return Err(CloudError::provider(format!(
                "load balancer {} ({}) has unexpected status {other:?}",
                lb.name, lb.id
            )));
        }
    }
    let ingress = ingress_of(lb, hostname, ip_mode_proxy && proxies_traffic(lb));
    if ingress.is_empty() {
        return Err(CloudError::retry(
            format!(
                "load balancer {} ({}) has no IP address yet",
                lb.name, lb.id
            ),
            NEW_LOAD_BALANCER_RETRY,
        ));
    }
    Ok(LoadBalancerStatus {
        ingress: Some(ingress),
    })
}

/// Whether a droplet is the one a node without provider ID names: by droplet name, else by address.
fn droplet_matches_node_name(droplet: &Droplet, node_name: &str) -> bool {
    droplet.name == node_name
        || [
            droplet.first_v4("private"),
            droplet.first_v4("public"),
            droplet.first_public_v6(),
        ]
        .into_iter()
        .flatten()
        .any(|address| address == node_name)
}

impl DigitalOceanCloud {
    fn region_for_load_balancers(&self) -> Result<String> {
        self.region().ok_or_else(|| {
            CloudError::provider(
                "the DigitalOcean region is unknown: the provider has not been initialized",
            )
        })
    }

    /// Finds the Service's load balancer: by the ID annotation, else by name (custom, then default).
    pub async fn find_load_balancer(&self, service: &Service) -> Result<Option<LoadBalancer>> {
        if let Some(id) = load_balancer_id(service) {
            let found: Option<LoadBalancer> = self
                .client
                .get_opt(
                    "get_load_balancer",
                    &format!("v2/load_balancers/{id}"),
                    "load_balancer",
                )
                .await?;
            if found.is_some() {
                return Ok(found);
            }
            tracing::info!(service = %service_key(service), id = %id,
                "the annotated load balancer does not exist; looking it up by name");
        }
        let candidates = load_balancer_name_candidates(service);
        let all = self.client.load_balancers().await?;
        Ok(all.into_iter().find(|lb| candidates.contains(&lb.name)))
    }

    /// The droplet IDs of `nodes`, in node order: by provider ID, else by droplet name or address. Nodes
    /// without a matching droplet are left out (logged); none at all is an error.
    async fn backend_droplets(&self, service: &Service, nodes: &[&Node]) -> Result<Vec<u64>> {
        let mut ids = Vec::with_capacity(nodes.len());
        let mut by_name = Vec::new();
        for node in nodes {
            match droplet_ref_of(node)? {
                DropletRef::Id(id) => ids.push(id),
                DropletRef::Name(name) => by_name.push(name),
            }
        }
        if !by_name.is_empty() {
            ids.extend(self.droplets_named(service, &by_name).await?);
        }
        if ids.is_empty() {
            return Err(CloudError::provider(format!(
                "no eligible nodes for the load balancer of {}: none of the {} node(s) maps to a {PROVIDER_NAME} droplet",
                service_key(service),
                nodes.len()
            )));
        }
        Ok(ids)
    }

    /// The droplets of nodes without provider ID, by droplet name, else by one of its addresses.
    async fn droplets_named(&self, service: &Service, names: &[String]) -> Result<Vec<u64>> {
        let refs: Vec<DropletRef> = names.iter().cloned().map(DropletRef::Name).collect();
        let found = self.droplets.lookup_many(&refs).await;
        let mut ids = Vec::with_capacity(names.len());
        let mut missing = Vec::new();
        for (name, result) in names.iter().zip(found) {
            match result? {
                Some(d) => ids.push(d.id),
                None => missing.push(name),
            }
        }
        if !missing.is_empty() {
            let all = self.droplets.all().await?;
            for name in missing {
                match all.iter().find(|d| droplet_matches_node_name(d, name)) {
                    Some(d) => ids.push(d.id),
                    None => tracing::error!(service = %service_key(service), node = %name,
                        "failed to find a droplet for the node; leaving it out of the load balancer"),
                }
            }
        }
        Ok(ids)
    }

    /// The certificate named `name` (`GET /v2/certificates?name=`), as upstream looks it up.
    async fn certificate_by_name(&self, name: &str) -> Result<Certificate> {
        self.find_certificate_by_name(name)
            .await?
            .ok_or_else(|| certificate_not_found(name))
    }

    /// The certificate named `name`, `None` when there is none; an error when the API did not answer.
    pub(crate) async fn find_certificate_by_name(&self, name: &str) -> Result<Option<Certificate>> {
        let found: Vec<Certificate> = self
            .client
            .list(
                "list_certificates_by_name",
                "v2/certificates",
                "certificates",
                &[("name", name)],
            )
            .await
            .map_err(api_error(format!(
                "failed to get certificate by name {name:?}"
            )))?;
        Ok(found.into_iter().find(|c| c.name == name))
    }

    async fn service_certificate_id(&self, service: &Service) -> Result<String> {
        if let Some(id) = certificate_id(service) {
            return Ok(id.to_string());
        }
        match certificate_name(service) {
            Some(name) => Ok(self.certificate_by_name(name).await?.id),
            None => Ok(String::new()),
        }
    }

    /// A certificate by UUID; `None` on 404.
    async fn certificate(&self, id: &str) -> Result<Option<Certificate>> {
        self.client
            .get_opt(
                "get_certificate",
                &format!("v2/certificates/{id}"),
                "certificate",
            )
            .await
            .map_err(api_error(format!(
                "failed to get DO certificate {id} for load-balancer"
            )))
    }

    /// Upstream's Let's Encrypt renewal check: when the load balancer carries another certificate than
    /// the Service's, and it is a Let's Encrypt certificate with the same name as the Service's (or the
    /// Service's is gone), the load balancer's certificate wins. Returns it, for the `certificate-id`
    /// annotation.
    async fn renewed_certificate(
        &self,
        lb: &LoadBalancer,
        service_certificate: &str,
    ) -> Result<Option<String>> {
        let Some(lb_certificate) = lb
            .forwarding_rules
            .iter()
            .map(|r| r.certificate_id.as_str())
            .find(|c| !c.is_empty())
        else {
            return Ok(None);
        };
        if service_certificate.is_empty() || lb_certificate == service_certificate {
            return Ok(None);
        }
        let Some(on_lb) = self.certificate(lb_certificate).await? else {
            return Ok(None);
        };
        if on_lb.type_ != CERTIFICATE_TYPE_LETS_ENCRYPT {
            return Ok(None);
        }
        let renewed = match self.certificate(service_certificate).await? {
            None => true,
            Some(annotated) => annotated.name == on_lb.name,
        };
        if renewed {
            tracing::info!(old = %service_certificate, new = %lb_certificate,
                "keeping the renewed Let's Encrypt certificate of the load balancer");
        }
        Ok(renewed.then(|| lb_certificate.to_string()))
    }

    /// The spec of the Service's load balancer of `lb_type` with `certificate`, and the nodes that back
    /// it. Node and network-stack conflicts are also reported as Warning events, as upstream does.
    async fn desired_spec<'n>(
        &self,
        service: &Service,
        nodes: &'n [Node],
        lb_type: LbType,
        certificate: &str,
    ) -> Result<(LbSpec, Vec<&'n Node>)> {
        let network = network(service)?;
        let selection = select_nodes(nodes, lb_type, network);
        match build_spec(service, lb_type, &selection, certificate) {
            Ok(spec) => Ok((spec, selection.ready)),
            Err(SpecError::NodeConfig(message)) => {
                self.report_config_error(service, &message).await;
                Err(SpecError::NodeConfig(message).into())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Where the load balancer lives, and its backends.
    pub(crate) fn placement(&self, droplet_ids: Vec<u64>) -> Result<Placement> {
        Ok(Placement {
            region: self.region_for_load_balancers()?,
            vpc_uuid: self.config.cluster_vpc_id.clone().unwrap_or_default(),
            tags: self
                .config
                .cluster_id
                .iter()
                .map(|id| crate::tags::cluster_tag(id))
                .collect(),
            droplet_ids,
        })
    }

    /// Creates the Service's load balancer from the spec validated with the Service's own type.
    async fn create_load_balancer(
        &self,
        service: &Service,
        spec: &LbSpec,
        backends: &[&Node],
    ) -> Result<LoadBalancer> {
        let droplet_ids = self.backend_droplets(service, backends).await?;
        let request = spec.request(self.placement(droplet_ids)?, reserved_ip(service));
        let created: LoadBalancer = self
            .client
            .post(
                "create_load_balancer",
                "v2/load_balancers",
                &request,
                "load_balancer",
            )
            .await
            .map_err(api_error("failed to create load-balancer"))?;
        tracing::info!(service = %service_key(service), id = %created.id, name = %created.name,
            "created load balancer");
        let annotations = BTreeMap::from([
            (ANN_LOAD_BALANCER_ID, created.id.clone()),
            (ANN_TYPE, created.type_.clone().unwrap_or_default()),
        ]);
        self.write_back_annotations(service, &annotations).await?;
        Ok(created)
    }

    /// Brings an existing load balancer up to date, then writes its ID, type and (after a Let's Encrypt
    /// renewal) certificate back to the Service, whether the update worked or not. `certificate` is the
    /// Service's certificate when already resolved.
    async fn update_existing(
        &self,
        service: &Service,
        nodes: &[Node],
        lb: LoadBalancer,
        certificate: Option<String>,
    ) -> Result<LoadBalancer> {
        let mut annotations = BTreeMap::from([
            (ANN_LOAD_BALANCER_ID, lb.id.clone()),
            (ANN_TYPE, lb.type_.clone().unwrap_or_default()),
        ]);
        let updated = self
            .reconcile_existing(service, nodes, lb, certificate, &mut annotations)
            .await;
        let written = self.write_back_annotations(service, &annotations).await;
        match (updated, written) {
            (Ok(lb), Ok(())) => Ok(lb),
            (Err(e), Ok(())) => Err(e),
            (Ok(_), Err(e)) => Err(e),
            (Err(e), Err(w)) => {
                tracing::warn!(service = %service_key(service), error = %w,
                    "could not write the load balancer annotations back");
                Err(e)
            }
        }
    }

    /// The update proper: the existing type, the certificate, the spec, and a `PUT` when it differs.
    async fn reconcile_existing(
        &self,
        service: &Service,
        nodes: &[Node],
        lb: LoadBalancer,
        certificate: Option<String>,
        annotations: &mut BTreeMap<&'static str, String>,
    ) -> Result<LoadBalancer> {
        let actual = parse_lb_type(
            lb.type_.as_deref().unwrap_or_default(),
            self.config.default_lb_type,
        )?;
        if let Ok(asked) = lb_type(service, self.config.default_lb_type)
            && asked != actual
        {
            tracing::warn!(service = %service_key(service), id = %lb.id, asked = %asked, actual = %actual,
                "the type of an existing load balancer cannot change; keeping it and its annotation");
        }
        let mut certificate = match certificate {
            Some(known) => known,
            None => self.service_certificate_id(service).await?,
        };
        if let Some(renewed) = self.renewed_certificate(&lb, &certificate).await? {
            annotations.insert(ANN_CERTIFICATE_ID, renewed.clone());
            certificate = renewed;
        }
        let (spec, backends) = self
            .desired_spec(service, nodes, actual, &certificate)
            .await?;
        let droplets = self.backend_droplets(service, &backends).await?;
        let request = spec.request(self.placement(droplets)?, None);
        self.put_if_different(service, lb, &request).await
    }

    /// `PUT`s the request unless the load balancer already is what it asks for.
    async fn put_if_different(
        &self,
        service: &Service,
        lb: LoadBalancer,
        request: &LoadBalancerRequest,
    ) -> Result<LoadBalancer> {
        let diffs = differences(request, &lb);
        if diffs.is_empty() {
            tracing::debug!(service = %service_key(service), id = %lb.id,
                "load balancer is up to date");
            return Ok(lb);
        }
        let changes: Vec<String> = diffs.iter().map(ToString::to_string).collect();
        let updated: LoadBalancer = self
            .client
            .put(
                "update_load_balancer",
                &format!("v2/load_balancers/{}", lb.id),
                request,
                "load_balancer",
            )
            .await
            .map_err(api_error(format!(
                "failed to update load-balancer with ID {}",
                lb.id
            )))?;
        tracing::info!(service = %service_key(service), id = %updated.id, name = %updated.name,
            changes = %changes.join("; "), "updated load balancer");
        Ok(updated)
    }

    /// Records a `LoadBalancerConfigError` Warning event on the Service, as upstream does for node and
    /// network-stack conflicts (best effort).
    async fn report_config_error(&self, service: &Service, message: &str) {
        let Some(client) = self.kube_client() else {
            return;
        };
        let namespace = service.metadata.namespace.as_deref().unwrap_or("default");
        let name = service.metadata.name.as_deref().unwrap_or_default();
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now());
        let nanos = jiff::Timestamp::now().as_nanosecond();
        let event = k8s_openapi::api::core::v1::Event {
            metadata: kube::api::ObjectMeta {
                name: Some(format!("{name}.{nanos:x}")),
                namespace: Some(namespace.to_string()),
                ..Default::default()
            },
            involved_object: k8s_openapi::api::core::v1::ObjectReference {
                kind: Some("Service".into()),
                namespace: Some(namespace.to_string()),
                name: Some(name.to_string()),
                uid: service.metadata.uid.clone(),
                api_version: Some("v1".into()),
                ..Default::default()
            },
            reason: Some(REASON_LOAD_BALANCER_CONFIG_ERROR.into()),
            message: Some(message.to_string()),
            type_: Some("Warning".into()),
            source: Some(k8s_openapi::api::core::v1::EventSource {
                component: Some("digitalocean-cloud-controller-manager".into()),
                host: None,
            }),
            first_timestamp: Some(now.clone()),
            last_timestamp: Some(now),
            count: Some(1),
            ..Default::default()
        };
        let api: kube::Api<k8s_openapi::api::core::v1::Event> =
            kube::Api::namespaced(client, namespace);
        if let Err(e) = api.create(&Default::default(), &event).await {
            tracing::warn!(service = %service_key(service), error = %e,
                "could not record the LoadBalancerConfigError event");
        }
    }
}

#[async_trait::async_trait]
impl LoadBalancerCapability for DigitalOceanCloud {
    async fn get_load_balancer(
        &self,
        _cluster_name: &str,
        service: &Service,
    ) -> Result<Option<LoadBalancerStatus>> {
        let Some(lb) = self.find_load_balancer(service).await? else {
            return Ok(None);
        };
        Ok(Some(LoadBalancerStatus {
            ingress: Some(ingress_of(
                &lb,
                hostname(service).as_deref(),
                self.config.ip_mode_proxy && proxies_traffic(&lb),
            )),
        }))
    }

    fn get_load_balancer_name(&self, _cluster_name: &str, service: &Service) -> String {
        load_balancer_name(service)
    }

    async fn ensure_load_balancer(
        &self,
        _cluster_name: &str,
        service: &Service,
        nodes: &[Node],
    ) -> Result<LoadBalancerStatus> {
        if is_disowned(service)? {
            tracing::info!(service = %service_key(service),
                "the load balancer is disowned; leaving it unchanged");
            return Ok(service
                .status
                .as_ref()
                .and_then(|s| s.load_balancer.clone())
                .unwrap_or_default());
        }
        // As upstream, the Service is first validated with its own type; an existing load balancer then
        // keeps its type.
        let own_type = lb_type(service, self.config.default_lb_type)?;
        let certificate = match own_type {
            LbType::Regional => Some(self.service_certificate_id(service).await?),
            LbType::RegionalNetwork => None,
        };
        let (spec, backends) = self
            .desired_spec(
                service,
                nodes,
                own_type,
                certificate.as_deref().unwrap_or_default(),
            )
            .await?;
        let lb = match self.find_load_balancer(service).await? {
            Some(existing) => {
                self.update_existing(service, nodes, existing, certificate)
                    .await?
            }
            None => self.create_load_balancer(service, &spec, &backends).await?,
        };
        ensured_status(&lb, hostname(service).as_deref(), self.config.ip_mode_proxy)
    }

    async fn update_load_balancer(
        &self,
        _cluster_name: &str,
        service: &Service,
        nodes: &[Node],
    ) -> Result<()> {
        if is_disowned(service)? {
            tracing::info!(service = %service_key(service), "the load balancer is disowned; not updating it");
            return Ok(());
        }
        let Some(lb) = self.find_load_balancer(service).await? else {
            return Err(CloudError::provider(format!(
                "the load balancer {:?} of {} does not exist",
                load_balancer_name(service),
                service_key(service)
            )));
        };
        self.update_existing(service, nodes, lb, None)
            .await
            .map(|_| ())
    }

    async fn ensure_load_balancer_deleted(
        &self,
        _cluster_name: &str,
        service: &Service,
    ) -> Result<()> {
        if is_disowned(service)? {
            tracing::info!(service = %service_key(service), "the load balancer is disowned; not deleting it");
            return Ok(());
        }
        let Some(lb) = self.find_load_balancer(service).await? else {
            return Ok(());
        };
        match self
            .client
            .delete(
                "delete_load_balancer",
                &format!("v2/load_balancers/{}", lb.id),
            )
            .await
        {
            Ok(()) => {
                tracing::info!(service = %service_key(service), id = %lb.id, "deleted load balancer");
                Ok(())
            }
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(api_error("failed to delete load-balancer")(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ForwardingRule;

    fn lb(status: &str, ip: &str, ipv6: Option<&str>) -> LoadBalancer {
        LoadBalancer {
            id: "id-1".into(),
            name: "a1".into(),
            status: status.into(),
            ip: ip.into(),
            ipv6: ipv6.map(str::to_string),
            ..Default::default()
        }
    }

    #[test]
    fn status_of_active_load_balancers() {
        let st = ensured_status(
            &lb("active", "203.0.113.5", Some("2001:db8::5")),
            None,
            true,
        )
        .unwrap();
        let ingress = st.ingress.unwrap();
        assert_eq!(ingress.len(), 2);
        assert_eq!(ingress[0].ip.as_deref(), Some("203.0.113.5"));
        assert_eq!(ingress[0].ip_mode.as_deref(), Some("VIP"));
        assert_eq!(ingress[1].ip.as_deref(), Some("2001:db8::5"));
        let proxied = LoadBalancer {
            enable_proxy_protocol: true,
            ..lb("active", "203.0.113.5", None)
        };
        let st = ensured_status(&proxied, None, true).unwrap();
        assert_eq!(st.ingress.unwrap()[0].ip_mode.as_deref(), Some("Proxy"));
        // With `ipModeProxy: false`, as upstream: the API server's default.
        let st = ensured_status(&proxied, None, false).unwrap();
        assert_eq!(st.ingress.unwrap()[0].ip_mode.as_deref(), Some("VIP"));
        let st = ensured_status(&proxied, Some("lb.example.com"), true).unwrap();
        let ingress = st.ingress.unwrap();
        assert_eq!(ingress.len(), 1);
        assert_eq!(ingress[0].hostname.as_deref(), Some("lb.example.com"));
        assert_eq!(ingress[0].ip, None);
        assert_eq!(ingress[0].ip_mode, None);
    }

    #[test]
    fn terminating_rules_proxy_traffic_and_passthrough_does_not() {
        let rule = |entry: &str, passthrough: bool| ForwardingRule {
            entry_protocol: entry.into(),
            entry_port: 443,
            target_protocol: entry.into(),
            target_port: 30443,
            tls_passthrough: passthrough,
            ..Default::default()
        };
        let mut l = lb("active", "203.0.113.5", None);
        l.forwarding_rules = vec![rule("tcp", false), rule("https", true)];
        assert!(!proxies_traffic(&l));
        l.forwarding_rules.push(rule("http2", false));
        assert!(proxies_traffic(&l));
    }

    #[test]
    fn droplets_match_node_names_by_name_or_address() {
        let droplet: Droplet = serde_json::from_value(serde_json::json!({
            "id": 7, "name": "pool-a-1",
            "networks": {"v4": [{"ip_address": "10.0.0.7", "type": "private"}], "v6": []}
        }))
        .unwrap();
        assert!(droplet_matches_node_name(&droplet, "pool-a-1"));
        assert!(droplet_matches_node_name(&droplet, "10.0.0.7"));
        assert!(!droplet_matches_node_name(&droplet, "pool-a-2"));
    }

    #[test]
    fn new_load_balancers_are_retried_and_errored_ones_fail() {
        let err = ensured_status(&lb("new", "", None), None, true).unwrap_err();
        assert_eq!(err.retry_after(), Some(Duration::from_secs(15)));
        let err = ensured_status(&lb("errored", "1.2.3.4", None), None, true).unwrap_err();
        assert_eq!(err.retry_after(), None);
        assert!(err.to_string().contains("errored"), "{err}");
        let err = ensured_status(&lb("active", "", None), None, true).unwrap_err();
        assert_eq!(err.retry_after(), Some(Duration::from_secs(15)));
    }
}
