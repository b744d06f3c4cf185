//! `aws_annotations`: a Service with arbitrary `service.beta.kubernetes.io/aws-load-balancer-*` annotations
//! through the AWS provider's Service parsers (network and classic load balancer specs, the LB kind, the
//! security-group lists).
//!
//! Input: byte 0 bit 0 picks the cluster health probe (each Service's node port, or the shared kube-proxy
//! endpoint); the rest is an [`input::service`] over [`KEYS`].
//!
//! Contract: no panic; parsing is deterministic; an accepted spec's lists hold no empty item, its label and
//! tag maps no empty key, its source ranges are truncated and unique, and they parse back to themselves
//! when written into `spec.loadBalancerSourceRanges`.

use std::sync::LazyLock;

use cloud_provider::annotations::names;
use ipnet::IpNet;
use k8s_openapi::api::core::v1::Service;
use provider_aws::config::ClusterHealthProbe;
use provider_aws::load_balancer::{classic, spec};

use crate::input;

/// Every Service annotation the AWS provider reads: its annotation table, in table order (the corpus
/// selects keys by index).
pub static KEYS: LazyLock<Vec<&'static str>> =
    LazyLock::new(|| names(provider_aws::load_balancer::annotations::ANNOTATIONS));

/// Runs the AWS Service parsers over one input.
pub fn check(data: &[u8]) {
    let (probe_bit, rest) = data.split_first().unwrap_or((&0, &[]));
    let probe = if probe_bit & 1 == 0 {
        ClusterHealthProbe::ServiceNodePort
    } else {
        ClusterHealthProbe::Shared {
            port: 10256,
            path: "/healthz".to_string(),
        }
    };
    let service = input::service(rest, &KEYS);
    let _ = spec::lb_kind(&service);
    let (groups, extra) = spec::annotated_security_groups(&service);
    assert_no_empty_items("security groups", &groups);
    assert_no_empty_items("extra security groups", &extra);

    let nlb = spec::parse(&service, &probe);
    assert_eq!(
        nlb,
        spec::parse(&service, &probe),
        "NLB parse is not deterministic"
    );
    if let Ok(nlb) = nlb {
        assert_no_empty_items("subnets", nlb.subnets.as_deref().unwrap_or_default());
        assert_no_empty_items(
            "EIP allocations",
            nlb.eip_allocations.as_deref().unwrap_or_default(),
        );
        assert_no_empty_keys("tags", nlb.additional_tags.keys());
        assert_no_empty_keys("target node labels", nlb.target_node_labels.keys());
        assert_no_empty_keys(
            "target group attributes",
            nlb.target_group_attributes.keys(),
        );
        assert_ranges_round_trip(&service, &nlb.source_ranges, |s| {
            spec::parse(s, &probe).map(|spec| spec.source_ranges)
        });
    }

    let elb = classic::spec::parse(&service, &probe);
    assert_eq!(
        elb,
        classic::spec::parse(&service, &probe),
        "classic parse is not deterministic"
    );
    if let Ok(elb) = elb {
        assert_no_empty_items("subnets", elb.subnets.as_deref().unwrap_or_default());
        assert_no_empty_keys("tags", elb.additional_tags.keys());
        assert_no_empty_keys("target node labels", elb.target_node_labels.keys());
        assert_ranges_round_trip(&service, &elb.source_ranges, |s| {
            classic::spec::parse(s, &probe).map(|spec| spec.source_ranges)
        });
    }
}

fn assert_no_empty_items(what: &str, items: &[String]) {
    assert!(
        items.iter().all(|i| !i.trim().is_empty()),
        "an empty item in {what}: {items:?}"
    );
}

fn assert_no_empty_keys<'a>(what: &str, mut keys: impl Iterator<Item = &'a String>) {
    assert!(keys.all(|k| !k.is_empty()), "an empty key in {what}");
}

/// Accepted source ranges are truncated and unique, and read back the same from the spec field.
fn assert_ranges_round_trip<E: std::fmt::Debug>(
    service: &Service,
    ranges: &[IpNet],
    reparse: impl Fn(&Service) -> Result<Vec<IpNet>, E>,
) {
    for (i, net) in ranges.iter().enumerate() {
        assert_eq!(*net, net.trunc(), "source range {net} is not truncated");
        assert!(
            !ranges[..i].contains(net),
            "source range {net} listed twice"
        );
    }
    if ranges.is_empty() {
        return;
    }
    let mut written = service.clone();
    let spec = written.spec.get_or_insert_with(Default::default);
    spec.load_balancer_source_ranges = Some(ranges.iter().map(IpNet::to_string).collect());
    let again =
        reparse(&written).expect("a Service with its own accepted source ranges is refused");
    assert_eq!(again, ranges, "source ranges do not round-trip");
}
