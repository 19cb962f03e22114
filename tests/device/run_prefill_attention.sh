#!/usr/bin/env bash
# The Hopper (wgmma) prefill attention kernel against the mma.sync one, on the GPU machine, from a
# bundle (docs/PERF.md, "Prefill attention, warp-specialised with TMA, persistent", lists what goes
# in):
#   - the ceilings probe;
#   - the attention kernel tests through both kernels, with the Hopper kernel's ping-pong on and
#     off (PP="1 0" by default);
#   - the prefill attention benchmark: first any other builds' test binaries bundled as
#     cuda_kernel_tests.NAME (base, prev, ...), then this build's with PP's settings;
#   - an Nsight Compute profile of the wgmma kernel (ncu, on request);
#   - pycode-draft-10M's perplexity and greedy text through both kernels (model: needs
#     models/pycode-draft-10M and heldout_python.txt in the bundle);
#   - `bench throughput` on Llama-3.1-8B shapes (dummy weights), bf16 and FP8, with
#     PAGELLM_PREFILL_WGMMA=1 and =0 (WG="1 0" by default).
#   bash BUNDLE/run_prefill_attention.sh BUNDLE [tests] [bench] [ncu] [model] [e2e]
#   (default: tests bench e2e)
set -uo pipefail
SRC=$(cd "${1:?usage: run_prefill_attention.sh BUNDLE [tests] [bench] [e2e]}" && pwd)
shift
PARTS=${*:-tests bench e2e}
. "$SRC/unpack_bundle.sh"
"$B/cuda_probe" > "$LOGS/probe.log" 2>&1
say "probe: $(grep -iE 'copy|gemm' "$LOGS/probe.log" | tr '\n' ' ')"
if [[ $PARTS == *tests* ]]; then
  for pp in ${PP:-1 0}; do  # the Hopper kernel with and without its consumers taking turns
    PAGELLM_PREFILL_PINGPONG=$pp timeout 200 "$B/cuda_kernel_tests" --filter attention \
      > "$LOGS/attention_tests_pp$pp.log" 2>&1
    say "attention tests, pingpong=$pp (exit $?): $(grep -E 'kernel tests:' "$LOGS/attention_tests_pp$pp.log")"
    grep -E "FAIL" "$LOGS/attention_tests_pp$pp.log" | head -20 | tee -a "$SUMMARY"
  done
fi
if [[ $PARTS == *bench* ]]; then  # prefill attention: other builds' binaries first, when bundled
  for other in "$B"/cuda_kernel_tests.*; do  # cuda_kernel_tests.NAME: the build NAME (base, ...)
    [ -x "$other" ] || continue
    name=${other##*.}
    timeout 120 "$other" --attention-bench-only > "$LOGS/attention_bench_$name.log" 2>&1
    say "prefill attention bench, build $name (exit $?):"
    tee -a "$SUMMARY" < "$LOGS/attention_bench_$name.log"
  done
  for pp in ${PP:-1 0}; do
    PAGELLM_PREFILL_PINGPONG=$pp timeout 120 "$B/cuda_kernel_tests" --attention-bench-only \
      > "$LOGS/attention_bench_pp$pp.log" 2>&1
    say "prefill attention bench, pingpong=$pp (exit $?):"
    tee -a "$SUMMARY" < "$LOGS/attention_bench_pp$pp.log"
  done
fi
if [[ $PARTS == *ncu* ]]; then  # where the wgmma kernel's time goes: its first benchmark launch
  NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  timeout 300 "$NCU" --kernel-name regex:tile_attention_sm90 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
    --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section Occupancy \
    "$B/cuda_kernel_tests" --bench-only > "$LOGS/ncu_attention.txt" 2>&1
  say "ncu (exit $?):"
  grep -E "Duration|Throughput|Stall|Issue|Eligible|Active Warps|Pipe|L2|L1|Registers" \
    "$LOGS/ncu_attention.txt" | head -60 | tee -a "$SUMMARY"
fi
if [[ $PARTS == *model* ]]; then  # a trained model (head_dim 64) through both kernels
  P=$B/models/pycode-draft-10M
  python3 - "$B/heldout_python.txt" "$B/ppl_prompt.jsonl" "$B/greedy_prompts.jsonl" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
with open(sys.argv[2], "w") as f:
    f.write(json.dumps({"prompt": text, "max_tokens": 1, "temperature": 0, "prompt_logprobs": 1}) + "\n")
code = text.split("\n")
prompts = ["\n".join(code[:n]) + "\n" for n in (40, 90, 150)]
with open(sys.argv[3], "w") as f:
    for p in prompts:
        f.write(json.dumps({"prompt": p, "max_tokens": 64, "temperature": 0}) + "\n")
PY
  for wg in 1 0; do
    for p in ppl greedy; do
      prompts=$B/ppl_prompt.jsonl
      [ $p = greedy ] && prompts=$B/greedy_prompts.jsonl
      PAGELLM_PREFILL_WGMMA=$wg timeout 120 "$B/pagellm" generate --device cuda --model "$P" \
        --max-model-len 4096 --prompts-file "$prompts" --output "$LOGS/${p}_wgmma$wg.jsonl" \
        2> "$LOGS/${p}_wgmma$wg.err"
      say "pycode-draft-10M $p wgmma=$wg (exit $?)"
    done
  done
  if cmp -s "$LOGS/greedy_wgmma1.jsonl" "$LOGS/greedy_wgmma0.jsonl"; then same=identical; else same=DIFFER; fi
  say "greedy 3 x 64 tokens (prompts of 40-150 lines), wgmma vs mma.sync: $same"
  python3 -c 'import json,math,sys
for path in sys.argv[1:]:
    r = json.loads(open(path).readline())
    lp = [x["logprob"] for x in r["prompt_logprobs"] if x]
    print("%s: perplexity %.4f over %d tokens" % (path.split("/")[-1], math.exp(-sum(lp) / len(lp)), len(lp)))' \
    "$LOGS"/ppl_wgmma*.jsonl | tee -a "$SUMMARY"
fi
if [[ $PARTS == *e2e* ]]; then
  for q in bf16 fp8; do
    flags=()
    [ $q = fp8 ] && flags=(--quantization fp8)
    for wg in ${WG:-1 0}; do
      for shape in "prefill_64x1024 --num-prompts 64 --input-len 1024 --output-len 1" \
                   "1000x1024x128 --num-prompts 1000 --input-len 1024 --output-len 128"; do
        set -- $shape
        name=$1
        shift
        log=$LOGS/bench_${name}_${q}_wgmma$wg.log
        PAGELLM_PREFILL_WGMMA=$wg timeout 300 "$B/pagellm" bench throughput \
          --model "$B/llama31-8b" --load-format dummy --device cuda --max-model-len 2048 "$@" \
          "${flags[@]}" > "$log" 2>&1
        say "bench ${name} $q wgmma=$wg (exit $?): $(grep -E 'Throughput' "$log")"
      done
    done
  done
fi
echo "==== summary"
cat "$SUMMARY"
