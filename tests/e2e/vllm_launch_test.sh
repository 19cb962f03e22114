#!/usr/bin/env bash
# A vLLM user's launch line starts pagellm unchanged apart from the program name (issue 19): the
# model as a positional argument, --trust-remote-code and the other flags vLLM scripts carry; flags
# that only vLLM's Python runtime understands are refused naming the flag and why.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${PAGELLM_BIN:-build/pagellm}
MODEL=${PAGELLM_SHARED_DIR:-../shared}/models/stories260K
source tests/e2e/lib.sh
e2e_init

"$BIN" serve "$MODEL" --trust-remote-code --served-model-name x --max-model-len 512 \
  --gpu-memory-utilization 0.9 --enable-prefix-caching --disable-log-requests --disable-log-stats \
  --port "$PORT" > "$TMP/serve.log" 2>&1 &
PID=$!
wait_health "http://127.0.0.1:$PORT/health" "$TMP/serve.log"
curl -sf "http://127.0.0.1:$PORT/v1/models" | grep -q '"id":"x"' || fail "/v1/models does not list 'x'"
curl -sf "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
  -d '{"model": "x", "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}' |
  grep -q '"text"' || fail "no completion"
grep -q "trust-remote-code: accepted" "$TMP/serve.log" || fail "--trust-remote-code not logged"
# vLLM's metric names, moving in step with pagellm's own.
curl -sf "http://127.0.0.1:$PORT/metrics" > "$TMP/metrics.txt"
for name in num_requests_running num_requests_waiting kv_cache_usage_perc gpu_cache_usage_perc \
    prompt_tokens_total generation_tokens_total request_success_total time_to_first_token_seconds_count \
    inter_token_latency_seconds_count time_per_output_token_seconds_count e2e_request_latency_seconds_count \
    request_prompt_tokens_count request_generation_tokens_count prefix_cache_queries_total \
    prefix_cache_hits_total num_preemptions_total cache_config_info; do
  grep -q "^vllm:$name{" "$TMP/metrics.txt" || fail "/metrics has no vllm:$name"
done
gen_vllm=$(grep '^vllm:generation_tokens_total{model_name="x"}' "$TMP/metrics.txt" | awk '{print $2}')
gen_ours=$(grep '^pagellm:generation_tokens_total{model_name="x"}' "$TMP/metrics.txt" | awk '{print $2}')
[ "$gen_vllm" = "$gen_ours" ] && [ "$gen_vllm" != 0 ] || fail "vllm:generation_tokens_total $gen_vllm vs ours $gen_ours"
# `pagellm complete` as an interactive client (like `vllm complete`): --quick, and lines from stdin.
"$BIN" complete --url "http://127.0.0.1:$PORT/v1" --quick "Once upon a time" --max-tokens 8 > "$TMP/c1.txt" ||
  fail "complete --quick failed"
[ -s "$TMP/c1.txt" ] || fail "complete --quick printed nothing"
printf 'Once upon a time\nThe dog\n' | "$BIN" complete --url "http://127.0.0.1:$PORT/v1" --max-tokens 4 \
  > "$TMP/c2.txt" || fail "complete from stdin failed"
if "$BIN" chat --url "http://127.0.0.1:$PORT/v1" --quick "Hi" > "$TMP/c3.txt" 2>&1; then
  fail "chat without a chat template succeeded"
fi
grep -q "400.*chat template" "$TMP/c3.txt" || { cat "$TMP/c3.txt" >&2; fail "chat error not shown"; }
if "$BIN" complete --url "http://127.0.0.1:1/v1" --quick x > "$TMP/c4.txt" 2>&1; then fail "unreachable server"; fi
grep -q "cannot reach" "$TMP/c4.txt" || fail "no error for an unreachable server"
echo "ok: pagellm complete / chat clients"
# CORS (vLLM's default: every origin): a browser's preflight, then the real request.
curl -s -i -X OPTIONS "http://127.0.0.1:$PORT/v1/completions" -H 'Origin: http://localhost:5173' \
  -H 'Access-Control-Request-Method: POST' -H 'Access-Control-Request-Headers: content-type' > "$TMP/pre.txt"
grep -q "^HTTP/1.1 200" "$TMP/pre.txt" || { cat "$TMP/pre.txt" >&2; fail "preflight not answered 200"; }
grep -qi "^access-control-allow-origin: \*" "$TMP/pre.txt" || fail "preflight without Allow-Origin"
grep -qi "^access-control-allow-headers: content-type" "$TMP/pre.txt" || fail "preflight without Allow-Headers"
curl -s -i "http://127.0.0.1:$PORT/v1/models" -H 'Origin: http://localhost:5173' > "$TMP/get.txt"
grep -qi "^access-control-allow-origin: \*" "$TMP/get.txt" || fail "response without Allow-Origin"
kill "$PID" && wait "$PID" 2>/dev/null || true
PID=
echo "ok: vLLM launch line serves stories260K; CORS preflight answered"

# A restricted origin list: others get no Allow-Origin and their preflight is refused.
"$BIN" serve "$MODEL" --port "$PORT" --allowed-origins '["http://app.example"]' --allow-credentials \
  > "$TMP/serve2.log" 2>&1 &
PID=$!
wait_health "http://127.0.0.1:$PORT/health" "$TMP/serve2.log"
curl -s -i -X OPTIONS "http://127.0.0.1:$PORT/v1/models" -H 'Origin: http://evil.example' \
  -H 'Access-Control-Request-Method: GET' > "$TMP/pre2.txt"
grep -q "^HTTP/1.1 400" "$TMP/pre2.txt" || { cat "$TMP/pre2.txt" >&2; fail "foreign preflight not refused"; }
curl -s -i "http://127.0.0.1:$PORT/v1/models" -H 'Origin: http://app.example' > "$TMP/get2.txt"
grep -qi "^access-control-allow-origin: http://app.example" "$TMP/get2.txt" || fail "listed origin not echoed"
grep -qi "^access-control-allow-credentials: true" "$TMP/get2.txt" || fail "no Allow-Credentials"
kill "$PID" && wait "$PID" 2>/dev/null || true
PID=
# Server flags with vLLM's names: a proxy prefix, the reply role, the logprobs cap, generation config.
"$BIN" serve "$MODEL" --port "$PORT" --root-path /llm --response-role bot --max-logprobs 3 \
  --generation-config vllm --override-generation-config '{"max_new_tokens": 5}' \
  --chat-template '{% for m in messages %}{{ m.content }}{% endfor %}' --return-tokens-as-token-ids \
  > "$TMP/serve3.log" 2>&1 &
PID=$!
wait_health "http://127.0.0.1:$PORT/llm/health" "$TMP/serve3.log"
curl -sf "http://127.0.0.1:$PORT/llm/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"messages": [{"role": "user", "content": "Hi"}], "temperature": 0}' > "$TMP/chat.json" ||
  fail "chat under --root-path failed"
grep -q '"role":"bot"' "$TMP/chat.json" || fail "--response-role not used: $(cat "$TMP/chat.json")"
grep -q '"completion_tokens":5' "$TMP/chat.json" || fail "--override-generation-config max_new_tokens not used"
code=$(curl -s -o "$TMP/lp.json" -w '%{http_code}' "http://127.0.0.1:$PORT/v1/completions" \
  -H 'Content-Type: application/json' -d '{"prompt": "a", "max_tokens": 2, "logprobs": 5}')
[ "$code" = 400 ] || fail "logprobs above --max-logprobs answered $code"
curl -sf "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "Once", "max_tokens": 2, "logprobs": 2}' | grep -q '"token_id:[0-9]*"' ||
  fail "--return-tokens-as-token-ids: no token_id:N in logprobs"
printf 'Hi\nAnd again\n' | "$BIN" chat --url "http://127.0.0.1:$PORT/llm/v1" --system-prompt "Be brief" \
  > "$TMP/chat2.txt" || fail "chat over two turns failed"
kill "$PID" && wait "$PID" 2>/dev/null || true
PID=
echo "ok: --root-path, --response-role, --max-logprobs, --generation-config / --override-generation-config"
if "$BIN" serve "$MODEL" --max-logprobs 50 > "$TMP/out4.txt" 2>&1; then fail "--max-logprobs 50 accepted"; fi
grep -q "max-logprobs 50" "$TMP/out4.txt" || fail "no error for --max-logprobs 50"
if "$BIN" serve "$MODEL" --allowed-origins '[1]' > "$TMP/out3.txt" 2>&1; then fail "bad --allowed-origins accepted"; fi
if "$BIN" serve "$MODEL" --kv-cache-dtype int8 > "$TMP/out5.txt" 2>&1; then fail "--kv-cache-dtype int8 accepted"; fi
grep -q "expected auto, fp8, fp8_e4m3 or fp8_e5m2" "$TMP/out5.txt" || fail "no reason for --kv-cache-dtype int8"
grep -q "allowed-origins" "$TMP/out3.txt" || fail "no error for a bad --allowed-origins"
echo "ok: CORS origin list enforced"

# Refused: a vLLM runtime flag, and the model given twice.
if "$BIN" serve "$MODEL" --distributed-executor-backend ray > "$TMP/out.txt" 2>&1; then
  fail "--distributed-executor-backend accepted"
fi
grep -q "distributed-executor-backend is a vLLM flag pagellm does not take" "$TMP/out.txt" ||
  { cat "$TMP/out.txt" >&2; fail "no reason for the refused flag"; }
if "$BIN" serve "$MODEL" --model /elsewhere > "$TMP/out2.txt" 2>&1; then fail "two models accepted"; fi
grep -q "the model is given twice" "$TMP/out2.txt" || { cat "$TMP/out2.txt" >&2; fail "no error for two models"; }
echo "ok: vLLM-only flags and a doubled model are refused with one line"
