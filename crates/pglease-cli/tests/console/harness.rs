//! What every console test uses: `pglease ui` (or `pglease metrics`) as a child process killed at
//! the end ([`Ui`]), one chromedriver per test binary ([`driver`]) with one headless Chromium
//! session per test ([`Browser`]), bounded polling ([`until`]), and the screenshots.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

use crate::common::{Case, binary, run_sql};
use crate::http;

/// The bound of every wait: generous, only about correctness (a condition that never comes).
pub const WAIT: Duration = Duration::from_secs(30);

// --- pglease ui ----------------------------------------------------------------------------------

/// A running `pglease ui`/`pglease metrics`: killed (and reaped) when dropped.
pub struct Ui {
    child: Child,
    /// The URL it printed on its stdout's first line (`http://127.0.0.1:PORT/` plus base path).
    pub url: String,
    stderr: PathBuf,
}

impl Ui {
    /// `pglease ui --listen 127.0.0.1:0 --database-url URL EXTRA...` on the case's database.
    pub fn start(case: &Case, extra: &[&str]) -> Ui {
        Ui::command(case, "ui", extra, &[])
    }

    /// `pglease SUBCOMMAND --listen 127.0.0.1:0 --database-url URL EXTRA...` with `env` set.
    pub fn command(case: &Case, sub: &str, extra: &[&str], env: &[(&str, &str)]) -> Ui {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let stderr = case.file(&format!("{sub}-{n}.stderr"));
        let mut cmd = clean_command(case);
        cmd.args([sub, "--listen", "127.0.0.1:0", "--database-url", &case.url])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).expect("stderr file"));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("pglease starts");
        let stdout = child.stdout.take().expect("stdout");
        // The first line, read on a thread so that a console that neither prints nor exits
        // fails the test after WAIT instead of hanging it.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(WAIT).unwrap_or_default();
        let mut ui = Ui {
            child,
            url: line.trim().to_owned(),
            stderr,
        };
        if !ui.url.starts_with("http://127.0.0.1:") {
            let _ = ui.child.kill();
            let _ = ui.child.wait();
            panic!(
                "pglease {sub} {extra:?} printed no URL (got {line:?})\n--- stderr ---\n{}",
                ui.stderr()
            );
        }
        ui
    }

    /// `127.0.0.1:PORT`, for [`http`].
    pub fn addr(&self) -> String {
        self.url["http://".len()..]
            .split('/')
            .next()
            .unwrap()
            .to_owned()
    }

    /// The URL of `path` (relative to the printed URL: `leases?limit=2`).
    pub fn at(&self, path: &str) -> String {
        format!("{}{}", self.url, path.trim_start_matches('/'))
    }

    /// The path part of the printed URL plus `path` (for [`http`]).
    pub fn path(&self, path: &str) -> String {
        let base = &self.url["http://".len() + self.addr().len()..];
        format!("{base}{}", path.trim_start_matches('/'))
    }

    /// `GET path` (relative to the base path).
    pub fn get(&self, path: &str) -> http::Response {
        http::get(&self.addr(), &self.path(path))
    }

    /// What it wrote on stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for Ui {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `pglease` command in the case's directory with no `PG*`/`DATABASE_URL` from the environment.
pub fn clean_command(case: &Case) -> Command {
    let mut cmd = Command::new(binary());
    cmd.current_dir(case.path()).stdin(Stdio::null());
    for (key, _) in std::env::vars_os() {
        let k = key.to_string_lossy();
        if (k.starts_with("PG") && !k.starts_with("PGCLUSTER_")) || k == "DATABASE_URL" {
            cmd.env_remove(&key);
        }
    }
    cmd.env("PGLEASE_LOCAL_DIR", case.file("local"));
    cmd
}

// --- chromedriver and Chromium -------------------------------------------------------------------

/// The chromedriver of this test binary: started once, on a free loopback port, in a process
/// group of its own that is killed (with every Chromium it started) when the binary exits.
pub struct Driver {
    port: u16,
    chromium: PathBuf,
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

static DRIVER_GROUP: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

extern "C" fn kill_driver() {
    let group = DRIVER_GROUP.load(std::sync::atomic::Ordering::SeqCst);
    if group > 0 {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(-group, libc::SIGKILL) };
    }
}

pub fn driver() -> &'static Driver {
    static DRIVER: OnceLock<Driver> = OnceLock::new();
    DRIVER.get_or_init(|| {
        let (Some(chromium), Some(chromedriver)) = (on_path("chromium"), on_path("chromedriver"))
        else {
            panic!(
                "\nthe console's browser tests need Chromium and chromedriver on PATH (Debian: \
                 chromium, chromium-driver): run scripts/test.sh, which installs them when \
                 missing, or apt-get install chromium chromium-driver\n"
            );
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        use std::os::unix::process::CommandExt as _;
        let child = Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("{} does not start: {e}", chromedriver.display()));
        DRIVER_GROUP.store(child.id() as i32, std::sync::atomic::Ordering::SeqCst);
        // SAFETY: registering a plain extern "C" function that never unwinds.
        unsafe { libc::atexit(kill_driver) };
        std::mem::forget(child);
        let addr = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + WAIT;
        loop {
            let ready = std::net::TcpStream::connect(&addr).is_ok()
                && http::get(&addr, "/status").json()["value"]["ready"] == json!(true);
            if ready {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver on {addr} not ready within {WAIT:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Driver { port, chromium }
    })
}

/// A headless Chromium session (its own fresh profile directory), ended when dropped.
pub struct Browser {
    pub client: Client,
    session: String,
    name: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// A new session; `name` names its screenshots.
    pub async fn new(name: &str) -> Browser {
        let d = driver();
        let profile = tempfile::Builder::new()
            .prefix("pglease-console-chromium-")
            .tempdir()
            .expect("a profile directory");
        let args = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1280,900",
            &format!("--user-data-dir={}", profile.path().display()),
        ];
        let caps = json!({
            "browserName": "chrome",
            "unhandledPromptBehavior": "ignore",
            "goog:chromeOptions": { "binary": d.chromium, "args": args },
        });
        let caps = caps.as_object().unwrap().clone().into_iter().collect();
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{}", d.port))
            .await
            .unwrap_or_else(|e| panic!("a Chromium session through chromedriver: {e}"));
        let session = client.session_id().await.unwrap().expect("a session id");
        Browser {
            client,
            session,
            name: name.to_owned(),
            _profile: profile,
        }
    }

    pub async fn goto(&self, url: &str) {
        self.client
            .goto(url)
            .await
            .unwrap_or_else(|e| panic!("goto {url}: {e}"));
    }

    /// Runs `script` (a function body; `arguments` are `args`) in the page.
    pub async fn js(&self, script: &str, args: Vec<Value>) -> Value {
        self.client
            .execute(script, args)
            .await
            .unwrap_or_else(|e| panic!("script {script:?}: {e}"))
    }

    /// `body.dataset.updates` (views drawn since the page loaded).
    pub async fn updates(&self) -> u64 {
        self.js("return Number(document.body.dataset.updates || 0);", vec![])
            .await
            .as_u64()
            .unwrap_or(0)
    }

    /// Waits until the view was drawn from at least one push after this call, and returns the
    /// updates counter then.
    pub async fn next_update(&self) -> u64 {
        let seen = self.updates().await;
        until("the next update of the view", || async {
            let now = self.updates().await;
            if now > seen { Ok(now) } else { Err(now) }
        })
        .await
    }

    /// The text of the first element matching `css`, or None.
    pub async fn text(&self, css: &str) -> Option<String> {
        self.js(
            "const e = document.querySelector(arguments[0]); return e ? e.textContent : null;",
            vec![json!(css)],
        )
        .await
        .as_str()
        .map(str::to_owned)
    }

    /// How many elements match `css`.
    pub async fn count(&self, css: &str) -> usize {
        self.js(
            "return document.querySelectorAll(arguments[0]).length;",
            vec![json!(css)],
        )
        .await
        .as_u64()
        .unwrap_or(0) as usize
    }

    /// Clicks the element matching `css` (found again if the view was redrawn in between).
    pub async fn click(&self, css: &str) {
        let deadline = Instant::now() + WAIT;
        loop {
            let e = match self.client.find(Locator::Css(css)).await {
                Ok(e) => e,
                Err(e) if Instant::now() < deadline && e.is_no_such_element() => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                Err(e) => panic!("find {css}: {e}"),
            };
            match e.click().await {
                Ok(()) => return,
                Err(e) if e.is_stale_element_reference() && Instant::now() < deadline => continue,
                Err(e) => panic!("click {css}: {e}"),
            }
        }
    }

    /// Writes a PNG of the window to the screenshots directory as `<name>[-suffix].png`, after
    /// checking that the view shows no JavaScript `null`, `undefined` or `NaN` as text.
    pub async fn screenshot(&self, suffix: &str) -> PathBuf {
        let text = self.text("#view").await.unwrap_or_default();
        for bad in ["null", "undefined", "NaN"] {
            assert!(!text.contains(bad), "the view shows {bad:?}: {text:?}");
        }
        let png = self.client.screenshot().await.expect("a screenshot");
        let name = if suffix.is_empty() {
            format!("{}.png", self.name)
        } else {
            format!("{}-{suffix}.png", self.name)
        };
        let path = screenshots_dir().join(name);
        std::fs::write(&path, png).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        path
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Ends the session (and its Chromium) also when the test panicked.
        let addr = format!("127.0.0.1:{}", driver().port);
        let _ = std::panic::catch_unwind(|| {
            http::request(&addr, "DELETE", &format!("/session/{}", self.session)).send()
        });
    }
}

/// `$CARGO_TARGET_DIR/console-screenshots` (else the workspace's `target/console-screenshots`).
pub fn screenshots_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let dir = target.join("console-screenshots");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}

// --- waiting -------------------------------------------------------------------------------------

/// Polls `check` every 50 ms until it answers `Ok`, at most [`WAIT`]; panics with `what` and the
/// last `Err` (what was seen instead).
pub async fn until<T, E, F, Fut>(what: &str, mut check: F) -> T
where
    E: std::fmt::Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        match check().await {
            Ok(v) => return v,
            Err(seen) if Instant::now() > deadline => {
                panic!("\ntimed out after {WAIT:?} waiting for {what}\nlast seen: {seen:#?}\n")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Waits until `key`'s grant has lapsed by the server's clock (lease.inspect says not held).
pub async fn until_lapsed(case: &Case, key: &str) {
    until(&format!("{key} to lapse"), || async {
        let held = run_sql(
            &case.url,
            &format!("SELECT held FROM lease.inspect('{key}')"),
        );
        if held.trim() == "f" {
            Ok(())
        } else {
            Err(held)
        }
    })
    .await
}

/// The epoch `sql` (a `lease.acquire(...)`-like call returning a row with `epoch`) granted.
pub fn epoch_of(case: &Case, call: &str) -> i64 {
    let out = run_sql(
        &case.url,
        &format!("SELECT (r).epoch FROM (SELECT {call} AS r) s"),
    );
    out.trim()
        .parse()
        .unwrap_or_else(|_| panic!("{call} granted no epoch: {out:?}"))
}
