//! The leases view: every key as SQL left it, the filter form, and the pages.

use fantoccini::Locator;
use serde::Deserialize;
use serde_json::json;

use crate::common::{Case, run_sql};
use crate::harness::{Browser, Ui, epoch_of, until, until_lapsed};

/// A row of the leases table as the page shows it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Row {
    pub key: String,
    pub state: String,
    pub owner: String,
    pub epoch: String,
    pub data: String,
    pub expires: String,
}

/// The rows of the leases table now.
pub async fn rows(b: &Browser) -> Vec<Row> {
    let v = b
        .js(
            "return [...document.querySelectorAll('table.leases tbody tr')].map((tr) => ({
               key: tr.dataset.key,
               state: tr.querySelector('td.state').textContent,
               owner: tr.querySelector('td.owner').textContent,
               epoch: tr.querySelector('td.epoch').textContent,
               data: tr.querySelector('td.data').textContent,
               expires: tr.querySelector('td.expires').textContent,
             }));",
            vec![],
        )
        .await;
    serde_json::from_value(v).expect("rows")
}

/// The keys of the leases table now, in order.
pub async fn keys(b: &Browser) -> Vec<String> {
    rows(b).await.into_iter().map(|r| r.key).collect()
}

/// (key, state, owner cell, epoch, data cell) of a row, for comparisons.
fn shown(r: &Row) -> (String, String, String, String, String) {
    (
        r.key.clone(),
        r.state.clone(),
        r.owner.clone(),
        r.epoch.clone(),
        r.data.clone(),
    )
}

fn expected(
    key: &str,
    state: &str,
    owner: &str,
    epoch: i64,
    data: &str,
) -> (String, String, String, String, String) {
    (
        key.into(),
        state.into(),
        owner.into(),
        epoch.to_string(),
        data.into(),
    )
}

/// The key's epoch as lease.inspect reports it (the fencing counter of a free key).
pub fn inspect_epoch(case: &Case, key: &str) -> i64 {
    run_sql(
        &case.url,
        &format!("SELECT epoch FROM lease.inspect('{key}')"),
    )
    .trim()
    .parse()
    .unwrap()
}

/// Held (with data and without), lapsed (its last holder in brackets) and released keys.
fn held_lapsed_free(case: &Case) -> Vec<(String, String, String, String, String)> {
    let held = epoch_of(
        case,
        "lease.acquire('app/held', 'worker-1', '1 hour', '0', 'host-a:8080')",
    );
    let bare = epoch_of(case, "lease.acquire('app/bare', 'worker-3', '1 hour')");
    let lapsed = epoch_of(
        case,
        "lease.acquire('app/lapsed', 'worker-2', '200 milliseconds', '0', 'gone')",
    );
    let freed = epoch_of(case, "lease.acquire('app/free', 'worker-1', '1 hour')");
    run_sql(
        &case.url,
        &format!("SELECT lease.release('app/free', 'worker-1', {freed})"),
    );
    vec![
        expected("app/bare", "held", "worker-3", bare, "—"),
        expected(
            "app/free",
            "free",
            "—",
            inspect_epoch(case, "app/free"),
            "—",
        ),
        expected("app/held", "held", "worker-1", held, "host-a:8080"),
        expected("app/lapsed", "lapsed", "(worker-2)", lapsed, "—"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leases_view_shows_every_key_as_sql_left_it() {
    let case = Case::new("console_leases");
    let want = held_lapsed_free(&case);
    until_lapsed(&case, "app/lapsed").await;
    let ui = Ui::start(&case, &[]);
    let b = Browser::new("leases").await;
    b.goto(&ui.at("leases")).await;
    let got = until("the rows of the four keys", || async {
        let got: Vec<_> = rows(&b).await.iter().map(shown).collect();
        if got == want { Ok(got) } else { Err(got) }
    })
    .await;
    assert_eq!(got, want);
    let counts = b.text("p.counts").await.unwrap_or_default();
    for c in ["2 held", "1 lapsed", "1 free"] {
        assert!(counts.contains(c), "counts {counts:?} lack {c:?}");
    }
    b.screenshot("").await;
}

/// Types `text` into the input `css` (found again if the view was redrawn in between).
async fn type_into(b: &Browser, css: &str, text: &str) {
    loop {
        let e = b.client.find(Locator::Css(css)).await.expect(css);
        match e.send_keys(text).await {
            Ok(()) => return,
            Err(e) if e.is_stale_element_reference() => continue,
            Err(e) => panic!("typing into {css}: {e}"),
        }
    }
}

/// The value of the form field `name` now.
async fn field(b: &Browser, name: &str) -> String {
    b.js(
        "const e = document.querySelector('form.filters [name=' + arguments[0] + ']'); \
         return e ? e.value : null;",
        vec![json!(name)],
    )
    .await
    .as_str()
    .unwrap_or("(no such field)")
    .to_owned()
}

/// Waits for the page at a new URL to have drawn its view once, and returns the URL's query.
async fn loaded(b: &Browser, before: &str) -> String {
    until("the next page to load and draw its view", || async {
        let url = b.client.current_url().await.unwrap().to_string();
        if url != before && b.updates().await >= 1 {
            Ok(url)
        } else {
            Err(url)
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_filter_form_keeps_what_is_typed_across_updates_and_narrows_the_view() {
    let case = Case::new("console_filters");
    held_lapsed_free(&case);
    epoch_of(&case, "lease.acquire('other/x', 'worker-1', '1 hour')");
    until_lapsed(&case, "app/lapsed").await;
    let ui = Ui::start(&case, &[]);
    let b = Browser::new("leases-filters").await;
    b.goto(&ui.at("leases")).await;
    until("every key", || async {
        let k = keys(&b).await;
        if k.len() == 5 { Ok(()) } else { Err(k) }
    })
    .await;

    // A prefix typed, then a push arrives before the operator submits: the text must stay.
    type_into(&b, "form.filters input[name=prefix]", "app/").await;
    b.next_update().await;
    b.next_update().await;
    assert_eq!(
        field(&b, "prefix").await,
        "app/",
        "the prefix typed into the filter form was lost when the view was updated"
    );
    let before = b.client.current_url().await.unwrap().to_string();
    b.click("form.filters button[type=submit]").await;
    let url = loaded(&b, &before).await;
    assert!(url.contains("prefix=app%2F"), "{url}");
    let got = until("only the keys under app/", || async {
        let k = keys(&b).await;
        if k == ["app/bare", "app/free", "app/held", "app/lapsed"] {
            Ok(k)
        } else {
            Err(k)
        }
    })
    .await;
    assert!(!got.contains(&"other/x".to_owned()));

    // State: lapsed only.
    b.client
        .find(Locator::Css("form.filters select[name=state]"))
        .await
        .unwrap()
        .select_by_value("lapsed")
        .await
        .unwrap();
    b.next_update().await;
    assert_eq!(
        field(&b, "state").await,
        "lapsed",
        "the state chosen was lost"
    );
    let before = b.client.current_url().await.unwrap().to_string();
    b.click("form.filters button[type=submit]").await;
    loaded(&b, &before).await;
    until("only the lapsed key", || async {
        let k = keys(&b).await;
        if k == ["app/lapsed"] { Ok(()) } else { Err(k) }
    })
    .await;

    // Holder worker-1, every state, every prefix: the keys worker-1 holds.
    b.goto(&ui.at("leases")).await;
    until("the page", || async {
        if b.updates().await >= 1 {
            Ok(())
        } else {
            Err(())
        }
    })
    .await;
    type_into(&b, "form.filters input[name=owner]", "worker-1").await;
    b.next_update().await;
    assert_eq!(
        field(&b, "owner").await,
        "worker-1",
        "the holder typed was lost"
    );
    let before = b.client.current_url().await.unwrap().to_string();
    b.click("form.filters button[type=submit]").await;
    loaded(&b, &before).await;
    until("the keys worker-1 holds", || async {
        let k = keys(&b).await;
        if k == ["app/held", "other/x"] {
            Ok(())
        } else {
            Err(k)
        }
    })
    .await;
    b.screenshot("").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn next_page_links_walk_every_key_exactly_once() {
    let case = Case::new("console_pages");
    let all: Vec<String> = (1..=7).map(|i| format!("page/k{i}")).collect();
    for k in &all {
        epoch_of(&case, &format!("lease.acquire('{k}', 'pager', '1 hour')"));
    }
    // A key outside the prefix, before and after it in key order.
    epoch_of(&case, "lease.acquire('a-before', 'pager', '1 hour')");
    epoch_of(&case, "lease.acquire('z-after', 'pager', '1 hour')");
    let ui = Ui::start(&case, &[]);
    let b = Browser::new("leases-pages").await;
    b.goto(&ui.at("leases?prefix=page/&limit=2")).await;
    let mut seen: Vec<String> = Vec::new();
    let mut pages = 0;
    loop {
        pages += 1;
        assert!(pages <= 10, "more pages than keys: {seen:?}");
        let page = until("a page of at most 2 keys", || async {
            let k = keys(&b).await;
            if b.updates().await >= 1 && !k.is_empty() && k.len() <= 2 {
                Ok(k)
            } else {
                Err(k)
            }
        })
        .await;
        seen.extend(page);
        let next = b
            .js(
                "return [...document.querySelectorAll('p.pager a')]
                   .some((a) => a.textContent === 'next page »');",
                vec![],
            )
            .await;
        if next != json!(true) {
            break;
        }
        let before = b.client.current_url().await.unwrap().to_string();
        b.client
            .find(Locator::LinkText("next page »"))
            .await
            .expect("the next page link")
            .click()
            .await
            .unwrap();
        let url = loaded(&b, &before).await;
        assert!(
            url.contains("limit=2") && url.contains("prefix=page"),
            "{url}"
        );
    }
    assert_eq!(
        seen, all,
        "the pages together list every key once, in order"
    );
    assert_eq!(pages, 4);
}
