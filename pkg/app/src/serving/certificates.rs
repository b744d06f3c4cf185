//! The endpoint's TLS material as it changes: certificates and CA bundles read from files are reloaded when
//! a file changes (checked at most once a second, when a connection arrives), so a rotated certificate
//! (cert-manager, a kubelet-style rotation) is served without a restart; and the identity a client
//! certificate proves (a user of the client CA, or a proxy of the request-header CA).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;
use rustls::RootCertStore;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;

use super::tls::{
    self, ServerTlsInputs, ServingCert, TlsError, TlsSettings, add_roots_from, crypto_provider,
};

/// How often the files are checked for changes, at most.
const RELOAD_CHECK: Duration = Duration::from_secs(1);

/// Where a certificate comes from.
#[derive(Debug, Clone)]
pub enum CertSource {
    /// PEM files, reloaded when they change.
    Files {
        /// The certificate (chain).
        cert: PathBuf,
        /// Its key.
        key: PathBuf,
    },
    /// Made in memory at start-up.
    InMemory(ServingCert),
}

/// Where a CA bundle comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaSource {
    /// A PEM file, reloaded when it changes.
    File(PathBuf),
    /// PEM text (read from the cluster at start-up).
    Pem(String),
}

/// Everything the endpoint's TLS is made of.
#[derive(Debug, Clone)]
pub struct TlsMaterial {
    /// The default certificate.
    pub cert: CertSource,
    /// Versions, suites, groups, named certificates, ALPN.
    pub settings: TlsSettings,
    /// CAs of client certificates that name users.
    pub client_cas: Vec<CaSource>,
    /// CAs of client certificates of proxies that name users in request headers.
    pub proxy_cas: Vec<CaSource>,
    /// Whether a client certificate's UID attribute names the user's UID.
    pub uid_from_certificates: bool,
}

impl TlsMaterial {
    /// The files the material is read from, for change detection.
    fn files(&self) -> Vec<PathBuf> {
        let mut files = Vec::new();
        if let CertSource::Files { cert, key } = &self.cert {
            files.push(cert.clone());
            files.push(key.clone());
        }
        for named in &self.settings.sni {
            files.push(named.cert_file.clone());
            files.push(named.key_file.clone());
        }
        for ca in self.client_cas.iter().chain(&self.proxy_cas) {
            if let CaSource::File(path) = ca {
                files.push(path.clone());
            }
        }
        files
    }

    /// Reads the files and builds the TLS state.
    fn build(&self) -> Result<TlsState, TlsError> {
        let cert = match &self.cert {
            CertSource::Files { cert, key } => tls::load_cert_and_key(cert, key)?,
            CertSource::InMemory(cert) => cert.clone(),
        };
        let named = tls::load_named(&self.settings.sni)?;
        let client_roots = roots(&self.client_cas)?;
        let proxy_roots = roots(&self.proxy_cas)?;
        let mut all = RootCertStore::empty();
        for store in [&client_roots, &proxy_roots].into_iter().flatten() {
            all.roots.extend(store.roots.iter().cloned());
        }
        let config = tls::server_config(ServerTlsInputs {
            cert,
            named,
            client_cas: (!all.is_empty()).then_some(all),
            settings: &self.settings,
        })?;
        Ok(TlsState {
            config,
            client_verifier: client_roots.map(verifier).transpose()?,
            proxy_verifier: proxy_roots.map(verifier).transpose()?,
            uid_from_certificates: self.uid_from_certificates,
        })
    }
}

/// The CAs of `sources` in one store; `None` without sources.
fn roots(sources: &[CaSource]) -> Result<Option<RootCertStore>, TlsError> {
    if sources.is_empty() {
        return Ok(None);
    }
    let mut store = RootCertStore::empty();
    for source in sources {
        match source {
            CaSource::File(path) => {
                let pem = std::fs::read_to_string(path).map_err(|err| TlsError::Io {
                    action: "read",
                    path: path.clone(),
                    source: err,
                })?;
                add_roots_from(&mut store, &pem)
                    .map_err(|err| TlsError::ClientCa(format!("{}: {err}", path.display())))?;
            }
            CaSource::Pem(pem) => add_roots_from(&mut store, pem)?,
        }
    }
    if store.is_empty() {
        return Err(TlsError::ClientCa("no CERTIFICATE block found".to_string()));
    }
    Ok(Some(store))
}

/// A verifier of client certificates against `roots` alone.
fn verifier(roots: RootCertStore) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), crypto_provider())
        .build()
        .map_err(|err| TlsError::ClientCa(err.to_string()))
}

/// The TLS configuration in use, with what tells the identities of client certificates apart.
pub struct TlsState {
    /// The rustls configuration.
    pub config: Arc<rustls::ServerConfig>,
    client_verifier: Option<Arc<dyn ClientCertVerifier>>,
    proxy_verifier: Option<Arc<dyn ClientCertVerifier>>,
    uid_from_certificates: bool,
}

/// What a verified client certificate proves.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerCertificate {
    /// The user it names (common name, organizations as groups, UID), when a client CA signed it.
    pub user: Option<(String, Vec<String>, Option<String>)>,
    /// The proxy's common name, when the request-header CA signed it.
    pub proxy: Option<String>,
}

impl TlsState {
    /// What the client certificate `chain` (leaf first) proves.
    pub fn identify(&self, chain: &[CertificateDer<'static>]) -> PeerCertificate {
        let Some((leaf, intermediates)) = chain.split_first() else {
            return PeerCertificate::default();
        };
        let now = UnixTime::now();
        let verified = |verifier: &Option<Arc<dyn ClientCertVerifier>>| {
            verifier
                .as_ref()
                .is_some_and(|v| v.verify_client_cert(leaf, intermediates, now).is_ok())
        };
        PeerCertificate {
            user: verified(&self.client_verifier)
                .then(|| tls::certificate_user(leaf.as_ref(), self.uid_from_certificates))
                .flatten(),
            proxy: verified(&self.proxy_verifier)
                .then(|| tls::common_name(leaf.as_ref()))
                .flatten(),
        }
    }
}

/// The endpoint's TLS, reloaded when its files change.
pub struct ServerTls {
    material: TlsMaterial,
    files: Vec<PathBuf>,
    current: Mutex<Current>,
}

struct Current {
    state: Arc<TlsState>,
    stamps: Vec<Option<SystemTime>>,
    checked: Instant,
}

/// The modification times of `files` (`None` for one that cannot be read).
fn stamps(files: &[PathBuf]) -> Vec<Option<SystemTime>> {
    files
        .iter()
        .map(|f| std::fs::metadata(f).and_then(|m| m.modified()).ok())
        .collect()
}

impl ServerTls {
    /// Builds the TLS state of `material`; an error names the file or setting that is wrong.
    pub fn new(material: TlsMaterial) -> Result<Self, TlsError> {
        for notice in material.settings.notices() {
            tracing::warn!("{notice}");
        }
        let files = material.files();
        let state = Arc::new(material.build()?);
        Ok(ServerTls {
            current: Mutex::new(Current {
                state,
                stamps: stamps(&files),
                checked: Instant::now(),
            }),
            files,
            material,
        })
    }

    /// An in-memory self-signed certificate for `bind`, default settings, no client certificates (for
    /// embedders and tests).
    pub fn self_signed(bind: std::net::IpAddr) -> Result<Self, TlsError> {
        Self::new(TlsMaterial {
            cert: CertSource::InMemory(tls::self_signed(bind)?),
            settings: TlsSettings {
                http2: true,
                ..TlsSettings::default()
            },
            client_cas: Vec::new(),
            proxy_cas: Vec::new(),
            uid_from_certificates: false,
        })
    }

    /// The state to serve a new connection with: rebuilt first when a file changed (a broken new file
    /// keeps the previous state, with a warning, until it is fixed).
    pub fn current(&self) -> Arc<TlsState> {
        let mut current = self.current.lock();
        if self.files.is_empty() || current.checked.elapsed() < RELOAD_CHECK {
            return current.state.clone();
        }
        current.checked = Instant::now();
        let now = stamps(&self.files);
        if now != current.stamps {
            match self.material.build() {
                Ok(state) => {
                    tracing::info!("serving certificates or CAs changed on disk: reloaded");
                    current.state = Arc::new(state);
                    current.stamps = now;
                }
                Err(err) => {
                    tracing::warn!(error = %err, "serving certificates or CAs changed on disk but cannot be loaded; keeping the previous ones");
                    current.stamps = now;
                }
            }
        }
        current.state.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_pair(dir: &std::path::Path, name: &str) -> (PathBuf, PathBuf) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let cert_path = dir.join("tls.crt");
        let key_path = dir.join("tls.key");
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        (cert_path, key_path)
    }

    #[test]
    fn a_changed_file_is_reloaded_and_a_broken_one_keeps_the_old_state() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = write_pair(dir.path(), "one.example");
        let tls = ServerTls::new(TlsMaterial {
            cert: CertSource::Files {
                cert: cert.clone(),
                key,
            },
            settings: TlsSettings {
                http2: true,
                ..TlsSettings::default()
            },
            client_cas: Vec::new(),
            proxy_cas: Vec::new(),
            uid_from_certificates: true,
        })
        .unwrap();
        let first = tls.current();
        assert!(
            Arc::ptr_eq(&first, &tls.current()),
            "unchanged: the same state"
        );
        std::thread::sleep(RELOAD_CHECK + Duration::from_millis(50));
        write_pair(dir.path(), "two.example");
        // Some filesystems keep whole seconds: make the change visible.
        let later = SystemTime::now() + Duration::from_secs(2);
        std::fs::File::options()
            .write(true)
            .open(&cert)
            .unwrap()
            .set_modified(later)
            .unwrap();
        let second = tls.current();
        assert!(!Arc::ptr_eq(&first, &second), "reloaded");
        std::thread::sleep(RELOAD_CHECK + Duration::from_millis(50));
        std::fs::write(&cert, "not a certificate").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&cert)
            .unwrap()
            .set_modified(later + Duration::from_secs(2))
            .unwrap();
        assert!(
            Arc::ptr_eq(&second, &tls.current()),
            "a broken file keeps the state"
        );
    }

    #[test]
    fn client_and_proxy_certificates_are_told_apart() {
        let ca = |cn: &str| {
            let key = rcgen::KeyPair::generate().unwrap();
            let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
            params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, cn);
            let cert = params.self_signed(&key).unwrap();
            (cert.pem(), rcgen::Issuer::new(params, key))
        };
        let (client_pem, client_issuer) = ca("client-ca");
        let (proxy_pem, proxy_issuer) = ca("proxy-ca");
        let signed = |issuer: &rcgen::Issuer<'_, rcgen::KeyPair>, cn: &str| {
            let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, cn);
            params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
            let key = rcgen::KeyPair::generate().unwrap();
            params.signed_by(&key, issuer).unwrap().der().clone()
        };
        let state = TlsMaterial {
            cert: CertSource::InMemory(tls::self_signed("127.0.0.1".parse().unwrap()).unwrap()),
            settings: TlsSettings::default(),
            client_cas: vec![CaSource::Pem(client_pem)],
            proxy_cas: vec![CaSource::Pem(proxy_pem)],
            uid_from_certificates: false,
        }
        .build()
        .unwrap();
        let alice = state.identify(&[signed(&client_issuer, "alice")]);
        assert_eq!(alice.user.unwrap().0, "alice");
        assert_eq!(alice.proxy, None);
        let proxy = state.identify(&[signed(&proxy_issuer, "front-proxy-client")]);
        assert_eq!(proxy.user, None);
        assert_eq!(proxy.proxy.as_deref(), Some("front-proxy-client"));
        assert_eq!(state.identify(&[]), PeerCertificate::default());
    }
}
