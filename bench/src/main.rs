//! `pglease-bench`: what does a pg_lease operation cost over the cheapest SQL doing the same row
//! write, and against what one would use instead? Every comparison runs side by side, in
//! interleaved rounds on one server. See docs/BENCHMARKS.md.
//!
//! ```sh
//! cargo run --release -p pglease-bench -- all            # the full suite (about 10 minutes)
//! cargo run --release -p pglease-bench -- all --quick    # a 2-minute smoke run
//! cargo run --release -p pglease-bench -- cycle          # one section
//! cargo build --release -p pglease-cli -p pglease-bench && \
//!     target/release/pglease-bench console               # the console at scale (about 6 minutes)
//! cargo run --release -p pglease-bench -- hotpath        # issue 26's queue targets vs pgmq (about 6 minutes)
//! cargo run --release -p pglease-bench -- peers          # per-key FIFO among the peers (about 8 minutes)
//! ```
//!
//! `hotpath` measures each target of issue 26 (pg_lease_queue's hot path) against pgmq in one
//! run, contenders interleaved in rounds: consumed msg/s (batch 100 and 1, 1 and 4 consumers),
//! produced msg/s (send, send_batch(100), 1 and 4 producers, notify on and off), tuple writes and
//! WAL bytes per message end to end, storage per queued message and send → handler latency. It
//! runs unchanged against any pg_lease_queue version, and adds `ack_and_receive` as a consumer
//! when the installed version has it.
//!
//! `peers` is not part of `all`: it installs pg-boss, Graphile Worker and a Node.js runtime from
//! the npm registry (and pgmq's SQL from PyPI) at bench time, into `target/bench-cache/`.

mod client;
mod console;
mod env;
mod hotpath;
mod interleave;
mod peers;
mod pgbench;
mod plan;
mod plot;
mod queue;
mod renew_many;
mod report;
mod scripts;
mod sections;
mod server;
mod stats;
mod variants;
mod wake;

use std::path::PathBuf;
use std::time::{Instant, SystemTime};

use clap::{Parser, ValueEnum};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type BoxResult<T> = Result<T, BoxError>;

pub fn err(msg: impl Into<String>) -> BoxError {
    msg.into().into()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Section {
    /// Every section below except `peers` (which needs the npm registry at bench time).
    All,
    /// W1: acquire + renew + release in one transaction, vs floor and alternatives.
    Cycle,
    /// Only the target check of W1 (lease vs floor, 1 and 4 clients): about a minute, for a quick
    /// verdict on one PostgreSQL version (`--pg-version`).
    Targets,
    /// W2: single acquire attempts on 4 shared keys.
    Contend,
    /// Renew storm: throughput, table size, dead tuples, HOT share.
    Storm,
    /// Acquire latency at 1k / 100k / 1M keys.
    Scale,
    /// Wake-up latency after release and after lapse.
    Wake,
    /// Rust client's typed calls vs raw prepared statements.
    Client,
    /// Variants of the function bodies in a scratch schema (optimisation candidates).
    Variants,
    /// pg_lease_queue side by side with pgmq: throughput, latency, takeover, bloat.
    Queue,
    /// One renewal for many leases: one call per key, lease.renew_many, the bare batch UPDATE, at
    /// 1 / 100 / 10 000 held keys; and single calls against the previous release.
    RenewMany,
    /// The operator console (`pglease ui`) at 100 000 leases and 1 000 000 queued messages: every
    /// page and GET endpoint, p50/p95/p99 at 1 and 4 clients, against p95 ≤ 200 ms. Needs the
    /// `pglease` binary (next to this one, or --pglease).
    Console,
    /// Issue 26's queue targets against pgmq, interleaved: consume and produce msg/s, tuple writes
    /// and WAL per message, storage per queued message, send → handler latency (about 6 minutes;
    /// `--hotpath-seconds`).
    Hotpath,
    /// Per-key ordered (FIFO) throughput among the peers: pg_lease_queue, pgmq's FIFO groups,
    /// pg-boss (key_strict_fifo) and Graphile Worker (named queues), 64 / 10 000 keys, 1 / 4
    /// consumers, per-key order verified. Installs the Node peers from npm at bench time.
    Peers,
}

#[derive(Parser, Debug)]
#[command(
    name = "pglease-bench",
    about = "pg_lease benchmark harness (see docs/BENCHMARKS.md)"
)]
struct Cli {
    /// What to run.
    #[arg(value_enum, default_value = "all")]
    section: Section,
    /// Short rounds and fewer client counts (about 1–2 minutes for `all`).
    #[arg(long)]
    quick: bool,
    /// Run against this database instead of a private cluster (needs CREATE on it; the scale
    /// section needs a superuser).
    #[arg(long)]
    database_url: Option<String>,
    /// PostgreSQL major version of the private cluster.
    #[arg(long, default_value_t = 15)]
    pg_version: u32,
    /// pgbench to use with --database-url (default: from PATH).
    #[arg(long)]
    pgbench: Option<PathBuf>,
    /// Results directory (default: bench/results/<UTC timestamp>[-quick][-section]).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Client counts for W1/W2 (comma-separated), overriding the plan.
    #[arg(long, value_delimiter = ',')]
    clients: Option<Vec<u32>>,
    /// Queue section: seconds of each produce and consume phase of the throughput matrix.
    #[arg(long)]
    queue_seconds: Option<u32>,
    /// Queue section: seconds of the bloat run (0: skip it).
    #[arg(long)]
    bloat_seconds: Option<u32>,
    /// Queue, hot-path and peers sections: the PyPI package `pgmq` whose SQL is installed at bench
    /// time.
    #[arg(long, default_value = "1.1.4")]
    pgmq_version: String,
    /// Hot-path section: seconds of each timed consume and produce run (default 2; 1 with
    /// --quick).
    #[arg(long)]
    hotpath_seconds: Option<f64>,
    /// Console section: the `pglease` binary to serve the console with (default: the one next to
    /// this program, i.e. of the same cargo profile).
    #[arg(long)]
    pglease: Option<PathBuf>,
    /// Console section: timed requests per endpoint, at 1 client and again at --console-clients
    /// (default 200; 100 with --quick).
    #[arg(long)]
    console_requests: Option<u32>,
    /// Console section: the concurrent clients of the second run (default 4).
    #[arg(long)]
    console_clients: Option<u32>,
    /// Peers section: the most seconds each system may drain its backlog (default 10; 3 with
    /// --quick).
    #[arg(long)]
    peers_seconds: Option<u32>,
    /// Peers section: messages preloaded per run (default 20 000; 5 000 with --quick).
    #[arg(long)]
    peers_backlog: Option<u64>,
    /// Peers section: the systems to run (default: all of lease_queue, pgmq-fifo, pg-boss,
    /// pg-boss-fetch, graphile-worker).
    #[arg(long, value_delimiter = ',')]
    peers_systems: Option<Vec<String>>,
    /// Peers section: messages per preload call whatever the number of keys (default: the number
    /// of keys, at most 1000, so that no call carries two messages of one key).
    #[arg(long)]
    peers_preload_batch: Option<u32>,
    /// Peers section: key counts (default 64,10000).
    #[arg(long, value_delimiter = ',', default_value = "64,10000")]
    peers_keys: Vec<u32>,
    /// Peers section: consumer counts (default 1,4).
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    peers_consumers: Vec<u32>,
    /// Peers section: the npm package pg-boss.
    #[arg(long, default_value = "12.38.1")]
    pgboss_version: String,
    /// Peers section: the npm package graphile-worker.
    #[arg(long, default_value = "0.18.0")]
    graphile_version: String,
    /// Peers section: the npm package pg (node-postgres, Graphile Worker's pool).
    #[arg(long, default_value = "8.23.1")]
    node_pg_version: String,
    /// Peers section: the Node.js runtime, npm package node-linux-<arch> (pg-boss 12 and
    /// graphile-worker 0.18 need Node 22).
    #[arg(long, default_value = "22.23.3")]
    node_version: String,
    /// Exit with status 1 when a checked target is missed (the console section's p95 ≤ 200 ms);
    /// without it the verdicts are reported and the exit status says only whether the run
    /// completed.
    #[arg(long)]
    enforce: bool,
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("bench/ has a parent")
        .to_path_buf()
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let enforce = cli.enforce;
    match run(cli) {
        Ok((dir, met)) => {
            eprintln!("results: {}", dir.display());
            if enforce && !met {
                eprintln!("pglease-bench: a target was missed (--enforce)");
                return std::process::ExitCode::FAILURE;
            }
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            let mut msg = e.to_string();
            let mut src = e.source();
            while let Some(s) = src {
                msg.push_str(&format!(": {s}"));
                src = s.source();
            }
            eprintln!("pglease-bench: {msg}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Runs the sections; the results directory and whether every checked target was met.
fn run(cli: Cli) -> BoxResult<(PathBuf, bool)> {
    let t0 = Instant::now();
    let started = SystemTime::now();
    let (started_utc, stamp) = env::utc_stamp(started);
    let load_before = stats::LoadAvg::now();
    let mut plan = if cli.quick {
        plan::Plan::quick()
    } else {
        plan::Plan::full()
    };
    if let Some(c) = &cli.clients {
        plan.clients = c.clone();
    }
    if let Some(s) = cli.queue_seconds {
        plan.queue_seconds = s.max(1);
    }
    if let Some(s) = cli.bloat_seconds {
        plan.queue_bloat_seconds = s;
    }
    if let Some(s) = cli.hotpath_seconds {
        plan.hotpath_seconds = s.max(0.1);
    }
    if let Some(n) = cli.console_requests {
        plan.console_requests = n.max(1);
    }
    if let Some(n) = cli.console_clients {
        plan.console_clients = n.max(1);
    }
    if let Some(s) = cli.peers_seconds {
        plan.peers_seconds = s.max(1);
    }
    if let Some(n) = cli.peers_backlog {
        plan.peers_backlog = n.max(1);
    }
    let repo = repo_root();
    let out_dir = cli.out.clone().unwrap_or_else(|| {
        let mut name = stamp.clone();
        if cli.quick {
            name.push_str("-quick");
        }
        if cli.section != Section::All {
            let section = cli
                .section
                .to_possible_value()
                .expect("no skipped sections");
            name.push_str(&format!("-{}", section.get_name()));
        }
        repo.join("bench").join("results").join(name)
    });

    // The console section serves the console with the real binary: found before anything runs.
    let pglease_bin = match cli.section {
        Section::Console => Some(console::pglease_binary(cli.pglease.as_deref())?),
        Section::All => match console::pglease_binary(cli.pglease.as_deref()) {
            Ok(p) => Some(p),
            Err(e) => {
                eprintln!("pglease-bench: the console section will be skipped: {e}");
                None
            }
        },
        _ => None,
    };
    eprintln!("pglease-bench: load {} at start", load_before.short());
    let mut server = match &cli.database_url {
        Some(url) => server::Server::existing(url, cli.pgbench.clone())?,
        None => {
            eprintln!("starting a private PostgreSQL {} cluster", cli.pg_version);
            server::Server::start_private(cli.pg_version, &repo)?
        }
    };
    if let Some(pid) = server.cluster.as_ref().and_then(|c| c.postmaster_pid()) {
        let _ = stats::cpu::POSTMASTER.set(pid);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let report = rt.block_on(async {
        server.prepare().await?;
        let mut rep = report::Report::new(&cli_line(), started_utc, &plan, &repo, &server).await?;
        rep.load_before = load_before;
        let want = |s: Section| cli.section == Section::All || cli.section == s;
        let main_db = server.db(server::DB_MAIN);
        let pgb = server.pgbench.clone();
        if want(Section::Cycle) || cli.section == Section::Targets {
            eprintln!("[cycle] W1 target check: lease vs floor");
            rep.targets = Some(sections::targets(&pgb, &main_db, &plan).await?);
        }
        if want(Section::Cycle) {
            eprintln!("[cycle] W1: acquire + renew + release per transaction");
            rep.cycle = Some(sections::cycle(&pgb, &main_db, &plan).await?);
        }
        if want(Section::Contend) {
            eprintln!("[contend] W2: acquire attempts on 4 shared keys");
            rep.contend = Some(sections::contend(&pgb, &main_db, &plan).await?);
        }
        if want(Section::Client) {
            eprintln!("[client] typed calls vs raw prepared statements");
            rep.client = Some(client::client_overhead(&main_db, &plan).await?);
        }
        if want(Section::Wake) {
            eprintln!("[wake] release/lapse to takeover");
            rep.wake = Some(wake::wake(&main_db, &plan, &stamp).await?);
        }
        if want(Section::Variants) {
            eprintln!("[variants] function-body variants in a scratch schema");
            let previous = server.is_private().then(|| server.db(server::DB_PREVIOUS));
            rep.variants = Some(variants::run(&pgb, &main_db, previous.as_ref(), &plan).await?);
        }
        if want(Section::Storm) {
            eprintln!("[storm] renew storm");
            let prefix = if server.is_private() {
                "storm-".to_string()
            } else {
                format!("storm-{stamp}-")
            };
            rep.storm =
                Some(sections::storm(&pgb, &server.db(server::DB_STORM), &plan, &prefix).await?);
        }
        if want(Section::Scale) {
            eprintln!("[scale] acquire latency by number of keys");
            let db = server.db(server::DB_SCALE);
            rep.scale = sections::scale(&pgb, &db, &plan).await?;
            if !server.is_private() {
                sections::scale_cleanup(&db).await?;
            }
        }
        if want(Section::Queue) {
            eprintln!("[queue] pg_lease_queue and pgmq: throughput, latency, takeover, bloat");
            let prefix = if server.is_private() {
                String::new()
            } else {
                format!("b{}_", stamp.to_lowercase())
            };
            rep.queue = Some(
                queue::run(
                    &server.db(server::DB_QUEUE),
                    &plan,
                    &repo,
                    &cli.pgmq_version,
                    &prefix,
                )
                .await?,
            );
        }
        if want(Section::Hotpath) {
            eprintln!("[hotpath] pg_lease_queue's hot path against pgmq (issue 26 targets)");
            let prefix = if server.is_private() {
                String::new()
            } else {
                format!("b{}_", stamp.to_lowercase())
            };
            rep.hotpath = Some(
                hotpath::run(
                    &server.db(server::DB_HOTPATH),
                    &plan,
                    &repo,
                    &cli.pgmq_version,
                    &prefix,
                )
                .await?,
            );
        }
        if want(Section::RenewMany) {
            eprintln!("[renew-many] one renewal for many leases");
            let previous = server.is_private().then(|| server.db(server::DB_PREVIOUS));
            rep.renew_many =
                renew_many::run(&server.db(server::DB_RENEW), previous.as_ref(), &plan).await?;
        }
        if cli.section == Section::Peers {
            eprintln!("[peers] per-key FIFO: lease_queue, pgmq-fifo, pg-boss, graphile-worker");
            let prefix = if server.is_private() {
                String::new()
            } else {
                format!("b{}_", stamp.to_lowercase())
            };
            let opts = peers::PeersOptions {
                seconds: plan.peers_seconds,
                backlog: plan.peers_backlog,
                keys: cli.peers_keys.iter().map(|k| (*k).max(1)).collect(),
                consumers: cli.peers_consumers.iter().map(|c| (*c).max(1)).collect(),
                batch: 100,
                preload_max: 1000,
                preload_batch: cli.peers_preload_batch,
                systems: cli.peers_systems.clone().unwrap_or_else(|| {
                    peers::SYSTEMS
                        .iter()
                        .map(|s| s.name().to_string())
                        .collect()
                }),
                pgmq_version: cli.pgmq_version.clone(),
                node: peers::NodePins {
                    pg_boss: cli.pgboss_version.clone(),
                    graphile_worker: cli.graphile_version.clone(),
                    pg: cli.node_pg_version.clone(),
                    node: cli.node_version.clone(),
                },
            };
            rep.peers =
                Some(peers::run(&server.db(server::DB_PEERS), &repo, &opts, &prefix).await?);
        }
        if let Some(bin) = &pglease_bin {
            eprintln!("[console] the operator console at 100 000 leases and 1 000 000 messages");
            std::fs::create_dir_all(&out_dir)?;
            rep.console =
                Some(console::run(&server.db(server::DB_CONSOLE), &plan, bin, &out_dir).await?);
        }
        rep.load_after = stats::LoadAvg::now();
        rep.suite_seconds = stats::round1(t0.elapsed().as_secs_f64());
        BoxResult::Ok(rep)
    })?;
    std::fs::create_dir_all(&out_dir)?;
    report.write(&out_dir)?;
    let mut met = true;
    if let Some(c) = &report.console {
        std::fs::write(out_dir.join("console.md"), console::table(c))?;
        println!("{}", console::table(c));
        met &= c.all_met;
        let faults = c.faults();
        if !faults.is_empty() {
            return Err(err(format!(
                "the console answered wrongly (results in {}): {}",
                out_dir.display(),
                faults.join("; ")
            )));
        }
    }
    eprintln!("suite time {:.0} s", t0.elapsed().as_secs_f64());
    drop(rt);
    drop(server);
    Ok((out_dir, met))
}

fn cli_line() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    format!("pglease-bench {}", args.join(" "))
}
