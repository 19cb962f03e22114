#!/usr/bin/env bash
# Runs the CUDA runner's end-to-end checks and first performance numbers on the GPU machine.
# Usage: tests/device/run_runner_check.sh BIN_DIR MODELS_DIR [--skip-perf]
#   BIN_DIR holds cuda_runner_check (and cuda_probe) built on a development machine; MODELS_DIR holds
#   stories260K (../shared/models). Logs go to $OUT (or ./device-logs).
set -uo pipefail
BIN=${1:?usage: run_runner_check.sh BIN_DIR MODELS_DIR [--skip-perf]}
MODELS=${2:?usage: run_runner_check.sh BIN_DIR MODELS_DIR [--skip-perf]}
shift 2
LOGS=${OUT:-./device-logs}
mkdir -p "$LOGS"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
[ -x "$BIN/cuda_probe" ] && "$BIN/cuda_probe" 2>&1 | tee "$LOGS/probe.log"
timeout "${RUNNER_TIMEOUT:-420}" "$BIN/cuda_runner_check" "$MODELS" "$@" 2>&1 | tee "$LOGS/runner_check.log"
exit "${PIPESTATUS[0]}"
