#!/usr/bin/env bash
# HTTPS (issue 19): `pagellm serve --ssl-certfile --ssl-keyfile` with a self-signed certificate made
# here; the official openai client (trusting that certificate) completes and streams, curl checks the
# certificate, plain HTTP to the TLS port gets no answer, and bad TLS files fail with one line
# before the model loads.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${PAGELLM_BIN:-build/pagellm}
MODEL=${PAGELLM_SHARED_DIR:-../shared}/models/stories260K
source tests/e2e/lib.sh
e2e_init

openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=127.0.0.1" \
  -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" \
  -keyout "$TMP/key.pem" -out "$TMP/cert.pem" 2> "$TMP/openssl.log" || { cat "$TMP/openssl.log" >&2; fail "openssl"; }
"$BIN" serve "$MODEL" --port "$PORT" --ssl-certfile "$TMP/cert.pem" --ssl-keyfile "$TMP/key.pem" \
  > "$TMP/serve.log" 2>&1 &
PID=$!
wait_health "https://127.0.0.1:$PORT/health" "$TMP/serve.log" --cacert "$TMP/cert.pem"
curl -sf --cacert "$TMP/cert.pem" "https://127.0.0.1:$PORT/v1/models" | grep -q stories260K \
  || fail "no model list over https"
grep -q "on https://" "$TMP/serve.log" || fail "the log does not say https"
if curl -sf --max-time 5 "https://127.0.0.1:$PORT/health" > /dev/null 2>&1; then
  fail "curl accepted the self-signed certificate without --cacert"
fi
if curl -sf --max-time 5 "http://127.0.0.1:$PORT/health" > /dev/null 2>&1; then
  fail "plain HTTP was answered on the TLS port"
fi
NODE_EXTRA_CA_CERTS="$TMP/cert.pem" node tests/e2e/tls_client.mjs "https://127.0.0.1:$PORT/v1" \
  || fail "openai client over TLS"
curl -sf --cacert "$TMP/cert.pem" "https://127.0.0.1:$PORT/health" > /dev/null || fail "server gone after plain HTTP"
kill "$PID" && wait "$PID" 2>/dev/null || true
PID=

# Bad TLS files: one line, before the model loads.
bad() {  # NAME PATTERN FLAGS...
  local name=$1 pattern=$2; shift 2
  if "$BIN" serve "$MODEL" --port "$PORT" "$@" > "$TMP/$name.txt" 2>&1; then fail "$name: exit 0"; fi
  grep -qE "$pattern" "$TMP/$name.txt" || { cat "$TMP/$name.txt" >&2; fail "$name: no /$pattern/"; }
  grep -q "loaded" "$TMP/$name.txt" && fail "$name: the model loaded before the TLS check"
  echo "ok: $name: $(grep -E "$pattern" "$TMP/$name.txt")"
}
bad missing-key "needs both --ssl-certfile and --ssl-keyfile" --ssl-certfile "$TMP/cert.pem"
bad no-such-cert "ssl-certfile .*nope.pem: no such file" --ssl-certfile "$TMP/nope.pem" --ssl-keyfile "$TMP/key.pem"
openssl genrsa -out "$TMP/other.pem" 2048 2> /dev/null
bad wrong-key "does not belong to the certificate|ssl-keyfile" --ssl-certfile "$TMP/cert.pem" --ssl-keyfile "$TMP/other.pem"
echo "tls_test: all passed"
