"""Math ops: elementwise arithmetic, matmul, reductions. Each op: registration, gradient, wrapper."""
from __future__ import annotations

from tfplus.framework import apply_op
from tfplus.registry import register_gradient, register_op
from tfplus.shapes import broadcast, check_same_dtype, spec

__all__ = ["add", "multiply", "add_n"]


def _binary_shape(ins, attrs):
    check_same_dtype(ins)
    return [spec(broadcast(ins[0].shape, ins[1].shape), ins[0].dtype)]


# -- Add ------------------------------------------------------------------------------------------------------
register_op("Add", inputs=("x", "y"), outputs=("z",), attrs={"T": "type"}, shape_fn=_binary_shape)


@register_gradient("Add")
def _add_grad(op, grad):
    """dx = dy, dy = dy (summed over broadcast dims)"""
    return [grad, grad]  # TODO(math helper): reduce over broadcast dims


def add(x, y, name=None):
    return apply_op("Add", [x, y], name=name)


# -- Mul ------------------------------------------------------------------------------------------------------
register_op("Mul", inputs=("x", "y"), outputs=("z",), attrs={"T": "type"}, shape_fn=_binary_shape)


@register_gradient("Mul")
def _mul_grad(op, grad):
    """dx = dz * y, dy = dz * x"""
    x, y = op.inputs
    return [multiply(grad, y), multiply(grad, x)]  # TODO(math helper): reduce over broadcast dims


def multiply(x, y, name=None):
    return apply_op("Mul", [x, y], name=name)


# -- AddN ----------------------------------------------------------------------------------------------------
def _add_n_shape(ins, attrs):
    check_same_dtype(ins)
    shape = ins[0].shape
    for s in ins[1:]:
        shape = broadcast(shape, s.shape) if shape is not None and s.shape is not None and \
            len(shape) == len(s.shape) else (shape or s.shape)
    return [spec(shape, ins[0].dtype)]


register_op("AddN", inputs=("inputs*",), outputs=("sum",), attrs={"N": "int", "T": "type"},
            shape_fn=_add_n_shape)


@register_gradient("AddN")
def _add_n_grad(op, grad):
    """each input gets dy"""
    return [grad] * len(op.inputs)


def add_n(inputs, name=None):
    """Sums a list of same-shaped tensors."""
    return apply_op("AddN", [list(inputs)], name=name)
