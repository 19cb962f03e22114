#!/usr/bin/env bash
# Issue 15's serving-latency grid on one GPU: Llama-3.1-8B shapes (dummy bf16) behind
# `pagellm serve`, `pagellm bench serve` 1024 in / 170 out at request rate 10, concurrency 1 and 16,
# with prompts' chunks uncapped and capped per step (--long-prefill-token-threshold), next to the
# offline batch-1 decode step (cuda_runner_check --perf-only, context ~1,056).
#   bash BUNDLE/run_serve_latency.sh BUNDLE [THRESHOLD...]   (default thresholds: 0 256)
# BUNDLE: pagellm, cuda_runner_check and cuda_probe (plain or xz'd) and llama31-8b (config and
# tokenizer), e.g. make_spec_bundle.sh's. Logs go to $OUT (or ./device-logs); summary.txt has the
# figures.
set -uo pipefail
SRC=$(cd "${1:?usage: run_serve_latency.sh BUNDLE [THRESHOLD...]}" && pwd)
shift
THRESHOLDS=${*:-0 256}
. "$SRC/unpack_bundle.sh"
timeout 120 "$B/cuda_probe" > "$LOGS/probe.log" 2>&1
say "probe: $(grep -iE 'copy|gemm' "$LOGS/probe.log" | tr '\n' ' ' | cut -c1-300)"
if [ -x "$B/cuda_runner_check" ]; then
  timeout 300 "$B/cuda_runner_check" "$B/models" --perf-only --batch 1 > "$LOGS/offline.log" 2>&1
  say "offline decode (exit $?): $(grep -E "tok/s" "$LOGS/offline.log" | head -2 | tr '\n' ' ')"
fi
for th in $THRESHOLDS; do
  port=18500
  serve_dummy_8b $port "$LOGS/serve_$th.log" --long-prefill-token-threshold "$th"
  for c in 1 16; do
    n=$((c == 1 ? 24 : 160))
    timeout 240 "$B/pagellm" bench serve --port $port --dataset-name random --random-input-len 1024 \
      --random-output-len 170 --num-prompts $n --request-rate 10 --max-concurrency $c --seed 1 \
      > "$LOGS/lat_${th}_c$c.log" 2>&1
    say "threshold $th, concurrency $c (exit $?): $(grep -iE 'TPOT|ITL|TTFT|Output token throughput' "$LOGS/lat_${th}_c$c.log" | tr -s ' ' | tr '\n' ';' | cut -c1-700)"
  done
  kill "$SERVE_PID"
  wait "$SERVE_PID" 2>/dev/null
done
echo "=== summary"
cat "$SUMMARY"
