"""The packers: a QuantizedLinear as each format stores it (tensor names, shapes, dtypes, nibble order,
zero-point convention) and the quantization_config each writes into config.json.

  awq               AutoAWQ GEMM: qweight I32 [in, out/8] packed along out in AWQ's interleaved nibble
                    order (nibble i of a word holds output 8c + AWQ_ORDER[i]); qzeros I32 [groups, out/8]
                    the same way, zeros as is; scales F16 [groups, out]. 4 bits only (AutoAWQ's packer).
  gptq              AutoGPTQ / GPTQModel: qweight I32 [in/pf, out] packed along in, nibble (byte) j of a
                    word = input row pf*r + j; qzeros I32 [groups, out/pf] packed along out, storing
                    z - 1 (v1) or z (gptq_v2); scales F16 [groups, out]; g_idx I32 [in]. 4 or 8 bits.
  ct-w4a16/w8a16    compressed-tensors pack-quantized: weight_packed I32 [out, in/pf] (value j of a word =
                    input pf*c + j, signed values stored offset by 2^(bits-1)); weight_scale [out, groups]
                    (channel: [out, 1]) in the model's dtype; weight_shape I64 [2]; asymmetric:
                    weight_zero_point I32 [out/pf, groups], packed along the output dim, same offset.
  ct-w8a8           compressed-tensors int-quantized: weight I8 [out, in], weight_scale [out, 1];
                    activations dynamic per token.
  autoround-gptq    auto-round's export, packing_format auto_round:auto_gptq: the gptq (v1) tensors.
  autoround-awq     auto-round's export, packing_format auto_round:auto_awq: the awq tensors.

pf = 32 / bits values per int32 word; the low bits hold the first value.
"""

import numpy as np

import quantize_fp8 as q8
from intq.grid import Grid, f32_to_bf16_bits

AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # nibble i of a word holds output column 8c + AWQ_ORDER[i]

FORMATS = ("awq", "gptq", "ct-w4a16", "ct-w8a16", "ct-w8a8", "autoround-gptq", "autoround-awq")


def pack_rows(values, bits):
    """uint values [rows, n] -> int32 [rows, n * bits / 32]; value j of word c = values[:, c*pf + j]."""
    v = np.asarray(values, dtype=np.int64)
    pf = 32 // bits
    rows, n = v.shape
    if n % pf:
        raise ValueError("cannot pack %d values of %d bits into whole int32 words" % (n, bits))
    if v.min(initial=0) < 0 or v.max(initial=0) >= (1 << bits):
        raise ValueError("value outside the %d-bit range" % bits)
    words = np.zeros((rows, n // pf), dtype=np.uint64)
    for j in range(pf):
        words |= v[:, j::pf].astype(np.uint64) << np.uint64(bits * j)
    return words.astype(np.uint32).view(np.int32)


def pack_awq(values):
    """uint4 [rows, out] -> int32 [rows, out/8] in AWQ's interleaved order."""
    v = np.asarray(values)
    rows, n = v.shape
    if n % 8:
        raise ValueError("AWQ packs 8 output columns per word; %d is not a multiple of 8" % n)
    inter = v.reshape(rows, n // 8, 8)[:, :, list(AWQ_ORDER)].reshape(rows, n)
    return pack_rows(inter, 4)


def tensor(dtype, array):
    a = np.ascontiguousarray(array)
    return q8.Tensor(dtype, a.shape, a.reshape(-1))


def scale_tensor(scale, dtype):
    s = np.ascontiguousarray(scale, dtype=np.float32)
    if dtype == "F16":
        return tensor("F16", s.astype(np.float16))
    if dtype == "BF16":
        return tensor("BF16", f32_to_bf16_bits(s))
    return tensor("F32", s)


# ---- per-format grids --------------------------------------------------------------------------

def grid_for(fmt, bits, group_size, sym, model_dtype="BF16", gptq_v2=False):
    """The Grid a format stores; raises ValueError naming what the format cannot hold."""
    if fmt not in FORMATS:
        raise ValueError("unknown format %r (one of %s)" % (fmt, ", ".join(FORMATS)))
    if fmt in ("awq", "autoround-awq"):
        if bits != 4:
            raise ValueError("%s stores 4-bit weights only (AutoAWQ's GEMM packer), not %d" % (fmt, bits))
        return Grid(4, group_size, sym, "F16")
    if fmt in ("gptq", "autoround-gptq"):
        v1 = not (fmt == "gptq" and gptq_v2)
        return Grid(bits, group_size, sym, "F16", zero_min=1 if v1 and not sym else 0)
    ct_dtype = model_dtype if model_dtype in ("BF16", "F16") else "F32"
    want = {"ct-w4a16": 4, "ct-w8a16": 8, "ct-w8a8": 8}[fmt]
    if bits != want:
        raise ValueError("%s stores %d-bit weights, not %d" % (fmt, want, bits))
    if fmt == "ct-w8a8":
        if group_size != -1 or not sym:
            raise ValueError("ct-w8a8 stores symmetric per-channel weights (--group-size -1 --sym)")
    return Grid(bits, group_size, sym, ct_dtype)


def check_shape(fmt, grid, name, shape):
    """Raises ValueError when a weight [out, in] cannot be packed whole into int32 words."""
    per = 32 // grid.bits
    out, k = shape
    grid.num_groups(k)
    if fmt != "ct-w8a8" and (out % per or k % per):
        raise ValueError("%s: shape %s: %s packs %d values per int32 along both dims" % (name, list(shape), fmt, per))


def needs_trivial_g_idx(fmt):
    """Formats without a g_idx tensor: act-order must use static groups (g_idx = column // group)."""
    return fmt != "gptq"


# ---- tensors ---------------------------------------------------------------------------------

def format_tensors(fmt, prefix, ql, gptq_v2=False):
    """{name: quantize_fp8.Tensor} of one quantized linear layer `prefix` (".weight" replaced)."""
    g = ql.grid
    if needs_trivial_g_idx(fmt) and not ql.trivial_g_idx():
        raise ValueError("%s.weight: %s has no g_idx; act-order needs static groups" % (prefix, fmt))
    if fmt in ("awq", "autoround-awq"):
        return {prefix + ".qweight": tensor("I32", pack_awq(ql.q.T)),
                prefix + ".qzeros": tensor("I32", pack_awq(ql.zero)),
                prefix + ".scales": scale_tensor(ql.scale, "F16")}
    if fmt in ("gptq", "autoround-gptq"):
        v1 = not (fmt == "gptq" and gptq_v2)
        stored = (ql.zero - 1) & g.maxq if v1 else ql.zero
        return {prefix + ".qweight": tensor("I32", pack_rows(ql.q, g.bits).T),
                prefix + ".qzeros": tensor("I32", pack_rows(stored, g.bits)),
                prefix + ".scales": scale_tensor(ql.scale, "F16"),
                prefix + ".g_idx": tensor("I32", ql.g_idx)}
    scale = scale_tensor(ql.scale.T, g.scale_dtype)  # [out, groups]
    if fmt == "ct-w8a8":
        return {prefix + ".weight": tensor("I8", (ql.q - 128).astype(np.int8)),
                prefix + ".weight_scale": scale}
    out = {prefix + ".weight_packed": tensor("I32", pack_rows(ql.q, g.bits)),
           prefix + ".weight_scale": scale,
           prefix + ".weight_shape": tensor("I64", np.asarray(ql.shape, dtype=np.int64))}
    if not g.sym:
        out[prefix + ".weight_zero_point"] = tensor("I32", pack_rows(ql.zero, g.bits).T)
    return out


# ---- quantization_config ---------------------------------------------------------------------

def quantization_config(fmt, grid, desc_act=False, static_groups=False, gptq_v2=False, method="rtn"):
    bits, gs, sym = grid.bits, grid.group_size, grid.sym
    if fmt == "awq":
        return {"quant_method": "awq", "bits": bits, "group_size": gs, "zero_point": True,
                "version": "gemm", "modules_to_not_convert": None}
    if fmt == "gptq":
        return {"quant_method": "gptq", "bits": bits, "group_size": gs, "desc_act": desc_act, "sym": sym,
                "static_groups": static_groups, "damp_percent": 0.01, "true_sequential": True,
                "lm_head": False, "pack_dtype": "int32",
                "checkpoint_format": "gptq_v2" if gptq_v2 else "gptq",
                "meta": {"quantizer": ["pagellm-quantize_int:%s" % method]}}
    if fmt in ("autoround-gptq", "autoround-awq"):
        return {"quant_method": "auto-round", "bits": bits, "group_size": gs, "sym": sym, "data_type": "int",
                "packing_format": "auto_round:auto_gptq" if fmt == "autoround-gptq" else "auto_round:auto_awq",
                "iters": 0, "autoround_version": "pagellm-quantize_int:%s" % method}
    return ct_config(fmt, grid)


def ct_config(fmt, grid):
    weights = {"num_bits": grid.bits, "type": "int", "symmetric": grid.sym, "dynamic": False,
               "strategy": "channel" if grid.group_size == -1 else "group",
               "group_size": None if grid.group_size == -1 else grid.group_size,
               "actorder": None, "block_structure": None, "observer": "minmax", "observer_kwargs": {}}
    acts = None
    form = "pack-quantized"
    if fmt == "ct-w8a8":
        form = "int-quantized"
        acts = {"num_bits": 8, "type": "int", "symmetric": True, "dynamic": True, "strategy": "token",
                "group_size": None, "actorder": None, "block_structure": None, "observer": None,
                "observer_kwargs": {}}
    return {"quant_method": "compressed-tensors", "format": form, "quantization_status": "compressed",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights,
                                          "input_activations": acts, "output_activations": None,
                                          "format": form}},
            "ignore": ["lm_head"], "kv_cache_scheme": None, "sparsity_config": {},
            "global_compression_ratio": None}
