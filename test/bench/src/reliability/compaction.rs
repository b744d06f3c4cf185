//! etcd compacted and restarted while the daemon's connection is cut: changes made in the gap (a Node
//! added, a Service added, a Service deleted) must be acted on once the daemon is back, through a relist
//! (kube-apiserver is restarted after the compaction, so its watch cache starts past the daemon's
//! resource versions and resumed watches get `410 Gone`). The daemon runs without leader election here:
//! the gap is longer than the renew deadline.

use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::{Node, Service};
use kube::Api;
use kube::api::{DeleteParams, PostParams};

use super::bed::Bed;
use super::control::ProxyMode;
use super::{CaseReport, Sizes, seconds};
use crate::chaos::checks::Expected;
use crate::scenario::{create_objects, wait_for_informers};
use crate::workload::{load_balancer_service, service_name, tainted_node};

/// The objects that exist before the gap.
const NODES: usize = 50;
const SERVICES: usize = 10;

/// Runs the case on `bed`.
pub async fn run(bed: &Bed, sizes: Sizes, report: &mut CaseReport) -> anyhow::Result<()> {
    let (_, kubeconfig) = bed.via_proxy("daemon").await?;
    // The gap (a compaction and two restarts) outlasts the renew deadline, which deposes a leader by design
    // (the leader cases show it): the informers' recovery is what this case is about.
    let mut running = bed.spawn(
        "daemon",
        &kubeconfig,
        &bed.cloud()?,
        0,
        &["--leader-elect=false"],
    )?;
    wait_for_informers(&mut running.daemon, &bed.cluster, &["nodes", "services"]).await?;
    let client = bed.cluster.client();
    let nodes = Api::<Node>::all(client.clone());
    let services = Api::<Service>::namespaced(client.clone(), "default");
    create_objects(&nodes, 0..NODES, tainted_node, 0.0, 32).await?;
    create_objects(&services, 0..SERVICES, load_balancer_service, 0.0, 8).await?;
    let mut expected = Expected {
        nodes: NODES,
        services: SERVICES,
        ..Expected::default()
    };
    bed.converge(&expected, &mut running, true, sizes.timeout)
        .await?;

    // The gap: every connection of the daemon is reset and new ones are refused.
    bed.control
        .set_proxy("daemon", ProxyMode::Reset, Duration::ZERO)
        .await?;
    nodes
        .create(&PostParams::default(), &tainted_node(NODES))
        .await?;
    services
        .create(&PostParams::default(), &load_balancer_service(SERVICES))
        .await?;
    let deleted = service_name(0);
    services.delete(&deleted, &DeleteParams::default()).await?;
    expected.nodes += 1;
    expected.services += 1;
    expected.deleted_services.insert(deleted);
    let revision = bed.control.compact().await?;
    let etcd = bed.control.restart("etcd").await?;
    let apiserver = bed.control.restart("kube-apiserver").await?;
    report.figure("etcd compacted to revision", revision.to_string());
    report.figure(
        "etcd, then kube-apiserver restarted",
        format!(
            "{} and {} until ready",
            seconds(etcd.ready.duration_since(etcd.stopping).unwrap_or_default()),
            seconds(
                apiserver
                    .ready
                    .duration_since(apiserver.stopping)
                    .unwrap_or_default()
            )
        ),
    );

    let healed_at = SystemTime::now();
    let healed = Instant::now();
    let proxy = bed
        .control
        .set_proxy("daemon", ProxyMode::Pass, Duration::ZERO)
        .await?;
    report.figure(
        "daemon connections reset in the gap",
        proxy.reset.to_string(),
    );
    let converged = bed
        .converge(&expected, &mut running, true, sizes.timeout)
        .await?;
    report.figure(
        "changes of the gap acted on after the heal",
        seconds(converged - healed),
    );

    let requests = bed.audit.requests()?;
    for resource in ["nodes", "services"] {
        let lists = requests
            .iter()
            .filter(|r| {
                r.by_daemon()
                    && r.verb == "list"
                    && r.resource == resource
                    && r.received >= healed_at
            })
            .count();
        if lists == 0 {
            report.fail(format!(
                "the daemon did not list {resource} again after the heal"
            ));
        }
        report.figure(
            &format!("lists of {resource} after the heal"),
            lists.to_string(),
        );
    }
    bed.check_initialized_once(NODES + 1, &mut report.failures)?;
    running.daemon.check_running()?;
    Ok(())
}
