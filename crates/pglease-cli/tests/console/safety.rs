//! What the database holds is shown as text, never run as HTML or script; every answer carries
//! the security headers; the login cookie is HttpOnly and SameSite=Strict.

use serde_json::json;

use crate::common::{Case, run_sql};
use crate::harness::{Browser, Ui, epoch_of, until};
use crate::http;
use crate::leases::rows;

const HOSTILE: &str =
    r#"<img src=x onerror="window.__xss=1"><script>window.__xss=2</script><b>bold</b>"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_owners_and_data_with_html_in_them_are_shown_as_text() {
    let case = Case::new("console_xss");
    let quoted = HOSTILE.replace('\'', "''");
    run_sql(
        &case.url,
        &format!("SELECT lease.acquire('{quoted}', '{quoted}', '1 hour', '0', '{quoted}')"),
    );
    epoch_of(&case, "lease.acquire('plain', 'w', '1 hour')");
    let ui = Ui::start(&case, &["--election", HOSTILE]);
    let b = Browser::new("xss").await;
    for page in ["leases", "elections"] {
        b.goto(&ui.at(page)).await;
        until(&format!("{page} drawn"), || async {
            if b.updates().await >= 1 {
                Ok(())
            } else {
                Err(())
            }
        })
        .await;
    }
    b.goto(&ui.at("leases")).await;
    let row = until("the hostile key's row", || async {
        let r = rows(&b).await;
        match r.iter().find(|r| r.key == HOSTILE) {
            Some(row) => Ok(row.clone()),
            None => Err(r),
        }
    })
    .await;
    assert_eq!((row.owner.as_str(), row.data.as_str()), (HOSTILE, HOSTILE));
    let injected = b
        .js(
            "return [window.__xss === undefined,
                     document.querySelectorAll('#view img, #view script, #view b').length];",
            vec![],
        )
        .await;
    assert_eq!(
        injected,
        json!([true, 0]),
        "markup from the database became elements"
    );
    // The lease page, whose key comes from the URL.
    let key = b
        .js(
            "return document.querySelector('td.key a').getAttribute('href');",
            vec![],
        )
        .await;
    b.goto(&ui.at(key.as_str().unwrap().trim_start_matches('/')))
        .await;
    until("the lease page's heading", || async {
        let h = b.text("h2").await;
        if h.as_deref() == Some(HOSTILE) {
            Ok(())
        } else {
            Err(h)
        }
    })
    .await;
    let injected = b
        .js(
            "return [window.__xss === undefined,
                     document.querySelectorAll('#view img, #view script, #view b').length];",
            vec![],
        )
        .await;
    assert_eq!(injected, json!([true, 0]));
    b.screenshot("").await;
}

#[test]
fn every_answer_carries_the_security_headers() {
    let case = Case::new("console_headers");
    let ui = Ui::start(&case, &[]);
    let addr = ui.addr();
    let answers = [
        http::get(&addr, "/"),
        http::get(&addr, "/assets/console.js"),
        http::get(&addr, "/api/info"),
        http::get(&addr, "/api/lease?key=missing"),
        http::get(&addr, "/metrics"),
        http::request(&addr, "GET", "/api/info")
            .header("Host", "evil.example")
            .send(),
        http::request(&addr, "POST", "/api/purge")
            .json(&json!({ "older_than": "1h" }))
            .send(),
    ];
    for r in &answers {
        let csp = r.header("content-security-policy").unwrap_or_default();
        assert!(
            csp.contains("default-src 'self'") && csp.contains("script-src 'self'"),
            "{r:?}"
        );
        assert_eq!(r.header("x-frame-options"), Some("DENY"), "{r:?}");
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"), "{r:?}");
        assert_eq!(r.header("referrer-policy"), Some("no-referrer"), "{r:?}");
        assert!(r.header("cache-control").is_some(), "{r:?}");
    }
    assert_eq!(answers[2].header("cache-control"), Some("no-store"));
    assert_eq!(answers[3].status, 404);
    assert_eq!(answers[3].json()["error"], json!("no_such_key"));
}

#[test]
fn the_login_cookie_is_http_only_and_same_site_strict() {
    use std::os::unix::fs::PermissionsExt as _;
    let case = Case::new("console_cookie");
    let token = "a1b2c3d4e5f60718293a4b5c6d7e8f90";
    let file = case.file("token");
    std::fs::write(&file, token).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let ui = Ui::start(&case, &["--token-file", file.to_str().unwrap()]);
    let login = |typed: &str| {
        http::request(&ui.addr(), "POST", "/login")
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(&format!("token={typed}"))
            .send()
    };
    let wrong = login("nope");
    assert_eq!(wrong.status, 401);
    assert!(wrong.header("set-cookie").is_none());
    let right = login(token);
    assert_eq!(right.status, 303, "{right:?}");
    assert_eq!(right.header("location"), Some("/"));
    let cookie = right
        .header("set-cookie")
        .expect("a session cookie")
        .to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    assert!(
        !cookie.contains(token),
        "the cookie is not the token: {cookie}"
    );
    let session = cookie.split(';').next().unwrap();
    http::request(&ui.addr(), "GET", "/api/info")
        .header("Cookie", session)
        .send()
        .expect(200);
}
