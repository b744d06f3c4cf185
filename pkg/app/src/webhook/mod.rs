//! The webhook endpoint on `--webhook-bind-address:--webhook-secure-port` (HTTPS, no client authentication,
//! as upstream's), served when the `CloudControllerManagerWebhook` gate is on and `--webhooks` enables a
//! webhook the provider has. One webhook exists:
//!
//! - `lb-service` on `/lb-service` (the path of DigitalOcean's admission server): validating admission of
//!   Services. Only Services the service controller would manage reach the provider (`type:
//!   LoadBalancer`, no `spec.loadBalancerClass`, not being deleted, `CREATE` or `UPDATE` of the object
//!   itself); every other request is allowed at once, without a cloud call. The provider's checks (see
//!   [`cloud_provider::admission`]) run on the daemon's runtime within [`ADMISSION_BUDGET`]; a check that
//!   takes longer, or fails to run, admits the Service with a warning, so the webhook never blocks a
//!   cluster.
//!
//! Metrics, with upstream's names: `cloud_provider_webhook_request_total` and
//! `cloud_provider_webhook_request_duration_seconds`, by HTTP status code and webhook.

pub mod review;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use cloud_provider::{CloudProvider, Verdict};
use k8s_openapi::api::core::v1::Service;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use self::review::{AdmissionRequest, MAX_REVIEW_BYTES, parse_review, response_review};

/// The name of the Service admission webhook in `--webhooks`.
pub const LB_SERVICE_WEBHOOK: &str = "lb-service";

/// Its path.
pub const LB_SERVICE_PATH: &str = "/lb-service";

/// How long the provider's checks of one Service may take before it is admitted unchecked (below the
/// API server's default webhook timeout of 10 seconds).
pub const ADMISSION_BUDGET: Duration = Duration::from_secs(5);

/// Labels of the webhook metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookLabels {
    code: String,
    webhook: String,
}

/// Upstream's webhook metrics.
#[derive(Clone, Debug)]
pub struct WebhookMetrics {
    requests: Family<WebhookLabels, Counter>,
    latency: Family<WebhookLabels, Histogram>,
}

impl WebhookMetrics {
    /// Registers the families on `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = WebhookMetrics {
            requests: Family::default(),
            latency: Family::new_with_constructor(|| {
                Histogram::new([0.25, 0.5, 0.7, 1.0, 1.5, 3.0, 5.0, 10.0])
            }),
        };
        registry.register(
            "cloud_provider_webhook_request",
            "Number of HTTP requests partitioned by status code.",
            metrics.requests.clone(),
        );
        registry.register(
            "cloud_provider_webhook_request_duration_seconds",
            "Request latency in seconds. Broken down by status code.",
            metrics.latency.clone(),
        );
        metrics
    }

    fn record(&self, webhook: &str, code: StatusCode, started: Instant) {
        let labels = WebhookLabels {
            code: code.as_u16().to_string(),
            webhook: webhook.to_string(),
        };
        self.requests.get_or_create(&labels).inc();
        self.latency
            .get_or_create(&labels)
            .observe(started.elapsed().as_secs_f64());
    }
}

/// The `lb-service` webhook: the provider's admission checks of LoadBalancer Services.
pub struct LbServiceWebhook {
    cloud: Arc<dyn CloudProvider>,
    cluster_name: String,
    metrics: WebhookMetrics,
    runtime: tokio::runtime::Handle,
}

impl std::fmt::Debug for LbServiceWebhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LbServiceWebhook")
            .field("provider", &self.cloud.provider_name())
            .field("cluster_name", &self.cluster_name)
            .finish()
    }
}

impl LbServiceWebhook {
    /// The webhook of `cloud`, or `None` when the provider has no admission checks. The checks run on the
    /// runtime this is called on.
    pub fn new(
        cloud: Arc<dyn CloudProvider>,
        cluster_name: String,
        metrics: WebhookMetrics,
    ) -> Option<Self> {
        cloud.service_admission()?;
        Some(LbServiceWebhook {
            cloud,
            cluster_name,
            metrics,
            runtime: tokio::runtime::Handle::current(),
        })
    }

    /// Answers one HTTP request: the response review, or 400 for a body that is not a review.
    pub async fn answer(&self, content_type: Option<&str>, body: &[u8]) -> (StatusCode, String) {
        let request = match parse_review(content_type, body) {
            Ok(request) => request,
            Err(err) => {
                tracing::warn!(error = %err, "refusing a webhook request that is not an admission review");
                return (StatusCode::BAD_REQUEST, err.to_string());
            }
        };
        let verdict = self.verdict(&request).await;
        let (denied, warnings) = match &verdict {
            Verdict::Allowed { warnings } => (None, warnings.as_slice()),
            Verdict::Denied { message } => (Some(message.as_str()), &[][..]),
        };
        let object = format!("{}/{}", request.namespace, request.name);
        match denied {
            Some(message) => {
                tracing::info!(service = %object, operation = %request.operation, reason = %message, "refusing a Service");
            }
            None => {
                tracing::debug!(service = %object, operation = %request.operation, ?warnings, "admitting a Service");
            }
        }
        let review = response_review(&request.uid, denied, warnings);
        (StatusCode::OK, review.to_string())
    }

    /// The verdict on one request: the provider's for Services it would manage, else allowed.
    async fn verdict(&self, request: &AdmissionRequest) -> Verdict {
        if !request.is_service() || !matches!(request.operation.as_str(), "CREATE" | "UPDATE") {
            return Verdict::allowed();
        }
        let Some(service) = decode_service(request.object.as_ref()) else {
            return Verdict::allowed_with_warning(
                "the cloud provider's checks were skipped: the object is not a readable Service",
            );
        };
        if let Some(reason) = unmanaged(&service) {
            tracing::trace!(
                reason,
                "admitting a Service the service controller does not manage"
            );
            return Verdict::allowed();
        }
        let old = decode_service(request.old_object.as_ref());
        let cloud = self.cloud.clone();
        let cluster_name = self.cluster_name.clone();
        let check = self.runtime.spawn(async move {
            match cloud.service_admission() {
                Some(admission) => {
                    admission
                        .admit_service(&cluster_name, &service, old.as_ref())
                        .await
                }
                None => Verdict::allowed(),
            }
        });
        match tokio::time::timeout(ADMISSION_BUDGET, check).await {
            Ok(Ok(verdict)) => verdict,
            Ok(Err(err)) => {
                tracing::error!(error = %err, "the cloud provider's admission check failed to run");
                Verdict::allowed_with_warning(
                    "the cloud provider's checks failed to run; the Service was admitted unchecked",
                )
            }
            Err(_) => {
                tracing::warn!(budget = ?ADMISSION_BUDGET, "the cloud provider's admission check did not finish in time");
                Verdict::allowed_with_warning(format!(
                    "the cloud provider's checks did not finish within {}s; the Service was admitted \
                     unchecked and is checked again when its load balancer is synced",
                    ADMISSION_BUDGET.as_secs()
                ))
            }
        }
    }
}

/// The Service in a review, if the object is one.
fn decode_service(object: Option<&serde_json::Value>) -> Option<Service> {
    serde::Deserialize::deserialize(object?).ok()
}

/// Why the service controller leaves `service` alone, if it does.
fn unmanaged(service: &Service) -> Option<&'static str> {
    let spec = service.spec.as_ref();
    if spec.and_then(|s| s.type_.as_deref()) != Some("LoadBalancer") {
        return Some("not a LoadBalancer Service");
    }
    if spec
        .and_then(|s| s.load_balancer_class.as_deref())
        .is_some()
    {
        return Some("another load-balancer implementation (spec.loadBalancerClass)");
    }
    if service.metadata.deletion_timestamp.is_some() {
        return Some("being deleted");
    }
    None
}

/// The webhook routes: `POST /lb-service`.
pub fn router(webhook: Arc<LbServiceWebhook>) -> Router {
    Router::new()
        .route(LB_SERVICE_PATH, post(lb_service))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_REVIEW_BYTES))
        .with_state(webhook)
}

async fn lb_service(
    State(webhook): State<Arc<LbServiceWebhook>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let started = Instant::now();
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let (code, body) = webhook.answer(content_type, &body).await;
    webhook.metrics.record(LB_SERVICE_WEBHOOK, code, started);
    let content_type = if code == StatusCode::OK {
        "application/json"
    } else {
        "text/plain; charset=utf-8"
    };
    (code, [(header::CONTENT_TYPE, content_type)], body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ServiceSpec;

    fn service(type_: &str, class: Option<&str>) -> Service {
        Service {
            spec: Some(ServiceSpec {
                type_: Some(type_.to_string()),
                load_balancer_class: class.map(str::to_string),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn only_the_services_the_controller_manages_are_checked() {
        assert_eq!(unmanaged(&service("LoadBalancer", None)), None);
        assert!(unmanaged(&service("ClusterIP", None)).is_some());
        assert!(unmanaged(&service("LoadBalancer", Some("example.com/lb"))).is_some());
        let mut deleted = service("LoadBalancer", None);
        deleted.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert!(unmanaged(&deleted).is_some());
    }
}
