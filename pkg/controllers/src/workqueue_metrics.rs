//! Work-queue metrics with upstream's names, types, labels and buckets (`workqueue_*` of
//! k8s.io/component-base, label `name` = the upstream queue name of the controller): adds, depth, time in
//! the queue, processing time, retries, and, computed when scraped, the seconds of work in progress and the
//! longest-running processor (a stuck worker shows as a growing value).

use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Upstream's queue names, by controller.
pub mod queue_names {
    /// cloud-node-controller's queue.
    pub const NODES: &str = "Nodes";
    /// service-lb-controller's queue.
    pub const SERVICE: &str = "service";
    /// pv-label-controller's queue (the name of the legacy PersistentVolume label controller's).
    pub const PV_LABELS: &str = "pvLabels";
    /// tagging-controller's queue (cloud-provider-aws's).
    pub const TAGGING: &str = "tagging-controller";
}

/// The label of every work-queue metric.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    /// The queue's name.
    pub name: String,
}

/// What a queue reports when scraped: seconds of work in progress, and of the longest one.
pub(crate) trait RunningWork: Send + Sync {
    /// `(sum, max)` of the seconds each key being processed has been processed for.
    fn running_seconds(&self) -> (f64, f64);
}

type RunningQueues = Arc<Mutex<Vec<(QueueLabels, Weak<dyn RunningWork>)>>>;

fn duration_histogram() -> Histogram {
    // Upstream: ExponentialBuckets(10e-9, 10, 10), 10 ns to 10 s.
    Histogram::new(exponential_buckets(10e-9, 10.0, 10))
}

/// The work-queue metric families of the process; cheap to clone (clones share them).
#[derive(Clone, Debug)]
pub struct WorkqueueMetrics {
    pub(crate) adds: Family<QueueLabels, Counter>,
    pub(crate) depth: Family<QueueLabels, Gauge>,
    pub(crate) queue_duration: Family<QueueLabels, Histogram>,
    pub(crate) work_duration: Family<QueueLabels, Histogram>,
    pub(crate) retries: Family<QueueLabels, Counter>,
    running: RunningQueues,
}

impl Default for WorkqueueMetrics {
    fn default() -> Self {
        WorkqueueMetrics {
            adds: Family::default(),
            depth: Family::default(),
            queue_duration: Family::new_with_constructor(duration_histogram),
            work_duration: Family::new_with_constructor(duration_histogram),
            retries: Family::default(),
            running: RunningQueues::default(),
        }
    }
}

impl WorkqueueMetrics {
    /// Registers the families in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            self.adds.clone(),
        );
        registry.register(
            "workqueue_depth",
            "Current depth of workqueue",
            self.depth.clone(),
        );
        registry.register(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested.",
            self.queue_duration.clone(),
        );
        registry.register(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes.",
            self.work_duration.clone(),
        );
        registry.register(
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            self.retries.clone(),
        );
        registry.register_collector(Box::new(RunningWorkCollector {
            running: self.running.clone(),
        }));
    }

    /// Reports `queue` under `labels` when scraped, for as long as it exists; its series exist from now on
    /// (at zero), as upstream's do from the queue's creation.
    pub(crate) fn track(&self, labels: QueueLabels, queue: Weak<dyn RunningWork>) {
        let _ = self.adds.get_or_create(&labels);
        let _ = self.depth.get_or_create(&labels);
        let _ = self.queue_duration.get_or_create(&labels);
        let _ = self.work_duration.get_or_create(&labels);
        let _ = self.retries.get_or_create(&labels);
        let mut running = self.running.lock();
        running.retain(|(_, q)| q.strong_count() > 0);
        running.push((labels, queue));
    }
}

/// Picks one figure of a queue's `(sum, max)` running seconds.
type PickSeconds = fn((f64, f64)) -> f64;

/// Encodes `workqueue_unfinished_work_seconds` and `workqueue_longest_running_processor_seconds`.
#[derive(Debug)]
struct RunningWorkCollector {
    running: RunningQueues,
}

impl Collector for RunningWorkCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let samples: Vec<(QueueLabels, (f64, f64))> = self
            .running
            .lock()
            .iter()
            .filter_map(|(labels, queue)| {
                Some((labels.clone(), queue.upgrade()?.running_seconds()))
            })
            .collect();
        let families: [(&str, &str, PickSeconds); 2] = [
            (
                "workqueue_unfinished_work_seconds",
                "How many seconds of work has done that is in progress and hasn't been observed by \
                 work_duration. Large values indicate stuck threads. One can deduce the number of stuck \
                 threads by observing the rate at which this increases.",
                |(sum, _)| sum,
            ),
            (
                "workqueue_longest_running_processor_seconds",
                "How many seconds has the longest running processor for workqueue been running.",
                |(_, max)| max,
            ),
        ];
        for (name, help, pick) in families {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (labels, sample) in &samples {
                ConstGauge::new(pick(*sample)).encode(family.encode_family(labels)?)?;
            }
        }
        Ok(())
    }
}
