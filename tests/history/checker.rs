//! The history checker: judges a recorded history against SEMANTICS.md §9, using only what clients
//! can know (results, SQLSTATEs, server timestamps read around each call, and the order in which
//! clients saw answers).
//!
//! What a time means. A new grant's instant is `expires_at - ttl` (the function's own
//! `clock_timestamp()`), as is an ok renew's; a release's instant is only known to lie within the
//! `[t0, t1]` that its statement read around the call. Writes to one key's row are serialised by its
//! row lock, and each re-reads the clock after the lock is granted, so in committed history the
//! instants of writes to a key follow commit order. A read (inspect) sees the writes committed before
//! its snapshot; "committed before" is only known from the clients' own clock (an answer received
//! before a request was sent), never inferred from server timestamps.
//!
//! Ambiguity. Operations of aborted transactions are ignored (but their results must not have leaked
//! into anyone else's view). An operation whose commit is unknown (`Commit::Ambiguous`: the connection
//! died during it or during COMMIT and the server could not tell) is left out of the committed history,
//! and every check that fails is re-examined: if an ambiguous write could explain the failure (it might
//! have committed and would make the check pass), the failure is counted as *excused* instead of
//! reported. So a reported violation holds in every possible resolution of the ambiguous operations.
//!
//! A grant's instant is not always unique: when two acquires by the same owner return the same
//! (epoch, expiry) and both could have been the grant (different ttls, long calls), the lease's
//! instant is known only to lie in a range, and every check uses the end of the range that makes it
//! harder to fail.
//!
//! SEMANTICS.md §3 (fence): a successor that waited for a fenced transaction counts its expiry from
//! the moment it got the row, after that transaction committed; the checker flags an expiry counted
//! from earlier (this found a bug, fixed in 0.2.0).

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::model::{Call, Commit, Micros, Op, Outcome};

/// SEMANTICS.md §5: a call that waited for a row lock counts its ttl from the end of its wait to
/// within 1 ms (a shorter wait is not told apart from the call's own run time).
const WAIT_RESOLUTION: Micros = 1_000;

/// One broken invariant, with the operations that show it.
#[derive(Debug, Clone)]
pub struct Violation {
    /// The invariant of SEMANTICS.md §9 (e.g. `I1`), or `well-formed`.
    pub invariant: &'static str,
    pub key: String,
    pub what: String,
    /// The operations involved (ids); for an excused failure the last one is the ambiguous op.
    pub ops: Vec<usize>,
}

/// Counters of what the checker saw.
#[derive(Debug, Default, Clone)]
pub struct Stats {
    pub committed_grants: usize,
    pub reacquires: usize,
    pub ok_renews: usize,
    pub ok_releases: usize,
    pub ok_transfers: usize,
    pub forced: usize,
    pub fences: usize,
    pub reads: usize,
    pub refusals: usize,
    pub ignored_uncommitted: usize,
    pub ambiguous: usize,
}

/// The checker's verdict.
#[derive(Debug, Default)]
pub struct Report {
    pub violations: Vec<Violation>,
    /// Failed checks that an ambiguous operation could explain (not violations).
    pub excused: Vec<Violation>,
    pub stats: Stats,
}

impl Report {
    /// The invariants reported as violated (sorted, deduplicated).
    pub fn invariants(&self) -> Vec<&'static str> {
        let mut v: Vec<_> = self.violations.iter().map(|v| v.invariant).collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}

/// Checks `ops` (any order; ids are indexes into `ops`).
///
/// Cost: O(n log n) time and O(n) memory in the number of operations `n`. Each key's operations are
/// checked on their own, and every check that relates an operation to others of its key (the lease
/// in force at an instant, newer writes a re-acquire must have seen, leases of higher epochs than a
/// fence, grants visible to a read or a refusal, purges between two grants) looks them up in an
/// index built once per key (sorted by time or epoch, with prefix maxima or the few smallest
/// values), never by scanning them. Only a check that has already failed scans, to name every
/// operation involved. (An earlier version scanned: its time grew with the cube of a key's
/// history, and the history of a five-minute soak was still being checked ten minutes later.)
pub fn check(ops: &[Op]) -> Report {
    let mut report = Report::default();
    let purges = Purges::new(ops);
    let mut by_key: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for op in ops {
        well_formed(op, &mut report);
        if let Some(k) = op.call.key() {
            by_key.entry(k).or_default().push(op);
        }
    }
    for (key, kops) in by_key {
        KeyCheck::new(key, kops, &purges, &mut report).run();
    }
    report
}

fn well_formed(op: &Op, report: &mut Report) {
    const STATUSES: [&str; 4] = ["ok", "not_owner", "lapsed", "epoch_mismatch"];
    let bad = match &op.outcome {
        Outcome::Acquired {
            acquired: true,
            epoch,
            expires_at,
        } => !matches!(epoch, Some(e) if *e >= 1) || expires_at.is_none(),
        Outcome::Acquired {
            acquired: false,
            epoch,
            expires_at,
        } => epoch.is_some() || expires_at.is_some(),
        Outcome::Renewed { status, expires_at } => {
            !STATUSES.contains(&status.as_str()) || (status == "ok") != expires_at.is_some()
        }
        Outcome::Released { status } => !STATUSES.contains(&status.as_str()),
        Outcome::Transferred {
            status,
            epoch,
            expires_at,
        } => {
            !STATUSES.contains(&status.as_str())
                || (status == "ok") != matches!(epoch, Some(e) if *e >= 1)
                || (status == "ok") != expires_at.is_some()
        }
        Outcome::Inspected(Some(v)) => {
            v.epoch.is_none() || v.held != v.owner.is_some() || v.held != v.expires_at.is_some()
        }
        Outcome::Registered(v) => {
            v.held != v.owner.is_some()
                || v.held != v.epoch.is_some()
                || v.held != v.expires_at.is_some()
                || v.held != v.now.is_some()
        }
        Outcome::Purged(n) => *n < 0,
        Outcome::Forced(e) => e.is_some_and(|e| e < 1),
        _ => false,
    };
    if bad {
        report.violations.push(Violation {
            invariant: "well-formed",
            key: op.call.key().unwrap_or("").to_string(),
            what: "a result outside the documented shapes".into(),
            ops: vec![op.id],
        });
    }
}

/// One committed grant and what happened to it.
struct Lease<'a> {
    op: &'a Op,
    owner: &'a str,
    epoch: i64,
    /// The grant's instant lies in [g_lo, g_hi] (a single point unless ambiguous, see above).
    g_lo: Micros,
    g_hi: Micros,
    /// The transactions of every equally plausible grant op (ambiguous grants have several).
    grant_txs: Vec<usize>,
    /// (instant, expiry, op id), the grant first, then committed ok renews by instant.
    versions: Vec<(Micros, Micros, usize)>,
    /// The committed ok release, or the committed force_release, that ended it (the key's counter
    /// moves to epoch + 1 either way).
    release: Option<&'a Op>,
    /// The committed ok transfer that ended it (granting the next epoch to its `to_owner`).
    transfer: Option<&'a Op>,
}

impl Lease<'_> {
    /// The expiry in force just before instant `t` (the last version written before it).
    /// (`versions` is sorted by instant once every renew is attached; the first version when none
    /// was written before `t`.)
    fn expiry_before(&self, t: Micros) -> (Micros, usize) {
        let n = self.versions.partition_point(|v| v.0 < t);
        let (_, x, id) = self.versions[n.saturating_sub(1)];
        (x, id)
    }

    /// Whether the lease was held at some instant of `[a, b]` (releases aside). Only the versions
    /// in force during `[a, b]` are looked at: the one written last at or before `a`, and those
    /// written up to `b`.
    fn held_somewhere_in(&self, a: Micros, b: Micros) -> bool {
        let a = a.max(self.g_lo);
        let first = self
            .versions
            .partition_point(|v| v.0 <= a)
            .saturating_sub(1);
        for (i, &(at, x, _)) in self.versions.iter().enumerate().skip(first) {
            if at > b {
                break;
            }
            let next = self.versions.get(i + 1).map_or(Micros::MAX, |v| v.0);
            let start = at.max(a);
            if start <= b && start < next && x > start {
                return true;
            }
        }
        false
    }
}

/// The committed purges that removed rows, to ask whether one ran between two instants in
/// O(log purges): sorted by their first clock reading, with the running maximum of their last one.
struct Purges {
    /// (t0, the largest t1 of this and every purge with an earlier t0), by t0.
    by_t0: Vec<(Micros, Micros)>,
}

impl Purges {
    fn new(ops: &[Op]) -> Purges {
        let mut by_t0: Vec<(Micros, Micros)> = ops
            .iter()
            .filter(|o| {
                o.commit == Commit::Committed
                    && matches!(o.call, Call::Purge { .. })
                    && matches!(o.outcome, Outcome::Purged(n) if n > 0)
            })
            .filter_map(|o| Some((o.t0?, o.t1?)))
            .collect();
        by_t0.sort_unstable();
        let mut max_t1 = Micros::MIN;
        for p in &mut by_t0 {
            max_t1 = max_t1.max(p.1);
            p.1 = max_t1;
        }
        Purges { by_t0 }
    }

    /// Whether some purge ran (at least partly) within `(from, to)`: `t1 > from` and `t0 < to`.
    fn between(&self, from: Micros, to: Micros) -> bool {
        let n = self.by_t0.partition_point(|p| p.0 < to);
        n > 0 && self.by_t0[n - 1].1 > from
    }
}

/// How many of the lowest values [`LowestAbove`] keeps per suffix: more than the calls of one
/// transaction of the workload (1–3), so that excluding a fence's own transaction leaves one.
const LOWEST: usize = 4;

/// For the leases of epochs above a given one, the [`LOWEST`] smallest values of one field (with
/// the lease's index): whether any such lease has a value under a bound, with a few leases
/// excluded, is then answered in O(log leases), falling back to a scan only when every one kept is
/// under the bound and excluded.
struct LowestAbove<T> {
    /// The leases' epochs, ascending.
    epochs: Vec<i64>,
    /// `suffix[i]`: the smallest values among the leases of `epochs[i..]`, ascending.
    suffix: Vec<Vec<(T, usize)>>,
}

impl<T: Ord + Copy> LowestAbove<T> {
    fn new(leases: &[Lease<'_>], value: impl Fn(&Lease<'_>) -> T) -> LowestAbove<T> {
        let mut order: Vec<usize> = (0..leases.len()).collect();
        order.sort_by_key(|&i| leases[i].epoch);
        let epochs = order.iter().map(|&i| leases[i].epoch).collect();
        let mut suffix = vec![Vec::new(); order.len() + 1];
        for (pos, &i) in order.iter().enumerate().rev() {
            let mut low = suffix[pos + 1].clone();
            low.push((value(&leases[i]), i));
            low.sort_unstable();
            low.truncate(LOWEST);
            suffix[pos] = low;
        }
        LowestAbove { epochs, suffix }
    }

    /// Whether some lease of epoch above `epoch` with a value for which `under` holds may satisfy
    /// `pred` (which also tests the value). False means none does; true means a scan is needed
    /// (and, in histories whose transactions have fewer than [`LOWEST`] calls, that one does).
    fn may_have(
        &self,
        epoch: i64,
        under: impl Fn(T) -> bool,
        pred: impl Fn(usize) -> bool,
    ) -> bool {
        let low = &self.suffix[self.epochs.partition_point(|e| *e <= epoch)];
        low.iter().any(|&(_, i)| pred(i))
            || (low.len() == LOWEST && low.iter().all(|&(v, _)| under(v)))
    }
}

struct KeyCheck<'a, 'r> {
    key: &'a str,
    ops: Vec<&'a Op>,
    /// Ops that may have written and whose commit is unknown.
    amb: Vec<&'a Op>,
    /// This key's ops by id, and by explicit transaction.
    by_id: HashMap<usize, &'a Op>,
    by_tx: HashMap<usize, Vec<&'a Op>>,
    purges: &'r Purges,
    report: &'r mut Report,
    /// For each grant op: the range its instant lies in.
    g_range: HashMap<usize, (Micros, Micros)>,
    /// For each chosen grant op, the transactions of every equally plausible grant op.
    g_txs: HashMap<usize, Vec<usize>>,
}

impl<'a, 'r> KeyCheck<'a, 'r> {
    fn new(key: &'a str, ops: Vec<&'a Op>, purges: &'r Purges, report: &'r mut Report) -> Self {
        let amb: Vec<&Op> = ops
            .iter()
            .copied()
            .filter(|o| o.commit == Commit::Ambiguous && o.maybe_wrote())
            .collect();
        report.stats.ambiguous += amb.len();
        let by_id = ops.iter().map(|o| (o.id, *o)).collect();
        let mut by_tx: HashMap<usize, Vec<&Op>> = HashMap::new();
        for o in &ops {
            if let Some(t) = o.tx {
                by_tx.entry(t).or_default().push(o);
            }
        }
        KeyCheck {
            key,
            ops,
            amb,
            by_id,
            by_tx,
            purges,
            report,
            g_range: HashMap::new(),
            g_txs: HashMap::new(),
        }
    }

    /// The earliest possible instant of a grant (or any write).
    fn g_lo(&self, o: &Op) -> Micros {
        self.g_range
            .get(&o.id)
            .map_or_else(|| o.write_time().expect("a write"), |r| r.0)
    }

    fn g_hi(&self, o: &Op) -> Micros {
        self.g_range
            .get(&o.id)
            .map_or_else(|| o.write_time().expect("a write"), |r| r.1)
    }

    /// Records a failed check: a violation, or an excused failure when `excuse` names an ambiguous op
    /// that could explain it.
    fn fail(
        &mut self,
        invariant: &'static str,
        what: String,
        mut ops: Vec<usize>,
        excuse: Option<usize>,
    ) {
        let v = match excuse {
            Some(id) => {
                ops.push(id);
                &mut self.report.excused
            }
            None => &mut self.report.violations,
        };
        v.push(Violation {
            invariant,
            key: self.key.to_string(),
            what,
            ops,
        });
    }

    /// An ambiguous write that ran before `before` and satisfies `pred`, if any.
    fn excuse(&self, before: Micros, pred: impl Fn(&Op) -> bool) -> Option<usize> {
        self.amb
            .iter()
            .find(|o| o.lo < before && pred(o))
            .map(|o| o.id)
    }

    fn run(mut self) {
        let (grant_ops, reacquires) = self.classify_acquires();
        self.check_reacquires(&grant_ops, &reacquires);

        let mut grants: Vec<&Op> = grant_ops
            .iter()
            .copied()
            .filter(|o| o.commit == Commit::Committed)
            .collect();
        // Grant order: by the latest plausible instant of each grant, like every check below ("the
        // end of the range that makes it harder to fail"); an ambiguous grant whose earliest
        // candidate is a same-owner re-acquire must not be ordered before the grant it returned.
        grants.sort_by_key(|o| (self.g_hi(o), o.id));
        self.report.stats.committed_grants += grants.len();
        self.report.stats.ignored_uncommitted += self
            .ops
            .iter()
            .filter(|o| o.commit == Commit::NotCommitted && o.maybe_wrote())
            .count();

        let mut leases: Vec<Lease> = grants
            .iter()
            .map(|o| {
                let (epoch, x) = o.granted().expect("a grant");
                let (g_lo, g_hi) = self.g_range[&o.id];
                Lease {
                    op: o,
                    owner: o.call.grantee().expect("a grant has a grantee"),
                    epoch,
                    g_lo,
                    g_hi,
                    grant_txs: self.g_txs.get(&o.id).cloned().unwrap_or_default(),
                    versions: vec![(g_lo, x, o.id)],
                    release: None,
                    transfer: None,
                }
            })
            .collect();
        let mut by_epoch: HashMap<i64, usize> = HashMap::new();
        for i in 0..leases.len() {
            if let Some(&j) = by_epoch.get(&leases[i].epoch) {
                let ops = vec![leases[j].op.id, leases[i].op.id];
                self.fail(
                    "I2",
                    format!("two committed grants carry epoch {}", leases[i].epoch),
                    ops,
                    None,
                );
            } else {
                by_epoch.insert(leases[i].epoch, i);
            }
        }

        self.attach_writes(&mut leases, &by_epoch);
        self.check_successions(&leases);
        self.check_renews(&leases);
        self.check_releases_and_fences(&leases, &by_epoch);
        self.check_reads(&leases, &grant_ops);
        self.check_refusals(&grant_ops);
    }

    /// Splits granted acquires into new grants (any commit status) and re-acquires of an existing
    /// lease version (paired with the write that produced the version they returned).
    #[allow(clippy::type_complexity)]
    fn classify_acquires(&mut self) -> (Vec<&'a Op>, Vec<(&'a Op, &'a Op)>) {
        let mut renew_src: HashMap<(&str, i64, Micros), &Op> = HashMap::new();
        for o in &self.ops {
            if let (Call::Renew { owner, epoch, .. }, Some(x)) = (&o.call, o.renewed()) {
                renew_src.entry((owner, *epoch, x)).or_insert(o);
            }
        }
        let mut groups: BTreeMap<(&str, i64, Micros), Vec<&Op>> = BTreeMap::new();
        for o in &self.ops {
            if let (Some((e, x)), Some(owner)) = (o.granted(), o.call.grantee()) {
                groups.entry((owner, e, x)).or_default().push(o);
            }
        }
        let mut grants = Vec::new();
        let mut reacquires = Vec::new();
        for ((owner, e, x), members) in groups {
            if let Some(src) = renew_src.get(&(owner, e, x)) {
                reacquires.extend(members.iter().map(|m| (*m, *src)));
                continue;
            }
            let in_window = |o: &&&Op| match (o.t0, o.t1, o.write_time()) {
                (Some(t0), Some(t1), Some(g)) => t0 <= g && g <= t1,
                _ => false,
            };
            let candidates: Vec<&Op> = members.iter().filter(in_window).copied().collect();
            // A candidate can be the grant only if every other member returned after it wrote: the
            // earliest return among the others (an unknown one counts as earliest) is after it.
            let mut returns: Vec<(Micros, usize)> = members
                .iter()
                .map(|m| (m.t1.unwrap_or(Micros::MIN), m.id))
                .collect();
            returns.sort_unstable();
            returns.truncate(2);
            let consistent: Vec<&Op> = candidates
                .iter()
                .copied()
                .filter(|c| {
                    let g = c.write_time().expect("candidate");
                    returns
                        .iter()
                        .find(|r| r.1 != c.id)
                        .is_none_or(|&(t1, _)| t1 != Micros::MIN && g < t1)
                })
                .collect();
            let pool = if consistent.is_empty() {
                &candidates
            } else {
                &consistent
            };
            let chosen = pool
                .iter()
                .min_by_key(|o| (o.commit == Commit::NotCommitted, o.write_time()))
                .copied();
            if let Some(g) = chosen {
                // Every equally plausible grant (same commit fate) widens the instant's range.
                let fate = |o: &Op| o.commit == g.commit || (o.tx.is_some() && o.tx == g.tx);
                let times: Vec<Micros> = pool
                    .iter()
                    .filter(|o| fate(o))
                    .map(|o| o.write_time().expect("candidate"))
                    .collect();
                let lo = *times.iter().min().expect("the chosen one");
                let hi = *times.iter().max().expect("the chosen one");
                self.g_range.insert(g.id, (lo, hi));
                // The transactions any equally plausible grant ran in (see `Lease::grant_txs`).
                let txs: Vec<usize> = pool
                    .iter()
                    .filter(|o| fate(o))
                    .filter_map(|o| o.tx)
                    .collect();
                self.g_txs.insert(g.id, txs);
            }
            match chosen {
                Some(g) => {
                    grants.push(g);
                    reacquires.extend(members.iter().filter(|m| m.id != g.id).map(|m| (*m, g)));
                }
                None => {
                    for m in members {
                        let t1 = m.t1.unwrap_or(Micros::MAX);
                        let ex = self.excuse(t1, |a| {
                            matches!(a.outcome, Outcome::Lost) && a.call.grantee() == Some(owner)
                        });
                        self.fail(
                            "I4",
                            format!(
                                "acquire returned epoch {e} with an expiry that no grant (now + ttl within the call) or renew wrote"
                            ),
                            vec![m.id],
                            ex,
                        );
                    }
                }
            }
        }
        (grants, reacquires)
    }

    /// I5: a re-acquire returned the holder's current, visible, unexpired lease.
    fn check_reacquires(&mut self, grant_ops: &[&'a Op], reacquires: &[(&'a Op, &'a Op)]) {
        self.report.stats.reacquires += reacquires.len();
        // Writes that change what a re-acquire must return, with their instant (a release: its t0).
        let mut writes: Vec<(&Op, Micros)> = Vec::new();
        for o in grant_ops {
            writes.push((o, self.g_range[&o.id].0));
        }
        for o in &self.ops {
            if o.renewed().is_some() {
                writes.push((o, o.write_time().expect("renew")));
            } else if (o.released() || o.forced().is_some())
                && let Some(t0) = o.t0
            {
                writes.push((o, t0));
            }
        }
        let write_at: HashMap<usize, Micros> = writes.iter().map(|&(w, at)| (w.id, at)).collect();
        let newer = self.newer_visible_writes(&writes, reacquires);
        for (&(m, src), newer) in reacquires.iter().zip(newer) {
            let (e, x) = m.granted().expect("granted");
            let (Some(t0), Some(t1)) = (m.t0, m.t1) else {
                continue;
            };
            let same_tx = |o: &Op| o.tx.is_some() && o.tx == m.tx;
            if src.commit == Commit::NotCommitted && !same_tx(src) {
                self.fail(
                    "I7",
                    format!(
                        "re-acquire returned epoch {e} as written by a transaction that never committed"
                    ),
                    vec![src.id, m.id],
                    None,
                );
                continue;
            }
            if x <= t0 {
                self.fail(
                    "I5",
                    format!(
                        "re-acquire returned epoch {e} whose expiry had passed before the call"
                    ),
                    vec![src.id, m.id],
                    None,
                );
            }
            let src_at = self.g_lo(src);
            let src_hi = self.g_range.get(&src.id).map_or(src_at, |r| r.1);
            if src_at >= t1 {
                self.fail(
                    "I5",
                    "re-acquire returned an expiry written only after it returned".into(),
                    vec![src.id, m.id],
                    None,
                );
            }
            // A newer write that m must have seen (committed before m was sent, or earlier in m's
            // own transaction) means m returned an outdated lease.
            let newer = newer.filter(|&(at, _)| at > src_hi).or_else(|| {
                let tx_ops = m.tx.and_then(|t| self.by_tx.get(&t))?;
                tx_ops.iter().find_map(|w| {
                    let at = *write_at.get(&w.id)?;
                    (at > src_hi
                        && w.id != src.id
                        && w.id != m.id
                        && same_tx(w)
                        && w.t1.is_some_and(|wt1| wt1 < t0))
                    .then_some((at, w.id))
                })
            });
            if let Some((_, w)) = newer {
                self.fail(
                    "I5",
                    format!(
                        "re-acquire returned epoch {e} although a newer committed write was visible"
                    ),
                    vec![src.id, w, m.id],
                    None,
                );
            }
        }
    }

    /// For each re-acquire `(m, src)`: of the committed writes confirmed before m was sent (other
    /// than src and m), the one with the latest instant, as `(instant, id)`. One sweep over the
    /// writes in order of confirmation, keeping the three latest instants seen so far.
    fn newer_visible_writes(
        &self,
        writes: &[(&Op, Micros)],
        reacquires: &[(&'a Op, &'a Op)],
    ) -> Vec<Option<(Micros, usize)>> {
        let mut confirmed: Vec<(u64, Micros, usize)> = writes
            .iter()
            .filter(|(w, _)| w.commit == Commit::Committed)
            .filter_map(|&(w, at)| Some((w.visible_at?, at, w.id)))
            .collect();
        confirmed.sort_unstable();
        let mut order: Vec<usize> = (0..reacquires.len()).collect();
        order.sort_by_key(|&j| reacquires[j].0.sent);
        let mut latest: Vec<(Micros, usize)> = Vec::with_capacity(4);
        let mut next = 0;
        let mut out = vec![None; reacquires.len()];
        for j in order {
            let (m, src) = reacquires[j];
            while next < confirmed.len() && confirmed[next].0 < m.sent {
                let (_, at, id) = confirmed[next];
                latest.push((at, id));
                latest.sort_unstable_by(|a, b| b.cmp(a));
                latest.truncate(3);
                next += 1;
            }
            out[j] = latest
                .iter()
                .copied()
                .find(|&(_, id)| id != src.id && id != m.id);
        }
        out
    }

    /// Attaches committed ok renews and releases to their grants (by epoch), checking I3/I4 basics.
    fn attach_writes(&mut self, leases: &mut [Lease<'a>], by_epoch: &HashMap<i64, usize>) {
        let ops = self.ops.clone();
        for o in ops {
            if o.commit != Commit::Committed {
                continue;
            }
            if let Some(epoch) = o.forced() {
                // An operator's end of whatever grant was held: like a release, without an owner.
                self.report.stats.forced += 1;
                match by_epoch.get(&epoch) {
                    None => {
                        let ex = self.excuse(o.t1.unwrap_or(Micros::MAX), |a| {
                            a.call.grants()
                                && (matches!(a.outcome, Outcome::Lost)
                                    || a.granted().is_some_and(|(e, _)| e == epoch))
                        });
                        self.fail(
                            "I3",
                            format!("force_release ended epoch {epoch}, which no committed grant carries"),
                            vec![o.id],
                            ex,
                        );
                    }
                    Some(&i) => match leases[i].release.or(leases[i].transfer) {
                        Some(prev) => {
                            let ids = vec![leases[i].op.id, prev.id, o.id];
                            self.fail(
                                "I3",
                                format!(
                                    "epoch {epoch} ended twice ({} and force_release)",
                                    verb(prev)
                                ),
                                ids,
                                None,
                            );
                        }
                        None => leases[i].release = Some(o),
                    },
                }
                continue;
            }
            let (Some(owner), Some(epoch)) = (o.call.owner(), o.call.epoch()) else {
                continue;
            };
            let is_renew = o.renewed().is_some();
            let is_release = o.released();
            let is_transfer = o.transferred();
            if !is_renew && !is_release && !is_transfer {
                continue;
            }
            if is_renew {
                self.report.stats.ok_renews += 1;
                let r = o.write_time().expect("renew instant");
                if !(o.t0.is_some_and(|t0| t0 <= r) && o.t1.is_some_and(|t1| r <= t1)) {
                    self.fail(
                        "I4",
                        "ok renew's expiry is not server now + ttl during the call".into(),
                        vec![o.id],
                        None,
                    );
                }
            } else if is_release {
                self.report.stats.ok_releases += 1;
            } else {
                self.report.stats.ok_transfers += 1;
            }
            let Some(&i) = by_epoch.get(&epoch) else {
                let before = o.t1.unwrap_or(Micros::MAX);
                let ex = self.excuse(before, |a| {
                    a.call.grants()
                        && a.call.grantee() == Some(owner)
                        && (matches!(a.outcome, Outcome::Lost)
                            || a.granted().is_some_and(|(e, _)| e == epoch))
                });
                self.fail(
                    "I3",
                    format!(
                        "ok {} for epoch {epoch}, which no committed grant carries",
                        verb(o)
                    ),
                    vec![o.id],
                    ex,
                );
                continue;
            };
            if leases[i].owner != owner {
                let ids = vec![leases[i].op.id, o.id];
                self.fail(
                    "I3",
                    format!(
                        "ok {} by {owner} of epoch {epoch}, granted to {}",
                        verb(o),
                        leases[i].owner
                    ),
                    ids,
                    None,
                );
                continue;
            }
            if is_renew {
                let r = o.write_time().expect("renew instant");
                leases[i].versions.push((r, o.renewed().expect("ok"), o.id));
            } else if let Some(prev) = leases[i].release.or(leases[i].transfer) {
                let ids = vec![leases[i].op.id, prev.id, o.id];
                self.fail(
                    "I3",
                    format!("epoch {epoch} ended twice ({} and {})", verb(prev), verb(o)),
                    ids,
                    None,
                );
            } else if is_release {
                leases[i].release = Some(o);
            } else {
                leases[i].transfer = Some(o);
            }
        }
        for l in leases.iter_mut() {
            l.versions.sort_by_key(|v| v.0);
        }
    }

    /// I1 (no overlap) and I2 (epochs rise, exactly by the documented steps unless a purge intervened)
    /// between consecutive committed grants.
    fn check_successions(&mut self, leases: &[Lease<'a>]) {
        for w in leases.windows(2) {
            let (a, b) = (&w[0], &w[1]);
            let ids = vec![a.op.id, b.op.id];
            let counter = a.epoch + i64::from(a.release.is_some());
            if b.epoch <= a.epoch {
                self.fail(
                    "I2",
                    format!(
                        "epoch {} granted after epoch {} (grant-time order)",
                        b.epoch, a.epoch
                    ),
                    ids.clone(),
                    None,
                );
            } else if b.epoch <= counter {
                self.fail(
                    "I2",
                    format!(
                        "epoch {} granted although the release of {} advanced the counter to {counter}",
                        b.epoch, a.epoch
                    ),
                    ids.clone(),
                    None,
                );
            } else if b.epoch != counter + 1 && !self.purge_between(a.g_lo, b.g_hi) {
                let ex = self.excuse(b.g_hi, |o| {
                    matches!(
                        o.call,
                        Call::Acquire { .. }
                            | Call::Release { .. }
                            | Call::Transfer { .. }
                            | Call::ForceRelease { .. }
                    )
                });
                self.fail(
                    "I7",
                    format!(
                        "epoch {} follows counter {counter}: an epoch was consumed by no committed grant",
                        b.epoch
                    ),
                    ids.clone(),
                    ex,
                );
            }
            // A transfer's successor is the grant the transfer made, with the next epoch.
            if let Some(t) = a.transfer
                && (b.epoch != a.epoch + 1 || t.call.grantee() != Some(b.owner))
            {
                self.fail(
                    "I3",
                    format!(
                        "epoch {} of {} follows epoch {}, which was transferred to {:?}",
                        b.epoch,
                        b.owner,
                        a.epoch,
                        t.call.grantee()
                    ),
                    vec![a.op.id, t.id, b.op.id],
                    None,
                );
            }
            // (A transfer ended `a` at the instant it granted `b`, checked above.)
            if a.transfer.is_some()
                || a.release
                    .is_some_and(|r| r.t0.is_some_and(|t0| t0 < b.g_hi))
            {
                continue;
            }
            let (x, vid) = a.expiry_before(b.g_hi);
            if x > b.g_hi {
                let ex = self.excuse(b.g_hi, |o| {
                    (matches!(
                        o.call,
                        Call::Renew { .. } | Call::Release { .. } | Call::Transfer { .. }
                    ) && o.call.owner() == Some(a.owner)
                        && o.call.epoch() == Some(a.epoch))
                        || matches!(o.call, Call::ForceRelease { .. })
                });
                let mut ops = vec![a.op.id];
                if vid != a.op.id {
                    ops.push(vid);
                }
                ops.push(b.op.id);
                self.fail(
                    "I1",
                    format!(
                        "{} was granted epoch {} while {}'s epoch {} was held ({}µs before its expiry)",
                        b.owner,
                        b.epoch,
                        a.owner,
                        a.epoch,
                        x - b.g_hi
                    ),
                    ops,
                    ex,
                );
            }
        }
    }

    fn purge_between(&self, from: Micros, to: Micros) -> bool {
        self.purges.between(from, to)
    }

    /// I3/I4: every committed ok renew extended the current, unexpired, unreleased grant.
    fn check_renews(&mut self, leases: &[Lease<'a>]) {
        for (i, l) in leases.iter().enumerate() {
            let next = leases.get(i + 1);
            for &(r, _, rid) in l.versions.iter().skip(1) {
                let op = self.by_id[&rid];
                if r < l.g_lo {
                    self.fail(
                        "I3",
                        format!("renew of epoch {} before it was granted", l.epoch),
                        vec![l.op.id, rid],
                        None,
                    );
                }
                if let Some(n) = next
                    && n.g_hi < r
                {
                    self.fail(
                        "I3",
                        format!(
                            "ok renew of epoch {} after epoch {} was granted",
                            l.epoch, n.epoch
                        ),
                        vec![l.op.id, n.op.id, rid],
                        None,
                    );
                }
                if let Some(rel) = l.release.or(l.transfer)
                    && rel.t1.is_some_and(|t1| t1 < r)
                {
                    self.fail(
                        "I3",
                        format!("ok renew of epoch {} after its {}", l.epoch, verb(rel)),
                        vec![l.op.id, rel.id, rid],
                        None,
                    );
                }
                let (x_prev, vid) = l.expiry_before(r);
                if op.t0.is_some_and(|t0| x_prev <= t0) {
                    let ex = self.excuse(r, |o| {
                        matches!(o.call, Call::Renew { .. })
                            && o.call.owner() == Some(l.owner)
                            && o.call.epoch() == Some(l.epoch)
                    });
                    self.fail(
                        "I3",
                        format!(
                            "ok renew of epoch {} whose expiry had passed before the call",
                            l.epoch
                        ),
                        vec![l.op.id, vid, rid],
                        ex,
                    );
                }
            }
        }
    }

    /// I3 for ok releases and fences; I13 for fenced transactions.
    fn check_releases_and_fences(&mut self, leases: &[Lease<'a>], by_epoch: &HashMap<i64, usize>) {
        for (i, l) in leases.iter().enumerate() {
            if let Some(rel) = l.release {
                self.check_held_call(leases, i, rel, verb(rel));
            }
            if let Some(t) = l.transfer {
                self.check_held_call(leases, i, t, "transfer");
            }
        }
        let fences: Vec<&Op> = self
            .ops
            .iter()
            .copied()
            .filter(|o| {
                o.commit == Commit::Committed && matches!(o.outcome, Outcome::Fenced { .. })
            })
            .collect();
        // Every (lease, expiry) a version of it had; the leases of higher epochs by when a client
        // learned they committed, and by their grant instant.
        let expiries: HashSet<(usize, Micros)> = leases
            .iter()
            .enumerate()
            .flat_map(|(i, l)| l.versions.iter().map(move |v| (i, v.1)))
            .collect();
        let by_visible = LowestAbove::new(leases, |m| m.op.visible_at.unwrap_or(u64::MAX));
        let by_grant = LowestAbove::new(leases, |m| m.g_hi);
        for f in fences {
            self.report.stats.fences += 1;
            let (owner, epoch) = (f.call.owner().unwrap_or(""), f.call.epoch().unwrap_or(0));
            let Outcome::Fenced {
                expires_at,
                pre_commit,
                commit_sent,
            } = f.outcome
            else {
                continue;
            };
            let Some(&i) = by_epoch.get(&epoch) else {
                let ex = self.excuse(f.t1.unwrap_or(Micros::MAX), |a| {
                    a.call.grants() && a.call.grantee() == Some(owner)
                });
                self.fail(
                    "I3",
                    format!("fence passed epoch {epoch}, which no committed grant carries"),
                    vec![f.id],
                    ex,
                );
                continue;
            };
            let l = &leases[i];
            if l.owner != owner {
                self.fail(
                    "I3",
                    format!(
                        "fence passed {owner} for epoch {epoch}, granted to {}",
                        l.owner
                    ),
                    vec![l.op.id, f.id],
                    None,
                );
                continue;
            }
            self.check_held_call(leases, i, f, "fence");
            if !expiries.contains(&(i, expires_at)) {
                let ex = self.excuse(f.t1.unwrap_or(Micros::MAX), |a| {
                    matches!(a.call, Call::Renew { .. })
                        && a.call.owner() == Some(owner)
                        && a.call.epoch() == Some(epoch)
                });
                self.fail(
                    "I3",
                    format!("fence of epoch {epoch} returned an expiry no version of it had"),
                    vec![l.op.id, f.id],
                    ex,
                );
            }
            // I13: no grant of a higher epoch was confirmed committed before this transaction's
            // COMMIT was even sent.
            if let Some(sent) = commit_sent {
                let committed_before = |m: &Lease| {
                    m.epoch > epoch
                        && !(f.tx.is_some() && m.op.tx == f.tx)
                        && m.op.visible_at.is_some_and(|v| v < sent)
                };
                let scan =
                    by_visible.may_have(epoch, |v| v < sent, |j| committed_before(&leases[j]));
                let candidates: &[Lease] = if scan { leases } else { &[] };
                for later in candidates.iter().filter(|m| committed_before(m)) {
                    self.fail(
                        "I13",
                        format!(
                            "epoch {} committed before the transaction fenced at epoch {epoch}",
                            later.epoch
                        ),
                        vec![l.op.id, f.id, later.op.id],
                        None,
                    );
                }
            }
            // §3: a successor that waited for the fenced commit counts its expiry from its grant,
            // i.e. its instant is after the fenced transaction's last clock reading.
            if let Some(pc) = pre_commit {
                // (A grant made later in the fenced transaction itself commits with it; when the
                // grant is ambiguous, any plausible grant op in that transaction excuses it.)
                let counted_early = |m: &Lease| {
                    m.epoch > epoch
                        && !f
                            .tx
                            .is_some_and(|t| m.op.tx == Some(t) || m.grant_txs.contains(&t))
                        && m.g_hi + WAIT_RESOLUTION <= pc
                };
                let scan = by_grant.may_have(
                    epoch,
                    |g| g + WAIT_RESOLUTION <= pc,
                    |j| counted_early(&leases[j]),
                );
                let candidates: &[Lease] = if scan { leases } else { &[] };
                for later in candidates.iter().filter(|m| counted_early(m)) {
                    let v = Violation {
                        invariant: "§3",
                        key: self.key.to_string(),
                        what: format!(
                            "epoch {}'s expiry is counted from {}µs before the transaction fenced at epoch {epoch} committed",
                            later.epoch,
                            pc - later.g_hi
                        ),
                        ops: vec![l.op.id, f.id, later.op.id],
                    };
                    self.report.violations.push(v);
                }
            }
        }
    }

    /// An ok release or a passed fence: the lease was current and held at some instant of the call.
    fn check_held_call(&mut self, leases: &[Lease<'a>], i: usize, op: &Op, what: &str) {
        let l = &leases[i];
        let (Some(t0), Some(t1)) = (op.t0, op.t1) else {
            return;
        };
        if let Some(n) = leases.get(i + 1)
            && n.g_hi < t0
        {
            self.fail(
                "I3",
                format!(
                    "{what} accepted epoch {} after epoch {} was granted",
                    l.epoch, n.epoch
                ),
                vec![l.op.id, n.op.id, op.id],
                None,
            );
        }
        if what == "fence"
            && let Some(rel) = l.release.or(l.transfer)
            && rel.t1.is_some_and(|rt1| rt1 < t0)
        {
            self.fail(
                "I3",
                format!("fence passed epoch {} after its {}", l.epoch, verb(rel)),
                vec![l.op.id, rel.id, op.id],
                None,
            );
        }
        if !l.held_somewhere_in(t0, t1) {
            let ex = self.excuse(t1, |a| {
                matches!(a.call, Call::Renew { .. })
                    && a.call.owner() == Some(l.owner)
                    && a.call.epoch() == Some(l.epoch)
            });
            self.fail(
                "I3",
                format!(
                    "{what} accepted epoch {} which was not held during the call",
                    l.epoch
                ),
                vec![l.op.id, op.id],
                ex,
            );
        }
    }

    /// inspect / register_waiter: what they report was written and committed, counters never go
    /// back (I2), a reported holder is unexpired (I6).
    fn check_reads(&mut self, leases: &[Lease<'a>], grant_ops: &[&'a Op]) {
        let reads: Vec<&Op> = self
            .ops
            .iter()
            .copied()
            .filter(|o| {
                o.commit == Commit::Committed
                    && matches!(o.outcome, Outcome::Inspected(_) | Outcome::Registered(_))
            })
            .collect();
        self.report.stats.reads += reads.len();
        // Every (owner, epoch, expiry) version any possibly-committed write produced.
        let mut versions: HashMap<(&str, i64, Micros), Micros> = HashMap::new();
        for o in grant_ops.iter().copied().chain(self.ops.iter().copied()) {
            if o.commit == Commit::NotCommitted {
                continue;
            }
            // A grant's version is its grantee's (a transfer's successor), a renewal's its owner's.
            let owner = if o.granted().is_some() {
                o.call.grantee()
            } else {
                o.call.owner()
            };
            let Some(owner) = owner else {
                continue;
            };
            let ev = match (o.granted(), o.renewed(), o.call.epoch()) {
                (Some((e, x)), _, _) => (e, x),
                (_, Some(x), Some(e)) => (e, x),
                _ => continue,
            };
            let at = self.g_lo(o);
            let slot = versions.entry((owner, ev.0, ev.1)).or_insert(at);
            *slot = (*slot).min(at);
        }
        let mut counters: HashSet<i64> = HashSet::new();
        for o in grant_ops.iter().copied().chain(self.ops.iter().copied()) {
            if o.commit == Commit::NotCommitted {
                continue;
            }
            if let Some((e, _)) = o.granted() {
                counters.insert(e);
            }
            if o.released() {
                counters.extend(o.call.epoch().map(|e| e + 1));
            }
            if let Some(e) = o.forced() {
                counters.insert(e + 1);
            }
        }
        // Committed grants in order of when a client learned they were committed, each with the
        // highest epoch confirmed up to then.
        let mut visible: Vec<(u64, i64)> = leases
            .iter()
            .filter_map(|l| l.op.visible_at.map(|v| (v, l.epoch)))
            .collect();
        visible.sort_unstable();
        let mut highest = i64::MIN;
        for v in &mut visible {
            highest = highest.max(v.1);
            v.1 = highest;
        }
        // Committed grants by epoch, each with the latest earliest-instant up to its epoch.
        let mut latest_grant: Vec<(i64, Micros)> =
            leases.iter().map(|l| (l.epoch, l.g_lo)).collect();
        latest_grant.sort_unstable();
        let mut latest = Micros::MIN;
        for g in &mut latest_grant {
            latest = latest.max(g.1);
            g.1 = latest;
        }
        let mut counter_reads: Vec<(u64, u64, i64, usize)> = Vec::new(); // (sent, done, counter, id)

        for r in reads {
            let (Some(t0), Some(t1)) = (r.t0, r.t1) else {
                continue;
            };
            let v = match &r.outcome {
                Outcome::Inspected(Some(v)) | Outcome::Registered(v) => v,
                _ => continue,
            };
            if v.held {
                let (owner, e, x) = (
                    v.owner.as_deref().unwrap_or(""),
                    v.epoch.unwrap_or(0),
                    v.expires_at.unwrap_or(0),
                );
                if x <= t0 {
                    self.fail(
                        "I6",
                        format!("{} reported epoch {e} held after its expiry", verb(r)),
                        vec![r.id],
                        None,
                    );
                }
                if let Some(now) = v.now
                    && !(t0 <= now && now <= t1)
                {
                    self.fail(
                        "I12",
                        "register_waiter's lapses_in is not expires_at - server now".into(),
                        vec![r.id],
                        None,
                    );
                }
                if versions.get(&(owner, e, x)).is_none_or(|at| *at >= t1) {
                    let ex = self.excuse(t1, |a| {
                        matches!(a.outcome, Outcome::Lost)
                            && (a.call.owner() == Some(owner) || a.call.grantee() == Some(owner))
                    });
                    self.fail(
                        "I7",
                        format!(
                            "{} reported {owner} holding epoch {e} until an expiry no committed write produced",
                            verb(r)
                        ),
                        vec![r.id],
                        ex,
                    );
                }
            }
            let Some(c) = v.epoch else { continue };
            if matches!(r.outcome, Outcome::Registered(_)) && !v.held {
                continue;
            }
            if !v.held && !counters.contains(&c) {
                let ex = self.excuse(t1, |a| matches!(a.outcome, Outcome::Lost));
                self.fail(
                    "I2",
                    format!("inspect reported counter {c}, which no grant or release produced"),
                    vec![r.id],
                    ex,
                );
            }
            let confirmed = visible.partition_point(|(at, _)| *at < r.sent);
            if let Some(&(_, e)) = confirmed.checked_sub(1).map(|n| &visible[n])
                && c < e
            {
                let gid = leases.iter().find(|l| l.epoch == e).map(|l| l.op.id);
                self.fail(
                    "I2",
                    format!(
                        "{} reported counter {c} after epoch {e} had committed",
                        verb(r)
                    ),
                    gid.into_iter().chain([r.id]).collect(),
                    None,
                );
            }
            let up_to_c = latest_grant.partition_point(|g| g.0 <= c);
            let later = up_to_c > 0 && latest_grant[up_to_c - 1].1 > t1;
            let candidates: &[Lease] = if later { leases } else { &[] };
            for l in candidates.iter().filter(|l| l.g_lo > t1 && l.epoch <= c) {
                self.fail(
                    "I2",
                    format!(
                        "epoch {} granted after {} had reported counter {c}",
                        l.epoch,
                        verb(r)
                    ),
                    vec![r.id, l.op.id],
                    None,
                );
            }
            counter_reads.push((r.sent, r.done, c, r.id));
        }
        // Reads ordered in real time never see the counter go back: each read against the highest
        // counter any read reported that had returned before it was sent.
        let mut by_done: Vec<(u64, i64, usize)> = counter_reads
            .iter()
            .map(|&(_, done, c, id)| (done, c, id))
            .collect();
        by_done.sort_unstable_by_key(|x| x.0);
        let mut highest: (i64, usize) = (i64::MIN, 0);
        let highest_before: Vec<(u64, (i64, usize))> = by_done
            .iter()
            .map(|&(done, c, id)| {
                if c >= highest.0 {
                    highest = (c, id);
                }
                (done, highest)
            })
            .collect();
        for &(sent, _, c, id) in &counter_reads {
            let returned = highest_before.partition_point(|x| x.0 < sent);
            if let Some(&(_, (c0, id0))) = returned.checked_sub(1).map(|n| &highest_before[n])
                && c < c0
            {
                self.fail(
                    "I2",
                    format!("counter went back from {c0} to {c} between reads"),
                    vec![id0, id],
                    None,
                );
            }
        }
    }

    /// A refused acquire (wait 0) means another owner's lease was visible and unexpired then.
    ///
    /// A grant `g` explains a refusal `r` if it is another owner's, visible to `r` (not known
    /// uncommitted, or in `r`'s own transaction), made before `r` returned, and it or a visible ok
    /// renew of it expires after `r` started. Grants visible to everyone are swept in order of
    /// their instant, keeping each owner's latest expiry and the two owners with the latest; what
    /// only `r`'s own transaction sees is looked at for `r` alone.
    fn check_refusals(&mut self, grant_ops: &[&'a Op]) {
        let refusals: Vec<&Op> = self
            .ops
            .iter()
            .copied()
            .filter(|o| {
                matches!(
                    o.outcome,
                    Outcome::Acquired {
                        acquired: false,
                        ..
                    }
                )
            })
            .collect();
        self.report.stats.refusals += refusals.len();
        // The latest expiry ok renews visible to everyone gave each (owner, epoch).
        let mut renewed: HashMap<(&str, i64), Micros> = HashMap::new();
        for o in &self.ops {
            if let (Some(x), Some(owner), Some(e)) = (o.renewed(), o.call.owner(), o.call.epoch())
                && o.commit != Commit::NotCommitted
            {
                let slot = renewed.entry((owner, e)).or_insert(x);
                *slot = (*slot).max(x);
            }
        }
        let grant_ids: HashSet<usize> = grant_ops.iter().map(|g| g.id).collect();
        let mut by_lease: HashMap<(&str, i64), Vec<&Op>> = HashMap::new();
        for g in grant_ops {
            if let (Some((e, _)), Some(owner)) = (g.granted(), g.call.grantee()) {
                by_lease.entry((owner, e)).or_default().push(g);
            }
        }
        // Whether `g` explains `r` (the definition above, for one grant).
        let explains = |g: &Op, r: &Op, t0: Micros, t1: Micros, owner: &str| {
            let Some((e, x0)) = g.granted() else {
                return false;
            };
            let visible =
                |o: &Op| o.commit != Commit::NotCommitted || (o.tx.is_some() && o.tx == r.tx);
            let gowner = g.call.grantee().unwrap_or("");
            if gowner == owner || !visible(g) || self.g_lo(g) >= t1 {
                return false;
            }
            let own_tx = r.tx.and_then(|t| self.by_tx.get(&t)).into_iter().flatten();
            let max_x = own_tx
                .filter(|o| {
                    visible(o) && o.call.owner() == Some(gowner) && o.call.epoch() == Some(e)
                })
                .filter_map(|o| o.renewed())
                .chain(renewed.get(&(gowner, e)).copied())
                .fold(x0, Micros::max);
            max_x > t0
        };
        // Grants visible to everyone: (instant, owner, latest expiry), by instant.
        let mut public: Vec<(Micros, &str, Micros)> = grant_ops
            .iter()
            .filter(|g| g.commit != Commit::NotCommitted)
            .filter_map(|g| {
                let (e, x0) = g.granted()?;
                let owner = g.call.grantee().unwrap_or("");
                let x = renewed.get(&(owner, e)).map_or(x0, |&x| x.max(x0));
                Some((self.g_lo(g), owner, x))
            })
            .collect();
        public.sort_unstable();
        let mut order: Vec<usize> = (0..refusals.len()).collect();
        order.sort_by_key(|&j| refusals[j].t1);
        let mut found = vec![false; refusals.len()];
        let mut latest: HashMap<&str, Micros> = HashMap::new();
        // The two owners with the latest expiries among the grants swept so far.
        let mut top: [Option<(&str, Micros)>; 2] = [None, None];
        let mut next = 0;
        for j in order {
            let r = refusals[j];
            let (Some(t0), Some(t1), Some(owner)) = (r.t0, r.t1, r.call.owner()) else {
                continue;
            };
            while next < public.len() && public[next].0 < t1 {
                let (_, o, x) = public[next];
                let slot = latest.entry(o).or_insert(x);
                *slot = (*slot).max(x);
                let x = *slot;
                match top {
                    [Some((o1, _)), _] if o1 == o => top[0] = Some((o, x)),
                    [Some((_, x1)), _] if x > x1 => top = [Some((o, x)), top[0]],
                    [None, _] => top[0] = Some((o, x)),
                    [_, Some((o2, _))] if o2 == o => top[1] = Some((o, x)),
                    [_, Some((_, x2))] if x > x2 => top[1] = Some((o, x)),
                    [_, None] => top[1] = Some((o, x)),
                    _ => {}
                }
                next += 1;
            }
            let other = top.iter().flatten().find(|(o, _)| *o != owner);
            found[j] = other.is_some_and(|&(_, x)| x > t0)
                || r.tx.and_then(|t| self.by_tx.get(&t)).is_some_and(|own| {
                    own.iter().any(|o| {
                        if o.commit != Commit::NotCommitted {
                            return false;
                        }
                        // An uncommitted grant of r's own transaction, or the grants an uncommitted
                        // renew of r's own transaction extended.
                        let lease = match (o.renewed(), o.call.owner(), o.call.epoch()) {
                            (Some(_), Some(ow), Some(e)) => by_lease.get(&(ow, e)),
                            _ => None,
                        };
                        (grant_ids.contains(&o.id) && explains(o, r, t0, t1, owner))
                            || lease
                                .is_some_and(|gs| gs.iter().any(|g| explains(g, r, t0, t1, owner)))
                    })
                });
        }
        for (r, found) in refusals.into_iter().zip(found) {
            let (Some(t1), Some(owner)) = (r.t1, r.call.owner()) else {
                continue;
            };
            if r.t0.is_none() || found {
                continue;
            }
            let ex = self.excuse(t1, |a| {
                matches!(a.outcome, Outcome::Lost)
                    && a.call.grantee().or(a.call.owner()) != Some(owner)
            });
            self.fail(
                "I6",
                format!("acquire by {owner} refused although no other owner held the key"),
                vec![r.id],
                ex,
            );
        }
    }
}

fn verb(o: &Op) -> &'static str {
    match o.call {
        Call::Acquire { .. } => "acquire",
        Call::Renew { .. } => "renew",
        Call::Release { .. } => "release",
        Call::Transfer { .. } => "transfer",
        Call::ForceRelease { .. } => "force_release",
        Call::Fence { .. } => "fence",
        Call::Inspect { .. } => "inspect",
        Call::RegisterWaiter { .. } => "register_waiter",
        Call::Purge { .. } => "purge",
    }
}
