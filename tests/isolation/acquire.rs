//! Simultaneous acquires of one key, raced for real rather than interleaved step by step (the
//! step-by-step interleavings are `specs/acquire_*.spec`): exactly one wins each round (SEMANTICS
//! §5; I1, I2).

use std::sync::Arc;

use pglease_tests::{key, server};
use tokio::sync::Barrier;

/// Sessions released at once by a barrier race for real, many rounds, for a new key and for a
/// lapsed one. Each round has exactly one winner, at the expected epoch.
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
