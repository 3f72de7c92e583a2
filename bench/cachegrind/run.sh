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
EXT=${EXT:-$HERE/../../extensions/pg_lease}
PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
WORK=${WORK:-/tmp/pglease-cg}
ROUNDS=${ROUNDS:-2}
CLIENTS=${CLIENTS:-1 4}
VERSIONS=${*:-0.3.0 0.7.0 0.8.0}

share=$("$PG_BIN/pg_config" --sharedir)
pkglib=$("$PG_BIN/pg_config" --pkglibdir)
R=$WORK/root D=$WORK/data S=$WORK/sock O=$WORK/out
rm -rf "$WORK"; mkdir -p "$R$PG_BIN" "$R$share/extension" "$(dirname "$R$pkglib")" "$D" "$S" "$O"
cp "$PG_BIN/postgres" "$PG_BIN/initdb" "$R$PG_BIN/"
ln -s "$pkglib" "$R$pkglib"
for e in "$share"/*; do [ "$(basename "$e")" = extension ] || ln -s "$e" "$R$share/"; done
for e in "$share"/extension/*; do ln -s "$e" "$R$share/extension/"; done
cp "$EXT/pg_lease.control" "$EXT"/sql/pg_lease--*.sql "$R$share/extension/"
cp "$HERE"/w1-*.sql "$WORK/"
chmod -R a+rX "$WORK"; chown nobody "$D" "$S" "$O"
su nobody -s /bin/bash -c "'$R$PG_BIN/initdb' -D '$D' -A trust -U postgres >/dev/null"
printf "listen_addresses = ''\nunix_socket_directories = '%s'\nmax_connections = 60\n" "$S" >> "$D/postgresql.conf"
su nobody -s /bin/bash -c "cd /; valgrind --tool=cachegrind --cache-sim=no \
    --cachegrind-out-file='$O/cg.%p' '$R$PG_BIN/postgres' -D '$D' > '$O/server.log' 2>&1 &"
trap 'su nobody -s /bin/bash -c "$PG_BIN/pg_ctl -D $D stop -m fast" >/dev/null || true' EXIT
until "$PG_BIN/pg_isready" -q -h "$S"; do sleep 1; done

P="$PG_BIN/psql -h $S -U postgres -v ON_ERROR_STOP=1 -q"
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

# The instructions of the backends whose files appeared since the marker (a backend's file is
# written when it exits; only backends run PostgresMain).
instructions() {
    local total=0 f
    for f in $(find "$O" -newer "$WORK/mark" -type f -name 'cg.*'); do
        grep -q PostgresMain "$f" || continue
        total=$((total + $(awk '/^summary:/ {print $2}' "$f")))
    done
    echo "$total"
}
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
