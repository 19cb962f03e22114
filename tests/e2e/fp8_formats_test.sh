#!/usr/bin/env bash
# FP8 checkpoints end to end on the CPU: tools/quantize_fp8.py writes pycode-25M in every format
# (its own tests first: formats that encode the same quantization hold the same bytes, errors within
# e4m3's half-ulp), `pagellm generate` loads each and continues Python prompts greedily like the bf16
# model, teacher-forced perplexity over tests/data/heldout_python.txt stays within 2% of bf16 (the
# FP8 KV cache alone: 1%), and broken checkpoints fail with one line naming the tensor or field.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/e2e/quant_lib.sh  # BIN, PY, SHARED, MODEL (pycode-25M), TMP, fail, gen, expect_broken

PAGELLM_SHARED_DIR=$SHARED "$PY" tests/tools/quantize_fp8_test.py > "$TMP/unit.txt" 2>&1 \
  || { cat "$TMP/unit.txt" >&2; fail "tests/tools/quantize_fp8_test.py"; }
echo "ok: quantize_fp8 tool tests ($(grep -o 'Ran [0-9]* tests' "$TMP/unit.txt"))"

FORMATS=(compressed-tensors-channel fbgemm block compressed-tensors-block fp8-static fp8-dynamic
         compressed-tensors-tensor-static)
for f in "${FORMATS[@]}"; do
  "$PY" tools/quantize_fp8.py --format "$f" --dequantize-check "$MODEL" "$TMP/$f" 2> "$TMP/q_$f.txt" \
    || { cat "$TMP/q_$f.txt" >&2; fail "quantize_fp8.py --format $f"; }
done
"$PY" tools/quantize_fp8.py --format compressed-tensors-channel --kv-cache-scales "$MODEL" "$TMP/kv-scales" \
  2> "$TMP/q_kv.txt" || { cat "$TMP/q_kv.txt" >&2; fail "quantize_fp8.py --kv-cache-scales"; }
echo "ok: quantized pycode-25M into ${#FORMATS[@]} formats (+ one with FP8 KV cache scales)"

# Eight greedy 32-token Python continuations and the held-out text scored teacher-forced
# (prompt_logprobs), then for every model the same plus bf16's greedy tokens fed back (teacher-forced
# argmax agreement).
"$PY" tests/tools/fp8_e2e.py prompts tests/data/heldout_python.txt "$TMP/prompts.jsonl"
gen bf16-first "$TMP/prompts.jsonl" --model "$MODEL"
cp "$TMP/prompts.jsonl" "$TMP/prompts_tf.jsonl"
"$PY" tests/tools/fp8_e2e.py teacher "$MODEL" "$TMP/res_bf16-first.jsonl" "$TMP/prompts_tf.jsonl"
gen bf16 "$TMP/prompts_tf.jsonl" --model "$MODEL"
gen online "$TMP/prompts_tf.jsonl" --model "$MODEL" --quantization fp8
grep -q "quantized at load" "$TMP/err_online.txt" || fail "--quantization fp8: no 'quantized at load' in the log"
for f in "${FORMATS[@]}"; do
  gen "$f" "$TMP/prompts_tf.jsonl" --model "$TMP/$f"
  grep -qi "fp8" "$TMP/err_$f.txt" || fail "$f: the log does not mention fp8"
done
# The FP8 KV cache: alone (scales 1.0; calculated from the first batch), and with the checkpoint's
# calibrated scales on top of W8A8.
gen kv-fp8 "$TMP/prompts_tf.jsonl" --model "$MODEL" --kv-cache-dtype fp8
grep -q "fp8_e4m3 KV cache (scales 1.0" "$TMP/err_kv-fp8.txt" || fail "kv-fp8: no KV cache line in the log"
gen kv-fp8-calculated "$TMP/prompts_tf.jsonl" --model "$MODEL" --kv-cache-dtype fp8_e4m3 --calculate-kv-scales
grep -q "calculated from the first batch" "$TMP/err_kv-fp8-calculated.txt" || fail "kv-fp8-calculated: log"
gen kv-fp8-checkpoint "$TMP/prompts_tf.jsonl" --model "$TMP/kv-scales" --kv-cache-dtype fp8
grep -q "scales from the checkpoint" "$TMP/err_kv-fp8-checkpoint.txt" || fail "kv-fp8-checkpoint: log"
reports=("bf16=$TMP/res_bf16.jsonl" "online=$TMP/res_online.jsonl")
for f in "${FORMATS[@]}" kv-fp8 kv-fp8-calculated kv-fp8-checkpoint; do reports+=("$f=$TMP/res_$f.jsonl"); done
"$PY" tests/tools/fp8_e2e.py report "${reports[@]}" || fail "FP8 accuracy (above)"
echo "ok: every format continues the prompts and scores the held-out text like bf16"

# Broken checkpoints: non-zero exit and one error line naming what is wrong.
broken() {  # KIND PATTERN [SOURCE]
  expect_broken tests/tools/fp8_e2e.py "$1" "$2" "$TMP/${3:-compressed-tensors-channel}"
}
broken missing-scale "model\.layers\.3\.mlp\.down_proj\.weight_scale"
broken misshaped-scale "model\.layers\.2\.self_attn\.k_proj\.weight_scale"
broken unknown-method "fp9_magic"
broken int4 "4-bit|int4"
broken missing-kv-scale "model\.layers\.5\.self_attn\.v_scale' is missing" kv-scales
echo "fp8_formats_test: all passed"
