//! Replays every committed fuzz input through its target: `make test` checks each input the fuzzer kept
//! (and each crash it once found, kept as a regression input) without libFuzzer.

use std::path::PathBuf;

fn corpus_dir(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target)
}

#[test]
fn every_target_passes_over_its_corpus() {
    for target in ccm_fuzz::TARGETS {
        let dir = corpus_dir(target.name);
        let mut inputs: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|entry| entry.expect("a readable corpus entry").path())
            .collect();
        inputs.sort();
        assert!(
            !inputs.is_empty(),
            "target {} has an empty corpus",
            target.name
        );
        for path in inputs {
            let data = std::fs::read(&path).expect("a readable corpus file");
            let outcome = std::panic::catch_unwind(|| (target.check)(&data));
            assert!(
                outcome.is_ok(),
                "{} fails on {}",
                target.name,
                path.display()
            );
        }
    }
}

#[test]
fn every_target_has_a_cargo_fuzz_binary() {
    let manifest =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/Cargo.toml"))
            .expect("fuzz/Cargo.toml");
    for target in ccm_fuzz::TARGETS {
        let path = format!("fuzz_targets/{}.rs", target.name);
        assert!(
            manifest.contains(&path),
            "fuzz/Cargo.toml has no binary for {}",
            target.name
        );
    }
}

/// Every annotation literal in a provider's sources is in its target's key list (the provider's annotation
/// table), so a new annotation is in the table, and fuzzed, from the day it is added.
#[test]
fn annotation_targets_know_every_annotation() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    for (provider, keys) in [
        (
            "providers/aws/src",
            &ccm_fuzz::targets::aws_annotations::KEYS,
        ),
        (
            "providers/digitalocean/src",
            &ccm_fuzz::targets::do_annotations::KEYS,
        ),
    ] {
        for literal in annotation_literals(&root.join(provider)) {
            assert!(
                keys.contains(&literal.as_str()),
                "{provider}: {literal} is not fuzzed"
            );
        }
    }
}

/// The `"service…kubernetes.io/…"` and `"kubernetes.digitalocean.com/…"` string literals under `dir`
/// (prefixes, ending in `-` or `/`, excluded).
fn annotation_literals(dir: &std::path::Path) -> Vec<String> {
    let prefixes = [
        "\"service.beta.kubernetes.io/",
        "\"service.kubernetes.io/",
        "\"kubernetes.digitalocean.com/",
    ];
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("a readable source dir") {
            let path = entry.expect("a readable entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("a readable source file");
            for prefix in prefixes {
                for (at, _) in text.match_indices(prefix) {
                    let literal = &text[at + 1..];
                    let literal = &literal[..literal.find('"').unwrap_or(literal.len())];
                    if !literal.ends_with(['-', '/']) {
                        out.push(literal.to_string());
                    }
                }
            }
        }
    }
    out
}
