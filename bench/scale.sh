#!/bin/bash
# bench/scale.sh - the control plane at fleet scale. For each N in NODES: a fresh real
# `gantry server` (SQLite) and N simulated agents (`gantry-simagent`: the real agent protocol
# over one WebSocket each, containers simulated, NODE_CORES cores each), then
#   registration  the simagent start -> every node READY and connected in `node list`
#   idle          the server's CPU (% of one core) and RSS over IDLE_S seconds of heartbeats
#   run           a TASKS-task array of one-core `sleep RUN_S` jobs: tasks/s from the workflow's
#                 created_at to its ended_at, the server's CPU per task and its peak RSS
#   node list     `gantry node list -o json`, wall time
#   liveness      the simagent's ping round trip (p50/p99 over the whole run: what a heartbeat
#                 or a report waits on its connection), live nodes the server marked DOWN,
#                 reconnects, and tasks placed more than once
# and prints one table, with the N of the smallest fleet as the baseline each figure is read
# against (per-node costs should stay flat as N grows), plus `figure` lines.
#
# Run as root on Debian 12:   bench/scale.sh
# Environment: NODES ("100 1000 10000"), TASKS (20000), RUN_S (1), NODE_CORES (8), IDLE_S (30),
# REGISTER_TIMEOUT (900 s), RUN_TIMEOUT (900 s), PROFILE=1 (perf on the server during the
# array's run: its hottest symbols, self and with children, in $WORK/perf-N-*.txt and
# printed), STORE (sqlite, the default, or postgres: a PostgreSQL 15 as `make test` starts it,
# scripts/test-images.sh, a fresh database per fleet; its processes' CPU is shown beside the
# server's; PG_ADMIN: another PostgreSQL's admin URL instead; PG_TOP=1: its costliest
# statements over the run, from pg_stat_statements), and those of bench/lib.sh (GANTRY_BIN,
# BENCH_KEEP, GANTRY_LOG). SIMAGENT_BIN: the simulated agents (default
# target/release/gantry-simagent, built if missing).
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

NODES=${NODES:-100 1000 10000}
TASKS=${TASKS:-20000}
RUN_S=${RUN_S:-1}
NODE_CORES=${NODE_CORES:-8}
IDLE_S=${IDLE_S:-30}
REGISTER_TIMEOUT=${REGISTER_TIMEOUT:-900}
RUN_TIMEOUT=${RUN_TIMEOUT:-900}
SIM=${SIMAGENT_BIN:-$REPO/target/release/gantry-simagent}
STORE=${STORE:-sqlite}
case $STORE in sqlite | postgres) ;; *) die "STORE is sqlite or postgres, not $STORE" ;; esac

PKGS=(jq curl)
[ "${PROFILE:-0}" = 1 ] && PKGS+=(linux-perf)
bench_install "${PKGS[@]}"
bench_setup scale
gantry_build
if [ ! -x "$SIM" ]; then
  log "building $SIM (cargo build --release -p gantry-simagent)"
  (cd "$REPO" && cargo build --release -p gantry-simagent >&2) || die "build failed"
fi
# One socket per node on each side, and the server's own files.
ulimit -n "$(ulimit -Hn)"
[ "$(ulimit -n)" -ge 65536 ] || log "warning: only $(ulimit -n) open files allowed"

# A process's own CPU in whole ms (lib.sh's cpu_ms), and its RSS / peak RSS (KiB) from /proc.
proc_cpu_ms() { printf '%.0f' "$(cpu_ms "$1/self")"; }
proc_kib() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }

# PostgreSQL's CPU (its postmaster and every backend, all the postgres user's processes), ms;
# 0 on SQLite, whose work is inside the server's process.
pg_cpu_ms() {
  [ "$STORE" = postgres ] || { echo 0; return; }
  local p t=0
  for p in $(pgrep -u postgres); do t=$(awk -v a="$t" -v b="$(cpu_ms "$p")" 'BEGIN { print a + b }'); done
  printf '%.0f' "$t"
}
if [ "$STORE" = postgres ] && [ -z "${PG_ADMIN:-}" ]; then
  bench_install postgresql-15 postgresql-client-15
  GANTRY_TEST_DIR=${GANTRY_TEST_DIR:-/tmp/gantry-test} "$REPO/scripts/test-images.sh" > /dev/null ||
    die "scripts/test-images.sh could not start PostgreSQL"
  PG_ADMIN=$(sed -n 's/^GANTRY_TEST_PG=//p' "${GANTRY_TEST_DIR:-/tmp/gantry-test}/env")
  [ -n "$PG_ADMIN" ] || die "no GANTRY_TEST_PG in the test env file"
fi
# With PG_TOP=1 and a PostgreSQL that preloads pg_stat_statements, the statements that cost it
# most CPU over each fleet's run, in $WORK/pg-top-N.txt and printed.
pg_top_reset() {
  [ "${PG_TOP:-0}" = 1 ] || return 0
  psql -q "$1" -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" -c "SELECT pg_stat_statements_reset()" > /dev/null ||
    die "PG_TOP=1 needs shared_preload_libraries=pg_stat_statements"
}
pg_top() { # DB_URL N
  [ "${PG_TOP:-0}" = 1 ] || return 0
  psql -q "$1" -P pager=off -c "SELECT calls, round(total_exec_time::numeric, 0) AS total_ms,
      round((total_exec_time / calls)::numeric, 3) AS ms_per_call,
      round(min_exec_time::numeric, 3) AS min_ms, round(max_exec_time::numeric, 1) AS max_ms, rows,
      left(regexp_replace(query, '\s+', ' ', 'g'), 110) AS query
    FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 25" > "$WORK/pg-top-$2.txt"
  log "PostgreSQL's costliest statements in the run ($WORK/pg-top-$2.txt):"
  cat "$WORK/pg-top-$2.txt" >&2
}
# STORE_ARGS for a fleet of N: on PostgreSQL, --store and a fresh database (PG_DB_URL). Not
# in a subshell: the cleanup it registers must outlive it.
store_args() {
  STORE_ARGS=()
  [ "$STORE" = postgres ] || return 0
  local db=gantry_scale_$1_$$
  psql -q "$PG_ADMIN" -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" >&2 || die "creating $db"
  BENCH_CLEANUPS+=("psql -q '$PG_ADMIN' -c 'DROP DATABASE IF EXISTS $db WITH (FORCE)' >/dev/null 2>&1")
  PG_DB_URL=${PG_ADMIN%/*}/$db
  STORE_ARGS=(--store "$PG_DB_URL")
}

# node list as JSON.
node_list() {
  GANTRY_URL=$GURL GANTRY_TOKEN=$GTOKEN "$GANTRY" node list -o json
}

rows=()
for n in $NODES; do
  log "=== $n nodes"
  store_args "$n"
  gantry_server_start "gantry-$n" "${STORE_ARGS[@]}"
  spid=$GSERVER_PID
  # The simulated agents: one JSON report a second.
  simlog=$WORK/sim-$n.jsonl
  GANTRY_TOKEN=$GAGENT_TOKEN "$SIM" --server "$GURL" --nodes "$n" --cores "$NODE_CORES" \
    --prefix "sim$n" --report-secs 1 --run-ms $((RUN_S * 1000)) > "$simlog" 2> "$WORK/sim-$n.err" &
  sim_pid=$!
  BENCH_CLEANUPS+=("bench_stop_pid $sim_pid gantry-simagent")
  [ "$STORE" = postgres ] && pg_top_reset "$PG_DB_URL"
  t0=$(now_ms)
  cpu0=$(proc_cpu_ms "$spid")
  pg0=$(pg_cpu_ms)

  # --- registration: every node READY and connected
  reg_ms=timeout
  while :; do
    ready=$(node_list 2>/dev/null | jq '[.[] | select(.state == "READY" and .connected)] | length' || echo 0)
    if [ "${ready:-0}" -ge "$n" ]; then
      reg_ms=$(($(now_ms) - t0))
      break
    fi
    [ $(($(now_ms) - t0)) -lt $((REGISTER_TIMEOUT * 1000)) ] || break
    kill -0 "$sim_pid" 2>/dev/null || die "gantry-simagent exited: $(tail -3 "$WORK/sim-$n.err")"
    log "registered: ${ready:-0} of $n"
    sleep 2
  done
  reg_cpu=$(($(proc_cpu_ms "$spid") - cpu0))
  reg_pg=$(($(pg_cpu_ms) - pg0))
  log "all $n registered in ${reg_ms} ms (server CPU ${reg_cpu} ms)"
  [ "$STORE" = postgres ] && pg_top "$PG_DB_URL" "$n-register"

  # --- idle: heartbeats only
  sleep 5
  c0=$(proc_cpu_ms "$spid")
  p0=$(pg_cpu_ms)
  sleep "$IDLE_S"
  idle_pct=$(awk -v c=$(($(proc_cpu_ms "$spid") - c0)) -v s="$IDLE_S" 'BEGIN { printf "%.1f", c / (s * 10) }')
  idle_pg=$(awk -v c=$(($(pg_cpu_ms) - p0)) -v s="$IDLE_S" 'BEGIN { printf "%.1f", c / (s * 10) }')
  idle_rss=$(($(proc_kib "$spid" VmRSS) / 1024))
  log "idle: ${idle_pct} % of a core, ${idle_rss} MiB"

  # --- node list
  l0=$(now_ms)
  node_list > /dev/null
  list_ms=$(($(now_ms) - l0))

  # --- the array
  wf=$WORK/array-$n.yaml
  gantry_array_yaml "$TASKS" "$wf" "$RUN_S"
  [ "$STORE" = postgres ] && pg_top_reset "$PG_DB_URL"
  r0=$(proc_cpu_ms "$spid")
  rp0=$(pg_cpu_ms)
  id=$(GANTRY_URL=$GURL GANTRY_TOKEN=$GTOKEN "$GANTRY" workflow start "$wf" -o json | jq -r .id)
  log "workflow $id: $TASKS tasks"
  rt0=$(now_ms)
  prof_pid=
  if [ "${PROFILE:-0}" = 1 ]; then
    perf record -g -F 499 -p "$spid" -o "$WORK/perf-$n.data" > "$WORK/perf-$n.log" 2>&1 &
    prof_pid=$!
  fi
  status=RUNNING
  while :; do
    sum=$(api /workflows | jq -c --arg id "$id" '.[] | select(.id == $id)')
    status=$(jq -r .status <<< "$sum")
    case $status in FINISHED | FAILED | STOPPED) break ;; esac
    [ $(($(now_ms) - rt0)) -lt $((RUN_TIMEOUT * 1000)) ] || { status=timeout; break; }
    log "array: $(jq -c .counts <<< "$sum")"
    sleep 5
  done
  run_cpu=$(($(proc_cpu_ms "$spid") - r0))
  run_pg=$(($(pg_cpu_ms) - rp0))
  if [ -n "$prof_pid" ]; then
    kill -INT "$prof_pid"; wait "$prof_pid" 2>/dev/null || true
    perf report -i "$WORK/perf-$n.data" --no-children --percent-limit 1 --stdio -g none 2>/dev/null |
      grep -E '^ +[0-9]' > "$WORK/perf-$n-self.txt" || true
    perf report -i "$WORK/perf-$n.data" --children --percent-limit 3 --stdio -g none 2>/dev/null |
      grep -E '^ +[0-9]' > "$WORK/perf-$n-children.txt" || true
    log "the server's hottest symbols in the run ($WORK/perf-$n-*.txt):"
    head -25 "$WORK/perf-$n-self.txt" >&2
  fi
  [ "$STORE" = postgres ] && pg_top "$PG_DB_URL" "$n"
  peak_rss=$(($(proc_kib "$spid" VmHWM) / 1024))
  created=$(ts_ms "$(jq -r .created_at <<< "$sum")")
  ended=$(jq -r '.ended_at // empty' <<< "$sum")
  if [ -n "$ended" ]; then
    tps=$(rate "$TASKS" $(($(ts_ms "$ended") - created)))
  else
    tps=0
  fi
  finished=$(jq -r '.counts.FINISHED // 0' <<< "$sum")

  # --- liveness, from both sides
  down=$(node_list | jq '[.[] | select(.state == "DOWN")] | length')
  bench_stop_pid "$sim_pid" gantry-simagent
  last=$(tail -1 "$simlog")
  rtt50=$(jq -r '.rtt_ms.p50 // "-"' <<< "$last")
  rtt99=$(jq -r '.rtt_ms.p99 // "-"' <<< "$last")
  reconnects=$(jq -r .reconnects <<< "$last")
  assigned=$(jq -r .assigned <<< "$last")
  twice=$(jq -r .assigned_twice <<< "$last")
  cpu_task=$(awk -v c="$run_cpu" -v t="$TASKS" 'BEGIN { printf "%.2f", c / t }')
  pg_task=$(awk -v c="$run_pg" -v t="$TASKS" 'BEGIN { printf "%.2f", c / t }')

  figure "scale.$n.register_ms" "$reg_ms"
  figure "scale.$n.register_cpu_ms" "$reg_cpu"
  figure "scale.$n.idle_cpu_pct" "$idle_pct"
  figure "scale.$n.idle_rss_mib" "$idle_rss"
  figure "scale.$n.node_list_ms" "$list_ms"
  figure "scale.$n.tasks_per_s" "$tps"
  figure "scale.$n.run_cpu_ms_per_task" "$cpu_task"
  figure "scale.$n.peak_rss_mib" "$peak_rss"
  figure "scale.$n.rtt_p99_ms" "$rtt99"
  figure "scale.$n.live_nodes_down" "$down"
  figure "scale.$n.placed_more_than_once" "$((assigned - TASKS))"
  pg_note() { [ "$STORE" = postgres ] && printf ' (+ %s PostgreSQL)' "$1"; }
  if [ "$STORE" = postgres ]; then
    figure "scale.$n.idle_pg_cpu_pct" "$idle_pg"
    figure "scale.$n.run_pg_cpu_ms_per_task" "$pg_task"
  fi
  rows+=("$(printf '| %s | %s ms (%s ms CPU%s) | %s %%%s | %s MiB | %s (%s of %s %s) | %s ms/task%s | %s MiB | %s ms | %s / %s ms | %s | %s | %s / %s |' \
    "$n" "$reg_ms" "$reg_cpu" "$(pg_note "$reg_pg ms")" "$idle_pct" "$(pg_note "$idle_pg %")" "$idle_rss" \
    "$tps" "$finished" "$TASKS" "$status" "$cpu_task" "$(pg_note "$pg_task ms")" "$peak_rss" "$list_ms" \
    "$rtt50" "$rtt99" "$down" "$reconnects" "$assigned" "$twice")")
  bench_stop_pid "$spid" "gantry server"
done

echo
echo "Scale: $TASKS one-core tasks of ${RUN_S} s on N simulated nodes of $NODE_CORES cores ($STORE)"
echo
echo "| nodes | all registered | idle server CPU | idle RSS | tasks/s end to end | server CPU in the run | peak RSS | node list | ping p50 / p99 | live nodes DOWN | reconnects | assigned / twice |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
