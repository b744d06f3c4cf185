//! Admission of LoadBalancer Services (the `lb-service` webhook): the annotations and spec checked with
//! the parsers of [`super::spec`] and [`super::classic::spec`], and upstream's refusal of a type
//! annotation that no longer matches the load balancer in the Service's status (a classic ELB's hostname
//! ends in `.elb.amazonaws.com`, an NLB's in `.elb.<region>.amazonaws.com`). No AWS call is made; Services
//! left to the AWS Load Balancer Controller (`nlb-ip`, `external`) are admitted unchecked.

use cloud_provider::{CloudError, ServiceAdmission, Verdict};
use k8s_openapi::api::core::v1::Service;

use super::classic::spec as classic_spec;
use super::spec::{self, LbKind, lb_kind};
use super::type_change_refused;
use crate::cloud::AwsCloud;
use crate::config::ClusterHealthProbe;

/// The hostname suffix of classic load balancers.
const CLASSIC_HOSTNAME_SUFFIX: &str = ".elb.amazonaws.com";

/// The hostname of the Service's first ingress, once it has a load balancer.
fn ingress_hostname(service: &Service) -> Option<&str> {
    service
        .status
        .as_ref()?
        .load_balancer
        .as_ref()?
        .ingress
        .as_ref()?
        .first()?
        .hostname
        .as_deref()
}

/// The checks of [`ServiceAdmission::admit_service`], with the errors the service controller reports.
fn check_service(service: &Service, probe: &ClusterHealthProbe) -> Result<(), CloudError> {
    let created_as_classic =
        ingress_hostname(service).map(|h| h.ends_with(CLASSIC_HOSTNAME_SUFFIX));
    match lb_kind(service) {
        LbKind::Elsewhere(_) => Ok(()),
        LbKind::Nlb => {
            spec::parse(service, probe)?;
            match created_as_classic {
                Some(true) => Err(type_change_refused("NLB", "a classic load balancer")),
                _ => Ok(()),
            }
        }
        LbKind::Classic => {
            classic_spec::parse(service, probe)?;
            match created_as_classic {
                Some(false) => Err(type_change_refused(
                    "Classic Load Balancer",
                    "a network load balancer",
                )),
                _ => Ok(()),
            }
        }
    }
}

#[async_trait::async_trait]
impl ServiceAdmission for AwsCloud {
    async fn admit_service(
        &self,
        _cluster_name: &str,
        service: &Service,
        _old: Option<&Service>,
    ) -> Verdict {
        Verdict::from_check(check_service(service, &self.config.cluster_health_probe))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load_balancer::spec::{ANN_HC_INTERVAL, ANN_TYPE};
    use k8s_openapi::api::core::v1::{
        LoadBalancerIngress, LoadBalancerStatus, ServicePort, ServiceSpec, ServiceStatus,
    };

    fn service(annotations: &[(&str, &str)], hostname: Option<&str>) -> Service {
        let mut svc = Service {
            spec: Some(ServiceSpec {
                type_: Some("LoadBalancer".into()),
                ports: Some(vec![ServicePort {
                    port: 80,
                    node_port: Some(30080),
                    protocol: Some("TCP".into()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            status: hostname.map(|h| ServiceStatus {
                load_balancer: Some(LoadBalancerStatus {
                    ingress: Some(vec![LoadBalancerIngress {
                        hostname: Some(h.into()),
                        ..Default::default()
                    }]),
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        svc.metadata.name = Some("web".into());
        svc.metadata.namespace = Some("default".into());
        svc.metadata.uid = Some("11111111-2222-3333-4444-555555555555".into());
        svc.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        svc
    }

    fn check(annotations: &[(&str, &str)], hostname: Option<&str>) -> Result<(), String> {
        check_service(
            &service(annotations, hostname),
            &ClusterHealthProbe::default(),
        )
        .map_err(|e| e.to_string())
    }

    #[test]
    fn the_parsers_errors_refuse() {
        assert_eq!(check(&[], None), Ok(()));
        assert_eq!(check(&[(ANN_TYPE, "nlb")], None), Ok(()));
        for kind in [None, Some("nlb")] {
            let mut annotations = vec![(ANN_HC_INTERVAL, "often")];
            annotations.extend(kind.map(|k| (ANN_TYPE, k)));
            let err = check(&annotations, None).unwrap_err();
            assert!(err.contains(ANN_HC_INTERVAL), "{kind:?}: {err}");
        }
    }

    #[test]
    fn the_type_annotation_cannot_change_after_creation() {
        let classic = Some("a1-123.us-east-1.elb.amazonaws.com");
        let nlb = Some("a1-123.elb.us-east-1.amazonaws.com");
        assert_eq!(check(&[], classic), Ok(()));
        assert_eq!(check(&[(ANN_TYPE, "nlb")], nlb), Ok(()));
        let err = check(&[(ANN_TYPE, "nlb")], classic).unwrap_err();
        assert!(
            err.starts_with("cannot update Load Balancer Type annotation"),
            "{err}"
        );
        assert!(err.contains("for NLB"), "{err}");
        let err = check(&[], nlb).unwrap_err();
        assert!(err.contains("for Classic Load Balancer"), "{err}");
    }

    #[test]
    fn services_of_the_aws_load_balancer_controller_are_not_checked() {
        assert_eq!(
            check(&[(ANN_TYPE, "external"), (ANN_HC_INTERVAL, "often")], None),
            Ok(())
        );
    }
}
