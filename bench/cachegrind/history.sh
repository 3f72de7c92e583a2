#!/bin/bash
# The history of grants (pg_lease 0.9.0, docs/BENCHMARKS.md "History of grants"): how much
# lease.grant_history grows per grant, and what lease.purge costs with 1M ended grants to remove while
# other keys are granted and released. Sizes and times, so the postmaster runs WITHOUT valgrind
# (PLAIN=1 server.sh: the same private mirror and cluster as run.sh, default settings but
# max_connections = 60). Run as root on a machine with Debian's PostgreSQL (PG_BIN) and pgbench:
#
#   bench/cachegrind/history.sh > history.txt        # about 3 minutes on 2 shared vCPUs
#   PARTS=purge RATE=0 ROUNDS=3 bench/cachegrind/history.sh    # the purge alone, unthrottled traffic
#
# Growth (database hg, the non-superuser role `bench` installs pg_lease and makes every grant):
#   new keys   one statement: lease.acquire on GRANTS (default 100 000) distinct new keys
#              ('job-0000001', owner 'worker-01', no data): first grants, prior_* NULL;
#   regrants   10 000 keys created and released first, then GRANTS transactions
#              `BEGIN; acquire; release; END` of a random one of them (pgbench, 2 clients on
#              disjoint halves, synchronous_commit=off): every grant takes a FREE key, as a key in
#              use does (its row carries how the grant before ended).
#   Prints pg_relation_size (heap), pg_indexes_size and pg_total_relation_size of lease.grant_history
#   before and after, divided by the grants made (and checks one row per grant).
# Purge (a database per round, ROUNDS default 2):
#   1. 1000 traffic keys ('hot-0001'..) created and released by `bench`.
#   2. As the superuser, OLD_KEYS x (OLD_GRANTS + 1) synthetic history rows (default 10 000 x 101)
#      shaped like the rows of regrants (same columns filled, same lengths) with granted_at between 60
#      and 43 days ago, inserted in time order (keys shuffled within each 4-hour slot, as grants of
#      many keys interleave); VACUUM ANALYZE and CHECKPOINT, as for rows weeks old. With the default
#      retention (30 days; lease.settings stays empty, so the traffic runs acquire's short path)
#      purge must remove every grant of a key below its latest one: OLD_KEYS x OLD_GRANTS rows.
#   3. pgbench traffic for TRAFFIC seconds (default 60): 2 clients, BEGIN; acquire; release; END on
#      a random traffic key of the client's half, at RATE transactions/s in all (default 400, below
#      what the machine sustains, so the purge's share of the CPU shows as latency, not as a backlog
#      the clients never had; RATE=0: as fast as they can), synchronous_commit=off, per-transaction log.
#   4. After PURGE_AT seconds (default 20) `bench` runs SELECT lease.purge('365 days') (older_than
#      matters only for lease.leases rows; none is that old), timed with clock_timestamp().
#   5. Throughout, a sampler (a procedure committing every 20 ms) records pg_stat_activity of the
#      database's client backends (state, wait_event_type, wait_event) and the number of
#      ungranted pg_locks.
#   Prints per round the purge's time and result, the rows left, and for the traffic the windows
#   before the purge (from 5 s), during it, and after it: transactions/s, latency p50 / p99 / max
#   (pgbench's logged latency, which with a rate includes the schedule lag) and the sampler's counts
#   of traffic backends by wait event (Lock = a heavyweight lock wait).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
WORK=${WORK:-/tmp/pglease-history}
GRANTS=${GRANTS:-100000}
ROUNDS=${ROUNDS:-2}
OLD_KEYS=${OLD_KEYS:-10000}
OLD_GRANTS=${OLD_GRANTS:-100}
TRAFFIC=${TRAFFIC:-60}
PURGE_AT=${PURGE_AT:-20}
RATE=${RATE:-400}
PARTS=${PARTS:-growth purge}

PLAIN=1 . "$HERE/server.sh"
B="$PG_BIN/psql -h $S -U bench -v ON_ERROR_STOP=1 -q -At"
$P -d postgres -c "CREATE ROLE bench LOGIN"
echo "# $(date -u +%FT%TZ) $($P -d postgres -At -c 'SELECT version()')"
echo "# load average: $(cut -d' ' -f1-3 /proc/loadavg)"

sizes() { # database -> "heap indexes total rows"
    $P -d "$1" -At -F ' ' -c "SELECT pg_relation_size('lease.grant_history'), pg_indexes_size('lease.grant_history'),
                                      pg_total_relation_size('lease.grant_history'), count(*)
                                 FROM lease.grant_history"
}
per_grant() { # label grants before after
    local h0 i0 t0 r0 h1 i1 t1 r1
    read -r h0 i0 t0 r0 <<<"$3"; read -r h1 i1 t1 r1 <<<"$4"
    echo "growth $1: grants=$2 history_rows_added=$((r1 - r0)) heap_bytes_per_grant=$(( (h1 - h0) / $2 ))" \
         "index_bytes_per_grant=$(( (i1 - i0) / $2 )) total_bytes_per_grant=$(( (t1 - t0) / $2 ))" \
         "total_after=$t1"
}

# ---- Growth
if [[ " $PARTS " == *" growth "* ]]; then
$P -d postgres -c "CREATE DATABASE hg OWNER bench"
$B -d hg -c "CREATE EXTENSION pg_lease"
s0=$(sizes hg)
n=$($B -d hg -c "SELECT count(*) FROM generate_series(1, $GRANTS) AS i,
                        lease.acquire('job-' || lpad(i::text, 7, '0'), 'worker-01', interval '30 seconds') AS a
                  WHERE a.acquired")
[ "$n" = "$GRANTS" ] || { echo "new keys: $n grants of $GRANTS" >&2; exit 1; }
per_grant "new-keys" "$GRANTS" "$s0" "$(sizes hg)"

$B -d hg -c "SELECT count(*) FROM generate_series(1, 10000) AS i,
                    lease.acquire('rg-' || lpad(i::text, 7, '0'), 'worker-01', interval '30 seconds') AS a,
                    lease.release('rg-' || lpad(i::text, 7, '0'), 'worker-01', a.epoch) AS r
              WHERE r = 'ok'" | grep -qx 10000
cat > "$WORK/regrant.sql" <<'SQL'
\set k :client_id * 5000 + random(1, 5000)
BEGIN;
SELECT epoch FROM lease.acquire('rg-' || lpad(:k::text, 7, '0'), 'worker-01', interval '30 seconds') \gset
SELECT 1 / (status = 'ok')::int FROM lease.release('rg-' || lpad(:k::text, 7, '0'), 'worker-01', :epoch) AS status;
END;
SQL
chmod a+r "$WORK/regrant.sql"
s0=$(sizes hg)
PGOPTIONS='-c synchronous_commit=off' "$PG_BIN/pgbench" -n -h "$S" -U bench -M prepared -c 2 -j 2 \
    -t $((GRANTS / 2)) -f "$WORK/regrant.sql" hg > "$WORK/regrant.out"
grep -q "actually processed: $GRANTS/$GRANTS" "$WORK/regrant.out" || { cat "$WORK/regrant.out" >&2; exit 1; }
per_grant "regrants" "$GRANTS" "$s0" "$(sizes hg)"
echo "growth regrants: pgbench $(grep -E '^(tps|number of transactions actually)' "$WORK/regrant.out" | tr '\n' ' ')"
echo "growth row: $($P -d hg -At -c "SELECT 'new key: ' || pg_column_size(g.*) FROM lease.grant_history AS g
                                      WHERE key = 'job-0000001'")," \
     "$($P -d hg -At -c "SELECT 'regrant: ' || pg_column_size(g.*) FROM lease.grant_history AS g
                          WHERE key LIKE 'rg-%' AND prior_epoch IS NOT NULL LIMIT 1") bytes of tuple data"
fi

# ---- Purge
cat > "$WORK/traffic.sql" <<'SQL'
\set k :client_id * 500 + random(1, 500)
BEGIN;
SELECT epoch FROM lease.acquire('hot-' || lpad(:k::text, 4, '0'), 'worker-01', interval '30 seconds') \gset
SELECT 1 / (status = 'ok')::int FROM lease.release('hot-' || lpad(:k::text, 4, '0'), 'worker-01', :epoch) AS status;
END;
SQL
chmod a+r "$WORK/traffic.sql"
[[ " $PARTS " == *" purge "* ]] || exit 0
for round in $(seq "$ROUNDS"); do
    d=hp$round
    $P -d postgres -c "CREATE DATABASE $d OWNER bench"
    $B -d "$d" -c "CREATE EXTENSION pg_lease"
    $B -d "$d" -c "SELECT count(*) FROM generate_series(0, 999) AS i,
                          lease.acquire('hot-' || lpad(i::text, 4, '0'), 'worker-01', interval '30 seconds') AS a,
                          lease.release('hot-' || lpad(i::text, 4, '0'), 'worker-01', a.epoch) AS r
                    WHERE r = 'ok'" | grep -qx 1000
    t=$(date +%s.%N)
    $P -d "$d" -c "
        INSERT INTO lease.grant_history (key, epoch, owner, holder_role, granted_at, data,
                                         prior_epoch, prior_ended_at, prior_expires_at, prior_ended_by)
        SELECT key, 2 * e - 1, 'worker-01', 'bench', granted_at, NULL,
               CASE WHEN e > 1 THEN 2 * e - 3 END,
               CASE WHEN e > 1 THEN granted_at - interval '2 seconds' END,
               CASE WHEN e > 1 THEN granted_at + interval '28 seconds' END,
               CASE WHEN e > 1 THEN 'released' END
          FROM (SELECT 'old-' || lpad(k::text, 7, '0') AS key, e,
                       clock_timestamp() - interval '60 days' + (e - 1) * interval '4 hours'
                       + random() * interval '4 hours' AS granted_at
                  FROM generate_series(1, $OLD_GRANTS + 1) AS e, generate_series(1, $OLD_KEYS) AS k) AS g
         ORDER BY granted_at" \
        -c "VACUUM ANALYZE lease.grant_history" -c "CHECKPOINT"
    echo "round=$round build: $(sizes "$d") (heap indexes total rows) in $(awk "BEGIN { printf \"%.1f\", $(date +%s.%N) - $t }") s"
    $P -d "$d" -c "
        CREATE TABLE samples (at timestamptz, app text, pid int, state text, wait_event_type text,
                              wait_event text, ungranted bigint);
        CREATE PROCEDURE sample(seconds double precision) LANGUAGE plpgsql AS \$\$
        DECLARE t_end timestamptz := clock_timestamp() + seconds * interval '1 second';
        BEGIN
            WHILE clock_timestamp() < t_end LOOP
                INSERT INTO samples
                SELECT clock_timestamp(), a.application_name, a.pid, a.state, a.wait_event_type, a.wait_event,
                       (SELECT count(*) FROM pg_locks AS l WHERE NOT l.granted)
                  FROM pg_stat_activity AS a
                 WHERE a.datname = current_database() AND a.backend_type = 'client backend'
                   AND a.pid <> pg_backend_pid();
                COMMIT;
                PERFORM pg_sleep(0.02);
            END LOOP;
        END \$\$"
    rm -f "$WORK"/traffic.log*
    PGAPPNAME=sampler $P -d "$d" -c "CALL sample($TRAFFIC + 2)" &
    sampler=$!
    (cd "$WORK" && PGOPTIONS='-c synchronous_commit=off' "$PG_BIN/pgbench" -n -h "$S" -U bench -M prepared \
        -c 2 -j 2 $([ "$RATE" = 0 ] || echo -R "$RATE") -T "$TRAFFIC" -l --log-prefix=traffic.log -f traffic.sql "$d" > traffic.out) &
    traffic=$!
    sleep "$PURGE_AT"
    PGAPPNAME=purge $B -d "$d" -F ' ' -c "SELECT extract(epoch FROM clock_timestamp())" \
        -c "SELECT lease.purge('365 days')" -c "SELECT extract(epoch FROM clock_timestamp())" \
        | tr '\n' ' ' > "$WORK/purge.out"
    wait "$traffic"; wait "$sampler"
    read -r p0 purged p1 < "$WORK/purge.out" || true     # (no newline at the end)
    echo "round=$round purge: seconds=$(awk "BEGIN { printf \"%.2f\", $p1 - $p0 }") returned=$purged" \
         "left: $(sizes "$d") (heap indexes total rows), old rows left $($P -d "$d" -At -c \
         "SELECT count(*) FROM lease.grant_history WHERE key LIKE 'old-%'") (expected $OLD_KEYS)"
    echo "round=$round traffic: $(grep -E '^(tps|number of transactions actually|number of failed)' \
         "$WORK/traffic.out" | tr '\n' ' ')"
    $P -d "$d" -c "CREATE TABLE traffic (client int, txn int, lat_us bigint, script int, t_s bigint,
                                         t_us bigint, lag_us bigint)"
    cols="client, txn, lat_us, script, t_s, t_us$([ "$RATE" = 0 ] || echo ', lag_us')"
    for f in "$WORK"/traffic.log*; do $P -d "$d" -c "\\copy traffic ($cols) FROM '$f' WITH (DELIMITER ' ')"; done
    $P -d "$d" -At -F ' ' -c "
        WITH w(name, lo, hi) AS (
            VALUES ('before', (SELECT min(t_s + t_us / 1e6) FROM traffic) + 5, $p0::numeric),
                   ('during', $p0::numeric, $p1::numeric),
                   ('after', $p1::numeric, (SELECT max(t_s + t_us / 1e6) FROM traffic) - 1))
        SELECT 'round=$round window=' || w.name, 'seconds=' || round(w.hi - w.lo, 1),
               'tps=' || round(count(t.*) / (w.hi - w.lo)),
               'latency_us p50=' || percentile_disc(0.5) WITHIN GROUP (ORDER BY t.lat_us),
               'p99=' || percentile_disc(0.99) WITHIN GROUP (ORDER BY t.lat_us), 'max=' || max(t.lat_us),
               'lag_us p99=' || percentile_disc(0.99) WITHIN GROUP (ORDER BY t.lag_us),
               'traffic_samples=' || (SELECT count(*) FROM samples AS s WHERE s.app = 'pgbench'
                   AND extract(epoch FROM s.at) >= w.lo AND extract(epoch FROM s.at) < w.hi),
               'waits=' || coalesce((SELECT string_agg(x.k || ':' || x.n, ',' ORDER BY x.n DESC)
                   FROM (SELECT s.state || '/' || coalesce(s.wait_event_type || '.' || s.wait_event, 'cpu') AS k,
                                count(*) AS n
                           FROM samples AS s WHERE s.app = 'pgbench'
                            AND extract(epoch FROM s.at) >= w.lo AND extract(epoch FROM s.at) < w.hi
                          GROUP BY 1) AS x), '-'),
               'lock_waits=' || (SELECT count(*) FROM samples AS s WHERE s.app = 'pgbench' AND s.wait_event_type = 'Lock'
                   AND extract(epoch FROM s.at) >= w.lo AND extract(epoch FROM s.at) < w.hi),
               'ungranted_lock_samples=' || (SELECT count(DISTINCT s.at) FROM samples AS s WHERE s.ungranted > 0
                   AND extract(epoch FROM s.at) >= w.lo AND extract(epoch FROM s.at) < w.hi)
          FROM w LEFT JOIN traffic AS t ON t.t_s + t.t_us / 1e6 >= w.lo AND t.t_s + t.t_us / 1e6 < w.hi
         GROUP BY w.name, w.lo, w.hi ORDER BY w.lo"
    echo "round=$round purge backend: $($P -d "$d" -At -c "
        SELECT coalesce(string_agg(k || ':' || n, ',' ORDER BY n DESC), '-')
          FROM (SELECT coalesce(wait_event_type || '.' || wait_event, 'cpu') AS k, count(*) AS n
                  FROM samples WHERE app = 'purge' AND state = 'active' GROUP BY 1) AS x") (sampler counts)"
done
echo "# load average: $(cut -d' ' -f1-3 /proc/loadavg)"
