#!/usr/bin/env bash
# The decode step's time outside the weight stream (issues 11 and 15), on the GPU machine, from a
# bundle made by make_bundle.sh: programmatic dependent launch (common.cuh) beside ordinary launches
# in one run.
#   bash BUNDLE/run_decode_overhead.sh BUNDLE [--bench]
# 1. ceilings (cuda_probe); 2. every kernel test; 3. the engine check (graphs vs eager, batched vs
# solo, preemption, prefix caching), ordinary launches and PAGELLM_PDL=1; 4. the runner check with --fp8 (GPU vs CPU runner,
# then Llama-3.1-8B decode at batch 1 / 16 / 64, bf16 and FP8); 5. the same decode figures with
# programmatic dependent launch (--pdl: the GPU-vs-CPU checks again, then the figures); 6. with --bench: `bench throughput` 1000 x (1024 in, 128 out) and prefill
# 64 x 1024, bf16 and FP8, PDL on and off. Logs go to $OUT (or ./device-logs); summary.txt collects
# the figures.
set -uo pipefail
SRC=$(cd "${1:?usage: run_decode_overhead.sh BUNDLE [--bench]}" && pwd)
. "$SRC/unpack_bundle.sh"
timeout 120 "$B/cuda_probe" > "$LOGS/probe.log" 2>&1
say "probe: $(grep -iE 'copy|gemm|tflop|GB/s' "$LOGS/probe.log" | tr '\n' ' ' | cut -c1-400)"
say "profilers: $(ls /usr/local/cuda/bin 2>/dev/null | grep -E '^(nsys|ncu)$' | tr '\n' ' ') $(command -v nsys ncu | tr '\n' ' ')"

timeout 300 "$B/cuda_kernel_tests" > "$LOGS/kernel_tests.log" 2>&1
say "kernel tests (exit $?): $(grep -E '^kernel tests:' "$LOGS/kernel_tests.log")"
grep -E "FAIL" "$LOGS/kernel_tests.log" | cut -c1-200 | head -20 | tee -a "$SUMMARY"
for pdl in 0 1; do
  PAGELLM_PDL=$pdl timeout 300 "$B/cuda_engine_check" "$B/models" --device cuda \
    > "$LOGS/engine_check_pdl$pdl.log" 2>&1
  say "engine check, PAGELLM_PDL=$pdl (exit $?): $(grep -iE 'passed|failed' "$LOGS/engine_check_pdl$pdl.log" | tail -1)"
  grep -E "FAIL" "$LOGS/engine_check_pdl$pdl.log" | cut -c1-200 | head -20 | tee -a "$SUMMARY"
done

for pdl in off on; do
  flags=(--fp8)
  [ $pdl = on ] && flags=(--fp8 --pdl)
  timeout 420 "$B/cuda_runner_check" "$B/models" "${flags[@]}" > "$LOGS/runner_check_pdl_$pdl.log" 2>&1
  say "runner check ${flags[*]} (exit $?):"
  grep -E "FAIL|runner checks:|programmatic|tok/s|copy" "$LOGS/runner_check_pdl_$pdl.log" | head -30 |
    tee -a "$SUMMARY"
done

if [ "${2:-}" = --bench ]; then
  bench() {  # NAME ARGS...
    local name=$1
    shift
    timeout 300 "$B/pagellm" bench throughput --model "$B/llama31-8b" --load-format dummy \
      --device cuda --max-model-len 2048 "$@" > "$LOGS/bench_$name.log" 2>&1
    say "bench $name (exit $?): $(grep -E 'Throughput' "$LOGS/bench_$name.log")"
  }
  for pdl in 0 1; do
    for q in bf16 fp8; do
      flags=()
      [ $q = fp8 ] && flags=(--quantization fp8)
      PAGELLM_PDL=$pdl bench "prefill_64x1024_${q}_pdl$pdl" --num-prompts 64 --input-len 1024 \
        --output-len 1 "${flags[@]}"
      PAGELLM_PDL=$pdl bench "1000x1024x128_${q}_pdl$pdl" --num-prompts 1000 --input-len 1024 \
        --output-len 128 "${flags[@]}"
    done
  done
fi
echo "==== summary"
cat "$SUMMARY"
