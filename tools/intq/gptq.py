"""GPTQ (Frantar et al. 2022): quantize a weight column by column, spreading each column's rounding
error over the columns not yet quantized through the inverse Hessian of the layer's inputs.

  H = 2 X^T X / n + damp * mean(diag H) * I       X: the calibration inputs [n, in]
  U = upper Cholesky factor of H^-1
  for each column i (in blocks of 128): q_i = Q(w_i); e = (w_i - q_i) / U_ii; w_j -= e * U_ij (j > i)

act-order processes the columns by descending diag(H) and records every column's group in g_idx;
static groups fix each group's grid from the original weight before any update (g_idx stays
column // group_size, which formats without g_idx need).
"""

import numpy as np

from intq.grid import QuantizedLinear

BLOCK = 128


def hessian(x):
    """2 X^T X / n in float64 for inputs x [..., in]."""
    x = np.asarray(x, dtype=np.float64).reshape(-1, x.shape[-1])
    return 2.0 * (x.T @ x) / x.shape[0]


def inverse_cholesky(h, damp):
    """Upper Cholesky factor of (H + damp * mean(diag H) I)^-1."""
    h = h + damp * np.mean(np.diag(h)) * np.eye(len(h))
    hinv = np.linalg.inv(np.linalg.cholesky(h))  # L^-1
    return np.linalg.cholesky(hinv.T @ hinv).T


class _Groups:
    """Grids as GPTQ finds them: per group, from the current (error-updated) weights when the group's
    first column is reached, or all up front (static groups, channel-wise)."""

    def __init__(self, w, grid, perm, static):
        out, k = w.shape
        self.grid, self.perm, self.static = grid, perm, static
        self.gs = k if grid.group_size == -1 else grid.group_size
        self.num = k // self.gs
        self.scale = np.zeros((self.num, out), np.float32)
        self.zero = np.zeros((self.num, out), np.int32)
        self.col_group = np.zeros(k, np.int32)  # by position in processing order
        if static or grid.group_size == -1:
            for g in range(self.num):
                self.scale[g], self.zero[g] = grid.params(w[:, g * self.gs:(g + 1) * self.gs])

    def at(self, pos, upcoming):
        """(scale, zero) for the column at processing position pos; upcoming(): [out, >= gs], its
        current weights and the following ones."""
        if self.static:
            g = int(self.perm[pos]) // self.gs
        else:
            g = pos // self.gs
            if self.grid.group_size != -1 and pos % self.gs == 0:
                self.scale[g], self.zero[g] = self.grid.params(upcoming()[:, :self.gs])
        self.col_group[pos] = g
        return self.scale[g], self.zero[g]


def gptq(w, x, grid, act_order=False, static_groups=False, damp=0.01):
    """QuantizedLinear of w [out, in] given its calibration inputs x [..., in]."""
    w = np.array(w, dtype=np.float64)
    out, k = w.shape
    grid.num_groups(k)
    h = hessian(x)
    dead = np.diag(h) == 0
    h[dead, dead] = 1.0
    w[:, dead] = 0.0
    groups_src = w.astype(np.float32)
    perm = np.argsort(-np.diag(h), kind="stable") if act_order else np.arange(k)
    groups = _Groups(groups_src, grid, perm, static_groups)
    w, h = w[:, perm], h[perm][:, perm]
    u = inverse_cholesky(h, damp)
    q = np.zeros((out, k), np.int32)
    for a in range(0, k, BLOCK):
        b = min(a + BLOCK, k)
        w1, err = w[:, a:b].copy(), np.zeros((out, b - a))
        for i in range(b - a):
            ahead = lambda: np.concatenate([w1[:, i:], w[:, b:]], axis=1).astype(np.float32)
            s, z = groups.at(a + i, ahead)
            qi = grid.quantize(w1[:, i:i + 1].astype(np.float32), s[:, None], z[:, None])[:, 0]
            q[:, a + i] = qi
            deq = (qi.astype(np.float32) - z) * s
            e = (w1[:, i] - deq) / u[a + i, a + i]
            w1[:, i:] -= np.outer(e, u[a + i, a + i:b])
            err[:, i] = e
        w[:, b:] -= err @ u[a:b, b:]
    inv = np.empty(k, np.int64)
    inv[perm] = np.arange(k)
    return QuantizedLinear(q[:, inv], groups.scale, groups.zero, groups.col_group[inv], grid)
