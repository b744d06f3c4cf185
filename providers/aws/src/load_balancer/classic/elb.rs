//! Elastic Load Balancing (classic) calls: load balancers, listeners, policies, health checks, attributes,
//! instances and tags.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_elasticloadbalancing::types::{
    AccessLog, ConnectionDraining, ConnectionSettings, CrossZoneLoadBalancing, HealthCheck,
    Instance, Listener, LoadBalancerAttributes, LoadBalancerDescription, PolicyAttribute, Tag,
};
use cloud_provider::{CloudError, Result};

use super::spec::{ClassicAttributes, ClassicHealthCheck, ClassicListener};
use crate::cloud::AwsCloud;
use crate::error::SdkResultExt;

/// A classic load balancer as found in ELB.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct ClassicLb {
    pub(crate) name: String,
    pub(crate) dns_name: String,
    pub(crate) internal: bool,
    pub(crate) vpc_id: String,
    pub(crate) subnets: Vec<String>,
    pub(crate) security_groups: Vec<String>,
    /// Each listener with the names of its policies.
    pub(crate) listeners: Vec<(ClassicListener, Vec<String>)>,
    /// Policies by backend (instance) port; AWS lists only ports with policies.
    pub(crate) backend_policies: BTreeMap<i32, Vec<String>>,
    /// Names of the load balancer's other policies (proxy protocol, SSL negotiation, ...).
    pub(crate) other_policies: Vec<String>,
    pub(crate) health_check: Option<ClassicHealthCheck>,
    pub(crate) instances: BTreeSet<String>,
}

impl From<&LoadBalancerDescription> for ClassicLb {
    fn from(d: &LoadBalancerDescription) -> Self {
        let listeners = d
            .listener_descriptions()
            .iter()
            .filter_map(|ld| {
                let l = ld.listener()?;
                Some((
                    ClassicListener {
                        load_balancer_port: l.load_balancer_port(),
                        protocol: l.protocol().to_string(),
                        instance_port: l.instance_port(),
                        instance_protocol: l.instance_protocol().unwrap_or_default().to_string(),
                        certificate: l.ssl_certificate_id().map(str::to_string),
                    },
                    ld.policy_names().to_vec(),
                ))
            })
            .collect();
        ClassicLb {
            name: d.load_balancer_name().unwrap_or_default().to_string(),
            dns_name: d.dns_name().unwrap_or_default().to_string(),
            internal: d.scheme() == Some("internal"),
            vpc_id: d.vpc_id().unwrap_or_default().to_string(),
            subnets: d.subnets().to_vec(),
            security_groups: d.security_groups().to_vec(),
            listeners,
            backend_policies: d
                .backend_server_descriptions()
                .iter()
                .filter_map(|b| Some((b.instance_port()?, b.policy_names().to_vec())))
                .collect(),
            other_policies: d
                .policies()
                .map(|p| p.other_policies().to_vec())
                .unwrap_or_default(),
            health_check: d.health_check().map(|h| ClassicHealthCheck {
                target: h.target().to_string(),
                healthy_threshold: h.healthy_threshold(),
                unhealthy_threshold: h.unhealthy_threshold(),
                interval: h.interval(),
                timeout: h.timeout(),
            }),
            instances: d
                .instances()
                .iter()
                .filter_map(|i| i.instance_id())
                .map(str::to_string)
                .collect(),
        }
    }
}

fn sdk_listener(l: &ClassicListener) -> Result<Listener> {
    Listener::builder()
        .load_balancer_port(l.load_balancer_port)
        .protocol(&l.protocol)
        .instance_port(l.instance_port)
        .instance_protocol(&l.instance_protocol)
        .set_ssl_certificate_id(l.certificate.clone())
        .build()
        .map_err(|e| CloudError::provider_with("building an ELB listener", e))
}

fn sdk_tags(tags: &BTreeMap<String, String>) -> Result<Vec<Tag>> {
    tags.iter()
        .map(|(k, v)| {
            Tag::builder()
                .key(k)
                .value(v)
                .build()
                .map_err(|e| CloudError::provider_with("building an ELB tag", e))
        })
        .collect()
}

fn instances(ids: &[&String]) -> Vec<Instance> {
    ids.iter()
        .map(|id| Instance::builder().instance_id(*id).build())
        .collect()
}

/// The attribute values upstream sends, as found on a load balancer (fields upstream leaves unset are
/// `None` in `wanted` and not compared).
pub(crate) fn attributes_match(
    wanted: &ClassicAttributes,
    current: &LoadBalancerAttributes,
) -> bool {
    let log = current.access_log();
    let draining = current.connection_draining();
    let optional =
        |want: &Option<String>, have: Option<&str>| want.as_deref().is_none_or(|w| Some(w) == have);
    log.is_some_and(|l| {
        l.enabled() == wanted.access_log_enabled
            && wanted
                .access_log_emit_interval
                .is_none_or(|i| l.emit_interval() == Some(i))
            && optional(&wanted.access_log_bucket, l.s3_bucket_name())
            && optional(&wanted.access_log_prefix, l.s3_bucket_prefix())
    }) && draining.is_some_and(|d| {
        d.enabled() == wanted.connection_draining_enabled
            && wanted
                .connection_draining_timeout
                .is_none_or(|t| d.timeout() == Some(t))
    }) && current
        .connection_settings()
        .is_some_and(|c| c.idle_timeout() == wanted.idle_timeout)
        && current
            .cross_zone_load_balancing()
            .is_some_and(|c| c.enabled() == wanted.cross_zone)
}

fn sdk_attributes(wanted: &ClassicAttributes) -> Result<LoadBalancerAttributes> {
    Ok(LoadBalancerAttributes::builder()
        .access_log(
            AccessLog::builder()
                .enabled(wanted.access_log_enabled)
                .set_emit_interval(wanted.access_log_emit_interval)
                .set_s3_bucket_name(wanted.access_log_bucket.clone())
                .set_s3_bucket_prefix(wanted.access_log_prefix.clone())
                .build(),
        )
        .connection_draining(
            ConnectionDraining::builder()
                .enabled(wanted.connection_draining_enabled)
                .set_timeout(wanted.connection_draining_timeout)
                .build(),
        )
        .connection_settings(
            ConnectionSettings::builder()
                .idle_timeout(wanted.idle_timeout)
                .build()
                .map_err(|e| CloudError::provider_with("building ELB connection settings", e))?,
        )
        .cross_zone_load_balancing(
            CrossZoneLoadBalancing::builder()
                .enabled(wanted.cross_zone)
                .build(),
        )
        .build())
}

/// What a new classic load balancer looks like.
pub(crate) struct NewClassicLb<'a> {
    pub(crate) name: &'a str,
    pub(crate) listeners: &'a [ClassicListener],
    pub(crate) internal: bool,
    pub(crate) subnets: Vec<String>,
    pub(crate) security_groups: Vec<String>,
    pub(crate) tags: &'a BTreeMap<String, String>,
}

impl AwsCloud {
    /// The classic load balancer named `name`, if it exists.
    pub(crate) async fn find_classic(&self, name: &str) -> Result<Option<ClassicLb>> {
        match self
            .clients
            .elb_classic
            .describe_load_balancers()
            .load_balancer_names(name)
            .send()
            .await
            .api("DescribeLoadBalancers")
        {
            Ok(out) => Ok(out.load_balancer_descriptions().last().map(ClassicLb::from)),
            Err(e) if e.is_code("LoadBalancerNotFound") => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The tags of a classic load balancer.
    pub(crate) async fn classic_tags(&self, name: &str) -> Result<BTreeMap<String, String>> {
        let out = self
            .clients
            .elb_classic
            .describe_tags()
            .load_balancer_names(name)
            .send()
            .await
            .api("DescribeTags")?;
        Ok(out
            .tag_descriptions()
            .iter()
            .flat_map(|d| d.tags())
            .map(|t| {
                (
                    t.key().to_string(),
                    t.value().unwrap_or_default().to_string(),
                )
            })
            .collect())
    }

    /// Creates a classic load balancer and answers its DNS name.
    pub(crate) async fn create_classic(&self, new: NewClassicLb<'_>) -> Result<String> {
        let listeners = new
            .listeners
            .iter()
            .map(sdk_listener)
            .collect::<Result<Vec<_>>>()?;
        let out = self
            .clients
            .elb_classic
            .create_load_balancer()
            .load_balancer_name(new.name)
            .set_listeners(Some(listeners))
            .set_scheme(new.internal.then(|| "internal".to_string()))
            .set_subnets(Some(new.subnets))
            .set_security_groups(Some(new.security_groups))
            .set_tags(Some(sdk_tags(new.tags)?))
            .send()
            .await
            .api("CreateLoadBalancer")?;
        Ok(out.dns_name().unwrap_or_default().to_string())
    }

    /// Attaches the load balancer to `subnets`.
    pub(crate) async fn attach_classic_subnets(
        &self,
        name: &str,
        subnets: Vec<String>,
    ) -> Result<()> {
        self.clients
            .elb_classic
            .attach_load_balancer_to_subnets()
            .load_balancer_name(name)
            .set_subnets(Some(subnets))
            .send()
            .await
            .api("AttachLoadBalancerToSubnets")?;
        Ok(())
    }

    /// Detaches the load balancer from `subnets`.
    pub(crate) async fn detach_classic_subnets(
        &self,
        name: &str,
        subnets: Vec<String>,
    ) -> Result<()> {
        self.clients
            .elb_classic
            .detach_load_balancer_from_subnets()
            .load_balancer_name(name)
            .set_subnets(Some(subnets))
            .send()
            .await
            .api("DetachLoadBalancerFromSubnets")?;
        Ok(())
    }

    /// Replaces the load balancer's security groups.
    pub(crate) async fn apply_classic_security_groups(
        &self,
        name: &str,
        groups: Vec<String>,
    ) -> Result<()> {
        self.clients
            .elb_classic
            .apply_security_groups_to_load_balancer()
            .load_balancer_name(name)
            .set_security_groups(Some(groups))
            .send()
            .await
            .api("ApplySecurityGroupsToLoadBalancer")?;
        Ok(())
    }

    /// Deletes the listeners on `ports`.
    pub(crate) async fn delete_classic_listeners(&self, name: &str, ports: Vec<i32>) -> Result<()> {
        self.clients
            .elb_classic
            .delete_load_balancer_listeners()
            .load_balancer_name(name)
            .set_load_balancer_ports(Some(ports))
            .send()
            .await
            .api("DeleteLoadBalancerListeners")?;
        Ok(())
    }

    /// Creates listeners.
    pub(crate) async fn create_classic_listeners(
        &self,
        name: &str,
        listeners: &[&ClassicListener],
    ) -> Result<()> {
        let listeners = listeners
            .iter()
            .map(|l| sdk_listener(l))
            .collect::<Result<Vec<_>>>()?;
        self.clients
            .elb_classic
            .create_load_balancer_listeners()
            .load_balancer_name(name)
            .set_listeners(Some(listeners))
            .send()
            .await
            .api("CreateLoadBalancerListeners")?;
        Ok(())
    }

    /// Creates a load-balancer policy of `policy_type` with `attributes`.
    pub(crate) async fn create_classic_policy(
        &self,
        name: &str,
        policy: &str,
        policy_type: &str,
        attributes: &[(&str, &str)],
    ) -> Result<()> {
        let attributes = attributes
            .iter()
            .map(|(k, v)| {
                PolicyAttribute::builder()
                    .attribute_name(*k)
                    .attribute_value(*v)
                    .build()
            })
            .collect();
        self.clients
            .elb_classic
            .create_load_balancer_policy()
            .load_balancer_name(name)
            .policy_name(policy)
            .policy_type_name(policy_type)
            .set_policy_attributes(Some(attributes))
            .send()
            .await
            .api("CreateLoadBalancerPolicy")?;
        Ok(())
    }

    /// Sets the policies of a backend (instance) port.
    pub(crate) async fn set_classic_backend_policies(
        &self,
        name: &str,
        instance_port: i32,
        policies: Vec<String>,
    ) -> Result<()> {
        self.clients
            .elb_classic
            .set_load_balancer_policies_for_backend_server()
            .load_balancer_name(name)
            .instance_port(instance_port)
            .set_policy_names(Some(policies))
            .send()
            .await
            .api("SetLoadBalancerPoliciesForBackendServer")?;
        Ok(())
    }

    /// Sets the policies of the listener on `port`.
    pub(crate) async fn set_classic_listener_policies(
        &self,
        name: &str,
        port: i32,
        policies: Vec<String>,
    ) -> Result<()> {
        self.clients
            .elb_classic
            .set_load_balancer_policies_of_listener()
            .load_balancer_name(name)
            .load_balancer_port(port)
            .set_policy_names(Some(policies))
            .send()
            .await
            .api("SetLoadBalancerPoliciesOfListener")?;
        Ok(())
    }

    /// Sets the health check.
    pub(crate) async fn configure_classic_health_check(
        &self,
        name: &str,
        check: &ClassicHealthCheck,
    ) -> Result<()> {
        let check = HealthCheck::builder()
            .target(&check.target)
            .healthy_threshold(check.healthy_threshold)
            .unhealthy_threshold(check.unhealthy_threshold)
            .interval(check.interval)
            .timeout(check.timeout)
            .build()
            .map_err(|e| CloudError::provider_with("building an ELB health check", e))?;
        self.clients
            .elb_classic
            .configure_health_check()
            .load_balancer_name(name)
            .health_check(check)
            .send()
            .await
            .api("ConfigureHealthCheck")?;
        Ok(())
    }

    /// Sets the attributes upstream manages where they differ from the load balancer's.
    pub(crate) async fn sync_classic_attributes(
        &self,
        name: &str,
        wanted: &ClassicAttributes,
    ) -> Result<()> {
        let current = self
            .clients
            .elb_classic
            .describe_load_balancer_attributes()
            .load_balancer_name(name)
            .send()
            .await
            .api("DescribeLoadBalancerAttributes")?;
        if current
            .load_balancer_attributes()
            .is_some_and(|c| attributes_match(wanted, c))
        {
            return Ok(());
        }
        tracing::info!(load_balancer = name, "updating load-balancer attributes");
        self.clients
            .elb_classic
            .modify_load_balancer_attributes()
            .load_balancer_name(name)
            .load_balancer_attributes(sdk_attributes(wanted)?)
            .send()
            .await
            .api("ModifyLoadBalancerAttributes")?;
        Ok(())
    }

    /// Adds (or overwrites) tags.
    pub(crate) async fn add_classic_tags(
        &self,
        name: &str,
        tags: &BTreeMap<String, String>,
    ) -> Result<()> {
        self.clients
            .elb_classic
            .add_tags()
            .load_balancer_names(name)
            .set_tags(Some(sdk_tags(tags)?))
            .send()
            .await
            .api("AddTags")?;
        Ok(())
    }

    /// Registers instances.
    pub(crate) async fn register_classic_instances(
        &self,
        name: &str,
        ids: &[&String],
    ) -> Result<()> {
        self.clients
            .elb_classic
            .register_instances_with_load_balancer()
            .load_balancer_name(name)
            .set_instances(Some(instances(ids)))
            .send()
            .await
            .api("RegisterInstancesWithLoadBalancer")?;
        Ok(())
    }

    /// Deregisters instances.
    pub(crate) async fn deregister_classic_instances(
        &self,
        name: &str,
        ids: &[&String],
    ) -> Result<()> {
        self.clients
            .elb_classic
            .deregister_instances_from_load_balancer()
            .load_balancer_name(name)
            .set_instances(Some(instances(ids)))
            .send()
            .await
            .api("DeregisterInstancesFromLoadBalancer")?;
        Ok(())
    }

    /// Whether the load balancer has a policy named `policy`.
    pub(crate) async fn classic_policy_exists(&self, name: &str, policy: &str) -> Result<bool> {
        match self
            .clients
            .elb_classic
            .describe_load_balancer_policies()
            .load_balancer_name(name)
            .policy_names(policy)
            .send()
            .await
            .api("DescribeLoadBalancerPolicies")
        {
            Ok(out) => Ok(!out.policy_descriptions().is_empty()),
            Err(e) if e.is_code("PolicyNotFound") => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes a classic load balancer; absent is success.
    pub(crate) async fn delete_classic(&self, name: &str) -> Result<()> {
        self.clients
            .elb_classic
            .delete_load_balancer()
            .load_balancer_name(name)
            .send()
            .await
            .api("DeleteLoadBalancer")?;
        Ok(())
    }
}
