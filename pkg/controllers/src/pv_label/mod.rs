//! pv-label-controller: labels PersistentVolumes backed by the cloud's volumes with their zone and region
//! (GA `topology.kubernetes.io/*` and beta `failure-domain.beta.kubernetes.io/*` keys), as the provider's
//! `PvLabeler` reports them, so that the `PersistentVolumeLabel` admission plugin can stay off.
//!
//! Labels a PV already has are never changed; volumes the provider does not recognize are left alone. A
//! failed lookup or write emits a Warning event `FailedLabelVolume` and is retried with backoff. Each PV
//! (by UID) is examined once per process after it was labeled or found foreign.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use cloud_provider::{CloudError, LABEL_REGION, LABEL_REGION_BETA, LABEL_ZONE, LABEL_ZONE_BETA};
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::ResourceExt;
use kube::api::{Api, Patch};
use kube::runtime::reflector::{ObjectRef, Store};
use parking_lot::Mutex;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::context::ControllerContext;
use crate::error::ControllersError;
use crate::events::{EventRecorder, EventType, object_ref};
use crate::identity;
use crate::informers::{InformerEvent, InformerEvents, SharedInformers};
use crate::names::ControllerName;
use crate::panics::PanicGuard;
use crate::workqueue::WorkQueue;

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

/// The labels to add to `pv`: the wanted ones whose keys the PV does not have yet.
pub fn labels_to_add(
    pv: &PersistentVolume,
    wanted: BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let existing = pv.metadata.labels.as_ref();
    wanted
        .into_iter()
        .filter(|(k, _)| existing.is_none_or(|l| !l.contains_key(k)))
        .collect()
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
        PvLabelController {
            inner: Arc::new(Inner {
                ctx: ctx.clone(),
                api: Api::all(ctx.client_for(ControllerName::PvLabel)),
                store: informers.persistent_volumes(),
                recorder: ctx.recorder(ControllerName::PvLabel),
                queue: WorkQueue::new(BACKOFF_BASE, BACKOFF_MAX),
                finished: Mutex::new(HashMap::new()),
            }),
            informers: informers.clone(),
            events: informers.persistent_volume_events(),
        }
    }

    /// Runs until `shutdown` is cancelled.
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
            let inner = inner.clone();
            workers.spawn(async move {
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
                        Err(error) => {
                            let delay = inner.queue.add_rate_limited(
                                name.clone(),
                                match &error {
                                    SyncError::Cloud(e) => e.retry_after(),
                                    SyncError::Kube(_) => None,
                                },
                            );
                            tracing::warn!(pv = %name, %error, retry_in = ?delay, "failed to label volume");
                            if let Some(pv) = inner.store.get(&ObjectRef::new(&name)) {
                                inner.recorder.publish(
                                    &object_ref(pv.as_ref()),
                                    EventType::Warning,
                                    "FailedLabelVolume",
                                    "LabelVolume",
                                    format!("Failed to label volume with its zone and region: {error}"),
                                );
                            }
                        }
                    }
                    inner.queue.done(&name);
                }
            });
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

impl Inner {
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
        let Some(labeler) = self.ctx.cloud.pv_labeler() else {
            return Ok(());
        };
        let Some(wanted) = labeler.get_labels_for_volume(&pv).await? else {
            tracing::debug!(pv = %name, "not a volume of this cloud");
            self.mark_finished(&pv);
            return Ok(());
        };
        let add = labels_to_add(&pv, with_both_generations(wanted));
        if add.is_empty() {
            self.mark_finished(&pv);
            return Ok(());
        }
        let patch = json!({
            "metadata": {
                "resourceVersion": pv.metadata.resource_version,
                "labels": add,
            }
        });
        self.api
            .patch(name, &identity::patch_params(), &Patch::Merge(&patch))
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
    fn existing_labels_are_untouched() {
        let mut pv = PersistentVolume::default();
        pv.metadata.labels = Some(map(&[(LABEL_ZONE, "mine"), ("app", "db")]));
        let add = labels_to_add(
            &pv,
            map(&[(LABEL_ZONE, "z1"), (LABEL_ZONE_BETA, "z1"), ("app", "x")]),
        );
        assert_eq!(add, map(&[(LABEL_ZONE_BETA, "z1")]));
        let bare = PersistentVolume::default();
        assert_eq!(labels_to_add(&bare, map(&[(LABEL_ZONE, "z1")])).len(), 1);
    }
}
