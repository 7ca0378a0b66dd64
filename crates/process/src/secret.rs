//! The cluster secret: what every internal port of a DMC cluster demands of a peer
//! (memory-node RPC, the manager's HTTP API, agent-to-agent forwarding).
//!
//! It is read from a file (`secret-file` in a process's config, or the flag of that
//! name) or from the `DMC_CLUSTER_SECRET` environment variable, never from a command
//! line argument, where `ps` would show it. A process installs it once at start
//! ([`install`]); the manager client then sends it with every HTTP request, and the
//! servers compare what peers present with [`ClusterSecret::matches`] in constant
//! time. Nothing here logs or prints the secret.

use std::path::Path;
use std::sync::OnceLock;

use bytes::Bytes;

/// The environment variable that may hold the secret itself.
pub const ENV: &str = "DMC_CLUSTER_SECRET";

/// The shared secret of one cluster.
#[derive(Clone)]
pub struct ClusterSecret(Bytes);

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSecret(..)")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("reading the cluster secret from {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("the cluster secret in {0} is empty")]
    Empty(String),
    #[error(
        "the cluster secret must be printable ASCII without spaces (it travels in HTTP headers and RESP)"
    )]
    Unprintable,
}

impl ClusterSecret {
    /// A secret of printable ASCII without spaces (it travels in an HTTP header and
    /// as a RESP argument); `Ok(None)` for an empty one.
    pub fn new(secret: impl Into<Bytes>) -> Result<Option<ClusterSecret>, SecretError> {
        let b: Bytes = secret.into();
        if b.is_empty() {
            return Ok(None);
        }
        if !b.iter().all(|c| (0x21..=0x7e).contains(c)) {
            return Err(SecretError::Unprintable);
        }
        Ok(Some(ClusterSecret(b)))
    }

    /// The secret from `file` if given, else from `DMC_CLUSTER_SECRET`, else none.
    /// Surrounding whitespace (a trailing newline) is not part of it.
    pub fn load(file: Option<&Path>) -> Result<Option<ClusterSecret>, SecretError> {
        if let Some(path) = file {
            let text = std::fs::read_to_string(path).map_err(|source| SecretError::Read {
                path: path.display().to_string(),
                source,
            })?;
            return ClusterSecret::new(text.trim().to_string())?
                .map(Some)
                .ok_or_else(|| SecretError::Empty(path.display().to_string()));
        }
        match std::env::var(ENV) {
            Ok(v) => ClusterSecret::new(v.trim().to_string()),
            Err(_) => Ok(None),
        }
    }

    pub fn bytes(&self) -> &Bytes {
        &self.0
    }

    /// Whether `presented` is the secret, in time that does not depend on where they
    /// differ.
    pub fn matches(&self, presented: &[u8]) -> bool {
        dmc_proto::constant_time_eq(&self.0, presented)
    }
}

static INSTALLED: OnceLock<Option<ClusterSecret>> = OnceLock::new();

/// Makes `secret` this process's cluster secret (the first call wins).
pub fn install(secret: Option<ClusterSecret>) {
    let _ = INSTALLED.set(secret);
}

/// This process's cluster secret, if one was installed.
pub fn installed() -> Option<&'static ClusterSecret> {
    INSTALLED.get().and_then(Option::as_ref)
}

static MANAGER_CA: OnceLock<Vec<Vec<u8>>> = OnceLock::new();

/// Trusts the CA certificates (PEM) in `file` for an `https://` manager URL (the
/// first call wins; none installed: the manager is reached over plain HTTP, or
/// `https` with the web's public roots).
pub fn install_manager_ca(file: Option<&Path>) -> Result<(), SecretError> {
    let Some(path) = file else {
        return Ok(());
    };
    let read = |e: String| SecretError::Read {
        path: path.display().to_string(),
        source: std::io::Error::other(e),
    };
    let text = std::fs::read_to_string(path).map_err(|e| read(e.to_string()))?;
    let ders = pem_certificates(&text).map_err(read)?;
    let _ = MANAGER_CA.set(ders);
    Ok(())
}

/// The DER certificates of a PEM text.
fn pem_certificates(text: &str) -> Result<Vec<Vec<u8>>, String> {
    use rustls_pki_types::pem::PemObject;
    let certs = rustls_pki_types::CertificateDer::pem_slice_iter(text.as_bytes())
        .map(|c| c.map(|c| c.to_vec()).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    if certs.is_empty() {
        return Err("no certificate".into());
    }
    Ok(certs)
}

/// The manager's CA certificates (DER), if installed.
pub fn manager_ca() -> Option<&'static [Vec<u8>]> {
    MANAGER_CA.get().map(Vec::as_slice)
}

/// The `Authorization` header value that carries `secret` over HTTP.
pub fn bearer(secret: &ClusterSecret) -> String {
    format!("Bearer {}", String::from_utf8_lossy(secret.bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare_exactly() {
        let s = ClusterSecret::new("s3cret").unwrap().unwrap();
        assert!(s.matches(b"s3cret"));
        assert!(!s.matches(b"s3cre"));
        assert!(!s.matches(b"s3creT"));
        assert!(!s.matches(b""));
        assert!(ClusterSecret::new("").unwrap().is_none());
        assert!(ClusterSecret::new("a b").is_err());
        assert_eq!(format!("{s:?}"), "ClusterSecret(..)");
    }

    #[test]
    fn a_secret_file_is_read_and_trimmed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, "abc\n").unwrap();
        let s = ClusterSecret::load(Some(&path)).unwrap().unwrap();
        assert!(s.matches(b"abc"));
        std::fs::write(&path, "\n").unwrap();
        assert!(matches!(
            ClusterSecret::load(Some(&path)),
            Err(SecretError::Empty(_))
        ));
        assert!(ClusterSecret::load(Some(&dir.path().join("missing"))).is_err());
    }
}
