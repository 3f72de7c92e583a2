//! Regression suite of pg_lease_queue (schema `lease_queue`): every public function and every
//! SQLSTATE of its contract (the comments in extensions/pg_lease_queue/sql/pg_lease_queue.sql,
//! docs/SQLSTATES.md), one file per concept.
//!
//! Tests run in the shared queue database ([`pglease_tests::QUEUE_DB`]), each on queues of its own
//! names (derived from the test's name), as the application role `app`; queues are created and
//! dropped by the installing role; the superuser only reads the internal tables for "nothing
//! changed" checks. SQLSTATEs are asserted by code, never by message text.

mod ack;
mod claim;
mod dead_letters;
mod fencing;
mod hot_path;
mod indexes;
mod invalid_input;
mod lifecycle;
mod nack;
mod notify;
mod ordering;
mod plans;
mod privileges;
mod receive;
mod release;
mod send;
mod status;

use std::time::{Duration, Instant, SystemTime};

use pglease_tests::{ADMIN, APP, ServerError, server};
use tokio_postgres::{Client, Row};

/// A lease ttl long enough never to lapse during a test.
pub const LONG: &str = "1 hour";

/// How long a wait for the server clock may take before the test fails.
const CLOCK_LIMIT: Duration = Duration::from_secs(30);

/// A test's queue and its connections: `app` (the application role), `admin` (the installing role,
/// who creates and drops queues) and `su` (the superuser, for reading the internal tables).
pub struct Fixture {
    pub q: String,
    pub app: Client,
    pub admin: Client,
    pub su: Client,
}

impl Fixture {
    /// A new queue named `name` (which must be unique to the test) in the shared queue database.
    pub async fn new(name: &str, partitions: i32, max_attempts: i32) -> Fixture {
        let f = Fixture::connect(name).await;
        create_queue(&f.admin, name, partitions, max_attempts).await;
        f
    }

    /// The connections, without creating the queue.
    pub async fn connect(name: &str) -> Fixture {
        assert!(
            (1..=128).contains(&name.len())
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b)),
            "{name:?} is not a valid queue name"
        );
        let s = server();
        let db = s.queue_db();
        Fixture {
            q: name.to_owned(),
            app: s.connect_as(db, APP).await,
            admin: s.connect_as(db, ADMIN).await,
            su: s.connect_super(db).await,
        }
    }

    /// Another connection as the application role.
    pub async fn another_app(&self) -> Client {
        let s = server();
        s.connect_as(s.queue_db(), APP).await
    }

    /// The pg_lease key of partition `p`.
    pub fn lease_key(&self, p: i32) -> String {
        format!("lease_queue:{}:{p}", self.q)
    }

    /// Claims partition `p` for `owner` with a long ttl; it must be granted. Returns the epoch.
    pub async fn claim(&self, p: i32, owner: &str) -> i64 {
        let c = claim(&self.app, &self.q, p, owner, LONG).await;
        assert!(
            c.claimed,
            "{owner} should have claimed {}:{p}: {c:?}",
            self.q
        );
        c.epoch.expect("a claim has an epoch")
    }

    /// Sends an unkeyed or keyed message whose payload is the JSON string `label`.
    pub async fn send(&self, key: Option<&str>, label: &str) -> i64 {
        send(&self.app, &self.q, key, label, "0").await
    }

    /// receive on partition `p` as the application role; must not fail.
    pub async fn receive(&self, p: i32, owner: &str, epoch: i64, max: i32) -> Vec<Delivery> {
        receive(&self.app, &self.q, p, owner, epoch, max).await
    }

    /// ack as the application role; must not fail.
    pub async fn ack(&self, p: i32, owner: &str, epoch: i64, batch: i64) {
        ack(&self.app, &self.q, p, owner, epoch, batch).await
    }

    /// Everything about the queue, as text, for "nothing changed" checks.
    pub async fn snapshot(&self) -> String {
        snapshot(&self.su, &self.q).await
    }
}

/// A flattened server error (SQLSTATE, message, DETAIL) from a failed call.
pub fn server_error(e: tokio_postgres::Error) -> ServerError {
    let db = e
        .as_db_error()
        .unwrap_or_else(|| panic!("expected a server error, got: {e}"));
    ServerError {
        code: db.code().code().to_owned(),
        message: db.message().to_owned(),
        detail: db.detail().map(str::to_owned),
    }
}

/// The SQLSTATE of a call that must fail.
pub fn code<T: std::fmt::Debug>(r: Result<T, ServerError>) -> String {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.code,
    }
}

// ------------------------------------------------------------------------------------------------
// The API, called as an application would
// ------------------------------------------------------------------------------------------------

/// `lease_queue.create_queue`; must not fail.
pub async fn create_queue(c: &Client, q: &str, partitions: i32, max_attempts: i32) {
    c.execute(
        "SELECT lease_queue.create_queue($1, $2, $3)",
        &[&q, &partitions, &max_attempts],
    )
    .await
    .unwrap_or_else(|e| panic!("create_queue({q}, {partitions}, {max_attempts}): {e}"));
    grant_to_app(c, q).await;
}

/// Grants the application role both privileges on `q` (a new queue is its creator's only).
pub async fn grant_to_app(c: &Client, q: &str) {
    c.batch_execute(&format!(
        "SELECT lease_queue.grant_queue('{q}', '{APP}', 'produce'), \
                lease_queue.grant_queue('{q}', '{APP}', 'consume')"
    ))
    .await
    .unwrap_or_else(|e| panic!("grant_queue({q}, {APP}): {e}"));
}

/// `lease_queue.drop_queue`; the server's error, if any.
pub async fn try_drop_queue(c: &Client, q: &str) -> Result<(), ServerError> {
    c.execute("SELECT lease_queue.drop_queue($1)", &[&q])
        .await
        .map(|_| ())
        .map_err(server_error)
}

/// `lease_queue.send(queue, key, to_jsonb(label), delay)`; returns the id.
pub async fn try_send(
    c: &Client,
    q: &str,
    key: Option<&str>,
    label: &str,
    delay: &str,
) -> Result<i64, ServerError> {
    c.query_one(
        "SELECT lease_queue.send($1, $2, to_jsonb($3::text), $4::text::interval)",
        &[&q, &key, &label, &delay],
    )
    .await
    .map(|r| r.get(0))
    .map_err(server_error)
}

/// `lease_queue.send`; must not fail.
pub async fn send(c: &Client, q: &str, key: Option<&str>, label: &str, delay: &str) -> i64 {
    try_send(c, q, key, label, delay)
        .await
        .unwrap_or_else(|e| panic!("send({q}, {key:?}, {label}, {delay}): {e:?}"))
}

/// `lease_queue.send_batch(queue, keys, payloads)` with payloads the JSON strings `labels`.
pub async fn send_batch(c: &Client, q: &str, keys: &[Option<&str>], labels: &[&str]) -> Vec<i64> {
    c.query(
        "SELECT id FROM lease_queue.send_batch($1, $2, \
           ARRAY(SELECT to_jsonb(l) FROM unnest($3::text[]) WITH ORDINALITY AS u(l, i) ORDER BY i)) \
           AS id",
        &[&q, &keys, &labels],
    )
    .await
    .unwrap_or_else(|e| panic!("send_batch({q}, {keys:?}): {e}"))
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// The result of `lease_queue.claim`.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    pub claimed: bool,
    pub epoch: Option<i64>,
    pub expires_at: Option<SystemTime>,
}

/// `lease_queue.claim`; the server's error, if any.
pub async fn try_claim(
    c: &Client,
    q: &str,
    p: i32,
    owner: &str,
    ttl: &str,
) -> Result<Claim, ServerError> {
    c.query_one(
        "SELECT claimed, epoch, expires_at FROM lease_queue.claim($1, $2, $3, $4::text::interval)",
        &[&q, &p, &owner, &ttl],
    )
    .await
    .map(|r| Claim {
        claimed: r.get(0),
        epoch: r.get(1),
        expires_at: r.get(2),
    })
    .map_err(server_error)
}

/// `lease_queue.claim`; must not fail.
pub async fn claim(c: &Client, q: &str, p: i32, owner: &str, ttl: &str) -> Claim {
    try_claim(c, q, p, owner, ttl)
        .await
        .unwrap_or_else(|e| panic!("claim({q}, {p}, {owner}, {ttl}): {e:?}"))
}

/// The result of `lease_queue.claim_any`.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimAny {
    pub claimed: bool,
    pub partition: Option<i32>,
    pub epoch: Option<i64>,
    pub expires_at: Option<SystemTime>,
}

/// `lease_queue.claim_any`; must not fail.
pub async fn claim_any(c: &Client, q: &str, owner: &str, ttl: &str) -> ClaimAny {
    let r = c
        .query_one(
            "SELECT claimed, partition, epoch, expires_at \
               FROM lease_queue.claim_any($1, $2, $3::text::interval)",
            &[&q, &owner, &ttl],
        )
        .await
        .unwrap_or_else(|e| panic!("claim_any({q}, {owner}, {ttl}): {e}"));
    ClaimAny {
        claimed: r.get(0),
        partition: r.get(1),
        epoch: r.get(2),
        expires_at: r.get(3),
    }
}

/// One row of `lease_queue.receive`; `label` is the payload's JSON string.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    pub batch_id: i64,
    pub id: i64,
    pub key: Option<String>,
    pub label: String,
    pub attempts: i32,
    pub enqueued_at: SystemTime,
}

pub fn delivery_of(r: &Row) -> Delivery {
    Delivery {
        batch_id: r.get(0),
        id: r.get(1),
        key: r.get(2),
        label: r.get(3),
        attempts: r.get(4),
        enqueued_at: r.get(5),
    }
}

/// `lease_queue.receive`; the server's error, if any.
pub async fn try_receive(
    c: &Client,
    q: &str,
    p: i32,
    owner: &str,
    epoch: i64,
    max: i32,
) -> Result<Vec<Delivery>, ServerError> {
    c.query(
        "SELECT batch_id, id, key, payload #>> '{}', attempts, enqueued_at \
           FROM lease_queue.receive($1, $2, $3, $4, $5)",
        &[&q, &p, &owner, &epoch, &max],
    )
    .await
    .map(|rows| rows.iter().map(delivery_of).collect())
    .map_err(server_error)
}

/// `lease_queue.receive`; must not fail.
pub async fn receive(
    c: &Client,
    q: &str,
    p: i32,
    owner: &str,
    epoch: i64,
    max: i32,
) -> Vec<Delivery> {
    try_receive(c, q, p, owner, epoch, max)
        .await
        .unwrap_or_else(|e| panic!("receive({q}, {p}, {owner}, {epoch}, {max}): {e:?}"))
}

/// The labels of a batch, in delivery order.
pub fn labels(batch: &[Delivery]) -> Vec<&str> {
    batch.iter().map(|d| d.label.as_str()).collect()
}

/// The labels of a batch, sorted (for batches mixing keys, whose relative order is not asserted).
pub fn sorted_labels(batch: &[Delivery]) -> Vec<String> {
    let mut l: Vec<String> = batch.iter().map(|d| d.label.clone()).collect();
    l.sort();
    l
}

/// The one batch id of a non-empty batch.
pub fn batch_id(batch: &[Delivery]) -> i64 {
    let id = batch.first().expect("a non-empty batch").batch_id;
    assert!(batch.iter().all(|d| d.batch_id == id), "one batch id");
    id
}

/// `lease_queue.ack`; the server's error, if any.
pub async fn try_ack(
    c: &Client,
    q: &str,
    p: i32,
    owner: &str,
    epoch: i64,
    batch: i64,
) -> Result<(), ServerError> {
    c.execute(
        "SELECT lease_queue.ack($1, $2, $3, $4, $5)",
        &[&q, &p, &owner, &epoch, &batch],
    )
    .await
    .map(|_| ())
    .map_err(server_error)
}

/// `lease_queue.ack`; must not fail.
pub async fn ack(c: &Client, q: &str, p: i32, owner: &str, epoch: i64, batch: i64) {
    try_ack(c, q, p, owner, epoch, batch)
        .await
        .unwrap_or_else(|e| panic!("ack({q}, {p}, {owner}, {epoch}, {batch}): {e:?}"))
}

/// The arguments of a nack that identify the batch: (queue, partition, owner, epoch, batch_id).
pub type BatchRef<'a> = (&'a str, i32, &'a str, i64, i64);

/// `lease_queue.nack(..., id, retry_after, reason)`; the server's error, if any.
pub async fn try_nack(
    c: &Client,
    b: BatchRef<'_>,
    id: i64,
    retry_after: &str,
    reason: Option<&str>,
) -> Result<String, ServerError> {
    let (q, p, owner, epoch, batch) = b;
    c.query_one(
        "SELECT lease_queue.nack($1, $2, $3, $4, $5, $6, $7::text::interval, $8)",
        &[&q, &p, &owner, &epoch, &batch, &id, &retry_after, &reason],
    )
    .await
    .map(|r| r.get(0))
    .map_err(server_error)
}

/// `lease_queue.nack`; must not fail.
pub async fn nack(
    c: &Client,
    b: BatchRef<'_>,
    id: i64,
    retry_after: &str,
    reason: Option<&str>,
) -> String {
    try_nack(c, b, id, retry_after, reason)
        .await
        .unwrap_or_else(|e| panic!("nack({b:?}, {id}, {retry_after}): {e:?}"))
}

/// `lease_queue.release`; the server's error, if any.
pub async fn try_release(
    c: &Client,
    q: &str,
    p: i32,
    owner: &str,
    epoch: i64,
    force: bool,
) -> Result<i32, ServerError> {
    c.query_one(
        "SELECT lease_queue.release($1, $2, $3, $4, $5)",
        &[&q, &p, &owner, &epoch, &force],
    )
    .await
    .map(|r| r.get(0))
    .map_err(server_error)
}

/// `lease_queue.redrive`; the server's error, if any.
pub async fn try_redrive(c: &Client, q: &str, key: Option<&str>) -> Result<i64, ServerError> {
    c.query_one("SELECT lease_queue.redrive($1, $2)", &[&q, &key])
        .await
        .map(|r| r.get(0))
        .map_err(server_error)
}

/// One row of `lease_queue.list_dead_letters`.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetter {
    pub id: i64,
    pub partition: i32,
    pub key: Option<String>,
    pub label: String,
    pub attempts: i32,
    pub reason: Option<String>,
    pub epoch: Option<i64>,
    pub batch_id: Option<i64>,
}

/// `lease_queue.list_dead_letters(queue)`, oldest death first.
pub async fn dead_letters(c: &Client, q: &str) -> Vec<DeadLetter> {
    c.query(
        "SELECT id, partition, key, payload #>> '{}', attempts, reason, epoch, batch_id \
           FROM lease_queue.list_dead_letters($1)",
        &[&q],
    )
    .await
    .unwrap_or_else(|e| panic!("list_dead_letters({q}): {e}"))
    .iter()
    .map(|r| DeadLetter {
        id: r.get(0),
        partition: r.get(1),
        key: r.get(2),
        label: r.get(3),
        attempts: r.get(4),
        reason: r.get(5),
        epoch: r.get(6),
        batch_id: r.get(7),
    })
    .collect()
}

/// One row of `lease_queue.status`.
#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    pub partition: i32,
    pub owner: Option<String>,
    pub epoch: Option<i64>,
    pub expires_at: Option<SystemTime>,
    pub batch_id: Option<i64>,
    pub batch_epoch: Option<i64>,
    pub batch_size: i64,
    pub batch_opened_at: Option<SystemTime>,
    pub backlog: i64,
    pub oldest_enqueued_at: Option<SystemTime>,
    pub held_back_keys: i64,
    pub dead_letters: i64,
    pub acked: i64,
}

/// `lease_queue.status(queue)`: one row per partition.
pub async fn status(c: &Client, q: &str) -> Vec<Status> {
    c.query(
        "SELECT queue_name, partition, owner, epoch, expires_at, batch_id, batch_epoch, batch_size, \
                batch_opened_at, backlog, oldest_enqueued_at, held_back_keys, dead_letters, acked \
           FROM lease_queue.status($1)",
        &[&q],
    )
    .await
    .unwrap_or_else(|e| panic!("status({q}): {e}"))
    .iter()
    .map(|r| {
        assert_eq!(r.get::<_, String>(0), q);
        Status {
            partition: r.get(1),
            owner: r.get(2),
            epoch: r.get(3),
            expires_at: r.get(4),
            batch_id: r.get(5),
            batch_epoch: r.get(6),
            batch_size: r.get(7),
            batch_opened_at: r.get(8),
            backlog: r.get(9),
            oldest_enqueued_at: r.get(10),
            held_back_keys: r.get(11),
            dead_letters: r.get(12),
            acked: r.get(13),
        }
    })
    .collect()
}

// ------------------------------------------------------------------------------------------------
// Observing the state (the superuser reads the internal tables)
// ------------------------------------------------------------------------------------------------

/// Every row that belongs to queue `q`, every column, as text: its queue row, partitions, messages,
/// key rows and dead letters, and its partitions' lease rows in `lease.leases`. (The sequences are
/// left out: a refused call may have consumed a value, which nothing can observe.)
pub async fn snapshot(su: &Client, q: &str) -> String {
    let rows = su
        .query(
            "WITH qq AS (SELECT qid FROM lease_queue.queues WHERE name = $1)
             SELECT 'queue ' || t::text FROM lease_queue.queues AS t WHERE t.name = $1
             UNION ALL SELECT 'partition ' || t::text FROM lease_queue.partitions AS t
                        WHERE t.qid IN (SELECT qid FROM qq)
             UNION ALL SELECT 'message ' || t::text FROM lease_queue.messages AS t
                        WHERE t.qid IN (SELECT qid FROM qq)
             UNION ALL SELECT 'key ' || t::text FROM lease_queue.keys AS t
                        WHERE t.qid IN (SELECT qid FROM qq)
             UNION ALL SELECT 'dead ' || t::text FROM lease_queue.dead_letters AS t
                        WHERE t.qid IN (SELECT qid FROM qq)
             UNION ALL SELECT 'lease ' || t::text FROM lease.leases AS t
                        WHERE starts_with(t.key, 'lease_queue:' || $1 || ':')
             ORDER BY 1",
            &[&q],
        )
        .await
        .expect("read the queue's state");
    rows.iter().map(|r| r.get::<_, String>(0) + "\n").collect()
}

/// The superuser's view of one message row (`lease_queue.messages`), for white-box checks of what
/// the API reports: (partition, attempts, deliver_at).
pub async fn message_row(su: &Client, id: i64) -> Option<(i32, i32, SystemTime)> {
    su.query_opt(
        "SELECT partition, attempts, deliver_at FROM lease_queue.messages WHERE id = $1",
        &[&id],
    )
    .await
    .expect("read lease_queue.messages")
    .map(|r| (r.get(0), r.get(1), r.get(2)))
}

/// Waits until the server clock has reached `t` (polling the server, which reads its clock anew in
/// each statement).
pub async fn await_server_clock(c: &Client, t: SystemTime) {
    let deadline = Instant::now() + CLOCK_LIMIT;
    while !pglease_tests::lapse::server_clock_reached(c, t).await {
        assert!(
            Instant::now() < deadline,
            "the server clock never reached {t:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Makes the lease of partition `p` lapse: its holder renews it (through pg_lease, which the queue
/// does not see) to a very short ttl, then the server is polled until it reports the lease lapsed.
pub async fn lapse_partition(f: &Fixture, p: i32, owner: &str, epoch: i64) {
    let key = f.lease_key(p);
    let (status, _) =
        pglease_tests::calls::renew(&f.app, &key, owner, epoch, "1 millisecond").await;
    assert_eq!(status, "ok", "{owner} holds {key} at {epoch}");
    pglease_tests::lapse::await_lapsed(&f.app, &key).await;
}

/// The partition (by `lease_queue.partition_of`'s definition, computed here independently) of `key`
/// in a queue of `partitions` partitions: the first 8 bytes of MD5(key), big-endian, mod partitions.
pub fn partition_of(key: &str, partitions: u64) -> i32 {
    let d = md5(key.as_bytes());
    let h = u64::from_be_bytes(d[..8].try_into().expect("8 bytes"));
    i32::try_from(h % partitions).expect("a partition fits in i32")
}

/// A key of `prefix` whose partition in a queue of `partitions` partitions is `p`.
pub fn key_in(prefix: &str, p: i32, partitions: u64) -> String {
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .find(|k| partition_of(k, partitions) == p)
        .expect("some key falls into every partition")
}

/// MD5 (RFC 1321), small and slow: for computing partitions in tests without the server.
pub fn md5(input: &[u8]) -> [u8; 16] {
    const S: [u32; 64] = [
        7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 5, 9, 14, 20, 5, 9, 14, 20, 5,
        9, 14, 20, 5, 9, 14, 20, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 6, 10,
        15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
    ];
    // K[i] = floor(abs(sin(i + 1)) * 2^32).
    let k: Vec<u32> = (0..64)
        .map(|i| ((f64::from(i + 1)).sin().abs() * 4_294_967_296.0) as u32)
        .collect();
    let mut msg = input.to_vec();
    let bit_len = (input.len() as u64).wrapping_mul(8);
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bit_len.to_le_bytes());
    let (mut a0, mut b0, mut c0, mut d0) = (
        0x6745_2301_u32,
        0xefcd_ab89_u32,
        0x98ba_dcfe_u32,
        0x1032_5476_u32,
    );
    for chunk in msg.chunks(64) {
        let m: Vec<u32> = chunk
            .chunks(4)
            .map(|w| u32::from_le_bytes(w.try_into().expect("4 bytes")))
            .collect();
        let (mut a, mut b, mut c, mut d) = (a0, b0, c0, d0);
        for i in 0..64 {
            let (f, g) = match i / 16 {
                0 => ((b & c) | (!b & d), i),
                1 => ((d & b) | (!d & c), (5 * i + 1) % 16),
                2 => (b ^ c ^ d, (3 * i + 5) % 16),
                _ => (c ^ (b | !d), (7 * i) % 16),
            };
            let f = f.wrapping_add(a).wrapping_add(k[i]).wrapping_add(m[g]);
            a = d;
            d = c;
            c = b;
            b = b.wrapping_add(f.rotate_left(S[i]));
        }
        a0 = a0.wrapping_add(a);
        b0 = b0.wrapping_add(b);
        c0 = c0.wrapping_add(c);
        d0 = d0.wrapping_add(d);
    }
    let mut out = [0u8; 16];
    for (i, w) in [a0, b0, c0, d0].iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
    }
    out
}

/// Lowercase hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
