"""FLOP formulas: each op declares one where it is registered (`register_op(..., flops=...)`); the profiler
and the planner's cost model read them through `of()`. A formula is `fn(in_shapes, out_shapes, attrs) ->
float` over concrete shapes; a multiply-add is 2 FLOPs.

    >>> of("MatMul", [(8, 64), (64, 10)], [(8, 10)], {})
    10240.0
"""
from __future__ import annotations

import math

from tfplus.registry import OPS


def zero(ins, outs, attrs) -> float:
    """Data movement, shapes, constants, control flow and random draws: no arithmetic counted."""
    return 0.0


def per_output(ins, outs, attrs) -> float:
    """Elementwise ops: one per output element."""
    return float(math.prod(outs[0]))


def per_input(ins, outs, attrs) -> float:
    """Reductions: one per element of input 0."""
    return float(math.prod(ins[0]))


def times_input(k: int):
    """k per element of input 0: softmaxes and cross-entropies (5 per logit), optimizer updates (per variable
    element, from their update formulas)."""
    def fn(ins, outs, attrs) -> float:
        return float(k * math.prod(ins[0]))
    fn.__name__ = f"times_input_{k}"
    return fn


def add_n(ins, outs, attrs) -> float:
    return float(math.prod(outs[0]) * max(len(ins) - 1, 0))


def matmul(ins, outs, attrs) -> float:
    a = ins[0]
    return 2.0 * math.prod(outs[0]) * (a[-2] if attrs.get("transpose_a") else a[-1])


def _conv(y, filt) -> float:
    # Each element of the forward's output y is kh * kw * C_in multiply-adds; both backward ops do the same.
    return 2.0 * math.prod(y) * (math.prod(filt[:3]) if len(filt) == 4 else 1)


def conv2d(ins, outs, attrs) -> float:
    return _conv(outs[0], ins[1])


def conv2d_backprop_input(ins, outs, attrs) -> float:
    return _conv(ins[2], ins[1])


def conv2d_backprop_filter(ins, outs, attrs) -> float:
    return _conv(ins[2], outs[0])


def _depthwise(y, filt) -> float:
    # Each output element is kh * kw multiply-adds (one input channel per output channel).
    return 2.0 * math.prod(y) * math.prod(filt[:2])


def depthwise_conv2d(ins, outs, attrs) -> float:
    return _depthwise(outs[0], ins[1])


def depthwise_conv2d_backprop_input(ins, outs, attrs) -> float:
    return _depthwise(ins[2], ins[1])


def depthwise_conv2d_backprop_filter(ins, outs, attrs) -> float:
    return _depthwise(ins[2], outs[0])


def pool(ins, outs, attrs) -> float:
    """The window's size per output element."""
    return float(math.prod(outs[0]) * math.prod(attrs.get("ksize", (1, 1, 1, 1))))


def pool_grad(ins, outs, attrs) -> float:
    """The window's size per element of the incoming gradient (the last input)."""
    return float(math.prod(ins[-1]) * math.prod(attrs.get("ksize", (1, 1, 1, 1))))


def lrn(ins, outs, attrs) -> float:
    """The depth window's squares summed, then a power and a multiply, per element."""
    return float(math.prod(outs[0]) * (2 * attrs.get("depth_radius", 5) + 1 + 3))


# Matrix products: the planner's cost model charges their FLOPs; other ops, the elements they write.
MATRIX_PRODUCTS = frozenset({matmul, conv2d, conv2d_backprop_input, conv2d_backprop_filter})


def of(op_type: str, in_shapes: list, out_shapes: list, attrs: dict) -> float:
    """The FLOPs of one op with these shapes by its declared formula (0 for an op that declares none: the
    completeness test keeps the project's ops declared)."""
    op = OPS.get(op_type)
    if op is None or op.flops is None:
        return 0.0
    return op.flops(in_shapes, out_shapes, attrs)


def is_matrix_product(op_type: str) -> bool:
    op = OPS.get(op_type)
    return op is not None and op.flops in MATRIX_PRODUCTS


# -- TensorFlow's profiler's counting (tf.profiler.profile): the op types TF registers a "flops" statistic for,
# with TF's formulas (tensorflow/python/profiler/internal/flops_registry.py, nn_ops.py, math_ops.py). They differ
# from the formulas above where TF's do (Relu and the other activations count nothing there, a bias add counts
# its input); other op types count 0, as in TF.
def _times_output(k: int):
    def fn(ins, outs, attrs) -> float:
        return float(k * math.prod(outs[0]))
    return fn


def _reduction(reduce: int, finalize: int):
    def fn(ins, outs, attrs) -> float:
        return float(math.prod(ins[0]) * reduce + math.prod(outs[0]) * (finalize - reduce))
    return fn


def _l2_loss(ins, outs, attrs) -> float:
    return float(math.prod(ins[0]) * 3 - 1)


TF_PROFILER = {
    "MatMul": matmul, "Conv2D": conv2d, "DepthwiseConv2dNative": depthwise_conv2d, "BiasAdd": per_input,
    "AvgPool": pool, "MaxPool": pool, "AddN": add_n, "L2Loss": _l2_loss,
    **dict.fromkeys(("Reciprocal", "Square", "Log", "Neg", "AssignSub", "AssignAdd"), per_input),
    "Rsqrt": times_input(2), "Softmax": times_input(5),
    **dict.fromkeys(("Add", "AddV2", "Sub", "Mul", "RealDiv", "Maximum", "Minimum", "Pow", "GreaterEqual",
                     "Greater", "LessEqual", "Less", "Equal", "NotEqual"), per_output),
    "RsqrtGrad": _times_output(4), "SquaredDifference": _times_output(2),
    "Mean": _reduction(1, 1), **dict.fromkeys(("Sum", "ArgMax", "ArgMin", "BiasAddGrad"), _reduction(1, 0)),
}


def tf_profiler(op_type: str, in_shapes: list, out_shapes: list, attrs: dict) -> float:
    """The FLOPs TensorFlow's profiler counts for one op with these (fully known) shapes."""
    fn = TF_PROFILER.get(op_type)
    return 0.0 if fn is None else fn(in_shapes, out_shapes, attrs)
