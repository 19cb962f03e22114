#!/usr/bin/env bash
# Speculative decoding on one GPU (issue 13). The bundle (make_spec_bundle.sh): pagellm, cuda_probe,
# pycode-draft-10M, the Llama-3.1-8B config and tokenizer; pycode-25M comes in a second folder
# (MODELS, the carry limit) or is already under /tmp/pagellm-keep from an earlier call.
#   bash BUNDLE/run_spec_gpu.sh BUNDLE [MODELS] [STAGE...]   stages: check same speed sampled cost batch adaptive (default: all)
# check: the attention kernel tests (among them verification rows: split-KV items in small
#        batches) and cuda_runner_check --skip-perf (GPU vs CPU runner; among its checks,
#        speculative verification: greedy on the GPU sampler, sampled seqs on the host);
# same:  pycode-25M greedy, 8 prompts x 128 tokens, no speculation / n-gram / draft model (graphs
#        and eager): the token ids against no speculation;
# speed: the runner's costs of a draft round (cuda_runner_check --draft-cost: the target's decode and
#        verification steps, the draft's decode step and 4-step greedy chain); batch 1, 512 tokens
#        ($TOKENS): tokens/s without speculation, with the draft (k = 2, 3, 4) and with n-gram on a
#        code-editing prompt, acceptance per position;
# sampled: batch 1, T 0.8 and top-p 0.95: pycode-25M without speculation, with n-gram and with the
#        draft, and Llama-3.1-8B shapes without, on the GPU sampler's fast path and then its full
#        path (PAGELLM_SAMPLER_FULL_PATH=1), beside greedy;
# cost:  Llama-3.1-8B shapes (dummy weights) at batch 1: the time of a verification step of
#        1 + k tokens against a plain decode step (cuda_runner_check --spec-cost), and generate
#        with n-gram drafts against without;
# batch: Llama-3.1-8B shapes, bench throughput of 64 concurrent requests (512 in, 128 out):
#        no speculation, n-gram with the adaptive switch (default), n-gram always on;
# adaptive: pycode-25M at batch 1, greedy, 512 tokens ($TOKENS) on three prompts (a fresh
#        function, argument parsing, a code edit that repeats its prompt): k = 4 fixed against
#        acceptance-adaptive k ("adaptive": true) for the draft model and for n-gram, beside no
#        speculation; tokens/s and acceptance.
set -uo pipefail
SRC=$(cd "${1:?usage: run_spec_gpu.sh BUNDLE [MODELS] [STAGE...]}" && pwd)
shift
KEEP=/tmp/pagellm-keep
if [ -n "${1:-}" ] && [ -d "$1" ]; then
  rm -rf "$KEEP" && mkdir -p "$KEEP" && cp -r "$1"/. "$KEEP"/ && shift
  find "$KEEP" -name "*.xz" -exec xz -d -T4 {} +
fi
STAGES=" ${*:-check same speed sampled cost batch adaptive} "
stage() { [[ "$STAGES" == *" $1 "* ]]; }
[ -f "$SRC/pagellm.xz" ] || [ -f "$SRC/pagellm" ] || { echo "models kept in $KEEP"; ls "$KEEP"; exit 0; }
. "$SRC/unpack_bundle.sh"
P=$B/pagellm
TARGET=$KEEP/pycode-25M
DRAFT=$B/models/pycode-draft-10M
timeout 120 "$B/cuda_probe" > "$LOGS/probe.log" 2>&1
say "probe: $(grep -iE 'copy|gemm' "$LOGS/probe.log" | tr '\n' ' ' | cut -c1-200)"
if stage check; then
  timeout 300 "$B/cuda_kernel_tests" --filter attention > "$LOGS/kernel_tests.log" 2>&1
  say "attention kernel tests (exit $?): $(grep -E '^kernel tests:' "$LOGS/kernel_tests.log"); verify rows: $(grep -cE '^  ok .*verify' "$LOGS/kernel_tests.log") ok"
  grep -E "FAIL" "$LOGS/kernel_tests.log" | cut -c1-200 | head -10 | tee -a "$SUMMARY"
  timeout 300 "$B/cuda_runner_check" "$B/models" --skip-perf > "$LOGS/runner_check.log" 2>&1
  say "runner check (exit $?): $(grep -E 'runner checks:' "$LOGS/runner_check.log")"
  grep -E "speculative|greedy chains|FAIL" "$LOGS/runner_check.log" | cut -c1-250 | tee -a "$SUMMARY"
fi
spec_ngram='{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4}'
spec_draft() { echo "{\"method\": \"draft_model\", \"model\": \"$DRAFT\", \"num_speculative_tokens\": $1}"; }

if stage same; then
  python3 - "$B/py_prompts.jsonl" <<'PY'
import json, sys
prompts = ["def parse_args(argv):\n", "class Config:\n    def __init__(self, path):\n",
           "import os\nimport sys\n\n\ndef main():\n", "def fibonacci(n):\n    if n < 2:\n",
           "for i in range(10):\n    print(", "with open(filename) as f:\n    for line in f:\n",
           "try:\n    import numpy as np\nexcept ImportError:\n", "def __repr__(self):\n        return"]
with open(sys.argv[1], "w") as f:
    for p in prompts:
        f.write(json.dumps({"prompt": p}) + "\n")
PY
  same() {
    local name=$1; shift
    timeout 180 "$P" generate --device cuda --model "$TARGET" --prompts-file "$B/py_prompts.jsonl" \
      --temperature 0 --max-tokens 128 --ignore-eos --max-num-seqs 16 --logprobs 2 "$@" \
      --output "$LOGS/same_$name.jsonl" > "$LOGS/same_$name.out" 2> "$LOGS/same_$name.err"
    local rc=$?
    local verdict=$(python3 - "$LOGS/same_plain.jsonl" "$LOGS/same_$name.jsonl" <<'PY'
import json, sys
try:
    a = [json.loads(l) for l in open(sys.argv[1])]
    b = [json.loads(l) for l in open(sys.argv[2])]
except Exception as e:
    print("unreadable:", e); sys.exit()
same, notes = 0, []
for n, (x, y) in enumerate(zip(a, b)):
    t = next((i for i, (p, q) in enumerate(zip(x["token_ids"], y["token_ids"])) if p != q), None)
    if t is None:
        same += 1
        continue
    # At the first difference: each run's top two (token, logprob); a near-tie shows as a small gap.
    top = lambda r: [(i, round(l, 4)) for i, l in r["logprobs"][t]["top"]]
    notes.append(f"prompt {n} at {t}: plain {top(x)} spec {top(y)}")
print(f"{same}/{len(a)} identical; " + "; ".join(notes))
PY
)
    say "same $name (exit $rc): $verdict; $(grep -E 'speculative decoding:.*drafts' "$LOGS/same_$name.err" | sed 's/.*speculative decoding: //' | cut -c1-150)"
  }
  same plain
  same ngram --speculative-config "$spec_ngram"
  same draft4 --speculative-config "$(spec_draft 4)"
  same draft4eager --speculative-config "$(spec_draft 4)" --enforce-eager

fi

one() {  # name model prompt flags...: tokens/s at batch 1 and the acceptance line
  local name=$1 model=$2 prompt=$3; shift 3
  # shellcheck disable=SC2086  # SAMPLING: several flags
  timeout 180 "$P" generate --device cuda --model "$model" --prompt "$prompt" ${SAMPLING:---temperature 0} \
    --max-tokens ${TOKENS:-512} --ignore-eos "$@" > "$LOGS/one_$name.out" 2> "$LOGS/one_$name.err"
  say "$name (exit $?): $(grep -E 'generated' "$LOGS/one_$name.err" | sed 's/.*generated/generated/') | $(grep -E 'speculative decoding:.*drafts' "$LOGS/one_$name.err" | sed 's/.*speculative decoding: //')"
}
if stage speed; then
  timeout 120 "$B/cuda_runner_check" "$B/models" --draft-cost "$TARGET" "$DRAFT" > "$LOGS/draft_cost.log" 2>&1
  say "draft round costs (exit $?):"
  grep -E "^(target|draft|a round)" "$LOGS/draft_cost.log" | tee -a "$SUMMARY"
  for prompt in $'import os\nimport sys\n\n\ndef main():\n' $'def parse_args(argv):\n'; do
    tag=$(echo "$prompt" | head -c 10 | tr -c 'a-z' '_')
    one "plain_$tag" "$TARGET" "$prompt"
    for k in 2 3 4; do one "draft${k}_$tag" "$TARGET" "$prompt" --speculative-config "$(spec_draft $k)"; done
    one "ngram_$tag" "$TARGET" "$prompt" --speculative-config "$spec_ngram"
    one "plain2_$tag" "$TARGET" "$prompt"
  done
  edit=$'def moving_average(values, window):\n    """Return the moving averages of values over window."""\n    if window <= 0:\n        raise ValueError("window must be positive")\n    out = []\n    total = 0.0\n    for i, v in enumerate(values):\n        total += v\n        if i >= window:\n            total -= values[i - window]\n        if i >= window - 1:\n            out.append(total / window)\n    return out\n\n\n# The same function with type hints:\ndef moving_average(values: list, window: int) -> list:\n'
  one plain_edit "$TARGET" "$edit"
  one ngram_edit "$TARGET" "$edit" --speculative-config "$spec_ngram"
  one draft4_edit "$TARGET" "$edit" --speculative-config "$(spec_draft 4)"
fi
if stage sampled; then  # T 0.8, top-p 0.95: the sampler's fast path against its full path
  os_prompt=$'import os\nimport sys\n\n\ndef main():\n'
  for mode in fast full; do
    if [ $mode = full ]; then export PAGELLM_SAMPLER_FULL_PATH=1; else unset PAGELLM_SAMPLER_FULL_PATH; fi
    export SAMPLING="--temperature 0.8 --top-p 0.95 --seed 0"
    one "sampled_plain_$mode" "$TARGET" "$os_prompt"
    one "sampled_ngram_$mode" "$TARGET" "$os_prompt" --speculative-config "$spec_ngram"
    one "sampled_draft4_$mode" "$TARGET" "$os_prompt" --speculative-config "$(spec_draft 4)"
    one "sampled_8b_$mode" "$B/llama31-8b" "The quick brown fox jumps over the lazy dog." \
      --load-format dummy --max-model-len 4096
    unset SAMPLING
  done
  unset PAGELLM_SAMPLER_FULL_PATH
  one greedy_plain "$TARGET" "$os_prompt"
  one greedy_8b "$B/llama31-8b" "The quick brown fox jumps over the lazy dog." --load-format dummy \
    --max-model-len 4096
fi
if stage cost; then
  timeout 300 "$B/cuda_runner_check" "$B/models" --spec-cost > "$LOGS/spec_cost.log" 2>&1
  say "spec cost (exit $?):"
  grep -E "^verify" "$LOGS/spec_cost.log" | tee -a "$SUMMARY"
  M8=$B/llama31-8b
  for run in 1 2; do
    one "8b_plain_$run" "$M8" "The quick brown fox jumps over the lazy dog." --load-format dummy --max-model-len 4096
    one "8b_ngram_$run" "$M8" "The quick brown fox jumps over the lazy dog." --load-format dummy --max-model-len 4096 --speculative-config "$spec_ngram"
  done
fi
if stage batch; then
  tput() {
    local name=$1; shift
    timeout 300 "$P" bench throughput --model "$B/llama31-8b" --load-format dummy --device cuda \
      --max-model-len 4096 --num-prompts 64 --input-len 512 --output-len 128 --seed 0 "$@" \
      > "$LOGS/tput_$name.log" 2>&1
    say "64 x (512, 128) $name (exit $?): $(grep -E 'Throughput' "$LOGS/tput_$name.log") $(grep -E 'speculative decoding:.*drafts' "$LOGS/tput_$name.log" | sed 's/.*speculative decoding: //' | cut -c1-80)"
  }
  for run in 1 2; do
    tput "off_$run"
    tput "ngram_auto_$run" --speculative-config "$spec_ngram"
    tput "ngram_always_$run" --speculative-config "${spec_ngram%\}}, \"disable_by_batch_size\": 1000}"
  done
fi
if stage adaptive; then
  edit=$'def moving_average(values, window):\n    """Return the moving averages of values over window."""\n    if window <= 0:\n        raise ValueError("window must be positive")\n    out = []\n    total = 0.0\n    for i, v in enumerate(values):\n        total += v\n        if i >= window:\n            total -= values[i - window]\n        if i >= window - 1:\n            out.append(total / window)\n    return out\n\n\n# The same function with type hints:\ndef moving_average(values: list, window: int) -> list:\n'
  n=0
  for prompt in $'import os\nimport sys\n\n\ndef main():\n' $'def parse_args(argv):\n' "$edit"; do
    n=$((n + 1))
    for run in 1 2; do
      one "a${n}_plain_$run" "$TARGET" "$prompt"
      one "a${n}_draft4_$run" "$TARGET" "$prompt" --speculative-config "$(spec_draft 4)"
      one "a${n}_draft4_adaptive_$run" "$TARGET" "$prompt" --speculative-config "$(spec_draft 4 | sed 's/}$/, "adaptive": true}/')"
      one "a${n}_ngram_$run" "$TARGET" "$prompt" --speculative-config "$spec_ngram"
      one "a${n}_ngram_adaptive_$run" "$TARGET" "$prompt" --speculative-config "${spec_ngram%\}}, \"adaptive\": true}"
    done
  done
fi
echo "=== summary"; cat "$SUMMARY"
