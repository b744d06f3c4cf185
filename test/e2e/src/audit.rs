//! The audit log of a real kube-apiserver (`audit.k8s.io/v1` events, one JSON object per line), read as the
//! record of who asked for what: the RBAC-honesty check and the client-identity checks use it the way local
//! runs use the in-process server's request log.
//!
//! `hack/realkube` writes it with a policy that logs every request at the `Metadata` level and omits the
//! `RequestReceived` stage, so a request appears once (`ResponseComplete`) or, for a watch still open,
//! twice (`ResponseStarted`, then `ResponseComplete`); entries are de-duplicated by `auditID`.

use std::collections::HashSet;
use std::path::Path;

use serde::Deserialize;

use crate::HarnessError;
use crate::rbac::ApiRequest;

/// One request: what was asked, by which client, and the answer's status code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditedRequest {
    /// The request as authorization sees it.
    pub request: ApiRequest,
    /// The `User-Agent` header (the in-process server does not record it).
    pub user_agent: Option<String>,
    /// The HTTP status code of the answer (0 for a watch still open).
    pub code: u16,
    /// Whether authorization refused the request (a 403 can also come from admission, e.g. a write into a
    /// namespace being deleted, which no RBAC rule would change).
    pub authorization_denied: bool,
}

/// A request of a user, from the audit log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    /// The authenticated user name.
    pub user: String,
    /// The request.
    pub request: AuditedRequest,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawEvent {
    #[serde(rename = "auditID")]
    audit_id: String,
    verb: String,
    user: RawUser,
    #[serde(default)]
    user_agent: Option<String>,
    #[serde(default)]
    object_ref: Option<RawObjectRef>,
    #[serde(default)]
    response_status: Option<RawStatus>,
    #[serde(default)]
    annotations: std::collections::HashMap<String, String>,
}

/// The audit annotation with the authorizer's decision (`allow` or `forbid`).
const AUTHORIZATION_DECISION: &str = "authorization.k8s.io/decision";

#[derive(Deserialize)]
struct RawUser {
    #[serde(default)]
    username: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawObjectRef {
    #[serde(default)]
    resource: String,
    #[serde(default)]
    subresource: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    api_group: String,
}

#[derive(Deserialize)]
struct RawStatus {
    #[serde(default)]
    code: u16,
}

/// Parses an audit log: one entry per resource request (non-resource requests such as discovery are left
/// out: RBAC grants those to every authenticated user), in order, each request once.
pub fn parse_audit_log(text: &str) -> Result<Vec<AuditEntry>, HarnessError> {
    let mut seen = HashSet::new();
    let mut entries = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let event: RawEvent = serde_json::from_str(line).map_err(|e| {
            HarnessError::Config(format!(
                "audit log line {}: not an audit event: {e}",
                index + 1
            ))
        })?;
        let Some(object) = event.object_ref else {
            continue;
        };
        if !seen.insert(event.audit_id) {
            continue;
        }
        let code = event.response_status.map(|s| s.code).unwrap_or(0);
        let authorization_denied = code == 403
            && event
                .annotations
                .get(AUTHORIZATION_DECISION)
                .is_none_or(|decision| decision == "forbid");
        entries.push(AuditEntry {
            user: event.user.username,
            request: AuditedRequest {
                request: ApiRequest {
                    verb: event.verb,
                    group: object.api_group,
                    resource: object.resource,
                    subresource: object.subresource,
                    namespace: object.namespace,
                    name: object.name,
                },
                user_agent: event.user_agent,
                code,
                authorization_denied,
            },
        });
    }
    Ok(entries)
}

/// Reads and parses the audit log at `path`.
pub fn read_audit_log(path: &Path) -> Result<Vec<AuditEntry>, HarnessError> {
    let text = std::fs::read_to_string(path).map_err(|e| HarnessError::Io {
        what: format!("reading the audit log {}", path.display()),
        source: e,
    })?;
    parse_audit_log(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_resource_requests_once_each() {
        let log = r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a1","stage":"ResponseStarted","requestURI":"/api/v1/nodes?watch=true","verb":"watch","user":{"username":"system:serviceaccount:kube-system:cloud-controller-manager"},"userAgent":"cloud-controller-manager/v0.1.0 (linux/amd64) kubernetes/unknown/shared-informers","objectRef":{"resource":"nodes","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":200}}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a2","stage":"ResponseComplete","requestURI":"/api","verb":"get","user":{"username":"admin"}}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a3","stage":"ResponseComplete","requestURI":"/api/v1/nodes/n1/status","verb":"patch","user":{"username":"u"},"objectRef":{"resource":"nodes","name":"n1","apiVersion":"v1","subresource":"status"},"responseStatus":{"metadata":{},"code":403}}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a1","stage":"ResponseComplete","requestURI":"/api/v1/nodes?watch=true","verb":"watch","user":{"username":"system:serviceaccount:kube-system:cloud-controller-manager"},"objectRef":{"resource":"nodes","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":200}}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a4","stage":"ResponseComplete","verb":"get","user":{"username":"u"},"objectRef":{"resource":"leases","namespace":"kube-system","name":"l","apiGroup":"coordination.k8s.io","apiVersion":"v1"}}
"#;
        let entries = parse_audit_log(log).unwrap();
        assert_eq!(entries.len(), 3, "{entries:?}");
        assert_eq!(entries[0].request.request.verb, "watch");
        assert!(
            entries[0]
                .request
                .user_agent
                .as_deref()
                .unwrap()
                .ends_with("/shared-informers")
        );
        assert_eq!(entries[1].request.request.rbac_resource(), "nodes/status");
        assert_eq!(entries[1].request.code, 403);
        assert_eq!(entries[2].request.request.group, "coordination.k8s.io");
        assert_eq!(entries[2].request.request.namespace, "kube-system");
        assert_eq!(entries[2].request.code, 0);
        assert!(entries[1].request.authorization_denied);
        assert!(!entries[0].request.authorization_denied);
        assert!(parse_audit_log("not json\n").is_err());
    }

    #[test]
    fn a_403_of_admission_is_not_an_authorization_denial() {
        let log = r#"{"auditID":"b1","verb":"create","user":{"username":"u"},"objectRef":{"resource":"events","namespace":"gone"},"responseStatus":{"code":403},"annotations":{"authorization.k8s.io/decision":"allow"}}
{"auditID":"b2","verb":"create","user":{"username":"u"},"objectRef":{"resource":"events","namespace":"x"},"responseStatus":{"code":403},"annotations":{"authorization.k8s.io/decision":"forbid"}}
"#;
        let entries = parse_audit_log(log).unwrap();
        assert!(!entries[0].request.authorization_denied);
        assert!(entries[1].request.authorization_denied);
    }
}
