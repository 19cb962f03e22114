#!/usr/bin/env bash
# Issue 18 on the GPU machine: the new families (Qwen3-MoE, Mixtral, Phi-3) on the CUDA runner.
#   1. ceilings (copy bandwidth, cuBLAS bf16) from the probe;
#   2. cuda_runner_check --skip-perf: tiny models of every family, GPU logits against the CPU
#      runner's (fp32 within 1e-4, bf16 top-5 closeness), with the older checks;
#   3. hf: at real layer shapes (Qwen3-30B-A3B with 8 layers, Mixtral-8x7B with 4, Phi-3-mini),
#      how often pagellm's greedy tokens are HF fp32's teacher-forced argmax, beside HF bf16's own
#      greedy tokens (tp_agreement.py --hf-bf16; the issue's bar: within 2 points); compare: the
#      top-5 logprob-closeness rule against HF bf16 (run_hf_compare.sh);
#   4. Qwen3-30B-A3B shapes, dummy bf16 weights: decode tokens/s at batch 1 and 8 (the difference of
#      two `bench throughput` runs, 64 and 576 output tokens, so prefill cancels), beside the
#      roofline of the bytes a token needs (attention + router + 8 experts per layer + LM head).
# Usage: bash BUNDLE/run_families_gpu.sh BUNDLE [STAGE...]  (stages: check hf compare perf)
set -uo pipefail
SRC=$(cd "${1:?usage: run_families_gpu.sh BUNDLE [STAGE...]}" && pwd)
shift
[ $# -gt 0 ] || set -- check hf perf
. "$SRC/unpack_bundle.sh"
"$B/cuda_probe" > "$LOGS/probe.txt" 2>&1
COPY=$(sed -n 's/^d2d copy: \([0-9.]*\) GB\/s.*/\1/p' "$LOGS/probe.txt")
say "probe: $(tr '\n' ' ' < "$LOGS/probe.txt" | cut -c1-300)"
for stage in "$@"; do
  case $stage in
    check)
      "$B/cuda_runner_check" "$B/models" --skip-perf > "$LOGS/runner_check.txt" 2>&1
      say "runner check exit $?"
      grep -E "tiny (qwen3_moe|mixtral|phi3)|FAIL|runner checks" "$LOGS/runner_check.txt" | tee -a "$SUMMARY" ;;
    hf)  # HF fp32's teacher-forced argmax agreement: HF bf16's greedy output beside pagellm's
      mkdir -p /tmp/fam && rm -rf /tmp/fam/tokenizers && cp -r "$B/tokenizers" /tmp/fam/tokenizers &&
        find /tmp/fam/tokenizers -name "*.gz" -exec gunzip -f {} +
      for arch in ${FAMILY_ARCHS:-qwen3-30b-a3b-8l mixtral-8x7b-4l phi3-mini}; do
        timeout 420 python3 "$B/tp_agreement.py" --pagellm "$B/pagellm" --tokenizers /tmp/fam/tokenizers \
          --work /tmp/fam --logs "$LOGS/hf" --arch "$arch" --hf-bf16 pagellm= > "$LOGS/agreement_$arch.txt" 2>&1
        say "HF fp32 agreement, $arch (exit $?):"
        grep -E "^\| [a-z]|ERROR" "$LOGS/agreement_$arch.txt" | tee -a "$SUMMARY"
      done ;;
    compare)  # top-5 logprob closeness against HF bf16 (hf_compare.py)
      OUT=$LOGS/hf bash "$B/run_hf_compare.sh" "$B" qwen3-30b-a3b-8l mixtral-8x7b-4l phi3-mini \
        > "$LOGS/hf_compare.txt" 2>&1
      say "hf compare exit $?"
      grep -E "^\| " "$LOGS/hf_compare.txt" | tee -a "$SUMMARY" ;;
    perf)
      # Parameters one decode token reads: per layer q/k/v/o, router, 8 experts' gate/up/down, norms;
      # then the LM head (bf16: 2 bytes each). The KV reads at ~600 tokens add < 1%.
      PARAMS=$(( 48 * (4096*2048 + 2*512*2048 + 2048*4096 + 128*2048 + 8*3*768*2048 + 2*2048 + 2*128) + 151936*2048 + 2048 ))
      for b in 1 8; do
        for out in 64 576; do
          timeout 600 "$B/pagellm" bench throughput --model "$B/qwen3-30b-a3b" --load-format dummy \
            --device cuda --num-prompts "$b" --input-len 128 --output-len "$out" --max-model-len 1024 \
            --max-num-seqs "$b" > "$LOGS/bench_b${b}_o${out}.txt" 2>&1
          grep -o "Throughput: [0-9.]* requests/s" "$LOGS/bench_b${b}_o${out}.txt" | head -1 |
            awk -v b="$b" -v o="$out" '{print b, o, $2}' >> "$LOGS/bench.tsv"
        done
      done
      awk -v p="$PARAMS" -v cp="$COPY" '
        { rps[$1 " " $2] = $3 }
        END { for (b = 1; b <= 8; b *= 8) {
                t1 = b / rps[b " 64"]; t2 = b / rps[b " 576"];
                tps = b * 512 / (t2 - t1); roof = cp * 1e9 / (2 * p);
                printf "Qwen3-30B-A3B bf16 decode batch %d: %.1f tok/s (%.2f ms/step)", b, tps, 1000 * (t2 - t1) / 512;
                if (b == 1) printf "; roofline %.1f tok/s (%.3f GB per token at %s GB/s) = %.0f%%",
                                   roof, 2 * p / 1e9, cp, 100 * tps / roof;
                printf "\n" } }' \
        "$LOGS/bench.tsv" | tee -a "$SUMMARY" ;;
  esac
done
