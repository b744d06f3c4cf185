//! An in-memory, controllable cloud for tests, the demo and end-to-end runs (`--cloud-provider=fake`).
//!
//! [`FakeCloud`] implements every capability of the provider contract: [`InstancesV2`](cloud_provider::InstancesV2)
//! (with single-call bulk lookups) and the v1 [`Instances`](cloud_provider::Instances),
//! [`Zones`](cloud_provider::Zones), [`LoadBalancer`](cloud_provider::LoadBalancer),
//! [`Routes`](cloud_provider::Routes), [`Clusters`](cloud_provider::Clusters) and
//! [`PvLabeler`](cloud_provider::PvLabeler).
//!
//! - Instances come from the cloud-config ([`FakeConfig`]) and, with `autoDiscover` (the default), from the
//!   nodes themselves: a node without an explicit instance is a running instance `fake://<node-name>` in a
//!   zone picked from its name by a stable hash, reporting the node's kubelet addresses. Terminated
//!   instances stay gone.
//! - Load balancers are keyed by the default load-balancer name of their Service; ingress IPs come from a
//!   CIDR pool (default `198.51.100.0/24`) and go back to it on delete. With `dataPath` they carry traffic:
//!   each listens on its ingress address and forwards to the nodes' node ports, with health checks, source
//!   ranges, ClientIP affinity, PROXY protocol and draining (the `data_path` module).
//! - Routes live in a table; a route whose target instance is gone is reported as a blackhole.
//! - The cloud-config can declare load balancers and routes that exist from the start, and
//!   [`FakeControl::cloud_config`] (admin API: `GET /config`) renders a running cloud in that format, so a
//!   second process can start from the state a first one left.
//! - Faults: per operation (or `*`) an error rate drawn from a seeded random stream, an error kind
//!   (provider error, retry after a delay, not found, a hang until the faults change) and a fixed latency;
//!   every call is counted.
//! - Control: [`FakeControl`] in-process, or the admin HTTP API ([`FakeCloud::serve_admin`], started by
//!   `initialize` when `adminAddress` is configured). See `providers/fake/README.md`.
//!
//! All state sits behind one mutex and every listing is sorted, so the cloud is thread-safe and deterministic.
//!
//! Modules depend one way only: `cloud` → `admin` → `control` → `shared` → `data_path` → `state` →
//! `service_annotations` → `config` → `faults`, `pool`, `latency` (a module uses only those to its right).
//!
//! ```
//! use cloud_provider::Registry;
//!
//! let mut registry = Registry::new();
//! provider_fake::register(&mut registry);
//! let cloud = registry.init("fake", Some(b"clusterID: demo")).unwrap();
//! assert_eq!(cloud.provider_name(), "fake");
//! assert!(cloud.has_cluster_id());
//! assert!(cloud.routes().is_some());
//! ```

mod admin;
mod cloud;
mod config;
mod control;
mod data_path;
mod faults;
mod latency;
mod pool;
mod service_annotations;
mod shared;
mod state;

use std::sync::Arc;

use cloud_provider::{CloudProvider, Registry, RegistryError};

pub use admin::{AdminError, FaultRequest, router as admin_router};
pub use cloud::{FakeCloud, TAGGED_LABEL, provider_id_of};
pub use config::{
    AddressConfig, ConfigError, DEFAULT_CLUSTER_NAME, DEFAULT_CSI_DRIVER, DEFAULT_DATA_PATH_CIDR,
    DEFAULT_LOAD_BALANCER_CIDR, DEFAULT_REGION, DataPathConfig, FakeConfig, InitialState,
    InstanceConfig, LoadBalancerConfig, LoadBalancerPortConfig, PROVIDER_NAME, ProxyProtocol,
    RouteConfig, VolumeConfig,
};
pub use control::FakeControl;
pub use data_path::{BackendStatus, BalancerStatus, Health};
pub use faults::{ALL_OPERATIONS, FaultKind, FaultSpec, NOT_FOUND_OPERATIONS, OPERATIONS};
pub use pool::{Cidr, IpPool, PoolError};
pub use service_annotations::{ANN_PROXY_PROTOCOL, ANN_SOURCE_RANGES};
pub use state::{
    CloudSnapshot, ControlError, InstanceRecord, LoadBalancerPort, LoadBalancerRecord, PowerState,
    RouteRecord,
};

/// Registers the fake cloud under the name `fake`, or fails if that name is taken.
pub fn try_register(registry: &mut Registry) -> Result<(), RegistryError> {
    registry.register_fn(PROVIDER_NAME, |config| {
        let cloud = FakeCloud::from_yaml(config.unwrap_or_default())?;
        Ok(Arc::new(cloud) as Arc<dyn CloudProvider>)
    })
}

/// Registers the fake cloud under the name `fake`.
///
/// # Panics
///
/// When a provider named `fake` is already registered: registering a name twice is a programming error
/// (use [`try_register`] to handle it).
pub fn register(registry: &mut Registry) {
    if let Err(e) = try_register(registry) {
        panic!("registering the fake cloud provider: {e}");
    }
}

#[cfg(test)]
mod tests;
