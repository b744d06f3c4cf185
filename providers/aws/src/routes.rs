//! Pod-network routes in the cluster's VPC route table.
//!
//! The table is `[Global] RouteTableID`, else the single table tagged for the cluster
//! (`kubernetes.io/cluster/<id>`, or the legacy `KubernetesCluster=<id>`). A route sends a
//! node's pod CIDR to the node's instance; creating one disables the instance's source/destination check
//! (it forwards traffic that is not addressed to it) and first removes a blackhole route for the same CIDR.
//! Routes are listed with the name `<cluster>-<cidr>`; the target node is the name the route was created
//! for, else the instance's private DNS name.

use std::collections::{BTreeSet, HashMap};

use aws_sdk_ec2::types::{Filter, RouteTable};
use cloud_provider::{CloudError, Result, Route, Routes};

use crate::cloud::{AwsCloud, filter};
use crate::error::SdkResultExt;
use crate::instances::{InstanceRef, instance_ref_for_name};
use crate::paginate::for_each_page;
use crate::tagging::TAG_LEGACY_CLUSTER;

/// A route as found in the route table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RouteEntry {
    pub(crate) destination: String,
    pub(crate) instance_id: Option<String>,
    pub(crate) blackhole: bool,
}

impl RouteEntry {
    fn from_table(table: &RouteTable) -> Vec<RouteEntry> {
        table
            .routes()
            .iter()
            .filter_map(|r| {
                let destination = r
                    .destination_cidr_block()
                    .or(r.destination_ipv6_cidr_block())?
                    .to_string();
                Some(RouteEntry {
                    destination,
                    instance_id: r.instance_id().map(str::to_string),
                    blackhole: r.state().map(|s| s.as_str()) == Some("blackhole"),
                })
            })
            .collect()
    }
}

/// The routes the route controller manages: blackholes and routes to instances (routes to gateways, NAT
/// devices and the VPC's local route are not node routes).
pub(crate) fn node_routes(
    cluster_name: &str,
    entries: &[RouteEntry],
    node_names: &HashMap<String, String>,
) -> Vec<Route> {
    entries
        .iter()
        .filter_map(|e| {
            let name = format!("{cluster_name}-{}", e.destination);
            if e.blackhole {
                return Some(Route {
                    name,
                    destination_cidr: e.destination.clone(),
                    blackhole: true,
                    ..Default::default()
                });
            }
            let instance = e.instance_id.as_ref()?;
            let Some(node) = node_names.get(instance) else {
                tracing::warn!(instance = %instance, cidr = %e.destination, "route to an unknown instance; ignoring it");
                return None;
            };
            Some(Route {
                name,
                target_node: node.clone(),
                destination_cidr: e.destination.clone(),
                blackhole: false,
                ..Default::default()
            })
        })
        .collect()
}

/// What creating a route for `cidr` to `instance_id` takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CreateStep {
    /// The route exists already.
    Done,
    /// Remove the blackhole route for the CIDR, then create.
    ReplaceBlackhole,
    /// Create the route.
    Create,
}

/// Decides how to create the route for `cidr`.
pub(crate) fn create_step(entries: &[RouteEntry], cidr: &str, instance_id: &str) -> CreateStep {
    match entries.iter().find(|e| same_cidr(&e.destination, cidr)) {
        Some(e) if e.blackhole => CreateStep::ReplaceBlackhole,
        Some(e) if e.instance_id.as_deref() == Some(instance_id) => CreateStep::Done,
        _ => CreateStep::Create,
    }
}

fn same_cidr(a: &str, b: &str) -> bool {
    match (a.parse::<ipnet::IpNet>(), b.parse::<ipnet::IpNet>()) {
        (Ok(x), Ok(y)) => x.trunc() == y.trunc(),
        _ => a == b,
    }
}

fn is_ipv6(cidr: &str) -> bool {
    cidr.contains(':')
}

impl AwsCloud {
    /// Every page of a DescribeRouteTables query.
    pub(crate) async fn describe_route_tables(
        &self,
        filters: Vec<Filter>,
    ) -> Result<Vec<RouteTable>> {
        let mut out = Vec::new();
        for_each_page(
            |token| {
                self.clients
                    .ec2
                    .describe_route_tables()
                    .set_filters(Some(filters.clone()))
                    .max_results(100)
                    .set_next_token(token)
                    .send()
            },
            |page| page.next_token(),
            |page| out.extend(page.route_tables().iter().cloned()),
        )
        .await
        .api("DescribeRouteTables")?;
        Ok(out)
    }

    /// The route tables tagged for the cluster, as upstream finds them: `kubernetes.io/cluster/<id>` (any
    /// value) or the legacy `KubernetesCluster=<id>`.
    async fn tagged_route_tables(&self, key: String) -> Result<Vec<RouteTable>> {
        let legacy = self
            .tagging
            .legacy_tag_value()
            .unwrap_or_default()
            .to_string();
        let mut tables = self
            .describe_route_tables(vec![filter("tag-key", [key])])
            .await?;
        let legacy_tables = self
            .describe_route_tables(vec![filter(&format!("tag:{TAG_LEGACY_CLUSTER}"), [legacy])])
            .await?;
        for table in legacy_tables {
            if !tables
                .iter()
                .any(|t| t.route_table_id() == table.route_table_id())
            {
                tables.push(table);
            }
        }
        tables.retain(|t| {
            let tags = t.tags().iter();
            self.tagging.is_ours(tags.map(|tag| {
                (
                    tag.key().unwrap_or_default(),
                    tag.value().unwrap_or_default(),
                )
            }))
        });
        Ok(tables)
    }

    /// The cluster's route table.
    async fn route_table(&self) -> Result<RouteTable> {
        let tables = match (&self.config.route_table_id, self.tagging.cluster_tag_key()) {
            (Some(id), _) => {
                self.describe_route_tables(vec![filter("route-table-id", [id.as_str()])])
                    .await?
            }
            (None, Some(key)) => self.tagged_route_tables(key).await?,
            (None, None) => {
                return Err(CloudError::provider(
                    "routes need [Global] RouteTableID in the cloud config when the cluster has no cluster ID",
                ));
            }
        };
        let tagged = || {
            format!(
                "tagged {} or {TAG_LEGACY_CLUSTER}={}",
                self.tagging.cluster_tag_key().unwrap_or_default(),
                self.tagging.legacy_tag_value().unwrap_or_default()
            )
        };
        match tables.as_slice() {
            [one] => Ok(one.clone()),
            [] => Err(CloudError::provider(match &self.config.route_table_id {
                Some(id) => format!("route table {id} ([Global] RouteTableID) does not exist"),
                None => format!(
                    "found no route table {}; tag the cluster's route table or set [Global] RouteTableID",
                    tagged()
                ),
            })),
            many => Err(CloudError::provider(format!(
                "found {} route tables {} ({}); set [Global] RouteTableID to choose one",
                many.len(),
                tagged(),
                many.iter()
                    .filter_map(|t| t.route_table_id())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }

    fn table_id(table: &RouteTable) -> Result<String> {
        table
            .route_table_id()
            .map(str::to_string)
            .ok_or_else(|| CloudError::provider("route table without an ID"))
    }

    async fn delete_route_in(&self, table_id: &str, cidr: &str) -> Result<()> {
        let mut call = self.clients.ec2.delete_route().route_table_id(table_id);
        call = if is_ipv6(cidr) {
            call.destination_ipv6_cidr_block(cidr)
        } else {
            call.destination_cidr_block(cidr)
        };
        match call.send().await.api("DeleteRoute") {
            Ok(_) => Ok(()),
            Err(e) if e.is_code("InvalidRoute.NotFound") => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

#[async_trait::async_trait]
impl Routes for AwsCloud {
    async fn list_routes(&self, cluster_name: &str) -> Result<Vec<Route>> {
        let table = self.route_table().await?;
        let entries = RouteEntry::from_table(&table);
        let ids: Vec<String> = entries
            .iter()
            .filter(|e| !e.blackhole)
            .filter_map(|e| e.instance_id.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut names: HashMap<String, String> = HashMap::new();
        if !ids.is_empty() {
            let learnt = self.route_targets.0.lock().clone();
            for (id, inst) in self.instances_by_id(&ids).await? {
                let name = learnt.get(&id).cloned().or_else(|| {
                    inst.map(|i| i.private_dns_name.clone())
                        .filter(|n| !n.is_empty())
                });
                if let Some(name) = name {
                    names.insert(id, name);
                }
            }
        }
        Ok(node_routes(cluster_name, &entries, &names))
    }

    async fn create_route(
        &self,
        _cluster_name: &str,
        _name_hint: &str,
        route: &Route,
    ) -> Result<()> {
        let id = match instance_ref_for_name(&route.target_node) {
            InstanceRef::Id(id) => id,
            r => match self.resolve_one(r).await? {
                Some(inst) => inst.id.clone(),
                None => return Err(CloudError::InstanceNotFound),
            },
        };
        // Fresh data: the source/destination check may have been changed since the last read.
        let inst = self
            .fetch_instances(std::slice::from_ref(&id))
            .await?
            .remove(&id)
            .flatten()
            .filter(|i| i.state != "terminated")
            .ok_or(CloudError::InstanceNotFound)?;
        if inst.source_dest_check != Some(false) {
            tracing::info!(instance = %inst.id, "disabling source/destination check for pod routes");
            self.clients
                .ec2
                .modify_instance_attribute()
                .instance_id(&inst.id)
                .source_dest_check(
                    aws_sdk_ec2::types::AttributeBooleanValue::builder()
                        .value(false)
                        .build(),
                )
                .send()
                .await
                .api("ModifyInstanceAttribute")?;
            self.instances.invalidate(&inst.id);
        }
        let table = self.route_table().await?;
        let table_id = Self::table_id(&table)?;
        let cidr = route.destination_cidr.as_str();
        match create_step(&RouteEntry::from_table(&table), cidr, &inst.id) {
            CreateStep::Done => {}
            step => {
                if step == CreateStep::ReplaceBlackhole {
                    tracing::info!(table = %table_id, cidr, "removing blackhole route");
                    self.delete_route_in(&table_id, cidr).await?;
                }
                tracing::info!(table = %table_id, cidr, instance = %inst.id, node = %route.target_node, "creating route");
                let mut call = self
                    .clients
                    .ec2
                    .create_route()
                    .route_table_id(&table_id)
                    .instance_id(&inst.id);
                call = if is_ipv6(cidr) {
                    call.destination_ipv6_cidr_block(cidr)
                } else {
                    call.destination_cidr_block(cidr)
                };
                call.send().await.api("CreateRoute")?;
            }
        }
        self.route_targets
            .0
            .lock()
            .insert(inst.id.clone(), route.target_node.clone());
        Ok(())
    }

    async fn delete_route(&self, _cluster_name: &str, route: &Route) -> Result<()> {
        let table = self.route_table().await?;
        let table_id = Self::table_id(&table)?;
        tracing::info!(table = %table_id, cidr = %route.destination_cidr, node = %route.target_node, "deleting route");
        self.delete_route_in(&table_id, &route.destination_cidr)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(dest: &str, instance: Option<&str>, blackhole: bool) -> RouteEntry {
        RouteEntry {
            destination: dest.into(),
            instance_id: instance.map(str::to_string),
            blackhole,
        }
    }

    /// moto never turns routes into blackholes, so listing and replacing them is covered here.
    #[test]
    fn listing_flags_blackholes_and_skips_gateway_routes() {
        let entries = vec![
            entry("10.0.0.0/16", None, false),
            entry("0.0.0.0/0", None, false),
            entry("10.244.1.0/24", Some("i-1"), false),
            entry("10.244.2.0/24", Some("i-gone"), true),
            entry("10.244.3.0/24", Some("i-unknown"), false),
            entry("fd00:10:244:4::/64", Some("i-1"), false),
        ];
        let names = HashMap::from([("i-1".to_string(), "node-a".to_string())]);
        let routes = node_routes("prod", &entries, &names);
        assert_eq!(routes.len(), 3);
        assert_eq!(routes[0].name, "prod-10.244.1.0/24");
        assert_eq!(routes[0].target_node, "node-a");
        assert!(!routes[0].blackhole);
        assert_eq!(routes[1].name, "prod-10.244.2.0/24");
        assert!(routes[1].blackhole);
        assert_eq!(routes[1].target_node, "");
        assert_eq!(routes[2].destination_cidr, "fd00:10:244:4::/64");
    }

    #[test]
    fn creation_steps() {
        let entries = vec![
            entry("10.244.1.0/24", Some("i-1"), false),
            entry("10.244.2.0/24", Some("i-old"), true),
            entry("10.244.3.0/24", Some("i-2"), false),
        ];
        assert_eq!(
            create_step(&entries, "10.244.1.0/24", "i-1"),
            CreateStep::Done
        );
        assert_eq!(
            create_step(&entries, "10.244.2.0/24", "i-1"),
            CreateStep::ReplaceBlackhole
        );
        assert_eq!(
            create_step(&entries, "10.244.4.0/24", "i-1"),
            CreateStep::Create
        );
        // A live route of another instance is left for EC2 to refuse (the controller replaces routes by
        // deleting first).
        assert_eq!(
            create_step(&entries, "10.244.3.0/24", "i-1"),
            CreateStep::Create
        );
        assert!(same_cidr("10.244.1.0/24", "10.244.1.7/24"));
        assert!(is_ipv6("fd00::/64"));
    }
}
