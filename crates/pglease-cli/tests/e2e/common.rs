//! Shared helpers: one private PostgreSQL server per test binary, one temporary directory and one
//! database per case, a builder for `pglease` command lines, and assertions that print the whole
//! command, its exit code, stdout and stderr when they fail.

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use pgcluster::{Cluster, ClusterBuilder};

/// The pglease binary under test.
pub const PGLEASE: &str = env!("CARGO_BIN_EXE_pglease");

/// The binary the cases run: [`PGLEASE`], or `$PGLEASE_E2E_BINARY` (to check that a test fails
/// against an older build).
pub fn binary() -> PathBuf {
    std::env::var_os("PGLEASE_E2E_BINARY")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(PGLEASE))
}

/// The repository's `extensions/pg_lease/` directory (control file and `sql/`).
pub fn extension_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../extensions/pg_lease")
}

/// The PostgreSQL major version under test: `PGLEASE_PG_VERSION`, else 15.
pub fn major() -> u32 {
    std::env::var("PGLEASE_PG_VERSION")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(15)
}

/// Starts a throw-away server with the extension files installed.
pub fn start_cluster() -> Cluster {
    let installation = pgcluster::ensure(major())
        .unwrap_or_else(|e| panic!("PostgreSQL {} is not available: {e}", major()));
    // A private mirror of the installation in this checkout's target/ (see the client tests).
    let mirrors = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/pgcluster-mirrors");
    ClusterBuilder::new(installation)
        .private_mirror(true)
        .cache_dir(mirrors)
        .extension_dir(extension_dir())
        .extension_dir(extension_dir().with_file_name("pg_lease_queue"))
        .start()
        .unwrap_or_else(|e| panic!("could not start PostgreSQL: {e}"))
}

/// The shared server's psql.
pub fn psql() -> PathBuf {
    cluster().installation().bindir().join("psql")
}

/// Runs `sql` with psql on the database of `url`; panics with psql's stderr if it fails.
pub fn run_sql(url: &str, sql: &str) -> String {
    let out = Command::new(psql())
        .args([
            "-X",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-At",
            "-d",
            url,
            "-c",
            sql,
        ])
        .output()
        .expect("psql runs");
    assert!(
        out.status.success(),
        "psql -c {sql:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The server shared by this test binary (killed at process exit by pgcluster).
pub fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(start_cluster)
}

/// One test case: its own temporary directory and its own database with pg_lease installed.
pub struct Case {
    dir: tempfile::TempDir,
    pub url: String,
}

impl Case {
    /// A case on the shared server.
    pub fn new(name: &str) -> Case {
        Case::on(cluster(), name)
    }

    /// A case on `cluster`, with a fresh database where `pglease install` has run.
    pub fn on(cluster: &Cluster, name: &str) -> Case {
        let case = Case::empty_on(cluster, name);
        case.pglease(["install"]).expect_code(0);
        case
    }

    /// A case on the shared server whose database has none of our extensions.
    pub fn empty(name: &str) -> Case {
        Case::empty_on(cluster(), name)
    }

    /// A case on `cluster`, with a fresh database and nothing installed in it.
    pub fn empty_on(cluster: &Cluster, name: &str) -> Case {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let db = format!("{name}_{}", NEXT.fetch_add(1, Ordering::Relaxed));
        cluster
            .create_database(&db)
            .unwrap_or_else(|e| panic!("CREATE DATABASE {db}: {e}"));
        let dir = tempfile::Builder::new()
            .prefix(&format!("pglease-e2e-{name}-"))
            .tempdir()
            .expect("temporary directory");
        // As root the local server runs as nobody, which must reach the case's directory.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        Case {
            dir,
            url: cluster.url(&db),
        }
    }

    /// The case's temporary directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `path()/name`.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A `pglease` command against this case's database (`--database-url` appended for commands
    /// that connect; pass `local` commands through [`Case::bare`]).
    pub fn pglease<I, S>(&self, args: I) -> Cmd
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = self.bare(args);
        cmd.env("DATABASE_URL", &self.url);
        cmd
    }

    /// A `pglease` command with a clean environment: no `PG*`, no `DATABASE_URL`, the local server
    /// directory inside the case's directory, running in that directory.
    pub fn bare<I, S>(&self, args: I) -> Cmd
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut command = Command::new(binary());
        command.args(args).current_dir(self.path());
        for (key, _) in std::env::vars_os() {
            let k = key.to_string_lossy();
            if (k.starts_with("PG") && !k.starts_with("PGCLUSTER_")) || k == "DATABASE_URL" {
                command.env_remove(&key);
            }
        }
        command.env("PGLEASE_LOCAL_DIR", self.file("local"));
        command.stdin(Stdio::null());
        Cmd { command }
    }
}

/// A `pglease` command line being built.
pub struct Cmd {
    command: Command,
}

impl Cmd {
    /// Appends arguments.
    pub fn args<I, S>(&mut self, args: I) -> &mut Cmd
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.command.args(args);
        self
    }

    /// Sets an environment variable.
    pub fn env(&mut self, key: &str, value: impl AsRef<OsStr>) -> &mut Cmd {
        self.command.env(key, value);
        self
    }

    /// Runs to completion.
    pub fn output(&mut self) -> Out {
        let output = self
            .command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .expect("pglease runs");
        Out {
            line: self.describe(),
            output,
        }
    }

    /// Runs to completion and checks the exit code.
    pub fn expect_code(&mut self, code: i32) -> Out {
        let out = self.output();
        out.expect_code(code);
        out
    }

    /// Starts it in the background with stdout and stderr captured.
    pub fn spawn(&mut self) -> Running {
        let child = self
            .command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("pglease starts");
        Running {
            line: self.describe(),
            child: Some(child),
        }
    }

    /// The command line, for failure messages.
    pub fn describe(&self) -> String {
        let args: Vec<String> = self
            .command
            .get_args()
            .map(|a| shell_word(&a.to_string_lossy()))
            .collect();
        format!("pglease {}", args.join(" "))
    }
}

fn shell_word(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@%,".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// A finished command.
pub struct Out {
    line: String,
    pub output: Output,
}

impl Out {
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }

    /// The exit code (`None` if killed by a signal).
    pub fn code(&self) -> Option<i32> {
        self.output.status.code()
    }

    /// Everything about the run, for failure messages.
    pub fn report(&self) -> String {
        format!(
            "command: {}\nstatus:  {}\n--- stdout ---\n{}--- stderr ---\n{}--------------",
            self.line,
            self.output.status,
            self.stdout(),
            self.stderr()
        )
    }

    /// Panics with a readable report unless the exit code is `code`.
    pub fn expect_code(&self, code: i32) {
        if self.code() != Some(code) {
            panic!(
                "\nexpected exit code {code}, got {:?}\n{}\n",
                self.code(),
                self.report()
            );
        }
    }

    /// stdout parsed as one JSON document; panics with a readable report otherwise.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout()).unwrap_or_else(|e| {
            panic!(
                "\nexpected one JSON document on stdout, got a parse error: {e}\n{}\n",
                self.report()
            )
        })
    }
}

/// A command running in the background; killed if dropped unfinished.
pub struct Running {
    line: String,
    child: Option<Child>,
}

impl Running {
    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("running").id() as i32
    }

    /// Waits for it to exit, at most `timeout` (then kills it and panics with its output).
    pub fn wait(mut self, timeout: Duration) -> Out {
        let mut child = self.child.take().expect("running");
        let deadline = Instant::now() + timeout;
        while child.try_wait().expect("try_wait").is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let output = child.wait_with_output().expect("output");
                panic!(
                    "\n{} did not exit within {timeout:?}\n{}\n",
                    self.line,
                    Out {
                        line: self.line.clone(),
                        output
                    }
                    .report()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let output = child.wait_with_output().expect("output");
        Out {
            line: self.line.clone(),
            output,
        }
    }
}

impl Running {
    /// The contents of `path` once it is completely written (see [`read_when_written`]); panics with
    /// this command's output if it exits first or `timeout` passes.
    pub fn read_when_written(&mut self, path: &Path, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(text) = std::fs::read_to_string(path)
                .ok()
                .filter(|s| s.ends_with('\n'))
            {
                return text;
            }
            let child = self.child.as_mut().expect("running");
            let exited = child.try_wait().expect("try_wait").is_some();
            if exited || Instant::now() > deadline {
                let mut child = self.child.take().expect("running");
                let _ = child.kill();
                let output = child.wait_with_output().expect("output");
                let why = if exited { "exited" } else { "timed out" };
                panic!(
                    "\nwaiting for {} to be written, the command {why}\n{}\n",
                    path.display(),
                    Out {
                        line: self.line.clone(),
                        output
                    }
                    .report()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Polls `what` every 20 ms until it returns `Some`, at most `timeout`; panics naming `waiting_for`.
pub fn eventually<T>(
    waiting_for: &str,
    timeout: Duration,
    mut what: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = what() {
            return v;
        }
        if Instant::now() > deadline {
            panic!("\ntimed out after {timeout:?} waiting for {waiting_for}\n");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The contents of `path` once it exists and ends with a newline (a complete write).
pub fn read_when_written(path: &Path, timeout: Duration) -> String {
    eventually(
        &format!("{} to be written", path.display()),
        timeout,
        || {
            std::fs::read_to_string(path)
                .ok()
                .filter(|s| s.ends_with('\n'))
        },
    )
}

/// Panics with both values, labelled, unless they are equal.
#[track_caller]
pub fn expect_eq<T: PartialEq + std::fmt::Debug>(what: &str, expected: T, got: T) {
    if expected != got {
        panic!("\n{what}\n  expected: {expected:?}\n  got:      {got:?}\n");
    }
}

/// A server that accepts connections (TCP on 127.0.0.1, and a unix socket `.s.PGSQL.<port>` in
/// its own directory) and reads what clients send, but never writes a byte: a hung PostgreSQL as a
/// client sees it. Counts the connections it accepted, so a test can wait until a client is in.
pub struct SilentServer {
    pub port: u16,
    socket_dir: tempfile::TempDir,
    accepted: std::sync::Arc<AtomicU32>,
}

impl SilentServer {
    pub fn start() -> SilentServer {
        use std::io::Read;
        use std::sync::Arc;
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = tcp.local_addr().unwrap().port();
        let socket_dir = tempfile::Builder::new()
            .prefix("pglease-e2e-silent-")
            .tempdir()
            .unwrap();
        let unix = std::os::unix::net::UnixListener::bind(
            socket_dir.path().join(format!(".s.PGSQL.{port}")),
        )
        .expect("bind a unix socket");
        let accepted = Arc::new(AtomicU32::new(0));
        fn swallow(mut stream: impl Read + Send + 'static) {
            std::thread::spawn(move || {
                let mut buf = [0u8; 1024];
                while matches!(stream.read(&mut buf), Ok(n) if n > 0) {}
            });
        }
        let count = accepted.clone();
        std::thread::spawn(move || {
            for stream in tcp.incoming().flatten() {
                count.fetch_add(1, Ordering::SeqCst);
                swallow(stream);
            }
        });
        let count = accepted.clone();
        std::thread::spawn(move || {
            for stream in unix.incoming().flatten() {
                count.fetch_add(1, Ordering::SeqCst);
                swallow(stream);
            }
        });
        SilentServer {
            port,
            socket_dir,
            accepted,
        }
    }

    /// A TCP URL to it.
    pub fn url(&self) -> String {
        format!("postgresql://app@127.0.0.1:{}/app", self.port)
    }

    /// Its unix socket directory.
    pub fn socket_dir(&self) -> &Path {
        self.socket_dir.path()
    }

    /// How many connections it has accepted so far.
    pub fn accepted(&self) -> u32 {
        self.accepted.load(Ordering::SeqCst)
    }
}

/// Sends `sig` to `pid`.
pub fn send_signal(pid: i32, sig: i32) {
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0, "kill({pid}, {sig})");
}
