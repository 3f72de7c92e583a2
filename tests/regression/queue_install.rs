//! pg_lease_queue's installation: with and without extension files it installs the same API (and
//! pg_lease first); pg_dump and restore keep its queues, their pending messages in order, their dead
//! letters, and the partitions' epochs.

use pglease_tests::{ADMIN, APP, server};

use crate::extension::{run_client_program, tempfile_dir};
use crate::upgrade::api_of_extension;

/// `api_of_extension` without what differs by installation path: the installer's bookkeeping table
/// (script path), the `pg_extension_config_dump` registrations (extension path), and privileges,
/// which name the objects' owner (the bootstrap superuser, or the installing role itself; the
/// privileges of each path are the privilege suites' subject).
fn comparable(lines: Vec<String>) -> Vec<String> {
    lines
        .into_iter()
        .filter(|l| {
            !l.starts_with("schema_migrations")
                && !l.starts_with("dumped ")
                && !l.starts_with("schema ")
        })
        .map(|l| {
            l.split(' ')
                .filter(|w| !w.starts_with("acl="))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

#[tokio::test]
async fn the_script_installer_gives_the_queue_and_pg_lease_the_api_of_create_extension() {
    let s = server();
    let by_extension = s.fresh_db_with_queue("queue_api_ext");
    let by_script = s.fresh_db("queue_api_script");
    let mut admin = s.connect_as(&by_script, ADMIN).await;
    let installed = pglease::PG_LEASE_QUEUE.install(&mut admin).await.unwrap();
    assert_eq!(installed.version, pglease::PG_LEASE_QUEUE.version);
    assert_eq!(installed.via, pglease::Via::Script);
    // pg_lease came first, by the same path.
    let lease = pglease::PG_LEASE.check_version(&admin).await.unwrap();
    assert_eq!(
        (lease.version.as_str(), lease.via),
        (pglease::PG_LEASE.version, pglease::Via::Script)
    );

    for ext in [&pglease::PG_LEASE, &pglease::PG_LEASE_QUEUE] {
        let expected = comparable(api_of_extension(&by_extension, ext).await);
        assert!(
            expected.iter().any(|l| l.starts_with("receive(")) || ext.name == "pg_lease",
            "{expected:?}"
        );
        assert_eq!(
            comparable(api_of_extension(&by_script, ext).await),
            expected,
            "{}: script install vs CREATE EXTENSION",
            ext.name
        );
    }
    // The extension path registers every table and sequence for pg_dump.
    let dumped: Vec<String> = api_of_extension(&by_extension, &pglease::PG_LEASE_QUEUE)
        .await
        .into_iter()
        .filter(|l| l.starts_with("dumped "))
        .collect();
    assert_eq!(dumped.len(), 10, "{dumped:?}");

    // A second install is a no-op, on either path.
    let again = pglease::PG_LEASE_QUEUE.install(&mut admin).await.unwrap();
    assert_eq!(again.via, pglease::Via::Script);
    let mut ext_admin = s.connect_as(&by_extension, ADMIN).await;
    let again = pglease::PG_LEASE_QUEUE
        .install(&mut ext_admin)
        .await
        .unwrap();
    assert_eq!(again.via, pglease::Via::Extension);
}

#[tokio::test]
async fn a_script_installed_queue_works_for_an_ordinary_role() {
    let s = server();
    let db = s.fresh_db("queue_script_works");
    let mut admin = s.connect_as(&db, ADMIN).await;
    pglease::PG_LEASE_QUEUE.install(&mut admin).await.unwrap();
    admin
        .batch_execute(
            "SELECT lease_queue.create_queue('jobs', 2); \
             SELECT lease_queue.grant_queue('jobs', 'app', 'produce'), \
                    lease_queue.grant_queue('jobs', 'app', 'consume')",
        )
        .await
        .unwrap();
    let app = s.connect_as(&db, APP).await;
    let id: i64 = app
        .query_one("SELECT lease_queue.send('jobs', 'k', '{\"n\": 1}')", &[])
        .await
        .unwrap()
        .get(0);
    let p: i32 = app
        .query_one("SELECT lease_queue.partition_of('k', 2)", &[])
        .await
        .unwrap()
        .get(0);
    let epoch: i64 = app
        .query_one(
            "SELECT epoch FROM lease_queue.claim('jobs', $1, 'w', '1 hour') WHERE claimed",
            &[&p],
        )
        .await
        .unwrap()
        .get(0);
    let got: i64 = app
        .query_one(
            "SELECT id FROM lease_queue.receive('jobs', $1, 'w', $2, 10)",
            &[&p, &epoch],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(got, id);
}

/// In `db`: queue `orders` (2 partitions, max_attempts 1) with key `a`'s messages 1, 2, 3 pending
/// in partition 0, and a dead letter of key `c` (partition 1) and one acked message of it, whose
/// partition was claimed at epoch 1 and released.
async fn make_queue_state(db: &str) {
    let admin = server().connect_as(db, ADMIN).await;
    admin
        .batch_execute(
            "SELECT lease_queue.create_queue('orders', 2, 1);
             SELECT lease_queue.grant_queue('orders', 'public', 'consume');
             SELECT lease_queue.send('orders', 'a', '1');
             SELECT lease_queue.send('orders', 'a', '2');
             SELECT lease_queue.send('orders', 'a', '3');
             SELECT lease_queue.send('orders', 'c', '\"dead\"');",
        )
        .await
        .unwrap();
    assert_eq!(
        (
            partition_of(&admin, "a").await,
            partition_of(&admin, "c").await
        ),
        (0, 1)
    );
    assert_eq!(claim(&admin, 1, "w").await, 1);
    let row = admin
        .query_one(
            "SELECT batch_id, id FROM lease_queue.receive('orders', 1, 'w', 1, 100)",
            &[],
        )
        .await
        .unwrap();
    let (batch, id): (i64, i64) = (row.get(0), row.get(1));
    let state: String = admin
        .query_one(
            "SELECT lease_queue.nack('orders', 1, 'w', 1, $1, $2, '0', 'broken')",
            &[&batch, &id],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        state, "dead_lettered",
        "max_attempts 1: the first failure is the last"
    );
    admin
        .batch_execute(&format!(
            "SELECT lease_queue.ack('orders', 1, 'w', 1, {batch});
             SELECT lease_queue.send('orders', 'c', '\"done\"');"
        ))
        .await
        .unwrap();
    let batch: i64 = admin
        .query_one(
            "SELECT batch_id FROM lease_queue.receive('orders', 1, 'w', 1, 100)",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    admin
        .batch_execute(&format!(
            "SELECT lease_queue.ack('orders', 1, 'w', 1, {batch});
             SELECT lease_queue.release('orders', 1, 'w', 1);"
        ))
        .await
        .unwrap();
}

/// The acked counters of `orders`' partitions, as status() reports them.
async fn acked(c: &tokio_postgres::Client) -> Vec<i64> {
    c.query(
        "SELECT acked FROM lease_queue.status('orders') ORDER BY partition",
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

async fn partition_of(c: &tokio_postgres::Client, key: &str) -> i32 {
    c.query_one("SELECT lease_queue.partition_of($1, 2)", &[&key])
        .await
        .unwrap()
        .get(0)
}

async fn claim(c: &tokio_postgres::Client, partition: i32, owner: &str) -> i64 {
    c.query_one(
        "SELECT epoch FROM lease_queue.claim('orders', $1, $2, '1 hour') WHERE claimed",
        &[&partition, &owner],
    )
    .await
    .unwrap_or_else(|e| panic!("claim {partition} for {owner}: {e}"))
    .get(0)
}

/// What [`make_queue_state`] made, as found in `db`: the dead letter with its reason, key a's
/// messages in order, partition 1's next claim above the epoch released before the dump, and the
/// partitions' acked counters, which go on counting.
async fn check_queue_state(db: &str, how: &str) {
    let c = server().connect_as(db, APP).await;
    assert_eq!(acked(&c).await, [0, 1], "{how}");
    let dead: Vec<(String, Option<String>)> = c
        .query(
            "SELECT payload::text, reason FROM lease_queue.list_dead_letters('orders')",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        dead,
        [("\"dead\"".to_owned(), Some("broken".to_owned()))],
        "{how}"
    );
    assert_eq!(
        claim(&c, 1, "heir").await,
        3,
        "{how}: epoch 1 was released (counter 2)"
    );
    let e = claim(&c, 0, "heir").await;
    let mut seen = Vec::new();
    loop {
        let rows = c
            .query(
                "SELECT batch_id, payload::text FROM lease_queue.receive('orders', 0, 'heir', $1, 1)",
                &[&e],
            )
            .await
            .unwrap();
        if rows.is_empty() {
            break;
        }
        let batch: i64 = rows[0].get(0);
        seen.extend(rows.iter().map(|r| r.get::<_, String>(1)));
        c.execute(
            "SELECT lease_queue.ack('orders', 0, 'heir', $1, $2)",
            &[&e, &batch],
        )
        .await
        .unwrap();
    }
    assert_eq!(seen, ["1", "2", "3"], "{how}: key a in order");
    assert_eq!(acked(&c).await, [3, 1], "{how}");
}

#[tokio::test]
async fn dump_and_restore_keep_the_queue_its_order_its_dead_letters_and_its_epochs() {
    let s = server();
    let src = s.fresh_db_with_queue("queue_dump_src");
    make_queue_state(&src).await;
    let archive = tempfile_dir("queue_dump").join("queue.dump");
    let archive_arg = archive.display().to_string();
    run_client_program("pg_dump", ADMIN, &["-Fc", "-f", &archive_arg, &src], None);
    let dst = s.fresh_db("queue_dump_dst");
    run_client_program(
        "pg_restore",
        ADMIN,
        &[
            "--no-owner",
            "--no-privileges",
            "--exit-on-error",
            "-d",
            &dst,
            &archive_arg,
        ],
        None,
    );
    check_queue_state(&dst, "pg_dump -Fc | pg_restore, as the installing role").await;
    // The source still works the same way (the dump changed nothing).
    check_queue_state(&src, "the source after the dump").await;
    std::fs::remove_dir_all(archive.parent().unwrap()).unwrap();
}
