//! The dry run's report: per object, "in sync" or what would change (API writes and cloud calls), the
//! events that would be recorded (not those about a call the dry run refused), and the syncs that failed;
//! as a table or as JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use cloud_provider::{DryRunRecords, ObjectKey, REFUSED_BY_DRY_RUN};
use serde_json::Value;

/// The exit code when something would change.
pub const EXIT_WOULD_CHANGE: u8 = 3;

/// What a dry run found about one object.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ObjectReport {
    /// The changes: `API <METHOD> <path>: <change>` and `cloud <operation>: <arguments>`.
    pub changes: Vec<String>,
    /// The events that would be recorded about it: `<type> <reason>: <message>`.
    pub events: Vec<String>,
    /// The syncs of it that failed.
    pub errors: Vec<String>,
}

impl ObjectReport {
    /// `in sync`, `would change` or `error`.
    pub fn status(&self) -> &'static str {
        if !self.errors.is_empty() {
            "error"
        } else if !self.changes.is_empty() {
            "would change"
        } else {
            "in sync"
        }
    }
}

/// The whole report.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct DryRunReport {
    /// Every object looked at or changed, by kind and name.
    pub objects: BTreeMap<String, ObjectReport>,
    /// Changes and errors not about one object (e.g. a controller that could not start).
    pub other: ObjectReport,
}

/// Shown under a refused cloud call: the rest of that object's sync was not run.
const STOPPED: &str = "(the sync stops here: what follows depends on the call's result)";

impl DryRunReport {
    /// Builds the report from what the dry run recorded.
    pub fn from_records(records: DryRunRecords) -> Self {
        let mut report = DryRunReport::default();
        for object in records.objects {
            report.entry(Some(&object));
        }
        for write in records.api_writes {
            let entry = report.entry(write.object.as_ref());
            if write.event {
                // An event about a refused call would not be recorded: the call would have been made.
                if let Some(text) = event_text(&write.change)
                    && !text.contains(REFUSED_BY_DRY_RUN)
                {
                    entry.events.push(text);
                }
            } else {
                entry.changes.push(format!(
                    "API {} {}: {}",
                    write.method, write.path, write.change
                ));
            }
        }
        for call in records.cloud_calls {
            let entry = report.entry(call.object.as_ref());
            entry
                .changes
                .push(format!("cloud {}: {}", call.operation, call.details));
            entry.changes.push(STOPPED.to_string());
        }
        for failure in records.failures {
            report
                .entry(failure.object.as_ref())
                .errors
                .push(format!("{}: {}", failure.controller, failure.message));
        }
        report
    }

    fn entry(&mut self, object: Option<&ObjectKey>) -> &mut ObjectReport {
        match object {
            Some(object) => self.objects.entry(object.to_string()).or_default(),
            None => &mut self.other,
        }
    }

    fn all(&self) -> impl Iterator<Item = (&str, &ObjectReport)> {
        let other = (!self.other.changes.is_empty() || !self.other.errors.is_empty())
            .then_some(("(not about one object)", &self.other));
        self.objects
            .iter()
            .map(|(name, report)| (name.as_str(), report))
            .chain(other)
    }

    /// 0 when everything is in sync, [`EXIT_WOULD_CHANGE`] when something would change, 1 on errors.
    pub fn exit_code(&self) -> u8 {
        let statuses: Vec<&str> = self.all().map(|(_, r)| r.status()).collect();
        if statuses.contains(&"error") {
            1
        } else if statuses.contains(&"would change") {
            EXIT_WOULD_CHANGE
        } else {
            0
        }
    }

    /// The report as a table: a summary line, then one row per change, event or error.
    pub fn table(&self) -> String {
        let rows: Vec<(&str, &ObjectReport)> = self.all().collect();
        let count = |status| rows.iter().filter(|(_, r)| r.status() == status).count();
        let mut out = format!(
            "dry run: {} objects: {} in sync, {} would change, {} with errors\n\n",
            rows.len(),
            count("in sync"),
            count("would change"),
            count("error")
        );
        let width = rows
            .iter()
            .map(|(name, _)| name.len())
            .chain([6])
            .max()
            .unwrap_or(6);
        let _ = writeln!(out, "{:width$}  {:12}  DETAILS", "OBJECT", "STATUS");
        for (name, report) in rows {
            let details = report
                .errors
                .iter()
                .map(|e| format!("error: {e}"))
                .chain(report.changes.iter().cloned())
                .chain(report.events.iter().map(|e| format!("event {e}")));
            let mut first = true;
            for line in details {
                let (name, status) = if first {
                    (name, report.status())
                } else {
                    ("", "")
                };
                let row = format!("{name:width$}  {status:12}  {line}");
                let _ = writeln!(out, "{}", row.trim_end());
                first = false;
            }
            if first {
                let row = format!("{name:width$}  {}", report.status());
                let _ = writeln!(out, "{row}");
            }
        }
        out
    }

    /// The report as JSON.
    pub fn json(&self) -> String {
        let objects: Vec<Value> = self
            .all()
            .map(|(name, report)| {
                serde_json::json!({
                    "object": name,
                    "status": report.status(),
                    "changes": report.changes,
                    "events": report.events,
                    "errors": report.errors,
                })
            })
            .collect();
        let document = serde_json::json!({
            "exitCode": self.exit_code(),
            "objects": objects,
        });
        serde_json::to_string_pretty(&document).unwrap_or_else(|_| document.to_string())
    }
}

/// `<type> <reason>: <message>` of an Event's JSON (core `v1` or `events.k8s.io/v1`); `None` for a patch
/// of an existing Event (a repeat).
fn event_text(body: &str) -> Option<String> {
    let event: Value = serde_json::from_str(body).ok()?;
    let field = |name: &str| event.get(name).and_then(Value::as_str);
    let reason = field("reason")?;
    let message = field("note").or_else(|| field("message")).unwrap_or("");
    Some(format!(
        "{} {reason}: {message}",
        field("type").unwrap_or("Normal")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cloud_provider::{ApiWrite, CloudCall, SyncFailure};

    fn records() -> DryRunRecords {
        let mut records = DryRunRecords::default();
        records.objects.insert(ObjectKey::node("n1"));
        records.objects.insert(ObjectKey::node("n2"));
        records.api_writes.push(ApiWrite {
            object: Some(ObjectKey::node("n1")),
            method: "PATCH".into(),
            path: "/api/v1/nodes/n1".into(),
            change: r#"{"spec":{"taints":[]}}"#.into(),
            event: false,
        });
        records.api_writes.push(ApiWrite {
            object: Some(ObjectKey::node("n1")),
            method: "POST".into(),
            path: "/api/v1/namespaces/default/events".into(),
            change: r#"{"type":"Normal","reason":"Synced","message":"Node synced successfully"}"#
                .into(),
            event: true,
        });
        records.cloud_calls.push(CloudCall {
            object: Some(ObjectKey::service("default", "web")),
            operation: "ensure_load_balancer".into(),
            details: "service default/web".into(),
        });
        records
    }

    #[test]
    fn objects_are_in_sync_or_would_change() {
        let report = DryRunReport::from_records(records());
        assert_eq!(report.objects["node/n2"].status(), "in sync");
        assert_eq!(report.objects["node/n1"].status(), "would change");
        assert_eq!(
            report.objects["node/n1"].events,
            ["Normal Synced: Node synced successfully"]
        );
        assert_eq!(
            report.objects["service/default/web"].status(),
            "would change"
        );
        assert_eq!(report.exit_code(), EXIT_WOULD_CHANGE);
        let table = report.table();
        assert!(table.starts_with("dry run: 3 objects: 1 in sync, 2 would change, 0 with errors"));
        assert!(table.contains("node/n2              in sync"), "{table}");
        assert!(table.contains("cloud ensure_load_balancer: service default/web"));
        let json: Value = serde_json::from_str(&report.json()).unwrap();
        assert_eq!(json["exitCode"], 3);
        assert_eq!(json["objects"][0]["object"], "node/n1");
    }

    #[test]
    fn errors_win_and_only_events_are_in_sync() {
        let mut records = DryRunRecords::default();
        records.api_writes.push(ApiWrite {
            object: Some(ObjectKey::node("n1")),
            method: "POST".into(),
            path: "/api/v1/namespaces/default/events".into(),
            change: r#"{"type":"Normal","reason":"Synced"}"#.into(),
            event: true,
        });
        let report = DryRunReport::from_records(records.clone());
        assert_eq!(report.exit_code(), 0);
        records.failures.push(SyncFailure {
            object: None,
            controller: "node-route-controller".into(),
            message: "listing routes failed".into(),
        });
        let report = DryRunReport::from_records(records);
        assert_eq!(report.exit_code(), 1);
        assert!(
            report
                .table()
                .contains("error: node-route-controller: listing routes failed")
        );
    }
}
