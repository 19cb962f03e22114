# Helpers of the quantized-checkpoint end-to-end tests (fp8_formats_test.sh, int_formats_test.sh),
# sourced from the repository root: the binary, Python (with numpy), the shared pycode-25M, a
# temporary folder removed on exit (kept with PAGELLM_KEEP_TMP), fail, gen and expect_broken.
BIN=${PAGELLM_BIN:-build/pagellm}
PY=${PYTHON:-/usr/bin/python3}
SHARED=${PAGELLM_SHARED_DIR:-../shared}
MODEL=$SHARED/models/pycode-25M
TMP=$(mktemp -d)
[ -n "${PAGELLM_KEEP_TMP:-}" ] && echo "keeping $TMP" || trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
"$PY" -c "import numpy" 2>/dev/null || fail "$PY has no numpy (scripts/setup.sh installs python3-numpy)"
[ -f "$MODEL/config.json" ] || fail "no $MODEL"

# gen NAME PROMPTS [flags...]: `pagellm generate --device cpu` over a prompts file into
# $TMP/res_NAME.jsonl (its log in $TMP/err_NAME.txt).
gen() {
  local name=$1 prompts=$2; shift 2
  "$BIN" generate --device cpu --prompts-file "$prompts" --output "$TMP/res_$name.jsonl" "$@" \
    2> "$TMP/err_$name.txt" || { tail -5 "$TMP/err_$name.txt" >&2; fail "generate ($name) exited non-zero"; }
}

# expect_broken TOOL KIND PATTERN SOURCE_DIR: TOOL (tests/tools/*_e2e.py) breaks a copy of
# SOURCE_DIR the KIND way; generate must exit non-zero with one error line matching PATTERN.
expect_broken() {
  local tool=$1 kind=$2 pattern=$3 src=$4
  local err=$TMP/err_broken_$kind.txt
  "$PY" "$tool" broken "$src" "$TMP/broken_$kind" "$kind"
  if "$BIN" generate --device cpu --model "$TMP/broken_$kind" --prompt "def f():" --max-tokens 4 \
      > /dev/null 2> "$err"; then
    fail "$kind: generate exited 0"
  fi
  local errs
  errs=$(grep -civ "\bINFO\b" "$err" || true)
  [ "$errs" -eq 1 ] || { cat "$err" >&2; fail "$kind: expected one error line, got $errs"; }
  grep -v "\bINFO\b" "$err" | grep -qiE "$pattern" \
    || { cat "$err" >&2; fail "$kind: error does not match /$pattern/"; }
  echo "ok: $kind: $(grep -v '\bINFO\b' "$err")"
  rm -rf "$TMP/broken_$kind"
}
