"""NumPy kernels of the argmax-byte pool pair (tfplus/ops/argmax_pool_ops.py): the reference for the opencl ones.
Within their declared scratch, as every pooling kernel here (kernels/numpy/nn.py): image slices of the batch,
one slice of bool masks per thread."""
from __future__ import annotations

import numpy as np

from tfplus import threads
from tfplus.dtypes import FLOATS, bool_
from tfplus.kernels.numpy.nn import (
    _max_pool_ws,
    _nchw,
    _nchw_shape,
    _over_slices,
    _pool_shards,
    _quarters,
    _slice_images,
    max_pool_saving_argmax,
)
from tfplus.ops.argmax_pool_ops import NO_GRADIENT
from tfplus.registry import register_kernel, register_workspace


def _masks_shape(x_shape, fmt: str) -> tuple:
    """One slice of the batch per thread: a bool mask of the pooled output's size (x_shape: the pool's input)."""
    n, c, h, w = _nchw_shape(x_shape, fmt)
    ranges, most = _pool_shards((n, c, h, w))
    return (threads.slots(len(ranges)) * _slice_images(most, c * (h // 2) * (w // 2)), c, h // 2, w // 2)


@register_workspace("_MaxPoolArgmax", "cpu")
def _pool_argmax_ws(ins, attrs):
    """MaxPool's row maxima, then the masks of the windows whose maximum is not > 0."""
    return _max_pool_ws(ins, attrs) + [(_masks_shape(ins[0].shape, attrs["data_format"]), bool_)]


@register_kernel("_MaxPoolArgmax", "cpu", FLOATS)
def _pool_argmax(ctx, ins, outs, attrs):
    """MaxPool with each window's first maximum (compact's kernel), then NO_GRADIENT where y > 0 fails."""
    fmt = attrs["data_format"]
    max_pool_saving_argmax(ctx, ins, outs[:1], attrs, outs[1])
    y, a = _nchw(outs[0], fmt), _nchw(outs[1], fmt)
    masks = ctx.workspace(_masks_shape(ins[0].shape, fmt), bool_)
    ranges, _ = _pool_shards(_nchw_shape(ins[0].shape, fmt))
    m = masks.shape[0] // threads.slots(len(ranges))

    def body(slot, lo, hi):
        off = masks[slot * m:slot * m + hi - lo]
        np.greater(y[lo:hi], 0, out=off)
        np.logical_not(off, out=off)
        np.copyto(a[lo:hi], NO_GRADIENT, where=off)
    _over_slices(ranges, m, body)


def _grad_input_shape(g_shape, fmt: str) -> tuple:
    n, c, h, w = _nchw_shape(g_shape, fmt)
    return (n, c, 2 * h, 2 * w) if fmt == "NCHW" else (n, 2 * h, 2 * w, c)


@register_workspace("_ReluMaxPoolGradArgmax", "cpu")
def _relu_pool_grad_ws(ins, attrs):
    """A tap's mask per window (the slices of _masks_shape)."""
    return [(_masks_shape(_grad_input_shape(ins[0].shape, attrs["data_format"]), attrs["data_format"]), bool_)]


@register_kernel("_ReluMaxPoolGradArgmax", "cpu", FLOATS)
def _relu_pool_grad(ctx, ins, outs, attrs):
    """dx = g at each window's tap `argmax` (a multiply, as MaxPoolGrad's compact variant: -0. and NaN kept), 0 at
    the others; db = dx summed per channel."""
    fmt = attrs["data_format"]
    g, a, dx = _nchw(ins[0], fmt), _nchw(ins[1], fmt), _nchw(outs[0], fmt)
    masks = ctx.workspace(_masks_shape(outs[0].shape, fmt), bool_)
    ranges, _ = _pool_shards(dx.shape)
    m = masks.shape[0] // threads.slots(len(ranges))

    def body(slot, lo, hi):
        hit, gs, s = masks[slot * m:slot * m + hi - lo], g[lo:hi], a[lo:hi]
        for t, d in enumerate(_quarters(dx[lo:hi])):
            np.equal(s, t, out=hit)
            np.multiply(gs, hit, out=d, dtype=gs.dtype)
    _over_slices(ranges, m, body)
    np.sum(dx, axis=(0, 2, 3), out=outs[1])
