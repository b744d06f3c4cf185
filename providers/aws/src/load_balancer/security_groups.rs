//! Node security-group rules of network load balancers (unless `DisableSecurityGroupIngress`).
//!
//! A network load balancer with instance targets passes client addresses through, so each target's security
//! group must admit the clients on the node ports, the load balancer's health checks (from the VPC's CIDRs)
//! and ICMP "fragmentation needed" (type 3, code 4) for path MTU discovery. Rules are recognised by their
//! description: `kubernetes.io/rule/nlb/client=<lb>` and `kubernetes.io/rule/nlb/health=<lb>` belong to one
//! load balancer; `kubernetes.io/rule/nlb/mtu` is shared and removed only when no client rule with the same
//! range is left in the group.
//!
//! The security group of an instance is the one among its groups tagged for the cluster; an instance with no
//! tagged group and exactly one group uses that one; anything else is an error, as upstream.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use aws_sdk_ec2::types::{IpPermission, IpRange, Ipv6Range};
use cloud_provider::{CloudError, Result};
use ipnet::IpNet;

use super::naming::{RULE_CLIENT, RULE_MTU, client_rule_description, health_rule_description};
use super::spec::{LbSpec, Protocol};
use crate::cloud::{AwsCloud, filter};
use crate::error::SdkResultExt;
use crate::instances::Ec2Instance;

/// What a rule admits (the description is not part of it: EC2 refuses two rules differing only in that).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct RuleKey {
    pub(crate) protocol: String,
    pub(crate) from_port: i32,
    pub(crate) to_port: i32,
    pub(crate) cidr: IpNet,
}

/// A rule found in a security group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ExistingRule {
    pub(crate) key: RuleKey,
    pub(crate) description: String,
}

/// The changes to one security group.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct GroupPlan {
    pub(crate) add: Vec<(RuleKey, String)>,
    pub(crate) remove: Vec<RuleKey>,
}

impl GroupPlan {
    pub(crate) fn is_empty(&self) -> bool {
        self.add.is_empty() && self.remove.is_empty()
    }
}

fn key(protocol: &str, from_port: i32, to_port: i32, cidr: IpNet) -> RuleKey {
    RuleKey {
        protocol: protocol.to_string(),
        from_port,
        to_port,
        cidr,
    }
}

/// The rules one load balancer needs in each target's security group.
pub(crate) fn desired_rules(
    lb_name: &str,
    spec: &LbSpec,
    client_cidrs: &[IpNet],
    health_cidrs: &[IpNet],
) -> BTreeMap<RuleKey, String> {
    let client = client_rule_description(lb_name);
    let health = health_rule_description(lb_name);
    let mut out = BTreeMap::new();
    for port in &spec.ports {
        let protocol = match port.service_protocol {
            Protocol::Udp => "udp",
            Protocol::Tcp | Protocol::Tls => "tcp",
        };
        for cidr in client_cidrs {
            out.insert(
                key(protocol, port.node_port, port.node_port, *cidr),
                client.clone(),
            );
        }
    }
    // Health checks are TCP connections (or HTTP(S) over TCP).
    let mut health_ports: BTreeSet<i32> = BTreeSet::new();
    for port in &spec.ports {
        health_ports.insert(spec.health_check.port.resolve(port.node_port));
    }
    for port in health_ports {
        for cidr in health_cidrs {
            out.entry(key("tcp", port, port, *cidr))
                .or_insert_with(|| health.clone());
        }
    }
    for cidr in client_cidrs.iter().filter(|c| matches!(c, IpNet::V4(_))) {
        out.entry(key("icmp", 3, 4, *cidr))
            .or_insert_with(|| RULE_MTU.to_string());
    }
    out
}

/// Plans one security group: add the desired rules it lacks, remove this load balancer's rules that are no
/// longer desired, and remove shared MTU rules whose range no client rule uses any more.
pub(crate) fn plan_group(
    lb_name: &str,
    existing: &[ExistingRule],
    desired: &BTreeMap<RuleKey, String>,
) -> GroupPlan {
    let ours = [
        client_rule_description(lb_name),
        health_rule_description(lb_name),
    ];
    let present: BTreeSet<&RuleKey> = existing.iter().map(|r| &r.key).collect();
    let mut plan = GroupPlan::default();
    for (k, description) in desired {
        if !present.contains(k) {
            plan.add.push((k.clone(), description.clone()));
        }
    }
    for rule in existing {
        if ours.contains(&rule.description) && !desired.contains_key(&rule.key) {
            plan.remove.push(rule.key.clone());
        }
    }
    // Client ranges still used after the plan, by any load balancer.
    let client_prefix = format!("{RULE_CLIENT}=");
    let mut client_ranges: BTreeSet<IpNet> = existing
        .iter()
        .filter(|r| r.description.starts_with(&client_prefix) && !plan.remove.contains(&r.key))
        .map(|r| r.key.cidr)
        .collect();
    client_ranges.extend(
        plan.add
            .iter()
            .filter(|(_, d)| d.starts_with(&client_prefix))
            .map(|(k, _)| k.cidr),
    );
    for rule in existing {
        if rule.description == RULE_MTU
            && !client_ranges.contains(&rule.key.cidr)
            && !desired.contains_key(&rule.key)
            && !plan.remove.contains(&rule.key)
        {
            plan.remove.push(rule.key.clone());
        }
    }
    plan
}

/// A security group with its ingress rules.
#[derive(Debug, Clone)]
pub(crate) struct GroupInfo {
    pub(crate) id: String,
    pub(crate) tags: Vec<(String, String)>,
    pub(crate) rules: Vec<ExistingRule>,
}

fn permission(k: &RuleKey, description: Option<&str>) -> IpPermission {
    let b = IpPermission::builder()
        .ip_protocol(&k.protocol)
        .from_port(k.from_port)
        .to_port(k.to_port);
    match k.cidr {
        IpNet::V4(_) => b
            .ip_ranges(
                IpRange::builder()
                    .cidr_ip(k.cidr.to_string())
                    .set_description(description.map(str::to_string))
                    .build(),
            )
            .build(),
        IpNet::V6(_) => b
            .ipv6_ranges(
                Ipv6Range::builder()
                    .cidr_ipv6(k.cidr.to_string())
                    .set_description(description.map(str::to_string))
                    .build(),
            )
            .build(),
    }
}

/// The security group of an instance that load-balancer rules go into.
pub(crate) fn instance_group(
    inst: &Ec2Instance,
    groups: &HashMap<String, GroupInfo>,
    tagging: &crate::tagging::ClusterTagging,
) -> Result<Option<String>> {
    let tagged: Vec<&String> = inst
        .security_groups
        .iter()
        .filter(|id| {
            groups.get(*id).is_some_and(|g| {
                tagging.has_cluster_tag(g.tags.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            })
        })
        .collect();
    match (tagged.as_slice(), inst.security_groups.as_slice()) {
        ([one], _) => Ok(Some((*one).clone())),
        ([], []) => {
            tracing::warn!(instance = %inst.id, "instance has no security group; not adding load-balancer rules");
            Ok(None)
        }
        ([], [only]) => Ok(Some(only.clone())),
        ([], all) => Err(CloudError::provider(format!(
            "multiple untagged security groups found for instance {} ({}); tag the cluster's security group with {}",
            inst.id,
            all.join(", "),
            tagging
                .cluster_tag_key()
                .unwrap_or_else(|| "the cluster tag".to_string()),
        ))),
        (many, _) => Err(CloudError::provider(format!(
            "multiple tagged security groups found for instance {} ({}); ensure only the cluster's security group is tagged",
            inst.id,
            many.iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        ))),
    }
}

impl AwsCloud {
    /// The security groups of the VPC with their rules.
    pub(crate) async fn vpc_security_groups(
        &self,
        vpc_id: &str,
    ) -> Result<HashMap<String, GroupInfo>> {
        let mut out = HashMap::new();
        let mut token = None;
        loop {
            let page = self
                .clients
                .ec2
                .describe_security_groups()
                .filters(filter("vpc-id", [vpc_id]))
                .set_next_token(token)
                .send()
                .await
                .api("DescribeSecurityGroups")?;
            for g in page.security_groups() {
                let id = g.group_id().unwrap_or_default().to_string();
                let mut rules = Vec::new();
                for p in g.ip_permissions() {
                    let protocol = p.ip_protocol().unwrap_or_default().to_string();
                    let from = p.from_port().unwrap_or(-1);
                    let to = p.to_port().unwrap_or(-1);
                    let v4 = p.ip_ranges().iter().filter_map(|r| {
                        Some((r.cidr_ip()?.parse::<IpNet>().ok()?, r.description()))
                    });
                    let v6 = p.ipv6_ranges().iter().filter_map(|r| {
                        Some((r.cidr_ipv6()?.parse::<IpNet>().ok()?, r.description()))
                    });
                    for (cidr, description) in v4.chain(v6) {
                        rules.push(ExistingRule {
                            key: key(&protocol, from, to, cidr),
                            description: description.unwrap_or_default().to_string(),
                        });
                    }
                }
                let tags = g
                    .tags()
                    .iter()
                    .map(|t| {
                        (
                            t.key().unwrap_or_default().to_string(),
                            t.value().unwrap_or_default().to_string(),
                        )
                    })
                    .collect();
                out.insert(id.clone(), GroupInfo { id, tags, rules });
            }
            token = page
                .next_token()
                .filter(|t| !t.is_empty())
                .map(str::to_string);
            if token.is_none() {
                return Ok(out);
            }
        }
    }

    /// The VPC's CIDR blocks (IPv4 and IPv6).
    pub(crate) async fn vpc_cidrs(&self, vpc_id: &str) -> Result<Vec<IpNet>> {
        let out = self
            .clients
            .ec2
            .describe_vpcs()
            .vpc_ids(vpc_id)
            .send()
            .await
            .api("DescribeVpcs")?;
        let mut cidrs = Vec::new();
        for vpc in out.vpcs() {
            let v4 = vpc
                .cidr_block_association_set()
                .iter()
                .filter(|a| {
                    a.cidr_block_state()
                        .and_then(|s| s.state())
                        .is_none_or(|s| s.as_str() == "associated")
                })
                .filter_map(|a| a.cidr_block());
            let v6 = vpc
                .ipv6_cidr_block_association_set()
                .iter()
                .filter(|a| {
                    a.ipv6_cidr_block_state()
                        .and_then(|s| s.state())
                        .is_none_or(|s| s.as_str() == "associated")
                })
                .filter_map(|a| a.ipv6_cidr_block());
            for c in v4.chain(v6).chain(vpc.cidr_block()) {
                if let Ok(net) = c.parse::<IpNet>()
                    && !cidrs.contains(&net)
                {
                    cidrs.push(net);
                }
            }
        }
        Ok(cidrs)
    }

    /// Brings the node security groups in `vpc_id` in line with the load balancer: its rules in the groups of
    /// `targets` (`spec` given), and none anywhere else. With `spec = None` every rule of the load balancer
    /// goes.
    pub(crate) async fn sync_security_groups(
        &self,
        lb_name: &str,
        spec: Option<&LbSpec>,
        vpc_id: &str,
        targets: &[Arc<Ec2Instance>],
    ) -> Result<()> {
        if self.config.disable_security_group_ingress {
            return Ok(());
        }
        let groups = self.vpc_security_groups(vpc_id).await?;
        let mut target_groups: BTreeSet<String> = BTreeSet::new();
        if spec.is_some() {
            for inst in targets {
                if let Some(id) = instance_group(inst, &groups, &self.tagging)? {
                    target_groups.insert(id);
                }
            }
        }
        let desired = match spec {
            Some(spec) => {
                let vpc_cidrs = self.vpc_cidrs(vpc_id).await?;
                let client_cidrs = if !spec.source_ranges.is_empty() {
                    spec.source_ranges.clone()
                } else if spec.internal {
                    vpc_cidrs.clone()
                } else {
                    vec![
                        "0.0.0.0/0"
                            .parse()
                            .map_err(|e| CloudError::provider_with("CIDR", e))?,
                    ]
                };
                desired_rules(lb_name, spec, &client_cidrs, &vpc_cidrs)
            }
            None => BTreeMap::new(),
        };
        let none = BTreeMap::new();
        let mut ids: Vec<&String> = groups.keys().collect();
        ids.sort();
        for id in ids {
            let group = &groups[id];
            let wanted = if target_groups.contains(id) {
                &desired
            } else {
                &none
            };
            let plan = plan_group(lb_name, &group.rules, wanted);
            if plan.is_empty() {
                continue;
            }
            self.apply_group_plan(&group.id, &plan).await?;
        }
        Ok(())
    }

    async fn apply_group_plan(&self, group_id: &str, plan: &GroupPlan) -> Result<()> {
        if !plan.add.is_empty() {
            tracing::info!(
                group = group_id,
                rules = plan.add.len(),
                "adding load-balancer rules to security group"
            );
            let perms: Vec<IpPermission> = plan
                .add
                .iter()
                .map(|(k, d)| permission(k, Some(d)))
                .collect();
            let result = self
                .clients
                .ec2
                .authorize_security_group_ingress()
                .group_id(group_id)
                .set_ip_permissions(Some(perms.clone()))
                .send()
                .await
                .api("AuthorizeSecurityGroupIngress");
            match result {
                Ok(_) => {}
                // Another load balancer (or a concurrent sync) added one of them: add the rest one by one.
                Err(e) if e.is_code("InvalidPermission.Duplicate") => {
                    for perm in perms {
                        let one = self
                            .clients
                            .ec2
                            .authorize_security_group_ingress()
                            .group_id(group_id)
                            .ip_permissions(perm)
                            .send()
                            .await
                            .api("AuthorizeSecurityGroupIngress");
                        match one {
                            Ok(_) => {}
                            Err(e) if e.is_code("InvalidPermission.Duplicate") => {}
                            Err(e) => return Err(e.into()),
                        }
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        if !plan.remove.is_empty() {
            tracing::info!(
                group = group_id,
                rules = plan.remove.len(),
                "removing load-balancer rules from security group"
            );
            let perms: Vec<IpPermission> =
                plan.remove.iter().map(|k| permission(k, None)).collect();
            let result = self
                .clients
                .ec2
                .revoke_security_group_ingress()
                .group_id(group_id)
                .set_ip_permissions(Some(perms))
                .send()
                .await
                .api("RevokeSecurityGroupIngress");
            match result {
                Ok(_) => {}
                Err(e) if e.is_code("InvalidPermission.NotFound") => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load_balancer::spec::{
        HealthCheck, HealthCheckPort, HealthCheckProtocol, PortMapping,
    };
    use crate::tagging::ClusterTagging;

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    fn spec(ports: &[(i32, Protocol)], hc_port: HealthCheckPort) -> LbSpec {
        LbSpec {
            namespace: "ns".into(),
            name: "svc".into(),
            internal: false,
            subnets: None,
            ports: ports
                .iter()
                .map(|(np, proto)| PortMapping {
                    name: String::new(),
                    port: 80,
                    node_port: *np,
                    service_protocol: *proto,
                    listener_protocol: *proto,
                    target_protocol: *proto,
                    certificate: None,
                    ssl_policy: None,
                })
                .collect(),
            health_check: HealthCheck {
                protocol: HealthCheckProtocol::Tcp,
                port: hc_port,
                path: None,
                interval: 30,
                timeout: 10,
                healthy_threshold: 3,
                unhealthy_threshold: 3,
            },
            additional_tags: Default::default(),
            cross_zone: None,
            access_log: None,
            target_group_attributes: Default::default(),
            eip_allocations: None,
            private_ipv4_addresses: None,
            target_node_labels: Default::default(),
            security_groups: None,
            source_ranges: vec![],
            local_traffic: false,
        }
    }

    #[test]
    fn desired_rules_cover_clients_health_and_mtu() {
        let s = spec(&[(30080, Protocol::Tcp)], HealthCheckPort::TrafficPort);
        let rules = desired_rules("lb", &s, &[net("0.0.0.0/0")], &[net("10.0.0.0/16")]);
        let expected: BTreeMap<RuleKey, String> = [
            (
                key("tcp", 30080, 30080, net("0.0.0.0/0")),
                "kubernetes.io/rule/nlb/client=lb".to_string(),
            ),
            (
                key("tcp", 30080, 30080, net("10.0.0.0/16")),
                "kubernetes.io/rule/nlb/health=lb".to_string(),
            ),
            (
                key("icmp", 3, 4, net("0.0.0.0/0")),
                "kubernetes.io/rule/nlb/mtu".to_string(),
            ),
        ]
        .into();
        assert_eq!(rules, expected);

        // A separate health-check port (externalTrafficPolicy Local), UDP traffic, IPv6 clients (no MTU rule).
        let s = spec(&[(30053, Protocol::Udp)], HealthCheckPort::Port(32000));
        let rules = desired_rules("lb", &s, &[net("2001:db8::/32")], &[net("10.0.0.0/16")]);
        assert!(rules.contains_key(&key("udp", 30053, 30053, net("2001:db8::/32"))));
        assert!(rules.contains_key(&key("tcp", 32000, 32000, net("10.0.0.0/16"))));
        assert_eq!(rules.len(), 2);

        // A client range equal to the health range is one rule, described as a client rule.
        let s = spec(&[(30080, Protocol::Tcp)], HealthCheckPort::TrafficPort);
        let rules = desired_rules("lb", &s, &[net("10.0.0.0/16")], &[net("10.0.0.0/16")]);
        assert_eq!(rules.len(), 2);
        assert_eq!(
            rules[&key("tcp", 30080, 30080, net("10.0.0.0/16"))],
            "kubernetes.io/rule/nlb/client=lb"
        );
    }

    fn existing(k: RuleKey, d: &str) -> ExistingRule {
        ExistingRule {
            key: k,
            description: d.into(),
        }
    }

    #[test]
    fn plans_add_remove_and_shared_mtu() {
        let s = spec(&[(30081, Protocol::Tcp)], HealthCheckPort::TrafficPort);
        let desired = desired_rules("lb", &s, &[net("0.0.0.0/0")], &[net("10.0.0.0/16")]);
        let current = vec![
            // The old node port of this load balancer.
            existing(
                key("tcp", 30080, 30080, net("0.0.0.0/0")),
                "kubernetes.io/rule/nlb/client=lb",
            ),
            existing(
                key("tcp", 30080, 30080, net("10.0.0.0/16")),
                "kubernetes.io/rule/nlb/health=lb",
            ),
            existing(
                key("icmp", 3, 4, net("0.0.0.0/0")),
                "kubernetes.io/rule/nlb/mtu",
            ),
            // Someone else's rules stay.
            existing(key("tcp", 22, 22, net("0.0.0.0/0")), "ssh"),
            existing(
                key("tcp", 30090, 30090, net("0.0.0.0/0")),
                "kubernetes.io/rule/nlb/client=other",
            ),
        ];
        let plan = plan_group("lb", &current, &desired);
        assert_eq!(
            plan.add,
            vec![
                (
                    key("tcp", 30081, 30081, net("0.0.0.0/0")),
                    "kubernetes.io/rule/nlb/client=lb".to_string()
                ),
                (
                    key("tcp", 30081, 30081, net("10.0.0.0/16")),
                    "kubernetes.io/rule/nlb/health=lb".to_string()
                ),
            ]
        );
        assert_eq!(
            plan.remove,
            vec![
                key("tcp", 30080, 30080, net("0.0.0.0/0")),
                key("tcp", 30080, 30080, net("10.0.0.0/16")),
            ]
        );

        // Deleting this load balancer keeps the MTU rule while another one still admits that range...
        let plan = plan_group("lb", &current, &BTreeMap::new());
        assert_eq!(plan.remove.len(), 2);
        assert!(plan.add.is_empty());
        // ... and removes it with the last client rule.
        let alone: Vec<ExistingRule> = current[..4].to_vec();
        let plan = plan_group("lb", &alone, &BTreeMap::new());
        assert_eq!(plan.remove.len(), 3);
        assert!(plan.remove.contains(&key("icmp", 3, 4, net("0.0.0.0/0"))));

        // Up to date: nothing to do.
        let done: Vec<ExistingRule> = desired
            .iter()
            .map(|(k, d)| existing(k.clone(), d))
            .collect();
        assert!(plan_group("lb", &done, &desired).is_empty());
    }

    #[test]
    fn instance_group_choice() {
        let tagging = ClusterTagging::new(Some("c1".into()), None);
        let group = |id: &str, tagged: bool| GroupInfo {
            id: id.into(),
            tags: if tagged {
                vec![("kubernetes.io/cluster/c1".into(), "owned".into())]
            } else {
                vec![]
            },
            rules: vec![],
        };
        let groups: HashMap<String, GroupInfo> = [
            ("sg-a".to_string(), group("sg-a", true)),
            ("sg-b".to_string(), group("sg-b", false)),
            ("sg-c".to_string(), group("sg-c", false)),
            ("sg-d".to_string(), group("sg-d", true)),
        ]
        .into();
        let inst = |sgs: &[&str]| Ec2Instance {
            id: "i-1".into(),
            security_groups: sgs.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        assert_eq!(
            instance_group(&inst(&["sg-b", "sg-a"]), &groups, &tagging).unwrap(),
            Some("sg-a".into())
        );
        assert_eq!(
            instance_group(&inst(&["sg-b"]), &groups, &tagging).unwrap(),
            Some("sg-b".into())
        );
        assert_eq!(instance_group(&inst(&[]), &groups, &tagging).unwrap(), None);
        let err = instance_group(&inst(&["sg-b", "sg-c"]), &groups, &tagging).unwrap_err();
        assert!(
            err.to_string()
                .contains("multiple untagged security groups"),
            "{err}"
        );
        let err = instance_group(&inst(&["sg-a", "sg-d"]), &groups, &tagging).unwrap_err();
        assert!(
            err.to_string().contains("multiple tagged security groups"),
            "{err}"
        );
    }
}
