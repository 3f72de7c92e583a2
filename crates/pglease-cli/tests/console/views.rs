//! A lease's page (its history as a timeline), the semaphores view and the elections view.

use serde_json::{Value, json};

use crate::common::{Case, run_sql};
use crate::harness::{Browser, Ui, epoch_of, until, until_lapsed};

/// The history table's rows: (epoch, holder, how it ended).
async fn grants(b: &Browser) -> Vec<(String, String, String)> {
    let v = b
        .js(
            "return [...document.querySelectorAll('table.history tr[data-epoch]')].map((tr) =>
               [tr.dataset.epoch, tr.querySelector('td.owner').textContent,
                tr.querySelector('td.ended').textContent]);",
            vec![],
        )
        .await;
    serde_json::from_value(v).expect("grants")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_page_shows_each_grant_and_how_it_ended() {
    let case = Case::new("console_history");
    let key = "hist/job";
    let e1 = epoch_of(&case, &format!("lease.acquire('{key}', 'alpha', '1 hour')"));
    run_sql(
        &case.url,
        &format!("SELECT lease.release('{key}', 'alpha', {e1})"),
    );
    let e2 = epoch_of(
        &case,
        &format!("lease.acquire('{key}', 'beta', '200 milliseconds')"),
    );
    until_lapsed(&case, key).await;
    let e3 = epoch_of(&case, &format!("lease.acquire('{key}', 'gamma', '1 hour')"));
    let transferred = run_sql(
        &case.url,
        &format!(
            "SELECT (t).status, (t).epoch FROM (SELECT lease.transfer('{key}', 'gamma', {e3}, 'delta', '1 hour') AS t) s"
        ),
    );
    let e4: i64 = transferred
        .trim()
        .rsplit('|')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(transferred.starts_with("ok|"), "{transferred}");
    // What the history says, by SQL: the page must show the same grants, newest first.
    let sql = run_sql(
        &case.url,
        &format!(
            "SELECT epoch, owner, coalesce(ended_by, 'holding') FROM lease.history('{key}') ORDER BY epoch DESC"
        ),
    );
    let want: Vec<(String, String, String)> = sql
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('|').collect();
            (f[0].to_owned(), f[1].to_owned(), f[2].to_owned())
        })
        .collect();
    assert_eq!(
        want.iter()
            .map(|g| (g.0.clone(), g.1.as_str(), g.2.as_str()))
            .collect::<Vec<_>>(),
        vec![
            (e4.to_string(), "delta", "holding"),
            (e3.to_string(), "gamma", "transferred"),
            (e2.to_string(), "beta", "lapsed"),
            (e1.to_string(), "alpha", "released"),
        ],
        "the history by SQL"
    );

    let ui = Ui::start(&case, &[]);
    let b = Browser::new("lease-history").await;
    b.goto(&ui.at(&format!("lease?key={key}"))).await;
    let got = until("the four grants in the timeline", || async {
        let g = grants(&b).await;
        if g.len() == 4 { Ok(g) } else { Err(g) }
    })
    .await;
    for ((epoch, owner, ended), (we, wo, wended)) in got.iter().zip(&want) {
        assert_eq!((epoch, owner), (we, wo));
        assert!(
            ended.starts_with(wended.as_str()),
            "epoch {epoch}: the page says {ended:?}, the history {wended:?}"
        );
    }
    assert_eq!(b.text("h2").await.as_deref(), Some(key));
    let bars = b.count("table.history td.track div.bar").await;
    assert_eq!(bars, 4, "a bar per grant");
    b.screenshot("").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_semaphores_view_shows_slots_held_slots_that_exist_and_holders() {
    let case = Case::new("console_semaphores");
    let mut slots = Vec::new();
    for owner in ["backup-1", "backup-2", "backup-3"] {
        let row = run_sql(
            &case.url,
            &format!(
                "SELECT (s).key, (s).epoch FROM (SELECT lease.acquire_slot('backups', '{owner}', '1 hour', 3) AS s) x"
            ),
        );
        let (key, epoch) = row.trim().split_once('|').expect(&row);
        slots.push((owner, key.to_owned(), epoch.to_owned()));
    }
    let (owner, key, epoch) = &slots[1];
    run_sql(
        &case.url,
        &format!("SELECT lease.release('{key}', '{owner}', {epoch})"),
    );
    epoch_of(&case, "lease.acquire_slot('reports', 'rep-1', '1 hour', 1)");

    let ui = Ui::start(&case, &[]);
    let b = Browser::new("semaphores").await;
    b.goto(&ui.at("semaphores")).await;
    let got = until("both semaphores", || async {
        let v = b
            .js(
                "return [...document.querySelectorAll('tr[data-semaphore]')].map((tr) =>
                   [tr.dataset.semaphore, tr.querySelector('td.holders').textContent,
                    tr.querySelector('td.slots').textContent, tr.cells[3].textContent]);",
                vec![],
            )
            .await;
        if v.as_array().is_some_and(|a| a.len() == 2) {
            Ok(v)
        } else {
            Err(v)
        }
    })
    .await;
    assert_eq!(
        got,
        json!([
            ["backups", "2", "3", "backup-1, backup-3"],
            ["reports", "1", "1", "rep-1"]
        ])
    );
    b.screenshot("").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_elections_view_shows_the_leader_its_term_and_data() {
    let case = Case::new("console_elections");
    run_sql(
        &case.url,
        "SELECT lease.acquire('scheduler', 'sched-b', '1 hour')",
    );
    run_sql(&case.url, "SELECT lease.release('scheduler', 'sched-b', 1)");
    let term = epoch_of(
        &case,
        "lease.acquire('scheduler', 'sched-a', '1 hour', '0', 'sched-a.internal:8080')",
    );
    epoch_of(
        &case,
        "lease.acquire('shard/1', 'node-1', '1 hour', '0', 'n1')",
    );
    epoch_of(
        &case,
        "lease.acquire('shard/2', 'node-2', '1 hour', '0', 'n2')",
    );
    let ui = Ui::start(
        &case,
        &[
            "--election",
            "scheduler",
            "--election",
            "shard/*",
            "--election",
            "nobody",
        ],
    );
    let b = Browser::new("elections").await;
    b.goto(&ui.at("elections")).await;
    let got = until("the four elections", || async {
        let v = b
            .js(
                "return [...document.querySelectorAll('tr[data-election]')].map((tr) =>
                   [tr.dataset.election, tr.querySelector('td.leader').textContent,
                    tr.querySelector('td.term').textContent, tr.querySelector('td.data').textContent]);",
                vec![],
            )
            .await;
        if v.as_array().is_some_and(|a| a.len() == 4) { Ok(v) } else { Err(v) }
    })
    .await;
    assert_eq!(
        got,
        json!([
            [
                "scheduler",
                "sched-a",
                term.to_string(),
                "sched-a.internal:8080"
            ],
            ["shard/1", "node-1", "1", "n1"],
            ["shard/2", "node-2", "1", "n2"],
            ["nobody", "—", "—", "—"],
        ])
    );
    // How long the leader has led, from the history: an age, counting up.
    let since: Value = b
        .js(
            "return document.querySelector('tr[data-election=scheduler] td.since').textContent;",
            vec![],
        )
        .await;
    assert!(since.as_str().is_some_and(|s| s.ends_with(" s")), "{since}");
    b.screenshot("").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_without_pg_lease_queue_has_no_queue_rather_than_an_error() {
    let case = Case::new("console_no_queue_extension");
    let ui = Ui::start(&case, &[]);
    let r = ui.get("api/queues");
    r.expect(200);
    assert_eq!(r.json(), json!({ "items": [] }));
    let b = Browser::new("queues-none").await;
    b.goto(&ui.at("queues")).await;
    until("No queue.", || async {
        let v = b
            .js(
                "return [document.getElementById('view').textContent,
                         document.getElementById('notice').hidden];",
                vec![],
            )
            .await;
        if v == json!(["No queue.", true]) {
            Ok(())
        } else {
            Err(v)
        }
    })
    .await;
}
