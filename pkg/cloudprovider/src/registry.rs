//! The provider registry: maps `--cloud-provider` names to factories that build a provider from the
//! optional cloud-config bytes.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::{BoxError, CloudProvider, ControllerInfo};

/// Builds a provider from the contents of the cloud-config file (`None` when no file was given).
pub type ProviderFactory = Arc<
    dyn Fn(Option<&[u8]>) -> std::result::Result<Arc<dyn CloudProvider>, BoxError> + Send + Sync,
>;

/// The name that means "the cloud provider runs outside kube-controller-manager"; refused here because
/// this controller manager is that external component.
pub const EXTERNAL_PROVIDER_NAME: &str = "external";

/// Errors from registering or initializing providers.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// A provider with this name is already registered.
    #[error("cloud provider {name:?} was registered twice")]
    Duplicate {
        /// The duplicated name.
        name: String,
    },
    /// No provider with this name is compiled in.
    #[error(
        "unknown cloud provider {name:?} (compiled-in providers: {})",
        list_or_none(known)
    )]
    Unknown {
        /// The requested name.
        name: String,
        /// Every registered name, sorted.
        known: Vec<String>,
    },
    /// No provider name was given.
    #[error(
        "no cloud provider given: the cloud-controller-manager runs the cloud-specific controllers and needs a \
         concrete provider name (--cloud-provider)"
    )]
    Empty,
    /// The name `external` was given.
    #[error(
        "cloud provider \"external\" cannot be used here: \"external\" tells kubelets and kube-controller-manager \
         that a separate cloud-controller-manager runs the cloud loops, and this program is that \
         cloud-controller-manager; give it a concrete provider name (--cloud-provider)"
    )]
    External,
    /// The cloud-config file could not be read.
    #[error("could not read cloud config file {}: {source}", path.display())]
    Unreadable {
        /// The file's path.
        path: PathBuf,
        /// Why it could not be read.
        #[source]
        source: std::io::Error,
    },
    /// The provider's factory failed.
    #[error("could not init cloud provider {name:?}: {source}")]
    Init {
        /// The provider name.
        name: String,
        /// The factory's error.
        #[source]
        source: BoxError,
    },
}

fn list_or_none(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

/// The set of compiled-in providers.
///
/// ```
/// use std::sync::Arc;
/// use cloud_provider::{CloudProvider, Registry, RegistryError};
///
/// struct Nothing;
/// impl CloudProvider for Nothing {
///     fn provider_name(&self) -> &str { "nothing" }
///     fn has_cluster_id(&self) -> bool { true }
/// }
///
/// let mut registry = Registry::new();
/// registry.register_fn("nothing", |_config| Ok(Arc::new(Nothing) as Arc<dyn CloudProvider>)).unwrap();
/// assert_eq!(registry.names(), vec!["nothing"]);
/// assert_eq!(registry.init("nothing", None).unwrap().provider_name(), "nothing");
///
/// let err = registry.init("nonesuch", None).err().unwrap();
/// assert!(matches!(err, RegistryError::Unknown { .. }));
/// assert_eq!(err.to_string(), r#"unknown cloud provider "nonesuch" (compiled-in providers: nothing)"#);
/// ```
#[derive(Clone, Default)]
pub struct Registry {
    factories: BTreeMap<String, ProviderFactory>,
    controllers: BTreeMap<String, Vec<ControllerInfo>>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("providers", &self.names())
            .finish()
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `factory` under `name`. Fails for a name already registered, an empty name and `external`.
    pub fn register(
        &mut self,
        name: impl Into<String>,
        factory: ProviderFactory,
    ) -> Result<(), RegistryError> {
        let name = name.into();
        check_name(&name)?;
        if self.factories.contains_key(&name) {
            return Err(RegistryError::Duplicate { name });
        }
        self.factories.insert(name, factory);
        Ok(())
    }

    /// Like [`Registry::register`], taking a closure.
    pub fn register_fn<F>(
        &mut self,
        name: impl Into<String>,
        factory: F,
    ) -> Result<(), RegistryError>
    where
        F: Fn(Option<&[u8]>) -> std::result::Result<Arc<dyn CloudProvider>, BoxError>
            + Send
            + Sync
            + 'static,
    {
        self.register(name, Arc::new(factory))
    }

    /// Declares the controllers of its own `provider` offers ([`crate::CloudProvider::controllers`]), so
    /// that `--controllers` can be checked before the provider is built. Replaces an earlier declaration.
    pub fn declare_controllers(
        &mut self,
        provider: impl Into<String>,
        controllers: &[ControllerInfo],
    ) {
        self.controllers
            .insert(provider.into(), controllers.to_vec());
    }

    /// The controllers `provider` declared (none when it declared none or is unknown).
    pub fn controllers_of(&self, provider: &str) -> &[ControllerInfo] {
        self.controllers
            .get(provider)
            .map(Vec::as_slice)
            .unwrap_or_default()
    }

    /// The registered names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.factories.keys().cloned().collect()
    }

    /// Whether `name` is registered.
    pub fn contains(&self, name: &str) -> bool {
        self.factories.contains_key(name)
    }

    /// Whether no provider is registered.
    pub fn is_empty(&self) -> bool {
        self.factories.is_empty()
    }

    /// Builds the provider `name` from the cloud-config bytes.
    pub fn init(
        &self,
        name: &str,
        config: Option<&[u8]>,
    ) -> Result<Arc<dyn CloudProvider>, RegistryError> {
        let factory = self.factory(name)?;
        factory(config).map_err(|source| RegistryError::Init {
            name: name.to_string(),
            source,
        })
    }

    /// Builds the provider `name` from the cloud-config file at `path` (none when `path` is `None`).
    /// The name is checked before the file is read; an unreadable file is an error naming the path.
    pub fn init_from_file(
        &self,
        name: &str,
        path: Option<&Path>,
    ) -> Result<Arc<dyn CloudProvider>, RegistryError> {
        self.factory(name)?;
        let bytes = match path {
            Some(path) => {
                Some(
                    std::fs::read(path).map_err(|source| RegistryError::Unreadable {
                        path: path.to_path_buf(),
                        source,
                    })?,
                )
            }
            None => None,
        };
        self.init(name, bytes.as_deref())
    }

    fn factory(&self, name: &str) -> Result<&ProviderFactory, RegistryError> {
        check_name(name)?;
        self.factories
            .get(name)
            .ok_or_else(|| RegistryError::Unknown {
                name: name.to_string(),
                known: self.names(),
            })
    }
}

fn check_name(name: &str) -> Result<(), RegistryError> {
    if name.trim().is_empty() {
        Err(RegistryError::Empty)
    } else if name == EXTERNAL_PROVIDER_NAME {
        Err(RegistryError::External)
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;
    use std::sync::Mutex;

    struct Named(String);

    impl CloudProvider for Named {
        fn provider_name(&self) -> &str {
            &self.0
        }
        fn has_cluster_id(&self) -> bool {
            true
        }
    }

    fn factory(name: &'static str) -> ProviderFactory {
        Arc::new(move |cfg: Option<&[u8]>| {
            let _ = cfg;
            Ok(Arc::new(Named(name.to_string())) as Arc<dyn CloudProvider>)
        })
    }

    fn registry() -> Registry {
        let mut r = Registry::new();
        r.register("zeta", factory("zeta")).unwrap();
        r.register("alpha", factory("alpha")).unwrap();
        r
    }

    #[test]
    fn declared_controllers_are_kept_per_provider() {
        let mut r = Registry::new();
        const FIREWALL: ControllerInfo = ControllerInfo::new("firewall-controller", "firewall");
        r.declare_controllers("alpha", &[FIREWALL]);
        assert_eq!(r.controllers_of("alpha"), [FIREWALL]);
        assert!(r.controllers_of("zeta").is_empty());
    }

    #[test]
    fn names_are_sorted() {
        let r = registry();
        assert_eq!(r.names(), vec!["alpha", "zeta"]);
        assert!(r.contains("alpha"));
        assert!(!r.contains("beta"));
        assert!(!r.is_empty());
        assert!(Registry::new().is_empty());
        assert_eq!(
            format!("{r:?}"),
            r#"Registry { providers: ["alpha", "zeta"] }"#
        );
    }

    #[test]
    fn duplicate_is_refused_and_first_kept() {
        let mut r = registry();
        let err = r.register("alpha", factory("other")).unwrap_err();
        assert!(matches!(&err, RegistryError::Duplicate { name } if name == "alpha"));
        assert_eq!(
            err.to_string(),
            r#"cloud provider "alpha" was registered twice"#
        );
        assert_eq!(r.init("alpha", None).unwrap().provider_name(), "alpha");
    }

    #[test]
    fn unknown_lists_known_names() {
        let err = registry().init("nonesuch", None).err().unwrap();
        assert!(
            matches!(&err, RegistryError::Unknown { name, known } if name == "nonesuch" && known == &["alpha", "zeta"])
        );
        assert_eq!(
            err.to_string(),
            r#"unknown cloud provider "nonesuch" (compiled-in providers: alpha, zeta)"#
        );
        let err = Registry::new().init("x", None).err().unwrap();
        assert_eq!(
            err.to_string(),
            r#"unknown cloud provider "x" (compiled-in providers: none)"#
        );
    }

    #[test]
    fn empty_and_external_are_refused() {
        let r = registry();
        let err = r.init("", None).err().unwrap();
        assert!(matches!(err, RegistryError::Empty));
        assert!(err.to_string().contains("needs a concrete provider name"));
        let err = r.init("external", None).err().unwrap();
        assert!(matches!(err, RegistryError::External));
        assert!(
            err.to_string()
                .contains("this program is that cloud-controller-manager")
        );
        let mut r = Registry::new();
        assert!(matches!(
            r.register("", factory("x")),
            Err(RegistryError::Empty)
        ));
        assert!(matches!(
            r.register("external", factory("x")),
            Err(RegistryError::External)
        ));
        assert!(r.is_empty());
    }

    #[test]
    fn init_passes_config_and_wraps_factory_error() {
        let seen: Arc<Mutex<Option<Vec<u8>>>> = Arc::default();
        let seen2 = seen.clone();
        let mut r = Registry::new();
        r.register_fn("cfg", move |cfg| {
            *seen2.lock().unwrap() = cfg.map(<[u8]>::to_vec);
            match cfg {
                Some(b"bad") => Err("field `region` is missing".into()),
                _ => Ok(Arc::new(Named("cfg".into())) as Arc<dyn CloudProvider>),
            }
        })
        .unwrap();
        r.init("cfg", Some(b"region: x")).unwrap();
        assert_eq!(seen.lock().unwrap().as_deref(), Some(&b"region: x"[..]));
        let err = r.init("cfg", Some(b"bad")).err().unwrap();
        assert!(matches!(&err, RegistryError::Init { name, .. } if name == "cfg"));
        assert_eq!(
            err.to_string(),
            r#"could not init cloud provider "cfg": field `region` is missing"#
        );
        assert_eq!(
            err.source().map(|s| s.to_string()).as_deref(),
            Some("field `region` is missing")
        );
    }

    #[test]
    fn init_from_file() {
        let r = registry();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cloud.yaml");
        std::fs::write(&path, b"zones: [a]").unwrap();
        let p = r.init_from_file("alpha", Some(&path)).unwrap();
        assert_eq!(p.provider_name(), "alpha");
        assert_eq!(
            r.init_from_file("alpha", None).unwrap().provider_name(),
            "alpha"
        );

        let missing = dir.path().join("missing.yaml");
        let err = r.init_from_file("alpha", Some(&missing)).err().unwrap();
        assert!(matches!(&err, RegistryError::Unreadable { path, .. } if path == &missing));
        let msg = err.to_string();
        assert!(msg.contains(&missing.display().to_string()), "{msg}");
        assert!(msg.starts_with("could not read cloud config file"), "{msg}");

        // The name is checked before the file.
        let err = r.init_from_file("nonesuch", Some(&missing)).err().unwrap();
        assert!(matches!(err, RegistryError::Unknown { .. }));
    }

    #[test]
    fn config_bytes_reach_the_provider() {
        let mut r = Registry::new();
        r.register_fn("probe", |cfg| {
            let len = cfg.map_or(0, <[u8]>::len);
            Ok(Arc::new(Named(format!("probe-{len}"))) as Arc<dyn CloudProvider>)
        })
        .unwrap();
        assert_eq!(
            r.init("probe", Some(b"abc")).unwrap().provider_name(),
            "probe-3"
        );
        assert_eq!(r.init("probe", None).unwrap().provider_name(), "probe-0");
    }
}
