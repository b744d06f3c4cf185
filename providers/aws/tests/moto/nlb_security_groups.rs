//! Security groups of network load balancers against moto: `NLBSecurityGroupMode = Managed` (a group of its
//! own per load balancer, named, described, tagged and filled as upstream does it, deleted with the
//! Service), the security-groups annotation on network load balancers, and the mode off (no group, the
//! annotation ignored).

use aws_sdk_ec2::types::SecurityGroup;
use cloud_provider::{LoadBalancer, default_load_balancer_name};
use k8s_openapi::api::core::v1::{Node, Service};
use provider_aws::load_balancer::nlb_security_group::{
    MANAGED_GROUP_DESCRIPTION, managed_group_name,
};
use provider_aws::load_balancer::spec::{ANN_ADDITIONAL_TAGS, ANN_SECURITY_GROUPS};

use crate::common::{World, elb, filter, nlb_service, nodes_for, provider, sg_rules};

const MANAGED: &str = "NLBSecurityGroupMode = Managed";

/// The security groups of the load balancer named `name`.
async fn lb_groups(name: &str) -> Vec<String> {
    let out = elb()
        .describe_load_balancers()
        .names(name)
        .send()
        .await
        .expect("describe load balancer");
    let mut groups = out.load_balancers()[0].security_groups().to_vec();
    groups.sort();
    groups
}

/// The Service's managed group, when it exists.
async fn managed_group(world: &World, svc: &Service) -> Option<SecurityGroup> {
    let name = managed_group_name(
        "kubernetes",
        "default",
        svc.metadata.name.as_deref().unwrap(),
        svc.metadata.uid.as_deref().unwrap(),
    );
    let out = world
        .ec2
        .describe_security_groups()
        .filters(filter("group-name", &[&name]))
        .filters(filter("vpc-id", &[&world.vpc_id]))
        .send()
        .await
        .expect("describe security groups");
    out.security_groups().first().cloned()
}

async fn group_exists(world: &World, id: &str) -> bool {
    world
        .ec2
        .describe_security_groups()
        .filters(filter("group-id", &[id]))
        .send()
        .await
        .expect("describe security groups")
        .security_groups()
        .iter()
        .any(|g| g.group_id() == Some(id))
}

fn rule(protocol: &str, from: i32, to: i32, cidr: &str) -> (String, i32, i32, String, String) {
    (protocol.into(), from, to, cidr.into(), String::new())
}

fn set_source_ranges(svc: &mut Service, ranges: &[&str]) {
    svc.spec.as_mut().unwrap().load_balancer_source_ranges =
        Some(ranges.iter().map(|r| r.to_string()).collect());
}

fn annotate(svc: &mut Service, key: &str, value: Option<&str>) {
    let annotations = svc.metadata.annotations.get_or_insert_default();
    match value {
        Some(v) => annotations.insert(key.to_string(), v.to_string()),
        None => annotations.remove(key),
    };
}

/// In managed mode a new network load balancer gets a group of its own: upstream's name, description and
/// tags, one inbound rule per listener port and client range plus ICMP fragmentation-needed, kept exactly so
/// as the source ranges change; a second sync changes nothing; deleting the Service deletes the group after
/// the load balancer, and the node rules stay CIDR rules throughout.
#[tokio::test]
async fn managed_group_lifecycle() {
    let world = World::new("nlbsgmanaged").await;
    let a = world.instance(0).await;
    let nodes: Vec<Node> = nodes_for(std::slice::from_ref(&a));
    let cloud = provider(&world.config(MANAGED)).await;
    let mut svc = nlb_service(
        "web",
        &[("http", 80, "TCP", 31080), ("https", 443, "TCP", 31443)],
        &[(ANN_ADDITIONAL_TAGS, "team=web")],
    );
    let name = default_load_balancer_name(&svc);
    cloud
        .ensure_load_balancer("kubernetes", &svc, &nodes)
        .await
        .unwrap();

    let group = managed_group(&world, &svc)
        .await
        .expect("managed group created");
    let id = group.group_id().unwrap().to_string();
    assert_eq!(group.description(), Some(MANAGED_GROUP_DESCRIPTION));
    let tags: Vec<(String, String)> = group
        .tags()
        .iter()
        .map(|t| (t.key().unwrap().to_string(), t.value().unwrap().to_string()))
        .collect();
    assert!(
        tags.contains(&(world.cluster_tag.clone(), "owned".into())),
        "{tags:?}"
    );
    assert!(tags.contains(&("team".into(), "web".into())), "{tags:?}");
    assert_eq!(lb_groups(&name).await, vec![id.clone()]);
    assert_eq!(
        sg_rules(&world.ec2, &id).await,
        vec![
            rule("icmp", 3, 4, "0.0.0.0/0"),
            rule("tcp", 80, 80, "0.0.0.0/0"),
            rule("tcp", 443, 443, "0.0.0.0/0"),
        ]
    );
    // The nodes admit the clients by address, never by the load balancer's group.
    let node_rules = sg_rules(&world.ec2, &world.node_sg).await;
    assert!(
        node_rules
            .iter()
            .any(|r| r.1 == 31080 && r.4 == format!("kubernetes.io/rule/nlb/client={name}")),
        "{node_rules:?}"
    );

    set_source_ranges(&mut svc, &["10.1.0.0/16", "192.168.0.0/24"]);
    cloud
        .ensure_load_balancer("kubernetes", &svc, &nodes)
        .await
        .unwrap();
    assert_eq!(
        sg_rules(&world.ec2, &id).await,
        vec![
            rule("icmp", 3, 4, "10.1.0.0/16"),
            rule("icmp", 3, 4, "192.168.0.0/24"),
            rule("tcp", 80, 80, "10.1.0.0/16"),
            rule("tcp", 80, 80, "192.168.0.0/24"),
            rule("tcp", 443, 443, "10.1.0.0/16"),
            rule("tcp", 443, 443, "192.168.0.0/24"),
        ]
    );
    // Synced again: the same group, nothing new.
    cloud
        .ensure_load_balancer("kubernetes", &svc, &nodes)
        .await
        .unwrap();
    assert_eq!(lb_groups(&name).await, vec![id.clone()]);
    assert_eq!(sg_rules(&world.ec2, &id).await.len(), 6);

    cloud
        .ensure_load_balancer_deleted("kubernetes", &svc)
        .await
        .unwrap();
    assert!(
        !group_exists(&world, &id).await,
        "the managed group goes with the Service"
    );
    assert!(sg_rules(&world.ec2, &world.node_sg).await.is_empty());
    // Deleting again finds nothing to do.
    cloud
        .ensure_load_balancer_deleted("kubernetes", &svc)
        .await
        .unwrap();
}

/// The security-groups annotation on a network load balancer in managed mode: the annotated groups are the
/// load balancer's and no group is managed (nor are rules written to them); removing the annotation brings
/// the managed group (the user's groups are detached, never deleted); annotating again detaches the managed
/// group and deletes it. Deleting the Service never deletes an annotated group.
#[tokio::test]
async fn annotated_groups_take_the_place_of_the_managed_one() {
    let world = World::new("nlbsgbyo").await;
    let a = world.instance(0).await;
    let nodes: Vec<Node> = nodes_for(std::slice::from_ref(&a));
    let cloud = provider(&world.config(MANAGED)).await;
    let mine = world.user_security_group("nlbsgbyo-user").await;
    let mut svc = nlb_service(
        "byo",
        &[("http", 80, "TCP", 31180)],
        &[(ANN_SECURITY_GROUPS, &mine)],
    );
    let name = default_load_balancer_name(&svc);
    cloud
        .ensure_load_balancer("kubernetes", &svc, &nodes)
        .await
        .unwrap();
    assert_eq!(lb_groups(&name).await, vec![mine.clone()]);
    assert!(managed_group(&world, &svc).await.is_none());
    assert!(
        sg_rules(&world.ec2, &mine).await.is_empty(),
        "the user's rules are the user's"
    );

    annotate(&mut svc, ANN_SECURITY_GROUPS, None);
    cloud
        .ensure_load_balancer("kubernetes", &svc, &nodes)
        .await
        .unwrap();
    let managed = managed_group(&world, &svc)
        .await
        .expect("managed group created");
    let managed = managed.group_id().unwrap().to_string();
    assert_eq!(lb_groups(&name).await, vec![managed.clone()]);
    assert!(group_exists(&world, &mine).await);

    annotate(&mut svc, ANN_SECURITY_GROUPS, Some(&mine));
    cloud
        .ensure_load_balancer("kubernetes", &svc, &nodes)
        .await
        .unwrap();
    assert_eq!(lb_groups(&name).await, vec![mine.clone()]);
    assert!(
        !group_exists(&world, &managed).await,
        "the detached managed group is deleted"
    );

    cloud
        .ensure_load_balancer_deleted("kubernetes", &svc)
        .await
        .unwrap();
    assert!(
        group_exists(&world, &mine).await,
        "an annotated group is never deleted"
    );
}

/// Without managed mode a network load balancer gets no security group and the annotation is ignored, as
/// upstream; switching the mode on later leaves a load balancer created without groups as it is (AWS cannot
/// add groups to it), while a new one gets its managed group.
#[tokio::test]
async fn without_managed_mode_no_group_and_no_retrofit() {
    let world = World::new("nlbsgoff").await;
    let a = world.instance(0).await;
    let nodes: Vec<Node> = nodes_for(std::slice::from_ref(&a));
    let off = provider(&world.config("")).await;
    let mine = world.user_security_group("nlbsgoff-user").await;
    let svc = nlb_service(
        "plain",
        &[("http", 80, "TCP", 31280)],
        &[(ANN_SECURITY_GROUPS, &mine)],
    );
    let name = default_load_balancer_name(&svc);
    off.ensure_load_balancer("kubernetes", &svc, &nodes)
        .await
        .unwrap();
    assert!(lb_groups(&name).await.is_empty());

    let managed = provider(&world.config(MANAGED)).await;
    let plain = nlb_service("plain2", &[("http", 80, "TCP", 31281)], &[]);
    off.ensure_load_balancer("kubernetes", &plain, &nodes)
        .await
        .unwrap();
    managed
        .ensure_load_balancer("kubernetes", &plain, &nodes)
        .await
        .unwrap();
    assert!(
        lb_groups(&default_load_balancer_name(&plain))
            .await
            .is_empty()
    );
    assert!(managed_group(&world, &plain).await.is_none());

    let fresh = nlb_service("fresh", &[("http", 80, "TCP", 31282)], &[]);
    managed
        .ensure_load_balancer("kubernetes", &fresh, &nodes)
        .await
        .unwrap();
    assert_eq!(
        lb_groups(&default_load_balancer_name(&fresh)).await.len(),
        1
    );

    for s in [&svc, &plain, &fresh] {
        managed
            .ensure_load_balancer_deleted("kubernetes", s)
            .await
            .unwrap();
    }
    assert!(managed_group(&world, &fresh).await.is_none());
    assert!(group_exists(&world, &mine).await);
}

/// A mode upstream does not know starts (as upstream starts), and fails every NLB sync with upstream's
/// error while classic ELBs and deletions work.
#[tokio::test]
async fn a_bad_mode_fails_only_network_load_balancer_syncs() {
    let world = World::new("nlbsgbad").await;
    let a = world.instance(0).await;
    let nodes: Vec<Node> = nodes_for(std::slice::from_ref(&a));
    let cloud = provider(&world.config("NLBSecurityGroupMode = managed")).await;
    let nlb = nlb_service("bad", &[("http", 80, "TCP", 31380)], &[]);
    let err = cloud
        .ensure_load_balancer("kubernetes", &nlb, &nodes)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains(
            "error ensuring NLB security group: error checking NLB security group mode: invalid NLB \
             security group mode: \"managed\". Expected: \"Managed\""
        ),
        "{err}"
    );
    assert_eq!(cloud.metrics().mutating_calls(), Default::default());
    cloud
        .ensure_load_balancer_deleted("kubernetes", &nlb)
        .await
        .unwrap();
    let classic = crate::common::lb_service("classic", &[("http", 80, "TCP", 31381)], &[]);
    cloud
        .ensure_load_balancer("kubernetes", &classic, &nodes)
        .await
        .unwrap();
    cloud
        .ensure_load_balancer_deleted("kubernetes", &classic)
        .await
        .unwrap();
}
