#!/usr/bin/env bash
# bench/transfer.sh - data ingress: Gantry's `ingress:VOLUME` step fetching one object from a
# local S3 API server, against curl (SigV4-signed, `--aws-sigv4`) and, when it is installed,
# `aws s3 cp`, fetching the same object in the same run to the same disk.
#
# The server: moto's moto_server (scripts/install-deps.sh puts it in the test venv) on a free
# port of 127.0.0.1, holding one object of SIZE_MB MiB (default 1024) of random bytes. Gantry:
# one server and one agent (lib.sh); the workflow has one ingress of the object into an
# ephemeral volume and a job that checks its size. Gantry's rate is the agent's own (bytes /
# the transfer's time, from the step's log), beside the step's wall time (task created ->
# FINISHED, from the events). Each tool runs REPS times (default 3), alternating; the best
# of each is reported. Target: Gantry >= 80 % of the faster of the others.
#
# Prints `figure NAME VALUE` lines and a table on stdout, progress on stderr. Needs root; about
# 2-4 minutes for 1 GiB. Environment: SIZE_MB, REPS, AWS_CLI=0 (leave `aws s3 cp` out: against
# moto it fetches 1 GiB at ~13 MiB/s), GANTRY_BIN, GANTRY_LOG, BENCH_KEEP=1, GANTRY_MCP_VENV
# (the venv with moto, default /opt/gantry-venv).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

SIZE_MB=${SIZE_MB:-1024}
REPS=${REPS:-3}
VENV=${GANTRY_MCP_VENV:-/opt/gantry-venv}

bench_setup transfer
bench_install curl jq runc docker-registry
[ -x "$VENV/bin/moto_server" ] || die "no $VENV/bin/moto_server: run scripts/install-deps.sh"
gantry_build
bench_images

# --- the S3 server and the object ------------------------------------------------------------
S3_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
S3_URL=http://127.0.0.1:$S3_PORT
"$VENV/bin/moto_server" -H 127.0.0.1 -p "$S3_PORT" > "$WORK/moto.log" 2>&1 &
S3_PID=$!
BENCH_CLEANUPS+=("bench_stop_pid $S3_PID moto_server")
for _ in $(seq 100); do curl -s -o /dev/null "$S3_URL" && break; sleep 0.1; done
log "moto_server at $S3_URL; writing a $SIZE_MB MiB object"
head -c "$((SIZE_MB << 20))" /dev/urandom > "$WORK/object.bin"
SUM=$(sha256sum < "$WORK/object.bin" | cut -d' ' -f1)
"$VENV/bin/python" - "$S3_URL" "$WORK/object.bin" <<'PY'
import sys, boto3
s3 = boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1",
                  aws_access_key_id="bench", aws_secret_access_key="bench")
s3.create_bucket(Bucket="bench")
s3.upload_file(sys.argv[2], "bench", "object.bin")
PY
rm -f "$WORK/object.bin"
BYTES=$((SIZE_MB << 20))

# --- Gantry ------------------------------------------------------------------------------------
gantry_server_start
gantry_agent_start 2
GANTRY_URL=$GURL GANTRY_TOKEN=$GTOKEN "$GANTRY" secret set store --type s3 --value \
  "{\"accessKeyId\":\"bench\",\"secretAccessKey\":\"bench\",\"region\":\"us-east-1\",\"endpoint\":\"$S3_URL\"}" >&2
cat > "$WORK/ingress.yaml" <<YAML
version: v4
volumes:
  data:
    ingress:
      - source: { uri: "s3://bench/object.bin", secret: secret://user/store }
        destination: { uri: "file://object.bin" }
jobs:
  check:
    image: { uri: "${BENCH_IMAGE:-docker://busybox:1}" }
    mounts: { /data: { volume: data } }
    command: [ sh, -c, "test \$(wc -c < /data/object.bin) = $BYTES && sha256sum /data/object.bin" ]
YAML

gantry_once() { # -> prints "RATE_BPS WALL_MS"
  local id st logtxt secs ms0 ms1
  id=$(gantry_submit "$WORK/ingress.yaml" transfer-bench)
  st=$(gantry_wait "$id" 0.2 900)
  [ "$st" = FINISHED ] || die "workflow $id ended $st: $(api "/workflows/$id" | jq -c '[.tasks[] | {job, status, r: .attempts[-1].reason}]')"
  GANTRY_URL=$GURL GANTRY_TOKEN=$GTOKEN "$GANTRY" workflow log "$id" check | grep -q "$SUM" ||
    die "the staged object's checksum differs"
  logtxt=$(GANTRY_URL=$GURL GANTRY_TOKEN=$GTOKEN "$GANTRY" workflow log "$id" ingress:data)
  # "s3://bench/object.bin -> file://object.bin: 1.1 GB in 4.12 s (260.6 MB/s)"
  secs=$(sed -n 's/.*-> file:\/\/object.bin: .* in \([0-9.]*\) s .*/\1/p' <<< "$logtxt" | tail -1)
  read -r ms0 ms1 < <(api "/workflows/$id" | jq -r '
    def ms: sub("\\.[0-9]+Z$"; "Z") as $s | ($s | fromdateiso8601) * 1000
      + ((capture("\\.(?<f>[0-9]+)Z$").f // "0") + "000" | .[0:3] | tonumber);
    .tasks[] | select(.job == "ingress:data") | .attempts[0] | "\(.created_at | ms) \(.ended_at | ms)"')
  awk -v b="$BYTES" -v s="$secs" -v w=$((ms1 - ms0)) 'BEGIN { printf "%.0f %d\n", b / s, w }'
}

curl_once() { # -> prints RATE_BPS
  local t
  rm -f "$GDATA/curl.bin"
  t=$(curl -sS -f --aws-sigv4 "aws:amz:us-east-1:s3" -u bench:bench -o "$GDATA/curl.bin" \
    -w '%{time_total}' "$S3_URL/bench/object.bin")
  [ "$(stat -c %s "$GDATA/curl.bin")" = "$BYTES" ] || die "curl fetched the wrong size"
  rm -f "$GDATA/curl.bin"
  awk -v b="$BYTES" -v s="$t" 'BEGIN { printf "%.0f\n", b / s }'
}

aws_once() { # -> prints RATE_BPS
  local t0 t1
  rm -f "$GDATA/aws.bin"
  t0=$(now_ms)
  AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench AWS_DEFAULT_REGION=us-east-1 \
    aws --endpoint-url "$S3_URL" s3 cp --only-show-errors s3://bench/object.bin "$GDATA/aws.bin" >&2
  t1=$(now_ms)
  rm -f "$GDATA/aws.bin"
  awk -v b="$BYTES" -v ms=$((t1 - t0)) 'BEGIN { printf "%.0f\n", b * 1000 / ms }'
}

have_aws=0
[ "${AWS_CLI:-1}" = 1 ] && command -v aws > /dev/null && have_aws=1
best_g=0 best_w=0 best_c=0 best_a=0
for r in $(seq "$REPS"); do
  read -r g w < <(gantry_once)
  log "round $r: gantry $((g >> 20)) MiB/s (step wall ${w} ms)"
  [ "$g" -gt "$best_g" ] && best_g=$g best_w=$w
  c=$(curl_once)
  log "round $r: curl $((c >> 20)) MiB/s"
  [ "$c" -gt "$best_c" ] && best_c=$c
  if [ "$have_aws" = 1 ]; then
    a=$(aws_once)
    log "round $r: aws s3 cp $((a >> 20)) MiB/s"
    [ "$a" -gt "$best_a" ] && best_a=$a
  fi
done

faster=$best_c
[ "$best_a" -gt "$faster" ] && faster=$best_a
figure transfer.object.mib "$SIZE_MB"
figure transfer.gantry.mib_s "$((best_g >> 20))"
figure transfer.gantry.step_wall_ms "$best_w"
figure transfer.curl.mib_s "$((best_c >> 20))"
[ "$have_aws" = 1 ] && figure transfer.aws_cli.mib_s "$((best_a >> 20))"
figure transfer.gantry_vs_faster.pct "$(pct "$best_g" "$faster")"
printf '\n%-28s %10s\n' "ingress of $SIZE_MB MiB" "MiB/s"
printf '%-28s %10s\n' "gantry (agent's rate)" "$((best_g >> 20))"
printf '%-28s %10s\n' "curl --aws-sigv4" "$((best_c >> 20))"
[ "$have_aws" = 1 ] && printf '%-28s %10s\n' "aws s3 cp" "$((best_a >> 20))"
printf '%-28s %9s%%  (target >= 80 %%)\n' "gantry / faster" "$(pct "$best_g" "$faster")"
