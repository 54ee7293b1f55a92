#!/usr/bin/env bash
# Shows the node labels an agent on this machine would report (`gantry agent --print-labels`)
# and, where nvidia-smi is installed, checks the GPU ones against what it says. Builds nothing:
# run it where a `gantry` binary is (GANTRY=path/to/gantry, else target/release or
# target/debug of this checkout, else the one on PATH).
#
#   scripts/gpu-labels-check.sh [--label KEY=VALUE ...]
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
gantry="${GANTRY:-}"
if [[ -z "$gantry" ]]; then
    for c in "$root/target/release/gantry" "$root/target/debug/gantry" "$(command -v gantry || true)"; do
        if [[ -n "$c" && -x "$c" ]]; then gantry="$c"; break; fi
    done
fi
[[ -n "$gantry" ]] || { echo "no gantry binary: build one, or set GANTRY" >&2; exit 2; }

labels="$("$gantry" agent --print-labels "$@")"
echo "$labels"

if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "no nvidia-smi here: GPU labels not checked" >&2
    exit 0
fi
label() { python3 -c 'import json,sys; print(json.load(sys.stdin).get(sys.argv[1], ""))' "$1" <<<"$labels"; }
fail=0
want_model="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1)"
want_count="$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)"
got_model="$(label nvidia.com/gpu.model)"
got_count="$(label nvidia.com/gpu.count)"
got_arch="$(label nvidia.com/gpu.arch)"
[[ "$got_model" == "$want_model" ]] || { echo "gpu.model: got '$got_model', nvidia-smi says '$want_model'" >&2; fail=1; }
[[ "$got_count" == "$want_count" ]] || { echo "gpu.count: got '$got_count', nvidia-smi says '$want_count'" >&2; fail=1; }
case "$got_arch" in
    kepler|maxwell|pascal|volta|turing|ampere|ada|hopper|blackwell) ;;
    *) echo "gpu.arch: got '$got_arch'" >&2; fail=1 ;;
esac
cc="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 || true)"
echo "nvidia-smi: $want_count x $want_model, compute capability ${cc:-unknown}; labels: $got_model, $got_arch, $got_count" >&2
if [[ "$fail" == 0 ]]; then echo "GPU labels OK" >&2; fi
exit "$fail"
