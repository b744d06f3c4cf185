//! Fault injection: per-operation error rates, error kinds (hangs included) and latency, with deterministic
//! random streams.
//!
//! Each operation has its own random stream seeded from the cloud's seed and the operation name, so the
//! sequence of failures of one operation does not depend on how calls to other operations interleave.
//! A fault set for an operation replaces the `*` fault for that operation.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The operation names faults and call counters use: one per provider method, plus `*` for every one.
pub const OPERATIONS: &[&str] = &[
    // InstancesV2
    "instance_exists",
    "instance_shutdown",
    "instance_metadata",
    "instance_metadata_bulk",
    "instance_states",
    // Instances (v1)
    "node_addresses",
    "node_addresses_by_provider_id",
    "instance_id",
    "instance_type",
    "instance_type_by_provider_id",
    "current_node_name",
    "instance_exists_by_provider_id",
    "instance_shutdown_by_provider_id",
    // Zones
    "get_zone",
    "get_zone_by_provider_id",
    "get_zone_by_node_name",
    // LoadBalancer
    "get_load_balancer",
    "ensure_load_balancer",
    "update_load_balancer",
    "ensure_load_balancer_deleted",
    // Routes
    "list_routes",
    "create_route",
    "delete_route",
    // Clusters
    "list_clusters",
    "master",
    // PvLabeler
    "get_labels_for_volume",
    // ResourceTagger
    "tag_nodes",
    "untag_nodes",
];

/// The wildcard operation name.
pub const ALL_OPERATIONS: &str = "*";

/// Operations for which a `notFound` fault has a meaning (the instance, load balancer or disk is reported
/// missing). With `*`, other operations fail with a provider error instead.
pub const NOT_FOUND_OPERATIONS: &[&str] = &[
    "instance_exists",
    "instance_shutdown",
    "instance_metadata",
    "instance_metadata_bulk",
    "instance_states",
    "node_addresses",
    "node_addresses_by_provider_id",
    "instance_id",
    "instance_type",
    "instance_type_by_provider_id",
    "instance_exists_by_provider_id",
    "instance_shutdown_by_provider_id",
    "get_zone_by_provider_id",
    "get_zone_by_node_name",
    "get_load_balancer",
    "get_labels_for_volume",
    "tag_nodes",
];

/// What an injected error looks like.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FaultKind {
    /// A provider error (`CloudError::Provider`).
    #[default]
    Provider,
    /// A retryable error (`CloudError::Retry`) asking for a retry after `retryAfterMs`.
    Retry,
    /// The object is reported missing: instances do not exist (`instance_exists` answers false,
    /// lookups fail with `InstanceNotFound`), `get_load_balancer` answers none, volumes fail with
    /// `DiskNotFound`.
    NotFound,
    /// The call does not answer (a dead connection): it waits until the faults are next changed (set or
    /// cleared, for any operation), then fails with a provider error. Only a caller's timeout frees it
    /// sooner.
    Hang,
}

/// A fault for one operation (or `*`).
///
/// ```
/// use std::time::Duration;
/// use provider_fake::{FaultKind, FaultSpec};
///
/// let f = FaultSpec::errors(0.3, FaultKind::Retry).with_latency(Duration::from_millis(20));
/// assert_eq!(f.latency_ms, 20);
/// let json = serde_json::to_string(&f).unwrap();
/// assert_eq!(json, r#"{"errorRate":0.3,"kind":"retry","retryAfterMs":1000,"latencyMs":20}"#);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FaultSpec {
    /// Share of calls that fail, 0.0 to 1.0.
    #[serde(default)]
    pub error_rate: f64,
    /// The error returned by failing calls.
    #[serde(default)]
    pub kind: FaultKind,
    /// The delay `Retry` errors ask for, in milliseconds (default 1000).
    #[serde(default = "default_retry_after_ms")]
    pub retry_after_ms: u64,
    /// Added to every call, in milliseconds, before it succeeds or fails.
    #[serde(default)]
    pub latency_ms: u64,
    /// When set, the fault applies to this many more calls of the operation only, then is lifted (e.g. a
    /// just-launched instance the cloud does not list for one call).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls: Option<u64>,
}

fn default_retry_after_ms() -> u64 {
    1000
}

impl Default for FaultSpec {
    fn default() -> Self {
        FaultSpec {
            error_rate: 0.0,
            kind: FaultKind::Provider,
            retry_after_ms: default_retry_after_ms(),
            latency_ms: 0,
            calls: None,
        }
    }
}

impl FaultSpec {
    /// Fails `rate` of the calls with `kind`.
    pub fn errors(rate: f64, kind: FaultKind) -> Self {
        FaultSpec {
            error_rate: rate,
            kind,
            ..Default::default()
        }
    }

    /// The fault for the next `calls` calls only.
    pub fn for_calls(mut self, calls: u64) -> Self {
        self.calls = Some(calls);
        self
    }

    /// Only latency, no errors.
    pub fn latency(latency: Duration) -> Self {
        FaultSpec::default().with_latency(latency)
    }

    /// Sets the latency.
    pub fn with_latency(mut self, latency: Duration) -> Self {
        self.latency_ms = u64::try_from(latency.as_millis()).unwrap_or(u64::MAX);
        self
    }

    /// Sets the delay `Retry` errors ask for.
    pub fn with_retry_after(mut self, after: Duration) -> Self {
        self.retry_after_ms = u64::try_from(after.as_millis()).unwrap_or(u64::MAX);
        self
    }
}

/// Checks an operation name and its fault; the error says what is wrong.
pub fn validate_fault(operation: &str, spec: &FaultSpec) -> Result<(), String> {
    if operation != ALL_OPERATIONS && !OPERATIONS.contains(&operation) {
        return Err(format!(
            "unknown operation {operation:?} (known: *, {})",
            OPERATIONS.join(", ")
        ));
    }
    if !(0.0..=1.0).contains(&spec.error_rate) || spec.error_rate.is_nan() {
        return Err(format!(
            "errorRate must be between 0 and 1, got {}",
            spec.error_rate
        ));
    }
    if spec.kind == FaultKind::NotFound
        && operation != ALL_OPERATIONS
        && !NOT_FOUND_OPERATIONS.contains(&operation)
    {
        return Err(format!(
            "kind notFound has no meaning for {operation:?} (allowed for: {})",
            NOT_FOUND_OPERATIONS.join(", ")
        ));
    }
    if spec.latency_ms > 600_000 {
        return Err(format!(
            "latencyMs must be at most 600000, got {}",
            spec.latency_ms
        ));
    }
    Ok(())
}

/// A small, fast, deterministic random generator (SplitMix64).
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub(crate) fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A stable 64-bit hash (FNV-1a), the same on every platform and run.
pub(crate) fn stable_hash(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation() {
        assert!(validate_fault("*", &FaultSpec::errors(1.0, FaultKind::NotFound)).is_ok());
        assert!(validate_fault("create_route", &FaultSpec::errors(0.0, FaultKind::Retry)).is_ok());
        let e = validate_fault("nope", &FaultSpec::default()).unwrap_err();
        assert!(e.starts_with("unknown operation \"nope\""), "{e}");
        let e =
            validate_fault("master", &FaultSpec::errors(-0.1, FaultKind::Provider)).unwrap_err();
        assert!(e.contains("errorRate"), "{e}");
        assert!(
            validate_fault("master", &FaultSpec::errors(f64::NAN, FaultKind::Provider)).is_err()
        );
        let e = validate_fault("create_route", &FaultSpec::errors(0.5, FaultKind::NotFound))
            .unwrap_err();
        assert!(e.contains("notFound has no meaning"), "{e}");
        let f = FaultSpec {
            latency_ms: 600_001,
            ..Default::default()
        };
        assert!(validate_fault("master", &f).is_err());
    }

    #[test]
    fn rng_is_deterministic_and_uniform() {
        let mut a = Rng::new(42);
        let mut b = Rng::new(42);
        let xs: Vec<f64> = (0..1000).map(|_| a.next_f64()).collect();
        let ys: Vec<f64> = (0..1000).map(|_| b.next_f64()).collect();
        assert_eq!(xs, ys);
        assert!(xs.iter().all(|x| (0.0..1.0).contains(x)));
        let below_half = xs.iter().filter(|x| **x < 0.5).count();
        assert!((450..550).contains(&below_half), "{below_half}");
        assert_ne!(Rng::new(1).next_u64(), Rng::new(2).next_u64());
    }

    #[test]
    fn hash_is_stable() {
        assert_eq!(stable_hash(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(stable_hash("a"), 0xaf63_dc4c_8601_ec8c);
        assert_ne!(stable_hash("node-1"), stable_hash("node-2"));
    }

    #[test]
    fn spec_json_shape() {
        let f: FaultSpec = serde_json::from_str(r#"{"errorRate":1,"kind":"hang"}"#).unwrap();
        assert_eq!(f.kind, FaultKind::Hang);
        assert!(validate_fault("list_routes", &f).is_ok());
        let f: FaultSpec = serde_json::from_str(r#"{"errorRate":0.25,"kind":"notFound"}"#).unwrap();
        assert_eq!(f.error_rate, 0.25);
        assert_eq!(f.kind, FaultKind::NotFound);
        assert_eq!(f.retry_after_ms, 1000);
        assert!(serde_json::from_str::<FaultSpec>(r#"{"rate":1}"#).is_err());
    }
}
