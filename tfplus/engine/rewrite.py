"""The graph rewrite that runs before planning and execution (TensorFlow's grappler remapper): chains of ops that
one kernel can do are fused into one op of tfplus/ops/fused_ops.py, so a step launches fewer kernels (opencl)
and makes fewer passes over memory (cpu).

    >>> import tfplus as tf
    >>> from tfplus.engine.rewrite import optimize
    >>> g = tf.Graph()
    >>> with g.as_default():
    ...     x = tf.placeholder(tf.float32, [None, 3])
    ...     y = tf.nn.relu(tf.nn.bias_add(x, tf.constant([1.0, 2.0, 3.0])))
    >>> r = optimize(g, [y], [x])
    >>> r.element[y].op.type
    '_FusedBiasAddRelu'

The pass is a pure function of (graph, fetches, feeds): it copies the ops the step needs into a private Graph
and never changes the user's graph, so GraphDef export and autodiff see what the user built. Copies keep their
names (variables, random streams and profiles find them); a fused op takes the name of the last op it replaces.
A tensor is fused away only when nothing else in the step reads it and it is neither fetched nor fed. A fused op
runs where all of its ops' inputs and control inputs are ready; a fusion that would have to run both before and
after some op (a loss's gradient under control_dependencies on an op that reads the loss, as TensorFlow's CIFAR-10
tutorial builds it) is not made: that part of the step runs as built (see _fused_order).

Patterns:
- BiasAdd -> Relu / Relu6 becomes _FusedBiasAddRelu (the BiasAdd output is fused away), and with the Conv2D
  before it (its output read by the BiasAdd alone) _FusedConv2DBiasRelu: the conv kernel adds the bias and
  applies the activation as it writes its output, so the step makes one pass less over the conv's output;
  with a MatMul before it instead, _FusedMatMul (as with a BiasAdd that no activation follows: a logits layer);
- ReluGrad / Relu6Grad -> BiasAddGrad becomes _FusedReluGradBiasAddGrad, giving dx and db in one pass (dx stays
  a tensor: the conv / matmul backprops read it);
- AddN of L2Losses only (weight decay's sum) becomes _FusedL2Loss, one multi-tensor sum of squares;
- SparseSoftmaxCrossEntropyWithLogits averaged by a Mean, with the gradient chain tf.gradients builds through both
  from ones (the loss's grad_ys, or a total loss's that adds it), becomes _FusedSparseXentMean: the loss and the
  logits' gradient in one op, named as the Mean (see _fused_loss);
- each time step of a GRU or LSTM cell that dynamic_rnn / static_rnn unrolled becomes one _FusedGRUCell /
  _FusedLSTMCell, and its gradient one _FusedGRUCellGrad / _FusedLSTMCellGrad (tfplus/engine/rewrite_rnn.py);
- an AddN of MatMul(a_i, g_i, transpose_a=True) (a kernel's gradient over the steps that share it), with the AddN
  of the BiasAddGrad(g_i), becomes one _FusedMatMulSum (rewrite_rnn.fuse_weight_sums);
- optimizer updates sharing their scalar inputs become one _FusedApply (see _apply_groups); an SGD or momentum
  update's weight decay gradient AddN(Mul(var, c), grad) folds into it (see _decay);
- the backward folds (issue 37), those named in `folds` (FOLDS; by default all of them for an unbudgeted step on a
  GPU, see backward_folds): `dx`, a ReluGrad / Relu6Grad of a Conv2DBackpropInput's output becomes
  _FusedConv2DBackpropInputReluGrad (the mask applied as the input gradient is written); `pool`, a ReluGrad of a
  MaxPoolGrad's output (the pool reading the Relu's output) _FusedMaxPoolGradReluGrad; `bias`, a BiasAddGrad of
  the dy that a Conv2DBackpropFilter reads joins it as _FusedConv2DBackpropFilterBiasAddGrad (the bias gradient a
  row of the filter gradient's GEMM). With all three a conv layer's backward pass launches no ReLU-gradient or
  bias-gradient kernel of its own. They come before the ReluGrad -> BiasAddGrad fusion above, which then applies
  to the layers they leave (dense ones);
- FusedBatchNormV3 -> Relu6 / Relu becomes _FusedBatchNormRelu, and the activation's gradient with the batch
  norm's one _FusedBatchNormReluGrad; the moving-average updates AssignSub(v, Mul(Sub(v, value), factor)) of
  batch norm and ExponentialMovingAverage become one _FusedMovingAverages (tfplus/engine/rewrite_bn.py).

`TFPLUS_BACKWARD_FOLDS=0` keeps the backward folds off (unset: DEFAULT_FOLDS on a GPU without a budget; 1: all
on, on any device, under a budget too; a comma list of FOLDS: those).
`TFPLUS_REWRITE=0` or `tf.ConfigProto(graph_options=tf.GraphOptions(rewrite_options=tf.RewriterConfig(
remapping=tf.RewriterConfig.OFF)))` turns it off (see `enabled`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tfplus import debug, errors
from tfplus.engine.rewrite_bn import fuse_bn_activations, moving_average_groups
from tfplus.engine.rewrite_rnn import fuse_cells, fuse_weight_sums
from tfplus.framework import Graph, Operation, Tensor, _op_inputs, constant_value, needed_ops, topo_order
from tfplus.ops.fused_ops import APPLY_GRAD, APPLY_SCALARS, DECAY_FUSES, apply_refs, moving_average_refs

_ACTIVATIONS = {"Relu": "Relu", "Relu6": "Relu6"}
_ACTIVATION_GRADS = {"ReluGrad": "Relu", "Relu6Grad": "Relu6"}


@dataclass
class Rewritten:
    """A step's rewritten graph: `element` maps each fetch and feed of the original graph to its stand-in."""
    graph: Graph
    element: dict
    fused: dict  # fused op type -> how many the rewrite made (for debugging and benchmarks)


def enabled(config: Any = None) -> bool:
    """Whether sessions rewrite their steps: not when TFPLUS_REWRITE=0, nor when the session's config turns
    the remapper off (TF1's RewriterConfig.remapping = OFF, or the same fields as a dict)."""
    value = os.environ.get("TFPLUS_REWRITE", "1").strip()
    if value not in ("0", "1"):
        raise ValueError(f"TFPLUS_REWRITE={value!r}: give 0 (no graph rewrite) or 1 (the default)")
    if value == "0":
        return False
    options = _field(_field(config, "graph_options"), "rewrite_options")
    remapping = _field(options, "remapping")
    return remapping not in (2, "OFF")  # RewriterConfig.Toggle: DEFAULT 0, ON 1, OFF 2


# The backward folds (see the module's patterns).
FOLDS = ("dx", "pool", "bias")
# A GPU's default: the bias fold (a row of ones in the filter gradient's GEMM, finished in the kernel) made the
# H200's Mentee step 1.89-1.93 ms against 1.76-1.83 without folds and 1.75-1.93 with dx and pool alone (stop 44).
DEFAULT_FOLDS = frozenset({"dx", "pool"})


def backward_folds(info: dict, budget) -> frozenset:
    """The backward folds a session's steps get (optimize's `folds`): TFPLUS_BACKWARD_FOLDS=0 none, 1 all, or a comma
    list of FOLDS; unset, DEFAULT_FOLDS on a GPU (`info`: the runtime's, whose type names the device kind) when the
    session has no memory budget (the budget planner's compact ReLU -> max-pool sites need the unfused MaxPoolGrad
    and ReluGrad, tfplus.planner.compact; a CPU's kernels of the folds are the unfused ones in turn), else none.

        TFPLUS_BACKWARD_FOLDS=1 python benchmarks/bench_gpu_step.py   # the bias gradients folded in too"""
    value = os.environ.get("TFPLUS_BACKWARD_FOLDS", "").strip()
    if not value:
        return DEFAULT_FOLDS if "GPU" in str(info.get("type", "")) and budget is None else frozenset()
    got = frozenset(FOLDS) if value == "1" else frozenset(v.strip() for v in value.split(",") if v.strip()) - {"0"}
    if got - set(FOLDS):
        # a user's setting, not a bug: InvalidArgumentError (a ValueError) reaches `tfplus train` as an error
        raise errors.InvalidArgumentError(
            None, None, f"TFPLUS_BACKWARD_FOLDS={value!r}: give 0 (none), 1 (all), a comma list of "
            f"{', '.join(FOLDS)}, or leave it unset (dx and pool on a GPU without a memory budget)")
    return got


def _field(obj, name: str):
    if obj is None:
        return None
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def optimize(graph: Graph, fetches: list, feeds, folds=frozenset()) -> Rewritten | None:
    """The step computing `fetches` (Tensors or Operations of `graph`) from `feeds` (Tensors), rewritten; None
    when nothing fuses (run the original graph). `folds`: the backward folds to make (names of FOLDS)."""
    feeds = set(feeds)
    ops = needed_ops(fetches, feeds)
    if any(_holds_graph(op) for op in ops):
        return None  # control-flow sub-graphs capture tensors of this graph: leave such steps alone
    pinned = set(feeds) | {f for f in fetches if isinstance(f, Tensor)}
    pinned_ops = {f for f in fetches if isinstance(f, Operation)}
    readers: dict[Tensor, list[Operation]] = {}
    for op in ops:
        for t in op.inputs:
            readers.setdefault(t, []).append(op)
    controlled = {c for op in ops for c in op.control_inputs}

    def only_reader(t: Tensor, op: Operation) -> bool:
        return t not in pinned and readers.get(t) == [op]

    # op -> (fused op type, inputs, attrs[, name, {tensor of the step: output of the fused op}]) for the op that the
    # fused one replaces (by default it takes that op's name and stands in for its outputs); absorbed ops vanish.
    fuse: dict[Operation, tuple] = {}
    absorbed: dict[Operation, Operation] = {}  # vanished op -> the op whose fused replacement does its work
    # Recurrent cells first: their MatMul -> BiasAdd pairs are theirs, not _FusedMatMul's.
    cells = fuse_cells(ops, {t: sorted(rs, key=lambda o: o._id) for t, rs in readers.items()}, pinned, pinned_ops,
                       controlled)
    sums = fuse_weight_sums(ops, readers, pinned, pinned_ops, controlled,
                            set(cells.fuse) | set(cells.absorbed) | set(cells.rewired))
    units = cells.units + sums.units
    for found in (cells, sums):
        fuse.update(found.fuse)
        absorbed.update(found.absorbed)
        for op, inputs in found.rewired.items():  # an AddN that summed fused parts reads their sum
            fuse[op] = ("AddN", inputs, {"T": op.attrs["T"], "N": len(inputs)})
    found = fuse_bn_activations(ops, readers, pinned, pinned_ops, controlled, lambda o: o in fuse or o in absorbed)
    fuse.update(found[0])
    absorbed.update(found[1])
    if folds:
        _fold_backward(ops, readers, only_reader, pinned_ops, controlled, fuse, absorbed, folds)
    for op in sorted(ops, key=lambda o: o._id):
        if op in fuse or op in absorbed:
            continue
        if op.type in _ACTIVATIONS:
            p = op.inputs[0].op
            if p.type == "BiasAdd" and p in ops and only_reader(op.inputs[0], op) and p not in pinned_ops \
                    and p not in controlled and p not in absorbed:
                attrs = {"T": op.attrs["T"], "data_format": p.attrs.get("data_format", "NHWC"),
                         "activation": _ACTIVATIONS[op.type]}
                fuse[op] = ("_FusedBiasAddRelu", list(p.inputs), attrs)
                absorbed[p] = op
                c = p.inputs[0].op
                if c.type == "Conv2D" and c in ops and only_reader(p.inputs[0], p) and c not in pinned_ops \
                        and c not in controlled and c not in absorbed \
                        and c.attrs.get("data_format", "NHWC") == attrs["data_format"]:
                    fuse[op] = ("_FusedConv2DBiasRelu", [*c.inputs, p.inputs[1]], {**c.attrs, **attrs})
                    absorbed[c] = op
                elif _fusable_matmul(c, p, ops, only_reader, pinned_ops, controlled, absorbed):
                    fuse[op] = ("_FusedMatMul", [*c.inputs, p.inputs[1]],
                                {**c.attrs, "activation": attrs["activation"]})
                    absorbed[c] = op
        elif op.type == "BiasAddGrad":
            q = op.inputs[0].op
            if q.type in _ACTIVATION_GRADS and q in ops and op.inputs[0] not in feeds and q not in fuse \
                    and q not in absorbed and all(c._id < q._id for c in op.control_inputs):
                attrs = {"T": q.attrs["T"], "data_format": op.attrs.get("data_format", "NHWC"),
                         "activation": _ACTIVATION_GRADS[q.type]}
                fuse[q] = ("_FusedReluGradBiasAddGrad", list(q.inputs), attrs, q.name,
                           {q.outputs[0]: 0, op.outputs[0]: 1})
                absorbed[op] = q
        elif op.type == "SparseSoftmaxCrossEntropyWithLogits" and op not in pinned_ops and op not in controlled:
            found = _fused_loss(op, ops, readers, pinned, pinned_ops, controlled)
            if found and not any(o in fuse or o in absorbed for o in found[2]):
                mean, grad, chain = found
                fuse[op] = ("_FusedSparseXentMean", list(op.inputs), dict(op.attrs), mean.name,
                            {mean.outputs[0]: 0, grad.outputs[0]: 1})
                absorbed.update({o: op for o in chain})
        elif op.type == "AddN" and len(op.inputs) > 1:
            losses = [t.op for t in op.inputs]
            if all(q.type == "L2Loss" and q in ops and only_reader(t, op) and q not in pinned_ops
                   and q not in controlled and len(q.outputs) == 1 for q, t in zip(losses, op.inputs)) \
                    and len(set(losses)) == len(losses):
                fuse[op] = ("_FusedL2Loss", [q.inputs[0] for q in losses], {"T": op.attrs["T"], "N": len(losses)})
                absorbed.update({q: op for q in losses})
    for op in sorted(ops, key=lambda o: o._id):  # a BiasAdd no activation follows (a logits layer)
        if op.type == "BiasAdd" and op not in absorbed and op not in fuse:
            c = op.inputs[0].op
            if _fusable_matmul(c, op, ops, only_reader, pinned_ops, controlled, absorbed):
                fuse[op] = ("_FusedMatMul", [*c.inputs, op.inputs[1]], {**c.attrs, "activation": ""})
                absorbed[c] = op
    for members in _apply_groups(ops, pinned, readers, feeds):
        last = members[-1]
        scalars = APPLY_SCALARS[last.type]
        decays = {}  # member -> (its gradient without the decay, the ops folded into the update)
        coefficient = None
        if last.type in DECAY_FUSES:
            for m in members:
                found = _decay(m, readers, pinned | set(pinned_ops), controlled)
                if found is not None and (coefficient is None or found[1] is coefficient) \
                        and not any(op in fuse or op in absorbed for op in found[2]):
                    coefficient = found[1]
                    decays[m] = (found[0], found[2])
        at = APPLY_GRAD[last.type]
        inputs = [last.inputs[i] for i in scalars] + \
            [decays[m][0] if m in decays and i == at else t
             for m in members for i, t in enumerate(m.inputs) if i not in scalars]
        attrs = {"T": last.attrs["T"], "op": last.type, "num_vars": len(members),
                 "use_locking": last.attrs.get("use_locking", False),
                 "use_nesterov": last.attrs.get("use_nesterov", False),
                 "decayed": [int(m in decays) for m in members]}
        fuse[last] = ("_FusedApply", inputs + ([coefficient] if decays else []), attrs)
        absorbed.update({m: last for m in members[:-1]})
        absorbed.update({gone: last for _, folded in decays.values() for gone in folded})
    for members in moving_average_groups(ops, readers, pinned, pinned_ops, controlled, feeds,
                                         lambda o: o in fuse or o in absorbed):
        last = members[-1][0]
        inputs = [t for _, var, value, factor, _ in members for t in (var, value, factor)]
        fuse[last] = ("_FusedMovingAverages", inputs, {"T": members[0][1].dtype.base_dtype, "num_vars": len(members)})
        absorbed.update({m[0]: last for m in members[:-1]})
        absorbed.update({gone: last for m in members for gone in m[4]})
    order = _fused_order(ops, fuse, absorbed, units) if fuse else []
    if not fuse:
        return None
    r = _copy(graph, order, feeds, fetches, fuse, absorbed)
    if debug.on():
        made = ", ".join(f"{n} {t}" for t, n in sorted(r.fused.items()))
        print(f"tfplus rewrite: {len(ops)} -> {len(ops) - len(absorbed)} ops ({made})")
    return r


def _fold_backward(ops: set, readers: dict, only_reader, pinned_ops: set, controlled: set, fuse: dict,
                   absorbed: dict, folds) -> None:
    """Adds the backward folds named in `folds` of the step's ops to `fuse` and `absorbed` (see the module's
    patterns): an op folds in when the step neither fetches it nor orders on it and the tensor it hands over has no
    other reader."""
    def free(o: Operation) -> bool:
        return o in ops and o not in pinned_ops and o not in controlled and o not in fuse and o not in absorbed

    for q in sorted(ops, key=lambda o: o._id):
        if q.type in _ACTIVATION_GRADS and free(q):
            g, features = q.inputs
            p = g.op
            if not (free(p) and only_reader(g, q)):
                continue
            if p.type == "Conv2DBackpropInput" and "dx" in folds:
                fuse[q] = ("_FusedConv2DBackpropInputReluGrad", [*p.inputs, features],
                           {**p.attrs, "activation": _ACTIVATION_GRADS[q.type]})
                absorbed[p] = q
            elif p.type == "MaxPoolGrad" and q.type == "ReluGrad" and p.inputs[0] is features and "pool" in folds:
                fuse[q] = ("_FusedMaxPoolGradReluGrad", list(p.inputs), dict(p.attrs))
                absorbed[p] = q
    for b in sorted(ops, key=lambda o: o._id):
        if b.type != "BiasAddGrad" or not free(b) or "bias" not in folds:
            continue
        dy = b.inputs[0]
        fmt = b.attrs.get("data_format", "NHWC")
        for w in sorted(readers.get(dy, ()), key=lambda o: o._id):
            if w.type == "Conv2DBackpropFilter" and free(w) and w.inputs[2] is dy \
                    and w.attrs.get("data_format", "NHWC") == fmt and dy._shape is not None and len(dy._shape) == 4:
                fuse[w] = ("_FusedConv2DBackpropFilterBiasAddGrad", list(w.inputs), dict(w.attrs), w.name,
                           {w.outputs[0]: 0, b.outputs[0]: 1})
                absorbed[b] = w
                break


def _fusable_matmul(c: Operation, bias_add: Operation, ops: set, only_reader, pinned_ops: set, controlled: set,
                    absorbed: dict) -> bool:
    """`c`, the op before `bias_add`, is a MatMul (2-D: BiasAdd's data_format names the last axis either way)
    that a _FusedMatMul may absorb: in the step, its product read by the BiasAdd alone, not fetched or ordered."""
    return c.type == "MatMul" and c in ops and only_reader(bias_add.inputs[0], bias_add) and c not in pinned_ops \
        and c not in controlled and c not in absorbed


def _fused_loss(x: Operation, ops: set, readers: dict, pinned: set, pinned_ops: set, controlled: set
                ) -> tuple[Operation, Operation, set] | None:
    """(the Mean, the Mul giving the logits' gradient, every op the fused loss replaces) when `x`, a
    SparseSoftmaxCrossEntropyWithLogits, is averaged by a Mean that tf.gradients differentiates from ones, through
    the chain _mean_grad and _sparse_xent_grad build: grad = ExpandDims(BroadcastTo(ExpandDims(OnesLike(s)) *
    scale, shape of the rows), -1) * backprop, scale = 1 / N (a constant when N is known, else the sizes' RealDiv).
    Nothing but the chain may read the rows' losses or the backprop, nor any tensor inside it; else None."""
    loss, backprop = x.outputs

    def made(t: Tensor, op_type: str) -> Operation | None:
        o = t.op
        ok = o.type == op_type and o in ops and o not in pinned_ops and o not in controlled
        return o if ok else None

    def value(t: Tensor):
        v = constant_value(t)
        return None if v is None else np.asarray(v)

    means = [r for r in readers.get(loss, []) if r.type == "Mean"]
    grads = readers.get(backprop, [])
    if len(means) != 1 or len(grads) != 1 or grads[0].type != "Mul" or backprop in pinned:
        return None
    (mean,), (grad,) = means, grads
    axes = value(mean.inputs[1])
    if mean in pinned_ops or mean in controlled or mean.attrs.get("keep_dims") or mean.inputs[0] is not loss \
            or axes is None or axes.size == 0 or {int(a) for a in axes.ravel()} - {0, -1} or grad in pinned_ops \
            or grad in controlled or loss._shape is None:
        return None
    chain = {mean, grad}
    e = made(grad.inputs[0] if grad.inputs[1] is backprop else grad.inputs[1], "ExpandDims")
    b = e and made(e.inputs[0], "BroadcastTo")
    if b is None or value(e.inputs[1]) is None or int(value(e.inputs[1])) not in (-1, 1):
        return None
    chain |= {e, b}
    shape = b.inputs[1]
    if shape.op.type == "Shape" and shape.op.inputs[0] is loss and made(shape, "Shape"):
        chain.add(shape.op)
    elif value(shape) is None or None in loss._shape or tuple(value(shape).ravel()) != tuple(loss._shape):
        return None
    m = made(b.inputs[0], "Mul")
    if m is None:
        return None
    chain.add(m)

    def ones_at(t: Tensor) -> Operation | None:  # ExpandDims(OnesLike(a scalar), 0)
        d = made(t, "ExpandDims")
        ones = d and made(d.inputs[0], "OnesLike")
        ok = ones is not None and ones.outputs[0]._shape == () and value(d.inputs[1]) is not None \
            and int(value(d.inputs[1])) == 0
        return d if ok else None

    d, scale = ones_at(m.inputs[0]), m.inputs[1]
    if d is None:
        d, scale = ones_at(m.inputs[1]), m.inputs[0]
    if d is None:
        return None
    ones = d.inputs[0].op
    chain.add(d)
    if readers.get(ones.outputs[0]) == [d] and ones.outputs[0] not in pinned:
        chain.add(ones)
    t = np.dtype(loss.dtype.name).type
    if value(scale) is not None:  # N known when the graph was built: Mean's gradient made 1 / N in Python
        if None in loss._shape or value(scale).shape != () \
                or t(value(scale)) != t(1) / t(max(loss._shape[0], 1)):
            return None
    else:  # RealDiv(Cast(Size(mean)), Cast(Maximum(Size(rows' losses), 1)))
        div = made(scale, "RealDiv")
        top, bottom = (div and made(div.inputs[0], "Cast")), (div and made(div.inputs[1], "Cast"))
        size_y = top and made(top.inputs[0], "Size")
        most = bottom and made(bottom.inputs[0], "Maximum")
        size_x = most and made(most.inputs[0], "Size")
        if size_y is None or size_x is None or size_y.inputs[0] is not mean.outputs[0] \
                or size_x.inputs[0] is not loss or value(most.inputs[1]) is None or int(value(most.inputs[1])) != 1:
            return None
        chain |= {div, top, bottom, size_y, most, size_x}
    # The chain's tensors vanish: nothing outside it may read them (the Mean's output becomes the fused op's).
    for o in chain - {mean, grad}:
        for out in o.outputs:
            if out in pinned or any(r not in chain for r in readers.get(out, [])):
                return None
    if any(r not in chain for r in readers.get(loss, [])) or loss in pinned:
        return None
    return mean, grad, chain


def _apply_groups(ops: set, pinned: set, readers: dict, feeds: set) -> list[list[Operation]]:
    """The optimizer updates of the step that one _FusedApply can do, in groups of two or more: same update
    op and attrs, the same scalar tensors (learning rate...), outputs that nothing reads or fetches, and no
    op ordered between them (control dependents of one update that the others' inputs need)."""
    by_key: dict[tuple, list[Operation]] = {}
    for op in sorted(ops, key=lambda o: o._id):
        if op.type in APPLY_SCALARS and op.outputs[0] not in pinned and not readers.get(op.outputs[0]):
            key = (op.type, op.attrs.get("T"), op.attrs.get("use_locking", False),
                   op.attrs.get("use_nesterov", False), *(op.inputs[i] for i in APPLY_SCALARS[op.type]))
            by_key.setdefault(key, []).append(op)
    dependents: dict[Operation, list[Operation]] = {}
    for op in ops:
        for c in op.control_inputs:
            dependents.setdefault(c, []).append(op)
    groups = []
    for members in by_key.values():
        refs = [m.inputs[k] for m in members for k in m.op_def.ref_inputs]
        if len(members) < 2 or len(set(refs)) < len(refs):  # one variable twice: the updates would race
            continue
        after = {d for m in members for d in dependents.get(m, ())}
        needs = needed_ops([t for m in members for t in m.inputs] + [c for m in members for c in m.control_inputs],
                           feeds)
        if any(d._id < members[-1]._id for d in after) or needs & (set(members) | after):
            continue
        groups.append(members)
    return groups


def _decay(update: Operation, readers: dict, pinned: set, controlled: set) -> tuple | None:
    """(gradient, decay coefficient, [AddN, Mul]) when `update`'s gradient is exactly weight decay's
    AddN(Mul(var, c), gradient) (see decay_term), neither the AddN nor the Mul read by anything else, fetched or
    ordered; else None."""
    def alone(t: Tensor, reader: Operation) -> bool:
        return readers.get(t) == [reader] and t not in pinned and t.op not in pinned and t.op not in controlled \
            and not t.op.control_inputs

    total = update.inputs[APPLY_GRAD[update.type]]
    return decay_term(total, update.inputs[0], alone) if alone(total, update) else None


def decay_term(total: Tensor, var: Tensor, alone) -> tuple | None:
    """(gradient, decay coefficient, [AddN, Mul]) when `total` is weight decay's AddN(Mul(var, c), gradient) (or
    Mul(c, var)) with a scalar c, var the variable's tensor or an Identity read of it, and `alone(product, AddN)`
    (the Mul's output read by the AddN alone); else None. tfplus.distributed takes the term out of the gradient
    it all-reduces and adds it to the average, where this pass folds it into the update."""
    add = total.op
    if add.type != "AddN" or len(add.inputs) != 2:
        return None
    for k in (0, 1):
        product, grad = add.inputs[k], add.inputs[1 - k]
        mul = product.op
        if mul.type != "Mul" or not alone(product, add):
            continue
        for a, c in (mul.inputs, mul.inputs[::-1]):
            reads_var = a is var or (a.op.type == "Identity" and a.op.inputs[0] is var)
            if reads_var and c._shape == () and c.dtype == var.dtype.base_dtype and a._shape == grad._shape:
                return grad, c, [add, mul]
    return None


def _fused_order(ops: set, fuse: dict, absorbed: dict, units: list = ()) -> list[Operation]:
    """The ops that the rewritten step creates (fused ops and the ops kept) in an order that respects every data
    and control input, each fused op standing for all the ops it replaces. A fusion that would close a cycle (its
    ops ordered around another op: say a loss's gradient under control_dependencies on an op reading the loss) is
    undone, in `fuse` and `absorbed`, and its ops copied as built: the rewrite never makes a valid graph fail. The
    fused ops of one of `units` (sets of ops of `fuse`: a recurrent cell's step, whose ops read each other's Slots)
    are made or undone together."""
    def order() -> list[Operation]:
        def inputs_of(op: Operation) -> list[Operation]:
            if op not in fuse:
                found = [absorbed.get(p, p) for p in _op_inputs(op)]
            else:  # what the fused op reads (not what the ops it replaces read: a loss's OnesLike its loss), and
                # every control input of those ops
                found = [absorbed.get(t.op, t.op) for t in fuse[op][1]] + \
                    [absorbed.get(c, c) for m in members[op] for c in m.control_inputs]
            return [p for p in found if p is not op]

        members: dict[Operation, list[Operation]] = {op: [op] for op in fuse}
        for gone, by in absorbed.items():
            members[by].append(gone)
        return topo_order([op for op in ops if op not in absorbed], inputs_of, what="the rewritten step")

    try:
        return order()
    except ValueError:  # rare: find the fusions at fault by adding them one at a time
        pass
    wanted, taken = dict(fuse), dict(absorbed)
    fuse.clear()
    absorbed.clear()
    unit_of = {op: sorted(unit, key=lambda o: o._id) for unit in units for op in unit}
    for op in sorted(wanted, key=lambda o: o._id):
        if op in fuse or op in absorbed:
            continue
        members = [m for m in unit_of.get(op, [op]) if m in wanted]
        fuse.update({m: wanted[m] for m in members})
        group = {gone: by for gone, by in taken.items() if by in members}
        absorbed.update(group)
        try:
            order()
        except ValueError:
            for m in members:
                del fuse[m]
            for gone in group:
                del absorbed[gone]
    return order()


def _holds_graph(op: Operation) -> bool:
    return any(isinstance(v, Graph) or (isinstance(v, (list, tuple)) and any(isinstance(x, Graph) for x in v))
               for v in op.attrs.values())


def _copy(graph: Graph, order: list, feeds: set, fetches: list, fuse: dict, absorbed: dict) -> Rewritten:
    g = Graph()
    g.seed = graph.seed
    tensor: dict[Tensor, Tensor] = {}
    op_of: dict[Operation, Operation] = {}
    fused: dict[str, int] = {}
    absorbed_into: dict[Operation, list[Operation]] = {}
    handed: dict[Tensor, list[Operation]] = {}  # a fused loss's gradient: control inputs its readers take over
    for gone, by in absorbed.items():
        absorbed_into.setdefault(by, []).append(gone)
    ops = set(order) | set(absorbed)
    for t in sorted(feeds, key=lambda t: (t.op._id, t.value_index)):
        if t.op not in ops:  # a fed tensor whose producer does not run: a placeholder stands in
            name = t.op.name + "/" if t.value_index == 0 else f"{t.op.name}_output_{t.value_index}"
            ph = g.create_op("Placeholder", [], {"dtype": t.dtype, "shape": t._shape}, name)
            tensor[t] = ph.outputs[0]
    # NOTE: in dependency order, not creation order: a graph may rewire an op to read one created after it
    # (the trainer's device input feeds the model from an op built last).
    for op in order:
        if op in fuse:
            op_type, inputs, attrs, *named = fuse[op]
            name, outputs = named or (op.name, None)
            new = g.create_op(op_type, [tensor[t] for t in inputs], attrs, name + "/")
            if op_type != op.type:  # not a rewired op (an AddN reading a fused cell's gradient)
                fused[op_type] = fused.get(op_type, 0) + 1
        else:
            op_type, outputs = None, None
            new = g.create_op(op.type, [tensor[t] for t in op.inputs], op.attrs, op.name + "/")
            for t, n in zip(op.outputs, new.outputs):
                n._shape = t._shape  # what set_shape told the original
        members = absorbed_into.get(op, ())
        if op_type == "_FusedSparseXentMean":
            # NOTE: a loss's gradient built under control_dependencies (TF1's update ops: moving averages) that its
            # forward half is not: the fused op keeps the forward's control inputs and hands the gradient chain's
            # to the readers of the gradient, so that the loss is not ordered after the updates (a micro-batched
            # plan computes it per micro-batch, before them) and what reads the gradient still runs after them.
            # The chain reads no variable, so its values do not depend on where it runs.
            forward = [op] + [m for m in members if m.name == name]
            controls = [c for m in forward for c in m.control_inputs]
            handed[new.outputs[1]] = [c for m in members if m not in forward for c in m.control_inputs]
        else:
            controls = op.control_inputs + [c for gone in members for c in gone.control_inputs]
        controls += [c for t in new.inputs for c in handed.get(t, ())]
        new.control_inputs = list(dict.fromkeys(op_of[c] for c in controls))
        # NOTE: which inputs these update in place depends on their variable count
        if op_type == "_FusedApply":
            new.op_def = replace(new.op_def, ref_inputs=apply_refs(attrs["op"], attrs["num_vars"]))
        elif op_type == "_FusedMovingAverages":
            new.op_def = replace(new.op_def, ref_inputs=moving_average_refs(attrs["num_vars"]))
        new.device, new.backward = op.device, op.backward
        op_of[op] = new
        if outputs is None:
            outputs = {t: i for i, t in enumerate(op.outputs[:len(new.outputs)])}
        for t, i in outputs.items():
            tensor[t] = new.outputs[i]
        for gone in absorbed_into.get(op, ()):
            op_of[gone] = new
    for v in graph.get_collection("trainable_variables"):
        var = getattr(v, "op", None)
        if var in op_of:
            g.add_to_collection("trainable_variables", op_of[var].outputs[0])
    element = {f: (op_of[f] if isinstance(f, Operation) else tensor[f]) for f in fetches}
    element.update({t: tensor[t] for t in feeds if t in tensor})
    return Rewritten(g, element, fused)
