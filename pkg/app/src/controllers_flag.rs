//! The `--controllers` flag: which controllers run.
//!
//! Semantics as upstream: each entry is a controller name (canonical or alias), `-name` to disable it, or
//! `*` for "every controller enabled by default and not otherwise named". For each controller the first entry
//! naming it wins; if no entry names it, it runs only when `*` is present and it is enabled by default
//! ([`ControllerName::enabled_by_default`]: all but `pv-label-controller`, which upstream does not have).
//! Unknown names are an error that lists the valid ones.

use cloud_controllers::ControllerName;

/// The controllers enabled by the `--controllers` entries, in the deterministic start order of
/// [`ControllerName::ALL`].
///
/// ```
/// use ccm_app::controllers_flag::enabled_controllers;
/// use cloud_controllers::ControllerName;
/// let on = enabled_controllers(&["*".into(), "-route".into()]).unwrap();
/// assert!(!on.contains(&ControllerName::NodeRoute));
/// assert!(on.contains(&ControllerName::CloudNode));
/// assert!(!on.contains(&ControllerName::PvLabel));
/// let on = enabled_controllers(&["*".into(), "pv-label".into()]).unwrap();
/// assert!(on.contains(&ControllerName::PvLabel));
/// ```
pub fn enabled_controllers(entries: &[String]) -> Result<Vec<ControllerName>, String> {
    for entry in entries {
        let entry = entry.trim();
        if entry == "*" {
            continue;
        }
        let name = entry.strip_prefix('-').unwrap_or(entry);
        if ControllerName::from_name(name).is_none() {
            return Err(format!(
                "--controllers: unknown controller {entry:?}; valid values are \"*\", a name or \"-name\" \
                 with name one of: {}",
                valid_names()
            ));
        }
    }
    Ok(ControllerName::ALL
        .iter()
        .copied()
        .filter(|controller| is_enabled(*controller, entries))
        .collect())
}

/// Whether `controller` is enabled by `entries` (the entries are assumed valid).
fn is_enabled(controller: ControllerName, entries: &[String]) -> bool {
    let mut star = false;
    for entry in entries {
        let entry = entry.trim();
        if entry == "*" {
            star = true;
            continue;
        }
        let (enable, name) = match entry.strip_prefix('-') {
            Some(name) => (false, name),
            None => (true, entry),
        };
        if ControllerName::from_name(name) == Some(controller) {
            return enable;
        }
    }
    star && controller.enabled_by_default()
}

/// `canonical (alias)` for every controller, comma separated.
pub fn valid_names() -> String {
    ControllerName::ALL
        .iter()
        .map(|c| format!("{} ({})", c.canonical(), c.alias()))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use ControllerName::*;

    fn on(entries: &[&str]) -> Vec<ControllerName> {
        let entries: Vec<String> = entries.iter().map(|s| s.to_string()).collect();
        enabled_controllers(&entries).unwrap()
    }

    #[test]
    fn star_enables_upstreams_controllers_in_order() {
        assert_eq!(
            on(&["*"]),
            vec![CloudNode, CloudNodeLifecycle, ServiceLb, NodeRoute]
        );
        assert_eq!(on(&["*", "pv-label"]), ControllerName::ALL.to_vec());
        assert_eq!(on(&["pv-label", "*"]), ControllerName::ALL.to_vec());
        assert_eq!(on(&["*", "-pv-label"]), on(&["*"]));
    }

    #[test]
    fn names_and_aliases() {
        assert_eq!(on(&["cloud-node"]), vec![CloudNode]);
        assert_eq!(
            on(&["route", "service-lb-controller"]),
            vec![ServiceLb, NodeRoute]
        );
        assert_eq!(on(&["pv-label-controller", "pv-label"]), vec![PvLabel]);
        assert_eq!(on(&[]), Vec::<ControllerName>::new());
    }

    #[test]
    fn disabling_and_first_match_wins() {
        assert_eq!(
            on(&["*", "-route"]),
            vec![CloudNode, CloudNodeLifecycle, ServiceLb]
        );
        assert_eq!(
            on(&["-node-route-controller", "*", "pv-label"]),
            vec![CloudNode, CloudNodeLifecycle, ServiceLb, PvLabel]
        );
        // The first entry naming a controller decides, whatever comes later.
        assert_eq!(on(&["service", "-service"]), vec![ServiceLb]);
        assert!(!on(&["-service", "service", "*"]).contains(&ServiceLb));
        // An alias and the canonical name are the same controller.
        assert_eq!(on(&["-cloud-node", "cloud-node-controller"]), vec![]);
        // Without `*` only the named ones run.
        assert_eq!(on(&["-route"]), vec![]);
    }

    #[test]
    fn unknown_names_list_the_valid_ones() {
        for bad in ["nope", "-nope", "-*", "", "cloud-node-controllers"] {
            let err = enabled_controllers(&["*".to_string(), bad.to_string()]).unwrap_err();
            assert_eq!(
                err,
                format!(
                    "--controllers: unknown controller {bad:?}; valid values are \"*\", a name or \"-name\" \
                     with name one of: cloud-node-controller (cloud-node), cloud-node-lifecycle-controller \
                     (cloud-node-lifecycle), service-lb-controller (service), node-route-controller (route), \
                     pv-label-controller (pv-label)"
                )
            );
        }
    }
}
