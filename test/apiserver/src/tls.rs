//! TLS: a throw-away CA and a serving certificate for 127.0.0.1 and localhost, generated at start,
//! served with rustls (ring provider) offering HTTP/2 and HTTP/1.1 through ALPN.

use std::net::IpAddr;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::error::Error;

/// The generated certificate material.
pub(crate) struct Material {
    pub ca_pem: String,
    pub ca_der: Vec<u8>,
    pub cert_der: Vec<u8>,
    pub key_der: Vec<u8>,
}

/// Generates a CA and a serving certificate for loopback (and `bind` when it is a specific address).
pub(crate) fn generate(bind: IpAddr) -> Result<Material, Error> {
    let ca_key = KeyPair::generate().map_err(Error::Certificate)?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(Error::Certificate)?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "test-apiserver-ca");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key).map_err(Error::Certificate)?;
    let issuer = Issuer::new(ca_params, ca_key);

    let mut names = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    if !bind.is_unspecified() && !bind.is_loopback() {
        names.push(bind.to_string());
    }
    let leaf_key = KeyPair::generate().map_err(Error::Certificate)?;
    let mut leaf_params = CertificateParams::new(names).map_err(Error::Certificate)?;
    leaf_params
        .distinguished_name
        .push(DnType::CommonName, "test-apiserver");
    leaf_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf_params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    let leaf = leaf_params
        .signed_by(&leaf_key, &issuer)
        .map_err(Error::Certificate)?;

    Ok(Material {
        ca_pem: ca_cert.pem(),
        ca_der: ca_cert.der().to_vec(),
        cert_der: leaf.der().to_vec(),
        key_der: leaf_key.serialize_der(),
    })
}

/// A TLS acceptor serving the generated certificate.
pub(crate) fn acceptor(m: &Material) -> Result<tokio_rustls::TlsAcceptor, Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = vec![
        CertificateDer::from(m.cert_der.clone()),
        CertificateDer::from(m.ca_der.clone()),
    ];
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(m.key_der.clone()));
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(Error::Tls)?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(Error::Tls)?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(cfg)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generates_a_usable_chain() {
        let m = generate(IpAddr::from([127, 0, 0, 1])).unwrap();
        assert!(m.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(!m.cert_der.is_empty());
        assert!(acceptor(&m).is_ok());
    }
}
