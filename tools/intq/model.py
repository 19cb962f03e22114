"""The numpy Llama forward the quantizers calibrate with: layer by layer over a batch of sequences,
returning the inputs of every linear layer group, and teacher-forced perplexity. Weights are float32
copies that the quantizers replace as they go (dequantized linears, AWQ-folded norms), so later layers
calibrate on the quantized-so-far model.
"""

import json
import math
import os

import numpy as np

import quantize_fp8 as q8

LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
# The linear layers that read the same input ("qkv": the attention norm's output, "o": attention's
# output, "gateup": the MLP norm's output, "down": silu(gate) * up).
GROUPS = {"qkv": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), "o": ("self_attn.o_proj",),
          "gateup": ("mlp.gate_proj", "mlp.up_proj"), "down": ("mlp.down_proj",)}


class Model:
    """config.json + every tensor of a bf16/f16/f32 Llama folder, weights widened to float32 on use."""

    def __init__(self, folder):
        with open(os.path.join(folder, "config.json")) as f:
            self.cfg = json.load(f)
        if "quantization_config" in self.cfg:
            raise ValueError("%s/config.json already has a quantization_config" % folder)
        if self.cfg.get("hidden_act", "silu") not in ("silu", "swish"):
            raise ValueError("%s: hidden_act %s is not supported" % (folder, self.cfg.get("hidden_act")))
        self.folder = folder
        self.tensors = q8.read_checkpoint(folder)
        c = self.cfg
        self.hidden = c["hidden_size"]
        self.heads = c["num_attention_heads"]
        self.kv_heads = c.get("num_key_value_heads") or self.heads
        self.head_dim = c.get("head_dim") or self.hidden // self.heads
        self.eps = float(c.get("rms_norm_eps", 1e-6))
        self.num_layers = c["num_hidden_layers"]
        self.weights = {}
        self.folded = set()  # norms AWQ rescaled (written back in the source dtype)
        self.dynamic_int8_inputs = False  # W8A8: every linear's input quantized per token to int8

    def w(self, name):
        if name not in self.weights:
            if name not in self.tensors:
                raise ValueError("%s: tensor %s is missing" % (self.folder, name))
            self.weights[name] = self.tensors[name].to_f32()
        return self.weights[name]

    def linear(self, name, x):
        """x [..., in] @ W^T; with dynamic_int8_inputs x is first rounded per token to amax / 127 steps
        (symmetric int8, as a W8A8 kernel quantizes activations)."""
        if self.dynamic_int8_inputs:
            s = np.maximum(np.abs(x).max(axis=-1, keepdims=True), 1e-12) / np.float32(127.0)
            x = np.clip(np.rint(x / s), -127, 127) * s
        return x @ self.w(name).T

    def lm_head(self):
        if "lm_head.weight" in self.tensors:
            return self.w("lm_head.weight")
        return self.w("model.embed_tokens.weight")

    def embed(self, ids):
        return self.w("model.embed_tokens.weight")[np.asarray(ids)]

    def attention(self, p, h):
        """h [B, T, hidden] -> attention output before o_proj [B, T, heads * head_dim]."""
        b, t, _ = h.shape
        hd, nh, nkv = self.head_dim, self.heads, self.kv_heads
        q = self.linear(p + "self_attn.q_proj.weight", h).reshape(b, t, nh, hd).transpose(0, 2, 1, 3)
        k = self.linear(p + "self_attn.k_proj.weight", h).reshape(b, t, nkv, hd).transpose(0, 2, 1, 3)
        v = self.linear(p + "self_attn.v_proj.weight", h).reshape(b, t, nkv, hd).transpose(0, 2, 1, 3)
        cos, sin = q8.rope_tables(self.cfg, hd, range(t))
        q, k = q8.apply_rope(q, cos, sin), q8.apply_rope(k, cos, sin)
        k, v = np.repeat(k, nh // nkv, axis=1), np.repeat(v, nh // nkv, axis=1)
        s = q @ k.transpose(0, 1, 3, 2) / np.float32(math.sqrt(hd))
        s += np.triu(np.full((t, t), -np.inf, dtype=np.float32), 1)
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        s /= s.sum(axis=-1, keepdims=True)
        return (s @ v).transpose(0, 2, 1, 3).reshape(b, t, nh * hd)

    def mlp_mid(self, p, h):
        g = self.linear(p + "mlp.gate_proj.weight", h)
        u = self.linear(p + "mlp.up_proj.weight", h)
        return g * (0.5 + 0.5 * np.tanh(0.5 * g)) * u  # silu without exp overflow

    def layer(self, i, x):
        """One decoder layer on x [B, T, hidden]: (output, {group: its input})."""
        p = "model.layers.%d." % i
        ins = {"qkv": q8.rms_norm(x, self.w(p + "input_layernorm.weight"), self.eps)}
        ins["o"] = self.attention(p, ins["qkv"])
        x = x + self.linear(p + "self_attn.o_proj.weight", ins["o"])
        ins["gateup"] = q8.rms_norm(x, self.w(p + "post_attention_layernorm.weight"), self.eps)
        ins["down"] = self.mlp_mid(p, ins["gateup"])
        return x + self.linear(p + "mlp.down_proj.weight", ins["down"]), ins

    def nll(self, ids):
        """Mean negative log-likelihood (nats) of ids[1:] given the prefix, one sequence."""
        x = self.embed(np.asarray(ids)[None, :])
        for i in range(self.num_layers):
            x, _ = self.layer(i, x)
        h = q8.rms_norm(x[0], self.w("model.norm.weight"), self.eps)
        head = self.lm_head()
        total = 0.0
        for a in range(0, len(ids) - 1, 256):
            logits = h[a:min(a + 256, len(ids) - 1)] @ head.T
            m = logits.max(axis=1, keepdims=True)
            lse = (m[:, 0] + np.log(np.exp(logits - m).sum(axis=1))).astype(np.float64)
            tgt = np.asarray(ids[a + 1:a + 1 + len(logits)])
            total += float((lse - logits[np.arange(len(logits)), tgt]).sum())
        return total / (len(ids) - 1)


def perplexity(model, ids):
    return math.exp(model.nll(ids))


DEFAULT_CALIBRATION = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data",
                                   "calibration_python.txt")


def calibration_ids(folder, text, num_sequences, seq_len):
    """int64 [num_sequences, seq_len]: consecutive chunks of the tokenized text (each starting with the
    model's BOS when it has one). The tokenizer is tokenizer.json's BPE (quantize_fp8.Tokenizer)."""
    tok = q8.Tokenizer(folder)
    ids = tok.encode(text)
    if tok.bos is not None:
        ids = ids[1:]
    body = seq_len - (1 if tok.bos is not None else 0)
    if len(ids) < num_sequences * body:
        raise ValueError("calibration text has %d tokens; %d sequences of %d need %d" %
                         (len(ids), num_sequences, seq_len, num_sequences * body))
    rows = []
    for i in range(num_sequences):
        chunk = ids[i * body:(i + 1) * body]
        rows.append(([tok.bos] if tok.bos is not None else []) + chunk)
    return np.asarray(rows, dtype=np.int64)
