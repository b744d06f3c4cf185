//! RBAC honesty: compare the permissions a manifest (`deploy/base/rbac.yaml`) grants the CCM's ServiceAccount
//! with the requests the CCM really made.
//!
//! The check fails both ways: a request no bound rule allows is *missing*, and a (verb, group, resource)
//! of a role the manifest defines that no request used is *unused* (least privilege). Bindings to
//! Kubernetes' built-in roles (`system:auth-delegator`, `extension-apiserver-authentication-reader`) are
//! justified when at least one request needed them; their rules are known here because the manifest only
//! names them.

use std::collections::BTreeSet;
use std::fmt;

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, Subject,
};
use serde::Deserialize;

use crate::HarnessError;

/// One API request, as far as authorization is concerned.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ApiRequest {
    /// Kubernetes verb: get, list, watch, create, update, patch, delete, ...
    pub verb: String,
    /// API group ("" for core).
    pub group: String,
    /// Plural resource name.
    pub resource: String,
    /// Subresource ("" for none).
    pub subresource: String,
    /// Namespace of a namespaced request ("" otherwise).
    pub namespace: String,
    /// Object name ("" for collection requests).
    pub name: String,
}

impl ApiRequest {
    /// `resource` or `resource/subresource`, as RBAC rules spell it.
    pub fn rbac_resource(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }

    /// The permission this request needs, without namespace and name.
    pub fn permission(&self) -> Permission {
        Permission {
            verb: self.verb.clone(),
            group: self.group.clone(),
            resource: self.rbac_resource(),
        }
    }
}

/// A (verb, API group, resource[/subresource]) triple.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Permission {
    /// The verb.
    pub verb: String,
    /// The API group ("" for core).
    pub group: String,
    /// `resource` or `resource/subresource`.
    pub resource: String,
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let group = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        write!(f, "{} {} ({group})", self.verb, self.resource)
    }
}

/// A set of rules that applies cluster-wide or in one namespace.
#[derive(Debug, Clone, PartialEq)]
pub struct Grant {
    /// `ClusterRole/<name>` or `Role/<namespace>/<name>`, for messages.
    pub role: String,
    /// True when the manifest defines the role (false: a built-in role it binds).
    pub defined_here: bool,
    /// `None` for cluster-wide grants, else the namespace a Role applies in.
    pub namespace: Option<String>,
    /// The rules.
    pub rules: Vec<PolicyRule>,
}

impl Grant {
    fn allows(&self, request: &ApiRequest) -> bool {
        if let Some(namespace) = &self.namespace
            && namespace != &request.namespace
        {
            return false;
        }
        self.rules.iter().any(|rule| rule_allows(rule, request))
    }
}

fn contains(list: &[String], value: &str) -> bool {
    list.iter().any(|item| item == "*" || item == value)
}

fn rule_allows(rule: &PolicyRule, request: &ApiRequest) -> bool {
    let groups = rule.api_groups.as_deref().unwrap_or_default();
    let resources = rule.resources.as_deref().unwrap_or_default();
    if !contains(&rule.verbs, &request.verb)
        || !contains(groups, &request.group)
        || !contains(resources, &request.rbac_resource())
    {
        return false;
    }
    match rule.resource_names.as_deref() {
        Some(names) if !names.is_empty() => {
            !request.name.is_empty() && names.iter().any(|n| n == &request.name)
        }
        _ => true,
    }
}

/// What a manifest grants one ServiceAccount.
#[derive(Debug, Clone, PartialEq)]
pub struct RbacManifest {
    /// The grants bound to the ServiceAccount, in manifest order.
    pub grants: Vec<Grant>,
}

#[derive(Deserialize)]
struct Kind {
    kind: Option<String>,
}

fn builtin_cluster_role(name: &str) -> Option<Vec<PolicyRule>> {
    let rule = |group: &str, resource: &str, verbs: &[&str], names: &[&str]| PolicyRule {
        api_groups: Some(vec![group.to_string()]),
        resources: Some(vec![resource.to_string()]),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        resource_names: (!names.is_empty()).then(|| names.iter().map(|n| n.to_string()).collect()),
        non_resource_urls: None,
    };
    match name {
        "system:auth-delegator" => Some(vec![
            rule("authentication.k8s.io", "tokenreviews", &["create"], &[]),
            rule(
                "authorization.k8s.io",
                "subjectaccessreviews",
                &["create"],
                &[],
            ),
        ]),
        "extension-apiserver-authentication-reader" => Some(vec![rule(
            "",
            "configmaps",
            &["get", "list", "watch"],
            &["extension-apiserver-authentication"],
        )]),
        _ => None,
    }
}

fn binds(subjects: Option<&Vec<Subject>>, namespace: &str, service_account: &str) -> bool {
    subjects.is_some_and(|subjects| {
        subjects.iter().any(|s| {
            s.kind == "ServiceAccount"
                && s.name == service_account
                && s.namespace.as_deref() == Some(namespace)
        })
    })
}

impl RbacManifest {
    /// Parses a multi-document YAML manifest and collects what it grants the ServiceAccount
    /// `namespace/service_account`: each (Cluster)RoleBinding naming it, resolved to the roles the
    /// manifest defines or to the built-in roles this module knows.
    pub fn parse(
        yaml: &str,
        namespace: &str,
        service_account: &str,
    ) -> Result<RbacManifest, HarnessError> {
        let bad = |message: String| HarnessError::Rbac(format!("deploy/base/rbac.yaml: {message}"));
        let mut cluster_roles = Vec::new();
        let mut roles = Vec::new();
        let mut cluster_bindings = Vec::new();
        let mut bindings = Vec::new();
        // Each document is read as a JSON value, then as the object its `kind` names. Empty documents
        // (comments only, a trailing `---`) are skipped and not counted.
        let documents: Vec<serde_json::Value> =
            serde_saphyr::from_multiple(yaml).map_err(|e| bad(e.to_string()))?;
        for (index, value) in documents.into_iter().enumerate() {
            let parse_err = |e: serde_json::Error| bad(format!("document {index}: {e}"));
            let kind: Kind = serde_json::from_value(value.clone()).map_err(parse_err)?;
            match kind.kind.as_deref() {
                Some("ClusterRole") => cluster_roles
                    .push(serde_json::from_value::<ClusterRole>(value).map_err(parse_err)?),
                Some("Role") => {
                    roles.push(serde_json::from_value::<Role>(value).map_err(parse_err)?)
                }
                Some("ClusterRoleBinding") => cluster_bindings
                    .push(serde_json::from_value::<ClusterRoleBinding>(value).map_err(parse_err)?),
                Some("RoleBinding") => {
                    bindings.push(serde_json::from_value::<RoleBinding>(value).map_err(parse_err)?)
                }
                _ => {}
            }
        }

        let mut grants = Vec::new();
        for binding in &cluster_bindings {
            if !binds(binding.subjects.as_ref(), namespace, service_account) {
                continue;
            }
            let name = &binding.role_ref.name;
            if binding.role_ref.kind != "ClusterRole" {
                return Err(bad(format!(
                    "ClusterRoleBinding {name:?} must refer to a ClusterRole"
                )));
            }
            grants.push(cluster_role_grant(&cluster_roles, name, None).ok_or_else(|| {
                bad(format!("ClusterRoleBinding refers to ClusterRole {name:?}, which is neither defined nor known"))
            })?);
        }
        for binding in &bindings {
            if !binds(binding.subjects.as_ref(), namespace, service_account) {
                continue;
            }
            let binding_ns = binding
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".to_string());
            let name = &binding.role_ref.name;
            let grant = match binding.role_ref.kind.as_str() {
                "ClusterRole" => cluster_role_grant(&cluster_roles, name, Some(binding_ns.clone())),
                "Role" => roles
                    .iter()
                    .find(|r| {
                        r.metadata.name.as_deref() == Some(name.as_str())
                            && r.metadata.namespace.as_deref().unwrap_or("default") == binding_ns
                    })
                    .map(|role| Grant {
                        role: format!("Role/{binding_ns}/{name}"),
                        defined_here: true,
                        namespace: Some(binding_ns.clone()),
                        rules: role.rules.clone().unwrap_or_default(),
                    })
                    .or_else(|| {
                        builtin_cluster_role(name).map(|rules| Grant {
                            role: format!("Role/{binding_ns}/{name}"),
                            defined_here: false,
                            namespace: Some(binding_ns.clone()),
                            rules,
                        })
                    }),
                other => return Err(bad(format!("RoleBinding {name:?} refers to a {other}"))),
            };
            grants.push(grant.ok_or_else(|| {
                bad(format!("RoleBinding in {binding_ns} refers to role {name:?}, which is neither defined nor known"))
            })?);
        }
        Ok(RbacManifest { grants })
    }

    /// Compares the grants with the requests made.
    pub fn check<'a>(&self, requests: impl IntoIterator<Item = &'a ApiRequest>) -> RbacCheck {
        let requests: BTreeSet<&ApiRequest> = requests.into_iter().collect();
        let mut missing = BTreeSet::new();
        for request in &requests {
            if !self.grants.iter().any(|grant| grant.allows(request)) {
                let scope = if request.namespace.is_empty() {
                    String::new()
                } else {
                    format!(" in namespace {}", request.namespace)
                };
                missing.insert(format!("{}{scope}", request.permission()));
            }
        }
        let mut unused = BTreeSet::new();
        for grant in &self.grants {
            if !grant.defined_here {
                if !requests.iter().any(|r| grant.allows(r)) {
                    unused.insert(format!("binding to {} (no request needed it)", grant.role));
                }
                continue;
            }
            for rule in &grant.rules {
                for group in rule.api_groups.as_deref().unwrap_or_default() {
                    for resource in rule.resources.as_deref().unwrap_or_default() {
                        for verb in &rule.verbs {
                            if [group, resource, verb].iter().any(|s| s.as_str() == "*") {
                                unused.insert(format!(
                                    "{}: wildcard in {verb} {resource} ({group}) is not least privilege",
                                    grant.role
                                ));
                                continue;
                            }
                            let single = Grant {
                                rules: vec![PolicyRule {
                                    api_groups: Some(vec![group.clone()]),
                                    resources: Some(vec![resource.clone()]),
                                    verbs: vec![verb.clone()],
                                    resource_names: rule.resource_names.clone(),
                                    non_resource_urls: None,
                                }],
                                ..grant.clone()
                            };
                            if !requests.iter().any(|r| single.allows(r)) {
                                let permission = Permission {
                                    verb: verb.clone(),
                                    group: group.clone(),
                                    resource: resource.clone(),
                                };
                                unused.insert(format!("{}: {permission}", grant.role));
                            }
                        }
                    }
                }
            }
        }
        RbacCheck {
            missing: missing.into_iter().collect(),
            unused: unused.into_iter().collect(),
        }
    }
}

fn cluster_role_grant(
    defined: &[ClusterRole],
    name: &str,
    namespace: Option<String>,
) -> Option<Grant> {
    let label = match &namespace {
        Some(ns) => format!("ClusterRole/{name} (bound in {ns})"),
        None => format!("ClusterRole/{name}"),
    };
    match defined
        .iter()
        .find(|r| r.metadata.name.as_deref() == Some(name))
    {
        Some(role) => Some(Grant {
            role: label,
            defined_here: true,
            namespace,
            rules: role.rules.clone().unwrap_or_default(),
        }),
        None => builtin_cluster_role(name).map(|rules| Grant {
            role: label,
            defined_here: false,
            namespace,
            rules,
        }),
    }
}

/// The outcome of [`RbacManifest::check`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RbacCheck {
    /// Requests no bound rule allows.
    pub missing: Vec<String>,
    /// Granted permissions no request used.
    pub unused: Vec<String>,
}

impl RbacCheck {
    /// True when the manifest grants exactly what was used.
    pub fn is_exact(&self) -> bool {
        self.missing.is_empty() && self.unused.is_empty()
    }
}

impl fmt::Display for RbacCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_exact() {
            return write!(f, "the manifest grants exactly what the CCM used");
        }
        if !self.missing.is_empty() {
            writeln!(f, "used but not granted:")?;
            for m in &self.missing {
                writeln!(f, "  - {m}")?;
            }
        }
        if !self.unused.is_empty() {
            writeln!(f, "granted but never used:")?;
            for u in &self.unused {
                writeln!(f, "  - {u}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: ccm}
rules:
  - apiGroups: [""]
    resources: ["nodes"]
    verbs: ["list", "watch", "delete"]
  - apiGroups: [""]
    resources: ["nodes/status"]
    verbs: ["patch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: ccm}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: ccm}
subjects: [{kind: ServiceAccount, name: ccm, namespace: kube-system}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: lease, namespace: kube-system}
rules:
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    verbs: ["get", "update"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: lease, namespace: kube-system}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: lease}
subjects: [{kind: ServiceAccount, name: ccm, namespace: kube-system}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: reader, namespace: kube-system}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: extension-apiserver-authentication-reader}
subjects: [{kind: ServiceAccount, name: ccm, namespace: kube-system}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: other}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects: [{kind: ServiceAccount, name: someone-else, namespace: kube-system}]
"#;

    fn req(verb: &str, group: &str, resource: &str, sub: &str, ns: &str, name: &str) -> ApiRequest {
        ApiRequest {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            namespace: ns.into(),
            name: name.into(),
        }
    }

    fn exact_use() -> Vec<ApiRequest> {
        vec![
            req("list", "", "nodes", "", "", ""),
            req("watch", "", "nodes", "", "", ""),
            req("delete", "", "nodes", "", "", "n1"),
            req("patch", "", "nodes", "status", "", "n1"),
            req(
                "get",
                "coordination.k8s.io",
                "leases",
                "",
                "kube-system",
                "ccm",
            ),
            req(
                "update",
                "coordination.k8s.io",
                "leases",
                "",
                "kube-system",
                "ccm",
            ),
            req(
                "get",
                "",
                "configmaps",
                "",
                "kube-system",
                "extension-apiserver-authentication",
            ),
        ]
    }

    #[test]
    fn exact_use_passes_and_other_subjects_are_ignored() {
        let manifest = RbacManifest::parse(MANIFEST, "kube-system", "ccm").unwrap();
        assert_eq!(manifest.grants.len(), 3);
        let check = manifest.check(&exact_use());
        assert!(check.is_exact(), "{check}");
    }

    #[test]
    fn missing_permissions_are_reported_with_their_scope() {
        let manifest = RbacManifest::parse(MANIFEST, "kube-system", "ccm").unwrap();
        let mut used = exact_use();
        used.push(req("update", "", "nodes", "", "", "n1"));
        used.push(req(
            "create",
            "coordination.k8s.io",
            "leases",
            "",
            "kube-system",
            "",
        ));
        // The Role only applies in kube-system.
        used.push(req(
            "get",
            "coordination.k8s.io",
            "leases",
            "",
            "default",
            "ccm",
        ));
        // resourceNames restricts the built-in reader role.
        used.push(req("get", "", "configmaps", "", "kube-system", "other"));
        let check = manifest.check(&used);
        assert_eq!(
            check.missing,
            vec![
                "create leases (coordination.k8s.io) in namespace kube-system".to_string(),
                "get configmaps (core) in namespace kube-system".to_string(),
                "get leases (coordination.k8s.io) in namespace default".to_string(),
                "update nodes (core)".to_string(),
            ]
        );
        assert!(check.unused.is_empty(), "{check}");
        assert!(check.to_string().contains("used but not granted"));
    }

    #[test]
    fn unused_permissions_and_bindings_are_reported() {
        let manifest = RbacManifest::parse(MANIFEST, "kube-system", "ccm").unwrap();
        let used: Vec<ApiRequest> = exact_use()
            .into_iter()
            .filter(|r| r.verb != "delete" && r.resource != "configmaps")
            .collect();
        let check = manifest.check(&used);
        assert!(check.missing.is_empty());
        assert_eq!(
            check.unused,
            vec![
                "ClusterRole/ccm: delete nodes (core)".to_string(),
                "binding to Role/kube-system/extension-apiserver-authentication-reader (no request needed it)"
                    .to_string(),
            ]
        );
    }

    #[test]
    fn unknown_roles_and_bad_yaml_are_errors() {
        let unknown = r#"
kind: ClusterRoleBinding
apiVersion: rbac.authorization.k8s.io/v1
metadata: {name: x}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: nonesuch}
subjects: [{kind: ServiceAccount, name: ccm, namespace: kube-system}]
"#;
        let err = RbacManifest::parse(unknown, "kube-system", "ccm").unwrap_err();
        assert!(err.to_string().contains("nonesuch"), "{err}");
        let err = RbacManifest::parse("kind: Role\nrules: 7\n", "kube-system", "ccm").unwrap_err();
        assert!(err.to_string().contains("document 0"), "{err}");
        let err = RbacManifest::parse(
            "# empty\n---\nkind: ServiceAccount\n---\nkind: Role\nrules: 7\n",
            "kube-system",
            "ccm",
        )
        .unwrap_err();
        assert!(err.to_string().contains("document 1: "), "{err}");
        let err = RbacManifest::parse("kind: Role\nrules: [\n", "kube-system", "ccm").unwrap_err();
        assert!(err.to_string().contains("line 2"), "{err}");
    }

    #[test]
    fn the_project_manifest_parses() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/base/rbac.yaml");
        let yaml = std::fs::read_to_string(path).unwrap();
        let manifest =
            RbacManifest::parse(&yaml, "kube-system", "cloud-controller-manager").unwrap();
        assert!(
            manifest
                .grants
                .iter()
                .any(|g| g.defined_here && g.namespace.is_none())
        );
        assert!(manifest.grants.iter().any(|g| !g.defined_here));
    }

    #[test]
    fn the_upstream_manifest_parses() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/upstream-rbac.yaml");
        let yaml = std::fs::read_to_string(path).unwrap();
        let manifest =
            RbacManifest::parse(&yaml, "kube-system", "cloud-controller-manager").unwrap();
        assert!(manifest.grants.iter().any(|g| g.defined_here));
        assert!(manifest.grants.iter().any(|g| !g.defined_here));
    }
}
