# bench/lib.sh - shared by bench/throughput.sh and bench/vs-slurm.sh. Source it; do not run it.
#
# Everything is started by PID on 127.0.0.1 under one temporary directory ($WORK), and torn
# down by an EXIT trap in reverse order of setup (bench_setup installs it). Figures are
# printed on stdout as `figure <name> <value>` lines (easy to grep) plus a human summary;
# progress goes to stderr.
#
# Environment (all optional):
#   GANTRY_BIN      the gantry binary (default: target/release/gantry, built if missing)
#   BENCH_OCI_ROOTS directories (space-separated) whose OCI layouts jobs may run as oci://,
#                   given to the server and the agent as --oci-root
#   BENCH_KEEP=1    keep $WORK (logs, database) instead of removing it at exit
#   GANTRY_LOG      log filter for the server and the agent (default: info)
#   BENCH_IMAGE     the image of the Gantry jobs (default docker://busybox:1, pulled through the
#                   local registry; oci://$GANTRY_TEST_OCI_BUSYBOX:1 reads the OCI layout)
# shellcheck shell=bash disable=SC2034  # (variables set here are read by the scripts)

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$BENCH_DIR/.." && pwd)
GANTRY=${GANTRY_BIN:-$REPO/target/release/gantry}
# An oci:// job image is readable only beneath an --oci-root: its layout's directory by default.
if [ -z "${BENCH_OCI_ROOTS:-}" ] && [[ ${BENCH_IMAGE:-} == oci://* ]]; then
  _layout=${BENCH_IMAGE#oci://}
  BENCH_OCI_ROOTS=$(dirname "${_layout%:*}")
fi

log() { printf '[%s] %s\n' "$(date +%T.%3N)" "$*" >&2; }
die() { log "error: $*"; exit 1; }
now_ms() { date +%s%3N; }
# RFC 3339 (as the API writes times) -> Unix milliseconds.
ts_ms() { date -d "$1" +%s%3N; }
# A printed figure: `figure NAME VALUE`, one per line, for scripts that compare runs.
figure() { printf 'figure %-40s %s\n' "$1" "$2"; }

# --- packages ------------------------------------------------------------------------------
bench_install() { # PKG... : installs the Debian packages among these that are missing
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends "${missing[@]}" >&2 ||
    { apt-get -o DPkg::Lock::Timeout=600 update >&2 &&
      apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends "${missing[@]}" >&2; } ||
    die "could not install ${missing[*]}"
}

# --- setup and teardown --------------------------------------------------------------------
BENCH_CLEANUPS=() # shell commands run at exit, last registered first

bench_on_exit() {
  local rc=$? i
  trap - EXIT INT TERM
  for ((i = ${#BENCH_CLEANUPS[@]} - 1; i >= 0; i--)); do
    eval "${BENCH_CLEANUPS[i]}" || true
  done
  exit "$rc"
}

bench_setup() { # NAME
  [ "$(id -u)" = 0 ] || die "run as root: runc, overlay mounts and cgroups need it"
  # Not /tmp/gantry-bench-*: scripts/cleanup.sh (run by every `make test`, maybe someone else's
  # while this runs) unmounts everything under such directories.
  WORK=$(mktemp -d "/tmp/gbench-$1.XXXXXX")
  # Root in a job's container is an unprivileged host uid (a user namespace) that must pass
  # through the agent's state directory, as under /var/lib: not a private 0700 directory.
  chmod 711 "$WORK"
  trap bench_on_exit EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  BENCH_CLEANUPS+=("bench_remove_work")
  cpuacct_setup
  log "work dir: $WORK"
}

bench_remove_work() {
  [ -n "${WORK:-}" ] && [ -d "$WORK" ] || return 0
  # Anything still mounted under $WORK (overlay rootfs of a container killed mid-run).
  findmnt -rn -o TARGET | awk -v w="$WORK/" 'index($0, w) == 1' | sort -r |
    while read -r m; do umount -l "$m" 2>/dev/null || true; done
  if [ "${BENCH_KEEP:-0}" = 1 ]; then
    log "kept $WORK"
  else
    rm -rf "$WORK"
  fi
}

bench_stop_pid() { # PID [NAME]: SIGTERM, up to 5 s, then SIGKILL; only our own children
  local pid=$1 i
  kill -0 "$pid" 2>/dev/null || return 0
  kill "$pid" 2>/dev/null || true
  for i in $(seq 50); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null || true
  [ -n "${2:-}" ] && log "stopped $2 (pid $pid)"
  return 0
}

# --- statistics ----------------------------------------------------------------------------
# Numbers on stdin -> "n median p90 min max mean" (nearest-rank percentiles).
stats() {
  sort -n | awk '{ v[NR] = $1; s += $1 }
    END {
      if (NR == 0) { print "0 - - - - -"; exit }
      m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
      p = int(0.9 * NR + 0.999999); if (p < 1) p = 1
      printf "%d %.0f %.0f %.0f %.0f %.1f\n", NR, m, v[p], v[1], v[NR], s / NR
    }'
}
rate() { awk -v n="$1" -v ms="$2" 'BEGIN { printf "%.1f", (ms > 0) ? n * 1000 / ms : 0 }'; }
pct() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f", (b > 0) ? 100 * a / b : 0 }'; }

# --- CPU accounting ------------------------------------------------------------------------
# The machine is shared (other people's builds and tests run beside these benchmarks), so CPU
# is counted per source. bench_setup moves this shell (and so everything it starts: server,
# agent, shims, runc, the clients) into its own cpuacct cgroup, CG_OURS; bare runc containers
# land below it (runc puts a container without a cgroupsPath under its own cgroup), Gantry's
# containers below CG_GANTRY (gantry/<node>, kept from being removed by a `keep` child).
CLK_TCK=$(getconf CLK_TCK)
CG_ROOT=/sys/fs/cgroup/cpuacct
CG_OURS=
CG_GANTRY=
cpuacct_setup() {
  [ -w "$CG_ROOT/cgroup.procs" ] || { log "no cpuacct cgroup hierarchy: CPU per source is not counted"; return 0; }
  CG_OURS=$CG_ROOT/gantry-bench-$$
  mkdir -p "$CG_OURS"
  echo $$ > "$CG_OURS/cgroup.procs"
  BENCH_CLEANUPS+=("cpuacct_cleanup")
}
# cpuacct_move PID NAME: puts a process (all its threads, and later children) into its own
# cgroup below CG_OURS, so that its CPU and its children's is counted apart.
cpuacct_move() {
  [ -n "$CG_OURS" ] || return 0
  mkdir -p "$CG_OURS/$2"
  echo "$1" > "$CG_OURS/$2/cgroup.procs" 2>/dev/null || log "could not move pid $1 into $CG_OURS/$2"
}
cpuacct_cleanup() {
  echo $$ > "$CG_ROOT/cgroup.procs" 2>/dev/null || true
  [ -n "$CG_GANTRY" ] && rmdir "$CG_GANTRY/keep" "$CG_GANTRY" "$(dirname "$CG_GANTRY")" 2>/dev/null
  find "$CG_OURS" -depth -type d -exec rmdir {} \; 2>/dev/null
  return 0
}
# cpu_ms ITEM: CPU milliseconds so far of
#   busy | iowait  the whole machine        cg:PATH  a cpuacct cgroup (descendants included)
#   PID            a process, with its waited-for children; PID/self, PID/children: either part
cpu_ms() {
  case $1 in
    busy) awk -v hz="$CLK_TCK" '/^cpu / { print ($2 + $3 + $4 + $7 + $8 + $9) * 1000 / hz }' /proc/stat ;;
    iowait) awk -v hz="$CLK_TCK" '/^cpu / { print $6 * 1000 / hz }' /proc/stat ;;
    cg:*)
      local f=${1#cg:}/cpuacct.usage
      if [ -r "$f" ]; then awk '{ print $1 / 1e6 }' "$f"; else echo 0; fi ;;
    *)
      local pid=${1%/*} mode=all
      [ "$pid" != "$1" ] && mode=${1#*/}
      if [ -r "/proc/$pid/stat" ]; then
        sed 's/^.*) //' "/proc/$pid/stat" | awk -v m="$mode" -v hz="$CLK_TCK" \
          '{ t = (m == "self") ? $12 + $13 : (m == "children") ? $14 + $15 : $12 + $13 + $14 + $15; print t * 1000 / hz }'
      else
        echo 0
      fi ;;
  esac
}
# cpu_mark NAME ITEM...: remembers those counters under NAME.
cpu_mark() {
  local name=$1 item line=""
  shift
  for item in "$@"; do line="$line $(cpu_ms "$item")"; done
  eval "CPU_MARK_$name=\"\$line\""
}
# cpu_since NAME JOBS ITEM...: CPU ms per job of each ITEM since cpu_mark NAME (same ITEMs).
cpu_since() {
  local name=$1 jobs=$2 item now="" before
  shift 2
  for item in "$@"; do now="$now $(cpu_ms "$item")"; done
  eval "before=\"\$CPU_MARK_$name\""
  awk -v a="$before" -v b="$now" -v n="$jobs" 'BEGIN {
    k = split(a, x, " "); split(b, y, " ")
    for (i = 1; i <= k; i++) printf "%s%.1f", (i > 1 ? " " : ""), (y[i] - x[i]) / n
    print ""
  }'
}

# bench_quiet: this machine is shared; wait (up to QUIET_WAIT s, default 120) until the
# background load is under 20% of the machine, so other people's builds do not skew the
# figures. Sets BG_BUSY (% busy in the last 1 s sample).
bench_quiet() {
  local waited=0 a b
  while :; do
    a=$(cpu_ms busy)
    sleep 1
    b=$(cpu_ms busy)
    BG_BUSY=$(awk -v a="$a" -v b="$b" -v n="$(nproc)" 'BEGIN { printf "%.0f", (b - a) / 10 / n }')
    [ "$BG_BUSY" -lt 20 ] && return 0
    if [ "$waited" -ge "${QUIET_WAIT:-120}" ]; then
      log "warning: the machine is still ${BG_BUSY}% busy with other work; figures will be low"
      BENCH_NOISY="${BENCH_NOISY:-} ${BG_BUSY}%"
      return 0
    fi
    [ "$waited" = 0 ] && log "waiting for the machine to be quiet (${BG_BUSY}% busy)"
    waited=$((waited + 2))
    sleep 1
  done
}

# --- test images (the project's local registry) --------------------------------------------
bench_images() {
  local reg_was_up=0
  curl -s -o /dev/null "http://127.0.0.1:${GANTRY_TEST_REGISTRY_PORT:-5055}/v2/" && reg_was_up=1
  sh "$REPO/scripts/test-images.sh" >&2 || die "scripts/test-images.sh failed"
  # shellcheck disable=SC1091
  . "${GANTRY_TEST_DIR:-/tmp/gantry-test}/env"
  if [ "$reg_was_up" = 0 ]; then
    BENCH_CLEANUPS+=("sh '$REPO/scripts/test-images.sh' stop >&2")
  fi
}

# --- the bare runc loop --------------------------------------------------------------------
# Unpacks busybox once into a bundle whose config runs /bin/true on a read-only rootfs (so
# parallel containers can share it), with runc's default spec: pid, ipc, uts, mount, network
# and cgroup namespaces, default capabilities and mounts. No init, no seccomp, no shim.
runc_prepare() {
  RUNC_BUNDLE=$WORK/runc/bundle
  RUNC_ROOT=$WORK/runc/root
  mkdir -p "$WORK/runc" "$RUNC_ROOT"
  umoci unpack --image "$GANTRY_TEST_OCI_BUSYBOX:1" "$RUNC_BUNDLE" >/dev/null 2>&1 ||
    die "umoci unpack $GANTRY_TEST_OCI_BUSYBOX failed"
  # Gantry's config (runc_gantry_config) has a user namespace whose root must pass through.
  chmod 711 "$WORK/runc" "$RUNC_BUNDLE"
  (cd "$RUNC_BUNDLE" && rm -f config.json && runc spec)
  jq '.process.terminal = false | .process.args = ["/bin/true"] | .root.readonly = true
      | .hostname = "bench"' "$RUNC_BUNDLE/config.json" > "$RUNC_BUNDLE/config.tmp"
  mv "$RUNC_BUNDLE/config.tmp" "$RUNC_BUNDLE/config.json"
  BENCH_CLEANUPS+=("runc_cleanup")
  runc --root "$RUNC_ROOT" run --bundle "$RUNC_BUNDLE" "bench-warm-$$" </dev/null ||
    die "runc run of the busybox bundle failed"
}

runc_cleanup() {
  local id
  for id in $(runc --root "$RUNC_ROOT" list -q 2>/dev/null); do
    runc --root "$RUNC_ROOT" delete --force "$id" >/dev/null 2>&1 || true
  done
}

# runc_loop N PARALLEL [BUNDLE]: runs N containers, PARALLEL at a time. Sets RUNC_RATE
# (containers/s), RUNC_MS (total wall ms) and RUNC_CPU (machine CPU ms per container).
runc_loop() {
  local n=$1 par=$2 bundle=${3:-$RUNC_BUNDLE} t0 t1
  cpu_mark runc busy "cg:$CG_OURS"
  t0=$(now_ms)
  seq 1 "$n" | xargs -P "$par" -I{} runc --root "$RUNC_ROOT" run --bundle "$bundle" \
    "bench-$$-$par-{}" || die "runc loop (N=$n, P=$par, $bundle) had failures"
  t1=$(now_ms)
  RUNC_MS=$((t1 - t0))
  RUNC_RATE=$(rate "$n" "$RUNC_MS")
  # ours (the loop and its containers) when counted, else the whole machine
  RUNC_CPU=$(cpu_since runc "$n" busy "cg:$CG_OURS" | awk '{ print ($2 > 0) ? $2 : $1 }')
}

# runc_best N PARALLEL [BUNDLE]: runc_loop RUNC_REPS times (default 3), keeps the fastest (other
# people's work on this shared machine only ever slows a run down).
runc_best() {
  local i best_rate=0 best_ms=0 best_cpu=0
  for i in $(seq "${RUNC_REPS:-3}"); do
    runc_loop "$@"
    if awk -v a="$RUNC_RATE" -v b="$best_rate" 'BEGIN { exit !(a > b) }'; then
      best_rate=$RUNC_RATE best_ms=$RUNC_MS best_cpu=$RUNC_CPU
    fi
  done
  RUNC_RATE=$best_rate RUNC_MS=$best_ms RUNC_CPU=$best_cpu
}

# runc_baseline N: the loop sequentially and with 2 and 4 in parallel, best of RUNC_REPS. Sets RUNC_SEQ_RATE,
# RUNC_SEQ_MS_EACH, RUNC_P2_RATE, RUNC_P4_RATE, RUNC_CPU_MS (CPU per container, 2 parallel).
runc_baseline() {
  local n=${1:-200}
  bench_quiet
  log "bare runc loop: $n containers of /bin/true, 1, 2 and 4 at a time"
  runc_best "$n" 1
  RUNC_SEQ_RATE=$RUNC_RATE
  RUNC_SEQ_MS_EACH=$(awk -v ms="$RUNC_MS" -v n="$n" 'BEGIN { printf "%.1f", ms / n }')
  runc_best "$n" 2
  RUNC_P2_RATE=$RUNC_RATE
  RUNC_CPU_MS=$RUNC_CPU
  runc_best "$n" 4
  RUNC_P4_RATE=$RUNC_RATE
  figure runc.sequential.containers_per_s "$RUNC_SEQ_RATE"
  figure runc.sequential.ms_each "$RUNC_SEQ_MS_EACH"
  figure runc.parallel2.containers_per_s "$RUNC_P2_RATE"
  figure runc.parallel4.containers_per_s "$RUNC_P4_RATE"
  figure runc.cpu_ms_per_container "$RUNC_CPU_MS"
}

# runc_gantry_config N: the same loop with the OCI config Gantry itself writes (confine as the
# container's init, loading the agent's compiled seccomp filter; cgroup limits, masked paths),
# taken from a running Gantry job; only the rootfs (the shared read-only one instead of a per-container overlay), the command and
# the cgroup path differ. Separates what the container's configuration costs from what the
# orchestration costs. Needs the server and agent. Sets RUNCG_* like runc_baseline.
runc_gantry_config() {
  local n=${1:-200} f id i
  f=$WORK/sleep.yaml
  cat > "$f" <<YAML
version: v4
jobs:
  t:
    image: { uri: "${BENCH_IMAGE:-docker://busybox:1}" }
    command: ["/bin/sleep", "2"]
    resource: { cpu: { cores: 1 } }
YAML
  id=$(gantry_submit "$f" capture-config)
  for i in $(seq 100); do
    compgen -G "$GDATA/agent/runtime/containers/*/config.json" >/dev/null && break
    sleep 0.05
  done
  RUNCG_BUNDLE=$WORK/runc/gantry-config
  mkdir -p "$RUNCG_BUNDLE"
  # shellcheck disable=SC2016
  jq --arg root "$RUNC_BUNDLE/rootfs" '.root.path = $root | .root.readonly = true
      | del(.linux.cgroupsPath)
      | .process.args = ["/dev/confine", "--init", "/dev/seccomp.bpf", "/bin/true"]' \
    "$(compgen -G "$GDATA/agent/runtime/containers/*/config.json" | head -1)" > "$RUNCG_BUNDLE/config.json" ||
    die "could not copy a Gantry container's config.json"
  [ "$(gantry_wait "$id" 0.1 30)" = FINISHED ] || die "capture-config workflow $id did not finish"
  runc --root "$RUNC_ROOT" run --bundle "$RUNCG_BUNDLE" "bench-gwarm-$$" </dev/null ||
    die "runc run with Gantry's config failed"
  # Variants, to price the parts of that config: without confine (so without its filter and
  # without an init), confine without its init duty (it execs the command), and the same
  # profile given to runc in config.json as Gantry did before confine (runc 1.1 has libseccomp
  # compile it in every container's init; no init either).
  mkdir -p "$WORK/runc/gantry-noconfine" "$WORK/runc/gantry-noinit" "$WORK/runc/gantry-runcseccomp"
  jq '.process.args = ["/bin/true"]' "$RUNCG_BUNDLE/config.json" \
    > "$WORK/runc/gantry-noconfine/config.json"
  jq '.process.args = ["/dev/confine", "/dev/seccomp.bpf", "/bin/true"]' "$RUNCG_BUNDLE/config.json" \
    > "$WORK/runc/gantry-noinit/config.json"
  jq --slurpfile p "$(dirname "${BASH_SOURCE[0]}")/../crates/gantry-agent/src/runtime/seccomp.json" \
    '.process.args = ["/bin/true"] | .linux.seccomp = $p[0]' \
    "$RUNCG_BUNDLE/config.json" > "$WORK/runc/gantry-runcseccomp/config.json"
  bench_quiet
  log "runc loop with Gantry's container config: $n containers, 1 and 2 at a time, and variants"
  runc_best "$n" 1 "$RUNCG_BUNDLE"
  RUNCG_SEQ_MS_EACH=$(awk -v ms="$RUNC_MS" -v n="$n" 'BEGIN { printf "%.1f", ms / n }')
  runc_best "$n" 2 "$RUNCG_BUNDLE"
  RUNCG_P2_RATE=$RUNC_RATE
  RUNCG_CPU_MS=$RUNC_CPU
  runc_best "$n" 2 "$WORK/runc/gantry-noconfine"
  RUNCG_NOCONFINE_RATE=$RUNC_RATE
  RUNCG_NOCONFINE_CPU_MS=$RUNC_CPU
  runc_best "$n" 2 "$WORK/runc/gantry-noinit"
  RUNCG_NOINIT_RATE=$RUNC_RATE
  RUNCG_NOINIT_CPU_MS=$RUNC_CPU
  runc_best "$n" 2 "$WORK/runc/gantry-runcseccomp"
  RUNCG_RUNCSEC_RATE=$RUNC_RATE
  RUNCG_RUNCSEC_CPU_MS=$RUNC_CPU
  figure runc_gantry_config.sequential.ms_each "$RUNCG_SEQ_MS_EACH"
  figure runc_gantry_config.parallel2.containers_per_s "$RUNCG_P2_RATE"
  figure runc_gantry_config_no_confine.parallel2.containers_per_s "$RUNCG_NOCONFINE_RATE"
  figure runc_gantry_config_no_confine.cpu_ms_per_container "$RUNCG_NOCONFINE_CPU_MS"
  figure runc_gantry_config_no_init.parallel2.containers_per_s "$RUNCG_NOINIT_RATE"
  figure runc_gantry_config_no_init.cpu_ms_per_container "$RUNCG_NOINIT_CPU_MS"
  figure runc_gantry_config_runc_seccomp.parallel2.containers_per_s "$RUNCG_RUNCSEC_RATE"
  figure runc_gantry_config_runc_seccomp.cpu_ms_per_container "$RUNCG_RUNCSEC_CPU_MS"
  figure runc_gantry_config.cpu_ms_per_container "$RUNCG_CPU_MS"
}

# --- Gantry: a real server and one real agent ------------------------------------------------
gantry_build() {
  if [ ! -x "$GANTRY" ]; then
    log "building $GANTRY (cargo build --release -p gantry)"
    (cd "$REPO" && cargo build --release -p gantry >&2) || die "build failed"
  fi
  log "gantry: $GANTRY ($("$GANTRY" --version 2>/dev/null))"
}

api() { # PATH [CURL ARGS...]
  local p=$1
  shift
  curl -sS -f -H "Authorization: Bearer $GTOKEN" "$@" "$GURL/api/v1$p"
}

# gantry_server_start [NAME [SERVER ARGS...]]: starts a server with its data in $WORK/NAME
# (default gantry), passing it any further arguments.
gantry_server_start() {
  GDATA=$WORK/${1:-gantry}
  [ $# -gt 0 ] && shift
  mkdir -p "$GDATA"
  # Port 0: the kernel picks a free port; the server writes its URL into context.toml.
  local roots=() r
  for r in ${BENCH_OCI_ROOTS:-}; do roots+=(--oci-root "$r"); done
  GANTRY_LOG=${GANTRY_LOG:-info} "$GANTRY" server --listen 127.0.0.1:0 --data-dir "$GDATA" "${roots[@]}" "$@" \
    > "$GDATA/server.log" 2>&1 &
  GSERVER_PID=$!
  BENCH_CLEANUPS+=("bench_stop_pid $GSERVER_PID 'gantry server'")
  cpuacct_move "$GSERVER_PID" server
  local i
  for i in $(seq 300); do
    [ -s "$GDATA/context.toml" ] && break
    kill -0 "$GSERVER_PID" 2>/dev/null || die "gantry server exited: $(tail -5 "$GDATA/server.log")"
    sleep 0.1
  done
  GURL=$(sed -n 's/^url *= *"\(.*\)"/\1/p' "$GDATA/context.toml")
  GTOKEN=$(sed -n 's/^token *= *"\(.*\)"/\1/p' "$GDATA/context.toml")
  if [ -z "$GURL" ] || [ -z "$GTOKEN" ]; then die "no url/token in $GDATA/context.toml"; fi
  GAGENT_TOKEN=$(GANTRY_URL=$GURL GANTRY_TOKEN=$GTOKEN "$GANTRY" admin user create bench-agent --agent 2>/dev/null) ||
    die "could not create the agent user"
  log "gantry server up at $GURL (pid $GSERVER_PID)"
}

# gantry_agent_start CPUS: (re)starts the one agent, offering CPUS cores.
GAGENT_PID='' GAGENT_CPUS=''
gantry_agent_start() {
  local cpus=$1 i
  GNODE=bench-$$
  if [ -n "$GAGENT_PID" ] && [ "$GAGENT_CPUS" = "$cpus" ] && kill -0 "$GAGENT_PID" 2>/dev/null; then
    return 0
  fi
  if [ -n "$GAGENT_PID" ]; then
    bench_stop_pid "$GAGENT_PID" "gantry agent"
  else
    BENCH_CLEANUPS+=("gantry_agent_cleanup")
    # Keeps the node's cpuacct cgroup (Gantry removes it when its last container goes), so
    # that it sums the CPU of every container that ran on the node.
    # A process holds it: scripts/cleanup.sh removes empty cgroup directories under gantry/.
    if [ -n "$CG_OURS" ]; then
      CG_GANTRY=$CG_ROOT/gantry/$GNODE
      mkdir -p "$CG_GANTRY/keep"
      sleep 100000 &
      CG_KEEPER=$!
      echo "$CG_KEEPER" > "$CG_GANTRY/keep/cgroup.procs"
      BENCH_CLEANUPS+=("bench_stop_pid $CG_KEEPER")
    fi
  fi
  GAGENT_CPUS=$cpus
  # Agents that serve metrics would all want 127.0.0.1:9464; the benchmark needs none.
  local extra=()
  "$GANTRY" agent --help 2>/dev/null | grep -q -- --metrics-listen && extra+=(--metrics-listen off)
  # JOB_USERNS=off measures jobs without user namespaces (the default is on).
  "$GANTRY" agent --help 2>/dev/null | grep -q -- --job-userns && extra+=(--job-userns "${JOB_USERNS:-on}")
  # oci:// images are read only beneath an --oci-root (the server is given the same list).
  local r
  for r in ${BENCH_OCI_ROOTS:-}; do extra+=(--oci-root "$r"); done
  GANTRY_AGENT_TOKEN=$GAGENT_TOKEN GANTRY_LOG=${GANTRY_LOG:-info} "$GANTRY" agent "${extra[@]}" \
    --server "$GURL" --pool default --name "$GNODE" --cpus "$cpus" \
    --storage-root "$GDATA/storage" --state-dir "$GDATA/agent" \
    --registry-mirror "docker.io=http://$GANTRY_TEST_REGISTRY" \
    --insecure-registry "$GANTRY_TEST_REGISTRY" >> "$GDATA/agent.log" 2>&1 &
  GAGENT_PID=$!
  cpuacct_move "$GAGENT_PID" agent # with its shims and their `runc run`
  for i in $(seq 300); do
    if api /nodes 2>/dev/null | jq -e --arg n "$GNODE" --argjson c "$cpus" \
      'any(.[]; .name == $n and .connected and .capacity.cpus == $c)' >/dev/null; then
      log "gantry agent $GNODE up with $cpus cpus (pid $GAGENT_PID)"
      return 0
    fi
    kill -0 "$GAGENT_PID" 2>/dev/null || die "gantry agent exited: $(tail -5 "$GDATA/agent.log")"
    sleep 0.1
  done
  die "agent $GNODE did not register with $cpus cpus"
}

gantry_agent_cleanup() {
  [ -n "$GAGENT_PID" ] && bench_stop_pid "$GAGENT_PID" "gantry agent"
  # Containers outlive their agent (each under its shim): end any a killed run left behind.
  local root=$GDATA/agent/runc id d
  for id in $(runc --root "$root" list -q 2>/dev/null); do
    runc --root "$root" kill --all "$id" KILL >/dev/null 2>&1 || true
    sleep 0.2
    runc --root "$root" delete --force "$id" >/dev/null 2>&1 || true
  done
  for d in /sys/fs/cgroup/*/gantry/"$GNODE"; do
    [ -d "$d" ] || continue
    find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
  return 0
}

# gantry_submit FILE NAME -> prints the workflow id
gantry_submit() {
  jq -Rs --arg n "$2" '{spec: ., name: $n}' < "$1" |
    api /workflows -X POST -H 'Content-Type: application/json' --data-binary @- | jq -r .id
}

# The workflow's own status: the first "status" key of the detail is the summary's. With many
# tasks the detail is big, so from the listing of summaries then.
gantry_status() { api "/workflows/$1" | grep -o '"status":"[A-Z]*"' | head -1 | cut -d'"' -f4; }
gantry_status_light() { api /workflows | jq -r --arg id "$1" '.[] | select(.id == $id) | .status'; }

# --- a client that never forks, for latency: bash's /dev/tcp and builtins only -------------
# (curl, jq and sleep cost a few ms of CPU and latency each on this 2-core machine, which
# would blur a ~100 ms figure.)
SLEEP_FD=
fast_sleep() { # SECONDS, without forking sleep(1)
  [ -n "$SLEEP_FD" ] || exec {SLEEP_FD}<> <(:)
  read -r -t "$1" -u "$SLEEP_FD" _ || true
}
# http_fast METHOD PATH [BODY]: sets HTTP_BODY to the response body.
http_fast() {
  local hp=${GURL#http://} fd resp="" body=${3:-}
  exec {fd}<>"/dev/tcp/${hp%:*}/${hp#*:}" || return 1
  printf '%s /api/v1%s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' \
    "$1" "$2" "$hp" "$GTOKEN" "${#body}" "$body" >&"$fd"
  IFS= read -r -d '' -u "$fd" resp || true
  exec {fd}>&-
  HTTP_BODY=${resp#*$'\r\n\r\n'}
}
# fast_run BODY_JSON INTERVAL_S: submits, polls until the workflow ends; sets FAST_ID,
# FAST_STATUS and FAST_MS (POST sent -> terminal status seen).
fast_run() {
  local t0 t1
  t0=${EPOCHREALTIME/./}
  http_fast POST /workflows "$1"
  [[ $HTTP_BODY =~ \"id\":\"([0-9a-f-]+)\" ]] || { FAST_STATUS="submit failed: $HTTP_BODY"; return 1; }
  FAST_ID=${BASH_REMATCH[1]}
  while :; do
    http_fast GET "/workflows/$FAST_ID"
    if [[ $HTTP_BODY =~ \"status\":\"([A-Z]+)\" ]]; then
      case ${BASH_REMATCH[1]} in FINISHED | FAILED | STOPPED) break ;; esac
    fi
    fast_sleep "$2"
  done
  t1=${EPOCHREALTIME/./}
  FAST_STATUS=${BASH_REMATCH[1]}
  FAST_MS=$(((t1 - t0) / 1000))
}

# gantry_wait_events ID INTERVAL_S TIMEOUT_S -> prints the final status (or TIMEOUT). Reads only
# the workflow's new events, without forking: cheap for the server and the machine while a
# big array runs.
gantry_wait_events() {
  local id=$1 every=$2 limit=$3 after=0 start=$SECONDS
  while :; do
    http_fast GET "/workflows/$id/events?after=$after"
    if [[ $HTTP_BODY =~ \"message\":\"workflow\ (FINISHED|FAILED|STOPPED)[\":] ]]; then
      echo "${BASH_REMATCH[1]}"
      return 0
    fi
    [[ $HTTP_BODY =~ .*\"seq\":([0-9]+) ]] && after=${BASH_REMATCH[1]}
    if [ $((SECONDS - start)) -ge "$limit" ]; then echo TIMEOUT; return 0; fi
    fast_sleep "$every"
  done
}

# gantry_wait ID INTERVAL_S TIMEOUT_S [light] -> prints the final status (or TIMEOUT)
gantry_wait() {
  local id=$1 every=$2 limit=$3 how=${4:-} st start
  start=$(date +%s)
  while :; do
    if [ "$how" = light ]; then st=$(gantry_status_light "$id"); else st=$(gantry_status "$id"); fi
    case $st in FINISHED | FAILED | STOPPED) echo "$st"; return 0 ;; esac
    if [ $(($(date +%s) - start)) -ge "$limit" ]; then echo TIMEOUT; return 0; fi
    sleep "$every"
  done
}

gantry_array_yaml() { # N FILE [SLEEP_S]: N one-core tasks of /bin/true, or of `sleep SLEEP_S`
  local cmd='"/bin/true"'
  [ -n "${3:-}" ] && cmd="\"sleep\", \"$3\""
  cat > "$2" <<YAML
version: v4
jobs:
  t:
    image: { uri: "${BENCH_IMAGE:-docker://busybox:1}" }
    command: [$cmd]
    task-array: { start: 1, end: $1 }
    resource: { cpu: { cores: 1 } }
YAML
}

gantry_single_yaml() { # FILE
  cat > "$1" <<YAML
version: v4
jobs:
  t:
    image: { uri: "${BENCH_IMAGE:-docker://busybox:1}" }
    command: ["/bin/true"]
    resource: { cpu: { cores: 1 } }
YAML
}

# Server-side span of a workflow: created_at -> ended_at, in ms.
gantry_span_ms() {
  local d c e
  d=$(api "/workflows/$1")
  c=$(jq -r .created_at <<<"$d")
  e=$(jq -r .ended_at <<<"$d")
  echo $(($(ts_ms "$e") - $(ts_ms "$c")))
}

# gantry_array N LABEL TIMEOUT_S: submits an N-task array of /bin/true and waits for it. Sets
# GANTRY_RATE (jobs/s, server-side submit -> FINISHED), GANTRY_WALL_MS (client-side), GANTRY_WF.
gantry_array() {
  local n=$1 label=$2 limit=${3:-300} f id t0 t1 st span fin
  f=$WORK/array-$n.yaml
  gantry_array_yaml "$n" "$f"
  bench_quiet
  log "gantry: $n-task array of /bin/true ($label)"
  local reg_pid
  reg_pid=$(cat "${GANTRY_TEST_DIR:-/tmp/gantry-test}/registry/registry.pid" 2>/dev/null || echo 0)
  local items=(busy iowait "cg:$CG_OURS" "cg:$CG_GANTRY" "cg:$CG_OURS/server" "cg:$CG_OURS/agent"
    "$GAGENT_PID/self" "$GAGENT_PID/children" "$reg_pid")
  cpu_mark array "${items[@]}"
  t0=$(now_ms)
  id=$(gantry_submit "$f" "array-$n-$label") || die "submit failed"
  st=$(gantry_wait_events "$id" 0.5 "$limit")
  t1=$(now_ms)
  GANTRY_WF=$id
  GANTRY_WALL_MS=$((t1 - t0))
  # CPU ms per job: 1 machine busy, 2 machine iowait, 3 ours (but the containers), 4 Gantry's
  # containers, 5 server, 6 agent's cgroup (agent, shims, runc run), 7 agent process,
  # 8 its waited-for children (shim launchers, runc state/delete/kill), 9 registry
  GANTRY_CPU=$(cpu_since array "$n" "${items[@]}")
  if [ "$st" != FINISHED ]; then
    fin=$(api "/workflows/$id" | jq '[.tasks[] | select(.status == "FINISHED")] | length')
    log "workflow $id ended $st with $fin/$n tasks finished after ${GANTRY_WALL_MS} ms; the others:"
    api "/workflows/$id" | jq -r '.tasks[] | select(.status != "FINISHED") |
      "  \(.job)[\(.index)] \(.status): \(.reason // "") | attempts: \([.attempts[] | "\(.number) \(.status) \(.cause // "") \(.exit_code // "") \(.reason // "")"] | join("; "))"' >&2
    GANTRY_FAILED="${GANTRY_FAILED:-} $label:$((n - fin))"
    GANTRY_RATE=$(rate "$fin" "$GANTRY_WALL_MS")
    return 1
  fi
  span=$(gantry_span_ms "$id")
  GANTRY_RATE=$(rate "$n" "$span")
  log "workflow $id FINISHED: $span ms server-side, $GANTRY_WALL_MS ms seen by the client"
}

# Per-stage timing of a workflow's tasks from its events (ms since the workflow was created):
# placed (task STARTED) -> running -> attempt ended -> task FINISHED, and the workflow's end.
# Prints one line per task: placed running ended finished (absolute Unix ms).
gantry_task_timeline() {
  api "/workflows/$1/events" | jq -r '
    def ms: if test("\\.") then (split(".") as $p |
        (($p[0] + "Z") | fromdateiso8601) * 1000 + (($p[1] | rtrimstr("Z")) + "000" | .[0:3] | tonumber))
      else fromdateiso8601 * 1000 end;
    [ .[] | select(.task != null) ] | group_by(.task)[] |
    [ (map(select(.kind == "task.placed")) | .[0].time),
      (map(select(.kind == "task.running")) | .[0].time),
      (map(select(.kind == "attempt.ended")) | .[0].time),
      (map(select(.kind == "task.status" and (.message | startswith("FINISHED")))) | .[0].time) ]
    | map(if . == null then "null" else ms end) | @tsv'
}

# gantry_latency RUNS: one-job workflows one after another; client-side (POST sent ->
# FINISHED seen, polling every 5 ms without forking) and server-side (created_at -> ended_at).
# Sets LAT_MED, LAT_P90 (client), LAT_SMED, LAT_SP90 (server), LAT_STAGES.
gantry_latency() {
  local runs=${1:-20} f i body c e d
  f=$WORK/single.yaml
  gantry_single_yaml "$f"
  body=$(jq -Rs '{spec: ., name: "single"}' < "$f")
  bench_quiet
  log "gantry: $runs single-job workflows, one at a time"
  : > "$WORK/lat-client" ; : > "$WORK/lat-server" ; : > "$WORK/lat-stages"
  for i in $(seq "$runs"); do
    fast_run "$body" 0.005 || die "single-job workflow: $FAST_STATUS"
    [ "$FAST_STATUS" = FINISHED ] || die "single-job workflow $FAST_ID ended $FAST_STATUS"
    echo "$FAST_MS" >> "$WORK/lat-client"
    d=$(api "/workflows/$FAST_ID")
    c=$(ts_ms "$(jq -r .created_at <<<"$d")")
    e=$(ts_ms "$(jq -r .ended_at <<<"$d")")
    echo $((e - c)) >> "$WORK/lat-server"
    # stages: created->placed, placed->running, running->exited, exited->task FINISHED,
    # task FINISHED->workflow FINISHED
    gantry_task_timeline "$FAST_ID" | awk -v c="$c" -v e="$e" -F'\t' \
      '{ print $1 - c, $2 - $1, $3 - $2, $4 - $3, e - $4 }' >> "$WORK/lat-stages"
    sleep 0.2
  done
  read -r _ LAT_MED LAT_P90 LAT_MIN LAT_MAX _ < <(stats < "$WORK/lat-client")
  read -r _ LAT_SMED LAT_SP90 _ _ _ < <(stats < "$WORK/lat-server")
  LAT_STAGES=""
  local col name
  for col in 1 2 3 4 5; do
    name=$(echo "placed running exited task_finished wf_finished" | cut -d' ' -f"$col")
    LAT_STAGES="$LAT_STAGES $name=$(cut -d' ' -f"$col" "$WORK/lat-stages" | stats | cut -d' ' -f2)"
  done
}
