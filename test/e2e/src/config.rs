//! The suite's configuration, read from the environment.
//!
//! | variable            | meaning                                                                        |
//! |---------------------|--------------------------------------------------------------------------------|
//! | `E2E_KUBECONFIG`    | kubeconfig of the cluster to target; unset: an in-process API server and the CCM binary as a separate process |
//! | `E2E_MODE`          | `simulated` (create Nodes the way kubelets do) or `existing` (use the cluster's nodes) |
//! | `E2E_FAKE_ADMIN`    | base URL of the fake cloud's admin API (required with `E2E_KUBECONFIG`)          |
//! | `E2E_CCM_NAMESPACE` | namespace of the CCM's Lease and pods (default `kube-system`)                    |
//! | `E2E_CCM_KUBECONFIG`| with `E2E_KUBECONFIG`: the harness runs the CCM replicas itself, as separate processes authenticating with this kubeconfig (e.g. `hack/realkube`'s ServiceAccount of `deploy/base/rbac.yaml`) |
//! | `E2E_AUDIT_LOG`     | the target API server's audit log (JSON lines), for the RBAC and client-identity checks |
//! | `E2E_RBAC_MANIFEST` | the RBAC manifest the CCM's ServiceAccount is bound by (default `deploy/base/rbac.yaml`) |
//! | `E2E_RBAC_EXACT`    | `false`: that manifest may grant more than the CCM uses (someone else's role); default `true` |
//! | `E2E_CCM_ARGS`      | extra flags for the CCM replicas the harness runs, separated by spaces |
//!
//! Without `E2E_KUBECONFIG` the mode defaults to `simulated` (an empty API server has no nodes); with it,
//! to `existing`, unless the harness runs the CCM itself (`E2E_CCM_KUBECONFIG`): then `simulated`.

use std::path::PathBuf;

use crate::HarnessError;

/// Whether the suite creates its own Node objects or uses the cluster's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The harness plays the kubelets: it registers tainted Nodes with addresses, pod CIDRs and a Ready
    /// condition, and keeps them Ready with a heartbeat.
    Simulated,
    /// The cluster's real nodes (e.g. kind) are used; the harness only observes them.
    Existing,
}

impl Mode {
    /// Parses `simulated` or `existing`.
    pub fn parse(value: &str) -> Result<Mode, HarnessError> {
        match value.trim() {
            "simulated" => Ok(Mode::Simulated),
            "existing" => Ok(Mode::Existing),
            other => Err(HarnessError::Config(format!(
                "E2E_MODE={other:?} is not a mode; use `simulated` or `existing`"
            ))),
        }
    }

    /// The mode's name as `E2E_MODE` spells it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Mode::Simulated => "simulated",
            Mode::Existing => "existing",
        }
    }
}

/// Where the suite runs and against what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HarnessConfig {
    /// The target cluster's kubeconfig; `None` starts the local API server and CCM processes.
    pub kubeconfig: Option<PathBuf>,
    /// Simulated or existing nodes.
    pub mode: Mode,
    /// The fake cloud's admin API base URL (`http://127.0.0.1:10270`); `None` in local runs, where the
    /// harness configures it itself.
    pub fake_admin: Option<String>,
    /// Namespace of the CCM's leader-election Lease and (in a real cluster) its pods.
    pub ccm_namespace: String,
    /// The CCM's kubeconfig when the harness runs the CCM replicas against `kubeconfig`'s cluster.
    pub ccm_kubeconfig: Option<PathBuf>,
    /// The target API server's audit log.
    pub audit_log: Option<PathBuf>,
    /// The RBAC manifest the CCM's ServiceAccount is bound by; `None`: `deploy/base/rbac.yaml`.
    pub rbac_manifest: Option<PathBuf>,
    /// Whether that manifest must grant exactly what the CCM uses (false: at least).
    pub rbac_exact: bool,
    /// Extra flags for the CCM replicas the harness runs.
    pub ccm_args: Vec<String>,
}

impl HarnessConfig {
    /// Reads the configuration from the process environment.
    pub fn from_env() -> Result<HarnessConfig, HarnessError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads the configuration through `lookup` (the environment, or a map in tests). Empty values count
    /// as unset.
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<HarnessConfig, HarnessError> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let kubeconfig = get("E2E_KUBECONFIG").map(PathBuf::from);
        let ccm_kubeconfig = get("E2E_CCM_KUBECONFIG").map(PathBuf::from);
        let mode = match get("E2E_MODE") {
            Some(value) => Mode::parse(&value)?,
            None if kubeconfig.is_some() && ccm_kubeconfig.is_none() => Mode::Existing,
            None => Mode::Simulated,
        };
        let fake_admin = get("E2E_FAKE_ADMIN").map(|url| url.trim_end_matches('/').to_string());
        if ccm_kubeconfig.is_some() && kubeconfig.is_none() {
            return Err(HarnessError::Config(
                "E2E_CCM_KUBECONFIG needs E2E_KUBECONFIG: the CCM's credentials are for that cluster".into(),
            ));
        }
        if ccm_kubeconfig.is_some() && fake_admin.is_some() {
            return Err(HarnessError::Config(
                "E2E_CCM_KUBECONFIG and E2E_FAKE_ADMIN exclude each other: with the first the harness runs the \
                 CCM and its fake cloud itself"
                    .into(),
            ));
        }
        if kubeconfig.is_some() && ccm_kubeconfig.is_none() && fake_admin.is_none() {
            return Err(HarnessError::Config(
                "E2E_KUBECONFIG is set but E2E_FAKE_ADMIN is not: the suite needs the fake cloud's admin API \
                 (e.g. http://127.0.0.1:10270 through `kubectl port-forward`)"
                    .into(),
            ));
        }
        if kubeconfig.is_none() && mode == Mode::Existing {
            return Err(HarnessError::Config(
                "E2E_MODE=existing needs E2E_KUBECONFIG: the local API server has no nodes of its own".into(),
            ));
        }
        if let Some(url) = &fake_admin
            && !url.starts_with("http://")
        {
            return Err(HarnessError::Config(format!(
                "E2E_FAKE_ADMIN={url:?} must be an http:// URL"
            )));
        }
        Ok(HarnessConfig {
            kubeconfig,
            mode,
            fake_admin,
            ccm_namespace: get("E2E_CCM_NAMESPACE").unwrap_or_else(|| "kube-system".to_string()),
            ccm_kubeconfig,
            audit_log: get("E2E_AUDIT_LOG").map(PathBuf::from),
            rbac_manifest: get("E2E_RBAC_MANIFEST").map(PathBuf::from),
            rbac_exact: match get("E2E_RBAC_EXACT").as_deref().map(str::trim) {
                None | Some("true") => true,
                Some("false") => false,
                Some(other) => {
                    return Err(HarnessError::Config(format!(
                        "E2E_RBAC_EXACT={other:?}: use true or false"
                    )));
                }
            },
            ccm_args: get("E2E_CCM_ARGS")
                .map(|v| v.split_whitespace().map(str::to_string).collect())
                .unwrap_or_default(),
        })
    }

    /// True when the harness starts the API server and the CCM itself.
    pub fn is_local(&self) -> bool {
        self.kubeconfig.is_none()
    }

    /// True when the harness runs the CCM replicas itself (against its own API server or another one).
    pub fn runs_ccm(&self) -> bool {
        self.kubeconfig.is_none() || self.ccm_kubeconfig.is_some()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn config(vars: &[(&str, &str)]) -> Result<HarnessConfig, HarnessError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        HarnessConfig::from_lookup(|name| map.get(name).cloned())
    }

    #[test]
    fn defaults_to_a_local_simulated_run() {
        let c = config(&[]).unwrap();
        assert!(c.is_local());
        assert_eq!(c.mode, Mode::Simulated);
        assert_eq!(c.fake_admin, None);
        assert_eq!(c.ccm_namespace, "kube-system");
    }

    #[test]
    fn a_kubeconfig_means_existing_nodes_and_needs_the_admin_api() {
        let err = config(&[("E2E_KUBECONFIG", "/k")]).unwrap_err();
        assert!(err.to_string().contains("E2E_FAKE_ADMIN"), "{err}");
        let c = config(&[
            ("E2E_KUBECONFIG", "/k"),
            ("E2E_FAKE_ADMIN", "http://127.0.0.1:10270/"),
            ("E2E_CCM_NAMESPACE", "ccm"),
        ])
        .unwrap();
        assert_eq!(c.mode, Mode::Existing);
        assert_eq!(c.fake_admin.as_deref(), Some("http://127.0.0.1:10270"));
        assert_eq!(c.ccm_namespace, "ccm");
        assert!(!c.is_local());
    }

    #[test]
    fn bad_values_are_refused_with_the_variable_named() {
        let err = config(&[("E2E_MODE", "kind")]).unwrap_err();
        assert!(err.to_string().contains("E2E_MODE=\"kind\""), "{err}");
        let err = config(&[("E2E_MODE", "existing")]).unwrap_err();
        assert!(err.to_string().contains("needs E2E_KUBECONFIG"), "{err}");
        let err =
            config(&[("E2E_KUBECONFIG", "/k"), ("E2E_FAKE_ADMIN", "127.0.0.1:1")]).unwrap_err();
        assert!(err.to_string().contains("http:// URL"), "{err}");
        let c = config(&[
            ("E2E_KUBECONFIG", "/k"),
            ("E2E_FAKE_ADMIN", "http://a"),
            ("E2E_MODE", "simulated"),
        ])
        .unwrap();
        assert_eq!(c.mode, Mode::Simulated);
    }

    #[test]
    fn a_ccm_kubeconfig_means_the_harness_runs_the_ccm_on_that_cluster() {
        let c = config(&[
            ("E2E_KUBECONFIG", "/admin"),
            ("E2E_CCM_KUBECONFIG", "/ccm"),
            ("E2E_AUDIT_LOG", "/audit.log"),
        ])
        .unwrap();
        assert_eq!(c.mode, Mode::Simulated);
        assert!(!c.is_local());
        assert!(c.runs_ccm());
        assert_eq!(
            c.audit_log.as_deref(),
            Some(std::path::Path::new("/audit.log"))
        );
        let err = config(&[("E2E_CCM_KUBECONFIG", "/ccm")]).unwrap_err();
        assert!(err.to_string().contains("needs E2E_KUBECONFIG"), "{err}");
        let err = config(&[
            ("E2E_KUBECONFIG", "/admin"),
            ("E2E_CCM_KUBECONFIG", "/ccm"),
            ("E2E_FAKE_ADMIN", "http://a"),
        ])
        .unwrap_err();
        assert!(err.to_string().contains("exclude each other"), "{err}");
    }

    #[test]
    fn rbac_manifest_exactness_and_extra_ccm_flags() {
        let c = config(&[]).unwrap();
        assert!(c.rbac_exact && c.rbac_manifest.is_none() && c.ccm_args.is_empty());
        let c = config(&[
            ("E2E_RBAC_MANIFEST", "/upstream.yaml"),
            ("E2E_RBAC_EXACT", "false"),
            ("E2E_CCM_ARGS", " --a=1  --b "),
        ])
        .unwrap();
        assert!(!c.rbac_exact);
        assert_eq!(c.ccm_args, ["--a=1", "--b"]);
        assert!(config(&[("E2E_RBAC_EXACT", "maybe")]).is_err());
    }
}
