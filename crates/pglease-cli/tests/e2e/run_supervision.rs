//! `pglease run` keeping what it must: runs whose default or given owners would collide never share a
//! key, a stalled pglease cannot let its command overlap a successor, and what a command leaves
//! running keeps (or is stopped with) the lease.

use crate::common::{Case, PGLEASE, eventually, expect_eq, read_when_written};
use crate::run::LONG;
use std::process::{Command, Stdio};

/// `/proc/<pid>/stat`'s state letter, `None` once the process is gone (reaped).
fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

/// Whether `pid` is running: exists and is not a zombie.
fn running(pid: i32) -> bool {
    state(pid).is_some_and(|s| s != 'Z' && s != 'X')
}

/// A pid written by a command into `path`.
fn pid_in(path: &std::path::Path) -> i32 {
    let text = read_when_written(path, LONG);
    text.trim()
        .parse()
        .unwrap_or_else(|_| panic!("expected a pid in {}, got {text:?}", path.display()))
}

/// `pglease ARGS` run through `wrapper` (e.g. `unshare --pid --fork`), against `case`'s database.
fn wrapped(case: &Case, wrapper: &[&str], args: &[&str]) -> Command {
    let mut command = Command::new(wrapper[0]);
    command
        .args(&wrapper[1..])
        .arg(PGLEASE)
        .args(args)
        .current_dir(case.path())
        .env("DATABASE_URL", &case.url)
        .env("PGLEASE_LOCAL_DIR", case.file("local"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Whether `unshare --pid --fork` works here (root, or unprivileged user namespaces).
fn pid_namespaces_work() -> bool {
    Command::new("unshare")
        .args(["--pid", "--fork", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn runs_in_pid_namespaces_with_one_host_name_never_share_a_key() {
    // The audit's reproduction: in separate PID namespaces both runs are pid 1 on one host, so an
    // owner made of host name and pid alone is the same for both, and acquire hands the second
    // the first's grant.
    assert!(
        pid_namespaces_work(),
        "this test needs `unshare --pid --fork` (util-linux, as root)"
    );
    let case = Case::new("pidns");
    let dir = case.path().display().to_string();
    let first_script = format!(
        "echo \"$PGLEASE_EPOCH $PGLEASE_OWNER\" > {dir}/first.ran; \
         while [ -d {dir} ] && [ ! -e {dir}/go ]; do sleep 0.02; done"
    );
    let unshare = ["unshare", "--pid", "--fork"];
    let args = |s: &str| {
        vec!["run", "--key", "ctr", "--ttl", "5s", "--", "sh", "-c"]
            .into_iter()
            .map(str::to_string)
            .chain([s.to_string()])
            .collect::<Vec<_>>()
    };
    let first_args = args(&first_script);
    let first_args: Vec<&str> = first_args.iter().map(String::as_str).collect();
    let mut first = wrapped(&case, &unshare, &first_args).spawn().unwrap();
    let first_ran = read_when_written(&case.file("first.ran"), LONG);

    let second_script = format!("echo \"$PGLEASE_EPOCH $PGLEASE_OWNER\" > {dir}/second.ran");
    let second_args = args(&second_script);
    let second_args: Vec<&str> = second_args.iter().map(String::as_str).collect();
    let second = wrapped(&case, &unshare, &second_args).output().unwrap();
    std::fs::write(case.file("go"), "").unwrap();
    let first_status = first.wait().unwrap();

    let stderr = String::from_utf8_lossy(&second.stderr);
    assert_eq!(
        second.status.code(),
        Some(3),
        "\nthe second run must not get the key its twin holds (first ran: {first_ran:?})\n\
         second's stderr:\n{stderr}"
    );
    assert!(
        !case.file("second.ran").exists(),
        "the second command ran while the first held the key: first {first_ran:?}, second {:?}",
        std::fs::read_to_string(case.file("second.ran")).unwrap_or_default()
    );
    assert!(first_status.success(), "the first run: {first_status}");
}

#[test]
fn two_runs_given_one_owner_never_share_a_key() {
    let case = Case::new("same_owner");
    let dir = case.path().display().to_string();
    let mut first = case
        .pglease([
            "run",
            "--key",
            "shared",
            "--owner",
            "twin",
            "--ttl",
            "30s",
            "--",
            "sh",
            "-c",
            &format!("echo ran > {dir}/first.ran; while [ ! -e {dir}/go ]; do sleep 0.02; done"),
        ])
        .spawn();
    first.read_when_written(&case.file("first.ran"), LONG);
    // Without --wait: refused at once. With --wait: still waiting when the first one goes.
    let marker = case.file("second.ran");
    case.pglease([
        "run",
        "--key",
        "shared",
        "--owner",
        "twin",
        "--ttl",
        "30s",
        "--",
        "touch",
        marker.to_str().unwrap(),
    ])
    .expect_code(3);
    case.pglease([
        "run",
        "--key",
        "shared",
        "--owner",
        "twin",
        "--ttl",
        "30s",
        "--wait",
        "500ms",
        "--",
        "touch",
        marker.to_str().unwrap(),
    ])
    .expect_code(3);
    assert!(
        !marker.exists(),
        "a second run with the same --owner ran its command"
    );
    // A lease held by hand under that very owner string is someone else's too.
    std::fs::write(case.file("go"), "").unwrap();
    first.wait(LONG).expect_code(0);
    case.pglease(["acquire", "-k", "shared", "-o", "twin", "-t", "30s"])
        .expect_code(0);
    case.pglease([
        "run",
        "--key",
        "shared",
        "--owner",
        "twin",
        "--ttl",
        "30s",
        "--",
        "touch",
        marker.to_str().unwrap(),
    ])
    .expect_code(3);
    assert!(
        !marker.exists(),
        "a run took over a lease acquired by hand as its owner"
    );
}

#[test]
fn a_stalled_pglease_cannot_overlap_its_successor() {
    // The audit's reproduction: `kill -STOP` of pglease left its command running after the lease
    // lapsed and a successor was granted the key.
    let case = Case::new("stalled");
    let dir = case.path().display().to_string();
    let first = case
        .pglease([
            "run",
            "--key",
            "stall",
            "--ttl",
            "2s",
            "--",
            "sh",
            "-c",
            &format!("echo $$ > {dir}/first.pid; while [ -d {dir} ]; do sleep 0.05; done"),
        ])
        .spawn();
    let command = pid_in(&case.file("first.pid"));
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(first.pid(), libc::SIGSTOP) }, 0);

    // The successor waits for the key and, once granted, records whether the first command is
    // still running (state from /proc; gone or a zombie means killed).
    let successor = case
        .pglease([
            "run",
            "--key",
            "stall",
            "--ttl",
            "30s",
            "--wait",
            "60s",
            "--",
            "sh",
            "-c",
            &format!(
                "s=$(cut -d' ' -f3 /proc/{command}/stat 2>/dev/null); \
                 echo \"${{s:-gone}} $PGLEASE_EPOCH\" > {dir}/successor.saw"
            ),
        ])
        .spawn();
    // Killed while pglease is still stopped: the watchdog, not pglease, did it.
    eventually("the stalled run's command to be killed", LONG, || {
        (!running(command)).then_some(())
    });
    let first_state = state(first.pid());
    let saw = read_when_written(&case.file("successor.saw"), LONG);
    successor.wait(LONG).expect_code(0);
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(first.pid(), libc::SIGCONT) }, 0);
    let out = first.wait(LONG);
    expect_eq("pglease was still stopped", Some('T'), first_state);
    let seen = saw
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string();
    assert!(
        seen == "Z" || seen == "gone",
        "\nthe successor started while the stalled run's command was running (state {seen})\n{}\n",
        out.report()
    );
    out.expect_code(4);
    assert!(
        out.stderr().contains("watchdog"),
        "\nexpected the watchdog to say it killed the command\n{}\n",
        out.report()
    );
}

#[test]
fn what_a_command_leaves_running_keeps_the_lease_until_it_exits() {
    // The audit's reproduction: `run -- sh -c 'sleep 4 &'` released the key at once while the
    // background job kept running. Here the job also leaves the process group (setsid), and a
    // second run waits for the key.
    let case = Case::new("leftovers");
    let dir = case.path().display().to_string();
    let first = case
        .pglease([
            "run",
            "--key",
            "bg",
            "--ttl",
            "2s",
            "--",
            "sh",
            "-c",
            &format!(
                "(while [ -d {dir} ] && [ ! -e {dir}/go ]; do sleep 0.02; done; echo done > {dir}/job.done) & \
                 echo $! > {dir}/job.pid; \
                 setsid sh -c 'echo $$ > {dir}/away.pid; while [ -d {dir} ] && [ ! -e {dir}/go ]; do sleep 0.02; done' &"
            ),
        ])
        .spawn();
    let job = pid_in(&case.file("job.pid"));
    let away = pid_in(&case.file("away.pid"));
    let second = case
        .pglease([
            "run",
            "--key",
            "bg",
            "--ttl",
            "30s",
            "--wait",
            "60s",
            "--",
            "sh",
            "-c",
            &format!(
                "s=$(cut -d' ' -f3 /proc/{away}/stat 2>/dev/null); \
                 echo \"${{s:-gone}}\" > {dir}/second.saw; cat {dir}/job.done >> {dir}/second.saw"
            ),
        ])
        .spawn();
    // The first command (sh) has exited; its job and the process that left its group have not, and
    // the key is still held: the second run is waiting and its command has not started.
    let db = case.url.rsplit('/').next().unwrap().to_string();
    eventually("the second run to wait for the key", LONG, || {
        let waiting = crate::common::cluster()
            .psql(
                &db,
                "SELECT coalesce((SELECT waiting FROM lease.leases WHERE key = 'bg'), false) \
                     OR EXISTS (SELECT FROM pg_stat_activity WHERE datname = current_database() \
                                AND wait_event = 'PgSleep' AND query LIKE '%lease.acquire%')",
            )
            .unwrap();
        (waiting.trim() == "t").then_some(())
    });
    // The lease is still renewed (its expiry moves) after the command itself exited.
    let expiry = || {
        crate::common::cluster()
            .psql(&db, "SELECT expires_at FROM lease.leases WHERE key = 'bg'")
            .unwrap()
    };
    let before = expiry();
    eventually("a renewal after the command exited", LONG, || {
        (expiry() != before).then_some(())
    });
    assert!(running(job) && running(away), "the jobs should still run");
    assert!(
        !case.file("second.saw").exists(),
        "the second command started while the first one's jobs ran"
    );
    std::fs::write(case.file("go"), "").unwrap();
    let first = first.wait(LONG);
    first.expect_code(0);
    assert!(
        first
            .stderr()
            .contains("keeping the lease on bg until the processes it left behind exit"),
        "\nexpected pglease to say why it keeps the lease\n{}\n",
        first.report()
    );
    second.wait(LONG).expect_code(0);
    expect_eq(
        "the second command saw (the job that left the group, the other job's output)",
        "gone\ndone\n".to_string(),
        std::fs::read_to_string(case.file("second.saw")).unwrap(),
    );
}

#[test]
fn descendants_kill_stops_what_the_command_leaves_running() {
    let case = Case::new("kill_leftovers");
    let dir = case.path().display().to_string();
    let out = case
        .pglease([
            "run",
            "--key",
            "bgkill",
            "--ttl",
            "30s",
            "--descendants",
            "kill",
            "--kill-after",
            "200ms",
            "--",
            "sh",
            "-c",
            &format!(
                "(trap '' TERM; while [ -d {dir} ]; do sleep 0.02; done) & echo $! > {dir}/job.pid; \
                 setsid sh -c 'echo $$ > {dir}/away.pid; while [ -d {dir} ]; do sleep 0.02; done' & \
                 while [ ! -s {dir}/away.pid ]; do sleep 0.02; done; exit 7"
            ),
        ])
        .output();
    // The command's own status, after its leftovers were stopped (one ignores SIGTERM).
    out.expect_code(7);
    for file in ["job.pid", "away.pid"] {
        let pid = pid_in(&case.file(file));
        assert!(
            !running(pid),
            "{file}: {pid} still runs after the run ended"
        );
    }
    let state = case
        .pglease(["inspect", "--key", "bgkill", "--json"])
        .expect_code(0)
        .json();
    expect_eq(
        "held after the run",
        &serde_json::Value::Bool(false),
        &state["held"],
    );
}

#[test]
fn a_lost_lease_stops_processes_that_left_the_group() {
    // Loss by a refused renewal: the row is handed to someone else behind the run's back.
    let case = Case::new("lost_leftovers");
    let dir = case.path().display().to_string();
    let run = case
        .pglease([
            "run",
            "--key",
            "lostbg",
            "--ttl",
            "1s",
            "--kill-after",
            "200ms",
            "--",
            "sh",
            "-c",
            &format!(
                "setsid sh -c 'trap \"\" TERM; echo $$ > {dir}/away.pid; \
                 while [ -d {dir} ]; do sleep 0.02; done' >/dev/null 2>&1 & \
                 while [ -d {dir} ]; do sleep 0.02; done"
            ),
        ])
        .spawn();
    let away = pid_in(&case.file("away.pid"));
    let db = case.url.rsplit('/').next().unwrap().to_string();
    crate::common::cluster()
        .psql(
            &db,
            "UPDATE lease.leases SET owner = 'intruder' WHERE key = 'lostbg'",
        )
        .unwrap();
    let out = run.wait(LONG);
    let left_running = running(away);
    if left_running {
        // SAFETY: kill has no memory-safety preconditions; the test started this process.
        unsafe { libc::kill(away, libc::SIGKILL) };
    }
    out.expect_code(4);
    assert!(
        !left_running,
        "the process that left the group still runs\n{}",
        out.report()
    );
}

#[test]
fn a_command_outlives_a_killed_pglease_at_most_until_the_lease_deadline() {
    // pglease is SIGKILLed; the command ignores the SIGTERM it then gets (PR_SET_PDEATHSIG), and so
    // does a process that left its group. The watchdog kills both at the lease's local deadline,
    // before a successor is granted the key.
    let case = Case::new("orphaned");
    let dir = case.path().display().to_string();
    let first = case
        .pglease([
            "run",
            "--key",
            "orphan",
            "--ttl",
            "2s",
            "--",
            "sh",
            "-c",
            &format!(
                "trap '' TERM; \
                 setsid sh -c 'trap \"\" TERM; echo $$ > {dir}/away.pid; \
                 while [ -d {dir} ]; do sleep 0.02; done' >/dev/null 2>&1 & \
                 echo $$ > {dir}/first.pid; while [ -d {dir} ]; do sleep 0.02; done"
            ),
        ])
        .spawn();
    let command = pid_in(&case.file("first.pid"));
    let away = pid_in(&case.file("away.pid"));
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(first.pid(), libc::SIGKILL) }, 0);
    let successor = case
        .pglease([
            "run",
            "--key",
            "orphan",
            "--ttl",
            "30s",
            "--wait",
            "60s",
            "--",
            "sh",
            "-c",
            &format!(
                "for p in {command} {away}; do \
                   s=$(cut -d' ' -f3 /proc/$p/stat 2>/dev/null); echo \"${{s:-gone}}\"; \
                 done > {dir}/saw.tmp; mv {dir}/saw.tmp {dir}/successor.saw"
            ),
        ])
        .spawn();
    let saw = read_when_written(&case.file("successor.saw"), LONG);
    let out = successor.wait(LONG);
    let survivors: Vec<i32> = [command, away]
        .into_iter()
        .filter(|&p| running(p))
        .collect();
    for &pid in &survivors {
        // SAFETY: as above; the test started these processes.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    out.expect_code(0);
    for seen in saw.lines() {
        assert!(
            seen == "Z" || seen == "gone",
            "\nthe successor started while the killed run's processes ran: {saw:?}\n"
        );
    }
    assert!(survivors.is_empty(), "still running: {survivors:?}");
    drop(first);
}

#[test]
fn ctrl_c_while_leftovers_keep_the_lease_says_how_to_stop_them_and_a_second_one_kills_them() {
    let case = Case::new("run_leftover_ctrl_c");
    let (job_file, main_file) = (case.file("job.pid"), case.file("main.pid"));
    // `sh -c` starts `&` jobs with SIGINT ignored: Ctrl-C alone cannot stop this one.
    let script = format!(
        "sleep 300 & echo $! > '{}'; echo $$ > '{}'",
        job_file.display(),
        main_file.display()
    );
    let run = case
        .pglease(["run", "-k", "leftover", "-t", "30s", "--shell", &script])
        .spawn();
    let job = pid_in(&job_file);
    let main = pid_in(&main_file);
    // pglease reaps the command itself: once it is gone, pglease knows it exited.
    eventually("the command to be reaped", LONG, || {
        state(main).is_none().then_some(())
    });
    crate::common::send_signal(run.pid(), libc::SIGINT);
    eventually("the lease to be kept after the first SIGINT", LONG, || {
        let out = case.pglease(["inspect", "leftover", "--json"]).output();
        (out.json()["state"] == "held").then_some(())
    });
    assert!(running(job), "the job ignores SIGINT and should still run");
    crate::common::send_signal(run.pid(), libc::SIGINT);
    let out = run.wait(LONG);
    out.expect_code(0);
    assert!(
        !running(job),
        "the second SIGINT should have killed the job"
    );
    let stderr = out.stderr();
    assert!(
        stderr.contains("SIGINT: passed on to the processes the command left behind")
            && stderr.contains("--descendants kill")
            && stderr.contains("SIGINT again: killing the processes the command left behind"),
        "\n{}\n",
        out.report()
    );
    let after = case
        .pglease(["inspect", "leftover", "--json"])
        .expect_code(0);
    expect_eq(
        "released",
        "not_held",
        after.json()["state"].as_str().unwrap(),
    );
}
