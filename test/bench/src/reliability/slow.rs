//! The API server answering slowly: every request of the daemon reaches it 2 s late for a minute while
//! the Nodes and Services of the restart cases are created (far more work than a slow minute allows). The daemon's health must stay green throughout, its queues must drain
//! once the API server is fast again, and the cloud must hold no duplicate.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Service};
use kube::Api;

use super::bed::{Bed, initialized_nodes};
use super::control::ProxyMode;
use super::{CaseReport, Sizes, seconds};
use crate::chaos::checks::Expected;
use crate::fake_admin::free_port;
use crate::scale::{health_client, healthy};
use crate::scenario::{create_objects, wait_for_informers};
use crate::workload::{load_balancer_service, tainted_node};

/// The delay of every request.
const LATENCY: Duration = Duration::from_secs(2);
/// How long the API server is slow.
const SLOW_FOR: Duration = Duration::from_secs(60);
/// How often health is read.
const HEALTH_POLL: Duration = Duration::from_secs(1);

/// Runs the case on `bed`.
pub async fn run(bed: &Bed, sizes: Sizes, report: &mut CaseReport) -> anyhow::Result<()> {
    let (_, kubeconfig) = bed.via_proxy("daemon").await?;
    let port = free_port()?;
    let mut running = bed.spawn("daemon", &kubeconfig, &bed.cloud()?, port, &[])?;
    wait_for_informers(&mut running.daemon, &bed.cluster, &["nodes", "services"]).await?;
    let health = health_client(port)?;
    let (nodes, services) = (sizes.nodes, sizes.services);

    bed.control
        .set_proxy("daemon", ProxyMode::Pass, LATENCY)
        .await?;
    let slow_since = Instant::now();
    let client = bed.cluster.client();
    create_objects(
        &Api::<Node>::all(client.clone()),
        0..nodes,
        tainted_node,
        0.0,
        32,
    )
    .await?;
    create_objects(
        &Api::<Service>::namespaced(client, "default"),
        0..services,
        load_balancer_service,
        0.0,
        8,
    )
    .await?;
    let (mut checks, mut unhealthy) = (0, 0);
    while slow_since.elapsed() < SLOW_FOR {
        running.daemon.check_running()?;
        checks += 1;
        if !healthy(&health).await {
            unhealthy += 1;
        }
        tokio::time::sleep(HEALTH_POLL).await;
    }
    let initialized_while_slow = initialized_nodes(&bed.cluster.client()).await.unwrap_or(0);
    bed.control
        .set_proxy("daemon", ProxyMode::Pass, Duration::ZERO)
        .await?;
    let fast_again = Instant::now();
    report.figure(
        "health checks while slow",
        format!("{checks}, {unhealthy} failed"),
    );
    if unhealthy > 0 {
        report.fail(format!(
            "/healthz failed {unhealthy} of {checks} times while the API server was slow"
        ));
    }
    let expected = Expected {
        nodes,
        services,
        ..Expected::default()
    };
    let converged = bed
        .converge(&expected, &mut running, true, sizes.timeout)
        .await?;
    report.figure(
        "queues drained (end state) after the API server was fast again",
        seconds(converged - fast_again),
    );
    report.figure(
        "initialized while slow",
        format!("{initialized_while_slow} of {nodes} nodes"),
    );
    bed.check_initialized_once(nodes, &mut report.failures)?;
    if !healthy(&health).await {
        report.fail("/healthz fails after the end state was reached".to_string());
    }
    Ok(())
}
