//! Security groups of classic load balancers, with upstream's identity rules.
//!
//! - The load balancer's own group, `k8s-elb-<lb name>` in the VPC (found by name, created with upstream's
//!   description and the cluster's `owned` tag), unless the security-groups annotation or `[Global]
//!   ElbSecurityGroup` names the groups to use; extra-security-groups are added either way.
//! - Its ingress: TCP on every Service port and ICMP "fragmentation needed" (type 3, code 4) from the
//!   source ranges, and nothing else.
//! - Each target's node security group admits all traffic from the load balancer's group (one rule,
//!   protocol `-1`, source the group), unless `DisableSecurityGroupIngress`.
//!
//! Changes are planned as [`PieceChanges`] and counted against the rule limit ([`crate::load_balancer::rule_budget`])
//! before any rule of any group is changed; within a group, new rules are authorized before stale ones
//! are revoked (as upstream does) when the group can hold both, else stale ones go first to make room.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_ec2::types::{
    IpPermission, IpRange, Ipv6Range, PrefixListId, ResourceType, SecurityGroup, Tag,
    TagSpecification, UserIdGroupPair,
};
use cloud_provider::{CloudError, Result};
use ipnet::IpNet;

use super::spec::ClassicSpec;

use crate::cloud::{AwsCloud, filter};
use crate::ec2_instance::Ec2Instance;
use crate::error::SdkResultExt;
use crate::load_balancer::rule_budget::{GroupRole, IngressChange, RuleCount};
use crate::load_balancer::security_groups::{GroupInfo, instance_group};

/// The name of a load balancer's own security group.
pub fn elb_group_name(lb_name: &str) -> String {
    format!("k8s-elb-{lb_name}")
}

/// The description of a load balancer's own security group.
pub fn elb_group_description(lb_name: &str, service_name: &str) -> String {
    format!("Security group for Kubernetes ELB {lb_name} ({service_name})")
}

/// Where a piece of an ingress rule admits traffic from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Source {
    Cidr(IpNet),
    Group(String),
    PrefixList(String),
}

/// One source of one ingress rule: rules are compared piece by piece, as upstream compares them.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct RulePiece {
    pub(crate) protocol: String,
    pub(crate) from_port: Option<i32>,
    pub(crate) to_port: Option<i32>,
    pub(crate) source: Source,
}

impl RulePiece {
    /// How the piece counts against the rule limit.
    fn counts_as(&self) -> RuleCount {
        match &self.source {
            Source::Cidr(cidr) => RuleCount::of_cidr(cidr),
            Source::Group(_) | Source::PrefixList(_) => RuleCount::REFERENCE,
        }
    }
}

/// The rules to revoke from and authorize in one group, counted against the rule limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PieceChanges {
    /// The change as counted (the group's ID, role and rule counts).
    pub(crate) counted: IngressChange,
    /// The pieces to authorize.
    pub(crate) add: Vec<RulePiece>,
    /// The pieces to revoke.
    pub(crate) remove: Vec<RulePiece>,
}

impl PieceChanges {
    /// The changes of `group`, counted.
    pub(crate) fn new(
        group: &SecurityGroup,
        role: GroupRole,
        add: Vec<RulePiece>,
        remove: Vec<RulePiece>,
    ) -> Self {
        PieceChanges {
            counted: IngressChange {
                group_id: group.group_id().unwrap_or_default().to_string(),
                role,
                current: RuleCount::of_permissions(group.ip_permissions()),
                authorize: RuleCount::sum(add.iter().map(RulePiece::counts_as)),
                revoke: RuleCount::sum(remove.iter().map(RulePiece::counts_as)),
            },
            add,
            remove,
        }
    }

    /// Whether nothing changes.
    pub(crate) fn is_empty(&self) -> bool {
        self.add.is_empty() && self.remove.is_empty()
    }
}

/// The node-group changes of one load balancer, group by group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct NodeRulesChanges {
    /// The groups that change.
    pub(crate) groups: Vec<PieceChanges>,
}

impl NodeRulesChanges {
    /// The counted changes, for the rule-limit check.
    pub(crate) fn changes(&self) -> impl Iterator<Item = IngressChange> + '_ {
        self.groups.iter().map(|g| g.counted.clone())
    }
}

/// The pieces of a security group's ingress rules.
pub(crate) fn pieces(group: &SecurityGroup) -> Vec<RulePiece> {
    let mut out = Vec::new();
    for p in group.ip_permissions() {
        let piece = |source| RulePiece {
            protocol: p.ip_protocol().unwrap_or_default().to_string(),
            from_port: p.from_port(),
            to_port: p.to_port(),
            source,
        };
        let v4 = p.ip_ranges().iter().filter_map(|r| r.cidr_ip());
        let v6 = p.ipv6_ranges().iter().filter_map(|r| r.cidr_ipv6());
        for cidr in v4.chain(v6).filter_map(|c| c.parse::<IpNet>().ok()) {
            out.push(piece(Source::Cidr(cidr)));
        }
        for pair in p.user_id_group_pairs().iter().filter_map(|g| g.group_id()) {
            out.push(piece(Source::Group(pair.to_string())));
        }
        for list in p
            .prefix_list_ids()
            .iter()
            .filter_map(|l| l.prefix_list_id())
        {
            out.push(piece(Source::PrefixList(list.to_string())));
        }
    }
    out
}

fn permission(piece: &RulePiece) -> IpPermission {
    let b = IpPermission::builder()
        .ip_protocol(&piece.protocol)
        .set_from_port(piece.from_port)
        .set_to_port(piece.to_port);
    match &piece.source {
        Source::Cidr(IpNet::V4(net)) => {
            b.ip_ranges(IpRange::builder().cidr_ip(net.to_string()).build())
        }
        Source::Cidr(IpNet::V6(net)) => {
            b.ipv6_ranges(Ipv6Range::builder().cidr_ipv6(net.to_string()).build())
        }
        Source::Group(id) => b.user_id_group_pairs(UserIdGroupPair::builder().group_id(id).build()),
        Source::PrefixList(id) => {
            b.prefix_list_ids(PrefixListId::builder().prefix_list_id(id).build())
        }
    }
    .build()
}

/// The ingress of a load balancer's own group: TCP on every Service port and ICMP type 3 code 4 (path MTU
/// discovery, IPv4), each from every source range.
pub(crate) fn desired_elb_ingress(spec: &ClassicSpec) -> BTreeSet<RulePiece> {
    let mut out = BTreeSet::new();
    for cidr in &spec.source_ranges {
        for port in &spec.ports {
            out.insert(RulePiece {
                protocol: "tcp".into(),
                from_port: Some(*port),
                to_port: Some(*port),
                source: Source::Cidr(*cidr),
            });
        }
        if matches!(cidr, IpNet::V4(_)) {
            out.insert(RulePiece {
                protocol: "icmp".into(),
                from_port: Some(3),
                to_port: Some(4),
                source: Source::Cidr(*cidr),
            });
        }
    }
    out
}

/// The pieces to authorize (desired, missing) and revoke (present, not desired).
pub(crate) fn ingress_changes(
    desired: &BTreeSet<RulePiece>,
    present: &[RulePiece],
) -> (Vec<RulePiece>, Vec<RulePiece>) {
    let add = desired
        .iter()
        .filter(|d| !present.contains(d))
        .cloned()
        .collect();
    let remove = present
        .iter()
        .filter(|p| !desired.contains(p))
        .cloned()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    (add, remove)
}

/// The rule a node security group gets: all traffic from the load balancer's group.
fn node_rule(elb_group: &str) -> RulePiece {
    RulePiece {
        protocol: "-1".into(),
        from_port: None,
        to_port: None,
        source: Source::Group(elb_group.to_string()),
    }
}

/// Which of a load balancer's groups its node rules name as source: upstream's order (groups of the
/// security-groups annotation in its order, then groups of neither annotation, then extra-security-groups),
/// cluster-tagged groups moved ahead, by the same insertion sort upstream's `sort.Slice` runs on these short
/// lists.
pub(crate) fn source_group(
    lb_groups: &[String],
    annotated: &[String],
    extra: &[String],
    tagged: &BTreeSet<String>,
) -> Option<String> {
    let order = |g: &String| -> usize {
        if let Some(i) = annotated.iter().position(|a| a == g) {
            return i;
        }
        match extra.iter().position(|a| a == g) {
            Some(j) => annotated.len() + 1 + j,
            None => annotated.len(),
        }
    };
    let less =
        |a: &String, b: &String| order(a) < order(b) || (tagged.contains(a) && !tagged.contains(b));
    let mut sorted = lb_groups.to_vec();
    for i in 1..sorted.len() {
        let mut j = i;
        while j > 0 && less(&sorted[j], &sorted[j - 1]) {
            sorted.swap(j, j - 1);
            j -= 1;
        }
    }
    sorted.into_iter().next()
}

/// What node security-group rules a load balancer needs.
pub(crate) struct NodeRules<'a> {
    /// The load balancer's security groups.
    pub(crate) lb_groups: &'a [String],
    /// The security-groups annotation.
    pub(crate) annotated: &'a [String],
    /// The extra-security-groups annotation.
    pub(crate) extra: &'a [String],
    /// The VPC.
    pub(crate) vpc_id: &'a str,
    /// The registered instances, whose groups must admit the load balancer.
    pub(crate) targets: &'a [Arc<Ec2Instance>],
    /// Groups being deleted with the load balancer: when the source group is one, every group's rule goes.
    pub(crate) deleting: &'a BTreeSet<String>,
}

impl AwsCloud {
    /// The load balancer's security groups and, when it has its own, that group's ID (whose ingress is
    /// managed here).
    pub(crate) async fn classic_security_groups(
        &self,
        lb_name: &str,
        spec: &ClassicSpec,
        vpc_id: &str,
    ) -> Result<(Vec<String>, Option<String>)> {
        let (mut groups, own) = if !spec.security_groups.is_empty() {
            (spec.security_groups.clone(), None)
        } else if let Some(configured) = &self.config.elb_security_group {
            (vec![configured.clone()], None)
        } else {
            let id = self.ensure_elb_group(lb_name, spec, vpc_id).await?;
            (vec![id.clone()], Some(id))
        };
        groups.extend(spec.extra_security_groups.iter().cloned());
        Ok((groups, own))
    }

    /// The security groups named `name` in `vpc_id` (by name, as upstream finds them).
    pub(crate) async fn groups_named(
        &self,
        name: &str,
        vpc_id: Option<&str>,
    ) -> Result<Vec<SecurityGroup>> {
        let mut filters = vec![filter("group-name", [name])];
        if let Some(vpc) = vpc_id {
            filters.push(filter("vpc-id", [vpc]));
        }
        let out = self
            .clients
            .ec2
            .describe_security_groups()
            .set_filters(Some(filters))
            .send()
            .await
            .api("DescribeSecurityGroups")?;
        Ok(out.security_groups().to_vec())
    }

    /// The load balancer's own group, found by name or created (see [`Self::ensure_group_named`]).
    async fn ensure_elb_group(
        &self,
        lb_name: &str,
        spec: &ClassicSpec,
        vpc_id: &str,
    ) -> Result<String> {
        let description = elb_group_description(lb_name, &spec.service_name());
        self.ensure_group_named(
            &elb_group_name(lb_name),
            &description,
            vpc_id,
            &spec.additional_tags,
            &spec.service_name(),
        )
        .await
    }

    /// The security group named `name` in `vpc_id`, found by name or created with `description`, the
    /// cluster's `owned` tag and `additional_tags`; a found group missing the cluster tag gets it, one tagged
    /// for another cluster is refused. `service` names the Service it is for in the log.
    pub(crate) async fn ensure_group_named(
        &self,
        name: &str,
        description: &str,
        vpc_id: &str,
        additional_tags: &BTreeMap<String, String>,
        service: &str,
    ) -> Result<String> {
        if let Some(group) = self.groups_named(name, Some(vpc_id)).await?.first() {
            let id = group.group_id().unwrap_or_default().to_string();
            self.repair_cluster_tags(&id, group.tags()).await?;
            return Ok(id);
        }
        let mut tags = additional_tags.clone();
        tags.extend(self.tagging.owned_tags());
        tracing::info!(group = %name, service, "creating load-balancer security group");
        let created = self
            .clients
            .ec2
            .create_security_group()
            .group_name(name)
            .description(description)
            .vpc_id(vpc_id)
            .tag_specifications(
                TagSpecification::builder()
                    .resource_type(ResourceType::SecurityGroup)
                    .set_tags(Some(
                        tags.iter()
                            .map(|(k, v)| Tag::builder().key(k).value(v).build())
                            .collect(),
                    ))
                    .build(),
            )
            .send()
            .await
            .api("CreateSecurityGroup");
        match created {
            Ok(out) => out.group_id().map(str::to_string).ok_or_else(|| {
                CloudError::provider(format!(
                    "created security group {name}, but AWS answered no ID"
                ))
            }),
            // Created meanwhile by a concurrent sync: that one is the group.
            Err(e) if e.is_code("InvalidGroup.Duplicate") => self
                .groups_named(name, Some(vpc_id))
                .await?
                .first()
                .and_then(|g| g.group_id())
                .map(str::to_string)
                .ok_or_else(|| e.into()),
            Err(e) => Err(e.into()),
        }
    }

    /// Adds the cluster's tags a group lacks; a group tagged for another cluster is an error.
    async fn repair_cluster_tags(&self, group_id: &str, have: &[Tag]) -> Result<()> {
        let have: HashMap<&str, &str> = have
            .iter()
            .map(|t| (t.key().unwrap_or_default(), t.value().unwrap_or_default()))
            .collect();
        let mut missing = Vec::new();
        for (key, value) in self.tagging.owned_tags() {
            match have.get(key.as_str()) {
                Some(v) if *v == value => {}
                Some(v) if !v.is_empty() => {
                    return Err(CloudError::provider(format!(
                        "security group {group_id} has tag belonging to another cluster: {key}={v} (expected {value})"
                    )));
                }
                _ => missing.push(Tag::builder().key(key).value(value).build()),
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        self.clients
            .ec2
            .create_tags()
            .resources(group_id)
            .set_tags(Some(missing))
            .send()
            .await
            .api("CreateTags")?;
        Ok(())
    }

    /// The changes that bring the load balancer's own group's ingress to exactly the desired rules.
    pub(crate) async fn plan_elb_group_ingress(
        &self,
        group_id: &str,
        spec: &ClassicSpec,
    ) -> Result<PieceChanges> {
        let out = self
            .clients
            .ec2
            .describe_security_groups()
            .group_ids(group_id)
            .send()
            .await
            .api("DescribeSecurityGroups")?;
        let group = out
            .security_groups()
            .first()
            .ok_or_else(|| CloudError::provider(format!("security group not found: {group_id}")))?;
        let (add, remove) = ingress_changes(&desired_elb_ingress(spec), &pieces(group));
        Ok(PieceChanges::new(
            group,
            GroupRole::LoadBalancer,
            add,
            remove,
        ))
    }

    /// Makes one group's changes: authorizes, then revokes, when the group can hold both (so a failure in
    /// between never shuts clients out); revokes first when it could not (to make room).
    pub(crate) async fn apply_piece_changes(&self, changes: &PieceChanges) -> Result<()> {
        if self.authorize_first(&changes.counted) {
            self.authorize_pieces(changes).await?;
            self.revoke_pieces(changes).await
        } else {
            self.revoke_pieces(changes).await?;
            self.authorize_pieces(changes).await
        }
    }

    async fn authorize_pieces(&self, changes: &PieceChanges) -> Result<()> {
        if changes.add.is_empty() {
            return Ok(());
        }
        let group_id = changes.counted.group_id.as_str();
        tracing::info!(group = group_id, role = %changes.counted.role, rules = changes.add.len(), "authorizing load-balancer rules in security group");
        self.clients
            .ec2
            .authorize_security_group_ingress()
            .group_id(group_id)
            .set_ip_permissions(Some(changes.add.iter().map(permission).collect()))
            .send()
            .await
            .api("AuthorizeSecurityGroupIngress")?;
        Ok(())
    }

    async fn revoke_pieces(&self, changes: &PieceChanges) -> Result<()> {
        if changes.remove.is_empty() {
            return Ok(());
        }
        let group_id = changes.counted.group_id.as_str();
        tracing::info!(group = group_id, role = %changes.counted.role, rules = changes.remove.len(), "revoking load-balancer rules of security group");
        self.revoke(group_id, &changes.remove).await
    }

    async fn revoke(&self, group_id: &str, pieces: &[RulePiece]) -> Result<()> {
        match self
            .clients
            .ec2
            .revoke_security_group_ingress()
            .group_id(group_id)
            .set_ip_permissions(Some(pieces.iter().map(permission).collect()))
            .send()
            .await
            .api("RevokeSecurityGroupIngress")
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_code("InvalidPermission.NotFound") => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    fn group_is_tagged(&self, group: &SecurityGroup) -> bool {
        self.tagging.has_cluster_tag(
            group
                .tags()
                .iter()
                .map(|t| (t.key().unwrap_or_default(), t.value().unwrap_or_default())),
        )
    }

    /// The node security-group rules from the load balancer's source group: the groups of the targets admit
    /// it, cluster-tagged groups of no target stop admitting it (every group when the source group is being
    /// deleted). Nothing is changed.
    pub(crate) async fn plan_node_group_rules(
        &self,
        want: NodeRules<'_>,
    ) -> Result<NodeRulesChanges> {
        if self.config.disable_security_group_ingress || want.lb_groups.is_empty() {
            return Ok(NodeRulesChanges::default());
        }
        let groups = self.vpc_group_descriptions(want.vpc_id).await?;
        let tagged: BTreeSet<String> = groups
            .values()
            .filter(|g| self.group_is_tagged(g))
            .filter_map(|g| g.group_id().map(str::to_string))
            .collect();
        let Some(source) = source_group(want.lb_groups, want.annotated, want.extra, &tagged) else {
            return Ok(NodeRulesChanges::default());
        };
        let deleting = want.deleting.contains(&source);
        let infos: HashMap<String, GroupInfo> = groups
            .iter()
            .map(|(id, g)| (id.clone(), GroupInfo::from(g)))
            .collect();
        let mut wanted = BTreeSet::new();
        for inst in want.targets {
            if let Some(id) = instance_group(inst, &infos, &self.tagging)? {
                wanted.insert(id);
            }
        }
        let rule = node_rule(&source);
        let configured = self.config.elb_security_group.as_deref();
        let mut ids: Vec<&String> = groups.keys().collect();
        ids.sort();
        let mut out = Vec::new();
        for id in ids.into_iter().filter(|id| Some(id.as_str()) != configured) {
            let present = pieces(&groups[id]);
            let (add, remove) = if wanted.contains(id) {
                // Any rule from the source group will do.
                let admitted = present.iter().any(|p| p.source == rule.source);
                let add = (!admitted).then(|| rule.clone());
                (add.into_iter().collect(), Vec::new())
            } else if (deleting || tagged.contains(id)) && present.contains(&rule) {
                (vec![], vec![rule.clone()])
            } else {
                continue;
            };
            let changes = PieceChanges::new(&groups[id], GroupRole::Node, add, remove);
            if !changes.is_empty() {
                out.push(changes);
            }
        }
        Ok(NodeRulesChanges { groups: out })
    }

    /// Checks node-rule changes against the rule limit, then makes them.
    async fn apply_node_group_rules(&self, changes: &NodeRulesChanges) -> Result<()> {
        self.check_rule_limit(&changes.changes().collect::<Vec<_>>())?;
        for group in &changes.groups {
            self.apply_piece_changes(group).await?;
        }
        Ok(())
    }

    /// Plans, checks and makes the node-rule changes of [`Self::plan_node_group_rules`].
    pub(crate) async fn sync_node_group_rules(&self, want: NodeRules<'_>) -> Result<()> {
        let changes = self.plan_node_group_rules(want).await?;
        self.apply_node_group_rules(&changes).await
    }

    /// Revokes every rule of the VPC's cluster-tagged groups that admits traffic from `group` (before that
    /// group is deleted).
    pub(crate) async fn revoke_references_to(&self, group: &str, vpc_id: &str) -> Result<()> {
        let groups = self.vpc_group_descriptions(vpc_id).await?;
        let mut ids: Vec<&String> = groups.keys().collect();
        ids.sort();
        for id in ids {
            let g = &groups[id];
            if !self.group_is_tagged(g) {
                continue;
            }
            let referencing: Vec<RulePiece> = pieces(g)
                .into_iter()
                .filter(|p| p.source == Source::Group(group.to_string()))
                .collect();
            if !referencing.is_empty() {
                tracing::info!(group = %id, source = group, "revoking rules admitting a deleted load-balancer group");
                self.revoke(id, &referencing).await?;
            }
        }
        Ok(())
    }

    /// Deletes security groups, retrying while AWS still counts them as used (a deleted load balancer's
    /// interfaces take a while to go). What is left makes the sync fail, to be finished by the next one.
    pub(crate) async fn delete_groups(&self, ids: &BTreeSet<String>) -> Result<()> {
        let mut left: BTreeSet<String> = ids.clone();
        let mut delay = Duration::from_millis(500);
        for attempt in 0..6 {
            let mut still = BTreeSet::new();
            for id in &left {
                match self
                    .clients
                    .ec2
                    .delete_security_group()
                    .group_id(id)
                    .send()
                    .await
                    .api("DeleteSecurityGroup")
                {
                    Ok(_) => tracing::info!(group = %id, "deleted load-balancer security group"),
                    Err(e) if e.is_code("InvalidGroup.NotFound") => {}
                    Err(e) if e.is_code("DependencyViolation") => {
                        still.insert(id.clone());
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            left = still;
            if left.is_empty() {
                return Ok(());
            }
            if attempt < 5 {
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
        }
        Err(CloudError::provider(format!(
            "security groups {} are still in use; deletion will be retried",
            left.into_iter().collect::<Vec<_>>().join(",")
        )))
    }

    /// The groups of a deleted load balancer to delete with it: cluster-tagged, neither configured nor
    /// `annotated`.
    pub(crate) fn groups_to_delete(
        &self,
        described: &[SecurityGroup],
        annotated: &[String],
    ) -> BTreeSet<String> {
        described
            .iter()
            .filter(|g| self.group_is_tagged(g))
            .filter_map(|g| g.group_id())
            .filter(|id| Some(*id) != self.config.elb_security_group.as_deref())
            .filter(|id| !annotated.iter().any(|a| a == id))
            .map(str::to_string)
            .collect()
    }

    /// Full descriptions of the groups `ids`.
    pub(crate) async fn describe_groups(&self, ids: &[String]) -> Result<Vec<SecurityGroup>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let out = self
            .clients
            .ec2
            .describe_security_groups()
            .filters(filter("group-id", ids.iter().map(String::as_str)))
            .send()
            .await
            .api("DescribeSecurityGroups")?;
        Ok(out.security_groups().to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn source_group_order_as_upstream() {
        let tagged: BTreeSet<String> = ["sg-own".to_string()].into();
        // The load balancer's own (tagged) group beats extra groups.
        assert_eq!(
            source_group(
                &strings(&["sg-x", "sg-own"]),
                &[],
                &strings(&["sg-x"]),
                &tagged
            ),
            Some("sg-own".into())
        );
        // The first annotated group, whatever AWS's order.
        assert_eq!(
            source_group(
                &strings(&["sg-b", "sg-a"]),
                &strings(&["sg-a", "sg-b"]),
                &[],
                &BTreeSet::new()
            ),
            Some("sg-a".into())
        );
        assert_eq!(source_group(&[], &[], &[], &tagged), None);
    }

    fn piece(protocol: &str, from: i32, to: i32, source: Source) -> RulePiece {
        RulePiece {
            protocol: protocol.into(),
            from_port: Some(from),
            to_port: Some(to),
            source,
        }
    }

    #[test]
    fn elb_group_ingress_is_exactly_the_desired_rules() {
        let world: IpNet = "0.0.0.0/0".parse().unwrap();
        let office: IpNet = "203.0.113.0/24".parse().unwrap();
        let v6: IpNet = "2001:db8::/32".parse().unwrap();
        let mut desired = BTreeSet::new();
        for cidr in [world, v6] {
            desired.insert(piece("tcp", 80, 80, Source::Cidr(cidr)));
        }
        desired.insert(piece("icmp", 3, 4, Source::Cidr(world)));
        let present = vec![
            piece("tcp", 80, 80, Source::Cidr(world)),
            piece("tcp", 80, 80, Source::Cidr(office)),
            piece("tcp", 22, 22, Source::Group("sg-admin".into())),
        ];
        let (add, remove) = ingress_changes(&desired, &present);
        assert_eq!(
            add,
            vec![
                piece("icmp", 3, 4, Source::Cidr(world)),
                piece("tcp", 80, 80, Source::Cidr(v6)),
            ]
        );
        assert_eq!(
            remove,
            vec![
                piece("tcp", 22, 22, Source::Group("sg-admin".into())),
                piece("tcp", 80, 80, Source::Cidr(office)),
            ]
        );
    }

    #[test]
    fn names_and_descriptions() {
        assert_eq!(elb_group_name("a123"), "k8s-elb-a123");
        assert_eq!(
            elb_group_description("a123", "shop/web"),
            "Security group for Kubernetes ELB a123 (shop/web)"
        );
    }
}
