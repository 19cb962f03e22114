#!/usr/bin/python3
"""Write a tiny deterministic random Llama checkpoint (bf16, one model.safetensors) for loader tests:
1 layer, hidden 256, intermediate 512, 4 heads / 2 KV heads of 64, vocab 256, untied lm_head, and a
byte-level tokenizer.json (SentencePiece-style BPE with no merges: every byte is a <0xNN> token).

  /usr/bin/python3 tools/make_tiny_llama.py OUT_DIR [--seed 0]
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quantize_fp8 as q8  # noqa: E402
from intq.grid import f32_to_bf16_bits  # noqa: E402

HIDDEN, FFN, HEADS, KV_HEADS, HEAD_DIM, VOCAB, LAYERS = 256, 512, 4, 2, 64, 256, 1


def config():
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": False,
            "bos_token_id": None, "eos_token_id": None, "dtype": "bfloat16", "head_dim": HEAD_DIM,
            "hidden_act": "silu", "hidden_size": HIDDEN, "intermediate_size": FFN,
            "max_position_embeddings": 1024, "mlp_bias": False, "num_attention_heads": HEADS,
            "num_hidden_layers": LAYERS, "num_key_value_heads": KV_HEADS, "rms_norm_eps": 1e-5,
            "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
            "tie_word_embeddings": False, "vocab_size": VOCAB}


def tokenizer():
    vocab = {"<0x%02X>" % b: b for b in range(256)}
    return {"version": "1.0", "added_tokens": [],
            "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                                                              {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
            "pre_tokenizer": None, "post_processor": None,
            "decoder": {"type": "Sequence", "decoders": [
                {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
                {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True,
                      "ignore_merges": False, "vocab": vocab, "merges": []}}


def tensors(seed):
    """{name: quantize_fp8.Tensor (BF16)}: N(0, 0.02) weights, a few input channels 8x larger (the
    outliers trained models have), norms around 1."""
    rng = np.random.default_rng(seed)
    shapes = {"model.embed_tokens.weight": (VOCAB, HIDDEN), "lm_head.weight": (VOCAB, HIDDEN),
              "model.norm.weight": (HIDDEN,)}
    p = "model.layers.0."
    shapes.update({p + "input_layernorm.weight": (HIDDEN,), p + "post_attention_layernorm.weight": (HIDDEN,),
                   p + "self_attn.q_proj.weight": (HEADS * HEAD_DIM, HIDDEN),
                   p + "self_attn.k_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
                   p + "self_attn.v_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
                   p + "self_attn.o_proj.weight": (HIDDEN, HEADS * HEAD_DIM),
                   p + "mlp.gate_proj.weight": (FFN, HIDDEN), p + "mlp.up_proj.weight": (FFN, HIDDEN),
                   p + "mlp.down_proj.weight": (HIDDEN, FFN)})
    out = {}
    for name in sorted(shapes):
        shape = shapes[name]
        if len(shape) == 1:
            a = 1.0 + 0.1 * rng.standard_normal(shape)
        else:
            a = 0.02 * rng.standard_normal(shape)
            a[:, rng.choice(shape[1], 4, replace=False)] *= 8.0
        out[name] = q8.Tensor("BF16", shape, f32_to_bf16_bits(a.astype(np.float32)).reshape(-1))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config(), f, indent=2)
        f.write("\n")
    with open(os.path.join(args.out, "tokenizer.json"), "w") as f:
        json.dump(tokenizer(), f, indent=1, ensure_ascii=False)
        f.write("\n")
    q8.write_safetensors(os.path.join(args.out, "model.safetensors"), tensors(args.seed), {"format": "pt"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
