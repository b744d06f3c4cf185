//! The cloud-controller-manager binary as a separate process: finding it, starting replicas with their
//! own logs, killing them, and asking one whether it leads (through its `/metrics`).

use std::path::{Path, PathBuf};
use std::process::Stdio;

use http::Method;
use tokio::process::{Child, Command};

use crate::HarnessError;
use crate::http::send;

/// The binary's file name.
pub const BINARY_NAME: &str = "cloud-controller-manager";

/// Finds `target/debug/cloud-controller-manager`: under `$CARGO_TARGET_DIR` when that is set, else under
/// the workspace's `target/`. A missing binary is an error that says how to build it.
pub fn locate_binary() -> Result<PathBuf, HarnessError> {
    let target = match std::env::var_os("CARGO_TARGET_DIR").filter(|v| !v.is_empty()) {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            if dir.is_absolute() {
                dir
            } else {
                workspace_root().join(dir)
            }
        }
        None => workspace_root().join("target"),
    };
    let path = target.join("debug").join(BINARY_NAME);
    if path.is_file() {
        Ok(path)
    } else {
        Err(HarnessError::MissingBinary(path))
    }
}

/// The workspace root (two levels above this crate).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("..")
}

/// A running CCM replica. Dropping it kills the process.
#[derive(Debug)]
pub struct CcmProcess {
    name: String,
    child: Child,
    log_path: PathBuf,
    secure_port: u16,
}

impl CcmProcess {
    /// Starts `binary` with `args`, its stdout and stderr going to `log_path`. `secure_port` is the port
    /// given with `--secure-port` (for [`CcmProcess::metrics`]).
    pub fn spawn(
        name: &str,
        binary: &Path,
        args: &[String],
        log_path: &Path,
        secure_port: u16,
    ) -> Result<CcmProcess, HarnessError> {
        let io = |e: std::io::Error| HarnessError::Io {
            what: format!("starting CCM replica {name} ({})", binary.display()),
            source: e,
        };
        let log = std::fs::File::create(log_path).map_err(io)?;
        let child = Command::new(binary)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().map_err(io)?))
            .stderr(Stdio::from(log))
            .env_remove("RUST_LOG")
            .env("NO_COLOR", "1")
            .kill_on_drop(true)
            .spawn()
            .map_err(io)?;
        Ok(CcmProcess {
            name: name.to_string(),
            child,
            log_path: log_path.to_path_buf(),
            secure_port,
        })
    }

    /// The replica's name (for messages).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The process ID, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// The path of its log.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// `None` while running, else how it exited.
    pub fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Kills the process with SIGKILL (a crash: it cannot release its lease) and waits for it.
    pub async fn kill(&mut self) -> Result<(), HarnessError> {
        self.child.kill().await.map_err(|e| HarnessError::Io {
            what: format!("killing CCM replica {}", self.name),
            source: e,
        })
    }

    /// Its whole log so far ("" when unreadable).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// The last `lines` lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        match std::fs::read_to_string(&self.log_path) {
            Ok(text) => {
                let all: Vec<&str> = text.lines().collect();
                all[all.len().saturating_sub(lines)..].join("\n")
            }
            Err(e) => format!("(cannot read {}: {e})", self.log_path.display()),
        }
    }

    /// Fetches `/metrics` over HTTPS with a bearer token.
    pub async fn metrics(&self, token: &str) -> Result<String, HarnessError> {
        let url = format!("https://127.0.0.1:{}/metrics", self.secure_port);
        let response = send(Method::GET, &url, None, Some(token)).await?;
        if response.status != 200 {
            return Err(HarnessError::Http {
                what: format!("GET {url} of replica {}", self.name),
                message: format!("status {}: {}", response.status, response.text()),
            });
        }
        Ok(response.text())
    }

    /// Whether the replica reports itself as the leader (`leader_election_master_status` is 1).
    pub async fn is_leader(&self, token: &str) -> Result<bool, HarnessError> {
        let text = self.metrics(token).await?;
        leader_status(&text).ok_or_else(|| HarnessError::Http {
            what: format!("/metrics of replica {}", self.name),
            message: "no leader_election_master_status sample".into(),
        })
    }
}

/// Reads `leader_election_master_status` from a Prometheus text exposition (true when any sample is 1).
pub fn leader_status(metrics: &str) -> Option<bool> {
    let mut seen = None;
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("leader_election_master_status") else {
            continue;
        };
        if !(rest.starts_with('{') || rest.starts_with(' ')) {
            continue;
        }
        let value = rest
            .rsplit(' ')
            .next()
            .and_then(|v| v.trim().parse::<f64>().ok());
        if let Some(value) = value {
            seen = Some(seen.unwrap_or(false) || value == 1.0);
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_leader_gauge() {
        let text = "# HELP leader_election_master_status x\n# TYPE leader_election_master_status gauge\n\
                    leader_election_master_status{name=\"cloud-controller-manager\"} 1\nother 0\n";
        assert_eq!(leader_status(text), Some(true));
        assert_eq!(
            leader_status("leader_election_master_status{name=\"x\"} 0\n"),
            Some(false)
        );
        assert_eq!(
            leader_status("leader_election_master_status_total 1\n"),
            None
        );
        assert_eq!(leader_status(""), None);
    }

    #[test]
    fn a_missing_binary_says_how_to_build_it() {
        let err =
            HarnessError::MissingBinary(PathBuf::from("/x/target/debug/cloud-controller-manager"));
        assert!(
            err.to_string().contains("cargo build --all-features"),
            "{err}"
        );
    }
}
