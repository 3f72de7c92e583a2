//! The checker on synthetic histories: it accepts a valid one, reports each kind of violation, ignores
//! operations of aborted transactions and excuses (without reporting) failures that an operation of
//! unknown commit outcome could explain. Times are milliseconds on a made-up server clock.

use crate::checker::{Report, check};
use crate::model::{Call, Commit, Micros, Op, Outcome, View};
use crate::recorded::{self, Recorded, Row};
use crate::synthetic;

const BASE: Micros = 1_800_000_000_000_000;

fn at(ms: i64) -> Micros {
    BASE + ms * 1000
}

fn client_ns(ms: i64) -> u64 {
    ((ms + 10_000) * 1_000_000) as u64
}

#[derive(Default)]
struct H {
    ops: Vec<Op>,
}

impl H {
    /// Adds a committed autocommit op whose statement ran over [t0, t0 + 1 ms].
    fn push(&mut self, call: Call, outcome: Outcome, t0_ms: i64) -> usize {
        let id = self.ops.len();
        self.ops.push(Op {
            id,
            client: id,
            tx: None,
            call,
            outcome,
            t0: Some(at(t0_ms)),
            t1: Some(at(t0_ms) + 1000),
            lo: at(t0_ms),
            sent: client_ns(t0_ms),
            done: client_ns(t0_ms + 1),
            commit: Commit::Committed,
            visible_at: Some(client_ns(t0_ms + 1)),
        });
        id
    }

    /// A new grant at `ms` (instant = t0), expiring `ttl` ms later.
    fn grant(&mut self, owner: &str, epoch: i64, ms: i64, ttl: i64) -> usize {
        self.push(
            acquire(owner, ttl),
            Outcome::Acquired {
                acquired: true,
                epoch: Some(epoch),
                expires_at: Some(at(ms + ttl)),
            },
            ms,
        )
    }

    /// An acquire at `ms` that returned an existing lease (epoch, expiry at `exp_ms`).
    fn reacquire(&mut self, owner: &str, epoch: i64, ms: i64, exp_ms: i64) -> usize {
        self.push(
            acquire(owner, 1000),
            Outcome::Acquired {
                acquired: true,
                epoch: Some(epoch),
                expires_at: Some(at(exp_ms)),
            },
            ms,
        )
    }

    fn refused(&mut self, owner: &str, ms: i64) -> usize {
        self.push(
            acquire(owner, 100),
            Outcome::Acquired {
                acquired: false,
                epoch: None,
                expires_at: None,
            },
            ms,
        )
    }

    fn renew(&mut self, owner: &str, epoch: i64, ms: i64, ttl: i64, status: &str) -> usize {
        self.push(
            Call::Renew {
                key: "k".into(),
                owner: owner.into(),
                epoch,
                ttl_ms: ttl,
            },
            Outcome::Renewed {
                status: status.into(),
                expires_at: (status == "ok").then(|| at(ms + ttl)),
            },
            ms,
        )
    }

    fn release(&mut self, owner: &str, epoch: i64, ms: i64, status: &str) -> usize {
        self.push(
            Call::Release {
                key: "k".into(),
                owner: owner.into(),
                epoch,
            },
            Outcome::Released {
                status: status.into(),
            },
            ms,
        )
    }

    /// A transfer at `ms` of (owner, epoch) to `to`: `Some(epoch)` granted until `ms + ttl`, or
    /// refused with `status` when `granted` is None.
    fn transfer(
        &mut self,
        owner: &str,
        epoch: i64,
        to: &str,
        ms: i64,
        ttl: i64,
        granted: Option<i64>,
    ) -> usize {
        self.push(
            Call::Transfer {
                key: "k".into(),
                owner: owner.into(),
                epoch,
                to_owner: to.into(),
                ttl_ms: ttl,
            },
            Outcome::Transferred {
                status: if granted.is_some() { "ok" } else { "not_owner" }.into(),
                epoch: granted,
                expires_at: granted.map(|_| at(ms + ttl)),
            },
            ms,
        )
    }

    /// A passed fence at `ms`; its transaction read the clock at `pre_commit_ms` and sent COMMIT
    /// (client clock) at `commit_sent_ms`.
    fn fence(
        &mut self,
        owner: &str,
        epoch: i64,
        ms: i64,
        exp_ms: i64,
        pre_commit_ms: Option<i64>,
        commit_sent_ms: Option<i64>,
    ) -> usize {
        self.push(
            Call::Fence {
                key: "k".into(),
                owner: owner.into(),
                epoch,
            },
            Outcome::Fenced {
                expires_at: at(exp_ms),
                pre_commit: pre_commit_ms.map(at),
                commit_sent: commit_sent_ms.map(client_ns),
            },
            ms,
        )
    }

    fn inspect(&mut self, ms: i64, held_by: Option<(&str, i64, i64)>, counter: i64) -> usize {
        let view = match held_by {
            Some((owner, epoch, exp_ms)) => View {
                held: true,
                owner: Some(owner.into()),
                epoch: Some(epoch),
                expires_at: Some(at(exp_ms)),
                now: None,
            },
            None => View {
                held: false,
                owner: None,
                epoch: Some(counter),
                expires_at: None,
                now: None,
            },
        };
        self.push(
            Call::Inspect { key: "k".into() },
            Outcome::Inspected(Some(view)),
            ms,
        )
    }

    fn purge(&mut self, ms: i64, n: i64) -> usize {
        self.push(Call::Purge { older_than_ms: 0 }, Outcome::Purged(n), ms)
    }

    fn set(&mut self, id: usize, commit: Commit, tx: Option<usize>) {
        self.ops[id].commit = commit;
        self.ops[id].tx = tx;
        if commit != Commit::Committed {
            self.ops[id].visible_at = None;
        }
    }

    fn check(&self) -> Report {
        check(&self.ops)
    }
}

fn acquire(owner: &str, ttl: i64) -> Call {
    Call::Acquire {
        key: "k".into(),
        owner: owner.into(),
        ttl_ms: ttl,
        wait_ms: 0,
    }
}

/// Asserts the report names exactly `invariants`.
fn reports(h: &H, invariants: &[&str]) -> Report {
    let r = h.check();
    assert_eq!(
        r.invariants(),
        invariants,
        "violations: {:#?}\nexcused: {:#?}",
        r.violations,
        r.excused
    );
    r
}

/// A history that exercises every check without breaking any: grants, renew, release, takeover after
/// a lapse, re-acquire, reads, refusals, a fence, a purge.
fn valid() -> H {
    let mut h = H::default();
    h.grant("a", 1, 0, 100); //           a holds 1 until 100
    h.reacquire("a", 1, 10, 100); //      idempotent
    h.refused("b", 20);
    h.inspect(30, Some(("a", 1, 100)), 1);
    h.renew("a", 1, 50, 100, "ok"); //    until 150
    h.reacquire("a", 1, 60, 150);
    h.fence("a", 1, 70, 150, Some(80), Some(81));
    h.release("a", 1, 90, "ok"); //       FREE(2)
    h.inspect(95, None, 2);
    h.renew("a", 1, 96, 100, "not_owner");
    h.grant("b", 3, 100, 50); //          b holds 3 until 150
    h.refused("a", 110);
    h.inspect(160, None, 3); //           lapsed
    h.grant("c", 4, 170, 50); //          takeover after the lapse: counter + 1
    h.release("c", 4, 180, "ok"); //      FREE(5)
    h.purge(300, 2);
    h.grant("a", 9, 400, 50); //          re-created above the floor
    h
}

#[test]
fn checker_accepts_a_valid_history() {
    let r = reports(&valid(), &[]);
    assert!(r.excused.is_empty(), "{:#?}", r.excused);
    assert_eq!(r.stats.committed_grants, 4);
    assert_eq!(r.stats.ok_renews, 1);
    assert_eq!(r.stats.ok_releases, 2);
    assert_eq!(r.stats.reacquires, 2);
}

#[test]
fn checker_reports_overlapping_grants_i1() {
    let mut h = H::default();
    h.grant("a", 1, 0, 100);
    h.grant("b", 2, 50, 100);
    reports(&h, &["I1"]);
}

#[test]
fn checker_reports_a_grant_while_a_renewed_lease_was_held_i1() {
    let mut h = H::default();
    h.grant("a", 1, 0, 100);
    h.renew("a", 1, 80, 100, "ok"); // until 180
    h.grant("b", 2, 150, 100);
    reports(&h, &["I1"]);
}

#[test]
fn checker_reports_decreasing_epochs_i2() {
    let mut h = H::default();
    h.grant("a", 5, 0, 10);
    h.grant("b", 4, 20, 10);
    reports(&h, &["I2"]);
}

#[test]
fn checker_reports_a_grant_reusing_a_released_epoch_i2() {
    let mut h = H::default();
    h.grant("a", 1, 0, 100);
    h.release("a", 1, 10, "ok"); // counter 2
    h.grant("b", 2, 20, 100);
    reports(&h, &["I2"]);
}

#[test]
fn checker_reports_an_epoch_consumed_by_no_committed_grant_i7() {
    let mut h = H::default();
    h.grant("a", 1, 0, 10);
    h.grant("b", 3, 20, 10);
    reports(&h, &["I7"]);
    // The same gap is fine when a purge ran in between (the floor may come from another key).
    h.purge(15, 1);
    reports(&h, &[]);
}

#[test]
fn checker_reports_a_stale_epoch_renew_after_a_newer_grant_i3() {
    let mut h = H::default();
    h.grant("a", 1, 0, 10);
    h.grant("b", 2, 20, 100);
    h.renew("a", 1, 30, 100, "ok");
    let r = reports(&h, &["I3"]);
    assert!(
        r.violations
            .iter()
            .any(|v| v.what.contains("after epoch 2"))
    );
}

#[test]
fn checker_reports_a_renew_of_a_lapsed_lease_i3() {
    let mut h = H::default();
    h.grant("a", 1, 0, 10);
    h.renew("a", 1, 30, 100, "ok");
    reports(&h, &["I3"]);
}

#[test]
fn checker_reports_a_renew_of_a_never_granted_epoch_i3() {
    let mut h = H::default();
    h.grant("a", 1, 0, 100);
    h.renew("a", 7, 30, 100, "ok");
    reports(&h, &["I3"]);
}

#[test]
fn checker_reports_a_renew_by_another_owner_i3() {
    let mut h = H::default();
    h.grant("a", 1, 0, 100);
    h.renew("b", 1, 30, 100, "ok");
    reports(&h, &["I3"]);
}

#[test]
fn checker_reports_a_stale_release_and_a_stale_fence_i3() {
    let mut h = H::default();
    h.grant("a", 1, 0, 10);
    h.grant("b", 3, 20, 100);
    h.release("a", 1, 30, "ok");
    reports(&h, &["I3"]);
    let mut h = H::default();
    h.grant("a", 1, 0, 10);
    h.grant("b", 2, 20, 100);
    h.fence("a", 1, 30, 10, None, None);
    reports(&h, &["I3"]);
}

#[test]
fn checker_reports_a_release_of_a_lapsed_lease_and_a_double_release_i3() {
    let mut h = H::default();
    h.grant("a", 1, 0, 10);
    h.release("a", 1, 30, "ok");
    reports(&h, &["I3"]);
    let mut h = H::default();
    h.grant("a", 1, 0, 100);
    h.release("a", 1, 10, "ok");
    h.release("a", 1, 20, "ok");
    reports(&h, &["I3"]);
}

#[test]
fn checker_reports_a_renew_whose_expiry_is_not_now_plus_ttl_i4() {
    let mut h = H::default();
    h.grant("a", 1, 0, 100);
    let r = h.renew("a", 1, 30, 100, "ok");
    h.ops[r].outcome = Outcome::Renewed {
        status: "ok".into(),
        expires_at: Some(at(500)),
    };
    reports(&h, &["I4"]);
}

#[test]
fn checker_reports_a_reacquire_returning_a_lapsed_or_outdated_lease_i5() {
    let mut h = H::default();
    h.grant("a", 1, 0, 10);
    h.reacquire("a", 1, 20, 10);
    reports(&h, &["I5"]);
    let mut h = H::default();
    h.grant("a", 1, 0, 100);
    h.renew("a", 1, 20, 100, "ok"); // until 120, committed before the re-acquire was sent
    h.reacquire("a", 1, 30, 100);
    reports(&h, &["I5"]);
}

#[test]
fn checker_reports_a_read_of_an_aborted_grant_i7() {
    let mut h = H::default();
    let g = h.grant("a", 1, 0, 100);
    h.set(g, Commit::NotCommitted, Some(1));
    h.reacquire("a", 1, 20, 100); // another transaction saw it
    reports(&h, &["I7"]);
    // Within the grant's own transaction the same re-acquire is fine.
    h.ops[1].tx = Some(1);
    reports(&h, &[]);
}

#[test]
fn checker_reports_inspect_results_no_committed_write_explains() {
    let mut h = H::default();
    h.grant("a", 1, 0, 100);
    h.inspect(20, Some(("a", 1, 140)), 1); // an expiry nobody wrote
    reports(&h, &["I7"]);
    let mut h = H::default();
    h.grant("a", 1, 0, 100);
    h.inspect(120, Some(("a", 1, 100)), 1); // held after its expiry
    reports(&h, &["I6"]);
    let mut h = H::default();
    h.grant("a", 1, 0, 10);
    h.inspect(20, None, 6); // a counter nobody produced
    reports(&h, &["I2"]);
}

#[test]
fn checker_reports_a_counter_going_back_i2() {
    let mut h = H::default();
    h.grant("a", 1, 0, 10);
    h.release("a", 1, 5, "ok");
    h.inspect(20, None, 2);
    h.inspect(30, None, 1);
    reports(&h, &["I2"]);
}

#[test]
fn checker_reports_a_refusal_when_no_other_owner_held_the_key_i6() {
    let mut h = H::default();
    h.grant("a", 1, 0, 10);
    h.refused("b", 20); // a's lease had lapsed
    reports(&h, &["I6"]);
    let mut h = H::default();
    h.grant("a", 1, 0, 100);
    h.refused("a", 20); // the holder itself is never refused
    reports(&h, &["I6"]);
}

#[test]
fn checker_reports_a_grant_committed_before_a_fenced_transaction_i13() {
    let mut h = H::default();
    h.grant("a", 1, 0, 50);
    h.fence("a", 1, 10, 50, Some(100), Some(101)); // COMMIT sent at 101
    h.grant("b", 2, 60, 50); //                      confirmed committed at 61
    let r = h.check();
    assert!(r.invariants().contains(&"I13"), "{:#?}", r.violations);
}

#[test]
fn checker_flags_a_successor_expiry_counted_from_before_the_fenced_commit() {
    let mut h = H::default();
    h.grant("a", 1, 0, 50);
    h.fence("a", 1, 10, 50, Some(80), None); // the fenced transaction read the clock at 80
    let b = h.grant("b", 2, 60, 50); //          b's instant 60: before that
    h.ops[b].visible_at = Some(client_ns(200));
    let r = h.check();
    assert!(r.violations.iter().any(|v| v.invariant == "§3"), "{r:#?}");
}

#[test]
fn checker_reports_malformed_results() {
    let mut h = H::default();
    h.push(
        acquire("a", 10),
        Outcome::Acquired {
            acquired: true,
            epoch: None,
            expires_at: Some(at(10)),
        },
        0,
    );
    h.renew("a", 1, 5, 10, "maybe");
    reports(&h, &["well-formed"]);
}

#[test]
fn checker_ignores_writes_of_aborted_transactions() {
    let mut h = H::default();
    h.grant("a", 1, 0, 100);
    let g = h.grant("b", 2, 50, 100); // would overlap, but rolled back
    h.set(g, Commit::NotCommitted, Some(7));
    let r = h.renew("b", 2, 60, 100, "ok");
    h.set(r, Commit::NotCommitted, Some(7));
    h.grant("c", 2, 200, 100); // the aborted grant consumed no epoch
    let r = reports(&h, &[]);
    assert_eq!(r.stats.ignored_uncommitted, 2);
}

#[test]
fn checker_excuses_failures_an_ambiguous_commit_could_explain_but_not_others() {
    // An ok release whose commit is unknown may have ended a's lease before b's grant.
    let mut h = H::default();
    h.grant("a", 1, 0, 100);
    let rel = h.release("a", 1, 20, "ok");
    h.set(rel, Commit::Ambiguous, Some(3));
    h.grant("b", 3, 50, 100);
    let r = reports(&h, &[]);
    assert!(!r.excused.is_empty());
    assert_eq!(r.stats.ambiguous, 1);

    // A lost acquire (result unknown) may have been the grant that a later ok renew names.
    let mut h = H::default();
    let lost = h.push(acquire("a", 100), Outcome::Lost, 0);
    h.set(lost, Commit::Ambiguous, None);
    h.ops[lost].t0 = None;
    h.ops[lost].t1 = None;
    h.renew("a", 1, 30, 100, "ok");
    let r = reports(&h, &[]);
    assert_eq!(r.excused.len(), 1);

    // But an ambiguous op cannot excuse two committed grants that overlap.
    let mut h = H::default();
    h.grant("a", 1, 0, 100);
    let amb = h.renew("b", 9, 10, 100, "ok");
    h.set(amb, Commit::Ambiguous, Some(4));
    h.grant("b", 2, 50, 100);
    reports(&h, &["I1"]);
}

/// The size of [`checker_accepts_a_large_valid_history`]'s history: `PGLEASE_HISTORY_CHECK_OPS`
/// (default 100 000; the soak's 1 000 000 runs in well under a minute).
fn large_history_ops() -> usize {
    std::env::var("PGLEASE_HISTORY_CHECK_OPS").map_or(100_000, |v| {
        v.trim().parse().unwrap_or_else(|_| {
            panic!("PGLEASE_HISTORY_CHECK_OPS must be a number of operations, got {v:?}")
        })
    })
}

/// The checker scales: a valid history of 100 000 calls (25 000 on each of 4 keys) that takes every
/// path of the checker is accepted. Every check indexes what it compares against (sorted by time or
/// epoch, per key), so its work grows like n log n; a checker that compared each call with every
/// other call of its key would take hours on this history, so this test finishing is the proof.
#[test]
fn checker_accepts_a_large_valid_history() {
    let n = large_history_ops();
    let ops = synthetic::valid_history(n, 4, 0x5eed_1e45e);
    let r = check(&ops);
    assert!(
        r.violations.is_empty() && r.excused.is_empty(),
        "{} violations, {} excused; first: {:#?}",
        r.violations.len(),
        r.excused.len(),
        r.violations
            .iter()
            .chain(&r.excused)
            .take(5)
            .collect::<Vec<_>>()
    );
    let s = &r.stats;
    let exercised = [
        ("committed grants", s.committed_grants),
        ("re-acquires", s.reacquires),
        ("ok renews", s.ok_renews),
        ("ok releases", s.ok_releases),
        ("passed fences", s.fences),
        ("reads", s.reads),
        ("refusals", s.refusals),
        ("uncommitted writes", s.ignored_uncommitted),
        ("ambiguous writes", s.ambiguous),
    ];
    for (what, count) in exercised {
        assert!(count > n / 1000, "only {count} {what} in {n} calls: {s:?}");
    }
}

/// A history with a release, a transfer and a lapse, and the lease.history that tells it: epoch 1
/// renewed and released, epoch 3 transferred to c (epoch 4), which was renewed and lapsed; the history
/// read at 400 ms.
fn with_transfer() -> (H, Recorded) {
    let mut h = H::default();
    h.grant("a", 1, 0, 100); //               a holds 1 until 100
    h.renew("a", 1, 50, 100, "ok"); //        until 150
    h.release("a", 1, 60, "ok"); //           FREE(2)
    h.grant("b", 3, 100, 100); //             b holds 3 until 200
    h.renew("b", 1, 110, 100, "not_owner");
    h.transfer("b", 3, "c", 120, 100, Some(4)); // c holds 4 until 220
    h.renew("b", 3, 130, 100, "not_owner"); //    the old grant is fenced
    h.renew("c", 4, 150, 100, "ok"); //       until 250
    h.transfer("b", 3, "a", 160, 100, None);
    let row = |epoch,
               owner: &str,
               granted: i64,
               expires: i64,
               ended: Option<Micros>,
               by: Option<&str>| Row {
        epoch,
        owner: owner.into(),
        holder_role: Some("app".into()),
        granted_at: Some(at(granted)),
        expires_at: Some(at(expires)),
        ended_at: ended,
        ended_by: by.map(str::to_string),
        data: None,
    };
    let rows = vec![
        row(1, "a", 0, 150, Some(at(60) + 500), Some("released")),
        row(3, "b", 100, 200, Some(at(120)), Some("transferred")),
        row(4, "c", 120, 250, Some(at(250)), Some("lapsed")),
    ];
    let rec = Recorded {
        key: "k".into(),
        t0: at(400),
        t1: at(401),
        rows,
    };
    (h, rec)
}

fn recorded_violations(h: &H, rec: &Recorded) -> recorded::Report {
    recorded::check(&h.ops, std::slice::from_ref(rec), |_| "app")
}

/// Asserts that the comparison reports a violation whose text contains `what`.
fn recorded_reports(h: &H, rec: &Recorded, what: &str) {
    let r = recorded_violations(h, rec);
    assert!(
        r.violations.iter().any(|v| v.what.contains(what)),
        "expected a violation containing {what:?}, got {:#?}",
        r.violations
    );
}

#[test]
fn checker_accepts_transfers_and_a_recorded_history_that_tells_the_log() {
    let (h, rec) = with_transfer();
    let r = reports(&h, &[]);
    assert_eq!(r.stats.committed_grants, 3);
    assert_eq!(r.stats.ok_transfers, 1);
    let r = recorded_violations(&h, &rec);
    assert!(r.violations.is_empty(), "{:#?}", r.violations);
    assert_eq!(
        (
            r.rows,
            r.released,
            r.transferred,
            r.lapsed,
            r.held,
            r.allowed
        ),
        (3, 1, 1, 1, 0, 0)
    );
    // Read before c's grant lapsed, the last grant is held.
    let mut early = rec.clone();
    (early.t0, early.t1) = (at(200), at(201));
    early.rows[2].ended_at = None;
    early.rows[2].ended_by = None;
    let r = recorded_violations(&h, &early);
    assert!(r.violations.is_empty(), "{:#?}", r.violations);
    assert_eq!(r.held, 1);
}

#[test]
fn checker_reports_a_renew_or_release_after_a_transfer_and_a_grant_in_place_of_the_successor_i3() {
    let (mut h, _) = with_transfer();
    h.renew("b", 3, 170, 100, "ok");
    reports(&h, &["I3"]);
    let (mut h, _) = with_transfer();
    h.release("b", 3, 170, "ok");
    reports(&h, &["I3"]);
    let mut h = H::default();
    h.grant("a", 1, 0, 100);
    h.transfer("a", 1, "b", 10, 100, Some(2));
    h.ops[1].outcome = Outcome::Transferred {
        status: "ok".into(),
        epoch: Some(3),
        expires_at: Some(at(110)),
    };
    // (Skipping epoch 2 also consumed an epoch that no committed grant carries.)
    reports(&h, &["I3", "I7"]);
}

#[test]
fn history_comparison_reports_a_missing_or_misattributed_grant() {
    let (h, mut rec) = with_transfer();
    rec.rows.remove(1);
    recorded_reports(
        &h,
        &rec,
        "the committed grant of epoch 3 to b is not in lease.history",
    );
    let (h, mut rec) = with_transfer();
    rec.rows[2].owner = "b".into();
    recorded_reports(&h, &rec, "records epoch 4 as b's");
    let (h, mut rec) = with_transfer();
    rec.rows[0].holder_role = Some("reporting".into());
    recorded_reports(&h, &rec, "for role");
    let (h, mut rec) = with_transfer();
    rec.rows[0].granted_at = Some(at(1));
    recorded_reports(&h, &rec, "as granted at");
    let (h, mut rec) = with_transfer();
    rec.rows[1].data = Some("x".into());
    recorded_reports(&h, &rec, "records data");
}

#[test]
fn history_comparison_reports_a_grant_nobody_made_or_one_that_rolled_back_but_allows_a_lost_call() {
    let (h, mut rec) = with_transfer();
    let mut extra = rec.rows[2].clone();
    (extra.epoch, extra.granted_at, extra.expires_at) = (5, Some(at(300)), Some(at(350)));
    extra.ended_at = extra.expires_at;
    rec.rows.push(extra.clone());
    recorded_reports(&h, &rec, "that no call of the workload made");
    // The same grant, by a call that rolled back.
    let (mut h, _) = with_transfer();
    let g = h.grant("c", 5, 300, 50);
    h.set(g, Commit::NotCommitted, Some(1));
    recorded_reports(&h, &rec, "whose every call rolled back");
    // A call to c whose connection died before 300 ms may have made it: allowed, once.
    let (mut h, _) = with_transfer();
    let lost = h.push(acquire("c", 50), Outcome::Lost, 290);
    h.set(lost, Commit::Ambiguous, None);
    h.ops[lost].t0 = None;
    h.ops[lost].t1 = None;
    let r = recorded_violations(&h, &rec);
    assert!(r.violations.is_empty(), "{:#?}", r.violations);
    assert_eq!(r.allowed, 1);
    let mut twice = rec.clone();
    (extra.epoch, extra.granted_at) = (6, Some(at(360)));
    twice.rows.push(extra);
    recorded_reports(&h, &twice, "that no call of the workload made");
}

#[test]
fn history_comparison_reports_an_end_that_is_not_what_the_workload_did() {
    // Released (acknowledged ok), recorded as lapsed.
    let (h, mut rec) = with_transfer();
    rec.rows[0].ended_by = Some("lapsed".into());
    rec.rows[0].ended_at = Some(at(150));
    recorded_reports(&h, &rec, "epoch 1 was released (acknowledged ok)");
    // Released, but at a time outside the release's call.
    let (h, mut rec) = with_transfer();
    rec.rows[0].ended_at = Some(at(70));
    recorded_reports(&h, &rec, "outside the call that released it");
    // Transferred, recorded as released.
    let (h, mut rec) = with_transfer();
    rec.rows[1].ended_by = Some("released".into());
    recorded_reports(&h, &rec, "epoch 3 was transferred (acknowledged ok)");
    // Transferred, but the successor was not granted when it ended.
    let (h, mut rec) = with_transfer();
    rec.rows[2].granted_at = Some(at(121));
    recorded_reports(&h, &rec, "but lease.history's next grant is");
    // Lapsed, but its recorded last expiry is not the renewal's.
    let (h, mut rec) = with_transfer();
    rec.rows[2].expires_at = Some(at(220));
    rec.rows[2].ended_at = Some(at(220));
    recorded_reports(&h, &rec, "its last committed version had");
    // Recorded as held although its expiry passed before the read.
    let (h, mut rec) = with_transfer();
    rec.rows[2].ended_by = None;
    rec.rows[2].ended_at = None;
    recorded_reports(&h, &rec, "recorded as held with last expiry");
    // Recorded as lapsed at an expiry after the read.
    let (h, mut rec) = with_transfer();
    (rec.t0, rec.t1) = (at(200), at(201));
    recorded_reports(&h, &rec, "which had not passed");
    // Forced, which the workload never does.
    let (h, mut rec) = with_transfer();
    rec.rows[2].ended_by = Some("forced".into());
    recorded_reports(&h, &rec, "recorded as ended by \"forced\"");
    // Epochs out of order.
    let (h, mut rec) = with_transfer();
    rec.rows.swap(0, 1);
    recorded_reports(&h, &rec, "lists epoch 1 after epoch 3");
}

#[test]
fn history_comparison_allows_either_end_for_a_release_of_unknown_outcome() {
    let (mut h, mut rec) = with_transfer();
    let g = h.grant("c", 5, 300, 50);
    let rel = h.release("c", 5, 310, "ok");
    h.set(rel, Commit::Ambiguous, Some(7));
    let row = |by: &str, ended| Row {
        epoch: 5,
        owner: "c".into(),
        holder_role: Some("app".into()),
        granted_at: Some(at(300)),
        expires_at: Some(at(350)),
        ended_at: Some(ended),
        ended_by: Some(by.into()),
        data: None,
    };
    (rec.t0, rec.t1) = (at(400), at(401));
    rec.rows.push(row("released", at(310) + 500));
    let r = recorded_violations(&h, &rec);
    assert!(r.violations.is_empty(), "{:#?}", r.violations);
    assert_eq!(r.allowed, 1);
    rec.rows[3] = row("lapsed", at(350));
    let r = recorded_violations(&h, &rec);
    assert!(r.violations.is_empty(), "{:#?}", r.violations);
    // Once the release is known to have committed, only `released` is right.
    h.set(rel, Commit::Committed, None);
    recorded_reports(&h, &rec, "epoch 5 was released (acknowledged ok)");
    let _ = g;
}

#[test]
fn checker_and_history_comparison_take_a_force_release_as_the_end_of_the_grant() {
    let (mut h, mut rec) = with_transfer();
    // The operator ends c's epoch 4 at 200 ms (before its expiry at 250).
    let f = h.push(
        Call::ForceRelease { key: "k".into() },
        Outcome::Forced(Some(4)),
        200,
    );
    rec.rows[2].ended_by = Some("forced".into());
    rec.rows[2].ended_at = Some(at(200) + 500);
    let r = reports(&h, &[]);
    assert_eq!(r.stats.forced, 1);
    let r = recorded_violations(&h, &rec);
    assert!(r.violations.is_empty(), "{:#?}", r.violations);
    assert_eq!(r.forced, 1);
    // Recorded as lapsed although it was forced.
    let mut lapsed = rec.clone();
    lapsed.rows[2].ended_by = Some("lapsed".into());
    lapsed.rows[2].ended_at = Some(at(250));
    recorded_reports(&h, &lapsed, "epoch 4 was force-released (acknowledged ok)");
    // The forced holder's renewal is not ok any more; a grant after the force counts from 5.
    let mut late = H { ops: h.ops.clone() };
    late.renew("c", 4, 210, 100, "ok");
    reports(&late, &["I3"]);
    let mut next = H { ops: h.ops.clone() };
    next.grant("a", 5, 220, 100);
    reports(&next, &["I2"]);
    let mut next = H { ops: h.ops.clone() };
    next.grant("a", 6, 220, 100);
    reports(&next, &[]);
    let _ = f;
}

#[test]
fn history_comparison_reports_a_grant_known_committed_only_through_later_calls_when_missing() {
    // The grant's own call lost its answer; a committed renewal of (c, 5) shows it committed.
    let (mut h, rec) = with_transfer();
    let lost = h.push(acquire("c", 50), Outcome::Lost, 290);
    h.set(lost, Commit::Ambiguous, None);
    h.ops[lost].t0 = None;
    h.ops[lost].t1 = None;
    h.renew("c", 5, 300, 100, "ok");
    recorded_reports(&h, &rec, "epoch 5 (Some(\"c\")) was committed");
    // Recorded, it is explained by the lost call.
    let mut with = rec.clone();
    let mut row = with.rows[2].clone();
    (row.epoch, row.granted_at, row.expires_at) = (5, Some(at(295)), Some(at(400)));
    (row.ended_at, row.ended_by) = (None, None);
    with.rows.push(row);
    (with.t0, with.t1) = (at(390), at(391));
    let r = recorded_violations(&h, &with);
    assert!(r.violations.is_empty(), "{:#?}", r.violations);
    assert_eq!(r.allowed, 1);
}
