//! The harness: a Kubernetes client, the fake cloud's admin API, simulated kubelets and, for local runs,
//! the in-process API server with CCM replicas running as separate processes.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use test_apiserver::{AccessRule, TestApiServer, UserInfo};

use crate::HarnessError;
use crate::admin::FakeAdmin;
use crate::audit::{AuditedRequest, read_audit_log};
use crate::ccm::{CcmProcess, locate_binary};
use crate::config::{HarnessConfig, Mode};
use crate::kubelet::KubeletFleet;
use crate::rbac::ApiRequest;
use crate::wait::{Check, wait_for};

/// The CCM's ServiceAccount (as in `deploy/base/rbac.yaml`).
pub const CCM_SERVICE_ACCOUNT: &str = "cloud-controller-manager";
/// The user the local API server knows the CCM's token as.
pub const CCM_USER: &str = "system:serviceaccount:kube-system:cloud-controller-manager";
/// The user allowed to read the CCM's `/metrics` in local runs.
pub const METRICS_READER_USER: &str = "e2e-metrics-reader";
/// The `--cluster-name` of local runs.
pub const CLUSTER_NAME: &str = "e2e";
/// The `--cluster-cidr` of local runs (the simulated nodes' pod CIDRs are inside it).
pub const CLUSTER_CIDR: &str = "10.244.0.0/16";
/// The Lease the CCM replicas elect a leader with.
pub const LEASE_NAME: &str = "cloud-controller-manager";

/// How long local CCM replicas may take to elect a leader and start the fake cloud.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// The CCM's bearer token in local runs (only the in-process API server knows it).
const CCM_TOKEN: &str = "e2e-ccm-service-account";
/// The token of [`METRICS_READER_USER`].
const METRICS_READER_TOKEN: &str = "e2e-metrics-reader";

/// The fake cloud of local runs: one explicit instance (node `e2e-node-0`, a large instance in the third
/// zone with an ExternalIP its kubelet does not know); every other node is auto-discovered.
pub const DEFAULT_CLOUD_CONFIG: &str = "\
region: e2e-region
zones: [e2e-zone-a, e2e-zone-b, e2e-zone-c]
instanceTypes: [e2e.small, e2e.large]
autoDiscover: true
clusterID: e2e
clusterName: e2e
instances:
  - name: e2e-node-0
    type: e2e.large
    zone: e2e-zone-c
    addresses:
      - {type: InternalIP, address: 10.0.0.10}
      - {type: ExternalIP, address: 203.0.113.10}
      - {type: Hostname, address: e2e-node-0}
";

/// How a local cluster is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalOptions {
    /// CCM replicas started at once (each later one is a standby).
    pub replicas: usize,
    /// The fake cloud-config, without `adminAddress` (the harness adds it).
    pub cloud_config: String,
    /// Flags added to (or overriding) the CCM's defaults.
    pub extra_args: Vec<String>,
    /// Keep the working directory (CCM logs, kubeconfig, cloud-config) after the run.
    pub keep_files: bool,
}

impl Default for LocalOptions {
    fn default() -> Self {
        LocalOptions {
            replicas: 1,
            cloud_config: DEFAULT_CLOUD_CONFIG.to_string(),
            extra_args: Vec::new(),
            keep_files: false,
        }
    }
}

/// Picks a free loopback port (bind to port 0, read it, let it go).
pub fn free_port() -> Result<u16, HarnessError> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| HarnessError::Io {
        what: "picking a free port".into(),
        source: e,
    })?;
    let port = listener
        .local_addr()
        .map_err(|e| HarnessError::Io {
            what: "picking a free port".into(),
            source: e,
        })?
        .port();
    Ok(port)
}

/// Rewrites a kubeconfig so that every user authenticates with `token`.
pub fn kubeconfig_with_token(kubeconfig: &str, token: &str) -> Result<String, HarnessError> {
    let bad = |m: String| HarnessError::Config(format!("the local API server's kubeconfig: {m}"));
    // No source snippet in the error: the kubeconfig holds credentials.
    let options = serde_saphyr::options! { with_snippet: false };
    let mut value: serde_json::Value =
        serde_saphyr::from_str_with_options(kubeconfig, options).map_err(|e| bad(e.to_string()))?;
    let users = value
        .get_mut("users")
        .and_then(|u| u.as_array_mut())
        .ok_or_else(|| bad("no users".into()))?;
    for user in users.iter_mut() {
        let Some(auth) = user.get_mut("user").and_then(|u| u.as_object_mut()) else {
            return Err(bad("a user entry without `user`".into()));
        };
        auth.remove("token");
        auth.remove("tokenFile");
        auth.remove("client-certificate-data");
        auth.remove("client-key-data");
        auth.insert("token".into(), token.into());
    }
    serde_saphyr::to_string(&value).map_err(|e| bad(e.to_string()))
}

/// The API server the harness' own CCM replicas talk to.
pub enum LocalApi {
    /// The in-process `test_apiserver` (the default).
    InProcess(TestApiServer),
    /// A running cluster (such as `hack/realkube`'s): the CCM authenticates with its own kubeconfig.
    External {
        /// The CCM's kubeconfig (the ServiceAccount of `deploy/base/rbac.yaml`).
        ccm_kubeconfig: PathBuf,
        /// The API server's audit log (JSON lines), the record of the CCM's requests.
        audit_log: Option<PathBuf>,
        /// A bearer token allowed to read the replicas' `/metrics`.
        metrics_token: String,
    },
}

impl std::fmt::Debug for LocalApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LocalApi::InProcess(server) => write!(f, "InProcess({})", server.url()),
            LocalApi::External {
                ccm_kubeconfig,
                audit_log,
                ..
            } => f
                .debug_struct("External")
                .field("ccm_kubeconfig", ccm_kubeconfig)
                .field("audit_log", audit_log)
                .finish_non_exhaustive(),
        }
    }
}

/// The CCM processes of a local run and the API server they use.
pub struct LocalCluster {
    api: LocalApi,
    dir: tempfile::TempDir,
    binary: PathBuf,
    ccm_kubeconfig: PathBuf,
    cloud_config: PathBuf,
    admin_address: SocketAddr,
    extra_args: Vec<String>,
    replicas: Vec<CcmProcess>,
    started: usize,
}

impl std::fmt::Debug for LocalCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalCluster")
            .field("api", &self.api)
            .field("dir", &self.dir.path())
            .field("admin_address", &self.admin_address)
            .field("replicas", &self.replicas)
            .finish_non_exhaustive()
    }
}

impl LocalCluster {
    /// Starts the in-process API server, writes the CCM's kubeconfig and cloud-config, and starts the
    /// replicas.
    pub async fn start(options: LocalOptions) -> Result<LocalCluster, HarnessError> {
        // No kube-controller-manager runs here to lift the not-ready taint a real API server's admission
        // adds to new Nodes, so the server does not add it.
        let server = TestApiServer::builder()
            .not_ready_taint(false)
            .start()
            .await
            .map_err(|e| HarnessError::ApiServer(e.to_string()))?;
        let controls = server.controls();
        controls.set_token(
            CCM_TOKEN,
            UserInfo::new(
                CCM_USER,
                &[
                    "system:serviceaccounts",
                    "system:serviceaccounts:kube-system",
                    "system:authenticated",
                ],
            ),
        );
        controls.set_token(
            METRICS_READER_TOKEN,
            UserInfo::new(METRICS_READER_USER, &["system:authenticated"]),
        );
        controls.allow(AccessRule {
            user: Some(METRICS_READER_USER.to_string()),
            verb: "get".to_string(),
            path: Some("/metrics".to_string()),
            ..AccessRule::default()
        });

        Self::start_with(options, LocalApi::InProcess(server))
    }

    /// Starts the replicas against an external cluster, authenticating with `ccm_kubeconfig`.
    pub fn start_external(
        options: LocalOptions,
        ccm_kubeconfig: PathBuf,
        audit_log: Option<PathBuf>,
        metrics_token: String,
    ) -> Result<LocalCluster, HarnessError> {
        let api = LocalApi::External {
            ccm_kubeconfig,
            audit_log,
            metrics_token,
        };
        Self::start_with(options, api)
    }

    /// Writes the cloud-config (and, for the in-process server, the CCM's kubeconfig) and starts the
    /// replicas.
    fn start_with(options: LocalOptions, api: LocalApi) -> Result<LocalCluster, HarnessError> {
        let binary = locate_binary()?;
        let mut dir = tempfile::Builder::new()
            .prefix("ccm-e2e-")
            .tempdir()
            .map_err(|e| HarnessError::Io {
                what: "creating a temporary directory".into(),
                source: e,
            })?;
        dir.disable_cleanup(options.keep_files);
        let write = |path: &Path, text: &str| {
            std::fs::write(path, text).map_err(|e| HarnessError::Io {
                what: format!("writing {}", path.display()),
                source: e,
            })
        };
        let ccm_kubeconfig = match &api {
            LocalApi::External { ccm_kubeconfig, .. } => ccm_kubeconfig.clone(),
            LocalApi::InProcess(server) => {
                let path = dir.path().join("ccm.kubeconfig");
                write(
                    &path,
                    &kubeconfig_with_token(server.kubeconfig_yaml(), CCM_TOKEN)?,
                )?;
                path
            }
        };

        let admin_address = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?));
        let cloud_config = dir.path().join("cloud-config.yaml");
        write(
            &cloud_config,
            &format!(
                "{}\nadminAddress: \"{admin_address}\"\n",
                options.cloud_config.trim_end()
            ),
        )?;

        let mut cluster = LocalCluster {
            api,
            dir,
            binary,
            ccm_kubeconfig,
            cloud_config,
            admin_address,
            extra_args: options.extra_args,
            replicas: Vec::new(),
            started: 0,
        };
        for _ in 0..options.replicas {
            cluster.start_replica()?;
        }
        Ok(cluster)
    }

    /// The CCM's flags for a replica serving on `secure_port`.
    pub fn ccm_args(&self, secure_port: u16) -> Vec<String> {
        let mut args: Vec<String> = vec![
            "--cloud-provider=fake".into(),
            format!("--cloud-config={}", self.cloud_config.display()),
            format!("--kubeconfig={}", self.ccm_kubeconfig.display()),
            format!("--cluster-name={CLUSTER_NAME}"),
            format!("--cluster-cidr={CLUSTER_CIDR}"),
            // As upstream, routes do not depend on --allocate-node-cidrs (the simulated kubelets' pod CIDRs
            // come from "another allocator"): case 3 proves the route controller runs without it.
            "--allocate-node-cidrs=false".into(),
            "--configure-cloud-routes=true".into(),
            // pv-label-controller is off by default (upstream has none); the suite covers it.
            "--controllers=*,pv-label".into(),
            "--node-monitor-period=1s".into(),
            "--route-reconciliation-period=1s".into(),
            "--leader-elect=true".into(),
            "--leader-elect-lease-duration=3s".into(),
            "--leader-elect-renew-deadline=2s".into(),
            "--leader-elect-retry-period=500ms".into(),
            "--kube-api-qps=200".into(),
            "--kube-api-burst=400".into(),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={secure_port}"),
            "-v=2".into(),
        ];
        args.extend(self.extra_args.iter().cloned());
        args
    }

    /// Runs `cloud-controller-manager --dry-run` (table output) beside the replicas, with their flags but
    /// `cloud_config` (a fake cloud-config, e.g. [`crate::admin::FakeAdmin::cloud_config`] without its
    /// `adminAddress`) and no leader election or serving. Returns the exit code and the report.
    pub async fn dry_run(&self, cloud_config: &str) -> Result<(i32, String), HarnessError> {
        let path = self.dir.path().join("dry-run-cloud.yaml");
        std::fs::write(&path, cloud_config).map_err(|source| HarnessError::Io {
            what: format!("writing {}", path.display()),
            source,
        })?;
        let kept = |arg: &&String| {
            ![
                "--cloud-config=",
                "--leader-elect",
                "--bind-address=",
                "--secure-port=",
            ]
            .iter()
            .any(|flag| arg.starts_with(flag))
        };
        let mut args: Vec<String> = self.ccm_args(0).iter().filter(kept).cloned().collect();
        args.extend([
            format!("--cloud-config={}", path.display()),
            "--leader-elect=false".into(),
            "--secure-port=0".into(),
            "--dry-run".into(),
        ]);
        let output = tokio::process::Command::new(&self.binary)
            .args(&args)
            .env_remove("RUST_LOG")
            .output()
            .await
            .map_err(|source| HarnessError::Io {
                what: format!("running {} --dry-run", self.binary.display()),
                source,
            })?;
        let report = String::from_utf8_lossy(&output.stdout).into_owned();
        let code = output.status.code().unwrap_or(-1);
        if code == 1 {
            return Err(HarnessError::Config(format!(
                "the dry run failed:\n{report}{}",
                String::from_utf8_lossy(&output.stderr)
            )));
        }
        Ok((code, report))
    }

    /// Starts one more replica (a standby while another one leads).
    pub fn start_replica(&mut self) -> Result<&CcmProcess, HarnessError> {
        let secure_port = free_port()?;
        let name = format!("ccm-{}", self.started);
        let log = self.dir.path().join(format!("{name}.log"));
        let process = CcmProcess::spawn(
            &name,
            &self.binary,
            &self.ccm_args(secure_port),
            &log,
            secure_port,
        )?;
        self.started += 1;
        self.replicas.push(process);
        Ok(self.replicas.last().expect("just pushed"))
    }

    /// The replicas started so far (killed ones included).
    pub fn replicas(&self) -> &[CcmProcess] {
        &self.replicas
    }

    /// The replicas, mutably (to kill one).
    pub fn replicas_mut(&mut self) -> &mut [CcmProcess] {
        &mut self.replicas
    }

    /// The index of the replica that reports itself as leader, if exactly one does.
    pub async fn leader_index(&self) -> Result<Option<usize>, HarnessError> {
        let mut leaders = Vec::new();
        for (index, replica) in self.replicas.iter().enumerate() {
            // A killed replica does not answer; it is not the leader.
            if let Ok(true) = replica.is_leader(self.metrics_token()).await {
                leaders.push(index);
            }
        }
        Ok(match leaders.as_slice() {
            [one] => Some(*one),
            _ => None,
        })
    }

    /// The in-process API server, when the replicas use it.
    pub fn server(&self) -> Option<&TestApiServer> {
        match &self.api {
            LocalApi::InProcess(server) => Some(server),
            LocalApi::External { .. } => None,
        }
    }

    /// The API server the replicas use.
    pub fn api(&self) -> &LocalApi {
        &self.api
    }

    /// A bearer token allowed to read the replicas' `/metrics`.
    pub fn metrics_token(&self) -> &str {
        match &self.api {
            LocalApi::InProcess(_) => METRICS_READER_TOKEN,
            LocalApi::External { metrics_token, .. } => metrics_token,
        }
    }

    /// The working directory (logs, kubeconfig, cloud-config).
    pub fn work_dir(&self) -> &Path {
        self.dir.path()
    }

    /// The fake cloud's admin address.
    pub fn admin_address(&self) -> SocketAddr {
        self.admin_address
    }

    /// Every request the CCM replicas made (identified by their user), in order: from the in-process
    /// server's request log, or from an external server's audit log. `None` when there is no record.
    pub fn ccm_requests(&self) -> Result<Option<Vec<AuditedRequest>>, HarnessError> {
        match &self.api {
            LocalApi::InProcess(server) => Ok(Some(
                server
                    .controls()
                    .request_log()
                    .into_iter()
                    .filter(|r| r.user == CCM_USER)
                    .map(|r| AuditedRequest {
                        request: ApiRequest {
                            verb: r.verb,
                            group: r.group,
                            resource: r.resource,
                            subresource: r.subresource,
                            namespace: r.namespace,
                            name: r.name,
                        },
                        user_agent: Some(r.user_agent).filter(|ua| !ua.is_empty()),
                        code: r.code,
                        // The in-process server answers 403 only when its access rules refuse.
                        authorization_denied: r.code == 403,
                    })
                    .collect(),
            )),
            LocalApi::External {
                audit_log: Some(path),
                ..
            } => Ok(Some(
                read_audit_log(path)?
                    .into_iter()
                    .filter(|r| r.user == CCM_USER)
                    .map(|r| r.request)
                    .collect(),
            )),
            LocalApi::External {
                audit_log: None, ..
            } => Ok(None),
        }
    }

    /// The last lines of every replica's log, for failure messages.
    pub fn log_tails(&self, lines: usize) -> String {
        self.replicas
            .iter()
            .map(|r| {
                format!(
                    "--- {} ({})\n{}",
                    r.name(),
                    r.log_path().display(),
                    r.log_tail(lines)
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Checks that every replica not deliberately killed still runs.
    pub fn check_running(&mut self) -> Result<(), HarnessError> {
        for replica in &mut self.replicas {
            if let Some(status) = replica.exit_status()
                && !status.success()
                && status.code().is_some()
            {
                return Err(HarnessError::Config(format!(
                    "CCM replica {} exited with {status}; its log:\n{}",
                    replica.name(),
                    replica.log_tail(40)
                )));
            }
        }
        Ok(())
    }
}

/// Everything a suite or the demo needs.
pub struct Harness {
    config: HarnessConfig,
    client: Client,
    admin: FakeAdmin,
    kubelets: KubeletFleet,
    local: Option<LocalCluster>,
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness")
            .field("config", &self.config)
            .field("admin", &self.admin)
            .field("local", &self.local)
            .finish_non_exhaustive()
    }
}

impl Harness {
    /// Sets up the run `config` describes; local runs use `local` (ignored otherwise).
    pub async fn start(
        config: HarnessConfig,
        local: LocalOptions,
    ) -> Result<Harness, HarnessError> {
        let (client, admin, local) = match (&config.kubeconfig, &config.ccm_kubeconfig) {
            (None, _) => {
                let cluster = LocalCluster::start(local).await?;
                let client = cluster
                    .server()
                    .ok_or_else(|| HarnessError::Config("no in-process API server".into()))?
                    .client()
                    .map_err(|e| HarnessError::ApiServer(e.to_string()))?;
                let admin = wait_for_fake_cloud(&cluster).await?;
                (client, admin, Some(cluster))
            }
            (Some(path), Some(ccm_kubeconfig)) => {
                let client = client_from_kubeconfig(path).await?;
                let metrics_token = metrics_reader_token(&client).await?;
                let cluster = LocalCluster::start_external(
                    local,
                    ccm_kubeconfig.clone(),
                    config.audit_log.clone(),
                    metrics_token,
                )?;
                let admin = wait_for_fake_cloud(&cluster).await?;
                (client, admin, Some(cluster))
            }
            (Some(path), None) => {
                let client = client_from_kubeconfig(path).await?;
                let admin = FakeAdmin::new(config.fake_admin.clone().unwrap_or_default());
                (client, admin, None)
            }
        };
        let kubelets = KubeletFleet::start(client.clone());
        Ok(Harness {
            config,
            client,
            admin,
            kubelets,
            local,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &HarnessConfig {
        &self.config
    }

    /// Simulated or existing nodes.
    pub fn mode(&self) -> Mode {
        self.config.mode
    }

    /// The kubeconfig of the harness' own identity: the target cluster's, or the in-process server's.
    pub fn kubeconfig(&self) -> Option<PathBuf> {
        match (&self.config.kubeconfig, &self.local) {
            (Some(path), _) => Some(path.clone()),
            (None, Some(local)) => local.server().map(|s| s.kubeconfig_path().to_path_buf()),
            (None, None) => None,
        }
    }

    /// A client with the harness' own identity (not the CCM's).
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// The fake cloud's admin API.
    pub fn admin(&self) -> &FakeAdmin {
        &self.admin
    }

    /// The simulated kubelets.
    pub fn kubelets(&self) -> &KubeletFleet {
        &self.kubelets
    }

    /// The local cluster, in local runs.
    pub fn local(&self) -> Option<&LocalCluster> {
        self.local.as_ref()
    }

    /// The local cluster, mutably.
    pub fn local_mut(&mut self) -> Option<&mut LocalCluster> {
        self.local.as_mut()
    }

    /// Every node.
    pub async fn nodes(&self) -> Result<Vec<Node>, HarnessError> {
        Api::<Node>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .map(|list| list.items)
            .map_err(|e| HarnessError::kube("listing nodes", e))
    }

    /// The holder of the CCM's leader-election Lease, if any.
    pub async fn lease_holder(&self) -> Result<Option<String>, HarnessError> {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), &self.config.ccm_namespace);
        let lease = leases
            .get_opt(LEASE_NAME)
            .await
            .map_err(|e| HarnessError::kube("reading the leader-election Lease", e))?;
        Ok(lease
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .filter(|h| !h.is_empty()))
    }

    /// What to show when something fails: the tails of the CCM logs in local runs.
    pub fn diagnostics(&self) -> String {
        match &self.local {
            Some(local) => local.log_tails(30),
            None => "the CCM runs in the cluster; see its pod logs".to_string(),
        }
    }
}

/// A client with the identity of a kubeconfig file.
pub async fn client_from_kubeconfig(path: &Path) -> Result<Client, HarnessError> {
    let kubeconfig = Kubeconfig::read_from(path)
        .map_err(|e| HarnessError::Config(format!("reading {}: {e}", path.display())))?;
    let client_config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|e| HarnessError::Config(format!("using {}: {e}", path.display())))?;
    Client::try_from(client_config)
        .map_err(|e| HarnessError::kube(format!("building a client from {}", path.display()), e))
}

/// Waits until a replica leads and has started the fake cloud's admin API, and returns its client.
async fn wait_for_fake_cloud(cluster: &LocalCluster) -> Result<FakeAdmin, HarnessError> {
    let admin = FakeAdmin::new(format!("http://{}", cluster.admin_address()));
    let probe = &admin;
    let ready = wait_for(
        "a CCM replica to lead and start the fake cloud's admin API",
        STARTUP_TIMEOUT,
        move || async move { Ok(Check::Done(probe.state().await?)) },
    )
    .await;
    match ready {
        Ok(_) => Ok(admin),
        Err(err) => Err(HarnessError::Config(format!(
            "{err}\nCCM logs:\n{}",
            cluster.log_tails(40)
        ))),
    }
}

/// On a real cluster: a ServiceAccount allowed to `get` the CCM's `/metrics` (RBAC on the non-resource
/// URL, as an operator's Prometheus has it), and a token for it from the TokenRequest API.
async fn metrics_reader_token(client: &Client) -> Result<String, HarnessError> {
    let account: ServiceAccount = serde_json::from_value(serde_json::json!({
        "metadata": {"name": METRICS_READER_USER, "namespace": "kube-system"}
    }))
    .map_err(|e| HarnessError::Config(e.to_string()))?;
    let role: ClusterRole = serde_json::from_value(serde_json::json!({
        "metadata": {"name": METRICS_READER_USER},
        "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    }))
    .map_err(|e| HarnessError::Config(e.to_string()))?;
    let binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": METRICS_READER_USER},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": METRICS_READER_USER},
        "subjects": [{"kind": "ServiceAccount", "name": METRICS_READER_USER, "namespace": "kube-system"}]
    }))
    .map_err(|e| HarnessError::Config(e.to_string()))?;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "kube-system");
    create_unless_exists(&accounts, &account, "the metrics reader's ServiceAccount").await?;
    create_unless_exists(
        &Api::all(client.clone()),
        &role,
        "the metrics reader's ClusterRole",
    )
    .await?;
    create_unless_exists(
        &Api::all(client.clone()),
        &binding,
        "the metrics reader's ClusterRoleBinding",
    )
    .await?;
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let answer = accounts
        .create_token_request(METRICS_READER_USER, &PostParams::default(), &request)
        .await
        .map_err(|e| HarnessError::kube("requesting the metrics reader's token", e))?;
    answer
        .status
        .and_then(|s| s.token)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| HarnessError::Config("the TokenRequest answer has no token".into()))
}

/// Creates `object`; an existing one (409) is fine.
async fn create_unless_exists<K>(api: &Api<K>, object: &K, what: &str) -> Result<(), HarnessError>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.create(&PostParams::default(), object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(e) => Err(HarnessError::kube(format!("creating {what}"), e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ccm_kubeconfig_carries_only_its_own_token() {
        let admin = r#"
apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: "https://127.0.0.1:1234", certificate-authority-data: QUJD}
users:
- name: admin
  user: {token: admin-token}
contexts:
- name: test
  context: {cluster: test, user: admin}
current-context: test
"#;
        let text = kubeconfig_with_token(admin, "ccm").unwrap();
        assert!(!text.contains("admin-token"), "{text}");
        let value: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
        assert_eq!(value["users"][0]["user"]["token"].as_str(), Some("ccm"));
        assert_eq!(
            value["clusters"][0]["cluster"]["server"].as_str(),
            Some("https://127.0.0.1:1234")
        );
        assert!(kubeconfig_with_token("kind: Config\n", "x").is_err());
    }

    #[test]
    fn free_ports_are_nonzero() {
        assert_ne!(free_port().unwrap(), 0);
    }
}
