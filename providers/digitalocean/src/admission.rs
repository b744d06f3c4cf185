//! Admission of LoadBalancer Services (the `lb-service` webhook), as DigitalOcean's admission server checks
//! them: the load-balancer request is built from the Service with the parsers the controller uses (a
//! parser's error refuses the Service with the text of the controller's event), then sent to the API with
//! `validate_only` so the API checks it without creating or changing anything: `POST /v2/load_balancers`
//! for a Service without a load balancer, `PUT /v2/load_balancers/{id}` for one with an ID annotation.
//!
//! The API's 4xx answers refuse the Service; when the API cannot be asked (no answer, 5xx, rate
//! limited, the region unknown) the Service is admitted with a warning. An update that changes nothing
//! in the request is admitted without a call, and a disowned load balancer is not checked.

use cloud_provider::{CloudError, ServiceAdmission, Verdict};
use k8s_openapi::api::core::v1::Service;
use reqwest::Method;

use crate::annotations::{
    certificate_id, certificate_name, is_disowned, lb_type, load_balancer_id, reserved_ip,
};
use crate::api::LoadBalancerRequest;
use crate::cloud::DigitalOceanCloud;
use crate::config::LbType;
use crate::lb_spec::build_spec_without_nodes;
use crate::load_balancers::certificate_not_found;

/// What the checks of one Service came to before the API is asked.
#[derive(Debug, PartialEq)]
enum Prepared {
    /// The request to validate.
    Request(Box<LoadBalancerRequest>),
    /// Refused without asking the API.
    Denied(String),
    /// Cannot be checked now: admitted with this warning.
    Unchecked(String),
}

/// The warning of a check the API could not answer.
fn unchecked_warning(what: &str, err: impl std::fmt::Display) -> String {
    format!(
        "the DigitalOcean API could not {what} ({err}); the Service was admitted unchecked and is \
         checked again when its load balancer is synced"
    )
}

/// A check the API could not answer.
fn unchecked(what: &str, err: impl std::fmt::Display) -> Prepared {
    Prepared::Unchecked(unchecked_warning(what, err))
}

impl DigitalOceanCloud {
    /// The validate-only request of `service`'s load balancer, or why there is none.
    async fn prepare_request(&self, service: &Service) -> Prepared {
        let lb_type = match lb_type(service, self.config.default_lb_type) {
            Ok(t) => t,
            Err(err) => return Prepared::Denied(err.to_string()),
        };
        let certificate = match (lb_type, certificate_id(service), certificate_name(service)) {
            (LbType::RegionalNetwork, _, _) | (_, None, None) => String::new(),
            (_, Some(id), _) => id.to_string(),
            (_, None, Some(name)) => match self.find_certificate_by_name(name).await {
                Ok(Some(found)) => found.id,
                Ok(None) => return Prepared::Denied(certificate_not_found(name).to_string()),
                Err(err) => return unchecked("look up the certificate", err),
            },
        };
        let spec = match build_spec_without_nodes(service, lb_type, &certificate) {
            Ok(spec) => spec,
            Err(err) => return Prepared::Denied(CloudError::from(err).to_string()),
        };
        if self.region().is_none()
            && let Err(err) = self.prepare().await
        {
            return unchecked("tell the region", err);
        }
        let placement = match self.placement(Vec::new()) {
            Ok(placement) => placement,
            Err(err) => return unchecked("tell the region", err),
        };
        let mut request = spec.request(placement, reserved_ip(service));
        request.validate_only = true;
        Prepared::Request(Box::new(request))
    }

    /// Asks the API to validate `request` for the load balancer `id` (an update) or a new one; a 404 for
    /// `id` (a stale annotation: the controller then looks the load balancer up by name) validates it as a
    /// new one.
    async fn validate_request(&self, request: &LoadBalancerRequest, id: Option<&str>) -> Verdict {
        if let Some(id) = id {
            let path = format!("v2/load_balancers/{id}");
            let answer = self
                .client
                .validate_only("validate_load_balancer_update", Method::PUT, &path, request)
                .await;
            match answer {
                Err(err) if err.is_not_found() => {}
                answer => return verdict_of(answer),
            }
        }
        let answer = self
            .client
            .validate_only(
                "validate_load_balancer_create",
                Method::POST,
                "v2/load_balancers",
                request,
            )
            .await;
        verdict_of(answer)
    }
}

/// The verdict on the API's answer to a validate-only request.
fn verdict_of(answer: Result<u16, crate::client::ApiError>) -> Verdict {
    match answer {
        Ok(_) => Verdict::allowed(),
        Err(err)
            if err
                .status()
                .is_some_and(|s| (400..500).contains(&s) && s != 429) =>
        {
            Verdict::denied(format!("invalid load balancer definition: {err}"))
        }
        Err(err) => {
            Verdict::allowed_with_warning(unchecked_warning("validate the load balancer", err))
        }
    }
}

#[async_trait::async_trait]
impl ServiceAdmission for DigitalOceanCloud {
    async fn admit_service(
        &self,
        _cluster_name: &str,
        service: &Service,
        old: Option<&Service>,
    ) -> Verdict {
        match is_disowned(service) {
            Ok(true) => return Verdict::allowed(),
            Ok(false) => {}
            Err(err) => return Verdict::denied(err.to_string()),
        }
        let request = match self.prepare_request(service).await {
            Prepared::Request(request) => request,
            Prepared::Denied(message) => return Verdict::denied(message),
            Prepared::Unchecked(warning) => return Verdict::allowed_with_warning(warning),
        };
        if let Some(old) = old
            && self.prepare_request(old).await == Prepared::Request(request.clone())
        {
            return Verdict::allowed();
        }
        let id = load_balancer_id(service).or_else(|| old.and_then(load_balancer_id));
        self.validate_request(&request, id.as_deref()).await
    }
}
