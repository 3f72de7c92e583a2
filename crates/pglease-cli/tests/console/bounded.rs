//! A read the database does not answer in time is a notice, not a hung page; `--base-path`.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use serde_json::json;

use crate::common::{Case, psql};
use crate::harness::{Browser, Ui, epoch_of, until};
use crate::leases::keys;

/// A psql session holding `LOCK TABLE lease.leases IN ACCESS EXCLUSIVE MODE` until dropped: every
/// read of the table waits for it.
struct TableLock {
    child: std::process::Child,
}

impl TableLock {
    fn take(case: &Case) -> TableLock {
        let mut child = Command::new(psql())
            .args(["-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", &case.url])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("psql starts");
        let stdin = child.stdin.as_mut().unwrap();
        stdin
            .write_all(
                b"BEGIN;\nLOCK TABLE lease.leases IN ACCESS EXCLUSIVE MODE;\nSELECT 'locked';\n",
            )
            .unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "locked", "the lock was not taken");
        TableLock { child }
    }
}

impl Drop for TableLock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_past_the_statement_timeout_shows_a_notice_instead_of_a_hung_page() {
    let case = Case::new("console_timeout");
    epoch_of(&case, "lease.acquire('slow/key', 'w', '1 hour')");
    let ui = Ui::start(
        &case,
        &["--statement-timeout", "100ms", "--refresh", "250ms"],
    );
    let b = Browser::new("statement-timeout").await;
    b.goto(&ui.at("leases")).await;
    until("the page's data", || async {
        let k = keys(&b).await;
        if k == ["slow/key"] { Ok(()) } else { Err(k) }
    })
    .await;

    let lock = TableLock::take(&case);
    let r = ui.get("api/leases");
    r.expect(503);
    assert_eq!(r.json()["error"], json!("statement_timeout"), "{r:?}");
    let notice = until("the notice", || async {
        let v = b
            .js(
                "const n = document.getElementById('notice'); return [n.hidden, n.textContent];",
                vec![],
            )
            .await;
        match (v[0].as_bool(), v[1].as_str()) {
            (Some(false), Some(t)) if t.contains("statement timeout") => Ok(t.to_owned()),
            _ => Err(v),
        }
    })
    .await;
    assert!(
        notice.contains("showing the last data received"),
        "{notice}"
    );
    assert_eq!(keys(&b).await, ["slow/key"], "the last data stays");
    b.screenshot("").await;

    // The database answers again: the notice goes, the data is current.
    drop(lock);
    epoch_of(&case, "lease.acquire('slow/later', 'w', '1 hour')");
    until("the notice to go and the data to be current", || async {
        let hidden = b
            .js("return document.getElementById('notice').hidden;", vec![])
            .await;
        let k = keys(&b).await;
        if hidden == json!(true) && k == ["slow/key", "slow/later"] {
            Ok(())
        } else {
            Err((hidden, k))
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_base_path_the_page_and_the_api_are_there_and_not_at_the_root() {
    let case = Case::new("console_base_path");
    epoch_of(&case, "lease.acquire('proxied/key', 'w', '1 hour')");
    let ui = Ui::start(&case, &["--base-path", "/pglease"]);
    assert!(ui.url.ends_with("/pglease/"), "{}", ui.url);
    let addr = ui.addr();
    for path in [
        "/pglease/",
        "/pglease/leases",
        "/pglease/queues",
        "/pglease/assets/console.js",
    ] {
        crate::http::get(&addr, path).expect(200);
    }
    let bare = crate::http::get(&addr, "/pglease");
    bare.expect(308);
    assert_eq!(bare.header("location"), Some("/pglease/"));
    crate::http::get(&addr, "/pglease/api/info").expect(200);
    for path in [
        "/",
        "/leases",
        "/api/info",
        "/api/leases",
        "/assets/console.js",
    ] {
        crate::http::get(&addr, path).expect(404);
    }
    let b = Browser::new("base-path").await;
    b.goto(&ui.at("leases")).await;
    until(
        "the key, drawn by the script under the base path",
        || async {
            let k = keys(&b).await;
            if k == ["proxied/key"] { Ok(()) } else { Err(k) }
        },
    )
    .await;
    let links = b
        .js(
            "return [...document.querySelectorAll('nav a')].map((a) => a.getAttribute('href'));",
            vec![],
        )
        .await;
    assert_eq!(
        links,
        json!([
            "/pglease/leases",
            "/pglease/semaphores",
            "/pglease/elections",
            "/pglease/queues"
        ])
    );
    let key_link = b
        .js(
            "return document.querySelector('td.key a').getAttribute('href');",
            vec![],
        )
        .await;
    assert_eq!(key_link, json!("/pglease/lease?key=proxied%2Fkey"));
}

#[test]
fn under_a_base_path_the_login_page_and_its_redirects_stay_under_it() {
    use std::os::unix::fs::PermissionsExt as _;
    let case = Case::new("console_base_login");
    let token = "0123456789abcdef0123456789abcdef";
    let file = case.file("token");
    std::fs::write(&file, token).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let ui = Ui::start(
        &case,
        &[
            "--base-path",
            "/pglease",
            "--token-file",
            file.to_str().unwrap(),
        ],
    );
    let addr = ui.addr();
    let to_login = crate::http::get(&addr, "/pglease/leases");
    to_login.expect(303);
    assert_eq!(to_login.header("location"), Some("/pglease/login"));
    crate::http::get(&addr, "/pglease/login").expect(200);
    let signed_in = crate::http::request(&addr, "POST", "/pglease/login")
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(&format!("token={token}"))
        .send();
    signed_in.expect(303);
    let landing = signed_in.header("location").unwrap().to_owned();
    assert_eq!(landing, "/pglease/");
    let cookie = signed_in.header("set-cookie").unwrap().to_owned();
    assert!(cookie.contains("Path=/pglease"), "{cookie}");
    crate::http::request(&addr, "GET", &landing)
        .header("Cookie", cookie.split(';').next().unwrap())
        .send()
        .expect(200);
}
