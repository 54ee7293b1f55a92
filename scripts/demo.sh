#!/bin/sh
# demo.sh - run examples/pipeline.yaml on the embedded default (`gantry run`).
# The example names docker://busybox:1. Where Docker Hub cannot be reached (air-gapped sites,
# this project's CI), a local registry seeded from Debian's busybox-static serves it instead.
set -eu
cd "$(dirname "$0")/.."
GANTRY=${GANTRY:-target/debug/gantry}
mirror=""
if ! curl -fsS -m 5 -o /dev/null https://registry-1.docker.io/v2/ 2>/dev/null \
   && ! curl -sS -m 5 -o /dev/null -w '%{http_code}' https://registry-1.docker.io/v2/ 2>/dev/null | grep -q 401; then
  echo "demo: Docker Hub is unreachable; serving busybox from a local registry"
  scripts/test-images.sh >/dev/null
  . "${GANTRY_TEST_DIR:-/tmp/gantry-test}/env"
  mirror="--registry-mirror docker.io=http://$GANTRY_TEST_REGISTRY"
fi
# shellcheck disable=SC2086
exec "$GANTRY" run examples/pipeline.yaml $mirror
