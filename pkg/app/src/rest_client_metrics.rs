//! The API clients' metrics with upstream's names, types, labels and buckets (`rest_client_*` of
//! k8s.io/component-base): requests by status code, method and host; request latency and time spent
//! waiting for the client's token bucket, by verb and host. Recorded by [`crate::client::RateLimit`], which
//! every client of the daemon sends through.

use std::sync::OnceLock;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Upstream's buckets of the latency histograms, in seconds.
const LATENCY_BUCKETS: [f64; 12] = [
    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
];

/// The `code` of a request that got no response, as upstream's.
pub const NO_RESPONSE: &str = "<error>";

/// Labels of `rest_client_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// The HTTP status code, or [`NO_RESPONSE`].
    pub code: String,
    /// The HTTP method.
    pub method: String,
    /// The API server's `host:port`.
    pub host: String,
}

/// Labels of the latency histograms.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerbLabels {
    /// The HTTP method, as upstream's `verb`.
    pub verb: String,
    /// The API server's `host:port`.
    pub host: String,
}

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// The metric families; one set per process ([`RestClientMetrics::global`]).
#[derive(Clone, Debug)]
pub struct RestClientMetrics {
    requests: Family<ResultLabels, Counter>,
    request_duration: Family<VerbLabels, Histogram>,
    rate_limiter_duration: Family<VerbLabels, Histogram>,
}

impl Default for RestClientMetrics {
    fn default() -> Self {
        RestClientMetrics {
            requests: Family::default(),
            request_duration: Family::new_with_constructor(latency_histogram),
            rate_limiter_duration: Family::new_with_constructor(latency_histogram),
        }
    }
}

impl RestClientMetrics {
    /// The process' metrics, shared by every client.
    pub fn global() -> &'static RestClientMetrics {
        static GLOBAL: OnceLock<RestClientMetrics> = OnceLock::new();
        GLOBAL.get_or_init(RestClientMetrics::default)
    }

    /// Registers the families in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "rest_client_requests",
            "Number of HTTP requests, partitioned by status code, method, and host.",
            self.requests.clone(),
        );
        registry.register(
            "rest_client_request_duration_seconds",
            "Request latency in seconds. Broken down by verb, and host.",
            self.request_duration.clone(),
        );
        registry.register(
            "rest_client_rate_limiter_duration_seconds",
            "Client side rate limiter latency in seconds. Broken down by verb, and host.",
            self.rate_limiter_duration.clone(),
        );
    }

    /// Records the time a request waited for its token.
    pub fn waited(&self, verb: &str, host: &str, waited: Duration) {
        self.rate_limiter_duration
            .get_or_create(&VerbLabels {
                verb: verb.to_string(),
                host: host.to_string(),
            })
            .observe(waited.as_secs_f64());
    }

    /// Records a finished request: its status `code` (or [`NO_RESPONSE`]) and how long it took.
    pub fn finished(&self, method: &str, host: &str, code: &str, took: Duration) {
        self.requests
            .get_or_create(&ResultLabels {
                code: code.to_string(),
                method: method.to_string(),
                host: host.to_string(),
            })
            .inc();
        self.request_duration
            .get_or_create(&VerbLabels {
                verb: method.to_string(),
                host: host.to_string(),
            })
            .observe(took.as_secs_f64());
    }
}
