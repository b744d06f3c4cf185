//! The `--controllers` flag: which controllers run.
//!
//! Semantics as upstream: each entry is a controller name (canonical or alias), `-name` to disable it, or
//! `*` for "every controller enabled by default and not otherwise named". For each controller the first entry
//! naming it wins; if no entry names it, it runs only when `*` is present and it is enabled by default
//! ([`ControllerInfo::enabled_by_default`]: all but `pv-label-controller`, which upstream does not have).
//! The entries' syntax is checked with the other flags ([`ControllerSelection::parse`]), the names against
//! the controller table ([`cloud_controllers::CONTROLLERS`]) and the controllers the provider declared in the
//! registry, which have the same [`ControllerInfo`] ([`ControllerSelection::resolve`]), before anything
//! starts: an unknown name is a usage error that lists the valid ones.

use cloud_controllers::{CONTROLLERS, ControllerName};
use cloud_provider::ControllerInfo;

/// The `--controllers` entries, syntactically valid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerSelection {
    entries: Vec<String>,
}

/// The controllers a [`ControllerSelection`] enables.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SelectedControllers {
    /// The standard controllers, in the start order of [`CONTROLLERS`].
    pub standard: Vec<ControllerName>,
    /// The provider's own controllers (canonical names), in the provider's order.
    pub provider: Vec<&'static str>,
}

impl ControllerSelection {
    /// Checks the entries' syntax: each is `*`, a name or `-name`.
    ///
    /// ```
    /// use ccm_app::controllers_flag::ControllerSelection;
    /// use cloud_controllers::ControllerName;
    /// let on = ControllerSelection::parse(&["*".into(), "-route".into()]).unwrap().resolve(&[]).unwrap();
    /// assert!(!on.standard.contains(&ControllerName::NodeRoute));
    /// assert!(on.standard.contains(&ControllerName::CloudNode));
    /// assert!(!on.standard.contains(&ControllerName::PvLabel));
    /// assert!(ControllerSelection::parse(&["-*".into()]).is_err());
    /// ```
    pub fn parse(entries: &[String]) -> Result<Self, String> {
        let entries: Vec<String> = entries.iter().map(|e| e.trim().to_string()).collect();
        for entry in &entries {
            let name = entry.strip_prefix('-').unwrap_or(entry);
            if entry != "*" && (name.is_empty() || name.contains('*')) {
                return Err(format!(
                    "--controllers: invalid entry {entry:?}; valid values are \"*\", a name or \"-name\" \
                     with name one of: {}",
                    valid_names(&[])
                ));
            }
        }
        Ok(ControllerSelection { entries })
    }

    /// The controllers enabled, given the provider's own controllers; an unknown name is an error.
    pub fn resolve(&self, provider: &[ControllerInfo]) -> Result<SelectedControllers, String> {
        let known = known_controllers(provider);
        for entry in &self.entries {
            let name = entry.strip_prefix('-').unwrap_or(entry);
            if entry != "*" && !known.iter().any(|c| c.is_named(name)) {
                return Err(format!(
                    "--controllers: unknown controller {entry:?}; valid values are \"*\", a name or \"-name\" \
                     with name one of: {}",
                    valid_names(provider)
                ));
            }
        }
        Ok(SelectedControllers {
            standard: CONTROLLERS
                .iter()
                .filter(|c| self.is_enabled(&c.info))
                .map(|c| c.name)
                .collect(),
            provider: provider
                .iter()
                .filter(|c| self.is_enabled(c))
                .map(|c| c.name)
                .collect(),
        })
    }

    /// Whether the entries enable `controller`.
    fn is_enabled(&self, controller: &ControllerInfo) -> bool {
        let mut star = false;
        for entry in &self.entries {
            if entry == "*" {
                star = true;
                continue;
            }
            let (enable, named) = match entry.strip_prefix('-') {
                Some(named) => (false, named),
                None => (true, entry.as_str()),
            };
            if controller.is_named(named) {
                return enable;
            }
        }
        star && controller.enabled_by_default
    }
}

/// Every controller `--controllers` knows with `provider`: the table's, then the provider's own.
pub fn known_controllers(provider: &[ControllerInfo]) -> Vec<ControllerInfo> {
    cloud_controllers::descriptors::infos()
        .chain(provider.iter().copied())
        .collect()
}

/// `canonical (alias)` for every controller, the provider's last, comma separated.
pub fn valid_names(provider: &[ControllerInfo]) -> String {
    known_controllers(provider)
        .iter()
        .map(|c| format!("{} ({})", c.name, c.alias))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use ControllerName::*;

    fn on(entries: &[&str]) -> Vec<ControllerName> {
        selection(entries).resolve(&[]).unwrap().standard
    }

    fn selection(entries: &[&str]) -> ControllerSelection {
        let entries: Vec<String> = entries.iter().map(|s| s.to_string()).collect();
        ControllerSelection::parse(&entries).unwrap()
    }

    const FIREWALL: ControllerInfo = ControllerInfo::new("firewall-controller", "firewall");

    #[test]
    fn provider_controllers_run_with_star_and_by_name() {
        let provider = |entries: &[&str]| selection(entries).resolve(&[FIREWALL]).unwrap().provider;
        assert_eq!(provider(&["*"]), ["firewall-controller"]);
        assert_eq!(provider(&["firewall"]), ["firewall-controller"]);
        assert!(provider(&["*", "-firewall-controller"]).is_empty());
        assert!(provider(&["cloud-node"]).is_empty());
        // Without the provider the name is unknown.
        let err = selection(&["*", "-firewall"]).resolve(&[]).unwrap_err();
        assert!(err.contains("unknown controller \"-firewall\""), "{err}");
        let err = selection(&["nope"]).resolve(&[FIREWALL]).unwrap_err();
        assert!(
            err.ends_with(
                "pv-label-controller (pv-label), tagging-controller (tagging), firewall-controller (firewall)"
            ),
            "{err}"
        );
    }

    #[test]
    fn every_name_and_alias_is_accepted() {
        let audit = ControllerInfo::new("audit-controller", "audit").disabled_by_default();
        let provider = [FIREWALL, audit];
        for (index, controller) in known_controllers(&provider).iter().enumerate() {
            for name in [controller.name, controller.alias] {
                let selected = selection(&[name]).resolve(&provider).unwrap();
                let mut names: Vec<&str> =
                    selected.standard.iter().map(|c| c.canonical()).collect();
                names.extend(selected.provider);
                assert_eq!(names, [controller.name], "--controllers={name}");
                let off = selection(&["*", &format!("-{name}")])
                    .resolve(&provider)
                    .unwrap();
                assert!(
                    !off.standard
                        .iter()
                        .any(|c| c.canonical() == controller.name)
                );
                assert!(!off.provider.contains(&controller.name));
            }
            assert_eq!(
                index < CONTROLLERS.len(),
                ControllerName::from_name(controller.name).is_some()
            );
        }
        // A provider controller off by default runs only when named.
        let star = selection(&["*"]).resolve(&provider).unwrap();
        assert_eq!(star.provider, ["firewall-controller"]);
    }

    #[test]
    fn star_enables_upstreams_controllers_in_order() {
        assert_eq!(
            on(&["*"]),
            vec![CloudNode, CloudNodeLifecycle, ServiceLb, NodeRoute]
        );
        let all: Vec<_> = ControllerName::all().collect();
        assert_eq!(on(&["*", "pv-label", "tagging"]), all);
        assert_eq!(on(&["pv-label", "tagging", "*"]), all);
        assert_eq!(on(&["*", "-pv-label"]), on(&["*"]));
        // cloud-provider-aws's way of turning the tagging controller on.
        assert_eq!(
            on(&["*", "tagging"]),
            vec![CloudNode, CloudNodeLifecycle, ServiceLb, NodeRoute, Tagging]
        );
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
        for bad in ["nope", "-nope", "cloud-node-controllers"] {
            let err = selection(&["*", bad]).resolve(&[]).unwrap_err();
            assert_eq!(
                err,
                format!(
                    "--controllers: unknown controller {bad:?}; valid values are \"*\", a name or \"-name\" \
                     with name one of: cloud-node-controller (cloud-node), cloud-node-lifecycle-controller \
                     (cloud-node-lifecycle), service-lb-controller (service), node-route-controller (route), \
                     pv-label-controller (pv-label), tagging-controller (tagging)"
                )
            );
        }
        for bad in ["-*", "", "-", "a*"] {
            let entries = vec!["*".to_string(), bad.to_string()];
            let err = ControllerSelection::parse(&entries).unwrap_err();
            assert!(
                err.starts_with(&format!("--controllers: invalid entry {bad:?}")),
                "{err}"
            );
        }
    }
}
