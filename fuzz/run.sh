#!/usr/bin/env bash
# Fuzzes gantry_spec::parse for SECONDS (default 60) and exits non-zero if an
# input crashes it (panic, hang past 10 s, or memory blow-up). CI calls this.
#
#   fuzz/run.sh 60
#
# Runs on stable Rust: `-s none` drops the sanitizers (they need nightly);
# libFuzzer's coverage guidance and crash detection work without them.
# New inputs go to fuzz/corpus/parse (ignored by git); fuzz/seeds is only read.
set -euo pipefail

secs="${1:-60}"
case "$secs" in
  '' | *[!0-9]*) echo "usage: $0 SECONDS" >&2; exit 2 ;;
esac

cd "$(dirname "$0")"

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz" >&2
  cargo install cargo-fuzz --locked
fi

corpus=corpus/parse
mkdir -p "$corpus"

exec cargo fuzz run --sanitizer none parse "$corpus" seeds -- \
  -max_total_time="$secs" \
  -max_len=8192 \
  -dict=parse.dict \
  -timeout=10 \
  -rss_limit_mb=2048 \
  -print_final_stats=1
