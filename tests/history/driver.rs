//! The randomized workload: concurrent clients call the API on a few hot keys, each with its own
//! connection as one of two unrelated login roles (`app` for even clients, `reporting` for odd
//! ones: pg_lease 0.8.0 binds a grant to its role), each role with owner strings of its own while
//! the keys are shared (so keys change hands between the roles, and a role's stale epochs meet the
//! other role's grants), some calls inside explicit transactions that commit or roll back, while an admin
//! connection purges now and then, a superuser connection terminates random clients' backends, and
//! random clients' backends are frozen (SIGSTOP) for up to 400 ms and resumed. Every call is
//! recorded as an [`Op`] for the checker.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use pglease_tests::{ADMIN, APP, OTHER_APP, server};
use tokio_postgres::{Client, NoTls, Statement};

use crate::checker::Violation;
use crate::model::{Call, Commit, Micros, Op, Outcome, View};
use crate::recorded::{self, Recorded};
use crate::rng::Rng;

/// Shape of a run. It ends when `duration` has passed or `ops` calls were recorded, whichever
/// comes first (at least one of the two is set).
#[derive(Debug, Clone)]
pub struct Config {
    pub seed: u64,
    pub duration: Option<Duration>,
    pub ops: Option<usize>,
    pub clients: usize,
    pub keys: usize,
    pub owners: usize,
}

/// How an explicit transaction ended, as its client saw it.
#[derive(Debug, Clone)]
pub struct TxRecord {
    pub id: usize,
    pub client: usize,
    pub xid: String,
    pub ops: Vec<usize>,
    pub end: Commit,
}

/// Everything a run produced.
#[derive(Debug, Default)]
pub struct Run {
    pub ops: Vec<Op>,
    pub txs: Vec<TxRecord>,
    pub kills: usize,
    /// Backends frozen (SIGSTOP) and resumed.
    pub pauses: usize,
    /// How long the workload ran.
    pub elapsed: Duration,
    /// SQLSTATEs nobody should ever see in this workload (with the op), and other harness failures.
    pub unexpected: Vec<String>,
    /// Transactions whose server-side status contradicts what their client saw (I7).
    pub tx_violations: Vec<Violation>,
    /// Transactions whose COMMIT outcome was unknown and that the server resolved.
    pub resolved: usize,
    /// The first server time seen (for relative timestamps in reports).
    pub base: Micros,
    /// Every key's `lease.history`, read once the workload and every transaction had ended.
    pub recorded: Vec<Recorded>,
}

/// The purger's client number in the history.
pub const PURGER: usize = usize::MAX;
/// The client number of the operator that force-releases keys (as the installing role).
pub const FORCER: usize = usize::MAX - 1;

const SRC: &str = "(SELECT clock_timestamp() AS t0 OFFSET 0) AS s";
// Each statement reads the server clock before the call (t0, in a subquery the call depends on) and
// after it (t1, in the select list), so the call's own clock readings lie within [t0, t1].
// `|| left(s.t0::text, 0)` appends nothing; it only makes the call depend on t0.
fn sql_acquire() -> String {
    format!(
        "SELECT s.t0, a.acquired, a.epoch, a.expires_at, clock_timestamp() FROM {SRC} \
         CROSS JOIN LATERAL lease.acquire($1::text || left(s.t0::text, 0), $2::text, \
         $3::text::interval, $4::text::interval) AS a"
    )
}
fn sql_renew() -> String {
    format!(
        "SELECT s.t0, r.status, r.expires_at, clock_timestamp() FROM {SRC} \
         CROSS JOIN LATERAL lease.renew($1::text || left(s.t0::text, 0), $2::text, $3::bigint, \
         $4::text::interval) AS r"
    )
}
fn sql_release() -> String {
    format!(
        "SELECT s.t0, r.status, clock_timestamp() FROM {SRC} \
         CROSS JOIN LATERAL lease.release($1::text || left(s.t0::text, 0), $2::text, $3::bigint) \
         AS r(status)"
    )
}
fn sql_transfer() -> String {
    format!(
        "SELECT s.t0, r.status, r.epoch, r.expires_at, clock_timestamp() FROM {SRC} \
         CROSS JOIN LATERAL lease.transfer($1::text || left(s.t0::text, 0), $2::text, $3::bigint, \
         $4::text, $5::text::interval) AS r"
    )
}
fn sql_fence() -> String {
    format!(
        "SELECT s.t0, f.x, clock_timestamp() FROM {SRC} \
         CROSS JOIN LATERAL lease.fence($1::text || left(s.t0::text, 0), $2::text, $3::bigint) AS f(x)"
    )
}
fn sql_inspect() -> String {
    format!(
        "SELECT s.t0, i.held, i.owner, i.epoch, i.expires_at, clock_timestamp() FROM {SRC} \
         LEFT JOIN LATERAL lease.inspect($1::text || left(s.t0::text, 0)) AS i ON true"
    )
}
fn sql_register() -> String {
    format!(
        "SELECT s.t0, w.held, w.owner, w.epoch, w.expires_at, w.expires_at - w.lapses_in, \
         clock_timestamp() FROM {SRC} \
         CROSS JOIN LATERAL lease.register_waiter($1::text || left(s.t0::text, 0)) AS w"
    )
}
fn sql_force() -> String {
    format!(
        "SELECT s.t0, f.e, clock_timestamp() FROM {SRC} \
         CROSS JOIN LATERAL lease.force_release($1::text || left(s.t0::text, 0)) AS f(e)"
    )
}
fn sql_purge() -> String {
    format!(
        "SELECT s.t0, p.n, clock_timestamp() FROM {SRC} \
         CROSS JOIN LATERAL lease.purge(($1::text || left(s.t0::text, 0))::interval) AS p(n)"
    )
}
const SQL_GUARD: &str =
    "INSERT INTO public.guarded_writes (key, owner, epoch) VALUES ($1::text, $2::text, $3::bigint)";

/// Server time in microseconds.
pub fn us(t: SystemTime) -> Micros {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_micros() as Micros,
        Err(e) => -(e.duration().as_micros() as Micros),
    }
}

fn ms(n: i64) -> Duration {
    Duration::from_millis(n.max(0) as u64)
}

fn interval(ms: i64) -> String {
    format!("{ms} milliseconds")
}

/// A failed statement: a server error that ended the statement (the session lives on), or a lost
/// connection (the statement's fate is unknown).
enum Fail {
    Sql(String),
    Conn,
}

fn classify(e: &tokio_postgres::Error) -> Fail {
    match e.code().map(|c| c.code()) {
        // admin_shutdown (pg_terminate_backend), crash_shutdown, cannot_connect_now, class 08.
        Some(c) if !matches!(c, "57P01" | "57P02" | "57P03") && !c.starts_with("08") => {
            // A deadlock's DETAIL names both sides' statements: kept in the test's output (shown
            // when it fails), so that an unexpected one can be traced to its partner.
            if let (Some(db), "40P01") = (e.as_db_error(), c) {
                eprintln!(
                    "history: 40P01: {}; {}",
                    db.message(),
                    db.detail().unwrap_or("")
                );
            }
            Fail::Sql(c.to_string())
        }
        _ => Fail::Conn,
    }
}

struct Ctx {
    db: String,
    start: Instant,
    deadline: Option<Instant>,
    target: Option<usize>,
    recorded: AtomicUsize,
    ops: Mutex<Vec<Op>>,
    txs: Mutex<Vec<TxRecord>>,
    pids: Vec<AtomicI32>,
    hints: Mutex<HashMap<(String, String), i64>>,
    unexpected: Mutex<Vec<String>>,
    next_tx: AtomicUsize,
    kills: AtomicUsize,
    pauses: AtomicUsize,
    owners: usize,
    keys: usize,
}

impl Ctx {
    fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    fn running(&self) -> bool {
        self.deadline.is_none_or(|d| Instant::now() < d)
            && self
                .target
                .is_none_or(|n| self.recorded.load(Ordering::Relaxed) < n)
    }

    fn push(&self, mut op: Op) -> usize {
        let mut ops = self.ops.lock().unwrap();
        let id = ops.len();
        op.id = id;
        ops.push(op);
        self.recorded.store(ops.len(), Ordering::Relaxed);
        id
    }

    fn set_commit(
        &self,
        ids: &[usize],
        commit: Commit,
        visible_at: Option<u64>,
        pre: Option<Micros>,
        sent: Option<u64>,
    ) {
        let mut ops = self.ops.lock().unwrap();
        for &id in ids {
            ops[id].commit = commit;
            ops[id].visible_at = visible_at;
            if let Outcome::Fenced {
                pre_commit,
                commit_sent,
                ..
            } = &mut ops[id].outcome
            {
                *pre_commit = pre;
                *commit_sent = sent;
            }
        }
    }

    fn unexpected(&self, what: String) {
        self.unexpected.lock().unwrap().push(what);
    }

    fn hint(&self, key: &str, owner: &str, epoch: i64) {
        self.hints
            .lock()
            .unwrap()
            .insert((key.to_string(), owner.to_string()), epoch);
    }

    fn hinted(&self, key: &str, owner: &str) -> Option<i64> {
        self.hints
            .lock()
            .unwrap()
            .get(&(key.to_string(), owner.to_string()))
            .copied()
    }
}

/// A client's connection with its prepared statements and the last server time it saw.
struct Conn {
    client: Client,
    st: HashMap<&'static str, Statement>,
    last: Micros,
}

impl Conn {
    async fn open(ctx: &Ctx, me: usize, role: &str) -> Conn {
        let conninfo = server().conninfo(&ctx.db, role);
        let mut attempts = 0;
        loop {
            attempts += 1;
            assert!(attempts < 200, "client {me} could not reconnect");
            let Ok((client, connection)) = tokio_postgres::connect(&conninfo, NoTls).await else {
                tokio::time::sleep(ms(10)).await;
                continue;
            };
            tokio::spawn(async move {
                let _ = connection.await;
            });
            let Ok(row) = client
                .query_one("SELECT pg_backend_pid(), clock_timestamp()", &[])
                .await
            else {
                continue;
            };
            let mut st = HashMap::new();
            let mut ok = true;
            for (name, sql) in [
                ("acquire", sql_acquire()),
                ("renew", sql_renew()),
                ("release", sql_release()),
                ("transfer", sql_transfer()),
                ("fence", sql_fence()),
                ("inspect", sql_inspect()),
                ("register", sql_register()),
                ("purge", sql_purge()),
                ("force", sql_force()),
            ] {
                if matches!(name, "purge" | "force") && role != ADMIN {
                    continue;
                }
                match client.prepare(&sql).await {
                    Ok(s) => {
                        st.insert(name, s);
                    }
                    Err(e) => {
                        if let Fail::Sql(code) = classify(&e) {
                            panic!("prepare {name}: {code}: {e}");
                        }
                        ok = false;
                        break;
                    }
                }
            }
            if !ok {
                continue;
            }
            if me < ctx.pids.len() {
                ctx.pids[me].store(row.get(0), Ordering::SeqCst);
            }
            return Conn {
                client,
                st,
                last: us(row.get(1)),
            };
        }
    }

    /// Runs one call; returns its outcome and the [t0, t1] bracket.
    async fn call(&mut self, call: &Call) -> Result<(Outcome, Micros, Micros), Fail> {
        let c = &self.client;
        let res = match call {
            Call::Acquire {
                key,
                owner,
                ttl_ms,
                wait_ms,
            } => c
                .query_one(
                    &self.st["acquire"],
                    &[key, owner, &interval(*ttl_ms), &interval(*wait_ms)],
                )
                .await
                .map(|r| {
                    let out = Outcome::Acquired {
                        acquired: r.get(1),
                        epoch: r.get(2),
                        expires_at: r.get::<_, Option<SystemTime>>(3).map(us),
                    };
                    (out, us(r.get(0)), us(r.get(4)))
                }),
            Call::Renew {
                key,
                owner,
                epoch,
                ttl_ms,
            } => c
                .query_one(&self.st["renew"], &[key, owner, epoch, &interval(*ttl_ms)])
                .await
                .map(|r| {
                    let out = Outcome::Renewed {
                        status: r.get(1),
                        expires_at: r.get::<_, Option<SystemTime>>(2).map(us),
                    };
                    (out, us(r.get(0)), us(r.get(3)))
                }),
            Call::Release { key, owner, epoch } => c
                .query_one(&self.st["release"], &[key, owner, epoch])
                .await
                .map(|r| {
                    let out = Outcome::Released { status: r.get(1) };
                    (out, us(r.get(0)), us(r.get(2)))
                }),
            Call::Transfer {
                key,
                owner,
                epoch,
                to_owner,
                ttl_ms,
            } => c
                .query_one(
                    &self.st["transfer"],
                    &[key, owner, epoch, to_owner, &interval(*ttl_ms)],
                )
                .await
                .map(|r| {
                    let out = Outcome::Transferred {
                        status: r.get(1),
                        epoch: r.get(2),
                        expires_at: r.get::<_, Option<SystemTime>>(3).map(us),
                    };
                    (out, us(r.get(0)), us(r.get(4)))
                }),
            Call::Fence { key, owner, epoch } => c
                .query_one(&self.st["fence"], &[key, owner, epoch])
                .await
                .map(|r| {
                    let out = Outcome::Fenced {
                        expires_at: us(r.get(1)),
                        pre_commit: None,
                        commit_sent: None,
                    };
                    (out, us(r.get(0)), us(r.get(2)))
                }),
            Call::Inspect { key } => c.query(&self.st["inspect"], &[key]).await.map(|rows| {
                assert_eq!(rows.len(), 1, "inspect through a LEFT JOIN gives one row");
                let r = &rows[0];
                let held: Option<bool> = r.get(1);
                let view = held.map(|held| View {
                    held,
                    owner: r.get(2),
                    epoch: r.get(3),
                    expires_at: r.get::<_, Option<SystemTime>>(4).map(us),
                    now: None,
                });
                (Outcome::Inspected(view), us(r.get(0)), us(r.get(5)))
            }),
            Call::RegisterWaiter { key } => {
                c.query_one(&self.st["register"], &[key]).await.map(|r| {
                    let view = View {
                        held: r.get(1),
                        owner: r.get(2),
                        epoch: r.get(3),
                        expires_at: r.get::<_, Option<SystemTime>>(4).map(us),
                        now: r.get::<_, Option<SystemTime>>(5).map(us),
                    };
                    (Outcome::Registered(view), us(r.get(0)), us(r.get(6)))
                })
            }
            Call::ForceRelease { key } => c
                .query_one(&self.st["force"], &[key])
                .await
                .map(|r| (Outcome::Forced(r.get(1)), us(r.get(0)), us(r.get(2)))),
            Call::Purge { older_than_ms } => c
                .query_one(&self.st["purge"], &[&interval(*older_than_ms)])
                .await
                .map(|r| (Outcome::Purged(r.get(1)), us(r.get(0)), us(r.get(2)))),
        };
        match res {
            Ok(ok) => {
                self.last = ok.2;
                Ok(ok)
            }
            Err(e) => Err(classify(&e)),
        }
    }
}

fn pick_key(rng: &mut Rng, keys: usize) -> String {
    format!("k{}", rng.below(keys as u64))
}

/// The login role of client `me`: two unrelated roles, alternating.
pub fn role_of(me: usize) -> &'static str {
    if me.is_multiple_of(2) { APP } else { OTHER_APP }
}

/// An owner string of client `me`'s role: owners `o<i>` with `i` of the client's parity belong to its
/// role (one role's clients never present the other role's owner strings: whether a role may act on
/// another role's grant is the regression suite's, not the model's).
fn pick_owner(rng: &mut Rng, me: usize, owners: usize) -> String {
    let parity = me % 2;
    let of_role = ((owners + 1 - parity.min(owners)) / 2).max(1); // owners o<i>, i % 2 == parity
    let j = if rng.chance(65) {
        (me / 2) % of_role
    } else {
        rng.below(of_role as u64) as usize
    };
    format!("o{}", 2 * j + parity)
}

fn pick_ttl(rng: &mut Rng) -> i64 {
    if rng.chance(20) {
        rng.range(15, 40)
    } else {
        rng.range(40, 300)
    }
}

/// Per-client memory of the leases it was granted (so renew/release/fence often present a current
/// epoch) and its random stream.
struct Worker {
    me: usize,
    rng: Rng,
    mine: Vec<(String, String, i64)>,
}

impl Worker {
    /// (key, owner, epoch) for renew/release/fence: mostly one of its own grants, sometimes a
    /// perturbed or guessed epoch.
    fn target(&mut self, ctx: &Ctx) -> (String, String, i64) {
        let (key, owner, epoch) = if !self.mine.is_empty() && self.rng.chance(75) {
            let i = self.rng.below(self.mine.len() as u64) as usize;
            self.mine[i].clone()
        } else {
            let key = pick_key(&mut self.rng, ctx.keys);
            let owner = pick_owner(&mut self.rng, self.me, ctx.owners);
            let e = ctx
                .hinted(&key, &owner)
                .unwrap_or_else(|| self.rng.range(1, 6));
            (key, owner, e)
        };
        let epoch = match self.rng.below(20) {
            0 => epoch - 1,
            1 => epoch + 1,
            2 => self.rng.range(0, epoch + 2),
            _ => epoch,
        };
        (key, owner, epoch)
    }

    fn remember(&mut self, key: &str, owner: &str, epoch: i64) {
        self.mine.retain(|(k, o, _)| !(k == key && o == owner));
        self.mine.push((key.to_string(), owner.to_string(), epoch));
        if self.mine.len() > 4 {
            self.mine.remove(0);
        }
    }

    fn learn(&mut self, ctx: &Ctx, call: &Call, out: &Outcome) {
        match (call, out) {
            (
                Call::Acquire { key, owner, .. },
                Outcome::Acquired {
                    acquired: true,
                    epoch: Some(e),
                    ..
                },
            ) => {
                ctx.hint(key, owner, *e);
                self.remember(key, owner, *e);
            }
            (
                Call::Transfer {
                    key,
                    owner,
                    to_owner,
                    ..
                },
                Outcome::Transferred { epoch: Some(e), .. },
            ) => {
                // The successor is this client's now (to_owner is an owner of its role).
                self.mine.retain(|(k, o, _)| !(k == key && o == owner));
                ctx.hint(key, to_owner, *e);
                self.remember(key, to_owner, *e);
            }
            (Call::Inspect { key }, Outcome::Inspected(Some(v)))
            | (Call::RegisterWaiter { key }, Outcome::Registered(v)) => {
                if let (true, Some(o), Some(e)) = (v.held, &v.owner, v.epoch) {
                    ctx.hint(key, o, e);
                }
            }
            _ => {}
        }
    }
}

fn expected_sqlstate(call: &Call, code: &str) -> bool {
    match call {
        Call::Acquire { wait_ms, .. } => (code == "57014" && *wait_ms > 0) || code == "40P01",
        Call::Fence { .. } => matches!(code, "LE001" | "LE002" | "LE003" | "40P01"),
        Call::Renew { .. }
        | Call::Release { .. }
        | Call::Transfer { .. }
        | Call::RegisterWaiter { .. } => code == "40P01",
        _ => false,
    }
}

/// One call in autocommit mode. Returns false if the connection was lost.
async fn single(ctx: &Ctx, cl: &mut Worker, conn: &mut Conn) -> bool {
    let call = {
        let rng = &mut cl.rng;
        match rng.below(100) {
            0..35 => Call::Acquire {
                key: pick_key(rng, ctx.keys),
                owner: pick_owner(rng, cl.me, ctx.owners),
                ttl_ms: pick_ttl(rng),
                wait_ms: if rng.chance(75) {
                    0
                } else {
                    rng.range(10, 150)
                },
            },
            35..60 => {
                let (key, owner, epoch) = cl.target(ctx);
                Call::Renew {
                    key,
                    owner,
                    epoch,
                    ttl_ms: pick_ttl(&mut cl.rng),
                }
            }
            60..72 => {
                let (key, owner, epoch) = cl.target(ctx);
                Call::Release { key, owner, epoch }
            }
            72..78 => {
                let (key, owner, epoch) = cl.target(ctx);
                Call::Transfer {
                    key,
                    owner,
                    epoch,
                    to_owner: pick_owner(&mut cl.rng, cl.me, ctx.owners),
                    ttl_ms: pick_ttl(&mut cl.rng),
                }
            }
            78..92 => Call::Inspect {
                key: pick_key(rng, ctx.keys),
            },
            _ => Call::RegisterWaiter {
                key: pick_key(rng, ctx.keys),
            },
        }
    };
    let lo = conn.last;
    let sent = ctx.now();
    let res = conn.call(&call).await;
    let done = ctx.now();
    let mut op = Op {
        id: 0,
        client: cl.me,
        tx: None,
        call,
        outcome: Outcome::Lost,
        t0: None,
        t1: None,
        lo,
        sent,
        done,
        commit: Commit::Committed,
        visible_at: Some(done),
    };
    let alive = match res {
        Ok((out, t0, t1)) => {
            cl.learn(ctx, &op.call, &out);
            op.outcome = out;
            op.t0 = Some(t0);
            op.t1 = Some(t1);
            op.lo = t0;
            true
        }
        Err(Fail::Sql(code)) => {
            if !expected_sqlstate(&op.call, &code) {
                ctx.unexpected(format!("{:?} failed with {code}", op.call));
            }
            op.outcome = Outcome::Failed(code);
            op.commit = Commit::NotCommitted;
            op.visible_at = None;
            true
        }
        Err(Fail::Conn) => {
            op.commit = if op.call.writes() {
                Commit::Ambiguous
            } else {
                Commit::NotCommitted
            };
            op.visible_at = None;
            false
        }
    };
    ctx.push(op);
    alive
}

/// An explicit transaction of 1–3 calls, then COMMIT or ROLLBACK. Returns false if the connection
/// was lost.
async fn transaction(ctx: &Ctx, cl: &mut Worker, conn: &mut Conn) -> bool {
    if conn.client.batch_execute("BEGIN").await.is_err() {
        return false;
    }
    let xid: String = match conn
        .client
        .query_one("SELECT pg_current_xact_id()::text", &[])
        .await
    {
        Ok(r) => r.get(0),
        Err(_) => return false, // the transaction never got anywhere: nothing to record
    };
    let tx = ctx.next_tx.fetch_add(1, Ordering::Relaxed);
    let mut ids = Vec::new();
    let n = cl.rng.range(1, 3);
    let mut end: Option<Commit> = None; // Some(NotCommitted) once the transaction is doomed
    let mut alive = true;
    for _ in 0..n {
        tokio::time::sleep(ms(cl.rng.range(0, 10))).await;
        let call = match cl.rng.below(100) {
            0..40 => Call::Acquire {
                key: pick_key(&mut cl.rng, ctx.keys),
                owner: pick_owner(&mut cl.rng, cl.me, ctx.owners),
                ttl_ms: pick_ttl(&mut cl.rng),
                wait_ms: if cl.rng.chance(80) {
                    0
                } else {
                    cl.rng.range(10, 100)
                },
            },
            40..65 => {
                let (key, owner, epoch) = cl.target(ctx);
                Call::Renew {
                    key,
                    owner,
                    epoch,
                    ttl_ms: pick_ttl(&mut cl.rng),
                }
            }
            65..75 => {
                let (key, owner, epoch) = cl.target(ctx);
                Call::Release { key, owner, epoch }
            }
            75..81 => {
                let (key, owner, epoch) = cl.target(ctx);
                Call::Transfer {
                    key,
                    owner,
                    epoch,
                    to_owner: pick_owner(&mut cl.rng, cl.me, ctx.owners),
                    ttl_ms: pick_ttl(&mut cl.rng),
                }
            }
            _ => {
                let (key, owner, epoch) = cl.target(ctx);
                Call::Fence { key, owner, epoch }
            }
        };
        let lo = conn.last;
        let sent = ctx.now();
        let res = conn.call(&call).await;
        let done = ctx.now();
        let mut op = Op {
            id: 0,
            client: cl.me,
            tx: Some(tx),
            call,
            outcome: Outcome::Lost,
            t0: None,
            t1: None,
            lo,
            sent,
            done,
            commit: Commit::Pending,
            visible_at: None,
        };
        match res {
            Ok((out, t0, t1)) => {
                cl.learn(ctx, &op.call, &out);
                op.outcome = out;
                op.t0 = Some(t0);
                op.t1 = Some(t1);
                op.lo = t0;
            }
            Err(Fail::Sql(code)) => {
                if !expected_sqlstate(&op.call, &code) {
                    ctx.unexpected(format!("{:?} in a transaction failed with {code}", op.call));
                }
                op.outcome = Outcome::Failed(code);
                end = Some(Commit::NotCommitted);
            }
            Err(Fail::Conn) => {
                end = Some(Commit::NotCommitted);
                alive = false;
            }
        }
        let fenced = matches!(op.outcome, Outcome::Fenced { .. });
        let (key, owner, epoch) = (
            op.call.key().unwrap_or("").to_string(),
            op.call.owner().unwrap_or("").to_string(),
            op.call.epoch().unwrap_or(0),
        );
        ids.push(ctx.push(op));
        if end.is_some() {
            break;
        }
        if fenced {
            // The guarded write that the fence protects.
            if let Err(e) = conn
                .client
                .execute(SQL_GUARD, &[&key, &owner, &epoch])
                .await
            {
                match classify(&e) {
                    Fail::Sql(code) => ctx.unexpected(format!("guarded write failed with {code}")),
                    Fail::Conn => alive = false,
                }
                end = Some(Commit::NotCommitted);
                break;
            }
        }
    }

    let commit = alive && end.is_none() && cl.rng.chance(70);
    let mut pre_commit = None;
    let mut commit_sent = None;
    let outcome = if !alive {
        Commit::NotCommitted
    } else if !commit {
        if conn.client.batch_execute("ROLLBACK").await.is_err() {
            alive = false;
        }
        Commit::NotCommitted
    } else {
        tokio::time::sleep(ms(cl.rng.range(0, 10))).await;
        match conn.client.query_one("SELECT clock_timestamp()", &[]).await {
            Err(_) => {
                alive = false;
                Commit::NotCommitted // COMMIT was never sent
            }
            Ok(r) => {
                pre_commit = Some(us(r.get(0)));
                if conn.client.is_closed() {
                    alive = false;
                    Commit::NotCommitted
                } else {
                    commit_sent = Some(ctx.now());
                    match conn.client.batch_execute("COMMIT").await {
                        Ok(()) => Commit::Committed,
                        Err(e) => {
                            if let Fail::Sql(code) = classify(&e) {
                                ctx.unexpected(format!("COMMIT failed with {code}"));
                            }
                            alive = false;
                            Commit::Ambiguous
                        }
                    }
                }
            }
        }
    };
    let visible = (outcome == Commit::Committed).then(|| ctx.now());
    ctx.set_commit(&ids, outcome, visible, pre_commit, commit_sent);
    ctx.txs.lock().unwrap().push(TxRecord {
        id: tx,
        client: cl.me,
        xid,
        ops: ids,
        end: outcome,
    });
    alive
}

async fn client_loop(ctx: Arc<Ctx>, me: usize, rng: Rng) {
    let mut cl = Worker {
        me,
        rng,
        mine: Vec::new(),
    };
    let mut conn = Conn::open(&ctx, me, role_of(me)).await;
    while ctx.running() {
        tokio::time::sleep(ms(cl.rng.range(0, 20))).await;
        if conn.client.is_closed() {
            conn = Conn::open(&ctx, me, role_of(me)).await;
        }
        let alive = if cl.rng.chance(60) {
            single(&ctx, &mut cl, &mut conn).await
        } else {
            transaction(&ctx, &mut cl, &mut conn).await
        };
        if !alive {
            conn = Conn::open(&ctx, me, role_of(me)).await;
        }
    }
}

async fn purger(ctx: Arc<Ctx>, mut rng: Rng) {
    let mut conn = Conn::open(&ctx, PURGER, ADMIN).await;
    while ctx.running() {
        tokio::time::sleep(ms(rng.range(300, 1200))).await;
        let call = Call::Purge {
            older_than_ms: rng.range(0, 200),
        };
        let lo = conn.last;
        let sent = ctx.now();
        let res = conn.call(&call).await;
        let done = ctx.now();
        let mut op = Op {
            id: 0,
            client: PURGER,
            tx: None,
            call,
            outcome: Outcome::Lost,
            t0: None,
            t1: None,
            lo,
            sent,
            done,
            commit: Commit::Committed,
            visible_at: Some(done),
        };
        match res {
            Ok((out, t0, t1)) => {
                op.outcome = out;
                op.t0 = Some(t0);
                op.t1 = Some(t1);
                op.lo = t0;
            }
            Err(Fail::Sql(code)) => {
                // purge never waits on a lease row (SKIP LOCKED) while it holds the epoch-floor
                // lock, so it cannot deadlock: every error is a failure.
                ctx.unexpected(format!("purge failed with {code}"));
                op.outcome = Outcome::Failed(code);
                op.commit = Commit::NotCommitted;
            }
            Err(Fail::Conn) => {
                ctx.unexpected("the purger's connection died".into());
                op.commit = Commit::Ambiguous;
                ctx.push(op);
                return;
            }
        }
        ctx.push(op);
    }
}

/// An operator (the installing role) ends whatever grant of a random key is held, now and then:
/// `lease.force_release`, recorded in the history as 'forced'.
async fn forcer(ctx: Arc<Ctx>, mut rng: Rng) {
    let mut conn = Conn::open(&ctx, FORCER, ADMIN).await;
    while ctx.running() {
        tokio::time::sleep(ms(rng.range(150, 700))).await;
        let call = Call::ForceRelease {
            key: pick_key(&mut rng, ctx.keys),
        };
        let lo = conn.last;
        let sent = ctx.now();
        let res = conn.call(&call).await;
        let done = ctx.now();
        let mut op = Op {
            id: 0,
            client: FORCER,
            tx: None,
            call,
            outcome: Outcome::Lost,
            t0: None,
            t1: None,
            lo,
            sent,
            done,
            commit: Commit::Committed,
            visible_at: Some(done),
        };
        match res {
            Ok((out, t0, t1)) => {
                op.outcome = out;
                op.t0 = Some(t0);
                op.t1 = Some(t1);
                op.lo = t0;
            }
            Err(Fail::Sql(code)) => {
                // force_release waits for the key's row in its lock queue (PostgreSQL's tuple
                // lock) behind the current locker. When workers' transactions deadlock over that
                // row and another one, the cycle runs through the queued call, and the detector
                // may pick it as the victim: 40P01, nothing changed (server log of PostgreSQL 14
                // runs: force_release queued on a row a transfer held, that transfer waiting for
                // a worker queued behind force_release). Anything else is unexpected.
                if code != "40P01" {
                    ctx.unexpected(format!("force_release failed with {code}"));
                }
                op.outcome = Outcome::Failed(code);
                op.commit = Commit::NotCommitted;
                op.visible_at = None;
            }
            Err(Fail::Conn) => {
                ctx.unexpected("the forcer's connection died".into());
                op.commit = Commit::Ambiguous;
                op.visible_at = None;
                ctx.push(op);
                return;
            }
        }
        ctx.push(op);
    }
}

/// Freezes a random client's backend (SIGSTOP) for 10–400 ms, then resumes it (SIGCONT): a
/// process pause in the middle of whatever the backend was doing (a statement, a fenced
/// transaction holding the key's row, an idle session), which the other clients wait out or see
/// a lease lapse through. A frozen backend cannot exit, so its pid names it until it is resumed;
/// only a backend that was already exiting (just terminated) is gone by then, and is not counted.
async fn pauser(ctx: Arc<Ctx>, mut rng: Rng) {
    let cluster = server().cluster();
    while ctx.running() {
        tokio::time::sleep(ms(rng.range(100, 800))).await;
        let victim = rng.below(ctx.pids.len() as u64) as usize;
        let pid = ctx.pids[victim].load(Ordering::SeqCst);
        // An error means the backend has exited (terminated): nothing was frozen.
        if pid == 0 || cluster.signal_backend(pid, libc::SIGSTOP).is_err() {
            continue;
        }
        tokio::time::sleep(ms(rng.range(10, 400))).await;
        if cluster.signal_backend(pid, libc::SIGCONT).is_ok() {
            ctx.pauses.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Every minute, a line on stderr (past the test harness's capture) with the counts so far.
async fn progress(ctx: Arc<Ctx>) {
    let mut last = Instant::now();
    while ctx.running() {
        tokio::time::sleep(ms(200)).await;
        if last.elapsed() >= Duration::from_secs(60) {
            last = Instant::now();
            let line = format!(
                "history: {:.0?}: {} ops, {} backends terminated, {} paused",
                ctx.start.elapsed(),
                ctx.recorded.load(Ordering::Relaxed),
                ctx.kills.load(Ordering::Relaxed),
                ctx.pauses.load(Ordering::Relaxed),
            );
            let _ =
                std::io::Write::write_all(&mut std::io::stderr(), format!("{line}\n").as_bytes());
        }
    }
}

async fn killer(ctx: Arc<Ctx>, mut rng: Rng) {
    let su = server().connect_super(&ctx.db).await;
    while ctx.running() {
        tokio::time::sleep(ms(rng.range(150, 900))).await;
        let victim = rng.below(ctx.pids.len() as u64) as usize;
        let pid = ctx.pids[victim].load(Ordering::SeqCst);
        if pid == 0 || !ctx.running() {
            continue;
        }
        let killed: bool = su
            .query_one("SELECT pg_terminate_backend($1)", &[&pid])
            .await
            .expect("pg_terminate_backend")
            .get(0);
        if killed {
            ctx.kills.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Runs the workload in a fresh database and returns the history, with transactions whose COMMIT
/// outcome was unknown resolved by the server (`pg_xact_status`), and every transaction's client-side
/// verdict checked against the server's.
pub async fn run(cfg: &Config) -> Run {
    let s = server();
    let db = s.fresh_db_with_extension("history");
    s.psql(
        &db,
        &format!(
            "CREATE TABLE public.guarded_writes (key text, owner text, epoch bigint, \
             at timestamptz DEFAULT clock_timestamp()); \
             GRANT INSERT, SELECT ON public.guarded_writes TO {APP}, {OTHER_APP};"
        ),
    );
    let max_connections: i64 = s
        .psql("postgres", "SHOW max_connections")
        .trim()
        .parse()
        .expect("max_connections is a number");
    // Besides the clients: the purger, the killer, this function's superuser, the other tests of
    // the suite, and a terminated backend that is frozen still holds its slot until resumed.
    assert!(
        cfg.clients > 0 && (cfg.clients as i64) + 12 <= max_connections,
        "{} clients need max_connections of at least {} (the server has {max_connections})",
        cfg.clients,
        cfg.clients + 12
    );
    let ctx = Arc::new(Ctx {
        db: db.clone(),
        start: Instant::now(),
        deadline: cfg.duration.map(|d| Instant::now() + d),
        target: cfg.ops,
        recorded: AtomicUsize::new(0),
        ops: Mutex::new(Vec::with_capacity(cfg.ops.unwrap_or(0))),
        txs: Mutex::new(Vec::new()),
        pids: (0..cfg.clients).map(|_| AtomicI32::new(0)).collect(),
        hints: Mutex::new(HashMap::new()),
        unexpected: Mutex::new(Vec::new()),
        next_tx: AtomicUsize::new(0),
        kills: AtomicUsize::new(0),
        pauses: AtomicUsize::new(0),
        owners: cfg.owners,
        keys: cfg.keys,
    });
    let root = Rng::new(cfg.seed);
    let mut tasks = Vec::new();
    for me in 0..cfg.clients {
        tasks.push(tokio::spawn(client_loop(
            ctx.clone(),
            me,
            root.fork(me as u64 + 1),
        )));
    }
    tasks.push(tokio::spawn(purger(ctx.clone(), root.fork(1001))));
    tasks.push(tokio::spawn(forcer(ctx.clone(), root.fork(1004))));
    tasks.push(tokio::spawn(killer(ctx.clone(), root.fork(1002))));
    tasks.push(tokio::spawn(pauser(ctx.clone(), root.fork(1003))));
    tasks.push(tokio::spawn(progress(ctx.clone())));
    for t in tasks {
        t.await.expect("workload task panicked");
    }

    let mut run = Run {
        ops: std::mem::take(&mut *ctx.ops.lock().unwrap()),
        txs: std::mem::take(&mut *ctx.txs.lock().unwrap()),
        kills: ctx.kills.load(Ordering::Relaxed),
        pauses: ctx.pauses.load(Ordering::Relaxed),
        elapsed: ctx.start.elapsed(),
        unexpected: std::mem::take(&mut *ctx.unexpected.lock().unwrap()),
        ..Run::default()
    };
    run.base = run.ops.iter().filter_map(|o| o.t0).min().unwrap_or(0);

    // Ask the server how every explicit transaction ended (in batches; a transaction still in
    // progress, whose backend has not finished exiting, is asked again).
    let su = s.connect_super(&db).await;
    let mut status: Vec<Option<String>> = vec![None; run.txs.len()];
    let mut pending: Vec<usize> = (0..run.txs.len()).collect();
    for _ in 0..100 {
        let mut again = Vec::new();
        for chunk in pending.chunks(10_000) {
            let xids: Vec<&str> = chunk.iter().map(|&i| run.txs[i].xid.as_str()).collect();
            let rows = su
                .query(
                    "SELECT pg_xact_status(x::xid8)::text FROM unnest($1::text[]) WITH ORDINALITY AS u(x, n) ORDER BY n",
                    &[&xids],
                )
                .await
                .expect("pg_xact_status");
            for (&i, row) in chunk.iter().zip(rows) {
                status[i] = row.get(0);
                if status[i].as_deref() == Some("in progress") {
                    again.push(i);
                }
            }
        }
        pending = again;
        if pending.is_empty() {
            break;
        }
        tokio::time::sleep(ms(50)).await;
    }
    for (tx, status) in run.txs.iter_mut().zip(status) {
        let server_says = match status.as_deref() {
            Some("committed") => Commit::Committed,
            Some("aborted") => Commit::NotCommitted,
            _ => Commit::Ambiguous,
        };
        match (tx.end, server_says) {
            (Commit::Ambiguous, resolved) => {
                if resolved != Commit::Ambiguous {
                    run.resolved += 1;
                }
                for &id in &tx.ops {
                    run.ops[id].commit = resolved;
                }
                tx.end = resolved;
            }
            (seen, said) if seen != said => run.tx_violations.push(Violation {
                invariant: "I7",
                key: String::new(),
                what: format!(
                    "transaction {} of client {} (xid {}) ended {seen:?} for its client but is {status:?} on the server",
                    tx.id, tx.client, tx.xid
                ),
                ops: tx.ops.clone(),
            }),
            _ => {}
        }
    }
    run.recorded = read_history(&su, cfg.keys).await;
    run
}

/// Every key's `lease.history` (at most [`recorded::MAX_ROWS`] rows), with the server clock read
/// just before and just after it.
async fn read_history(su: &Client, keys: usize) -> Vec<Recorded> {
    let mut out = Vec::with_capacity(keys);
    for k in 0..keys {
        let key = format!("k{k}");
        let rows = su
            .query(
                "SELECT s.t0, h.epoch, h.owner, h.holder_role, h.granted_at, h.expires_at, \
                        h.ended_at, h.ended_by, h.data, clock_timestamp() \
                   FROM (SELECT clock_timestamp() AS t0 OFFSET 0) AS s \
                   LEFT JOIN LATERAL lease.history($1::text || left(s.t0::text, 0), \
                                                   max_rows => $2) AS h ON true",
                &[&key, &recorded::MAX_ROWS],
            )
            .await
            .expect("read lease.history");
        let at = |r: &tokio_postgres::Row, i: usize| r.get::<_, Option<SystemTime>>(i).map(us);
        let t0 = rows.first().and_then(|r| at(r, 0)).expect("t0");
        let t1 = rows.iter().filter_map(|r| at(r, 9)).max().expect("t1");
        let rows = rows
            .iter()
            .filter(|r| r.get::<_, Option<i64>>(1).is_some())
            .map(|r| recorded::Row {
                epoch: r.get(1),
                owner: r.get(2),
                holder_role: r.get(3),
                granted_at: at(r, 4),
                expires_at: at(r, 5),
                ended_at: at(r, 6),
                ended_by: r.get(7),
                data: r.get(8),
            })
            .collect();
        out.push(Recorded { key, t0, t1, rows });
    }
    out
}
