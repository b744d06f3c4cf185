//! Health checks: one named check per started controller, read by the serving side (`/healthz`, `/readyz`,
//! `/livez`).
//!
//! A check fails for either of two causes, kept apart so that one never clears the other: a failure set
//! through its [`HealthHandle`] (a controller that stopped, a worker that panicked), and the controller's
//! cloud calls ([`CloudCalls::health`]: a hung call, or a timeout no answered call has followed yet), which
//! is worked out each time the check is read. With both, the message has both, the handle's first.

use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::cloud_calls::CloudCalls;

/// One named check.
struct Check {
    name: String,
    /// What the check's handles set.
    failure: Mutex<Result<(), String>>,
    /// The cloud calls of the controller, once it has been built.
    cloud_calls: Mutex<Option<Arc<CloudCalls>>>,
}

impl Check {
    fn new(name: &str) -> Arc<Self> {
        Arc::new(Check {
            name: name.to_string(),
            failure: Mutex::new(Ok(())),
            cloud_calls: Mutex::new(None),
        })
    }

    /// Both causes, combined.
    fn result(&self) -> Result<(), String> {
        let failure = self.failure.lock().clone();
        let cloud = self
            .cloud_calls
            .lock()
            .as_ref()
            .map_or(Ok(()), |calls| calls.health());
        match (failure, cloud) {
            (Ok(()), Ok(())) => Ok(()),
            (Err(message), Ok(())) | (Ok(()), Err(message)) => Err(message),
            (Err(failure), Err(cloud)) => Err(format!("{failure}; {cloud}")),
        }
    }
}

/// A shared, cloneable set of named health checks in registration order.
#[derive(Clone, Default)]
pub struct HealthRegistry {
    checks: Arc<RwLock<Vec<Arc<Check>>>>,
}

impl std::fmt::Debug for HealthRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HealthRegistry")
            .field("checks", &self.checks())
            .finish()
    }
}

impl HealthRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// The check named `name`, added (healthy) at the end when there is none yet.
    fn check(&self, name: &str) -> Arc<Check> {
        if let Some(check) = self.checks.read().iter().find(|c| c.name == name) {
            return check.clone();
        }
        let mut checks = self.checks.write();
        if let Some(check) = checks.iter().find(|c| c.name == name) {
            return check.clone();
        }
        let check = Check::new(name);
        checks.push(check.clone());
        check
    }

    /// Adds a check named `name` that starts healthy and returns the handle that updates it. Registering a
    /// name twice returns a handle to the existing check with the failure set through handles reset (a
    /// restarted controller); what its cloud calls say is kept, as those calls may still be running.
    pub fn register(&self, name: &str) -> HealthHandle {
        let check = self.check(name);
        *check.failure.lock() = Ok(());
        HealthHandle { check }
    }

    /// The handle of the check named `name`, registering it (healthy) when it does not exist yet; unlike
    /// [`HealthRegistry::register`] an existing check keeps its state.
    pub fn handle(&self, name: &str) -> HealthHandle {
        HealthHandle {
            check: self.check(name),
        }
    }

    /// Makes the check named `name` (added, healthy, when it does not exist yet) also report `calls`
    /// (replacing the calls of an earlier build of the same controller).
    pub fn watch_cloud_calls(&self, name: &str, calls: Arc<CloudCalls>) {
        *self.check(name).cloud_calls.lock() = Some(calls);
    }

    /// Every check with its current result, in registration order.
    pub fn checks(&self) -> Vec<(String, Result<(), String>)> {
        self.checks
            .read()
            .iter()
            .map(|check| (check.name.clone(), check.result()))
            .collect()
    }

    /// True when every registered check passes (an empty registry is healthy).
    pub fn all_ok(&self) -> bool {
        self.checks
            .read()
            .iter()
            .all(|check| check.result().is_ok())
    }
}

/// Updates one named check of a [`HealthRegistry`].
#[derive(Clone)]
pub struct HealthHandle {
    check: Arc<Check>,
}

impl std::fmt::Debug for HealthHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HealthHandle")
            .field("name", &self.check.name)
            .field("result", &self.get())
            .finish()
    }
}

impl HealthHandle {
    /// The check's name.
    pub fn name(&self) -> &str {
        &self.check.name
    }

    /// Clears the failure set through handles (what the controller's cloud calls say is not touched).
    pub fn set_ok(&self) {
        *self.check.failure.lock() = Ok(());
    }

    /// Marks the check failed with a reason shown in verbose health output; it stays failed until
    /// [`HealthHandle::set_ok`] or a new registration, whatever the cloud calls do.
    pub fn set_failed(&self, message: impl Into<String>) {
        *self.check.failure.lock() = Err(message.into());
    }

    /// The current result: the failure set through handles and what the cloud calls say.
    pub fn get(&self) -> Result<(), String> {
        self.check.result()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_keep_registration_order_and_state() {
        let reg = HealthRegistry::new();
        assert!(reg.all_ok());
        let b = reg.register("b-controller");
        let a = reg.register("a-controller");
        b.set_failed("informer not synced");
        let checks = reg.checks();
        assert_eq!(
            checks[0],
            ("b-controller".into(), Err("informer not synced".into()))
        );
        assert_eq!(checks[1], ("a-controller".into(), Ok(())));
        assert!(!reg.all_ok());
        b.set_ok();
        assert!(reg.all_ok());
        a.set_failed("x");
        let again = reg.register("a-controller");
        assert_eq!(again.get(), Ok(()));
        assert_eq!(reg.checks().len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_panic_and_a_cloud_timeout_are_both_reported_and_cleared_apart() {
        let reg = HealthRegistry::new();
        let calls = Arc::new(CloudCalls::new(
            "service-lb-controller",
            std::time::Duration::from_millis(100),
            crate::metrics::ControllerMetrics::default(),
        ));
        // The controller is built (its calls watched) before it is registered, as run_controllers does.
        reg.watch_cloud_calls("service-lb-controller", calls.clone());
        let handle = reg.register("service-lb-controller");
        assert_eq!(reg.checks().len(), 1);
        handle.set_failed("a worker panicked while syncing default/web: boom");
        let timed_out = calls
            .run::<()>("ensure_load_balancer", std::future::pending())
            .await;
        assert!(timed_out.unwrap_err().is_timeout());
        let message = handle.get().unwrap_err();
        assert!(
            message.starts_with("a worker panicked while syncing default/web: boom; cloud call ensure_load_balancer timed out after 100ms"),
            "{message}"
        );
        // An answered call clears the timeout, not the panic.
        calls
            .run("get_load_balancer", async { Ok(()) })
            .await
            .unwrap();
        assert_eq!(
            reg.checks()[0].1,
            Err("a worker panicked while syncing default/web: boom".to_string())
        );
        // Clearing the panic leaves a new timeout reported.
        let _ = calls
            .run::<()>("ensure_load_balancer", std::future::pending())
            .await;
        handle.set_ok();
        let message = reg.checks()[0].1.clone().unwrap_err();
        assert!(
            message.starts_with("cloud call ensure_load_balancer timed out"),
            "{message}"
        );
        assert!(!reg.all_ok());
        calls
            .run("get_load_balancer", async { Ok(()) })
            .await
            .unwrap();
        assert!(reg.all_ok());
    }
}
