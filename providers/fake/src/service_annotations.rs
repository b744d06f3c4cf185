//! What the fake cloud reads from a LoadBalancer Service besides its ports: `spec.loadBalancerIP` (a host
//! address of the pool), the annotation [`ANN_PROXY_PROTOCOL`], and for the data path the source ranges
//! and session affinity. The same functions serve the load balancers and the admission checks, so both
//! report the same errors.

use std::net::IpAddr;
use std::time::Duration;

use cloud_provider::CloudError;
use k8s_openapi::api::core::v1::Service;

use crate::config::ProxyProtocol;
use crate::pool::Cidr;

/// The PROXY protocol version the load balancer sends to the backends: `v1` or `v2` (absent or empty:
/// none). A load balancer that sends it reports `ipMode: Proxy`.
pub const ANN_PROXY_PROTOCOL: &str =
    "fake.cloud-provider.kubernetes.io/load-balancer-proxy-protocol";

/// The source ranges of a Service, when `spec.loadBalancerSourceRanges` is empty (Kubernetes' own
/// annotation: comma-separated CIDRs).
pub const ANN_SOURCE_RANGES: &str = "service.beta.kubernetes.io/load-balancer-source-ranges";

/// How long a ClientIP affinity lasts when the Service does not say (Kubernetes' default, 3 hours).
const DEFAULT_AFFINITY_SECONDS: i32 = 10_800;

/// `namespace/name` of a Service.
pub(crate) fn service_key(service: &Service) -> String {
    format!(
        "{}/{}",
        service.metadata.namespace.as_deref().unwrap_or("default"),
        service.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The address `spec.loadBalancerIP` asks for, if any.
pub(crate) fn requested_ip(service: &Service) -> Result<Option<IpAddr>, CloudError> {
    match service
        .spec
        .as_ref()
        .and_then(|s| s.load_balancer_ip.as_deref())
        .filter(|s| !s.is_empty())
    {
        None => Ok(None),
        Some(raw) => raw.parse().map(Some).map_err(|_| {
            CloudError::provider(format!(
                "service {} requests loadBalancerIP {raw:?}, which is not an IP address",
                service_key(service)
            ))
        }),
    }
}

/// The PROXY protocol version [`ANN_PROXY_PROTOCOL`] asks for.
pub(crate) fn proxy_protocol(service: &Service) -> Result<Option<ProxyProtocol>, CloudError> {
    let value = service
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANN_PROXY_PROTOCOL))
        .map(|v| v.trim());
    match value {
        None | Some("") => Ok(None),
        Some("v1") => Ok(Some(ProxyProtocol::V1)),
        Some("v2") => Ok(Some(ProxyProtocol::V2)),
        Some(other) => Err(CloudError::provider(format!(
            "annotation {ANN_PROXY_PROTOCOL:?} of service {}: {other:?} is not a PROXY protocol version \
             (v1, v2)",
            service_key(service)
        ))),
    }
}

/// The client networks allowed to connect: `spec.loadBalancerSourceRanges`, else [`ANN_SOURCE_RANGES`];
/// empty means everyone.
pub(crate) fn source_ranges(service: &Service) -> Result<Vec<Cidr>, CloudError> {
    let from_spec = service
        .spec
        .as_ref()
        .and_then(|s| s.load_balancer_source_ranges.clone())
        .unwrap_or_default();
    let (ranges, origin) = if from_spec.is_empty() {
        let annotation = service
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANN_SOURCE_RANGES))
            .map(|v| v.split(',').map(str::to_string).collect::<Vec<_>>())
            .unwrap_or_default();
        (annotation, format!("annotation {ANN_SOURCE_RANGES:?}"))
    } else {
        (from_spec, "spec.loadBalancerSourceRanges".to_string())
    };
    ranges
        .iter()
        .filter(|r| !r.trim().is_empty())
        .map(|r| {
            Cidr::parse_masked(r).map_err(|e| {
                CloudError::provider(format!("{origin} of service {}: {e}", service_key(service)))
            })
        })
        .collect()
}

/// How long a client stays with its backend: `sessionAffinity: ClientIP` and its timeout, else `None`.
pub(crate) fn client_affinity(service: &Service) -> Option<Duration> {
    let spec = service.spec.as_ref()?;
    if spec.session_affinity.as_deref() != Some("ClientIP") {
        return None;
    }
    let seconds = spec
        .session_affinity_config
        .as_ref()
        .and_then(|c| c.client_ip.as_ref())
        .and_then(|c| c.timeout_seconds)
        .filter(|s| *s > 0)
        .unwrap_or(DEFAULT_AFFINITY_SECONDS);
    Some(Duration::from_secs(u64::try_from(seconds).unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(annotation: Option<&str>, ip: Option<&str>) -> Service {
        let mut s = Service::default();
        s.metadata.namespace = Some("default".into());
        s.metadata.name = Some("web".into());
        s.metadata.annotations =
            annotation.map(|v| [(ANN_PROXY_PROTOCOL.to_string(), v.to_string())].into());
        s.spec = Some(k8s_openapi::api::core::v1::ServiceSpec {
            load_balancer_ip: ip.map(str::to_string),
            ..Default::default()
        });
        s
    }

    #[test]
    fn proxy_protocol_versions() {
        assert_eq!(proxy_protocol(&service(None, None)).unwrap(), None);
        assert_eq!(proxy_protocol(&service(Some(""), None)).unwrap(), None);
        assert_eq!(
            proxy_protocol(&service(Some("v1"), None)).unwrap(),
            Some(ProxyProtocol::V1)
        );
        assert_eq!(
            proxy_protocol(&service(Some(" v2 "), None)).unwrap(),
            Some(ProxyProtocol::V2)
        );
        let err = proxy_protocol(&service(Some("v3"), None))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            format!(
                "annotation {ANN_PROXY_PROTOCOL:?} of service default/web: \"v3\" is not a PROXY protocol version (v1, v2)"
            )
        );
    }

    #[test]
    fn source_ranges_from_the_spec_before_the_annotation() {
        let mut s = service(None, None);
        assert!(source_ranges(&s).unwrap().is_empty());
        s.metadata.annotations = Some(
            [(
                ANN_SOURCE_RANGES.to_string(),
                "10.0.0.5/8, 192.168.1.0/24".to_string(),
            )]
            .into(),
        );
        let ranges: Vec<String> = source_ranges(&s)
            .unwrap()
            .iter()
            .map(|c| c.to_string())
            .collect();
        assert_eq!(ranges, ["10.0.0.0/8", "192.168.1.0/24"]);
        s.spec.as_mut().unwrap().load_balancer_source_ranges = Some(vec!["127.0.0.2/32".into()]);
        let ranges: Vec<String> = source_ranges(&s)
            .unwrap()
            .iter()
            .map(|c| c.to_string())
            .collect();
        assert_eq!(ranges, ["127.0.0.2/32"]);
        s.spec.as_mut().unwrap().load_balancer_source_ranges = None;
        s.metadata.annotations =
            Some([(ANN_SOURCE_RANGES.to_string(), "10.0.0.0".to_string())].into());
        let err = source_ranges(&s).unwrap_err().to_string();
        assert!(err.contains("of service default/web"), "{err}");
        assert!(err.contains("is not a CIDR"), "{err}");
    }

    #[test]
    fn client_affinity_and_its_timeout() {
        let mut s = service(None, None);
        assert_eq!(client_affinity(&s), None);
        s.spec.as_mut().unwrap().session_affinity = Some("ClientIP".into());
        assert_eq!(client_affinity(&s), Some(Duration::from_secs(10_800)));
        s.spec.as_mut().unwrap().session_affinity_config =
            serde_json::from_value(serde_json::json!({"clientIP": {"timeoutSeconds": 60}}))
                .unwrap();
        assert_eq!(client_affinity(&s), Some(Duration::from_secs(60)));
    }

    #[test]
    fn requested_addresses() {
        assert_eq!(requested_ip(&service(None, Some(""))).unwrap(), None);
        assert_eq!(
            requested_ip(&service(None, Some("198.51.100.7"))).unwrap(),
            Some("198.51.100.7".parse().unwrap())
        );
        let err = requested_ip(&service(None, Some("nine")))
            .unwrap_err()
            .to_string();
        assert!(err.contains("which is not an IP address"), "{err}");
    }
}
