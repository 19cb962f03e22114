# Builds tiny random-weight Llama-3-style, Qwen3-style and Qwen2-style models with HF transformers in
# float32, saves each as a Hugging Face folder, and records transformers' logits for fixed prompts.
# The CPU forward pass is checked against these in tests/unit/hf_reference_test.cpp.
#
# usage: python3 make_reference_logits.py OUT_DIR
#   writes OUT_DIR/{llama3_tiny,qwen3_tiny,qwen2_tiny}/{config.json,generation_config.json,
#   model.safetensors,reference.json}; the folders are committed under tests/data/hf_reference/.
import json, os, sys

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


configs = {
    "llama3_tiny": llama3_config(),
    "qwen3_tiny": tf.Qwen3Config(**common, head_dim=32, max_position_embeddings=4096, rope_theta=1000000.0,
                                 tie_word_embeddings=True),
    "qwen2_tiny": tf.Qwen2Config(**common, max_position_embeddings=4096, rope_theta=1000000.0,
                                 tie_word_embeddings=True, use_sliding_window=False),
}
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
    out = os.path.join(out_root, name)
    model.save_pretrained(out, safe_serialization=True)
    ref = {"transformers": tf.__version__, "torch": torch.__version__, "prompts": []}
    with torch.no_grad():
        for ids in prompts:
            logits = model(torch.tensor([ids])).logits[0].float()
            ref["prompts"].append({"token_ids": ids, "logits": [[float(f"{v:.7g}") for v in row] for row in logits.tolist()]})
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(ref, f, separators=(",", ":"))
    print(name, sum(p.numel() for p in model.parameters()), "params;", sorted(os.listdir(out)))
