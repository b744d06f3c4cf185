//! Pods: what the real server does to a Pod on create (status reset to `Pending` with its QoS class,
//! container and spec defaults, the DefaultTolerationSeconds admission), the validation a pod gets, the
//! update rule that keeps its spec immutable but for images and a few fields, and its selectable fields.
//!
//! There is no kubelet here: a Pod stays `Pending` until a client writes its status
//! (`pods/{name}/status`), and deleting one removes it at once (no graceful termination).

use std::collections::HashSet;

use serde_json::{Map, Value, json};

use crate::error::FieldError;
use crate::object;
use crate::validation;

/// The key order of a Pod's `spec`, as Go serialises `PodSpec`.
const SPEC_ORDER: &[&str] = &[
    "volumes",
    "initContainers",
    "containers",
    "ephemeralContainers",
    "restartPolicy",
    "terminationGracePeriodSeconds",
    "activeDeadlineSeconds",
    "dnsPolicy",
    "nodeSelector",
    "serviceAccountName",
    "serviceAccount",
    "automountServiceAccountToken",
    "nodeName",
    "hostNetwork",
    "hostPID",
    "hostIPC",
    "shareProcessNamespace",
    "securityContext",
    "imagePullSecrets",
    "hostname",
    "subdomain",
    "affinity",
    "schedulerName",
    "tolerations",
    "hostAliases",
    "priorityClassName",
    "priority",
    "dnsConfig",
    "readinessGates",
    "runtimeClassName",
    "enableServiceLinks",
    "preemptionPolicy",
    "overhead",
    "topologySpreadConstraints",
    "setHostnameAsFQDN",
    "os",
    "hostUsers",
    "schedulingGates",
    "resourceClaims",
    "resources",
];

/// The key order of a `Container`.
const CONTAINER_ORDER: &[&str] = &[
    "name",
    "image",
    "command",
    "args",
    "workingDir",
    "ports",
    "envFrom",
    "env",
    "resources",
    "resizePolicy",
    "restartPolicy",
    "volumeMounts",
    "volumeDevices",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "lifecycle",
    "terminationMessagePath",
    "terminationMessagePolicy",
    "imagePullPolicy",
    "securityContext",
    "stdin",
    "stdinOnce",
    "tty",
];

/// The restart policies a Pod may name.
const RESTART_POLICIES: &[&str] = &["Always", "OnFailure", "Never"];

/// The DNS policies a Pod may name.
const DNS_POLICIES: &[&str] = &["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"];

/// The field selector labels of pods (upstream's `ToSelectableFields`).
pub(crate) const FIELD_LABELS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
];

/// The tolerations the DefaultTolerationSeconds admission plugin adds to every Pod.
const DEFAULT_TOLERATION_KEYS: &[&str] = &[
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
];

fn map_entry<'a>(m: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let e = m.entry(key.to_string()).or_insert_with(|| json!({}));
    if !e.is_object() {
        *e = json!({});
    }
    e.as_object_mut().expect("entry was just made an object")
}

/// The selectable field values of a stored Pod, besides `metadata.name` and `metadata.namespace`.
pub(crate) fn selectable_fields(v: &Value) -> Vec<(&'static str, String)> {
    let s = |path: &[&str]| object::str_at(v, path).unwrap_or("").to_string();
    let pod_ip = v["status"]["podIPs"][0]["ip"]
        .as_str()
        .or_else(|| v["status"]["podIP"].as_str())
        .unwrap_or("")
        .to_string();
    vec![
        ("spec.nodeName", s(&["spec", "nodeName"])),
        ("spec.restartPolicy", s(&["spec", "restartPolicy"])),
        ("spec.schedulerName", s(&["spec", "schedulerName"])),
        (
            "spec.serviceAccountName",
            s(&["spec", "serviceAccountName"]),
        ),
        (
            "spec.hostNetwork",
            v["spec"]["hostNetwork"]
                .as_bool()
                .unwrap_or(false)
                .to_string(),
        ),
        ("status.phase", s(&["status", "phase"])),
        ("status.podIP", pod_ip),
        (
            "status.nominatedNodeName",
            s(&["status", "nominatedNodeName"]),
        ),
    ]
}

/// The image pull policy a container without one gets: `Always` for `:latest` or untagged images,
/// `IfNotPresent` otherwise.
fn default_pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.rsplit_once(':') {
        Some((_, "latest")) | None => "Always",
        Some(_) => "IfNotPresent",
    }
}

fn default_container(c: &mut Value) {
    let Value::Object(m) = c else { return };
    let image = m
        .get("image")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    m.entry("resources").or_insert_with(|| json!({}));
    m.entry("terminationMessagePath")
        .or_insert_with(|| json!("/dev/termination-log"));
    m.entry("terminationMessagePolicy")
        .or_insert_with(|| json!("File"));
    m.entry("imagePullPolicy")
        .or_insert_with(|| json!(default_pull_policy(&image)));
    if let Some(ports) = m.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            p.entry("protocol").or_insert_with(|| json!("TCP"));
        }
    }
    object::order_map(m, CONTAINER_ORDER);
}

/// Whether a container names a request or limit for `resource` (`cpu`, `memory`).
fn resource_of<'a>(c: &'a Value, kind: &str, resource: &str) -> Option<&'a Value> {
    c["resources"][kind].get(resource).filter(|q| !q.is_null())
}

/// The QoS class of a Pod from its containers' requests and limits (upstream's `GetPodQOS`, for CPU
/// and memory).
pub(crate) fn qos_class(v: &Value) -> &'static str {
    let containers: Vec<&Value> = ["initContainers", "containers"]
        .iter()
        .filter_map(|k| v["spec"][k].as_array())
        .flatten()
        .collect();
    let any = containers.iter().any(|c| {
        ["requests", "limits"].iter().any(|kind| {
            ["cpu", "memory"]
                .iter()
                .any(|r| resource_of(c, kind, r).is_some())
        })
    });
    if !any {
        return "BestEffort";
    }
    let guaranteed = containers.iter().all(|c| {
        ["cpu", "memory"].iter().all(|r| {
            let limit = resource_of(c, "limits", r);
            let request = resource_of(c, "requests", r).or(limit);
            limit.is_some() && request == limit
        })
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// What the real server does to a new Pod before it validates it: the status is reset to `Pending`
/// with the QoS class (the pod strategy's PrepareForCreate), and the DefaultTolerationSeconds
/// admission plugin adds the `not-ready` and `unreachable` NoExecute tolerations (300 s) when the Pod
/// tolerates neither.
pub(crate) fn prepare_for_create(v: &mut Value) {
    default_pod(v);
    let qos = qos_class(v);
    let Value::Object(obj) = v else { return };
    obj.insert(
        "status".into(),
        json!({"phase": "Pending", "qosClass": qos}),
    );
    let spec = map_entry(obj, "spec");
    let tolerations = spec.entry("tolerations").or_insert_with(|| json!([]));
    let Some(list) = tolerations.as_array_mut() else {
        return;
    };
    for key in DEFAULT_TOLERATION_KEYS {
        let tolerated = list.iter().any(|t| {
            (t["key"] == *key || (t["key"].is_null() && t["operator"] == "Exists"))
                && (t["effect"].is_null() || t["effect"] == "NoExecute")
        });
        if !tolerated {
            list.push(json!({
                "key": key,
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300
            }));
        }
    }
}

/// Defaults applied on every write of a Pod (idempotent).
pub(crate) fn default_pod(v: &mut Value) {
    let Value::Object(obj) = v else { return };
    let spec = map_entry(obj, "spec");
    for key in ["initContainers", "containers"] {
        if let Some(list) = spec.get_mut(key).and_then(Value::as_array_mut) {
            list.iter_mut().for_each(default_container);
        }
    }
    spec.entry("restartPolicy")
        .or_insert_with(|| json!("Always"));
    spec.entry("terminationGracePeriodSeconds")
        .or_insert_with(|| json!(30));
    spec.entry("dnsPolicy")
        .or_insert_with(|| json!("ClusterFirst"));
    spec.entry("securityContext").or_insert_with(|| json!({}));
    spec.entry("schedulerName")
        .or_insert_with(|| json!("default-scheduler"));
    spec.entry("enableServiceLinks")
        .or_insert_with(|| json!(true));
    spec.entry("priority").or_insert_with(|| json!(0));
    spec.entry("preemptionPolicy")
        .or_insert_with(|| json!("PreemptLowerPriority"));
    object::order_map(spec, SPEC_ORDER);
    obj.entry("status").or_insert_with(|| json!({}));
}

/// The checks of one list of containers (`spec.containers` or `spec.initContainers`).
fn validate_containers(
    list: &[Value],
    path: &str,
    seen: &mut HashSet<String>,
    errs: &mut Vec<FieldError>,
) {
    for (i, c) in list.iter().enumerate() {
        let base = format!("{path}[{i}]");
        let name = c["name"].as_str().unwrap_or("");
        if name.is_empty() {
            errs.push(FieldError::required(format!("{base}.name"), ""));
        } else {
            for m in validation::dns1123_label(name) {
                errs.push(FieldError::invalid_str(format!("{base}.name"), name, m));
            }
            if !seen.insert(name.to_string()) {
                errs.push(FieldError::duplicate(
                    format!("{base}.name"),
                    crate::error::quote(name),
                ));
            }
        }
        if c["image"].as_str().is_none_or(|i| i.trim().is_empty()) {
            errs.push(FieldError::required(format!("{base}.image"), ""));
        }
    }
}

/// Validation of a Pod (stored shape): metadata, containers (at least one, named uniquely, each with
/// an image), the restart and DNS policies.
pub(crate) fn validate(v: &Value) -> Vec<FieldError> {
    let mut errs = validation::object_meta(v, validation::NameRule::Dns1123Subdomain);
    let spec = &v["spec"];
    let mut seen = HashSet::new();
    match spec["containers"].as_array().filter(|c| !c.is_empty()) {
        Some(list) => validate_containers(list, "spec.containers", &mut seen, &mut errs),
        None => errs.push(FieldError::required("spec.containers", "")),
    }
    if let Some(list) = spec["initContainers"].as_array() {
        validate_containers(list, "spec.initContainers", &mut seen, &mut errs);
    }
    for (field, supported) in [
        ("restartPolicy", RESTART_POLICIES),
        ("dnsPolicy", DNS_POLICIES),
    ] {
        if let Some(value) = spec[field].as_str()
            && !supported.contains(&value)
        {
            errs.push(FieldError::not_supported(
                format!("spec.{field}"),
                value,
                supported,
            ));
        }
    }
    errs
}

/// The spec with the fields an update may change blanked out: container images,
/// `activeDeadlineSeconds`, `tolerations` and `terminationGracePeriodSeconds`.
fn immutable_part(spec: &Value) -> Value {
    let mut s = spec.clone();
    if let Value::Object(m) = &mut s {
        for key in [
            "activeDeadlineSeconds",
            "tolerations",
            "terminationGracePeriodSeconds",
        ] {
            m.remove(key);
        }
        for key in ["initContainers", "containers"] {
            if let Some(list) = m.get_mut(key).and_then(Value::as_array_mut) {
                for c in list.iter_mut().filter_map(Value::as_object_mut) {
                    c.remove("image");
                }
            }
        }
    }
    s
}

/// The update rule of Pods: the spec is immutable but for the fields the real server lets change.
pub(crate) fn validate_update(new: &Value, old: &Value) -> Vec<FieldError> {
    if immutable_part(&new["spec"]) == immutable_part(&old["spec"]) {
        return Vec::new();
    }
    vec![FieldError::forbidden(
        "spec",
        "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
    )]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Value {
        json!({"metadata": {"name": "web-0", "namespace": "default"},
            "spec": {"nodeName": "node-a", "containers": [{"name": "web", "image": "nginx:1.27"}]},
            "status": {"phase": "Running"}})
    }

    #[test]
    fn create_resets_status_and_defaults() {
        let mut v = pod();
        prepare_for_create(&mut v);
        assert_eq!(
            v["status"],
            json!({"phase": "Pending", "qosClass": "BestEffort"})
        );
        assert_eq!(v["spec"]["restartPolicy"], "Always");
        assert_eq!(
            v["spec"]["containers"][0]["imagePullPolicy"],
            "IfNotPresent"
        );
        assert_eq!(v["spec"]["tolerations"].as_array().unwrap().len(), 2);
        // Idempotent.
        let before = v.clone();
        prepare_for_create(&mut v);
        assert_eq!(v, before);
    }

    #[test]
    fn pull_policy_and_qos() {
        assert_eq!(default_pull_policy("nginx"), "Always");
        assert_eq!(default_pull_policy("nginx:latest"), "Always");
        assert_eq!(default_pull_policy("localhost:5000/nginx"), "Always");
        assert_eq!(
            default_pull_policy("localhost:5000/nginx:1.2"),
            "IfNotPresent"
        );
        let mut v = pod();
        v["spec"]["containers"][0]["resources"] = json!({"limits": {"cpu": "1", "memory": "1Gi"}});
        assert_eq!(qos_class(&v), "Guaranteed");
        v["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "1"}});
        assert_eq!(qos_class(&v), "Burstable");
    }

    #[test]
    fn validation() {
        assert!(validate(&pod()).is_empty());
        let errs = validate(&json!({"metadata": {"name": "p"}, "spec": {}}));
        assert_eq!(errs[0].full(), "spec.containers: Required value");
        let dup = json!({"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "a", "image": "x"}, {"name": "a"}]}});
        let errs = validate(&dup);
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            ["spec.containers[1].name", "spec.containers[1].image"]
        );
    }

    #[test]
    fn spec_is_immutable_but_for_images() {
        let old = pod();
        let mut new = pod();
        new["spec"]["containers"][0]["image"] = json!("nginx:1.28");
        assert!(validate_update(&new, &old).is_empty());
        new["spec"]["nodeName"] = json!("node-b");
        assert_eq!(validate_update(&new, &old).len(), 1);
    }

    #[test]
    fn selectable() {
        let fields = selectable_fields(&pod());
        assert!(fields.contains(&("spec.nodeName", "node-a".to_string())));
        assert!(fields.contains(&("status.phase", "Running".to_string())));
        assert!(fields.contains(&("spec.hostNetwork", "false".to_string())));
    }
}
