//! Unit tests of `connect.rs`.

use super::*;
use std::collections::HashMap;

fn resolve(url: Option<&str>, vars: &[(&str, &str)]) -> Result<Target, ConfigError> {
    let vars: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let args = ConnArgs {
        database_url: url.map(str::to_owned),
        request_timeout: DEFAULT_REQUEST_TIMEOUT,
    };
    Target::resolve_with(&args, 15, &|name| vars.get(name).cloned())
}

fn remote(target: Target) -> Config {
    remote_options(target).config().clone()
}

fn remote_options(target: Target) -> ConnectOptions {
    match target.place {
        Place::Remote { options, .. } => *options,
        Place::Local { .. } => panic!("expected a remote target, got the local server"),
    }
}

#[test]
fn a_url_wins_and_pg_variables_fill_its_gaps() {
    let config = remote(
        resolve(
            Some("postgresql://app@db.example/appdb"),
            &[
                ("PGHOST", "other"),
                ("PGPASSWORD", "s3cret"),
                ("PGPORT", "6543"),
            ],
        )
        .unwrap(),
    );
    assert_eq!(config.get_hosts(), [Host::Tcp("db.example".into())]);
    assert_eq!(config.get_user(), Some("app"));
    assert_eq!(config.get_password(), Some(&b"s3cret"[..]));
    assert_eq!(config.get_ports(), [6543]);
    assert_eq!(config.get_dbname(), Some("appdb"));
}

#[test]
fn pg_variables_alone_select_a_server() {
    let config = remote(
        resolve(
            None,
            &[("PGHOST", "/var/run/postgresql"), ("PGDATABASE", "jobs")],
        )
        .unwrap(),
    );
    assert_eq!(
        config.get_hosts(),
        [Host::Unix("/var/run/postgresql".into())]
    );
    assert_eq!(config.get_dbname(), Some("jobs"));
}

#[test]
fn a_password_alone_does_not_select_a_server() {
    assert!(matches!(
        resolve(None, &[("PGPASSWORD", "x")]),
        Ok(Target {
            place: Place::Local { .. },
            ..
        }) | Err(ConfigError::Other(_))
    ));
}

#[test]
fn tls_settings_are_read_and_their_mistakes_are_usage_errors() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path().to_str().unwrap();
    let options = remote_options(
        resolve(Some("postgresql://h/db?sslmode=require"), &[("HOME", home)]).unwrap(),
    );
    assert_eq!(options.ssl_mode(), pglease::SslMode::Require);
    let options = remote_options(
        resolve(
            Some("postgresql://h/db"),
            &[("HOME", home), ("PGSSLMODE", "disable")],
        )
        .unwrap(),
    );
    assert_eq!(options.ssl_mode(), pglease::SslMode::Disable);
    for (url, vars) in [
        (
            Some("postgresql://h/db?sslmode=sometimes"),
            vec![("HOME", home)],
        ),
        (
            Some("postgresql://h/db"),
            vec![("HOME", home), ("PGSSLMODE", "verify-full")],
        ),
    ] {
        assert!(matches!(resolve(url, &vars), Err(ConfigError::Usage(_))));
    }
}

#[test]
fn the_connect_timeout_follows_libpq() {
    let limits = |url: Option<&str>, vars: &[(&str, &str)]| {
        resolve(url, vars)
            .map(|t| t.limits.connect)
            .map_err(|e| match e {
                ConfigError::Usage(m) | ConfigError::Other(m) => m,
            })
    };
    let url = Some("postgresql://h/db");
    assert_eq!(limits(url, &[]), Ok(Some(DEFAULT_CONNECT_TIMEOUT)));
    let secs = |s| Ok(Some(Duration::from_secs(s)));
    assert_eq!(limits(url, &[("PGCONNECT_TIMEOUT", "5")]), secs(5));
    assert_eq!(limits(url, &[("PGCONNECT_TIMEOUT", "1")]), secs(2));
    assert_eq!(limits(url, &[("PGCONNECT_TIMEOUT", "0")]), Ok(None));
    assert_eq!(limits(url, &[("PGCONNECT_TIMEOUT", "-3")]), Ok(None));
    assert!(limits(url, &[("PGCONNECT_TIMEOUT", "soon")]).is_err());
    // The URL's own setting wins, in either syntax.
    let env = [("PGCONNECT_TIMEOUT", "5")];
    assert_eq!(
        limits(Some("postgresql://h/db?connect_timeout=7"), &env),
        secs(7)
    );
    assert_eq!(
        limits(Some("postgresql://h/db?connect_timeout=0"), &env),
        Ok(None)
    );
    assert_eq!(
        limits(Some("host=h connect_timeout = '8' dbname=x"), &env),
        secs(8)
    );
    assert_eq!(limits(Some("host=h dbname=x"), &env), secs(5));
    let config = remote(resolve(Some("postgresql://h/db"), &env).unwrap());
    assert_eq!(config.get_connect_timeout(), Some(&Duration::from_secs(5)));
}

#[test]
fn conninfo_values_are_read_like_libpq() {
    assert_eq!(
        raw_param("host='/a b' connect_timeout=3", "host"),
        Some("/a b".into())
    );
    assert_eq!(
        raw_param("password='it\\'s' x=1", "password"),
        Some("it's".into())
    );
    assert_eq!(raw_param("host=h", "port"), None);
    assert_eq!(
        raw_param("postgresql://h/db?a=1&port=5", "port"),
        Some("5".into())
    );
    assert_eq!(raw_param("postgresql://h/db", "port"), None);
}

#[test]
fn malformed_urls_are_usage_errors_saying_why() {
    for (url, why) in [
        ("postgresql://h:notaport/db", "invalid port \"notaport\""),
        ("host=h dbname", "missing `=` after \"dbname\""),
        (
            "postgresql://h/db?colour=blue",
            "invalid connection option \"colour\"",
        ),
    ] {
        match resolve(Some(url), &[]) {
            Err(ConfigError::Usage(m)) => {
                assert!(m.starts_with("--database-url / DATABASE_URL: "), "{m}");
                assert!(m.contains(why), "{url}: {m}");
            }
            other => panic!("{url}: expected a usage error, got {other:?}"),
        }
    }
}
