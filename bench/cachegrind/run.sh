#!/bin/bash
# Server instructions per W1 transaction of pg_lease releases against their bare-SQL floors, under
# cachegrind (docs/BENCHMARKS.md, "Instruction counts"). Run as root on a machine with Debian's
# PostgreSQL (PG_BIN, default /usr/lib/postgresql/15/bin) and valgrind:
#
#   bench/cachegrind/run.sh [VERSION...]        # default: 0.3.0 0.7.0 0.8.0
#
# It builds a private mirror of the installation with this tree's pg_lease files under WORK
# (default /tmp/pglease-cg), starts the postmaster under `valgrind --tool=cachegrind` as nobody,
# creates one database per release (owner and CREATE EXTENSION by the non-superuser role `bench`)
# with a floor table identical to that release's lease.leases, and prints per round, per client
# count and per release the backends' instructions per transaction of the floor and of W1: the
# difference between runs of N1 and N2 transactions per client, which cancels connection start-up.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
WORK=${WORK:-/tmp/pglease-cg}
ROUNDS=${ROUNDS:-2}
CLIENTS=${CLIENTS:-1 4}
VERSIONS=${*:-0.3.0 0.7.0 0.8.0}

. "$HERE/server.sh"
cp "$HERE"/w1-*.sql "$WORK/"
chmod a+r "$WORK"/w1-*.sql
$P -d postgres -c "CREATE ROLE bench LOGIN"
for v in $VERSIONS; do
    d=v${v//./}
    $P -d postgres -c "CREATE DATABASE $d OWNER bench"
    "$PG_BIN/psql" -h "$S" -U bench -d "$d" -v ON_ERROR_STOP=1 -q -c "CREATE EXTENSION pg_lease VERSION '$v'"
    opts=$($P -d "$d" -At -c "SELECT coalesce(array_to_string(reloptions, ', '), '')
                                FROM pg_class WHERE oid = 'lease.leases'::regclass")
    $P -d "$d" -c "CREATE SCHEMA pglease_bench AUTHORIZATION bench;
                   CREATE TABLE pglease_bench.floor (LIKE lease.leases INCLUDING ALL) ${opts:+WITH ($opts)};
                   ALTER TABLE pglease_bench.floor OWNER TO bench"
done

run() { # database script clients transactions-per-client
    touch "$WORK/mark"; sleep 1
    "$PG_BIN/pgbench" -n -h "$S" -U bench -M prepared -c "$3" -j "$3" -t "$4" -f "$WORK/w1-$2.sql" "$1" >/dev/null
    sleep 3; instructions
}
for round in $(seq "$ROUNDS"); do
    for c in $CLIENTS; do
        if [ "$c" = 1 ]; then n1=200 n2=1200; else n1=100 n2=600; fi
        for v in $VERSIONS; do
            for s in floor lease; do
                a=$(run "v${v//./}" $s "$c" $n1); b=$(run "v${v//./}" $s "$c" $n2)
                echo "round=$round clients=$c version=$v script=$s instructions_per_txn=$(( (b - a) / (c * (n2 - n1)) ))"
            done
        done
    done
done
