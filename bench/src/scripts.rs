//! pgbench scripts of every workload variant. `:client_id` is pgbench's client number, so each
//! client of W1 has a private key; W2's clients share four keys.
//!
//! Every baseline performs the same row transition as the lease call it stands for, on a table
//! identical to `lease.leases` (see `server::create_baselines`), as one prepared statement.

use crate::server::SCHEMA;

/// A workload variant: a name, what it stands for, and its pgbench script.
#[derive(Clone, Debug)]
pub struct Variant {
    pub name: &'static str,
    pub what: &'static str,
    pub script: String,
}

pub const TTL: &str = "interval '30 seconds'";

/// W1 (cycle): one transaction of acquire + renew + release on a private key.
pub fn w1_lease() -> Variant {
    Variant {
        name: "lease",
        what: "lease.acquire + lease.renew + lease.release in one transaction",
        script: format!(
            "BEGIN;
SELECT epoch FROM lease.acquire('w1-' || :client_id, 'w1', {TTL}) \\gset
SELECT status FROM lease.renew('w1-' || :client_id, 'w1', :epoch, {TTL});
SELECT status FROM lease.release('w1-' || :client_id, 'w1', :epoch);
END;
"
        ),
    }
}

/// The grant as bare SQL: insert the key, or take over a FREE or LAPSED row with the next epoch.
fn floor_grant(table: &str, key: &str, owner: &str, ttl: &str, returning: &str) -> String {
    format!(
        "INSERT INTO {SCHEMA}.{table} AS l (key, owner, epoch, expires_at)
     VALUES ({key}, {owner}, 1, clock_timestamp() + {ttl})
ON CONFLICT (key) DO UPDATE
        SET owner = excluded.owner, epoch = l.epoch + 1, expires_at = excluded.expires_at,
            waiting = false
      WHERE l.owner IS NULL OR l.expires_at <= clock_timestamp()
  RETURNING {returning}"
    )
}

/// Renew as bare SQL.
fn floor_renew(table: &str, key: &str, owner: &str, epoch: &str, ttl: &str) -> String {
    format!(
        "UPDATE {SCHEMA}.{table} AS l SET expires_at = clock_timestamp() + {ttl}
 WHERE l.key = {key} AND l.owner = {owner} AND l.epoch = {epoch}
   AND l.expires_at > clock_timestamp()"
    )
}

pub fn w1_floor() -> Variant {
    let key = "'w1-' || :client_id";
    Variant {
        name: "floor",
        what: "the same three row transitions as bare prepared SQL (INSERT .. ON CONFLICT DO UPDATE .. WHERE; UPDATE .. WHERE; UPDATE .. WHERE) on an identical table",
        script: format!(
            "BEGIN;
{} \\gset
{};
UPDATE {SCHEMA}.floor AS l SET owner = NULL, epoch = l.epoch + 1, expires_at = clock_timestamp()
 WHERE l.key = {key} AND l.owner = 'w1' AND l.epoch = :epoch AND l.expires_at > clock_timestamp();
END;
",
            floor_grant("floor", key, "'w1'", TTL, "l.epoch"),
            floor_renew("floor", key, "'w1'", ":epoch", TTL),
        ),
    }
}

pub fn w1_rowver() -> Variant {
    let key = "'w1-' || :client_id";
    Variant {
        name: "rowver",
        what: "row-version lock in the style of the Go library that polls: insert-or-take a row whose record_version_number is NULL, heartbeat rewrites the version, release NULLs it (no server-side expiry, no epoch)",
        script: format!(
            "\\set rvn random(1, 9000000000000000000)
\\set rvn2 random(1, 9000000000000000000)
BEGIN;
INSERT INTO {SCHEMA}.locks AS l (name, record_version_number, owner) VALUES ({key}, :rvn, 'w1')
ON CONFLICT (name) DO UPDATE
        SET record_version_number = excluded.record_version_number, owner = excluded.owner
      WHERE l.record_version_number IS NULL;
UPDATE {SCHEMA}.locks SET record_version_number = :rvn2
 WHERE name = {key} AND record_version_number = :rvn;
UPDATE {SCHEMA}.locks SET record_version_number = NULL
 WHERE name = {key} AND record_version_number = :rvn2;
END;
"
        ),
    }
}

pub fn w1_advisory() -> Variant {
    Variant {
        name: "advisory",
        what: "pg_try_advisory_lock + pg_advisory_unlock in one transaction (session lock: no heartbeat, no expiry, no epoch, nothing written)",
        script: "BEGIN;
SELECT pg_try_advisory_lock(1000 + :client_id);
SELECT pg_advisory_unlock(1000 + :client_id);
END;
"
        .into(),
    }
}

pub fn w1_txn() -> Variant {
    Variant {
        name: "select1-txn",
        what: "BEGIN; SELECT 1 x3; END: the same five round trips with no work (the protocol floor of the cycle)",
        script: "BEGIN;\nSELECT 1;\nSELECT 1;\nSELECT 1;\nEND;\n".into(),
    }
}

/// W2 (contend): one acquire attempt on one of four shared keys, autocommit. With a 30 s ttl the
/// keys stay held, so nearly every attempt is a refusal (or, by the holder, an idempotent
/// re-acquire).
pub fn w2_lease() -> Variant {
    Variant {
        name: "lease",
        what: "lease.acquire on one of 4 shared keys (ttl 30 s: nearly all refusals)",
        script: format!(
            "\\set k random(1, 4)
SELECT acquired FROM lease.acquire('w2-' || :k, 'c' || :client_id, {TTL});
"
        ),
    }
}

pub fn w2_floor() -> Variant {
    Variant {
        name: "floor",
        what: "the grant as bare SQL (INSERT .. ON CONFLICT DO UPDATE .. WHERE) on one of 4 shared keys",
        script: format!(
            "\\set k random(1, 4)
{};
",
            floor_grant("floor", "'w2-' || :k", "'c' || :client_id", TTL, "l.epoch")
        ),
    }
}

pub fn w2_advisory() -> Variant {
    Variant {
        name: "advisory",
        what: "pg_try_advisory_xact_lock on one of 4 shared keys (released at commit)",
        script: "\\set k random(1, 4)\nSELECT pg_try_advisory_xact_lock(2000 + :k);\n".into(),
    }
}

pub fn w2_select1() -> Variant {
    Variant {
        name: "select1",
        what: "SELECT 1 (the per-transaction floor: one round trip, no work)",
        script: "SELECT 1;\n".into(),
    }
}

/// Renew storm: renew one of `n` held keys (all at epoch `epoch`) with a 1 h ttl.
pub fn storm_lease(prefix: &str, n: u64, epoch: i64) -> Variant {
    Variant {
        name: "lease",
        what: "lease.renew of a random held key",
        script: format!(
            "\\set k random(1, {n})
SELECT status FROM lease.renew('{prefix}' || :k, 'storm', {epoch}, interval '1 hour');
"
        ),
    }
}

pub fn storm_floor(prefix: &str, n: u64, epoch: i64) -> Variant {
    Variant {
        name: "floor",
        what: "the renew as bare SQL (UPDATE .. WHERE) on an identical table",
        script: format!(
            "\\set k random(1, {n})
{};
",
            floor_renew(
                "storm_floor",
                &format!("'{prefix}' || :k"),
                "'storm'",
                &epoch.to_string(),
                "interval '1 hour'"
            )
        ),
    }
}

/// Key scale: a grant of a random key among `n` preloaded FREE rows. The 1 ms ttl lets the next
/// visit of the key (many milliseconds later) take it over again, so every call is a grant.
pub fn scale_lease(n: u64) -> Variant {
    Variant {
        name: "lease",
        what: "lease.acquire (a grant) of a random key among the preloaded ones",
        script: format!(
            "\\set k random(1, {n})
SELECT acquired FROM lease.acquire('scale-' || :k, 'o' || :client_id, interval '1 millisecond');
"
        ),
    }
}

pub fn scale_floor(n: u64) -> Variant {
    Variant {
        name: "floor",
        what: "the grant as bare SQL on an identical preloaded table",
        script: format!(
            "\\set k random(1, {n})
{};
",
            floor_grant(
                "scale_floor",
                "'scale-' || :k",
                "'o' || :client_id",
                "interval '1 millisecond'",
                "l.epoch"
            )
        ),
    }
}
