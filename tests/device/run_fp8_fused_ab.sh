#!/usr/bin/env bash
# FP8 activation quantization fused into RMSNorm, against the build before it, on
# one GPU machine. The bundle: make_fp8_fused_bundle.sh (the new binaries, the earlier build's
# pagellm and cuda_runner_check as *.base, pycode-draft-10M, the held-out Python text).
#   bash BUNDLE/run_fp8_fused_ab.sh BUNDLE [STAGE...]
# Stages (default: tests pycode bench decode): tests, pycode, bench, decode as numbered below;
# kernels (the fused norm's benchmark against norm + quantize); pdl (decode with and
# without programmatic dependent launch, new build); kv (the mixed bench with FP8 KV caches).
# 1. ceilings; 2. every kernel test (among them: fused = unfused bit for bit);
# 3. GPU vs CPU runner; 4. pycode-draft-10M with --quantization fp8: prompt logprobs over the
# held-out text and greedy text, base and new byte for byte; 5. `bench throughput` on Llama-3.1-8B
# shapes (dummy weights), bf16 and FP8, base and new, at the default and at 16384 batched tokens;
# 6. decode figures (runner check --perf-only --fp8), base and new. Summary printed last.
set -uo pipefail
SRC=$(cd "${1:?usage: run_fp8_fused_ab.sh BUNDLE [STAGE...]}" && pwd)
shift
STAGES=" ${*:-tests pycode bench decode} "
stage() { [[ "$STAGES" == *" $1 "* ]]; }
. "$SRC/unpack_bundle.sh"
timeout 120 "$B/cuda_probe" > "$LOGS/probe.log" 2>&1
say "probe: $(grep -iE 'copy|gemm|tflop|GB/s' "$LOGS/probe.log" | tr '\n' ' ' | cut -c1-300)"
if stage kernels; then
  timeout 200 "$B/cuda_kernel_tests" --fp8-fused-bench-only > "$LOGS/fused_bench.log" 2>&1
  say "fused kernels bench (exit $?):"
  grep -E "^m=" "$LOGS/fused_bench.log" | tee -a "$SUMMARY"
fi
if stage tests; then
  timeout 400 "$B/cuda_kernel_tests" > "$LOGS/kernel_tests.log" 2>&1
  say "kernel tests (exit $?): $(grep -E '^kernel tests:' "$LOGS/kernel_tests.log"); fused: $(grep -cE '^  ok +fp8 (fused|linear x_quantized)' "$LOGS/kernel_tests.log") ok"
  grep -E "FAIL" "$LOGS/kernel_tests.log" | cut -c1-200 | head -10 | tee -a "$SUMMARY"
fi
if stage tests; then
  timeout 300 "$B/cuda_runner_check" "$B/models" --skip-perf > "$LOGS/runner_check.log" 2>&1
  say "runner check (exit $?): $(grep -E 'runner checks:' "$LOGS/runner_check.log")"
  grep -E "FAIL" "$LOGS/runner_check.log" | head -10 | tee -a "$SUMMARY"
fi

if stage pycode; then
# pycode-draft-10M (hidden 256, intermediate 768): prefill of the held-out text takes the
# tensor-core FP8 path, so the fused kernels feed every projection but o_proj.
P=$B/models/pycode-draft-10M
python3 - "$B/heldout_python.txt" "$B/ppl_prompt.jsonl" "$B/greedy_prompts.jsonl" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
with open(sys.argv[2], "w") as f:
    f.write(json.dumps({"prompt": text, "max_tokens": 1, "temperature": 0, "prompt_logprobs": 1}) + "\n")
prompts = ["def fibonacci(n):\n    if n < 2:\n", "import os\nimport sys\n\n\ndef main():\n",
           "class Config:\n    def __init__(self, path):\n", "for i in range(10):\n    print("]
with open(sys.argv[3], "w") as f:
    for p in prompts:
        f.write(json.dumps({"prompt": p, "max_tokens": 64, "temperature": 0}) + "\n")
PY
for which in base new; do
  bin=$B/pagellm
  [ $which = base ] && bin=$B/pagellm.base
  for q in bf16 fp8; do
    flags=()
    [ $q = fp8 ] && flags=(--quantization fp8)
    for p in ppl greedy; do
      prompts=$B/ppl_prompt.jsonl
      [ $p = greedy ] && prompts=$B/greedy_prompts.jsonl
      timeout 120 "$bin" generate --device cuda --model "$P" "${flags[@]}" --max-model-len 2048 \
        --prompts-file "$prompts" --output "$LOGS/${p}_${q}_$which.jsonl" 2> "$LOGS/${p}_${q}_$which.err"
    done
  done
done
for q in bf16 fp8; do
  for p in ppl greedy; do
    if cmp -s "$LOGS/${p}_${q}_base.jsonl" "$LOGS/${p}_${q}_new.jsonl"; then same=identical; else same=DIFFER; fi
    say "pycode-draft-10M $q $p: base vs new $same ($(wc -c < "$LOGS/${p}_${q}_new.jsonl") bytes)"
  done
done
python3 -c 'import json,math,sys
for path in sys.argv[1:]:
    r = json.loads(open(path).readline())
    lp = [x["logprob"] for x in r["prompt_logprobs"] if x]
    print("%s: perplexity %.4f over %d tokens" % (path.split("/")[-1], math.exp(-sum(lp) / len(lp)), len(lp)))' \
  "$LOGS"/ppl_*_new.jsonl | tee -a "$SUMMARY"
fi

bench() {  # NAME BINARY QUANT FLAGS...
  local name=$1 bin=$2 q=$3
  shift 3
  local flags=()
  [ "$q" = fp8 ] && flags=(--quantization fp8)
  timeout 200 "$bin" bench throughput --model "$B/llama31-8b" --load-format dummy --device cuda \
    --max-model-len 2048 "$@" "${flags[@]}" > "$LOGS/bench_$name.log" 2>&1
  say "bench $name (exit $?): $(grep -E 'Throughput' "$LOGS/bench_$name.log")"
}
PREFILL="--num-prompts 64 --input-len 1024 --output-len 1"
MIXED="--num-prompts 1000 --input-len 1024 --output-len 128"
if stage bench; then
for q in bf16 fp8; do
  bench "prefill_${q}_base" "$B/pagellm.base" $q $PREFILL
  bench "prefill_${q}_new" "$B/pagellm" $q $PREFILL
done
bench prefill_fp8_new_16k "$B/pagellm" fp8 $PREFILL --max-num-batched-tokens 16384
bench prefill_bf16_new_16k "$B/pagellm" bf16 $PREFILL --max-num-batched-tokens 16384
bench mixed_fp8_base "$B/pagellm.base" fp8 $MIXED
bench mixed_fp8_new "$B/pagellm" fp8 $MIXED
bench mixed_bf16_new "$B/pagellm" bf16 $MIXED
bench mixed_fp8_new_16k "$B/pagellm" fp8 $MIXED --max-num-batched-tokens 16384
bench mixed_bf16_new_16k "$B/pagellm" bf16 $MIXED --max-num-batched-tokens 16384
fi
if stage kv; then
  bench mixed_fp8_kvfp8_new "$B/pagellm" fp8 $MIXED --kv-cache-dtype fp8
  bench mixed_bf16_kvfp8_new "$B/pagellm" bf16 $MIXED --kv-cache-dtype fp8
fi
if stage decode; then
for which in base new; do
  bin=$B/cuda_runner_check
  [ $which = base ] && bin=$B/cuda_runner_check.base
  timeout 150 "$bin" "$B/models" --perf-only --fp8 --no-bf16 > "$LOGS/perf_$which.log" 2>&1
  say "decode fp8 $which (exit $?): $(grep -E 'tok/s' "$LOGS/perf_$which.log" | awk '{print $1, $4, $7}' | tr '\n' ' ')"
done
fi
if stage pdl; then
  for round in 1 2; do
    for pdl in 0 1; do
      PAGELLM_PDL=$pdl timeout 150 "$B/cuda_runner_check" "$B/models" --perf-only --fp8 --int4 \
        > "$LOGS/pdl_${pdl}_$round.log" 2>&1
      say "decode PAGELLM_PDL=$pdl round $round (exit $?): $(grep -E 'tok/s' "$LOGS/pdl_${pdl}_$round.log" | awk '{print $1, $4, $7}' | tr '\n' ' ')"
    done
  done
fi
echo "==== summary"
cat "$SUMMARY"
