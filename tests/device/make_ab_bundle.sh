#!/usr/bin/env bash
# Assembles the bundle of tests/device/run_env_ab.sh (gitignored, default .device/ab; within the
# device tool's carry limit): cuda_kernel_tests, cuda_runner_check and cuda_engine_check from
# build-cuda (stripped, xz'd), the ceilings probe, stories260K, the tiny HF references and the
# scripts. Then on the GPU machine, from the repository root:
#   bash .device/ab/run_env_ab.sh .device/ab VAR "OFF ON" [RUNNER_CHECK_FLAGS...]
#   bash .device/ab/run_env_ab.sh .device/ab BINARY "base new" [FLAGS...]  (*.base.xz added)
#   bash .device/ab/profile_int_kernel.sh .device/ab KERNEL_REGEX [SHAPE] [M]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-$ROOT/.device/ab}
SHARED=$ROOT/../shared
rm -rf "$OUT" && mkdir -p "$OUT/models"
for b in cuda_kernel_tests cuda_runner_check cuda_engine_check; do
  cp "$ROOT/build-cuda/$b" "$OUT/$b"
  strip "$OUT/$b" 2>/dev/null || true
  xz -T2 -6 "$OUT/$b"
done
/usr/local/cuda/bin/nvcc -O2 -gencode=arch=compute_90a,code=sm_90a -o "$OUT/cuda_probe" \
  "$SHARED/device/cuda_probe.cu" -lcublas
cp "$ROOT/tests/device/unpack_bundle.sh" "$ROOT/tests/device/run_env_ab.sh" \
   "$ROOT/tests/device/profile_int_kernel.sh" "$OUT/"
cp -r "$SHARED/models/stories260K" "$ROOT/tests/data/hf_reference" "$OUT/models/"
du -sh "$OUT"
