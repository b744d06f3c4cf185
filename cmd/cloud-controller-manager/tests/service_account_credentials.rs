//! `--use-service-account-credentials` end to end: the daemon, as a separate process with the fake
//! provider, against the in-memory API server. The request log shows who did what: the controllers write
//! as their own ServiceAccounts, while the shared watches, the token requests and the events use the
//! daemon's own identity. Without the ServiceAccounts the daemon stops with an error naming the missing one.
#![cfg(feature = "fake")]

use std::collections::BTreeSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Service, ServiceAccount};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use test_apiserver::{RequestRecord, TestApiServer, UserInfo};

const BINARY: &str = env!("CARGO_BIN_EXE_cloud-controller-manager");
const DAEMON_TOKEN: &str = "daemon-token";
const DAEMON_USER: &str = "system:serviceaccount:kube-system:cloud-controller-manager";
const TAINT_UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";

fn sa_user(controller: &str) -> String {
    format!("system:serviceaccount:kube-system:{controller}")
}

/// A daemon process; killed when dropped.
struct Daemon {
    child: Child,
    log: PathBuf,
}

impl Daemon {
    /// Runs the daemon with its own identity (not the administrator's) and `extra` flags.
    fn spawn(server: &TestApiServer, dir: &Path, extra: &[&str]) -> Daemon {
        let cloud_config = dir.join("cloud.yaml");
        std::fs::write(&cloud_config, "clusterID: test-cluster\n").unwrap();
        let kubeconfig = dir.join("daemon.kubeconfig");
        let yaml = server.kubeconfig_yaml().replace(
            &format!("token: {}", server.token()),
            &format!("token: {DAEMON_TOKEN}"),
        );
        assert!(yaml.contains(DAEMON_TOKEN));
        std::fs::write(&kubeconfig, yaml).unwrap();
        let log = dir.join("daemon.log");
        let child = Command::new(BINARY)
            .arg("--cloud-provider=fake")
            .arg("--configure-cloud-routes=false")
            .arg(format!("--cloud-config={}", cloud_config.display()))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg("--leader-elect=false")
            .arg("--secure-port=0")
            .arg("--use-service-account-credentials")
            .args(extra)
            .env_remove("RUST_LOG")
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Daemon { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for the process to exit; its exit code.
    async fn exit_code(&mut self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(
                Instant::now() < deadline,
                "the daemon did not exit within {timeout:?}; log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn apiserver() -> TestApiServer {
    TestApiServer::builder()
        .user(
            DAEMON_TOKEN,
            UserInfo::new(
                DAEMON_USER,
                &[
                    "system:serviceaccounts",
                    "system:serviceaccounts:kube-system",
                    "system:authenticated",
                ],
            ),
        )
        .start()
        .await
        .unwrap()
}

async fn create_accounts(client: &kube::Client, names: &[&str]) {
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), "kube-system");
    for name in names {
        let account = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        api.create(&PostParams::default(), &account).await.unwrap();
    }
}

async fn wait_until<F, Fut>(timeout: Duration, what: &str, daemon: &Daemon, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !check().await {
        assert!(
            Instant::now() < deadline,
            "{what} did not happen within {timeout:?}; daemon log:\n{}",
            daemon.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn is_write(record: &RequestRecord) -> bool {
    matches!(
        record.verb.as_str(),
        "create" | "update" | "patch" | "delete" | "deletecollection"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controllers_write_as_their_service_accounts_and_watch_as_the_daemon() {
    let server = apiserver().await;
    let admin = server.client().unwrap();
    // The accounts of every controller `--controllers=*,pv-label` starts, named like upstream's clients
    // (both node controllers are node-controller; node-route-controller needs --allocate-node-cidrs).
    create_accounts(
        &admin,
        &["node-controller", "service-controller", "pvl-controller"],
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::spawn(
        &server,
        dir.path(),
        &["--node-monitor-period=1s", "--controllers=*,pv-label"],
    );

    let nodes: Api<Node> = Api::all(admin.clone());
    let node = serde_json::from_value(json!({
        "metadata": {"name": "node-a", "labels": {"kubernetes.io/hostname": "node-a"}},
        "spec": {"taints": [{"key": TAINT_UNINITIALIZED, "value": "true", "effect": "NoSchedule"}]},
        "status": {
            "addresses": [{"type": "InternalIP", "address": "10.0.0.10"}],
            "conditions": [{"type": "Ready", "status": "True"}]
        }
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let services: Api<Service> = Api::namespaced(admin.clone(), "default");
    let service = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"type": "LoadBalancer", "selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}
    }))
    .unwrap();
    services
        .create(&PostParams::default(), &service)
        .await
        .unwrap();

    wait_until(
        Duration::from_secs(30),
        "node initialization",
        &daemon,
        || async {
            nodes.get("node-a").await.is_ok_and(|n| {
                let spec = n.spec.unwrap_or_default();
                spec.provider_id.is_some()
                    && !spec
                        .taints
                        .unwrap_or_default()
                        .iter()
                        .any(|t| t.key == TAINT_UNINITIALIZED)
            })
        },
    )
    .await;
    wait_until(
        Duration::from_secs(30),
        "load-balancer ingress",
        &daemon,
        || async {
            services.get("web").await.is_ok_and(|s| {
                s.status
                    .and_then(|s| s.load_balancer)
                    .and_then(|lb| lb.ingress)
                    .is_some_and(|i| !i.is_empty())
            })
        },
    )
    .await;

    let log: Vec<RequestRecord> = server
        .controls()
        .request_log()
        .into_iter()
        .filter(|r| r.user != "admin")
        .collect();
    let describe = |r: &RequestRecord| {
        format!(
            "{} {}{}{} by {} ({})",
            r.verb,
            r.resource,
            if r.subresource.is_empty() { "" } else { "/" },
            r.subresource,
            r.user,
            r.code
        )
    };
    let all: Vec<String> = log.iter().map(describe).collect();

    // Node writes come from node-controller's account, service writes from service-controller's.
    let node_writers: BTreeSet<&str> = log
        .iter()
        .filter(|r| r.resource == "nodes" && is_write(r))
        .map(|r| r.user.as_str())
        .collect();
    assert_eq!(
        node_writers,
        BTreeSet::from([sa_user("node-controller").as_str()]),
        "{all:#?}"
    );
    assert!(
        log.iter().any(|r| r.resource == "nodes"
            && r.verb == "patch"
            && r.user == sa_user("node-controller")
            && r.code == 200),
        "{all:#?}"
    );
    let service_writers: BTreeSet<&str> = log
        .iter()
        .filter(|r| r.resource == "services" && is_write(r))
        .map(|r| r.user.as_str())
        .collect();
    assert_eq!(
        service_writers,
        BTreeSet::from([sa_user("service-controller").as_str()]),
        "{all:#?}"
    );
    assert!(
        log.iter().any(|r| r.resource == "services"
            && r.subresource == "status"
            && r.verb == "patch"
            && r.code == 200),
        "{all:#?}"
    );

    // The shared watches (and their lists) are the daemon's own.
    for resource in ["nodes", "services", "persistentvolumes"] {
        let watchers: BTreeSet<&str> = log
            .iter()
            .filter(|r| r.resource == resource && r.verb == "watch")
            .map(|r| r.user.as_str())
            .collect();
        assert_eq!(
            watchers,
            BTreeSet::from([DAEMON_USER]),
            "{resource}: {all:#?}"
        );
    }
    // The tokens were asked for by the daemon, for the account of every started controller.
    let token_requests: BTreeSet<(&str, &str)> = log
        .iter()
        .filter(|r| r.resource == "serviceaccounts" && r.subresource == "token")
        .map(|r| (r.name.as_str(), r.user.as_str()))
        .collect();
    assert_eq!(
        token_requests,
        BTreeSet::from([
            ("node-controller", DAEMON_USER),
            ("pvl-controller", DAEMON_USER),
            ("service-controller", DAEMON_USER),
        ]),
        "{all:#?}"
    );
    // Events keep the daemon's event client.
    assert!(
        log.iter()
            .filter(|r| r.resource == "events" && is_write(r))
            .all(|r| r.user == DAEMON_USER),
        "{all:#?}"
    );
    // No request was refused (refused requests are not logged, the daemon's log names them).
    let daemon_log = daemon.log();
    assert!(!daemon_log.contains("Unauthorized"), "{daemon_log}");
    assert!(!daemon_log.contains("Forbidden"), "{daemon_log}");
    assert_eq!(server.controls().live_service_account_tokens(), 4);
    drop(daemon);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_service_account_stops_the_daemon() {
    let server = apiserver().await;
    create_accounts(&server.client().unwrap(), &["node-controller"]).await;
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Daemon::spawn(&server, dir.path(), &["--controllers=cloud-node,service"]);
    let code = daemon.exit_code(Duration::from_secs(30)).await;
    let log = daemon.log();
    assert_eq!(code, Some(1), "log:\n{log}");
    assert!(
        log.contains(
            "--use-service-account-credentials: cannot get a token for ServiceAccount \
             kube-system/service-controller: 404 NotFound"
        ),
        "log:\n{log}"
    );
    assert!(!log.contains(DAEMON_TOKEN), "the log shows a token:\n{log}");
}
