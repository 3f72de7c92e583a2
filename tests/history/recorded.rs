//! The recorded history (`lease.history`, SEMANTICS.md §12) against the workload's own log: at the
//! end of a run, every key's history is read once (with the server clock read just before and just
//! after) and must tell exactly what the clients did.
//!
//! What must hold, per key (`check`):
//! - **Every acknowledged grant is recorded once**: each epoch that a committed call returned as
//!   granted (a new grant by acquire or transfer, or a re-acquire of it) has one row, with the
//!   grantee as owner, the role of the clients that act as that owner as holder_role, no data, and
//!   as granted_at exactly the instant the grant wrote (`expires_at - ttl` of the call that made it).
//! - **No unacknowledged but committed grant is missing**: a grant whose own call lost its answer
//!   is known to have committed when a committed call acted on it (an ok renewal, release, transfer
//!   or fence presenting it, a force_release that ended it, a read that saw it held); it must be
//!   recorded too, with the owner those calls saw.
//! - **Nothing else is recorded**: every row is a grant some call of the workload may have made — a
//!   call that returned that epoch and did not roll back, or a call whose outcome is unknown (its
//!   connection died during it: `Outcome::Lost`), of an acquire or transfer to that owner sent before
//!   the row's granted_at, each such call explaining at most one row. A grant whose every call is known
//!   to have rolled back must not be recorded.
//! - **Epochs strictly increase** with the rows, granted_at never goes back, and each grant ended no
//!   later than the next one began.
//! - **ended_by agrees with what the workload did**: `released` (ended during the release's call)
//!   when a committed release of that grant was acknowledged ok; `forced` (ended during the call)
//!   when the operator's committed force_release returned that epoch; `transferred` when a committed
//!   transfer of it was (ended exactly when the successor, the next row, the transfer's to_owner at
//!   the next epoch, was granted); otherwise `lapsed`, at the grant's last expiry (its last committed
//!   renewal's, or its own), which must have passed before the next grant or before the history was
//!   read; NULL (held) only for the key's last grant whose last expiry had not passed when the history
//!   was read. The workload never turns the history off, so `unrecorded` is never right. The last
//!   expiry (expires_at) must be the grant's last committed version.
//!
//! Outcome-unknown calls (a connection that died during the call or its COMMIT, and a transaction
//! the server could not resolve) are allowed either way, and only where they could matter: a grant
//! they may have made may or may not be recorded; a release, transfer or force_release of unknown
//! outcome allows `released`, `transferred` or `forced` besides what the rest of the log implies; a renewal of unknown outcome
//! leaves the grant's last expiry unchecked. Each allowance used is counted (`Report::allowed`).
//!
//! `lease.history` returns at most 10 000 rows per key: a key with more (only in a long soak) has its
//! latest 10 000 grants compared, and the grants before them are not.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::checker::Violation;
use crate::model::{Call, Commit, Micros, Op, Outcome};

/// The most rows `lease.history` returns for one key (its `max_rows` bound).
pub const MAX_ROWS: i32 = 10_000;

/// One row of `lease.history`.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub epoch: i64,
    pub owner: String,
    pub holder_role: Option<String>,
    pub granted_at: Option<Micros>,
    pub expires_at: Option<Micros>,
    pub ended_at: Option<Micros>,
    pub ended_by: Option<String>,
    pub data: Option<String>,
}

/// A key's history as read at the end of the run, between server times `t0` and `t1`.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub key: String,
    pub t0: Micros,
    pub t1: Micros,
    pub rows: Vec<Row>,
}

/// The verdict of the comparison.
#[derive(Debug, Default)]
pub struct Report {
    pub violations: Vec<Violation>,
    /// Rows compared, and how they ended.
    pub rows: usize,
    pub released: usize,
    pub forced: usize,
    pub transferred: usize,
    pub lapsed: usize,
    pub held: usize,
    /// Times an outcome-unknown call allowed what the rest of the log would not.
    pub allowed: usize,
}

/// The last expiry of a grant: the expiry its latest committed version wrote, and whether a
/// renewal of unknown outcome may have written a later one.
struct LastExpiry {
    x: Option<Micros>,
    unsure: bool,
}

/// Compares every key's recorded history with the log `ops`; `role_of` names the login role of a
/// client.
pub fn check<'r>(ops: &[Op], recorded: &[Recorded], role_of: impl Fn(usize) -> &'r str) -> Report {
    let mut report = Report::default();
    for rec in recorded {
        let kops: Vec<&Op> = ops
            .iter()
            .filter(|o| o.call.key() == Some(rec.key.as_str()))
            .collect();
        check_key(rec, &kops, &role_of, &mut report);
    }
    report
}

/// The key's calls indexed once, so that the comparison costs O(n log n) in the number of calls
/// (as the checker does): by the grant (owner, epoch) they present, force_releases by the epoch
/// they ended, and the earliest call of unknown outcome that may have granted to each owner.
struct Index<'a> {
    presenting: HashMap<i64, Vec<&'a Op>>,
    forced: HashMap<i64, Vec<&'a Op>>,
    /// A force_release whose connection died: it may have ended any grant.
    lost_force: bool,
    /// The earliest `lo` of a lost acquire or transfer, by the owner it would have granted to.
    lost_grant_lo: HashMap<&'a str, Micros>,
}

impl<'a> Index<'a> {
    fn new(kops: &[&'a Op]) -> Index<'a> {
        let mut ix = Index {
            presenting: HashMap::new(),
            forced: HashMap::new(),
            lost_force: false,
            lost_grant_lo: HashMap::new(),
        };
        for &o in kops {
            if let (Some(_), Some(epoch)) = (o.call.owner(), o.call.epoch()) {
                ix.presenting.entry(epoch).or_default().push(o);
            }
            if let Some(e) = o.forced() {
                ix.forced.entry(e).or_default().push(o);
            }
            let lost = matches!(o.outcome, Outcome::Lost);
            ix.lost_force |= lost && matches!(o.call, Call::ForceRelease { .. }) && unknown(o);
            if lost
                && o.call.grants()
                && let Some(g) = o.call.grantee()
            {
                let lo = ix.lost_grant_lo.entry(g).or_insert(o.lo);
                *lo = (*lo).min(o.lo);
            }
        }
        ix
    }

    /// The calls that present the grant (owner, epoch): its renewals, releases, transfers, fences.
    fn presenting(&self, owner: &str, epoch: i64) -> Vec<&'a Op> {
        self.presenting.get(&epoch).map_or_else(Vec::new, |v| {
            v.iter()
                .copied()
                .filter(|o| o.call.owner() == Some(owner))
                .collect()
        })
    }
}

/// Whether an op's effect is of unknown fate: the commit is unknown and it may have written.
fn unknown(o: &Op) -> bool {
    o.commit == Commit::Ambiguous && o.maybe_wrote()
}

fn check_key<'r>(
    rec: &Recorded,
    kops: &[&Op],
    role_of: &impl Fn(usize) -> &'r str,
    report: &mut Report,
) {
    let key = rec.key.as_str();
    let mut violations = Vec::new();
    let mut fail = |what: String, ops: Vec<usize>| {
        violations.push(Violation {
            invariant: "§12",
            key: key.to_string(),
            what,
            ops,
        });
    };
    let truncated = rec.rows.len() >= MAX_ROWS as usize;
    let first_epoch = rec.rows.first().map_or(i64::MAX, |r| r.epoch);

    // The log's grants by epoch: every call that returned the epoch as granted and did not roll back.
    let mut by_epoch: BTreeMap<i64, Vec<&Op>> = BTreeMap::new();
    let mut rolled_back: HashSet<i64> = HashSet::new();
    for o in kops {
        if let Some((e, _)) = o.granted() {
            if o.commit == Commit::NotCommitted {
                rolled_back.insert(e);
            } else {
                by_epoch.entry(e).or_default().push(o);
            }
        }
    }
    let rows: BTreeMap<i64, &Row> = rec.rows.iter().map(|r| (r.epoch, r)).collect();
    let ix = Index::new(kops);

    // Every acknowledged grant is recorded.
    for (&e, gops) in &by_epoch {
        if truncated && e < first_epoch {
            continue;
        }
        let Some(committed) = gops.iter().find(|o| o.commit == Commit::Committed) else {
            continue; // only outcome-unknown calls returned it: recorded or not
        };
        let owner = committed.call.grantee().unwrap_or("");
        let ids: Vec<usize> = gops.iter().map(|o| o.id).collect();
        let Some(row) = rows.get(&e) else {
            fail(
                format!("the committed grant of epoch {e} to {owner} is not in lease.history"),
                ids,
            );
            continue;
        };
        if row.owner != owner {
            fail(
                format!(
                    "lease.history records epoch {e} as {}'s, the workload's grant was to {owner}",
                    row.owner
                ),
                ids.clone(),
            );
        }
        let role = role_of(committed.client);
        if row.holder_role.as_deref() != Some(role) {
            fail(
                format!(
                    "lease.history records epoch {e} for role {:?}, granted to a client of role {role}",
                    row.holder_role
                ),
                ids.clone(),
            );
        }
        if row.data.is_some() {
            fail(
                format!("lease.history records data for epoch {e}, granted without any"),
                ids.clone(),
            );
        }
        // The instant the grant wrote; unknown only when the call that made it lost its answer.
        let instants: Vec<Micros> = gops.iter().filter_map(|o| grant_instant(o)).collect();
        let lost_grant = ix
            .lost_grant_lo
            .get(owner)
            .is_some_and(|&lo| row.granted_at.is_some_and(|g| lo <= g));
        match row.granted_at {
            Some(g) if instants.contains(&g) => {}
            Some(_) if lost_grant => report.allowed += 1,
            g => fail(
                format!(
                    "lease.history records epoch {e} as granted at {g:?}, but the grant wrote at {instants:?}"
                ),
                ids.clone(),
            ),
        }
    }

    // A grant whose own call lost its answer but that later committed calls acted on (an ok
    // renewal, release, transfer or fence of it, a force_release that ended it, a read that saw it
    // held) was committed too: it must be recorded, with that owner.
    let mut evidence: BTreeMap<i64, (Option<&str>, usize)> = BTreeMap::new();
    for o in kops.iter().filter(|o| o.commit == Commit::Committed) {
        let acted = o.renewed().is_some()
            || o.released()
            || o.transferred()
            || matches!(o.outcome, Outcome::Fenced { .. });
        let seen = match (&o.call, &o.outcome) {
            (_, Outcome::Inspected(Some(v)) | Outcome::Registered(v)) if v.held => {
                v.epoch.map(|e| (e, v.owner.as_deref()))
            }
            (Call::ForceRelease { .. }, _) => o.forced().map(|e| (e, None)),
            (call, _) if acted => call.epoch().map(|e| (e, call.owner())),
            _ => None,
        };
        if let Some((e, owner)) = seen {
            evidence.entry(e).or_insert((owner, o.id));
        }
    }
    for (&e, &(owner, id)) in &evidence {
        let acknowledged = by_epoch
            .get(&e)
            .is_some_and(|g| g.iter().any(|o| o.commit == Commit::Committed));
        if acknowledged || (truncated && e < first_epoch) {
            continue;
        }
        match rows.get(&e) {
            None => fail(
                format!(
                    "epoch {e} ({owner:?}) was committed (a committed call acted on it) but is not in lease.history"
                ),
                vec![id],
            ),
            Some(row) if owner.is_some_and(|o| o != row.owner) => fail(
                format!(
                    "lease.history records epoch {e} as {}'s, a committed call saw it as {owner:?}'s",
                    row.owner
                ),
                vec![id],
            ),
            Some(_) => {}
        }
    }

    // Nothing else is recorded: each row some call may have made.
    let mut lost: Vec<&Op> = kops
        .iter()
        .copied()
        .filter(|o| matches!(o.outcome, Outcome::Lost) && o.call.grants() && unknown(o))
        .collect();
    lost.sort_by_key(|o| o.lo);
    let mut used: HashSet<usize> = HashSet::new();
    for row in &rec.rows {
        if by_epoch.contains_key(&row.epoch) {
            continue;
        }
        let explained = lost.iter().find(|o| {
            !used.contains(&o.id)
                && o.call.grantee() == Some(row.owner.as_str())
                && row.granted_at.is_some_and(|g| o.lo <= g)
        });
        match explained {
            Some(o) => {
                used.insert(o.id);
                report.allowed += 1;
            }
            None => {
                let why = if rolled_back.contains(&row.epoch) {
                    "whose every call rolled back"
                } else {
                    "that no call of the workload made"
                };
                let ids = kops
                    .iter()
                    .filter(|o| o.granted().is_some_and(|(e, _)| e == row.epoch))
                    .map(|o| o.id)
                    .collect();
                fail(
                    format!(
                        "lease.history records a grant of epoch {} to {} {why}",
                        row.epoch, row.owner
                    ),
                    ids,
                );
            }
        }
    }

    // Order, and how each grant ended.
    for (i, row) in rec.rows.iter().enumerate() {
        report.rows += 1;
        let next = rec.rows.get(i + 1);
        let e = row.epoch;
        let grant_ids: Vec<usize> = by_epoch
            .get(&e)
            .map(|g| g.iter().map(|o| o.id).collect())
            .unwrap_or_default();
        if let Some(n) = next {
            if n.epoch <= e {
                fail(
                    format!("lease.history lists epoch {} after epoch {e}", n.epoch),
                    grant_ids.clone(),
                );
            }
            if let (Some(a), Some(b)) = (row.granted_at, n.granted_at)
                && b < a
            {
                fail(
                    format!("epoch {} was granted {}µs before epoch {e}", n.epoch, a - b),
                    grant_ids.clone(),
                );
            }
            if let (Some(end), Some(b)) = (row.ended_at, n.granted_at)
                && end > b
            {
                fail(
                    format!(
                        "epoch {e} ended {}µs after epoch {} was granted",
                        end - b,
                        n.epoch
                    ),
                    grant_ids.clone(),
                );
            }
        }

        let pres = ix.presenting(&row.owner, e);
        let committed_end = |f: fn(&Op) -> bool| {
            pres.iter()
                .copied()
                .find(|o| o.commit == Commit::Committed && f(o))
        };
        let unknown_end = |call: fn(&Call) -> bool, f: fn(&Op) -> bool| {
            pres.iter().any(|o| {
                unknown(o) && call(&o.call) && (matches!(o.outcome, Outcome::Lost) || f(o))
            })
        };
        let release = committed_end(Op::released);
        let transfer = committed_end(Op::transferred);
        // An operator's end names the epoch, not the owner.
        let forces = ix.forced.get(&e).map_or(&[][..], |v| v.as_slice());
        let force = forces
            .iter()
            .copied()
            .find(|o| o.commit == Commit::Committed);
        let maybe_forced = ix.lost_force || forces.iter().any(|o| unknown(o));
        let maybe_released = unknown_end(|c| matches!(c, Call::Release { .. }), Op::released);
        let maybe_transferred =
            unknown_end(|c| matches!(c, Call::Transfer { .. }), Op::transferred);
        let last = last_expiry(by_epoch.get(&e), &pres);
        let ended_by = row.ended_by.as_deref();
        let mut ids = grant_ids.clone();
        ids.extend(
            release
                .iter()
                .chain(transfer.iter())
                .chain(force.iter())
                .map(|o| o.id),
        );

        // The grant's last expiry, when the log knows it.
        if let Some(x) = last.x
            && row.expires_at != Some(x)
        {
            if last.unsure {
                report.allowed += 1;
            } else {
                fail(
                    format!(
                        "lease.history gives epoch {e} the last expiry {:?}, its last committed version had {x}",
                        row.expires_at
                    ),
                    ids.clone(),
                );
            }
        }

        let ended_in_call = |o: &Op| {
            o.t0.is_none_or(|t0| row.ended_at.is_some_and(|a| a >= t0))
                && o.t1.is_none_or(|t1| row.ended_at.is_some_and(|a| a <= t1))
        };
        match (release.or(force), transfer) {
            _ if [release, transfer, force].iter().flatten().count() > 1 => {} // ended twice: I3
            (Some(rel), None) => {
                let (kind, verb) = if force.is_some() {
                    ("forced", "force-released")
                } else {
                    ("released", "released")
                };
                if ended_by != Some(kind) {
                    fail(
                        format!(
                            "epoch {e} was {verb} (acknowledged ok), lease.history says {ended_by:?}"
                        ),
                        ids.clone(),
                    );
                } else if !ended_in_call(rel) {
                    fail(
                        format!(
                            "lease.history ends epoch {e} at {:?}, outside the call that {verb} it",
                            row.ended_at
                        ),
                        ids.clone(),
                    );
                }
            }
            (Some(_), Some(_)) => {}
            (None, Some(t)) => {
                let successor = next.filter(|n| {
                    n.epoch == e + 1
                        && Some(n.owner.as_str()) == t.call.grantee()
                        && n.granted_at.is_some()
                        && n.granted_at == row.ended_at
                        && n.granted_at == t.write_time()
                });
                if ended_by != Some("transferred") {
                    fail(
                        format!(
                            "epoch {e} was transferred (acknowledged ok), lease.history says {ended_by:?}"
                        ),
                        ids.clone(),
                    );
                } else if successor.is_none() {
                    fail(
                        format!(
                            "epoch {e} was transferred to {:?} at {:?}, but lease.history's next grant is {:?} (ended at {:?})",
                            t.call.grantee(),
                            t.write_time(),
                            next,
                            row.ended_at
                        ),
                        ids.clone(),
                    );
                }
            }
            (None, None) => match ended_by {
                Some("released") if maybe_released => report.allowed += 1,
                Some("forced") if maybe_forced => report.allowed += 1,
                Some("transferred") if maybe_transferred => {
                    report.allowed += 1;
                    if next.is_none_or(|n| n.granted_at != row.ended_at) {
                        fail(
                            format!(
                                "epoch {e} is recorded as transferred at {:?}, when no next grant began",
                                row.ended_at
                            ),
                            ids.clone(),
                        );
                    }
                }
                Some("lapsed") => {
                    let passed = row.ended_at.is_some_and(|a| {
                        next.map_or(a <= rec.t1, |n| n.granted_at.is_some_and(|b| a <= b))
                    });
                    if row.ended_at.is_none() || row.ended_at != row.expires_at || !passed {
                        fail(
                            format!(
                                "epoch {e} is recorded as lapsed at {:?} with last expiry {:?}, which had not passed by the next grant or the read",
                                row.ended_at, row.expires_at
                            ),
                            ids.clone(),
                        );
                    }
                }
                None => {
                    if next.is_some() || row.ended_at.is_some() {
                        fail(
                            format!(
                                "epoch {e} is recorded as held although a later grant followed"
                            ),
                            ids.clone(),
                        );
                    } else if row.expires_at.is_none_or(|x| x <= rec.t0) {
                        fail(
                            format!(
                                "epoch {e} is recorded as held with last expiry {:?}, passed before the read",
                                row.expires_at
                            ),
                            ids.clone(),
                        );
                    }
                }
                Some(other) => fail(
                    format!(
                        "epoch {e} is recorded as ended by {other:?}; the workload neither released, transferred nor force-released it acknowledged (those only with a call of unknown outcome)"
                    ),
                    ids.clone(),
                ),
            },
        }
        match ended_by {
            Some("released") => report.released += 1,
            Some("forced") => report.forced += 1,
            Some("transferred") => report.transferred += 1,
            Some("lapsed") => report.lapsed += 1,
            None => report.held += 1,
            _ => {}
        }
    }
    report.violations.extend(violations);
}

/// The instant a call's new grant wrote, if the call made one (a re-acquire returns an earlier
/// version: its `expires_at - ttl` is not within its own call).
fn grant_instant(o: &Op) -> Option<Micros> {
    let g = o.write_time()?;
    (o.t0? <= g && g <= o.t1?).then_some(g)
}

/// The last expiry of a grant: of its committed versions (the grant, its ok renewals), the one
/// written last.
fn last_expiry(grants: Option<&Vec<&Op>>, pres: &[&Op]) -> LastExpiry {
    let mut versions: Vec<(Micros, Micros)> = grants
        .into_iter()
        .flatten()
        .filter(|o| o.commit == Commit::Committed)
        .filter_map(|o| Some((grant_instant(o)?, o.granted()?.1)))
        .collect();
    versions.extend(
        pres.iter()
            .filter(|o| o.commit == Commit::Committed)
            .filter_map(|o| Some((o.write_time()?, o.renewed()?))),
    );
    let unsure = pres
        .iter()
        .any(|o| unknown(o) && matches!(o.call, Call::Renew { .. }));
    LastExpiry {
        x: versions.iter().max().map(|v| v.1),
        unsure,
    }
}
