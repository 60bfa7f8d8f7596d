"""OpenCL kernels of the argmax-byte pool pair (tfplus/ops/argmax_pool_ops.py), the NumPy ones in
kernels/numpy/argmax_pool.py their reference. Source: argmax_pool.cl, built after nn.cl. The backward pair is two
launches, as MaxPoolGrad and _FusedReluGradBiasAddGrad are: dx from the bytes, then fused.py's channel sums of dx."""
from __future__ import annotations

import numpy as np

from tfplus.kernels.opencl._common import kernel, plan, register
from tfplus.kernels.opencl.fused import channel_scratch, channel_sums
from tfplus.kernels.opencl.nn import _pool_attrs, _pool_geometry
from tfplus.ops import argmax_pool_ops  # noqa: F401  (the ops these kernels are registered for)
from tfplus.registry import register_workspace

SRC = ("nn.cl", "argmax_pool.cl")
F = ("float32", "float64")


def _windows(rt, name: str, x_shape, y_shape, attrs, dtype, n: int, *buffers) -> None:
    """Kernel `name` over n work-items of a 2x2 pool of x_shape into y_shape; planned once per shapes."""
    k, geo = plan(rt, (name, tuple(x_shape), tuple(y_shape), dtype, _pool_attrs(attrs)),
                  lambda: (kernel(rt, SRC, name, dtype), _pool_geometry(x_shape, y_shape, attrs)))
    rt.run1d(k, n, *buffers, np.int32(n), *geo)


@register("_MaxPoolArgmax", F, host=False)
def _pool_argmax(ctx, ins, outs, attrs):
    x, (y, argmax) = ins[0], outs
    _windows(ctx.runtime, "max_pool_2x2_argmax_relu", x.shape, y.shape, attrs, x.dtype, argmax.size, y, argmax, x)


@register("_ReluMaxPoolGradArgmax", F, host=False)
def _relu_pool_grad(ctx, ins, outs, attrs):
    (g, argmax), (dx, db) = ins, outs
    _windows(ctx.runtime, "relu_max_pool_grad_2x2_argmax", dx.shape, g.shape, attrs, g.dtype, g.size, dx, g, argmax)
    channel_sums(ctx, db, dx, attrs["data_format"])


@register_workspace("_ReluMaxPoolGradArgmax", "opencl")
def _relu_pool_grad_scratch(ins, attrs, compute_units):
    """channel_sums' partial sums over dx (twice g's rows and columns)."""
    g, fmt = ins[0], attrs["data_format"]
    n, *rest = g.shape
    dx = (n, rest[0], 2 * rest[1], 2 * rest[2]) if fmt == "NCHW" else (n, 2 * rest[0], 2 * rest[1], rest[2])
    return channel_scratch(dx, fmt, g.dtype, compute_units)
