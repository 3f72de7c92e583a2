//! Leader election: several candidates, leaders killed (their process gone, nothing released),
//! exactly one leader at a time with increasing terms, observers seeing every change.

use std::sync::mpsc as std_mpsc;
use std::thread;
use std::time::Duration;

use futures_util::StreamExt;
use pglease::{Client, Leader};

use crate::common::{self, eventually, key, state, superuser};

/// A candidate in its own thread and tokio runtime, so that "killing" it drops the runtime: its
/// tasks stop at once and nothing is released (as when a process dies).
struct Candidate {
    kill: Option<std_mpsc::Sender<()>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Candidate {
    fn spawn(
        index: usize,
        conninfo: String,
        election: String,
        ttl: Duration,
        won: std_mpsc::Sender<(usize, Leader)>,
    ) -> Candidate {
        let (kill, killed) = std_mpsc::channel::<()>();
        let thread = thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap();
            runtime.spawn(async move {
                let client = Client::connect(&conninfo).await.unwrap();
                let leadership = client.election(election, ttl).campaign().await.unwrap();
                let leader = Leader::new(leadership.owner(), leadership.epoch(), None);
                let _ = won.send((index, leader));
                // Lead until killed.
                let _keep = leadership;
                std::future::pending::<()>().await;
            });
            let _ = killed.recv();
            runtime.shutdown_background();
        });
        Candidate {
            kill: Some(kill),
            thread: Some(thread),
        }
    }

    fn kill(&mut self) {
        drop(self.kill.take());
        if let Some(thread) = self.thread.take() {
            thread.join().unwrap();
        }
    }
}

impl Drop for Candidate {
    fn drop(&mut self) {
        self.kill();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn candidates_take_turns_with_increasing_terms_and_observers_see_each_leader() {
    let k = key("election");
    let ttl = Duration::from_millis(800);
    let su = superuser().await;
    let observer = common::client(&format!("{k}-observer")).await;
    let election = observer.election(k.clone(), ttl);
    let mut changes = election.observe();
    assert_eq!(
        changes.next().await.unwrap().unwrap(),
        None,
        "no leader yet"
    );
    let seen = tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Some(change) = changes.next().await {
            if let Ok(Some(leader)) = change {
                let done = seen.len() == 2;
                seen.push(leader);
                if done {
                    break;
                }
            }
        }
        seen
    });

    let (won_tx, won) = std_mpsc::channel();
    let mut candidates: Vec<Candidate> = (0..3)
        .map(|i| {
            Candidate::spawn(
                i,
                common::conninfo(&format!("{k}-c{i}")),
                k.clone(),
                ttl,
                won_tx.clone(),
            )
        })
        .collect();
    let next_leader = || {
        won.recv_timeout(Duration::from_secs(20))
            .expect("a candidate became leader")
    };

    let mut leaders: Vec<Leader> = Vec::new();
    for round in 0..3 {
        let (index, leader) = tokio::task::block_in_place(next_leader);
        // Exactly one leader: the server agrees, and nobody else reported.
        let s = state(&su, &k).await.unwrap();
        assert!(
            s.held && s.owner.as_deref() == Some(leader.owner.as_str()) && s.epoch == leader.epoch
        );
        assert!(won.try_recv().is_err(), "round {round}: two leaders");
        if let Some(previous) = leaders.last() {
            assert!(leader.epoch > previous.epoch, "terms increase");
            assert_ne!(leader.owner, previous.owner);
        }
        leaders.push(leader.clone());
        if round < 2 {
            // Kill the leader's process (no release): another takes over after the lapse.
            candidates[index].kill();
        }
    }

    let seen = tokio::time::timeout(Duration::from_secs(20), seen)
        .await
        .expect("the observer saw three leaders")
        .unwrap();
    assert_eq!(seen, leaders, "the observer saw each leader, in order");
    drop(candidates);
    eventually(
        "the last leader's lease lapses",
        Duration::from_secs(10),
        || {
            let (su, k) = (&su, &k);
            async move { state(su, k).await.filter(|s| !s.held).map(drop) }
        },
    )
    .await;
}
