#!/usr/bin/env bash
# Per-kernel GPU time of decode steps at batch 1 (Llama-3.1-8B shapes, dummy weights), bf16 and
# FP8, with Nsight Compute on the GPU machine, from a bundle made by make_bundle.sh:
#   bash BUNDLE/profile_decode.sh BUNDLE [SKIP] [COUNT]
# ncu serializes the kernels (no overlap, cold caches), so the sum is an upper bound of the GPU
# time; a step's wall time from run_decode_overhead.sh minus it bounds the gaps. SKIP (default
# 12000) launches pass unprofiled: weight generation, the profile run, the graph warm-ups and the
# prefill, so that COUNT (default 740, two steps) land in the timed decode loop.
set -uo pipefail
SRC=$(cd "${1:?usage: profile_decode.sh BUNDLE [SKIP] [COUNT]}" && pwd)
SKIP=${2:-12000}
COUNT=${3:-740}
. "$SRC/unpack_bundle.sh"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for q in bf16 fp8; do
  flags=(--perf-only --batch 1)
  [ $q = fp8 ] && flags+=(--fp8 --no-bf16)
  timeout 280 "$NCU" --csv --metrics gpu__time_duration.sum --launch-skip "$SKIP" \
    --launch-count "$COUNT" "$B/cuda_runner_check" "$B/models" "${flags[@]}" \
    > "$LOGS/ncu_$q.csv" 2> "$LOGS/ncu_$q.err"
  say "ncu $q (exit $?):"
  python3 "$B/ncu_summary.py" "$LOGS/ncu_$q.csv" | tee -a "$SUMMARY"
done
