#!/usr/bin/env bash
# CORS from a real browser (issue 19): headless Chromium loads a page served from another origin
# (another localhost port) whose script calls the API with fetch: a JSON POST, so the browser sends
# its own preflight first. The origin the server allows gets the completion; an origin it does not
# allow is blocked by the browser itself.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${PAGELLM_BIN:-build/pagellm}
MODEL=${PAGELLM_SHARED_DIR:-../shared}/models/stories260K
source tests/e2e/lib.sh
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
[ -n "$CHROMIUM" ] || fail "chromium is not installed (scripts/setup.sh installs it)"
e2e_init
PAGE_PORT=$((PORT + 1))
OTHER_PORT=$((PORT + 2))
mkdir -p "$TMP/site" "$TMP/profile"
cat > "$TMP/site/index.html" <<HTML
<!doctype html><html><body><pre id="out">pending</pre><script>
fetch("http://127.0.0.1:$PORT/v1/completions", {
  method: "POST",
  headers: {"Content-Type": "application/json"},
  body: JSON.stringify({model: "stories260K", prompt: "Once upon a time", max_tokens: 8, temperature: 0})
}).then(r => r.json())
  .then(j => { document.getElementById("out").textContent = "completion:" + JSON.stringify(j.choices[0].text); })
  .catch(e => { document.getElementById("out").textContent = "blocked:" + e; });
</script></body></html>
HTML
python3 -m http.server "$PAGE_PORT" --bind 127.0.0.1 --directory "$TMP/site" > "$TMP/page.log" 2>&1 &
PAGE_PID=$!
python3 -m http.server "$OTHER_PORT" --bind 127.0.0.1 --directory "$TMP/site" > "$TMP/other.log" 2>&1 &
OTHER_PID=$!
trap 'kill $PAGE_PID $OTHER_PID 2>/dev/null; [ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$TMP"' EXIT
"$BIN" serve "$MODEL" --port "$PORT" --allowed-origins "[\"http://127.0.0.1:$PAGE_PORT\"]" \
  > "$TMP/serve.log" 2>&1 &
PID=$!
wait_health "http://127.0.0.1:$PORT/health" "$TMP/serve.log"
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$OTHER_PORT/" > /dev/null && break; sleep 0.1; done
# --virtual-time-budget lets the page's fetch finish before the DOM is dumped.
browse() {
  timeout 60 "$CHROMIUM" --headless --no-sandbox --disable-gpu --no-first-run --disable-dev-shm-usage \
    --user-data-dir="$TMP/profile" --virtual-time-budget=15000 --dump-dom "$1" 2> "$TMP/chromium.log"
}
browse "http://127.0.0.1:$PAGE_PORT/index.html" > "$TMP/allowed.html" || { tail -5 "$TMP/chromium.log" >&2; fail "chromium failed"; }
grep -q 'completion:"' "$TMP/allowed.html" || { cat "$TMP/allowed.html" >&2; fail "the allowed origin got no completion"; }
browse "http://127.0.0.1:$OTHER_PORT/index.html" > "$TMP/other.html" || fail "chromium failed"
grep -q 'blocked:' "$TMP/other.html" || { cat "$TMP/other.html" >&2; fail "another origin was not blocked"; }
echo "ok: headless Chromium: the allowed origin's fetch (with its preflight) completes, another origin is blocked"
