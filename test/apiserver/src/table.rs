//! Server-side printing: the `meta.k8s.io` Table a real API server answers a GET, LIST or WATCH with
//! when the client asks for `application/json;as=Table;v=v1;g=meta.k8s.io` (as `kubectl get` does),
//! with the columns and cells of the real server's printers for each served kind.
//!
//! As upstream, every cell is filled (the wide, priority-1 columns too: the client hides them unless
//! `-o wide`), rows carry the object as `PartialObjectMetadata` unless `includeObject` says otherwise,
//! and a watch sends the column definitions with its first event only.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use k8s_openapi::api::{coordination, core};
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::schemars::{JsonSchema, SchemaGenerator};
use serde_json::{Map, Value, json};

use crate::error::{ApiError, quote};
use crate::resources::{Backing, ResourceDef, Storage};

/// What rows carry as `object` (the `includeObject` query parameter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IncludeObject {
    /// Nothing.
    None,
    /// The object's metadata as a `PartialObjectMetadata` (the default).
    Metadata,
    /// The whole object.
    Object,
}

impl IncludeObject {
    /// Parses `includeObject`; an unknown value is a 400, as upstream.
    pub(crate) fn parse(value: Option<&str>) -> Result<Self, ApiError> {
        match value.unwrap_or("") {
            "" | "Metadata" => Ok(IncludeObject::Metadata),
            "None" => Ok(IncludeObject::None),
            "Object" => Ok(IncludeObject::Object),
            other => Err(ApiError::bad_request(format!(
                "unrecognized includeObject value: {}",
                quote(other)
            ))),
        }
    }
}

/// How a request wants its objects printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TableOptions {
    /// `meta.k8s.io/v1` or `meta.k8s.io/v1beta1`.
    pub api_version: &'static str,
    pub include: IncludeObject,
    /// Leave out the column definitions (`noHeaders`, and every watch event after the first).
    pub no_headers: bool,
}

/// One column definition.
#[derive(Debug, Clone)]
struct Column {
    name: &'static str,
    ty: &'static str,
    format: &'static str,
    priority: u8,
    description: String,
}

impl Column {
    fn to_json(&self) -> Value {
        json!({"name": self.name, "type": self.ty, "format": self.format,
               "description": self.description, "priority": self.priority})
    }
}

/// The documentation of `field` of `T`, as the Kubernetes API types document it (what upstream's
/// `SwaggerDoc()` returns for the column descriptions).
fn doc<T: JsonSchema>(field: &str) -> String {
    let schema = SchemaGenerator::default().root_schema_for::<T>();
    schema
        .get("properties")
        .and_then(|p| p.get(field))
        .and_then(|f| f.get("description"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn col(name: &'static str, ty: &'static str, priority: u8, description: String) -> Column {
    Column {
        name,
        ty,
        format: "",
        priority,
        description,
    }
}

fn name_col(priority: u8) -> Column {
    Column {
        format: "name",
        ..col("Name", "string", priority, doc::<meta::ObjectMeta>("name"))
    }
}

fn age_col() -> Column {
    col(
        "Age",
        "string",
        0,
        doc::<meta::ObjectMeta>("creationTimestamp"),
    )
}

fn node_columns() -> Vec<Column> {
    use core::v1::{NodeStatus, NodeSystemInfo};
    vec![
        name_col(0),
        col("Status", "string", 0, "The status of the node".into()),
        col("Roles", "string", 0, "The roles of the node".into()),
        age_col(),
        col(
            "Version",
            "string",
            0,
            doc::<NodeSystemInfo>("kubeletVersion"),
        ),
        col("Internal-IP", "string", 1, doc::<NodeStatus>("addresses")),
        col("External-IP", "string", 1, doc::<NodeStatus>("addresses")),
        col("OS-Image", "string", 1, doc::<NodeSystemInfo>("osImage")),
        col(
            "Kernel-Version",
            "string",
            1,
            doc::<NodeSystemInfo>("kernelVersion"),
        ),
        col(
            "Container-Runtime",
            "string",
            1,
            doc::<NodeSystemInfo>("containerRuntimeVersion"),
        ),
    ]
}

fn service_columns() -> Vec<Column> {
    use core::v1::ServiceSpec;
    vec![
        name_col(0),
        col("Type", "string", 0, doc::<ServiceSpec>("type")),
        col("Cluster-IP", "string", 0, doc::<ServiceSpec>("clusterIP")),
        col(
            "External-IP",
            "string",
            0,
            doc::<ServiceSpec>("externalIPs"),
        ),
        col("Port(s)", "string", 0, doc::<ServiceSpec>("ports")),
        age_col(),
        col("Selector", "string", 1, doc::<ServiceSpec>("selector")),
    ]
}

fn pod_columns() -> Vec<Column> {
    use core::v1::{PodSpec, PodStatus};
    vec![
        name_col(0),
        col(
            "Ready",
            "string",
            0,
            "The aggregate readiness state of this pod for accepting traffic.".into(),
        ),
        col(
            "Status",
            "string",
            0,
            "The aggregate status of the containers in this pod.".into(),
        ),
        col(
            "Restarts",
            "string",
            0,
            "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.".into(),
        ),
        age_col(),
        col("IP", "string", 1, doc::<PodStatus>("podIP")),
        col("Node", "string", 1, doc::<PodSpec>("nodeName")),
        col("Nominated Node", "string", 1, doc::<PodStatus>("nominatedNodeName")),
        col("Readiness Gates", "string", 1, doc::<PodSpec>("readinessGates")),
    ]
}

fn event_columns() -> Vec<Column> {
    use core::v1::{Event, ObjectReference};
    vec![
        col("Last Seen", "string", 0, doc::<Event>("lastTimestamp")),
        col("Type", "string", 0, doc::<Event>("type")),
        col("Reason", "string", 0, doc::<Event>("reason")),
        col("Object", "string", 0, doc::<Event>("involvedObject")),
        col(
            "Subobject",
            "string",
            1,
            doc::<ObjectReference>("fieldPath"),
        ),
        col("Source", "string", 1, doc::<Event>("source")),
        col("Message", "string", 0, doc::<Event>("message")),
        col("First Seen", "string", 1, doc::<Event>("firstTimestamp")),
        col("Count", "string", 1, doc::<Event>("count")),
        name_col(1),
    ]
}

fn namespace_columns() -> Vec<Column> {
    vec![
        name_col(0),
        col("Status", "string", 0, "The status of the namespace".into()),
        age_col(),
    ]
}

fn persistent_volume_columns() -> Vec<Column> {
    use core::v1::{PersistentVolumeSpec, PersistentVolumeStatus};
    vec![
        name_col(0),
        col(
            "Capacity",
            "string",
            0,
            doc::<PersistentVolumeSpec>("capacity"),
        ),
        col(
            "Access Modes",
            "string",
            0,
            doc::<PersistentVolumeSpec>("accessModes"),
        ),
        col(
            "Reclaim Policy",
            "string",
            0,
            doc::<PersistentVolumeSpec>("persistentVolumeReclaimPolicy"),
        ),
        col(
            "Status",
            "string",
            0,
            doc::<PersistentVolumeStatus>("phase"),
        ),
        col(
            "Claim",
            "string",
            0,
            doc::<PersistentVolumeSpec>("claimRef"),
        ),
        col("StorageClass", "string", 0, "StorageClass of the pv".into()),
        col(
            "VolumeAttributesClass",
            "string",
            0,
            "VolumeAttributesClass of the pv".into(),
        ),
        col(
            "Reason",
            "string",
            0,
            doc::<PersistentVolumeStatus>("reason"),
        ),
        age_col(),
        col(
            "VolumeMode",
            "string",
            1,
            doc::<PersistentVolumeSpec>("volumeMode"),
        ),
    ]
}

/// ServiceAccounts print no SECRETS column since token secrets are no longer made for them.
fn service_account_columns() -> Vec<Column> {
    vec![name_col(0), age_col()]
}

fn config_map_columns() -> Vec<Column> {
    vec![
        name_col(0),
        col("Data", "string", 0, doc::<core::v1::ConfigMap>("data")),
        age_col(),
    ]
}

fn lease_columns() -> Vec<Column> {
    vec![
        name_col(0),
        col(
            "Holder",
            "string",
            0,
            doc::<coordination::v1::LeaseSpec>("holderIdentity"),
        ),
        age_col(),
    ]
}

/// The columns of kinds without a printer of their own (upstream's default table convertor).
fn default_columns() -> Vec<Column> {
    vec![
        name_col(0),
        col(
            "Created At",
            "date",
            0,
            doc::<meta::ObjectMeta>("creationTimestamp"),
        ),
    ]
}

/// The printer of a storage: its columns (built once) and how a row's cells are computed.
struct Printer {
    columns: fn() -> Vec<Column>,
    cells: fn(&Value) -> Vec<Value>,
}

impl Printer {
    fn new(columns: fn() -> Vec<Column>, cells: fn(&Value) -> Vec<Value>) -> Self {
        Self { columns, cells }
    }
}

fn printer(def: &ResourceDef) -> Printer {
    match def.backing {
        Backing::Stored(Storage::Nodes) => Printer::new(node_columns, node_cells),
        Backing::Stored(Storage::Services) => Printer::new(service_columns, service_cells),
        Backing::Stored(Storage::Pods) => Printer::new(pod_columns, pod_cells),
        Backing::Stored(Storage::Events) => Printer::new(event_columns, event_cells),
        Backing::Stored(Storage::Namespaces) => Printer::new(namespace_columns, namespace_cells),
        Backing::Stored(Storage::PersistentVolumes) => {
            Printer::new(persistent_volume_columns, persistent_volume_cells)
        }
        Backing::Stored(Storage::ServiceAccounts) => {
            Printer::new(service_account_columns, service_account_cells)
        }
        Backing::Stored(Storage::ConfigMaps) => Printer::new(config_map_columns, config_map_cells),
        Backing::Stored(Storage::Leases) => Printer::new(lease_columns, lease_cells),
        Backing::TokenReview | Backing::SubjectAccessReview => {
            Printer::new(default_columns, default_cells)
        }
    }
}

/// The column definitions of `def`, computed once per kind.
fn column_json(def: &ResourceDef) -> Value {
    static CACHE: OnceLock<parking_lot::Mutex<std::collections::HashMap<&'static str, Value>>> =
        OnceLock::new();
    let key = match def.backing {
        Backing::Stored(s) => storage_key(s),
        Backing::TokenReview | Backing::SubjectAccessReview => "default",
    };
    let cache = CACHE.get_or_init(Default::default);
    if let Some(v) = cache.lock().get(key) {
        return v.clone();
    }
    let v = Value::Array(
        (printer(def).columns)()
            .iter()
            .map(Column::to_json)
            .collect(),
    );
    cache.lock().insert(key, v.clone());
    v
}

fn storage_key(s: Storage) -> &'static str {
    match s {
        Storage::Nodes => "nodes",
        Storage::Services => "services",
        Storage::PersistentVolumes => "persistentvolumes",
        Storage::Namespaces => "namespaces",
        Storage::Events => "events",
        Storage::Leases => "leases",
        Storage::ServiceAccounts => "serviceaccounts",
        Storage::ConfigMaps => "configmaps",
        Storage::Pods => "pods",
    }
}

// ---------------------------------------------------------------------------------------------
// durations and small helpers

/// Upstream's `duration.HumanDuration`: two or three significant figures of a duration.
pub(crate) fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let days = (hours / 24) % 365;
        return if days == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{days}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// How long ago an RFC 3339 timestamp was, or `<unknown>` for a missing or unreadable one.
fn since(timestamp: &Value) -> String {
    let parsed = timestamp
        .as_str()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok());
    match parsed {
        Some(t) => human_duration(jiff::Timestamp::now().as_second() - t.as_second()),
        None => "<unknown>".into(),
    }
}

fn has_time(timestamp: &Value) -> bool {
    timestamp.as_str().is_some_and(|t| !t.is_empty())
}

fn str_or<'a>(v: &'a Value, default: &'a str) -> &'a str {
    v.as_str().filter(|s| !s.is_empty()).unwrap_or(default)
}

fn name(v: &Value) -> Value {
    v["metadata"]["name"].clone()
}

fn age(v: &Value) -> Value {
    json!(since(&v["metadata"]["creationTimestamp"]))
}

/// `k=v,k2=v2` in key order, `<none>` for none (upstream's `labels.FormatLabels`).
fn format_labels(map: &Value) -> String {
    let pairs: Vec<String> = map
        .as_object()
        .map(|m| {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            keys.iter()
                .map(|k| format!("{k}={}", m[*k].as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    if pairs.is_empty() {
        "<none>".into()
    } else {
        pairs.join(",")
    }
}

fn array(v: &Value) -> &[Value] {
    v.as_array().map_or(&[], Vec::as_slice)
}

// ---------------------------------------------------------------------------------------------
// cells

/// The first address of a type, or `<none>`.
fn node_address(node: &Value, ty: &str) -> String {
    array(&node["status"]["addresses"])
        .iter()
        .find(|a| a["type"] == ty)
        .and_then(|a| a["address"].as_str())
        .unwrap_or("<none>")
        .to_string()
}

/// `node-role.kubernetes.io/<role>` labels and the `kubernetes.io/role` label, sorted.
fn node_roles(node: &Value) -> String {
    let mut roles = BTreeSet::new();
    if let Some(labels) = node["metadata"]["labels"].as_object() {
        for (k, v) in labels {
            if let Some(role) = k.strip_prefix("node-role.kubernetes.io/") {
                if !role.is_empty() {
                    roles.insert(role.to_string());
                }
            } else if k == "kubernetes.io/role" && v.as_str().is_some_and(|v| !v.is_empty()) {
                roles.insert(v.as_str().unwrap_or_default().to_string());
            }
        }
    }
    if roles.is_empty() {
        "<none>".into()
    } else {
        roles.into_iter().collect::<Vec<_>>().join(",")
    }
}

fn node_status(node: &Value) -> String {
    let ready = array(&node["status"]["conditions"])
        .iter()
        .rev()
        .find(|c| c["type"] == "Ready");
    let mut status = vec![match ready {
        Some(c) if c["status"] == "True" => "Ready".to_string(),
        Some(_) => "NotReady".to_string(),
        None => "Unknown".to_string(),
    }];
    if node["spec"]["unschedulable"].as_bool() == Some(true) {
        status.push("SchedulingDisabled".into());
    }
    status.join(",")
}

fn node_cells(node: &Value) -> Vec<Value> {
    let info = &node["status"]["nodeInfo"];
    vec![
        name(node),
        json!(node_status(node)),
        json!(node_roles(node)),
        age(node),
        json!(info["kubeletVersion"].as_str().unwrap_or("")),
        json!(node_address(node, "InternalIP")),
        json!(node_address(node, "ExternalIP")),
        json!(str_or(&info["osImage"], "<unknown>")),
        json!(str_or(&info["kernelVersion"], "<unknown>")),
        json!(str_or(&info["containerRuntimeVersion"], "<unknown>")),
    ]
}

/// The load balancer's ingress points (IP, or hostname), sorted and de-duplicated.
fn load_balancer_ingress(svc: &Value) -> Vec<String> {
    let set: BTreeSet<String> = array(&svc["status"]["loadBalancer"]["ingress"])
        .iter()
        .filter_map(|i| {
            i["ip"]
                .as_str()
                .filter(|s| !s.is_empty())
                .or_else(|| i["hostname"].as_str().filter(|s| !s.is_empty()))
                .map(str::to_string)
        })
        .collect();
    set.into_iter().collect()
}

fn strings(v: &Value) -> Vec<String> {
    array(v)
        .iter()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

/// The EXTERNAL-IP cell (upstream's `getServiceExternalIP`, wide: nothing is clipped).
fn service_external_ip(svc: &Value) -> String {
    let external = strings(&svc["spec"]["externalIPs"]);
    match svc["spec"]["type"].as_str().unwrap_or("ClusterIP") {
        "ClusterIP" | "NodePort" if external.is_empty() => "<none>".into(),
        "ClusterIP" | "NodePort" => external.join(","),
        "LoadBalancer" => {
            let mut all = load_balancer_ingress(svc);
            all.extend(external);
            if all.is_empty() {
                "<pending>".into()
            } else {
                all.join(",")
            }
        }
        "ExternalName" => svc["spec"]["externalName"]
            .as_str()
            .unwrap_or("")
            .to_string(),
        _ => "<unknown>".into(),
    }
}

/// `80:31234/TCP,53/UDP`.
fn service_ports(svc: &Value) -> String {
    let pieces: Vec<String> = array(&svc["spec"]["ports"])
        .iter()
        .map(|p| {
            let port = p["port"].as_i64().unwrap_or(0);
            let protocol = p["protocol"].as_str().unwrap_or("");
            match p["nodePort"].as_i64().filter(|n| *n > 0) {
                Some(node_port) => format!("{port}:{node_port}/{protocol}"),
                None => format!("{port}/{protocol}"),
            }
        })
        .collect();
    if pieces.is_empty() {
        "<none>".into()
    } else {
        pieces.join(",")
    }
}

fn service_cells(svc: &Value) -> Vec<Value> {
    let cluster_ip = svc["spec"]["clusterIPs"][0]
        .as_str()
        .unwrap_or("<none>")
        .to_string();
    vec![
        name(svc),
        json!(svc["spec"]["type"].as_str().unwrap_or("")),
        json!(cluster_ip),
        json!(service_external_ip(svc)),
        json!(service_ports(svc)),
        age(svc),
        json!(format_labels(&svc["spec"]["selector"])),
    ]
}

/// The reason a terminated container is reported with: its reason, else its signal or exit code.
fn terminated_reason(t: &Value, prefix: &str) -> String {
    if let Some(reason) = t["reason"].as_str().filter(|r| !r.is_empty()) {
        return format!("{prefix}{reason}");
    }
    match t["signal"].as_i64().filter(|s| *s != 0) {
        Some(signal) => format!("{prefix}Signal:{signal}"),
        None => format!("{prefix}ExitCode:{}", t["exitCode"].as_i64().unwrap_or(0)),
    }
}

/// Restarts and the last termination time seen in container statuses.
#[derive(Default)]
struct Restarts {
    count: i64,
    last: Option<jiff::Timestamp>,
}

impl Restarts {
    fn add(&mut self, status: &Value) {
        self.count += status["restartCount"].as_i64().unwrap_or(0);
        let finished = status["lastState"]["terminated"]["finishedAt"]
            .as_str()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok());
        if let Some(t) = finished
            && self.last.is_none_or(|l| l < t)
        {
            self.last = Some(t);
        }
    }

    fn cell(&self) -> String {
        match self.last {
            Some(t) => format!(
                "{} ({} ago)",
                self.count,
                human_duration(jiff::Timestamp::now().as_second() - t.as_second())
            ),
            None => self.count.to_string(),
        }
    }
}

/// The STATUS of a Pod while its init containers run, if they do.
fn init_status(pod: &Value, restarts: &mut Restarts) -> Option<String> {
    let total = array(&pod["spec"]["initContainers"]).len();
    for (i, c) in array(&pod["status"]["initContainerStatuses"])
        .iter()
        .enumerate()
    {
        restarts.add(c);
        let state = &c["state"];
        let terminated = &state["terminated"];
        if terminated.is_object() && terminated["exitCode"].as_i64().unwrap_or(0) == 0 {
            continue;
        }
        if terminated.is_object() {
            return Some(terminated_reason(terminated, "Init:"));
        }
        let waiting = state["waiting"]["reason"].as_str().unwrap_or("");
        if !waiting.is_empty() && waiting != "PodInitializing" {
            return Some(format!("Init:{waiting}"));
        }
        return Some(format!("Init:{i}/{total}"));
    }
    None
}

fn pod_ready_condition(pod: &Value) -> bool {
    array(&pod["status"]["conditions"])
        .iter()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// READY, STATUS and RESTARTS of a Pod (upstream's `printPod`, for regular and init containers).
fn pod_state(pod: &Value) -> (String, String, String) {
    let status = &pod["status"];
    let total = array(&pod["spec"]["containers"]).len();
    let mut reason = str_or(&status["reason"], str_or(&status["phase"], "")).to_string();
    let mut restarts = Restarts::default();
    let mut ready = 0;
    if let Some(init) = init_status(pod, &mut restarts) {
        reason = init;
    } else {
        restarts = Restarts::default();
        let mut running = false;
        for c in array(&status["containerStatuses"]).iter().rev() {
            restarts.add(c);
            let state = &c["state"];
            if let Some(waiting) = state["waiting"]["reason"]
                .as_str()
                .filter(|r| !r.is_empty())
            {
                reason = waiting.to_string();
            } else if state["terminated"].is_object() {
                reason = terminated_reason(&state["terminated"], "");
            } else if c["ready"].as_bool() == Some(true) && state["running"].is_object() {
                running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && running {
            reason = if pod_ready_condition(pod) {
                "Running".into()
            } else {
                "NotReady".into()
            };
        }
    }
    if has_time(&pod["metadata"]["deletionTimestamp"]) {
        reason = if status["reason"] == "NodeLost" {
            "Unknown".into()
        } else {
            "Terminating".into()
        };
    }
    (format!("{ready}/{total}"), reason, restarts.cell())
}

fn pod_cells(pod: &Value) -> Vec<Value> {
    let (ready, reason, restarts) = pod_state(pod);
    let ip = pod["status"]["podIPs"][0]["ip"]
        .as_str()
        .filter(|s| !s.is_empty())
        .unwrap_or("<none>");
    let gates = array(&pod["spec"]["readinessGates"]);
    let gates_cell = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let conditions = array(&pod["status"]["conditions"]);
        let passing = gates
            .iter()
            .filter(|g| {
                conditions
                    .iter()
                    .find(|c| c["type"] == g["conditionType"])
                    .is_some_and(|c| c["status"] == "True")
            })
            .count();
        format!("{passing}/{}", gates.len())
    };
    vec![
        name(pod),
        json!(ready),
        json!(reason),
        json!(restarts),
        age(pod),
        json!(ip),
        json!(str_or(&pod["spec"]["nodeName"], "<none>")),
        json!(str_or(&pod["status"]["nominatedNodeName"], "<none>")),
        json!(gates_cell),
    ]
}

/// The row conditions of a finished Pod.
fn pod_conditions(pod: &Value) -> Option<Value> {
    let (reason, message) = match pod["status"]["phase"].as_str() {
        Some("Succeeded") => ("Succeeded", "The pod has completed successfully."),
        Some("Failed") => ("Failed", "The pod failed."),
        _ => return None,
    };
    Some(json!([{"type": "Completed", "status": "True", "reason": reason, "message": message}]))
}

/// An Event in the core shape, whichever group it was read through.
fn core_event(ev: &Value) -> Value {
    if ev.get("regarding").is_some()
        || ev.get("note").is_some()
        || ev.get("deprecatedSource").is_some()
    {
        crate::events::v1_to_core(ev.clone())
    } else {
        ev.clone()
    }
}

fn event_cells(ev: &Value) -> Vec<Value> {
    let ev = core_event(ev);
    let first = if has_time(&ev["firstTimestamp"]) {
        since(&ev["firstTimestamp"])
    } else {
        since(&ev["eventTime"])
    };
    let mut last = if has_time(&ev["lastTimestamp"]) {
        since(&ev["lastTimestamp"])
    } else {
        first.clone()
    };
    let mut count = ev["count"].as_i64().unwrap_or(0);
    if ev["series"].is_object() {
        last = since(&ev["series"]["lastObservedTime"]);
        count = ev["series"]["count"].as_i64().unwrap_or(0);
    } else if count == 0 {
        count = 1;
    }
    let involved = &ev["involvedObject"];
    let kind = involved["kind"].as_str().unwrap_or("").to_lowercase();
    let target = match involved["name"].as_str().filter(|n| !n.is_empty()) {
        Some(n) => format!("{kind}/{n}"),
        None => kind,
    };
    let component = str_or(
        &ev["source"]["component"],
        str_or(&ev["reportingComponent"], ""),
    );
    let host = str_or(&ev["source"]["host"], str_or(&ev["reportingInstance"], ""));
    let source = if host.is_empty() {
        component.to_string()
    } else {
        format!("{component}, {host}")
    };
    vec![
        json!(last),
        json!(ev["type"].as_str().unwrap_or("")),
        json!(ev["reason"].as_str().unwrap_or("")),
        json!(target),
        json!(involved["fieldPath"].as_str().unwrap_or("")),
        json!(source),
        json!(ev["message"].as_str().unwrap_or("").trim()),
        json!(first),
        json!(count),
        name(&ev),
    ]
}

fn namespace_cells(ns: &Value) -> Vec<Value> {
    vec![
        name(ns),
        json!(ns["status"]["phase"].as_str().unwrap_or("")),
        age(ns),
    ]
}

/// `RWO,ROX,RWX,RWOP` in that order (kubectl's `GetAccessModesAsString`).
fn access_modes(modes: &Value) -> String {
    let modes = strings(modes);
    [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ]
    .iter()
    .filter(|(long, _)| modes.iter().any(|m| m == long))
    .map(|(_, short)| *short)
    .collect::<Vec<_>>()
    .join(",")
}

fn persistent_volume_cells(pv: &Value) -> Vec<Value> {
    let spec = &pv["spec"];
    let claim = if spec["claimRef"].is_object() {
        format!(
            "{}/{}",
            spec["claimRef"]["namespace"].as_str().unwrap_or(""),
            spec["claimRef"]["name"].as_str().unwrap_or("")
        )
    } else {
        String::new()
    };
    let class = spec["storageClassName"]
        .as_str()
        .or_else(|| {
            pv["metadata"]["annotations"]["volume.beta.kubernetes.io/storage-class"].as_str()
        })
        .unwrap_or("");
    let phase = if has_time(&pv["metadata"]["deletionTimestamp"]) {
        "Terminating"
    } else {
        pv["status"]["phase"].as_str().unwrap_or("")
    };
    vec![
        name(pv),
        json!(spec["capacity"]["storage"].as_str().unwrap_or("0")),
        json!(access_modes(&spec["accessModes"])),
        json!(spec["persistentVolumeReclaimPolicy"].as_str().unwrap_or("")),
        json!(phase),
        json!(claim),
        json!(class),
        json!(str_or(&spec["volumeAttributesClassName"], "<unset>")),
        json!(pv["status"]["reason"].as_str().unwrap_or("")),
        age(pv),
        json!(str_or(&spec["volumeMode"], "<unset>")),
    ]
}

fn service_account_cells(sa: &Value) -> Vec<Value> {
    vec![name(sa), age(sa)]
}

fn config_map_cells(cm: &Value) -> Vec<Value> {
    let count = |k: &str| cm[k].as_object().map_or(0, Map::len);
    vec![
        name(cm),
        json!(count("data") + count("binaryData")),
        age(cm),
    ]
}

fn lease_cells(lease: &Value) -> Vec<Value> {
    vec![
        name(lease),
        json!(lease["spec"]["holderIdentity"].as_str().unwrap_or("")),
        age(lease),
    ]
}

fn default_cells(obj: &Value) -> Vec<Value> {
    vec![name(obj), obj["metadata"]["creationTimestamp"].clone()]
}

// ---------------------------------------------------------------------------------------------
// tables

/// The row of one object (full JSON, with kind and apiVersion).
fn row(def: &ResourceDef, obj: &Value, opts: &TableOptions) -> Value {
    let mut r = Map::new();
    r.insert("cells".into(), Value::Array((printer(def).cells)(obj)));
    if def.backing == Backing::Stored(Storage::Pods)
        && let Some(conditions) = pod_conditions(obj)
    {
        r.insert("conditions".into(), conditions);
    }
    let object = match opts.include {
        IncludeObject::None => Value::Null,
        IncludeObject::Object => obj.clone(),
        IncludeObject::Metadata => partial_object(obj, opts.api_version),
    };
    r.insert("object".into(), object);
    Value::Object(r)
}

fn table(def: &ResourceDef, metadata: Value, rows: Vec<Value>, opts: &TableOptions) -> Value {
    let columns = if opts.no_headers {
        Value::Null
    } else {
        column_json(def)
    };
    json!({
        "kind": "Table",
        "apiVersion": opts.api_version,
        "metadata": metadata,
        "columnDefinitions": columns,
        "rows": rows
    })
}

/// The Table of one object (a GET, or one watch event): `obj` is its JSON with kind and apiVersion.
pub(crate) fn of_object(def: &ResourceDef, obj: &Value, opts: &TableOptions) -> Value {
    let mut metadata = Map::new();
    if let Some(rv) = obj["metadata"].get("resourceVersion") {
        metadata.insert("resourceVersion".into(), rv.clone());
    }
    table(
        def,
        Value::Object(metadata),
        vec![row(def, obj, opts)],
        opts,
    )
}

/// The Table of a LIST answer (items without kind and apiVersion, as lists carry them).
pub(crate) fn of_list(def: &ResourceDef, list: &Value, opts: &TableOptions) -> Value {
    let api_version = def.api_version();
    let rows = array(&list["items"])
        .iter()
        .map(|item| {
            let full = crate::object::with_type_meta(item.clone(), def.kind, &api_version);
            row(def, &full, opts)
        })
        .collect();
    table(def, list["metadata"].clone(), rows, opts)
}

/// How a GET, LIST or WATCH answers its objects, chosen from the `Accept` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Representation {
    /// The objects themselves.
    Object,
    /// A `Table` (`as=Table;g=meta.k8s.io;v=v1|v1beta1`).
    Table(TableOptions),
    /// `PartialObjectMetadata` / `PartialObjectMetadataList` (`as=PartialObjectMetadata...`) of
    /// this `meta.k8s.io` version.
    Metadata(&'static str),
}

/// The `meta.k8s.io` version named by a media type's `g` and `v` parameters.
fn meta_version(params: &[(String, String)]) -> Option<&'static str> {
    let get = |k: &str| {
        params
            .iter()
            .find(|(name, _)| name == k)
            .map(|(_, v)| v.as_str())
    };
    match (get("g"), get("v")) {
        (Some("meta.k8s.io"), Some("v1")) => Some("meta.k8s.io/v1"),
        (Some("meta.k8s.io"), Some("v1beta1")) => Some("meta.k8s.io/v1beta1"),
        _ => None,
    }
}

/// The first representation of the `Accept` header the server can produce, in the client's order:
/// plain JSON, a Table, or partial object metadata (`include` is the request's `includeObject`).
/// `None` when nothing acceptable is offered (406).
pub(crate) fn negotiate(accept: Option<&str>, include: IncludeObject) -> Option<Representation> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Some(Representation::Object);
    };
    for range in accept.split(',') {
        let mut pieces = range.split(';');
        let essence = pieces.next().unwrap_or("").trim().to_ascii_lowercase();
        if !matches!(
            essence.as_str(),
            "application/json" | "*/*" | "application/*" | "json"
        ) {
            continue;
        }
        let params: Vec<(String, String)> = pieces
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        let target = params
            .iter()
            .find(|(k, _)| k == "as")
            .map(|(_, v)| v.as_str());
        match (target, meta_version(&params)) {
            (None, _) => return Some(Representation::Object),
            (Some("Table"), Some(api_version)) => {
                return Some(Representation::Table(TableOptions {
                    api_version,
                    include,
                    no_headers: false,
                }));
            }
            (Some("PartialObjectMetadata" | "PartialObjectMetadataList"), Some(api_version)) => {
                return Some(Representation::Metadata(api_version));
            }
            _ => {}
        }
    }
    None
}

/// The `PartialObjectMetadata` of an object (JSON with kind and apiVersion, or a list item).
pub(crate) fn partial_object(obj: &Value, api_version: &str) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": api_version, "metadata": obj["metadata"]})
}

/// The `PartialObjectMetadataList` of a LIST answer.
pub(crate) fn partial_list(list: &Value, api_version: &str) -> Value {
    let items: Vec<Value> = array(&list["items"])
        .iter()
        .map(|item| partial_object(item, api_version))
        .collect();
    json!({"kind": "PartialObjectMetadataList", "apiVersion": api_version,
           "metadata": list["metadata"], "items": items})
}

/// Renders one object of a GET or a watch event in `repr`; `Object` leaves it as it is.
pub(crate) fn render_object(
    def: &ResourceDef,
    obj: &Value,
    repr: &Representation,
) -> Option<Value> {
    match repr {
        Representation::Object => None,
        Representation::Table(opts) => Some(of_object(def, obj, opts)),
        Representation::Metadata(api_version) => Some(partial_object(obj, api_version)),
    }
}

/// Renders a LIST answer in `repr`; `Object` leaves it as it is.
pub(crate) fn render_list(def: &ResourceDef, list: &Value, repr: &Representation) -> Option<Value> {
    match repr {
        Representation::Object => None,
        Representation::Table(opts) => Some(of_list(def, list, opts)),
        Representation::Metadata(api_version) => Some(partial_list(list, api_version)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::find;

    const WIDE: TableOptions = TableOptions {
        api_version: "meta.k8s.io/v1",
        include: IncludeObject::Metadata,
        no_headers: false,
    };

    fn names(t: &Value) -> Vec<&str> {
        t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn durations() {
        for (secs, text) in [
            (-5, "<invalid>"),
            (-1, "0s"),
            (59, "59s"),
            (119, "119s"),
            (125, "2m5s"),
            (600, "10m"),
            (3 * 3600 + 60, "3h1m"),
            (10 * 3600, "10h"),
            (50 * 3600, "2d2h"),
            (30 * 86400, "30d"),
            (3 * 365 * 86400 + 86400, "3y1d"),
            (10 * 365 * 86400, "10y"),
        ] {
            assert_eq!(human_duration(secs), text, "{secs}");
        }
    }

    #[test]
    fn node_table() {
        let nodes = find("", "v1", "nodes").unwrap();
        let node = json!({"kind": "Node", "apiVersion": "v1",
            "metadata": {"name": "node-a", "resourceVersion": "7", "creationTimestamp": "2020-01-01T00:00:00Z",
                         "labels": {"node-role.kubernetes.io/control-plane": "", "kubernetes.io/role": "infra"}},
            "spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "addresses": [{"type": "Hostname", "address": "node-a"}, {"type": "InternalIP", "address": "10.0.0.1"},
                                     {"type": "ExternalIP", "address": "203.0.113.1"}],
                       "nodeInfo": {"kubeletVersion": "v1.35.4", "osImage": "", "kernelVersion": "6.1", "containerRuntimeVersion": "containerd://2.0"}}});
        let t = of_object(nodes, &node, &WIDE);
        assert_eq!(
            names(&t),
            [
                "Name",
                "Status",
                "Roles",
                "Age",
                "Version",
                "Internal-IP",
                "External-IP",
                "OS-Image",
                "Kernel-Version",
                "Container-Runtime"
            ]
        );
        assert_eq!(t["columnDefinitions"][5]["priority"], 1);
        assert_eq!(t["columnDefinitions"][0]["format"], "name");
        assert!(
            t["columnDefinitions"][0]["description"]
                .as_str()
                .unwrap()
                .starts_with("Name must be unique")
        );
        let cells = &t["rows"][0]["cells"];
        assert_eq!(cells[1], "Ready,SchedulingDisabled");
        assert_eq!(cells[2], "control-plane,infra");
        assert_eq!(cells[5], "10.0.0.1");
        assert_eq!(cells[6], "203.0.113.1");
        assert_eq!(cells[7], "<unknown>");
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(t["metadata"]["resourceVersion"], "7");
    }

    #[test]
    fn service_list_table() {
        let services = find("", "v1", "services").unwrap();
        let list = json!({"kind": "ServiceList", "apiVersion": "v1", "metadata": {"resourceVersion": "9"}, "items": [
            {"metadata": {"name": "web", "namespace": "default"},
             "spec": {"type": "LoadBalancer", "clusterIPs": ["10.96.0.10"], "selector": {"app": "web", "tier": "a"},
                      "ports": [{"port": 80, "nodePort": 31000, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}]},
             "status": {"loadBalancer": {}}}]});
        let t = of_list(
            services,
            &list,
            &TableOptions {
                include: IncludeObject::Object,
                ..WIDE
            },
        );
        assert_eq!(
            names(&t),
            [
                "Name",
                "Type",
                "Cluster-IP",
                "External-IP",
                "Port(s)",
                "Age",
                "Selector"
            ]
        );
        assert_eq!(
            t["rows"][0]["cells"],
            json!([
                "web",
                "LoadBalancer",
                "10.96.0.10",
                "<pending>",
                "80:31000/TCP,53/UDP",
                "<unknown>",
                "app=web,tier=a"
            ])
        );
        assert_eq!(t["rows"][0]["object"]["kind"], "Service");
        assert_eq!(t["metadata"]["resourceVersion"], "9");
    }

    #[test]
    fn pod_states() {
        let pods = find("", "v1", "pods").unwrap();
        let mut pod = json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "p"},
            "spec": {"nodeName": "node-a", "containers": [{"name": "a"}, {"name": "b"}]},
            "status": {"phase": "Running", "podIPs": [{"ip": "10.244.0.5"}], "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 1, "state": {"running": {}}},
                {"name": "b", "ready": false, "restartCount": 2, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}});
        let cells = of_object(pods, &pod, &WIDE)["rows"][0]["cells"].clone();
        assert_eq!(cells[1], "1/2");
        assert_eq!(cells[2], "CrashLoopBackOff");
        assert_eq!(cells[3], "3");
        assert_eq!(cells[5], "10.244.0.5");
        assert_eq!(cells[6], "node-a");
        pod["status"] = json!({"phase": "Succeeded"});
        let t = of_object(pods, &pod, &WIDE);
        assert_eq!(t["rows"][0]["cells"][2], "Succeeded");
        assert_eq!(t["rows"][0]["conditions"][0]["reason"], "Succeeded");
        pod["spec"]["initContainers"] = json!([{"name": "init"}]);
        pod["status"] = json!({"phase": "Pending", "initContainerStatuses": [{"name": "init", "state": {"running": {}}}]});
        assert_eq!(
            of_object(pods, &pod, &WIDE)["rows"][0]["cells"][2],
            "Init:0/1"
        );
    }

    #[test]
    fn event_rows_from_either_group() {
        let core_events = find("", "v1", "events").unwrap();
        let ev = json!({"kind": "Event", "apiVersion": "v1", "metadata": {"name": "node-a.1"},
            "involvedObject": {"kind": "Node", "name": "node-a"}, "reason": "Synced", "message": " done ",
            "source": {"component": "cloud-node-controller"}, "type": "Normal", "count": 3});
        let t = of_object(core_events, &ev, &WIDE);
        assert_eq!(names(&t)[..4], ["Last Seen", "Type", "Reason", "Object"]);
        let cells = &t["rows"][0]["cells"];
        assert_eq!(
            cells.as_array().unwrap()[1..7],
            [
                json!("Normal"),
                json!("Synced"),
                json!("node/node-a"),
                json!(""),
                json!("cloud-node-controller"),
                json!("done")
            ]
        );
        assert_eq!(cells[8], 3);
        let v1 = find("events.k8s.io", "v1", "events").unwrap();
        let ev = json!({"kind": "Event", "apiVersion": "events.k8s.io/v1", "metadata": {"name": "e"},
            "regarding": {"kind": "Service", "name": "web"}, "reason": "EnsuredLoadBalancer", "note": "n",
            "reportingController": "service-controller", "reportingInstance": "ccm-1", "type": "Normal",
            "deprecatedSource": {}});
        let cells = &of_object(v1, &ev, &WIDE)["rows"][0]["cells"];
        assert_eq!(cells[3], "service/web");
        assert_eq!(cells[5], "service-controller, ccm-1");
        assert_eq!(cells[8], 1);
    }

    #[test]
    fn other_kinds_have_their_columns() {
        for (plural, group, expected) in [
            ("namespaces", "", vec!["Name", "Status", "Age"]),
            ("configmaps", "", vec!["Name", "Data", "Age"]),
            ("serviceaccounts", "", vec!["Name", "Age"]),
            (
                "leases",
                "coordination.k8s.io",
                vec!["Name", "Holder", "Age"],
            ),
            (
                "persistentvolumes",
                "",
                vec![
                    "Name",
                    "Capacity",
                    "Access Modes",
                    "Reclaim Policy",
                    "Status",
                    "Claim",
                    "StorageClass",
                    "VolumeAttributesClass",
                    "Reason",
                    "Age",
                    "VolumeMode",
                ],
            ),
        ] {
            let def = find(group, "v1", plural).unwrap();
            let t = of_object(def, &json!({"metadata": {"name": "x"}}), &WIDE);
            assert_eq!(names(&t), expected, "{plural}");
            assert_eq!(
                t["rows"][0]["cells"].as_array().unwrap().len(),
                expected.len(),
                "{plural}"
            );
        }
        let none = TableOptions {
            no_headers: true,
            include: IncludeObject::None,
            ..WIDE
        };
        let def = find("", "v1", "configmaps").unwrap();
        let t = of_object(
            def,
            &json!({"metadata": {"name": "x"}, "data": {"a": "1"}, "binaryData": {"b": ""}}),
            &none,
        );
        assert!(t["columnDefinitions"].is_null());
        assert!(t["rows"][0]["object"].is_null());
        assert_eq!(t["rows"][0]["cells"][1], 2);
        assert_eq!(IncludeObject::parse(Some("x")).unwrap_err().code, 400);
    }

    #[test]
    fn accept_headers() {
        let md = IncludeObject::Metadata;
        assert_eq!(negotiate(None, md), Some(Representation::Object));
        assert_eq!(
            negotiate(Some("application/json"), md),
            Some(Representation::Object)
        );
        assert_eq!(
            negotiate(
                Some(
                    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
                ),
                md
            ),
            Some(Representation::Table(WIDE))
        );
        assert_eq!(
            negotiate(
                Some("application/json;as=Table;v=v1beta1;g=meta.k8s.io"),
                md
            ),
            Some(Representation::Table(TableOptions {
                api_version: "meta.k8s.io/v1beta1",
                ..WIDE
            }))
        );
        assert_eq!(
            negotiate(
                Some(
                    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
                ),
                md
            ),
            Some(Representation::Object)
        );
        assert_eq!(
            negotiate(
                Some("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"),
                md
            ),
            Some(Representation::Metadata("meta.k8s.io/v1"))
        );
        assert_eq!(
            negotiate(Some("application/json;as=Table;v=v2;g=meta.k8s.io"), md),
            None
        );
        assert_eq!(
            negotiate(Some("application/vnd.kubernetes.protobuf"), md),
            None
        );
        assert_eq!(negotiate(Some("*/*"), md), Some(Representation::Object));
    }
}
