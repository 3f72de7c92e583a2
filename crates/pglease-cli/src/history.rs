//! `pglease history`: a key's grants (`lease.history`) as a table — epoch, owner, from, to,
//! duration, ended by — or one JSON document; and the same rows for the last grants `inspect`
//! shows under a key's state.
//!
//! How the table shows what the history leaves open: a grant already held when the history began
//! (the upgrade to pg_lease 0.9.0) has no start (`-`, no duration); the current grant has no end
//! (`-`), its duration runs until now (`12.3s so far`), and it is `held (expires in ...)`; a grant
//! that ended while the history was off is `unrecorded`, with no end.

use std::process::ExitCode;
use std::time::SystemTime;

use serde::Serialize;

use crate::cli::{HistoryArgs, Since};
use crate::connect::Target;
use crate::exit::BoxError;
use crate::output;
use crate::waiting;

/// One grant in JSON (`history`'s `grants`, `inspect`'s `recent`).
#[derive(Debug, Serialize)]
pub struct GrantJson {
    epoch: i64,
    owner: String,
    /// The database role the grant belongs to (null for a grant made before pg_lease 0.8.0).
    holder_role: Option<String>,
    /// Null for a grant already held when the history began.
    granted_at: Option<String>,
    /// The current expiry while held, the last one once ended; null when unknown.
    expires_at: Option<String>,
    /// Null while held, and for `unrecorded`.
    ended_at: Option<String>,
    /// `released`, `lapsed`, `transferred`, `forced`, `unrecorded`; null while held.
    ended_by: Option<String>,
    /// Whether this is the current grant (held now).
    current: bool,
    /// From granted_at to ended_at (to now while held); null when either is unknown.
    duration_ms: Option<u64>,
    /// The data it was granted with.
    data: Option<String>,
}

impl GrantJson {
    /// `entry` as JSON, its duration measured to the server's `now` while held.
    pub fn new(entry: &pglease::HistoryEntry, now: SystemTime) -> GrantJson {
        GrantJson {
            epoch: entry.epoch,
            owner: entry.owner.clone(),
            holder_role: entry.holder_role.clone(),
            granted_at: entry.granted_at.map(output::timestamp),
            expires_at: entry.expires_at.map(output::timestamp),
            ended_at: entry.ended_at.map(output::timestamp),
            ended_by: entry.ended_by.as_ref().map(|e| e.as_str().to_owned()),
            current: entry.is_current(),
            duration_ms: lasted(entry, now).map(output::millis),
            data: entry.data.clone(),
        }
    }
}

/// How long `entry` lasted (until `now`, the server's clock, while held).
fn lasted(entry: &pglease::HistoryEntry, now: SystemTime) -> Option<std::time::Duration> {
    let end = if entry.is_current() {
        now
    } else {
        entry.ended_at?
    };
    end.duration_since(entry.granted_at?).ok()
}

/// `entries` as the table `history` prints (and `inspect` under a key's state); a DATA column only
/// when some grant has data.
pub fn table(entries: &[pglease::HistoryEntry], now: SystemTime) -> String {
    let with_data = entries.iter().any(|e| e.data.is_some());
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|e| {
            let duration = match lasted(e, now) {
                Some(d) if e.is_current() => format!("{} so far", output::duration(d)),
                Some(d) => output::duration(d),
                None => "-".into(),
            };
            let ended_by = match (&e.ended_by, e.expires_at) {
                (Some(end), _) => end.to_string(),
                (None, Some(expires_at)) => match expires_at.duration_since(now) {
                    Ok(left) => format!("held (expires in {})", output::duration(left)),
                    Err(_) => "held".into(),
                },
                (None, None) => "held".into(),
            };
            let mut row = vec![
                e.epoch.to_string(),
                e.owner.clone(),
                e.granted_at
                    .map(output::timestamp)
                    .unwrap_or_else(|| "-".into()),
                e.ended_at
                    .map(output::timestamp)
                    .unwrap_or_else(|| "-".into()),
                duration,
                ended_by,
            ];
            if with_data {
                row.push(
                    e.data
                        .as_deref()
                        .map(|d| d.escape_debug().to_string())
                        .unwrap_or_else(|| "-".into()),
                );
            }
            row
        })
        .collect();
    let mut header = vec!["EPOCH", "OWNER", "FROM", "TO", "DURATION", "ENDED BY"];
    if with_data {
        header.push("DATA");
    }
    output::table(&header, &rows)
}

/// `pglease history`.
pub async fn history(args: HistoryArgs, target: &Target) -> Result<ExitCode, BoxError> {
    let mut query = pglease::HistoryQuery::new().limit(args.limit);
    match args.since {
        Some(Since::Ago(ago)) => query = query.within(ago),
        Some(Since::At(at)) => query = query.since(at),
        None => {}
    }
    if let Some(owner) = &args.owner {
        query = query.owner(owner.clone());
    }
    let client = target.connect().await?;
    let entries = target
        .answer(pglease::history(&client, &args.key, &query))
        .await?;
    let now = target.answer(waiting::server_now(&client)).await?;
    if args.output.json {
        #[derive(Serialize)]
        struct Json<'a> {
            key: &'a str,
            grants: Vec<GrantJson>,
        }
        output::json(&Json {
            key: &args.key,
            grants: entries.iter().map(|e| GrantJson::new(e, now)).collect(),
        })?;
        return Ok(ExitCode::SUCCESS);
    }
    if entries.is_empty() {
        eprintln!(
            "pglease: no recorded grants of {}{} (never leased, purged, or recorded while the \
             history was off)",
            args.key,
            if args.since.is_some() || args.owner.is_some() {
                " that match"
            } else {
                ""
            }
        );
        return Ok(ExitCode::SUCCESS);
    }
    output::out(&table(&entries, now))?;
    Ok(ExitCode::SUCCESS)
}
