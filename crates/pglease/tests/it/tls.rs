//! TLS and the password file against real servers: one with `ssl=on` and a certificate for
//! `localhost` only, issued by a CA made for this test binary, and the shared server, which has no
//! TLS. Each connection says whether it is encrypted through `pg_stat_ssl`.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use pgcluster::{Cluster, ClusterBuilder, TestCa};
use pglease::{ConnectOptions, SslMode};

use crate::common;

/// Every connection attempt here is bounded by this (generous: only a hang fails it).
const CONNECT_BOUND: Duration = Duration::from_secs(30);
/// The role that logs in with a client certificate only.
const CERT_ROLE: &str = "tls_cert_user";

/// The TLS server, its CA's files and a client certificate, in a directory of their own.
struct TlsServer {
    cluster: Cluster,
    dir: tempfile::TempDir,
}

impl TlsServer {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A URL to `host` (connecting to 127.0.0.1 whatever the name) with `params`.
    fn url(&self, host: &str, params: &str) -> String {
        format!(
            "postgresql://postgres:{}@{host}:{}/postgres?hostaddr=127.0.0.1&{params}",
            self.cluster.password(),
            self.cluster.port()
        )
    }
}

fn write_private(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// The TLS server (started on first use), with pg_lease installed in `postgres`.
fn server() -> &'static TlsServer {
    static SERVER: OnceLock<TlsServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        let ca = TestCa::new("pglease test CA");
        let other_ca = TestCa::new("another CA");
        let dir = tempfile::tempdir().unwrap();
        write_private(&dir.path().join("ca.crt"), &ca.cert_pem());
        write_private(&dir.path().join("other-ca.crt"), &other_ca.cert_pem());
        let client = ca.client(CERT_ROLE);
        write_private(&dir.path().join("client.crt"), &client.cert_pem);
        write_private(&dir.path().join("client.key"), &client.key_pem);
        let ext = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../extensions/pg_lease");
        let mirrors =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/pgcluster-mirrors");
        let cluster = ClusterBuilder::for_major(common::major())
            .and_then(|b| {
                b.private_mirror(true)
                    .cache_dir(mirrors)
                    .extension_dir(ext)
                    .tls(ca.server_tls(&["localhost"], true))
                    .hba_rule(format!("hostssl all {CERT_ROLE} 127.0.0.1/32 cert"))
                    .start()
            })
            .unwrap_or_else(|e| panic!("could not start a TLS server: {e}"));
        cluster
            .psql(
                "postgres",
                &format!("CREATE EXTENSION pg_lease; CREATE ROLE {CERT_ROLE} LOGIN SUPERUSER;"),
            )
            .expect("set up the TLS server");
        TlsServer { cluster, dir }
    })
}

/// `conninfo` read with no environment but an empty home directory (so no `~/.postgresql` or
/// `~/.pgpass` of the machine counts) and `vars`.
fn options(conninfo: &str, vars: &[(&str, &str)]) -> pglease::Result<ConnectOptions> {
    static HOME: OnceLock<tempfile::TempDir> = OnceLock::new();
    let home = HOME.get_or_init(|| tempfile::tempdir().unwrap());
    let mut env: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    env.entry("HOME".into())
        .or_insert_with(|| home.path().display().to_string());
    ConnectOptions::parse_with_env(conninfo, &move |name| env.get(name).cloned())
}

/// Connects as `options` say; whether the session is encrypted (per `pg_stat_ssl`).
async fn encrypted(options: &ConnectOptions) -> Result<bool, String> {
    let connecting = options.connect();
    let (client, connection) = tokio::time::timeout(CONNECT_BOUND, connecting)
        .await
        .map_err(|_| "no answer within the bound".to_owned())?
        .map_err(|e| {
            let mut text = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(cause) = source {
                text.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            text
        })?;
    tokio::spawn(connection);
    let row = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok(row.get(0))
}

fn must(conninfo: &str) -> ConnectOptions {
    options(conninfo, &[]).unwrap_or_else(|e| panic!("{conninfo}: {e}"))
}

#[tokio::test]
async fn require_encrypts_without_checking_the_certificate() {
    let s = server();
    let options = must(&s.url("127.0.0.1", "sslmode=require"));
    assert_eq!(options.ssl_mode(), SslMode::Require);
    assert_eq!(encrypted(&options).await, Ok(true));
    // By address alone, as libpq allows.
    let options = must(&format!(
        "postgresql://postgres:{}@:{}/postgres?hostaddr=127.0.0.1&sslmode=require",
        s.cluster.password(),
        s.cluster.port()
    ));
    assert_eq!(encrypted(&options).await, Ok(true));
}

#[tokio::test]
async fn verify_full_accepts_the_right_ca_and_host_name() {
    let s = server();
    let ca = s.path("ca.crt");
    let options = must(&s.url(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={}", ca.display()),
    ));
    assert_eq!(encrypted(&options).await, Ok(true));
}

#[tokio::test]
async fn verify_full_refuses_another_ca() {
    let s = server();
    let other = s.path("other-ca.crt");
    let options = must(&s.url(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={}", other.display()),
    ));
    let e = encrypted(&options).await.unwrap_err();
    assert!(e.contains("not signed by a CA in sslrootcert"), "{e}");
}

#[tokio::test]
async fn verify_full_refuses_a_host_name_the_certificate_lacks() {
    let s = server();
    let ca = s.path("ca.crt");
    let options = must(&s.url(
        "127.0.0.1",
        &format!("sslmode=verify-full&sslrootcert={}", ca.display()),
    ));
    let e = encrypted(&options).await.unwrap_err();
    assert!(
        e.contains("not valid for name") && e.contains("verify-ca"),
        "{e}"
    );
}

#[tokio::test]
async fn verify_ca_accepts_a_wrong_host_name_with_the_right_ca() {
    let s = server();
    let ca = s.path("ca.crt");
    let options = must(&s.url(
        "127.0.0.1",
        &format!("sslmode=verify-ca&sslrootcert={}", ca.display()),
    ));
    assert_eq!(encrypted(&options).await, Ok(true));
    let other = s.path("other-ca.crt");
    let options = must(&s.url(
        "127.0.0.1",
        &format!("sslmode=verify-ca&sslrootcert={}", other.display()),
    ));
    assert!(encrypted(&options).await.is_err());
}

#[tokio::test]
async fn require_with_a_root_certificate_checks_the_chain_as_libpq_does() {
    let s = server();
    let other = s.path("other-ca.crt");
    let options = must(&s.url(
        "127.0.0.1",
        &format!("sslmode=require&sslrootcert={}", other.display()),
    ));
    assert!(encrypted(&options).await.is_err());
}

#[tokio::test]
async fn the_root_certificate_variable_and_the_default_file_are_used() {
    let s = server();
    let ca = s.path("ca.crt");
    let url = s.url("localhost", "sslmode=verify-full");
    let options = options(&url, &[("PGSSLROOTCERT", ca.to_str().unwrap())]).unwrap();
    assert_eq!(encrypted(&options).await, Ok(true));
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir(home.path().join(".postgresql")).unwrap();
    std::fs::copy(&ca, home.path().join(".postgresql/root.crt")).unwrap();
    let options = self::options(&url, &[("HOME", home.path().to_str().unwrap())]).unwrap();
    assert_eq!(encrypted(&options).await, Ok(true));
}

#[tokio::test]
async fn prefer_uses_tls_when_offered_and_falls_back_when_not() {
    let s = server();
    let options = must(&s.url("127.0.0.1", "sslmode=prefer"));
    assert_eq!(encrypted(&options).await, Ok(true));
    // The default is prefer.
    let options = must(&s.url("127.0.0.1", ""));
    assert_eq!(options.ssl_mode(), SslMode::Prefer);
    assert_eq!(encrypted(&options).await, Ok(true));
    let plain = common::cluster();
    let options = must(&format!("{}?sslmode=prefer", plain.url("postgres")));
    assert_eq!(encrypted(&options).await, Ok(false));
}

#[tokio::test]
async fn disable_never_uses_tls() {
    let s = server();
    let options = must(&s.url("127.0.0.1", "sslmode=disable"));
    assert_eq!(encrypted(&options).await, Ok(false));
}

#[tokio::test]
async fn require_fails_against_a_server_without_tls() {
    let plain = common::cluster();
    let options = must(&format!("{}?sslmode=require", plain.url("postgres")));
    let e = encrypted(&options).await.unwrap_err();
    assert!(e.contains("does not support TLS"), "{e}");
}

#[tokio::test]
async fn a_unix_socket_never_uses_tls_whatever_the_sslmode() {
    let plain = common::cluster();
    let conninfo = format!("{} sslmode=require", plain.connection_string("postgres"));
    let options = must(&conninfo);
    assert_eq!(options.ssl_mode(), SslMode::Disable);
    assert_eq!(encrypted(&options).await, Ok(false));
}

#[tokio::test]
async fn a_client_certificate_authenticates_a_cert_role() {
    let s = server();
    let base = format!(
        "host=localhost hostaddr=127.0.0.1 port={} user={CERT_ROLE} dbname=postgres \
         sslmode=verify-full sslrootcert={}",
        s.cluster.port(),
        s.path("ca.crt").display()
    );
    let with_cert = format!(
        "{base} sslcert={} sslkey={}",
        s.path("client.crt").display(),
        s.path("client.key").display()
    );
    assert_eq!(encrypted(&must(&with_cert)).await, Ok(true));
    // Without the certificate the role cannot log in (pg_hba says cert).
    assert!(encrypted(&must(&base)).await.is_err());
    // The same by the variables.
    let options = options(
        &base,
        &[
            ("PGSSLCERT", s.path("client.crt").to_str().unwrap()),
            ("PGSSLKEY", s.path("client.key").to_str().unwrap()),
        ],
    )
    .unwrap();
    assert_eq!(encrypted(&options).await, Ok(true));
}

#[tokio::test]
async fn a_client_holds_a_lease_over_verify_full() {
    let s = server();
    let ca = s.path("ca.crt");
    let options = must(&s.url(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={}", ca.display()),
    ));
    let client = tokio::time::timeout(
        CONNECT_BOUND,
        pglease::Client::builder().connect_options(&options),
    )
    .await
    .expect("connecting within the bound")
    .expect("a client over TLS");
    let key = common::key("tls-lease");
    let lease = client
        .try_acquire(&key, Duration::from_secs(30))
        .await
        .expect("acquire over TLS")
        .expect("the key is free");
    lease.release().await.expect("release over TLS");
}

#[tokio::test]
async fn the_password_file_is_used_when_no_password_is_given() {
    let plain = common::cluster();
    let dir = tempfile::tempdir().unwrap();
    let passfile = dir.path().join("pgpass");
    write_private(
        &passfile,
        &format!(
            "127.0.0.1:{}:*:postgres:{}\n",
            plain.port(),
            plain.password()
        ),
    );
    let url = format!(
        "postgresql://postgres@127.0.0.1:{}/postgres?sslmode=disable",
        plain.port()
    );
    let vars = [("PGPASSFILE", passfile.to_str().unwrap())];
    let options = options(&url, &vars).unwrap();
    assert_eq!(options.password_file(), Some(passfile.as_path()));
    assert_eq!(encrypted(&options).await, Ok(false));
    // Group-readable: ignored, with libpq's warning; the server then wants a password.
    std::fs::set_permissions(&passfile, std::fs::Permissions::from_mode(0o640)).unwrap();
    let options = self::options(&url, &vars).unwrap();
    assert_eq!(options.password_file(), None);
    assert!(options.warnings()[0].contains("group or world access"));
    assert!(encrypted(&options).await.is_err());
}
