//! Elastic Load Balancing v2 calls: load balancers, listeners, target groups, targets, attributes and tags.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use aws_sdk_elasticloadbalancingv2::operation::describe_target_groups::builders::DescribeTargetGroupsFluentBuilder;
use aws_sdk_elasticloadbalancingv2::types::{
    Action, ActionTypeEnum, Certificate, LoadBalancerAttribute, LoadBalancerSchemeEnum,
    LoadBalancerTypeEnum, ProtocolEnum, Tag, TargetDescription, TargetGroupAttribute,
    TargetTypeEnum,
};
use cloud_provider::Result;

use super::spec::{HealthCheck, Protocol};
use crate::cloud::AwsCloud;
use crate::error::SdkResultExt;
use crate::paginate::for_each_page;

/// Most targets per RegisterTargets / DeregisterTargets call.
pub const TARGET_CHUNK: usize = 100;
/// Most resources per DescribeTags call.
const TAGS_CHUNK: usize = 20;

/// A load balancer as found in ELBv2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LbInfo {
    pub(crate) arn: String,
    pub(crate) dns_name: String,
    pub(crate) internal: bool,
    pub(crate) network: bool,
    pub(crate) vpc_id: String,
    pub(crate) security_groups: Vec<String>,
    /// The subnets the load balancer sits in (one per zone).
    pub(crate) subnet_ids: Vec<String>,
    /// The state code (`provisioning`, `active`, `active_impaired`, `failed`), empty when not reported.
    pub(crate) state: String,
}

impl LbInfo {
    fn from_sdk(lb: &aws_sdk_elasticloadbalancingv2::types::LoadBalancer) -> Self {
        LbInfo {
            arn: lb.load_balancer_arn().unwrap_or_default().to_string(),
            dns_name: lb.dns_name().unwrap_or_default().to_string(),
            internal: lb.scheme() == Some(&LoadBalancerSchemeEnum::Internal),
            network: lb.r#type() == Some(&LoadBalancerTypeEnum::Network),
            vpc_id: lb.vpc_id().unwrap_or_default().to_string(),
            security_groups: lb.security_groups().to_vec(),
            subnet_ids: lb
                .availability_zones()
                .iter()
                .filter_map(|z| z.subnet_id())
                .map(str::to_string)
                .collect(),
            state: lb
                .state()
                .and_then(|s| s.code())
                .map(|c| c.as_str().to_string())
                .unwrap_or_default(),
        }
    }
}

/// A listener as found in ELBv2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListenerInfo {
    pub(crate) arn: String,
    pub(crate) port: i32,
    pub(crate) protocol: String,
    pub(crate) target_group_arn: Option<String>,
    pub(crate) certificates: Vec<String>,
    pub(crate) ssl_policy: Option<String>,
}

/// A target group as found in ELBv2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TargetGroupInfo {
    pub(crate) arn: String,
    pub(crate) name: String,
    pub(crate) port: i32,
    pub(crate) protocol: String,
    pub(crate) vpc_id: String,
    pub(crate) health_check: HealthCheckState,
    pub(crate) load_balancer_arns: Vec<String>,
}

/// A target group's health-check settings, in ELBv2's terms. The timeout is left to AWS's default, as
/// upstream leaves it, so it is not part of the state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HealthCheckState {
    pub(crate) protocol: String,
    pub(crate) port: String,
    pub(crate) path: Option<String>,
    pub(crate) interval: i32,
    pub(crate) healthy_threshold: i32,
    pub(crate) unhealthy_threshold: i32,
}

impl HealthCheckState {
    /// The state a health check should have.
    pub(crate) fn wanted(hc: &HealthCheck) -> Self {
        HealthCheckState {
            protocol: hc.protocol.as_str().to_string(),
            port: hc.port.to_aws(),
            path: hc.path.clone(),
            interval: hc.interval,
            healthy_threshold: hc.healthy_threshold,
            unhealthy_threshold: hc.unhealthy_threshold,
        }
    }

    /// Whether a target group with health check `self` has to be replaced to get `wanted`: its protocol
    /// (case-insensitively) or interval differs, the changes upstream recreates target groups for.
    pub(crate) fn needs_new_group(&self, wanted: &HealthCheckState) -> bool {
        !self.protocol.eq_ignore_ascii_case(&wanted.protocol) || self.interval != wanted.interval
    }

    /// Whether ModifyTargetGroup has to bring `self` to `wanted`: the port, a threshold or (for HTTP and
    /// HTTPS checks) the path differs.
    pub(crate) fn needs_update(&self, wanted: &HealthCheckState) -> bool {
        let path_differs = !wanted.protocol.eq_ignore_ascii_case("TCP") && self.path != wanted.path;
        self.port != wanted.port
            || self.healthy_threshold != wanted.healthy_threshold
            || self.unhealthy_threshold != wanted.unhealthy_threshold
            || path_differs
    }

    /// The path to send: none for TCP checks.
    fn path_to_send(&self) -> Option<String> {
        self.path
            .clone()
            .filter(|_| !self.protocol.eq_ignore_ascii_case("TCP"))
    }
}

fn protocol_enum(p: Protocol) -> ProtocolEnum {
    match p {
        Protocol::Tcp => ProtocolEnum::Tcp,
        Protocol::Udp => ProtocolEnum::Udp,
        Protocol::Tls => ProtocolEnum::Tls,
    }
}

fn elb_tags(tags: &BTreeMap<String, String>) -> Vec<Tag> {
    tags.iter()
        .map(|(k, v)| Tag::builder().key(k).value(v).build())
        .collect()
}

/// A subnet of a new load balancer with its optional fixed address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SubnetMapping {
    pub(crate) subnet_id: String,
    /// Elastic IP allocation (internet-facing).
    pub(crate) allocation_id: Option<String>,
    /// Private IPv4 address (internal).
    pub(crate) private_ipv4: Option<String>,
}

/// What a new load balancer looks like.
pub(crate) struct NewLoadBalancer<'a> {
    pub(crate) name: &'a str,
    pub(crate) internal: bool,
    pub(crate) subnets: Vec<SubnetMapping>,
    pub(crate) tags: &'a BTreeMap<String, String>,
    /// Its security groups (none: it never gets any, as AWS has it).
    pub(crate) security_groups: &'a [String],
}

/// What a new or updated listener looks like.
pub(crate) struct WantedListener<'a> {
    pub(crate) port: i32,
    pub(crate) protocol: Protocol,
    pub(crate) target_group_arn: &'a str,
    pub(crate) certificate: Option<&'a str>,
    pub(crate) ssl_policy: Option<&'a str>,
}

impl WantedListener<'_> {
    /// Whether `listener` already matches.
    pub(crate) fn matches(&self, listener: &ListenerInfo) -> bool {
        let tls_ok = self.protocol != Protocol::Tls
            || (listener
                .certificates
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>()
                == self.certificate.into_iter().collect::<Vec<_>>()
                && (self.ssl_policy.is_none()
                    || listener.ssl_policy.as_deref() == self.ssl_policy));
        listener.protocol == self.protocol.as_str()
            && listener.target_group_arn.as_deref() == Some(self.target_group_arn)
            && tls_ok
    }

    fn forward(&self) -> Action {
        Action::builder()
            .r#type(ActionTypeEnum::Forward)
            .target_group_arn(self.target_group_arn)
            .build()
    }

    fn certificates(&self) -> Option<Vec<Certificate>> {
        self.certificate
            .map(|c| vec![Certificate::builder().certificate_arn(c).build()])
    }
}

impl AwsCloud {
    /// The load balancer named `name`, if it exists.
    pub(crate) async fn find_load_balancer(&self, name: &str) -> Result<Option<LbInfo>> {
        let out = self
            .clients
            .elb
            .describe_load_balancers()
            .names(name)
            .send()
            .await
            .api("DescribeLoadBalancers");
        let out = match out {
            Ok(out) => out,
            Err(e) if e.is_code("LoadBalancerNotFound") => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        Ok(out.load_balancers().first().map(LbInfo::from_sdk))
    }

    /// Tags of ELBv2 resources by ARN.
    pub(crate) async fn elb_resource_tags(
        &self,
        arns: &[String],
    ) -> Result<HashMap<String, BTreeMap<String, String>>> {
        let mut out = HashMap::new();
        for chunk in arns.chunks(TAGS_CHUNK) {
            let resp = self
                .clients
                .elb
                .describe_tags()
                .set_resource_arns(Some(chunk.to_vec()))
                .send()
                .await
                .api("DescribeTags")?;
            for d in resp.tag_descriptions() {
                let tags = d
                    .tags()
                    .iter()
                    .map(|t| {
                        (
                            t.key().unwrap_or_default().to_string(),
                            t.value().unwrap_or_default().to_string(),
                        )
                    })
                    .collect();
                out.insert(d.resource_arn().unwrap_or_default().to_string(), tags);
            }
        }
        Ok(out)
    }

    /// Adds (or overwrites) tags on ELBv2 resources.
    pub(crate) async fn add_elb_tags(
        &self,
        arn: &str,
        tags: &BTreeMap<String, String>,
    ) -> Result<()> {
        self.clients
            .elb
            .add_tags()
            .resource_arns(arn)
            .set_tags(Some(elb_tags(tags)))
            .send()
            .await
            .api("AddTags")?;
        Ok(())
    }

    /// Creates a network load balancer.
    pub(crate) async fn create_load_balancer(&self, new: NewLoadBalancer<'_>) -> Result<LbInfo> {
        let mappings = new
            .subnets
            .iter()
            .map(|m| {
                aws_sdk_elasticloadbalancingv2::types::SubnetMapping::builder()
                    .subnet_id(&m.subnet_id)
                    .set_allocation_id(m.allocation_id.clone())
                    .set_private_ipv4_address(m.private_ipv4.clone())
                    .build()
            })
            .collect();
        let out = self
            .clients
            .elb
            .create_load_balancer()
            .name(new.name)
            .r#type(LoadBalancerTypeEnum::Network)
            .scheme(if new.internal {
                LoadBalancerSchemeEnum::Internal
            } else {
                LoadBalancerSchemeEnum::InternetFacing
            })
            .set_subnet_mappings(Some(mappings))
            .set_tags(Some(elb_tags(new.tags)))
            .set_security_groups(
                (!new.security_groups.is_empty()).then(|| new.security_groups.to_vec()),
            )
            .send()
            .await
            .api("CreateLoadBalancer")?;
        let lb = out.load_balancers().first().ok_or_else(|| {
            cloud_provider::CloudError::provider(
                "CreateLoadBalancer answered without a load balancer",
            )
        })?;
        Ok(LbInfo {
            internal: new.internal,
            network: true,
            ..LbInfo::from_sdk(lb)
        })
    }

    /// Replaces the load balancer's security groups.
    pub(crate) async fn set_load_balancer_security_groups(
        &self,
        arn: &str,
        groups: &[String],
    ) -> Result<()> {
        self.clients
            .elb
            .set_security_groups()
            .load_balancer_arn(arn)
            .set_security_groups(Some(groups.to_vec()))
            .send()
            .await
            .api("SetSecurityGroups")?;
        Ok(())
    }

    /// Sets the given load-balancer attributes where they differ.
    pub(crate) async fn sync_load_balancer_attributes(
        &self,
        arn: &str,
        wanted: &BTreeMap<String, String>,
    ) -> Result<()> {
        if wanted.is_empty() {
            return Ok(());
        }
        let current: HashMap<String, String> = self
            .clients
            .elb
            .describe_load_balancer_attributes()
            .load_balancer_arn(arn)
            .send()
            .await
            .api("DescribeLoadBalancerAttributes")?
            .attributes()
            .iter()
            .filter_map(|a| {
                Some((
                    a.key()?.to_string(),
                    a.value().unwrap_or_default().to_string(),
                ))
            })
            .collect();
        let changes: Vec<LoadBalancerAttribute> = attribute_changes(wanted, &current)
            .map(|(k, v)| LoadBalancerAttribute::builder().key(k).value(v).build())
            .collect();
        if changes.is_empty() {
            return Ok(());
        }
        self.clients
            .elb
            .modify_load_balancer_attributes()
            .load_balancer_arn(arn)
            .set_attributes(Some(changes))
            .send()
            .await
            .api("ModifyLoadBalancerAttributes")?;
        Ok(())
    }

    /// Deletes a load balancer (its listeners go with it); absent is success.
    pub(crate) async fn delete_load_balancer(&self, arn: &str) -> Result<()> {
        match self
            .clients
            .elb
            .delete_load_balancer()
            .load_balancer_arn(arn)
            .send()
            .await
            .api("DeleteLoadBalancer")
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_code("LoadBalancerNotFound") => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// The listeners of a load balancer.
    pub(crate) async fn listeners(&self, lb_arn: &str) -> Result<Vec<ListenerInfo>> {
        let mut out = Vec::new();
        for_each_page(
            |marker| {
                self.clients
                    .elb
                    .describe_listeners()
                    .load_balancer_arn(lb_arn)
                    .set_marker(marker)
                    .send()
            },
            |page| page.next_marker(),
            |page| out.extend(page.listeners().iter().map(Self::listener_info)),
        )
        .await
        .api("DescribeListeners")?;
        Ok(out)
    }

    /// A listener as the provider uses it.
    fn listener_info(l: &aws_sdk_elasticloadbalancingv2::types::Listener) -> ListenerInfo {
        let target_group_arn = l
            .default_actions()
            .iter()
            .find(|a| a.r#type() == Some(&ActionTypeEnum::Forward))
            .and_then(|a| {
                a.target_group_arn().map(str::to_string).or_else(|| {
                    a.forward_config()
                        .and_then(|f| f.target_groups().first())
                        .and_then(|t| t.target_group_arn())
                        .map(str::to_string)
                })
            });
        ListenerInfo {
            arn: l.listener_arn().unwrap_or_default().to_string(),
            port: l.port().unwrap_or_default(),
            protocol: l
                .protocol()
                .map(|p| p.as_str().to_string())
                .unwrap_or_default(),
            target_group_arn,
            certificates: l
                .certificates()
                .iter()
                .filter_map(|c| c.certificate_arn())
                .map(str::to_string)
                .collect(),
            ssl_policy: l.ssl_policy().map(str::to_string),
        }
    }

    /// Creates a listener.
    pub(crate) async fn create_listener(
        &self,
        lb_arn: &str,
        wanted: &WantedListener<'_>,
        tags: &BTreeMap<String, String>,
    ) -> Result<()> {
        self.clients
            .elb
            .create_listener()
            .load_balancer_arn(lb_arn)
            .port(wanted.port)
            .protocol(protocol_enum(wanted.protocol))
            .default_actions(wanted.forward())
            .set_certificates(wanted.certificates())
            .set_ssl_policy(wanted.ssl_policy.map(str::to_string))
            .set_tags(Some(elb_tags(tags)))
            .send()
            .await
            .api("CreateListener")?;
        Ok(())
    }

    /// Changes a listener's protocol, target group, certificate or policy.
    pub(crate) async fn modify_listener(
        &self,
        listener_arn: &str,
        wanted: &WantedListener<'_>,
    ) -> Result<()> {
        self.clients
            .elb
            .modify_listener()
            .listener_arn(listener_arn)
            .port(wanted.port)
            .protocol(protocol_enum(wanted.protocol))
            .default_actions(wanted.forward())
            .set_certificates(wanted.certificates())
            .set_ssl_policy(wanted.ssl_policy.map(str::to_string))
            .send()
            .await
            .api("ModifyListener")?;
        Ok(())
    }

    /// Deletes a listener; absent is success.
    pub(crate) async fn delete_listener(&self, listener_arn: &str) -> Result<()> {
        match self
            .clients
            .elb
            .delete_listener()
            .listener_arn(listener_arn)
            .send()
            .await
            .api("DeleteListener")
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_code("ListenerNotFound") => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    fn target_group_info(
        tg: &aws_sdk_elasticloadbalancingv2::types::TargetGroup,
    ) -> TargetGroupInfo {
        TargetGroupInfo {
            arn: tg.target_group_arn().unwrap_or_default().to_string(),
            name: tg.target_group_name().unwrap_or_default().to_string(),
            port: tg.port().unwrap_or_default(),
            protocol: tg
                .protocol()
                .map(|p| p.as_str().to_string())
                .unwrap_or_default(),
            vpc_id: tg.vpc_id().unwrap_or_default().to_string(),
            health_check: HealthCheckState {
                protocol: tg
                    .health_check_protocol()
                    .map(|p| p.as_str().to_string())
                    .unwrap_or_default(),
                port: tg.health_check_port().unwrap_or("traffic-port").to_string(),
                path: tg.health_check_path().map(str::to_string),
                interval: tg.health_check_interval_seconds().unwrap_or_default(),
                healthy_threshold: tg.healthy_threshold_count().unwrap_or_default(),
                unhealthy_threshold: tg.unhealthy_threshold_count().unwrap_or_default(),
            },
            load_balancer_arns: tg.load_balancer_arns().to_vec(),
        }
    }

    /// Every page of a DescribeTargetGroups query; none when ELBv2 answers that the target groups or the
    /// load balancer do not exist.
    async fn describe_target_groups(
        &self,
        query: impl Fn(DescribeTargetGroupsFluentBuilder) -> DescribeTargetGroupsFluentBuilder,
    ) -> Result<Vec<TargetGroupInfo>> {
        let mut out = Vec::new();
        let listed = for_each_page(
            |marker| {
                query(self.clients.elb.describe_target_groups())
                    .set_marker(marker)
                    .send()
            },
            |page| page.next_marker(),
            |page| out.extend(page.target_groups().iter().map(Self::target_group_info)),
        )
        .await
        .api("DescribeTargetGroups");
        match listed {
            Ok(()) => Ok(out),
            // AWS lists nothing for a load balancer without target groups; moto answers
            // TargetGroupNotFound.
            Err(e) if e.is_code("LoadBalancerNotFound") || e.is_code("TargetGroupNotFound") => {
                Ok(out)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The target groups attached to a load balancer.
    pub(crate) async fn load_balancer_target_groups(
        &self,
        lb_arn: &str,
    ) -> Result<Vec<TargetGroupInfo>> {
        self.describe_target_groups(|r| r.load_balancer_arn(lb_arn))
            .await
    }

    /// The target groups of a load balancer: those ELBv2 lists as attached plus any its listeners forward to
    /// (moto does not count a target group as attached after ModifyListener switched to it).
    pub(crate) async fn target_groups_of(
        &self,
        lb_arn: &str,
        listeners: &[ListenerInfo],
    ) -> Result<Vec<TargetGroupInfo>> {
        let mut groups = self.load_balancer_target_groups(lb_arn).await?;
        let missing: Vec<String> = listeners
            .iter()
            .filter_map(|l| l.target_group_arn.clone())
            .filter(|arn| !groups.iter().any(|g| &g.arn == arn))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if !missing.is_empty() {
            let found = self
                .describe_target_groups(|r| r.set_target_group_arns(Some(missing.clone())))
                .await?;
            groups.extend(found);
        }
        Ok(groups)
    }

    /// The target group named `name`, if it exists.
    pub(crate) async fn find_target_group(&self, name: &str) -> Result<Option<TargetGroupInfo>> {
        let found = self.describe_target_groups(|r| r.names(name)).await?;
        Ok(found.into_iter().find(|g| g.name == name))
    }

    /// Creates a target group of instance targets on `node_port`.
    pub(crate) async fn create_target_group(
        &self,
        name: &str,
        protocol: Protocol,
        node_port: i32,
        vpc_id: &str,
        hc: &HealthCheckState,
        tags: &BTreeMap<String, String>,
    ) -> Result<TargetGroupInfo> {
        let out = self
            .clients
            .elb
            .create_target_group()
            .name(name)
            .protocol(protocol_enum(protocol))
            .port(node_port)
            .vpc_id(vpc_id)
            .target_type(TargetTypeEnum::Instance)
            .health_check_protocol(ProtocolEnum::from(hc.protocol.as_str()))
            .health_check_port(&hc.port)
            .set_health_check_path(hc.path_to_send())
            .health_check_interval_seconds(hc.interval)
            .healthy_threshold_count(hc.healthy_threshold)
            .unhealthy_threshold_count(hc.unhealthy_threshold)
            .set_tags(Some(elb_tags(tags)))
            .send()
            .await
            .api("CreateTargetGroup")?;
        out.target_groups()
            .first()
            .map(Self::target_group_info)
            .ok_or_else(|| {
                cloud_provider::CloudError::provider(
                    "CreateTargetGroup answered without a target group",
                )
            })
    }

    /// Updates a target group's health-check port, thresholds and path (its protocol and interval never
    /// change in place: a different one makes a new target group).
    pub(crate) async fn modify_health_check(
        &self,
        tg_arn: &str,
        hc: &HealthCheckState,
    ) -> Result<()> {
        self.clients
            .elb
            .modify_target_group()
            .target_group_arn(tg_arn)
            .health_check_port(&hc.port)
            .set_health_check_path(hc.path_to_send())
            .healthy_threshold_count(hc.healthy_threshold)
            .unhealthy_threshold_count(hc.unhealthy_threshold)
            .send()
            .await
            .api("ModifyTargetGroup")?;
        Ok(())
    }

    /// Sets the given target-group attributes where they differ, skipping those the group does not list.
    pub(crate) async fn sync_target_group_attributes(
        &self,
        tg_arn: &str,
        wanted: &BTreeMap<String, String>,
    ) -> Result<()> {
        if wanted.is_empty() {
            return Ok(());
        }
        let current: HashMap<String, String> = self
            .clients
            .elb
            .describe_target_group_attributes()
            .target_group_arn(tg_arn)
            .send()
            .await
            .api("DescribeTargetGroupAttributes")?
            .attributes()
            .iter()
            .filter_map(|a| {
                Some((
                    a.key()?.to_string(),
                    a.value().unwrap_or_default().to_string(),
                ))
            })
            .collect();
        // As upstream: an attribute the target group does not list is not supported for it and is skipped.
        let supported: BTreeMap<String, String> = wanted
            .iter()
            .filter(|(k, _)| current.contains_key(*k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let changes: Vec<TargetGroupAttribute> = attribute_changes(&supported, &current)
            .map(|(k, v)| TargetGroupAttribute::builder().key(k).value(v).build())
            .collect();
        if changes.is_empty() {
            return Ok(());
        }
        self.clients
            .elb
            .modify_target_group_attributes()
            .target_group_arn(tg_arn)
            .set_attributes(Some(changes))
            .send()
            .await
            .api("ModifyTargetGroupAttributes")?;
        Ok(())
    }

    /// Deletes a target group; absent is success.
    pub(crate) async fn delete_target_group(
        &self,
        tg_arn: &str,
    ) -> std::result::Result<(), crate::error::ApiError> {
        match self
            .clients
            .elb
            .delete_target_group()
            .target_group_arn(tg_arn)
            .send()
            .await
            .api("DeleteTargetGroup")
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_code("TargetGroupNotFound") => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The registered targets of a target group: instance ID and port. Targets still draining
    /// (`Target.DeregistrationInProgress`) are on their way out and do not count, so a node that comes back
    /// meanwhile is registered again.
    pub(crate) async fn registered_targets(&self, tg_arn: &str) -> Result<BTreeSet<(String, i32)>> {
        let out = self
            .clients
            .elb
            .describe_target_health()
            .target_group_arn(tg_arn)
            .send()
            .await
            .api("DescribeTargetHealth")?;
        Ok(out
            .target_health_descriptions()
            .iter()
            .filter(|d| !is_draining(d))
            .filter_map(|d| d.target())
            .filter_map(|t| Some((t.id()?.to_string(), t.port().unwrap_or_default())))
            .collect())
    }

    /// Deregisters and then registers targets so exactly `instances` are registered on `port`, in chunks
    /// of [`TARGET_CHUNK`].
    pub(crate) async fn sync_targets(
        &self,
        tg_arn: &str,
        port: i32,
        instances: &BTreeSet<String>,
    ) -> Result<()> {
        let current = self.registered_targets(tg_arn).await?;
        let wanted: BTreeSet<(String, i32)> = instances.iter().map(|i| (i.clone(), port)).collect();
        let add: Vec<&(String, i32)> = wanted.difference(&current).collect();
        let remove: Vec<&(String, i32)> = current.difference(&wanted).collect();
        let describe = |t: &&(String, i32)| TargetDescription::builder().id(&t.0).port(t.1).build();
        // Deregistering first makes room when the target group is at its target limit.
        for chunk in remove.chunks(TARGET_CHUNK) {
            tracing::info!(
                target_group = tg_arn,
                count = chunk.len(),
                "deregistering targets"
            );
            self.clients
                .elb
                .deregister_targets()
                .target_group_arn(tg_arn)
                .set_targets(Some(chunk.iter().map(describe).collect()))
                .send()
                .await
                .api("DeregisterTargets")?;
        }
        for chunk in add.chunks(TARGET_CHUNK) {
            tracing::info!(
                target_group = tg_arn,
                count = chunk.len(),
                "registering targets"
            );
            self.clients
                .elb
                .register_targets()
                .target_group_arn(tg_arn)
                .set_targets(Some(chunk.iter().map(describe).collect()))
                .send()
                .await
                .api("RegisterTargets")?;
        }
        Ok(())
    }
}

/// Whether a target is draining: deregistered, with connections still being closed.
fn is_draining(d: &aws_sdk_elasticloadbalancingv2::types::TargetHealthDescription) -> bool {
    d.target_health().and_then(|h| h.reason())
        == Some(&aws_sdk_elasticloadbalancingv2::types::TargetHealthReasonEnum::DeregistrationInProgress)
}

/// The wanted attributes whose value differs from (or is missing in) the current ones: what a
/// Modify*Attributes call has to send. Load-balancer and target-group attributes share this rule.
/// AWS's values of the load-balancer attributes this provider sets, for an attribute a description leaves
/// out (AWS lists them all; an emulator may not): an absent attribute has its default, never a difference.
const DEFAULT_LB_ATTRIBUTES: &[(&str, &str)] = &[
    ("access_logs.s3.enabled", "false"),
    ("access_logs.s3.bucket", ""),
    ("access_logs.s3.prefix", ""),
    ("load_balancing.cross_zone.enabled", "false"),
];

fn attribute_changes<'a>(
    wanted: &'a BTreeMap<String, String>,
    current: &'a HashMap<String, String>,
) -> impl Iterator<Item = (&'a String, &'a String)> {
    wanted.iter().filter(|(k, v)| {
        let default = DEFAULT_LB_ATTRIBUTES
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, value)| *value);
        match current.get(*k) {
            Some(have) => have != *v,
            None => default != Some(v.as_str()),
        }
    })
}

#[cfg(test)]
mod tests {

    #[test]
    fn attribute_changes_are_the_differing_or_missing_wanted_values() {
        let wanted = BTreeMap::from([
            ("same".to_string(), "1".to_string()),
            ("changed".to_string(), "true".to_string()),
            ("missing".to_string(), "x".to_string()),
        ]);
        let current = HashMap::from([
            ("same".to_string(), "1".to_string()),
            ("changed".to_string(), "false".to_string()),
            ("unrelated".to_string(), "y".to_string()),
        ]);
        let changes: Vec<(&str, &str)> = attribute_changes(&wanted, &current)
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(changes, [("changed", "true"), ("missing", "x")]);
        // An attribute the description leaves out has AWS's default value.
        let wanted = BTreeMap::from([
            ("access_logs.s3.enabled".to_string(), "false".to_string()),
            (
                "load_balancing.cross_zone.enabled".to_string(),
                "true".to_string(),
            ),
        ]);
        let none = HashMap::new();
        let changes: Vec<&str> = attribute_changes(&wanted, &none)
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(changes, ["load_balancing.cross_zone.enabled"]);
    }
    use super::*;

    #[test]
    fn health_check_updates_in_place() {
        let tcp = HealthCheckState {
            protocol: "TCP".into(),
            port: "traffic-port".into(),
            path: None,
            interval: 30,
            healthy_threshold: 3,
            unhealthy_threshold: 3,
        };
        // A path reported for a TCP check is not compared.
        let reported = HealthCheckState {
            path: Some("/".into()),
            ..tcp.clone()
        };
        assert!(!reported.needs_update(&tcp));
        assert_eq!(tcp.path_to_send(), None);
        for changed in [
            HealthCheckState {
                port: "10256".into(),
                ..tcp.clone()
            },
            HealthCheckState {
                healthy_threshold: 2,
                ..tcp.clone()
            },
            HealthCheckState {
                unhealthy_threshold: 2,
                ..tcp.clone()
            },
        ] {
            assert!(tcp.needs_update(&changed), "{changed:?}");
            assert!(!tcp.needs_new_group(&changed));
        }
        let http = HealthCheckState {
            protocol: "HTTP".into(),
            path: Some("/healthz".into()),
            ..tcp.clone()
        };
        assert!(tcp.needs_new_group(&http));
        let other_path = HealthCheckState {
            path: Some("/ready".into()),
            ..http.clone()
        };
        assert!(http.needs_update(&other_path));
        assert_eq!(other_path.path_to_send().as_deref(), Some("/ready"));
    }

    #[test]
    fn draining_targets_are_not_registered() {
        use aws_sdk_elasticloadbalancingv2::types::{
            TargetHealth, TargetHealthDescription, TargetHealthReasonEnum,
        };
        let with_reason = |reason: Option<TargetHealthReasonEnum>| {
            TargetHealthDescription::builder()
                .target(TargetDescription::builder().id("i-1").port(30080).build())
                .target_health(TargetHealth::builder().set_reason(reason).build())
                .build()
        };
        assert!(is_draining(&with_reason(Some(
            TargetHealthReasonEnum::DeregistrationInProgress
        ))));
        assert!(!is_draining(&with_reason(Some(
            TargetHealthReasonEnum::InitialHealthChecking
        ))));
        assert!(!is_draining(&with_reason(None)));
    }

    fn listener(protocol: &str, tg: &str, certs: &[&str], policy: Option<&str>) -> ListenerInfo {
        ListenerInfo {
            arn: "arn:l".into(),
            port: 443,
            protocol: protocol.into(),
            target_group_arn: Some(tg.into()),
            certificates: certs.iter().map(|c| c.to_string()).collect(),
            ssl_policy: policy.map(str::to_string),
        }
    }

    #[test]
    fn listener_matching() {
        let tcp = WantedListener {
            port: 443,
            protocol: Protocol::Tcp,
            target_group_arn: "tg1",
            certificate: None,
            ssl_policy: None,
        };
        assert!(tcp.matches(&listener("TCP", "tg1", &[], None)));
        assert!(!tcp.matches(&listener("TCP", "tg2", &[], None)));
        assert!(!tcp.matches(&listener("TLS", "tg1", &["c"], None)));

        let tls = WantedListener {
            port: 443,
            protocol: Protocol::Tls,
            target_group_arn: "tg1",
            certificate: Some("c1"),
            ssl_policy: Some("p1"),
        };
        assert!(tls.matches(&listener("TLS", "tg1", &["c1"], Some("p1"))));
        assert!(!tls.matches(&listener("TLS", "tg1", &["c2"], Some("p1"))));
        assert!(!tls.matches(&listener("TLS", "tg1", &["c1"], Some("p0"))));
        assert!(!tls.matches(&listener("TCP", "tg1", &[], None)));
        // Without a policy of our own, AWS's default policy is fine.
        let tls_default = WantedListener {
            ssl_policy: None,
            ..tls
        };
        assert!(tls_default.matches(&listener(
            "TLS",
            "tg1",
            &["c1"],
            Some("ELBSecurityPolicy-2016-08")
        )));
    }
}
