"""A ReLU -> 2x2 max-pool whose backward pass reads one byte per window: ops that only the planner's planning
copies make (tfplus.planner.compact.keeping), for a streamed prefix that keeps those bytes from its forward pass
instead of recomputing the pool's input for its backward pass (tfplus.planner.stream).

_MaxPoolArgmax(x) -> (y, argmax): MaxPool's y (2x2 windows, stride 2, tiling x exactly) and 4 bits per window:
the index (0..3, scan order) of its first maximum, or NO_GRADIENT where that maximum is not > 0. x is a ReLU's
output, so the ReLU's input is > 0 at a window's maximum exactly when y > 0 there: the nibble holds both the route
of the pool's gradient and the ReLU's mask, and nothing else of x is needed for the backward pass. Two windows a
byte, per row of the batch: argmax has shape (N, ceil(windows per row / 2)), uint8; window e of a row (in NCHW
order, whatever data_format) in the low nibble of byte e // 2 for even e, the high one for odd e.

_ReluMaxPoolGradArgmax(grad, argmax) -> (backprops, bias_backprop): ReluGrad(MaxPoolGrad(x, y, grad), x), the
gradient at the ReLU's input, from the bytes alone: grad goes to each window's tap `argmax` (none for
NO_GRADIENT); and the sum of that gradient per channel (the gradient of the bias before the ReLU, as
_FusedReluGradBiasAddGrad gives it beside backprops; a plain graph's BiasAddGrad may still read backprops).
Made after autodiff, so both are declared not differentiable, as tfplus/ops/fused_ops.py's are.
"""
from __future__ import annotations

from tfplus import dtypes, flops
from tfplus.ops import nn_ops
from tfplus.ops.row_rules import rowwise
from tfplus.registry import not_differentiable, register_op, register_rows
from tfplus.tensor_shape import check_rank, spec

NO_GRADIENT = 4  # an argmax byte naming no tap: the window's maximum is not > 0 (the ReLU passed no gradient)


def _tiles(attrs) -> None:
    for what in ("ksize", "strides"):
        v = attrs[what]
        if (tuple(v[2:]) if attrs["data_format"] == "NCHW" else tuple(v[1:3])) != (2, 2):
            raise ValueError(f"the argmax bytes are for 2x2 windows of stride 2, got {what} {list(v)}")


def _pool_argmax_shape(ins, attrs):
    _tiles(attrs)
    x = ins[0]
    hw = () if x.shape is None else x.shape[2:] if attrs["data_format"] == "NCHW" else x.shape[1:3]
    if any(d is not None and d % 2 for d in hw):
        raise ValueError(f"the 2x2 windows must tile the input exactly, got height and width {list(hw)}")
    (y,) = nn_ops._pool_shape(ins, attrs)
    return [y, spec(argmax_shape(y.shape), dtypes.uint8)]


def argmax_shape(y_shape) -> tuple:
    """The packed argmax of a pool output of `y_shape`: (N, bytes a row)."""
    if y_shape is None:
        return (None, None)
    rest = 1
    for d in y_shape[1:]:
        rest = None if d is None or rest is None else rest * d
    return (y_shape[0], None if rest is None else -(-rest // 2))


register_op("_MaxPoolArgmax", inputs=("input",), outputs=("output", "argmax"), attrs=nn_ops._POOL_ATTRS,
            shape_fn=_pool_argmax_shape, flops=flops.pool)
register_rows(rowwise, "_MaxPoolArgmax")
not_differentiable("_MaxPoolArgmax")


def _relu_pool_grad_shape(ins, attrs):
    g, a = ins
    _tiles(attrs)
    check_rank(g, 4, "grad")
    if a.dtype != dtypes.uint8:
        raise TypeError(f"argmax must be uint8 (_MaxPoolArgmax's), got {a.dtype.name}")
    nn_ops._check_like(a, argmax_shape(g.shape), "argmax")
    nchw = attrs["data_format"] == "NCHW"
    if g.shape is None:
        return [spec(None, g.dtype), spec((None,), g.dtype)]
    n, *rest = g.shape
    twice = [None if d is None else 2 * d for d in rest]
    shape = (n, rest[0], twice[1], twice[2]) if nchw else (n, twice[0], twice[1], rest[2])
    return [spec(shape, g.dtype), spec((rest[0] if nchw else rest[2],), g.dtype)]


register_op("_ReluMaxPoolGradArgmax", inputs=("grad", "argmax"), outputs=("backprops", "bias_backprop"),
            attrs=nn_ops._POOL_ATTRS, shape_fn=_relu_pool_grad_shape, flops=flops.pool_grad, tags=("row_sums",))
register_rows(rowwise, "_ReluMaxPoolGradArgmax")
not_differentiable("_ReluMaxPoolGradArgmax")
