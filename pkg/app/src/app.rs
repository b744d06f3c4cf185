//! The daemon's start-up and life cycle: provider initialization (first, so that a wrong provider name or
//! cloud config is reported before anything else), Kubernetes clients, serving (health checks and
//! metrics), leader election, waiting for the API server, cloud initialization, then the controllers
//! (which start the shared informers).
//!
//! Shutdown: SIGTERM or SIGINT cancels the controllers, waits for them, releases the Lease (so a standby
//! takes over at once) and exits 0. Losing the Lease exits 1 at once.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use cloud_controllers::{
    ControllerConfig, ControllerContext, ControllerMetrics, ControllerName, HealthRegistry,
    identity, run_with_provider_controllers,
};
use cloud_provider::{
    CloudProvider, ControllerInfo, DryRunLog, ProviderController, Registry, RegistryError,
};
use tokio_util::sync::CancellationToken;

use crate::build_info::BuildInfo;
use crate::client::{
    AUTH_LIMITS, ClientError, LEADER_ELECTION_LIMITS, RateLimitLayer, RateLimits, events_limits,
    load_config,
};
use crate::connections::{SharedConnections, build_client};
use crate::controllers_flag::SelectedControllers;
use crate::dry_run::DryRunReport;
use crate::leader::{LeaderElectionConfig, LeaderElector, LeaderStatus, RenewOutcome};
use crate::leader_migration::{LeaderMigrationConfig, Placement};
use crate::rest_client_metrics::RestClientMetrics;
use crate::service_accounts::{
    ControllerCredentials, CredentialsError, NAMESPACE, TOKEN_LIFETIME, TokenRequestIssuer,
};
use crate::serving::auth::{
    Authorizer, ClusterAuthentication, DelegatedAuth, LookupError, TokenAuthenticator,
    lookup_cluster_authentication,
};
use crate::serving::certificates::{CaSource, CertSource, ServerTls, TlsMaterial};
use crate::serving::health::HealthChecks;
use crate::serving::process_metrics::ProcessCollector;
use crate::serving::tls::{self, TlsError};
use crate::serving::{self, ServeError, ServingState, profiles};
use crate::validation::{
    AppConfig, AuthenticationSettings, CertChoice, ServingSettings, WebhookServing,
};
use crate::webhook::{LB_SERVICE_PATH, LbServiceWebhook, WebhookMetrics};

/// How long the API server may stay unreachable after leadership is won before the daemon gives up.
pub const API_SERVER_WAIT: Duration = Duration::from_secs(60);
/// How long the controllers get to stop after a shutdown signal.
pub const CONTROLLER_STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a dry run waits for the API server: it is run by hand, and should say soon what is wrong.
pub const DRY_RUN_API_SERVER_WAIT: Duration = Duration::from_secs(5);
/// Extra time past the lease duration before the leader-election health check fails.
pub const LEADER_HEALTH_TOLERANCE: Duration = Duration::from_secs(20);

/// Why the daemon stopped with an error (exit code 1).
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// A Kubernetes client could not be built.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The provider could not be initialized.
    #[error(transparent)]
    Provider(#[from] RegistryError),
    /// The provider has no cluster ID and `--allow-untagged-cloud` is not set.
    #[error(
        "cloud provider {0:?} could not find a cluster ID; refusing to run without one (pass \
         --allow-untagged-cloud to run anyway, at the risk of touching other clusters' cloud resources)"
    )]
    NoClusterId(String),
    /// TLS material for serving.
    #[error("serving: {0}")]
    Tls(#[from] TlsError),
    /// The serving socket.
    #[error(transparent)]
    Serve(#[from] ServeError),
    /// The cluster's authentication settings could not be read (`--authentication-tolerate-lookup-failure`
    /// makes this a warning).
    #[error(
        "unable to load configmap based request-header-client-ca-file: {0} (pass \
         --authentication-tolerate-lookup-failure to start anyway)"
    )]
    AuthenticationLookup(#[source] LookupError),
    /// Signal handlers could not be installed.
    #[error("cannot install signal handlers: {0}")]
    Signals(#[source] std::io::Error),
    /// The API server did not answer in time.
    #[error("the API server did not become reachable within {0:?}: {1}")]
    ApiServerUnreachable(Duration, String),
    /// `CloudProvider::initialize` failed.
    #[error("cloud provider initialization failed: {0}")]
    CloudInit(#[source] cloud_provider::CloudError),
    /// The controllers failed.
    #[error("controllers failed: {0}")]
    Controllers(String),
    /// `--controllers` names a controller that neither this program nor the provider has.
    #[error("{0}")]
    UnknownController(String),
    /// Leadership was lost.
    #[error("leader election lost: {0}")]
    LeaseLost(String),
    /// `--dry-run` with a provider that has no mutation gate.
    #[error(
        "cloud provider {0:?} cannot be dry-run: it does not pass its mutating cloud calls through a \
         mutation gate (CloudProvider::mutation_gate)"
    )]
    DryRunUnsupported(String),
    /// `--use-service-account-credentials`: a controller's credentials could not be set up.
    #[error("--use-service-account-credentials: {0}")]
    ServiceAccountCredentials(#[source] CredentialsError),
}

/// What the controllers' own clients are made from (`--use-service-account-credentials`).
#[derive(Clone)]
struct ServiceAccountSettings {
    /// The daemon's client configuration: the server and CA the controllers' clients use.
    base: kube::Config,
    /// The token bucket of each controller's client.
    limits: RateLimits,
}

/// Runs the daemon until a shutdown signal (Ok) or a fatal error.
pub async fn run_daemon(config: AppConfig, registry: Registry) -> Result<(), AppError> {
    let shutdown = CancellationToken::new();
    install_signal_handlers(shutdown.clone())?;
    run_until(config, registry, shutdown).await
}

/// Cancels `shutdown` on the first SIGTERM or SIGINT.
fn install_signal_handlers(shutdown: CancellationToken) -> Result<(), AppError> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut terminate = signal(SignalKind::terminate()).map_err(AppError::Signals)?;
        let mut interrupt = signal(SignalKind::interrupt()).map_err(AppError::Signals)?;
        tokio::spawn(async move {
            let name = tokio::select! {
                _ = terminate.recv() => "SIGTERM",
                _ = interrupt.recv() => "SIGINT",
            };
            tracing::info!(signal = name, "shutting down");
            shutdown.cancel();
        });
    }
    #[cfg(not(unix))]
    {
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                tracing::info!("interrupted; shutting down");
                shutdown.cancel();
            }
        });
    }
    Ok(())
}

/// `<hostname>_<uuid>`, the identity of this process in the election and in events.
pub fn identity() -> String {
    let host = hostname::get()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".to_string());
    format!("{host}_{}", uuid::Uuid::new_v4())
}

/// The controllers to start: those enabled by `--controllers` among the standard ones and `provider`'s
/// own, minus those a flag turns off ([`cloud_controllers::ControllerDescriptor::flag_gate`]:
/// node-route-controller when `--configure-cloud-routes` is false; like upstream since Kubernetes 1.21,
/// `--allocate-node-cidrs` plays no part). A controller whose provider capability is missing is skipped
/// when the controllers start.
pub fn controllers_to_start(
    config: &AppConfig,
    provider: &[ControllerInfo],
) -> Result<SelectedControllers, AppError> {
    let mut selected = config
        .controllers
        .resolve(provider)
        .map_err(AppError::UnknownController)?;
    selected.standard.retain(|c| {
        let turned_off = c
            .descriptor()
            .flag_gate
            .filter(|gate| (gate.turns_off)(&config.controller_config));
        if let Some(gate) = turned_off {
            tracing::info!("{}", gate.notice);
        }
        turned_off.is_none()
    });
    Ok(selected)
}

/// The controllers the leader runs.
struct ControllerSet {
    /// The standard controllers, in start order.
    standard: Vec<ControllerName>,
    /// The provider's own controllers.
    provider: Vec<Arc<dyn ProviderController>>,
}

impl ControllerSet {
    /// The selected controllers of `cloud`.
    fn select(config: &AppConfig, cloud: &dyn CloudProvider) -> Result<Self, AppError> {
        let provider = cloud.controllers();
        let infos: Vec<ControllerInfo> = provider.iter().map(|c| c.info()).collect();
        let selected = controllers_to_start(config, &infos)?;
        Ok(ControllerSet {
            standard: selected.standard,
            provider: provider
                .into_iter()
                .filter(|c| selected.provider.contains(&c.info().name))
                .collect(),
        })
    }

    /// Leader migration: the controllers that stay under the main Lease and those that run under the
    /// migration Lease; those the configuration gives another component are dropped (logged).
    fn split_for_migration(self, migration: &LeaderMigrationConfig) -> (Self, Self) {
        let mut main = ControllerSet {
            standard: Vec::new(),
            provider: Vec::new(),
        };
        let mut migrated = ControllerSet {
            standard: Vec::new(),
            provider: Vec::new(),
        };
        let placed = |name: &str| {
            let placement = migration.placement(name);
            if placement == Placement::Elsewhere {
                tracing::info!(
                    controller = name,
                    "leader migration: the configuration gives this controller to another component; not \
                     starting it"
                );
            }
            placement
        };
        for controller in self.standard {
            match placed(controller.canonical()) {
                Placement::Main => main.standard.push(controller),
                Placement::Migrated => migrated.standard.push(controller),
                Placement::Elsewhere => {}
            }
        }
        for controller in self.provider {
            match placed(controller.info().name) {
                Placement::Main => main.provider.push(controller),
                Placement::Migrated => migrated.provider.push(controller),
                Placement::Elsewhere => {}
            }
        }
        (main, migrated)
    }

    /// The canonical names of all of them.
    fn names(&self) -> Vec<&'static str> {
        self.standard
            .iter()
            .map(|c| c.canonical())
            .chain(self.provider.iter().map(|c| c.info().name))
            .collect()
    }
}

/// The provider of `--cloud-provider` built from `--cloud-config`, and the controllers to run with it.
fn init_provider(
    config: &AppConfig,
    registry: &Registry,
) -> Result<(Arc<dyn CloudProvider>, ControllerSet), AppError> {
    let cloud = registry.init_from_file(&config.cloud_provider, config.cloud_config.as_deref())?;
    let controllers = ControllerSet::select(config, cloud.as_ref())?;
    if !cloud.has_cluster_id() {
        if config.allow_untagged_cloud {
            tracing::warn!(
                provider = %config.cloud_provider,
                "the cloud provider has no cluster ID; running anyway because of --allow-untagged-cloud"
            );
        } else {
            return Err(AppError::NoClusterId(config.cloud_provider.clone()));
        }
    }
    Ok((cloud, controllers))
}

/// `--dry-run`: one pass of the controllers that changes nothing (see [`crate::dry_run`]); the report of
/// what it would have changed.
pub async fn run_dry_run(config: AppConfig, registry: Registry) -> Result<DryRunReport, AppError> {
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        provider = %config.cloud_provider,
        "starting a dry run of the cloud-controller-manager"
    );
    let (cloud, controllers) = init_provider(&config, &registry)?;
    let gate = cloud
        .mutation_gate()
        .ok_or_else(|| AppError::DryRunUnsupported(config.cloud_provider.clone()))?;
    let log = DryRunLog::default();
    gate.start_dry_run(log.clone());
    if config.use_service_account_credentials {
        tracing::info!(
            "--use-service-account-credentials is ignored in a dry run: it would create tokens"
        );
    }

    let kube_config = load_config(config.kubeconfig.as_deref(), config.master.as_deref()).await?;
    let limits = config.kube_api_limits;
    let base = ControllerConfig {
        dry_run: Some(log.clone()),
        ..(*config.controller_config).clone()
    };
    let (client, event_client, controller_config) =
        controller_clients(&kube_config, limits, &base)?;
    let context = ControllerContext {
        client: client.clone(),
        event_client,
        cloud: cloud.clone(),
        config: controller_config,
        metrics: ControllerMetrics::register(&mut prometheus_client::registry::Registry::default()),
        health: HealthRegistry::default(),
        identity: identity(),
    };
    wait_for_api_server(&client, DRY_RUN_API_SERVER_WAIT).await?;
    cloud
        .initialize(client)
        .await
        .map_err(AppError::CloudInit)?;
    tracing::info!(controllers = ?controllers.names(), "making one pass");
    let passed = run_with_provider_controllers(
        context,
        &controllers.standard,
        controllers.provider,
        CancellationToken::new(),
    )
    .await;
    if let Err(err) = passed {
        tracing::warn!(error = %err, "a controller failed during the dry run");
    }
    Ok(DryRunReport::from_records(log.records()))
}

/// Runs the daemon until `shutdown` is cancelled (Ok) or a fatal error.
pub async fn run_until(
    config: AppConfig,
    registry: Registry,
    shutdown: CancellationToken,
) -> Result<(), AppError> {
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        provider = %config.cloud_provider,
        "starting the cloud-controller-manager"
    );

    let (cloud, controllers) = init_provider(&config, &registry)?;

    // Clients.
    let kube_config = load_config(config.kubeconfig.as_deref(), config.master.as_deref()).await?;
    let controller_limits = config.kube_api_limits;
    let (client, event_client, controller_config) =
        controller_clients(&kube_config, controller_limits, &config.controller_config)?;
    let service_accounts = config
        .use_service_account_credentials
        .then(|| ServiceAccountSettings {
            base: kube_config.clone(),
            limits: controller_limits,
        });

    // Metrics and health.
    let identity = identity();
    let leader_status = match &config.leader_election {
        Some(le) => LeaderStatus::new(&le.name, le.lease_duration.get() + LEADER_HEALTH_TOLERANCE),
        None => LeaderStatus::disabled(),
    };
    let (mut metrics_registry, controller_metrics) =
        metrics_registry(&leader_status, cloud.as_ref(), &config.build_info);
    let webhook_metrics = config
        .webhook
        .serving
        .as_ref()
        .map(|_| WebhookMetrics::register(&mut metrics_registry));
    let health = HealthRegistry::default();

    // Serving.
    let serving_stop = CancellationToken::new();
    let _serving_guard = serving_stop.clone().drop_guard();
    if let Some(settings) = &config.serving {
        if settings.profiling {
            profiles::start_heap_sampling().await;
        }
        let state = ServingState {
            health: HealthChecks::new(health.clone(), leader_status.clone()),
            metrics: Arc::new(metrics_registry),
            auth: None,
            configz: config.configz.clone(),
        };
        start_serving(settings, &kube_config, state, serving_stop.clone()).await?;
    }
    if let (Some(settings), Some(metrics)) = (&config.webhook.serving, webhook_metrics) {
        let cluster_name = config.controller_config.cluster_name.clone();
        match LbServiceWebhook::new(cloud.clone(), cluster_name, metrics) {
            Some(webhook) => start_webhooks(settings, webhook, serving_stop.clone()).await?,
            None => tracing::warn!(
                provider = %config.cloud_provider,
                "the lb-service webhook is enabled but the cloud provider has no admission checks; not serving it"
            ),
        }
    } else if !config.webhook.enabled.is_empty() {
        tracing::info!(
            webhooks = ?config.webhook.enabled,
            "webhooks are enabled but not served: the CloudControllerManagerWebhook feature gate is off or \
             --webhook-secure-port is 0"
        );
    }

    // Leader migration: part of the controllers run under a second Lease.
    let (controllers, migration) = match config
        .leader_election
        .as_ref()
        .and_then(|le| le.migration.as_ref().map(|m| (le, m)))
    {
        Some((le, migration)) => {
            let (main, migrated) = controllers.split_for_migration(migration);
            tracing::info!(
                lease = %migration.leader_name,
                main = ?main.names(),
                migrated = ?migrated.names(),
                "leader migration is enabled"
            );
            let election = MigrationElection {
                kube_config: kube_config.clone(),
                config: le.elector_config_for(&migration.leader_name, &identity),
                status: leader_status.sibling(&migration.leader_name),
                controllers: migrated,
            };
            (main, Some(election))
        }
        None => (controllers, None),
    };
    let leadership = Leadership {
        context: ControllerContext {
            client: client.clone(),
            event_client,
            cloud: cloud.clone(),
            config: controller_config,
            metrics: controller_metrics,
            health,
            identity: identity.clone(),
        },
        client,
        cloud,
        controllers,
        service_accounts,
        migration,
    };
    match &config.leader_election {
        None => run_without_election(leadership, shutdown).await,
        Some(le) => {
            let elector = ElectorSettings {
                kube_config,
                config: le.elector_config(&identity),
                status: leader_status,
            };
            run_elected(elector, leadership, shutdown).await
        }
    }
}

/// The process' metrics: the build, the process itself, leader election, the API clients, the
/// controllers (whose handle is returned) and the provider.
fn metrics_registry(
    leader_status: &LeaderStatus,
    cloud: &dyn CloudProvider,
    build_info: &BuildInfo,
) -> (prometheus_client::registry::Registry, ControllerMetrics) {
    let mut metrics_registry = prometheus_client::registry::Registry::default();
    build_info.register(&mut metrics_registry);
    metrics_registry.register_collector(Box::new(ProcessCollector));
    leader_status.register_metrics(&mut metrics_registry);
    RestClientMetrics::global().register(&mut metrics_registry);
    let controller_metrics = ControllerMetrics::register(&mut metrics_registry);
    cloud.register_metrics(&mut metrics_registry);
    (metrics_registry, controller_metrics)
}

/// `--leader-elect=false`: leads at once, until `shutdown`. The controllers stopping without being asked
/// to is an error; one failing while they stop is not.
async fn run_without_election(
    leadership: Leadership,
    shutdown: CancellationToken,
) -> Result<(), AppError> {
    tracing::info!("leader election is disabled; starting at once");
    let result = leadership.lead(shutdown.clone()).await;
    match result {
        Err(err) if shutdown.is_cancelled() => {
            tracing::warn!(error = %err, "a controller failed while stopping");
            Ok(())
        }
        Ok(()) if !shutdown.is_cancelled() => Err(stopped_unasked()),
        other => other,
    }
}

/// What a candidate for the Lease is made of.
struct ElectorSettings {
    /// The daemon's client configuration (the elector gets a client and budget of its own).
    kube_config: kube::Config,
    /// Where and how to elect.
    config: LeaderElectionConfig,
    /// Reports leadership to the health check and the metrics.
    status: LeaderStatus,
}

/// Acquires the Lease, then leads while renewing it until `shutdown` (the controllers get
/// [`CONTROLLER_STOP_TIMEOUT`] to stop, then the Lease is released) or until the Lease is lost (an error
/// at once).
async fn run_elected(
    settings: ElectorSettings,
    leadership: Leadership,
    shutdown: CancellationToken,
) -> Result<(), AppError> {
    let leader_client = build_client(
        settings.kube_config,
        LEADER_ELECTION_LIMITS,
        identity::LEADER_ELECTION_CLIENT,
    )?;
    let mut elector = LeaderElector::new(leader_client, settings.config, settings.status);
    if !elector.acquire(&shutdown).await {
        tracing::info!("stopped before becoming the leader");
        return Ok(());
    }
    let renew_stop = CancellationToken::new();
    let mut renew = {
        let renew_stop = renew_stop.clone();
        tokio::spawn(async move {
            let outcome = elector.renew_until_lost(&renew_stop).await;
            (elector, outcome)
        })
    };
    let controllers_stop = CancellationToken::new();
    let leading = leadership.lead(controllers_stop.clone());
    tokio::pin!(leading);

    let result = tokio::select! {
        renewed = &mut renew => return Err(lost(renewed)),
        result = &mut leading => result.and(Err(stopped_unasked())),
        _ = shutdown.cancelled() => {
            controllers_stop.cancel();
            tokio::select! {
                renewed = &mut renew => return Err(lost(renewed)),
                stopped = tokio::time::timeout(CONTROLLER_STOP_TIMEOUT, &mut leading) => {
                    stopped_on_shutdown(stopped)
                }
            }
        }
    };
    controllers_stop.cancel();
    renew_stop.cancel();
    release(renew).await?;
    result
}

/// The controllers stopped although nobody asked them to.
fn stopped_unasked() -> AppError {
    AppError::Controllers("the controllers stopped without being asked to".to_string())
}

/// How the controllers stopped after a shutdown signal, within [`CONTROLLER_STOP_TIMEOUT`] or not: the
/// shutdown is clean either way (a controller failing while it stops does not make it unclean).
fn stopped_on_shutdown(
    stopped: Result<Result<(), AppError>, tokio::time::error::Elapsed>,
) -> Result<(), AppError> {
    match stopped {
        Ok(Ok(())) => {}
        Ok(Err(err)) => {
            tracing::warn!(error = %err, "a controller failed while stopping");
        }
        Err(_) => {
            tracing::warn!(
                timeout = ?CONTROLLER_STOP_TIMEOUT,
                "the controllers did not stop in time; releasing the lease anyway"
            );
        }
    }
    Ok(())
}

/// Waits for the stopped renew loop and releases the Lease, so that a standby takes over at once; a
/// Lease lost meanwhile is an error.
async fn release(
    renew: tokio::task::JoinHandle<(LeaderElector, RenewOutcome)>,
) -> Result<(), AppError> {
    let (mut elector, outcome) = match renew.await {
        Ok(done) => done,
        Err(err) => return Err(AppError::LeaseLost(format!("the renew task failed: {err}"))),
    };
    if let RenewOutcome::Lost(reason) = outcome {
        return Err(AppError::LeaseLost(reason));
    }
    if let Err(err) = elector.release().await {
        tracing::warn!(error = %err, "could not release the leader lease");
    }
    Ok(())
}

fn lost(renewed: Result<(LeaderElector, RenewOutcome), tokio::task::JoinError>) -> AppError {
    match renewed {
        Ok((_, RenewOutcome::Lost(reason))) => AppError::LeaseLost(reason),
        Ok((_, RenewOutcome::Stopped)) => AppError::LeaseLost("the renew loop stopped".to_string()),
        Err(err) => AppError::LeaseLost(format!("the renew task failed: {err}")),
    }
}

/// The controllers' API clients, all over one connection pool ([`SharedConnections`]): the shared watches'
/// client (`shared-informers`), one client per controller sharing the controllers' token bucket, and one
/// event client per controller sharing the events' bucket, each named like upstream's client of that
/// controller. Returns the shared client, the fallback event client and `base` with the per-controller
/// clients added.
fn controller_clients(
    kube_config: &kube::Config,
    limits: RateLimits,
    base: &ControllerConfig,
) -> Result<(kube::Client, kube::Client, Arc<ControllerConfig>), AppError> {
    let mut connections = SharedConnections::new(kube_config)?;
    if let Some(log) = &base.dry_run {
        connections = connections.with_dry_run(log.clone());
    }
    let controllers = RateLimitLayer::new(limits).for_server(&kube_config.cluster_url);
    let events = RateLimitLayer::new(events_limits(limits)).for_server(&kube_config.cluster_url);
    let shared = connections.client(&controllers, identity::SHARED_INFORMERS_CLIENT);
    let event_client = connections.client(&events, identity::DAEMON_CLIENT);
    let mut config = base.clone();
    for controller in ControllerName::all() {
        let name = controller.client_name();
        config
            .controller_clients
            .insert(controller, connections.client(&controllers, name));
        config
            .event_clients
            .insert(controller, connections.client(&events, name));
    }
    Ok((shared, event_client, Arc::new(config)))
}

/// What the leader works with.
struct Leadership {
    /// The shared watches' client, also used to wait for the API server and for token requests.
    client: kube::Client,
    /// The provider, initialized once leadership is won.
    cloud: Arc<dyn CloudProvider>,
    /// What the controllers get.
    context: ControllerContext,
    /// The controllers to run.
    controllers: ControllerSet,
    /// `--use-service-account-credentials`: what the controllers' own clients are made from.
    service_accounts: Option<ServiceAccountSettings>,
    /// Leader migration: the controllers that run under the migration Lease.
    migration: Option<MigrationElection>,
}

/// The migration Lease of leader migration and the controllers that run while it is held.
struct MigrationElection {
    /// The daemon's client configuration (the elector gets a client and budget of its own).
    kube_config: kube::Config,
    /// The migration Lease, with the main election's namespace and timings.
    config: LeaderElectionConfig,
    /// Reports this Lease in `leader_election_master_status`.
    status: LeaderStatus,
    /// The controllers it runs.
    controllers: ControllerSet,
}

impl MigrationElection {
    /// Acquires the migration Lease (once the main one is held, as upstream), then runs its controllers
    /// until `stop` (the Lease is then released) or until the Lease is lost (an error at once).
    async fn run(
        self,
        context: ControllerContext,
        stop: CancellationToken,
    ) -> Result<(), AppError> {
        let client = build_client(
            self.kube_config,
            LEADER_ELECTION_LIMITS,
            identity::LEADER_ELECTION_CLIENT,
        )?;
        let mut elector = LeaderElector::new(client, self.config, self.status);
        if !elector.acquire(&stop).await {
            return Ok(());
        }
        tracing::info!(controllers = ?self.controllers.names(), "leader migration: starting migrated controllers");
        let renew_stop = CancellationToken::new();
        let mut renew = {
            let renew_stop = renew_stop.clone();
            tokio::spawn(async move {
                let outcome = elector.renew_until_lost(&renew_stop).await;
                (elector, outcome)
            })
        };
        let running = run_with_provider_controllers(
            context,
            &self.controllers.standard,
            self.controllers.provider,
            stop,
        );
        tokio::pin!(running);
        tokio::select! {
            renewed = &mut renew => Err(migration_lost(lost(renewed))),
            result = &mut running => {
                renew_stop.cancel();
                release(renew).await.map_err(migration_lost)?;
                result.map_err(|err| AppError::Controllers(err.to_string()))
            }
        }
    }
}

/// A lost migration Lease, named as such.
fn migration_lost(err: AppError) -> AppError {
    match err {
        AppError::LeaseLost(reason) => AppError::LeaseLost(format!("migration lease: {reason}")),
        other => other,
    }
}

impl Leadership {
    /// What the leader does: wait for the API server, initialize the cloud, give the controllers their
    /// own credentials with `--use-service-account-credentials`, run the controllers until `stop`.
    async fn lead(self, stop: CancellationToken) -> Result<(), AppError> {
        let Leadership {
            client,
            cloud,
            mut context,
            controllers,
            service_accounts,
            migration,
        } = self;
        tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            reachable = wait_for_api_server(&client, API_SERVER_WAIT) => reachable?,
        }
        tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            initialized = cloud.initialize(client.clone()) => initialized.map_err(AppError::CloudInit)?,
        }
        // Kept until the controllers stop: dropping it stops the token refreshers.
        let mut credentials = None;
        if let Some(settings) = service_accounts {
            // Token requests are made with the daemon's own client; the controllers' clients only carry
            // the tokens.
            let issuer = Arc::new(TokenRequestIssuer::new(
                client.clone(),
                NAMESPACE,
                TOKEN_LIFETIME,
            ));
            let started = tokio::select! {
                _ = stop.cancelled() => return Ok(()),
                started = ControllerCredentials::start(issuer, &settings.base, &controllers.standard, settings.limits) => {
                    started.map_err(AppError::ServiceAccountCredentials)?
                }
            };
            let mut config = (*context.config).clone();
            config.controller_clients = started.clients().clone();
            context.config = Arc::new(config);
            credentials = Some(started);
        }
        let names = controllers.names();
        tracing::info!(controllers = ?names, "starting controllers");
        if names.is_empty() {
            tracing::warn!("no controller is enabled; waiting for shutdown");
        }
        let main = run_with_provider_controllers(
            context.clone(),
            &controllers.standard,
            controllers.provider,
            stop.clone(),
        );
        let result = match migration {
            None => main
                .await
                .map_err(|err| AppError::Controllers(err.to_string())),
            Some(migration) => {
                let migrated = migration.run(context, stop);
                tokio::pin!(main, migrated);
                // A lost migration Lease ends everything at once; otherwise both parts stop with `stop`.
                tokio::select! {
                    result = &mut migrated => match result {
                        Err(err) => Err(err),
                        Ok(()) => main.await.map_err(|err| AppError::Controllers(err.to_string())),
                    },
                    result = &mut main => {
                        let main = result.map_err(|err| AppError::Controllers(err.to_string()));
                        migrated.await.and(main)
                    }
                }
            }
        };
        if let Some(credentials) = credentials {
            credentials.stop().await;
        }
        result
    }
}

/// Polls `/version` until the API server answers, for at most `wait`.
async fn wait_for_api_server(client: &kube::Client, wait: Duration) -> Result<(), AppError> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match client.apiserver_version().await {
            Ok(version) => {
                tracing::info!(version = %version.git_version, "the API server is reachable");
                return Ok(());
            }
            Err(err) if tokio::time::Instant::now() >= deadline => {
                return Err(AppError::ApiServerUnreachable(wait, err.to_string()));
            }
            Err(err) => {
                tracing::info!(error = %err, "waiting for the API server");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// Builds TLS and delegated auth, binds and spawns the endpoint.
async fn start_serving(
    settings: &ServingSettings,
    kube_config: &kube::Config,
    mut state: ServingState,
    stop: CancellationToken,
) -> Result<(), AppError> {
    let authn = &settings.authentication;
    let authn_config = match &authn.kubeconfig {
        Some(path) => load_config(Some(path), None).await?,
        None => kube_config.clone(),
    };
    let authz_config = match &settings.authorization.kubeconfig {
        Some(path) => load_config(Some(path), None).await?,
        None => kube_config.clone(),
    };
    let authn_client = build_client(authn_config, AUTH_LIMITS, identity::DAEMON_CLIENT)?;
    let authz_client = build_client(authz_config, AUTH_LIMITS, identity::DAEMON_CLIENT)?;
    let cluster = cluster_authentication(authn, authn_client.clone()).await?;
    let (material, request_header) = tls_material(settings, cluster)?;
    let tls = ServerTls::new(material)?;
    let authz = &settings.authorization;
    state.auth = Some(DelegatedAuth {
        authenticator: Arc::new(TokenAuthenticator::new(authn_client, authn.token_cache_ttl)),
        authorizer: Arc::new(Authorizer::new(
            authz_client,
            authz.allowed_ttl,
            authz.denied_ttl,
        )),
        always_allow_paths: authz.always_allow_paths.clone(),
        request_header,
    });
    let listener = serving::bind(
        settings.address,
        settings.reuse_port,
        settings.reuse_address,
    )
    .await?;
    let address = listener.local_addr().unwrap_or(settings.address);
    tracing::info!(%address, profiling = settings.profiling, "serving /healthz, /livez, /readyz, /metrics and /configz over HTTPS");
    serving::spawn(
        listener,
        Arc::new(tls),
        settings.max_concurrent_streams,
        serving::router(Arc::new(state), settings.profiling),
        stop,
    )?;
    Ok(())
}

/// Binds and spawns the webhook endpoint.
async fn start_webhooks(
    settings: &WebhookServing,
    webhook: LbServiceWebhook,
    stop: CancellationToken,
) -> Result<(), AppError> {
    let cert = cert_source(
        &settings.cert,
        "cloud-controller-manager-webhook",
        settings.address.ip(),
    )?;
    let tls = ServerTls::new(TlsMaterial {
        cert,
        settings: settings.tls.clone(),
        client_cas: Vec::new(),
        proxy_cas: Vec::new(),
        uid_from_certificates: false,
    })?;
    let listener = serving::bind(settings.address, false, false).await?;
    let address = listener.local_addr().unwrap_or(settings.address);
    tracing::info!(%address, path = LB_SERVICE_PATH, "serving the lb-service admission webhook over HTTPS");
    serving::spawn(
        listener,
        Arc::new(tls),
        0,
        crate::webhook::router(Arc::new(webhook)),
        stop,
    )?;
    Ok(())
}

/// Where an endpoint's certificate comes from: the flags' files, the pair `pair_name` in the certificate
/// directory (generated there when missing), or a self-signed one made in memory.
fn cert_source(choice: &CertChoice, pair_name: &str, bind: IpAddr) -> Result<CertSource, AppError> {
    Ok(match choice {
        CertChoice::Files { cert, key } => CertSource::Files {
            cert: cert.clone(),
            key: key.clone(),
        },
        CertChoice::Dir(dir) => {
            let (cert, key) = tls::cert_dir_files(dir, pair_name, bind)?;
            CertSource::Files { cert, key }
        }
        CertChoice::InMemory => {
            tracing::info!(
                pair_name,
                "generated a self-signed serving certificate in memory"
            );
            CertSource::InMemory(tls::self_signed(bind)?)
        }
    })
}

/// The cluster's `extension-apiserver-authentication` settings, unless `--authentication-skip-lookup`; a
/// failed lookup stops the start-up unless `--authentication-tolerate-lookup-failure`.
async fn cluster_authentication(
    authn: &AuthenticationSettings,
    client: kube::Client,
) -> Result<Option<ClusterAuthentication>, AppError> {
    if !authn.lookup {
        return Ok(None);
    }
    match lookup_cluster_authentication(client).await {
        Ok(found) => Ok(found),
        Err(err) if authn.tolerate_lookup_failure => {
            tracing::warn!(
                error = %err,
                "cannot look up the cluster's authentication configuration; continuing without it \
                 (bearer tokens only), as --authentication-tolerate-lookup-failure asks"
            );
            Ok(None)
        }
        Err(err) => Err(AppError::AuthenticationLookup(err)),
    }
}

/// The endpoint's TLS material and request-header settings: the certificate the flags choose, the client
/// CA and request-header CA of the flags or else of the cluster.
fn tls_material(
    settings: &ServingSettings,
    cluster: Option<ClusterAuthentication>,
) -> Result<
    (
        TlsMaterial,
        Option<crate::serving::auth::RequestHeaderConfig>,
    ),
    AppError,
> {
    let authn = &settings.authentication;
    let cert = cert_source(
        &settings.cert,
        "cloud-controller-manager",
        settings.address.ip(),
    )?;
    let cluster = cluster.unwrap_or_default();
    let client_cas = match (&authn.client_ca_file, cluster.client_ca) {
        (Some(file), _) => vec![CaSource::File(file.clone())],
        (None, Some(pem)) => vec![CaSource::Pem(pem)],
        (None, None) => Vec::new(),
    };
    let (proxy_cas, request_header) = match (&authn.request_header, cluster.request_header_ca) {
        (Some((file, config)), _) => (vec![CaSource::File(file.clone())], Some(config.clone())),
        (None, Some(pem)) => {
            let mut config = cluster.request_header;
            if !authn.request_header_uid {
                config.uid_headers.clear();
            }
            (vec![CaSource::Pem(pem)], Some(config))
        }
        (None, None) => (Vec::new(), None),
    };
    if !client_cas.is_empty() {
        tracing::info!("client certificates signed by the client CA are accepted");
    }
    if request_header.is_some() {
        tracing::info!(
            "proxies with certificates of the request-header CA may name callers in headers"
        );
    }
    Ok((
        TlsMaterial {
            cert,
            settings: settings.tls.clone(),
            client_cas,
            proxy_cas,
            uid_from_certificates: authn.uid_from_certificates,
        },
        request_header,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::Options;
    use clap::Parser;

    fn config(args: &[&str]) -> AppConfig {
        let mut all = vec!["ccm", "--cloud-provider=fake"];
        all.extend_from_slice(args);
        crate::validate(
            &Options::try_parse_from(all).unwrap(),
            &["fake".to_string()],
        )
        .unwrap()
    }

    #[test]
    fn routes_follow_configure_cloud_routes_alone() {
        let on = |args: &[&str]| controllers_to_start(&config(args), &[]).unwrap().standard;
        assert!(on(&[]).contains(&ControllerName::NodeRoute));
        assert!(on(&[]).contains(&ControllerName::CloudNode));
        assert!(on(&["--allocate-node-cidrs=false"]).contains(&ControllerName::NodeRoute));
        assert!(
            !on(&["--allocate-node-cidrs", "--configure-cloud-routes=false"])
                .contains(&ControllerName::NodeRoute)
        );
        let err = controllers_to_start(&config(&["--controllers=*,firewall"]), &[]).unwrap_err();
        assert!(
            err.to_string().contains("unknown controller \"firewall\""),
            "{err}"
        );
    }

    #[test]
    fn identity_is_host_and_uuid() {
        let id = identity();
        let (host, uuid) = id.rsplit_once('_').unwrap();
        assert!(!host.is_empty());
        assert!(uuid::Uuid::parse_str(uuid).is_ok());
        assert_ne!(identity(), id);
    }
}
