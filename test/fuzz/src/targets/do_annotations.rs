//! `do_annotations`: a Service with arbitrary `service.beta.kubernetes.io/do-loadbalancer-*` annotations
//! through the DigitalOcean provider's Service parsers (the load-balancer spec with its forwarding rules,
//! health check, sticky sessions and firewall, the LB type and network, names, IDs and ownership).
//!
//! Input: byte 0 picks the default LB type (bit 0) and which backend nodes exist (bits 1–3: an IPv4 node, a
//! dual-stack node, an IPv6-only node); the rest is an [`input::service`] over [`KEYS`]. A second field
//! after `0xFF` is fed to the Go-style number and boolean parsers.
//!
//! Contract: no panic; parsing is deterministic; an accepted spec has at least one forwarding rule and a
//! request built from it carries the spec's name; a value the Go-style parsers accept prints back to itself
//! (after Go's normalisation).

use std::sync::LazyLock;

use cloud_provider::annotations::{names, parse_go_bool, parse_go_int, parse_go_uint};
use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use provider_digitalocean::LbType;
use provider_digitalocean::annotations as ann;
use provider_digitalocean::lb_nodes::select_nodes;
use provider_digitalocean::lb_spec::{Placement, build_spec};

use crate::input;

/// Every Service annotation the DigitalOcean provider reads (its annotation table, in table order: the
/// corpus selects keys by index), then the source-ranges annotation, which it must ignore.
pub static KEYS: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
    let mut keys = names(provider_digitalocean::annotation_table::ANNOTATIONS);
    keys.push(input::SOURCE_RANGES_ANNOTATION);
    keys
});

/// Runs the DigitalOcean Service parsers over one input.
pub fn check(data: &[u8]) {
    let [service_bytes, values] = input::fields(data, 2)[..] else {
        unreachable!("fields returns exactly two fields")
    };
    check_service(service_bytes);
    check_go_values(&input::text(values));
}

fn check_service(data: &[u8]) {
    let (shape, rest) = data.split_first().unwrap_or((&0, &[]));
    let default_type = if shape & 1 == 0 {
        LbType::RegionalNetwork
    } else {
        LbType::Regional
    };
    let nodes = backend_nodes(*shape);
    let service = input::service(rest, &KEYS);

    let _ = ann::load_balancer_name(&service);
    let _ = ann::load_balancer_name_candidates(&service);
    let _ = ann::load_balancer_id(&service);
    let _ = ann::is_disowned(&service);
    let _ = (
        ann::hostname(&service),
        ann::reserved_ip(&service),
        ann::subnet_uuid(&service),
    );
    let lb_type = ann::lb_type(&service, default_type).unwrap_or(default_type);
    let network = ann::network(&service).unwrap_or("EXTERNAL");
    let selection = select_nodes(&nodes, lb_type, network);
    let certificate = ann::certificate_id(&service).unwrap_or_default();

    let spec = build_spec(&service, lb_type, &selection, certificate);
    let again = build_spec(&service, lb_type, &selection, certificate);
    assert_eq!(
        format!("{spec:?}"),
        format!("{again:?}"),
        "spec parse is not deterministic"
    );
    if let Ok(spec) = spec {
        assert!(
            !spec.forwarding_rules.is_empty(),
            "an accepted spec without forwarding rules"
        );
        let request = spec.request(Placement::default(), ann::reserved_ip(&service));
        assert_eq!(request.name, spec.name);
        let _ = spec.proxies_traffic();
    }
}

/// An IPv4 node, a dual-stack node and an IPv6-only node, each present when its bit (1, 2, 3) is set.
fn backend_nodes(shape: u8) -> Vec<Node> {
    let node = |name: &str, ips: &[&str]| Node {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..ObjectMeta::default()
        },
        status: Some(NodeStatus {
            addresses: Some(
                ips.iter()
                    .map(|ip| NodeAddress {
                        type_: "ExternalIP".to_string(),
                        address: ip.to_string(),
                    })
                    .collect(),
            ),
            ..NodeStatus::default()
        }),
        ..Node::default()
    };
    let candidates = [
        (0b10, node("v4", &["10.0.0.1"])),
        (0b100, node("dual", &["10.0.0.2", "fd00::2"])),
        (0b1000, node("v6", &["fd00::3"])),
    ];
    candidates
        .into_iter()
        .filter(|(bit, _)| shape & bit != 0)
        .map(|(_, n)| n)
        .collect()
}

/// Go's `strconv` parsers as the provider reads annotation values: accepted values print back the same.
fn check_go_values(value: &str) {
    if let Some(b) = parse_go_bool(value) {
        assert_eq!(parse_go_bool(&b.to_string()), Some(b));
    }
    if let Some(i) = parse_go_int(value) {
        assert_eq!(parse_go_int(&i.to_string()), Some(i));
        assert!(
            value
                .trim_start_matches(['+', '-'])
                .bytes()
                .all(|c| c.is_ascii_digit())
        );
    }
    if let Some(u) = parse_go_uint(value) {
        assert_eq!(parse_go_uint(&u.to_string()), Some(u));
        assert!(
            value.bytes().all(|c| c.is_ascii_digit()),
            "uint {value:?} accepted"
        );
    }
    let _ = ann::parse_lb_type(value, LbType::RegionalNetwork);
}
