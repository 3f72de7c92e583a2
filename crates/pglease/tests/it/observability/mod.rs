//! Observability: the documented `tracing` events and spans (docs/CLIENT.md, "Observability") of
//! an acquire, its renewals, a failed renewal and its recovery, every kind of loss (once each, with
//! its reason), a release, a wait, an election and the plain calls, each with its key, owner and
//! epoch; nothing at `error`; and nothing printed at all without a subscriber.
//!
//! Each test installs a capturing subscriber as the default of its own thread and runs on a
//! current-thread runtime, so every task of its client (keepalives, the listening connection)
//! reports to it and nothing of other tests does. The subscriber is in `capture.rs`.

use std::time::Duration;

use tracing::Level;

mod capture;

use crate::common::{self, client, eventually, force_lapse, key, superuser};
use capture::{Capture, Captured, assert_nothing_at_error};

#[tokio::test]
async fn an_acquire_its_renewals_a_loss_and_a_release_emit_the_documented_events() {
    let (capture, _guard) = Capture::install();
    let k = key("trace-life");
    let c = client(&k).await;
    let owner = c.owner().to_owned();
    let su = superuser().await;
    let ttl = Duration::from_secs(2);

    // The grant: info on pglease::lease, inside the acquire span.
    let lease = c.acquire(&k, ttl, Duration::from_secs(10)).await.unwrap();
    let epoch = lease.epoch();
    let granted = capture.find("pglease::lease", "lease granted", &k).unwrap();
    assert_eq!(granted.level, Level::INFO);
    assert!(granted.is_about(&k, &owner, Some(epoch)), "{granted:#?}");
    assert_eq!(granted.field("ttl"), Some("2s"));
    let span = granted.span("acquire").expect("in the acquire span");
    assert_eq!(span.get("key"), Some(k.as_str()));
    assert_eq!(span.get("owner"), Some(owner.as_str()));
    assert_eq!(span.get("ttl"), Some("2s"));
    assert_eq!(span.get("wait"), Some("10s"), "{span:?}");

    // A routine renewal: debug, in the lease's keepalive span.
    let renewed = capture
        .wait_for("pglease::lease", "lease renewed", &k)
        .await;
    assert_eq!(renewed.level, Level::DEBUG);
    assert!(renewed.is_about(&k, &owner, Some(epoch)), "{renewed:#?}");
    assert!(renewed.field("valid_for").is_some());
    let span = renewed.span("keepalive").expect("in the keepalive span");
    assert_eq!(span.get("key"), Some(k.as_str()));
    assert_eq!(span.get("owner"), Some(owner.as_str()));
    assert_eq!(span.get("epoch"), Some(epoch.to_string().as_str()));

    // A forced loss: the server lapses the lease; the next renewal learns it.
    force_lapse(&su, &k).await;
    let reason = tokio::time::timeout(Duration::from_secs(10), lease.lost())
        .await
        .expect("the loss is signalled");
    assert_eq!(reason, pglease::LostReason::Lapsed);
    let lost = capture.find("pglease::lease", "lease lost", &k).unwrap();
    assert_eq!(lost.level, Level::WARN);
    assert!(lost.is_about(&k, &owner, Some(epoch)), "{lost:#?}");
    assert_eq!(lost.field("reason"), Some("lapsed"));
    assert!(lost.span("keepalive").is_some(), "{lost:#?}");
    drop(lease);

    // A release: info, with the reason `released`.
    let k2 = key("trace-release");
    let lease = c.try_acquire(&k2, ttl).await.unwrap().expect("free key");
    let epoch2 = lease.epoch();
    let granted = capture
        .find("pglease::lease", "lease granted", &k2)
        .unwrap();
    assert_eq!(
        granted.span("acquire").and_then(|s| s.get("wait")),
        Some("0ns"),
        "try_acquire does not wait"
    );
    lease.release().await.unwrap();
    let released = capture
        .find("pglease::lease", "lease released", &k2)
        .unwrap();
    assert_eq!(released.level, Level::INFO);
    assert!(
        released.is_about(&k2, &owner, Some(epoch2)),
        "{released:#?}"
    );
    assert_eq!(released.field("reason"), Some("released"));
    // A released lease is not a lost one.
    assert!(capture.find("pglease::lease", "lease lost", &k2).is_none());

    // Dropping a lease releases it too, logged the same way.
    let k3 = key("trace-drop");
    let lease = c.try_acquire(&k3, ttl).await.unwrap().expect("free key");
    drop(lease);
    let released = capture
        .wait_for("pglease::lease", "lease released", &k3)
        .await;
    assert_eq!(released.field("reason"), Some("released"));

    for k in [&k, &k2, &k3] {
        assert_nothing_at_error(&capture, k);
    }
    c.shutdown().await;
}

#[tokio::test]
async fn every_kind_of_loss_is_logged_once_as_a_warning_with_its_reason() {
    let (capture, _guard) = Capture::install();
    let su = superuser().await;
    let ttl = Duration::from_secs(2);
    let lost_once = |k: &str, owner: &str, epoch: i64, reason: &str| {
        let lost: Vec<Captured> = capture
            .events()
            .into_iter()
            .filter(|e| e.message() == "lease lost" && e.field("key") == Some(k))
            .collect();
        assert_eq!(lost.len(), 1, "{k}: one loss event: {lost:#?}");
        assert_eq!(lost[0].level, Level::WARN);
        assert!(lost[0].is_about(k, owner, Some(epoch)), "{lost:#?}");
        assert_eq!(lost[0].field("reason"), Some(reason), "{lost:#?}");
        assert_nothing_at_error(&capture, k);
    };

    // not_owner: taken over after a lapse.
    let k = key("trace-not-owner");
    let c = client(&k).await;
    let lease = c.try_acquire(&k, ttl).await.unwrap().expect("free key");
    force_lapse(&su, &k).await;
    pglease::acquire(&su, &k, "intruder", ttl, Duration::ZERO)
        .await
        .unwrap()
        .expect("the lapsed key is free");
    assert_eq!(lease.lost().await, pglease::LostReason::NotOwner);
    // Asking again (and a manual renewal that learns the same) logs nothing more.
    assert!(lease.renew().await.is_err() && !lease.is_held());
    lost_once(&k, c.owner(), lease.epoch(), "not_owner");
    drop(lease);

    // epoch_mismatch: the same owner holds the key at a newer epoch.
    let k = key("trace-epoch");
    let c = client(&k).await;
    let lease = c.try_acquire(&k, ttl).await.unwrap().expect("free key");
    force_lapse(&su, &k).await;
    pglease::acquire(&su, &k, c.owner(), ttl, Duration::ZERO)
        .await
        .unwrap()
        .expect("the lapsed key is free");
    assert_eq!(lease.lost().await, pglease::LostReason::EpochMismatch);
    lost_once(&k, c.owner(), lease.epoch(), "epoch_mismatch");
    drop(lease);

    // expired: a frozen server answers no renewal; each failed attempt is a warning first.
    let cluster = tokio::task::spawn_blocking(common::start_cluster)
        .await
        .unwrap();
    cluster
        .psql("postgres", "CREATE EXTENSION pg_lease")
        .expect("create extension");
    let k = key("trace-expired");
    let c = pglease::Client::connect(&common::conninfo_for(&cluster, "postgres", &k))
        .await
        .unwrap();
    let lease = c
        .try_acquire(&k, Duration::from_secs(1))
        .await
        .unwrap()
        .expect("free key");
    cluster.pause();
    let reason = tokio::time::timeout(Duration::from_secs(10), lease.lost())
        .await
        .expect("lost() fires while the server is frozen");
    assert_eq!(reason, pglease::LostReason::Expired);
    let failed = capture
        .find("pglease::lease", "lease renewal failed, retrying", &k)
        .expect("a failed renewal before the expiry");
    assert_eq!(failed.level, Level::WARN);
    assert!(failed.is_about(&k, c.owner(), Some(lease.epoch())));
    lost_once(&k, c.owner(), lease.epoch(), "expired");
    cluster.resume();
    drop(lease);
    c.shutdown().await;
}

#[tokio::test]
async fn a_failed_renewal_is_a_warning_with_its_sqlstate_and_its_recovery_is_logged() {
    let (capture, _guard) = Capture::install();
    let k = key("trace-retry");
    let c = client(&k).await;
    let owner = c.owner().to_owned();
    let mut su = superuser().await;
    // Renewals every 3 s, each allowed 3 s for an answer: time enough to cancel a blocked one.
    let lease = c
        .try_acquire(&k, Duration::from_secs(9))
        .await
        .unwrap()
        .expect("free key");

    // Hold the key's row, so the next renewal blocks on it; cancel that renewal (57014).
    let tx = su.transaction().await.unwrap();
    tx.execute(
        "SELECT 1 FROM lease.leases WHERE key = $1 FOR UPDATE",
        &[&k],
    )
    .await
    .unwrap();
    let probe = superuser().await;
    let blocked: i32 = eventually(
        "a renewal blocked on the row",
        Duration::from_secs(15),
        || {
            let (probe, k) = (&probe, &k);
            async move {
                probe
                    .query_opt(
                        "SELECT pid FROM pg_stat_activity \
                      WHERE application_name = $1 AND wait_event_type = 'Lock'",
                        &[k],
                    )
                    .await
                    .ok()?
                    .map(|row| row.get(0))
            }
        },
    )
    .await;
    probe
        .execute("SELECT pg_cancel_backend($1)", &[&blocked])
        .await
        .unwrap();
    let failed = capture
        .wait_for("pglease::lease", "lease renewal failed, retrying", &k)
        .await;
    assert_eq!(failed.level, Level::WARN);
    assert!(
        failed.is_about(&k, &owner, Some(lease.epoch())),
        "{failed:#?}"
    );
    assert_eq!(failed.field("sqlstate"), Some("57014"), "{failed:#?}");
    assert!(failed.field("error").is_some());
    assert_eq!(failed.field("failures"), Some("1"));
    assert!(failed.field("retry_in").is_some() && failed.field("valid_for").is_some());

    // Let renewals through again: the recovery is logged, and the lease was never lost.
    tx.rollback().await.unwrap();
    let recovered = capture
        .wait_for("pglease::lease", "lease renewed after failed renewals", &k)
        .await;
    assert_eq!(recovered.level, Level::INFO);
    assert!(recovered.is_about(&k, &owner, Some(lease.epoch())));
    assert_eq!(lease.ended(), None);
    assert!(capture.find("pglease::lease", "lease lost", &k).is_none());
    assert_nothing_at_error(&capture, &k);
    lease.release().await.unwrap();
    c.shutdown().await;
}

#[tokio::test]
async fn a_wait_logs_the_holder_and_what_woke_it() {
    let (capture, _guard) = Capture::install();
    let k = key("trace-wait");
    let holder = client(&format!("{k}-holder")).await;
    let waiter = pglease::Client::builder()
        .owner(format!("{k}-waiter"))
        .connect(&common::conninfo(&k))
        .await
        .unwrap();
    let ttl = Duration::from_secs(30);
    let held = holder
        .try_acquire(&k, ttl)
        .await
        .unwrap()
        .expect("free key");
    let epoch = held.epoch();

    let waiting = waiter.acquire(&k, ttl, Duration::from_secs(30));
    let release = async {
        let seen = capture
            .wait_for("pglease::wait", "waiting for the holder", &k)
            .await;
        held.release().await.unwrap();
        seen
    };
    let (lease, seen) = tokio::join!(waiting, release);
    let lease = lease.unwrap();
    assert_eq!(seen.level, Level::DEBUG);
    assert!(seen.is_about(&k, waiter.owner(), None), "{seen:#?}");
    assert_eq!(seen.field("holder"), Some(holder.owner()));
    assert_eq!(seen.field("holder_epoch"), Some(epoch.to_string().as_str()));
    assert_eq!(seen.field("listening"), Some("true"));
    assert!(seen.field("lapses_in").is_some());
    assert!(seen.span("wait").is_some() && seen.span("acquire").is_some());

    let woken = capture.find("pglease::wait", "woken", &k).unwrap();
    assert_eq!(woken.field("by"), Some("release"), "{woken:#?}");
    let granted = capture
        .events()
        .into_iter()
        .find(|e| e.message() == "lease granted" && e.is_about(&k, waiter.owner(), None))
        .expect("the waiter's grant");
    assert_eq!(
        granted.field("epoch"),
        Some(lease.epoch().to_string().as_str())
    );
    lease.release().await.unwrap();
    holder.shutdown().await;
    waiter.shutdown().await;
}

#[tokio::test]
async fn an_election_logs_the_leader_elected_observed_and_its_leadership_lost() {
    use futures_util::StreamExt;

    let (capture, _guard) = Capture::install();
    let k = key("trace-election");
    let c = client(&k).await;
    let owner = c.owner().to_owned();
    let su = superuser().await;
    let election = c.election(&k, Duration::from_secs(2));
    let leadership = election.campaign().await.unwrap();
    let epoch = leadership.epoch();

    let elected = capture
        .find("pglease::election", "leader elected", &k)
        .unwrap();
    assert_eq!(elected.level, Level::INFO);
    assert!(elected.is_about(&k, &owner, Some(epoch)), "{elected:#?}");
    assert!(elected.span("campaign").is_some());

    let first = election.observe().next().await.unwrap().unwrap();
    assert_eq!(first.map(|l| l.epoch), Some(epoch));
    let observed = capture
        .find("pglease::election", "leader observed", &k)
        .unwrap();
    assert_eq!(observed.field("leader"), Some(owner.as_str()));
    assert_eq!(observed.field("epoch"), Some(epoch.to_string().as_str()));

    force_lapse(&su, &k).await;
    let reason = tokio::time::timeout(Duration::from_secs(10), leadership.lost())
        .await
        .expect("the loss is signalled");
    assert!(reason.is_loss());
    let lost = capture
        .find("pglease::election", "leadership lost", &k)
        .unwrap();
    assert_eq!(lost.level, Level::WARN);
    assert!(lost.is_about(&k, &owner, Some(epoch)), "{lost:#?}");
    assert_eq!(lost.field("reason"), Some(reason.as_str()));

    // A new term, resigned: info.
    let leadership = election.campaign().await.unwrap();
    let epoch = leadership.epoch();
    election.resign(leadership).await.unwrap();
    let resigned = capture
        .find("pglease::election", "leadership resigned", &k)
        .unwrap();
    assert_eq!(resigned.level, Level::INFO);
    assert!(resigned.is_about(&k, &owner, Some(epoch)), "{resigned:#?}");
    assert_nothing_at_error(&capture, &k);
    c.shutdown().await;
}

#[tokio::test]
async fn the_plain_calls_log_grants_and_releases_at_info_and_refusals_at_debug() {
    let (capture, _guard) = Capture::install();
    let k = key("trace-call");
    let db = superuser().await;
    let ttl = Duration::from_secs(30);
    let grant = pglease::acquire(&db, &k, "call-a", ttl, Duration::ZERO)
        .await
        .unwrap()
        .expect("free key");
    let granted = capture.find("pglease::call", "lease granted", &k).unwrap();
    assert_eq!(granted.level, Level::INFO);
    assert!(granted.is_about(&k, "call-a", Some(grant.epoch)));

    let refused = pglease::acquire(&db, &k, "call-b", ttl, Duration::ZERO)
        .await
        .unwrap();
    assert!(refused.is_none());
    let held = capture
        .events()
        .into_iter()
        .find(|e| e.message() == "key held by another owner" && e.is_about(&k, "call-b", None))
        .expect("the refusal");
    assert_eq!(
        held.level,
        Level::DEBUG,
        "a refusal is an answer, not a failure"
    );

    let status = pglease::release(&db, &k, "call-b", grant.epoch)
        .await
        .unwrap();
    assert!(!status.is_ok());
    let refused = capture
        .find("pglease::call", "lease release refused", &k)
        .unwrap();
    assert_eq!(refused.level, Level::DEBUG);
    assert_eq!(refused.field("status"), Some(status.as_str()));

    pglease::release(&db, &k, "call-a", grant.epoch)
        .await
        .unwrap();
    let released = capture.find("pglease::call", "lease released", &k).unwrap();
    assert_eq!(released.level, Level::INFO);
    assert!(released.is_about(&k, "call-a", Some(grant.epoch)));
    assert_nothing_at_error(&capture, &k);
}

/// Set in the child process of [`without_a_subscriber_the_library_prints_nothing`]: the
/// connection string it uses.
const QUIET_CHILD: &str = "PGLEASE_IT_QUIET_CHILD";

#[tokio::test]
async fn without_a_subscriber_the_library_prints_nothing() {
    if let Ok(conninfo) = std::env::var(QUIET_CHILD) {
        // The child: a whole lifecycle (grant, renewals, a failed wait, a loss, a release) with
        // no subscriber installed anywhere in the process.
        let k = key("trace-quiet");
        let c = pglease::Client::builder()
            .renew_fraction(0.1)
            .connect(&conninfo)
            .await
            .unwrap();
        let su = common::raw(&conninfo).await;
        let lease = c
            .try_acquire(&k, Duration::from_secs(1))
            .await
            .unwrap()
            .unwrap();
        lease.renew().await.unwrap();
        let other = pglease::Client::builder()
            .owner("quiet-other")
            .connect(&conninfo)
            .await
            .unwrap();
        let e = other
            .acquire(&k, Duration::from_secs(1), Duration::from_millis(200))
            .await
            .unwrap_err();
        assert!(e.is_wait_timeout(), "{e}");
        force_lapse(&su, &k).await;
        assert!(lease.lost().await.is_loss());
        drop(lease);
        let lease = c
            .try_acquire(&k, Duration::from_secs(1))
            .await
            .unwrap()
            .unwrap();
        lease.release().await.unwrap();
        c.shutdown().await;
        other.shutdown().await;
        return;
    }

    // The parent: runs this very test in a child process, connected to the shared server.
    let conninfo = common::conninfo("trace-quiet-child");
    let exe = std::env::current_exe().unwrap();
    let name = "observability::without_a_subscriber_the_library_prints_nothing";
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(exe)
            .args([name, "--exact", "--nocapture", "--test-threads=1"])
            .env(QUIET_CHILD, &conninfo)
            .env_remove("RUST_LOG")
            .output()
    })
    .await
    .unwrap()
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the child failed:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("1 passed"),
        "the child ran the test:\n{stdout}"
    );
    // Only the test harness speaks: its header, the test's line and the summary.
    let foreign: Vec<&str> = stdout
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with("running ") && !l.starts_with("test "))
        .collect();
    assert!(foreign.is_empty(), "printed by the library: {foreign:?}");
    assert!(
        stderr.is_empty(),
        "printed by the library on stderr:\n{stderr}"
    );
}

#[tokio::test]
async fn sharding_logs_the_map_in_force_its_refusals_and_a_transfer() {
    let (capture, _guard) = Capture::install();
    let name = key("trace-shard").replace('-', "_");
    // Two databases of the shared server stand for two shards.
    let cluster = common::cluster();
    let mut clients = Vec::new();
    let mut admins = Vec::new();
    for shard in ["a", "b"] {
        let db = format!("{name}_{shard}");
        cluster
            .psql("postgres", &format!("CREATE DATABASE {db}"))
            .unwrap();
        let conninfo = common::conninfo_for(cluster, &db, &db);
        let mut admin = common::raw(&conninfo).await;
        pglease::install(&mut admin).await.unwrap();
        admins.push(admin);
        let client = pglease::Client::builder()
            .owner(format!("{name}-owner"))
            .connect(&conninfo)
            .await
            .unwrap();
        clients.push((shard, client));
    }
    let owner = format!("{name}-owner");
    let map: pglease::SlotMap = "8:0-3=a,4-7=b".parse().unwrap();
    let shards = pglease::ShardedClient::new(map.clone(), clients).unwrap();
    let in_force = |generation: &str| {
        capture.events().into_iter().find(|e| {
            e.target == "pglease::shard"
                && e.message() == "slot map in force"
                && e.field("generation") == Some(generation)
        })
    };
    let first = in_force("0").expect("the first map is logged");
    assert_eq!(first.level, Level::INFO);
    assert_eq!(first.field("slots"), Some("8"));
    assert_eq!(first.field("shards"), Some("a,b"));
    assert_eq!(first.field("paused"), Some("0"));

    // "foobar" is in slot 0 (shard a).
    let slot = map.slot_of("foobar");
    assert_eq!(slot, 0);
    let held = shards
        .try_acquire("foobar", Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    let mv = pglease::SlotMove::new(&map, slot, "b").unwrap();
    shards.set_map(mv.paused_map().clone()).unwrap();
    let second = in_force("1").expect("the paused map is logged");
    assert_eq!(second.field("paused"), Some("1"));
    let foobar1 = (0..)
        .map(|i| format!("foobar-{i}"))
        .find(|k| map.slot_of(k) == slot)
        .unwrap();
    assert!(
        shards
            .try_acquire(&foobar1, Duration::from_secs(30))
            .await
            .unwrap_err()
            .is_slot_paused()
    );
    let refused = capture
        .find("pglease::shard", "grant refused: slot paused", &foobar1)
        .expect("the refusal is logged");
    assert_eq!(refused.level, Level::DEBUG);
    assert_eq!(refused.field("owner"), Some(owner.as_str()));
    assert_eq!(refused.field("slot"), Some("0"));
    assert_eq!(refused.field("shard"), Some("a"));
    let b = shards.shard("b").unwrap();
    assert!(
        b.try_acquire(&foobar1, Duration::from_secs(30))
            .await
            .unwrap_err()
            .is_wrong_shard()
    );
    let wrong = capture
        .find(
            "pglease::shard",
            "grant refused: another shard is the key's authority",
            &foobar1,
        )
        .expect("the refusal is logged");
    assert_eq!(
        (wrong.field("shard"), wrong.field("authority")),
        (Some("b"), Some("a"))
    );

    let e = mv
        .transfer(&admins[0], &admins[1], Duration::from_millis(100))
        .await
        .unwrap_err();
    assert!(e.is_slot_busy());
    let outlasted = capture
        .events()
        .into_iter()
        .find(|e| e.message() == "slot transfer refused: the source's holders outlasted the wait")
        .expect("the refusal is logged");
    assert_eq!(outlasted.target, "pglease::shard");
    assert_eq!(outlasted.level, Level::WARN);
    assert_eq!(outlasted.field("holders"), Some("1"));
    assert_eq!(
        (
            outlasted.field("slot"),
            outlasted.field("source"),
            outlasted.field("target")
        ),
        (Some("0"), Some("a"), Some("b"))
    );

    held.release().await.unwrap();
    let done = mv
        .transfer(&admins[0], &admins[1], Duration::from_secs(10))
        .await
        .unwrap();
    let moved = capture
        .events()
        .into_iter()
        .find(|e| e.target == "pglease::shard" && e.message() == "slot transferred")
        .expect("the transfer is logged");
    assert_eq!(moved.level, Level::INFO);
    assert_eq!(
        moved.field("high_water"),
        Some(done.source_high_water.to_string().as_str())
    );
    assert_eq!(
        moved.field("min_epoch"),
        Some(done.target_min_epoch.to_string().as_str())
    );
    let raised = capture
        .events()
        .into_iter()
        .find(|e| e.target == "pglease::call" && e.message() == "minimum epoch raised")
        .expect("the plain call logs");
    assert_eq!(raised.level, Level::INFO);
    assert_eq!(
        raised.field("at_least"),
        Some((done.source_high_water + 1).to_string().as_str())
    );
    assert!(capture.events().iter().all(|e| e.level != Level::ERROR));
}
