//! Network load balancers against moto: creation, updates, target registration, security-group rules,
//! every annotation's effect and deletion.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_elasticloadbalancingv2::types::{Listener, LoadBalancer as ElbLb, TargetGroup};
use cloud_provider::{CloudError, LoadBalancer, default_load_balancer_name};
use k8s_openapi::api::core::v1::{Node, Service};
use provider_aws::load_balancer::spec::*;

use crate::common::{World, elb, nlb_service, node_with_id, provider, sg_rules};

/// What ELBv2 holds for one load balancer.
struct Observed {
    lb: ElbLb,
    listeners: Vec<Listener>,
    groups: Vec<TargetGroup>,
    targets: BTreeMap<String, BTreeSet<(String, i32)>>,
    tags: BTreeMap<String, BTreeMap<String, String>>,
    attributes: BTreeMap<String, String>,
}

impl Observed {
    fn listener(&self, port: i32) -> &Listener {
        self.listeners
            .iter()
            .find(|l| l.port() == Some(port))
            .unwrap_or_else(|| panic!("no listener on port {port}"))
    }

    /// The target group a listener forwards to.
    fn group_of(&self, port: i32) -> &TargetGroup {
        let arn = self.listener(port).default_actions()[0]
            .target_group_arn()
            .expect("forward action");
        self.groups
            .iter()
            .find(|g| g.target_group_arn() == Some(arn))
            .expect("target group of listener")
    }

    fn targets_of(&self, port: i32) -> BTreeSet<(String, i32)> {
        let arn = self.group_of(port).target_group_arn().unwrap().to_string();
        self.targets.get(&arn).cloned().unwrap_or_default()
    }
}

async fn observe(name: &str) -> Option<Observed> {
    let elb = elb();
    let lb = match elb.describe_load_balancers().names(name).send().await {
        Ok(out) => out.load_balancers().first().cloned()?,
        Err(_) => return None,
    };
    let arn = lb.load_balancer_arn().unwrap().to_string();
    let listeners = elb
        .describe_listeners()
        .load_balancer_arn(&arn)
        .send()
        .await
        .unwrap()
        .listeners()
        .to_vec();
    // moto answers TargetGroupNotFound for a load balancer without target groups.
    let groups = elb
        .describe_target_groups()
        .load_balancer_arn(&arn)
        .send()
        .await
        .map(|out| out.target_groups().to_vec())
        .unwrap_or_default();
    // ... and leaves a target group out after ModifyListener switched to it: add those by ARN.
    let mut groups = groups;
    for l in &listeners {
        let Some(tg) = l
            .default_actions()
            .first()
            .and_then(|a| a.target_group_arn())
        else {
            continue;
        };
        if !groups.iter().any(|g| g.target_group_arn() == Some(tg)) {
            let out = elb
                .describe_target_groups()
                .target_group_arns(tg)
                .send()
                .await
                .unwrap();
            groups.extend(out.target_groups().iter().cloned());
        }
    }
    let mut targets = BTreeMap::new();
    for g in &groups {
        let tg_arn = g.target_group_arn().unwrap().to_string();
        let health = elb
            .describe_target_health()
            .target_group_arn(&tg_arn)
            .send()
            .await
            .unwrap();
        let set: BTreeSet<(String, i32)> = health
            .target_health_descriptions()
            .iter()
            .filter_map(|d| d.target())
            .map(|t| (t.id().unwrap().to_string(), t.port().unwrap_or_default()))
            .collect();
        targets.insert(tg_arn, set);
    }
    let mut arns = vec![arn.clone()];
    arns.extend(
        listeners
            .iter()
            .map(|l| l.listener_arn().unwrap().to_string()),
    );
    arns.extend(
        groups
            .iter()
            .map(|g| g.target_group_arn().unwrap().to_string()),
    );
    let mut tags = BTreeMap::new();
    for a in arns {
        let out = elb.describe_tags().resource_arns(&a).send().await.unwrap();
        for d in out.tag_descriptions() {
            tags.insert(
                d.resource_arn().unwrap().to_string(),
                d.tags()
                    .iter()
                    .map(|t| {
                        (
                            t.key().unwrap().to_string(),
                            t.value().unwrap_or_default().to_string(),
                        )
                    })
                    .collect(),
            );
        }
    }
    let attributes = elb
        .describe_load_balancer_attributes()
        .load_balancer_arn(&arn)
        .send()
        .await
        .unwrap()
        .attributes()
        .iter()
        .map(|a| {
            (
                a.key().unwrap().to_string(),
                a.value().unwrap_or_default().to_string(),
            )
        })
        .collect();
    Some(Observed {
        lb,
        listeners,
        groups,
        targets,
        tags,
        attributes,
    })
}

fn nodes_of(instances: &[crate::common::Instance]) -> Vec<Node> {
    instances
        .iter()
        .map(|i| node_with_id(&i.private_dns_name, &i.provider_id()))
        .collect()
}

fn ids(instances: &[crate::common::Instance], port: i32) -> BTreeSet<(String, i32)> {
    instances.iter().map(|i| (i.id.clone(), port)).collect()
}

fn annotate(svc: &mut Service, key: &str, value: &str) {
    svc.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(key.to_string(), value.to_string());
}

#[tokio::test]
async fn tcp_load_balancer_lifecycle() {
    let world = World::new("lbtcp").await;
    let a = world.instance(0).await;
    let b = world.instance(1).await;
    let cloud = provider(&world.config("")).await;
    let svc = nlb_service(
        "web",
        &[("http", 80, "TCP", 30080), ("https", 443, "TCP", 30443)],
        &[],
    );
    let name = default_load_balancer_name(&svc);
    let nodes = nodes_of(&[a.clone(), b.clone()]);

    assert_eq!(
        cloud.get_load_balancer("kubernetes", &svc).await.unwrap(),
        None
    );
    let status = cloud
        .ensure_load_balancer("kubernetes", &svc, &nodes)
        .await
        .unwrap();
    let o = observe(&name).await.expect("load balancer created");
    let dns = o.lb.dns_name().unwrap().to_string();
    assert_eq!(
        status.ingress.as_ref().unwrap()[0].hostname.as_deref(),
        Some(dns.as_str())
    );
    assert_eq!(
        cloud.get_load_balancer("kubernetes", &svc).await.unwrap(),
        Some(status.clone())
    );

    // An internet-facing NLB in the public subnets, one per zone.
    assert_eq!(o.lb.r#type().unwrap().as_str(), "network");
    assert_eq!(o.lb.scheme().unwrap().as_str(), "internet-facing");
    let subnets: BTreeSet<&str> =
        o.lb.availability_zones()
            .iter()
            .filter_map(|z| z.subnet_id())
            .collect();
    let public: BTreeSet<&str> = world.public_subnets.iter().map(|s| s.0.as_str()).collect();
    assert_eq!(subnets, public);

    // One TCP listener per port, each forwarding to an instance target group on the node port.
    assert_eq!(o.listeners.len(), 2);
    for (port, node_port) in [(80, 30080), (443, 30443)] {
        assert_eq!(o.listener(port).protocol().unwrap().as_str(), "TCP");
        let g = o.group_of(port);
        assert!(
            g.target_group_name()
                .unwrap()
                .starts_with("k8s-default-web-"),
            "{g:?}"
        );
        assert_eq!(g.port(), Some(node_port));
        assert_eq!(g.protocol().unwrap().as_str(), "TCP");
        assert_eq!(g.target_type().unwrap().as_str(), "instance");
        assert_eq!(g.health_check_protocol().unwrap().as_str(), "TCP");
        assert_eq!(g.health_check_port(), Some("traffic-port"));
        assert_eq!(g.health_check_interval_seconds(), Some(30));
        assert_eq!(g.healthy_threshold_count(), Some(3));
        assert_eq!(g.unhealthy_threshold_count(), Some(3));
        assert_eq!(o.targets_of(port), ids(&[a.clone(), b.clone()], node_port));
    }

    // Tags on the load balancer, listeners and target groups.
    assert_eq!(o.tags.len(), 5);
    for tags in o.tags.values() {
        assert_eq!(
            tags.get("kubernetes.io/service-name").map(String::as_str),
            Some("default/web")
        );
        assert_eq!(
            tags.get(&world.cluster_tag).map(String::as_str),
            Some("owned")
        );
    }

    // Node security-group rules: clients on the node ports and path MTU; the client rules from everyone
    // on the traffic ports cover the health checks, so there are no health rules.
    let rules = sg_rules(&world.ec2, &world.node_sg).await;
    let client = format!("kubernetes.io/rule/nlb/client={name}");
    for port in [30080, 30443] {
        assert!(
            rules.contains(&("tcp".into(), port, port, "0.0.0.0/0".into(), client.clone())),
            "{rules:?}"
        );
    }
    assert!(rules.contains(&(
        "icmp".into(),
        3,
        4,
        "0.0.0.0/0".into(),
        "kubernetes.io/rule/nlb/mtu".into()
    )));
    assert_eq!(rules.len(), 3, "{rules:?}");

    // A second sync of the unchanged Service only reads.
    let before = cloud.metrics().mutating_calls();
    let status2 = cloud
        .ensure_load_balancer("kubernetes", &svc, &nodes)
        .await
        .unwrap();
    assert_eq!(status2, status);
    cloud
        .update_load_balancer("kubernetes", &svc, &nodes)
        .await
        .unwrap();
    assert_eq!(
        cloud.metrics().mutating_calls(),
        before,
        "steady state makes no change"
    );
    assert_eq!(cloud.metrics().request_count("RegisterTargets"), 2);

    // Targets follow the nodes.
    cloud
        .update_load_balancer("kubernetes", &svc, &nodes[..1])
        .await
        .unwrap();
    let o = observe(&name).await.unwrap();
    assert_eq!(o.targets_of(80), ids(std::slice::from_ref(&a), 30080));
    assert_eq!(o.targets_of(443), ids(std::slice::from_ref(&a), 30443));
    let c = world.instance(1).await;
    let three = nodes_of(&[a.clone(), b.clone(), c.clone()]);
    cloud
        .update_load_balancer("kubernetes", &svc, &three)
        .await
        .unwrap();
    let o = observe(&name).await.unwrap();
    assert_eq!(
        o.targets_of(80),
        ids(&[a.clone(), b.clone(), c.clone()], 30080)
    );

    // Port changes: 443 goes, 8080 comes; the old listener and target group are deleted.
    let old_group = o.group_of(443).target_group_arn().unwrap().to_string();
    let changed = {
        let mut s = nlb_service(
            "web",
            &[("http", 80, "TCP", 30080), ("alt", 8080, "TCP", 30808)],
            &[],
        );
        s.metadata.uid = svc.metadata.uid.clone();
        s
    };
    cloud
        .ensure_load_balancer("kubernetes", &changed, &three)
        .await
        .unwrap();
    let o = observe(&name).await.unwrap();
    let ports: BTreeSet<i32> = o.listeners.iter().filter_map(|l| l.port()).collect();
    assert_eq!(ports, BTreeSet::from([80, 8080]));
    assert_eq!(o.groups.len(), 2);
    assert!(
        o.groups
            .iter()
            .all(|g| g.target_group_arn() != Some(old_group.as_str()))
    );
    assert!(
        elb()
            .describe_target_groups()
            .target_group_arns(&old_group)
            .send()
            .await
            .is_err(),
        "the old target group is deleted"
    );
    assert_eq!(
        o.targets_of(8080),
        ids(&[a.clone(), b.clone(), c.clone()], 30808)
    );
    let rules = sg_rules(&world.ec2, &world.node_sg).await;
    assert!(
        !rules.iter().any(|r| r.1 == 30443),
        "rules of the removed port are gone: {rules:?}"
    );
    assert!(rules.iter().any(|r| r.1 == 30808 && r.4 == client));

    // Deletion removes the load balancer, its target groups and its rules; absent is success.
    let groups: Vec<String> = o
        .groups
        .iter()
        .map(|g| g.target_group_arn().unwrap().to_string())
        .collect();
    cloud
        .ensure_load_balancer_deleted("kubernetes", &changed)
        .await
        .unwrap();
    assert!(observe(&name).await.is_none());
    for g in groups {
        assert!(
            elb()
                .describe_target_groups()
                .target_group_arns(&g)
                .send()
                .await
                .is_err()
        );
    }
    assert!(sg_rules(&world.ec2, &world.node_sg).await.is_empty());
    assert_eq!(
        cloud
            .get_load_balancer("kubernetes", &changed)
            .await
            .unwrap(),
        None
    );
    cloud
        .ensure_load_balancer_deleted("kubernetes", &changed)
        .await
        .unwrap();
}

#[tokio::test]
async fn udp_load_balancer() {
    let world = World::new("lbudp").await;
    let a = world.instance(0).await;
    let cloud = provider(&world.config("")).await;
    let svc = nlb_service("dns", &[("dns", 53, "UDP", 30053)], &[]);
    let name = default_load_balancer_name(&svc);
    cloud
        .ensure_load_balancer("k", &svc, &nodes_of(std::slice::from_ref(&a)))
        .await
        .unwrap();
    let o = observe(&name).await.unwrap();
    assert_eq!(o.listener(53).protocol().unwrap().as_str(), "UDP");
    assert_eq!(o.group_of(53).protocol().unwrap().as_str(), "UDP");
    assert_eq!(o.targets_of(53), ids(&[a], 30053));
    let rules = sg_rules(&world.ec2, &world.node_sg).await;
    assert!(rules.contains(&(
        "udp".into(),
        30053,
        30053,
        "0.0.0.0/0".into(),
        format!("kubernetes.io/rule/nlb/client={name}")
    )));
    // The health check is a TCP connection to the traffic port, from the load balancer's subnets.
    for (_, _, cidr) in &world.public_subnets {
        assert!(rules.contains(&(
            "tcp".into(),
            30053,
            30053,
            cidr.clone(),
            format!("kubernetes.io/rule/nlb/health={name}")
        )));
    }
    cloud.ensure_load_balancer_deleted("k", &svc).await.unwrap();
    assert!(observe(&name).await.is_none());
}

/// moto checks certificates of new listeners only when they are ACM ARNs, so an IAM server-certificate ARN
/// stands in for a real certificate.
const CERT: &str = "arn:aws:iam::123456789012:server-certificate/ccm-test";

#[tokio::test]
async fn tls_listeners() {
    let world = World::new("lbtls").await;
    let a = world.instance(0).await;
    let cloud = provider(&world.config("")).await;
    let svc = nlb_service(
        "shop",
        &[("http", 80, "TCP", 30180), ("https", 443, "TCP", 30543)],
        &[
            (ANN_SSL_CERT, CERT),
            (ANN_SSL_PORTS, "https"),
            (
                ANN_SSL_NEGOTIATION_POLICY,
                "ELBSecurityPolicy-TLS13-1-2-2021-06",
            ),
            (ANN_BACKEND_PROTOCOL, "ssl"),
        ],
    );
    let name = default_load_balancer_name(&svc);
    cloud
        .ensure_load_balancer("k", &svc, &nodes_of(std::slice::from_ref(&a)))
        .await
        .unwrap();
    let o = observe(&name).await.unwrap();
    let tls = o.listener(443);
    assert_eq!(tls.protocol().unwrap().as_str(), "TLS");
    assert_eq!(tls.certificates()[0].certificate_arn(), Some(CERT));
    assert_eq!(
        tls.ssl_policy(),
        Some("ELBSecurityPolicy-TLS13-1-2-2021-06")
    );
    assert_eq!(
        o.group_of(443).protocol().unwrap().as_str(),
        "TLS",
        "backend-protocol ssl"
    );
    let plain = o.listener(80);
    assert_eq!(plain.protocol().unwrap().as_str(), "TCP");
    assert!(plain.certificates().is_empty());
    assert_eq!(o.group_of(80).protocol().unwrap().as_str(), "TCP");

    // Dropping TLS from 443 turns it back into plain TCP with a TCP target group.
    let mut plain_svc = svc.clone();
    plain_svc.metadata.annotations = Some([(ANN_TYPE.to_string(), "nlb".to_string())].into());
    cloud
        .ensure_load_balancer("k", &plain_svc, &nodes_of(std::slice::from_ref(&a)))
        .await
        .unwrap();
    let o = observe(&name).await.unwrap();
    assert_eq!(o.listener(443).protocol().unwrap().as_str(), "TCP");
    assert_eq!(o.group_of(443).protocol().unwrap().as_str(), "TCP");
    assert_eq!(o.groups.len(), 2);
    cloud
        .ensure_load_balancer_deleted("k", &plain_svc)
        .await
        .unwrap();
}

#[tokio::test]
async fn annotations_take_effect() {
    let world = World::new("lbann").await;
    let a = world.instance(0).await;
    let b = world.instance(1).await;
    let extra_sg = world
        .ec2
        .create_security_group()
        .group_name(format!("{}-lb", world.cluster_id))
        .description("lb")
        .vpc_id(&world.vpc_id)
        .send()
        .await
        .unwrap()
        .group_id()
        .unwrap()
        .to_string();
    let cloud = provider(&world.config("")).await;
    let mut svc = nlb_service(
        "internal",
        &[("http", 80, "TCP", 30280)],
        &[
            (ANN_INTERNAL, "true"),
            (ANN_ADDITIONAL_TAGS, "team=payments,cost-center="),
            (ANN_HC_PROTOCOL, "HTTP"),
            (ANN_HC_PORT, "10256"),
            (ANN_HC_PATH, "/ready"),
            (ANN_HC_HEALTHY, "4"),
            (ANN_HC_UNHEALTHY, "5"),
            (ANN_HC_INTERVAL, "20"),
            (ANN_HC_TIMEOUT, "6"),
            (ANN_CROSS_ZONE, "true"),
            (ANN_ACCESS_LOG_ENABLED, "true"),
            (ANN_ACCESS_LOG_BUCKET, "nlb-logs"),
            (ANN_ACCESS_LOG_PREFIX, "prod"),
            (
                ANN_TARGET_GROUP_ATTRIBUTES,
                "preserve_client_ip.enabled=true,deregistration_delay.timeout_seconds=30",
            ),
            (ANN_TARGET_NODE_LABELS, "ingress=yes"),
            (ANN_SECURITY_GROUPS, &extra_sg),
        ],
    );
    svc.spec.as_mut().unwrap().load_balancer_source_ranges = Some(vec!["192.168.0.0/16".into()]);
    let name = default_load_balancer_name(&svc);
    let mut nodes = nodes_of(&[a.clone(), b.clone()]);
    nodes[0].metadata.labels = Some(BTreeMap::from([("ingress".to_string(), "yes".to_string())]));
    cloud.ensure_load_balancer("k", &svc, &nodes).await.unwrap();
    let o = observe(&name).await.unwrap();

    // internal: the scheme, and the cluster-tagged private subnets.
    assert_eq!(o.lb.scheme().unwrap().as_str(), "internal");
    let subnets: BTreeSet<&str> =
        o.lb.availability_zones()
            .iter()
            .filter_map(|z| z.subnet_id())
            .collect();
    let private: BTreeSet<&str> = world.private_subnets.iter().map(|s| s.0.as_str()).collect();
    assert_eq!(subnets, private);
    // additional-resource-tags on every resource.
    for tags in o.tags.values() {
        assert_eq!(tags.get("team").map(String::as_str), Some("payments"));
        assert_eq!(tags.get("cost-center").map(String::as_str), Some(""));
    }
    // health-check annotations.
    let g = o.group_of(80);
    assert_eq!(g.health_check_protocol().unwrap().as_str(), "HTTP");
    assert_eq!(g.health_check_port(), Some("10256"));
    assert_eq!(g.health_check_path(), Some("/ready"));
    assert_eq!(g.healthy_threshold_count(), Some(4));
    assert_eq!(g.unhealthy_threshold_count(), Some(5));
    assert_eq!(g.health_check_interval_seconds(), Some(20));
    // cross-zone and access-log attributes.
    assert_eq!(
        o.attributes
            .get("load_balancing.cross_zone.enabled")
            .map(String::as_str),
        Some("true")
    );
    assert_eq!(
        o.attributes
            .get("access_logs.s3.enabled")
            .map(String::as_str),
        Some("true")
    );
    assert_eq!(
        o.attributes
            .get("access_logs.s3.bucket")
            .map(String::as_str),
        Some("nlb-logs")
    );
    assert_eq!(
        o.attributes
            .get("access_logs.s3.prefix")
            .map(String::as_str),
        Some("prod")
    );
    // target-group attributes.
    let attrs: BTreeMap<String, String> = elb()
        .describe_target_group_attributes()
        .target_group_arn(g.target_group_arn().unwrap())
        .send()
        .await
        .unwrap()
        .attributes()
        .iter()
        .map(|a| {
            (
                a.key().unwrap().to_string(),
                a.value().unwrap_or_default().to_string(),
            )
        })
        .collect();
    // moto does not list preserve_client_ip.enabled for target groups; like upstream, an attribute the
    // group does not list is skipped.
    assert_eq!(attrs.get("preserve_client_ip.enabled"), None);
    assert_eq!(
        attrs
            .get("deregistration_delay.timeout_seconds")
            .map(String::as_str),
        Some("30")
    );
    // target-node-labels: only the labelled node is a target.
    assert_eq!(o.targets_of(80), ids(std::slice::from_ref(&a), 30280));
    // The security-groups annotation is ignored by network load balancers (as upstream without
    // NLBSecurityGroupMode = Managed).
    assert!(o.lb.security_groups().is_empty(), "{:?}", o.lb);
    // Source ranges admit only those clients; the health check port gets the load balancer's subnets.
    let rules = sg_rules(&world.ec2, &world.node_sg).await;
    assert!(rules.contains(&(
        "tcp".into(),
        30280,
        30280,
        "192.168.0.0/16".into(),
        format!("kubernetes.io/rule/nlb/client={name}")
    )));
    for (_, _, cidr) in &world.private_subnets {
        assert!(rules.contains(&(
            "tcp".into(),
            10256,
            10256,
            cidr.clone(),
            format!("kubernetes.io/rule/nlb/health={name}")
        )));
    }
    assert!(!rules.iter().any(|r| r.3 == "0.0.0.0/0"), "{rules:?}");

    // Changing tags and attributes later is reconciled on the existing load balancer.
    annotate(&mut svc, ANN_ADDITIONAL_TAGS, "team=platform");
    annotate(&mut svc, ANN_CROSS_ZONE, "false");
    annotate(&mut svc, ANN_HC_HEALTHY, "2");
    cloud.ensure_load_balancer("k", &svc, &nodes).await.unwrap();
    let o = observe(&name).await.unwrap();
    let lb_arn = o.lb.load_balancer_arn().unwrap();
    assert_eq!(
        o.tags[lb_arn].get("team").map(String::as_str),
        Some("platform")
    );
    assert_eq!(
        o.attributes
            .get("load_balancing.cross_zone.enabled")
            .map(String::as_str),
        Some("false")
    );
    assert_eq!(o.group_of(80).healthy_threshold_count(), Some(2));

    // Without their annotations, cross-zone load balancing and access logs are switched off again.
    for key in [ANN_CROSS_ZONE, ANN_ACCESS_LOG_ENABLED] {
        svc.metadata.annotations.as_mut().unwrap().remove(key);
    }
    cloud.ensure_load_balancer("k", &svc, &nodes).await.unwrap();
    let o = observe(&name).await.unwrap();
    for key in [
        "load_balancing.cross_zone.enabled",
        "access_logs.s3.enabled",
    ] {
        assert_eq!(
            o.attributes.get(key).map(String::as_str),
            Some("false"),
            "{key}"
        );
    }

    // The scheme is fixed at creation.
    annotate(&mut svc, ANN_INTERNAL, "false");
    let err = cloud
        .ensure_load_balancer("k", &svc, &nodes)
        .await
        .unwrap_err();
    assert!(err.to_string().starts_with(ANN_INTERNAL), "{err}");

    annotate(&mut svc, ANN_INTERNAL, "true");
    cloud.ensure_load_balancer_deleted("k", &svc).await.unwrap();
    assert!(observe(&name).await.is_none());
}

#[tokio::test]
async fn local_traffic_policy_health_checks() {
    let world = World::new("lblocal").await;
    let a = world.instance(0).await;
    let cloud = provider(&world.config("")).await;
    let mut svc = nlb_service("local", &[("http", 80, "TCP", 30380)], &[]);
    let spec = svc.spec.as_mut().unwrap();
    spec.external_traffic_policy = Some("Local".into());
    spec.health_check_node_port = Some(31999);
    let name = default_load_balancer_name(&svc);
    cloud
        .ensure_load_balancer("k", &svc, &nodes_of(&[a]))
        .await
        .unwrap();
    let o = observe(&name).await.unwrap();
    let g = o.group_of(80);
    assert_eq!(g.health_check_protocol().unwrap().as_str(), "HTTP");
    assert_eq!(g.health_check_port(), Some("31999"));
    assert_eq!(g.health_check_path(), Some("/healthz"));
    assert_eq!(g.health_check_interval_seconds(), Some(10));
    assert_eq!(g.healthy_threshold_count(), Some(2));
    assert_eq!(g.unhealthy_threshold_count(), Some(2));
    let rules = sg_rules(&world.ec2, &world.node_sg).await;
    assert!(rules.contains(&(
        "tcp".into(),
        31999,
        31999,
        world.public_subnets[0].2.clone(),
        format!("kubernetes.io/rule/nlb/health={name}")
    )));

    // Back to Cluster: a new target group (the health-check protocol and interval are part of its name).
    let old = g.target_group_arn().unwrap().to_string();
    let spec = svc.spec.as_mut().unwrap();
    spec.external_traffic_policy = Some("Cluster".into());
    spec.health_check_node_port = None;
    cloud
        .ensure_load_balancer("k", &svc, &nodes_of(&[]))
        .await
        .unwrap();
    let o = observe(&name).await.unwrap();
    assert_ne!(o.group_of(80).target_group_arn().unwrap(), old);
    assert_eq!(
        o.group_of(80).health_check_protocol().unwrap().as_str(),
        "TCP"
    );
    assert_eq!(o.groups.len(), 1);
    assert!(
        !sg_rules(&world.ec2, &world.node_sg)
            .await
            .iter()
            .any(|r| r.1 == 31999)
    );
    cloud.ensure_load_balancer_deleted("k", &svc).await.unwrap();
}

#[tokio::test]
async fn subnets_annotation_by_id_and_name() {
    let world = World::new("lbsub").await;
    let a = world.instance(0).await;
    let cloud = provider(&world.config("")).await;
    let by_name = format!("{}-public-us-east-1b", world.cluster_id);
    let svc = nlb_service(
        "sub",
        &[("http", 80, "TCP", 30480)],
        &[(
            ANN_SUBNETS,
            &format!("{}, {by_name}", world.private_subnets[0].0),
        )],
    );
    let name = default_load_balancer_name(&svc);
    cloud
        .ensure_load_balancer("k", &svc, &nodes_of(std::slice::from_ref(&a)))
        .await
        .unwrap();
    let o = observe(&name).await.unwrap();
    let subnets: BTreeSet<&str> =
        o.lb.availability_zones()
            .iter()
            .filter_map(|z| z.subnet_id())
            .collect();
    assert_eq!(
        subnets,
        BTreeSet::from([
            world.private_subnets[0].0.as_str(),
            world.public_subnets[1].0.as_str()
        ])
    );
    cloud.ensure_load_balancer_deleted("k", &svc).await.unwrap();

    let svc = nlb_service(
        "sub2",
        &[("http", 80, "TCP", 30481)],
        &[(ANN_SUBNETS, "no-such-subnet")],
    );
    let err = cloud
        .ensure_load_balancer("k", &svc, &nodes_of(&[a]))
        .await
        .unwrap_err();
    assert!(err.to_string().starts_with(ANN_SUBNETS), "{err}");
    assert!(err.to_string().contains("no-such-subnet"), "{err}");
}

#[tokio::test]
async fn load_balancer_type_annotation() {
    let world = World::new("lbtype").await;
    let a = world.instance(0).await;
    let cloud = provider(&world.config("")).await;
    let nodes = nodes_of(&[a]);
    for kind in ["nlb-ip", "external"] {
        let svc = nlb_service("ext", &[("http", 80, "TCP", 30580)], &[(ANN_TYPE, kind)]);
        let err = cloud
            .ensure_load_balancer("k", &svc, &nodes)
            .await
            .unwrap_err();
        assert!(
            matches!(err, CloudError::ImplementedElsewhere),
            "{kind}: {err}"
        );
        assert!(matches!(
            cloud
                .update_load_balancer("k", &svc, &nodes)
                .await
                .unwrap_err(),
            CloudError::ImplementedElsewhere
        ));
        assert!(observe(&default_load_balancer_name(&svc)).await.is_none());
    }
    // Explicit nlb, then a change of type after creation is refused.
    let mut svc = nlb_service("nlb", &[("http", 80, "TCP", 30581)], &[(ANN_TYPE, "nlb")]);
    cloud.ensure_load_balancer("k", &svc, &nodes).await.unwrap();
    annotate(&mut svc, ANN_TYPE, "nlb-ip");
    let err = cloud
        .ensure_load_balancer("k", &svc, &nodes)
        .await
        .unwrap_err();
    assert!(err.to_string().starts_with(ANN_TYPE), "{err}");
    // Deletion still removes our load balancer.
    cloud.ensure_load_balancer_deleted("k", &svc).await.unwrap();
    assert!(observe(&default_load_balancer_name(&svc)).await.is_none());
}

#[tokio::test]
async fn foreign_load_balancers_are_left_alone() {
    let world = World::new("lbforeign").await;
    let a = world.instance(0).await;
    let cloud = provider(&world.config("")).await;
    let svc = nlb_service("theirs", &[("http", 80, "TCP", 30680)], &[]);
    let name = default_load_balancer_name(&svc);
    elb()
        .create_load_balancer()
        .name(&name)
        .r#type(aws_sdk_elasticloadbalancingv2::types::LoadBalancerTypeEnum::Network)
        .subnets(&world.public_subnets[0].0)
        .send()
        .await
        .unwrap();
    let err = cloud
        .ensure_load_balancer("k", &svc, &nodes_of(&[a]))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not tagged for cluster"), "{err}");
    cloud.ensure_load_balancer_deleted("k", &svc).await.unwrap();
    assert!(
        observe(&name).await.is_some(),
        "a load balancer without our cluster tag is never deleted"
    );
}

#[tokio::test]
async fn targets_register_and_deregister_in_chunks_of_100() {
    let world = World::new("lbmany").await;
    let out = world
        .ec2
        .run_instances()
        .image_id(crate::common::AMI)
        .min_count(105)
        .max_count(105)
        .subnet_id(&world.private_subnets[0].0)
        .tag_specifications(crate::common::tags_for(
            aws_sdk_ec2::types::ResourceType::Instance,
            &[(&world.cluster_tag, "owned")],
        ))
        .security_group_ids(&world.node_sg)
        .send()
        .await
        .unwrap();
    let nodes: Vec<Node> = out
        .instances()
        .iter()
        .map(|i| {
            let id = i.instance_id().unwrap();
            node_with_id(id, &format!("aws:///us-east-1a/{id}"))
        })
        .collect();
    assert_eq!(nodes.len(), 105);
    let cloud = provider(&world.config("")).await;
    let svc = nlb_service("many", &[("http", 80, "TCP", 30780)], &[]);
    let name = default_load_balancer_name(&svc);
    cloud.ensure_load_balancer("k", &svc, &nodes).await.unwrap();
    assert_eq!(cloud.metrics().request_count("RegisterTargets"), 2);
    assert_eq!(observe(&name).await.unwrap().targets_of(80).len(), 105);
    cloud.update_load_balancer("k", &svc, &[]).await.unwrap();
    assert_eq!(cloud.metrics().request_count("DeregisterTargets"), 2);
    assert!(observe(&name).await.unwrap().targets_of(80).is_empty());
    cloud.ensure_load_balancer_deleted("k", &svc).await.unwrap();
}

#[tokio::test]
async fn disabled_security_group_ingress_adds_no_rules() {
    let world = World::new("lbnosg").await;
    let a = world.instance(0).await;
    let cloud = provider(&world.config("DisableSecurityGroupIngress = true")).await;
    let svc = nlb_service("nosg", &[("http", 80, "TCP", 30880)], &[]);
    cloud
        .ensure_load_balancer("k", &svc, &nodes_of(&[a]))
        .await
        .unwrap();
    assert!(sg_rules(&world.ec2, &world.node_sg).await.is_empty());
    assert_eq!(
        cloud
            .metrics()
            .request_count("AuthorizeSecurityGroupIngress"),
        0
    );
    cloud.ensure_load_balancer_deleted("k", &svc).await.unwrap();
}

/// A load balancer whose target group has a name of its own (created by another controller version) keeps
/// that group while it serves the port as wanted; a new health-check interval replaces it with a group named
/// as upstream names it.
#[tokio::test]
async fn target_groups_are_kept_whatever_their_names() {
    let world = World::new("lbadopt").await;
    let a = world.instance(0).await;
    let cloud = provider(&world.config("")).await;
    let mut svc = nlb_service("adopt", &[("http", 80, "TCP", 30990)], &[]);
    let name = default_load_balancer_name(&svc);
    let elb = elb();
    let tags = [
        (world.cluster_tag.as_str(), "owned"),
        ("kubernetes.io/service-name", "default/adopt"),
    ]
    .map(|(k, v)| {
        aws_sdk_elasticloadbalancingv2::types::Tag::builder()
            .key(k)
            .value(v)
            .build()
    });
    let lb = elb
        .create_load_balancer()
        .name(&name)
        .r#type(aws_sdk_elasticloadbalancingv2::types::LoadBalancerTypeEnum::Network)
        .subnets(&world.public_subnets[0].0)
        .set_tags(Some(tags.to_vec()))
        .send()
        .await
        .unwrap();
    let lb_arn = lb.load_balancers()[0]
        .load_balancer_arn()
        .unwrap()
        .to_string();
    let tg = elb
        .create_target_group()
        .name("legacy-adopt")
        .protocol(aws_sdk_elasticloadbalancingv2::types::ProtocolEnum::Tcp)
        .port(30990)
        .vpc_id(&world.vpc_id)
        .target_type(aws_sdk_elasticloadbalancingv2::types::TargetTypeEnum::Instance)
        .health_check_protocol(aws_sdk_elasticloadbalancingv2::types::ProtocolEnum::Tcp)
        .health_check_port("traffic-port")
        .health_check_interval_seconds(30)
        .healthy_threshold_count(3)
        .unhealthy_threshold_count(3)
        .send()
        .await
        .unwrap();
    let legacy = tg.target_groups()[0]
        .target_group_arn()
        .unwrap()
        .to_string();
    elb.create_listener()
        .load_balancer_arn(&lb_arn)
        .port(80)
        .protocol(aws_sdk_elasticloadbalancingv2::types::ProtocolEnum::Tcp)
        .default_actions(
            aws_sdk_elasticloadbalancingv2::types::Action::builder()
                .r#type(aws_sdk_elasticloadbalancingv2::types::ActionTypeEnum::Forward)
                .target_group_arn(&legacy)
                .build(),
        )
        .send()
        .await
        .unwrap();

    let nodes = nodes_of(std::slice::from_ref(&a));
    cloud.ensure_load_balancer("k", &svc, &nodes).await.unwrap();
    let o = observe(&name).await.unwrap();
    assert_eq!(o.group_of(80).target_group_arn(), Some(legacy.as_str()));
    assert_eq!(o.targets_of(80), ids(std::slice::from_ref(&a), 30990));
    for call in ["CreateTargetGroup", "ModifyTargetGroup", "ModifyListener"] {
        assert_eq!(cloud.metrics().request_count(call), 0, "{call}");
    }

    // A new interval cannot be set in place: a new group named as upstream names it takes over.
    annotate(&mut svc, ANN_HC_INTERVAL, "10");
    cloud.ensure_load_balancer("k", &svc, &nodes).await.unwrap();
    let o = observe(&name).await.unwrap();
    let spec = parse(&svc, &Default::default()).unwrap();
    let wanted = provider_aws::load_balancer::naming::target_group_name(
        &world.cluster_id,
        &spec,
        &spec.ports[0],
    );
    let g = o.group_of(80);
    assert_eq!(g.target_group_name(), Some(wanted.as_str()));
    assert_eq!(g.health_check_interval_seconds(), Some(10));
    assert_eq!(o.targets_of(80), ids(std::slice::from_ref(&a), 30990));
    assert!(
        elb.describe_target_groups()
            .target_group_arns(&legacy)
            .send()
            .await
            .is_err(),
        "the replaced target group is deleted"
    );
    cloud.ensure_load_balancer_deleted("k", &svc).await.unwrap();
}

/// `[Global] ElbSecurityGroup` belongs to classic load balancers: a network load balancer never gets it, and
/// node rules never go into it. An internal load balancer without source ranges admits every client, as
/// upstream's does.
#[tokio::test]
async fn elb_security_group_is_classic_only() {
    let world = World::new("lbelbsg").await;
    let a = world.instance(0).await;
    let cloud = provider(&world.config(&format!("ElbSecurityGroup = {}", world.node_sg))).await;
    let svc = nlb_service(
        "elbsg",
        &[("http", 80, "TCP", 30991)],
        &[(ANN_INTERNAL, "true")],
    );
    let name = default_load_balancer_name(&svc);
    cloud
        .ensure_load_balancer("k", &svc, &nodes_of(std::slice::from_ref(&a)))
        .await
        .unwrap();
    let o = observe(&name).await.unwrap();
    assert!(o.lb.security_groups().is_empty(), "{:?}", o.lb);
    assert!(sg_rules(&world.ec2, &world.node_sg).await.is_empty());
    cloud.ensure_load_balancer_deleted("k", &svc).await.unwrap();

    let cloud = provider(&world.config("")).await;
    cloud
        .ensure_load_balancer("k", &svc, &nodes_of(std::slice::from_ref(&a)))
        .await
        .unwrap();
    let rules = sg_rules(&world.ec2, &world.node_sg).await;
    assert!(
        rules.contains(&(
            "tcp".into(),
            30991,
            30991,
            "0.0.0.0/0".into(),
            format!("kubernetes.io/rule/nlb/client={name}")
        )),
        "{rules:?}"
    );
    cloud.ensure_load_balancer_deleted("k", &svc).await.unwrap();
    assert!(sg_rules(&world.ec2, &world.node_sg).await.is_empty());
}

/// `ClusterServiceLoadBalancerHealthProbeMode = Shared` applies to network load balancers too: Cluster-policy
/// Services check kube-proxy's (or the configured) HTTP endpoint, and the node rules admit it.
#[tokio::test]
async fn shared_health_probe_for_network_load_balancers() {
    let world = World::new("lbshared").await;
    let a = world.instance(0).await;
    let cloud = provider(&world.config(
        "ClusterServiceLoadBalancerHealthProbeMode = Shared\nClusterServiceSharedLoadBalancerHealthProbePath = /livez",
    ))
    .await;
    let svc = nlb_service("shared", &[("http", 80, "TCP", 30992)], &[]);
    let name = default_load_balancer_name(&svc);
    cloud
        .ensure_load_balancer("k", &svc, &nodes_of(std::slice::from_ref(&a)))
        .await
        .unwrap();
    let o = observe(&name).await.unwrap();
    let g = o.group_of(80);
    assert_eq!(g.health_check_protocol().unwrap().as_str(), "HTTP");
    assert_eq!(g.health_check_port(), Some("10256"));
    assert_eq!(g.health_check_path(), Some("/livez"));
    let rules = sg_rules(&world.ec2, &world.node_sg).await;
    assert!(
        rules.contains(&(
            "tcp".into(),
            10256,
            10256,
            world.public_subnets[0].2.clone(),
            format!("kubernetes.io/rule/nlb/health={name}")
        )),
        "{rules:?}"
    );
    cloud.ensure_load_balancer_deleted("k", &svc).await.unwrap();
}

/// With no subnet the cluster may use (all tagged for other clusters), `[Global] SubnetID` is the fallback,
/// as upstream's; it must still be public for an internet-facing load balancer.
#[tokio::test]
async fn subnet_id_is_the_fallback_when_no_subnet_is_the_clusters() {
    let world = World::new("lbfallback").await;
    let a = world.instance(0).await;
    let all: Vec<String> = world
        .public_subnets
        .iter()
        .chain(&world.private_subnets)
        .map(|s| s.0.clone())
        .collect();
    world
        .ec2
        .create_tags()
        .set_resources(Some(all))
        .tags(
            aws_sdk_ec2::types::Tag::builder()
                .key("kubernetes.io/cluster/another-cluster")
                .value("owned")
                .build(),
        )
        .send()
        .await
        .unwrap();
    world
        .ec2
        .delete_tags()
        .set_resources(Some(
            world.private_subnets.iter().map(|s| s.0.clone()).collect(),
        ))
        .tags(
            aws_sdk_ec2::types::Tag::builder()
                .key(&world.cluster_tag)
                .build(),
        )
        .send()
        .await
        .unwrap();
    let nodes = nodes_of(std::slice::from_ref(&a));
    let public = &world.public_subnets[1].0;
    let cloud = provider(&world.config(&format!("SubnetID = {public}"))).await;
    let svc = nlb_service("fallback", &[("http", 80, "TCP", 30994)], &[]);
    cloud.ensure_load_balancer("k", &svc, &nodes).await.unwrap();
    let o = observe(&default_load_balancer_name(&svc)).await.unwrap();
    let subnets: Vec<&str> =
        o.lb.availability_zones()
            .iter()
            .filter_map(|z| z.subnet_id())
            .collect();
    assert_eq!(subnets, vec![public.as_str()]);
    cloud.ensure_load_balancer_deleted("k", &svc).await.unwrap();

    let private = &world.private_subnets[0].0;
    let cloud = provider(&world.config(&format!("SubnetID = {private}"))).await;
    let svc = nlb_service("fallback2", &[("http", 80, "TCP", 30995)], &[]);
    let err = cloud
        .ensure_load_balancer("k", &svc, &nodes)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("suitable subnets"), "{err}");
}
