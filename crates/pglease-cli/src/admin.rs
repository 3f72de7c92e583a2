//! The operator's commands: `install` (CREATE EXTENSION or the extension-less script), `status`
//! (server, installation, lease counts), `configure` (the ttl cap, the failover quarantine and the
//! grant history) and `local start | stop | status | url` (the embedded server, see `local.rs`).

use std::process::ExitCode;

use serde::Serialize;
use tokio_postgres::Client;

use crate::cli::{
    ConfigureArgs, InstallArgs, LocalStartArgs, LocalStatusArgs, LocalUrlArgs, OutputArgs,
    StatusArgs,
};
use crate::connect::{Limits, Target};
use crate::exit::BoxError;
use crate::local::LocalServer;
use crate::output;

/// `"extension"` or `"script"`.
fn via_name(via: pglease::Via) -> &'static str {
    match via {
        pglease::Via::Extension => "extension",
        pglease::Via::Script => "script",
    }
}

/// How pg_lease got in, for people.
fn via_text(via: pglease::Via) -> &'static str {
    match via {
        pglease::Via::Extension => "CREATE EXTENSION",
        pglease::Via::Script => "the SQL script (no extension files; lease.schema_migrations)",
    }
}

/// `pglease install`.
pub async fn install(args: InstallArgs, target: &Target) -> Result<ExitCode, BoxError> {
    let ext = args.extension;
    let mut client = target.connect().await?;
    let before = target.answer(ext.installed(&client)).await?;
    let found = if args.schema_only {
        target.answer(ext.install(&mut client)).await?
    } else {
        target.answer(ext.create_extension(&mut client)).await?
    };
    let changed = before.as_ref() != Some(&found);

    #[derive(Serialize)]
    struct Json {
        extension: &'static str,
        version: String,
        via: &'static str,
        changed: bool,
    }
    if args.output.json {
        output::json(&Json {
            extension: ext.name,
            version: found.version,
            via: via_name(found.via),
            changed,
        })?;
    } else {
        let verb = if changed {
            "installed"
        } else {
            "already installed"
        };
        output::out(&format!(
            "{} {} {verb} via {} ({})\n",
            ext.name,
            found.version,
            via_text(found.via),
            target.describe()
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Lease counts for `status`. `lapsed` and `free` are known only to roles that may read
/// `lease.leases` (the installing role); others see `held` and `total` from `lease.list()`.
#[derive(Debug, Serialize)]
struct Counts {
    total: i64,
    held: i64,
    lapsed: Option<i64>,
    free: Option<i64>,
}

async fn counts(client: &Client) -> Result<Counts, BoxError> {
    const DIRECT: &str = "SELECT pg_catalog.count(*), \
          pg_catalog.count(*) FILTER (WHERE owner IS NOT NULL AND expires_at > pg_catalog.clock_timestamp()), \
          pg_catalog.count(*) FILTER (WHERE owner IS NOT NULL AND expires_at <= pg_catalog.clock_timestamp()), \
          pg_catalog.count(*) FILTER (WHERE owner IS NULL) \
     FROM lease.leases";
    match client.query_one(DIRECT, &[]).await {
        Ok(row) => Ok(Counts {
            total: row.try_get(0)?,
            held: row.try_get(1)?,
            lapsed: Some(row.try_get(2)?),
            free: Some(row.try_get(3)?),
        }),
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE) => {
            let all = pglease::list(client, None).await?;
            let held = all.iter().filter(|l| l.state.held).count();
            Ok(Counts {
                total: i64::try_from(all.len())?,
                held: i64::try_from(held)?,
                lapsed: None,
                free: None,
            })
        }
        Err(e) => Err(e.into()),
    }
}

/// `pglease configure`: shows the settings, or changes those given (the others keep their value)
/// and shows the result.
pub async fn configure(args: ConfigureArgs, target: &Target) -> Result<ExitCode, BoxError> {
    let client = target.connect().await?;
    let mut c = target.answer(pglease::configuration(&client)).await?;
    if args.changes() {
        let max_ttl = match (args.max_ttl, args.no_max_ttl) {
            (Some(d), _) => Some(d),
            (None, true) => None,
            (None, false) => c.max_ttl,
        };
        let quarantine = match (args.failover_quarantine, args.no_failover_quarantine) {
            (Some(d), _) => Some(d),
            (None, true) => None,
            // Removing the cap removes the quarantine that needs it.
            (None, false) if max_ttl.is_none() => None,
            (None, false) => c.failover_quarantine,
        };
        c = target
            .answer(pglease::configure(&client, max_ttl, quarantine))
            .await?;
    }
    if args.history_changes() {
        c = target
            .answer(pglease::configure_history(
                &client,
                args.history,
                args.history_retention,
            ))
            .await?;
    }
    print_configuration(args.output, &c)?;
    Ok(ExitCode::SUCCESS)
}

fn print_configuration(output: OutputArgs, c: &pglease::Configuration) -> std::io::Result<()> {
    #[derive(Serialize)]
    struct Json {
        max_ttl_ms: Option<u64>,
        failover_quarantine_ms: Option<u64>,
        timeline: i64,
        quarantine_until: Option<String>,
        min_epoch: i64,
        history: bool,
        history_retention_ms: u64,
    }
    let until = c.quarantine_until.map(output::timestamp);
    if output.json {
        return output::json(&Json {
            max_ttl_ms: c.max_ttl.map(output::millis),
            failover_quarantine_ms: c.failover_quarantine.map(output::millis),
            timeline: c.timeline,
            quarantine_until: until,
            min_epoch: c.min_epoch,
            history: c.history,
            history_retention_ms: output::millis(c.history_retention),
        });
    }
    let or_none = |d: Option<std::time::Duration>| d.map_or("none".to_owned(), output::duration);
    output::out(&format!(
        "max ttl: {}\nfailover quarantine: {}\ntimeline: {}\nquarantine until: {}\nmin epoch: {}\n\
         history: {}, kept {} after a grant ends\n",
        or_none(c.max_ttl),
        or_none(c.failover_quarantine),
        c.timeline,
        until.as_deref().unwrap_or("none"),
        c.min_epoch,
        if c.history { "on" } else { "off" },
        output::duration(c.history_retention)
    ))
}

/// `pglease status`.
pub async fn status(args: StatusArgs, target: &Target) -> Result<ExitCode, BoxError> {
    let client = target.connect().await?;
    let server_version: String = target
        .answer(client.query_one("SELECT pg_catalog.current_setting('server_version')", &[]))
        .await?
        .try_get(0)?;
    let database: String = target
        .answer(client.query_one("SELECT pg_catalog.current_database()::text", &[]))
        .await?
        .try_get(0)?;
    let installed = target.answer(pglease::installed(&client)).await?;
    let queue_installed = target
        .answer(pglease::PG_LEASE_QUEUE.installed(&client))
        .await?;
    let counts = match &installed {
        Some(_) => Some(target.answer(counts(&client)).await?),
        None => None,
    };
    let mut role = target.answer(role(&client)).await?;
    if queue_installed
        .as_ref()
        .is_some_and(|i| i.version == pglease::PG_LEASE_QUEUE.version)
    {
        role.queues = Some(target.answer(queue_privileges(&client)).await?);
    }

    #[derive(Serialize)]
    struct Extension {
        version: String,
        via: &'static str,
        current: bool,
    }
    #[derive(Serialize)]
    struct Json {
        target: String,
        local: bool,
        server_version: String,
        database: String,
        /// Null when pg_lease is not installed in the database.
        pg_lease: Option<Extension>,
        /// Null when pg_lease_queue is not installed in the database.
        pg_lease_queue: Option<Extension>,
        /// The version this pglease speaks.
        client_version: &'static str,
        leases: Option<Counts>,
        role: Role,
    }
    let json = Json {
        target: target.describe(),
        local: target.is_local(),
        server_version,
        database,
        pg_lease: installed.map(|i| Extension {
            current: i.version == pglease::VERSION,
            version: i.version,
            via: via_name(i.via),
        }),
        pg_lease_queue: queue_installed.map(|i| Extension {
            current: i.version == pglease::PG_LEASE_QUEUE.version,
            version: i.version,
            via: via_name(i.via),
        }),
        client_version: pglease::VERSION,
        leases: counts,
        role,
    };
    if args.output.json {
        output::json(&json)?;
        return Ok(ExitCode::SUCCESS);
    }
    let pg_lease = match &json.pg_lease {
        Some(e) if e.current => format!("{} via {}", e.version, e.via),
        Some(e) => format!(
            "{} via {} (this pglease speaks {}: upgrade with `pglease install`)",
            e.version,
            e.via,
            pglease::VERSION
        ),
        None => "not installed (run `pglease install`)".into(),
    };
    let pg_lease_queue = match &json.pg_lease_queue {
        Some(e) if e.current => format!("{} via {}", e.version, e.via),
        Some(e) => format!(
            "{} via {} (this pglease speaks {}: upgrade with `pglease install pg_lease_queue`)",
            e.version,
            e.via,
            pglease::PG_LEASE_QUEUE.version
        ),
        None => "not installed (`pglease install pg_lease_queue`)".into(),
    };
    let leases = match &json.leases {
        None => "-".into(),
        Some(c) => match (c.lapsed, c.free) {
            (Some(lapsed), Some(free)) => format!(
                "{} key{}: {} held, {lapsed} lapsed, {free} free",
                c.total,
                if c.total == 1 { "" } else { "s" },
                c.held
            ),
            _ => format!(
                "{} key{}: {} held, {} not held (lapsed/free need read access to lease.leases)",
                c.total,
                if c.total == 1 { "" } else { "s" },
                c.held,
                c.total - c.held
            ),
        },
    };
    output::out(&output::fields(&[
        ("server", json.target.clone()),
        ("version", format!("PostgreSQL {}", json.server_version)),
        ("database", json.database.clone()),
        ("pg_lease", pg_lease),
        ("pg_lease_queue", pg_lease_queue),
        ("leases", leases),
        (
            "role",
            format!(
                "{} (leases are this role's; may: {})",
                json.role.name,
                if json.role.may.is_empty() {
                    "nothing here".to_owned()
                } else {
                    json.role.may.join(", ")
                }
            ),
        ),
        ("queues", queues_line(json.role.queues.as_deref())),
    ]))?;
    Ok(ExitCode::SUCCESS)
}

/// The session's login role, to which its grants belong, and what it may do here.
#[derive(Serialize)]
struct Role {
    name: String,
    /// Of `leases` (USAGE on schema lease), `force-release`, `purge`, `configure`, `queues`
    /// (USAGE on schema lease_queue), `create and drop queues`: those the role may.
    may: Vec<String>,
    /// What it may do with each queue (`lease_queue.privileges`); null without pg_lease_queue at
    /// this pglease's version.
    queues: Option<Vec<QueuePrivileges>>,
}

/// One queue's privileges of the session's role.
#[derive(Serialize)]
struct QueuePrivileges {
    queue: String,
    produce: bool,
    consume: bool,
}

async fn queue_privileges(
    client: &tokio_postgres::Client,
) -> Result<Vec<QueuePrivileges>, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT queue_name, produce, consume FROM lease_queue.privileges()",
            &[],
        )
        .await?;
    rows.iter()
        .map(|r| {
            Ok(QueuePrivileges {
                queue: r.try_get(0)?,
                produce: r.try_get(1)?,
                consume: r.try_get(2)?,
            })
        })
        .collect()
}

/// `jobs (produce, consume), audit (consume)`; the queues the role may not use are left out.
fn queues_line(queues: Option<&[QueuePrivileges]>) -> String {
    let Some(queues) = queues else {
        return "-".into();
    };
    let usable: Vec<String> = queues
        .iter()
        .filter(|q| q.produce || q.consume)
        .map(|q| {
            let may: Vec<&str> = [(q.produce, "produce"), (q.consume, "consume")]
                .into_iter()
                .filter_map(|(m, name)| m.then_some(name))
                .collect();
            format!("{} ({})", q.queue, may.join(", "))
        })
        .collect();
    if usable.is_empty() {
        format!("none of {} may be used by this role", queues.len())
    } else {
        usable.join(", ")
    }
}

async fn role(client: &tokio_postgres::Client) -> Result<Role, tokio_postgres::Error> {
    // Privileges of objects that may be missing: to_reg* gives NULL, and so does the check.
    let row = client
        .query_one(
            "SELECT SESSION_USER::text, pg_catalog.array_remove(ARRAY[
                 CASE WHEN pg_catalog.has_schema_privilege(SESSION_USER,
                               pg_catalog.to_regnamespace('lease'), 'USAGE') THEN 'leases' END,
                 CASE WHEN pg_catalog.has_function_privilege(SESSION_USER,
                               pg_catalog.to_regprocedure('lease.force_release(text)'), 'EXECUTE')
                      THEN 'force-release' END,
                 CASE WHEN pg_catalog.has_function_privilege(SESSION_USER,
                               pg_catalog.to_regprocedure('lease.purge(interval)'), 'EXECUTE')
                      THEN 'purge' END,
                 CASE WHEN pg_catalog.has_function_privilege(SESSION_USER,
                               pg_catalog.to_regprocedure('lease.configure(interval, interval)'),
                               'EXECUTE') THEN 'configure' END,
                 CASE WHEN pg_catalog.has_schema_privilege(SESSION_USER,
                               pg_catalog.to_regnamespace('lease_queue'), 'USAGE') THEN 'queues' END,
                 CASE WHEN pg_catalog.has_function_privilege(SESSION_USER, pg_catalog.to_regprocedure(
                               'lease_queue.create_queue(text, integer, integer, boolean)'), 'EXECUTE')
                      THEN 'create and drop queues' END], NULL)",
            &[],
        )
        .await?;
    Ok(Role {
        name: row.try_get(0)?,
        may: row.try_get(1)?,
        queues: None,
    })
}

/// What `local status` and `local start` print.
#[derive(Debug, Serialize)]
struct LocalJson {
    running: bool,
    pid: Option<u32>,
    version: Option<String>,
    dir: String,
    /// Without the password (`pglease local url` prints one with it).
    url: String,
    password_file: String,
    log: String,
}

fn local_json(server: &LocalServer) -> LocalJson {
    let running = server.running();
    LocalJson {
        running: running.is_some(),
        pid: running,
        version: server
            .version()
            .or_else(|| server.major().map(|m| m.to_string())),
        dir: server.dir().display().to_string(),
        url: server.url(),
        password_file: server.password_path().display().to_string(),
        log: server.log_path().display().to_string(),
    }
}

fn print_local(json: &LocalJson, as_json: bool) -> std::io::Result<()> {
    if as_json {
        return output::json(json);
    }
    let state = match (json.running, json.pid) {
        (true, Some(pid)) => format!("running (pid {pid})"),
        _ => "stopped".into(),
    };
    output::out(&output::fields(&[
        ("state", state),
        (
            "version",
            json.version
                .as_deref()
                .map_or_else(|| "(not created yet)".into(), |v| format!("PostgreSQL {v}")),
        ),
        ("dir", json.dir.clone()),
        ("url", json.url.clone()),
        ("password", json.password_file.clone()),
        ("log", json.log.clone()),
    ]))
}

/// `pglease local start`.
pub async fn local_start(
    args: LocalStartArgs,
    server: &LocalServer,
    limits: Limits,
) -> Result<ExitCode, BoxError> {
    let started = server.ensure_started(args.pg.pg_version, limits).await?;
    if !args.output.json {
        let what = match (started.created, started.started) {
            (true, _) => "created and started the local server",
            (false, true) => "started the local server",
            (false, false) => "the local server is already running",
        };
        eprintln!("pglease: {what}");
    }
    print_local(&local_json(server), args.output.json)?;
    Ok(ExitCode::SUCCESS)
}

/// `pglease local stop`.
pub async fn local_stop(server: &LocalServer) -> Result<ExitCode, BoxError> {
    let was_running = server.stop().await?;
    let what = if was_running {
        "stopped the local server"
    } else {
        "the local server is not running"
    };
    output::out(&format!("{what} ({})\n", server.dir().display()))?;
    Ok(ExitCode::SUCCESS)
}

/// `pglease local status`.
pub async fn local_status(
    args: LocalStatusArgs,
    server: &LocalServer,
) -> Result<ExitCode, BoxError> {
    print_local(&local_json(server), args.output.json)?;
    Ok(ExitCode::SUCCESS)
}

/// `pglease local url`: the URL with the password (keep it private: it lets its holder in).
pub async fn local_url(
    args: LocalUrlArgs,
    server: &LocalServer,
    limits: Limits,
) -> Result<ExitCode, BoxError> {
    server.ensure_started(args.pg.pg_version, limits).await?;
    let url = server
        .url_with_password()
        .ok_or_else(|| format!("no password in {}", server.password_path().display()))?;
    if args.output.json {
        #[derive(Serialize)]
        struct Json {
            url: String,
        }
        output::json(&Json { url })?;
    } else {
        output::out(&format!("{url}\n"))?;
    }
    Ok(ExitCode::SUCCESS)
}
