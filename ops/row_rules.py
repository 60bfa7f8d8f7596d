"""The rules ops declare for the rows of a fed batch (registry.register_rows), and the helpers they share.

Micro-batches (a memory budget) and the cpu workers run a step on slices of the batch's rows, axis 0 of the
[None, ...] placeholders, and put the slices' results together. That is the step's result only where every op
between the fed rows and the results computes each row from the same row: a slice's rows are then the same
numbers whichever slice holds them. A rule says whether an op does (None) or why not (a phrase after its name):

    >>> import tfplus as tf
    >>> from tfplus.registry import get_op_def
    >>> x = tf.placeholder(tf.float32, [None, 20])
    >>> y = x[:25]
    >>> get_op_def("StridedSlice").rows(y.op, Rows({x: 0}))
    'takes rows :25 of the batch (a tower of tf.split, a GAN's real or fake half): each micro-batch takes its own'
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from tfplus.framework import Operation, Tensor, constant_value

# How a row rule's refusal of an op that takes a single row of the batch begins (planner.rows lets one whose values
# only shape-only ops read: a row's shape is every row's; not a span of rows, x[:25], whose shape a micro-batch of
# fewer rows cuts)
ONE_ROW = "takes the single row"


class Rows(dict):
    """What a rule reads: the step's tensors with rows of the batch -> the axis that holds them, and `shape(t)`,
    a tensor's shape at the whole batch (the planner's, else the graph's static shape)."""

    def __init__(self, axes: dict, shapes: dict | None = None):
        super().__init__(axes)
        self.shapes = shapes or {}
        # A control-flow op (If, While) -> why its sub-graphs do not keep the rows, None where they do
        # (planner.rows works it out where it finds the rows inside them), for `subgraphs`.
        self.inner: dict[Operation, str | None] = {}
        # planner.rows': the tensors computed from the values of the batch's rows, the batch's number of rows
        # (tf.shape(x)[0] of a tensor with rows), and the tensors computed from that number
        self.valued: set[Tensor] = set()
        self.counts: set[Tensor] = set()
        self.sized: set[Tensor] = set()
        # a tensor's value where it follows from the shapes at the whole batch (tf.shape(x)[1]), else None
        self.fold: Callable[[Tensor], np.ndarray | None] = lambda t: None

    def shape(self, t: Tensor) -> tuple | None:
        return self.shapes.get(t, t._shape)

    def value(self, t: Tensor) -> np.ndarray | None:
        """t's value where it is a constant or follows from the shapes (`fold`)."""
        v = const(t)
        return v if v is not None else self.fold(t)


def rowwise(op: Operation, rows) -> str | None:
    """Each row of its outputs from the same row of its inputs (a convolution, a cross-entropy per example), where
    the op's signature puts the batch: on axis 0 of all of them."""
    for t in (*op.inputs, *op.outputs):
        if rows.get(t, 0) != 0:
            return f"takes the batch's rows on axis 0, but '{t.name}' has them on axis {rows[t]}"
    return None


def keeps(op: Operation, rows) -> None:
    """It keeps each row's entries together wherever it puts the batch's axis (a transpose, a stack, expand_dims,
    one_hot): the ops after it find the axis where it is (the planner follows it by the shapes)."""
    return None


# A reduction over the rows is a statistic of the batch (a weight gradient, a loss's mean): planner.crossbatch and
# planner.batch.merges merge it over the micro-batches where it sums or averages them and refuse it otherwise.
reduces = keeps


def subgraphs(op: Operation, rows) -> str | None:
    """A control-flow op (If: tf.cond; While: tf.while_loop, tf.map_fn, tf.scan, a dynamic_rnn): row by row where
    its predicate or trip count does not follow the batch's values or rows, and the ops of its branches, or of its
    loop's condition and body, keep them as these rules say (planner.rows finds the rows inside them)."""
    return rows.inner.get(op, "runs sub-graphs in which the batch's rows were not found (their shapes do not "
                              "follow from the fed ones)")


def aligned(op: Operation, rows) -> str | None:
    """An elementwise op (broadcasting): row by row where the batch's axis of each input with rows is the output's,
    counted from the last axis, as broadcasting lines the axes up (a [B] tensor against a [K, 1] one would put
    the rows on the output's axis 1 and pair them with the K others)."""
    out = op.outputs[0]
    rank = {u: None if rows.shape(u) is None else len(rows.shape(u)) for u in (*op.inputs, out)}
    for t in op.inputs:
        if t in rows and (out not in rows or rank[t] is None or rank[out] is None or
                          rank[t] - rows[t] != rank[out] - rows[out]):
            return (f"broadcasts '{t.name}' (shape {rows.shape(t)}) against shape {rows.shape(out)}: its rows would "
                    "not line up with the output's")
    return None


def along(axis_of: Callable[[Operation], object], what: str) -> Callable:
    """A rule for an op that works along one axis (`axis_of(op)`: an int, or None where it is not known when the
    graph is built): row by row unless that axis is the batch's."""
    def rule(op: Operation, rows) -> str | None:
        x = next((t for t in op.inputs if t in rows), None)
        axis = axis_of(op)
        if x is None:
            return None
        if axis is None or (int(axis) < 0 and rows.shape(x) is None):
            return f"{what} along an axis not known when the graph is built; it may be the batch's"
        axis = int(axis) % len(rows.shape(x)) if int(axis) < 0 else int(axis)
        if axis == rows[x]:
            return f"{what} along axis {axis}, the batch's rows: each micro-batch would see its own rows only"
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
