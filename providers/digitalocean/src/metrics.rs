//! Metrics of the DigitalOcean API calls.
//!
//! | name | type | labels |
//! |------|------|--------|
//! | `cloudprovider_digitalocean_api_requests_total` | counter | `request`, `code` |
//! | `cloudprovider_digitalocean_api_request_duration_seconds` | histogram | `request` |
//! | `cloudprovider_digitalocean_api_request_errors_total` | counter | `request` |
//! | `cloudprovider_digitalocean_api_retries_total` | counter | `request`, `reason` |
//! | `cloudprovider_digitalocean_api_rate_limit_remaining` | gauge | |
//!
//! `request` names the API operation (`list_droplets`, `update_load_balancer`, ...); `code` is the HTTP
//! status or `transport` when no response arrived; `reason` is `rate_limited`, `server_error` or
//! `transport`. A call that failed after its retries counts once in `..._request_errors_total` (the style of
//! the AWS provider's `cloudprovider_aws_api_request_errors`). [`ApiMetrics::register`] adds them to a
//! prometheus-client registry.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of the request counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// The API operation.
    pub request: String,
    /// The HTTP status code, or `transport`.
    pub code: String,
}

/// Labels of the latency histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    /// The API operation.
    pub request: String,
}

/// Labels of the retry counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RetryLabels {
    /// The API operation.
    pub request: String,
    /// Why the call was retried.
    pub reason: String,
}

fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 14))
}

/// The API metrics; cloning shares them.
#[derive(Clone, Debug)]
pub struct ApiMetrics {
    /// Requests by operation and outcome.
    pub requests: Family<RequestLabels, Counter>,
    /// Request latency by operation (one observation per HTTP attempt).
    pub duration: Family<OperationLabels, Histogram, fn() -> Histogram>,
    /// Retries by operation and reason.
    pub retries: Family<RetryLabels, Counter>,
    /// Calls that failed after their retries, by operation.
    pub errors: Family<OperationLabels, Counter>,
    /// The last `RateLimit-Remaining` value seen.
    pub rate_limit_remaining: Gauge,
}

impl Default for ApiMetrics {
    fn default() -> Self {
        ApiMetrics {
            requests: Family::default(),
            duration: Family::new_with_constructor(latency_histogram),
            retries: Family::default(),
            errors: Family::default(),
            rate_limit_remaining: Gauge::default(),
        }
    }
}

impl ApiMetrics {
    /// Registers every metric on `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "cloudprovider_digitalocean_api_requests",
            "DigitalOcean API requests by operation and HTTP status",
            self.requests.clone(),
        );
        registry.register(
            "cloudprovider_digitalocean_api_request_duration_seconds",
            "Latency of DigitalOcean API requests",
            self.duration.clone(),
        );
        registry.register(
            "cloudprovider_digitalocean_api_request_errors",
            "DigitalOcean API calls that failed after their retries",
            self.errors.clone(),
        );
        registry.register(
            "cloudprovider_digitalocean_api_retries",
            "Retried DigitalOcean API requests by reason",
            self.retries.clone(),
        );
        registry.register(
            "cloudprovider_digitalocean_api_rate_limit_remaining",
            "The RateLimit-Remaining value of the last DigitalOcean API response",
            self.rate_limit_remaining.clone(),
        );
    }

    /// Requests of `request` answered with `code` so far.
    pub fn request_count(&self, request: &str, code: &str) -> u64 {
        self.requests
            .get_or_create(&RequestLabels {
                request: request.to_string(),
                code: code.to_string(),
            })
            .get()
    }

    /// Retries of `request` for `reason` so far.
    pub fn retry_count(&self, request: &str, reason: &str) -> u64 {
        self.retries
            .get_or_create(&RetryLabels {
                request: request.to_string(),
                reason: reason.to_string(),
            })
            .get()
    }

    pub(crate) fn observe(&self, request: &str, code: &str, seconds: f64) {
        self.requests
            .get_or_create(&RequestLabels {
                request: request.to_string(),
                code: code.to_string(),
            })
            .inc();
        self.duration
            .get_or_create(&OperationLabels {
                request: request.to_string(),
            })
            .observe(seconds);
    }

    pub(crate) fn retried(&self, request: &str, reason: &str) {
        self.retries
            .get_or_create(&RetryLabels {
                request: request.to_string(),
                reason: reason.to_string(),
            })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_metrics_encode() {
        let metrics = ApiMetrics::default();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        metrics.observe("list_droplets", "200", 0.01);
        metrics.observe("list_droplets", "200", 0.02);
        metrics.retried("list_droplets", "rate_limited");
        metrics.rate_limit_remaining.set(42);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains(
                r#"cloudprovider_digitalocean_api_requests_total{request="list_droplets",code="200"} 2"#
            ),
            "{text}"
        );
        assert!(text.contains(
            r#"cloudprovider_digitalocean_api_retries_total{request="list_droplets",reason="rate_limited"} 1"#
        ));
        assert!(text.contains("cloudprovider_digitalocean_api_rate_limit_remaining 42"));
        assert!(text.contains(
            r#"cloudprovider_digitalocean_api_request_duration_seconds_count{request="list_droplets"} 2"#
        ));
        assert_eq!(metrics.request_count("list_droplets", "200"), 2);
        assert_eq!(metrics.retry_count("list_droplets", "rate_limited"), 1);
    }
}
