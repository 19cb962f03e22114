#!/usr/bin/python3
"""Quantize a Hugging Face Llama-family checkpoint to FP8 (e4m3) in the formats pagellm and vLLM load.

Needs Python 3 and numpy only: safetensors is read and written by hand (an 8-byte little-endian header
length, a JSON header {name: {dtype, shape, data_offsets}} with an optional "__metadata__", then the
raw little-endian tensor data). Sharded inputs (model.safetensors.index.json) are read; the output is
one model.safetensors plus config.json (with "quantization_config"), the tokenizer files and
generation_config.json.

Formats (--format):
  compressed-tensors-channel        W: per output channel, weight_scale F32 [n, 1]; A: dynamic per token
  compressed-tensors-tensor-static  W: per tensor, weight_scale F32 [1]; A: static per tensor, input_scale F32 [1]
  compressed-tensors-block          W: 128x128 blocks, weight_scale F32 [ceil(n/128), ceil(k/128)]; A: dynamic per 128 group
  fp8-static                        quant_method fp8 (AutoFP8): weight_scale F32 [], input_scale F32 []
  fp8-dynamic                       quant_method fp8: weight_scale F32 [], no input_scale
  fbgemm                            quant_method fbgemm_fp8: weight_scale F32 [n, 1]
  block                             quant_method fp8 + weight_block_size [128, 128]: weight_scale_inv F32 [ceil(n/128), ceil(k/128)]

Every scale is amax / 448 over its group (floored at 1e-12) and the weight is e4m3(w / scale) with
round-to-nearest-even and saturation to +-448, so dequant = fp8 * scale. Static input scales come from a
numpy forward pass of the model over a calibration text (amax of each linear layer's input / 448).
Embeddings, norms and lm_head keep the source dtype.

  /usr/bin/python3 tools/quantize_fp8.py --format compressed-tensors-channel SRC_DIR OUT_DIR
  /usr/bin/python3 tools/quantize_fp8.py --dequantize-check --format block SRC_DIR OUT_DIR
"""

import argparse
import json
import math
import os
import re
import shutil
import struct
import sys

import numpy as np

E4M3_MAX = 448.0
SCALE_FLOOR = 1e-12
BLOCK = 128

FORMATS = (
    "compressed-tensors-channel",
    "compressed-tensors-tensor-static",
    "compressed-tensors-block",
    "fp8-static",
    "fp8-dynamic",
    "fbgemm",
    "block",
)

# ---- e4m3fn ----------------------------------------------------------------------------------------
# 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities; S.1111.111 is NaN, so the largest
# finite magnitude is 1.75 * 2^8 = 448; subnormals are m * 2^-9.


def e4m3_decode_table():
    """float32[256]: the value of every e4m3fn code (NaN for 0x7F and 0xFF)."""
    out = np.empty(256, dtype=np.float32)
    for c in range(256):
        e, m = (c >> 3) & 0xF, c & 7
        if e == 15 and m == 7:
            v = float("nan")
        elif e == 0:
            v = m * 2.0 ** -9
        else:
            v = (1.0 + m / 8.0) * 2.0 ** (e - 7)
        out[c] = -v if c & 0x80 else v
    return out


E4M3_TABLE = e4m3_decode_table()


def e4m3_decode(codes):
    return E4M3_TABLE[np.asarray(codes, dtype=np.uint8)]


def e4m3_encode(x):
    """float32 array -> uint8 e4m3fn codes: round to nearest, ties to even, saturating to +-448
    (infinities too); NaN -> 0x7F with its sign."""
    x = np.asarray(x, dtype=np.float32)
    bits = x.view(np.uint32)
    sign = ((bits >> 24) & 0x80).astype(np.uint8)
    a = np.abs(x)
    code = np.zeros(x.shape, dtype=np.uint32)
    # Subnormal range (below the smallest normal, 2^-6): the code is the value in units of 2^-9,
    # rounded half to even (np.rint); 8 units is 2^-6, whose code is also 8. a * 512 is exact.
    sub = a < np.float32(2.0 ** -6)
    code[sub] = np.rint(a[sub] * np.float32(512.0)).astype(np.uint32)
    # Normal range: round float32's 23-bit mantissa to 3 bits, half to even; a carry moves into the
    # exponent. Rebias the exponent from 127 to 7 (subtract 120 << 3 after the shift).
    nrm = ~sub & ~np.isnan(a)
    b = np.minimum(a[nrm], np.float32(1e6)).view(np.uint32)  # inf -> a big finite value
    lsb = (b >> 20) & 1
    r = (b + np.uint32(0x7FFFF) + lsb) >> 20
    code[nrm] = np.minimum(r - np.uint32(120 << 3), np.uint32(0x7E))  # saturate at 448 (0x7E)
    code[np.isnan(a)] = 0x7F
    return (code.astype(np.uint8) | sign).astype(np.uint8)


# ---- safetensors -----------------------------------------------------------------------------------

NP_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64,
             "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8,
             "BF16": np.uint16, "F8_E4M3": np.uint8, "F8_E5M2": np.uint8, "BOOL": np.uint8}


class Tensor:
    """A tensor as stored: safetensors dtype name, shape, and the raw little-endian bytes as a numpy
    array of the storage type (BF16 as uint16, F8 as uint8)."""

    def __init__(self, dtype, shape, data):
        self.dtype = dtype
        self.shape = list(shape)
        self.data = data

    def to_f32(self):
        if self.dtype == "BF16":
            return (self.data.astype(np.uint32) << 16).view(np.float32).reshape(self.shape)
        if self.dtype == "F8_E4M3":
            return e4m3_decode(self.data).reshape(self.shape)
        if self.dtype in ("F16", "F32", "F64"):
            return self.data.astype(np.float32).reshape(self.shape)
        raise ValueError("cannot convert %s to float32" % self.dtype)


def read_safetensors(path):
    """{name: Tensor} and the metadata dict of one .safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError("%s: too short for a safetensors file" % path)
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ValueError("%s: header length %d beyond the file" % (path, n))
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    base = 8 + n
    tensors, meta = {}, header.pop("__metadata__", None) or {}
    for name, info in header.items():
        dt = NP_DTYPES.get(info["dtype"])
        if dt is None:
            raise ValueError("%s: tensor %s has unsupported dtype %s" % (path, name, info["dtype"]))
        begin, end = info["data_offsets"]
        count = int(np.prod(info["shape"], dtype=np.int64))
        if end - begin != count * np.dtype(dt).itemsize or base + end > len(raw):
            raise ValueError("%s: tensor %s: data_offsets do not match its shape" % (path, name))
        data = np.frombuffer(raw, dtype=np.dtype(dt).newbyteorder("<"), count=count, offset=base + begin)
        tensors[name] = Tensor(info["dtype"], info["shape"], data)
    return tensors, meta


def read_checkpoint(folder):
    """Every tensor of a model folder: model.safetensors, or the shards model.safetensors.index.json
    names."""
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        tensors = {}
        for shard in sorted(set(weight_map.values())):
            part, _ = read_safetensors(os.path.join(folder, shard))
            tensors.update(part)
        missing = sorted(set(weight_map) - set(tensors))
        if missing:
            raise ValueError("%s: index names %s, which no shard holds" % (index, missing[0]))
        return tensors
    single = os.path.join(folder, "model.safetensors")
    if not os.path.exists(single):
        raise ValueError("%s: neither model.safetensors nor model.safetensors.index.json" % folder)
    return read_safetensors(single)[0]


def write_safetensors(path, tensors, metadata=None):
    """Writes {name: Tensor}. Tensors are laid out back to back (the format allows no gaps), widest
    element first and then by name, as the safetensors library does, so every tensor stays aligned to
    its element size; the header is padded with spaces to a multiple of 8 bytes."""
    header, offset, blobs = {}, 0, []
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    order = sorted(tensors, key=lambda n: (-np.dtype(NP_DTYPES[tensors[n].dtype]).itemsize, n))
    for name in order:
        t = tensors[name]
        blob = np.ascontiguousarray(t.data).astype(t.data.dtype.newbyteorder("<"), copy=False).tobytes()
        want = int(np.prod(t.shape, dtype=np.int64)) * np.dtype(NP_DTYPES[t.dtype]).itemsize
        if len(blob) != want:
            raise ValueError("tensor %s: %d bytes for shape %s %s" % (name, len(blob), t.shape, t.dtype))
        header[name] = {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((-(8 + len(text))) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def f32_tensor(a):
    a = np.asarray(a, dtype=np.float32)
    return Tensor("F32", a.shape, a.reshape(-1))


# ---- quantization ------------------------------------------------------------------------------------

LINEAR_RE = re.compile(r"^(.*\.(?:self_attn\.(?:q|k|v|o)_proj|mlp\.(?:gate|up|down)_proj))\.weight$")


def linear_prefixes(tensors):
    """The linear layers to quantize ("model.layers.0.self_attn.q_proj", ...), sorted."""
    out = []
    for name, t in tensors.items():
        m = LINEAR_RE.match(name)
        if m and len(t.shape) == 2:
            out.append(m.group(1))
    return sorted(out)


def weight_scheme(fmt):
    if fmt in ("compressed-tensors-channel", "fbgemm"):
        return "channel"
    if fmt in ("compressed-tensors-tensor-static", "fp8-static", "fp8-dynamic"):
        return "tensor"
    return "block"


def amax_to_scale(amax):
    return np.maximum(np.asarray(amax, dtype=np.float32) / np.float32(E4M3_MAX), np.float32(SCALE_FLOOR))


def block_amax(w, bn=BLOCK, bk=BLOCK):
    n, k = w.shape
    gn, gk = -(-n // bn), -(-k // bk)
    padded = np.zeros((gn * bn, gk * bk), dtype=np.float32)
    padded[:n, :k] = np.abs(w)
    return padded.reshape(gn, bn, gk, bk).max(axis=(1, 3))


def expand_blocks(s, n, k, bn=BLOCK, bk=BLOCK):
    return np.repeat(np.repeat(s, bn, axis=0), bk, axis=1)[:n, :k]


def quantize_weight(w, scheme):
    """(e4m3 codes [n, k], float32 scale array: [n, 1] / [] / [gn, gk])."""
    w = np.asarray(w, dtype=np.float32)
    n, k = w.shape
    if scheme == "channel":
        scale = amax_to_scale(np.abs(w).max(axis=1, keepdims=True))
        full = scale
    elif scheme == "tensor":
        scale = amax_to_scale(np.abs(w).max())
        full = scale
    else:
        scale = amax_to_scale(block_amax(w))
        full = expand_blocks(scale, n, k)
    return e4m3_encode(w / full), scale


def dequantize_weight(codes, scale, scheme):
    q = e4m3_decode(codes).astype(np.float32)
    n, k = q.shape
    s = np.asarray(scale, dtype=np.float32)
    if scheme == "channel":
        return q * s.reshape(n, 1)
    if scheme == "tensor":
        return q * s.reshape(())
    return q * expand_blocks(s, n, k)


def quantization_config(fmt):
    if fmt.startswith("compressed-tensors"):
        if fmt == "compressed-tensors-channel":
            weights = {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True,
                       "dynamic": False}
            acts = {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True, "symmetric": True}
        elif fmt == "compressed-tensors-tensor-static":
            weights = {"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": True,
                       "dynamic": False}
            acts = {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False, "symmetric": True}
        else:
            weights = {"num_bits": 8, "type": "float", "strategy": "block", "symmetric": True,
                       "dynamic": False, "block_structure": [BLOCK, BLOCK]}
            acts = {"num_bits": 8, "type": "float", "strategy": "group", "group_size": BLOCK,
                    "dynamic": True, "symmetric": True}
        return {"quant_method": "compressed-tensors", "format": "float-quantized",
                "quantization_status": "compressed",
                "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights,
                                              "input_activations": acts}},
                "ignore": ["lm_head"]}
    if fmt == "fp8-static":
        return {"quant_method": "fp8", "activation_scheme": "static", "ignored_layers": ["lm_head"]}
    if fmt == "fp8-dynamic":
        return {"quant_method": "fp8", "activation_scheme": "dynamic", "ignored_layers": ["lm_head"]}
    if fmt == "fbgemm":
        return {"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0,
                "modules_to_not_convert": ["lm_head"]}
    if fmt == "block":
        return {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [BLOCK, BLOCK]}
    raise ValueError("unknown format " + fmt)


def scale_tensor_name(fmt):
    return "weight_scale_inv" if fmt == "block" else "weight_scale"


def scale_storage(scale, fmt):
    """The scale as the format stores it (shape [n, 1], [1], [] or [gn, gk])."""
    s = np.asarray(scale, dtype=np.float32)
    if fmt == "compressed-tensors-tensor-static":
        s = s.reshape(1)
    elif fmt in ("fp8-static", "fp8-dynamic"):
        s = s.reshape(())
    return f32_tensor(s)


def static_activations(fmt):
    return fmt in ("compressed-tensors-tensor-static", "fp8-static")


# ---- calibration: a numpy forward pass --------------------------------------------------------------

DEFAULT_CALIBRATION = '''import os
import sys


def read_lines(path, encoding="utf-8"):
    """Return the stripped, non-empty lines of a text file."""
    with open(path, encoding=encoding) as handle:
        return [line.strip() for line in handle if line.strip()]


class Counter:
    def __init__(self, items=None):
        self.counts = {}
        for item in items or []:
            self.add(item)

    def add(self, item, amount=1):
        self.counts[item] = self.counts.get(item, 0) + amount
        return self.counts[item]

    def most_common(self, n=None):
        pairs = sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0]))
        return pairs if n is None else pairs[:n]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print("usage: count FILE...", file=sys.stderr)
        return 2
    total = Counter()
    for path in argv:
        if not os.path.isfile(path):
            raise FileNotFoundError(path)
        for word in " ".join(read_lines(path)).split():
            total.add(word.lower())
    for word, count in total.most_common(10):
        print("%8d %s" % (count, word))
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''


class Tokenizer:
    """Enough of tokenizer.json's BPE to tokenize a calibration text: SentencePiece-style (Llama-2:
    "▁" for spaces, byte fallback) exactly, byte-level BPE (Llama-3, GPT-2) with a simple split on
    whitespace and punctuation in place of the model's regex (calibration only needs typical tokens)."""

    def __init__(self, folder):
        with open(os.path.join(folder, "tokenizer.json"), encoding="utf-8") as f:
            tj = json.load(f)
        model = tj["model"]
        if model.get("type") != "BPE":
            raise ValueError("calibration tokenizer: only BPE tokenizer.json models are supported")
        self.vocab = model["vocab"]
        merges = model["merges"]
        self.ranks = {}
        for i, m in enumerate(merges):
            a, b = m.split(" ", 1) if isinstance(m, str) else m
            self.ranks[(a, b)] = i
        self.byte_fallback = bool(model.get("byte_fallback"))
        self.bos = None
        for tok in tj.get("added_tokens", []):
            if tok["content"] in ("<s>", "<|begin_of_text|>"):
                self.bos = tok["id"]
        if self.byte_fallback:
            self.byte_level = False
        else:
            self.byte_level = True
            printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
            mapping, extra = {}, 0
            for b in range(256):
                if b in printable:
                    mapping[b] = chr(b)
                else:
                    mapping[b] = chr(256 + extra)
                    extra += 1
            self.byte_map = mapping

    def _bpe(self, symbols):
        while len(symbols) > 1:
            best, at = None, -1
            for i in range(len(symbols) - 1):
                r = self.ranks.get((symbols[i], symbols[i + 1]))
                if r is not None and (best is None or r < best):
                    best, at = r, i
            if best is None:
                break
            merged = symbols[at] + symbols[at + 1]
            out, i = [], 0
            while i < len(symbols):
                if i < len(symbols) - 1 and symbols[i] + symbols[i + 1] == merged and \
                        self.ranks.get((symbols[i], symbols[i + 1])) == best:
                    out.append(merged)
                    i += 2
                else:
                    out.append(symbols[i])
                    i += 1
            symbols = out
        return symbols

    def _ids(self, symbols):
        ids = []
        for s in symbols:
            if s in self.vocab:
                ids.append(self.vocab[s])
            elif self.byte_fallback:
                ids.extend(self.vocab.get("<0x%02X>" % b, 0) for b in s.encode("utf-8"))
        return ids

    def encode(self, text):
        ids = [self.bos] if self.bos is not None else []
        if not self.byte_level:
            text = "▁" + text.replace(" ", "▁")
            # Newlines never merge with neighbours in this vocabulary family, so BPE on the pieces
            # between them gives the same tokens and keeps the pair search short.
            for piece in re.split(r"(\n)", text):
                if piece:
                    ids += self._ids(self._bpe(list(piece)))
        else:
            for piece in re.findall(r"\s*\w+|\s*[^\w\s]+|\s+", text):
                ids += self._ids(self._bpe([self.byte_map[b] for b in piece.encode("utf-8")]))
        return ids


def rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * w


def rope_tables(cfg, head_dim, positions):
    params = cfg.get("rope_parameters") or {}
    theta = float(params.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    inv = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    scaling = cfg.get("rope_scaling") or params
    if scaling and scaling.get("rope_type", scaling.get("type")) == "llama3":
        factor = scaling["factor"]
        lo, hi = scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        smooth = np.clip((old / wavelen - lo) / (hi - lo), 0.0, 1.0)
        inv = np.where(wavelen > old / lo, inv / factor,
                       np.where(wavelen < old / hi, inv, (1 - smooth) * inv / factor + smooth * inv))
    ang = np.outer(np.asarray(positions, dtype=np.float64), inv)
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def apply_rope(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def calibrate(cfg, tensors, ids):
    """{linear prefix: amax of its input} from a float32 forward pass over `ids`; also, under
    "model.layers.N.self_attn.k_cache" / ".v_cache", the amax of the keys (after RoPE) and values
    the KV cache stores."""
    get = lambda name: tensors[name].to_f32()
    hidden = cfg["hidden_size"]
    heads = cfg["num_attention_heads"]
    kv_heads = cfg.get("num_key_value_heads") or heads
    head_dim = cfg.get("head_dim") or hidden // heads
    eps = float(cfg.get("rms_norm_eps", 1e-6))
    act = cfg.get("hidden_act", "silu")
    if act not in ("silu", "swish"):
        raise ValueError("calibration: hidden_act %s is not supported" % act)
    t = len(ids)
    x = get("model.embed_tokens.weight")[np.asarray(ids)]
    cos, sin = rope_tables(cfg, head_dim, range(t))
    mask = np.triu(np.full((t, t), -np.inf, dtype=np.float32), 1)
    amax = {}
    group = heads // kv_heads
    for layer in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % layer
        h = rms_norm(x, get(p + "input_layernorm.weight"), eps)
        for name in ("q_proj", "k_proj", "v_proj"):
            amax[p + "self_attn." + name] = float(np.abs(h).max())
        q = (h @ get(p + "self_attn.q_proj.weight").T).reshape(t, heads, head_dim).transpose(1, 0, 2)
        k = (h @ get(p + "self_attn.k_proj.weight").T).reshape(t, kv_heads, head_dim).transpose(1, 0, 2)
        v = (h @ get(p + "self_attn.v_proj.weight").T).reshape(t, kv_heads, head_dim).transpose(1, 0, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        amax[p + "self_attn.k_cache"] = float(np.abs(k).max())
        amax[p + "self_attn.v_cache"] = float(np.abs(v).max())
        k, v = np.repeat(k, group, axis=0), np.repeat(v, group, axis=0)
        s = q @ k.transpose(0, 2, 1) / np.float32(math.sqrt(head_dim)) + mask
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        s /= s.sum(axis=-1, keepdims=True)
        o = (s @ v).transpose(1, 0, 2).reshape(t, heads * head_dim)
        amax[p + "self_attn.o_proj"] = float(np.abs(o).max())
        x = x + o @ get(p + "self_attn.o_proj.weight").T
        h = rms_norm(x, get(p + "post_attention_layernorm.weight"), eps)
        for name in ("gate_proj", "up_proj"):
            amax[p + "mlp." + name] = float(np.abs(h).max())
        g = h @ get(p + "mlp.gate_proj.weight").T
        u = h @ get(p + "mlp.up_proj.weight").T
        m = g * (0.5 + 0.5 * np.tanh(0.5 * g)) * u  # silu without exp overflow
        amax[p + "mlp.down_proj"] = float(np.abs(m).max())
        x = x + m @ get(p + "mlp.down_proj.weight").T
    return amax


# ---- the tool --------------------------------------------------------------------------------------

COPY_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json",
              "generation_config.json", "chat_template.jinja", "chat_template.json")


def quantize_folder(src, out, fmt, calibration_text=None, max_calibration_tokens=512, log=print,
                    kv_cache_scales=False):
    """Writes the FP8 checkpoint; returns {prefix: (scheme, source float32 weight)} for checks.
    kv_cache_scales: also per-layer FP8 KV cache scales (self_attn.k_scale / v_scale = calibrated
    amax / 448, the compressed-tensors kv_cache_scheme layout)."""
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    if "quantization_config" in cfg:
        raise ValueError("%s/config.json already has a quantization_config" % src)
    tensors = read_checkpoint(src)
    prefixes = linear_prefixes(tensors)
    if not prefixes:
        raise ValueError("%s: no q/k/v/o/gate/up/down_proj weights found" % src)
    input_amax = None
    if static_activations(fmt) or kv_cache_scales:
        text = calibration_text if calibration_text is not None else DEFAULT_CALIBRATION
        ids = Tokenizer(src).encode(text)[:max_calibration_tokens]
        log("calibrating input scales on %d tokens" % len(ids))
        input_amax = calibrate(cfg, tensors, ids)
    scheme = weight_scheme(fmt)
    result = {}
    quantized = {p + ".weight" for p in prefixes}
    outputs = {n: t for n, t in tensors.items() if n not in quantized}
    for p in prefixes:
        w = tensors[p + ".weight"]
        if w.dtype not in ("BF16", "F16", "F32"):
            raise ValueError("%s.weight: dtype %s is not a 16/32-bit float" % (p, w.dtype))
        wf = w.to_f32()
        codes, scale = quantize_weight(wf, scheme)
        outputs[p + ".weight"] = Tensor("F8_E4M3", wf.shape, codes.reshape(-1))
        outputs[p + "." + scale_tensor_name(fmt)] = scale_storage(scale, fmt)
        if static_activations(fmt):
            s = amax_to_scale(input_amax[p])
            outputs[p + ".input_scale"] = scale_storage(s, fmt)
        result[p] = (scheme, wf)
    if kv_cache_scales:
        for layer in range(cfg["num_hidden_layers"]):
            p = "model.layers.%d.self_attn." % layer
            outputs[p + "k_scale"] = f32_tensor(np.asarray(amax_to_scale(input_amax[p + "k_cache"]), np.float32))
            outputs[p + "v_scale"] = f32_tensor(np.asarray(amax_to_scale(input_amax[p + "v_cache"]), np.float32))
    os.makedirs(out, exist_ok=True)
    for name in COPY_FILES:
        if os.path.exists(os.path.join(src, name)):
            shutil.copyfile(os.path.join(src, name), os.path.join(out, name))
    cfg["quantization_config"] = quantization_config(fmt)
    if kv_cache_scales and fmt.startswith("compressed-tensors"):
        cfg["quantization_config"]["kv_cache_scheme"] = {
            "num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False, "symmetric": True}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    write_safetensors(os.path.join(out, "model.safetensors"), outputs, {"format": "pt"})
    for stale in ("model.safetensors.index.json",):
        if os.path.exists(os.path.join(out, stale)):
            os.remove(os.path.join(out, stale))
    log("wrote %s: %d linear layers in FP8 (%s), %d tensors" % (out, len(prefixes), fmt, len(outputs)))
    return result


def e4m3_half_ulp(v):
    """Half the e4m3 spacing at magnitude |v| (the rounding bound of a value in that binade)."""
    a = np.maximum(np.abs(np.asarray(v, dtype=np.float32)), np.float32(2.0 ** -6))
    return np.exp2(np.floor(np.log2(a)) - 4).astype(np.float32)


def dequantize_check(out, fmt, sources, log=print):
    """Reloads out/model.safetensors, dequantizes every linear weight and compares with the source.
    Returns (max abs error, max error relative to the group amax, bound violations)."""
    tensors = read_checkpoint(out)
    scheme = weight_scheme(fmt)
    worst_abs, worst_rel, violations = 0.0, 0.0, 0
    for p, (_, src) in sorted(sources.items()):
        w = tensors[p + ".weight"]
        s = tensors[p + "." + scale_tensor_name(fmt)]
        scale = s.to_f32()
        deq = dequantize_weight(w.data.reshape(w.shape), scale, scheme)
        err = np.abs(deq - src)
        n, k = src.shape
        full = {"channel": lambda: scale.reshape(n, 1) * np.ones((1, k), np.float32),
                "tensor": lambda: np.full((n, k), scale.reshape(()), np.float32),
                "block": lambda: expand_blocks(scale, n, k)}[scheme]()
        # |w/s - q| <= half an e4m3 ulp at |w/s| (equal at ties); the division and the product
        # q * s each add a float32 rounding, a few 2^-24 of |w|.
        bound = e4m3_half_ulp(src / full) * full + np.float32(2.0 ** -21) * np.abs(src) + np.float32(1e-30)
        violations += int((err > bound).sum())
        worst_abs = max(worst_abs, float(err.max()))
        worst_rel = max(worst_rel, float((err / (full * np.float32(E4M3_MAX))).max()))
    log("dequantize check: max abs error %.3g, max error / group amax %.3g (e4m3 half-ulp at the top "
        "binade: %.3g), %d elements beyond the half-ulp bound" % (worst_abs, worst_rel, 16.0 / 448, violations))
    return worst_abs, worst_rel, violations


def main(argv=None):
    ap = argparse.ArgumentParser(description="Quantize a Hugging Face Llama-family checkpoint to FP8 (e4m3).")
    ap.add_argument("src", help="source model folder (config.json + safetensors, bf16/f16/f32)")
    ap.add_argument("out", help="output folder")
    ap.add_argument("--format", required=True, choices=FORMATS)
    ap.add_argument("--calibration-file", help="text for static input scales (default: a built-in Python snippet)")
    ap.add_argument("--calibration-tokens", type=int, default=512, help="at most this many calibration tokens")
    ap.add_argument("--kv-cache-scales", action="store_true",
                    help="also write calibrated per-layer FP8 KV cache scales (self_attn.k_scale / v_scale)")
    ap.add_argument("--dequantize-check", action="store_true",
                    help="reload the output, dequantize and report the error against the source")
    args = ap.parse_args(argv)
    text = None
    if args.calibration_file:
        with open(args.calibration_file, encoding="utf-8") as f:
            text = f.read()
    log = lambda msg: print("quantize_fp8: " + msg, file=sys.stderr)
    try:
        sources = quantize_folder(args.src, args.out, args.format, text, args.calibration_tokens, log,
                                  args.kv_cache_scales)
        if args.dequantize_check:
            _, _, bad = dequantize_check(args.out, args.format, sources, log)
            if bad:
                log("FAIL: %d weights beyond the e4m3 rounding bound" % bad)
                return 1
    except (ValueError, KeyError, OSError) as e:
        log("error: %s" % e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
