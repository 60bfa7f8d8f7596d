"""NumPy kernels of the argmax pool pair (tfplus/ops/argmax_pool_ops.py): the reference for the opencl ones.
Within their declared scratch, as every pooling kernel here (kernels/numpy/nn.py): image slices of the batch,
one slice of masks (and of unpacked argmax) per thread. The nibbles are packed and unpacked per slice of rows in
NCHW order: for NCHW a slice is contiguous (no copies); NHWC's reshapes copy a slice (NumPy's own, bounded)."""
from __future__ import annotations

import numpy as np

from tfplus import threads
from tfplus.dtypes import FLOATS, bool_, uint8
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
    """One slice of the batch per thread, (images, C, H/2, W/2): a mask or the argmax of the pooled output's
    windows (x_shape: the pool's input)."""
    n, c, h, w = _nchw_shape(x_shape, fmt)
    ranges, most = _pool_shards((n, c, h, w))
    return (threads.slots(len(ranges)) * _slice_images(most, c * (h // 2) * (w // 2)), c, h // 2, w // 2)


def _pool_out_shape(x_shape, fmt: str) -> tuple:
    n, c, h, w = _nchw_shape(x_shape, fmt)
    return (n, c, h // 2, w // 2) if fmt == "NCHW" else (n, h // 2, w // 2, c)


@register_workspace("_MaxPoolArgmax", "cpu")
def _pool_argmax_ws(ins, attrs):
    """A byte per window (the output's shape), MaxPool's row maxima, the masks of windows whose maximum is not > 0."""
    fmt = attrs["data_format"]
    return [(_pool_out_shape(ins[0].shape, fmt), uint8)] + _max_pool_ws(ins, attrs) + \
        [(_masks_shape(ins[0].shape, fmt), bool_)]


@register_kernel("_MaxPoolArgmax", "cpu", FLOATS)
def _pool_argmax(ctx, ins, outs, attrs):
    """MaxPool with each window's first maximum (compact's kernel, into a byte per window), NO_GRADIENT where
    y > 0 fails, then two windows a byte."""
    fmt = attrs["data_format"]
    full = ctx.workspace(_pool_out_shape(ins[0].shape, fmt), uint8)
    max_pool_saving_argmax(ctx, ins, outs[:1], attrs, full)
    y, a, packed = _nchw(outs[0], fmt), _nchw(full, fmt), outs[1]
    masks = ctx.workspace(_masks_shape(ins[0].shape, fmt), bool_)
    ranges, _ = _pool_shards(_nchw_shape(ins[0].shape, fmt))
    m = masks.shape[0] // threads.slots(len(ranges))

    def body(slot, lo, hi):
        off = masks[slot * m:slot * m + hi - lo]
        np.greater(y[lo:hi], 0, out=off)
        np.logical_not(off, out=off)
        np.copyto(a[lo:hi], NO_GRADIENT, where=off)
        _pack(a[lo:hi].reshape(hi - lo, -1), packed[lo:hi])
    _over_slices(ranges, m, body)


def _pack(rows: np.ndarray, packed: np.ndarray) -> None:
    half = rows.shape[1] // 2
    np.left_shift(rows[:, 1:2 * half:2], 4, out=packed[:, :half])
    np.bitwise_or(packed[:, :half], rows[:, 0:2 * half:2], out=packed[:, :half])
    if rows.shape[1] % 2:
        packed[:, half] = rows[:, -1]


def _unpack(packed: np.ndarray, rows: np.ndarray) -> None:
    half = rows.shape[1] // 2
    np.bitwise_and(packed[:, :half], 15, out=rows[:, 0:2 * half:2])
    np.right_shift(packed[:, :half], 4, out=rows[:, 1:2 * half:2])
    if rows.shape[1] % 2:
        rows[:, -1] = packed[:, half]


def _grad_input_shape(g_shape, fmt: str) -> tuple:
    n, c, h, w = _nchw_shape(g_shape, fmt)
    return (n, c, 2 * h, 2 * w) if fmt == "NCHW" else (n, 2 * h, 2 * w, c)


@register_workspace("_ReluMaxPoolGradArgmax", "cpu")
def _relu_pool_grad_ws(ins, attrs):
    """A tap's mask per window and the windows' unpacked argmax (slices of the batch, _masks_shape)."""
    shape = _masks_shape(_grad_input_shape(ins[0].shape, attrs["data_format"]), attrs["data_format"])
    return [(shape, bool_), (shape, uint8)]


@register_kernel("_ReluMaxPoolGradArgmax", "cpu", FLOATS)
def _relu_pool_grad(ctx, ins, outs, attrs):
    """dx = g at each window's tap `argmax` (a multiply, as MaxPoolGrad's compact variant: -0. and NaN kept), 0 at
    the others; db = dx summed per channel."""
    fmt = attrs["data_format"]
    g, packed, dx = _nchw(ins[0], fmt), ins[1], _nchw(outs[0], fmt)
    shape = _masks_shape(outs[0].shape, fmt)
    masks, unpacked = ctx.workspace(shape, bool_), ctx.workspace(shape, uint8)
    ranges, _ = _pool_shards(dx.shape)
    m = masks.shape[0] // threads.slots(len(ranges))

    def body(slot, lo, hi):
        hit, s = masks[slot * m:slot * m + hi - lo], unpacked[slot * m:slot * m + hi - lo]
        _unpack(packed[lo:hi], s.reshape(hi - lo, -1))
        gs = g[lo:hi]
        for t, d in enumerate(_quarters(dx[lo:hi])):
            np.equal(s, t, out=hit)
            np.multiply(gs, hit, out=d, dtype=gs.dtype)
    _over_slices(ranges, m, body)
    np.sum(dx, axis=(0, 2, 3), out=outs[1])
