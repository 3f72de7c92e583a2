//! How to reach a cluster: libpq connection strings and URLs, tokio-postgres clients over the
//! unix socket or TCP, and the installation's `psql`.

use std::process::{Command, Stdio};

use super::Cluster;
use crate::error::{Error, IoContext, Result};
use crate::user;

impl Cluster {
    /// A libpq key=value connection string over the unix socket:
    /// `host=<socket_dir> port=<port> user=postgres dbname=<dbname>`.
    pub fn connection_string(&self, dbname: &str) -> String {
        format!(
            "host={} port={} user=postgres dbname={}",
            conninfo_quote(&self.socket_dir.to_string_lossy()),
            self.port,
            conninfo_quote(dbname)
        )
    }

    /// A TCP connection URL with the [`password`](Self::password):
    /// `postgresql://postgres:<password>@127.0.0.1:<port>/<dbname>`.
    pub fn url(&self, dbname: &str) -> String {
        format!(
            "postgresql://postgres:{}@127.0.0.1:{}/{}",
            self.password,
            self.port,
            percent_encode(dbname)
        )
    }

    /// Connects as `postgres` to `dbname` over the unix socket.
    ///
    /// Must be called inside a tokio runtime: the connection future is `tokio::spawn`ed and
    /// lives on that runtime (the client fails once the runtime shuts down).
    pub async fn connect(&self, dbname: &str) -> Result<tokio_postgres::Client> {
        let mut config = tokio_postgres::Config::new();
        config
            .host_path(&self.socket_dir)
            .port(self.port)
            .user("postgres")
            .dbname(dbname);
        spawn_connection(config).await
    }

    /// Like [`connect`](Self::connect) but over TCP to 127.0.0.1, with the
    /// [`password`](Self::password).
    pub async fn connect_tcp(&self, dbname: &str) -> Result<tokio_postgres::Client> {
        let mut config = tokio_postgres::Config::new();
        config
            .host("127.0.0.1")
            .port(self.port)
            .user("postgres")
            .password(&self.password)
            .dbname(dbname);
        spawn_connection(config).await
    }

    /// Runs `sql` with the installation's `psql -X -q -A -t -v ON_ERROR_STOP=1` against
    /// `dbname` and returns its stdout (unaligned tuples only, trailing newline included);
    /// fails with [`Error::Command`] carrying psql's stderr on non-zero exit.
    pub fn psql(&self, dbname: &str, sql: &str) -> Result<String> {
        let psql = self.installation.bin("psql");
        let out = self
            .psql_command(dbname, sql)
            .output()
            .ctx("running", &psql)?;
        if !out.status.success() {
            return Err(Error::Command {
                program: format!("psql ({sql})"),
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The command [`psql`](Self::psql) runs (stdin null).
    pub(crate) fn psql_command(&self, dbname: &str, sql: &str) -> Command {
        let mut cmd = Command::new(self.installation.bin("psql"));
        cmd.args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h"])
            .arg(&self.socket_dir)
            .arg("-p")
            .arg(self.port.to_string())
            .args(["-U", "postgres", "-d", dbname, "-c", sql])
            .stdin(Stdio::null());
        user::scrub_pg_env(&mut cmd);
        cmd
    }

    /// Creates database `name` (quoted as an identifier) via [`psql`](Self::psql).
    pub fn create_database(&self, name: &str) -> Result<()> {
        let ident = format!("\"{}\"", name.replace('"', "\"\""));
        self.psql("postgres", &format!("CREATE DATABASE {ident}"))
            .map(drop)
    }
}

pub(crate) async fn spawn_connection(
    config: tokio_postgres::Config,
) -> Result<tokio_postgres::Client> {
    let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// Quotes a libpq conninfo value when needed (`'...'` with `\` escapes).
pub(crate) fn conninfo_quote(value: &str) -> String {
    if !value.is_empty()
        && !value
            .chars()
            .any(|c| c.is_whitespace() || c == '\'' || c == '\\')
    {
        return value.to_string();
    }
    format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// Percent-encodes everything but unreserved URL characters.
fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{conninfo_quote, percent_encode};

    #[test]
    fn quotes_conninfo_values() {
        assert_eq!(conninfo_quote("/tmp/x"), "/tmp/x");
        assert_eq!(conninfo_quote("a b"), "'a b'");
        assert_eq!(conninfo_quote("it's"), r"'it\'s'");
        assert_eq!(conninfo_quote(""), "''");
    }

    #[test]
    fn percent_encodes_db_names() {
        assert_eq!(percent_encode("db_1"), "db_1");
        assert_eq!(percent_encode("a b/c"), "a%20b%2Fc");
    }
}
