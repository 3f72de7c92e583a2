//! Streaming standbys of a running cluster: making one, promoting it, waiting for replay.
//!
//! A standby is an ordinary [`Cluster`] (its own temporary directory, data directory, port and
//! socket directory) whose data directory was copied from the primary with
//! `pg_basebackup -R`, so it starts in recovery and streams WAL from the primary's unix socket
//! as the primary's owner role (`postgres`), under an `application_name` of its own. Every wait
//! here polls the servers' own state (`pg_stat_replication`, `pg_is_in_recovery()`,
//! `pg_last_wal_replay_lsn()`) and is bounded in time.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::builder;
use crate::cluster::Cluster;
use crate::error::{Error, IoContext, Result};
use crate::user;

/// How long [`ReplicaBuilder::start`] waits for the standby to stream, and
/// [`Cluster::promote`] for the promotion to end.
const REPLICATION_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one query of a wait may take (the server may be paused).
const QUERY_TIMEOUT: Duration = Duration::from_secs(30);
/// How often to poll the servers while waiting.
const POLL: Duration = Duration::from_millis(10);
/// Numbers the default application names of standbys made by this process.
static NEXT_STANDBY: AtomicU32 = AtomicU32::new(1);

/// Builder for a streaming standby of a running [`Cluster`], from [`Cluster::replica`].
///
/// The standby runs the primary's installation as the same OS user, with the primary's
/// settings (except `synchronous_standby_names`) and then those given with
/// [`setting`](Self::setting), and streams from the primary's unix socket and current port:
/// restart the primary on another port and the standby no longer reaches it.
#[derive(Debug)]
#[must_use = "a ReplicaBuilder does nothing until start()"]
pub struct ReplicaBuilder<'a> {
    primary: &'a Cluster,
    synchronous: bool,
    application_name: Option<String>,
    settings: Vec<(String, String)>,
}

impl Cluster {
    /// Starts configuring a streaming standby of this (running) cluster; see
    /// [`ReplicaBuilder`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo() -> pgcluster::Result<()> {
    /// use std::time::Duration;
    ///
    /// let mut primary = pgcluster::ClusterBuilder::for_major(15)?.start()?;
    /// let standby = primary.replica().synchronous(true).start()?;
    /// primary.psql("postgres", "CREATE TABLE t AS SELECT 1 AS v")?;
    /// standby.wait_for_replay(&primary, Duration::from_secs(10))?;
    /// assert_eq!(standby.psql("postgres", "SELECT v FROM t")?, "1\n");
    ///
    /// primary.kill_all()?;
    /// standby.promote()?;
    /// assert_eq!(standby.timeline()?, 2);
    /// standby.psql("postgres", "INSERT INTO t VALUES (2)")?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn replica(&self) -> ReplicaBuilder<'_> {
        ReplicaBuilder {
            primary: self,
            synchronous: false,
            application_name: None,
            settings: Vec::new(),
        }
    }

    /// Whether the server is in recovery (`pg_is_in_recovery()`): true for a standby until it
    /// is promoted.
    ///
    /// # Errors
    ///
    /// [`Error::Command`] if the server cannot be queried (e.g. it is not running).
    pub fn is_in_recovery(&self) -> Result<bool> {
        Ok(scalar(self, "SELECT pg_is_in_recovery()")? == "t")
    }

    /// The server's current WAL timeline: 1 for a fresh cluster, one more after each
    /// promotion.
    ///
    /// On a primary it is the timeline of the current WAL segment
    /// (`pg_walfile_name(pg_current_wal_lsn())`), current at once after a promotion (unlike
    /// `pg_control_checkpoint()`, stale until the next checkpoint). On a standby it is the
    /// timeline of the WAL it receives (`pg_stat_wal_receiver.received_tli`), or, with no WAL
    /// receiver running, that of its last restartpoint.
    ///
    /// # Errors
    ///
    /// [`Error::Command`] if the server cannot be queried.
    pub fn timeline(&self) -> Result<u32> {
        let text = scalar(
            self,
            "SELECT CASE WHEN pg_is_in_recovery() THEN \
               coalesce((SELECT received_tli FROM pg_stat_wal_receiver WHERE received_tli > 0), \
                        (pg_control_checkpoint()).timeline_id)::bigint \
             ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint \
             END",
        )?;
        text.parse().map_err(|_| Error::Replication {
            reason: format!(
                "unexpected timeline {text:?} from {}",
                self.data_dir().display()
            ),
        })
    }

    /// Promotes this standby (`pg_ctl promote`) and waits until it has left recovery
    /// (`pg_is_in_recovery()` is false), at most 60 s. It then accepts writes, on a new
    /// [`timeline`](Self::timeline).
    ///
    /// # Errors
    ///
    /// [`Error::Replication`] if the server is not in recovery, [`Error::Command`] if
    /// `pg_ctl promote` fails, [`Error::Timeout`] if recovery does not end in time.
    pub fn promote(&self) -> Result<()> {
        if !self.is_in_recovery()? {
            return Err(Error::Replication {
                reason: format!(
                    "cannot promote {}: it is not a standby",
                    self.data_dir().display()
                ),
            });
        }
        let pg_ctl = self.installation().bin("pg_ctl");
        let mut cmd = Command::new(&pg_ctl);
        // -W: we wait ourselves, for what matters to clients (the end of recovery).
        cmd.args(["promote", "-W", "-s", "-D"])
            .arg(self.data_dir())
            .stdin(Stdio::null());
        run(cmd, self, "pg_ctl promote")?;
        wait_until(
            "the promoted standby to leave recovery",
            REPLICATION_TIMEOUT,
            || Ok(!self.is_in_recovery()?),
        )
    }

    /// Waits until this standby has replayed everything `primary` had written when called
    /// (`pg_last_wal_replay_lsn()` reaches the primary's `pg_current_wal_lsn()`), at most
    /// `timeout`. Afterwards every transaction the primary committed before the call is
    /// visible on the standby.
    ///
    /// # Errors
    ///
    /// [`Error::Replication`] if this cluster is not in recovery, [`Error::Timeout`] if replay
    /// does not get there in time, [`Error::Command`] if a server cannot be queried.
    pub fn wait_for_replay(&self, primary: &Cluster, timeout: Duration) -> Result<()> {
        let target = scalar(primary, "SELECT pg_current_wal_lsn()")?;
        let sql = format!("SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn() >= '{target}'");
        wait_until(
            &format!("the standby to replay the primary's WAL up to {target}"),
            timeout,
            || match scalar(self, &sql)?.as_str() {
                "t|t" => Ok(true),
                "t|f" => Ok(false),
                _ => Err(Error::Replication {
                    reason: format!(
                        "{} is not a standby: nothing to replay",
                        self.data_dir().display()
                    ),
                }),
            },
        )
    }
}

impl<'a> ReplicaBuilder<'a> {
    /// Makes the standby synchronous (default: asynchronous): [`start`](Self::start) adds its
    /// application name to the primary's `synchronous_standby_names` (`ALTER SYSTEM`, kept in
    /// the primary's `postgresql.auto.conf`, a priority list when there are several) and
    /// reloads the primary, so commits on the primary wait for the standby (as far as the
    /// primary's `synchronous_commit` says: `on` by default, a flush on the standby).
    pub fn synchronous(mut self, synchronous: bool) -> ReplicaBuilder<'a> {
        self.synchronous = synchronous;
        self
    }

    /// Sets the standby's `application_name` (what the primary's `pg_stat_replication` and
    /// `synchronous_standby_names` call it): ASCII letters, digits and `_`, at most 63
    /// characters. Default: `pgcluster_standby_<n>`, numbered in this process.
    pub fn application_name(mut self, name: impl Into<String>) -> ReplicaBuilder<'a> {
        self.application_name = Some(name.into());
        self
    }

    /// Sets server parameter `name` to `value` on the standby (as
    /// [`ClusterBuilder::setting`](crate::ClusterBuilder::setting); replaces the value
    /// inherited from the primary).
    pub fn setting(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        let (name, value) = (name.into(), value.into());
        match self.settings.iter_mut().find(|(k, _)| *k == name) {
            Some(slot) => slot.1 = value,
            None => self.settings.push((name, value)),
        }
        self
    }

    /// Copies the primary with `pg_basebackup -R` (as the server's OS user) into a fresh
    /// temporary directory, starts the standby and returns once the primary reports it
    /// `streaming` (and, if [`synchronous`](Self::synchronous), as its `sync` standby), at most
    /// 60 s after it started.
    ///
    /// The standby inherits the primary's `pg_hba.conf` (replication only on the unix socket,
    /// only for `postgres`) and its `postgresql.auto.conf` minus `synchronous_standby_names`,
    /// so that, once promoted, it does not wait for standbys it does not have.
    ///
    /// # Errors
    ///
    /// [`Error::Replication`] if the primary is not running, has `wal_level=minimal`, the name
    /// is not valid, or `synchronous_standby_names` is fixed on the primary's command line;
    /// [`Error::Command`] if `pg_basebackup` fails; [`Error::Timeout`] if the standby does not
    /// stream in time; the errors of [`ClusterBuilder::start`](crate::ClusterBuilder::start).
    pub fn start(self) -> Result<Cluster> {
        let primary = self.primary;
        let refuse = |reason: String| Err(Error::Replication { reason });
        if !primary.is_running() {
            return refuse(format!(
                "cannot make a standby of {}: the server is not running",
                primary.data_dir().display()
            ));
        }
        if scalar(primary, "SHOW wal_level")? == "minimal" {
            return refuse("cannot make a standby of a primary with wal_level=minimal".into());
        }
        let name = match self.application_name {
            Some(name) => name,
            None => format!(
                "pgcluster_standby_{}",
                NEXT_STANDBY.fetch_add(1, Ordering::Relaxed)
            ),
        };
        if name.is_empty()
            || name.len() > 63
            || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            return refuse(format!(
                "invalid application_name {name:?} (ASCII letters, digits, _; at most 63)"
            ));
        }

        let mut settings: Vec<(String, String)> = primary
            .settings()
            .iter()
            .filter(|(k, _)| k != "synchronous_standby_names")
            .cloned()
            .collect();
        for (k, v) in self.settings {
            match settings.iter_mut().find(|(name, _)| *name == k) {
                Some(slot) => slot.1 = v,
                None => settings.push((k, v)),
            }
        }
        let mut standby = builder::new_cluster(
            primary.installation().clone(),
            primary.server_installation().clone(),
            primary.server_user().cloned(),
            settings,
        )?;
        standby.set_application_name(name.clone());
        let conninfo = base_backup(primary, &standby, &name)?;
        // pg_basebackup -R writes every option its libpq knows; the walreceiver may load an
        // older libpq (PyPI builds of 16+ fall back to the system's), which rejects options it
        // does not know. Ours names only what the standby needs.
        let auto_conf = standby.data_dir().join("postgresql.auto.conf");
        rewrite_settings(
            &auto_conf,
            &["synchronous_standby_names", "primary_conninfo"],
            &[("primary_conninfo", &conninfo)],
        )?;
        standby.start()?;

        if self.synchronous {
            add_synchronous_standby(primary, &name)?;
        }
        let sync = if self.synchronous {
            " AND sync_state = 'sync'"
        } else {
            ""
        };
        let sql = format!(
            "SELECT count(*) FROM pg_stat_replication \
             WHERE application_name = '{name}' AND state = 'streaming'{sync}"
        );
        wait_until(
            &format!("standby {name} to stream from the primary"),
            REPLICATION_TIMEOUT,
            || Ok(scalar(primary, &sql)? == "1"),
        )?;
        Ok(standby)
    }
}

/// Runs `pg_basebackup -R` from `primary`'s socket into `standby`'s (empty) data directory;
/// returns the conninfo the standby streams with.
fn base_backup(primary: &Cluster, standby: &Cluster, name: &str) -> Result<String> {
    let conninfo = format!(
        "host={} port={} user=postgres application_name={name}",
        crate::cluster::conninfo_quote(&primary.socket_dir().to_string_lossy()),
        primary.port()
    );
    let program = primary.installation().bin("pg_basebackup");
    let mut cmd = Command::new(&program);
    cmd.arg("-D")
        .arg(standby.data_dir())
        .arg("-d")
        .arg(&conninfo)
        .args(["-R", "-X", "stream", "--checkpoint=fast", "--no-sync"])
        .stdin(Stdio::null());
    run(cmd, standby, "pg_basebackup")?;
    Ok(conninfo)
}

/// Adds `name` to `primary`'s `synchronous_standby_names` and waits until commits on the
/// primary wait for it.
fn add_synchronous_standby(primary: &Cluster, name: &str) -> Result<()> {
    let source = scalar(
        primary,
        "SELECT source FROM pg_settings WHERE name = 'synchronous_standby_names'",
    )?;
    if source == "command line" {
        return Err(Error::Replication {
            reason: "synchronous_standby_names is set on the primary's command line \
                     (ClusterBuilder::setting); ALTER SYSTEM cannot change it"
                .into(),
        });
    }
    let current = scalar(primary, "SHOW synchronous_standby_names")?;
    let wanted = if current.is_empty() {
        format!("\"{name}\"")
    } else if current.contains('(') {
        return Err(Error::Replication {
            reason: format!(
                "cannot add a standby to synchronous_standby_names = {current:?} \
                 (only a plain list is extended)"
            ),
        });
    } else {
        format!("{current}, \"{name}\"")
    };
    scalar(
        primary,
        &format!("ALTER SYSTEM SET synchronous_standby_names = '{wanted}'"),
    )?;
    scalar(primary, "SELECT pg_reload_conf()")?;
    // A new session sees the new value once the postmaster has re-read its configuration, and
    // the postmaster signals its children before it forks another backend. Commits wait only
    // once the checkpointer has re-read it too (it publishes whether synchronous standbys are
    // defined); it handles a pending reload before serving a CHECKPOINT request.
    wait_until(
        "the primary to reload synchronous_standby_names",
        REPLICATION_TIMEOUT,
        || Ok(scalar(primary, "SHOW synchronous_standby_names")? == wanted),
    )?;
    scalar(primary, "CHECKPOINT").map(drop)
}

/// Removes every `name = ...` line of the names in `drop` from a configuration file (e.g.
/// `postgresql.auto.conf`), then appends `name = 'value'` for each of `add`.
fn rewrite_settings(path: &Path, drop: &[&str], add: &[(&str, &str)]) -> Result<()> {
    let text = fs::read_to_string(path).ctx("reading", path)?;
    let names = |line: &str, name: &str| {
        line.trim_start()
            .strip_prefix(name)
            .is_some_and(|rest| rest.trim_start().starts_with('='))
    };
    let mut kept: String = text
        .lines()
        .filter(|line| !drop.iter().any(|name| names(line, name)))
        .map(|line| format!("{line}\n"))
        .collect();
    for (name, value) in add {
        kept.push_str(&format!("{name} = '{}'\n", value.replace('\'', "''")));
    }
    if kept != text {
        fs::write(path, kept).ctx("writing", path)?;
    }
    Ok(())
}

/// Runs a server-side program as `cluster`'s OS user; [`Error::Command`] on failure.
fn run(mut cmd: Command, cluster: &Cluster, what: &str) -> Result<()> {
    user::prepare_server_command(&mut cmd, cluster.server_user(), cluster.base_dir());
    let program = cmd.get_program().to_owned();
    let out = cmd.output().ctx("running", Path::new(&program))?;
    if out.status.success() {
        return Ok(());
    }
    let mut stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    stderr.push_str(&String::from_utf8_lossy(&out.stdout));
    Err(Error::Command {
        program: what.to_string(),
        status: out.status.to_string(),
        stderr,
    })
}

/// The single value `sql` returns on `cluster` (psql's unaligned output, trimmed).
///
/// Unlike [`Cluster::psql`], bounded in time: a paused or hung server is an
/// [`Error::Timeout`] after 30 s, not a hang.
fn scalar(cluster: &Cluster, sql: &str) -> Result<String> {
    let psql = cluster.installation().bin("psql");
    let mut child = cluster
        .psql_command("postgres", sql)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ctx("running", &psql)?;
    if !crate::cluster::wait_child(&mut child, QUERY_TIMEOUT) {
        let _ = child.kill();
        let _ = child.wait();
        return Err(Error::Timeout {
            what: format!("psql ({sql}) on {}", cluster.data_dir().display()),
            seconds: QUERY_TIMEOUT.as_secs(),
        });
    }
    // The output is a line or two: it fit in the pipes while psql ran.
    let out = child.wait_with_output().ctx("running", &psql)?;
    if !out.status.success() {
        return Err(Error::Command {
            program: format!("psql ({sql})"),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Polls `done` every 10 ms until it returns true; [`Error::Timeout`] after `timeout`.
fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> Result<bool>) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if done()? {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Error::Timeout {
                what: what.to_string(),
                seconds: timeout.as_secs(),
            });
        }
        std::thread::sleep(POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::rewrite_settings;

    #[test]
    fn rewrites_only_the_named_settings() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("postgresql.auto.conf");
        std::fs::write(
            &path,
            "# Do not edit\nsynchronous_standby_names = '\"a\"'\nsynchronous_standby_names_x = 1\n\
             primary_conninfo = 'host=/s sslnegotiation=postgres'\n",
        )
        .unwrap();
        rewrite_settings(
            &path,
            &["synchronous_standby_names", "primary_conninfo"],
            &[("primary_conninfo", "host='/a b' port=5")],
        )
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "# Do not edit\nsynchronous_standby_names_x = 1\nprimary_conninfo = 'host=''/a b'' port=5'\n"
        );
    }
}
