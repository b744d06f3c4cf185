//! The cluster under the daemon, with a separate identity for the daemon so that its requests can be told
//! apart from the benchmark's own (workload creation, the completion watches). Either
//! - the in-memory API server (`test_apiserver`) running in the benchmark's process, sized so that it is
//!   not what limits the daemon: a long watch history and deep watch buffers (a slow watcher is never cut
//!   off during a burst), and a request log large enough for a whole scenario; the daemon's requests are
//!   read from that log; or
//! - a real control plane (`hack/realkube`: etcd, kube-apiserver, kube-controller-manager), started fresh
//!   for the scenario; the daemon runs as the ServiceAccount `kube-system/cloud-controller-manager` (bound
//!   to `cluster-admin`: the benchmark measures speed, the RBAC is tested elsewhere) and its requests are
//!   read from the API server's audit log.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::ListParams;
use test_apiserver::{TestApiServer, UserInfo};

pub use crate::audit::DAEMON_USER;

/// The bearer token of the daemon's kubeconfig.
const DAEMON_TOKEN: &str = "ccm-bench-daemon-token";
/// Changes kept for watches that resume.
const HISTORY_WINDOW: usize = 200_000;
/// How far a watcher may fall behind before the server ends its stream.
const WATCH_BUFFER: usize = 65_536;
/// Entries of the request log.
const REQUEST_LOG: usize = 2_000_000;

/// Requests by (verb, resource, subresource).
pub type RequestCounts = BTreeMap<(String, String, String), u64>;

/// A running API server plus the kubeconfig the daemon uses.
pub struct Cluster {
    backend: Backend,
    client: kube::Client,
    daemon_kubeconfig: PathBuf,
}

/// Which API server.
enum Backend {
    InMemory(TestApiServer),
    Real(RealControlPlane),
}

impl Cluster {
    /// Starts the cluster in `dir`: a real control plane with the `realkube` binary when given, else the
    /// in-memory API server.
    pub async fn start(dir: &Path, realkube: Option<&Path>) -> anyhow::Result<Cluster> {
        match realkube {
            Some(realkube) => Self::start_real(dir, realkube).await,
            None => Self::start_in_memory(dir).await,
        }
    }

    /// Starts the API server (HTTPS, like a real one) and writes the daemon's kubeconfig into `dir`.
    async fn start_in_memory(dir: &Path) -> anyhow::Result<Cluster> {
        let server = TestApiServer::builder()
            .history_window(HISTORY_WINDOW)
            .watch_channel_capacity(WATCH_BUFFER)
            .request_log_capacity(REQUEST_LOG)
            .user(
                DAEMON_TOKEN,
                UserInfo::new(
                    DAEMON_USER,
                    &["system:serviceaccounts", "system:authenticated"],
                ),
            )
            .kubeconfig_path(dir.join("admin.kubeconfig"))
            .start()
            .await
            .context("cannot start the in-memory API server")?;
        let client = server
            .client()
            .context("cannot build a client for the API server")?;
        let daemon_kubeconfig = dir.join("daemon.kubeconfig");
        let yaml = server
            .kubeconfig_yaml()
            .replace(server.token(), DAEMON_TOKEN);
        std::fs::write(&daemon_kubeconfig, yaml)
            .with_context(|| format!("cannot write {}", daemon_kubeconfig.display()))?;
        Ok(Cluster {
            backend: Backend::InMemory(server),
            client,
            daemon_kubeconfig,
        })
    }

    /// Starts a real control plane in `dir/cluster` (`realkube up`) with the daemon's ServiceAccount.
    async fn start_real(dir: &Path, realkube: &Path) -> anyhow::Result<Cluster> {
        let plane = RealControlPlane::up(realkube, dir).await?;
        let kubeconfig = kube::config::Kubeconfig::read_from(plane.dir.join("admin.kubeconfig"))
            .context("cannot read the admin kubeconfig")?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .context("cannot use the admin kubeconfig")?;
        let client = kube::Client::try_from(config).context("cannot build the admin client")?;
        Ok(Cluster {
            daemon_kubeconfig: plane.dir.join("cloud-controller-manager.kubeconfig"),
            backend: Backend::Real(plane),
            client,
        })
    }

    /// The benchmark's own (administrator) client.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// The test controls of the in-memory API server (fault injection, watch cuts, compaction, the request
    /// log); none on a real control plane.
    pub fn controls(&self) -> Option<test_apiserver::Controls> {
        match &self.backend {
            Backend::InMemory(server) => Some(server.controls()),
            Backend::Real(_) => None,
        }
    }

    /// The directory of the real control plane (`realkube up --dir`): its audit log and control endpoint;
    /// none for the in-memory API server.
    pub fn real_dir(&self) -> Option<&Path> {
        match &self.backend {
            Backend::InMemory(_) => None,
            Backend::Real(plane) => Some(&plane.dir),
        }
    }

    /// CPU seconds the real control plane's kube-apiserver and etcd have used so far (none on the
    /// in-memory API server, which runs in the benchmark's own process).
    pub fn control_plane_cpu(&self) -> Option<ControlPlaneCpu> {
        let dir = self.real_dir()?;
        Some(ControlPlaneCpu {
            api_server: component_cpu_seconds(dir, "kube-apiserver")?,
            etcd: component_cpu_seconds(dir, "etcd")?,
        })
    }

    /// The kubeconfig for the daemon (its own token and identity).
    pub fn daemon_kubeconfig(&self) -> &Path {
        &self.daemon_kubeconfig
    }

    /// The daemon's requests since the last [`Cluster::clear_requests`], by (verb, resource, subresource).
    pub fn daemon_requests(&self) -> RequestCounts {
        let mut counts = RequestCounts::new();
        match &self.backend {
            Backend::InMemory(server) => {
                for record in server.controls().request_log() {
                    if record.user == DAEMON_USER {
                        *counts
                            .entry((record.verb, record.resource, record.subresource))
                            .or_insert(0) += 1;
                    }
                }
            }
            Backend::Real(plane) => {
                for request in plane.daemon_requests() {
                    *counts.entry(request).or_insert(0) += 1;
                }
            }
        }
        counts
    }

    /// Whether the daemon has opened a watch on `resource` (its informer listed it completely).
    pub fn daemon_watches(&self, resource: &str) -> bool {
        match &self.backend {
            Backend::InMemory(server) => server
                .controls()
                .request_log()
                .iter()
                .any(|r| r.user == DAEMON_USER && r.verb == "watch" && r.resource == resource),
            Backend::Real(plane) => plane
                .daemon_requests()
                .iter()
                .any(|(verb, r, _)| verb == "watch" && r == resource),
        }
    }

    /// Forgets the requests served so far.
    pub fn clear_requests(&self) {
        match &self.backend {
            Backend::InMemory(server) => server.controls().clear_request_log(),
            Backend::Real(plane) => plane.clear_requests(),
        }
    }

    /// Event occurrences stored (an aggregated event counts its `count`), and Event objects stored.
    pub async fn stored_events(&self) -> anyhow::Result<(u64, u64)> {
        let events: Api<Event> = Api::all(self.client.clone());
        let list = events
            .list(&ListParams::default())
            .await
            .context("cannot list events")?;
        Ok((occurrences(&list.items), list.items.len() as u64))
    }

    /// Stops the server.
    pub async fn shutdown(self) {
        match self.backend {
            Backend::InMemory(server) => server.shutdown().await,
            Backend::Real(plane) => plane.down().await,
        }
    }
}

/// The cluster-admin binding of the daemon's ServiceAccount.
const DAEMON_BINDING: &str = "apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: ccm-bench-daemon
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: cluster-admin
subjects:
  - kind: ServiceAccount
    name: cloud-controller-manager
    namespace: kube-system
";

/// A control plane started by `realkube up`, and how far its audit log has been read.
struct RealControlPlane {
    realkube: PathBuf,
    dir: PathBuf,
    /// Where the requests since the last [`RealControlPlane::clear_requests`] start in the audit log.
    audit_from: std::sync::atomic::AtomicU64,
}

impl RealControlPlane {
    /// `realkube up` in `work/cluster`.
    async fn up(realkube: &Path, work: &Path) -> anyhow::Result<RealControlPlane> {
        let dir = work.join("cluster");
        let binding = work.join("daemon-binding.yaml");
        std::fs::write(&binding, DAEMON_BINDING)
            .with_context(|| format!("cannot write {}", binding.display()))?;
        let output = tokio::process::Command::new(realkube)
            .arg("up")
            .arg(format!("--dir={}", dir.display()))
            .arg(format!("--manifest={}", binding.display()))
            .arg("--service-account=kube-system/cloud-controller-manager")
            .output()
            .await
            .with_context(|| format!("cannot run {}", realkube.display()))?;
        if !output.status.success() {
            bail!(
                "realkube up failed ({}):\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let plane = RealControlPlane {
            realkube: realkube.to_path_buf(),
            dir,
            audit_from: Default::default(),
        };
        plane.clear_requests();
        Ok(plane)
    }

    fn audit_log(&self) -> PathBuf {
        self.dir.join("audit.log")
    }

    /// The daemon's requests in the audit log since the last clear, as (verb, resource, subresource): a
    /// request counts once it completed, a watch once it started.
    fn daemon_requests(&self) -> Vec<(String, String, String)> {
        let from = self.audit_from.load(std::sync::atomic::Ordering::SeqCst);
        let Ok(bytes) = std::fs::read(self.audit_log()) else {
            return Vec::new();
        };
        let start = usize::try_from(from).unwrap_or(usize::MAX).min(bytes.len());
        crate::audit::parse(&bytes[start..])
            .into_iter()
            .filter(crate::audit::Request::by_daemon)
            .map(|r| (r.verb, r.resource, r.subresource))
            .collect()
    }

    fn clear_requests(&self) {
        let len = std::fs::metadata(self.audit_log()).map_or(0, |m| m.len());
        self.audit_from
            .store(len, std::sync::atomic::Ordering::SeqCst);
    }

    async fn down(self) {
        let result = tokio::process::Command::new(&self.realkube)
            .arg("down")
            .arg(format!("--dir={}", self.dir.display()))
            .output()
            .await;
        if let Err(err) = result {
            eprintln!("ccm-bench: realkube down failed: {err}");
        }
    }
}

/// CPU seconds of the real control plane's processes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ControlPlaneCpu {
    /// kube-apiserver's.
    pub api_server: f64,
    /// etcd's.
    pub etcd: f64,
}

/// The CPU seconds of the control plane `dir`'s `component`: the process `realkube` runs as
/// `realkube COMPONENT ...` with `dir` in its flags.
fn component_cpu_seconds(dir: &Path, component: &str) -> Option<f64> {
    let dir = dir.to_str()?;
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            let runs_component = args.get(1) == Some(&component.as_bytes());
            let of_this_plane = args
                .iter()
                .any(|arg| std::str::from_utf8(arg).is_ok_and(|arg| arg.contains(dir)));
            (runs_component && of_this_plane)
                .then(|| crate::daemon::process_cpu_seconds(pid))
                .flatten()
        })
}

/// How many times one Event happened: its `count` (an aggregated Event), at least 1.
pub fn event_occurrences(event: &Event) -> u64 {
    event
        .count
        .map_or(1, |c| u64::try_from(c).unwrap_or(1).max(1))
}

/// The occurrences of `events` in all.
pub fn occurrences(events: &[Event]) -> u64 {
    events.iter().map(event_occurrences).sum()
}

/// The total of `counts`, leaving out leader election (Leases), which is not per-object work.
pub fn total_without_leases(counts: &RequestCounts) -> u64 {
    counts
        .iter()
        .filter(|((_, resource, _), _)| resource != "leases")
        .map(|(_, n)| n)
        .sum()
}

/// The requests of `counts` on Events.
pub fn event_requests(counts: &RequestCounts) -> u64 {
    counts
        .iter()
        .filter(|((_, resource, _), _)| resource == "events")
        .map(|(_, n)| n)
        .sum()
}

/// `counts` as `verb resource[/sub] N` items, most frequent first, without Leases.
pub fn describe_requests(counts: &RequestCounts) -> String {
    let mut items: Vec<(String, u64)> = counts
        .iter()
        .filter(|((_, resource, _), _)| resource != "leases")
        .map(|((verb, resource, sub), n)| {
            let what = if sub.is_empty() {
                format!("{verb} {resource}")
            } else {
                format!("{verb} {resource}/{sub}")
            };
            (what, *n)
        })
        .collect();
    items.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    items
        .iter()
        .map(|(what, n)| format!("{what} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Node;
    use kube::api::PostParams;

    fn key(verb: &str, resource: &str, sub: &str) -> (String, String, String) {
        (verb.into(), resource.into(), sub.into())
    }

    #[test]
    fn leases_are_left_out_and_items_sorted() {
        let mut counts = RequestCounts::new();
        counts.insert(key("patch", "nodes", ""), 10);
        counts.insert(key("update", "leases", ""), 99);
        counts.insert(key("patch", "services", "status"), 20);
        assert_eq!(total_without_leases(&counts), 30);
        assert_eq!(
            describe_requests(&counts),
            "patch services/status 20, patch nodes 10"
        );
    }

    #[tokio::test]
    async fn the_daemon_identity_is_counted_apart() {
        let dir = tempfile::tempdir().unwrap();
        let cluster = Cluster::start(dir.path(), None).await.unwrap();
        let admin: Api<Node> = Api::all(cluster.client());
        admin
            .create(&PostParams::default(), &crate::workload::tainted_node(0))
            .await
            .unwrap();
        let kubeconfig = kube::config::Kubeconfig::read_from(cluster.daemon_kubeconfig()).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap();
        let daemon: Api<Node> = Api::all(kube::Client::try_from(config).unwrap());
        daemon.get("bench-node-00000").await.unwrap();
        daemon.list(&ListParams::default()).await.unwrap();
        let counts = cluster.daemon_requests();
        assert_eq!(counts.get(&key("get", "nodes", "")), Some(&1));
        assert_eq!(counts.get(&key("list", "nodes", "")), Some(&1));
        assert_eq!(counts.get(&key("create", "nodes", "")), None);
        assert!(!cluster.daemon_watches("nodes"));
        cluster.clear_requests();
        assert!(cluster.daemon_requests().is_empty());
        assert_eq!(cluster.stored_events().await.unwrap(), (0, 0));
        cluster.shutdown().await;
    }
}
