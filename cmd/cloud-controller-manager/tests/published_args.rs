//! The daemon started with argument lists copied from published manifests of upstream cloud-controller
//! managers, as an operator switching images would keep them: none is refused (exit 2), each starts, leads
//! or serves, and stops cleanly on SIGTERM.
//!
//! Each list is the published one word for word, with these substitutions only (each marked by a
//! `{PLACEHOLDER}`): the cloud provider becomes `fake` (the list's own provider needs its cloud), file
//! paths become files of the test (cloud-config, kubeconfig, serving certificate), ports become free
//! ports, and values a template or the environment fills (`$(POD_IP_ADDRESS)`, `{{ .tlsCipherSuites }}`)
//! take the value the cited deployment fills in. A list without `--cloud-config` gets the fake cloud's (the
//! listed provider finds its cluster in the instance metadata, the fake one in its configuration). The
//! cluster has what a cluster running these deployments has: the controllers' ServiceAccounts (for
//! `--use-service-account-credentials`) and the namespace of OpenShift's Lease. Where the listed provider
//! has no routes (DigitalOcean), `--configure-cloud-routes=false` is added: the fake cloud has routes, and
//! with routes the route controller needs a cluster CIDR, as upstream's does.
#![cfg(feature = "fake")]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use test_apiserver::TestApiServer;

const BINARY: &str = env!("CARGO_BIN_EXE_cloud-controller-manager");

/// One published argument list.
struct Published {
    /// Where it is published (repository, path, tag or commit).
    source: &'static str,
    /// The arguments.
    args: &'static [&'static str],
    /// Added because the fake cloud stands in for a provider without routes (see the module docs).
    without_routes: bool,
}

/// OpenShift's "intermediate" TLS profile, what its operators fill `{{ .tlsCipherSuites }}` with.
const OPENSHIFT_CIPHERS: &str = "TLS_AES_128_GCM_SHA256,TLS_AES_256_GCM_SHA384,TLS_CHACHA20_POLY1305_SHA256,\
TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,\
TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,\
TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256";

const LISTS: &[Published] = &[
    Published {
        source: "kubernetes/cloud-provider-aws examples/existing-cluster/base/\
                 aws-cloud-controller-manager-daemonset.yaml (module k8s.io/cloud-provider-aws@v1.37.1)",
        args: &[
            "--v=2",
            "--cloud-provider={PROVIDER}",
            "--use-service-account-credentials=true",
            "--configure-cloud-routes=false",
        ],
        without_routes: false,
    },
    Published {
        source: "kubernetes/cloud-provider-aws docs/development.md \"Run the controller\" \
                 (module k8s.io/cloud-provider-aws@v1.37.1)",
        args: &[
            "-v=2",
            "--cloud-config={CLOUD_CONFIG}",
            "--kubeconfig={KUBECONFIG}",
            "--cloud-provider={PROVIDER}",
            "--use-service-account-credentials=true",
            "--configure-cloud-routes=false",
            "--leader-elect=true",
            "--leader-elect-lease-duration=137s",
            "--leader-elect-renew-deadline=107s",
            "--leader-elect-retry-period=26s",
            "--leader-elect-resource-namespace=openshift-cloud-controller-manager",
        ],
        without_routes: false,
    },
    Published {
        source: "kubernetes/kops tests/integration/update_cluster/minimal-1.24/data/\
                 aws_s3_object_minimal.example.com-addons-aws-cloud-controller.addons.k8s.io-k8s-1.18_content \
                 (tag v1.26.0)",
        args: &[
            "--allocate-node-cidrs=true",
            "--cluster-cidr=100.64.0.0/10",
            "--cluster-name=minimal.example.com",
            "--configure-cloud-routes=false",
            "--enable-leader-migration=true",
            "--leader-elect=true",
            "--v=2",
            "--cloud-provider={PROVIDER}",
            "--use-service-account-credentials=true",
            "--cloud-config={CLOUD_CONFIG}",
        ],
        without_routes: false,
    },
    Published {
        source: "kubernetes/kops tests/integration/update_cluster/complex/data/\
                 aws_s3_object_complex.example.com-addons-aws-cloud-controller.addons.k8s.io-k8s-1.18_content \
                 (tag v1.37.0-alpha.1)",
        args: &[
            "--allocate-node-cidrs=true",
            "--cluster-cidr=100.96.0.0/11",
            "--cluster-name=complex.example.com",
            "--concurrent-node-syncs=5",
            "--configure-cloud-routes=false",
            "--leader-elect=true",
            "--v=2",
            "--cloud-provider={PROVIDER}",
            "--use-service-account-credentials=true",
            "--cloud-config={CLOUD_CONFIG}",
        ],
        without_routes: false,
    },
    Published {
        source: "openshift/cluster-cloud-controller-manager-operator pkg/cloud/aws/assets/deployment.yaml \
                 (main, bc52198c), TLS conditionals filled with the intermediate profile",
        args: &[
            "--cloud-config={CLOUD_CONFIG}",
            "--cloud-provider={PROVIDER}",
            "--use-service-account-credentials=true",
            "--configure-cloud-routes=false",
            "--leader-elect=true",
            "--leader-elect-lease-duration=137s",
            "--leader-elect-renew-deadline=107s",
            "--leader-elect-retry-period=26s",
            "--leader-elect-resource-namespace=openshift-cloud-controller-manager",
            "--tls-cipher-suites={OPENSHIFT_CIPHERS}",
            "--tls-min-version=VersionTLS12",
            "--secure-port=0",
            "-v=2",
        ],
        without_routes: false,
    },
    Published {
        source: "openshift/cluster-cloud-controller-manager-operator pkg/cloud/ibm/assets/deployment.yaml \
                 (main, bc52198c), without the TLS conditionals",
        args: &[
            "--bind-address=127.0.0.1",
            "--use-service-account-credentials=true",
            "--configure-cloud-routes=false",
            "--cloud-provider={PROVIDER}",
            "--cloud-config={CLOUD_CONFIG}",
            "--profiling=false",
            "--leader-elect=true",
            "--leader-elect-lease-duration=137s",
            "--leader-elect-renew-deadline=107s",
            "--leader-elect-retry-period=26s",
            "--leader-elect-resource-namespace=openshift-cloud-controller-manager",
            "--secure-port={PORT}",
            "--v=2",
        ],
        without_routes: false,
    },
    Published {
        source: "openshift/hypershift control-plane-operator/controllers/hostedcontrolplane/testdata/\
                 aws-cloud-controller-manager/zz_fixture_TestControlPlaneComponents_aws_cloud_controller_manager_\
                 deployment.yaml (3ee96155)",
        args: &[
            "--cloud-provider={PROVIDER}",
            "--use-service-account-credentials=false",
            "--kubeconfig={KUBECONFIG}",
            "--cloud-config={CLOUD_CONFIG}",
            "--configure-cloud-routes=false",
            "--leader-elect=true",
            "--leader-elect-lease-duration=137s",
            "--leader-elect-renew-deadline=107s",
            "--leader-elect-retry-period=26s",
            "--leader-elect-resource-namespace=openshift-cloud-controller-manager",
            "--authentication-kubeconfig={KUBECONFIG}",
            "--authorization-kubeconfig={KUBECONFIG}",
            "--tls-min-version=VersionTLS12",
            "--tls-cipher-suites=TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,\
             TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,\
             TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
            "--secure-port={PORT}",
        ],
        without_routes: false,
    },
    Published {
        source: "openshift/hypershift control-plane-operator/controllers/hostedcontrolplane/v2/assets/\
                 powervs-cloud-controller-manager/deployment.yaml (3ee96155), $(POD_IP_ADDRESS) filled",
        args: &[
            "--authentication-skip-lookup",
            "--bind-address=127.0.0.1",
            "--configure-cloud-routes=false",
            "--cloud-provider={PROVIDER}",
            "--cloud-config={CLOUD_CONFIG}",
            "--profiling=false",
            "--leader-elect=true",
            "--leader-elect-lease-duration=137s",
            "--leader-elect-renew-deadline=107s",
            "--leader-elect-retry-period=26s",
            "--kubeconfig={KUBECONFIG}",
            "--secure-port={PORT}",
        ],
        without_routes: false,
    },
    Published {
        source: "digitalocean/digitalocean-cloud-controller-manager releases/\
                 digitalocean-cloud-controller-manager/v0.1.14.yml (tag v0.1.68)",
        args: &[
            "--cloud-provider={PROVIDER}",
            "--leader-elect=false",
            "--allow-untagged-cloud=true",
        ],
        without_routes: true,
    },
    Published {
        source: "kubernetes-sigs/cluster-api-provider-aws templates/cluster-template-ipv6.yaml (tag v2.11.1)",
        args: &[
            "--v=2",
            "--cloud-provider={PROVIDER}",
            "--use-service-account-credentials=true",
            "--configure-cloud-routes=false",
            "--cloud-config={CLOUD_CONFIG}",
        ],
        without_routes: false,
    },
    Published {
        source: "kubernetes/website content/en/examples/admin/cloud/ccm-example.yaml (74cb082b)",
        args: &[
            "--cloud-provider={PROVIDER}",
            "--leader-elect=true",
            "--use-service-account-credentials",
            "--allocate-node-cidrs=true",
            "--configure-cloud-routes=true",
            "--cluster-cidr=172.17.0.0/16",
        ],
        without_routes: false,
    },
    Published {
        source: "kubernetes/kubernetes hack/local-up-cluster.sh start_cloud_controller_manager (009b3e39), \
                 with its defaults for LOG_LEVEL, LOG_SPEC, FEATURE_GATES and LEADER_ELECT and \
                 CONFIGURE_CLOUD_ROUTES=false",
        args: &[
            "--v=3",
            "--vmodule=",
            "--feature-gates=AllAlpha=false",
            "--cloud-provider={PROVIDER}",
            "--cloud-config={CLOUD_CONFIG}",
            "--configure-cloud-routes=false",
            "--kubeconfig",
            "{KUBECONFIG}",
            "--use-service-account-credentials",
            "--leader-elect=false",
            "--master={MASTER}",
        ],
        without_routes: false,
    },
    Published {
        source: "kubernetes-sigs/cloud-provider-azure helm/cloud-provider-azure/templates/\
                 cloud-provider-azure.yaml (tag v1.36.5), every optional key set to values.yaml's example",
        args: &[
            "--allocate-node-cidrs=true",
            "--bind-address=0.0.0.0",
            "--cert-dir={CERT_DIR}",
            "--cloud-config={CLOUD_CONFIG}",
            "--cloud-provider={PROVIDER}",
            "--cluster-cidr=10.244.0.0/16",
            "--cluster-name=k8s",
            "--configure-cloud-routes=true",
            "--contention-profiling=true",
            "--controller-start-interval=2m",
            "--controllers=*,-cloud-node",
            "--http2-max-streams-per-connection=47",
            "--kube-api-burst=100",
            "--kube-api-content-type=application/vnd.kubernetes.protobuf",
            "--kube-api-qps=50.0",
            "--kubeconfig={KUBECONFIG}",
            "--leader-elect=true",
            "--leader-elect-lease-duration=30s",
            "--leader-elect-renew-deadline=15s",
            "--leader-elect-retry-period=5s",
            "--master={MASTER}",
            "--min-resync-period=100m",
            "--node-status-update-frequency=10m",
            "--route-reconciliation-period=10s",
            "--profiling=false",
            "--secure-port={PORT}",
            "--use-service-account-credentials=false",
            "--v=2",
        ],
        without_routes: false,
    },
    Published {
        source: "gardener/gardener-extension-provider-aws charts/internal/seed-controlplane/charts/\
                 cloud-controller-manager/templates/deployment.yaml (tag v1.73.0), values.yaml defaults",
        args: &[
            "--allocate-node-cidrs=false",
            "--cloud-provider={PROVIDER}",
            "--cloud-config={CLOUD_CONFIG}",
            "--cluster-cidr=192.168.0.0/16",
            "--cluster-name=shoot-foo-bar",
            "--concurrent-service-syncs=10",
            "--configure-cloud-routes=false",
            "--kubeconfig={KUBECONFIG}",
            "--authentication-kubeconfig={KUBECONFIG}",
            "--authorization-kubeconfig={KUBECONFIG}",
            "--leader-elect=true",
            "--secure-port={PORT}",
            "--tls-cert-file={CERT}",
            "--tls-private-key-file={KEY}",
            "--tls-cipher-suites=",
            "--use-service-account-credentials",
            "--v=2",
        ],
        without_routes: false,
    },
    Published {
        source: "sergelogvinov/proxmox-cloud-controller-manager docs/deploy/cloud-controller-manager.yml \
                 (02a5ecb3): a DaemonSet running the node controllers only",
        args: &[
            "--v=4",
            "--cloud-provider={PROVIDER}",
            "--cloud-config={CLOUD_CONFIG}",
            "--controllers=cloud-node,cloud-node-lifecycle",
            "--leader-elect-resource-name=cloud-controller-manager-proxmox",
            "--use-service-account-credentials",
            "--secure-port={PORT}",
        ],
        without_routes: false,
    },
];

/// A daemon process, killed when dropped (a failed assertion leaves no process behind).
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The files a list refers to.
struct Files {
    cloud_config: String,
    kubeconfig: String,
    master: String,
    cert: String,
    key: String,
    cert_dir: String,
}

impl Files {
    fn new(server: &TestApiServer, dir: &Path) -> Self {
        let cloud_config = dir.join("cloud.yaml");
        std::fs::write(&cloud_config, "clusterID: published-args\n").unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        std::fs::write(dir.join("tls.crt"), cert.pem()).unwrap();
        std::fs::write(dir.join("tls.key"), key.serialize_pem()).unwrap();
        Files {
            cloud_config: cloud_config.display().to_string(),
            kubeconfig: server.kubeconfig_path().display().to_string(),
            master: server.url().to_string(),
            cert: dir.join("tls.crt").display().to_string(),
            key: dir.join("tls.key").display().to_string(),
            cert_dir: dir.join("certs").display().to_string(),
        }
    }

    /// `word` with the placeholders filled.
    fn fill(&self, word: &str, port: u16) -> String {
        word.replace("{PROVIDER}", "fake")
            .replace("{CLOUD_CONFIG}", &self.cloud_config)
            .replace("{KUBECONFIG}", &self.kubeconfig)
            .replace("{MASTER}", &self.master)
            .replace("{CERT_DIR}", &self.cert_dir)
            .replace("{CERT}", &self.cert)
            .replace("{KEY}", &self.key)
            .replace("{PORT}", &port.to_string())
            .replace("{OPENSHIFT_CIPHERS}", OPENSHIFT_CIPHERS)
            .split_whitespace()
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn published_argument_lists_start_and_stop_cleanly() {
    let server = TestApiServer::start().await.unwrap();
    let accounts: kube::Api<k8s_openapi::api::core::v1::ServiceAccount> =
        kube::Api::namespaced(server.client().unwrap(), "kube-system");
    for name in [
        "node-controller",
        "service-controller",
        "route-controller",
        "pvl-controller",
    ] {
        let account =
            serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
        accounts
            .create(&Default::default(), &account)
            .await
            .unwrap();
    }
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(server.client().unwrap());
    let openshift = serde_json::json!({"metadata": {"name": "openshift-cloud-controller-manager"}});
    namespaces
        .create(
            &Default::default(),
            &serde_json::from_value(openshift).unwrap(),
        )
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let files = Files::new(&server, dir.path());
    assert!(LISTS.len() >= 10);
    for (index, list) in LISTS.iter().enumerate() {
        let port = free_port();
        let mut args: Vec<String> = list.args.iter().map(|w| files.fill(w, port)).collect();
        if !args.iter().any(|a| a.starts_with("--cloud-config")) {
            args.push(format!("--cloud-config={}", files.cloud_config));
        }
        if list.without_routes {
            args.push("--configure-cloud-routes=false".to_string());
        }
        // The in-cluster service account does not exist here: without a kubeconfig flag the test's is
        // found through KUBECONFIG, as ~/.kube/config would be found.
        let log = dir.path().join(format!("list-{index}.log"));
        let mut daemon = Running(
            Command::new(BINARY)
                .args(&args)
                .env("KUBECONFIG", &files.kubeconfig)
                .env_remove("RUST_LOG")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .unwrap(),
        );
        let child = &mut daemon.0;
        let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                panic!(
                    "{}: exited with {status} before it started its controllers; args {args:?}; log:\n{}",
                    list.source,
                    read_log()
                );
            }
            if read_log().contains("starting controllers") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{}: did not start its controllers within 30s; args {args:?}; log:\n{}",
                list.source,
                read_log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if !args.iter().any(|a| a == "--secure-port=0") {
            // A list without --secure-port serves on upstream's default port.
            let served = if list.args.iter().any(|a| a.contains("{PORT}")) {
                port
            } else {
                10258
            };
            let url = format!("https://127.0.0.1:{served}/healthz");
            assert_eq!(
                healthz(&url).await,
                Some(200),
                "{}: {url} did not answer; log:\n{}",
                list.source,
                read_log()
            );
        }
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        let status = child.wait().unwrap();
        assert_eq!(
            status.code(),
            Some(0),
            "{}: SIGTERM did not stop it cleanly; log:\n{}",
            list.source,
            read_log()
        );
    }
}

/// The status of `GET url` (self-signed certificate), `None` when nothing answers within 10 s.
async fn healthz(url: &str) -> Option<u16> {
    let (base, path) = url.split_at(url.find("/healthz").unwrap());
    let mut config = kube::Config::new(base.parse().unwrap());
    config.accept_invalid_certs = true;
    config.default_retry = false;
    let client = kube::Client::try_from(config).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let request = http::Request::get(path)
            .body(kube::client::Body::empty())
            .unwrap();
        if let Ok(Ok(response)) =
            tokio::time::timeout(Duration::from_secs(2), client.send(request)).await
        {
            return Some(response.status().as_u16());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}
