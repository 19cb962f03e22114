#!/usr/bin/env bash
# Runs the CUDA kernel tests and benchmarks on the GPU machine, next to the ceilings probe.
# Usage: tests/device/run_kernel_tests.sh BIN_DIR [extra cuda_kernel_tests args]
#   BIN_DIR holds cuda_kernel_tests and cuda_probe built on a development machine:
#     cmake -S . -B build-cuda -G Ninja -DPAGELLM_CUDA=ON -DPAGELLM_TESTS=OFF && cmake --build build-cuda --target cuda_kernel_tests
#     nvcc -O2 -gencode=arch=compute_90a,code=sm_90a -o BIN_DIR/cuda_probe ../shared/device/cuda_probe.cu -lcublas
# Logs go to $OUT (or ./device-logs) as probe.log and kernel_tests.log; the short table prints last.
set -uo pipefail
BIN=${1:?usage: run_kernel_tests.sh BIN_DIR [args]}
shift
LOGS=${OUT:-./device-logs}
mkdir -p "$LOGS"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv | tee "$LOGS/gpu.txt"
"$BIN/cuda_probe" 2>&1 | tee "$LOGS/probe.log"
# Separate, bounded runs so that a hang in one part still leaves the other's results.
timeout "${TEST_TIMEOUT:-300}" "$BIN/cuda_kernel_tests" "$@" > "$LOGS/kernel_tests.log" 2>&1
status=$?
timeout "${BENCH_TIMEOUT:-200}" "$BIN/cuda_kernel_tests" --bench-only > "$LOGS/kernel_bench.log" 2>&1
bench_status=$?
grep -E "FAIL|kernel tests:|error" "$LOGS/kernel_tests.log" | head -40
cat "$LOGS/kernel_bench.log"
echo "cuda_kernel_tests exit status: tests $status, bench $bench_status"
exit $status
