"""The batch-norm passes of the graph rewrite (tfplus.engine.rewrite.optimize calls them): a batch norm with the
ReLU after it in one op, and their gradients in one; a step's moving-average updates in one op.

    >>> import tfplus as tf
    >>> from tfplus.engine.rewrite import optimize
    >>> g = tf.Graph()
    >>> with g.as_default():
    ...     x = tf.placeholder(tf.float32, [8, 4, 4, 3])
    ...     y = tf.layers.batch_normalization(x, training=True)
    ...     updates = tf.get_collection(tf.GraphKeys.UPDATE_OPS)  # operations
    >>> optimize(g, [y] + updates, [x]).fused
    {'_FusedMovingAverages': 1}

Batch norm and ReLU: FusedBatchNormV3 -> Relu6 (or Relu), the normalized value read by nothing else but the
activation's gradient, becomes _FusedBatchNormRelu (tfplus/ops/fused_ops.py), whose apply pass clamps as it writes:
one launch and one pass over the activations less. Relu6's gradient reads the normalized value to make its mask;
it reads the fused op's output z instead, which is in (0, 6) exactly where the value is. When that gradient feeds
only the batch norm's gradient, the two become _FusedBatchNormReluGrad: the channel sums and the apply pass mask
the incoming gradient as they read it (a launch and a full-size tensor less).

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


_ACTIVATION_GRADS = {"Relu": "ReluGrad", "Relu6": "Relu6Grad"}


def fuse_bn_activations(ops: set, readers: dict, pinned: set, pinned_ops: set, controlled: set, taken
                        ) -> tuple[dict, dict]:
    """(fuse, absorbed) entries of optimize for each FusedBatchNormV3 whose normalized output only a Relu / Relu6
    reads (and that activation's gradient, when it reads it): one _FusedBatchNormRelu standing for both, named as
    the activation. Each Relu6Grad that read the normalized value reads z instead; an activation gradient whose
    output only the batch norm's gradient reads (as its y_backprop) becomes, with it, one _FusedBatchNormReluGrad
    named as that gradient. `taken(op)`: whether another fusion has op."""
    fuse: dict = {}
    absorbed: dict = {}

    def free(o: Operation, named: bool = False) -> bool:
        """o may vanish into a fused op; `named`: o names it, so ops ordered after o may stay (as after it)."""
        return o in ops and o not in pinned_ops and (named or o not in controlled) and not taken(o) \
            and o not in fuse and o not in absorbed

    for act in sorted(ops, key=lambda o: o._id):
        bn = act.inputs[0].op if act.type in _ACTIVATION_GRADS else None
        if bn is None or bn.type != "FusedBatchNormV3" or not free(act, named=True) or not free(bn):
            continue
        y, z = bn.outputs[0], act.outputs[0]
        grads = [r for r in readers.get(y, []) if r is not act]
        if y in pinned or any(r.type != _ACTIVATION_GRADS[act.type] or r.inputs[1] is not y or r.inputs[0] is y
                              or not free(r) for r in grads):
            continue
        fuse[act] = ("_FusedBatchNormRelu", list(bn.inputs), {**bn.attrs, "activation": act.type}, act.name,
                     {z: 0, **{t: k for k, t in enumerate(bn.outputs) if k}})
        absorbed[bn] = act
        # ReluGrad reads z already (Relu's gradient reads its output)
        own = [q for q in readers.get(z, []) if q.type == _ACTIVATION_GRADS[act.type] and q.inputs[1] is z
               and q.inputs[0] is not z and free(q)]
        for q in grads + own:
            dy = q.outputs[0]
            (norm_grad,) = readers.get(dy) or [None]
            if dy not in pinned and norm_grad is not None and norm_grad.type == "FusedBatchNormGradV3" \
                    and free(norm_grad, named=True) and norm_grad.inputs[0] is dy and dy not in norm_grad.inputs[1:] \
                    and norm_grad.inputs[3] is bn.outputs[3]:
                fuse[norm_grad] = ("_FusedBatchNormReluGrad", [q.inputs[0], *norm_grad.inputs[1:], z],
                                   {**norm_grad.attrs, "activation": act.type})
                absorbed[q] = norm_grad
            elif q in grads:  # the same mask from z: the same bits
                fuse[q] = (q.type, [q.inputs[0], z], dict(q.attrs))
    return fuse, absorbed


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
        out += _unordered(_distinct(members), ops, feeds)
    return out


def _distinct(members: list[tuple]) -> list[tuple]:
    """The members less every update of a variable that two of them update (their order would matter)."""
    count: dict[Tensor, int] = {}
    for m in members:
        count[m[1]] = count.get(m[1], 0) + 1
    return [m for m in members if count[m[1]] == 1]


def _unordered(members: list[tuple], ops: set, feeds: set) -> list[list[tuple]]:
    """`members` in groups that one op each can do: no member's inputs (or its ops' control inputs) may need an
    update of its group or an op that waits for one (ExponentialMovingAverage.apply under control_dependencies
    on batch norm's updates makes a second group). Greedy, in creation order."""
    after: dict[Operation, set] = {m[0]: {m[0]} for m in members}  # an update and its control dependents
    for o in ops:
        for c in o.control_inputs:
            if c in after:
                after[c].add(o)
    needs = {m[0]: needed_ops([m[2], m[3]] + [c for o in (m[0], *m[4]) for c in o.control_inputs], feeds)
             for m in members}
    groups: list[list[tuple]] = []
    for m in members:
        for group in groups:
            if not any(needs[m[0]] & after[o[0]] or needs[o[0]] & after[m[0]] for o in group):
                group.append(m)
                break
        else:
            groups.append([m])
    return groups
