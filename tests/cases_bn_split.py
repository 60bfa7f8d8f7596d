"""Op-table cases of batch norm in statistics passes (tfplus/ops/bn_split_ops.py, made by tfplus.planner.crossbatch):
each against the NumPy of the chain of primitive ops it stands for (Mean, SquaredDifference, Cast, Square, Sub, Add,
Rsqrt, Mul, the inference-mode batch norm, Relu / Relu6 and their gradients, Sum), NCHW and NHWC, odd shapes. Not
differentiable: they exist only in the planner's copy of a step after autodiff; the split steps they make are checked
against the unsplit step and TensorFlow in tests/planner/test_crossbatch.py."""
from __future__ import annotations

import numpy as np
from optable import Case

from tfplus.ops import bn_split_ops

EPS = float(np.float32(1e-3))  # as an attr of type float holds it
SHAPES = {"NCHW": (3, 5, 3, 7), "NHWC": (3, 7, 3, 5)}  # 5 channels, odd everywhere


def _layout(fmt):
    return ((0, 2, 3), (1, -1, 1, 1)) if fmt == "NCHW" else ((0, 1, 2), (1, 1, 1, -1))


def _mask(activation, z):
    """The activation's gradient's mask at its output z (ReluGrad, Relu6Grad)."""
    if activation == "Relu":
        return z > 0
    return (z > 0) & (z < 6) if activation == "Relu6" else np.ones(z.shape, bool)


def _activated(rng, shape, dt):
    """An activation's output: values clipped into [0, 6], many of them exactly 0 or 6."""
    return np.clip(rng.uniform(-1.5, 7.5, shape), 0, 6).astype(dt)


def ref_moments(x, fmt):
    axes, vec = _layout(fmt)
    mean = x.mean(axes)  # Mean, in x's dtype
    wide = mean.astype(np.float64)
    return wide, np.square(wide), np.square(x - mean.reshape(vec)).mean(axes)


def ref_from_moments(mean, square, within, scale):
    variance = within + (square - np.square(mean)).astype(within.dtype)
    inv_std = 1 / np.sqrt(variance + within.dtype.type(EPS))
    return mean.astype(within.dtype), variance, inv_std, scale * inv_std


def ref_apply(x, mean, inv_std, scale, offset, fmt, activation):
    vec = _layout(fmt)[1]
    y = (x - mean.reshape(vec)) * (scale * inv_std).reshape(vec) + offset.reshape(vec)
    return np.clip(y, 0, 6 if activation == "Relu6" else None) if activation else y


def ref_grad_sums(dy, x, mean, variance, *z, fmt, activation):
    axes, vec = _layout(fmt)
    g = dy * _mask(activation, z[0] if z else dy)
    x_hat = (x - mean.reshape(vec)) / np.sqrt(variance + variance.dtype.type(EPS)).reshape(vec)
    return (g * x_hat).sum(axes), g.sum(axes)


def ref_grad_apply(dy, x, mean, inv_std, scaled, d_scale, d_offset, *z, fmt, activation):
    vec = _layout(fmt)[1]
    n = x.size // mean.size
    g = dy * _mask(activation, z[0] if z else dy)
    x_hat = (x - mean.reshape(vec)) * inv_std.reshape(vec)
    dx = ((g - (d_offset / n).reshape(vec)) - x_hat * (d_scale / n).reshape(vec)) * scaled.reshape(vec)
    return dx, d_scale, d_offset


def _moments(fmt, dtype):
    shape = SHAPES[fmt]
    # float32: the float64 mean and square are a float32 mean's, as the chain's Cast of its Mean; the kernels
    # sum in another order (opencl: about each channel's first element)
    tol = {"float32": 1e-5, "float64": 2e-6} if dtype == "float32" else None
    return Case(f"bn_split_moments_{fmt.lower()}_{dtype[-2:]}",
                lambda x: bn_split_ops.batch_norm_moments(x, fmt),
                inputs=[lambda rng, dt: (rng.standard_normal(shape) * 2 + 3).astype(dt)],
                ref=lambda x: ref_moments(x, fmt), grad=False, dtypes=(dtype,), rtol=tol, atol=tol)


def _from_moments(c):
    def make(rng, dt):
        mean = rng.standard_normal(c) * 3
        return [mean, mean ** 2 + rng.uniform(0.1, 1, c), rng.uniform(0.5, 2, c).astype(dt),
                rng.standard_normal(c).astype(dt)]
    return Case(f"bn_split_from_moments_{c}",
                lambda m, s, w, scale: bn_split_ops.batch_norm_from_moments(m, s, w, scale, EPS),
                make=make, ref=ref_from_moments, grad=False)


def _vectors(c, rng, dt, positive=()):
    return [(rng.uniform(0.5, 2, c) if i in positive else rng.standard_normal(c)).astype(dt) for i in range(4)]


def _apply(fmt, activation):
    shape = SHAPES[fmt]
    c = shape[1 if fmt == "NCHW" else 3]

    def make(rng, dt):
        mean, inv_std, scale, offset = _vectors(c, rng, dt, positive=(1,))
        return [(rng.standard_normal(shape) * 3).astype(dt), mean, inv_std, scale * 3, offset + 2]
    return Case(f"bn_split_apply_{fmt.lower()}_{activation.lower() or 'none'}",
                lambda *ins: bn_split_ops.batch_norm_apply(*ins, fmt, activation), make=make,
                ref=lambda *a: ref_apply(*a, fmt, activation), grad=False)


def _grad_sums(fmt, activation):
    shape = SHAPES[fmt]
    c = shape[1 if fmt == "NCHW" else 3]

    def make(rng, dt):
        mean, variance = _vectors(c, rng, dt, positive=(1,))[:2]
        z = [_activated(rng, shape, dt)] if activation else []
        return [rng.standard_normal(shape).astype(dt), (rng.standard_normal(shape) + 1).astype(dt), mean,
                variance] + z

    def build(dy, x, mean, variance, *z):
        return bn_split_ops.batch_norm_grad_sums(dy, x, mean, variance, EPS, fmt, activation, *z)
    return Case(f"bn_split_grad_sums_{fmt.lower()}_{activation.lower() or 'none'}", build, make=make,
                ref=lambda *a: ref_grad_sums(*a, fmt=fmt, activation=activation), grad=False)


def _grad_apply(fmt, activation):
    shape = SHAPES[fmt]
    c = shape[1 if fmt == "NCHW" else 3]

    def make(rng, dt):
        mean, inv_std, scaled, _ = _vectors(c, rng, dt, positive=(1,))
        sums = [(rng.standard_normal(c) * 20).astype(dt) for _ in range(2)]
        z = [_activated(rng, shape, dt)] if activation else []
        return [rng.standard_normal(shape).astype(dt), (rng.standard_normal(shape) + 1).astype(dt), mean, inv_std,
                scaled] + sums + z

    def build(dy, x, mean, inv_std, scaled, d_scale, d_offset, *z):
        return bn_split_ops.batch_norm_grad_apply(dy, x, mean, inv_std, scaled, d_scale, d_offset, fmt,
                                                  activation, *z)
    return Case(f"bn_split_grad_apply_{fmt.lower()}_{activation.lower() or 'none'}", build, make=make,
                ref=lambda *a: ref_grad_apply(*a, fmt=fmt, activation=activation), grad=False)


CASES = [
    *(_moments(fmt, dtype) for fmt in SHAPES for dtype in ("float32", "float64")),
    _from_moments(5),
    _from_moments(300),  # more channels than a work-group
    *(_apply(fmt, act) for fmt, act in [("NCHW", ""), ("NHWC", ""), ("NCHW", "Relu6"), ("NHWC", "Relu")]),
    *(_grad_sums(fmt, act) for fmt, act in [("NCHW", ""), ("NHWC", ""), ("NCHW", "Relu6"), ("NHWC", "Relu")]),
    *(_grad_apply(fmt, act) for fmt, act in [("NCHW", ""), ("NHWC", ""), ("NCHW", "Relu"), ("NHWC", "Relu6")]),
]
