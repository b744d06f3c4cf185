//! Per-resource behaviour: defaulting, admission, validation, subresource isolation, selectable
//! fields, decoding checks and the update/delete rules that differ between resources.

use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use crate::error::{FieldError, quote};
use crate::events;
use crate::object;
use crate::pod;
use crate::resources::{Backing, ResourceDef, Storage};
use crate::service;
use crate::validation::{self, NameRule};

/// How a storage treats updates and deletes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Behaviour {
    /// PUT without `metadata.resourceVersion` is accepted.
    pub unconditional_update: bool,
    /// PUT to a missing name creates the object (201).
    pub create_on_update: bool,
    /// DELETE answers with the object rather than a `Status`.
    pub return_deleted_object: bool,
}

/// The update and delete rules of a storage.
pub(crate) fn behaviour(s: Storage) -> Behaviour {
    match s {
        Storage::Nodes | Storage::PersistentVolumes | Storage::Namespaces => Behaviour {
            unconditional_update: true,
            create_on_update: false,
            return_deleted_object: false,
        },
        Storage::Services => Behaviour {
            unconditional_update: true,
            create_on_update: false,
            return_deleted_object: true,
        },
        Storage::Events => Behaviour {
            unconditional_update: true,
            create_on_update: true,
            return_deleted_object: false,
        },
        Storage::Leases => Behaviour {
            unconditional_update: false,
            create_on_update: true,
            return_deleted_object: false,
        },
        Storage::ServiceAccounts | Storage::Pods => Behaviour {
            unconditional_update: true,
            create_on_update: false,
            return_deleted_object: true,
        },
        Storage::ConfigMaps => Behaviour {
            unconditional_update: true,
            create_on_update: false,
            return_deleted_object: false,
        },
    }
}

fn name_rule(s: Storage) -> NameRule {
    match s {
        Storage::Services => NameRule::Dns1035Label,
        Storage::Namespaces => NameRule::Dns1123Label,
        _ => NameRule::Dns1123Subdomain,
    }
}

/// The field selector labels a resource supports.
pub(crate) fn field_labels(def: &ResourceDef) -> &'static [&'static str] {
    match def.backing {
        Backing::Stored(Storage::Nodes) => {
            &["metadata.name", "metadata.namespace", "spec.unschedulable"]
        }
        Backing::Stored(Storage::Services) => &[
            "metadata.name",
            "metadata.namespace",
            "spec.type",
            "spec.clusterIP",
        ],
        Backing::Stored(Storage::Namespaces) => {
            &["metadata.name", "metadata.namespace", "status.phase"]
        }
        Backing::Stored(Storage::Pods) => pod::FIELD_LABELS,
        Backing::Stored(Storage::Events) if def.is_events_v1() => events::V1_FIELDS,
        Backing::Stored(Storage::Events) => events::CORE_FIELDS,
        _ => &["metadata.name", "metadata.namespace"],
    }
}

/// Maps a field label of `def` to the name the stored fields use.
pub(crate) fn stored_field_label(def: &ResourceDef, label: &str) -> String {
    if def.is_events_v1() {
        events::v1_field_to_core(label)
    } else {
        label.to_string()
    }
}

/// The selectable fields of a stored object, besides `metadata.name` and `metadata.namespace`.
pub(crate) fn selectable_fields(s: Storage, v: &Value) -> Vec<(&'static str, String)> {
    match s {
        Storage::Nodes => {
            let u = v["spec"]["unschedulable"].as_bool().unwrap_or(false);
            vec![("spec.unschedulable", u.to_string())]
        }
        Storage::Services => vec![
            (
                "spec.type",
                v["spec"]["type"]
                    .as_str()
                    .unwrap_or("ClusterIP")
                    .to_string(),
            ),
            (
                "spec.clusterIP",
                v["spec"]["clusterIP"].as_str().unwrap_or("").to_string(),
            ),
        ],
        Storage::Namespaces => vec![(
            "status.phase",
            v["status"]["phase"].as_str().unwrap_or("").to_string(),
        )],
        Storage::Events => events::selectable_fields(v),
        Storage::Pods => pod::selectable_fields(v),
        Storage::PersistentVolumes
        | Storage::Leases
        | Storage::ServiceAccounts
        | Storage::ConfigMaps => Vec::new(),
    }
}

const NODE_SPEC_ORDER: &[&str] = &[
    "podCIDR",
    "podCIDRs",
    "providerID",
    "unschedulable",
    "taints",
    "configSource",
    "externalID",
];
const NODE_STATUS_ORDER: &[&str] = &[
    "capacity",
    "allocatable",
    "phase",
    "conditions",
    "addresses",
    "daemonEndpoints",
    "nodeInfo",
    "images",
    "volumesInUse",
    "volumesAttached",
    "config",
    "runtimeHandlers",
    "features",
];
const NODE_INFO_FIELDS: &[&str] = &[
    "machineID",
    "systemUUID",
    "bootID",
    "kernelVersion",
    "osImage",
    "containerRuntimeVersion",
    "kubeletVersion",
    "kubeProxyVersion",
    "operatingSystem",
    "architecture",
];

/// The object at `key` of `m`, created (or replaced) when it is not one.
pub(crate) fn obj_entry<'a>(
    m: &'a mut Map<String, Value>,
    key: &str,
) -> &'a mut Map<String, Value> {
    let e = m.entry(key.to_string()).or_insert_with(|| json!({}));
    if !e.is_object() {
        *e = json!({});
    }
    e.as_object_mut().expect("entry was just made an object")
}

fn default_node(v: &mut Value) {
    let Value::Object(obj) = v else { return };
    let spec = obj_entry(obj, "spec");
    object::order_map(spec, NODE_SPEC_ORDER);
    let status = obj_entry(obj, "status");
    if !status.contains_key("allocatable")
        && let Some(cap) = status.get("capacity").cloned()
    {
        status.insert("allocatable".into(), cap);
    }
    let de = obj_entry(status, "daemonEndpoints");
    let ke = obj_entry(de, "kubeletEndpoint");
    ke.entry("Port").or_insert(json!(0));
    let info = obj_entry(status, "nodeInfo");
    for f in NODE_INFO_FIELDS {
        info.entry((*f).to_string()).or_insert(json!(""));
    }
    object::order_map(info, NODE_INFO_FIELDS);
    object::order_map(status, NODE_STATUS_ORDER);
}

fn default_pv(v: &mut Value) {
    let Value::Object(obj) = v else { return };
    let spec = obj_entry(obj, "spec");
    spec.entry("persistentVolumeReclaimPolicy")
        .or_insert(json!("Retain"));
    spec.entry("volumeMode").or_insert(json!("Filesystem"));
    let status = obj_entry(obj, "status");
    status.entry("phase").or_insert(json!("Pending"));
}

fn default_namespace(v: &mut Value) {
    let name = object::name(v).to_string();
    let Value::Object(obj) = v else { return };
    let spec = obj_entry(obj, "spec");
    spec.entry("finalizers").or_insert(json!(["kubernetes"]));
    let status = obj_entry(obj, "status");
    status.entry("phase").or_insert(json!("Active"));
    if !name.is_empty() {
        let meta = obj_entry(obj, "metadata");
        let labels = obj_entry(meta, "labels");
        labels.insert("kubernetes.io/metadata.name".into(), json!(name));
    }
}

/// Defaults applied to every stored write (idempotent), then Go-like pruning and key order.
pub(crate) fn defaults(s: Storage, v: &mut Value) {
    object::prune(v);
    match s {
        Storage::Nodes => default_node(v),
        Storage::Services => service::default_service(v),
        Storage::PersistentVolumes => default_pv(v),
        Storage::Namespaces => default_namespace(v),
        Storage::Events => events::normalize_core(v),
        Storage::Pods => pod::default_pod(v),
        Storage::Leases | Storage::ServiceAccounts | Storage::ConfigMaps => {}
    }
    object::order_keys(v);
}

/// Preparation and admission on create: a new Pod's status is reset and it gets the default
/// tolerations; the TaintNodesByCondition plugin adds the not-ready taint to new Nodes.
pub(crate) fn admit_create(s: Storage, v: &mut Value, not_ready_taint: bool) {
    if s == Storage::Pods {
        pod::prepare_for_create(v);
        return;
    }
    if s != Storage::Nodes || !not_ready_taint {
        return;
    }
    let Value::Object(obj) = v else { return };
    let spec = obj_entry(obj, "spec");
    let taints = spec.entry("taints").or_insert_with(|| json!([]));
    if !taints.is_array() {
        return;
    }
    let list = taints.as_array_mut().expect("checked to be an array");
    let present = list
        .iter()
        .any(|t| t["key"] == "node.kubernetes.io/not-ready" && t["effect"] == "NoSchedule");
    if !present {
        list.push(json!({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}));
    }
}

fn go_taint(t: &Value) -> String {
    format!(
        "core.Taint{{Key:{}, Value:{}, Effect:{}, TimeAdded:<nil>}}",
        quote(t["key"].as_str().unwrap_or("")),
        quote(t["value"].as_str().unwrap_or("")),
        quote(t["effect"].as_str().unwrap_or(""))
    )
}

/// Node spec checks (taints). The field path `metadata.taints` is what the real server reports.
fn validate_node_spec(v: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(taints) = v["spec"]["taints"].as_array() else {
        return errs;
    };
    let mut seen = std::collections::HashSet::new();
    for (i, t) in taints.iter().enumerate() {
        let base = format!("metadata.taints[{i}]");
        let key = t["key"].as_str().unwrap_or("");
        for m in validation::qualified_name(key) {
            errs.push(FieldError::invalid_str(format!("{base}.key"), key, m));
        }
        let value = t["value"].as_str().unwrap_or("");
        for m in validation::label_value(value) {
            errs.push(FieldError::invalid_str(format!("{base}.value"), value, m));
        }
        let effect = t["effect"].as_str().unwrap_or("");
        if effect.is_empty() {
            errs.push(FieldError::required(format!("{base}.effect"), ""));
        } else if !["NoExecute", "NoSchedule", "PreferNoSchedule"].contains(&effect) {
            errs.push(FieldError::not_supported(
                format!("{base}.effect"),
                effect,
                &["NoExecute", "NoSchedule", "PreferNoSchedule"],
            ));
        }
        if !seen.insert((key.to_string(), effect.to_string())) {
            errs.push(FieldError::duplicate(base, go_taint(t)));
        }
    }
    errs
}

fn validate_pv(v: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let spec = &v["spec"];
    if spec["accessModes"].as_array().is_none_or(Vec::is_empty) {
        errs.push(FieldError::required("spec.accessModes", ""));
    }
    if spec["capacity"]["storage"].is_null() {
        errs.push(FieldError::required("spec.capacity", ""));
    }
    const SOURCES: &[&str] = &[
        "awsElasticBlockStore",
        "azureDisk",
        "azureFile",
        "cephfs",
        "cinder",
        "csi",
        "fc",
        "flexVolume",
        "flocker",
        "gcePersistentDisk",
        "glusterfs",
        "hostPath",
        "iscsi",
        "local",
        "nfs",
        "photonPersistentDisk",
        "portworxVolume",
        "quobyte",
        "rbd",
        "scaleIO",
        "storageos",
        "vsphereVolume",
    ];
    let sources = SOURCES.iter().filter(|s| !spec[**s].is_null()).count();
    if sources == 0 {
        errs.push(FieldError::required("spec", "must specify a volume type"));
    } else if sources > 1 {
        errs.push(FieldError::forbidden(
            "spec",
            "may not specify more than 1 volume type",
        ));
    }
    errs
}

fn validate_lease(v: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(d) = v["spec"]["leaseDurationSeconds"].as_i64()
        && d <= 0
    {
        errs.push(FieldError::invalid(
            "spec.leaseDurationSeconds",
            d.to_string(),
            "must be greater than 0",
        ));
    }
    if let Some(t) = v["spec"]["leaseTransitions"].as_i64()
        && t < 0
    {
        errs.push(FieldError::invalid(
            "spec.leaseTransitions",
            t.to_string(),
            "must be greater than or equal to 0",
        ));
    }
    errs
}

/// The characters of a ConfigMap key, as the real server's error message states them.
const CONFIG_KEY_MESSAGE: &str = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";

fn config_key(key: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if key.is_empty()
        || !key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        errs.push(CONFIG_KEY_MESSAGE.to_string());
    }
    if key.len() > 253 {
        errs.push("must be no more than 253 characters".to_string());
    }
    if key == "." || key == ".." {
        errs.push(format!("must not be '{key}'"));
    } else if key.starts_with("..") {
        errs.push("must not start with '..'".to_string());
    }
    errs
}

/// ConfigMap checks: the keys of `data` and `binaryData`, and no key in both.
fn validate_config_map(v: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let data = v["data"].as_object();
    for (field, map) in [("data", data), ("binaryData", v["binaryData"].as_object())] {
        let Some(map) = map else { continue };
        for key in map.keys() {
            for m in config_key(key) {
                errs.push(FieldError::invalid_str(format!("{field}[{key}]"), key, m));
            }
            if field == "binaryData" && data.is_some_and(|d| d.contains_key(key)) {
                errs.push(FieldError::invalid_str(
                    format!("binaryData[{key}]"),
                    key,
                    "duplicate of key present in data",
                ));
            }
        }
    }
    errs
}

/// An immutable ConfigMap keeps its data, and stays immutable.
fn validate_config_map_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if old["immutable"].as_bool() == Some(true) {
        if new["immutable"].as_bool() != Some(true) {
            errs.push(FieldError::forbidden(
                "immutable",
                "field is immutable when `immutable` is set",
            ));
        }
        for field in ["data", "binaryData"] {
            if new[field] != old[field] {
                errs.push(FieldError::forbidden(
                    field,
                    "field is immutable when `immutable` is set",
                ));
            }
        }
    }
    errs
}

/// Validation of a new object (stored shape). `namespace` is the request namespace.
pub(crate) fn validate_create(def: &ResourceDef, v: &Value, namespace: &str) -> Vec<FieldError> {
    let Some(s) = def.storage() else {
        return Vec::new();
    };
    match s {
        Storage::Services => service::validate(v),
        Storage::Pods => pod::validate(v),
        Storage::Events if def.is_events_v1() => events::validate_v1_create(v, namespace),
        Storage::Events => events::validate_core_create(v, namespace),
        _ => {
            let mut errs = validation::object_meta(v, name_rule(s));
            errs.extend(match s {
                Storage::Nodes => validate_node_spec(v),
                Storage::PersistentVolumes => validate_pv(v),
                Storage::Leases => validate_lease(v),
                Storage::ConfigMaps => validate_config_map(v),
                _ => Vec::new(),
            });
            errs
        }
    }
}

/// Validation of an update (stored shapes of the new and old objects).
pub(crate) fn validate_update(
    def: &ResourceDef,
    new: &Value,
    old: &Value,
    namespace: &str,
) -> Vec<FieldError> {
    let Some(s) = def.storage() else {
        return Vec::new();
    };
    let mut errs = Vec::new();
    if let Some(e) = validation::new_finalizers_while_deleting(new, old) {
        errs.push(e.clone());
        errs.push(e);
    }
    match s {
        Storage::Nodes => {
            // The real server validates node metadata four times and the node twice on update;
            // the duplicated causes are part of its observable answer.
            let meta = validation::object_meta(new, NameRule::Dns1123Subdomain);
            for _ in 0..4 {
                errs.extend(meta.iter().cloned());
            }
            let spec = validate_node_spec(new);
            errs.extend(spec.iter().cloned());
            errs.extend(spec);
            for (field, key, what) in [
                ("spec.providerID", "providerID", "providerID"),
                ("spec.podCIDRs", "podCIDR", "podCIDR"),
            ] {
                let before = old["spec"][key].as_str().unwrap_or("");
                let after = new["spec"][key].as_str().unwrap_or("");
                if !before.is_empty() && before != after {
                    errs.push(FieldError::forbidden(
                        field,
                        format!("node updates may not change {what} except from \"\" to valid"),
                    ));
                }
            }
        }
        Storage::Services => {
            errs.extend(service::validate(new));
            errs.extend(service::validate_update(new, old));
        }
        Storage::Events => {
            errs.extend(validation::object_meta(new, NameRule::Dns1123Subdomain));
            if def.is_events_v1() {
                errs.extend(
                    events::validate_v1_create(new, namespace)
                        .into_iter()
                        .filter(|e| !e.field.starts_with("metadata.")),
                );
            }
        }
        Storage::ConfigMaps => {
            errs.extend(validate_create(def, new, namespace));
            errs.extend(validate_config_map_update(new, old));
        }
        Storage::Pods => {
            errs.extend(pod::validate(new));
            errs.extend(pod::validate_update(new, old));
        }
        _ => errs.extend(validate_create(def, new, namespace)),
    }
    errs
}

/// Subresource isolation on update/patch: the main resource keeps the stored status, the status
/// subresource keeps the stored spec (metadata changes are applied in both cases).
pub(crate) fn isolate(def: &ResourceDef, status_subresource: bool, new: &mut Value, old: &Value) {
    if !def.status_subresource {
        return;
    }
    let Value::Object(obj) = new else { return };
    let keep = if status_subresource { "spec" } else { "status" };
    match old.get(keep) {
        Some(x) => {
            obj.insert(keep.to_string(), x.clone());
        }
        None => {
            obj.shift_remove(keep);
        }
    }
    if def.backing == Backing::Stored(Storage::Namespaces) && !status_subresource {
        let fins = old["spec"]["finalizers"].clone();
        let spec = obj_entry(obj, "spec");
        if fins.is_null() {
            spec.remove("finalizers");
        } else {
            spec.insert("finalizers".into(), fins);
        }
    }
}

/// Copies the server-managed metadata of `old` into `new` and drops what the server maintains.
pub(crate) fn copy_server_meta(new: &mut Value, old: &Value) {
    for key in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "generateName",
    ] {
        match old["metadata"].get(key) {
            Some(x) => object::set_meta(new, key, x.clone()),
            None => object::remove_meta(new, key),
        }
    }
    object::remove_meta(new, "managedFields");
    object::remove_meta(new, "selfLink");
}

/// The body of a BOOKMARK event object besides metadata.
pub(crate) fn bookmark_body(def: &ResourceDef) -> Map<String, Value> {
    let mut m = Map::new();
    match def.storage() {
        Some(Storage::Nodes) => {
            let mut node = json!({});
            default_node(&mut node);
            if let Value::Object(n) = node {
                m = n;
            }
        }
        Some(Storage::Services) => {
            m.insert("spec".into(), json!({}));
            m.insert("status".into(), json!({"loadBalancer": {}}));
        }
        Some(Storage::PersistentVolumes | Storage::Namespaces) => {
            m.insert("spec".into(), json!({}));
            m.insert("status".into(), json!({}));
        }
        Some(Storage::Leases) => {
            m.insert("spec".into(), json!({}));
        }
        Some(Storage::Pods) => {
            m.insert("spec".into(), json!({"containers": null}));
            m.insert("status".into(), json!({}));
        }
        Some(Storage::ServiceAccounts | Storage::ConfigMaps) => {}
        Some(Storage::Events) => {
            let mut ev = json!({});
            events::normalize_core(&mut ev);
            let ev = if def.is_events_v1() {
                events::core_to_v1(ev)
            } else {
                ev
            };
            if let Value::Object(e) = ev {
                m = e;
            }
        }
        None => {}
    }
    m
}

fn typed<T: DeserializeOwned>(v: &Value) -> Result<(), String> {
    match T::deserialize(v) {
        Ok(_) => Ok(()),
        // Required fields are reported by validation (422), not by decoding.
        Err(e) if e.to_string().starts_with("missing field") => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

/// Decoding checks of a request body (type meta already checked): field types and strict MicroTime
/// fields. The error text becomes a 400 BadRequest.
pub(crate) fn decode_check(def: &ResourceDef, v: &Value) -> Result<(), String> {
    use k8s_openapi::api;
    let prefix = format!(
        "{} in version {} cannot be handled as a {}: ",
        def.kind,
        quote(def.version),
        def.kind
    );
    let micro: Vec<&str> = match def.backing {
        Backing::Stored(Storage::Leases) => ["acquireTime", "renewTime"]
            .iter()
            .filter_map(|k| v["spec"].get(*k).and_then(Value::as_str))
            .collect(),
        Backing::Stored(Storage::Events) => events::micro_time_fields(v),
        _ => Vec::new(),
    };
    for t in micro {
        object::check_micro_time(t).map_err(|e| format!("{prefix}{e}"))?;
    }
    if !v["metadata"].is_null() && !v["metadata"].is_object() {
        return Err(format!(
            "{prefix}json: cannot unmarshal {} into Go struct field {}.metadata of type v1.ObjectMeta",
            json_type(&v["metadata"]),
            def.kind
        ));
    }
    let r = match (def.backing, def.is_events_v1()) {
        (Backing::Stored(Storage::Nodes), _) => typed::<api::core::v1::Node>(v),
        (Backing::Stored(Storage::Services), _) => typed::<api::core::v1::Service>(v),
        (Backing::Stored(Storage::PersistentVolumes), _) => {
            typed::<api::core::v1::PersistentVolume>(v)
        }
        (Backing::Stored(Storage::Namespaces), _) => typed::<api::core::v1::Namespace>(v),
        (Backing::Stored(Storage::Events), true) => typed::<api::events::v1::Event>(v),
        (Backing::Stored(Storage::Events), false) => typed::<api::core::v1::Event>(v),
        (Backing::Stored(Storage::Leases), _) => typed::<api::coordination::v1::Lease>(v),
        (Backing::Stored(Storage::ServiceAccounts), _) => typed::<api::core::v1::ServiceAccount>(v),
        (Backing::Stored(Storage::ConfigMaps), _) => typed::<api::core::v1::ConfigMap>(v),
        (Backing::Stored(Storage::Pods), _) => typed::<api::core::v1::Pod>(v),
        (Backing::TokenReview, _) => typed::<api::authentication::v1::TokenReview>(v),
        (Backing::SubjectAccessReview, _) => {
            typed::<api::authorization::v1::SubjectAccessReview>(v)
        }
    };
    r.map_err(|e| format!("{prefix}{e}"))
}

/// `v` decoded into the API type of `def` and encoded again: what the real server keeps of a request
/// object. `None` when it does not decode (decoding and validation report why).
pub(crate) fn round_trip(def: &ResourceDef, v: &Value) -> Option<Value> {
    use k8s_openapi::api;
    fn through<T: DeserializeOwned + serde::Serialize>(v: &Value) -> Option<Value> {
        T::deserialize(v)
            .ok()
            .and_then(|t| serde_json::to_value(t).ok())
    }
    match (def.backing, def.is_events_v1()) {
        (Backing::Stored(Storage::Nodes), _) => through::<api::core::v1::Node>(v),
        (Backing::Stored(Storage::Services), _) => through::<api::core::v1::Service>(v),
        (Backing::Stored(Storage::PersistentVolumes), _) => {
            through::<api::core::v1::PersistentVolume>(v)
        }
        (Backing::Stored(Storage::Namespaces), _) => through::<api::core::v1::Namespace>(v),
        (Backing::Stored(Storage::Events), true) => through::<api::events::v1::Event>(v),
        (Backing::Stored(Storage::Events), false) => through::<api::core::v1::Event>(v),
        (Backing::Stored(Storage::Leases), _) => through::<api::coordination::v1::Lease>(v),
        (Backing::Stored(Storage::ServiceAccounts), _) => {
            through::<api::core::v1::ServiceAccount>(v)
        }
        (Backing::Stored(Storage::ConfigMaps), _) => through::<api::core::v1::ConfigMap>(v),
        (Backing::Stored(Storage::Pods), _) => through::<api::core::v1::Pod>(v),
        (Backing::TokenReview, _) => through::<api::authentication::v1::TokenReview>(v),
        (Backing::SubjectAccessReview, _) => {
            through::<api::authorization::v1::SubjectAccessReview>(v)
        }
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::find;

    #[test]
    fn node_defaults_and_admission() {
        let mut v = json!({"metadata":{"name":"node-a"},"spec":{"taints":[{"key":"node.cloudprovider.kubernetes.io/uninitialized","value":"true","effect":"NoSchedule"}]},
            "status":{"capacity":{"cpu":"2"}}});
        admit_create(Storage::Nodes, &mut v, true);
        defaults(Storage::Nodes, &mut v);
        assert_eq!(
            v["spec"]["taints"][1],
            json!({"key":"node.kubernetes.io/not-ready","effect":"NoSchedule"})
        );
        assert_eq!(v["status"]["allocatable"], json!({"cpu":"2"}));
        assert_eq!(
            v["status"]["daemonEndpoints"],
            json!({"kubeletEndpoint":{"Port":0}})
        );
        assert_eq!(v["status"]["nodeInfo"].as_object().unwrap().len(), 10);
        // Admission does not add the taint twice.
        admit_create(Storage::Nodes, &mut v, true);
        assert_eq!(v["spec"]["taints"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn taint_validation_path_and_duplicates() {
        let nodes = find("", "v1", "nodes").unwrap();
        let old = json!({"metadata":{"name":"node-a"},"spec":{}});
        let new = json!({"metadata":{"name":"node-a"},"spec":{"taints":[{"key":"node.kubernetes.io/not-ready"}]}});
        let errs = validate_update(nodes, &new, &old, "");
        assert_eq!(errs.len(), 2);
        assert_eq!(errs[0].full(), "metadata.taints[0].effect: Required value");
        let bad_label = json!({"metadata":{"name":"node-a","labels":{"bad":"has spaces"}}});
        assert_eq!(validate_update(nodes, &bad_label, &old, "").len(), 4);
    }

    #[test]
    fn isolation() {
        let nodes = find("", "v1", "nodes").unwrap();
        let old = json!({"metadata":{"name":"a"},"spec":{"unschedulable":true},"status":{"capacity":{"cpu":"1"}}});
        let mut main = json!({"metadata":{"name":"a","labels":{"x":"y"}},"spec":{},"status":{"capacity":{"cpu":"9"}}});
        isolate(nodes, false, &mut main, &old);
        assert_eq!(main["status"], old["status"]);
        assert_eq!(main["spec"], json!({}));
        let mut st = json!({"metadata":{"name":"a","labels":{"x":"y"}},"spec":{},"status":{"capacity":{"cpu":"9"}}});
        isolate(nodes, true, &mut st, &old);
        assert_eq!(st["spec"], old["spec"]);
        assert_eq!(st["status"]["capacity"]["cpu"], "9");
        assert_eq!(st["metadata"]["labels"]["x"], "y");
    }

    #[test]
    fn decode_checks() {
        let nodes = find("", "v1", "nodes").unwrap();
        let err = decode_check(
            nodes,
            &json!({"metadata":{"name":"n","labels":"not-a-map"}}),
        )
        .unwrap_err();
        assert!(
            err.starts_with("Node in version \"v1\" cannot be handled as a Node: "),
            "{err}"
        );
        assert!(
            decode_check(
                nodes,
                &json!({"metadata":{"name":"n"},"spec":{"taints":[{"key":"k"}]}})
            )
            .is_ok()
        );
        let leases = find("coordination.k8s.io", "v1", "leases").unwrap();
        let err = decode_check(
            leases,
            &json!({"metadata":{"name":"l"},"spec":{"renewTime":"2026-01-01T00:00:00Z"}}),
        )
        .unwrap_err();
        assert_eq!(
            err,
            "Lease in version \"v1\" cannot be handled as a Lease: parsing time \"2026-01-01T00:00:00Z\" as \"2006-01-02T15:04:05.000000Z07:00\": cannot parse \"Z\" as \".000000\""
        );
        assert!(
            decode_check(
                leases,
                &json!({"metadata":{"name":"l"},"spec":{"renewTime":"2026-01-01T00:00:00.000000Z"}})
            )
            .is_ok()
        );
    }

    #[test]
    fn bookmark_bodies() {
        let nodes = find("", "v1", "nodes").unwrap();
        let b = bookmark_body(nodes);
        assert_eq!(b["spec"], json!({}));
        assert_eq!(b["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"], 0);
    }
}
