#!/bin/bash
# bench/vs-slurm.sh - Slurm 22.05 on this machine against Gantry and the bare runc loop.
#
# Slurm runs as a one-node cluster with 2 CPUs (slurmctld + slurmd + munged, all started here
# by PID with their own key, socket, ports and spool under a temp dir), in two configurations:
#   tuned:    select/cons_tres, SchedulerParameters=sched_min_interval=0,batch_sched_delay=0,
#             sched_interval=1,default_queue_depth=1000, MessageTimeout=10, no accounting
#   +contain: the same plus PrologFlags=Contain (every job gets an extern step; its end then
#             triggers the scheduler at once instead of at the next 1 s pass)
# For each: a job array of `true` jobs with 1 CPU each (sbatch --array, 2 at once) => jobs/s;
# the same array oversubscribed (partition OverSubscribe=FORCE:64, sbatch --oversubscribe: bare
# processes, no limit) => jobs/s; single-job sbatch -> COMPLETED latency (median of RUNS).
# Then, in the same run, the bare runc loop and Gantry (bench/lib.sh, as bench/throughput.sh),
# and one comparison table.
#
# Run as root on Debian 12:   bench/vs-slurm.sh
# Environment: JOBS (500), PLAIN_JOBS (100: the array size without PrologFlags=Contain, which
# runs at ~2 jobs/s), RUNS (20), RUNC_N (150), RUNC_REPS (3: the runc loops keep the best of 3), GANTRY_CPUS ("2 16"), ARRAY_TIMEOUT (240 s),
# plus those of bench/lib.sh (GANTRY_BIN, BENCH_KEEP, GANTRY_LOG, QUIET_WAIT).
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

JOBS=${JOBS:-500}
PLAIN_JOBS=${PLAIN_JOBS:-100}
RUNS=${RUNS:-20}
RUNC_N=${RUNC_N:-150}
GANTRY_CPUS=${GANTRY_CPUS:-2 16}
ARRAY_TIMEOUT=${ARRAY_TIMEOUT:-240}

bench_install slurm-wlm munge runc umoci jq curl skopeo docker-registry busybox-static tini \
  util-linux iproute2
bench_setup slurm
chmod 755 "$WORK" # munged insists that every directory above its socket is searchable by all
gantry_build
bench_images
T_START=$(date +%s)

# --- Slurm -----------------------------------------------------------------------------------
free_port() { # a TCP port nobody listens on
  local p
  while :; do
    p=$((20000 + RANDOM % 20000))
    [ -z "$(ss -Htln "sport = :$p")" ] && { echo "$p"; return; }
  done
}

MUNGE_PID=
munge_start() {
  local m=$WORK/munge i
  mkdir -p "$m"
  chmod 755 "$m"
  mungekey -c -k "$m/munge.key" || die "mungekey failed"
  munged -F --socket="$m/munge.sock" --key-file="$m/munge.key" --pid-file="$m/munged.pid" \
    --log-file="$m/munged.log" --seed-file="$m/munged.seed" > "$m/out" 2>&1 &
  MUNGE_PID=$!
  BENCH_CLEANUPS+=("bench_stop_pid $MUNGE_PID munged")
  for i in $(seq 50); do
    [ -S "$m/munge.sock" ] && return 0
    kill -0 "$MUNGE_PID" 2>/dev/null || die "munged exited: $(cat "$m/out")"
    sleep 0.1
  done
  die "munged did not create its socket"
}

# slurm_start VARIANT (tuned | contain)
SLURMCTLD_PID='' SLURMD_PID=''
slurm_start() {
  local variant=$1 s=$WORK/slurm-$1 host i prolog=""
  host=$(hostname -s)
  mkdir -p "$s/state" "$s/spool"
  [ "$variant" = contain ] && prolog="PrologFlags=Contain"
  cat > "$s/slurm.conf" <<EOF
ClusterName=bench
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$WORK/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$s/state
SlurmdSpoolDir=$s/spool
SlurmctldPidFile=$s/slurmctld.pid
SlurmdPidFile=$s/slurmd.pid
SlurmctldLogFile=$s/slurmctld.log
SlurmdLogFile=$s/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=sched_min_interval=0,batch_sched_delay=0,sched_interval=1,default_queue_depth=1000,bf_interval=1
SchedulerTimeSlice=5
MessageTimeout=10
MinJobAge=600
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
$prolog
NodeName=$host NodeAddr=127.0.0.1 CPUs=2 RealMemory=8000 State=UNKNOWN
PartitionName=bench Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
PartitionName=over Nodes=$host MaxTime=INFINITE State=UP OverSubscribe=FORCE:64
EOF
  export SLURM_CONF=$s/slurm.conf
  slurmctld -D -f "$SLURM_CONF" > "$s/slurmctld.out" 2>&1 &
  SLURMCTLD_PID=$!
  BENCH_CLEANUPS+=("bench_stop_pid $SLURMCTLD_PID slurmctld")
  slurmd -D -f "$SLURM_CONF" > "$s/slurmd.out" 2>&1 &
  SLURMD_PID=$!
  BENCH_CLEANUPS+=("bench_stop_pid $SLURMD_PID slurmd")
  for i in $(seq 300); do
    [ "$(sinfo -h -p bench -o %t 2>/dev/null)" = idle ] && { log "slurm ($variant) up"; return 0; }
    kill -0 "$SLURMCTLD_PID" 2>/dev/null || die "slurmctld exited: $(tail -3 "$s/slurmctld.out")"
    kill -0 "$SLURMD_PID" 2>/dev/null || die "slurmd exited: $(tail -3 "$s/slurmd.out")"
    sleep 0.1
  done
  die "slurm did not come up; see $s"
}

slurm_stop() {
  bench_stop_pid "$SLURMD_PID" slurmd
  bench_stop_pid "$SLURMCTLD_PID" slurmctld
}

# slurm_array N PARTITION [SBATCH ARGS...]: sets SLURM_RATE (jobs/s, sbatch -> queue empty)
slurm_array() {
  local n=$1 part=$2 t0 t1 id done_n
  shift 2
  bench_quiet
  log "slurm: $n-job array of true, partition $part $*"
  t0=$(now_ms)
  id=$(sbatch --parsable --array="1-$n" -p "$part" -n1 -c1 -o /dev/null -e /dev/null "$@" --wrap true) ||
    die "sbatch failed"
  while [ -n "$(squeue -h -r -j "$id" -o %i)" ]; do
    [ $(($(now_ms) - t0)) -gt $((ARRAY_TIMEOUT * 1000)) ] && { log "slurm array timed out"; break; }
    sleep 0.1
  done
  t1=$(now_ms)
  done_n=$(squeue -h -r -t CD -j "$id" -o %i | wc -l)
  [ "$done_n" = "$n" ] || log "warning: only $done_n of $n jobs COMPLETED"
  SLURM_RATE=$(rate "$done_n" $((t1 - t0)))
  log "slurm: $done_n jobs in $((t1 - t0)) ms = $SLURM_RATE jobs/s"
}

# slurm_latency RUNS: one job at a time, sbatch -> COMPLETED seen (polling every 20 ms)
slurm_latency() {
  local runs=$1 i t0 id st
  bench_quiet
  log "slurm: $runs single jobs, one at a time"
  : > "$WORK/slurm-lat"
  for i in $(seq "$runs"); do
    t0=$(now_ms)
    id=$(sbatch --parsable -n1 -c1 -o /dev/null -e /dev/null --wrap true) || die "sbatch failed"
    while :; do
      st=$(squeue -h -j "$id" -t all -o %T)
      case $st in COMPLETED) break ;; FAILED | CANCELLED | TIMEOUT | NODE_FAIL) die "job $id $st" ;; esac
      sleep 0.02
    done
    echo $(($(now_ms) - t0)) >> "$WORK/slurm-lat"
  done
  read -r _ SLURM_LAT_MED SLURM_LAT_P90 _ _ _ < <(stats < "$WORK/slurm-lat")
}

munge_start
declare -A S_RATE S_OVER S_LMED S_LP90
for v in tuned contain; do
  slurm_start "$v"
  n=$JOBS
  [ "$v" = tuned ] && n=$PLAIN_JOBS
  slurm_array "$n" bench
  S_RATE[$v]=$SLURM_RATE
  slurm_array "$JOBS" over --oversubscribe
  S_OVER[$v]=$SLURM_RATE
  slurm_latency "$RUNS"
  S_LMED[$v]=$SLURM_LAT_MED
  S_LP90[$v]=$SLURM_LAT_P90
  slurm_stop
  figure "slurm.$v.jobs_per_s" "${S_RATE[$v]}"
  figure "slurm.$v.oversubscribed.jobs_per_s" "${S_OVER[$v]}"
  figure "slurm.$v.latency.median_ms" "${S_LMED[$v]}"
  figure "slurm.$v.latency.p90_ms" "${S_LP90[$v]}"
done
bench_stop_pid "$MUNGE_PID" munged

# --- the bare runc loop and Gantry ------------------------------------------------------------
runc_prepare
runc_baseline "$RUNC_N"

gantry_server_start
gantry_agent_start 2
W=$WORK/warm.yaml
gantry_single_yaml "$W"
wid=$(gantry_submit "$W" warm-up)
[ "$(gantry_wait "$wid" 0.05 120)" = FINISHED ] || die "warm-up workflow $wid did not finish"
gantry_latency "$RUNS"
figure gantry.latency.median_ms "$LAT_SMED"
figure gantry.latency.client_median_ms "$LAT_MED"
declare -A G_RATE
for c in $GANTRY_CPUS; do
  gantry_agent_start "$c"
  gantry_array "$JOBS" "cpus$c" "$ARRAY_TIMEOUT" || true
  G_RATE[$c]=$GANTRY_RATE
  figure "gantry.cpus$c.jobs_per_s" "${G_RATE[$c]}"
done

# --- the table --------------------------------------------------------------------------------
row() { printf '%-58s %-22s %s\n' "$1" "$2" "$3"; }
echo
echo "== Slurm vs Gantry vs bare runc: $(date -u '+%F %H:%M') UTC, $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB, kernel $(uname -r), $(slurmctld -V), $("$GANTRY" --version) =="
row "system, shape" "throughput" "one job, submit -> done (median / p90)"
row "Slurm tuned, array of true, 1 CPU each ($PLAIN_JOBS jobs)" "${S_RATE[tuned]} jobs/s" "${S_LMED[tuned]} / ${S_LP90[tuned]} ms (client, 20 ms polls)"
row "Slurm tuned, oversubscribed bare processes ($JOBS)" "${S_OVER[tuned]} jobs/s" ""
row "Slurm tuned + PrologFlags=Contain, 1 CPU each ($JOBS)" "${S_RATE[contain]} jobs/s" "${S_LMED[contain]} / ${S_LP90[contain]} ms (client, 20 ms polls)"
row "Slurm tuned + Contain, oversubscribed ($JOBS)" "${S_OVER[contain]} jobs/s" ""
row "bare runc loop, /bin/true, 1 at a time ($RUNC_N)" "$RUNC_SEQ_RATE containers/s" "$RUNC_SEQ_MS_EACH ms each"
row "bare runc loop, 2 at a time" "$RUNC_P2_RATE containers/s" ""
row "bare runc loop, 4 at a time" "$RUNC_P4_RATE containers/s" ""
first=1
for c in $GANTRY_CPUS; do
  lat=""
  [ "$first" = 1 ] && lat="$LAT_SMED / $LAT_SP90 ms (server); $LAT_MED / $LAT_P90 ms (client)"
  first=0
  row "Gantry, array of /bin/true containers, agent --cpus $c ($JOBS)" "${G_RATE[$c]} jobs/s" "$lat"
done
echo
for c in $GANTRY_CPUS; do
  echo "Gantry --cpus $c: $(pct "${G_RATE[$c]}" "$RUNC_P2_RATE")% of the bare runc loop (2 at a time);" \
    "$(pct "${G_RATE[$c]}" "${S_RATE[contain]}")% of Slurm + Contain; $(pct "${G_RATE[$c]}" "${S_RATE[tuned]}")% of Slurm tuned"
done
echo "(Slurm runs bare processes, Gantry and runc run containers; Slurm's latency is its client's view, polled like Gantry's.)"
[ -n "${GANTRY_FAILED:-}" ] && echo "WARNING: Gantry tasks that did not finish (array:count):$GANTRY_FAILED; their reasons are in the log"
[ -n "${BENCH_NOISY:-}" ] && echo "WARNING: other work kept the machine busy during some phases:$BENCH_NOISY"
echo "total run time: $(($(date +%s) - T_START)) s"
