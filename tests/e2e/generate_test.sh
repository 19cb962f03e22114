#!/usr/bin/env bash
# `pagellm generate` end to end on stories260K: greedy output equals llama2.c's published sample
# (run.c with 256 steps samples 256 tokens after BOS), --prompts-file goes through the engine and
# gives the same text batched, and bad input fails with a one-line error.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${PAGELLM_BIN:-build/pagellm}
MODEL=${PAGELLM_SHARED_DIR:-../shared}/models/stories260K
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# llama2.c's sample is the fenced block of the model's README.
sed -n '/^```$/,/^```$/p' "$MODEL/README.md" | sed '1d;$d' > "$TMP/expected.txt"
[ -s "$TMP/expected.txt" ] || fail "no sample in $MODEL/README.md"

"$BIN" generate --model "$MODEL" --prompt "" --temperature 0 --max-tokens 256 \
  > "$TMP/out.txt" 2> "$TMP/err.txt" || { cat "$TMP/err.txt" >&2; fail "generate exited non-zero"; }
diff "$TMP/expected.txt" "$TMP/out.txt" > "$TMP/diff.txt" || { cat "$TMP/diff.txt" >&2; fail "greedy text differs from llama2.c"; }
grep -q "INFO" "$TMP/err.txt" || fail "expected logs on stderr"
echo "ok: greedy sample equals llama2.c's run.c"
# The issue text asks for --max-tokens 255; llama2.c's sample holds 256 tokens after BOS, so 255 gives
# the sample less its final token (".").
"$BIN" generate --model "$MODEL" --prompt "" --temperature 0 --max-tokens 255 > "$TMP/out255.txt" 2>/dev/null
[ "$(cat "$TMP/out255.txt")." = "$(cat "$TMP/expected.txt")" ] || fail "--max-tokens 255 is not the sample less its last token"
echo "ok: --max-tokens 255 is the sample less its final token"

# The same prompt three times plus two others, batched through --prompts-file: the first three must
# reproduce the sample exactly (batch invariance), one JSON object per line.
{
  for i in 1 2 3; do echo '{"prompt": "", "temperature": 0, "max_tokens": 256}'; done
  echo '{"prompt": "Once upon a time", "temperature": 0.8, "seed": 1, "max_tokens": 40}'
  echo '{"prompt": "The dog", "max_tokens": 30, "stop": ["."]}'
} > "$TMP/prompts.jsonl"
"$BIN" generate --model "$MODEL" --prompts-file "$TMP/prompts.jsonl" > "$TMP/results.jsonl" 2> "$TMP/err2.txt" \
  || { cat "$TMP/err2.txt" >&2; fail "generate --prompts-file exited non-zero"; }
[ "$(wc -l < "$TMP/results.jsonl")" = 5 ] || fail "expected 5 result lines"
node -e '
const fs = require("fs");
const expected = fs.readFileSync(process.argv[1], "utf8").replace(/\n$/, "");
const lines = fs.readFileSync(process.argv[2], "utf8").trim().split("\n").map(JSON.parse);
for (let i = 0; i < 3; i++) {
  if (lines[i].text !== expected) { console.error("batched result", i, "differs"); process.exit(1); }
}
if (lines[4].finish_reason !== "stop" || lines[4].text.includes(".")) { console.error("stop string not applied", lines[4]); process.exit(1); }
' "$TMP/expected.txt" "$TMP/results.jsonl" || fail "batched results"
echo "ok: --prompts-file batch"

# --logprobs N: every result line carries, per generated token, its id, logprob and the top N as
# [id, logprob] pairs (best first); greedy picks the top entry. A line's own "logprobs" overrides.
{
  echo '{"prompt": "Once upon a time", "max_tokens": 12}'
  echo '{"prompt_token_ids": [1, 403], "max_tokens": 7, "logprobs": 2}'
} > "$TMP/lp.jsonl"
"$BIN" generate --model "$MODEL" --prompts-file "$TMP/lp.jsonl" --temperature 0 --logprobs 5 --ignore-eos \
  --output "$TMP/lp_results.jsonl" 2> "$TMP/err_lp.txt" || { cat "$TMP/err_lp.txt" >&2; fail "generate --logprobs"; }
node -e '
const fs = require("fs");
const lines = fs.readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse);
const want = [[12, 5], [7, 2]];
lines.forEach((r, i) => {
  const [n, k] = want[i];
  if (r.token_ids.length !== n || !Array.isArray(r.logprobs) || r.logprobs.length !== n) throw new Error("line " + i + ": lengths");
  let sum = 0;
  r.logprobs.forEach((lp, t) => {
    if (lp.token_id !== r.token_ids[t] || lp.top.length !== k) throw new Error("line " + i + " step " + t + ": ids/top");
    if (lp.top[0][0] !== lp.token_id || Math.abs(lp.top[0][1] - lp.logprob) > 1e-6) throw new Error("greedy is not top-1");
    for (let j = 1; j < k; j++) if (!(lp.top[j][1] <= lp.top[j - 1][1])) throw new Error("top not sorted");
    if (!(lp.logprob <= 0)) throw new Error("logprob > 0");
    sum += lp.logprob;
  });
  if (Math.abs(sum - r.cumulative_logprob) > 1e-3) throw new Error("cumulative_logprob");
});
' "$TMP/lp_results.jsonl" || fail "logprobs in --prompts-file results"
echo "ok: --logprobs"

# Structured-output fields per line (as the server takes them); a bad spec names its line.
{
  echo '{"prompt": "Hi", "max_tokens": 16, "guided_choice": ["yes", "no"]}'
  echo '{"prompt": "Tom", "max_tokens": 16, "temperature": 1, "seed": 2, "structured_outputs": {"regex": "[a-z]{2,5} [0-9]{2}"}}'
  echo '{"prompt": "A", "max_tokens": 80, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}, "s": {"type": "string", "maxLength": 5}}, "required": ["n", "s"]}}}}'
} > "$TMP/so.jsonl"
"$BIN" generate --model "$MODEL" --prompts-file "$TMP/so.jsonl" --output "$TMP/so_results.jsonl" 2> "$TMP/err_so.txt" \
  || { cat "$TMP/err_so.txt" >&2; fail "generate with structured outputs"; }
node -e '
const fs = require("fs");
const r = fs.readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse);
if (!["yes", "no"].includes(r[0].text)) throw new Error("choice: " + r[0].text);
if (!/^[a-z]{2,5} [0-9]{2}$/.test(r[1].text)) throw new Error("regex: " + r[1].text);
const j = JSON.parse(r[2].text);
if (!Number.isInteger(j.n) || j.n < 0 || j.n > 9 || typeof j.s !== "string" || j.s.length > 5) throw new Error("schema: " + r[2].text);
' "$TMP/so_results.jsonl" || fail "structured outputs in --prompts-file results"
echo '{"prompt": "x", "guided_regex": "(a"}' > "$TMP/so_bad.jsonl"
if "$BIN" generate --model "$MODEL" --prompts-file "$TMP/so_bad.jsonl" 2> "$TMP/err_so_bad.txt" >/dev/null; then
  fail "a bad regex was accepted"
fi
grep -q "so_bad.jsonl:1: regex: missing ')'" "$TMP/err_so_bad.txt" || { cat "$TMP/err_so_bad.txt" >&2; fail "bad regex error"; }
echo "ok: structured outputs per --prompts-file line"

# Errors are one line on stderr with a non-zero exit.
if "$BIN" generate --model "$MODEL" --prompt "x" --temperature -1 2> "$TMP/err3.txt" >/dev/null; then
  fail "negative temperature accepted"
fi
[ "$(wc -l < "$TMP/err3.txt")" -le 2 ] && grep -q "temperature" "$TMP/err3.txt" || { cat "$TMP/err3.txt" >&2; fail "bad error for temperature"; }
echo '{"prompt": 5}' > "$TMP/bad.jsonl"
if "$BIN" generate --model "$MODEL" --prompts-file "$TMP/bad.jsonl" 2> "$TMP/err4.txt" >/dev/null; then
  fail "bad prompts file accepted"
fi
grep -q "bad.jsonl:1" "$TMP/err4.txt" || { cat "$TMP/err4.txt" >&2; fail "error does not name file:line"; }
if "$BIN" generate --model "$MODEL" --prompt "x" --max-tokens 600 2> "$TMP/err5.txt" >/dev/null; then
  fail "request beyond max_model_len accepted"
fi
grep -q "max_model_len" "$TMP/err5.txt" || { cat "$TMP/err5.txt" >&2; fail "bad error for max_model_len"; }
echo "ok: errors"

# No --model: the demo model, with a banner on stderr, still prints something.
"$BIN" generate --prompt "hi" --max-tokens 8 --temperature 0 > "$TMP/demo.txt" 2> "$TMP/demo_err.txt" \
  || { cat "$TMP/demo_err.txt" >&2; fail "demo generate failed"; }
grep -q "demo model" "$TMP/demo_err.txt" || fail "no demo banner"
echo "ok: demo model"

# bench throughput runs and reports like vllm bench throughput.
"$BIN" bench throughput --model "$MODEL" --num-prompts 8 --input-len 16 --output-len 8 \
  --output-json "$TMP/bench.json" > "$TMP/bench.txt" 2>/dev/null || fail "bench throughput failed"
grep -q "^Throughput: .* requests/s, .* total tokens/s, .* output tokens/s" "$TMP/bench.txt" || fail "bench output"
grep -q '"num_output_tokens": 64' "$TMP/bench.json" || fail "bench json"
# 8 sequences of 24 tokens in 16-token blocks: 2 blocks each at most.
grep -qE "^Peak KV cache use: ([1-9]|1[0-6]) of [0-9]+ blocks" "$TMP/bench.txt" || fail "bench peak KV use"
# ... and ends with the run's lower bound from the ceilings it measured (here the CPU's).
grep -q "^Ceilings (CPU: .*): copy .* GB/s, GEMM .* TFLOP/s" "$TMP/bench.txt" || fail "bench ceilings"
grep -q "^Lower bound: .* s = prefill .* + decode .*; this run took .*x the bound" "$TMP/bench.txt" ||
  fail "bench bound"
python3 -c 'import json, sys; b = json.load(open(sys.argv[1]))["lower_bound"]
assert b["seconds"] > 0 and b["decode_steps"] == 7 and b["elapsed_over_bound"] > 0, b' \
  "$TMP/bench.json" || fail "bench json bound"
"$BIN" bench throughput --model "$MODEL" --num-prompts 2 --input-len 8 --output-len 4 --no-bound \
  > "$TMP/bench2.txt" 2>/dev/null || fail "bench --no-bound failed"
grep -q "^Lower bound: not computed (--no-bound)" "$TMP/bench2.txt" || fail "bench --no-bound"
"$BIN" bench ceilings --device cpu | grep -q "^Ceilings (CPU: .*): copy .* GB/s" || fail "bench ceilings"
"$BIN" bench ceilings --device tpu 2> "$TMP/ceil_err.txt" && fail "bench ceilings took a bad device"
grep -q "expected auto, cpu or cuda" "$TMP/ceil_err.txt" || fail "bench ceilings error"
echo "ok: bench throughput"

# bench latency: one batch to completion, timed as vllm bench latency times it.
"$BIN" bench latency --model "$MODEL" --batch-size 4 --input-len 16 --output-len 8 \
  --num-iters-warmup 1 --num-iters 3 --output-json "$TMP/lat.json" > "$TMP/lat.txt" 2>/dev/null ||
  fail "bench latency failed"
grep -q "^Avg latency: [0-9.]* seconds$" "$TMP/lat.txt" || fail "bench latency output"
grep -q "^99% percentile latency: [0-9.]* seconds$" "$TMP/lat.txt" || fail "bench latency p99"
python3 -c 'import json, sys; j = json.load(open(sys.argv[1]))
assert len(j["latencies"]) == 3 and j["avg_latency"] > 0, j
assert sorted(j["percentiles"]) == ["10", "25", "50", "75", "90", "99"], j' "$TMP/lat.json" ||
  fail "bench latency json"
"$BIN" bench latency --model "$MODEL" --input-len 500 --output-len 100 --max-model-len 512 \
  --num-iters-warmup 0 --num-iters 1 2> "$TMP/lat_err.txt" && fail "bench latency took a batch too long"
grep -q "exceeds the model's max_model_len (512)" "$TMP/lat_err.txt" || fail "bench latency length error"
[ "$(grep -vc "^INFO" "$TMP/lat_err.txt")" = 1 ] || fail "bench latency error is not one line"
"$BIN" bench latency --model "$MODEL" --profile 2> "$TMP/lat_err.txt" && fail "bench latency --profile"
grep -q "not supported" "$TMP/lat_err.txt" || fail "bench latency --profile error"
echo "ok: bench latency"
echo "generate_test: all passed"
