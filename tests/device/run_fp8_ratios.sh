#!/usr/bin/env bash
# Issue 11's FP8 / bf16 ratios of Llama-3.1-8B shapes measured in one call, next to the ceilings:
# `bench throughput` prefill 64 x 1024 and 1000 x (1024 in, 128 out) for bf16, FP8 and FP8 with an
# FP8 KV cache (ROUNDS rounds, default 2, the configurations alternating so all see the same
# clocks), each with its lower bound (the FP8 runs' at the FP8 GEMM rate of `bench ceilings`),
# then decode at batch 1 / 16 / 64 (cuda_runner_check --perf-only --fp8).
#   bash run_fp8_ratios.sh BUNDLE
# BUNDLE: pagellm and cuda_runner_check (xz'd), cuda_probe, unpack_bundle.sh, the llama31-8b config
# folder (tokenizer.json.gz, tokenizer_config.json). Logs in $OUT (summary.txt first).
SRC=$(cd "${1:?usage: run_fp8_ratios.sh BUNDLE}" && pwd)
. "$SRC/unpack_bundle.sh"
timeout 60 "$B/cuda_probe" > "$LOGS/probe.log" 2>&1
say "probe: $(grep -iE 'copy|gemm' "$LOGS/probe.log" | tr '\n' ' ')"
timeout 60 "$B/pagellm" bench ceilings --device cuda > "$LOGS/ceilings.log" 2>&1
say "bench ceilings (exit $?): $(cat "$LOGS/ceilings.log")"
: > "$LOGS/bounds.log"
throughput() {  # PROMPTS OUTPUT_LEN [FLAGS...]: requests/s of one `bench throughput`
  local prompts=$1 out=$2
  shift 2
  timeout 250 "$B/pagellm" bench throughput --model "$B/llama31-8b" --load-format dummy \
    --device cuda --max-model-len 2048 --num-prompts "$prompts" --input-len 1024 \
    --output-len "$out" "$@" > "$LOGS/run.log" 2>&1
  awk '/Throughput/ {print $2}' "$LOGS/run.log"
  grep -h "^Lower bound" "$LOGS/run.log" >> "$LOGS/bounds.log"  # each run's bound, in order
}
CONFIGS=("" "--quantization fp8" "--quantization fp8 --kv-cache-dtype fp8")
for round in $(seq "${ROUNDS:-2}"); do
  for q in "${CONFIGS[@]}"; do
    # shellcheck disable=SC2086
    say "round $round ${q:-bf16}: prefill 64 x 1024 $(throughput 64 1 $q) req/s;" \
      "1000 x (1024, 128) $(throughput 1000 128 $q) req/s"
  done
done
say "lower bounds, in the order of the runs above:"
tee -a "$SUMMARY" < "$LOGS/bounds.log"
timeout 300 "$B/cuda_runner_check" "$B/models" --perf-only --fp8 > "$LOGS/decode.log" 2>&1
say "decode (exit $?):"
grep -E "tok/s" "$LOGS/decode.log" | tee -a "$SUMMARY"
cat "$SUMMARY"
