//! Network load balancers for `type: LoadBalancer` Services, through ELBv2.
//!
//! A Service annotated `aws-load-balancer-type: nlb` gets one NLB named by
//! [`default_load_balancer_name`](cloud_provider::default_load_balancer_name), with one listener per Service
//! port (TCP, UDP, or TLS with the certificate of the ssl-cert annotation) forwarding to a target group of
//! instance targets on the node port, named and reused as upstream does. Without a type annotation the
//! Service gets a classic ELB ([`classic`]); `nlb-ip` and `external` are left to the AWS Load Balancer
//! Controller. The load balancer, its listeners and target groups carry the additional tags,
//! `kubernetes.io/service-name=<ns>/<name>` and the cluster's `owned` tag; a load balancer without the
//! cluster tag is never changed. Every lookup the targets, rules or routes depend on must succeed: a failed
//! one fails the sync before anything is deregistered, revoked or deleted.

mod admission;
pub mod annotations;
pub mod classic;
pub(crate) mod elbv2;
pub mod naming;
pub mod nlb_security_group;
pub mod rule_budget;
pub(crate) mod security_groups;
pub mod spec;
pub(crate) mod subnets;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use cloud_provider::{CloudError, LoadBalancer, Result, default_load_balancer_name};
use k8s_openapi::api::core::v1::{LoadBalancerIngress, LoadBalancerStatus, Node, Service};

use self::elbv2::{
    HealthCheckState, LbInfo, ListenerInfo, NewLoadBalancer, SubnetMapping, TargetGroupInfo,
    WantedListener,
};
use self::naming::target_group_name;
use self::spec::{
    ANN_EIP_ALLOCATIONS, ANN_INTERNAL, ANN_PRIVATE_IPV4, ANN_TYPE, LbKind, LbSpec, SpecError,
    lb_kind,
};
use self::subnets::SubnetInfo;
use crate::cloud::AwsCloud;
use crate::ec2_instance::Ec2Instance;
use crate::instances::InstanceRef;
use crate::provider_id::instance_id_from_provider_id;
use crate::tagging::TAG_SERVICE_NAME;

/// The Service's status: the load balancer's DNS name while it is provisioning or active (its only
/// successful states), else nothing, as upstream reports it.
fn status(lb: &LbInfo) -> LoadBalancerStatus {
    let usable = matches!(lb.state.as_str(), "provisioning" | "active");
    if lb.dns_name.is_empty() || !usable {
        return LoadBalancerStatus::default();
    }
    LoadBalancerStatus {
        ingress: Some(vec![LoadBalancerIngress {
            hostname: Some(lb.dns_name.clone()),
            ..Default::default()
        }]),
    }
}

/// Upstream's refusal of a type annotation that no longer matches the Service's load balancer: `kind` is the
/// type the annotation asks for (`NLB` or `Classic Load Balancer`), `has` the load balancer the Service has.
pub(crate) fn type_change_refused(kind: &str, has: &str) -> CloudError {
    CloudError::provider(format!(
        "cannot update Load Balancer Type annotation {ANN_TYPE:?} after creation for {kind} (the Service has \
         {has}; delete and recreate the Service to change the type)"
    ))
}

fn service_key(service: &Service) -> String {
    let (namespace, name) = spec::namespace_and_name(service);
    format!("{namespace}/{name}")
}

/// Whether the node carries every label of the target-node-labels annotation (an empty value: the label
/// must exist, with any value), as upstream selects target nodes.
fn node_selected(node: &Node, labels: &BTreeMap<String, String>) -> bool {
    let have = node.metadata.labels.as_ref();
    labels.iter().all(|(k, v)| {
        have.and_then(|l| l.get(k))
            .is_some_and(|value| v.is_empty() || value == v)
    })
}

/// The load balancer's target group serving `node_port` behind `listener`: the one the listener forwards to
/// when it is on that node port, else any attached group on it (upstream keys them by node port).
fn node_port_group<'a>(
    listener: &ListenerInfo,
    node_port: i32,
    attached: &'a [TargetGroupInfo],
) -> Option<&'a TargetGroupInfo> {
    let own = attached
        .iter()
        .find(|t| listener.target_group_arn.as_deref() == Some(t.arn.as_str()));
    own.filter(|t| t.port == node_port)
        .or_else(|| attached.iter().find(|t| t.port == node_port))
}

/// Whether the target group cannot serve the port as it is: its traffic protocol, health-check protocol or
/// interval differs (none of these can change in place).
fn needs_new_group(
    tg: &TargetGroupInfo,
    port: &spec::PortMapping,
    wanted: &HealthCheckState,
) -> bool {
    tg.protocol != port.target_protocol.as_str() || tg.health_check.needs_new_group(wanted)
}

/// The load-balancer attributes, as upstream reconciles them: cross-zone load balancing and access logs
/// are always set (off unless annotated true); the log bucket and prefix only while logs are on (ELBv2
/// refuses an empty bucket).
fn wanted_lb_attributes(spec: &LbSpec) -> BTreeMap<String, String> {
    let mut out = BTreeMap::from([
        (
            "load_balancing.cross_zone.enabled".to_string(),
            spec.cross_zone.to_string(),
        ),
        (
            "access_logs.s3.enabled".to_string(),
            spec.access_log.enabled.to_string(),
        ),
    ]);
    if spec.access_log.enabled {
        let log = &spec.access_log;
        let bucket = log.bucket.clone().unwrap_or_default();
        out.insert("access_logs.s3.bucket".to_string(), bucket);
        let prefix = log.prefix.clone().unwrap_or_default();
        out.insert("access_logs.s3.prefix".to_string(), prefix);
    }
    out
}

/// Subnet mappings of a new load balancer: each subnet with its Elastic IP allocation or private IPv4 address
/// (by position), checking there is exactly one per subnet and that each address lies in its subnet.
fn subnet_mappings(
    spec: &LbSpec,
    subnets: &[SubnetInfo],
) -> std::result::Result<Vec<SubnetMapping>, SpecError> {
    let listed = || {
        subnets
            .iter()
            .map(|s| s.id.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(eips) = &spec.eip_allocations
        && eips.len() != subnets.len()
    {
        return Err(SpecError::new(
            ANN_EIP_ALLOCATIONS,
            format!(
                "{} allocations for {} subnets ({}); give one per subnet",
                eips.len(),
                subnets.len(),
                listed()
            ),
        ));
    }
    if let Some(ips) = &spec.private_ipv4_addresses {
        if ips.len() != subnets.len() {
            return Err(SpecError::new(
                ANN_PRIVATE_IPV4,
                format!(
                    "{} addresses for {} subnets ({}); give one per subnet",
                    ips.len(),
                    subnets.len(),
                    listed()
                ),
            ));
        }
        for (ip, subnet) in ips.iter().zip(subnets) {
            if let Some(cidr) = subnet.cidr
                && !cidr.contains(&std::net::IpAddr::V4(*ip))
            {
                return Err(SpecError::new(
                    ANN_PRIVATE_IPV4,
                    format!("{ip} is not in subnet {} ({cidr})", subnet.id),
                ));
            }
        }
    }
    Ok(subnets
        .iter()
        .enumerate()
        .map(|(i, s)| SubnetMapping {
            subnet_id: s.id.clone(),
            allocation_id: spec
                .eip_allocations
                .as_ref()
                .and_then(|e| e.get(i).cloned()),
            private_ipv4: spec
                .private_ipv4_addresses
                .as_ref()
                .and_then(|p| p.get(i).map(|ip| ip.to_string())),
        })
        .collect())
}

impl AwsCloud {
    /// The tags of every resource of the Service's load balancer.
    fn wanted_tags(&self, spec: &LbSpec) -> BTreeMap<String, String> {
        let mut tags = spec.additional_tags.clone();
        tags.insert(TAG_SERVICE_NAME.to_string(), spec.service_name());
        tags.extend(self.tagging.owned_tags());
        tags
    }

    /// The cluster's name in target-group name hashes: the cluster ID, else the `--cluster-name`.
    fn cluster_key<'a>(&'a self, cluster_name: &'a str) -> &'a str {
        self.tagging.cluster_id().unwrap_or(cluster_name)
    }

    /// The load balancer named after the Service, refusing one that is not the cluster's.
    async fn our_load_balancer(&self, name: &str) -> Result<Option<LbInfo>> {
        let Some(lb) = self.find_load_balancer(name).await? else {
            return Ok(None);
        };
        let tags = self
            .elb_resource_tags(std::slice::from_ref(&lb.arn))
            .await?;
        let tags = tags.get(&lb.arn).cloned().unwrap_or_default();
        if !self.owns_load_balancer(&tags) {
            return Err(self.foreign_load_balancer(name));
        }
        Ok(Some(lb))
    }

    /// Whether a load balancer with these tags is the cluster's.
    pub(crate) fn owns_load_balancer(&self, tags: &BTreeMap<String, String>) -> bool {
        self.tagging
            .is_ours(tags.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    }

    /// The error refusing to change a load balancer named after the Service that is not the cluster's.
    pub(crate) fn foreign_load_balancer(&self, name: &str) -> CloudError {
        CloudError::provider(format!(
            "load balancer {name} exists but is not tagged for cluster {}; refusing to change it",
            self.tagging.cluster_id().unwrap_or_default()
        ))
    }

    /// The cluster's instances behind the selected nodes (those with the target-node labels and a provider
    /// ID), as upstream picks load-balancer targets. A failed lookup fails the sync: targets are never
    /// computed from partial information.
    pub(crate) async fn target_instances(
        &self,
        labels: &BTreeMap<String, String>,
        nodes: &[Node],
    ) -> Result<Vec<Arc<Ec2Instance>>> {
        let mut refs = Vec::new();
        for node in nodes.iter().filter(|n| node_selected(n, labels)) {
            let name = node.metadata.name.as_deref().unwrap_or_default();
            let provider_id = node.spec.as_ref().and_then(|s| s.provider_id.as_deref());
            match provider_id
                .filter(|p| !p.is_empty())
                .map(instance_id_from_provider_id)
            {
                Some(Ok(id)) => refs.push(Ok(InstanceRef::Id(id))),
                Some(Err(e)) => {
                    tracing::warn!(node = name, error = %e, "node's provider ID names no instance; not a load-balancer target")
                }
                None => tracing::debug!(
                    node = name,
                    "node has no provider ID yet; not a load-balancer target"
                ),
            }
        }
        let mut out: Vec<Arc<Ec2Instance>> = Vec::new();
        for inst in self.resolve(&refs).await {
            let Some(inst) = inst? else { continue };
            let ours = self
                .tagging
                .is_ours(inst.tags.iter().map(|(k, v)| (k.as_str(), v.as_str())));
            if ours && inst.state != "terminated" && !out.iter().any(|o| o.id == inst.id) {
                out.push(inst);
            }
        }
        Ok(out)
    }

    /// The VPC of the load balancer: configured, else the existing load balancer's, else the targets'.
    pub(crate) fn load_balancer_vpc(
        &self,
        existing: Option<&str>,
        targets: &[Arc<Ec2Instance>],
    ) -> Result<String> {
        if let Some(vpc) = &self.config.vpc {
            return Ok(vpc.clone());
        }
        if let Some(vpc) = existing.filter(|v| !v.is_empty()) {
            return Ok(vpc.to_string());
        }
        targets
            .iter()
            .map(|i| i.vpc_id.clone())
            .find(|v| !v.is_empty())
            .ok_or_else(|| {
                CloudError::provider(
                    "cannot determine the VPC for the load balancer: there are no nodes and [Global] VPC is not set",
                )
            })
    }

    /// Creates the load balancer in `subnets`.
    async fn create_nlb(
        &self,
        name: &str,
        spec: &LbSpec,
        subnets: &[SubnetInfo],
        tags: &BTreeMap<String, String>,
        security_groups: &[String],
    ) -> Result<LbInfo> {
        let mappings = subnet_mappings(spec, subnets)?;
        tracing::info!(
            load_balancer = name,
            service = %spec.service_name(),
            internal = spec.internal,
            subnets = ?subnets.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
            "creating network load balancer"
        );
        self.create_load_balancer(NewLoadBalancer {
            name,
            internal: spec.internal,
            subnets: mappings,
            tags,
            security_groups,
        })
        .await
    }

    /// Checks an existing load balancer's type and scheme and adds missing tags.
    async fn update_nlb(
        &self,
        lb: &LbInfo,
        spec: &LbSpec,
        tags: &BTreeMap<String, String>,
    ) -> Result<()> {
        if !lb.network {
            return Err(type_change_refused(
                "NLB",
                "a load balancer of another type",
            ));
        }
        if lb.internal != spec.internal {
            return Err(SpecError::new(
                ANN_INTERNAL,
                format!(
                    "the load balancer was created {}; the scheme cannot change after creation (delete and recreate the Service)",
                    if lb.internal { "internal" } else { "internet-facing" }
                ),
            )
            .into());
        }
        let current = self
            .elb_resource_tags(std::slice::from_ref(&lb.arn))
            .await?;
        let current = current.get(&lb.arn).cloned().unwrap_or_default();
        let missing: BTreeMap<String, String> = tags
            .iter()
            .filter(|(k, v)| current.get(*k) != Some(*v))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !missing.is_empty() {
            self.add_elb_tags(&lb.arn, &missing).await?;
        }
        Ok(())
    }

    /// The target group of one port, as upstream picks it. With a listener on the port: the load
    /// balancer's target group on the node port (the listener's own first), kept unless its traffic
    /// protocol, health-check protocol or health-check interval differs from the wanted one; its name does
    /// not matter. Otherwise, or to replace it: the group named for the port. Its health check and
    /// attributes are brought up to date.
    #[allow(clippy::too_many_arguments)]
    async fn port_target_group(
        &self,
        name: &str,
        spec: &LbSpec,
        port: &spec::PortMapping,
        vpc_id: &str,
        listener: Option<&ListenerInfo>,
        attached: &[TargetGroupInfo],
        tags: &BTreeMap<String, String>,
    ) -> Result<TargetGroupInfo> {
        let wanted_hc = HealthCheckState::wanted(&spec.health_check);
        let current = listener.and_then(|l| node_port_group(l, port.node_port, attached));
        let tg = match current {
            Some(tg) if !needs_new_group(tg, port, &wanted_hc) => tg.clone(),
            _ => {
                self.named_target_group(name, spec, port, vpc_id, &wanted_hc, tags)
                    .await?
            }
        };
        if tg.health_check.needs_update(&wanted_hc) {
            tracing::info!(target_group = %tg.name, "updating health check");
            self.modify_health_check(&tg.arn, &wanted_hc).await?;
        }
        self.sync_target_group_attributes(&tg.arn, &spec.target_group_attributes)
            .await?;
        Ok(tg)
    }

    /// The target group named `name`: one left from an earlier attempt (when it is the Service's), else a
    /// new one.
    async fn named_target_group(
        &self,
        name: &str,
        spec: &LbSpec,
        port: &spec::PortMapping,
        vpc_id: &str,
        wanted_hc: &HealthCheckState,
        tags: &BTreeMap<String, String>,
    ) -> Result<TargetGroupInfo> {
        let Some(tg) = self.find_target_group(name).await? else {
            tracing::info!(target_group = name, service = %spec.service_name(), "creating target group");
            return self
                .create_target_group(
                    name,
                    port.target_protocol,
                    port.node_port,
                    vpc_id,
                    wanted_hc,
                    tags,
                )
                .await;
        };
        let tg_tags = self
            .elb_resource_tags(std::slice::from_ref(&tg.arn))
            .await?;
        let tg_tags = tg_tags.get(&tg.arn).cloned().unwrap_or_default();
        let mine = self
            .tagging
            .is_ours(tg_tags.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            && tg_tags.get(TAG_SERVICE_NAME) == Some(&spec.service_name());
        if !mine {
            return Err(CloudError::provider(format!(
                "target group {name} exists but does not belong to Service {} of this cluster",
                spec.service_name()
            )));
        }
        Ok(tg)
    }

    /// Creates or updates the listener of one port so it forwards to `tg`.
    async fn ensure_listener(
        &self,
        lb: &LbInfo,
        port: &spec::PortMapping,
        tg: &TargetGroupInfo,
        listener: Option<&ListenerInfo>,
        tags: &BTreeMap<String, String>,
    ) -> Result<()> {
        let wanted = WantedListener {
            port: port.port,
            protocol: port.listener_protocol,
            target_group_arn: &tg.arn,
            certificate: port.certificate.as_deref(),
            ssl_policy: port.ssl_policy.as_deref(),
        };
        match listener {
            Some(l) if wanted.matches(l) => Ok(()),
            Some(l) => {
                tracing::info!(load_balancer = %lb.arn, port = port.port, "updating listener");
                self.modify_listener(&l.arn, &wanted).await
            }
            None => {
                tracing::info!(load_balancer = %lb.arn, port = port.port, protocol = port.listener_protocol.as_str(), "creating listener");
                self.create_listener(&lb.arn, &wanted, tags).await
            }
        }
    }

    /// Listeners and target groups: one of each per port, targets registered, then stale listeners and
    /// target groups (replaced ones included) removed.
    async fn sync_listeners(
        &self,
        cluster_name: &str,
        lb: &LbInfo,
        spec: &LbSpec,
        vpc_id: &str,
        targets: &BTreeSet<String>,
        tags: &BTreeMap<String, String>,
    ) -> Result<()> {
        let listeners = self.listeners(&lb.arn).await?;
        let attached = self.target_groups_of(&lb.arn, &listeners).await?;
        let mut keep_listeners = BTreeSet::new();
        let mut keep_groups = BTreeSet::new();
        for port in &spec.ports {
            let name = target_group_name(self.cluster_key(cluster_name), spec, port);
            let listener = listeners.iter().find(|l| l.port == port.port);
            let tg = self
                .port_target_group(&name, spec, port, vpc_id, listener, &attached, tags)
                .await?;
            self.sync_targets(&tg.arn, port.node_port, targets).await?;
            self.ensure_listener(lb, port, &tg, listener, tags).await?;
            keep_listeners.extend(listener.map(|l| l.arn.clone()));
            keep_groups.insert(tg.arn.clone());
        }
        for l in listeners
            .iter()
            .filter(|l| !keep_listeners.contains(&l.arn))
        {
            tracing::info!(load_balancer = %lb.arn, port = l.port, "deleting listener");
            self.delete_listener(&l.arn).await?;
        }
        for tg in attached.iter().filter(|t| !keep_groups.contains(&t.arn)) {
            tracing::info!(target_group = %tg.name, "deleting target group");
            self.delete_target_group(&tg.arn).await?;
        }
        Ok(())
    }

    async fn ensure_nlb(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Node],
    ) -> Result<LoadBalancerStatus> {
        let name = self.get_load_balancer_name(cluster_name, service);
        let existing = self.our_load_balancer(&name).await?;
        if existing.is_none() && self.find_classic(&name).await?.is_some() {
            return Err(type_change_refused("NLB", "a classic load balancer"));
        }
        let spec = spec::parse(service, &self.config.cluster_health_probe)?;
        let tags = self.wanted_tags(&spec);
        let instances = self
            .target_instances(&spec.target_node_labels, nodes)
            .await?;
        let vpc_id =
            self.load_balancer_vpc(existing.as_ref().map(|l| l.vpc_id.as_str()), &instances)?;
        let targets: BTreeSet<String> = instances
            .iter()
            .filter(|i| i.vpc_id.is_empty() || i.vpc_id == vpc_id)
            .map(|i| i.id.clone())
            .collect();
        let target_instances: Vec<Arc<Ec2Instance>> = instances
            .into_iter()
            .filter(|i| targets.contains(&i.id))
            .collect();
        let new_subnets = match &existing {
            Some(_) => Vec::new(),
            None => {
                self.load_balancer_subnets(spec.subnets.as_deref(), spec.internal, &vpc_id)
                    .await?
            }
        };
        let groups = self
            .nlb_groups(cluster_name, &spec, existing.as_ref(), &vpc_id)
            .await?;
        let managed = match &groups.managed {
            Some(id) => Some(self.plan_managed_group(id, &spec).await?),
            None => None,
        };
        // The node rules and the managed group's must fit their groups' rule limit before anything is
        // created or changed.
        let health_cidrs = match &existing {
            _ if self.config.disable_security_group_ingress => Vec::new(),
            Some(lb) => self.load_balancer_subnet_cidrs(lb).await?,
            None => new_subnets.iter().filter_map(|s| s.cidr).collect(),
        };
        let wanted = Some((&spec, health_cidrs.as_slice()));
        let rules = self
            .plan_security_groups(&name, wanted, &vpc_id, &target_instances)
            .await?;
        let mut counted = rules.changes();
        counted.extend(managed.iter().map(|(_, c)| c.clone()));
        self.check_rule_limit(&counted)?;
        let lb = match &existing {
            Some(lb) => {
                self.update_nlb(lb, &spec, &tags).await?;
                self.set_nlb_groups(lb, &groups.ids).await?;
                lb.clone()
            }
            None => {
                self.create_nlb(&name, &spec, &new_subnets, &tags, &groups.ids)
                    .await?
            }
        };
        self.sync_load_balancer_attributes(&lb.arn, &wanted_lb_attributes(&spec))
            .await?;
        self.sync_listeners(cluster_name, &lb, &spec, &vpc_id, &targets, &tags)
            .await?;
        if let Some((plan, counted)) = &managed {
            self.apply_group_plan(plan, counted).await?;
        }
        let before = existing.map(|l| l.security_groups).unwrap_or_default();
        self.release_detached_groups(cluster_name, &spec, &before, &groups.ids, &vpc_id)
            .await?;
        // Planned again from the groups as they are now (another sync may have changed them meanwhile),
        // unless nothing was to change; checked again before the first change.
        if !rules.is_empty() {
            self.sync_security_groups(&name, wanted, &vpc_id, &target_instances)
                .await?;
        }
        Ok(status(&lb))
    }

    /// Upstream's UpdateLoadBalancer of a network load balancer: the full sync of an existing load balancer.
    async fn update_nlb_hosts(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Node],
    ) -> Result<()> {
        let name = self.get_load_balancer_name(cluster_name, service);
        if self.our_load_balancer(&name).await?.is_none() {
            return Err(CloudError::provider(format!(
                "load balancer {name} of Service {} does not exist",
                service_key(service)
            )));
        }
        self.ensure_nlb(cluster_name, service, nodes)
            .await
            .map(|_| ())
    }

    async fn delete_nlb(&self, cluster_name: &str, service: &Service) -> Result<()> {
        let name = self.get_load_balancer_name(cluster_name, service);
        let lb = match self.find_load_balancer(&name).await? {
            Some(lb) => {
                let tags = self
                    .elb_resource_tags(std::slice::from_ref(&lb.arn))
                    .await?;
                let tags = tags.get(&lb.arn).cloned().unwrap_or_default();
                if !self.owns_load_balancer(&tags) {
                    tracing::warn!(load_balancer = %name, service = %service_key(service),
                        "load balancer is not tagged for this cluster; leaving it alone");
                    return Ok(());
                }
                Some(lb)
            }
            None => None,
        };
        let security_groups = self
            .nlb_groups_to_delete(cluster_name, service, lb.as_ref())
            .await?;
        let mut groups: Vec<TargetGroupInfo> = Vec::new();
        if let Some(lb) = &lb {
            let listeners = self.listeners(&lb.arn).await?;
            groups = self.target_groups_of(&lb.arn, &listeners).await?;
            tracing::info!(load_balancer = %name, service = %service_key(service), "deleting network load balancer");
            self.delete_load_balancer(&lb.arn).await?;
        }
        // Target groups of the current ports left behind by an earlier, interrupted deletion.
        if let Ok(spec) = spec::parse(service, &self.config.cluster_health_probe) {
            for port in &spec.ports {
                let tg_name = target_group_name(self.cluster_key(cluster_name), &spec, port);
                if groups.iter().any(|g| g.name == tg_name) {
                    continue;
                }
                if let Some(tg) = self.find_target_group(&tg_name).await? {
                    let tags = self
                        .elb_resource_tags(std::slice::from_ref(&tg.arn))
                        .await?;
                    let tags = tags.get(&tg.arn).cloned().unwrap_or_default();
                    if tags.get(TAG_SERVICE_NAME) == Some(&spec.service_name())
                        && self
                            .tagging
                            .is_ours(tags.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                    {
                        groups.push(tg);
                    }
                }
            }
        }
        for tg in &groups {
            self.delete_target_group_when_released(&tg.arn).await?;
        }
        let vpc = self
            .config
            .vpc
            .clone()
            .or_else(|| lb.as_ref().map(|l| l.vpc_id.clone()))
            .or_else(|| groups.first().map(|g| g.vpc_id.clone()))
            .filter(|v| !v.is_empty());
        match vpc {
            Some(vpc) => self.sync_security_groups(&name, None, &vpc, &[]).await?,
            None => {
                tracing::debug!(load_balancer = %name, "VPC unknown; no security-group rules to remove")
            }
        }
        self.delete_groups(&security_groups).await
    }

    /// Deletes a target group, waiting briefly while ELBv2 still counts it as used by the deleted load
    /// balancer's listeners.
    async fn delete_target_group_when_released(&self, arn: &str) -> Result<()> {
        let mut delay = std::time::Duration::from_millis(250);
        let mut attempt = 0;
        loop {
            match self.delete_target_group(arn).await {
                Err(e) if e.is_code("ResourceInUse") && attempt < 4 => {
                    tracing::debug!(target_group = arn, error = %e, "target group still in use; retrying");
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                    attempt += 1;
                }
                other => return Ok(other?),
            }
        }
    }
}

impl AwsCloud {
    /// Why a Service handed to the AWS Load Balancer Controller (`nlb-ip`, `external`) is not ours to sync:
    /// normally [`CloudError::ImplementedElsewhere`]; an error event when it still has a load balancer of
    /// ours (the type cannot change after creation).
    async fn handover_error(&self, service: &Service, kind: &str) -> CloudError {
        let name = default_load_balancer_name(service);
        let classic = match self.find_classic(&name).await {
            Ok(found) => found.is_some(),
            Err(e) => return e,
        };
        let network = match self.our_load_balancer(&name).await {
            Ok(found) => found.is_some(),
            Err(e) => return e,
        };
        if classic || network {
            return SpecError::new(
                ANN_TYPE,
                format!(
                    "cannot change to {kind:?}: this Service already has a load balancer managed by the \
                     cloud-controller-manager (delete and recreate the Service)"
                ),
            )
            .into();
        }
        CloudError::ImplementedElsewhere
    }
}

#[async_trait::async_trait]
impl LoadBalancer for AwsCloud {
    async fn get_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> Result<Option<LoadBalancerStatus>> {
        let name = self.get_load_balancer_name(cluster_name, service);
        match lb_kind(service) {
            LbKind::Classic => Ok(self
                .find_classic(&name)
                .await?
                .map(|lb| classic::classic_status(&lb.dns_name))),
            LbKind::Nlb => Ok(self.find_load_balancer(&name).await?.as_ref().map(status)),
            LbKind::Elsewhere(_) => Ok(None),
        }
    }

    fn get_load_balancer_name(&self, _cluster_name: &str, service: &Service) -> String {
        default_load_balancer_name(service)
    }

    async fn ensure_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Node],
    ) -> Result<LoadBalancerStatus> {
        match lb_kind(service) {
            LbKind::Classic => self.ensure_classic(service, nodes).await,
            LbKind::Nlb => self.ensure_nlb(cluster_name, service, nodes).await,
            LbKind::Elsewhere(kind) => Err(self.handover_error(service, &kind).await),
        }
    }

    async fn update_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Node],
    ) -> Result<()> {
        match lb_kind(service) {
            LbKind::Classic => self.update_classic_hosts(service, nodes).await,
            LbKind::Nlb => self.update_nlb_hosts(cluster_name, service, nodes).await,
            LbKind::Elsewhere(kind) => Err(self.handover_error(service, &kind).await),
        }
    }

    /// Deletes the Service's load balancer of either type, whatever the type annotation says now (a load
    /// balancer left by a refused type change goes too).
    async fn ensure_load_balancer_deleted(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> Result<()> {
        self.delete_classic_lb(service).await?;
        self.delete_nlb(cluster_name, service).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load_balancer::spec::{
        ANN_ACCESS_LOG_BUCKET, ANN_ACCESS_LOG_ENABLED, ANN_CROSS_ZONE,
    };

    /// A Service spec with one TCP port, 80 on node port 30080.
    fn one_port() -> k8s_openapi::api::core::v1::ServiceSpec {
        k8s_openapi::api::core::v1::ServiceSpec {
            ports: Some(vec![k8s_openapi::api::core::v1::ServicePort {
                port: 80,
                node_port: Some(30080),
                ..Default::default()
            }]),
            ..Default::default()
        }
    }

    #[test]
    fn node_selection_by_labels() {
        let mut node = Node::default();
        node.metadata.labels = Some(BTreeMap::from([
            ("lb".to_string(), "yes".to_string()),
            ("edge".to_string(), "".to_string()),
        ]));
        let want = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert!(node_selected(&node, &want(&[])));
        assert!(node_selected(&node, &want(&[("lb", "yes")])));
        assert!(node_selected(&node, &want(&[("lb", "yes"), ("edge", "")])));
        assert!(!node_selected(&node, &want(&[("lb", "no")])));
        assert!(!node_selected(&node, &want(&[("zone", "")])));
        assert!(!node_selected(&Node::default(), &want(&[("lb", "yes")])));
    }

    #[test]
    fn attributes_from_annotations() {
        let mut svc = Service::default();
        svc.metadata.name = Some("s".into());
        svc.metadata.annotations = Some(BTreeMap::from([
            (ANN_CROSS_ZONE.to_string(), "true".to_string()),
            (ANN_ACCESS_LOG_ENABLED.to_string(), "true".to_string()),
            (ANN_ACCESS_LOG_BUCKET.to_string(), "logs".to_string()),
        ]));
        svc.spec = Some(one_port());
        let spec = spec::parse(&svc, &Default::default()).unwrap();
        assert_eq!(
            wanted_lb_attributes(&spec),
            BTreeMap::from([
                ("access_logs.s3.bucket".to_string(), "logs".to_string()),
                ("access_logs.s3.enabled".to_string(), "true".to_string()),
                ("access_logs.s3.prefix".to_string(), "".to_string()),
                (
                    "load_balancing.cross_zone.enabled".to_string(),
                    "true".to_string()
                ),
            ])
        );
    }

    /// Without annotations cross-zone load balancing and access logs are switched off (an annotation
    /// removed later turns them off again), and nothing is said about the log bucket.
    #[test]
    fn attributes_default_to_off() {
        let mut svc = Service::default();
        svc.metadata.name = Some("s".into());
        svc.spec = Some(one_port());
        let spec = spec::parse(&svc, &Default::default()).unwrap();
        assert_eq!(
            wanted_lb_attributes(&spec),
            BTreeMap::from([
                ("access_logs.s3.enabled".to_string(), "false".to_string()),
                (
                    "load_balancing.cross_zone.enabled".to_string(),
                    "false".to_string()
                ),
            ])
        );
    }

    fn mapping(subnet: &str, eip: Option<&str>, ip: Option<&str>) -> SubnetMapping {
        SubnetMapping {
            subnet_id: subnet.into(),
            allocation_id: eip.map(str::to_string),
            private_ipv4: ip.map(str::to_string),
        }
    }

    /// moto accepts subnet mappings but ignores their Elastic IPs and private addresses, so the mapping
    /// itself is checked here.
    #[test]
    fn subnet_mappings_pair_addresses_with_subnets() {
        let subnet = |id: &str, cidr: &str| SubnetInfo {
            id: id.into(),
            zone: "z".into(),
            cidr: Some(cidr.parse().unwrap()),
            tags: vec![],
            public: true,
        };
        let subnets = vec![
            subnet("subnet-a", "10.0.1.0/24"),
            subnet("subnet-b", "10.0.2.0/24"),
        ];
        let mut svc = Service::default();
        svc.metadata.name = Some("s".into());
        svc.spec = Some(one_port());
        let with = |pairs: &[(&str, &str)]| {
            let mut s = svc.clone();
            s.metadata.annotations = Some(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            );
            spec::parse(&s, &Default::default()).unwrap()
        };
        let plain = subnet_mappings(&with(&[]), &subnets).unwrap();
        assert_eq!(
            plain,
            vec![
                mapping("subnet-a", None, None),
                mapping("subnet-b", None, None)
            ]
        );
        let eips = subnet_mappings(
            &with(&[(ANN_EIP_ALLOCATIONS, "eipalloc-1,eipalloc-2")]),
            &subnets,
        )
        .unwrap();
        assert_eq!(eips[1], mapping("subnet-b", Some("eipalloc-2"), None));
        let err =
            subnet_mappings(&with(&[(ANN_EIP_ALLOCATIONS, "eipalloc-1")]), &subnets).unwrap_err();
        assert_eq!(err.subject, ANN_EIP_ALLOCATIONS);
        let ips = subnet_mappings(
            &with(&[
                (ANN_INTERNAL, "true"),
                (ANN_PRIVATE_IPV4, "10.0.1.9,10.0.2.9"),
            ]),
            &subnets,
        )
        .unwrap();
        assert_eq!(ips[0], mapping("subnet-a", None, Some("10.0.1.9")));
        let err = subnet_mappings(
            &with(&[
                (ANN_INTERNAL, "true"),
                (ANN_PRIVATE_IPV4, "10.0.2.9,10.0.1.9"),
            ]),
            &subnets,
        )
        .unwrap_err();
        assert_eq!(err.subject, ANN_PRIVATE_IPV4);
        assert!(err.message.contains("not in subnet subnet-a"), "{err}");
        let err = subnet_mappings(
            &with(&[(ANN_INTERNAL, "true"), (ANN_PRIVATE_IPV4, "10.0.1.9")]),
            &subnets,
        )
        .unwrap_err();
        assert_eq!(err.subject, ANN_PRIVATE_IPV4);
    }

    fn group(
        arn: &str,
        port: i32,
        protocol: &str,
        hc_protocol: &str,
        interval: i32,
    ) -> TargetGroupInfo {
        TargetGroupInfo {
            arn: arn.into(),
            name: format!("name-of-{arn}"),
            port,
            protocol: protocol.into(),
            vpc_id: "vpc-1".into(),
            health_check: HealthCheckState {
                protocol: hc_protocol.into(),
                port: "traffic-port".into(),
                path: None,
                interval,
                healthy_threshold: 3,
                unhealthy_threshold: 3,
            },
            load_balancer_arns: vec![],
        }
    }

    fn listener_to(tg: &str) -> ListenerInfo {
        ListenerInfo {
            arn: "l".into(),
            port: 80,
            protocol: "TCP".into(),
            target_group_arn: Some(tg.into()),
            certificates: vec![],
            ssl_policy: None,
        }
    }

    /// Existing target groups are found by node port, whatever their names; the listener's own first.
    #[test]
    fn target_groups_found_by_node_port() {
        let attached = vec![
            group("a", 30080, "TCP", "TCP", 30),
            group("b", 30081, "TCP", "TCP", 30),
            group("c", 30081, "TCP", "TCP", 30),
        ];
        let found = |tg: &str, node_port: i32| {
            node_port_group(&listener_to(tg), node_port, &attached).map(|t| t.arn.clone())
        };
        assert_eq!(found("c", 30081).as_deref(), Some("c"));
        assert_eq!(found("a", 30081).as_deref(), Some("b"));
        assert_eq!(found("x", 30080).as_deref(), Some("a"));
        assert_eq!(found("a", 30082), None);
    }

    /// A target group is replaced only for a new traffic protocol, health-check protocol or interval.
    #[test]
    fn target_groups_replaced_as_upstream_replaces_them() {
        let port = spec::PortMapping {
            name: String::new(),
            port: 80,
            node_port: 30080,
            service_protocol: spec::Protocol::Tcp,
            listener_protocol: spec::Protocol::Tcp,
            target_protocol: spec::Protocol::Tcp,
            certificate: None,
            ssl_policy: None,
        };
        let wanted = group("w", 30080, "TCP", "TCP", 30).health_check;
        assert!(!needs_new_group(
            &group("a", 30080, "TCP", "tcp", 30),
            &port,
            &wanted
        ));
        let mut other_thresholds = group("a", 30080, "TCP", "TCP", 30);
        other_thresholds.health_check.healthy_threshold = 5;
        other_thresholds.health_check.port = "10256".into();
        assert!(!needs_new_group(&other_thresholds, &port, &wanted));
        assert!(needs_new_group(
            &group("a", 30080, "TLS", "TCP", 30),
            &port,
            &wanted
        ));
        assert!(needs_new_group(
            &group("a", 30080, "TCP", "HTTP", 30),
            &port,
            &wanted
        ));
        assert!(needs_new_group(
            &group("a", 30080, "TCP", "TCP", 10),
            &port,
            &wanted
        ));
    }

    /// The status is the DNS name while the load balancer is provisioning or active, as upstream reports it.
    #[test]
    fn status_is_the_dns_name() {
        let lb = LbInfo {
            arn: "arn".into(),
            dns_name: "a1-123.elb.us-east-1.amazonaws.com".into(),
            internal: false,
            network: true,
            vpc_id: "vpc-1".into(),
            security_groups: vec![],
            subnet_ids: vec![],
            state: "active".into(),
        };
        let s = status(&lb);
        assert_eq!(
            s.ingress.unwrap()[0].hostname.as_deref(),
            Some("a1-123.elb.us-east-1.amazonaws.com")
        );
        for (state, shown) in [
            ("provisioning", true),
            ("active_impaired", false),
            ("failed", false),
            ("", false),
        ] {
            let lb = LbInfo {
                state: state.into(),
                ..lb.clone()
            };
            assert_eq!(status(&lb).ingress.is_some(), shown, "{state:?}");
        }
    }
}
