"""One executor run of a step, placed: the buffers it writes and reads (with or without planner.compact's saved
state), what each op needs live while it runs, and its Phase: lifetimes in the creation order or the memory-aware
greedy order, whichever has the lower liveness bound. Functions of the run's data; planner.plan caches them per
candidate setting.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from tfplus.dtypes import uint8
from tfplus.framework import Operation, Tensor
from tfplus.planner import compact
from tfplus.planner.liveness import Buffer, Lifetimes, alias_root, greedy_order, lifetimes
from tfplus.registry import inplace_inputs

if TYPE_CHECKING:
    import networkx as nx


@dataclass(eq=False)
class Phase:
    """One executor run inside a step: the whole step, or the micro-batch run / the update run of a
    micro-batched step. Its buffers' steps are on the plan's timeline, starting at `start`."""
    name: str
    order: list[Operation]
    feeds: set[Tensor]
    fetches: list
    specs: dict
    life: Lifetimes
    start: int
    schedule: str
    creation_order_bound: int   # the liveness bound in the executor's creation order, for comparison
    sites: list = field(default_factory=list)      # planner.compact sites
    argmax: dict = field(default_factory=dict)     # pool and pool-gradient op -> the argmax Buffer they share
    # planner.accumulate: op -> (the Site of the gradient it writes into its accumulator, its piece Buffer)
    accumulated: dict = field(default_factory=dict)


class Run(NamedTuple):
    """One executor run of the step for given feed shapes."""
    key: tuple                       # (name, feed shapes)
    graph: nx.DiGraph
    order: list[Operation]           # creation order
    specs: dict
    roots: dict[Operation, list]     # liveness.input_roots
    fetches: list                    # what the run computes
    feeds: set[Tensor]               # what it is given


class RunBuffers(NamedTuple):
    """The buffers one run writes, and which of them each op reads, with or without compact saved state. The
    same for every conv setting: the plans that differ only in those share them (lifetimes() works on copies)."""
    outputs: dict[Tensor, Buffer]
    sites: list[compact.Site]
    unread: set                      # (op, input index) the compact kernels do not read
    saved: list                      # (argmax buffer, MaxPool, its last reader: MaxPoolGrad or a pooled ReluGrad)
    fetched: list[Tensor]            # the fetched tensors' roots
    uses: dict[Operation, list[Buffer]]
    users: dict[Buffer, int]         # how many ops read each buffer
    pinned: set[Buffer]              # fetched: never freed during the run
    reads: dict                      # op -> tensors its kernel variant reads beyond its inputs (compact.pooled)


def run_buffers(run: Run, outputs: dict[Tensor, Buffer], compacted: bool, device: str, align: int) -> RunBuffers:
    """The RunBuffers of `run` whose ops write `outputs` (liveness.output_buffers), with compact saved state
    (planner.compact's sites) if `compacted`."""
    fetch_t = [f for f in run.fetches if isinstance(f, Tensor)]
    sites = compact.sites(run.order, run.specs, fetch_t) if compacted else []
    unread = compact.unread(sites)
    pooled = [s for s in sites if compact.pooled(s, device)]
    # A pooled site's ReLU gradient reads the argmax and MaxPoolGrad's pool output and its gradient.
    reads = {s.relu_grad: [run.roots[s.pool_grad][i] for i in (1, 2)] for s in pooled}
    saved = [(_argmax_buffer(s, align), s.pool, s.relu_grad if s in pooled else s.pool_grad) for s in sites]
    uses: dict[Operation, list[Buffer]] = {op: [] for op in run.order}
    users: dict[Buffer, int] = {}
    for b, _, last in saved:
        uses[last].append(b)
        users[b] = 1
    for op in run.order:
        read = [t for k, t in enumerate(run.roots[op]) if (op, k) not in unread] + reads.get(op, [])
        for b in {outputs.get(t) for t in read} - {None}:
            uses[op].append(b)
            users[b] = users.get(b, 0) + 1
    fetched = [alias_root(t, run.feeds) for t in fetch_t]
    pinned = {outputs.get(t) for t in fetched} - {None}
    return RunBuffers(outputs, sites, unread, saved, fetched, uses, users, pinned, reads)


def run_needs(run: Run, r: RunBuffers, ws: dict, device: str) -> dict:
    """op -> the bytes it needs live while it runs: the buffers it reads, its workspaces (`ws`), and its outputs
    unless it may write one over an input (planner.inplace)."""
    overwriting = {s.relu_grad for s in r.sites}
    need = {}
    for op in run.order:
        n = sum(b.size for b in r.uses[op]) + sum(b.size for b in ws.get(op, ()))
        if op not in overwriting and not inplace_inputs(op.type, device):
            n += sum(r.outputs[t].size for t in op.outputs if t in r.outputs)
        need[op] = n
    return need


def run_phase(run: Run, r: RunBuffers, chunks: dict, ws: dict, start: int, d: int, own: dict | None,
          inplace_device: str | None) -> Phase:
    """The Phase of `run` starting at step `start` of the plan's timeline, its convolutions in `chunks`, their
    workspaces `ws` under scratch divisor d (some ops with their own, `own`); with `inplace_device`, elementwise
    ops write over an input that dies there as that device's kernels declare."""
    def live_in(order):
        return lifetimes(order, r.outputs, ws, run.roots, r.fetched, inplace_device, r.unread, r.saved,
                         {s.relu_grad: (0,) for s in r.sites}, r.reads)
    # The order with the lower liveness bound wins (the arena lands within a few percent of its bound).
    schedule, order, life = "creation order", run.order, live_in(run.order)
    creation_bound = life.lower_bound
    greedy = _greedy(run, r, ws)
    aware = live_in(greedy)
    if aware.lower_bound < creation_bound:
        schedule, order, life = "memory-aware", greedy, aware
    life.chunks, life.scratch, life.scratch_ops = dict(chunks), d, dict(own or {})
    for b in life.buffers:
        b.start += start
        b.end += start
    argmax = {op: b for b, first, last in life.saved for op in (first, last)}
    return Phase(run.key[0], order, set(run.feeds), list(run.fetches), run.specs, life, start, schedule,
                 creation_bound, r.sites, argmax)


def _greedy(run: Run, r: RunBuffers, ws) -> list[Operation]:
    alloc = {op: 0 for op in run.order}
    for t, b in r.outputs.items():
        alloc[t.op] += b.size
    for op, bs in ws.items():
        alloc[op] += sum(b.size for b in bs)
    for b, first, _ in r.saved:
        alloc[first] += b.size
    return greedy_order(run.graph, alloc, r.uses, r.users, r.pinned)


def _argmax_buffer(s: compact.Site, align: int) -> Buffer:
    n = math.prod(s.argmax_shape)
    return Buffer(f"{s.pool.name}/argmax", n, -(-n // align) * align, 0, 0, "saved", op=s.pool,
                  shape=tuple(s.argmax_shape), dtype=uint8)


def acc_buffer(t: Tensor, shape, dtype, end: int, align: int) -> Buffer:
    """The buffer that sums (or gathers) `t` over micro-batches, live from the start to `end`."""
    n = math.prod(shape) * dtype.size
    return Buffer(f"{t.name}/accumulator", n, -(-n // align) * align, 0, end, "accumulator", tensor=t,
                  shape=tuple(shape), dtype=dtype)
