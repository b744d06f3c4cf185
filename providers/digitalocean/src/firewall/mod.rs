//! `firewall-controller`: the public-access cloud firewall, as the upstream DigitalOcean
//! cloud-controller-manager keeps it.
//!
//! With `PUBLIC_ACCESS_FIREWALL_NAME` and `PUBLIC_ACCESS_FIREWALL_TAGS` set, one cloud firewall of that
//! name, applied to the droplets with those tags, opens the node ports of the cluster's `NodePort`
//! Services and the ports of its external network load balancers ([`rules`]). The controller:
//! - reconciles whenever a Service is added, changed or deleted (once the first list is complete, never
//!   from a partial one), and after each periodic refresh;
//! - refreshes its copy of the firewall from the API every [`RESYNC_PERIOD`] (5 minutes, upstream's
//!   cadence): by ID when it knows one, else by listing and matching the name, which is how an existing
//!   firewall (one the upstream controller made) is adopted;
//! - sends nothing when the firewall already matches; otherwise replaces it with one update (a create
//!   when there is none, or when the update finds it deleted out of band);
//! - on a failure retries after 1 s, doubling up to 5 minutes (a Service change retries at once). The API
//!   client honours `429` with `Retry-After` and the rate-limit headers on every call. A Service whose
//!   load-balancer type or network annotation cannot be read fails the reconcile as a whole: nothing is
//!   changed until it is fixed, like upstream.
//!
//! It counts its API calls, refreshes and reconciles in upstream's `firewall_*` families ([`metrics`]).

pub mod metrics;
pub mod rules;

use std::sync::Arc;
use std::time::Duration;

use cloud_provider::{
    CloudError, ControllerContext, ControllerInfo, DryRunLog, ObjectKey, ObjectKind,
    ProviderController, Result, ServiceWatch, for_object,
};
use k8s_openapi::api::core::v1::Service;
use reqwest::Method;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::client::{Answered, ApiError, DoClient};
use crate::config::{LbType, PublicAccessFirewall};
use metrics::FirewallMetrics;
use rules::{Firewall, FirewallRequest, describe_difference, desired_firewall, is_up_to_date};

/// The controller's names.
pub const FIREWALL_CONTROLLER: ControllerInfo =
    ControllerInfo::new("firewall-controller", "firewall");

/// How often the firewall is re-read from the API (and reconciled).
pub const RESYNC_PERIOD: Duration = Duration::from_secs(5 * 60);
/// How long one reconcile may take.
const RECONCILE_TIMEOUT: Duration = Duration::from_secs(30);
/// First retry delay after a failed reconcile.
const MIN_RETRY_DELAY: Duration = Duration::from_secs(1);
/// Longest retry delay.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(5 * 60);

/// The controller; it runs only when a public-access firewall is configured.
pub struct FirewallController {
    client: DoClient,
    firewall: Option<PublicAccessFirewall>,
    default_lb_type: LbType,
    resync_period: Duration,
    metrics: FirewallMetrics,
}

impl FirewallController {
    /// The controller for `firewall` (none: it does not run), counting in `metrics`.
    pub fn new(
        client: DoClient,
        firewall: Option<PublicAccessFirewall>,
        default_lb_type: LbType,
        metrics: FirewallMetrics,
    ) -> Self {
        FirewallController {
            client,
            firewall,
            default_lb_type,
            resync_period: RESYNC_PERIOD,
            metrics,
        }
    }

    /// The same controller with another refresh period (tests).
    pub fn with_resync_period(mut self, period: Duration) -> Self {
        self.resync_period = period;
        self
    }
}

#[async_trait::async_trait]
impl ProviderController for FirewallController {
    fn info(&self) -> ControllerInfo {
        FIREWALL_CONTROLLER
    }

    fn skip_reason(&self) -> Option<String> {
        self.firewall.is_none().then(|| {
            "no public-access firewall is configured (PUBLIC_ACCESS_FIREWALL_NAME and \
             PUBLIC_ACCESS_FIREWALL_TAGS)"
                .to_string()
        })
    }

    async fn run(&self, context: ControllerContext, shutdown: CancellationToken) -> Result<()> {
        let Some(firewall) = &self.firewall else {
            return Ok(());
        };
        tracing::info!(firewall = %firewall.name, tags = ?firewall.tags, "managing the public-access firewall");
        let mut manager = FirewallManager {
            client: self.client.clone(),
            firewall: firewall.clone(),
            known: None,
            metrics: self.metrics.clone(),
        };
        let mut loop_state = Loop {
            services: context.services,
            manager: &mut manager,
            default_lb_type: self.default_lb_type,
            failures: 0,
        };
        match &context.dry_run {
            Some(log) => {
                let object =
                    ObjectKey::new(ObjectKind::Cloud, format!("firewall/{}", firewall.name));
                loop_state.single_pass(log, object, &shutdown).await;
            }
            None => loop_state.run(self.resync_period, &shutdown).await,
        }
        Ok(())
    }
}

/// The controller's loop: Service changes, refreshes and retries.
struct Loop<'a> {
    services: Box<dyn ServiceWatch>,
    manager: &'a mut FirewallManager,
    default_lb_type: LbType,
    /// Failed reconciles since the last success.
    failures: u32,
}

impl Loop<'_> {
    async fn run(&mut self, resync_period: Duration, shutdown: &CancellationToken) {
        // Nothing happens before the first complete list of Services.
        tokio::select! {
            _ = shutdown.cancelled() => return,
            changed = self.services.changed() => if !changed { return },
        }
        let mut refresh = tokio::time::interval_at(Instant::now() + resync_period, resync_period);
        refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut retry_at = None;
        let mut pending = true;
        loop {
            if pending {
                pending = false;
                retry_at = self.reconcile_once().await;
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                changed = self.services.changed() => {
                    if !changed {
                        return;
                    }
                    pending = true;
                }
                _ = refresh.tick() => {
                    match self.manager.resource_sync().await {
                        Ok(()) => pending = true,
                        Err(err) => tracing::warn!(error = %err, "could not refresh the public-access firewall"),
                    }
                }
                _ = sleep_until(retry_at) => pending = true,
            }
        }
    }

    /// A dry run: one reconcile after the first complete list, filed under `object` in `log`.
    async fn single_pass(
        &mut self,
        log: &DryRunLog,
        object: ObjectKey,
        shutdown: &CancellationToken,
    ) {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            changed = self.services.changed() => if !changed { return },
        }
        log.visit(object.clone());
        if let Err(err) = for_object(object.clone(), self.reconcile()).await {
            tracing::error!(error = %err, "failed to reconcile the public-access firewall");
            log.record_failure(FIREWALL_CONTROLLER.name, Some(object), err);
        }
    }

    /// One reconcile of the firewall with the current Services, within [`RECONCILE_TIMEOUT`].
    async fn reconcile(&mut self) -> std::result::Result<(), String> {
        let services = self.services.services();
        let started = std::time::Instant::now();
        let outcome = tokio::time::timeout(
            RECONCILE_TIMEOUT,
            self.manager.reconcile(&services, self.default_lb_type),
        )
        .await;
        let metrics = &self.manager.metrics;
        match outcome {
            Ok(Ok(Reconciled::Changed)) => metrics.reconcile("reconciled", "", started),
            Ok(Ok(Reconciled::UpToDate)) => metrics.reconcile("skipped", "", started),
            Ok(Err(err)) => {
                metrics.reconcile("failed", "generic", started);
                return Err(err);
            }
            Err(_) => {
                metrics.reconcile("failed", "timeout", started);
                return Err(format!("timed out after {RECONCILE_TIMEOUT:?}"));
            }
        }
        Ok(())
    }

    /// One reconcile; on failure, when to retry.
    async fn reconcile_once(&mut self) -> Option<Instant> {
        match self.reconcile().await {
            Ok(()) => {
                self.failures = 0;
                None
            }
            Err(err) => {
                let delay = retry_delay(self.failures);
                self.failures = self.failures.saturating_add(1);
                tracing::error!(error = %err, retry_in = ?delay, "failed to reconcile the public-access firewall");
                Some(Instant::now() + delay)
            }
        }
    }
}

/// Sleeps until `at`, or forever without one.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The delay before the retry after `failures` earlier consecutive failures: 1 s doubling, at most 5 min.
fn retry_delay(failures: u32) -> Duration {
    MIN_RETRY_DELAY
        .saturating_mul(2u32.saturating_pow(failures.min(16)))
        .min(MAX_RETRY_DELAY)
}

/// What a successful reconcile did.
enum Reconciled {
    /// The firewall was created or updated.
    Changed,
    /// It already matched.
    UpToDate,
}

/// The firewall's API calls and the last copy the API returned.
struct FirewallManager {
    client: DoClient,
    firewall: PublicAccessFirewall,
    /// `None` until the API has been asked; then the firewall, or `Some(None)` when there is none.
    known: Option<Option<Firewall>>,
    metrics: FirewallMetrics,
}

impl FirewallManager {
    /// Makes the cloud's firewall the one `services` call for.
    async fn reconcile(
        &mut self,
        services: &[Arc<Service>],
        default_lb_type: LbType,
    ) -> std::result::Result<Reconciled, String> {
        let request = desired_firewall(&self.firewall, services, default_lb_type)
            .map_err(|e| format!("cannot compute the firewall rules: {e}"))?;
        if self.known.is_none() {
            self.refresh().await.map_err(|e| e.to_string())?;
        }
        let current = self.known.clone().flatten();
        match &current {
            Some(current) if is_up_to_date(current, &request) => {
                tracing::debug!(firewall = %current.id, "the public-access firewall is up to date");
                return Ok(Reconciled::UpToDate);
            }
            Some(current) => tracing::info!(
                firewall = %current.id,
                changes = %describe_difference(current, &request),
                "updating the public-access firewall"
            ),
            None => tracing::info!(
                name = %request.name,
                inbound_rules = request.inbound_rules.len(),
                "creating the public-access firewall"
            ),
        }
        self.apply(current.map(|c| c.id), &request)
            .await
            .map(|()| Reconciled::Changed)
            .map_err(|e| e.to_string())
    }

    /// The periodic re-read ([`FirewallManager::refresh`] within [`RECONCILE_TIMEOUT`]), counted as a
    /// resource sync.
    async fn resource_sync(&mut self) -> std::result::Result<(), CloudError> {
        let started = std::time::Instant::now();
        match tokio::time::timeout(RECONCILE_TIMEOUT, self.refresh()).await {
            Ok(Ok(())) => {
                self.metrics.resource_sync("updated", started);
                Ok(())
            }
            Ok(Err(err)) => {
                self.metrics.resource_sync("failed", started);
                Err(err)
            }
            Err(_) => {
                self.metrics.resource_sync("canceled", started);
                Err(CloudError::provider(format!(
                    "refreshing the public-access firewall timed out after {RECONCILE_TIMEOUT:?}"
                )))
            }
        }
    }

    /// Counts the API operation `operation` that started at `started` with `outcome`.
    fn count<T>(
        &self,
        operation: &str,
        started: std::time::Instant,
        outcome: std::result::Result<Answered<T>, ApiError>,
    ) -> std::result::Result<T, ApiError> {
        let status = match &outcome {
            Ok(answered) => Some(answered.status),
            Err(err) => err.status(),
        };
        self.metrics
            .operation(operation, outcome.is_ok(), status, started);
        outcome.map(|a| a.value)
    }

    /// Re-reads the firewall: by ID when one is known (falling back to the list when it is gone), else by
    /// listing and matching the name.
    async fn refresh(&mut self) -> std::result::Result<(), CloudError> {
        if let Some(Some(known)) = &self.known {
            let path = format!("v2/firewalls/{}", known.id);
            let started = std::time::Instant::now();
            let answer = self
                .client
                .get_answered("get_firewall", &path, "firewall")
                .await;
            match self.count("get_by_id", started, answer) {
                Ok(firewall) => {
                    self.known = Some(Some(firewall));
                    return Ok(());
                }
                Err(err) if err.is_not_found() => tracing::warn!(
                    firewall = %known.id,
                    "the public-access firewall no longer exists; looking it up by name"
                ),
                Err(err) => return Err(api_error("get the public-access firewall", err)),
            }
        }
        let started = std::time::Instant::now();
        let answer = self
            .client
            .list_answered("list_firewalls", "v2/firewalls", "firewalls", &[])
            .await;
        let firewalls: Vec<Firewall> = self
            .count("get_by_list", started, answer)
            .map_err(|e| api_error("list firewalls", e))?;
        let found = firewalls.into_iter().find(|f| f.name == self.firewall.name);
        tracing::debug!(name = %self.firewall.name, found = found.is_some(), "looked the public-access firewall up by name");
        self.known = Some(found);
        Ok(())
    }

    /// Updates firewall `id` to `request`, or creates it when there is no ID or the firewall is gone.
    async fn apply(
        &mut self,
        id: Option<String>,
        request: &FirewallRequest,
    ) -> std::result::Result<(), CloudError> {
        if let Some(id) = id {
            let path = format!("v2/firewalls/{id}");
            let started = std::time::Instant::now();
            let answer = self
                .client
                .write("update_firewall", Method::PUT, &path, request, "firewall")
                .await;
            match self.count("update", started, answer) {
                Ok(firewall) => {
                    tracing::info!(firewall = %id, "updated the public-access firewall");
                    self.known = Some(Some(firewall));
                    return Ok(());
                }
                Err(err) if err.is_not_found() => tracing::warn!(
                    firewall = %id,
                    "the public-access firewall was deleted; creating it again"
                ),
                Err(err) => return Err(api_error("update the public-access firewall", err)),
            }
        }
        let started = std::time::Instant::now();
        let answer = self
            .client
            .write(
                "create_firewall",
                Method::POST,
                "v2/firewalls",
                request,
                "firewall",
            )
            .await;
        let firewall: Firewall = self
            .count("create", started, answer)
            .map_err(|e| api_error("create the public-access firewall", e))?;
        tracing::info!(firewall = %firewall.id, name = %firewall.name, "created the public-access firewall");
        self.known = Some(Some(firewall));
        Ok(())
    }
}

fn api_error(action: &str, err: ApiError) -> CloudError {
    CloudError::provider_with(format!("could not {action}"), err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_from_one_second_to_five_minutes() {
        let delays: Vec<u64> = (0..12).map(|f| retry_delay(f).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]);
        assert_eq!(retry_delay(u32::MAX), MAX_RETRY_DELAY);
    }
}
