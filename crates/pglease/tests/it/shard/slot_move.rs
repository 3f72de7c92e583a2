//! Moving a map slot between shards (`SlotMove`): the epochs of its keys stay above every
//! earlier grant there and back; the transfer waits for, and names, the source's holders, and
//! refuses a target holding the slot, a role that cannot raise its floor, and a source that
//! granted a key of the slot after its drain.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moving_a_slot_and_back_keeps_its_epochs_above_every_earlier_grant() {
    let pair = Pair::new("shard_move").await;
    let map: SlotMap = "8:0-3=a,4-7=b".parse().unwrap();
    let shards = pair.sharded(map.clone(), "mover").await;
    let slot = 1; // on shard a
    let keys = keys_in(&map, slot, "move", 4);
    let sem = semaphore_in(&map, slot, "move-sem");
    // Every epoch granted or seen for the slot's keys so far, on either shard.
    let mut earlier: Vec<i64> = Vec::new();

    // Shard b grants keys of other slots, so its own epochs are not all low.
    let others = keys_in(&map, 5, "move-other", 3);
    for _ in 0..3 {
        grant_each(&shards, &others).await;
    }
    // Push the slot's epochs up on a: several grants of three keys.
    for _ in 0..4 {
        earlier.extend(grant_each(&shards, &keys[..3]).await);
    }
    // Purge them all (their rows go; the floor keeps their epochs), then release k0 again: k0 has
    // a released row, k1 and k2 are purged.
    let admin_a = pair.admin(0).await;
    let purged = pglease::purge(&admin_a, Duration::ZERO).await.unwrap();
    assert!(purged >= 3, "purged {purged}");
    assert_eq!(pglease::inspect(&admin_a, &keys[1]).await.unwrap(), None);
    earlier.extend(grant_each(&shards, &keys[..1]).await);
    let state = pglease::inspect(&admin_a, &keys[0]).await.unwrap().unwrap();
    assert!(!state.held);
    earlier.push(state.epoch); // its counter: the released epoch + 1
    // A semaphore slot of the slot.
    let s = shards.semaphore(&sem, 2, TTL).unwrap();
    let held = s.try_acquire().await.unwrap().expect("a slot");
    earlier.push(held.epoch());
    held.release().await.unwrap();
    let before = *earlier.iter().max().unwrap();

    // Move slot 1 to b.
    let done = move_slot(&shards, &pair, slot, "b").await;
    assert!(
        done.source_high_water >= before,
        "the high water {} covers every epoch a granted ({before})",
        done.source_high_water
    );
    assert!(done.target_min_epoch > done.source_high_water);
    assert_eq!(shards.map().shard_of(&keys[0]), "b");

    // Every new grant of the slot's keys is on b, above every earlier one.
    let admin_b = pair.admin(1).await;
    let mut on_b = Vec::new();
    for _ in 0..3 {
        for k in &keys {
            let lease = shards.try_acquire(k, TTL).await.unwrap().expect("free");
            assert!(
                lease.epoch() > before && lease.epoch() >= done.target_min_epoch,
                "{k} at epoch {} after the move; earlier max {before}, floor {}",
                lease.epoch(),
                done.target_min_epoch
            );
            assert!(
                pglease::inspect(&admin_b, k)
                    .await
                    .unwrap()
                    .is_some_and(|s| s.held),
                "{k} is granted on b"
            );
            on_b.push(lease.epoch());
            lease.release().await.unwrap();
        }
    }
    let slot_on_b = shards
        .semaphore(&sem, 2, TTL)
        .unwrap()
        .try_acquire()
        .await
        .unwrap()
        .expect("a slot");
    assert!(slot_on_b.epoch() > before);
    on_b.push(slot_on_b.epoch());
    slot_on_b.release().await.unwrap();
    // The old handle is bound to a: it is refused before sending anything.
    assert!(s.try_acquire().await.unwrap_err().is_wrong_shard());
    // So is a's client for a key of the slot.
    let a = shards.shard("a").unwrap();
    assert!(
        a.try_acquire(&keys[3], TTL)
            .await
            .unwrap_err()
            .is_wrong_shard()
    );
    earlier.extend(&on_b);
    let before = *earlier.iter().max().unwrap();

    // And back to a, where k0's old row and the purge floor are far below b's epochs.
    let back = move_slot(&shards, &pair, slot, "a").await;
    assert!(back.source_high_water >= before);
    for k in &keys {
        let lease = shards.try_acquire(k, TTL).await.unwrap().expect("free");
        assert!(
            lease.epoch() > before && lease.epoch() >= back.target_min_epoch,
            "{k} at epoch {} after the move back; earlier max {before}",
            lease.epoch()
        );
        assert!(
            pglease::inspect(&admin_a, k)
                .await
                .unwrap()
                .is_some_and(|s| s.held)
        );
        lease.release().await.unwrap();
    }
    let slot_back = shards
        .semaphore(&sem, 2, TTL)
        .unwrap()
        .try_acquire()
        .await
        .unwrap()
        .expect("a slot");
    assert!(slot_back.epoch() > before);
    slot_back.release().await.unwrap();
    // Keys of other slots were never paused nor moved.
    grant_each(&shards, &others).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_transfer_waits_for_the_sources_holders_and_names_them_when_its_wait_runs_out() {
    let pair = Pair::new("shard_drain").await;
    let map: SlotMap = "8:0-3=a,4-7=b".parse().unwrap();
    let shards = pair.sharded(map.clone(), "drain").await;
    let slot = 3; // on shard a
    let keys = keys_in(&map, slot, "drain", 2);
    let held = shards
        .try_acquire(&keys[0], TTL)
        .await
        .unwrap()
        .expect("free");
    let sem = semaphore_in(&map, slot, "drain-sem");
    let held_slot = shards
        .semaphore(&sem, 2, TTL)
        .unwrap()
        .try_acquire()
        .await
        .unwrap()
        .expect("a slot");

    let mv = SlotMove::new(&map, slot, "b").unwrap();
    shards.set_map(mv.paused_map().clone()).unwrap();
    shards.settle(Duration::from_secs(10)).await.unwrap();
    let (admin_a, admin_b) = (pair.admin(0).await, pair.admin(1).await);

    // Its wait runs out: refused, naming both holders, with the target unchanged.
    let floor_before = pglease::high_water(&admin_b).await.unwrap();
    let e = mv
        .transfer(&admin_a, &admin_b, Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(e.is_slot_busy(), "{e}");
    let mut named: Vec<&str> = e.holders().iter().map(|h| h.key.as_str()).collect();
    named.sort_unstable();
    let mut expected = vec![keys[0].as_str(), held_slot.key()];
    expected.sort_unstable();
    assert_eq!(named, expected);
    assert!(
        e.holders()
            .iter()
            .all(|h| h.state.held && h.state.owner.as_deref() == Some("drain"))
    );
    assert_eq!(
        pglease::high_water(&admin_b).await.unwrap(),
        floor_before,
        "nothing changed on the target"
    );

    // With a longer wait it returns once the holders are gone, and not before: it cannot
    // succeed while a lease of the slot is held on the source.
    let transfer = tokio::spawn({
        let (mv, pair_db) = (mv.clone(), pair.db.clone());
        async move {
            let source = raw(&conninfo(&servers()[0], &pair_db, ADMIN)).await;
            let target = raw(&conninfo(&servers()[1], &pair_db, ADMIN)).await;
            mv.transfer(&source, &target, Duration::from_secs(60)).await
        }
    });
    let last_epoch = held.epoch().max(held_slot.epoch());
    held_slot.release().await.unwrap();
    assert!(!transfer.is_finished(), "a holder is still there");
    held.release().await.unwrap();
    let done = tokio::time::timeout(Duration::from_secs(30), transfer)
        .await
        .expect("the transfer ends once the source is drained")
        .unwrap()
        .unwrap();
    assert!(
        done.source_high_water > last_epoch,
        "a release reserves epoch + 1"
    );
    assert!(done.target_min_epoch > done.source_high_water);
    shards.set_map(mv.moved_map().clone()).unwrap();
    let lease = shards
        .try_acquire(&keys[1], TTL)
        .await
        .unwrap()
        .expect("free");
    assert!(lease.epoch() > done.source_high_water);
    lease.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_transfer_refuses_a_target_holding_the_slot_and_a_role_that_cannot_raise_its_floor() {
    let pair = Pair::new("shard_refuse").await;
    let map: SlotMap = "8:0-3=a,4-7=b".parse().unwrap();
    let slot = 0;
    let k = keys_in(&map, slot, "refuse", 1).remove(0);
    // A stale client grants the key on the target with a plain call (no map is checked there).
    let app_b = raw(&pair.conninfo(1, APP)).await;
    let stale = pglease::acquire(&app_b, &k, "stale", TTL, Duration::ZERO)
        .await
        .unwrap()
        .expect("free");
    let (admin_a, admin_b) = (pair.admin(0).await, pair.admin(1).await);
    let mv = SlotMove::new(&map, slot, "b").unwrap();
    let e = mv
        .transfer(&admin_a, &admin_b, Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(e.is_slot_busy(), "{e}");
    assert_eq!(e.holders().len(), 1);
    assert_eq!(e.holders()[0].key, k);
    assert_eq!(e.holders()[0].state.owner.as_deref(), Some("stale"));
    pglease::release(&app_b, &k, "stale", stale.epoch)
        .await
        .unwrap();

    // Only the installing role raises the target's minimum epoch.
    let e = mv
        .transfer(&admin_a, &app_b, Duration::from_secs(5))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("42501"), "{e}");
    let e = pglease::raise_min_epoch(&admin_b, -1).await.unwrap_err();
    assert!(e.is_invalid_input() && e.code() == Some("22023"), "{e}");
    let e = pglease::raise_min_epoch(&admin_b, (1 << 62) + 1)
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("22023"), "{e}");
    let done = mv
        .transfer(&admin_a, &admin_b, Duration::from_secs(5))
        .await
        .unwrap();
    // The minimum never goes down.
    let min = pglease::raise_min_epoch(&admin_b, 1).await.unwrap();
    assert_eq!(min, done.target_min_epoch);
    assert!(pglease::high_water(&admin_b).await.unwrap() >= min);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_transfer_refuses_when_the_source_grants_a_key_of_the_slot_after_its_drain() {
    let pair = Pair::new("shard_late").await;
    let map: SlotMap = "8:0-3=a,4-7=b".parse().unwrap();
    let slot = 0;
    let k = keys_in(&map, slot, "late", 1).remove(0);
    // The target's settings row exists, and a superuser transaction locks it: the transfer's
    // raise of the target's minimum waits there, after its drain and before its last look.
    let admin_b = pair.admin(1).await;
    pglease::raise_min_epoch(&admin_b, 0).await.unwrap();
    let mut su_b = pair.superuser(1).await;
    let lock = su_b.transaction().await.unwrap();
    lock.execute("SELECT 1 FROM lease.settings FOR UPDATE", &[])
        .await
        .unwrap();
    let mv = SlotMove::new(&map, slot, "b").unwrap();
    let transfer = tokio::spawn({
        let (mv, db) = (mv.clone(), pair.db.clone());
        async move {
            let source = raw(&conninfo(&servers()[0], &db, ADMIN)).await;
            let target = raw(&conninfo(&servers()[1], &db, ADMIN)).await;
            mv.transfer(&source, &target, Duration::from_secs(30)).await
        }
    });
    let watcher = pair.superuser(1).await;
    eventually(
        "the transfer's raise waits for the lock",
        Duration::from_secs(10),
        || {
            let watcher = &watcher;
            async move {
                let n: i64 = watcher
                    .query_one(
                        "SELECT count(*) FROM pg_stat_activity \
                          WHERE wait_event_type = 'Lock' AND query LIKE '%raise_min_epoch%'",
                        &[],
                    )
                    .await
                    .unwrap()
                    .get(0);
                (n > 0).then_some(())
            }
        },
    )
    .await;
    // A client that never got the paused map grants a key of the slot on the source.
    let app_a = raw(&pair.conninfo(0, APP)).await;
    let stale = pglease::acquire(&app_a, &k, "stale", TTL, Duration::ZERO)
        .await
        .unwrap()
        .expect("free");
    lock.commit().await.unwrap();
    let e = tokio::time::timeout(Duration::from_secs(30), transfer)
        .await
        .expect("the transfer ends")
        .unwrap()
        .unwrap_err();
    assert!(e.is_slot_busy(), "{e}");
    assert_eq!(e.holders().len(), 1);
    assert_eq!(e.holders()[0].key, k);
    assert_eq!(e.holders()[0].state.epoch, stale.epoch);
    assert_eq!(e.holders()[0].state.owner.as_deref(), Some("stale"));
}
