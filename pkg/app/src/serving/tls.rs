//! TLS of an HTTPS endpoint, as upstream's secure serving options configure it: the certificate from
//! `--tls-cert-file`/`--tls-private-key-file`, from `--cert-dir` (read, or generated and written there) or a
//! self-signed one made in memory; named certificates (`--tls-sni-cert-key`); the minimum version, cipher
//! suites and key exchange groups; HTTP/2 by ALPN unless disabled; and client certificates, verified
//! against the client and request-header CAs when there are any (optional: callers may also use tokens).
//!
//! The endpoint speaks TLS 1.2 and 1.3 with rustls: of Go's cipher suites it offers the AEAD ones with an
//! ECDHE key exchange (TLS 1.3's are always on, as in Go); of Go's curves, P-256, P-384 and X25519.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;

use crate::options::values::NamedCertKey;

/// Errors preparing TLS.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or written.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// `read` or `write`.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A file holds no usable PEM item of the expected kind.
    #[error("{}: {what}", path.display())]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// The self-signed certificate could not be generated.
    #[error("cannot generate a self-signed serving certificate: {0}")]
    Generate(#[source] rcgen::Error),
    /// A CA bundle holds no usable certificate.
    #[error("client CA: {0}")]
    ClientCa(String),
    /// The settings leave nothing to negotiate with.
    #[error("{0}")]
    Settings(String),
    /// rustls refused the configuration (e.g. the key does not match the certificate).
    #[error("invalid TLS configuration: {0}")]
    Rustls(#[source] rustls::Error),
}

impl TlsError {
    fn read(path: &Path, source: std::io::Error) -> Self {
        TlsError::Io {
            action: "read",
            path: path.to_path_buf(),
            source,
        }
    }
}

/// A certificate chain with its private key.
#[derive(Debug)]
pub struct ServingCert {
    /// The chain, leaf first.
    pub chain: Vec<CertificateDer<'static>>,
    /// The leaf's key.
    pub key: PrivateKeyDer<'static>,
}

impl Clone for ServingCert {
    fn clone(&self) -> Self {
        Self {
            chain: self.chain.clone(),
            key: self.key.clone_key(),
        }
    }
}

/// The crypto provider of the whole program: rustls with ring.
pub fn crypto_provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Loads a PEM certificate chain and private key.
pub fn load_cert_and_key(cert: &Path, key: &Path) -> Result<ServingCert, TlsError> {
    let cert_pem = std::fs::read(cert).map_err(|source| TlsError::read(cert, source))?;
    let chain = rustls_pemfile::certs(&mut cert_pem.as_slice())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| TlsError::Pem {
            path: cert.to_path_buf(),
            what: format!("malformed PEM: {err}"),
        })?;
    if chain.is_empty() {
        return Err(TlsError::Pem {
            path: cert.to_path_buf(),
            what: "no CERTIFICATE block found".to_string(),
        });
    }
    let key_pem = std::fs::read(key).map_err(|source| TlsError::read(key, source))?;
    let key = rustls_pemfile::private_key(&mut key_pem.as_slice())
        .map_err(|err| TlsError::Pem {
            path: key.to_path_buf(),
            what: format!("malformed PEM: {err}"),
        })?
        .ok_or_else(|| TlsError::Pem {
            path: key.to_path_buf(),
            what: "no PRIVATE KEY block found".to_string(),
        })?;
    Ok(ServingCert { chain, key })
}

/// A self-signed certificate as PEM texts (certificate, key) for `localhost`, `127.0.0.1`, `::1`, the host
/// name and the bind address.
fn self_signed_pem(bind: IpAddr) -> Result<(String, String), TlsError> {
    let mut names = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    if !bind.is_unspecified() && !bind.is_loopback() {
        names.push(bind.to_string());
    }
    if let Some(host) = hostname::get().ok().and_then(|h| h.into_string().ok())
        && !host.is_empty()
        && !names.contains(&host)
        && host.parse::<IpAddr>().is_err()
    {
        names.push(host);
    }
    let mut params = rcgen::CertificateParams::new(names).map_err(TlsError::Generate)?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!("localhost@{}", jiff::Timestamp::now().as_second()),
    );
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let key = rcgen::KeyPair::generate().map_err(TlsError::Generate)?;
    let cert = params.self_signed(&key).map_err(TlsError::Generate)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// A self-signed certificate made in memory (see [`self_signed_pem`] for its names).
pub fn self_signed(bind: IpAddr) -> Result<ServingCert, TlsError> {
    let (cert, key) = self_signed_pem(bind)?;
    let chain = rustls_pemfile::certs(&mut cert.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| TlsError::Settings(format!("generated certificate: {err}")))?;
    let key = rustls_pemfile::private_key(&mut key.as_bytes())
        .ok()
        .flatten()
        .ok_or_else(|| TlsError::Settings("generated key: no PRIVATE KEY block".to_string()))?;
    Ok(ServingCert { chain, key })
}

/// The certificate and key files of `--cert-dir`: `<dir>/<pair>.crt` and `<dir>/<pair>.key`, read when
/// both exist, generated (self-signed) and written when neither does; one without the other is an error.
pub fn cert_dir_files(
    dir: &Path,
    pair: &str,
    bind: IpAddr,
) -> Result<(PathBuf, PathBuf), TlsError> {
    let cert = dir.join(format!("{pair}.crt"));
    let key = dir.join(format!("{pair}.key"));
    match (cert.exists(), key.exists()) {
        (true, true) => return Ok((cert, key)),
        (true, false) | (false, true) => {
            return Err(TlsError::Settings(format!(
                "--cert-dir: found only one of {} and {}: the certificate and key must be supplied as \
                 a pair",
                cert.display(),
                key.display()
            )));
        }
        (false, false) => {}
    }
    let (cert_pem, key_pem) = self_signed_pem(bind)?;
    let write = |path: &Path, text: &str, mode: u32| -> Result<(), TlsError> {
        let io = |source| TlsError::Io {
            action: "write",
            path: path.to_path_buf(),
            source,
        };
        std::fs::write(path, text).map_err(io)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io)?;
        }
        #[cfg(not(unix))]
        let _ = mode;
        Ok(())
    };
    std::fs::create_dir_all(dir).map_err(|source| TlsError::Io {
        action: "write",
        path: dir.to_path_buf(),
        source,
    })?;
    write(&cert, &cert_pem, 0o644)?;
    write(&key, &key_pem, 0o600)?;
    tracing::info!(cert = %cert.display(), key = %key.display(), "generated a self-signed serving certificate");
    Ok((cert, key))
}

/// Parses a PEM bundle of CA certificates into a root store.
pub fn client_ca_roots(pem: &str) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    add_roots_from(&mut roots, pem)?;
    if roots.is_empty() {
        return Err(TlsError::ClientCa("no CERTIFICATE block found".to_string()));
    }
    Ok(roots)
}

/// Adds the certificates of a PEM bundle to `roots`.
pub fn add_roots_from(roots: &mut RootCertStore, pem: &str) -> Result<(), TlsError> {
    for cert in rustls_pemfile::certs(&mut pem.as_bytes()) {
        let cert = cert.map_err(|err| TlsError::ClientCa(format!("malformed PEM: {err}")))?;
        roots
            .add(cert)
            .map_err(|err| TlsError::ClientCa(format!("unusable certificate: {err}")))?;
    }
    Ok(())
}

/// The lowest TLS version the endpoint accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MinTlsVersion {
    /// TLS 1.2 (upstream's default; also what `VersionTLS10` and `VersionTLS11` give here).
    #[default]
    Tls12,
    /// TLS 1.3 only.
    Tls13,
}

/// Parses `--tls-min-version`: empty or one of Go's names. TLS 1.0 and 1.1 are accepted and give TLS 1.2,
/// the lowest version rustls speaks (the second value says so).
pub fn parse_min_version(text: &str) -> Result<(MinTlsVersion, bool), String> {
    match text.trim() {
        "" | "VersionTLS12" => Ok((MinTlsVersion::Tls12, false)),
        "VersionTLS10" | "VersionTLS11" => Ok((MinTlsVersion::Tls12, true)),
        "VersionTLS13" => Ok((MinTlsVersion::Tls13, false)),
        other => Err(format!("unknown tls version {other:?}")),
    }
}

/// Go's cipher suite names (`tls.CipherSuites()`, `tls.InsecureCipherSuites()` and the two legacy
/// ChaCha20 names), with the rustls suite of each one this endpoint offers.
fn go_cipher_suite(name: &str) -> Option<Option<rustls::SupportedCipherSuite>> {
    use rustls::crypto::ring::cipher_suite as s;
    Some(match name {
        "TLS_AES_128_GCM_SHA256" => Some(s::TLS13_AES_128_GCM_SHA256),
        "TLS_AES_256_GCM_SHA384" => Some(s::TLS13_AES_256_GCM_SHA384),
        "TLS_CHACHA20_POLY1305_SHA256" => Some(s::TLS13_CHACHA20_POLY1305_SHA256),
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256" => {
            Some(s::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256)
        }
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384" => {
            Some(s::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384)
        }
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256" => Some(s::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256),
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384" => Some(s::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384),
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"
        | "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305" => {
            Some(s::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256)
        }
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256" | "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305" => {
            Some(s::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256)
        }
        "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA"
        | "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA"
        | "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA"
        | "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA"
        | "TLS_RSA_WITH_RC4_128_SHA"
        | "TLS_RSA_WITH_3DES_EDE_CBC_SHA"
        | "TLS_RSA_WITH_AES_128_CBC_SHA"
        | "TLS_RSA_WITH_AES_256_CBC_SHA"
        | "TLS_RSA_WITH_AES_128_CBC_SHA256"
        | "TLS_RSA_WITH_AES_128_GCM_SHA256"
        | "TLS_RSA_WITH_AES_256_GCM_SHA384"
        | "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA"
        | "TLS_ECDHE_RSA_WITH_RC4_128_SHA"
        | "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA"
        | "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256"
        | "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256" => None,
        _ => return None,
    })
}

/// Checks `--tls-cipher-suites` as upstream does: every name must be one of Go's (message as upstream's).
pub fn check_cipher_suites(names: &[String]) -> Result<(), String> {
    for name in names.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        if go_cipher_suite(name).is_none() {
            return Err(format!(
                "Cipher suite {name} not supported or doesn't exist"
            ));
        }
    }
    Ok(())
}

/// The named groups of Go's CurveIDs this endpoint offers: 23 (P-256), 24 (P-384), 29 (X25519).
fn go_curve(id: i32) -> Option<&'static dyn rustls::crypto::SupportedKxGroup> {
    use rustls::crypto::ring::kx_group as kx;
    match id {
        23 => Some(kx::SECP256R1),
        24 => Some(kx::SECP384R1),
        29 => Some(kx::X25519),
        _ => None,
    }
}

/// The validated TLS settings of an endpoint (everything but the certificate source and client CAs).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TlsSettings {
    /// `--tls-min-version`.
    pub min_version: MinTlsVersion,
    /// `--tls-cipher-suites` (Go names, checked); empty for the defaults.
    pub cipher_suites: Vec<String>,
    /// `--tls-curve-preferences`; empty for the defaults.
    pub curves: Vec<i32>,
    /// `--tls-sni-cert-key`.
    pub sni: Vec<NamedCertKey>,
    /// ALPN `h2` (unless `--disable-http2-serving`).
    pub http2: bool,
}

impl TlsSettings {
    /// The crypto provider these settings leave: the suites and groups offered. Names that rustls does not
    /// implement are left out (logged once); an error when nothing is left to negotiate with.
    fn provider(
        &self,
    ) -> Result<
        (
            CryptoProvider,
            Vec<&'static rustls::SupportedProtocolVersion>,
        ),
        TlsError,
    > {
        let mut provider = rustls::crypto::ring::default_provider();
        let mut versions: Vec<&'static rustls::SupportedProtocolVersion> = match self.min_version {
            MinTlsVersion::Tls12 => vec![&rustls::version::TLS13, &rustls::version::TLS12],
            MinTlsVersion::Tls13 => vec![&rustls::version::TLS13],
        };
        if !self.cipher_suites.is_empty() {
            let chosen: Vec<rustls::SupportedCipherSuite> = self
                .cipher_suites
                .iter()
                .filter_map(|name| go_cipher_suite(name.trim()).flatten())
                .filter(|suite| suite.version() == &rustls::version::TLS12)
                .collect();
            provider.cipher_suites.retain(|suite| {
                suite.version() == &rustls::version::TLS13 || chosen.contains(suite)
            });
            if !provider
                .cipher_suites
                .iter()
                .any(|s| s.version() == &rustls::version::TLS12)
            {
                versions.retain(|v| *v != &rustls::version::TLS12);
            }
        }
        if !self.curves.is_empty() {
            let groups: Vec<&'static dyn rustls::crypto::SupportedKxGroup> =
                self.curves.iter().filter_map(|id| go_curve(*id)).collect();
            if groups.is_empty() {
                return Err(TlsError::Settings(format!(
                    "none of the key exchange groups {:?} of --tls-curve-preferences is offered by this \
                     endpoint (it offers 23 P-256, 24 P-384 and 29 X25519)",
                    self.curves
                )));
            }
            provider.kx_groups = groups;
        }
        Ok((provider, versions))
    }

    /// What of these settings this endpoint cannot honour as Go would: one message each, for the start-up
    /// log.
    pub fn notices(&self) -> Vec<String> {
        let mut notices = Vec::new();
        let unoffered: Vec<&str> = self
            .cipher_suites
            .iter()
            .map(|n| n.trim())
            .filter(|n| matches!(go_cipher_suite(n), Some(None)))
            .collect();
        if !unoffered.is_empty() {
            notices.push(format!(
                "cipher suites not offered (only AEAD suites with an ECDHE key exchange are): {}",
                unoffered.join(", ")
            ));
        }
        let tls12 = self
            .cipher_suites
            .iter()
            .filter_map(|name| go_cipher_suite(name.trim()).flatten())
            .any(|suite| suite.version() == &rustls::version::TLS12);
        if !self.cipher_suites.is_empty() && !tls12 && self.min_version == MinTlsVersion::Tls12 {
            notices.push(
                "no TLS 1.2 cipher suite of --tls-cipher-suites is offered: serving TLS 1.3 only"
                    .to_string(),
            );
        }
        let curves: Vec<String> = self
            .curves
            .iter()
            .filter(|id| go_curve(**id).is_none())
            .map(i32::to_string)
            .collect();
        if !curves.is_empty() {
            notices.push(format!(
                "key exchange groups not offered: {} (offered: 23 P-256, 24 P-384, 29 X25519)",
                curves.join(", ")
            ));
        }
        notices
    }
}

/// What a rustls configuration is built from.
pub struct ServerTlsInputs<'a> {
    /// The default certificate.
    pub cert: ServingCert,
    /// The named certificates, loaded, with the names each answers.
    pub named: Vec<(Vec<String>, ServingCert)>,
    /// The CAs client certificates are verified against (client CA and request-header CA together).
    pub client_cas: Option<RootCertStore>,
    /// The settings.
    pub settings: &'a TlsSettings,
}

/// The rustls server configuration of `inputs`.
pub fn server_config(inputs: ServerTlsInputs<'_>) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let (provider, versions) = inputs.settings.provider()?;
    let provider = Arc::new(provider);
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(TlsError::Rustls)?;
    let builder = match inputs.client_cas {
        Some(roots) => {
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                    .allow_unauthenticated()
                    .build()
                    .map_err(|err| TlsError::ClientCa(err.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = if inputs.named.is_empty() {
        builder
            .with_single_cert(inputs.cert.chain, inputs.cert.key)
            .map_err(TlsError::Rustls)?
    } else {
        let certified = |cert: ServingCert| -> Result<Arc<CertifiedKey>, TlsError> {
            CertifiedKey::from_der(cert.chain, cert.key, &provider)
                .map(Arc::new)
                .map_err(TlsError::Rustls)
        };
        let mut resolver = SniResolver {
            default: certified(inputs.cert)?,
            named: Vec::new(),
        };
        for (names, cert) in inputs.named {
            let key = certified(cert)?;
            for name in names {
                resolver
                    .named
                    .push((name.to_ascii_lowercase(), key.clone()));
            }
        }
        builder.with_cert_resolver(Arc::new(resolver))
    };
    config.alpn_protocols = if inputs.settings.http2 {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    Ok(Arc::new(config))
}

/// Loads the named certificates of `--tls-sni-cert-key`, each with its names: those given, else the
/// certificate's own (its common name when it is a DNS name, and its DNS subject alternative names).
pub fn load_named(named: &[NamedCertKey]) -> Result<Vec<(Vec<String>, ServingCert)>, TlsError> {
    named
        .iter()
        .map(|entry| {
            let cert = load_cert_and_key(&entry.cert_file, &entry.key_file)?;
            let names = if entry.names.is_empty() {
                certificate_names(cert.chain[0].as_ref())
            } else {
                entry.names.clone()
            };
            Ok((names, cert))
        })
        .collect()
}

/// The DNS names a certificate is for: its common name when that is a DNS name, and its DNS SANs.
fn certificate_names(der: &[u8]) -> Vec<String> {
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
        return Vec::new();
    };
    let mut names: Vec<String> = cert
        .subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok())
        .filter(|cn| cn.parse::<IpAddr>().is_err() && !cn.is_empty() && !cn.contains(' '))
        .map(str::to_string)
        .collect();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            if let x509_parser::extensions::GeneralName::DNSName(dns) = name {
                names.push((*dns).to_string());
            }
        }
    }
    names
}

/// Picks the certificate for the name a client asks for: an exact name first, then a `*.` wildcard for
/// one label, earlier flags first; the default certificate otherwise.
#[derive(Debug)]
struct SniResolver {
    default: Arc<CertifiedKey>,
    named: Vec<(String, Arc<CertifiedKey>)>,
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let Some(name) = hello.server_name().map(str::to_ascii_lowercase) else {
            return Some(self.default.clone());
        };
        if let Some((_, key)) = self.named.iter().find(|(n, _)| *n == name) {
            return Some(key.clone());
        }
        let parent = name.split_once('.').map(|(_, rest)| rest);
        let wildcard = self.named.iter().find(|(n, _)| {
            n.strip_prefix("*.")
                .is_some_and(|suffix| Some(suffix) == parent)
        });
        Some(
            wildcard
                .map(|(_, key)| key.clone())
                .unwrap_or_else(|| self.default.clone()),
        )
    }
}

/// The user named by a client certificate: the subject's common name, with its organizations as groups
/// (Kubernetes' convention) and, when `with_uid`, the subject's UID attribute as the user's UID.
pub fn certificate_user(
    der: &[u8],
    with_uid: bool,
) -> Option<(String, Vec<String>, Option<String>)> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let user = subject
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())?
        .to_string();
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok())
        .map(str::to_string)
        .collect();
    let uid = with_uid
        .then(|| {
            let oid = x509_parser::der_parser::oid!(0.9.2342.19200300.100.1.1);
            subject
                .iter_by_oid(&oid)
                .next()
                .and_then(|attr| attr.as_str().ok())
                .map(str::to_string)
        })
        .flatten();
    Some((user, groups, uid))
}

/// The common name of a certificate's subject.
pub fn common_name(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    cert.subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> TlsSettings {
        TlsSettings {
            http2: true,
            ..TlsSettings::default()
        }
    }

    fn config(cert: ServingCert, settings: &TlsSettings) -> Arc<rustls::ServerConfig> {
        server_config(ServerTlsInputs {
            cert,
            named: Vec::new(),
            client_cas: None,
            settings,
        })
        .unwrap()
    }

    #[test]
    fn self_signed_works_with_rustls() {
        let cert = self_signed("0.0.0.0".parse().unwrap()).unwrap();
        assert_eq!(cert.chain.len(), 1);
        let config = config(cert, &settings());
        assert_eq!(config.alpn_protocols[0], b"h2");
        let cert = self_signed("127.0.0.1".parse().unwrap()).unwrap();
        let http1 = config_for(cert, false);
        assert_eq!(http1.alpn_protocols, vec![b"http/1.1".to_vec()]);
    }

    fn config_for(cert: ServingCert, http2: bool) -> Arc<rustls::ServerConfig> {
        config(
            cert,
            &TlsSettings {
                http2,
                ..TlsSettings::default()
            },
        )
    }

    #[test]
    fn files_are_loaded_and_errors_name_them() {
        let dir = tempfile::tempdir().unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let cert_path = dir.path().join("tls.crt");
        let key_path = dir.path().join("tls.key");
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        let loaded = load_cert_and_key(&cert_path, &key_path).unwrap();
        assert_eq!(loaded.chain[0].as_ref(), cert.der().as_ref());
        config(loaded, &settings());

        let missing = dir.path().join("missing.key");
        let err = load_cert_and_key(&cert_path, &missing).unwrap_err();
        assert!(
            err.to_string()
                .starts_with(&format!("cannot read {}", missing.display()))
        );
        let err = load_cert_and_key(&key_path, &key_path).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("{}: no CERTIFICATE block found", key_path.display())
        );
        let err = load_cert_and_key(&cert_path, &cert_path).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("{}: no PRIVATE KEY block found", cert_path.display())
        );
    }

    #[test]
    fn cert_dir_generates_once_then_reads() {
        let dir = tempfile::tempdir().unwrap();
        let certs = dir.path().join("certs");
        let ip = "127.0.0.1".parse().unwrap();
        let (cert, key) = cert_dir_files(&certs, "cloud-controller-manager", ip).unwrap();
        assert_eq!(cert, certs.join("cloud-controller-manager.crt"));
        let first = std::fs::read(&cert).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&key).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        load_cert_and_key(&cert, &key).unwrap();
        cert_dir_files(&certs, "cloud-controller-manager", ip).unwrap();
        assert_eq!(
            std::fs::read(&cert).unwrap(),
            first,
            "reused, not regenerated"
        );
        std::fs::remove_file(&key).unwrap();
        let err = cert_dir_files(&certs, "cloud-controller-manager", ip).unwrap_err();
        assert!(
            err.to_string().contains("must be supplied as a pair"),
            "{err}"
        );
    }

    #[test]
    fn cipher_suites_and_versions() {
        assert!(check_cipher_suites(&["TLS_AES_128_GCM_SHA256".into()]).is_ok());
        assert!(check_cipher_suites(&["TLS_RSA_WITH_AES_128_CBC_SHA".into()]).is_ok());
        assert_eq!(
            check_cipher_suites(&["FOO".into()]).unwrap_err(),
            "Cipher suite FOO not supported or doesn't exist"
        );
        assert_eq!(parse_min_version(""), Ok((MinTlsVersion::Tls12, false)));
        assert_eq!(
            parse_min_version("VersionTLS11"),
            Ok((MinTlsVersion::Tls12, true))
        );
        assert_eq!(
            parse_min_version("VersionTLS13"),
            Ok((MinTlsVersion::Tls13, false))
        );
        assert_eq!(
            parse_min_version("VersionTLS14").unwrap_err(),
            "unknown tls version \"VersionTLS14\""
        );

        let only_cbc = TlsSettings {
            cipher_suites: vec!["TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA".into()],
            http2: true,
            ..TlsSettings::default()
        };
        let (provider, versions) = only_cbc.provider().unwrap();
        assert_eq!(versions, vec![&rustls::version::TLS13]);
        assert!(
            provider
                .cipher_suites
                .iter()
                .all(|s| s.version() == &rustls::version::TLS13)
        );
        assert_eq!(only_cbc.notices().len(), 2, "{:?}", only_cbc.notices());

        let one = TlsSettings {
            cipher_suites: vec!["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256".into()],
            curves: vec![29, 25],
            ..TlsSettings::default()
        };
        let (provider, versions) = one.provider().unwrap();
        assert_eq!(versions.len(), 2);
        assert_eq!(
            provider
                .cipher_suites
                .iter()
                .filter(|s| s.version() == &rustls::version::TLS12)
                .count(),
            1
        );
        assert_eq!(provider.kx_groups.len(), 1);
        assert_eq!(
            one.notices(),
            ["key exchange groups not offered: 25 (offered: 23 P-256, 24 P-384, 29 X25519)"]
        );
        let none = TlsSettings {
            curves: vec![25],
            ..TlsSettings::default()
        };
        assert!(none.provider().is_err());
    }

    fn ca() -> (rcgen::CertificateParams, rcgen::KeyPair, rcgen::Certificate) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        (params, key, cert)
    }

    #[test]
    fn client_certificates_name_users() {
        let (ca_params, ca_key, ca) = ca();
        let roots = client_ca_roots(&ca.pem()).unwrap();
        assert_eq!(roots.len(), 1);
        server_config(ServerTlsInputs {
            cert: self_signed("127.0.0.1".parse().unwrap()).unwrap(),
            named: Vec::new(),
            client_cas: Some(roots),
            settings: &settings(),
        })
        .unwrap();

        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "alice");
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "ops");
        params.distinguished_name.push(
            rcgen::DnType::CustomDnType(vec![0, 9, 2342, 19200300, 100, 1, 1]),
            "uid-1",
        );
        let key = rcgen::KeyPair::generate().unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let cert = params.signed_by(&key, &issuer).unwrap();
        assert_eq!(
            certificate_user(cert.der(), false),
            Some(("alice".to_string(), vec!["ops".to_string()], None))
        );
        assert_eq!(
            certificate_user(cert.der(), true).unwrap().2.as_deref(),
            Some("uid-1")
        );
        assert_eq!(common_name(cert.der()).as_deref(), Some("alice"));
        assert_eq!(certificate_user(b"garbage", true), None);
        assert!(client_ca_roots("").is_err());
    }

    #[test]
    fn named_certificates_take_their_own_names() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec![
            "a.example.com".to_string(),
            "10.0.0.1".to_string(),
        ])
        .unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "main.example.com");
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(
            certificate_names(cert.der()),
            ["main.example.com", "a.example.com"]
        );
    }
}
