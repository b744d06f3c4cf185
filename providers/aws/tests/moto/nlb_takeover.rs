//! Takeover of network load balancers from the upstream AWS provider: moto is seeded with NLBs shaped
//! exactly as kubernetes/cloud-provider-aws creates them (target-group names, tags, listeners, health
//! checks, attributes, registrations and node rules with upstream's descriptions), then this provider syncs
//! the same Services and nodes. There must be no mutating AWS call.

use aws_sdk_ec2::types::{IpPermission, IpRange};
use aws_sdk_elasticloadbalancingv2::types::{
    Action, ActionTypeEnum, LoadBalancerAttribute, LoadBalancerSchemeEnum, LoadBalancerTypeEnum,
    ProtocolEnum, Tag, TargetDescription, TargetTypeEnum,
};
use cloud_provider::{LoadBalancer, default_load_balancer_name};
use k8s_openapi::api::core::v1::Service;
use sha1::{Digest, Sha1};

use crate::common::{Instance, World, elb, nlb_service, nodes_for, provider};

/// Upstream's target-group name, computed here independently of the provider's code.
fn upstream_target_group_name(
    cluster: &str,
    svc: &Service,
    port: i32,
    node_port: i32,
    hc_protocol: &str,
    interval: i32,
) -> String {
    let (ns, name) = ("default", svc.metadata.name.as_deref().unwrap());
    let text = format!("{cluster}{ns}{name}{port}{node_port}TCPinstance{hc_protocol}{interval}");
    let digest: String = Sha1::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let clean = |s: &str| -> String {
        s.chars()
            .filter(char::is_ascii_alphanumeric)
            .take(8)
            .collect()
    };
    format!("k8s-{}-{}-{}", clean(ns), clean(name), &digest[..10])
}

/// The health check upstream gives a target group: `(protocol, port, path, interval, threshold)`.
type UpstreamHealthCheck<'a> = (&'a str, &'a str, Option<&'a str>, i32, i32);

/// Creates what upstream's EnsureLoadBalancer leaves for a one-port TCP Service: the NLB (internal in the
/// private subnets, else in the public ones), the target group with the targets, the listener and the attributes.
async fn seed_upstream_nlb(
    world: &World,
    svc: &Service,
    internal: bool,
    (port, node_port): (i32, i32),
    hc: UpstreamHealthCheck<'_>,
    targets: &[&Instance],
) {
    let elb = elb();
    let name = default_load_balancer_name(svc);
    let tags: Vec<Tag> = [
        (world.cluster_tag.as_str(), "owned"),
        (
            "kubernetes.io/service-name",
            &format!("default/{}", svc.metadata.name.as_deref().unwrap()),
        ),
    ]
    .iter()
    .map(|(k, v)| Tag::builder().key(*k).value(*v).build())
    .collect();
    let lb = elb
        .create_load_balancer()
        .name(&name)
        .r#type(LoadBalancerTypeEnum::Network)
        .scheme(if internal {
            LoadBalancerSchemeEnum::Internal
        } else {
            LoadBalancerSchemeEnum::InternetFacing
        })
        .set_subnets(Some(
            if internal {
                &world.private_subnets
            } else {
                &world.public_subnets
            }
            .iter()
            .map(|s| s.0.clone())
            .collect(),
        ))
        .set_tags(Some(tags.clone()))
        .send()
        .await
        .unwrap();
    let lb_arn = lb.load_balancers()[0]
        .load_balancer_arn()
        .unwrap()
        .to_string();
    let (protocol, hc_port, path, interval, threshold) = hc;
    let tg_name =
        upstream_target_group_name(&world.cluster_id, svc, port, node_port, protocol, interval);
    let tg = elb
        .create_target_group()
        .name(&tg_name)
        .protocol(ProtocolEnum::Tcp)
        .port(node_port)
        .vpc_id(&world.vpc_id)
        .target_type(TargetTypeEnum::Instance)
        .health_check_protocol(ProtocolEnum::from(protocol))
        .health_check_port(hc_port)
        .set_health_check_path(path.map(str::to_string))
        .health_check_interval_seconds(interval)
        .healthy_threshold_count(threshold)
        .unhealthy_threshold_count(threshold)
        .set_tags(Some(tags.clone()))
        .send()
        .await
        .unwrap();
    let tg_arn = tg.target_groups()[0]
        .target_group_arn()
        .unwrap()
        .to_string();
    elb.register_targets()
        .target_group_arn(&tg_arn)
        .set_targets(Some(
            targets
                .iter()
                .map(|i| {
                    TargetDescription::builder()
                        .id(&i.id)
                        .port(node_port)
                        .build()
                })
                .collect(),
        ))
        .send()
        .await
        .unwrap();
    elb.create_listener()
        .load_balancer_arn(&lb_arn)
        .port(port)
        .protocol(ProtocolEnum::Tcp)
        .default_actions(
            Action::builder()
                .r#type(ActionTypeEnum::Forward)
                .target_group_arn(&tg_arn)
                .build(),
        )
        .set_tags(Some(tags))
        .send()
        .await
        .unwrap();
    elb.modify_load_balancer_attributes()
        .load_balancer_arn(&lb_arn)
        .attributes(
            LoadBalancerAttribute::builder()
                .key("access_logs.s3.enabled")
                .value("false")
                .build(),
        )
        .send()
        .await
        .unwrap();
}

/// Adds node rules as upstream writes them: `(protocol, from, to, cidr, description)`.
async fn seed_rules(world: &World, rules: &[(&str, i32, i32, &str, &str)]) {
    let permissions: Vec<IpPermission> = rules
        .iter()
        .map(|(protocol, from, to, cidr, description)| {
            IpPermission::builder()
                .ip_protocol(*protocol)
                .from_port(*from)
                .to_port(*to)
                .ip_ranges(
                    IpRange::builder()
                        .cidr_ip(*cidr)
                        .description(*description)
                        .build(),
                )
                .build()
        })
        .collect();
    world
        .ec2
        .authorize_security_group_ingress()
        .group_id(&world.node_sg)
        .set_ip_permissions(Some(permissions))
        .send()
        .await
        .unwrap();
}

#[tokio::test]
async fn upstream_network_load_balancers_are_adopted_without_changes() {
    let world = World::new("nlbtakeover").await;
    let a = world.instance(0).await;
    let b = world.instance(1).await;
    let nodes = nodes_for(&[a.clone(), b.clone()]);

    // An internet-facing NLB of a Cluster-policy Service: TCP health check on the traffic port, so the
    // client rule from everyone covers it and upstream writes no health rule.
    let open = nlb_service("open", &[("http", 80, "TCP", 31001)], &[]);
    seed_upstream_nlb(
        &world,
        &open,
        false,
        (80, 31001),
        ("TCP", "traffic-port", None, 30, 3),
        &[&a, &b],
    )
    .await;
    let open_name = default_load_balancer_name(&open);
    let client = format!("kubernetes.io/rule/nlb/client={open_name}");

    // A Local-policy Service with source ranges: HTTP health check on the health-check node port from the
    // load balancer's subnets.
    let mut local = nlb_service("local", &[("http", 80, "TCP", 31002)], &[]);
    let spec = local.spec.as_mut().unwrap();
    spec.external_traffic_policy = Some("Local".into());
    spec.health_check_node_port = Some(32002);
    spec.load_balancer_source_ranges = Some(vec!["192.168.0.0/16".into()]);
    seed_upstream_nlb(
        &world,
        &local,
        false,
        (80, 31002),
        ("HTTP", "32002", Some("/healthz"), 10, 2),
        &[&a, &b],
    )
    .await;
    let local_name = default_load_balancer_name(&local);
    let local_client = format!("kubernetes.io/rule/nlb/client={local_name}");
    let local_health = format!("kubernetes.io/rule/nlb/health={local_name}");

    // An internal NLB without source ranges: its clients are everyone too (not only the VPC).
    let internal = nlb_service(
        "internal",
        &[("grpc", 9000, "TCP", 31003)],
        &[(provider_aws::load_balancer::spec::ANN_INTERNAL, "true")],
    );
    seed_upstream_nlb(
        &world,
        &internal,
        true,
        (9000, 31003),
        ("TCP", "traffic-port", None, 30, 3),
        &[&a, &b],
    )
    .await;
    let internal_client = format!(
        "kubernetes.io/rule/nlb/client={}",
        default_load_balancer_name(&internal)
    );

    let mut rules = vec![
        ("tcp", 31001, 31001, "0.0.0.0/0", client.as_str()),
        ("icmp", 3, 4, "0.0.0.0/0", "kubernetes.io/rule/nlb/mtu"),
        ("tcp", 31002, 31002, "192.168.0.0/16", local_client.as_str()),
        ("icmp", 3, 4, "192.168.0.0/16", "kubernetes.io/rule/nlb/mtu"),
        ("tcp", 31003, 31003, "0.0.0.0/0", internal_client.as_str()),
    ];
    for (_, _, cidr) in &world.public_subnets {
        rules.push(("tcp", 32002, 32002, cidr.as_str(), local_health.as_str()));
    }
    seed_rules(&world, &rules).await;

    // The upstream cloud config, as it is, starts this provider.
    let cloud = provider(&crate::takeover::upstream_cloud_config(&world)).await;
    for svc in [&open, &local, &internal] {
        let status = cloud
            .ensure_load_balancer("kubernetes", svc, &nodes)
            .await
            .unwrap();
        assert!(status.ingress.is_some(), "{status:?}");
        cloud
            .update_load_balancer("kubernetes", svc, &nodes)
            .await
            .unwrap();
    }
    assert!(
        cloud.metrics().mutating_calls().is_empty(),
        "{:?}",
        cloud.metrics().mutating_calls()
    );
    for svc in [&open, &local, &internal] {
        cloud
            .ensure_load_balancer_deleted("kubernetes", svc)
            .await
            .unwrap();
    }
}
