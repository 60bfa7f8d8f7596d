"""OpenCL kernels of the fused recurrent cells (tfplus/ops/rnn_fused_ops.py): one launch per time step and
direction of the forward and one of the backward, one work-group per row of the batch. Source: rnn.cl."""
from __future__ import annotations

import numpy as np

from tfplus.kernels.opencl._common import kernel, register
from tfplus.ops import rnn_fused_ops  # noqa: F401  (the ops these kernels are registered for)

SRC = "rnn.cl"
F = ("float32", "float64")
_WG = 128  # work-items per row: a GRU of 128 units has 256 gate columns, two per work-item


def _launch(ctx, name: str, rows: int, *args, **defines) -> None:
    rt = ctx.runtime
    wg = min(_WG, rt.dev.max_wg)
    k = kernel(rt, SRC, name, args[0].dtype, **defines)
    rt.run(k, (rows * wg,), (wg,), *args)


@register("_FusedGRUCell", F, host=False)
def _gru_cell(ctx, ins, outs, attrs):
    x, h, *weights = ins
    _launch(ctx, "gru_cell", x.shape[0], *outs, x, h, *weights, np.int32(x.shape[1]), np.int32(h.shape[1]))


@register("_FusedGRUCellGrad", F, host=False)
def _gru_cell_grad(ctx, ins, outs, attrs):
    h = ins[1]
    d = ins[4].shape[0] - h.shape[1]
    _launch(ctx, "gru_cell_grad", h.shape[0], *outs, *ins, np.int32(d), np.int32(h.shape[1]))


@register("_FusedLSTMCell", F, host=False)
def _lstm_cell(ctx, ins, outs, attrs):
    x, h = ins[:2]
    _launch(ctx, "lstm_cell", x.shape[0], *outs, *ins, x.dtype.type(attrs["forget_bias"]), np.int32(x.shape[1]),
            np.int32(h.shape[1]))


@register("_FusedLSTMCellGrad", F, host=False)
def _lstm_cell_grad(ctx, ins, outs, attrs):
    dh_new, c, acts, tanh_c, w, *dc = ins
    n = dh_new.shape[1]
    _launch(ctx, "lstm_cell_grad", dh_new.shape[0], *outs, dh_new, c, acts, tanh_c, w,
            dc[0] if dc else None, np.int32(w.shape[0] - n), np.int32(n), HAS_DC=int(bool(dc)))
