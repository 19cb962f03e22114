#!/usr/bin/env bash
# Issue 15's fixed serving grid on one GPU, so that later changes compare on the same cells:
# Llama-3.1-8B shapes (dummy weights) behind `pagellm serve`, `pagellm bench serve` with random
# prompts of 1024 in / 170 out and 512 in / 85 out, at request rate 10 with concurrency 1, 16, 64
# and 256, and at rate inf (concurrency 256).
#   bash BUNDLE/run_serve_grid.sh BUNDLE [SERVE_FLAGS...]   (e.g. --quantization fp8)
# BUNDLE: pagellm and cuda_probe (plain or xz'd) and llama31-8b (config and tokenizer), e.g.
# make_spec_bundle.sh's. Logs go to $OUT (or ./device-logs); summary.txt has one line per cell.
set -uo pipefail
SRC=$(cd "${1:?usage: run_serve_grid.sh BUNDLE [SERVE_FLAGS...]}" && pwd)
shift
. "$SRC/unpack_bundle.sh"
timeout 120 "$B/cuda_probe" > "$LOGS/probe.log" 2>&1
say "probe: $(grep -iE 'copy|gemm' "$LOGS/probe.log" | tr '\n' ' ' | cut -c1-300)"
port=18600
serve_dummy_8b $port "$LOGS/serve.log" "$@"
field() { grep -E "$1" "$2" | head -1 | awk -F: '{gsub(/ /, "", $2); print $2}'; }
say "in out rate conc prompts | req/s out_tok/s | TTFT mean p99 | TPOT mean p99 | ITL median p99 (ms)"
for io in "1024 170" "512 85"; do
  set -- $io
  for cell in "10 1 16" "10 16 96" "10 64 192" "10 256 256" "inf 256 512"; do
    read -r rate conc n <<< "$cell"
    log=$LOGS/grid_$1_$2_r${rate}_c$conc.log
    timeout 300 "$B/pagellm" bench serve --port $port --dataset-name random --random-input-len "$1" \
      --random-output-len "$2" --num-prompts "$n" --request-rate "$rate" --max-concurrency "$conc" \
      --seed 1 > "$log" 2>&1
    say "$1 $2 $rate $conc $n (exit $?) | $(field 'Request throughput' "$log") $(field 'Output token throughput' "$log") | $(field 'Mean TTFT' "$log") $(field 'P99 TTFT' "$log") | $(field 'Mean TPOT' "$log") $(field 'P99 TPOT' "$log") | $(field 'Median ITL' "$log") $(field 'P99 ITL' "$log")"
  done
done
kill "$SERVE_PID"
wait "$SERVE_PID" 2>/dev/null
echo "=== summary"
cat "$SUMMARY"
