//! The embedded default: without a URL, commands start a private local server on demand, later
//! invocations reuse it, and `local stop` stops it.

use std::time::Duration;

use serde_json::Value;

use crate::common::{Case, eventually, expect_eq, send_signal};

/// Stops the case's local server however the test ends.
struct StopOnDrop<'a>(&'a Case);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        let _ = self.0.bare(["local", "stop"]).output();
    }
}

fn pid_alive(pid: i64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false)
}

#[test]
fn the_local_server_starts_on_demand_is_reused_and_stops() {
    let case = Case::new("local");
    let _stop = StopOnDrop(&case);
    let local_dir = case.file("local").display().to_string();

    let before = case
        .bare(["local", "status", "--json"])
        .expect_code(0)
        .json();
    expect_eq(
        "running before any command",
        &Value::Bool(false),
        &before["running"],
    );
    expect_eq("dir", &Value::from(local_dir.clone()), &before["dir"]);

    // A lease command without a URL starts the server and uses it.
    let granted = case
        .bare([
            "acquire",
            "-k",
            "local-key",
            "-o",
            "me",
            "-t",
            "1m",
            "--json",
        ])
        .expect_code(0)
        .json();
    expect_eq(
        "acquired on the local server",
        &Value::Bool(true),
        &granted["acquired"],
    );

    let first = case
        .bare(["local", "status", "--json"])
        .expect_code(0)
        .json();
    expect_eq(
        "running after a command",
        &Value::Bool(true),
        &first["running"],
    );
    let pid = first["pid"].as_i64().expect("a pid while running");

    // A second invocation reuses the same server (same postmaster) and sees the same lease.
    let again = case
        .bare(["local", "start", "--json"])
        .expect_code(0)
        .json();
    expect_eq("pid after a second start", Some(pid), again["pid"].as_i64());
    expect_eq("url after a second start", &first["url"], &again["url"]);
    let state = case
        .bare(["inspect", "-k", "local-key", "--json"])
        .expect_code(0)
        .json();
    expect_eq(
        "holder seen by a later invocation",
        &Value::from("me"),
        &state["owner"],
    );

    // `local url` is a URL that pglease (and libpq) can use: status's, with the password.
    let url = case
        .bare(["local", "url"])
        .expect_code(0)
        .stdout()
        .trim()
        .to_string();
    let password = std::fs::read_to_string(case.file("local/password")).unwrap();
    expect_eq(
        "local url",
        first["url"]
            .as_str()
            .unwrap()
            .replace("postgres@", &format!("postgres:{}@", password.trim())),
        url.clone(),
    );
    let status = case
        .bare(["status", "--json", "--database-url", &url])
        .expect_code(0)
        .json();
    expect_eq(
        "pg_lease in the local server",
        &Value::from(pglease::VERSION),
        &status["pg_lease"]["version"],
    );
    expect_eq(
        "leases via the url",
        Some(1),
        status["leases"]["held"].as_i64(),
    );

    case.bare(["local", "stop"]).expect_code(0);
    let after = case
        .bare(["local", "status", "--json"])
        .expect_code(0)
        .json();
    expect_eq("running after stop", &Value::Bool(false), &after["running"]);
    eventually("the postmaster to exit", Duration::from_secs(30), || {
        (!pid_alive(pid)).then_some(())
    });

    // Data persists: the next command restarts the server and the lease is still there.
    let state = case
        .bare(["inspect", "-k", "local-key", "--json"])
        .expect_code(0)
        .json();
    expect_eq(
        "holder after a restart",
        &Value::from("me"),
        &state["owner"],
    );
}

#[test]
fn concurrent_first_starts_create_one_server() {
    let case = Case::new("local_race");
    let _stop = StopOnDrop(&case);
    let starters: Vec<_> = (0..3)
        .map(|_| case.bare(["local", "start", "--json"]).spawn())
        .collect();
    let pids: Vec<Option<i64>> = starters
        .into_iter()
        .map(|s| {
            let out = s.wait(Duration::from_secs(120));
            out.expect_code(0);
            out.json()["pid"].as_i64()
        })
        .collect();
    assert!(pids[0].is_some(), "a pid: {pids:?}");
    expect_eq(
        "every starter sees the same server",
        &pids[..1].repeat(3),
        &pids,
    );
    let status = case.bare(["status", "--json"]).expect_code(0).json();
    expect_eq(
        "pg_lease in the local server",
        &Value::from(pglease::VERSION),
        &status["pg_lease"]["version"],
    );
}

/// The local server's pid and socket directory, starting it if needed.
fn started(case: &Case) -> (i32, std::path::PathBuf) {
    let status = case
        .bare(["local", "start", "--json"])
        .expect_code(0)
        .json();
    let pid = status["pid"].as_i64().expect("a pid") as i32;
    (pid, case.file("local").join("run"))
}

/// Resumes a SIGSTOPped process however the test ends.
struct ContOnDrop(i32);

impl Drop for ContOnDrop {
    fn drop(&mut self) {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

#[test]
fn a_stopped_local_server_bounds_and_signals_end_every_command() {
    let case = Case::new("local_sigstop");
    let _stop = StopOnDrop(&case);
    let (pid, _) = started(&case);
    send_signal(pid, libc::SIGSTOP);
    let _cont = ContOnDrop(pid);

    // Bounded: the commands give up with the connect bound.
    let running: Vec<_> = [
        &["local", "url"][..],
        &["local", "start"],
        &["inspect", "k"],
        &["acquire", "-k", "k", "-t", "1m"],
    ]
    .into_iter()
    .map(|args| case.bare(args).env("PGCONNECT_TIMEOUT", "2").spawn())
    .collect();
    for command in running {
        let out = command.wait(Duration::from_secs(60));
        out.expect_code(1);
        assert!(
            out.stderr().contains("no answer within 2.0s"),
            "\nexpected the connect bound to end it\n{}\n",
            out.report()
        );
    }

    // Interruptible: with no bound at all, SIGTERM and SIGINT end them at once.
    for sig in [libc::SIGTERM, libc::SIGINT] {
        for args in [&["local", "url"][..], &["status"]] {
            // Observable: the postmaster's listen queue holds one more connection (it never
            // accepts: connections of earlier commands stay queued).
            let before = listen_queue(pid);
            let running = case.bare(args).env("PGCONNECT_TIMEOUT", "0").spawn();
            eventually("the command to connect", Duration::from_secs(30), || {
                (listen_queue(pid) > before).then_some(())
            });
            send_signal(running.pid(), sig);
            running.wait(Duration::from_secs(20)).expect_code(128 + sig);
        }
    }
}

/// How many connections wait in the listen queue of the unix socket of postmaster `pid`
/// (`ss -x`: Recv-Q of the listening socket).
fn listen_queue(pid: i32) -> u32 {
    let out = std::process::Command::new("ss")
        .args(["-x", "-l", "-n", "-p"])
        .output()
        .expect("ss runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(&format!("pid={pid},")))
        .filter_map(|l| l.split_whitespace().nth(2)?.parse::<u32>().ok())
        .sum()
}

/// Runs `psql` as `user` (with `runuser`) against the local server's socket, without a password
/// prompt; returns its output.
fn psql_as(user: &str, socket_dir: &std::path::Path) -> std::process::Output {
    std::process::Command::new("/usr/sbin/runuser")
        .args(["-u", user, "--", "/usr/bin/psql", "-X", "-w", "-h"])
        .arg(socket_dir)
        .args([
            "-p", "5432", "-U", "postgres", "-d", "postgres", "-c", "SELECT 1",
        ])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .current_dir("/")
        .output()
        .expect("runuser runs")
}

#[test]
fn only_the_user_who_started_the_local_server_can_connect() {
    let case = Case::new("local_private");
    let _stop = StopOnDrop(&case);
    let (_, socket_dir) = started(&case);
    let local = case.file("local");

    let mode = |p: &std::path::Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    };
    expect_eq("socket directory mode", 0o700, mode(&socket_dir));
    expect_eq("password file mode", 0o600, mode(&local.join("password")));
    let hba = std::fs::read_to_string(local.join("data/pg_hba.conf")).unwrap();
    assert!(
        !hba.lines()
            .any(|l| !l.starts_with('#') && l.split_whitespace().any(|w| w == "trust")),
        "pg_hba.conf trusts someone:\n{hba}"
    );

    // The invoking user connects: through pglease, and with the URL `local url` prints.
    let url = case.bare(["local", "url"]).expect_code(0).stdout();
    let status = case
        .bare(["status", "--json", "--database-url", url.trim()])
        .expect_code(0)
        .json();
    expect_eq("local", &Value::Bool(false), &status["local"]);
    let listen = std::process::Command::new("/usr/bin/psql")
        .args(["-X", "-A", "-t", "-c", "SHOW listen_addresses", url.trim()])
        .output()
        .unwrap();
    expect_eq(
        "no TCP listener",
        "",
        String::from_utf8_lossy(&listen.stdout).trim(),
    );
    // Without the password, even the server's owner is refused.
    let no_password = case.file("local").join("run");
    let out = std::process::Command::new("/usr/bin/psql")
        .args(["-X", "-w", "-h"])
        .arg(&no_password)
        .args(["-U", "postgres", "-d", "postgres", "-c", "SELECT 1"])
        .env_remove("PGPASSWORD")
        .output()
        .unwrap();
    assert!(!out.status.success(), "connected without the password");

    if unsafe { libc::geteuid() } != 0 {
        eprintln!("not root: cannot try another user; the modes above are the guarantee");
        return;
    }
    // As root the server runs as nobody; any other user, nobody included, is refused.
    for user in ["daemon", "nobody"] {
        let version = std::process::Command::new("/usr/sbin/runuser")
            .args(["-u", user, "--", "/usr/bin/psql", "--version"])
            .output()
            .unwrap();
        assert!(version.status.success(), "{user} cannot run psql at all");
        let out = psql_as(user, &socket_dir);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "{user} connected to the local server: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        // Refused by the socket's permissions or by authentication, not by anything else.
        assert!(
            stderr.contains("Permission denied")
                || stderr.contains("no password supplied")
                || stderr.contains("password authentication failed"),
            "{user}: unexpected failure: {stderr}"
        );
    }
}

/// The pids of `pid`'s children that are not zombies.
fn live_children(pid: i64) -> Vec<i64> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i64>().ok())
        .filter(|child| {
            std::fs::read_to_string(format!("/proc/{child}/stat")).is_ok_and(|stat| {
                let after: Vec<&str> = stat[stat.rfind(')').unwrap() + 1..]
                    .split_whitespace()
                    .collect();
                after.first() != Some(&"Z") && after.get(1) == Some(&pid.to_string().as_str())
            })
        })
        .collect()
}

#[test]
fn the_next_command_recovers_the_local_server_a_second_after_kill_9() {
    let case = Case::new("local_crash");
    let _stop = StopOnDrop(&case);
    case.bare(["acquire", "-k", "before-crash", "-o", "me", "-t", "1h"])
        .expect_code(0);
    let status = case
        .bare(["local", "status", "--json"])
        .expect_code(0)
        .json();
    let pid = status["pid"].as_i64().expect("running");
    send_signal(pid as i32, libc::SIGKILL);
    eventually(
        "the postmaster to die (it may stay a zombie nobody reaps)",
        Duration::from_secs(10),
        || (!pid_alive(pid)).then_some(()),
    );
    // Its backends notice the death and exit too (they may also stay as unreaped zombies).
    eventually(
        "the crashed postmaster's children to exit",
        Duration::from_secs(10),
        || live_children(pid).is_empty().then_some(()),
    );
    // The next command restarts it (crash recovery); the lease survived the crash.
    let out = case
        .bare(["inspect", "before-crash", "--json"])
        .expect_code(0);
    expect_eq(
        "the lease after recovery",
        "held",
        out.json()["state"].as_str().unwrap(),
    );
    assert!(out.stderr().lines().count() <= 1, "{}", out.report());
    let after = case
        .bare(["local", "status", "--json"])
        .expect_code(0)
        .json();
    assert!(after["pid"].as_i64().is_some_and(|p| p != pid), "{after}");
}
