#!/usr/bin/env bash
# Fuzzes what Gantry takes in for SECONDS in all (default 60), split evenly among the targets,
# and exits non-zero if an input crashes one (panic, failed assertion, hang past 10 s, memory
# blow-up), printing where each crashing input was saved. CI calls this.
#
#   fuzz/run.sh 60                  # every target, 15 s each
#   fuzz/run.sh 120 api mcp         # only these, 60 s each
#
# Targets: parse (the workflow file), api (every /api/v1 JSON body, with its route),
# mcp (the MCP tools' arguments), alertmanager (the webhook's payload).
#
# Runs on stable Rust: `-s none` drops the sanitizers (they need nightly);
# libFuzzer's coverage guidance and crash detection work without them.
# New inputs go to fuzz/corpus/TARGET (ignored by git); fuzz/seeds/TARGET is only read.
set -euo pipefail

all=(parse api mcp alertmanager)
secs="${1:-60}"
case "$secs" in
  '' | *[!0-9]*) echo "usage: $0 [SECONDS] [TARGET...]  (targets: ${all[*]})" >&2; exit 2 ;;
esac
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")
for t in "${targets[@]}"; do
  case " ${all[*]} " in
    *" $t "*) ;;
    *) echo "no fuzz target $t (targets: ${all[*]})" >&2; exit 2 ;;
  esac
done
each=$(( secs / ${#targets[@]} ))
[ "$each" -ge 1 ] || each=1

cd "$(dirname "$0")"

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz" >&2
  cargo install cargo-fuzz --locked
fi

# One build for every target, before the clock of any starts.
cargo fuzz build --sanitizer none

# Workflow files inside JSON bodies are longer than the file alone.
max_len() { [ "$1" = parse ] && echo 8192 || echo 32768; }

found=()
for t in "${targets[@]}"; do
  echo "== fuzzing $t for ${each}s"
  mkdir -p "corpus/$t" "artifacts/$t"
  before=$(ls "artifacts/$t")
  status=0
  cargo fuzz run --sanitizer none "$t" "corpus/$t" "seeds/$t" -- \
    -max_total_time="$each" \
    -max_len="$(max_len "$t")" \
    -dict="$t.dict" \
    -timeout=10 \
    -rss_limit_mb=2048 \
    -print_final_stats=1 || status=$?
  # libFuzzer stops at its first finding and saves the input under artifacts/TARGET.
  new=$(comm -13 <(echo "$before") <(ls "artifacts/$t"))
  if [ "$status" -ne 0 ] || [ -n "$new" ]; then
    for f in $new; do
      found+=("fuzz/artifacts/$t/$f (again: cd fuzz && cargo fuzz run --sanitizer none $t artifacts/$t/$f)")
    done
    [ -n "$new" ] || found+=("$t: exit status $status, no input saved (see its output above)")
  fi
done

if [ ${#found[@]} -gt 0 ]; then
  echo "fuzzing found a problem:" >&2
  printf '  %s\n' "${found[@]}" >&2
  exit 1
fi
echo "fuzzing found nothing: ${targets[*]}, ${each}s each"
