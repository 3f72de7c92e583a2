//! A renew racing a takeover of a lease that is just lapsing: whichever commits first decides, and
//! the loser is told so; there is never a second holder (SEMANTICS §3-§5; I1, I3, I4, I6, I9).

use crate::AWAIT_LAPSE;
use crate::spec::Spec;

fn renew_vs_takeover() -> Spec {
    Spec::new()
        .session(
            "s1",
            &[
                (
                    "s1_acquire",
                    "SELECT acquired, epoch FROM lease.acquire('k', 'o1', '2 seconds')",
                ),
                (
                    "s1_acquire_brief",
                    "SELECT acquired, epoch FROM lease.acquire('k', 'o1', '100 milliseconds')",
                ),
                ("s1_begin", "BEGIN"),
                (
                    "s1_renew",
                    "SELECT status FROM lease.renew('k', 'o1', 1, '1 hour')",
                ),
                ("s1_commit", "COMMIT"),
                ("s1_rollback", "ROLLBACK"),
            ],
        )
        .session(
            "s2",
            &[
                ("s2_begin", "BEGIN"),
                (
                    "s2_takeover",
                    "SELECT acquired, epoch FROM lease.acquire('k', 'o2', '1 hour')",
                ),
                ("s2_commit", "COMMIT"),
                (
                    "s2_inspect",
                    "SELECT held, owner, epoch FROM lease.inspect('k')",
                ),
            ],
        )
        .timer("t", &[("t_await_lapse", AWAIT_LAPSE)])
}

#[tokio::test]
async fn renew_that_commits_first_defeats_a_takeover_of_the_lapsing_lease() {
    // s1 renews before its lease lapses but commits only after: the takeover, which read the
    // committed (lapsed) row, waits for the renew's row lock and then sees the renewed lease.
    renew_vs_takeover()
        .check(
            &[
                "s1_acquire",
                "s1_begin",
                "s1_renew",
                "t_await_lapse",
                "s2_takeover",
                "s1_commit",
                "s2_inspect",
            ],
            r"
            step s1_acquire: SELECT acquired, epoch FROM lease.acquire('k', 'o1', '2 seconds')
            acquired|epoch
            t|1
            step s1_begin: BEGIN
            step s1_renew: SELECT status FROM lease.renew('k', 'o1', 1, '1 hour')
            status
            ok
            step t_await_lapse: DO $$ BEGIN WHILE (SELECT held FROM lease.inspect('k')) LOOP PERFORM pg_sleep(0.01); END LOOP; END $$
            step s2_takeover: SELECT acquired, epoch FROM lease.acquire('k', 'o2', '1 hour') <waiting ...>
            step s1_commit: COMMIT
            step s2_takeover: <... completed>
            acquired|epoch
            f|
            step s2_inspect: SELECT held, owner, epoch FROM lease.inspect('k')
            held|owner|epoch
            t|o1|1
            ",
        )
        .await;
}

#[tokio::test]
async fn takeover_waiting_on_a_renew_that_rolls_back_wins_with_the_next_epoch() {
    renew_vs_takeover()
        .check(
            &[
                "s1_acquire",
                "s1_begin",
                "s1_renew",
                "t_await_lapse",
                "s2_takeover",
                "s1_rollback",
                "s2_inspect",
            ],
            r"
            step s1_acquire: SELECT acquired, epoch FROM lease.acquire('k', 'o1', '2 seconds')
            acquired|epoch
            t|1
            step s1_begin: BEGIN
            step s1_renew: SELECT status FROM lease.renew('k', 'o1', 1, '1 hour')
            status
            ok
            step t_await_lapse: DO $$ BEGIN WHILE (SELECT held FROM lease.inspect('k')) LOOP PERFORM pg_sleep(0.01); END LOOP; END $$
            step s2_takeover: SELECT acquired, epoch FROM lease.acquire('k', 'o2', '1 hour') <waiting ...>
            step s1_rollback: ROLLBACK
            step s2_takeover: <... completed>
            acquired|epoch
            t|2
            step s2_inspect: SELECT held, owner, epoch FROM lease.inspect('k')
            held|owner|epoch
            t|o2|2
            ",
        )
        .await;
}

#[tokio::test]
async fn takeover_that_commits_first_makes_the_renew_fail_lapsed_then_not_owner() {
    // The uncommitted takeover is invisible: the renew (which does not wait for it) hears `lapsed`;
    // once the takeover commits the row names o2 and the renew hears `not_owner` (§4).
    renew_vs_takeover()
        .check(
            &[
                "s1_acquire_brief",
                "t_await_lapse",
                "s2_begin",
                "s2_takeover",
                "s1_renew",
                "s2_commit",
                "s1_renew",
                "s2_inspect",
            ],
            r"
            step s1_acquire_brief: SELECT acquired, epoch FROM lease.acquire('k', 'o1', '100 milliseconds')
            acquired|epoch
            t|1
            step t_await_lapse: DO $$ BEGIN WHILE (SELECT held FROM lease.inspect('k')) LOOP PERFORM pg_sleep(0.01); END LOOP; END $$
            step s2_begin: BEGIN
            step s2_takeover: SELECT acquired, epoch FROM lease.acquire('k', 'o2', '1 hour')
            acquired|epoch
            t|2
            step s1_renew: SELECT status FROM lease.renew('k', 'o1', 1, '1 hour')
            status
            lapsed
            step s2_commit: COMMIT
            step s1_renew: SELECT status FROM lease.renew('k', 'o1', 1, '1 hour')
            status
            not_owner
            step s2_inspect: SELECT held, owner, epoch FROM lease.inspect('k')
            held|owner|epoch
            t|o2|2
            ",
        )
        .await;
}

#[tokio::test]
async fn renew_refused_as_lapsed_in_an_open_transaction_does_not_hold_up_a_takeover() {
    renew_vs_takeover()
        .check(
            &[
                "s1_acquire_brief",
                "t_await_lapse",
                "s1_begin",
                "s1_renew",
                "s2_takeover",
                "s1_renew",
                "s1_commit",
                "s2_inspect",
            ],
            r"
            step s1_acquire_brief: SELECT acquired, epoch FROM lease.acquire('k', 'o1', '100 milliseconds')
            acquired|epoch
            t|1
            step t_await_lapse: DO $$ BEGIN WHILE (SELECT held FROM lease.inspect('k')) LOOP PERFORM pg_sleep(0.01); END LOOP; END $$
            step s1_begin: BEGIN
            step s1_renew: SELECT status FROM lease.renew('k', 'o1', 1, '1 hour')
            status
            lapsed
            step s2_takeover: SELECT acquired, epoch FROM lease.acquire('k', 'o2', '1 hour')
            acquired|epoch
            t|2
            step s1_renew: SELECT status FROM lease.renew('k', 'o1', 1, '1 hour')
            status
            not_owner
            step s1_commit: COMMIT
            step s2_inspect: SELECT held, owner, epoch FROM lease.inspect('k')
            held|owner|epoch
            t|o2|2
            ",
        )
        .await;
}
