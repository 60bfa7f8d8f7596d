"""Batch statistics under micro-batching, exactly: statistics passes over the micro-batches.

A tensor whose rows depend on other rows of the batch breaks a plain micro-batched step (each slice would use its
own statistics). `statistics` finds them from the graph's dataflow, with no list of op types: a tensor computed
from the batch's rows that has no row axis itself (its shape does not follow the batch size: a reduction over the
batch) from which a tensor with rows is computed again (broadcast back onto the rows: tf.nn.moments written by
hand, a norm that reduces over the batch). A loss's mean or a weight gradient is such a sum too, but only the
fetches and the updates read it, and micro-batching averages those exactly; a layer norm over the features keeps
the batch axis and is row by row. An op that mixes the rows inside itself declares it at registration
(tag "cross_batch", in training mode: FusedBatchNorm(V3)).

`rewrite` makes such a step exact in micro-batches. In a planning copy of the graph every training-mode
FusedBatchNorm(V3) becomes its statistics (per-channel means over the batch, all from one pass: of each
micro-batch's mean and of its square, in float64, and of its variance about its own mean; Chan's parallel formula
makes the batch's variance from them) and a normalization that reads them, and its gradient becomes the two
per-channel sums its input gradient needs (of dy and of dy * x_hat, from one pass; averaged over the micro-batches:
the whole batch's sums, since each micro-batch's dy is k times its share) and the row-by-row rest: dx = scale /
sigma * (dy - mean(dy) - x_hat * mean(dy * x_hat)), the means being the sums over the micro-batch's count of values,
d scale = sum(dy * x_hat), d offset = sum(dy). Each is a fused op (ops/bn_split_ops.py: one or two launches). A
statistic written by hand stays as it is, provided its op says how slices combine (a Sum's partial sums add up: tag
row_sums; a Mean's average: row_means); another reduction (a Max over the batch) is refused, naming it. A statistic
that reads another is one pass later (a hand-written variance reads its mean; a layer's reads the layers' below; the
backward's read all of the forward's); what a norm computes from its merged statistics alone (mean, variance,
1 / sigma, scale / sigma: per-channel vectors, one launch a norm) is computed by the first pass that can and fed to
the runs after it, not recomputed by each of them in every micro-batch. The step runs as:

1. pass i = 1..P (each over the k micro-batches): the ops up to the statistics of level i, the levels below fed;
   each micro-batch's values summed in micro-batch order, a mean's divided by k: the whole batch's.
2. the micro-batched step (forward and backward per micro-batch, gradients averaged) with every statistic fed,
   then the update run: the moving averages read the fed statistics, so they update once, with the whole batch's.

Each pass would recompute the forward (and for the backward's statistics the backward) up to its statistics: 2L
passes for L training batch norms (one forward, one backward pass each), O(L^2) work. `kept` cuts that to O(L)
where memory allows: passes keep rows whole (a norm's input, a norm gradient's dy) for later passes to start
from, and compute the gradients (and the loss) whose inputs' rows they have, so that the micro-batch run of step 2
reruns only what no pass computed. Priced by the cost model like any run; KEEP is the kill switch. (Keeping a
norm's output too, where each run leaves room, took 32 of 154 normalizations off MobileNet's 128 MB step and did not
show on the H200: 10.29 against 10.20 ms in one call of stop 46, for a fifth more planning time; left out.)

Each run takes a micro-batch count of its own (the planner's _Step._counts; COUNTS is the kill switch): the smallest
divisor of the batch whose run fits the room the others leave. A pass that starts from kept rows of the deep, narrow
layers runs at k = 1: its statistics are the whole batch's, written where they are merged (no merge, no row copies),
and it computes a norm's per-channel finishing once; only the runs over the wide early layers need many micro-batches.
Rows kept through a run take the room its count needs: under a budget the rows are chosen with each run's own bytes
reserved 1, 2 and 4 times over, and the choice of the lowest predicted step time kept (plan.KEPT_RESERVES).

Scaling: a micro-batch's loss is its slice's mean, so its gradients are k times the whole batch's share; the
backward's statistics are sums or means of those (k times the whole batch's too), so the input gradients stay
consistent and the averaged weight gradients are the whole batch's (a norm's gradient sums, averaged, are the
batch's at any count: Statistics.uncounted). A shape-derived number (Size) that meets a
statistic, and no value of the micro-batch's rows, before it reaches rows takes its whole-batch value (a mean's
gradient divides by the batch's size; the Bessel factor tf.layers.batch_normalization applies to a rank-3 input's
variance); one that shapes rows, or scales them alone, keeps the micro-batch's (a mean loss's 1/m). So the
backward's values that cross runs (its statistics and kept rows: gradients, linear in the loss's seed) carry the
count of the run that wrote them; a run of another count that reads them first scales them to its own (`rescales`:
k_reader / k_writer, in place, one accumulate launch per factor), while the forward's statistics and rows, the merged
gradients and the loss are the whole batch's whatever the count.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from tfplus.framework import Graph, Operation, Tensor, needed_ops
from tfplus.ops import array_ops, bn_split_ops, math_ops
from tfplus.planner import rows as row_rules
from tfplus.planner.liveness import PlanError, phase_of
from tfplus.planner.recompute import _copy as copy_op
from tfplus.planner.stream import batch_dependent
from tfplus.registry import has_tag, tagged

# Kill switch of the statistics passes' kept rows (kept): False recomputes every pass from the fed batch.
KEEP = True
# Kill switch of a micro-batch count per run (counts): False runs every pass and the micro-batch run in k.
COUNTS = True
# Kill switch of a norm gradient's mask from x (_norm_grad): False masks dx's dy at the activation's output, which
# the pass that applies the gradient then normalizes x again for.
MASK_FROM_X = True
# Kill switch of the segment order of shedding (kept's `segments`, _bisection), priced beside the default order at
# each reserve (plan._Step._choose_kept): False prices the default order alone.
SEGMENTS = True


class Statistics(NamedTuple):
    """The planning copy of a step whose batch statistics are computed in passes (`rewrite`)."""
    graph: Graph
    tensor_map: dict[Tensor, Tensor]     # the step's tensors -> the copy's
    op_map: dict[Operation, Operation]
    levels: list[list[Tensor]]           # the statistics each pass computes, pass by pass
    # how a statistic's micro-batch values make the batch's: 'mean' or 'sum'; 'last' for what a pass computes from
    # the statistics below it alone (the same in every micro-batch: a norm's mean, variance, 1 / sigma, scale / sigma)
    merges: dict[Tensor, str]
    rowed: set[Tensor]                   # the copy's tensors with rows of the batch
    norms: list[str]                     # the batch-norm ops rewritten
    by_hand: int                         # the statistics the step computes with ops of its own (not a norm's)
    # rows a later pass may read instead of recomputing them (`kept`): each norm's input, each norm gradient's dy;
    # the copy's tensor -> the step's
    keepable: dict[Tensor, Tensor]
    # the rewritten norms' gradient statistics (_norm_grad's sums, averaged over the micro-batches): the whole
    # batch's sums at any count, since each micro-batch's gradients are k times its share; no run rescales them
    uncounted: frozenset[Tensor] = frozenset()


def fused_norms(order: list[Operation]) -> list[Operation]:
    """The ops that mix the rows of the batch inside themselves: tagged cross_batch, in training mode."""
    return [op for op in order if has_tag(op.type, "cross_batch") and op.attrs.get("is_training", True)]


def statistics(order: list[Operation], feeds: set[Tensor], batch_feeds: set[Tensor], rowed: set[Tensor]
               ) -> list[Tensor]:
    """The batch statistics of the step (_statistics)."""
    return list(_statistics(order, feeds, batch_feeds, rowed))


def _statistics(order: list[Operation], feeds: set[Tensor], batch_feeds: set[Tensor], rowed: set[Tensor]
                ) -> dict[Tensor, bool]:
    """The batch statistics of the step (`order`): tensors without rows computed by an op that reads rows of the
    batch (`rowed`: the tensors whose shape follows the batch size), from which a tensor with rows is computed.
    Shape-only ops (Shape, Size) read no values: the batch size they give is the micro-batch's, which is what a
    micro-batch's mean loss wants.

    Only rows of the statistic's own phase count: a loss's count of examples (tf.losses' weighted mean) is a
    forward sum over the batch whose only rows are its gradient's, in the backward pass. Each micro-batch's mean
    loss with its own count, averaged, is the batch's (equal slices); taken as a statistic, the count would be
    the whole batch's while the micro-batches are still averaged, shrinking loss and gradients k times. A count is
    a sum of the rows' shapes (ones_like: shape-only), though; a statistic of their values whose rows are the
    backward's is one all the same, computed by an op that sums or averages over the rows (a decorrelation penalty
    on the batch's features, X^T X: its gradient's rows are X times a function of the whole batch's X^T X, which no
    micro-batch has). {statistic: whether rows of its
    own phase are computed from it}."""
    dep = batch_dependent(order, feeds, batch_feeds)
    valued = values(order, feeds, batch_feeds)
    onto: dict[Tensor, set[str]] = {}  # batch-dependent tensors without rows -> phases of rows computed from them
    for op in reversed(order):
        if has_tag(op.type, "shape_only"):
            continue
        phases = set().union(*(onto.get(t, ()) for t in op.outputs))
        if any(t in rowed for t in op.outputs):
            phases.add(phase_of(op))
        for t in op.inputs if phases else ():
            if t in dep and t not in rowed:
                onto.setdefault(t, set()).update(phases)
    # (a map's row, read in its unrolled copy for a micro-batch of its rows, is no statistic: planner.maps)
    return {t: phase_of(op) in onto.get(t, ()) for op in order
            if not has_tag(op.type, "shape_only") and not op.attrs.get("_row_map") and
            any(u in rowed for u in op.inputs)
            for t in op.outputs if phase_of(op) in onto.get(t, ()) or (t in valued and onto.get(t) and _sums(op))}


def _sums(op: Operation) -> bool:
    """Whether `op` declares its outputs without rows sums or means over its inputs' rows (a MatMul's X^T X): not a
    loop's stacked iterations, whose rows lie along another axis."""
    return has_tag(op.type, "row_sums") or has_tag(op.type, "row_means")


# What a step with batch statistics gets instead of plain micro-batches.
_PASSES = "a memory budget, or the cpu workers, split it exactly, with statistics passes over the micro-batches"


def why_not(order: list[Operation], feeds: set[Tensor], batch_feeds: set[Tensor], rowed: set[Tensor]
            ) -> str | None:
    """Why the step cannot run in plain micro-batches (without statistics passes), if it computes statistics of
    the whole batch."""
    for op in fused_norms(order):
        return (f"{op.type} '{op.name}' normalizes with the statistics of the whole batch (training mode); "
                f"plain micro-batches would use each slice's own and update the moving averages once per slice "
                f"({_PASSES})")
    for t in statistics(order, feeds, batch_feeds, rowed):
        return _statistic(t) + f"; plain micro-batches would each use their own slice's " \
            f"({_PASSES})"
    return None


def _statistic(t: Tensor) -> str:
    verb = {"Mean": "averages", "Sum": "sums"}.get(t.op.type, "reduces")
    return (f"{t.op.type} '{t.op.name}' {verb} its input over the batch and rows are computed from its result "
            f"'{t.name}' again (a batch statistic, e.g. tf.nn.moments written by hand)")


def rewrite(order: list[Operation], feeds: set[Tensor], fetches: list, batch_feeds: set[Tensor],
            rowed: set[Tensor], specs: dict) -> Statistics:
    """The planning copy of the step (`order`, run from `feeds` to compute `fetches`; `specs` its tensors' at the
    whole batch) in which the batch statistics are tensors of their own, computed in passes (see the module
    doc). Raises PlanError for a statistic no pass computes from slices, or an op that does not keep the rows row
    by row (planner.rows: what looks like a statistic there is often rows picked by such an op)."""
    why = row_rules.why_not(order, feeds, {t: specs[t].shape for t in feeds if t in specs}, batch_feeds)
    if why:
        raise PlanError(f"cannot micro-batch: {why}")
    norms = fused_norms(order)
    grads: dict[Operation, Operation] = {}
    for bn in norms:
        for t in bn.outputs[3:]:
            for c in t.consumers():
                if c in set(order) and c.type.startswith(_NORM_GRADS) and c.inputs[3] is bn.outputs[3]:
                    grads[c] = bn
                elif c in set(order):
                    raise PlanError(f"cannot micro-batch: {c.type} '{c.name}' reads the reserve space of "
                                    f"{bn.type} '{bn.name}'; only its gradient may")
    own = set(norms) | set(grads)
    found = _statistics(order, feeds, batch_feeds, rowed)
    for t, same_phase in found.items():
        # NOTE: fed to the micro-batches, its gradient would be each one's share, not k times it as the mean
        # loss's are: averaged, k times too small. A statistic of the fed rows alone (the sum or nonzero count of
        # weights fed per example, a sequence mask's sum) has no gradient: the passes compute it from the fed rows,
        # and the sum it divides is scaled by k as a summed loss (batch.summed_losses stops at it).
        # A mean over the rows that only the backward pass computes rows from (a loss that is a non-linear function
        # of it: tf.sqrt(tf.reduce_mean(...)), a penalty on the batch's mean activation) is fed whole by a pass: each
        # micro-batch's gradient of it is the batch's, and the Mean's gradient divides it by the micro-batch's count
        # (_foldable leaves that alone), k times the rows' share, as a mean loss's. A sum's gradient is not divided:
        # the rows' share alone, k times too small once averaged.
        if not same_phase and t.op not in own and not fed_only(t, feeds) and not has_tag(t.op.type, "row_means"):
            raise PlanError(f"cannot micro-batch: {_statistic(t)}; only the backward pass computes rows from it (a "
                            "loss that is a non-linear function of a sum over the batch, or a loss divided by a sum "
                            "over the batch of values the variables compute, such as reduce_sum(predictions)): its "
                            "gradient needs the whole batch's value, which a micro-batch's share of the rows does "
                            "not scale to; write it of a mean over the batch (tf.reduce_mean), average each "
                            "example's loss, divide by a value of the fed tensors alone (weights, a mask), or give a "
                            "budget the unsplit step fits")
    merges = {t: _merge(t) for t in found if t.op not in own}
    # backward statistics written by hand, which carry the micro-batch count, and the ops that compute from them,
    # through no rows, what the updates read (_straight)
    counted = {t for t in merges if phase_of(t.op) == "backward"}
    straight = _straight(order, counted, rowed)
    # (an op outside tf.gradients on that path, clipping by the global norm, is copied on the scaled statistics too:
    # planner.batch runs it in the update run, on the merged gradients, where it reads others')
    whole: dict[Tensor, Tensor] = {}  # their tensors on that path -> the copy's, scaled to the batch's share
    fed = set(merges) | {t for bn in norms for t in bn.outputs[1:]}  # whole-batch values in the micro-batch run
    value = _values(order, feeds, batch_feeds, fed)
    fold = _foldable(order, rowed, value, fed, specs)
    # (an update that reads nothing of the batch, Adam's beta powers', is no moving average: ops that group the
    # updates, tf.group's NoOp, still wait for it)
    dep = batch_dependent(order, feeds, batch_feeds)
    moving = {op for op in order if op.op_def.ref_inputs and not any(t in value for t in op.inputs) and
              any(t in dep for t in op.inputs)}
    fetched = {f.op if isinstance(f, Tensor) else f for f in fetches}
    g = Graph()
    tmap: dict[Tensor, Tensor] = {}
    op_map: dict[Operation, Operation] = {}
    new_rowed: set[Tensor] = set()  # the rewritten norms' tensors with rows: their static shapes leave the batch open
    made: dict[Operation, dict] = {}  # a rewritten norm's tensors its gradient reads
    mine: list[Tensor] = []
    derived: list[Tensor] = []  # per-channel values of the statistics alone, which later runs are fed (_levels)
    mean: dict[Tensor, str] = {}
    keepable: dict[Tensor, Tensor] = {}
    uncounted: set[Tensor] = set()
    in_step = set(order)
    for op in sorted(in_step | {t.op for t in feeds}, key=lambda op: op._id):
        if op in fold:
            with g.as_default():
                const = array_ops.constant(np.asarray(fold[op]), dtype=op.outputs[0].dtype, name=op.name)
            tmap[op.outputs[0]] = const
            continue
        if op in norms or op in grads:
            ins = [tmap[t] for t in op.inputs]
            if op.inputs[0] not in feeds:
                keepable[ins[0]] = op.inputs[0]
            with g.as_default(), g.name_scope(op.name + "/micro"):
                start = len(g._ops)
                if op in norms:
                    outs, made[op] = _norm(op, ins, specs)
                    derived += made[op]["derived"]
                else:
                    outs, scaled = _norm_grad(op, ins, made[grads[op]])
                    derived.append(scaled)
                for new in g._ops[start:]:
                    new.backward = op.backward
            for t, c in zip(op.outputs, outs):
                tmap[t] = c
            made_stats = made[op]["statistics"] if op in norms else outs[-2:]
            if op in grads:
                uncounted.update(made_stats)
            mine += made_stats
            mean.update(dict.fromkeys(made_stats, "mean"))
            new_rowed.update(t for new in g._ops[start:] for t in new.outputs if _open(t))
            continue
        ins = [tmap[t] for t in op.inputs] if op in in_step else []
        if op.op_def.ref_inputs:
            ins = [whole.get(t, c) for t, c in zip(op.inputs, ins)]
        control = [op_map[c] for c in _control(op, fetched, moving) if c in op_map]
        new = op_map[op] = copy_op(g, op, ins, op.name, control)
        tmap.update(zip(op.outputs, new.outputs))
        if op in straight:
            scaled = copy_op(g, op, [whole.get(t, tmap[t]) for t in op.inputs], op.name + "/share", control)
            whole.update(zip(op.outputs, scaled.outputs))
        for t in op.outputs:
            if t in merges:
                mine.append(tmap[t])
                mean[tmap[t]] = merges[t]
            if t in counted:
                whole[t] = _share(g, tmap[t], tmap, batch_feeds, specs)
    tmap.update((t, whole[t]) for t in fetches if isinstance(t, Tensor) and t in whole)
    copy_order = [op for op in g._ops]
    copy_feeds = {tmap[t] for t in feeds}
    # a norm's statistic that the step does not need (the input gradient of a norm on the fed batch) has no pass
    needed = needed_ops([tmap[f] if isinstance(f, Tensor) else op_map[f] if f in op_map else tmap[f.outputs[0]]
                         for f in fetches], copy_feeds)
    mine = [t for t in mine if t.op in needed]
    derived = [t for t in derived if t.op in needed]
    mean.update(dict.fromkeys(derived, "last"))
    rows = {tmap[t] for t in rowed if t in tmap} | new_rowed
    found = statistics([op for op in copy_order if op in needed], copy_feeds, {tmap[t] for t in batch_feeds}, rows)
    # a micro-batch's own mean, which only its variance about it reads in the pass (_norm), is no statistic
    own_mean = {made[bn]["local"] for bn in norms}
    for t in found:
        if t not in mine and t not in own_mean:  # NOTE: a bug in the rewrite, not in the step
            raise PlanError(f"cannot micro-batch: {_statistic(t)}, which the statistics passes' copy misses")
    return Statistics(g, tmap, op_map, _levels(copy_order, mine, derived), mean, rows, [bn.name for bn in norms],
                      len(merges), {t: o for t, o in keepable.items() if t.op in needed}, frozenset(uncounted))


class Kept(NamedTuple):
    """Rows kept whole between statistics passes (`kept`): `tensor` written by pass `writer` (copied in over its
    micro-batches), read by the passes after it up to pass `last` (a micro-batch's rows at a time)."""
    tensor: Tensor
    writer: int
    last: int


def kept(runs: list[tuple[list, set[Tensor]]], candidates: list[Tensor], fold: list[Tensor], rowed: set[Tensor],
         nbytes: dict[Tensor, int], allowance: list[int], segments: bool = False
         ) -> tuple[list[Kept], list[list[Tensor]], dict[Tensor, tuple[int, int]]]:
    """Which rows the statistics passes keep whole for later runs to start from instead of recomputing them from
    the fed batch, and which of the micro-batch run's merged fetches (`fold`: the gradients, the loss) each run
    computes: (spans, fetches per run, shapes: {tensor: (the run that computes it, the first run fed it)}). `runs`:
    (fetches, feeds) of each statistics pass, then of the micro-batch run (its fetches less `fold`).

    A norm's input kept, the next forward pass starts there and the backward's passes recompute only the layers
    above it; a gradient kept, the next backward pass starts from it: O(L) work for L norms instead of O(L^2). Of
    `candidates` (Statistics.keepable, in step order), those a later run reads, at most `allowance[i]` bytes
    (`nbytes` each, with the folded fetches' accumulators) kept during run i: where more would be, the largest
    kept there is not kept through that run (kept for the next forward pass, say, and again once a backward pass
    recomputed it, where fewer rows are kept). A fetch in `fold` is computed by the first pass that computes its
    inputs' rows anyway (the ops it adds recompute no layer: _adds): a layer's weight gradient in the
    backward's pass that computes its input gradient's rows, so that the micro-batch run recomputes only what
    no pass did. A shape-only op's output an earlier run computed is fed to it (`shapes`): the ones of the loss a
    weight decay's gradient starts from need no forward pass to the loss again.

    Of rows of one size an over-full run sheds those kept longest first (the earliest written), or with `segments`
    the forward rows in _bisection's order, so that those still kept through the backward split the forward into
    even segments (then the backward's rows go last)."""
    blocked: dict[Tensor, set[int]] = {t: set() for t in candidates}  # the runs a candidate is not kept through
    keep_rank = _bisection([t for t in candidates if phase_of(t.op) != "backward"]) if segments else {}
    # The op types _keeping asks about, looked up once: has_tag per op visited was a tenth of a floor search.
    types = (set(tagged("shape_only")), set().union(*(tagged(tag) for tag in _LAYER_TAGS)))
    while True:
        spans, folded, shapes = _keeping(runs, blocked, fold, rowed, types)
        over = [-room for room in allowance]
        for x in spans:
            for i in range(x.writer, x.last + 1):
                over[i] += nbytes[x.tensor]
        for i, fetched in enumerate(folded):
            for j in range(i, len(runs)):
                over[j] += sum(nbytes[t] for t in fetched)
        more = False  # every over-full run sheds its largest kept rows until it fits, all in one round (one
        for i, excess in enumerate(over):  # a round would re-derive the spans once per candidate and run)
            for x in sorted((x for x in spans if x.writer <= i <= x.last),
                            key=lambda x: (-nbytes[x.tensor], -keep_rank.get(x.tensor, 0))):
                if excess <= 0:
                    break
                blocked[x.tensor].add(i)
                excess -= nbytes[x.tensor]
                more = True
        if not more:
            return spans, folded, shapes


def _bisection(rows: list[Tensor]) -> dict[Tensor, int]:
    """Each forward row's rank in the order that halves the chain again and again (the middle row 1, the middles
    of the halves 2 and 3, ...): among kept rows of one size, kept sheds the highest rank first, so the rows that
    stay split the chain into even segments (Chen et al. 2016) and a backward pass recomputes from the nearest one
    below, not from the chain's start. (In step order, the earliest were shed first: MobileNet's 4x4 tail at 64 MB
    kept none of its eleven layers' inputs through the backward, whose passes recomputed up to ten layers each.)"""
    rank: dict[Tensor, int] = {}
    spans = [(0, len(rows))]
    while spans:
        lo, hi = spans.pop(0)
        if lo < hi:
            mid = (lo + hi) // 2
            rank[rows[mid]] = len(rank) + 1
            spans += [(lo, mid), (mid + 1, hi)]
    return rank


def _keeping(runs: list[tuple[list, set[Tensor]]], blocked: dict[Tensor, set[int]], fold: list[Tensor],
             rowed: set[Tensor], types: tuple[set[str], set[str]]
             ) -> tuple[list[Kept], list[list[Tensor]], dict[Tensor, tuple[int, int]]]:
    """kept's spans, each candidate kept from the pass that computes it to its last reader, except through the
    runs it is `blocked` in; the fetches each run computes; and the shape-only outputs fed to later runs. `types`:
    the shape-only op types and _adds' layer op types."""
    shape_only, layers = types
    since: dict[Tensor, int] = {}  # kept now: since which pass
    last: dict[Tensor, int] = {}
    spans: list[Kept] = []
    pending = list(fold)
    folded: list[list[Tensor]] = [[] for _ in runs]
    computed: dict[Tensor, int] = {}  # shape-only ops' outputs without rows: the run that computed them first
    shapes: dict[Tensor, tuple[int, int]] = {}
    stats = {t for level, _ in runs[:-1] for t in level}  # the passes' statistics

    def close(t: Tensor) -> None:
        writer = since.pop(t)
        if last.get(t, writer) > writer:
            spans.append(Kept(t, writer, last[t]))
    for i, (fetches, feeds) in enumerate(runs):
        for t in [t for t in since if i in blocked[t]]:
            close(t)
        fed = feeds | set(since) | set(shapes)
        if i == len(runs) - 1:  # the micro-batch run computes what no pass did
            folded[i], pending = pending, []
        ops = needed_ops(fetches + folded[i], fed)
        for f in list(pending):
            extra = _adds(f, ops, fed, rowed, computed, stats, layers)
            if extra is not None:
                folded[i].append(f)
                pending.remove(f)
                ops |= extra[0]
                shapes.update((t, (computed[t], i)) for t in extra[1] if t not in shapes)
                fed |= extra[1]
        for op in ops:
            if op.type in shape_only:
                for t in op.outputs:
                    if t not in rowed and t not in fed:
                        computed.setdefault(t, i)
        read = {t for op in ops for t in op.inputs}
        last.update((t, i) for t in since if t in read)
        if i < len(runs) - 1:
            for t, no in blocked.items():
                if t not in since and t.op in ops and i not in no:
                    since[t] = last[t] = i
    for t in list(since):
        close(t)
    return sorted(spans, key=lambda x: (x.writer, x.last)), folded, shapes


def gradient_values(levels: list[list[Tensor]], merges: dict[Tensor, str], kept: list[Kept],
                    uncounted: frozenset[Tensor] = frozenset()) -> set:
    """The values crossing runs that carry a run's micro-batch count (module doc, Scaling): the backward's
    statistics (not its per-channel values of the forward's alone, merged 'last', nor the `uncounted`:
    Statistics.uncounted) and its kept rows (a norm gradient's dy), as Tensors and Kept spans."""
    stats = {t for level in levels for t in level
             if merges[t] != "last" and t not in uncounted and phase_of(t.op) == "backward"}
    return stats | {x for x in kept if phase_of(x.tensor.op) == "backward"}


def rescales(counts: list[int], levels: list[list[Tensor]], kept: list[Kept], scaled: set, reads: list[set[Tensor]]
             ) -> list[list[tuple[object, float]]]:
    """Per run (the statistics passes, then the micro-batch run), the `scaled` values (gradient_values) to scale in
    place before it runs, and by what: a value carries the micro-batch count of the run that wrote it (`counts[i]`
    for run i), and a run of another count that reads it (`reads[i]`: the tensors run i reads) needs its own. In run
    order, so a value read by several runs is scaled only where the count changes."""
    now: dict = {}  # value -> the count it carries now
    out: list[list[tuple[object, float]]] = [[] for _ in counts]
    writer = {t: i for i, level in enumerate(levels) for t in level}
    for i, k in enumerate(counts):
        for v in sorted(scaled, key=lambda v: (v.tensor if isinstance(v, Kept) else v).name):
            w, t = (v.writer, v.tensor) if isinstance(v, Kept) else (writer[v], v)
            read = w < i <= v.last if isinstance(v, Kept) else w < i
            if read and t in reads[i] and now.setdefault(v, counts[w]) != k:
                out[i].append((v, k / now[v]))
                now[v] = k
    return out


def _straight(order: list[Operation], counted: set[Tensor], rowed: set[Tensor]) -> dict[Operation, Tensor]:
    """The ops that compute from backward statistics written by hand (`counted`: sums over the rows of the batch's
    gradients, which carry the micro-batch count, module doc Scaling) through no rows of the batch, up to the
    updates: tf.nn.batch_normalization's x * inv + (offset - mean * inv) after tf.nn.moments over the batch takes
    its offset's and scale's gradients straight from such sums. Each micro-batch computes them whole from the fed
    statistics, where it computes its rows' share of a gradient summed from rows, so the averaged gradient would be
    k times the batch's: rewrite copies these ops on the statistics scaled by the micro-batch's share of the rows
    (_share) for the updates and the fetches, and leaves them as they are for the rows computed from them.
    {op: a statistic it computes from}."""
    reach = {t: t for t in counted}  # -> a statistic it is computed from
    out: dict[Operation, Tensor] = {}
    for op in order:
        if op.op_def.ref_inputs or has_tag(op.type, "shape_only") or any(t in rowed for t in op.outputs):
            continue
        source = next((reach[t] for t in op.inputs if t in reach), None)
        if source is not None:
            out[op] = source
            reach.update(dict.fromkeys(op.outputs, source))
    return out


def _share(g: Graph, t: Tensor, tmap: dict, batch_feeds: set[Tensor], specs: dict) -> Tensor:
    """Statistic `t` of the copy times the run's micro-batch share of the batch's rows, m / B (1 / k: the size of
    a fed batch's slice over the whole one's), as a backward op."""
    x = min(batch_feeds, key=lambda f: f.name)
    with g.as_default(), g.name_scope(t.op.name + "/share"):
        start = len(g._ops)
        m = math_ops.cast(array_ops.size(tmap[x]), t.dtype)
        out = math_ops.multiply(t, math_ops.multiply(m, array_ops.constant(
            np.asarray(1 / math.prod(specs[x].shape), t.dtype.np))))
        for new in g._ops[start:]:
            new.backward = True
    return out


def _adds(f: Tensor, ops: set[Operation], fed: set[Tensor], rowed: set[Tensor], computed: dict[Tensor, int],
          stats: set[Tensor], layers: set[str]) -> tuple[set[Operation], set[Tensor]] | None:
    """The ops that computing `f` adds to a run of `ops` fed `fed`, and the shape-only outputs an earlier run
    `computed` that it reads; None if one of those ops makes rows of the batch by recomputing a layer (a matrix
    product or convolution: tag gemm), mixing the rows (cross_batch) or drawing random numbers: the run does not
    compute the rows `f` is computed from. Rows made from the run's own by cheaper ops are added (the loss's and
    the accuracy's per-example values from the logits a backward pass computes), so that no later run holds the
    layers' rows to recompute them. None too where `f` needs a statistic (`stats`: the passes') the run is not
    fed: in the run, each micro-batch's own. `layers`: the op types of _LAYER_TAGS."""
    extra: set[Operation] = set()
    earlier: set[Tensor] = set()
    stack = [] if f in fed else [f.op]
    while stack:
        op = stack.pop()
        if op in ops or op in extra:
            continue
        if op.type in layers and any(t in rowed for t in op.outputs):
            return None
        extra.add(op)
        for t in op.inputs:
            if t in computed and t.op not in ops:
                earlier.add(t)
            elif t in stats and t not in fed:
                return None
            elif t not in fed:
                stack.append(t.op)
        stack.extend(op.control_inputs)
    return extra, earlier


# What an op that makes rows must not be to be added to a run for a fetch (_adds).
_LAYER_TAGS = ("gemm", "cross_batch", "random")


def fed_only(t: Tensor, feeds: set[Tensor]) -> bool:
    """Whether `t` is computed from fed tensors (their values or shapes) and constants alone: no variable, no
    stateful or random op. The same whatever the micro-batch where the passes feed it the batch's."""
    seen, stack = set(), [t]
    while stack:
        u = stack.pop()
        if u in seen or u in feeds:
            continue
        seen.add(u)
        if has_tag(u.op.type, "shape_only"):  # the rows' shapes: the same whatever computed them
            continue
        if u.op.type == "VariableV2" or u.op.op_def.stateful or u.op.op_def.ref_inputs:
            return False
        stack.extend(u.op.inputs)
    return True


def _merge(t: Tensor) -> str:
    """How the micro-batches' values of statistic `t` make the batch's, from its op's registration: a sum over
    the rows adds up (tag row_sums), a mean over them averages (row_means, equal micro-batches); PlanError for
    any other reduction over the batch (a max, say: no pass computes it from slices)."""
    if has_tag(t.op.type, "row_sums"):
        return "sum"
    if has_tag(t.op.type, "row_means"):
        return "mean"
    raise PlanError(f"cannot micro-batch: {_statistic(t)}; statistics passes combine the micro-batches' sums "
                    f"and means over the rows (ops tagged row_sums or row_means), not a {t.op.type}'s")


def _control(op: Operation, fetched: set[Operation], moving: set[Operation]) -> list[Operation]:
    """op's control inputs in the copy. An op that changes no variable does not wait for an update that reads
    no value of the batch's rows but its statistics (`moving`: the moving averages' updates, which TF1's training
    op runs under control_dependencies(UPDATE_OPS), before the whole backward pass) unless it reads that
    variable: in micro-batches those run once, in the update run after them, which changes no value the other
    ops read. A fetched op (the training op) still waits for them all."""
    if op.op_def.ref_inputs or op in fetched:
        return list(op.control_inputs)
    reads = {t.op for t in op.inputs}
    return [c for c in op.control_inputs if c not in moving or c.inputs[0].op in reads]


def _levels(order: list[Operation], stats: list[Tensor], derived: list[Tensor] = ()) -> list[list[Tensor]]:
    """The statistics by pass: a statistic is one pass after the latest statistic it is computed from. A `derived`
    value (computed from statistics without rows: a norm's mean, variance, 1 / sigma and scale / sigma) goes
    with the first pass that can compute it, where there is one, which computes it once a micro-batch anyway (the
    next layer's forward pass normalizes with it) and hands it to the later runs: the backward passes and the
    micro-batch run would each recompute it in every micro-batch (8 launches a norm, on per-channel vectors)."""
    level: dict[Tensor, int] = {}
    own = set(stats)
    for op in order:
        below = max((level.get(t, 0) for t in op.inputs), default=0)
        for t in op.outputs:
            level[t] = below + 1 if t in own else below
    out: list[list[Tensor]] = [[] for _ in range(max((level[t] for t in stats), default=0))]
    for t in stats:
        out[level[t] - 1].append(t)
    for t in derived:
        if 0 < level[t] < len(out):
            out[level[t]].append(t)
    return out


# A norm's gradient; _FusedBatchNormReluGrad is FusedBatchNormGradV3's inputs plus the activation's output, the
# gradient of a _FusedBatchNormRelu (tfplus.engine.rewrite_bn): a norm whose y is its attr `activation` applied.
_NORM_GRADS = ("FusedBatchNormGrad", "_FusedBatchNormReluGrad")


def _norm(op: Operation, ins: list[Tensor], specs: dict) -> tuple[list[Tensor], dict]:
    """A training-mode FusedBatchNorm(V3) from its statistics: its outputs, and what its gradient reads. In fused
    launches (ops/bn_split_ops.py), each a pass over the micro-batch's rows or one over its channels: the moments,
    the per-channel vectors from the merged ones, the normalization with its activation."""
    x, scale, offset, mean_in, var_in = ins
    fmt, eps = op.attrs["data_format"], op.attrs["epsilon"]
    shape = specs[op.inputs[0]].shape
    channels = shape[1 if fmt == "NCHW" else 3]
    count = math.prod(shape) // max(channels, 1)  # the whole batch's values per channel
    # Mean and variance in one pass (Chan's parallel formula for equal counts): each micro-batch's mean, and its
    # variance about that mean; the batch's variance adds the spread of the micro-batches' means about theirs,
    # the mean of their squares less the square of their mean, in float64, where that difference keeps its digits
    # (in float32, as E[x^2] - E[x]^2, a mean 300 sigma from zero leaves the variance 1% off).
    mean_wide, square_wide, within = bn_split_ops.batch_norm_moments(x, fmt, name="moments")
    m, v, rstd, scaled = bn_split_ops.batch_norm_from_moments(mean_wide, square_wide, within, scale, eps,
                                                              name="from_moments")
    y = bn_split_ops.batch_norm_apply(x, m, rstd, scale, offset, fmt, op.attrs.get("activation", ""),
                                      name="normalize")
    unbiased = math_ops.multiply(v, array_ops.constant(np.asarray(count / max(count - 1, 1), x.dtype.np)))
    f = op.attrs.get("exponential_avg_factor", 1.0)
    if f != 1.0:
        def moved(old, new):
            keep_old = math_ops.multiply(old, array_ops.constant(np.asarray(1 - f, x.dtype.np)))
            return math_ops.add(keep_old, math_ops.multiply(new, array_ops.constant(np.asarray(f, x.dtype.np))))
        batch_mean, batch_var = moved(mean_in, m), moved(var_in, unbiased)
    else:
        batch_mean, batch_var = array_ops.identity(m), unbiased
    outs = [y, batch_mean, batch_var, m, v]
    if len(op.outputs) == 6:
        outs.append(array_ops.constant(np.asarray(0, x.dtype.np)))
    # NOTE: a run fed some outputs of an op cannot run it for the others. The normalization reads m and rstd
    # (derived: fed to the runs after the first), not `scaled`, the gradient's derived value (_norm_grad), so that
    # a step without the gradient never reruns from_moments. "local", the micro-batch's own mean, is a statistic
    # itself here (mean_wide): the moments op has no tensor for it alone.
    return outs, {"mean": m, "variance": v, "rstd": rstd, "scaled": scaled, "offset": offset, "epsilon": eps,
                  "local": mean_wide,
                  "statistics": [mean_wide, square_wide, within], "derived": [m, v, rstd]}


def _norm_grad(op: Operation, ins: list[Tensor], norm: dict) -> tuple[list[Tensor], Tensor]:
    """A training-mode FusedBatchNormGrad(V3) whose batch reductions are statistics: its outputs, the last two
    the statistics (d scale and d offset, the micro-batch's sums of dy * x_hat and dy, merged as means: the whole
    batch's over k); and scale / sigma, per channel. Two fused ops: the sums (one pass over dy and x, the
    activation's mask applied as it reads dy) and dx from them (one more), which divides them by its rows' count
    per channel: a micro-batch's average of the sums over a micro-batch's count is the batch's mean."""
    dy, x = ins[:2]
    fmt, activation = op.attrs["data_format"], op.attrs.get("activation", "")
    z = ins[-1] if activation else None  # the activation's output, whose gradient masks dy
    d_scale, d_offset = bn_split_ops.batch_norm_grad_sums(dy, x, norm["mean"], norm["variance"], norm["epsilon"],
                                                          fmt, activation, z, name="sums")
    # dx's mask from x and the offset: its pass (the one after the sums') reads x already and would otherwise
    # normalize it again for z alone (the sums' pass computes z anyway: the filter gradient of the layer above).
    dx, *grads = bn_split_ops.batch_norm_grad_apply(dy, x, norm["mean"], norm["rstd"], norm["scaled"], d_scale,
                                                    d_offset, fmt, activation, z, name="backprop",
                                                    offset=norm["offset"] if MASK_FROM_X else None)
    # The gradients of the scale and offset are the sums too, handed on by dx's op (see its registration). Where
    # nothing reads dx (a norm of the fed batch), sums of their own: dx's statistics then need no pass.
    if not op.outputs[0].consumers():
        grads = bn_split_ops.batch_norm_grad_sums(dy, x, norm["mean"], norm["variance"], norm["epsilon"], fmt,
                                                  activation, z, name="param_sums")
    empty = [array_ops.constant(np.zeros((0,), x.dtype.np)) for _ in op.outputs[3:]]
    return [dx, *grads] + empty + [d_scale, d_offset], norm["scaled"]


def open_rows(order: list[Operation], batch_feeds: set[Tensor]) -> set[Tensor]:
    """The tensors with rows of the batch by their static shapes, which leave a dimension open where the fed
    batch's is: for a step whose shapes at another batch size are not at hand (the planner compares two)."""
    return set(batch_feeds) | {t for op in order for t in op.outputs if _open(t)}


def _open(t: Tensor) -> bool:
    return t._shape is None or any(d is None for d in t._shape)


def values(order: list[Operation], feeds: set[Tensor], batch_feeds: set[Tensor]) -> set[Tensor]:
    """The tensors computed from the values of the batch's rows (not from their shapes alone: a loss's seed)."""
    return _values(order, feeds, batch_feeds, set())


def _values(order, feeds, batch_feeds, fed) -> set[Tensor]:
    """The tensors a micro-batch computes from its own rows' values: not the statistics and batch norms'
    statistics outputs (`fed`: the whole batch's, from the passes), nor the rows' shapes (shape-only ops)."""
    value: set[Tensor] = set(batch_feeds)
    for op in order:
        if not has_tag(op.type, "shape_only") and any(t in value for t in op.inputs):
            value.update(t for t in op.outputs if t not in feeds and t not in fed)
    return value


def _foldable(order, rowed, value, fed, specs) -> dict[Operation, object]:
    """Shape-only ops reading rows whose number meets a statistic (`fed`, or a number computed from one), and no
    value of a micro-batch's rows, before it reaches rows: {op: its whole-batch value}, as the planner's shape
    propagation folds it. (A mean's gradient divides a statistic's gradient by the batch's size; the Bessel factor
    of tf.layers.batch_normalization's rank-3 variance. A mean loss's gradient meets a constant: the micro-batch's
    size, its own mean.)"""
    derived = set(fed)
    # a backward number meets the backward's statistics only (k times the batch's share, module doc Scaling): the
    # gradient of a forward statistic the loss reads (a non-linear function of a mean) is the batch's in each
    # micro-batch, and the Mean's gradient divides it by the micro-batch's count
    counted = {t for t in fed if phase_of(t.op) == "backward"}
    for op in order:
        if any(t in derived for t in op.inputs):
            derived.update(t for t in op.outputs if t not in rowed)
        if any(t in counted for t in op.inputs):
            counted.update(t for t in op.outputs if t not in rowed)
    out = {}
    for op in order:
        if not has_tag(op.type, "shape_only") or not any(t in rowed for t in op.inputs) or len(op.outputs) != 1:
            continue
        cone, clean, meets = set(op.outputs), True, False
        stats = counted if phase_of(op) == "backward" else derived
        for c in order:
            if c._id <= op._id or not any(t in cone for t in c.inputs):
                continue
            if any(t in value and t not in cone for t in c.inputs):
                clean = False
                break
            if any(t in rowed for t in c.outputs):  # rows from the number: scaled by it after a statistic did, fine;
                clean = meets                       # shaped or scaled by it alone, the micro-batch's
                if not clean:
                    break
                continue
            meets = meets or any(t in stats and t not in cone for t in c.inputs)
            cone.update(c.outputs)
        spec = specs.get(op.outputs[0])
        if clean and meets and spec is not None and spec.value is not None:
            out[op] = spec.value
    return out
