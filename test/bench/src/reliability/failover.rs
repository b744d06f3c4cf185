//! Two replicas, each through its own fault proxy; the leader is cut off from the API server (blackholed,
//! or its answers dropped while its requests still arrive), killed with SIGKILL, or stopped with SIGTERM.
//! The standby must take over in time, the old leader must make no write after the new leader's first
//! (checked in the audit log by the proxies' source addresses), and a cut-off leader must exit 1.

use std::process::ExitStatus;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, bail};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::PostParams;
use tokio_util::sync::CancellationToken;

use super::bed::{Bed, Running};
use super::control::ProxyMode;
use super::{CaseReport, Sizes, seconds};
use crate::chaos::checks::Expected;
use crate::daemon::Daemon;
use crate::workload::tainted_node;

/// Upstream's defaults, which the daemons run with.
const LEASE_DURATION: Duration = Duration::from_secs(15);
const RETRY_PERIOD: Duration = Duration::from_secs(2);
/// How much later than the lease's expiry a takeover may be measured (the standby's requests on a loaded
/// machine).
const SLACK: Duration = Duration::from_secs(1);
/// A clean stop's bound: the standby watches the release.
const RELEASE_TAKEOVER: Duration = Duration::from_secs(1);
/// How often the benchmark creates a Node while the case runs (work for whoever leads).
const NODE_EVERY: Duration = Duration::from_millis(250);
/// How long the workload goes on after the takeover, and how long the audit log is watched after the
/// partition heals.
const AFTER_TAKEOVER: Duration = Duration::from_secs(5);
/// How long a cut-off leader may take to exit: the renew deadline (10 s) and its stop.
const EXIT_TIMEOUT: Duration = Duration::from_secs(30);
const LEASE_NAMESPACE: &str = "kube-system";
const LEASE_NAME: &str = "cloud-controller-manager";

/// What happens to the leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Its proxy drops every byte.
    Blackhole,
    /// Its requests reach the API server, the answers are dropped.
    CutResponses,
    /// SIGKILL.
    Kill,
    /// SIGTERM.
    Term,
}

/// The old leader's process, watched for its exit.
struct OldLeader {
    /// None once it was killed or stopped by the case.
    daemon: Option<Daemon>,
    exit: Option<ExitStatus>,
    /// When its exit was seen, from the fault.
    exited_after: Option<Duration>,
}

impl OldLeader {
    /// Notes the exit, if it happened.
    fn poll(&mut self, since: Instant) -> anyhow::Result<()> {
        if let (Some(daemon), None) = (self.daemon.as_mut(), self.exit)
            && let Some(status) = daemon.exited()?
        {
            self.exit = Some(status);
            self.exited_after = Some(since.elapsed());
        }
        Ok(())
    }
}

/// What the takeover looked like from the benchmark.
struct Takeover {
    fault_at: SystemTime,
    /// When the Lease was first seen held by the standby, from the fault.
    noticed: Duration,
    new_identity: String,
}

/// Runs the case on `bed`.
pub async fn run(
    bed: &Bed,
    sizes: Sizes,
    fault: Fault,
    report: &mut CaseReport,
) -> anyhow::Result<()> {
    let (proxy_a, kubeconfig_a) = bed.via_proxy("a").await?;
    let (proxy_b, kubeconfig_b) = bed.via_proxy("b").await?;
    let mut a = bed.spawn("daemon-a", &kubeconfig_a, &bed.cloud()?, 0, &[])?;
    let leases: Api<Lease> = Api::namespaced(bed.cluster.client(), LEASE_NAMESPACE);
    let identity_a = wait_for_holder(&leases, &mut a, sizes.timeout).await?;
    let mut b = bed.spawn("daemon-b", &kubeconfig_b, &bed.cloud()?, 0, &[])?;
    wait_for_log(&mut b, "held by another candidate", sizes.timeout).await?;

    let stop_workload = CancellationToken::new();
    let workload = tokio::spawn(create_nodes(bed.cluster.client(), stop_workload.clone()));
    tokio::time::sleep(AFTER_TAKEOVER).await;

    let mut old = OldLeader {
        daemon: Some(a.daemon),
        exit: None,
        exited_after: None,
    };
    let takeover =
        fault_and_takeover(bed, fault, &leases, &identity_a, &mut old, &mut b, sizes).await?;
    let healed = bed
        .control
        .set_proxy("a", ProxyMode::Pass, Duration::ZERO)
        .await?;
    if fault == Fault::Blackhole || fault == Fault::CutResponses {
        report.figure(
            "bytes the old leader's proxy dropped",
            healed.dropped.to_string(),
        );
    }
    tokio::time::sleep(AFTER_TAKEOVER).await;
    stop_workload.cancel();
    let created = workload.await.context("the workload task")??;

    let took = check_audit(
        bed,
        &takeover,
        &proxy_a.source_ip,
        &proxy_b.source_ip,
        report,
    )?;
    let bound = match fault {
        Fault::Term => RELEASE_TAKEOVER,
        Fault::Kill => LEASE_DURATION + SLACK,
        Fault::Blackhole | Fault::CutResponses => LEASE_DURATION + RETRY_PERIOD + SLACK,
    };
    if took > bound {
        report.fail(format!(
            "took over after {}, bound {}",
            seconds(took),
            seconds(bound)
        ));
    }
    check_exit(fault, &old, took, report);
    report.figure(
        "identities",
        format!("{identity_a} → {}", takeover.new_identity),
    );

    let expected = Expected {
        nodes: created,
        ..Expected::default()
    };
    bed.converge(&expected, &mut b, false, sizes.timeout)
        .await?;
    report.figure(
        "nodes created meanwhile, all initialized",
        created.to_string(),
    );
    Ok(())
}

/// Applies the fault to the old leader (`old`) and waits until the standby (`new`) holds the Lease, then
/// until the old leader has exited.
async fn fault_and_takeover(
    bed: &Bed,
    fault: Fault,
    leases: &Api<Lease>,
    old_identity: &str,
    old: &mut OldLeader,
    new: &mut Running,
    sizes: Sizes,
) -> anyhow::Result<Takeover> {
    let fault_at = SystemTime::now();
    let faulted = Instant::now();
    match fault {
        Fault::Blackhole => {
            bed.control
                .set_proxy("a", ProxyMode::Blackhole, Duration::ZERO)
                .await?;
        }
        Fault::CutResponses => {
            bed.control
                .set_proxy("a", ProxyMode::CutResponses, Duration::ZERO)
                .await?;
        }
        Fault::Kill => old.exit = Some(take(&mut old.daemon)?.kill().await?),
        Fault::Term => old.exit = Some(take(&mut old.daemon)?.stop(EXIT_TIMEOUT).await?),
    }
    let deadline = Instant::now() + sizes.timeout;
    let new_identity = loop {
        new.daemon.check_running()?;
        old.poll(faulted)?;
        match holder(leases).await {
            Some(holder) if holder != old_identity => break holder,
            _ if Instant::now() >= deadline => {
                bail!("no new holder of the Lease within {:?}", sizes.timeout)
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    let noticed = faulted.elapsed();
    while old.daemon.is_some() && old.exit.is_none() && faulted.elapsed() < EXIT_TIMEOUT {
        old.poll(faulted)?;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(Takeover {
        fault_at,
        noticed,
        new_identity,
    })
}

/// Reads the audit log: the takeover time (the fault to the new leader's first successful write), the old
/// leader's last write, and any write of the old leader received after the new leader's first (a failure).
fn check_audit(
    bed: &Bed,
    takeover: &Takeover,
    old_ip: &str,
    new_ip: &str,
    report: &mut CaseReport,
) -> anyhow::Result<Duration> {
    let requests = bed.audit.requests()?;
    let new_first = requests
        .iter()
        .filter(|r| {
            r.source_ip == new_ip
                && r.is_write()
                && r.succeeded()
                && r.received >= takeover.fault_at
        })
        .map(|r| r.received)
        .min()
        .context("no successful write of the new leader in the audit log")?;
    let took = new_first
        .duration_since(takeover.fault_at)
        .unwrap_or_default();
    report.figure(
        "takeover (fault to the new leader's first write)",
        seconds(took),
    );
    report.figure(
        "lease seen held by the standby after",
        seconds(takeover.noticed),
    );
    let old_writes = || {
        requests
            .iter()
            .filter(|r| r.source_ip == old_ip && r.is_write())
    };
    if let Some(last) = old_writes().map(|r| r.received).max() {
        let gap = match new_first.duration_since(last) {
            Ok(gap) => format!("{} before", seconds(gap)),
            Err(err) => format!("{} after", seconds(err.duration())),
        };
        report.figure(
            "old leader's last write",
            format!("{gap} the new leader's first"),
        );
    }
    let late: Vec<String> = old_writes()
        .filter(|r| r.received >= new_first)
        .map(|r| format!("{} {}/{} ({})", r.verb, r.resource, r.name, r.code))
        .collect();
    if !late.is_empty() {
        report.fail(format!(
            "{} writes of the deposed leader after the new leader's first: {}",
            late.len(),
            super::first_few(&late)
        ));
    }
    Ok(took)
}

fn take(daemon: &mut Option<Daemon>) -> anyhow::Result<Daemon> {
    daemon.take().context("the old leader is gone already")
}

/// A cut-off leader exits 1, before the takeover; a stopped one 0; a killed one by its signal.
fn check_exit(fault: Fault, old: &OldLeader, took: Duration, report: &mut CaseReport) {
    let Some(status) = old.exit else {
        report.fail(format!(
            "the old leader did not exit within {EXIT_TIMEOUT:?}"
        ));
        return;
    };
    report.figure("old leader's exit", status.to_string());
    let expected = match fault {
        Fault::Blackhole | Fault::CutResponses => Some(1),
        Fault::Term => Some(0),
        Fault::Kill => None,
    };
    if status.code() != expected {
        report.fail(format!(
            "the old leader exited with {status}, expected code {expected:?}"
        ));
    }
    if let Some(after) = old.exited_after {
        report.figure("old leader exited (after the fault)", seconds(after));
        if after >= took {
            report.fail(format!(
                "the cut-off leader exited after {}, not before the takeover ({})",
                seconds(after),
                seconds(took)
            ));
        }
    }
}

/// Waits until the Lease has a holder; returns it.
async fn wait_for_holder(
    leases: &Api<Lease>,
    running: &mut Running,
    timeout: Duration,
) -> anyhow::Result<String> {
    let deadline = Instant::now() + timeout;
    loop {
        running.daemon.check_running()?;
        match holder(leases).await {
            Some(holder) => return Ok(holder),
            None if Instant::now() >= deadline => {
                bail!("no holder of the Lease within {timeout:?}")
            }
            None => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// The Lease's holder, when it has one.
async fn holder(leases: &Api<Lease>) -> Option<String> {
    let lease = leases.get_opt(LEASE_NAME).await.ok()??;
    lease.spec?.holder_identity.filter(|h| !h.is_empty())
}

/// Waits until the daemon's log has `needle`.
async fn wait_for_log(
    running: &mut Running,
    needle: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    while !running.daemon.log_contains(needle) {
        running.daemon.check_running()?;
        if Instant::now() >= deadline {
            bail!("the daemon did not log {needle:?} within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Creates a tainted Node every [`NODE_EVERY`] until `stop`; returns how many.
async fn create_nodes(client: kube::Client, stop: CancellationToken) -> anyhow::Result<usize> {
    let nodes: Api<Node> = Api::all(client);
    let mut created = 0;
    while !stop.is_cancelled() {
        nodes
            .create(&PostParams::default(), &tainted_node(created))
            .await
            .context("cannot create a node")?;
        created += 1;
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = tokio::time::sleep(NODE_EVERY) => {}
        }
    }
    Ok(created)
}
