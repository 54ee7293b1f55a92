#!/usr/bin/env bash
# bench/mpi.sh - MPI across two nodes: the same 2-rank ping-pong (osu-style: one-way latency
# of 8-byte messages, bandwidth of 1 MiB ones) run by Open MPI's `mpirun` directly on this
# host, against Gantry's `multinode: {nodes: 2, implementation: openmpi}` job on two agents
# of this host, in the same run; and the start-up of each (submit, or `mpirun`, until every
# rank has passed MPI_Init and a barrier: rank 0 prints the time then).
#
# Both runs use the program of the tests' MPI image (scripts/mpi/allreduce.c, built against
# Open MPI) and the same transport (`btl tcp,self` over loopback: two Gantry members are two
# nodes, so their ranks never share memory; the bare run is told the same), so the
# difference is what Gantry adds: containers sharing their node's network, ranks started in
# the peer container through the agents' exec services. Targets: latency and bandwidth
# within 5 % of the bare run; start-up under 1 s.
#
# Each runs REPS times (default 5), alternating; the best of each is reported. Prints
# `figure NAME VALUE` lines and a table on stdout, progress on stderr. Needs root; about 2
# minutes (the first run builds the MPI image, ~1 minute more). Environment: REPS, ITERS
# (ping-pong round trips per size, default 2000), GANTRY_BIN, GANTRY_LOG, BENCH_KEEP=1.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

REPS=${REPS:-5}
ITERS=${ITERS:-2000}
# Cores per member: as many as the bare ranks may use (the machine's), so that the CFS quota
# Gantry sets from `resource.cpu.cores` is not what is measured.
CORES=${CORES:-$(nproc)}

bench_setup mpi
bench_install curl jq runc docker-registry openmpi-bin libopenmpi-dev mpich libmpich-dev mmdebstrap skopeo
gantry_build
bench_images

IMAGE_REF=$(sh "$REPO/scripts/make-mpi-image.sh" "$GANTRY_TEST_REGISTRY") || die "make-mpi-image.sh failed"
IMAGE=docker://${IMAGE_REF#"$GANTRY_TEST_REGISTRY"/}
log "MPI image $IMAGE"
mpicc.openmpi -O2 -o "$WORK/allreduce" "$REPO/scripts/mpi/allreduce.c"

# --- bare: mpirun on this host ---------------------------------------------------------------
bare() { # MODE...
  mpirun.openmpi --allow-run-as-root --oversubscribe -np 2 --host localhost:2 \
    --mca btl tcp,self --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
    "$WORK/allreduce" "$@"
}

# --- Gantry: one server, two agents (two nodes of this host) ----------------------------------
gantry_server_start
# Each agent is a node of its own loopback address, as `gantry up --agents 2` makes them:
# launchers run a "local" host's ranks themselves, so two nodes need two addresses.
AGENTS=()
i=0
for n in a b; do
  i=$((i + 1))
  GANTRY_AGENT_TOKEN=$GAGENT_TOKEN GANTRY_LOG=${GANTRY_LOG:-info} "$GANTRY" agent \
    --server "$GURL" --pool default --name "bench-$$-$n" --cpus "$CORES" \
    --metrics-listen off --exec-listen "127.0.1.$i:0" --advertise "127.0.1.$i" \
    --storage-root "$GDATA/storage" --state-dir "$GDATA/agent-$n" \
    --registry-mirror "docker.io=http://$GANTRY_TEST_REGISTRY" \
    --insecure-registry "$GANTRY_TEST_REGISTRY" >> "$GDATA/agent-$n.log" 2>&1 &
  AGENTS+=($!)
  BENCH_CLEANUPS+=("bench_stop_pid $! 'gantry agent $n'")
done
for _ in $(seq 300); do
  [ "$(api /nodes | jq '[.[] | select(.connected)] | length')" = 2 ] && break
  sleep 0.1
done
[ "$(api /nodes | jq '[.[] | select(.connected)] | length')" = 2 ] || die "the agents did not connect"

cat > "$WORK/job.yaml" <<YAML
version: v4
jobs:
  pp:
    image: { uri: "$IMAGE" }
    resource: { cpu: { cores: $CORES } }
    multinode: { nodes: 2, implementation: openmpi, procs-per-node: 1 }
    env:
      - OMPI_MCA_btl=tcp,self
      - OMPI_MCA_btl_tcp_if_include=lo
      - OMPI_MCA_oob_tcp_if_include=lo
    command: [ /usr/local/bin/allreduce-openmpi, MODE, "$ITERS" ]
YAML

gantry() { # MODE -> the head's log on stdout; the submit time (ms) in $WORK/submitted
  sed "s/MODE/$1/" "$WORK/job.yaml" > "$WORK/run.yaml"
  now_ms > "$WORK/submitted" # (called in a subshell: a variable would not come back)
  local id st
  id=$(gantry_submit "$WORK/run.yaml" "mpi-$1")
  st=$(gantry_wait "$id" 0.2 300)
  [ "$st" = FINISHED ] || die "workflow $id ended $st: $(api "/workflows/$id" | jq -c '.tasks[] | {index, status, reason}')"
  GANTRY_URL=$GURL GANTRY_TOKEN=$GTOKEN "$GANTRY" workflow log "$id" pp --task 0
}

num() { sed -n "s/^$1[^:]*: \([0-9.]*\).*/\1/p" | head -1; }
best_min() { sort -g | head -1; }
best_max() { sort -g | tail -1; }

: > "$WORK/bare.lat"; : > "$WORK/bare.bw"; : > "$WORK/gantry.lat"; : > "$WORK/gantry.bw"
: > "$WORK/bare.start"; : > "$WORK/gantry.start"
gantry startup > /dev/null # pulls the image on both nodes
for r in $(seq "$REPS"); do
  log "rep $r/$REPS"
  out=$(bare pingpong "$ITERS")
  echo "$out" | num latency >> "$WORK/bare.lat"
  echo "$out" | num bandwidth >> "$WORK/bare.bw"
  out=$(gantry pingpong)
  echo "$out" | num latency >> "$WORK/gantry.lat"
  echo "$out" | num bandwidth >> "$WORK/gantry.bw"
  t0=$(now_ms)
  up=$(bare startup | sed -n 's/^ranks up at \([0-9]*\).*/\1/p')
  echo $((up - t0)) >> "$WORK/bare.start"
  out=$(gantry startup)
  up=$(echo "$out" | sed -n 's/^ranks up at \([0-9]*\).*/\1/p')
  echo $((up - $(cat "$WORK/submitted"))) >> "$WORK/gantry.start"
done

BL=$(best_min < "$WORK/bare.lat"); GL=$(best_min < "$WORK/gantry.lat")
BB=$(best_max < "$WORK/bare.bw"); GB=$(best_max < "$WORK/gantry.bw")
BS=$(best_min < "$WORK/bare.start"); GS=$(best_min < "$WORK/gantry.start")
figure mpi_latency_us_bare "$BL"
figure mpi_latency_us_gantry "$GL"
figure mpi_latency_gantry_vs_bare_pct "$(pct "$GL" "$BL")"
figure mpi_bandwidth_mbs_bare "$BB"
figure mpi_bandwidth_mbs_gantry "$GB"
figure mpi_bandwidth_gantry_vs_bare_pct "$(pct "$GB" "$BB")"
figure mpi_startup_ms_bare "$BS"
figure mpi_startup_ms_gantry "$GS"
cat <<TABLE
                      bare mpirun   Gantry multinode
latency (8 B, us)     $BL           $GL   ($(pct "$GL" "$BL") % of bare)
bandwidth (1 MiB, MB/s) $BB         $GB   ($(pct "$GB" "$BB") % of bare)
start-up (ms)         $BS           $GS   (submit -> every rank past MPI_Init)
best of $REPS runs, $ITERS round trips per size
TABLE
