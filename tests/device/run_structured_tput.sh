#!/usr/bin/env bash
# What structured outputs cost on the GPU (issue 14's throughput target). `bench throughput` runs
# at Llama-3.1-8B shapes (--load-format dummy, the Llama 3 tokenizer, 128k vocabulary): 256
# requests of random 128-token prompts with 128 output tokens each, at most 64 running. The same
# requests run unconstrained, then with a JSON schema on every request. The schema asks for a
# string of at least 4096 characters, so no request finishes early and both runs generate the same
# number of tokens. Each variant runs twice, interleaved. $SCHEMA (JSON) replaces that schema, and
# $REPS the number of rounds. PAGELLM_PHASE_TIMES=1 adds each run's phase table (where the engine
# loop's time went) to the summary.
# usage: bash run_structured_tput.sh BUNDLE   (BUNDLE: pagellm.xz, llama31-8b/ config + tokenizer.json.xz)
set -uo pipefail
SRC=$(cd "${1:?usage: run_structured_tput.sh BUNDLE}" && pwd)
OUTDIR=${OUT:-./device-logs}
B=/tmp/pagellm-structured-tput
rm -rf "$B" && cp -r "$SRC" "$B" && find "$B" -name "*.xz" -exec xz -d -f {} + && chmod +x "$B/pagellm"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
mkdir -p "$OUTDIR"
SUMMARY=$OUTDIR/summary.txt
: > "$SUMMARY"
say() { echo "[${SECONDS}s] $*" | tee -a "$SUMMARY"; }
say "structured throughput: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader) $(date -u +%FT%TZ)"
python3 - "$B" <<'PY'
import json, random, sys
rng = random.Random(7)
import os
schema = json.loads(os.environ.get("SCHEMA") or
                    '{"type": "object", "properties": {"text": {"type": "string", "minLength": 4096}}, "required": ["text"]}')
with open(sys.argv[1] + "/free.jsonl", "w") as f, open(sys.argv[1] + "/schema.jsonl", "w") as g:
    for _ in range(256):
        ids = [rng.randrange(10, 128000) for _ in range(128)]
        f.write(json.dumps({"prompt_token_ids": ids}) + "\n")
        g.write(json.dumps({"prompt_token_ids": ids, "guided_json": schema}) + "\n")
PY
for rep in $(seq 1 ${REPS:-2}); do
  for kind in free schema; do
    timeout 150 "$B/pagellm" bench throughput --model "$B/llama31-8b" --load-format dummy --device cuda \
      --dataset "$B/$kind.jsonl" --num-prompts 256 --output-len 128 --max-num-seqs 64 --max-model-len 1024 --no-bound \
      > "$OUTDIR/tput_${kind}_$rep.log" 2>&1
    say "$kind #$rep (exit $?): $(grep -E 'Throughput|output tokens' "$OUTDIR/tput_${kind}_$rep.log" | tr '\n' ' ')"
    sed -n '/^phase times/,$p' "$OUTDIR/tput_${kind}_$rep.log" | tee -a "$SUMMARY"
  done
done
