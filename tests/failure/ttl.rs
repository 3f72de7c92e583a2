//! A TTL shorter than the holder's work: a liveness mistake of the caller that shows up as `lapsed`
//! on renew, never as two holders (F19, F20).

use std::time::{Duration, Instant, SystemTime};

use tokio_postgres::Client;

use crate::node::Node;
use crate::{acquire, await_lapsed, grant_until, inspect, not_held, release, renew};

/// F19: the holder's work outlasts its TTL: renew and release say `lapsed`; after a takeover they
/// say `not_owner`, and a guard that remembers the highest epoch rejects the old holder's write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_too_short_ttl_shows_as_lapsed_and_the_guard_rejects_the_old_epoch() {
    let node = Node::start();
    node.psql(
        crate::node::DB,
        "CREATE TABLE guarded (id int PRIMARY KEY, epoch bigint NOT NULL, note text); \
         INSERT INTO guarded VALUES (1, 0, ''); GRANT SELECT, UPDATE ON guarded TO app;",
    );
    let a = node.app().await;
    let b = node.app().await;
    let (e, x) = grant_until(&a, "k", "worker-a", "300 milliseconds").await;
    assert_eq!(guarded_write(&a, e, "a").await, 1);

    // The holder's "work" outlasts the TTL; the server's clock decides.
    await_lapsed(&b, "k").await;
    assert_eq!(renew(&a, "k", "worker-a", e, "1 hour").await.0, "lapsed");
    assert_eq!(release(&a, "k", "worker-a", e).await, "lapsed");
    assert_eq!(inspect(&a, "k").await, not_held(e), "nothing changed");

    let (e2, x2) = grant_until(&b, "k", "worker-b", "1 hour").await;
    assert_eq!(e2, e + 1);
    assert!(
        x2 - Duration::from_secs(3600) >= x,
        "granted no earlier than the old expiry"
    );
    assert_eq!(guarded_write(&b, e2, "b").await, 1);
    assert_eq!(
        guarded_write(&a, e, "a-late").await,
        0,
        "the guard rejects the lapsed holder's epoch"
    );
    assert_eq!(renew(&a, "k", "worker-a", e, "1 hour").await.0, "not_owner");
    assert_eq!(release(&a, "k", "worker-a", e).await, "not_owner");
    assert!(!acquire(&a, "k", "worker-a", "1 hour", "0").await.0);
    let note: String = a
        .query_one("SELECT note FROM guarded WHERE id = 1", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(note, "b");
}

/// A write to the guarded resource, applied only with an epoch at least the highest it has seen
/// (the check a fenced resource must make, §10 of SEMANTICS.md); returns the rows written.
async fn guarded_write(c: &Client, epoch: i64, note: &str) -> u64 {
    c.execute(
        "UPDATE guarded SET epoch = $1, note = $2 WHERE id = 1 AND epoch <= $1",
        &[&epoch, &note],
    )
    .await
    .expect("guarded write")
}

/// One uninterrupted ownership of the key by one owner at one epoch, by the server's timestamps:
/// from the grant's clock reading to the last expiry that a grant or successful renew set.
#[derive(Debug, Clone)]
struct Tenure {
    owner: &'static str,
    epoch: i64,
    start: SystemTime,
    end: SystemTime,
}

/// A worker that competes for the key until `deadline`: acquire (polling), then work in periods of
/// `work` (cycled) and renew after each; a refused renew ends the tenure and it competes again.
/// Returns its tenures and the refusal statuses it heard.
async fn worker(
    c: Client,
    owner: &'static str,
    work: &'static [u64],
    deadline: Instant,
) -> (Vec<Tenure>, Vec<String>) {
    const TTL: Duration = Duration::from_millis(100);
    let (mut tenures, mut refusals) = (Vec::new(), Vec::new());
    let mut period = work.iter().cycle();
    while Instant::now() < deadline {
        let (acquired, epoch, expires_at) = acquire(&c, "k", owner, "100 milliseconds", "0").await;
        if !acquired {
            tokio::time::sleep(Duration::from_millis(5)).await; // pacing, not synchronisation
            continue;
        }
        let (epoch, expires_at) = (epoch.unwrap(), expires_at.unwrap());
        let mut tenure = Tenure {
            owner,
            epoch,
            start: expires_at - TTL,
            end: expires_at,
        };
        loop {
            // Simulated work, deliberately sometimes longer than the TTL.
            tokio::time::sleep(Duration::from_millis(*period.next().unwrap())).await;
            let (status, expires_at) = renew(&c, "k", owner, epoch, "100 milliseconds").await;
            if status == "ok" {
                tenure.end = expires_at.unwrap();
            } else {
                refusals.push(status);
                break;
            }
        }
        tenures.push(tenure);
    }
    (tenures, refusals)
}

/// F20: two workers whose work sometimes outlasts a 100 ms TTL compete for one key for 1.5 s: every
/// refusal is `lapsed` or `not_owner`, and their tenures (server timestamps) never overlap, each
/// at a higher epoch than the one before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_too_short_ttl_under_contention_never_yields_two_holders() {
    let node = Node::start();
    let deadline = Instant::now() + Duration::from_millis(1500);
    let slow = tokio::spawn(worker(node.app().await, "slow", &[40, 160], deadline));
    let eager = tokio::spawn(worker(
        node.app().await,
        "eager",
        &[20, 20, 20, 160],
        deadline,
    ));
    let (mut tenures, mut refusals) = slow.await.unwrap();
    let (t, r) = eager.await.unwrap();
    tenures.extend(t);
    refusals.extend(r);

    assert!(
        refusals.iter().all(|s| s == "lapsed" || s == "not_owner"),
        "refusals: {refusals:?}"
    );
    assert!(
        !refusals.is_empty(),
        "work longer than the TTL must be refused"
    );
    let slow_tenures = tenures.iter().filter(|t| t.owner == "slow").count();
    eprintln!(
        "{} tenures ({slow_tenures} slow), refusals: {refusals:?}",
        tenures.len()
    );
    tenures.sort_by_key(|t| t.start);
    assert!(tenures.len() >= 2, "tenures: {tenures:?}");
    for pair in tenures.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        assert!(
            b.start >= a.end,
            "two holders at once: {a:?} overlaps {b:?}"
        );
        assert!(b.epoch > a.epoch, "epochs must grow: {a:?} then {b:?}");
    }
}
