#!/usr/bin/env bash
# The default step budget (EngineArgs::max_num_batched_tokens: 16,384 offline on a large GPU)
# against the old 2,048 on the GPU machine (docs/PERF.md, "vLLM's step budget offline"):
#   bash run_step_budget.sh BUNDLE
# BUNDLE: pagellm (xz'd), cuda_probe, unpack_bundle.sh and the llama31-8b and qwen3-30b-a3b config
# folders (tokenizer.json.gz, tokenizer_config.json).
SRC=$(cd "${1:?usage: run_step_budget.sh BUNDLE}" && pwd)
. "$SRC/unpack_bundle.sh"
timeout 60 "$B/cuda_probe" > "$LOGS/probe.log" 2>&1
say "probe: $(grep -iE 'copy|gemm' "$LOGS/probe.log" | tr '\n' ' ')"
run() {  # MODEL PROMPTS OUTPUT_LEN [FLAGS...]: the Throughput line and the step budget used
  local model=$1 prompts=$2 out=$3
  shift 3
  timeout 250 "$B/pagellm" bench throughput --model "$B/$model" --load-format dummy --device cuda \
    --max-model-len 2048 --num-prompts "$prompts" --input-len 1024 --output-len "$out" "$@" \
    > "$LOGS/run.log" 2>&1
  echo "$(grep -oE '[0-9]+ tokens per step' "$LOGS/run.log" | head -1):" \
    "$(awk '/Throughput/ {print $2, "req/s"}' "$LOGS/run.log")"
}
for q in "" "--quantization fp8"; do
  for budget in "" "--max-num-batched-tokens 2048"; do
    say "llama31-8b ${q:-bf16} ${budget:-default}: prefill 64 x 1024: $(run llama31-8b 64 1 $q $budget)"
    say "llama31-8b ${q:-bf16} ${budget:-default}: 1000 x (1024, 128): $(run llama31-8b 1000 128 $q $budget)"
  done
done
for budget in "" "--max-num-batched-tokens 2048"; do
  say "qwen3-30b-a3b ${budget:-default}: prefill 64 x 1024: $(run qwen3-30b-a3b 64 1 $budget)"
done
grep -iE "load|graph|ready" "$LOGS/run.log" | head -5 | tee -a "$SUMMARY"
