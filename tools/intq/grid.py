"""Quantization grids: per-group scales and zero points, round-to-nearest, and the record every method
produces (QuantizedLinear) that every format packs.

Unsigned convention throughout: q in [0, 2^bits - 1], zero z in the same range, and the dequantized
weight is (q - z) * s in float32, s being the scale exactly as stored (F16 / BF16 widened). Symmetric
grids fix z = 2^(bits-1), so formats that store signed values (compressed-tensors) store q - 2^(bits-1).
"""

import numpy as np

STORAGE_DTYPES = ("F16", "BF16", "F32")


def round_to_dtype(x, dtype):
    """float32 values rounded (to nearest even) to F16 / BF16 / F32 and widened back to float32."""
    x = np.asarray(x, dtype=np.float32)
    if dtype == "F32":
        return x.copy()
    if dtype == "F16":
        return x.astype(np.float16).astype(np.float32)
    if dtype == "BF16":
        return bf16_bits_to_f32(f32_to_bf16_bits(x))
    raise ValueError("unknown scale dtype %s" % dtype)


def f32_to_bf16_bits(x):
    """uint16 bfloat16 codes of float32 values (round to nearest even; inputs are finite here)."""
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((b + np.uint32(0x7FFF) + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_bits_to_f32(bits):
    return (np.asarray(bits, dtype=np.uint32) << 16).view(np.float32)


def smallest_scale(dtype):
    """The smallest positive scale the storage dtype holds (keeps q = w / s finite)."""
    return {"F16": 2.0 ** -24, "BF16": 2.0 ** -133, "F32": 2.0 ** -149}[dtype]


class Grid:
    """How weights are quantized: bits, group size along the input dim (-1: one group, per channel),
    symmetric or not, the dtype scales are stored in, and the smallest zero point the format can store
    (GPTQ v1 stores z - 1, so z = 0 would wrap; its writers ask for zero_min 1)."""

    def __init__(self, bits, group_size, sym, scale_dtype="F16", zero_min=0):
        if bits not in (4, 8):
            raise ValueError("bits must be 4 or 8, not %r" % bits)
        if group_size != -1 and group_size <= 0:
            raise ValueError("group size must be positive or -1, not %r" % group_size)
        self.bits, self.group_size, self.sym = bits, group_size, sym
        self.scale_dtype, self.zero_min = scale_dtype, zero_min
        self.maxq = (1 << bits) - 1

    def num_groups(self, in_features):
        if self.group_size == -1:
            return 1
        if in_features % self.group_size:
            raise ValueError("input size %d is not a multiple of the group size %d" % (in_features, self.group_size))
        return in_features // self.group_size

    def params(self, w):
        """(scale, zero) float32 / int32 [rows] for the rows of w [rows, cols] (one group each), as
        GPTQ's quantizer computes them: the range widened to include 0, scale = range / maxq (symmetric:
        2 * amax / maxq with z = 2^(bits-1)), zero = round(-min / scale); scale as stored."""
        w = np.asarray(w, dtype=np.float32)
        lo = np.minimum(w.min(axis=1), 0.0)
        hi = np.maximum(w.max(axis=1), 0.0)
        if self.sym:
            hi = np.maximum(-lo, hi)
            lo = np.where(hi > 0, -hi, lo)
        empty = (lo == 0) & (hi == 0)
        lo, hi = np.where(empty, -1.0, lo), np.where(empty, 1.0, hi)
        scale = round_to_dtype((hi - lo) / np.float32(self.maxq), self.scale_dtype)
        scale = np.maximum(scale, np.float32(smallest_scale(self.scale_dtype)))
        if self.sym:
            zero = np.full(w.shape[0], (self.maxq + 1) // 2, dtype=np.int32)
        else:
            zero = np.rint(-lo / scale).astype(np.int64)
            zero = np.clip(zero, self.zero_min, self.maxq).astype(np.int32)
        return scale.astype(np.float32), zero

    def quantize(self, w, scale, zero):
        """q = clamp(round(w / s) + z) for w [rows, cols] with per-row (or broadcastable) s, z."""
        q = np.rint(np.asarray(w, dtype=np.float32) / scale) + zero
        return np.clip(q, 0, self.maxq).astype(np.int32)


class QuantizedLinear:
    """One quantized weight W [out, in]: q int32 [out, in] (unsigned), scale float32 [groups, out] (the
    stored values), zero int32 [groups, out], g_idx int32 [in] (the group of every input column)."""

    def __init__(self, q, scale, zero, g_idx, grid):
        self.q, self.scale, self.zero = q, scale, zero
        self.g_idx, self.grid = np.asarray(g_idx, dtype=np.int32), grid

    @property
    def shape(self):
        return self.q.shape

    def dequantize(self):
        """float32 [out, in]: (q - z[g_idx]) * s[g_idx], the product rounded once in float32."""
        z = self.zero[self.g_idx].T.astype(np.float32)
        s = self.scale[self.g_idx].T
        return (self.q.astype(np.float32) - z) * s

    def trivial_g_idx(self):
        return bool(np.array_equal(self.g_idx, default_g_idx(self.q.shape[1], self.grid)))


def default_g_idx(in_features, grid):
    if grid.group_size == -1:
        return np.zeros(in_features, dtype=np.int32)
    return (np.arange(in_features) // grid.group_size).astype(np.int32)


def rtn(w, grid):
    """Round-to-nearest: every group's own min/max grid."""
    w = np.asarray(w, dtype=np.float32)
    out, k = w.shape
    ng = grid.num_groups(k)
    gs = k // ng
    blocks = w.reshape(out, ng, gs).transpose(1, 0, 2).reshape(ng * out, gs)
    scale, zero = grid.params(blocks)
    q = grid.quantize(blocks, scale[:, None], zero[:, None])
    q = q.reshape(ng, out, gs).transpose(1, 0, 2).reshape(out, k)
    return QuantizedLinear(q, scale.reshape(ng, out), zero.reshape(ng, out), default_g_idx(k, grid), grid)
