//! Security groups of network load balancers, as upstream attaches them (cloud-provider-aws 1.37).
//!
//! Without `NLBSecurityGroupMode = Managed` a network load balancer gets no security group, and the groups an
//! existing one has are left as they are. In managed mode:
//!
//! - a new load balancer gets a group of its own, named `k8s-<namespace>-<name>-<hash>` (the namespace and
//!   name without other characters than letters and digits, eight of each; ten hex digits of the SHA-256
//!   of the `--cluster-name`, name, namespace and UID), described
//!   `[k8s] Managed SecurityGroup for LoadBalancer`, in the load balancer's VPC, tagged as the cluster's
//!   (`owned`) and with the additional-resource-tags annotation; an existing group of that name and VPC is
//!   adopted (a missing cluster tag is added, another cluster's is refused). Its inbound rules are exactly
//!   one per listener port and protocol and client range (the Service's source ranges, else everyone), and
//!   ICMP "fragmentation needed" from the IPv4 ranges; new rules are authorized before stale ones are
//!   revoked.
//! - with the security-groups annotation, the annotated groups are the load balancer's instead, and no group
//!   is managed (their rules are the owner's).
//! - a load balancer created without security groups never gets one (AWS cannot add groups to a network load
//!   balancer created without), as upstream: it is left as it is.
//! - a group no longer attached (the annotation added or removed) loses the rules of the cluster's groups
//!   that name it, and is deleted when it is the cluster's own (`owned`); a group in use is left for a later
//!   sync (upstream waits up to ten minutes in the sync).
//!
//! The nodes' rules do not name the load balancer's group: they admit the client and health-check ranges
//! as without it ([`super::security_groups`]). When the Service is deleted, its groups that are the
//! cluster's own and not annotated go after the load balancer.

use std::collections::BTreeSet;

use aws_sdk_ec2::types::SecurityGroup;
use cloud_provider::{CloudError, Result};
use ipnet::IpNet;
use k8s_openapi::api::core::v1::Service;
use sha2::{Digest, Sha256};

use super::elbv2::LbInfo;
use super::rule_budget::{GroupRole, IngressChange, RuleCount};
use super::security_groups::{GroupInfo, GroupPlan, RuleKey, client_cidrs};
use super::spec::{LbSpec, Protocol, annotated_security_groups, namespace_and_name};
use crate::cloud::AwsCloud;
use crate::config::NlbSecurityGroupMode;

/// The description of a managed group, upstream's.
pub const MANAGED_GROUP_DESCRIPTION: &str = "[k8s] Managed SecurityGroup for LoadBalancer";

/// The name of the managed group of the Service `namespace/name` with `uid` in the cluster `cluster_name`
/// (the `--cluster-name`).
pub fn managed_group_name(cluster_name: &str, namespace: &str, name: &str, uid: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .filter(char::is_ascii_alphanumeric)
            .take(8)
            .collect()
    };
    let digest = Sha256::digest(format!("{cluster_name}{name}{namespace}{uid}").as_bytes());
    let hash: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("k8s-{}-{}-{}", clean(namespace), clean(name), &hash[..10])
}

/// The inbound rules of a managed group: every listener port from every client range, and ICMP
/// "fragmentation needed" from the IPv4 ranges (path MTU discovery).
pub(crate) fn managed_group_rules(spec: &LbSpec) -> BTreeSet<RuleKey> {
    let clients = client_cidrs(spec);
    let mut rules = BTreeSet::new();
    for port in &spec.ports {
        // A TLS listener takes TCP connections (upstream writes "tls", which EC2 refuses).
        let protocol = match port.listener_protocol {
            Protocol::Udp => "udp",
            _ => "tcp",
        };
        for cidr in &clients {
            rules.insert(RuleKey {
                protocol: protocol.to_string(),
                from_port: port.port,
                to_port: port.port,
                cidr: *cidr,
            });
        }
    }
    for cidr in clients.iter().filter(|c| matches!(c, IpNet::V4(_))) {
        rules.insert(RuleKey {
            protocol: "icmp".to_string(),
            from_port: 3,
            to_port: 4,
            cidr: *cidr,
        });
    }
    rules
}

/// The changes that make a managed group's inbound rules (from address ranges) exactly `wanted`.
pub(crate) fn managed_group_plan(group: &GroupInfo, wanted: &BTreeSet<RuleKey>) -> GroupPlan {
    let have: BTreeSet<&RuleKey> = group.rules.iter().map(|r| &r.key).collect();
    GroupPlan {
        add: wanted
            .iter()
            .filter(|k| !have.contains(k))
            .map(|k| (k.clone(), String::new()))
            .collect(),
        remove: group
            .rules
            .iter()
            .filter(|r| !wanted.contains(&r.key))
            .map(|r| r.key.clone())
            .collect(),
    }
}

/// The security groups of a network load balancer this sync.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct NlbGroups {
    /// The groups it has (an existing load balancer's, or the ones to create it with).
    pub(crate) ids: Vec<String>,
    /// The managed group among them, with its inbound rules to sync.
    pub(crate) managed: Option<String>,
}

impl AwsCloud {
    /// Whether network load balancers get managed security groups.
    pub(crate) fn nlb_groups_managed(&self) -> bool {
        self.config.nlb_security_group_mode == NlbSecurityGroupMode::Managed
    }

    /// The security groups of the Service's load balancer (see the module documentation); the managed group
    /// is found or created. `existing` is the load balancer when it exists.
    pub(crate) async fn nlb_groups(
        &self,
        cluster_name: &str,
        spec: &LbSpec,
        existing: Option<&LbInfo>,
        vpc_id: &str,
    ) -> Result<NlbGroups> {
        let kept = || NlbGroups {
            ids: existing
                .map(|lb| lb.security_groups.clone())
                .unwrap_or_default(),
            managed: None,
        };
        if let NlbSecurityGroupMode::Invalid(error) = &self.config.nlb_security_group_mode {
            return Err(CloudError::provider(format!(
                "error ensuring NLB security group: error checking NLB security group mode: {error}"
            )));
        }
        if !self.nlb_groups_managed() {
            return Ok(kept());
        }
        if let Some(lb) = existing
            && lb.security_groups.is_empty()
        {
            tracing::debug!(load_balancer = %lb.arn, service = %spec.service_name(),
                "network load balancer exists without security groups; leaving them alone (AWS cannot add them)");
            return Ok(kept());
        }
        if !spec.security_groups.is_empty() {
            return Ok(NlbGroups {
                ids: spec.security_groups.clone(),
                managed: None,
            });
        }
        let name = managed_group_name(cluster_name, &spec.namespace, &spec.name, &spec.uid);
        let id = self
            .ensure_group_named(
                &name,
                MANAGED_GROUP_DESCRIPTION,
                vpc_id,
                &spec.additional_tags,
                &spec.service_name(),
            )
            .await?;
        Ok(NlbGroups {
            ids: vec![id.clone()],
            managed: Some(id),
        })
    }

    /// The change of the managed group's inbound rules, counted against the rule limit.
    pub(crate) async fn plan_managed_group(
        &self,
        group_id: &str,
        spec: &LbSpec,
    ) -> Result<(GroupPlan, IngressChange)> {
        let described = self.describe_groups(&[group_id.to_string()]).await?;
        let group = described.first().map(GroupInfo::from).ok_or_else(|| {
            CloudError::provider(format!(
                "security group {group_id} of the load balancer is gone"
            ))
        })?;
        let plan = managed_group_plan(&group, &managed_group_rules(spec));
        let counted = IngressChange {
            group_id: group.id.clone(),
            role: GroupRole::LoadBalancer,
            current: group.ingress,
            authorize: RuleCount::sum(plan.add.iter().map(|(k, _)| RuleCount::of_cidr(&k.cidr))),
            revoke: RuleCount::sum(plan.remove.iter().map(|k| RuleCount::of_cidr(&k.cidr))),
        };
        Ok((plan, counted))
    }

    /// Attaches `wanted` to the load balancer when its groups differ (never none: AWS cannot remove every
    /// group of a network load balancer that has some).
    pub(crate) async fn set_nlb_groups(&self, lb: &LbInfo, wanted: &[String]) -> Result<()> {
        let have: BTreeSet<&String> = lb.security_groups.iter().collect();
        let want: BTreeSet<&String> = wanted.iter().collect();
        if wanted.is_empty() || have == want {
            return Ok(());
        }
        tracing::info!(load_balancer = %lb.arn, groups = ?wanted, "setting the load balancer's security groups");
        self.set_load_balancer_security_groups(&lb.arn, wanted)
            .await
    }

    /// The groups `before` had that `now` lacks: the rules of the cluster's groups admitting them are
    /// revoked, and the cluster's own are deleted. While the security-groups annotation names the load
    /// balancer's groups in managed mode, the Service's managed group counts as detached as long as it
    /// exists, so one still in use when it was detached goes in a later sync (the sync fails meanwhile).
    pub(crate) async fn release_detached_groups(
        &self,
        cluster_name: &str,
        spec: &LbSpec,
        before: &[String],
        now: &[String],
        vpc_id: &str,
    ) -> Result<()> {
        let mut detached: BTreeSet<String> = before
            .iter()
            .filter(|id| !now.contains(id))
            .cloned()
            .collect();
        if self.nlb_groups_managed() && !spec.security_groups.is_empty() {
            let name = managed_group_name(cluster_name, &spec.namespace, &spec.name, &spec.uid);
            for group in self.groups_named(&name, Some(vpc_id)).await? {
                detached.extend(
                    group
                        .group_id()
                        .filter(|id| !now.iter().any(|n| n == id))
                        .map(str::to_string),
                );
            }
        }
        if detached.is_empty() {
            return Ok(());
        }
        let ids: Vec<String> = detached.into_iter().collect();
        let described = self.describe_groups(&ids).await?;
        for id in &ids {
            self.revoke_references_to(id, vpc_id).await?;
        }
        self.delete_groups(&self.owned_groups(&described, &spec.security_groups))
            .await
    }

    /// The groups of `described` that are the cluster's own (`owned`), neither configured nor `annotated`:
    /// those deleted with the load balancer.
    pub(crate) fn owned_groups(
        &self,
        described: &[SecurityGroup],
        annotated: &[String],
    ) -> BTreeSet<String> {
        described
            .iter()
            .filter(|g| {
                let tags = crate::tagging::ec2_tag_pairs(g.tags());
                self.tagging
                    .is_owned(tags.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            })
            .filter_map(|g| g.group_id())
            .filter(|id| Some(*id) != self.config.elb_security_group.as_deref())
            .filter(|id| !annotated.iter().any(|a| a == id))
            .map(str::to_string)
            .collect()
    }

    /// The groups to delete with the Service's load balancer: its attached groups and, in managed mode, the
    /// Service's managed group (also when the load balancer is gone already), those the cluster owns that
    /// the annotation does not name. Found before the load balancer is deleted.
    pub(crate) async fn nlb_groups_to_delete(
        &self,
        cluster_name: &str,
        service: &Service,
        lb: Option<&LbInfo>,
    ) -> Result<BTreeSet<String>> {
        let mut ids: BTreeSet<String> = lb
            .map(|l| l.security_groups.iter().cloned().collect())
            .unwrap_or_default();
        if self.nlb_groups_managed() {
            let (namespace, service_name) = namespace_and_name(service);
            let uid = service.metadata.uid.as_deref().unwrap_or_default();
            let name = managed_group_name(cluster_name, &namespace, &service_name, uid);
            let vpc = self.config.vpc.as_deref().or(lb.map(|l| l.vpc_id.as_str()));
            for group in self.groups_named(&name, vpc).await? {
                ids.extend(group.group_id().map(str::to_string));
            }
        }
        let ids: Vec<String> = ids.into_iter().collect();
        let described = self.describe_groups(&ids).await?;
        let (annotated, _) = annotated_security_groups(service);
        Ok(self.owned_groups(&described, &annotated))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::load_balancer::security_groups::ExistingRule;

    #[test]
    fn names_as_upstream() {
        assert_eq!(
            managed_group_name(
                "test-cluster",
                "default",
                "my-service",
                "12345678-1234-1234-1234-123456789abc"
            ),
            "k8s-default-myservic-b7cb8b02f0"
        );
        let long = managed_group_name("c", "kube-system", "a.b_c-d", "u");
        assert!(long.starts_with("k8s-kubesyst-abcd-"), "{long}");
        assert_eq!(long.len(), "k8s-kubesyst-abcd-".len() + 10);
    }

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    fn key(protocol: &str, from: i32, to: i32, cidr: &str) -> RuleKey {
        RuleKey {
            protocol: protocol.into(),
            from_port: from,
            to_port: to,
            cidr: net(cidr),
        }
    }

    #[test]
    fn managed_rules_are_exactly_the_listeners_from_the_clients() {
        let mut service = k8s_openapi::api::core::v1::Service::default();
        service.metadata.name = Some("web".into());
        service.metadata.annotations = Some(BTreeMap::from([(
            crate::load_balancer::spec::ANN_TYPE.to_string(),
            "nlb".to_string(),
        )]));
        service.spec = Some(k8s_openapi::api::core::v1::ServiceSpec {
            ports: Some(vec![
                k8s_openapi::api::core::v1::ServicePort {
                    port: 80,
                    node_port: Some(30080),
                    ..Default::default()
                },
                k8s_openapi::api::core::v1::ServicePort {
                    port: 443,
                    node_port: Some(30443),
                    ..Default::default()
                },
            ]),
            load_balancer_source_ranges: Some(vec!["10.0.0.0/8".into(), "2001:db8::/32".into()]),
            ..Default::default()
        });
        let spec = crate::load_balancer::spec::parse(&service, &Default::default()).unwrap();
        let rules = managed_group_rules(&spec);
        let want: BTreeSet<RuleKey> = [
            key("tcp", 80, 80, "10.0.0.0/8"),
            key("tcp", 80, 80, "2001:db8::/32"),
            key("tcp", 443, 443, "10.0.0.0/8"),
            key("tcp", 443, 443, "2001:db8::/32"),
            key("icmp", 3, 4, "10.0.0.0/8"),
        ]
        .into_iter()
        .collect();
        assert_eq!(rules, want);

        let group = GroupInfo {
            id: "sg-1".into(),
            tags: vec![],
            rules: vec![
                ExistingRule {
                    key: key("tcp", 80, 80, "10.0.0.0/8"),
                    description: String::new(),
                },
                ExistingRule {
                    key: key("tcp", 22, 22, "0.0.0.0/0"),
                    description: "added by hand".into(),
                },
            ],
            ingress: RuleCount::default(),
        };
        let plan = managed_group_plan(&group, &rules);
        assert_eq!(plan.add.len(), 4);
        assert_eq!(plan.remove, vec![key("tcp", 22, 22, "0.0.0.0/0")]);
    }
}
