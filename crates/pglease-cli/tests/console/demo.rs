//! `pglease demo --ui`: after the story the workers keep running and the console shows them; Ctrl-C
//! ends it all, the private server too.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{Case, major, send_signal};
use crate::harness::{clean_command, until};
use crate::http;

/// The demo process: interrupted if the test ends first (as Ctrl-C would: its private server is
/// removed then), killed if that does not end it within 30 s.
struct Demo(std::process::Child);

impl Drop for Demo {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            send_signal(self.0.id() as i32, libc::SIGINT);
            let deadline = Instant::now() + Duration::from_secs(30);
            while matches!(self.0.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether a process `pid` exists.
fn alive(pid: i32) -> bool {
    // SAFETY: kill with signal 0 only checks for the process.
    unsafe { libc::kill(pid, 0) == 0 }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_serves_the_console_on_its_live_workers_and_ctrl_c_ends_everything() {
    let case = Case::new("console_demo");
    let mut demo = Demo(
        clean_command(&case)
            .args(["demo", "--ui", "--listen", "127.0.0.1:0", "--ttl", "1s"])
            .args(["--pg-version", &major().to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("pglease demo starts"),
    );
    let child = &mut demo.0;
    // The story, then the console's URL: read on a thread, bounded.
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut story = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(180);
    let url = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                if let Some(url) = line.split("Open the console: ").nth(1) {
                    break url.trim().to_owned();
                }
                story.push(line);
            }
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                let mut stderr = String::new();
                let _ =
                    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr);
                panic!(
                    "the demo printed no console URL\n--- stdout ---\n{}\n--- stderr ---\n{stderr}",
                    story.join("\n"),
                );
            }
        }
    };
    // "PostgreSQL 15.x up on port N (data in DIR)": the private server.
    let data_dir: PathBuf = story
        .iter()
        .find_map(|l| l.split("(data in ").nth(1))
        .map(|d| PathBuf::from(d.trim_end_matches(')')))
        .unwrap_or_else(|| panic!("no data directory in the story:\n{}", story.join("\n")));
    let postmaster: i32 = std::fs::read_to_string(data_dir.join("postmaster.pid"))
        .expect("postmaster.pid")
        .lines()
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let addr = url["http://".len()..].trim_end_matches('/').to_owned();

    let leader = until("the scheduler to have a leader", || async {
        let v = http::get(&addr, "/api/elections").json();
        let leader = v["items"]
            .as_array()
            .and_then(|a| a.iter().find(|e| e["name"] == "scheduler"))
            .map(|e| e["leader"].clone());
        match leader {
            Some(Value::String(l)) => Ok(l),
            _ => Err(v),
        }
    })
    .await;
    assert!(leader.starts_with("sched-"), "{leader}");
    until("orders to have acked messages", || async {
        let r = http::get(&addr, "/api/queues");
        let v: Value = serde_json::from_str(&r.body).unwrap_or(Value::Null);
        let acked: i64 = v["items"]
            .as_array()
            .and_then(|a| a.iter().find(|q| q["name"] == "orders"))
            .and_then(|q| q["partitions"].as_array())
            .map(|ps| ps.iter().filter_map(|p| p["acked"].as_i64()).sum())
            .unwrap_or(0);
        if acked > 0 { Ok(acked) } else { Err(r) }
    })
    .await;

    send_signal(child.id() as i32, libc::SIGINT);
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the demo did not exit within 60 s of SIGINT"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut stderr = String::new();
    let _ = std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr);
    assert_eq!(
        status.code(),
        Some(130),
        "Ctrl-C: exit 130 (128 + SIGINT); {status}\n{stderr}"
    );
    until("the private server to be stopped and removed", || async {
        if !alive(postmaster) && !data_dir.exists() {
            Ok(())
        } else {
            Err((alive(postmaster), data_dir.exists()))
        }
    })
    .await;
}
