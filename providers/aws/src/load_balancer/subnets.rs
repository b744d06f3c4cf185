//! Subnets of a load balancer: the subnets annotation (IDs or Name tags), or discovery in the cluster's VPC.
//!
//! Discovery keeps the VPC's subnets that carry the cluster tag or no cluster tag at all; internet-facing load
//! balancers only get public subnets (whose route table has a route to an internet gateway). One subnet per
//! zone is chosen, preferring the role tag (`kubernetes.io/role/elb`, or `kubernetes.io/role/internal-elb`
//! for internal load balancers, whatever its value), then the cluster tag, then the lowest subnet ID; as
//! upstream, only zones of type `availability-zone` are used.

use std::collections::{BTreeMap, HashMap, HashSet};

use cloud_provider::{CloudError, Result};
use ipnet::IpNet;

use super::spec::{ANN_SUBNETS, SpecError};
use crate::cloud::{AwsCloud, filter};
use crate::error::SdkResultExt;
use crate::paginate::for_each_page;
use crate::tagging::{ClusterTagging, TAG_ROLE_ELB, TAG_ROLE_INTERNAL_ELB, ec2_tag_pairs};

/// The zone type of regular availability zones.
const REGULAR_ZONE_TYPE: &str = "availability-zone";

/// A subnet as load-balancer placement needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SubnetInfo {
    pub(crate) id: String,
    pub(crate) zone: String,
    pub(crate) cidr: Option<IpNet>,
    pub(crate) tags: Vec<(String, String)>,
    /// Routed to an internet gateway.
    pub(crate) public: bool,
}

impl SubnetInfo {
    fn tag(&self, key: &str) -> Option<&str> {
        self.tags
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn tag_pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.tags.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

/// Picks one subnet per zone from the cluster's subnets (public ones only for internet-facing load
/// balancers), sorted by zone.
/// The VPC's subnets the cluster may use, as upstream finds them: those tagged for the cluster and those
/// without any `kubernetes.io/cluster/` tag.
pub(crate) fn cluster_subnets(
    subnets: Vec<SubnetInfo>,
    tagging: &ClusterTagging,
) -> Vec<SubnetInfo> {
    subnets
        .into_iter()
        .filter(|s| {
            tagging.is_ours(s.tag_pairs()) || ClusterTagging::has_no_cluster_tag(s.tag_pairs())
        })
        .collect()
}

pub(crate) fn choose_subnets(
    subnets: &[SubnetInfo],
    internal: bool,
    tagging: &ClusterTagging,
) -> Vec<SubnetInfo> {
    let role_tag = if internal {
        TAG_ROLE_INTERNAL_ELB
    } else {
        TAG_ROLE_ELB
    };
    // Sort key: role tag first, then cluster tag, then lowest ID.
    let rank = |s: &SubnetInfo| {
        // As upstream: the role tag counts whatever its value.
        let has_role = s.tag(role_tag).is_some();
        let has_cluster = tagging.has_cluster_tag(s.tag_pairs());
        (!has_role, !has_cluster, s.id.clone())
    };
    let mut by_zone: BTreeMap<&str, &SubnetInfo> = BTreeMap::new();
    for s in subnets {
        if !internal && !s.public {
            continue;
        }
        match by_zone.get(s.zone.as_str()) {
            Some(current) if rank(current) <= rank(s) => {}
            _ => {
                by_zone.insert(s.zone.as_str(), s);
            }
        }
    }
    by_zone.into_values().cloned().collect()
}

/// The subnets whose zone is of type `availability-zone` (or of unknown type), by zone name -> type.
fn regular_zone_subnets(subnets: Vec<SubnetInfo>, types: &HashMap<&str, &str>) -> Vec<SubnetInfo> {
    subnets
        .into_iter()
        .filter(|s| {
            types
                .get(s.zone.as_str())
                .is_none_or(|t| *t == REGULAR_ZONE_TYPE)
        })
        .collect()
}

impl AwsCloud {
    /// Every page of a DescribeSubnets query.
    pub(crate) async fn describe_subnets(
        &self,
        filters: Vec<aws_sdk_ec2::types::Filter>,
    ) -> Result<Vec<SubnetInfo>> {
        let mut out = Vec::new();
        for_each_page(
            |token| {
                self.clients
                    .ec2
                    .describe_subnets()
                    .set_filters(Some(filters.clone()))
                    .set_next_token(token)
                    .send()
            },
            |page| page.next_token(),
            |page| {
                for s in page.subnets() {
                    out.push(SubnetInfo {
                        id: s.subnet_id().unwrap_or_default().to_string(),
                        zone: s.availability_zone().unwrap_or_default().to_string(),
                        cidr: s.cidr_block().and_then(|c| c.parse().ok()),
                        tags: ec2_tag_pairs(s.tags()),
                        public: false,
                    });
                }
            },
        )
        .await
        .api("DescribeSubnets")?;
        Ok(out)
    }

    /// The IDs of the VPC's subnets routed to an internet gateway (explicitly associated route table, else
    /// the VPC's main route table).
    async fn public_subnet_ids(
        &self,
        vpc_id: &str,
        subnet_ids: &[String],
    ) -> Result<HashSet<String>> {
        let tables = self
            .describe_route_tables(vec![filter("vpc-id", [vpc_id])])
            .await?;
        let mut explicit: HashMap<String, bool> = HashMap::new();
        let mut main_public = false;
        for table in &tables {
            let public = table
                .routes()
                .iter()
                .any(|r| r.gateway_id().is_some_and(|g| g.starts_with("igw-")));
            for assoc in table.associations() {
                if assoc.main() == Some(true) {
                    main_public = public;
                }
                if let Some(subnet) = assoc.subnet_id() {
                    explicit.insert(subnet.to_string(), public);
                }
            }
        }
        Ok(subnet_ids
            .iter()
            .filter(|id| explicit.get(*id).copied().unwrap_or(main_public))
            .cloned()
            .collect())
    }

    /// The subnets of a load balancer in `vpc_id`: the `annotated` ones (IDs or Name tags) in annotation
    /// order, else discovery for an `internal` or internet-facing load balancer.
    pub(crate) async fn load_balancer_subnets(
        &self,
        annotated: Option<&[String]>,
        internal: bool,
        vpc_id: &str,
    ) -> Result<Vec<SubnetInfo>> {
        if let Some(items) = annotated {
            return self.annotated_subnets(items, vpc_id).await;
        }
        let in_vpc = self
            .describe_subnets(vec![filter("vpc-id", [vpc_id])])
            .await?;
        let mut subnets = cluster_subnets(in_vpc, &self.tagging);
        if subnets.is_empty() {
            subnets = self.fallback_subnet().await?;
        }
        let ids: Vec<String> = subnets.iter().map(|s| s.id.clone()).collect();
        let public = self.public_subnet_ids(vpc_id, &ids).await?;
        for s in &mut subnets {
            s.public = public.contains(&s.id);
        }
        let chosen = self
            .in_regular_zones(choose_subnets(&subnets, internal, &self.tagging))
            .await?;
        if !chosen.is_empty() {
            return Ok(chosen);
        }
        Err(CloudError::provider(format!(
            "could not find any suitable subnets for the {} load balancer in {vpc_id}: tag {} subnets with {} (or {ANN_SUBNETS} on the Service)",
            if internal {
                "internal"
            } else {
                "internet-facing"
            },
            if internal { "private" } else { "public" },
            if internal {
                TAG_ROLE_INTERNAL_ELB
            } else {
                TAG_ROLE_ELB
            },
        )))
    }

    /// The subnet of `[Global] SubnetID`, where upstream falls back to when the VPC has no subnet the
    /// cluster may use (it still has to pass the public-subnet test); none when it is not configured.
    async fn fallback_subnet(&self) -> Result<Vec<SubnetInfo>> {
        let Some(fallback) = &self.config.subnet_id else {
            return Ok(Vec::new());
        };
        tracing::warn!(subnet = %fallback, "no subnet tagged for the cluster; falling back to [Global] SubnetID");
        self.describe_subnets(vec![filter("subnet-id", [fallback.as_str()])])
            .await
    }

    /// The subnets in zones of type `availability-zone`: as upstream, Local Zones, Wavelength Zones and
    /// Outposts are left out (network and classic load balancers are not offered there).
    async fn in_regular_zones(&self, subnets: Vec<SubnetInfo>) -> Result<Vec<SubnetInfo>> {
        if subnets.is_empty() {
            return Ok(subnets);
        }
        let out = self
            .clients
            .ec2
            .describe_availability_zones()
            .set_zone_names(Some(subnets.iter().map(|s| s.zone.clone()).collect()))
            .send()
            .await
            .api("DescribeAvailabilityZones")?;
        let types: HashMap<&str, &str> = out
            .availability_zones()
            .iter()
            .filter_map(|z| Some((z.zone_name()?, z.zone_type()?)))
            .collect();
        Ok(regular_zone_subnets(subnets, &types))
    }

    async fn annotated_subnets(&self, items: &[String], vpc_id: &str) -> Result<Vec<SubnetInfo>> {
        let ids: Vec<&str> = items
            .iter()
            .filter(|i| i.starts_with("subnet-"))
            .map(String::as_str)
            .collect();
        let names: Vec<&str> = items
            .iter()
            .filter(|i| !i.starts_with("subnet-"))
            .map(String::as_str)
            .collect();
        let mut found = Vec::new();
        if !ids.is_empty() {
            found.extend(
                self.describe_subnets(vec![
                    filter("vpc-id", [vpc_id]),
                    filter("subnet-id", ids.iter().copied()),
                ])
                .await?,
            );
        }
        if !names.is_empty() {
            found.extend(
                self.describe_subnets(vec![
                    filter("vpc-id", [vpc_id]),
                    filter("tag:Name", names.iter().copied()),
                ])
                .await?,
            );
        }
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            let matches: Vec<&SubnetInfo> = found
                .iter()
                .filter(|s| s.id == *item || s.tag("Name") == Some(item.as_str()))
                .collect();
            match matches.as_slice() {
                [one] => out.push((*one).clone()),
                [] => {
                    return Err(SpecError::new(
                        ANN_SUBNETS,
                        format!("no subnet {item:?} in {vpc_id}"),
                    )
                    .into());
                }
                many => {
                    return Err(SpecError::new(
                        ANN_SUBNETS,
                        format!(
                            "{item:?} names {} subnets in {vpc_id}; use subnet IDs",
                            many.len()
                        ),
                    )
                    .into());
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subnet(id: &str, zone: &str, tags: &[(&str, &str)], public: bool) -> SubnetInfo {
        SubnetInfo {
            id: id.into(),
            zone: zone.into(),
            cidr: None,
            tags: tags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            public,
        }
    }

    fn ids(list: &[SubnetInfo]) -> Vec<&str> {
        list.iter().map(|s| s.id.as_str()).collect()
    }

    #[test]
    fn local_and_wavelength_zones_are_left_out() {
        let subnets = vec![
            subnet("subnet-a", "us-east-1a", &[], true),
            subnet("subnet-b", "us-east-1-bos-1a", &[], true),
            subnet("subnet-c", "us-east-1-wl1-bos-wlz-1", &[], true),
            subnet("subnet-d", "us-east-1d", &[], true),
        ];
        let types = HashMap::from([
            ("us-east-1a", "availability-zone"),
            ("us-east-1-bos-1a", "local-zone"),
            ("us-east-1-wl1-bos-wlz-1", "wavelength-zone"),
        ]);
        assert_eq!(
            ids(&regular_zone_subnets(subnets, &types)),
            vec!["subnet-a", "subnet-d"]
        );
    }

    #[test]
    fn one_per_zone_with_preferences() {
        let tagging = ClusterTagging::new(Some("c1".into()), None);
        let subnets = vec![
            subnet("subnet-b", "z1", &[], true),
            subnet("subnet-a", "z1", &[], true),
            subnet(
                "subnet-c",
                "z2",
                &[("kubernetes.io/cluster/c1", "shared")],
                true,
            ),
            subnet("subnet-0", "z2", &[], true),
            subnet("subnet-d", "z3", &[("kubernetes.io/role/elb", "any")], true),
            subnet(
                "subnet-1",
                "z3",
                &[("kubernetes.io/cluster/c1", "owned")],
                true,
            ),
            subnet(
                "subnet-e",
                "z4",
                &[("kubernetes.io/cluster/other", "owned")],
                true,
            ),
            subnet("subnet-f", "z5", &[], false),
            subnet(
                "subnet-g",
                "z5",
                &[("kubernetes.io/role/internal-elb", "")],
                false,
            ),
        ];
        // Another cluster's subnet is never used.
        let usable = cluster_subnets(subnets.clone(), &tagging);
        assert!(!ids(&usable).contains(&"subnet-e"));
        assert_eq!(usable.len(), subnets.len() - 1);
        // Internet-facing: public only; lowest ID, then cluster tag, then role tag win.
        assert_eq!(
            ids(&choose_subnets(&usable, false, &tagging)),
            vec!["subnet-a", "subnet-c", "subnet-d"]
        );
        // Internal: private subnets too, internal role tag preferred.
        assert_eq!(
            ids(&choose_subnets(&usable, true, &tagging)),
            vec!["subnet-a", "subnet-c", "subnet-1", "subnet-g"]
        );

        assert!(choose_subnets(&[], false, &tagging).is_empty());
    }
}
