"""OpenCL kernels for the fused ops of the graph rewrite (tfplus.optimize): bias + activation in one launch,
and the activation's gradient with the bias gradient in one launch. Source: fused.cl."""
from __future__ import annotations

import math

import numpy as np

from tfplus.dtypes import as_dtype
from tfplus.kernels.opencl._common import kernel, plan, register
from tfplus.ops.fused_ops import apply_groups
from tfplus.registry import find_kernel, register_variant
from tfplus.runtime.opencl import int8

SRC = "fused.cl"
F = ("float32", "float64")
# Work-items per channel in the fused gradient (a power of two: the group sums in a tree).
_WG = 256


def _geometry(shape, fmt: str) -> tuple[int, int, int]:
    """(outer, C, inner) of a tensor: NCHW is (N, C, H*W), NHWC (N*H*W, C, 1)."""
    if fmt == "NCHW":
        return shape[0], shape[1], math.prod(shape[2:])
    return math.prod(shape[:-1]), shape[-1], 1


@register("_FusedBiasAddRelu", F, host=False, inplace=(0,))
def _fused_bias_add_relu(ctx, ins, outs, attrs):
    rt, (x, b), out = ctx.runtime, ins, outs[0]

    def make():
        _, c, inner = _geometry(x.shape, attrs["data_format"])
        k = kernel(rt, SRC, "fused_bias_relu", x.dtype, RELU6=int(attrs["activation"] == "Relu6"))
        return (k, *rt.grid1d(out.size), np.int32(out.size), np.int32(c), np.int32(inner))
    k, g, loc, *scalars = plan(rt, ("fused_bias_relu", x.shape, x.dtype, attrs["data_format"], attrs["activation"]),
                               make)
    rt.run(k, g, loc, out, x, b, *scalars)


@register("_FusedReluGradBiasAddGrad", F, host=False, inplace=(0, 1))
def _fused_relu_grad_bias_add_grad(ctx, ins, outs, attrs):
    _relu_grad_bias(ctx, ins, outs, attrs, masked=False)


@register_variant("_FusedReluGradBiasAddGrad", "opencl", "compact")
def fused_relu_grad_applied(ctx, ins, outs, attrs) -> None:
    """The kernel when max_pool_grad_relu_from_argmax already applied the ReLU mask (planner.compact): dx is
    the gradient and the features are not read."""
    _relu_grad_bias(ctx, ins, outs, attrs, masked=True)


def _relu_grad_bias(ctx, ins, outs, attrs, masked: bool) -> None:
    rt, (g, f), (dx, db) = ctx.runtime, ins, outs

    def make():
        outer, c, inner = _geometry(g.shape, attrs["data_format"])
        wg = min(_WG, 1 << (rt.dev.max_wg.bit_length() - 1))
        k = kernel(rt, SRC, "fused_relu_grad_bias", g.dtype, RELU6=int(attrs["activation"] == "Relu6"),
                   MASKED=int(masked), WG=wg)
        return k, (c * wg,), (wg,), np.int32(outer), np.int32(c), np.int32(inner)
    k, gsize, lsize, *scalars = plan(rt, ("fused_relu_grad_bias", g.shape, g.dtype, attrs["data_format"],
                                          attrs["activation"], masked), make)
    rt.run(k, gsize, lsize, dx, db, g, f, *scalars)


# -- _FusedApply -------------------------------------------------------------------------------------------------
_SLOTS = 8  # variables per launch (fused.cl's kernels take 8 sets of buffers)
# update op -> (packed kernel, its per-variable inputs in the op's order, its scalar inputs, flag attrs)
_PACKED = {"ApplyGradientDescent": ("multi_gradient_descent", (0, 2), (1,), ()),
           "ApplyMomentum": ("multi_momentum", (0, 1, 3), (2, 4), ("use_nesterov",))}


@register("_FusedApply", F, host=False)
def _fused_apply(ctx, ins, outs, attrs):
    op_type = attrs["op"]
    groups = apply_groups(op_type, ins)
    if op_type not in _PACKED:  # one launch per variable, by the update's own kernel
        single = find_kernel(op_type, "opencl", as_dtype(ins[0].dtype))
        for group in groups:
            single(ctx, group, [group[0]], attrs)
        return
    rt = ctx.runtime
    name, per_var, scalars, flags = _PACKED[op_type]
    for lo in range(0, len(groups), _SLOTS):
        part = groups[lo:lo + _SLOTS]

        def make(part=part):
            ends = np.cumsum([g[0].size for g in part])
            ends = np.concatenate([ends, np.full(_SLOTS - len(part), ends[-1])])
            return (kernel(rt, SRC, name, part[0][0].dtype), *rt.grid1d(int(ends[-1])), int8(ends.tolist()),
                    *(np.int32(attrs.get(f, False)) for f in flags))
        k, g, loc, ends, *flag_args = plan(rt, (ctx.op, lo, tuple(g[0].size for g in part)), make)
        buffers = [grp[i] for grp in part + [part[0]] * (_SLOTS - len(part)) for i in per_var]
        rt.run(k, g, loc, *buffers, *(part[0][i] for i in scalars), ends, *flag_args)
