//! Turning fuzz bytes into what the parsers read: fields split at `0xFF`, text, and a Service whose
//! annotations and ports come from the input.
//!
//! Service layout (see [`service`]): byte 0 is the shape, then 4 bytes per port, then annotation lines
//! separated by `\n`. The first byte of a line picks the annotation key from the target's list, so the
//! fuzzer reaches every annotation's parser without having to guess its name; the rest of the line is the
//! value.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// The pseudo annotation key that sets `spec.loadBalancerSourceRanges` (comma-separated) instead.
pub const SOURCE_RANGES_FIELD: &str = "spec.loadBalancerSourceRanges";

/// The annotation both providers read for client CIDRs when the spec field is empty.
pub const SOURCE_RANGES_ANNOTATION: &str = "service.beta.kubernetes.io/load-balancer-source-ranges";

/// `data` split at `0xFF` bytes into exactly `n` fields: the last keeps the rest, missing ones are empty.
pub fn fields(data: &[u8], n: usize) -> Vec<&[u8]> {
    let mut out: Vec<&[u8]> = data.splitn(n, |b| *b == 0xFF).collect();
    out.resize(n, &[]);
    out
}

/// The bytes as text, invalid UTF-8 replaced (the parsers take `&str`, as the API server hands them).
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A Service named `default/web` built from `data`.
///
/// Byte 0, the shape: bits 0–1 the number of ports (0–3), bit 2 `externalTrafficPolicy: Local`, bit 3
/// dual-stack IP families, bit 4 `type: NodePort` (else `LoadBalancer`), bit 5 the even ports are UDP.
/// Then per port: the port (2 bytes, big-endian), the node port's offset from 30000, the target port (0:
/// the named port `http`). Then `\n`-separated lines: the first byte picks a key from `keys` followed by
/// [`SOURCE_RANGES_FIELD`] (modulo their count), the rest is the value; a later line for the same key wins.
pub fn service(data: &[u8], keys: &[&str]) -> Service {
    let shape = data.first().copied().unwrap_or(0);
    let port_count = usize::from(shape & 0b11);
    let port_bytes = data.get(1..).unwrap_or_default();
    let ports = (0..port_count).map(|i| port(i, shape, port_bytes.get(i * 4..i * 4 + 4)));
    let rest = port_bytes.get(port_count * 4..).unwrap_or_default();

    let mut annotations = BTreeMap::new();
    let mut source_ranges = None;
    for line in rest.split(|b| *b == b'\n') {
        let Some((selector, value)) = line.split_first() else {
            continue;
        };
        let index = usize::from(*selector) % (keys.len() + 1);
        let value = text(value);
        match keys.get(index) {
            Some(key) => {
                annotations.insert((*key).to_string(), value);
            }
            None => source_ranges = Some(value.split(',').map(str::to_string).collect()),
        }
    }
    let families = if shape & 0b1000 != 0 {
        vec!["IPv4".to_string(), "IPv6".to_string()]
    } else {
        vec!["IPv4".to_string()]
    };
    Service {
        metadata: ObjectMeta {
            name: Some("web".to_string()),
            namespace: Some("default".to_string()),
            uid: Some("4f9f5c6e-0d1c-4d5e-9d7b-2a1b3c4d5e6f".to_string()),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            type_: Some(
                if shape & 0b1_0000 != 0 {
                    "NodePort"
                } else {
                    "LoadBalancer"
                }
                .to_string(),
            ),
            external_traffic_policy: Some(
                if shape & 0b100 != 0 {
                    "Local"
                } else {
                    "Cluster"
                }
                .to_string(),
            ),
            health_check_node_port: (shape & 0b100 != 0).then_some(32000),
            ip_families: Some(families),
            ports: Some(ports.collect()),
            load_balancer_source_ranges: source_ranges,
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// Port `index` of the Service from its 4 bytes (missing bytes read as zero).
fn port(index: usize, shape: u8, bytes: Option<&[u8]>) -> ServicePort {
    let b = |i: usize| bytes.and_then(|b| b.get(i)).copied().unwrap_or(0);
    let udp = shape & 0b10_0000 != 0 && index.is_multiple_of(2);
    ServicePort {
        name: Some(format!("p{index}")),
        port: i32::from(u16::from_be_bytes([b(0), b(1)])),
        node_port: Some(30000 + i32::from(b(2))),
        target_port: Some(match b(3) {
            0 => IntOrString::String("http".to_string()),
            n => IntOrString::Int(i32::from(n)),
        }),
        protocol: Some(if udp { "UDP" } else { "TCP" }.to_string()),
        ..ServicePort::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_pads_and_keeps_the_rest() {
        assert_eq!(fields(b"a\xFFb\xFFc", 2), vec![&b"a"[..], &b"b\xFFc"[..]]);
        assert_eq!(fields(b"a", 3), vec![&b"a"[..], &b""[..], &b""[..]]);
    }

    #[test]
    fn service_reads_shape_ports_and_lines() {
        let data = b"\x02\x00\x50\x01\x00\x01\xbb\x02\x08\n\x00yes\n\x01x\n\x02 10.0.0.0/8 ,::/0";
        let svc = service(data, &["k0", "k1"]);
        let spec = svc.spec.unwrap();
        let ports = spec.ports.unwrap();
        assert_eq!((ports[0].port, ports[0].node_port), (80, Some(30001)));
        assert_eq!(
            ports[0].target_port,
            Some(IntOrString::String("http".into()))
        );
        assert_eq!(
            (ports[1].port, ports[1].target_port.clone()),
            (443, Some(IntOrString::Int(8)))
        );
        let annotations = svc.metadata.annotations.unwrap();
        assert_eq!(annotations["k0"], "yes");
        assert_eq!(annotations["k1"], "x");
        assert_eq!(
            spec.load_balancer_source_ranges.unwrap(),
            vec![" 10.0.0.0/8 ".to_string(), "::/0".to_string()]
        );
    }
}
