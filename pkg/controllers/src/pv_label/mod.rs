//! pv-label-controller: labels PersistentVolumes backed by the cloud's volumes with their zone and region
//! (GA `topology.kubernetes.io/*` and beta `failure-domain.beta.kubernetes.io/*` keys), as the provider's
//! `PvLabeler` reports them, so that the `PersistentVolumeLabel` admission plugin can stay off.
//!
//! As upstream's persistent-volume labelling: the cloud's zone and region replace the values a PV carries;
//! a dynamically provisioned PV (`pv.kubernetes.io/provisioned-by`) that has both is trusted and the cloud is
//! not asked; and the volume gets a `spec.nodeAffinity` requiring its zone and region, unless it has one
//! already (the API server keeps it immutable once set; upstream set it at creation). Volumes the provider
//! does not recognize are left alone. A failed lookup or write emits a Warning event `FailedLabelVolume` and
//! is retried with backoff. Each PV (by UID) is examined once per process after it was labeled or found
//! foreign. The write is a PUT of the volume as read just before (`get`, `update`: the verbs upstream's
//! published role grants on persistentvolumes), guarded by its resourceVersion.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use cloud_provider::{
    CloudError, LABEL_REGION, LABEL_REGION_BETA, LABEL_ZONE, LABEL_ZONE_BETA, ObjectKey,
};
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::context::ControllerContext;
use crate::error::ControllersError;
use crate::events::{EventRecorder, EventType, object_ref};
use crate::identity;
use crate::informers::{InformerEvent, InformerEvents, SharedInformers};
use crate::names::ControllerName;
use crate::panics::PanicGuard;
use crate::workqueue::WorkQueue;
use crate::workqueue_metrics::queue_names;

/// Concurrent PV syncs.
const WORKERS: usize = 4;
const BACKOFF_BASE: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(300);
const EVENT_FLUSH_TIMEOUT: Duration = Duration::from_secs(2);

/// The provider's labels completed with the other generation of the zone and region keys (the GA key
/// copies the beta one and vice versa when only one is given).
pub fn with_both_generations(labels: BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut out = labels;
    for (ga, beta) in [
        (LABEL_ZONE, LABEL_ZONE_BETA),
        (LABEL_REGION, LABEL_REGION_BETA),
    ] {
        match (out.get(ga).cloned(), out.get(beta).cloned()) {
            (Some(v), None) => {
                out.insert(beta.to_string(), v);
            }
            (None, Some(v)) => {
                out.insert(ga.to_string(), v);
            }
            _ => {}
        }
    }
    out
}

/// The annotation a dynamic provisioner sets on the PersistentVolumes it creates.
pub const ANNOTATION_PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";

/// The labels to write on `pv`: the wanted ones it lacks or has with another value. As upstream's
/// persistent-volume labelling, the cloud's zone and region replace what the PV says (those keys belong to
/// Kubernetes, not to the PV's author).
pub fn labels_to_set(
    pv: &PersistentVolume,
    wanted: BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let existing = pv.metadata.labels.as_ref();
    wanted
        .into_iter()
        .filter(|(k, v)| existing.and_then(|l| l.get(k)) != Some(v))
        .collect()
}

/// The zone and region labels of a dynamically provisioned PV that has both (GA keys first, else beta):
/// upstream trusts the provisioner and asks the cloud nothing.
pub fn provisioned_labels(pv: &PersistentVolume) -> Option<BTreeMap<String, String>> {
    let annotations = pv.metadata.annotations.as_ref()?;
    annotations.get(ANNOTATION_PROVISIONED_BY)?;
    let labels = pv.metadata.labels.as_ref()?;
    [
        (LABEL_ZONE, LABEL_REGION),
        (LABEL_ZONE_BETA, LABEL_REGION_BETA),
    ]
    .into_iter()
    .find_map(|(zone, region)| {
        let (z, r) = (labels.get(zone)?, labels.get(region)?);
        Some(BTreeMap::from([
            (zone.to_string(), z.clone()),
            (region.to_string(), r.clone()),
        ]))
    })
}

/// The `spec.nodeAffinity` that pins a volume to its zone and region, as upstream derives it from the
/// labels (`In` the value; a multi-zone value `a__b` lists each zone, sorted). `None` when the PV already
/// has a node affinity (the API server keeps it immutable once set) or no label constrains placement.
pub fn node_affinity(pv: &PersistentVolume, labels: &BTreeMap<String, String>) -> Option<Value> {
    if pv.spec.as_ref().is_some_and(|s| s.node_affinity.is_some()) {
        return None;
    }
    let requirements: Vec<Value> = labels
        .iter()
        .filter(|(k, _)| {
            [LABEL_ZONE, LABEL_ZONE_BETA, LABEL_REGION, LABEL_REGION_BETA].contains(&k.as_str())
        })
        .map(|(key, value)| {
            let mut values: Vec<&str> = if key == LABEL_ZONE || key == LABEL_ZONE_BETA {
                value.split("__").filter(|z| !z.is_empty()).collect()
            } else {
                vec![value.as_str()]
            };
            values.sort_unstable();
            values.dedup();
            json!({"key": key, "operator": "In", "values": values})
        })
        .collect();
    (!requirements.is_empty())
        .then(|| json!({"required": {"nodeSelectorTerms": [{"matchExpressions": requirements}]}}))
}

#[derive(Debug, thiserror::Error)]
enum SyncError {
    #[error("volume label lookup failed: {0}")]
    Cloud(#[from] CloudError),
    #[error("could not write the volume labels: {0}")]
    Kube(#[from] kube::Error),
}

struct Inner {
    ctx: ControllerContext,
    api: Api<PersistentVolume>,
    store: Store<PersistentVolume>,
    recorder: EventRecorder,
    queue: WorkQueue<String>,
    /// PV name -> UID of the PV already labeled or found foreign.
    finished: Mutex<HashMap<String, String>>,
}

/// The pv-label-controller.
pub struct PvLabelController {
    inner: Arc<Inner>,
    informers: SharedInformers,
    events: InformerEvents<PersistentVolume>,
}

impl std::fmt::Debug for PvLabelController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PvLabelController")
            .field("queue", &self.inner.queue)
            .finish_non_exhaustive()
    }
}

impl PvLabelController {
    /// Creates the controller and subscribes to the PersistentVolume informer.
    pub fn new(ctx: &ControllerContext, informers: &SharedInformers) -> Self {
        let ctx = &ctx.for_controller(ControllerName::PvLabel);
        PvLabelController {
            inner: Arc::new(Inner {
                ctx: ctx.clone(),
                api: Api::all(ctx.client_for(ControllerName::PvLabel)),
                store: informers.persistent_volumes(),
                recorder: ctx.recorder(ControllerName::PvLabel),
                queue: WorkQueue::new(BACKOFF_BASE, BACKOFF_MAX)
                    .with_metrics(queue_names::PV_LABELS, &ctx.metrics.workqueues),
                finished: Mutex::new(HashMap::new()),
            }),
            informers: informers.clone(),
            events: informers.persistent_volume_events(),
        }
    }

    /// Runs until `shutdown` is cancelled; in a dry run, until one pass over the volumes is done.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), ControllersError> {
        let PvLabelController {
            inner,
            informers,
            mut events,
        } = self;
        if inner.ctx.cloud.pv_labeler().is_none() {
            return Err(ControllersError::Config(format!(
                "cloud provider {:?} does not label volumes",
                inner.ctx.cloud.provider_name()
            )));
        }
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            synced = informers.wait_persistent_volumes_synced() => synced?,
        }
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..WORKERS {
            workers.spawn(worker(inner.clone()));
        }
        if inner.ctx.is_single_pass() {
            for pv in inner.store.state() {
                inner.ctx.visit(ObjectKey::persistent_volume(pv.name_any()));
                inner.enqueue(&pv);
            }
            inner.queue.finish_when_idle();
            while workers.join_next().await.is_some() {}
            inner.recorder.flush(EVENT_FLUSH_TIMEOUT).await;
            return Ok(());
        }
        loop {
            let event = tokio::select! {
                _ = shutdown.cancelled() => break,
                e = events.recv() => e,
            };
            match event {
                None => break,
                Some(InformerEvent::Applied(pv)) => inner.enqueue(&pv),
                Some(InformerEvent::Deleted(pv)) => {
                    let name = pv.name_any();
                    inner.finished.lock().remove(&name);
                    inner.queue.forget(&name);
                }
                Some(InformerEvent::Resynced) => {
                    let live: HashMap<String, String> = inner
                        .store
                        .state()
                        .iter()
                        .map(|pv| (pv.name_any(), pv.uid().unwrap_or_default()))
                        .collect();
                    inner
                        .finished
                        .lock()
                        .retain(|name, uid| live.get(name) == Some(uid));
                    for pv in inner.store.state() {
                        inner.enqueue(&pv);
                    }
                }
            }
        }
        inner.queue.shut_down();
        while workers.join_next().await.is_some() {}
        inner.recorder.flush(EVENT_FLUSH_TIMEOUT).await;
        Ok(())
    }
}

/// Labels volumes from the queue until it shuts down.
async fn worker(inner: Arc<Inner>) {
    let panics = PanicGuard::new(&inner.ctx, ControllerName::PvLabel);
    while let Some(name) = inner.queue.next().await {
        let Some(result) = panics.run(&name, inner.sync(&name)).await else {
            // Reported by the guard; the volume is tried again with backoff.
            inner.queue.add_rate_limited(name.clone(), None);
            inner.queue.done(&name);
            continue;
        };
        match result {
            Ok(()) => inner.queue.forget(&name),
            Err(error) => inner.failed(&name, &error),
        }
        inner.queue.done(&name);
    }
}

impl Inner {
    /// Retries the volume `name` with backoff and says why in a Warning event.
    fn failed(&self, name: &str, error: &SyncError) {
        let retry_after = match error {
            SyncError::Cloud(e) => e.retry_after(),
            SyncError::Kube(_) => None,
        };
        let delay = self.queue.add_rate_limited(name.to_string(), retry_after);
        tracing::warn!(pv = %name, %error, retry_in = ?delay, "failed to label volume");
        self.ctx.record_failure(
            ControllerName::PvLabel,
            Some(ObjectKey::persistent_volume(name)),
            error,
        );
        if let Some(pv) = self.store.get(&ObjectRef::new(name)) {
            self.recorder.publish(
                &object_ref(pv.as_ref()),
                EventType::Warning,
                "FailedLabelVolume",
                "LabelVolume",
                format!("Failed to label volume with its zone and region: {error}"),
            );
        }
    }

    fn is_finished(&self, pv: &PersistentVolume) -> bool {
        let uid = pv.uid().unwrap_or_default();
        self.finished.lock().get(&pv.name_any()) == Some(&uid)
    }

    fn enqueue(&self, pv: &PersistentVolume) {
        if pv.metadata.deletion_timestamp.is_none() && !self.is_finished(pv) {
            self.queue.add(pv.name_any());
        }
    }

    fn mark_finished(&self, pv: &PersistentVolume) {
        self.finished
            .lock()
            .insert(pv.name_any(), pv.uid().unwrap_or_default());
    }

    async fn sync(&self, name: &str) -> Result<(), SyncError> {
        let Some(pv) = self.store.get(&ObjectRef::new(name)) else {
            return Ok(());
        };
        if pv.metadata.deletion_timestamp.is_some() || self.is_finished(&pv) {
            return Ok(());
        }
        let wanted = match provisioned_labels(&pv) {
            Some(trusted) => trusted,
            None => {
                let Some(labeler) = self.ctx.cloud.pv_labeler() else {
                    return Ok(());
                };
                let Some(wanted) = labeler.get_labels_for_volume(&pv).await? else {
                    tracing::debug!(pv = %name, "not a volume of this cloud");
                    self.mark_finished(&pv);
                    return Ok(());
                };
                with_both_generations(wanted)
            }
        };
        if labels_to_set(&pv, wanted.clone()).is_empty() && node_affinity(&pv, &wanted).is_none() {
            self.mark_finished(&pv);
            return Ok(());
        }
        // The volume as the API server has it now, written back whole: upstream's published role grants
        // `update` (not `patch`) on persistentvolumes, so a cluster that reuses it keeps working. The
        // resourceVersion guards the write; a conflict is retried with backoff.
        let mut current = self.api.get(name).await?;
        let add = labels_to_set(&current, wanted.clone());
        let affinity = node_affinity(&current, &wanted);
        current
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .extend(add.clone());
        if let Some(affinity) = affinity {
            let spec = current.spec.get_or_insert_with(Default::default);
            spec.node_affinity = serde_json::from_value(affinity).ok();
        }
        self.api
            .replace(name, &identity::post_params(), &current)
            .await?;
        tracing::info!(pv = %name, labels = ?add, "labeled volume");
        self.mark_finished(&pv);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn both_generations_are_filled_in() {
        let got = with_both_generations(map(&[
            (LABEL_ZONE, "z1"),
            (LABEL_REGION_BETA, "r1"),
            ("other", "x"),
        ]));
        assert_eq!(
            got,
            map(&[
                (LABEL_ZONE, "z1"),
                (LABEL_ZONE_BETA, "z1"),
                (LABEL_REGION, "r1"),
                (LABEL_REGION_BETA, "r1"),
                ("other", "x"),
            ])
        );
        // Both given with different values: both kept as the provider said.
        let both = map(&[(LABEL_ZONE, "a"), (LABEL_ZONE_BETA, "b")]);
        assert_eq!(with_both_generations(both.clone()), both);
    }

    #[test]
    fn the_clouds_values_replace_the_pvs() {
        let mut pv = PersistentVolume::default();
        pv.metadata.labels = Some(map(&[(LABEL_ZONE, "mine"), (LABEL_REGION, "r1")]));
        let set = labels_to_set(
            &pv,
            map(&[
                (LABEL_ZONE, "z1"),
                (LABEL_ZONE_BETA, "z1"),
                (LABEL_REGION, "r1"),
            ]),
        );
        assert_eq!(set, map(&[(LABEL_ZONE, "z1"), (LABEL_ZONE_BETA, "z1")]));
        let bare = PersistentVolume::default();
        assert_eq!(labels_to_set(&bare, map(&[(LABEL_ZONE, "z1")])).len(), 1);
    }

    #[test]
    fn dynamically_provisioned_volumes_with_both_labels_are_trusted() {
        let mut pv = PersistentVolume::default();
        pv.metadata.labels = Some(map(&[(LABEL_ZONE_BETA, "z"), (LABEL_REGION_BETA, "r")]));
        assert_eq!(provisioned_labels(&pv), None, "not provisioned");
        pv.metadata.annotations = Some(map(&[(ANNOTATION_PROVISIONED_BY, "ebs.csi.aws.com")]));
        assert_eq!(
            provisioned_labels(&pv),
            Some(map(&[(LABEL_ZONE_BETA, "z"), (LABEL_REGION_BETA, "r")]))
        );
        pv.metadata.labels = Some(map(&[(LABEL_ZONE, "z")]));
        assert_eq!(provisioned_labels(&pv), None, "a region is missing");
    }

    #[test]
    fn node_affinity_requires_zone_and_region() {
        let pv = PersistentVolume::default();
        let labels = map(&[(LABEL_ZONE, "b__a"), (LABEL_REGION, "r1"), ("app", "x")]);
        assert_eq!(
            node_affinity(&pv, &labels),
            Some(
                json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": LABEL_REGION, "operator": "In", "values": ["r1"]},
                    {"key": LABEL_ZONE, "operator": "In", "values": ["a", "b"]},
                ]}]}})
            )
        );
        let pinned = PersistentVolume {
            spec: Some(k8s_openapi::api::core::v1::PersistentVolumeSpec {
                node_affinity: Some(Default::default()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            node_affinity(&pinned, &labels),
            None,
            "an affinity set stays"
        );
        assert_eq!(node_affinity(&pv, &map(&[("app", "x")])), None);
    }
}
