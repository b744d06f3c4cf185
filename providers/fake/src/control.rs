//! [`FakeControl`]: the in-process control surface of a `FakeCloud`, the same
//! operations the admin HTTP API offers.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use crate::config::{FakeConfig, InstanceConfig};
use crate::data_path::{BalancerStatus, DataPath};
use crate::faults::FaultSpec;
use crate::shared::Shared;
use crate::state::{CloudSnapshot, ControlError, InstanceRecord, LoadBalancerRecord, RouteRecord};

/// A cloneable handle controlling a fake cloud from the same process.
///
/// ```
/// use std::time::Duration;
/// use provider_fake::{FakeCloud, FaultKind, FaultSpec, InstanceConfig};
///
/// let cloud = FakeCloud::from_yaml(b"autoDiscover: false").unwrap();
/// let control = cloud.handle();
/// control.add_instance(InstanceConfig::named("node-a")).unwrap();
/// control.stop_instance("node-a").unwrap();
/// control.set_fault("ensure_load_balancer", FaultSpec::errors(0.5, FaultKind::Retry)).unwrap();
/// control.set_fault("*", FaultSpec::latency(Duration::from_millis(5))).unwrap();
/// assert_eq!(control.state().instances.len(), 1);
/// assert!(control.set_fault("no_such_call", FaultSpec::default()).is_err());
/// ```
#[derive(Debug, Clone)]
pub struct FakeControl {
    shared: Arc<Shared>,
}

impl FakeControl {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        FakeControl { shared }
    }

    /// Everything the cloud holds.
    pub fn state(&self) -> CloudSnapshot {
        self.shared.state.lock().snapshot(&self.shared.config)
    }

    /// Every live instance, by instance ID.
    pub fn instances(&self) -> Vec<InstanceRecord> {
        self.shared.state.lock().instances(&self.shared.config)
    }

    /// The live instance with this node name or instance ID.
    pub fn instance(&self, name_or_id: &str) -> Option<InstanceRecord> {
        self.shared
            .state
            .lock()
            .find(&self.shared.config, name_or_id)
    }

    /// Adds an instance (validated like the config's `instances` entries). Re-adding a terminated name
    /// brings it back.
    pub fn add_instance(&self, instance: InstanceConfig) -> Result<InstanceRecord, ControlError> {
        self.shared
            .state
            .lock()
            .add_instance(&self.shared.config, instance)
    }

    /// Shuts an instance down (it still exists). Idempotent.
    pub fn stop_instance(&self, name_or_id: &str) -> Result<InstanceRecord, ControlError> {
        self.shared
            .state
            .lock()
            .set_running(&self.shared.config, name_or_id, false)
    }

    /// Starts a stopped instance. Idempotent.
    pub fn start_instance(&self, name_or_id: &str) -> Result<InstanceRecord, ControlError> {
        self.shared
            .state
            .lock()
            .set_running(&self.shared.config, name_or_id, true)
    }

    /// Terminates an instance: it is gone, and auto-discovery will not bring it back.
    pub fn terminate_instance(&self, name_or_id: &str) -> Result<InstanceRecord, ControlError> {
        self.shared
            .state
            .lock()
            .terminate(&self.shared.config, name_or_id)
    }

    /// Sets the fault of an operation (or `*` for every operation without its own).
    pub fn set_fault(&self, operation: &str, fault: FaultSpec) -> Result<(), ControlError> {
        self.shared.state.lock().set_fault(operation, fault)
    }

    /// Removes the fault of one operation; returns whether there was one.
    pub fn clear_fault(&self, operation: &str) -> bool {
        self.shared.state.lock().clear_fault(operation)
    }

    /// Removes every fault.
    pub fn clear_faults(&self) {
        self.shared.state.lock().clear_faults();
    }

    /// The active faults, by operation.
    pub fn faults(&self) -> BTreeMap<String, FaultSpec> {
        self.shared.state.lock().faults()
    }

    /// Calls per operation since the start or the last [`FakeControl::reset_calls`].
    pub fn calls(&self) -> BTreeMap<String, u64> {
        self.shared.state.lock().calls()
    }

    /// Calls of one operation.
    pub fn call_count(&self, operation: &str) -> u64 {
        self.shared
            .state
            .lock()
            .calls()
            .get(operation)
            .copied()
            .unwrap_or(0)
    }

    /// Zeroes the call counters.
    pub fn reset_calls(&self) {
        self.shared.state.lock().reset_calls();
    }

    /// Every load balancer, by name.
    pub fn load_balancers(&self) -> Vec<LoadBalancerRecord> {
        self.shared.state.lock().load_balancers()
    }

    /// The data path of every running load balancer, by name (empty when `dataPath` is off).
    pub fn load_balancer_traffic(&self) -> Vec<BalancerStatus> {
        self.shared
            .data_path
            .as_ref()
            .map(DataPath::status)
            .unwrap_or_default()
    }

    /// Every route, by name.
    pub fn routes(&self) -> Vec<RouteRecord> {
        self.shared.state.lock().routes(&self.shared.config)
    }

    /// The cloud as a cloud-config: the configuration in effect with the current instances, load
    /// balancers, routes and faults. A cloud built from it (in another process, say) starts in this
    /// cloud's state; running auto-discovered instances are left out, as the new cloud discovers them again.
    pub fn cloud_config(&self) -> FakeConfig {
        self.shared.state.lock().cloud_config(&self.shared.config)
    }

    /// The admin API's address, once started.
    pub fn admin_address(&self) -> Option<SocketAddr> {
        *self.shared.admin.lock()
    }
}
