#!/usr/bin/env bash
# Per-kernel GPU time of prefill steps (Llama-3.1-8B shapes, dummy weights), bf16 and FP8, with
# Nsight Compute on the GPU machine, from a bundle made by make_bundle.sh:
#   bash BUNDLE/profile_prefill.sh BUNDLE [PROMPTS] [BATCHED_TOKENS]
# `pagellm bench throughput` runs PROMPTS (default 8) prompts of 1,024 tokens with one output token
# each, eagerly, so every step is a prefill step of BATCHED_TOKENS (default 2,048) tokens; the
# profile run at load is one more. ncu serializes the kernels (cold caches, no overlap), so the sums
# bound the GPU time from above. Then the same runs without ncu for the wall times.
set -uo pipefail
SRC=$(cd "${1:?usage: profile_prefill.sh BUNDLE [PROMPTS] [BATCHED_TOKENS]}" && pwd)
PROMPTS=${2:-8}
TOKENS=${3:-2048}
. "$SRC/unpack_bundle.sh"
timeout 60 "$B/cuda_probe" > "$LOGS/probe.log" 2>&1
say "probe: $(grep -iE 'copy|TFLOP' "$LOGS/probe.log" | tr '\n' ' ')"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
ARGS=(bench throughput --model "$B/llama31-8b" --load-format dummy --device cuda --max-model-len 2048
      --input-len 1024 --output-len 1 --max-num-batched-tokens "$TOKENS")
for q in bf16 fp8; do
  flags=(--enforce-eager --num-prompts "$PROMPTS")
  [ $q = fp8 ] && flags+=(--quantization fp8)
  timeout 280 "$NCU" --csv --metrics gpu__time_duration.sum "$B/pagellm" "${ARGS[@]}" "${flags[@]}" \
    > "$LOGS/ncu_prefill_$q.csv" 2> "$LOGS/ncu_prefill_$q.err"
  say "ncu $q, $PROMPTS x 1024 tokens in steps of $TOKENS (exit $?):"
  python3 "$B/ncu_summary.py" "$LOGS/ncu_prefill_$q.csv" 40 --by-name | tee -a "$SUMMARY"
done
for q in bf16 fp8; do
  extra=()
  [ $q = fp8 ] && extra+=(--quantization fp8)
  say "$q 64 x 1024, steps of $TOKENS: $("$B/pagellm" "${ARGS[@]}" --num-prompts 64 "${extra[@]}" 2>&1 | grep -i 'requests/s' | tail -1)"
done
