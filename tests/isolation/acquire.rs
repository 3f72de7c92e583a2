//! Concurrent acquires of one key are serialised by the key's row lock (a new key: by its primary
//! key): exactly one wins and the others see the winner's grant; a grant whose transaction aborts never
//! happened (SEMANTICS §5; I1, I2, I7).

use std::sync::Arc;

use pglease_tests::{key, server};
use tokio::sync::Barrier;

use crate::spec::Spec;

/// s1 acquires inside a transaction; s2 and s3 acquire on their own.
fn racers(setup: &str) -> Spec {
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
                "s2_acquire",
                "SELECT acquired, epoch FROM lease.acquire('k', 'o2', '1 hour')",
            )],
        )
        .session(
            "s3",
            &[
                (
                    "s3_acquire",
                    "SELECT acquired, epoch FROM lease.acquire('k', 'o3', '1 hour')",
                ),
                (
                    "s3_inspect",
                    "SELECT held, owner, epoch FROM lease.inspect('k')",
                ),
            ],
        )
}

/// Leaves key `k` FREE with counter 2 (granted at epoch 1, released).
const FREE_AT_2: &str =
    "SELECT lease.acquire('k', 'o0', '1 hour'); SELECT lease.release('k', 'o0', 1)";

#[tokio::test]
async fn acquires_of_a_new_key_wait_for_an_uncommitted_grant_and_lose_once_it_commits() {
    racers("")
        .check(
            &[
                "s1_begin",
                "s1_acquire",
                "s2_acquire",
                "s3_acquire",
                "s1_commit",
                "s3_inspect",
            ],
            r"
            step s1_begin: BEGIN
            step s1_acquire: SELECT acquired, epoch FROM lease.acquire('k', 'o1', '1 hour')
            acquired|epoch
            t|1
            step s2_acquire: SELECT acquired, epoch FROM lease.acquire('k', 'o2', '1 hour') <waiting ...>
            step s3_acquire: SELECT acquired, epoch FROM lease.acquire('k', 'o3', '1 hour') <waiting ...>
            step s1_commit: COMMIT
            step s2_acquire: <... completed>
            acquired|epoch
            f|
            step s3_acquire: <... completed>
            acquired|epoch
            f|
            step s3_inspect: SELECT held, owner, epoch FROM lease.inspect('k')
            held|owner|epoch
            t|o1|1
            ",
        )
        .await;
}

#[tokio::test]
async fn acquire_of_a_new_key_waiting_on_a_grant_that_rolls_back_wins_epoch_1() {
    racers("")
        .check(
            &[
                "s1_begin",
                "s1_acquire",
                "s2_acquire",
                "s1_rollback",
                "s3_inspect",
            ],
            r"
            step s1_begin: BEGIN
            step s1_acquire: SELECT acquired, epoch FROM lease.acquire('k', 'o1', '1 hour')
            acquired|epoch
            t|1
            step s2_acquire: SELECT acquired, epoch FROM lease.acquire('k', 'o2', '1 hour') <waiting ...>
            step s1_rollback: ROLLBACK
            step s2_acquire: <... completed>
            acquired|epoch
            t|1
            step s3_inspect: SELECT held, owner, epoch FROM lease.inspect('k')
            held|owner|epoch
            t|o2|1
            ",
        )
        .await;
}

#[tokio::test]
async fn acquires_of_a_free_key_wait_on_its_row_for_an_uncommitted_grant_and_lose_once_it_commits()
{
    racers(FREE_AT_2)
        .check(
            &[
                "s1_begin",
                "s1_acquire",
                "s2_acquire",
                "s3_acquire",
                "s1_commit",
                "s3_inspect",
            ],
            r"
            step s1_begin: BEGIN
            step s1_acquire: SELECT acquired, epoch FROM lease.acquire('k', 'o1', '1 hour')
            acquired|epoch
            t|3
            step s2_acquire: SELECT acquired, epoch FROM lease.acquire('k', 'o2', '1 hour') <waiting ...>
            step s3_acquire: SELECT acquired, epoch FROM lease.acquire('k', 'o3', '1 hour') <waiting ...>
            step s1_commit: COMMIT
            step s2_acquire: <... completed>
            acquired|epoch
            f|
            step s3_acquire: <... completed>
            acquired|epoch
            f|
            step s3_inspect: SELECT held, owner, epoch FROM lease.inspect('k')
            held|owner|epoch
            t|o1|3
            ",
        )
        .await;
}

#[tokio::test]
async fn acquire_of_a_free_key_waiting_on_a_grant_that_rolls_back_wins_the_unconsumed_epoch() {
    racers(FREE_AT_2)
        .check(
            &[
                "s1_begin",
                "s1_acquire",
                "s2_acquire",
                "s1_rollback",
                "s3_inspect",
            ],
            r"
            step s1_begin: BEGIN
            step s1_acquire: SELECT acquired, epoch FROM lease.acquire('k', 'o1', '1 hour')
            acquired|epoch
            t|3
            step s2_acquire: SELECT acquired, epoch FROM lease.acquire('k', 'o2', '1 hour') <waiting ...>
            step s1_rollback: ROLLBACK
            step s2_acquire: <... completed>
            acquired|epoch
            t|3
            step s3_inspect: SELECT held, owner, epoch FROM lease.inspect('k')
            held|owner|epoch
            t|o2|3
            ",
        )
        .await;
}

/// Not a spec: sessions released at once by a barrier race for real, many rounds, for a new key and
/// for a lapsed one. Each round has exactly one winner, at the expected epoch.
#[tokio::test]
async fn simultaneous_acquires_of_one_key_have_exactly_one_winner() {
    const SESSIONS: usize = 8;
    const ROUNDS: usize = 20;
    let mut clients = Vec::new();
    for _ in 0..SESSIONS {
        clients.push(Arc::new(server().app().await));
    }
    let setup = server().app().await;
    for round in 0..ROUNDS {
        let fresh = key("simultaneous", &format!("new-{round}"));
        let lapsed = key("simultaneous", &format!("lapsed-{round}"));
        // LAPSED(o0, 1), by the server clock.
        setup
            .execute(
                "SELECT lease.acquire($1, 'o0', '10 milliseconds')",
                &[&lapsed],
            )
            .await
            .unwrap();
        setup
            .batch_execute(&crate::AWAIT_LAPSE.replace("'k'", &format!("'{lapsed}'")))
            .await
            .unwrap();
        for (k, next_epoch) in [(fresh, 1_i64), (lapsed, 2)] {
            let barrier = Arc::new(Barrier::new(SESSIONS));
            let racers: Vec<_> = clients
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let (c, barrier, k) = (Arc::clone(c), Arc::clone(&barrier), k.clone());
                    tokio::spawn(async move {
                        barrier.wait().await;
                        let row = c
                            .query_one(
                                "SELECT acquired, epoch FROM lease.acquire($1, $2, '1 hour')",
                                &[&k, &format!("o{}", i + 1)],
                            )
                            .await
                            .expect("acquire");
                        (row.get::<_, bool>(0), row.get::<_, Option<i64>>(1))
                    })
                })
                .collect();
            let mut winners = Vec::new();
            for r in racers {
                let (acquired, epoch) = r.await.unwrap();
                if acquired {
                    winners.push(epoch);
                } else {
                    assert_eq!(epoch, None, "a loser gets no epoch");
                }
            }
            assert_eq!(winners, vec![Some(next_epoch)], "round {round}, key {k}");
        }
    }
}
