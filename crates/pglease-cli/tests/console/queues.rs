//! The queues view (it needs pg_lease_queue 0.2.0: `lease_queue.status` with `acked`): partitions
//! as SQL left them, the dead letters, the actions (redrive, force-release) clicked in the page and
//! checked by SQL, their absence in read-only mode, and the queue metrics.

use serde_json::{Value, json};

use crate::common::{Case, psql, run_sql};
use crate::harness::{Browser, Ui, until};
use crate::metrics::{scrape, value};

/// A queue `orders` (2 partitions, max_attempts 1) and the state of its partition P (that of the
/// key `bad`): claimed by consumer-1; `bad`'s message nacked into a dead letter; a batch of 2 of
/// 3 more messages open; and one message in the other partition, which no one holds.
struct Orders {
    case: Case,
    p: i32,
    other: i32,
    epoch: i64,
    batch: i64,
}

fn one(case: &Case, sql: &str) -> String {
    run_sql(&case.url, sql).trim().to_owned()
}

impl Orders {
    fn new(name: &str) -> Orders {
        let case = Case::new(name);
        case.pglease(["install", "pg_lease_queue"]).expect_code(0);
        run_sql(&case.url, "SELECT lease_queue.create_queue('orders', 2, 1)");
        let p: i32 = one(&case, "SELECT lease_queue.partition_of('bad', 2)")
            .parse()
            .unwrap();
        let other = 1 - p;
        // Keys of each partition.
        let keys = |partition: i32, n: usize| -> Vec<String> {
            one(
                &case,
                &format!(
                    "SELECT string_agg(k, ',') FROM (SELECT 'customer-' || i AS k
                       FROM generate_series(1, 100) i
                      WHERE lease_queue.partition_of('customer-' || i, 2) = {partition}
                      ORDER BY i LIMIT {n}) s"
                ),
            )
            .split(',')
            .map(str::to_owned)
            .collect()
        };
        run_sql(
            &case.url,
            r#"SELECT lease_queue.send('orders', 'bad', '{"card": "4111"}')"#,
        );
        let epoch: i64 = one(
            &case,
            "SELECT (c).epoch FROM (SELECT lease_queue.claim('orders', partition_of, 'consumer-1', '1 hour') AS c
               FROM lease_queue.partition_of('bad', 2)) s",
        )
        .parse()
        .unwrap();
        let delivered = one(
            &case,
            &format!(
                "SELECT batch_id, id FROM lease_queue.receive('orders', {p}, 'consumer-1', {epoch}, 10)"
            ),
        );
        let (batch, id) = delivered.split_once('|').expect(&delivered);
        let nacked = one(
            &case,
            &format!(
                "SELECT lease_queue.nack('orders', {p}, 'consumer-1', {epoch}, {batch}, {id}, '0', 'card declined')"
            ),
        );
        assert_eq!(nacked, "dead_lettered");
        run_sql(
            &case.url,
            &format!("SELECT lease_queue.ack('orders', {p}, 'consumer-1', {epoch}, {batch})"),
        );
        for k in keys(p, 3) {
            run_sql(
                &case.url,
                &format!(r#"SELECT lease_queue.send('orders', '{k}', '{{"total": 12.5}}')"#),
            );
        }
        for k in keys(other, 1) {
            run_sql(
                &case.url,
                &format!(r#"SELECT lease_queue.send('orders', '{k}', '{{"total": 3}}')"#),
            );
        }
        let open = one(
            &case,
            &format!(
                "SELECT min(batch_id) || '|' || count(*) FROM lease_queue.receive('orders', {p}, 'consumer-1', {epoch}, 2)"
            ),
        );
        let (batch, size) = open.split_once('|').unwrap();
        assert_eq!(size, "2");
        Orders {
            p,
            other,
            epoch,
            batch: batch.parse().unwrap(),
            case,
        }
    }

    /// (owner, epoch, backlog, batch_id, batch_size, dead_letters) of `partition` by SQL.
    fn status(&self, partition: i32) -> String {
        one(
            &self.case,
            &format!(
                "SELECT coalesce(owner, '-'), coalesce(epoch::text, '-'), backlog,
                        coalesce(batch_id::text, '-'), batch_size, dead_letters
                   FROM lease_queue.status('orders') WHERE partition = {partition}"
            ),
        )
    }
}

/// The partition rows of queue `orders` in the page: [partition, holder, epoch, backlog, batch,
/// dead].
async fn partitions(b: &Browser) -> Value {
    b.js(
        "return [...document.querySelectorAll('tr[data-queue=orders][data-partition]')].map((tr) =>
           [tr.dataset.partition, tr.querySelector('td.owner').textContent,
            tr.querySelector('td.epoch').textContent, tr.querySelector('td.backlog').textContent,
            tr.querySelector('td.batch').textContent, tr.querySelector('td.dead').textContent]);",
        vec![],
    )
    .await
}

/// What the partition rows must say for `o` with `backlog` messages waiting in P.
fn expected_partitions(o: &Orders, backlog: i64) -> Value {
    let mut rows = vec![
        json!([
            o.p.to_string(),
            "consumer-1",
            o.epoch.to_string(),
            backlog.to_string(),
            format!("#{} (2)", o.batch),
            "1"
        ]),
        json!([o.other.to_string(), "—", "—", "1", "—", "0"]),
    ];
    rows.sort_by_key(|r| r[0].as_str().unwrap().to_owned());
    Value::Array(rows)
}

/// Accepts the confirm() the last click opened.
async fn accept_confirm(b: &Browser) -> String {
    until("the confirmation to open", || async {
        match b.client.get_alert_text().await {
            Ok(text) => {
                b.client.accept_alert().await.expect("accept");
                Ok(text)
            }
            Err(e) => Err(e.to_string()),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queues_view_shows_each_partition_as_sql_left_it() {
    let o = Orders::new("console_queues");
    assert_eq!(
        o.status(o.p),
        format!("consumer-1|{}|1|{}|2|1", o.epoch, o.batch),
        "the state made, by SQL"
    );
    assert_eq!(o.status(o.other), "-|-|1|-|0|0");
    let ui = Ui::start(&o.case, &[]);
    let b = Browser::new("queues").await;
    b.goto(&ui.at("queues")).await;
    let want = expected_partitions(&o, 1);
    until("both partitions", || async {
        let got = partitions(&b).await;
        if got == want { Ok(()) } else { Err(got) }
    })
    .await;
    let summary = b
        .text("section[data-queue=orders] p.summary")
        .await
        .unwrap();
    for part in [
        "2 pending",
        "1 dead letters",
        "1 of 2 partitions without a holder",
    ] {
        assert!(summary.contains(part), "{summary:?} lacks {part:?}");
    }
    b.screenshot("").await;

    b.goto(&ui.at("queue?queue=orders")).await;
    let dead = until("the dead letter", || async {
        let v = b
            .js(
                "return [...document.querySelectorAll('tr[data-dead-letter]')].map((tr) =>
                   [tr.querySelector('td.key').textContent, tr.querySelector('td.reason').textContent,
                    tr.querySelector('td.payload').textContent]);",
                vec![],
            )
            .await;
        if v.as_array().is_some_and(|a| !a.is_empty()) { Ok(v) } else { Err(v) }
    })
    .await;
    assert_eq!(dead, json!([["bad", "card declined", "(hidden)"]]));
    b.screenshot("queue").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redrive_and_force_release_clicked_in_the_page_change_the_queue() {
    let o = Orders::new("console_queue_actions");
    let ui = Ui::start(&o.case, &["--allow-actions", "--show-payloads"]);
    let b = Browser::new("queue-actions").await;
    b.goto(&ui.at("queue?queue=orders")).await;
    until("the dead letter's Redrive button", || async {
        let n = b.count("tr[data-dead-letter] button.action.redrive").await;
        if n == 1 { Ok(()) } else { Err(n) }
    })
    .await;
    let payload = b.text("tr[data-dead-letter] td.payload").await;
    assert_eq!(
        payload.as_deref(),
        Some(r#"{"card":"4111"}"#),
        "--show-payloads"
    );
    b.click("tr[data-dead-letter] button.action.redrive").await;
    let question = accept_confirm(&b).await;
    assert!(question.contains("bad"), "{question}");
    until("the dead letter back in the queue, by SQL", || async {
        let dead = one(
            &o.case,
            "SELECT count(*) FROM lease_queue.list_dead_letters('orders') WHERE key = 'bad'",
        );
        let status = o.status(o.p);
        if dead == "0" && status.starts_with(&format!("consumer-1|{}|2|", o.epoch)) {
            Ok(())
        } else {
            Err((dead, status))
        }
    })
    .await;
    until("No dead letter.", || async {
        let t = b.text("#no-dead-letters").await;
        if t.as_deref() == Some("No dead letter.") {
            Ok(())
        } else {
            Err(t)
        }
    })
    .await;
    let want = expected_partitions(&o, 2);
    let want = {
        let mut w = want.clone();
        for row in w.as_array_mut().unwrap() {
            if row[0] == json!(o.p.to_string()) {
                row[5] = json!("0");
            }
        }
        w
    };
    until("the backlog grown by the redriven message", || async {
        let got = partitions(&b).await;
        if got == want { Ok(()) } else { Err(got) }
    })
    .await;

    let button = format!(
        "tr[data-queue=orders][data-partition='{}'] button.action.force-release",
        o.p
    );
    b.click(&button).await;
    let question = accept_confirm(&b).await;
    assert!(question.contains("consumer-1"), "{question}");
    let key = format!("lease_queue.lease_key('orders', {})", o.p);
    until("the partition's lease released, by SQL", || async {
        let held = one(&o.case, &format!("SELECT held FROM lease.inspect({key})"));
        if held == "f" { Ok(()) } else { Err(held) }
    })
    .await;
    // Fenced: the consumer's epoch no longer receives.
    let out = std::process::Command::new(psql())
        .args([
            "-X",
            "-At",
            "-v",
            "ON_ERROR_STOP=1",
            "-v",
            "VERBOSITY=verbose",
            "-d",
            &o.case.url,
            "-c",
        ])
        .arg(format!(
            "SELECT * FROM lease_queue.receive('orders', {}, 'consumer-1', {}, 10)",
            o.p, o.epoch
        ))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("LE00"),
        "not fenced: {stderr}"
    );
    until("the partition without a holder in the page", || async {
        let got = partitions(&b).await;
        let row = got
            .as_array()
            .and_then(|a| a.iter().find(|r| r[0] == json!(o.p.to_string())).cloned());
        match row {
            Some(r) if r[1] == json!("—") => Ok(()),
            _ => Err(got),
        }
    })
    .await;
    b.screenshot("").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_console_shows_no_action_button_on_any_page() {
    let o = Orders::new("console_no_buttons");
    // The same pages with actions allowed have buttons: their absence below is not an accident.
    let pages = ["leases", "queues", "queue?queue=orders"];
    for (flags, buttons) in [(&["--allow-actions"][..], true), (&[][..], false)] {
        let ui = Ui::start(&o.case, flags);
        let b = Browser::new(if buttons { "buttons" } else { "no-buttons" }).await;
        for page in pages {
            b.goto(&ui.at(page)).await;
            until(&format!("{page} drawn"), || async {
                let drawn = b.updates().await >= 1
                    && (page == "leases" || b.count("tr[data-partition]").await == 2);
                if drawn {
                    Ok(())
                } else {
                    Err(b.updates().await)
                }
            })
            .await;
            let n = b.count("button.action").await;
            assert_eq!(n > 0, buttons, "{page} with {flags:?}: {n} action buttons");
            let text = b.text("#view").await.unwrap_or_default();
            assert!(
                !text.contains("null") && !text.contains("undefined"),
                "{page} with {flags:?} shows a JavaScript null: {text:?}"
            );
        }
        let mode = b.text("#mode").await.unwrap();
        assert_eq!(
            mode,
            if buttons {
                "actions allowed"
            } else {
                "read-only"
            }
        );
    }
}

#[test]
fn the_queue_metrics_equal_lease_queue_status() {
    let o = Orders::new("console_queue_metrics");
    // Two acks in the other partition: claim it; twice receive its message, ack, send another.
    let other = o.other;
    let epoch = one(
        &o.case,
        &format!(
            "SELECT (c).epoch FROM (SELECT lease_queue.claim('orders', {other}, 'consumer-2', '1 hour') AS c) s"
        ),
    );
    for _ in 0..2 {
        let batch = one(
            &o.case,
            &format!(
                "SELECT min(batch_id) FROM lease_queue.receive('orders', {other}, 'consumer-2', {epoch}, 10)"
            ),
        );
        run_sql(
            &o.case.url,
            &format!("SELECT lease_queue.ack('orders', {other}, 'consumer-2', {epoch}, {batch})"),
        );
        let key = one(
            &o.case,
            &format!(
                "SELECT 'customer-' || i FROM generate_series(1, 100) i
                  WHERE lease_queue.partition_of('customer-' || i, 2) = {other} ORDER BY i DESC LIMIT 1"
            ),
        );
        run_sql(
            &o.case.url,
            &format!("SELECT lease_queue.send('orders', '{key}', '{{}}')"),
        );
    }
    let ui = Ui::start(&o.case, &[]);
    let m = scrape(&ui);
    let rows = run_sql(
        &o.case.url,
        "SELECT partition, backlog, batch_size, dead_letters, acked, owner IS NOT NULL
           FROM lease_queue.status('orders') ORDER BY partition",
    );
    let mut dead = 0.0;
    let mut acked_total = 0.0;
    for row in rows.lines() {
        let f: Vec<&str> = row.split('|').collect();
        let labels = [("queue", "orders"), ("partition", f[0])];
        let n = |i: usize| f[i].parse::<f64>().unwrap();
        assert_eq!(
            value(&m, "pglease_queue_backlog", &labels),
            n(1),
            "backlog {row}"
        );
        assert_eq!(
            value(&m, "pglease_queue_in_flight", &labels),
            n(2),
            "in flight {row}"
        );
        assert_eq!(
            value(&m, "pglease_queue_acked_total", &labels),
            n(4),
            "acked {row}"
        );
        let owned = if f[5] == "t" { 1.0 } else { 0.0 };
        assert_eq!(
            value(&m, "pglease_queue_partition_owned", &labels),
            owned,
            "{row}"
        );
        dead += n(3);
        acked_total += n(4);
    }
    assert_eq!(acked_total, 2.0, "the two acks in the other partition");
    assert_eq!(
        value(&m, "pglease_queue_dead_letters", &[("queue", "orders")]),
        dead
    );
    assert_eq!(dead, 1.0);
    assert_eq!(
        value(
            &m,
            "pglease_queue_partitions_unowned",
            &[("queue", "orders")]
        ),
        0.0
    );
}
