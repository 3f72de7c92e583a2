//! Connecting as libpq does, end to end: TLS to a server with `ssl=on` and a certificate for
//! `localhost` from a CA made for the test, the password file, and connection strings that do not
//! parse.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::OnceLock;

use pgcluster::{Cluster, ClusterBuilder, TestCa};

use crate::common::{self, Case};

/// The TLS server and the PEM certificates of its CA and of another CA.
struct TlsServer {
    cluster: Cluster,
    ca_pem: String,
    other_ca_pem: String,
}

fn server() -> &'static TlsServer {
    static SERVER: OnceLock<TlsServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        let ca = TestCa::new("pglease e2e CA");
        let mirrors = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/pgcluster-mirrors");
        let cluster = ClusterBuilder::for_major(common::major())
            .and_then(|b| {
                b.private_mirror(true)
                    .cache_dir(mirrors)
                    .extension_dir(common::extension_dir())
                    .extension_dir(common::extension_dir().with_file_name("pg_lease_queue"))
                    .tls(ca.server_tls(&["localhost"], false))
                    .start()
            })
            .unwrap_or_else(|e| panic!("could not start a TLS server: {e}"));
        TlsServer {
            cluster,
            ca_pem: ca.cert_pem(),
            other_ca_pem: TestCa::new("another CA").cert_pem(),
        }
    })
}

fn write_private(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// The case's database on the TLS server by the name `localhost` (connecting to 127.0.0.1), with
/// `params`.
fn url(case: &Case, params: &str) -> String {
    let cluster = &server().cluster;
    let db = case.url.rsplit('/').next().unwrap();
    format!(
        "postgresql://postgres:{}@localhost:{}/{db}?hostaddr=127.0.0.1&{params}",
        cluster.password(),
        cluster.port()
    )
}

#[test]
fn commands_connect_with_verify_full_and_the_ca_from_the_url() {
    let case = Case::on(&server().cluster, "tls_status");
    let ca = case.file("ca.crt");
    write_private(&ca, &server().ca_pem);
    let database_url = url(
        &case,
        &format!("sslmode=verify-full&sslrootcert={}", ca.display()),
    );
    let out = case
        .bare(["status", "--json"])
        .env("HOME", case.path())
        .env("DATABASE_URL", &database_url)
        .expect_code(0);
    assert_eq!(out.json()["pg_lease"]["current"], true, "{}", out.report());
    let target = out.json()["target"].as_str().unwrap().to_owned();
    assert!(
        target.contains("@localhost:") && target.ends_with("sslmode=verify-full)"),
        "{target}"
    );
    // A lease held through the client library's pool and listening connection, over TLS.
    case.bare(["run", "-k", "tls-run", "-t", "30s", "--", "true"])
        .env("HOME", case.path())
        .env("DATABASE_URL", &database_url)
        .expect_code(0);
    case.bare(["acquire", "-k", "tls-acquire", "-o", "me", "-t", "1m"])
        .env("HOME", case.path())
        .env("DATABASE_URL", &database_url)
        .expect_code(0);
}

#[test]
fn a_certificate_from_another_ca_is_refused_saying_why() {
    let case = Case::on(&server().cluster, "tls_refused");
    let other = case.file("other-ca.crt");
    write_private(&other, &server().other_ca_pem);
    let database_url = url(
        &case,
        &format!("sslmode=verify-full&sslrootcert={}", other.display()),
    );
    let out = case
        .bare(["status"])
        .env("HOME", case.path())
        .env("DATABASE_URL", &database_url)
        .expect_code(1);
    assert!(
        out.stderr().contains("not signed by a CA in sslrootcert"),
        "{}",
        out.report()
    );
}

#[test]
fn verify_full_without_a_root_certificate_is_a_usage_error_naming_the_file() {
    let case = Case::new("tls_no_root");
    let out = case
        .bare(["status"])
        .env("HOME", case.path())
        .env(
            "DATABASE_URL",
            "postgresql://app@db.example/app?sslmode=verify-full",
        )
        .expect_code(2);
    assert!(
        out.stderr().contains(".postgresql/root.crt") && out.stderr().contains("sslrootcert"),
        "{}",
        out.report()
    );
}

#[test]
fn the_password_file_is_read_and_a_group_readable_one_ignored_with_a_warning() {
    let case = Case::new("pgpass");
    let cluster = common::cluster();
    let passfile = case.file("pgpass");
    write_private(
        &passfile,
        &format!(
            "127.0.0.1:{}:*:postgres:{}\n",
            cluster.port(),
            cluster.password()
        ),
    );
    let without_password = case
        .url
        .replacen(&format!(":{}@", cluster.password()), "@", 1);
    assert!(!without_password.contains(cluster.password()));
    let status = |case: &Case, code| {
        case.bare(["status"])
            .env("HOME", case.path())
            .env("DATABASE_URL", &without_password)
            .env("PGPASSFILE", &passfile)
            .expect_code(code)
    };
    status(&case, 0);
    std::fs::set_permissions(&passfile, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = status(&case, 1);
    assert!(
        out.stderr().contains("pglease: warning: password file")
            && out.stderr().contains("group or world access"),
        "{}",
        out.report()
    );
}

#[test]
fn an_invalid_connection_string_says_which_part_is_wrong() {
    let case = Case::new("bad_url");
    for (url, why) in [
        ("postgresql://h:port/db", "invalid port \"port\""),
        ("host=h dbname", "missing `=` after \"dbname\""),
        (
            "postgresql://h/db?sslmode=sometimes",
            "invalid sslmode \"sometimes\"",
        ),
    ] {
        let out = case
            .bare(["status"])
            .env("DATABASE_URL", url)
            .expect_code(2);
        assert!(out.stderr().contains(why), "{url}: {}", out.report());
    }
}
