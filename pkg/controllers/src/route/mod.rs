//! node-route-controller: cloud routes for the pod CIDRs of the nodes.
//!
//! Every `--route-reconciliation-period`, and shortly after a node's pod CIDRs or addresses change (bursts
//! of changes coalesce into one pass), the controller lists the cloud's routes and plans one
//! reconciliation (see [`plan::plan`]): a route per pod CIDR of every node (kept, updated when its target
//! addresses changed, or added), and deletion of the routes inside the cluster CIDRs that are blackholes,
//! target unknown nodes or carry a CIDR the node no longer has. At most [`MAX_CONCURRENT_ROUTE_OPS`] cloud
//! route operations run at once. Afterwards the `NetworkUnavailable` condition of each node with pod CIDRs says whether all of
//! its routes exist (`RouteCreated` / `NoRouteCreated`); a failed creation is a `FailedToCreateRoute`
//! Warning on the node.
//!
//! Unlike upstream, an empty node list never deletes routes: it is far more likely a transient view than a
//! cluster without nodes, and deleting every route would cut the pod network.

pub mod plan;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use cloud_provider::{CloudProvider, ObjectKey, Route, Routes, for_object};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch};
use kube::runtime::reflector::Store;
use parking_lot::Mutex;
use serde_json::json;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use crate::cached_node::CONDITION_NETWORK_UNAVAILABLE;
use crate::cached_node::CachedNode;
use crate::config::{ClusterCidrs, Period};
use crate::context::ControllerContext;
use crate::error::ControllersError;
use crate::events::{EventRecorder, EventType};
use crate::identity;
use crate::informers::{InformerEvent, InformerEvents, SharedInformers};
use crate::metrics::ControllerMetrics;
use crate::names::ControllerName;
use crate::panics::PanicGuard;

use plan::{NodeRouting, RouteCreation, RouteOp, all_routes_created, require_cluster_cidrs};

/// Most cloud route operations in flight at once.
pub const MAX_CONCURRENT_ROUTE_OPS: usize = 200;
/// Node condition patches in flight at once.
const MAX_CONCURRENT_CONDITION_PATCHES: usize = 32;
/// How long a stopping controller waits for its events to be written.
const EVENT_FLUSH_TIMEOUT: Duration = Duration::from_secs(2);
/// Quiet time after a node change before reconciling, so that bursts of changes coalesce.
pub const NODE_CHANGE_DEBOUNCE: Duration = Duration::from_millis(100);

/// Condition reason when every route of the node exists.
pub const REASON_ROUTE_CREATED: &str = "RouteCreated";
/// Condition reason when a route of the node is missing.
pub const REASON_NO_ROUTE_CREATED: &str = "NoRouteCreated";
/// Reason of the Warning emitted on a node whose route could not be created.
pub const REASON_FAILED_TO_CREATE_ROUTE: &str = "FailedToCreateRoute";

/// The node-route-controller. Build it with [`NodeRouteController::new`] before the informers start, then
/// [`NodeRouteController::run`] it.
pub struct NodeRouteController {
    ctx: ControllerContext,
    client: kube::Client,
    cloud: Arc<dyn CloudProvider>,
    cluster_name: String,
    cluster_cidrs: ClusterCidrs,
    period: Period,
    recorder: EventRecorder,
    metrics: ControllerMetrics,
    panics: PanicGuard,
    nodes: Store<CachedNode>,
    informers: SharedInformers,
    node_events: InformerEvents<CachedNode>,
}

impl std::fmt::Debug for NodeRouteController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeRouteController")
            .field("cluster_name", &self.cluster_name)
            .field("cluster_cidrs", &self.cluster_cidrs)
            .field("period", &self.period)
            .finish_non_exhaustive()
    }
}

/// Counts of one reconciliation, for the logs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct ReconcileSummary {
    /// Routes created (including the second half of updates).
    created: usize,
    /// Route creations that failed.
    create_failed: usize,
    /// Routes deleted (including the first half of updates).
    deleted: usize,
    /// Route deletions that failed.
    delete_failed: usize,
    /// Deletions skipped because the node list was empty.
    suppressed_deletions: usize,
    /// Node conditions written.
    conditions_patched: usize,
    /// Nodes a route creation of which a dry run did not make: their condition depends on its outcome.
    refused: HashSet<String>,
}

impl NodeRouteController {
    /// Creates the controller and subscribes it to the shared node informer.
    pub fn new(ctx: &ControllerContext, informers: &SharedInformers) -> Self {
        let ctx = &ctx.for_controller(ControllerName::NodeRoute);
        NodeRouteController {
            ctx: ctx.clone(),
            client: ctx.client_for(ControllerName::NodeRoute),
            cloud: ctx.cloud.clone(),
            cluster_name: ctx.config.cluster_name.clone(),
            cluster_cidrs: ctx.config.cluster_cidrs.clone(),
            period: ctx.config.route_reconciliation_period,
            recorder: ctx.recorder(ControllerName::NodeRoute),
            metrics: ctx.metrics.clone(),
            panics: PanicGuard::new(ctx, ControllerName::NodeRoute),
            nodes: informers.nodes(),
            informers: informers.clone(),
            node_events: informers.node_events(),
        }
    }

    /// Runs the controller until `shutdown` is cancelled. Fails at once when there is no cluster CIDR or
    /// the provider has no route support.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), ControllersError> {
        require_cluster_cidrs(&self.cluster_cidrs)
            .map_err(|e| ControllersError::Config(e.to_string()))?;
        if self.cloud.routes().is_none() {
            return Err(ControllersError::Config(format!(
                "cloud provider {:?} does not support routes",
                self.cloud.provider_name()
            )));
        }
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            result = self.informers.wait_nodes_synced() => result?,
        }
        let NodeRouteController {
            ctx,
            client,
            cloud,
            cluster_name,
            cluster_cidrs,
            period,
            recorder,
            metrics,
            panics,
            nodes,
            informers: _,
            node_events,
        } = self;
        let reconciler = Reconciler {
            ctx,
            client,
            cloud,
            cluster_name,
            cluster_cidrs,
            recorder,
            metrics,
            nodes,
        };
        if reconciler.ctx.is_single_pass() {
            reconciler.reconcile_once(&panics).await;
            reconciler.recorder.flush(EVENT_FLUSH_TIMEOUT).await;
            return Ok(());
        }
        let changed = Arc::new(Notify::new());
        let watcher = tokio::spawn(watch_nodes(
            reconciler.nodes.clone(),
            node_events,
            changed.clone(),
            shutdown.clone(),
        ));
        let mut ticker = tokio::time::interval(period.get());
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = ticker.tick() => {}
                _ = changed.notified() => {
                    tokio::select! {
                        _ = shutdown.cancelled() => break,
                        _ = tokio::time::sleep(NODE_CHANGE_DEBOUNCE) => {}
                    }
                }
            }
            reconciler.reconcile_once(&panics).await;
        }
        watcher.abort();
        reconciler.recorder.flush(EVENT_FLUSH_TIMEOUT).await;
        Ok(())
    }
}

/// How a dry run reports `route`.
fn route_key(route: &Route) -> ObjectKey {
    ObjectKey::route(&route.target_node, &route.destination_cidr)
}

/// What of a Node matters to its routes.
#[derive(Debug, Clone, PartialEq)]
struct NodeRouteView {
    pod_cidrs: Vec<String>,
    addresses: Arc<[NodeAddress]>,
}

impl NodeRouteView {
    fn of(node: &CachedNode) -> Self {
        NodeRouteView {
            pod_cidrs: node.pod_cidrs.to_vec(),
            addresses: node.addresses.clone(),
        }
    }
}

/// Signals `changed` whenever a node appears, disappears, or changes pod CIDRs or addresses. Status
/// heartbeats and condition writes (including this controller's own) do not trigger a reconciliation.
async fn watch_nodes(
    store: Store<CachedNode>,
    mut events: InformerEvents<CachedNode>,
    changed: Arc<Notify>,
    shutdown: CancellationToken,
) {
    let mut seen: HashMap<String, NodeRouteView> = HashMap::new();
    loop {
        let event = tokio::select! {
            _ = shutdown.cancelled() => return,
            event = events.recv() => event,
        };
        let relevant = match event {
            None => return,
            Some(InformerEvent::Applied(node)) => {
                let view = NodeRouteView::of(&node);
                seen.insert(node.name().to_string(), view.clone()) != Some(view)
            }
            Some(InformerEvent::Deleted(node)) => seen.remove(node.name()).is_some(),
            Some(InformerEvent::Resynced) => {
                let fresh: HashMap<String, NodeRouteView> = store
                    .state()
                    .iter()
                    .map(|n| (n.name().to_string(), NodeRouteView::of(n)))
                    .collect();
                let differs = fresh != seen;
                seen = fresh;
                differs
            }
        };
        if relevant {
            changed.notify_one();
        }
    }
}

/// Why a reconciliation could not run.
#[derive(Debug, thiserror::Error)]
enum ReconcileError {
    #[error("cloud provider does not support routes")]
    NoRoutes,
    #[error("listing routes of cluster {cluster:?} failed: {source}")]
    List {
        cluster: String,
        #[source]
        source: cloud_provider::CloudError,
    },
}

struct Reconciler {
    ctx: ControllerContext,
    client: kube::Client,
    cloud: Arc<dyn CloudProvider>,
    cluster_name: String,
    cluster_cidrs: ClusterCidrs,
    recorder: EventRecorder,
    metrics: ControllerMetrics,
    nodes: Store<CachedNode>,
}

impl Reconciler {
    /// One reconciliation, its outcome logged (and in a dry run, a failure reported).
    async fn reconcile_once(&self, panics: &PanicGuard) {
        let Some(outcome) = panics.run("a route reconciliation", self.reconcile()).await else {
            // Reported by the guard; the next period starts a fresh reconciliation.
            return;
        };
        match outcome {
            Ok(summary) => {
                tracing::debug!(controller = %ControllerName::NodeRoute, ?summary, "routes reconciled")
            }
            Err(error) => {
                tracing::warn!(controller = %ControllerName::NodeRoute, %error, "route reconciliation failed");
                self.ctx
                    .record_failure(ControllerName::NodeRoute, None, &error);
            }
        }
    }

    /// In a dry run, reports that creating or deleting `route` failed.
    fn record_failure(&self, route: &Route, error: &dyn std::fmt::Display) {
        self.ctx
            .record_failure(ControllerName::NodeRoute, Some(route_key(route)), error);
    }

    async fn reconcile(&self) -> Result<ReconcileSummary, ReconcileError> {
        let routes_api = self.cloud.routes().ok_or(ReconcileError::NoRoutes)?;
        let routes = routes_api
            .list_routes(&self.cluster_name)
            .await
            .map_err(|source| ReconcileError::List {
                cluster: self.cluster_name.clone(),
                source,
            })?;
        for route in &routes {
            self.ctx.visit(route_key(route));
        }
        // Read the nodes after listing routes, so a node created meanwhile is not mistaken for missing.
        let nodes = self.nodes.state();
        let facts: Vec<NodeRouting> = nodes.iter().map(|n| NodeRouting::of(n)).collect();
        let plan = plan::plan(&facts, &routes, &self.cluster_cidrs);
        self.metrics.route_sync.inc();
        for name in &plan.unparsable {
            tracing::warn!(route = %name, "ignoring cloud route with an unparsable destination CIDR");
        }
        if plan.suppressed_deletions > 0 {
            tracing::warn!(
                controller = %ControllerName::NodeRoute,
                routes = plan.suppressed_deletions,
                "the node list is empty; not deleting any route"
            );
        }
        let by_name: HashMap<&str, &Arc<CachedNode>> =
            nodes.iter().map(|n| (n.name(), n)).collect();

        let node_cidrs = Mutex::new(plan.node_cidrs.clone());
        let summary = Mutex::new(ReconcileSummary {
            suppressed_deletions: plan.suppressed_deletions,
            ..ReconcileSummary::default()
        });
        // Operations and patches are created lazily, as slots free up: thousands of request futures at once
        // would cost memory for nothing.
        futures::stream::iter(plan.ops)
            .map(|op| self.run_op(routes_api, op, &by_name, &node_cidrs, &summary))
            .buffer_unordered(MAX_CONCURRENT_ROUTE_OPS)
            .for_each(|()| std::future::ready(()))
            .await;

        let node_cidrs = node_cidrs.into_inner();
        // A node without pod CIDRs (not allocated yet, or by another allocator later) is left alone, as
        // upstream does: saying NetworkUnavailable=True would taint it.
        let refused = std::mem::take(&mut summary.lock().refused);
        let with_cidrs: Vec<Arc<CachedNode>> = nodes
            .iter()
            .filter(|n| !n.pod_cidrs.is_empty() && !refused.contains(n.name()))
            .cloned()
            .collect();
        let patched = futures::stream::iter(with_cidrs)
            .map(|node| {
                let created = all_routes_created(node_cidrs.get(node.name()));
                async move { self.update_condition(&node, created).await }
            })
            .buffer_unordered(MAX_CONCURRENT_CONDITION_PATCHES)
            .filter(|patched| std::future::ready(*patched))
            .count()
            .await;
        summary.lock().conditions_patched = patched;
        let summary = summary.into_inner();
        Ok(summary)
    }

    /// Runs one planned cloud operation.
    async fn run_op(
        &self,
        routes: &dyn Routes,
        op: RouteOp,
        by_name: &HashMap<&str, &Arc<CachedNode>>,
        node_cidrs: &Mutex<BTreeMap<String, BTreeMap<String, bool>>>,
        summary: &Mutex<ReconcileSummary>,
    ) {
        match op {
            RouteOp::Create(creation) => {
                let node = by_name.get(creation.node.as_str()).copied();
                if self.create(routes, &creation, node, summary).await {
                    mark_created(node_cidrs, &creation);
                }
            }
            RouteOp::Update { old, new } => {
                if self.delete(routes, &old, summary).await {
                    let node = by_name.get(new.node.as_str()).copied();
                    if self.create(routes, &new, node, summary).await {
                        mark_created(node_cidrs, &new);
                    }
                }
            }
            RouteOp::Delete(route) => {
                self.delete(routes, &route, summary).await;
            }
        }
    }

    /// Creates one route; true on success. A failure is a `FailedToCreateRoute` Warning on the node.
    async fn create(
        &self,
        routes: &dyn Routes,
        creation: &RouteCreation,
        node: Option<&Arc<CachedNode>>,
        summary: &Mutex<ReconcileSummary>,
    ) -> bool {
        let start = Instant::now();
        let cidr = &creation.route.destination_cidr;
        let created = for_object(
            route_key(&creation.route),
            routes.create_route(&self.cluster_name, &creation.name_hint, &creation.route),
        )
        .await;
        match created {
            Ok(()) => {
                summary.lock().created += 1;
                tracing::info!(node = %creation.node, %cidr, hint = %creation.name_hint,
                    elapsed = ?start.elapsed(), "created route");
                true
            }
            Err(error) if error.is_would_change() => {
                summary.lock().refused.insert(creation.node.clone());
                false
            }
            Err(error) => {
                summary.lock().create_failed += 1;
                let message = format!(
                    "Could not create route {} {} for node {} after {:?}: {}",
                    creation.name_hint,
                    cidr,
                    creation.node,
                    start.elapsed(),
                    error
                );
                tracing::warn!("{message}");
                self.record_failure(&creation.route, &message);
                if let Some(node) = node {
                    self.recorder.publish(
                        &node.object_reference(),
                        EventType::Warning,
                        REASON_FAILED_TO_CREATE_ROUTE,
                        "CreateRoute",
                        message,
                    );
                }
                false
            }
        }
    }

    /// Deletes one route; true on success.
    async fn delete(
        &self,
        routes: &dyn Routes,
        route: &Route,
        summary: &Mutex<ReconcileSummary>,
    ) -> bool {
        let start = Instant::now();
        let deleted = for_object(
            route_key(route),
            routes.delete_route(&self.cluster_name, route),
        )
        .await;
        match deleted {
            Ok(()) => {
                summary.lock().deleted += 1;
                tracing::info!(route = %route.name, cidr = %route.destination_cidr,
                    node = %route.target_node, elapsed = ?start.elapsed(), "deleted route");
                true
            }
            Err(error) => {
                summary.lock().delete_failed += 1;
                tracing::warn!(route = %route.name, cidr = %route.destination_cidr,
                    node = %route.target_node, %error, "could not delete route");
                self.record_failure(
                    route,
                    &format!("could not delete route {}: {error}", route.name),
                );
                false
            }
        }
    }

    /// Sets the node's `NetworkUnavailable` condition when it does not already say the right thing; true
    /// when a patch was written.
    async fn update_condition(&self, node: &CachedNode, routes_created: bool) -> bool {
        let name = node.name();
        let wanted = if routes_created { "False" } else { "True" };
        if node.network_unavailable.as_deref() == Some(wanted) {
            return false;
        }
        let condition = network_condition(routes_created, Timestamp::now());
        let patch = json!({ "status": { "conditions": [condition] } });
        let api: Api<Node> = Api::all(self.client.clone());
        match api
            .patch_status(name, &identity::patch_params(), &Patch::Strategic(patch))
            .await
        {
            Ok(_) => {
                tracing::info!(node = %name, network_unavailable = !routes_created,
                    "updated NetworkUnavailable condition");
                true
            }
            Err(error) => {
                tracing::warn!(node = %name, %error, "could not update the NetworkUnavailable condition");
                self.ctx.record_failure(
                    ControllerName::NodeRoute,
                    Some(ObjectKey::node(name)),
                    &format!("could not update the NetworkUnavailable condition: {error}"),
                );
                false
            }
        }
    }
}

fn mark_created(
    node_cidrs: &Mutex<BTreeMap<String, BTreeMap<String, bool>>>,
    creation: &RouteCreation,
) {
    if let Some(cidrs) = node_cidrs.lock().get_mut(&creation.node) {
        cidrs.insert(creation.route.destination_cidr.clone(), true);
    }
}

/// The `NetworkUnavailable` condition this controller writes.
pub fn network_condition(routes_created: bool, now: Timestamp) -> NodeCondition {
    let (status, reason, message) = if routes_created {
        (
            "False",
            REASON_ROUTE_CREATED,
            "RouteController created a route",
        )
    } else {
        (
            "True",
            REASON_NO_ROUTE_CREATED,
            "RouteController failed to create a route",
        )
    };
    NodeCondition {
        type_: CONDITION_NETWORK_UNAVAILABLE.to_string(),
        status: status.to_string(),
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        last_transition_time: Some(Time(now)),
        last_heartbeat_time: Some(Time(now)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_static<T: Send + 'static>(_: &T) {}

    /// Compiles only while `run` can be spawned (run_controllers boxes it as a `Send` future).
    #[allow(dead_code)]
    fn run_future_is_send(controller: NodeRouteController) {
        let future = controller.run(CancellationToken::new());
        assert_send_static(&future);
    }

    #[test]
    fn condition_shapes() {
        let now = Timestamp::UNIX_EPOCH;
        let ok = network_condition(true, now);
        assert_eq!(ok.type_, "NetworkUnavailable");
        assert_eq!(ok.status, "False");
        assert_eq!(ok.reason.as_deref(), Some("RouteCreated"));
        assert_eq!(
            ok.message.as_deref(),
            Some("RouteController created a route")
        );
        let bad = network_condition(false, now);
        assert_eq!(bad.status, "True");
        assert_eq!(bad.reason.as_deref(), Some("NoRouteCreated"));
        assert_eq!(
            bad.message.as_deref(),
            Some("RouteController failed to create a route")
        );
        let value = serde_json::to_value(&bad).unwrap();
        assert_eq!(value["lastTransitionTime"], "1970-01-01T00:00:00Z");
    }

    #[test]
    fn node_views_ignore_heartbeats() {
        let mut node = Node::default();
        node.metadata.name = Some("n".into());
        node.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
            pod_cidrs: Some(vec!["10.244.1.0/24".into()]),
            ..Default::default()
        });
        let view = |node: &Node| NodeRouteView::of(&CachedNode::from(node.clone()));
        let before = view(&node);
        node.status = Some(k8s_openapi::api::core::v1::NodeStatus {
            conditions: Some(vec![network_condition(true, Timestamp::UNIX_EPOCH)]),
            ..Default::default()
        });
        assert_eq!(before, view(&node));
        node.spec.as_mut().unwrap().pod_cidrs = Some(vec!["10.244.2.0/24".into()]);
        assert_ne!(before, view(&node));
    }
}
