#!/usr/bin/env bash
# The HA section of the test command: pg_lease under a real HA manager, Patroni with etcd
# (tests/ha, docs/FAILURE-MODEL.md §2.15), on one PostgreSQL version: 15, or PGLEASE_HA_PG_VERSION.
# scripts/test.sh runs it after the integration suites; alone:
#
#   scripts/ha-test.sh            # the same as scripts/test.sh --ha-only
#
# It installs what it needs when missing, into the HA cache <cache>/ha, where <cache> is pgcluster's
# cache ($PGCLUSTER_CACHE; as root /var/cache/pgcluster; else ~/.cache/pgcluster):
#
# - etcd: Debian's etcd-server, fetched with `apt-get download` and unpacked with `dpkg -x` into
#   <cache>/ha/etcd-server_<version>/. The package is never installed, so no etcd service is
#   enabled or started. Pinned to ETCD_DEB_VERSION; if the archive no longer has that version, the
#   current one of the release is used and named in the output.
# - Patroni: PyPI's patroni[etcd,psycopg3] with every dependency pinned (scripts/ha-requirements.txt),
#   in a venv of Debian's /usr/bin/python3 at <cache>/ha/patroni-<version>-<hash of the pins>/,
#   made world-readable: the servers run as `nobody` when we are root, and `nobody` can run neither
#   a pyenv python under /root nor files it cannot read. As root, Debian's python3-venv is installed
#   if /usr/bin/python3 cannot make a venv (it starts no service).
#
# A finished installation is marked by a file `.complete`; an interrupted one is removed and
# redone. Then it runs the HA tests, one at a time (they are #[ignore]d, so a plain `cargo test`
# never runs them): cargo test -p pglease-tests --test ha -- --ignored --test-threads=1.
set -euo pipefail
cd "$(dirname "$0")/.."

PATRONI_VERSION=4.1.5
ETCD_DEB_VERSION=3.4.23-4+b4
PYTHON=/usr/bin/python3

say() { printf '\n==> %s\n' "$*"; }
die() { echo "scripts/ha-test.sh: $*" >&2; exit 1; }

if [ -n "${PGCLUSTER_CACHE:-}" ]; then
  cache=$PGCLUSTER_CACHE
elif [ "$(id -u)" -eq 0 ]; then
  cache=/var/cache/pgcluster
else
  cache=${XDG_CACHE_HOME:-$HOME/.cache}/pgcluster
fi
ha=$cache/ha
mkdir -p "$ha"
chmod 755 "$cache" "$ha"

# One installer at a time (two checkouts may run the test command at once); what an interrupted
# one left is removed.
exec 9>"$ha/.lock"
flock 9
rm -rf "$ha"/.tmp-*

apt_refreshed=
apt_refresh() {
  if [ -z "$apt_refreshed" ] && [ "$(id -u)" -eq 0 ]; then
    apt-get update -qq
    apt_refreshed=1
  fi
}

# etcd ----------------------------------------------------------------------------------------
etcd_bin() {
  local d
  for d in "$ha"/etcd-server_*; do
    if [ -e "$d/.complete" ] && [ -x "$d/usr/bin/etcd" ]; then
      case "$d" in *"_${ETCD_DEB_VERSION}") echo "$d/usr/bin/etcd"; return ;; esac
      fallback="$d/usr/bin/etcd"
    fi
  done
  [ -n "${fallback:-}" ] && echo "$fallback"
  return 0
}
etcd=$(etcd_bin)
if [ -z "$etcd" ]; then
  say "fetching Debian's etcd-server $ETCD_DEB_VERSION (apt-get download + dpkg -x into $ha; not installed, no service)"
  tmp=$(mktemp -d "$ha/.tmp-etcd.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  # apt downloads as its sandbox user `_apt` when that user may write the directory.
  if [ "$(id -u)" -eq 0 ] && id _apt >/dev/null 2>&1; then chown _apt "$tmp"; fi
  fetch() { (cd "$tmp" && apt-get download -qq "$@" >/dev/null); }
  if ! fetch "etcd-server=$ETCD_DEB_VERSION"; then
    apt_refresh
    if ! fetch "etcd-server=$ETCD_DEB_VERSION"; then
      echo "scripts/ha-test.sh: etcd-server $ETCD_DEB_VERSION is not in the archive; taking its current version" >&2
      fetch etcd-server || die "could not download Debian's etcd-server (apt-get download etcd-server)"
    fi
  fi
  deb=$(echo "$tmp"/*.deb)
  [ -f "$deb" ] || die "apt-get download left no .deb in $tmp"
  version=$(dpkg-deb -f "$deb" Version)
  dest="$ha/etcd-server_$version"
  rm -rf "$dest"
  dpkg -x "$deb" "$tmp/root"
  chmod -R a+rX "$tmp/root"
  touch "$tmp/root/.complete"
  mv "$tmp/root" "$dest"
  rm -rf "$tmp"
  trap - EXIT
  etcd="$dest/usr/bin/etcd"
fi
etcd_version=$("$etcd" --version)
echo "${etcd_version%%$'\n'*} ($etcd)"

# Patroni -------------------------------------------------------------------------------------
# Named after the pinned set too, so that a change of any pin installs afresh.
pins=$(sha256sum scripts/ha-requirements.txt)
venv="$ha/patroni-$PATRONI_VERSION-${pins:0:12}"
if [ ! -e "$venv/.complete" ]; then
  if ! { [ -x "$PYTHON" ] && "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null; }; then
    if [ "$(id -u)" -eq 0 ]; then
      say "installing Debian's python3-venv (for a venv of $PYTHON)"
      apt_refresh
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv >/dev/null
    else
      die "$PYTHON cannot make a venv: please install Debian's python3-venv (sudo apt-get install python3-venv)"
    fi
  fi
  say "installing Patroni $PATRONI_VERSION from PyPI into a venv of $PYTHON at $venv (pinned: scripts/ha-requirements.txt)"
  # A venv's scripts name its path: it is made in place, and only `.complete` says it is whole.
  rm -rf "$venv"
  "$PYTHON" -m venv "$venv"
  "$venv/bin/pip" install --quiet --no-cache-dir --disable-pip-version-check \
    -r scripts/ha-requirements.txt
  chmod -R a+rX "$venv"
  touch "$venv/.complete"
fi
patroni="$venv/bin/patroni"
echo "$("$patroni" --version) ($patroni)"

exec 9>&-

# The tests -----------------------------------------------------------------------------------
export PGLEASE_HA_ETCD="$etcd" PGLEASE_HA_PATRONI="$patroni"
export PGLEASE_HA_PG_VERSION="${PGLEASE_HA_PG_VERSION:-15}"
say "HA tests (Patroni $PATRONI_VERSION + etcd) on PostgreSQL $PGLEASE_HA_PG_VERSION"
cargo test -p pglease-tests --test ha --no-run --quiet
timeout --kill-after=30 10m cargo test -p pglease-tests --test ha --quiet -- \
  --ignored --test-threads=1 --nocapture || {
  rc=$?
  [ "$rc" -eq 124 ] && echo "scripts/ha-test.sh: the HA tests did not finish within 10m" >&2
  exit "$rc"
}
