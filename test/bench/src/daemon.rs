//! The daemon under test: `target/release/cloud-controller-manager` started as a separate process with the
//! fake provider, its output in a log file; its peak resident memory and CPU time read from `/proc`.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::process::{Child, Command};

/// The daemon's file name.
pub const BINARY_NAME: &str = "cloud-controller-manager";
/// Clock ticks per second of `/proc/<pid>/stat` times (USER_HZ, 100 on every Linux ABI).
const USER_HZ: f64 = 100.0;

/// Where the release build of the daemon is expected: `$CARGO_TARGET_DIR/release` when that is set, else
/// the workspace's `target/release`.
pub fn default_binary() -> PathBuf {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("..");
    let target = match std::env::var_os("CARGO_TARGET_DIR").filter(|v| !v.is_empty()) {
        Some(dir) if Path::new(&dir).is_absolute() => PathBuf::from(dir),
        Some(dir) => workspace.join(dir),
        None => workspace.join("target"),
    };
    target.join("release").join(BINARY_NAME)
}

/// How the daemon is started.
#[derive(Debug, Clone)]
pub struct DaemonSpec {
    /// The binary.
    pub binary: PathBuf,
    /// Its kubeconfig.
    pub kubeconfig: PathBuf,
    /// The fake cloud's configuration file.
    pub cloud_config: PathBuf,
    /// Flags beyond the provider, kubeconfig and serving ones (rates, workers...).
    pub flags: Vec<String>,
    /// Extra environment variables (`KEY`, `VALUE`).
    pub env: Vec<(String, String)>,
    /// `--secure-port` (health and metrics over HTTPS); 0 turns serving off.
    pub secure_port: u16,
}

impl DaemonSpec {
    /// The full command line (without the binary).
    pub fn args(&self) -> Vec<String> {
        let mut args = vec![
            "--cloud-provider=fake".to_string(),
            format!("--cloud-config={}", self.cloud_config.display()),
            format!("--kubeconfig={}", self.kubeconfig.display()),
            // Serving (health, metrics) is off unless a scenario measures it (no fixed port).
            format!("--secure-port={}", self.secure_port),
            // No scenario measures routes (the fake cloud has them, and they would need --cluster-cidr).
            "--configure-cloud-routes=false".to_string(),
        ];
        args.extend(self.flags.iter().cloned());
        args
    }
}

/// A running daemon. Dropping it kills the process.
pub struct Daemon {
    child: Child,
    pid: u32,
    log_path: PathBuf,
}

impl Daemon {
    /// Starts the daemon, its stdout and stderr going to `log_path`.
    pub fn spawn(spec: &DaemonSpec, log_path: &Path) -> anyhow::Result<Daemon> {
        if !spec.binary.is_file() {
            bail!(
                "the daemon binary {} does not exist; build it with `cargo build --release -p \
                 cloud-controller-manager` (or pass --daemon PATH)",
                spec.binary.display()
            );
        }
        let log = std::fs::File::create(log_path)
            .with_context(|| format!("cannot create {}", log_path.display()))?;
        let child = Command::new(&spec.binary)
            .args(spec.args())
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .env_remove("RUST_LOG")
            .env("NO_COLOR", "1")
            .envs(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start {}", spec.binary.display()))?;
        let pid = child
            .id()
            .context("the daemon exited before its process ID could be read")?;
        Ok(Daemon {
            child,
            pid,
            log_path: log_path.to_path_buf(),
        })
    }

    /// Fails when the daemon has exited (with the end of its log).
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!(
                "the daemon exited early ({status}); end of its log:\n{}",
                self.log_tail(30)
            );
        }
        Ok(())
    }

    /// Peak resident set size (`VmHWM`) in KiB.
    pub fn peak_rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).ok()?;
        parse_status_kib(&status, "VmHWM:")
    }

    /// Current resident set size (`VmRSS`) in KiB.
    pub fn rss_kib(&self) -> Option<u64> {
        Self::process_rss_kib(self.pid)
    }

    /// Current anonymous and file-backed resident memory (`RssAnon`, `RssFile`) in KiB.
    pub fn rss_anon_and_file_kib(&self) -> Option<(u64, u64)> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).ok()?;
        Some((
            parse_status_kib(&status, "RssAnon:")?,
            parse_status_kib(&status, "RssFile:")?,
        ))
    }

    /// Current resident set size (`VmRSS`) of process `pid` in KiB.
    pub fn process_rss_kib(pid: u32) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        parse_status_kib(&status, "VmRSS:")
    }

    /// User plus system CPU time so far, in seconds.
    pub fn cpu_seconds(&self) -> Option<f64> {
        process_cpu_seconds(self.pid)
    }

    /// Open sockets of the daemon (connections to the API server, listeners).
    pub fn open_sockets(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid))
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .filter_map(|e| std::fs::read_link(e.path()).ok())
                    .filter(|target| target.to_string_lossy().starts_with("socket:"))
                    .count()
            })
            .unwrap_or(0)
    }

    /// The last `lines` lines of the daemon's log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log_path).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Whether a line of the daemon's log contains `needle`.
    pub fn log_contains(&self, needle: &str) -> bool {
        std::fs::read_to_string(&self.log_path)
            .unwrap_or_default()
            .lines()
            .any(|l| l.contains(needle))
    }

    /// Lines of the daemon's log at WARN or ERROR level.
    pub fn warnings(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log_path)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
            .map(str::to_string)
            .collect()
    }

    /// The exit status, once the daemon has exited.
    pub fn exited(&mut self) -> anyhow::Result<Option<ExitStatus>> {
        Ok(self.child.try_wait()?)
    }

    /// Log lines that report a panic.
    pub fn panics(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log_path)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("panicked"))
            .map(str::to_string)
            .collect()
    }

    /// Kills the daemon at once (SIGKILL: no shutdown, no Lease release) and waits for it.
    pub async fn kill(mut self) -> anyhow::Result<ExitStatus> {
        self.child
            .start_kill()
            .context("cannot send SIGKILL to the daemon")?;
        Ok(self.child.wait().await?)
    }

    /// Asks the daemon to stop (SIGTERM) and waits for it; kills it after `grace`.
    pub async fn stop(mut self, grace: Duration) -> anyhow::Result<ExitStatus> {
        let sent = Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status()
            .await;
        if !matches!(sent, Ok(s) if s.success()) {
            self.child.start_kill()?;
        }
        match tokio::time::timeout(grace, self.child.wait()).await {
            Ok(status) => Ok(status?),
            Err(_) => {
                self.child.start_kill()?;
                Ok(self.child.wait().await?)
            }
        }
    }
}

/// User plus system CPU time of process `pid` so far, in seconds.
pub fn process_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat_cpu_seconds(&stat)
}

/// A `Name:   123 kB` value of `/proc/<pid>/status`, in KiB.
fn parse_status_kib(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

/// utime + stime of a `/proc/<pid>/stat` line, in seconds.
fn parse_stat_cpu_seconds(stat: &str) -> Option<f64> {
    // The command name (field 2) may contain spaces; fields after its closing parenthesis are plain.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After ")", field 3 (state) is index 0, so utime (14) and stime (15) are indexes 11 and 12.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / USER_HZ)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_fields_are_parsed() {
        let status = "Name:\tccm\nVmPeak:\t  900 kB\nVmHWM:\t   23456 kB\nVmRSS:\t 20000 kB\n";
        assert_eq!(parse_status_kib(status, "VmHWM:"), Some(23456));
        assert_eq!(parse_status_kib(status, "VmSwap:"), None);
        let stat = "4242 (cloud controller) S 1 4242 4242 0 -1 4194560 2000 0 0 0 150 50 0 0 20 0 9 0 100 0 0";
        assert_eq!(parse_stat_cpu_seconds(stat), Some(2.0));
        assert_eq!(parse_stat_cpu_seconds("garbage"), None);
    }

    #[test]
    fn own_process_is_readable_like_the_daemon() {
        let me = std::process::id();
        let status = std::fs::read_to_string(format!("/proc/{me}/status")).unwrap();
        assert!(parse_status_kib(&status, "VmHWM:").unwrap() > 0);
        let stat = std::fs::read_to_string(format!("/proc/{me}/stat")).unwrap();
        assert!(parse_stat_cpu_seconds(&stat).unwrap() >= 0.0);
    }

    #[test]
    fn command_line_names_the_fake_provider_and_files() {
        let spec = DaemonSpec {
            binary: PathBuf::from("/bin/ccm"),
            kubeconfig: PathBuf::from("/tmp/k"),
            cloud_config: PathBuf::from("/tmp/c.yaml"),
            flags: vec!["--kube-api-qps=20".into()],
            env: Vec::new(),
            secure_port: 0,
        };
        assert_eq!(
            spec.args(),
            [
                "--cloud-provider=fake",
                "--cloud-config=/tmp/c.yaml",
                "--kubeconfig=/tmp/k",
                "--secure-port=0",
                "--configure-cloud-routes=false",
                "--kube-api-qps=20"
            ]
        );
        assert!(default_binary().ends_with("release/cloud-controller-manager"));
    }
}
