#!/usr/bin/env bash
# Quantized MoE / Phi-3 / Gemma checkpoints and longrope on the GPU against the CPU runner, with
# the RoPE kernel tests (docs/PERF.md, "Quantized families and longrope on the GPU"):
#   bash run_quant_families.sh BUNDLE
# BUNDLE: cuda_kernel_tests and cuda_runner_check (xz'd), cuda_probe, unpack_bundle.sh,
# models/stories260K and models/hf_reference/{qwen3_moe_tiny,mixtral_tiny,phi3_tiny,
# phi3_longrope_tiny,gemma2_tiny,gemma3_tiny}.
SRC=$(cd "${1:?usage: run_quant_families.sh BUNDLE}" && pwd)
. "$SRC/unpack_bundle.sh"
timeout 60 "$B/cuda_probe" > "$LOGS/probe.log" 2>&1
say "probe: $(grep -iE 'copy|gemm' "$LOGS/probe.log" | tr '\n' ' ')"
timeout 300 "$B/cuda_kernel_tests" --filter rope > "$LOGS/kernel_rope.log" 2>&1
say "kernel tests (rope): $(tail -1 "$LOGS/kernel_rope.log")"
timeout 400 "$B/cuda_runner_check" "$B/models" --skip-perf > "$LOGS/runner_check.log" 2>&1
say "runner check (exit $?): $(grep -c '^  ok' "$LOGS/runner_check.log") ok," \
  "$(grep -c '^  FAIL' "$LOGS/runner_check.log") failed"
grep -A200 "== quantized" "$LOGS/runner_check.log" | grep -E "^  (ok|FAIL)" | cut -c1-230 >> "$SUMMARY"
grep -E "^  FAIL|^FAIL" "$LOGS/runner_check.log" | cut -c1-230 >> "$SUMMARY"
