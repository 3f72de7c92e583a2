//! The README's picture of the console: the queues view of a busy queue (a producer, two
//! consumers, declined orders dead-lettered), with leases of jobs, an election and a semaphore
//! beside it. Written to docs/img/console.png when `PGLEASE_UPDATE_SCREENSHOT=1`; otherwise to the
//! screenshots directory like every other view's.

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use tokio_postgres::NoTls;

use crate::common::{Case, run_sql};
use crate::harness::{Browser, Ui, until};

/// Sends orders and consumes them as `consumer` on `partitions`, acking each batch and declining
/// every order with a card (nacked until it is a dead letter), until the task is aborted.
async fn workload(url: String, consumer: &'static str, partitions: Vec<i32>, produce: bool) {
    let (c, conn) = tokio_postgres::connect(&url, NoTls).await.expect("connect");
    tokio::spawn(conn);
    let mut epochs = Vec::new();
    for p in &partitions {
        let row = c
            .query_one(
                "SELECT (lease_queue.claim('orders', $1, $2, '1 hour')).epoch",
                &[p, &consumer],
            )
            .await
            .expect("claim");
        epochs.push(row.get::<_, i64>(0));
    }
    let mut n: i64 = 0;
    loop {
        if produce {
            for _ in 0..4 {
                n += 1;
                let payload = if n % 23 == 0 {
                    json!({ "order": n, "card": "4111" })
                } else {
                    json!({ "order": n, "total": (n % 97) as f64 + 0.5 })
                };
                let key = format!("customer-{}", n % 37);
                c.execute(
                    "SELECT lease_queue.send('orders', $1, $2)",
                    &[&key, &payload],
                )
                .await
                .expect("send");
            }
        }
        for (p, epoch) in partitions.iter().zip(&epochs) {
            let batch = c
                .query(
                    "SELECT batch_id, id, payload FROM lease_queue.receive('orders', $1, $2, $3, 3)",
                    &[p, &consumer, epoch],
                )
                .await
                .expect("receive");
            let Some(first) = batch.first() else { continue };
            let batch_id: i64 = first.get(0);
            for m in &batch {
                let payload: serde_json::Value = m.get(2);
                if payload.get("card").is_some() {
                    let id: i64 = m.get(1);
                    c.execute(
                        "SELECT lease_queue.nack('orders', $1, $2, $3, $4, $5, '0', 'card declined')",
                        &[p, &consumer, epoch, &batch_id, &id],
                    )
                    .await
                    .expect("nack");
                }
            }
            c.execute(
                "SELECT lease_queue.ack('orders', $1, $2, $3, $4)",
                &[p, &consumer, epoch, &batch_id],
            )
            .await
            .expect("ack");
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_picture_shows_a_busy_queue() {
    let case = Case::new("console_picture");
    case.pglease(["install", "pg_lease_queue"]).expect_code(0);
    run_sql(
        &case.url,
        "SELECT lease_queue.create_queue('orders', 4, 3);
         SELECT lease_queue.create_queue('emails', 2, 5);
         SELECT lease.acquire('scheduler', 'sched-a', '1 hour', '0', 'sched-a.internal:8080');
         SELECT lease.acquire_slot('backups', 'backup-1', '1 hour', 2);",
    );
    // An email nobody consumes yet: a backlog on a queue without holders.
    for i in 0..5 {
        run_sql(
            &case.url,
            &format!(
                r#"SELECT lease_queue.send('emails', 'user-{i}', '{{"template": "welcome"}}')"#
            ),
        );
    }
    let url = case.url.clone();
    let producer = tokio::spawn(workload(url.clone(), "consumer-1", vec![0, 1], true));
    let other = tokio::spawn(workload(url, "consumer-2", vec![2], false));
    let ui = Ui::start(&case, &["--election", "scheduler", "--refresh", "500ms"]);
    let b = Browser::new("readme-queues").await;
    b.goto(&ui.at("queues")).await;
    until("four partitions of orders, three held", || async {
        let held = b
            .js(
                "return [...document.querySelectorAll('tr[data-queue=orders] td.owner')]
                   .filter((td) => td.textContent.startsWith('consumer-')).length;",
                vec![],
            )
            .await;
        if held == json!(3) { Ok(()) } else { Err(held) }
    })
    .await;
    // pg_lease_queue 0.2.0 counts acked messages (the chart's source); 0.1 does not.
    let counts_acks = run_sql(
        &case.url,
        "SELECT pg_get_function_result('lease_queue.status(text)'::regprocedure) LIKE '%acked%'",
    )
    .trim()
        == "t";
    until(
        "dead letters and a consumed/s chart of some width",
        || async {
            let v = b
                .js(
                    "const s = document.querySelector('section[data-queue=orders]');
                 const line = s.querySelector('svg.chart polyline').getAttribute('points');
                 return [s.querySelector('.dead').textContent, line.split(' ').length,
                         s.querySelector('.rate').textContent];",
                    vec![],
                )
                .await;
            let dead = v[0]
                .as_str()
                .unwrap_or("0 ")
                .split(' ')
                .next()
                .unwrap_or("0");
            let points = v[1].as_u64().unwrap_or(0);
            let rate = v[2].as_str().unwrap_or_default();
            let charted = if counts_acks {
                points >= 12 && rate.starts_with("consumed ")
            } else {
                rate.contains("sampling")
            };
            if dead != "0" && charted {
                Ok(())
            } else {
                Err(v)
            }
        },
    )
    .await;
    let shot = b.screenshot("").await;
    producer.abort();
    other.abort();
    if std::env::var_os("PGLEASE_UPDATE_SCREENSHOT").is_some_and(|v| v == "1") {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/img/console.png");
        std::fs::copy(&shot, &docs).unwrap_or_else(|e| panic!("{}: {e}", docs.display()));
        eprintln!("wrote {}", docs.display());
    }
}
