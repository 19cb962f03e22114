#!/usr/bin/env bash
# The bundles of run_spec_gpu.sh, two because of the carry limit: BUNDLE_DIR (pagellm,
# cuda_runner_check and cuda_kernel_tests xz'd, the ceilings probe, the scripts, stories260K, pycode-draft-10M, the
# Llama-3.1-8B config and tokenizer) and
# BUNDLE_DIR-models (pycode-25M xz'd), which a first call leaves in /tmp/pagellm-keep on the warm
# GPU machine:
#   bash BUNDLE-models/../BUNDLE/run_spec_gpu.sh BUNDLE BUNDLE-models   (call 1: carries -models)
#   bash BUNDLE/run_spec_gpu.sh BUNDLE [STAGE...]                       (call 2: carries BUNDLE)
# The first call needs the script: the models folder carries a copy.
# Usage: tests/device/make_spec_bundle.sh BUNDLE_DIR   (after building build-cuda's pagellm)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:?usage: make_spec_bundle.sh BUNDLE_DIR}
SHARED=$ROOT/../shared
bash "$ROOT/tests/device/make_bundle.sh" "$OUT" > /dev/null
rm -rf "$OUT"/cuda_engine_check.gz "$OUT/tokenizers"
gunzip -f "$OUT"/*.gz && xz -6 -T2 "$OUT/pagellm" "$OUT/cuda_runner_check" "$OUT/cuda_kernel_tests"
cp -r "$SHARED/models/pycode-draft-10M" "$OUT/models/" && chmod -R u+w "$OUT/models"
xz -6 -T2 "$OUT"/models/pycode-draft-10M/*.safetensors "$OUT/models/pycode-draft-10M/tokenizer.json"
rm -rf "$OUT-models" && mkdir -p "$OUT-models"
cp -r "$SHARED/models/pycode-25M" "$OUT-models/" && chmod -R u+w "$OUT-models"
xz -6 -T2 "$OUT-models"/pycode-25M/*.safetensors "$OUT-models/pycode-25M/tokenizer.json"
cp "$ROOT/tests/device/run_spec_gpu.sh" "$OUT-models/"
du -sh "$OUT" "$OUT-models"
