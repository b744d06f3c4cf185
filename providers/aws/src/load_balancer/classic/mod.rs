//! Classic ELBs: upstream's default load balancer for Services without the type annotation.
//!
//! Identity and shape follow the upstream provider exactly, so a load balancer it made is adopted as it is:
//! the name ([`default_load_balancer_name`](cloud_provider::default_load_balancer_name)), one listener per
//! Service port, the health check, the attributes, the proxy-protocol and SSL-negotiation policies, the
//! load balancer's own security group and the node security-group rules ([`security_groups`]). Every step
//! compares first and calls AWS only for what differs, so a second sync of an unchanged Service only reads.

pub(crate) mod elb;
pub(crate) mod security_groups;
pub mod spec;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use cloud_provider::{CloudError, Result};
use k8s_openapi::api::core::v1::{LoadBalancerIngress, LoadBalancerStatus, Node, Service};

use self::elb::{ClassicLb, NewClassicLb};
use self::security_groups::{NodeRules, NodeRulesChanges, PieceChanges};
use self::spec::{ClassicSpec, PROXY_PROTOCOL_POLICY, SSL_NEGOTIATION_POLICY_PREFIX};
use crate::cloud::AwsCloud;
use crate::ec2_instance::Ec2Instance;
use crate::tagging::TAG_SERVICE_NAME;

/// The Service's load-balancer status: the DNS name as hostname.
pub(crate) fn classic_status(dns_name: &str) -> LoadBalancerStatus {
    LoadBalancerStatus {
        ingress: (!dns_name.is_empty()).then(|| {
            vec![LoadBalancerIngress {
                hostname: Some(dns_name.to_string()),
                ..Default::default()
            }]
        }),
    }
}

/// The listeners to delete (by port) and to create so the load balancer has exactly `wanted`.
pub(crate) fn listener_changes<'a>(
    wanted: &'a [spec::ClassicListener],
    current: &[(spec::ClassicListener, Vec<String>)],
) -> (Vec<i32>, Vec<&'a spec::ClassicListener>) {
    let mut matched = vec![false; wanted.len()];
    let mut remove = Vec::new();
    for (have, _) in current {
        match wanted
            .iter()
            .enumerate()
            .find(|(i, w)| !matched[*i] && w.same_as(have))
        {
            Some((i, _)) => matched[i] = true,
            None => remove.push(have.load_balancer_port),
        }
    }
    let add = wanted
        .iter()
        .zip(&matched)
        .filter(|(_, m)| !**m)
        .map(|(w, _)| w)
        .collect();
    (remove, add)
}

/// The backend ports whose proxy-protocol policy must change, with the policies each gets.
pub(crate) fn backend_policy_changes(
    spec: &ClassicSpec,
    current: &BTreeMap<i32, Vec<String>>,
) -> Vec<(i32, Vec<String>)> {
    let wanted: Vec<String> = if spec.proxy_protocol {
        vec![PROXY_PROTOCOL_POLICY.to_string()]
    } else {
        Vec::new()
    };
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for l in &spec.listeners {
        let port = l.instance_port;
        if !seen.insert(port) {
            continue;
        }
        let on = current
            .get(&port)
            .is_some_and(|p| p.iter().any(|n| n == PROXY_PROTOCOL_POLICY));
        if on != spec.proxy_protocol {
            out.push((port, wanted.clone()));
        }
    }
    for (port, policies) in current {
        if !seen.contains(port) && !policies.is_empty() {
            out.push((*port, Vec::new()));
        }
    }
    out
}

fn set_of(items: &[String]) -> BTreeSet<&String> {
    items.iter().collect()
}

impl AwsCloud {
    /// Refuses to manage a classic load balancer that is not the cluster's.
    async fn our_classic(&self, name: &str) -> Result<Option<ClassicLb>> {
        let Some(lb) = self.find_classic(name).await? else {
            return Ok(None);
        };
        if !self.owns_load_balancer(&self.classic_tags(name).await?) {
            return Err(self.foreign_load_balancer(name));
        }
        Ok(Some(lb))
    }

    /// Creates, or brings up to date, the Service's classic load balancer.
    pub(crate) async fn ensure_classic(
        &self,
        service: &Service,
        nodes: &[Node],
    ) -> Result<LoadBalancerStatus> {
        let name = cloud_provider::default_load_balancer_name(service);
        let spec = spec::parse(service, &self.config.cluster_health_probe)?;
        let instances = self
            .target_instances(&spec.target_node_labels, nodes)
            .await?;
        let existing = self.our_classic(&name).await?;
        if existing.is_none() && self.find_load_balancer(&name).await?.is_some() {
            return Err(super::type_change_refused(
                "Classic Load Balancer",
                "a network load balancer",
            ));
        }
        let vpc_id =
            self.load_balancer_vpc(existing.as_ref().map(|l| l.vpc_id.as_str()), &instances)?;
        let subnets: Vec<String> = self
            .load_balancer_subnets(spec.subnets.as_deref(), spec.internal, &vpc_id)
            .await?
            .into_iter()
            .map(|s| s.id)
            .collect();
        let (groups, own_group) = self.classic_security_groups(&name, &spec, &vpc_id).await?;
        // Every rule change must fit its group's rule limit before anything is created or changed.
        let rules = self
            .plan_classic_rules(RulePlanInput {
                spec: &spec,
                own_group: own_group.as_deref(),
                groups: &groups,
                existing: existing.as_ref(),
                vpc_id: &vpc_id,
                instances: &instances,
            })
            .await?;
        let dirty = match &existing {
            None => {
                self.create_classic_lb(&name, &spec, subnets, groups.clone())
                    .await?;
                true
            }
            Some(lb) => self.update_classic_lb(lb, &spec, &subnets, &groups).await?,
        };
        self.sync_classic_attributes(&name, &spec.attributes)
            .await?;
        let lb = match (dirty, existing) {
            (false, Some(lb)) => lb,
            _ => self.find_classic(&name).await?.ok_or_else(|| {
                CloudError::provider(format!("load balancer {name} vanished during its sync"))
            })?,
        };
        self.sync_ssl_negotiation_policy(&lb, &spec).await?;
        if lb.health_check.as_ref() != Some(&spec.health_check) {
            tracing::info!(load_balancer = %name, target = %spec.health_check.target, "configuring health check");
            self.configure_classic_health_check(&name, &spec.health_check)
                .await?;
        }
        let targets = in_vpc(instances, &lb.vpc_id);
        self.sync_classic_rules(&rules, &spec, own_group.as_deref(), &lb, &targets)
            .await?;
        self.sync_classic_instances(&lb, &targets).await?;
        Ok(classic_status(&lb.dns_name))
    }

    /// Plans every security-group rule change of a classic sync (the load balancer's own group and the
    /// node groups) and checks them against the rule limit, before any rule is changed.
    async fn plan_classic_rules(&self, input: RulePlanInput<'_>) -> Result<ClassicRulePlan> {
        let own = match input.own_group {
            Some(group) => Some(self.plan_elb_group_ingress(group, input.spec).await?),
            None => None,
        };
        // The load balancer's groups as AWS will list them: the existing order when they stay the same.
        let lb_groups = match input.existing {
            Some(lb) if set_of(&lb.security_groups) == set_of(input.groups) => {
                lb.security_groups.clone()
            }
            _ => input.groups.to_vec(),
        };
        let vpc_id = input
            .existing
            .map_or(input.vpc_id, |lb| lb.vpc_id.as_str())
            .to_string();
        let targets = in_vpc(input.instances.to_vec(), &vpc_id);
        let nodes = self
            .plan_node_group_rules(NodeRules {
                lb_groups: &lb_groups,
                annotated: &input.spec.security_groups,
                extra: &input.spec.extra_security_groups,
                vpc_id: &vpc_id,
                targets: &targets,
                deleting: &BTreeSet::new(),
            })
            .await?;
        let counted: Vec<_> = own
            .iter()
            .map(|c| c.counted.clone())
            .chain(nodes.changes())
            .collect();
        self.check_rule_limit(&counted)?;
        Ok(ClassicRulePlan {
            own,
            nodes,
            lb_groups,
            vpc_id,
        })
    }

    /// The rule changes of a classic sync once its load balancer is up to date: planned again from the
    /// groups as they are now (another sync may have changed them since `first`) and checked again before
    /// the first rule changes, unless nothing was to change and `first`'s assumptions hold. The load
    /// balancer's own group changes first, then the node groups.
    async fn sync_classic_rules(
        &self,
        first: &ClassicRulePlan,
        spec: &ClassicSpec,
        own_group: Option<&str>,
        lb: &ClassicLb,
        targets: &[Arc<Ec2Instance>],
    ) -> Result<()> {
        if first.is_empty() && first.holds_for(lb) {
            return Ok(());
        }
        let plan = self
            .plan_classic_rules(RulePlanInput {
                spec,
                own_group,
                groups: &lb.security_groups,
                existing: Some(lb),
                vpc_id: &lb.vpc_id,
                instances: targets,
            })
            .await?;
        for group in plan.own.iter().chain(&plan.nodes.groups) {
            self.apply_piece_changes(group).await?;
        }
        Ok(())
    }

    async fn create_classic_lb(
        &self,
        name: &str,
        spec: &ClassicSpec,
        subnets: Vec<String>,
        groups: Vec<String>,
    ) -> Result<()> {
        let mut tags = spec.additional_tags.clone();
        tags.insert(TAG_SERVICE_NAME.to_string(), spec.service_name());
        tags.extend(self.tagging.owned_tags());
        tracing::info!(load_balancer = name, service = %spec.service_name(), internal = spec.internal,
            subnets = ?subnets, "creating classic load balancer");
        self.create_classic(NewClassicLb {
            name,
            listeners: &spec.listeners,
            internal: spec.internal,
            subnets,
            security_groups: groups,
            tags: &tags,
        })
        .await?;
        if spec.proxy_protocol {
            self.ensure_proxy_protocol_policy(name, &[]).await?;
            for (port, policies) in backend_policy_changes(spec, &BTreeMap::new()) {
                self.set_classic_backend_policies(name, port, policies)
                    .await?;
            }
        }
        Ok(())
    }

    async fn ensure_proxy_protocol_policy(&self, name: &str, existing: &[String]) -> Result<()> {
        if existing.iter().any(|p| p == PROXY_PROTOCOL_POLICY) {
            return Ok(());
        }
        self.create_classic_policy(
            name,
            PROXY_PROTOCOL_POLICY,
            "ProxyProtocolPolicyType",
            &[("ProxyProtocol", "true")],
        )
        .await
    }

    /// Brings an existing load balancer's subnets, security groups, listeners, backend policies and tags up
    /// to date; answers whether anything but tags changed. The scheme is never changed (as upstream).
    async fn update_classic_lb(
        &self,
        lb: &ClassicLb,
        spec: &ClassicSpec,
        subnets: &[String],
        groups: &[String],
    ) -> Result<bool> {
        let name = lb.name.as_str();
        let mut dirty = false;
        if lb.internal != spec.internal {
            tracing::warn!(
                load_balancer = name,
                internal = lb.internal,
                "the load balancer's scheme differs from the Service's internal annotation; a scheme is fixed at creation (recreate the Service to change it)"
            );
        }
        let (want, have) = (set_of(subnets), set_of(&lb.subnets));
        let detach: Vec<String> = have.difference(&want).map(|s| (*s).clone()).collect();
        let attach: Vec<String> = want.difference(&have).map(|s| (*s).clone()).collect();
        if !detach.is_empty() {
            tracing::info!(load_balancer = name, subnets = ?detach, "detaching subnets");
            self.detach_classic_subnets(name, detach).await?;
            dirty = true;
        }
        if !attach.is_empty() {
            tracing::info!(load_balancer = name, subnets = ?attach, "attaching subnets");
            self.attach_classic_subnets(name, attach).await?;
            dirty = true;
        }
        if set_of(groups) != set_of(&lb.security_groups) {
            tracing::info!(load_balancer = name, groups = ?groups, "applying security groups");
            self.apply_classic_security_groups(name, groups.to_vec())
                .await?;
            dirty = true;
            let dropped: Vec<String> = lb
                .security_groups
                .iter()
                .filter(|g| !groups.contains(g))
                .cloned()
                .collect();
            self.delete_dropped_groups(&dropped, &lb.vpc_id).await?;
        }
        let (remove, add) = listener_changes(&spec.listeners, &lb.listeners);
        if !remove.is_empty() {
            tracing::info!(load_balancer = name, ports = ?remove, "deleting listeners");
            self.delete_classic_listeners(name, remove).await?;
            dirty = true;
        }
        if !add.is_empty() {
            tracing::info!(
                load_balancer = name,
                listeners = add.len(),
                "creating listeners"
            );
            self.create_classic_listeners(name, &add).await?;
            dirty = true;
        }
        if spec.proxy_protocol {
            self.ensure_proxy_protocol_policy(name, &lb.other_policies)
                .await?;
        }
        for (port, policies) in backend_policy_changes(spec, &lb.backend_policies) {
            tracing::info!(load_balancer = name, port, policies = ?policies, "setting backend policies");
            self.set_classic_backend_policies(name, port, policies)
                .await?;
            dirty = true;
        }
        if !spec.additional_tags.is_empty() {
            let current = self.classic_tags(name).await?;
            let differing: BTreeMap<String, String> = spec
                .additional_tags
                .iter()
                .filter(|(k, v)| current.get(*k) != Some(*v))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            if !differing.is_empty() {
                self.add_classic_tags(name, &differing).await?;
            }
        }
        Ok(dirty)
    }

    /// Security groups taken off the load balancer that the cluster owns: their references from node groups
    /// revoked, then deleted.
    async fn delete_dropped_groups(&self, dropped: &[String], vpc_id: &str) -> Result<()> {
        let owned: BTreeSet<String> = self
            .describe_groups(dropped)
            .await?
            .iter()
            .filter(|g| {
                self.tagging.is_owned(
                    g.tags()
                        .iter()
                        .map(|t| (t.key().unwrap_or_default(), t.value().unwrap_or_default())),
                )
            })
            .filter_map(|g| g.group_id().map(str::to_string))
            .collect();
        for group in &owned {
            self.revoke_references_to(group, vpc_id).await?;
        }
        self.delete_groups(&owned).await
    }

    /// The SSL negotiation policy of the annotation on every TLS listener (created once per load balancer).
    async fn sync_ssl_negotiation_policy(&self, lb: &ClassicLb, spec: &ClassicSpec) -> Result<()> {
        let Some(reference) = &spec.ssl_negotiation_policy else {
            return Ok(());
        };
        let policy = format!("{SSL_NEGOTIATION_POLICY_PREFIX}{reference}");
        let tls: Vec<(i32, &Vec<String>)> = lb
            .listeners
            .iter()
            .filter(|(l, _)| l.is_tls())
            .map(|(l, policies)| (l.load_balancer_port, policies))
            .collect();
        let wanted = vec![policy.clone()];
        if tls.iter().all(|(_, have)| **have == wanted) && !tls.is_empty() {
            return Ok(());
        }
        if !self.classic_policy_exists(&lb.name, &policy).await? {
            tracing::info!(load_balancer = %lb.name, policy = %policy, "creating SSL negotiation policy");
            self.create_classic_policy(
                &lb.name,
                &policy,
                "SSLNegotiationPolicyType",
                &[("Reference-Security-Policy", reference)],
            )
            .await?;
        }
        for (port, have) in tls {
            if *have != wanted {
                self.set_classic_listener_policies(&lb.name, port, wanted.clone())
                    .await?;
            }
        }
        Ok(())
    }

    /// Registers the targets the load balancer lacks, then deregisters the ones it should not have.
    async fn sync_classic_instances(
        &self,
        lb: &ClassicLb,
        targets: &[Arc<Ec2Instance>],
    ) -> Result<()> {
        let wanted: BTreeSet<&String> = targets.iter().map(|i| &i.id).collect();
        let have: BTreeSet<&String> = lb.instances.iter().collect();
        let add: Vec<&String> = wanted.difference(&have).copied().collect();
        let remove: Vec<&String> = have.difference(&wanted).copied().collect();
        if !add.is_empty() {
            tracing::info!(load_balancer = %lb.name, count = add.len(), "registering instances");
            self.register_classic_instances(&lb.name, &add).await?;
        }
        if !remove.is_empty() {
            tracing::info!(load_balancer = %lb.name, count = remove.len(), "deregistering instances");
            self.deregister_classic_instances(&lb.name, &remove).await?;
        }
        Ok(())
    }

    /// A node change: the targets and node security-group rules (and the SSL negotiation policy, as upstream).
    pub(crate) async fn update_classic_hosts(
        &self,
        service: &Service,
        nodes: &[Node],
    ) -> Result<()> {
        let name = cloud_provider::default_load_balancer_name(service);
        let spec = spec::parse(service, &self.config.cluster_health_probe)?;
        let instances = self
            .target_instances(&spec.target_node_labels, nodes)
            .await?;
        let Some(lb) = self.our_classic(&name).await? else {
            return Err(CloudError::provider(format!(
                "load balancer {name} of Service {} does not exist",
                spec.service_name()
            )));
        };
        self.sync_ssl_negotiation_policy(&lb, &spec).await?;
        // Node rules first: their lookups may fail, and then nothing is deregistered either.
        let targets = in_vpc(instances, &lb.vpc_id);
        self.sync_node_group_rules(node_rules(&lb, &spec, &targets, &BTreeSet::new()))
            .await?;
        self.sync_classic_instances(&lb, &targets).await
    }

    /// Deletes the Service's classic load balancer: node rules first, then the load balancer, then the
    /// security groups the cluster made for it. A deletion interrupted after the load balancer went is
    /// finished from the load balancer's own group, found by name.
    pub(crate) async fn delete_classic_lb(&self, service: &Service) -> Result<()> {
        let name = cloud_provider::default_load_balancer_name(service);
        let (annotated, extra) = crate::load_balancer::spec::annotated_security_groups(service);
        let lb = match self.find_classic(&name).await? {
            Some(lb) => {
                if !self.owns_load_balancer(&self.classic_tags(&name).await?) {
                    tracing::warn!(load_balancer = %name, "load balancer is not tagged for this cluster; leaving it alone");
                    return Ok(());
                }
                Some(lb)
            }
            None => None,
        };
        let (groups, vpc_id) = match &lb {
            Some(lb) => (
                self.describe_groups(&lb.security_groups).await?,
                lb.vpc_id.clone(),
            ),
            None => {
                let left = self
                    .groups_named(
                        &security_groups::elb_group_name(&name),
                        self.config.vpc.as_deref(),
                    )
                    .await?;
                let vpc = left
                    .first()
                    .and_then(|g| g.vpc_id())
                    .unwrap_or_default()
                    .to_string();
                (left, vpc)
            }
        };
        let all_annotated: Vec<String> = annotated.iter().chain(&extra).cloned().collect();
        let to_delete = self.groups_to_delete(&groups, &all_annotated);
        match &lb {
            Some(lb) => {
                self.sync_node_group_rules(NodeRules {
                    lb_groups: &lb.security_groups,
                    annotated: &annotated,
                    extra: &extra,
                    vpc_id: &vpc_id,
                    targets: &[],
                    deleting: &to_delete,
                })
                .await?;
                tracing::info!(load_balancer = %name, "deleting classic load balancer");
                self.delete_classic(&name).await?;
            }
            None => {
                for group in &to_delete {
                    self.revoke_references_to(group, &vpc_id).await?;
                }
            }
        }
        self.delete_groups(&to_delete).await
    }
}

/// What the rule plan of a classic sync starts from.
struct RulePlanInput<'a> {
    spec: &'a ClassicSpec,
    /// The load balancer's own group, when it has one (its ingress is managed).
    own_group: Option<&'a str>,
    /// The security groups the load balancer is to have.
    groups: &'a [String],
    /// The load balancer, when it exists.
    existing: Option<&'a ClassicLb>,
    /// The VPC of a new load balancer.
    vpc_id: &'a str,
    /// The cluster's instances behind the selected nodes.
    instances: &'a [Arc<Ec2Instance>],
}

/// The security-group rule changes of a classic sync, checked against the rule limit.
struct ClassicRulePlan {
    /// The changes of the load balancer's own group.
    own: Option<PieceChanges>,
    /// The changes of the node groups.
    nodes: NodeRulesChanges,
    /// The load balancer's groups the node plan assumed.
    lb_groups: Vec<String>,
    /// The VPC the node plan assumed.
    vpc_id: String,
}

impl ClassicRulePlan {
    /// Whether no rule changes.
    fn is_empty(&self) -> bool {
        self.own.as_ref().is_none_or(PieceChanges::is_empty) && self.nodes.groups.is_empty()
    }

    /// Whether the node plan assumed the load balancer as it is after its update.
    fn holds_for(&self, lb: &ClassicLb) -> bool {
        lb.security_groups == self.lb_groups && lb.vpc_id == self.vpc_id
    }
}

/// The node rules of an existing load balancer with these targets.
fn node_rules<'a>(
    lb: &'a ClassicLb,
    spec: &'a ClassicSpec,
    targets: &'a [Arc<Ec2Instance>],
    deleting: &'a BTreeSet<String>,
) -> NodeRules<'a> {
    NodeRules {
        lb_groups: &lb.security_groups,
        annotated: &spec.security_groups,
        extra: &spec.extra_security_groups,
        vpc_id: &lb.vpc_id,
        targets,
        deleting,
    }
}

/// The instances in the load balancer's VPC (instances elsewhere cannot be registered).
fn in_vpc(instances: Vec<Arc<Ec2Instance>>, vpc_id: &str) -> Vec<Arc<Ec2Instance>> {
    instances
        .into_iter()
        .filter(|i| i.vpc_id.is_empty() || vpc_id.is_empty() || i.vpc_id == vpc_id)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::spec::{ClassicListener, parse};
    use super::*;
    use crate::config::ClusterHealthProbe;
    use k8s_openapi::api::core::v1::{ServicePort, ServiceSpec};

    fn listener(port: i32, protocol: &str, node_port: i32) -> ClassicListener {
        ClassicListener {
            load_balancer_port: port,
            protocol: protocol.into(),
            instance_port: node_port,
            instance_protocol: "tcp".into(),
            certificate: None,
        }
    }

    #[test]
    fn listener_changes_replace_what_differs() {
        let wanted = vec![listener(80, "tcp", 30080), listener(443, "tcp", 30443)];
        let current = vec![
            (listener(80, "TCP", 30080), vec![]),
            (listener(443, "tcp", 30999), vec![]),
            (listener(8080, "tcp", 30880), vec![]),
        ];
        let (remove, add) = listener_changes(&wanted, &current);
        assert_eq!(remove, vec![443, 8080]);
        assert_eq!(add, vec![&wanted[1]]);
        let same: Vec<(ClassicListener, Vec<String>)> =
            wanted.iter().map(|l| (l.clone(), vec![])).collect();
        let (remove, add) = listener_changes(&wanted, &same);
        assert!(remove.is_empty() && add.is_empty());
    }

    fn spec(proxy: bool) -> ClassicSpec {
        let mut svc = Service::default();
        svc.metadata.name = Some("s".into());
        if proxy {
            svc.metadata.annotations =
                Some([(spec::ANN_PROXY_PROTOCOL.to_string(), "*".to_string())].into());
        }
        let port = |port, node_port| ServicePort {
            port,
            node_port: Some(node_port),
            ..Default::default()
        };
        svc.spec = Some(ServiceSpec {
            ports: Some(vec![port(80, 30080), port(443, 30443)]),
            ..Default::default()
        });
        parse(&svc, &ClusterHealthProbe::ServiceNodePort).unwrap()
    }

    #[test]
    fn backend_policies_follow_the_proxy_protocol_annotation() {
        let on = vec![PROXY_PROTOCOL_POLICY.to_string()];
        let none = BTreeMap::new();
        assert_eq!(
            backend_policy_changes(&spec(true), &none),
            vec![(30080, on.clone()), (30443, on.clone())]
        );
        assert!(backend_policy_changes(&spec(false), &none).is_empty());
        // Already on: nothing; a stale backend port with policies is cleared.
        let current = BTreeMap::from([
            (30080, on.clone()),
            (30443, on.clone()),
            (31000, vec!["other".to_string()]),
        ]);
        assert_eq!(
            backend_policy_changes(&spec(true), &current),
            vec![(31000, vec![])]
        );
        // Turning it off clears every port that has it.
        assert_eq!(
            backend_policy_changes(&spec(false), &current),
            vec![(30080, vec![]), (30443, vec![]), (31000, vec![])]
        );
    }

    #[test]
    fn status_is_the_dns_name() {
        let s = classic_status("a1.us-east-1.elb.amazonaws.com");
        assert_eq!(
            s.ingress.unwrap()[0].hostname.as_deref(),
            Some("a1.us-east-1.elb.amazonaws.com")
        );
        assert!(classic_status("").ingress.is_none());
    }
}
