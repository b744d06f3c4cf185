//! The JSON log format of upstream's components (component-base's zap-based format): one object per line
//! with `ts` (Unix time in milliseconds, fractional), `caller` (`dir/file:line`), `msg`, `v` (the verbosity
//! of an info line; absent on errors) and the event's fields as keys of their own; a field named `error`
//! is written as `err`, the key upstream's error lines carry.

use std::fmt;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The event formatter (see the module documentation).
#[derive(Debug, Clone, Copy, Default)]
pub struct UpstreamJson;

/// The klog verbosity an info line of `level` corresponds to.
fn verbosity_of(level: &Level) -> Option<u64> {
    match *level {
        Level::ERROR => None,
        Level::WARN | Level::INFO => Some(0),
        Level::DEBUG => Some(4),
        Level::TRACE => Some(5),
    }
}

/// `dir/file:line` of the last two components of `file`, as zap's short caller.
fn caller(file: Option<&str>, line: Option<u32>) -> Option<String> {
    let file = file?;
    let mut parts = file.rsplit('/');
    let name = parts.next()?;
    let short = match parts.next() {
        Some(dir) => format!("{dir}/{name}"),
        None => name.to_string(),
    };
    Some(match line {
        Some(line) => format!("{short}:{line}"),
        None => short,
    })
}

/// Collects an event's fields; the message goes to `msg`.
#[derive(Default)]
struct Fields {
    message: String,
    fields: Map<String, Value>,
}

impl Fields {
    fn key(field: &Field) -> String {
        match field.name() {
            "error" => "err".to_string(),
            name => name.to_string(),
        }
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_string();
        } else {
            self.fields
                .insert(Self::key(field), Value::String(value.to_string()));
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.fields.insert(Self::key(field), Value::Bool(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.fields.insert(Self::key(field), Value::from(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.fields.insert(Self::key(field), Value::from(value));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.fields.insert(Self::key(field), Value::from(value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            self.fields
                .insert(Self::key(field), Value::String(format!("{value:?}")));
        }
    }
}

impl<S, N> FormatEvent<S, N> for UpstreamJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let mut fields = Fields::default();
        event.record(&mut fields);
        let ts = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64() * 1000.0)
            .unwrap_or_default();
        let mut line = Map::new();
        line.insert("ts".to_string(), Value::from(ts));
        if let Some(caller) = caller(meta.file(), meta.line()) {
            line.insert("caller".to_string(), Value::String(caller));
        }
        line.insert("msg".to_string(), Value::String(fields.message));
        if let Some(v) = verbosity_of(meta.level()) {
            line.insert("v".to_string(), Value::from(v));
        }
        for (key, value) in fields.fields {
            line.entry(key).or_insert(value);
        }
        let text = serde_json::to_string(&Value::Object(line)).map_err(|_| fmt::Error)?;
        writeln!(writer, "{text}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callers_are_short() {
        assert_eq!(
            caller(Some("pkg/controllers/src/node/mod.rs"), Some(12)).as_deref(),
            Some("node/mod.rs:12")
        );
        assert_eq!(caller(Some("main.rs"), None).as_deref(), Some("main.rs"));
        assert_eq!(caller(None, Some(1)), None);
    }

    #[test]
    fn lines_have_upstreams_keys() {
        use std::sync::{Arc, Mutex};
        use tracing_subscriber::layer::SubscriberExt;

        #[derive(Clone, Default)]
        struct Buffer(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buffer {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::registry().with(
            tracing_subscriber::fmt::layer()
                .event_format(UpstreamJson)
                .with_writer(move || writer.clone()),
        );
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(node = "n1", count = 3, "node synced");
            tracing::error!(error = "boom", "sync failed");
        });
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[0]["msg"], "node synced");
        assert_eq!(lines[0]["v"], 0);
        assert_eq!(lines[0]["node"], "n1");
        assert_eq!(lines[0]["count"], 3);
        assert!(lines[0]["ts"].as_f64().unwrap() > 1.7e12);
        assert!(lines[0]["caller"].as_str().unwrap().contains("json.rs:"));
        assert_eq!(lines[1]["msg"], "sync failed");
        assert_eq!(lines[1]["err"], "boom");
        assert!(lines[1].get("v").is_none());
    }
}
