//! What this build is: the version (or the one `--version=vX.Y.Z` reports), the git commit and build date
//! given at build time (`CCM_GIT_COMMIT`, `CCM_BUILD_DATE`), the compiler and the platform; printed by
//! `--version=raw` and exported as upstream's `kubernetes_build_info` gauge.

use std::sync::atomic::AtomicI64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

/// The build information, with upstream's field names.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet, serde::Serialize)]
pub struct BuildInfo {
    /// The major version.
    pub major: String,
    /// The minor version.
    pub minor: String,
    /// `v<version>`.
    #[serde(rename = "gitVersion")]
    pub git_version: String,
    /// The commit the binary was built from, if given at build time.
    #[serde(rename = "gitCommit")]
    pub git_commit: String,
    /// `clean` or `dirty`, if given at build time.
    #[serde(rename = "gitTreeState")]
    pub git_tree_state: String,
    /// When it was built (RFC 3339), if given at build time.
    #[serde(rename = "buildDate")]
    pub build_date: String,
    /// The compiler's version (the label keeps upstream's name).
    #[serde(rename = "goVersion")]
    pub go_version: String,
    /// `rustc`.
    pub compiler: String,
    /// `<os>/<arch>` in Go's spelling (`linux/amd64`, `linux/arm64`).
    pub platform: String,
}

impl BuildInfo {
    /// This build's information; `reported` replaces the version (`--version=vX.Y.Z`).
    pub fn current(reported: Option<&str>) -> Self {
        let version = reported
            .map(str::to_string)
            .unwrap_or_else(|| format!("v{}", env!("CARGO_PKG_VERSION")));
        let mut numbers = version.trim_start_matches('v').split('.');
        let major = numbers.next().unwrap_or_default().to_string();
        let minor = numbers.next().unwrap_or_default().to_string();
        let arch = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            "x86" => "386",
            other => other,
        };
        BuildInfo {
            major,
            minor,
            git_version: version,
            git_commit: option_env!("CCM_GIT_COMMIT")
                .unwrap_or_default()
                .to_string(),
            git_tree_state: option_env!("CCM_GIT_TREE_STATE")
                .unwrap_or_default()
                .to_string(),
            build_date: option_env!("CCM_BUILD_DATE")
                .unwrap_or("1970-01-01T00:00:00Z")
                .to_string(),
            go_version: env!("CCM_RUSTC_VERSION").to_string(),
            compiler: "rustc".to_string(),
            platform: format!("{}/{arch}", std::env::consts::OS),
        }
    }

    /// Registers `kubernetes_build_info` (always 1) in `registry`.
    pub fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        let family = Family::<BuildInfo, Gauge<i64, AtomicI64>>::default();
        family.get_or_create(self).set(1);
        registry.register(
            "kubernetes_build_info",
            "[BETA] A metric with a constant '1' value labeled by major, minor, git version, git commit, git \
             tree state, build date, Go version, and compiler from which Kubernetes was built, and platform \
             on which it is running.",
            family,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gauge_has_upstreams_labels() {
        let info = BuildInfo::current(Some("v1.37.1"));
        assert_eq!((info.major.as_str(), info.minor.as_str()), ("1", "37"));
        assert!(info.go_version.starts_with("rustc "), "{}", info.go_version);
        let mut registry = prometheus_client::registry::Registry::default();
        info.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let line = text
            .lines()
            .find(|l| l.starts_with("kubernetes_build_info{"))
            .unwrap();
        for label in [
            "major=\"1\"",
            "minor=\"37\"",
            "git_version=\"v1.37.1\"",
            "git_commit=",
            "git_tree_state=",
            "build_date=",
            "go_version=\"rustc ",
            "compiler=\"rustc\"",
            "platform=\"",
        ] {
            assert!(line.contains(label), "{label}: {line}");
        }
        assert!(line.ends_with(" 1"), "{line}");
        let default = BuildInfo::current(None);
        assert_eq!(
            default.git_version,
            format!("v{}", env!("CARGO_PKG_VERSION"))
        );
    }
}
