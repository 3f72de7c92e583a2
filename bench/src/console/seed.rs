//! The data the console is measured on, made through the extensions' own calls (as applications
//! make it): 100 000 rows in `lease.leases` and 1 000 000 queued messages.
//!
//! - jobs `tenant-TT/job-NNNNNN` (20 tenants): 8 in 10 held for a day with data, 1 in 10 lapsed
//!   (granted for 1 s), 1 in 10 released; owners `worker-0` .. `worker-199` spread over every
//!   tenant, so an owner filter reads about 12 500 keys for a page of 50; one of them,
//!   [`DETAIL_KEY`], granted and released 60 times before, has a history longer than a page;
//! - 20 semaphores `pool-NN` with 50 slots each held (`pool-NN#1` .. `pool-NN#50`);
//! - the election [`ELECTION`], held by `node-a`;
//! - queue [`QUEUE`]: 8 partitions (their 8 lease keys), max_attempts 3, 1 000 000 messages on
//!   1 000 keys `customer-NNNN` (2 producers on disjoint keys, send_batch of 50 000, 10 times each), 300 dead letters (poison
//!   messages nacked 3 times), and partition 3 claimed by `consumer-3` with an open batch of 100.
//!
//! The job count makes the total exactly [`LEASES`]. Then VACUUM (ANALYZE) and CHECKPOINT.

use std::time::{Duration, Instant};

use serde::Serialize;
use tokio_postgres::Client;

use crate::server::Db;
use crate::stats::round1;
use crate::{BoxResult, err};

/// Rows of `lease.leases` after seeding.
pub const LEASES: i64 = 100_000;
/// Messages queued after seeding (the open batch's included).
pub const MESSAGES: i64 = 1_000_000;
pub const QUEUE: &str = "orders";
pub const PARTITIONS: i32 = 8;
pub const MESSAGE_KEYS: i64 = 1_000;
pub const SEMAPHORES: i64 = 20;
pub const SLOTS: i64 = 50;
pub const DEAD_LETTERS: i64 = 300;
pub const MAX_ATTEMPTS: i32 = 3;
pub const OPEN_BATCH: i32 = 100;
pub const OPEN_PARTITION: i32 = 3;
pub const ELECTION: &str = "leader/scheduler";
pub const ELECTION_OWNER: &str = "node-a";
/// A held job whose history has more grants than a page shows.
pub const DETAIL_KEY: &str = "tenant-07/job-000007";
/// Grants of [`DETAIL_KEY`] made (and released) before the seeding's own.
const DETAIL_GRANTS: i32 = 60;
/// The tenant prefix the prefix filter uses (5 % of the jobs).
pub const PREFIX: &str = "tenant-07/";
/// The key the middle page starts after (half of the keys sort before it).
pub const MIDDLE_AFTER: &str = "tenant-10/";
/// An owner holding about 400 keys spread over every tenant.
pub const OWNER: &str = "worker-3";

/// What was seeded, as counted afterwards.
#[derive(Clone, Debug, Serialize)]
pub struct Seeded {
    pub leases: i64,
    pub held: i64,
    pub lapsed: i64,
    pub free: i64,
    pub waiting: i64,
    pub semaphore_slots: i64,
    pub history_rows: i64,
    pub messages: i64,
    pub message_keys: i64,
    pub dead_letters: i64,
    pub open_batch: i64,
    pub lease_queue_version: String,
    pub pg_lease_version: String,
    pub seconds: f64,
    pub leases_bytes: i64,
    pub history_bytes: i64,
    pub messages_bytes: i64,
}

fn jobs() -> i64 {
    LEASES - i64::from(PARTITIONS) - SEMAPHORES * SLOTS - 1
}

pub async fn seed(db: &Db) -> BoxResult<Seeded> {
    let t0 = Instant::now();
    let c = db.connect(false).await?;
    let su = db
        .connect_superuser()
        .await?
        .ok_or_else(|| err("the console section needs a superuser (VACUUM, table sizes)"))?;
    let any: i64 = c
        .query_one("SELECT count(*) FROM lease.list(NULL)", &[])
        .await?
        .get(0);
    if any > 0 {
        return Err(err(format!(
            "the console section seeds an empty database: this one has {any} keys already"
        )));
    }

    eprintln!("  queue {QUEUE}: {DEAD_LETTERS} poison messages, nacked until dead-lettered");
    c.execute(
        "SELECT lease_queue.create_queue($1, $2, $3)",
        &[&QUEUE, &PARTITIONS, &MAX_ATTEMPTS],
    )
    .await?;
    c.execute(
        "SELECT count(*) FROM lease_queue.send_batch($1,
                ARRAY(SELECT 'poison-' || g FROM generate_series(1, $2::bigint) AS g),
                ARRAY(SELECT jsonb_build_object('poison', g) FROM generate_series(1, $2::bigint) AS g))",
        &[&QUEUE, &DEAD_LETTERS],
    )
    .await?;
    for p in 0..PARTITIONS {
        dead_letter_partition(&c, p).await?;
    }

    eprintln!(
        "  {} messages on {MESSAGE_KEYS} keys (2 producers, send_batch of 50 000) [{:.0} s]",
        MESSAGES,
        t0.elapsed().as_secs_f64()
    );
    // Two producers at once (the machine has 2 cores), on disjoint keys: producer i sends the
    // orders g with g % 2 = i, whose keys (g % 1000) have that parity too; each key's messages
    // go in order.
    let producers = (0..2i64).map(|i| async move {
        let c = db.connect(false).await?;
        let chunk: i64 = 100_000;
        let mut from = 1;
        while from <= MESSAGES {
            let to = (from + chunk - 1).min(MESSAGES);
            c.execute(
                "SELECT count(*) FROM lease_queue.send_batch($1,
                        ARRAY(SELECT 'customer-' || lpad((g % $4::bigint)::text, 4, '0')
                                FROM generate_series($2::bigint, $3::bigint) AS g
                               WHERE g % 2 = $5 ORDER BY g),
                        ARRAY(SELECT jsonb_build_object('order', g, 'customer', g % $4::bigint,
                                                        'amount_cents', (g * 37) % 100000,
                                                        'items', 1 + g % 5)
                                FROM generate_series($2::bigint, $3::bigint) AS g
                               WHERE g % 2 = $5 ORDER BY g))",
                &[&QUEUE, &from, &to, &MESSAGE_KEYS, &i],
            )
            .await?;
            from = to + 1;
        }
        BoxResult::Ok(())
    });
    for r in futures_util::future::join_all(producers).await {
        r?;
    }
    let row = c
        .query_one(
            "SELECT claimed, epoch FROM lease_queue.claim($1, $2, 'consumer-3', interval '1 day')",
            &[&QUEUE, &OPEN_PARTITION],
        )
        .await?;
    let (claimed, epoch): (bool, Option<i64>) = (row.get(0), row.get(1));
    let epoch = epoch
        .filter(|_| claimed)
        .ok_or_else(|| err("claim of the open batch's partition refused"))?;
    let got = c
        .query(
            "SELECT id FROM lease_queue.receive($1, $2, 'consumer-3', $3, $4)",
            &[&QUEUE, &OPEN_PARTITION, &epoch, &OPEN_BATCH],
        )
        .await?
        .len();
    if got as i32 != OPEN_BATCH {
        return Err(err(format!("open batch: received {got}, not {OPEN_BATCH}")));
    }

    eprintln!(
        "  {} leases: jobs, semaphores, an election [{:.0} s]",
        LEASES,
        t0.elapsed().as_secs_f64()
    );
    // A key with a long history: granted and released before its last grant below.
    for _ in 0..DETAIL_GRANTS {
        c.execute(
            "SELECT lease.release($1, 'worker-0', (lease.acquire($1, 'worker-0', interval '1 day')).epoch)",
            &[&DETAIL_KEY],
        )
        .await?;
    }
    c.execute(
        "SELECT count(*) FROM generate_series(1, $1::bigint) AS s
           CROSS JOIN generate_series(1, $2::bigint) AS h
           CROSS JOIN LATERAL lease.acquire_slot('pool-' || lpad(s::text, 2, '0'),
                                                 'svc-' || s || '-' || h, interval '1 day',
                                                 $2::integer) AS a
          WHERE a.acquired",
        &[&SEMAPHORES, &SLOTS],
    )
    .await?;
    c.execute(
        "SELECT lease.acquire($1, $2, interval '1 day', data => '{\"url\": \"http://node-a:8080\"}')",
        &[&ELECTION, &ELECTION_OWNER],
    )
    .await?;
    let jobs = jobs();
    let step: i64 = 10_000;
    let mut from = 1;
    let mut lapsing_done = Instant::now();
    while from <= jobs {
        let to = (from + step - 1).min(jobs);
        // 1 in 10 lapses (granted for 1 s), 1 in 10 is released, the rest held for a day.
        c.execute(
            "SELECT count(CASE WHEN g % 10 = 1
                               THEN lease.release(k.key, k.owner, a.epoch) END)
               FROM generate_series($1::bigint, $2::bigint) AS g
              CROSS JOIN LATERAL (
                    SELECT 'tenant-' || lpad((g % 20)::text, 2, '0') || '/job-' || lpad(g::text, 6, '0')
                               AS key,
                           'worker-' || ((g / 20) % 200) AS owner) AS k
              CROSS JOIN LATERAL lease.acquire(k.key, k.owner,
                    CASE WHEN g % 10 = 0 THEN interval '1 second' ELSE interval '1 day' END,
                    data => '{\"host\": \"host-' || (g % 97) || '\", \"pid\": ' || g || '}') AS a",
            &[&from, &to],
        )
        .await?;
        lapsing_done = Instant::now();
        from = to + 1;
    }
    // The 1 s grants must have lapsed before anything is counted.
    let lapsed_at = lapsing_done + Duration::from_millis(1500);
    tokio::time::sleep_until(lapsed_at.into()).await;

    eprintln!(
        "  VACUUM (ANALYZE), CHECKPOINT [{:.0} s]",
        t0.elapsed().as_secs_f64()
    );
    su.batch_execute("VACUUM (ANALYZE)").await?;
    su.batch_execute("CHECKPOINT").await?;

    let s = c
        .query_one(
            "SELECT held, lapsed, free, waiting FROM lease.summary()",
            &[],
        )
        .await?;
    let (held, lapsed, free, waiting): (i64, i64, i64, i64) =
        (s.get(0), s.get(1), s.get(2), s.get(3));
    let q = su
        .query_one(
            "SELECT (SELECT count(*) FROM lease_queue.messages),
                    (SELECT count(DISTINCT key) FROM lease_queue.messages),
                    (SELECT count(*) FROM lease_queue.dead_letters),
                    (SELECT coalesce(sum(batch_size), 0)::bigint FROM lease_queue.status()),
                    (SELECT count(*) FROM lease.grant_history),
                    (SELECT count(*) FROM lease.leases WHERE key ~ '#[0-9]+$'),
                    pg_total_relation_size('lease.leases'),
                    pg_total_relation_size('lease.grant_history'),
                    pg_total_relation_size('lease_queue.messages'),
                    lease.version(), lease_queue.version()",
            &[],
        )
        .await?;
    let seeded = Seeded {
        leases: held + lapsed + free,
        held,
        lapsed,
        free,
        waiting,
        semaphore_slots: q.get(5),
        history_rows: q.get(4),
        messages: q.get(0),
        message_keys: q.get(1),
        dead_letters: q.get(2),
        open_batch: q.get(3),
        pg_lease_version: q.get(9),
        lease_queue_version: q.get(10),
        seconds: round1(t0.elapsed().as_secs_f64()),
        leases_bytes: q.get(6),
        history_bytes: q.get(7),
        messages_bytes: q.get(8),
    };
    if seeded.leases != LEASES
        || seeded.messages != MESSAGES
        || seeded.dead_letters != DEAD_LETTERS
        || seeded.open_batch != i64::from(OPEN_BATCH)
    {
        return Err(err(format!("seeding went wrong: {seeded:?}")));
    }
    eprintln!(
        "  seeded in {:.0} s: {} held, {} lapsed, {} free; {} messages, {} dead letters",
        seeded.seconds, held, lapsed, free, seeded.messages, seeded.dead_letters
    );
    Ok(seeded)
}

/// Claims partition `p`, delivers its poison messages MAX_ATTEMPTS times, nacking each (the last
/// nack dead-letters it), and releases the partition.
async fn dead_letter_partition(c: &Client, p: i32) -> BoxResult<()> {
    let row = c
        .query_one(
            "SELECT claimed, epoch FROM lease_queue.claim($1, $2, 'seeder', interval '1 hour')",
            &[&QUEUE, &p],
        )
        .await?;
    let epoch: i64 = row
        .get::<_, Option<i64>>(1)
        .filter(|_| row.get::<_, bool>(0))
        .ok_or_else(|| err(format!("claim of partition {p} refused")))?;
    for _ in 0..MAX_ATTEMPTS {
        let batch = c
            .query(
                "SELECT batch_id, id FROM lease_queue.receive($1, $2, 'seeder', $3, 1000)",
                &[&QUEUE, &p, &epoch],
            )
            .await?;
        let Some(first) = batch.first() else {
            break;
        };
        let batch_id: i64 = first.get(0);
        for m in &batch {
            let id: i64 = m.get(1);
            c.execute(
                "SELECT lease_queue.nack($1, $2, 'seeder', $3, $4, $5, interval '0',
                                         'seeded failure: poison message')",
                &[&QUEUE, &p, &epoch, &batch_id, &id],
            )
            .await?;
        }
        c.execute(
            "SELECT lease_queue.ack($1, $2, 'seeder', $3, $4)",
            &[&QUEUE, &p, &epoch, &batch_id],
        )
        .await?;
    }
    c.execute(
        "SELECT lease_queue.release($1, $2, 'seeder', $3)",
        &[&QUEUE, &p, &epoch],
    )
    .await?;
    Ok(())
}
