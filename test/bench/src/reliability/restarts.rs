//! kube-apiserver restarted while the daemon initializes Nodes and syncs load balancers: with a healthy
//! cloud (twice), and with a cloud that answers slowly and fails 30% of its calls (once). The end state must
//! be exact (every Node initialized once, one load balancer per Service), the events bounded, and the
//! daemon must write again soon after the API server is back.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Service};
use kube::Api;
use provider_fake::FaultSpec;

use super::bed::{Bed, initialized_nodes};
use super::{CaseReport, Sizes, seconds};
use crate::chaos::checks::Expected;
use crate::chaos::faults::cloud_faults;
use crate::scenario::{create_objects, wait_for_informers};
use crate::workload::{load_balancer_service, tainted_node};

/// How often the initialization progress is read before a restart.
const PROGRESS_POLL: Duration = Duration::from_millis(250);
/// The slow, failing cloud: this share of the calls fail, each call takes this long.
const CLOUD_ERROR_PERCENT: u32 = 30;
const CLOUD_LATENCY_MS: u64 = 200;
/// How long the cloud faults go on after the restarted API server is ready.
const CLOUD_FAULTS_AFTER_RESTART: Duration = Duration::from_secs(15);
/// Leader election that outlasts the restarts. With the defaults (10 s to renew) a restart that takes
/// longer on a loaded machine (8 s, plus the moments its authorizer still refuses everything) ends in
/// the lost lease and the exit that upstream's CCM makes too; the `leader-*` cases test that path. These
/// cases test what the controllers do across a restart, so the daemon keeps its lease through it.
const LEADER_ELECTION_FLAGS: &[&str] = &[
    "--leader-elect-lease-duration=90s",
    "--leader-elect-renew-deadline=60s",
];

/// One restart case.
pub struct RestartCase {
    /// The shares of the Nodes initialized (percent) at which kube-apiserver is restarted.
    pub restart_at_percent: &'static [usize],
    /// Whether the cloud is slow and failing until shortly after the last restart.
    pub failing_cloud: bool,
}

/// Runs the case on `bed`.
pub async fn run(
    bed: &Bed,
    sizes: Sizes,
    case: &RestartCase,
    report: &mut CaseReport,
) -> anyhow::Result<()> {
    let mut cloud = bed.cloud()?;
    if case.failing_cloud {
        cloud.faults = cloud_faults(CLOUD_ERROR_PERCENT, CLOUD_LATENCY_MS);
    }
    let mut running = bed.spawn(
        "daemon",
        bed.cluster.daemon_kubeconfig(),
        &cloud,
        0,
        LEADER_ELECTION_FLAGS,
    )?;
    wait_for_informers(&mut running.daemon, &bed.cluster, &["nodes", "services"]).await?;
    let client = bed.cluster.client();
    let start = Instant::now();
    let (node_api, service_api) = (
        Api::<Node>::all(client.clone()),
        Api::<Service>::namespaced(client.clone(), "default"),
    );
    let (nodes, services) = tokio::join!(
        create_objects(&node_api, 0..sizes.nodes, tainted_node, 0.0, 64),
        create_objects(
            &service_api,
            0..sizes.services,
            load_balancer_service,
            0.0,
            16
        ),
    );
    nodes?;
    services?;
    report.figure("workload created", seconds(start.elapsed()));

    let mut restarts = Vec::new();
    for percent in case.restart_at_percent {
        let threshold = sizes.nodes * percent / 100;
        let deadline = Instant::now() + sizes.timeout;
        loop {
            running.daemon.check_running()?;
            if initialized_nodes(&client).await.unwrap_or(0) >= threshold {
                break;
            }
            if Instant::now() >= deadline {
                anyhow::bail!(
                    "{percent}% of the nodes were not initialized within {:?}",
                    sizes.timeout
                );
            }
            tokio::time::sleep(PROGRESS_POLL).await;
        }
        let restart = bed.control.restart("kube-apiserver").await?;
        eprintln!("[reliability] kube-apiserver restarted at {percent}% of the nodes initialized");
        restarts.push((*percent, restart));
    }
    if case.failing_cloud {
        tokio::time::sleep(CLOUD_FAULTS_AFTER_RESTART).await;
        running.admin.clear_faults().await?;
        running
            .admin
            .set_fault("*", &FaultSpec::latency(bed.cloud_latency()))
            .await?;
    }
    let expected = Expected {
        nodes: sizes.nodes,
        services: sizes.services,
        ..Expected::default()
    };
    let converged = bed
        .converge(&expected, &mut running, true, sizes.timeout)
        .await?;
    report.figure("end state reached", seconds(converged - start));

    let requests = bed.audit.requests()?;
    for (percent, restart) in &restarts {
        let down = restart
            .ready
            .duration_since(restart.stopping)
            .unwrap_or_default();
        match crate::audit::first_daemon_write(&requests, restart.ready) {
            Some(write) => report.figure(
                &format!("restart at {percent}%: API server down, then first write"),
                format!(
                    "{} down; first successful write {} after ready",
                    seconds(down),
                    seconds(write.duration_since(restart.ready).unwrap_or_default())
                ),
            ),
            None => report.fail(format!(
                "no successful write of the daemon after the restart at {percent}%"
            )),
        }
    }
    bed.check_initialized_once(sizes.nodes, &mut report.failures)?;
    let most = bed.check_events(&mut report.failures).await?;
    report.figure("most event occurrences of one object", most.to_string());
    running.daemon.check_running()?;
    Ok(())
}
