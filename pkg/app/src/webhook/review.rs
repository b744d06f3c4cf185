//! `admission.k8s.io/v1` AdmissionReview documents: the request the API server sends (read with upstream's
//! checks: a JSON content type, a body, a `request`) and the review that answers it.

use serde::Deserialize;
use serde_json::{Value, json};

/// The API version of the reviews this endpoint reads and writes.
pub const ADMISSION_API_VERSION: &str = "admission.k8s.io/v1";

/// Longest request body read, in bytes: the API server's own request limit is 3 MiB, and a review
/// holds the object twice on updates.
pub const MAX_REVIEW_BYTES: usize = 8 * 1024 * 1024;

/// Why a review could not be read (answered with HTTP 400, as upstream).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReviewError {
    /// The content type is not JSON.
    #[error("Content-Type: {0:?} should be \"application/json\"")]
    ContentType(String),
    /// No body.
    #[error("admission request HTTP body is empty")]
    Empty,
    /// Not an AdmissionReview of `admission.k8s.io/v1`.
    #[error("could not deserialize incoming admission review: {0}")]
    Decode(String),
    /// No `request`.
    #[error("admission review can't be used: Request field is nil")]
    NoRequest,
}

/// The group, version and kind (or resource) of the reviewed object.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct GroupVersionName {
    /// The API group (empty for the core group).
    pub group: String,
    /// The version.
    pub version: String,
    /// The kind, or the resource.
    #[serde(alias = "resource")]
    pub kind: String,
}

/// The parts of an admission request the webhooks read.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionRequest {
    /// Echoed in the response.
    pub uid: String,
    /// The object's kind.
    #[serde(default)]
    pub kind: GroupVersionName,
    /// The resource.
    #[serde(default)]
    pub resource: GroupVersionName,
    /// The subresource, empty for the object itself.
    #[serde(default)]
    pub sub_resource: String,
    /// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    #[serde(default)]
    pub operation: String,
    /// The object's namespace.
    #[serde(default)]
    pub namespace: String,
    /// The object's name (empty on a create with `generateName`).
    #[serde(default)]
    pub name: String,
    /// The object as it would be stored.
    #[serde(default)]
    pub object: Option<Value>,
    /// The stored object, on updates.
    #[serde(default)]
    pub old_object: Option<Value>,
}

impl AdmissionRequest {
    /// Whether the request is about core/v1 Services themselves (not a subresource).
    pub fn is_service(&self) -> bool {
        self.resource.group.is_empty()
            && self.resource.kind == "services"
            && self.sub_resource.is_empty()
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Review {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    request: Option<AdmissionRequest>,
}

/// Reads the request of a review body sent with `content_type`.
pub fn parse_review(
    content_type: Option<&str>,
    body: &[u8],
) -> Result<AdmissionRequest, ReviewError> {
    let content_type = content_type.unwrap_or_default();
    let media_type = content_type.split(';').next().unwrap_or_default().trim();
    if !media_type.eq_ignore_ascii_case("application/json") {
        return Err(ReviewError::ContentType(content_type.to_string()));
    }
    if body.is_empty() {
        return Err(ReviewError::Empty);
    }
    let review: Review =
        serde_json::from_slice(body).map_err(|err| ReviewError::Decode(err.to_string()))?;
    if review.api_version != ADMISSION_API_VERSION || review.kind != "AdmissionReview" {
        return Err(ReviewError::Decode(format!(
            "expected kind AdmissionReview of {ADMISSION_API_VERSION}, got {:?} of {:?}",
            review.kind, review.api_version
        )));
    }
    review.request.ok_or(ReviewError::NoRequest)
}

/// The review answering request `uid`: allowed with `warnings`, or refused with `denied` (HTTP 403 in the
/// status, as a validating webhook's refusal).
pub fn response_review(uid: &str, denied: Option<&str>, warnings: &[String]) -> Value {
    let mut response = json!({ "uid": uid, "allowed": denied.is_none() });
    if let Some(message) = denied {
        response["status"] = json!({
            "code": 403,
            "reason": "Forbidden",
            "message": message,
        });
    }
    if !warnings.is_empty() {
        response["warnings"] = json!(warnings);
    }
    json!({
        "apiVersion": ADMISSION_API_VERSION,
        "kind": "AdmissionReview",
        "response": response,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const JSON: Option<&str> = Some("application/json");

    fn review(request: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": ADMISSION_API_VERSION,
            "kind": "AdmissionReview",
            "request": request,
        }))
        .unwrap()
    }

    #[test]
    fn a_service_request_is_read() {
        let body = review(json!({
            "uid": "u-1",
            "kind": {"group": "", "version": "v1", "kind": "Service"},
            "resource": {"group": "", "version": "v1", "resource": "services"},
            "operation": "UPDATE",
            "namespace": "default",
            "name": "web",
            "object": {"metadata": {"name": "web"}},
            "oldObject": {"metadata": {"name": "web"}},
            "userInfo": {"username": "alice"},
        }));
        let request = parse_review(Some("application/json; charset=utf-8"), &body).unwrap();
        assert_eq!(request.uid, "u-1");
        assert_eq!(request.operation, "UPDATE");
        assert!(request.is_service());
        assert!(request.old_object.is_some());
        assert_eq!(request.kind.kind, "Service");
    }

    #[test]
    fn upstreams_refusals() {
        assert_eq!(
            parse_review(Some("text/plain"), b"{}"),
            Err(ReviewError::ContentType("text/plain".into()))
        );
        assert_eq!(
            parse_review(None, b"{}"),
            Err(ReviewError::ContentType(String::new()))
        );
        assert_eq!(parse_review(JSON, b""), Err(ReviewError::Empty));
        assert!(matches!(
            parse_review(JSON, b"{"),
            Err(ReviewError::Decode(_))
        ));
        assert!(matches!(
            parse_review(JSON, br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"x"}}"#),
            Err(ReviewError::Decode(_))
        ));
        let no_request = br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#;
        assert_eq!(parse_review(JSON, no_request), Err(ReviewError::NoRequest));
    }

    #[test]
    fn a_subresource_is_not_the_service() {
        let body = review(json!({
            "uid": "u",
            "resource": {"group": "", "version": "v1", "resource": "services"},
            "subResource": "status",
        }));
        assert!(!parse_review(JSON, &body).unwrap().is_service());
    }

    #[test]
    fn responses() {
        let allowed = response_review("u", None, &["checked late".to_string()]);
        assert_eq!(allowed["response"]["allowed"], true);
        assert_eq!(allowed["response"]["uid"], "u");
        assert_eq!(allowed["response"]["warnings"][0], "checked late");
        assert!(allowed["response"].get("status").is_none());
        let denied = response_review("u", Some("bad annotation"), &[]);
        assert_eq!(denied["response"]["allowed"], false);
        assert_eq!(denied["response"]["status"]["code"], 403);
        assert_eq!(denied["response"]["status"]["message"], "bad annotation");
        assert!(denied["response"].get("warnings").is_none());
        assert_eq!(denied["kind"], "AdmissionReview");
    }
}
