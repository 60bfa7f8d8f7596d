"""Recomputation: a forward activation that a backward op reads is dropped after its forward use and computed
again, from tensors that are alive then anyway, just before that backward op runs.

Plain, an activation saved for backward (a ReLU output that the next convolution's filter gradient and the
ReLU's own gradient read) lives from its forward op until its last backward reader: across the whole middle of
the step, when the most activations are alive. Recomputed, each backward reader gets its own copy of the ops
that computed it (`conv1/Relu/recompute_1`, ...), made from the original op's inputs: the fed batch, variables
(read before their update, which the planner's order keeps), constants, or other saved activations. Each copy
runs just before its reader (control edges from the reader's other inputs, and creation order), so the copy
lives only from there to the reader. Exact: the same kernels on the same inputs give the same bits. Stateful
ops (random numbers, variables, queues) are never recomputed.

`rewrite` returns a planning copy of the step's graph with the copies wired into their readers; the plan runs
that graph's ops, and maps the caller's feeds and fetches onto it (MemoryPlan.tensor_map).
"""
from __future__ import annotations

import math
from typing import NamedTuple

from tfplus.framework import Graph, Operation, Tensor
from tfplus.planner.liveness import alias_root, executes, phase_of
from tfplus.registry import has_tag

# At most this many ops recompute one activation, and at most one of them a GEMM (registry tag "gemm": a
# convolution or matmul): more would cost a large part of a forward pass per reader.
MAX_OPS = 4
# A recomputation level r drops the r largest activations that can be recomputed (the planner tries r = 1..).
MAX_LEVEL = 4


class Drop(NamedTuple):
    """One activation the plan recomputes: `tensor` (original graph), the ops that recompute it (in order), its
    backward readers."""
    tensor: Tensor
    ops: list[Operation]
    readers: list[Operation]


class Rewrite(NamedTuple):
    graph: Graph
    tensor_map: dict[Tensor, Tensor]   # original tensor -> its planning copy
    op_map: dict[Operation, Operation]
    clones: list[Operation]            # the recomputing ops (planning graph)


def candidates(order: list[Operation], specs, feeds: set[Tensor], fetches: list, keep: set[Tensor]) -> list[Drop]:
    """The activations of `order` that can be recomputed, largest first: forward outputs read by backward ops
    directly (not through an alias), not fetched, not in `keep` (planner.compact's ReLU outputs), recomputable
    from tensors that are alive at backward time anyway by at most MAX_OPS stateless forward ops."""
    ops = set(order)
    fetched = {alias_root(f, feeds) for f in fetches if isinstance(f, Tensor)}
    readers: dict[Tensor, list[Operation]] = {}
    aliased: set[Tensor] = set()
    for op in order:
        if phase_of(op) != "backward" or _shape_only(op):
            continue
        for t in op.inputs:
            r = alias_root(t, feeds)
            if r in feeds or r.op not in ops or phase_of(r.op) != "forward" or not executes(r.op, feeds):
                continue
            if t is not r:
                aliased.add(r)
            elif op not in readers.setdefault(r, []):
                readers[r].append(op)
    saved = {t for t in readers if t not in aliased}
    out = []
    for t, rs in readers.items():
        if t in aliased or t in fetched or t in keep:
            continue
        chain = _chain(t, saved - {t}, feeds, keep)
        if chain is not None:
            out.append(Drop(t, chain, rs))
    return sorted(out, key=lambda d: (-math.prod(specs[d.tensor].shape) * specs[d.tensor].dtype.size,
                                      d.tensor.op._id))


def choose(cands: list[Drop], level: int, feeds: set[Tensor]) -> list[Drop]:
    """The `level` largest candidates, skipping any that would be recomputed from, or feed the recomputation
    of, one already chosen (a dropped activation is no leaf)."""
    chosen: list[Drop] = []
    for d in cands:
        if len(chosen) == level:
            break
        if any(d.tensor in _leaves(c, feeds) or c.tensor in _leaves(d, feeds) for c in chosen):
            continue
        chosen.append(d)
    return chosen


def _leaves(d: Drop, feeds: set[Tensor]) -> set[Tensor]:
    made = {t for op in d.ops for t in op.outputs}
    return {alias_root(u, feeds) for op in d.ops for u in op.inputs if u not in made}


def _chain(t: Tensor, saved: set[Tensor], feeds: set[Tensor], keep: set[Tensor]) -> list[Operation] | None:
    """The ops that recompute `t` from leaves (fed, variables, constants, other saved activations), in creation
    order; None if that takes a stateful op, more than MAX_OPS ops, more than one GEMM or a `keep` tensor."""
    chain: list[Operation] = []
    stack = [t.op]
    while stack:
        op = stack.pop()
        if op in chain:
            continue
        if not _recomputable(op, feeds) or len(chain) == MAX_OPS:
            return None
        chain.append(op)
        for u in op.inputs:
            r = alias_root(u, feeds)
            if r in keep:  # planner.compact frees it at its forward reader: no copy may read it later
                return None
            if r in feeds or r.op.type in ("VariableV2", "Const") or r in saved:
                continue  # a leaf, or an alias of one (a variable's read): the copy reads it as is
            stack.append(u.op)
    if sum(has_tag(op.type, "gemm") for op in chain) > 1:
        return None
    return sorted(chain, key=lambda op: op._id)


def _recomputable(op: Operation, feeds: set[Tensor]) -> bool:
    """Stateless forward ops; none with control inputs (one may order a read after a variable's update, which
    a copy running later would not see the same way)."""
    d = op.op_def
    return (phase_of(op) == "forward" and executes(op, feeds) and not d.stateful and not d.ref_inputs
            and not d.allocates_outputs and not op.control_inputs
            and op.type not in ("Placeholder", "VariableV2", "Const"))


def rewrite(order: list[Operation], feeds: set[Tensor], drops: list[Drop]) -> Rewrite:
    """A copy of the ops in `order` (and of the fed tensors' ops) in a new graph, in which every backward reader
    of a dropped activation reads its own recomputed copy. The copies keep the names; a recomputing op is named
    `<op name>/recompute_<n>`. Each recomputing op that reads no other recomputing op gets control inputs from
    the producers of its reader's other inputs, so that no order runs it long before the reader; and the
    reader runs before the other backward readers of those inputs (a convolution's filter gradient before its
    input gradient), so that its copy is not alive beside their outputs. Shape-only readers of a dropped
    activation run right after it is made."""
    g = Graph()
    op_map: dict[Operation, Operation] = {}
    tmap: dict[Tensor, Tensor] = {}
    clones: list[Operation] = []
    by_reader: dict[Operation, list[Drop]] = {}
    for d in drops:
        for r in d.readers:
            by_reader.setdefault(r, []).append(d)
    dropped_all = {d.tensor for d in drops}

    def position(op):
        if _shape_only(op) and any(u in dropped_all for u in op.inputs):
            return max([u.op._id for u in op.inputs] + [c._id for c in op.control_inputs]) + 0.5
        return op._id
    in_step = set(order)
    originals = sorted(in_step | {t.op for t in feeds}, key=position)
    n = 0
    for op in originals:
        subst: dict[Tensor, Tensor] = {}
        for d in by_reader.get(op, ()):
            # What the reader waits for besides the dropped activation: its copy runs after those.
            dropped = {e.tensor for e in by_reader[op]}
            after = [tmap[u].op for u in op.inputs if u not in dropped and u not in feeds
                     and u.op.type not in ("VariableV2", "Const")]
            local: dict[Tensor, Tensor] = {}
            for c in d.ops:
                ins = [local.get(u, tmap.get(u)) for u in c.inputs]
                control = [] if any(u in local for u in c.inputs) else after
                new = _copy(g, c, ins, f"{c.name}/recompute_{n}", control)
                clones.append(new)
                local.update(zip(c.outputs, new.outputs))
            subst[d.tensor] = local[d.tensor]
            n += 1
        # A fed tensor's op that the step does not run (an intermediate fed) stands in with no inputs.
        ins = [subst.get(u, tmap.get(u)) for u in op.inputs] if op in in_step else []
        new = op_map[op] = _copy(g, op, ins, op.name, [op_map[c] for c in op.control_inputs if c in op_map])
        tmap.update(zip(op.outputs, new.outputs))
    for r in by_reader:
        before = _ancestors(r, in_step)
        others = {u for u in r.inputs if u not in dropped_all and u not in feeds
                  and u.op.type not in ("VariableV2", "Const")}
        for u in others:
            for s in u.consumers():
                if s in in_step and s is not r and s not in by_reader and s not in before and \
                        phase_of(s) == "backward" and not _shape_only(s):
                    op_map[s]._add_control_input(op_map[r])
    return Rewrite(g, tmap, op_map, clones)


def _ancestors(op: Operation, ops: set[Operation]) -> set[Operation]:
    seen: set[Operation] = set()
    stack = [op]
    while stack:
        x = stack.pop()
        for p in [t.op for t in x.inputs] + x.control_inputs:
            if p in ops and p not in seen:
                seen.add(p)
                stack.append(p)
    return seen


def _shape_only(op: Operation) -> bool:
    """A reader that needs only a tensor's shape (registry tag "shape_only"): it reads the original right after it
    is made, never a copy."""
    return has_tag(op.type, "shape_only")


def _copy(g: Graph, op: Operation, inputs: list[Tensor], name: str, control: list[Operation]) -> Operation:
    """`op` in graph `g` with these inputs and its op_def; its outputs keep the original's static shapes and
    folded values."""
    if any(t is None for t in inputs):
        missing = [t.name for t, c in zip(op.inputs, inputs) if c is None]
        raise ValueError(f"{op.type} '{op.name}': the planning copy lacks its inputs {missing}")
    new = Operation(g, op.type, name, inputs, op.attrs, list(dict.fromkeys(control)), op.device)
    new.op_def = op.op_def  # an op's own (tfplus.engine.rewrite gives _FusedApply the ref inputs of its variables)
    new.backward = op.backward
    new.outputs = [Tensor(new, i, t.dtype, t._shape) for i, t in enumerate(op.outputs)]
    for t, c in zip(op.outputs, new.outputs):
        c._const = getattr(t, "_const", None)
    g._ops.append(new)
    g._by_name[name] = new
    for t in inputs:
        g._consumers.setdefault(t, []).append(new)
    return new
