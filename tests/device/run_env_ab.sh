#!/usr/bin/env bash
# A kernel choice behind an environment switch, or a build against the one before it, measured in
# one GPU-machine call from a bundle made by make_ab_bundle.sh:
#   bash BUNDLE/run_env_ab.sh BUNDLE VAR "OFF ON" [RUNNER_CHECK_FLAGS...]   (default: --int4 --int8)
# e.g. run_env_ab.sh .device/ab PAGELLM_INT_WGMMA "0 1". VAR=BINARY with VALUES "base new" compares
# builds instead: value base runs BUNDLE's cuda_kernel_tests.base and cuda_runner_check.base (the
# earlier build's, added to the bundle as *.base.xz), new the bundle's own. Steps: 1. ceilings
# (cuda_probe); 2. cuda_kernel_tests --filter $TEST_FILTER (default: all); 3. the engine check;
# 4. the runner check (--skip-perf, GPU against CPU runner) once per value; 5. cuda_kernel_tests
# $BENCH (default --int-bench-only; BENCH=none skips it) with each of $BENCH_VALUES (default: the
# last value; BINARY: both); 6. decode figures (--perf-only and the flags) per value, alternating,
# PERF_ROUNDS (2) rounds, so that all see the same clocks. SKIP_CHECKS=1 skips steps 2-4. Logs in
# $OUT; the summary is printed last.
set -uo pipefail
SRC=$(cd "${1:?usage: run_env_ab.sh BUNDLE VAR VALUES [FLAGS...]}" && pwd)
VAR=${2:?variable}
VALUES=${3:?values}
shift 3
FLAGS=("$@")
[ ${#FLAGS[@]} -eq 0 ] && FLAGS=(--int4 --int8)
. "$SRC/unpack_bundle.sh"
# as_value VALUE SECONDS BINARY ARGS...: the bundle's BINARY (BINARY mode: its .base for value
# base) with VAR=VALUE, under a timeout.
as_value() {
  local v=$1 secs=$2 bin=$B/$3
  shift 3
  if [ "$VAR" = BINARY ]; then
    [ "$v" = base ] && bin=$bin.base
    timeout "$secs" "$bin" "$@"
  else
    env "$VAR=$v" timeout "$secs" "$bin" "$@"
  fi
}
timeout 120 "$B/cuda_probe" > "$LOGS/probe.log" 2>&1
say "probe: $(grep -iE 'copy|gemm|tflop|GB/s' "$LOGS/probe.log" | tr '\n' ' ' | cut -c1-400)"
if [ "${SKIP_CHECKS:-0}" != 1 ]; then
  timeout 400 "$B/cuda_kernel_tests" ${TEST_FILTER:+--filter "$TEST_FILTER"} \
    > "$LOGS/kernel_tests.log" 2>&1
  say "kernel tests ${TEST_FILTER:-all} (exit $?): $(grep -E '^kernel tests:' "$LOGS/kernel_tests.log")"
  grep -E "FAIL" "$LOGS/kernel_tests.log" | cut -c1-200 | head -20 | tee -a "$SUMMARY"
  timeout 300 "$B/cuda_engine_check" "$B/models" --device cuda > "$LOGS/engine_check.log" 2>&1
  say "engine check (exit $?): $(grep -iE 'passed|failed' "$LOGS/engine_check.log" | tail -1)"
  grep -E "FAIL" "$LOGS/engine_check.log" | cut -c1-200 | head -20 | tee -a "$SUMMARY"
  for v in $VALUES; do
    as_value "$v" 420 cuda_runner_check "$B/models" --skip-perf "${FLAGS[@]}" \
      > "$LOGS/runner_check_$v.log" 2>&1
    say "runner check $VAR=$v ${FLAGS[*]} (exit $?):"
    grep -E "FAIL|runner checks:" "$LOGS/runner_check_$v.log" | head -20 | tee -a "$SUMMARY"
  done
fi
if [ "${BENCH:---int-bench-only}" != none ]; then
  default_bench=${VALUES##* }
  [ "$VAR" = BINARY ] && default_bench=$VALUES
  for v in ${BENCH_VALUES:-$default_bench}; do
    as_value "$v" 300 cuda_kernel_tests ${BENCH:---int-bench-only} > "$LOGS/bench_$v.log" 2>&1
    say "bench ${BENCH:---int-bench-only} $VAR=$v (exit $?):"
    grep -vE "^(==|\[)" "$LOGS/bench_$v.log" | tee -a "$SUMMARY"
  done
fi
for round in $(seq "${PERF_ROUNDS:-2}"); do
  for v in $VALUES; do
    log=$LOGS/perf_${v}_$round.log
    as_value "$v" 300 cuda_runner_check "$B/models" --perf-only "${FLAGS[@]}" > "$log" 2>&1
    say "perf $VAR=$v, round $round (exit $?):"
    grep -E "tok/s|copy" "$log" | awk '{print $1, $4, $7}' | tr '\n' ' ' | tee -a "$SUMMARY"
    echo | tee -a "$SUMMARY"
  done
done
echo "==== summary"
cat "$SUMMARY"
