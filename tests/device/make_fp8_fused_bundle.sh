#!/usr/bin/env bash
# The bundle of run_fp8_fused_ab.sh: make_bundle.sh's (without the engine check and the tokenizers, to stay under the
# carry limit), the binaries xz'd, BASE_BUILD's pagellm and cuda_runner_check (the build before
# the change) as *.base, pycode-draft-10M and the held-out Python text.
# Usage: tests/device/make_fp8_fused_bundle.sh BUNDLE_DIR BASE_BUILD_DIR
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:?usage: make_fp8_fused_bundle.sh BUNDLE_DIR BASE_BUILD_DIR}
BASE=${2:?usage: make_fp8_fused_bundle.sh BUNDLE_DIR BASE_BUILD_DIR}
bash "$ROOT/tests/device/make_bundle.sh" "$OUT" > /dev/null
rm -rf "$OUT/cuda_engine_check.gz" "$OUT/tokenizers"  # llama31-8b/ keeps its tokenizer
gunzip -f "$OUT"/*.gz
for b in pagellm cuda_runner_check; do strip -o "$OUT/$b.base" "$BASE/$b"; done
xz -6 -T2 "$OUT"/pagellm "$OUT"/pagellm.base "$OUT"/cuda_*_check* "$OUT"/cuda_kernel_tests
cp -r "$ROOT/../shared/models/pycode-draft-10M" "$OUT/models/" && chmod -R u+w "$OUT/models"
xz -6 -T2 "$OUT"/models/pycode-draft-10M/*.safetensors "$OUT/models/pycode-draft-10M/tokenizer.json"
cp "$ROOT/tests/data/heldout_python.txt" "$OUT/"
du -sh "$OUT"
