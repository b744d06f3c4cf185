//! The LoadBalancer capability: DigitalOcean load balancers for `type: LoadBalancer` Services.
//!
//! - Lookup: by the `kubernetes.digitalocean.com/load-balancer-id` annotation (`GET /v2/load_balancers/{id}`),
//!   else by name in the list. Pre-setting the annotation adopts an existing load balancer (it is renamed
//!   and reconfigured to match the Service).
//! - Ensure: validate the Service ([`parse_service`]), map nodes to droplet IDs, resolve the certificate,
//!   then a full `PUT /v2/load_balancers/{id}` or a `POST /v2/load_balancers`. The load balancer's UUID and
//!   type are written back to the Service annotations. Status `new` asks the controller to retry in 15 s;
//!   any other status but `active` is an error (the controller backs off).
//! - The type comes from the `do-loadbalancer-type` annotation, else the existing load balancer, else
//!   `DEFAULT_LB_TYPE`; an existing load balancer's type is never changed.
//! - Certificates: `certificate-name` is resolved to its current UUID on every sync. With `certificate-id`,
//!   when the load balancer already uses a different certificate of type `lets_encrypt` (DigitalOcean renewed
//!   it), that one is kept and the annotation updated, instead of reverting to the expired UUID.
//! - Disowned Services (`service.kubernetes.io/do-loadbalancer-disown: "true"`) are never mutated.
//! - Delete: by ID, else by name; absent or 404 is success.

use std::collections::BTreeMap;
use std::time::Duration;

use cloud_provider::{CloudError, LoadBalancer as LoadBalancerCapability, Result};
use k8s_openapi::api::core::v1::{LoadBalancerIngress, LoadBalancerStatus, Node, Service};

use crate::annotations::{
    ANN_CERTIFICATE_ID, ANN_LOAD_BALANCER_ID, ANN_TYPE, CertificateRef, LbSettings,
    ServiceConfigError, annotated_type, hostname, is_disowned, load_balancer_id,
    load_balancer_name, parse_service,
};
use crate::api::{
    CERTIFICATE_TYPE_LETS_ENCRYPT, Certificate, LB_STATUS_ACTIVE, LB_STATUS_NEW, LoadBalancer,
    LoadBalancerRequest,
};
use crate::cloud::DigitalOceanCloud;
use crate::config::LbType;
use crate::droplets::{DropletRef, PROVIDER_NAME, droplet_ref_of};

/// How long the controller waits before checking a load balancer that is still being created.
pub const NEW_LOAD_BALANCER_RETRY: Duration = Duration::from_secs(15);

impl From<ServiceConfigError> for CloudError {
    fn from(err: ServiceConfigError) -> Self {
        CloudError::provider(err.to_string())
    }
}

fn service_key(service: &Service) -> String {
    format!(
        "{}/{}",
        service.metadata.namespace.as_deref().unwrap_or("default"),
        service.metadata.name.as_deref().unwrap_or("")
    )
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

/// The status to report for an ensured load balancer, or the error asking to wait.
pub fn ensured_status(
    lb: &LoadBalancer,
    hostname: Option<&str>,
    proxied: bool,
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
                "load balancer {} ({}) is not active (status {other:?})",
                lb.name, lb.id
            )));
        }
    }
    let ingress = ingress_of(lb, hostname, proxied);
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

/// Whether a node may carry load-balancer traffic according to its provider ID (nodes of other providers
/// are skipped).
fn node_droplet_ref(node: &Node) -> Option<DropletRef> {
    match droplet_ref_of(node) {
        Ok(r) => Some(r),
        Err(e) => {
            tracing::warn!(node = node.metadata.name.as_deref().unwrap_or(""), error = %e,
                "node is not a DigitalOcean droplet; leaving it out of load balancers");
            None
        }
    }
}

impl DigitalOceanCloud {
    fn region_for_load_balancers(&self) -> Result<String> {
        self.region().ok_or_else(|| {
            CloudError::provider(
                "the DigitalOcean region is unknown: the provider has not been initialized",
            )
        })
    }

    /// Finds the Service's load balancer: by the ID annotation, else by name.
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
        let name = self.get_load_balancer_name_inner(service);
        let all: Vec<LoadBalancer> = self
            .client
            .list(
                "list_load_balancers",
                "v2/load_balancers",
                "load_balancers",
                &[],
            )
            .await?;
        let mut matching = all.into_iter().filter(|lb| lb.name == name);
        let first = matching.next();
        if first.is_some() && matching.next().is_some() {
            tracing::warn!(service = %service_key(service), name = %name,
                "several load balancers share this name; using the first");
        }
        Ok(first)
    }

    fn get_load_balancer_name_inner(&self, service: &Service) -> String {
        load_balancer_name(service)
            .unwrap_or_else(|_| cloud_provider::default_load_balancer_name(service))
    }

    /// The droplet IDs backing the load balancer; an error when no node maps to a droplet.
    async fn backend_droplets(&self, service: &Service, nodes: &[Node]) -> Result<Vec<u64>> {
        let refs: Vec<DropletRef> = nodes.iter().filter_map(node_droplet_ref).collect();
        let mut ids = Vec::with_capacity(refs.len());
        let mut by_name = Vec::new();
        for r in refs {
            match r {
                DropletRef::Id(id) => ids.push(id),
                DropletRef::Name(_) => by_name.push(r),
            }
        }
        if !by_name.is_empty() {
            let found = self.droplets.lookup_many(&by_name).await;
            for (r, result) in by_name.iter().zip(found) {
                match result {
                    Ok(Some(d)) => ids.push(d.id),
                    Ok(None) => tracing::warn!(service = %service_key(service), %r,
                        "no droplet matches the node; leaving it out of the load balancer"),
                    Err(e) => return Err(e),
                }
            }
        }
        ids.sort_unstable();
        ids.dedup();
        if ids.is_empty() {
            return Err(CloudError::provider(format!(
                "no eligible nodes for the load balancer of {}: none of the {} node(s) maps to a {PROVIDER_NAME} droplet",
                service_key(service),
                nodes.len()
            )));
        }
        Ok(ids)
    }

    /// The certificate UUID for the rules terminating TLS, and the certificate-id annotation to write
    /// back when the load balancer carries a renewed Let's Encrypt certificate.
    async fn resolve_certificate(
        &self,
        settings: &LbSettings,
        existing: Option<&LoadBalancer>,
    ) -> Result<(String, Option<String>)> {
        match &settings.certificate {
            None => Ok((String::new(), None)),
            Some(CertificateRef::Name(name)) => {
                let all: Vec<Certificate> = self
                    .client
                    .list("list_certificates", "v2/certificates", "certificates", &[])
                    .await?;
                let cert = all.into_iter().find(|c| &c.name == name).ok_or_else(|| {
                    CloudError::provider(format!("no certificate named {name:?} exists"))
                })?;
                Ok((cert.id, None))
            }
            Some(CertificateRef::Id(id)) => {
                let current = existing.and_then(|lb| {
                    lb.forwarding_rules
                        .iter()
                        .map(|r| r.certificate_id.as_str())
                        .find(|c| !c.is_empty())
                });
                let Some(current) = current.filter(|c| *c != id) else {
                    return Ok((id.clone(), None));
                };
                let cert: Option<Certificate> = self
                    .client
                    .get_opt(
                        "get_certificate",
                        &format!("v2/certificates/{current}"),
                        "certificate",
                    )
                    .await?;
                match cert {
                    Some(c) if c.type_ == CERTIFICATE_TYPE_LETS_ENCRYPT => {
                        tracing::info!(old = %id, new = %current,
                            "keeping the renewed Let's Encrypt certificate of the load balancer");
                        Ok((current.to_string(), Some(current.to_string())))
                    }
                    _ => Ok((id.clone(), None)),
                }
            }
        }
    }

    fn build_request(
        &self,
        settings: &LbSettings,
        region: String,
        droplet_ids: Vec<u64>,
        certificate_id: &str,
        existing: Option<&LoadBalancer>,
    ) -> LoadBalancerRequest {
        LoadBalancerRequest {
            name: settings.name.clone(),
            region,
            type_: settings.lb_type.as_str().to_string(),
            size: settings.size.clone(),
            size_unit: settings.size_unit,
            network: settings.network.clone(),
            network_stack: settings.network_stack.clone(),
            ip: if existing.is_none() {
                settings.ip.clone()
            } else {
                None
            },
            forwarding_rules: settings.rules_with_certificate(certificate_id),
            health_check: settings.health_check.clone(),
            sticky_sessions: settings.sticky_sessions.clone(),
            redirect_http_to_https: settings.redirect_http_to_https,
            enable_proxy_protocol: settings.enable_proxy_protocol,
            enable_backend_keepalive: settings.enable_backend_keepalive,
            http_idle_timeout_seconds: settings.http_idle_timeout_seconds,
            disable_lets_encrypt_dns_records: settings.disable_lets_encrypt_dns_records,
            firewall: settings.firewall.clone(),
            vpc_uuid: self
                .config
                .cluster_vpc_id
                .clone()
                .or_else(|| existing.and_then(|lb| lb.vpc_uuid.clone())),
            droplet_ids,
            tags: self
                .config
                .cluster_id
                .iter()
                .map(|id| format!("k8s:{id}"))
                .collect(),
        }
    }

    /// Creates or updates the Service's load balancer; `allow_create` is false for node-set updates.
    async fn sync_load_balancer(
        &self,
        service: &Service,
        nodes: &[Node],
        allow_create: bool,
    ) -> Result<(LoadBalancer, LbSettings)> {
        let annotated = annotated_type(service)?;
        let existing = self.find_load_balancer(service).await?;
        let existing_type = existing
            .as_ref()
            .and_then(|lb| lb.type_.as_deref())
            .and_then(|t| t.parse::<LbType>().ok());
        let lb_type = match (annotated, existing_type) {
            (Some(want), Some(have)) if want != have => {
                return Err(CloudError::provider(format!(
                    "the load balancer of {} is {have} and cannot become {want}; delete the Service and create it again to change the type",
                    service_key(service)
                )));
            }
            (Some(t), _) | (None, Some(t)) => t,
            (None, None) => self.config.default_lb_type,
        };
        let settings = parse_service(service, lb_type)?;
        let droplet_ids = self.backend_droplets(service, nodes).await?;
        let (certificate_id, renewed_certificate) = self
            .resolve_certificate(&settings, existing.as_ref())
            .await?;

        let lb = match &existing {
            Some(current) => {
                let region = if current.region.slug.is_empty() {
                    self.region_for_load_balancers()?
                } else {
                    current.region.slug.clone()
                };
                let request = self.build_request(
                    &settings,
                    region,
                    droplet_ids,
                    &certificate_id,
                    Some(current),
                );
                let updated: LoadBalancer = self
                    .client
                    .put(
                        "update_load_balancer",
                        &format!("v2/load_balancers/{}", current.id),
                        &request,
                        "load_balancer",
                    )
                    .await?;
                tracing::info!(service = %service_key(service), id = %updated.id, name = %updated.name,
                    droplets = updated.droplet_ids.len(), "updated load balancer");
                updated
            }
            None if allow_create => {
                let region = self.region_for_load_balancers()?;
                let request =
                    self.build_request(&settings, region, droplet_ids, &certificate_id, None);
                let created: LoadBalancer = self
                    .client
                    .post(
                        "create_load_balancer",
                        "v2/load_balancers",
                        &request,
                        "load_balancer",
                    )
                    .await?;
                tracing::info!(service = %service_key(service), id = %created.id, name = %created.name,
                    "created load balancer");
                created
            }
            None => {
                return Err(CloudError::provider(format!(
                    "the load balancer {:?} of {} does not exist",
                    settings.name,
                    service_key(service)
                )));
            }
        };

        let mut wanted = BTreeMap::from([
            (ANN_LOAD_BALANCER_ID, lb.id.clone()),
            (ANN_TYPE, settings.lb_type.as_str().to_string()),
        ]);
        if let Some(cert) = renewed_certificate {
            wanted.insert(ANN_CERTIFICATE_ID, cert);
        }
        self.write_back_annotations(service, &wanted).await?;
        Ok((lb, settings))
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
        let proxied = annotated_type(service)
            .ok()
            .flatten()
            .or_else(|| lb.type_.as_deref().and_then(|t| t.parse().ok()))
            .and_then(|t| parse_service(service, t).ok())
            .is_some_and(|s| s.proxies_traffic());
        Ok(Some(LoadBalancerStatus {
            ingress: Some(ingress_of(&lb, hostname(service).as_deref(), proxied)),
        }))
    }

    fn get_load_balancer_name(&self, _cluster_name: &str, service: &Service) -> String {
        self.get_load_balancer_name_inner(service)
    }

    async fn ensure_load_balancer(
        &self,
        _cluster_name: &str,
        service: &Service,
        nodes: &[Node],
    ) -> Result<LoadBalancerStatus> {
        if is_disowned(service)? {
            return match self.find_load_balancer(service).await? {
                Some(lb) => {
                    tracing::info!(service = %service_key(service), id = %lb.id,
                        "the load balancer is disowned; leaving it unchanged");
                    Ok(LoadBalancerStatus {
                        ingress: Some(ingress_of(&lb, hostname(service).as_deref(), false)),
                    })
                }
                None => Err(CloudError::provider(format!(
                    "the load balancer of {} is disowned and does not exist; remove the annotation {} to let it be created",
                    service_key(service),
                    crate::annotations::ANN_DISOWN
                ))),
            };
        }
        let (lb, settings) = self.sync_load_balancer(service, nodes, true).await?;
        ensured_status(
            &lb,
            settings.hostname.as_deref(),
            settings.proxies_traffic(),
        )
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
        self.sync_load_balancer(service, nodes, false)
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
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            false,
        )
        .unwrap();
        let ingress = st.ingress.unwrap();
        assert_eq!(ingress.len(), 2);
        assert_eq!(ingress[0].ip.as_deref(), Some("203.0.113.5"));
        assert_eq!(ingress[0].ip_mode.as_deref(), Some("VIP"));
        assert_eq!(ingress[1].ip.as_deref(), Some("2001:db8::5"));
        let st = ensured_status(&lb("active", "203.0.113.5", None), None, true).unwrap();
        assert_eq!(st.ingress.unwrap()[0].ip_mode.as_deref(), Some("Proxy"));
        let st = ensured_status(
            &lb("active", "203.0.113.5", None),
            Some("lb.example.com"),
            true,
        )
        .unwrap();
        let ingress = st.ingress.unwrap();
        assert_eq!(ingress.len(), 1);
        assert_eq!(ingress[0].hostname.as_deref(), Some("lb.example.com"));
        assert_eq!(ingress[0].ip, None);
        assert_eq!(ingress[0].ip_mode, None);
    }

    #[test]
    fn requests_send_the_ip_only_on_creation_and_keep_the_vpc() {
        let mut config =
            crate::DoConfig::new(crate::AccessToken::new("t"), "http://127.0.0.1:9/").unwrap();
        config.cluster_id = Some("c-9".into());
        let cloud = DigitalOceanCloud::new(config).unwrap();
        let mut svc = Service::default();
        svc.metadata.uid = Some("0a1b2c3d-0000-0000-0000-000000000000".into());
        svc.metadata.annotations = Some(
            [(
                crate::annotations::ANN_IP.to_string(),
                "203.0.113.9".to_string(),
            )]
            .into(),
        );
        svc.spec = Some(k8s_openapi::api::core::v1::ServiceSpec {
            ports: Some(vec![k8s_openapi::api::core::v1::ServicePort {
                port: 80,
                node_port: Some(30080),
                ..Default::default()
            }]),
            ..Default::default()
        });
        let settings = parse_service(&svc, LbType::Regional).unwrap();
        let create = cloud.build_request(&settings, "nyc3".into(), vec![1, 2], "", None);
        assert_eq!(create.ip.as_deref(), Some("203.0.113.9"));
        assert_eq!(create.tags, vec!["k8s:c-9"]);
        assert_eq!(create.vpc_uuid, None);
        assert_eq!(create.droplet_ids, vec![1, 2]);
        assert_eq!(create.type_, "REGIONAL");
        let existing = LoadBalancer {
            vpc_uuid: Some("vpc-existing".into()),
            ..lb("active", "203.0.113.9", None)
        };
        let update = cloud.build_request(&settings, "nyc3".into(), vec![1], "", Some(&existing));
        assert_eq!(update.ip, None);
        assert_eq!(update.vpc_uuid.as_deref(), Some("vpc-existing"));
    }

    #[test]
    fn new_load_balancers_are_retried_and_errored_ones_fail() {
        let err = ensured_status(&lb("new", "", None), None, false).unwrap_err();
        assert_eq!(err.retry_after(), Some(Duration::from_secs(15)));
        let err = ensured_status(&lb("errored", "1.2.3.4", None), None, false).unwrap_err();
        assert_eq!(err.retry_after(), None);
        assert!(err.to_string().contains("errored"), "{err}");
        let err = ensured_status(&lb("active", "", None), None, false).unwrap_err();
        assert_eq!(err.retry_after(), Some(Duration::from_secs(15)));
    }
}
