//! Actions as an operator performs them: purge through its prompt and confirmation, and a click
//! held down across a refresh (the page redraws under the pointer every refresh).

use std::time::Duration;

use fantoccini::Locator;
use fantoccini::actions::{InputSource, MOUSE_BUTTON_LEFT, MouseActions, PointerAction};

use crate::common::{Case, run_sql};
use crate::harness::{Browser, Ui, epoch_of, until, until_lapsed};

/// Presses the mouse on `css`, holds it `held`, and releases it (as a person who hesitates).
async fn slow_click(b: &Browser, css: &str, held: Duration) {
    loop {
        let element = b.client.find(Locator::Css(css)).await.expect(css);
        let press = MouseActions::new("mouse".into())
            .then(PointerAction::MoveToElement {
                element,
                duration: None,
                x: 0.0,
                y: 0.0,
            })
            .then(PointerAction::Down {
                button: MOUSE_BUTTON_LEFT,
            })
            .then(PointerAction::Pause { duration: held })
            .then(PointerAction::Up {
                button: MOUSE_BUTTON_LEFT,
            });
        match b.client.perform_actions(press).await {
            Ok(()) => return,
            Err(e) if e.is_stale_element_reference() => continue,
            Err(e) => panic!("slow click on {css}: {e}"),
        }
    }
}

/// Answers the prompt or confirmation that is open with `text` (None: accept as it is).
async fn answer_dialog(b: &Browser, text: Option<&str>) -> String {
    until("a dialog to open", || async {
        match b.client.get_alert_text().await {
            Ok(question) => {
                if let Some(t) = text {
                    b.client
                        .send_alert_text(t)
                        .await
                        .expect("type into the prompt");
                }
                b.client.accept_alert().await.expect("accept");
                Ok(question)
            }
            Err(e) => Err(e.to_string()),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_from_the_page_forgets_free_and_lapsed_keys_and_keeps_held_ones() {
    let case = Case::new("console_purge");
    epoch_of(&case, "lease.acquire('keep/held', 'w', '1 hour')");
    let e = epoch_of(&case, "lease.acquire('gone/free', 'w', '1 hour')");
    run_sql(
        &case.url,
        &format!("SELECT lease.release('gone/free', 'w', {e})"),
    );
    epoch_of(
        &case,
        "lease.acquire('gone/lapsed', 'w', '100 milliseconds')",
    );
    until_lapsed(&case, "gone/lapsed").await;
    let ui = Ui::start(&case, &["--allow-actions"]);
    let b = Browser::new("purge").await;
    b.goto(&ui.at("leases")).await;
    b.click("button.action.purge").await;
    let asked = answer_dialog(&b, Some("0s")).await;
    assert!(asked.contains("longer than"), "{asked}");
    let confirmed = answer_dialog(&b, None).await;
    assert!(confirmed.contains("0s"), "{confirmed}");
    until("the purge, by SQL", || async {
        let keys = run_sql(
            &case.url,
            "SELECT string_agg(key, ',' ORDER BY key) FROM lease.list()",
        );
        if keys.trim() == "keep/held" {
            Ok(())
        } else {
            Err(keys)
        }
    })
    .await;
    until("the page to say what was done", || async {
        let notice = b.text("#notice").await.unwrap_or_default();
        if notice.contains("\"purged\":2") {
            Ok(())
        } else {
            Err(notice)
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_click_held_across_a_refresh_still_acts() {
    let case = Case::new("console_slow_click");
    let e = epoch_of(&case, "lease.acquire('old/free', 'w', '1 hour')");
    run_sql(
        &case.url,
        &format!("SELECT lease.release('old/free', 'w', {e})"),
    );
    // A refresh every 100 ms: the view is redrawn several times while the button is held.
    let ui = Ui::start(&case, &["--allow-actions", "--refresh", "100ms"]);
    let b = Browser::new("slow-click").await;
    b.goto(&ui.at("leases")).await;
    until("the page", || async {
        let n = b.count("button.action.purge").await;
        if n == 1 { Ok(()) } else { Err(n) }
    })
    .await;
    slow_click(&b, "button.action.purge", Duration::from_millis(500)).await;
    let asked = answer_dialog(&b, Some("0s")).await;
    assert!(asked.contains("longer than"), "{asked}");
    answer_dialog(&b, None).await;
    until("the purge, by SQL", || async {
        let n = run_sql(&case.url, "SELECT count(*) FROM lease.list()");
        if n.trim() == "0" { Ok(()) } else { Err(n) }
    })
    .await;
}
