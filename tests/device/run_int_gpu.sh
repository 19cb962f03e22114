#!/usr/bin/env bash
# INT4 / INT8 checkpoints on the GPU (issue 12: packed weights, the INT weight-only kernels), then
# `bench throughput` figures (bf16 beside FP8 and INT4), on the GPU machine.
# Run from the repository root (tools/quantize_int.py makes the checkpoints there, numpy only):
#   bash tests/device/run_int_gpu.sh BUNDLE [--kernels] [--bench] [--no-ppl]
# BUNDLE (tests/device/make_int_bundle.sh) holds pagellm (xz) and unpack_bundle.sh; the perplexity
# runs need models/pycode-25M (xz'd) and heldout_python.txt, --bench llama31-8b/ (config + tokenizer
# for --load-format dummy), --kernels cuda_kernel_tests and cuda_runner_check (xz). --kernels runs
# the INT kernel tests, their benchmark against bf16, and decode on Llama-3.1-8B shapes (bf16, INT4,
# INT8); --no-ppl skips the perplexity runs.
# For pycode-25M bf16 and four formats (GPTQ W4A16 g128 act-order, AWQ W4A16 g128, compressed-
# tensors W4A16 g128 and W8A16): teacher-forced perplexity of the held-out text on --device cuda
# and --device cpu; W8A8-INT8 must be refused on cuda in one line.
set -uo pipefail
SRC=$(cd "${1:?usage: run_int_gpu.sh BUNDLE [--bench]}" && pwd)
. "$SRC/unpack_bundle.sh"
P=$B/models/pycode-25M
if [[ " $* " == *" --kernels "* ]]; then
  timeout 300 "$B/cuda_kernel_tests" --filter int > "$LOGS/int_kernel_tests.log" 2>&1
  say "int kernel tests (exit $?): $(grep -c '^  ok' "$LOGS/int_kernel_tests.log") ok, $(grep -c FAIL "$LOGS/int_kernel_tests.log") failed"
  grep FAIL "$LOGS/int_kernel_tests.log" | head -5 | tee -a "$SUMMARY"
  timeout 300 "$B/cuda_kernel_tests" --int-bench-only > "$LOGS/int_bench.log" 2>&1
  say "int bench (exit $?)"
  grep -E "ceiling|^(qkv|o |gu|down)" "$LOGS/int_bench.log" | tee -a "$SUMMARY"
  timeout 400 "$B/cuda_runner_check" "$B/models" --perf-only --int4 --int8 > "$LOGS/int_decode.log" 2>&1
  say "decode (exit $?)"
  grep -E "copy bandwidth|tok/s|weights" "$LOGS/int_decode.log" | tee -a "$SUMMARY"
fi
[[ " $* " == *" --no-ppl "* ]] || python3 - "$B/heldout_python.txt" "$B/ppl_prompt.jsonl" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
with open(sys.argv[2], "w") as f:
    f.write(json.dumps({"prompt": text, "max_tokens": 1, "temperature": 0, "prompt_logprobs": 1}) + "\n")
PY
ppl() {
  python3 -c 'import json,math,sys
r = json.loads(open(sys.argv[1]).readline())
lp = [x["logprob"] for x in r["prompt_logprobs"] if x]
print("%.4f over %d tokens" % (math.exp(-sum(lp) / len(lp)), len(lp)))' "$1" 2>&1 | tail -1
}
score() {  # NAME MODEL_DIR
  local line="$1:"
  for dev in cuda cpu; do
    timeout 300 "$B/pagellm" generate --device "$dev" --model "$2" --max-model-len 2048 \
      --prompts-file "$B/ppl_prompt.jsonl" --output "$LOGS/ppl_$1_$dev.jsonl" 2> "$LOGS/ppl_$1_$dev.err"
    line="$line $dev (exit $?) $(ppl "$LOGS/ppl_$1_$dev.jsonl");"
  done
  say "$line"
  grep -hE "dequantized to|kept packed" "$LOGS/ppl_$1_cuda.err" | head -2 | tee -a "$SUMMARY"
}
[[ " $* " == *" --no-ppl "* ]] || score bf16 "$P"
[[ " $* " == *" --no-ppl "* ]] || while read -r name args; do
  # shellcheck disable=SC2086
  timeout 300 python3 tools/quantize_int.py $args "$P" "$B/q/$name" > "$LOGS/quantize_$name.log" 2>&1 ||
    { say "quantize $name failed: $(tail -2 "$LOGS/quantize_$name.log")"; continue; }
  score "$name" "$B/q/$name"
done <<'LIST'
gptq-w4-g128-actorder --format gptq --method gptq --act-order
awq-w4-g128 --format awq --method awq
ct-w4a16-g128 --format ct-w4a16 --method rtn
ct-w8a16-channel --format ct-w8a16 --method rtn --group-size -1
ct-w8a8 --format ct-w8a8 --method rtn
LIST
[[ " $* " == *" --no-ppl "* ]] || say "W8A8 on cuda: $(grep -v INFO "$LOGS/ppl_ct-w8a8_cuda.err" | head -2)"

if [[ " $* " == *" --bench "* ]]; then
  # INT4: the 8B config with a GPTQ W4A16 g128 quantization_config (dummy: random packed weights).
  cp -r "$B/llama31-8b" "$B/llama31-8b-int4"
  python3 - "$B/llama31-8b-int4/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True}
json.dump(c, open(sys.argv[1], "w"))
PY
  # W8A8-INT8: compressed-tensors int-quantized, per-channel int8 weights, per-token activations.
  cp -r "$B/llama31-8b" "$B/llama31-8b-w8a8"
  python3 - "$B/llama31-8b-w8a8/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
scheme = lambda strategy: {"num_bits": 8, "type": "int", "symmetric": True, "strategy": strategy,
                           "dynamic": strategy == "token"}
c["quantization_config"] = {"quant_method": "compressed-tensors", "format": "int-quantized",
    "config_groups": {"group_0": {"targets": ["Linear"], "weights": scheme("channel"),
                                  "input_activations": scheme("token")}}, "ignore": ["lm_head"]}
json.dump(c, open(sys.argv[1], "w"))
PY
  for q in ${BENCH_QUANTS:-bf16 fp8 int4 w8a8}; do
    flags=()
    model=$B/llama31-8b
    [ $q = fp8 ] && flags=(--quantization fp8)
    [ $q = int4 ] && model=$B/llama31-8b-int4
    [ $q = w8a8 ] && model=$B/llama31-8b-w8a8
    for shape in "prefill_64x1024 --num-prompts 64 --input-len 1024 --output-len 1" \
                 "1000x1024x128 --num-prompts 1000 --input-len 1024 --output-len 128"; do
      set -- $shape
      name=$1
      shift
      timeout 300 "$B/pagellm" bench throughput --model "$model" --load-format dummy \
        --device cuda --max-model-len 2048 "$@" "${flags[@]}" > "$LOGS/bench_${name}_$q.log" 2>&1
      say "bench ${name}_$q (exit $?): $(grep -E 'Throughput' "$LOGS/bench_${name}_$q.log")"
    done
  done
fi
echo "==== summary"
cat "$SUMMARY"
