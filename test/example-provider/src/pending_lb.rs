//! `pending-lb-controller` (alias `pending-lb`): a controller of the provider's own, contributed through the
//! provider contract like DigitalOcean's firewall controller. The example cloud has no load balancers, so
//! a `type: LoadBalancer` Service never gets an address; this controller says so, with one warning per
//! such Service when it appears (read from the daemon's shared Service watch). It is off by default: run it
//! with `--controllers=*,pending-lb`.

use std::collections::BTreeSet;
use std::sync::Arc;

use cloud_provider::{
    ControllerContext, ControllerInfo, ObjectKey, ObjectKind, ProviderController, Result,
};
use k8s_openapi::api::core::v1::Service;
use tokio_util::sync::CancellationToken;

/// The controller's names; `*` in `--controllers` leaves it out.
pub const PENDING_LB_CONTROLLER: ControllerInfo =
    ControllerInfo::new("pending-lb-controller", "pending-lb").disabled_by_default();

/// Warns about Services of `type: LoadBalancer`, which the example cloud cannot serve.
#[derive(Debug, Default, Clone, Copy)]
pub struct PendingLbController;

/// `namespace/name` of every Service of `type: LoadBalancer` among `services`.
pub fn load_balancer_services(services: &[Arc<Service>]) -> BTreeSet<String> {
    services
        .iter()
        .filter(|s| s.spec.as_ref().and_then(|spec| spec.type_.as_deref()) == Some("LoadBalancer"))
        .map(|s| {
            format!(
                "{}/{}",
                s.metadata.namespace.as_deref().unwrap_or_default(),
                s.metadata.name.as_deref().unwrap_or_default()
            )
        })
        .collect()
}

#[async_trait::async_trait]
impl ProviderController for PendingLbController {
    fn info(&self) -> ControllerInfo {
        PENDING_LB_CONTROLLER
    }

    async fn run(&self, mut context: ControllerContext, shutdown: CancellationToken) -> Result<()> {
        let mut warned = BTreeSet::new();
        loop {
            let changed = tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                changed = context.services.changed() => changed,
            };
            if !changed {
                return Ok(());
            }
            let current = load_balancer_services(&context.services.services());
            for service in current.difference(&warned) {
                tracing::warn!(
                    controller = PENDING_LB_CONTROLLER.name,
                    %service,
                    "the example cloud has no load balancers: the Service stays pending"
                );
            }
            if let Some(log) = &context.dry_run {
                for service in &current {
                    log.visit(ObjectKey::new(ObjectKind::Service, service.clone()));
                }
                return Ok(());
            }
            warned = current;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ServiceSpec;

    fn service(name: &str, type_: &str) -> Arc<Service> {
        let mut service = Service::default();
        service.metadata.namespace = Some("default".to_string());
        service.metadata.name = Some(name.to_string());
        service.spec = Some(ServiceSpec {
            type_: Some(type_.to_string()),
            ..ServiceSpec::default()
        });
        Arc::new(service)
    }

    #[test]
    fn only_load_balancer_services_are_pending() {
        let services = [
            service("web", "LoadBalancer"),
            service("db", "ClusterIP"),
            Arc::new(Service::default()),
        ];
        assert_eq!(
            load_balancer_services(&services),
            BTreeSet::from(["default/web".to_string()])
        );
        const { assert!(!PENDING_LB_CONTROLLER.enabled_by_default) };
    }
}
