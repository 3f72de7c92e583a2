//! The page is live: countdowns move, a change made by SQL appears without a reload, and the
//! Pause button stops the updates until Resume.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::{Case, run_sql};
use crate::harness::{Browser, Ui, epoch_of, until, until_lapsed};
use crate::leases::rows;

/// The expiry cell of `key` now.
async fn expires(b: &Browser, key: &str) -> Option<String> {
    rows(b)
        .await
        .into_iter()
        .find(|r| r.key == key)
        .map(|r| r.expires)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expiry_countdown_moves_with_the_pushes_and_between_them() {
    let case = Case::new("console_countdown");
    epoch_of(&case, "lease.acquire('tick/key', 'ticker', '90 seconds')");
    let ui = Ui::start(&case, &[]);
    let b = Browser::new("countdown").await;
    b.goto(&ui.at("leases")).await;
    let first = until("the countdown of tick/key", || async {
        match expires(&b, "tick/key").await {
            Some(t) if t.starts_with("in ") => Ok(t),
            other => Err(other),
        }
    })
    .await;
    until("the countdown to move", || async {
        match expires(&b, "tick/key").await {
            Some(t) if t.starts_with("in ") && t != first => Ok(()),
            other => Err(other),
        }
    })
    .await;

    // Paused, nothing is pushed: the browser's clock alone moves the countdown on.
    b.click("#live").await;
    until("the page to say it is paused", || async {
        let live = b.js("return document.body.dataset.live;", vec![]).await;
        if live == json!("false") {
            Ok(())
        } else {
            Err(live)
        }
    })
    .await;
    let paused = expires(&b, "tick/key").await.unwrap();
    let updates = b.updates().await;
    until("the countdown to move while paused", || async {
        match expires(&b, "tick/key").await {
            Some(t) if t != paused => Ok(()),
            other => Err(other),
        }
    })
    .await;
    assert_eq!(b.updates().await, updates, "a view was pushed while paused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_taken_over_shows_its_new_holder_and_epoch_without_a_reload() {
    let case = Case::new("console_takeover");
    let first = epoch_of(
        &case,
        "lease.acquire('job/report', 'worker-a', '1 hour', '0', 'first')",
    );
    let ui = Ui::start(&case, &[]);
    let b = Browser::new("takeover").await;
    b.goto(&ui.at("leases")).await;
    until("worker-a to show as the holder", || async {
        let r = rows(&b).await;
        match r.first() {
            Some(r) if r.owner == "worker-a" && r.epoch == first.to_string() => Ok(()),
            _ => Err(r),
        }
    })
    .await;
    b.js("window.__marker = 42;", vec![]).await;
    let marked = b.updates().await;

    // worker-a stops renewing: its last renewal, with a short ttl, lapses.
    run_sql(
        &case.url,
        &format!("SELECT lease.renew('job/report', 'worker-a', {first}, '100 milliseconds')"),
    );
    until_lapsed(&case, "job/report").await;
    let second = epoch_of(
        &case,
        "lease.acquire('job/report', 'worker-b', '1 hour', '0', 'second')",
    );
    assert!(second > first);
    until("worker-b and the new epoch in the row", || async {
        let r = rows(&b).await;
        match r.first() {
            Some(row)
                if row.state == "held"
                    && row.owner == "worker-b"
                    && row.epoch == second.to_string()
                    && row.data == "second" =>
            {
                Ok(())
            }
            _ => Err(r),
        }
    })
    .await;
    assert_eq!(
        b.js("return window.__marker;", vec![]).await,
        json!(42),
        "the page was reloaded"
    );
    assert!(b.updates().await > marked);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_stops_the_updates_and_resume_restarts_them() {
    let case = Case::new("console_pause");
    epoch_of(&case, "lease.acquire('before/pause', 'w', '1 hour')");
    let ui = Ui::start(&case, &["--refresh", "250ms"]);
    let b = Browser::new("pause").await;
    b.goto(&ui.at("leases")).await;
    until("two updates", || async {
        let n = b.updates().await;
        if n >= 2 { Ok(()) } else { Err(n) }
    })
    .await;
    b.click("#live").await;
    until("the page to say it is paused", || async {
        let live = b.js("return document.body.dataset.live;", vec![]).await;
        let label = b.text("#live").await;
        if live == json!("false") && label.as_deref() == Some("Resume") {
            Ok(())
        } else {
            Err((live, label))
        }
    })
    .await;
    let stopped = b.updates().await;

    // A change the next push would show: the API already does.
    epoch_of(&case, "lease.acquire('during/pause', 'w', '1 hour')");
    let api = ui.get("api/leases").json();
    assert!(api["items"].to_string().contains("during/pause"), "{api}");
    // For eight refresh periods, nothing arrives (an absence is observed over a span of time).
    let window = Instant::now() + Duration::from_secs(2);
    while Instant::now() < window {
        assert_eq!(b.updates().await, stopped, "an update arrived while paused");
        let keys: Vec<_> = rows(&b).await.into_iter().map(|r| r.key).collect();
        assert!(!keys.contains(&"during/pause".to_owned()), "{keys:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    b.click("#live").await;
    until("the updates to resume with the change", || async {
        let n = b.updates().await;
        let keys: Vec<_> = rows(&b).await.into_iter().map(|r| r.key).collect();
        let live = b.js("return document.body.dataset.live;", vec![]).await;
        if n > stopped && keys.contains(&"during/pause".to_owned()) && live == json!("true") {
            Ok(())
        } else {
            Err((n, keys, live))
        }
    })
    .await;
    assert_eq!(b.text("#live").await.as_deref(), Some("Pause"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_selected_in_the_view_stays_selected_until_the_operator_lets_go_of_it() {
    let case = Case::new("console_selection");
    epoch_of(&case, "lease.acquire('copy/me', 'w', '1 hour')");
    let ui = Ui::start(&case, &["--refresh", "200ms"]);
    let b = Browser::new("selection").await;
    b.goto(&ui.at("leases")).await;
    until("the key", || async {
        let r = rows(&b).await;
        if r.len() == 1 { Ok(()) } else { Err(r) }
    })
    .await;
    // The operator selects the key, to copy it.
    let selected = b
        .js(
            "const a = document.querySelector('tr[data-key=\"copy/me\"] td.key a');
             const range = document.createRange();
             range.selectNodeContents(a);
             const s = document.getSelection();
             s.removeAllRanges();
             s.addRange(range);
             return s.toString();",
            vec![],
        )
        .await;
    assert_eq!(selected, json!("copy/me"));
    epoch_of(&case, "lease.acquire('copy/later', 'w', '1 hour')");
    let api = ui.get("api/leases").json();
    assert!(api["items"].to_string().contains("copy/later"), "{api}");
    // Ten refresh periods: the selection stays (an absence of change, observed over time).
    let window = Instant::now() + Duration::from_secs(2);
    while Instant::now() < window {
        let now = b
            .js("return document.getSelection().toString();", vec![])
            .await;
        assert_eq!(
            now,
            json!("copy/me"),
            "the selection was taken away by an update"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Let go: the view catches up.
    b.js("document.getSelection().removeAllRanges();", vec![])
        .await;
    until("the view to show the new key", || async {
        let k: Vec<_> = rows(&b).await.into_iter().map(|r| r.key).collect();
        if k == ["copy/later", "copy/me"] {
            Ok(())
        } else {
            Err(k)
        }
    })
    .await;
}
