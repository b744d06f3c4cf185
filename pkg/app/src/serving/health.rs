//! `/healthz`, `/livez` and `/readyz`, answered like Kubernetes components answer them.
//!
//! Checks: `ping` (always passes), `leaderElection` (fails when the leader stopped renewing), and one per
//! started controller (from the controllers' [`HealthRegistry`]). `/livez` has `ping` and
//! `leaderElection` only, so a stuck controller makes the process unready rather than restarted;
//! `/healthz` and `/readyz` have every check.
//!
//! Without `?verbose` a healthy endpoint answers `ok`; with it, or when a check fails, one line per check
//! (`[+]name ok` / `[-]name failed: reason withheld`) and a summary line. `?exclude=name` skips a check.
//! `/<endpoint>/<check>` runs a single check.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use cloud_controllers::HealthRegistry;
use parking_lot::Mutex;

use crate::leader::LeaderStatus;

/// Which endpoint is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `/healthz`.
    Healthz,
    /// `/livez`.
    Livez,
    /// `/readyz`.
    Readyz,
}

impl Endpoint {
    /// The endpoint's name without the slash.
    pub fn name(self) -> &'static str {
        match self {
            Endpoint::Healthz => "healthz",
            Endpoint::Livez => "livez",
            Endpoint::Readyz => "readyz",
        }
    }
}

/// The sources of the checks.
#[derive(Clone, Debug)]
pub struct HealthChecks {
    /// Per-controller checks.
    pub controllers: HealthRegistry,
    /// Leader election.
    pub leader: LeaderStatus,
    /// How often each check of each endpoint answered how, for `/metrics/slis`.
    counts: Arc<Mutex<CheckCounts>>,
}

/// Answers by (check, endpoint, `success`/`error`).
type CheckCounts = BTreeMap<(String, &'static str, &'static str), u64>;

/// A rendered answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthAnswer {
    /// 200 or 500 (404 for an unknown single check).
    pub status: u16,
    /// The text body.
    pub body: String,
}

impl HealthChecks {
    /// The checks of the controllers' registry and leader election.
    pub fn new(controllers: HealthRegistry, leader: LeaderStatus) -> Self {
        HealthChecks {
            controllers,
            leader,
            counts: Arc::default(),
        }
    }

    /// `/metrics/slis`, as upstream's components serve it: `kubernetes_healthcheck{name,type}` (1 when
    /// the check passes now, 0 when it fails) for every check of every endpoint, and
    /// `kubernetes_healthchecks_total{name,type,status}`, the checks' answers to requests so far.
    pub fn slis(&self) -> String {
        let mut out = String::from(
            "# HELP kubernetes_healthcheck [STABLE] This metric records the result of a single healthcheck.\n\
             # TYPE kubernetes_healthcheck gauge\n",
        );
        for endpoint in [Endpoint::Healthz, Endpoint::Livez, Endpoint::Readyz] {
            for (name, result) in self.run(endpoint) {
                let _ = writeln!(
                    out,
                    "kubernetes_healthcheck{{name=\"{name}\",type=\"{}\"}} {}",
                    endpoint.name(),
                    u8::from(result.is_ok())
                );
            }
        }
        out.push_str(
            "# HELP kubernetes_healthchecks_total [STABLE] This metric records the results of all healthcheck.\n\
             # TYPE kubernetes_healthchecks_total counter\n",
        );
        for ((name, kind, status), count) in self.counts.lock().iter() {
            let _ = writeln!(
                out,
                "kubernetes_healthchecks_total{{name=\"{name}\",status=\"{status}\",type=\"{kind}\"}} {count}"
            );
        }
        out
    }

    /// Forgets the answers counted so far (`DELETE /metrics/slis`).
    pub fn reset_slis(&self) {
        self.counts.lock().clear();
    }

    fn count(&self, endpoint: Endpoint, checks: &[(String, Result<(), String>)]) {
        let mut counts = self.counts.lock();
        for (name, result) in checks {
            let status = if result.is_ok() { "success" } else { "error" };
            *counts
                .entry((name.clone(), endpoint.name(), status))
                .or_default() += 1;
        }
    }

    /// Every check of `endpoint`, in order.
    pub fn run(&self, endpoint: Endpoint) -> Vec<(String, Result<(), String>)> {
        let mut checks = vec![
            ("ping".to_string(), Ok(())),
            ("leaderElection".to_string(), self.leader.check()),
        ];
        if endpoint != Endpoint::Livez {
            checks.extend(self.controllers.checks());
        }
        checks
    }

    /// The answer to `GET /<endpoint>` with the given `verbose` and `exclude` query values.
    pub fn answer(&self, endpoint: Endpoint, verbose: bool, exclude: &[String]) -> HealthAnswer {
        let checks: Vec<_> = self
            .run(endpoint)
            .into_iter()
            .filter(|(name, _)| !exclude.contains(name))
            .collect();
        self.count(endpoint, &checks);
        let failed = checks.iter().any(|(_, result)| result.is_err());
        for (name, result) in &checks {
            if let Err(reason) = result {
                tracing::info!(check = %name, endpoint = endpoint.name(), %reason, "health check failed");
            }
        }
        if !failed && !verbose {
            return HealthAnswer {
                status: 200,
                body: "ok".to_string(),
            };
        }
        let mut body = String::new();
        for (name, result) in &checks {
            match result {
                Ok(()) => body.push_str(&format!("[+]{name} ok\n")),
                Err(_) => body.push_str(&format!("[-]{name} failed: reason withheld\n")),
            }
        }
        for name in exclude {
            if !checks.iter().any(|(n, _)| n == name) {
                body.push_str(&format!(
                    "warn: some health checks cannot be excluded: no matches for \"{name}\"\n"
                ));
            }
        }
        if failed {
            body.push_str(&format!("{} check failed\n", endpoint.name()));
        } else {
            body.push_str(&format!("{} check passed\n", endpoint.name()));
        }
        HealthAnswer {
            status: if failed { 500 } else { 200 },
            body,
        }
    }

    /// The answer to `GET /<endpoint>/<check>`.
    pub fn answer_one(&self, endpoint: Endpoint, check: &str) -> HealthAnswer {
        match self
            .run(endpoint)
            .into_iter()
            .find(|(name, _)| name == check)
        {
            Some((_, Ok(()))) => HealthAnswer {
                status: 200,
                body: "ok".to_string(),
            },
            Some((_, Err(reason))) => HealthAnswer {
                status: 500,
                body: format!("internal server error: {reason}\n"),
            },
            None => HealthAnswer {
                status: 404,
                body: "404 page not found\n".to_string(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checks() -> (HealthChecks, HealthRegistry) {
        let registry = HealthRegistry::default();
        let checks = HealthChecks::new(registry.clone(), LeaderStatus::disabled());
        (checks, registry)
    }

    #[test]
    fn healthy_and_verbose() {
        let (checks, registry) = checks();
        let handle = registry.register("cloud-node-controller");
        handle.set_ok();
        assert_eq!(
            checks.answer(Endpoint::Healthz, false, &[]),
            HealthAnswer {
                status: 200,
                body: "ok".into()
            }
        );
        assert_eq!(
            checks.answer(Endpoint::Readyz, true, &[]).body,
            "[+]ping ok\n[+]leaderElection ok\n[+]cloud-node-controller ok\nreadyz check passed\n"
        );
        assert_eq!(
            checks.answer(Endpoint::Livez, true, &[]).body,
            "[+]ping ok\n[+]leaderElection ok\nlivez check passed\n"
        );
    }

    #[test]
    fn a_failing_controller() {
        let (checks, registry) = checks();
        registry.register("cloud-node-controller").set_ok();
        registry
            .register("service-lb-controller")
            .set_failed("worker stuck");
        let answer = checks.answer(Endpoint::Healthz, false, &[]);
        assert_eq!(answer.status, 500);
        assert_eq!(
            answer.body,
            "[+]ping ok\n[+]leaderElection ok\n[+]cloud-node-controller ok\n\
             [-]service-lb-controller failed: reason withheld\nhealthz check failed\n"
        );
        // Liveness does not depend on controllers.
        assert_eq!(checks.answer(Endpoint::Livez, false, &[]).status, 200);
        // Excluding the failing check makes the endpoint pass.
        let answer = checks.answer(
            Endpoint::Readyz,
            false,
            &["service-lb-controller".to_string()],
        );
        assert_eq!(answer.status, 200);
        let single = checks.answer_one(Endpoint::Readyz, "service-lb-controller");
        assert_eq!(single.status, 500);
        assert_eq!(single.body, "internal server error: worker stuck\n");
        assert_eq!(checks.answer_one(Endpoint::Readyz, "ping").status, 200);
        assert_eq!(checks.answer_one(Endpoint::Readyz, "nope").status, 404);
    }

    #[test]
    fn unknown_exclusions_are_reported() {
        let (checks, _) = checks();
        let answer = checks.answer(Endpoint::Healthz, true, &["nope".to_string()]);
        assert_eq!(answer.status, 200);
        assert!(
            answer
                .body
                .contains("warn: some health checks cannot be excluded: no matches for \"nope\"")
        );
    }

    #[test]
    fn slis_report_each_check_and_count_answers() {
        let (checks, registry) = checks();
        registry
            .register("service-lb-controller")
            .set_failed("boom");
        checks.answer(Endpoint::Healthz, false, &[]);
        checks.answer(Endpoint::Healthz, false, &[]);
        let text = checks.slis();
        assert!(
            text.contains("kubernetes_healthcheck{name=\"ping\",type=\"livez\"} 1"),
            "{text}"
        );
        assert!(
            text.contains(
                "kubernetes_healthcheck{name=\"service-lb-controller\",type=\"readyz\"} 0"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "kubernetes_healthchecks_total{name=\"service-lb-controller\",status=\"error\",type=\"healthz\"} 2"
            ),
            "{text}"
        );
        checks.reset_slis();
        assert!(!checks.slis().contains("kubernetes_healthchecks_total{"));
    }
}
