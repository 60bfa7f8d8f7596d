"""OpenCL kernels of the fused recurrent cells (tfplus/ops/rnn_fused_ops.py): one launch per time step and
direction of the forward and one of the backward, one work-group per row of the batch. Source: rnn.cl."""
from __future__ import annotations

import numpy as np

from tfplus.kernels.opencl._common import kernel, register
from tfplus.ops import rnn_fused_ops  # noqa: F401  (the ops these kernels are registered for)

SRC = "rnn.cl"
F = ("float32", "float64")
_WG = 128  # work-items per row: a GRU of 128 units has 256 gate columns, two per work-item


def _launch(ctx, name: str, rows: int, depth: int, units: int, local_row: int, *args, **defines) -> None:
    """One work-group per row; the kernel built for `depth` and `units`, with its rows (`local_row` elements) in
    local memory when they fit in half of it."""
    rt = ctx.runtime
    wg = min(_WG, rt.dev.max_wg)
    dt = args[0].dtype
    fits = local_row * dt.itemsize <= rt.info["local_mem_bytes"] // 2
    k = kernel(rt, SRC, name, dt, DEPTH=depth, UNITS=units, LOCAL_ROWS=int(fits), **defines)
    rt.run(k, (rows * wg,), (wg,), *args)


@register("_FusedGRUCell", F, host=False)
def _gru_cell(ctx, ins, outs, attrs):
    x, h = ins[:2]
    d, n = x.shape[1], h.shape[1]
    _launch(ctx, "gru_cell", x.shape[0], d, n, d + 3 * n, *outs, *ins)


@register("_FusedGRUCellGrad", F, host=False)
def _gru_cell_grad(ctx, ins, outs, attrs):
    h = ins[1]
    n = h.shape[1]
    _launch(ctx, "gru_cell_grad", h.shape[0], ins[4].shape[0] - n, n, 3 * n, *outs, *ins)


@register("_FusedLSTMCell", F, host=False)
def _lstm_cell(ctx, ins, outs, attrs):
    x, h = ins[:2]
    d, n = x.shape[1], h.shape[1]
    _launch(ctx, "lstm_cell", x.shape[0], d, n, d + 5 * n, *outs, *ins, x.dtype.type(attrs["forget_bias"]))


@register("_FusedLSTMCellGrad", F, host=False)
def _lstm_cell_grad(ctx, ins, outs, attrs):
    dh_new, c, acts, tanh_c, w, *dc = ins
    n = dh_new.shape[1]
    _launch(ctx, "lstm_cell_grad", dh_new.shape[0], w.shape[0] - n, n, 4 * n, *outs, dh_new, c, acts, tanh_c, w,
            dc[0] if dc else None, HAS_DC=int(bool(dc)))


_SLOTS = 8  # pairs per launch of matmul_sum (rnn.cl takes 8 sets of buffers)


@register("_FusedMatMulSum", F, host=False)
def _matmul_sum(ctx, ins, outs, attrs):
    """Launches of up to _SLOTS pairs of one number of rows, the first writing the sums, the others adding."""
    rt, n = ctx.runtime, len(ins) // 2
    k, m = outs[0].shape
    tile = 16 if rt.dev.max_wg >= 256 else 8
    kern = kernel(rt, SRC, "matmul_sum", outs[0].dtype, TILE=tile)
    launches, at = [], 0
    while at < n:
        end = at + 1
        while end < n and end - at < _SLOTS and ins[end].shape[0] == ins[at].shape[0]:
            end += 1
        launches.append((at, end))
        at = end
    for first, end in launches:
        a, g = list(ins[first:end]), list(ins[n + first:n + end])
        pad = [None] * (_SLOTS - len(a))
        rt.run(kern, (-(-m // tile) * tile, -(-k // tile) * tile), (tile, tile), *outs, *a, *pad, *g, *pad,
               np.int32(len(a)), np.int32(ins[first].shape[0]), np.int32(k), np.int32(m), np.int32(first == 0))
