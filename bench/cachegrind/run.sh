#!/bin/bash
# Server instructions per W1 transaction of pg_lease releases against their bare-SQL floors, under
# cachegrind (docs/BENCHMARKS.md, "Instruction counts"), and per renewal of a held key (the renew
# storm). Run as root on a machine with Debian's PostgreSQL (PG_BIN, default
# /usr/lib/postgresql/15/bin) and valgrind:
#
#   bench/cachegrind/run.sh [VARIANT...]        # default: 0.3.0 0.7.0 0.8.0
#   CLIENTS=1 ROUNDS=3 bench/cachegrind/run.sh 0.8.0 0.9.0 0.9.0:off    # the history of grants
#
# A VARIANT is a release, optionally with a configuration: `0.9.0:off` is 0.9.0 with
# `lease.configure_history(false)` run by the installing role `bench` (database v090off); `V:NAME`
# with any other NAME runs $VARIANT_DIR/NAME.sql (default: this directory) as the superuser in that
# database after the install (measurement copies of a function; nothing of the kind is committed).
# It builds a private mirror of the installation with this tree's pg_lease files under WORK
# (default /tmp/pglease-cg), starts the postmaster under `valgrind --tool=cachegrind` as nobody,
# creates one database per variant (owner and CREATE EXTENSION by the non-superuser role `bench`)
# with a floor table identical to that release's lease.leases, and prints per round, per client
# count and per variant the backends' instructions per transaction of each script in SCRIPTS
# (default: floor lease renew-floor renew): the difference between runs of N1 and N2 transactions
# per client (N1/N2 = 200/1200 at 1 client, overridable; 100/600 otherwise), which cancels
# connection start-up.
#   floor, lease              w1-floor.sql, w1-lease.sql: the W1 cycle (acquire, renew, release in
#                             one transaction) on a private key per client, and its bare-SQL floor
#   renew-floor, renew        w1-renew-floor.sql, w1-renew.sql: one renewal per transaction (ttl
#                             1 hour) of a key the client holds ('w1r-<client>', epoch 1, granted
#                             at setup), and the bare UPDATE of the floor row
# KEEP=1 keeps each run's count files under $WORK/keep/<round>-<database>-<script>-c<clients>-t<N>/
# (every backend file includes what the postmaster ran before the fork; compare N1 and N2 runs).
# At the end, per database, the table statistics that show every renewal succeeded (a refused one
# updates nothing: lease.leases updates = 3 per W1 transaction + 1 per renewal) and how many rows
# the grants wrote into lease.grant_history.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
WORK=${WORK:-/tmp/pglease-cg}
ROUNDS=${ROUNDS:-2}
CLIENTS=${CLIENTS:-1 4}
VARIANTS=${*:-0.3.0 0.7.0 0.8.0}
SCRIPTS=${SCRIPTS:-floor lease renew-floor renew}
VARIANT_DIR=${VARIANT_DIR:-$HERE}
HELD=4    # keys held for the renew scripts: w1r-0 .. w1r-3 (client ids of up to 4 clients)
dbname() { local v=${1%%:*} c=${1#*:}; [ "$c" = "$1" ] && c=; echo "v${v//./}${c//[^a-z0-9]/}"; }

. "$HERE/server.sh"
cp "$HERE"/w1-*.sql "$WORK/"
chmod a+r "$WORK"/w1-*.sql
$P -d postgres -c "CREATE ROLE bench LOGIN"
for variant in $VARIANTS; do
    v=${variant%%:*} conf=${variant#*:}; [ "$conf" = "$variant" ] && conf=
    d=$(dbname "$variant")
    $P -d postgres -c "CREATE DATABASE $d OWNER bench"
    "$PG_BIN/psql" -h "$S" -U bench -d "$d" -v ON_ERROR_STOP=1 -q -c "CREATE EXTENSION pg_lease VERSION '$v'"
    if [ "$conf" = off ]; then
        "$PG_BIN/psql" -h "$S" -U bench -d "$d" -v ON_ERROR_STOP=1 -q -At \
            -c "SELECT history FROM lease.configure_history(false)" | grep -qx f
    elif [ -n "$conf" ]; then
        $P -d "$d" -f "$VARIANT_DIR/$conf.sql"
    fi
    opts=$($P -d "$d" -At -c "SELECT coalesce(array_to_string(reloptions, ', '), '')
                                FROM pg_class WHERE oid = 'lease.leases'::regclass")
    $P -d "$d" -c "CREATE SCHEMA pglease_bench AUTHORIZATION bench;
                   CREATE TABLE pglease_bench.floor (LIKE lease.leases INCLUDING ALL) ${opts:+WITH ($opts)};
                   ALTER TABLE pglease_bench.floor OWNER TO bench"
    # The keys the renew scripts renew: held by 'w1' under the role bench for an hour, epoch 1.
    held=$("$PG_BIN/psql" -h "$S" -U bench -d "$d" -v ON_ERROR_STOP=1 -At -c "
        SELECT count(*) FROM generate_series(0, $HELD - 1) AS i,
                             lease.acquire('w1r-' || i, 'w1', interval '1 hour') AS a
         WHERE a.acquired AND a.epoch = 1" -c "
        INSERT INTO pglease_bench.floor (key, owner, epoch, expires_at)
        SELECT 'w1r-' || i, 'w1', 1, clock_timestamp() + interval '1 hour' FROM generate_series(0, $HELD - 1) AS i")
    [ "$held" = "$(printf '%s\nINSERT 0 %s' $HELD $HELD)" ] || { echo "setup of $d: $held" >&2; exit 1; }
done

run() { # database script clients transactions-per-client
    touch "$WORK/mark"; sleep 1
    "$PG_BIN/pgbench" -n -h "$S" -U bench -M prepared -c "$3" -j "$3" -t "$4" -f "$WORK/w1-$2.sql" "$1" >/dev/null
    sleep 3
    if [ "${KEEP:-0}" = 1 ]; then    # the run's count files, for cg_annotate --diff (per function)
        mkdir -p "$WORK/keep/$round-$1-$2-c$3-t$4"
        find "$O" -newer "$WORK/mark" -type f -name 'cg.*' -exec cp {} "$WORK/keep/$round-$1-$2-c$3-t$4/" \;
    fi
    instructions
}
txns=0    # W1 and renew transactions per variant, for the check at the end
for round in $(seq "$ROUNDS"); do
    for c in $CLIENTS; do
        if [ "$c" = 1 ]; then n1=${N1:-200} n2=${N2:-1200}; else n1=100 n2=600; fi
        for variant in $VARIANTS; do
            for s in $SCRIPTS; do
                a=$(run "$(dbname "$variant")" $s "$c" $n1); b=$(run "$(dbname "$variant")" $s "$c" $n2)
                echo "round=$round clients=$c variant=$variant script=$s instructions_per_txn=$(( (b - a) / (c * (n2 - n1)) ))"
            done
        done
        txns=$((txns + c * (n1 + n2)))
    done
done
for variant in $VARIANTS; do
    $P -d "$(dbname "$variant")" -At -F ' ' -c "
        SELECT 'check variant=$variant leases_updates=' || n_tup_upd || ' hot=' || n_tup_hot_upd
               || ' history_rows=' || coalesce((SELECT n_tup_ins FROM pg_stat_user_tables
                                                 WHERE relid = to_regclass('lease.grant_history')), 0)
               || ' held=' || (SELECT count(*) FROM lease.leases
                                WHERE key LIKE 'w1r-%' AND owner = 'w1' AND epoch = 1
                                  AND expires_at > clock_timestamp() + interval '50 minutes')
          FROM pg_stat_user_tables WHERE relid = 'lease.leases'::regclass"
done
w1=0 rn=0
case " $SCRIPTS " in *" lease "*) w1=$txns;; esac
case " $SCRIPTS " in *" renew "*) rn=$txns;; esac
echo "expected per variant: leases_updates=$((3 * w1 + rn)) (3 per W1 transaction, 1 per renewal)" \
     "history_rows=$((w1 + HELD)) with the history on (one per grant, the $HELD setup grants included)," \
     "0 with it off or before 0.9.0; held=$HELD"
