#!/usr/bin/env bash
# FP8 end to end on the GPU machine (issue 11), bf16 beside FP8 in one run, from a bundle made by
# make_bundle.sh (which also carries pycode-25M and the held-out Python text):
#   bash BUNDLE/run_fp8_serving.sh BUNDLE [kv]
# With `kv`, the FP8 KV cache instead of FP8 weights: every kernel test (the attention kernels over
# FP8 caches among them), the runner check with --kv-fp8 (tiny models GPU vs CPU with FP8 caches;
# 64 x 4k-token decode, bf16 KV beside FP8 KV), pycode-25M with --kv-cache-dtype fp8 / fp8_e5m2 /
# --calculate-kv-scales, and Llama-3.1-8B shapes: the KV pool's tokens and a long-context
# bench throughput, bf16 KV beside FP8 KV. Without it:
# 1. ceilings (cuda_probe: copy bandwidth, cuBLAS bf16 / FP8 GEMM rates);
# 2. FP8 quantize / block-dequantize kernel tests;
# 3. runner check with --fp8: Llama-3.1-8B shapes decode at batch 1 / 16 / 64, bf16 and FP8;
# 4. pycode-25M on the GPU, bf16 and --quantization fp8 (and any FP8 checkpoints of it in
#    BUNDLE/models/pycode-fp8-*): greedy text of 8 prompts and the teacher-forced perplexity of
#    the held-out text;
# 5. Llama-3.1-8B shapes (dummy): prefill 64 x 1024, bench throughput 1000 x (1024 in, 128 out),
#    bf16 and FP8.
# Logs go to $OUT (or ./device-logs); summary.txt collects the figures.
set -uo pipefail
SRC=$(cd "${1:?usage: run_fp8_serving.sh BUNDLE [kv]}" && pwd)
MODE=${2:-weights}
. "$SRC/unpack_bundle.sh"
timeout 120 "$B/cuda_probe" > "$LOGS/probe.log" 2>&1
say "probe: $(grep -iE 'copy|gemm|tflop|GB/s' "$LOGS/probe.log" | tr '\n' ' ' | cut -c1-400)"

if [ "$MODE" = kv ]; then
  timeout 240 "$B/cuda_kernel_tests" > "$LOGS/kernel_tests.log" 2>&1
  say "kernel tests (exit $?): $(grep -E '^kernel tests:' "$LOGS/kernel_tests.log"), FP8 caches: $(grep -cE '^  ok.*(kv=e|-> e)' "$LOGS/kernel_tests.log") ok"
  grep -E "FAIL" "$LOGS/kernel_tests.log" | cut -c1-200 | head -20 | tee -a "$SUMMARY"
  runner_flags=(--skip-perf --kv-fp8)
else
  timeout 120 "$B/cuda_kernel_tests" --filter "fp8 dequantize" > "$LOGS/fp8_kernels.log" 2>&1
  say "fp8 dequantize kernel tests (exit $?): $(grep -cE '^  ok' "$LOGS/fp8_kernels.log") ok, $(grep -cE 'FAIL' "$LOGS/fp8_kernels.log") FAIL"
  runner_flags=(--fp8)
fi
timeout 420 "$B/cuda_runner_check" "$B/models" "${runner_flags[@]}" > "$LOGS/runner_check.log" 2>&1
say "runner check ${runner_flags[*]} (exit $?):"
grep -E "FAIL|runner checks:|tok/s|weights|copy|kv=" "$LOGS/runner_check.log" | head -40 | tee -a "$SUMMARY"

# pycode-25M: greedy text and held-out perplexity.
P=$B/models/pycode-25M
python3 - "$B/heldout_python.txt" "$B/ppl_prompt.jsonl" "$B/greedy_prompts.jsonl" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
with open(sys.argv[2], "w") as f:
    f.write(json.dumps({"prompt": text, "max_tokens": 1, "temperature": 0, "prompt_logprobs": 1}) + "\n")
prompts = ["def fibonacci(n):\n    if n < 2:\n", "import os\nimport sys\n\n\ndef main():\n",
           "class Config:\n    def __init__(self, path):\n", "for i in range(10):\n    print(",
           "with open(filename) as f:\n    for line in f:\n", "def __repr__(self):\n        return",
           "try:\n    import numpy as np\nexcept ImportError:\n", "def parse_args(argv):\n"]
with open(sys.argv[3], "w") as f:
    for p in prompts:
        f.write(json.dumps({"prompt": p, "max_tokens": 64, "temperature": 0}) + "\n")
PY
ppl() {
  python3 -c 'import json,math,sys
r = json.loads(open(sys.argv[1]).readline())
lp = [x["logprob"] for x in r["prompt_logprobs"] if x]
print("%.4f over %d tokens" % (math.exp(-sum(lp) / len(lp)), len(lp)))' "$1"
}
run_pycode() {  # NAME MODEL_DIR FLAGS...
  local name=$1 dir=$2
  shift 2
  timeout 120 "$B/pagellm" generate --device cuda --model "$dir" "$@" --max-model-len 2048 \
    --prompts-file "$B/ppl_prompt.jsonl" --output "$LOGS/ppl_$name.jsonl" 2> "$LOGS/ppl_$name.err"
  local rc=$?
  timeout 120 "$B/pagellm" generate --device cuda --model "$dir" "$@" --max-model-len 2048 \
    --prompts-file "$B/greedy_prompts.jsonl" --output "$LOGS/greedy_$name.jsonl" 2> "$LOGS/greedy_$name.err"
  say "pycode-25M $name (exit $rc/$?): perplexity $(ppl "$LOGS/ppl_$name.jsonl" 2>&1 | tail -1)"
}
run_pycode bf16 "$P"
if [ "$MODE" = kv ]; then
  run_pycode kv-fp8 "$P" --kv-cache-dtype fp8
  run_pycode kv-fp8-calculated "$P" --kv-cache-dtype fp8 --calculate-kv-scales
  run_pycode kv-fp8_e5m2-calculated "$P" --kv-cache-dtype fp8_e5m2 --calculate-kv-scales
  run_pycode w8a8-kv-fp8 "$P" --quantization fp8 --kv-cache-dtype fp8
  grep -h "KV cache" "$LOGS/ppl_kv-fp8.err" | tee -a "$SUMMARY"
else
  run_pycode fp8-online "$P" --quantization fp8
  for d in "$B"/models/pycode-fp8-*; do
    [ -d "$d" ] && run_pycode "$(basename "$d")" "$d"
  done
fi
python3 - "$LOGS" <<'PY' | tee -a "$SUMMARY"
import glob, json, os, sys
logs = sys.argv[1]
def texts(path):
    return [json.loads(l).get("text", "") for l in open(path)] if os.path.exists(path) else []
base = texts(os.path.join(logs, "greedy_bf16.jsonl"))
for path in sorted(glob.glob(os.path.join(logs, "greedy_*.jsonl"))):
    name = os.path.basename(path)[7:-6]
    t = texts(path)
    same = sum(1 for a, b in zip(base, t) if a == b)
    print("greedy %-28s identical to bf16 on %d of %d prompts" % (name, same, len(base)))
PY

# Llama-3.1-8B shapes: prefill and throughput, bf16 beside FP8.
bench() {  # NAME ARGS...
  local name=$1
  shift
  timeout 300 "$B/pagellm" bench throughput --model "$B/llama31-8b" --load-format dummy --device cuda \
    --max-model-len "${MAX_LEN:-2048}" "$@" > "$LOGS/bench_$name.log" 2>&1
  say "bench $name (exit $?): $(grep -E 'Throughput' "$LOGS/bench_$name.log")"
}
if [ "$MODE" = kv ]; then
  # Long contexts, where the KV pool bounds the batch: 256 x (3072 in, 512 out).
  for kv in auto fp8; do
    MAX_LEN=4096 bench "256x3072x512_kv-$kv" --num-prompts 256 --input-len 3072 --output-len 512 \
      --kv-cache-dtype $kv
  done
  grep -h "loaded\|KV cache" "$LOGS"/bench_256x3072x512_*.log | tee -a "$SUMMARY"
else
  for q in bf16 fp8; do
    flags=()
    [ $q = fp8 ] && flags=(--quantization fp8)
    bench "prefill_64x1024_$q" --num-prompts 64 --input-len 1024 --output-len 1 "${flags[@]}"
    bench "1000x1024x128_$q" --num-prompts 1000 --input-len 1024 --output-len 128 "${flags[@]}"
  done
  grep -h "loaded\|quantization" "$LOGS"/bench_1000x1024x128_*.log | tee -a "$SUMMARY"
fi
echo "==== summary"
cat "$SUMMARY"
