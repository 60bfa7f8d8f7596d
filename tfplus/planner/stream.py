"""Streamed prefix: only the first layers of a step run in micro-batches.

A step's largest activations are often those of its first layers (a CNN's first block at full resolution),
and the rest of the step would fit at full batch. Given a cut tensor B that every path from the fed batch to the
loss passes through (a pool's output, the frozen features of a fine-tuned network) and k micro-batches of m
rows, the step runs as:

1. "prefix" (k times, on rows j*m:(j+1)*m of the fed batch): the forward ops from the batch to B; B's rows are
   copied into a full-batch buffer.
2. "rest" (once, full batch, B fed): the rest of the forward pass, the loss, the backward pass down to B. When
   the prefix trains nothing (fine-tuning the last layers) this is the whole rest of the step, updates
   included, and the step ends here.
3. "prefix backward" (k times, rows j): the prefix's forward again (recomputed, all but what is `kept`) and
   its backward ops, reading rows j of the boundary gradients (the full-batch tensors of phase 2 that they
   read, e.g. dL/dB). The prefix backward ends in sums over the rows (filter and bias gradients): those are
   summed over the micro-batches (a mean loss's 1/N is already inside dL/dB). Prefix tensors that the caller
   names as `kept` (planner.compact.keeping's argmax) are instead copied, as B's rows are, into full-batch
   buffers in phase 1 and read back per micro-batch here: what only they needed is not recomputed.
4. "update" (once): what the update ops need from those sums (e.g. adding weight decay) and the updates.

Exact up to float summation order, provided the prefix treats rows independently (no batch statistics:
batch.batch_statistics) and, when it has a backward pass, draws no random numbers (recomputing would draw new
ones). A prefix without one may draw: each micro-batch draws its rows of the step's one draw (the executor's
Bound._stream_passes), so the streamed step draws the unstreamed step's numbers.

Lanes (cpu, several threads): small micro-batches leave a kernel's threads little to share (a conv call on 8
images in 2 threads runs 4-image tasks, and the threads meet at every op), so phase 1 may instead run in
`lanes` at once, one thread each: lane i has its own copy of the prefix run's buffers (its kernels' scratch
declared for one thread) and takes the next micro-batch whenever it gets free. A micro-batch's result does not
depend on its lane, so the step is as deterministic as without lanes. A prefix that draws random numbers runs
without lanes (the draws would come in a varying order). The copies cost memory; the planner may divide the
scratch of the convolution where the prefix run peaks further (plan._Step._balanced) to pay for them.

Ops are assigned to phases structurally (`find`); a tensor that does not fit the scheme (a sum over rows that is
not a plain sum, a boundary tensor without the batch's rows) makes B no cut: PlanError, saying why.
"""
from __future__ import annotations

from typing import NamedTuple

from tfplus.framework import Operation, Tensor, control_waits, needed_ops
from tfplus.planner.liveness import PlanError, alias_root, phase_of
from tfplus.registry import has_tag, tagged


class Cut(NamedTuple):
    """A step streamed at cut tensor `tensor`: what each phase computes from what (see the module doc)."""
    tensor: Tensor
    prefix: set[Operation]          # the forward ops from the batch to the cut that depend on the batch
    backward: set[Operation]        # the prefix's backward ops (phase 3); empty when the prefix trains nothing
    prefix_feeds: set[Tensor]       # phase 1: the fed tensors it reads (rows: the fed batch ones)
    rest_fetches: list              # phase 2
    rest_feeds: set[Tensor]
    backward_feeds: set[Tensor]     # phase 3 (rows of the `rows` among them)
    partials: list[Tensor]          # phase 3's sums over rows, summed over micro-batches
    update_fetches: list            # phase 4
    update_feeds: set[Tensor]
    rows: set[Tensor]               # the tensors phases 1 and 3 read a micro-batch's rows of
    boundary: list[Tensor]          # the full-batch tensors of phase 2 that phase 3 reads rows of
    kept: list[Tensor]              # phase 2's fetches that later phases or the caller read
    saved: tuple = ()               # prefix tensors phase 1 keeps at full batch for phase 3 (rows of them)
    # per phase after the first (rest, prefix backward, update): the ops of earlier phases that its ops wait for
    # (control inputs: the loss that Keras's updates wait for), satisfied there, not run again
    done: tuple = (frozenset(), frozenset(), frozenset())
    backward_waits: list = []       # ops phase 3 runs beside its partials, as the updates wait for them


def after_updates(order: list[Operation], feeds: set[Tensor]) -> set[Operation]:
    """The ops that change variables in place, and every op that must run after one of them: what reads their
    outputs or waits for them, and what reads a variable that one of them updated earlier in `order` (the
    executor's creation order, which every plan keeps: liveness.dependency_graph; a GAN's generator gradients made
    after the discriminator's update read the updated weights)."""
    after: set[Operation] = set()
    written: set[Tensor] = set()
    for op in order:
        if op.op_def.ref_inputs or any(t.op in after and t not in feeds for t in op.inputs) or \
                any(c in after for c in op.control_inputs) or any(alias_root(t, feeds) in written for t in op.inputs):
            after.add(op)
        written.update(op.inputs[k] for k in op.op_def.ref_inputs)
    return after


def batch_dependent(order: list[Operation], feeds: set[Tensor], batch_feeds: set[Tensor]) -> set[Tensor]:
    """The tensors computed from the fed batch (and the batch feeds themselves)."""
    dep = set(batch_feeds)
    for op in order:
        if any(t in dep for t in op.inputs):
            dep.update(t for t in op.outputs if t not in feeds)
    return dep


def find(order: list[Operation], feeds: set[Tensor], fetches: list, batch_feeds: set[Tensor],
         major: set[Tensor], b: Tensor, clones: frozenset = frozenset(), kept: frozenset = frozenset()) -> Cut:
    """The phases of the step (`order`, all its ops in a topological order, run from `feeds` to compute
    `fetches`) streamed at cut `b`. `major` are the tensors whose leading axis is the batch's rows; `clones` the
    step's recomputing ops (planner.recompute's copies: forward ops that run in the backward pass), of which
    those that read the prefix's rows belong to the prefix's backward (phase 3 runs them on each micro-batch's
    rows) rather than to a path that bypasses the cut; `kept`, prefix tensors to keep from phase 1 for phase 3
    where it reads them (Cut.saved). Raises PlanError saying why `b` is no cut."""
    def no(why: str) -> PlanError:
        return PlanError(f"cannot stream the step's prefix up to '{b.name}': {why}")
    dep = batch_dependent(order, feeds, batch_feeds)
    if b not in dep or b not in major or b in feeds:
        raise no("it is not a tensor computed from the fed batch with the batch's rows as its first axis")
    in_step = set(order)
    prefix = {op for op in needed_ops([b], feeds) if op in in_step and any(t in dep for t in op.outputs)}
    prefix_feeds = {t for op in needed_ops([b], feeds) for t in op.inputs if t in feeds}
    after = after_updates(order, feeds)
    if prefix & after:
        raise no("the prefix reads variables after their update")
    # The prefix backward: ops outside the prefix reading its rows (its tensors other than the cut, or the batch
    # it reads), and so on, up to sums over the rows (partials).
    rowed = {t for op in prefix for t in op.outputs} - {b} | (prefix_feeds & batch_feeds)
    backward: set[Operation] = set()
    partials: list[Tensor] = []
    for op in order:
        if op in prefix or op in after or not any(t in rowed for t in op.inputs):
            continue
        if phase_of(op) == "forward" and op not in clones:
            read = next(t.name for t in op.inputs if t in rowed)
            raise no(f"{op.type} '{op.name}' reads '{read}' of the prefix: a path from the batch bypasses the cut")
        if op in clones and not has_tag(op.type, "shape_only") and any(t not in major for t in op.outputs):
            # NOTE: a recomputed reduction over the rows (a loss's fused mean, whose gradient output is 1/m of the
            # rows it reads) would see one micro-batch's rows in phase 3: m of them, not the batch's
            raise no(f"{op.type} '{op.name}' recomputes a reduction over the batch's rows, which phase 3 would run "
                     "on each micro-batch's rows alone")
        backward.add(op)
        for t in op.outputs:
            # A backward op tagged "row_sums" (a weight gradient; the graph rewrite's ReLU gradient also gives its
            # bias gradient) gives per micro-batch partial sums that add up to the full batch's. Any other op that
            # drops the batch axis stops a cut.
            if has_tag(op.type, "row_sums") and t not in major and any(u in major for u in op.inputs if u in rowed):
                partials.append(t)
            else:
                rowed.add(t)
    # What turns the partial sums into the updates' inputs (weight decay added, ...) runs in the update phase.
    finish: set[Operation] = set()
    made = set(partials)
    for op in order:
        if op not in after and op not in backward and any(t in made for t in op.inputs):
            finish.add(op)
            made.update(op.outputs)
    tensor_fetches = [f for f in fetches if isinstance(f, Tensor)]
    for f in tensor_fetches:
        if f.op in prefix or f.op in backward:
            raise no(f"the fetched tensor '{f.name}' is computed per micro-batch")
    for op in order:
        if op not in backward and op not in prefix:
            bad = [t.name for t in op.inputs if t in rowed]
            if bad:
                raise no(f"{op.type} '{op.name}' reads {bad}, computed per micro-batch, and is not part of the "
                         f"prefix's backward pass (only {', '.join(tagged('row_sums'))} may sum over the rows)")
    others = {t for t in feeds if t not in batch_feeds}
    if not backward:  # the rest is the whole step after the cut
        rest_feeds = (feeds - (prefix_feeds & batch_feeds)) | {b}
        done = _waited(fetches, rest_feeds, prefix)
        _check_apart(needed_ops(fetches, rest_feeds, done), prefix, no)
        return Cut(b, prefix, backward, prefix_feeds, list(fetches), rest_feeds, set(), [], [], set(),
                   prefix_feeds & batch_feeds, [], [], (), (done, frozenset(), frozenset()))
    if any(op.op_def.stateful and op.type != "VariableV2" for op in needed_ops([b], feeds)):
        raise no("the prefix draws random numbers (dropout?), so its forward pass cannot be recomputed for its "
                 "backward pass")
    computed = in_step - prefix - backward - finish - after

    def from_rest(ops):
        return list(dict.fromkeys(t for op in order if op in ops for t in op.inputs
                                  if t in dep and t.op in computed and t not in feeds))
    boundary = from_rest(backward)
    for t in boundary:
        if t not in major:
            raise no(f"the prefix's backward pass reads '{t.name}', which depends on the whole batch and has no "
                     "row per example")
    for op in backward:
        # NOTE: a max's gradient finds the argmax as Equal(max, x): x recomputed in phase 3 by other kernel calls
        # (micro-batches, threads) than phase 1's may differ in its last bit from the max the rest computed, and
        # then no entry is the max, 0 / 0 (a TCN's max over time streamed gave NaN weights)
        compared = [t.name for t in op.inputs if t in boundary]
        if compared and any(t in rowed for t in op.inputs) and all(t.dtype.name == "bool" for t in op.outputs):
            raise no(f"{op.type} '{op.name}' compares '{compared[0]}' of the rest of the step with a tensor its "
                     "backward pass recomputes, whose rounding may differ")
    if any(t in batch_feeds for op in finish | after for t in op.inputs):
        raise no("an update reads the fed batch itself")
    to_update = from_rest(finish | after)
    before = [f for f in tensor_fetches if f.op not in after and f.op not in finish]
    handed = list(dict.fromkeys(boundary + to_update + before))
    rest_feeds = (feeds - (prefix_feeds & batch_feeds)) | {b}
    saved = tuple(t for op in order if op in prefix for t in op.outputs
                  if t in kept and any(c in backward for c in t.consumers()))
    base_feeds = others | {t for op in backward for t in op.inputs if t in batch_feeds} | \
        (prefix_feeds & batch_feeds) | set(boundary)
    # An op that phase 3 reruns for another output of its own (a pool for its output, where only its argmax is
    # kept) writes them all: what it writes is not kept.
    while True:
        rerun = needed_ops(partials, base_feeds | set(saved))
        if not any(t.op in rerun for t in saved):
            break
        saved = tuple(t for t in saved if t.op not in rerun)
    backward_feeds = base_feeds | set(saved)
    update_feeds = others | set(partials) | set(to_update)
    update_fetches = [f for f in fetches if (f.op if isinstance(f, Tensor) else f) in after | finish]
    # What the prefix backward and the updates wait for of the earlier phases ran there (the rest runs those of
    # its own that it would not run otherwise: an accuracy the train op waits for)
    backward_done = _waited(partials, backward_feeds, prefix | computed)
    update_done = _waited(update_fetches, update_feeds, prefix | computed | backward)
    waits = sorted((c for c in backward_done | update_done if c in computed), key=lambda op: op._id)
    rest_fetches = handed + [c for c in waits if c not in needed_ops(handed, rest_feeds)]
    rest_done = _waited(rest_fetches, rest_feeds, prefix)
    # (TensorFlow's gradients wait for every gradient of their op: tf.tuple's group_deps, a dx beside the dw)
    backward_waits = sorted(update_done & (backward - needed_ops(partials, backward_feeds, backward_done)),
                            key=lambda op: op._id)
    runs_backward = needed_ops(partials + backward_waits, backward_feeds, backward_done)
    _check_apart(needed_ops(rest_fetches, rest_feeds, rest_done), prefix | backward | finish | after, no)
    _check_apart({op for op in runs_backward if any(t in dep for t in op.outputs)}, computed | finish | after, no)
    _check_apart({op for op in needed_ops(update_fetches, update_feeds, update_done)
                  if any(t in dep for t in op.outputs)}, prefix | backward | computed, no)
    rows = (backward_feeds | prefix_feeds) & (batch_feeds | set(boundary) | set(saved))
    return Cut(b, prefix, backward, prefix_feeds, rest_fetches, rest_feeds, backward_feeds, partials, update_fetches,
               update_feeds, rows, boundary, handed, saved, (rest_done, backward_done, update_done), backward_waits)


def _waited(fetches: list, feeds: set[Tensor], ran: set[Operation]) -> frozenset[Operation]:
    """The ops of `ran` (an earlier phase's) that the ops computing `fetches` from `feeds` wait for (control
    inputs), as planner.batch.split_step's update run waits for its batch's run: satisfied there, not run again.
    A NoOp of control inputs alone (tf.group, tf.tuple's group_deps) computes nothing: it runs where it is waited
    for, and what it waits for is looked at in turn (a group of backward ops sits in no phase of its own)."""
    return control_waits(fetches, feeds, lambda c: c in ran and bool(c.inputs or c.outputs))


def _check_apart(ops: set[Operation], others: set[Operation], no) -> None:
    both = sorted(ops & others, key=lambda op: op._id)
    if both:
        raise no(f"{both[0].type} '{both[0].name}' would have to run in two phases (another path from the batch "
                 "bypasses the cut)")
