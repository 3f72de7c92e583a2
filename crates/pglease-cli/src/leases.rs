//! The thin, scriptable lease commands: `acquire`, `renew`, `release`, `transfer`, `inspect` (of a
//! key with its last grants, or of a semaphore's slots), `list` and `purge`. Each is one call of
//! the SQL API (plus a read of the server clock for "in 12s", and for `inspect` the key's history),
//! printed as aligned text or, with `--json`, as one JSON document. Refusals are outcomes with
//! their own exit codes, not errors.

use std::process::ExitCode;
use std::time::Duration;

use serde::Serialize;

use crate::cli::{
    AcquireArgs, ForceReleaseArgs, InspectArgs, ListArgs, OutputArgs, PurgeArgs, ReleaseArgs,
    RenewArgs, TransferArgs, semaphore_name_fits,
};
use crate::connect::Target;
use crate::exit::{self, BoxError, EXIT_LOST, EXIT_NOT_ACQUIRED};
use crate::history::{self, GrantJson};
use crate::output;
use crate::signals::Signals;
use crate::waiting::{self, Holder, Outcome};

/// A key's state in JSON (`inspect`, `list`, and the holder of a refused `acquire`).
#[derive(Debug, Serialize)]
struct StateJson {
    key: String,
    /// `held`, `not_held` (free or lapsed) or `unknown` (never leased, or purged).
    state: &'static str,
    held: bool,
    owner: Option<String>,
    /// Held: the holder's epoch. Not held: the key's fencing counter. Unknown: null.
    epoch: Option<i64>,
    expires_at: Option<String>,
    /// Milliseconds until `expires_at` by the server's clock.
    expires_in_ms: Option<u64>,
    /// The holder's data (null unless held, or if the grant has none).
    data: Option<String>,
    /// `inspect` of a key: its last grants, oldest first (absent elsewhere).
    #[serde(skip_serializing_if = "Option::is_none")]
    recent: Option<Vec<GrantJson>>,
}

/// How many of a key's last grants `inspect` shows.
const RECENT_GRANTS: u32 = 5;

impl StateJson {
    fn new(key: &str, holder: Option<&Holder>) -> StateJson {
        let Some(h) = holder else {
            return StateJson {
                key: key.to_owned(),
                state: "unknown",
                held: false,
                owner: None,
                epoch: None,
                expires_at: None,
                expires_in_ms: None,
                data: None,
                recent: None,
            };
        };
        StateJson {
            key: key.to_owned(),
            state: if h.state.held { "held" } else { "not_held" },
            held: h.state.held,
            owner: h.state.owner.clone(),
            epoch: Some(h.state.epoch),
            expires_at: h.state.expires_at.map(output::timestamp),
            expires_in_ms: h.left().map(output::millis),
            data: h.state.data.clone(),
            recent: None,
        }
    }
}

/// `pglease acquire`.
///
/// A terminating signal ends it at any point: before the acquire is sent, nothing is held; during a
/// blocking acquire, the statement is cancelled and a grant that slipped in is released.
pub async fn acquire(
    args: AcquireArgs,
    owner: String,
    target: &Target,
    signals: &mut Signals,
) -> Result<ExitCode, BoxError> {
    let key = args.key.key;
    let (ttl, wait) = (args.ttl.ttl, args.wait.wait);
    let connecting = target.connect();
    let client = tokio::select! {
        client = connecting => client?,
        sig = signals.recv_terminating() => return Ok(exit::signal_exit(sig)),
    };
    let outcome = waiting::acquire(target, &client, &key, &owner, ttl, wait, signals).await?;

    #[derive(Serialize)]
    struct Json {
        key: String,
        owner: String,
        acquired: bool,
        epoch: Option<i64>,
        expires_at: Option<String>,
        ttl_ms: u64,
        /// When refused: the key's state.
        holder: Option<StateJson>,
    }
    let mut json = Json {
        key: key.clone(),
        owner: owner.clone(),
        acquired: false,
        epoch: None,
        expires_at: None,
        ttl_ms: output::millis(ttl),
        holder: None,
    };
    match outcome {
        Outcome::Granted(grant) => {
            if args.output.json {
                json.acquired = true;
                json.epoch = Some(grant.epoch);
                json.expires_at = Some(output::timestamp(grant.expires_at));
                output::json(&json)?;
            } else {
                // Still interruptible; the grant then stands until its expiry, as any grant of
                // `acquire` does (it has no keepalive).
                let now = tokio::select! {
                    now = target.answer(waiting::server_now(&client)) => now?,
                    sig = signals.recv_terminating() => return Ok(exit::signal_exit(sig)),
                };
                output::out(&output::fields(&[
                    ("acquired", key),
                    ("owner", owner),
                    ("epoch", grant.epoch.to_string()),
                    ("expires", output::expiry(grant.expires_at, now)),
                ]))?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Outcome::Held(holder) => {
            if args.output.json {
                json.holder = Some(StateJson::new(&key, holder.as_ref()));
                output::json(&json)?;
            } else {
                let state = holder.map_or_else(|| "not held".to_string(), |h| h.describe());
                let waited = if wait.is_zero() {
                    String::new()
                } else {
                    format!(" after waiting {}", output::duration(wait))
                };
                eprintln!("pglease: not acquired{waited}: {key} is {state}");
            }
            Ok(ExitCode::from(EXIT_NOT_ACQUIRED))
        }
        Outcome::Interrupted(sig) => Ok(exit::signal_exit(sig)),
    }
}

/// `pglease renew`.
pub async fn renew(args: RenewArgs, target: &Target) -> Result<ExitCode, BoxError> {
    let (key, owner, epoch) = (args.key.key, args.owner.owner, args.epoch.epoch);
    let client = target.connect().await?;
    let renewal = target
        .answer(pglease::renew(&client, &key, &owner, epoch, args.ttl.ttl))
        .await?;

    #[derive(Serialize)]
    struct Json<'a> {
        key: &'a str,
        owner: &'a str,
        epoch: i64,
        status: &'static str,
        renewed: bool,
        expires_at: Option<String>,
    }
    if args.output.json {
        output::json(&Json {
            key: &key,
            owner: &owner,
            epoch,
            status: renewal.status.as_str(),
            renewed: renewal.status.is_ok(),
            expires_at: renewal.expires_at.map(output::timestamp),
        })?;
    } else if let Some(expires_at) = renewal.expires_at {
        let now = target.answer(waiting::server_now(&client)).await?;
        output::out(&output::fields(&[
            ("renewed", key),
            ("epoch", epoch.to_string()),
            ("expires", output::expiry(expires_at, now)),
        ]))?;
    } else {
        eprintln!(
            "pglease: renew refused: {} (stop acting on this lease)",
            renewal.status
        );
    }
    Ok(status_exit(renewal.status))
}

/// `pglease release`.
pub async fn release(args: ReleaseArgs, target: &Target) -> Result<ExitCode, BoxError> {
    let (key, owner, epoch) = (args.key.key, args.owner.owner, args.epoch.epoch);
    let client = target.connect().await?;
    let status = target
        .answer(pglease::release(&client, &key, &owner, epoch))
        .await?;

    #[derive(Serialize)]
    struct Json<'a> {
        key: &'a str,
        owner: &'a str,
        epoch: i64,
        status: &'static str,
        released: bool,
    }
    if args.output.json {
        output::json(&Json {
            key: &key,
            owner: &owner,
            epoch,
            status: status.as_str(),
            released: status.is_ok(),
        })?;
    } else if status.is_ok() {
        output::out(&format!(
            "released {key} (epoch {epoch}); the next grant gets epoch {}\n",
            epoch + 2
        ))?;
    } else {
        eprintln!("pglease: release refused: {status}");
    }
    Ok(status_exit(status))
}

/// `pglease transfer`.
pub async fn transfer(args: TransferArgs, target: &Target) -> Result<ExitCode, BoxError> {
    let (key, owner, epoch) = (args.key.key, args.owner.owner, args.epoch.epoch);
    let to = args.to;
    let client = target.connect().await?;
    let transfer = target
        .answer(pglease::transfer(
            &client,
            &key,
            &owner,
            epoch,
            &to,
            args.ttl.ttl,
        ))
        .await?;

    #[derive(Serialize)]
    struct Json<'a> {
        key: &'a str,
        owner: &'a str,
        epoch: i64,
        to_owner: &'a str,
        status: &'static str,
        transferred: bool,
        /// The successor's epoch (null when refused).
        to_epoch: Option<i64>,
        /// The successor's expiry (null when refused).
        expires_at: Option<String>,
    }
    if args.output.json {
        output::json(&Json {
            key: &key,
            owner: &owner,
            epoch,
            to_owner: &to,
            status: transfer.status.as_str(),
            transferred: transfer.status.is_ok(),
            to_epoch: transfer.grant.map(|g| g.epoch),
            expires_at: transfer.grant.map(|g| output::timestamp(g.expires_at)),
        })?;
    } else if let Some(grant) = transfer.grant {
        let now = target.answer(waiting::server_now(&client)).await?;
        output::out(&output::fields(&[
            ("transferred", key),
            (
                "from",
                format!("{owner} (epoch {epoch}, fenced from now on)"),
            ),
            ("to", to),
            ("epoch", grant.epoch.to_string()),
            ("expires", output::expiry(grant.expires_at, now)),
        ]))?;
    } else {
        eprintln!(
            "pglease: transfer refused: {} (nothing changed)",
            transfer.status
        );
    }
    Ok(status_exit(transfer.status))
}

/// `pglease force-release`.
pub async fn force_release(args: ForceReleaseArgs, target: &Target) -> Result<ExitCode, BoxError> {
    let key = args.key.key;
    let client = target.connect().await?;
    let ended = target.answer(pglease::force_release(&client, &key)).await?;

    #[derive(Serialize)]
    struct Json<'a> {
        key: &'a str,
        /// The epoch of the grant that was ended; null when the key was not held.
        ended_epoch: Option<i64>,
    }
    if args.output.json {
        output::json(&Json {
            key: &key,
            ended_epoch: ended,
        })?;
    } else if let Some(epoch) = ended {
        output::out(&format!(
            "ended the grant of {key} at epoch {epoch}; the next grant gets epoch {}\n",
            epoch + 2
        ))?;
    } else {
        output::out(&format!("{key} is not held: nothing to end\n"))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `pglease inspect`.
pub async fn inspect(args: InspectArgs, target: &Target) -> Result<ExitCode, BoxError> {
    let key = args.key().to_owned();
    let client = target.connect().await?;
    let holder = target.answer(waiting::holder(&client, &key)).await?;
    if holder.is_none() && semaphore_name_fits(&key).is_ok() {
        let slots = target.answer(pglease::list_slots(&client, &key)).await?;
        if !slots.is_empty() {
            let now = target.answer(waiting::server_now(&client)).await?;
            print_semaphore(&key, slots, now, args.output)?;
            return Ok(ExitCode::SUCCESS);
        }
    }
    let last = pglease::HistoryQuery::new().limit(RECENT_GRANTS);
    let recent = target
        .answer(pglease::history(&client, &key, &last))
        .await?;
    let now = match &holder {
        Some(h) => h.now,
        None => target.answer(waiting::server_now(&client)).await?,
    };
    if args.output.json {
        let mut json = StateJson::new(&key, holder.as_ref());
        json.recent = Some(recent.iter().map(|e| GrantJson::new(e, now)).collect());
        output::json(&json)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut text = match holder {
        None => output::fields(&[
            ("key", key.clone()),
            ("state", "unknown (never leased, or purged)".into()),
        ]),
        Some(h) if h.state.held => {
            let mut rows = vec![
                ("key", key.clone()),
                ("state", "held".into()),
                ("owner", h.state.owner.clone().unwrap_or_default()),
                ("epoch", h.state.epoch.to_string()),
                (
                    "expires",
                    h.state
                        .expires_at
                        .map(|x| output::expiry(x, h.now))
                        .unwrap_or_default(),
                ),
            ];
            if let Some(data) = &h.state.data {
                rows.push(("data", data.clone()));
            }
            output::fields(&rows)
        }
        Some(h) => output::fields(&[
            ("key", key.clone()),
            ("state", "not held (free or lapsed)".into()),
            (
                "epoch",
                format!(
                    "{} (counter: the next grant gets a higher one)",
                    h.state.epoch
                ),
            ),
        ]),
    };
    if !recent.is_empty() {
        text.push_str(&format!(
            "\nlast grants (`pglease history {key}` shows more):\n"
        ));
        text.push_str(&history::table(&recent, now));
    }
    output::out(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// A semaphore in JSON (`inspect` of a name whose slots have leases: `run --limit`).
#[derive(Debug, Serialize)]
struct SemaphoreJson {
    key: String,
    /// Always `semaphore`.
    state: &'static str,
    /// Whether any slot is held.
    held: bool,
    /// How many slots are held.
    holders: usize,
    /// Every slot that has a lease row, by slot number; each with the fields of a key's state.
    slots: Vec<SlotJson>,
}

/// One slot of a semaphore in JSON.
#[derive(Debug, Serialize)]
struct SlotJson {
    slot: u32,
    #[serde(flatten)]
    state: StateJson,
}

/// `inspect` of a semaphore: its slots (holder, epoch, expiry), as a table or JSON.
fn print_semaphore(
    name: &str,
    slots: Vec<pglease::SlotState>,
    now: std::time::SystemTime,
    output: OutputArgs,
) -> std::io::Result<()> {
    let slots: Vec<(u32, String, Holder)> = slots
        .into_iter()
        .map(|s| {
            (
                s.slot,
                s.key,
                Holder {
                    state: s.state,
                    now,
                },
            )
        })
        .collect();
    let holders = slots.iter().filter(|(_, _, h)| h.state.held).count();
    if output.json {
        return output::json(&SemaphoreJson {
            key: name.to_owned(),
            state: "semaphore",
            held: holders > 0,
            holders,
            slots: slots
                .iter()
                .map(|(slot, key, h)| SlotJson {
                    slot: *slot,
                    state: StateJson::new(key, Some(h)),
                })
                .collect(),
        });
    }
    let rows: Vec<Vec<String>> = slots
        .iter()
        .map(|(slot, key, h)| {
            [slot.to_string(), key.clone()]
                .into_iter()
                .chain(state_cells(h))
                .collect()
        })
        .collect();
    let mut text = output::fields(&[
        ("key", name.to_owned()),
        (
            "state",
            format!(
                "semaphore: {holders} slot{} held (`pglease run --key {name} --limit N` takes one)",
                if holders == 1 { "" } else { "s" }
            ),
        ),
    ]);
    text.push('\n');
    text.push_str(&output::table(
        &[
            "SLOT",
            "KEY",
            "HELD",
            "OWNER",
            "EPOCH",
            "EXPIRES_AT",
            "LEFT",
        ],
        &rows,
    ));
    output::out(&text)
}

/// `pglease list`.
pub async fn list(args: ListArgs, target: &Target) -> Result<ExitCode, BoxError> {
    let client = target.connect().await?;
    let leases = target
        .answer(pglease::list(&client, args.prefix.as_deref()))
        .await?;
    let now = target.answer(waiting::server_now(&client)).await?;
    let holders: Vec<(String, Holder)> = leases
        .into_iter()
        .map(|l| {
            (
                l.key,
                Holder {
                    state: l.state,
                    now,
                },
            )
        })
        .collect();
    if args.output.json {
        let rows: Vec<StateJson> = holders
            .iter()
            .map(|(key, h)| StateJson::new(key, Some(h)))
            .collect();
        output::json(&rows)?;
        return Ok(ExitCode::SUCCESS);
    }
    if holders.is_empty() {
        let what = match &args.prefix {
            Some(p) => format!("no keys start with {p:?}"),
            None => "no keys".to_string(),
        };
        eprintln!("pglease: {what}");
        return Ok(ExitCode::SUCCESS);
    }
    // A DATA column only when some key has data (one line per key: newlines shown as \n).
    let with_data = holders.iter().any(|(_, h)| h.state.data.is_some());
    let rows: Vec<Vec<String>> = holders
        .iter()
        .map(|(key, h)| {
            let mut row: Vec<String> = std::iter::once(key.clone()).chain(state_cells(h)).collect();
            if with_data {
                row.push(
                    h.state
                        .data
                        .as_deref()
                        .map(|d| d.escape_debug().to_string())
                        .unwrap_or_else(|| "-".into()),
                );
            }
            row
        })
        .collect();
    let mut header = vec!["KEY", "HELD", "OWNER", "EPOCH", "EXPIRES_AT", "LEFT"];
    if with_data {
        header.push("DATA");
    }
    output::out(&output::table(&header, &rows))?;
    Ok(ExitCode::SUCCESS)
}

/// `pglease purge`.
pub async fn purge(args: PurgeArgs, target: &Target) -> Result<ExitCode, BoxError> {
    let client = target.connect().await?;
    let purged = target
        .answer(pglease::purge(&client, args.older_than))
        .await?;
    print_purged(args.output, purged, args.older_than)?;
    Ok(ExitCode::SUCCESS)
}

fn print_purged(output: OutputArgs, purged: u64, older_than: Duration) -> std::io::Result<()> {
    #[derive(Serialize)]
    struct Json {
        purged: u64,
        older_than_ms: u64,
    }
    if output.json {
        output::json(&Json {
            purged,
            older_than_ms: output::millis(older_than),
        })
    } else {
        output::out(&format!(
            "purged {purged} key{} idle for more than {}\n",
            if purged == 1 { "" } else { "s" },
            output::duration(older_than)
        ))
    }
}

/// A key's state in the columns of `list` and `inspect SEMAPHORE`: held, owner, epoch, expiry, and
/// the time left.
fn state_cells(h: &Holder) -> [String; 5] {
    [
        if h.state.held { "held" } else { "-" }.into(),
        h.state.owner.clone().unwrap_or_else(|| "-".into()),
        h.state.epoch.to_string(),
        h.state
            .expires_at
            .map(output::timestamp)
            .unwrap_or_else(|| "-".into()),
        h.left().map(output::duration).unwrap_or_else(|| "-".into()),
    ]
}

/// 0 for `ok`, [`EXIT_LOST`] for a refusal.
fn status_exit(status: pglease::Status) -> ExitCode {
    if status.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_LOST)
    }
}
