//! The cloud provider contract of the cloud-controller-manager.
//!
//! A cloud provider is a type implementing [`CloudProvider`]. Its capability accessors return the parts it
//! supports ([`LoadBalancer`], [`Instances`], [`InstancesV2`], [`Zones`], [`Clusters`], [`Routes`],
//! [`PvLabeler`], [`ResourceTagger`]); the controller manager starts only the controllers whose capabilities are present.
//! Providers are compiled in and selected at run time by name through a [`Registry`], whose factories
//! receive the bytes of the `--cloud-config` file.
//!
//! The crate also carries what providers and controllers share: the error type [`CloudError`], provider
//! IDs ([`ProviderId`]), the default load-balancer name ([`default_load_balancer_name`]), node-address
//! functions and the well-known taint, label and annotation names ([`well_known`]).
//!
//! # The Nodes providers are given
//!
//! The controllers keep a compact copy of every Node, and the `Node`s they hand to [`InstancesV2`] and
//! [`LoadBalancer`] calls are rebuilt from it. They carry the metadata (name, UID, resourceVersion, creation
//! and deletion timestamps, labels, annotations), the spec's provider ID, pod CIDRs and taints, the status
//! addresses, and the `Ready` and `NetworkUnavailable` conditions with their type and status. Node info,
//! capacity, images, volumes and the other conditions are not included; a provider that needs them reads the
//! Node from the API server.
//!
//! # Writing a provider
//!
//! ```
//! use std::sync::Arc;
//! use cloud_provider::{
//!     CloudError, CloudProvider, InstanceMetadata, InstancesV2, ProviderId, Registry, Result, Zone,
//!     Zones, node_addresses_of,
//! };
//! use k8s_openapi::api::core::v1::Node;
//!
//! /// A one-region cloud where every node is an instance named after the node.
//! struct TinyCloud {
//!     region: String,
//! }
//!
//! impl TinyCloud {
//!     fn instance_of(node: &Node) -> Result<String> {
//!         match node.spec.as_ref().and_then(|s| s.provider_id.as_deref()) {
//!             Some(id) => ProviderId::parse_for("tiny", id)
//!                 .map(|id| id.instance)
//!                 .map_err(|e| CloudError::provider_with("bad provider ID", e)),
//!             None => node.metadata.name.clone().ok_or(CloudError::InstanceNotFound),
//!         }
//!     }
//! }
//!
//! #[async_trait::async_trait]
//! impl InstancesV2 for TinyCloud {
//!     async fn instance_exists(&self, node: &Node) -> Result<bool> {
//!         Self::instance_of(node).map(|_| true)
//!     }
//!     async fn instance_shutdown(&self, _node: &Node) -> Result<bool> {
//!         Ok(false)
//!     }
//!     async fn instance_metadata(&self, node: &Node) -> Result<Option<InstanceMetadata>> {
//!         let instance = Self::instance_of(node)?;
//!         Ok(Some(InstanceMetadata {
//!             provider_id: ProviderId::new("tiny", instance).to_string(),
//!             instance_type: "small".into(),
//!             node_addresses: node_addresses_of(node).to_vec(),
//!             zone: format!("{}-a", self.region),
//!             region: self.region.clone(),
//!             additional_labels: Default::default(),
//!         }))
//!     }
//! }
//!
//! #[async_trait::async_trait]
//! impl Zones for TinyCloud {
//!     async fn get_zone(&self) -> Result<Zone> {
//!         Err(CloudError::NotImplemented)
//!     }
//!     async fn get_zone_by_provider_id(&self, _provider_id: &str) -> Result<Zone> {
//!         Ok(Zone { failure_domain: format!("{}-a", self.region), region: self.region.clone() })
//!     }
//!     async fn get_zone_by_node_name(&self, _node_name: &str) -> Result<Zone> {
//!         Ok(Zone { failure_domain: format!("{}-a", self.region), region: self.region.clone() })
//!     }
//! }
//!
//! impl CloudProvider for TinyCloud {
//!     fn provider_name(&self) -> &str {
//!         "tiny"
//!     }
//!     fn instances_v2(&self) -> Option<&dyn InstancesV2> {
//!         Some(self)
//!     }
//!     fn zones(&self) -> Option<&dyn Zones> {
//!         Some(self)
//!     }
//!     fn has_cluster_id(&self) -> bool {
//!         true
//!     }
//! }
//!
//! // Register it; the factory reads the region from the cloud-config bytes.
//! let mut registry = Registry::new();
//! registry
//!     .register_fn("tiny", |config| {
//!         let region = match config {
//!             Some(bytes) => std::str::from_utf8(bytes)?.trim().to_string(),
//!             None => "local".to_string(),
//!         };
//!         Ok(Arc::new(TinyCloud { region }) as Arc<dyn CloudProvider>)
//!     })
//!     .expect("first registration");
//!
//! let cloud = registry.init("tiny", Some(b"eu-1")).expect("provider builds");
//! assert_eq!(cloud.provider_name(), "tiny");
//! assert!(cloud.instances_v2().is_some());
//! assert!(cloud.load_balancer().is_none());
//! ```

pub mod admission;
pub mod annotations;
pub mod cloud;
pub mod cloud_config_yaml;
pub mod clusters;
pub mod controller;
pub mod dry_run;
pub mod error;
pub mod instances;
pub mod load_balancer;
pub mod node_address;
pub mod provider_id;
pub mod pv_labeler;
pub mod registry;
pub mod resource_tagger;
pub mod routes;
pub mod well_known;
pub mod zones;

pub use admission::{ServiceAdmission, Verdict};
pub use cloud::CloudProvider;
pub use clusters::Clusters;
pub use controller::{ControllerContext, ControllerInfo, ProviderController, ServiceWatch};
pub use dry_run::{
    ApiWrite, CloudCall, DryRunLog, DryRunRecords, MutationGate, ObjectKey, ObjectKind,
    REFUSED_BY_DRY_RUN, SyncFailure, current_object, for_object,
};
pub use error::{BoxError, CloudError, Result};
pub use instances::{InstanceMetadata, InstanceState, Instances, InstancesV2};
pub use load_balancer::{LoadBalancer, MAX_LOAD_BALANCER_NAME_LEN, default_load_balancer_name};
pub use node_address::{
    ADDRESS_EXTERNAL_DNS, ADDRESS_EXTERNAL_IP, ADDRESS_HOSTNAME, ADDRESS_INTERNAL_DNS,
    ADDRESS_INTERNAL_IP, addresses_of_type, dedup_addresses, first_address_of_type, has_address,
    has_address_of_type, is_ip_address_type, node_address, node_addresses_of, preferred_address,
};
pub use provider_id::{ProviderId, ProviderIdError};
pub use pv_labeler::PvLabeler;
pub use registry::{EXTERNAL_PROVIDER_NAME, ProviderFactory, Registry, RegistryError};
pub use resource_tagger::{ResourceTagger, TagOutcome};
pub use routes::{Route, Routes};
pub use well_known::*;
pub use zones::{Zone, Zones};

// Dependencies of the public API, re-exported so providers can name exactly the versions used here.
pub use async_trait::async_trait;
pub use k8s_openapi;
pub use kube;
pub use prometheus_client;
