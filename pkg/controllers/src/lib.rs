//! The cloud-specific control loops of the cloud-controller-manager.
//!
//! - [`node`]: `cloud-node-controller` initializes nodes tainted `node.cloudprovider.kubernetes.io/uninitialized`
//!   from the cloud (provider ID, addresses, instance-type/zone/region labels), reconciles their labels and
//!   keeps their addresses current.
//! - [`node_lifecycle`]: `cloud-node-lifecycle-controller` deletes NotReady nodes whose instance is gone (with a
//!   guard against deleting too many at once) and taints shut-down ones.
//! - [`service`]: `service-lb-controller` manages cloud load balancers for `type: LoadBalancer` Services.
//! - [`route`]: `node-route-controller` creates cloud routes for the pod CIDRs of the nodes.
//! - [`pv_label`]: `pv-label-controller` labels PersistentVolumes backed by cloud volumes with zone and region.
//!
//! Each controller is one row of the controller table, [`descriptors::CONTROLLERS`]: names, whether `*`
//! includes it, the flag and provider capability it needs, how it starts, its health check and metrics
//! names. [`run_controllers`] starts the enabled ones over shared informers (one watch per resource type for the
//! whole process; nodes are kept as compact [`CachedNode`] copies), each with a health check and event
//! recorder of its own. Every cloud call of a controller runs under `--cloud-call-timeout`
//! ([`cloud_calls`], [`timed_cloud`]), and a hung or timed-out call shows in its health check.
//!
//! The controllers' settings ([`ControllerConfig`]) are types that hold only values the controllers honour
//! ([`config`]: periods, worker counts, cluster CIDRs, ...), validated once by the daemon at start-up;
//! [`config::defaults`] is the one place the defaults of their flags are written.

pub mod cached_node;
pub mod cloud_calls;
pub mod config;
pub mod context;
pub mod descriptors;
pub mod error;
pub mod events;
pub mod health;
pub mod identity;
pub mod informers;
pub mod metrics;
pub mod names;
pub mod node;
pub mod node_lifecycle;
pub mod panics;
pub mod provider_controllers;
pub mod pv_label;
pub mod route;
pub mod service;
pub mod tagging;
pub mod timed_cloud;
pub mod wire_node;
pub mod workqueue;
pub mod workqueue_metrics;

mod bulk_lookup;
mod run;
mod trim;

pub use cached_node::CachedNode;
pub use config::{
    CloudCallTimeout, CloudCallTimeoutError, ClusterCidrs, ClusterCidrsError, NonZeroDuration,
    Percent, Period, PeriodError,
};
pub use context::{ControllerConfig, ControllerContext, TaggingConfig};
pub use descriptors::{CONTROLLERS, Capability, ControllerDescriptor};
pub use error::ControllersError;
pub use events::{EventRecorder, EventType, object_ref};
pub use health::{HealthHandle, HealthRegistry};
pub use informers::{InformerEvent, InformerEvents, SharedInformers};
pub use metrics::ControllerMetrics;
pub use names::ControllerName;
pub use run::{run_controllers, run_with_provider_controllers};
