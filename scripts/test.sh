#!/usr/bin/env bash
# test.sh - everything `make test` runs: install and start what the tests need, then every
# test against the real things (runc, a local OCI registry), lints, and a bounded fuzz run.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
scripts/cleanup.sh
scripts/test-images.sh >/dev/null
trap 'scripts/cleanup.sh' EXIT

echo "== format and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings

echo "== fuzzing the workflow parser, the API's bodies, MCP's arguments and the webhook for ${GANTRY_FUZZ_SECONDS:-60}s"
mkdir -p target
if ! fuzz/run.sh "${GANTRY_FUZZ_SECONDS:-60}" > target/fuzz.log 2>&1; then
  # The end of the log says which target failed and where its input was saved.
  tail -n 60 target/fuzz.log
  echo "fuzzing found a problem (whole log: target/fuzz.log)" >&2
  exit 1
fi
grep -E '^== fuzzing|^Done' target/fuzz.log || true

if [ -x scripts/check-monitoring.sh ]; then
  echo "== monitoring rules, routes and dashboards"
  scripts/check-monitoring.sh
fi

echo "== tests"
# Two threads: the end-to-end tests start real clusters and containers on a 2-core machine.
# --no-fail-fast: one failing test binary must not hide the results of the others.
mkdir -p target
set +e
cargo test --workspace --no-fail-fast -- --test-threads=2 2>&1 | tee target/test.log
status=${PIPESTATUS[0]}
set -e
# One closing line for the whole run: cargo prints a result per test binary, the last of
# which is often a crate's empty doc-test run.
awk '/^test result:/ { p += $4; f += $6 } END { printf "%d passed, %d failed\n", p, f }' target/test.log
[ -d target/web-artifacts ] && echo "screenshots of the web UI's browser test: target/web-artifacts/"
exit "$status"
