//! One message, for every command, when the extension a command needs is not installed in its
//! database or is older than this pglease: it names the extension, the database and the server,
//! the command that fixes it and the privilege that command needs; the command exits with
//! [`EXIT_NOT_INSTALLED`](crate::exit::EXIT_NOT_INSTALLED).
//!
//! A command's error is only a suspicion ([`suspects_missing`]): the library's not-installed or
//! version-mismatch error, or a server error with SQLSTATE `3F000` (invalid_schema_name: no schema
//! `lease`), `42883` (undefined_function: a function of a later version) or `42P01`
//! (undefined_table). It is confirmed by a catalog check on a fresh connection ([`check`]), never
//! by the text of a message; when the check finds the extension in place, the original error
//! stands.

use std::cmp::Ordering;
use std::fmt;

use pglease::Extension;
use tokio_postgres::Client;

use crate::connect::Target;
use crate::exit::BoxError;

/// The extension a command needs is missing from its database, or installed at an older version.
#[derive(Debug)]
pub struct NotReady {
    message: String,
}

impl fmt::Display for NotReady {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for NotReady {}

/// Whether `e` (or one of its sources) is a [`NotReady`].
pub fn is_not_ready(e: &(dyn std::error::Error + 'static)) -> bool {
    chain(e).any(|e| e.is::<NotReady>())
}

/// `e` and its sources.
fn chain<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(e), |e| e.source())
}

/// The SQLSTATE of the first server error in `e`'s chain (either library's, or tokio-postgres's).
pub fn sqlstate(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    chain(e).find_map(|e| {
        if let Some(lease) = e.downcast_ref::<pglease::Error>() {
            lease.code().map(str::to_owned)
        } else if let Some(queue) = e.downcast_ref::<pglease_queue::Error>() {
            queue.code().map(str::to_owned)
        } else {
            e.downcast_ref::<tokio_postgres::Error>()
                .and_then(tokio_postgres::Error::code)
                .map(|c| c.code().to_owned())
        }
    })
}

/// Whether `e` may mean that an extension is missing or outdated (to be confirmed by [`check`]).
pub fn suspects_missing(e: &(dyn std::error::Error + 'static)) -> bool {
    let library = chain(e).any(|e| {
        e.downcast_ref::<pglease::Error>()
            .is_some_and(|e| e.is_not_installed() || e.is_version_mismatch())
    });
    library || matches!(sqlstate(e).as_deref(), Some("3F000" | "42883" | "42P01"))
}

/// Checks in the catalog that `ext` is installed in the database `client` is connected to, at
/// this pglease's version or later.
///
/// # Errors
///
/// [`NotReady`] if it is missing or older; a failing query's own error.
pub async fn check(client: &Client, target: &Target, ext: &Extension) -> Result<(), BoxError> {
    let installed = target.answer(ext.installed(client)).await?;
    let older = match installed {
        None => None,
        Some(found) if older(&found.version, ext.version) => Some(found),
        Some(_) => return Ok(()),
    };
    let database: String = target
        .answer(client.query_one("SELECT pg_catalog.current_database()::text", &[]))
        .await?
        .try_get(0)?;
    Err(Box::new(NotReady {
        message: message(
            ext,
            older.as_ref().map(|f| (f.version.as_str(), f.via)),
            &database,
            &target.describe(),
        ),
    }))
}

/// `error`, or the [`NotReady`] it turns out to mean: if it [`suspects_missing`], connects again
/// and [`check`]s. A failure of the check itself leaves `error` as it was.
pub async fn explain(error: BoxError, target: &Target, ext: &Extension) -> BoxError {
    if is_not_ready(&*error) || !suspects_missing(&*error) {
        return error;
    }
    let checked = async {
        let client = target.connect().await?;
        check(&client, target, ext).await
    };
    match checked.await {
        Err(e) if is_not_ready(&*e) => e,
        _ => error,
    }
}

/// Runs `command`; its error is [`explain`]ed.
pub async fn explained<T>(
    target: &Target,
    ext: &Extension,
    command: impl Future<Output = Result<T, BoxError>>,
) -> Result<T, BoxError> {
    match command.await {
        Ok(value) => Ok(value),
        Err(e) => Err(explain(e, target, ext).await),
    }
}

/// The message: what is missing where, and how to fix it.
fn message(
    ext: &Extension,
    older: Option<(&str, pglease::Via)>,
    database: &str,
    server: &str,
) -> String {
    let mut install = "pglease install".to_owned();
    if ext.name != pglease::PG_LEASE.name {
        install = format!("{install} {}", ext.name);
    }
    match older {
        None => format!(
            "{name} is not installed in database {database:?} on {server}: run `{install}` with \
             the same connection settings; it needs CREATE on the database (the extension is \
             trusted: no superuser), and --schema-only where the server lacks the extension files \
             (managed PostgreSQL)",
            name = ext.name,
        ),
        Some((found, via)) => format!(
            "{name} {found} is installed in database {database:?} on {server}, older than the \
             {want} this pglease speaks: upgrade it with `{install}{schema_only}` with the same \
             connection settings (as the role that installed it)",
            name = ext.name,
            want = ext.version,
            schema_only = if via == pglease::Via::Script {
                " --schema-only"
            } else {
                ""
            },
        ),
    }
}

/// Whether version `a` is older than `b` (dotted numbers; a part that is not a number compares
/// as text).
fn older(a: &str, b: &str) -> bool {
    let parts = |v: &str| -> Vec<String> { v.split('.').map(str::to_owned).collect() };
    let (a, b) = (parts(a), parts(b));
    for (x, y) in a.iter().zip(&b) {
        let ord = match (x.parse::<u64>(), y.parse::<u64>()) {
            (Ok(x), Ok(y)) => x.cmp(&y),
            _ => x.cmp(y),
        };
        if ord != Ordering::Equal {
            return ord == Ordering::Less;
        }
    }
    a.len() < b.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_by_number() {
        assert!(older("0.6.0", "0.7.0"));
        assert!(older("0.9.0", "0.10.0"));
        assert!(!older("0.7.0", "0.7.0"));
        assert!(!older("0.8.0", "0.7.0"));
        assert!(older("0.7", "0.7.0"));
    }

    #[test]
    fn the_message_names_database_server_command_and_privilege() {
        let m = message(&pglease::PG_LEASE_QUEUE, None, "app", "app@db:5432/app");
        assert!(m.contains("pg_lease_queue is not installed in database \"app\" on app@db"));
        assert!(m.contains("`pglease install pg_lease_queue`"));
        assert!(m.contains("CREATE on the database"));
        let found = ("0.6.0", pglease::Via::Script);
        let m = message(&pglease::PG_LEASE, Some(found), "app", "s");
        assert!(m.contains("pg_lease 0.6.0 is installed"));
        assert!(m.contains("`pglease install --schema-only`"));
    }

    #[test]
    fn only_missing_objects_are_suspect() {
        let other: BoxError = "connection refused".into();
        assert!(!suspects_missing(&*other));
        let not_ready: BoxError = Box::new(NotReady {
            message: "x".into(),
        });
        assert!(is_not_ready(&*crate::exit::context("doing", not_ready)));
    }
}
