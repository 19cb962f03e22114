# Saves a transformers mixture-of-experts model (Qwen3-MoE, Mixtral) in the per-expert tensor layout
# of the published checkpoints. transformers 5 keeps each layer's experts stacked in memory
# (experts.gate_up_proj [E, 2I, H], experts.down_proj [E, H, I]); the Hub's checkpoints, which
# pagellm loads, name every expert's projections: Qwen3-MoE mlp.experts.E.{gate,up,down}_proj,
# Mixtral block_sparse_moe.experts.E.{w1,w3,w2} (router block_sparse_moe.gate).
# Used by make_reference_logits.py and hf_compare.py.
import os

from safetensors.torch import save_file


def per_expert_state(model, mixtral):
    """The model's tensors with stacked experts split into per-expert names (CPU copies)."""
    out = {}
    gate, up, down = ("w1", "w3", "w2") if mixtral else ("gate_proj", "up_proj", "down_proj")
    for key, t in model.state_dict().items():
        t = t.detach().contiguous().cpu()
        if mixtral:
            key = key.replace(".mlp.gate.weight", ".block_sparse_moe.gate.weight")
            key = key.replace(".mlp.experts.", ".block_sparse_moe.experts.")
        prefix = key.rsplit("experts.", 1)[0]
        if key.endswith("experts.gate_up_proj"):  # [E, 2I, H]: gate rows, then up rows
            inter = t.shape[1] // 2
            for e in range(t.shape[0]):
                out[f"{prefix}experts.{e}.{gate}.weight"] = t[e, :inter].clone()
                out[f"{prefix}experts.{e}.{up}.weight"] = t[e, inter:].clone()
        elif key.endswith("experts.down_proj"):  # [E, H, I]
            for e in range(t.shape[0]):
                out[f"{prefix}experts.{e}.{down}.weight"] = t[e].clone()
        else:
            out[key] = t.clone()
    return out


def save_per_expert(model, out_dir, mixtral):
    """Replaces the weights save_pretrained wrote in out_dir with one per-expert safetensors file."""
    for f in os.listdir(out_dir):
        if f.endswith(".safetensors") or f.endswith(".index.json"):
            os.remove(os.path.join(out_dir, f))
    state = per_expert_state(model, mixtral)
    layer0 = sorted(k for k in state if ".layers.0." in k)
    print("per-expert checkpoint, layer 0:", layer0[:6], "...", flush=True)
    save_file(state, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
