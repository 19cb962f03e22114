#!/usr/bin/env bash
# A vLLM user's launch line starts pagellm unchanged apart from the program name (issue 19): the
# model as a positional argument, --trust-remote-code and the other flags vLLM scripts carry; flags
# that only vLLM's Python runtime understands are refused naming the flag and why.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${PAGELLM_BIN:-build/pagellm}
MODEL=${PAGELLM_SHARED_DIR:-../shared}/models/stories260K
TMP=$(mktemp -d)
PID=
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
PORT=$((20000 + RANDOM % 20000))

"$BIN" serve "$MODEL" --trust-remote-code --served-model-name x --max-model-len 512 \
  --gpu-memory-utilization 0.9 --enable-prefix-caching --disable-log-requests --disable-log-stats \
  --port "$PORT" > "$TMP/serve.log" 2>&1 &
PID=$!
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$PORT/health" > /dev/null && break
  kill -0 "$PID" 2>/dev/null || { cat "$TMP/serve.log" >&2; fail "serve exited"; }
  sleep 0.1
done
curl -sf "http://127.0.0.1:$PORT/v1/models" | grep -q '"id":"x"' || fail "/v1/models does not list 'x'"
curl -sf "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
  -d '{"model": "x", "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}' |
  grep -q '"text"' || fail "no completion"
grep -q "trust-remote-code: accepted" "$TMP/serve.log" || fail "--trust-remote-code not logged"
kill "$PID" && wait "$PID" 2>/dev/null || true
PID=
echo "ok: vLLM launch line serves stories260K"

# Refused: a vLLM runtime flag, and the model given twice.
if "$BIN" serve "$MODEL" --distributed-executor-backend ray > "$TMP/out.txt" 2>&1; then
  fail "--distributed-executor-backend accepted"
fi
grep -q "distributed-executor-backend is a vLLM flag pagellm does not take" "$TMP/out.txt" ||
  { cat "$TMP/out.txt" >&2; fail "no reason for the refused flag"; }
if "$BIN" serve "$MODEL" --model /elsewhere > "$TMP/out2.txt" 2>&1; then fail "two models accepted"; fi
grep -q "the model is given twice" "$TMP/out2.txt" || { cat "$TMP/out2.txt" >&2; fail "no error for two models"; }
echo "ok: vLLM-only flags and a doubled model are refused with one line"
