//! The Node.js peers: pg-boss and Graphile Worker, installed at bench time from the npm registry
//! into `target/bench-cache/peers-node/` (never part of this repository), with a Node.js runtime
//! from the same registry (`node-linux-<arch>`: both libraries' current releases need Node 22).
//! Our drivers (bench/peers/*.mjs) are copied next to that `node_modules` and run there; they
//! speak a line protocol on stdin / stdout (bench/peers/common.mjs).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio_postgres::config::Host;

use super::meter::{ClientProc, Meter};
use super::workload::from_flat;
use super::{Job, Outcome};
use crate::server::Db;
use crate::{BoxResult, err};

/// The npm packages, pinned.
#[derive(Clone, Debug, Serialize)]
pub struct NodePins {
    pub pg_boss: String,
    pub graphile_worker: String,
    /// node-postgres, for Graphile Worker's pool (pg-boss brings its own dependency on it).
    pub pg: String,
    /// The Node.js runtime package's version (`node-linux-<arch>@<this>`).
    pub node: String,
}

/// An installed set of packages and the runtime to run the drivers with.
pub(super) struct NodeEnv {
    pub(super) dir: PathBuf,
    pub(super) node: PathBuf,
    pub(super) installed: String,
}

fn npm_arch() -> BoxResult<&'static str> {
    match std::env::consts::ARCH {
        "x86_64" => Ok("x64"),
        "aarch64" => Ok("arm64"),
        other => Err(err(format!(
            "no Node.js runtime package known for this architecture ({other})"
        ))),
    }
}

fn installed_version(dir: &Path, package: &str) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("node_modules").join(package).join("package.json"))
        .ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v["version"].as_str().map(str::to_string)
}

/// Installs the pinned packages (once; again when a pin changes) and copies the drivers in.
pub(super) fn install(repo: &Path, pins: &NodePins) -> BoxResult<NodeEnv> {
    let dir = repo.join("target").join("bench-cache").join("peers-node");
    std::fs::create_dir_all(&dir)?;
    let runtime = format!("node-linux-{}", npm_arch()?);
    let wanted = [
        ("pg-boss", pins.pg_boss.as_str()),
        ("graphile-worker", pins.graphile_worker.as_str()),
        ("pg", pins.pg.as_str()),
        (runtime.as_str(), pins.node.as_str()),
    ];
    let missing: Vec<String> = wanted
        .iter()
        .filter(|(p, v)| installed_version(&dir, p).as_deref() != Some(*v))
        .map(|(p, v)| format!("{p}@{v}"))
        .collect();
    let args: Vec<String> = wanted.iter().map(|(p, v)| format!("{p}@{v}")).collect();
    let installed = if missing.is_empty() {
        format!(
            "npm install --no-save {} (from an earlier run, in the cache)",
            args.join(" ")
        )
    } else {
        // A package.json of our own keeps npm from looking for a project further up.
        std::fs::write(
            dir.join("package.json"),
            "{\"name\": \"pglease-bench-peers\", \"private\": true, \"type\": \"module\"}\n",
        )?;
        eprintln!(
            "  npm install --no-save {} into {}",
            args.join(" "),
            dir.display()
        );
        let out = std::process::Command::new("npm")
            .current_dir(&dir)
            .args([
                "install",
                "--no-save",
                "--no-audit",
                "--no-fund",
                "--ignore-scripts",
                "--loglevel=error",
            ])
            .args(&args)
            .output()
            .map_err(|e| err(format!("running npm (is Node.js's npm installed?): {e}")))?;
        if !out.status.success() {
            return Err(err(format!(
                "npm install {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        for (p, v) in wanted {
            if installed_version(&dir, p).as_deref() != Some(v) {
                return Err(err(format!("npm did not install {p}@{v}")));
            }
        }
        format!("npm install --no-save {}", args.join(" "))
    };
    for script in ["common.mjs", "pgboss.mjs", "graphile.mjs"] {
        std::fs::copy(
            repo.join("bench").join("peers").join(script),
            dir.join(script),
        )?;
    }
    let node = dir
        .join("node_modules")
        .join(&runtime)
        .join("bin")
        .join("node");
    if !node.exists() {
        return Err(err(format!("{} has no bin/node", runtime)));
    }
    Ok(NodeEnv {
        dir,
        node,
        installed,
    })
}

/// The connection settings a driver gets (node-postgres names).
pub(super) fn conn_json(db: &Db) -> serde_json::Value {
    let cfg = &db.config;
    let host = match cfg.get_hosts().first() {
        Some(Host::Unix(p)) => p.to_string_lossy().into_owned(),
        Some(Host::Tcp(h)) => h.clone(),
        None => "localhost".into(),
    };
    serde_json::json!({
        "host": host,
        "port": cfg.get_ports().first().copied().unwrap_or(5432),
        "user": cfg.get_user(),
        "database": cfg.get_dbname(),
        "password": cfg.get_password().map(|p| String::from_utf8_lossy(p).into_owned()),
        "synchronous_commit": "off",
    })
}

/// A running driver.
pub(super) struct Driver {
    name: String,
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    log: PathBuf,
}

impl Driver {
    /// Starts `script` and sends it `config`.
    pub(super) async fn start(
        env: &NodeEnv,
        script: &str,
        config: &serde_json::Value,
    ) -> BoxResult<Driver> {
        let log = env.dir.join(format!("{script}.stderr.log"));
        let mut child = Command::new(&env.node)
            .current_dir(&env.dir)
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log)?)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| err(format!("starting {} {script}: {e}", env.node.display())))?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| err("driver without stdin"))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| err("driver without stdout"))?;
        let mut d = Driver {
            name: script.into(),
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
            log,
        };
        d.send(&config.to_string()).await?;
        Ok(d)
    }

    pub(super) fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    pub(super) async fn send(&mut self, line: &str) -> BoxResult<()> {
        self.stdin.write_all(line.as_bytes()).await?;
        self.stdin.write_all(b"\n").await?;
        self.stdin.flush().await?;
        Ok(())
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }

    /// Waits (at most `timeout`) for the event `event` and returns its line as JSON.
    pub(super) async fn event(
        &mut self,
        event: &str,
        timeout: Duration,
    ) -> BoxResult<serde_json::Value> {
        let line = match tokio::time::timeout(timeout, self.lines.next_line()).await {
            Err(_) => {
                let _ = self.child.start_kill();
                return Err(err(format!(
                    "{}: no \"{event}\" within {} s; its stderr ends:\n{}",
                    self.name,
                    timeout.as_secs(),
                    self.log_tail()
                )));
            }
            Ok(r) => r?,
        };
        let Some(line) = line else {
            let status = self.child.wait().await?;
            return Err(err(format!(
                "{} exited ({status}) before \"{event}\"; its stderr ends:\n{}",
                self.name,
                self.log_tail()
            )));
        };
        let short: String = line.chars().take(300).collect();
        let v: serde_json::Value = serde_json::from_str(&line).map_err(|e| {
            err(format!(
                "{}: not a JSON line ({e}), {} bytes: {short}…",
                self.name,
                line.len()
            ))
        })?;
        match v["event"].as_str() {
            Some(e) if e == event => Ok(v),
            Some("error") => Err(err(format!(
                "{} failed: {}; its stderr ends:\n{}",
                self.name,
                v["message"].as_str().unwrap_or("?"),
                self.log_tail()
            ))),
            _ => Err(err(format!(
                "{}: expected \"{event}\", got {short}",
                self.name
            ))),
        }
    }

    /// Waits for the driver to exit (it cleans up after "done"), at most 60 s.
    pub(super) async fn finish(mut self) -> BoxResult<()> {
        match tokio::time::timeout(Duration::from_secs(60), self.child.wait()).await {
            Ok(status) => {
                let status = status?;
                if !status.success() {
                    return Err(err(format!(
                        "{} exited with {status}; its stderr ends:\n{}",
                        self.name,
                        self.log_tail()
                    )));
                }
                Ok(())
            }
            Err(_) => {
                let _ = self.child.start_kill();
                Err(err(format!("{} did not exit within 60 s", self.name)))
            }
        }
    }
}

/// What a driver reported besides the measurements.
pub(super) struct NodeRun {
    pub(super) outcome: Outcome,
    pub(super) versions: serde_json::Value,
    pub(super) settings: String,
}

/// Runs one system through its driver: setup, preload, drain, cleanup.
pub(super) async fn run(
    job: &Job<'_>,
    env: &NodeEnv,
    script: &str,
    mode: &str,
) -> BoxResult<NodeRun> {
    let cfg = serde_json::json!({
        "conn": conn_json(job.db),
        "queue": job.queue,
        "keys": &*job.keys,
        "backlog": job.backlog,
        "preload_batch": job.preload_batch,
        "consumers": job.consumers,
        "seconds": job.seconds,
        "batch": job.batch,
        "mode": mode,
    });
    let mut d = Driver::start(env, script, &cfg).await?;
    let ready = d.event("ready", Duration::from_secs(180)).await?;
    let proc_ = d.pid().map_or(ClientProc::Unknown, ClientProc::Child);

    let m = Meter::start(job.mon, proc_).await;
    d.send("produce").await?;
    let produced = d.event("produced", Duration::from_secs(900)).await?;
    let produce = m.finish(job.mon, job.backlog).await;

    let m = Meter::start(job.mon, proc_).await;
    d.send("consume").await?;
    let done = d
        .event("done", Duration::from_secs(u64::from(job.seconds) + 180))
        .await?;
    let flat: Vec<u64> = done["records"]
        .as_array()
        .ok_or_else(|| err(format!("{script}: \"done\" without records")))?
        .iter()
        .map(|v| v.as_u64().unwrap_or(u64::MAX))
        .collect();
    let records = from_flat(&flat);
    let consume = m.finish(job.mon, records.len() as u64).await;
    d.finish().await?;
    let num = |v: &serde_json::Value| v.as_f64().unwrap_or(f64::NAN);
    Ok(NodeRun {
        outcome: Outcome {
            produce_seconds: num(&produced["seconds"]),
            produce,
            consumed: records.len() as u64,
            consume_seconds: num(&done["seconds"]),
            consume,
            records,
            empty_reads: done["empty_reads"].as_u64().unwrap_or(0),
            errors: done["errors"].as_u64().unwrap_or(0),
        },
        versions: ready["versions"].clone(),
        settings: ready["settings"].as_str().unwrap_or("").to_string(),
    })
}
