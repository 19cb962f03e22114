#!/usr/bin/env bash
# Where an INT weight-only kernel's time goes, on the GPU machine, from a bundle made by
# make_ab_bundle.sh:
#   bash BUNDLE/profile_int_kernel.sh BUNDLE KERNEL_REGEX [SHAPE] [M]   (default shape gu, m 64)
# e.g. profile_int_kernel.sh .device/ab int_wgmma gu 64. Runs cuda_kernel_tests --int-bench-only on
# one shape and m under Nsight Compute: the launch's summary sections (ncu_summary.txt) and its
# per-SASS-instruction stall samples and execution counts (ncu_source.csv), then the kernel's SASS
# (sass.txt, cuobjdump). Counting the instructions executed per warp per pipeline step from
# ncu_source.csv is how the wgmma kernel's first version was found to issue 600 a step
# (docs/PERF.md).
set -uo pipefail
SRC=$(cd "${1:?usage: profile_int_kernel.sh BUNDLE KERNEL_REGEX [SHAPE] [M]}" && pwd)
REGEX=${2:?kernel regex}
export PAGELLM_INT_BENCH_SHAPE=${3:-gu} PAGELLM_INT_BENCH_M=${4:-64}
. "$SRC/unpack_bundle.sh"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
CUOBJDUMP=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
common=(--kernel-name "regex:$REGEX" --launch-skip 30 --launch-count 1)
timeout 200 "$NCU" "${common[@]}" --section SpeedOfLight --section WarpStateStats \
  --section SchedulerStats --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis \
  "$B/cuda_kernel_tests" --int-bench-only > "$LOGS/ncu_summary.txt" 2>&1
say "ncu summary (exit $?): $(grep -E 'Duration|Grid Size|Issued Warp|Registers Per|Memory Throughput' \
  "$LOGS/ncu_summary.txt" | tr -s ' ' | tr '\n' ';')"
timeout 200 "$NCU" "${common[@]}" --section SourceCounters --section WarpStateStats --page source \
  --print-source sass --csv "$B/cuda_kernel_tests" --int-bench-only > "$LOGS/ncu_source.csv" 2>&1
say "ncu source (exit $?): $(wc -l < "$LOGS/ncu_source.csv") lines"
"$CUOBJDUMP" -sass -arch sm_90a "$B/cuda_kernel_tests" 2>/dev/null |
  awk -v re="$REGEX" '/Function : /{p = ($0 ~ re)} p' > "$LOGS/sass.txt"
say "sass: $(grep -c 'Function : ' "$LOGS/sass.txt") functions, $(wc -l < "$LOGS/sass.txt") lines"
echo "==== summary"
cat "$SUMMARY"
