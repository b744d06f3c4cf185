//! The data path of the fake cloud's load balancers (`dataPath` in the cloud-config): each load balancer
//! listens on its ingress address for each TCP and UDP port of its Service and forwards to the backends'
//! `NodeIP:NodePort`, as a cloud's L4 load balancer does, in this process, on the Tokio runtime.
//!
//! - Backends are health-checked on kube-proxy's health servers ([`health`]); only healthy ones get new
//!   connections, round robin, or the client's previous backend under `sessionAffinity: ClientIP`.
//! - `loadBalancerSourceRanges` (or Kubernetes' source-ranges annotation) admit clients by address.
//! - The fake's PROXY protocol annotation makes TCP connections start with a v1 or v2 header.
//! - A backend that leaves keeps its connections for `drainSeconds`; a load balancer deleted closes its
//!   listeners and connections and frees its address.
//! - Memory is bounded: two 16 KiB buffers per TCP connection, one 64 KiB buffer per UDP listener and
//!   flow, and at most `maxConnections` connections and flows per load balancer.
//!
//! Modules: `balancer` runs one load balancer with `tcp`, `udp` and `health`, which share its `traffic`
//! over `backends` (choice, health state and draining), `spec` (what a Service asks) and
//! `proxy_protocol` (the header).

mod backends;
mod balancer;
mod health;
mod interface;
mod proxy_protocol;
mod spec;
mod tcp;
mod traffic;
mod udp;

use std::collections::BTreeMap;
use std::net::IpAddr;

use cloud_provider::{CloudError, default_load_balancer_name};
use k8s_openapi::api::core::v1::{Node, Service};
use parking_lot::Mutex;

use crate::config::DataPathConfig;

pub use backends::{BackendStatus, Health};
use balancer::Balancer;
pub use balancer::BalancerStatus;
pub(crate) use spec::BalancerSpec;

/// A change of the running load balancers, as the cloud's load-balancer calls make them.
#[derive(Debug)]
pub(crate) enum Change {
    /// Run this spec ([`DataPath::apply`]).
    Apply(BalancerSpec),
    /// Give the Service's load balancer these nodes as backends ([`DataPath::update_backends`]).
    Backends(Service, Vec<Node>),
    /// Stop the Service's load balancer ([`DataPath::remove`]).
    Remove(Service),
}

/// The running load balancers, by cloud name.
#[derive(Debug)]
pub(crate) struct DataPath {
    config: DataPathConfig,
    balancers: Mutex<BTreeMap<String, Balancer>>,
    /// The addresses this process added to `dataPath.interface`, with the load balancer that holds each:
    /// only the holder removes one, so an address handed to another load balancer before the first let
    /// go of it stays.
    added: Mutex<BTreeMap<IpAddr, String>>,
}

impl DataPath {
    /// A data path with these settings and no load balancer yet.
    pub(crate) fn new(config: DataPathConfig) -> DataPath {
        DataPath {
            config,
            balancers: Mutex::new(BTreeMap::new()),
            added: Mutex::new(BTreeMap::new()),
        }
    }

    /// The data path of `service`'s load balancer on `address` to `nodes`.
    pub(crate) fn spec(
        &self,
        address: IpAddr,
        service: &Service,
        nodes: &[Node],
    ) -> Result<BalancerSpec, CloudError> {
        BalancerSpec::new(
            &self.config,
            &default_load_balancer_name(service),
            address,
            service,
            nodes,
        )
    }

    /// Whether the load balancer already runs exactly `spec`.
    pub(crate) fn is_current(&self, spec: &BalancerSpec) -> bool {
        self.balancers
            .lock()
            .get(&spec.name)
            .is_some_and(|b| b.spec() == spec)
    }

    /// Whether `nodes` are the backends of `service`'s load balancer already (or it does not run).
    pub(crate) fn has_backends(&self, service: &Service, nodes: &[Node]) -> bool {
        let name = default_load_balancer_name(service);
        self.balancers.lock().get(&name).is_none_or(|balancer| {
            spec::backends(nodes, balancer.spec().address) == balancer.spec().backends
        })
    }

    /// Makes `change`.
    pub(crate) async fn change(&self, change: Change) -> Result<(), CloudError> {
        match change {
            Change::Apply(spec) => self.apply(spec).await,
            Change::Backends(service, nodes) => self.update_backends(&service, &nodes).await,
            Change::Remove(service) => {
                self.remove(&service).await;
                Ok(())
            }
        }
    }

    /// Runs `spec`: starts the load balancer, or changes the running one (a new address replaces it).
    async fn apply(&self, spec: BalancerSpec) -> Result<(), CloudError> {
        let existing = self.balancers.lock().remove(&spec.name);
        let name = spec.name.clone();
        let balancer = match existing {
            Some(mut running) if running.spec().address == spec.address => {
                let result = running.apply(spec).await;
                self.balancers.lock().insert(name, running);
                return result;
            }
            Some(old) => {
                let old_address = old.spec().address;
                old.shutdown().await;
                self.release_address(old_address, &name).await;
                self.start(spec).await?
            }
            None => self.start(spec).await?,
        };
        self.balancers.lock().insert(name, balancer);
        Ok(())
    }

    /// Claims the address of `spec` and starts its load balancer; on failure the address is given back.
    async fn start(&self, spec: BalancerSpec) -> Result<Balancer, CloudError> {
        let (address, name) = (spec.address, spec.name.clone());
        self.claim_address(address, &name).await?;
        let started = Balancer::start(spec, &self.config).await;
        if started.is_err() {
            self.release_address(address, &name).await;
        }
        started
    }

    /// Gives the running load balancer of `service` these backends (nothing when it does not run: its next
    /// ensure starts it).
    async fn update_backends(&self, service: &Service, nodes: &[Node]) -> Result<(), CloudError> {
        let name = default_load_balancer_name(service);
        let current = self.balancers.lock().get(&name).map(|b| b.spec().clone());
        let Some(current) = current else {
            return Ok(());
        };
        let backends = spec::backends(nodes, current.address);
        self.apply(BalancerSpec {
            backends,
            ..current
        })
        .await
    }

    /// Stops the load balancer of `service` and returns once its listeners are closed, its connections
    /// told to close and its address freed.
    async fn remove(&self, service: &Service) {
        let name = default_load_balancer_name(service);
        let removed = self.balancers.lock().remove(&name);
        if let Some(balancer) = removed {
            let address = balancer.spec().address;
            balancer.shutdown().await;
            self.release_address(address, &name).await;
            tracing::info!(load_balancer = %name, %address, "fake data path: load balancer stopped");
        }
    }

    /// Every running load balancer's data path.
    pub(crate) fn status(&self) -> Vec<BalancerStatus> {
        self.balancers
            .lock()
            .values()
            .map(Balancer::status)
            .collect()
    }

    /// Adds `address` to the configured interface, if any, for the load balancer `holder`.
    async fn claim_address(&self, address: IpAddr, holder: &str) -> Result<(), CloudError> {
        let Some(name) = &self.config.interface else {
            return Ok(());
        };
        let added = interface::add(name, address).await.map_err(|e| {
            CloudError::provider(format!(
                "adding load-balancer address {address} to {name}: {e}"
            ))
        })?;
        let mut held = self.added.lock();
        if added || held.contains_key(&address) {
            held.insert(address, holder.to_string());
        }
        Ok(())
    }

    /// Removes `address` from the configured interface when this process added it and `holder` still
    /// holds it (a failure is logged: the address is free in the cloud either way).
    async fn release_address(&self, address: IpAddr, holder: &str) {
        let Some(name) = &self.config.interface else {
            return;
        };
        {
            let mut held = self.added.lock();
            if held.get(&address).map(String::as_str) != Some(holder) {
                return;
            }
            held.remove(&address);
        }
        if let Err(e) = interface::remove(name, address).await {
            tracing::warn!(%address, interface = %name, error = %e, "fake data path: removing the address failed");
        }
    }
}
