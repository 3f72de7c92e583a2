//! The record of a run: `results.json` (everything, percentiles only, no raw logs), `summary.md`
//! (the tables BENCHMARKS.md quotes) and the plots.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::client::ClientResult;
use crate::env::{Git, Machine};
use crate::interleave::GroupResult;
use crate::plan::Plan;
use crate::sections::{ScalePoint, StormResult};
use crate::server::Server;
use crate::stats::LoadAvg;
use crate::variants::VariantsResult;
use crate::wake::WakeResult;
use crate::{BoxResult, pgbench, plot};

/// The targets of issue 6: W1 (prepared, synchronous_commit=off) lease / floor at 1 and 4 clients.
pub const TARGETS: [(u32, f64); 2] = [(1, 1.15), (4, 1.30)];

#[derive(Serialize)]
pub struct Report {
    pub tool: &'static str,
    pub command: String,
    pub started_utc: String,
    pub suite_seconds: f64,
    pub plan: Plan,
    pub target: String,
    pub machine: Machine,
    pub git: Git,
    pub postgres: serde_json::Value,
    pub pgbench: String,
    pub load_before: LoadAvg,
    pub load_after: LoadAvg,
    /// The target check (W1 lease vs floor, many 1 s alternating runs).
    pub targets: Option<Vec<GroupResult>>,
    pub cycle: Option<Vec<GroupResult>>,
    pub contend: Option<Vec<GroupResult>>,
    pub storm: Option<StormResult>,
    pub scale: Option<Vec<ScalePoint>>,
    pub wake: Option<WakeResult>,
    pub client: Option<ClientResult>,
    pub variants: Option<VariantsResult>,
    pub queue: Option<crate::queue::QueueResult>,
    pub renew_many: Option<crate::renew_many::RenewManyResult>,
    pub console: Option<crate::console::ConsoleResult>,
    pub hotpath: Option<crate::hotpath::HotpathResult>,
    pub peers: Option<crate::peers::PeersResult>,
}

impl Report {
    pub async fn new(
        command: &str,
        started_utc: String,
        plan: &Plan,
        repo: &Path,
        server: &Server,
    ) -> BoxResult<Report> {
        let c = crate::server::connect(&server.db(crate::server::DB_MAIN).config, None).await?;
        let postgres = crate::server::postgres_info(&c).await?;
        let target = match &server.cluster {
            Some(cl) => format!(
                "private cluster (pgcluster), PostgreSQL {} from {}, unix socket, server run as an unprivileged user",
                cl.version(),
                cl.installation().bindir().display()
            ),
            None => "existing database (--database-url)".into(),
        };
        Ok(Report {
            tool: "pglease-bench",
            command: command.into(),
            started_utc,
            suite_seconds: 0.0,
            plan: plan.clone(),
            target,
            machine: Machine::capture(),
            git: Git::capture(repo),
            postgres,
            pgbench: pgbench::version(&server.pgbench).await,
            load_before: LoadAvg::default(),
            load_after: LoadAvg::default(),
            targets: None,
            cycle: None,
            contend: None,
            storm: None,
            scale: None,
            wake: None,
            client: None,
            variants: None,
            queue: None,
            renew_many: None,
            console: None,
            hotpath: None,
            peers: None,
        })
    }

    pub fn write(&self, dir: &Path) -> BoxResult<()> {
        std::fs::write(
            dir.join("results.json"),
            serde_json::to_string_pretty(self)?,
        )?;
        let plots = match plot::all(self, dir) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("plots not written: {e}");
                Vec::new()
            }
        };
        std::fs::write(dir.join("summary.md"), self.markdown(&plots))?;
        Ok(())
    }

    fn setting(&self, name: &str) -> String {
        self.postgres["settings"][name]
            .as_str()
            .unwrap_or("?")
            .to_string()
    }

    pub fn markdown(&self, plots: &[plot::Plot]) -> String {
        let mut m = String::new();
        let w = &mut m;
        let _ = writeln!(w, "# pglease-bench results, {}\n", self.started_utc);
        let _ = writeln!(
            w,
            "- command: `{}` ({}; suite time {:.0} s)",
            self.command,
            if self.plan.quick { "quick" } else { "full" },
            self.suite_seconds
        );
        let _ = writeln!(
            w,
            "- git: `{}`{}",
            self.git.commit,
            if self.git.dirty_files > 0 {
                format!(" + {} uncommitted files", self.git.dirty_files)
            } else {
                String::new()
            }
        );
        let _ = writeln!(
            w,
            "- server: {}",
            self.postgres["version"].as_str().unwrap_or("?")
        );
        let _ = writeln!(w, "- target: {}", self.target);
        let _ = writeln!(
            w,
            "- settings: fsync={}, synchronous_commit={} (server default; each run sets it per session), shared_buffers={}, wal_level={}, full_page_writes={}, autovacuum={}, jit={}",
            self.setting("fsync"),
            self.setting("synchronous_commit"),
            self.setting("shared_buffers"),
            self.setting("wal_level"),
            self.setting("full_page_writes"),
            self.setting("autovacuum"),
            self.setting("jit")
        );
        let _ = writeln!(
            w,
            "- machine: {} ({} cores, {:.0} GiB), kernel {}, {}",
            self.machine.cpu_model,
            self.machine.cores,
            self.machine.mem_total_gib,
            self.machine.kernel,
            self.machine.os
        );
        let _ = writeln!(
            w,
            "- load average (1 min): {:.2} before, {:.2} after (other jobs share this machine)",
            self.load_before.one, self.load_after.one
        );
        let _ = writeln!(
            w,
            "- {}; every ratio is the median of per-round ratios of interleaved runs (min–max in brackets); time ratio = tps(baseline) / tps(variant)\n",
            self.pgbench
        );

        if self.cycle.is_some() || self.targets.is_some() {
            let groups = self.cycle.as_deref().unwrap_or_default();
            let _ = writeln!(
                w,
                "## Targets (W1 cycle, prepared, synchronous_commit=off, lease / floor)\n"
            );
            let _ = writeln!(
                w,
                "| clients | target | time ratio, {} alternating 1 s runs (verdict) | server CPU per transaction, same runs | W1 group: time ratio, alternating rounds | W1 group: mixed runs, mean latency ratio | verdict |\n| --- | --- | --- | --- | --- | --- | --- |",
                self.plan.target_rounds
            );
            for (clients, target) in TARGETS {
                let pair = self
                    .targets
                    .iter()
                    .flatten()
                    .find(|g| g.clients == clients)
                    .and_then(|g| g.ratio("lease", "floor"));
                let grp = groups
                    .iter()
                    .find(|g| g.sync_commit == "off" && g.clients == clients)
                    .and_then(|g| g.ratio("lease", "floor"));
                let basis = pair.or(grp).map(|r| r.time.median);
                let verdict = match basis {
                    Some(x) if x <= target => "met",
                    Some(_) => "missed",
                    None => "–",
                };
                let text = |r: Option<&crate::interleave::Ratio>,
                            f: fn(&crate::interleave::Ratio) -> String| {
                    r.map_or("–".to_string(), f)
                };
                let _ = writeln!(
                    w,
                    "| {clients} | ≤ {target:.2}× | {} | {} | {} | {} | {verdict} |",
                    text(pair, |r| r.time.ratio_text()),
                    text(pair, |r| r.cpu.ratio_text()),
                    text(grp, |r| r.time.ratio_text()),
                    text(grp, |r| r.mixed_mean.ratio_text()),
                );
            }
            let _ = writeln!(
                w,
                "\ntime ratio = tps(floor) / tps(lease) of adjacent runs; mixed = every W1 variant in one pgbench run, a script picked at random per transaction, ratio of mean transaction times (at 1 client the same quantity as the time ratio, with drift cancelled inside each run; with more clients than cores it understates the cost, since a transaction's time then includes the queue it shares with the others).\n"
            );
            if !groups.is_empty() {
                group_tables(
                    w,
                    "W1 cycle: acquire + renew + release in one transaction, private key per client",
                    groups,
                );
            }
        }
        if let Some(groups) = &self.contend {
            group_tables(
                w,
                "W2 contend: one acquire attempt on one of 4 shared keys (autocommit)",
                groups,
            );
        }
        if let Some(c) = &self.client {
            let _ = writeln!(
                w,
                "## Client overhead (one connection, autocommit, synchronous_commit=off)\n"
            );
            let _ = writeln!(
                w,
                "| variant | cycles/s | acquire p50 | renew p50 | release p50 | acquire p99 |\n| --- | --- | --- | --- | --- | --- |"
            );
            for v in &c.variants {
                let _ = writeln!(
                    w,
                    "| {} | {:.0} | {} µs | {} µs | {} µs | {} µs |",
                    v.name,
                    v.cycles_per_second.median,
                    v.acquire.p50_us,
                    v.renew.p50_us,
                    v.release.p50_us,
                    v.acquire.p99_us
                );
            }
            let _ = writeln!(w);
            for r in &c.ratios {
                let _ = writeln!(
                    w,
                    "- {} / {}: time per cycle {}, cycle p50 {}",
                    r.variant,
                    r.vs,
                    r.time.ratio_text(),
                    r.p50.ratio_text()
                );
            }
            let _ = writeln!(w);
        }
        if let Some(wk) = &self.wake {
            let _ = writeln!(
                w,
                "## Wake-up latency ({} samples per mode; lapse modes: ttl {} ms)\n",
                wk.samples, wk.lapse_ttl_ms
            );
            let _ = writeln!(
                w,
                "| mode | p50 | p90 | p99 | max | failures | how |\n| --- | --- | --- | --- | --- | --- | --- |"
            );
            for md in &wk.modes {
                let _ = writeln!(
                    w,
                    "| {} | {} | {} | {} | {} | {} | {}{} |",
                    md.name,
                    ms(md.latency.p50_us),
                    ms(md.latency.p90_us),
                    ms(md.latency.p99_us),
                    ms(md.latency.max_us),
                    md.failures,
                    md.what,
                    md.notified
                        .as_ref()
                        .map(|n| format!(
                            "; notification {} after the release was sent (p50)",
                            ms(n.p50_us)
                        ))
                        .unwrap_or_default()
                );
            }
            let _ = writeln!(w);
        }
        if let Some(v) = &self.variants {
            crate::variants::markdown(w, v);
        }
        if let Some(s) = &self.storm {
            let _ = writeln!(
                w,
                "## Renew storm ({} held keys, {} clients, synchronous_commit=off, {} s segments alternating lease / floor)\n",
                s.keys, s.clients, s.segment_seconds
            );
            let _ = writeln!(
                w,
                "| variant | tps (median of segments) | p50 | p99 |\n| --- | --- | --- | --- |"
            );
            for v in [&s.lease, &s.floor] {
                let _ = writeln!(
                    w,
                    "| {} | {:.0} | {} µs | {} µs |",
                    v.name, v.tps.median, v.latency.p50_us, v.latency.p99_us
                );
            }
            let _ = writeln!(
                w,
                "\nlease / floor, time per renew: {}; server CPU per renew: {}. Keys still held afterwards: {} of {}.\n",
                s.ratio.time.ratio_text(),
                s.ratio.cpu.ratio_text(),
                s.held_after,
                s.keys
            );
            let _ = writeln!(
                w,
                "| table | HOT share of updates | heap before → after | index before → after | max dead tuples | autovacuums |\n| --- | --- | --- | --- | --- | --- |"
            );
            if let (Some(a), Some(b)) = (s.samples.first(), s.samples.last()) {
                for (i, t) in b.tables.iter().enumerate() {
                    let t0 = &a.tables[i];
                    let hot = s
                        .hot_share
                        .iter()
                        .find(|(n, _)| *n == t.table)
                        .map_or(f64::NAN, |x| x.1);
                    let dead = s
                        .samples
                        .iter()
                        .filter_map(|x| x.tables.get(i))
                        .map(|x| x.dead_tuples)
                        .max()
                        .unwrap_or(0);
                    let _ = writeln!(
                        w,
                        "| {} | {:.1} % | {} → {} | {} → {} | {} | {} |",
                        t.table,
                        hot * 100.0,
                        kib(t0.heap_bytes),
                        kib(t.heap_bytes),
                        kib(t0.index_bytes),
                        kib(t.index_bytes),
                        dead,
                        t.autovacuums - t0.autovacuums
                    );
                }
            }
            let _ = writeln!(w);
        }
        if let Some(points) = &self.scale {
            let _ = writeln!(
                w,
                "## Scale in keys (1 client, synchronous_commit=off, every call a grant of a random preloaded key)\n"
            );
            let _ = writeln!(
                w,
                "| keys | lease p50 | lease p99 | floor p50 | floor p99 | lease / floor, mixed mean | lease / floor, rounds (tps) | table size lease / floor |\n| --- | --- | --- | --- | --- | --- | --- | --- |"
            );
            for p in points {
                let (l, f) = (p.group.variant("lease"), p.group.variant("floor"));
                if let (Some(l), Some(f), Some(r)) = (l, f, p.group.ratio("lease", "floor")) {
                    let _ = writeln!(
                        w,
                        "| {} | {} µs | {} µs | {} µs | {} µs | {} | {} | {} / {} |",
                        p.keys,
                        l.latency.p50_us,
                        l.latency.p99_us,
                        f.latency.p50_us,
                        f.latency.p99_us,
                        r.mixed_mean.ratio_text(),
                        r.time.ratio_text(),
                        kib(p.lease_table_bytes),
                        kib(p.floor_table_bytes)
                    );
                }
            }
            let _ = writeln!(w);
        }
        if let Some(q) = &self.queue {
            crate::queue::markdown(w, q);
        }
        if let Some(r) = &self.renew_many {
            crate::renew_many::markdown(w, r);
        }
        if let Some(c) = &self.console {
            crate::console::markdown(w, c);
        }
        if let Some(h) = &self.hotpath {
            crate::hotpath::markdown(w, h);
        }
        if let Some(p) = &self.peers {
            crate::peers::markdown(w, p);
        }
        if !plots.is_empty() {
            let _ = writeln!(w, "## Plots\n");
            for p in plots {
                let _ = writeln!(
                    w,
                    "- {}: [{}]({}){}",
                    p.title,
                    p.svg,
                    p.svg,
                    p.png
                        .as_ref()
                        .map(|png| format!(", [{png}]({png})"))
                        .unwrap_or_default()
                );
            }
        }
        m
    }
}

fn group_tables(w: &mut String, title: &str, groups: &[GroupResult]) {
    let _ = writeln!(w, "## {title}\n");
    for sync in ["off", "on"] {
        let gs: Vec<&GroupResult> = groups.iter().filter(|g| g.sync_commit == sync).collect();
        if gs.is_empty() {
            continue;
        }
        let _ = writeln!(
            w,
            "synchronous_commit={sync} ({} alternating rounds × {} s per variant, then {} mixed runs × {} s):\n",
            gs[0].rounds, gs[0].round_seconds, gs[0].mixed_rounds, gs[0].round_seconds
        );
        let _ = writeln!(
            w,
            "| clients | variant | tps | p50 | p99 | server CPU / txn | rounds: time ratio to floor | rounds: server CPU ratio to floor | mixed: mean latency ratio to floor | load |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
        );
        for g in &gs {
            for v in &g.variants {
                let (ratio, cpu, mixed) = if v.name == g.baseline {
                    ("1".into(), "1".into(), "1".into())
                } else {
                    g.ratio(&v.name, &g.baseline).map_or(
                        ("–".into(), "–".into(), "–".into()),
                        |r| {
                            (
                                r.time.ratio_text(),
                                r.cpu.ratio_text(),
                                r.mixed_mean.ratio_text(),
                            )
                        },
                    )
                };
                let _ = writeln!(
                    w,
                    "| {} | {} | {:.0} | {} µs | {} µs | {} | {} | {} | {} | {:.2}→{:.2} |",
                    g.clients,
                    v.name,
                    v.tps.median,
                    v.latency.p50_us,
                    v.latency.p99_us,
                    if v.server_cpu_us.median > 0.0 {
                        format!("{:.0} µs", v.server_cpu_us.median)
                    } else {
                        "–".into()
                    },
                    ratio,
                    cpu,
                    mixed,
                    g.load_before.one,
                    g.load_after.one
                );
            }
        }
        let alts: Vec<String> = gs
            .iter()
            .flat_map(|g| {
                g.ratios
                    .iter()
                    .filter(|r| r.variant == "lease" && r.vs != g.baseline)
                    .map(move |r| {
                        format!(
                            "{} client{}: lease / {} {} (mixed {})",
                            g.clients,
                            if g.clients == 1 { "" } else { "s" },
                            r.vs,
                            r.time.ratio_text(),
                            r.mixed_mean.ratio_text()
                        )
                    })
            })
            .collect();
        if !alts.is_empty() {
            let _ = writeln!(w, "\nAgainst the alternatives: {}.", alts.join("; "));
        }
        let _ = writeln!(w);
    }
}

fn ms(us: u64) -> String {
    if us >= 10_000 {
        format!("{:.0} ms", us as f64 / 1000.0)
    } else {
        format!("{:.2} ms", us as f64 / 1000.0)
    }
}

fn kib(bytes: i64) -> String {
    if bytes >= 10 * 1024 * 1024 {
        format!("{:.0} MiB", bytes as f64 / 1048576.0)
    } else {
        format!("{:.0} KiB", bytes as f64 / 1024.0)
    }
}
