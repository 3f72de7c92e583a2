//! [`ServerTls`]: the TLS files of a server started by [`ClusterBuilder::tls`](crate::ClusterBuilder::tls).

use std::fs;

use crate::cluster::Cluster;
use crate::error::{IoContext, Result};
use crate::user;

/// A server's certificate and key (PEM), and optionally the CA whose client certificates it
/// trusts (for `cert` authentication in pg_hba).
#[derive(Debug, Clone)]
pub struct ServerTls {
    /// The server's certificate (chain), PEM.
    pub cert_pem: String,
    /// The server's private key, PEM.
    pub key_pem: String,
    /// The CA of client certificates (`ssl_ca_file`), PEM.
    pub client_ca_pem: Option<String>,
}

impl ServerTls {
    /// Writes the files into the cluster's directory (the key mode 0600, owned by the server's
    /// account, as PostgreSQL demands) and returns the settings that enable TLS with them.
    pub(crate) fn install(&self, cluster: &Cluster) -> Result<Vec<(String, String)>> {
        let dir = cluster.base_dir().join("tls");
        fs::create_dir_all(&dir).ctx("creating", &dir)?;
        let write = |name: &str, text: &str| -> Result<String> {
            let path = dir.join(name);
            crate::secret::write_private(&path, text)?;
            user::chown_to(&path, cluster.server_user())?;
            Ok(path.display().to_string())
        };
        user::chown_to(&dir, cluster.server_user())?;
        let mut settings = vec![
            ("ssl".to_owned(), "on".to_owned()),
            (
                "ssl_cert_file".to_owned(),
                write("server.crt", &self.cert_pem)?,
            ),
            (
                "ssl_key_file".to_owned(),
                write("server.key", &self.key_pem)?,
            ),
        ];
        if let Some(ca) = &self.client_ca_pem {
            settings.push(("ssl_ca_file".to_owned(), write("client-ca.crt", ca)?));
        }
        Ok(settings)
    }
}
