#!/usr/bin/env bash
# Offline throughput with vLLM's large-GPU sequence limit (1,024 sequences per step) against 256,
# bf16 beside FP8, on the GPU machine (docs/PERF.md, "vLLM's sequence limit offline"):
#   bash run_seq_limit.sh BUNDLE [SEQ_LIMITS...]   (default: "256 1024")
# BUNDLE: pagellm (xz'd), cuda_probe, unpack_bundle.sh and the llama31-8b config folder.
SRC=$(cd "${1:?usage: run_seq_limit.sh BUNDLE [SEQ_LIMITS...]}" && pwd)
shift
LIMITS=${*:-256 1024}
. "$SRC/unpack_bundle.sh"
timeout 60 "$B/cuda_probe" > "$LOGS/probe.log" 2>&1
say "probe: $(grep -iE 'copy|gemm' "$LOGS/probe.log" | tr '\n' ' ')"
run() {  # LOG PROMPTS OUTPUT_LEN [FLAGS...]: the Throughput line, the bound and the start-up times
  local log=$1 prompts=$2 out=$3
  shift 3
  timeout 280 "$B/pagellm" bench throughput --model "$B/llama31-8b" --load-format dummy \
    --device cuda --max-model-len 2048 --num-prompts "$prompts" --input-len 1024 \
    --output-len "$out" "$@" > "$log" 2>&1
  echo "$(awk '/Throughput/ {print $2, "req/s"}' "$log");" \
    "$(grep -iE 'bound' "$log" | head -2 | tr '\n' ' ')"
}
for q in "" "--quantization fp8"; do
  for limit in $LIMITS; do
    tag="$([ -n "$q" ] && echo fp8 || echo bf16)-$limit"
    say "${q:-bf16} max-num-seqs $limit: 1000 x (1024, 128): $(run "$LOGS/$tag.log" 1000 128 $q --max-num-seqs "$limit")"
    say "  $(grep -iE 'graphs|KV cache' "$LOGS/$tag.log" | head -3 | tr '\n' ' ')"
  done
done
