"""OpenCL kernels of batch norm in statistics passes (tfplus/ops/bn_split_ops.py, made by tfplus.planner.crossbatch):
a micro-batch's moments in one pass over x (fused.py's channel sums) and a per-channel finish; the per-channel
vectors from the merged moments in one launch; the normalization with its activation in one; the gradient's two
sums in one pass; dx in one. Source: nn.cl (beside the batch norm's own)."""
from __future__ import annotations

import numpy as np

from tfplus.kernels.opencl._common import kernel, register
from tfplus.kernels.opencl.fused import channel_scratch, channel_sums
from tfplus.kernels.opencl.nn import _BN_ACT, _bn_layout
from tfplus.ops import bn_split_ops  # noqa: F401  (the ops these kernels are registered for)
from tfplus.registry import register_workspace

SRC = "nn.cl"
F = ("float32", "float64")


def _fp64(rt, op_type: str) -> None:
    """The moments are float64 whatever x's dtype (crossbatch's merge wants their digits)."""
    if not rt.info["fp64"]:
        raise NotImplementedError(f"{op_type}: {rt.describe()} has no float64 support (cl_khr_fp64), which batch "
                                  "norm under micro-batching needs for its merged moments; use the cpu device")


@register("_BatchNormMoments", F, host=False)
def _moments(ctx, ins, outs, attrs):
    rt, x, (mean, square, within) = ctx.runtime, ins[0], outs
    _fp64(rt, "_BatchNormMoments")
    c, s, count = _bn_layout(x, attrs)
    s2 = ctx.workspace((c,), x.dtype)
    # one pass: the sums of x - K and (x - K)^2, K each channel's first element (fused.cl MODE 7)
    channel_sums(ctx, within, x, attrs["data_format"], bn=(s2, x, x, x.dtype.type(0)), shifted=True)
    rt.run1d(kernel(rt, SRC, "bn_moments_finish", x.dtype), max(c, 1), mean, square, within, s2, x, np.int32(c),
             np.int32(s), x.dtype.type(count))


@register_workspace("_BatchNormMoments", "opencl")
def _moments_scratch(ins, attrs, compute_units):
    """The second sum's (C,), then the partials of the two sums (fused.py channel_sums)."""
    x = ins[0]
    c = x.shape[1 if attrs["data_format"] == "NCHW" else 3]
    return [((c,), x.dtype)] + channel_scratch(x.shape, attrs["data_format"], x.dtype, compute_units, sums=2)


@register("_BatchNormFromMoments", F, host=False)
def _from_moments(ctx, ins, outs, attrs):
    rt, (mean_wide, square_wide, within, scale) = ctx.runtime, ins
    _fp64(rt, "_BatchNormFromMoments")
    c = scale.size
    rt.run1d(kernel(rt, SRC, "bn_from_moments", scale.dtype), max(c, 1), *outs, mean_wide, square_wide, within,
             scale, np.int32(c), scale.dtype.type(attrs["epsilon"]))


@register("_BatchNormApply", F, host=False)
def _apply(ctx, ins, outs, attrs):
    rt, (x, mean, inv_std, scale, offset), y = ctx.runtime, ins, outs[0]
    c, s, _ = _bn_layout(x, attrs)
    rt.run1d(kernel(rt, SRC, "bn_normalize", x.dtype, BN_ACT=_BN_ACT[attrs["activation"]]), x.size, y, x, mean,
             inv_std, scale, offset, np.int32(x.size), np.int32(c), np.int32(s))


@register("_BatchNormGradSums", F, host=False)
def _grad_sums(ctx, ins, outs, attrs):
    """d offset = sum(g), d scale = sum(g * (x - mean)) / sqrt(variance + eps), g = dy masked at z: fused.cl's
    channel sums MODE 3 (6 with z), one pass."""
    (dy, x, mean, variance, *z), (d_scale, d_offset) = ins, outs
    channel_sums(ctx, d_offset, dy, attrs["data_format"], f=x, bn=(d_scale, mean, variance, x.dtype.type(
        attrs["epsilon"])), mask=z[0] if z else None, activation=attrs["activation"] or "Relu")


@register_workspace("_BatchNormGradSums", "opencl")
def _grad_sums_scratch(ins, attrs, compute_units):
    """The partials of its two sums (fused.py channel_sums)."""
    return channel_scratch(ins[1].shape, attrs["data_format"], ins[1].dtype, compute_units, sums=2)


@register("_BatchNormGradApply", F, host=False)
def _grad_apply(ctx, ins, outs, attrs):
    rt, (dy, x, mean, inv_std, scaled, d_scale, d_offset, *z) = ctx.runtime, ins
    c, s, count = _bn_layout(x, attrs)
    rt.run1d(kernel(rt, SRC, "bn_grad_split", x.dtype, BN_ACT=_BN_ACT[attrs["activation"]],
                    **({"MASK_X": 1} if attrs.get("mask_from_x") else {})), max(x.size, c),
             *outs, dy, x, mean, inv_std, scaled, d_scale, d_offset, z[0] if z else dy, np.int32(x.size),
             np.int32(c), np.int32(s), x.dtype.type(count))
