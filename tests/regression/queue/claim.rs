//! claim / claim_any: partitions owned through pg_lease leases, never waiting on a busy one.

use pglease_tests::calls::inspect;

use super::{ClaimAny, Fixture, LONG, claim, claim_any, lapse_partition, partition_of};

#[tokio::test]
async fn a_claim_is_a_pg_lease_grant_under_the_documented_lease_key_and_the_claimers_owner() {
    let f = Fixture::new("a_claim_is_a_pg_lease_grant", 2, 10).await;
    let key: String = f
        .app
        .query_one("SELECT lease_queue.lease_key($1, 1)", &[&f.q])
        .await
        .unwrap()
        .get(0);
    assert_eq!(key, format!("lease_queue:{}:1", f.q));
    assert_eq!(key, f.lease_key(1));

    let c = claim(&f.app, &f.q, 1, "worker 7", LONG).await;
    assert!(c.claimed);
    let (held, owner, epoch, expires_at) = inspect(&f.app, &key).await.unwrap();
    assert!(held);
    assert_eq!(owner.as_deref(), Some("worker 7"));
    assert_eq!(Some(epoch), c.epoch);
    assert_eq!(expires_at, c.expires_at);

    let listed: Vec<(String, bool, Option<String>, i64)> = f
        .app
        .query(
            "SELECT key, held, owner, epoch FROM lease.list($1)",
            &[&format!("lease_queue:{}:", f.q)],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    assert_eq!(
        listed,
        [(key, true, Some("worker 7".to_owned()), epoch)],
        "only the claimed partition has a lease"
    );
}

#[tokio::test]
async fn a_claim_of_a_partition_held_by_another_owner_is_refused_at_once_and_changes_nothing() {
    let f = Fixture::new("a_claim_of_a_busy_partition", 1, 10).await;
    let e = f.claim(0, "holder").await;
    let before = f.snapshot().await;
    f.app
        .batch_execute("SET statement_timeout = '10s'")
        .await
        .unwrap();
    let c = claim(&f.app, &f.q, 0, "rival", LONG).await;
    assert_eq!(
        (c.claimed, c.epoch, c.expires_at),
        (false, None, None),
        "refused"
    );
    assert_eq!(f.snapshot().await, before);
    let (held, owner, epoch, _) = inspect(&f.app, &f.lease_key(0)).await.unwrap();
    assert_eq!((held, owner.as_deref(), epoch), (true, Some("holder"), e));
}

#[tokio::test]
async fn a_repeated_claim_by_the_holder_returns_its_grant_unchanged() {
    let f = Fixture::new("a_repeated_claim_by_the_holder", 1, 10).await;
    let first = claim(&f.app, &f.q, 0, "w", LONG).await;
    let again = claim(&f.app, &f.q, 0, "w", "2 hours").await;
    assert_eq!(again, first, "same epoch, same expiry");
}

#[tokio::test]
async fn a_claim_of_a_lapsed_partition_is_granted_with_the_next_epoch() {
    let f = Fixture::new("a_claim_of_a_lapsed_partition", 1, 10).await;
    let e = f.claim(0, "old").await;
    lapse_partition(&f, 0, "old", e).await;
    let c = claim(&f.app, &f.q, 0, "new", LONG).await;
    assert!(c.claimed);
    assert_eq!(c.epoch, Some(e + 1));
}

#[tokio::test]
async fn claim_any_starts_at_the_owners_hash_and_skips_partitions_held_also_by_the_caller() {
    let f = Fixture::new("claim_any_skips_held_partitions", 3, 10).await;
    let owner = "any-owner";
    let first = claim_any(&f.app, &f.q, owner, LONG).await;
    assert!(first.claimed);
    assert_eq!(
        first.partition,
        Some(partition_of(owner, 3)),
        "the first try is the partition of the owner's hash"
    );
    let (held, who, epoch, expires_at) = inspect(&f.app, &f.lease_key(first.partition.unwrap()))
        .await
        .unwrap();
    assert!(held);
    assert_eq!(who.as_deref(), Some(owner));
    assert_eq!(Some(epoch), first.epoch);
    assert_eq!(expires_at, first.expires_at);

    let second = claim_any(&f.app, &f.q, owner, LONG).await;
    let third = claim_any(&f.app, &f.q, "someone-else", LONG).await;
    let mut taken: Vec<i32> = [&first, &second, &third]
        .iter()
        .map(|c| {
            assert!(c.claimed, "{c:?}");
            c.partition.unwrap()
        })
        .collect();
    taken.sort_unstable();
    assert_eq!(taken, [0, 1, 2], "each claim took a partition no one held");

    let before = f.snapshot().await;
    for who in [owner, "someone-else", "a-third"] {
        assert_eq!(
            claim_any(&f.app, &f.q, who, LONG).await,
            ClaimAny {
                claimed: false,
                partition: None,
                epoch: None,
                expires_at: None
            },
            "{who}: nothing is free"
        );
    }
    assert_eq!(f.snapshot().await, before);
}

#[tokio::test]
async fn claim_any_takes_a_lapsed_partition_with_the_next_epoch() {
    let f = Fixture::new("claim_any_takes_a_lapsed_partition", 2, 10).await;
    let e0 = f.claim(0, "a").await;
    let e1 = f.claim(1, "b").await;
    lapse_partition(&f, 1, "b", e1).await;
    let c = claim_any(&f.app, &f.q, "a", LONG).await;
    assert!(c.claimed);
    assert_eq!((c.partition, c.epoch), (Some(1), Some(e1 + 1)));
    let (held, owner, epoch, _) = inspect(&f.app, &f.lease_key(0)).await.unwrap();
    assert_eq!(
        (held, owner.as_deref(), epoch),
        (true, Some("a"), e0),
        "untouched"
    );
}

#[tokio::test]
async fn claim_any_skips_a_partition_being_claimed_in_an_open_transaction_without_waiting() {
    let f = Fixture::new("claim_any_skips_a_partition_in_use", 2, 10).await;
    let single = format!("{}.single", f.q);
    super::create_queue(&f.admin, &single, 1, 10).await;
    let other = f.another_app().await;
    other.batch_execute("BEGIN").await.unwrap();
    for q in [&f.q, &single] {
        assert!(claim(&other, q, 0, "slow", LONG).await.claimed);
    }
    // Partition 0 is not held yet as far as anyone else can see, but its row is in use: skipped.
    // (Were it waited for, the timeout would fail the test rather than hang it.)
    f.app
        .batch_execute("SET statement_timeout = '10s'")
        .await
        .unwrap();
    let c = claim_any(&f.app, &f.q, "fast", LONG).await;
    assert!(c.claimed);
    assert_eq!(c.partition, Some(1));
    assert!(
        !claim_any(&f.app, &single, "fast", LONG).await.claimed,
        "the only partition is in use: none free, at once"
    );
    other.batch_execute("COMMIT").await.unwrap();
    let (held, owner, _, _) = inspect(&f.app, &f.lease_key(0)).await.unwrap();
    assert_eq!((held, owner.as_deref()), (true, Some("slow")));
}

/// The audit's question, decided (QUEUE.md "claim"): a repeated claim by the holder returns its
/// grant unchanged, and records the new ttl, with which the next receive renews.
#[tokio::test]
async fn a_repeated_claim_keeps_the_expiry_and_the_next_receive_renews_with_its_ttl() {
    let f = super::Fixture::new("repeated_claim_records_its_ttl", 1, 10).await;
    f.send(Some("k"), "m1").await;
    let first = super::claim(&f.app, &f.q, 0, "c", "1 hour").await;
    let again = super::claim(&f.app, &f.q, 0, "c", "3 hours").await;
    assert_eq!(
        (again.claimed, again.epoch, again.expires_at),
        (true, first.epoch, first.expires_at),
        "the grant is returned unchanged"
    );
    f.receive(0, "c", first.epoch.unwrap(), 10).await;
    let renewed: std::time::SystemTime = f
        .app
        .query_one(
            "SELECT expires_at FROM lease.inspect(lease_queue.lease_key($1, 0))",
            &[&f.q],
        )
        .await
        .unwrap()
        .get(0);
    let first_expiry = first.expires_at.unwrap();
    assert!(
        renewed > first_expiry + std::time::Duration::from_secs(3600),
        "receive renewed with the recorded 3 hours: {renewed:?} vs {first_expiry:?}"
    );
}

/// The audit's question, decided (QUEUE.md "claim"): a ttl cap lowered below a consumer's recorded
/// ttl refuses its next receive with 22023 naming the cap, and changes nothing; a claim within the
/// cap works again. (The cap is the database's: this test has a database of its own.)
#[tokio::test]
async fn a_cap_lowered_below_the_claimed_ttl_refuses_the_next_receive_until_a_claim_within_it() {
    let s = pglease_tests::server();
    let db = s.fresh_db_with_queue("queue_cap_lowered");
    let admin = s.connect_as(&db, pglease_tests::ADMIN).await;
    let app = s.connect_as(&db, pglease_tests::APP).await;
    super::create_queue(&admin, "capped", 1, 10).await;
    super::send(&app, "capped", Some("k"), "m1", "0").await;
    let claimed = super::claim(&app, "capped", 0, "c", "1 hour").await;
    let epoch = claimed.epoch.unwrap();
    admin
        .batch_execute("SELECT lease.configure('10 minutes')")
        .await
        .unwrap();
    let su = s.connect_super(&db).await;
    let before = super::snapshot(&su, "capped").await;
    let e = super::try_receive(&app, "capped", 0, "c", epoch, 10)
        .await
        .expect_err("receive above the cap");
    assert_eq!(e.code, "22023");
    assert!(
        e.detail.unwrap_or_default().contains("max_ttl"),
        "the DETAIL names the cap"
    );
    assert_eq!(
        super::snapshot(&su, "capped").await,
        before,
        "nothing changed"
    );
    super::try_release(&app, "capped", 0, "c", epoch, false)
        .await
        .expect("release is not refused by the cap");
    let within = super::claim(&app, "capped", 0, "c", "5 minutes").await;
    let batch = super::receive(&app, "capped", 0, "c", within.epoch.unwrap(), 10).await;
    assert_eq!(batch.len(), 1);
}
