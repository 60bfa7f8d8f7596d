"""NoOp and grouping."""
from __future__ import annotations

from tfplus.framework import Operation, Tensor, control_dependencies, get_default_graph, name_scope
from tfplus.registry import not_differentiable, register_op

register_op("NoOp", outputs=(), shape_fn=lambda ins, attrs: [])
not_differentiable("NoOp")


def no_op(name=None) -> Operation:
    """An op that does nothing; useful as a target for control dependencies."""
    return get_default_graph().create_op("NoOp", [], {}, name or "NoOp")


def group(*inputs, name=None) -> Operation:
    """`train = tf.group(update_a, update_b)`: an op that runs after all of `inputs`."""
    if len(inputs) == 1 and isinstance(inputs[0], (list, tuple)):
        inputs = tuple(inputs[0])
    ops = []
    for x in inputs:
        x = getattr(x, "op", x) if not isinstance(x, Operation) else x
        if isinstance(x, Tensor):
            x = x.op
        ops.append(x)
    with control_dependencies(ops):
        return no_op(name=name or "group_deps")


def tuple_(tensors, name=None):
    """tf.tuple: the same tensors, each available only after all of them are computed."""
    from tfplus.ops.array_ops import identity
    with name_scope(name, "tuple"):
        gate = group(*[t for t in tensors if t is not None])
        with control_dependencies([gate]):
            return [None if t is None else identity(t) for t in tensors]
