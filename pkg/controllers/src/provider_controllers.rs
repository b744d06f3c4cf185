//! Running the controllers a provider contributes ([`cloud_provider::ProviderController`]) on the shared
//! informers: each gets the process' Service watch through a [`SharedServiceWatch`].

use std::sync::Arc;

use cloud_provider::{ControllerContext as ProviderControllerContext, DryRunLog, ServiceWatch};
use k8s_openapi::api::core::v1::Service;
use kube::runtime::reflector::Store;

use crate::informers::{InformerEvents, SharedInformers};

/// A provider controller's view of the shared Service informer.
pub struct SharedServiceWatch {
    informers: SharedInformers,
    store: Store<Service>,
    events: InformerEvents<Service>,
    synced: bool,
}

impl SharedServiceWatch {
    /// Subscribes to the Service informer; call before the informers start.
    pub fn new(informers: &SharedInformers) -> Self {
        SharedServiceWatch {
            informers: informers.clone(),
            store: informers.services(),
            events: informers.service_events(),
            synced: false,
        }
    }
}

#[async_trait::async_trait]
impl ServiceWatch for SharedServiceWatch {
    async fn changed(&mut self) -> bool {
        if !self.synced {
            if self.informers.wait_services_synced().await.is_err() {
                return false;
            }
            self.synced = true;
        } else if self.events.recv().await.is_none() {
            return false;
        }
        // Whatever else is queued is in the store already: one wake-up covers it.
        while self.events.try_recv().is_ok() {}
        true
    }

    fn services(&self) -> Vec<Arc<Service>> {
        self.store.state()
    }
}

/// The context a provider controller starts with.
pub fn provider_context(
    client: kube::Client,
    informers: &SharedInformers,
    dry_run: Option<DryRunLog>,
) -> ProviderControllerContext {
    ProviderControllerContext {
        client,
        services: Box::new(SharedServiceWatch::new(informers)),
        dry_run,
    }
}
