//! TLS for the serving endpoint: the certificate from `--tls-cert-file`/`--tls-private-key-file` or a
//! self-signed one made in memory, and optional client-certificate authentication against a client CA.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;

/// Errors preparing TLS.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
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
    /// The client CA bundle holds no usable certificate.
    #[error("client CA: {0}")]
    ClientCa(String),
    /// rustls refused the configuration (e.g. the key does not match the certificate).
    #[error("invalid TLS configuration: {0}")]
    Rustls(#[source] rustls::Error),
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
    let cert_pem = std::fs::read(cert).map_err(|source| TlsError::Read {
        path: cert.to_path_buf(),
        source,
    })?;
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
    let key_pem = std::fs::read(key).map_err(|source| TlsError::Read {
        path: key.to_path_buf(),
        source,
    })?;
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

/// A self-signed certificate for `localhost`, `127.0.0.1`, `::1`, the host name and the bind address.
pub fn self_signed(bind: IpAddr) -> Result<ServingCert, TlsError> {
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
    Ok(ServingCert {
        chain: vec![cert.der().clone()],
        key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
    })
}

/// Parses a PEM bundle of CA certificates into a root store.
pub fn client_ca_roots(pem: &str) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut pem.as_bytes()) {
        let cert = cert.map_err(|err| TlsError::ClientCa(format!("malformed PEM: {err}")))?;
        roots
            .add(cert)
            .map_err(|err| TlsError::ClientCa(format!("unusable certificate: {err}")))?;
    }
    if roots.is_empty() {
        return Err(TlsError::ClientCa("no CERTIFICATE block found".to_string()));
    }
    Ok(roots)
}

/// The rustls server configuration: HTTP/2 and HTTP/1.1, and, with `client_ca`, optional client
/// certificates verified against it (requests without one fall back to bearer tokens).
pub fn server_config(
    cert: ServingCert,
    client_ca: Option<RootCertStore>,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let provider = crypto_provider();
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Rustls)?;
    let builder = match client_ca {
        Some(roots) => {
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .map_err(|err| TlsError::ClientCa(err.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(cert.chain, cert.key)
        .map_err(TlsError::Rustls)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The user named by a verified client certificate: the subject's common name, with its organizations
/// as groups (Kubernetes' convention).
pub fn certificate_user(der: &[u8]) -> Option<(String, Vec<String>)> {
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
    Some((user, groups))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_signed_works_with_rustls() {
        let cert = self_signed("0.0.0.0".parse().unwrap()).unwrap();
        assert_eq!(cert.chain.len(), 1);
        let config = server_config(cert, None).unwrap();
        assert_eq!(config.alpn_protocols[0], b"h2");
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
        server_config(loaded, None).unwrap();

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
    fn client_certificates_name_users() {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let roots = client_ca_roots(&ca.pem()).unwrap();
        assert_eq!(roots.len(), 1);
        server_config(
            self_signed("127.0.0.1".parse().unwrap()).unwrap(),
            Some(roots),
        )
        .unwrap();

        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "alice");
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "ops");
        let key = rcgen::KeyPair::generate().unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let cert = params.signed_by(&key, &issuer).unwrap();
        assert_eq!(
            certificate_user(cert.der()),
            Some(("alice".to_string(), vec!["ops".to_string()]))
        );
        assert_eq!(certificate_user(b"garbage"), None);
        assert!(client_ca_roots("").is_err());
    }
}
