//! The real `kubectl`, run as a process against the server the way a person pokes at a cluster:
//! `kubectl create -f` with validation on, `kubectl get -o wide` with the real server's columns (server-side
//! printing) for every served kind, `kubectl describe node` and `kubectl describe service` showing their
//! events, and `kubectl explain` reading the OpenAPI documents.
//!
//! kubectl is `KUBECTL`, else the first `kubectl` on `PATH`, else `target/realkube/bin/kubectl` (built by
//! `make realkube`); without one the tests fail and say how to get it. Like the conformance suite, they run
//! against `TEST_KUBECONFIG` when it is set (`make test-realkube` points it at a real kube-apiserver), so the
//! same assertions hold for both servers.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use k8s_openapi::api::core::v1::{Event, Node, Service};
use k8s_openapi::api::events::v1::Event as EventV1;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use test_apiserver::kubectl_table::Table;

/// Where `make realkube` puts its kubectl, relative to the workspace root.
const REALKUBE_KUBECTL: &str = "target/realkube/bin/kubectl";

/// The kubectl binary: `KUBECTL`, `PATH`, or the one `make realkube` builds.
fn kubectl_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("KUBECTL").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "KUBECTL={} is not a file: point it at a kubectl binary",
            path.display()
        );
        return path;
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("kubectl"))
            .find(|candidate| candidate.is_file())
    });
    if let Some(path) = on_path {
        return path;
    }
    let built = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(REALKUBE_KUBECTL);
    assert!(
        built.is_file(),
        "kubectl is not installed: these tests run the real kubectl against the server. Install kubectl \
         (v1.32 or newer) on PATH, set KUBECTL=/path/to/kubectl, or run `make realkube` to build {REALKUBE_KUBECTL}"
    );
    built
}

/// kubectl with a kubeconfig and a cache directory of its own.
struct Kubectl {
    binary: PathBuf,
    kubeconfig: PathBuf,
    dir: tempfile::TempDir,
}

impl Kubectl {
    fn new(kubeconfig: &Path) -> Self {
        Self {
            binary: kubectl_binary(),
            kubeconfig: kubeconfig.to_path_buf(),
            dir: tempfile::tempdir().expect("a temporary directory for kubectl"),
        }
    }

    /// Writes `text` into the working directory and returns its path.
    fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        path
    }

    async fn run(&self, args: &[&str]) -> Output {
        let cache = self.dir.path().join("cache");
        tokio::process::Command::new(&self.binary)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(&cache)
            .args(args)
            .env_remove("KUBECONFIG")
            .env("HOME", self.dir.path())
            .output()
            .await
            .unwrap_or_else(|e| panic!("running {}: {e}", self.binary.display()))
    }

    /// Runs kubectl and returns its standard output; fails the test when kubectl fails.
    async fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args).await;
        assert!(
            out.status.success(),
            "kubectl {} failed ({}):\n{}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs kubectl, expecting it to fail; returns its standard error.
    async fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args).await;
        assert!(
            !out.status.success(),
            "kubectl {} succeeded:\n{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }
}

/// The header of a kubectl table.
fn header(table: &str) -> Vec<String> {
    Table::parse(table).header
}

/// The header of a kubectl table and its row with a cell `name` (or `<kind>/name`).
fn header_and_row(table: &str, name: &str) -> (Vec<String>, Vec<String>) {
    let parsed = Table::parse(table);
    let row = parsed
        .row(name)
        .unwrap_or_else(|| panic!("no row for {name} in:\n{table}"))
        .to_vec();
    (parsed.header, row)
}

/// The cell of `column` in a row.
fn cell<'a>(header: &[String], row: &'a [String], column: &str) -> &'a str {
    let i = header
        .iter()
        .position(|h| h == column)
        .unwrap_or_else(|| panic!("no column {column} in {header:?}"));
    row.get(i)
        .map(String::as_str)
        .unwrap_or_else(|| panic!("row {row:?} has no {column} cell"))
}

fn now() -> String {
    jiff::Timestamp::from_second(jiff::Timestamp::now().as_second())
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// A Node as a kubelet registers it (status included: a Node keeps its status on create).
fn node_json(name: &str) -> String {
    let t = now();
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"node-role.kubernetes.io/worker": "", "kubernetes.io/hostname": name}},
        "spec": {"providerID": format!("fake://{name}")},
        "status": {
            "addresses": [
                {"type": "Hostname", "address": name},
                {"type": "InternalIP", "address": "10.0.0.21"},
                {"type": "ExternalIP", "address": "203.0.113.21"}
            ],
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "kubelet is posting ready status", "lastHeartbeatTime": t, "lastTransitionTime": t}],
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "nodeInfo": {"machineID": "m", "systemUUID": "s", "bootID": "b", "kernelVersion": "6.1.0-test",
                         "osImage": "Debian GNU/Linux 12 (bookworm)", "containerRuntimeVersion": "containerd://2.0.0",
                         "kubeletVersion": "v1.35.4", "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"}
        }
    })
    .to_string()
}

fn service_yaml(name: &str, namespace: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  type: LoadBalancer\n  selector:\n    app: {name}\n  ports:\n  - name: http\n    port: 80\n    targetPort: 8080\n"
    )
}

fn pod_yaml(name: &str, namespace: &str, node: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {namespace}\n  labels:\n    app: web\nspec:\n  nodeName: {node}\n  containers:\n  - name: web\n    image: nginx:1.27\n    resources:\n      requests:\n        cpu: 100m\n        memory: 64Mi\n"
    )
}

/// A core/v1 Event about the node, as client-go's recorder writes it (the kubelet, the node controllers).
async fn record_node_event(client: &Client, node: &Node, reason: &str, message: &str) {
    let name = node.metadata.name.clone().unwrap_or_default();
    let t = now();
    let event: Event = serde_json::from_value(json!({
        "metadata": {"name": format!("{name}.{}", common::unique("ev")), "namespace": "default"},
        "involvedObject": {"kind": "Node", "name": name, "uid": node.metadata.uid, "apiVersion": "v1"},
        "reason": reason, "message": message, "type": "Normal",
        "source": {"component": "cloud-node-controller"},
        "firstTimestamp": t, "lastTimestamp": t, "count": 1
    }))
    .expect("a core Event");
    Api::<Event>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &event)
        .await
        .expect("create the node's event");
}

/// An events.k8s.io/v1 Event about the Service, as the cloud-controller-manager's service controller
/// writes it.
async fn record_service_event(client: &Client, svc: &Service, reason: &str, note: &str) {
    let namespace = svc.metadata.namespace.clone().unwrap_or_default();
    let name = svc.metadata.name.clone().unwrap_or_default();
    let event: EventV1 = serde_json::from_value(json!({
        "metadata": {"name": format!("{name}.{}", common::unique("ev")), "namespace": namespace},
        "eventTime": jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string(),
        "reportingController": "service-controller", "reportingInstance": "ccm-0",
        "action": "EnsureLoadBalancer", "reason": reason, "note": note, "type": "Normal",
        "regarding": {"kind": "Service", "namespace": namespace, "name": name, "uid": svc.metadata.uid, "apiVersion": "v1"}
    }))
    .expect("an events.k8s.io Event");
    Api::<EventV1>::namespaced(client.clone(), &namespace)
        .create(&PostParams::default(), &event)
        .await
        .expect("create the service's event");
}

const NODE_COLUMNS: &[&str] = &["NAME", "STATUS", "ROLES", "AGE", "VERSION"];
const NODE_WIDE_COLUMNS: &[&str] = &[
    "NAME",
    "STATUS",
    "ROLES",
    "AGE",
    "VERSION",
    "INTERNAL-IP",
    "EXTERNAL-IP",
    "OS-IMAGE",
    "KERNEL-VERSION",
    "CONTAINER-RUNTIME",
];

/// The path of the kubeconfig the target cluster is reached with.
fn kubeconfig_of(target: &common::Target) -> PathBuf {
    match &target.server {
        Some(server) => server.kubeconfig_path().to_path_buf(),
        None => PathBuf::from(std::env::var("TEST_KUBECONFIG").unwrap_or_default()),
    }
}

/// Creates a namespace with `kubectl create -f` (kubectl's generators, such as `kubectl create namespace`,
/// send protobuf bodies, which the in-memory server does not read).
async fn create_namespace(kubectl: &Kubectl, name: &str) {
    let file = kubectl.file(
        &format!("{name}.json"),
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}).to_string(),
    );
    kubectl
        .ok(&["create", "-f", &file.display().to_string()])
        .await;
}

/// Creates a pod with kubectl; on a real cluster the namespace's default ServiceAccount may not exist
/// yet (its controller makes it), so creation is retried for a while.
async fn create_pod(kubectl: &Kubectl, file: &Path) {
    let path = file.display().to_string();
    for _ in 0..40 {
        let out = kubectl.run(&["create", "-f", &path]).await;
        if out.status.success() {
            return;
        }
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            err.contains("serviceaccount"),
            "kubectl create -f {path} failed: {err}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    panic!("the pod of {path} could not be created");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_get_wide_and_describe_like_a_person() {
    let target = common::target().await;
    let kubectl = Kubectl::new(&kubeconfig_of(&target));
    let client = target.client.clone();
    let node_name = common::unique("kubectl-node");
    let namespace = common::unique("kubectl");
    let service_name = "web";

    // Create, with kubectl's default validation: the server validates fields (kubectl learned so from
    // the OpenAPI documents and sent fieldValidation=Strict), so an unknown field is refused.
    let bad = kubectl.file(
        "bad-node.json",
        &json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node_name}, "spec": {"unknownField": true}})
            .to_string(),
    );
    let err = kubectl
        .fails(&["create", "-f", &bad.display().to_string()])
        .await;
    assert!(
        err.contains(r#"strict decoding error: unknown field "spec.unknownField""#),
        "{err}"
    );
    let node_file = kubectl.file("node.json", &node_json(&node_name));
    let out = kubectl
        .ok(&["create", "-f", &node_file.display().to_string()])
        .await;
    assert_eq!(out.trim(), format!("node/{node_name} created"));

    create_namespace(&kubectl, &namespace).await;
    let svc_file = kubectl.file("service.yaml", &service_yaml(service_name, &namespace));
    kubectl
        .ok(&["create", "-f", &svc_file.display().to_string()])
        .await;
    let pod_file = kubectl.file("pod.yaml", &pod_yaml("web-0", &namespace, &node_name));
    create_pod(&kubectl, &pod_file).await;

    let node = Api::<Node>::all(client.clone())
        .get(&node_name)
        .await
        .expect("the node");
    let svc = Api::<Service>::namespaced(client.clone(), &namespace)
        .get(service_name)
        .await
        .expect("the service");
    record_node_event(&client, &node, "Synced", "Node synced successfully").await;
    record_service_event(
        &client,
        &svc,
        "EnsuredLoadBalancer",
        "Ensured load balancer",
    )
    .await;

    // Nodes: the default columns, and every wide column with the addresses.
    let (header, _) = header_and_row(&kubectl.ok(&["get", "nodes"]).await, &node_name);
    assert_eq!(header, NODE_COLUMNS);
    let (header, row) = header_and_row(
        &kubectl.ok(&["get", "nodes", "-o", "wide"]).await,
        &node_name,
    );
    assert_eq!(header, NODE_WIDE_COLUMNS);
    assert_eq!(cell(&header, &row, "STATUS"), "Ready");
    assert_eq!(cell(&header, &row, "ROLES"), "worker");
    assert_eq!(cell(&header, &row, "VERSION"), "v1.35.4");
    assert_eq!(cell(&header, &row, "INTERNAL-IP"), "10.0.0.21");
    assert_eq!(cell(&header, &row, "EXTERNAL-IP"), "203.0.113.21");
    assert_eq!(
        cell(&header, &row, "OS-IMAGE"),
        "Debian GNU/Linux 12 (bookworm)"
    );
    assert_eq!(cell(&header, &row, "KERNEL-VERSION"), "6.1.0-test");
    assert_eq!(
        cell(&header, &row, "CONTAINER-RUNTIME"),
        "containerd://2.0.0"
    );

    // Services and pods.
    let (header, row) = header_and_row(
        &kubectl
            .ok(&["get", "services", "-n", &namespace, "-o", "wide"])
            .await,
        service_name,
    );
    assert_eq!(
        header,
        [
            "NAME",
            "TYPE",
            "CLUSTER-IP",
            "EXTERNAL-IP",
            "PORT(S)",
            "AGE",
            "SELECTOR"
        ]
    );
    assert_eq!(cell(&header, &row, "TYPE"), "LoadBalancer");
    assert_eq!(cell(&header, &row, "EXTERNAL-IP"), "<pending>");
    assert!(cell(&header, &row, "PORT(S)").starts_with("80:"), "{row:?}");
    assert_eq!(
        cell(&header, &row, "SELECTOR"),
        format!("app={service_name}")
    );
    let pods = kubectl
        .ok(&[
            "get",
            "pods",
            "-A",
            "-o",
            "wide",
            "--field-selector",
            &format!("spec.nodeName={node_name}"),
        ])
        .await;
    let (header, row) = header_and_row(&pods, "web-0");
    assert_eq!(
        header,
        [
            "NAMESPACE",
            "NAME",
            "READY",
            "STATUS",
            "RESTARTS",
            "AGE",
            "IP",
            "NODE",
            "NOMINATED NODE",
            "READINESS GATES"
        ]
    );
    assert_eq!(cell(&header, &row, "NODE"), node_name);
    assert_eq!(cell(&header, &row, "READY"), "0/1");

    // describe node: the node's events with their reasons, and the pods bound to it.
    let described = kubectl.ok(&["describe", "node", &node_name]).await;
    assert!(described.contains("InternalIP:  10.0.0.21"), "{described}");
    assert!(
        described.contains("ExternalIP:  203.0.113.21"),
        "{described}"
    );
    assert!(
        described.contains("Non-terminated Pods:          (1 in total)"),
        "{described}"
    );
    assert!(described.contains("web-0"), "{described}");
    let events = described.split("Events:").nth(1).unwrap_or_default();
    assert!(
        events.contains("Synced") && events.contains("Node synced successfully"),
        "describe node shows no Synced event:\n{described}"
    );

    // describe service: its events (written through events.k8s.io/v1) with their reasons.
    let described = kubectl
        .ok(&["describe", "service", service_name, "-n", &namespace])
        .await;
    assert!(
        described.contains("Type:                     LoadBalancer"),
        "{described}"
    );
    let events = described.split("Events:").nth(1).unwrap_or_default();
    assert!(
        events.contains("EnsuredLoadBalancer") && events.contains("service-controller"),
        "describe service shows no EnsuredLoadBalancer event:\n{described}"
    );

    // kubectl get events prints both.
    let (header, row) = header_and_row(
        &kubectl.ok(&["get", "events", "-n", &namespace]).await,
        "EnsuredLoadBalancer",
    );
    assert_eq!(header, ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]);
    assert_eq!(
        cell(&header, &row, "OBJECT"),
        format!("service/{service_name}")
    );

    // kubectl explain reads the OpenAPI v3 documents.
    let explained = kubectl.ok(&["explain", "node.spec.providerID"]).await;
    assert!(explained.contains("KIND:       Node"), "{explained}");
    assert!(explained.contains("providerID"), "{explained}");

    // Clean up (a real cluster keeps what a test leaves).
    kubectl
        .ok(&["delete", "namespace", &namespace, "--wait=false"])
        .await;
    Api::<Node>::all(client)
        .delete(&node_name, &DeleteParams::default())
        .await
        .expect("delete the node");
}

/// The other kinds in `namespace`, created with `kubectl create -f` (each validated by the server) and listed with the
/// real server's columns.
fn other_kinds(namespace: &str) -> String {
    format!(
        "\
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
data:
  a: '1'
  b: '2'
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: robot
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: leader
spec:
  holderIdentity: robot-0
  leaseDurationSeconds: 15
---
apiVersion: events.k8s.io/v1
kind: Event
metadata:
  name: settings.1
eventTime: '2026-01-01T00:00:00.000000Z'
reportingController: example.com/robot
reportingInstance: robot-0
action: Read
reason: Loaded
note: configuration loaded
type: Normal
regarding:
  kind: ConfigMap
  namespace: {namespace}
  name: settings
"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_has_the_real_servers_columns() {
    let target = common::target().await;
    let kubectl = Kubectl::new(&kubeconfig_of(&target));
    let namespace = common::unique("kubectl-kinds");
    let pv_name = common::unique("kubectl-pv");
    create_namespace(&kubectl, &namespace).await;
    let file = kubectl.file("kinds.yaml", &other_kinds(&namespace));
    kubectl
        .ok(&[
            "create",
            "-n",
            &namespace,
            "-f",
            &file.display().to_string(),
        ])
        .await;
    let pv = kubectl.file(
        "pv.json",
        &json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv_name},
                "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                         "hostPath": {"path": "/tmp/pv"}, "storageClassName": "manual"}})
        .to_string(),
    );
    kubectl
        .ok(&["create", "-f", &pv.display().to_string()])
        .await;

    let ns = ["-n", namespace.as_str()];
    for (args, expected) in [
        (
            vec!["get", "namespaces", "-o", "wide"],
            vec!["NAME", "STATUS", "AGE"],
        ),
        (
            vec!["get", "configmaps", "-o", "wide"],
            vec!["NAME", "DATA", "AGE"],
        ),
        (
            vec!["get", "serviceaccounts", "-o", "wide"],
            vec!["NAME", "AGE"],
        ),
        (
            vec!["get", "leases", "-o", "wide"],
            vec!["NAME", "HOLDER", "AGE"],
        ),
        (
            vec!["get", "events", "-o", "wide"],
            vec![
                "LAST SEEN",
                "TYPE",
                "REASON",
                "OBJECT",
                "SUBOBJECT",
                "SOURCE",
                "MESSAGE",
                "FIRST SEEN",
                "COUNT",
                "NAME",
            ],
        ),
        (
            vec!["get", "events.v1.events.k8s.io"],
            vec!["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
        ),
        (
            vec!["get", "persistentvolumes", "-o", "wide"],
            vec![
                "NAME",
                "CAPACITY",
                "ACCESS MODES",
                "RECLAIM POLICY",
                "STATUS",
                "CLAIM",
                "STORAGECLASS",
                "VOLUMEATTRIBUTESCLASS",
                "REASON",
                "AGE",
                "VOLUMEMODE",
            ],
        ),
    ] {
        let mut full = args.clone();
        full.extend(ns);
        let out = kubectl.ok(&full).await;
        assert_eq!(header(&out), expected, "kubectl {}:\n{out}", full.join(" "));
    }
    let (h, row) = header_and_row(
        &kubectl.ok(&["get", "configmaps", "-n", &namespace]).await,
        "settings",
    );
    assert_eq!(cell(&h, &row, "DATA"), "2");
    let (h, row) = header_and_row(
        &kubectl.ok(&["get", "leases", "-n", &namespace]).await,
        "leader",
    );
    assert_eq!(cell(&h, &row, "HOLDER"), "robot-0");
    let (h, row) = header_and_row(
        &kubectl.ok(&["get", "events", "-n", &namespace]).await,
        "Loaded",
    );
    assert_eq!(cell(&h, &row, "OBJECT"), "configmap/settings");
    let (h, row) = header_and_row(&kubectl.ok(&["get", "pv", &pv_name]).await, &pv_name);
    assert_eq!(cell(&h, &row, "CAPACITY"), "1Gi");
    assert_eq!(cell(&h, &row, "ACCESS MODES"), "RWO");
    assert_eq!(cell(&h, &row, "STORAGECLASS"), "manual");

    kubectl
        .ok(&["delete", "pv", &pv_name, "--wait=false"])
        .await;
    kubectl
        .ok(&["delete", "namespace", &namespace, "--wait=false"])
        .await;
}

/// The kinds of the fake/kind overlay that the in-memory server serves; its RBAC, Deployment and
/// PodDisruptionBudget are checked against a real server (`hack/verify-manifests.sh`, server-side dry run).
const SERVED_OVERLAY_KINDS: &[&str] = &["ServiceAccount", "ConfigMap", "Service"];

/// The documents of a multi-document YAML stream whose `kind` is one of `kinds`.
fn documents_of_kinds(yaml: &str, kinds: &[&str]) -> Vec<String> {
    yaml.split("\n---\n")
        .filter(|doc| {
            doc.lines()
                .find_map(|line| line.strip_prefix("kind: "))
                .is_some_and(|kind| kinds.contains(&kind.trim()))
        })
        .map(str::to_string)
        .collect()
}

/// `kubectl apply -k deploy/overlays/kind` as an operator runs it: on a real server the whole overlay
/// (server-side dry run, so nothing stays behind); on the in-memory server, which serves no RBAC or apps
/// kinds, the objects of the kinds it serves, applied for real and read back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kind_overlay_applies_with_kubectl() {
    let target = common::target().await;
    let kubectl = Kubectl::new(&kubeconfig_of(&target));
    let overlay = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/overlays/kind");
    let overlay = overlay.display().to_string();
    if target.server.is_none() {
        kubectl
            .ok(&["apply", "-k", &overlay, "--dry-run=server"])
            .await;
        return;
    }
    let rendered = kubectl.ok(&["kustomize", &overlay]).await;
    let served = documents_of_kinds(&rendered, SERVED_OVERLAY_KINDS);
    assert_eq!(
        served.len(),
        SERVED_OVERLAY_KINDS.len(),
        "the overlay should have one object of each of {SERVED_OVERLAY_KINDS:?}:\n{rendered}"
    );
    let file = kubectl.file("overlay-served.yaml", &served.join("\n---\n"));
    let applied = kubectl
        .ok(&["apply", "-f", &file.display().to_string()])
        .await;
    for kind in ["serviceaccount/", "configmap/", "service/"] {
        assert!(applied.contains(kind), "kubectl apply printed:\n{applied}");
    }
    let listed = kubectl
        .ok(&[
            "get",
            "serviceaccounts,configmaps,services",
            "-n",
            "kube-system",
            "-o",
            "name",
        ])
        .await;
    for kind in [
        "serviceaccount/cloud-controller-manager",
        "configmap/",
        "service/",
    ] {
        assert!(listed.contains(kind), "kubectl get printed:\n{listed}");
    }
}
