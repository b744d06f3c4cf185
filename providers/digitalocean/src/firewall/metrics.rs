//! The `firewall_*` metric families, with the names, labels and buckets of DigitalOcean's own
//! cloud-controller-manager (which serves them on `METRICS_ADDR`; here they are on the daemon's `/metrics`).
//!
//! | name | type | labels |
//! |------|------|--------|
//! | `firewall_api_operation_duration_seconds` | histogram | `operation`, `result`, `http_response_code` |
//! | `firewall_api_operations_total` | counter | `operation`, `result`, `http_response_code` |
//! | `firewall_resource_sync_duration_seconds` | histogram | `result` |
//! | `firewall_resource_syncs_total` | counter | `result` |
//! | `firewall_reconcile_duration_seconds` | histogram | `result`, `error_type` |
//! | `firewall_reconciles_total` | counter | `result`, `error_type` |
//!
//! `operation` is `get_by_id`, `get_by_list`, `create` or `update`; its `result` is `succeeded` or `failed`,
//! and `http_response_code` the status of the answer (empty when none arrived). A resource sync (the
//! periodic re-read of the firewall) is `updated`, `failed` or `canceled` (timed out); a reconcile is
//! `reconciled`, `skipped` (nothing to change) or `failed`, with `error_type` `generic` or `timeout`
//! (empty unless failed).

use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, linear_buckets};
use prometheus_client::registry::Registry;

/// Labels of the API operation families.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    /// `get_by_id`, `get_by_list`, `create` or `update`.
    pub operation: String,
    /// `succeeded` or `failed`.
    pub result: String,
    /// The HTTP status, or empty.
    pub http_response_code: String,
}

/// Labels of the resource-sync families.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SyncLabels {
    /// `updated`, `failed` or `canceled`.
    pub result: String,
}

/// Labels of the reconcile families.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    /// `reconciled`, `skipped` or `failed`.
    pub result: String,
    /// `generic` or `timeout` when failed, else empty.
    pub error_type: String,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// 21 buckets from 1 s, 4.5 s apart (up to 91 s), as upstream's.
fn operation_histogram() -> Histogram {
    Histogram::new(linear_buckets(1.0, 4.5, 21))
}

/// 21 buckets from 1 s, 15 s apart (up to 301 s), as upstream's.
fn sync_histogram() -> Histogram {
    Histogram::new(linear_buckets(1.0, 15.0, 21))
}

/// The firewall controller's metrics; cloning shares them.
#[derive(Clone, Debug)]
pub struct FirewallMetrics {
    operation_duration: Histograms<OperationLabels>,
    operations: Family<OperationLabels, Counter>,
    sync_duration: Histograms<SyncLabels>,
    syncs: Family<SyncLabels, Counter>,
    reconcile_duration: Histograms<ReconcileLabels>,
    reconciles: Family<ReconcileLabels, Counter>,
}

impl Default for FirewallMetrics {
    fn default() -> Self {
        FirewallMetrics {
            operation_duration: Family::new_with_constructor(operation_histogram),
            operations: Family::default(),
            sync_duration: Family::new_with_constructor(sync_histogram),
            syncs: Family::default(),
            reconcile_duration: Family::new_with_constructor(sync_histogram),
            reconciles: Family::default(),
        }
    }
}

impl FirewallMetrics {
    /// Registers every family on `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "firewall_api_operation_duration_seconds",
            "Histogram for tracking the duration of firewall API operations.",
            self.operation_duration.clone(),
        );
        registry.register(
            "firewall_api_operations",
            "The total number of firewall API operations executed.",
            self.operations.clone(),
        );
        registry.register(
            "firewall_resource_sync_duration_seconds",
            "Histogram for tracking the duration of remote firewall resource synchronizations.",
            self.sync_duration.clone(),
        );
        registry.register(
            "firewall_resource_syncs",
            "The total number of remote firewall resource synchronizations executed.",
            self.syncs.clone(),
        );
        registry.register(
            "firewall_reconcile_duration_seconds",
            "Histogram for tracking the duration of firewall reconciles.",
            self.reconcile_duration.clone(),
        );
        registry.register(
            "firewall_reconciles",
            "The total number of firewall reconciles executed.",
            self.reconciles.clone(),
        );
    }

    /// One API operation that started at `started`; `status` is the HTTP status, if an answer arrived.
    pub fn operation(
        &self,
        operation: &str,
        succeeded: bool,
        status: Option<u16>,
        started: Instant,
    ) {
        let labels = OperationLabels {
            operation: operation.to_string(),
            result: if succeeded { "succeeded" } else { "failed" }.to_string(),
            http_response_code: status.map(|s| s.to_string()).unwrap_or_default(),
        };
        self.operation_duration
            .get_or_create(&labels)
            .observe(started.elapsed().as_secs_f64());
        self.operations.get_or_create(&labels).inc();
    }

    /// One resource sync with `result`, started at `started`.
    pub fn resource_sync(&self, result: &str, started: Instant) {
        let labels = SyncLabels {
            result: result.to_string(),
        };
        self.sync_duration
            .get_or_create(&labels)
            .observe(started.elapsed().as_secs_f64());
        self.syncs.get_or_create(&labels).inc();
    }

    /// One reconcile with `result` and `error_type`, started at `started`.
    pub fn reconcile(&self, result: &str, error_type: &str, started: Instant) {
        let labels = ReconcileLabels {
            result: result.to_string(),
            error_type: error_type.to_string(),
        };
        self.reconcile_duration
            .get_or_create(&labels)
            .observe(started.elapsed().as_secs_f64());
        self.reconciles.get_or_create(&labels).inc();
    }

    /// Operations so far with these labels.
    pub fn operation_count(&self, operation: &str, result: &str, code: &str) -> u64 {
        self.operations
            .get_or_create(&OperationLabels {
                operation: operation.to_string(),
                result: result.to_string(),
                http_response_code: code.to_string(),
            })
            .get()
    }

    /// Resource syncs so far with `result`.
    pub fn resource_sync_count(&self, result: &str) -> u64 {
        self.syncs
            .get_or_create(&SyncLabels {
                result: result.to_string(),
            })
            .get()
    }

    /// Reconciles so far with `result` and `error_type`.
    pub fn reconcile_count(&self, result: &str, error_type: &str) -> u64 {
        self.reconciles
            .get_or_create(&ReconcileLabels {
                result: result.to_string(),
                error_type: error_type.to_string(),
            })
            .get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_encode_with_upstreams_names_and_buckets() {
        let metrics = FirewallMetrics::default();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let started = Instant::now();
        metrics.operation("update", true, Some(200), started);
        metrics.operation("get_by_list", false, None, started);
        metrics.resource_sync("updated", started);
        metrics.reconcile("failed", "timeout", started);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            r#"firewall_api_operations_total{operation="update",result="succeeded",http_response_code="200"} 1"#,
            r#"firewall_api_operations_total{operation="get_by_list",result="failed",http_response_code=""} 1"#,
            r#"firewall_api_operation_duration_seconds_bucket{le="91.0",operation="update",result="succeeded",http_response_code="200"} 1"#,
            r#"firewall_resource_syncs_total{result="updated"} 1"#,
            r#"firewall_resource_sync_duration_seconds_bucket{le="301.0",result="updated"} 1"#,
            r#"firewall_reconciles_total{result="failed",error_type="timeout"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
        assert_eq!(metrics.reconcile_count("failed", "timeout"), 1);
        assert_eq!(metrics.resource_sync_count("updated"), 1);
        assert_eq!(metrics.operation_count("update", "succeeded", "200"), 1);
    }
}
