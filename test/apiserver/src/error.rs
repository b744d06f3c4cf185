//! Errors: the library's own start-up errors, and API errors rendered as Kubernetes `Status` bodies.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde_json::{Map, Value, json};

use crate::resources::ResourceDef;

/// Errors returned by the library API (starting the server, writing the kubeconfig, building a client).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The listening socket could not be bound.
    #[error("failed to bind the API server to {addr}: {source}")]
    Bind {
        /// The address that was requested.
        addr: SocketAddr,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The self-signed serving certificate could not be generated.
    #[error("failed to generate the serving certificate: {0}")]
    Certificate(#[source] rcgen::Error),
    /// The TLS server configuration was rejected.
    #[error("failed to configure TLS: {0}")]
    Tls(#[source] rustls::Error),
    /// The kubeconfig file could not be written.
    #[error("failed to write the kubeconfig to {path}: {source}")]
    Kubeconfig {
        /// Where the kubeconfig was to be written.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A temporary directory for the kubeconfig could not be created.
    #[error("failed to create a temporary directory for the kubeconfig: {0}")]
    TempDir(#[source] std::io::Error),
    /// The kubeconfig could not be turned into a client configuration.
    #[error("failed to build a client configuration from the kubeconfig: {0}")]
    ClientConfig(#[source] kube::config::KubeconfigError),
    /// The kube client could not be built.
    #[error("failed to build a kube client: {0}")]
    Client(#[source] kube::Error),
    /// A builder option was invalid.
    #[error("invalid server configuration: {0}")]
    Config(String),
}

/// The kind of a field validation error, as Kubernetes names them in `details.causes[].reason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FieldErrorKind {
    Required,
    Invalid,
    Duplicate,
    Forbidden,
    NotSupported,
    TooLong,
}

/// One field validation error, rendered like `k8s.io/apimachinery/pkg/util/validation/field.Error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FieldError {
    pub kind: FieldErrorKind,
    pub field: String,
    /// The offending value, already rendered (strings quoted, numbers bare); empty when not shown.
    pub value: String,
    pub detail: String,
}

impl FieldError {
    pub(crate) fn required(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            kind: FieldErrorKind::Required,
            field: field.into(),
            value: String::new(),
            detail: detail.into(),
        }
    }

    pub(crate) fn invalid(
        field: impl Into<String>,
        value: impl Into<String>,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            kind: FieldErrorKind::Invalid,
            field: field.into(),
            value: value.into(),
            detail: detail.into(),
        }
    }

    /// An `Invalid value` error whose value is a string (rendered quoted, like Go's `%q`).
    pub(crate) fn invalid_str(
        field: impl Into<String>,
        value: &str,
        detail: impl Into<String>,
    ) -> Self {
        Self::invalid(field, quote(value), detail)
    }

    pub(crate) fn duplicate(field: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            kind: FieldErrorKind::Duplicate,
            field: field.into(),
            value: value.into(),
            detail: String::new(),
        }
    }

    pub(crate) fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            kind: FieldErrorKind::Forbidden,
            field: field.into(),
            value: String::new(),
            detail: detail.into(),
        }
    }

    pub(crate) fn not_supported(field: impl Into<String>, value: &str, supported: &[&str]) -> Self {
        let list = supported
            .iter()
            .map(|s| quote(s))
            .collect::<Vec<_>>()
            .join(", ");
        Self {
            kind: FieldErrorKind::NotSupported,
            field: field.into(),
            value: quote(value),
            detail: format!("supported values: {list}"),
        }
    }

    pub(crate) fn too_long(field: impl Into<String>, max: usize) -> Self {
        Self {
            kind: FieldErrorKind::TooLong,
            field: field.into(),
            value: String::new(),
            detail: format!("may not be longer than {max}"),
        }
    }

    /// The cause reason string (`FieldValueInvalid`, ...).
    pub(crate) fn reason(&self) -> &'static str {
        match self.kind {
            FieldErrorKind::Required => "FieldValueRequired",
            FieldErrorKind::Invalid => "FieldValueInvalid",
            FieldErrorKind::Duplicate => "FieldValueDuplicate",
            FieldErrorKind::Forbidden => "FieldValueForbidden",
            FieldErrorKind::NotSupported => "FieldValueNotSupported",
            FieldErrorKind::TooLong => "FieldValueTooLong",
        }
    }

    /// The message without the field path (`Invalid value: 0: must be ...`).
    pub(crate) fn message(&self) -> String {
        let head = match self.kind {
            FieldErrorKind::Required => "Required value".to_string(),
            FieldErrorKind::Invalid => format!("Invalid value: {}", self.value),
            FieldErrorKind::Duplicate => format!("Duplicate value: {}", self.value),
            FieldErrorKind::Forbidden => "Forbidden".to_string(),
            FieldErrorKind::NotSupported => format!("Unsupported value: {}", self.value),
            FieldErrorKind::TooLong => "Too long".to_string(),
        };
        if self.detail.is_empty() {
            head
        } else {
            format!("{head}: {}", self.detail)
        }
    }

    /// The full text, `field: message`.
    pub(crate) fn full(&self) -> String {
        format!("{}: {}", self.field, self.message())
    }
}

/// Renders a string the way Go's `%q` does for the common cases.
pub(crate) fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

/// An API error: becomes an HTTP response whose body is a `Status` object.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    /// `details` of the Status; `None` leaves the field out.
    pub details: Option<Box<Value>>,
    /// Adds a `Retry-After` header when set.
    pub retry_after: Option<u32>,
}

impl ApiError {
    pub(crate) fn new(
        code: u16,
        reason: &'static str,
        message: impl Into<String>,
        details: Option<Value>,
    ) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: details.map(Box::new),
            retry_after: None,
        }
    }

    /// The `Status` body.
    pub(crate) fn status_body(&self) -> Value {
        let mut m = Map::new();
        m.insert("kind".into(), json!("Status"));
        m.insert("apiVersion".into(), json!("v1"));
        m.insert("metadata".into(), json!({}));
        m.insert("status".into(), json!("Failure"));
        if !self.message.is_empty() {
            m.insert("message".into(), json!(self.message));
        }
        if !self.reason.is_empty() {
            m.insert("reason".into(), json!(self.reason));
        }
        if let Some(d) = &self.details {
            m.insert("details".into(), (**d).clone());
        }
        m.insert("code".into(), json!(self.code));
        Value::Object(m)
    }

    /// `details` naming an object by its resource plural (NotFound, AlreadyExists, update Conflict).
    fn resource_details(def: &ResourceDef, name: &str) -> Value {
        let mut d = Map::new();
        if !name.is_empty() {
            d.insert("name".into(), json!(name));
        }
        if !def.group.is_empty() {
            d.insert("group".into(), json!(def.group));
        }
        d.insert("kind".into(), json!(def.plural));
        Value::Object(d)
    }

    pub(crate) fn not_found(def: &ResourceDef, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} {} not found", def.qualified_resource(), quote(name)),
            Some(Self::resource_details(def, name)),
        )
    }

    pub(crate) fn namespace_not_found(ns: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("namespaces {} not found", quote(ns)),
            Some(json!({"name": ns, "kind": "namespaces"})),
        )
    }

    /// The generic 404 for paths and resources the server does not serve.
    pub(crate) fn unknown_resource() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
            Some(json!({})),
        )
    }

    pub(crate) fn already_exists(def: &ResourceDef, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!(
                "{} {} already exists",
                def.qualified_resource(),
                quote(name)
            ),
            Some(Self::resource_details(def, name)),
        )
    }

    /// The optimistic-concurrency conflict of an update or patch.
    pub(crate) fn conflict(def: &ResourceDef, name: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} {}: the object has been modified; please apply your changes to the latest version and try again",
                def.qualified_resource(),
                quote(name)
            ),
            Some(Self::resource_details(def, name)),
        )
    }

    /// A failed DELETE precondition; these name the Kind, not the resource.
    pub(crate) fn precondition_conflict(def: &ResourceDef, name: &str, detail: &str) -> Self {
        let mut d = Map::new();
        d.insert("name".into(), json!(name));
        if !def.group.is_empty() {
            d.insert("group".into(), json!(def.group));
        }
        d.insert("kind".into(), json!(def.kind));
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} {}: {detail}",
                def.kind,
                quote(name)
            ),
            Some(Value::Object(d)),
        )
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message, None)
    }

    /// 422 with causes, naming the object by its (storage) Kind: `Node "x" is invalid: ...`.
    pub(crate) fn invalid(def: &ResourceDef, name: &str, errors: &[FieldError]) -> Self {
        let (group, kind) = def.validation_group_kind();
        let qualified = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        Self::invalid_named(&qualified, group, kind, name, errors)
    }

    /// 422 naming the object by its resource: `leases.coordination.k8s.io "x" is invalid: ...`.
    pub(crate) fn invalid_by_resource(
        def: &ResourceDef,
        name: &str,
        errors: &[FieldError],
    ) -> Self {
        Self::invalid_named(
            &def.qualified_resource(),
            def.group,
            def.plural,
            name,
            errors,
        )
    }

    /// 422 naming the object as `qualified` (e.g. `TokenRequest.authentication.k8s.io`).
    pub(crate) fn invalid_named(
        qualified: &str,
        group: &str,
        kind: &str,
        name: &str,
        errors: &[FieldError],
    ) -> Self {
        let summary = if errors.len() == 1 {
            errors[0].full()
        } else {
            format!(
                "[{}]",
                errors
                    .iter()
                    .map(FieldError::full)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let causes: Vec<Value> = errors
            .iter()
            .map(|e| json!({"reason": e.reason(), "message": e.message(), "field": e.field}))
            .collect();
        let mut d = Map::new();
        if !name.is_empty() {
            d.insert("name".into(), json!(name));
        }
        if !group.is_empty() {
            d.insert("group".into(), json!(group));
        }
        if !kind.is_empty() {
            d.insert("kind".into(), json!(kind));
        }
        d.insert("causes".into(), Value::Array(causes));
        Self::new(
            422,
            "Invalid",
            format!("{qualified} {} is invalid: {summary}", quote(name)),
            Some(Value::Object(d)),
        )
    }

    /// 422 on request options (`ListOptions.meta.k8s.io "" is invalid: ...`).
    pub(crate) fn invalid_options(kind: &str, errors: &[FieldError]) -> Self {
        Self::invalid_named(
            &format!("{kind}.meta.k8s.io"),
            "meta.k8s.io",
            kind,
            "",
            errors,
        )
    }

    /// The generic 422 of a JSON patch whose `test` failed or whose path did not exist.
    pub(crate) fn invalid_generic(message: impl Into<String>) -> Self {
        Self::new(422, "Invalid", message, Some(json!({})))
    }

    pub(crate) fn unsupported_patch_type() -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            "415: Unsupported Media Type",
            Some(json!({})),
        )
    }

    pub(crate) fn unsupported_body_type() -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            // A real server also lists YAML and protobuf; this one speaks JSON only and says so.
            "the body of the request was in an unknown format - accepted media types include: application/json",
            None,
        )
    }

    pub(crate) fn not_acceptable() -> Self {
        Self::new(
            406,
            "NotAcceptable",
            "only the following media types are accepted: application/json",
            None,
        )
    }

    pub(crate) fn method_not_allowed() -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
            Some(json!({})),
        )
    }

    pub(crate) fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message, None)
    }

    pub(crate) fn too_large_resource_version(requested: u64, current: u64) -> Self {
        let mut e = Self::new(
            504,
            "Timeout",
            format!("Timeout: Too large resource version: {requested}, current: {current}"),
            Some(json!({
                "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                "retryAfterSeconds": 1
            })),
        );
        e.retry_after = Some(1);
        e
    }

    pub(crate) fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized", None)
    }

    pub(crate) fn forbidden(message: impl Into<String>, details: Option<Value>) -> Self {
        Self::new(403, "Forbidden", message, details)
    }

    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message, None)
    }

    pub(crate) fn too_large_body() -> Self {
        Self::new(
            413,
            "RequestEntityTooLarge",
            "the request body is too large",
            None,
        )
    }

    /// The Status body an injected fault returns for `code`.
    pub(crate) fn injected(code: u16, message: Option<&str>, retry_after: Option<u32>) -> Self {
        let (reason, default_message) = match code {
            400 => ("BadRequest", "injected fault: bad request"),
            401 => ("Unauthorized", "Unauthorized"),
            403 => ("Forbidden", "injected fault: forbidden"),
            404 => ("NotFound", "injected fault: not found"),
            405 => ("MethodNotAllowed", "injected fault: method not allowed"),
            409 => ("Conflict", "injected fault: conflict"),
            410 => ("Expired", "injected fault: expired"),
            415 => (
                "UnsupportedMediaType",
                "injected fault: unsupported media type",
            ),
            422 => ("Invalid", "injected fault: invalid"),
            429 => (
                "TooManyRequests",
                "Too many requests, please try again later.",
            ),
            500 => ("InternalError", "injected fault: internal error"),
            503 => ("ServiceUnavailable", "injected fault: service unavailable"),
            504 => ("Timeout", "injected fault: timeout"),
            _ => ("", "injected fault"),
        };
        let details = retry_after.map(|s| json!({"retryAfterSeconds": s}));
        let mut e = Self::new(code, reason, message.unwrap_or(default_message), details);
        e.retry_after = retry_after;
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources;

    #[test]
    fn not_found_matches_golden_shape() {
        let nodes = resources::find("", "v1", "nodes").unwrap();
        let body = ApiError::not_found(nodes, "no-such-node").status_body();
        assert_eq!(
            body,
            json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
                   "message":"nodes \"no-such-node\" not found","reason":"NotFound",
                   "details":{"name":"no-such-node","kind":"nodes"},"code":404})
        );
    }

    #[test]
    fn conflict_for_group_resource_names_group() {
        let leases = resources::find("coordination.k8s.io", "v1", "leases").unwrap();
        let body = ApiError::conflict(leases, "ccm").status_body();
        assert_eq!(
            body["details"],
            json!({"name":"ccm","group":"coordination.k8s.io","kind":"leases"})
        );
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .starts_with("Operation cannot be fulfilled on leases.coordination.k8s.io \"ccm\"")
        );
    }

    #[test]
    fn invalid_joins_several_causes() {
        let services = resources::find("", "v1", "services").unwrap();
        let errs = vec![
            FieldError::invalid(
                "spec.ports[0].port",
                "0",
                "must be between 1 and 65535, inclusive",
            ),
            FieldError::invalid(
                "spec.ports[0].targetPort",
                "0",
                "must be between 1 and 65535, inclusive",
            ),
        ];
        let body = ApiError::invalid(services, "bad-svc", &errs).status_body();
        assert_eq!(
            body["message"],
            "Service \"bad-svc\" is invalid: [spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive, spec.ports[0].targetPort: Invalid value: 0: must be between 1 and 65535, inclusive]"
        );
        assert_eq!(body["details"]["kind"], "Service");
        assert_eq!(body["details"]["causes"].as_array().unwrap().len(), 2);
    }
}
