#!/usr/bin/env bash
# `pagellm generate` with --speculative-config on the CPU: greedy text identical to the run without
# speculation (draft model pycode-draft-10M, the EAGLE head tests/data/pycode-25M-eagle and n-gram
# on pycode-25M, n-gram on stories260K; one
# prompt and a batched --prompts-file), acceptance counters logged, and bad configs refused with a
# one-line error.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/e2e/lib.sh
BIN=${PAGELLM_BIN:-build/pagellm}
MODELS=${PAGELLM_SHARED_DIR:-../shared}/models
PYCODE=$MODELS/pycode-25M
DRAFT=$MODELS/pycode-draft-10M
STORIES=$MODELS/stories260K
e2e_init

DRAFT_CFG='{"method": "draft_model", "model": "'$DRAFT'", "num_speculative_tokens": 4}'
EAGLE_CFG='{"method": "eagle", "model": "tests/data/pycode-25M-eagle", "num_speculative_tokens": 4}'
NGRAM_CFG='{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4}'

# same MODEL PROMPT CONFIG: the greedy text with CONFIG equals the one without.
same() {
  local model=$1 prompt=$2 cfg=$3
  "$BIN" generate --model "$model" --prompt "$prompt" --temperature 0 --max-tokens 96 --ignore-eos \
    > "$TMP/plain.txt" 2> "$TMP/plain.err" || { cat "$TMP/plain.err" >&2; fail "generate without speculation"; }
  "$BIN" generate --model "$model" --prompt "$prompt" --temperature 0 --max-tokens 96 --ignore-eos \
    --speculative-config "$cfg" > "$TMP/spec.txt" 2> "$TMP/spec.err" \
    || { cat "$TMP/spec.err" >&2; fail "generate with $cfg"; }
  diff "$TMP/plain.txt" "$TMP/spec.txt" > "$TMP/diff.txt" || { cat "$TMP/diff.txt" >&2; fail "text differs with $cfg"; }
  grep -q "speculative decoding: [0-9]* drafts" "$TMP/spec.err" || { cat "$TMP/spec.err" >&2; fail "no acceptance line"; }
  grep -q "speculative decoding" "$TMP/plain.err" && fail "speculation without --speculative-config"
  grep "speculative decoding: [0-9]* drafts" "$TMP/spec.err" | sed 's/^.*speculative decoding/  speculative decoding/'
}

same "$PYCODE" $'def parse_args(argv):\n' "$DRAFT_CFG"
echo "ok: draft model, pycode-25M"
same "$PYCODE" $'class Config:\n    def __init__(self, path):\n' "$EAGLE_CFG"
echo "ok: EAGLE head, pycode-25M"
same "$PYCODE" $'import os\nimport sys\n\n\ndef main():\n' "$NGRAM_CFG"
echo "ok: n-gram, pycode-25M"
same "$STORIES" "Once upon a time, Lily saw a big tree." \
  '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 3}'
echo "ok: n-gram, stories260K"

# A batch through --prompts-file, with stop strings and per-line max_tokens.
{
  echo '{"prompt": "class Config:\n    def __init__(self, path):\n", "max_tokens": 64}'
  echo '{"prompt": "def read_file(path):\n", "max_tokens": 40, "stop": ["return"]}'
  echo '{"prompt": "for i in range(10):\n", "max_tokens": 7}'
  echo '{"prompt": "import os\n", "max_tokens": 50, "stop": ["\n\n"]}'
} > "$TMP/prompts.jsonl"
"$BIN" generate --model "$PYCODE" --prompts-file "$TMP/prompts.jsonl" --temperature 0 \
  --output "$TMP/plain.jsonl" 2> "$TMP/batch_plain.err" || { cat "$TMP/batch_plain.err" >&2; fail "batch"; }
for cfg in "$DRAFT_CFG" "$EAGLE_CFG" "$NGRAM_CFG"; do
  "$BIN" generate --model "$PYCODE" --prompts-file "$TMP/prompts.jsonl" --temperature 0 \
    --speculative-config "$cfg" --output "$TMP/spec.jsonl" 2> "$TMP/batch_spec.err" \
    || { cat "$TMP/batch_spec.err" >&2; fail "batch with $cfg"; }
  cmp -s "$TMP/plain.jsonl" "$TMP/spec.jsonl" || { diff "$TMP/plain.jsonl" "$TMP/spec.jsonl" >&2; fail "batch differs with $cfg"; }
done
echo "ok: --prompts-file batch with stop strings"

# Bad configs: one line on stderr, a non-zero exit, no output.
bad() {
  local cfg=$1 want=$2
  if "$BIN" generate --model "$PYCODE" --prompt "x" --max-tokens 4 --speculative-config "$cfg" \
    > "$TMP/bad.out" 2> "$TMP/bad.err"; then
    fail "accepted $cfg"
  fi
  grep -q -- "$want" "$TMP/bad.err" || { cat "$TMP/bad.err" >&2; fail "expected '$want' for $cfg"; }
  [ "$(grep -c . "$TMP/bad.err")" -le 2 ] || { cat "$TMP/bad.err" >&2; fail "more than a one-line error for $cfg"; }
}
bad '{"method": "ngram", "num_speculative_tokens": 0}' "num_speculative_tokens must be in \[1, 16\]"
bad '{"method": "eagle9", "num_speculative_tokens": 2}' "unknown method 'eagle9'"
bad '{"method": "draft_model", "model": "'$STORIES'", "num_speculative_tokens": 2}' "vocab_size 512 but the target has 32000"
bad '{"method": "eagle", "model": "'$DRAFT'", "num_speculative_tokens": 2}' "has no tensor fc.weight: not an EAGLE head"
bad '{"method": "eagle3", "model": "x", "num_speculative_tokens": 2}' "eagle3 is not available yet"
bad 'not json' "expected a JSON object"
echo "ok: bad configs refused"
