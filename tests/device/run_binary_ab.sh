#!/usr/bin/env bash
# A kernel change measured against the build before it, in one GPU-machine call, from a bundle made
# by make_ab_bundle.sh with the earlier build's cuda_kernel_tests and cuda_runner_check added as
# cuda_kernel_tests.base.xz and cuda_runner_check.base.xz:
#   bash BUNDLE/run_binary_ab.sh BUNDLE [RUNNER_CHECK_FLAGS...]   (default: --int4 --int8)
# Steps: 1. ceilings (cuda_probe); 2. the new build's cuda_kernel_tests --filter $TEST_FILTER
# (default: all); 3. its engine check and runner check (--skip-perf, GPU against CPU runner);
# 4. cuda_kernel_tests $BENCH (default --int-bench-only; BENCH=none skips it), base then new;
# 5. decode figures (--perf-only and the flags), base and new alternating, PERF_ROUNDS (2) rounds,
# so that both see the same clocks. SKIP_CHECKS=1 skips steps 2-3. Logs in $OUT; the summary is
# printed last.
set -uo pipefail
SRC=$(cd "${1:?usage: run_binary_ab.sh BUNDLE [FLAGS...]}" && pwd)
shift
FLAGS=("$@")
[ ${#FLAGS[@]} -eq 0 ] && FLAGS=(--int4 --int8)
. "$SRC/unpack_bundle.sh"
chmod +x "$B"/*.base
timeout 120 "$B/cuda_probe" > "$LOGS/probe.log" 2>&1
say "probe: $(grep -iE 'copy|gemm|tflop|GB/s' "$LOGS/probe.log" | tr '\n' ' ' | cut -c1-400)"
if [ "${SKIP_CHECKS:-0}" != 1 ]; then
  timeout 400 "$B/cuda_kernel_tests" ${TEST_FILTER:+--filter "$TEST_FILTER"} \
    > "$LOGS/kernel_tests.log" 2>&1
  say "kernel tests ${TEST_FILTER:-all} (exit $?): $(grep -E '^kernel tests:' "$LOGS/kernel_tests.log")"
  grep -E "FAIL" "$LOGS/kernel_tests.log" | cut -c1-200 | head -20 | tee -a "$SUMMARY"
  timeout 300 "$B/cuda_engine_check" "$B/models" --device cuda > "$LOGS/engine_check.log" 2>&1
  say "engine check (exit $?): $(grep -iE 'passed|failed' "$LOGS/engine_check.log" | tail -1)"
  timeout 420 "$B/cuda_runner_check" "$B/models" --skip-perf "${FLAGS[@]}" \
    > "$LOGS/runner_check.log" 2>&1
  say "runner check ${FLAGS[*]} (exit $?):"
  grep -E "FAIL|runner checks:" "$LOGS/runner_check.log" | head -20 | tee -a "$SUMMARY"
fi
if [ "${BENCH:---int-bench-only}" != none ]; then
  for v in base new; do
    bin=$B/cuda_kernel_tests
    [ $v = base ] && bin=$bin.base
    timeout 300 "$bin" ${BENCH:---int-bench-only} > "$LOGS/bench_$v.log" 2>&1
    say "bench ${BENCH:---int-bench-only} $v (exit $?):"
    grep -vE "^(==|\[)" "$LOGS/bench_$v.log" | tee -a "$SUMMARY"
  done
fi
for round in $(seq "${PERF_ROUNDS:-2}"); do
  for v in base new; do
    bin=$B/cuda_runner_check
    [ $v = base ] && bin=$bin.base
    log=$LOGS/perf_${v}_$round.log
    timeout 300 "$bin" "$B/models" --perf-only "${FLAGS[@]}" > "$log" 2>&1
    say "perf $v, round $round (exit $?):"
    grep -E "tok/s|copy" "$log" | awk '{print $1, $4, $7}' | tr '\n' ' ' | tee -a "$SUMMARY"
    echo | tee -a "$SUMMARY"
  done
done
echo "==== summary"
cat "$SUMMARY"
