//! How the daemon's API clients identify themselves, the way upstream components built on client-go do, so
//! that audit logs, API priority and fairness, `managedFields` and `kubectl describe` show the same names
//! before and after a switch from the upstream cloud-controller-manager.
//!
//! - `User-Agent`: `<command>/<version> (<os>/<arch>) kubernetes/<commit>/<client name>`, as client-go's
//!   `rest.AddUserAgent(config, name)` builds it: the command is the base name of the binary, the client
//!   name is upstream's for the controller ([`ControllerName::client_name`]), `shared-informers` for the
//!   shared watches, `leader-election` for the Lease.
//! - Field manager: the command name, the value kube-apiserver derives from an upstream client's
//!   `User-Agent` when a write names none (so `managedFields` entries stay the same across a switch).
//!
//! [`ControllerName::client_name`]: crate::ControllerName::client_name

use std::sync::OnceLock;

use kube::api::{PatchParams, PostParams};

/// The client name of the shared watches (upstream: `shared-informers`).
pub const SHARED_INFORMERS_CLIENT: &str = "shared-informers";
/// The client name of leader election (upstream: `leader-election`).
pub const LEADER_ELECTION_CLIENT: &str = "leader-election";
/// The client name of the process' own requests outside any controller (upstream: the binary's name).
pub const DAEMON_CLIENT: &str = "cloud-controller-manager";

/// The command the process runs as: the base name of `argv[0]`, `cloud-controller-manager` when unknown.
pub fn command_name() -> &'static str {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| {
        std::env::args_os()
            .next()
            .and_then(|arg0| {
                std::path::Path::new(&arg0)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
            })
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| DAEMON_CLIENT.to_string())
    })
}

/// The `User-Agent` of a client named `client_name`.
pub fn user_agent(client_name: &str) -> String {
    format_user_agent(
        command_name(),
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        std::env::consts::ARCH,
        option_env!("CCM_GIT_COMMIT").unwrap_or(""),
        client_name,
    )
}

/// client-go's format: the version without pre-release or build suffixes and with a `v`, the architecture
/// in Go's spelling, the commit cut to seven characters (`unknown` without one).
fn format_user_agent(
    command: &str,
    version: &str,
    os: &str,
    arch: &str,
    commit: &str,
    client_name: &str,
) -> String {
    let version = version.split(['-', '+']).next().unwrap_or(version);
    let version = if version.starts_with('v') {
        version.to_string()
    } else {
        format!("v{version}")
    };
    let arch = match arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    };
    let commit = if commit.is_empty() {
        "unknown"
    } else {
        &commit[..commit.len().min(7)]
    };
    format!("{command}/{version} ({os}/{arch}) kubernetes/{commit}/{client_name}")
}

/// The field manager every write names.
pub fn field_manager() -> &'static str {
    command_name()
}

/// Patch parameters naming the field manager.
pub fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(field_manager().to_string()),
        ..PatchParams::default()
    }
}

/// Create parameters naming the field manager.
pub fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(field_manager().to_string()),
        ..PostParams::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_agents_have_client_go_shape() {
        assert_eq!(
            format_user_agent(
                "cloud-controller-manager",
                "0.1.0",
                "linux",
                "x86_64",
                "",
                "node-controller"
            ),
            "cloud-controller-manager/v0.1.0 (linux/amd64) kubernetes/unknown/node-controller"
        );
        assert_eq!(
            format_user_agent(
                "ccm",
                "v1.2.3-rc.1+meta",
                "linux",
                "aarch64",
                "0123456789abcdef",
                "x"
            ),
            "ccm/v1.2.3 (linux/arm64) kubernetes/0123456/x"
        );
    }

    #[test]
    fn the_field_manager_is_the_user_agent_prefix() {
        let ua = user_agent(SHARED_INFORMERS_CLIENT);
        assert_eq!(ua.split('/').next(), Some(field_manager()));
        assert!(ua.ends_with("/shared-informers"), "{ua}");
        assert_eq!(
            patch_params().field_manager.as_deref(),
            Some(field_manager())
        );
        assert_eq!(
            post_params().field_manager.as_deref(),
            Some(field_manager())
        );
    }
}
