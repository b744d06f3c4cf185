//! The error type shared by every provider capability.
//!
//! Controllers look at the variant to decide what to do: [`CloudError::InstanceNotFound`] means the
//! instance is truly gone, [`CloudError::Retry`] asks for a retry after a fixed delay, and
//! [`CloudError::ImplementedElsewhere`] tells the service controller another component owns the load
//! balancer. Anything else is a [`CloudError::Provider`] error carrying the provider's own message, or a
//! [`CloudError::Timeout`] when the controller manager gave up waiting for a call.

use std::time::Duration;

/// A boxed, thread-safe error, used for provider factories and wrapped provider errors.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The result type of every provider call.
pub type Result<T> = std::result::Result<T, CloudError>;

/// An error returned by a cloud provider.
///
/// ```
/// use std::time::Duration;
/// use cloud_provider::CloudError;
///
/// let err = CloudError::retry("rate limited", Duration::from_secs(3));
/// assert_eq!(err.retry_after(), Some(Duration::from_secs(3)));
/// assert_eq!(err.to_string(), "rate limited (retry after 3s)");
///
/// let err = CloudError::provider_with("describe instances", std::io::Error::other("boom"));
/// assert_eq!(err.to_string(), "describe instances: boom");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CloudError {
    /// The instance does not exist in the cloud (not merely stopped).
    #[error("instance not found")]
    InstanceNotFound,
    /// The provider does not implement this operation.
    #[error("unimplemented")]
    NotImplemented,
    /// Another component (not this controller manager) implements this operation.
    #[error("implemented by alternate to cloud provider")]
    ImplementedElsewhere,
    /// The volume does not exist in the cloud.
    #[error("disk is not found")]
    DiskNotFound,
    /// A transient condition: the caller should retry after exactly `after`.
    #[error("{message} (retry after {after:?})")]
    Retry {
        /// What happened.
        message: String,
        /// How long to wait before retrying.
        after: Duration,
    },
    /// A dry run refused this mutating call (see [`crate::MutationGate`]): nothing was changed, and what
    /// would follow from the call cannot be known.
    #[error("dry run: {operation} would change the cloud; not called")]
    WouldChange {
        /// The provider's name of the operation.
        operation: String,
    },
    /// The call did not answer within the controller manager's `--cloud-call-timeout` and was abandoned.
    /// Whether it took effect in the cloud is unknown: it says nothing about the object (never "not found"),
    /// and the object's sync is retried with backoff like after any other failure.
    #[error("cloud call {operation} timed out after {after:?}")]
    Timeout {
        /// The contract method that was called, e.g. `list_routes`.
        operation: String,
        /// How long the call was given.
        after: Duration,
    },
    /// Any other provider failure.
    #[error("{message}{}", source.as_ref().map(|s| format!(": {s}")).unwrap_or_default())]
    Provider {
        /// What the provider was doing or what went wrong.
        message: String,
        /// The underlying error, when there is one.
        #[source]
        source: Option<BoxError>,
    },
}

impl CloudError {
    /// A provider error with a message and no underlying cause.
    pub fn provider(message: impl Into<String>) -> Self {
        CloudError::Provider {
            message: message.into(),
            source: None,
        }
    }

    /// A provider error wrapping an underlying cause; `message` gives the context.
    pub fn provider_with(message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        CloudError::Provider {
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// A retryable error: the caller should try again after `after`.
    pub fn retry(message: impl Into<String>, after: Duration) -> Self {
        CloudError::Retry {
            message: message.into(),
            after,
        }
    }

    /// The requested retry delay, for [`CloudError::Retry`].
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            CloudError::Retry { after, .. } => Some(*after),
            _ => None,
        }
    }

    /// A [`CloudError::Timeout`]: `operation` did not answer within `after`.
    pub fn timeout(operation: impl Into<String>, after: Duration) -> Self {
        CloudError::Timeout {
            operation: operation.into(),
            after,
        }
    }

    /// True for [`CloudError::Timeout`].
    pub fn is_timeout(&self) -> bool {
        matches!(self, CloudError::Timeout { .. })
    }

    /// True for [`CloudError::InstanceNotFound`].
    pub fn is_instance_not_found(&self) -> bool {
        matches!(self, CloudError::InstanceNotFound)
    }

    /// True for [`CloudError::NotImplemented`].
    pub fn is_not_implemented(&self) -> bool {
        matches!(self, CloudError::NotImplemented)
    }

    /// True for [`CloudError::WouldChange`].
    pub fn is_would_change(&self) -> bool {
        matches!(self, CloudError::WouldChange { .. })
    }

    /// True for [`CloudError::ImplementedElsewhere`].
    pub fn is_implemented_elsewhere(&self) -> bool {
        matches!(self, CloudError::ImplementedElsewhere)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn messages_and_predicates() {
        assert_eq!(
            CloudError::InstanceNotFound.to_string(),
            "instance not found"
        );
        assert!(CloudError::InstanceNotFound.is_instance_not_found());
        assert!(CloudError::NotImplemented.is_not_implemented());
        assert!(CloudError::ImplementedElsewhere.is_implemented_elsewhere());
        let timeout = CloudError::timeout("list_routes", Duration::from_secs(30));
        assert_eq!(
            timeout.to_string(),
            "cloud call list_routes timed out after 30s"
        );
        assert!(timeout.is_timeout());
        assert!(!timeout.is_instance_not_found());
        assert_eq!(timeout.retry_after(), None, "retried with backoff");
        assert!(!CloudError::provider("x").is_timeout());
        assert_eq!(CloudError::provider("quota").to_string(), "quota");
        assert!(CloudError::provider("quota").source().is_none());
        let wrapped = CloudError::provider_with("call", std::io::Error::other("refused"));
        assert_eq!(wrapped.to_string(), "call: refused");
        assert_eq!(
            wrapped.source().map(|s| s.to_string()).as_deref(),
            Some("refused")
        );
        assert_eq!(CloudError::provider("x").retry_after(), None);
    }
}
