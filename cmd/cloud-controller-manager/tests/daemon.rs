//! The daemon as a separate process against the in-memory API server: flags and exit codes, provider
//! errors, the HTTPS endpoint with delegated auth, and leader election between processes (failover when
//! the leader stops renewing, hand-over on SIGTERM, exit 1 on lease loss). They run the fake provider, so
//! they need the `fake` feature (on by default).
#![cfg(feature = "fake")]

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use http::HeaderValue;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use test_apiserver::{AccessRule, FaultRule, TestApiServer, UserInfo};

const BINARY: &str = env!("CARGO_BIN_EXE_cloud-controller-manager");
const READER_TOKEN: &str = "metrics-reader-token";
const NOBODY_TOKEN: &str = "nobody-token";
const LEASE: &str = "cloud-controller-manager";

/// Short leader-election timings: lease 3s, renew deadline 2s, retry 250ms.
const ELECTION: &[&str] = &[
    "--leader-elect-lease-duration=3s",
    "--leader-elect-renew-deadline=2s",
    "--leader-elect-retry-period=250ms",
];

/// A daemon process; killed when dropped.
struct Daemon {
    child: Child,
    stderr: PathBuf,
    port: u16,
    exited: Option<ExitStatus>,
}

impl Daemon {
    fn spawn(server: &TestApiServer, dir: &Path, name: &str, extra: &[&str]) -> Daemon {
        let cloud_config = dir.join("cloud.yaml");
        std::fs::write(&cloud_config, "clusterID: test-cluster\n").unwrap();
        let port = free_port();
        let stderr = dir.join(format!("{name}.log"));
        let mut command = Command::new(BINARY);
        command
            .arg("--cloud-provider=fake")
            .arg("--configure-cloud-routes=false")
            .arg(format!("--cloud-config={}", cloud_config.display()))
            .arg(format!(
                "--kubeconfig={}",
                server.kubeconfig_path().display()
            ))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--secure-port={port}"))
            .arg("--authentication-skip-lookup")
            .args(extra)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&stderr).unwrap());
        Daemon {
            child: command.spawn().unwrap(),
            stderr,
            port,
            exited: None,
        }
    }

    fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal} failed");
    }

    async fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                self.exited = Some(status);
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the daemon did not exit within {timeout:?}; log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// GET `path` on the daemon's endpoint with an optional bearer token.
    async fn get(&self, path: &str, token: Option<&str>) -> Option<(u16, String)> {
        let client = endpoint_client(&self.url(), token);
        let request = http::Request::get(path)
            .body(kube::client::Body::empty())
            .unwrap();
        let response = tokio::time::timeout(Duration::from_secs(2), client.send(request))
            .await
            .ok()?
            .ok()?;
        let status = response.status().as_u16();
        let body = response.into_body().collect_bytes().await.ok()?;
        Some((status, String::from_utf8_lossy(&body).into_owned()))
    }

    /// Waits until `/healthz` answers 200.
    async fn wait_serving(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Some((200, _)) = self.get("/healthz", None).await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the daemon never served /healthz; log:\n{}", self.log());
    }

    /// The value of `leader_election_master_status` (None if the endpoint does not answer).
    async fn leader_metric(&self, admin_token: &str) -> Option<u8> {
        let (status, text) = self.get("/metrics", Some(admin_token)).await?;
        assert_eq!(status, 200, "{text}");
        let prefix = format!("leader_election_master_status{{name=\"{LEASE}\"}} ");
        text.lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .map(|value| value.trim().parse().unwrap())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.exited.is_none() {
            let _ = Command::new("kill")
                .arg("-CONT")
                .arg(self.child.id().to_string())
                .status();
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The providers this build registers, as `--version` lists them (sorted).
fn compiled_in() -> String {
    let mut names = Vec::new();
    if cfg!(feature = "aws") {
        names.push("aws");
    }
    if cfg!(feature = "digitalocean") {
        names.push("digitalocean");
    }
    names.push("fake");
    names.join(", ")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn endpoint_client(url: &str, token: Option<&str>) -> kube::Client {
    let mut config = kube::Config::new(url.parse().unwrap());
    config.accept_invalid_certs = true;
    config.default_retry = false;
    if let Some(token) = token {
        config.headers.push((
            http::header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
        ));
    }
    kube::Client::try_from(config).unwrap()
}

async fn apiserver() -> TestApiServer {
    let server = TestApiServer::builder()
        .user(
            READER_TOKEN,
            UserInfo::new("metrics-reader", &["system:authenticated"]),
        )
        .user(
            NOBODY_TOKEN,
            UserInfo::new("nobody", &["system:authenticated"]),
        )
        .start()
        .await
        .unwrap();
    server.controls().allow(AccessRule {
        user: Some("metrics-reader".to_string()),
        verb: "get".to_string(),
        path: Some("/metrics".to_string()),
        ..AccessRule::default()
    });
    server
}

async fn lease_holder(server: &TestApiServer) -> Option<(String, i32)> {
    let api: Api<Lease> = Api::namespaced(server.client().unwrap(), "kube-system");
    let lease = api.get_opt(LEASE).await.unwrap()?;
    let spec = lease.spec?;
    Some((
        spec.holder_identity.unwrap_or_default(),
        spec.lease_transitions.unwrap_or_default(),
    ))
}

/// Waits until the Lease names a holder other than `previous` (and not empty); returns it.
async fn wait_for_new_holder(
    server: &TestApiServer,
    previous: Option<&str>,
    timeout: Duration,
) -> (String, i32) {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some((holder, transitions)) = lease_holder(server).await
            && !holder.is_empty()
            && Some(holder.as_str()) != previous
        {
            return (holder, transitions);
        }
        assert!(
            Instant::now() < deadline,
            "no new lease holder within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn run_to_end(args: &[&str]) -> (i32, String, String) {
    let output = Command::new(BINARY)
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn version_lists_the_compiled_in_providers() {
    let (code, stdout, _) = run_to_end(&["--version"]);
    assert_eq!(code, 0);
    assert_eq!(
        stdout,
        format!(
            "cloud-controller-manager v{}\ncompiled-in cloud providers: {}\n",
            env!("CARGO_PKG_VERSION"),
            compiled_in()
        )
    );
}

#[test]
fn an_unknown_provider_is_named_with_the_compiled_in_ones() {
    let (code, _, stderr) = run_to_end(&["--cloud-provider=nonesuch"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(&format!(
            r#"unknown cloud provider "nonesuch" (compiled-in providers: {})"#,
            compiled_in()
        )),
        "{stderr}"
    );
}

#[test]
fn provider_start_up_errors_exit_1() {
    let (code, _, stderr) = run_to_end(&["--cloud-provider=fake"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(
            "cloud provider \"fake\" could not find a cluster ID; refusing to run without one (pass \
             --allow-untagged-cloud"
        ),
        "{stderr}"
    );
    let (code, _, stderr) = run_to_end(&[
        "--cloud-provider=fake",
        "--cloud-config=/nonexistent/cloud.yaml",
    ]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("could not read cloud config file /nonexistent/cloud.yaml"),
        "{stderr}"
    );
}

#[test]
fn bad_flags_exit_2_with_their_messages() {
    let providers = compiled_in();
    let external = format!(
        "error: --cloud-provider: cloud provider \"external\" cannot be used here: \"external\" tells \
         kubelets and kube-controller-manager that a separate cloud-controller-manager runs the cloud \
         loops, and this program is that cloud-controller-manager; give it a concrete provider name \
         (--cloud-provider) (compiled-in providers: {providers})\n"
    );
    let empty = format!(
        "error: --cloud-provider: no cloud provider given: the cloud-controller-manager runs the \
         cloud-specific controllers and needs a concrete provider name (--cloud-provider) \
         (compiled-in providers: {providers})\n"
    );
    let table: &[(&[&str], &str)] = &[
        (
            &["--cloud-provider=fake", "--concurrent-node-syncs=0"],
            "error: --concurrent-node-syncs must be at least 1, got 0\n",
        ),
        (
            &[
                "--cloud-provider=fake",
                "--cluster-cidr=10.0.0.0/8,10.1.0.0/16",
            ],
            "error: --cluster-cidr \"10.0.0.0/8,10.1.0.0/16\": a dual-stack value needs one IPv4 and one \
             IPv6 CIDR, got two of the same family\n",
        ),
        (
            &["--cloud-provider=fake", "--leader-elect-renew-deadline=20s"],
            "error: --leader-elect-renew-deadline (20s) must be less than --leader-elect-lease-duration \
             (15s)\n",
        ),
        (
            &["--cloud-provider=fake", "--node-deletion-max-percent=101"],
            "error: --node-deletion-max-percent must be between 0 and 100, got 101\n",
        ),
        (
            &["--cloud-provider=fake", "--secure-port=65536"],
            "error: --secure-port must be between 0 and 65535 (0 disables serving), got 65536\n",
        ),
        (
            &["--cloud-provider=fake", "--tls-cert-file=/tmp/x.pem"],
            "error: --tls-cert-file requires --tls-private-key-file\n",
        ),
        (
            &["--cloud-provider=fake", "--controllers=*,-bogus"],
            "error: --controllers: unknown controller \"-bogus\"; valid values are \"*\", a name or \
             \"-name\" with name one of: cloud-node-controller (cloud-node), cloud-node-lifecycle-controller \
             (cloud-node-lifecycle), service-lb-controller (service), node-route-controller (route), \
             pv-label-controller (pv-label), tagging-controller (tagging)\n",
        ),
        (
            &["--cloud-provider=fake", "--controllers=*,firewall"],
            "error: --controllers: unknown controller \"firewall\"; valid values are \"*\", a name or \
             \"-name\" with name one of: cloud-node-controller (cloud-node), cloud-node-lifecycle-controller \
             (cloud-node-lifecycle), service-lb-controller (service), node-route-controller (route), \
             pv-label-controller (pv-label), tagging-controller (tagging)\n",
        ),
        (&["--cloud-provider=external"], &external),
        (&[], &empty),
    ];
    for (args, want) in table {
        let (code, _, stderr) = run_to_end(args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert_eq!(stderr, *want, "{args:?}");
    }
    // clap's own errors are usage errors too.
    for args in [
        &["--cloud-provider=fake", "--v=-1"][..],
        &["--cloud-provider=fake", "--node-monitor-period=5"],
        &["--cloud-provider=fake", "--log-format=xml"],
        &["--no-such-flag"],
    ] {
        let (code, _, stderr) = run_to_end(args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_health_and_metrics_over_tls_with_delegated_auth() {
    let server = apiserver().await;
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Daemon::spawn(&server, dir.path(), "ccm", &["--leader-elect=false"]);
    daemon.wait_serving().await;

    // Health endpoints are always allowed; readiness lists the leader-election and controller checks.
    let deadline = Instant::now() + Duration::from_secs(20);
    let body = loop {
        if let Some((200, body)) = daemon.get("/readyz?verbose", None).await
            && body.contains("cloud-node-controller")
        {
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "never ready; log:\n{}",
            daemon.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        body.starts_with("[+]ping ok\n[+]leaderElection ok\n"),
        "{body}"
    );
    assert!(body.contains("[+]cloud-node-controller ok\n"), "{body}");
    assert!(body.ends_with("readyz check passed\n"), "{body}");
    assert_eq!(
        daemon.get("/livez", None).await,
        Some((200, "ok".to_string()))
    );

    // /metrics: 401 without a token, 403 without permission, 200 with it.
    let (status, body) = daemon.get("/metrics", None).await.unwrap();
    assert_eq!(status, 401);
    let status_body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status_body["reason"], "Unauthorized");
    let (status, body) = daemon.get("/metrics", Some("not-a-token")).await.unwrap();
    assert_eq!(status, 401, "{body}");
    let (status, body) = daemon.get("/metrics", Some(NOBODY_TOKEN)).await.unwrap();
    assert_eq!(status, 403);
    let status_body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        status_body["message"],
        "forbidden: User \"nobody\" cannot get path \"/metrics\""
    );
    let (status, text) = daemon.get("/metrics", Some(READER_TOKEN)).await.unwrap();
    assert_eq!(status, 200, "{text}");
    for series in [
        "process_cpu_seconds_total ",
        "process_resident_memory_bytes ",
        "process_open_fds ",
        "process_start_time_seconds ",
        "leader_election_master_status{name=\"cloud-controller-manager\"} 1",
        "node_controller_cloud_provider_taint_removal_delay_seconds",
    ] {
        assert!(text.contains(series), "{series} missing from\n{text}");
    }

    // SIGTERM: a clean exit.
    daemon.signal("TERM");
    let status = daemon.wait_exit(Duration::from_secs(15)).await;
    assert_eq!(status.code(), Some(0), "log:\n{}", daemon.log());
}

/// `--profiling` (on by default): `/debug/flags/v` changes the log verbosity of the running daemon and
/// `/debug/pprof/` serves a CPU profile and jemalloc's heap profile (gzipped pprof); `/configz` has the
/// effective configuration, `kubernetes_build_info` the build. The paths are always-allowed here so the
/// test needs no token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debugging_handlers_change_the_verbosity_and_serve_profiles() {
    let server = apiserver().await;
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Daemon::spawn(
        &server,
        dir.path(),
        "ccm",
        &[
            "--leader-elect=false",
            "--node-monitor-period=100ms",
            "--authorization-always-allow-paths=/healthz,/debug/*,/configz",
        ],
    );
    daemon.wait_serving().await;
    let client = endpoint_client(&daemon.url(), None);
    let send = |request: http::Request<kube::client::Body>| {
        let client = client.clone();
        async move {
            let response = client.send(request).await.unwrap();
            let status = response.status().as_u16();
            let headers = response.headers().clone();
            let body = response.into_body().collect_bytes().await.unwrap().to_vec();
            (status, headers, body)
        }
    };
    assert!(!daemon.log().contains(" DEBUG "), "{}", daemon.log());
    let put = http::Request::put("/debug/flags/v")
        .body(kube::client::Body::from(b"4".to_vec()))
        .unwrap();
    let (status, _, body) = send(put).await;
    assert_eq!(
        (status, String::from_utf8_lossy(&body).into_owned()),
        (
            200,
            "successfully set klog.logging.verbosity to 4\n".to_string()
        )
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !daemon.log().contains(" DEBUG ") {
        assert!(
            Instant::now() < deadline,
            "no debug line after -v 4:\n{}",
            daemon.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let get = |path: &str| {
        http::Request::get(path)
            .body(kube::client::Body::empty())
            .unwrap()
    };
    let (status, headers, heap) = send(get("/debug/pprof/heap")).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&heap));
    assert_eq!(headers["content-type"], "application/octet-stream");
    assert_eq!(&heap[..2], &[0x1f, 0x8b], "a gzipped pprof profile");
    let (status, _, profile) = send(get("/debug/pprof/profile?seconds=1")).await;
    assert_eq!(status, 200);
    assert!(!profile.is_empty());
    let (status, _, configz) = send(get("/configz")).await;
    assert_eq!(status, 200);
    let configz: serde_json::Value = serde_json::from_slice(&configz).unwrap();
    let config = &configz["cloudcontrollermanager.config.k8s.io"];
    assert_eq!(config["KubeCloudShared"]["CloudProvider"]["Name"], "fake");
    assert_eq!(
        config["NodeLifecycleController"]["NodeMonitorPeriod"],
        "100ms"
    );
    assert_eq!(config["Generic"]["LeaderElection"]["leaderElect"], false);

    daemon.signal("TERM");
    let status = daemon.wait_exit(Duration::from_secs(15)).await;
    assert_eq!(status.code(), Some(0), "log:\n{}", daemon.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_election_between_processes() {
    let server = apiserver().await;
    let admin = server.token().to_string();
    let dir = tempfile::tempdir().unwrap();
    let first = Daemon::spawn(&server, dir.path(), "first", ELECTION);
    let second = Daemon::spawn(&server, dir.path(), "second", ELECTION);
    first.wait_serving().await;
    second.wait_serving().await;

    // Exactly one leads.
    let (holder, transitions) = wait_for_new_holder(&server, None, Duration::from_secs(10)).await;
    assert_eq!(transitions, 0);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let statuses = (
        first.leader_metric(&admin).await.unwrap(),
        second.leader_metric(&admin).await.unwrap(),
    );
    let (mut leader, mut standby) = match statuses {
        (1, 0) => (first, second),
        (0, 1) => (second, first),
        other => panic!("expected exactly one leader, got {other:?}"),
    };
    assert!(
        leader.log().contains(&holder),
        "the leader logs its identity"
    );

    // The leader stops renewing (SIGSTOP): the standby takes over after about one lease duration.
    leader.signal("STOP");
    let stopped = Instant::now();
    let (new_holder, transitions) =
        wait_for_new_holder(&server, Some(&holder), Duration::from_secs(10)).await;
    let took = stopped.elapsed();
    assert!(
        took >= Duration::from_millis(2_000),
        "took over after {took:?}"
    );
    assert!(
        took <= Duration::from_millis(5_000),
        "took over after {took:?}"
    );
    assert_eq!(transitions, 1);
    assert_eq!(standby.leader_metric(&admin).await, Some(1));

    // The old leader resumes, finds the lease gone and exits 1.
    leader.signal("CONT");
    let status = leader.wait_exit(Duration::from_secs(10)).await;
    assert_eq!(status.code(), Some(1), "log:\n{}", leader.log());
    assert!(
        leader.log().contains("leader election lost"),
        "{}",
        leader.log()
    );

    // A new standby; SIGTERM of the leader hands over at once (the lease is released).
    let third = Daemon::spawn(&server, dir.path(), "third", ELECTION);
    third.wait_serving().await;
    assert_eq!(third.leader_metric(&admin).await, Some(0));
    standby.signal("TERM");
    let terminated = Instant::now();
    let status = standby.wait_exit(Duration::from_secs(15)).await;
    assert_eq!(status.code(), Some(0), "log:\n{}", standby.log());
    let (third_holder, transitions) =
        wait_for_new_holder(&server, Some(&new_holder), Duration::from_secs(10)).await;
    let took = terminated.elapsed();
    assert!(
        took < Duration::from_millis(2_000),
        "hand-over took {took:?}, the lease duration is 3s"
    );
    assert_eq!(transitions, 2);
    assert!(third.log().contains(&third_holder));
    leader = third;

    // A standby-free leader stopping cleanly also exits 0.
    leader.signal("INT");
    let status = leader.wait_exit(Duration::from_secs(15)).await;
    assert_eq!(status.code(), Some(0), "log:\n{}", leader.log());
    assert_eq!(lease_holder(&server).await.unwrap().0, "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_lease_exits_1() {
    let server = apiserver().await;
    let dir = tempfile::tempdir().unwrap();
    let mut daemon = Daemon::spawn(&server, dir.path(), "ccm", ELECTION);
    wait_for_new_holder(&server, None, Duration::from_secs(15)).await;
    server
        .controls()
        .fail(FaultRule::new(500).verb("update").resource("leases"));
    let failing = Instant::now();
    let status = daemon.wait_exit(Duration::from_secs(10)).await;
    assert_eq!(status.code(), Some(1), "log:\n{}", daemon.log());
    assert!(
        failing.elapsed() >= Duration::from_millis(1_500),
        "exited after {:?}, before the renew deadline",
        failing.elapsed()
    );
    assert!(
        daemon
            .log()
            .contains("leader election lost: failed to renew lease kube-system/cloud-controller-manager within the renew deadline (2s)"),
        "{}",
        daemon.log()
    );
}

/// Leader migration: the controllers a LeaderMigrationConfiguration names for this component run only
/// while the daemon also holds the migration Lease; those named for kube-controller-manager never run here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_migration_runs_the_migrated_controllers_under_the_second_lease() {
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
    let server = apiserver().await;
    let leases: Api<Lease> = Api::namespaced(server.client().unwrap(), "kube-system");
    // kube-controller-manager holds the migration Lease for now.
    leases
        .create(
            &Default::default(),
            &Lease {
                metadata: ObjectMeta {
                    name: Some("cloud-migration".into()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some("kube-controller-manager-1_abc".into()),
                    lease_duration_seconds: Some(3600),
                    renew_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
                    ..LeaseSpec::default()
                }),
            },
        )
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("migration.yaml");
    std::fs::write(
        &config,
        concat!(
            "apiVersion: controllermanager.config.k8s.io/v1\n",
            "kind: LeaderMigrationConfiguration\n",
            "leaderName: cloud-migration\n",
            "controllerLeaders:\n",
            "- name: service-lb-controller\n",
            "  component: '*'\n",
            "- name: cloud-node-lifecycle-controller\n",
            "  component: kube-controller-manager\n",
        ),
    )
    .unwrap();
    let migration_flag = format!("--leader-migration-config={}", config.display());
    let mut args = ELECTION.to_vec();
    args.extend(["--enable-leader-migration", migration_flag.as_str()]);
    let daemon = Daemon::spawn(&server, dir.path(), "ccm", &args);
    daemon.wait_serving().await;
    let (holder, _) = wait_for_new_holder(&server, None, Duration::from_secs(15)).await;
    let checks = |daemon: &Daemon| {
        let daemon = daemon.url();
        async move {
            let client = endpoint_client(&daemon, None);
            let request = http::Request::get("/healthz?verbose")
                .body(kube::client::Body::empty())
                .unwrap();
            let response = client.send(request).await.unwrap();
            String::from_utf8_lossy(&response.into_body().collect_bytes().await.unwrap())
                .into_owned()
        }
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    while !checks(&daemon)
        .await
        .contains("[+]cloud-node-controller ok")
    {
        assert!(Instant::now() < deadline, "log:\n{}", daemon.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = checks(&daemon).await;
    assert!(!before.contains("service-lb-controller"), "{before}");
    assert!(
        !before.contains("cloud-node-lifecycle-controller"),
        "{before}"
    );
    // kube-controller-manager hands the migration Lease over.
    leases
        .delete("cloud-migration", &Default::default())
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while !checks(&daemon)
        .await
        .contains("[+]service-lb-controller ok")
    {
        assert!(Instant::now() < deadline, "log:\n{}", daemon.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let migration = leases.get("cloud-migration").await.unwrap();
    assert_eq!(
        migration.spec.unwrap().holder_identity.as_deref(),
        Some(holder.as_str()),
        "the same identity holds both Leases"
    );
    let after = checks(&daemon).await;
    assert!(
        !after.contains("cloud-node-lifecycle-controller"),
        "{after}"
    );
    assert!(
        daemon
            .log()
            .contains("leader migration: starting migrated controllers"),
        "{}",
        daemon.log()
    );
}

#[test]
fn provider_controllers_are_checked_with_the_flags() {
    if !cfg!(feature = "digitalocean") {
        return;
    }
    // The DigitalOcean provider declares its firewall controller: a typo is a usage error naming it.
    let (code, _, stderr) =
        run_to_end(&["--cloud-provider=digitalocean", "--controllers=*,-firewal"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.starts_with("error: --controllers: unknown controller \"-firewal\"")
            && stderr.ends_with(
                "pv-label-controller (pv-label), tagging-controller (tagging), firewall-controller (firewall), tags-controller (tags)\n"
            ),
        "{stderr}"
    );
    // Its right name passes; the daemon then stops at the provider, for want of a token.
    let output = Command::new(BINARY)
        .args(["--cloud-provider=digitalocean", "--controllers=*,-firewall"])
        .env_remove("RUST_LOG")
        .env_remove("KUBECONFIG")
        .env_remove("DO_ACCESS_TOKEN")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("no DigitalOcean API token"), "{stderr}");
}

#[test]
fn a_half_configured_public_access_firewall_stops_start_up_naming_the_variable() {
    if !cfg!(feature = "digitalocean") {
        return;
    }
    let output = Command::new(BINARY)
        .args(["--cloud-provider=digitalocean"])
        .env_remove("RUST_LOG")
        .env_remove("KUBECONFIG")
        .env_remove("PUBLIC_ACCESS_FIREWALL_TAGS")
        .env("DO_ACCESS_TOKEN", "dop_v1_test")
        .env("PUBLIC_ACCESS_FIREWALL_NAME", "k8s-public-access")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("PUBLIC_ACCESS_FIREWALL_TAGS")
            && stderr.contains("is required when managing the public-access firewall"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("dop_v1_test"),
        "the token was printed: {stderr}"
    );
}
