#!/bin/bash
# bench/array.sh - one very big task array on a real `gantry server` with a fleet of simulated
# agents (`gantry-simagent`). In one run:
#   baseline   a BASE-task array (1,000: all its tasks stored as rows) submitted, wall time
#   submit     an ARRAY-task array (1,000,000) submitted: the `workflow start` wall time
#   while it runs (RUN_FOR seconds), sampled SAMPLES times each, as its owner and as a user
#              of another group: `workflow list` and `workflow status` (p50 / max), the first
#              page of `workflow describe` and the page after it; tasks/s in the array
#   stop       `workflow stop` -> STOPPED, wall time (the tasks never started end as a range)
#   memory     the server's RSS after the submit and its peak (VmHWM) over the whole run
# and prints the figures against the issue's targets (submit < 2 s, list/status < 100 ms, RSS
# < 512 MiB) and beside the baseline's submit.
#
# Run as root on Debian 12:   bench/array.sh
# Environment: ARRAY (1000000), BASE (1000), NODES (100), NODE_CORES (8), RUN_S (1, each
# task's simulated run), RUN_FOR (30 s), SAMPLES (10), STORE (sqlite or postgres, as
# bench/scale.sh), SIMAGENT_BIN, and those of bench/lib.sh (GANTRY_BIN, BENCH_KEEP, GANTRY_LOG).
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

ARRAY=${ARRAY:-1000000}
BASE=${BASE:-1000}
NODES=${NODES:-100}
NODE_CORES=${NODE_CORES:-8}
RUN_S=${RUN_S:-1}
RUN_FOR=${RUN_FOR:-30}
SAMPLES=${SAMPLES:-10}
SIM=${SIMAGENT_BIN:-$REPO/target/release/gantry-simagent}
STORE=${STORE:-sqlite}
case $STORE in sqlite | postgres) ;; *) die "STORE is sqlite or postgres, not $STORE" ;; esac

bench_install jq curl
bench_setup array
gantry_build
[ -x "$SIM" ] || (cd "$REPO" && cargo build --release -p gantry-simagent >&2) || die "build failed"
ulimit -n "$(ulimit -Hn)"

store=()
if [ "$STORE" = postgres ]; then
  bench_install postgresql-15 postgresql-client-15
  GANTRY_TEST_DIR=${GANTRY_TEST_DIR:-/tmp/gantry-test} "$REPO/scripts/test-images.sh" > /dev/null ||
    die "scripts/test-images.sh could not start PostgreSQL"
  PG_ADMIN=$(sed -n 's/^GANTRY_TEST_PG=//p' "${GANTRY_TEST_DIR:-/tmp/gantry-test}/env")
  db=gantry_array_$$
  psql -q "$PG_ADMIN" -c "CREATE DATABASE $db" >&2 || die "creating $db"
  BENCH_CLEANUPS+=("psql -q '$PG_ADMIN' -c 'DROP DATABASE IF EXISTS $db WITH (FORCE)' >/dev/null 2>&1")
  store=(--store "${PG_ADMIN%/*}/$db")
fi

kib() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }
# The CLI as the owner (admin) or as the other group's user.
as_owner() { GANTRY_URL=$GURL GANTRY_TOKEN=$GTOKEN "$GANTRY" "$@"; }
as_other() { GANTRY_URL=$GURL GANTRY_TOKEN=$OTHER_TOKEN "$GANTRY" "$@"; }
# Wall ms of a command (its output discarded; a failure stops the bench).
wall_ms() {
  local t0
  t0=$(now_ms)
  "$@" > /dev/null || die "failed: $*"
  echo $(($(now_ms) - t0))
}
# SAMPLES wall times of a command: "p50 max".
sample() {
  local i out=()
  for ((i = 0; i < SAMPLES; i++)); do out+=("$(wall_ms "$@")"); done
  printf '%s\n' "${out[@]}" | sort -n | awk '{ v[NR] = $1 } END { printf "%d %d\n", v[int((NR + 1) / 2)], v[NR] }'
}

gantry_server_start gantry "${store[@]}"
spid=$GSERVER_PID
OTHER_TOKEN=$(as_owner admin user create bench-other --group other 2>/dev/null) || die "creating the other user"
GANTRY_TOKEN=$GAGENT_TOKEN "$SIM" --server "$GURL" --nodes "$NODES" --cores "$NODE_CORES" \
  --prefix sim --report-secs 1 --run-ms $((RUN_S * 1000)) > "$WORK/sim.jsonl" 2> "$WORK/sim.err" &
sim_pid=$!
BENCH_CLEANUPS+=("bench_stop_pid $sim_pid gantry-simagent")
while [ "$(as_owner node list -o json | jq '[.[] | select(.state == "READY")] | length')" -lt "$NODES" ]; do
  kill -0 "$sim_pid" 2>/dev/null || die "gantry-simagent exited: $(tail -3 "$WORK/sim.err")"
  sleep 1
done
log "$NODES simulated nodes READY"

# --- baseline: a small array, every task a row
gantry_array_yaml "$BASE" "$WORK/base.yaml" "$RUN_S"
base_ms=$(wall_ms as_owner workflow start "$WORK/base.yaml")
log "a $BASE-task array submitted in $base_ms ms"
sleep 2

# --- the big one
gantry_array_yaml "$ARRAY" "$WORK/big.yaml" "$RUN_S"
t0=$(now_ms)
id=$(as_owner workflow start "$WORK/big.yaml" -o json | jq -r .id)
submit_ms=$(($(now_ms) - t0))
[ -n "$id" ] && [ "$id" != null ] || die "the big array was not submitted"
rss_after=$(($(kib "$spid" VmRSS) / 1024))
log "a $ARRAY-task array ($id) submitted in $submit_ms ms; server RSS $rss_after MiB"

sleep 3
read -r list_p50 list_max < <(sample as_owner workflow list -o json)
read -r olist_p50 olist_max < <(sample as_other workflow list -o json)
read -r status_p50 status_max < <(sample as_owner workflow status "$id" -o json)
read -r page_p50 page_max < <(sample as_owner workflow describe "$id" -o json)
after=$(as_owner workflow describe "$id" -o json | jq -r '.tasks[-1].id')
read -r next_p50 next_max < <(sample as_owner workflow describe "$id" --after "$after" -o json)
f0=$(as_owner workflow status "$id" -o json | jq '.counts.FINISHED // 0')
r0=$(now_ms)
sleep "$RUN_FOR"
f1=$(as_owner workflow status "$id" -o json | jq '.counts.FINISHED // 0')
tps=$(rate $((f1 - f0)) $(($(now_ms) - r0)))
log "while running: list $list_p50/$list_max ms (other group $olist_p50/$olist_max), status $status_p50/$status_max ms, describe $page_p50/$page_max ms, next page $next_p50/$next_max ms, $tps tasks/s"

# --- stop: what never started ends as a range
t0=$(now_ms)
as_owner workflow stop "$id" > /dev/null
while [ "$(as_owner workflow status "$id" -o json | jq -r .status)" != STOPPED ]; do
  [ $(($(now_ms) - t0)) -lt 120000 ] || die "the array did not stop in 120 s"
  sleep 0.2
done
stop_ms=$(($(now_ms) - t0))
counts=$(as_owner workflow status "$id" -o json | jq -c .counts)
peak=$(($(kib "$spid" VmHWM) / 1024))
log "stopped in $stop_ms ms: $counts; peak RSS $peak MiB"

met() { awk -v v="$1" -v t="$2" 'BEGIN { print (v < t) ? "met" : "MISSED" }'; }
figure array.base_submit_ms "$base_ms"
figure array.submit_ms "$submit_ms"
figure array.rss_after_submit_mib "$rss_after"
figure array.list_max_ms "$list_max"
figure array.list_other_group_max_ms "$olist_max"
figure array.status_max_ms "$status_max"
figure array.describe_page_max_ms "$page_max"
figure array.describe_next_page_max_ms "$next_max"
figure array.tasks_per_s "$tps"
figure array.stop_ms "$stop_ms"
figure array.peak_rss_mib "$peak"
echo
echo "A $ARRAY-task array on $NODES simulated nodes of $NODE_CORES cores ($STORE); baseline: a $BASE-task array"
echo
echo "| figure | measured | target | |"
echo "|---|---|---|---|"
echo "| submit | $submit_ms ms (a $BASE-task array: $base_ms ms) | < 2,000 ms | $(met "$submit_ms" 2000) |"
echo "| workflow list, owner / other group (p50 / max) | $list_p50 / $list_max ms, $olist_p50 / $olist_max ms | < 100 ms | $(met "$(( list_max > olist_max ? list_max : olist_max ))" 100) |"
echo "| workflow status (p50 / max) | $status_p50 / $status_max ms | < 100 ms | $(met "$status_max" 100) |"
echo "| describe, first page / next page (max) | $page_max / $next_max ms | | |"
echo "| tasks/s while it ran | $tps | | |"
echo "| stop (the rest end as a range) | $stop_ms ms | | |"
echo "| server RSS after submit / peak | $rss_after / $peak MiB | < 512 MiB | $(met "$peak" 512) |"
