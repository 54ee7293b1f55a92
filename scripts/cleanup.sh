#!/bin/sh
# cleanup.sh - remove what killed test runs leave behind: containers of test clusters, overlay
# mounts under their temporary data dirs, and empty cgroup directories under gantry/.
# Only touches Gantry's own test locations, never a real cluster's /var/lib/gantry. Also drops
# the scratch databases (gantry_test_*) killed test runs left on the test PostgreSQL.
set -u
tmp=${TMPDIR:-/tmp}
for root in "$tmp"/gantry-e2e-*/agents/*/runc "$tmp"/gantry-run-*/agents/*/runc "$tmp"/gantry-bench-*/agents/*/runc; do
  [ -d "$root" ] || continue
  for id in $(runc --root "$root" list -q 2>/dev/null); do
    runc --root "$root" kill --all "$id" KILL 2>/dev/null
    runc --root "$root" delete -f "$id" 2>/dev/null
  done
done
# Unmount, deepest first, anything mounted under a test data dir.
awk '{print $2}' /proc/self/mounts | grep -E "^$tmp/gantry-(e2e|run|bench|rt)-" | sort -r | while read -r m; do
  umount -l "$m" 2>/dev/null
done
# Empty cgroup directories (rmdir refuses non-empty ones, so live containers are safe).
for h in /sys/fs/cgroup/*/gantry /sys/fs/cgroup/gantry; do
  [ -d "$h" ] || continue
  find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null
done
# Container bridges (gtr*) that no container uses any more: test clusters leave one per agent.
for br in $(ip -o link show type bridge 2>/dev/null | awk -F': ' '{print $2}' | grep '^gtr'); do
  [ -z "$(ip -o link show master "$br" 2>/dev/null)" ] && ip link del "$br" 2>/dev/null
done
# The multi-host tests' hosts (crates/gantry/tests/common/hosts.rs): network namespaces
# gmh<N>h<I>, their veth ends of the same names, and bridges gmh<N>. Deleting a namespace's
# name frees it once its last process (a killed run's container, ended above) is gone.
if command -v ip >/dev/null 2>&1; then
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^gmh[0-9]+h[0-9]+$'); do
    ip link del "$ns" 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E '^gmh[0-9]+(h[0-9]+)?$'); do
    ip link del "$link" 2>/dev/null
  done
fi
# The agents' firewall tables (named after their bridge) whose bridge is gone.
if command -v nft >/dev/null 2>&1; then
  nft list tables 2>/dev/null | awk '$3 ~ /^gtr/ {print $2, $3}' | while read -r family name; do
    [ -e "/sys/class/net/$name" ] || nft delete table "$family" "$name" 2>/dev/null
  done
fi
# The store's tests drop their databases even when they fail; a killed run cannot.
pg_url=postgres://postgres@127.0.0.1:${GANTRY_TEST_PG_PORT:-5057}/postgres
if command -v psql >/dev/null 2>&1; then
  for db in $(PGCONNECT_TIMEOUT=3 psql "$pg_url" -Atqc \
      "SELECT datname FROM pg_database WHERE datname LIKE 'gantry\_test\_%'" 2>/dev/null); do
    psql "$pg_url" -qc "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null 2>&1
  done
fi
exit 0
