#!/usr/bin/env bash
# Runs tests/device/hf_compare.py on the GPU machine: pagellm (CUDA, bf16) against HF transformers,
# 16 prompts x 64 greedy steps, top-5 logprob-closeness rule. Needs python3 with torch + transformers.
# Usage: tests/device/run_hf_compare.sh BIN_DIR [ARCH...]   (default archs: tiny-llama tiny-qwen3)
#   BIN_DIR holds pagellm, hf_compare.py, lib/ (shared libraries missing on the GPU machine) and
#   tokenizers/{llama3,qwen3}/tokenizer{,_config}.json. Logs go to $OUT (or ./device-logs).
set -uo pipefail
BIN=$(cd "${1:?usage: run_hf_compare.sh BIN_DIR [ARCH...]}" && pwd)
shift
[ $# -gt 0 ] || set -- tiny-llama tiny-qwen3
LOGS=${OUT:-./device-logs}
mkdir -p "$LOGS"
WORK=${HF_COMPARE_WORK:-/tmp/hf_compare}
mkdir -p "$WORK"
export LD_LIBRARY_PATH=$BIN/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$LOGS/gpu.txt"
date -u | tee -a "$LOGS/gpu.txt"
# Tokenizer files may travel gzipped (the bundle has a size limit).
rm -rf "$WORK/tokenizers" && cp -r "$BIN/tokenizers" "$WORK/tokenizers" && find "$WORK/tokenizers" -name "*.gz" -exec gunzip -f {} +
python3 "$BIN/hf_compare.py" --pagellm "$BIN/pagellm" --tokenizers "$WORK/tokenizers" --work "$WORK" \
  --logs "$LOGS" "$@" 2>&1 | tee "$LOGS/hf_compare.log"
exit "${PIPESTATUS[0]}"
