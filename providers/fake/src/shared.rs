//! [`Shared`]: the one cloud behind a `FakeCloud`, its clones and its `FakeControl` handles (the configuration,
//! the state behind its mutex, the admin API's address, the mutation gate and the load balancers' data path).

use std::net::SocketAddr;

use cloud_provider::MutationGate;
use parking_lot::Mutex;

use crate::config::FakeConfig;
use crate::data_path::DataPath;
use crate::state::State;

/// What a `FakeCloud` and its `FakeControl` handles share.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The validated configuration, with the zones resolved.
    pub(crate) config: FakeConfig,
    /// The mutable state; never held across an await.
    pub(crate) state: Mutex<State>,
    /// The admin API's bound address, once started.
    pub(crate) admin: Mutex<Option<SocketAddr>>,
    /// The gate of the mutating operations (`FakeCloud::gate_mutation`).
    pub(crate) mutations: MutationGate,
    /// The running load balancers, when `dataPath` is on.
    pub(crate) data_path: Option<DataPath>,
}
