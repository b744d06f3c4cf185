//! An in-memory Kubernetes API server that speaks the real protocol, for tests, demos and benchmarks.
//!
//! It serves the resources a cloud-controller-manager touches (core/v1 nodes, services, pods,
//! persistentvolumes, namespaces, events, configmaps and serviceaccounts with their `token`
//! subresource; events.k8s.io/v1 events; coordination.k8s.io/v1 leases; TokenReview and
//! SubjectAccessReview) over HTTPS (or plain HTTP) with HTTP/1.1 and
//! HTTP/2, with the semantics of a real kube-apiserver: resourceVersions and optimistic
//! concurrency, watches with bookmarks and 410 Expired, finalizers, status subresources, JSON /
//! merge / strategic-merge patches, selectors, paging, Service defaulting and `Status` error
//! bodies. It also serves what `kubectl` needs to work with its defaults: the OpenAPI v2 and v3
//! documents, server-side printing (Table) and server-side field validation. [`Controls`] inject
//! faults and latency, close watches, compact the history and expose request counters and a
//! request log.
//!
//! Module order, each using only modules after it: `server` → `http` → `watch` → `api`, `controls` →
//! `state` → `fields`, `openapi`, `store` → `strategy`, `table` → `events`, `pod`, `selector`, `service` →
//! `auth`, `controls_state`, `object`, `tls`, `validation` → `discovery`, `error` → `resources`, `patch`,
//! `rng`, `kubectl_table`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use k8s_openapi::api::core::v1::Node;
//! use kube::Api;
//!
//! let server = test_apiserver::TestApiServer::builder().start().await?;
//! let client = server.client()?;
//! let nodes: Api<Node> = Api::all(client);
//! let list = nodes.list(&Default::default()).await?;
//! assert!(list.items.is_empty());
//! println!("kubeconfig at {}", server.kubeconfig_path().display());
//! server.shutdown().await;
//! # Ok(())
//! # }
//! ```

mod api;
mod auth;
mod controls;
mod controls_state;
mod discovery;
mod error;
mod events;
mod fields;
mod http;
pub mod kubectl_table;
mod object;
mod openapi;
pub mod patch;
mod pod;
mod resources;
mod rng;
mod selector;
mod server;
mod service;
mod state;
mod store;
mod strategy;
mod table;
mod tls;
mod validation;
mod watch;

pub use auth::{AccessRule, DEFAULT_AUDIENCE, UserInfo};
pub use controls::Controls;
pub use controls_state::{FaultId, FaultMode, FaultRule, LatencyRule, RequestKey, RequestRecord};
pub use discovery::KUBERNETES_VERSION;
pub use error::Error;
pub use server::{Builder, TestApiServer};
