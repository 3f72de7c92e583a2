//! Automatic failover under Patroni, seen by a `pglease::Client` holding leases through a
//! multi-host connection string.
//!
//! - H1, synchronous replication (Patroni's `synchronous_mode`): a lease granted before the crash
//!   is on the standby before the client hears of it, so the client keeps renewing it on the new
//!   primary, at the same epoch, without ever reporting it lost, as long as the failover takes less
//!   than the lease's ttl (60 s here; Patroni's ttl is 20 s).
//! - H2, asynchronous replication (Patroni's default): grants the standby never received are
//!   lost. Made deterministic by freezing (SIGSTOP) the leader's walsender for the replica before
//!   those grants, after the replica had replayed everything before them: a frozen walsender sends
//!   nothing more, and it dies frozen with the rest of the node. Asserted: no epoch goes back (the
//!   successor's epochs exceed every epoch the client was told before, by the timeline band of pg_lease
//!   0.6.0: at least `(t - 1) * 2^40` on timeline t); `lease.fence` on the new primary refuses the
//!   old holder's epoch and accepts the successor's; the old holder's keepalive reports the loss
//!   (`not_owner`: its renewal reached the new primary and was refused), before its own deadline;
//!   a grant the standby did receive survives.
//! - H3, asynchronous with pg_lease 0.7.0's failover quarantine on (`lease.configure`): the same lost
//!   grant, but the new primary grants the key to nobody (LE004) until the quarantine has run out,
//!   and by then the old holder's keepalive has reported the loss.
//!
//! Each prints what it measured: the failover time (SIGKILL of the leader's node to the new primary
//! accepting writes, and to Patroni reporting it as primary), the client's failed renewals and
//! their errors, and the longest time without a confirmed renewal.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use pglease::{Client, LeaseGuard, LostReason};
use tokio_postgres::{Config, NoTls};

use crate::observe::{self, Renewals};
use crate::patroni::{self, HaCluster, Options, poll_for};
use crate::{LIMIT, procs};

/// The band of timeline 2 (2^40): every grant after the first promotion is at least this.
const BAND: i64 = 1 << 40;
/// The leases' ttl: longer than a failover (Patroni's ttl, 20 s, plus the promotion).
const TTL: Duration = Duration::from_secs(60);
/// Renew every 3 s (a twentieth of the ttl), so the client meets the failover several times.
const RENEW_FRACTION: f64 = 0.05;
/// The longest a failover, or the client's recovery from one, may take before the test fails.
const FAILOVER_LIMIT: Duration = Duration::from_secs(90);

/// A client of owner `owner` through the multi-host connection string.
async fn client(ha: &HaCluster, owner: &str) -> Client {
    Client::builder()
        .owner(owner)
        .renew_fraction(RENEW_FRACTION)
        .connect_timeout(Duration::from_secs(2))
        .max_connections(4)
        .connect(&ha.conninfo())
        .await
        .unwrap_or_else(|e| panic!("client {owner}: {e}"))
}

/// Installs pg_lease on the leader as [`patroni::OWNER`] with the Rust installer (the scripts it
/// carries, run in one transaction: no extension files in the server's installation), and a table
/// for guarded writes.
async fn install(ha: &HaCluster) {
    let mut s = ha.owner_session(0).await;
    let installed = pglease::install(&mut s).await.expect("pglease::install");
    assert_eq!(installed.version, pglease::VERSION);
    s.batch_execute(
        "CREATE TABLE guarded (key text NOT NULL, owner text NOT NULL, epoch bigint NOT NULL)",
    )
    .await
    .expect("create the guarded table");
}

/// A write guarded by `lease.fence` on the node that accepts writes (a fresh multi-host session):
/// `BEGIN; SELECT lease.fence(key, owner, epoch); INSERT ...; COMMIT`. `Err` carries the fence's
/// SQLSTATE.
async fn guarded_write(ha: &HaCluster, key: &str, owner: &str, epoch: i64) -> Result<(), String> {
    let config: Config = ha.conninfo().parse().expect("a valid conninfo");
    let mut c = patroni::connect(config)
        .await
        .expect("a read-write session");
    let tx = c.transaction().await.expect("BEGIN");
    if let Err(e) = pglease::fence(&tx, key, owner, epoch).await {
        assert!(e.is_fenced(), "lease.fence failed otherwise: {e}");
        return Err(e.code().unwrap_or("?").to_owned());
    }
    tx.execute(
        "INSERT INTO guarded VALUES ($1, $2, $3)",
        &[&key, &owner, &epoch],
    )
    .await
    .expect("the guarded insert");
    tx.commit().await.expect("COMMIT");
    Ok(())
}

/// Waits (at most `limit`) until `key`'s keepalive has confirmed `n` renewals after `after`, asserting
/// on every poll that `lease` is still held; returns their instants.
async fn await_renewals(
    lease: &LeaseGuard,
    after: Instant,
    n: usize,
    limit: Duration,
) -> Vec<Instant> {
    let key = lease.key().to_owned();
    poll_for(
        &format!("{n} confirmed renewals of {key}"),
        limit,
        || async {
            assert_eq!(lease.ended(), None, "{key} was lost");
            Renewals::of(&key).confirmed_after(after).len() >= n
        },
    )
    .await;
    Renewals::of(&key).confirmed_after(after)
}

/// Cuts node 2 off from node 1 once it has replayed everything node 1 wrote so far: freezes
/// (SIGSTOP) the walsender that streams to it, so nothing node 1 writes from then on reaches it (a
/// frozen walsender sends nothing, and dies frozen with its node). Returns when it was stopped.
async fn cut_off_the_replica(ha: &HaCluster) -> Instant {
    ha.await_replay(0, 1).await;
    let walsender = ha.walsender_pid(0, 1).await;
    assert!(
        procs::signal(walsender, libc::SIGSTOP),
        "SIGSTOP the walsender"
    );
    assert!(procs::wait_stopped(walsender, LIMIT), "the walsender stops");
    Instant::now()
}

/// Times of one failover.
struct Failover {
    /// The last SIGKILL to the old leader's node.
    killed: Instant,
    /// The new leader's Patroni first reported it as primary.
    patroni_primary: Instant,
    /// The new primary first accepted a write.
    writable: Instant,
    /// The new primary's timeline.
    timeline: u32,
    /// A fresh connection through the multi-host connection string first succeeded.
    connectable: Instant,
    /// The errors of the connection attempts before that (one every 100 ms), with how often each
    /// occurred.
    connect_errors: Vec<(usize, String)>,
}

impl Failover {
    fn describe(&self) -> String {
        let errors: Vec<String> = self
            .connect_errors
            .iter()
            .map(|(n, e)| format!("{n}x \"{e}\""))
            .collect();
        format!(
            "SIGKILL of the leader's node -> new primary accepts writes {:.1} s, \
             Patroni reports it primary {:.1} s, a read-write connection through the multi-host \
             string succeeds {:.1} s; timeline {}; connection attempts before that: {}",
            secs(self.writable - self.killed),
            secs(self.patroni_primary - self.killed),
            secs(self.connectable - self.killed),
            self.timeline,
            errors.join(", ")
        )
    }
}

/// Crashes node 1 (the leader) and waits for Patroni to promote node 2 by itself.
async fn fail_over(ha: &mut HaCluster) -> Failover {
    assert!(
        tokio::task::block_in_place(|| ha.node(0).is_primary()),
        "node1 is the leader before the crash"
    );
    let killed = tokio::task::block_in_place(|| ha.kill_node(0));
    let probe = tokio::spawn(probe_connections(ha.conninfo()));
    let (patroni_primary, writable) = ha.await_leader(1).await;
    let timeline = ha.timeline(1).await;
    let (connectable, connect_errors) = probe.await.expect("the connection probe");
    Failover {
        killed,
        patroni_primary,
        writable,
        timeline,
        connectable,
        connect_errors,
    }
}

/// Tries a fresh connection through `conninfo` every 100 ms until one succeeds (at most
/// [`FAILOVER_LIMIT`]); returns when, and the distinct errors before (each with its causes).
async fn probe_connections(conninfo: String) -> (Instant, Vec<(usize, String)>) {
    let deadline = Instant::now() + FAILOVER_LIMIT;
    let mut errors: BTreeMap<String, usize> = BTreeMap::new();
    loop {
        match tokio_postgres::connect(&conninfo, NoTls).await {
            Ok(_) => break,
            Err(e) => {
                let mut text = e.to_string();
                let mut cause = std::error::Error::source(&e);
                while let Some(c) = cause {
                    let c_text = c.to_string();
                    if !text.contains(&c_text) {
                        text = format!("{text}: {c_text}");
                    }
                    cause = c.source();
                }
                *errors.entry(text).or_default() += 1;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no read-write connection within {FAILOVER_LIMIT:?}: {errors:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut errors: Vec<(usize, String)> = errors.into_iter().map(|(e, n)| (n, e)).collect();
    errors.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    (Instant::now(), errors)
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// What the keepalive of a lease of `ttl` went through around the failover, as one line.
fn describe_renewals(key: &str, ttl: Duration, fo: &Failover) -> String {
    let r = Renewals::of(key);
    let last_before = r.confirmed.iter().copied().filter(|&c| c < fo.killed).max();
    let first_after = r.confirmed_after(fo.killed).first().copied();
    let gap = match (last_before, first_after) {
        (Some(b), Some(a)) => format!("{:.1} s", secs(a - b)),
        _ => "-".to_owned(),
    };
    let first = first_after.map_or("-".to_owned(), |a| {
        format!(
            "{:.1} s after the kill, {:.1} s after the new primary accepted writes",
            secs(a - fo.killed),
            secs(a.saturating_duration_since(fo.writable))
        )
    });
    let errors: Vec<String> = r
        .error_kinds()
        .into_iter()
        .map(|(n, e)| format!("{n}x \"{e}\""))
        .collect();
    format!(
        "{key}: {} failed renewals ({}); first confirmed renewal after the crash {first}; \
         longest time without a confirmed renewal {gap} (ttl {} s, renewals every {:.1} s)",
        r.failed.len(),
        if errors.is_empty() {
            "none".to_owned()
        } else {
            errors.join(", ")
        },
        ttl.as_secs(),
        secs(ttl.mul_f64(RENEW_FRACTION))
    )
}

/// H1: with synchronous replication (Patroni's `synchronous_mode`), a lease held across an
/// automatic failover stays held: the client keeps renewing it on the new primary at the same
/// epoch, never reports it lost, and another owner is refused the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs etcd and Patroni: run scripts/ha-test.sh"]
async fn a_lease_held_across_an_automatic_failover_with_synchronous_replication_stays_held() {
    observe::install();
    let mut ha = HaCluster::start(Options { synchronous: true }).await;
    install(&ha).await;
    let key = "ha/sync/job";
    let a = client(&ha, "holder-a").await;
    let lease = a
        .try_acquire(key, TTL)
        .await
        .expect("acquire")
        .expect("a free key is granted");
    let epoch = lease.epoch();

    // The synchronous standby had the grant before the client heard of it.
    let standby = ha.owner_session(1).await;
    let seen = pglease::inspect(&standby, key)
        .await
        .expect("inspect on the standby")
        .expect("the standby has the key");
    assert!(seen.held, "the standby sees the key held");
    assert_eq!(seen.owner.as_deref(), Some("holder-a"));
    assert_eq!(seen.epoch, epoch);
    drop(standby);
    await_renewals(&lease, Instant::now(), 1, LIMIT).await;

    let fo = fail_over(&mut ha).await;
    assert_eq!(fo.timeline, 2, "one promotion");

    // Renewed on the new primary, twice, without ever being lost.
    await_renewals(&lease, fo.killed, 2, FAILOVER_LIMIT).await;
    assert_eq!(lease.epoch(), epoch, "the epoch never changes");
    let s = ha.owner_session(1).await;
    let now = pglease::inspect(&s, key)
        .await
        .expect("inspect on the new primary")
        .expect("the new primary has the key");
    assert!(now.held, "held on the new primary");
    assert_eq!(now.owner.as_deref(), Some("holder-a"));
    assert_eq!(now.epoch, epoch, "the same epoch on the new primary");

    // Another owner is refused; the holder's guarded write passes the fence, the other's does not.
    let b = client(&ha, "holder-b").await;
    assert!(
        b.try_acquire(key, TTL).await.expect("acquire").is_none(),
        "another owner is refused the held key on the new primary"
    );
    guarded_write(&ha, key, "holder-a", epoch)
        .await
        .expect("the holder's guarded write on the new primary");
    assert_eq!(
        guarded_write(&ha, key, "holder-b", epoch).await,
        Err("LE001".to_owned())
    );

    let renewals = Renewals::of(key);
    assert!(renewals.lost.is_none(), "never reported lost");
    eprintln!("H1 (synchronous_mode): {}", fo.describe());
    eprintln!(
        "H1 (synchronous_mode): {}",
        describe_renewals(key, TTL, &fo)
    );
    lease.release().await.expect("release on the new primary");
    a.shutdown().await;
    b.shutdown().await;
}

/// H2: with asynchronous replication (Patroni's default), a failover loses the grants the standby
/// never received; still no epoch goes back, `lease.fence` on the new primary accepts only the
/// successor's epoch, and the holder whose grant was lost is told by its keepalive (its renewal is
/// refused there) before its own deadline. A grant the standby had survives.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs etcd and Patroni: run scripts/ha-test.sh"]
async fn an_asynchronous_failover_that_loses_a_grant_sends_no_epoch_back_and_tells_its_holder() {
    observe::install();
    let mut ha = HaCluster::start(Options { synchronous: false }).await;
    install(&ha).await;
    let (kept, lost, history, fresh) = (
        "ha/async/kept",
        "ha/async/lost",
        "ha/async/history",
        "ha/async/fresh",
    );
    let a = client(&ha, "holder-a").await;
    // Every epoch holder-a was told on timeline 1.
    let mut told: Vec<(&str, i64)> = Vec::new();

    // Replicated: `history` granted and released twice, `kept` held.
    for _ in 0..2 {
        let l = a
            .try_acquire(history, TTL)
            .await
            .expect("acquire")
            .expect("granted");
        told.push((history, l.epoch()));
        l.release().await.expect("release");
    }
    let kept_lease = a
        .try_acquire(kept, TTL)
        .await
        .expect("acquire")
        .expect("granted");
    told.push((kept, kept_lease.epoch()));
    let cut = cut_off_the_replica(&ha).await;

    // Acknowledged on the leader only: `history` granted (epoch 5) and released, `lost` granted,
    // and a renewal of `kept`.
    let l = a
        .try_acquire(history, TTL)
        .await
        .expect("acquire")
        .expect("granted");
    told.push((history, l.epoch()));
    l.release().await.expect("release");
    let lost_lease = a
        .try_acquire(lost, TTL)
        .await
        .expect("acquire")
        .expect("granted");
    let lost_epoch = lost_lease.epoch();
    told.push((lost, lost_epoch));
    await_renewals(&kept_lease, cut, 1, LIMIT).await;
    let client_kept_expiry = kept_lease.expires_at().expect("held");

    // The replica has none of it.
    let standby = ha.owner_session(1).await;
    assert!(
        pglease::inspect(&standby, lost)
            .await
            .expect("inspect")
            .is_none(),
        "the standby never heard of {lost}"
    );
    let h = pglease::inspect(&standby, history)
        .await
        .expect("inspect")
        .expect("the standby has history's first grants");
    assert!(!h.held);
    assert_eq!(
        h.epoch,
        told[1].1 + 1,
        "the standby's history of the key ends with the second release"
    );
    let standby_kept = pglease::inspect(&standby, kept)
        .await
        .expect("inspect")
        .expect("the standby has kept");
    assert_eq!(standby_kept.epoch, kept_lease.epoch());
    let standby_kept_expiry = standby_kept.expires_at.expect("held");
    drop(standby);
    let max_told = told.iter().map(|&(_, e)| e).max().expect("epochs");

    let fo = fail_over(&mut ha).await;
    assert_eq!(fo.timeline, 2, "one promotion");
    let band = i64::from(fo.timeline - 1) * BAND;

    // The new primary lacks the grants its standby never received.
    let s = ha.owner_session(1).await;
    assert!(
        pglease::inspect(&s, lost).await.expect("inspect").is_none(),
        "{lost}'s grant was lost"
    );

    // A successor at once, racing the old holder's keepalive.
    let b = client(&ha, "holder-b").await;
    let successor = b
        .try_acquire(lost, TTL)
        .await
        .expect("acquire")
        .expect("the lost key is free on the new primary");
    let successor_granted = Instant::now();
    assert!(
        successor.epoch() > max_told && successor.epoch() >= band,
        "successor epoch {} above every epoch told before ({max_told}) and in the band {band}",
        successor.epoch()
    );
    let old_holder_told = lost_lease.ended().is_some();

    // Guards on the new primary accept only the successor's epoch.
    let refused = guarded_write(&ha, lost, "holder-a", lost_epoch).await;
    assert!(
        matches!(
            refused.as_ref().map_err(String::as_str),
            Err("LE001" | "LE003")
        ),
        "the old holder's epoch is fenced off: {refused:?}"
    );
    guarded_write(&ha, lost, "holder-b", successor.epoch())
        .await
        .expect("the successor's guarded write");

    // The old holder is told by its keepalive: its renewal was refused, not merely late.
    let reason = tokio::time::timeout(FAILOVER_LIMIT, lost_lease.lost())
        .await
        .expect("the old holder learns of the loss");
    assert_eq!(reason, LostReason::NotOwner, "refused by the new primary");
    // (The event is logged right after the loss is signalled.)
    poll_for("the `lease lost` event", LIMIT, || async {
        Renewals::of(lost).lost.is_some()
    })
    .await;
    let (told_at, _) = Renewals::of(lost).lost.expect("a `lease lost` event");

    // Every grant after the failover is above every epoch told before.
    for key in [history, fresh] {
        let l = b
            .try_acquire(key, TTL)
            .await
            .expect("acquire")
            .expect("free");
        assert!(
            l.epoch() > max_told && l.epoch() >= band,
            "{key}: epoch {} after the failover, told {max_told} before",
            l.epoch()
        );
        l.release().await.expect("release");
    }

    // The grant the standby had survives: still renewed, same epoch, refused to another owner.
    await_renewals(&kept_lease, fo.killed, 1, FAILOVER_LIMIT).await;
    let k = pglease::inspect(&s, kept)
        .await
        .expect("inspect")
        .expect("kept");
    assert!(k.held);
    assert_eq!(k.owner.as_deref(), Some("holder-a"));
    assert_eq!(k.epoch, kept_lease.epoch());
    assert!(b.try_acquire(kept, TTL).await.expect("acquire").is_none());
    assert!(
        Renewals::of(kept).lost.is_none(),
        "kept never reported lost"
    );

    eprintln!("H2 (asynchronous): {}", fo.describe());
    eprintln!(
        "H2 (asynchronous): {lost}: granted at epoch {lost_epoch} on timeline 1, lost; the \
         successor was granted epoch {} ({:.1} s after the new primary accepted writes), the \
         old holder was told ({reason}) {:.1} s after the new primary accepted writes, {} the \
         successor's grant",
        successor.epoch(),
        secs(successor_granted - fo.writable),
        secs(told_at.saturating_duration_since(fo.writable)),
        if old_holder_told { "before" } else { "after" }
    );
    eprintln!("H2 (asynchronous): {}", describe_renewals(lost, TTL, &fo));
    eprintln!("H2 (asynchronous): {}", describe_renewals(kept, TTL, &fo));
    eprintln!(
        "H2 (asynchronous): {kept}: the new primary's expiry was {:.1} s behind the one the \
         client was last told (renewals the standby never received)",
        secs(
            client_kept_expiry
                .duration_since(standby_kept_expiry)
                .unwrap_or_default()
        )
    );
    successor.release().await.expect("release");
    kept_lease.release().await.expect("release");
    a.shutdown().await;
    b.shutdown().await;
}

/// The ttl cap of H3 (`lease.configure`'s `max_ttl`), also its leases' ttl.
const CAPPED_TTL: Duration = Duration::from_secs(30);
/// The failover quarantine of H3: at least the cap, as pg_lease requires.
const QUARANTINE: Duration = Duration::from_secs(35);

/// H3: with asynchronous replication and the failover quarantine on (pg_lease 0.7.0,
/// `lease.configure(max_ttl, failover_quarantine)`), a failover that loses a grant hands the key to
/// no successor until the old holder's keepalive has reported the loss: the new primary refuses
/// every new grant (LE004) for the quarantine, which starts with the first acquire on its timeline.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs etcd and Patroni: run scripts/ha-test.sh"]
async fn with_the_failover_quarantine_no_successor_is_granted_before_the_old_holder_knows() {
    observe::install();
    let mut ha = HaCluster::start(Options { synchronous: false }).await;
    install(&ha).await;
    let owner = ha.owner_session(0).await;
    let configured = pglease::configure(&owner, Some(CAPPED_TTL), Some(QUARANTINE))
        .await
        .expect("lease.configure as the installing role");
    assert_eq!(configured.failover_quarantine, Some(QUARANTINE));
    assert_eq!(
        configured.quarantine_until, None,
        "no quarantine on timeline 1"
    );
    drop(owner);
    let key = "ha/quarantine/lost";
    let a = client(&ha, "holder-a").await;

    // The configuration reaches the replica; the grant does not.
    cut_off_the_replica(&ha).await;
    let lost = a
        .try_acquire(key, CAPPED_TTL)
        .await
        .expect("acquire")
        .expect("granted");
    let lost_epoch = lost.epoch();
    let standby = ha.owner_session(1).await;
    assert!(
        pglease::inspect(&standby, key)
            .await
            .expect("inspect")
            .is_none(),
        "the standby never heard of {key}"
    );
    drop(standby);

    let fo = fail_over(&mut ha).await;
    assert_eq!(fo.timeline, 2, "one promotion");

    // A successor asks at once and keeps asking (every 250 ms) until it is granted the key.
    let b = client(&ha, "holder-b").await;
    let deadline = Instant::now() + QUARANTINE + FAILOVER_LIMIT;
    let mut refusals: Vec<Instant> = Vec::new();
    let successor = loop {
        match b.try_acquire(key, CAPPED_TTL).await {
            Ok(Some(lease)) => break lease,
            Ok(None) => panic!("{key} is held on the new primary: its grant was not lost"),
            Err(e) if e.is_quarantined() => refusals.push(Instant::now()),
            Err(e) => panic!("the successor's acquire failed otherwise: {e}"),
        }
        assert!(
            Instant::now() < deadline,
            "no grant within the quarantine and {FAILOVER_LIMIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let granted = Instant::now();

    // By then the old holder had been told, by its own keepalive.
    let reason = lost
        .ended()
        .expect("the old holder was told before the successor's grant");
    assert!(reason.is_loss(), "ended by a loss, not {reason}");
    poll_for("the `lease lost` event", LIMIT, || async {
        Renewals::of(key).lost.is_some()
    })
    .await;
    let (told_at, _) = Renewals::of(key).lost.expect("a `lease lost` event");
    assert!(told_at < granted, "told before the successor's grant");
    let first_refusal = *refusals
        .first()
        .expect("the successor was refused during the quarantine");
    let s = ha.owner_session(1).await;
    let configuration = pglease::configuration(&s)
        .await
        .expect("lease.configuration");
    assert_eq!(configuration.timeline, 2);
    assert!(
        configuration.quarantine_until.is_some(),
        "a quarantine began on timeline 2"
    );

    // And the usual: a new epoch above the lost one, fencing only for the successor.
    assert!(successor.epoch() > lost_epoch && successor.epoch() >= BAND);
    let refused = guarded_write(&ha, key, "holder-a", lost_epoch).await;
    assert!(
        matches!(
            refused.as_ref().map_err(String::as_str),
            Err("LE001" | "LE003")
        ),
        "the old holder's epoch is fenced off: {refused:?}"
    );
    guarded_write(&ha, key, "holder-b", successor.epoch())
        .await
        .expect("the successor's guarded write");

    eprintln!("H3 (asynchronous, quarantine): {}", fo.describe());
    eprintln!(
        "H3 (asynchronous, quarantine {} s, max_ttl {} s): {key}: the old holder was told ({reason}) \
         {:.1} s after the new primary accepted writes; the successor was refused (LE004) {} times \
         from {:.1} s and granted epoch {} {:.1} s after the new primary accepted writes, {:.1} s \
         after the old holder was told",
        QUARANTINE.as_secs(),
        CAPPED_TTL.as_secs(),
        secs(told_at.saturating_duration_since(fo.writable)),
        refusals.len(),
        secs(first_refusal.saturating_duration_since(fo.writable)),
        successor.epoch(),
        secs(granted.saturating_duration_since(fo.writable)),
        secs(granted - told_at)
    );
    eprintln!(
        "H3 (asynchronous, quarantine): {}",
        describe_renewals(key, CAPPED_TTL, &fo)
    );
    successor.release().await.expect("release");
    a.shutdown().await;
    b.shutdown().await;
}
