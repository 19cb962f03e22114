#!/usr/bin/env bash
# The memory-bound kernels of prefill steps (RMSNorm, RoPE + KV write, SiLU-and-mul with the down
# projection's FP8 quantization) on the GPU machine, new build against a base build in one call
# (docs/PERF.md, "Prefill's memory-bound kernels"):
#   bash run_prefill_elementwise.sh BUNDLE
# BUNDLE: pagellm, pagellm.base, cuda_kernel_tests, cuda_runner_check (xz'd), cuda_probe,
# unpack_bundle.sh, ncu_summary.py, profile_prefill.sh, models/stories260K,
# models/hf_reference/{qwen3_moe_tiny,mixtral_tiny} (tests/data) and the llama31-8b config folder
# (tokenizer.json.gz, tokenizer_config.json). Knobs: TESTS (kernel test filters, or all), ROUNDS
# (prefill A/B rounds, 2), B1_ROUNDS (batch-1 rounds, 1), PROFILE=0 (no Nsight Compute profile),
# TPUT=0 (no 1000-request runs).
SRC=$(cd "${1:?usage: run_prefill_elementwise.sh BUNDLE}" && pwd)
. "$SRC/unpack_bundle.sh"
chmod +x "$B/pagellm.base"
timeout 60 "$B/cuda_probe" > "$LOGS/probe.log" 2>&1
say "probe: $(grep -iE 'copy|gemm' "$LOGS/probe.log" | tr '\n' ' ')"
# The kernels this work changed (all of them: TESTS=all, ~260 s on an H200).
for f in ${TESTS:-rms_norm rope write_kv quantize "fp8 fused" "fp8 linear"}; do
  [ "$f" = all ] && f=""
  timeout 400 "$B/cuda_kernel_tests" ${f:+--filter "$f"} > "$LOGS/tests.log" 2>&1
  say "kernel tests '$f' (exit $?): $(grep -E 'kernel tests:' "$LOGS/tests.log")"
  grep FAIL "$LOGS/tests.log" | head -20 | tee -a "$SUMMARY"
done
timeout 300 "$B/cuda_runner_check" "$B/models" --skip-perf --fp8 > "$LOGS/rc.log" 2>&1
say "runner check --fp8 (exit $?): $(grep -E 'runner checks:' "$LOGS/rc.log")"
grep FAIL "$LOGS/rc.log" | cut -c1-200 | tee -a "$SUMMARY"
timeout 200 "$B/cuda_kernel_tests" --fp8-fused-bench-only > "$LOGS/bench.log" 2>&1
sed -n '/fused quantization benchmark/,$p' "$LOGS/bench.log" | tee -a "$SUMMARY"
# Prefill 64 x 1024 and 1000 x (1024 in, 128 out), base and new alternating, bf16 and FP8.
tput() {  # BINARY QUANT PROMPTS OUTPUT_LEN
  local q=(); [ "$2" = fp8 ] && q=(--quantization fp8)
  timeout 250 "$B/$1" bench throughput --model "$B/llama31-8b" --load-format dummy --device cuda \
    --max-model-len 2048 --num-prompts "$3" --input-len 1024 --output-len "$4" "${q[@]}" 2>&1 |
    awk '/Throughput/ {print $2}'
}
for round in $(seq "${ROUNDS:-2}"); do
  for q in bf16 fp8; do
    for bin in pagellm.base pagellm; do
      say "round $round $q $bin prefill 64 x 1024: $(tput $bin $q 64 1) req/s"
    done
  done
done
# Batch 1: 1 x (128 in, 64 / 576 out); the rate is 512 tokens over the difference of the times.
b1() {
  local q=(); [ "$2" = fp8 ] && q=(--quantization fp8)
  timeout 150 "$B/$1" bench throughput --model "$B/llama31-8b" --load-format dummy --device cuda \
    --no-bound --num-prompts 1 --input-len 128 --output-len "$3" --max-model-len 1024 "${q[@]}" 2>&1 |
    awk '/Throughput/ {print $4}'
}
for round in $(seq "${B1_ROUNDS:-1}"); do
  for q in bf16 fp8; do
    for bin in pagellm.base pagellm; do
      t64=$(b1 $bin $q 64); t576=$(b1 $bin $q 576)
      say "$q $bin batch 1: $(python3 -c "print('%.1f tok/s' % (512 / (704 / $t576 - 192 / $t64)))")"
    done
  done
done
# The per-kernel profile: it unpacks the bundle again, into its own log folder.
if [ "${PROFILE:-1}" = 1 ]; then
  OUT=/tmp/prefill-profile bash "$SRC/profile_prefill.sh" "$SRC" 8 2048 > /dev/null 2>&1
  cp /tmp/prefill-profile/summary.txt "$LOGS/profile_summary.txt"
  B=/tmp/pagellm-bundle && chmod +x "$B/pagellm.base"
fi
[ "${TPUT:-1}" = 1 ] && for q in bf16 fp8; do
  for bin in pagellm.base pagellm; do
    say "$q $bin 1000 x (1024, 128): $(tput $bin $q 1000 128) req/s"
  done
done
true

