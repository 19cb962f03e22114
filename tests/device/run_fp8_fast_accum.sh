#!/usr/bin/env bash
# cuBLASLt's FP8 fast accumulation (PAGELLM_FP8_FAST_ACCUM=1) against the default on the GPU
# machine (docs/PERF.md, "FP8 fast accumulation"): the FP8 linear kernel tests under it, prefill
# and the mixed workload of Llama-3.1-8B shapes, and the held-out perplexity of pycode-draft-10M.
#   bash run_fp8_fast_accum.sh BUNDLE
# BUNDLE: pagellm, cuda_kernel_tests (xz'd), cuda_probe, unpack_bundle.sh, the llama31-8b config
# folder, models/pycode-draft-10M (safetensors xz'd), heldout_python.txt (tests/data).
SRC=$(cd "${1:?usage: run_fp8_fast_accum.sh BUNDLE}" && pwd)
. "$SRC/unpack_bundle.sh"
timeout 60 "$B/cuda_probe" > "$LOGS/probe.log" 2>&1
say "probe: $(grep -iE 'copy|gemm' "$LOGS/probe.log" | tr '\n' ' ')"
PAGELLM_FP8_FAST_ACCUM=1 timeout 200 "$B/cuda_kernel_tests" --filter "fp8 linear" > "$LOGS/tests.log" 2>&1
say "fast accumulation, kernel tests 'fp8 linear' (exit $?): $(grep -E 'kernel tests:' "$LOGS/tests.log")"
grep FAIL "$LOGS/tests.log" | head -12 | cut -c1-160 | tee -a "$SUMMARY"
tput() {  # FAST_ACCUM PROMPTS OUTPUT_LEN
  PAGELLM_FP8_FAST_ACCUM=$1 timeout 250 "$B/pagellm" bench throughput --model "$B/llama31-8b" \
    --load-format dummy --device cuda --max-model-len 2048 --num-prompts "$2" --input-len 1024 \
    --output-len "$3" --quantization fp8 2>&1 | awk '/Throughput/ {print $2, "req/s"}'
}
for round in 1 2; do
  for fa in 0 1; do say "round $round FP8 fast_accum=$fa prefill 64 x 1024: $(tput $fa 64 1)"; done
done
for fa in 0 1; do say "FP8 fast_accum=$fa 1000 x (1024, 128): $(tput $fa 1000 128)"; done
python3 - "$B/heldout_python.txt" "$B/ppl_prompt.jsonl" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
with open(sys.argv[2], "w") as f:
    f.write(json.dumps({"prompt": text, "max_tokens": 1, "temperature": 0, "prompt_logprobs": 1}) + "\n")
PY
for run in "bf16 0" "fp8 0" "fp8 1"; do
  set -- $run
  q=(); [ "$1" = fp8 ] && q=(--quantization fp8)
  PAGELLM_FP8_FAST_ACCUM=$2 timeout 120 "$B/pagellm" generate --device cuda \
    --model "$B/models/pycode-draft-10M" "${q[@]}" --max-model-len 2048 \
    --prompts-file "$B/ppl_prompt.jsonl" --output "$LOGS/ppl.jsonl" 2> "$LOGS/ppl.err"
  say "pycode-draft-10M $1 fast_accum=$2: perplexity $(python3 -c 'import json,math,sys
r = json.loads(open(sys.argv[1]).readline())
lp = [x["logprob"] for x in r["prompt_logprobs"] if x]
print("%.4f over %d tokens" % (math.exp(-sum(lp) / len(lp)), len(lp)))' "$LOGS/ppl.jsonl" 2>&1 | tail -1)"
done
