//! Admission of LoadBalancer Services: the same errors as `ensure_load_balancer`, without a change.

use cloud_provider::{LoadBalancer, ServiceAdmission, Verdict};

use super::{cloud, node, service};
use crate::ANN_PROXY_PROTOCOL;

fn with_proxy(
    mut s: k8s_openapi::api::core::v1::Service,
    value: &str,
) -> k8s_openapi::api::core::v1::Service {
    s.metadata.annotations = Some([(ANN_PROXY_PROTOCOL.to_string(), value.to_string())].into());
    s
}

fn with_ip(
    mut s: k8s_openapi::api::core::v1::Service,
    ip: &str,
) -> k8s_openapi::api::core::v1::Service {
    s.spec.as_mut().unwrap().load_balancer_ip = Some(ip.to_string());
    s
}

#[tokio::test]
async fn refusals_carry_the_text_of_the_load_balancers_error() {
    let c = cloud("loadBalancerCIDR: 198.51.100.0/24");
    let nodes = [node("n1")];
    let cases = [
        with_proxy(service("a", "uid-a", &[(80, 30080)]), "v3"),
        with_ip(service("b", "uid-b", &[(80, 30081)]), "10.0.0.1"),
        with_ip(service("c", "uid-c", &[(80, 30082)]), "not-an-ip"),
    ];
    for svc in cases {
        let verdict = c.admit_service("kubernetes", &svc, None).await;
        let err = c
            .ensure_load_balancer("kubernetes", &svc, &nodes)
            .await
            .unwrap_err();
        assert_eq!(verdict, Verdict::denied(err.to_string()));
    }
    assert!(c.handle().load_balancers().is_empty(), "nothing created");
}

#[tokio::test]
async fn good_services_pass_and_an_address_in_use_is_refused() {
    let c = cloud("loadBalancerCIDR: 198.51.100.0/24");
    let nodes = [node("n1")];
    let first = with_proxy(
        with_ip(service("a", "uid-a", &[(80, 30080)]), "198.51.100.7"),
        "v2",
    );
    assert_eq!(
        c.admit_service("kubernetes", &first, None).await,
        Verdict::allowed()
    );
    let status = c
        .ensure_load_balancer("kubernetes", &first, &nodes)
        .await
        .unwrap();
    let ingress = &status.ingress.unwrap()[0];
    assert_eq!(
        ingress.ip_mode.as_deref(),
        Some("Proxy"),
        "PROXY protocol: ipMode Proxy"
    );
    // The Service's own address is still good; another Service's is not.
    assert_eq!(
        c.admit_service("kubernetes", &first, Some(&first)).await,
        Verdict::allowed()
    );
    let second = with_ip(service("b", "uid-b", &[(80, 30081)]), "198.51.100.7");
    let Verdict::Denied { message } = c.admit_service("kubernetes", &second, None).await else {
        panic!("an address in use is refused");
    };
    assert_eq!(
        message,
        "requested load balancer IP 198.51.100.7 is already in use"
    );
}
