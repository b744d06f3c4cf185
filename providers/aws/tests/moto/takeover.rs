//! Takeover from the upstream AWS provider: moto is seeded with load balancers, security groups and rules
//! shaped exactly as kubernetes/cloud-provider-aws creates them (names, descriptions, tags, listeners,
//! policies, health checks, attributes, node rules, registrations), then this provider syncs the same
//! Services and nodes. Every mutating AWS call is counted: there must be none, and the load balancers keep
//! their DNS names.

use aws_sdk_ec2::types::{
    IpPermission, IpRange, ResourceType, Tag, TagSpecification, UserIdGroupPair,
};
use aws_sdk_elasticloadbalancing::types::{
    AccessLog, ConnectionDraining, ConnectionSettings, CrossZoneLoadBalancing, HealthCheck,
    Instance as ElbInstance, Listener, LoadBalancerAttributes, PolicyAttribute, Tag as ElbTag,
};
use cloud_provider::{LoadBalancer, default_load_balancer_name};
use k8s_openapi::api::core::v1::Service;
use provider_aws::load_balancer::classic::spec::*;
use provider_aws::load_balancer::spec::*;

use crate::classic::observe_classic;
use crate::common::{Instance, REGION, World, elb_classic, lb_service, moto, nodes_for, provider};

/// An IAM server-certificate ARN (moto checks only ACM ARNs).
const CERT: &str = "arn:aws:iam::123456789012:server-certificate/takeover";

/// Every annotation family of a classic ELB at once: internal, TLS on one port with an SSL backend and a
/// negotiation policy, proxy protocol, attributes, health-check overrides and extra tags.
pub const CLASSIC_TLS_ANNOTATIONS: &[(&str, &str)] = &[
    (ANN_INTERNAL, "true"),
    (ANN_SSL_CERT, CERT),
    (ANN_SSL_PORTS, "443"),
    (ANN_BACKEND_PROTOCOL, "ssl"),
    (
        ANN_SSL_NEGOTIATION_POLICY,
        "ELBSecurityPolicy-TLS-1-2-2017-01",
    ),
    (ANN_PROXY_PROTOCOL, "*"),
    (ANN_CONNECTION_IDLE_TIMEOUT, "300"),
    (ANN_CROSS_ZONE, "true"),
    (ANN_CONNECTION_DRAINING_ENABLED, "true"),
    (ANN_CONNECTION_DRAINING_TIMEOUT, "45"),
    (ANN_HC_INTERVAL, "20"),
    (ANN_HC_HEALTHY, "3"),
    (ANN_ADDITIONAL_TAGS, "team=shop"),
];

/// A classic ELB as upstream made it for a Service.
pub(crate) struct UpstreamClassic<'a> {
    /// `(lb port, protocol, node port, instance protocol, certificate)`.
    listeners: Vec<(i32, &'a str, i32, &'a str, Option<&'a str>)>,
    internal: bool,
    subnets: Vec<String>,
    source_ranges: Vec<&'a str>,
    health_check: (&'a str, i32, i32, i32, i32),
    idle_timeout: i32,
    cross_zone: bool,
    draining: Option<i32>,
    proxy_protocol_ports: Vec<i32>,
    ssl_negotiation_policy: Option<&'a str>,
    additional_tags: Vec<(&'a str, &'a str)>,
    targets: Vec<&'a Instance>,
}

impl<'a> UpstreamClassic<'a> {
    /// Upstream's classic ELB of a Service with one TCP port 80 on `node_port`, no annotation and the health
    /// check `target` (upstream's default thresholds, interval and timeout).
    pub(crate) fn plain(
        world: &World,
        node_port: i32,
        target: &'a str,
        targets: Vec<&'a Instance>,
    ) -> Self {
        UpstreamClassic {
            listeners: vec![(80, "tcp", node_port, "tcp", None)],
            internal: false,
            subnets: subnets(&world.public_subnets),
            source_ranges: vec!["0.0.0.0/0"],
            health_check: (target, 2, 6, 10, 5),
            idle_timeout: 60,
            cross_zone: false,
            draining: None,
            proxy_protocol_ports: vec![],
            ssl_negotiation_policy: None,
            additional_tags: vec![],
            targets,
        }
    }
}

/// Creates what upstream's EnsureLoadBalancer leaves for `svc`: the `k8s-elb-<name>` group with its ingress,
/// the load balancer, its policies, health check and attributes, the node rule and the registrations.
pub(crate) async fn seed_upstream_classic(
    world: &World,
    svc: &Service,
    lb: &UpstreamClassic<'_>,
) -> String {
    let name = default_load_balancer_name(svc);
    let service = format!("default/{}", svc.metadata.name.as_deref().unwrap());
    let mut group_tags = vec![
        Tag::builder()
            .key(&world.cluster_tag)
            .value("owned")
            .build(),
    ];
    group_tags.extend(
        lb.additional_tags
            .iter()
            .map(|(k, v)| Tag::builder().key(*k).value(*v).build()),
    );
    let group = world
        .ec2
        .create_security_group()
        .group_name(format!("k8s-elb-{name}"))
        .description(format!(
            "Security group for Kubernetes ELB {name} ({service})"
        ))
        .vpc_id(&world.vpc_id)
        .tag_specifications(
            TagSpecification::builder()
                .resource_type(ResourceType::SecurityGroup)
                .set_tags(Some(group_tags))
                .build(),
        )
        .send()
        .await
        .unwrap()
        .group_id()
        .unwrap()
        .to_string();
    let ranges: Vec<IpRange> = lb
        .source_ranges
        .iter()
        .map(|c| IpRange::builder().cidr_ip(*c).build())
        .collect();
    let mut permissions: Vec<IpPermission> = svc
        .spec
        .as_ref()
        .unwrap()
        .ports
        .as_ref()
        .unwrap()
        .iter()
        .map(|p| {
            IpPermission::builder()
                .ip_protocol("tcp")
                .from_port(p.port)
                .to_port(p.port)
                .set_ip_ranges(Some(ranges.clone()))
                .build()
        })
        .collect();
    permissions.push(
        IpPermission::builder()
            .ip_protocol("icmp")
            .from_port(3)
            .to_port(4)
            .set_ip_ranges(Some(ranges.clone()))
            .build(),
    );
    world
        .ec2
        .authorize_security_group_ingress()
        .group_id(&group)
        .set_ip_permissions(Some(permissions))
        .send()
        .await
        .unwrap();

    let elb = elb_classic();
    let mut tags = vec![
        ElbTag::builder()
            .key("kubernetes.io/service-name")
            .value(&service)
            .build()
            .unwrap(),
        ElbTag::builder()
            .key(&world.cluster_tag)
            .value("owned")
            .build()
            .unwrap(),
    ];
    tags.extend(
        lb.additional_tags
            .iter()
            .map(|(k, v)| ElbTag::builder().key(*k).value(*v).build().unwrap()),
    );
    let listeners = lb
        .listeners
        .iter()
        .map(|(port, protocol, node_port, instance_protocol, cert)| {
            Listener::builder()
                .load_balancer_port(*port)
                .protocol(*protocol)
                .instance_port(*node_port)
                .instance_protocol(*instance_protocol)
                .set_ssl_certificate_id(cert.map(str::to_string))
                .build()
                .unwrap()
        })
        .collect();
    elb.create_load_balancer()
        .load_balancer_name(&name)
        .set_listeners(Some(listeners))
        .set_scheme(lb.internal.then(|| "internal".to_string()))
        .set_subnets(Some(lb.subnets.clone()))
        .security_groups(&group)
        .set_tags(Some(tags))
        .send()
        .await
        .unwrap();
    if !lb.proxy_protocol_ports.is_empty() {
        elb.create_load_balancer_policy()
            .load_balancer_name(&name)
            .policy_name("k8s-proxyprotocol-enabled")
            .policy_type_name("ProxyProtocolPolicyType")
            .policy_attributes(
                PolicyAttribute::builder()
                    .attribute_name("ProxyProtocol")
                    .attribute_value("true")
                    .build(),
            )
            .send()
            .await
            .unwrap();
        for port in &lb.proxy_protocol_ports {
            elb.set_load_balancer_policies_for_backend_server()
                .load_balancer_name(&name)
                .instance_port(*port)
                .policy_names("k8s-proxyprotocol-enabled")
                .send()
                .await
                .unwrap();
        }
    }
    elb.modify_load_balancer_attributes()
        .load_balancer_name(&name)
        .load_balancer_attributes(
            LoadBalancerAttributes::builder()
                .access_log(AccessLog::builder().enabled(false).build())
                .connection_draining(
                    ConnectionDraining::builder()
                        .enabled(lb.draining.is_some())
                        .set_timeout(lb.draining)
                        .build(),
                )
                .connection_settings(
                    ConnectionSettings::builder()
                        .idle_timeout(lb.idle_timeout)
                        .build()
                        .unwrap(),
                )
                .cross_zone_load_balancing(
                    CrossZoneLoadBalancing::builder()
                        .enabled(lb.cross_zone)
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap();
    if let Some(reference) = lb.ssl_negotiation_policy {
        let policy = format!("k8s-SSLNegotiationPolicy-{reference}");
        elb.create_load_balancer_policy()
            .load_balancer_name(&name)
            .policy_name(&policy)
            .policy_type_name("SSLNegotiationPolicyType")
            .policy_attributes(
                PolicyAttribute::builder()
                    .attribute_name("Reference-Security-Policy")
                    .attribute_value(reference)
                    .build(),
            )
            .send()
            .await
            .unwrap();
        for (port, protocol, ..) in &lb.listeners {
            if *protocol == "ssl" || *protocol == "https" {
                elb.set_load_balancer_policies_of_listener()
                    .load_balancer_name(&name)
                    .load_balancer_port(*port)
                    .policy_names(&policy)
                    .send()
                    .await
                    .unwrap();
            }
        }
    }
    let (target, healthy, unhealthy, interval, timeout) = lb.health_check;
    elb.configure_health_check()
        .load_balancer_name(&name)
        .health_check(
            HealthCheck::builder()
                .target(target)
                .healthy_threshold(healthy)
                .unhealthy_threshold(unhealthy)
                .interval(interval)
                .timeout(timeout)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    world
        .ec2
        .authorize_security_group_ingress()
        .group_id(&world.node_sg)
        .ip_permissions(
            IpPermission::builder()
                .ip_protocol("-1")
                .user_id_group_pairs(UserIdGroupPair::builder().group_id(&group).build())
                .build(),
        )
        .send()
        .await
        .unwrap();
    elb.register_instances_with_load_balancer()
        .load_balancer_name(&name)
        .set_instances(Some(
            lb.targets
                .iter()
                .map(|i| ElbInstance::builder().instance_id(&i.id).build())
                .collect(),
        ))
        .send()
        .await
        .unwrap();
    observe_classic(&name)
        .await
        .unwrap()
        .lb
        .dns_name()
        .unwrap()
        .to_string()
}

/// The world's subnets of one kind, one per zone in zone order (what upstream's discovery picks).
fn subnets(list: &[(String, String, String)]) -> Vec<String> {
    let mut by_zone: Vec<&(String, String, String)> = list.iter().collect();
    by_zone.sort_by(|a, b| a.1.cmp(&b.1));
    by_zone.into_iter().map(|s| s.0.clone()).collect()
}

#[tokio::test]
async fn upstream_classic_load_balancers_are_adopted_without_a_change() {
    let world = World::new("takeclb").await;
    let (a, b) = (world.instance(0).await, world.instance(1).await);
    let nodes = nodes_for(&[a.clone(), b.clone()]);

    // Upstream's default: no annotation at all.
    let plain = lb_service("plain", &[("http", 80, "TCP", 30080)], &[]);
    let plain_dns = seed_upstream_classic(
        &world,
        &plain,
        &UpstreamClassic::plain(&world, 30080, "TCP:30080", vec![&a, &b]),
    )
    .await;

    // Internal, TLS on one port with an SSL backend and a negotiation policy, proxy protocol, attributes,
    // health-check overrides, extra tags and a source range.
    let mut tls = lb_service(
        "tls",
        &[("http", 80, "TCP", 30081), ("https", 443, "TCP", 30443)],
        CLASSIC_TLS_ANNOTATIONS,
    );
    tls.spec.as_mut().unwrap().load_balancer_source_ranges = Some(vec!["10.0.0.0/8".into()]);
    let tls_dns = seed_upstream_classic(
        &world,
        &tls,
        &UpstreamClassic {
            listeners: vec![
                (80, "tcp", 30081, "tcp", None),
                (443, "ssl", 30443, "ssl", Some(CERT)),
            ],
            internal: true,
            subnets: subnets(&world.private_subnets),
            source_ranges: vec!["10.0.0.0/8"],
            health_check: ("SSL:30081", 3, 6, 20, 5),
            idle_timeout: 300,
            cross_zone: true,
            draining: Some(45),
            proxy_protocol_ports: vec![30081, 30443],
            ssl_negotiation_policy: Some("ELBSecurityPolicy-TLS-1-2-2017-01"),
            additional_tags: vec![("team", "shop")],
            targets: vec![&a, &b],
        },
    )
    .await;

    // externalTrafficPolicy Local: HTTP checks of the health-check node port.
    let mut local = lb_service("local", &[("http", 80, "TCP", 30082)], &[]);
    let spec = local.spec.as_mut().unwrap();
    spec.external_traffic_policy = Some("Local".into());
    spec.health_check_node_port = Some(32082);
    let local_dns = seed_upstream_classic(
        &world,
        &local,
        &UpstreamClassic::plain(&world, 30082, "HTTP:32082/healthz", vec![&a, &b]),
    )
    .await;

    // The upstream cloud config, as it is, starts this provider.
    let cloud = provider(&upstream_cloud_config(&world)).await;
    for (svc, dns) in [(&plain, &plain_dns), (&tls, &tls_dns), (&local, &local_dns)] {
        let name = svc.metadata.name.as_deref().unwrap();
        let status = cloud.ensure_load_balancer("k", svc, &nodes).await.unwrap();
        assert_eq!(
            status.ingress.unwrap()[0].hostname.as_ref(),
            Some(dns),
            "{name}"
        );
        cloud.update_load_balancer("k", svc, &nodes).await.unwrap();
        assert_eq!(
            cloud.metrics().mutating_calls(),
            Default::default(),
            "{name}: adopting upstream's load balancer changes nothing"
        );
    }
}

/// An upstream cloud config for `world`: upstream's own service names in the overrides and its newer keys.
pub fn upstream_cloud_config(world: &World) -> String {
    let url = &moto().url;
    let mut config = format!(
        "[Global]\nRegion = {REGION}\nKubernetesClusterID = {}\nNLBSecurityGroupMode =\n\
         ClusterServiceLoadBalancerHealthProbeMode = ServiceNodePort\nDisableSecurityGroupIngress = false\n\
         InstanceCacheTTL = 0\n",
        world.cluster_id
    );
    for (n, service) in ["EC2", "Elastic Load Balancing", "Elastic Load Balancing v2"]
        .iter()
        .enumerate()
    {
        config.push_str(&format!(
            "[ServiceOverride \"{n}\"]\nService = {service}\nRegion = {REGION}\nURL = {url}\n\
             SigningRegion = {REGION}\nSigningMethod = v4\n"
        ));
    }
    config
}
