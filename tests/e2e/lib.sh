# Helpers of the shell end-to-end tests (sourced, never run on its own): a temporary folder removed
# on exit together with the background process in $PID, a random port, fail, and waiting for a
# server to answer.
e2e_init() {
  TMP=$(mktemp -d)
  PID=
  PORT=$((20000 + RANDOM % 20000))
  trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$TMP"' EXIT
}
fail() { echo "FAIL: $*" >&2; exit 1; }
# wait_health URL LOG [curl flags...]: until URL answers 2xx while $PID runs (its LOG shown if not).
wait_health() {
  local url=$1 log=$2
  shift 2
  for _ in $(seq 150); do
    curl -sf "$@" "$url" > /dev/null && return 0
    kill -0 "$PID" 2>/dev/null || { cat "$log" >&2; fail "the server exited"; }
    sleep 0.1
  done
  fail "no answer from $url"
}
