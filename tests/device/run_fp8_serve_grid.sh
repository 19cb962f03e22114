#!/usr/bin/env bash
# FP8 through the server on the GPU machine (issue 11), from a bundle made by make_bundle.sh:
#   bash BUNDLE/run_fp8_serve_grid.sh BUNDLE grid   # H100: 8B bf16 and FP8 served, `bench serve`
#                                                   # 1024 in / 170 out at concurrency 1 and 64
#   bash BUNDLE/run_fp8_serve_grid.sh BUNDLE 70b    # H200: Llama-3.1-70B shapes in FP8 on one GPU,
#                                                   # batch-1 decode against the copy rate
# Logs go to $OUT (or ./device-logs); summary.txt collects the figures.
set -uo pipefail
SRC=$(cd "${1:?usage: run_fp8_serve_grid.sh BUNDLE grid|70b}" && pwd)
MODE=${2:?grid or 70b}
LOGS=${OUT:-./device-logs}
mkdir -p "$LOGS"
B=/tmp/pagellm-bundle
rm -rf "$B" && mkdir -p "$B" && cp -r "$SRC"/pagellm.gz "$SRC"/cuda_probe "$SRC"/llama31-8b "$B"/ &&
  find "$B" -name "*.gz" -exec gunzip -f {} +
chmod +x "$B"/pagellm "$B"/cuda_probe
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
SUMMARY=$LOGS/summary.txt
: > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
say "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader) $(date -u +%FT%TZ)"
timeout 120 "$B/cuda_probe" > "$LOGS/probe.log" 2>&1
say "probe: $(grep -iE 'copy|gemm|tflop|GB/s' "$LOGS/probe.log" | tr '\n' ' ' | cut -c1-400)"

serve_grid() {  # NAME FLAGS...
  local name=$1 port=18400
  shift
  "$B/pagellm" serve --model "$B/llama31-8b" --load-format dummy --device cuda --port $port \
    --max-model-len 4096 "$@" > "$LOGS/serve_$name.log" 2>&1 &
  local pid=$!
  for _ in $(seq 120); do
    curl -sf "http://127.0.0.1:$port/health" > /dev/null && break
    sleep 1
  done
  for c in 1 64; do
    local n=$((c == 1 ? 24 : 320))
    timeout 240 "$B/pagellm" bench serve --port $port --dataset-name random --random-input-len 1024 \
      --random-output-len 170 --num-prompts $n --request-rate 10 --max-concurrency $c --seed 1 \
      > "$LOGS/grid_${name}_c$c.log" 2>&1
    say "$name concurrency $c (exit $?): $(grep -iE 'TPOT|ITL|TTFT|Output token throughput|Request throughput' "$LOGS/grid_${name}_c$c.log" | tr -s ' ' | tr '\n' ';' | cut -c1-600)"
  done
  kill $pid
  wait $pid 2>/dev/null
}

if [ "$MODE" = grid ]; then
  serve_grid bf16
  serve_grid fp8 --quantization fp8
else
  python3 - "$B/llama31-70b" <<'PY'
import json, os, sys
os.makedirs(sys.argv[1], exist_ok=True)
src = os.path.join(os.path.dirname(sys.argv[1]), "llama31-8b")
c = json.load(open(os.path.join(src, "config.json")))
# Llama-3.1-70B's public architecture values.
c.update({"hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80,
          "num_attention_heads": 64, "num_key_value_heads": 8})
json.dump(c, open(os.path.join(sys.argv[1], "config.json"), "w"), indent=1)
for f in os.listdir(src):
    if f != "config.json":
        os.symlink(os.path.join(src, f), os.path.join(sys.argv[1], f))
PY
  # Batch-1 decode: one request, 128 prompt tokens, 512 generated (the prefill is ~1% of the time).
  timeout 400 "$B/pagellm" bench throughput --model "$B/llama31-70b" --load-format dummy --device cuda \
    --quantization fp8 --max-model-len 4096 --num-prompts 1 --input-len 128 --output-len 512 \
    > "$LOGS/bench_70b_fp8_b1.log" 2>&1
  say "70B FP8 batch 1 (exit $?): $(grep -E 'Throughput' "$LOGS/bench_70b_fp8_b1.log")"
  grep -E "loaded|quantization|KV cache" "$LOGS/bench_70b_fp8_b1.log" | head -3 | tee -a "$SUMMARY"
fi
echo "==== summary"
cat "$SUMMARY"
