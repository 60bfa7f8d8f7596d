"""The rules ops declare for the rows of a fed batch (registry.register_rows), and the helpers they share.

Micro-batches (a memory budget) and the cpu workers run a step on slices of the batch's rows, axis 0 of the
[None, ...] placeholders, and put the slices' results together. That is the step's result only where every op
between the fed rows and the results computes each row from the same row: a slice's rows are then the same
numbers whichever slice holds them. A rule says whether an op does (None) or why not (a phrase after its name):

    >>> import tfplus as tf
    >>> from tfplus.registry import get_op_def
    >>> x = tf.placeholder(tf.float32, [None, 20])
    >>> y = x[:25]
    >>> get_op_def("StridedSlice").rows(y.op, {x, y})
    'takes rows 0:25 of the batch (a tower of tf.split, a GAN's real or fake half): each micro-batch takes its own'
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from tfplus.framework import Operation, Tensor, constant_value


def rowwise(op: Operation, rows) -> None:
    """Each row of its outputs from the same row of its inputs (a convolution, a cross-entropy per example): the
    op's signature puts the batch on axis 0 of all of them."""
    return None


# A reduction over the rows is a statistic of the batch (a weight gradient, a loss's mean): planner.crossbatch and
# planner.batch.merges merge it over the micro-batches where it sums or averages them and refuse it otherwise.
reduces = rowwise


def aligned(op: Operation, rows) -> str | None:
    """An elementwise op (broadcasting): row by row where each input with rows has its output's rank, so that
    broadcasting lines its rows up with the output's axis 0 (a [B] tensor against a [K, 1] one would put them
    on axis 1)."""
    rank = _rank(op.outputs[0])
    for t in op.inputs:
        if t in rows and (rank is None or _rank(t) != rank):
            return (f"broadcasts '{t.name}' (shape {_shape(t)}) against shape {_shape(op.outputs[0])}: its rows "
                    "would not lie along the output's axis 0")
    return None


def along(axis_of: Callable[[Operation], object], what: str, added: int = 0) -> Callable:
    """A rule for an op that works along one axis (`axis_of(op)`: an int, or None where it is not known when the
    graph is built): row by row unless that axis is 0, the rows'. `added`: the axes the op inserts (a stack's,
    an expand_dims'), which a negative axis counts."""
    def rule(op: Operation, rows) -> str | None:
        axis = axis_of(op)
        rank = next((_rank(t) for t in op.inputs if t in rows), None)
        if axis is None or (int(axis) < 0 and rank is None):
            return f"{what} along an axis not known when the graph is built; it may be the batch's (axis 0)"
        axis = int(axis)
        if axis == 0 or axis == -(rank + added):
            return f"{what} along axis 0, the batch's rows: each micro-batch would see its own rows only"
        return None
    return rule


def attr(name: str) -> Callable[[Operation], object]:
    """axis_of for `along`: the op's attr `name`."""
    return lambda op: op.attrs.get(name)


def value_of(index: int) -> Callable[[Operation], object]:
    """axis_of for `along`: the constant value of input `index` (None where it is computed)."""
    def axis(op: Operation):
        v = const(op.inputs[index])
        return None if v is None or v.size != 1 else int(v.reshape(()))
    return axis


def const(t: Tensor) -> np.ndarray | None:
    """t's value where it is known when the graph is built."""
    v = constant_value(t)
    return None if v is None else np.asarray(v)


def _rank(t: Tensor) -> int | None:
    return None if t._shape is None else len(t._shape)


def _shape(t: Tensor) -> str:
    return "unknown" if t._shape is None else str(tuple(t._shape))
