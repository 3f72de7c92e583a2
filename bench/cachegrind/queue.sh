#!/bin/bash
# Server instructions per transaction of pg_lease_queue releases (docs/BENCHMARKS.md, "Instruction
# counts"), with the current pg_lease: a send, a cycle of send + claim (the holder's repeated
# claim) + receive + ack, and a cycle that nacks the batch's first message before the ack (its keys
# drawn by pgbench from a fixed seed, so that every release runs the same calls). Run as root on a
# machine with Debian's PostgreSQL and valgrind. Also `batch` (a send_batch of 100 over 64 keys)
# and `batchcycle` (that batch, then a receive of 100 and its ack), per transaction; divide by 100
# for a message:
#
#   bench/cachegrind/queue.sh [VERSION...]        # default: 0.1.0 0.1.1 0.2.0 0.3.0
#   SCRIPTS="cycle nack" bench/cachegrind/queue.sh 0.1.1 0.2.0
#
# As run.sh: a private mirror of the installation with this tree's extension files, the postmaster
# under cachegrind as nobody, a fresh database per release, script and round (owner and CREATE
# EXTENSION by the non-superuser role `bench`, which creates the queue and so may use it), and per
# round and release the backends' instructions per transaction: the difference between runs of N1
# and N2 transactions, which cancels connection start-up.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
WORK=${WORK:-/tmp/pglease-cg-queue}
ROUNDS=${ROUNDS:-2}
VERSIONS=${*:-0.1.0 0.1.1 0.2.0 0.3.0}
SCRIPTS=${SCRIPTS:-send cycle nack}

. "$HERE/server.sh"
cat > "$WORK/send.sql" <<'SQL'
SELECT lease_queue.send('q', 'k' || (random() * 63)::int, '"payload"');
SQL
cat > "$WORK/cycle.sql" <<'SQL'
BEGIN;
SELECT lease_queue.send('q', 'k' || (random() * 63)::int, '"payload"');
SELECT epoch FROM lease_queue.claim('q', 0, 'c', '1 hour') \gset
SELECT batch_id FROM lease_queue.receive('q', 0, 'c', :epoch, 10) LIMIT 1 \gset
SELECT lease_queue.ack('q', 0, 'c', :epoch, :batch_id);
END;
SQL
cat > "$WORK/nack.sql" <<'SQL'
\set k random(0, 15)
BEGIN;
SELECT lease_queue.send('q', 'k' || :k, '"payload"');
SELECT epoch FROM lease_queue.claim('q', 0, 'c', '1 hour') \gset
SELECT batch_id, id FROM lease_queue.receive('q', 0, 'c', :epoch, 10) LIMIT 1 \gset
SELECT lease_queue.nack('q', 0, 'c', :epoch, :batch_id, :id);
SELECT lease_queue.ack('q', 0, 'c', :epoch, :batch_id);
END;
SQL
# send_batch of 100 messages over 64 keys, the keys of each batch drawn from the seed.
cat > "$WORK/batch.sql" <<'SQL'
\set k random(0, 63)
SELECT count(*) FROM lease_queue.send_batch('q',
    ARRAY(SELECT 'k' || ((:k + g * 37) % 64) FROM generate_series(1, 100) AS g),
    ARRAY(SELECT '"payload"'::jsonb FROM generate_series(1, 100) AS g));
SQL
# The batch end to end: that send_batch committed, then one consumer's receive of 100 and its ack.
cat > "$WORK/batchcycle.sql" <<'SQL'
\set k random(0, 63)
SELECT count(*) FROM lease_queue.send_batch('q',
    ARRAY(SELECT 'k' || ((:k + g * 37) % 64) FROM generate_series(1, 100) AS g),
    ARRAY(SELECT '"payload"'::jsonb FROM generate_series(1, 100) AS g));
SELECT epoch FROM lease_queue.claim('q', 0, 'c', '1 hour') \gset
SELECT batch_id FROM lease_queue.receive('q', 0, 'c', :epoch, 100) LIMIT 1 \gset
SELECT lease_queue.ack('q', 0, 'c', :epoch, :batch_id);
SQL
chmod a+r "$WORK"/*.sql
$P -d postgres -c "CREATE ROLE bench LOGIN"
# A fresh database per release, script and round: the queue's tables fill with dead versions of acked
# messages as a run goes on, which moves the counts by more than the releases differ.
fresh() { # version -> database name
    local d=q${1//./}
    $P -d postgres -c "DROP DATABASE IF EXISTS $d" -c "CREATE DATABASE $d OWNER bench"
    "$PG_BIN/psql" -h "$S" -U bench -d "$d" -v ON_ERROR_STOP=1 -q \
        -c "CREATE EXTENSION pg_lease; CREATE EXTENSION pg_lease_queue VERSION '$1'" \
        -c "SELECT lease_queue.create_queue('q', 1, 10, false)" \
        -c "SELECT lease_queue.send('q', 'k0', '\"payload\"')" >/dev/null
    echo "$d"
}
run() { # database script transactions
    touch "$WORK/mark"; sleep 1
    "$PG_BIN/pgbench" -n -h "$S" -U bench -M prepared -c 1 -j 1 --random-seed=42 -t "$3" \
        -f "$WORK/$2.sql" "$1" >/dev/null
    sleep 3; instructions
}
for round in $(seq "$ROUNDS"); do
    for s in $SCRIPTS; do
        for v in $VERSIONS; do
            # Fewer transactions of the scripts of 100 messages (each is 100 times the work).
            case $s in batch*) n1=${N1:-20} n2=${N2:-120} ;; *) n1=${N1:-200} n2=${N2:-1200} ;; esac
            d=$(fresh "$v"); a=$(run "$d" $s "$n1"); b=$(run "$d" $s "$n2")
            echo "round=$round version=$v script=$s instructions_per_txn=$(( (b - a) / (n2 - n1) ))"
        done
    done
done
