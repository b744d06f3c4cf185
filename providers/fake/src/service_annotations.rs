//! What the fake cloud reads from a LoadBalancer Service besides its ports: `spec.loadBalancerIP` (a host
//! address of the pool) and the annotation [`ANN_PROXY_PROTOCOL`]. The same functions serve the load
//! balancers and the admission checks, so both report the same errors.

use std::net::IpAddr;

use cloud_provider::CloudError;
use k8s_openapi::api::core::v1::Service;

use crate::config::ProxyProtocol;

/// The PROXY protocol version the load balancer sends to the backends: `v1` or `v2` (absent or empty:
/// none). A load balancer that sends it reports `ipMode: Proxy`.
pub const ANN_PROXY_PROTOCOL: &str =
    "fake.cloud-provider.kubernetes.io/load-balancer-proxy-protocol";

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
