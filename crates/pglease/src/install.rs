//! Getting our SQL extensions into a database: by `CREATE EXTENSION` where the server has the
//! extension files, or by running the extension's own scripts where it has not (managed
//! PostgreSQL).
//!
//! Each extension is described once, by an [`Extension`]: its name, schema, control file, scripts
//! and the extensions it requires. The functions here work on any of them ([`Extension::install`],
//! [`Extension::create_extension`], ...); the free functions ([`install()`], [`installed`], ...)
//! are the same for pg_lease ([`PG_LEASE`]).
//!
//! Both paths take one transaction-scoped advisory lock per extension ([`Extension::lock_key`]), in
//! dependency order, so concurrent installers serialise and all but the first find it installed.
//! The script path records what it applied in `<schema>.schema_migrations`; the extension path is
//! recorded by PostgreSQL in `pg_extension`. [`Extension::installed`] reads either.

use tokio_postgres::{Client, GenericClient, Transaction};

use crate::calls::{get, one_row};
use crate::error::{Error, Result};
use crate::extension::{Extension, Migration, PG_LEASE};

/// How an extension got into a database.
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
    /// `CREATE EXTENSION`: the server has the extension files; PostgreSQL tracks it in
    /// `pg_extension`, and `ALTER EXTENSION` / `DROP EXTENSION` manage it.
    Extension,
    /// [`Extension::install`] ran the extension's script itself; `<schema>.schema_migrations`
    /// records the version.
    Script,
}

/// An extension as found installed in a database: its version and how it got there.
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
#[non_exhaustive]
pub struct Installed {
    /// The installed version of the SQL API (compare with [`Extension::version`]).
    pub version: String,
    /// Whether it was installed by `CREATE EXTENSION` or by [`Extension::install`].
    pub via: Via,
}

// The read-only checks ([`Extension::installed`], [`Extension::check_version`]) use unnamed
// statements (`query_typed`), so they also work through a transaction-mode pooler such as
// PgBouncer.

/// What a database holds of one extension, as far as the installers care.
#[derive(Debug, PartialEq, Eq)]
enum State {
    /// No schema, or an empty one.
    Absent { schema_exists: bool },
    /// `CREATE EXTENSION`, at this version.
    Extension(String),
    /// The script installer's work, at this version.
    Script(String),
    /// The extension's objects without a record of how or which version they came.
    Unrecorded,
    /// The schema exists and holds this many objects, none of them the extension's.
    Foreign(i64),
}

impl Extension {
    /// The installed extension, if any: via `CREATE EXTENSION` or via [`install`](Self::install);
    /// `None` otherwise.
    ///
    /// Reads the catalogs and, for a script install, `<schema>.schema_migrations` (or
    /// `<schema>.version()` for a role that may not read that table). Changes nothing and takes no
    /// lock. A schema whose objects are neither is reported as `None` (and
    /// [`install`](Self::install) refuses it).
    ///
    /// # Errors
    ///
    /// Any server error, [`Error::is_connection`] or [`Error::is_protocol`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: &tokio_postgres::Client) -> pglease::Result<()> {
    /// match pglease::PG_LEASE.installed(client).await? {
    ///     Some(found) => println!("pg_lease {} via {:?}", found.version, found.via),
    ///     None => println!("pg_lease is not installed"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn installed<C: GenericClient>(&self, client: &C) -> Result<Option<Installed>> {
        Ok(match self.detect(client).await? {
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

    /// The installed extension, if it is installed at exactly this library's
    /// [`version`](Self::version); an error otherwise.
    ///
    /// Checks both the recorded version (`pg_extension` or `<schema>.schema_migrations`) and what
    /// `<schema>.version()` answers. Call it once per connection (or pool) before relying on the
    /// calls.
    ///
    /// # Errors
    ///
    /// - [`Error::is_not_installed`]: the extension is not installed (see
    ///   [`installed`](Self::installed)).
    /// - [`Error::is_version_mismatch`]: it is installed at another version
    ///   ([`Error::found_version`] says which).
    /// - any server error, [`Error::is_connection`] or [`Error::is_protocol`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: &tokio_postgres::Client) -> pglease::Result<()> {
    /// let found = pglease::PG_LEASE.check_version(client).await?;
    /// assert_eq!(found.version, pglease::PG_LEASE.version);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn check_version<C: GenericClient>(&self, client: &C) -> Result<Installed> {
        let found = self
            .installed(client)
            .await?
            .ok_or_else(Error::not_installed)?;
        if found.version != self.version {
            return Err(Error::version_mismatch(self.version, &found.version));
        }
        let answered = self.sql_version(client).await?;
        if answered != self.version {
            return Err(Error::version_mismatch(self.version, &answered));
        }
        Ok(found)
    }

    /// Installs the extension at [`version`](Self::version), and first every extension it
    /// requires, by running their scripts itself, for servers without the extension files; a
    /// no-op for each that is already installed at that version, by either path.
    ///
    /// Runs in one transaction under the advisory locks ([`lock_key`](Self::lock_key)) of the
    /// extension and its requirements, taken in dependency order, so concurrent installers
    /// serialise. For each extension it finds one of:
    ///
    /// - `CREATE EXTENSION` done: reports it ([`Via::Extension`], whatever its version) and changes
    ///   nothing;
    /// - a script install recorded in `<schema>.schema_migrations` at the current version: changes
    ///   nothing;
    /// - a script install at an older version: applies the upgrade scripts from there, in order;
    /// - no schema, or an empty one: creates the schema if needed, runs the install script of the
    ///   current version, creates `<schema>.schema_migrations` (no privileges for `PUBLIC`) and
    ///   records the version in it.
    ///
    /// A script is transformed exactly as `CREATE EXTENSION` transforms it, plus one marker: lines
    /// starting with `\echo` are dropped, `@extowner@` becomes the current user (quoted with
    /// `quote_ident`) and `@extschema@` becomes the schema; every statement after a line
    /// `-- pglease:extension-only` is dropped (through the next line ending with `;`), since it
    /// needs an extension (`pg_extension_config_dump`). It runs with `search_path` set to
    /// `<schema>, pg_temp`, as under `CREATE EXTENSION`. The current user owns everything it
    /// creates; it needs `CREATE` on the database (no superuser). The `SECURITY DEFINER` functions
    /// run as that role, so install as the role that should own the state, not as each application
    /// role.
    ///
    /// # Errors
    ///
    /// - [`Error::is_version_mismatch`]: a script install of a version from which no upgrade
    ///   scripts lead to the current one (e.g. a newer one).
    /// - [`Error::is_install`]: the schema exists but holds other objects, or the extension's
    ///   objects without a record of their version; nothing changed.
    /// - a server error from running a script, e.g. SQLSTATE `42501` without `CREATE` on the
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
    /// let found = pglease::PG_LEASE.install(&mut client).await?;
    /// println!("pg_lease {} via {:?}", found.version, found.via);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn install(&'static self, client: &mut Client) -> Result<Installed> {
        self.install_all(client, Via::Script).await
    }

    /// Installs this extension after what it requires, `via` either path, in one transaction
    /// under their locks (taken in dependency order); commits only if anything changed.
    async fn install_all(&'static self, client: &mut Client, via: Via) -> Result<Installed> {
        let all = self.with_requirements();
        let tx = client.transaction().await?;
        for ext in &all {
            ext.lock(&tx).await?;
        }
        let mut changed = false;
        let mut last = None;
        for ext in all {
            let (found, made) = match via {
                Via::Script => ext.install_in(&tx).await?,
                Via::Extension => ext.create_in(&tx).await?,
            };
            changed |= made;
            last = Some(found);
        }
        if changed {
            tx.commit().await?;
        } else {
            tx.rollback().await?;
        }
        Ok(last.expect("with_requirements includes the extension itself"))
    }

    /// [`install`](Self::install)'s work for this one extension, in the installers' transaction
    /// (locks held): what it found or made, and whether it changed anything.
    async fn install_in(&self, tx: &Transaction<'_>) -> Result<(Installed, bool)> {
        let installed = Installed {
            version: self.version.to_owned(),
            via: Via::Script,
        };
        let schema_exists = match self.detect(tx).await? {
            State::Extension(version) => {
                let found = Installed {
                    version,
                    via: Via::Extension,
                };
                return Ok((found, false));
            }
            State::Script(version) if version == self.version => return Ok((installed, false)),
            State::Script(version) => {
                let Some(pending) = self.steps_after(Some(&version)) else {
                    return Err(Error::version_mismatch(self.version, &version));
                };
                self.apply(tx, &pending, false).await?;
                return Ok((installed, true));
            }
            State::Unrecorded => return Err(self.unrecorded()),
            State::Foreign(objects) => return Err(self.foreign(objects)),
            State::Absent { schema_exists } => schema_exists,
        };
        if !schema_exists {
            tx.batch_execute(&format!("CREATE SCHEMA {}", self.schema))
                .await?;
        }
        // The install script requires an empty schema: the bookkeeping table comes after it.
        let steps = self
            .steps_after(None)
            .expect("a fresh install always has its script");
        self.apply(tx, &steps, true).await?;
        Ok((installed, true))
    }

    /// Runs `steps` in the installer's transaction, as `CREATE EXTENSION` would, recording each
    /// version (in `<schema>.schema_migrations`, created after the first step if `fresh`).
    async fn apply(&self, tx: &Transaction<'_>, steps: &[&Migration], fresh: bool) -> Result<()> {
        let row = one_row(
            tx.query("SELECT pg_catalog.quote_ident(CURRENT_USER::text)", &[])
                .await?,
            "quote_ident(current_user)",
        )?;
        let extowner: String = get(&row, 0, "quote_ident(current_user)")?;
        tx.batch_execute(&format!(
            "SET LOCAL search_path = {}, pg_temp; SET LOCAL client_min_messages = warning",
            self.schema
        ))
        .await?;
        let record = format!(
            "INSERT INTO {}.schema_migrations (version) VALUES ($1)",
            self.schema
        );
        for (i, step) in steps.iter().enumerate() {
            tx.batch_execute(&self.transform(step.script, &extowner))
                .await?;
            if fresh && i == 0 {
                tx.batch_execute(&self.create_migrations()).await?;
            }
            tx.execute(&record, &[&step.to]).await?;
        }
        Ok(())
    }

    /// Installs the extension at [`version`](Self::version) with `CREATE EXTENSION`, and first
    /// every extension it requires, for servers that have the extension files; a no-op for each
    /// that is already created at that version (an older one is updated with `ALTER EXTENSION`).
    ///
    /// Runs in one transaction under the same advisory locks as [`install`](Self::install). Our
    /// extensions are trusted: a role with `CREATE` on the database needs no superuser.
    ///
    /// # Errors
    ///
    /// - [`Error::is_install`]: the server has no extension files for the version (use
    ///   [`install`](Self::install) instead), or its schema already holds a script install or other
    ///   objects.
    /// - a server error from `CREATE EXTENSION`, e.g. SQLSTATE `42501` without `CREATE` on the
    ///   database.
    /// - [`Error::is_connection`] (outcome unknown: call it again) or [`Error::is_protocol`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: &mut tokio_postgres::Client) -> pglease::Result<()> {
    /// let found = pglease::PG_LEASE.create_extension(client).await?;
    /// assert_eq!(found.via, pglease::Via::Extension);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn create_extension(&'static self, client: &mut Client) -> Result<Installed> {
        self.install_all(client, Via::Extension).await
    }

    /// [`create_extension`](Self::create_extension)'s work for this one extension, in the
    /// installers' transaction (locks held): what it found or made, and whether it changed
    /// anything.
    async fn create_in(&self, tx: &Transaction<'_>) -> Result<(Installed, bool)> {
        match self.detect(tx).await? {
            State::Extension(version) if version == self.version => {
                let found = Installed {
                    version,
                    via: Via::Extension,
                };
                return Ok((found, false));
            }
            State::Extension(_) => {
                tx.batch_execute(&format!(
                    "ALTER EXTENSION {} UPDATE TO '{}'",
                    self.name, self.version
                ))
                .await?;
            }
            State::Script(version) => {
                return Err(Error::install(format!(
                    "{} {version} is already installed without the extension \
                     ({}.schema_migrations); CREATE EXTENSION would collide with it",
                    self.name, self.schema
                )));
            }
            State::Unrecorded => return Err(self.unrecorded()),
            State::Foreign(objects) => return Err(self.foreign(objects)),
            State::Absent { .. } => self.create(tx).await?,
        }
        match self.detect(tx).await? {
            State::Extension(version) => Ok((
                Installed {
                    version,
                    via: Via::Extension,
                },
                true,
            )),
            other => Err(Error::protocol(format!(
                "CREATE EXTENSION {} succeeded, but the database then looks like {other:?}",
                self.name
            ))),
        }
    }

    /// `CREATE EXTENSION <name> VERSION <version>`, after checking the server has the files.
    async fn create(&self, tx: &Transaction<'_>) -> Result<()> {
        let available = tx
            .query(
                "SELECT FROM pg_catalog.pg_available_extension_versions \
                  WHERE name = $1 AND version = $2",
                &[&self.name, &self.version],
            )
            .await?;
        if available.is_empty() {
            return Err(Error::install(format!(
                "the server has no extension files for {} {} \
                 (see pg_available_extension_versions); use the script installer instead",
                self.name, self.version
            )));
        }
        tx.batch_execute(&format!(
            "CREATE EXTENSION IF NOT EXISTS {} VERSION '{}'",
            self.name, self.version
        ))
        .await?;
        Ok(())
    }

    /// Takes this extension's installer lock for the rest of the transaction.
    async fn lock<C: GenericClient>(&self, tx: &C) -> Result<()> {
        tx.execute(
            "SELECT pg_catalog.pg_advisory_xact_lock($1)",
            &[&self.lock_key],
        )
        .await?;
        Ok(())
    }

    /// What the database holds of this extension.
    async fn detect<C: GenericClient>(&self, client: &C) -> Result<State> {
        let call = format!("detecting {}", self.name);
        // Our names are plain lower-case identifiers (a unit test checks it): no quoting needed.
        let detect = format!(
            "SELECT (SELECT e.extversion FROM pg_catalog.pg_extension AS e WHERE e.extname = '{name}'),
                    n.oid IS NOT NULL,
                    pg_catalog.to_regclass('{schema}.schema_migrations') IS NOT NULL,
                    pg_catalog.to_regprocedure('{schema}.version()') IS NOT NULL,
                    (SELECT pg_catalog.count(*) FROM pg_catalog.pg_depend AS d
                      WHERE d.refclassid = 'pg_catalog.pg_namespace'::pg_catalog.regclass
                        AND d.refobjid = n.oid
                        AND d.classid <> 'pg_catalog.pg_default_acl'::pg_catalog.regclass)
               FROM (VALUES (1)) AS one (x)
               LEFT JOIN pg_catalog.pg_namespace AS n ON n.nspname = '{schema}'",
            name = self.name,
            schema = self.schema,
        );
        let row = one_row(client.query_typed(&detect, &[]).await?, &call)?;
        let extension: Option<String> = get(&row, 0, &call)?;
        let schema_exists: bool = get(&row, 1, &call)?;
        let has_migrations: bool = get(&row, 2, &call)?;
        let has_objects: bool = get(&row, 3, &call)?;
        let objects: Option<i64> = get(&row, 4, &call)?;
        let objects = objects.unwrap_or(0);

        if let Some(version) = extension {
            return Ok(State::Extension(version));
        }
        if has_migrations {
            let version = if self.readable_migrations(client).await? {
                let latest = format!(
                    "SELECT version FROM {}.schema_migrations \
                     ORDER BY applied_at DESC, version DESC LIMIT 1",
                    self.schema
                );
                let rows = client.query_typed(&latest, &[]).await?;
                match rows.first() {
                    Some(row) => Some(get::<String>(row, 0, "schema_migrations")?),
                    None => None,
                }
            } else {
                Some(self.sql_version(client).await?)
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

    /// Whether the current role may read `<schema>.schema_migrations` (which exists).
    async fn readable_migrations<C: GenericClient>(&self, client: &C) -> Result<bool> {
        let sql = format!(
            "SELECT pg_catalog.has_table_privilege('{}.schema_migrations', 'SELECT')",
            self.schema
        );
        let row = one_row(client.query_typed(&sql, &[]).await?, "has_table_privilege")?;
        get(&row, 0, "has_table_privilege")
    }

    /// What `<schema>.version()` answers.
    async fn sql_version<C: GenericClient>(&self, client: &C) -> Result<String> {
        let sql = format!("SELECT {}.version()", self.schema);
        let row = one_row(client.query_typed(&sql, &[]).await?, "version()")?;
        let version: Option<String> = get(&row, 0, "version()")?;
        version.ok_or_else(|| Error::protocol(format!("{}.version() returned NULL", self.schema)))
    }

    /// The table in which the script installer records the versions it applied.
    fn create_migrations(&self) -> String {
        format!(
            "CREATE TABLE {schema}.schema_migrations (
                 version    text PRIMARY KEY,
                 applied_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
                 applied_by name NOT NULL DEFAULT CURRENT_USER
             );
             COMMENT ON TABLE {schema}.schema_migrations IS
                 '{name} versions applied by the pglease installer (databases without the extension files)';
             REVOKE ALL ON TABLE {schema}.schema_migrations FROM PUBLIC;",
            schema = self.schema,
            name = self.name,
        )
    }

    fn unrecorded(&self) -> Error {
        Error::install(format!(
            "schema \"{}\" holds {} objects but no record of their version (neither \
             CREATE EXTENSION nor a {}.schema_migrations row); refusing to touch it",
            self.schema, self.name, self.schema
        ))
    }

    fn foreign(&self, objects: i64) -> Error {
        Error::install(format!(
            "schema \"{}\" already exists and holds {objects} object(s) that are not {}'s; \
             {} needs the schema to itself and installs only into an empty or missing one",
            self.schema, self.name, self.name
        ))
    }
}

/// pg_lease as found installed in a database, if any:
/// [`PG_LEASE`]`.`[`installed`](Extension::installed).
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
    PG_LEASE.installed(client).await
}

/// pg_lease, if it is installed at exactly [`VERSION`](crate::VERSION); an error otherwise:
/// [`PG_LEASE`]`.`[`check_version`](Extension::check_version).
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
    PG_LEASE.check_version(client).await
}

/// Installs pg_lease [`VERSION`](crate::VERSION) without the extension files:
/// [`PG_LEASE`]`.`[`install`](Extension::install) (see there for what it does and its errors).
///
/// # Errors
///
/// As [`Extension::install`].
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
    PG_LEASE.install(client).await
}

/// Installs pg_lease [`VERSION`](crate::VERSION) with `CREATE EXTENSION`:
/// [`PG_LEASE`]`.`[`create_extension`](Extension::create_extension).
///
/// # Errors
///
/// As [`Extension::create_extension`].
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
    PG_LEASE.create_extension(client).await
}
