"""Micro-batches, in one home for the planner and tfplus.workers: the batch size of a step's feeds, which fed
tensors are rows of the batch and their slices' shapes, whether a step computes statistics of the whole batch
(then no plain split is exact: planner.crossbatch computes them in passes first), the split into a per-micro-batch
run and an update run, and how a fetched tensor's per-slice values merge into the step's.

    >>> from tfplus.planner.batch import slice_shapes
    >>> slice_shapes({"x": (64, 10), "lr": ()}, {"x"}, 4)
    {'x': (16, 10), 'lr': ()}
"""
from __future__ import annotations

from dataclasses import dataclass

from tfplus.framework import Operation, Tensor
from tfplus.planner import crossbatch, stream
from tfplus.planner.liveness import PlanError


def batch_size(feed_shapes: dict) -> int | None:
    """The batch size: the leading dimension of the fed tensors whose placeholders leave it open."""
    dims = [s[0] for t, s in feed_shapes.items() if len(s) and t._shape and t._shape[0] is None]
    return max(set(dims), key=dims.count) if dims else None


def batch_feeds(feed_shapes: dict, batch: int | None) -> set[Tensor]:
    """The fed tensors whose open leading dimension is the batch's (`batch`, batch_size's): the rows a micro-batch
    slices."""
    return {t for t, s in feed_shapes.items() if len(s) and s[0] == batch and t._shape and t._shape[0] is None}


def slice_shapes(feed_shapes: dict, rowed: set, k: int) -> dict:
    """The feed shapes of one of k micro-batches: the `rowed` feeds (batch_feeds) get 1/k of the rows."""
    return {t: ((s[0] // k,) + tuple(s[1:]) if t in rowed else s) for t, s in feed_shapes.items()}


@dataclass
class Split:
    """A step split into a per-micro-batch run (forward, backward) and an update run (split_step)."""
    batch_feeds: set[Tensor]
    batch_dep: set[Tensor]
    grads: list[Tensor]          # batch-dependent inputs of the update ops: accumulated over micro-batches
    a_fetches: list              # each micro-batch run computes: grads + the user's fetches before updates
    b_fetches: list              # what the update run computes: the user's fetches from the updates on
    user_fetches: list[Tensor]   # the user's tensor fetches computed per micro-batch (merged after)


def batch_statistics(order, feeds: set[Tensor], batch_feeds: set[Tensor], rowed: set[Tensor] | None = None
                     ) -> str | None:
    """Why these ops cannot run on plain micro-batches exactly, if one computes statistics of the whole batch
    (planner.crossbatch, which finds them from the dataflow; `rowed`: the tensors with rows of the batch, by
    default those whose static shapes leave a dimension open). Inference-mode batch norm reads fixed statistics:
    row by row like any op."""
    rows = crossbatch.open_rows(order, batch_feeds) if rowed is None else rowed
    return crossbatch.why_not(order, feeds, batch_feeds, rows)


def fetch_merge(t: Tensor, shape: tuple, batch_dep: set, rows: int) -> str:
    """How the values of fetched tensor `t` (`shape`: a micro-batch's) on micro-batches of `rows` rows make the
    step's: 'last' (it does not depend on the batch), 'mean' (a floating-point scalar: a loss averaged over the
    batch) or 'concat' (rows of the batch). PlanError for anything else (an integer count, a batch statistic)."""
    if t not in batch_dep:
        return "last"
    if shape == () and t.dtype.is_floating:
        return "mean"
    if shape[:1] == (rows,):
        return "concat"
    raise PlanError(f"fetched tensor '{t.name}' ({t.dtype.name}, shape {tuple(shape)}) depends on the batch but "
                    "is neither a floating-point scalar to average nor batch-major")


def split_step(order: list[Operation], fetches: list, feeds: set, feed_shapes: dict, batch: int | None,
               rows: set[Tensor] | None = None) -> Split | PlanError:
    """Splits a step (its ops in `order`) into a per-micro-batch run (forward, backward) and an update run (the
    ops that change variables in place, and everything after them), joined by the update ops' batch-dependent
    inputs. `batch`: the leading dimension of the fed tensors whose placeholders leave it open; `rows`: the
    tensors with rows of the batch (batch_statistics). A step whose batch statistics are fed (planner.crossbatch's
    passes computed them) splits like any other."""
    if batch is None:
        return PlanError("cannot micro-batch: no fed tensor has an open batch dimension "
                         "([None, ...] placeholder)")
    rowed = batch_feeds(feed_shapes, batch)
    why = batch_statistics(order, feeds, rowed, rows)
    if why:
        return PlanError(f"cannot micro-batch: {why}")
    batch_dep = stream.batch_dependent(order, feeds, rowed)
    after = stream.after_updates(order, feeds)  # the update ops and everything that must run after them
    grads = []
    for op in order:
        if op in after:
            for t in op.inputs:
                if t in batch_dep and t.op not in after and t not in grads:
                    grads.append(t)
                elif t in batch_dep and t.op in after:
                    return PlanError(f"cannot micro-batch: '{t.name}' depends on the batch and on updated "
                                     "variables")
    for t in grads:  # NOTE: micro-batches' gradients are summed; a sparse one's rows and indices are not sums
        if not t.dtype.is_floating:
            return PlanError(f"cannot micro-batch: the update input '{t.name}' ({t.dtype.name}) depends on the "
                             "batch (the indices of a sparse gradient, tf.IndexedSlices: each micro-batch looks "
                             "up other rows)")
    fetches_a = [f for f in fetches if (f.op if isinstance(f, Tensor) else f) not in after]
    fetches_b = [f for f in fetches if (f.op if isinstance(f, Tensor) else f) in after]
    user = [f for f in fetches_a if isinstance(f, Tensor)]
    a_fetches = grads + [f for f in fetches_a if f not in grads]
    return Split(rowed, batch_dep, grads, a_fetches, fetches_b, user)
