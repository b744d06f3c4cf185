//! What is known to have no network topology (a region where DescribeInstanceTopology is unavailable, an
//! instance type, an instance), remembered for 24 hours as upstream remembers it ([`crate::topology`]).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// How long an answer that there is no topology is remembered (upstream's).
pub const UNSUPPORTED_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// Regions, instance types and instance IDs known to have no topology, each until its time is up.
#[derive(Debug, Default)]
pub(crate) struct NoTopology(Mutex<HashMap<String, Instant>>);

impl NoTopology {
    /// Whether `key` is known to have no topology now.
    pub(crate) fn contains(&self, key: &str, now: Instant) -> bool {
        self.0.lock().get(key).is_some_and(|until| *until > now)
    }

    pub(crate) fn insert(&self, key: &str, now: Instant) {
        let mut keys = self.0.lock();
        keys.retain(|_, until| *until > now);
        keys.insert(key.to_string(), now + UNSUPPORTED_TTL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembered_for_a_day() {
        let keys = NoTopology::default();
        let now = Instant::now();
        keys.insert("t3.micro", now);
        assert!(keys.contains("t3.micro", now));
        assert!(keys.contains("t3.micro", now + UNSUPPORTED_TTL - Duration::from_secs(1)));
        assert!(!keys.contains("t3.micro", now + UNSUPPORTED_TTL));
        assert!(!keys.contains("p5.48xlarge", now));
    }
}
