//! Runs one scenario of any kind: a fresh API server (or real control plane), the scenario's own run, the
//! benchmark process's memory at the end.

use anyhow::Context;

use crate::chaos;
use crate::cluster::Cluster;
use crate::daemon::Daemon;
use crate::report::{Outcome, load_average};
use crate::scale;
use crate::scenario::{self, Kind, RunSettings, Scenario};

/// Runs one scenario; a scenario that cannot run at all is an error, wrong end states are failures in the
/// outcome.
pub async fn run(scenario: &Scenario, settings: &RunSettings) -> anyhow::Result<Outcome> {
    if scenario.kind == Kind::Chaos {
        return chaos::run(scenario, settings).await;
    }
    let load = load_average();
    let dir = tempfile::Builder::new()
        .prefix(&format!("ccm-bench-{}-", scenario.id))
        .tempdir()
        .context("cannot create a temporary directory")?;
    let cluster = Cluster::start(dir.path(), settings.realkube.as_deref()).await?;
    let result = match scenario.kind {
        Kind::Startup => scale::run_startup(scenario, settings, &cluster, dir.path()).await,
        Kind::NodeChange => scale::run_node_change(scenario, settings, &cluster, dir.path()).await,
        _ => scenario::run_on(scenario, settings, &cluster, dir.path()).await,
    };
    let own_rss = Daemon::process_rss_kib(std::process::id());
    cluster.shutdown().await;
    let mut outcome = result?;
    outcome.load = load;
    if let (Some(rss), None) = (own_rss, settings.realkube.as_ref()) {
        outcome.notes.push(format!(
            "the benchmark process (the in-memory API server with every object, the workload, the watches) \
             was {:.1} MiB resident at the end",
            rss as f64 / 1024.0
        ));
    }
    Ok(outcome)
}
