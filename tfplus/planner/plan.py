"""Plans one training step to fit a memory budget.

    >>> import tfplus as tf
    >>> from tfplus import planner
    >>> x = tf.placeholder(tf.float32, [None, 1000])
    >>> y = tf.nn.relu(x * 2.0) if hasattr(tf.nn, "relu") else x * 2.0
    >>> p = planner.plan([y], {x: (64, 1000)}, device="cpu")
    >>> p.arena_bytes == p.arena_lower_bound_bytes
    True

Pipeline: prune to the fetches -> static shapes for the feed shapes -> order (the executor's creation order or
a memory-aware greedy order, whichever needs the smaller arena) -> lifetimes of every transient buffer
(outputs, aliases sharing them, declared kernel workspaces) -> offsets in one arena. Variables (parameters and
optimizer slots) and fed arrays are counted apart: they outlive the step. peak = variables + feeds + arena.

If the peak exceeds the budget, transformations are tried cheapest first (by a cost model per device, see
planner.cost): compact state saved for backward (planner.compact: a ReLU before a 2x2 max-pool keeps a byte per
window instead of its output), recomputation (planner.recompute: the largest activations saved for backward
are dropped and recomputed before each backward reader, in a planning copy of the graph), smaller conv
scratch (cpu: im2col/col2im pieces; opencl: the filter gradients' split-sum partials), chunking convolutions
over the batch (cpu), a streamed prefix (planner.stream: only the layers up to a cut tensor run in
micro-batches, the rest of the step once at full batch, on a cpu of several threads its micro-batches in lanes at
once; with compaction, the scratch divisor and recomputation, the last on the recomputing copy of the step so
that the rest fits at full batch), then
micro-batching with gradient accumulation (forward+backward on k slices of the batch, gradients averaged, a
sparse one's rows concatenated, updates applied once; on the cpu each large gradient written into its accumulator
where it is made, planner.accumulate; elsewhere one bigger than its inputs made last in the micro-batch run,
_late_gradients), each combined with the others. On opencl the model counts
kernel launches (the host is the bottleneck), so recomputing a few ops beats another micro-batch's whole
step; the plan's `choice` says what was predicted. No fit raises `BudgetError` naming the smallest budget
that some combination reaches. A candidate is ordered and placed only if a quick lower bound on its peak fits
(`_Step.least_bytes`); the candidates share what does not depend on their settings (runs, buffers).

`spread` gives the runs of a micro-batched step with batch statistics without a budget, each on k micro-batches
(its statistics passes, then the micro-batch run), for the cpu workers to run side by side (tfplus.engine.workers).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import partial
from typing import NamedTuple

import numpy as np

from tfplus import debug, dtypes
from tfplus.framework import Graph, Operation, Tensor, get_default_graph, needed_ops
from tfplus.ops.fused_ops import APPLY_SCALARS, split_decay
from tfplus.planner import accumulate, chunking, compact, cost, crossbatch, paging, recompute, remat, stream
from tfplus.planner import rows as row_rules
from tfplus.planner.arena import assign_offsets
from tfplus.planner.batch import (
    SlotFold,
    Split,
    UpdateGroup,
    batch_feeds,
    batch_size,
    batch_statistics,
    data_cone,
    fetch_merge,
    slice_shapes,
    slot_folds,
    split_step,
    update_groups,
)
from tfplus.planner.liveness import (
    Buffer,
    PlanError,
    alias_root,
    creation_order,
    declared_workspaces,
    dependency_graph,
    executes,
    input_roots,
    nbytes,
    output_buffers,
    phase_of,
    static_specs,
    workspace_buffers,
)
from tfplus.planner.runs import Phase, Run, RunBuffers, acc_buffer, run_buffers, run_needs, run_phase
from tfplus.registry import SCRATCH_ATTR, has_kernels, has_tag
from tfplus.units import format_size, parse_size, size_class

TRANSFORMATIONS = ("compact", "recompute", "scratch", "chunk", "stream", "microbatch", "accumulate", "page")
CPU_ALIGNMENT = 64
# CL_DEVICE_MEM_BASE_ADDR_ALIGN is 1024 bits on most GPUs and on PoCL; the OpenCL runtime reports the real
# value as `arena_alignment` when a device is at hand.
OPENCL_DEFAULT_ALIGNMENT = 128
# The opencl kernels' partial sums (split reductions) grow with the device's compute units; a plan for an
# OpenCL device that is not at hand assumes this many (phone GPUs report a few to a dozen).
OPENCL_DEFAULT_COMPUTE_UNITS = 8
# A streamed prefix in lanes holds a copy of its run's buffers per lane: up to this many rounds divide the
# scratch of the convolution where the run peaks only (_Step._balanced), a few more pieces in one conv instead of
# in all of them.
BALANCE_ROUNDS = 3
# Prefix.keep: the pools' argmax (and ReLU masks as bits), or those and the pools' outputs.
KEEP_ARGMAX, KEEP_OUTPUTS = 1, 2
# A streamed prefix in one lane (opencl): up to this many rounds give the convolution where the step peaks a scratch
# divisor of its own (_Step._spread), for the prefix in the step's first SPREAD_MICROBATCHES micro-batch counts (2
# and 4 for a batch of 128: a big GPU's kernels on fewer images are slow, and each round plans the step once; on
# Mentee for 132 compute units, on the step itself only, they take its planning from 0.8 to 1.15 s a budget).
SPREAD_ROUNDS = 4
SPREAD_MICROBATCHES = 2


@dataclass(frozen=True)
class DeviceFacts:
    """What a plan needs to know of a device, as data (the planner never touches a runtime, a session or the
    process's threads): its name, kernel device ('cpu' or 'opencl'), arena alignment in bytes (None: the kind's
    default), compute units (opencl's split reductions; None: the default) and the cpu kernels' threads (their
    scratch is per thread, and a streamed prefix runs in lanes up to one per thread; None: not stated, so the
    kernels' declarations read the count the planning thread runs kernels with, and no lanes) and, for a device
    whose memory is not the host's, the bytes per second a host<->device copy moves (paged optimizer slots,
    planner.paging; None: paging.DEFAULT_HOST_BANDWIDTH). tfplus.runtime.facts.device_facts reads them off a device
    of this machine."""
    name: str
    kernel_device: str
    alignment: int | None = None
    compute_units: int | None = None
    threads: int | None = None
    host_bandwidth: float | None = None


class Prefix(NamedTuple):
    """A streamed prefix (planner.stream): the step's ops up to the tensor named `cut` run in `microbatches`; on
    a cpu of several threads in `lanes` at once (one thread each), `rounds` of _Step._balanced dividing the
    scratch of the convolution where a lane's run peaks (in one lane: `rounds` of _Step._spread, where the step
    peaks); with `keep`, on planner.compact.keeping's copy of the step, whose prefix keeps its pools' argmax from
    its forward pass for its backward pass, and at keep 2 (KEEP_OUTPUTS) the pools' outputs too, so that a prefix
    of several blocks recomputes only its first block in its backward pass."""
    cut: str
    microbatches: int
    lanes: int = 1
    rounds: int = 0
    keep: int = 0


class Candidate(NamedTuple):
    """One combination of transformations the search may build (_Step.build takes its fields in this order)."""
    microbatches: int = 1      # forward and backward on slices of the batch, gradients averaged
    chunks: int = 1            # convolution kernels called on 1/chunks of the batch at a time
    compact: bool = False      # planner.compact's saved state
    scratch: int = 1           # the conv kernels' scratch budget divided by this (chunking.SCRATCH_DIVISORS)
    recompute: int = 0         # planner.recompute's level
    stream: Prefix | None = None
    accumulate: bool = False   # micro-batches: gradients added into accumulators by their ops (planner.accumulate)

    def order_key(self) -> tuple:
        """What breaks a tie in predicted time (the order of the search's tuples before they had names)."""
        plain = tuple(self[:5]) + ((True,) if self.accumulate else ())
        if self.stream is None:
            return plain
        s = self.stream
        if s.keep:
            return plain + ((s.cut, s.microbatches, "keep") + ((s.keep,) if s.keep > 1 else ()) +
                            ((s.rounds,) if s.rounds else ()),)
        if s.rounds and s.lanes == 1:
            return plain + ((s.cut, s.microbatches, s.rounds),)
        return plain + ((s.cut, s.microbatches) if s.lanes == 1 else tuple(s[:4]),)


def _prefix(s) -> Prefix | None:
    """A Prefix of `s`: one, or its fields (cut name, micro-batches[, lanes, rounds]) as `force` gives them."""
    return None if not s else s if isinstance(s, Prefix) else Prefix(*s)


class BudgetError(ValueError):
    """No plan fits the budget. `.plan` is the plan made for the step's floor (floor_plan: the smallest budget the
    planner fits it in), `.smallest_bytes` that floor, the figure the message names."""

    def __init__(self, message: str, plan: MemoryPlan):
        super().__init__(message)
        self.plan = plan
        self.smallest_bytes = plan.peak_bytes if plan.budget_bytes is None else plan.budget_bytes


def budget_message(floor_bytes: int, budget: int, what: str = "the step", fix: str = "a smaller batch") -> str:
    """What a BudgetError says: one number, the floor (floor_plan's budget), named as such, and the fix."""
    need = format_size(floor_bytes, up=True)
    return (f"{what} needs at least {need} ({floor_bytes} bytes) but the memory budget is {format_size(budget)} "
            f"({budget} bytes); use a budget of at least {need} (the step's floor: the smallest budget the planner "
            f"fits it in) or {fix}")


class Share(NamedTuple):
    """Updates of variables run right after the statistics pass that finishes their gradients (planner.batch.
    update_groups, _Step._early), so that the gradients' accumulators end there: the update ops' kernels on those
    variables' groups alone. The update run does the rest of each op's groups."""
    after: int                                # the run after whose last merge it runs
    phase: int                                # its run in MemoryPlan.phases (after the update run)
    groups: dict[Operation, tuple[int, ...]]  # update op -> the groups (apply_groups) it updates


@dataclass(eq=False)
class MemoryPlan:
    """Where every byte of one step lives. Sizes in bytes. See `to_json()` for the stable summary."""
    device: str
    alignment: int
    phases: list[Phase]
    arena_bytes: int
    live: np.ndarray                      # transient bytes live at each step of the timeline
    parameter_bytes: int
    slot_bytes: int
    feed_bytes: int
    microbatches: int = 1
    batch_size: int | None = None
    batch_feeds: list[Tensor] = field(default_factory=list)
    accumulators: dict[Tensor, Buffer] = field(default_factory=dict)   # averaged gradients / merged fetches
    fetch_merge: dict[Tensor, str] = field(default_factory=dict)       # 'mean', 'concat', 'last' ('sum': statistics;
    # 'concat_mean': a sparse gradient's rows, planner.batch.Split.gathered; a gradient without an entry: 'mean')
    chunks: dict[Operation, int] = field(default_factory=dict)
    budget_bytes: int | None = None
    transformations: list[dict] = field(default_factory=list)
    predicted_overhead: float = 0.0
    max_batch_size: int | None = None
    scratch_divisor: int = 1
    feed_shapes: dict = field(default_factory=dict)                    # {fed tensor: shape} of the whole step
    notes: list[str] = field(default_factory=list)                     # what the planner would not do, and why
    # With recomputation the phases run a planning copy of the graph (planner.recompute): the caller's fed and
    # fetched tensors -> theirs. Empty when the phases run the caller's graph.
    tensor_map: dict[Tensor, Tensor] = field(default_factory=dict)
    recomputed: list[str] = field(default_factory=list)                # the activations recomputed
    choice: str = ""                                                   # why the budget search chose this plan
    # A streamed prefix (planner.stream): the cut and its micro-batches; `accumulators` then hold the cut's
    # full-batch buffer and the prefix's summed weight gradients.
    stream: stream.Cut | None = None
    stream_microbatches: int = 1
    # On a cpu of several threads the prefix's micro-batches may run in lanes at once, one thread each
    # (planner.stream, "Lanes"), each on its own copy of the prefix run's buffers: `lane_block` holds the copies
    # (each `lane_bytes`), and `lane_offsets` are the prefix buffers' offsets within a copy.
    stream_lanes: int = 1
    lane_block: Buffer | None = None
    lane_offsets: dict = field(default_factory=dict)
    # A micro-batched step with batch statistics (planner.crossbatch): the tensors each statistics pass computes
    # (phases[i] for pass i, over the micro-batches, before the micro-batch run), their accumulators the whole
    # batch's; empty without.
    statistics: list[list[Tensor]] = field(default_factory=list)
    # Rows statistics passes keep whole for later passes (planner.crossbatch.kept), each in its buffer: copied in
    # by its writer pass a micro-batch at a time, and read back a micro-batch's rows at a time.
    kept: dict[crossbatch.Kept, Buffer] = field(default_factory=dict)
    # The micro-batch count of each statistics pass and of the micro-batch run (crossbatch: a count per run; empty:
    # `microbatches` each), and per run the gradient values to scale to its count before it runs (crossbatch.rescales:
    # an accumulator's Tensor or a Kept span, and the factor).
    run_microbatches: list[int] = field(default_factory=list)
    rescale: list[list[tuple]] = field(default_factory=list)
    # (run, fetched tensor) where a run on one micro-batch writes it straight into its accumulator or kept rows
    # (no merge after the run).
    written: set[tuple[int, Tensor]] = field(default_factory=set)
    # Gradients the micro-batches add straight into their momentum slots instead of accumulators, and the update
    # that then runs its "folded" variant (planner.batch.slot_folds): {gradient: SlotFold}.
    slot_folds: dict[Tensor, SlotFold] = field(default_factory=dict)
    # Updates run after the statistics pass that finishes their gradients, each an extra phase (phases past the
    # update run's), in run order.
    shares: list[Share] = field(default_factory=list)
    # Optimizer slots kept in host memory and staged through the arena for their updates (planner.paging): not in
    # `slot_bytes`; their update ops' last workspaces are the staging buffers.
    paging: paging.Paging | None = None

    @property
    def buffers(self) -> list[Buffer]:
        return [b for ph in self.phases for b in ph.life.buffers] + list(self.accumulators.values()) + \
            list(self.kept.values())

    @property
    def lane_bytes(self) -> int:
        """The bytes of one lane's copy of the prefix run's buffers (0 without lanes)."""
        return self.lane_block.size // self.stream_lanes if self.lane_block is not None else 0

    @property
    def arena_lower_bound_bytes(self) -> int:
        return int(self.live.max()) if len(self.live) else 0

    @property
    def fixed_bytes(self) -> int:
        return self.parameter_bytes + self.slot_bytes + self.feed_bytes

    @property
    def peak_bytes(self) -> int:
        return self.fixed_bytes + self.arena_bytes

    @property
    def lower_bound_bytes(self) -> int:
        return self.fixed_bytes + self.arena_lower_bound_bytes

    @property
    def fits(self) -> bool:
        return self.budget_bytes is None or self.peak_bytes <= self.budget_bytes

    @property
    def backward_step(self) -> int | None:
        """The first timeline step that runs a gradient op (the forward/backward boundary)."""
        for ph in self.phases:
            for i, op in enumerate(ph.order):
                if phase_of(op) == "backward":
                    return ph.start + i
        return None

    def breakdown(self) -> dict[str, int]:
        """Bytes by role at the step where the most transient bytes are live."""
        peak = int(np.argmax(self.live)) if len(self.live) else 0
        by = {"forward": 0, "saved": 0, "backward": 0, "update": 0, "workspace": 0, "accumulator": 0, "feed": 0}
        lane = self.lane_offsets
        for b in self.buffers:
            if b.start <= peak <= b.end and b not in lane:
                by[b.kind] += b.size
        block = self.lane_block
        if block is not None and block.start <= peak <= block.end:  # each lane's copy at its own peak
            at = max(range(block.start, block.end + 1),
                     key=lambda i: sum(b.size for b in lane if b.start <= i <= b.end))
            for b in lane:
                if b.start <= at <= b.end:
                    by[b.kind] += b.size * self.stream_lanes
        return {"parameters": self.parameter_bytes, "optimizer_slots": self.slot_bytes,
                "feeds": self.feed_bytes + by["feed"],
                "saved_activations": by["forward"] + by["saved"], "gradients": by["backward"] + by["update"],
                "workspaces": by["workspace"], "accumulators": by["accumulator"],
                "arena": self.arena_bytes, "peak": self.peak_bytes}

    def to_json(self) -> dict:
        out = {"peak_bytes": self.peak_bytes, "lower_bound_bytes": self.lower_bound_bytes,
               "arena_bytes": self.arena_bytes, "arena_lower_bound_bytes": self.arena_lower_bound_bytes,
               "budget_bytes": self.budget_bytes, "fits": self.fits, "device": self.device,
               "alignment": self.alignment, "microbatches": self.microbatches,
               "transformations": self.transformations,
               "predicted_overhead": round(self.predicted_overhead, 4),
               "breakdown": self.breakdown()}
        if self.max_batch_size is not None:
            out["max_batch_size"] = self.max_batch_size
        if self.notes:
            out["notes"] = self.notes
        if self.choice:
            out["choice"] = self.choice
        if self.statistics:
            out["statistics_passes"] = len(self.statistics)
            out["run_microbatches"] = list(self.run_microbatches)
        if self.stream is not None:
            out["stream"] = {"cut": self.stream.tensor.name, "microbatches": self.stream_microbatches,
                             "lanes": self.stream_lanes, "prefix_backward": bool(self.stream.backward)}
        if self.paging is not None:
            out["paged_slots"] = {"slots": sorted(self.paging.slots), "host_bytes": self.paging.paged_bytes,
                                  "staging_bytes": max(self.paging.staging.values())}
        return out

    def summary(self) -> str:
        """A human-readable table of the plan (what `tfplus plan` prints)."""
        rows = [(k.replace("_", " "), format_size(v)) for k, v in self.breakdown().items()]
        lines = [f"memory plan on {self.device} (alignment {self.alignment} B)"]
        lines += [f"  {k:<18} {v:>10}" for k, v in rows]
        ratio = self.arena_bytes / max(1, self.arena_lower_bound_bytes)
        lines.append(f"  arena lower bound  {format_size(self.arena_lower_bound_bytes):>10}  "
                     f"(arena = {ratio:.3f} x)")
        lines.append(f"  lower bound        {format_size(self.lower_bound_bytes):>10}")
        if self.paging is not None:
            pg = self.paging
            lines.append(f"  paged slots (host) {format_size(pg.paged_bytes):>10}  ({len(pg.slots)} slots; staged "
                         f"in up to {format_size(max(pg.staging.values()))} of the arena during their update)")
        if self.budget_bytes is not None:
            lines.append(f"  budget             {format_size(self.budget_bytes):>10}  "
                         f"{'fits' if self.fits else 'does NOT fit'}")
        for t in self.transformations:
            lines.append(f"  + {t['name']}: {t['detail']} "
                         f"(predicted overhead {t['predicted_overhead']:+.1%})")
        if self.choice:
            lines.append(f"  chosen: {self.choice}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def plan(fetches, feed_shapes: dict, device="cpu", budget=None, *, graph: Graph | None = None,
         transformations=TRANSFORMATIONS, alignment: int | None = None, raise_if_infeasible: bool = True,
         force: tuple | None = None, page: bool | None = None) -> MemoryPlan:
    """Plans the step that runs `fetches` (Tensors/Operations/names) with feeds of `feed_shapes`
    ({tensor or name: shape}) on `device`: DeviceFacts, or 'cpu' / 'opencl' for a device of the documented defaults
    (CPU_ALIGNMENT; OPENCL_DEFAULT_*; threads not stated), whose kernels must be registered (a device of this machine:
    tfplus.runtime.facts.device_facts(device), which registers them). With a `budget` (bytes or
    a size such as '64MB') the cheapest transformations that make it fit are applied; if none does, BudgetError (or,
    with raise_if_infeasible=False, the smallest plan with fits=False). `force=(micro-batches, conv chunks)`
    skips the search and builds that combination (tests, benchmarks); a third element True adds compact
    saved state, a fourth divides the conv kernels' scratch budget (planner.chunking.SCRATCH_DIVISORS), a fifth
    is the recomputation level (planner.recompute: the r largest recomputable activations are dropped), a sixth
    (a Prefix, or its fields: cut tensor name, micro-batches[, lanes, balancing rounds, keep]) streams the prefix up
    to that tensor (planner.stream; keep: its argmax kept for its backward, planner.compact.keeping), a seventh
    adds gradients into their accumulators where they are made (planner.accumulate): the fields of a Candidate.
    `page`: True pages the optimizer's slots to the host (planner.paging; opencl only), False never, None as the
    cost model chooses for a budget the plain step exceeds (the search runs with the slots on the device and
    paged, and the cheaper plan that fits wins)."""
    step = _Step(fetches, feed_shapes, device, graph, alignment, page=bool(page))
    budget = None if budget is None else parse_size(budget, "memory budget")
    if force is not None:
        step.budget = budget
        p = _paged(step, step.build(*force))
        p.budget_bytes = budget
        return p
    transformations = tuple(transformations)
    best, why = _search(step, budget, transformations)
    _paged(step, best)
    costly = budget is not None and (not best.fits or best.predicted_overhead > 0)
    other = _paging_step(step, page, transformations) if costly else None
    if other is not None:
        p, reason = _search(other, budget, transformations)
        _paged(other, p)
        if p.fits and (not best.fits or p.predicted_overhead < best.predicted_overhead):
            best, why, step = p, reason, other
    if best.fits or not raise_if_infeasible:
        return best
    # NOTE: the smallest plan found for this budget is not the floor where plans depend on the budget (statistics
    # passes keep rows as far as it leaves room): its peak may lie above the floor, or a far-too-small budget's
    # below it. The error names the floor alone, as `tfplus plan` and `tfplus train` do.
    low = _floor(step, transformations)
    done = ", ".join(t["name"] for t in low.transformations) or "no transformation applies"
    raise BudgetError(f"{budget_message(low.budget_bytes, budget, _running(step.fetches))} (the floor's plan: "
                      f"{done}{why})", low)


def _paging_step(step: _Step, page: bool | None, transformations: tuple) -> _Step | None:
    """The step with its optimizer slots paged (planner.paging), for the search to weigh against `step`: only where
    the choice is the cost model's (`page` None), on a device that is not the host, for an optimizer that pages."""
    if page is not None or not paging.chosen() or "page" not in transformations or step.kernel_device != "opencl":
        return None
    other = _Step(step.fetches, step.feed_shapes, step.facts, step.graph, step.alignment, page=True)
    return other if other.paging is not None else None


def _paged(step: _Step, p: MemoryPlan) -> MemoryPlan:
    """Plan `p` of `step` with its paged slots (if any) priced: each slot copied in and out at the device's host
    bandwidth, a launch's host time per copy and per extra update call (planner.paging)."""
    pg = step.paging
    if pg is None or p.paging is not None:  # (priced once)
        return p
    bandwidth = step.facts.host_bandwidth or paging.DEFAULT_HOST_BANDWIDTH
    seconds = 2 * pg.paged_bytes / bandwidth + (pg.copies + pg.calls) * step.cost.weights["calls"]
    extra = seconds / max(step.cost.time(step.features(1, 1)), 1e-9)
    p.paging, p.predicted_overhead = pg, p.predicted_overhead + extra
    p.transformations.append({
        "name": "page", "predicted_overhead": extra,
        "detail": f"{len(pg.slots)} optimizer slots ({format_size(pg.paged_bytes)}) in host memory, staged through "
                  f"up to {format_size(max(pg.staging.values()))} of the arena in {sum(map(len, pg.packs.values()))} "
                  f"update calls: {format_size(2 * pg.paged_bytes)} copied a step at {bandwidth / 1e9:.3g} GB/s"})
    if p.choice:
        p.choice += f"; the slots paged to the host ({extra:+.1%})"
    return p


def _running(fetches: list) -> str:
    """'the step running a, b': the run a BudgetError is about (a session's initializer is planned before its
    training step, and needs less)."""
    names = [f.name for f in fetches]
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    return f"the step running {', '.join(names[:3])}{more}"


def _search(step: _Step, budget: int | None, transformations: tuple, fit_only: bool = False) -> tuple:
    """(plan, why): the cheapest plan of `step` that fits `budget`, else the smallest found (fits False) and why a
    more frugal one did not apply. With `fit_only`, a plan that fits may be any that does (the floor's search
    asks only whether one does: the frugal plan, without the search for the cheapest)."""
    best, why = _search_keeping(step, budget, budget, transformations, fit_only)
    if not best.fits and budget is not None and step.budget_shapes(transformations):
        # NOTE: the rows of the cheapest reserve (KEPT_RESERVES, priced) may not fit where those of the first
        # reserve, which the floor's probes keep (fit_only), do: without them, a session refused the budget
        # floor_plan named (a ResNet at batch 32: its priced plan peaked at 220 kB in a floor of 183 kB). And rows
        # kept to fill KEEP_SHARE of the budget may not place within it (on a small step the alignment outgrows the
        # margin) where the rows the smallest plan keeps would: planned with those, every budget from the smallest
        # plan's peak up fits.
        for keep, priced in ((budget, False), (None, not fit_only)):
            if keep is not None and fit_only:  # (the first try's rows were the unpriced ones)
                continue
            other, reason = _search_keeping(step, budget, keep, transformations, fit_only, priced)
            if other.fits or other.peak_bytes < best.peak_bytes:
                best, why = other, reason
            if best.fits:
                break
    return best, why


def _search_keeping(step: _Step, budget: int | None, keep: int | None, transformations: tuple,
                    fit_only: bool, priced: bool | None = None) -> tuple:
    """_search, statistics passes keeping rows as far as a budget of `keep` leaves room (_Step._kept), those of
    the lowest predicted time among KEPT_RESERVES if `priced` (by default where not `fit_only`)."""
    step.budget, step.price_rows = keep, not fit_only if priced is None else priced
    best = base = step.build(step.least_microbatches, 1)
    base.budget_bytes = budget
    if budget is None or base.fits:
        return _debug(base, base), ""
    cands = step.candidates(transformations)
    # The most frugal combination is tried first: if it does not fit, nothing does.
    frugal, why = _frugal(step, cands)
    if frugal is not None and frugal[1].peak_bytes < best.peak_bytes:
        best = frugal[1]
    best.budget_bytes = budget
    if best.fits and not fit_only:
        for i, kc in enumerate(cands):
            try:
                if step.least_bytes(*kc) > budget:  # most candidates: no need to order them
                    continue
                p = frugal[1] if kc == frugal[0] else step.build(*kc, place=False)
            except PlanError:
                continue
            if p.lower_bound_bytes > budget:  # the arena cannot beat the liveness bound: skip placing it
                continue
            place(p)
            p.budget_bytes = budget
            if p.fits:
                p.choice = step.why(kc, i, p)
                return _debug(p, base), why
    return _debug(best, base), why


class Spread(NamedTuple):
    """A step with batch statistics run on k slices side by side (the cpu workers, tfplus.engine.workers): the
    statistics passes and the micro-batch run of k micro-batches (planner.crossbatch), each slice one of them."""
    split: Split                             # the statistics copy's, its statistics fed
    runs: list[tuple[list, set[Tensor]]]     # (fetches, feeds) of each statistics pass, then of the micro-batch run
    levels: list[list[Tensor]]               # the statistics each pass computes
    merges: dict[Tensor, str]                # how a statistic's slices make the batch's (Statistics.merges)
    tensor_map: dict[Tensor, Tensor]         # the step's fed and fetched tensors -> the copy's


def spread(fetches, feed_shapes: dict, device, k: int) -> Spread | None:
    """The runs of a step with batch statistics on k slices (Spread), as a plan of k micro-batches without a budget
    runs them, but each on k micro-batches and keeping every row a later pass reads (a slice keeps its own); None for
    a step without batch statistics. PlanError where the passes cannot compute them or the step does not split."""
    step = _Step(fetches, feed_shapes, device, None, None)
    step.spread = True
    st = step.stats()
    if st is None:
        return None
    levels, split = step._levels(k), step.split()
    runs = [(run.fetches, run.feeds) for run in step._runs(k)[:len(levels) + 1]]
    merges = {t: st.merges[t] for level in levels for t in level}
    return Spread(split, runs, levels, merges, step._stats_view().outer)


def smallest_plan(fetches, feed_shapes: dict, device="cpu", *, graph: Graph | None = None,
                  transformations=TRANSFORMATIONS, alignment: int | None = None) -> MemoryPlan:
    """The plan with the smallest peak the transformations reach without a budget to fill. Its peak fits; a
    step whose plans depend on the budget (floor_plan) may fit less."""
    return _smallest(_Step(fetches, feed_shapes, device, graph, alignment), tuple(transformations))


def _smallest(step: _Step, transformations: tuple) -> MemoryPlan:
    step.budget = None
    base = step.build(step.least_microbatches, 1, place=False)
    frugal, _ = _frugal(step, step.candidates(transformations))
    # The plain step is placed only if it can win: its arena is never below its liveness bound.
    if frugal is not None and frugal[1].peak_bytes < base.lower_bound_bytes:
        return frugal[1]
    place(base)
    return frugal[1] if frugal is not None and frugal[1].peak_bytes < base.peak_bytes else base


def fits(fetches, feed_shapes: dict, device="cpu", budget=None, *, graph: Graph | None = None,
         transformations=TRANSFORMATIONS, alignment: int | None = None) -> bool:
    """Whether plan() fits `budget`, found without the search for the cheapest plan that does (the most frugal
    plan for the budget decides it)."""
    step = _Step(fetches, feed_shapes, device, graph, alignment)
    budget = None if budget is None else parse_size(budget, "memory budget")
    if _search(step, budget, tuple(transformations), fit_only=True)[0].fits:
        return True
    other = None if budget is None else _paging_step(step, None, tuple(transformations))
    return other is not None and _search(other, budget, tuple(transformations), fit_only=True)[0].fits


# The floor's search (floor_plan): at most this many budgets are planned, and it stops once the budgets that fit
# and those that do not are this close, as a share of the floor (a few tenths of a megabyte on MobileNet).
FLOOR_ROUNDS = 8
FLOOR_PRECISION = 0.01


def floor_plan(fetches, feed_shapes: dict, device="cpu", *, graph: Graph | None = None,
               transformations=TRANSFORMATIONS, alignment: int | None = None) -> MemoryPlan:
    """The plan that plan() makes for the smallest budget it fits, that budget in its `budget_bytes` (the
    floor: the step's smallest feasible budget). Most steps plan the same whatever the budget, and there the
    floor is the smallest plan's peak (smallest_plan). Statistics passes keep whole rows only as far as the budget
    leaves room (planner.crossbatch.kept), so a plan made for a budget below that peak may still fit: for such a
    step the budgets between the fixed bytes (variables and feeds: no plan fits them) and that peak are bisected,
    at most FLOOR_ROUNDS plans, until the bracket is within FLOOR_PRECISION of the floor. A probe asks only
    whether the most frugal plan for its budget fits (what decides whether plan() fits), and the probes share one
    step's caches. Fitting is taken to grow with the budget (the search's assumption, as bisection's).

        >>> p = floor_plan([train_op], {images: (128, 3, 32, 32), labels: (128,)}, "cpu")  # doctest: +SKIP
        >>> plan([train_op], shapes, "cpu", p.budget_bytes).fits                           # doctest: +SKIP
        True
    """
    return _floor(_Step(fetches, feed_shapes, device, graph, alignment), tuple(transformations))


def _floor(step: _Step, transformations: tuple) -> MemoryPlan:
    """floor_plan of `step`: the lower of its own and, where the slots may page, its paged copy's."""
    p = _floor_of(step, transformations)
    other = _paging_step(step, None, transformations) if step.paging is None else None
    if other is not None:
        q = _floor_of(other, transformations)
        if q.budget_bytes < p.budget_bytes:
            return q
    return p


def _floor_of(step: _Step, transformations: tuple) -> MemoryPlan:
    """floor_plan of `step` as it is (paged or not)."""
    hi = _smallest(step, transformations).peak_bytes
    if step.budget_shapes(transformations):
        lo = step.parameter_bytes + step.slot_bytes + step.feed_bytes  # refused: a step's arena is never empty
        for _ in range(FLOOR_ROUNDS):
            if hi - lo <= FLOOR_PRECISION * hi:
                break
            mid = (lo + hi) // 2
            # (_search's second try, with the smallest plan's rows, cannot fit below that plan's peak)
            if _search_keeping(step, mid, mid, transformations, fit_only=True)[0].fits:
                hi = mid
            else:
                lo = mid
    p, _ = _search(step, hi, transformations)
    _paged(step, p)
    p.budget_bytes = hi
    return p


def _frugal(step: _Step, cands: list[Candidate]) -> tuple:
    """(Candidate, plan) with the smallest peak among the frugal extremes, and why a more frugal one did not
    apply: the most micro-batches (each with its most chunks), no micro-batching with the most chunks
    (accumulating gradients costs a copy of them, more than micro-batching saves on small batches), and the
    streamed cut whose most micro-batches have the smallest lower bound (least_bytes; only that one is built).
    Peaks fall with more chunks and, past that, with more micro-batches: the planner's working assumption, not
    a proof."""
    why, found = "", []

    def frugal_first(kc: Candidate):
        s = kc.stream
        k = kc.microbatches * (s.microbatches if s else 1)
        lanes, rounds = (s.lanes, s.rounds) if s else (1, 0)  # a lane: a copy of the prefix
        return -k, step._conv_scratch(k * kc.chunks, kc.scratch), -kc.compact, -kc.recompute, lanes, -rounds
    plain = [kc for kc in cands if kc.stream is None]
    groups = [sorted(g, key=frugal_first) for g in ([kc for kc in plain if kc.microbatches > 1],
                                                   [kc for kc in plain if kc.microbatches == 1])]
    streamed = [min((kc for kc in cands if kc.stream and kc.stream.cut == cut), key=frugal_first, default=None)
                for cut in step.cuts()]
    groups.append(sorted((kc for kc in streamed if kc is not None), key=lambda kc: step.least_bytes(*kc))[:1])
    for group in groups:
        for kc in group:
            try:
                found.append((kc, step.build(*kc)))
                break
            except PlanError as e:
                why = why or f" ({e})"
    # The least modelled saved state (the last level) need not give the smallest peak: the model counts neither
    # gradients nor workspaces, nor that a segment's copies die one by one in its backward; and on a small step
    # dropping the largest activations may beat segments. So each other segment level, and the last chain level:
    # the one of the smallest liveness bound is placed.
    levels = step.levels() if any(kc.recompute for kc in cands) else []
    others = [r for r in levels if r > recompute.MAX_LEVEL] + [r for r in levels if r <= recompute.MAX_LEVEL][-1:]
    for kc, _ in list(found):
        alts = []
        for r in others if kc.recompute > recompute.MAX_LEVEL else ():
            if r != kc.recompute:
                try:
                    alts.append((kc._replace(recompute=r), step.build(*kc._replace(recompute=r), place=False)))
                except PlanError:
                    pass
        if alts:
            alt, p = min(alts, key=lambda a: a[1].lower_bound_bytes)
            found.append((alt, place(p)))
    return min(found, key=lambda f: f[1].peak_bytes, default=None), why


def _debug(p: MemoryPlan, base: MemoryPlan) -> MemoryPlan:
    if debug.on():
        print(f"tfplus planner: memory {format_size(base.peak_bytes)} -> {format_size(p.peak_bytes)} "
              f"(arena {format_size(p.arena_bytes)}, lower bound {format_size(p.arena_lower_bound_bytes)})")
    return p


# -- one step, many candidate plans --------------------------------------------------------------------------
class _Step:
    """What every candidate plan of one step shares: the graph, feeds, fetches, variables, device."""

    budget: int | None = None  # the budget searched for (crossbatch's kept rows may fill it)
    # the runs of the cpu workers (spread): every run on k micro-batches, every row a later pass reads kept (each
    # worker keeps its own slice's), gradients merged into no slot and updates all in the update run
    spread: bool = False
    # whether the kept rows of a budget are priced under each of KEPT_RESERVES (_choose_kept): not where a search
    # asks only whether a plan fits (the floor's probes), which the rows of reserve 1, the most kept, decide
    price_rows: bool = True

    def __init__(self, fetches, feed_shapes, device, graph, alignment, page: bool = False):
        self.graph = graph or _graph_of(fetches, feed_shapes) or get_default_graph()
        fetches = fetches if isinstance(fetches, (list, tuple)) else [fetches]
        self.fetches = [self.graph.as_graph_element(f) for f in fetches]
        self.feed_shapes = {self.graph.as_graph_element(t): tuple(int(d) for d in s)
                            for t, s in feed_shapes.items()}
        self.feeds = set(self.feed_shapes)
        facts = _device(device, alignment)
        self.device, self.kernel_device, self.alignment = facts.name, facts.kernel_device, facts.alignment
        self.compute_units, self.threads = facts.compute_units, facts.threads
        self.facts = facts
        if not has_kernels(self.kernel_device):  # their workspace declarations are the plan's scratch
            raise ValueError(f"no {self.kernel_device} kernels are registered, so a plan would miss their scratch: "
                             f"plan with tfplus.runtime.facts.device_facts({self.kernel_device!r}), which registers "
                             "them, or make a runtime of that device first")
        self.ops = needed_ops(self.fetches, self.feeds)
        self._cache: dict = {}
        self._contents: dict = {}  # a run's (name, r, fetches, feeds) -> the variant it is planned as (_run)
        run = self._run("step", self.fetches, self.feeds, self.feed_shapes)
        self.order, self.base_specs = run.order, run.specs
        self.cost = cost.CostModel(self.kernel_device)
        trainable = {v.op for v in self.graph.get_collection("trainable_variables") if hasattr(v, "op")}
        variables = [op for op in self.graph.get_operations() if op.type == "VariableV2"]
        size = {op: nbytes(self.base_specs.get(op.outputs[0]) or _var_spec(op)) for op in variables}
        # The opencl runtime holds variables, slots and the fed batch in its pool's size classes (the arena is
        # one exact allocation): counted so, the plan's peak is the device ledger's.
        held = size_class if self.kernel_device == "opencl" else int
        self.parameter_bytes = sum(held(size[op]) for op in variables if op in trainable)
        self.slot_bytes = sum(held(size[op]) for op in variables if op not in trainable)
        self.feed_bytes = sum(held(nbytes(self.base_specs[t])) for t in self.feeds)
        # Paged slots (planner.paging) leave the device: their update ops stage them in the arena (_workspaces).
        self.paging = paging.page(self.ops, lambda t: size[t.op], self.alignment, trainable) \
            if page and self.kernel_device == "opencl" else None
        if self.paging is not None:
            self.slot_bytes -= sum(held(size[op]) for op in variables if op.name in self.paging.slots)
        self.inplace = True
        self.clones: frozenset = frozenset()  # planner.recompute's copies, on a recomputing step (recomputing())
        self.kept: frozenset = frozenset()  # what a streamed prefix keeps for its backward (on keeping(): argmax)
        # A map of the batch's rows unrolled for micro-batches of so many rows (planner.maps): the step means what
        # its graph says only in those micro-batches, every run of it.
        self.map_rows = next((op.attrs["_row_map"] for op in self.ops if op.attrs.get("_row_map")), None)

    @property
    def least_microbatches(self) -> int:
        """The plain step's micro-batches: 1, or those its unrolled maps of the rows hold it to (map_rows)."""
        return self.batch_size() // self.map_rows if self.map_rows else 1

    def budget_shapes(self, transformations: tuple) -> bool:
        """Whether a plan of the step may depend on its budget beyond fitting it: micro-batches whose statistics
        passes keep rows whole as far as the budget leaves room (_kept). Without, plan() fits every budget from
        the smallest plan's peak up, and no budget below it."""
        if "microbatch" not in transformations or not crossbatch.KEEP:
            return False
        try:
            st = self.stats()
        except PlanError:
            return False
        return st is not None and any(t in self.major() for t in st.keepable.values())

    # -- candidates ----------------------------------------------------------------------------------------
    def candidates(self, allowed: tuple) -> list[Candidate]:
        """The Candidates other than the plain step, cheapest predicted first. A streamed prefix (planner.stream)
        combines with compact saved state and a scratch divisor only; lanes need a cpu of several threads."""
        # Chunking and scratch divisors shrink the cpu conv kernels' im2col/col2im workspaces; on opencl the
        # divisor shrinks the filter gradients' split-sum partials (chunking there would only add launches).
        scratch = self._conv_scratch(1) > 0
        batch = self.batch_size() if "microbatch" in allowed else None
        ks = _divisors(batch) if batch else [1]
        if self.map_rows:
            ks = [self.least_microbatches]
        chunk = "chunk" in allowed and scratch and self.kernel_device == "cpu"
        divs = chunking.SCRATCH_DIVISORS if "scratch" in allowed and scratch else (1,)
        quads = []
        for k in ks:
            # Per micro-batch count, the (chunks, divisor) pairs that no other pair beats on both scratch and
            # predicted time (the conv kernels may already work in pieces smaller than a batch slice).
            cs = _divisors(batch // k if batch else self._conv_batch()) if chunk else [1]
            opts = [(self._conv_scratch(k * c, d), self.overhead(k, c, False, d), c, d) for c in cs for d in divs]
            front = [o for o in opts if not any(p[0] <= o[0] and p[1] <= o[1] and p[:2] != o[:2] for p in opts)]
            if self.kernel_device != "cpu":  # few options there: all of them, smallest scratch first
                front = opts
            quads += [(k, c, False, d) for _, _, c, d in sorted(front)]
        quads = [q for q in quads if q != (self.least_microbatches, 1, False, 1)]  # the plain step (a cheaper pair
        # may hide it)
        if "compact" in allowed and self._sites():
            quads += [(1, 1, True, 1)] + [(k, c, True, d) for k, c, _, d in quads]
        levels = self.levels() if "recompute" in allowed else []
        out = [Candidate(*q) for q in quads] + [Candidate(recompute=r) for r in levels] + \
            [Candidate(*q, r) for q in quads for r in levels]
        # Adding gradients in where they are made saves their buffers for a few calls: every micro-batched
        # candidate that can does (planner.accumulate).
        if "accumulate" in allowed:
            out = [kc._replace(accumulate=True) if kc.microbatches > 1 and self._accumulates(kc.recompute) else kc
                   for kc in out]
        if "stream" in allowed and batch:
            zs = (False, True) if "compact" in allowed and self._sites() else (False,)
            out += [Candidate(1, 1, z, d, 0, Prefix(cut, k)) for cut in self.cuts() for k in ks[1:] for z in zs
                    for d in divs]
            # The rest of a streamed step at full batch may fit where its largest activations are recomputed: the
            # prefix streamed on the recomputing copy of the step (recomputing()), at the chain levels (segment
            # levels recompute most of the forward, which the prefix backward recomputes already), one lane (lanes
            # pay for their copies of the prefix with scratch, not with recomputation).
            for r in (r for r in levels if r <= recompute.MAX_LEVEL and self.cuts()):  # (no cut here: none there)
                sub = self.recomputing(r)
                out += [Candidate(1, 1, z, d, r, Prefix(cut, k)) for cut in sub.cuts() for k in ks[1:] for z in zs
                        for d in divs]
            out += [Candidate(1, 1, z, d, 0, Prefix(cut, k, n, b)) for cut in self.cuts() for k in ks[1:]
                    if (n := self.lanes(cut, k)) > 1 for z in zs for d in divs for b in self.rounds(cut, k, d)]
            # The prefix keeping its pools' argmax for its backward pass (planner.compact.keeping), on the step or its
            # recomputing copy: compact saved state everywhere (and ReLU masks as bits), as a graph of its own; or
            # those and the pools' outputs where a deeper prefix's backward would rerun a block for one. On opencl,
            # whose filter gradients' split sums grow with the compute units, also with the scratch of the
            # convolutions where the step peaks divided, one more each round (_spread), instead of all of them.
            if "compact" in allowed and self._sites():
                for r in [0] + [r for r in levels if r <= recompute.MAX_LEVEL]:
                    for level in (KEEP_ARGMAX, KEEP_OUTPUTS):
                        sub = self.keeping(r, level)[0]
                        cuts = [cut for cut in sub.cuts() if sub.cut(cut).saved and
                                (level == KEEP_ARGMAX or self._keeps_more(r, cut))]
                        out += [Candidate(1, 1, False, d, r, Prefix(cut, k, keep=level)) for cut in cuts
                                for k in ks[1:] for d in divs]
                        if self.kernel_device == "opencl" and not r:  # (on the recomputing copies: little gain)
                            out += [Candidate(1, 1, False, 1, r, Prefix(cut, k, 1, b, level)) for cut in cuts
                                    for k in ks[1:SPREAD_MICROBATCHES + 1] for b in sub.spread_rounds(cut, k, False, 1)]
        return sorted(out, key=lambda q: (self.overhead(*q), q.order_key()))

    def _keeps_more(self, r: int, cut: str) -> bool:
        """Whether the prefix up to `cut` keeps more at KEEP_OUTPUTS than at KEEP_ARGMAX (a pool's output that its
        backward reads: the cut is past a block's pool)."""
        more, argmax = (len(self.keeping(r, level)[0].cut(cut).saved) for level in (KEEP_OUTPUTS, KEEP_ARGMAX))
        return more > argmax

    def levels(self) -> list[int]:
        """The recomputation levels: up to recompute.MAX_LEVEL those that drop more of the largest activations
        than the level before (planner.recompute), then one per segment-checkpointing solution (planner.remat),
        the most frugal last."""
        if "levels" not in self._cache:
            sizes = [len(self.drops(r)) for r in range(recompute.MAX_LEVEL + 1)]
            chains = [r for r in range(1, len(sizes)) if sizes[r] > sizes[r - 1]]
            self._cache["levels"] = chains + [recompute.MAX_LEVEL + 1 + i for i in range(len(self._segmented()))]
        return self._cache["levels"]

    def remat(self, r: int) -> recompute.Solution:
        """What recomputation level r recomputes: the r largest activations, each per backward reader (r up to
        recompute.MAX_LEVEL), or the (r - MAX_LEVEL)th segment-checkpointing solution (planner.remat)."""
        if r <= recompute.MAX_LEVEL:
            return recompute.per_reader(self.drops(r))
        sols = self._segmented()
        if r - recompute.MAX_LEVEL > len(sols):
            raise PlanError(f"no recomputation level {r}: the step has levels {self.levels()}")
        return sols[r - recompute.MAX_LEVEL - 1]

    def _segmented(self) -> list[recompute.Solution]:
        if "segmented" not in self._cache:
            keep = {s.pool.inputs[0] for s in self._sites()}  # planner.compact saves those its own way
            self._cache["segmented"] = remat.solutions(self.order, self.base_specs, self.feeds, self.fetches, keep,
                                                       self._op_time)
        return self._cache["segmented"]

    def _op_time(self, op: Operation) -> float:
        """The predicted time of one call of `op` in the whole step (the cost model's weights)."""
        f, convs = dict.fromkeys(cost.FEATURES, 0.0), []
        cost.count(f, convs, 1, op, self.base_specs)
        f["conv_calls"] += len(convs)
        return self.cost.time(f)

    def drops(self, r: int) -> list[recompute.Drop]:
        """The activations that recomputation level r drops (the r largest that can be, planner.recompute)."""
        if "recompute candidates" not in self._cache:
            keep = {s.pool.inputs[0] for s in self._sites()}  # planner.compact saves those its own way
            self._cache["recompute candidates"] = recompute.candidates(self.order, self.base_specs, self.feeds,
                                                                       self.fetches, keep)
        return recompute.choose(self._cache["recompute candidates"], r, self.feeds)

    def view(self, r: int) -> _View:
        """The step as a plan at recomputation level r runs it: the caller's graph (r = 0) or a planning copy
        in which each backward reader of a dropped activation recomputes it (planner.recompute)."""
        if ("view", r) not in self._cache:
            if r == 0:
                v = _View(self.fetches, self.feeds, self.feed_shapes, {}, None)
            else:
                sol = self.remat(r)
                rw = recompute.rewrite(self.order, self.feeds, sol.segments)
                m = rw.tensor_map
                fetches = [m[f] if isinstance(f, Tensor) else rw.op_map[f] for f in self.fetches]
                outer = {t: m[t] for t in list(self.feeds) + [f for f in self.fetches if isinstance(f, Tensor)]}
                v = _View(fetches, {m[t] for t in self.feeds}, {m[t]: s for t, s in self.feed_shapes.items()},
                          outer, sol, frozenset(rw.clones))
            self._cache["view", r] = v
        return self._cache["view", r]

    def recomputing(self, r: int) -> _Step:
        """The step at recomputation level r as a step of its own, on its planning copy (view(r)): a streamed
        prefix of it has its cuts, runs and costs (the recomputing ops in the runs they serve: the rest's at full
        batch, the prefix backward's per micro-batch)."""
        if ("recomputing", r) not in self._cache:
            v = self.view(r)
            sub = _Step(v.fetches, v.feed_shapes, self.facts, _graph_of(v.fetches, v.feed_shapes), self.alignment)
            sub.inplace, sub.clones = self.inplace, v.clones
            # a copy of the step, whose graph may have no trainable collection: the step's bytes by role, paged alike
            sub.paging, sub.parameter_bytes, sub.slot_bytes = self.paging, self.parameter_bytes, self.slot_bytes
            self._cache["recomputing", r] = sub
        return self._cache["recomputing", r]

    def keeping(self, r: int, level: int = KEEP_ARGMAX) -> tuple[_Step, dict]:
        """planner.compact.keeping's copy of the step at recomputation level r (view(r)) as a step of its own, whose
        streamed prefix keeps its argmax (Cut.saved; at level KEEP_OUTPUTS the pools' outputs too), and the map of
        the caller's feeds and fetches onto it."""
        if ("keeping", r, level) not in self._cache:
            base = self.recomputing(r) if r else self
            rw = compact.keeping(base.order, base.feeds, base._sites(), base.fetches)
            m = rw.tensor_map
            fetches = [m[f] if isinstance(f, Tensor) else rw.op_map[f] for f in base.fetches]
            shapes = {m[t]: sh for t, sh in base.feed_shapes.items()}
            sub = _Step(fetches, shapes, self.facts, rw.graph, self.alignment)
            sub.inplace, sub.clones = self.inplace, frozenset(rw.op_map[c] for c in base.clones)
            sub.paging, sub.parameter_bytes, sub.slot_bytes = self.paging, self.parameter_bytes, self.slot_bytes
            sub.kept = frozenset(compact.kept_bytes(sub.order, outputs=level >= KEEP_OUTPUTS))
            outer = {t: m[c] for t, c in self.view(r).outer.items()} if r else \
                {t: m[t] for t in list(self.feeds) + [f for f in self.fetches if isinstance(f, Tensor)]}
            self._cache["keeping", r, level] = sub, outer
        return self._cache["keeping", r, level]

    def _build_recomputed_stream(self, z: bool, d: int, r: int, s: Prefix, place: bool) -> MemoryPlan:
        """The plan of the prefix streamed as `s` says on the step at recomputation level r (recomputing()), or
        on its copy that keeps the argmax (keeping(), s.keep), the caller's feeds and fetches mapped onto
        that copy."""
        v = self.view(r)
        sub, outer = self.keeping(r, s.keep) if s.keep else (self.recomputing(r), v.outer)
        p = sub.build(1, 1, z, d, 0, s._replace(keep=0), place=place)
        # NOTE: the caller's fed shapes, which the session finds the step by (the copy's tensors are the plan's own)
        p.tensor_map, p.feed_shapes = outer, dict(self.feed_shapes)
        at = next((i for i, t in enumerate(p.transformations) if t["name"] == "stream"), len(p.transformations))
        if r:
            p.recomputed = [t.name for t in v.remat.tensors]
            sol = v.remat
            entry = {"name": "recompute", "detail": self._describe_remat(r),
                     "predicted_overhead": round(self.overhead(1, 1, False, 1, r), 4), "solver": sol.solver,
                     "checkpoints": [t.name for t in sol.checkpoints], "recomputed": [t.name for t in sol.tensors]}
            p.transformations.insert(at, entry)
            at += 1
        if s.keep:
            saved, bits = p.stream.saved, sum(op.type == "_ReluMaskBits" for op in sub.order)
            p.transformations.insert(at, {
                "name": "keep", "detail": f"{len(sub.kept)} ReLU -> max-pool pairs are one op writing 4 bits a window "
                f"(the argmax, the ReLU's mask in it) and one gradient op reading them, {bits} ReLU masks kept as "
                f"bits; the prefix keeps {', '.join(t.name for t in saved)} "
                f"({format_size(sum(nbytes(sub.base_specs[t]) for t in saved))}) from its forward pass for its "
                "backward pass (planner.compact.keeping)", "predicted_overhead": 0.0})
        p.predicted_overhead = self.overhead(1, 1, z, d, r, s)
        for t in p.transformations:
            if t["name"] == "stream":
                t["predicted_overhead"] = round(self.overhead(1, 1, False, 1, r, s), 4)
        return p

    def _specs(self, r: int) -> dict:
        """Every tensor's spec in the whole step at recomputation level r."""
        return self._runs(1, r)[0].specs

    def _sites(self) -> list:
        if "sites" not in self._cache:
            self._cache["sites"] = compact.sites(self.order, self.base_specs,
                                                 [f for f in self.fetches if isinstance(f, Tensor)])
        return self._cache["sites"]

    def _on(self, lane: bool) -> int | None:
        """The threads the kernels run on: one in a lane of a streamed prefix, else the device's."""
        return 1 if lane else self.threads

    def _conv_scratch(self, parts: int, div: int = 1, lane: bool = False) -> int:
        """The most scratch one convolution declares when it runs on 1/parts of the batch with its scratch
        budget divided by `div` (in a lane: on one thread)."""
        key = ("scratch", parts, div, self._on(lane))
        if key not in self._cache:
            convs = [op for op in self.ops if op.type in chunking.CHUNKABLE
                     and (parts == 1 or chunking.can_chunk(op, self.base_specs, parts))]
            self._cache[key] = max(
                (sum(math.prod(s) * d.size
                     for s, d in declared_workspaces(op, self.base_specs, self.kernel_device, parts, div,
                                                     self.compute_units, self._on(lane)))
                 for op in convs), default=0)
        return self._cache[key]

    def _conv_batch(self) -> int:
        return max((self.base_specs[op.inputs[chunking.CHUNKABLE[op.type][0][0]]].shape[0]
                    for op in self.ops if op.type in chunking.CHUNKABLE), default=1)

    def batch_size(self) -> int | None:
        return batch_size(self.feed_shapes)

    def overhead(self, k: int, c: int, z: bool = False, d: int = 1, r: int = 0, s: tuple | None = None,
                 a: bool = False) -> float:
        """Predicted extra step time of (k micro-batches, c conv chunks, compact or not, scratch divisor d,
        recomputation level r, streamed prefix s, accumulated gradients or not) over the plain step, a fraction (see
        planner.cost)."""
        s = _prefix(s)
        key = ("overhead", k, c, bool(z), d, r, s, bool(a), self._kept_tag(k))
        if key not in self._cache:
            try:
                if "plain time" not in self._cache:
                    self._cache["plain time"] = self.cost.time(self.features(1, 1))
                plain = max(self._cache["plain time"], 1e-9)  # a step of no kernel calls (fetching a variable)
                self._cache[key] = self.cost.time(self.features(k, c, z, d, r, s, a)) / plain - 1
            except PlanError:
                self._cache[key] = float("inf")
        return self._cache[key]

    def why(self, kc: Candidate, cheaper: int, p: MemoryPlan | None = None) -> str:
        """Why the search chose candidate `kc` (plan `p`), the first of the candidates (cheapest predicted
        first) to fit after `cheaper` others did not."""
        plain = self.cost.time(self.features(1, 1))
        names = [t["name"] for t in (p.transformations if p else ()) if t["name"] not in ("schedule", "inplace")]
        return (f"{' + '.join(names) or 'the plain step'}: "
                f"the cheapest of the combinations that fit, by predicted step time on {self.kernel_device} "
                f"({self.cost.basis}): {plain * 1e3:.3g} ms -> {plain * (1 + self.overhead(*kc)) * 1e3:.3g} ms "
                f"({self.overhead(*kc):+.1%}); {cheaper} combinations predicted cheaper do not fit")

    def features(self, k: int, c: int, z: bool = False, d: int = 1, r: int = 0, s: Prefix | None = None,
                 a: bool = False) -> dict[str, float]:
        """What the step does under (k, c, z, d, r, s, a), in the cost model's terms: kernel calls, executor runs,
        GEMM FLOPs, elements other ops write, pieces the conv kernels cut their calls into, elements the
        compact pools read. Recomputing ops count like any other; an accumulated gradient (planner.accumulate)
        costs a product and an add per piece where it cost one product, on each micro-batch after the first
        (the adds' elements are the merge's, counted already)."""
        s = _prefix(s)
        if s and s.keep:
            return self.keeping(r, s.keep)[0].features(k, c, z, d, 0, s._replace(keep=0), a)
        if s and r:
            return self.recomputing(r).features(k, c, z, d, 0, s, a)
        fixed, convs = self._stream_features(s.cut, s.microbatches, s.lanes) if s else self._fixed_features(k, r)
        f = dict(fixed)
        lanes = bool(s) and s.lanes > 1
        own = self._balanced(self._stream_runs(s.cut, s.microbatches)[0], d, s.rounds) if lanes else {}
        spread = self._spread(s.cut, s.microbatches, z, d, s.rounds) if s and not lanes else {}
        for times, op, specs, batch, *where in convs:  # where: ("prefix",) or ("lane",) for a streamed prefix
            laned = where == ["lane"]  # in a lane, on one thread
            n = c if chunking.can_chunk(op, specs, c) else 1
            f["conv_calls"] += times * n
            div = own.get(op, d) if laned else spread.get(op, d)
            key = ("pieces", op, batch // n, div, bool(laned))
            if key not in self._cache:
                self._cache[key] = chunking.kernel_chunks(batch // n, div, partial(self._scratch_bytes, op,
                                                                                   lane=bool(laned)))
            f["pieces"] += times * n * (self._cache[key] - 1)  # cuts beyond one piece per call
            # A streamed prefix's calls (forward only) share their few images out over the threads: fewer than
            # cost.SMALL_CALL_IMAGES a thread leaves the fast paths' tasks small and the threads idle at each of its
            # ops (Mentee's fine-tuning prefix in 8-image micro-batches on 2 threads: +43-50% wall time where
            # lanes took +4-9%); a lane's run on one thread.
            if batch // n < cost.SMALL_CALL_IMAGES * ((self.threads or 1) if where == ["prefix"] else 1):
                f["small_calls"] += times * n
            if div > 1 and self.kernel_device == "opencl" and op.type == "Conv2DBackpropFilter":
                # The divisor takes the filter gradient's split sum down to 1/d as many work-groups, each d times
                # as deep: on a big GPU the kernel takes about d times as long.
                f["divided"] += times * cost.matmul_flops(op, specs) * (div - 1)
            if n > 1 and chunking.summed(op):
                f["elements"] += times * (n - 1) * math.prod(specs[op.outputs[0]].shape)
        if z:
            f["compact"] = sum(math.prod(self.base_specs[x.pool.inputs[0]].shape) for x in self._sites())
            if not s:  # a pooled site's MaxPoolGrad launches nothing, in each of the k micro-batch runs
                f["calls"] -= k * sum(compact.pooled(x, self.kernel_device) for x in self._sites())
        if a:
            f["calls"] += (k - 1) * sum(x.calls for x in self._accumulated(k, r))
        return f

    def _scratch_bytes(self, op: Operation, images: int, d: int, lane: bool = False) -> int | None:
        """chunking.scratch_bytes of a convolution, from the step's specs: a conv's geometry per image is the
        same in every run (what makes micro-batching exact)."""
        key = ("scratch bytes", op, images, d, self._on(lane))
        if self.kernel_device != "cpu":  # one piece per call
            return None
        if key not in self._cache:
            # a convolution of the statistics passes' copy (planner.crossbatch) reads the copy's tensors
            specs = self.base_specs if op.graph is self.graph else self._stats_specs()
            self._cache[key] = chunking.scratch_bytes(op, specs, self.kernel_device, images, d, self._on(lane))
        return self._cache[key]

    def _fixed_features(self, k: int, r: int = 0) -> tuple[dict[str, float], list]:
        """The features of k micro-batches that chunking leaves alone, and the convolutions whose calls it
        cuts: [(runs of them, op, specs, batch)]. Per k, since the candidates differ mostly in c and d. (The
        features count whole elements and FLOPs: exact in floats, so summing them apart changes nothing.)
        Recomputation level r adds its recomputing ops, counted as the ops they copy (same shapes), once per
        segment in every micro-batch run: no planning copy of the graph is needed to price it."""
        key = ("fixed features", k, r, self._kept_tag(k))
        if key in self._cache:
            return self._cache[key]
        if r:
            if k > 1:
                self.split(r)  # PlanError where micro-batches do not combine with recomputation (batch statistics)
            f0, convs0 = self._fixed_features(k, 0)
            f, convs = dict(f0), list(convs0)
            specs = self._runs(k)[0].specs
            for seg in self.remat(r).segments:
                for op in seg.ops:
                    cost.count(f, convs, k, op, specs)
            self._cache[key] = f, convs
            return f, convs
        f = dict.fromkeys(cost.FEATURES, 0.0)
        convs: list = []
        counts = self._counts(k)
        runs = self._runs(k)
        passes = self._passes(k)
        # the statistics passes and the micro-batch run, each its count of times (_counts); the update run and the
        # early updates' shares once (their update ops priced whole in each: the launches)
        for times, run in list(zip(list(counts) + [1], runs)) + [(1, run) for _, run, _ in self._share_runs(k)]:
            f["runs"] += times
            ops, specs = set(run.order), run.specs
            feeds = {t for t in specs if t in self.feeds or t.op not in ops}
            for op in run.order:
                if executes(op, feeds) and all(o in specs for o in op.outputs):
                    cost.count(f, convs, times, op, specs)
        if k > 1:
            specs = self._stats_specs() if passes else self.base_specs
            folded = {t: i for i, ts in enumerate(self._kept(k)[1]) for t in ts}
            s = self.split()
            for g in s.grads:  # merged by the run that computes it, over its micro-batches (a sparse one's rows once)
                f["elements"] += (1 if g in s.gathered else counts[folded.get(g, passes)]) * math.prod(specs[g].shape)
            if not passes:  # the micro-batch run's merges: a launch a micro-batch (with passes, counted below)
                f["calls"] += k
            # a gradient added into its momentum slot: the slot scaled once a step, a launch per factor
            folds = self.folds(r)
            f["elements"] += sum(math.prod(specs[g].shape) for g in folds)
            f["calls"] += len({(x.momentum, counts[folded.get(g, passes)]) for g, x in folds.items()})
            rates = self._rates(k) if self._early(k) else []  # copied into their accumulators: one launch
            f["calls"] += bool(rates)
            f["elements"] += sum(math.prod(specs[t].shape) for t in rates)
            for n, level in zip(counts, self._levels(k)):
                f["elements"] += n * sum(math.prod(specs[t].shape) for t in level)
            f["elements"] += sum(math.prod(specs[x.tensor].shape) for x in self._kept(k)[0])  # rows copied in
            if passes:  # gradient values scaled to another run's count (crossbatch.rescales): a launch per factor
                rescale = self._rescale(k)
                f["elements"] += sum(math.prod(specs[v.tensor if isinstance(v, crossbatch.Kept) else v].shape)
                                     for run in rescale for v, _ in run)
                f["calls"] += sum(len({factor for _, factor in run}) for run in rescale)
                # a run's merges, one accumulate launch a micro-batch, and its kept rows' copies, one a micro-batch
                # and tensor; a run on one micro-batch writes them in place (_write_merged)
                spans = self._kept(k)[0]
                f["calls"] += sum(n * (1 + sum(x.writer == i for x in spans)) for i, n in enumerate(counts) if n > 1)
        self._cache[key] = f, convs
        return f, convs

    # -- micro-batching split ----------------------------------------------------------------------------
    def split(self, r: int = 0) -> Split:
        if ("split", r) not in self._cache:
            self._cache["split", r] = _split(self, r)
        s = self._cache["split", r]
        if isinstance(s, PlanError):
            raise PlanError(str(s))  # a fresh one: the cached one must not keep a traceback's frames (cut())
        return s

    def folds(self, r: int = 0) -> dict[Tensor, SlotFold]:
        """The gradients a micro-batched step at recomputation level r adds straight into their momentum slots
        (planner.batch.slot_folds): no accumulators."""
        if self.spread or self.paging is not None:  # a paged slot is on the device only for its update
            return {}
        if ("folds", r) not in self._cache:
            s = self.split(r)
            v = self._stats_view() if self.stats() is not None else self.view(r)
            order = _split_order(self, r)
            specs = self._stats_specs() if self.stats() is not None else self._specs(r)
            self._cache["folds", r] = slot_folds(order, s, v.fetches, specs)
        return self._cache["folds", r]

    def _early(self, k: int) -> dict[Tensor, tuple[int, UpdateGroup]]:
        """The gradients of k micro-batches whose updates run right after the statistics pass that merges them
        (planner.batch.update_groups), with that pass: those whose variable no later run reads (a pass that
        restarts from a gradient kept higher up backprops through the layers between, reading their weights).
        Per choice of kept rows (_kept), which sets what each run computes; their accumulators end there."""
        levels = self._levels(k)
        if k == 1 or not levels or self.spread or self.paging is not None:  # paged: the updates run in packs
            return {}
        key = ("early", k, self._kept(k)[3])
        if key not in self._cache:
            a, folded = len(levels), self._kept(k)[1]
            runs: list[Run] = []
            for i in range(a + 1):  # each of k micro-batches: the same ops as at its count (_counts asks for this)
                runs.append(self._pass_run(k, i, k, runs))
            update = self._update_run(k)
            groups = {} if update is None else \
                update_groups(update.order, self.split(), self._stats_view().fetches, self.folds())
            writer = {t: i for i, f in enumerate(folded[:a]) for t in f}
            reads = [{op.name for op in run.order if op.type == "VariableV2"} for run in runs[:a + 1]]
            self._cache[key] = {g: (writer[g], u) for g, u in groups.items() if g in writer and
                                not any(n in reads[j] for n in u.refs for j in range(writer[g] + 1, a + 1))}
        return self._cache[key]

    def _share_runs(self, k: int) -> list[tuple[int, Run, dict[Operation, tuple[int, ...]]]]:
        """The runs of the early updates (_early) of k micro-batches: per statistics pass that finishes some, (the
        pass, the run of their update ops, {update op: the groups it updates}); fed the update run's feeds, each
        runs its update ops' data inputs alone (planner.batch.data_cone). The first also computes the rates
        (_rates), which the later ones are fed."""
        early = self._early(k)
        if not early:
            return []
        update, rates = self._update_run(k), self._rates(k)
        by_pass: dict[int, dict[Operation, list[int]]] = {}
        for w, u in sorted(early.values(), key=lambda e: (e[0], e[1].update._id, e[1].index)):
            by_pass.setdefault(w, {}).setdefault(u.update, []).append(u.index)
        shapes = {t: update.specs[t].shape for t in update.feeds if t in update.specs}
        fed = shapes | {t: update.specs[t].shape for t in rates}
        out = []
        for j, (w, ops) in enumerate(sorted(by_pass.items())):
            run = self._run(f"update share {w}", list(ops) + rates if j == 0 else list(ops),
                            set(fed if j else shapes), fed if j else shapes, 0, "share", data_only=True)
            out.append((w, run, {op: tuple(js) for op, js in ops.items()}))
        return out

    def _rates(self, k: int) -> list[Tensor]:
        """The inputs of the early updates' ops besides variables, slots and gradients that ops compute (a learning
        rate, a schedule of the global step; a decay): the first share computes them and the later shares and the
        update run are fed them, as the unsplit step's updates all read one value, computed before the global step
        moves (its increment waits for the updates). Constants, variables and feeds are read where they are."""
        early = self._early(k)
        update = self._update_run(k)
        out: list[Tensor] = []
        for op in dict.fromkeys(u.update for _, u in sorted(early.values(), key=lambda e: e[1].update._id)):
            kind = op.attrs["op"] if op.type == "_FusedApply" else op.type
            body, decay = split_decay(list(op.inputs), op.attrs) if op.type == "_FusedApply" else (op.inputs, None)
            at = range(len(APPLY_SCALARS[kind])) if op.type == "_FusedApply" else APPLY_SCALARS[kind]
            for t in [body[i] for i in at] + ([decay] if decay is not None else []):
                if t not in update.feeds and t.op.type not in ("Const", "VariableV2") and t not in out:
                    out.append(t)
        return out

    def _why_not_microbatch(self) -> str | None:
        """Why the step cannot be micro-batched exactly, if it computes batch statistics that the statistics
        passes (planner.crossbatch) do not cover."""
        try:
            if self.stats() is not None:
                return None
        except PlanError as e:
            return str(e).removeprefix("cannot micro-batch: ")
        return self.pairwise() or batch_statistics(self.order, self.feeds, self.batch_feeds(), self.rowed())

    def rowed(self) -> set[Tensor]:
        """The step's tensors with rows of the batch: their shapes follow the batch size (at the batch and at the
        batch over its smallest prime factor); by their static shapes where the other size cannot be planned."""
        if "rowed" not in self._cache:
            batch, out = self.batch_size(), None
            if batch and batch > 1:
                other = batch // next(p for p in range(2, batch + 1) if batch % p == 0)
                try:
                    specs = self._specs_at(other)
                    out = {t for t, sp in self.base_specs.items() if t in specs and specs[t].shape != sp.shape}
                except PlanError:
                    pass
            self._cache["rowed"] = out if out is not None else crossbatch.open_rows(self.order, self.batch_feeds())
        return self._cache["rowed"]

    def stats(self) -> crossbatch.Statistics | None:
        """The planning copy of the step whose batch statistics micro-batches compute in passes
        (planner.crossbatch), None when the step has none; PlanError for one that passes cannot compute."""
        if "stats" not in self._cache:
            value: crossbatch.Statistics | str | None = None
            if crossbatch.fused_norms(self.order) or \
                    crossbatch.statistics(self.order, self.feeds, self.batch_feeds(), self.rowed()):
                try:
                    value = crossbatch.rewrite(self.order, self.feeds, self.fetches, self.batch_feeds(),
                                               self.rowed(), self.base_specs)
                except PlanError as e:
                    value = str(e)  # the message, not the exception (cut())
            self._cache["stats"] = value
        st = self._cache["stats"]
        if isinstance(st, str):
            raise PlanError(st)
        return st

    def _stats_view(self) -> _View:
        """The step in its statistics copy (stats()), the statistics fed at their whole-batch shapes."""
        if "stats view" not in self._cache:
            st = self.stats()
            m = st.tensor_map
            fetches = [m[f] if isinstance(f, Tensor) else st.op_map[f] for f in self.fetches]
            shapes = {m[t]: s for t, s in self.feed_shapes.items()}
            specs = self._run("statistics copy", fetches, set(shapes), shapes).specs
            stats = [t for level in st.levels for t in level]
            shapes.update({t: specs[t].shape for t in stats})
            outer = {t: m[t] for t in list(self.feeds) + [f for f in self.fetches if isinstance(f, Tensor)]}
            self._cache["stats view"] = _View(fetches, set(shapes), shapes, outer, None)
        return self._cache["stats view"]

    def _stats_specs(self) -> dict:
        """Every tensor's spec in the statistics copy of the step at the whole batch, the statistics fed."""
        return self._run("statistics copy", *self._stats_view()[:3]).specs

    def _levels(self, k: int) -> list[list[Tensor]]:
        """The statistics each pass of k micro-batches computes (none for k = 1 or a step without)."""
        st = self.stats() if k > 1 else None
        return st.levels if st else []

    def _passes(self, k: int) -> int:
        return len(self._levels(k))

    def _kept_tag(self, k: int) -> str:
        """The tag of k micro-batches' kept rows (_kept) and runs' counts (_counts): what a budget changes in the
        runs, and in their costs."""
        try:
            tag = self._kept(k)[3] if k > 1 else ""
            counts = self._counts(k) if tag and ("keeping", k, self.budget) not in self._cache else ()
        except PlanError:  # the step does not split: no rows kept
            return ""
        return tag + (f", counts {counts}" if any(n != k for n in counts) else "")

    def _counts(self, k: int) -> tuple[int, ...]:
        """The micro-batch count of each statistics pass and of the micro-batch run of k micro-batches (planner.
        crossbatch): the smallest divisor of the batch, up to k, whose run's own bytes fit beside what is held
        through it (kept rows, the statistics and gradients merged so far) in the room the budget leaves the arena
        (as _kept's) or, where more, in what the largest run of k needs with what it holds (so no run outgrows the
        plan of k's largest; without a budget, that alone): a pass over the deep, narrow layers from kept rows runs
        on the whole batch at once. A run that computes or reads a shape-only value fed
        between runs (_kept) of rows keeps k, which that value may follow (the seed of the gradients, ones of the
        loss's shape, is the same at every count). (k each without passes, or COUNTS off.)"""
        levels = self._levels(k)
        uniform = (k,) * (len(levels) + 1)
        if not levels or not crossbatch.COUNTS or self.map_rows or self.spread:  # (unrolled maps: k rows in every run)
            return uniform
        keeping = ("keeping", k, self.budget) in self._cache  # (the rows first: _kept)
        spans, folded, shaped, tag = self._kept(k)  # while keeping, the rows being tried
        key = ("counts", k, self.budget, tag)  # per choice of rows: _choose_kept prices each
        if key in self._cache or keeping:
            return self._cache.get(key, uniform)
        self._cache[key] = uniform  # while choosing: the runs of k
        if not tag:
            return uniform
        s, specs, runs = self.split(), self._stats_specs(), self._runs(k)[:len(levels) + 1]
        summed = set(s.grads) - set(self.folds())  # the gradients with accumulators
        early = self._early(k)  # their accumulators end with the pass that merges them
        held = [sum(nbytes(specs[x.tensor]) for x in spans if x.writer <= i <= x.last) +
                sum(nbytes(specs[t]) for f in folded[:i + 1] for t in f if t in summed and early.get(t, (i,))[0] >= i) +
                sum(nbytes(specs[t]) for level in levels[:i + 1] for t in level) for i in range(len(runs))]
        own = [self._own(run) for run in runs]
        room = max(b + h for b, h in zip(own, held))
        if self.budget:
            room = max(room, int(KEEP_SHARE * (self.budget - self.parameter_bytes - self.slot_bytes -
                                               self.feed_bytes)))
        st = self.stats()
        rows = [w_first for t, w_first in shaped.items() if any(u in st.rowed for u in t.op.inputs)]
        pinned = {w for w, _ in rows} | {i for _, first in rows for i in range(first, len(runs))}
        counts: list[int] = []
        for i in range(len(runs)):
            n = k
            for d in (d for d in _divisors(self.batch_size()) if d < k and i not in pinned):
                if self._own(self._pass_run(k, i, d, runs)) + held[i] <= room:
                    n = d
                    break
            counts.append(n)
        self._cache[key] = tuple(counts)
        return self._cache[key]

    def _rescale(self, k: int) -> list[list[tuple]]:
        """crossbatch.rescales of k micro-batches' runs at their counts."""
        st, levels, runs, spans = self.stats(), self._levels(k), self._runs(k), self._kept(k)[0]
        reads = [{t for op in run.order for t in op.inputs} for run in runs[:len(levels) + 1]]
        return crossbatch.rescales(list(self._counts(k)), levels, spans,
                                   crossbatch.gradient_values(levels, st.merges, spans, st.uncounted), reads)

    def _kept(self, k: int) -> tuple[list[crossbatch.Kept], list[list[Tensor]], dict, str]:
        """The rows statistics passes of k micro-batches keep whole for later runs, and the micro-batch run's
        merged fetches each run computes (crossbatch.kept), so that no run needs more bytes than the micro-batch
        run alone would (without a budget: the kept rows and accumulators fit beside a run in what the
        micro-batch run, no chunks, and its gradients' accumulators hold live), or first KEEP_SHARE of what the
        budget leaves the arena; where the runs' own bytes leave less, fewer rows are kept, and where even none
        fit, none are. The shape-only outputs fed to later runs; and a tag that tells the runs apart ('' without)."""
        levels = self._levels(k)
        none: tuple = [], [[] for _ in range(len(levels) + 1)], {}, ""
        key = ("kept", k, self.budget, self.price_rows)  # one step may be planned for several budgets (floor_plan)
        if key in self._cache or not levels:
            return self._cache.get(key, none)
        self._cache[key] = none
        self._cache["keeping", k, self.budget] = True  # the runs are of k each until the rows are chosen (_counts)
        try:
            return self._choose_kept(k, key, levels, none)
        finally:
            del self._cache["keeping", k, self.budget]

    def _choose_kept(self, k: int, key: tuple, levels: list, none: tuple) -> tuple:
        st, v, s, specs = self.stats(), self._stats_view(), self.split(), self._stats_specs()
        major = self.major()
        cands = [t for t, step_t in st.keepable.items() if step_t in major]
        if not crossbatch.KEEP or not cands:
            return none
        fold = [t for t in s.a_fetches if isinstance(t, Tensor)]
        runs = [(level, v.feeds - {t for later in levels[i:] for t in later}) for i, level in enumerate(levels)]
        runs.append(([f for f in s.a_fetches if f not in fold], v.feeds))
        size = {t: nbytes(specs[t]) for t in cands + fold}
        every = (*crossbatch.kept(runs, cands, fold, st.rowed, size, [_UNBOUNDED] * len(runs)),
                 f"kept rows, {k} micro-batches, all")
        if self.spread:  # no budget to fit: each worker keeps its slice's rows
            self._cache[key] = every
            return every
        own = [self._own(run) for run in self._runs(k)[:len(runs)]]
        rooms = [own[-1] + sum(nbytes(specs[t]) for t in s.grads)]
        if self.budget:  # first what the budget leaves, less a margin for the arena's placement
            rooms.insert(0, int(KEEP_SHARE * (self.budget - self.parameter_bytes - self.slot_bytes - self.feed_bytes)))
        # The runs' own bytes with every candidate kept: a run that starts from kept rows holds less than one that
        # recomputes them from the fed batch, and sizes taken from the latter keep it recomputing (the micro-batch
        # run, allowed just its accumulators beside its own full forward and backward, kept no rows and recomputed
        # the whole step in every micro-batch). Those first; where their tries do not settle, the bare runs'.
        self._cache[key] = every
        starts = ([min(a, self._own(run)) for a, run in zip(own, self._runs(k))], own)
        for room in rooms:
            # The same room tries the same rows whatever the budget: a search over budgets (floor_plan) tries the
            # room of no budget once.
            reserves = KEPT_RESERVES if self.budget and room == rooms[0] and self.price_rows else (1,)
            if ("kept in", k, room, reserves) in self._cache:
                if self._cache["kept in", k, room, reserves] is None:
                    continue
                self._cache[key] = self._cache["kept in", k, room, reserves]
                return self._cache[key]
            self._cache["kept in", k, room, reserves] = None
            # Rows kept through a run leave it less room, so it may need more micro-batches (_counts): each run's
            # own bytes reserved `reserve` times over (those of fewer micro-batches, about) keeps fewer rows for
            # runs of fewer launches and more recomputation; with a budget, each reserve of KEPT_RESERVES is tried
            # and the rows of the lowest predicted step time kept.
            best: tuple | None = None
            # Each reserve's rows shed in both orders (crossbatch.SEGMENTS): the segment order was the cheaper on
            # MobileNet's H200 plans and the dearer on small cpu ones, and it moves the reserve that is cheapest.
            orders = (False, True) if crossbatch.SEGMENTS and len(reserves) > 1 else (False,)
            for reserve in reserves:
                for segments in orders:
                    choice = self._fit_kept(k, key, runs, cands, fold, size, room, starts, reserve, segments)
                    if choice is None or best is not None and choice[:3] == best[1][:3]:  # (the same rows: priced)
                        continue
                    price = self._kept_price(k, key, choice) if len(reserves) > 1 else 0.0
                    if best is None or price < best[0]:
                        best = (price, choice)
            if best is not None:
                self._cache[key] = self._cache["kept in", k, room, reserves] = best[1]
                return best[1]
        self._cache[key] = none
        return none

    def _fit_kept(self, k: int, key: tuple, runs: list, cands: list, fold: list, size: dict, room: int,
                  starts: tuple, reserve: int, segments: bool = False) -> tuple | None:
        """The rows kept (crossbatch.kept, shedding in its `segments` order or not) so that every run of k fits its
        own bytes and what is held through it in `room`, each run's own bytes counted `reserve` times when the rows
        are chosen; None where the tries do not settle."""
        s = self.split()
        summed = set(s.grads) - set(self.folds())  # the gradients with accumulators
        own = starts[0]
        for attempt in range(8):  # a run's own bytes are known once it is planned (kept rows shrink it): tries
            own = starts[attempt // 4] if attempt % 4 == 0 else own
            spans, folded, shaped = crossbatch.kept(runs, cands, fold, self.stats().rowed, size,
                                                    [room - min(room, reserve * b) for b in own], segments)
            # The tag names the runs (and every cache entry of theirs)
            self._cache[key] = (spans, folded, shaped, f"kept rows, {k} micro-batches, room {room}, reserve "
                                f"{reserve}{', segments' if segments else ''}, {attempt + 1}")
            planned = self._runs(k)[:len(runs)]
            own = [self._own(run) for run in planned]
            early = self._early(k)  # their accumulators end with the pass that merges them
            held = [sum(size[x.tensor] for x in spans if x.writer <= i <= x.last) +
                    sum(size[t] for f in folded[:i + 1] for t in f if t in summed and early.get(t, (i,))[0] >= i) +
                    sum(nbytes(planned[w].specs[t]) + self.alignment for t, (w, _) in shaped.items() if w <= i)
                    for i in range(len(runs))]
            if all(b + h <= room for b, h in zip(own, held)):
                return self._cache[key]
        return None

    def _kept_price(self, k: int, key: tuple, choice: tuple) -> float:
        """The predicted overhead of k micro-batches keeping the rows of `choice` (_fit_kept), its runs' counts
        chosen for them (_counts)."""
        self._cache[key] = choice
        del self._cache["keeping", k, self.budget]
        try:
            return self.overhead(k, 1)
        finally:
            self._cache["keeping", k, self.budget] = True

    def _own(self, run: Run) -> int:
        """The most bytes `run`'s own buffers hold live at once (no chunks, no compaction, whole scratch)."""
        if ("own", run.key) not in self._cache:
            self._cache["own", run.key] = int(self._phase(run, 1, 0).life.live.max())
        return self._cache["own", run.key]

    # -- streamed prefix (planner.stream) -------------------------------------------------------------------
    def batch_feeds(self) -> set[Tensor]:
        """The fed tensors whose open leading dimension is the batch's."""
        return batch_feeds(self.feed_shapes, self.batch_size())

    def major(self) -> set[Tensor]:
        """The tensors whose leading axis is the batch's rows: its length follows the batch size (the step's
        shapes at the batch size and at the batch over its smallest prime factor)."""
        if "major" not in self._cache:
            batch, out = self.batch_size(), set()
            if batch and batch > 1:
                other = batch // next(p for p in range(2, batch + 1) if batch % p == 0)
                try:
                    specs = self._specs_at(other)
                except PlanError:  # e.g. a reshape to a fixed batch: nothing streams
                    specs = {}
                out = {t for t, sp in self.base_specs.items() if sp.shape[:1] == (batch,)
                       and t in specs and specs[t].shape[:1] == (other,)}
            self._cache["major"] = out
        return self._cache["major"]

    def _specs_at(self, rows: int) -> dict:
        """Every tensor's spec in the whole step with `rows` rows of the fed batch."""
        if ("specs at", rows) not in self._cache:
            batch_feeds = self.batch_feeds()
            self._cache["specs at", rows] = static_specs(self.order, {
                t: ((rows,) + s[1:] if t in batch_feeds else s) for t, s in self.feed_shapes.items()})
        return self._cache["specs at", rows]

    def _batch_moved(self, ops) -> Tensor | None:
        """A tensor of `ops` whose shape follows the batch size other than by its leading axis alone (in
        proportion: a reshape of (N, T, C) to (N * T, C) keeps each example's rows together), if any."""
        batch = self.batch_size()
        other = batch // next(p for p in range(2, batch + 1) if batch % p == 0) if batch and batch > 1 else None
        specs = self._specs_at(other) if other else {}
        for op in ops:
            for t in op.outputs if not has_tag(op.type, "shape_only") else ():
                a, b = self.base_specs.get(t), specs.get(t)
                if a is None or b is None or a.shape == b.shape:
                    continue
                if len(a.shape) != len(b.shape) or a.shape[1:] != b.shape[1:] or \
                        a.shape[0] * other != b.shape[0] * batch:
                    return t
        return None

    def pairwise(self) -> str | None:
        """Why micro-batches cannot compute the step, if a tensor of it pairs the batch's examples with each other:
        two of its axes follow the batch size (a distance matrix between the examples, in-batch hard-negative
        mining): each micro-batch would pair only the examples of its own slice. (An op that picks rows of the batch
        by index is refused by its row rule: planner.rows.)"""
        if "pairwise" not in self._cache:
            batch, why = self.batch_size(), None
            if batch and batch > 1:
                other = batch // next(p for p in range(2, batch + 1) if batch % p == 0)
                try:
                    specs = self._specs_at(other)
                except PlanError:
                    specs = {}
                for op in self.order:
                    for t in op.outputs if why is None and not has_tag(op.type, "shape_only") else ():
                        a, b = self.base_specs.get(t), specs.get(t)
                        axes = 0 if a is None or b is None or len(a.shape) != len(b.shape) else \
                            sum(x != y for x, y in zip(a.shape, b.shape))
                        if axes > 1:
                            why = (f"{op.type} '{op.name}' pairs the batch's examples with each other (its output "
                                   f"'{t.name}' of shape {a.shape} has the batch along {axes} axes): each "
                                   "micro-batch would pair only its own slice's")
            self._cache["pairwise"] = why
        return self._cache["pairwise"]

    def cut(self, name: str) -> stream.Cut:
        """The step streamed at the tensor named `name` (planner.stream.find); PlanError if it is no cut."""
        if ("cut", name) not in self._cache:
            try:
                batch = self.batch_size()
                if batch is None:
                    raise PlanError("cannot stream: no fed tensor has an open batch dimension")
                t = self.graph.as_graph_element(name)
                prefix = sorted(needed_ops([t], self.feeds), key=lambda op: op._id)
                # an op that moves, picks or mixes rows (a cumsum over the batch) would do so in each micro-batch
                why = row_rules.why_not(prefix, self.feeds, self.feed_shapes, self.batch_feeds()) or \
                    batch_statistics(prefix, self.feeds, self.batch_feeds(), self.rowed())
                if why:
                    raise PlanError(f"cannot stream the step's prefix up to '{name}': {why}")
                moved = self._batch_moved(needed_ops([t], self.feeds))
                if moved is not None:
                    raise PlanError(f"cannot stream the step's prefix up to '{name}': '{moved.name}' has the "
                                    "batch along another axis than its rows (a transpose): an op over that axis "
                                    "mixes the examples (a softmax over the batch), each micro-batch its own")
                self._cache["cut", name] = stream.find(self.order, self.feeds, self.fetches, self.batch_feeds(),
                                                        self.major(), t, self.clones, self.kept)
            except PlanError as e:
                # NOTE: the message, not the exception: a raised one keeps its traceback's frames alive (the
                # session's fed device arrays among them) for as long as it is cached.
                self._cache["cut", name] = str(e)
        c = self._cache["cut", name]
        if isinstance(c, str):
            raise PlanError(c)
        return c

    def cuts(self) -> list[str]:
        """The cut tensors worth streaming up to: outputs of ops that shrink the rows (pools, a narrower layer)
        below the prefix's largest tensor, at which the step can be cut (planner.stream)."""
        if "cuts" not in self._cache:
            out, major, largest = [], self.major(), 0
            for op in self.order:
                rows = [self.base_specs[t] for t in op.inputs if t in major]
                for t in op.outputs:
                    if t not in major or phase_of(op) != "forward":
                        continue
                    size = nbytes(self.base_specs[t])
                    if rows and size < max(nbytes(sp) for sp in rows) and size < largest:
                        try:
                            self.cut(t.name)
                            out.append(t.name)
                        except PlanError:
                            pass
                    largest = max(largest, size)
            self._cache["cuts"] = out
        return self._cache["cuts"]

    def lanes(self, name: str, k: int) -> int:
        """How many lanes the prefix up to `name` may run its k micro-batches in at once: on the cpu, one per
        thread kernels split their work for (each lane's kernels then run on one thread); elsewhere, or when the
        prefix draws random numbers (lanes would draw them in a varying order), one."""
        if self.kernel_device != "cpu":
            return 1
        if any(op.op_def.stateful and op.type != "VariableV2" for op in self.cut(name).prefix):
            return 1
        return min(self.threads or 1, k)

    def rounds(self, name: str, k: int, d: int) -> list[int]:
        """The balancing rounds (_balanced) worth trying for the prefix up to `name` in k micro-batches in lanes
        under scratch divisor d: those that divide one more convolution's scratch than the round before."""
        run = self._stream_runs(name, k)[0]
        out = [0]
        for b in range(1, BALANCE_ROUNDS + 1):
            if self._balanced(run, d, b) == self._balanced(run, d, b - 1):
                break
            out.append(b)
        return out

    def _balanced(self, run: Run, d: int, rounds: int) -> dict[Operation, int]:
        """Scratch divisors of their own for some convolutions of `run`, on one thread (a lane's), after `rounds`
        rounds: each round, the op that needs the most bytes while it runs (its inputs, outputs and scratch:
        where the run peaks), if a convolution, gets the next larger divisor that shrinks its scratch."""
        key = ("balanced", run.key, d, rounds)
        if key not in self._cache:
            own = dict(self._balanced(run, d, rounds - 1)) if rounds else {}
            top = max(self._needs(run, d, own, lane=True).items(), key=lambda kv: kv[1])[0] if rounds else None
            if top is not None and top.type in chunking.CHUNKABLE:
                now = max(own.get(top, d), top.attrs.get(SCRATCH_ATTR, 1))
                images = run.specs[top.inputs[chunking.CHUNKABLE[top.type][0][0]]].shape[0]
                scratch = self._scratch_bytes(top, images, now, lane=True)
                own[top] = next((x for x in chunking.SCRATCH_DIVISORS
                                 if x > now and self._scratch_bytes(top, images, x, lane=True) < scratch),
                                own.get(top, d))
            self._cache[key] = {op: v for op, v in own.items() if v != d}
        return self._cache[key]

    def _spread(self, name: str, k: int, z: bool, d: int, rounds: int) -> dict[Operation, int]:
        """Scratch divisors of their own for some convolutions of the step streamed at `name` in k micro-batches in
        one lane, after `rounds` rounds: each round, of the run that needs the most bytes at one op (with the cut's
        and the kept tensors' full-batch buffers beside it), the op that needs the most, if a convolution, gets the
        next larger divisor that shrinks its scratch. On opencl the filter gradients' split sums grow with the
        compute units (8.6 MB for Mentee's conv5 at batch 128 on 132): dividing those of the one or two where the
        step peaks costs less time than a divisor on every convolution."""
        if not rounds:
            return {}
        key = ("spread", name, k, bool(z), d, rounds)
        if key not in self._cache:
            own = dict(self._spread(name, k, z, d, rounds - 1))
            p = self._build_stream(name, k, z, d, 1, rounds - 1)
            t = int(np.argmax(p.live))
            i = next(i for i, ph in enumerate(p.phases) if ph.start <= t < ph.start + ph.life.steps)
            convs = [b for b in p.phases[i].life.buffers if b.kind == "workspace" and b.start <= t <= b.end
                     and b.op.type in chunking.CHUNKABLE]
            if convs:
                top, run = max(convs, key=lambda b: b.size).op, self._stream_runs(name, k)[i]
                now = own.get(top, d)
                scratch = self._op_scratch(top, run, now)
                own[top] = next((x for x in chunking.SCRATCH_DIVISORS
                                 if x > now and self._op_scratch(top, run, x) < scratch), now)
            self._cache[key] = {op: v for op, v in own.items() if v != d}
        return self._cache[key]

    def _op_scratch(self, op: Operation, run: Run, d: int) -> int:
        """The bytes of scratch `op` declares in `run` under scratch divisor d."""
        return sum(math.prod(sh) * dt.size for sh, dt in declared_workspaces(
            op, run.specs, self.kernel_device, 1, d, self.compute_units, self.threads))

    def spread_rounds(self, name: str, k: int, z: bool, d: int) -> list[int]:
        """The rounds of _spread worth trying: those that divide one more convolution's scratch than the round
        before, up to SPREAD_ROUNDS."""
        out = []
        for b in range(1, SPREAD_ROUNDS + 1):
            if self._spread(name, k, z, d, b) == self._spread(name, k, z, d, b - 1):
                break
            out.append(b)
        return out

    def _needs(self, run: Run, d: int, own: dict | None = None, z: bool = False, c: int = 1, lane: bool = False,
               sites=()) -> dict:
        """planner.runs.run_needs of `run` under (z, c, d), some ops with scratch divisors of their own (`own`), the
        gradients of accumulate `sites` with their pieces in place of their buffers."""
        bufs, ws = self._accumulating(run, self._buffers(run, z), self._workspaces(run, c, d, own, lane)[1], sites)
        return run_needs(run, bufs, ws, self.kernel_device)

    def _stream_runs(self, name: str, k: int) -> list[Run]:
        """The runs of the step streamed at `name` in k micro-batches: prefix (rows), rest (full batch), and
        when the prefix has a backward pass, prefix backward (rows) and update (planner.stream)."""
        key = ("stream runs", name, k)
        if key not in self._cache:
            cut = self.cut(name)
            rows = self.batch_size() // k
            parts = [("prefix", [cut.tensor, *cut.saved], cut.prefix_feeds, rows, frozenset()),
                     ("rest", cut.rest_fetches, cut.rest_feeds, 0, cut.done[0])]
            if cut.backward:
                parts += [("prefix backward", cut.partials + cut.backward_waits, cut.backward_feeds, rows, cut.done[1]),
                          ("update", cut.update_fetches, cut.update_feeds, 0, cut.done[2])]
            runs = []
            for tag, fetches, feeds, m, done in parts:
                if ("stream graph", name, tag) not in self._cache:
                    g = dependency_graph(needed_ops(fetches, feeds, done), feeds)
                    if tag == "rest" and cut.saved:
                        # The updates' inputs wait in the rest for the prefix backward: a dense layer's weight
                        # gradient made last there is not live beside block 2's backward (on the keeping copy,
                        # whose rest is what a budget near the plain step's peak has room for).
                        _late_gradients(g, cut.rest_fetches, self.base_specs)
                    order = creation_order(g)
                    self._cache["stream graph", name, tag] = g, order, input_roots(order, feeds)
                g, order, roots = self._cache["stream graph", name, tag]
                specs = self._specs_at(m) if m else self.base_specs
                runs.append(Run((tag, name, m), g, order, specs, roots, list(fetches), set(feeds)))
            self._cache[key] = runs
        return self._cache[key]

    def _stream_features(self, name: str, k: int, lanes: int = 1) -> tuple[dict[str, float], list]:
        """_fixed_features of the step streamed at `name` in k micro-batches: its runs (the per-row ones k
        times), the copies of the cut's rows and the sums of the prefix's weight gradients. In lanes, the prefix
        run's calls count 1 / lanes each (their FLOPs and elements in full): a lane's calls (their dispatch, the
        GIL hand-offs that a call's small tasks cost the threads of one call) run beside the other lanes' (a
        Mentee prefix of 8-image micro-batches on 2 threads: 4% faster than the same layers at full batch)."""
        key = ("stream features", name, k, lanes)
        if key not in self._cache:
            f = dict.fromkeys(cost.FEATURES, 0.0)
            convs: list = []
            for i, (times, run) in enumerate(zip((k, 1, k, 1), self._stream_runs(name, k))):
                f["runs"] += times
                g, run_convs = dict.fromkeys(f, 0.0), []
                for op in run.order:
                    if executes(op, run.feeds):
                        cost.count(g, run_convs, times, op, run.specs)
                share = lanes if i == 0 else 1  # the lanes' calls run side by side; their FLOPs still add up
                for feature, v in g.items():
                    f[feature] += v if feature in ("flops", "elements") else v / share
                where = ("lane" if share > 1 else "prefix",) if i == 0 else ()
                convs += [(n / share, *rest, *where) for n, *rest in run_convs]
            cut = self.cut(name)
            whole = [cut.tensor, *cut.saved]  # rows copied into full-batch buffers
            # each micro-batch's weight gradients merged in one launch (the arena's, engine.replay.Merges): the
            # H200's Mentee prefix to pool2 in 4 launched 4, where a call each priced 32 (BENCHMARKS.md, "Mentee
            # under 32 and 24 MB on the H200: launches and passes")
            f["calls"] += k * (len(whole) + bool(cut.partials))
            f["elements"] += sum(math.prod(self.base_specs[t].shape) for t in cut.partials) * k + \
                sum(math.prod(self.base_specs[t].shape) for t in whole)
            self._cache[key] = f, convs
        return self._cache[key]

    def _build_stream(self, name: str, k: int, z: bool, d: int, lanes: int = 1, rounds: int = 0) -> MemoryPlan:
        """The plan of the step streamed at `name` in k micro-batches (planner.stream), with compact saved state
        if z and the conv kernels' scratch divided by d. The cut's full-batch buffer lives from the first prefix
        run to the end of the rest run, the summed weight gradients through the prefix backward and update runs,
        and what the rest run hands on (boundary gradients, the updates' other inputs, fetched values) to the end
        of the step. In lanes, the prefix run's buffers (their workspaces declared for one thread, some convs'
        scratch divided further by `rounds` of _balanced) are placed within one lane's copy, and the copies, one
        per lane, in one block live through the prefix run."""
        cut = self.cut(name)
        batch = self.batch_size()
        if batch % k:
            raise PlanError(f"cannot stream in {k} micro-batches: the batch of {batch} does not divide")
        if lanes > self.lanes(name, k):
            raise PlanError(f"cannot stream in {lanes} lanes: at most {self.lanes(name, k)} here")
        phases, start = [], 0
        spread = self._spread(name, k, z, d, rounds) if lanes == 1 else None
        for i, run in enumerate(self._stream_runs(name, k)):
            laned = i == 0 and lanes > 1
            own = self._balanced(run, d, rounds) if laned else spread
            phases.append(self._phase(run, 1, start, z, d, own, laned))
            start += phases[-1].life.steps
        end = start - 1
        rest = phases[1]
        spec = self.base_specs[cut.tensor]
        acc = {cut.tensor: acc_buffer(cut.tensor, spec.shape, spec.dtype, rest.start + rest.life.steps - 1,
                                       self.alignment)}
        for t in cut.saved:  # from the first prefix run to the last prefix backward run
            back = phases[2]
            acc[t] = acc_buffer(t, self.base_specs[t].shape, self.base_specs[t].dtype,
                                back.start + back.life.steps - 1, self.alignment)
        for t in cut.partials:
            b = acc[t] = acc_buffer(t, self.base_specs[t].shape, self.base_specs[t].dtype, end, self.alignment)
            b.start = phases[2].start
        for t in cut.kept:
            b = rest.life.of_tensor.get(alias_root(t, rest.feeds))
            if b is not None:
                b.end = end
        block, offsets = None, {}
        if lanes > 1:
            first = phases[0]
            size = assign_offsets(first.life.buffers)
            offsets = {b: b.offset for b in first.life.buffers}
            block = Buffer(f"{name}/lanes", lanes * size, lanes * size, first.start,
                           first.start + first.life.steps - 1, "forward")
        bufs = [b for ph in phases for b in ph.life.buffers if b not in offsets] + list(acc.values()) + \
            ([block] if block else [])
        live = np.zeros(start + 1, np.int64)
        for b in bufs:
            live[b.start] += b.size
            live[b.end + 1] -= b.size
        p = MemoryPlan(self.device, self.alignment, phases, 0, np.cumsum(live[:start]), self.parameter_bytes,
                       self.slot_bytes, self.feed_bytes, batch_size=batch, accumulators=acc,
                       feed_shapes=dict(self.feed_shapes), stream=cut, stream_microbatches=k, scratch_divisor=d,
                       stream_lanes=lanes, lane_block=block, lane_offsets=offsets)
        s = Prefix(name, k, lanes, rounds)
        p.transformations = self._describe(p, 1, 1, z, d, 0, s)
        p.predicted_overhead = self.overhead(1, 1, z, d, 0, s)
        return p

    # -- building one plan ----------------------------------------------------------------------------------
    def build(self, k: int, c: int, z: bool = False, d: int = 1, r: int = 0, s: Prefix | None = None,
              a: bool = False, place: bool = True) -> MemoryPlan:
        """The plan of Candidate(k, c, z, d, r, s, a): k micro-batches, convolutions in c batch chunks, compact
        saved state if z, the conv kernels' scratch budget divided by d, recomputation level r, the prefix
        streamed as Prefix s says (planner.stream), and with `a` the micro-batches' gradients added into their
        accumulators where they are made (planner.accumulate); without `place`, only the lifetimes (arena_bytes
        stays 0 until `place(plan)`)."""
        s = _prefix(s)
        if self.map_rows and (s or k != self.least_microbatches):
            raise PlanError(f"the step's maps of the batch's rows are unrolled for micro-batches of {self.map_rows} "
                            f"rows (planner.maps): it runs in {self.least_microbatches} micro-batches only")
        if a and k == 1:
            raise PlanError("gradients are accumulated where they are made only over micro-batches (k > 1)")
        if s:
            if (k, c) != (1, 1):
                raise PlanError("a streamed prefix combines with compact saved state, a scratch divisor and "
                                "recomputation only")
            if r or s.keep:
                return self._build_recomputed_stream(z, d, r, s, place)
            p = self._build_stream(s.cut, s.microbatches, z, d, s.lanes, s.rounds)
            if place:
                globals()["place"](p)
            return p
        runs = self._runs(k, r)
        levels = self._levels(k)
        sites = self._accumulated(k, r) if a else []
        shares = self._share_runs(k) if r == 0 else []
        phases: list[Phase] = []
        share_phases: list[Phase] = []
        ran: list[Phase] = []  # the phases in the order they run: each share after its pass
        for i, run in enumerate(runs):  # the statistics passes and the micro-batch run: c, z, d; the update: none
            start = sum(ph.life.steps for ph in ran)
            phases.append(self._phase(run, c, start, z, d, sites=sites if i == len(levels) else ())
                          if i <= len(levels) else self._phase(run, 1, start))
            ran.append(phases[-1])
            for w, share, _ in shares:
                if w == i:
                    share_phases.append(self._phase(share, 1, start + phases[-1].life.steps))
                    ran.append(share_phases[-1])
        phases += share_phases
        mb = phases[len(levels)]  # the micro-batch run
        acc, merge, kept = {}, {}, {}
        counts = self._counts(k)
        written: set[tuple[int, Tensor]] = set()
        if k > 1:
            s = self.split(r)
            batch = self.batch_size()
            end = sum(ph.life.steps for ph in phases) - 1
            # a merged fetch from the run that computes it (a statistics pass, with kept rows: crossbatch.kept)
            where = {t: ph for ph in phases[:len(levels) + 1] for t in ph.fetches if isinstance(t, Tensor)}
            count = {t: n for ph, n in zip(phases, counts) for t in ph.fetches if isinstance(t, Tensor)}
            whole = self._stats_specs() if levels else self._specs(r)
            folds = self.folds(r)
            early = self._early(k) if shares else {}
            ends = {w: ph.start + ph.life.steps - 1 for (w, _, _), ph in zip(shares, share_phases)}
            for t in s.grads:  # a sparse gradient's rows: the whole batch's, each micro-batch writes its own
                if t in folds:  # added into its momentum slot
                    continue
                shape = (whole if t in s.gathered else where[t].specs)[t].shape
                # an early update's gradient: to its share's end (_early)
                acc[t] = acc_buffer(t, shape, where[t].specs[t].dtype, ends[early[t][0]] if t in early else end,
                                    self.alignment)
                acc[t].start = where[t].start
            for t in self._rates(k) if shares else ():  # from the first share to the update run
                spec = share_phases[0].specs[t]
                acc[t] = acc_buffer(t, spec.shape, spec.dtype, end, self.alignment)
                acc[t].start = share_phases[0].start
            merge.update(s.gathered)
            merge.update((t, "sum") for t in s.grads if s.merges.get(t) == "sum")  # a tf.metrics total
            for x, _ in mb.accumulated.values():  # written by its op: its view in the run is the accumulator's
                mb.life.of_tensor[x.grad] = acc[x.grad]
            for ph, level in zip(phases, levels):  # a statistic from its pass to the update run that may read it
                for t in level:
                    acc[t] = acc_buffer(t, ph.specs[t].shape, ph.specs[t].dtype, end, self.alignment)
                    acc[t].start = ph.start
            for t, (w, _) in self._kept(k)[2].items():  # a shape-only output fed to later runs, from its writer's
                acc[t] = acc_buffer(t, phases[w].specs[t].shape, phases[w].specs[t].dtype, end, self.alignment)
                acc[t].start = phases[w].start
                merge[t] = "last"
            for x in self._kept(k)[0]:  # kept rows: from the pass that writes them to the last reader's end
                spec = self._stats_specs()[x.tensor]
                kept[x] = acc_buffer(x.tensor, spec.shape, spec.dtype,
                                     phases[x.last].start + phases[x.last].life.steps - 1, self.alignment)
                kept[x].start = phases[x.writer].start
            for t in s.user_fetches:
                spec = where[t].specs[t]
                try:
                    merge[t] = fetch_merge(t, spec.shape, s.batch_dep, batch // count[t], s.merges.get(t))
                except PlanError as e:
                    raise PlanError(f"cannot micro-batch: {e}") from None
                if merge[t] == "concat" and phase_of(t.op) == "backward":  # a fetched gradient's rows: k times
                    merge[t] = "concat_mean"                                # the step's, as the summed ones are
                shape = (batch,) + spec.shape[1:] if merge[t] in ("concat", "concat_mean") else spec.shape
                if t not in acc:
                    acc[t] = acc_buffer(t, shape, spec.dtype, end, self.alignment)
                    acc[t].start = where[t].start
            for i, ph in enumerate(phases[:len(levels) + 1]):
                if counts[i] == 1:
                    into = {t: acc[t] for t in ph.fetches if isinstance(t, Tensor) and t in acc and where[t] is ph}
                    into |= {x.tensor: kept[x] for x in kept if x.writer == i}
                    written |= {(i, t) for t in _write_merged(ph, into)}
        live = np.concatenate([ph.life.live for ph in ran])
        for b in list(acc.values()) + list(kept.values()):
            live[b.start:b.end + 1] += b.size
        # A micro-batch's rows of a fed batch are a view of it on every device (opencl: an offset): no slot.
        v = self._stats_view() if levels else self.view(r)
        merge.update({t: self.stats().merges[t] for level in levels for t in level})
        p = MemoryPlan(self.device, self.alignment, phases, 0, live, self.parameter_bytes, self.slot_bytes,
                       self.feed_bytes, microbatches=k, accumulators=acc, fetch_merge=merge,
                       feed_shapes=dict(self.feed_shapes), tensor_map=v.outer,
                       recomputed=[t.name for t in v.remat.tensors] if v.remat else [], statistics=levels,
                       kept=kept, run_microbatches=list(counts) if levels else [], written=written,
                       rescale=self._rescale(k) if levels else [], slot_folds=self.folds(r) if k > 1 else {},
                       shares=[Share(w, len(runs) + j, groups) for j, (w, _, groups) in enumerate(shares)])
        if place:
            globals()["place"](p)
        if k > 1:
            p.batch_size, p.batch_feeds = self.batch_size(), list(self.split(r).batch_feeds)
        p.chunks = {op: n for ph in phases for op, n in ph.life.chunks.items()}
        p.scratch_divisor = d
        why = self._why_not_microbatch()
        p.notes = [f"micro-batching not applied: {why}"] if why else []
        if self.map_rows:
            p.notes.append(f"its maps of the batch's rows (tf.map_fn) are unrolled for micro-batches of "
                           f"{self.map_rows} rows: planned in {k} micro-batches only (planner.maps)")
        p.transformations = self._describe(p, k, c, z, d, r)
        p.predicted_overhead = self.overhead(k, c, z, d, r, None, bool(sites))
        return p

    def _describe(self, p: MemoryPlan, k: int, c: int, z: bool = False, d: int = 1, r: int = 0,
                  s: Prefix | None = None) -> list[dict]:
        out = []
        for ph in p.phases:
            if ph.schedule != "creation order":
                out.append({"name": "schedule", "detail": f"memory-aware order for the {ph.name} run (bound "
                            f"{format_size(ph.life.lower_bound)}, {format_size(ph.creation_order_bound)} in "
                            "creation order)", "predicted_overhead": 0.0})
        merged = sum(ph.life.inplace for ph in p.phases)
        if merged:
            out.append({"name": "inplace", "detail": f"{merged} elementwise ops write over an input that "
                        "dies there", "predicted_overhead": 0.0})
        sites = [(ph, site) for ph in p.phases for site in ph.sites]
        if sites:
            saved = sum(nbytes(ph.specs[site.pool.inputs[0]]) for ph, site in sites)
            out.append({"name": "compact", "detail": f"{len(sites)} ReLU -> max-pool pairs keep a uint8 argmax "
                        f"per window for backward instead of the ReLU output ({format_size(saved)} of "
                        "activations not saved per run; exact)",
                        "predicted_overhead": round(self.overhead(1, 1, True), 4)})
        if r:
            sol = self.remat(r)
            out.append({"name": "recompute", "detail": self._describe_remat(r),
                        "predicted_overhead": round(self.overhead(1, 1, False, 1, r), 4), "solver": sol.solver,
                        "checkpoints": [t.name for t in sol.checkpoints],
                        "recomputed": [t.name for t in sol.tensors]})
        if s:
            out.append(self._describe_stream(p, s))
        if d > 1:
            parts = k * c * (s.microbatches if s else 1)
            lane = bool(s) and s.lanes > 1  # a lane's kernels: one thread
            before, after = self._conv_scratch(parts, lane=lane), self._conv_scratch(parts, d, lane)
            out.append({"name": "scratch", "detail": f"convolution kernels work through their batch in pieces "
                        f"1/{d} the usual size (scratch {format_size(before)} -> {format_size(after)} per call; "
                        "exact)",
                        "predicted_overhead": round(self.overhead(k, c, False, d, 0, s) -
                                                    self.overhead(k, c, False, 1, 0, s), 4)})
        if p.chunks:
            out.append({"name": "chunk", "detail": f"{len(p.chunks)} convolution kernels called on 1/{c} of "
                        "the batch at a time (im2col/col2im scratch shrinks accordingly)",
                        "predicted_overhead": round(self.overhead(1, c), 4)})
        if k > 1:
            detail = (f"{k} micro-batches of {self.batch_size() // k}: forward and backward per micro-batch, "
                      "gradients averaged, updates applied once (exact for losses that are means over the batch)")
            sparse = sum(w == "concat" for w in self.split(r).gathered.values())
            if sparse:  # an embedding's IndexedSlices: its rows are the micro-batches', not a sum of them
                detail += (f"; {sparse} sparse gradient{'s' * (sparse > 1)}: rows and indices concatenated into "
                           "whole-batch accumulators")
            if p.slot_folds:
                saved = sum(nbytes(ph.specs[g]) for ph in p.phases for g in ph.fetches if g in p.slot_folds)
                detail += (f"; {len(p.slot_folds)} weight gradients ({format_size(saved)}) added straight into their "
                           "momentum slots, no accumulators (planner.batch.slot_folds; exact up to summation order)")
            if p.shares:
                early = self._early(k)
                freed = sum(p.accumulators[g].size for g in early if g in p.accumulators)
                detail += (f"; {len(early)} variables updated right after the statistics pass that finishes their "
                           f"gradients ({len(p.shares)} shares of their update ops), their accumulators "
                           f"({format_size(freed)}) ending there (planner.batch.update_groups)")
            if p.statistics:
                st = self.stats()
                n = sum(st.merges[t] != "last" for level in p.statistics for t in level)
                norms = f"the per-channel means of {len(st.norms)} training-mode batch norms" if st.norms else ""
                by_hand = f"{st.by_hand} sums or means over the batch written by hand" if st.by_hand else ""
                detail += (f"; first {len(p.statistics)} statistics passes over the micro-batches compute the step's "
                           f"{n} batch statistics ({' and '.join(x for x in (norms, by_hand) if x)}) in micro-batch "
                           "order, each pass rerunning the step up to its statistics with the ones below fed, so "
                           "that rows are computed from the whole batch's and moving averages update once (exact "
                           "up to summation order)")
                if p.kept:
                    folded = sum(f in p.accumulators and f not in level
                                 for ph, level in zip(p.phases, p.statistics) for f in ph.fetches)
                    detail += (f"; {len(p.kept)} times the passes keep rows whole (a norm's input, a norm "
                               f"gradient's dy; {format_size(sum(b.size for b in p.kept.values()))} in all) so that "
                               f"later passes start from them, and they compute {folded} of the gradients and "
                               "fetches, so the micro-batch run reruns only what no pass computed "
                               "(planner.crossbatch.kept)")
                counts = p.run_microbatches
                if len(set(counts)) > 1:
                    runs = ", ".join(f"{counts.count(n)} in {n}" for n in sorted(set(counts)))
                    rescaled = sum(len(r) for r in p.rescale)
                    detail += (f"; each run on the fewest micro-batches whose run fits the room ({runs}; the passes "
                               f"from kept rows of the deep layers on the whole batch at once), {rescaled} gradient "
                               "values scaled where a run of another count reads them (planner.crossbatch.counts)")
            out.append({"name": "microbatch", "detail": detail,
                        "predicted_overhead": round(self.overhead(k, 1), 4)})
        sites = [x for ph in p.phases for x in ph.accumulated.values()]
        if sites:
            saved = sum(p.accumulators[x.grad].nbytes for x, _ in sites)
            added = sum(x.variant for x, _ in sites)
            out.append({"name": "accumulate", "detail": f"{len(sites)} weight gradients ({format_size(saved)}) written "
                        "into their accumulators where they are made, not held to the end of the micro-batch run: on "
                        f"later micro-batches {added} added in by their kernels through pieces of their rows, "
                        f"{len(sites) - added} made in a workspace and added at once; exact",
                        "predicted_overhead": round(self.overhead(k, c, z, d, r, None, True) -
                                                    self.overhead(k, c, z, d, r), 4)})
        return out

    def _describe_remat(self, r: int) -> str:
        sol = self.remat(r)
        dropped = sol.tensors
        saved = format_size(sum(nbytes(self.base_specs[t]) for t in dropped))
        ops = sum(len(seg.ops) for seg in sol.segments)
        if not sol.checkpoints:
            return (f"{len(dropped)} activations dropped after their forward use and recomputed before each backward "
                    f"reader ({', '.join(t.name for t in dropped)}: {saved} per run not kept across the step; {ops} "
                    "ops rerun; exact)")
        forward = [op for op in self.order if phase_of(op) == "forward" and executes(op, self.feeds)]
        fwd_flops = sum(cost.matmul_flops(op, self.base_specs) for op in forward)
        flops = sum(cost.matmul_flops(op, self.base_specs) for seg in sol.segments for op in seg.ops)
        names = [t.name for t in sol.checkpoints]
        shown = ", ".join(names[:8]) + (f", ... ({len(names) - 8} more)" if len(names) > 8 else "")
        return (f"segment checkpointing, chosen by {sol.solver}: {len(names)} checkpoints kept ({shown}); "
                f"{len(dropped)} activations ({saved} per run) dropped after their forward use and recomputed by "
                f"{len(sol.segments)} segments of the forward just before their backward ({ops} ops rerun, "
                f"{flops / 1e9:.3g} GFLOP, {flops / max(fwd_flops, 1):.0%} of the forward's GEMM FLOPs); exact")

    def _describe_stream(self, p: MemoryPlan, s: Prefix) -> dict:
        name, k, lanes = s.cut, s.microbatches, s.lanes
        cut = self.cut(name)
        m = self.batch_size() // k
        prefix = sorted(cut.prefix, key=lambda op: op._id)
        calls = sum(executes(op, self.feeds) for op in prefix)
        text = (f"the first {calls} ops (up to '{name}') run in {k} micro-batches of {m}, their output's rows copied "
                f"into a full-batch buffer ({format_size(nbytes(self.base_specs[cut.tensor]))}); the rest of the "
                "step runs once at full batch")
        if cut.backward:
            grads = ", ".join(t.name for t in cut.boundary)
            again = "recomputed" if not cut.saved else \
                f"recomputed as far as needed beside the kept rows of {', '.join(t.name for t in cut.saved)}"
            text += (f" down to the boundary gradient ({grads}); then per micro-batch the prefix's forward is "
                     f"{again} and its {len(cut.backward)} backward ops read that gradient's rows, their "
                     f"{len(cut.partials)} weight-gradient sums added up over the micro-batches; updates "
                     "applied once")
        else:
            text += " (the prefix trains nothing: no backward pass below the cut)"
        if lanes > 1:
            text += (f"; the prefix's micro-batches run in {lanes} lanes at once, each on one thread and its own "
                     f"copy of the prefix's buffers ({format_size(p.lane_bytes)})")
            own = p.phases[0].life.scratch_ops
            if own:
                text += " where " + ", ".join(f"{op.name} divides its scratch by {v}" for op, v in own.items())
        return {"name": "stream", "detail": text + "; exact up to summation order",
                "predicted_overhead": round(self.overhead(1, 1, False, 1, 0, s), 4)}

    def _runs(self, k: int, r: int = 0) -> list[Run]:
        """The executor runs of a step in k micro-batches at recomputation level r: the step; or the
        micro-batch run and the update run (when there are fetches after the updates)."""
        tag = self._kept_tag(k)
        if ("runs", k, r, tag) not in self._cache:
            self._cache["runs", k, r, tag] = self._make_runs(k, r)
        return self._cache["runs", k, r, tag]

    def _make_runs(self, k: int, r: int) -> list[Run]:
        v = self.view(r)
        if k == 1:
            return [self._run("step", v.fetches, v.feeds, v.feed_shapes, r)]
        runs: list[Run] = []
        for i, n in enumerate(self._counts(k)):  # the statistics passes (planner.crossbatch), the micro-batch run
            runs.append(self._pass_run(k, i, n, runs, r))
        update = self._update_run(k, r, self._rates(k) if r == 0 and self._early(k) else [])
        return runs + [update] if update is not None else runs

    def _update_run(self, k: int, r: int = 0, rates: list[Tensor] = ()) -> Run | None:
        """The update run of k > 1 micro-batches (None where no fetch comes after the updates): fed the merged
        gradients and the step's feeds without rows, and with early updates their `rates` (_rates)."""
        s, levels = self.split(r), self._levels(k)
        if not s.b_fetches:
            return None
        v = self._stats_view() if levels else self.view(r)
        specs = self._stats_specs() if levels else self._specs(r)
        b_shapes = {t: specs[t].shape for t in s.grads}
        b_shapes.update({t: sh for t, sh in v.feed_shapes.items() if t not in s.batch_feeds})
        if rates:
            plain = self._update_run(k, r)
            b_shapes.update({t: plain.specs[t].shape for t in rates})
        return self._run("update", s.b_fetches, set(b_shapes), b_shapes, r, "rates fed" if rates else "", done=s.done)

    def _pass_run(self, k: int, i: int, n: int, runs: list[Run], r: int = 0) -> Run:
        """Statistics pass i of k micro-batches (i = the number of passes: the micro-batch run) on n micro-batches
        (_counts), `runs` the runs before it."""
        s, levels, (spans, folded, shaped, tag) = self.split(r), self._levels(k), self._kept(k)
        v = self._stats_view() if levels else self.view(r)
        level = (levels + [[]])[i]
        feeds = v.feeds - {t for later in levels[i:] for t in later}
        shapes = slice_shapes(v.feed_shapes, s.batch_feeds, n)
        reads = {x.tensor for x in spans if x.writer < i <= x.last}
        writes = [x.tensor for x in spans if x.writer == i] + [t for t, (w, _) in shaped.items() if w == i]
        sh = {t: shapes[t] for t in feeds} | {t: _rows(self._stats_specs()[t].shape, n) for t in reads}
        sh |= {t: runs[w].specs[t].shape for t, (w, first) in shaped.items() if first <= i}
        reads |= {t for t, (_, first) in shaped.items() if first <= i}
        fetches = level + writes + folded[i] if tag else level
        if i == len(levels):  # less what the passes computed (crossbatch.kept)
            name = "micro-batch"
            passes = {t for f in folded[:-1] for t in f}
            fetches = [f for f in s.a_fetches if f not in passes]
        else:
            name = f"statistics pass {i + 1}"
        return self._run(name, fetches, feeds | reads, sh, r, tag)

    def _run(self, name, fetches, feeds, feed_shapes, r: int = 0, variant: str = "", data_only: bool = False,
             done: frozenset = frozenset()) -> Run:
        """One executor run of the step (name: 'step', 'micro-batch' or 'update') for these feed shapes, at
        recomputation level r; `variant` tells runs of one name with other fetches and feeds apart. A variant's
        run is one Run with every other run of that name of the same fetches and feeds (kept rows' tries, and the
        budgets a floor's search plans, leave most passes as they were): its graph, lifetimes and buffers are
        computed once. `data_only`: the ops `fetches` read through data inputs alone (an early update's share,
        whose control inputs run in the update run); `done`: ops an earlier run ran, whose waiting ops do not run them
        again (the update run's: Split.done)."""
        content = (name, r, tuple(fetches), frozenset(feeds))
        if not variant:  # NOTE: runs of one name and no variant share its first graph, as they always did
            self._contents.setdefault(content, "")
        else:
            variant = self._contents.setdefault(content, len(self._contents))
        if ("graph", name, r, variant) not in self._cache:  # the same for every feed shape (the micro-batch runs of
            ops = data_cone(fetches, feeds) if data_only else needed_ops(fetches, feeds, done)  # all k)
            g = dependency_graph(ops, feeds)
            if name == "micro-batch" and self.kernel_device != "cpu":  # (the cpu writes them into accumulators:
                _late_gradients(g, fetches, self._specs(r))            # planner.accumulate)
            order = creation_order(g)
            self._cache["graph", name, r, variant] = g, order, input_roots(order, feeds)
        key = (name, tuple(sorted(s for s in feed_shapes.values())), r) + ((variant,) if variant != "" else ())
        if key not in self._cache:
            g, order, roots = self._cache["graph", name, r, variant]
            self._cache[key] = Run(key, g, order, static_specs(order, feed_shapes), roots, list(fetches),
                                    set(feeds))
        return self._cache[key]

    def _phase(self, run: Run, c, start, z=False, d=1, own: dict | None = None, lane: bool = False,
               sites=()) -> Phase:
        """The Phase of `run` from step `start` under (c, z, d), some ops with scratch divisors of their own (`own`);
        the gradients of accumulate `sites` with their pieces in place of their buffers."""
        chunks, ws = self._workspaces(run, c, d, own, lane)
        bufs, ws = self._accumulating(run, self._buffers(run, z), ws, sites)
        ph = run_phase(run, bufs, chunks, ws, start, d, own, self.kernel_device if self.inplace else None)
        ph.accumulated = {x.op: (x, ph.life.workspaces[x.op][-1]) for x in sites}
        return ph

    def _accumulating(self, run: Run, bufs: RunBuffers, ws: dict, sites) -> tuple[RunBuffers, dict]:
        """`run`'s buffers and workspaces with the gradients of accumulate `sites` written into their accumulators
        (planner.accumulate): no buffers of their own, a piece buffer each, the last workspace of its op."""
        if not sites:
            return bufs, ws
        grads = {x.grad for x in sites}
        ws = dict(ws)
        for x in sites:
            spec = run.specs[x.grad]
            n = math.prod(x.piece) * spec.dtype.size
            ws[x.op] = list(ws.get(x.op, ())) + [Buffer(f"{x.op.name}/piece", n, -(-n // self.alignment) *
                                                        self.alignment, 0, 0, "workspace", op=x.op, shape=x.piece,
                                                        dtype=spec.dtype)]
        return bufs._replace(outputs={t: b for t, b in bufs.outputs.items() if t not in grads}), ws

    def _accumulated(self, k: int, r: int = 0) -> list[accumulate.Site]:
        """The accumulate sites (planner.accumulate) of the micro-batch run of k micro-batches at recomputation
        level r; none for k = 1."""
        if k == 1 or self._passes(k):  # statistics passes compute and merge gradients their own way (crossbatch)
            return []
        key = ("accumulated", k, r)
        if key not in self._cache:
            run, s = self._runs(k, r)[self._passes(k)], self.split(r)
            # a sparse gradient's rows are copied, not added; a folded one is added into its momentum slot
            grads = [g for g in s.grads if g not in s.gathered and g not in self.folds(r)]
            self._cache[key] = accumulate.sites(run.order, run.specs, grads, s.user_fetches, run.feeds,
                                                self.kernel_device)
        return self._cache[key]

    def _accumulates(self, r: int) -> bool:
        """Whether a micro-batched step at recomputation level r has gradients to accumulate where they are made."""
        batch = self.batch_size()
        try:
            return bool(batch and batch > 1 and self._accumulated(min(p for p in range(2, batch + 1) if batch % p == 0),
                                                                  r))
        except PlanError:
            return False

    def least_bytes(self, k: int, c: int, z: bool = False, d: int = 1, r: int = 0, s: Prefix | None = None,
                    a: bool = False) -> int:
        """A lower bound on the peak of the plan (k, c, z, d, r, s), found without ordering it: when an op runs,
        the buffers it reads and its workspaces are live, and so are its outputs unless it may write one over an
        input (planner.inplace). Of a micro-batched step it looks at the micro-batch run only; of a streamed
        prefix, at each run (the prefix's beside the cut's full-batch buffer). With `a`, the micro-batch run's
        accumulated gradients (planner.accumulate) have no buffers but their pieces."""
        fixed = self.parameter_bytes + self.slot_bytes + self.feed_bytes
        s = _prefix(s)
        if s and s.keep:  # (its copy's bytes: those of the step itself may be more)
            return self.keeping(r, s.keep)[0].least_bytes(k, c, z, d, 0, s._replace(keep=0), a)
        if s and r:
            return self.recomputing(r).least_bytes(k, c, z, d, 0, s, a)
        if s:
            lanes, rounds = s.lanes, s.rounds
            runs = self._stream_runs(s.cut, s.microbatches)
            cut = self.base_specs[self.cut(s.cut).tensor]
            spread = self._spread(s.cut, s.microbatches, z, d, rounds) if lanes == 1 else None
            own = self._balanced(runs[0], d, rounds) if lanes > 1 else spread
            first = lanes * self._least(runs[0], c, z, d, own, lanes > 1) + nbytes(cut)
            return fixed + max([first] + [self._least(run, c, z, d, spread) for run in runs[1:]])
        runs = self._runs(k, r)[:self._passes(k) + 1]  # the statistics passes and the micro-batch run
        sites = self._accumulated(k, r) if a else []
        return fixed + max(self._least(run, c, z, d, sites=sites if i == len(runs) - 1 else ())
                           for i, run in enumerate(runs))

    def _least(self, run: Run, c: int, z: bool, d: int, own: dict | None = None, lane: bool = False,
               sites=()) -> int:
        """The most bytes one op of `run` needs live at once (least_bytes); remembered, as the search asks it of the
        same run under the same settings for many candidates and budgets."""
        key = ("least", run.key, c, bool(z), d, tuple(sorted((op._id, v) for op, v in (own or {}).items())), lane,
               tuple(id(x) for x in sites))
        if key not in self._cache:
            self._cache[key] = max(self._needs(run, d, own, z, c, lane, sites).values(), default=0)
        return self._cache[key]

    def _workspaces(self, run: Run, c: int, d: int, own: dict | None = None, lane: bool = False
                    ) -> tuple[dict, dict]:
        """(conv chunks, workspace buffers) of a run under (c, d), some ops with scratch divisors of their own
        (`own`), shared by plans that differ in compaction; in a lane, on one thread."""
        key = ("workspaces", run.key, c, d, self._on(lane),  # kernels declare scratch per thread
               tuple(sorted((op._id, v) for op, v in (own or {}).items())))
        if key not in self._cache:
            chunks = {}
            if c > 1:
                chunks = {op: c for op in run.order if chunking.can_chunk(op, run.specs, c)
                          and declared_workspaces(op, run.specs, self.kernel_device, 1, 1, self.compute_units,
                                                  self._on(lane))}
            ws = workspace_buffers(run.order, run.specs, run.feeds, self.kernel_device, self.alignment, chunks, d,
                                   self.compute_units, own, self._on(lane))
            for op in run.order if self.paging is not None else ():  # the last workspace: engine.paging's
                if n := paging.staged(op, self.paging):
                    ws.setdefault(op, []).append(Buffer(op.name + paging.STAGING, n, n, 0, 0, "workspace", op=op,
                                                        shape=(n,), dtype=dtypes.uint8))
            self._cache[key] = chunks, ws
        return self._cache[key]

    def _buffers(self, run: Run, z: bool) -> RunBuffers:
        if ("outputs", run.key) not in self._cache:
            self._cache["outputs", run.key] = output_buffers(run.order, run.specs, run.feeds, self.alignment)
        key = ("buffers", run.key, bool(z))
        if key not in self._cache:
            self._cache[key] = run_buffers(run, self._cache["outputs", run.key], bool(z), self.kernel_device,
                                            self.alignment)
        return self._cache[key]


# The share of a budget's arena (less parameters, slots and feeds) that statistics passes' runs and kept rows may
# fill (planner.crossbatch.kept): the rest is left for the arena's placement, which lands above its liveness bound.
KEEP_SHARE = 0.9
# The reserves of a run's own bytes that the kept rows of a budget are chosen under (_Step._choose_kept), the
# cheapest predicted kept.
KEPT_RESERVES = (1, 2, 4)
_UNBOUNDED = 1 << 62  # an allowance nothing kept reaches


class _View(NamedTuple):
    """The step's fetches and feeds in the graph a plan runs (planner.recompute's planning copy, or the
    caller's), `outer` mapping the caller's fed and fetched tensors onto them (empty for the caller's graph)."""
    fetches: list
    feeds: set[Tensor]
    feed_shapes: dict[Tensor, tuple]
    outer: dict[Tensor, Tensor]
    remat: recompute.Solution | None
    clones: frozenset = frozenset()  # the copy's recomputing ops


def place(p: MemoryPlan) -> MemoryPlan:
    """Assigns every buffer of `p` its arena offset and sets `p.arena_bytes`. With lanes, the block of the
    prefix's copies is placed like a buffer, and the prefix buffers go at their offsets in its first copy."""
    if p.lane_block is None:
        p.arena_bytes = assign_offsets(p.buffers)
        return p
    p.arena_bytes = assign_offsets([b for b in p.buffers if b not in p.lane_offsets] + [p.lane_block])
    for b, offset in p.lane_offsets.items():
        b.offset = p.lane_block.offset + offset
    return p


# -- micro-batching ------------------------------------------------------------------------------------------
def _split(step: _Step, r: int = 0) -> Split | PlanError:
    """Splits the step (at recomputation level r) into a per-micro-batch run and an update run (split_step); a
    step with batch statistics, its statistics copy with them fed (planner.crossbatch)."""
    try:
        st = step.stats()
    except PlanError as e:
        return e
    if step.pairwise():
        return PlanError(f"cannot micro-batch: {step.pairwise()}")
    if st is None:
        v = step.view(r)
        rows = step.rowed() if r == 0 else None  # the recomputing copy's: by their static shapes
        return split_step(_split_order(step, r), v.fetches, v.feeds, v.feed_shapes, step.batch_size(), rows)
    if r:
        return PlanError("cannot micro-batch a step with batch statistics and recompute: the statistics passes run "
                         "a planning copy of their own")
    v = step._stats_view()
    return split_step(_split_order(step, r), v.fetches, v.feeds, v.feed_shapes, step.batch_size(), st.rowed)


def _split_order(step: _Step, r: int = 0) -> list[Operation]:
    """The ops of the step that _split splits, in creation order: of its statistics copy with the statistics fed
    where it has batch statistics."""
    if step.stats() is None:
        return step._runs(1, r)[0].order
    v = step._stats_view()
    return step._run("statistics fed", v.fetches, v.feeds, v.feed_shapes).order


# -- the micro-batch run's order -----------------------------------------------------------------------------
def _late_gradients(g, fetches: list, specs: dict) -> None:
    """Makes the ops of the micro-batch run's dependency graph `g` that give a merged gradient bigger than their
    inputs (a dense layer's weight gradient: 2.1 MB for Mentee's fc1 from 0.3 MB of rows at 32 images) run after
    every op they do not feed: the gradient waits for the merge after the run either way, so made last it is not
    live beside the convolutions' backward, and its inputs, held instead, are smaller. Fetches that ops of the run
    read are left alone."""
    import networkx as nx
    for t in fetches:
        if not isinstance(t, Tensor) or t.op not in g or g.out_degree(t.op) or t not in specs:
            continue
        if nbytes(specs[t]) <= sum(nbytes(specs[u]) for u in t.op.inputs if u in specs):
            continue
        before = nx.ancestors(g, t.op)
        g.add_edges_from((x, t.op) for x in list(g.nodes) if x is not t.op and x not in before)


# -- helpers -------------------------------------------------------------------------------------------------
def _device(device, alignment: int | None) -> DeviceFacts:
    """The DeviceFacts of `device` ('cpu', 'opencl' or DeviceFacts), defaults filled in and `alignment` (when
    given) in place of the device's."""
    if isinstance(device, str):
        if device not in ("cpu", "opencl"):
            raise ValueError(f"the planner takes DeviceFacts or 'cpu' / 'opencl' (the documented defaults), not "
                             f"{device!r}; for a device of this machine plan with "
                             f"tfplus.runtime.facts.device_facts({device!r})")
        device = DeviceFacts(device, device)
    if not isinstance(device, DeviceFacts):
        raise TypeError(f"the planner takes DeviceFacts or 'cpu' / 'opencl', not {type(device).__name__}; for a "
                        "runtime use tfplus.runtime.facts.device_facts(runtime)")
    cl = device.kernel_device == "opencl"
    default = OPENCL_DEFAULT_ALIGNMENT if cl else CPU_ALIGNMENT
    return replace(device, alignment=alignment or device.alignment or default,
                   compute_units=device.compute_units or (OPENCL_DEFAULT_COMPUTE_UNITS if cl else None))


def _graph_of(fetches, feed_shapes):
    for x in list(fetches if isinstance(fetches, (list, tuple)) else [fetches]) + list(feed_shapes):
        if isinstance(x, (Tensor, Operation)):
            return x.graph
    return None


def _var_spec(op: Operation):
    from tfplus.registry import TensorSpec
    return TensorSpec(tuple(op.attrs["shape"] or ()), op.attrs["dtype"])


def _write_merged(ph: Phase, into: dict[Tensor, Buffer]) -> set[Tensor]:
    """A run on one micro-batch (crossbatch counts) computes the whole batch's values: each fetched tensor of
    `into` is written straight into its accumulator or kept rows' buffer (`into[t]`), with every tensor that shares
    its buffer (the one it aliases, ops writing over their inputs), instead of copied there after the run; returns
    those tensors (MemoryPlan.written: Bound._passes does not merge them). Not where a kernel does not write its
    output's memory (Const points it at a cached constant; shape-only ops leave a host value), where the buffer
    holds another such tensor or another shape, or where the tensor is fed."""
    groups: dict[int, list[Tensor]] = {}
    for t, b in ph.life.of_tensor.items():
        groups.setdefault(id(b), []).append(t)
    roots = {t: alias_root(t, ph.feeds) for t in into}
    written = set()
    for t, target in into.items():
        group = groups.get(id(ph.life.of_tensor.get(roots[t])), [])
        if not group or any(u.op.type == "Const" or has_tag(u.op.type, "shape_only") or ph.specs[u].shape !=
                            target.shape or ph.specs[u].dtype != target.dtype or
                            any(roots[v] is u for v in into if v is not t) for u in group):
            continue
        for u in group:
            ph.life.of_tensor[u] = target
        written.add(t)
    return written


def _rows(shape: tuple, k: int) -> tuple:
    """A micro-batch's shape of a tensor whose leading axis is the batch's rows, of k micro-batches."""
    return (shape[0] // k,) + tuple(shape[1:])


def _divisors(n: int) -> list[int]:
    """The divisors of n in increasing order, found in O(sqrt(n)) steps (n may be a batch of 10^9)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]
