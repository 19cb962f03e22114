#!/usr/bin/env bash
# A change to the decode step measured against the build before it, on one GPU machine, from a
# bundle made by make_bundle.sh with the earlier build's cuda_runner_check added as
# cuda_runner_check.base(.gz):
#   bash BUNDLE/run_decode_ab.sh BUNDLE [RUNNER_CHECK_FLAGS...]   (default: --fp8 --int4)
# 1. ceilings (cuda_probe); 2. every kernel test; 3. the engine check (graphs vs eager, batched vs
# solo, preemption, prefix caching); 4. the runner check with the flags (GPU vs CPU runner, then
# Llama-3.1-8B decode at batch 1 / 16 / 64); 5. per-kernel ncu times (below); 6. decode figures
# only, base and new (and variants bundled as cuda_runner_check.vNAME) alternating twice, so that
# all see the same clocks, once per value of PDL_MODES (PAGELLM_PDL, default "0"; PDL_MODES="0 1"
# measures both launch modes; steps 2-4 run with the last mode). NCU_DETAIL=1 adds a full Nsight
# Compute report of one batch-1 decode attention launch (where its time goes); SKIP_CHECKS=1 skips
# steps 2-4, PERF_ROUNDS=0 step 6 (PAGELLM_PDL=auto is the default per-step mode). Logs in $OUT;
# the summary is printed last (the device tool returns only 8 files).
set -uo pipefail
SRC=$(cd "${1:?usage: run_decode_ab.sh BUNDLE [FLAGS...]}" && pwd)
shift
FLAGS=("$@")
[ ${#FLAGS[@]} -eq 0 ] && FLAGS=(--fp8 --int4)
. "$SRC/unpack_bundle.sh"
PDL_MODES=${PDL_MODES:-0}
export PAGELLM_PDL=${PDL_MODES##* }
say "checks with PAGELLM_PDL=$PAGELLM_PDL; perf modes: $PDL_MODES"
timeout 120 "$B/cuda_probe" > "$LOGS/probe.log" 2>&1
say "probe: $(grep -iE 'copy|gemm|tflop|GB/s' "$LOGS/probe.log" | tr '\n' ' ' | cut -c1-400)"
if [ "${SKIP_CHECKS:-0}" != 1 ]; then  # SKIP_CHECKS=1: figures only (steps 1, 5, 6)
timeout 400 "$B/cuda_kernel_tests" > "$LOGS/kernel_tests.log" 2>&1
say "kernel tests (exit $?): $(grep -E '^kernel tests:' "$LOGS/kernel_tests.log")"
grep -E "FAIL" "$LOGS/kernel_tests.log" | cut -c1-200 | head -20 | tee -a "$SUMMARY"
timeout 300 "$B/cuda_engine_check" "$B/models" --device cuda > "$LOGS/engine_check.log" 2>&1
say "engine check (exit $?): $(grep -iE 'passed|failed' "$LOGS/engine_check.log" | tail -1)"
grep -E "FAIL" "$LOGS/engine_check.log" | cut -c1-200 | head -20 | tee -a "$SUMMARY"
timeout 420 "$B/cuda_runner_check" "$B/models" "${FLAGS[@]}" > "$LOGS/runner_check.log" 2>&1
say "runner check ${FLAGS[*]} (exit $?):"
grep -E "FAIL|runner checks:|tok/s|copy" "$LOGS/runner_check.log" | head -30 | tee -a "$SUMMARY"
fi
# Per-kernel time of the attention and rope / KV-write kernels of decode steps (Nsight Compute,
# base clocks, cold caches) for the new build at the batches in NCU_BATCHES (default 16 8 1).
# --launch-skip lands past the prefill and graph capture of `--perf-only --batch N`.
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for bs in ${NCU_BATCHES:-16 8 1}; do
  timeout 150 "$NCU" --csv --metrics gpu__time_duration.sum \
    --kernel-name regex:"decode_mma|split_kv|rope|write_kv|combine" --launch-skip 3500 \
    --launch-count 128 "$B/cuda_runner_check" "$B/models" --perf-only --batch "$bs" \
    > "$LOGS/ncu_$bs.csv" 2>/dev/null
  say "ncu batch $bs: $(python3 -c '
import collections, csv, io, sys
rows = list(csv.DictReader(io.StringIO("".join(l for l in open(sys.argv[1]) if l.startswith("\"")))))
agg = collections.defaultdict(lambda: [0, 0.0])
for r in rows:
    k = r["Kernel Name"].split("(")[0].replace("void ", "").split("::")[-1][:24] + r["Grid Size"]
    agg[k][0] += 1
    agg[k][1] += float(r["Metric Value"].replace(",", "")) / 1000.0
print("; ".join("%s n=%d %.2f us" % (k, n, us / n) for k, (n, us) in agg.items()))
' "$LOGS/ncu_$bs.csv")"
done
if [ "${NCU_DETAIL:-0}" = 1 ]; then
  # 1750 decode_mma launches (warm-ups of every graph size) land in the timed batch-1 loop; 200
  # landed on a batch-32 warm-up (both seen on an H200, 2026-11-29).
  timeout 200 "$NCU" --set full --kernel-name regex:decode_mma --launch-skip 1750 --launch-count 1 \
    "$B/cuda_runner_check" "$B/models" --perf-only --batch 1 > "$LOGS/ncu_detail.txt" 2>&1
  say "ncu detail (exit $?): $(grep -cE '' "$LOGS/ncu_detail.txt") lines in ncu_detail.txt"
fi
for round in $(seq "${PERF_ROUNDS:-2}"); do
  for pdl in $PDL_MODES; do
    for which in base new $(cd "$B" && ls cuda_runner_check.v* 2>/dev/null | sed 's/.*\.//'); do
      bin=$B/cuda_runner_check
      [ $which != new ] && bin=$B/cuda_runner_check.$which
      [ -x "$bin" ] || continue
      log=$LOGS/perf_${which}_pdl${pdl}_$round.log
      PAGELLM_PDL=$pdl timeout 300 "$bin" "$B/models" --perf-only "${FLAGS[@]}" > "$log" 2>&1
      say "perf $which PDL=$pdl, round $round (exit $?):"
      grep -E "tok/s|copy" "$log" | awk '{print $1, $4, $7}' | tr '\n' ' ' | tee -a "$SUMMARY"
      echo | tee -a "$SUMMARY"
    done
  done
done
echo "==== summary"
cat "$SUMMARY"
