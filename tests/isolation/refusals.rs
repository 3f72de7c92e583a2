//! Refusals take no locks (I9): a denied acquire, a refused renew or release and a sleeping blocking
//! acquire, each in a transaction that stays open, never make another session's call wait. A step that
//! waited shows as `<waiting ...>` in the transcript. The one documented exception (SEMANTICS §5): a
//! non-blocking call that raced a concurrent change of the same key's row and was then refused keeps
//! that row locked until its own transaction ends; a blocking acquire never sleeps holding it.

use crate::spec::Spec;

fn holder_and_others() -> Spec {
    Spec::new()
        .setup("SELECT lease.acquire('k', 'o1', '1 hour')")
        .session(
            "s1",
            &[
                (
                    "s1_renew",
                    "SELECT status FROM lease.renew('k', 'o1', 1, '1 hour')",
                ),
                (
                    "s1_release",
                    "SELECT status FROM lease.release('k', 'o1', 1)",
                ),
            ],
        )
        .session(
            "s2",
            &[
                ("s2_begin", "BEGIN"),
                (
                    "s2_acquire",
                    "SELECT acquired, epoch FROM lease.acquire('k', 'o2', '1 hour')",
                ),
                (
                    "s2_acquire_wait",
                    "SELECT acquired, epoch FROM lease.acquire('k', 'o2', '1 hour', '1 minute')",
                ),
                (
                    "s2_renew",
                    "SELECT status FROM lease.renew('k', 'o2', 1, '1 hour')",
                ),
                (
                    "s2_release",
                    "SELECT status FROM lease.release('k', 'o2', 1)",
                ),
                ("s2_commit", "COMMIT"),
            ],
        )
        .session(
            "s3",
            &[
                ("s3_begin", "BEGIN"),
                (
                    "s3_renew_stale",
                    "SELECT status FROM lease.renew('k', 'o1', 0, '1 hour')",
                ),
                (
                    "s3_release_stale",
                    "SELECT status FROM lease.release('k', 'o1', 0)",
                ),
                ("s3_commit", "COMMIT"),
            ],
        )
}

#[tokio::test]
async fn refused_calls_in_open_transactions_do_not_make_the_holder_wait() {
    holder_and_others()
        .check(
            &[
                "s2_begin",
                "s2_acquire",
                "s2_renew",
                "s2_release",
                "s3_begin",
                "s3_renew_stale",
                "s3_release_stale",
                "s1_renew",
                "s1_release",
                "s2_acquire",
                "s2_commit",
                "s3_commit",
            ],
            r"
            step s2_begin: BEGIN
            step s2_acquire: SELECT acquired, epoch FROM lease.acquire('k', 'o2', '1 hour')
            acquired|epoch
            f|
            step s2_renew: SELECT status FROM lease.renew('k', 'o2', 1, '1 hour')
            status
            not_owner
            step s2_release: SELECT status FROM lease.release('k', 'o2', 1)
            status
            not_owner
            step s3_begin: BEGIN
            step s3_renew_stale: SELECT status FROM lease.renew('k', 'o1', 0, '1 hour')
            status
            epoch_mismatch
            step s3_release_stale: SELECT status FROM lease.release('k', 'o1', 0)
            status
            epoch_mismatch
            step s1_renew: SELECT status FROM lease.renew('k', 'o1', 1, '1 hour')
            status
            ok
            step s1_release: SELECT status FROM lease.release('k', 'o1', 1)
            status
            ok
            step s2_acquire: SELECT acquired, epoch FROM lease.acquire('k', 'o2', '1 hour')
            acquired|epoch
            t|3
            step s2_commit: COMMIT
            step s3_commit: COMMIT
            ",
        )
        .await;
}

#[tokio::test]
async fn sleeping_blocking_acquire_does_not_make_the_holder_wait() {
    holder_and_others()
        .check(
            &[
                "s2_begin",
                "s2_acquire_wait(s1_release)",
                "s1_renew",
                "s1_release",
                "s2_commit",
            ],
            r"
            step s2_begin: BEGIN
            step s2_acquire_wait: SELECT acquired, epoch FROM lease.acquire('k', 'o2', '1 hour', '1 minute') <waiting ...>
            step s1_renew: SELECT status FROM lease.renew('k', 'o1', 1, '1 hour')
            status
            ok
            step s1_release: SELECT status FROM lease.release('k', 'o1', 1)
            status
            ok
            step s2_acquire_wait: <... completed>
            acquired|epoch
            t|3
            step s2_commit: COMMIT
            ",
        )
        .await;
}

/// Refusals that first waited for a concurrent change of the key's row (an acquire behind another
/// grant, a renew behind a release) and then found that the changed row does not qualify. Key `k`
/// starts FREE with counter 2.
fn refused_after_waiting() -> Spec {
    Spec::new()
        .setup("SELECT lease.acquire('k', 'o0', '1 hour'); SELECT lease.release('k', 'o0', 1)")
        .session(
            "s1",
            &[
                ("s1_begin", "BEGIN"),
                (
                    "s1_acquire",
                    "SELECT acquired, epoch FROM lease.acquire('k', 'o1', '1 hour')",
                ),
                (
                    "s1_renew",
                    "SELECT status FROM lease.renew('k', 'o1', 3, '1 hour')",
                ),
                (
                    "s1_release",
                    "SELECT status FROM lease.release('k', 'o1', 3)",
                ),
                ("s1_commit", "COMMIT"),
            ],
        )
        .session(
            "s2",
            &[
                ("s2_begin", "BEGIN"),
                (
                    "s2_acquire",
                    "SELECT acquired, epoch FROM lease.acquire('k', 'o2', '1 hour')",
                ),
                (
                    "s2_acquire_wait",
                    "SELECT acquired, epoch FROM lease.acquire('k', 'o2', '1 hour', '2 seconds')",
                ),
                (
                    "s2_renew",
                    "SELECT status FROM lease.renew('k', 'o1', 3, '1 hour')",
                ),
                ("s2_commit", "COMMIT"),
            ],
        )
        .session(
            "s3",
            &[(
                "s3_acquire",
                "SELECT acquired, epoch FROM lease.acquire('k', 'o3', '1 hour')",
            )],
        )
}

/// Documented exception to I9 (SEMANTICS.md §5): a refused call that raced a concurrent change of the
/// same key keeps the key's row locked until its own transaction ends (PostgreSQL locks the newest row
/// version before re-checking an UPDATE's condition, and keeps the lock when the re-check fails). The
/// blocked step completes exactly when the refused caller's transaction ends; in autocommit that is
/// the end of the call. A blocking acquire never sleeps holding such a lock (see below).
#[tokio::test]
async fn acquire_refused_after_racing_a_competing_grant_keeps_the_row_locked_until_its_transaction_ends()
 {
    refused_after_waiting()
        .check(
            &[
                "s1_begin",
                "s1_acquire",
                "s2_begin",
                "s2_acquire",
                "s1_commit",
                "s1_renew",
                "s2_commit",
            ],
            r"
            step s1_begin: BEGIN
            step s1_acquire: SELECT acquired, epoch FROM lease.acquire('k', 'o1', '1 hour')
            acquired|epoch
            t|3
            step s2_begin: BEGIN
            step s2_acquire: SELECT acquired, epoch FROM lease.acquire('k', 'o2', '1 hour') <waiting ...>
            step s1_commit: COMMIT
            step s2_acquire: <... completed>
            acquired|epoch
            f|
            step s1_renew: SELECT status FROM lease.renew('k', 'o1', 3, '1 hour') <waiting ...>
            step s2_commit: COMMIT
            step s1_renew: <... completed>
            status
            ok
            ",
        )
        .await;
}

/// Documented exception to I9 (SEMANTICS.md §5): a refused call that raced a concurrent change of the
/// same key keeps the key's row locked until its own transaction ends (PostgreSQL locks the newest row
/// version before re-checking an UPDATE's condition, and keeps the lock when the re-check fails). The
/// blocked step completes exactly when the refused caller's transaction ends; in autocommit that is
/// the end of the call. A blocking acquire never sleeps holding such a lock (see below).
#[tokio::test]
async fn renew_refused_after_racing_a_release_keeps_the_row_locked_until_its_transaction_ends() {
    refused_after_waiting()
        .check(
            &[
                "s1_acquire",
                "s1_begin",
                "s1_release",
                "s2_begin",
                "s2_renew",
                "s1_commit",
                "s3_acquire",
                "s2_commit",
            ],
            r"
            step s1_acquire: SELECT acquired, epoch FROM lease.acquire('k', 'o1', '1 hour')
            acquired|epoch
            t|3
            step s1_begin: BEGIN
            step s1_release: SELECT status FROM lease.release('k', 'o1', 3)
            status
            ok
            step s2_begin: BEGIN
            step s2_renew: SELECT status FROM lease.renew('k', 'o1', 3, '1 hour') <waiting ...>
            step s1_commit: COMMIT
            step s2_renew: <... completed>
            status
            not_owner
            step s3_acquire: SELECT acquired, epoch FROM lease.acquire('k', 'o3', '1 hour') <waiting ...>
            step s2_commit: COMMIT
            step s3_acquire: <... completed>
            acquired|epoch
            t|5
            ",
        )
        .await;
}

#[tokio::test]
async fn blocking_acquire_that_loses_the_row_to_a_competing_grant_sleeps_without_a_row_lock() {
    // s2 waits for s1's uncommitted grant; after s1 commits, s2 must go back to sleeping between
    // polls holding nothing, so that s1 can release and s2 then gets the key.
    refused_after_waiting()
        .check(
            &[
                "s1_begin",
                "s1_acquire",
                "s2_acquire_wait(s1_release)",
                "s1_commit",
                "s1_release",
            ],
            r"
            step s1_begin: BEGIN
            step s1_acquire: SELECT acquired, epoch FROM lease.acquire('k', 'o1', '1 hour')
            acquired|epoch
            t|3
            step s2_acquire_wait: SELECT acquired, epoch FROM lease.acquire('k', 'o2', '1 hour', '2 seconds') <waiting ...>
            step s1_commit: COMMIT
            step s1_release: SELECT status FROM lease.release('k', 'o1', 3)
            status
            ok
            step s2_acquire_wait: <... completed>
            acquired|epoch
            t|5
            ",
        )
        .await;
}

/// Documented exception to I9 (SEMANTICS.md §5): a refused call that raced a concurrent change of the
/// same key keeps the key's row locked until its own transaction ends (PostgreSQL locks the newest row
/// version before re-checking an UPDATE's condition, and keeps the lock when the re-check fails). The
/// blocked step completes exactly when the refused caller's transaction ends; in autocommit that is
/// the end of the call. A blocking acquire never sleeps holding such a lock (see below).
#[tokio::test]
async fn renew_refused_as_lapsed_after_waiting_for_a_fence_keeps_the_row_locked_until_its_transaction_ends()
 {
    // s2's renew waits for s3's fence (a FOR SHARE lock on the row); the lease lapses meanwhile, so
    // the renew reports `lapsed` and changes nothing (§5); it must then not hold up a takeover.
    Spec::new()
        .session(
            "s1",
            &[(
                "s1_acquire",
                "SELECT acquired, epoch FROM lease.acquire('k', 'o1', '2 seconds')",
            )],
        )
        .session(
            "s2",
            &[
                ("s2_begin", "BEGIN"),
                (
                    "s2_renew",
                    "SELECT status FROM lease.renew('k', 'o1', 1, '1 hour')",
                ),
                ("s2_commit", "COMMIT"),
            ],
        )
        .session(
            "s3",
            &[
                ("s3_begin", "BEGIN"),
                (
                    "s3_fence",
                    "SELECT lease.fence('k', 'o1', 1) IS NOT NULL AS fenced",
                ),
                ("s3_commit", "COMMIT"),
            ],
        )
        .session(
            "s4",
            &[(
                "s4_takeover",
                "SELECT acquired, epoch FROM lease.acquire('k', 'o4', '1 hour')",
            )],
        )
        .timer("t", &[("t_await_lapse", crate::AWAIT_LAPSE)])
        .check(
            &[
                "s1_acquire",
                "s3_begin",
                "s3_fence",
                "s2_begin",
                "s2_renew",
                "t_await_lapse",
                "s3_commit",
                "s4_takeover",
                "s2_commit",
            ],
            r"
            step s1_acquire: SELECT acquired, epoch FROM lease.acquire('k', 'o1', '2 seconds')
            acquired|epoch
            t|1
            step s3_begin: BEGIN
            step s3_fence: SELECT lease.fence('k', 'o1', 1) IS NOT NULL AS fenced
            fenced
            t
            step s2_begin: BEGIN
            step s2_renew: SELECT status FROM lease.renew('k', 'o1', 1, '1 hour') <waiting ...>
            step t_await_lapse: DO $$ BEGIN WHILE (SELECT held FROM lease.inspect('k')) LOOP PERFORM pg_sleep(0.01); END LOOP; END $$
            step s3_commit: COMMIT
            step s2_renew: <... completed>
            status
            lapsed
            step s4_takeover: SELECT acquired, epoch FROM lease.acquire('k', 'o4', '1 hour') <waiting ...>
            step s2_commit: COMMIT
            step s4_takeover: <... completed>
            acquired|epoch
            t|2
            ",
        )
        .await;
}
