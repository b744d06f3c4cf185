//! The DigitalOcean cloud provider (`--cloud-provider=digitalocean`).
//!
//! [`DigitalOceanCloud`] talks to the DigitalOcean v2 API and implements:
//! - [`InstancesV2`](cloud_provider::InstancesV2) for droplets ([`instances`]): provider IDs
//!   `digitalocean://<droplet id>`, addresses, size and region, existence and shutdown, with bulk lookups
//!   served from one cached droplet list ([`droplets`]).
//! - [`LoadBalancer`](cloud_provider::LoadBalancer) ([`load_balancers`]) configured by the
//!   `service.beta.kubernetes.io/do-loadbalancer-*` annotations ([`annotations`]), a drop-in replacement
//!   for the upstream DigitalOcean cloud-controller-manager's: the same request bodies ([`lb_spec`], over
//!   the same nodes, [`lb_nodes`]), sent only when the load balancer differs from them ([`lb_diff`]).
//! - [`PvLabeler`](cloud_provider::PvLabeler) for DigitalOcean block-storage volumes ([`volumes`]).
//! - Two controllers of its own, as upstream runs them: the public-access firewall ([`firewall`]) and the
//!   cluster tag on load balancers ([`tags`]).
//!
//! Beyond the upstream DigitalOcean cloud-controller-manager: a droplet cache so node checks cost O(1) API
//! calls per period, retries with backoff on 429 and 5xx honouring `Retry-After` / `RateLimit-Reset`,
//! `per_page=200` pagination, a client-side rate limit, API call metrics ([`metrics`]), `ipMode: Proxy`
//! for load balancers that terminate traffic, and no load-balancer write when nothing changed.
//!
//! Configuration: environment variables and/or a YAML `--cloud-config` file, see [`config`]. With the
//! `test-support` feature, [`stub`] is a stateful in-process stub of the DigitalOcean API.
//!
//! Module order, each using only modules after it: `instances`, `load_balancers`, `volumes`,
//! `annotation_table` → `cloud` → `firewall`, `tags` → `lb_spec` → `lb_nodes`, `lb_diff`, `droplets` → `annotations`,
//! `client` → `api`, `config`, `metrics`, `ratelimit`; `stub` uses `config` only (inside it: `handlers` →
//! `firewalls`, `tags` → `answer`).
//!
//! ```
//! use cloud_provider::Registry;
//!
//! let mut registry = Registry::new();
//! provider_digitalocean::register(&mut registry);
//! assert_eq!(registry.names(), vec!["digitalocean"]);
//! // Without DO_ACCESS_TOKEN in the environment the configuration is refused, naming what is missing.
//! let err = registry.init("digitalocean", Some(b"region: nyc3\n")).err().unwrap();
//! assert!(err.to_string().contains("DO_ACCESS_TOKEN"));
//! ```

pub mod admission;
pub mod annotation_table;
pub mod annotations;
pub mod api;
pub mod client;
pub mod cloud;
pub mod config;
pub mod droplets;
pub mod firewall;
pub mod instances;
pub mod lb_diff;
pub mod lb_nodes;
pub mod lb_spec;
pub mod load_balancers;
pub mod metrics;
pub mod ratelimit;
#[cfg(feature = "test-support")]
pub mod stub;
pub mod tags;
pub mod volumes;

use std::sync::Arc;

use cloud_provider::{CloudProvider, Registry, RegistryError};

pub use client::{ApiError, DoClient};
pub use cloud::DigitalOceanCloud;
pub use config::{AccessToken, ConfigError, DoConfig, LbType, PublicAccessFirewall, RetryPolicy};
pub use droplets::{PROVIDER_NAME, droplet_id_from_provider_id, provider_id_of};
pub use metrics::ApiMetrics;

/// Registers the DigitalOcean provider under the name `digitalocean`, with its `firewall-controller` and
/// `tags-controller`, or
/// fails if that name is taken.
pub fn try_register(registry: &mut Registry) -> Result<(), RegistryError> {
    registry.register_fn(PROVIDER_NAME, |config| {
        let cloud = DigitalOceanCloud::from_cloud_config(config)?;
        Ok(Arc::new(cloud) as Arc<dyn CloudProvider>)
    })?;
    registry.declare_controllers(
        PROVIDER_NAME,
        &[firewall::FIREWALL_CONTROLLER, tags::TAGS_CONTROLLER],
    );
    Ok(())
}

/// Registers the DigitalOcean provider under the name `digitalocean`.
///
/// # Panics
///
/// When a provider named `digitalocean` is already registered (a programming error; use
/// [`try_register`] to handle it).
pub fn register(registry: &mut Registry) {
    if let Err(e) = try_register(registry) {
        panic!("registering the DigitalOcean cloud provider: {e}");
    }
}
