"""NumPy kernels of a ReLU's mask as bits (tfplus/ops/relu_bits_ops.py), the reference for the opencl ones. Slices of
rows keep the temporaries small: the mask of a slice in declared scratch, and np.packbits / np.unpackbits' own
arrays (an eighth of a slice, a slice of bytes) under NumPy's ufunc buffers."""
from __future__ import annotations

import numpy as np

from tfplus.dtypes import FLOATS, bool_
from tfplus.ops.relu_bits_ops import bits_per_row
from tfplus.registry import register_kernel, register_workspace

_SLICE = 1 << 14  # elements of a slice of rows (one row at least)


def _slice_rows(shape) -> int:
    per_row = bits_per_row(shape) * 8
    return max(1, min(shape[0], _SLICE // per_row))


@register_workspace("_ReluMaskBits", "cpu")
def _mask_bits_ws(ins, attrs):
    """A slice's mask, its rows padded to whole bytes."""
    shape = ins[0].shape
    return [((_slice_rows(shape), bits_per_row(shape) * 8), bool_)]


@register_kernel("_ReluMaskBits", "cpu", FLOATS)
def _mask_bits(ctx, ins, outs, attrs):
    f, bits = ins[0], outs[0]
    n, per_row = f.shape[0], f.size // max(f.shape[0], 1)
    f2 = f.reshape(n, per_row)
    mask = ctx.workspace(_mask_bits_ws(ins, attrs)[0][0], bool_)
    m = mask.shape[0]
    mask[:, per_row:] = False
    for lo in range(0, n, m):
        hi = min(n, lo + m)
        w = mask[:hi - lo]
        np.greater(f2[lo:hi], 0, out=w[:, :per_row])
        bits[lo:hi] = np.packbits(w, axis=1, bitorder="little")


@register_kernel("_ReluGradBits", "cpu", FLOATS)
def _relu_grad_bits(ctx, ins, outs, attrs):
    """dx = g * mask (a multiply, as ReluGrad's kernel: -0. and NaN kept), db its sums per channel."""
    (g, bits), (dx, db) = ins, outs
    n, per_row = g.shape[0], g.size // max(g.shape[0], 1)
    g2, dx2 = g.reshape(n, per_row), dx.reshape(n, per_row)
    m = _slice_rows(g.shape)
    for lo in range(0, n, m):
        hi = min(n, lo + m)
        mask = np.unpackbits(bits[lo:hi], axis=1, count=per_row, bitorder="little")
        np.multiply(g2[lo:hi], mask, out=dx2[lo:hi])
    np.sum(dx, axis=(0, 2, 3) if attrs["data_format"] == "NCHW" else (0, 1, 2), out=db)
