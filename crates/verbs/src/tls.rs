//! TLS for the memory-node RPC channel, as an option: a node with a certificate and key
//! serves TLS on its TCP port; clients that name the CA that signed it (agents, the
//! manager, a node copying a region to a peer) dial it with TLS and verify it against
//! the host of its endpoint. The cluster secret still authenticates the client inside
//! the channel. Built on rustls with the ring provider. Also holds the PEM loaders the
//! agent's client port shares. Unix-socket endpoints never use TLS.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use crate::error::VerbsError;

/// The longest a TLS handshake on the RPC port may take.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

fn bad(what: String) -> VerbsError {
    VerbsError::Io {
        context: "TLS".into(),
        message: what,
    }
}

/// The certificates in a PEM file (at least one).
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, VerbsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(format!("reading {}: {e}", path.display())))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(format!("parsing certificates in {}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(bad(format!("no certificate in {}", path.display())));
    }
    Ok(certs)
}

/// The private key in a PEM file.
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, VerbsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| {
        bad(format!(
            "reading the private key in {}: {e}",
            path.display()
        ))
    })
}

/// Roots from a PEM file of CA certificates.
pub fn load_roots(path: &Path) -> Result<rustls::RootCertStore, VerbsError> {
    let mut roots = rustls::RootCertStore::empty();
    for c in load_certs(path)? {
        roots
            .add(c)
            .map_err(|e| bad(format!("a CA certificate in {}: {e}", path.display())))?;
    }
    Ok(roots)
}

pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A client's TLS settings for RPC: the CA that signs the nodes' certificates.
#[derive(Clone)]
pub struct ClientTls(tokio_rustls::TlsConnector);

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientTls(..)")
    }
}

impl ClientTls {
    /// Trusts the CA certificates in `ca_file`.
    pub fn from_ca_file(ca_file: &Path) -> Result<ClientTls, VerbsError> {
        let config = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| bad(e.to_string()))?
            .with_root_certificates(load_roots(ca_file)?)
            .with_no_client_auth();
        Ok(ClientTls(tokio_rustls::TlsConnector::from(Arc::new(
            config,
        ))))
    }

    /// Runs the handshake on `stream` to the node at `addr` (`host:port`), verifying
    /// its certificate names `host`.
    pub async fn connect(
        &self,
        addr: &str,
        stream: tokio::net::TcpStream,
    ) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, VerbsError> {
        let host = addr
            .rsplit_once(':')
            .map_or(addr, |(h, _)| h)
            .trim_start_matches('[')
            .trim_end_matches(']');
        let name = ServerName::try_from(host.to_string())
            .map_err(|e| bad(format!("{host} is not a TLS server name: {e}")))?;
        tokio::time::timeout(HANDSHAKE_TIMEOUT, self.0.connect(name, stream))
            .await
            .map_err(|_| VerbsError::Timeout(HANDSHAKE_TIMEOUT.as_millis() as u64))?
            .map_err(|e| VerbsError::io(&format!("TLS handshake with memory node {addr}"), e))
    }
}

/// A node's TLS settings for its RPC port: its certificate chain and key.
#[derive(Clone)]
pub struct ServerTls(tokio_rustls::TlsAcceptor);

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerTls(..)")
    }
}

impl ServerTls {
    /// A server of `config` (the agent's client port builds its own, with client
    /// certificate verification).
    pub fn new(config: rustls::ServerConfig) -> ServerTls {
        ServerTls(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
    }

    pub fn from_files(cert_file: &Path, key_file: &Path) -> Result<ServerTls, VerbsError> {
        let config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| bad(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(load_certs(cert_file)?, load_key(key_file)?)
            .map_err(|e| bad(format!("the certificate and key do not match: {e}")))?;
        Ok(ServerTls(tokio_rustls::TlsAcceptor::from(Arc::new(config))))
    }

    /// The acceptor, for a server that runs its handshakes itself (the manager's API).
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        self.0.clone()
    }

    /// Runs a client's handshake, at most [`HANDSHAKE_TIMEOUT`].
    pub async fn accept(
        &self,
        stream: tokio::net::TcpStream,
    ) -> std::io::Result<tokio_rustls::server::TlsStream<tokio::net::TcpStream>> {
        tokio::time::timeout(HANDSHAKE_TIMEOUT, self.0.accept(stream))
            .await
            .map_err(|_| std::io::Error::other("TLS handshake timed out"))?
    }
}
