//! AWS API metrics with the upstream names, recorded by an SDK interceptor on every EC2, ELBv2 and STS call:
//!
//! - `cloudprovider_aws_api_request_duration_seconds{request}`: duration of each successful API call,
//!   retries included, in Prometheus' default buckets (as upstream);
//! - `cloudprovider_aws_api_request_errors{request}`: calls that failed after all retries, under upstream's
//!   exact series name (no `_total` suffix: OpenMetrics adds one to every counter, so this one is exposed
//!   with type `unknown`, see [`UnsuffixedCounter`]);
//! - `cloudprovider_aws_api_throttled_requests_total{operation_name}`: attempts answered with a throttling
//!   error (`RequestLimitExceeded`, `Throttling`, ...), each retry counted;
//! - `cloudprovider_aws_api_response_status_total{service,operation,status_code}`: calls that failed after
//!   all retries with an HTTP error status (400 and up), by the SDK's service ID (`EC2`, `Elastic Load
//!   Balancing v2`, `STS`, ...), as upstream counts them since 1.36 (success, and failures without a
//!   response, are not counted).
//!
//! The daemon registers [`AwsMetrics::global`] in its metrics registry with [`AwsMetrics::register`].

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use std::time::Instant;

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::{
    AfterDeserializationInterceptorContextRef, BeforeSerializationInterceptorContextRef,
    FinalizerInterceptorContextRef,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpResponse, Metadata};
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::{ConfigBag, Storable, StoreReplace};
use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;

/// Label set of the duration and error metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// The API operation, e.g. `DescribeInstances`.
    pub request: String,
}

/// Label set of the response-status metric.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabels {
    /// The SDK's service ID, e.g. `EC2`.
    pub service: String,
    /// The API operation, e.g. `DescribeInstances`.
    pub operation: String,
    /// The HTTP status of the last attempt, e.g. `400`.
    pub status_code: String,
}

/// Label set of the throttling metric.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    /// The API operation, e.g. `DescribeInstances`.
    pub operation_name: String,
}

type HistogramFamily = Family<RequestLabels, Histogram, fn() -> Histogram>;

fn duration_histogram() -> Histogram {
    // Upstream sets no buckets: Prometheus' defaults.
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ])
}

/// A counter exposed under its registered name as it is. Upstream's `cloudprovider_aws_api_request_errors`
/// has no `_total` suffix, and OpenMetrics appends one to every counter; with type `unknown` the series
/// keeps upstream's name, so dashboards and alerts written for it match.
#[derive(Debug, Default, Clone)]
pub struct UnsuffixedCounter(Counter);

impl UnsuffixedCounter {
    /// Adds one.
    pub fn inc(&self) {
        self.0.inc();
    }

    /// The count.
    pub fn get(&self) -> u64 {
        self.0.get()
    }
}

impl TypedMetric for UnsuffixedCounter {
    const TYPE: MetricType = MetricType::Unknown;
}

impl EncodeMetric for UnsuffixedCounter {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_gauge(&self.0.get())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Unknown
    }
}

/// The AWS API metrics. Cloning shares the underlying series.
#[derive(Clone, Debug)]
pub struct AwsMetrics {
    /// `cloudprovider_aws_api_request_duration_seconds{request}`.
    pub request_duration: HistogramFamily,
    /// `cloudprovider_aws_api_request_errors{request}`.
    pub request_errors: Family<RequestLabels, UnsuffixedCounter>,
    /// `cloudprovider_aws_api_throttled_requests_total{operation_name}`.
    pub throttled_requests: Family<OperationLabels, Counter>,
    /// `cloudprovider_aws_api_response_status_total{service,operation,status_code}`.
    pub response_status: Family<StatusLabels, Counter>,
    /// Completed calls per operation (the histogram's sample count, readable without encoding).
    calls: Arc<Mutex<BTreeMap<String, u64>>>,
}

impl Default for AwsMetrics {
    fn default() -> Self {
        AwsMetrics {
            request_duration: Family::new_with_constructor(duration_histogram),
            request_errors: Family::default(),
            throttled_requests: Family::default(),
            response_status: Family::default(),
            calls: Arc::default(),
        }
    }
}

impl AwsMetrics {
    /// The process-wide metrics used by providers built through the registry factory.
    pub fn global() -> &'static AwsMetrics {
        static GLOBAL: OnceLock<AwsMetrics> = OnceLock::new();
        GLOBAL.get_or_init(AwsMetrics::default)
    }

    /// Registers the metrics in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "cloudprovider_aws_api_request_duration_seconds",
            "Latency of AWS API calls, retries included",
            self.request_duration.clone(),
        );
        registry.register(
            "cloudprovider_aws_api_request_errors",
            "AWS API calls that failed after all retries",
            self.request_errors.clone(),
        );
        registry.register(
            "cloudprovider_aws_api_throttled_requests",
            "AWS API attempts answered with a throttling error",
            self.throttled_requests.clone(),
        );
        registry.register(
            "cloudprovider_aws_api_response_status",
            "AWS API error response status code counts (terminal, after retries are exhausted)",
            self.response_status.clone(),
        );
    }

    /// Calls of `operation` of `service` that failed with HTTP status `status` so far.
    pub fn status_count(&self, service: &str, operation: &str, status: u16) -> u64 {
        let labels = StatusLabels {
            service: service.to_string(),
            operation: operation.to_string(),
            status_code: status.to_string(),
        };
        self.response_status
            .get(&labels)
            .map(|c| c.get())
            .unwrap_or(0)
    }

    /// Calls of `operation` completed so far (successful or not).
    pub fn request_count(&self, operation: &str) -> u64 {
        self.calls.lock().get(operation).copied().unwrap_or(0)
    }

    /// Completed calls so far of every operation that can change something in the cloud (all but
    /// `Describe*`, `Get*` and `List*`), by operation.
    pub fn mutating_calls(&self) -> BTreeMap<String, u64> {
        self.calls
            .lock()
            .iter()
            .filter(|(op, _)| !is_read_only(op))
            .map(|(op, n)| (op.clone(), *n))
            .collect()
    }

    /// Failed calls of `operation` so far.
    pub fn error_count(&self, operation: &str) -> u64 {
        let labels = RequestLabels {
            request: operation.to_string(),
        };
        self.request_errors
            .get(&labels)
            .map(|c| c.get())
            .unwrap_or(0)
    }

    /// Throttled attempts of `operation` so far.
    pub fn throttled_count(&self, operation: &str) -> u64 {
        let labels = OperationLabels {
            operation_name: operation.to_string(),
        };
        self.throttled_requests
            .get(&labels)
            .map(|c| c.get())
            .unwrap_or(0)
    }

    fn observe(&self, operation: &str, seconds: f64, failed: bool) {
        let labels = RequestLabels {
            request: operation.to_string(),
        };
        *self.calls.lock().entry(operation.to_string()).or_default() += 1;
        if failed {
            self.request_errors.get_or_create(&labels).inc();
        } else {
            self.request_duration
                .get_or_create(&labels)
                .observe(seconds);
        }
    }

    fn error_status(&self, service: &str, operation: &str, status: u16) {
        self.response_status
            .get_or_create(&StatusLabels {
                service: service.to_string(),
                operation: operation.to_string(),
                status_code: status.to_string(),
            })
            .inc();
    }

    fn throttled(&self, operation: &str) {
        self.throttled_requests
            .get_or_create(&OperationLabels {
                operation_name: operation.to_string(),
            })
            .inc();
    }
}

/// Whether an AWS operation only reads.
pub fn is_read_only(operation: &str) -> bool {
    ["Describe", "Get", "List"]
        .iter()
        .any(|prefix| operation.starts_with(prefix))
}

/// Error codes AWS uses for throttling.
const THROTTLING_CODES: &[&str] = &[
    "RequestLimitExceeded",
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottled",
    "RequestThrottledException",
    "TooManyRequestsException",
    "EC2ThrottledException",
    "BandwidthLimitExceeded",
    "PriorRequestNotComplete",
    "SlowDown",
];

/// Whether an AWS error code means the request was throttled.
pub fn is_throttling_code(code: &str) -> bool {
    THROTTLING_CODES.contains(&code)
}

/// The `<Code>` of an AWS query/EC2 XML error body.
pub(crate) fn xml_error_code(body: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(body).ok()?;
    let start = text.find("<Code>")? + "<Code>".len();
    let len = text[start..].find("</Code>")?;
    Some(text[start..start + len].trim())
}

fn response_is_throttled(response: &HttpResponse) -> bool {
    if response.status().as_u16() == 429 {
        return true;
    }
    response
        .body()
        .bytes()
        .and_then(xml_error_code)
        .is_some_and(is_throttling_code)
}

/// When the current call started.
#[derive(Debug, Clone, Copy)]
struct CallStart(Instant);

impl Storable for CallStart {
    type Storer = StoreReplace<Self>;
}

/// Marks a call the mutation gate stopped (so the metrics leave it out).
#[derive(Debug, Clone, Copy)]
pub(crate) struct StoppedByGate;

impl Storable for StoppedByGate {
    type Storer = StoreReplace<Self>;
}

/// Records [`AwsMetrics`] for every call of the client it is installed on.
#[derive(Debug, Clone)]
pub(crate) struct MetricsInterceptor {
    metrics: AwsMetrics,
}

impl MetricsInterceptor {
    /// An interceptor recording into `metrics`.
    pub(crate) fn new(metrics: AwsMetrics) -> Self {
        MetricsInterceptor { metrics }
    }
}

/// The SDK's name of the operation of the current call.
pub(crate) fn operation_name(cfg: &ConfigBag) -> &str {
    cfg.load::<Metadata>()
        .map(Metadata::name)
        .unwrap_or("unknown")
}

/// The SDK's service ID of the current call (`EC2`, `Elastic Load Balancing v2`, ...).
fn service_id(cfg: &ConfigBag) -> &str {
    cfg.load::<Metadata>()
        .map(Metadata::service)
        .unwrap_or("unknown")
}

impl Intercept for MetricsInterceptor {
    fn name(&self) -> &'static str {
        "CloudProviderAwsMetrics"
    }

    fn read_before_execution(
        &self,
        _context: &BeforeSerializationInterceptorContextRef<'_>,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        cfg.interceptor_state().store_put(CallStart(Instant::now()));
        Ok(())
    }

    fn read_after_deserialization(
        &self,
        context: &AfterDeserializationInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if context.output_or_error().is_err() && response_is_throttled(context.response()) {
            let operation = operation_name(cfg).to_string();
            tracing::debug!(operation, "AWS API request throttled");
            self.metrics.throttled(&operation);
        }
        Ok(())
    }

    fn read_after_execution(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if cfg.load::<StoppedByGate>().is_some() {
            // Not made: a dry run stopped it.
            return Ok(());
        }
        let seconds = cfg
            .load::<CallStart>()
            .map(|start| start.0.elapsed().as_secs_f64())
            .unwrap_or_default();
        let failed = !matches!(context.output_or_error(), Some(Ok(_)));
        self.metrics.observe(operation_name(cfg), seconds, failed);
        let status = context.response().map(|r| r.status().as_u16());
        if let Some(status) = status.filter(|s| failed && *s >= 400) {
            self.metrics
                .error_status(service_id(cfg), operation_name(cfg), status);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes() {
        let ec2 = br#"<?xml version="1.0"?><Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message></Error></Errors><RequestID>x</RequestID></Response>"#;
        assert_eq!(xml_error_code(ec2), Some("RequestLimitExceeded"));
        let elb = br#"<ErrorResponse><Error><Type>Sender</Type><Code>Throttling</Code><Message>Rate exceeded</Message></Error></ErrorResponse>"#;
        assert_eq!(xml_error_code(elb), Some("Throttling"));
        assert_eq!(xml_error_code(b"<Response/>"), None);
        assert_eq!(xml_error_code(&[0xff, 0x00]), None);
        assert!(is_throttling_code("RequestLimitExceeded"));
        assert!(is_throttling_code("Throttling"));
        assert!(!is_throttling_code("InvalidInstanceID.NotFound"));
    }

    #[test]
    fn counting_and_encoding() {
        let m = AwsMetrics::default();
        m.observe("DescribeInstances", 0.01, false);
        m.observe("DescribeInstances", 0.02, true);
        m.throttled("DescribeInstances");
        m.error_status("EC2", "DescribeInstances", 503);
        assert_eq!(m.status_count("EC2", "DescribeInstances", 503), 1);
        assert_eq!(m.request_count("DescribeInstances"), 2);
        assert_eq!(m.error_count("DescribeInstances"), 1);
        assert_eq!(m.throttled_count("DescribeInstances"), 1);
        assert_eq!(m.request_count("CreateRoute"), 0);

        let mut registry = Registry::default();
        m.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.contains(
            "cloudprovider_aws_api_request_duration_seconds_count{request=\"DescribeInstances\"} 1"
        ), "{text}");
        assert!(
            text.contains("cloudprovider_aws_api_request_errors{request=\"DescribeInstances\"} 1"),
            "{text}"
        );
        assert!(text.contains(
            "cloudprovider_aws_api_throttled_requests_total{operation_name=\"DescribeInstances\"} 1"
        ), "{text}");
        assert!(text.contains(
            "cloudprovider_aws_api_response_status_total{service=\"EC2\",operation=\"DescribeInstances\",status_code=\"503\"} 1"
        ), "{text}");
    }
}
