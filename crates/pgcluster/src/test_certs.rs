//! [`TestCa`]: a certificate authority made at test time (with `rcgen`, so tests need no
//! `openssl` binary), issuing the server certificates of [`ServerTls`] and client certificates.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

use crate::tls::ServerTls;

/// A certificate and its private key, both PEM.
#[derive(Debug, Clone)]
pub struct Issued {
    /// The certificate.
    pub cert_pem: String,
    /// The private key (PKCS#8).
    pub key_pem: String,
}

/// A throw-away CA: its certificate (for clients' `sslrootcert` and the server's `ssl_ca_file`)
/// and the certificates it issues.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa").finish_non_exhaustive()
    }
}

impl TestCa {
    /// A new CA named `name` (its subject's common name).
    ///
    /// # Panics
    ///
    /// If the key or the certificate cannot be generated (a test-support failure).
    pub fn new(name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("CA key");
        TestCa {
            issuer: CertifiedIssuer::self_signed(params, key).expect("CA certificate"),
        }
    }

    /// The CA's certificate, PEM.
    pub fn cert_pem(&self) -> String {
        self.issuer.pem()
    }

    /// A server certificate for `names` (DNS names or IP addresses, e.g. `localhost`,
    /// `127.0.0.1`).
    ///
    /// # Panics
    ///
    /// As [`new`](Self::new), or if a name is neither a DNS name nor an address.
    pub fn server(&self, names: &[&str]) -> Issued {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).expect("server certificate names");
        params
            .distinguished_name
            .push(DnType::CommonName, "pgcluster test server");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.issue(params)
    }

    /// A client certificate for the role `user` (PostgreSQL's `cert` authentication matches the
    /// common name to the role).
    ///
    /// # Panics
    ///
    /// As [`new`](Self::new).
    pub fn client(&self, user: &str) -> Issued {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("client parameters");
        params.distinguished_name.push(DnType::CommonName, user);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.issue(params)
    }

    /// The server TLS files of a certificate for `names`; with `trust_clients`, the server also
    /// trusts client certificates this CA issues (`ssl_ca_file`).
    pub fn server_tls(&self, names: &[&str], trust_clients: bool) -> ServerTls {
        let issued = self.server(names);
        ServerTls {
            cert_pem: issued.cert_pem,
            key_pem: issued.key_pem,
            client_ca_pem: trust_clients.then(|| self.cert_pem()),
        }
    }

    fn issue(&self, params: CertificateParams) -> Issued {
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("certificate");
        Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}
