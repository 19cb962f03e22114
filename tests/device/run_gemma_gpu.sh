#!/usr/bin/env bash
# Issue 18 on the GPU machine: Gemma 2 / 3 and sliding-window attention on the CUDA runner, from a
# bundle made by make_bundle.sh (plus the build before as pagellm.base(.xz) for `perf`).
#   kernels: the attention kernel tests, windows and soft caps among them, against float64 attention;
#   check:   cuda_runner_check --skip-perf: tiny Gemma 2 / 3 GPU logits against the CPU runner's,
#            with every older runner check;
#   hf:      Gemma-3-12B and Gemma-2-9B layer shapes (8 / 6 layers, a 64-token window the prompts
#            and 64 greedy steps run past): how often pagellm's greedy tokens are HF fp32's
#            teacher-forced argmax, beside HF bf16's own (tp_agreement.py --hf-bf16);
#   perf:    Llama-3.1-8B shapes, dummy bf16: the build before and this one alternating, batch-1
#            decode (1 x (128 in, 512 out), output tok/s) and prefill 64 x 1024 (req/s), so the
#            kernels' window and cap code is seen to cost models without them nothing.
# Usage: bash BUNDLE/run_gemma_gpu.sh BUNDLE [STAGE...]   (default: kernels check perf)
set -uo pipefail
SRC=$(cd "${1:?usage: run_gemma_gpu.sh BUNDLE [STAGE...]}" && pwd)
shift
[ $# -gt 0 ] || set -- kernels check perf
. "$SRC/unpack_bundle.sh"
"$B/cuda_probe" > "$LOGS/probe.txt" 2>&1
say "probe: $(tr '\n' ' ' < "$LOGS/probe.txt" | cut -c1-300)"
for stage in "$@"; do
  case $stage in
    kernels)
      timeout 400 "$B/cuda_kernel_tests" --filter attention > "$LOGS/kernel_tests.txt" 2>&1
      say "attention kernel tests (exit $?): $(grep -E '^kernel tests:' "$LOGS/kernel_tests.txt")"
      say "  of which windowed: $(grep -c 'window=' "$LOGS/kernel_tests.txt"), soft-capped: $(grep -c 'softcap' "$LOGS/kernel_tests.txt")"
      grep -E "FAIL" "$LOGS/kernel_tests.txt" | cut -c1-240 | head -20 | tee -a "$SUMMARY" ;;
    check)
      timeout 400 "$B/cuda_runner_check" "$B/models" --skip-perf > "$LOGS/runner_check.txt" 2>&1
      say "runner check (exit $?):"
      grep -E "tiny gemma|FAIL|runner checks" "$LOGS/runner_check.txt" | tee -a "$SUMMARY" ;;
    hf)
      mkdir -p /tmp/gem && rm -rf /tmp/gem/tokenizers && cp -r "$B/tokenizers" /tmp/gem/tokenizers &&
        find /tmp/gem/tokenizers -name "*.gz" -exec gunzip -f {} +
      for arch in ${GEMMA_ARCHS:-gemma3-12b-8l gemma2-9b-6l}; do
        timeout 420 python3 "$B/tp_agreement.py" --pagellm "$B/pagellm" --tokenizers /tmp/gem/tokenizers \
          --work /tmp/gem --logs "$LOGS/hf" --arch "$arch" --hf-bf16 pagellm= > "$LOGS/agreement_$arch.txt" 2>&1
        say "HF fp32 agreement, $arch (exit $?):"
        grep -E "^\| [a-z]|ERROR|Error" "$LOGS/agreement_$arch.txt" | tail -5 | tee -a "$SUMMARY"
        # A degenerate random model repeats one token; these must not (the window must matter).
        say "  pagellm's greedy texts: $(python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
d = sorted(len(set(r["token_ids"])) for r in rows)
print("%d sequences, distinct tokens per 64: min %d, median %d" % (len(d), d[0], d[len(d) // 2]))
' "$LOGS/hf/tp_pagellm.jsonl")"
      done ;;
    perf)
      for round in 1 2; do
        for which in base new new-no-bound; do
          bin=$B/pagellm
          [ $which = base ] && bin=$B/pagellm.base
          [ -x "$bin" ] || continue
          common=(bench throughput --model "$B/llama31-8b" --load-format dummy --device cuda --max-model-len 2048)
          [ $which = new-no-bound ] && common+=(--no-bound)
          d=$(timeout 300 "$bin" "${common[@]}" --num-prompts 1 --input-len 128 --output-len 512 2>&1 |
              grep -o "[0-9.]* output tokens/s" | head -1)
          p=$(timeout 300 "$bin" "${common[@]}" --num-prompts 64 --input-len 1024 --output-len 1 2>&1 |
              grep -o "Throughput: [0-9.]* requests/s" | head -1)
          say "perf $which round $round: batch-1 decode $d; prefill 64 x 1024 $p"
        done
      done ;;
  esac
done
