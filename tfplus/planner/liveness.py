"""What one step needs, in which order, and when each byte of it is alive.

Static shapes come from the registered shape functions run on the concrete feed shapes; an execution order is
chosen between the executor's creation order and a memory-aware greedy order; every transient buffer (an op
output together with the tensors that alias it, or a kernel workspace) gets a lifetime [start, end] in steps
of that order.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from tfplus.framework import Operation, Tensor, _fmt_shape, constant_value, needed_ops, topo_order
from tfplus.graph_export import variable_readers
from tfplus.planner import chunking
from tfplus.registry import (
    WORKSPACES,
    TensorSpec,
    declared_scratch,
    find_kernel,
    has_kernels,
    has_tag,
    inplace_inputs,
    kernel_dtype,
)

if TYPE_CHECKING:  # networkx is imported when a step is first planned: it is a fifth of `import tfplus`
    import networkx as nx


class PlanError(ValueError):
    """The step cannot be planned (unknown shapes, an unplannable op): the message says which node and why."""


@dataclass(eq=False)
class Buffer:
    """One piece of transient memory. `start`/`end` are steps of the order (inclusive); `end` is one past the
    last op for fetched tensors, which are copied out after the step. `kind` is 'forward', 'backward',
    'update' (by the phase of the op that writes it), 'workspace', 'accumulator', 'saved' (compact state
    kept for backward, planner.compact) or 'feed' (a micro-batch's rows of a fed batch, off the cpu)."""
    name: str
    nbytes: int
    size: int
    start: int
    end: int
    kind: str
    tensor: Tensor | None = None
    op: Operation | None = None
    offset: int = 0
    shape: tuple = ()
    dtype: object = None


@dataclass
class Lifetimes:
    buffers: list[Buffer]
    of_tensor: dict[Tensor, Buffer]          # root tensor -> its buffer
    workspaces: dict[Operation, list[Buffer]]
    steps: int                               # ops in the order, plus the copy-out step
    live: np.ndarray = field(default=None)   # bytes live at each step
    chunks: dict = field(default_factory=dict)  # op -> batch chunks its kernel runs in
    scratch: int = 1                            # conv kernels' chunk budgets divided by this (planner.chunking)
    scratch_ops: dict = field(default_factory=dict)  # op -> its own divisor, where it divides more
    inplace: int = 0                            # outputs written over a dying input
    saved: list = field(default_factory=list)   # (buffer, writer op, last reader op) of compact state

    @property
    def lower_bound(self) -> int:
        return int(self.live.max()) if len(self.live) else 0


# -- which ops, which shapes ---------------------------------------------------------------------------------
def static_specs(order: list[Operation], feed_shapes: dict[Tensor, tuple], inner=None) -> dict[Tensor, TensorSpec]:
    """Every tensor's concrete shape for these feed shapes (a shape, or a TensorSpec with its value), from the ops'
    shape functions. Values that a shape function needs (`value_inputs`) come from constants, folded shapes, or by
    running the small integer ops that compute them (Shape -> StridedSlice -> Pack) on their cpu kernels. `inner`:
    (op, the specs so far) -> output specs of a control-flow op (planner.rows reads its sub-graphs'; engine.step
    its trip count), else PlanError."""
    specs: dict[Tensor, TensorSpec] = {t: s if isinstance(s, TensorSpec) else TensorSpec(tuple(s), t.dtype)
                                       for t, s in feed_shapes.items()}
    unfolded: set = set()  # tensors that do not fold (_fold)
    for op in order:
        if op.outputs and all(t in specs for t in op.outputs):
            continue
        if op.type == "Placeholder":
            raise PlanError(f"You must feed a value for placeholder tensor '{op.name}' (the memory planner "
                            "needs its shape)")
        if op.op_def.allocates_outputs and inner is not None:
            specs.update(zip(op.outputs, inner(op, specs)))
            continue
        if op.op_def.allocates_outputs:
            raise PlanError(f"{op.type} '{op.name}': control flow (tf.cond, tf.while_loop) sizes its outputs "
                            "only as it runs, so the memory planner cannot plan it. A budgeted Session plans a "
                            "tf.cond for the branch it takes when its predicate's value is known before the step "
                            "runs: fed, or computed from fed scalars, constants and variables alone (TF1's "
                            "is_training placeholder, tf.less(global_step, N)) that the step writes only after the "
                            "cond; this one's reads the batch or draws random numbers, or reads a variable the step "
                            "may write before it. It unrolls a tf.while_loop whose trip count follows from the fed "
                            "shapes and constants and whose body runs no stateful op but random ones (a "
                            "dropout); this one's does not: feed the predicate, bound the loop so, or run without "
                            "memory_budget")
        ins = []
        for k, t in enumerate(op.inputs):
            s = specs[t]
            if k in op.op_def.value_inputs and s.value is None:
                s = s._replace(value=_fold(t, specs, unfolded))
            ins.append(s)
        try:
            outs = op.op_def.shape_fn(ins, op.attrs)
        except (ValueError, TypeError) as e:
            shapes = ", ".join(f"{t.name} {_fmt_shape(s.shape)}" for t, s in zip(op.inputs, ins))
            raise PlanError(f"{op.type} '{op.name}': {e} (inputs: {shapes})") from None
        for t, s in zip(op.outputs, outs):
            unknown = [u for k, u in enumerate(op.inputs) if k in op.op_def.value_inputs and ins[k].value is None]
            if (s.shape is None or None in s.shape) and unknown:
                fix = (" (tf.boolean_mask, tf.where(condition) and tf.dynamic_partition keep the entries a mask picks)"
                       "; the memory planner needs static shapes: multiply by the mask instead (a masked mean: "
                       "tf.reduce_sum(x * m) / tf.reduce_sum(m) with m = tf.cast(mask, x.dtype))" if op.type == "Where"
                       else "; the memory planner needs static shapes: size it from shapes or constants "
                       "(tf.sequence_mask(lengths, maxlen=tf.shape(x)[1]), not the batch's longest length)")
                raise PlanError(f"{op.type} '{op.name}': output {t.value_index} has shape {_fmt_shape(s.shape)}, "
                                f"sized by the values of '{unknown[0].name}' as the step runs{fix}, or run without "
                                "memory_budget")
            if s.shape is None or None in s.shape:
                raise PlanError(f"{op.type} '{op.name}': output {t.value_index} has shape "
                                f"{_fmt_shape(s.shape)} even with the feed shapes known; the memory "
                                "planner needs static shapes (feed every placeholder, or run without "
                                "memory_budget)")
            value = s.value if s.value is not None else constant_value(t)
            specs[t] = TensorSpec(tuple(int(d) for d in s.shape), s.dtype, value)
    return specs


def known_value(t: Tensor, feed_shapes: dict[Tensor, tuple]):
    """The value of `t` where it follows from the feed shapes alone (shape arithmetic, a comparison of shapes or
    ranks: no value of a fed tensor), else None."""
    seen, todo = set(), [t]
    while todo:  # the values it is computed from, up to the shapes it reads
        u = todo.pop()
        if u in feed_shapes:
            return None  # a fed value (a fed Const's is not its constant)
        if u not in seen and not has_tag(u.op.type, "shape_only"):
            seen.add(u)
            todo.extend(u.op.inputs)
    order = topo_order(needed_ops([t], set(feed_shapes)))
    try:  # (the shapes of what a variable computes are known too: tf.shape(loss))
        return _fold(t, static_specs(order, feed_shapes))
    except PlanError:
        return None


_FOLD_LIMIT = 1024  # elements: folding is for shape arithmetic, never for data


def _fold(t: Tensor, specs: dict[Tensor, TensorSpec], unfolded: set | None = None):
    """The value of `t` if it follows from known values by stateless ops, computed on the cpu kernels. `unfolded`:
    tensors of `specs` already found not to fold (a tensor's ancestors are all in `specs`, so that stays true):
    without it each path to an unfoldable tensor was walked again, exponential in a ResNet's residual joins (a
    ResNet-20 third's floor search spent 88 of its 92 s here)."""
    s = specs[t]
    if s.value is not None:
        return s.value
    unfolded = set() if unfolded is None else unfolded
    if t in unfolded:
        return None
    op = t.op
    values = None
    if not (op.op_def.stateful or op.op_def.allocates_outputs or op.type in ("Placeholder", "VariableV2") or any(
            specs[o].shape is None or math.prod(specs[o].shape) > _FOLD_LIMIT for o in op.outputs)):
        values = []
        for i in op.inputs:
            values.append(_fold(i, specs, unfolded))
            if values[-1] is None:
                values = None
                break
    if values is None:
        unfolded.add(t)
        return None
    if not has_kernels("cpu"):
        raise PlanError(f"{op.type} '{op.name}': the planner folds shape arithmetic on the cpu kernels, and none "
                        "is registered; import tfplus.kernels.numpy (tfplus.runtime.facts.device_facts does)")
    kernel = find_kernel(op.type, "cpu", kernel_dtype(op))
    if kernel is None:
        unfolded.add(t)
        return None
    outs = []
    for k, o in enumerate(op.outputs):
        if k in op.op_def.aliases:
            outs.append(np.asarray(values[op.op_def.aliases[k]]).reshape(specs[o].shape))
        else:
            outs.append(np.empty(specs[o].shape, specs[o].dtype.np))
    kernel(_FoldContext(op), [np.asarray(v) for v in values], outs, op.attrs)
    for o, v in zip(op.outputs, outs):
        specs[o] = specs[o]._replace(value=v)
    return specs[t].value


class _FoldContext:
    """The kernel context of a fold: no runtime, and shape arithmetic needs no scratch or randomness."""

    def __init__(self, op):
        self.op, self.runtime = op, None

    def workspace(self, shape, dtype):
        return np.empty(shape, dtype.np)


def nbytes(spec: TensorSpec) -> int:
    return math.prod(spec.shape) * spec.dtype.size


# -- phases -------------------------------------------------------------------------------------------------
def phase_of(op: Operation) -> str:
    """'update' for ops that change state in place, 'backward' for ops tf.gradients added (Operation.backward,
    which autodiff sets, graph copies keep and GraphDef import sets for TensorFlow's gradient scope), else
    'forward'."""
    if op.op_def.ref_inputs:
        return "update"
    return "backward" if op.backward else "forward"


# -- order ---------------------------------------------------------------------------------------------------
def dependency_graph(ops: set[Operation], feeds: set[Tensor]) -> nx.DiGraph:
    """Data and control edges, plus the edges that order each variable's reads and in-place updates as the
    executor's creation order (framework.topo_order, an unplanned session's order) does, so that a plan's order,
    memory-aware or not, computes what the unplanned step computes. A read that runs before an update there stays
    before it (a memory-aware order must not apply a gradient while the backward pass still reads the old
    weights); one that runs after it stays after it (a GAN's generator gradients, made after the discriminator's
    update, read the updated weights; a read of a counter made after its assign_add reads the new count)."""
    import networkx as nx
    g = nx.DiGraph()
    g.add_nodes_from(ops)
    for op in ops:
        for t in op.inputs:
            if t not in feeds and t.op in ops:
                g.add_edge(t.op, op)
        for c in op.control_inputs:
            if c in ops:
                g.add_edge(c, op)
    writes = _writers(ops)
    if writes:
        # NOTE: every edge added goes forward in this order, so the graph stays acyclic and the executor's order
        # stays one of its orders.
        pos = {op: i for i, op in enumerate(creation_order(g))}
        for var, writers in writes.items():
            writers.sort(key=pos.__getitem__)
            g.add_edges_from(zip(writers, writers[1:]))  # updates of one variable keep their order
            readers = variable_readers(var, ops)
            for w in writers:
                g.add_edges_from((r, w) if pos[r] < pos[w] else (w, r) for r in readers if r is not w)
    return g


def _writers(ops: set[Operation]) -> dict[Tensor, list[Operation]]:
    """Variable output -> the ops that update it in place, in creation order."""
    out: dict[Tensor, list[Operation]] = {}
    for op in sorted(ops, key=lambda op: op._id):
        for k in op.op_def.ref_inputs:
            out.setdefault(op.inputs[k], []).append(op)
    return out


def creation_order(g: nx.DiGraph) -> list[Operation]:
    """The executor's order: topological, ties broken by creation order (framework.topo_order)."""
    return topo_order(g.nodes, g.predecessors)


def greedy_order(g: nx.DiGraph, alloc: dict[Operation, int], uses: dict[Operation, list[Buffer]],
                 users: dict[Buffer, int], pinned: set[Buffer]) -> list[Operation]:
    """Memory-aware list scheduling: among the ready ops run the one that adds the fewest bytes
    (its new outputs and workspaces minus the inputs it is the last reader of); ties by creation order."""
    remaining = dict(users)
    readers: dict[Buffer, list[Operation]] = {}
    for op, bs in uses.items():
        for b in bs:
            readers.setdefault(b, []).append(op)

    def score(op):
        freed = sum(b.size for b in uses[op] if remaining[b] == 1 and b not in pinned)
        return (alloc[op] - freed, op._id)
    indeg = {op: len(pred) for op, pred in g.pred.items()}
    # A ready op's score changes only when one of its inputs gets down to its last reader: kept, not recomputed.
    scores = {op: score(op) for op, d in indeg.items() if d == 0}
    order = []
    while scores:
        op = min(scores, key=scores.__getitem__)
        del scores[op]
        order.append(op)
        for b in uses[op]:
            remaining[b] -= 1
            if remaining[b] == 1:
                scores.update((r, score(r)) for r in readers[b] if r in scores)
        for s in g.succ[op]:
            indeg[s] -= 1
            if indeg[s] == 0:
                scores[s] = score(s)
    return order


# -- lifetimes ----------------------------------------------------------------------------------------------
def alias_root(t: Tensor, feeds: set[Tensor]) -> Tensor:
    """The tensor whose buffer `t` shares (itself unless its op aliases that output to an input)."""
    while t not in feeds:
        i = t.op.op_def.aliases.get(t.value_index)
        if i is None:
            return t
        t = t.op.inputs[i]
    return t


def executes(op: Operation, feeds: set[Tensor]) -> bool:
    """Whether the executor runs a kernel for `op` (it skips variables and ops whose outputs are all fed)."""
    return op.type != "VariableV2" and not (op.outputs and all(t in feeds for t in op.outputs))


def input_roots(ops: list[Operation], feeds: set[Tensor]) -> dict[Operation, list[Tensor]]:
    """op -> the root (alias_root) of each of its inputs: the tensors whose buffers it reads."""
    return {op: [alias_root(t, feeds) for t in op.inputs] for op in ops}


def output_buffers(ops: list[Operation], specs: dict[Tensor, TensorSpec], feeds: set[Tensor], align: int
                   ) -> dict[Tensor, Buffer]:
    """The buffers the ops write their outputs to (no lifetimes yet), one per root output. Outputs aliasing a
    variable or a fed tensor take no transient memory."""
    of_tensor: dict[Tensor, Buffer] = {}
    for op in ops:
        if not executes(op, feeds):
            continue
        kind = phase_of(op)
        for t in op.outputs:
            if t in feeds or alias_root(t, feeds) is not t:
                continue
            n = nbytes(specs[t])
            of_tensor[t] = Buffer(t.name, n, _round(n, align), 0, 0, kind, tensor=t, shape=specs[t].shape,
                                  dtype=specs[t].dtype)
    return of_tensor


def workspace_buffers(ops: list[Operation], specs: dict[Tensor, TensorSpec], feeds: set[Tensor], device: str,
                      align: int, chunks: dict[Operation, int] | None = None, scratch: int = 1,
                      compute_units: int | None = None, scratch_ops: dict | None = None, threads: int | None = None
                      ) -> dict[Operation, list[Buffer]]:
    """The workspaces the ops' kernels declare on `threads` threads (no lifetimes yet), op -> its buffers;
    `scratch_ops` gives some ops a scratch divisor of their own instead of `scratch`."""
    workspaces: dict[Operation, list[Buffer]] = {}
    for op in ops:
        if not executes(op, feeds):
            continue
        div = (scratch_ops or {}).get(op, scratch)
        for i, (shape, dtype) in enumerate(declared_workspaces(op, specs, device, (chunks or {}).get(op, 1),
                                                                        div, compute_units, threads)):
            n = math.prod(shape) * dtype.size
            workspaces.setdefault(op, []).append(Buffer(f"{op.name}/workspace:{i}", n, _round(n, align), 0, 0,
                                                        "workspace", op=op, shape=shape, dtype=dtype))
    return workspaces


def declared_workspaces(op: Operation, specs, device: str, chunks: int = 1, scratch: int = 1,
                        compute_units: int | None = None, threads: int | None = None) -> list[tuple]:
    """The scratch buffers `op`'s kernel on `device` declares (tfplus.registry.declared_scratch) on `threads`
    threads for one call on a 1/`chunks` slice of the batch with its chunk budget divided by `scratch`
    (planner.chunking), then the chunking's own partial-sum buffer if it needs one. Opencl declarations need the
    device's compute units."""
    if (op.type, device) not in WORKSPACES:
        return []
    ins = [specs[t] for t in op.inputs]
    if chunks > 1:
        ins = chunking.chunk_specs(op, ins, chunks)
    found = declared_scratch(op.type, device, ins, chunking.attrs(op, scratch), threads=threads,
                             compute_units=compute_units)
    decl = [(tuple(int(d) for d in shape), dtype) for shape, dtype in found]
    if chunks > 1 and chunking.summed(op):  # the slices' partial sums land here before being added up
        decl.append((specs[op.outputs[0]].shape, specs[op.outputs[0]].dtype))
    return decl


def lifetimes(order: list[Operation], of_tensor: dict[Tensor, Buffer],
              workspaces: dict[Operation, list[Buffer]], roots: dict[Operation, list[Tensor]],
              fetched: list[Tensor], inplace_device: str | None = None, unread: set = frozenset(),
              saved: tuple = (), inplace_extra: dict | None = None, reads: dict | None = None) -> Lifetimes:
    """Sets each buffer's [start, end] in `order` and the bytes live at every step. `roots` are the ops' input
    roots (input_roots), `fetched` the roots of the fetched tensors. With `inplace_device`, an op whose kernel
    declares it (tfplus.registry.inplace_inputs, or `inplace_extra`: op -> input indices) writes over an input that
    dies there (same shape and dtype): its output shares that input's buffer. `unread` lists (op, input index)
    pairs whose kernel variant does not read that input; `saved` are (buffer, writer op, last reader op) kept
    beside the outputs (planner.compact), and `reads` (op -> tensors) what a kernel variant reads beyond its
    inputs (planner.compact's pooled sites). The buffers given are left as they are: the lifetimes go on copies,
    so one set of buffers serves several orders and plans."""
    given = [*of_tensor.values(), *(b for bs in workspaces.values() for b in bs), *(b for b, _, _ in saved)]
    copies = {id(b): Buffer(**vars(b)) for b in given}
    of_tensor = {t: copies[id(b)] for t, b in of_tensor.items()}
    workspaces = {op: [copies[id(b)] for b in bs] for op, bs in workspaces.items()}
    saved = [(copies[id(b)], first, last) for b, first, last in saved]
    pos = {op: i for i, op in enumerate(order)}
    n = len(order)
    for t, b in of_tensor.items():
        b.start = b.end = pos[t.op]
    for b, first, last in saved:
        b.start, b.end = pos[first], pos[last]
    for i, op in enumerate(order):
        for k, t in enumerate(roots[op]):
            if (op, k) in unread:
                continue
            b = of_tensor.get(t)
            if b is not None:
                b.end = max(b.end, i)
        for t in (reads or {}).get(op, ()):
            b = of_tensor.get(t)
            if b is not None:
                b.end = max(b.end, i)
        for b in workspaces.get(op, ()):
            b.start = b.end = i
    for t in fetched:
        b = of_tensor.get(t)
        if b is not None:
            b.end = n
    merged = _in_place(order, pos, of_tensor, roots, inplace_device, inplace_extra or {}) \
        if inplace_device else 0
    unique = {id(b): b for b in of_tensor.values()}
    buffers = list(unique.values()) + [b for bs in workspaces.values() for b in bs] + [b for b, _, _ in saved]
    live = [0] * (n + 2)  # changes in bytes live at each step
    for b in buffers:
        live[b.start] += b.size
        live[b.end + 1] -= b.size
    return Lifetimes(buffers, of_tensor, workspaces, n + 1, np.cumsum(live[:n + 1], dtype=np.int64), inplace=merged,
                     saved=saved)


# NOTE: only these outputs share an input's buffer; plan._Step.least_bytes counts on it.
def _in_place(order, pos, of_tensor, roots, device, extra) -> int:
    merged = 0
    for op in order:
        out = of_tensor.get(op.outputs[0]) if op.outputs else None
        if out is None or out.tensor is not op.outputs[0]:
            continue
        for i in extra.get(op, inplace_inputs(op.type, device)):
            b = of_tensor.get(roots[op][i]) if i < len(op.inputs) else None
            if b is not None and b is not out and b.end == pos[op] and \
                    (b.shape, b.dtype) == (out.shape, out.dtype):
                b.end = out.end
                of_tensor[op.outputs[0]] = b
                merged += 1
                break
    return merged


def _round(n: int, align: int) -> int:
    return -(-n // align) * align
