//! The `test-apiserver` binary prints its URL once ready, writes the kubeconfig it is given, serves
//! requests with the token it is given, and exits on SIGTERM.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{client_for, raw};

#[tokio::test]
async fn binary_serves_until_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let mut child = Command::new(env!("CARGO_BIN_EXE_test-apiserver"))
        .args([
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--token",
            "bin-token",
            "--require-auth",
            "--log",
            "warn",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the binary");
    let stdout = child.stdout.take().unwrap();
    let url = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        line.trim().to_string()
    })
    .await
    .unwrap();
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    assert!(text.contains(&url));
    assert!(text.contains("token: bin-token"));

    let client = client_for(&kubeconfig).await;
    let r = raw(&client, "GET", "/api/v1/namespaces/default", None, "").await;
    assert_eq!(r.code, 200);
    assert_eq!(r.body["metadata"]["name"], "default");

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(code) = child.try_wait().unwrap() {
            assert!(code.success(), "exit status {code}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the binary did not exit on SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
