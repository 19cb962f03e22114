#!/usr/bin/env bash
# One GPU-machine run of everything issue 6 asks for, from a bundle made by make_bundle.sh:
#   bash BUNDLE/run_all.sh BUNDLE [--no-hf] [--no-perf] [--only-hf]
# 1. ceilings (cuda_probe); 2. kernel tests; 3. runner checks (+ Llama-3.1-8B decode numbers);
# 4. engine behaviours; 5. stories260K through `pagellm generate --device cuda`; 6. bench throughput
# 1000 x (1024 in, 128 out) on dummy Llama-3.1-8B; 7. HF transformers comparison (tiny + 8B shapes).
# Each part is bounded by its own timeout; logs go to $OUT (or ./device-logs), a summary prints last.
set -uo pipefail
SRC=$(cd "${1:?usage: run_all.sh BUNDLE [--no-hf] [--no-perf] [--only-hf]}" && pwd)
shift
HF=1 PERF=1 ONLY_HF=0
for a in "$@"; do
  case $a in --no-hf) HF=0 ;; --no-perf) PERF=0 ;; --only-hf) ONLY_HF=1 ;; esac
done
. "$SRC/unpack_bundle.sh"
timeout 120 "$B/cuda_probe" > "$LOGS/probe.log" 2>&1
say "probe: $(grep -iE 'copy|gemm|tflop|GB/s' "$LOGS/probe.log" | tr '\n' ' ' | cut -c1-300)"

if [ "$ONLY_HF" = 0 ]; then
  timeout 300 "$B/cuda_kernel_tests" --sampler-bench > "$LOGS/kernel_tests.log" 2>&1
  say "kernel tests (exit $?): $(grep -E '^kernel tests:' "$LOGS/kernel_tests.log")"
  grep -E "FAIL" "$LOGS/kernel_tests.log" | head -20 | tee -a "$SUMMARY"
  grep -E "sampl" "$LOGS/kernel_tests.log" | grep -iE "bench|us|µs" | head -12 | tee -a "$SUMMARY"

  perf_flag=--skip-perf
  [ "$PERF" = 1 ] && perf_flag=
  timeout 400 "$B/cuda_runner_check" "$B/models" $perf_flag > "$LOGS/runner_check.log" 2>&1
  say "runner check (exit $?):"
  grep -E "FAIL|runner checks:|tok/s|roofline|copy" "$LOGS/runner_check.log" | head -30 | tee -a "$SUMMARY"

  ENGINE_CHECK_TIMEOUT=300 OUT=$LOGS bash "$B/run_engine_check.sh" "$B" "$B/models" > "$LOGS/engine_check.out" 2>&1
  say "engine check (exit $?): $(grep -iE 'passed|failed' "$LOGS/engine_check.log" | tail -1)"
  grep FAIL "$LOGS/engine_check.log" | head -10 | tee -a "$SUMMARY"

  timeout 120 "$B/pagellm" generate --device cuda --model "$B/models/stories260K" --prompt "" \
    --temperature 0 --max-tokens 256 > "$LOGS/stories_cuda.txt" 2> "$LOGS/stories_cuda.err"
  say "stories260K generate --device cuda (exit $?): $(head -c 120 "$LOGS/stories_cuda.txt" | tr '\n' ' ')"

  if [ "$PERF" = 1 ]; then
    timeout 300 "$B/pagellm" bench throughput --model "$B/llama31-8b" --load-format dummy --device cuda \
      --num-prompts 1000 --input-len 1024 --output-len 128 --max-model-len 2048 \
      > "$LOGS/bench_throughput.log" 2>&1
    say "bench throughput 8B (exit $?): $(grep -E 'Throughput' "$LOGS/bench_throughput.log")"
    grep -E "loaded" "$LOGS/bench_throughput.log" | head -1 | tee -a "$SUMMARY"
  fi
fi

if [ "$HF" = 1 ]; then
  mkdir -p "$B/hf" && cp "$B/pagellm" "$B/hf_compare.py" "$B/hf/" && cp -r "$B/tokenizers" "$B/hf/"
  OUT=$LOGS timeout 420 bash "$B/run_hf_compare.sh" "$B/hf" tiny-llama tiny-qwen3 llama3-8b qwen3-8b \
    > "$LOGS/hf_compare.out" 2>&1
  say "hf compare (exit $?):"
  grep -E "PASS|FAIL" "$LOGS/hf_compare.log" | tail -8 | tee -a "$SUMMARY"
fi
echo "==== summary"
cat "$SUMMARY"
