# Sourced by run.sh and queue.sh: a private mirror of the installation at PG_BIN under WORK with the
# extension files of this tree (pg_lease, pg_lease_queue), a cluster initialised there, and its
# postmaster started under `valgrind --tool=cachegrind` as nobody, each forked backend writing its
# own count file into $O. Sets R, D, S, O and P (psql as the superuser), stops the server at exit,
# and defines `instructions` (the backends' instructions since `touch $WORK/mark`). With PLAIN=1
# the postmaster runs without valgrind (history.sh: sizes and times, no instruction counts).
EXTS=$HERE/../../extensions
share=$("$PG_BIN/pg_config" --sharedir)
pkglib=$("$PG_BIN/pg_config" --pkglibdir)
R=$WORK/root D=$WORK/data S=$WORK/sock O=$WORK/out
rm -rf "$WORK"; mkdir -p "$R$PG_BIN" "$R$share/extension" "$(dirname "$R$pkglib")" "$D" "$S" "$O"
cp "$PG_BIN/postgres" "$PG_BIN/initdb" "$R$PG_BIN/"
ln -s "$pkglib" "$R$pkglib"
for e in "$share"/*; do [ "$(basename "$e")" = extension ] || ln -s "$e" "$R$share/"; done
# Every other extension of the installation by link; ours are copied from this tree below (never
# through a link, which would overwrite the installation's own files, nor mixed with its versions).
for e in "$share"/extension/*; do
    case $(basename "$e") in pg_lease.control | pg_lease--* | pg_lease_queue.control | pg_lease_queue--*) continue ;; esac
    ln -s "$e" "$R$share/extension/"
done
for x in pg_lease pg_lease_queue; do
    cp "$EXTS/$x/$x.control" "$EXTS/$x"/sql/"$x"--*.sql "$R$share/extension/"
done
chmod -R a+rX "$WORK"; chown nobody "$D" "$S" "$O"
su nobody -s /bin/bash -c "'$R$PG_BIN/initdb' -D '$D' -A trust -U postgres >/dev/null"
printf "listen_addresses = ''\nunix_socket_directories = '%s'\nmax_connections = 60\n" "$S" >> "$D/postgresql.conf"
if [ "${PLAIN:-0}" = 1 ]; then
    su nobody -s /bin/bash -c "cd /; '$R$PG_BIN/postgres' -D '$D' > '$O/server.log' 2>&1 &"
else
    su nobody -s /bin/bash -c "cd /; valgrind --tool=cachegrind --cache-sim=no \
        --cachegrind-out-file='$O/cg.%p' '$R$PG_BIN/postgres' -D '$D' > '$O/server.log' 2>&1 &"
fi
trap 'su nobody -s /bin/bash -c "$PG_BIN/pg_ctl -D $D stop -m fast" >/dev/null || true' EXIT
until "$PG_BIN/pg_isready" -q -h "$S"; do sleep 1; done
P="$PG_BIN/psql -h $S -U postgres -v ON_ERROR_STOP=1 -q"

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
