"""NumPy kernels of batch norm in statistics passes (tfplus/ops/bn_split_ops.py, made by tfplus.planner.crossbatch):
the reference the OpenCL kernels are checked against. Each does what the chain of primitive ops it stands for did
(crossbatch's _norm and _norm_grad before them), with the same NumPy calls in the same order, so that the step's
bits on the cpu are the chain's. Their full-size scratch is declared (register_workspace): the planner's bytes
stay exact.
"""
from __future__ import annotations

import numpy as np

from tfplus.dtypes import FLOATS, as_dtype
from tfplus.ops import bn_split_ops  # noqa: F401  (the ops these kernels are registered for)
from tfplus.registry import WORKSPACES, find_kernel, register_kernel, register_workspace


def _layout(x: np.ndarray, fmt: str) -> tuple[tuple, tuple]:
    """(the axes a norm reduces over, the shape a per-channel vector broadcasts against x in)."""
    return ((0, 2, 3), (1, -1, 1, 1)) if fmt == "NCHW" else ((0, 1, 2), (1, 1, 1, -1))


def _activate(ctx, y: np.ndarray, activation: str) -> None:
    if activation:
        find_kernel(activation, "cpu", as_dtype(y.dtype))(ctx, [y], [y], {})


def _masked(ctx, dy: np.ndarray, z: list, attrs) -> np.ndarray:
    """dy masked by the activation's gradient at its output z (attr activation), in scratch; dy itself without."""
    if not attrs.get("activation"):
        return dy
    g = ctx.workspace(dy.shape, as_dtype(dy.dtype))
    find_kernel(attrs["activation"] + "Grad", "cpu", as_dtype(dy.dtype))(ctx, [dy, z[0]], [g], attrs)
    return g


def _masked_ws(ins, attrs) -> list:
    """The scratch of _masked: the masked gradient, then what the activation's gradient kernel asks for."""
    if not attrs.get("activation"):
        return []
    own = WORKSPACES.get((attrs["activation"] + "Grad", "cpu"))
    return [(ins[0].shape, ins[0].dtype)] + (own([ins[0], ins[-1]], attrs) if own else [])


# -- _BatchNormMoments -----------------------------------------------------------------------------------------
@register_workspace("_BatchNormMoments", "cpu")
def _moments_ws(ins, attrs):
    return [(ins[0].shape, ins[0].dtype)]  # the squared deviations


@register_kernel("_BatchNormMoments", "cpu", FLOATS)
def _moments(ctx, ins, outs, attrs):
    (x,), (mean, square, within) = ins, outs
    axes, vec = _layout(x, attrs["data_format"])
    np.mean(x, axis=axes, out=within)  # the micro-batch's mean in T first, as Mean gave it
    np.copyto(mean, within, casting="unsafe")
    np.square(mean, out=square)
    d = ctx.workspace(x.shape, as_dtype(x.dtype))
    np.subtract(x, within.reshape(vec), out=d)
    np.square(d, out=d)
    np.mean(d, axis=axes, out=within)


# -- _BatchNormFromMoments: per-channel vectors (no scratch of the batch's size) -----------------------------------
@register_kernel("_BatchNormFromMoments", "cpu", FLOATS)
def _from_moments(ctx, ins, outs, attrs):
    mean_wide, square_wide, within, scale = ins
    mean, variance, inv_std, scaled = outs
    np.copyto(mean, mean_wide, casting="unsafe")
    between = square_wide - np.square(mean_wide)  # float64: the spread of the micro-batches' means
    np.add(within, between.astype(within.dtype), out=variance)
    np.add(variance, within.dtype.type(attrs["epsilon"]), out=inv_std)
    np.sqrt(inv_std, out=inv_std)
    np.reciprocal(inv_std, out=inv_std)
    np.multiply(scale, inv_std, out=scaled)


# -- _BatchNormApply ---------------------------------------------------------------------------------------------
@register_kernel("_BatchNormApply", "cpu", FLOATS)
def _apply(ctx, ins, outs, attrs):
    (x, mean, inv_std, scale, offset), y = ins, outs[0]
    vec = _layout(x, attrs["data_format"])[1]
    np.subtract(x, mean.reshape(vec), out=y)
    np.multiply(y, (scale * inv_std).reshape(vec), out=y)
    np.add(y, offset.reshape(vec), out=y)
    _activate(ctx, y, attrs["activation"])


# -- _BatchNormGradSums ------------------------------------------------------------------------------------------
@register_workspace("_BatchNormGradSums", "cpu")
def _grad_sums_ws(ins, attrs):
    return _masked_ws(ins, attrs) + [(ins[1].shape, ins[1].dtype)]  # then dy * x_hat


@register_kernel("_BatchNormGradSums", "cpu", FLOATS)
def _grad_sums(ctx, ins, outs, attrs):
    (dy, x, mean, variance, *z), (d_scale, d_offset) = ins, outs
    axes, vec = _layout(x, attrs["data_format"])
    g = _masked(ctx, dy, z, attrs)
    inv_std = np.add(variance, variance.dtype.type(attrs["epsilon"]))
    np.sqrt(inv_std, out=inv_std)
    np.reciprocal(inv_std, out=inv_std)
    p = ctx.workspace(x.shape, as_dtype(x.dtype))
    np.subtract(x, mean.reshape(vec), out=p)
    np.multiply(p, inv_std.reshape(vec), out=p)  # x_hat
    np.multiply(g, p, out=p)
    np.sum(p, axis=axes, out=d_scale)
    np.sum(g, axis=axes, out=d_offset)


# -- _BatchNormGradApply -----------------------------------------------------------------------------------------
@register_workspace("_BatchNormGradApply", "cpu")
def _grad_apply_ws(ins, attrs):
    if attrs.get("mask_from_x"):  # z remade from x first (its own scratch), then as with z given
        return [(ins[1].shape, ins[1].dtype)] + _masked_ws(list(ins[:-1]) + [ins[1]], attrs)
    ws = _masked_ws(ins, attrs)
    return ws if ws else [(ins[0].shape, ins[0].dtype)]  # dy - d_offset / n: in the masked dy's scratch, with one


@register_kernel("_BatchNormGradApply", "cpu", FLOATS)
def _grad_apply(ctx, ins, outs, attrs):
    dy, x, mean, inv_std, scaled, d_scale, d_offset, *z = ins
    dx = outs[0]
    np.copyto(outs[1], d_scale)
    np.copyto(outs[2], d_offset)
    vec = _layout(x, attrs["data_format"])[1]
    count = x.dtype.type(x.size // max(mean.size, 1))  # the values per channel of these rows
    if attrs.get("mask_from_x"):
        # z as _apply made it, with scale * inv_std as from_moments gave it (`scaled`): the same bits
        y = ctx.workspace(x.shape, as_dtype(x.dtype))
        np.subtract(x, mean.reshape(vec), out=y)
        np.multiply(y, scaled.reshape(vec), out=y)
        np.add(y, z[0].reshape(vec), out=y)
        _activate(ctx, y, attrs["activation"])
        z = [y]
    g = _masked(ctx, dy, z, attrs)
    centered = g if g is not dy else ctx.workspace(dy.shape, as_dtype(dy.dtype))
    np.subtract(x, mean.reshape(vec), out=dx)
    np.multiply(dx, inv_std.reshape(vec), out=dx)  # x_hat
    np.multiply(dx, (d_scale / count).reshape(vec), out=dx)
    np.subtract(g, (d_offset / count).reshape(vec), out=centered)
    np.subtract(centered, dx, out=dx)
    np.multiply(dx, scaled.reshape(vec), out=dx)
