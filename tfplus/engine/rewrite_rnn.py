"""The recurrent-cell passes of the graph rewrite (tfplus.engine.rewrite.optimize calls `fuse_cells`, then
`fuse_weight_sums`): each time step of a GRUCell or BasicLSTMCell / LSTMCell that dynamic_rnn or static_rnn unrolled
(tfplus/rnn.py) becomes one _FusedGRUCell / _FusedLSTMCell (tfplus/ops/rnn_fused_ops.py), and the gradient
tf.gradients built for that step one _FusedGRUCellGrad / _FusedLSTMCellGrad: ~13 forward and ~80 backward ops per
step become two; each kernel's gradient over the steps one _FusedMatMulSum.

    >>> import tfplus as tf
    >>> from tfplus.engine.rewrite import optimize
    >>> g = tf.Graph()
    >>> with g.as_default():
    ...     x = tf.placeholder(tf.float32, [None, 4, 3])
    ...     y, _ = tf.nn.dynamic_rnn(tf.nn.rnn_cell.GRUCell(5), x, dtype=tf.float32)
    ...     grads = tf.gradients(tf.reduce_sum(y), tf.trainable_variables())
    >>> sorted(optimize(g, grads, [x]).fused.items())
    [('_FusedGRUCell', 4), ('_FusedGRUCellGrad', 4), ('_FusedMatMulSum', 2)]

How a step is recognized: the cell is built again from the same ops in a scratch graph (the pattern: `_build`),
its inputs placeholders, with tf.gradients from a placeholder output gradient; then the step's graph is matched
against it op by op (types, attrs, constants and wiring, never names: `_Match`). The forward is matched from the
new state back to the inputs; the backward op by op from the tensors already matched, through their readers. A
match is a proof that the ops compute what the fused kernels compute, whatever produced them.

The weight gradients (a MatMul and a BiasAddGrad per step, that the steps' AddNs sum) read the fused ops' outputs
([x, h] and the gates' gradient); `fuse_weight_sums` makes each of those sums one _FusedMatMulSum. A gradient
that the cell sends to x or to its state from several uses (a GRU reads h three times) arrives as one tensor: the
AddN that summed the uses is rewired to read it, or dropped when it summed nothing else.

A step is left as built (correctness first) unless every tensor its ops make that something else reads, fetches
or feeds is an output of the fused ops, and unless its backward, when it has one, matches whole. A fused op waits
for the control inputs of all the ops it replaces (the trainer builds the gradient under control_dependencies on
batch norm's updates); the rewrite makes or undoes a step's fused ops together (`Cells.units`).

Cells with other activations, peepholes, clipping or dropout inside the cell do not match and run as built. A
projected LSTMCell's core (before its projection) matches, but the fused kernels take the units from the state's
width: it fuses only where num_proj equals num_units (`_widths_fit`; nor do steps of widths not known).
sequence_length masking (tfplus/rnn.py's _masked) runs outside the cell: it stays as built and the cell inside it
fuses. A tf.while_loop RNN (unknown time dimension) is not rewritten (optimize leaves control flow alone).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from tfplus.framework import Graph, Operation, Tensor, constant_value
from tfplus.gradients import gradients
from tfplus.ops import array_ops, math_ops, nn_ops, rnn_fused_ops  # noqa: F401  (rnn_fused_ops: the ops made here)


@dataclass(frozen=True)
class Slot:
    """A fused op's output that no tensor of the original graph stands for (the LSTM's gate activations, a GRU's
    summed state gradient): a key of the rewrite's tensor map, produced by `op`'s fused replacement."""
    op: Operation
    name: str


@dataclass
class _Pattern:
    graph: Graph
    free: dict            # role -> placeholder Tensor: the cell's inputs (and the output gradients)
    forward: list         # the cell's ops, placeholders excluded
    backward: list        # the gradient's ops that the fused gradient replaces
    tensors: dict         # role -> Tensor of the pattern (outputs of the cell and of its gradient)
    parts: dict = field(default_factory=dict)  # role -> the tensors a gradient of several uses sums


def _build(kind: str, shapes: dict, dtype, output_grads: tuple) -> _Pattern:
    """The cell `kind` ('gru' or 'lstm') as tfplus/rnn.py builds it, over placeholders of `shapes` (role ->
    static shape or None), with its gradient from placeholder gradients of `output_grads` (roles of its outputs;
    none: forward only)."""
    g = Graph()
    with g.as_default():
        p = {r: array_ops.placeholder(dtype, shapes.get(r), name=r)
             for r in _ROLES[kind]}
        first = g.version
        if kind == "gru":
            xh = array_ops.concat([p["x"], p["h"]], 1)
            gates = nn_ops.sigmoid(nn_ops.bias_add(math_ops.matmul(xh, p["gate_kernel"]), p["gate_bias"]))
            r, u = array_ops.split(gates, 2, 1)
            xrh = array_ops.concat([p["x"], math_ops.multiply(r, p["h"])], 1)
            cand = nn_ops.tanh(nn_ops.bias_add(math_ops.matmul(xrh, p["cand_kernel"]), p["cand_bias"]))
            new_h = math_ops.add(cand, math_ops.multiply(u, math_ops.subtract(p["h"], cand)))
            out = {"new_h": new_h, "xh": xh, "gates": gates, "xrh": xrh, "cand": cand}
        else:
            xh = array_ops.concat([p["x"], p["h"]], 1)
            i, j, f, o = array_ops.split(nn_ops.bias_add(math_ops.matmul(xh, p["kernel"]), p["bias"]), 4, 1)
            forget = nn_ops.sigmoid(math_ops.add(f, p["forget_bias"]))
            new_c = math_ops.add(math_ops.multiply(p["c"], forget),
                                 math_ops.multiply(nn_ops.sigmoid(i), nn_ops.tanh(j)))
            tanh_c = nn_ops.tanh(new_c)
            new_h = math_ops.multiply(tanh_c, nn_ops.sigmoid(o))
            out = {"new_h": new_h, "new_c": new_c, "xh": xh, "tanh_c": tanh_c}
        forward = g.get_operations()[first:]
        pattern = _Pattern(g, p, forward, [], out)
        if not output_grads:
            return pattern
        ys = [out[r] for r in output_grads]
        dys = [array_ops.placeholder(dtype, shapes.get(r), name=f"d_{r}") for r in output_grads]
        start = g.version
        xs = [p[r] for r in _ROLES[kind] if r != "forget_bias"]
        grads = dict(zip([r for r in _ROLES[kind] if r != "forget_bias"], gradients(ys, xs, grad_ys=dys)))
    pattern.free.update({f"d_{r}": t for r, t in zip(output_grads, dys)})
    kept = set()
    for role in _WEIGHTS[kind]:  # the weight gradients stay in the graph
        kept.add(grads[role].op)
    for role in _SUMMED[kind]:
        t = grads[role]
        uses = sum(1 for op in forward for x in op.inputs if x is p[role])
        if uses > 1:  # tf.gradients summed the uses: the fused op outputs the sum
            if t.op.type != "AddN":
                raise AssertionError(f"pattern {kind}: gradient of {role} from {uses} uses is a {t.op.type}")
            kept.add(t.op)
            pattern.parts[role] = list(t.op.inputs)
        else:
            pattern.parts[role] = [t]
    bias = _WEIGHTS[kind][1]
    pattern.tensors["d_gates"] = grads[bias].op.inputs[0]  # what BiasAddGrad (and the kernel's MatMul) read
    if kind == "gru":
        pattern.tensors["d_cand"] = grads["cand_bias"].op.inputs[0]
    pattern.backward = [op for op in g.get_operations()[start:] if op not in kept and op.type != "Placeholder"]
    return pattern


_ROLES = {"gru": ("x", "h", "gate_kernel", "gate_bias", "cand_kernel", "cand_bias"),
          "lstm": ("x", "h", "c", "kernel", "bias", "forget_bias")}
_WEIGHTS = {"gru": ("gate_kernel", "gate_bias", "cand_kernel", "cand_bias"), "lstm": ("kernel", "bias")}
_SUMMED = {"gru": ("x", "h"), "lstm": ("x", "h", "c")}
# The fused ops' outputs by role, in order (Slot roles have no tensor in the graph).
_FORWARD_OUT = {"gru": ("new_h", "xh", "gates", "xrh", "cand"), "lstm": ("new_h", "new_c", "xh", "acts", "tanh_c")}
_BACKWARD_OUT = {"gru": ("d_gates", "d_cand", "x", "h"), "lstm": ("d_gates", "x", "h", "c")}


class _Match:
    """A partial map from a pattern's tensors and ops to the step's; `free` pattern tensors (placeholders) bind to
    any tensor of their dtype, once."""

    def __init__(self, free: set):
        self.free, self.known, self.ops, self.taken = free, {}, {}, set()

    def copy(self) -> _Match:
        m = _Match(self.free)
        m.known, m.ops, m.taken = dict(self.known), dict(self.ops), set(self.taken)
        return m

    def adopt(self, other: _Match) -> None:
        self.known, self.ops, self.taken = other.known, other.ops, other.taken

    def tensor(self, p: Tensor, r: Tensor) -> bool:
        if p in self.known:
            return self.known[p] is r
        if p.dtype != r.dtype:
            return False
        if p in self.free:
            self.known[p] = r
            return True
        if p.op.type == "Const":
            a, b = constant_value(p), constant_value(r)
            ok = r.op.type == "Const" and a is not None and b is not None and np.shape(a) == np.shape(b) \
                and bool(np.all(np.asarray(a) == np.asarray(b)))
            if ok:
                self.known[p] = r
            return ok
        return p.value_index == r.value_index and self.op(p.op, r.op)

    def op(self, q: Operation, r: Operation) -> bool:
        if q in self.ops:
            return self.ops[q] is r
        if r in self.taken or q.type != r.type or len(q.inputs) != len(r.inputs) \
                or len(q.outputs) != len(r.outputs) or not _same_attrs(q, r):
            return False
        self.ops[q] = r
        self.taken.add(r)
        self.known.update(zip(q.outputs, r.outputs))
        if q.type == "AddN":  # summed in any order
            for order in itertools.permutations(r.inputs):
                trial = self.copy()
                if all(trial.tensor(a, b) for a, b in zip(q.inputs, order)):
                    self.adopt(trial)
                    return True
            return False
        return all(self.tensor(a, b) for a, b in zip(q.inputs, r.inputs))


def _same_attrs(q: Operation, r: Operation) -> bool:
    keys = {k for k in q.attrs if not k.startswith("_")} | {k for k in r.attrs if not k.startswith("_")}
    return all(q.attrs.get(k) == r.attrs.get(k) for k in keys)


def _match_backward(m: _Match, pattern: _Pattern, readers: dict) -> bool:
    """Extends `m` (the forward matched) over the pattern's backward: each op found among the readers of a tensor
    already matched, then checked with all its inputs. Where several readers fit (a Shape of h that the masking's
    gradient takes too), the one that a reader of the op's output confirms; only when nothing else progresses,
    the first. False when the gradient's input or gates are not found."""
    consumers: dict = {}
    for q in pattern.backward:
        for t in q.inputs:
            consumers.setdefault(t, []).append(q)
    pending = [q for q in pattern.backward if q.type != "Const"]
    force = False
    while pending:
        progress = False
        for q in list(pending):
            if q in m.ops:
                pending.remove(q)
                progress = True
                continue
            at = next(((i, m.known[t]) for i, t in enumerate(q.inputs) if t in m.known), None)
            if at is None:
                continue
            i, rt = at
            fits = []
            for r in readers.get(rt, ()):
                if r.type == q.type and len(r.inputs) > i and r.inputs[i] is rt:
                    trial = m.copy()
                    if trial.op(q, r):
                        fits.append(trial)
            if len(fits) > 1 and not force:
                fits = [t for t in fits if _confirmed(t, q, consumers, readers)]
            if len(fits) == 1 or (fits and force):
                m.adopt(fits[0])
                pending.remove(q)
                progress, force = True, False
        if not progress:
            if force:
                break
            force = True
    # What is left is what the step does not compute (pruned: nothing it fetches needs it); a left op's readers are
    # left too, since matching an op matches its inputs. The fused gradient needs its input and its gates.
    return pattern.free["d_new_h"] in m.known and pattern.tensors["d_gates"] in m.known


def _confirmed(m: _Match, q: Operation, consumers: dict, readers: dict) -> bool:
    """Whether some pattern op reading `q`'s outputs matches a reader of its match's outputs in `m`."""
    r = m.ops[q]
    for p, t in zip(q.outputs, r.outputs):
        for q2 in consumers.get(p, ()):
            for r2 in readers.get(t, ()):
                if r2.type == q2.type and m.copy().op(q2, r2):
                    return True
    return False


@dataclass
class Cells:
    """What the pass found: fused-op entries and absorbed ops in tfplus.engine.rewrite's format, and the AddNs
    to rewire (op -> its new inputs)."""
    fuse: dict = field(default_factory=dict)
    absorbed: dict = field(default_factory=dict)
    rewired: dict = field(default_factory=dict)
    units: list = field(default_factory=list)  # per step, the ops of `fuse` and `rewired` made or undone together


def fuse_cells(ops: set, readers: dict, pinned: set, pinned_ops: set, controlled: set) -> Cells:
    """The recurrent cells of a step (`ops`, their `readers` sorted by creation), fused where they match whole;
    `pinned` tensors (fetched or fed) and `pinned_ops` (fetched) stay visible, `controlled` ops stay as built."""
    found = Cells()
    patterns: dict = {}

    def pattern(kind, shapes, dtype, grads):
        key = (kind, tuple(sorted(shapes.items())), dtype, grads)
        if key not in patterns:
            patterns[key] = _build(kind, shapes, dtype, grads)
        return patterns[key]

    for anchor in sorted(ops, key=lambda o: o._id):
        kind = _kind(anchor)
        if kind is None or anchor in found.absorbed or anchor in found.fuse:
            continue
        dtype = anchor.outputs[0].dtype
        if dtype.name not in ("float32", "float64"):
            continue
        loose = pattern(kind, {}, dtype, ())
        m = _Match(set(loose.free.values()))
        if not m.tensor(loose.tensors["new_h"], anchor.outputs[0]) or any(o not in ops for o in m.ops.values()):
            continue
        bound = {role: m.known[t] for role, t in loose.free.items()}
        if kind == "lstm" and _forget_bias(bound) is None or not _widths_fit(kind, bound):
            continue
        new_c = m.known.get(loose.tensors.get("new_c"))
        shapes = {role: t._shape for role, t in bound.items()}
        shapes.update({"new_h": anchor.outputs[0]._shape, "new_c": None if new_c is None else new_c._shape})
        for grads in (("new_h", "new_c"), ("new_h",), ()) if kind == "lstm" else (("new_h",), ()):
            if _try(kind, pattern(kind, shapes, dtype, grads), anchor, bound, ops, readers, pinned, pinned_ops,
                    controlled, found):
                break
    return found


def _forget_bias(bound: dict) -> float | None:
    """An LSTM step's forget bias as the number _FusedLSTMCell's attr holds; None where it is not one constant (a
    per-unit vector a hand-written cell adds: that step runs as built)."""
    value = constant_value(bound["forget_bias"])
    if value is None or np.size(value) != 1 or np.ndim(value) > 2:
        return None
    return float(np.asarray(value).reshape(()))


def _widths_fit(kind: str, bound: dict) -> bool:
    """Whether the step's state is as wide as its cell's units, as the fused kernels assume (they take the units
    from h): not so where the state is a projection of the output (LSTMCell(num_proj=...)), whose core matches
    the pattern. Widths not known when the graph is built do not fuse either."""
    def width(role):
        s = bound[role]._shape
        return None if s is None or len(s) != 2 else s[1]
    n = width("h")
    if n is None:
        return False
    if kind == "gru":
        return width("gate_kernel") == 2 * n and width("cand_kernel") == n
    return width("c") == n and width("kernel") == 4 * n


def _kind(op: Operation) -> str | None:
    """The cell whose new state `op` may make: a GRU's Add(c, u * (h - c)), an LSTM's Mul(tanh(c'), sigmoid(o))."""
    if len(op.inputs) != 2:
        return None
    a, b = (t.op.type for t in op.inputs)
    if op.type in ("Add", "AddV2") and a == "Tanh" and b == "Mul":
        return "gru"
    if op.type == "Mul" and a == "Tanh" and b == "Sigmoid":
        return "lstm"
    return None


def _try(kind: str, pat: _Pattern, anchor: Operation, bound: dict, ops: set, readers: dict, pinned: set,
         pinned_ops: set, controlled: set, found: Cells) -> bool:
    """Fuses the step whose new state `anchor` makes against `pat` (with its backward, if it has one) when it
    matches whole; records it in `found` and says so."""
    m = _Match(set(pat.free.values()))
    m.known.update({pat.free[role]: t for role, t in bound.items()})
    if not m.tensor(pat.tensors["new_h"], anchor.outputs[0]):
        return False
    forward = {m.ops[q] for q in pat.forward if q.type != "Const"}
    if pat.backward and not _match_backward(m, pat, readers):
        return False
    backward = {m.ops[q] for q in pat.backward if q in m.ops}
    busy = set(found.fuse) | set(found.absorbed) | set(found.rewired)
    if any(o not in ops or o in pinned_ops or o in controlled or o in busy
           for o in forward | backward):
        return False
    # Constants that only the step's ops read go with them.
    for q in pat.forward + pat.backward:
        for t in q.inputs:
            c = m.known.get(t).op if t.op.type == "Const" and t in m.known else None
            if c is not None and c.outputs[0] not in pinned and c not in pinned_ops and c not in controlled \
                    and c not in busy \
                    and all(r in forward or r in backward for r in readers.get(c.outputs[0], ())):
                (backward if c.backward else forward).add(c)
    outputs = {}  # a tensor of the step (or a Slot) -> (the op whose fused op makes it, output index)
    for k, role in enumerate(_FORWARD_OUT[kind]):
        outputs[m.known[pat.tensors[role]] if role in pat.tensors else Slot(anchor, role)] = (anchor, k)
    rewired: dict = {}
    sums: list = []  # AddNs of the gradient's parts that the fused gradient replaces
    rep = m.known[pat.tensors["d_gates"]].op if backward else None
    for k, role in enumerate(_BACKWARD_OUT[kind] if backward else ()):
        if role.startswith("d_"):
            if pat.tensors[role] in m.known:
                outputs[m.known[pat.tensors[role]]] = (rep, k)
            continue
        parts = [m.known[t] for t in pat.parts[role] if t in m.known]
        if len(parts) not in (0, len(pat.parts[role])):
            return False  # part of a gradient computed, part not: not what tf.gradients builds
        if parts and not _sum_parts(parts, Slot(rep, role), (rep, k), forward | backward, readers, pinned, pinned_ops,
                                    controlled, busy, outputs, rewired, sums):
            return False
    whole = forward | backward | set(sums)
    summed = {t for a in rewired for t in a.inputs if t.op in forward | backward}  # rewired AddNs read the Slot
    for o in forward | backward:
        for t in o.outputs:
            if t not in outputs and t not in summed and \
                    (t in pinned or any(r not in whole for r in readers.get(t, ()))):
                return False
    inputs = [bound[r] for r in _ROLES[kind] if r != "forget_bias"]
    if any(t.op in whole for t in inputs):
        return False
    dtype = anchor.outputs[0].dtype

    def made_by(op):
        return {t: k for t, (by, k) in outputs.items() if by is op}
    if kind == "gru":
        found.fuse[anchor] = ("_FusedGRUCell", inputs, {"T": dtype}, anchor.name, made_by(anchor))
    else:
        attrs = {"T": dtype, "forget_bias": _forget_bias(bound)}
        found.fuse[anchor] = ("_FusedLSTMCell", inputs, attrs, anchor.name, made_by(anchor))
    found.absorbed.update({o: anchor for o in forward if o is not anchor})
    if rep is None:
        found.units.append({anchor})
        return True

    def out(role):
        return m.known[pat.tensors[role]] if role in pat.tensors else Slot(anchor, role)
    dh = m.known[pat.free["d_new_h"]]
    if kind == "gru":
        grad = ("_FusedGRUCellGrad", [dh, bound["h"], out("gates"), out("cand"), bound["gate_kernel"],
                                      bound["cand_kernel"]], {"T": dtype})
    else:
        dc = [m.known[pat.free["d_new_c"]]] if "d_new_c" in pat.free else []
        grad = ("_FusedLSTMCellGrad", [dh, bound["c"], out("acts"), out("tanh_c"), bound["kernel"], *dc],
                {"T": dtype, "N": len(dc)})
    found.fuse[rep] = (*grad, rep.name, made_by(rep))
    found.absorbed.update({o: rep for o in backward | set(sums) if o is not rep})
    found.rewired.update(rewired)
    found.units.append({anchor, rep, *rewired})
    return True


def _sum_parts(parts: list, slot: Slot, made: tuple, group: set, readers: dict, pinned: set, pinned_ops: set,
               controlled: set, busy: set, outputs: dict, rewired: dict, sums: list) -> bool:
    """Makes the fused gradient's output `made` stand for `parts`, the gradient of one input from each of its uses
    in the cell: the one part itself; else the parts must all be read by one AddN (and nothing else), which the
    fused output replaces (`sums`) or, when it adds other gradients too, is rewired to read it (`rewired`)."""
    if len(parts) == 1:
        outputs[parts[0]] = made
        return True
    if len({id(p) for p in parts}) != len(parts) or any(p in pinned for p in parts):
        return False
    users = {r for p in parts for r in readers.get(p, ()) if r not in group}
    if not users:
        return True  # nothing reads this gradient
    if len(users) != 1:
        return False
    (a,) = users
    if a.type != "AddN" or a in pinned_ops or a in controlled or a in busy or a in rewired \
            or any(sum(t is p for t in a.inputs) != 1 for p in parts):
        return False
    rest = [t for t in a.inputs if not any(t is p for p in parts)]
    if not rest:
        outputs[a.outputs[0]] = made
        sums.append(a)
        return True
    rewired[a] = [slot] + rest
    outputs[slot] = made
    return True


def fuse_weight_sums(ops: set, readers: dict, pinned: set, pinned_ops: set, controlled: set, busy: set) -> Cells:
    """Each AddN that sums two or more MatMul(a_i, g_i, transpose_a=True) outputs (the gradient of a kernel that
    unrolled steps share: one product per step) becomes one _FusedMatMulSum, and so does the AddN of the
    BiasAddGrad(g_i) of the same g_i where there is one: a few launches per weight instead of two per step. What
    else the AddN adds (weight decay's gradient) it adds to the sum; ops of `busy` are another pass's."""
    found = Cells()

    def free(op: Operation) -> bool:
        return op in ops and op not in pinned_ops and op not in controlled and op not in busy \
            and op not in found.fuse and op not in found.absorbed

    def alone(t: Tensor, reader: Operation) -> bool:
        return t not in pinned and readers.get(t) == [reader]

    bias_sums = {}  # the g tensors (as a frozenset) -> the AddN of their BiasAddGrads
    for op in sorted(ops, key=lambda o: o._id):
        grads = [t.op for t in op.inputs]
        if op.type == "AddN" and len(grads) > 1 and free(op) and len(set(grads)) == len(grads) and all(
                b.type == "BiasAddGrad" and free(b) and alone(t, op) and b.inputs[0]._shape is not None
                and len(b.inputs[0]._shape) == 2 for b, t in zip(grads, op.inputs)):
            bias_sums[frozenset(b.inputs[0] for b in grads)] = op
    for add in sorted(ops, key=lambda o: o._id):
        if add.type != "AddN" or not free(add):
            continue
        products = [t for t in add.inputs if t.op.type == "MatMul" and t.op.attrs.get("transpose_a")
                    and not t.op.attrs.get("transpose_b") and free(t.op) and alone(t, add)]
        if len(products) < 2 or len({t.op for t in products}) < len(products):
            continue
        a = [t.op.inputs[0] for t in products]
        g = [t.op.inputs[1] for t in products]
        bias = bias_sums.get(frozenset(g)) if len(set(g)) == len(g) else None
        if bias is not None and not free(bias):
            bias = None
        rest = [t for t in add.inputs if not any(t is p for p in products)]
        rep = products[-1].op
        made = {add.outputs[0] if not rest else Slot(rep, "sum"): 0}
        if bias is not None:
            made[bias.outputs[0]] = 1
            found.absorbed.update({o: rep for o in [bias, *(t.op for t in bias.inputs)]})
        found.fuse[rep] = ("_FusedMatMulSum", a + g, {"T": add.attrs["T"], "N": 2 * len(a)}, rep.name, made)
        found.absorbed.update({t.op: rep for t in products[:-1]})
        if rest:
            found.rewired[add] = [Slot(rep, "sum"), *rest]
            found.units.append({rep, add})
        else:
            found.absorbed[add] = rep
            found.units.append({rep})
    return found
