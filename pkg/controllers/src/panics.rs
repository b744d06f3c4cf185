//! Panic containment: a bug that panics while one object is synced must not silently stop a controller.
//!
//! [`PanicGuard::run`] runs one unit of a controller's work (one object's sync, one pass) and catches a panic in it:
//! the panic is logged with the controller and the object, counted in
//! `cloud_controllers_worker_panics_total{controller}`, and the controller's health check (`/healthz`,
//! `/readyz`) turns failed with the message, while the worker goes on with the next object. Upstream's
//! controllers crash the process instead; here the failure stays visible without taking every other
//! object down with it. The check stays failed until the process restarts: a panic is a bug to look at.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures::FutureExt;

use crate::context::ControllerContext;
use crate::health::HealthRegistry;
use crate::metrics::ControllerMetrics;
use crate::names::ControllerName;

/// Contains the panics of one controller's work; cheap to clone.
#[derive(Clone, Debug)]
pub struct PanicGuard {
    controller: ControllerName,
    metrics: ControllerMetrics,
    health: HealthRegistry,
}

impl PanicGuard {
    /// A guard reporting for `controller` through the context's metrics and health checks.
    pub fn new(ctx: &ControllerContext, controller: ControllerName) -> Self {
        PanicGuard {
            controller,
            metrics: ctx.metrics.clone(),
            health: ctx.health.clone(),
        }
    }

    /// Runs `work` for `object`; `None` when it panicked (the panic is then reported).
    pub async fn run<T>(&self, object: &str, work: impl Future<Output = T>) -> Option<T> {
        match AssertUnwindSafe(work).catch_unwind().await {
            Ok(value) => Some(value),
            Err(payload) => {
                let message = panic_message(payload.as_ref());
                let controller = self.controller;
                tracing::error!(%controller, object, panic = %message,
                    "a worker panicked; going on with the next object");
                self.metrics.worker_panic(controller.canonical());
                self.health
                    .handle(controller.canonical())
                    .set_failed(format!(
                        "a worker panicked while syncing {object}: {message}"
                    ));
                None
            }
        }
    }
}

/// The text of a panic payload (`panic!` with a string or a format), or a placeholder.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_of_both_payload_kinds() {
        let caught = std::panic::catch_unwind(|| panic!("plain")).unwrap_err();
        assert_eq!(panic_message(caught.as_ref()), "plain");
        let caught = std::panic::catch_unwind(|| panic!("formatted {}", 7)).unwrap_err();
        assert_eq!(panic_message(caught.as_ref()), "formatted 7");
    }
}
