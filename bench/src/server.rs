//! The server under test: a private cluster from pgcluster, or an existing database by URL.
//!
//! Private cluster: one server (fsync=on, synchronous_commit=on by default; each run sets
//! `synchronous_commit` per session), a non-superuser role `bench` that owns the databases and
//! installs the extension itself (as an application would), and one database per section so the
//! sections do not see each other's rows. By URL: every section shares the given database; the
//! sections that must write `lease.leases` directly (scale preloading) need a superuser.

use std::path::{Path, PathBuf};
use std::time::Duration;

use pgcluster::{Cluster, ClusterBuilder};
use tokio_postgres::config::Host;
use tokio_postgres::{Client, Config, NoTls};

use crate::BoxResult;

/// Schema of the baseline tables (never `lease`).
pub const SCHEMA: &str = "pglease_bench";
/// The role workloads run as in a private cluster.
pub const ROLE: &str = "bench";

/// Databases of a private cluster, one per section.
pub const DB_MAIN: &str = "bench";
pub const DB_STORM: &str = "bench_storm";
pub const DB_SCALE: &str = "bench_scale";
/// A database with the previous release of pg_lease (the `previous` variant's bodies).
pub const DB_PREVIOUS: &str = "bench_previous";
/// The queue section's database: pg_lease, pg_lease_queue and pgmq's SQL (installed at bench time).
pub const DB_QUEUE: &str = "bench_queue";
/// The renew-many section's database (its held keys stay out of the other sections' tables).
pub const DB_RENEW: &str = "bench_renew";
/// The console section's database: pg_lease and pg_lease_queue, seeded with 100 000 leases and
/// 1 000 000 messages.
pub const DB_CONSOLE: &str = "bench_console";
/// The hot-path section's database: pg_lease, pg_lease_queue and pgmq's SQL, fresh for its
/// storage measurement.
pub const DB_HOTPATH: &str = "bench_hotpath";
/// The peers section's database: pg_lease_queue, pgmq's SQL, and the schemas pg-boss and
/// Graphile Worker create for themselves (all installed at bench time).
pub const DB_PEERS: &str = "bench_peers";

pub struct Server {
    pub cluster: Option<Cluster>,
    /// Connection to the main database as the workload role.
    main: Config,
    /// The same as a superuser, if we have one.
    superuser: Option<Config>,
    pub pgbench: PathBuf,
}

/// One database of the server, as seen by the workloads.
#[derive(Clone)]
pub struct Db {
    pub config: Config,
    pub superuser: Option<Config>,
}

impl Server {
    /// Starts a private cluster of PostgreSQL `major` with the repository's extension files.
    pub fn start_private(major: u32, repo: &Path) -> BoxResult<Server> {
        let cluster = ClusterBuilder::for_major(major)?
            .extension_dir(repo.join("extensions/pg_lease"))
            .extension_dir(repo.join("extensions/pg_lease_queue"))
            .setting("max_connections", "60")
            .start()?;
        let mut main = Config::new();
        main.host_path(cluster.socket_dir())
            .port(cluster.port())
            .user(ROLE)
            .dbname(DB_MAIN);
        let mut superuser = main.clone();
        superuser.user("postgres");
        let pgbench = cluster.installation().bin("pgbench");
        Ok(Server {
            cluster: Some(cluster),
            main,
            superuser: Some(superuser),
            pgbench,
        })
    }

    /// Uses an existing database; `pgbench` from `pgbench` or PATH.
    pub fn existing(url: &str, pgbench: Option<PathBuf>) -> BoxResult<Server> {
        let main: Config = url.parse()?;
        Ok(Server {
            cluster: None,
            main,
            superuser: None,
            pgbench: pgbench.unwrap_or_else(|| PathBuf::from("pgbench")),
        })
    }

    pub fn is_private(&self) -> bool {
        self.cluster.is_some()
    }

    /// Creates the role and databases (private cluster) or checks the privileges (URL), installs
    /// the extension where missing, and creates the baseline tables.
    pub async fn prepare(&mut self) -> BoxResult<()> {
        if self.is_private() {
            let su = self
                .superuser
                .clone()
                .expect("private cluster has a superuser");
            let mut postgres = su.clone();
            postgres.dbname("postgres");
            let c = connect(&postgres, None).await?;
            c.batch_execute(&format!("CREATE ROLE {ROLE} LOGIN"))
                .await?;
            for db in [
                DB_MAIN,
                DB_STORM,
                DB_SCALE,
                DB_PREVIOUS,
                DB_QUEUE,
                DB_RENEW,
                DB_CONSOLE,
                DB_HOTPATH,
                DB_PEERS,
            ] {
                c.batch_execute(&format!("CREATE DATABASE {db} OWNER {ROLE}"))
                    .await?;
            }
            let mut cfg = self.main.clone();
            cfg.dbname(DB_PREVIOUS);
            connect(&cfg, None)
                .await?
                .batch_execute(&format!(
                    "CREATE EXTENSION pg_lease VERSION '{}'",
                    crate::variants::previous_release()
                ))
                .await?;
            for db in [DB_MAIN, DB_STORM, DB_SCALE, DB_RENEW] {
                let mut cfg = self.main.clone();
                cfg.dbname(db);
                let c = connect(&cfg, None).await?;
                c.batch_execute("CREATE EXTENSION pg_lease").await?;
                create_baselines(&c).await?;
            }
            for db in [DB_QUEUE, DB_CONSOLE, DB_HOTPATH, DB_PEERS] {
                let mut cfg = self.main.clone();
                cfg.dbname(db);
                connect(&cfg, None)
                    .await?
                    .batch_execute("CREATE EXTENSION pg_lease_queue CASCADE")
                    .await?;
            }
        } else {
            let mut c = connect(&self.main, None).await?;
            pglease::install(&mut c).await?;
            if pglease::PG_LEASE_QUEUE.installed(&c).await?.is_none() {
                pglease::PG_LEASE_QUEUE.install(&mut c).await?;
            }
            create_baselines(&c).await?;
            let su: bool = c
                .query_one(
                    "SELECT rolsuper FROM pg_roles WHERE rolname = current_user",
                    &[],
                )
                .await?
                .get(0);
            if su {
                self.superuser = Some(self.main.clone());
            }
        }
        Ok(())
    }

    /// The database for `name` (a private cluster has one per section; by URL all are one).
    pub fn db(&self, name: &str) -> Db {
        let mut config = self.main.clone();
        let mut superuser = self.superuser.clone();
        if self.is_private() {
            config.dbname(name);
            if let Some(s) = superuser.as_mut() {
                s.dbname(name);
            }
        }
        Db { config, superuser }
    }
}

impl Db {
    /// A libpq connection string for pgbench.
    pub fn conninfo(&self) -> String {
        conninfo(&self.config)
    }

    /// Connects as the workload role with `synchronous_commit` set for the session.
    pub async fn connect(&self, sync_commit: bool) -> BoxResult<Client> {
        connect(&self.config, Some(sync_commit)).await
    }

    pub async fn connect_superuser(&self) -> BoxResult<Option<Client>> {
        match &self.superuser {
            Some(cfg) => Ok(Some(connect(cfg, None).await?)),
            None => Ok(None),
        }
    }
}

/// `-c synchronous_commit=on|off` as a libpq `options` value.
pub fn sync_options(sync_commit: bool) -> String {
    format!(
        "-c synchronous_commit={}",
        if sync_commit { "on" } else { "off" }
    )
}

pub async fn connect(config: &Config, sync_commit: Option<bool>) -> BoxResult<Client> {
    let mut cfg = config.clone();
    if let Some(sync) = sync_commit {
        cfg.options(sync_options(sync));
    }
    cfg.connect_timeout(Duration::from_secs(30));
    let (client, connection) = cfg.connect(NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// The tables of the baselines, in schema [`SCHEMA`], owned by the workload role:
/// - `floor`: identical to `lease.leases` (see [`leases_like`]), for the same row transitions as
///   bare SQL;
/// - `storm_floor`, `scale_floor`: the same, for the renew storm and the key-scale runs;
/// - `locks`: a row-version lock table in the style of the Go library that polls.
async fn create_baselines(c: &Client) -> BoxResult<()> {
    let mut sql = format!("DROP SCHEMA IF EXISTS {SCHEMA} CASCADE; CREATE SCHEMA {SCHEMA};");
    for t in ["floor", "storm_floor", "scale_floor"] {
        sql.push_str(&leases_like(c, &format!("{SCHEMA}.{t}")).await?);
    }
    sql.push_str(&format!(
        "CREATE TABLE {SCHEMA}.locks (
             name                  text COLLATE \"C\" NOT NULL,
             record_version_number bigint,
             data                  bytea,
             owner                 text,
             CONSTRAINT locks_pkey PRIMARY KEY (name)
         ) WITH (fillfactor = 70);"
    ));
    c.batch_execute(&sql).await?;
    Ok(())
}

/// DDL for a table `name` identical to the installed `lease.leases`: the same columns, types,
/// collations, NOT NULLs, defaults, constraints, indexes and storage parameters, read from the
/// catalog (the workload role cannot read the table itself, so `LIKE` is not an option).
pub async fn leases_like(c: &Client, name: &str) -> BoxResult<String> {
    let cols = c
        .query(
            "SELECT pg_catalog.quote_ident(a.attname), pg_catalog.format_type(a.atttypid, a.atttypmod),
                    CASE WHEN a.attcollation <> t.typcollation
                         THEN ' COLLATE ' || pg_catalog.quote_ident(co.collname) ELSE '' END,
                    a.attnotnull, pg_catalog.pg_get_expr(d.adbin, d.adrelid)
               FROM pg_catalog.pg_attribute AS a
               JOIN pg_catalog.pg_type AS t ON t.oid = a.atttypid
               LEFT JOIN pg_catalog.pg_collation AS co ON co.oid = a.attcollation
               LEFT JOIN pg_catalog.pg_attrdef AS d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
              WHERE a.attrelid = 'lease.leases'::regclass AND a.attnum > 0 AND NOT a.attisdropped
              ORDER BY a.attnum",
            &[],
        )
        .await?;
    let mut items: Vec<String> = cols
        .iter()
        .map(|r| {
            let (col, ty, coll, notnull, default): (String, String, String, bool, Option<String>) =
                (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4));
            format!(
                "{col} {ty}{coll}{}{}",
                if notnull { " NOT NULL" } else { "" },
                default.map(|d| format!(" DEFAULT {d}")).unwrap_or_default()
            )
        })
        .collect();
    let cons = c
        .query(
            "SELECT pg_catalog.pg_get_constraintdef(oid) FROM pg_catalog.pg_constraint
              WHERE conrelid = 'lease.leases'::regclass AND contype IN ('p', 'u', 'c', 'x')
              ORDER BY contype, conname",
            &[],
        )
        .await?;
    items.extend(cons.iter().map(|r| r.get::<_, String>(0)));
    let opts: Option<Vec<String>> = c
        .query_one(
            "SELECT reloptions FROM pg_catalog.pg_class WHERE oid = 'lease.leases'::regclass",
            &[],
        )
        .await?
        .get(0);
    let with = opts
        .filter(|o| !o.is_empty())
        .map(|o| format!(" WITH ({})", o.join(", ")))
        .unwrap_or_default();
    let mut ddl = format!(
        "CREATE TABLE {name} (\n    {}\n){with};\n",
        items.join(",\n    ")
    );
    // Indexes that do not back a constraint (none today), renamed onto the copy.
    let extra = c
        .query(
            "SELECT pg_catalog.pg_get_indexdef(i.indexrelid) FROM pg_catalog.pg_index AS i
              WHERE i.indrelid = 'lease.leases'::regclass
                AND NOT EXISTS (SELECT FROM pg_catalog.pg_constraint AS k WHERE k.conindid = i.indexrelid)",
            &[],
        )
        .await?;
    for (n, r) in extra.iter().enumerate() {
        let def: String = r.get(0);
        if let Some(pos) = def.find(" ON ") {
            let rest = &def[pos + 4..];
            let after_table = rest.find(' ').map_or("", |p| &rest[p..]);
            let unique = if def.starts_with("CREATE UNIQUE") {
                "UNIQUE "
            } else {
                ""
            };
            ddl.push_str(&format!(
                "CREATE {unique}INDEX ON {name}{after_table}; -- copy of index {n}\n"
            ));
        }
    }
    Ok(ddl)
}

/// A libpq key=value string with the connection parameters of `config` (single-quoted values).
pub fn conninfo(config: &Config) -> String {
    let q = |v: &str| format!("'{}'", v.replace('\\', "\\\\").replace('\'', "\\'"));
    let mut parts = Vec::new();
    if let Some(host) = config.get_hosts().first() {
        let h = match host {
            Host::Tcp(h) => h.clone(),
            Host::Unix(p) => p.to_string_lossy().into_owned(),
        };
        parts.push(format!("host={}", q(&h)));
    }
    if let Some(port) = config.get_ports().first() {
        parts.push(format!("port={port}"));
    }
    if let Some(user) = config.get_user() {
        parts.push(format!("user={}", q(user)));
    }
    if let Some(db) = config.get_dbname() {
        parts.push(format!("dbname={}", q(db)));
    }
    if let Some(pw) = config.get_password() {
        parts.push(format!("password={}", q(&String::from_utf8_lossy(pw))));
    }
    parts.join(" ")
}

/// `SELECT version()` and the settings that decide what a commit costs.
pub async fn postgres_info(c: &Client) -> BoxResult<serde_json::Value> {
    let version: String = c.query_one("SELECT version()", &[]).await?.get(0);
    let rows = c
        .query(
            "SELECT name, current_setting(name) FROM pg_settings
              WHERE name IN ('server_version', 'fsync', 'synchronous_commit', 'shared_buffers',
                             'wal_level', 'full_page_writes', 'wal_buffers', 'max_wal_size',
                             'checkpoint_timeout', 'autovacuum', 'jit', 'max_connections',
                             'huge_pages', 'wal_sync_method', 'commit_delay')
              ORDER BY name",
            &[],
        )
        .await?;
    let mut settings = serde_json::Map::new();
    for r in rows {
        settings.insert(r.get(0), serde_json::Value::String(r.get(1)));
    }
    Ok(serde_json::json!({ "version": version, "settings": settings }))
}
