//! Read-only by default, CSRF on actions, a token off loopback (Bearer, Basic, the login page),
//! token files others may read refused, and the Host check without a token.

use std::os::unix::fs::PermissionsExt as _;
use std::process::Stdio;

use fantoccini::Locator;
use serde_json::json;

use crate::common::{Case, SilentServer, run_sql};
use crate::harness::{Browser, Ui, clean_command, epoch_of, until};
use crate::http;
use crate::leases::keys;

/// Every action the API offers, with a body it accepts.
const ACTIONS: [(&str, &str); 3] = [
    ("/api/queues/orders/redrive", r#"{"key": "c1"}"#),
    ("/api/queues/orders/partitions/0/force-release", "{}"),
    ("/api/purge", r#"{"older_than": "7d"}"#),
];

fn csrf(ui: &Ui) -> String {
    ui.get("api/info").expect(200).json()["csrf_token"]
        .as_str()
        .expect("a csrf_token")
        .to_owned()
}

fn post(ui: &Ui, path: &str, body: &str, headers: &[(&str, &str)]) -> http::Response {
    let mut r = http::request(&ui.addr(), "POST", &ui.path(path))
        .json(&serde_json::from_str(body).unwrap());
    for (n, v) in headers {
        r = r.header(n, v);
    }
    r.send()
}

#[test]
fn a_read_only_console_refuses_every_action_with_403_read_only() {
    let case = Case::new("console_read_only");
    let ui = Ui::start(&case, &[]);
    let info = ui.get("api/info").expect(200).json();
    assert_eq!(info["read_only"], json!(true), "{info}");
    assert_eq!(info["actions"], json!(false), "{info}");
    let token = csrf(&ui);
    let origin = format!("http://{}", ui.addr());
    for (path, body) in ACTIONS {
        let r = post(
            &ui,
            path,
            body,
            &[("X-CSRF-Token", &token), ("Origin", &origin)],
        );
        r.expect(403);
        assert_eq!(r.json()["error"], json!("read_only"), "POST {path}: {r:?}");
    }
}

#[test]
fn with_actions_allowed_a_post_needs_the_csrf_token_and_no_foreign_origin() {
    let case = Case::new("console_csrf");
    epoch_of(&case, "lease.acquire('kept', 'w', '1 hour')");
    let ui = Ui::start(&case, &["--allow-actions"]);
    assert_eq!(ui.get("api/info").json()["actions"], json!(true));
    let token = csrf(&ui);
    let origin = format!("http://{}", ui.addr());
    for (path, body) in ACTIONS {
        let r = post(&ui, path, body, &[]);
        r.expect(403);
        assert_eq!(
            r.json()["error"],
            json!("csrf"),
            "POST {path} without a token"
        );
        let r = post(&ui, path, body, &[("X-CSRF-Token", "0123456789abcdef")]);
        r.expect(403);
        assert_eq!(
            r.json()["error"],
            json!("csrf"),
            "POST {path}, a wrong token"
        );
        let r = post(
            &ui,
            path,
            body,
            &[("X-CSRF-Token", &token), ("Origin", "http://evil.example")],
        );
        r.expect(403);
        assert_eq!(
            r.json()["error"],
            json!("csrf"),
            "POST {path}, foreign Origin"
        );
    }
    // The right token and the console's own origin: the purge runs (and forgets nothing here).
    let r = post(
        &ui,
        "/api/purge",
        r#"{"older_than": "7d"}"#,
        &[("X-CSRF-Token", &token), ("Origin", &origin)],
    );
    r.expect(200);
    assert_eq!(r.json(), json!({ "purged": 0 }));
    assert_eq!(
        run_sql(&case.url, "SELECT count(*) FROM lease.list()").trim(),
        "1"
    );
}

#[test]
fn off_loopback_without_a_token_the_console_refuses_to_start_before_any_io() {
    let case = Case::new("console_no_token");
    // A database that never answers: had the command connected (it binds after connecting), the
    // server would have seen the connection.
    let silent = SilentServer::start();
    for sub in ["ui", "metrics"] {
        let out = clean_command(&case)
            .args([
                sub,
                "--listen",
                "0.0.0.0:0",
                "--database-url",
                &silent.url(),
            ])
            .env_remove("PGLEASE_UI_TOKEN")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "pglease {sub}: {stderr}");
        assert!(
            stderr.contains("--token-file") && stderr.contains("PGLEASE_UI_TOKEN"),
            "pglease {sub}: {stderr}"
        );
        assert!(out.stdout.is_empty(), "no URL: {:?}", out.stdout);
    }
    assert_eq!(silent.accepted(), 0, "it connected to the database");
}

/// A token file of mode `mode` in the case's directory.
fn token_file(case: &Case, token: &str, mode: u32) -> String {
    let path = case.file(&format!("token-{mode:o}"));
    std::fs::write(&path, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path.display().to_string()
}

const TOKEN: &str = "0f1e2d3c4b5a69788796a5b4c3d2e1f0";

fn basic(user: &str, password: &str) -> String {
    // Base64 by hand: the tests need it for one header.
    const T: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes = format!("{user}:{password}").into_bytes();
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    format!("Basic {out}")
}

/// What a console with a token answers to each kind of credential.
fn check_credentials(ui: &Ui) {
    let leases = ui.path("api/leases");
    let get = |auth: Option<&str>| {
        let mut r = http::request(&ui.addr(), "GET", &leases);
        if let Some(a) = auth {
            r = r.header("Authorization", a);
        }
        r.send()
    };
    let none = get(None);
    none.expect(401);
    assert_eq!(none.json()["error"], json!("unauthorized"));
    get(Some(&format!("Bearer {TOKEN}"))).expect(200);
    get(Some("Bearer wrong-token-wrong-token")).expect(401);
    get(Some(&basic("prometheus", TOKEN))).expect(200);
    get(Some(&basic("anyone-at-all", TOKEN))).expect(200);
    get(Some(&basic(TOKEN, "wrong"))).expect(401);
    http::get(&ui.addr(), &ui.path("metrics")).expect(401);
    // A page without the token: to the login page.
    let page = http::get(&ui.addr(), &ui.path("leases"));
    page.expect(303);
    assert_eq!(page.header("location"), Some("/login"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_file_every_request_needs_the_token_and_the_login_page_takes_it() {
    let case = Case::new("console_token");
    epoch_of(&case, "lease.acquire('behind/login', 'w', '1 hour')");
    let file = token_file(&case, TOKEN, 0o600);
    let ui = Ui::start(&case, &["--token-file", &file]);
    check_credentials(&ui);

    let b = Browser::new("login").await;
    b.goto(&ui.at("leases")).await;
    until("the login page", || async {
        let url = b.client.current_url().await.unwrap().to_string();
        if url.ends_with("/login") {
            Ok(())
        } else {
            Err(url)
        }
    })
    .await;
    let sign_in = |token: &'static str| {
        let b = &b;
        async move {
            let field = b.client.find(Locator::Id("token")).await.expect("#token");
            field.clear().await.unwrap();
            field.send_keys(token).await.unwrap();
            b.client
                .find(Locator::Id("sign-in"))
                .await
                .unwrap()
                .click()
                .await
                .unwrap();
        }
    };
    sign_in("not-the-token-at-all").await;
    until("Wrong token.", || async {
        let text = b.text("form.login p").await;
        if text.as_deref() == Some("Wrong token.") {
            Ok(())
        } else {
            Err(text)
        }
    })
    .await;
    b.screenshot("wrong-token").await;
    sign_in(TOKEN).await;
    until("the console, signed in", || async {
        let k = keys(&b).await;
        if k == ["behind/login"] {
            Ok(())
        } else {
            Err(k)
        }
    })
    .await;
    b.screenshot("").await;
}

#[test]
fn a_token_file_that_group_or_others_may_read_is_refused() {
    let case = Case::new("console_token_mode");
    let file = token_file(&case, TOKEN, 0o644);
    let out = clean_command(&case)
        .args(["ui", "--listen", "127.0.0.1:0", "--database-url", &case.url])
        .args(["--token-file", &file])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("chmod 600"), "{stderr}");
    assert!(out.stdout.is_empty(), "it served: {:?}", out.stdout);
}

#[test]
fn the_token_can_come_from_pglease_ui_token_and_must_not_be_short() {
    let case = Case::new("console_token_env");
    let ui = Ui::command(&case, "ui", &[], &[("PGLEASE_UI_TOKEN", TOKEN)]);
    check_credentials(&ui);
    drop(ui);
    let out = clean_command(&case)
        .args(["ui", "--listen", "127.0.0.1:0", "--database-url", &case.url])
        .env("PGLEASE_UI_TOKEN", "short")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("at least 16"), "{stderr}");
}

#[test]
fn without_a_token_only_a_loopback_host_header_is_answered() {
    let case = Case::new("console_host");
    let ui = Ui::start(&case, &[]);
    for host in ["evil.example", "evil.example:80", "localhost.evil.example"] {
        let r = http::request(&ui.addr(), "GET", &ui.path("api/info"))
            .header("Host", host)
            .send();
        assert_eq!(r.status, 421, "Host: {host}: {r:?}");
    }
    let port = ui.addr().rsplit(':').next().unwrap().to_owned();
    for host in [format!("localhost:{port}"), ui.addr()] {
        http::request(&ui.addr(), "GET", &ui.path("api/info"))
            .header("Host", &host)
            .send()
            .expect(200);
    }
}
