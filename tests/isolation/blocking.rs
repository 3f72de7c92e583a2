//! Blocking acquires (wait > 0) against other sessions' transactions: woken by a committed release,
//! granted when a competing grant aborts, and, per isolation level, what they can see (SEMANTICS §3,
//! §5; I1, I2, I7, I9, I10).

use crate::spec::Spec;

/// Key `k` is held by o1 at epoch 1 for an hour (or, with `s1_acquire_lapsing`, for 3 seconds).
fn waiter() -> Spec {
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
                    "SELECT acquired, epoch FROM lease.acquire('k', 'o1', '3 seconds')",
                ),
                (
                    "s1_release",
                    "SELECT status FROM lease.release('k', 'o1', 1)",
                ),
                (
                    "s1_inspect",
                    "SELECT held, owner, epoch FROM lease.inspect('k')",
                ),
            ],
        )
        .session(
            "s2",
            &[
                ("s2_begin_rc", "BEGIN ISOLATION LEVEL READ COMMITTED"),
                ("s2_begin_rr", "BEGIN ISOLATION LEVEL REPEATABLE READ"),
                (
                    "s2_acquire_wait",
                    "SELECT acquired, epoch FROM lease.acquire('k', 'o2', '1 hour', '1 minute')",
                ),
                (
                    "s2_acquire_wait_briefly",
                    "SELECT acquired, epoch FROM lease.acquire('k', 'o2', '1 hour', '2 seconds')",
                ),
                ("s2_commit", "COMMIT"),
            ],
        )
}

#[tokio::test]
async fn blocking_acquire_in_read_committed_is_woken_by_a_release_that_commits() {
    waiter()
        .check(
            &[
                "s1_acquire",
                "s2_begin_rc",
                "s2_acquire_wait(s1_release)",
                "s1_release",
                "s2_commit",
                "s1_inspect",
            ],
            r"
            step s1_acquire: SELECT acquired, epoch FROM lease.acquire('k', 'o1', '1 hour')
            acquired|epoch
            t|1
            step s2_begin_rc: BEGIN ISOLATION LEVEL READ COMMITTED
            step s2_acquire_wait: SELECT acquired, epoch FROM lease.acquire('k', 'o2', '1 hour', '1 minute') <waiting ...>
            step s1_release: SELECT status FROM lease.release('k', 'o1', 1)
            status
            ok
            step s2_acquire_wait: <... completed>
            acquired|epoch
            t|3
            step s2_commit: COMMIT
            step s1_inspect: SELECT held, owner, epoch FROM lease.inspect('k')
            held|owner|epoch
            t|o2|3
            ",
        )
        .await;
}

#[tokio::test]
async fn blocking_acquire_in_repeatable_read_misses_a_later_release_and_fails_40001_at_the_old_expiry()
 {
    // The waiter's snapshot predates the release, so it keeps seeing o1's lease until that lease's
    // old expiry; then it tries to take the row over, which a committed transaction changed since
    // the snapshot: a serialization failure, and nothing was acquired.
    waiter()
        .check(
            &[
                "s1_acquire_lapsing",
                "s2_begin_rr",
                "s2_acquire_wait",
                "s1_release",
                "s1_inspect",
            ],
            r"
            step s1_acquire_lapsing: SELECT acquired, epoch FROM lease.acquire('k', 'o1', '3 seconds')
            acquired|epoch
            t|1
            step s2_begin_rr: BEGIN ISOLATION LEVEL REPEATABLE READ
            step s2_acquire_wait: SELECT acquired, epoch FROM lease.acquire('k', 'o2', '1 hour', '1 minute') <waiting ...>
            step s1_release: SELECT status FROM lease.release('k', 'o1', 1)
            status
            ok
            step s1_inspect: SELECT held, owner, epoch FROM lease.inspect('k')
            held|owner|epoch
            f||2
            step s2_acquire_wait: <... completed>
            ERROR: 40001
            ",
        )
        .await;
}

#[tokio::test]
async fn blocking_acquire_in_repeatable_read_misses_a_later_release_and_fails_57014_at_its_deadline()
 {
    waiter()
        .check(
            &[
                "s1_acquire",
                "s2_begin_rr",
                "s2_acquire_wait_briefly",
                "s1_release",
                "s1_inspect",
            ],
            r"
            step s1_acquire: SELECT acquired, epoch FROM lease.acquire('k', 'o1', '1 hour')
            acquired|epoch
            t|1
            step s2_begin_rr: BEGIN ISOLATION LEVEL REPEATABLE READ
            step s2_acquire_wait_briefly: SELECT acquired, epoch FROM lease.acquire('k', 'o2', '1 hour', '2 seconds') <waiting ...>
            step s1_release: SELECT status FROM lease.release('k', 'o1', 1)
            status
            ok
            step s1_inspect: SELECT held, owner, epoch FROM lease.inspect('k')
            held|owner|epoch
            f||2
            step s2_acquire_wait_briefly: <... completed>
            ERROR: 57014
            ",
        )
        .await;
}

#[tokio::test]
async fn blocking_acquire_in_repeatable_read_sees_a_release_that_committed_before_its_snapshot() {
    // BEGIN takes no snapshot; the acquire's first statement does, after the release committed.
    waiter()
        .check(
            &[
                "s1_acquire",
                "s2_begin_rr",
                "s1_release",
                "s2_acquire_wait",
                "s2_commit",
            ],
            r"
            step s1_acquire: SELECT acquired, epoch FROM lease.acquire('k', 'o1', '1 hour')
            acquired|epoch
            t|1
            step s2_begin_rr: BEGIN ISOLATION LEVEL REPEATABLE READ
            step s1_release: SELECT status FROM lease.release('k', 'o1', 1)
            status
            ok
            step s2_acquire_wait: SELECT acquired, epoch FROM lease.acquire('k', 'o2', '1 hour', '1 minute')
            acquired|epoch
            t|3
            step s2_commit: COMMIT
            ",
        )
        .await;
}

/// s1 grants inside a transaction; s2 waits for the key with a bound.
fn grant_vs_waiter(setup: &str) -> Spec {
    Spec::new()
        .setup(setup)
        .session(
            "s1",
            &[
                ("s1_begin", "BEGIN"),
                (
                    "s1_acquire",
                    "SELECT acquired, epoch FROM lease.acquire('k', 'o1', '1 hour')",
                ),
                ("s1_commit", "COMMIT"),
                ("s1_rollback", "ROLLBACK"),
            ],
        )
        .session(
            "s2",
            &[(
                "s2_acquire_wait",
                "SELECT acquired, epoch FROM lease.acquire('k', 'o2', '1 hour', '2 seconds')",
            )],
        )
}

#[tokio::test]
async fn blocking_acquire_gets_the_key_when_a_competing_grant_aborts() {
    // A new key: the waiter waits on the primary key; a FREE key (counter 2): on the row. Either way
    // the aborted grant consumed no epoch.
    let free = "SELECT lease.acquire('k', 'o0', '1 hour'); SELECT lease.release('k', 'o0', 1)";
    for (setup, epoch) in [("", 1), (free, 3)] {
        grant_vs_waiter(setup)
            .check(
                &["s1_begin", "s1_acquire", "s2_acquire_wait", "s1_rollback"],
                &format!(
                    r"
                    step s1_begin: BEGIN
                    step s1_acquire: SELECT acquired, epoch FROM lease.acquire('k', 'o1', '1 hour')
                    acquired|epoch
                    t|{epoch}
                    step s2_acquire_wait: SELECT acquired, epoch FROM lease.acquire('k', 'o2', '1 hour', '2 seconds') <waiting ...>
                    step s1_rollback: ROLLBACK
                    step s2_acquire_wait: <... completed>
                    acquired|epoch
                    t|{epoch}
                    "
                ),
            )
            .await;
    }
}

#[tokio::test]
async fn blocking_acquire_waiting_on_a_grant_that_commits_keeps_waiting_until_its_deadline() {
    // After the commit the waiter moves from the lock wait to sleeping between polls (never reported
    // as completed), and gives up with 57014 at its deadline.
    grant_vs_waiter("")
        .check(
            &["s1_begin", "s1_acquire", "s2_acquire_wait", "s1_commit"],
            r"
            step s1_begin: BEGIN
            step s1_acquire: SELECT acquired, epoch FROM lease.acquire('k', 'o1', '1 hour')
            acquired|epoch
            t|1
            step s2_acquire_wait: SELECT acquired, epoch FROM lease.acquire('k', 'o2', '1 hour', '2 seconds') <waiting ...>
            step s1_commit: COMMIT
            step s2_acquire_wait: <... completed>
            ERROR: 57014
            ",
        )
        .await;
}
