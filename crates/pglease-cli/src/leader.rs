//! `pglease leader NAME [--watch] [--json]`: who leads an election (`pglease elect NAME`), and its
//! advertised data.
//!
//! Built on the library's [`pglease::Election`]: `leader()` for one answer, `observe()` for
//! `--watch`, which is woken by the server's `pg_lease_changed` notifications for the key (every
//! grant, release and change of data) and at the leader's lapse time; it does not poll.

use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use futures_util::StreamExt;
use serde::Serialize;

use crate::cli::LeaderArgs;
use crate::connect::Target;
use crate::exit::{BoxError, EXIT_NOT_ACQUIRED};
use crate::output;

/// The ttl the observer is built with. An observer holds nothing: it only bounds how long it waits
/// for a leaderless key when no notification connection is available (behind a pooler).
const OBSERVER_TTL: Duration = Duration::from_secs(4);

/// The leader in JSON (one document; with --watch, one per line).
#[derive(Debug, Serialize)]
struct LeaderJson<'a> {
    name: &'a str,
    /// Whether someone leads.
    leader: bool,
    /// The leader's owner identity.
    owner: Option<&'a str>,
    /// The leader's term: the epoch of its grant.
    epoch: Option<i64>,
    /// The leader's advertised value (`pglease elect --data`).
    data: Option<&'a str>,
    /// When this was observed (client clock, RFC 3339 UTC); with --watch only.
    #[serde(skip_serializing_if = "Option::is_none")]
    observed_at: Option<String>,
}

/// `pglease leader`.
pub async fn leader(args: LeaderArgs, target: &Target) -> Result<ExitCode, BoxError> {
    let client = target
        .client(pglease::Client::builder().max_connections(2))
        .await?;
    let election = client.election(args.name.clone(), OBSERVER_TTL);
    if !args.watch {
        let leader = target.answer(election.leader()).await?;
        print(&args, leader.as_ref(), None)?;
        client.shutdown().await;
        return Ok(if leader.is_some() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(EXIT_NOT_ACQUIRED)
        });
    }
    // The stream yields the current state first, then each change; it retries failed reads itself
    // (an error is reported and the watch goes on). Ends with a signal (see config.rs).
    let mut changes = election.observe();
    while let Some(change) = changes.next().await {
        match change {
            Ok(leader) => print(&args, leader.as_ref(), Some(SystemTime::now()))?,
            Err(e) => eprintln!("pglease: watching {}: {e}", args.name),
        }
    }
    client.shutdown().await;
    Ok(ExitCode::SUCCESS)
}

fn print(
    args: &LeaderArgs,
    leader: Option<&pglease::Leader>,
    observed_at: Option<SystemTime>,
) -> std::io::Result<()> {
    if args.output.json {
        return output::json(&LeaderJson {
            name: &args.name,
            leader: leader.is_some(),
            owner: leader.map(|l| l.owner.as_str()),
            epoch: leader.map(|l| l.epoch),
            data: leader.and_then(|l| l.data.as_deref()),
            observed_at: observed_at.map(output::timestamp),
        });
    }
    if let Some(at) = observed_at {
        // One line per change.
        let line = match leader {
            Some(l) => format!(
                "{} {}: leader {} (term {}){}\n",
                output::timestamp(at),
                args.name,
                l.owner,
                l.epoch,
                l.data
                    .as_deref()
                    .map(|d| format!(" data {d}"))
                    .unwrap_or_default()
            ),
            None => format!("{} {}: no leader\n", output::timestamp(at), args.name),
        };
        return output::out(&line);
    }
    match leader {
        Some(l) => {
            let mut rows = vec![
                ("election", args.name.clone()),
                ("leader", l.owner.clone()),
                ("term", l.epoch.to_string()),
            ];
            if let Some(data) = &l.data {
                rows.push(("data", data.clone()));
            }
            output::out(&output::fields(&rows))
        }
        None => {
            eprintln!("pglease: {} has no leader", args.name);
            Ok(())
        }
    }
}
