//! The daemon's incarnations in the chaos scenario: the first one, the one started after it is killed with
//! SIGKILL (same flags, the cloud in the state the killed one left), and any started because one exited on
//! its own (a failure of the scenario). Their cloud calls, CPU time and peak memory are summed up here,
//! since each incarnation's fake cloud (inside the daemon process) counts from zero.
//!
//! The fake cloud lives inside the daemon, so the cloud a real daemon would find after a crash has to be
//! carried over: before the kill the cloud's mutating operations are made to fail (so none can complete
//! after the snapshot), the cloud is exported as a cloud-config (`GET /config`), and the next incarnation
//! starts from it. The kill thus lands right after the last cloud change that went through; the API
//! side is killed at an arbitrary point.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use anyhow::Context;
use provider_fake::{FakeConfig, FaultSpec};

use crate::chaos::faults::{MUTATING_OPERATIONS, freeze_fault};
use crate::daemon::{Daemon, DaemonSpec};
use crate::fake_admin::{FakeAdmin, free_port};

/// How long calls that passed the fault gate before the freeze may take to complete (their latency, with
/// a wide margin on a loaded machine).
const FREEZE_SETTLE: Duration = Duration::from_millis(500);
/// Log lines of a daemon that exited early shown in the report.
const TAIL_LINES: usize = 40;

/// What one kill and restart did.
#[derive(Debug, Clone, Copy)]
pub struct Restart {
    /// When the killed daemon was gone.
    pub killed_at: Instant,
    /// When the next one was started.
    pub restarted_at: Instant,
    /// Load balancers the cloud held when it was frozen.
    pub load_balancers: usize,
}

/// The daemon's incarnations and their summed-up figures.
pub struct Incarnations {
    spec: DaemonSpec,
    dir: PathBuf,
    /// None only between a kill and the next start.
    current: Option<Daemon>,
    admin: FakeAdmin,
    spawned: u32,
    /// Exits nobody asked for, with the end of the log.
    unexpected_exits: Vec<String>,
    /// Cloud calls of the incarnations that ended, by operation.
    calls: BTreeMap<String, u64>,
    /// CPU seconds of the incarnations that ended.
    cpu_seconds: f64,
    /// Peak RSS (KiB) of each incarnation that ended.
    peaks_kib: Vec<u64>,
    /// Panic lines of the incarnations that ended.
    panics: Vec<String>,
}

fn admin_address(config: &FakeConfig) -> anyhow::Result<SocketAddr> {
    config
        .admin_address
        .context("the chaos cloud-config has no adminAddress")
}

/// Writes a cloud-config file for an incarnation (as JSON, which is YAML too).
fn write_config(path: &Path, config: &FakeConfig) -> anyhow::Result<()> {
    let text = serde_json::to_string(config).context("cannot render the fake cloud config")?;
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

impl Incarnations {
    /// Starts the first incarnation with `config` as its cloud; logs and configs go to `dir`.
    pub fn start(mut spec: DaemonSpec, config: &FakeConfig, dir: &Path) -> anyhow::Result<Self> {
        spec.cloud_config = dir.join("cloud-config-1.yaml");
        write_config(&spec.cloud_config, config)?;
        let current = Some(Daemon::spawn(&spec, &dir.join("daemon-1.log"))?);
        Ok(Incarnations {
            admin: FakeAdmin::new(admin_address(config)?),
            spec,
            dir: dir.to_path_buf(),
            current,
            spawned: 1,
            unexpected_exits: Vec::new(),
            calls: BTreeMap::new(),
            cpu_seconds: 0.0,
            peaks_kib: Vec::new(),
            panics: Vec::new(),
        })
    }

    /// The running incarnation.
    pub fn current(&mut self) -> anyhow::Result<&mut Daemon> {
        self.current
            .as_mut()
            .context("no daemon is running (the last start failed)")
    }

    /// The running incarnation's fake cloud.
    pub fn admin(&self) -> FakeAdmin {
        self.admin
    }

    /// Daemons started after the first.
    pub fn restarts(&self) -> u32 {
        self.spawned - 1
    }

    /// Restarts the daemon if it exited on its own (recorded as unexpected, with its log). Its cloud is gone
    /// with it: the new one starts from the last cloud-config.
    pub async fn supervise(&mut self) -> anyhow::Result<()> {
        let daemon = self.current()?;
        let Some(status) = daemon.exited()? else {
            return Ok(());
        };
        let tail = daemon.log_tail(TAIL_LINES);
        let panics = daemon.panics();
        self.unexpected_exits.push(format!(
            "daemon {} exited on its own ({status}); end of its log:\n{tail}",
            self.spawned
        ));
        self.panics.extend(panics);
        self.spawn_next()
    }

    fn spawn_next(&mut self) -> anyhow::Result<()> {
        self.spawned += 1;
        let log = self.dir.join(format!("daemon-{}.log", self.spawned));
        self.current = Some(Daemon::spawn(&self.spec, &log)?);
        Ok(())
    }

    /// Freezes the cloud's mutations, exports the cloud, kills the daemon with SIGKILL and starts the next
    /// one with the same flags on the exported cloud, `faults` in effect and its fault streams reseeded.
    pub async fn kill_and_restart(
        &mut self,
        faults: &BTreeMap<String, FaultSpec>,
        latency_ms: u64,
    ) -> anyhow::Result<Restart> {
        for op in MUTATING_OPERATIONS {
            self.admin
                .set_fault(op, &freeze_fault(latency_ms))
                .await
                .context("cannot freeze the cloud before the kill")?;
        }
        tokio::time::sleep(FREEZE_SETTLE).await;
        let mut cloud = self
            .admin
            .cloud_config()
            .await
            .context("cannot export the cloud before the kill")?;
        let calls = self
            .admin
            .calls()
            .await
            .context("cannot read the cloud calls")?;
        let daemon = self
            .current
            .take()
            .context("no daemon is running to kill")?;
        self.end_figures(&daemon, calls);
        let status = daemon.kill().await?;
        let killed_at = Instant::now();
        eprintln!("[chaos] daemon {} killed ({status})", self.spawned);

        cloud.faults = faults.clone();
        cloud.seed = cloud.seed.wrapping_add(1);
        cloud.admin_address = Some(([127, 0, 0, 1], free_port()?).into());
        self.admin = FakeAdmin::new(admin_address(&cloud)?);
        self.spec.cloud_config = self
            .dir
            .join(format!("cloud-config-{}.yaml", self.spawned + 1));
        write_config(&self.spec.cloud_config, &cloud)?;
        self.spawn_next()?;
        Ok(Restart {
            killed_at,
            restarted_at: Instant::now(),
            load_balancers: cloud.load_balancers.len(),
        })
    }

    /// Adds the figures of an incarnation that is about to end to the totals.
    fn end_figures(&mut self, daemon: &Daemon, calls: BTreeMap<String, u64>) {
        for (op, n) in calls {
            *self.calls.entry(op).or_insert(0) += n;
        }
        self.cpu_seconds += daemon.cpu_seconds().unwrap_or(0.0);
        let peak = daemon
            .peak_rss_kib()
            .unwrap_or(0)
            .max(daemon.rss_kib().unwrap_or(0));
        self.peaks_kib.push(peak);
        self.panics.extend(daemon.panics());
    }

    /// Stops the last incarnation (SIGTERM); returns its exit status and the figures of every
    /// incarnation.
    pub async fn finish(&mut self, grace: Duration) -> anyhow::Result<Totals> {
        let calls = self
            .admin
            .calls()
            .await
            .context("cannot read the cloud calls")?;
        let daemon = self.current.take().context("no daemon is running")?;
        self.end_figures(&daemon, calls);
        let status = daemon.stop(grace).await?;
        Ok(Totals {
            status,
            restarts: self.spawned - 1,
            calls: std::mem::take(&mut self.calls),
            cpu_seconds: self.cpu_seconds,
            peaks_kib: std::mem::take(&mut self.peaks_kib),
            panics: std::mem::take(&mut self.panics),
            unexpected_exits: std::mem::take(&mut self.unexpected_exits),
        })
    }
}

/// The figures of every incarnation, once the last one stopped.
#[derive(Debug)]
pub struct Totals {
    /// How the last one exited when asked to stop.
    pub status: ExitStatus,
    /// Daemons started after the first.
    pub restarts: u32,
    /// Cloud calls by operation.
    pub calls: BTreeMap<String, u64>,
    /// CPU seconds.
    pub cpu_seconds: f64,
    /// Peak RSS (KiB) of each incarnation, in order.
    pub peaks_kib: Vec<u64>,
    /// Log lines that report a panic.
    pub panics: Vec<String>,
    /// Exits nobody asked for, with the end of the log.
    pub unexpected_exits: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_cloud_config_is_read_back_by_the_fake_cloud() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cloud.yaml");
        let mut config = FakeConfig::from_yaml(
            b"clusterID: bench\nadminAddress: 127.0.0.1:4321\nloadBalancerNodeSets: [[n1, n2]]\n\
              loadBalancers: [{serviceUID: u1, service: default/s1, nodeSet: 0}, \
              {serviceUID: u2, service: default/s2, nodeSet: 0}]\n",
        )
        .unwrap();
        config.faults = crate::chaos::faults::cloud_faults(30, 20);
        write_config(&path, &config).unwrap();
        let read = FakeConfig::from_yaml(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(read, config);
        assert_eq!(
            admin_address(&read).unwrap(),
            "127.0.0.1:4321".parse::<SocketAddr>().unwrap()
        );
        assert!(admin_address(&FakeConfig::default()).is_err());
    }
}
