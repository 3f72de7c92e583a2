//! Hostile suite: adversarial arguments to every SQL function (property-based, with a bounded number
//! of cases), malicious `search_path`s and shadowing objects, and privilege boundaries.
//!
//! Properties (`props.rs`; `console.rs` for the operator console's browse and summary) run each
//! function with NULLs, empty and huge (up to 1 MB) text, Unicode oddities, control characters,
//! quotes, backslashes and LIKE wildcards, extreme and mixed-sign intervals and extreme epochs,
//! always as typed parameters. Every call must either succeed with a well-formed result consistent
//! with the state it acted on, or fail with a documented SQLSTATE and leave the state (every column
//! of every table: the leases, the epoch floor, the grant history and the settings) unchanged. Two
//! client-side failures are classified apart, and in both the function is never reached: interval
//! literals PostgreSQL cannot parse (22007/22008/22015 at the `::interval` cast, checked with the
//! cast alone first) and text containing NUL, which PostgreSQL cannot store in `text` (22021 when
//! the parameter is received).
//!
//! Environment: `PGLEASE_HOSTILE_SEED` (a u64) fixes the generated inputs; unset, a random seed is
//! used. It is always printed on stderr and in failure messages. `PGLEASE_HOSTILE_CASES` overrides
//! the number of cases per property (default 128).
//!
//! Bugs this suite found have deterministic reproducers in `found_bugs.rs`; all are fixed (0.2.0)
//! and the reproducers stay as regression tests.

mod console;
mod found_bugs;
mod inputs;
mod installer;
mod privileges;
mod props;
mod queue;
mod search_path;
mod settings;
mod verdicts;

use std::io::Write as _;

use pglease_tests::{ADMIN, APP, server};
use tokio::runtime::Runtime;
use tokio_postgres::Client;

/// A fresh database with the extension, and connections to it, on a runtime owned by one test.
pub struct Db {
    pub rt: Runtime,
    pub name: String,
    pub app: Client,
    pub admin: Client,
    pub su: Client,
}

impl Db {
    /// Creates the database and connects as `app`, the installing role and the superuser.
    pub fn new(label: &str) -> Db {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("tokio runtime");
        let s = server();
        let name = s.fresh_db_with_extension(label);
        let (app, admin, su) = rt.block_on(async {
            let app = s.connect_as(&name, APP).await;
            // A blocking acquire of a key another owner holds would otherwise wait up to its bound.
            app.batch_execute("SET statement_timeout = '250ms'")
                .await
                .expect("statement_timeout");
            (
                app,
                s.connect_as(&name, ADMIN).await,
                s.connect_super(&name).await,
            )
        });
        Db {
            rt,
            name,
            app,
            admin,
            su,
        }
    }

    /// Every row of every table (the leases, the epoch floor, the grant history and the settings),
    /// all columns, as text: the "nothing changed" snapshot, read as the superuser. With
    /// `with_waiting = false` the waiter mark (set by register_waiter) is left out.
    pub async fn state(&self, with_waiting: bool) -> Vec<String> {
        let sql = if with_waiting {
            "SELECT format('%s', l) FROM lease.leases l \
             UNION ALL SELECT format('floor %s', f) FROM lease.epoch_floor f \
             UNION ALL SELECT format('history %s', h) FROM lease.grant_history h \
             UNION ALL SELECT format('settings %s', s) FROM lease.settings s ORDER BY 1"
        } else {
            "SELECT format('%s|%s|%s|%s', key, owner, epoch, expires_at) FROM lease.leases \
             UNION ALL SELECT format('floor %s', f) FROM lease.epoch_floor f \
             UNION ALL SELECT format('history %s', h) FROM lease.grant_history h \
             UNION ALL SELECT format('settings %s', s) FROM lease.settings s ORDER BY 1"
        };
        self.su
            .query(sql, &[])
            .await
            .expect("read state")
            .iter()
            .map(|r| r.get(0))
            .collect()
    }
}

/// The seed for generated inputs: `PGLEASE_HOSTILE_SEED` or random; printed past output capture.
pub fn seed(test: &str) -> u64 {
    let seed = match std::env::var("PGLEASE_HOSTILE_SEED") {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("PGLEASE_HOSTILE_SEED must be a u64, got {v:?}")),
        Err(_) => {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock after 1970")
                .as_nanos() as u64;
            t.rotate_left(17) ^ u64::from(std::process::id()) ^ t
        }
    };
    let _ = writeln!(
        std::io::stderr(),
        "hostile {test}: seed {seed} (PGLEASE_HOSTILE_SEED={seed})"
    );
    seed
}

/// Cases per property.
pub fn cases() -> u32 {
    std::env::var("PGLEASE_HOSTILE_CASES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(128)
}
