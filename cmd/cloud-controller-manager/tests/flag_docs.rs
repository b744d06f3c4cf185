//! The README documents every flag: each is named in the flag table or in the table of upstream's flags
//! ("Switching from upstream"), and the flags accepted and ignored are exactly `IGNORED_FLAGS`, each with
//! its reason.

use ccm_app::Options;
use ccm_app::options::IGNORED_FLAGS;
use clap::CommandFactory;

fn readme() -> String {
    let path = format!("{}/../../README.md", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("cannot read {path}: {err}"))
}

/// The rows of the README's two flag tables.
fn flag_rows(readme: &str) -> Vec<&str> {
    let table = |heading: &str| -> Vec<&str> {
        let start = readme
            .find(heading)
            .unwrap_or_else(|| panic!("README.md has no {heading:?} section"));
        readme[start..]
            .lines()
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .collect()
    };
    let mut rows = table("## Flags\n");
    rows.extend(table("## Switching from upstream\n"));
    rows
}

/// Whitespace collapsed and code marks dropped, for comparing wrapped text.
fn words(text: &str) -> String {
    text.replace('`', "")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn every_flag_is_documented() {
    let readme = readme();
    let rows = flag_rows(&readme);
    for arg in Options::command().get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        let name = format!("`--{long}`");
        assert!(
            rows.iter().any(|row| row.contains(&name)),
            "README.md's flag tables do not name {name}"
        );
    }
}

#[test]
fn the_ignored_flags_are_the_documented_ones() {
    let readme = readme();
    let rows = flag_rows(&readme);
    for flag in IGNORED_FLAGS {
        let name = format!("| `--{}` |", flag.name);
        let row = rows
            .iter()
            .find(|row| row.starts_with(&name))
            .unwrap_or_else(|| panic!("README.md has no row for --{}", flag.name));
        assert!(row.contains("accepted and ignored"), "{row}");
        assert!(
            words(row).contains(&words(flag.reason)),
            "README.md's row of --{} does not give the reason {:?}",
            flag.name,
            flag.reason
        );
    }
    for row in rows.iter().filter(|r| r.contains("accepted and ignored")) {
        assert!(
            IGNORED_FLAGS
                .iter()
                .any(|f| row.starts_with(&format!("| `--{}` |", f.name))),
            "README.md says a flag is ignored that IGNORED_FLAGS does not list: {row}"
        );
    }
}
