//! The grant history and handing a lease over (pg_lease 0.9.0): `history` shows how each grant
//! ended (released, lapsed, transferred, forced), `Lease::transfer_to` fences the old epoch, a
//! refused transfer is a typed error that changes nothing, `Election::handover` wakes a
//! campaigning successor that then leads at a higher term, and `configure_history` turns the
//! recording off and on (on a private server: it is database-wide).

use std::time::Duration;

use pglease::{EndedBy, HistoryQuery, LostReason, Status, sqlstate};

use crate::common::{self, client, eventually, force_lapse, key, state, superuser};

const TTL: Duration = Duration::from_secs(30);

/// `(epoch, owner, ended_by)` of each entry, for readable assertions.
fn summary(entries: &[pglease::HistoryEntry]) -> Vec<(i64, String, Option<EndedBy>)> {
    entries
        .iter()
        .map(|e| (e.epoch, e.owner.clone(), e.ended_by.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_shows_each_end_the_client_causes_released_lapsed_transferred_and_forced() {
    let k = key("history-ends");
    let su = superuser().await;
    let a = client(&format!("{k}-a")).await;
    let b = client(&format!("{k}-b")).await;

    // 1: released by its holder.
    let first = a.try_acquire(&k, TTL).await.unwrap().expect("free key");
    let e1 = first.epoch();
    first.release().await.unwrap();
    // 2: lapsed (made to lapse on the server), then taken over by b.
    let second = a.try_acquire(&k, TTL).await.unwrap().expect("free key");
    let e2 = second.epoch();
    force_lapse(&su, &k).await;
    let third = b.try_acquire(&k, TTL).await.unwrap().expect("lapsed key");
    let e3 = third.epoch();
    drop(second); // its release is refused: b holds the key
    // 3: transferred by b to an owner nobody uses yet.
    let handover = third.transfer_to("history-successor", TTL).await.unwrap();
    let e4 = handover.epoch;

    let entries = a.history(&k, &HistoryQuery::new()).await.unwrap();
    assert_eq!(
        summary(&entries),
        vec![
            (e1, a.owner().to_owned(), Some(EndedBy::Released)),
            (e2, a.owner().to_owned(), Some(EndedBy::Lapsed)),
            (e3, b.owner().to_owned(), Some(EndedBy::Transferred)),
            (e4, "history-successor".to_owned(), None),
        ]
    );
    assert_eq!((e2, e3, e4), (e1 + 2, e2 + 1, e3 + 1));
    let current = entries.last().unwrap();
    assert!(current.is_current() && current.ended_at.is_none());
    assert_eq!(current.expires_at, Some(handover.expires_at));
    assert!(entries.iter().all(|e| e.granted_at.is_some()));
    assert!(entries.iter().all(|e| e.holder_role.is_some()));
    // A transfer ends the grant at the successor's start; a lapse at its expiry.
    assert_eq!(entries[2].ended_at, entries[3].granted_at);
    assert_eq!(entries[1].ended_at, entries[1].expires_at);

    // 4: forced by an operator.
    assert_eq!(pglease::force_release(&su, &k).await.unwrap(), Some(e4));
    let entries = pglease::history(&su, &k, &HistoryQuery::new())
        .await
        .unwrap();
    assert_eq!(entries[3].ended_by, Some(EndedBy::Forced));

    // The filters: one owner, the latest N (still in epoch order), a time window.
    let of_a = a
        .history(&k, &HistoryQuery::new().owner(a.owner()))
        .await
        .unwrap();
    assert_eq!(
        of_a.iter().map(|e| e.epoch).collect::<Vec<_>>(),
        vec![e1, e2]
    );
    let latest = a.history(&k, &HistoryQuery::new().limit(2)).await.unwrap();
    assert_eq!(
        latest.iter().map(|e| e.epoch).collect::<Vec<_>>(),
        vec![e3, e4]
    );
    let recent = a
        .history(&k, &HistoryQuery::new().within(Duration::from_secs(3600)))
        .await
        .unwrap();
    assert_eq!(recent.len(), 4);
    // An instant is turned into a duration back from the server's clock: an hour ago, every grant.
    let since_instant = a
        .history(
            &k,
            &HistoryQuery::new().since(std::time::SystemTime::now() - Duration::from_secs(3600)),
        )
        .await
        .unwrap();
    let epochs = |v: &[pglease::HistoryEntry]| v.iter().map(|e| e.epoch).collect::<Vec<_>>();
    assert_eq!(epochs(&since_instant), epochs(&recent));
    let future = a
        .history(
            &k,
            &HistoryQuery::new().since(std::time::SystemTime::now() + Duration::from_secs(3600)),
        )
        .await
        .unwrap();
    assert!(future.is_empty(), "{future:?}");
    // A key never leased has no history; a bad query is refused before anything is sent.
    assert!(
        a.history(&key("history-none"), &HistoryQuery::new())
            .await
            .unwrap()
            .is_empty()
    );
    let e = a
        .history(&k, &HistoryQuery::new().limit(0))
        .await
        .unwrap_err();
    assert!(e.is_invalid_input() && e.code().is_none(), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfer_to_fences_the_old_epoch_and_the_successor_acquires_the_grant() {
    let k = key("transfer-fence");
    let su = superuser().await;
    let mut db = common::raw(&common::conninfo(&format!("{k}-db"))).await;
    let holder = client(&format!("{k}-holder")).await;
    let successor = pglease::Client::builder()
        .owner(format!("{k}-successor"))
        .connect(&common::conninfo(&format!("{k}-successor")))
        .await
        .unwrap();

    let lease = holder
        .try_acquire(&k, TTL)
        .await
        .unwrap()
        .expect("free key");
    let old = lease.epoch();
    let guard = lease.guard();
    let fence = lease.fencing_token();
    let handover = lease
        .transfer_to(successor.owner(), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(
        (
            handover.key.as_str(),
            handover.from_owner.as_str(),
            handover.from_epoch
        ),
        (k.as_str(), holder.owner(), old)
    );
    assert_eq!(handover.to_owner, successor.owner());
    assert!(handover.epoch > old);
    assert_eq!(guard.lost().await, LostReason::Transferred);
    assert!(!LostReason::Transferred.is_loss());

    // The server holds it for the successor at the new epoch: the key was never free.
    let s = state(&su, &k).await.unwrap();
    assert!(s.held && s.owner.as_deref() == Some(successor.owner()) && s.epoch == handover.epoch);

    // The old epoch is fenced: the server refuses it (LE001, another owner holds the key), and
    // renew/release with it are refused.
    let tx = db.transaction().await.unwrap();
    let e = fence.check(&tx).await.unwrap_err();
    assert!(
        e.is_fenced() && e.code() == Some(sqlstate::FENCE_NOT_OWNER),
        "{e}"
    );
    tx.rollback().await.unwrap();
    let tx = db.transaction().await.unwrap();
    let e = pglease::fence(&tx, &k, holder.owner(), old)
        .await
        .unwrap_err();
    assert!(e.is_fenced(), "{e}");
    tx.rollback().await.unwrap();
    let renewal = pglease::renew(&db, &k, holder.owner(), old, TTL)
        .await
        .unwrap();
    assert_eq!(renewal.status, Status::NotOwner);

    // The successor's acquire returns the transferred grant, and keeps it alive.
    let taken = successor
        .try_acquire(&k, TTL)
        .await
        .unwrap()
        .expect("the transferred grant");
    assert_eq!(taken.epoch(), handover.epoch);
    taken.renew().await.unwrap();
    let tx = db.transaction().await.unwrap();
    taken.fence(&tx).await.unwrap();
    tx.rollback().await.unwrap();
    taken.release().await.unwrap();
    // No keepalive of the old lease is left.
    eventually(
        "the holder's keepalive ended",
        Duration::from_secs(5),
        || {
            let live = holder.live_keepalives();
            async move { (live == 0).then_some(()) }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_transfer_is_a_typed_refusal_and_changes_nothing() {
    let k = key("transfer-refused");
    let su = superuser().await;
    let db = common::raw(&common::conninfo(&format!("{k}-db"))).await;

    // The free function: wrong epoch, wrong owner, invalid input.
    let grant = pglease::acquire(&db, &k, "holder", TTL, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    let before = state(&su, &k).await.unwrap();
    let t = pglease::transfer(&db, &k, "holder", grant.epoch + 1, "next", TTL)
        .await
        .unwrap();
    assert_eq!((t.status, t.grant), (Status::EpochMismatch, None));
    let t = pglease::transfer(&db, &k, "intruder", grant.epoch, "next", TTL)
        .await
        .unwrap();
    assert_eq!((t.status, t.grant), (Status::NotOwner, None));
    let e = pglease::transfer(&db, &k, "holder", grant.epoch, "", TTL)
        .await
        .unwrap_err();
    assert!(
        e.is_invalid_input() && e.code() == Some(sqlstate::INVALID_INPUT),
        "{e}"
    );
    assert_eq!(state(&su, &k).await.unwrap(), before, "nothing changed");
    let entries = pglease::history(&db, &k, &HistoryQuery::new())
        .await
        .unwrap();
    assert_eq!(
        summary(&entries),
        vec![(grant.epoch, "holder".to_owned(), None)]
    );

    // A lease that lapsed on the server: transfer_to is refused with the lapse, typed.
    let k2 = key("transfer-lapsed");
    let holder = client(&format!("{k2}-holder")).await;
    let lease = holder.try_acquire(&k2, TTL).await.unwrap().unwrap();
    let epoch = lease.epoch();
    let guard = lease.guard();
    force_lapse(&su, &k2).await;
    let before = state(&su, &k2).await.unwrap();
    let e = lease
        .transfer_to("next", TTL)
        .await
        .expect_err("a lapsed lease cannot be transferred");
    assert!(
        e.is_lease_lost() && e.lost_reason() == Some(LostReason::Lapsed),
        "{e}"
    );
    assert_eq!(guard.ended(), Some(LostReason::Lapsed));
    assert_eq!(state(&su, &k2).await.unwrap(), before, "nothing changed");
    assert!(!before.held && before.epoch == epoch);
    let entries = holder.history(&k2, &HistoryQuery::new()).await.unwrap();
    assert_eq!(
        summary(&entries),
        vec![(epoch, holder.owner().to_owned(), Some(EndedBy::Lapsed))]
    );

    // An invalid successor is refused before anything is sent; the lease is released as on drop.
    let k3 = key("transfer-invalid");
    let lease = holder.try_acquire(&k3, TTL).await.unwrap().unwrap();
    let guard = lease.guard();
    let e = lease.transfer_to("", TTL).await.unwrap_err();
    assert!(e.is_invalid_input() && e.code().is_none(), "{e}");
    assert_eq!(guard.ended(), Some(LostReason::Released));
    eventually(
        "the lease released in the background",
        Duration::from_secs(5),
        || {
            let su = &su;
            let k3 = &k3;
            async move { (!state(su, k3).await.unwrap().held).then_some(()) }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handover_wakes_the_campaigning_successor_which_leads_at_a_higher_term() {
    let k = key("handover");
    let su = superuser().await;
    let db = common::raw(&common::conninfo(&format!("{k}-db"))).await;
    // A long ttl: were the successor to wait for the lapse, it would wait 60 s.
    let ttl = Duration::from_secs(60);
    let leader_client = client(&format!("{k}-leader")).await;
    let successor_client = pglease::Client::builder()
        .owner(format!("{k}-successor"))
        .connect(&common::conninfo(&format!("{k}-successor")))
        .await
        .unwrap();
    let election = leader_client.election(k.clone(), ttl);
    let leadership = election.campaign().await.unwrap();
    let term = leadership.epoch();

    let successor_election = successor_client
        .election(k.clone(), ttl)
        .with_data("successor:8080");
    let campaign = tokio::spawn(async move { successor_election.campaign().await });
    // The successor waits as a registered waiter (it subscribed to the key's releases first).
    eventually(
        "the successor registered as the key's waiter",
        Duration::from_secs(10),
        || {
            let su = &su;
            let k = &k;
            async move { common::waiter_registered(su, k).await.then_some(()) }
        },
    )
    .await;
    assert!(!campaign.is_finished());

    let handed_at = tokio::time::Instant::now();
    let handover = election
        .handover(leadership, successor_client.owner())
        .await
        .unwrap();
    assert!(handover.epoch > term);
    let successor = tokio::time::timeout(Duration::from_secs(10), campaign)
        .await
        .expect("woken by the transfer, not by the lapse")
        .unwrap()
        .unwrap();
    assert!(handed_at.elapsed() < Duration::from_secs(10));
    assert_eq!(successor.epoch(), handover.epoch);
    assert_eq!(successor.owner(), successor_client.owner());
    // Its campaign set its data on the transferred grant (which had none).
    let leader = election.leader().await.unwrap().unwrap();
    assert_eq!(
        (leader.owner.as_str(), leader.epoch, leader.data.as_deref()),
        (
            successor_client.owner(),
            handover.epoch,
            Some("successor:8080")
        )
    );
    // The old term is fenced.
    let renewal = pglease::renew(&db, &k, leader_client.owner(), term, ttl)
        .await
        .unwrap();
    assert_eq!(renewal.status, Status::NotOwner);
    let entries = leader_client
        .history(&k, &HistoryQuery::new())
        .await
        .unwrap();
    assert_eq!(
        summary(&entries),
        vec![
            (
                term,
                leader_client.owner().to_owned(),
                Some(EndedBy::Transferred)
            ),
            (handover.epoch, successor_client.owner().to_owned(), None),
        ]
    );
    successor.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configure_history_turns_recording_off_and_on_and_keeps_the_retention() {
    let cluster = tokio::task::spawn_blocking(common::start_cluster)
        .await
        .unwrap();
    cluster
        .psql("postgres", "CREATE EXTENSION pg_lease")
        .expect("create extension");
    let db = common::raw(&common::conninfo_for(
        &cluster,
        "postgres",
        "history-config",
    ))
    .await;

    let c = pglease::configuration(&db).await.unwrap();
    assert!(c.history);
    assert_eq!(
        c.history_retention,
        pglease::limits::DEFAULT_HISTORY_RETENTION
    );

    // Recorded while on; its end unknown once it ended while the history was off.
    let g1 = pglease::acquire(&db, "k", "a", TTL, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    let day = Duration::from_secs(86_400);
    let c = pglease::configure_history(&db, Some(false), Some(day))
        .await
        .unwrap();
    assert!(!c.history && c.history_retention == day);
    pglease::release(&db, "k", "a", g1.epoch).await.unwrap();
    let g2 = pglease::acquire(&db, "k", "b", TTL, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    pglease::release(&db, "k", "b", g2.epoch).await.unwrap();
    let entries = pglease::history(&db, "k", &HistoryQuery::new())
        .await
        .unwrap();
    assert_eq!(
        summary(&entries),
        vec![(g1.epoch, "a".to_owned(), Some(EndedBy::Unrecorded))]
    );
    assert!(entries[0].ended_at.is_none());

    // On again, the retention kept; a new grant is recorded.
    let c = pglease::configure_history(&db, Some(true), None)
        .await
        .unwrap();
    assert!(c.history && c.history_retention == day);
    assert_eq!(pglease::configuration(&db).await.unwrap(), c);
    let g3 = pglease::acquire(&db, "k", "c", TTL, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    let entries = pglease::history(&db, "k", &HistoryQuery::new())
        .await
        .unwrap();
    assert_eq!(
        summary(&entries).last().unwrap(),
        &(g3.epoch, "c".to_owned(), None)
    );

    // Out of range: 22023, nothing changed.
    for bad in [
        Duration::from_millis(500),
        Duration::from_secs(3651 * 86_400),
    ] {
        let e = pglease::configure_history(&db, None, Some(bad))
            .await
            .unwrap_err();
        assert!(
            e.is_invalid_input() && e.code() == Some(sqlstate::INVALID_INPUT),
            "{bad:?}: {e}"
        );
    }
    assert_eq!(pglease::configuration(&db).await.unwrap(), c);
}

/// The race a handover can hit: the successor's attempt is refused, then the transfer commits
/// before the successor registers as the key's waiter, so no notification is sent (nobody was
/// registered yet) and the registration finds the successor's own owner holding the key. The wait
/// must try again at once, not sleep until the transferred grant lapses. The race is made
/// deterministic by holding the key's row lock: the registration blocks on it while the transfer
/// runs in the lock holder's transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_that_commits_before_the_successor_registers_is_taken_at_once() {
    let k = key("handover-race");
    let mut su = superuser().await;
    let observer = superuser().await;
    let db = common::raw(&common::conninfo(&format!("{k}-db"))).await;
    let ttl = Duration::from_secs(60);
    let grant = pglease::acquire(&db, &k, "old-leader", ttl, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    let app = format!("{k}-successor");
    let successor_client = pglease::Client::builder()
        .owner("new-leader")
        .connect(&common::conninfo(&app))
        .await
        .unwrap();

    let tx = su.transaction().await.unwrap();
    tx.execute(
        "SELECT 1 FROM lease.leases WHERE key = $1 FOR UPDATE",
        &[&k],
    )
    .await
    .unwrap();
    let election = successor_client.election(k.clone(), ttl);
    let campaign = tokio::spawn(async move { election.campaign().await });
    // Its attempt was refused (no lock needed) and its registration waits for the row lock.
    eventually(
        "the successor's registration blocked on the row lock",
        Duration::from_secs(10),
        || {
            let observer = &observer;
            let app = &app;
            async move {
                let n: i64 = observer
                    .query_one(
                        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 \
                          AND wait_event_type = 'Lock' AND query LIKE '%lease.register_waiter%'",
                        &[app],
                    )
                    .await
                    .unwrap()
                    .get(0);
                (n == 1).then_some(())
            }
        },
    )
    .await;
    let t = pglease::transfer(&tx, &k, "old-leader", grant.epoch, "new-leader", ttl)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let handed = t.grant.expect("transferred");

    let leadership = tokio::time::timeout(Duration::from_secs(10), campaign)
        .await
        .expect("taken at once, not after the 60 s lapse")
        .unwrap()
        .unwrap();
    assert_eq!(leadership.epoch(), handed.epoch);
    assert!(handed.epoch > grant.epoch);
    leadership.release().await.unwrap();
}
