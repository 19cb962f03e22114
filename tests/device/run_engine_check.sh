#!/usr/bin/env bash
# Runs the engine behaviour checks (tests/device/engine_check.cpp) on the GPU machine.
# Usage: tests/device/run_engine_check.sh BIN_DIR MODELS_DIR [--model dummy|stories|all]
#   BIN_DIR holds cuda_engine_check built on a development machine (and lib/ with any shared
#   libraries the GPU machine lacks); MODELS_DIR holds stories260K (../shared/models). The log goes
#   to $OUT (or ./device-logs). Exit status: the check's (non-zero on any failure).
set -uo pipefail
BIN=${1:?usage: run_engine_check.sh BIN_DIR MODELS_DIR [--model dummy|stories|all]}
MODELS=${2:?usage: run_engine_check.sh BIN_DIR MODELS_DIR [--model dummy|stories|all]}
shift 2
LOGS=${OUT:-./device-logs}
mkdir -p "$LOGS"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$BIN/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
timeout "${ENGINE_CHECK_TIMEOUT:-300}" "$BIN/cuda_engine_check" "$MODELS" --device cuda "$@" \
  > >(tee "$LOGS/engine_check.log") 2> "$LOGS/engine_check.stderr"
status=$?
tail -n 5 "$LOGS/engine_check.stderr"
exit "$status"
