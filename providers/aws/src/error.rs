//! Errors of AWS API calls and their mapping onto the provider contract's [`CloudError`].

use std::time::Duration;

use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::display::DisplayErrorContext;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use cloud_provider::CloudError;

use crate::metrics::is_throttling_code;

/// How long the controllers should wait after AWS kept throttling a call through all SDK retries.
pub const THROTTLED_RETRY_AFTER: Duration = Duration::from_secs(15);

/// A failed AWS API call: the operation, AWS's error code (when the service answered) and a description.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("AWS {operation} failed: {detail}")]
pub struct ApiError {
    /// The API operation, e.g. `DescribeInstances`.
    pub operation: &'static str,
    /// AWS's error code, e.g. `InvalidInstanceID.NotFound`; `None` for transport failures.
    pub code: Option<String>,
    /// The error code and message, or the transport error.
    pub detail: String,
}

impl ApiError {
    /// Builds the error of a failed SDK call.
    pub fn from_sdk<E, R>(operation: &'static str, err: &SdkError<E, R>) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug,
    {
        let code = err.code().map(str::to_string);
        let detail = match (&code, err.message()) {
            (Some(code), Some(message)) => format!("{code}: {message}"),
            (Some(code), None) => code.clone(),
            _ => DisplayErrorContext(err).to_string(),
        };
        ApiError {
            operation,
            code,
            detail,
        }
    }

    /// Whether AWS answered with this error code.
    pub fn is_code(&self, code: &str) -> bool {
        self.code.as_deref() == Some(code)
    }

    /// Whether AWS answered with an error code starting with `prefix` (e.g. `InvalidInstanceID`).
    pub fn code_starts_with(&self, prefix: &str) -> bool {
        self.code.as_deref().is_some_and(|c| c.starts_with(prefix))
    }

    /// Whether the call was throttled through every retry.
    pub fn is_throttling(&self) -> bool {
        self.code.as_deref().is_some_and(is_throttling_code)
    }
}

impl From<ApiError> for CloudError {
    fn from(err: ApiError) -> Self {
        if err.is_throttling() {
            CloudError::retry(err.to_string(), THROTTLED_RETRY_AFTER)
        } else {
            CloudError::provider_with(format!("AWS {} failed", err.operation), err.detail)
        }
    }
}

/// Converts SDK results into [`ApiError`]s naming the operation.
pub(crate) trait SdkResultExt<T> {
    /// Maps the SDK error of `operation`.
    fn api(self, operation: &'static str) -> Result<T, ApiError>;
}

impl<T, E, R> SdkResultExt<T> for Result<T, SdkError<E, R>>
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    fn api(self, operation: &'static str) -> Result<T, ApiError> {
        self.map_err(|e| ApiError::from_sdk(operation, &e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping_to_cloud_errors() {
        let throttled = ApiError {
            operation: "DescribeInstances",
            code: Some("RequestLimitExceeded".into()),
            detail: "RequestLimitExceeded: Request limit exceeded.".into(),
        };
        assert!(throttled.is_throttling());
        let cloud: CloudError = throttled.into();
        assert_eq!(cloud.retry_after(), Some(THROTTLED_RETRY_AFTER));
        assert!(cloud.to_string().contains("DescribeInstances"));

        let denied = ApiError {
            operation: "CreateRoute",
            code: Some("UnauthorizedOperation".into()),
            detail: "UnauthorizedOperation: not allowed".into(),
        };
        assert!(denied.is_code("UnauthorizedOperation"));
        assert!(denied.code_starts_with("Unauthorized"));
        assert!(!denied.is_throttling());
        let cloud: CloudError = denied.into();
        assert_eq!(
            cloud.to_string(),
            "AWS CreateRoute failed: UnauthorizedOperation: not allowed"
        );
    }
}
