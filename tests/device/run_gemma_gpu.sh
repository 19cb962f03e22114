#!/usr/bin/env bash
# Issue 18 on the GPU machine: Gemma 2 / 3 and sliding-window attention on the CUDA runner, from a
# bundle made by make_bundle.sh (plus the build before as pagellm.base(.xz) for `perf`).
#   kernels: the attention kernel tests, windows and soft caps among them, against float64 attention;
#   check:   cuda_runner_check --skip-perf: tiny Gemma 2 / 3 GPU logits against the CPU runner's,
#            with every older runner check;
#   hf:      Gemma-3-12B and Gemma-2-9B layer shapes (8 / 6 layers, a 64-token window the prompts
#            and 64 greedy steps run past): how often pagellm's greedy tokens are HF fp32's
#            teacher-forced argmax, beside HF bf16's own (tp_agreement.py --hf-bf16);
#   hybrid:  the hybrid KV layout (sliding layers free what their window has passed) on the GPU:
#            gemma2_tiny / gemma3_tiny greedy tokens with it, without it, and on the CPU, in prefill
#            chunks of 16 across 8-token blocks;
#   memory:  Gemma-3-12B layer shapes (12 of its 48 layers, the same 5 sliding to 1 global, window
#            1024; dummy bf16): `bench throughput` one 32k-token prompt with and without the hybrid
#            layout: the peak KV blocks the sequence held, and the time;
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
    hybrid)
      for name in gemma2_tiny gemma3_tiny; do
        d=/tmp/hyb/$name && mkdir -p $d && cp tests/data/hf_reference/$name/*.json tests/data/hf_reference/$name/*.safetensors $d/ &&
          cp "$B"/models/stories260K/tokenizer* $d/
        run() {
          local label=$1
          shift
          "$B/pagellm" generate --model $d --prompt "Once upon a time there was a little girl named Lily. She loved to play outside in the sun with her friends and her dog" \
            --max-tokens 120 --temperature 0 --ignore-eos --block-size 8 --max-num-batched-tokens 16 \
            --kv-cache-memory 0.05 "$@" 2> "$LOGS/hybrid_${name}_$label.log" | tee "$LOGS/hybrid_${name}_$label.out" | md5sum | cut -c1-12
        }
        a=$(run gpu --device cuda) b=$(run gpufull --device cuda --disable-hybrid-kv-cache-manager) c=$(run cpu --device cpu)
        say "hybrid $name: gpu hybrid $a, gpu full $b, cpu hybrid $c ($([ "$a" = "$b" ] && [ "$a" = "$c" ] && echo same || echo DIFFERENT))"
        grep -h "KV cache groups" "$LOGS"/hybrid_${name}_gpu.log | head -1 | cut -c1-220 | tee -a "$SUMMARY"
      done ;;
    memory)
      mkdir -p /tmp/g3 && python3 - /tmp/g3/config.json <<'PY'
import json, sys
json.dump({"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "vocab_size": 128256,
           "hidden_size": 3840, "intermediate_size": 15360, "num_hidden_layers": 12,
           "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256, "query_pre_attn_scalar": 256,
           "max_position_embeddings": 131072, "rms_norm_eps": 1e-6, "sliding_window": 1024,
           "sliding_window_pattern": 6, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
           "rope_scaling": {"rope_type": "linear", "factor": 8.0}, "bos_token_id": 128000,
           "eos_token_id": 128001, "pad_token_id": 0, "tie_word_embeddings": True,
           "hidden_activation": "gelu_pytorch_tanh", "torch_dtype": "bfloat16"}, open(sys.argv[1], "w"))
PY
      cp "$B"/llama31-8b/tokenizer* /tmp/g3/ && gunzip -f /tmp/g3/*.gz 2>/dev/null
      for mode in hybrid full; do
        extra=()
        [ $mode = full ] && extra=(--disable-hybrid-kv-cache-manager)
        for n in 1; do
          timeout 150 "$B/pagellm" bench throughput --model /tmp/g3 --load-format dummy --device cuda \
            --max-model-len 32768 --input-len 32000 --output-len 64 --num-prompts $n --no-bound "${extra[@]}" \
            > "$LOGS/memory_${mode}_$n.txt" 2>&1
          say "memory $mode, $n x (32000, 64) (exit $?): $(grep -E '^Throughput|^Peak KV' "$LOGS/memory_${mode}_$n.txt" | tr '\n' ' ')"
          grep -hE "KV cache: |KV cache groups|loaded" "$LOGS/memory_${mode}_$n.txt" | cut -c1-260 | tee -a "$SUMMARY"
        done
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
