//! Node security-group rules of network load balancers (unless `DisableSecurityGroupIngress`).
//!
//! A network load balancer with instance targets passes client addresses through, so each target's security
//! group must admit the clients on the node ports (the Service's source ranges, else `0.0.0.0/0`, internal
//! load balancers included), the load balancer's health checks (from the IPv4 CIDRs of the subnets it sits
//! in) and ICMP "fragmentation needed" (type 3, code 4) for path MTU discovery. As upstream, no health rules
//! are written when the client rules already admit everyone over TCP on exactly the health-check ports, and
//! then the health rules a group has are left as they are (upstream skips their update entirely: rules an
//! earlier sync or release wrote stay until the load balancer goes).
//! Rules are recognised by their description: `kubernetes.io/rule/nlb/client=<lb>` and
//! `kubernetes.io/rule/nlb/health=<lb>` belong to one load balancer; `kubernetes.io/rule/nlb/mtu` is shared
//! and removed only when no client rule with the same range is left in the group. `[Global]
//! ElbSecurityGroup` is never changed.
//!
//! The security group of an instance is the one among its groups tagged for the cluster; an instance with no
//! tagged group and exactly one group uses that one; anything else is an error, as upstream.
//!
//! Every group's changes are planned and counted against the rule limit ([`super::rule_budget`]) before
//! the first rule of any group is changed; within a group, new rules are authorized before stale ones are
//! revoked (as upstream does) when the group can hold both, else stale ones go first to make room.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use aws_sdk_ec2::types::{IpPermission, IpRange, Ipv6Range, SecurityGroup};
use cloud_provider::{CloudError, Result};
use ipnet::IpNet;

use super::elbv2::LbInfo;
use super::naming::{RULE_CLIENT, RULE_MTU, client_rule_description, health_rule_description};
use super::rule_budget::{GroupRole, IngressChange, RuleCount};
use super::spec::{LbSpec, Protocol};
use crate::cloud::{AwsCloud, filter};
use crate::ec2_instance::Ec2Instance;
use crate::error::SdkResultExt;
use crate::paginate::for_each_page;
use crate::tagging::ec2_tag_pairs;

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

    /// The plan of node group `group`, counted against the rule limit.
    pub(crate) fn counted(&self, group: &GroupInfo) -> IngressChange {
        IngressChange {
            group_id: group.id.clone(),
            role: GroupRole::Node,
            current: group.ingress,
            authorize: RuleCount::sum(self.add.iter().map(|(k, _)| RuleCount::of_cidr(&k.cidr))),
            revoke: RuleCount::sum(self.remove.iter().map(|k| RuleCount::of_cidr(&k.cidr))),
        }
    }
}

/// The changes of one load balancer's rules in every node group of the VPC, planned before any is made.
#[derive(Debug, Clone, Default)]
pub(crate) struct NodeRulesPlan {
    /// The groups to change (in the order of their IDs), each with its change counted against the rule
    /// limit.
    pub(crate) groups: Vec<(GroupPlan, IngressChange)>,
}

impl NodeRulesPlan {
    /// Whether no group changes.
    pub(crate) fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// The counted changes, for the rule-limit check.
    pub(crate) fn changes(&self) -> Vec<IngressChange> {
        self.groups.iter().map(|(_, c)| c.clone()).collect()
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

/// The client CIDRs of the node rules: the Service's source ranges, else everyone.
pub(crate) fn client_cidrs(spec: &LbSpec) -> Vec<IpNet> {
    if spec.source_ranges.is_empty() {
        vec![IpNet::V4(ipnet::Ipv4Net::default())]
    } else {
        spec.source_ranges.clone()
    }
}

/// The protocol of the client rules: `udp` when any port is UDP, else `tcp` (mixed protocols are refused).
fn client_protocol(spec: &LbSpec) -> &'static str {
    if spec
        .ports
        .iter()
        .any(|p| p.service_protocol == Protocol::Udp)
    {
        "udp"
    } else {
        "tcp"
    }
}

/// Whether health-check rules are needed: not when the client rules admit `0.0.0.0/0` over TCP on exactly
/// the health-check ports (they cover the health checks then), as upstream decides.
fn health_rules_needed(
    spec: &LbSpec,
    client_cidrs: &[IpNet],
    health_ports: &BTreeSet<i32>,
) -> bool {
    let node_ports: BTreeSet<i32> = spec.ports.iter().map(|p| p.node_port).collect();
    let everyone = client_cidrs == [IpNet::V4(ipnet::Ipv4Net::default())];
    !(everyone && client_protocol(spec) == "tcp" && *health_ports == node_ports)
}

/// The ports the load balancer's health checks reach.
fn health_ports(spec: &LbSpec) -> BTreeSet<i32> {
    spec.ports
        .iter()
        .map(|p| spec.health_check.port.resolve(p.node_port))
        .collect()
}

/// Whether the load balancer's health rules are left as they are: the client rules cover its health checks
/// (see [`health_rules_needed`]), and upstream then neither adds nor removes them.
pub(crate) fn health_rules_left_alone(spec: &LbSpec, client_cidrs: &[IpNet]) -> bool {
    !health_rules_needed(spec, client_cidrs, &health_ports(spec))
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
    let protocol = client_protocol(spec);
    for port in &spec.ports {
        for cidr in client_cidrs {
            out.insert(
                key(protocol, port.node_port, port.node_port, *cidr),
                client.clone(),
            );
        }
    }
    // Health checks are TCP connections (or HTTP(S) over TCP).
    let health_ports = health_ports(spec);
    if !health_rules_needed(spec, client_cidrs, &health_ports) {
        return with_mtu_rules(out, client_cidrs);
    }
    for port in health_ports {
        for cidr in health_cidrs {
            out.entry(key("tcp", port, port, *cidr))
                .or_insert_with(|| health.clone());
        }
    }
    with_mtu_rules(out, client_cidrs)
}

/// Adds the path-MTU rules of the IPv4 client ranges.
fn with_mtu_rules(
    mut rules: BTreeMap<RuleKey, String>,
    client_cidrs: &[IpNet],
) -> BTreeMap<RuleKey, String> {
    for cidr in client_cidrs.iter().filter(|c| matches!(c, IpNet::V4(_))) {
        rules
            .entry(key("icmp", 3, 4, *cidr))
            .or_insert_with(|| RULE_MTU.to_string());
    }
    rules
}

/// Plans one security group: add the desired rules it lacks, remove this load balancer's rules that are no
/// longer desired (its health rules only unless `keep_health`), and remove shared MTU rules whose range no
/// client rule uses any more.
pub(crate) fn plan_group(
    lb_name: &str,
    existing: &[ExistingRule],
    desired: &BTreeMap<RuleKey, String>,
    keep_health: bool,
) -> GroupPlan {
    let mut ours = vec![client_rule_description(lb_name)];
    if !keep_health {
        ours.push(health_rule_description(lb_name));
    }
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
    /// The ingress rules from CIDRs (those load-balancer rules are among).
    pub(crate) rules: Vec<ExistingRule>,
    /// Every ingress rule (groups and prefix lists included), as counted against the rule limit.
    pub(crate) ingress: RuleCount,
}

impl From<&SecurityGroup> for GroupInfo {
    fn from(g: &SecurityGroup) -> Self {
        let mut rules = Vec::new();
        for p in g.ip_permissions() {
            let protocol = p.ip_protocol().unwrap_or_default();
            let (from, to) = (p.from_port().unwrap_or(-1), p.to_port().unwrap_or(-1));
            let v4 = p
                .ip_ranges()
                .iter()
                .filter_map(|r| Some((r.cidr_ip()?.parse::<IpNet>().ok()?, r.description())));
            let v6 = p
                .ipv6_ranges()
                .iter()
                .filter_map(|r| Some((r.cidr_ipv6()?.parse::<IpNet>().ok()?, r.description())));
            for (cidr, description) in v4.chain(v6) {
                rules.push(ExistingRule {
                    key: key(protocol, from, to, cidr),
                    description: description.unwrap_or_default().to_string(),
                });
            }
        }
        GroupInfo {
            id: g.group_id().unwrap_or_default().to_string(),
            tags: ec2_tag_pairs(g.tags()),
            rules,
            ingress: RuleCount::of_permissions(g.ip_permissions()),
        }
    }
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
    /// The security groups of the VPC as EC2 describes them, by ID (every page).
    pub(crate) async fn vpc_group_descriptions(
        &self,
        vpc_id: &str,
    ) -> Result<HashMap<String, SecurityGroup>> {
        let mut out = HashMap::new();
        for_each_page(
            |token| {
                self.clients
                    .ec2
                    .describe_security_groups()
                    .filters(filter("vpc-id", [vpc_id]))
                    .set_next_token(token)
                    .send()
            },
            |page| page.next_token(),
            |page| {
                for g in page.security_groups() {
                    out.insert(g.group_id().unwrap_or_default().to_string(), g.clone());
                }
            },
        )
        .await
        .api("DescribeSecurityGroups")?;
        Ok(out)
    }

    /// The security groups of the VPC with their rules.
    pub(crate) async fn vpc_security_groups(
        &self,
        vpc_id: &str,
    ) -> Result<HashMap<String, GroupInfo>> {
        Ok(self
            .vpc_group_descriptions(vpc_id)
            .await?
            .iter()
            .map(|(id, g)| (id.clone(), GroupInfo::from(g)))
            .collect())
    }

    /// The IPv4 CIDRs of the load balancer's subnets, where its health checks come from. Every subnet must
    /// be found: rules are never computed from partial information.
    pub(crate) async fn load_balancer_subnet_cidrs(&self, lb: &LbInfo) -> Result<Vec<IpNet>> {
        if lb.subnet_ids.is_empty() {
            return Err(CloudError::provider(format!(
                "load balancer {} lists no subnets",
                lb.arn
            )));
        }
        let found = self
            .describe_subnets(vec![filter(
                "subnet-id",
                lb.subnet_ids.iter().map(String::as_str),
            )])
            .await?;
        if found.len() != lb.subnet_ids.len() {
            return Err(CloudError::provider(format!(
                "found {} of the load balancer's subnets {:?}",
                found.len(),
                lb.subnet_ids
            )));
        }
        Ok(found.iter().filter_map(|s| s.cidr).collect())
    }

    /// Plans the node security groups in `vpc_id` in line with the load balancer: with `wanted` (the
    /// Service's spec and the CIDRs its health checks come from), its rules in the groups of `targets` and
    /// none anywhere else; without, every rule of the load balancer goes. Nothing is changed.
    pub(crate) async fn plan_security_groups(
        &self,
        lb_name: &str,
        wanted: Option<(&LbSpec, &[IpNet])>,
        vpc_id: &str,
        targets: &[Arc<Ec2Instance>],
    ) -> Result<NodeRulesPlan> {
        if self.config.disable_security_group_ingress {
            return Ok(NodeRulesPlan::default());
        }
        let groups = self.vpc_security_groups(vpc_id).await?;
        let mut target_groups: BTreeSet<String> = BTreeSet::new();
        let mut desired = BTreeMap::new();
        let mut keep_health = false;
        if let Some((spec, health_cidrs)) = wanted {
            for inst in targets {
                target_groups.extend(instance_group(inst, &groups, &self.tagging)?);
            }
            let clients = client_cidrs(spec);
            desired = desired_rules(lb_name, spec, &clients, health_cidrs);
            keep_health = health_rules_left_alone(spec, &clients);
        }
        let none = BTreeMap::new();
        let mut ids: Vec<&String> = groups.keys().collect();
        ids.sort();
        let mut out = NodeRulesPlan::default();
        for id in ids {
            if self.config.elb_security_group.as_ref() == Some(id) {
                continue;
            }
            let (wanted, keep) = if target_groups.contains(id) {
                (&desired, keep_health)
            } else {
                (&none, false)
            };
            let plan = plan_group(lb_name, &groups[id].rules, wanted, keep);
            if !plan.is_empty() {
                let counted = plan.counted(&groups[id]);
                out.groups.push((plan, counted));
            }
        }
        Ok(out)
    }

    /// Checks a plan against the rule limit, then makes its changes.
    async fn apply_security_groups(&self, plan: &NodeRulesPlan) -> Result<()> {
        self.check_rule_limit(&plan.changes())?;
        for (group, counted) in &plan.groups {
            self.apply_group_plan(group, counted).await?;
        }
        Ok(())
    }

    /// Makes one group's changes: new rules before stale ones go (as upstream) when the group can hold
    /// both, else stale ones first to make room.
    pub(crate) async fn apply_group_plan(
        &self,
        plan: &GroupPlan,
        counted: &IngressChange,
    ) -> Result<()> {
        if self.authorize_first(counted) {
            self.authorize_group_rules(&counted.group_id, &plan.add)
                .await?;
            self.revoke_group_rules(&counted.group_id, &plan.remove)
                .await
        } else {
            self.revoke_group_rules(&counted.group_id, &plan.remove)
                .await?;
            self.authorize_group_rules(&counted.group_id, &plan.add)
                .await
        }
    }

    /// Plans, checks and makes the node-group changes of [`Self::plan_security_groups`].
    pub(crate) async fn sync_security_groups(
        &self,
        lb_name: &str,
        wanted: Option<(&LbSpec, &[IpNet])>,
        vpc_id: &str,
        targets: &[Arc<Ec2Instance>],
    ) -> Result<()> {
        let plan = self
            .plan_security_groups(lb_name, wanted, vpc_id, targets)
            .await?;
        self.apply_security_groups(&plan).await
    }

    /// Authorizes `add` in the group (one by one when some of them exist already); an empty description
    /// writes none.
    pub(crate) async fn authorize_group_rules(
        &self,
        group_id: &str,
        add: &[(RuleKey, String)],
    ) -> Result<()> {
        if !add.is_empty() {
            tracing::info!(
                group = group_id,
                rules = add.len(),
                "adding load-balancer rules to security group"
            );
            let perms: Vec<IpPermission> = add
                .iter()
                .map(|(k, d)| permission(k, Some(d.as_str()).filter(|d| !d.is_empty())))
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
        Ok(())
    }

    /// Revokes `remove` from the group (rules gone already are no error).
    pub(crate) async fn revoke_group_rules(
        &self,
        group_id: &str,
        remove: &[RuleKey],
    ) -> Result<()> {
        if remove.is_empty() {
            return Ok(());
        }
        tracing::info!(
            group = group_id,
            rules = remove.len(),
            "removing load-balancer rules from security group"
        );
        let perms: Vec<IpPermission> = remove.iter().map(|k| permission(k, None)).collect();
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
            Ok(_) => Ok(()),
            Err(e) if e.is_code("InvalidPermission.NotFound") => Ok(()),
            Err(e) => Err(e.into()),
        }
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
            cross_zone: false,
            access_log: Default::default(),
            target_group_attributes: Default::default(),
            eip_allocations: None,
            private_ipv4_addresses: None,
            target_node_labels: Default::default(),
            source_ranges: vec![],
            local_traffic: false,
            security_groups: vec![],
            uid: String::new(),
        }
    }

    #[test]
    fn desired_rules_cover_clients_health_and_mtu() {
        // Everyone over TCP on the health-check port: the client rule covers the health checks.
        let s = spec(&[(30080, Protocol::Tcp)], HealthCheckPort::TrafficPort);
        let rules = desired_rules("lb", &s, &[net("0.0.0.0/0")], &[net("10.0.1.0/24")]);
        let expected: BTreeMap<RuleKey, String> = [
            (
                key("tcp", 30080, 30080, net("0.0.0.0/0")),
                "kubernetes.io/rule/nlb/client=lb".to_string(),
            ),
            (
                key("icmp", 3, 4, net("0.0.0.0/0")),
                "kubernetes.io/rule/nlb/mtu".to_string(),
            ),
        ]
        .into();
        assert_eq!(rules, expected);

        // Source ranges: health checks from the load balancer's subnets.
        let rules = desired_rules(
            "lb",
            &s,
            &[net("192.168.0.0/16")],
            &[net("10.0.1.0/24"), net("10.0.2.0/24")],
        );
        assert_eq!(
            rules[&key("tcp", 30080, 30080, net("10.0.2.0/24"))],
            "kubernetes.io/rule/nlb/health=lb"
        );
        assert_eq!(rules.len(), 4);

        // A separate health-check port (externalTrafficPolicy Local), UDP traffic, IPv6 clients (no MTU rule).
        let s = spec(&[(30053, Protocol::Udp)], HealthCheckPort::Port(32000));
        let rules = desired_rules("lb", &s, &[net("2001:db8::/32")], &[net("10.0.0.0/16")]);
        assert!(rules.contains_key(&key("udp", 30053, 30053, net("2001:db8::/32"))));
        assert!(rules.contains_key(&key("tcp", 32000, 32000, net("10.0.0.0/16"))));
        assert_eq!(rules.len(), 2);

        // UDP from everyone still needs the TCP health rules.
        let s = spec(&[(30053, Protocol::Udp)], HealthCheckPort::TrafficPort);
        let rules = desired_rules("lb", &s, &[net("0.0.0.0/0")], &[net("10.0.1.0/24")]);
        assert!(rules.contains_key(&key("tcp", 30053, 30053, net("10.0.1.0/24"))));

        // A client range equal to the health range is one rule, described as a client rule.
        let s = spec(&[(30080, Protocol::Tcp)], HealthCheckPort::TrafficPort);
        let rules = desired_rules("lb", &s, &[net("10.0.0.0/16")], &[net("10.0.0.0/16")]);
        assert_eq!(rules.len(), 2);
        assert_eq!(
            rules[&key("tcp", 30080, 30080, net("10.0.0.0/16"))],
            "kubernetes.io/rule/nlb/client=lb"
        );
    }

    #[test]
    fn clients_default_to_everyone_internal_or_not() {
        let mut s = spec(&[(30080, Protocol::Tcp)], HealthCheckPort::TrafficPort);
        s.internal = true;
        assert_eq!(client_cidrs(&s), vec![net("0.0.0.0/0")]);
        s.source_ranges = vec![net("10.0.0.0/8")];
        assert_eq!(client_cidrs(&s), vec![net("10.0.0.0/8")]);
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
        // Everyone is admitted over TCP on the health-check ports: the health rules are left alone.
        assert!(health_rules_left_alone(&s, &[net("0.0.0.0/0")]));
        assert!(!health_rules_left_alone(&s, &[net("10.0.0.0/8")]));
        // A node port moved: the old client rule goes; the health rule an earlier sync wrote stays, as
        // upstream leaves it.
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
        let plan = plan_group("lb", &current, &desired, true);
        assert_eq!(
            plan.add,
            vec![(
                key("tcp", 30081, 30081, net("0.0.0.0/0")),
                "kubernetes.io/rule/nlb/client=lb".to_string()
            )]
        );
        assert_eq!(
            plan.remove,
            vec![key("tcp", 30080, 30080, net("0.0.0.0/0"))]
        );
        // When the health rules are written, a stale one goes too.
        let plan = plan_group("lb", &current, &desired, false);
        assert_eq!(
            plan.remove,
            vec![
                key("tcp", 30080, 30080, net("0.0.0.0/0")),
                key("tcp", 30080, 30080, net("10.0.0.0/16")),
            ]
        );

        // Deleting this load balancer keeps the MTU rule while another one still admits that range...
        let plan = plan_group("lb", &current, &BTreeMap::new(), false);
        assert_eq!(plan.remove.len(), 2);
        assert!(plan.add.is_empty());
        // ... and removes it with the last client rule.
        let alone: Vec<ExistingRule> = current[..4].to_vec();
        let plan = plan_group("lb", &alone, &BTreeMap::new(), false);
        assert_eq!(plan.remove.len(), 3);
        assert!(plan.remove.contains(&key("icmp", 3, 4, net("0.0.0.0/0"))));

        // Up to date: nothing to do.
        let done: Vec<ExistingRule> = desired
            .iter()
            .map(|(k, d)| existing(k.clone(), d))
            .collect();
        assert!(plan_group("lb", &done, &desired, false).is_empty());
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
            ingress: RuleCount::default(),
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
