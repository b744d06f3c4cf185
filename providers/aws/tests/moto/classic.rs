//! Classic ELBs against moto: creation with every annotation family, updates of ports, annotations and
//! nodes, idempotence (a second sync only reads), type changes, bad annotations and deletion.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_elasticloadbalancing::types::LoadBalancerDescription;
use cloud_provider::{LoadBalancer, default_load_balancer_name};
use k8s_openapi::api::core::v1::Service;
use provider_aws::load_balancer::classic::spec::*;
use provider_aws::load_balancer::spec::*;

use crate::common::{World, elb_classic, lb_service, nlb_service, nodes_for, provider};

/// An IAM server-certificate ARN: moto checks only ACM ARNs against its certificate store.
const CERT: &str = "arn:aws:iam::123456789012:server-certificate/classic";

/// What the classic ELB API holds for one load balancer.
pub struct ClassicObserved {
    pub lb: LoadBalancerDescription,
    pub tags: BTreeMap<String, String>,
    pub attributes: aws_sdk_elasticloadbalancing::types::LoadBalancerAttributes,
}

impl ClassicObserved {
    /// `(lb port, protocol, instance port, instance protocol, certificate)` of every listener, sorted.
    pub fn listeners(&self) -> Vec<(i32, String, i32, String, Option<String>)> {
        let mut out: Vec<_> = self
            .lb
            .listener_descriptions()
            .iter()
            .filter_map(|d| d.listener())
            .map(|l| {
                (
                    l.load_balancer_port(),
                    l.protocol().to_ascii_lowercase(),
                    l.instance_port(),
                    l.instance_protocol()
                        .unwrap_or_default()
                        .to_ascii_lowercase(),
                    l.ssl_certificate_id().map(str::to_string),
                )
            })
            .collect();
        out.sort();
        out
    }

    pub fn instances(&self) -> BTreeSet<String> {
        self.lb
            .instances()
            .iter()
            .filter_map(|i| i.instance_id())
            .map(str::to_string)
            .collect()
    }

    /// Backend ports with their policies.
    pub fn backend_policies(&self) -> BTreeMap<i32, Vec<String>> {
        self.lb
            .backend_server_descriptions()
            .iter()
            .filter_map(|b| Some((b.instance_port()?, b.policy_names().to_vec())))
            .filter(|(_, p)| !p.is_empty())
            .collect()
    }
}

pub async fn observe_classic(name: &str) -> Option<ClassicObserved> {
    let elb = elb_classic();
    let lb = elb
        .describe_load_balancers()
        .load_balancer_names(name)
        .send()
        .await
        .ok()?
        .load_balancer_descriptions()
        .first()
        .cloned()?;
    let tags = elb
        .describe_tags()
        .load_balancer_names(name)
        .send()
        .await
        .unwrap()
        .tag_descriptions()
        .iter()
        .flat_map(|d| d.tags())
        .map(|t| {
            (
                t.key().to_string(),
                t.value().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let attributes = elb
        .describe_load_balancer_attributes()
        .load_balancer_name(name)
        .send()
        .await
        .unwrap()
        .load_balancer_attributes()
        .cloned()
        .unwrap();
    Some(ClassicObserved {
        lb,
        tags,
        attributes,
    })
}

/// The ingress of a security group as `(protocol, from, to, source)`, sources being CIDRs or group IDs.
pub async fn ingress(world: &World, group: &str) -> BTreeSet<(String, i32, i32, String)> {
    let out = world
        .ec2
        .describe_security_groups()
        .group_ids(group)
        .send()
        .await
        .unwrap();
    let mut rules = BTreeSet::new();
    for p in out
        .security_groups()
        .iter()
        .flat_map(|g| g.ip_permissions())
    {
        let head = (
            p.ip_protocol().unwrap_or_default().to_string(),
            p.from_port().unwrap_or(-1),
            p.to_port().unwrap_or(-1),
        );
        for r in p.ip_ranges() {
            rules.insert((
                head.0.clone(),
                head.1,
                head.2,
                r.cidr_ip().unwrap().to_string(),
            ));
        }
        for g in p.user_id_group_pairs() {
            rules.insert((
                head.0.clone(),
                head.1,
                head.2,
                g.group_id().unwrap().to_string(),
            ));
        }
    }
    rules
}

/// The ID, description and tags of the group named `name` in the world's VPC.
pub async fn group_named(
    world: &World,
    name: &str,
) -> Option<(String, String, BTreeMap<String, String>)> {
    let out = world
        .ec2
        .describe_security_groups()
        .filters(crate::common::filter("group-name", &[name]))
        .filters(crate::common::filter("vpc-id", &[&world.vpc_id]))
        .send()
        .await
        .unwrap();
    let g = out.security_groups().first()?;
    Some((
        g.group_id().unwrap().to_string(),
        g.description().unwrap_or_default().to_string(),
        g.tags()
            .iter()
            .map(|t| {
                (
                    t.key().unwrap().to_string(),
                    t.value().unwrap_or_default().to_string(),
                )
            })
            .collect(),
    ))
}

fn annotate(svc: &mut Service, key: &str, value: &str) {
    svc.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(key.to_string(), value.to_string());
}

fn rule(protocol: &str, from: i32, to: i32, source: &str) -> (String, i32, i32, String) {
    (protocol.to_string(), from, to, source.to_string())
}

#[tokio::test]
async fn classic_lifecycle_with_every_annotation_family() {
    let world = World::new("clb").await;
    let (a, b) = (world.instance(0).await, world.instance(1).await);
    let cloud = provider(&world.config("")).await;
    let mut svc = lb_service(
        "web",
        &[("http", 80, "TCP", 30080), ("https", 443, "TCP", 30443)],
        &[
            (ANN_SSL_CERT, CERT),
            (ANN_SSL_PORTS, "https"),
            // moto stores no instance protocol (it answers the listener's own), so the TLS listener is
            // ssl to ssl here; ssl to tcp, the default, is covered by the spec's unit tests.
            (ANN_BACKEND_PROTOCOL, "ssl"),
            (
                ANN_SSL_NEGOTIATION_POLICY,
                "ELBSecurityPolicy-TLS-1-2-2017-01",
            ),
            (ANN_PROXY_PROTOCOL, "*"),
            (ANN_CONNECTION_IDLE_TIMEOUT, "120"),
            (ANN_CONNECTION_DRAINING_ENABLED, "true"),
            (ANN_CONNECTION_DRAINING_TIMEOUT, "30"),
            (ANN_CROSS_ZONE, "true"),
            (ANN_ADDITIONAL_TAGS, "team=web,tier"),
            (ANN_HC_INTERVAL, "15"),
            (ANN_HC_UNHEALTHY, "3"),
        ],
    );
    svc.spec.as_mut().unwrap().load_balancer_source_ranges = Some(vec!["203.0.113.0/24".into()]);
    let name = default_load_balancer_name(&svc);
    let nodes = nodes_for(&[a.clone(), b.clone()]);

    let status = cloud.ensure_load_balancer("k", &svc, &nodes).await.unwrap();
    let o = observe_classic(&name).await.expect("classic load balancer");
    assert_eq!(
        status.ingress.unwrap()[0].hostname.as_deref(),
        o.lb.dns_name()
    );
    assert_eq!(
        o.listeners(),
        vec![
            (80, "tcp".into(), 30080, "tcp".into(), None),
            (443, "ssl".into(), 30443, "ssl".into(), Some(CERT.into())),
        ]
    );
    let hc = o.lb.health_check().unwrap();
    assert_eq!(
        hc.target(),
        "SSL:30080",
        "an ssl backend is checked over SSL"
    );
    assert_eq!(
        (
            hc.healthy_threshold(),
            hc.unhealthy_threshold(),
            hc.interval(),
            hc.timeout()
        ),
        (2, 3, 15, 5)
    );
    assert_eq!(
        o.attributes.connection_settings().unwrap().idle_timeout(),
        120
    );
    assert!(o.attributes.cross_zone_load_balancing().unwrap().enabled());
    assert!(o.attributes.connection_draining().unwrap().enabled());
    assert_eq!(
        o.attributes.connection_draining().unwrap().timeout(),
        Some(30)
    );
    assert_eq!(
        o.backend_policies(),
        BTreeMap::from([
            (30080, vec!["k8s-proxyprotocol-enabled".to_string()]),
            (30443, vec!["k8s-proxyprotocol-enabled".to_string()]),
        ])
    );
    let tls =
        o.lb.listener_descriptions()
            .iter()
            .find(|d| d.listener().unwrap().load_balancer_port() == 443)
            .unwrap();
    assert_eq!(
        tls.policy_names(),
        ["k8s-SSLNegotiationPolicy-ELBSecurityPolicy-TLS-1-2-2017-01"]
    );
    assert_eq!(o.instances(), BTreeSet::from([a.id.clone(), b.id.clone()]));
    assert_eq!(
        o.tags.get("kubernetes.io/service-name").map(String::as_str),
        Some("default/web")
    );
    assert_eq!(
        o.tags.get(&world.cluster_tag).map(String::as_str),
        Some("owned")
    );
    assert_eq!(o.tags.get("team").map(String::as_str), Some("web"));
    assert_eq!(o.tags.get("tier").map(String::as_str), Some(""));

    // Its own security group, named, described and tagged as upstream's, admits the source range only.
    let (group, description, tags) = group_named(&world, &format!("k8s-elb-{name}"))
        .await
        .unwrap();
    assert_eq!(
        description,
        format!("Security group for Kubernetes ELB {name} (default/web)")
    );
    assert_eq!(
        tags.get(&world.cluster_tag).map(String::as_str),
        Some("owned")
    );
    assert_eq!(o.lb.security_groups(), std::slice::from_ref(&group));
    assert_eq!(
        ingress(&world, &group).await,
        BTreeSet::from([
            rule("tcp", 80, 80, "203.0.113.0/24"),
            rule("tcp", 443, 443, "203.0.113.0/24"),
            rule("icmp", 3, 4, "203.0.113.0/24"),
        ])
    );
    // The nodes' group admits everything from it.
    assert!(
        ingress(&world, &world.node_sg)
            .await
            .contains(&rule("-1", -1, -1, &group))
    );

    // A second sync of the unchanged Service only reads.
    let before = cloud.metrics().mutating_calls();
    cloud.ensure_load_balancer("k", &svc, &nodes).await.unwrap();
    cloud.update_load_balancer("k", &svc, &nodes).await.unwrap();
    assert_eq!(
        cloud.metrics().mutating_calls(),
        before,
        "steady state makes no change"
    );

    // Node b leaves: deregistered; the node group keeps its rule (a is still there).
    cloud
        .update_load_balancer("k", &svc, &nodes_for(std::slice::from_ref(&a)))
        .await
        .unwrap();
    let o = observe_classic(&name).await.unwrap();
    assert_eq!(o.instances(), BTreeSet::from([a.id.clone()]));

    // New node port, no proxy protocol, idle timeout back to the default, a wider source range.
    let mut changed = svc.clone();
    changed.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].node_port = Some(30081);
    changed
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .remove(ANN_PROXY_PROTOCOL);
    changed
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .remove(ANN_CONNECTION_IDLE_TIMEOUT);
    changed.spec.as_mut().unwrap().load_balancer_source_ranges =
        Some(vec!["198.51.100.0/24".into()]);
    cloud
        .ensure_load_balancer("k", &changed, &nodes)
        .await
        .unwrap();
    let o = observe_classic(&name).await.unwrap();
    assert_eq!(
        o.listeners()[0],
        (80, "tcp".into(), 30081, "tcp".into(), None)
    );
    assert_eq!(o.lb.health_check().unwrap().target(), "SSL:30081");
    assert!(
        o.backend_policies().is_empty(),
        "{:?}",
        o.backend_policies()
    );
    assert_eq!(
        o.attributes.connection_settings().unwrap().idle_timeout(),
        60
    );
    assert!(
        !ingress(&world, &group)
            .await
            .iter()
            .any(|r| r.3 == "203.0.113.0/24")
    );
    assert!(
        ingress(&world, &group)
            .await
            .contains(&rule("tcp", 80, 80, "198.51.100.0/24"))
    );
    let dns = o.lb.dns_name().unwrap().to_string();

    // Deletion: the node rule, the load balancer and its own group go; a second deletion is a no-op.
    cloud
        .ensure_load_balancer_deleted("k", &changed)
        .await
        .unwrap();
    assert!(observe_classic(&name).await.is_none(), "{dns} deleted");
    assert!(
        group_named(&world, &format!("k8s-elb-{name}"))
            .await
            .is_none()
    );
    assert!(
        !ingress(&world, &world.node_sg)
            .await
            .iter()
            .any(|r| r.3 == group)
    );
    cloud
        .ensure_load_balancer_deleted("k", &changed)
        .await
        .unwrap();
}

#[tokio::test]
async fn classic_local_traffic_internal_and_configured_group() {
    let world = World::new("clblocal").await;
    let a = world.instance(0).await;
    // A configured ElbSecurityGroup replaces the load balancer's own group and is never changed.
    let shared = world
        .ec2
        .create_security_group()
        .group_name("shared-elb")
        .description("shared")
        .vpc_id(&world.vpc_id)
        .send()
        .await
        .unwrap()
        .group_id()
        .unwrap()
        .to_string();
    let cloud = provider(&world.config(&format!("ElbSecurityGroup = {shared}\n"))).await;
    let mut svc = lb_service(
        "local",
        &[("http", 80, "TCP", 30090)],
        &[(ANN_INTERNAL, "0.0.0.0/0"), (ANN_BACKEND_PROTOCOL, "http")],
    );
    let spec = svc.spec.as_mut().unwrap();
    spec.external_traffic_policy = Some("Local".into());
    spec.health_check_node_port = Some(32100);
    let name = default_load_balancer_name(&svc);
    cloud
        .ensure_load_balancer("k", &svc, &nodes_for(std::slice::from_ref(&a)))
        .await
        .unwrap();
    let o = observe_classic(&name).await.unwrap();
    assert_eq!(o.lb.scheme(), Some("internal"));
    assert_eq!(
        o.listeners(),
        vec![(80, "http".into(), 30090, "http".into(), None)]
    );
    assert_eq!(o.lb.health_check().unwrap().target(), "HTTP:32100/healthz");
    assert_eq!(o.lb.security_groups(), std::slice::from_ref(&shared));
    assert!(
        group_named(&world, &format!("k8s-elb-{name}"))
            .await
            .is_none()
    );
    assert!(
        ingress(&world, &shared).await.is_empty(),
        "a configured group's rules are not managed"
    );
    assert!(
        ingress(&world, &world.node_sg)
            .await
            .contains(&rule("-1", -1, -1, &shared))
    );

    // Deletion leaves the configured group in place.
    cloud.ensure_load_balancer_deleted("k", &svc).await.unwrap();
    assert!(observe_classic(&name).await.is_none());
    assert!(group_named(&world, "shared-elb").await.is_some());
}

#[tokio::test]
async fn classic_type_changes_are_refused_and_deletion_finds_either_type() {
    let world = World::new("clbtype").await;
    let a = world.instance(0).await;
    let cloud = provider(&world.config("")).await;
    let nodes = nodes_for(&[a]);
    let mut svc = lb_service("switch", &[("http", 80, "TCP", 30095)], &[]);
    let name = default_load_balancer_name(&svc);
    cloud.ensure_load_balancer("k", &svc, &nodes).await.unwrap();
    for kind in ["nlb", "nlb-ip"] {
        annotate(&mut svc, ANN_TYPE, kind);
        let err = cloud
            .ensure_load_balancer("k", &svc, &nodes)
            .await
            .unwrap_err();
        let upstream = match kind {
            "nlb" => format!(
                "cannot update Load Balancer Type annotation {ANN_TYPE:?} after creation for NLB"
            ),
            _ => ANN_TYPE.to_string(),
        };
        assert!(err.to_string().starts_with(&upstream), "{kind}: {err}");
    }
    assert!(
        observe_classic(&name).await.is_some(),
        "the classic ELB stays"
    );
    // Deleted whatever the annotation says now.
    cloud.ensure_load_balancer_deleted("k", &svc).await.unwrap();
    assert!(observe_classic(&name).await.is_none());

    // And the other way round: an NLB does not become classic.
    let mut svc = nlb_service("other", &[("http", 80, "TCP", 30096)], &[]);
    cloud.ensure_load_balancer("k", &svc, &nodes).await.unwrap();
    svc.metadata.annotations.as_mut().unwrap().remove(ANN_TYPE);
    let err = cloud
        .ensure_load_balancer("k", &svc, &nodes)
        .await
        .unwrap_err();
    assert!(
        err.to_string().starts_with(&format!(
            "cannot update Load Balancer Type annotation {ANN_TYPE:?} after creation for Classic Load Balancer"
        )),
        "{err}"
    );
    cloud.ensure_load_balancer_deleted("k", &svc).await.unwrap();
}

/// Every malformed classic annotation is refused naming the annotation, before any cloud change.
#[tokio::test]
async fn bad_classic_annotations_change_nothing() {
    let world = World::new("clbbad").await;
    let a = world.instance(0).await;
    let cloud = provider(&world.config("")).await;
    let nodes = nodes_for(&[a]);
    // (Service name, annotations, the annotation the error must name)
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, &'a str);
    let cases: Vec<Case> = vec![
        (
            "proxy",
            vec![(ANN_PROXY_PROTOCOL, "yes")],
            ANN_PROXY_PROTOCOL,
        ),
        (
            "drain",
            vec![(ANN_CONNECTION_DRAINING_ENABLED, "maybe")],
            ANN_CONNECTION_DRAINING_ENABLED,
        ),
        (
            "drain-t",
            vec![(ANN_CONNECTION_DRAINING_TIMEOUT, "x")],
            ANN_CONNECTION_DRAINING_TIMEOUT,
        ),
        (
            "idle",
            vec![(ANN_CONNECTION_IDLE_TIMEOUT, "0")],
            ANN_CONNECTION_IDLE_TIMEOUT,
        ),
        (
            "emit",
            vec![(ANN_ACCESS_LOG_EMIT_INTERVAL, "7")],
            ANN_ACCESS_LOG_EMIT_INTERVAL,
        ),
        (
            "log",
            vec![(ANN_ACCESS_LOG_ENABLED, "nope")],
            ANN_ACCESS_LOG_ENABLED,
        ),
        (
            "log-bucket",
            vec![(ANN_ACCESS_LOG_ENABLED, "true")],
            ANN_ACCESS_LOG_BUCKET,
        ),
        ("zone", vec![(ANN_CROSS_ZONE, "2")], ANN_CROSS_ZONE),
        ("healthy", vec![(ANN_HC_HEALTHY, "1")], ANN_HC_HEALTHY),
        ("unhealthy", vec![(ANN_HC_UNHEALTHY, "x")], ANN_HC_UNHEALTHY),
        ("interval", vec![(ANN_HC_INTERVAL, "1")], ANN_HC_INTERVAL),
        ("timeout", vec![(ANN_HC_TIMEOUT, "99")], ANN_HC_TIMEOUT),
        ("hc-port", vec![(ANN_HC_PORT, "abc")], ANN_HC_PORT),
        ("hc-proto", vec![(ANN_HC_PROTOCOL, "UDP")], ANN_HC_PROTOCOL),
        (
            "backend",
            vec![(ANN_SSL_CERT, CERT), (ANN_BACKEND_PROTOCOL, "HTTP")],
            ANN_BACKEND_PROTOCOL,
        ),
        (
            "tg-attrs",
            vec![(ANN_TARGET_GROUP_ATTRIBUTES, "a=b")],
            ANN_TARGET_GROUP_ATTRIBUTES,
        ),
        ("subnets", vec![(ANN_SUBNETS, " , ")], ANN_SUBNETS),
    ];
    for (name, annotations, subject) in cases {
        let svc = lb_service(name, &[("http", 80, "TCP", 30097)], &annotations);
        let before = cloud.metrics().mutating_calls();
        let err = cloud
            .ensure_load_balancer("k", &svc, &nodes)
            .await
            .unwrap_err();
        assert!(
            err.to_string().starts_with(&format!("{subject}: ")),
            "{name}: {err}"
        );
        assert_eq!(
            cloud.metrics().mutating_calls(),
            before,
            "{name}: no cloud change"
        );
        assert!(
            observe_classic(&default_load_balancer_name(&svc))
                .await
                .is_none()
        );
    }
    // A UDP port cannot be carried by a classic ELB.
    let udp = lb_service("udp", &[("dns", 53, "UDP", 30098)], &[]);
    let err = cloud
        .ensure_load_balancer("k", &udp, &nodes)
        .await
        .unwrap_err();
    assert!(err.to_string().starts_with("spec.ports: "), "{err}");
}
