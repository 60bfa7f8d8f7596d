"""OpenCL kernels for nn ops other than convolutions (conv.py) and elementwise activations (elementwise.py):
BiasAdd, pooling and its gradients, Softmax, LogSoftmax and the fused cross-entropies. Source: nn.cl."""
from __future__ import annotations

import math

import numpy as np
import pyopencl.cltypes as cltypes

from tfplus.kernels.opencl._common import CTYPE, contiguous_strides, kernel, plan, register
from tfplus.kernels.opencl.elementwise import fill
from tfplus.kernels.opencl.fused import channel_scratch, channel_sums
from tfplus.registry import register_variant, register_workspace
from tfplus.runtime.opencl import int8
from tfplus.tensor_shape import conv_output

SRC = "nn.cl"
F = ("float32", "float64")


@register("BiasAdd", F, inplace=(0,))
def _bias_add(ctx, ins, outs, attrs):
    rt, (x, b), out = ctx.runtime, ins, outs[0]

    def make():
        nchw = attrs.get("data_format", "NHWC") == "NCHW" and x.ndim > 2
        inner = math.prod(x.shape[2:]) if nchw else 1
        return (kernel(rt, SRC, "bias_add", x.dtype), *rt.grid1d(out.size), np.int32(out.size),
                np.int32(b.size), np.int32(inner))
    k, g, loc, *scalars = plan(rt, ("bias_add", x.shape, x.dtype, attrs.get("data_format")), make)
    rt.run(k, g, loc, out, x, b, *scalars)


# -- pooling -------------------------------------------------------------------------------------------------
def _pool_geometry(x_shape, y_shape, attrs):
    """(C, int8 geo, int2 pad, int4 x strides, int4 y strides) as nn.cl's pooling kernels take them."""
    nchw = attrs["data_format"] == "NCHW"
    hw = (lambda v: (v[2], v[3])) if nchw else (lambda v: (v[1], v[2]))
    (h, w), (oh, ow) = hw(x_shape), hw(y_shape)
    (kh, kw), (sh, sw) = hw(attrs["ksize"]), hw(attrs["strides"])
    ph, pw = conv_output(h, kh, sh, attrs["padding"])[1], conv_output(w, kw, sw, attrs["padding"])[1]

    def strides(shape):
        s = contiguous_strides(shape)
        return cltypes.make_int4(*((s[0], s[1], s[2], s[3]) if nchw else (s[0], s[3], s[1], s[2])))
    c = x_shape[1] if nchw else x_shape[3]
    return (np.int32(c), int8((h, w, oh, ow, kh, kw, sh, sw)), cltypes.make_int2(ph, pw), strides(x_shape),
            strides(y_shape))


def _pool_attrs(attrs) -> tuple:
    return tuple(attrs["ksize"]), tuple(attrs["strides"]), attrs["padding"], attrs["data_format"]


def _pool(rt, name: str, x_shape, y_shape, attrs, dtype, n: int, *buffers, relu: bool = False) -> None:
    """Runs pooling kernel `name` over n work-items; plans (kernel, geometry) once per shapes and attrs. `relu`:
    max_pool_grad masked by the ReLU gradient at its input (nn.cl RELU)."""
    def make():
        geo = _pool_geometry(x_shape, y_shape, attrs)
        k = name
        h, w, oh, ow, kh, kw, sh, sw = (int(geo[1][f"s{i}"]) for i in range(8))
        if name == "max_pool_grad" and (kh, kw, sh, sw) == (2, 2, 2, 2) and (h, w) == (2 * oh, 2 * ow):
            k = "max_pool_grad_2x2"  # windows tile the input exactly: one work-item per window
        return kernel(rt, SRC, k, dtype, **({"RELU": 1} if relu else {})), geo, k != name
    k, geo, per_window = plan(rt, (name, x_shape, y_shape, dtype, _pool_attrs(attrs), relu), make)
    n = math.prod(y_shape) if per_window else n
    rt.run1d(k, n, *buffers, np.int32(n), *geo)


@register("MaxPool", F)
def _max_pool(ctx, ins, outs, attrs):
    x, y = ins[0], outs[0]
    _pool(ctx.runtime, "max_pool", x.shape, y.shape, attrs, x.dtype, y.size, y, x)


@register("MaxPoolGrad", F)
def _max_pool_grad(ctx, ins, outs, attrs):
    (x, y, g), dx = ins, outs[0]
    _pool(ctx.runtime, "max_pool_grad", x.shape, y.shape, attrs, x.dtype, dx.size, dx, x, y, g)


@register("_FusedMaxPoolGradReluGrad", F)
def _fused_max_pool_grad_relu_grad(ctx, ins, outs, attrs):
    """ReluGrad(MaxPoolGrad(x, y, g), x) in the pool gradient's one pass (x, the pool's input, is the ReLU's
    output)."""
    (x, y, g), dx = ins, outs[0]
    _pool(ctx.runtime, "max_pool_grad", x.shape, y.shape, attrs, x.dtype, dx.size, dx, x, y, g, relu=True)


@register("MaxPoolGradGrad", F)
def _max_pool_grad_grad(ctx, ins, outs, attrs):
    (x, y, g), out = ins, outs[0]
    _pool(ctx.runtime, "max_pool_grad_grad", x.shape, y.shape, attrs, x.dtype, out.size, out, x, y, g)


@register("AvgPool", F)
def _avg_pool(ctx, ins, outs, attrs):
    x, y = ins[0], outs[0]
    _pool(ctx.runtime, "avg_pool", x.shape, y.shape, attrs, x.dtype, y.size, y, x)


@register("AvgPoolGrad", F)
def _avg_pool_grad(ctx, ins, outs, attrs):
    g, dx = ins[1], outs[0]
    _pool(ctx.runtime, "avg_pool_grad", dx.shape, g.shape, attrs, g.dtype, dx.size, dx, g)


# -- compact saved state (tfplus.planner.compact): the kernel variants the planned executor calls ---------------
# Declared as the "compact" variants of MaxPool, MaxPoolGrad and ReluGrad (tfplus.registry.register_variant). Same
# results as the NumPy variants in kernels/numpy/nn.py, bit for bit; no scratch (one work-item per window).
@register_variant("MaxPool", "opencl", "compact")
def max_pool_saving_argmax(ctx, ins, outs, attrs, argmax) -> None:
    """The 2x2 / stride 2 MaxPool that also writes each window's first maximum (0..3, scan order) into
    `argmax` (uint8, the output's shape)."""
    x, y = ins[0], outs[0]
    _pool(ctx.runtime, "max_pool_2x2_argmax", x.shape, y.shape, attrs, x.dtype, y.size, y, argmax, x)


@register_variant("MaxPoolGrad", "opencl", "compact")
def max_pool_grad_relu_from_argmax(ctx, ins, outs, attrs, argmax) -> None:
    """ReluGrad(MaxPoolGrad(x, y, g), x) of a ReLU output x, from the argmax instead of x (not read): g goes
    to each window's first maximum where y > 0 (x > 0 there exactly when y > 0), 0 elsewhere."""
    (_, y, g), dx = ins, outs[0]
    _pool(ctx.runtime, "max_pool_grad_2x2_argmax", dx.shape, y.shape, attrs, y.dtype, y.size, dx, y, g, argmax)


@register_variant("ReluGrad", "opencl", "compact")
def relu_grad_applied(ctx, ins, outs, attrs) -> None:
    """ReluGrad of a gradient that max_pool_grad_relu_from_argmax already masked: a copy, or nothing when
    the output is written over it (the plan then gives both the very same buffer)."""
    ctx.runtime.copy(outs[0], ins[0])  # nothing when they are the same memory


# -- softmax and cross-entropies -----------------------------------------------------------------------------
def _softmax(log_out: bool):
    def launch(ctx, ins, outs, attrs):
        rt, x, out = ctx.runtime, ins[0], outs[0]
        cols = x.shape[-1] if x.ndim else 1
        rows = x.size // max(cols, 1)
        rt.run1d(kernel(rt, SRC, "softmax", x.dtype), rows, out, x, np.int32(rows), np.int32(cols),
                 np.int32(log_out), local=64)
    return launch


register("Softmax", F)(_softmax(False))
register("LogSoftmax", F)(_softmax(True))


@register("SparseSoftmaxCrossEntropyWithLogits", F)
def _sparse_xent(ctx, ins, outs, attrs):
    rt, (x, labels), (loss, backprop) = ctx.runtime, ins, outs
    rows, cols = x.shape
    k = kernel(rt, SRC, "sparse_xent", x.dtype, TI=CTYPE[labels.dtype.name])
    rt.run1d(k, rows, loss, backprop, x, labels, np.int32(rows), np.int32(cols), local=64)


@register("SoftmaxCrossEntropyWithLogits", F)
def _xent(ctx, ins, outs, attrs):
    rt, (x, labels), (loss, backprop) = ctx.runtime, ins, outs
    rows, cols = x.shape
    k = kernel(rt, SRC, "xent", x.dtype)
    rt.run1d(k, rows, loss, backprop, x, labels, np.int32(rows), np.int32(cols), local=64)


# -- LeakyRelu, LRN, FusedBatchNorm ---------------------------------------------------------------------------
def _scalar(dtype, v):
    return np.dtype(dtype).type(v)


@register("LeakyRelu", F)
def _leaky_relu(ctx, ins, outs, attrs):
    rt, x, out = ctx.runtime, ins[0], outs[0]
    rt.run1d(kernel(rt, SRC, "leaky_relu", x.dtype), out.size, out, x, _scalar(x.dtype, attrs["alpha"]),
             np.int32(out.size))


@register("LeakyReluGrad", F)
def _leaky_relu_grad(ctx, ins, outs, attrs):
    rt, (g, x), out = ctx.runtime, ins, outs[0]
    rt.run1d(kernel(rt, SRC, "leaky_relu_grad", x.dtype), out.size, out, g, x, _scalar(x.dtype, attrs["alpha"]),
             np.int32(out.size))


def _lrn_scalars(x, attrs) -> tuple:
    return (np.int32(x.size), np.int32(x.shape[-1]), np.int32(attrs["depth_radius"]),
            *(_scalar(x.dtype, attrs[k]) for k in ("bias", "alpha", "beta")))


@register("LRN", F)
def _lrn(ctx, ins, outs, attrs):
    rt, x, y = ctx.runtime, ins[0], outs[0]
    rt.run1d(kernel(rt, SRC, "lrn", x.dtype), x.size, y, x, *_lrn_scalars(x, attrs))


@register("LRNGrad", F)
def _lrn_grad(ctx, ins, outs, attrs):
    rt, (g, x, y), dx = ctx.runtime, ins, outs[0]
    rt.run1d(kernel(rt, SRC, "lrn_grad", x.dtype), x.size, dx, g, x, y, *_lrn_scalars(x, attrs))


def _bn_layout(x, attrs) -> tuple[int, int, int]:
    """(C, S, count): channels, the stride of a channel in elements, elements per channel."""
    if attrs["data_format"] == "NCHW":
        c, s = x.shape[1], x.shape[2] * x.shape[3]
    else:
        c, s = x.shape[3], 1
    return c, s, x.size // max(c, 1)


# The activation a fused batch norm (_FusedBatchNormRelu, _FusedBatchNormReluGrad) applies: nn.cl's BN_ACT.
_BN_ACT = {"": 0, "Relu": 1, "Relu6": 2}


def _fused_batch_norm(ctx, ins, outs, attrs):
    rt, (x, scale, offset, mean, variance) = ctx.runtime, ins
    y, batch_mean, batch_var, saved_mean, saved_var = outs[:5]
    # V3's reserve_space_3 is zeroed by a kernel (an upload from the host would keep the step from replaying its
    # recorded launches: every batch-norm model's step, op by op): bn_stats_finish's in training, else fill's.
    reserve = outs[5] if len(outs) == 6 else None
    c, s, count = _bn_layout(x, attrs)
    eps = _scalar(x.dtype, attrs["epsilon"])
    if attrs["is_training"]:
        f = attrs.get("exponential_avg_factor", 1.0)
        old_mean, old_var = (mean, variance) if f != 1.0 else (saved_mean, saved_var)  # not read when f == 1
        fmt = attrs["data_format"]
        # one pass: the sums of x - K and (x - K)^2, K each channel's first element (fused.cl MODE 7)
        channel_sums(ctx, saved_mean, x, fmt, bn=(saved_var, x, x, x.dtype.type(0)), shifted=True)
        rt.run1d(kernel(rt, SRC, "bn_stats_finish", x.dtype), max(c, 1), batch_mean, batch_var, saved_mean,
                 saved_var, old_mean, old_var, saved_mean if reserve is None else reserve, x, np.int32(c),
                 np.int32(s), _scalar(x.dtype, count), _scalar(x.dtype, f),
                 _scalar(x.dtype, count / max(count - 1, 1)), np.int32(reserve is not None))
        m, v = saved_mean, saved_var
    else:
        if reserve is not None:
            fill(rt, reserve, 0)
        for dst in (batch_mean, saved_mean):
            rt.copy(dst, mean)
        for dst in (batch_var, saved_var):
            rt.copy(dst, variance)
        m, v = mean, variance
    act = _BN_ACT[attrs.get("activation", "")]
    rt.run1d(kernel(rt, SRC, "bn_apply", x.dtype, BN_ACT=act), x.size, y, x, scale, offset, m, v,
             np.int32(x.size), np.int32(c), np.int32(s), eps)


register("FusedBatchNorm", F)(_fused_batch_norm)
register("FusedBatchNormV3", F)(_fused_batch_norm)
register("_FusedBatchNormRelu", F, host=False)(_fused_batch_norm)


def _fused_batch_norm_scratch(ins, attrs, compute_units):
    """Training: the partials of its two per-channel sums, made in one pass (fused.py channel_sums)."""
    if not attrs["is_training"]:
        return []
    return channel_scratch(ins[0].shape, attrs["data_format"], ins[0].dtype, compute_units, sums=2)


register_workspace("FusedBatchNorm", "opencl")(_fused_batch_norm_scratch)
register_workspace("FusedBatchNormV3", "opencl")(_fused_batch_norm_scratch)
register_workspace("_FusedBatchNormRelu", "opencl")(_fused_batch_norm_scratch)


def _fused_batch_norm_grad(ctx, ins, outs, attrs):
    """Also _FusedBatchNormReluGrad's: its last input, the activation's output z, masks dy in both passes."""
    rt, (dy, x, scale, m, v) = ctx.runtime, ins[:5]
    dx, dscale, doffset = outs[:3]
    c, s, count = _bn_layout(x, attrs)
    eps = _scalar(x.dtype, attrs["epsilon"])
    activation = attrs.get("activation", "")
    z = ins[6] if activation else None
    channel_sums(ctx, doffset, dy, attrs["data_format"], f=x, bn=(dscale, m, v, eps), mask=z,
                 activation=activation or "Relu")
    rt.run1d(kernel(rt, SRC, "bn_grad_apply", x.dtype, BN_ACT=_BN_ACT[activation]), x.size, dx, dy, x, scale, m,
             v, dscale, doffset, dy if z is None else z, np.int32(x.size), np.int32(c), np.int32(s),
             np.int32(count), eps, np.int32(attrs["is_training"]))


register("FusedBatchNormGrad", F)(_fused_batch_norm_grad)
register("FusedBatchNormGradV3", F)(_fused_batch_norm_grad)
register("_FusedBatchNormReluGrad", F, host=False)(_fused_batch_norm_grad)


def _fused_batch_norm_grad_scratch(ins, attrs, compute_units):
    """The partials of its two per-channel sums (fused.py channel_sums)."""
    return channel_scratch(ins[1].shape, attrs["data_format"], ins[1].dtype, compute_units, sums=2)


register_workspace("FusedBatchNormGrad", "opencl")(_fused_batch_norm_grad_scratch)
register_workspace("FusedBatchNormGradV3", "opencl")(_fused_batch_norm_grad_scratch)
register_workspace("_FusedBatchNormReluGrad", "opencl")(_fused_batch_norm_grad_scratch)
