#!/usr/bin/env bash
# bench/proxy.sh - the endpoint proxy against nginx, with one nginx backend serving a 2 KB file:
#   - throughput: wrk (2 threads, 64 connections, $PROXY_SECS s after a 2 s warm-up) straight to
#     the backend, through nginx as a reverse proxy (2 workers, keepalive upstream) and through a
#     Gantry persistent endpoint (http://SERVER/e/bench/2k.html), one after the other;
#   - added latency at a fixed rate: $PACE_RATE requests/s on each path with a small open-loop
#     client built here (C, wrk2-style: every latency is counted from the request's scheduled
#     time, so a stall is charged to every request it delays). At saturation on 2 cores a p99 is
#     mostly queueing, so the latency targets are judged here. The three paths take turns in 1 s
#     slices ($PACE_SECS each) so that other work on a shared machine falls on all of them alike;
#     besides the pooled percentiles it prints the median over the slices of each slice's p99,
#     which a few disturbed seconds do not move, and the p99 counted from the write (service time
#     without the client's queueing);
#   - a takeover under load: while wrk hammers the Gantry URL (64 connections), a v2 workflow
#     attaches to the same endpoint; wrk runs from 3 s before the submit until 3 s after v1 is
#     STOPPED. Figures: its errors (non-2xx and socket errors; the target is 0) and requests/s.
# Prints `figure NAME VALUE` lines, then a summary with the targets (Gantry's requests/s >=
# nginx's, Gantry's added p99 < 1 ms, no errors in the takeover). Needs root (the agent runs
# containers). About 2.5 minutes on a quiet machine; each wait for quiet is capped at QUIET_WAIT.
#
# The backend is the same process for all three paths, so the comparison is fair: Debian's
# nginx (the binary the reverse proxy runs), run as a Gantry service (`persist: true`, attached to
# the public endpoint `bench`, an http-get readiness probe). Its image is an OCI layout built here
# from the host's files (busybox-static, /usr/sbin/nginx and the libraries `ldd` names; one
# reproducible layer), run as oci://LAYOUT:1. The backend listens on the container's address on
# the agent's CNI bridge: wrk reaches it there, the nginx proxy and Gantry forward to it.
#
# Reading the figures: wrk, the proxy and the backend share the 2 cores, so at saturation the
# proxy's requests/s depend on its CPU per request and on how the scheduler shares the cores out
# among everyone's threads. `cpu_ms_per_1k_requests` is the proxy's own CPU (its processes' user
# and system time; network softirq time that the kernel does not charge to a process is not in
# it). The machine is shared with other people's builds: bench_quiet waits for it to calm
# down, the summary says when it did not, and PROXY_ROUNDS=3 reports the median round.
#
# Environment (besides lib.sh's): PROXY_SECS (10), PROXY_CONNS (64), PROXY_ROUNDS (1),
# PACE_RATE (2000), PACE_SECS (10), PACE_CONNS (8 per path), QUIET_WAIT (30 s), PROXY_PERF=1
# (a perf profile of the server under the Gantry wrk load: $WORK/perf.data and perf.txt, kept
# with BENCH_KEEP=1).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

PROXY_SECS=${PROXY_SECS:-10}
PROXY_CONNS=${PROXY_CONNS:-64}
PACE_RATE=${PACE_RATE:-2000}
PACE_SECS=${PACE_SECS:-10}
PACE_CONNS=${PACE_CONNS:-8}
PROXY_ROUNDS=${PROXY_ROUNDS:-1}
QUIET_WAIT=${QUIET_WAIT:-30}

bench_setup proxy
bench_install wrk nginx curl jq gcc libc6-dev iproute2
gantry_build
bench_images

# --- the paced client -------------------------------------------------------------------------
cat > "$WORK/pace.c" <<'C'
/* pace - an open-loop HTTP/1.1 GET client (wrk2-style) over several targets, interleaved.
 * Requests are scheduled at a fixed rate and each latency is measured from the request's
 * scheduled time, so a stall is charged to every request it delays. The targets take turns in
 * slices (a warm-up slice each, then ROUNDS rounds), so that a disturbance of a shared machine
 * falls on all of them alike.
 * Usage: pace RATE SLICE_S ROUNDS CONNS NAME=IP:PORT/PATH...
 * Prints per target: RESULT NAME count errors p50 p90 p99 p99.9 max svc_p50 svc_p99 slice_p50
 * slice_p99 (ms; svc_* from when the request was written, the others from when it was due;
 * slice_*: the median over the slices of each slice's percentile, which a few disturbed
 * seconds on a shared machine do not move). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define TIMER 0xffffffffu
typedef struct { int fd, busy; uint64_t due, sent; size_t len; char buf[16384]; } conn;
typedef struct {
  char *name, req[512];
  size_t reqlen, n, cap;
  struct sockaddr_in addr;
  conn *cs;
  uint32_t *lat, *svc, *s50, *s99; /* s50, s99: each slice's p50 and p99 */
  size_t slices;
  uint64_t errors;
} target;
static int ep, tfd, nconn;

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}
static void die(const char *m) { perror(m); exit(2); }
static void dial(target *g, int i) {
  conn *c = &g->cs[i];
  int one = 1;
  c->fd = socket(AF_INET, SOCK_STREAM, 0);
  if (c->fd < 0) die("socket");
  if (connect(c->fd, (struct sockaddr *)&g->addr, sizeof g->addr) < 0) die("connect");
  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fcntl(c->fd, F_SETFL, O_NONBLOCK);
  c->busy = 0; c->len = 0;
}
static void redial(target *g, int i) {
  epoll_ctl(ep, EPOLL_CTL_DEL, g->cs[i].fd, NULL);
  close(g->cs[i].fd);
  dial(g, i);
  struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
  if (epoll_ctl(ep, EPOLL_CTL_ADD, g->cs[i].fd, &ev) < 0) die("epoll_ctl");
}
static void watch(target *g, int on) {
  for (int i = 0; i < nconn; i++) {
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
    if (epoll_ctl(ep, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, g->cs[i].fd, &ev) < 0) die("epoll_ctl");
  }
}
static void arm(uint64_t at) { /* 0: disarm */
  struct itimerspec its = {0};
  its.it_value.tv_sec = (time_t)(at / 1000000000ull);
  its.it_value.tv_nsec = (long)(at % 1000000000ull);
  timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);
}
static int cmp(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}
static double pct(uint32_t *v, size_t n, double p) {
  if (!n) return 0;
  size_t i = (size_t)(p * n + 0.999999);
  if (i < 1) i = 1;
  if (i > n) i = n;
  return v[i - 1] / 1000.0;
}
/* 1: a whole response is in c->buf (its status in *status), 0: not yet, -1: malformed */
static int complete(conn *c, int *status) {
  c->buf[c->len] = 0;
  char *end = strstr(c->buf, "\r\n\r\n");
  if (!end) return c->len >= sizeof c->buf - 1 ? -1 : 0;
  *status = atoi(c->buf + 9);
  size_t head = (size_t)(end - c->buf) + 4;
  *end = 0;
  char *cl = strcasestr(c->buf, "\ncontent-length:");
  int chunked = strcasestr(c->buf, "\ntransfer-encoding: chunked") != NULL;
  *end = '\r';
  if (cl) return c->len >= head + (size_t)atol(cl + 16) ? 1 : 0;
  if (chunked) return c->len >= head + 5 && memcmp(c->buf + c->len - 5, "0\r\n\r\n", 5) == 0;
  return 1;
}

/* One slice: `total` requests at `interval` ns on g's connections; recorded when `record`. */
static void slice(target *g, uint64_t interval, uint64_t total, int record) {
  size_t n0 = g->n;
  uint64_t t0 = now_ns() + 1000000ull, next = 0, done = 0, give_up = t0 + total * interval + 5000000000ull;
  struct epoll_event evs[64];
  watch(g, 1);
  arm(t0);
  while (done < total && now_ns() < give_up) {
    int k = epoll_wait(ep, evs, 64, 100);
    if (k < 0 && errno != EINTR) die("epoll_wait");
    for (int e = 0; e < k; e++) {
      uint32_t i = evs[e].data.u32;
      if (i == TIMER) { uint64_t x; if (read(tfd, &x, sizeof x) < 0) {} continue; }
      conn *c = &g->cs[i];
      ssize_t r = read(c->fd, c->buf + c->len, sizeof c->buf - 1 - c->len);
      if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      int status = 0, ok = r > 0;
      if (ok) { c->len += (size_t)r; ok = complete(c, &status); if (ok == 0) continue; }
      uint64_t t = now_ns();
      if (c->busy) {
        done++;
        if (ok == 1 && status == 200) {
          if (record && g->n < g->cap) {
            g->lat[g->n] = (uint32_t)((t - c->due) / 1000);
            g->svc[g->n] = (uint32_t)((t - c->sent) / 1000);
            g->n++;
          }
        } else if (record) g->errors++;
      }
      c->busy = 0; c->len = 0;
      if (ok != 1) redial(g, (int)i); /* closed or malformed: a fresh connection */
    }
    uint64_t t = now_ns(), due = t < t0 ? 0 : (t - t0) / interval + 1;
    if (due > total) due = total;
    for (int i = 0; i < nconn && next < due; i++) { /* what is due, on idle connections */
      conn *c = &g->cs[i];
      if (c->busy) continue;
      c->due = t0 + next * interval; next++;
      if (write(c->fd, g->req, g->reqlen) != (ssize_t)g->reqlen) {
        if (record) g->errors++;
        done++;
        redial(g, i);
        continue;
      }
      c->busy = 1; c->sent = now_ns(); c->len = 0;
    }
    /* a backlog is sent as responses free connections; else wake for the next one due */
    arm(next < due || next >= total ? 0 : t0 + next * interval);
  }
  arm(0);
  if (record) g->errors += total - done; /* not sent, or not answered in time */
  for (int i = 0; i < nconn; i++) {
    conn *c = &g->cs[i];
    if (c->busy) redial(g, i);
  }
  watch(g, 0);
  if (record && g->n > n0) {
    size_t m = g->n - n0;
    uint32_t *v = malloc(m * sizeof *v);
    memcpy(v, g->lat + n0, m * sizeof *v);
    qsort(v, m, sizeof *v, cmp);
    g->s50[g->slices] = (uint32_t)(pct(v, m, .5) * 1000);
    g->s99[g->slices] = (uint32_t)(pct(v, m, .99) * 1000);
    g->slices++;
    free(v);
  }
}

int main(int argc, char **argv) {
  if (argc < 6) { fprintf(stderr, "usage: pace RATE SLICE_S ROUNDS CONNS NAME=IP:PORT/PATH...\n"); return 2; }
  double rate = atof(argv[1]), secs = atof(argv[2]);
  int rounds = atoi(argv[3]), nt = argc - 5;
  nconn = atoi(argv[4]);
  uint64_t interval = (uint64_t)(1e9 / rate), per = (uint64_t)(rate * secs);
  ep = epoll_create1(0);
  tfd = timerfd_create(CLOCK_MONOTONIC, 0);
  struct epoll_event tev = {.events = EPOLLIN, .data.u32 = TIMER};
  epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &tev);
  target *ts = calloc((size_t)nt, sizeof *ts);
  for (int j = 0; j < nt; j++) {
    target *g = &ts[j];
    char *spec = argv[5 + j], *eq = strchr(spec, '='), *colon, *slash;
    if (!eq || !(colon = strchr(eq, ':')) || !(slash = strchr(colon, '/'))) { fprintf(stderr, "bad target %s\n", spec); return 2; }
    g->name = strndup(spec, (size_t)(eq - spec));
    char *ip = strndup(eq + 1, (size_t)(colon - eq - 1)), *port = strndup(colon + 1, (size_t)(slash - colon - 1));
    g->addr.sin_family = AF_INET;
    g->addr.sin_port = htons((uint16_t)atoi(port));
    if (inet_pton(AF_INET, ip, &g->addr.sin_addr) != 1) die("address");
    g->reqlen = (size_t)snprintf(g->req, sizeof g->req, "GET %s HTTP/1.1\r\nHost: %s:%s\r\n\r\n", slash, ip, port);
    g->cap = per * (uint64_t)rounds;
    g->lat = malloc(g->cap * sizeof *g->lat);
    g->svc = malloc(g->cap * sizeof *g->svc);
    g->s50 = malloc((size_t)rounds * sizeof *g->s50);
    g->s99 = malloc((size_t)rounds * sizeof *g->s99);
    g->cs = calloc((size_t)nconn, sizeof *g->cs);
    for (int i = 0; i < nconn; i++) dial(g, i);
  }
  for (int j = 0; j < nt; j++) slice(&ts[j], interval, per / 2 + 1, 0); /* warm-up */
  for (int r = 0; r < rounds; r++)
    for (int j = 0; j < nt; j++) slice(&ts[j], interval, per, 1);
  for (int j = 0; j < nt; j++) {
    target *g = &ts[j];
    qsort(g->lat, g->n, sizeof *g->lat, cmp);
    qsort(g->svc, g->n, sizeof *g->svc, cmp);
    qsort(g->s50, g->slices, sizeof *g->s50, cmp);
    qsort(g->s99, g->slices, sizeof *g->s99, cmp);
    printf("RESULT %s %zu %llu %.3f %.3f %.3f %.3f %.3f %.3f %.3f %.3f %.3f\n", g->name, g->n,
           (unsigned long long)g->errors, pct(g->lat, g->n, .5), pct(g->lat, g->n, .9),
           pct(g->lat, g->n, .99), pct(g->lat, g->n, .999), g->n ? g->lat[g->n - 1] / 1000.0 : 0,
           pct(g->svc, g->n, .5), pct(g->svc, g->n, .99), pct(g->s50, g->slices, .5),
           pct(g->s99, g->slices, .5));
  }
  return 0;
}
C
cc -O2 -Wall -o "$WORK/pace" "$WORK/pace.c" || die "could not build the paced client"

# --- the backend image: Debian's nginx and busybox in an OCI layout --------------------------
# nginx_rootfs DIR VERSION: busybox (for the service's script), nginx, its libraries, a config
# (2 workers, keepalive without a request limit, no access log) and the 2 KB file.
nginx_rootfs() {
  local r=$1 v=$2 lib a
  mkdir -p "$r"/{bin,sbin,usr/bin,usr/sbin,etc/nginx,www,tmp,proc,sys,dev,root,var/run}
  chmod 1777 "$r/tmp"
  cp "$(command -v busybox)" "$r/bin/busybox"
  for a in $("$r/bin/busybox" --list); do [ "$a" = busybox ] || ln -sf busybox "$r/bin/$a"; done
  cp /usr/sbin/nginx "$r/usr/sbin/nginx"
  for lib in $(ldd /usr/sbin/nginx | grep -o '/[^ ]*'); do
    mkdir -p "$r$(dirname "$lib")"
    cp -L "$lib" "$r$lib"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' > "$r/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' > "$r/etc/group"
  cat > "$r/etc/nginx/bench.conf" <<'CONF'
daemon off;
user root root;
worker_processes 2;
pid /tmp/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 100000000;
  keepalive_timeout 300s;
  default_type text/html;
  client_body_temp_path /tmp/body;
  proxy_temp_path /tmp/proxy;
  fastcgi_temp_path /tmp/fastcgi;
  uwsgi_temp_path /tmp/uwsgi;
  scgi_temp_path /tmp/scgi;
  server {
    listen 8080 default_server;
    root /www;
  }
}
CONF
  # 2,048 bytes of printable text; the same on every run.
  seq 1 2000 | sha256sum | awk '{ for (i = 0; i < 32; i++) printf "%s", $1 }' | head -c 2047 > "$r/www/2k.html"
  echo >> "$r/www/2k.html"
  echo "$v" > "$r/www/version.txt"
  chown -R 0:0 "$r"
}

# oci_layout ROOTFS LAYOUT TAG: one gzip layer, reproducibly (as scripts/test-images.sh does).
oci_layout() {
  local r=$1 oci=$2 tag=$3 created diffid d s cfg cs md ms
  export SOURCE_DATE_EPOCH=1700000000
  created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
  rm -rf "$oci"
  mkdir -p "$oci/blobs/sha256"
  tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --clamp-mtime --numeric-owner \
    --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime -C "$r" -cf "$oci/layer.tar" .
  diffid=$(sha256sum "$oci/layer.tar" | cut -d' ' -f1)
  gzip -n -1 -c "$oci/layer.tar" > "$oci/layer.tgz"
  rm "$oci/layer.tar"
  d=$(sha256sum "$oci/layer.tgz" | cut -d' ' -f1)
  s=$(stat -c %s "$oci/layer.tgz")
  mv "$oci/layer.tgz" "$oci/blobs/sha256/$d"
  jq -cnj --arg c "$created" --arg id "sha256:$diffid" '{created: $c, architecture: "amd64", os: "linux",
     config: {Env: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"], Cmd: ["/bin/sh"]},
     rootfs: {type: "layers", diff_ids: [$id]}, history: [{created: $c, created_by: "bench/proxy.sh"}]}' > "$oci/c.tmp"
  cfg=$(sha256sum "$oci/c.tmp" | cut -d' ' -f1)
  cs=$(stat -c %s "$oci/c.tmp")
  mv "$oci/c.tmp" "$oci/blobs/sha256/$cfg"
  jq -cnj --arg c "sha256:$cfg" --argjson cs "$cs" --arg l "sha256:$d" --argjson ls "$s" '{schemaVersion: 2,
     mediaType: "application/vnd.oci.image.manifest.v1+json",
     config: {mediaType: "application/vnd.oci.image.config.v1+json", digest: $c, size: $cs},
     layers: [{mediaType: "application/vnd.oci.image.layer.v1.tar+gzip", digest: $l, size: $ls}]}' > "$oci/m.tmp"
  md=$(sha256sum "$oci/m.tmp" | cut -d' ' -f1)
  ms=$(stat -c %s "$oci/m.tmp")
  mv "$oci/m.tmp" "$oci/blobs/sha256/$md"
  jq -cn --arg m "sha256:$md" --argjson ms "$ms" --arg t "$tag" '{schemaVersion: 2, manifests: [{
     mediaType: "application/vnd.oci.image.manifest.v1+json", digest: $m, size: $ms,
     annotations: {"org.opencontainers.image.ref.name": $t}}]}' > "$oci/index.json"
  printf '{"imageLayoutVersion":"1.0.0"}' > "$oci/oci-layout"
}

log "building the nginx backend images (nginx $(nginx -v 2>&1 | sed 's/.*\///'))"
for v in v1 v2; do
  nginx_rootfs "$WORK/rootfs-$v" "$v"
  oci_layout "$WORK/rootfs-$v" "$WORK/nginx-$v" 1
done

# --- Gantry: server, agent, the endpoint and the v1 service ---------------------------------
# The backend's images are layouts in $WORK: server and agent may read layouts there only.
BENCH_OCI_ROOTS=$WORK
gantry_server_start
# The backend asks for 2 cores (on a 2-core machine its CPU quota is then no limit); 4 offered
# let v1 and v2 run side by side during the takeover.
gantry_agent_start 4
gctl() { GANTRY_URL=$GURL GANTRY_TOKEN=$GTOKEN "$GANTRY" "$@"; }
gctl endpoint create bench --scope public --drain-timeout 30s >/dev/null || die "endpoint create failed"

service_yaml() { # VERSION FILE
  cat > "$2" <<YAML
version: v4
services:
  web:
    image: { uri: "oci://$WORK/nginx-$1:1" }
    persist: true
    resource: { cpu: { cores: 2 } }
    script: |
      #!/bin/sh
      echo "bench-addr \$(ip -4 -o addr show dev eth0 | awk '{ print \$4 }' | cut -d/ -f1)"
      exec /usr/sbin/nginx -e stderr -c /etc/nginx/bench.conf
    network:
      ports: [ { name: http, port: 8080 } ]
      endpoints:
        - { name: web, port-name: http, protocol: http, attach: bench }
    readiness-probe:
      http-get: { path: /2k.html, port: 8080 }
      period-seconds: 1
YAML
}

endpoint_json() { api /endpoints/bench; }
wait_serving() { # WORKFLOW TIMEOUT_S
  local i e
  for i in $(seq $(($2 * 4))); do
    e=$(endpoint_json) || true
    if jq -e --arg w "$1" '.status == "SERVING" and .workflow_id == $w and .takeover == null' <<<"$e" >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.25
  done
  log "endpoint: $e"
  api "/workflows/$1" | jq -c '{status, tasks: [.tasks[] | {job, status, reason}]}' >&2 || true
  tail -20 "$GDATA/agent.log" >&2
  die "endpoint bench was not served by workflow $1 within $2 s"
}
backend_addr() { # WORKFLOW -> the container's address, from the line its script printed
  local i a
  for i in $(seq 100); do
    a=$(api "/workflows/$1/logs/web?stream=stdout" 2>/dev/null | sed -n 's/^bench-addr \([0-9.]*\)$/\1/p' | tail -1)
    [ -n "$a" ] && { echo "$a"; return 0; }
    sleep 0.2
  done
  die "workflow $1 did not print its address"
}

service_yaml v1 "$WORK/v1.yaml"
service_yaml v2 "$WORK/v2.yaml"
V1=$(gantry_submit "$WORK/v1.yaml" proxy-bench-v1)
[ -n "$V1" ] && [ "$V1" != null ] || die "submitting v1 failed"
wait_serving "$V1" 120
BACKEND=$(backend_addr "$V1")
log "v1 ($V1) serves endpoint bench from $BACKEND:8080"

# --- nginx as the reverse proxy, on the host ---------------------------------------------------
free_port() { # one that no socket uses, below the ephemeral range (where clients' ports come from)
  local p lo
  read -r lo _ < /proc/sys/net/ipv4/ip_local_port_range
  for p in $(shuf -i 10000-$((lo > 11000 ? lo - 1 : 30000)) -n 100); do
    [ -z "$(ss -tanH "sport = :$p")" ] && { echo "$p"; return 0; }
  done
  die "no free port"
}
NG=$WORK/nginx-proxy
mkdir -p "$NG"
NGPORT=$(free_port)
cat > "$NG/nginx.conf" <<CONF
daemon off;
worker_processes 2;
pid $NG/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 100000000;
  keepalive_timeout 300s;
  client_body_temp_path $NG/body;
  proxy_temp_path $NG/proxy;
  fastcgi_temp_path $NG/fastcgi;
  uwsgi_temp_path $NG/uwsgi;
  scgi_temp_path $NG/scgi;
  upstream backend {
    server $BACKEND:8080;
    keepalive 128;
    keepalive_requests 100000000;
    keepalive_timeout 300s;
  }
  server {
    listen 127.0.0.1:$NGPORT;
    location / {
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
CONF
nginx -e "$NG/error.log" -p "$NG" -c "$NG/nginx.conf" &
NGINX_PID=$!
BENCH_CLEANUPS+=("bench_stop_pid $NGINX_PID 'nginx proxy'")

GPORT=${GURL##*:}
DIRECT_URL=http://$BACKEND:8080/2k.html
NGINX_URL=http://127.0.0.1:$NGPORT/2k.html
GANTRY_URL_EP=http://127.0.0.1:$GPORT/e/bench/2k.html
want=$(md5sum < "$WORK/rootfs-v1/www/2k.html")
for u in "$DIRECT_URL" "$NGINX_URL" "$GANTRY_URL_EP"; do
  for i in $(seq 50); do
    got=$(curl -sS -f "$u" 2>/dev/null | md5sum) && [ "$got" = "$want" ] && break
    sleep 0.1
  done
  [ "$got" = "$want" ] || die "$u does not serve the 2 KB file"
done
log "paths: direct $DIRECT_URL, nginx $NGINX_URL, gantry $GANTRY_URL_EP"

# --- CPU of each proxy ----------------------------------------------------------------------
proc_ms() { # PID... -> CPU ms of those processes (threads included)
  local p t=0
  for p in "$@"; do
    [ -r "/proc/$p/stat" ] || continue
    t=$(sed 's/^.*) //' "/proc/$p/stat" | awk -v t="$t" -v hz="$CLK_TCK" '{ print t + ($12 + $13) * 1000 / hz }')
  done
  echo "$t"
}
proxy_pids() { # direct|nginx|gantry
  case $1 in
    nginx) echo "$NGINX_PID $(pgrep -P "$NGINX_PID" | tr '\n' ' ')" ;;
    gantry) echo "$GSERVER_PID" ;;
    *) echo "" ;;
  esac
}

# --- throughput -------------------------------------------------------------------------------
cat > "$WORK/result.lua" <<'LUA'
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT %.1f %.3f %.3f %d %d %d %d\n", summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, e.status,
    e.connect + e.read + e.write + e.timeout, summary.requests, summary.bytes))
end
LUA

run_wrk() { # NAME URL: one timed run, appended to $WORK/wrk.NAME as "rps p50 p99 errors cpu_per_1k"
  local name=$1 url=$2 out pids c0 c1 rps p50 p99 status sock total bytes cpu=-
  wrk -t2 -c"$PROXY_CONNS" -d2s "$url" >/dev/null # warm: connections, pools, caches
  pids=$(proxy_pids "$name")
  c0=$(proc_ms $pids)
  out=$(wrk -t2 -c"$PROXY_CONNS" -d"${PROXY_SECS}s" -s "$WORK/result.lua" "$url" | grep '^RESULT') ||
    die "wrk against $url failed"
  c1=$(proc_ms $pids)
  read -r _ rps p50 p99 status sock total bytes <<<"$out"
  [ -n "$pids" ] && cpu=$(awk -v a="$c0" -v b="$c1" -v n="$total" 'BEGIN { printf "%.1f", (b - a) * 1000 / n }')
  log "$name: $rps requests/s, p50 $p50 ms, p99 $p99 ms, $status non-2xx, $sock socket errors, $((bytes / (total > 0 ? total : 1))) B each, proxy CPU $cpu ms per 1,000"
  echo "$rps $p50 $p99 $((status + sock)) $cpu" >> "$WORK/wrk.$name"
}

log "throughput: wrk -t2 -c$PROXY_CONNS -d${PROXY_SECS}s on each path, $PROXY_ROUNDS round(s)"
for r in $(seq "$PROXY_ROUNDS"); do
  bench_quiet
  for p in direct nginx gantry; do
    case $p in direct) u=$DIRECT_URL ;; nginx) u=$NGINX_URL ;; gantry) u=$GANTRY_URL_EP ;; esac
    run_wrk "$p" "$u"
  done
done
# Per path, its round with the median requests/s.
for p in direct nginx gantry; do
  read -r rps p50 p99 errs cpu < <(sort -n "$WORK/wrk.$p" | awk '{ l[NR] = $0 } END { print l[int((NR + 1) / 2)] }')
  figure "proxy.wrk.$p.requests_per_s" "$rps"
  figure "proxy.wrk.$p.p50_ms" "$p50"
  figure "proxy.wrk.$p.p99_ms" "$p99"
  figure "proxy.wrk.$p.errors" "$(awk '{ s += $4 } END { print s }' "$WORK/wrk.$p")"
  [ "$cpu" != - ] && figure "proxy.wrk.$p.cpu_ms_per_1k_requests" "$cpu"
  eval "RPS_$p=$rps P99_$p=$p99 CPU_$p=$cpu"
done
# Ratios are taken within a round (the paths ran back to back), then the median over rounds.
ratio() { # A B: the median over rounds of A's requests/s over B's
  paste "$WORK/wrk.$1" "$WORK/wrk.$2" | awk '{ print $1 / $6 }' | sort -g |
    awk '{ v[NR] = $1 } END { printf "%.2f", v[int((NR + 1) / 2)] }'
}
X_nginx=$(ratio nginx direct)
X_gantry=$(ratio gantry direct)
X_direct=1.00
GANTRY_OVER_NGINX=$(ratio gantry nginx)
figure proxy.wrk.nginx_over_direct "$X_nginx"
figure proxy.wrk.gantry_over_direct "$X_gantry"
figure proxy.wrk.gantry_over_nginx "$GANTRY_OVER_NGINX"

if [ "${PROXY_PERF:-0}" = 1 ]; then
  bench_install linux-perf
  log "perf: the server under the Gantry wrk load (${PROXY_SECS} s)"
  wrk -t2 -c"$PROXY_CONNS" -d"$((PROXY_SECS + 2))s" "$GANTRY_URL_EP" >/dev/null &
  wrk_pid=$!
  sleep 1
  perf record -F 999 -g -p "$GSERVER_PID" -o "$WORK/perf.data" -- sleep "$PROXY_SECS" >/dev/null 2>&1 || true
  wait "$wrk_pid" || true
  perf report -i "$WORK/perf.data" --no-children --sort dso,symbol --stdio -g none 2>/dev/null | grep '%' > "$WORK/perf.txt" || true
  head -25 "$WORK/perf.txt" | cut -c1-140 >&2
  log "perf profile: $WORK/perf.data, $WORK/perf.txt"
fi

# --- added latency at a fixed rate ------------------------------------------------------------
# The three paths take turns in 1 s slices, so that the other work on a shared machine falls on
# all three alike; each gets $PACE_SECS s in all.
log "added latency: $PACE_RATE requests/s, open loop, $PACE_CONNS connections; the paths take turns in 1 s slices, $PACE_SECS s each"
bench_quiet
"$WORK/pace" "$PACE_RATE" 1 "$PACE_SECS" "$PACE_CONNS" "direct=$BACKEND:8080/2k.html" \
  "nginx=127.0.0.1:$NGPORT/2k.html" "gantry=127.0.0.1:$GPORT/e/bench/2k.html" > "$WORK/pace.out" ||
  die "the paced client failed: $(tail -3 "$WORK/pace.out")"
for p in direct nginx gantry; do
  read -r _ _ n errs p50 p90 p99 p999 max s50 s99 m50 m99 < <(grep "^RESULT $p " "$WORK/pace.out") ||
    die "the paced client printed nothing for $p"
  log "$p at $PACE_RATE/s: p50 $p50 ms, p90 $p90 ms, p99 $p99 ms, p99.9 $p999 ms, max $max ms; from the write: p50 $s50 ms, p99 $s99 ms; median of the 1 s slices: p50 $m50 ms, p99 $m99 ms ($n requests, $errs errors)"
  figure "proxy.paced.$p.p50_ms" "$p50"
  figure "proxy.paced.$p.p99_ms" "$p99"
  figure "proxy.paced.$p.p999_ms" "$p999"
  figure "proxy.paced.$p.slice_median_p99_ms" "$m99"
  figure "proxy.paced.$p.errors" "$errs"
  eval "PP50_$p=$p50 PP99_$p=$p99 PM99_$p=$m99"
done
added() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a - b }'; }
ADD_P50_NGINX=$(added "$PP50_nginx" "$PP50_direct")
ADD_P99_NGINX=$(added "$PP99_nginx" "$PP99_direct")
ADD_M99_NGINX=$(added "$PM99_nginx" "$PM99_direct")
ADD_P50_GANTRY=$(added "$PP50_gantry" "$PP50_direct")
ADD_P99_GANTRY=$(added "$PP99_gantry" "$PP99_direct")
ADD_M99_GANTRY=$(added "$PM99_gantry" "$PM99_direct")
figure proxy.paced.nginx.added_p50_ms "$ADD_P50_NGINX"
figure proxy.paced.nginx.added_p99_ms "$ADD_P99_NGINX"
figure proxy.paced.nginx.added_slice_median_p99_ms "$ADD_M99_NGINX"
figure proxy.paced.gantry.added_p50_ms "$ADD_P50_GANTRY"
figure proxy.paced.gantry.added_p99_ms "$ADD_P99_GANTRY"
figure proxy.paced.gantry.added_slice_median_p99_ms "$ADD_M99_GANTRY"

# --- a takeover under load --------------------------------------------------------------------
log "takeover under load: wrk -t2 -c$PROXY_CONNS on the Gantry URL while v2 takes endpoint bench over"
bench_quiet
wrk -t2 -c"$PROXY_CONNS" -d600s -s "$WORK/result.lua" "$GANTRY_URL_EP" > "$WORK/takeover.wrk" 2>&1 &
WRK_PID=$!
BENCH_CLEANUPS+=("kill -INT $WRK_PID 2>/dev/null || true")
t_wrk=$(now_ms)
sleep 3
t0=$(now_ms)
V2=$(gantry_submit "$WORK/v2.yaml" proxy-bench-v2)
[ -n "$V2" ] && [ "$V2" != null ] || die "submitting v2 failed"
phase=
for i in $(seq 600); do
  phase=$(api /endpoints/bench/history | jq -r --arg w "$V2" '[.[] | select(.to_workflow == $w)] | last | .phase // ""')
  case $phase in DONE | FAILED | CANCELLED) break ;; esac
  sleep 0.2
done
t_done=$(now_ms)
st=
for i in $(seq 300); do
  st=$(gantry_status "$V1")
  case $st in FINISHED | FAILED | STOPPED) break ;; esac
  sleep 0.2
done
t_v1=$(now_ms)
sleep 3 # and the load goes on a while on v2 alone
kill -INT "$WRK_PID" 2>/dev/null || true
wait "$WRK_PID" || true
t1=$(now_ms)
out=$(grep '^RESULT' "$WORK/takeover.wrk") || die "wrk during the takeover printed no result: $(tail -5 "$WORK/takeover.wrk")"
read -r _ rps _ p99 status sock total _ <<<"$out"
switched=$(api /endpoints/bench/history | jq -r --arg w "$V2" '[.[] | select(.to_workflow == $w)] | last | .switched_at // ""')
switched_rel=-
[ -n "$switched" ] && switched_rel=$(($(ts_ms "$switched") - t_wrk))
version=$(curl -sS "http://127.0.0.1:$GPORT/e/bench/version.txt" || true)
log "wrk ran $((t1 - t_wrk)) ms: v2 submitted at $((t0 - t_wrk)) ms, switched at $switched_rel ms, takeover $phase at $((t_done - t_wrk)) ms, v1 $st at $((t_v1 - t_wrk)) ms; now served by $version"
log "takeover: $total requests, $rps/s, p99 $p99 ms, $status non-2xx, $sock socket errors"
figure proxy.takeover.phase "$phase"
figure proxy.takeover.submit_to_done_ms "$((t_done - t0))"
figure proxy.takeover.requests "$total"
figure proxy.takeover.requests_per_s "$rps"
figure proxy.takeover.p99_ms "$p99"
figure proxy.takeover.errors "$((status + sock))"
figure proxy.takeover.served_after "$version"
[ "$phase" = DONE ] || log "warning: the takeover ended $phase"

# --- summary ----------------------------------------------------------------------------------
{
  echo
  echo "proxy benchmark, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, nginx $(nginx -v 2>&1 | sed 's/.*\///'), $(wc -c < "$WORK/rootfs-v1/www/2k.html") B body${BENCH_NOISY:+; busy machine:$BENCH_NOISY}"
  printf '  %-8s %11s %10s %10s %14s %11s %11s %11s\n' path "requests/s" "wrk p99" "vs direct" "CPU ms/1k req" \
    "paced p50" "paced p99" "slice p99"
  for p in direct nginx gantry; do
    eval "r=\$RPS_$p w=\$P99_$p x=\$X_$p c=\$CPU_$p a=\$PP50_$p b=\$PP99_$p m=\$PM99_$p"
    printf '  %-8s %11s %7s ms %9sx %14s %8s ms %8s ms %8s ms\n' "$p" "$r" "$w" "$x" "$c" "$a" "$b" "$m"
  done
  ok() { if [ "$1" = 1 ]; then echo met; else echo MISSED; fi; }
  echo "  target: Gantry requests/s >= nginx's ($RPS_gantry vs $RPS_nginx, ${GANTRY_OVER_NGINX}x): $(ok "$(awk -v x="$GANTRY_OVER_NGINX" 'BEGIN { print (x >= 1) }')")"
  echo "  target: Gantry added p99 < 1 ms at $PACE_RATE/s ($ADD_P99_GANTRY ms; nginx adds $ADD_P99_NGINX ms): $(ok "$(awk -v a="$ADD_P99_GANTRY" 'BEGIN { print (a < 1) }')")"
  echo "          the same over the median 1 s slice, which a few disturbed seconds do not move: Gantry adds $ADD_M99_GANTRY ms, nginx $ADD_M99_NGINX ms: $(ok "$(awk -v a="$ADD_M99_GANTRY" 'BEGIN { print (a < 1) }')")"
  echo "  target: 0 errors during a takeover under load ($((status + sock)) of $total, takeover $phase): $(ok "$([ $((status + sock)) = 0 ] && [ "$phase" = DONE ] && echo 1)")"
}
