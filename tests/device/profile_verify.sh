#!/usr/bin/env bash
# Per-kernel GPU time of the engine's speculative verification steps against plain decode steps
# (issue 13): pycode-25M greedy `generate` at batch 1, plain and n-gram k=4, each under Nsight
# Compute for ~10 steps in the middle of the run. From make_spec_bundle.sh's bundle, with
# pycode-25M already in /tmp/pagellm-keep (run_spec_gpu.sh's first call):
#   bash BUNDLE/profile_verify.sh BUNDLE
set -uo pipefail
SRC=$(cd "${1:?usage: profile_verify.sh BUNDLE}" && pwd)
. "$SRC/unpack_bundle.sh"
P=$B/pagellm
T=/tmp/pagellm-keep/pycode-25M
pr=$'import os\nimport sys\n\n\ndef main():\n'
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for cfg in plain ngram; do
  sc=()
  [ $cfg = ngram ] && sc=(--speculative-config '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4}')
  timeout 250 "$NCU" --csv --metrics gpu__time_duration.sum --launch-skip 4000 --launch-count 950 \
    "$P" generate --device cuda --model "$T" --prompt "$pr" --temperature 0 --max-tokens 400 \
    --ignore-eos "${sc[@]}" > "$LOGS/ncu_$cfg.csv" 2> "$LOGS/ncu_$cfg.err"
  say "ncu $cfg (exit $?):"
  python3 "$B/ncu_summary.py" "$LOGS/ncu_$cfg.csv" 22 | tee -a "$SUMMARY"
done
