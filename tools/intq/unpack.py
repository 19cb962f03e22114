"""An independent reader of the integer formats: a written checkpoint's linear weights back to float32
[out, in], from config.json's quantization_config and the tensors alone (nothing of the quantizer's
state). It shares no code with packing.py on purpose: --dequantize-check and the tests compare the two.

Every weight dequantizes to (q - z) * s in float32 with the stored scale widened to float32; W8A8 to
q * s.
"""

import json
import os

import numpy as np

import quantize_fp8 as q8

AWQ_SHIFTS = (0, 16, 4, 20, 8, 24, 12, 28)  # output column 8c + j sits at bit AWQ_SHIFTS[j] of word c


def unpack_words(words, bits, axis):
    """int32 words -> the unsigned values they hold, spread along `axis` (value j of a word at bit
    bits*j, the low bits first)."""
    w = np.asarray(words).astype(np.int64) & 0xFFFFFFFF
    per = 32 // bits
    parts = [(w >> (bits * j)) & ((1 << bits) - 1) for j in range(per)]
    stacked = np.stack(parts, axis=axis + 1)  # [..., n, per, ...]
    shape = list(w.shape)
    shape[axis] *= per
    return stacked.reshape(shape)


def unpack_awq_words(words):
    """AWQ's interleaved nibbles: int32 [rows, n/8] -> uint4 [rows, n]."""
    w = np.asarray(words).astype(np.int64) & 0xFFFFFFFF
    rows, n8 = w.shape
    out = np.empty((rows, n8 * 8), dtype=np.int64)
    for j, shift in enumerate(AWQ_SHIFTS):
        out[:, j::8] = (w >> shift) & 0xF
    return out


def expect(tensors, name, shape=None, dtype=None):
    if name not in tensors:
        raise ValueError("tensor %s is missing" % name)
    t = tensors[name]
    if dtype is not None and t.dtype not in dtype:
        raise ValueError("tensor %s: dtype %s, expected %s" % (name, t.dtype, "/".join(dtype)))
    if shape is not None and list(t.shape) != list(shape):
        raise ValueError("tensor %s: shape %s, expected %s" % (name, list(t.shape), list(shape)))
    return t


def scales_f32(t):
    return t.to_f32().astype(np.float32)


def dequant_grouped(q, zeros, scales, g_idx, name):
    """q [out, in], zeros / scales [groups, out], g_idx [in] -> float32 [out, in]."""
    if g_idx.min(initial=0) < 0 or g_idx.max(initial=0) >= scales.shape[0]:
        raise ValueError("tensor %s.g_idx: group index out of range [0, %d)" % (name, scales.shape[0]))
    z = zeros[g_idx, :].T.astype(np.float32)
    s = scales[g_idx, :].T
    return (q.astype(np.float32) - z) * s


def read_awq(t, p, out, k, bits, gs):
    groups = 1 if gs == -1 else k // gs
    q = unpack_awq_words(expect(t, p + ".qweight", [k, out // 8], ("I32",)).data.reshape(k, out // 8)).T
    z = unpack_awq_words(expect(t, p + ".qzeros", [groups, out // 8], ("I32",)).data.reshape(groups, out // 8))
    s = scales_f32(expect(t, p + ".scales", [groups, out], ("F16", "BF16", "F32")))
    g_idx = np.arange(k) // (k if gs == -1 else gs)
    return dequant_grouped(q, z, s, g_idx, p)


def read_gptq(t, p, out, k, bits, gs, v2):
    per = 32 // bits
    groups = 1 if gs == -1 else k // gs
    q = unpack_words(expect(t, p + ".qweight", [k // per, out], ("I32",)).data.reshape(k // per, out), bits, 0).T
    zw = expect(t, p + ".qzeros", [groups, out // per], ("I32",)).data.reshape(groups, out // per)
    z = unpack_words(zw, bits, 1)
    if not v2:
        z = z + 1  # v1 stores z - 1
    s = scales_f32(expect(t, p + ".scales", [groups, out], ("F16", "BF16", "F32")))
    if p + ".g_idx" in t:
        g_idx = expect(t, p + ".g_idx", [k], ("I32",)).data.astype(np.int64)
    else:
        g_idx = np.arange(k) // (k if gs == -1 else gs)
    return dequant_grouped(q, z, s, g_idx, p)


def read_ct(t, p, out, k, args):
    bits, sym = args["num_bits"], args.get("symmetric", True)
    gs = k if args.get("strategy") == "channel" else args["group_size"]
    groups = k // gs
    s = scales_f32(expect(t, p + ".weight_scale", [out, groups], ("F16", "BF16", "F32"))).T
    if bits == 8 and p + ".weight" in t:  # int-quantized
        q = expect(t, p + ".weight", [out, k], ("I8",)).data.reshape(out, k).astype(np.int64)
        return dequant_grouped(q, np.zeros((groups, out), np.int64), s, np.arange(k) // gs, p)
    per = 32 // bits
    shape = expect(t, p + ".weight_shape", [2], ("I64", "I32")).data
    if list(shape) != [out, k]:
        raise ValueError("tensor %s.weight_shape: %s, expected %s" % (p, list(shape), [out, k]))
    q = unpack_words(expect(t, p + ".weight_packed", [out, k // per], ("I32",)).data.reshape(out, k // per), bits, 1)
    if sym:
        z = np.full((groups, out), 1 << (bits - 1), dtype=np.int64)
    else:
        zw = expect(t, p + ".weight_zero_point", [out // per, groups], ("I32",)).data.reshape(out // per, groups)
        z = unpack_words(zw, bits, 0).T
    return dequant_grouped(q, z, s, np.arange(k) // gs, p)


def describe(qc):
    """(kind, args) of a quantization_config: ("awq"|"gptq"|"ct", {...})."""
    method = qc.get("quant_method")
    if method in ("auto-round", "intel/auto-round"):
        fmt = qc.get("packing_format", "auto_round:auto_gptq")
        kind = "awq" if "awq" in fmt else "gptq"
        return kind, {"bits": qc["bits"], "group_size": qc["group_size"], "v2": False}
    if method == "awq":
        return "awq", {"bits": qc.get("bits", qc.get("w_bit")), "group_size": qc.get("group_size", qc.get("q_group_size"))}
    if method == "gptq":
        return "gptq", {"bits": qc["bits"], "group_size": qc["group_size"],
                        "v2": qc.get("checkpoint_format") == "gptq_v2"}
    if method == "compressed-tensors":
        return "ct", qc["config_groups"]["group_0"]["weights"]
    raise ValueError("quantization_config.quant_method %r is not an integer format" % method)


def dequantize_folder(folder, prefixes):
    """{prefix: float32 [out, in]} for the given linear prefixes [out, in] shapes."""
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    kind, args = describe(cfg["quantization_config"])
    bits = args.get("bits", args.get("num_bits"))
    if bits not in (4, 8):
        raise ValueError("quantization_config: %r-bit weights are not supported (4 or 8)" % bits)
    t = q8.read_checkpoint(folder)
    out = {}
    for p, (n, k) in prefixes.items():
        if kind == "awq":
            out[p] = read_awq(t, p, n, k, args["bits"], args["group_size"])
        elif kind == "gptq":
            out[p] = read_gptq(t, p, n, k, args["bits"], args["group_size"], args["v2"])
        else:
            out[p] = read_ct(t, p, n, k, args)
    return out
