# Builds tiny random-weight Llama-3-style, Qwen3-style, Qwen2-style, Qwen3-MoE-style, Mixtral-style,
# Phi-3-style, Gemma-2-style and Gemma-3-style (text) models with HF transformers in float32, saves each as a Hugging Face folder, and
# records transformers' logits for fixed prompts. The CPU forward pass is checked against these in
# tests/unit/llama_model_test.cpp (HfReference).
#
# usage: python3 make_reference_logits.py OUT_DIR [NAME ...]
#   writes OUT_DIR/NAME/{config.json,generation_config.json,model.safetensors,reference.json} for
#   the named models (all without names); the folders are committed under tests/data/hf_reference/.
#   Every model is built in the same order whatever is named, so the random numbers do not depend
#   on the selection.
# MoE checkpoints are written in the per-expert layout of the published checkpoints (transformers
# 5 keeps experts stacked in memory and may save them so); the script reloads what it wrote with
# from_pretrained and checks that the logits are the same.
import json, os, sys

from hf_moe_layout import save_per_expert

import torch
import transformers as tf

out_root = sys.argv[1]
L3ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}
common = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2)

def llama3_config():
    # head_dim 16 with theta 5e5 puts rotary frequencies in all three llama3 bands (kept, smoothed, divided).
    # transformers 5 moved rope settings into rope_parameters; 4.x takes rope_scaling.
    kw = dict(common, max_position_embeddings=131072, tie_word_embeddings=False)
    if int(tf.__version__.split(".")[0]) >= 5:
        return tf.LlamaConfig(**kw, rope_parameters={**L3ROPE, "rope_theta": 500000.0})
    return tf.LlamaConfig(**kw, rope_theta=500000.0, rope_scaling=L3ROPE)


def phi3_longrope_config():
    # Phi-3's longrope ("su") scaling with a tiny original context (16 of 64 positions), so the
    # 7-token prompt runs with the short factors and the 40-token one with the long factors (HF
    # picks them by the forward's length); attention_factor = sqrt(1 + ln 4 / ln 16).
    half = (common["hidden_size"] // common["num_attention_heads"]) // 2
    rope = {"rope_type": "longrope", "short_factor": [1.0 + 0.25 * i for i in range(half)],
            "long_factor": [2.0 + 1.5 * i for i in range(half)], "original_max_position_embeddings": 16}
    kw = dict(common, pad_token_id=None, max_position_embeddings=64, tie_word_embeddings=False, sliding_window=None,
              original_max_position_embeddings=16)
    if int(tf.__version__.split(".")[0]) >= 5:
        return tf.Phi3Config(**kw, rope_parameters={**rope, "rope_theta": 10000.0})
    return tf.Phi3Config(**kw, rope_theta=10000.0, rope_scaling={**rope, "type": "longrope"})


def gemma2_config():
    # Sliding layers 0 and 2 with an 8-token window (the 40-token prompt runs far past it), a
    # query scale that is not head_dim's, and both soft caps small enough to bend the numbers.
    return tf.Gemma2Config(**dict(common, num_hidden_layers=3), head_dim=16, pad_token_id=0,
                           max_position_embeddings=4096, rope_theta=10000.0, tie_word_embeddings=True,
                           query_pre_attn_scalar=24, sliding_window=8, attn_logit_softcapping=5.0,
                           final_logit_softcapping=3.0, hidden_activation="gelu_pytorch_tanh",
                           layer_types=["sliding_attention", "full_attention", "sliding_attention"])


def gemma3_config():
    # Gemma 3's text model: q/k norms, local layers on their own rotary base, the global layer
    # with linear scaling (as Gemma-3-4B+ has), a 6-token window.
    kw = dict(common, num_hidden_layers=3, head_dim=16, pad_token_id=0, max_position_embeddings=4096,
              tie_word_embeddings=True, query_pre_attn_scalar=16, sliding_window=6,
              hidden_activation="gelu_pytorch_tanh",
              layer_types=["sliding_attention", "sliding_attention", "full_attention"])
    if int(tf.__version__.split(".")[0]) >= 5:
        return tf.Gemma3TextConfig(**kw, rope_parameters={
            "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1000000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})
    return tf.Gemma3TextConfig(**kw, rope_theta=1000000.0, rope_local_base_freq=10000.0,
                               rope_scaling={"rope_type": "linear", "factor": 2.0})


configs = {
    "llama3_tiny": llama3_config(),
    "qwen3_tiny": tf.Qwen3Config(**common, head_dim=32, max_position_embeddings=4096, rope_theta=1000000.0,
                                 tie_word_embeddings=True),
    "qwen2_tiny": tf.Qwen2Config(**common, max_position_embeddings=4096, rope_theta=1000000.0,
                                 tie_word_embeddings=True, use_sliding_window=False),
    # Layer 1 is dense (mlp_only_layers): a MoE model's dense layers use intermediate_size. The
    # top-k weights are not renormalised (norm_topk_prob false); Mixtral always renormalises.
    "qwen3_moe_tiny": tf.Qwen3MoeConfig(**dict(common, num_hidden_layers=3), head_dim=16,
                                        max_position_embeddings=4096, rope_theta=1000000.0,
                                        tie_word_embeddings=False, num_experts=8, num_experts_per_tok=3,
                                        moe_intermediate_size=32, norm_topk_prob=False,
                                        decoder_sparse_step=1, mlp_only_layers=[1]),
    "mixtral_tiny": tf.MixtralConfig(**dict(common, intermediate_size=48), max_position_embeddings=4096,
                                     rope_theta=1000000.0, tie_word_embeddings=False, num_local_experts=4,
                                     num_experts_per_tok=2, sliding_window=None),
    "phi3_tiny": tf.Phi3Config(**common, pad_token_id=None, max_position_embeddings=4096, rope_theta=10000.0,
                               tie_word_embeddings=False, sliding_window=None),
    "phi3_longrope_tiny": phi3_longrope_config(),
    "gemma2_tiny": gemma2_config(),
    "gemma3_tiny": gemma3_config(),
}
wanted = set(sys.argv[2:]) or set(configs)
assert wanted <= set(configs), sorted(wanted - set(configs))

g = torch.Generator().manual_seed(1234)
prompts = [
    [1, 5, 77, 300, 12, 511, 42],
    [int(x) for x in torch.randint(0, 512, (40,), generator=g)],
]
for name, cfg in configs.items():
    torch.manual_seed(0)
    model = tf.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").float().eval()
    if name == "llama3_tiny":
        assert model.model.rotary_emb.rope_type == "llama3", model.model.rotary_emb.rope_type
    if name == "phi3_longrope_tiny":
        assert model.model.rotary_emb.rope_type == "longrope", model.model.rotary_emb.rope_type
        print(name, "attention scaling", model.model.rotary_emb.attention_scaling)
    # HF initialises norms to 1 and biases to 0; random values exercise those weights too.
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif pname.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif pname.endswith("embed_tokens.weight"):
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
    if name not in wanted:
        continue
    out = os.path.join(out_root, name)
    model.save_pretrained(out, safe_serialization=True)
    if name.startswith(("qwen3_moe", "mixtral")):
        save_per_expert(model, out, mixtral=name.startswith("mixtral"))
        reloaded = tf.AutoModelForCausalLM.from_pretrained(out, attn_implementation="eager",
                                                           dtype=torch.float32).eval()
        with torch.no_grad():
            for ids in prompts:
                a = model(torch.tensor([ids])).logits
                b = reloaded(torch.tensor([ids])).logits
                assert torch.allclose(a, b, rtol=0.0, atol=1e-6), (name, "reloaded per-expert checkpoint differs",
                                           float((a - b).abs().max()))
    ref = {"transformers": tf.__version__, "torch": torch.__version__, "prompts": []}
    with torch.no_grad():
        for ids in prompts:
            logits = model(torch.tensor([ids])).logits[0].float()
            ref["prompts"].append({"token_ids": ids, "logits": [[float(f"{v:.7g}") for v in row] for row in logits.tolist()]})
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(ref, f, separators=(",", ":"))
    print(name, sum(p.numel() for p in model.parameters()), "params;", sorted(os.listdir(out)))
