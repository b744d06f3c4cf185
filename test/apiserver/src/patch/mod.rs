//! The PATCH engine: JSON Patch (RFC 6902), JSON Merge Patch (RFC 7386) and Kubernetes strategic merge patch.
//!
//! [`apply`] takes the stored object as a [`serde_json::Value`], the raw request body and the patch type (selected
//! from the request `Content-Type` with [`PatchType::from_content_type`]) and returns the patched object, or a
//! [`PatchError`] that maps onto the HTTP status the real kube-apiserver answers with: 400 for a body that cannot be
//! decoded as a patch of that type, 422 for a well-formed patch that cannot be applied (a failing JSON-patch `test`,
//! a `remove` of a missing path, ...).
//!
//! The engine knows nothing about subresources, resource versions or validation: the server strips the parts a
//! subresource may not change, checks a `metadata.resourceVersion` carried in the patch as a precondition, and
//! validates the result. Strategic merge patch needs per-field list strategies; they come from a small table per
//! resource covering the fields a cloud-controller-manager, kubelet and kubectl touch.
//!
//! The engine never panics on any input, and bounds nesting: a patch, an original object or a result nested deeper
//! than [`MAX_DEPTH`] levels is refused with [`PatchError::BadRequest`], so no recursion can exhaust the stack.

mod json_patch;
mod merge_patch;
pub(crate) mod schema;
mod strategic;
mod value;

#[cfg(test)]
mod tests;

use serde_json::Value;

/// The deepest nesting (objects and arrays counted as one level each) accepted in an original object, a patch or
/// a patch result.
pub const MAX_DEPTH: usize = 256;

/// The message of every 422 answered for a JSON patch that is well formed but cannot be applied, exactly as the
/// real server words it.
pub const GENERIC_INVALID_MESSAGE: &str =
    "the server rejected our request due to an error in our request";

/// The three patch formats a Kubernetes API server accepts besides server-side apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// RFC 6902 JSON Patch (`application/json-patch+json`): a list of operations.
    Json,
    /// RFC 7386 JSON Merge Patch (`application/merge-patch+json`): a partial object, `null` deletes.
    Merge,
    /// Kubernetes strategic merge patch (`application/strategic-merge-patch+json`): like a merge patch, but lists
    /// are merged per field strategy and `$`-directives are honoured.
    StrategicMerge,
}

impl PatchType {
    /// Selects the patch type from a request `Content-Type` header value. Media type parameters (`; charset=utf-8`)
    /// and ASCII case are ignored. Returns `None` for any other media type (the server answers 415).
    pub fn from_content_type(content_type: &str) -> Option<PatchType> {
        let essence = content_type.split(';').next().unwrap_or_default().trim();
        [PatchType::Json, PatchType::Merge, PatchType::StrategicMerge]
            .into_iter()
            .find(|kind| essence.eq_ignore_ascii_case(kind.media_type()))
    }

    /// The media type that selects this patch type.
    pub fn media_type(self) -> &'static str {
        match self {
            PatchType::Json => "application/json-patch+json",
            PatchType::Merge => "application/merge-patch+json",
            PatchType::StrategicMerge => "application/strategic-merge-patch+json",
        }
    }
}

/// Why a patch was refused. The `Display` text is the message of the `Status` the server should answer with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// The body is not a well-formed patch of the requested type, or is nested too deeply: HTTP 400, reason
    /// `BadRequest`.
    #[error("{0}")]
    BadRequest(String),
    /// The patch is well formed but cannot be applied to this object: HTTP 422, reason `Invalid`.
    #[error("{0}")]
    Invalid(String),
}

impl PatchError {
    /// The HTTP status code the server answers with for this error (400 or 422).
    pub fn status_code(&self) -> u16 {
        match self {
            PatchError::BadRequest(_) => 400,
            PatchError::Invalid(_) => 422,
        }
    }

    /// The `reason` of the `Status` body for this error (`BadRequest` or `Invalid`).
    pub fn reason(&self) -> &'static str {
        match self {
            PatchError::BadRequest(_) => "BadRequest",
            PatchError::Invalid(_) => "Invalid",
        }
    }
}

/// Applies `patch` (the raw request body) of type `kind` to `original` and returns the patched object.
///
/// `resource` is the plural resource name (`nodes`, `services`, `leases`, `events`, `persistentvolumes`,
/// `namespaces`); it selects the strategic-merge schema, and any other name gets the metadata-only schema. The
/// original is never modified. Errors carry the status message and map to 400 ([`PatchError::BadRequest`]) or 422
/// ([`PatchError::Invalid`]).
pub fn apply(
    kind: PatchType,
    resource: &str,
    original: &Value,
    patch: &[u8],
) -> Result<Value, PatchError> {
    if value::depth_exceeds(original, MAX_DEPTH) {
        return Err(value::too_deep());
    }
    let result = match kind {
        PatchType::Json => json_patch::apply(original, patch)?,
        PatchType::Merge => merge_patch::apply(original, patch)?,
        PatchType::StrategicMerge => {
            strategic::apply(original, patch, schema::Schema::for_resource(resource))?
        }
    };
    if value::depth_exceeds(&result, MAX_DEPTH) {
        return Err(value::too_deep());
    }
    Ok(result)
}
