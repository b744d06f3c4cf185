//! Admission of LoadBalancer Services: the checks a provider makes of a Service before the API server stores
//! it, served by the controller manager's `lb-service` webhook (`--webhooks`).
//!
//! The controller manager hands a provider only the Services it would manage: `type: LoadBalancer`, without
//! `spec.loadBalancerClass`, not being deleted. A provider checks them with the parsers its load balancers
//! use, so a refusal carries the message the service controller's `SyncLoadBalancerFailed` event would
//! carry. A provider that cannot reach a verdict (its cloud does not answer) admits the Service with a
//! warning: the webhook must never be what stops a cluster.

use k8s_openapi::api::core::v1::Service;

/// The answer to one admission request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The Service may be stored; the warnings are shown to the client (`kubectl` prints them).
    Allowed {
        /// Warnings for the client, e.g. that a check could not be made.
        warnings: Vec<String>,
    },
    /// The Service is refused with this message.
    Denied {
        /// Why: the error the service controller would report.
        message: String,
    },
}

impl Verdict {
    /// Admitted without warnings.
    pub fn allowed() -> Self {
        Verdict::Allowed {
            warnings: Vec::new(),
        }
    }

    /// Admitted with one warning.
    pub fn allowed_with_warning(warning: impl Into<String>) -> Self {
        Verdict::Allowed {
            warnings: vec![warning.into()],
        }
    }

    /// Refused with `message`.
    pub fn denied(message: impl Into<String>) -> Self {
        Verdict::Denied {
            message: message.into(),
        }
    }

    /// A verdict from a check's result: an error refuses with its text.
    pub fn from_check<E: std::fmt::Display>(result: std::result::Result<(), E>) -> Self {
        match result {
            Ok(()) => Verdict::allowed(),
            Err(err) => Verdict::denied(err.to_string()),
        }
    }

    /// Whether the Service may be stored.
    pub fn is_allowed(&self) -> bool {
        matches!(self, Verdict::Allowed { .. })
    }
}

/// Checks of LoadBalancer Services at admission.
#[async_trait::async_trait]
pub trait ServiceAdmission: Send + Sync {
    /// Checks a Service being created (`old` is `None`) or updated. Called only for Services the
    /// controller manager would manage (see the [module docs](self)); the caller bounds the time it takes.
    async fn admit_service(
        &self,
        cluster_name: &str,
        service: &Service,
        old: Option<&Service>,
    ) -> Verdict;
}
