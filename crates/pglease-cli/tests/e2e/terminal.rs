//! On a terminal (tmux), a waiting `pglease run` shows a progress line naming the holder, and
//! erases it once the key is acquired.

use std::process::Command;
use std::time::Duration;

use crate::common::{Case, binary, eventually};

/// A private tmux server (its own socket in the case's directory), killed when dropped.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn new(case: &Case) -> Tmux {
        let found = Command::new("tmux").arg("-V").output();
        assert!(
            found.is_ok_and(|o| o.status.success()),
            "this test needs tmux (apt-get install -y tmux; scripts/test.sh installs it)"
        );
        Tmux {
            socket: case.file("tmux.sock").display().to_string(),
        }
    }

    fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .env_remove("TMUX")
            .output()
            .expect("tmux runs");
        assert!(
            out.status.success(),
            "tmux {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The visible screen.
    fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-t", "t"])
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .arg("kill-server")
            .output();
    }
}

#[test]
fn a_progress_line_shows_while_waiting_and_is_erased_when_done() {
    let case = Case::new("terminal");
    case.pglease(["acquire", "-k", "tty-key", "-o", "holder-x", "-t", "1m"])
        .expect_code(0);
    let tmux = Tmux::new(&case);
    let script = format!(
        "{} run -k tty-key -t 30s -w 60s --database-url '{}' -- echo CHILD-RAN; \
         echo EXIT=$?; sleep 600",
        binary().display(),
        case.url
    );
    tmux.tmux(&[
        "new-session",
        "-d",
        "-s",
        "t",
        "-x",
        "160",
        "-y",
        "20",
        "sh",
        "-c",
        &script,
    ]);

    let waiting = eventually("the progress line", Duration::from_secs(30), || {
        let screen = tmux.screen();
        screen
            .contains("waiting for tty-key: held by holder-x")
            .then_some(screen)
    });
    assert!(
        waiting.contains("lapses in") && waiting.contains("of 1m00s"),
        "\nexpected the progress line to say when the lease lapses and how long we wait\nscreen:\n{waiting}\n"
    );

    case.pglease(["release", "-k", "tty-key", "-o", "holder-x", "-e", "1"])
        .expect_code(0);
    let done = eventually("the run to finish", Duration::from_secs(30), || {
        let screen = tmux.screen();
        screen.contains("EXIT=0").then_some(screen)
    });
    assert!(
        done.contains("CHILD-RAN") && !done.contains("waiting for"),
        "\nexpected the command's output and no trace of the progress line\nscreen:\n{done}\n"
    );
}

#[test]
fn a_narrow_terminal_keeps_the_expiry_and_the_wait_on_the_progress_line() {
    let case = Case::new("terminal_narrow");
    let key = "nightly-report-for-the-accounting-department-of-the-eu-region";
    let owner = "build-host-with-a-very-long-name.example.internal-123456";
    case.pglease(["acquire", "-k", key, "-o", owner, "-t", "1m"])
        .expect_code(0);
    let tmux = Tmux::new(&case);
    let script = format!(
        "{} acquire -k {key} -t 30s -w 60s --database-url '{}'; sleep 600",
        binary().display(),
        case.url
    );
    tmux.tmux(&[
        "new-session",
        "-d",
        "-s",
        "t",
        "-x",
        "80",
        "-y",
        "20",
        "sh",
        "-c",
        &script,
    ]);
    let line = eventually("the progress line", Duration::from_secs(30), || {
        tmux.screen()
            .lines()
            .find(|l| l.contains("held by"))
            .map(str::to_owned)
    });
    assert!(
        line.chars().count() < 80
            && line.contains("(epoch 1), lapses in")
            && line.trim_end().ends_with("of 1m00s"),
        "\nexpected the line to fit 80 columns with the epoch, the expiry and the wait\nline: {line:?}\n"
    );
}

#[test]
fn queue_drop_asks_on_a_terminal_and_drops_only_on_yes() {
    let case = Case::new("terminal_drop");
    case.pglease(["install", "pg_lease_queue"]).expect_code(0);
    case.pglease(["queue", "create", "q", "-p", "1"])
        .expect_code(0);
    let tmux = Tmux::new(&case);
    let drop = format!(
        "{} queue drop q --database-url '{}'; echo EXIT=$?",
        binary().display(),
        case.url
    );
    let script = format!("{drop}; {drop}; sleep 600");
    tmux.tmux(&[
        "new-session",
        "-d",
        "-s",
        "t",
        "-x",
        "160",
        "-y",
        "20",
        "sh",
        "-c",
        &script,
    ]);
    let asked = |n: usize| {
        eventually("the question", Duration::from_secs(30), || {
            let screen = tmux.screen();
            (screen
                .matches("drop queue q with its messages and dead letters? [y/N]")
                .count()
                == n)
                .then_some(screen)
        })
    };
    asked(1);
    tmux.tmux(&["send-keys", "-t", "t", "n", "Enter"]);
    let screen = eventually("the second question", Duration::from_secs(30), || {
        let screen = asked(2);
        screen.contains("EXIT=1").then_some(screen)
    });
    assert!(
        screen.contains("pglease: queue q not dropped") && screen.contains("EXIT=1"),
        "\nexpected a refusal to drop on no\nscreen:\n{screen}\n"
    );
    case.pglease(["queue", "stats", "q"]).expect_code(0);
    tmux.tmux(&["send-keys", "-t", "t", "y", "Enter"]);
    let done = eventually("the drop", Duration::from_secs(30), || {
        let screen = tmux.screen();
        screen.contains("EXIT=0").then_some(screen)
    });
    assert!(done.contains("dropped queue q"), "\nscreen:\n{done}\n");
    case.pglease(["queue", "stats", "q"]).expect_code(1);
}
