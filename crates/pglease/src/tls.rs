//! TLS as libpq does it, on rustls: the [`SslMode`]s, the certificate checks each one makes, the
//! files they read, and the [`TlsConnector`] handed to tokio-postgres.
//!
//! | sslmode | encrypted | server certificate checked |
//! | --- | --- | --- |
//! | `disable` | never | — |
//! | `allow`, `prefer` | if the server offers TLS | chain, if a root certificate is present |
//! | `require` | always | chain, if a root certificate is present (libpq's rule) |
//! | `verify-ca` | always | chain to `sslrootcert` |
//! | `verify-full` | always | chain to `sslrootcert`, and the host name |
//!
//! "A root certificate is present" means `sslrootcert` names an existing file, or
//! `~/.postgresql/root.crt` exists; `sslrootcert=system` means the system's trusted CAs (the
//! files OpenSSL would read: `SSL_CERT_FILE`, `SSL_CERT_DIR`, else the distribution's store),
//! and then only `verify-full` is allowed, as in libpq 16. The cryptography is `ring`'s.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres::Socket;
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres_rustls::MakeRustlsConnect;

/// libpq's `sslmode`: whether to encrypt, and what to check of the server's certificate (the
/// table in docs/CLIENT.md, "Connecting").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SslMode {
    /// Never TLS.
    Disable,
    /// TLS if the server offers it. libpq tries without TLS first and retries with it; pglease
    /// asks for TLS first, like `prefer` (never less private, and one connection attempt).
    Allow,
    /// TLS if the server offers it, else without (libpq's default, and pglease's).
    Prefer,
    /// TLS or no connection; the certificate is checked only if a root certificate is present.
    Require,
    /// TLS, with the server's certificate signed by a CA in `sslrootcert`.
    VerifyCa,
    /// As `VerifyCa`, and the certificate names the host connected to.
    VerifyFull,
}

impl SslMode {
    /// The mode named `text` as libpq spells it (`verify-full`, ...).
    pub(crate) fn parse(text: &str) -> Option<SslMode> {
        Some(match text {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }

    /// The name libpq gives the mode.
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// Whether a connection is refused unless it is encrypted.
    pub fn requires_tls(self) -> bool {
        matches!(
            self,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull
        )
    }

    /// Whether the server's certificate must chain to a trusted root.
    pub(crate) fn verifies(self) -> bool {
        matches!(self, SslMode::VerifyCa | SslMode::VerifyFull)
    }

    /// What tokio-postgres is told: it knows only disable, prefer and require (the checks of the
    /// verifying modes are the connector's).
    pub(crate) fn wire(self) -> tokio_postgres::config::SslMode {
        use tokio_postgres::config::SslMode as Wire;
        match self {
            SslMode::Disable => Wire::Disable,
            SslMode::Allow | SslMode::Prefer => Wire::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => Wire::Require,
        }
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The trusted roots for the server's certificate.
#[derive(Debug, Clone)]
pub(crate) enum Roots {
    /// None: the certificate is not checked (`prefer`, `require` without a root certificate).
    None,
    /// The CAs in a PEM file.
    File(PathBuf),
    /// The system's trusted CAs (`sslrootcert=system`).
    System,
}

/// A client certificate and its key, both PEM files.
#[derive(Debug, Clone)]
pub(crate) struct ClientCert {
    pub(crate) cert: PathBuf,
    pub(crate) key: PathBuf,
}

/// The TLS connector of a [`ConnectOptions`](crate::ConnectOptions): rustls, configured with the
/// checks its sslmode calls for, the roots and the client certificate. Pass it wherever a
/// tokio-postgres `MakeTlsConnect` is taken ([`ClientBuilder::connect_with`](crate::ClientBuilder::connect_with),
/// [`Listener::with_tls`](crate::Listener::with_tls), `tokio_postgres::Config::connect`).
#[derive(Clone)]
pub struct TlsConnector {
    inner: MakeRustlsConnect,
}

impl fmt::Debug for TlsConnector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConnector").finish_non_exhaustive()
    }
}

impl MakeTlsConnect<Socket> for TlsConnector {
    type Stream = <MakeRustlsConnect as MakeTlsConnect<Socket>>::Stream;
    type TlsConnect = <MakeRustlsConnect as MakeTlsConnect<Socket>>::TlsConnect;
    type Error = <MakeRustlsConnect as MakeTlsConnect<Socket>>::Error;

    fn make_tls_connect(&mut self, domain: &str) -> Result<Self::TlsConnect, Self::Error> {
        MakeTlsConnect::<Socket>::make_tls_connect(&mut self.inner, domain)
    }
}

/// The crypto provider every connector uses.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The connector for `mode` with `roots` and the optional client certificate.
///
/// # Errors
///
/// A file that cannot be read or holds no usable certificate or key, with the setting that named
/// it.
pub(crate) fn connector(
    mode: SslMode,
    roots: &Roots,
    client: Option<&ClientCert>,
) -> Result<TlsConnector, String> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS set-up: {e}"))?;
    let algorithms = provider.signature_verification_algorithms;
    let verifier: Arc<dyn ServerCertVerifier> = match roots {
        Roots::None => Arc::new(Unverified { algorithms }),
        Roots::File(path) => {
            let store = roots_from_file(path)?;
            checked(
                mode,
                store,
                provider,
                format!("sslrootcert {}", path.display()),
            )?
        }
        Roots::System => {
            let store = system_roots()?;
            checked(
                mode,
                store,
                provider,
                "the system's trusted CAs (sslrootcert=system)".into(),
            )?
        }
    };
    let builder = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let config = match client {
        None => builder.with_no_client_auth(),
        Some(client) => {
            let certs = certificates(&client.cert, "sslcert")?;
            let key = PrivateKeyDer::from_pem_file(&client.key).map_err(|e| {
                format!(
                    "sslkey {}: no usable private key: {e}",
                    client.key.display()
                )
            })?;
            builder.with_client_auth_cert(certs, key).map_err(|e| {
                format!(
                    "sslcert {} and sslkey {}: {e}",
                    client.cert.display(),
                    client.key.display()
                )
            })?
        }
    };
    Ok(TlsConnector {
        inner: MakeRustlsConnect::new(config),
    })
}

/// A verifier that checks the chain, and the host name unless `mode` is verify-ca.
fn checked(
    mode: SslMode,
    store: RootCertStore,
    provider: Arc<CryptoProvider>,
    source: String,
) -> Result<Arc<dyn ServerCertVerifier>, String> {
    let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider)
        .build()
        .map_err(|e| format!("{source}: {e}"))?;
    Ok(Arc::new(Checked {
        inner,
        host_name: mode == SslMode::VerifyFull,
        source,
        mode,
    }))
}

/// The certificates in the PEM file `path`, named by `setting` in errors.
fn certificates(path: &Path, setting: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{setting} {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{setting} {}: no PEM certificate in the file",
            path.display()
        ));
    }
    Ok(certs)
}

/// The CAs of the PEM file `path`.
fn roots_from_file(path: &Path) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    for cert in certificates(path, "sslrootcert")? {
        store.add(cert).map_err(|e| {
            format!(
                "sslrootcert {}: not a usable CA certificate: {e}",
                path.display()
            )
        })?;
    }
    Ok(store)
}

/// The system's trusted CAs.
fn system_roots() -> Result<RootCertStore, String> {
    let found = rustls_native_certs::load_native_certs();
    let mut store = RootCertStore::empty();
    let (added, _) = store.add_parsable_certificates(found.certs);
    if added == 0 {
        let why = found
            .errors
            .first()
            .map_or_else(|| "none found".to_owned(), ToString::to_string);
        return Err(format!(
            "sslrootcert=system: no trusted CA certificates on this system ({why}); \
             install the distribution's ca-certificates or set SSL_CERT_FILE"
        ));
    }
    Ok(store)
}

/// Checks the chain (and the host name with `host_name`), explaining a refusal in terms of the
/// settings.
#[derive(Debug)]
struct Checked {
    inner: Arc<WebPkiServerVerifier>,
    host_name: bool,
    source: String,
    mode: SslMode,
}

/// Why a server certificate was refused, in the terms of the settings.
#[derive(Debug)]
struct Refused(String);

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

impl ServerCertVerifier for Checked {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let refused = |why: String| {
            rustls::Error::Other(rustls::OtherError(Arc::new(Refused(format!(
                "server certificate refused (sslmode={}): {why}",
                self.mode
            )))))
        };
        match self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Ok(verified) => Ok(verified),
            // The chain was checked before the name: verify-ca stops there.
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.host_name => Ok(ServerCertVerified::assertion()),
            Err(rustls::Error::InvalidCertificate(
                e @ (CertificateError::NotValidForName
                | CertificateError::NotValidForNameContext { .. }),
            )) => Err(refused(format!(
                "{e}; connect by a name the certificate holds, or use sslmode=verify-ca to \
                 check only the CA"
            ))),
            Err(rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer)) => Err(
                refused(format!("it is not signed by a CA in {}", self.source)),
            ),
            Err(rustls::Error::InvalidCertificate(e)) => Err(refused(e.to_string())),
            Err(e) => Err(e),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Accepts any certificate (encryption without authentication, as libpq's `require` without a
/// root certificate), but still checks that the server holds the certificate's key.
#[derive(Debug)]
struct Unverified {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Unverified {
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
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
