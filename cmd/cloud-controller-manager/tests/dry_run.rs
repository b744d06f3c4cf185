//! `--dry-run` as a separate process against the in-memory API server with the fake provider: on a cluster
//! the controllers have not reconciled, it reports every change it would make, exits 3 and persists
//! nothing; after a normal run has reconciled the cluster, a dry run against the cloud as that run left it
//! reports every object in sync and exits 0.
#![cfg(feature = "fake")]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, PersistentVolume, Service};
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};
use test_apiserver::TestApiServer;

const BINARY: &str = env!("CARGO_BIN_EXE_cloud-controller-manager");
const TAINT_UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";

/// The daemon's flags, but for the cloud-config and the mode.
fn flags(server: &TestApiServer, cloud_config: &Path) -> Vec<String> {
    vec![
        "--cloud-provider=fake".into(),
        format!("--cloud-config={}", cloud_config.display()),
        format!("--kubeconfig={}", server.kubeconfig_path().display()),
        "--cluster-cidr=10.244.0.0/16".into(),
        "--controllers=*,pv-label".into(),
        "--leader-elect=false".into(),
        "--secure-port=0".into(),
        "--node-monitor-period=200ms".into(),
        "--route-reconciliation-period=200ms".into(),
    ]
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs a dry run to its end: exit code, stdout, stderr.
fn dry_run(server: &TestApiServer, cloud_config: &Path, output: &str) -> (i32, String, String) {
    let out = Command::new(BINARY)
        .args(flags(server, cloud_config))
        .arg("--dry-run")
        .arg(format!("--dry-run-output={output}"))
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Two tainted nodes with pod CIDRs, a node whose instance is terminated, a LoadBalancer Service and a
/// PersistentVolume on a cloud volume.
async fn seed(client: &kube::Client) {
    let nodes: Api<Node> = Api::all(client.clone());
    for (name, cidr) in [("n1", "10.244.1.0/24"), ("n2", "10.244.2.0/24")] {
        let node = json!({
            "metadata": {"name": name},
            "spec": {
                "podCIDR": cidr, "podCIDRs": [cidr],
                "taints": [{"key": TAINT_UNINITIALIZED, "value": "true", "effect": "NoSchedule"}],
            },
        });
        nodes
            .create(
                &PostParams::default(),
                &serde_json::from_value(node).unwrap(),
            )
            .await
            .unwrap();
    }
    let gone = json!({"metadata": {"name": "gone"}});
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(gone).unwrap(),
        )
        .await
        .unwrap();
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let web = json!({
        "metadata": {"name": "web"},
        "spec": {"type": "LoadBalancer", "ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
    });
    services
        .create(
            &PostParams::default(),
            &serde_json::from_value(web).unwrap(),
        )
        .await
        .unwrap();
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let pv = json!({
        "metadata": {"name": "pv1"},
        "spec": {
            "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "csi": {"driver": "fake.csi.example.com", "volumeHandle": "vol-1"},
        },
    });
    volumes
        .create(&PostParams::default(), &serde_json::from_value(pv).unwrap())
        .await
        .unwrap();
}

fn cloud_config(dir: &Path, admin_port: u16) -> std::path::PathBuf {
    let path = dir.join("cloud.yaml");
    std::fs::write(
        &path,
        format!(
            "clusterID: dry-run\nadminAddress: 127.0.0.1:{admin_port}\n\
             instances:\n  - name: gone\n    state: terminated\n\
             volumes:\n  - name: pv1\n    zone: fake-region-1a\n"
        ),
    )
    .unwrap();
    path
}

/// The report's entry of `object`.
fn entry<'a>(report: &'a Value, object: &str) -> &'a Value {
    report["objects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["object"] == object)
        .unwrap_or_else(|| panic!("{object} is not in the report: {report:#}"))
}

fn changes(report: &Value, object: &str) -> Vec<String> {
    entry(report, object)["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .collect()
}

fn has_change(report: &Value, object: &str, prefix: &str) -> bool {
    changes(report, object)
        .iter()
        .any(|c| c.starts_with(prefix))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_reports_every_change_and_makes_none() {
    let server = TestApiServer::start().await.unwrap();
    let client = server.client().unwrap();
    seed(&client).await;
    let dir = tempfile::tempdir().unwrap();
    let config = cloud_config(dir.path(), free_port());
    server.controls().clear_request_log();

    let (code, stdout, stderr) = dry_run(&server, &config, "json");
    assert_eq!(code, 3, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["exitCode"], 3);
    for node in ["node/n1", "node/n2"] {
        assert_eq!(entry(&report, node)["status"], "would change", "{report:#}");
        assert!(
            has_change(
                &report,
                node,
                &format!("API PATCH /api/v1/nodes/{}", &node[5..])
            ),
            "{report:#}"
        );
    }
    assert!(
        has_change(&report, "node/gone", "API DELETE /api/v1/nodes/gone"),
        "{report:#}"
    );
    assert!(
        has_change(
            &report,
            "service/default/web",
            "cloud ensure_load_balancer: service default/web"
        ),
        "{report:#}"
    );
    assert!(
        has_change(
            &report,
            "persistentvolume/pv1",
            "API PUT /api/v1/persistentvolumes/pv1"
        ),
        "{report:#}"
    );
    assert!(
        changes(&report, "persistentvolume/pv1")
            .iter()
            .any(|c| c.contains("topology.kubernetes.io/zone")),
        "{report:#}"
    );
    assert!(
        has_change(&report, "route/n1/10.244.1.0/24", "cloud create_route"),
        "{report:#}"
    );
    for object in report["objects"].as_array().unwrap() {
        assert_eq!(object["errors"], json!([]), "{report:#}");
    }
    // The same as a table; no event about a refused call (it would have been made).
    let (code, table, _) = dry_run(&server, &config, "table");
    assert_eq!(code, 3);
    assert!(
        table.starts_with("dry run: 7 objects: 0 in sync, 7 would change, 0 with errors"),
        "{table}"
    );
    assert!(
        table.contains("event Normal EnsuringLoadBalancer"),
        "{table}"
    );
    assert!(!table.contains("SyncLoadBalancerFailed"), "{table}");

    // Nothing changed: every write the dry run sent was a dry run, and no Lease was touched.
    let log = server.controls().request_log();
    let writes: Vec<_> = log
        .iter()
        .filter(|r| matches!(r.verb.as_str(), "create" | "update" | "patch" | "delete"))
        .collect();
    assert!(!writes.is_empty());
    for write in &writes {
        assert!(write.dry_run, "a write without dryRun=All: {write:?}");
    }
    assert!(log.iter().all(|r| r.resource != "leases"), "{log:?}");
    let nodes: Api<Node> = Api::all(client.clone());
    let n1 = nodes.get("n1").await.unwrap();
    let taints = n1.spec.unwrap().taints.unwrap_or_default();
    assert!(taints.iter().any(|t| t.key == TAINT_UNINITIALIZED));
    assert!(nodes.get_opt("gone").await.unwrap().is_some());
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let web = services.get("web").await.unwrap();
    assert!(web.metadata.finalizers.unwrap_or_default().is_empty());
    assert!(web.status.and_then(|s| s.load_balancer?.ingress).is_none());
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let pv = volumes.get("pv1").await.unwrap();
    assert!(pv.metadata.labels.unwrap_or_default().is_empty());
}

/// Waits until `done` holds, up to 30 s; on time-out, fails showing `log`.
async fn wait_until<F, Fut>(what: &str, log: &Path, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done().await {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether the daemon has reconciled the seeded cluster.
async fn reconciled(client: &kube::Client) -> bool {
    let nodes: Api<Node> = Api::all(client.clone());
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let Ok(list) = nodes.list(&Default::default()).await else {
        return false;
    };
    let initialized = list.items.len() == 2
        && list.items.iter().all(|n| {
            let spec = n.spec.clone().unwrap_or_default();
            let status = n.status.clone().unwrap_or_default();
            spec.taints
                .unwrap_or_default()
                .iter()
                .all(|t| t.key != TAINT_UNINITIALIZED)
                && status
                    .conditions
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "NetworkUnavailable" && c.status == "False")
        });
    let balanced = services.get("web").await.is_ok_and(|s| {
        s.status
            .and_then(|s| s.load_balancer?.ingress)
            .is_some_and(|i| !i.is_empty())
    });
    let labeled = volumes
        .get("pv1")
        .await
        .is_ok_and(|pv| pv.metadata.labels.unwrap_or_default().len() >= 2);
    initialized && balanced && labeled
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_normal_run_a_dry_run_finds_everything_in_sync() {
    let server = TestApiServer::start().await.unwrap();
    let client = server.client().unwrap();
    seed(&client).await;
    let dir = tempfile::tempdir().unwrap();
    let admin_port = free_port();
    let config = cloud_config(dir.path(), admin_port);
    let log_path = dir.path().join("daemon.log");
    let mut daemon = Command::new(BINARY)
        .args(flags(&server, &config))
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    wait_until("the daemon to reconcile the cluster", &log_path, || {
        reconciled(&client)
    })
    .await;

    // The cloud as the daemon left it, as a cloud-config for the next process.
    let exported = reqwest_get(&format!("http://127.0.0.1:{admin_port}/config")).await;
    Command::new("kill")
        .args(["-TERM", &daemon.id().to_string()])
        .status()
        .unwrap();
    let status = daemon.wait().unwrap();
    assert!(
        status.success(),
        "{}",
        std::fs::read_to_string(&log_path).unwrap_or_default()
    );
    let next = dir.path().join("exported.yaml");
    std::fs::write(&next, &exported).unwrap();

    let (code, stdout, stderr) = dry_run(&server, &next, "table");
    assert_eq!(
        code, 0,
        "cloud-config:\n{exported}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stdout.starts_with("dry run: 6 objects: 6 in sync, 0 would change, 0 with errors"),
        "{stdout}"
    );
    for object in [
        "node/n1",
        "node/n2",
        "service/default/web",
        "persistentvolume/pv1",
        "route/n1/10.244.1.0/24",
        "route/n2/10.244.2.0/24",
    ] {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(object) && l.contains("in sync")),
            "{object} is not in sync:\n{stdout}"
        );
    }
}

/// The body of a plain-HTTP GET (the fake cloud's admin API).
async fn reqwest_get(url: &str) -> String {
    let uri: http::Uri = url.parse().unwrap();
    let authority = uri.authority().unwrap().to_string();
    let mut stream = tokio::net::TcpStream::connect(&authority).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n",
        uri.path()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_string()
}

#[test]
fn a_dry_run_with_a_bad_cloud_config_or_no_api_server_fails_fast() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "instances:\n  - name: a\n    zone: nowhere\n").unwrap();
    let started = Instant::now();
    let out = Command::new(BINARY)
        .args([
            "--cloud-provider=fake",
            &format!("--cloud-config={}", bad.display()),
            "--dry-run",
        ])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("instances[0].zone: \"nowhere\" is not a configured zone"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());

    let good = dir.path().join("good.yaml");
    std::fs::write(&good, "clusterID: x\n").unwrap();
    let out = Command::new(BINARY)
        .args([
            "--cloud-provider=fake",
            &format!("--cloud-config={}", good.display()),
            &format!("--master=http://127.0.0.1:{}", free_port()),
            "--dry-run",
        ])
        .env_remove("RUST_LOG")
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("the API server did not become reachable within 5s"),
        "{stderr}"
    );
    assert!(started.elapsed() < Duration::from_secs(30));
}

/// A controller that cannot start (the route controller without `--cluster-cidr`) fails the dry run with
/// exit code 1 and its reason, and the other controllers still make their pass and report what they found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_that_cannot_start_fails_the_dry_run_and_the_others_still_report() {
    let server = TestApiServer::start().await.unwrap();
    let client = server.client().unwrap();
    seed(&client).await;
    let dir = tempfile::tempdir().unwrap();
    let config = cloud_config(dir.path(), free_port());
    let args: Vec<String> = flags(&server, &config)
        .into_iter()
        .filter(|flag| !flag.starts_with("--cluster-cidr="))
        .collect();
    let out = Command::new(BINARY)
        .args(&args)
        .args(["--dry-run", "--dry-run-output=table"])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stdout.starts_with("dry run: 6 objects: 0 in sync, 5 would change, 1 with errors"),
        "{stdout}"
    );
    let failure = stdout
        .lines()
        .find(|line| line.starts_with("(not about one object)"))
        .unwrap_or_else(|| panic!("no failure row:\n{stdout}"));
    assert!(
        failure.contains("error: node-route-controller: ")
            && failure.contains("--cluster-cidr is empty"),
        "{failure}"
    );
    for object in [
        "node/n1",
        "node/n2",
        "node/gone",
        "service/default/web",
        "persistentvolume/pv1",
    ] {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(object) && l.contains("would change")),
            "{object} is not reported:\n{stdout}"
        );
    }
    assert!(!stdout.contains("route/"), "{stdout}");
}
