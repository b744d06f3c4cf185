//! Load balancers for `type: LoadBalancer` Services, and the default load-balancer name.

use k8s_openapi::api::core::v1::{LoadBalancerStatus, Node, Service};

use crate::Result;

/// Longest name [`default_load_balancer_name`] produces.
pub const MAX_LOAD_BALANCER_NAME_LEN: usize = 32;

/// Manages the cloud load balancers of LoadBalancer Services.
#[async_trait::async_trait]
pub trait LoadBalancer: Send + Sync {
    /// The current status of the Service's load balancer, or `None` when it does not exist.
    async fn get_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> Result<Option<LoadBalancerStatus>>;

    /// The cloud name of the Service's load balancer. Defaults to [`default_load_balancer_name`].
    fn get_load_balancer_name(&self, cluster_name: &str, service: &Service) -> String {
        let _ = cluster_name;
        default_load_balancer_name(service)
    }

    /// Creates the load balancer or brings it up to date with the Service and the node set; returns its status.
    /// May return [`CloudError::Retry`](crate::CloudError::Retry) or
    /// [`CloudError::ImplementedElsewhere`](crate::CloudError::ImplementedElsewhere).
    async fn ensure_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Node],
    ) -> Result<LoadBalancerStatus>;

    /// Updates only the hosts (backend nodes) of an existing load balancer.
    async fn update_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Node],
    ) -> Result<()>;

    /// Deletes the load balancer; succeeds when it does not exist.
    async fn ensure_load_balancer_deleted(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> Result<()>;
}

/// The default cloud name of a Service's load balancer: `"a"` followed by the Service UID without dashes,
/// at most [`MAX_LOAD_BALANCER_NAME_LEN`] characters.
///
/// ```
/// use cloud_provider::default_load_balancer_name;
/// use k8s_openapi::api::core::v1::Service;
///
/// let mut svc = Service::default();
/// svc.metadata.uid = Some("6f0c2b4e-1a2b-4c3d-9e8f-0123456789ab".into());
/// assert_eq!(default_load_balancer_name(&svc), "a6f0c2b4e1a2b4c3d9e8f0123456789a");
/// ```
pub fn default_load_balancer_name(service: &Service) -> String {
    let uid = service.metadata.uid.as_deref().unwrap_or_default();
    let mut name = String::with_capacity(MAX_LOAD_BALANCER_NAME_LEN);
    name.push('a');
    name.extend(
        uid.chars()
            .filter(|c| *c != '-')
            .take(MAX_LOAD_BALANCER_NAME_LEN - 1),
    );
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc(uid: Option<&str>) -> Service {
        let mut s = Service::default();
        s.metadata.uid = uid.map(str::to_string);
        s
    }

    #[test]
    fn default_name() {
        let name = default_load_balancer_name(&svc(Some("12345678-abcd-ef01-2345-6789abcdef01")));
        assert_eq!(name, "a12345678abcdef0123456789abcdef0");
        assert_eq!(name.len(), MAX_LOAD_BALANCER_NAME_LEN);
        assert!(!name.contains('-'));
        assert!(name.starts_with('a'));
        assert_eq!(default_load_balancer_name(&svc(Some("ab-cd"))), "aabcd");
        assert_eq!(default_load_balancer_name(&svc(None)), "a");
        assert_eq!(default_load_balancer_name(&svc(Some("---"))), "a");
    }
}
