//! Leader migration (`--enable-leader-migration`, `--leader-migration-config`), as upstream's controller
//! managers do it: while cloud controllers move from kube-controller-manager to the cloud-controller-manager,
//! the controllers a `LeaderMigrationConfiguration` names run under a second Lease both components elect on,
//! so that exactly one of them runs each controller at any time.
//!
//! Once it holds its main Lease the daemon runs the controllers the configuration does not name; then it
//! also elects on the migration Lease (`leaderName`) and runs the controllers named for
//! `cloud-controller-manager` or `*`. Controllers named for another component are never run here. Losing
//! either Lease exits 1. Names match controllers' canonical names exactly, as upstream's: upstream's
//! default configuration names `route-controller`, `service-controller` and
//! `cloud-node-lifecycle-controller`, of which only the last is a canonical name of a cloud controller,
//! so by default only the node lifecycle controller migrates, as with upstream's.

use std::path::Path;

use serde::Deserialize;

/// This component's name in a configuration.
pub const COMPONENT: &str = "cloud-controller-manager";
/// The configuration's API group.
const GROUP: &str = "controllermanager.config.k8s.io";
/// The only lock kind still supported.
pub const LEASES: &str = "leases";

/// One controller and the component that runs it during the migration.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControllerLeader {
    /// The controller's canonical name.
    pub name: String,
    /// `cloud-controller-manager`, `kube-controller-manager` or `*`.
    pub component: String,
}

/// A `LeaderMigrationConfiguration`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderMigrationConfig {
    /// The migration Lease's name.
    pub leader_name: String,
    /// The lock kind (`leases`).
    pub resource_lock: String,
    /// The controllers that migrate.
    pub controller_leaders: Vec<ControllerLeader>,
}

/// Where a controller runs during the migration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Not named: under the main Lease, as without migration.
    Main,
    /// Named for this component or `*`: under the migration Lease.
    Migrated,
    /// Named for another component: not here.
    Elsewhere,
}

impl LeaderMigrationConfig {
    /// Upstream's configuration when no file is given.
    pub fn upstream_default() -> Self {
        let all = |name: &str| ControllerLeader {
            name: name.to_string(),
            component: "*".to_string(),
        };
        LeaderMigrationConfig {
            leader_name: "cloud-provider-extraction-migration".to_string(),
            resource_lock: LEASES.to_string(),
            controller_leaders: vec![
                all("route-controller"),
                all("service-controller"),
                all("cloud-node-lifecycle-controller"),
            ],
        }
    }

    /// Reads and checks a configuration file (YAML or JSON; `v1alpha1`, `v1beta1` or `v1`).
    pub fn read(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|err| {
            format!(
                "unable to read leader migration configuration from {:?}: {err}",
                path.display().to_string()
            )
        })?;
        Self::parse(&text)
    }

    /// Parses and checks a configuration, with upstream's messages where it has them.
    pub fn parse(text: &str) -> Result<Self, String> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields, rename_all = "camelCase")]
        struct File {
            api_version: Option<String>,
            kind: Option<String>,
            leader_name: Option<String>,
            resource_lock: Option<String>,
            #[serde(default)]
            controller_leaders: Vec<ControllerLeader>,
        }
        let file: File =
            serde_saphyr::from_str(text).map_err(|err| format!("strict decoding error: {err}"))?;
        let (Some(api_version), Some(kind)) = (&file.api_version, &file.kind) else {
            return Err("Object 'Kind' is missing".to_string());
        };
        let version = api_version
            .strip_prefix(&format!("{GROUP}/"))
            .filter(|v| matches!(*v, "v1alpha1" | "v1beta1" | "v1"))
            .ok_or_else(|| {
                format!(
                    "no kind \"LeaderMigrationConfiguration\" is registered for version {api_version:?}"
                )
            })?;
        if kind != "LeaderMigrationConfiguration" {
            return Err(format!(
                "unexpected config type: {api_version}, Kind={kind}"
            ));
        }
        // v1 has no resourceLock: leases.
        let resource_lock = match version {
            "v1" => Some(LEASES.to_string()),
            _ => file.resource_lock,
        };
        let config = LeaderMigrationConfig {
            leader_name: file.leader_name.unwrap_or_default(),
            resource_lock: resource_lock.unwrap_or_default(),
            controller_leaders: file.controller_leaders,
        };
        config.validate()?;
        Ok(config)
    }

    /// Upstream's checks, plus the lock kinds client-go no longer has.
    fn validate(&self) -> Result<(), String> {
        let mut errors = Vec::new();
        if self.leader_name.is_empty() {
            errors.push(
                "leaderName: Required value: leaderName must be set for LeaderMigrationConfiguration"
                    .to_string(),
            );
        }
        match self.resource_lock.as_str() {
            LEASES => {}
            "endpoints" => errors.push(
                "resourceLock: Invalid value: \"endpoints\": endpoints lock is removed, migrate to leases"
                    .to_string(),
            ),
            other => errors.push(format!(
                "resourceLock: Invalid value: {other:?}: resource Lock must be one of 'leases' or 'endpoints'"
            )),
        }
        for (i, leader) in self.controller_leaders.iter().enumerate() {
            if leader.name.is_empty() {
                errors.push(format!("controllerLeaders[{i}].name: Required value"));
            }
            if leader.component.is_empty() {
                errors.push(format!("controllerLeaders[{i}].component: Required value"));
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(format!("[{}]", errors.join(", ")))
        }
    }

    /// Where the controller with canonical name `controller` runs.
    pub fn placement(&self, controller: &str) -> Placement {
        match self
            .controller_leaders
            .iter()
            .find(|leader| leader.name == controller)
        {
            None => Placement::Main,
            Some(leader) if leader.component == COMPONENT || leader.component == "*" => {
                Placement::Migrated
            }
            Some(_) => Placement::Elsewhere,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstreams_default_migrates_the_lifecycle_controller_only() {
        let config = LeaderMigrationConfig::upstream_default();
        assert_eq!(config.leader_name, "cloud-provider-extraction-migration");
        assert_eq!(
            config.placement("cloud-node-lifecycle-controller"),
            Placement::Migrated
        );
        for main in [
            "cloud-node-controller",
            "service-lb-controller",
            "node-route-controller",
        ] {
            assert_eq!(config.placement(main), Placement::Main, "{main}");
        }
    }

    #[test]
    fn files_of_every_version() {
        let v1 = "apiVersion: controllermanager.config.k8s.io/v1\nkind: LeaderMigrationConfiguration\n\
                  leaderName: cloud-migration\ncontrollerLeaders:\n\
                  - name: service-lb-controller\n  component: cloud-controller-manager\n\
                  - name: node-route-controller\n  component: kube-controller-manager\n";
        let config = LeaderMigrationConfig::parse(v1).unwrap();
        assert_eq!(config.resource_lock, "leases");
        assert_eq!(
            config.placement("service-lb-controller"),
            Placement::Migrated
        );
        assert_eq!(
            config.placement("node-route-controller"),
            Placement::Elsewhere
        );
        assert_eq!(config.placement("cloud-node-controller"), Placement::Main);

        let alpha = "apiVersion: controllermanager.config.k8s.io/v1alpha1\n\
                     kind: LeaderMigrationConfiguration\nleaderName: m\nresourceLock: leases\n";
        assert!(LeaderMigrationConfig::parse(alpha).is_ok());
        let no_lock = "apiVersion: controllermanager.config.k8s.io/v1beta1\n\
                       kind: LeaderMigrationConfiguration\nleaderName: m\n";
        assert!(
            LeaderMigrationConfig::parse(no_lock)
                .unwrap_err()
                .contains("resource Lock must be one of")
        );
    }

    #[test]
    fn bad_files() {
        let unknown = "apiVersion: controllermanager.config.k8s.io/v1\nkind: LeaderMigrationConfiguration\n\
                       leaderName: m\nbogus: 1\n";
        assert!(
            LeaderMigrationConfig::parse(unknown)
                .unwrap_err()
                .starts_with("strict decoding error")
        );
        assert_eq!(
            LeaderMigrationConfig::parse("leaderName: m\n").unwrap_err(),
            "Object 'Kind' is missing"
        );
        let v2 =
            "apiVersion: controllermanager.config.k8s.io/v2\nkind: LeaderMigrationConfiguration\n";
        assert!(
            LeaderMigrationConfig::parse(v2)
                .unwrap_err()
                .contains("is registered for version")
        );
        let empty = "apiVersion: controllermanager.config.k8s.io/v1alpha1\n\
                     kind: LeaderMigrationConfiguration\nresourceLock: endpoints\n\
                     controllerLeaders:\n- name: ''\n  component: ''\n";
        let err = LeaderMigrationConfig::parse(empty).unwrap_err();
        for part in [
            "leaderName: Required value",
            "endpoints lock is removed",
            "controllerLeaders[0].name: Required value",
            "controllerLeaders[0].component: Required value",
        ] {
            assert!(err.contains(part), "{part}: {err}");
        }
        let err =
            LeaderMigrationConfig::read(Path::new("/nonexistent/migration.yaml")).unwrap_err();
        assert!(
            err.starts_with("unable to read leader migration configuration from"),
            "{err}"
        );
    }
}
