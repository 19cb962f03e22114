#!/usr/bin/env bash
# The FP8 linear layers on the GPU machine: GPU facts, the ceilings probe, the FP8 correctness tests
# (cuda_kernel_tests --filter fp8) and the FP8 benchmark (--fp8-bench-only), each bounded by its
# own timeout so that a hang in one still leaves the others' logs.
# Usage: tests/device/run_fp8_tests.sh BIN_DIR
#   BIN_DIR holds cuda_kernel_tests and cuda_probe built on a development machine:
#     cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGELLM_CUDA=ON -DPAGELLM_TESTS=OFF \
#       && cmake --build build-cuda --target cuda_kernel_tests
#     nvcc -O2 -gencode=arch=compute_90a,code=sm_90a -o BIN_DIR/cuda_probe ../shared/device/cuda_probe.cu -lcublas
# Logs go to $OUT (or ./device-logs): gpu.txt, probe.log, fp8_tests.log, fp8_bench.log; a short
# summary prints last.
set -uo pipefail
BIN=$(cd "${1:?usage: run_fp8_tests.sh BIN_DIR}" && pwd)
LOGS=${OUT:-./device-logs}
mkdir -p "$LOGS"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
chmod +x "$BIN/cuda_kernel_tests" "$BIN/cuda_probe" 2>/dev/null
{ nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version --format=csv
  date -u +%FT%TZ; } | tee "$LOGS/gpu.txt"
timeout 40 "$BIN/cuda_probe" > "$LOGS/probe.log" 2>&1
echo "probe (exit $?): $(tr '\n' ' ' < "$LOGS/probe.log")"
timeout "${TEST_TIMEOUT:-100}" "$BIN/cuda_kernel_tests" --filter fp8 > "$LOGS/fp8_tests.log" 2>&1
status=$?
timeout "${BENCH_TIMEOUT:-150}" "$BIN/cuda_kernel_tests" --fp8-bench-only > "$LOGS/fp8_bench.log" 2>&1
bench_status=$?
echo "==== tests (exit $status)"
grep -E "FAIL" "$LOGS/fp8_tests.log" | cut -c1-150 | head -30
echo "skipped (a pinned kernel or cuBLASLt mode without support for the shape): $(grep -c "skip" "$LOGS/fp8_tests.log")"
grep -E "^kernel tests:" "$LOGS/fp8_tests.log"
echo "==== bench (exit $bench_status)"
grep -E "^ceilings" "$LOGS/fp8_bench.log"
sed -n '/== fp8 summary/,$p' "$LOGS/fp8_bench.log"
exit $status
