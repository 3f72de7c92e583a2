//! A small isolation tester in the spirit of PostgreSQL's `src/test/isolation`: it runs the
//! permutations of a [`Spec`] (named sessions, each its own connection as the role `app`; named SQL
//! steps; explicit permutations of step names), read from a spec file (the format: `parse.rs`).
//!
//! A spec runs in one of two shared databases ([`Database`]): the one with pg_lease (setup and
//! teardown as `app`), or the one with pg_lease_queue (setup and teardown as the installing role,
//! which alone may create and drop queues).
//!
//! Steps, setup and teardown name the key they work on `'k'` and the queue `'q'`; every run of a
//! permutation replaces `'k'` with a key of its own (`'iso<n>/k'`) and `'q'` with a queue name of
//! its own (`'iso<n>.q'`, also in the literal lease keys `'lease_queue:q:...`), so each run starts
//! from a key and a queue that were never used (a new queue's partitions are first claimed at
//! epoch 1), and transcripts show the SQL as written.
//!
//! Steps run one at a time, in the permutation's order. After starting a step the runner waits until
//! it either completes or is seen *blocked* from a separate observer connection (a superuser):
//!
//! - a heavyweight-lock wait on another session of the spec, by
//!   `pg_isolation_test_session_is_blocked(pid, '{pids}')` (row locks and primary-key waits show up
//!   there);
//! - a blocking acquire's sleep between polls, by `pg_stat_activity.wait_event = 'PgSleep'`.
//!
//! A step seen blocked is checked again 50 ms later, and only a step that is still blocked then (and
//! has not completed) counts as blocked: a wait that ends by itself sooner (lease.renew_many waits at
//! most 10 ms for a row lock, then reports `busy`) belongs to the step.
//!
//! A blocked step is recorded as `<waiting ...>` and the permutation goes on. After every later step,
//! each waiting step (in the order they started) is checked the same way: completed steps are
//! recorded as `<... completed>` with their result, the others keep waiting. Whatever still waits at
//! the end of the permutation is waited for, in the order it started.
//!
//! A lock waiter is woken by the lock manager before the waking step returns, so the check right
//! after that step is exact. A sleeping acquire only re-checks every 50 ms, so the step expected to
//! wake it is named in the permutation, as in PostgreSQL's specs: `s2_acquire(s1_release)`. The
//! runner then waits for `s2_acquire` to complete once `s1_release` has completed (and records it
//! if it completes any earlier, which then shows in the transcript).
//!
//! Steps of *timer* sessions only wait for the server clock (a `pg_sleep` loop, e.g. until a lease
//! has lapsed); they are never reported as waiting, the runner just lets them finish.
//!
//! The transcript reads like PostgreSQL's expected files: `step NAME: SQL`, then for each result set a
//! header line and one line per row (columns joined by `|`, NULL as nothing), or `ERROR: SQLSTATE`.
//! Steps therefore select booleans, epochs and statuses, never timestamps or pids.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use pglease_tests::{ADMIN, APP, SHARED_DB, backend_pid, server};
use tokio::task::JoinHandle;
use tokio_postgres::{Client, SimpleQueryMessage};

/// How long any single step may run (or a woken step may take to finish) before the spec fails.
const STEP_LIMIT: Duration = Duration::from_secs(60);

/// A step seen waiting is reported blocked only if it has neither completed nor stopped waiting this
/// much later (longer than the bounded lock wait of lease.renew_many, 10 ms).
const BRIEF_WAIT: Duration = Duration::from_millis(50);

/// Numbers the runs, for their keys and queues.
static RUNS: AtomicU32 = AtomicU32::new(0);

/// A spec: setup and teardown SQL, sessions with their steps, and the permutations to run (read
/// from a spec file by [`Spec::parse`]).
#[derive(Debug, Default)]
pub struct Spec {
    /// The shared database the spec runs in.
    pub database: Database,
    /// SQL run (as the database's setup role) before each permutation's sessions connect (not in
    /// the transcript).
    pub setup: Vec<String>,
    /// SQL run (as the database's setup role) after each permutation's steps have all completed
    /// (not in the transcript).
    pub teardown: Vec<String>,
    /// The sessions, in the order they were defined.
    pub sessions: Vec<SessionDef>,
    /// The permutations, in the order they were defined.
    pub permutations: Vec<Permutation>,
}

/// The shared database a spec runs in (`database NAME` in the spec file).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Database {
    /// The shared database with pg_lease; setup and teardown run as `app`.
    #[default]
    Lease,
    /// The shared database with pg_lease_queue (and pg_lease), created by the installing role;
    /// setup and teardown run as that role, which alone may create and drop queues.
    Queue,
}

impl Database {
    /// The database's name (the queue database is created on first use) and the role that runs
    /// setup and teardown there.
    fn name_and_setup_role(self) -> (&'static str, &'static str) {
        match self {
            Database::Lease => (SHARED_DB, APP),
            Database::Queue => (server().queue_db(), ADMIN),
        }
    }
}

/// A session: its own connection as `app`, and its steps.
#[derive(Debug)]
pub struct SessionDef {
    /// The session's name.
    pub name: String,
    /// Whether a `pg_sleep` in this session's steps counts as waiting (false for timer sessions).
    pub sleep_is_waiting: bool,
    /// `(step name, SQL)`, the SQL with its whitespace collapsed.
    pub steps: Vec<(String, String)>,
}

/// A named order of steps.
#[derive(Debug)]
pub struct Permutation {
    /// The permutation's name (the property its transcript shows).
    pub name: String,
    /// The steps, in order.
    pub steps: Vec<StepRef>,
}

/// A step of a permutation, and the step expected to wake it, if it blocks.
#[derive(Debug)]
pub struct StepRef {
    /// The step's name.
    pub name: String,
    /// The step after which this one is expected to complete (`STEP(WAKER)` in the spec).
    pub woken_by: Option<String>,
}

type StepResult = Result<Vec<SimpleQueryMessage>, tokio_postgres::Error>;

/// A session of a running permutation.
struct Live {
    client: Arc<Client>,
    pid: i32,
    sleep_is_waiting: bool,
}

/// A step that was seen blocked and has not completed yet.
struct Waiting {
    step: String,
    session: usize,
    /// The step after which this one is expected to complete (the permutation's annotation).
    woken_by: Option<String>,
    /// Whether `woken_by` has completed: the runner then waits for this step to complete.
    due: bool,
    handle: JoinHandle<StepResult>,
}

impl Spec {
    /// Runs every permutation in order and returns the output an expected file holds: for each, a
    /// line `permutation NAME: STEP...` and its transcript, with a blank line between them.
    pub async fn run(&self) -> String {
        let mut out = String::new();
        for (i, p) in self.permutations.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            let steps: Vec<String> = p
                .steps
                .iter()
                .map(|s| match &s.woken_by {
                    Some(w) => format!("{}({w})", s.name),
                    None => s.name.clone(),
                })
                .collect();
            let header = format!("permutation {}: {}", p.name, steps.join(" "));
            // Shown with a failing test's output: which permutation was running.
            println!("{header}");
            writeln!(out, "{header}").unwrap();
            out.push_str(&self.run_permutation(p).await);
        }
        out
    }

    /// Runs one permutation on a key and a queue of its own and returns its transcript.
    async fn run_permutation(&self, permutation: &Permutation) -> String {
        let run_no = RUNS.fetch_add(1, Ordering::Relaxed);
        let key = format!("'iso{run_no}/k'");
        let queue = format!("iso{run_no}.q");
        let (queue_literal, lease_keys) = (format!("'{queue}'"), format!("'lease_queue:{queue}:"));
        let own_key = |sql: &str| {
            sql.replace("'k'", &key)
                .replace("'q'", &queue_literal)
                .replace("'lease_queue:q:", &lease_keys)
        };
        let steps: HashMap<&str, (usize, &str)> = self
            .sessions
            .iter()
            .enumerate()
            .flat_map(|(i, s)| {
                s.steps
                    .iter()
                    .map(move |(n, sql)| (n.as_str(), (i, sql.as_str())))
            })
            .collect();

        let srv = server();
        let (db, setup_role) = self.database.name_and_setup_role();
        if !self.setup.is_empty() {
            let c = srv.connect_as(db, setup_role).await;
            let setup = own_key(&self.setup.join(";\n"));
            c.batch_execute(&setup).await.expect("spec setup");
        }
        let mut run = Run {
            observer: srv.connect_super("postgres").await,
            sessions: Vec::new(),
            pids: Vec::new(),
            waiting: Vec::new(),
            transcript: String::new(),
        };
        for def in &self.sessions {
            let client = srv.connect_as(db, APP).await;
            let pid = backend_pid(&client).await;
            run.pids.push(pid);
            run.sessions.push(Live {
                client: Arc::new(client),
                pid,
                sleep_is_waiting: def.sleep_is_waiting,
            });
        }

        for entry in &permutation.steps {
            let name = entry.name.as_str();
            let &(session, sql) = steps
                .get(name)
                .unwrap_or_else(|| panic!("permutation names an unknown step {name:?}"));
            if let Some(w) = run.waiting.iter().find(|w| w.session == session) {
                panic!(
                    "permutation {}: step {name} runs in session {} while its step {} still \
                     waits\n{}",
                    permutation.name, self.sessions[session].name, w.step, run.transcript
                );
            }
            run.start(name, session, sql, &own_key(sql), entry.woken_by.clone())
                .await;
            run.after_step().await;
        }
        while !run.waiting.is_empty() {
            let mut w = run.waiting.remove(0);
            let result = run.finish(&w.step, &mut w.handle).await;
            run.completed(&w.step, Some(result));
        }
        if !self.teardown.is_empty() {
            let c = srv.connect_as(db, setup_role).await;
            let teardown = own_key(&self.teardown.join(";\n"));
            c.batch_execute(&teardown).await.expect("spec teardown");
        }
        run.transcript
    }
}

struct Run {
    observer: Client,
    sessions: Vec<Live>,
    pids: Vec<i32>,
    waiting: Vec<Waiting>,
    transcript: String,
}

impl Run {
    /// Starts a step (`sql` as written, `run` as executed) and records it: with its result if it
    /// completes, as waiting if it blocks.
    async fn start(
        &mut self,
        name: &str,
        session: usize,
        sql: &str,
        run: &str,
        woken_by: Option<String>,
    ) {
        write!(self.transcript, "step {name}: {sql}").unwrap();
        let client = Arc::clone(&self.sessions[session].client);
        let sql = run.to_owned();
        let mut handle = tokio::spawn(async move { client.simple_query(&sql).await });
        match self.settle(name, session, &mut handle).await {
            Some(result) => {
                self.transcript.push('\n');
                render(&mut self.transcript, result);
                self.completed(name, None);
            }
            None => {
                self.transcript.push_str(" <waiting ...>\n");
                self.waiting.push(Waiting {
                    step: name.to_owned(),
                    session,
                    woken_by,
                    due: false,
                    handle,
                });
            }
        }
    }

    /// After a step: records the waiting steps that have completed since, in the order they started.
    /// A step whose annotated waker has completed is waited for; the others are settled.
    async fn after_step(&mut self) {
        let mut i = 0;
        while i < self.waiting.len() {
            let mut w = self.waiting.remove(i);
            let result = if w.due {
                Some(self.finish(&w.step, &mut w.handle).await)
            } else {
                self.settle(&w.step, w.session, &mut w.handle).await
            };
            match result {
                Some(result) => self.completed(&w.step, Some(result)),
                None => {
                    self.waiting.insert(i, w);
                    i += 1;
                }
            }
        }
    }

    /// Records that `step` completed (`result`: it had been waiting) and marks the steps it wakes.
    fn completed(&mut self, step: &str, result: Option<StepResult>) {
        if let Some(result) = result {
            writeln!(self.transcript, "step {step}: <... completed>").unwrap();
            render(&mut self.transcript, result);
        }
        for w in &mut self.waiting {
            w.due |= w.woken_by.as_deref() == Some(step);
        }
    }

    /// Waits until the step completes (its result) or is seen blocked (`None`).
    async fn settle(
        &self,
        step: &str,
        session: usize,
        handle: &mut JoinHandle<StepResult>,
    ) -> Option<StepResult> {
        let deadline = Instant::now() + STEP_LIMIT;
        loop {
            if let Ok(joined) = tokio::time::timeout(Duration::from_millis(5), &mut *handle).await {
                return Some(joined.expect("step task"));
            }
            if self.is_blocked(&self.sessions[session]).await {
                // Seen blocked: blocked it is if it still is a moment later. A wait that ends by
                // itself within that moment (lease.renew_many waits at most 10 ms for a row lock,
                // then reports the key `busy`) is part of the step, not a block.
                if let Ok(joined) = tokio::time::timeout(BRIEF_WAIT, &mut *handle).await {
                    return Some(joined.expect("step task"));
                }
                if self.is_blocked(&self.sessions[session]).await {
                    return None;
                }
            }
            assert!(
                Instant::now() < deadline,
                "step {step} neither completed nor blocked within {STEP_LIMIT:?}\n{}",
                self.transcript
            );
        }
    }

    /// Waits for a step to complete.
    async fn finish(&self, step: &str, handle: &mut JoinHandle<StepResult>) -> StepResult {
        match tokio::time::timeout(STEP_LIMIT, handle).await {
            Ok(joined) => joined.expect("step task"),
            Err(_) => panic!(
                "step {step} did not complete within {STEP_LIMIT:?}\n{}",
                self.transcript
            ),
        }
    }

    /// Whether the session's backend waits for a lock held by another session of the spec, or (unless
    /// it is a timer session) sleeps in a blocking acquire's poll loop.
    async fn is_blocked(&self, s: &Live) -> bool {
        self.observer
            .query_one(
                "SELECT pg_catalog.pg_isolation_test_session_is_blocked($1, $2)
                     OR ($3 AND EXISTS (SELECT FROM pg_catalog.pg_stat_activity
                                         WHERE pid = $1 AND wait_event = 'PgSleep'))",
                &[&s.pid, &self.pids, &s.sleep_is_waiting],
            )
            .await
            .expect("observe the session")
            .get(0)
    }
}

/// Appends a step's result: per result set a header and its rows, or the error's SQLSTATE.
fn render(out: &mut String, result: StepResult) {
    match result {
        Ok(messages) => {
            for m in messages {
                match m {
                    SimpleQueryMessage::RowDescription(columns) => {
                        let names: Vec<&str> = columns.iter().map(|c| c.name()).collect();
                        writeln!(out, "{}", names.join("|")).unwrap();
                    }
                    SimpleQueryMessage::Row(row) => {
                        let values: Vec<&str> =
                            (0..row.len()).map(|i| row.get(i).unwrap_or("")).collect();
                        writeln!(out, "{}", values.join("|")).unwrap();
                    }
                    _ => {}
                }
            }
        }
        Err(e) => match e.code() {
            Some(code) => writeln!(out, "ERROR: {}", code.code()).unwrap(),
            None => panic!("step failed without a server error: {e}"),
        },
    }
}
