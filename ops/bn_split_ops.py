"""Batch norm in statistics passes (tfplus.planner.crossbatch): a training-mode batch norm split into micro-batches,
its statistics merged over them, in a few fused launches a micro-batch instead of a chain of primitive ops each.

Only the planner's planning copy of a step creates them (crossbatch._norm / _norm_grad), after autodiff, so they are
declared not differentiable; their names start with '_' as the graph rewrite's fused ops do. Per-channel vectors are
(C,), x is rank 4 in attr data_format (NHWC or NCHW):

- _BatchNormMoments(x): a micro-batch's mean and mean square (float64, Chan's parallel formula merges them without
  cancellation) and its variance about its own mean;
- _BatchNormFromMoments(the merged three, scale): mean, variance, 1 / sqrt(variance + epsilon), scale times it;
- _BatchNormApply(x, mean, inv_std, scale, offset): activation((x - mean) * (scale * inv_std) + offset);
- _BatchNormGradSums(dy, x, mean, variance[, z]): d scale = sum(dy * x_hat) and d offset = sum(dy), over the rows
  it is given (a micro-batch's);
- _BatchNormGradApply(dy, x, mean, inv_std, scaled, d_scale, d_offset[, z]): dx = scaled * (dy - d_offset / n -
  x_hat * d_scale / n), n the values per channel of the rows it is given, and d_scale and d_offset as given:
  FusedBatchNormGrad's outputs from its sums. Fed the micro-batches' sums averaged (crossbatch merges them as
  means), dx is the whole batch's (their average over n is the batch's sum over the batch's count), and so are the
  scale's and offset's gradients (a micro-batched step averages its micro-batches' gradients: the same average).

The gradient ops' optional last input z is the activation's output (attr activation, N = 1): dy is masked where the
activation's gradient is zero, as _FusedBatchNormReluGrad does. _BatchNormGradApply with attr mask_from_x takes the
norm's offset there instead and masks where the activation of (x - mean) * scaled + offset, the value
_BatchNormApply computed z from, has a zero gradient: a pass that applies a norm's gradient then need not normalize
x again for its mask (crossbatch: one normalization less in each backward pass).
"""
from __future__ import annotations

from tfplus import flops
from tfplus.dtypes import float64
from tfplus.framework import apply_op
from tfplus.ops.row_rules import reduces, rowwise
from tfplus.registry import not_differentiable, register_op, register_rows
from tfplus.tensor_shape import check_rank, check_same_dtype, fmt, merge_dim, spec

# The activations the normalization may end in and its gradient may start with ("": none).
ACTIVATIONS = ("", "Relu", "Relu6")
_FLOATS = ("float32", "float64")


def _channels(x, attrs, what: str) -> int | None:
    """x's channel count; checks x (rank 4, float) and the attrs."""
    if attrs.get("data_format") not in ("NHWC", "NCHW"):
        raise ValueError(f"{what}: data_format must be NHWC or NCHW, got {attrs.get('data_format')!r}")
    if attrs.get("activation", "") not in ACTIVATIONS:
        raise ValueError(f"{what}: activation must be one of {ACTIVATIONS}, got {attrs.get('activation')!r}")
    if x.dtype.name not in _FLOATS:
        raise TypeError(f"{what}: x must be float32 or float64, got {x.dtype.name}")
    check_rank(x, 4, f"{what}: x")
    return None if x.shape is None else x.shape[1 if attrs["data_format"] == "NCHW" else 3]


def _vectors(c, named: dict, what: str) -> int | None:
    """The channel count of per-channel vectors `named` ({name: spec}) and x's `c`, which must agree."""
    for name, s in named.items():
        check_rank(s, 1, f"{what}: {name}")
        c = merge_dim(c, s.shape[0] if s.shape else None, f"{what}: {name} of shape {fmt(s.shape)} must have one "
                      f"entry per channel ({c})")
    return c


def _like_x(x, others: dict, what: str) -> None:
    for name, s in others.items():
        if s.shape is not None and x.shape is not None:
            for a, b in zip(s.shape, x.shape):
                merge_dim(a, b, f"{what}: {name} {fmt(s.shape)} and x {fmt(x.shape)} must have one shape")


def _activation_input(ins: list, attrs, what: str) -> list:
    """The optional last input z: present (N = 1) exactly when attr activation is set."""
    want = 1 if attrs.get("activation") else 0
    if attrs.get("N", 0) != want or len(ins) != want:
        raise ValueError(f"{what} takes the activation's output as its last input exactly when attr activation is "
                         f"set (activation {attrs.get('activation')!r}, got {len(ins)})")
    return ins


# -- _BatchNormMoments: per channel, a micro-batch's mean and mean square (float64) and variance about its mean ----
def _moments_shape(ins, attrs):
    (x,) = ins
    c = _channels(x, attrs, "_BatchNormMoments")
    return [spec((c,), float64), spec((c,), float64), spec((c,), x.dtype)]


register_op("_BatchNormMoments", inputs=("x",), outputs=("mean", "mean_square", "variance"),
            attrs={"T": "type", "data_format": "string"}, shape_fn=_moments_shape, flops=flops.times_input(3))
register_rows(reduces, "_BatchNormMoments")
not_differentiable("_BatchNormMoments")


def batch_norm_moments(x, data_format: str, name: str = "moments"):
    """(mean, mean square, variance about the mean) of `x` per channel: the first two float64."""
    return apply_op("_BatchNormMoments", [x], {"data_format": data_format}, name)


# -- _BatchNormFromMoments: the per-channel vectors a norm computes from its merged statistics alone --------------
# variance = within + (mean_square - mean^2) in float64 (the spread of the micro-batches' means), as crossbatch's
# merge of Chan's formula wants; inv_std = rsqrt(variance + epsilon); scaled = scale * inv_std. Attr T is scale's.
def _from_moments_shape(ins, attrs):
    mean, square, within, scale = ins
    what = "_BatchNormFromMoments"
    if mean.dtype != float64 or square.dtype != float64:
        raise TypeError(f"{what}: mean and mean_square are float64, got {mean.dtype.name} and {square.dtype.name}")
    check_same_dtype([within, scale], f"{what}: variance and scale")
    c = _vectors(None, {"mean": mean, "mean_square": square, "variance": within, "scale": scale}, what)
    return [spec((c,), scale.dtype)] * 4


register_op("_BatchNormFromMoments", inputs=("mean", "mean_square", "variance", "scale"),
            outputs=("batch_mean", "batch_variance", "inv_std", "scaled"), attrs={"T": "type", "epsilon": "float"},
            shape_fn=_from_moments_shape, flops=flops.times_input(6))
register_rows(rowwise, "_BatchNormFromMoments")
not_differentiable("_BatchNormFromMoments")


def batch_norm_from_moments(mean, mean_square, variance, scale, epsilon: float, name: str = "from_moments"):
    """(mean, variance, inv_std, scaled) from merged moments (batch_norm_moments')."""
    return apply_op("_BatchNormFromMoments", [mean, mean_square, variance, scale],
                    {"T": scale.dtype, "epsilon": epsilon}, name)


# -- _BatchNormApply: activation((x - mean) * (scale * inv_std) + offset) ----------------------------------------
# scale * inv_std per element, as the inference-mode batch norm's kernel: no per-channel vector of its own, so that
# the passes after the statistics' are fed _BatchNormFromMoments's mean and inv_std and never rerun it.
def _apply_shape(ins, attrs):
    x, mean, inv_std, scale, offset = ins
    what = "_BatchNormApply"
    check_same_dtype(ins, f"{what}: x, mean, inv_std, scale and offset")
    _vectors(_channels(x, attrs, what), {"mean": mean, "inv_std": inv_std, "scale": scale, "offset": offset}, what)
    return [spec(x.shape, x.dtype)]


register_op("_BatchNormApply", inputs=("x", "mean", "inv_std", "scale", "offset"), outputs=("y",),
            attrs={"T": "type", "data_format": "string", "activation": "string"}, shape_fn=_apply_shape,
            flops=flops.times_input(3))
register_rows(rowwise, "_BatchNormApply")
not_differentiable("_BatchNormApply")


def batch_norm_apply(x, mean, inv_std, scale, offset, data_format: str, activation: str = "",
                     name: str = "normalize"):
    return apply_op("_BatchNormApply", [x, mean, inv_std, scale, offset],
                    {"data_format": data_format, "activation": activation}, name)


# -- _BatchNormGradSums: per channel d scale = sum(dy * x_hat), d offset = sum(dy) --------------------------------
# x_hat = (x - mean) / sqrt(variance + epsilon); dy masked by the activation's gradient at z first, with one.
def _grad_sums_shape(ins, attrs):
    dy, x, mean, variance, *z = ins
    what = "_BatchNormGradSums"
    z = _activation_input(z, attrs, what)
    check_same_dtype(ins, f"{what}: its inputs")
    c = _vectors(_channels(x, attrs, what), {"mean": mean, "variance": variance}, what)
    _like_x(x, {"y_backprop": dy, **({"activations": z[0]} if z else {})}, what)
    return [spec((c,), x.dtype)] * 2


register_op("_BatchNormGradSums", inputs=("y_backprop", "x", "mean", "variance", "activations*"),
            outputs=("scale_backprop", "offset_backprop"),
            attrs={"T": "type", "N": "int", "epsilon": "float", "data_format": "string", "activation": "string"},
            shape_fn=_grad_sums_shape, flops=flops.times_input(4))
register_rows(reduces, "_BatchNormGradSums")
not_differentiable("_BatchNormGradSums")


def batch_norm_grad_sums(dy, x, mean, variance, epsilon: float, data_format: str, activation: str = "",
                         activations=None, name: str = "sums"):
    """(d scale, d offset) per channel; `activations`: the activation's output, whose gradient masks dy (with
    `activation`)."""
    z = [activations] if activation else []
    return apply_op("_BatchNormGradSums", [dy, x, mean, variance, z],
                    {"epsilon": epsilon, "data_format": data_format, "activation": activation}, name)


# -- _BatchNormGradApply: dx = scaled * (dy - d_offset / n - x_hat * d_scale / n), x_hat = (x - mean) * inv_std --
# Its outputs d_scale and d_offset are its inputs': the gradients a micro-batch gives the scale and the offset come
# from an op that reads the micro-batch's rows (the planner splits a step at the batch-dependent inputs of its
# updates), not from the statistics, which the runs after the statistics pass are fed.
def _grad_apply_shape(ins, attrs):
    dy, x, mean, inv_std, scaled, d_scale, d_offset, *z = ins
    what = "_BatchNormGradApply"
    z = _activation_input(z, attrs, what)
    check_same_dtype(ins, f"{what}: its inputs")
    offset = {"offset": z[0]} if z and attrs.get("mask_from_x") else {}  # (mask_from_x: the norm's offset)
    _vectors(_channels(x, attrs, what), {"mean": mean, "inv_std": inv_std, "scaled": scaled,
                                         "scale_backprop": d_scale, "offset_backprop": d_offset, **offset}, what)
    _like_x(x, {"y_backprop": dy, **({"activations": z[0]} if z and not offset else {})}, what)
    return [spec(x.shape, x.dtype), d_scale, d_offset]


register_op("_BatchNormGradApply",
            inputs=("y_backprop", "x", "mean", "inv_std", "scaled", "scale_backprop", "offset_backprop",
                    "activations*"),
            outputs=("x_backprop", "scale_backprop", "offset_backprop"),
            attrs={"T": "type", "N": "int", "data_format": "string", "activation": "string", "mask_from_x": "bool"},
            shape_fn=_grad_apply_shape, flops=flops.times_input(7))
register_rows(rowwise, "_BatchNormGradApply")
not_differentiable("_BatchNormGradApply")


def batch_norm_grad_apply(dy, x, mean, inv_std, scaled, d_scale, d_offset, data_format: str, activation: str = "",
                          activations=None, name: str = "backprop", offset=None):
    """(dx, d_scale, d_offset): dx from the sums d_scale and d_offset, which it hands on. With `activation`, dy is
    masked at `activations` (the activation's output) or, given the norm's `offset` instead, where the activation
    of (x - mean) * scaled + offset has a zero gradient (attr mask_from_x)."""
    z = [offset if offset is not None else activations] if activation else []
    return apply_op("_BatchNormGradApply", [dy, x, mean, inv_std, scaled, d_scale, d_offset, z],
                    {"data_format": data_format, "activation": activation,
                     "mask_from_x": bool(activation) and offset is not None}, name)
