//! Differential runs: one scenario against k8s.io/cloud-provider's own cloud-controller-manager
//! (`hack/upstream/cloud-provider`, built from its Go module, with a fake cloud modelling the same instances
//! and load balancers as this project's fake provider) and against ours, one after the other on the same
//! real API server, and the comparison of what each left there.
//!
//! A run cleans the cluster (Services of the scenario's namespace, every Node, the Events), lets the
//! scenario create what must exist before the CCM starts, starts the CCM with the same flags and
//! cloud-config, lets the scenario act and wait for its end state, waits for the controllers' periodic
//! passes to settle and takes a [`Snapshot`]: every Node, Service and PersistentVolume without the fields the API server
//! assigns (uid, resourceVersion, timestamps, managedFields, allocated IPs and ports) and the Events by type,
//! reason, object and reporting component. [`compare`] lists every difference by object and field.
//!
//! Configuration (set by `hack/upstream/test.sh`): `DIFF_KUBECONFIG` (an admin kubeconfig),
//! `DIFF_CCM_KUBECONFIG` (the CCM's identity), `DIFF_UPSTREAM_CCM` (the upstream binary), and optionally
//! `DIFF_LOG_DIR` (where every run's CCM log is kept, as `<scenario>-<upstream|ours>.log`).

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Node, PersistentVolume, Service};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use crate::harness::client_from_kubeconfig;
use crate::{CcmProcess, Check, FakeAdmin, HarnessError, wait_for};

/// Namespace of the scenarios' Services.
pub const NAMESPACE: &str = "default";
/// The cluster CIDR both CCMs get (the pod CIDRs of the scenarios' nodes lie inside it).
pub const CLUSTER_CIDR: &str = "10.244.0.0/16";
/// How long a run waits after its end state for the controllers' periodic passes (every second here).
const SETTLE: Duration = Duration::from_secs(4);

/// Which cloud-controller-manager a run starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Implementation {
    /// k8s.io/cloud-provider's controllers (the Go peer).
    Upstream,
    /// This project's daemon.
    Ours,
}

impl Implementation {
    /// A short name for messages.
    pub fn name(self) -> &'static str {
        match self {
            Implementation::Upstream => "upstream",
            Implementation::Ours => "ours",
        }
    }
}

/// Where the differential suite finds the cluster and the two binaries.
#[derive(Debug, Clone)]
pub struct DiffConfig {
    /// An admin kubeconfig of the cluster.
    pub kubeconfig: PathBuf,
    /// The kubeconfig the CCMs run with.
    pub ccm_kubeconfig: PathBuf,
    /// The upstream CCM binary.
    pub upstream: PathBuf,
    /// This project's CCM binary.
    pub ours: PathBuf,
    /// Where each run's CCM log is kept (`DIFF_LOG_DIR`, optional).
    pub log_dir: Option<PathBuf>,
}

impl DiffConfig {
    /// Reads `DIFF_KUBECONFIG`, `DIFF_CCM_KUBECONFIG` and `DIFF_UPSTREAM_CCM`; ours is the workspace build.
    pub fn from_env() -> Result<DiffConfig, HarnessError> {
        let get = |name: &str| {
            std::env::var(name).map(PathBuf::from).map_err(|_| {
                HarnessError::Config(format!(
                    "{name} is not set: the differential suite runs through hack/upstream/test.sh, which builds \
                     the upstream CCM and starts a real API server"
                ))
            })
        };
        Ok(DiffConfig {
            kubeconfig: get("DIFF_KUBECONFIG")?,
            ccm_kubeconfig: get("DIFF_CCM_KUBECONFIG")?,
            upstream: get("DIFF_UPSTREAM_CCM")?,
            ours: crate::ccm::locate_binary()?,
            log_dir: std::env::var_os("DIFF_LOG_DIR").map(PathBuf::from),
        })
    }
}

/// What one run left in the cluster, normalized for comparison.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Nodes by name.
    pub nodes: BTreeMap<String, Value>,
    /// The scenario namespace's Services by name.
    pub services: BTreeMap<String, Value>,
    /// PersistentVolumes by name.
    pub volumes: BTreeMap<String, Value>,
    /// Event occurrences (the sum of `count`) by "type reason kind/namespace/name component".
    pub events: BTreeMap<String, i64>,
    /// The fake cloud's load balancers (by Service) and routes (by node and CIDR).
    pub cloud: BTreeMap<String, Value>,
}

/// A scenario: what exists before the CCM starts, then what happens while it runs (ending with a wait for
/// the end state).
pub trait Scenario {
    /// The fake cloud's config (the same YAML for both implementations).
    fn cloud_config(&self) -> String;
    /// Creates the objects that exist before the CCM starts.
    fn before(&self, client: Client) -> impl Future<Output = Result<(), HarnessError>>;
    /// Acts while the CCM runs and waits until the end state is reached.
    fn during(&self, client: Client) -> impl Future<Output = Result<(), HarnessError>>;
    /// Drops from a snapshot what differs between runs by construction (for example what another
    /// controller of a real cluster assigns anew each run); nothing by default.
    fn normalize(&self, _snapshot: &mut Snapshot) {}
}

/// Runs `scenario` against one implementation and returns the snapshot and the CCM's log.
pub async fn run(
    config: &DiffConfig,
    implementation: Implementation,
    scenario: &impl Scenario,
) -> Result<(Snapshot, String), HarnessError> {
    let client = client_from_kubeconfig(&config.kubeconfig).await?;
    clean(&client).await?;
    scenario.before(client.clone()).await?;
    let dir = tempfile::tempdir().map_err(|e| io("creating a temporary directory", e))?;
    let cloud_config = dir.path().join("cloud-config.yaml");
    let admin_address = format!("127.0.0.1:{}", crate::harness::free_port()?);
    let admin = FakeAdmin::new(format!("http://{admin_address}"));
    std::fs::write(
        &cloud_config,
        format!(
            "{}\nadminAddress: \"{admin_address}\"\n",
            scenario.cloud_config()
        ),
    )
    .map_err(|e| io("writing the cloud-config", e))?;
    let binary = match implementation {
        Implementation::Upstream => &config.upstream,
        Implementation::Ours => &config.ours,
    };
    let log = dir.path().join("ccm.log");
    let mut ccm = CcmProcess::spawn(
        implementation.name(),
        binary,
        &ccm_args(&cloud_config, &config.ccm_kubeconfig),
        &log,
        0,
    )?;
    let outcome = async {
        scenario.during(client.clone()).await?;
        tokio::time::sleep(SETTLE).await;
        if let Some(status) = ccm.exit_status() {
            return Err(HarnessError::Config(format!(
                "the {} CCM exited ({status})",
                implementation.name()
            )));
        }
        let mut snapshot = snapshot(&client).await?;
        snapshot.cloud = cloud_snapshot(&admin).await?;
        scenario.normalize(&mut snapshot);
        Ok(snapshot)
    }
    .await;
    ccm.kill().await?;
    let text = ccm.log_text();
    if let Some(log_dir) = &config.log_dir {
        let scenario = std::any::type_name_of_val(scenario)
            .rsplit("::")
            .next()
            .unwrap_or("scenario");
        let kept = log_dir.join(format!("{scenario}-{}.log", implementation.name()));
        std::fs::create_dir_all(log_dir)
            .and_then(|()| std::fs::write(&kept, &text))
            .map_err(|e| io(&format!("keeping the CCM log as {}", kept.display()), e))?;
    }
    outcome
        .map(|snapshot| (snapshot, text.clone()))
        .map_err(|e| {
            HarnessError::Config(format!(
                "{e}\n--- {} CCM log (tail):\n{}",
                implementation.name(),
                tail(&text, 40)
            ))
        })
}

/// The flags both CCMs run with: every default controller, no leader election, no serving, fast passes.
pub fn ccm_args(cloud_config: &Path, kubeconfig: &Path) -> Vec<String> {
    vec![
        "--cloud-provider=fake".into(),
        format!("--cloud-config={}", cloud_config.display()),
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--cluster-cidr={CLUSTER_CIDR}"),
        "--allocate-node-cidrs=false".into(),
        "--configure-cloud-routes=true".into(),
        "--node-monitor-period=1s".into(),
        "--node-status-update-frequency=1s".into(),
        "--route-reconciliation-period=1s".into(),
        "--leader-elect=false".into(),
        "--secure-port=0".into(),
        "--v=2".into(),
    ]
}

/// Removes what a previous run left: the namespace's Services and every PersistentVolume (finalizers
/// dropped), every Node, and the Events of the namespace.
pub async fn clean(client: &Client) -> Result<(), HarnessError> {
    let services: Api<Service> = Api::namespaced(client.clone(), NAMESPACE);
    let nodes: Api<Node> = Api::all(client.clone());
    let events: Api<Event> = Api::namespaced(client.clone(), NAMESPACE);
    let kube = |what: &str| {
        let what = what.to_string();
        move |e| HarnessError::kube(what, e)
    };
    // The finalizers go first: no controller may be left to release them (the CCM is stopped, and the
    // control plane has no pv-protection controller).
    force_delete_all(&services, "services", |name| name != "kubernetes").await?;
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    force_delete_all(&volumes, "persistent volumes", |_| true).await?;
    nodes
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .map_err(kube("deleting the nodes"))?;
    events
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .map_err(kube("deleting the events"))?;
    wait_for(
        "the cluster to be clean",
        Duration::from_secs(30),
        || async {
            let left = nodes
                .list(&ListParams::default())
                .await
                .map_err(kube("listing nodes"))?
                .items
                .len()
                + services
                    .list(&ListParams::default())
                    .await
                    .map_err(kube("listing services"))?
                    .items
                    .len()
                - 1
                + volumes
                    .list(&ListParams::default())
                    .await
                    .map_err(kube("listing persistent volumes"))?
                    .items
                    .len();
            Ok(Check::when(left == 0, (), || {
                format!("{left} nodes, services and volumes left")
            }))
        },
    )
    .await
}

/// Deletes every object of `api` whose name is `selected`, its finalizers dropped first.
async fn force_delete_all<K>(
    api: &Api<K>,
    what: &str,
    selected: impl Fn(&str) -> bool,
) -> Result<(), HarnessError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let kube = |action: &str| {
        let what = format!("{action} {what}");
        move |e| HarnessError::kube(what, e)
    };
    let drop_finalizers = json!({"metadata": {"finalizers": null}});
    for object in api
        .list(&ListParams::default())
        .await
        .map_err(kube("listing"))?
    {
        let name = object.name_any();
        if !selected(&name) {
            continue;
        }
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&drop_finalizers),
        )
        .await
        .map_err(kube("dropping the finalizers of"))?;
        api.delete(&name, &DeleteParams::default())
            .await
            .map_err(kube("deleting"))?;
    }
    Ok(())
}

/// Reads the cluster's Nodes and PersistentVolumes, the namespace's Services and Events, normalized.
pub async fn snapshot(client: &Client) -> Result<Snapshot, HarnessError> {
    let kube = |what: &'static str| move |e| HarnessError::kube(what, e);
    let nodes: Api<Node> = Api::all(client.clone());
    let services: Api<Service> = Api::namespaced(client.clone(), NAMESPACE);
    let events: Api<Event> = Api::namespaced(client.clone(), NAMESPACE);
    let mut snapshot = Snapshot::default();
    for node in nodes
        .list(&ListParams::default())
        .await
        .map_err(kube("listing nodes"))?
    {
        snapshot
            .nodes
            .insert(node.name_any(), normalize_node(to_value(&node)));
    }
    for service in services
        .list(&ListParams::default())
        .await
        .map_err(kube("listing services"))?
    {
        if service.name_any() != "kubernetes" {
            snapshot
                .services
                .insert(service.name_any(), normalize_service(to_value(&service)));
        }
    }
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    for volume in volumes
        .list(&ListParams::default())
        .await
        .map_err(kube("listing persistent volumes"))?
    {
        let mut value = to_value(&volume);
        normalize_metadata(&mut value);
        if let Some(status) = value.get_mut("status").and_then(Value::as_object_mut) {
            status.remove("lastPhaseTransitionTime");
        }
        snapshot.volumes.insert(volume.name_any(), value);
    }
    for event in events
        .list(&ListParams::default())
        .await
        .map_err(kube("listing events"))?
    {
        if CONTROL_PLANE_COMPONENTS.contains(&event_component(&event)) {
            continue;
        }
        *snapshot.events.entry(event_key(&event)).or_default() +=
            i64::from(event.count.unwrap_or(1));
    }
    Ok(snapshot)
}

/// The fake cloud's load balancers and routes, without what differs between runs by construction (names
/// derived from UIDs, node ports).
pub async fn cloud_snapshot(admin: &FakeAdmin) -> Result<BTreeMap<String, Value>, HarnessError> {
    let mut cloud = BTreeMap::new();
    for lb in admin.load_balancers().await? {
        let ports: Vec<Value> = lb
            .ports
            .iter()
            .map(|p| json!({"name": p.name, "protocol": p.protocol, "port": p.port}))
            .collect();
        let value = json!({"ip": lb.ip, "cluster": lb.cluster, "ports": ports, "nodes": lb.nodes,
                           "ensureCount": lb.ensure_count, "updateCount": lb.update_count});
        cloud.insert(format!("load balancer {}", lb.service), value);
    }
    for route in admin.routes().await? {
        let value = json!({"cluster": route.cluster, "blackhole": route.blackhole});
        cloud.insert(
            format!("route {} {}", route.target_node, route.destination_cidr),
            value,
        );
    }
    Ok(cloud)
}

fn to_value<T: serde::Serialize>(object: &T) -> Value {
    serde_json::to_value(object).unwrap_or(Value::Null)
}

/// Components of the control plane and the nodes whose events are not the CCM's (the API server's repair
/// loops report on Services the cleanup between runs deletes; real kubelets, kube-controller-manager's node
/// controllers and the scheduler report on every node as it registers, as often as their timing has it).
const CONTROL_PLANE_COMPONENTS: &[&str] = &[
    "ipallocator-repair-controller",
    "portallocator-repair-controller",
    "kubelet",
    "node-controller",
    "default-scheduler",
];

/// "type reason kind/namespace/name component": what the suite compares of an Event (its message and
/// timestamps are the implementation's own).
pub fn event_key(event: &Event) -> String {
    let object = &event.involved_object;
    let component = event_component(event);
    format!(
        "{} {} {}/{}/{} {}",
        event.type_.as_deref().unwrap_or(""),
        event.reason.as_deref().unwrap_or(""),
        object.kind.as_deref().unwrap_or(""),
        object.namespace.as_deref().unwrap_or(""),
        object.name.as_deref().unwrap_or(""),
        component
    )
}

/// The component that reported an Event: its `reportingComponent` (set by events written through the
/// `events.k8s.io` API, such as the API server's repair loops), else its `source.component`.
fn event_component(event: &Event) -> &str {
    event
        .reporting_component
        .as_deref()
        .filter(|c| !c.is_empty())
        .or_else(|| event.source.as_ref().and_then(|s| s.component.as_deref()))
        .unwrap_or_default()
}

/// Drops what the API server assigns to every object.
fn normalize_metadata(object: &mut Value) {
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "managedFields",
            "generation",
        ] {
            metadata.remove(field);
        }
    }
}

/// A Node without server-assigned fields and condition or taint timestamps.
pub fn normalize_node(mut node: Value) -> Value {
    normalize_metadata(&mut node);
    for condition in array_mut(&mut node, "/status/conditions") {
        if let Some(c) = condition.as_object_mut() {
            c.remove("lastHeartbeatTime");
            c.remove("lastTransitionTime");
        }
    }
    for taint in array_mut(&mut node, "/spec/taints") {
        if let Some(t) = taint.as_object_mut() {
            t.remove("timeAdded");
        }
    }
    node
}

/// A Service without server-assigned fields and the cluster IPs and node ports the API server allocates.
pub fn normalize_service(mut service: Value) -> Value {
    normalize_metadata(&mut service);
    if let Some(spec) = service.get_mut("spec").and_then(Value::as_object_mut) {
        for field in ["clusterIP", "clusterIPs", "healthCheckNodePort"] {
            spec.remove(field);
        }
    }
    for port in array_mut(&mut service, "/spec/ports") {
        if let Some(p) = port.as_object_mut() {
            p.remove("nodePort");
        }
    }
    service
}

fn array_mut<'a>(value: &'a mut Value, pointer: &str) -> impl Iterator<Item = &'a mut Value> {
    value
        .pointer_mut(pointer)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
}

/// Every difference between the upstream and our snapshot, as "object: field: upstream X, ours Y".
pub fn compare(upstream: &Snapshot, ours: &Snapshot) -> Vec<String> {
    let mut differences = Vec::new();
    diff_maps("node", &upstream.nodes, &ours.nodes, &mut differences);
    diff_maps(
        "service",
        &upstream.services,
        &ours.services,
        &mut differences,
    );
    diff_maps("volume", &upstream.volumes, &ours.volumes, &mut differences);
    diff_maps("cloud", &upstream.cloud, &ours.cloud, &mut differences);
    let keys: std::collections::BTreeSet<&String> =
        upstream.events.keys().chain(ours.events.keys()).collect();
    for key in keys {
        let (u, o) = (upstream.events.get(key), ours.events.get(key));
        if u != o {
            differences.push(format!(
                "event {key}: upstream {} occurrence(s), ours {}",
                u.copied().unwrap_or(0),
                o.copied().unwrap_or(0)
            ));
        }
    }
    differences
}

fn diff_maps(
    kind: &str,
    upstream: &BTreeMap<String, Value>,
    ours: &BTreeMap<String, Value>,
    out: &mut Vec<String>,
) {
    let names: std::collections::BTreeSet<&String> = upstream.keys().chain(ours.keys()).collect();
    for name in names {
        match (upstream.get(name), ours.get(name)) {
            (Some(u), Some(o)) => diff_values(&format!("{kind} {name}"), "", u, o, out),
            (Some(_), None) => out.push(format!(
                "{kind} {name}: exists after upstream, not after ours"
            )),
            (None, _) => out.push(format!(
                "{kind} {name}: exists after ours, not after upstream"
            )),
        }
    }
}

fn diff_values(object: &str, path: &str, upstream: &Value, ours: &Value, out: &mut Vec<String>) {
    match (upstream, ours) {
        (Value::Object(u), Value::Object(o)) => {
            let keys: std::collections::BTreeSet<&String> = u.keys().chain(o.keys()).collect();
            for key in keys {
                let (uv, ov) = (
                    u.get(key).unwrap_or(&Value::Null),
                    o.get(key).unwrap_or(&Value::Null),
                );
                diff_values(object, &format!("{path}.{key}"), uv, ov, out);
            }
        }
        _ if upstream == ours => {}
        _ => out.push(format!(
            "{object}: {path}: upstream {upstream}, ours {ours}"
        )),
    }
}

fn io(what: &str, source: std::io::Error) -> HarnessError {
    HarnessError::Io {
        what: what.to_string(),
        source,
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot_with_node(node: Value) -> Snapshot {
        Snapshot {
            nodes: BTreeMap::from([("n1".to_string(), normalize_node(node))]),
            ..Snapshot::default()
        }
    }

    #[test]
    fn server_assigned_fields_and_timestamps_are_not_compared() {
        let a = json!({"metadata": {"name": "n1", "uid": "a", "resourceVersion": "1"},
            "status": {"conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "t1"}]}});
        let b = json!({"metadata": {"name": "n1", "uid": "b", "resourceVersion": "9"},
            "status": {"conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "t2"}]}});
        assert!(compare(&snapshot_with_node(a), &snapshot_with_node(b)).is_empty());
    }

    #[test]
    fn a_differing_field_is_named_with_both_values() {
        let a = json!({"metadata": {"name": "n1", "labels": {"zone": "a"}}});
        let b = json!({"metadata": {"name": "n1", "labels": {"zone": "b"}}});
        assert_eq!(
            compare(&snapshot_with_node(a), &snapshot_with_node(b)),
            vec![r#"node n1: .metadata.labels.zone: upstream "a", ours "b""#.to_string()]
        );
    }

    #[test]
    fn cloud_state_is_compared() {
        let lb = |nodes: Value| {
            BTreeMap::from([(
                "load balancer default/lb".to_string(),
                json!({"nodes": nodes}),
            )])
        };
        let upstream = Snapshot {
            cloud: lb(json!(["u1"])),
            ..Snapshot::default()
        };
        let ours = Snapshot {
            cloud: lb(json!(["u1", "u2"])),
            ..Snapshot::default()
        };
        assert_eq!(
            compare(&upstream, &ours),
            vec![
                r#"cloud load balancer default/lb: .nodes: upstream ["u1"], ours ["u1","u2"]"#
                    .to_string()
            ]
        );
    }

    #[test]
    fn missing_objects_and_event_counts_are_differences() {
        let upstream = Snapshot {
            events: BTreeMap::from([(
                "Normal Synced Node//n1 cloud-node-controller".to_string(),
                1,
            )]),
            ..snapshot_with_node(json!({"metadata": {"name": "n1"}}))
        };
        let differences = compare(&upstream, &Snapshot::default());
        assert_eq!(differences.len(), 2, "{differences:?}");
        assert!(differences[0].contains("exists after upstream, not after ours"));
        assert!(differences[1].contains("upstream 1 occurrence(s), ours 0"));
    }

    #[test]
    fn the_reporting_component_names_an_event_before_its_source() {
        let mut event = Event {
            reporting_component: Some("ipallocator-repair-controller".into()),
            ..Event::default()
        };
        assert_eq!(event_component(&event), "ipallocator-repair-controller");
        assert!(CONTROL_PLANE_COMPONENTS.contains(&event_component(&event)));
        event.reporting_component = Some(String::new());
        event.source = Some(k8s_openapi::api::core::v1::EventSource {
            component: Some("service-controller".into()),
            host: None,
        });
        assert_eq!(event_component(&event), "service-controller");
        assert!(event_key(&event).ends_with(" service-controller"));
    }
}
