//! Getting pg_lease's SQL API into a database: by `CREATE EXTENSION` where the server has the
//! extension files, or by running the extension's own script where it has not (managed PostgreSQL).
//!
//! Both paths take the same transaction-scoped advisory lock ([`LOCK_KEY`]), so concurrent
//! installers serialise and all but the first find pg_lease installed. The script path records what
//! it applied in `lease.schema_migrations`; the extension path is recorded by PostgreSQL in
//! `pg_extension`. [`installed`] reads either.

use tokio_postgres::{Client, GenericClient};

use crate::calls::{get, one_row};
use crate::error::{Error, Result};

/// One script of the installation chain, embedded from `extensions/pg_lease/sql/` (the very files
/// `CREATE EXTENSION` runs, never copies).
///
/// # Examples
///
/// ```
/// for step in pglease::MIGRATIONS {
///     println!("{:?} -> {}: {}", step.from, step.to, step.file);
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    /// The version this script upgrades from; `None` for the base install script.
    pub from: Option<&'static str>,
    /// The version the database is at after this script.
    pub to: &'static str,
    /// The script's file name in `extensions/pg_lease/sql/` (what `make install` ships).
    pub file: &'static str,
    /// The script itself.
    pub script: &'static str,
}

/// The chain of scripts from nothing to [`VERSION`], in order: the base script, then each upgrade.
///
/// `CREATE EXTENSION pg_lease` walks the same chain (PostgreSQL installs the base version and applies
/// the upgrade scripts); [`install()`] applies the steps a database does not have yet.
///
/// # Examples
///
/// ```
/// assert_eq!(pglease::MIGRATIONS[0].from, None);
/// assert_eq!(pglease::MIGRATIONS.last().unwrap().to, pglease::VERSION);
/// ```
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        from: None,
        to: "0.1.0",
        file: "pg_lease--0.1.0.sql",
        script: include_str!("../../../extensions/pg_lease/sql/pg_lease--0.1.0.sql"),
    },
    Migration {
        from: Some("0.1.0"),
        to: "0.2.0",
        file: "pg_lease--0.1.0--0.2.0.sql",
        script: include_str!("../../../extensions/pg_lease/sql/pg_lease--0.1.0--0.2.0.sql"),
    },
    Migration {
        from: Some("0.2.0"),
        to: "0.3.0",
        file: "pg_lease--0.2.0--0.3.0.sql",
        script: include_str!("../../../extensions/pg_lease/sql/pg_lease--0.2.0--0.3.0.sql"),
    },
];

/// The extension's control file, `extensions/pg_lease/pg_lease.control` (for tools that install the files).
///
/// # Examples
///
/// ```
/// assert!(pglease::CONTROL.contains("default_version"));
/// ```
pub const CONTROL: &str = include_str!("../../../extensions/pg_lease/pg_lease.control");

/// The version of pg_lease's SQL API that this library speaks and installs.
///
/// # Examples
///
/// ```
/// assert_eq!(pglease::VERSION, "0.3.0");
/// ```
pub const VERSION: &str = "0.3.0";

/// The key of the transaction-scoped advisory lock (`pg_advisory_xact_lock(bigint)`) that serialises
/// installers: the bytes `pg_lease` read as a big-endian `i64`.
///
/// # Examples
///
/// ```
/// assert_eq!(pglease::LOCK_KEY.to_be_bytes(), *b"pg_lease");
/// ```
pub const LOCK_KEY: i64 = i64::from_be_bytes(*b"pg_lease");

/// A line that marks the next statement as one for `CREATE EXTENSION` only; the script installer
/// drops it and the statement (through the next line ending with `;`).
const EXTENSION_ONLY: &str = "-- pglease:extension-only";

/// The schema pg_lease lives in (the control file's `schema`; the extension is not relocatable).
const SCHEMA: &str = "lease";

/// How pg_lease got into a database.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(db: &tokio_postgres::Client) -> pglease::Result<()> {
/// if let Some(found) = pglease::installed(db).await? {
///     if found.via == pglease::Via::Script {
///         println!("installed without the extension files");
///     }
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Via {
    /// `CREATE EXTENSION pg_lease`: the server has the extension files; PostgreSQL tracks it in
    /// `pg_extension`, and `ALTER EXTENSION` / `DROP EXTENSION` manage it.
    Extension,
    /// [`install()`] ran the extension script itself; `lease.schema_migrations` records the version.
    Script,
}

/// pg_lease as found installed in a database: its version and how it got there.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(db: &tokio_postgres::Client) -> pglease::Result<()> {
/// let found = pglease::check_version(db).await?;
/// println!("pg_lease {} via {:?}", found.version, found.via);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Installed {
    /// The installed version of the SQL API (compare with [`VERSION`]).
    pub version: String,
    /// Whether it was installed by `CREATE EXTENSION` or by [`install()`].
    pub via: Via,
}

// The read-only checks ([`installed`], [`check_version`]) use unnamed statements (`query_typed`),
// so they also work through a transaction-mode pooler such as PgBouncer.

/// What a database holds, as far as the installers care.
#[derive(Debug, PartialEq, Eq)]
enum State {
    /// No schema `lease`, or an empty one.
    Absent { schema_exists: bool },
    /// `CREATE EXTENSION pg_lease`, at this version.
    Extension(String),
    /// The script installer's work, at this version.
    Script(String),
    /// pg_lease objects without a record of how or which version they came.
    Unrecorded,
    /// A schema `lease` holding this many objects, none of them pg_lease's.
    Foreign(i64),
}

const DETECT: &str = "\
SELECT (SELECT e.extversion FROM pg_catalog.pg_extension AS e WHERE e.extname = 'pg_lease'),
       n.oid IS NOT NULL,
       pg_catalog.to_regclass('lease.schema_migrations') IS NOT NULL,
       pg_catalog.to_regclass('lease.leases') IS NOT NULL
           OR pg_catalog.to_regprocedure('lease.version()') IS NOT NULL,
       (SELECT pg_catalog.count(*) FROM pg_catalog.pg_depend AS d
         WHERE d.refclassid = 'pg_catalog.pg_namespace'::pg_catalog.regclass
           AND d.refobjid = n.oid
           AND d.classid <> 'pg_catalog.pg_default_acl'::pg_catalog.regclass)
  FROM (VALUES (1)) AS one (x)
  LEFT JOIN pg_catalog.pg_namespace AS n ON n.nspname = 'lease'";

const MIGRATIONS_READABLE: &str =
    "SELECT pg_catalog.has_table_privilege('lease.schema_migrations', 'SELECT')";

const MIGRATIONS_LATEST: &str = "SELECT version FROM lease.schema_migrations \
     ORDER BY applied_at DESC, version DESC LIMIT 1";

const SQL_VERSION: &str = "SELECT lease.version()";

const CREATE_MIGRATIONS: &str = "\
CREATE TABLE lease.schema_migrations (
    version    text PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    applied_by name NOT NULL DEFAULT CURRENT_USER
);
COMMENT ON TABLE lease.schema_migrations IS
    'pg_lease versions applied by the pglease installer (databases without the extension files)';
REVOKE ALL ON TABLE lease.schema_migrations FROM PUBLIC;";

/// The installed pg_lease, if any: via `CREATE EXTENSION` or via [`install()`]; `None` otherwise.
///
/// Reads the catalogs and, for a script install, `lease.schema_migrations` (or `lease.version()` for a
/// role that may not read that table). Changes nothing and takes no lock. A schema `lease` whose
/// objects are neither is reported as `None` (and [`install()`] refuses it).
///
/// # Errors
///
/// Any server error, [`Error::is_connection`] or [`Error::is_protocol`].
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: &tokio_postgres::Client) -> pglease::Result<()> {
/// match pglease::installed(client).await? {
///     Some(found) => println!("pg_lease {} via {:?}", found.version, found.via),
///     None => println!("pg_lease is not installed"),
/// }
/// # Ok(())
/// # }
/// ```
pub async fn installed<C: GenericClient>(client: &C) -> Result<Option<Installed>> {
    Ok(match detect(client).await? {
        State::Extension(version) => Some(Installed {
            version,
            via: Via::Extension,
        }),
        State::Script(version) => Some(Installed {
            version,
            via: Via::Script,
        }),
        State::Absent { .. } | State::Unrecorded | State::Foreign(_) => None,
    })
}

/// The installed pg_lease, if it is installed at exactly this library's [`VERSION`]; an error
/// otherwise.
///
/// Checks both the recorded version (`pg_extension` or `lease.schema_migrations`) and what
/// `lease.version()` answers. Call it once per connection (or pool) before relying on the calls.
///
/// # Errors
///
/// - [`Error::is_not_installed`]: pg_lease is not installed (see [`installed`]).
/// - [`Error::is_version_mismatch`]: it is installed at another version
///   ([`Error::found_version`] says which).
/// - any server error, [`Error::is_connection`] or [`Error::is_protocol`].
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: &tokio_postgres::Client) -> pglease::Result<()> {
/// let found = pglease::check_version(client).await?;
/// assert_eq!(found.version, pglease::VERSION);
/// # Ok(())
/// # }
/// ```
pub async fn check_version<C: GenericClient>(client: &C) -> Result<Installed> {
    let found = installed(client).await?.ok_or_else(Error::not_installed)?;
    if found.version != VERSION {
        return Err(Error::version_mismatch(VERSION, &found.version));
    }
    let answered = sql_version(client).await?;
    if answered != VERSION {
        return Err(Error::version_mismatch(VERSION, &answered));
    }
    Ok(found)
}

/// Installs pg_lease [`VERSION`] by running the [`MIGRATIONS`] chain itself, for servers without the
/// extension files; a no-op if it is already installed at that version, by either path.
///
/// Runs in one transaction under the advisory lock [`LOCK_KEY`], so concurrent installers
/// serialise. It finds one of:
///
/// - `CREATE EXTENSION pg_lease` done: reports it ([`Via::Extension`], whatever its version) and
///   changes nothing;
/// - a script install recorded in `lease.schema_migrations` at [`VERSION`]: changes nothing;
/// - a script install at an older version of the chain: applies the remaining upgrade scripts;
/// - no schema `lease`, or an empty one: creates the schema if needed, creates
///   `lease.schema_migrations` (no privileges for `PUBLIC`), runs every script of the chain and
///   records each version in it.
///
/// The script is transformed exactly as `CREATE EXTENSION` transforms it, plus one marker: lines
/// starting with `\echo` are dropped, `@extowner@` becomes the current user (quoted with
/// `quote_ident`) and `@extschema@` becomes `lease`; every statement after a line
/// `-- pglease:extension-only` is dropped (through the next line ending with `;`), since it needs an
/// extension (`pg_extension_config_dump`). It runs with `search_path` set to `lease, pg_temp`, as
/// under `CREATE EXTENSION`. The current user owns everything it creates; it needs `CREATE` on the
/// database (no superuser). The `SECURITY DEFINER` functions run as that role, so install as the role
/// that should own the lease state, not as each application role.
///
/// # Errors
///
/// - [`Error::is_version_mismatch`]: a script install of another version (there are no upgrade
///   scripts yet).
/// - [`Error::is_install`]: schema `lease` exists but holds other objects, or pg_lease objects
///   without a record of their version; nothing changed.
/// - a server error from running the script, e.g. SQLSTATE `42501` without `CREATE` on the
///   database; the transaction rolled back, nothing changed.
/// - [`Error::is_connection`] (outcome unknown: call it again) or [`Error::is_protocol`].
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> pglease::Result<()> {
/// let (mut client, connection) =
///     tokio_postgres::connect("host=db.example user=app dbname=app", tokio_postgres::NoTls).await?;
/// tokio::spawn(connection);
/// let found = pglease::install(&mut client).await?;
/// println!("pg_lease {} via {:?}", found.version, found.via);
/// # Ok(())
/// # }
/// ```
pub async fn install(client: &mut Client) -> Result<Installed> {
    let tx = client.transaction().await?;
    lock(&tx).await?;
    let schema_exists = match detect(&tx).await? {
        State::Extension(version) => {
            tx.rollback().await?;
            return Ok(Installed {
                version,
                via: Via::Extension,
            });
        }
        State::Script(version) if version == VERSION => {
            tx.rollback().await?;
            return Ok(Installed {
                version,
                via: Via::Script,
            });
        }
        State::Script(version) => {
            let Some(pending) = steps_after(Some(&version)) else {
                return Err(Error::version_mismatch(VERSION, &version));
            };
            apply(&tx, pending).await?;
            tx.commit().await?;
            return Ok(Installed {
                version: VERSION.to_owned(),
                via: Via::Script,
            });
        }
        State::Unrecorded => return Err(unrecorded()),
        State::Foreign(objects) => return Err(foreign(objects)),
        State::Absent { schema_exists } => schema_exists,
    };

    if !schema_exists {
        tx.batch_execute("CREATE SCHEMA lease").await?;
    }
    tx.batch_execute(CREATE_MIGRATIONS).await?;
    apply(&tx, MIGRATIONS).await?;
    tx.commit().await?;
    Ok(Installed {
        version: VERSION.to_owned(),
        via: Via::Script,
    })
}

/// The steps that lead from `version` (`None`: nothing installed) to [`VERSION`], or `None` if the
/// chain does not pass through `version`.
fn steps_after(version: Option<&str>) -> Option<&'static [Migration]> {
    match version {
        None => Some(MIGRATIONS),
        Some(v) => MIGRATIONS
            .iter()
            .position(|m| m.to == v)
            .map(|i| &MIGRATIONS[i + 1..]),
    }
}

/// Runs `steps` in the installer's transaction, as `CREATE EXTENSION` would, recording each version.
async fn apply(tx: &tokio_postgres::Transaction<'_>, steps: &[Migration]) -> Result<()> {
    let row = one_row(
        tx.query("SELECT pg_catalog.quote_ident(CURRENT_USER::text)", &[])
            .await?,
        "quote_ident(current_user)",
    )?;
    let extowner: String = get(&row, 0, "quote_ident(current_user)")?;
    tx.batch_execute(
        "SET LOCAL search_path = lease, pg_temp; SET LOCAL client_min_messages = warning",
    )
    .await?;
    for step in steps {
        tx.batch_execute(&transform(step.script, &extowner)).await?;
        tx.execute(
            "INSERT INTO lease.schema_migrations (version) VALUES ($1)",
            &[&step.to],
        )
        .await?;
    }
    Ok(())
}

/// Installs pg_lease [`VERSION`] with `CREATE EXTENSION`, for servers that have the extension files;
/// a no-op if the extension is already created.
///
/// Runs in one transaction under the same advisory lock as [`install()`]. An extension that already
/// exists is reported at whatever version it has (use [`check_version`] to insist on [`VERSION`]).
/// `pg_lease` is a trusted extension: a role with `CREATE` on the database needs no superuser.
///
/// # Errors
///
/// - [`Error::is_install`]: the server has no extension files for pg_lease [`VERSION`] (use
///   [`install()`] instead), or schema `lease` already holds a script install or other objects.
/// - a server error from `CREATE EXTENSION`, e.g. SQLSTATE `42501` without `CREATE` on the database.
/// - [`Error::is_connection`] (outcome unknown: call it again) or [`Error::is_protocol`].
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: &mut tokio_postgres::Client) -> pglease::Result<()> {
/// let found = pglease::create_extension(client).await?;
/// assert_eq!(found.via, pglease::Via::Extension);
/// # Ok(())
/// # }
/// ```
pub async fn create_extension(client: &mut Client) -> Result<Installed> {
    let tx = client.transaction().await?;
    lock(&tx).await?;
    match detect(&tx).await? {
        State::Extension(version) if version == VERSION => {
            tx.rollback().await?;
            return Ok(Installed {
                version,
                via: Via::Extension,
            });
        }
        State::Extension(_) => {
            tx.batch_execute(&format!("ALTER EXTENSION pg_lease UPDATE TO '{VERSION}'"))
                .await?;
        }
        State::Script(version) => {
            return Err(Error::install(format!(
                "pg_lease {version} is already installed without the extension \
                 (lease.schema_migrations); CREATE EXTENSION would collide with it"
            )));
        }
        State::Unrecorded => return Err(unrecorded()),
        State::Foreign(objects) => return Err(foreign(objects)),
        State::Absent { .. } => {
            create(&tx).await?;
        }
    }
    let version = match detect(&tx).await? {
        State::Extension(version) => version,
        other => {
            return Err(Error::protocol(format!(
                "CREATE EXTENSION pg_lease succeeded, but the database then looks like {other:?}"
            )));
        }
    };
    tx.commit().await?;
    Ok(Installed {
        version,
        via: Via::Extension,
    })
}

/// `CREATE EXTENSION pg_lease VERSION` [`VERSION`], after checking the server has the files.
async fn create(tx: &tokio_postgres::Transaction<'_>) -> Result<()> {
    let available = tx
        .query(
            "SELECT FROM pg_catalog.pg_available_extension_versions \
              WHERE name = 'pg_lease' AND version = $1",
            &[&VERSION],
        )
        .await?;
    if available.is_empty() {
        return Err(Error::install(format!(
            "the server has no extension files for pg_lease {VERSION} \
             (see pg_available_extension_versions); use the script installer instead"
        )));
    }
    tx.batch_execute(&format!(
        "CREATE EXTENSION IF NOT EXISTS pg_lease VERSION '{VERSION}'"
    ))
    .await?;
    Ok(())
}

/// Takes the installers' advisory lock for the rest of the transaction.
async fn lock<C: GenericClient>(tx: &C) -> Result<()> {
    tx.execute("SELECT pg_catalog.pg_advisory_xact_lock($1)", &[&LOCK_KEY])
        .await?;
    Ok(())
}

/// What the database holds.
async fn detect<C: GenericClient>(client: &C) -> Result<State> {
    const CALL: &str = "detecting pg_lease";
    let row = one_row(client.query_typed(DETECT, &[]).await?, CALL)?;
    let extension: Option<String> = get(&row, 0, CALL)?;
    let schema_exists: bool = get(&row, 1, CALL)?;
    let has_migrations: bool = get(&row, 2, CALL)?;
    let has_objects: bool = get(&row, 3, CALL)?;
    let objects: Option<i64> = get(&row, 4, CALL)?;
    let objects = objects.unwrap_or(0);

    if let Some(version) = extension {
        return Ok(State::Extension(version));
    }
    if has_migrations {
        let version = if readable_migrations(client).await? {
            let rows = client.query_typed(MIGRATIONS_LATEST, &[]).await?;
            match rows.first() {
                Some(row) => Some(get::<String>(row, 0, "lease.schema_migrations")?),
                None => None,
            }
        } else {
            Some(sql_version(client).await?)
        };
        return Ok(version.map_or(State::Unrecorded, State::Script));
    }
    Ok(if has_objects {
        State::Unrecorded
    } else if objects > 0 {
        State::Foreign(objects)
    } else {
        State::Absent { schema_exists }
    })
}

/// Whether the current role may read `lease.schema_migrations` (which exists).
async fn readable_migrations<C: GenericClient>(client: &C) -> Result<bool> {
    let row = one_row(
        client.query_typed(MIGRATIONS_READABLE, &[]).await?,
        "has_table_privilege",
    )?;
    get(&row, 0, "has_table_privilege")
}

/// What `lease.version()` answers.
async fn sql_version<C: GenericClient>(client: &C) -> Result<String> {
    let row = one_row(client.query_typed(SQL_VERSION, &[]).await?, "lease.version")?;
    let version: Option<String> = get(&row, 0, "lease.version")?;
    version.ok_or_else(|| Error::protocol("lease.version() returned NULL"))
}

fn unrecorded() -> Error {
    Error::install(format!(
        "schema \"{SCHEMA}\" holds pg_lease objects but no record of their version (neither \
         CREATE EXTENSION nor a lease.schema_migrations row); refusing to touch it"
    ))
}

fn foreign(objects: i64) -> Error {
    Error::install(format!(
        "schema \"{SCHEMA}\" already exists and holds {objects} object(s) that are not pg_lease's; \
         pg_lease needs the schema to itself and installs only into an empty or missing one"
    ))
}

/// `script` as the script installer runs it: `\echo` lines and the statements after
/// `-- pglease:extension-only` dropped, `@extowner@` and `@extschema@` substituted.
///
/// `extowner` must already be a quoted identifier (`quote_ident(current_user)`).
fn transform(script: &str, extowner: &str) -> String {
    let mut out = String::with_capacity(script.len());
    let mut skipping = false;
    for line in script.split_inclusive('\n') {
        let content = line.trim_end();
        if skipping {
            skipping = !content.ends_with(';');
        } else if content.trim_start() == EXTENSION_ONLY {
            skipping = true;
        } else if !line.starts_with("\\echo") {
            out.push_str(line);
        }
    }
    out.replace("@extowner@", extowner)
        .replace("@extschema@", SCHEMA)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRIPT: &str = MIGRATIONS[0].script;

    #[test]
    fn transformed_script_has_no_extension_only_parts() {
        let out = transform(SCRIPT, "\"Some Role\"");
        assert!(!out.contains("pg_extension_config_dump("));
        assert!(!out.lines().any(|l| l.starts_with("\\echo")));
        assert!(!out.contains("\\quit"));
        assert!(!out.contains('@'), "an unsubstituted @...@ remains");
        assert!(!out.lines().any(|l| l.trim() == EXTENSION_ONLY));
        assert!(out.contains(
            "GRANT EXECUTE ON FUNCTION lease.purge(interval) TO \"Some Role\" WITH GRANT OPTION;"
        ));
    }

    #[test]
    fn transformation_keeps_everything_else() {
        let out = transform(SCRIPT, "owner");
        for kept in [
            "CREATE TABLE lease.leases (",
            "INSERT INTO lease.epoch_floor (floor, sentinel) VALUES (0, true);",
            "REVOKE ALL ON TABLE lease.leases FROM PUBLIC;",
            "CREATE FUNCTION lease.acquire(",
            "CREATE FUNCTION lease.version()",
            "GRANT USAGE ON SCHEMA lease TO PUBLIC;",
        ] {
            assert!(out.contains(kept), "{kept}");
        }
        // Only the marked statements and the \echo line go: the rest is line-for-line identical.
        let dropped = SCRIPT.lines().count() - out.lines().count();
        let markers = SCRIPT
            .lines()
            .filter(|l| l.trim() == EXTENSION_ONLY)
            .count();
        assert_eq!(markers, 2);
        assert_eq!(dropped, 1 + 2 * markers);
    }

    #[test]
    fn marker_drops_a_multi_line_statement_through_its_semicolon() {
        let script =
            "\\echo no\nA;\n-- pglease:extension-only\nB(\n  x);  \nC @extschema@ @extowner@;\n";
        assert_eq!(transform(script, "o"), "A;\nC lease o;\n");
    }

    #[test]
    fn marker_at_the_end_and_crlf_lines() {
        assert_eq!(
            transform("A;\r\n-- pglease:extension-only\r\n", "o"),
            "A;\r\n"
        );
        assert_eq!(
            transform("-- pglease:extension-only\r\nB;\r\nC;\r\n", "o"),
            "C;\r\n"
        );
    }

    #[test]
    fn the_chain_is_linear_and_ends_at_the_control_files_version() {
        assert_eq!(MIGRATIONS[0].from, None);
        for pair in MIGRATIONS.windows(2) {
            assert_eq!(
                pair[1].from,
                Some(pair[0].to),
                "each step starts where the last ended"
            );
        }
        let last = MIGRATIONS.last().unwrap();
        assert_eq!(last.to, VERSION);
        for m in MIGRATIONS {
            let expected = match m.from {
                None => format!("pg_lease--{}.sql", m.to),
                Some(from) => format!("pg_lease--{from}--{}.sql", m.to),
            };
            assert_eq!(m.file, expected);
            assert!(
                m.script.contains(&format!("SELECT '{}'::text", m.to)),
                "{} sets lease.version()",
                m.file
            );
        }
        assert!(CONTROL.contains(&format!("default_version = '{VERSION}'")));
        assert!(CONTROL.contains(&format!("schema = {SCHEMA}")));
    }

    #[test]
    fn every_script_in_extension_sql_is_in_the_chain() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../extensions/pg_lease/sql");
        let mut on_disk: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".sql"))
            .collect();
        on_disk.sort();
        let mut chained: Vec<String> = MIGRATIONS.iter().map(|m| m.file.to_owned()).collect();
        chained.sort();
        assert_eq!(on_disk, chained);
    }

    #[test]
    fn steps_after_a_version_are_the_rest_of_the_chain() {
        assert_eq!(steps_after(None).unwrap().len(), MIGRATIONS.len());
        assert_eq!(steps_after(Some(VERSION)).unwrap().len(), 0);
        assert_eq!(steps_after(Some("0.1.0")).unwrap()[0].to, "0.2.0");
        assert_eq!(steps_after(Some("0.2.0")).unwrap()[0].to, "0.3.0");
        assert!(steps_after(Some("9.9.9")).is_none());
    }

    #[test]
    fn lock_key_spells_pg_lease() {
        assert_eq!(LOCK_KEY.to_be_bytes(), *b"pg_lease");
    }
}
