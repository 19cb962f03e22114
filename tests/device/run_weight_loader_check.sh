#!/usr/bin/env bash
# One GPU-machine run for the streaming weight loader and the attention-helper refactor:
#   tests/device/run_weight_loader_check.sh BUNDLE_DIR [--no-8b | --only-8b]
# 1. cuda_kernel_tests (dtype conversion bit-exact with common/dtype.h, and every kernel), and the
#    same tests built from the code before the refactor (cuda_kernel_tests.before): their result
#    lines must be identical (same seeded inputs, so equal error figures mean equal outputs).
# 2. cuda_runner_check --skip-perf: stories260K reproduced from the mmap loader; bf16/f16 device
#    conversion equal, bit for bit, to a host-converted checkpoint; a misshaped checkpoint refused.
# 3. Load speed: a random Llama-3.1-8B HF folder (bf16, made here by make_random_model.py) loaded by
#    pagellm --device cuda in bf16 (straight copy) and f16 (converted on the GPU), by the previous
#    loader (pagellm.before, if present), and once more after dropping the page cache (if allowed).
# BUNDLE_DIR holds those binaries, lib/, models/stories260K, tokenizers/llama3 and
# make_random_model.py; files may be gzipped. Logs go to $OUT (or ./device-logs); a summary prints last.
set -uo pipefail
BUNDLE=$(cd "${1:?usage: run_weight_loader_check.sh BUNDLE_DIR [--no-8b | --only-8b]}" && pwd)
MODE=${2:-all}
LOGS=${OUT:-./device-logs}
mkdir -p "$LOGS"
WORK=${WEIGHT_LOADER_WORK:-/tmp/weight-loader}
rm -rf "$WORK" && cp -r "$BUNDLE" "$WORK" && find "$WORK" -name "*.gz" -exec gunzip -f {} +
chmod +x "$WORK"/cuda_* "$WORK"/pagellm* 2>/dev/null
export LD_LIBRARY_PATH=$WORK/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
SUMMARY=$LOGS/summary.txt
: > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$LOGS/gpu.txt"

# 1. Kernel tests, after and before the refactor.
if [ "$MODE" != "--only-8b" ]; then
timeout 300 "$WORK/cuda_kernel_tests" > "$LOGS/kernel_tests.log" 2>&1
say "cuda_kernel_tests exit $?: $(grep -E '^kernel tests:' "$LOGS/kernel_tests.log")"
grep -E "FAIL|convert" "$LOGS/kernel_tests.log" | head -20 | tee -a "$SUMMARY"
if [ -x "$WORK/cuda_kernel_tests.before" ]; then
  timeout 300 "$WORK/cuda_kernel_tests.before" > "$LOGS/kernel_tests_before.log" 2>&1
  # Timings differ from run to run; error figures of the same seeded inputs must not.
  grep -E "^  (ok|FAIL)" "$LOGS/kernel_tests.log" > "$LOGS/after.lines"
  grep -E "^  (ok|FAIL)" "$LOGS/kernel_tests_before.log" > "$LOGS/before.lines"
  if [ ! -s "$LOGS/after.lines" ]; then
    say "no kernel results to compare (see kernel_tests.log)"
  elif diff "$LOGS/before.lines" "$LOGS/after.lines" > "$LOGS/kernel_diff.txt"; then
    say "kernel results identical before/after the refactor ($(wc -l < "$LOGS/after.lines") lines)"
  else
    say "kernel results DIFFER before/after the refactor: $(grep -c '^[<>]' "$LOGS/kernel_diff.txt") lines (kernel_diff.txt)"
  fi
fi

# 2. Runner checks on stories260K.
timeout 300 "$WORK/cuda_runner_check" "$WORK/models" --skip-perf > "$LOGS/runner_check.log" 2>&1
say "cuda_runner_check exit $?"
grep -E "^  (ok|FAIL)|FAIL|runner checks:" "$LOGS/runner_check.log" | tee -a "$SUMMARY"
# A checkpoint that does not match its config.json: the CUDA loader must refuse it like the CPU one.
BAD=/tmp/stories260K-misshaped
rm -rf "$BAD" && cp -r "$WORK/models/stories260K" "$BAD"
python3 -c 'import json, sys; p = sys.argv[1] + "/config.json"; c = json.load(open(p)); c["intermediate_size"] = 100; json.dump(c, open(p, "w"))' "$BAD"
timeout 60 "$WORK/pagellm" generate --model "$BAD" --device cuda --prompt x --max-tokens 1 > "$LOGS/misshaped.log" 2>&1
say "misshaped checkpoint on cuda (exit $?, want 1): $(grep -m1 -i 'error' "$LOGS/misshaped.log")"
fi

# 3. Load speed on a random Llama-3.1-8B.
if [ "$MODE" != "--no-8b" ]; then
  M=/tmp/llama31-8b-random
  if [ ! -f "$M/config.json" ]; then
    timeout 400 python3 "$WORK/make_random_model.py" llama3-8b "$WORK/tokenizers/llama3" "$M" \
      > "$LOGS/make_model.log" 2>&1
    say "make_random_model: $(tail -1 "$LOGS/make_model.log")"
  fi
  load() {  # label binary dtype
    timeout 240 "$2" generate --model "$M" --device cuda --dtype "$3" --enforce-eager \
      --max-model-len 4096 --prompt "Hello" --max-tokens 4 --temperature 0 \
      > "$LOGS/load_$1.log" 2>&1
    say "$1 (exit $?): $(grep -m1 -E 'loaded .* on cuda|error' "$LOGS/load_$1.log")"
  }
  load bf16 "$WORK/pagellm" bfloat16
  load f16_converted "$WORK/pagellm" float16
  [ -x "$WORK/pagellm.before" ] && load bf16_previous_loader "$WORK/pagellm.before" bfloat16
  if sync && echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; then
    load bf16_cold_cache "$WORK/pagellm" bfloat16
  else
    say "(page cache not droppable here: no cold-cache load)"
  fi
fi
echo "==== summary"
cat "$SUMMARY"
