//! The controllers of the table and of every compiled-in provider are documented (README.md's list and
//! `--controllers` row, docs/operator-guide.md's table, pkg/controllers/README.md's table for the
//! table's own), and `--controllers` accepts each one's name and alias.

use ccm_app::controllers_flag::{ControllerSelection, known_controllers};
use cloud_controller_manager::registry;
use cloud_provider::{ControllerInfo, Registry};

/// Every controller the daemon knows with any compiled-in provider: the table's, then the providers'.
fn every_controller(registry: &Registry) -> Vec<ControllerInfo> {
    let mut all = known_controllers(&[]);
    for provider in registry.names() {
        all.extend_from_slice(registry.controllers_of(&provider));
    }
    all
}

fn read(path: &str) -> String {
    let path = format!("{}/../../{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("cannot read {path}: {err}"))
}

#[test]
fn every_controller_is_in_the_readmes() {
    let readme = read("README.md");
    let flag_row = readme
        .lines()
        .find(|line| line.starts_with("| `--controllers` |"))
        .expect("README.md has a `--controllers` row in its flag table");
    let controllers_readme = read("pkg/controllers/README.md");
    let operator_guide = read("docs/operator-guide.md");
    let standard = known_controllers(&[]);
    for controller in every_controller(&registry()) {
        let ControllerInfo { name, alias, .. } = controller;
        assert!(
            readme.contains(&format!("- **{name}**")),
            "README.md's controller list lacks {name}"
        );
        assert!(
            flag_row.contains(&format!("`{name}` (`{alias}`)")),
            "README.md's --controllers row lacks {name} ({alias})"
        );
        assert!(
            operator_guide
                .lines()
                .any(|line| line.starts_with(&format!("| `{name}`"))
                    && line.contains(&format!("| `{alias}`"))),
            "docs/operator-guide.md's controller table lacks {name} ({alias})"
        );
        if standard.contains(&controller) {
            assert!(
                controllers_readme.contains(&format!("| `{name}` (`{alias}`) |")),
                "pkg/controllers/README.md's table lacks {name} ({alias})"
            );
        }
    }
}

#[test]
fn controllers_accepts_every_name_and_alias() {
    let registry = registry();
    assert!(!registry.is_empty(), "build with at least one provider");
    for provider in registry.names() {
        let declared = registry.controllers_of(&provider);
        for controller in known_controllers(declared) {
            for name in [controller.name, controller.alias] {
                let selection = ControllerSelection::parse(&[name.to_string()]).unwrap();
                let selected = selection
                    .resolve(declared)
                    .unwrap_or_else(|err| panic!("--cloud-provider={provider}: {err}"));
                let mut names: Vec<&str> =
                    selected.standard.iter().map(|c| c.canonical()).collect();
                names.extend(selected.provider);
                assert_eq!(names, [controller.name], "--controllers={name}");
            }
        }
    }
}
