//! Discovery documents: `/version`, `/api`, `/api/v1`, `/apis`, `/apis/{group}` and `/apis/{group}/{version}`.

use serde_json::{Map, Value, json};

use crate::resources::{self, GROUPS, ResourceDef};

/// The Kubernetes version the server reports: the version of the real control plane the conformance suite
/// also runs against (`hack/realkube/go.mod`; a unit test keeps the two equal).
pub const KUBERNETES_VERSION: &str = "v1.35.4";

/// `GET /version`.
pub(crate) fn version() -> Value {
    let platform = format!(
        "{}/{}",
        std::env::consts::OS,
        match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            other => other,
        }
    );
    json!({
        "major": "1",
        "minor": KUBERNETES_VERSION.split('.').nth(1).unwrap_or_default(),
        "gitVersion": format!("{KUBERNETES_VERSION}+test-apiserver"),
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-08-27T00:00:00Z",
        "goVersion": "n/a",
        "compiler": "rustc",
        "platform": platform
    })
}

/// `GET /api`.
pub(crate) fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]
    })
}

fn resource_entries(defs: &[&'static ResourceDef]) -> Vec<Value> {
    let mut out = Vec::new();
    for def in defs {
        let mut m = Map::new();
        m.insert("name".into(), json!(def.plural));
        m.insert("singularName".into(), json!(""));
        m.insert("namespaced".into(), json!(def.namespaced));
        m.insert("kind".into(), json!(def.kind));
        m.insert("verbs".into(), json!(def.verbs));
        if !def.short_names.is_empty() {
            m.insert("shortNames".into(), json!(def.short_names));
        }
        if !def.categories.is_empty() {
            m.insert("categories".into(), json!(def.categories));
        }
        if !def.storage_version_hash.is_empty() {
            m.insert("storageVersionHash".into(), json!(def.storage_version_hash));
        }
        out.push(Value::Object(m));
        if def.status_subresource {
            out.push(json!({
                "name": format!("{}/status", def.plural),
                "singularName": "",
                "namespaced": def.namespaced,
                "kind": def.kind,
                "verbs": resources::subresource_verbs()
            }));
        }
        for sub in def.subresources {
            out.push(json!({
                "name": format!("{}/{}", def.plural, sub.name),
                "singularName": "",
                "namespaced": def.namespaced,
                "group": sub.group,
                "version": sub.version,
                "kind": sub.kind,
                "verbs": sub.verbs
            }));
        }
    }
    out
}

/// `GET /api/v1`: note the missing top-level `apiVersion`, as the real server sends it.
pub(crate) fn core_resources() -> Value {
    json!({
        "kind": "APIResourceList",
        "groupVersion": "v1",
        "resources": resource_entries(&resources::in_group_version("", "v1"))
    })
}

fn group_entry(group: &str) -> Value {
    let gv = format!("{group}/v1");
    json!({
        "name": group,
        "versions": [{"groupVersion": gv, "version": "v1"}],
        "preferredVersion": {"groupVersion": gv, "version": "v1"}
    })
}

/// `GET /apis`.
pub(crate) fn groups() -> Value {
    json!({
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": GROUPS.iter().map(|g| group_entry(g)).collect::<Vec<_>>()
    })
}

/// `GET /apis/{group}`, if served.
pub(crate) fn group(group: &str) -> Option<Value> {
    if !GROUPS.contains(&group) {
        return None;
    }
    let mut v = group_entry(group);
    if let Value::Object(m) = &mut v {
        let mut out = Map::new();
        out.insert("kind".into(), json!("APIGroup"));
        out.insert("apiVersion".into(), json!("v1"));
        out.append(m);
        return Some(Value::Object(out));
    }
    None
}

/// `GET /apis/{group}/{version}`, if served.
pub(crate) fn group_resources(group: &str, version: &str) -> Option<Value> {
    if group.is_empty() || !resources::serves_group_version(group, version) {
        return None;
    }
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": format!("{group}/{version}"),
        "resources": resource_entries(&resources::in_group_version(group, version))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_the_version_of_the_real_control_plane() {
        let go_mod = concat!(env!("CARGO_MANIFEST_DIR"), "/../../hack/realkube/go.mod");
        let text = std::fs::read_to_string(go_mod).expect("hack/realkube/go.mod");
        let pinned = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("k8s.io/kubernetes "))
            .map(str::trim)
            .expect("hack/realkube/go.mod requires k8s.io/kubernetes");
        assert_eq!(KUBERNETES_VERSION, pinned);
        assert_eq!(version()["minor"], pinned.split('.').nth(1).unwrap());
    }

    #[test]
    fn core_list_has_subresources_and_no_api_version() {
        let v = core_resources();
        assert!(v.get("apiVersion").is_none());
        let names: Vec<&str> = v["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "configmaps",
                "events",
                "namespaces",
                "namespaces/status",
                "nodes",
                "nodes/status",
                "persistentvolumes",
                "persistentvolumes/status",
                "pods",
                "pods/status",
                "serviceaccounts",
                "serviceaccounts/token",
                "services",
                "services/status"
            ]
        );
        let token = &v["resources"][11];
        assert_eq!(
            token,
            &json!({"name": "serviceaccounts/token", "singularName": "", "namespaced": true,
                "group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest",
                "verbs": ["create"]})
        );
        let status = &v["resources"][5];
        assert_eq!(status["verbs"], json!(["get", "patch", "update"]));
        assert!(status.get("shortNames").is_none());
    }

    #[test]
    fn coordination_matches_golden() {
        let v = group_resources("coordination.k8s.io", "v1").unwrap();
        assert_eq!(
            v,
            json!({"kind":"APIResourceList","apiVersion":"v1","groupVersion":"coordination.k8s.io/v1","resources":[
                {"name":"leases","singularName":"","namespaced":true,"kind":"Lease",
                 "verbs":["create","delete","deletecollection","get","list","patch","update","watch"],
                 "storageVersionHash":"gqkMMb/YqFM="}]})
        );
        assert!(group_resources("apps", "v1").is_none());
        assert_eq!(group("events.k8s.io").unwrap()["kind"], "APIGroup");
    }
}
