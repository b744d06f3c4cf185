//! `tags-controller`: the cluster's load balancers carry the tag `k8s:<cluster ID>`, as DigitalOcean's own
//! cloud-controller-manager keeps them.
//!
//! A load balancer gets the tag when this provider creates it, but one made before the cluster had an ID,
//! or made elsewhere and adopted, lacks it, and the load-balancer sync does not change tags. Every
//! [`SYNC_PERIOD`] (15 minutes, upstream's cadence), starting once the first complete list of Services is
//! in, the controller lists the load balancers, finds the one of each `LoadBalancer` Service the way the
//! service controller does (the ID annotation, else the name) and tags those that lack the tag, all in one
//! call (`POST /v2/tags/{tag}/resources`). When every one has it, nothing is sent (upstream tags them all on
//! every pass). When the tag does not exist yet (404), it is created and the call made again. A failed pass
//! is retried after 1 s, doubling up to the period. Unlike upstream, a disowned load balancer and one of a
//! Service with a `loadBalancerClass` are left alone: this controller does not own them. It needs
//! `DO_CLUSTER_ID`.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use cloud_provider::{
    CloudError, ControllerContext, ControllerInfo, DryRunLog, ObjectKey, ObjectKind,
    ProviderController, Result, ServiceWatch, for_object,
};
use k8s_openapi::api::core::v1::Service;
use serde::Serialize;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::annotations::{is_disowned, load_balancer_id, load_balancer_name_candidates};
use crate::api::LoadBalancer;
use crate::client::{ApiError, DoClient};

/// The controller's names.
pub const TAGS_CONTROLLER: ControllerInfo = ControllerInfo::new("tags-controller", "tags");

/// How often the load balancers' tags are checked.
pub const SYNC_PERIOD: Duration = Duration::from_secs(15 * 60);
/// How long one pass may take (upstream's timeout).
const PASS_TIMEOUT: Duration = Duration::from_secs(60);
/// First retry delay after a failed pass.
const MIN_RETRY_DELAY: Duration = Duration::from_secs(1);

/// The tag of the cluster's resources.
pub fn cluster_tag(cluster_id: &str) -> String {
    format!("k8s:{cluster_id}")
}

/// The controller; it runs only when the cluster has an ID.
pub struct TagsController {
    client: DoClient,
    cluster_id: Option<String>,
    period: Duration,
}

impl TagsController {
    /// The controller for the cluster `cluster_id` (none: it does not run).
    pub fn new(client: DoClient, cluster_id: Option<String>) -> Self {
        TagsController {
            client,
            cluster_id,
            period: SYNC_PERIOD,
        }
    }

    /// The same controller with another period (tests).
    pub fn with_period(mut self, period: Duration) -> Self {
        self.period = period;
        self
    }
}

#[async_trait::async_trait]
impl ProviderController for TagsController {
    fn info(&self) -> ControllerInfo {
        TAGS_CONTROLLER
    }

    fn skip_reason(&self) -> Option<String> {
        self.cluster_id
            .is_none()
            .then(|| "no cluster ID is configured (DO_CLUSTER_ID)".to_string())
    }

    async fn run(&self, mut context: ControllerContext, shutdown: CancellationToken) -> Result<()> {
        let Some(cluster_id) = &self.cluster_id else {
            return Ok(());
        };
        let tagger = Tagger {
            client: self.client.clone(),
            tag: cluster_tag(cluster_id),
        };
        // Nothing happens before the first complete list of Services.
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            changed = context.services.changed() => if !changed { return Ok(()) },
        }
        match &context.dry_run {
            Some(log) => tagger.single_pass(context.services.as_mut(), log).await,
            None => {
                tagger
                    .run(context.services.as_mut(), self.period, &shutdown)
                    .await
            }
        }
        Ok(())
    }
}

/// The passes of the controller.
struct Tagger {
    client: DoClient,
    tag: String,
}

/// `POST /v2/tags/{tag}/resources`.
#[derive(Serialize)]
struct TagResourcesRequest<'a> {
    resources: Vec<TaggedResource<'a>>,
}

#[derive(Serialize)]
struct TaggedResource<'a> {
    resource_id: &'a str,
    resource_type: &'static str,
}

impl Tagger {
    /// A pass now, then one every `period`; a failed pass is retried sooner, backing off.
    async fn run(
        &self,
        services: &mut dyn ServiceWatch,
        period: Duration,
        shutdown: &CancellationToken,
    ) {
        let mut failures = 0u32;
        loop {
            let delay = match self.pass(&services.services()).await {
                Ok(_) => {
                    failures = 0;
                    period
                }
                Err(err) => {
                    let delay = retry_delay(failures, period);
                    failures = failures.saturating_add(1);
                    tracing::error!(error = %err, retry_in = ?delay, tag = %self.tag,
                        "failed to tag the cluster's load balancers");
                    delay
                }
            };
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep_until(Instant::now() + delay) => {}
            }
        }
    }

    /// A dry run: one pass, filed under the tag in `log`.
    async fn single_pass(&self, services: &mut dyn ServiceWatch, log: &DryRunLog) {
        let object = ObjectKey::new(ObjectKind::Cloud, format!("tag/{}", self.tag));
        log.visit(object.clone());
        if let Err(err) = for_object(object.clone(), self.pass(&services.services())).await {
            tracing::error!(error = %err, "failed to tag the cluster's load balancers");
            log.record_failure(TAGS_CONTROLLER.name, Some(object), err.to_string());
        }
    }

    /// One pass within [`PASS_TIMEOUT`]: the IDs of the load balancers it tagged.
    async fn pass(&self, services: &[Arc<Service>]) -> Result<Vec<String>> {
        tokio::time::timeout(PASS_TIMEOUT, self.tag_untagged(services))
            .await
            .unwrap_or_else(|_| {
                Err(CloudError::provider(format!(
                    "timed out after {PASS_TIMEOUT:?}"
                )))
            })
    }

    async fn tag_untagged(&self, services: &[Arc<Service>]) -> Result<Vec<String>> {
        let owned: Vec<&Service> = services
            .iter()
            .map(Arc::as_ref)
            .filter(|s| is_owned_load_balancer_service(s))
            .collect();
        if owned.is_empty() {
            tracing::debug!("no LoadBalancer Services: no load balancers to tag");
            return Ok(Vec::new());
        }
        let all = self
            .client
            .load_balancers()
            .await
            .map_err(|e| api_error("list the load balancers", e))?;
        let untagged = untagged_load_balancers(&owned, &all, &self.tag);
        if untagged.is_empty() {
            tracing::debug!(tag = %self.tag, "every load balancer of the cluster carries its tag");
            return Ok(Vec::new());
        }
        match self.tag_resources(&untagged).await {
            Err(err) if err.is_not_found() => {
                tracing::info!(tag = %self.tag, "the cluster's tag does not exist; creating it");
                self.create_tag().await?;
                self.tag_resources(&untagged).await
            }
            other => other,
        }
        .map_err(|e| api_error(&format!("tag load balancers {untagged:?}"), e))?;
        tracing::info!(tag = %self.tag, load_balancers = ?untagged, "tagged the cluster's load balancers");
        Ok(untagged)
    }

    async fn tag_resources(&self, ids: &[String]) -> std::result::Result<(), ApiError> {
        let request = TagResourcesRequest {
            resources: ids
                .iter()
                .map(|id| TaggedResource {
                    resource_id: id,
                    resource_type: "load_balancer",
                })
                .collect(),
        };
        let path = format!("v2/tags/{}/resources", self.tag);
        self.client
            .post_without_answer("tag_resources", &path, &request)
            .await
    }

    async fn create_tag(&self) -> Result<()> {
        let body = serde_json::json!({ "name": self.tag });
        self.client
            .post_without_answer("create_tag", "v2/tags", &body)
            .await
            .map_err(|e| api_error(&format!("create the tag {}", self.tag), e))
    }
}

/// Whether this provider owns the load balancer of `service`: type `LoadBalancer`, no
/// `loadBalancerClass`, not disowned (an unreadable disown annotation counts as disowned: hands off).
fn is_owned_load_balancer_service(service: &Service) -> bool {
    let Some(spec) = &service.spec else {
        return false;
    };
    spec.type_.as_deref() == Some("LoadBalancer")
        && spec.load_balancer_class.is_none()
        && matches!(is_disowned(service), Ok(false))
}

/// The IDs of the load balancers of `services` (by ID annotation, else by name) in `all` that lack `tag`,
/// sorted, each once.
fn untagged_load_balancers(services: &[&Service], all: &[LoadBalancer], tag: &str) -> Vec<String> {
    let mut untagged = BTreeSet::new();
    for service in services {
        let found = match load_balancer_id(service) {
            Some(id) => all.iter().find(|lb| lb.id == id),
            None => {
                let names = load_balancer_name_candidates(service);
                all.iter().find(|lb| names.contains(&lb.name))
            }
        };
        if let Some(lb) = found.filter(|lb| !lb.tags.iter().any(|t| t == tag)) {
            untagged.insert(lb.id.clone());
        }
    }
    untagged.into_iter().collect()
}

/// The delay before the retry after `failures` earlier consecutive failures: 1 s doubling, at most
/// `period`.
fn retry_delay(failures: u32, period: Duration) -> Duration {
    MIN_RETRY_DELAY
        .saturating_mul(2u32.saturating_pow(failures.min(16)))
        .min(period)
}

fn api_error(action: &str, err: ApiError) -> CloudError {
    CloudError::provider_with(format!("could not {action}"), err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn service(name: &str, annotations: serde_json::Value, class: Option<&str>) -> Service {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                         "annotations": annotations},
            "spec": {"type": "LoadBalancer", "loadBalancerClass": class},
        }))
        .unwrap()
    }

    fn lb(id: &str, name: &str, tags: &[&str]) -> LoadBalancer {
        LoadBalancer {
            id: id.into(),
            name: name.into(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            ..LoadBalancer::default()
        }
    }

    #[test]
    fn only_owned_load_balancers_lacking_the_tag_are_tagged() {
        let by_id = service(
            "by-id",
            json!({"kubernetes.digitalocean.com/load-balancer-id": "lb-1"}),
            None,
        );
        let tagged = service(
            "tagged",
            json!({"kubernetes.digitalocean.com/load-balancer-id": "lb-2"}),
            None,
        );
        let by_name = service("by-name", json!({}), None);
        let gone = service(
            "gone",
            json!({"kubernetes.digitalocean.com/load-balancer-id": "lb-x"}),
            None,
        );
        let default_name = load_balancer_name_candidates(&by_name)[0].clone();
        let all = [
            lb("lb-1", "a", &["other"]),
            lb("lb-2", "b", &["k8s:c1"]),
            lb("lb-3", &default_name, &[]),
            lb("lb-4", "unrelated", &[]),
        ];
        let services = [&by_id, &tagged, &by_name, &gone, &by_id];
        assert_eq!(
            untagged_load_balancers(&services, &all, "k8s:c1"),
            ["lb-1", "lb-3"]
        );
    }

    #[test]
    fn classes_disowned_and_other_types_are_not_ours() {
        assert!(is_owned_load_balancer_service(&service(
            "s",
            json!({}),
            None
        )));
        assert!(!is_owned_load_balancer_service(&service(
            "s",
            json!({}),
            Some("other")
        )));
        for disown in ["true", "maybe"] {
            let s = service(
                "s",
                json!({"service.kubernetes.io/do-loadbalancer-disown": disown}),
                None,
            );
            assert!(!is_owned_load_balancer_service(&s), "{disown}");
        }
        let mut cluster_ip = service("s", json!({}), None);
        cluster_ip.spec.as_mut().unwrap().type_ = Some("ClusterIP".into());
        assert!(!is_owned_load_balancer_service(&cluster_ip));
    }

    #[test]
    fn retries_back_off_up_to_the_period() {
        let period = Duration::from_secs(100);
        let delays: Vec<u64> = (0..9).map(|f| retry_delay(f, period).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 64, 100, 100]);
        assert_eq!(retry_delay(u32::MAX, period), period);
    }
}
