#!/usr/bin/env bash
# `pagellm generate` on the GPU against the CPU backend for the tiny quantized MoE / Phi-3 / Gemma
# checkpoints and the Phi-3 longrope reference (docs/PERF.md, "Quantized families and longrope on
# the GPU"): greedy 24-token continuations; GPU float32 (the checkpoints dequantized exactly at
# load) must give the CPU's text, GPU bfloat16 (the INT / FP8 kernels) is reported beside it.
#   bash run_quant_e2e.sh BUNDLE      (BUNDLE: pagellm (xz'd), unpack_bundle.sh, e2e/MODEL folders)
SRC=$(cd "${1:?usage: run_quant_e2e.sh BUNDLE}" && pwd)
. "$SRC/unpack_bundle.sh"
gen() {  # MODEL DEVICE DTYPE
  timeout 120 "$B/pagellm" generate --model "$B/e2e/$1" --device "$2" --dtype "$3" \
    --prompt "Once upon a time" --max-tokens 24 --temperature 0 2> "$B/$1-$2-$3.err" | tail -1
}
for m in $(ls "$B/e2e"); do
  cpu=$(gen "$m" cpu float32)
  for dt in float32 bfloat16; do
    [ "$m" = gemma3_tiny_pk ] && [ "$dt" = float32 ] && continue  # FP8 computes in 16 bits
    gpu=$(gen "$m" cuda "$dt")
    same=$(python3 -c 'import os,sys; a,b=sys.argv[1:]; print(len(os.path.commonprefix([a,b])), "of", len(a), "chars")' "$cpu" "$gpu")
    say "$m cuda $dt: $([ "$cpu" = "$gpu" ] && echo identical || echo "differs after $same") to cpu" \
      "($(grep -m1 -oE 'quantization: [^;]*|weights kept packed[^;]*|dequantized[^;]*' "$B/$m-cuda-$dt.err" | head -1))"
  done
done
