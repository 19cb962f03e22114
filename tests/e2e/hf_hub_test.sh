#!/usr/bin/env bash
# Hugging Face Hub ids end to end (issue 19), against tests/tools/fake_hub.py on localhost (the
# real Hub is out of reach from CI): `pagellm generate --model ORG/NAME` downloads stories260K into
# a cache laid out as huggingface_hub's (blobs, snapshots/COMMIT symlinks, refs/main), resuming the
# transfers the fake Hub cuts off halfway and never sending the token to the CDN host it redirects
# to; then HF_HUB_OFFLINE=1 runs from the cache alone; a gated repo needs HF_TOKEN (401 otherwise);
# unknown repos (404), a checksum that disagrees with the Hub's and malformed ids fail with one line.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${PAGELLM_BIN:-build/pagellm}
PY=${PYTHON:-/usr/bin/python3}
MODEL=${PAGELLM_SHARED_DIR:-../shared}/models/stories260K
source tests/e2e/lib.sh
e2e_init

"$PY" tests/tools/fake_hub.py "$PORT" "$TMP/hub.log" "test-org/stories=$MODEL" \
  "gated:test-org/gated=$MODEL" "test-org/badsum=$MODEL" > "$TMP/hub.out" 2>&1 &
PID=$!
for _ in $(seq 50); do grep -q ready "$TMP/hub.out" 2>/dev/null && break; sleep 0.1; done
grep -q ready "$TMP/hub.out" || fail "the fake Hub did not start: $(cat "$TMP/hub.out")"
export HF_HOME=$TMP/hf HF_ENDPOINT=http://127.0.0.1:$PORT
unset HF_TOKEN HUGGING_FACE_HUB_TOKEN HF_HUB_OFFLINE HF_HUB_CACHE XDG_CACHE_HOME

gen() {  # NAME ARGS...: generate greedily; output in $TMP/NAME.out, log in $TMP/NAME.err
  local name=$1; shift
  "$BIN" generate --prompt "Once upon a time" --max-tokens 8 --temperature 0 "$@" \
    > "$TMP/$name.out" 2> "$TMP/$name.err"
}
one_error() {  # NAME PATTERN: non-zero exit happened; exactly one non-INFO line, matching
  local errs
  errs=$(grep -cv "INFO" "$TMP/$1.err" || true)
  [ "$errs" -eq 1 ] || { cat "$TMP/$1.err" >&2; fail "$1: expected one error line, got $errs"; }
  grep -v INFO "$TMP/$1.err" | grep -qE "$2" || { cat "$TMP/$1.err" >&2; fail "$1: no /$2/"; }
  echo "ok: $1: $(grep -v INFO "$TMP/$1.err")"
}

gen local --model "$MODEL" || fail "local run"
HF_TOKEN=secret gen hub --model test-org/stories || { cat "$TMP/hub.err" >&2; fail "download run"; }
cmp -s "$TMP/local.out" "$TMP/hub.out" || fail "the downloaded model generates differently"
grep -q "loaded test-org/stories" "$TMP/hub.err" || fail "the model is not named by its Hub id"
REPO=$HF_HOME/hub/models--test-org--stories
SHA=$(cat "$REPO/refs/main")
[[ "$SHA" =~ ^[0-9a-f]{40}$ ]] || fail "refs/main holds '$SHA'"
[ -L "$REPO/snapshots/$SHA/config.json" ] || fail "snapshot files are not symlinks"
[ "$(readlink "$REPO/snapshots/$SHA/model.safetensors")" = "../../blobs/$(sha256sum "$MODEL/model.safetensors" | cut -c1-64)" ] \
  || fail "model.safetensors does not link to its sha256 blob"
[ -z "$(ls "$REPO/blobs" | grep incomplete || true)" ] || fail "an .incomplete file was left"
[ ! -e "$REPO/snapshots/$SHA/pytorch_model.bin" ] || fail "a .bin file was downloaded"
grep -q "GET /cdn/.* range=bytes=" "$TMP/hub.log" || fail "the cut-off transfer was not resumed"
grep -q "LEAK" "$TMP/hub.log" && fail "the token went to the CDN host: $(grep LEAK "$TMP/hub.log")"
grep -q "GET /api/models/test-org/stories/revision/main .*auth=yes" "$TMP/hub.log" \
  || fail "the token was not sent to the Hub itself"
echo "ok: downloaded into a huggingface_hub cache, resumed, token kept from the CDN host"

# The cache alone: offline, and with the Hub gone.
kill "$PID"; wait "$PID" 2>/dev/null || true; PID=
HF_HUB_OFFLINE=1 gen offline --model test-org/stories || { cat "$TMP/offline.err" >&2; fail "offline run"; }
cmp -s "$TMP/local.out" "$TMP/offline.out" || fail "offline output differs"
gen cached --model test-org/stories || { cat "$TMP/cached.err" >&2; fail "cached run without the Hub"; }
if HF_HUB_OFFLINE=1 gen offline-missing --model test-org/other; then fail "offline miss exited 0"; fi
one_error offline-missing "not in the cache .* HF_HUB_OFFLINE"
echo "ok: HF_HUB_OFFLINE=1 and a cached model need no Hub"

"$PY" tests/tools/fake_hub.py "$PORT" "$TMP/hub.log" "test-org/stories=$MODEL" \
  "gated:test-org/gated=$MODEL" "test-org/badsum=$MODEL" "test-org/norange=$MODEL" > "$TMP/hub2.out" 2>&1 &
PID=$!
for _ in $(seq 50); do grep -q ready "$TMP/hub2.out" 2>/dev/null && break; sleep 0.1; done
if gen gated --model test-org/gated; then fail "a gated model downloaded without a token"; fi
one_error gated "denied \(HTTP 401\).*HF_TOKEN"
mkdir -p "$HF_HOME" && echo secret > "$HF_HOME/token"  # huggingface_hub's saved token
gen gated-token --model test-org/gated || { cat "$TMP/gated-token.err" >&2; fail "gated with token"; }
rm "$HF_HOME/token"
gen norange --model test-org/norange || { cat "$TMP/norange.err" >&2; fail "a server ignoring Range"; }
cmp -s "$TMP/local.out" "$TMP/norange.out" || fail "the model resumed from a 200 generates differently"
echo "ok: a resumption answered with the whole file (no Range support) is rewritten, not appended"
if gen missing --model test-org/nothing; then fail "an unknown repo exited 0"; fi
one_error missing "test-org/nothing.*not found.*404"
if gen badrev --model test-org/stories --revision v9; then fail "an unknown revision exited 0"; fi
one_error badrev "revision v9.*404"
if gen badsum --model test-org/badsum; then fail "a checksum mismatch exited 0"; fi
one_error badsum "checksum does not match"
BAD=$(printf other | sha256sum | cut -c1-64)  # the wrong sha256 the fake Hub reports
# Neither the bad blob nor its partial file stays (other files' partial downloads may: they resume).
ls "$HF_HOME/hub/models--test-org--badsum/blobs" | grep -q "$BAD" && fail "a bad blob was kept: $(ls "$HF_HOME/hub/models--test-org--badsum/blobs")"
if gen traversal --model test-org/stories --revision ../../x; then fail "a traversing revision exited 0"; fi
one_error traversal "revision"
if gen badid --model "te st/x"; then fail "a malformed id exited 0"; fi
one_error badid "neither a model folder nor a Hugging Face Hub id"
echo "hf_hub_test: all passed"
