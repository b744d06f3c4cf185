//! A small HTTP/1.1 client for the fake cloud's admin API (plain HTTP) and the CCM's serving endpoint
//! (HTTPS with the CCM's self-signed certificate).
//!
//! The CCM generates its serving certificate in memory at start-up, so there is no CA to verify it
//! against: HTTPS requests here accept any server certificate. They only ever go to a loopback address
//! the harness itself started the process on.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Uri, header};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::net::TcpStream;

use crate::HarnessError;

/// How long one request may take, connection included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A response: status code and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    /// The HTTP status code.
    pub status: u16,
    /// The body.
    pub body: Bytes,
}

impl HttpResponse {
    /// The body as (lossy) UTF-8 text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// True for 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// Sends one request to an `http://` or `https://` URL, with an optional JSON body and bearer token.
pub async fn send(
    method: Method,
    url: &str,
    json_body: Option<&serde_json::Value>,
    bearer: Option<&str>,
) -> Result<HttpResponse, HarnessError> {
    let what = format!("{method} {url}");
    tokio::time::timeout(REQUEST_TIMEOUT, send_inner(method, url, json_body, bearer))
        .await
        .map_err(|_| HarnessError::Http {
            what: what.clone(),
            message: format!("no answer within {REQUEST_TIMEOUT:?}"),
        })?
}

async fn send_inner(
    method: Method,
    url: &str,
    json_body: Option<&serde_json::Value>,
    bearer: Option<&str>,
) -> Result<HttpResponse, HarnessError> {
    let fail = |message: String| HarnessError::Http {
        what: format!("{method} {url}"),
        message,
    };
    let uri: Uri = url.parse().map_err(|e| fail(format!("bad URL: {e}")))?;
    let tls = match uri.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        other => return Err(fail(format!("unsupported scheme {other:?}"))),
    };
    let host = uri
        .host()
        .ok_or_else(|| fail("the URL has no host".into()))?;
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let authority = uri
        .authority()
        .map(|a| a.as_str().to_string())
        .unwrap_or_else(|| host.clone());
    let path = uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/")
        .to_string();

    let body = match json_body {
        Some(value) => Bytes::from(serde_json::to_vec(value).map_err(|e| fail(e.to_string()))?),
        None => Bytes::new(),
    };
    let mut builder = Request::builder()
        .method(method.clone())
        .uri(path)
        .header(header::HOST, authority)
        .header(header::ACCEPT, "application/json, text/plain");
    if json_body.is_some() {
        builder = builder.header(header::CONTENT_TYPE, "application/json");
    }
    if let Some(token) = bearer {
        builder = builder.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let request = builder
        .body(Full::new(body))
        .map_err(|e| fail(e.to_string()))?;

    let stream = TcpStream::connect((host.as_str(), port))
        .await
        .map_err(|e| fail(format!("cannot connect: {e}")))?;
    let response = if tls {
        let connector = tokio_rustls::TlsConnector::from(Arc::new(insecure_client_config()?));
        let name = ServerName::try_from(host.clone())
            .map_err(|e| fail(format!("bad server name: {e}")))?;
        let stream = connector
            .connect(name, stream)
            .await
            .map_err(|e| fail(format!("TLS handshake failed: {e}")))?;
        exchange(TokioIo::new(stream), request).await
    } else {
        exchange(TokioIo::new(stream), request).await
    };
    response.map_err(fail)
}

async fn exchange<I>(io: I, request: Request<Full<Bytes>>) -> Result<HttpResponse, String>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| format!("HTTP handshake failed: {e}"))?;
    tokio::spawn(async move {
        // The connection ends when the response has been read or the peer goes away; either is fine.
        let _ = connection.await;
    });
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("request failed: {e}"))?;
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("reading the body failed: {e}"))?
        .to_bytes();
    Ok(HttpResponse { status, body })
}

fn insecure_client_config() -> Result<rustls::ClientConfig, HarnessError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| HarnessError::Http {
            what: "TLS client configuration".into(),
            message: e.to_string(),
        })?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServerCertificate(provider)))
        .with_no_client_auth();
    Ok(config)
}

/// Accepts any server certificate but still checks the handshake signatures (so the peer holds the key
/// of the certificate it presented).
#[derive(Debug)]
struct AnyServerCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyServerCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn sends_method_path_token_and_body_and_reads_the_answer() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            // Read until the whole body (declared by content-length) has arrived.
            loop {
                let n = socket.read(&mut buf).await.unwrap();
                seen.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&seen).to_string();
                if let Some(split) = text.find("\r\n\r\n")
                    && text[split + 4..].len() >= "{\"a\":1}".len()
                {
                    break;
                }
            }
            socket
                .write_all(
                    b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                )
                .await
                .unwrap();
            String::from_utf8(seen).unwrap()
        });
        let response = send(
            Method::POST,
            &format!("http://{addr}/instances/x/stop"),
            Some(&serde_json::json!({"a": 1})),
            Some("secret"),
        )
        .await
        .unwrap();
        assert_eq!(response.status, 201);
        assert_eq!(response.text(), "ok");
        assert!(response.is_success());
        let request = server.await.unwrap();
        assert!(
            request.starts_with("POST /instances/x/stop HTTP/1.1\r\n"),
            "{request}"
        );
        assert!(
            request
                .to_lowercase()
                .contains("authorization: bearer secret"),
            "{request}"
        );
        assert!(request.ends_with("{\"a\":1}"), "{request}");
    }

    #[tokio::test]
    async fn connection_failures_name_the_request() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let err = send(Method::GET, &format!("http://{addr}/state"), None, None)
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains(&format!("GET http://{addr}/state")),
            "{err}"
        );
        let err = send(Method::GET, "ftp://x/", None, None).await.unwrap_err();
        assert!(err.to_string().contains("unsupported scheme"), "{err}");
    }
}
