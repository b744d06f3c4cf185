//! Starting the enabled controllers over shared informers, in deterministic order, and stopping them.

use std::collections::HashMap;
use std::sync::Arc;

use cloud_provider::{ControllerInfo, ProviderController};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::context::ControllerContext;
use crate::descriptors::{CONTROLLERS, Runner};
use crate::error::ControllersError;
use crate::health::HealthHandle;
use crate::informers::SharedInformers;
use crate::names::ControllerName;
use crate::provider_controllers::provider_context;

/// A provider controller on the process' client and Service watch.
fn build_provider(
    ctx: &ControllerContext,
    informers: &SharedInformers,
    controller: Arc<dyn ProviderController>,
) -> Runner {
    let context = provider_context(ctx.client.clone(), informers, ctx.config.dry_run.clone());
    let name = controller.info().name;
    Box::new(move |token| {
        Box::pin(async move {
            controller
                .run(context, token)
                .await
                .map_err(|err| ControllersError::Controller {
                    name: name.to_string(),
                    message: err.to_string(),
                })
        })
    })
}

/// Runs the `enabled` controllers until `shutdown` is cancelled.
///
/// Builds the shared informers, constructs every enabled controller that can run (in the order of
/// [`CONTROLLERS`], each as its descriptor says; the others are skipped with an info log saying why), starts the
/// informers (one watch per resource type the started controllers need), then starts the controllers in
/// order, registering each one's health check as it starts. Returns once `shutdown` is cancelled and every
/// controller has stopped; the error is the first controller failure, if any. A failed controller marks
/// its health check failed and does not stop the others.
pub async fn run_controllers(
    ctx: ControllerContext,
    enabled: &[ControllerName],
    shutdown: CancellationToken,
) -> Result<(), ControllersError> {
    run_with_provider_controllers(ctx, enabled, Vec::new(), shutdown).await
}

/// [`run_controllers`], plus the provider's own controllers selected by `--controllers` (started after
/// the standard ones, in the given order; one whose [`ProviderController::skip_reason`] says why it cannot
/// run is not started).
pub async fn run_with_provider_controllers(
    ctx: ControllerContext,
    enabled: &[ControllerName],
    provider_controllers: Vec<Arc<dyn ProviderController>>,
    shutdown: CancellationToken,
) -> Result<(), ControllersError> {
    let informers = SharedInformers::new(ctx.client.clone());
    let runners = build_runners(&ctx, enabled, provider_controllers, &informers)?;
    let informer_token = shutdown.child_token();
    let informer_tasks = informers.start(&informer_token);

    let running = spawn_controllers(&ctx, runners, &shutdown).await;
    let first_error = running.join().await;
    // Controllers only stop on shutdown (one that failed early stays reported unhealthy until then),
    // except in a dry run, where each stops after its pass.
    if !ctx.is_single_pass() {
        shutdown.cancelled().await;
    }
    // Every controller has stopped: stop the watches too.
    informer_token.cancel();
    for task in informer_tasks {
        let _ = task.await;
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// A controller ready to start: its health-check name, its `running_managed_controllers` name and its
/// runner.
type NamedRunner = (&'static str, &'static str, Runner);

/// Builds, over `informers` (before they start), every enabled controller that can run: the standard ones
/// in the order of [`CONTROLLERS`], each as its descriptor says, then the provider's. The others are
/// skipped with an info log saying why; a failed precondition stops the start-up.
fn build_runners(
    ctx: &ControllerContext,
    enabled: &[ControllerName],
    provider_controllers: Vec<Arc<dyn ProviderController>>,
    informers: &SharedInformers,
) -> Result<Vec<NamedRunner>, ControllersError> {
    let mut runners = Vec::new();
    for descriptor in &CONTROLLERS {
        let name = descriptor.name;
        if !enabled.contains(&name) {
            tracing::info!(controller = %name, "controller disabled");
            continue;
        }
        if let Some(reason) = descriptor.skip_reason(ctx) {
            tracing::info!(controller = %name, %reason, "not starting controller");
            continue;
        }
        if let Err(err) = (descriptor.precondition)(ctx) {
            // A dry run reports the controller that cannot start and still makes the others' pass;
            // the daemon stops at start-up.
            let Some(log) = &ctx.config.dry_run else {
                return Err(err);
            };
            tracing::error!(controller = %name, error = %err, "controller cannot start");
            log.record_failure(descriptor.health_check(), None, err.to_string());
            continue;
        }
        runners.push((
            descriptor.health_check(),
            descriptor.metrics_name,
            (descriptor.start)(ctx, informers),
        ));
    }
    for controller in provider_controllers {
        let ControllerInfo { name, alias, .. } = controller.info();
        if let Some(reason) = controller.skip_reason() {
            tracing::info!(controller = name, %reason, "not starting controller");
            continue;
        }
        runners.push((name, alias, build_provider(ctx, informers, controller)));
    }
    Ok(runners)
}

/// The started controllers' tasks, with the name and health check of each task.
struct RunningControllers {
    tasks: JoinSet<Result<(), ControllersError>>,
    names: HashMap<tokio::task::Id, (&'static str, HealthHandle)>,
}

/// Starts the controllers in order, registering each one's health check as it starts, with
/// `--controller-start-interval` between them. A controller that fails marks its health check failed (and,
/// in a dry run, is reported) without stopping the others.
async fn spawn_controllers(
    ctx: &ControllerContext,
    runners: Vec<NamedRunner>,
    shutdown: &CancellationToken,
) -> RunningControllers {
    let mut tasks = JoinSet::new();
    let mut names = HashMap::new();
    for (index, (name, metrics_name, runner)) in runners.into_iter().enumerate() {
        if index > 0 && !wait_start_interval(ctx.config.controller_start_interval, shutdown).await {
            break;
        }
        let health = ctx.health.register(name);
        let health_for_panics = health.clone();
        let token = shutdown.child_token();
        let dry_run = ctx.config.dry_run.clone();
        let metrics = ctx.metrics.clone();
        tracing::info!(controller = name, "starting controller");
        metrics.set_running(metrics_name, true);
        let handle = tasks.spawn(async move {
            let result = runner(token).await;
            metrics.set_running(metrics_name, false);
            match &result {
                Ok(()) => tracing::info!(controller = name, "controller stopped"),
                Err(e) => {
                    tracing::error!(controller = name, error = %e, "controller failed");
                    health.set_failed(e.to_string());
                    if let Some(log) = &dry_run {
                        log.record_failure(name, None, e.to_string());
                    }
                }
            }
            result
        });
        names.insert(handle.id(), (name, health_for_panics));
    }
    RunningControllers { tasks, names }
}

/// Waits a random time between `interval` and twice `interval` (upstream's jitter of the start interval);
/// false when `shutdown` fired meanwhile.
async fn wait_start_interval(interval: std::time::Duration, shutdown: &CancellationToken) -> bool {
    if interval.is_zero() {
        return true;
    }
    let wait = interval.mul_f64(1.0 + rand::random::<f64>());
    tokio::select! {
        _ = shutdown.cancelled() => false,
        _ = tokio::time::sleep(wait) => true,
    }
}

impl RunningControllers {
    /// Waits for every controller to stop; the first failure, if any. A task that panicked or was
    /// cancelled marks its controller's health check failed.
    async fn join(mut self) -> Option<ControllersError> {
        let mut first_error = None;
        while let Some(joined) = self.tasks.join_next_with_id().await {
            let err = match joined {
                Ok((_, Ok(()))) => None,
                Ok((_, Err(e))) => Some(e),
                Err(join_error) => Some(self.abnormal_end(&join_error)),
            };
            if first_error.is_none() {
                first_error = err;
            }
        }
        first_error
    }

    /// Reports a task that ended abnormally (panicked or cancelled) on its controller's health check.
    fn abnormal_end(&self, join_error: &tokio::task::JoinError) -> ControllersError {
        let message = format!("controller task ended abnormally: {join_error}");
        let name = match self.names.get(&join_error.id()) {
            Some((name, health)) => {
                health.set_failed(message.clone());
                *name
            }
            None => "unknown",
        };
        tracing::error!(controller = name, %message);
        ControllersError::Controller {
            name: name.to_string(),
            message,
        }
    }
}
