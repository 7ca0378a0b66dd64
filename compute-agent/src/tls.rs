//! The TLS client port, with Redis's settings: `tls-port`, `tls-cert-file`,
//! `tls-key-file`, `tls-ca-cert-file` and `tls-auth-clients` (`yes` requires a client
//! certificate signed by the CA, `optional` verifies one if presented, `no` asks for
//! none). Built on rustls with the ring provider and the TLS helpers of the memory-node
//! RPC channel (`dmc_verbs::tls`). [`crate::run`] builds the acceptor once; each TLS
//! connection's handshake (`ServerTls::accept`, bounded in time) runs in its own task
//! before the connection loop sees a byte. It never reads a certificate after start.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use dmc_verbs::tls::ServerTls;
use serde::{Deserialize, Serialize};

/// `tls-auth-clients`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum AuthClients {
    /// A client must present a certificate the CA signed (Redis's default).
    #[default]
    Yes,
    /// A certificate is verified if the client presents one.
    Optional,
    /// No client certificate is asked for.
    No,
}

/// The TLS settings of the agent's config (`Config::tls`).
#[derive(Debug, Clone, Default)]
pub struct TlsSection {
    /// The TLS client port (0: none).
    pub tls_port: u16,
    pub tls_cert_file: Option<PathBuf>,
    pub tls_key_file: Option<PathBuf>,
    pub tls_ca_cert_file: Option<PathBuf>,
    pub tls_auth_clients: AuthClients,
}

impl TlsSection {
    pub fn enabled(&self) -> bool {
        self.tls_port != 0
    }

    /// Checks that the files a TLS port needs are named.
    pub fn validate(&self) -> Result<()> {
        if !self.enabled() {
            return Ok(());
        }
        anyhow::ensure!(
            self.tls_cert_file.is_some() && self.tls_key_file.is_some(),
            "tls-port needs tls-cert-file and tls-key-file"
        );
        anyhow::ensure!(
            self.tls_auth_clients == AuthClients::No || self.tls_ca_cert_file.is_some(),
            "tls-ca-cert-file must be specified when tls-auth-clients is yes or optional"
        );
        Ok(())
    }
}

/// The acceptor for `tls`, or `None` when no TLS port is configured.
pub fn acceptor(tls: &TlsSection) -> Result<Option<ServerTls>> {
    if !tls.enabled() {
        return Ok(None);
    }
    tls.validate()?;
    let (Some(cert_file), Some(key_file)) = (&tls.tls_cert_file, &tls.tls_key_file) else {
        anyhow::bail!("tls-port needs tls-cert-file and tls-key-file");
    };
    let chain = dmc_verbs::tls::load_certs(cert_file)?;
    let key = dmc_verbs::tls::load_key(key_file)?;
    let provider = dmc_verbs::tls::provider();
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?;
    let builder = match (&tls.tls_ca_cert_file, tls.tls_auth_clients) {
        (Some(ca), AuthClients::Yes | AuthClients::Optional) => {
            let roots = dmc_verbs::tls::load_roots(ca)?;
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            );
            let verifier = if tls.tls_auth_clients == AuthClients::Optional {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            builder.with_client_cert_verifier(verifier.build().context("client verifier")?)
        }
        _ => builder.with_no_client_auth(),
    };
    let config = builder
        .with_single_cert(chain, key)
        .context("the TLS certificate and key do not match")?;
    Ok(Some(ServerTls::new(config)))
}

/// How this agent reaches other agents' TLS ports: their certificates are checked
/// against `tls-ca-cert-file` (one CA for the cluster's agents), and this agent's own
/// certificate is presented as the client's. `None` without a TLS port or a CA.
pub fn peer_connector(tls: &TlsSection) -> Result<Option<tokio_rustls::TlsConnector>> {
    let (true, Some(ca), Some(cert), Some(key)) = (
        tls.enabled(),
        &tls.tls_ca_cert_file,
        &tls.tls_cert_file,
        &tls.tls_key_file,
    ) else {
        return Ok(None);
    };
    let config = rustls::ClientConfig::builder_with_provider(dmc_verbs::tls::provider())
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_root_certificates(dmc_verbs::tls::load_roots(ca)?)
        .with_client_auth_cert(
            dmc_verbs::tls::load_certs(cert)?,
            dmc_verbs::tls::load_key(key)?,
        )
        .context("this agent's certificate and key do not match")?;
    Ok(Some(tokio_rustls::TlsConnector::from(Arc::new(config))))
}
