use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;

use tokio_postgres::config::Host;

use super::*;

/// Reads `conninfo` with exactly the variables `vars` (and `HOME` at `home`).
fn read(conninfo: &str, home: &Path, vars: &[(&str, &str)]) -> Result<ConnectOptions> {
    let mut map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    map.insert("HOME".into(), home.display().to_string());
    ConnectOptions::parse_with_env(conninfo, &move |name| map.get(name).cloned())
}

fn message(result: Result<ConnectOptions>) -> String {
    let e = result.unwrap_err();
    assert!(e.is_invalid_input(), "{e}");
    e.message().to_owned()
}

#[test]
fn the_string_wins_over_the_variables_which_fill_what_it_leaves_out() {
    let home = tempfile::tempdir().unwrap();
    let options = read(
        "postgresql://alice@db1/app",
        home.path(),
        &[
            ("PGHOST", "ignored"),
            ("PGPORT", "6543"),
            ("PGUSER", "bob"),
            ("PGPASSWORD", "pw"),
        ],
    )
    .unwrap();
    let config = options.config();
    assert_eq!(config.get_hosts(), &[Host::Tcp("db1".into())]);
    assert_eq!(config.get_ports(), &[6543]);
    assert_eq!(config.get_user(), Some("alice"));
    assert_eq!(config.get_dbname(), Some("app"));
    assert_eq!(config.get_password(), Some(&b"pw"[..]));
    assert_eq!(options.ssl_mode(), SslMode::Prefer);
}

#[test]
fn without_a_host_the_default_socket_is_used_and_tls_is_off() {
    let home = tempfile::tempdir().unwrap();
    let options = read("dbname=app sslmode=verify-full", home.path(), &[]).unwrap();
    assert_eq!(
        options.config().get_hosts(),
        &[Host::Unix(default_socket_dir().to_path_buf())]
    );
    assert_eq!(options.ssl_mode(), SslMode::Disable);
    assert!(options.config().get_user().is_some());
}

#[test]
fn unknown_and_unsupported_options_are_refused_by_name() {
    let home = tempfile::tempdir().unwrap();
    let m = message(read("host=h colour=blue", home.path(), &[]));
    assert!(m.contains("invalid connection option \"colour\""), "{m}");
    let m = message(read("postgresql://h/d?sslcrl=/x", home.path(), &[]));
    assert!(m.contains("\"sslcrl\" is not supported"), "{m}");
    let m = message(read("host=h sslmode=sometimes", home.path(), &[]));
    assert!(m.contains("invalid sslmode \"sometimes\""), "{m}");
    let m = message(read("host=h", home.path(), &[("PGSSLMODE", "maybe")]));
    assert!(m.contains("invalid sslmode \"maybe\""), "{m}");
    let m = message(read("host=h connect_timeout=soon", home.path(), &[]));
    assert!(m.contains("connect_timeout"), "{m}");
}

#[test]
fn verifying_modes_need_a_root_certificate() {
    let home = tempfile::tempdir().unwrap();
    let m = message(read("host=db sslmode=verify-full", home.path(), &[]));
    assert!(
        m.contains(".postgresql/root.crt") && m.contains("does not exist"),
        "{m}"
    );
    let m = message(read(
        "host=db sslmode=verify-ca sslrootcert=/nonexistent/ca.pem",
        home.path(),
        &[],
    ));
    assert!(
        m.contains("/nonexistent/ca.pem (sslrootcert) does not exist"),
        "{m}"
    );
    // require without a root certificate encrypts without checking, as libpq.
    let options = read("host=db sslmode=require", home.path(), &[]).unwrap();
    assert_eq!(options.ssl_mode(), SslMode::Require);
}

#[test]
fn sslrootcert_system_means_verify_full_and_refuses_weaker_modes() {
    let home = tempfile::tempdir().unwrap();
    let m = message(read(
        "host=db sslrootcert=system sslmode=require",
        home.path(),
        &[],
    ));
    assert!(m.contains("may not be used with sslrootcert=system"), "{m}");
    // Whether the system has CAs varies; the mode is decided before they are read.
    if let Ok(options) = read("host=db sslrootcert=system", home.path(), &[]) {
        assert_eq!(options.ssl_mode(), SslMode::VerifyFull);
    }
}

#[test]
fn a_missing_client_certificate_or_an_open_key_is_an_error() {
    let home = tempfile::tempdir().unwrap();
    let m = message(read("host=db sslcert=/nonexistent.crt", home.path(), &[]));
    assert!(m.contains("sslcert /nonexistent.crt"), "{m}");
    let cert = home.path().join("c.crt");
    let key = home.path().join("c.key");
    fs::write(&cert, "").unwrap();
    fs::write(&key, "").unwrap();
    fs::set_permissions(&key, fs::Permissions::from_mode(0o644)).unwrap();
    let conninfo = format!(
        "host=db sslcert={} sslkey={}",
        cert.display(),
        key.display()
    );
    let m = message(read(&conninfo, home.path(), &[]));
    assert!(m.contains("group or world access"), "{m}");
    fs::set_permissions(&key, fs::Permissions::from_mode(0o600)).unwrap();
    let m = message(read(&conninfo, home.path(), &[]));
    assert!(m.contains("no PEM certificate"), "{m}");
}

#[test]
fn the_password_file_supplies_a_missing_password() {
    let home = tempfile::tempdir().unwrap();
    let pgpass = home.path().join(".pgpass");
    fs::write(&pgpass, "db1:5432:app:alice:from-file\n").unwrap();
    fs::set_permissions(&pgpass, fs::Permissions::from_mode(0o600)).unwrap();
    let options = read("host=db1 user=alice dbname=app", home.path(), &[]).unwrap();
    assert_eq!(options.config().get_password(), Some(&b"from-file"[..]));
    assert_eq!(options.password_file(), Some(pgpass.as_path()));
    // A password given wins; another port does not match.
    let options = read(
        "host=db1 user=alice dbname=app password=given",
        home.path(),
        &[],
    )
    .unwrap();
    assert_eq!(options.config().get_password(), Some(&b"given"[..]));
    let options = read("host=db1 port=5433 user=alice dbname=app", home.path(), &[]).unwrap();
    assert_eq!(options.config().get_password(), None);
    // PGPASSFILE names another file.
    let other = home.path().join("other");
    fs::write(&other, "*:*:*:*:other\n").unwrap();
    fs::set_permissions(&other, fs::Permissions::from_mode(0o600)).unwrap();
    let vars = [("PGPASSFILE", other.to_str().unwrap())];
    let options = read("host=db1 user=alice dbname=app", home.path(), &vars).unwrap();
    assert_eq!(options.config().get_password(), Some(&b"other"[..]));
}

#[test]
fn a_group_readable_password_file_is_ignored_with_a_warning() {
    let home = tempfile::tempdir().unwrap();
    let pgpass = home.path().join(".pgpass");
    fs::write(&pgpass, "*:*:*:*:secret\n").unwrap();
    fs::set_permissions(&pgpass, fs::Permissions::from_mode(0o640)).unwrap();
    let options = read("host=db1 user=alice", home.path(), &[]).unwrap();
    assert_eq!(options.config().get_password(), None);
    assert!(
        options.warnings()[0].contains("group or world access"),
        "{:?}",
        options.warnings()
    );
}

#[test]
fn libpq_connect_timeout_rules_apply() {
    let home = tempfile::tempdir().unwrap();
    let options = read("host=h connect_timeout=1", home.path(), &[]).unwrap();
    assert_eq!(
        options.config().get_connect_timeout(),
        Some(&std::time::Duration::from_secs(2))
    );
    let options = read("host=h", home.path(), &[("PGCONNECT_TIMEOUT", "0")]).unwrap();
    assert_eq!(options.config().get_connect_timeout(), None);
}

#[test]
fn an_address_alone_is_also_the_name_tls_checks() {
    let home = tempfile::tempdir().unwrap();
    let options = read("hostaddr=127.0.0.1 sslmode=require", home.path(), &[]).unwrap();
    assert_eq!(
        options.config().get_hosts(),
        &[Host::Tcp("127.0.0.1".into())]
    );
    let options = read("hostaddr=127.0.0.1 sslmode=disable", home.path(), &[]).unwrap();
    assert!(options.config().get_hosts().is_empty());
}

#[test]
fn docs_name_every_variable_and_every_refused_option() {
    let doc =
        fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/CLIENT.md"))
            .expect("docs/CLIENT.md");
    let section = &doc[doc.find("### Connecting").expect("a Connecting section")..];
    for (var, _) in ENVIRONMENT {
        assert!(
            section.contains(&format!("`{var}`")),
            "docs/CLIENT.md does not name {var}"
        );
    }
    for key in UNSUPPORTED {
        assert!(
            section.contains(&format!("`{key}`")),
            "docs/CLIENT.md does not name {key}"
        );
    }
}
