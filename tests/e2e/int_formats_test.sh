#!/usr/bin/env bash
# INT4 / INT8 checkpoints end to end on the CPU: tools/quantize_int.py (its own tests first) writes
# pycode-25M with RTN, GPTQ (act-order) and AWQ at W4A16 g128 in the gptq and awq formats, and W8A16 /
# W8A8 in the compressed-tensors formats, each reloaded by the tool's independent unpacker
# (--dequantize-check); `pagellm generate` loads each and continues Python prompts greedily;
# teacher-forced perplexity over tests/data/heldout_python.txt: GPTQ and AWQ beat RTN on the same grid,
# W8A16 and W8A8 stay within 2% of bf16; broken checkpoints fail with one line naming the tensor or
# field.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/e2e/quant_lib.sh  # BIN, PY, SHARED, MODEL (pycode-25M), TMP, fail, gen, expect_broken

"$PY" tests/tools/quantize_int_test.py > "$TMP/unit.txt" 2>&1 \
  || { cat "$TMP/unit.txt" >&2; fail "tests/tools/quantize_int_test.py"; }
echo "ok: quantize_int tool tests ($(grep -o 'Ran [0-9]* tests' "$TMP/unit.txt"))"

# NAME: quantize_int.py arguments. W4A16 g128: RTN and a method on the same grid per format.
declare -A ARGS=(
  [rtn-gptq]="--format gptq --method rtn"
  [gptq-gptq]="--format gptq --method gptq --act-order"
  [rtn-awq]="--format awq --method rtn"
  [awq-awq]="--format awq --method awq"
  [ct-w8a16]="--format ct-w8a16 --method rtn --group-size -1"
  [ct-w8a8]="--format ct-w8a8 --method rtn"
)
NAMES=(rtn-gptq gptq-gptq rtn-awq awq-awq ct-w8a16 ct-w8a8)
for n in "${NAMES[@]}"; do
  # shellcheck disable=SC2086
  "$PY" tools/quantize_int.py ${ARGS[$n]} --dequantize-check "$MODEL" "$TMP/$n" 2> "$TMP/q_$n.txt" \
    || { cat "$TMP/q_$n.txt" >&2; fail "quantize_int.py ${ARGS[$n]}"; }
done
echo "ok: quantized pycode-25M ${#NAMES[@]} ways, every weight reloaded exactly"

# Eight greedy 32-token Python continuations and the held-out text scored teacher-forced
# (prompt_logprobs), then for every model the same plus bf16's greedy tokens fed back.
"$PY" tests/tools/fp8_e2e.py prompts tests/data/heldout_python.txt "$TMP/prompts.jsonl"
gen bf16-first "$TMP/prompts.jsonl" --model "$MODEL"
cp "$TMP/prompts.jsonl" "$TMP/prompts_tf.jsonl"
"$PY" tests/tools/fp8_e2e.py teacher "$MODEL" "$TMP/res_bf16-first.jsonl" "$TMP/prompts_tf.jsonl"
gen bf16 "$TMP/prompts_tf.jsonl" --model "$MODEL"
reports=("bf16=$TMP/res_bf16.jsonl")
for n in "${NAMES[@]}"; do
  gen "$n" "$TMP/prompts_tf.jsonl" --model "$TMP/$n"
  reports+=("$n=$TMP/res_$n.jsonl")
done
"$PY" tests/tools/int_e2e.py report "${reports[@]}" || fail "integer formats' accuracy (above)"
echo "ok: every format continues the prompts; GPTQ and AWQ beat RTN, W8A16 / W8A8 within 2% of bf16"

# Broken checkpoints: non-zero exit and one error line naming what is wrong.
broken() {  # KIND PATTERN SOURCE
  expect_broken tests/tools/int_e2e.py "$1" "$2" "$TMP/$3"
}
broken missing-qzeros "model\.layers\.3\.mlp\.down_proj\.qzeros" rtn-gptq
broken missing-scales "model\.layers\.1\.self_attn\.o_proj\.scales" rtn-awq
broken bad-g-idx "model\.layers\.2\.self_attn\.k_proj\.g_idx" gptq-gptq
broken misshaped-scale "model\.layers\.4\.mlp\.gate_proj\.weight_scale" ct-w8a8
broken bits-3 "bits.*3|3.*bit" rtn-gptq
echo "int_formats_test: all passed"
