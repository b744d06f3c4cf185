//! The real API server's audit log (`realkube`'s policy: every request once, at the Metadata level): the
//! daemon's requests counted by the scenarios on a real control plane, and what the reliability scenarios
//! assert (who wrote what when, from which address, with which answer).

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::Context;
use serde::Deserialize;

/// The identity the daemon's token authenticates as (the ServiceAccount the real control plane gives it; the
/// in-memory server's token user has the same name).
pub const DAEMON_USER: &str = "system:serviceaccount:kube-system:cloud-controller-manager";

/// The verbs that change something.
const WRITE_VERBS: &[&str] = &["create", "update", "patch", "delete", "deletecollection"];

/// One completed request.
#[derive(Debug, Clone)]
pub struct Request {
    /// The verb (`get`, `list`, `watch`, `create`, `patch`...).
    pub verb: String,
    /// The user name.
    pub user: String,
    /// The client's address as the API server saw it.
    pub source_ip: String,
    /// The resource, subresource and object name.
    pub resource: String,
    pub subresource: String,
    pub name: String,
    /// The answer's status code (0 when the log has none).
    pub code: u16,
    /// When the API server received it.
    pub received: SystemTime,
}

impl Request {
    /// Whether it is a write.
    pub fn is_write(&self) -> bool {
        WRITE_VERBS.contains(&self.verb.as_str())
    }

    /// Whether it succeeded (a 2xx answer).
    pub fn succeeded(&self) -> bool {
        (200..300).contains(&self.code)
    }

    /// Whether the daemon's identity made it.
    pub fn by_daemon(&self) -> bool {
        self.user == DAEMON_USER
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Line {
    stage: String,
    verb: String,
    #[serde(default)]
    user: User,
    #[serde(default, rename = "sourceIPs")]
    source_ips: Vec<String>,
    #[serde(default)]
    object_ref: Option<ObjectRef>,
    #[serde(default)]
    response_status: Option<Status>,
    request_received_timestamp: String,
}

#[derive(Default, Deserialize)]
struct User {
    #[serde(default)]
    username: String,
}

#[derive(Default, Deserialize)]
struct ObjectRef {
    #[serde(default)]
    resource: String,
    #[serde(default)]
    subresource: String,
    #[serde(default)]
    name: String,
}

#[derive(Default, Deserialize)]
struct Status {
    #[serde(default)]
    code: u16,
}

/// The audit log of one cluster.
pub struct AuditLog {
    path: PathBuf,
}

impl AuditLog {
    /// The log of the cluster in `dir`.
    pub fn of(dir: &Path) -> Self {
        AuditLog {
            path: dir.join("audit.log"),
        }
    }

    /// Every request completed so far (a watch once it started), in the log's order.
    pub fn requests(&self) -> anyhow::Result<Vec<Request>> {
        let bytes = std::fs::read(&self.path)?;
        Ok(parse(&bytes))
    }
}

/// The requests of a log's bytes; lines that are not complete events (the one being written) are skipped.
pub fn parse(bytes: &[u8]) -> Vec<Request> {
    bytes
        .split(|b| *b == b'\n')
        .filter_map(|line| serde_json::from_slice::<Line>(line).ok())
        .filter(|line| {
            let counted = if line.verb == "watch" {
                "ResponseStarted"
            } else {
                "ResponseComplete"
            };
            line.stage == counted
        })
        .filter_map(|line| {
            let object = line.object_ref.unwrap_or_default();
            Some(Request {
                received: parse_time(&line.request_received_timestamp).ok()?,
                verb: line.verb,
                user: line.user.username,
                source_ip: line.source_ips.into_iter().next().unwrap_or_default(),
                resource: object.resource,
                subresource: object.subresource,
                name: object.name,
                code: line.response_status.map_or(0, |s| s.code),
            })
        })
        .collect()
}

/// An RFC 3339 time (the control endpoint's and the audit log's) on the wall clock.
pub fn parse_time(text: &str) -> anyhow::Result<SystemTime> {
    let timestamp: k8s_openapi::jiff::Timestamp = text
        .parse()
        .with_context(|| format!("not an RFC 3339 time: {text:?}"))?;
    Ok(SystemTime::from(timestamp))
}

/// The first successful write of the daemon received at or after `since`.
pub fn first_daemon_write(requests: &[Request], since: SystemTime) -> Option<SystemTime> {
    requests
        .iter()
        .filter(|r| r.by_daemon() && r.is_write() && r.succeeded() && r.received >= since)
        .map(|r| r.received)
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const LOG: &str = r#"{"kind":"Event","level":"Metadata","stage":"ResponseComplete","verb":"patch","user":{"username":"system:serviceaccount:kube-system:cloud-controller-manager"},"sourceIPs":["127.0.0.3"],"objectRef":{"resource":"nodes","name":"n1"},"responseStatus":{"code":200},"requestReceivedTimestamp":"2026-11-27T22:29:48.000001Z"}
{"kind":"Event","level":"Metadata","stage":"ResponseComplete","verb":"get","user":{"username":"system:serviceaccount:kube-system:cloud-controller-manager"},"sourceIPs":["127.0.0.3"],"objectRef":{"resource":"leases","name":"l"},"responseStatus":{"code":200},"requestReceivedTimestamp":"2026-11-27T22:29:47.000001Z"}
{"kind":"Event","level":"Metadata","stage":"ResponseStarted","verb":"watch","user":{"username":"u"},"sourceIPs":["127.0.0.1"],"objectRef":{"resource":"nodes"},"responseStatus":{"code":200},"requestReceivedTimestamp":"2026-11-27T22:29:46.000001Z"}
{"kind":"Event","level":"Metadata","stage":"ResponseComplete","verb":"patch","user":{"username":"system:serviceaccount:kube-system:cloud-controller-manager"},"sourceIPs":["127.0.0.3"],"objectRef":{"resource":"nodes","name":"n2"},"responseStatus":{"code":409},"requestReceivedTimestamp":"2026-11-27T22:29:45.000001Z"}
{"kind":"Event","level":"Metadata","stage":"Resp"#;

    #[test]
    fn requests_are_read_with_their_source_answer_and_time() {
        let requests = parse(LOG.as_bytes());
        assert_eq!(requests.len(), 4);
        let patch = &requests[0];
        assert!(patch.by_daemon() && patch.is_write() && patch.succeeded());
        assert_eq!(
            (patch.source_ip.as_str(), patch.name.as_str()),
            ("127.0.0.3", "n1")
        );
        assert_eq!(requests[2].verb, "watch");
        assert!(!requests[3].succeeded());
        let at = |t: &str| parse_time(t).unwrap();
        assert_eq!(
            first_daemon_write(&requests, at("2026-11-27T22:29:40Z")),
            Some(at("2026-11-27T22:29:48.000001Z"))
        );
        assert_eq!(
            first_daemon_write(&requests, at("2026-11-27T22:29:49Z")),
            None
        );
    }

    #[test]
    fn times_of_go_and_of_the_audit_log_parse() {
        let go = parse_time("2026-11-27T22:29:48.683010884Z").unwrap();
        let audit = parse_time("2026-11-27T22:29:48.683010Z").unwrap();
        assert_eq!(go.duration_since(audit).unwrap(), Duration::from_nanos(884));
        assert!(parse_time("yesterday").is_err());
    }
}
