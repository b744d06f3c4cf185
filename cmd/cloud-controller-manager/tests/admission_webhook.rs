//! The `lb-service` admission webhook on a real kube-apiserver (hack/realkube), for every provider: the
//! daemon serves it on loopback as a standby replica (another holder keeps the leader Lease, so no
//! controller runs and the provider is never initialized), a ValidatingWebhookConfiguration points the API
//! server at it, and `kubectl apply` of a Service with each family of bad annotation is refused with the
//! provider's message; a good Service passes; with the webhook down, `failurePolicy: Ignore` lets a bad
//! Service through, and the service controller's `SyncLoadBalancerFailed` event then carries the message
//! the webhook gave.
//!
//! Ignored unless run by `hack/realkube/test.sh`, which sets `ADMISSION_KUBECONFIG` (the control plane's
//! admin kubeconfig) and `KUBECTL`.

#![cfg(all(feature = "aws", feature = "digitalocean", feature = "fake"))]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use provider_digitalocean::stub::DoStub;
use serde_json::{Value, json};

/// The Lease another holder keeps, so the daemons under test stay standby replicas.
const HELD_LEASE: &str = "admission-webhook-standby";

/// The name of the webhook in the ValidatingWebhookConfigurations.
const WEBHOOK_NAME: &str = "lb-service.cloud-controller-manager.k8s.io";

struct Env {
    kubeconfig: PathBuf,
    kubectl: PathBuf,
    client: kube::Client,
    dir: tempfile::TempDir,
}

async fn env() -> Env {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                panic!(
                    "{name} is not set: hack/realkube/test.sh runs this test with ADMISSION_KUBECONFIG (the \
                     admin kubeconfig of `realkube up`) and KUBECTL"
                )
            })
    };
    let kubeconfig = var("ADMISSION_KUBECONFIG");
    let kubectl = var("KUBECTL");
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig).expect("read ADMISSION_KUBECONFIG"),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .expect("usable kubeconfig");
    Env {
        kubeconfig,
        kubectl,
        client: kube::Client::try_from(config).expect("client"),
        dir: tempfile::tempdir().expect("temp dir"),
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A CA and a serving certificate for 127.0.0.1 signed by it, written to `dir`: (CA PEM, cert, key).
fn certificates(dir: &Path) -> (String, PathBuf, PathBuf) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "webhook-ca");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    let (cert_path, key_path) = (dir.join("webhook.crt"), dir.join("webhook.key"));
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    (ca_cert.pem(), cert_path, key_path)
}

/// A daemon serving the webhook; killed on drop.
struct Daemon {
    child: Child,
    log: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Daemon {
    fn start(e: &Env, name: &str, args: &[String], envs: &[(&str, String)]) -> Daemon {
        let log = e.dir.path().join(format!("{name}.log"));
        let child = Command::new(env!("CARGO_BIN_EXE_cloud-controller-manager"))
            .arg(format!("--kubeconfig={}", e.kubeconfig.display()))
            .args(["--secure-port=0", "-v=2"])
            .args(args)
            .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
            .spawn()
            .expect("start the daemon");
        Daemon { child, log }
    }

    /// A standby replica of `provider` serving the webhook on `port`.
    fn webhook(
        e: &Env,
        provider: &str,
        port: u16,
        extra: &[String],
        envs: &[(&str, String)],
    ) -> Daemon {
        let (_, cert, key) = certificates_in(e);
        let mut args = vec![
            format!("--cloud-provider={provider}"),
            "--leader-elect=true".into(),
            format!("--leader-elect-resource-name={HELD_LEASE}"),
            "--feature-gates=CloudControllerManagerWebhook=true".into(),
            "--webhooks=lb-service".into(),
            "--webhook-bind-address=127.0.0.1".into(),
            format!("--webhook-secure-port={port}"),
            format!("--webhook-tls-cert-file={}", cert.display()),
            format!("--webhook-tls-private-key-file={}", key.display()),
        ];
        args.extend_from_slice(extra);
        let mut daemon = Daemon::start(e, provider, &args, envs);
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = daemon.child.try_wait() {
                panic!(
                    "the {provider} daemon exited ({status}): {}",
                    daemon.log_text()
                );
            }
            assert!(
                Instant::now() < deadline,
                "the webhook did not listen: {}",
                daemon.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        daemon
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// The certificates of the test's directory (made once).
fn certificates_in(e: &Env) -> (String, PathBuf, PathBuf) {
    let ca = e.dir.path().join("ca.pem");
    if !ca.exists() {
        let (pem, _, _) = certificates(e.dir.path());
        std::fs::write(&ca, pem).unwrap();
    }
    (
        std::fs::read_to_string(&ca).unwrap(),
        e.dir.path().join("webhook.crt"),
        e.dir.path().join("webhook.key"),
    )
}

/// Runs kubectl with `input` on stdin: (success, stdout + stderr).
fn kubectl(e: &Env, args: &[&str], input: &str) -> (bool, String) {
    use std::io::Write;
    let mut child = Command::new(&e.kubectl)
        .arg(format!("--kubeconfig={}", e.kubeconfig.display()))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run kubectl");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// A LoadBalancer Service manifest.
fn service(namespace: &str, name: &str, annotations: &[(&str, &str)], spec_extra: Value) -> String {
    let annotations: serde_json::Map<String, Value> = annotations
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    let mut spec = json!({
        "type": "LoadBalancer",
        "selector": {"app": name},
        "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}],
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), spec_extra.as_object()) {
        spec.extend(extra.clone());
    }
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
        "spec": spec,
    })
    .to_string()
}

/// The namespace of one provider's Services and the webhook configuration that sends them to `port`.
async fn register(e: &Env, provider: &str, port: u16) -> String {
    let namespace = format!("admission-{provider}-{}", std::process::id());
    let namespaces: Api<Namespace> = Api::all(e.client.clone());
    let ns: Namespace = serde_json::from_value(json!({
        "metadata": {"name": namespace, "labels": {"admission-test": namespace}},
    }))
    .unwrap();
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let (ca, _, _) = certificates_in(e);
    let configuration = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": format!("cloud-controller-manager-{provider}")},
        "webhooks": [{
            "name": WEBHOOK_NAME,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Ignore",
            "timeoutSeconds": 10,
            "namespaceSelector": {"matchLabels": {"admission-test": namespace}},
            "clientConfig": {
                "url": format!("https://127.0.0.1:{port}/lb-service"),
                "caBundle": base64::engine::general_purpose::STANDARD.encode(ca.as_bytes()),
            },
            "rules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                "resources": ["services"], "scope": "Namespaced",
            }],
        }],
    });
    let (ok, out) = kubectl(e, &["apply", "-f", "-"], &configuration.to_string());
    assert!(ok, "register the webhook: {out}");
    namespace
}

/// Applies `manifest` and expects a refusal by the webhook whose message contains `expected`; returns
/// the message.
fn refused(e: &Env, manifest: &str, expected: &str) -> String {
    let (ok, out) = kubectl(e, &["apply", "-f", "-"], manifest);
    assert!(
        !ok,
        "expected a refusal containing {expected:?}, got: {out}"
    );
    let marker = format!("admission webhook \"{WEBHOOK_NAME}\" denied the request: ");
    let message = out
        .split_once(&marker)
        .map(|(_, m)| m.trim().to_string())
        .unwrap_or_else(|| panic!("not refused by the webhook: {out}"));
    assert!(
        message.contains(expected),
        "{expected:?} not in {message:?}"
    );
    eprintln!("refused at apply: {message}");
    message
}

fn admitted(e: &Env, manifest: &str) {
    let (ok, out) = kubectl(e, &["apply", "-f", "-"], manifest);
    assert!(ok, "expected the Service to be admitted: {out}");
}

/// Removes the webhook configuration and the namespace of `provider`'s Services.
async fn unregister(e: &Env, provider: &str, namespace: &str) {
    let configuration = format!("cloud-controller-manager-{provider}");
    let (ok, out) = kubectl(
        e,
        &[
            "delete",
            "validatingwebhookconfiguration",
            &configuration,
            "--ignore-not-found",
        ],
        "",
    );
    assert!(ok, "{out}");
    let (ok, out) = kubectl(e, &["delete", "namespace", namespace, "--wait=false"], "");
    assert!(ok, "{out}");
}

/// Another replica holds the Lease for an hour.
async fn hold_lease(e: &Env) {
    let leases: Api<Lease> = Api::namespaced(e.client.clone(), "kube-system");
    let _ = leases.delete(HELD_LEASE, &DeleteParams::default()).await;
    let lease = Lease {
        metadata: kube::api::ObjectMeta {
            name: Some(HELD_LEASE.into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("another-replica".into()),
            lease_duration_seconds: Some(3600),
            acquire_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
            renew_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
            ..Default::default()
        }),
    };
    leases.create(&PostParams::default(), &lease).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real control plane: hack/realkube/test.sh runs it"]
async fn bad_services_are_refused_at_apply_for_every_provider() {
    let e = env().await;
    hold_lease(&e).await;
    fake(&e).await;
    aws(&e).await;
    digitalocean(&e).await;
}

async fn fake(e: &Env) {
    let config = e.dir.path().join("fake.yaml");
    std::fs::write(&config, "clusterID: admission\n").unwrap();
    let config = format!("--cloud-config={}", config.display());
    let port = free_port();
    let daemon = Daemon::webhook(e, "fake", port, std::slice::from_ref(&config), &[]);
    let ns = register(e, "fake", port).await;
    let proxy = "fake.cloud-provider.kubernetes.io/load-balancer-proxy-protocol";
    let message = refused(
        e,
        &service(&ns, "bad-proxy", &[(proxy, "v3")], json!({})),
        "is not a PROXY protocol version",
    );
    refused(
        e,
        &service(&ns, "bad-ip", &[], json!({"loadBalancerIP": "10.0.0.1"})),
        "requested load balancer IP 10.0.0.1 is not a host address of the pool",
    );
    admitted(e, &service(&ns, "good", &[(proxy, "v2")], json!({})));
    // Another load-balancer implementation's Service is not checked.
    admitted(
        e,
        &service(
            &ns,
            "elsewhere",
            &[(proxy, "v3")],
            json!({"loadBalancerClass": "example.com/lb"}),
        ),
    );

    // The webhook down: failurePolicy Ignore admits the Service, and the controller reports the same text.
    drop(daemon);
    admitted(e, &service(&ns, "bad-proxy", &[(proxy, "v3")], json!({})));
    let leader = Daemon::start(
        e,
        "fake-leader",
        &[
            "--cloud-provider=fake".into(),
            config,
            "--leader-elect=false".into(),
            "--controllers=service".into(),
        ],
        &[],
    );
    let events: Api<Event> = Api::namespaced(e.client.clone(), &ns);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let found = events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|ev| {
                ev.reason.as_deref() == Some("SyncLoadBalancerFailed")
                    && ev.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("bad-proxy")
            });
        if let Some(event) = found {
            let note = event.note.unwrap_or_default();
            assert!(
                note.contains(&message),
                "the event {note:?} carries the webhook's message {message:?}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no SyncLoadBalancerFailed event: {}",
            leader.log_text()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The controller releases the Services it finalized.
    let (ok, out) = kubectl(
        e,
        &["delete", "services", "--all", "-n", &ns, "--wait=true"],
        "",
    );
    assert!(ok, "{out}");
    drop(leader);
    unregister(e, "fake", &ns).await;
}

async fn aws(e: &Env) {
    let config = e.dir.path().join("aws.conf");
    std::fs::write(
        &config,
        "[Global]\nRegion = us-east-1\nKubernetesClusterID = admission\n",
    )
    .unwrap();
    let port = free_port();
    let _daemon = Daemon::webhook(
        e,
        "aws",
        port,
        &[format!("--cloud-config={}", config.display())],
        &[
            ("AWS_ACCESS_KEY_ID", "testing".into()),
            ("AWS_SECRET_ACCESS_KEY", "testing".into()),
        ],
    );
    let ns = register(e, "aws", port).await;
    let interval = "service.beta.kubernetes.io/aws-load-balancer-healthcheck-interval";
    let cross_zone =
        "service.beta.kubernetes.io/aws-load-balancer-cross-zone-load-balancing-enabled";
    let extra_groups = "service.beta.kubernetes.io/aws-load-balancer-extra-security-groups";
    let nlb = ("service.beta.kubernetes.io/aws-load-balancer-type", "nlb");
    refused(
        e,
        &service(&ns, "classic-interval", &[(interval, "often")], json!({})),
        interval,
    );
    refused(
        e,
        &service(&ns, "nlb-interval", &[nlb, (interval, "often")], json!({})),
        interval,
    );
    refused(
        e,
        &service(
            &ns,
            "nlb-cross-zone",
            &[nlb, (cross_zone, "maybe")],
            json!({}),
        ),
        cross_zone,
    );
    refused(
        e,
        &service(
            &ns,
            "nlb-extra-groups",
            &[nlb, (extra_groups, "sg-1")],
            json!({}),
        ),
        "not supported by NLB",
    );
    admitted(e, &service(&ns, "good-nlb", &[nlb], json!({})));
    admitted(
        e,
        &service(&ns, "good-classic", &[(interval, "10")], json!({})),
    );
    unregister(e, "aws", &ns).await;
}

async fn digitalocean(e: &Env) {
    let stub = DoStub::start().await;
    let port = free_port();
    let _daemon = Daemon::webhook(
        e,
        "digitalocean",
        port,
        &[],
        &[
            ("DO_ACCESS_TOKEN", stub.token()),
            ("DO_OVERRIDE_URL", stub.url()),
            ("REGION", "nyc3".into()),
            ("DO_CLUSTER_ID", "admission".into()),
        ],
    );
    let ns = register(e, "digitalocean", port).await;
    let size = "service.beta.kubernetes.io/do-loadbalancer-size-unit";
    let protocol = "service.beta.kubernetes.io/do-loadbalancer-protocol";
    let kind = (
        "service.beta.kubernetes.io/do-loadbalancer-type",
        "REGIONAL",
    );
    let certificate = "service.beta.kubernetes.io/do-loadbalancer-certificate-id";
    refused(
        e,
        &service(&ns, "bad-size", &[(size, "huge")], json!({})),
        size,
    );
    refused(
        e,
        &service(
            &ns,
            "bad-protocol",
            &[kind, (protocol, "gopher")],
            json!({}),
        ),
        "gopher",
    );
    // Refused by the API's validation (validate_only): the certificate does not exist.
    refused(
        e,
        &service(
            &ns,
            "no-certificate",
            &[kind, (protocol, "https"), (certificate, "missing")],
            json!({}),
        ),
        "invalid load balancer definition",
    );
    admitted(e, &service(&ns, "good", &[(size, "2")], json!({})));
    assert!(
        stub.load_balancers().is_empty(),
        "validation created nothing"
    );
    assert!(
        stub.requests().iter().all(|r| !r.is_mutating()),
        "no mutating call"
    );
    assert!(
        stub.requests().iter().any(|r| r.is_validate_only()),
        "the API was asked"
    );
    unregister(e, "digitalocean", &ns).await;
}
