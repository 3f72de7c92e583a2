//! A throw-away cluster (and a PgBouncer in front of it) admits only the user who started it:
//! its unix socket is in a directory only the server's account (and root) may enter, and over TCP
//! only `postgres` with the generated password gets in.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

use crate::common::start15;

/// The mode bits of `path`.
fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// `psql -w` (never prompts) with `args`, as `user` through runuser if given, with a bare
/// environment plus `env`.
fn psql(
    cluster: &pgcluster::Cluster,
    user: Option<&str>,
    args: &[&str],
    env: &[(&str, &str)],
) -> Output {
    let psql = cluster.installation().bin("psql");
    let mut cmd = match user {
        Some(u) => {
            let mut c = Command::new("/usr/sbin/runuser");
            c.args(["-u", u, "--"]).arg(&psql);
            c
        }
        None => Command::new(&psql),
    };
    cmd.args(["-X", "-w", "-A", "-t", "-c", "SELECT 1"])
        .args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .current_dir("/");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("psql runs")
}

#[test]
fn a_throwaway_cluster_admits_only_the_user_who_started_it() {
    let cluster = start15();
    assert_eq!(mode(cluster.socket_dir()), 0o700, "socket directory mode");
    let port = cluster.port().to_string();
    let socket = cluster.socket_dir().display().to_string();

    // TCP: no password, no entry; the generated one lets postgres in.
    let tcp = [
        "-h",
        "127.0.0.1",
        "-p",
        &port,
        "-U",
        "postgres",
        "-d",
        "postgres",
    ];
    let out = psql(&cluster, None, &tcp, &[]);
    assert!(!out.status.success(), "TCP without a password connected");
    let out = psql(&cluster, None, &tcp, &[("PGPASSWORD", cluster.password())]);
    assert!(
        out.status.success(),
        "TCP with the password: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The owner reaches the socket.
    let unix = [
        "-h", &socket, "-p", &port, "-U", "postgres", "-d", "postgres",
    ];
    let out = psql(&cluster, None, &unix, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!(
            "not root: cannot try another user; the socket directory's mode is the guarantee"
        );
        return;
    }
    // Another local user reaches neither the socket nor, without the password, the TCP port.
    for args in [&unix[..], &tcp[..]] {
        let out = psql(&cluster, Some("daemon"), args, &[]);
        assert!(
            !out.status.success(),
            "daemon connected with {args:?}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("Permission denied") || stderr.contains("no password supplied"),
            "daemon refused for another reason: {stderr}"
        );
    }
}
