//! Every flag and feature gate of upstream's cloud-controller-manager, read from the pinned upstream
//! binaries (`hack/upstream`: k8s.io/cloud-provider's command, and cloud-provider-aws's, which adds the
//! tagging controller's flags; each prints its whole flag set with `UPSTREAM_CCM_PRINT_FLAG_SET=1`, hidden
//! flags included), is accepted by this daemon: a flag upstream adds fails this test until it is handled.
//! Each flag also takes upstream's own default value, and each gate has upstream's default and stage.
//!
//! Run by `make test-upstream` (`hack/upstream/test.sh`), which builds the binaries and sets
//! `UPSTREAM_CCM` and `UPSTREAM_AWS_CCM`; alone: `UPSTREAM_CCM=target/upstream/bin/upstream-ccm
//! UPSTREAM_AWS_CCM=target/upstream/bin/upstream-aws-ccm cargo test -p cloud-controller-manager --test
//! upstream_flag_set -- --ignored`.

use std::collections::BTreeSet;
use std::process::Command;

use ccm_app::Options;
use ccm_app::feature_gates::{KNOWN_GATES, Stage};
use clap::{CommandFactory, Parser};
use serde_json::Value;

/// The flag set and gates of the upstream binary named by the environment variable `variable`.
fn upstream(variable: &str) -> Value {
    let binary = std::env::var(variable).unwrap_or_else(|_| {
        panic!(
            "{variable} names an upstream cloud-controller-manager binary (hack/upstream/build.sh builds it; \
             make test-upstream sets it)"
        )
    });
    let output = Command::new(&binary)
        .env("UPSTREAM_CCM_PRINT_FLAG_SET", "1")
        .output()
        .unwrap_or_else(|err| panic!("cannot run {binary}: {err}"));
    assert!(output.status.success(), "{binary} failed: {output:?}");
    serde_json::from_slice(&output.stdout).unwrap()
}

/// Every long flag name (and alias) this daemon accepts, and its short ones.
fn ours() -> BTreeSet<String> {
    let command = Options::command();
    // clap's own --help and -h.
    let mut names = BTreeSet::from(["help".to_string(), "h".to_string()]);
    for arg in command.get_arguments() {
        if let Some(long) = arg.get_long() {
            names.insert(long.to_string());
        }
        for alias in arg.get_all_aliases().unwrap_or_default() {
            names.insert(alias.to_string());
        }
        if let Some(short) = arg.get_short() {
            names.insert(short.to_string());
        }
    }
    names
}

/// `--name=<upstream's default>` as one argument, or `None` when the default is empty (nothing to pass).
fn with_default(flag: &Value) -> Option<String> {
    let name = flag["name"].as_str().unwrap();
    let default = flag["default"].as_str().unwrap_or_default();
    // pflag prints list defaults in brackets.
    let default = default
        .strip_prefix('[')
        .and_then(|d| d.strip_suffix(']'))
        .unwrap_or(default);
    (!default.is_empty() && name != "help").then(|| format!("--{name}={default}"))
}

#[test]
#[ignore = "needs the upstream binary: run by make test-upstream"]
fn every_upstream_flag_and_gate_is_accepted() {
    check(&upstream("UPSTREAM_CCM"));
}

#[test]
#[ignore = "needs the upstream binary: run by make test-upstream"]
fn every_flag_of_cloud_provider_aws_is_accepted() {
    let aws = upstream("UPSTREAM_AWS_CCM");
    let names: Vec<&str> = aws["flags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    for tagging in ["tags", "resources", "tagging-controller-enable-batching"] {
        assert!(names.contains(&tagging), "{names:?}");
    }
    check(&aws);
}

/// Every flag of `upstream` is accepted with its default, and every gate has its default and stage.
fn check(upstream: &Value) {
    let flags = upstream["flags"].as_array().unwrap();
    assert!(flags.len() > 80, "{flags:?}");
    let ours = ours();
    let missing: Vec<&str> = flags
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .filter(|name| !ours.contains(*name))
        .collect();
    assert!(
        missing.is_empty(),
        "upstream flags this daemon does not accept: {missing:?}"
    );
    for flag in flags {
        let shorthand = flag["shorthand"].as_str().unwrap_or_default();
        if !shorthand.is_empty() {
            assert!(ours.contains(shorthand), "-{shorthand}");
        }
        if let Some(arg) = with_default(flag) {
            let parsed = Options::try_parse_from(["ccm", arg.as_str()]);
            assert!(
                parsed.is_ok(),
                "upstream's default {arg} is refused: {}",
                parsed.unwrap_err()
            );
        }
    }

    let gates = upstream["featureGates"].as_array().unwrap();
    for gate in gates {
        let name = gate["name"].as_str().unwrap();
        let ours = KNOWN_GATES
            .iter()
            .find(|g| g.name == name)
            .unwrap_or_else(|| panic!("upstream's feature gate {name} is unknown here"));
        assert_eq!(
            ours.default,
            gate["default"].as_bool().unwrap(),
            "{name}'s default"
        );
        let stage = match gate["preRelease"].as_str().unwrap() {
            "ALPHA" => Stage::Alpha,
            "BETA" => Stage::Beta,
            "DEPRECATED" => Stage::Deprecated,
            _ => Stage::Ga,
        };
        assert_eq!(ours.stage, stage, "{name}'s stage");
        assert_eq!(
            ours.locked,
            gate["lockToDefault"].as_bool().unwrap_or_default(),
            "{name} locked"
        );
    }
    assert_eq!(
        KNOWN_GATES.len(),
        gates.len(),
        "gates upstream no longer has"
    );
}
