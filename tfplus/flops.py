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
