//! The security-group rule limit against moto (which itself refuses a 61st inbound rule in a VPC group): a
//! load-balancer sync that would take any group it touches past the limit fails before any rule of any
//! group changes, naming the group, the limit and how to raise it; syncs that fit still work.

use std::collections::BTreeSet;

use aws_sdk_ec2::types::{IpPermission, IpRange, ResourceType, Tag, TagSpecification};
use cloud_provider::{LoadBalancer, default_load_balancer_name};

use crate::common::{World, elb, lb_service, nlb_service, nodes_for, provider};

/// The name of a classic load balancer's own security group.
fn elb_group_name(lb_name: &str) -> String {
    format!("k8s-elb-{lb_name}")
}

/// Every inbound rule of a group as (protocol, from, to, source), whatever the source kind.
async fn all_ingress(world: &World, group: &str) -> BTreeSet<(String, i32, i32, String)> {
    let out = world
        .ec2
        .describe_security_groups()
        .group_ids(group)
        .send()
        .await
        .expect("describe security group");
    let mut rules = BTreeSet::new();
    for p in out
        .security_groups()
        .iter()
        .flat_map(|g| g.ip_permissions())
    {
        let rule = |source: &str| {
            (
                p.ip_protocol().unwrap_or_default().to_string(),
                p.from_port().unwrap_or(-1),
                p.to_port().unwrap_or(-1),
                source.to_string(),
            )
        };
        let v4 = p.ip_ranges().iter().filter_map(|r| r.cidr_ip());
        let v6 = p.ipv6_ranges().iter().filter_map(|r| r.cidr_ipv6());
        let groups = p.user_id_group_pairs().iter().filter_map(|g| g.group_id());
        let lists = p
            .prefix_list_ids()
            .iter()
            .filter_map(|l| l.prefix_list_id());
        rules.extend(v4.chain(v6).chain(groups).chain(lists).map(rule));
    }
    rules
}

/// Adds `count` SSH rules from distinct /32s of 192.0.2.0/24 and 198.51.100.0/24 (someone else's rules).
async fn fill(world: &World, group: &str, count: usize) {
    let ranges = (0..count)
        .map(|i| {
            IpRange::builder()
                .cidr_ip(format!(
                    "{}.{}/32",
                    ["192.0.2", "198.51.100"][i / 200],
                    i % 200
                ))
                .description("admin access")
                .build()
        })
        .collect();
    world
        .ec2
        .authorize_security_group_ingress()
        .group_id(group)
        .ip_permissions(
            IpPermission::builder()
                .ip_protocol("tcp")
                .from_port(22)
                .to_port(22)
                .set_ip_ranges(Some(ranges))
                .build(),
        )
        .send()
        .await
        .expect("seed rules");
}

/// The counts of the calls that change security-group rules.
fn rule_calls(cloud: &provider_aws::AwsCloud) -> (u64, u64) {
    (
        cloud
            .metrics()
            .request_count("AuthorizeSecurityGroupIngress"),
        cloud.metrics().request_count("RevokeSecurityGroupIngress"),
    )
}

/// A second cluster-tagged node group, and an instance in private subnet `index` using it.
async fn second_node_group(world: &World, index: usize) -> (String, crate::common::Instance) {
    let group = world
        .ec2
        .create_security_group()
        .group_name(format!("{}-nodes-2", world.cluster_id))
        .description("more nodes")
        .vpc_id(&world.vpc_id)
        .tag_specifications(
            TagSpecification::builder()
                .resource_type(ResourceType::SecurityGroup)
                .tags(
                    Tag::builder()
                        .key(&world.cluster_tag)
                        .value("owned")
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .expect("create security group")
        .group_id()
        .expect("group ID")
        .to_string();
    let inst = world
        .instance_with(index, &[(&world.cluster_tag, "owned")], &[&group])
        .await;
    (group, inst)
}

/// A classic ELB adds one rule (its own group as source) to the node group: with the node group at AWS's
/// default limit, a new Service is refused before its own group admits anyone or a load balancer exists,
/// and gets its load balancer once another Service made room.
#[tokio::test]
async fn classic_node_group_at_the_default_limit_refuses_a_new_load_balancer() {
    let world = World::new("sgbudgetclb").await;
    let a = world.instance(0).await;
    let nodes = nodes_for(&[a]);
    let cloud = provider(&world.config("")).await;
    fill(&world, &world.node_sg, 59).await;

    // The 60th rule fits.
    let first = lb_service("first", &[("http", 80, "TCP", 30801)], &[]);
    cloud
        .ensure_load_balancer("k", &first, &nodes)
        .await
        .expect("a Service that fits gets its load balancer");
    let full = all_ingress(&world, &world.node_sg).await;
    assert_eq!(full.len(), 60);

    // The 61st does not: nothing changes anywhere.
    let second = lb_service("second", &[("http", 80, "TCP", 30802)], &[]);
    let second_name = default_load_balancer_name(&second);
    let calls = rule_calls(&cloud);
    let err = cloud
        .ensure_load_balancer("k", &second, &nodes)
        .await
        .unwrap_err()
        .to_string();
    for fragment in [
        format!(
            "security group rule limit: node security group {} would need 61 inbound IPv4 rules (it holds 60)",
            world.node_sg
        ),
        "more than the limit of 60 (AWS's default quota of inbound rules per security group; \
         SecurityGroupRulesLimit is not set in the [Global] section of the cloud config)"
            .to_string(),
        "no security group rule was changed".to_string(),
        "raise the AWS quota \"Inbound or outbound rules per security group\" (Service Quotas code L-0EA8095F"
            .to_string(),
        "set SecurityGroupRulesLimit in the [Global] section of the cloud config".to_string(),
    ] {
        assert!(err.contains(&fragment), "{fragment:?} not in: {err}");
    }
    assert_eq!(
        rule_calls(&cloud),
        calls,
        "no rule was authorized or revoked"
    );
    assert_eq!(all_ingress(&world, &world.node_sg).await, full);
    let (own, _, _) = crate::classic::group_named(&world, &elb_group_name(&second_name))
        .await
        .expect("the load balancer's own group is found or made before the check");
    assert!(
        all_ingress(&world, &own).await.is_empty(),
        "the refused Service's own group must admit nobody"
    );
    assert!(
        crate::classic::observe_classic(&second_name)
            .await
            .is_none()
    );

    // Deleting the first Service makes room; the second then gets its load balancer.
    cloud
        .ensure_load_balancer_deleted("k", &first)
        .await
        .unwrap();
    assert_eq!(all_ingress(&world, &world.node_sg).await.len(), 59);
    cloud
        .ensure_load_balancer("k", &second, &nodes)
        .await
        .expect("the second Service fits now");
    let rules = all_ingress(&world, &world.node_sg).await;
    assert_eq!(rules.len(), 60);
    assert!(rules.contains(&("-1".to_string(), -1, -1, own.clone())));
    assert_eq!(all_ingress(&world, &own).await.len(), 2);
    cloud
        .ensure_load_balancer_deleted("k", &second)
        .await
        .unwrap();
}

/// A classic ELB's own group holds a rule per port and source range: too many for the configured limit
/// is refused before any group changes, the node group included.
#[tokio::test]
async fn classic_own_group_over_a_configured_limit_is_refused() {
    let world = World::new("sgbudgetown").await;
    let a = world.instance(0).await;
    let nodes = nodes_for(&[a]);
    let cloud = provider(&world.config("SecurityGroupRulesLimit = 5\n")).await;
    // 3 ports and 2 IPv4 ranges: 6 TCP rules and 2 ICMP rules.
    let ranges = (
        cloud_provider::ANNOTATION_LOAD_BALANCER_SOURCE_RANGES,
        "203.0.113.0/24,198.51.100.0/24",
    );
    let ports = [
        ("a", 80, "TCP", 30811),
        ("b", 81, "TCP", 30812),
        ("c", 82, "TCP", 30813),
    ];
    let svc = lb_service("wide", &ports, &[ranges]);
    let name = default_load_balancer_name(&svc);
    let calls = rule_calls(&cloud);
    let err = cloud
        .ensure_load_balancer("k", &svc, &nodes)
        .await
        .unwrap_err()
        .to_string();
    let (own, _, _) = crate::classic::group_named(&world, &elb_group_name(&name))
        .await
        .expect("own group");
    assert!(
        err.contains(&format!(
            "the load balancer's security group {own} would need 8 inbound IPv4 rules (it holds 0), more than \
             the limit of 5 (SecurityGroupRulesLimit in the [Global] section of the cloud config)"
        )),
        "{err}"
    );
    assert_eq!(rule_calls(&cloud), calls);
    assert!(all_ingress(&world, &own).await.is_empty());
    assert!(all_ingress(&world, &world.node_sg).await.is_empty());
    assert!(crate::classic::observe_classic(&name).await.is_none());

    // The same Service with two ports from one range fits (2 TCP rules and 1 ICMP rule).
    let mut svc = svc;
    let spec = svc.spec.as_mut().unwrap();
    spec.ports.as_mut().unwrap().truncate(2);
    svc.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(ranges.0.to_string(), "203.0.113.0/24".to_string());
    cloud.ensure_load_balancer("k", &svc, &nodes).await.unwrap();
    assert_eq!(all_ingress(&world, &own).await.len(), 3);
    assert_eq!(all_ingress(&world, &world.node_sg).await.len(), 1);
    cloud.ensure_load_balancer_deleted("k", &svc).await.unwrap();
}

/// An NLB adds client, health and ICMP rules to the group of each target. With two node groups, one with
/// room and one without, nothing is created and neither group changes; an update of an existing NLB that
/// would not fit leaves its rules exactly as they were.
#[tokio::test]
async fn nlb_rules_over_the_limit_change_no_group_and_create_nothing() {
    let world = World::new("sgbudgetnlb").await;
    let a = world.instance(0).await;
    let (crowded, b) = second_node_group(&world, 1).await;
    let nodes = nodes_for(&[a, b]);
    let cloud = provider(&world.config("SecurityGroupRulesLimit = 8\n")).await;
    fill(&world, &crowded, 6).await;
    let crowded_before = all_ingress(&world, &crowded).await;

    // One port from everyone: a client rule and an ICMP rule per group (health rules are not needed).
    let svc = nlb_service("budget", &[("http", 80, "TCP", 30821)], &[]);
    let name = default_load_balancer_name(&svc);
    cloud.ensure_load_balancer("k", &svc, &nodes).await.unwrap();
    let fitted_node = all_ingress(&world, &world.node_sg).await;
    let fitted_crowded = all_ingress(&world, &crowded).await;
    assert_eq!(fitted_node.len(), 2);
    assert_eq!(fitted_crowded.len(), 8);

    // Two source ranges: 2 client, 2 health (one per subnet) and 2 ICMP rules per group, the client and ICMP
    // rules from everyone revoked: the node group would hold 2 - 2 + 6 = 6 rules, which fits, the crowded
    // one 8 - 2 + 6 = 12.
    let mut narrowed = svc.clone();
    narrowed.spec.as_mut().unwrap().load_balancer_source_ranges =
        Some(vec!["203.0.113.0/24".into(), "198.51.100.0/25".into()]);
    let calls = rule_calls(&cloud);
    let err = cloud
        .ensure_load_balancer("k", &narrowed, &nodes)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!(
            "node security group {crowded} would need 12 inbound IPv4 rules (it holds 8), more than the limit \
             of 8 (SecurityGroupRulesLimit"
        )),
        "{err}"
    );
    assert_eq!(
        rule_calls(&cloud),
        calls,
        "no rule was authorized or revoked"
    );
    assert_eq!(all_ingress(&world, &world.node_sg).await, fitted_node);
    assert_eq!(all_ingress(&world, &crowded).await, fitted_crowded);

    // A new NLB that would not fit is not created at all.
    let other = nlb_service("budget-new", &[("http", 80, "TCP", 30822)], &[]);
    let err = cloud
        .ensure_load_balancer("k", &other, &nodes)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!("node security group {crowded}")),
        "{err}"
    );
    let found = elb()
        .describe_load_balancers()
        .names(default_load_balancer_name(&other))
        .send()
        .await;
    assert!(found.is_err(), "the refused NLB must not exist");
    assert_eq!(all_ingress(&world, &world.node_sg).await, fitted_node);
    assert_eq!(all_ingress(&world, &crowded).await, fitted_crowded);

    // Deleting never meets the limit, and leaves the other rules of the groups alone.
    cloud.ensure_load_balancer_deleted("k", &svc).await.unwrap();
    assert!(all_ingress(&world, &world.node_sg).await.is_empty());
    assert_eq!(all_ingress(&world, &crowded).await, crowded_before);
    let found = elb().describe_load_balancers().names(&name).send().await;
    assert!(found.is_err());
}
