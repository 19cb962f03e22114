"""Writes Qwen3-30B-A3B's config.json (public architecture values: 48 layers, 128 experts of 768
columns, top-8) to the path given: the model folder the device scripts run with --load-format
dummy."""
import json
import sys

json.dump({
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "torch_dtype": "bfloat16",
    "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 48,
    "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "hidden_act": "silu",
    "max_position_embeddings": 40960, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "tie_word_embeddings": False, "attention_bias": False, "num_experts": 128,
    "num_experts_per_tok": 8, "moe_intermediate_size": 768, "norm_topk_prob": True,
    "decoder_sparse_step": 1, "mlp_only_layers": [], "bos_token_id": 151643,
    "eos_token_id": 151645}, open(sys.argv[1], "w"), indent=1)
