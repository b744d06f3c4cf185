//! The cluster under the daemon: the in-memory API server (`test_apiserver`) running in the benchmark's
//! process, with a separate identity for the daemon so that its requests can be told apart from the
//! benchmark's own (workload creation, the completion watches).
//!
//! The server is sized so that it is not what limits the daemon: a long watch history and deep watch
//! buffers (a slow watcher is never cut off during a burst), and a request log large enough for a whole
//! scenario.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::ListParams;
use test_apiserver::{TestApiServer, UserInfo};

/// The bearer token of the daemon's kubeconfig.
const DAEMON_TOKEN: &str = "ccm-bench-daemon-token";
/// The identity the daemon's token authenticates as.
pub const DAEMON_USER: &str = "system:serviceaccount:kube-system:cloud-controller-manager";
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
    server: TestApiServer,
    client: kube::Client,
    daemon_kubeconfig: PathBuf,
}

impl Cluster {
    /// Starts the API server (HTTPS, like a real one) and writes the daemon's kubeconfig into `dir`.
    pub async fn start(dir: &Path) -> anyhow::Result<Cluster> {
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
            server,
            client,
            daemon_kubeconfig,
        })
    }

    /// The benchmark's own (administrator) client.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// The kubeconfig for the daemon (its own token and identity).
    pub fn daemon_kubeconfig(&self) -> &Path {
        &self.daemon_kubeconfig
    }

    /// The daemon's requests since the last [`Cluster::clear_requests`], by (verb, resource, subresource).
    pub fn daemon_requests(&self) -> RequestCounts {
        let mut counts = RequestCounts::new();
        for record in self.server.controls().request_log() {
            if record.user == DAEMON_USER {
                *counts
                    .entry((record.verb, record.resource, record.subresource))
                    .or_insert(0) += 1;
            }
        }
        counts
    }

    /// Whether the daemon has opened a watch on `resource` (its informer listed it completely).
    pub fn daemon_watches(&self, resource: &str) -> bool {
        self.server
            .controls()
            .request_log()
            .iter()
            .any(|r| r.user == DAEMON_USER && r.verb == "watch" && r.resource == resource)
    }

    /// Forgets the requests served so far.
    pub fn clear_requests(&self) {
        self.server.controls().clear_request_log();
    }

    /// Event occurrences stored (an aggregated event counts its `count`), and Event objects stored.
    pub async fn stored_events(&self) -> anyhow::Result<(u64, u64)> {
        let events: Api<Event> = Api::all(self.client.clone());
        let list = events
            .list(&ListParams::default())
            .await
            .context("cannot list events")?;
        let occurrences = list
            .items
            .iter()
            .map(|e| e.count.map_or(1, |c| u64::try_from(c).unwrap_or(1).max(1)))
            .sum();
        Ok((occurrences, list.items.len() as u64))
    }

    /// Stops the server.
    pub async fn shutdown(self) {
        self.server.shutdown().await;
    }
}

/// The total of `counts`, leaving out leader election (Leases), which is not per-object work.
pub fn total_without_leases(counts: &RequestCounts) -> u64 {
    counts
        .iter()
        .filter(|((_, resource, _), _)| resource != "leases")
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
        let cluster = Cluster::start(dir.path()).await.unwrap();
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
