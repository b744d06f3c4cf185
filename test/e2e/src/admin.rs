//! A client of the fake cloud's admin HTTP API (see `providers/fake/README.md`): the suite's view into
//! the cloud and its remote control (stop, start and terminate instances; inject faults).

use http::Method;
use provider_fake::{
    BalancerStatus, CloudSnapshot, InstanceRecord, LoadBalancerRecord, RouteRecord,
};
use serde::de::DeserializeOwned;

use crate::HarnessError;
use crate::http::{HttpResponse, send};

/// The admin API at a base URL such as `http://127.0.0.1:10270`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeAdmin {
    base: String,
}

impl FakeAdmin {
    /// A client of the admin API at `base` (no trailing slash needed).
    pub fn new(base: impl Into<String>) -> FakeAdmin {
        let base = base.into();
        FakeAdmin {
            base: base.trim_end_matches('/').to_string(),
        }
    }

    /// The base URL.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<HttpResponse, HarnessError> {
        let url = format!("{}{path}", self.base);
        let response = send(method.clone(), &url, body, None).await?;
        if response.is_success() {
            Ok(response)
        } else {
            Err(HarnessError::Admin {
                what: format!("{method} {path}"),
                status: response.status,
                body: response.text(),
            })
        }
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, HarnessError> {
        let response = self.call(Method::GET, path, None).await?;
        serde_json::from_slice(&response.body).map_err(|e| HarnessError::Admin {
            what: format!("GET {path}"),
            status: response.status,
            body: format!("unexpected body ({e}): {}", response.text()),
        })
    }

    /// Everything the cloud holds.
    pub async fn state(&self) -> Result<CloudSnapshot, HarnessError> {
        self.get("/state").await
    }

    /// Every live instance.
    pub async fn instances(&self) -> Result<Vec<InstanceRecord>, HarnessError> {
        self.get("/instances").await
    }

    /// The live instance with this node name or ID; `None` when the cloud has none (404).
    pub async fn instance(&self, name: &str) -> Result<Option<InstanceRecord>, HarnessError> {
        match self.get(&format!("/instances/{name}")).await {
            Ok(instance) => Ok(Some(instance)),
            Err(HarnessError::Admin { status: 404, .. }) => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// The cloud as it is now, as a cloud-config a fake cloud can start from (`GET /config`, YAML).
    pub async fn cloud_config(&self) -> Result<String, HarnessError> {
        Ok(self.call(Method::GET, "/config", None).await?.text())
    }

    /// Every load balancer.
    pub async fn load_balancers(&self) -> Result<Vec<LoadBalancerRecord>, HarnessError> {
        self.get("/loadbalancers").await
    }

    /// The data path of every running load balancer (`dataPath` on): listeners, backends with their
    /// health and connection counts, refused and rejected clients.
    pub async fn load_balancer_traffic(&self) -> Result<Vec<BalancerStatus>, HarnessError> {
        self.get("/loadbalancers/traffic").await
    }

    /// The route table.
    pub async fn routes(&self) -> Result<Vec<RouteRecord>, HarnessError> {
        self.get("/routes").await
    }

    async fn instance_action(&self, name: &str, action: &str) -> Result<(), HarnessError> {
        self.call(Method::POST, &format!("/instances/{name}/{action}"), None)
            .await
            .map(|_| ())
    }

    /// Adds an instance (a name or ID that is in use is refused; a terminated one's may be used again).
    pub async fn add_instance(&self, instance: &serde_json::Value) -> Result<(), HarnessError> {
        self.call(Method::POST, "/instances", Some(instance))
            .await
            .map(|_| ())
    }

    /// Shuts an instance down (it still exists).
    pub async fn stop_instance(&self, name: &str) -> Result<(), HarnessError> {
        self.instance_action(name, "stop").await
    }

    /// Starts a stopped instance.
    pub async fn start_instance(&self, name: &str) -> Result<(), HarnessError> {
        self.instance_action(name, "start").await
    }

    /// Terminates an instance: it is gone for good.
    pub async fn terminate_instance(&self, name: &str) -> Result<(), HarnessError> {
        self.instance_action(name, "terminate").await
    }

    /// Makes a share (`error_rate`, 0 to 1) of the calls of `operation` fail with a provider error.
    pub async fn fail_operation(
        &self,
        operation: &str,
        error_rate: f64,
    ) -> Result<(), HarnessError> {
        let body = serde_json::json!({
            "operation": operation,
            "errorRate": error_rate,
            "kind": "provider",
        });
        self.call(Method::POST, "/faults", Some(&body))
            .await
            .map(|_| ())
    }

    /// Removes every injected fault.
    pub async fn clear_faults(&self) -> Result<(), HarnessError> {
        self.call(Method::DELETE, "/faults", None).await.map(|_| ())
    }
}
