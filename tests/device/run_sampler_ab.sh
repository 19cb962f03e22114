#!/usr/bin/env bash
# The GPU sampler's two paths side by side on the GPU machine: the sampler suite (every row against
# the CPU sampler) and the sampler bench, first with the fast path (sampler_fast.cuh), then with
# every sampled row sent through the full path (PAGELLM_SAMPLER_FULL_PATH=1).
# Usage: tests/device/run_sampler_ab.sh BIN_DIR   (BIN_DIR holds cuda_kernel_tests, or it xz'd:
#   strip -o DIR/cuda_kernel_tests build-cuda/cuda_kernel_tests && xz DIR/cuda_kernel_tests)
# Logs go to $OUT (or ./device-logs).
set -uo pipefail
BIN=${1:?usage: run_sampler_ab.sh BIN_DIR}
if [ -f "$BIN/cuda_kernel_tests.xz" ]; then
  mkdir -p /tmp/pagellm-sampler && xz -dc "$BIN/cuda_kernel_tests.xz" > /tmp/pagellm-sampler/cuda_kernel_tests
  chmod +x /tmp/pagellm-sampler/cuda_kernel_tests
  BIN=/tmp/pagellm-sampler
fi
LOGS=${OUT:-./device-logs}
mkdir -p "$LOGS"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
status=0
for mode in fast full; do
  if [ "$mode" = full ]; then export PAGELLM_SAMPLER_FULL_PATH=1; else unset PAGELLM_SAMPLER_FULL_PATH; fi
  timeout "${TEST_TIMEOUT:-300}" "$BIN/cuda_kernel_tests" --filter sampler > "$LOGS/sampler_$mode.log" 2>&1 || status=1
  echo "== $mode path: tests"
  grep -E "FAIL|mismatch|kernel tests:" "$LOGS/sampler_$mode.log" | head -20
  timeout "${BENCH_TIMEOUT:-200}" "$BIN/cuda_kernel_tests" --sampler-bench --filter none \
    > "$LOGS/sampler_bench_$mode.log" 2>&1 || status=1
  echo "== $mode path: bench"
  grep -E "sampler bench|cpu" "$LOGS/sampler_bench_$mode.log"
done
exit $status
