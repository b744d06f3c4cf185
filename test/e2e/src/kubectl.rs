//! The real `kubectl`, run as an operator runs it against the cluster under test: `KUBECTL`, else the first
//! `kubectl` on `PATH`, else the one `make realkube` builds (`target/realkube/bin/kubectl`). Each instance
//! has a discovery cache of its own, so runs against different clusters never share one.

use std::path::{Path, PathBuf};

pub use test_apiserver::kubectl_table::Table;

use crate::HarnessError;
use crate::ccm::workspace_root;

/// Where `make realkube` puts its kubectl, relative to the workspace root.
pub const REALKUBE_KUBECTL: &str = "target/realkube/bin/kubectl";

/// Finds the kubectl binary; a missing one is an error that says how to get it.
pub fn locate() -> Result<PathBuf, HarnessError> {
    if let Some(path) = std::env::var_os("KUBECTL").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(HarnessError::Config(format!(
                "KUBECTL={} is not a file: point it at a kubectl binary",
                path.display()
            )))
        };
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("kubectl"))
            .find(|candidate| candidate.is_file())
    });
    if let Some(path) = on_path {
        return Ok(path);
    }
    let built = workspace_root().join(REALKUBE_KUBECTL);
    if built.is_file() {
        return Ok(built);
    }
    Err(HarnessError::Config(format!(
        "kubectl is not installed: install kubectl (v1.32 or newer) on PATH, set KUBECTL=/path/to/kubectl, \
         or run `make realkube` to build {REALKUBE_KUBECTL}"
    )))
}

/// kubectl with a kubeconfig and a cache directory of its own.
#[derive(Debug)]
pub struct Kubectl {
    binary: PathBuf,
    kubeconfig: PathBuf,
    dir: tempfile::TempDir,
}

impl Kubectl {
    /// kubectl for the cluster of `kubeconfig`.
    pub fn new(kubeconfig: &Path) -> Result<Kubectl, HarnessError> {
        let dir = tempfile::Builder::new()
            .prefix("ccm-e2e-kubectl-")
            .tempdir()
            .map_err(|source| HarnessError::Io {
                what: "creating kubectl's cache directory".into(),
                source,
            })?;
        Ok(Kubectl {
            binary: locate()?,
            kubeconfig: kubeconfig.to_path_buf(),
            dir,
        })
    }

    /// Runs `kubectl ARGS...` and returns its standard output; a failure is an error with its standard
    /// error.
    pub async fn run(&self, args: &[&str]) -> Result<String, HarnessError> {
        let output = tokio::process::Command::new(&self.binary)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.dir.path().join("cache"))
            .args(args)
            .env_remove("KUBECONFIG")
            .output()
            .await
            .map_err(|source| HarnessError::Io {
                what: format!("running {}", self.binary.display()),
                source,
            })?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            Err(HarnessError::Config(format!(
                "kubectl {} failed ({}): {}",
                args.join(" "),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            )))
        }
    }
}
