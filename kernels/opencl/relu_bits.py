"""OpenCL kernels of a ReLU's mask as bits (tfplus/ops/relu_bits_ops.py), the NumPy ones in kernels/numpy/relu_bits.py
their reference. Source: relu_bits.cl. The gradient is two launches: dx from the bits, then fused.py's channel sums
of dx for the bias gradient."""
from __future__ import annotations

import numpy as np

from tfplus.kernels.opencl._common import kernel, register
from tfplus.kernels.opencl.fused import channel_scratch, channel_sums
from tfplus.ops.relu_bits_ops import bits_per_row
from tfplus.registry import register_workspace

SRC = "relu_bits.cl"
F = ("float32", "float64")


@register("_ReluMaskBits", F, host=False)
def _mask_bits(ctx, ins, outs, attrs):
    rt, f, bits = ctx.runtime, ins[0], outs[0]
    per_row = f.size // max(f.shape[0], 1)
    rt.run1d(kernel(rt, SRC, "relu_mask_bits", f.dtype), bits.size, bits, f, np.int32(bits.size), np.int32(per_row),
             np.int32(bits_per_row(f.shape)))


@register("_ReluGradBits", F, host=False)
def _relu_grad_bits(ctx, ins, outs, attrs):
    rt, (g, bits), (dx, db) = ctx.runtime, ins, outs
    per_row = g.size // max(g.shape[0], 1)
    rt.run1d(kernel(rt, SRC, "relu_grad_bits", g.dtype), dx.size, dx, g, bits, np.int32(dx.size),
             np.int32(per_row), np.int32(bits_per_row(g.shape)))
    channel_sums(ctx, db, dx, attrs["data_format"])


@register_workspace("_ReluGradBits", "opencl")
def _relu_grad_bits_scratch(ins, attrs, compute_units):
    """channel_sums' partial sums over dx."""
    return channel_scratch(ins[0].shape, attrs["data_format"], ins[0].dtype, compute_units)
