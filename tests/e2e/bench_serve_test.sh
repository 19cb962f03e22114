#!/usr/bin/env bash
# `pagellm bench serve` with vLLM's datasets and result file (issue 19) against a live
# `pagellm serve` on stories260K: sonnet (a poem file, chat-template formatting, shared prefix),
# sharegpt, custom JSONL and random with a shared prefix; --save-result writes vLLM's keys.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${PAGELLM_BIN:-build/pagellm}
MODEL=${PAGELLM_SHARED_DIR:-../shared}/models/stories260K
source tests/e2e/lib.sh
e2e_init

"$BIN" serve "$MODEL" --port "$PORT" --max-model-len 512 > "$TMP/serve.log" 2>&1 &
PID=$!
wait_health "http://127.0.0.1:$PORT/health" "$TMP/serve.log"
# A tokenizer folder with a chat template (stories260K has none), the poem, ShareGPT and JSONL.
mkdir "$TMP/tok" && cp "$MODEL/tokenizer.json" "$TMP/tok/"
python3 - "$MODEL/tokenizer_config.json" "$TMP" <<'PY'
import json, sys
cfg = json.load(open(sys.argv[1]))
cfg["chat_template"] = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
json.dump(cfg, open(sys.argv[2] + "/tok/tokenizer_config.json", "w"))
words = "the cat sat on a mat and the dog ran far away from home into the night".split()
with open(sys.argv[2] + "/poem.txt", "w") as f:
    for i in range(60):
        f.write(" ".join(words[(i + k) % len(words)] for k in range(6)) + "\n")
conv = [{"conversations": [{"from": "human", "value": "Tell me a story about a cat number %d please" % i},
                           {"from": "gpt", "value": "Once upon a time there was a cat %d who liked fish" % i}]}
        for i in range(12)]
json.dump(conv, open(sys.argv[2] + "/sharegpt.json", "w"))
with open(sys.argv[2] + "/custom.jsonl", "w") as f:
    for i in range(3):
        f.write(json.dumps({"prompt": "Once upon a time %d" % i}) + "\n")
PY
bench() {  # NAME ARGS...
  local name=$1; shift
  "$BIN" bench serve --port "$PORT" --request-rate inf "$@" > "$TMP/$name.out" 2> "$TMP/$name.err" \
    || { cat "$TMP/$name.out" "$TMP/$name.err" >&2; fail "bench $name"; }
}
bench sonnet --dataset-name sonnet --dataset-path "$TMP/poem.txt" --tokenizer "$TMP/tok" \
  --num-prompts 6 --sonnet-input-len 120 --sonnet-prefix-len 60 --sonnet-output-len 8 \
  --save-result --result-dir "$TMP/results" --result-filename sonnet.json
python3 - "$TMP/results/sonnet.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for key in ("date", "backend", "num_prompts", "request_rate", "completed", "total_input_tokens",
            "total_output_tokens", "request_throughput", "output_throughput", "mean_ttft_ms",
            "median_tpot_ms", "p99_itl_ms", "mean_e2el_ms", "input_lens", "output_lens", "ttfts", "itls"):
    assert key in r, "missing " + key
assert r["completed"] == 6 and len(r["input_lens"]) == 6, r["completed"]
assert all(100 <= n <= 140 for n in r["input_lens"]), r["input_lens"]   # ~120 tokens each
assert r["output_lens"] == [8] * 6, r["output_lens"]
PY
echo "ok: sonnet (prompts of ~120 tokens, vLLM result file)"
bench sharegpt --dataset-name sharegpt --dataset-path "$TMP/sharegpt.json" --model "$MODEL" \
  --num-prompts 5 --result-file "$TMP/sharegpt.json.out"
grep -q '"completed": 5' "$TMP/sharegpt.json.out" || fail "sharegpt: $(cat "$TMP/sharegpt.out")"
bench custom --dataset-name custom --dataset-path "$TMP/custom.jsonl" --custom-output-len 4 \
  --num-prompts 4 --result-file "$TMP/custom.json"
grep -q '"total_output_tokens": 16' "$TMP/custom.json" || fail "custom: $(cat "$TMP/custom.json")"
bench random --base-url "http://127.0.0.1:$PORT/v1" --random-input-len 8 --random-prefix-len 16 --random-output-len 4 --num-prompts 5 \
  --result-file "$TMP/random.json"
grep -q '"total_input_tokens": 120' "$TMP/random.json" || fail "random prefix: $(cat "$TMP/random.json")"
echo "ok: sharegpt, custom, random with a shared prefix"
if "$BIN" bench serve --port "$PORT" --dataset-name sonnet --dataset-path "$TMP/poem.txt" \
    > "$TMP/bad.txt" 2>&1; then fail "sonnet without a tokenizer exited 0"; fi
grep -q "pass --tokenizer" "$TMP/bad.txt" || fail "no reason: $(cat "$TMP/bad.txt")"
echo "bench_serve_test: all passed"
