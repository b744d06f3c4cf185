//! What every reliability case stands on: a fresh real control plane with its control endpoint and audit
//! log, daemons started on it (directly or through a fault proxy), and the end-state checks shared with
//! the chaos scenario.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::{Event, Node, Service};
use kube::Api;
use kube::api::ListParams;
use provider_fake::FakeConfig;

use super::control::{ControlEndpoint, Proxy};
use crate::audit::AuditLog;
use crate::chaos::EVENT_BOUND;
use crate::chaos::checks::{Expected, Problems, check_cloud, check_nodes, check_services};
use crate::chaos::events::by_object;
use crate::cluster::Cluster;
use crate::daemon::{Daemon, DaemonSpec};
use crate::fake_admin::{FakeAdmin, free_port};
use crate::scenario::RunSettings;
use crate::workload::{CloudBehaviour, ExplicitInstances, cloud_config, node_name};

/// The daemon's rates and workers: a 1,000-node, 200-service workload takes tens of seconds, long enough
/// for restarts to land in the middle of it.
const DAEMON_FLAGS: &[&str] = &[
    "--kube-api-qps=100",
    "--kube-api-burst=200",
    "--concurrent-node-syncs=10",
    "--concurrent-service-syncs=10",
];
/// How often the end state is checked while converging.
const CONVERGENCE_POLL: Duration = Duration::from_secs(1);
/// Events are settled when their count did not change for this long.
const EVENT_QUIET: Duration = Duration::from_secs(5);
/// The longest wait for events to settle.
const EVENT_SETTLE_TIMEOUT: Duration = Duration::from_secs(60);

/// One case's cluster and files.
pub struct Bed {
    /// The real control plane.
    pub cluster: Cluster,
    /// Its control endpoint.
    pub control: ControlEndpoint,
    /// Its audit log.
    pub audit: AuditLog,
    /// The case's directory (daemon logs, kubeconfigs, cloud-configs).
    pub dir: PathBuf,
    settings: RunSettings,
}

/// A daemon and its fake cloud's admin API.
pub struct Running {
    pub daemon: Daemon,
    pub admin: FakeAdmin,
}

impl Bed {
    /// Starts a real control plane for one case in `dir`.
    pub async fn start(settings: &RunSettings, dir: &Path) -> anyhow::Result<Bed> {
        let realkube = settings
            .realkube
            .as_deref()
            .context("the reliability scenarios run on the real control plane: pass --realkube")?;
        let cluster = Cluster::start(dir, Some(realkube)).await?;
        let plane = cluster
            .real_dir()
            .context("a real control plane has a directory")?
            .to_path_buf();
        Ok(Bed {
            control: ControlEndpoint::open(&plane)?,
            audit: AuditLog::of(&plane),
            cluster,
            dir: dir.to_path_buf(),
            settings: settings.clone(),
        })
    }

    /// Stops the control plane.
    pub async fn shutdown(self) {
        self.cluster.shutdown().await;
    }

    /// Creates the named fault proxy and a copy of the daemon's kubeconfig that goes through it.
    pub async fn via_proxy(&self, name: &str) -> anyhow::Result<(Proxy, PathBuf)> {
        let proxy = self.control.proxy(name).await?;
        let original = self.cluster.daemon_kubeconfig();
        let text = std::fs::read_to_string(original)
            .with_context(|| format!("cannot read {}", original.display()))?;
        let mut replaced = false;
        let rewritten: Vec<String> = text
            .lines()
            .map(|line| match line.split_once("server: https://") {
                Some((indent, _)) => {
                    replaced = true;
                    format!("{indent}server: https://{}", proxy.address)
                }
                None => line.to_string(),
            })
            .collect();
        if !replaced {
            bail!("{} names no https server", original.display());
        }
        let path = self.dir.join(format!("daemon-via-{name}.kubeconfig"));
        std::fs::write(&path, rewritten.join("\n"))
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok((proxy, path))
    }

    /// The benchmark's fake cloud (every call delayed by `--latency-ms`) with a free admin port.
    pub fn cloud(&self) -> anyhow::Result<FakeConfig> {
        let yaml = cloud_config(
            self.settings.latency_ms,
            free_port()?,
            &ExplicitInstances::default(),
            CloudBehaviour::default(),
        );
        FakeConfig::from_yaml(yaml.as_bytes()).context("the benchmark's cloud-config")
    }

    /// The latency of every call of the benchmark's fake cloud.
    pub fn cloud_latency(&self) -> Duration {
        Duration::from_millis(self.settings.latency_ms)
    }

    /// Starts a daemon named `name` (its log `name.log`) with `kubeconfig`, `cloud`, the run's extra flags
    /// and `flags`.
    pub fn spawn(
        &self,
        name: &str,
        kubeconfig: &Path,
        cloud: &FakeConfig,
        secure_port: u16,
        flags: &[&str],
    ) -> anyhow::Result<Running> {
        let cloud_config = self.dir.join(format!("{name}-cloud-config.yaml"));
        let text = serde_json::to_string(cloud).context("cannot render the cloud-config")?;
        std::fs::write(&cloud_config, text)
            .with_context(|| format!("cannot write {}", cloud_config.display()))?;
        let mut all_flags: Vec<String> = DAEMON_FLAGS
            .iter()
            .chain(flags)
            .map(|f| (*f).to_string())
            .collect();
        all_flags.extend(self.settings.extra_flags.iter().cloned());
        let spec = DaemonSpec {
            binary: self.settings.binary.clone(),
            kubeconfig: kubeconfig.to_path_buf(),
            cloud_config,
            flags: all_flags,
            env: self.settings.extra_env.clone(),
            secure_port,
        };
        let admin = FakeAdmin::new(
            cloud
                .admin_address
                .context("the cloud-config has no adminAddress")?,
        );
        let daemon = Daemon::spawn(&spec, &self.dir.join(format!("{name}.log")))?;
        Ok(Running { daemon, admin })
    }

    /// The problems of the end state now: Nodes, Services and (with `admin`) the cloud's load balancers.
    pub async fn problems(
        &self,
        expected: &Expected,
        admin: Option<&FakeAdmin>,
    ) -> anyhow::Result<Problems> {
        let client = self.cluster.client();
        let nodes = Api::<Node>::all(client.clone())
            .list(&ListParams::default())
            .await?;
        let mut problems = Problems::default();
        check_nodes(&nodes.items, expected, &mut problems);
        if let Some(admin) = admin {
            let services = Api::<Service>::namespaced(client, "default")
                .list(&ListParams::default())
                .await?;
            let facts = check_services(&services.items, expected, &mut problems);
            check_cloud(
                &admin.cloud_config().await?,
                expected,
                &facts,
                &mut problems,
            );
        }
        Ok(problems)
    }

    /// Waits until the end state has no problem (API errors while the API server restarts are retried);
    /// fails after `timeout` with the problems left. The daemon must keep running.
    pub async fn converge(
        &self,
        expected: &Expected,
        running: &mut Running,
        with_cloud: bool,
        timeout: Duration,
    ) -> anyhow::Result<Instant> {
        let deadline = Instant::now() + timeout;
        loop {
            running.daemon.check_running()?;
            let admin = with_cloud.then_some(&running.admin);
            let last = match self.problems(expected, admin).await {
                Ok(problems) if problems.is_empty() => return Ok(Instant::now()),
                Ok(problems) => problems.lines().join("; "),
                Err(err) => format!("cannot check: {err:#}"),
            };
            if Instant::now() >= deadline {
                bail!("the end state was not reached: {last}");
            }
            tokio::time::sleep(CONVERGENCE_POLL).await;
        }
    }

    /// Waits for the events to settle and checks that no object got more than [`EVENT_BOUND`] event
    /// occurrences; returns the most any object got.
    pub async fn check_events(&self, failures: &mut Vec<String>) -> anyhow::Result<u64> {
        let events: Api<Event> = Api::all(self.cluster.client());
        let started = Instant::now();
        let mut last = (u64::MAX, Instant::now());
        let list = loop {
            let list = events.list(&ListParams::default()).await?;
            let occurrences = crate::cluster::occurrences(&list.items);
            if occurrences != last.0 {
                last = (occurrences, Instant::now());
            } else if last.1.elapsed() >= EVENT_QUIET || started.elapsed() >= EVENT_SETTLE_TIMEOUT {
                break list;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        };
        let mut most = 0;
        for (kind, objects) in by_object(&list.items) {
            if let Some((name, worst)) = objects.worst() {
                most = most.max(worst.occurrences);
                if worst.occurrences > EVENT_BOUND {
                    failures.push(format!(
                        "event storm: {kind} {name} got {} event occurrences (bound {EVENT_BOUND})",
                        worst.occurrences
                    ));
                }
            }
        }
        Ok(most)
    }

    /// Checks in the audit log that the daemon initialized every Node of `0..nodes` exactly once (one
    /// successful patch of the Node itself).
    pub fn check_initialized_once(
        &self,
        nodes: usize,
        failures: &mut Vec<String>,
    ) -> anyhow::Result<()> {
        let mut patches = std::collections::BTreeMap::<String, usize>::new();
        for request in self.audit.requests()? {
            if request.by_daemon()
                && request.verb == "patch"
                && request.resource == "nodes"
                && request.subresource.is_empty()
                && request.succeeded()
            {
                *patches.entry(request.name).or_insert(0) += 1;
            }
        }
        let wrong: Vec<String> = (0..nodes)
            .map(node_name)
            .filter_map(|name| match patches.get(&name).copied().unwrap_or(0) {
                1 => None,
                n => Some(format!("{name} ({n})")),
            })
            .collect();
        if !wrong.is_empty() {
            failures.push(format!(
                "{} nodes not initialized exactly once (successful patches): {}",
                wrong.len(),
                super::first_few(&wrong)
            ));
        }
        Ok(())
    }
}

/// Counts the initialized Nodes (`None` while the API server does not answer).
pub async fn initialized_nodes(client: &kube::Client) -> Option<usize> {
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .ok()?;
    Some(
        nodes
            .items
            .iter()
            .filter(|n| !crate::workload::is_uninitialized(n))
            .count(),
    )
}
