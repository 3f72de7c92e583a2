//! Sharding over two independent servers (each with pg_lease installed by the Rust installer, as
//! a non-superuser that owns the database): keys spread by the slot map; a paused slot refuses
//! new grants while held leases renew and release; moving a slot there and back keeps every new
//! epoch of its keys above every earlier one; the transfer waits for, and reports, the holders;
//! a new map settles only when attempts admitted under the old one have ended. The slot moves
//! (`SlotMove`: the transfer of a slot between shards) are in `slot_move.rs`.

use std::sync::OnceLock;
use std::time::Duration;

use pgcluster::Cluster;
use pglease::{Client, ShardedClient, SlotMap, SlotMapError, SlotMove};

use crate::common::{self, eventually, key, raw};

mod slot_move;

/// The role that owns each test database and installs pg_lease in it.
const ADMIN: &str = "shard_admin";
/// The role the lease clients connect as.
const APP: &str = "shard_app";
/// The shard names, in the order of [`servers`].
const SHARDS: [&str; 2] = ["a", "b"];
/// The lease ttl of these tests: long enough that no lease lapses unless a test wants it to.
const TTL: Duration = Duration::from_secs(30);

/// Two independent servers for the sharding tests (started on first use).
fn servers() -> &'static [Cluster; 2] {
    static SERVERS: OnceLock<[Cluster; 2]> = OnceLock::new();
    SERVERS.get_or_init(|| {
        let servers = [common::start_cluster(), common::start_cluster()];
        for server in &servers {
            server
                .psql(
                    "postgres",
                    &format!("CREATE ROLE {ADMIN} LOGIN; CREATE ROLE {APP} LOGIN;"),
                )
                .expect("create the roles");
        }
        servers
    })
}

/// A connection string for `db` on `server` as `role`.
fn conninfo(server: &Cluster, db: &str, role: &str) -> String {
    let base = server.connection_string(db);
    assert!(base.contains("user=postgres"), "{base}");
    format!(
        "{} application_name={db}",
        base.replace("user=postgres", &format!("user={role}"))
    )
}

/// One database of the same name on each server, pg_lease installed in both.
struct Pair {
    db: String,
}

impl Pair {
    async fn new(test: &str) -> Pair {
        let db = key(test).replace('-', "_");
        for server in servers() {
            server
                .psql("postgres", &format!("CREATE DATABASE {db} OWNER {ADMIN}"))
                .expect("create the database");
            let mut admin = raw(&conninfo(server, &db, ADMIN)).await;
            pglease::install(&mut admin)
                .await
                .expect("install pg_lease");
        }
        Pair { db }
    }

    fn conninfo(&self, shard: usize, role: &str) -> String {
        conninfo(&servers()[shard], &self.db, role)
    }

    /// The installing role's connection to shard `shard`.
    async fn admin(&self, shard: usize) -> tokio_postgres::Client {
        raw(&self.conninfo(shard, ADMIN)).await
    }

    /// A superuser's connection to shard `shard`.
    async fn superuser(&self, shard: usize) -> tokio_postgres::Client {
        raw(&self.conninfo(shard, "postgres")).await
    }

    /// A sharded client over both shards (as the app role), its clients with owner `owner`.
    async fn sharded(&self, map: SlotMap, owner: &str) -> ShardedClient {
        let mut clients = Vec::new();
        for (i, shard) in SHARDS.iter().enumerate() {
            let client = Client::builder()
                .owner(owner)
                .connect(&self.conninfo(i, APP))
                .await
                .unwrap_or_else(|e| panic!("connect to shard {shard}: {e}"));
            clients.push((*shard, client));
        }
        ShardedClient::new(map, clients).expect("a client for every shard")
    }
}

/// The index of `shard` in [`SHARDS`].
fn index(shard: &str) -> usize {
    SHARDS.iter().position(|s| *s == shard).expect("a shard")
}

/// The first `n` keys `prefix-<i>` in map slot `slot`.
fn keys_in(map: &SlotMap, slot: u32, prefix: &str, n: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("{prefix}-{i}"))
        .filter(|k| map.slot_of(k) == slot)
        .take(n)
        .collect()
}

/// The first semaphore name `prefix-<i>` in map slot `slot`.
fn semaphore_in(map: &SlotMap, slot: u32, prefix: &str) -> String {
    (0..)
        .map(|i| format!("{prefix}-{i}"))
        .find(|n| map.slot_of_semaphore(n) == slot)
        .expect("some name")
}

/// Grants each key on `shards` once (released at once) and returns the epochs.
async fn grant_each(shards: &ShardedClient, keys: &[String]) -> Vec<i64> {
    let mut epochs = Vec::new();
    for k in keys {
        let lease = shards
            .try_acquire(k, TTL)
            .await
            .unwrap_or_else(|e| panic!("acquire {k}: {e}"))
            .unwrap_or_else(|| panic!("{k} is free"));
        epochs.push(lease.epoch());
        lease.release().await.unwrap();
    }
    epochs
}

/// Moves `slot` to `target` with the procedure, in this process (the whole fleet here):
/// (a) pause and settle, (b)+(c) transfer, (d) the moved map.
async fn move_slot(
    shards: &ShardedClient,
    pair: &Pair,
    slot: u32,
    target: &str,
) -> pglease::Transferred {
    let mv = SlotMove::new(&shards.map(), slot, target).unwrap();
    shards.set_map(mv.paused_map().clone()).unwrap();
    shards.settle(Duration::from_secs(10)).await.unwrap();
    let source = pair.admin(index(mv.source())).await;
    let target_db = pair.admin(index(target)).await;
    let done = mv
        .transfer(&source, &target_db, Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("transfer of slot {slot} to {target}: {e}"));
    shards.set_map(mv.moved_map().clone()).unwrap();
    done
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_spread_over_the_shards_by_the_map_and_live_only_on_their_own() {
    let pair = Pair::new("shard_spread").await;
    let map: SlotMap = "8:0-3=a,4-7=b".parse().unwrap();
    let shards = pair.sharded(map.clone(), "spread").await;
    let admins = [pair.admin(0).await, pair.admin(1).await];
    let mut per_shard = [0, 0];
    for i in 0..16 {
        let k = format!("spread-{i}");
        let home = index(map.shard_of(&k));
        per_shard[home] += 1;
        let lease = shards.try_acquire(&k, TTL).await.unwrap().expect("free");
        let here = pglease::inspect(&admins[home], &k).await.unwrap();
        assert!(
            here.is_some_and(|s| s.held),
            "{k} is held on shard {}",
            SHARDS[home]
        );
        let there = pglease::inspect(&admins[1 - home], &k).await.unwrap();
        assert_eq!(there, None, "{k} is unknown to the other shard");
        lease.release().await.unwrap();
    }
    assert!(
        per_shard.iter().all(|n| *n > 0),
        "both shards have keys: {per_shard:?}"
    );
    // A semaphore's slot keys are all in the database of the semaphore's name.
    let name = semaphore_in(&map, 6, "spread-sem");
    let slot = shards
        .semaphore(&name, 2, TTL)
        .unwrap()
        .try_acquire()
        .await
        .unwrap()
        .expect("a slot");
    assert_eq!(map.shard_of(slot.key()), "b");
    assert!(
        pglease::inspect(&admins[1], slot.key())
            .await
            .unwrap()
            .is_some_and(|s| s.held)
    );
    slot.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_slot_refuses_new_grants_while_held_leases_renew_and_release() {
    let pair = Pair::new("shard_paused").await;
    let map: SlotMap = "8:0-3=a,4-7=b".parse().unwrap();
    // Two processes of the fleet, each with its own clients and map.
    let one = pair.sharded(map.clone(), "paused-1").await;
    let two = pair.sharded(map.clone(), "paused-2").await;
    let slot = 2; // on shard a
    let keys = keys_in(&map, slot, "paused", 3);
    let (held_key, waited_key, new_key) = (&keys[0], &keys[1], &keys[2]);
    let sem = semaphore_in(&map, slot, "paused-sem");
    let elected = keys_in(&map, slot, "paused-leader", 1).remove(0);
    let other = keys_in(&map, 6, "paused-other", 1).remove(0);

    let held = one.try_acquire(held_key, TTL).await.unwrap().expect("free");
    let blocker = one
        .try_acquire(waited_key, TTL)
        .await
        .unwrap()
        .expect("free");
    // Process two waits for the key process one holds (registered as a waiter on a).
    let waiting = tokio::spawn({
        let two = two.clone();
        let k = waited_key.clone();
        async move { two.acquire(&k, TTL, Duration::from_secs(60)).await }
    });
    let su = pair.superuser(0).await;
    eventually(
        "process two waits for the key",
        Duration::from_secs(10),
        || {
            let (su, k) = (&su, waited_key.clone());
            async move { common::waiter_registered(su, &k).await.then_some(()) }
        },
    )
    .await;

    // (a) in the whole fleet.
    let paused = map.with_paused(slot).unwrap();
    for process in [&one, &two] {
        process.set_map(paused.clone()).unwrap();
        process.settle(Duration::from_secs(10)).await.unwrap();
    }

    // New grants of the slot's keys are refused, by every way of asking, before sending.
    let e = two.try_acquire(new_key, TTL).await.unwrap_err();
    assert!(e.is_slot_paused() && e.code().is_none(), "{e}");
    assert!(
        two.acquire(new_key, TTL, Duration::from_secs(30))
            .await
            .unwrap_err()
            .is_slot_paused(),
        "a waiting acquire is refused at once, not after its wait"
    );
    let with_data = two.acquire_with(new_key, TTL).unwrap().data("x");
    assert!(with_data.try_acquire().await.unwrap_err().is_slot_paused());
    let semaphore = two.semaphore(&sem, 3, TTL).unwrap();
    assert!(semaphore.try_acquire().await.unwrap_err().is_slot_paused());
    let election = two.election(&elected, TTL).unwrap();
    assert!(election.campaign().await.unwrap_err().is_slot_paused());
    let a = two.shard("a").unwrap();
    assert!(
        a.try_acquire(new_key, TTL)
            .await
            .unwrap_err()
            .is_slot_paused()
    );
    let b = two.shard("b").unwrap();
    assert!(
        b.try_acquire(new_key, TTL)
            .await
            .unwrap_err()
            .is_wrong_shard()
    );
    assert_eq!(
        pglease::inspect(&su, new_key).await.unwrap(),
        None,
        "nothing was sent"
    );
    // Other slots are not affected.
    two.try_acquire(&other, TTL)
        .await
        .unwrap()
        .expect("free")
        .release()
        .await
        .unwrap();

    // Held leases renew (by hand and with data) and stay held.
    let epoch = held.epoch();
    for _ in 0..3 {
        held.renew().await.unwrap();
    }
    held.set_data("still here").await.unwrap();
    assert!(held.is_held());
    let state = pglease::inspect(&su, held_key).await.unwrap().unwrap();
    assert!(state.held && state.epoch == epoch);
    assert_eq!(state.data.as_deref(), Some("still here"));

    // A release goes through; the waiter it wakes is refused at its next attempt.
    blocker.release().await.unwrap();
    let woken = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("woken by the release")
        .unwrap();
    assert!(woken.unwrap_err().is_slot_paused());
    assert!(
        !pglease::inspect(&su, waited_key)
            .await
            .unwrap()
            .unwrap()
            .held
    );
    held.release().await.unwrap();

    // Resumed, the slot grants again.
    let resumed = paused.with_resumed(slot).unwrap();
    two.set_map(resumed).unwrap();
    two.try_acquire(new_key, TTL)
        .await
        .unwrap()
        .expect("free")
        .release()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_map_settles_only_when_attempts_admitted_under_the_old_one_have_ended() {
    let pair = Pair::new("shard_settle").await;
    let map: SlotMap = "8:0-3=a,4-7=b".parse().unwrap();
    let shards = pair.sharded(map.clone(), "settle").await;
    let slot = 1;
    let keys = keys_in(&map, slot, "settle", 2);
    // The key has a free row; a superuser transaction locks it, so an acquire of it waits.
    grant_each(&shards, &keys[..1]).await;
    let mut su = pair.superuser(0).await;
    let lock = su.transaction().await.unwrap();
    lock.execute(
        "SELECT 1 FROM lease.leases WHERE key = $1 FOR UPDATE",
        &[&keys[0]],
    )
    .await
    .unwrap();
    let attempt = tokio::spawn({
        let (shards, k) = (shards.clone(), keys[0].clone());
        async move { shards.try_acquire(&k, TTL).await }
    });
    let watcher = pair.superuser(0).await;
    eventually(
        "the acquire waits for the row lock",
        Duration::from_secs(10),
        || {
            let watcher = &watcher;
            async move {
                let n: i64 = watcher
                    .query_one(
                        "SELECT count(*) FROM pg_stat_activity \
                          WHERE wait_event_type = 'Lock' AND query LIKE '%lease.acquire%'",
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

    shards.set_map(map.with_paused(slot).unwrap()).unwrap();
    // The paused map is in force for new attempts ...
    assert!(
        shards
            .try_acquire(&keys[1], TTL)
            .await
            .unwrap_err()
            .is_slot_paused()
    );
    // ... but the attempt admitted under the old one is still going.
    let e = shards.settle(Duration::from_millis(300)).await.unwrap_err();
    assert!(e.is_wait_timeout() && e.code().is_none(), "{e}");
    assert!(!attempt.is_finished());

    lock.commit().await.unwrap();
    let granted = attempt
        .await
        .unwrap()
        .unwrap()
        .expect("granted once unlocked");
    shards.settle(Duration::from_secs(10)).await.unwrap();
    // Its grant is on the source, where a transfer sees it.
    let mv = SlotMove::new(&shards.map(), slot, "b").unwrap();
    let (admin_a, admin_b) = (pair.admin(0).await, pair.admin(1).await);
    let e = mv
        .transfer(&admin_a, &admin_b, Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(e.is_slot_busy());
    assert_eq!(e.holders()[0].key, keys[0]);
    granted.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sharded_client_needs_a_client_for_every_shard_and_moves_slots_only_from_a_pause() {
    let name = key("shard_config");
    let map: SlotMap = "8:0-3=a,4-7=b".parse().unwrap();
    let (a, b, spare) = (
        common::client(&format!("{name}-a")).await,
        common::client(&format!("{name}-b")).await,
        common::client(&format!("{name}-spare")).await,
    );
    assert_eq!(
        ShardedClient::new(map.clone(), [("a", a.clone())]).unwrap_err(),
        SlotMapError::NoClient { shard: "b".into() }
    );
    assert_eq!(
        ShardedClient::new(map.clone(), [("a", a.clone()), ("a", b.clone())]).unwrap_err(),
        SlotMapError::DuplicateShard { shard: "a".into() }
    );
    assert!(matches!(
        ShardedClient::new(map.clone(), [("a b", a.clone())]),
        Err(SlotMapError::ShardName { .. })
    ));
    // A client for a shard the map does not name yet is welcome (a later target).
    let shards = ShardedClient::new(
        map.clone(),
        [("a", a.clone()), ("b", b.clone()), ("c", spare)],
    )
    .unwrap();
    assert_eq!(
        ShardedClient::new(map.clone(), [("a", a.clone()), ("b", b.clone())]).unwrap_err(),
        SlotMapError::AlreadySharded { shard: "a".into() }
    );
    assert_eq!(
        shards
            .set_map("8:0-3=a,4-6=b,7=d".parse().unwrap())
            .unwrap_err(),
        SlotMapError::NoClient { shard: "d".into() }
    );
    assert_eq!(
        shards.set_map("16:0-15=a".parse().unwrap()).unwrap_err(),
        SlotMapError::SlotCountChanged { from: 8, to: 16 }
    );
    assert_eq!(
        shards
            .set_map("8:0-3=a,4-6=b,7=c".parse().unwrap())
            .unwrap_err(),
        SlotMapError::UnpausedMove {
            slot: 7,
            from: "b".into(),
            to: "c".into()
        }
    );
    assert_eq!(*shards.map(), map, "refused maps change nothing");
    shards
        .set_map("8:0-3=a,4-6=b,!7=b".parse().unwrap())
        .unwrap();
    shards
        .set_map("8:0-3=a,4-6=b,7=c".parse().unwrap())
        .unwrap();
    let home = shards.map().shard_of("spread-1").to_owned();
    assert!(std::ptr::eq(
        shards.client_for("spread-1").unwrap(),
        shards.shard(&home).unwrap()
    ));
    assert!(shards.client_for("").unwrap_err().is_invalid_input());
    assert!(shards.semaphore("", 2, TTL).unwrap_err().is_invalid_input());
    // A joined client refuses a key its map gives to another shard, even asked directly.
    let k = keys_in(&shards.map(), 0, &name, 1).remove(0);
    assert!(b.try_acquire(&k, TTL).await.unwrap_err().is_wrong_shard());
    a.try_acquire(&k, TTL)
        .await
        .unwrap()
        .expect("free")
        .release()
        .await
        .unwrap();
}
