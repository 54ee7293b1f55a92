#!/usr/bin/env bash
# bench/webhook.sh - the Alertmanager webhook against the real server on SQLite:
#   - POST rate and latency (p50/p99) of single-alert and 1,000-alert payloads, with wrk
#     (2 threads, 4 connections, 10 s each), repeated posts as Alertmanager re-sends them;
#   - latency of single posts that change something durably (a new hold, then its release),
#     one at a time with curl;
#   - the time from sending an alert to a hold the scheduler honours: a job submitted right
#     after the post is answered with "cordoned", never placed on the held node.
# Prints `figure NAME VALUE` lines. Needs root (the agent runs containers).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

bench_setup webhook
bench_install wrk curl jq
gantry_build
bench_images
gantry_server_start
gantry_agent_start 2

HOOK=$GURL/api/v1/monitoring/alertmanager
MTOKEN=$(GANTRY_URL=$GURL GANTRY_TOKEN=$GTOKEN "$GANTRY" admin user create bench-am --monitoring)

alert() { # STATUS NODE NAME STARTS
  printf '{"status":"%s","labels":{"alertname":"%s","node":"%s","gantry_hold":"cordon","gantry_release":"auto"},"annotations":{"summary":"bench %s"},"startsAt":"%s","endsAt":"0001-01-01T00:00:00Z","fingerprint":"%s"}' \
    "$1" "$3" "$2" "$3" "$4" "$(printf '%s/%s' "$2" "$3" | sha256sum | cut -c1-16)"
}
payload() { # ALERTS-JSON...
  printf '{"version":"4","status":"firing","receiver":"gantry","groupLabels":{},"commonLabels":{},"commonAnnotations":{},"externalURL":"http://am","alerts":[%s]}' "$1"
}

payload "$(alert firing "$GNODE" BenchSingle 2026-11-30T00:00:00Z)" > "$WORK/single.json"
many=""
for i in $(seq 1000); do
  many="${many:+$many,}$(alert firing "$GNODE" "Bench$i" 2026-11-30T00:00:00Z)"
done
payload "$many" > "$WORK/many.json"
log "payloads: single $(stat -c %s "$WORK/single.json") B, 1000 alerts $(stat -c %s "$WORK/many.json") B"

cat > "$WORK/post.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $MTOKEN"
local f = io.open(os.getenv("BODY"), "rb"); wrk.body = f:read("*a"); f:close()
done = function(summary, latency, requests)
  io.write(string.format("RESULT %.1f %.3f %.3f %d %d\n", summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    summary.requests))
end
LUA

run_wrk() { # NAME BODY-FILE
  # The first post places the holds; the timed posts are the re-sends that follow.
  curl -sS -f -o /dev/null -H "Authorization: Bearer $MTOKEN" -H 'Content-Type: application/json' --data-binary "@$2" "$HOOK"
  local out
  out=$(BODY=$2 wrk -t2 -c4 -d10s -s "$WORK/post.lua" "$HOOK" | grep '^RESULT')
  read -r _ rps p50 p99 errs total <<< "$out"
  figure "webhook_${1}_posts_per_s" "$rps"
  figure "webhook_${1}_p50_ms" "$p50"
  figure "webhook_${1}_p99_ms" "$p99"
  figure "webhook_${1}_errors" "$errs of $total"
}

log "single-alert payload, repeated"
run_wrk single "$WORK/single.json"
log "1000-alert payload, repeated"
run_wrk 1000 "$WORK/many.json"
curl -sS -f -o /dev/null -H "Authorization: Bearer $MTOKEN" -H 'Content-Type: application/json' --data-binary \
  "$(payload "$(alert resolved "$GNODE" BenchSingle 2026-11-30T00:00:00Z)")" "$HOOK"
for i in $(seq 1000); do printf '%s\n' "$(alert resolved "$GNODE" "Bench$i" 2026-11-30T00:00:00Z)"; done |
  paste -sd, > "$WORK/resolved-list"
payload "$(cat "$WORK/resolved-list")" > "$WORK/many-resolved.json"
curl -sS -f -o /dev/null -H "Authorization: Bearer $MTOKEN" -H 'Content-Type: application/json' --data-binary \
  "@$WORK/many-resolved.json" "$HOOK"

log "single posts that change something: 50 holds placed and released"
: > "$WORK/durable.ms"
for i in $(seq 50); do
  starts=$(date -u -d "@$((1800000000 + i))" +%Y-%m-%dT%H:%M:%SZ)
  for st in firing resolved; do
    curl -sS -f -o /dev/null -w '%{time_total}\n' -H "Authorization: Bearer $MTOKEN" \
      -H 'Content-Type: application/json' --data-binary "$(payload "$(alert $st "$GNODE" BenchDurable "$starts")")" "$HOOK" |
      awk '{ printf "%.3f\n", $1 * 1000 }' >> "$WORK/durable.ms"
  done
done
read -r n med p90 min max avg <<< "$(awk '{ print int($1 * 1000) }' "$WORK/durable.ms" | stats)"
figure webhook_durable_change_p50_ms "$(awk -v v="$med" 'BEGIN { printf "%.2f", v / 1000 }')"
p99=$(sort -n "$WORK/durable.ms" | awk '{ v[NR] = $1 } END { i = int(0.99 * NR + 0.999999); print v[i] }')
figure webhook_durable_change_p99_ms "$p99"

log "from an alert to a hold the scheduler honours"
: > "$WORK/honoured.ms"
for i in $(seq 10); do
  starts=$(date -u -d "@$((1900000000 + i))" +%Y-%m-%dT%H:%M:%SZ)
  t0=$(now_ms)
  curl -sS -f -o /dev/null -H "Authorization: Bearer $MTOKEN" -H 'Content-Type: application/json' \
    --data-binary "$(payload "$(alert firing "$GNODE" BenchHonour "$starts")")" "$HOOK"
  gantry_single_yaml "$WORK/one.yaml"
  id=$(gantry_submit "$WORK/one.yaml" honour)
  while :; do
    reason=$(api "/workflows/$id" | jq -r '.tasks[0].reason // ""')
    status=$(api "/workflows/$id" | jq -r '.tasks[0].status')
    [ "$status" = PENDING ] || die "a job was placed on a cordoned node ($status)"
    case "$reason" in *cordon*) break ;; esac
    sleep 0.005
  done
  echo $(($(now_ms) - t0)) >> "$WORK/honoured.ms"
  api "/workflows/$id/stop" -X POST > /dev/null
  curl -sS -f -o /dev/null -H "Authorization: Bearer $MTOKEN" -H 'Content-Type: application/json' \
    --data-binary "$(payload "$(alert resolved "$GNODE" BenchHonour "$starts")")" "$HOOK"
done
read -r n med p90 min max avg <<< "$(stats < "$WORK/honoured.ms")"
figure webhook_to_honoured_hold_median_ms "$med"
figure webhook_to_honoured_hold_max_ms "$max"
echo "target: p99 <= 5 ms for a single alert"
