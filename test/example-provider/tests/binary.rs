//! The example daemon is the full cloud-controller-manager with only the example provider compiled in.

use std::process::Command;

const BINARY: &str = env!("CARGO_BIN_EXE_example-cloud-controller-manager");

#[test]
fn version_lists_only_the_example_provider() {
    let output = Command::new(BINARY).arg("--version").output().unwrap();
    assert!(output.status.success());
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        format!(
            "example-cloud-controller-manager v{}\ncompiled-in cloud providers: example\n",
            env!("CARGO_PKG_VERSION")
        )
    );
}

#[test]
fn other_providers_are_unknown() {
    let output = Command::new(BINARY)
        .arg("--cloud-provider=fake")
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(r#"unknown cloud provider "fake" (compiled-in providers: example)"#),
        "{stderr}"
    );
}

#[test]
fn a_bad_cloud_config_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("cloud.json");
    std::fs::write(&config, "{\"instances\": 1}").unwrap();
    let output = Command::new(BINARY)
        .arg("--cloud-provider=example")
        .arg(format!("--cloud-config={}", config.display()))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(r#"could not init cloud provider "example": invalid example cloud config"#),
        "{stderr}"
    );
}

#[test]
fn the_providers_own_controller_is_a_controllers_name() {
    let output = Command::new(BINARY)
        .args(["--cloud-provider=example", "--controllers=*,nonesuch"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "pv-label-controller (pv-label), tagging-controller (tagging), pending-lb-controller (pending-lb)"
        ),
        "{stderr}"
    );
}
