"""NoOp and grouping; control flow (tf.cond, tf.while_loop, tf.TensorArray) as functional If/While ops."""
from __future__ import annotations

import numpy as np

from tfplus import dtypes as _dt
from tfplus import flops as _flops
from tfplus.framework import (
    Graph,
    IndexedSlices,
    Operation,
    Tensor,
    constant_value,
    control_dependencies,
    convert_to_tensor,
    get_default_graph,
    name_scope,
    needed_ops,
)
from tfplus.ops.array_ops import gather
from tfplus.ops.row_rules import reduces, subgraphs
from tfplus.registry import has_tag, not_differentiable, register_gradient, register_op, register_rows
from tfplus.tensor_shape import fmt, spec

__all__ = ["cond", "case", "while_loop", "TensorArray", "Assert", "map_fn", "scan", "foldl", "foldr"]

register_op("NoOp", outputs=(), shape_fn=lambda ins, attrs: [], flops=_flops.zero)
not_differentiable("NoOp")


def no_op(name=None) -> Operation:
    """An op that does nothing; useful as a target for control dependencies."""
    return get_default_graph().create_op("NoOp", [], {}, name or "NoOp")


def group(*inputs, name=None) -> Operation:
    """`train = tf.group(update_a, update_b)`: an op that runs after all of `inputs`."""
    def flat(xs):  # TF flattens nested lists: BERT's tf.group(train_op, [global_step.assign(...)])
        for x in xs:
            yield from flat(x) if isinstance(x, (list, tuple)) else (x,)
    ops = []
    for x in flat(inputs):
        x = getattr(x, "op", x) if not isinstance(x, Operation) else x
        if isinstance(x, Tensor):
            x = x.op
        ops.append(x)
    with control_dependencies(ops):
        return no_op(name=name or "group_deps")


def tuple_(tensors, name=None):
    """tf.tuple: the same tensors, each available only after all of them are computed (an IndexedSlices stays
    one: its values and indices are gated)."""
    from tfplus.ops.array_ops import identity

    def gated(t):
        if isinstance(t, IndexedSlices):
            return IndexedSlices(identity(t.values), identity(t.indices), t.dense_shape)
        return identity(t)
    with name_scope(name, "tuple"):
        gate = group(*[p for t in tensors if t is not None
                       for p in ((t.values, t.indices) if isinstance(t, IndexedSlices) else (t,))])
        with control_dependencies([gate]):
            return [None if t is None else gated(t) for t in tensors]


# == Control flow: tf.cond, tf.while_loop, tf.TensorArray ====================================================
# NOTE (design): control flow is functional, as TF2's If/While ops: a branch, a loop condition and a loop body
# are each traced once into a sub-graph (FuncGraph) held by one op's attrs, and that op's kernel runs the
# sub-graph(s) on the session's device (KernelContext.run_subgraph) with the loop bookkeeping on the host. The
# alternative, TF1's own dataflow ops (Switch/Merge/Enter/Exit/NextIteration/LoopCond), would let GraphDefs with
# TF1 control flow import, but needs an executor with frames, dead tensors and cycles, a planner that reasons
# about them, and TF1's stack-based gradient machinery. Sub-graphs keep the executor and planner acyclic and
# straight-line (each op still runs once per step) and make gradients plain graph building: the gradient of a
# While is another While whose body is the original body inlined plus tf.gradients. GraphDefs carry them as
# TensorFlow 2 does (functional If/While, the sub-graphs in the function library: tfplus.graph_io), which
# TensorFlow imports and runs; the cost is that TF1-exported GraphDefs with Switch/Merge/Enter/Exit do not import.


class FuncGraph(Graph):
    """A sub-graph of a control-flow op. Tensors of enclosing graphs used inside are captured: each becomes a
    placeholder here and an input of the op (its value is read once when the op runs)."""

    def __init__(self, outer: Graph, name: str):
        super().__init__()
        self.outer, self.name, self.seed = outer, name, outer.seed
        self.inputs: list[Tensor] = []  # the explicit inputs' placeholders (loop variables)
        self.outputs: list[Tensor] = []
        self.captured: list[Tensor] = []  # outer-graph tensors (in self.outer), one per capture placeholder
        self.capture_placeholders: list[Tensor] = []
        self._captures: dict[Tensor, Tensor] = {}  # any enclosing graph's tensor -> its placeholder here
        # TF1 builds a loop's or cond's body in the graph itself: get_variable(reuse=True) there (a layer object
        # called again in the body) finds the variables the graph holds.
        self._var_store = outer._var_store

    @property
    def outer_graphs(self) -> tuple:
        out, g = [], self.outer
        while g is not None:
            out.append(g)
            g = getattr(g, "outer", None)
        return tuple(out)

    @property
    def all_inputs(self) -> list[Tensor]:
        """The placeholders fed when the sub-graph runs: explicit inputs, then captures."""
        return self.inputs + self.capture_placeholders

    def capture(self, t: Tensor) -> Tensor:
        if t.graph is self:
            return t
        if t in self._captures:
            return self._captures[t]
        if t.graph not in self.outer_graphs:
            raise ValueError(f"Tensor '{t.name}' is from a graph that does not enclose control-flow sub-graph "
                             f"'{self.name}'")
        src = t if t.graph is self.outer else self.outer.capture(t)
        from tfplus.ops.array_ops import placeholder
        with self.as_default():
            ph = placeholder(t.dtype, t._shape, name="capture")
        self._captures[t] = ph
        self.captured.append(src)
        self.capture_placeholders.append(ph)
        return ph

    def capture_source(self, placeholder: Tensor) -> Tensor | None:
        """The enclosing graph's tensor that `placeholder` captures (None for a placeholder of another kind)."""
        for ph, src in zip(self.capture_placeholders, self.captured):
            if ph is placeholder:
                return src
        return None

    def create_op(self, op_type, inputs=(), attrs=None, name=None, dtypes=None):
        inputs = [self.capture(t) if isinstance(t, Tensor) and t.graph is not self else t for t in inputs]
        return super().create_op(op_type, inputs, attrs, name, dtypes)


def _flatten(structure) -> list:
    """The leaves (tensors, TensorArrays, values) of nested lists, tuples, namedtuples and dicts."""
    if isinstance(structure, (list, tuple)):
        return [leaf for s in structure for leaf in _flatten(s)]
    if isinstance(structure, dict):
        return [leaf for k in sorted(structure) for leaf in _flatten(structure[k])]
    return [structure]


def _pack(structure, flat: list):
    """`flat` (as _flatten gives it) put back into `structure`'s nesting."""
    it = iter(flat)

    def build(s):
        if isinstance(s, (list, tuple)):
            parts = [build(x) for x in s]
            return type(s)(*parts) if hasattr(s, "_fields") else type(s)(parts)
        if isinstance(s, dict):
            return {k: build(s[k]) for k in sorted(s)}
        return next(it)
    return build(structure)


def _to_tensors(leaves) -> list[Tensor]:
    return [leaf._loop_flow() if isinstance(leaf, TensorArray) else convert_to_tensor(leaf) for leaf in leaves]


def _from_tensors(templates, tensors) -> list:
    return [t._with_flow(x) if isinstance(t, TensorArray) else x for t, x in zip(templates, tensors)]


def _trace(fn, outer: Graph, name: str, arg_templates, arg_shapes, call) -> FuncGraph:
    """Traces `call(fn, args)` into a FuncGraph whose inputs are placeholders shaped by `arg_shapes`."""
    from tfplus.ops.array_ops import placeholder
    g = FuncGraph(outer, name)
    with g.as_default():
        phs = [placeholder(t.dtype, s, name=f"arg{i}") for i, (t, s) in enumerate(zip(arg_templates, arg_shapes))]
        result = call(fn, phs)
        g.inputs = phs
        g.structure = result
        g.outputs = [g.capture(t) for t in _to_tensors(_flatten(result))]
    return g


def _inline(sub: FuncGraph, inputs: list[Tensor], redraw: bool = False, branch: str = "") -> list[Tensor]:
    """Re-creates `sub`'s ops in the default graph with its placeholders (all_inputs) replaced by `inputs`;
    returns what its outputs became. With `redraw`, a gradient's recomputation of a branch or loop body that ran:
    its random ops draw again, last first, the numbers the original's drew (attr _redraw: the original's name;
    KernelContext.random_draw), so that a dropout's backward uses its forward's mask in every iteration. `branch`:
    the If and branch ('cond/If/then') under whose name a budgeted step's copy of the branch names its ops
    (tfplus.engine.step.resolve_conds: attr _redraw_in)."""
    graph = get_default_graph()
    mapped = dict(zip(sub.all_inputs, inputs))
    ops_map: dict = {}
    for op in sub.get_operations():
        if op.outputs and all(t in mapped for t in op.outputs):
            continue
        attrs = dict(op.attrs)
        if redraw and has_tag(op.type, "random"):
            op.attrs["_redrawn"] = True  # its draws are kept for the copy (set before either runs: a gradient's)
            attrs["_redraw"] = op.name
            if branch:
                attrs["_redraw_in"] = branch
        new = graph.create_op(op.type, [mapped[t] for t in op.inputs], attrs, name=op.name)
        for c in op.control_inputs:
            if c in ops_map:
                new._add_control_input(ops_map[c])
        ops_map[op] = new
        mapped.update(zip(op.outputs, new.outputs))
    return [mapped[t] for t in sub.outputs]


def _merge_shapes(a, b):
    """The most specific shape both `a` and `b` have (dims that differ become unknown)."""
    if a is None or b is None or len(a) != len(b):
        return None
    return tuple(x if x == y else None for x, y in zip(a, b))


# -- If (tf.cond) --------------------------------------------------------------------------------------------
def _if_shape(ins, attrs):
    if ins[0].dtype is not _dt.bool_ or ins[0].shape not in (None, ()):
        raise TypeError(f"cond's pred must be a bool scalar, got {ins[0].dtype.name} {fmt(ins[0].shape)}")
    return [spec(s, t) for s, t in zip(attrs["output_shapes"], attrs["Tout"])]


register_op("If", inputs=("cond", "input*"), outputs=("output",),
            attrs={"Tcond": "type", "Tin": "list(type)", "Tout": "list(type)", "then_branch": "func",
                   "else_branch": "func", "n_then": "int", "output_shapes": "list(shape)"},
            shape_fn=_if_shape, allocates_outputs=True, flops=_flops.zero)
register_rows(subgraphs, "If")


@register_gradient("If")
def _if_grad(op, *grads):
    """d inputs = the taken branch's vector-Jacobian product (an If on the same pred); 0 for the other's"""
    from tfplus.gradients import gradients
    from tfplus.ops.array_ops import zeros_like
    then_g, else_g, n_then = op.attrs["then_branch"], op.attrs["else_branch"], op.attrs["n_then"]
    ins = op.inputs[1:]
    wanted = [k for k, t in enumerate(ins) if t.dtype.is_floating]
    if not wanted:
        return [None] * len(op.inputs)
    dys = [g if g is not None or not t.dtype.is_floating else zeros_like(t) for t, g in zip(op.outputs, grads)]

    def vjp(branch, lo, hi, side):
        def fn():
            g = get_default_graph()
            xs = [g.capture(t) for t in ins]
            ys = _inline(branch, xs[lo:hi], redraw=True, branch=f"{op.name}/{side}")
            pairs = [(y, g.capture(d)) for y, d in zip(ys, dys) if y.dtype.is_floating]
            # NOTE: an outer tensor both branches use is two inputs of the If but one placeholder here: each
            # input gets the gradient only from its own branch's range [lo, hi).
            own = [k for k in wanted if lo <= k < hi]
            got = gradients([y for y, _ in pairs], [xs[k] for k in own], grad_ys=[d for _, d in pairs]) \
                if pairs and own else [None] * len(own)
            by_input = dict(zip(own, got))
            return [zeros_like(xs[k]) if by_input.get(k) is None else by_input[k] for k in wanted]
        return fn
    with op.graph.as_default():
        out = cond(op.inputs[0], vjp(then_g, 0, n_then, "then"), vjp(else_g, n_then, len(ins), "else"), strict=True)
    result = [None] * len(op.inputs)
    for k, d in zip(wanted, out):
        result[1 + k] = d
    return result


def cond(pred, true_fn=None, false_fn=None, strict=False, name=None, fn1=None, fn2=None):
    """`tf.cond(x < y, lambda: x + 1, lambda: y * 2)`: runs only the branch `pred` picks. The branches return
    the same structure of tensors with the same dtypes (shapes may differ: the output has the shape both
    share). A single-element list result is unpacked unless strict=True, as in TF1."""
    true_fn, false_fn = true_fn or fn1, false_fn or fn2
    if not callable(true_fn) or not callable(false_fn):
        raise TypeError("tf.cond: true_fn and false_fn must be callables (e.g. lambda: x + 1)")
    if isinstance(pred, (bool, np.bool_)):
        raise TypeError("tf.cond: pred must be a bool Tensor, not a Python bool (use an if statement)")
    pred = convert_to_tensor(pred)
    outer = get_default_graph()
    with name_scope(name, "cond"):
        then_g = _trace(true_fn, outer, "cond_true", [], [], lambda fn, args: fn())
        else_g = _trace(false_fn, outer, "cond_false", [], [], lambda fn, args: fn())
        t_leaves, e_leaves = _flatten(then_g.structure), _flatten(else_g.structure)
        if len(t_leaves) != len(e_leaves):
            raise ValueError(f"tf.cond: true_fn returns {len(t_leaves)} tensors, false_fn {len(e_leaves)}; "
                             "both branches must return the same structure")
        for k, (a, b) in enumerate(zip(then_g.outputs, else_g.outputs)):
            if a.dtype is not b.dtype:
                raise TypeError(f"tf.cond: output {k} is {a.dtype.name} in true_fn but {b.dtype.name} in "
                                "false_fn")
        shapes = [_merge_shapes(a._shape, b._shape) for a, b in zip(then_g.outputs, else_g.outputs)]
        ins = then_g.captured + else_g.captured
        op = outer.create_op("If", [pred] + ins, {
            "Tcond": pred.dtype, "Tin": [t.dtype for t in ins], "Tout": [t.dtype for t in then_g.outputs],
            "then_branch": then_g, "else_branch": else_g, "n_then": len(then_g.captured),
            "output_shapes": shapes}, "If")
    result = _pack(then_g.structure, _from_tensors(t_leaves, op.outputs))
    if not strict and isinstance(result, (list, tuple)) and len(result) == 1:
        return result[0]
    return result


def case(pred_fn_pairs, default=None, exclusive=False, strict=False, name="case"):
    """`tf.case([(x < 0, f1), (x > 5, f2)], default=f3)`: the callable of the first true predicate, else
    `default`, as nested tf.conds (so only the chosen callable's ops run). Without a default the last callable
    is the default, as in TF1. `exclusive=True` fails the run (InvalidArgumentError) when more than one
    predicate is true."""
    pairs = list(pred_fn_pairs.items() if isinstance(pred_fn_pairs, dict) else pred_fn_pairs)
    for pair in pairs:
        if not isinstance(pair, tuple) or len(pair) != 2 or not callable(pair[1]):
            raise TypeError(f"tf.case: each entry of pred_fn_pairs must be a (predicate, callable) pair, got "
                            f"{pair!r}")
    if default is None:
        if not pairs:
            raise ValueError("tf.case: pred_fn_pairs is empty and there is no default")
        pairs, default = pairs[:-1], pairs[-1][1]
    preds = [convert_to_tensor(p) for p, _ in pairs]

    def branch(i):
        if i == len(pairs):
            return default()
        return cond(preds[i], pairs[i][1], lambda: branch(i + 1), strict=strict)
    with name_scope(name, "case"):
        if not (exclusive and len(preds) > 1):
            return branch(0)
        from tfplus.ops import array_ops, math_ops
        count = math_ops.reduce_sum(math_ops.cast(array_ops.stack(preds), _dt.int32))
        check = Assert(math_ops.less_equal(count, 1), [count], name="exclusive")
        with control_dependencies([check]):
            return branch(0)


# -- While (tf.while_loop) -----------------------------------------------------------------------------------
def _while_shape(ins, attrs):
    shapes, types = attrs["output_shapes"], attrs["T"]
    finals = [spec(s, t) for s, t in zip(shapes, types)]
    history = [spec(None if s is None else (None,) + tuple(s), t) for s, t in zip(shapes, types)]
    return finals + history + [spec((), _dt.int32)]


# Outputs: the loop variables' final values; each one's value at the start of every iteration, stacked
# ([iterations, ...]: what the gradient reads; recorded only while something consumes it); the iteration count.
register_op("While", inputs=("input*",), outputs=("output",),
            attrs={"T": "list(type)", "cond": "func", "body": "func", "n_cond": "int",
                   "output_shapes": "list(shape)", "parallel_iterations": "int"},
            shape_fn=_while_shape, allocates_outputs=True, flops=_flops.zero)
register_rows(subgraphs, "While")


@register_gradient("While")
def _while_grad(op, *grads):
    """d loop vars, d captures: a While running backward over the recorded iterations; each step is the
    body's vector-Jacobian product at that iteration's values (body inlined + tf.gradients)"""
    from tfplus.gradients import gradients
    from tfplus.ops.array_ops import gather, zeros_like
    from tfplus.ops.math_ops import add, greater, subtract
    from tfplus.tensor_shape import TensorShape
    body, n_cond = op.attrs["body"], op.attrs["n_cond"]
    n = len(op.attrs["T"])
    if any(g is not None for g in grads[n:]):
        raise LookupError(f"While '{op.name}': second-order gradients through tf.while_loop are not supported")
    loop_in, caps = op.inputs[:n], op.inputs[n + n_cond:]
    history, count = op.outputs[n:2 * n], op.outputs[2 * n]
    # Which loop variables each body output depends on: the backward steps only through the variables a gradient
    # reaches (fk), and reads the history of only those the body needs for them (used). A variable outside both
    # (an accumulator that changes shape, say) is neither recorded nor differentiated.
    deps = [{m for m, ph in enumerate(body.inputs) if ph.op in needed_ops([y], set())} for y in body.outputs]
    fk = [k for k in range(n) if loop_in[k].dtype.is_floating and grads[k] is not None]
    grown = True
    while grown:
        more = {m for k in fk for m in deps[k] if loop_in[m].dtype.is_floating} - set(fk)
        fk, grown = sorted(set(fk) | more), bool(more)
    used = set().union(*(deps[k] for k in fk)) if fk else set()
    growing = set(fk) & getattr(op, "growing_arrays", set())
    if growing:
        from tfplus.unsupported import UnsupportedError
        raise UnsupportedError(
            f"While '{op.name}': the gradient through a tf.TensorArray(dynamic_size=True) written in the loop is "
            f"not supported (loop variable {min(growing)}: its rows grow each iteration); give the array a fixed "
            "size, the loop's iteration count, and no dynamic_size")
    fc = [m for m, c in enumerate(caps) if c.dtype.is_floating]
    if not fk and not fc:
        return [None] * len(op.inputs)

    def body_fn(j, *acc):
        g = get_default_graph()
        dy, dc = acc[:len(fk)], acc[len(fk):]
        j1 = subtract(j, 1)
        # NOTE: an unused variable's placeholder gets its initial value: nothing computed from it is run
        xs = [gather(h, j1) if k in used else g.capture(loop_in[k]) for k, h in enumerate(history)]
        cs = [g.capture(c) for c in caps]
        ys = _inline(body, xs + cs, redraw=True)
        got = gradients([ys[k] for k in fk], [xs[k] for k in fk] + [cs[m] for m in fc], grad_ys=list(dy))
        new_dy = [zeros_like(xs[k]) if d is None else d for k, d in zip(fk, got[:len(fk)])]
        new_dc = [a if d is None else add(a, d) for a, d in zip(dc, got[len(fk):])]
        return [j1] + new_dy + new_dc

    with op.graph.as_default():
        dy0 = [zeros_like(op.outputs[k]) if grads[k] is None else grads[k] for k in fk]
        dc0 = [zeros_like(caps[m]) for m in fc]
        # A loop variable of no fixed shape (a TensorArray its first write fills) has a gradient of none either.
        shapes = [op.attrs["output_shapes"][k] for k in fk]
        invariants = [TensorShape(t._shape) for t in [count] + dy0 + dc0]
        invariants[1:1 + len(fk)] = [TensorShape(None) if s is None else i
                                     for s, i in zip(shapes, invariants[1:1 + len(fk)])]
        out = while_loop(lambda j, *acc: greater(j, 0), body_fn, [count] + dy0 + dc0, invariants,
                         return_same_structure=True, name="while_grad")
    result = [None] * len(op.inputs)
    for k, d in zip(fk, out[1:1 + len(fk)]):
        result[k] = d
    for m, d in zip(fc, out[1 + len(fk):]):
        result[n + n_cond + m] = d
    return result


def while_loop(cond, body, loop_vars, shape_invariants=None, parallel_iterations=10, back_prop=True,
               swap_memory=False, name=None, maximum_iterations=None, return_same_structure=False):
    """TF1's `tf.while_loop`: repeats `loop_vars = body(*loop_vars)` while `cond(*loop_vars)` is True.

        i, acc = tf.while_loop(lambda i, acc: i < 10, lambda i, acc: (i + 1, acc * x), [0, 1.0])

    loop_vars: a (nested) structure of tensors and TensorArrays. Each keeps its shape from one iteration to the
    next unless `shape_invariants` (the same structure of shapes, None dims free) relaxes it; a relaxed shape
    that changes has no gradient. `maximum_iterations` bounds the iterations; back_prop=False stops gradients.
    A single loop variable is returned unpacked unless return_same_structure=True."""
    if not callable(cond) or not callable(body):
        raise TypeError("tf.while_loop: cond and body must be callables")
    if maximum_iterations is not None:  # TF1's way: a hidden counter in front of the loop variables
        from tfplus.ops.math_ops import add, less, logical_and
        limit = convert_to_tensor(maximum_iterations)
        inner_cond, inner_body = cond, body
        invariants = None if shape_invariants is None else (None, shape_invariants)

        def cond(i, lv):
            return logical_and(less(i, limit), _call(inner_cond, lv))

        def body(i, lv):
            return add(i, 1), _normalize(lv, _call(inner_body, lv))
        out = while_loop(cond, body, (convert_to_tensor(0, dtype=limit.dtype), loop_vars), invariants,
                         parallel_iterations, back_prop, swap_memory, name, None, True)[1]
        return out if return_same_structure or not _single(loop_vars) else _flatten(out)[0]
    leaves = _flatten(loop_vars)
    if not leaves:
        raise ValueError("tf.while_loop: loop_vars is empty")
    tensors = _to_tensors(leaves)
    if shape_invariants is None:  # a TensorArray that grows (or is filled) may change shape: TF1 needs no
        # invariant for it
        shapes = [None if isinstance(v, TensorArray) and (v._dynamic or v._fill_to is not None) else t._shape
                  for v, t in zip(leaves, tensors)]
    else:
        inv = _flatten(shape_invariants)
        if len(inv) != len(leaves):
            raise ValueError(f"tf.while_loop: {len(inv)} shape_invariants for {len(leaves)} loop variables")
        shapes = [_invariant(t, s) for t, s in zip(tensors, inv)]
    outer = get_default_graph()

    def call_with(fn, phs):
        return _call(fn, _pack(loop_vars, _from_tensors(leaves, phs)))

    def call_body(fn, phs):
        return _normalize(loop_vars, call_with(fn, phs))
    with name_scope(name, "while"):
        cond_g = _trace(cond, outer, "while_cond", tensors, shapes, call_with)
        if len(cond_g.outputs) != 1 or cond_g.outputs[0].dtype is not _dt.bool_ \
                or cond_g.outputs[0]._shape not in (None, ()):
            raise TypeError("tf.while_loop: cond must return one bool scalar tensor, got "
                            + ", ".join(f"{t.dtype.name} {fmt(t._shape)}" for t in cond_g.outputs))
        body_g = _trace(body, outer, "while_body", tensors, shapes, call_body)
        if len(body_g.outputs) != len(tensors):
            raise ValueError(f"tf.while_loop: body returns {len(body_g.outputs)} tensors for {len(tensors)} "
                             "loop variables; it must return the loop variables' structure")
        for t, y, s in zip(tensors, body_g.outputs, shapes):
            if y.dtype is not t.dtype:
                raise TypeError(f"tf.while_loop: loop variable '{t.name}' enters as {t.dtype.name} but the body "
                                f"returns {y.dtype.name}")
            if not _fits(y._shape, s):
                raise ValueError(f"Input tensor '{t.name}' enters the loop with shape {fmt(s)}, but has shape "
                                 f"{fmt(y._shape)} after one iteration. To allow the shape to vary across "
                                 "iterations, use the `shape_invariants` argument of tf.while_loop")
        ins = tensors + cond_g.captured + body_g.captured
        op = outer.create_op("While", ins, {
            "T": [t.dtype for t in tensors], "cond": cond_g, "body": body_g, "n_cond": len(cond_g.captured),
            "output_shapes": shapes, "parallel_iterations": int(parallel_iterations)}, "While")
        finals = op.outputs[:len(tensors)]
        op.growing_arrays = {k for k, v in enumerate(leaves) if isinstance(v, TensorArray) and v._dynamic}
        for v, y, final in zip(leaves, body_g.outputs, finals):
            if isinstance(v, TensorArray) and y._shape is not None and len(y._shape) > 0:
                # An array's elements keep the shape its writes gave (TF infers element_shape from them); only
                # a growing array's length is unknown.
                final.set_shape([None if v._dynamic else constant_value(v._fill_to)] + list(y._shape[1:])
                                if v._fill_to is not None or v._dynamic else y._shape)
        if not back_prop:
            from tfplus.ops.array_ops import stop_gradient
            finals = [stop_gradient(t) for t in finals]
    result = _pack(loop_vars, _from_tensors(leaves, finals))
    return result if return_same_structure or not _single(loop_vars) else _flatten(result)[0]


def _single(loop_vars) -> bool:
    return len(_flatten(loop_vars)) == 1


def _call(fn, lv):
    """TF1 calls cond and body with the loop variables unpacked when they are a list or tuple."""
    return fn(*lv) if isinstance(lv, (list, tuple)) and not hasattr(lv, "_fields") else fn(lv)


def _normalize(loop_vars, result):
    """A body returning a bare tensor for a one-element loop_vars list counts as that list."""
    if isinstance(loop_vars, (list, tuple)) and not hasattr(loop_vars, "_fields") and len(loop_vars) == 1 \
            and not isinstance(result, (list, tuple)):
        return type(loop_vars)([result])
    return result


def _invariant(t: Tensor, s):
    from tfplus.tensor_shape import TensorShape
    shape = TensorShape(s).dims_tuple if s is not None else None
    if not _fits(t._shape, shape):
        raise ValueError(f"tf.while_loop: shape invariant {fmt(shape)} is not compatible with loop variable "
                         f"'{t.name}' of shape {fmt(t._shape)}")
    return shape


def _fits(actual, invariant) -> bool:
    """Whether a shape satisfies an invariant (None dims, or a None shape, are free)."""
    if invariant is None:
        return True
    if actual is None:
        return False
    return len(actual) == len(invariant) and all(i is None or a == i for a, i in zip(actual, invariant))


# -- TensorArray ---------------------------------------------------------------------------------------------
class TensorArray:
    """TF1's tf.TensorArray: a [size, *element_shape] tensor (its flow) that write() replaces (a Select of the
    written row) and read() gathers from, so it can be a tf.while_loop variable and gradients flow through it
    with registered ops only.

        ta = tf.TensorArray(tf.float32, size=n, element_shape=[4])
        _, ta = tf.while_loop(lambda t, ta: t < n, lambda t, ta: (t + 1, ta.write(t, x[t] * 2.0)), [0, ta])
        y = ta.stack()  # [n, 4]

    Without element_shape the first write, unstack or scatter gives it. With dynamic_size=True a write past the
    end grows it (in a loop too, from size 0; a growing array has no gradient through the loop).
    """

    def __init__(self, dtype, size=None, dynamic_size=None, clear_after_read=None, tensor_array_name=None,
                 handle=None, flow=None, infer_shape=True, element_shape=None, colocate_with_first_write_call=True,
                 name=None):
        from tfplus.ops.array_ops import _index_tensor, concat, zeros
        from tfplus.tensor_shape import TensorShape
        self._dtype = _dt.as_dtype(dtype)
        self._dynamic = bool(dynamic_size)
        self._size, self._name = size, name
        # A fixed-size array without element_shape entering a loop holds an empty flow until its first write,
        # which fills it to this many rows.
        self._fill_to = None
        self.flow = None if flow is None else convert_to_tensor(flow)
        if flow is not None:
            return
        if size is None:
            raise ValueError("tf.TensorArray needs a size (0 with dynamic_size=True for an array that grows)")
        dims = element_shape.as_list() if isinstance(element_shape, TensorShape) and element_shape.ndims is not None \
            else None if isinstance(element_shape, TensorShape) else element_shape
        dims = dims if dims is None or isinstance(dims, Tensor) else list(dims)
        if isinstance(dims, list) and not any(isinstance(d, Tensor) for d in dims) and None in dims:
            dims = None  # known when the first element is written
        if dims is None:
            if self._dynamic and constant_value(convert_to_tensor(size)) == 0:
                self.flow = zeros([0], self._dtype, name=name or "TensorArray")  # no element yet: any shape
            return
        shape = concat([_index_tensor([size]), _index_tensor(dims)], 0)
        self.flow = zeros(shape, self._dtype, name=name or "TensorArray")

    def _with_flow(self, flow: Tensor) -> TensorArray:
        ta = TensorArray(self._dtype, flow=flow, dynamic_size=self._dynamic)
        ta._fill_to = self._fill_to
        return ta

    def _flow_for(self, element_shape: Tensor, what: str) -> Tensor:
        """The flow, made of zeros [size, *element_shape] when no element has given its shape yet."""
        from tfplus.ops.array_ops import _index_tensor, concat, zeros
        if self.flow is not None:
            return self.flow
        return zeros(concat([_index_tensor([self._size]), element_shape], 0), self._dtype, name=self._name)

    def _loop_flow(self) -> Tensor:
        from tfplus.ops.array_ops import zeros
        if self.flow is None:
            # The loop's first write gives the element shape (TF infers it from that write too).
            self._fill_to = convert_to_tensor(self._size, dtype=_dt.int32)
            self.flow = zeros([0], self._dtype, name=self._name or "TensorArray")
        return self.flow

    @property
    def dtype(self):
        return self._dtype

    def size(self, name=None) -> Tensor:
        from tfplus.ops.array_ops import shape
        if self.flow is None:
            return convert_to_tensor(self._size, dtype=_dt.int32)
        return shape(self.flow)[0]

    def _filled(self, what: str) -> Tensor:
        if self.flow is None:
            raise ValueError(f"tf.TensorArray.{what}: no element has been written, so its element shape is unknown "
                             "(give element_shape)")
        return self.flow

    def read(self, index, name=None) -> Tensor:
        from tfplus.ops.array_ops import gather
        return gather(self._filled("read"), index, name=name)

    def write(self, index, value, name=None) -> TensorArray:
        from tfplus.ops.array_ops import broadcast_to, concat, expand_dims, reshape, shape, zeros
        from tfplus.ops.math_ops import equal, maximum, select, subtract
        from tfplus.ops.math_ops import range as range_
        value = convert_to_tensor(value, dtype=self._dtype)
        index = convert_to_tensor(index)
        flow = self._flow_for(shape(value), "write")
        held = None if flow._shape is None or flow._shape == (0,) else tuple(flow._shape[1:])
        if held is not None and value._shape is not None and None not in held + tuple(value._shape) \
                and held != tuple(value._shape):
            from tfplus.unsupported import UnsupportedError
            raise UnsupportedError(
                f"tf.TensorArray.write: element {fmt(value._shape)} into an array of {fmt(held)} elements: tfplus's "
                "TensorArray holds elements of one shape (infer_shape=False arrays of ragged elements are not "
                "supported); pad the elements to one shape, or collect them in a Python list and tf.concat it")
        if self._dynamic or self._fill_to is not None:
            # NOTE: an empty flow ([0]) takes the element's shape by the reshape; then rows are added up to index
            # (a growing array) or to its size (a fixed-size one whose first write this may be)
            n = shape(flow)[0]
            flow = reshape(flow, concat([expand_dims(n, 0), shape(value)], 0))
            grow = maximum(subtract(index + 1 if self._dynamic else self._fill_to, n), 0)
            flow = concat([flow, zeros(concat([expand_dims(grow, 0), shape(value)], 0), self._dtype)], 0)
        rows = equal(range_(0, shape(flow)[0]), index)
        written = select(rows, broadcast_to(expand_dims(value, 0), shape(flow)), flow, name=name)
        if not (self._dynamic or self._fill_to is not None):
            written.set_shape(flow.shape)  # a write keeps the array's shape (a loop variable's invariant)
        elif value._shape is not None:  # the element's shape is the written value's
            rows = None if self._dynamic else constant_value(self._fill_to)
            written.set_shape([None if rows is None else int(rows)] + list(value._shape))
        return self._with_flow(written)

    def stack(self, name=None) -> Tensor:
        from tfplus.ops.array_ops import identity
        return identity(self._filled("stack"), name=name)

    def gather(self, indices, name=None) -> Tensor:
        from tfplus.ops.array_ops import gather
        return gather(self._filled("gather"), indices, name=name)

    def concat(self, name=None) -> Tensor:
        """The elements joined along their first axis (TF's; they are of one shape here)."""
        from tfplus.ops.array_ops import concat, reshape, shape
        flow = self._filled("concat")
        out = reshape(flow, concat([[-1], shape(flow)[2:]], 0), name=name)
        if flow._shape is not None and len(flow._shape) > 1:
            rows = None if None in flow._shape[:2] else flow._shape[0] * flow._shape[1]
            out.set_shape([rows] + list(flow._shape[2:]))
        return out

    def unstack(self, value, name=None) -> TensorArray:
        return self._with_flow(convert_to_tensor(value, dtype=self._dtype))

    def scatter(self, indices, value, name=None) -> TensorArray:
        """Row indices[i] becomes value[i]; the other rows stay."""
        from tfplus.ops.array_ops import expand_dims, gather, shape
        from tfplus.ops.math_ops import argmax, cast, equal, reduce_any, select
        from tfplus.ops.math_ops import range as range_
        value = convert_to_tensor(value, dtype=self._dtype)
        indices = convert_to_tensor(indices)
        flow = self._flow_for(shape(value)[1:], "scatter")
        hits = equal(expand_dims(range_(0, shape(flow)[0], dtype=indices.dtype), 1), expand_dims(indices, 0))
        rows = gather(value, argmax(cast(hits, _dt.int32), 1))  # each row's value, where an index names it
        return self._with_flow(select(reduce_any(hits, 1), rows, flow, name=name))

    def identity(self) -> TensorArray:
        return self

    def close(self, name=None):
        return no_op(name=name)


# -- Assert --------------------------------------------------------------------------------------------------
def _assert_shape(ins, attrs):
    if ins[0].dtype is not _dt.bool_ or ins[0].shape not in (None, ()):
        raise TypeError(f"Assert's condition must be a bool scalar, got {ins[0].dtype.name} {fmt(ins[0].shape)}")
    return []


register_op("Assert", inputs=("condition", "data*"), outputs=(), attrs={"T": "list(type)", "summarize": "int"},
            shape_fn=_assert_shape, stateful=True, flops=_flops.zero)
register_rows(reduces, "Assert")
not_differentiable("Assert")


def Assert(condition, data, summarize=None, name=None) -> Operation:
    """`tf.Assert(x > 0, [x])`: an op that fails the run (InvalidArgumentError showing `data`, at most
    `summarize` entries each) when `condition` is False. Make it run with tf.control_dependencies."""
    cond_t = convert_to_tensor(condition)
    data = [convert_to_tensor(d) for d in data]
    return get_default_graph().create_op("Assert", [cond_t] + data, {
        "T": [d.dtype for d in data], "summarize": 3 if summarize is None else int(summarize)}, name or "Assert")


# -- map_fn / scan / foldl / foldr: tf.while_loop over the first axis ----------------------------------------
def _first_axis(elems, what: str):
    """The flattened elems and their common first dimension (an int, else a scalar tensor)."""
    from tfplus.ops.array_ops import shape
    leaves = [convert_to_tensor(e) for e in _flatten(elems)]
    if not leaves:
        raise ValueError(f"{what}: elems is empty")
    n = leaves[0]._shape[0] if leaves[0]._shape else None
    return leaves, (n if n is not None else shape(leaves[0])[0])


def _stack_outputs(first, n, step_fn, start, carry_init, name, pos=lambda t: t):
    """Runs `step_fn(t, carry) -> (outputs, carry)` for t in [start, n) after `first` (the outputs of step 0, which
    start 0 computes again in the loop: `first` then only gives the outputs' structure and shapes);
    returns the outputs of every step stacked along a new first axis (step t at row pos(t)), and the final
    carry."""
    from tfplus.ops.array_ops import concat, expand_dims, shape, zeros
    from tfplus.ops.math_ops import add, less
    first_leaves = [convert_to_tensor(f) for f in _flatten(first)]
    rows = expand_dims(n, 0) if isinstance(n, Tensor) else [n]
    tas = [TensorArray(y.dtype, flow=zeros(concat([rows, list(y._shape) if _static(y) else shape(y)], 0), y.dtype))
           for y in first_leaves]
    if start != 0:
        tas = [ta.write(pos(0), y) for ta, y in zip(tas, first_leaves)]

    def body(t, carry, tas):
        outs, carry = step_fn(t, carry)
        return add(t, 1), carry, [ta.write(pos(t), y) for ta, y in zip(tas, _flatten(outs))]
    _, carry, tas = while_loop(lambda t, carry, tas: less(t, n), body, [convert_to_tensor(start), carry_init, tas],
                               return_same_structure=True, name=name)
    stacked = [ta.stack() for ta in tas]
    for t, y in zip(stacked, first_leaves):  # [n, *each step's shape], as TF's (a conv layer reads its channels)
        if y._shape is not None:
            t.set_shape((n if isinstance(n, int) else None, *y._shape))
    return _pack(first, stacked), carry


def _static(t: Tensor) -> bool:
    return t._shape is not None and None not in t._shape


def map_fn(fn, elems, dtype=None, parallel_iterations=None, back_prop=True, swap_memory=False, infer_shape=True,
           name=None):
    """`tf.map_fn(lambda row: tf.reduce_sum(row * w), x)`: fn applied to each slice elems[i] (elems may be a
    nested structure of tensors sharing their first dimension, which must be at least 1), the results stacked."""
    leaves, n = _first_axis(elems, "tf.map_fn")
    with name_scope(name, "map"):
        first = fn(_pack(elems, [x[0] for x in leaves]))
        # `first` only tells the outputs' shapes (statically, or by tf.shape of the first row's where they are not
        # static): the loop maps every row, each read by a gather at the loop's counter, which a memory budget
        # micro-batches (planner.maps; planner.rows lets the first row be read for its shape alone).
        out, _ = _stack_outputs(first, n, lambda t, c: (fn(_pack(elems, [gather(x, t) for x in leaves])), c),
                                0, convert_to_tensor(0), "map_loop")
    if not back_prop:
        from tfplus.ops.array_ops import stop_gradient
        out = _pack(out, [stop_gradient(t) for t in _flatten(out)])
    return out


def scan(fn, elems, initializer=None, parallel_iterations=10, back_prop=True, swap_memory=False,
         infer_shape=True, reverse=False, name=None):
    """`tf.scan(lambda acc, x: acc + x, elems)`: every intermediate accumulator, stacked (the first is
    fn(initializer, elems[0]), or elems[0] itself without an initializer)."""
    from tfplus.ops.math_ops import subtract
    leaves, n = _first_axis(elems, "tf.scan")

    def pos(t):  # reverse=True walks the elements from the back; row i still belongs to elems[i]
        return subtract(subtract(n, 1), t) if reverse else t
    with name_scope(name, "scan"):
        def at(t):
            return _pack(elems, [gather(x, pos(t)) for x in leaves])
        first = at(0) if initializer is None else fn(initializer, at(0))

        def step(t, acc):
            acc = fn(acc, at(t))
            return acc, acc
        out, _ = _stack_outputs(first, n, step, 1, first, "scan_loop", pos)
    return out


def _fold(fn, elems, initializer, reverse: bool, what: str, name):
    from tfplus.ops.math_ops import add, less, subtract
    leaves, n = _first_axis(elems, what)
    with name_scope(name, what.split(".")[-1]):
        def at(t):
            return _pack(elems, [gather(x, subtract(subtract(n, 1), t) if reverse else t) for x in leaves])
        acc, start = (at(0), 1) if initializer is None else (initializer, 0)
        _, acc = while_loop(lambda t, acc: less(t, n), lambda t, acc: (add(t, 1), fn(acc, at(t))),
                            [convert_to_tensor(start), acc], return_same_structure=True)
    return acc


def foldl(fn, elems, initializer=None, parallel_iterations=10, back_prop=True, swap_memory=False, name=None):
    """`tf.foldl(lambda acc, x: acc * x, elems)`: the accumulator after folding elems from the front."""
    return _fold(fn, elems, initializer, False, "tf.foldl", name)


def foldr(fn, elems, initializer=None, parallel_iterations=10, back_prop=True, swap_memory=False, name=None):
    """`tf.foldr(fn, elems)`: as foldl, from the back."""
    return _fold(fn, elems, initializer, True, "tf.foldr", name)
