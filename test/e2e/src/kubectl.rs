//! The real `kubectl`, run as an operator runs it against the cluster under test: `KUBECTL`, else the first
//! `kubectl` on `PATH`, else the one `make realkube` builds (`target/realkube/bin/kubectl`). Each instance
//! has a discovery cache of its own, so runs against different clusters never share one.

use std::path::{Path, PathBuf};

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

/// A kubectl table: its header cells and rows, cut at the header's column starts (kubectl left-aligns every
/// column and separates them by at least three spaces; an empty cell is blank).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    /// The column names.
    pub header: Vec<String>,
    /// The rows' cells.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// Parses kubectl's human-readable table output.
    pub fn parse(text: &str) -> Table {
        let mut lines = text.lines();
        let first = lines.next().unwrap_or_default();
        let starts = column_starts(first);
        Table {
            header: cut(first, &starts),
            rows: lines.map(|l| cut(l, &starts)).collect(),
        }
    }

    /// The row with a cell equal to `name` (or `<kind>/name`).
    pub fn row(&self, name: &str) -> Option<&[String]> {
        let qualified = format!("/{name}");
        self.rows
            .iter()
            .find(|r| r.iter().any(|c| c == name || c.ends_with(&qualified)))
            .map(Vec::as_slice)
    }

    /// The cell of `column` in `row`.
    pub fn cell<'a>(&self, row: &'a [String], column: &str) -> Option<&'a str> {
        let i = self.header.iter().position(|h| h == column)?;
        row.get(i).map(String::as_str)
    }
}

fn column_starts(header: &str) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut spaces = 3;
    for (i, c) in header.char_indices() {
        if c == ' ' {
            spaces += 1;
            continue;
        }
        if spaces >= 3 {
            starts.push(i);
        }
        spaces = 0;
    }
    starts
}

fn cut(line: &str, starts: &[usize]) -> Vec<String> {
    starts
        .iter()
        .enumerate()
        .map(|(i, start)| {
            let end = starts
                .get(i + 1)
                .copied()
                .unwrap_or(line.len())
                .min(line.len());
            line.get((*start).min(end)..end)
                .unwrap_or("")
                .trim()
                .to_string()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_with_blank_cells_and_spaces_inside() {
        let text = "\
NAME     STATUS   ROLES    AGE   OS-IMAGE              EXTERNAL-IP
node-a   Ready    <none>   5s    Debian GNU/Linux 12   203.0.113.7
node-b   Ready             6s    Debian GNU/Linux 12   <none>
";
        let t = Table::parse(text);
        assert_eq!(
            t.header,
            ["NAME", "STATUS", "ROLES", "AGE", "OS-IMAGE", "EXTERNAL-IP"]
        );
        let a = t.row("node-a").unwrap();
        assert_eq!(t.cell(a, "OS-IMAGE"), Some("Debian GNU/Linux 12"));
        assert_eq!(t.cell(a, "EXTERNAL-IP"), Some("203.0.113.7"));
        let b = t.row("node-b").unwrap();
        assert_eq!(t.cell(b, "ROLES"), Some(""));
        assert!(t.row("node-c").is_none());
    }
}
