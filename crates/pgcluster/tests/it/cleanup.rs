use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;

use crate::common::{pid_gone, start15};

#[test]
fn drop_kills_server_and_removes_directory() {
    let cluster = start15();
    let pid = cluster.postmaster_pid().unwrap() as i32;
    let data = cluster.data_dir().to_path_buf();
    let base = data.parent().unwrap().to_path_buf();
    assert!(data.join("PG_VERSION").is_file());
    drop(cluster);
    assert!(pid_gone(pid), "postmaster {pid} survived drop");
    assert!(!base.exists(), "{} survived drop", base.display());
}

#[test]
fn drop_after_crash_removes_directory_and_shared_memory() {
    let mut cluster = start15();
    let base = cluster.data_dir().parent().unwrap().to_path_buf();
    let pid_file = std::fs::read_to_string(cluster.data_dir().join("postmaster.pid")).unwrap();
    let shmid: i32 = pid_file
        .lines()
        .nth(6)
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    cluster.crash().unwrap();
    assert!(shm_exists(shmid), "a killed server leaves its SysV segment");
    drop(cluster);
    assert!(!base.exists());
    assert!(!shm_exists(shmid), "SysV segment {shmid} leaked");
}

fn shm_exists(shmid: i32) -> bool {
    // SAFETY: shmid_ds is plain old data and a valid out-pointer for IPC_STAT.
    unsafe {
        let mut ds: libc::shmid_ds = std::mem::zeroed();
        libc::shmctl(shmid, libc::IPC_STAT, &mut ds) == 0
    }
}

/// Environment variable that turns [`stale_cluster_child`] into a real helper process.
const STALE_CHILD_ENV: &str = "PGCLUSTER_TEST_STALE_CHILD";

/// Helper run in a child process by [`clusters_of_killed_processes_are_swept`]: starts a
/// cluster, reports its pid and directory on stdout, then waits to be SIGKILLed.
#[test]
#[ignore = "helper process for clusters_of_killed_processes_are_swept"]
fn stale_cluster_child() {
    if std::env::var_os(STALE_CHILD_ENV).is_none() {
        return;
    }
    let cluster = start15();
    println!(
        "STALE {} {}",
        cluster.postmaster_pid().unwrap(),
        cluster.data_dir().parent().unwrap().display()
    );
    std::io::Write::flush(&mut std::io::stdout()).unwrap();
    loop {
        std::thread::park();
    }
}

#[test]
fn clusters_of_killed_processes_are_swept() {
    use std::io::BufRead;
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "cleanup::stale_cluster_child",
            "--ignored",
            "--nocapture",
        ])
        .env(STALE_CHILD_ENV, "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let line = stdout
        .lines()
        .map(Result::unwrap)
        .find(|l| l.starts_with("STALE "))
        .expect("helper reports its cluster");
    let mut parts = line.split_whitespace().skip(1);
    let pid: i32 = parts.next().unwrap().parse().unwrap();
    let dir = PathBuf::from(parts.next().unwrap());
    child.kill().unwrap(); // SIGKILL: no Drop, no atexit
    child.wait().unwrap();
    assert!(!pid_gone(pid), "server outlives its killed owner");
    assert!(dir.exists());

    pgcluster::sweep_stale();
    assert!(pid_gone(pid), "stale postmaster {pid} not killed");
    assert!(
        !dir.exists(),
        "stale directory {} not removed",
        dir.display()
    );
}

#[test]
fn panic_with_a_live_cluster_still_cleans_up() {
    let mut seen: Option<(i32, PathBuf)> = None;
    let result = catch_unwind(AssertUnwindSafe(|| {
        let cluster = start15();
        seen = Some((
            cluster.postmaster_pid().unwrap() as i32,
            cluster.data_dir().to_path_buf(),
        ));
        panic!("deliberate test panic with a running cluster");
    }));
    assert!(result.is_err());
    let (pid, data) = seen.expect("cluster was started");
    assert!(pid_gone(pid), "postmaster {pid} survived the panic");
    assert!(!data.exists(), "{} survived the panic", data.display());
}

/// Environment variable that turns [`static_cluster_child`] into a real helper process.
const STATIC_CHILD_ENV: &str = "PGCLUSTER_TEST_STATIC_CHILD";

/// Helper run in a child process by the `static_cluster_*` tests: starts a cluster held in
/// a `static` (never dropped), reports it, and returns so the process exits normally.
#[test]
#[ignore = "helper process for the static_cluster_* tests"]
fn static_cluster_child() {
    static CLUSTER: std::sync::OnceLock<pgcluster::Cluster> = std::sync::OnceLock::new();
    if std::env::var_os(STATIC_CHILD_ENV).is_none() {
        return;
    }
    let cluster = CLUSTER.get_or_init(start15);
    println!(
        "STATIC {} {}",
        cluster.postmaster_pid().unwrap(),
        cluster.data_dir().parent().unwrap().display()
    );
}

/// Runs [`static_cluster_child`] with extra environment; returns its cluster's pid and dir.
fn run_static_child(env: &[(&str, &str)]) -> (i32, PathBuf, String) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "cleanup::static_cluster_child",
            "--ignored",
            "--nocapture",
        ])
        .env(STATIC_CHILD_ENV, "1")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("STATIC "))
        .expect("helper reports its cluster");
    let mut parts = line.split_whitespace().skip(1);
    let pid = parts.next().unwrap().parse().unwrap();
    let dir = PathBuf::from(parts.next().unwrap());
    (pid, dir, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn static_cluster_is_cleaned_up_at_exit() {
    let (pid, dir, _) = run_static_child(&[]);
    assert!(
        pid_gone(pid),
        "postmaster {pid} of a static cluster survived exit"
    );
    assert!(!dir.exists(), "{} survived exit", dir.display());
}

#[test]
fn static_cluster_directory_is_kept_with_pgcluster_keep() {
    let (pid, dir, stderr) = run_static_child(&[("PGCLUSTER_KEEP", "1")]);
    assert!(pid_gone(pid), "postmaster {pid} survived exit");
    assert!(
        dir.join("data/PG_VERSION").is_file(),
        "kept data dir missing"
    );
    assert!(stderr.contains(&dir.display().to_string()), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}
