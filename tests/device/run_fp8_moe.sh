#!/usr/bin/env bash
# FP8 experts of mixture-of-experts models on the GPU machine (docs/PERF.md, "FP8 experts"):
#   bash run_fp8_moe.sh BUNDLE
# BUNDLE: pagellm, cuda_kernel_tests, cuda_runner_check (xz'd), cuda_probe, unpack_bundle.sh,
# models/stories260K and models/hf_reference/{qwen3_moe_tiny,mixtral_tiny} (tests/data), and the
# Qwen3-30B-A3B config twice: qwen3-30b-a3b, and qwen3-30b-a3b-fp8 with Qwen3-30B-A3B-FP8's
# quantization_config ({"quant_method": "fp8", "weight_block_size": [128, 128], ...}).
SRC=$(cd "${1:?usage: run_fp8_moe.sh BUNDLE}" && pwd)
. "$SRC/unpack_bundle.sh"
timeout 60 "$B/cuda_probe" > "$LOGS/probe.log" 2>&1
say "probe: $(grep -iE 'copy|gemm' "$LOGS/probe.log" | tr '\n' ' ')"
for f in moe "fp8 dequantize"; do
  timeout 200 "$B/cuda_kernel_tests" --filter "$f" > "$LOGS/tests.log" 2>&1
  say "kernel tests '$f' (exit $?): $(grep -E 'kernel tests:' "$LOGS/tests.log")"
  grep FAIL "$LOGS/tests.log" | tee -a "$SUMMARY"
done
for g in default host; do  # host: every eager step of 2+ tokens through the host-sorted pass
  e=""; [ $g = host ] && e="PAGELLM_MOE_GROUPING=host"
  timeout 300 env $e "$B/cuda_runner_check" "$B/models" --skip-perf > "$LOGS/rc_$g.log" 2>&1
  say "runner check $g (exit $?): $(grep -E 'runner checks:' "$LOGS/rc_$g.log")"
  grep -E "FP8|FAIL" "$LOGS/rc_$g.log" | cut -c1-200 | tee -a "$SUMMARY"
done
timeout 300 "$B/cuda_kernel_tests" --moe-bench-only > "$LOGS/bench.log" 2>&1
sed -n '/MoE experts/,$p' "$LOGS/bench.log" | tee -a "$SUMMARY"
# Batch 1: 1 x (128 in, 64 / 576 out); the rate is 512 tokens over the difference of the times.
b1() {
  timeout 150 "$B/pagellm" bench throughput --model "$B/$1" --load-format dummy --device cuda \
    --no-bound --num-prompts 1 --input-len 128 --output-len "$2" --max-model-len 1024 2>&1 |
    awk '/Throughput/ {print $4}'
}
for m in qwen3-30b-a3b qwen3-30b-a3b-fp8; do
  t64=$(b1 $m 64); t576=$(b1 $m 576)
  say "$m batch 1: $(python3 -c "print('%.1f tok/s' % (512 / (704 / $t576 - 192 / $t64)))")"
  Q="$B/pagellm bench throughput --model $B/$m --load-format dummy --device cuda --no-bound"
  timeout 200 $Q --num-prompts 64 --input-len 128 --output-len 256 --max-model-len 1024 > "$LOGS/d.log" 2>&1
  say "$m 64 x (128, 256): $(grep Throughput "$LOGS/d.log")"
  timeout 200 $Q --num-prompts 64 --input-len 1024 --output-len 1 --max-model-len 2048 > "$LOGS/p.log" 2>&1
  say "$m prefill 64 x 1024: $(grep Throughput "$LOGS/p.log")"
  timeout 250 $Q --num-prompts 1000 --input-len 1024 --output-len 128 --max-model-len 2048 > "$LOGS/t.log" 2>&1
  say "$m 1000 x (1024, 128): $(grep Throughput "$LOGS/t.log")"
  grep -E "GB of weights|KV cache:" "$LOGS/t.log" | cut -c1-200 | tee -a "$SUMMARY"
done
