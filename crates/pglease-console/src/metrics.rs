//! `GET /metrics`: Prometheus metrics (OpenMetrics text, by the `prometheus-client` crate), read
//! fresh from the database at every scrape: nothing is cached between scrapes. The names are an
//! interface (docs/CONSOLE.md lists them). Labels are bounded: per queue and partition, per
//! semaphore (at most 1000), per configured election, and per key only under the prefixes given
//! with `--metrics-key-prefix` (at most 1000 keys each). A scrape the database does not answer
//! gets HTTP 503, which Prometheus records as a failed scrape (`up` 0).

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use axum::extract::State as Extract;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::State;
use crate::db::DbError;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabel {
    queue: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PartitionLabels {
    queue: String,
    partition: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SemaphoreLabel {
    semaphore: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ElectionLabel {
    election: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KeyLabel {
    key: String,
}

type FloatGauge = Gauge<f64, AtomicU64>;

fn gauge(registry: &mut Registry, name: &str, help: &str, value: i64) {
    let g: Gauge = Gauge::default();
    g.set(value);
    registry.register(name, help, g);
}

fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Reads everything the metrics show and encodes it.
///
/// The reads run at once, each on a connection of its own: a scrape takes about as long as its
/// slowest read (the semaphores' or the queues', ~100 ms each at 100 000 keys and 1 000 000
/// messages), not their sum.
async fn render(state: &State) -> Result<String, DbError> {
    let mut r = Registry::default();
    let elections = async {
        if state.elections.is_empty() {
            Ok(Vec::new())
        } else {
            state.db.elections(&state.elections, 1000).await
        }
    };
    let (counts, recorded, semaphores, elections, queues) = tokio::try_join!(
        state.db.counts(state.expiring_within),
        state.db.grants_recorded(),
        state.db.semaphores(1000),
        elections,
        state.db.queues(),
    )?;
    gauge(
        &mut r,
        "pglease_leases_held",
        "Keys held now (by the server clock).",
        count(counts.held),
    );
    gauge(
        &mut r,
        "pglease_leases_lapsed",
        "Keys whose grant expired without a release (not yet taken again).",
        count(counts.lapsed),
    );
    gauge(
        &mut r,
        "pglease_leases_free",
        "Keys released, force-released or never granted.",
        count(counts.free),
    );
    gauge(
        &mut r,
        "pglease_leases_expiring",
        &format!(
            "Held keys that lapse within {} unless renewed (pglease ui --expiring-within).",
            humantime::format_duration(state.expiring_within)
        ),
        count(counts.expiring),
    );
    gauge(
        &mut r,
        "pglease_leases_waited_for",
        "Held or lapsed keys someone waits for.",
        count(counts.waiting),
    );

    // Grants since the console started: the history's inserts now less those at the first
    // scrape (a statistics reset starts the count again).
    let grants = {
        let mut baseline = state
            .grants_baseline
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let base = *baseline.get_or_insert(recorded);
        if recorded < base {
            *baseline = Some(recorded);
            0
        } else {
            recorded - base
        }
    };
    let granted: Counter = Counter::default();
    granted.inc_by(u64::try_from(grants).unwrap_or(0));
    r.register(
        "pglease_lease_grants",
        "Grants recorded in the history since the console's first scrape (0 while the history \
         is off; rolled-back grants count too).",
        granted,
    );

    let holders = Family::<SemaphoreLabel, Gauge>::default();
    let slots = Family::<SemaphoreLabel, Gauge>::default();
    for s in semaphores {
        let l = SemaphoreLabel { semaphore: s.name };
        holders.get_or_create(&l).set(count(s.holders));
        slots.get_or_create(&l).set(i64::from(s.slots));
    }
    r.register(
        "pglease_semaphore_holders",
        "Slots of the semaphore held now.",
        holders,
    );
    r.register(
        "pglease_semaphore_slots",
        "Slots of the semaphore that exist (the highest slot granted; the limit is each caller's).",
        slots,
    );

    if !state.elections.is_empty() {
        let leader = Family::<ElectionLabel, Gauge>::default();
        let term = Family::<ElectionLabel, Gauge>::default();
        for e in elections {
            let l = ElectionLabel { election: e.name };
            leader.get_or_create(&l).set(i64::from(e.leader.is_some()));
            if let Some(t) = e.term {
                term.get_or_create(&l).set(t);
            }
        }
        r.register(
            "pglease_election_has_leader",
            "1 if someone leads the election now.",
            leader,
        );
        r.register(
            "pglease_election_term",
            "The leader's term (its epoch).",
            term,
        );
    }

    let backlog = Family::<PartitionLabels, Gauge>::default();
    let oldest = Family::<PartitionLabels, FloatGauge>::default();
    let in_flight = Family::<PartitionLabels, Gauge>::default();
    let held_back = Family::<PartitionLabels, Gauge>::default();
    let owned = Family::<PartitionLabels, Gauge>::default();
    let acked = Family::<PartitionLabels, Counter>::default();
    let dead = Family::<QueueLabel, Gauge>::default();
    let unowned = Family::<QueueLabel, Gauge>::default();
    for q in queues {
        let ql = QueueLabel {
            queue: q.name.clone(),
        };
        dead.get_or_create(&ql).set(q.dead_letters);
        if let Some(n) = q.unowned {
            unowned.get_or_create(&ql).set(n);
        }
        for p in &q.partitions {
            let l = PartitionLabels {
                queue: q.name.clone(),
                partition: p.partition.to_string(),
            };
            backlog.get_or_create(&l).set(p.backlog);
            in_flight.get_or_create(&l).set(p.batch_size);
            held_back.get_or_create(&l).set(p.held_back_keys);
            if q.holders_visible {
                owned.get_or_create(&l).set(i64::from(p.owner.is_some()));
            }
            oldest
                .get_or_create(&l)
                .set(p.oldest_age_ms.map_or(0.0, |ms| ms.max(0) as f64 / 1000.0));
            if let Some(n) = p.acked {
                acked
                    .get_or_create(&l)
                    .inc_by(u64::try_from(n).unwrap_or(0));
            }
        }
    }
    r.register(
        "pglease_queue_backlog",
        "Messages not yet acked, outside the open batch.",
        backlog,
    );
    r.register(
        "pglease_queue_oldest_age_seconds",
        "Age of the oldest pending message of the partition (0 if none).",
        oldest,
    );
    r.register(
        "pglease_queue_in_flight",
        "Messages in the partition's open batch.",
        in_flight,
    );
    r.register(
        "pglease_queue_held_back_keys",
        "Keys held back by a failed message awaiting its retry.",
        held_back,
    );
    r.register(
        "pglease_queue_partition_owned",
        "1 if a consumer holds the partition.",
        owned,
    );
    r.register(
        "pglease_queue_acked",
        "Messages acked in the partition.",
        acked,
    );
    r.register(
        "pglease_queue_dead_letters",
        "Dead letters of the queue.",
        dead,
    );
    r.register(
        "pglease_queue_partitions_unowned",
        "Partitions of the queue that no consumer holds.",
        unowned,
    );

    if !state.metric_key_prefixes.is_empty() {
        let expires = Family::<KeyLabel, FloatGauge>::default();
        let epoch = Family::<KeyLabel, Gauge>::default();
        for prefix in &state.metric_key_prefixes {
            let q = pglease::BrowseQuery::new().prefix(prefix).limit(1000);
            let page = state.db.leases(&q, state.expiring_within).await?;
            for l in page.items {
                let label = KeyLabel { key: l.key };
                epoch.get_or_create(&label).set(l.epoch);
                if l.state == "held" {
                    let secs = l.expires_in_ms.unwrap_or(0) as f64 / 1000.0;
                    expires.get_or_create(&label).set(secs);
                }
            }
        }
        r.register(
            "pglease_lease_expires_in_seconds",
            "Seconds until the held key lapses unless renewed (keys under --metrics-key-prefix).",
            expires,
        );
        r.register(
            "pglease_lease_epoch",
            "The key's epoch (keys under --metrics-key-prefix).",
            epoch,
        );
    }

    let mut out = String::new();
    encode(&mut out, &r).map_err(|e| DbError::Other(format!("encoding the metrics: {e}")))?;
    Ok(out)
}

pub async fn scrape(Extract(state): Extract<Arc<State>>) -> Response {
    match render(&state).await {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("pglease metrics: {e}\n"),
        )
            .into_response(),
    }
}
