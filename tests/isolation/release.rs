//! A release racing an acquire: an uncommitted release is invisible, a committed one frees the key
//! with the counter at epoch + 1 (the next grant is epoch + 2), a rolled-back one never happened
//! (SEMANTICS §3, §5; I1, I2, I7, I9, I10).

use crate::AWAIT_LAPSE;
use crate::spec::Spec;

fn release_vs_acquire() -> Spec {
    Spec::new()
        .session(
            "s1",
            &[
                (
                    "s1_acquire",
                    "SELECT acquired, epoch FROM lease.acquire('k', 'o1', '1 hour')",
                ),
                (
                    "s1_acquire_lapsing",
                    "SELECT acquired, epoch FROM lease.acquire('k', 'o1', '2 seconds')",
                ),
                ("s1_begin", "BEGIN"),
                (
                    "s1_release",
                    "SELECT status FROM lease.release('k', 'o1', 1)",
                ),
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
                (
                    "s2_acquire",
                    "SELECT acquired, epoch FROM lease.acquire('k', 'o2', '1 hour')",
                ),
                (
                    "s2_acquire_wait",
                    "SELECT acquired, epoch FROM lease.acquire('k', 'o2', '1 hour', '3 seconds')",
                ),
            ],
        )
        .timer("t", &[("t_await_lapse", AWAIT_LAPSE)])
}

#[tokio::test]
async fn acquire_does_not_see_an_uncommitted_release_and_gets_epoch_plus_2_after_it_commits() {
    release_vs_acquire()
        .check(
            &[
                "s1_acquire",
                "s1_begin",
                "s1_release",
                "s2_acquire",
                "s1_commit",
                "s2_acquire",
            ],
            r"
            step s1_acquire: SELECT acquired, epoch FROM lease.acquire('k', 'o1', '1 hour')
            acquired|epoch
            t|1
            step s1_begin: BEGIN
            step s1_release: SELECT status FROM lease.release('k', 'o1', 1)
            status
            ok
            step s2_acquire: SELECT acquired, epoch FROM lease.acquire('k', 'o2', '1 hour')
            acquired|epoch
            f|
            step s1_commit: COMMIT
            step s2_acquire: SELECT acquired, epoch FROM lease.acquire('k', 'o2', '1 hour')
            acquired|epoch
            t|3
            ",
        )
        .await;
}

#[tokio::test]
async fn waiting_acquire_gets_epoch_plus_2_when_the_release_commits() {
    release_vs_acquire()
        .check(
            &[
                "s1_acquire",
                "s1_begin",
                "s1_release",
                "s2_acquire_wait(s1_commit)",
                "s1_commit",
            ],
            r"
            step s1_acquire: SELECT acquired, epoch FROM lease.acquire('k', 'o1', '1 hour')
            acquired|epoch
            t|1
            step s1_begin: BEGIN
            step s1_release: SELECT status FROM lease.release('k', 'o1', 1)
            status
            ok
            step s2_acquire_wait: SELECT acquired, epoch FROM lease.acquire('k', 'o2', '1 hour', '3 seconds') <waiting ...>
            step s1_commit: COMMIT
            step s2_acquire_wait: <... completed>
            acquired|epoch
            t|3
            ",
        )
        .await;
}

#[tokio::test]
async fn waiting_acquire_times_out_when_the_release_rolls_back_and_the_holder_keeps_the_key() {
    // The waiter sleeps without a row lock: the holder's renew after the rollback does not wait.
    release_vs_acquire()
        .check(
            &[
                "s1_acquire",
                "s1_begin",
                "s1_release",
                "s2_acquire_wait",
                "s1_rollback",
                "s1_renew",
            ],
            r"
            step s1_acquire: SELECT acquired, epoch FROM lease.acquire('k', 'o1', '1 hour')
            acquired|epoch
            t|1
            step s1_begin: BEGIN
            step s1_release: SELECT status FROM lease.release('k', 'o1', 1)
            status
            ok
            step s2_acquire_wait: SELECT acquired, epoch FROM lease.acquire('k', 'o2', '1 hour', '3 seconds') <waiting ...>
            step s1_rollback: ROLLBACK
            step s1_renew: SELECT status FROM lease.renew('k', 'o1', 1, '1 hour')
            status
            ok
            step s2_acquire_wait: <... completed>
            ERROR: 57014
            ",
        )
        .await;
}

#[tokio::test]
async fn takeover_of_a_lapsed_lease_waits_for_an_uncommitted_release_and_judges_its_outcome() {
    // s1 releases before its lease lapses but decides only after. The takeover read the committed
    // (lapsed) row, so it waits for the release's row lock: after COMMIT the key is FREE(2) and the
    // takeover gets 3; after ROLLBACK the key is LAPSED(o1, 1) and the takeover gets 2.
    let head = r"
        step s1_acquire_lapsing: SELECT acquired, epoch FROM lease.acquire('k', 'o1', '2 seconds')
        acquired|epoch
        t|1
        step s1_begin: BEGIN
        step s1_release: SELECT status FROM lease.release('k', 'o1', 1)
        status
        ok
        step t_await_lapse: DO $$ BEGIN WHILE (SELECT held FROM lease.inspect('k')) LOOP PERFORM pg_sleep(0.01); END LOOP; END $$
        step s2_acquire: SELECT acquired, epoch FROM lease.acquire('k', 'o2', '1 hour') <waiting ...>
    ";
    let spec = release_vs_acquire();
    for (end, epoch) in [("s1_commit", 3), ("s1_rollback", 2)] {
        let sql = if end == "s1_commit" {
            "COMMIT"
        } else {
            "ROLLBACK"
        };
        spec.check(
            &[
                "s1_acquire_lapsing",
                "s1_begin",
                "s1_release",
                "t_await_lapse",
                "s2_acquire",
                end,
            ],
            &format!(
                "{head}
                step {end}: {sql}
                step s2_acquire: <... completed>
                acquired|epoch
                t|{epoch}
                "
            ),
        )
        .await;
    }
}
