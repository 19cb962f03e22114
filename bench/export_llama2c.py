#!/usr/bin/env python3
# usage: bench/export_llama2c.py ../shared/models/stories260K /tmp/llama2c/stories260K.bin
# (pure Python, no numpy). Used by the run.c comparison in docs/PERF.md; run.c itself is never committed.
# Writes llama2.c's legacy .bin checkpoint (the format run.c @bd18228 reads) from the HF folder.
import json, struct, sys, array
d = sys.argv[1]; out = sys.argv[2]
cfg = json.load(open(d + "/config.json"))
raw = open(d + "/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n]); base = 8 + n
def t(name):
    m = hdr[name]; assert m["dtype"] == "F32"
    a = array.array("f"); a.frombytes(raw[base + m["data_offsets"][0]: base + m["data_offsets"][1]]); return a, m["shape"]
dim, hid, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
H, KV, V, S = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["vocab_size"], cfg["max_position_embeddings"]
hd = dim // H
def unpermute(a, shape, heads):
    # HF rotate-half rows back to llama2.c's interleaved pairs: row (h, half, i) -> (h, i, half)
    rows, cols = shape; out = array.array("f", [0.0]) * (rows * cols); half = rows // heads // 2
    for h in range(heads):
        for p in range(2):
            for i in range(half):
                src = (h * 2 * half + p * half + i) * cols; dst = (h * 2 * half + i * 2 + p) * cols
                out[dst:dst + cols] = a[src:src + cols]
    return out
f = open(out, "wb")
f.write(struct.pack("<7i", dim, hid, L, H, KV, V, S))  # positive vocab = shared classifier
f.write(t("model.embed_tokens.weight")[0].tobytes())
for name in ["input_layernorm"]:
    for l in range(L): f.write(t(f"model.layers.{l}.{name}.weight")[0].tobytes())
for proj, heads in [("q_proj", H), ("k_proj", KV), ("v_proj", None), ("o_proj", None)]:
    for l in range(L):
        a, sh = t(f"model.layers.{l}.self_attn.{proj}.weight")
        f.write((unpermute(a, sh, heads) if heads else a).tobytes())
for l in range(L): f.write(t(f"model.layers.{l}.post_attention_layernorm.weight")[0].tobytes())
for proj in ["gate_proj", "down_proj", "up_proj"]:
    for l in range(L): f.write(t(f"model.layers.{l}.mlp.{proj}.weight")[0].tobytes())
f.write(t("model.norm.weight")[0].tobytes())
f.write(array.array("f", [0.0] * (S * hd)).tobytes())  # unused freq_cis_real + imag
f.close()
tok = json.load(open(d + "/tokenizer.json"))
vocab = sorted(tok["model"]["vocab"].items(), key=lambda kv: kv[1])
with open(out.replace(".bin", "_tok.bin"), "wb") as g:
    pieces = [p.replace("\u2581", " ").encode() for p, _ in vocab]
    g.write(struct.pack("<i", max(len(p) for p in pieces)))
    for p in pieces: g.write(struct.pack("<fi", 0.0, len(p)) + p)
print("wrote", out)
