"""AWQ (Lin et al. 2023), as AutoAWQ applies it: per input channel scales s = mean|x|^alpha (alpha on a
grid in [0, 1), normalized so max(s) * min(s) = 1) multiply the weights of the layers reading x and
divide the operation producing x (the RMSNorm weight, v_proj's rows for o_proj when attention has as
many KV heads as heads, up_proj's rows for down_proj); alpha is chosen by the mean squared error of
the group's outputs on the calibration inputs after round-to-nearest. Then every group's clipping range
(weights but q_proj / k_proj) is shrunk where that lowers the output error of the group's slice.

Output error of a weight slice D = Q(W) - W over inputs X is tr(D X^T X D^T), computed from the Gram
matrix of the slice's inputs, so the search never repeats the matmul with the calibration tokens.
"""

import numpy as np

from intq.grid import Grid, round_to_dtype, rtn

MAX_SHRINK, CLIP_STEPS = 0.5, 20


def folded_names(model):
    """Tensors other than quantized linears that scaling changed (norm weights), sorted."""
    return sorted(model.folded)


def search_scales(x, ws, grid, n_grid):
    """The best per-channel scale [in] for inputs x [N, in] feeding the weights ws ([out_j, in]).
    The output error of a candidate, (x / s) Q(W s)^T - x W^T = x E^T with E = Q(W s) / s - W, is
    tr(E G E^T) with G = x^T x: one [out, in] x [in, in] product per candidate instead of one over the
    calibration tokens."""
    x = x.reshape(-1, x.shape[-1]).astype(np.float32)
    w = np.concatenate(ws, axis=0)
    gram = x.T @ x
    x_mean = np.abs(x).mean(axis=0)
    best, best_err = np.ones(x.shape[1], np.float32), None
    for i in range(n_grid):
        alpha = i / n_grid
        s = np.maximum(x_mean, 1e-8) ** alpha
        s = np.maximum(s / np.sqrt(s.max() * s.min()), 1e-4).astype(np.float32)
        e = rtn(w * s, grid).dequantize() / s - w
        err = float(((e @ gram) * e).sum())
        if best_err is None or err < best_err:
            best, best_err = s, err
    return best


def apply_scales(model, prev, names, s, prev_is_norm):
    """Divides `prev` (a norm weight [in] or a linear's rows [in, k]) by s and multiplies the input
    columns of `names` by the scale that actually results: a norm is stored in its source dtype, so the
    weights take norm / stored_norm, keeping the product exact in float32."""
    pw = model.w(prev)
    if prev_is_norm:
        stored = round_to_source(model, prev, pw / s)
        eff = np.where(stored != 0, pw / np.where(stored != 0, stored, 1), s).astype(np.float32)
        model.weights[prev] = stored
        model.folded.add(prev)
    else:
        model.weights[prev] = (pw / s[:, None]).astype(np.float32)
        eff = s
    for n in names:
        model.weights[n] = (model.w(n) * eff[None, :]).astype(np.float32)


def round_to_source(model, name, a):
    dt = model.tensors[name].dtype
    return round_to_dtype(a, dt if dt in ("F16", "BF16") else "F32")


def scale_layer(model, i, x, grid, n_grid):
    """Searches and folds the AWQ scales of layer i (input x [B, T, hidden])."""
    p = "model.layers.%d." % i
    _, ins = model.layer(i, x)
    qkv = [p + "self_attn.%s_proj.weight" % n for n in ("q", "k", "v")]
    s = search_scales(ins["qkv"], [model.w(n) for n in qkv], grid, n_grid)
    apply_scales(model, p + "input_layernorm.weight", qkv, s, True)
    if model.kv_heads == model.heads:
        o = p + "self_attn.o_proj.weight"
        s = search_scales(ins["o"], [model.w(o)], grid, n_grid)
        apply_scales(model, p + "self_attn.v_proj.weight", [o], s, False)
    gu = [p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"]
    s = search_scales(ins["gateup"], [model.w(n) for n in gu], grid, n_grid)
    apply_scales(model, p + "post_attention_layernorm.weight", gu, s, True)
    d = p + "mlp.down_proj.weight"
    s = search_scales(ins["down"], [model.w(d)], grid, n_grid)
    apply_scales(model, p + "mlp.up_proj.weight", [d], s, False)


def clipped_rtn(w, x, grid):
    """RTN after AWQ's clipping search: per output row and group, the symmetric clip max(|w|) * r,
    r in (0.5, 1], with the least output error on inputs x [..., in]."""
    w = np.asarray(w, dtype=np.float32)
    x = x.reshape(-1, x.shape[-1]).astype(np.float64)
    out, k = w.shape
    gs = k if grid.group_size == -1 else grid.group_size
    row_grid = Grid(grid.bits, -1, grid.sym, grid.scale_dtype, grid.zero_min)
    clipped = w.copy()
    for a in range(0, k, gs):
        wg = w[:, a:a + gs]
        gram = (x[:, a:a + gs].T @ x[:, a:a + gs]) / x.shape[0]
        amax = np.abs(wg).max(axis=1, keepdims=True)
        best_err = np.full(out, np.inf)
        for step in range(int(CLIP_STEPS * MAX_SHRINK)):
            mx = amax * (1 - step / CLIP_STEPS)
            c = np.clip(wg, -mx, mx)
            d = (rtn(c, row_grid).dequantize() - wg).astype(np.float64)
            err = ((d @ gram) * d).sum(axis=1)
            better = err < best_err
            best_err[better] = err[better]
            clipped[better, a:a + gs] = c[better]
    return rtn(clipped, grid)
