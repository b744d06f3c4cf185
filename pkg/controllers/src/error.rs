//! The error type of the controllers.

/// Errors that stop a controller or the controller set.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ControllersError {
    /// A Kubernetes API call failed.
    #[error("{context}: {source}")]
    Kube {
        /// What was being done.
        context: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// A cloud provider call failed.
    #[error("{context}: {source}")]
    Cloud {
        /// What was being done.
        context: String,
        /// The provider error.
        #[source]
        source: cloud_provider::CloudError,
    },
    /// The configuration does not allow the controller to run.
    #[error("invalid controller configuration: {0}")]
    Config(String),
    /// An informer's store never became ready (its watch task ended first).
    #[error("informer for {resource} stopped before its first list completed")]
    InformerStopped {
        /// The resource type, e.g. `nodes`.
        resource: &'static str,
    },
    /// A controller failed or panicked.
    #[error("controller {name} failed: {message}")]
    Controller {
        /// The controller's canonical name.
        name: String,
        /// Why.
        message: String,
    },
}

impl ControllersError {
    /// Wraps a Kubernetes client error with context.
    pub fn kube(context: impl Into<String>, source: kube::Error) -> Self {
        ControllersError::Kube {
            context: context.into(),
            source,
        }
    }

    /// Wraps a cloud provider error with context.
    pub fn cloud(context: impl Into<String>, source: cloud_provider::CloudError) -> Self {
        ControllersError::Cloud {
            context: context.into(),
            source,
        }
    }
}
