"""The batch-norm passes of the graph rewrite (tfplus.engine.rewrite.optimize calls them): a step's moving-average
updates in one op.

    >>> import tfplus as tf
    >>> from tfplus.engine.rewrite import optimize
    >>> g = tf.Graph()
    >>> with g.as_default():
    ...     x = tf.placeholder(tf.float32, [8, 4, 4, 3])
    ...     y = tf.layers.batch_normalization(x, training=True)
    ...     updates = [u.op for u in tf.get_collection(tf.GraphKeys.UPDATE_OPS)]
    >>> optimize(g, [y] + updates, [x]).fused
    {'_FusedMovingAverages': 1}

Moving averages: tf.layers.batch_normalization (two a layer: mean and variance), tf.train.ExponentialMovingAverage
and assign_moving_average each build AssignSub(v, Mul(Sub(v, value), factor)), factor = 1 - decay a scalar, v read
directly or through its Identity read: three launches a variable on opencl, 162 a MobileNet step. Every such chain
of a step (matched by its dataflow, never by names) becomes one _FusedMovingAverages (tfplus/ops/fused_ops.py):
one launch per eight variables. The chain's Sub and Mul vanish, so nothing else may read, fetch or order them; the
AssignSub's output must be unread (its op may be fetched or ordered: the fused op stands for it).
"""
from __future__ import annotations

from tfplus.framework import Operation, Tensor, needed_ops

_FLOATS = ("float32", "float64")


def moving_average_groups(ops: set, readers: dict, pinned: set, pinned_ops: set, controlled: set, feeds: set,
                          taken) -> list[list[tuple]]:
    """The moving-average updates of the step that one _FusedMovingAverages can do, grouped by dtype: lists of
    (AssignSub, variable, value, factor, the ops it absorbs). `taken(op)`: whether another fusion has op."""
    def alone(t: Tensor, reader: Operation) -> bool:  # a tensor only `reader` reads, its op free to vanish
        o = t.op
        return o in ops and readers.get(t) == [reader] and t not in pinned and o not in pinned_ops \
            and o not in controlled and not taken(o) and len(o.outputs) == 1

    groups: dict[str, list[tuple]] = {}
    for op in sorted(ops, key=lambda o: o._id):
        if op.type != "AssignSub" or taken(op) or readers.get(op.outputs[0]) or op.outputs[0] in pinned:
            continue
        var, delta = op.inputs
        if var.op.type != "VariableV2" or var.dtype.base_dtype.name not in _FLOATS or var._shape is None \
                or None in var._shape or delta.op.type != "Mul" or not alone(delta, op):
            continue
        mul = delta.op
        for d, factor in (mul.inputs, mul.inputs[::-1]):
            sub = d.op
            if sub.type != "Sub" or not alone(d, mul) or factor._shape != () \
                    or factor.dtype.base_dtype != var.dtype.base_dtype:
                continue
            read, value = sub.inputs
            if read is not var and not (read.op.type == "Identity" and read.op.inputs[0] is var):
                continue
            if value._shape != var._shape or d._shape != var._shape:
                continue  # a broadcast value: not this update
            gone = [sub, mul] + ([read.op] if read is not var and alone(read, sub) else [])
            groups.setdefault(var.dtype.base_dtype.name, []).append((op, var, value, factor, gone))
            break
    out = []
    for members in groups.values():
        members = _distinct(members)
        if members and not _ordered_between(members, ops, feeds):
            out.append(members)
    return out


def _distinct(members: list[tuple]) -> list[tuple]:
    """The members less every update of a variable that two of them update (their order would matter)."""
    count: dict[Tensor, int] = {}
    for m in members:
        count[m[1]] = count.get(m[1], 0) + 1
    return [m for m in members if count[m[1]] == 1]


def _ordered_between(members: list[tuple], ops: set, feeds: set) -> bool:
    """Whether an op that waits for one of the updates (a control dependent) is needed by the inputs of
    another: one op could not run both before and after it."""
    assigns = {m[0] for m in members}
    after = {o for o in ops if assigns & set(o.control_inputs)}
    inputs = [t for m in members for t in (m[2], m[3])]
    controls = [c for m in members for o in (m[0], *m[4]) for c in o.control_inputs]
    needs = needed_ops(inputs + controls, feeds)
    return bool(needs & (assigns | after))
