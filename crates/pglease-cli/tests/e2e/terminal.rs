//! On a terminal (tmux), a waiting `pglease run` shows a progress line naming the holder, and
//! erases it once the key is acquired.

use std::process::Command;
use std::time::Duration;

use crate::common::{Case, PGLEASE, eventually};

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
        "{PGLEASE} run -k tty-key -t 30s -w 60s --database-url '{}' -- echo CHILD-RAN; \
         echo EXIT=$?; sleep 600",
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
