//! Health checks: one named check per started controller, read by the serving side (`/healthz`, `/readyz`,
//! `/livez`).

use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

type CheckState = Arc<Mutex<Result<(), String>>>;

/// A shared, cloneable set of named health checks in registration order.
#[derive(Clone, Default)]
pub struct HealthRegistry {
    checks: Arc<RwLock<Vec<(String, CheckState)>>>,
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

    /// Adds a check named `name` that starts healthy and returns the handle that updates it. Registering a
    /// name twice returns a handle to the existing check, reset to healthy (a restarted controller).
    pub fn register(&self, name: &str) -> HealthHandle {
        let mut checks = self.checks.write();
        if let Some((_, state)) = checks.iter().find(|(n, _)| n == name) {
            *state.lock() = Ok(());
            return HealthHandle {
                name: name.to_string(),
                state: state.clone(),
            };
        }
        let state: CheckState = Arc::new(Mutex::new(Ok(())));
        checks.push((name.to_string(), state.clone()));
        HealthHandle {
            name: name.to_string(),
            state,
        }
    }

    /// The handle of the check named `name`, registering it (healthy) when it does not exist yet; unlike
    /// [`HealthRegistry::register`] an existing check keeps its state.
    pub fn handle(&self, name: &str) -> HealthHandle {
        if let Some((_, state)) = self.checks.read().iter().find(|(n, _)| n == name) {
            return HealthHandle {
                name: name.to_string(),
                state: state.clone(),
            };
        }
        self.register(name)
    }

    /// Every check with its current result, in registration order.
    pub fn checks(&self) -> Vec<(String, Result<(), String>)> {
        self.checks
            .read()
            .iter()
            .map(|(name, state)| (name.clone(), state.lock().clone()))
            .collect()
    }

    /// True when every registered check passes (an empty registry is healthy).
    pub fn all_ok(&self) -> bool {
        self.checks.read().iter().all(|(_, s)| s.lock().is_ok())
    }
}

/// Updates one named check of a [`HealthRegistry`].
#[derive(Clone, Debug)]
pub struct HealthHandle {
    name: String,
    state: CheckState,
}

impl HealthHandle {
    /// The check's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Marks the check healthy.
    pub fn set_ok(&self) {
        *self.state.lock() = Ok(());
    }

    /// Marks the check failed with a reason shown in verbose health output.
    pub fn set_failed(&self, message: impl Into<String>) {
        *self.state.lock() = Err(message.into());
    }

    /// The current result.
    pub fn get(&self) -> Result<(), String> {
        self.state.lock().clone()
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
}
