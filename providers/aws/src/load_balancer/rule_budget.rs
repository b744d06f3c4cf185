//! The rule budget of security groups.
//!
//! AWS limits the rules one security group may hold: 60 inbound and 60 outbound by default (the quota
//! "Inbound or outbound rules per security group", raisable; rules per group times groups per network
//! interface may not exceed 1,000). An AuthorizeSecurityGroupIngress that would pass the quota is refused,
//! and a sync that has already changed other groups is then left half-applied. So every load-balancer sync
//! counts, before its first AuthorizeSecurityGroupIngress or RevokeSecurityGroupIngress on any group, the
//! inbound rules each group will hold after the change (the rules it holds, minus those to revoke, plus those
//! to authorize) and refuses the whole sync when one would pass `[Global] SecurityGroupRulesLimit`.
//!
//! Rules are counted as AWS counts them: each source of each protocol and port range is one rule, and IPv4
//! and IPv6 rules are counted separately (a group may hold 60 IPv4 and 60 IPv6 inbound rules); a rule whose
//! source is a security group or a prefix list counts as one of each. AWS counts a prefix-list reference
//! as the list's maximum size (customer-managed) or weight (AWS-managed); it counts as one here, so the check
//! is a lower bound for groups that reference prefix lists. Only inbound rules are changed by this provider,
//! so only they are counted. A change that does not add rules of an IP family is never refused for that
//! family, even in a group already holding more than the limit (the quota is then evidently higher).

use std::fmt;

use aws_sdk_ec2::types::IpPermission;
use cloud_provider::CloudError;
use ipnet::IpNet;

use crate::cloud::AwsCloud;
use crate::config::CloudConfig;

/// The Service Quotas code of AWS's quota of inbound or outbound rules per security group.
pub const RULES_QUOTA_CODE: &str = "L-0EA8095F";

/// A number of inbound rules per IP family, as AWS counts them against the quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct RuleCount {
    /// Rules counted against the IPv4 quota.
    pub(crate) ipv4: u32,
    /// Rules counted against the IPv6 quota.
    pub(crate) ipv6: u32,
}

impl RuleCount {
    /// One rule from an IPv4 CIDR.
    pub(crate) const IPV4: RuleCount = RuleCount { ipv4: 1, ipv6: 0 };
    /// One rule from an IPv6 CIDR.
    pub(crate) const IPV6: RuleCount = RuleCount { ipv4: 0, ipv6: 1 };
    /// One rule from a security group or a prefix list: it counts in both families.
    pub(crate) const REFERENCE: RuleCount = RuleCount { ipv4: 1, ipv6: 1 };

    /// One rule from `cidr`.
    pub(crate) fn of_cidr(cidr: &IpNet) -> RuleCount {
        match cidr {
            IpNet::V4(_) => RuleCount::IPV4,
            IpNet::V6(_) => RuleCount::IPV6,
        }
    }

    /// The rules of permissions as EC2 describes them: every IPv4 range, IPv6 range, referenced group and
    /// prefix list of every permission.
    pub(crate) fn of_permissions(permissions: &[IpPermission]) -> RuleCount {
        permissions.iter().fold(RuleCount::default(), |sum, p| {
            let references = (p.user_id_group_pairs().len() + p.prefix_list_ids().len()) as u32;
            RuleCount {
                ipv4: sum.ipv4 + p.ip_ranges().len() as u32 + references,
                ipv6: sum.ipv6 + p.ipv6_ranges().len() as u32 + references,
            }
        })
    }

    /// The sum of the counts of `rules`.
    pub(crate) fn sum(rules: impl IntoIterator<Item = RuleCount>) -> RuleCount {
        rules
            .into_iter()
            .fold(RuleCount::default(), |a, b| RuleCount {
                ipv4: a.ipv4 + b.ipv4,
                ipv6: a.ipv6 + b.ipv6,
            })
    }

    fn get(&self, family: Family) -> u32 {
        match family {
            Family::Ipv4 => self.ipv4,
            Family::Ipv6 => self.ipv6,
        }
    }
}

/// An IP family, counted separately against the quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// IPv4 rules (and rules naming a group or prefix list).
    Ipv4,
    /// IPv6 rules (and rules naming a group or prefix list).
    Ipv6,
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Family::Ipv4 => "IPv4",
            Family::Ipv6 => "IPv6",
        })
    }
}

/// What a security group is to the load balancer, for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupRole {
    /// The load balancer's own group (classic ELBs), admitting its clients.
    LoadBalancer,
    /// A node (instance) group, admitting the load balancer's traffic.
    Node,
}

impl fmt::Display for GroupRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GroupRole::LoadBalancer => "the load balancer's security group",
            GroupRole::Node => "node security group",
        })
    }
}

/// The change one sync makes to one group's inbound rules, counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IngressChange {
    /// The group.
    pub(crate) group_id: String,
    /// What the group is to the load balancer.
    pub(crate) role: GroupRole,
    /// The rules it holds now.
    pub(crate) current: RuleCount,
    /// The rules to authorize.
    pub(crate) authorize: RuleCount,
    /// The rules to revoke (all of them among those it holds).
    pub(crate) revoke: RuleCount,
}

impl IngressChange {
    /// The rules of `family` the group holds after the change.
    fn after(&self, family: Family) -> u32 {
        (self
            .current
            .get(family)
            .saturating_sub(self.revoke.get(family)))
            + self.authorize.get(family)
    }

    /// Whether the group can hold its new rules before the stale ones go, within `limit`. Then the change
    /// authorizes first and revokes after, as upstream orders it, so a failure between the two calls leaves
    /// the load balancer's traffic admitted (by old and new rules) rather than shut out; otherwise the stale
    /// rules go first, to make room.
    pub(crate) fn authorize_first(&self, limit: u32) -> bool {
        [Family::Ipv4, Family::Ipv6].into_iter().all(|family| {
            let adds = self.authorize.get(family);
            adds == 0 || self.current.get(family) + adds <= limit
        })
    }

    /// The first family this change would take past `limit`: only a family that gains rules counts.
    fn overflow(&self, limit: u32) -> Option<Family> {
        [Family::Ipv4, Family::Ipv6].into_iter().find(|&family| {
            let after = self.after(family);
            after > limit && after > self.current.get(family)
        })
    }
}

/// The rules a security group may hold per direction and IP family, and where that number comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RulesLimit {
    /// The number of rules.
    pub rules: u32,
    /// Whether `[Global] SecurityGroupRulesLimit` set it (else it is AWS's default quota).
    pub configured: bool,
}

impl RulesLimit {
    /// The limit of a cloud config.
    pub fn from_config(config: &CloudConfig) -> Self {
        RulesLimit {
            rules: config.security_group_rules_limit(),
            configured: config.security_group_rules_limit.is_some(),
        }
    }
}

impl fmt::Display for RulesLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.configured {
            write!(
                f,
                "{} (SecurityGroupRulesLimit in the [Global] section of the cloud config)",
                self.rules
            )
        } else {
            write!(
                f,
                "{} (AWS's default quota of inbound rules per security group; SecurityGroupRulesLimit is \
                 not set in the [Global] section of the cloud config)",
                self.rules
            )
        }
    }
}

/// A sync refused because a security group would hold more inbound rules than its limit; no rule of any
/// group was changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct RuleLimitError {
    /// The group.
    pub group_id: String,
    /// What the group is to the load balancer.
    pub role: GroupRole,
    /// The IP family over the limit.
    pub family: Family,
    /// The rules of that family the group holds now.
    pub current: u32,
    /// The rules of that family the group would need.
    pub needed: u32,
    /// The limit.
    pub limit: RulesLimit,
    /// How many other groups of the same sync would pass the limit too.
    pub others: usize,
}

impl fmt::Display for RuleLimitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "security group rule limit: {} {} would need {} inbound {} rules (it holds {}), more than the limit of {}",
            self.role, self.group_id, self.needed, self.family, self.current, self.limit
        )?;
        if self.others > 0 {
            write!(f, "; {} more groups would pass it too", self.others)?;
        }
        write!(
            f,
            "; no security group rule was changed. To raise it, raise the AWS quota \"Inbound or outbound rules \
             per security group\" (Service Quotas code {RULES_QUOTA_CODE}; rules per group times security \
             groups per network interface cannot exceed 1,000), then set SecurityGroupRulesLimit in the \
             [Global] section of the cloud config to the new quota; or make the load balancers need fewer \
             rules (fewer ports or loadBalancerSourceRanges)"
        )
    }
}

impl From<RuleLimitError> for CloudError {
    fn from(e: RuleLimitError) -> Self {
        CloudError::provider(e.to_string())
    }
}

/// Checks every change of one sync against `limit`: the first group (in the given order) that would pass it
/// makes the error, which also counts the other groups that would.
pub(crate) fn check(changes: &[IngressChange], limit: RulesLimit) -> Result<(), RuleLimitError> {
    let mut over = changes
        .iter()
        .filter_map(|c| c.overflow(limit.rules).map(|family| (c, family)));
    let Some((change, family)) = over.next() else {
        return Ok(());
    };
    let err = RuleLimitError {
        group_id: change.group_id.clone(),
        role: change.role,
        family,
        current: change.current.get(family),
        needed: change.after(family),
        limit,
        others: over.count(),
    };
    tracing::warn!(
        group = %err.group_id,
        family = %family,
        rules_now = err.current,
        rules_needed = err.needed,
        limit = limit.rules,
        "refusing a load-balancer sync: a security group would pass its rule limit"
    );
    Err(err)
}

impl AwsCloud {
    /// Checks the rule changes of one sync against the configured limit (see [`check`]).
    pub(crate) fn check_rule_limit(&self, changes: &[IngressChange]) -> cloud_provider::Result<()> {
        Ok(check(changes, RulesLimit::from_config(&self.config))?)
    }

    /// Whether `change` authorizes before it revokes (see [`IngressChange::authorize_first`]).
    pub(crate) fn authorize_first(&self, change: &IngressChange) -> bool {
        change.authorize_first(RulesLimit::from_config(&self.config).rules)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_ec2::types::{IpRange, Ipv6Range, PrefixListId, UserIdGroupPair};

    fn change(current: (u32, u32), authorize: (u32, u32), revoke: (u32, u32)) -> IngressChange {
        let count = |(ipv4, ipv6)| RuleCount { ipv4, ipv6 };
        IngressChange {
            group_id: "sg-1".into(),
            role: GroupRole::Node,
            current: count(current),
            authorize: count(authorize),
            revoke: count(revoke),
        }
    }

    const DEFAULT: RulesLimit = RulesLimit {
        rules: 60,
        configured: false,
    };

    #[test]
    fn every_source_of_every_permission_is_one_rule_per_family() {
        let v4 = |c: &str| IpRange::builder().cidr_ip(c).build();
        let v6 = |c: &str| Ipv6Range::builder().cidr_ipv6(c).build();
        let tcp_80 = IpPermission::builder()
            .ip_protocol("tcp")
            .from_port(80)
            .to_port(80)
            .ip_ranges(v4("0.0.0.0/0"))
            .ip_ranges(v4("10.0.0.0/8"))
            .ipv6_ranges(v6("::/0"))
            .build();
        let all_from_groups = IpPermission::builder()
            .ip_protocol("-1")
            .user_id_group_pairs(UserIdGroupPair::builder().group_id("sg-a").build())
            .user_id_group_pairs(UserIdGroupPair::builder().group_id("sg-b").build())
            .prefix_list_ids(PrefixListId::builder().prefix_list_id("pl-1").build())
            .build();
        let icmp = IpPermission::builder()
            .ip_protocol("icmp")
            .from_port(3)
            .to_port(4)
            .ip_ranges(v4("0.0.0.0/0"))
            .build();
        assert_eq!(
            RuleCount::of_permissions(&[tcp_80, all_from_groups, icmp]),
            RuleCount { ipv4: 6, ipv6: 4 }
        );
        assert_eq!(RuleCount::of_permissions(&[]), RuleCount::default());
        let cidr = |c: &str| RuleCount::of_cidr(&c.parse().unwrap());
        assert_eq!(
            RuleCount::sum([
                cidr("10.0.0.0/8"),
                cidr("2001:db8::/32"),
                RuleCount::REFERENCE
            ]),
            RuleCount { ipv4: 2, ipv6: 2 }
        );
    }

    #[test]
    fn new_rules_go_in_first_when_the_group_can_hold_old_and_new() {
        // Upstream's order (authorize, then revoke) whenever both fit at once.
        assert!(change((50, 0), (5, 0), (5, 0)).authorize_first(60));
        assert!(change((58, 0), (2, 0), (2, 0)).authorize_first(60));
        assert!(change((59, 60), (0, 0), (1, 1)).authorize_first(60));
        // Only revoking first makes room.
        assert!(!change((59, 0), (2, 0), (2, 0)).authorize_first(60));
        assert!(!change((0, 60), (0, 1), (0, 1)).authorize_first(60));
    }

    #[test]
    fn the_count_after_the_change_is_checked_per_family() {
        // 58 + 2 = 60 fits; 59 + 2 = 61 does not.
        assert_eq!(check(&[change((58, 0), (2, 0), (0, 0))], DEFAULT), Ok(()));
        let err = check(&[change((59, 0), (2, 0), (0, 0))], DEFAULT).unwrap_err();
        assert_eq!(
            (err.family, err.current, err.needed),
            (Family::Ipv4, 59, 61)
        );
        // Revoked rules make room.
        assert_eq!(check(&[change((60, 0), (3, 0), (3, 0))], DEFAULT), Ok(()));
        // Families are counted apart: 60 IPv4 and 60 IPv6 rules fit; a reference counts in both.
        assert_eq!(check(&[change((59, 59), (1, 1), (0, 0))], DEFAULT), Ok(()));
        let err = check(&[change((40, 60), (1, 1), (0, 0))], DEFAULT).unwrap_err();
        assert_eq!(
            (err.family, err.current, err.needed),
            (Family::Ipv6, 60, 61)
        );
    }

    #[test]
    fn a_change_that_adds_no_rules_of_a_family_is_never_refused_for_it() {
        // A group already past the limit (the real quota is higher) may lose rules, or gain rules of the
        // other family.
        assert_eq!(check(&[change((70, 0), (0, 0), (1, 0))], DEFAULT), Ok(()));
        assert_eq!(check(&[change((70, 0), (2, 0), (2, 0))], DEFAULT), Ok(()));
        assert_eq!(check(&[change((70, 0), (0, 1), (0, 0))], DEFAULT), Ok(()));
        // ... but not grow past it.
        assert!(check(&[change((70, 0), (2, 0), (1, 0))], DEFAULT).is_err());
    }

    #[test]
    fn the_error_names_the_group_the_limit_and_how_to_raise_it() {
        let mut first = change((9, 0), (1, 0), (0, 0));
        first.group_id = "sg-fits".into();
        let mut second = change((5, 0), (6, 0), (0, 0));
        second.group_id = "sg-elb".into();
        second.role = GroupRole::LoadBalancer;
        let third = change((10, 0), (1, 0), (0, 0));
        let limit = RulesLimit {
            rules: 10,
            configured: true,
        };
        let err = check(&[first, second, third], limit).unwrap_err();
        assert_eq!(err.group_id, "sg-elb");
        assert_eq!(err.others, 1);
        assert_eq!(
            err.to_string(),
            "security group rule limit: the load balancer's security group sg-elb would need 11 inbound IPv4 \
             rules (it holds 5), more than the limit of 10 (SecurityGroupRulesLimit in the [Global] section of \
             the cloud config); 1 more groups would pass it too; no security group rule was changed. To raise \
             it, raise the AWS quota \"Inbound or outbound rules per security group\" (Service Quotas code \
             L-0EA8095F; rules per group times security groups per network interface cannot exceed 1,000), \
             then set SecurityGroupRulesLimit in the [Global] section of the cloud config to the new quota; or \
             make the load balancers need fewer rules (fewer ports or loadBalancerSourceRanges)"
        );
        let default = check(&[change((60, 0), (1, 0), (0, 0))], DEFAULT).unwrap_err();
        let message = CloudError::from(default).to_string();
        assert!(
            message.contains(
                "node security group sg-1 would need 61 inbound IPv4 rules (it holds 60)"
            ),
            "{message}"
        );
        assert!(
            message.contains(
                "limit of 60 (AWS's default quota of inbound rules per security group; \
                 SecurityGroupRulesLimit is not set"
            ),
            "{message}"
        );
    }

    #[test]
    fn the_limit_comes_from_the_cloud_config() {
        let default = CloudConfig::default();
        assert_eq!(RulesLimit::from_config(&default), DEFAULT);
        let set = CloudConfig::parse(b"[Global]\nSecurityGroupRulesLimit = 200\n").unwrap();
        assert_eq!(
            RulesLimit::from_config(&set),
            RulesLimit {
                rules: 200,
                configured: true
            }
        );
    }
}
