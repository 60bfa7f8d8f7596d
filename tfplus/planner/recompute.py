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
that graph's ops, and maps the caller's feeds and fetches onto it (MemoryPlan.tensor_map). It takes Segments: a
per-tensor chain is one per backward reader (`per_reader`); planner.remat's segment checkpointing gives one per
stretch of the forward between two checkpoints, its copy shared by all the stretch's backward readers.
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


class Segment(NamedTuple):
    """Forward ops that run once more in the backward pass (`ops`, original graph, creation order) to give
    `tensors`, dropped after their forward use, back to their backward `readers`, which read the copies."""
    ops: list[Operation]
    tensors: list[Tensor]
    readers: list[Operation]


class Solution(NamedTuple):
    """What a plan recomputes: the `segments`, chosen by `solver` (what chose them, for the plan's description),
    keeping the `checkpoints` (the forward tensors a segment starts from; none for per-tensor chains)."""
    solver: str
    checkpoints: list[Tensor]
    segments: list[Segment]

    @property
    def tensors(self) -> list[Tensor]:
        """The activations dropped and recomputed, each once."""
        return list(dict.fromkeys(t for s in self.segments for t in s.tensors))


def per_reader(drops: list[Drop]) -> Solution:
    """The chains of `drops` as segments, one per backward reader (each reader gets its own copy)."""
    return Solution(f"the {len(drops)} largest recomputable activations", [],
                    [Segment(d.ops, [d.tensor], [r]) for d in drops for r in d.readers])


class Rewrite(NamedTuple):
    graph: Graph
    tensor_map: dict[Tensor, Tensor]   # original tensor -> its planning copy
    op_map: dict[Operation, Operation]
    clones: list[Operation]            # the recomputing ops (planning graph)


def saved(order: list[Operation], feeds: set[Tensor]) -> tuple[dict[Tensor, list[Operation]], set[Tensor]]:
    """The forward activations of `order` that backward ops read (not shape-only readers), each with its backward
    readers, and those of them read through an alias (a reshape's output): their buffer cannot be dropped."""
    ops = set(order)
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
    return readers, aliased


def candidates(order: list[Operation], specs, feeds: set[Tensor], fetches: list, keep: set[Tensor]) -> list[Drop]:
    """The activations of `order` that can be recomputed, largest first: forward outputs read by backward ops
    directly (not through an alias), not fetched, not in `keep` (planner.compact's ReLU outputs), recomputable
    from tensors that are alive at backward time anyway by at most MAX_OPS stateless forward ops."""
    fetched = {alias_root(f, feeds) for f in fetches if isinstance(f, Tensor)}
    readers, aliased = saved(order, feeds)
    kept = {t for t in readers if t not in aliased}
    late = stale(order, feeds)
    out = []
    for t, rs in readers.items():
        if t in aliased or t in fetched or t in keep:
            continue
        chain = _chain(t, kept - {t}, feeds, keep, late)
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


def _chain(t: Tensor, saved: set[Tensor], feeds: set[Tensor], keep: set[Tensor], late: set[Operation]
           ) -> list[Operation] | None:
    """The ops that recompute `t` from leaves (fed, variables, constants, other saved activations), in creation
    order; None if that takes a stateful op, more than MAX_OPS ops, more than one GEMM or a `keep` tensor."""
    chain: list[Operation] = []
    stack = [t.op]
    while stack:
        op = stack.pop()
        if op in chain:
            continue
        if not recomputable(op, feeds, late) or len(chain) == MAX_OPS:
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


def recomputable(op: Operation, feeds: set[Tensor], late: set[Operation] = frozenset()) -> bool:
    """Stateless forward ops; none with control inputs (one may order a read after a variable's update, which
    a copy running later would not see the same way), none of `late` (stale's)."""
    d = op.op_def
    return (phase_of(op) == "forward" and executes(op, feeds) and not d.stateful and not d.ref_inputs
            and not d.allocates_outputs and not op.control_inputs and op not in late
            and op.type not in ("Placeholder", "VariableV2", "Const"))


def stale(order: list[Operation], feeds: set[Tensor]) -> set[Operation]:
    """The forward ops of `order` that read a variable which the step updates after them and before a backward
    op reads what they compute (directly or through other forward ops): a copy made for that reader would read the
    updated weights (a GAN's discriminator on the generator's output, whose generator gradients run after the
    discriminator's train op). A training step's backward runs before its updates: none."""
    pos = {op: i for i, op in enumerate(order)}
    writes: dict[Tensor, list[int]] = {}
    for op in order:
        for k in op.op_def.ref_inputs:
            writes.setdefault(op.inputs[k], []).append(pos[op])
    if not writes:
        return set()
    consumers: dict[Tensor, list[Operation]] = {}
    for op in order:
        for t in op.inputs:
            consumers.setdefault(t, []).append(op)
    last: dict[Operation, int] = {}  # forward op -> the last backward op that reads what it computes
    out = set()
    for op in reversed(order):
        if phase_of(op) != "forward":
            continue
        last[op] = max((pos[c] if phase_of(c) == "backward" else last.get(c, -1)
                        for t in op.outputs for c in consumers.get(t, ())), default=-1)
        if any(pos[op] < w < last[op] for u in op.inputs for w in writes.get(alias_root(u, feeds), ())):
            out.add(op)
    return out


def rewrite(order: list[Operation], feeds: set[Tensor], segments: list[Segment]) -> Rewrite:
    """A copy of the ops in `order` (and of the fed tensors' ops) in a new graph, in which each segment's ops run
    once more, each copy made just before the first of the segment's readers (by creation order, the first to run in
    the backward pass) that needs it, and its readers read the copies of its tensors. (A segment may join forward
    ops of two losses trained in one run: its first reader, in the first loss's backward pass, comes before the
    second loss's forward inputs exist.) The copies keep the names; a recomputing op
    is named `<op name>/recompute_<n>`, n the segment's index. Each copy that reads no other copy gets control
    inputs from the producers of its readers' other inputs made before that first reader (the gradients they
    wait for), so that no order runs it long before them; and each reader of a copy of its own runs before the
    other backward readers of those inputs (a convolution's filter gradient before its input gradient) where that
    makes no cycle, so that the copy is not alive beside their outputs. Shape-only readers of a dropped activation
    that are no segment's readers run right after it is made."""
    g = Graph()
    op_map: dict[Operation, Operation] = {}
    tmap: dict[Tensor, Tensor] = {}
    clones: list[Operation] = []
    at: dict[Operation, list[int]] = {}  # a reader -> the segments whose copies it reads
    for i, s in enumerate(segments):
        for r in s.readers:
            at.setdefault(r, []).append(i)
    copies: list[dict[Tensor, Tensor]] = [{} for _ in segments]  # per segment: its copied tensors
    dropped_all = {t for s in segments for t in s.tensors}
    readers_all = {r for s in segments for r in s.readers}

    def position(op):
        if _shape_only(op) and op not in readers_all and any(u in dropped_all for u in op.inputs):
            return max([u.op._id for u in op.inputs] + [c._id for c in op.control_inputs]) + 0.5
        return op._id
    in_step = set(order)
    originals = sorted(in_step | {t.op for t in feeds}, key=position)
    subst: dict[Operation, dict[Tensor, Tensor]] = {}  # reader -> its dropped inputs' copies
    for op in originals:
        for i in at.get(op, ()):
            s, local = segments[i], copies[i]
            need = _uncopied(s, [t for t in s.tensors if t in op.inputs], local)
            # What the readers wait for besides the segment's tensors, made before this one.
            after = [tmap[u].op for r in s.readers for u in r.inputs if u not in dropped_all and u not in feeds
                     and u.op.type not in ("VariableV2", "Const") and u.op._id < op._id and u in tmap] if need else []
            for c in need:
                ins = [local.get(u, tmap.get(u)) for u in c.inputs]
                control = [] if any(u in local for u in c.inputs) else after
                new = _copy(g, c, ins, f"{c.name}/recompute_{i}", control)
                clones.append(new)
                local.update(zip(c.outputs, new.outputs))
            subst.setdefault(op, {}).update({t: local[t] for t in s.tensors if t in op.inputs})
        mine = subst.get(op, {})
        # A fed tensor's op that the step does not run (an intermediate fed) stands in with no inputs.
        ins = [mine.get(u, tmap.get(u)) for u in op.inputs] if op in in_step else []
        new = op_map[op] = _copy(g, op, ins, op.name, [op_map[c] for c in op.control_inputs if c in op_map])
        tmap.update(zip(op.outputs, new.outputs))
    # (A reader of its own copy only: a per-tensor chain's. The readers of a shared segment copy are left to the
    # planner's order: finding each one's ancestors took most of the planning time of a long step.)
    alone = {s.readers[0] for s in segments if len(s.readers) == 1}
    for r in sorted(alone, key=lambda op: op._id):
        before = _ancestors(op_map[r], set(g._ops))
        others = {u for u in r.inputs if u not in dropped_all and u not in feeds
                  and u.op.type not in ("VariableV2", "Const")}
        for u in others:
            for s in u.consumers():
                if s in in_step and s is not r and s not in readers_all and op_map[s] not in before and \
                        phase_of(s) == "backward" and not _shape_only(s):
                    op_map[s]._add_control_input(op_map[r])
    return Rewrite(g, tmap, op_map, clones)


def _uncopied(s: Segment, tensors: list[Tensor], local: dict[Tensor, Tensor]) -> list[Operation]:
    """The ops of segment `s` that give `tensors` and are not copied yet (`local`: the copies made), in creation
    order."""
    mine, need = set(s.ops), set()
    stack = [t.op for t in tensors]
    while stack:
        c = stack.pop()
        if c in mine and c not in need and c.outputs[0] not in local:
            need.add(c)
            stack += [u.op for u in c.inputs]
    return [c for c in s.ops if c in need]


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
