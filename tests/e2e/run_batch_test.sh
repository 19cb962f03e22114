#!/usr/bin/env bash
# `pagellm run-batch` end to end on stories260K, as `vllm run-batch` is used: a JSONL batch of
# completions, chat completions (with a chat template) and embeddings (--runner pooling) runs
# through the server's routes offline; the results come back in the file's order with vLLM's
# output shape, greedy texts equal `pagellm generate`'s, requests the batch runner cannot serve
# (streams, other endpoints, another model) get their error in their line, and a malformed file
# or output place fails in one line before the model loads.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${PAGELLM_BIN:-build/pagellm}
MODEL=${PAGELLM_SHARED_DIR:-../shared}/models/stories260K
. tests/e2e/lib.sh
e2e_init

line() {  # ID URL BODY
  printf '{"custom_id": "%s", "method": "POST", "url": "%s", "body": %s}\n' "$1" "$2" "$3"
}
{
  line c1 /v1/completions '{"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0}'
  line chat /v1/chat/completions '{"messages": [{"role": "user", "content": "Tell me a story"}], "max_tokens": 6, "temperature": 0}'
  echo
  line stream /v1/completions '{"prompt": "x", "stream": true}'
  line models /v1/models '{}'
  line other /v1/completions '{"prompt": "x", "model": "not-this-one"}'
  line c2 /v1/completions '{"prompt": "The little dog", "max_tokens": 12, "temperature": 0, "model": "stories260K"}'
} > "$TMP/in.jsonl"
"$BIN" run-batch -i "$TMP/in.jsonl" -o "$TMP/out.jsonl" --model "$MODEL" \
  --chat-template tests/data/chat_templates/llama2.jinja 2> "$TMP/err.txt" ||
  { cat "$TMP/err.txt" >&2; fail "run-batch exited non-zero"; }
grep -q "run-batch: 3 of 6 requests succeeded" "$TMP/err.txt" || fail "summary line"
"$BIN" generate --model "$MODEL" --prompt "Once upon a time" --temperature 0 --max-tokens 12 \
  > "$TMP/gen1.txt" 2>/dev/null
"$BIN" generate --model "$MODEL" --prompt "The little dog" --temperature 0 --max-tokens 12 \
  > "$TMP/gen2.txt" 2>/dev/null
python3 - "$TMP/out.jsonl" "$TMP/gen1.txt" "$TMP/gen2.txt" <<'PY' || fail "run-batch results"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert [l["custom_id"] for l in lines] == ["c1", "chat", "stream", "models", "other", "c2"], lines
status = {l["custom_id"]: l["response"]["status_code"] for l in lines}
assert status == {"c1": 200, "chat": 200, "stream": 400, "models": 400, "other": 404, "c2": 200}, status
by = {l["custom_id"]: l for l in lines}
for l in lines:
    assert l["id"].startswith("vllm-") and l["response"]["request_id"].startswith("vllm-batch-"), l
    assert (l["error"] is None) == (l["response"]["status_code"] == 200), l
want = [open(f).read().removesuffix("\n") for f in sys.argv[2:]]
assert by["c1"]["response"]["body"]["choices"][0]["text"] == want[0], (by["c1"], want)
assert by["c2"]["response"]["body"]["choices"][0]["text"] == want[1], (by["c2"], want)
assert by["c1"]["response"]["body"]["usage"]["completion_tokens"] == 12
assert by["chat"]["response"]["body"]["choices"][0]["message"]["role"] == "assistant"
assert by["stream"]["error"] == "Request must not be sent in stream mode"
assert "/v1/models" in by["models"]["error"]
assert by["other"]["error"]["error"]["code"] == "model_not_found", by["other"]
PY
echo "ok: completions, chat, refused and failed requests in the file's order"

# Many requests at once come back complete and in order; '-' writes to stdout.
for i in $(seq 1 48); do
  line "r$i" /v1/completions "{\"prompt\": \"Once upon a time\", \"max_tokens\": $((i % 7 + 1)), \"temperature\": 0.8, \"seed\": $i}"
done > "$TMP/many.jsonl"
"$BIN" run-batch -i "$TMP/many.jsonl" -o - --model "$MODEL" > "$TMP/many.out" 2>/dev/null ||
  fail "run-batch of 48 requests"
python3 -c 'import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert [l["custom_id"] for l in lines] == ["r%d" % i for i in range(1, 49)]
for i, l in enumerate(lines, 1):
    assert l["response"]["status_code"] == 200, l
    assert l["response"]["body"]["usage"]["completion_tokens"] == i % 7 + 1, l' "$TMP/many.out" ||
  fail "48 requests"
echo "ok: 48 requests in order, to stdout"

# Embeddings with --runner pooling.
line e1 /v1/embeddings '{"input": ["Once upon a time", "The little dog"]}' > "$TMP/emb.jsonl"
"$BIN" run-batch -i "$TMP/emb.jsonl" -o "$TMP/emb.out" --model "$MODEL" --runner pooling \
  2>/dev/null || fail "run-batch embeddings"
python3 -c 'import json, sys
l = json.loads(open(sys.argv[1]).read())
data = l["response"]["body"]["data"]
assert l["response"]["status_code"] == 200 and len(data) == 2 and len(data[0]["embedding"]) == 64, l' \
  "$TMP/emb.out" || fail "embeddings"
echo "ok: embeddings"

# A malformed file, a missing one and an output folder that does not exist: one line each, before
# the model loads, and no output file.
expect_error() {  # TEXT ARGS...
  local text=$1
  shift
  "$BIN" run-batch "$@" --model "$MODEL" > /dev/null 2> "$TMP/bad.txt" && fail "run-batch took: $*"
  grep -q -- "$text" "$TMP/bad.txt" || { cat "$TMP/bad.txt" >&2; fail "no '$text'"; }
  [ "$(grep -vc "^INFO" "$TMP/bad.txt")" = 1 ] || { cat "$TMP/bad.txt" >&2; fail "not one line"; }
  ! grep -q "loaded stories260K" "$TMP/bad.txt" || fail "the model loaded before the error"
}
{ line a /v1/completions '{"prompt": "x"}'; echo '{"custom_id": "b", "url": 3}'; } > "$TMP/bad.jsonl"
expect_error "bad.jsonl:2: no \"method\" field" -i "$TMP/bad.jsonl" -o "$TMP/x.jsonl"
{ line a /v1/completions '{}'; line a /v1/completions '{}'; } > "$TMP/dup.jsonl"
expect_error "dup.jsonl:2: custom_id 'a' is used by an earlier line" -i "$TMP/dup.jsonl" -o "$TMP/x.jsonl"
expect_error "cannot open" -i "$TMP/missing.jsonl" -o "$TMP/x.jsonl"
expect_error "no folder" -i "$TMP/in.jsonl" -o "$TMP/nowhere/x.jsonl"
[ ! -e "$TMP/x.jsonl" ] || fail "an output file was written for a failed run"
echo "run_batch_test: all passed"
