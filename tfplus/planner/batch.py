"""Micro-batches, in one home for the planner and tfplus.workers: the batch size of a step's feeds, which fed
tensors are rows of the batch and their slices' shapes, whether a step computes statistics of the whole batch
(then no plain split is exact: planner.crossbatch computes them in passes first), the split into a per-micro-batch
run and an update run (and which updates may run before it: update_groups), and how a fetched tensor's per-slice
values merge into the step's.

    >>> from tfplus.planner.batch import slice_shapes
    >>> slice_shapes({"x": (64, 10), "lr": ()}, {"x"}, 4)
    {'x': (16, 10), 'lr': ()}
"""
from __future__ import annotations

from dataclasses import dataclass

from tfplus.framework import Operation, Tensor, control_waits, needed_ops
from tfplus.ops.fused_ops import APPLY_GRAD, apply_groups, split_decay
from tfplus.planner import crossbatch, stream
from tfplus.planner import rows as row_rules
from tfplus.planner.liveness import PlanError, phase_of
from tfplus.registry import get_op_def, has_tag


def batch_size(feed_shapes: dict) -> int | None:
    """The batch size: the leading dimension of the fed tensors whose placeholders leave it open; None where
    there is none, or where another fed tensor has that many rows (unsure_rows)."""
    batch = _open_rows(feed_shapes)
    return None if unsure_rows(feed_shapes, batch) else batch


def _open_rows(feed_shapes: dict) -> int | None:
    """The leading dimension most fed tensors whose placeholders leave it open have."""
    dims = [s[0] for t, s in feed_shapes.items() if len(s) and t._shape and t._shape[0] is None]
    return max(set(dims), key=dims.count) if dims else None


def unsure_rows(feed_shapes: dict, batch: int | None) -> list[Tensor]:
    """The fed tensors with `batch` rows whose placeholders do not leave their leading dimension open: of unknown
    rank (tf.placeholder without a shape) or fixed at that size. They may be rows of the batch (Keras's targets)
    or not (a vector of per-class weights), so no split of the step is sure to be exact.
    NOTE: leaving one whole while the open rows are sliced breaks shapes (a reshape to tf.shape(rows)) or, where
    they still fit, silently mixes slices with whole tensors."""
    return [t for t, s in feed_shapes.items() if batch is not None and len(s) and s[0] == batch
            and (t._shape is None or (len(t._shape) and t._shape[0] is not None))]


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
    # grads with rows of the batch, a sparse gradient's (tf.IndexedSlices): concatenated over the micro-batches,
    # not summed (their MemoryPlan.fetch_merge): 'concat' its indices, 'concat_mean' its values, which are then
    # divided by the micro-batch count as the summed gradients are (a mean loss's micro-batch rows are k times the
    # whole batch's: 1/m of each row's gradient, not 1/(k m)); rows of the forward pass a scatter update reads
    # (a center loss's), 'concat' as they are (_of_gradients)
    gathered: dict[Tensor, str]
    # how grads and user fetches without rows merge (merges: 'mean', 'sum', or why neither)
    merges: dict[Tensor, str]
    # the ops of the batch's run that ops of the update run wait for (control inputs): satisfied there, not run
    # again (framework.needed_ops' `done`)
    done: frozenset[Operation] = frozenset()


# Kill switch of gradients added straight into their momentum slots (slot_folds): False gives each an accumulator.
FOLD_SLOTS = True


@dataclass(frozen=True)
class SlotFold:
    """A gradient that the micro-batches add straight into its momentum slot (slot_folds)."""
    update: Operation   # the ApplyMomentum, or _FusedApply of ApplyMomentum, that reads it
    slot: str           # the slot's variable (VariableV2) name
    momentum: float


def slot_folds(order: list[Operation], split: Split, fetches: list, specs: dict) -> dict[Tensor, SlotFold]:
    """The update-run gradients (split.grads) that need no accumulator: a momentum update without Nesterov,
    accum = momentum * accum + grad; var -= lr * accum, is linear in grad, so the micro-batches can scale the slot
    by the momentum once and add their gradients straight into it, and the update run then only does var -= lr *
    accum (the update's "folded" kernel variant). Exact up to the order of the float additions. The weights still
    change only after every micro-batch read them. Only where the gradient feeds that update alone (a clipped, a
    summarized or a fetched gradient keeps its accumulator), the slot is read by nothing else in the step, the
    momentum is a constant (`specs`: its value) and no weight decay is folded into a _FusedApply; an update of
    several variables folds all of them or none. Nesterov (which reads grad itself), Adam (whose v squares it)
    and plain SGD (no slot) keep accumulators."""
    if not FOLD_SLOTS:
        return {}
    readers: dict[Tensor, list[Operation]] = {}
    for op in order:
        for t in op.inputs:
            readers.setdefault(t, []).append(op)
    grads = set(split.grads) - set(split.gathered)
    fetched = {f for f in fetches if isinstance(f, Tensor)}
    out: dict[Tensor, SlotFold] = {}
    for op in order:
        if op.attrs.get("use_nesterov", False):
            continue
        if op.type == "ApplyMomentum":
            groups = [list(op.inputs)]
        elif op.type == "_FusedApply" and op.attrs.get("op") == "ApplyMomentum" and \
                not any(op.attrs.get("decayed") or ()):
            groups = apply_groups("ApplyMomentum", split_decay(list(op.inputs), op.attrs)[0])
        else:
            continue
        momentum = specs.get(groups[0][4])
        if momentum is None or momentum.value is None or momentum.shape != ():
            continue
        if all(g in grads and g not in fetched and readers.get(g) == [op] and accum.op.type == "VariableV2" and
               readers.get(accum) == [op] for _, accum, _, g, _ in groups):
            out.update((g, SlotFold(op, accum.op.name, float(momentum.value))) for _, accum, _, g, _ in groups)
    return out


# Kill switch of each variable's update right after the statistics pass that finishes its gradient
# (update_groups, planned by planner.plan's _Step._early): False leaves every update in the update run.
EARLY_UPDATES = True


@dataclass(frozen=True)
class UpdateGroup:
    """One variable's update inside an update op: its group of a _FusedApply (apply_groups' index), or a whole
    ApplyGradientDescent / ApplyMomentum / ApplyAdam (index 0)."""
    update: Operation
    index: int
    refs: tuple[str, ...]  # the variable and slot names it updates in place


def update_groups(update_order: list[Operation], split: Split, fetches: list, folds: dict) -> dict[Tensor,
                                                                                                UpdateGroup]:
    """The update-run gradients (split.grads) whose variable's update may run before the update run, right after
    the run that merges the gradient (if no later run reads the variable: the planner decides), each with its
    update's group. Only where that early update computes what the update run would: the gradient is read by its
    update alone (not clipped, summarized or fetched, not a sparse one, not added into a slot: `folds`), the
    update's other inputs (learning rate, momentum, decay, Adam's beta powers) are computed from no batch value and
    no variable that an op of the update run not ordered after the update writes (the global step moves after
    the updates), and nothing in the update run reads the variable or its slots before the update. An early share
    runs the update on the values the update run would see: the weights, slots and rates of before the step."""
    if not EARLY_UPDATES:
        return {}
    readers: dict[Tensor, list[Operation]] = {}
    for op in update_order:
        for t in op.inputs:
            readers.setdefault(t, []).append(op)
    grads = set(split.grads)
    free = grads - set(split.gathered) - set(folds) - {f for f in fetches if isinstance(f, Tensor)}
    out: dict[Tensor, UpdateGroup] = {}
    for op in update_order:
        kind = op.attrs.get("op") if op.type == "_FusedApply" else op.type
        if kind not in APPLY_GRAD or any(readers.get(t) for t in op.outputs):
            continue
        groups = apply_groups(kind, split_decay(list(op.inputs), op.attrs)[0]) if op.type == "_FusedApply" \
            else [list(op.inputs)]
        cone = data_cone([op], grads)
        later = _after(op, update_order)
        written = {o.inputs[k].op.name for o in update_order if o is not op and o not in later
                   for k in o.op_def.ref_inputs}
        if any(o.type == "VariableV2" and o.name in written for o in cone) or \
                any(t in split.batch_dep and t not in grads for o in cone for t in o.inputs):
            continue
        refs = get_op_def(kind).ref_inputs
        for j, group in enumerate(groups):
            g = group[APPLY_GRAD[kind]]
            names = tuple(group[k].op.name for k in refs)
            early_reads = [o for t in (group[k] for k in refs) for o in readers.get(t, ())
                           if o is not op and o not in later]
            if g in free and readers.get(g) == [op] and not early_reads:
                out[g] = UpdateGroup(op, j, names)
    return out


def data_cone(fetches: list, feeds: set[Tensor]) -> set[Operation]:
    """The ops whose outputs `fetches` (Operations and Tensors) read through data inputs, stopping at `feeds`: an
    early update's share runs these alone (its control inputs, the moving averages' updates, stay in the update
    run)."""
    seen: set[Operation] = set()
    stack = [f.op if isinstance(f, Tensor) else f for f in fetches]
    while stack:
        op = stack.pop()
        if op not in seen:
            seen.add(op)
            stack.extend(t.op for t in op.inputs if t not in feeds)
    return seen


def _after(op: Operation, order: list[Operation]) -> set[Operation]:
    """The ops of `order` that run after `op` because they depend on it (data or control)."""
    later = {op}
    for o in order:
        if any(t.op in later for t in o.inputs) or any(c in later for c in o.control_inputs):
            later.add(o)
    return later - {op}


def batch_statistics(order, feeds: set[Tensor], batch_feeds: set[Tensor], rowed: set[Tensor] | None = None
                     ) -> str | None:
    """Why these ops cannot run on plain micro-batches exactly, if one computes statistics of the whole batch
    (planner.crossbatch, which finds them from the dataflow; `rowed`: the tensors with rows of the batch, by
    default those whose static shapes leave a dimension open). Inference-mode batch norm reads fixed statistics:
    row by row like any op."""
    rows = crossbatch.open_rows(order, batch_feeds) if rowed is None else rowed
    return crossbatch.why_not(order, feeds, batch_feeds, rows)


def fetch_merge(t: Tensor, shape: tuple, batch_dep: set, rows: int, how: str | None = None) -> str:
    """How the values of fetched tensor `t` (`shape`: a micro-batch's) on micro-batches of `rows` rows make the
    step's: 'last' (it does not depend on the batch), 'concat' (rows of the batch), or `how` for one without rows
    (Split.merges: 'mean' or 'sum', from the dataflow), by default 'mean' for a floating-point scalar (a loss
    averaged over the batch). PlanError for anything else (a batch statistic that neither sums nor averages)."""
    if t not in batch_dep:
        return "last"
    if shape[:1] == (rows,) and shape != ():
        return "concat"
    if how in ("mean", "sum"):
        return how
    if how is None and shape == () and t.dtype.is_floating:
        return "mean"
    raise PlanError(f"fetched tensor '{t.name}' ({t.dtype.name}, shape {tuple(shape)}) depends on the batch but "
                    f"is neither a sum or mean over the batch's rows nor batch-major{': ' + how if how else ''}")


def merges(ts: list[Tensor], order: list[Operation], feeds: set[Tensor], batch_feeds: set[Tensor], rows: set[Tensor]
           ) -> dict[Tensor, str]:
    """How each of `ts` (tensors computed from the batch without rows of it: a gradient, a loss, an accuracy, a
    metric's count) merges over micro-batches: 'mean' for what each micro-batch computes as the batch's (a
    gradient or a loss: k times its share; a mean over the rows, or a sum divided by their count); 'sum' for
    what is each micro-batch's share of it (a sum over the rows, a count from their shapes: tf.metrics' totals
    and counts, a fetched number of correct examples); else why neither (a Max over the rows, or a sum plus a
    mean), with the reason."""
    valued = crossbatch.values(order, feeds, batch_feeds)
    dep = stream.batch_dependent(order, feeds, batch_feeds)
    counts = _counts(order, rows, valued)
    batch_counts = _row_counts(order, rows, valued)
    out: dict[Tensor, str] = {}
    for t in ts:
        if t in rows or t not in dep:
            continue
        if phase_of(t.op) == "backward":
            out[t] = "mean"
            continue
        kinds: dict[str, Operation] = {}
        seen, todo = set(), [(t, False)]
        while todo:
            u, counted = todo.pop()
            if (u, counted) in seen:
                continue
            seen.add((u, counted))
            op = u.op
            if phase_of(op) == "backward":
                kinds.setdefault("mean", op)
                continue
            if any(v in rows for v in op.inputs):  # a reduction over the rows
                mean = counted or has_tag(op.type, "row_means") or _counted_rows(op, rows, batch_counts)
                kind = "mean" if mean else "sum" if has_tag(op.type, "row_sums") else op.type
                kinds.setdefault(kind, op)
                continue
            if u not in valued:  # a count of the rows (else the same number in every micro-batch)
                if u in counts:
                    kinds.setdefault("mean" if counted else "sum", op)
                continue
            counted = counted or any(v in counts for v in op.inputs)
            todo += [(v, counted) for v in op.inputs if v in dep and v not in rows]
        if not kinds:  # the same in every micro-batch
            out[t] = "mean"
        elif len(kinds) == 1 and next(iter(kinds)) in ("mean", "sum"):
            out[t] = next(iter(kinds))
        else:
            out[t] = "; ".join(f"{o.type} '{o.name}' " + ("averages the rows" if k == "mean" else "sums the rows"
                                                           if k == "sum" else "reduces over the rows")
                               for k, o in kinds.items())
    return out


def _counts(order: list[Operation], rows: set[Tensor], valued: set[Tensor]) -> set[Tensor]:
    """The numbers computed from the rows' shapes alone (tf.shape(x)[0], tf.size, tf.losses' count of a scalar
    weight broadcast onto the losses): each micro-batch's count is its share of the batch's. Not a comparison of
    one without rows (count > 0, a guard against an empty batch: TensorFlow's mean_pairwise_squared_error selects
    its sum by it); a mask of the rows from their shapes is (tf.losses' nonzero weights broadcast onto the losses)."""
    counts: set[Tensor] = set()
    for op in order:
        if any(t in counts for t in op.inputs) or has_tag(op.type, "shape_only") and any(t in rows for t in op.inputs):
            counts.update(t for t in op.outputs if t not in valued and (t.dtype.name != "bool" or t in rows))
    return counts


def split_step(order: list[Operation], fetches: list, feeds: set, feed_shapes: dict, batch: int | None,
               rows: set[Tensor] | None = None) -> Split | PlanError:
    """Splits a step (its ops in `order`) into a per-micro-batch run (forward, backward) and an update run (the
    ops that change variables in place, and everything after them), joined by the update ops' batch-dependent
    inputs. `batch`: the leading dimension of the fed tensors whose placeholders leave it open; `rows`: the
    tensors with rows of the batch (batch_statistics). A step whose batch statistics are fed (planner.crossbatch's
    passes computed them) splits like any other."""
    if batch is None:
        unsure = unsure_rows(feed_shapes, _open_rows(feed_shapes))
        if unsure:
            t = unsure[0]
            return PlanError(f"cannot micro-batch: the fed tensor '{t.name}' has as many rows as the batch but "
                             f"{'unknown rank' if t._shape is None else f'the fixed shape {list(t._shape)}'}, so it "
                             "may or may not be rows of it; give its placeholder a shape with an open leading "
                             "dimension (shape=[None, ...]) to split it with the batch")
        return PlanError("cannot micro-batch: no fed tensor has an open batch dimension "
                         "([None, ...] placeholder)")
    rowed = batch_feeds(feed_shapes, batch)
    rows = crossbatch.open_rows(order, rowed) if rows is None else rows
    why = row_rules.why_not(order, feeds, feed_shapes, rowed) or batch_statistics(order, feeds, rowed, rows)
    why = why or _summed_loss(order, feeds, rowed, rows) or _odd_draw(order, rows)
    if why:
        return PlanError(f"cannot micro-batch: {why}")
    batch_dep = stream.batch_dependent(order, feeds, rowed)
    after = stream.after_updates(order, feeds)  # the update ops and everything that must run after them
    # The update run also computes what the updates make of the batch's sums over its rows (gradients) alone:
    # averaging per-micro-batch values of a non-linear function of them (clipping by the global norm) is no
    # function of the batch's sums.
    # (the statistics passes' values fed to the micro-batches count as the batch's values: a gradient taken straight
    # from a backward statistic, scaled by the micro-batch's share, averages to the batch's as any other)
    computed = {t for t in feeds if t.op.type not in ("Placeholder", "PlaceholderWithDefault")}
    valued = crossbatch.values(order, feeds, rowed | computed)
    late = after | _of_merged_sums(order, fetches, valued, after, rows, batch_dep)
    grads = []
    for op in order:
        if op in late:
            for t in op.inputs:
                if t in batch_dep and t.op not in late and t not in grads:
                    grads.append(t)
                elif t in rows and t.op in after:  # the update run has no rows
                    return PlanError(f"cannot micro-batch: '{t.name}' has rows of the batch and depends on "
                                     f"updated variables ({t.op.type} '{t.op.name}' runs after an update whose value "
                                     "it reads, directly or through other ops: a GAN's generator gradients made "
                                     "after the discriminator's train op), while micro-batches update once, after "
                                     "all of them; run the train ops in separate session.run calls, or give a "
                                     "budget the unsplit step fits")
    gathered = {}
    for t in grads:  # NOTE: micro-batches' gradients are summed; a sparse one's rows and indices are concatenated
        if t in rows:
            why_not = _not_sparse(t, grads, rows, after)
            if why_not:
                return PlanError(f"cannot micro-batch: the update input '{t.name}' has rows of the batch but {why_not}"
                                 "; only a sparse gradient's (tf.IndexedSlices: values, indices) rows concatenate")
            gathered[t] = "concat_mean" if t.dtype.is_floating and _of_gradients(t, rows) else "concat"
        elif not t.dtype.is_floating:
            return PlanError(f"cannot micro-batch: the update input '{t.name}' ({t.dtype.name}) depends on the "
                             "batch but has no rows of it: an integer is neither a gradient to average nor a sparse "
                             "gradient's indices to concatenate")
    fetches_a = [f for f in fetches if (f.op if isinstance(f, Tensor) else f) not in late]
    # NOTE: an update's input that sums over the rows (a tf.metrics total or count) is the micro-batches' sum
    how = merges(grads + [f for f in fetches_a if isinstance(f, Tensor)], order, feeds, rowed, rows)
    for t in grads:
        if how.get(t, "mean") not in ("mean", "sum"):
            return PlanError(f"cannot micro-batch: the update input '{t.name}' depends on the batch, but {how[t]}")
    fetches_b = [f for f in fetches if (f.op if isinstance(f, Tensor) else f) in late]
    user = [f for f in fetches_a if isinstance(f, Tensor)]
    a_fetches = grads + [f for f in fetches_a if f not in grads]
    b_feeds = (set(feeds) - rowed) | set(grads)
    waited = _waited(order, fetches_b, b_feeds, late, batch_dep)
    a_fetches += [c for c in waited if c not in a_fetches]
    a_ops = needed_ops(a_fetches, set(feeds))
    done = control_waits(fetches_b, b_feeds, a_ops.__contains__)
    return Split(rowed, batch_dep, grads, a_fetches, fetches_b, user, gathered, how, done)


def _odd_draw(order: list[Operation], rows) -> str | None:
    """Why a micro-batch would not draw its rows of the unsplit step's random numbers, if a random op draws a leading
    dimension the graph leaves open that is not the batch's rows (`rows`: tensor(s) with rows of the batch), such as
    tf.random_uniform(tf.shape(k)) of a fed k of its own length: each micro-batch draws at its offset in it
    (KernelContext.random_draw), so they would draw other numbers than the step."""
    for op in order:
        t = op.outputs[0] if has_tag(op.type, "random") and op.outputs else None
        if t is not None and t._shape and t._shape[0] is None and t not in rows:
            return (f"{op.type} '{op.name}' draws random numbers along an open leading dimension that is not the "
                    "batch's rows, and each micro-batch would draw at its own offset in it; give the draw a fixed "
                    "shape, or run without micro-batching")
    return None


def _of_gradients(t: Tensor, rows: set[Tensor]) -> bool:
    """Whether rows `t` of an update's input are computed from the backward pass's rows (a sparse gradient's values,
    scaled by a learning rate as they may be): a mean loss's micro-batch gradients are k times the whole batch's
    share, so their rows are divided by k. Rows of the forward pass alone (a center loss's tf.scatter_sub of
    0.5 * (centers - features)) are each row's value whatever the micro-batch: concatenated as they are."""
    seen, todo = set(), [t]
    while todo:
        u = todo.pop()
        if u in seen:
            continue
        seen.add(u)
        if phase_of(u.op) == "backward":
            return True
        todo += [v for v in u.op.inputs if v in rows]
    return False


def _waited(order: list[Operation], fetches_b: list, b_feeds: set[Tensor], late: set[Operation],
            batch_dep: set[Tensor]) -> list[Operation]:
    """The ops outside the update run that its ops wait for (control inputs) and that need the batch (they read it,
    or wait for an op that does): Keras's training function orders its updates after the loss and the metrics,
    a TF1 script gates its train op on them (tf.control_dependencies([loss, acc]), which the gradients and the
    optimizer's constants made inside it wait for too), an imported graph's updates wait for the reads of the
    weights. The update run has no batch to compute them again, and waits only for their order: the batch's run
    computes them with each micro-batch (a fetched one's value merged as any fetch), and the update run treats
    them as done (Split.done). Control edges carry no value, so no merge is needed for them."""
    reads: set[Operation] = set()
    for op in order:
        if any(t in batch_dep for t in op.inputs) or any(c in reads for c in op.control_inputs):
            reads.add(op)
    return sorted(control_waits(fetches_b, b_feeds, lambda c: c in reads and c not in late), key=lambda op: op._id)


def _summed_loss(order: list[Operation], feeds: set[Tensor], batch_feeds: set[Tensor], rows: set[Tensor]
                 ) -> str | None:
    """Why averaging the micro-batches' losses and gradients is not the step's, if a loss sums over the batch's
    rows (summed_losses)."""
    sums, why = summed_losses(order, feeds, batch_feeds, rows)
    if why or not sums:
        return why
    loss, op = sums[0]
    return (f"the loss '{loss.name}' sums over the batch ({op.type} '{op.name}'), and micro-batches average their "
            "losses and gradients (exact for means over the batch): run it in a tf.Session with a memory budget "
            "(which scales each micro-batch's sum by the micro-batch count: engine.step.scale_summed_losses), "
            "divide it by the batch size (tf.reduce_mean) or run without micro-batching")


def summed_losses(order: list[Operation], feeds: set[Tensor], batch_feeds: set[Tensor], rows: set[Tensor]
                  ) -> tuple[list[tuple[Tensor, Operation]], str | None]:
    """The reductions over the batch's rows that sum them on the way to a loss (what tf.gradients seeds: the input
    of a shape-only op of the backward, its ones), as (loss, reduction op) pairs: those (tag row_sums) that no count
    of the rows (a number from their shapes alone: tf.losses' count, tf.shape(x)[0]) divides on the way to the
    loss. Each micro-batch's sum is 1/k of the batch's, so their average is too; scaled by k, it is the batch's
    (a constant factor on the way, a mean's share beside it or a term without rows do not change that). With the
    reason micro-batches cannot make a loss exact (a reduction over the rows that neither sums nor averages them:
    a Max), if one cannot. A reduction of the fed rows alone (tf.losses' sum of per-example weights, a sequence
    mask's sum: crossbatch.fed_only) is no term of the loss: the statistics passes give every micro-batch the
    batch's, so a sum divided by it is a sum like any other (scaled by k, it merges exactly)."""
    valued = crossbatch.values(order, feeds, batch_feeds)
    counts, batch_counts = _counts(order, rows, valued), _row_counts(order, rows, valued)
    losses = [op.inputs[0] for op in order if has_tag(op.type, "shape_only") and phase_of(op) == "backward" and
              op.inputs and op.inputs[0] in valued and op.inputs[0] not in rows and
              phase_of(op.inputs[0].op) == "forward"]
    # TensorFlow seeds its gradients with ones of the loss's static shape, reading nothing of it: a loss is also the
    # top of the forward pass, a value without rows of an op whose outputs no forward op reads (not a tf.while_loop's
    # counter beside its state), which has a gradient function in the step (Operation.grad_of; an imported graph's
    # from TensorFlow's gradient scopes)
    differentiated = {op.grad_of for op in order if op.grad_of is not None}
    read = {t for op in order if phase_of(op) == "forward" for t in op.inputs}
    # (not a map's gradient's recomputation of a row's forward ops, unrolled: planner.maps)
    losses += [t for op in order if op in differentiated and phase_of(op) == "forward" and
               not op.attrs.get("_row_map") and not any(u in read for u in op.outputs)
               for t in op.outputs if t in valued and t not in rows]
    found: list[tuple[Tensor, Operation]] = []
    for loss in dict.fromkeys(losses):
        seen, todo = set(), [(loss, False)]
        while todo:
            t, counted = todo.pop()
            if (t, counted) in seen:
                continue
            seen.add((t, counted))
            op = t.op
            if crossbatch.fed_only(t, feeds):
                continue
            if any(u in rows for u in op.inputs):  # a reduction over the rows
                if counted or has_tag(op.type, "row_means") or _counted_rows(op, rows, batch_counts):
                    continue
                if not has_tag(op.type, "row_sums"):
                    return found, (f"the loss '{loss.name}' reduces over the batch by {op.type} '{op.name}', "
                                   "which neither sums nor averages the rows: no merge of micro-batches makes it")
                if all(op is not o for _, o in found):
                    found.append((loss, op))
                continue
            counted = counted or any(u in counts for u in op.inputs)
            todo += [(u, counted) for u in op.inputs if u in valued and u not in rows]
    return found, None


def _counted_rows(op: Operation, rows: set[Tensor], counts: set[Tensor]) -> bool:
    """Whether rows that `op` reduces were divided by the batch's number of rows (`counts`: row_counts, and the
    numbers computed from them alone) before: the sum of each example's loss divided by the batch size
    (tf.reduce_sum(losses / tf.cast(tf.shape(x)[0], tf.float32))), a mean. Each micro-batch's is its own rows'
    mean: scaled by k as a sum, it was k times the batch's. (A count that shapes rows, tf.reshape(x, [n, -1]),
    divides nothing.)"""
    seen, todo = set(), [t for t in op.inputs if t in rows]
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        if t.op.type in row_rules.DIVISIONS and t.op.inputs[1] in counts:
            return True
        todo += [u for u in t.op.inputs if u in rows]
    return False


def _row_counts(order: list[Operation], rows: set[Tensor], valued: set[Tensor]) -> set[Tensor]:
    """The batch's number of rows (planner.rows.row_counts: tf.shape(x)[0], tf.size(x)) and the numbers without
    rows computed from it and no value of the batch (n - 1, a cast)."""
    axes = rows if isinstance(rows, dict) else dict.fromkeys(rows, 0)  # open_rows' sets: the batch on axis 0
    counts = row_rules.row_counts(order, axes)
    for op in order:
        if any(t in counts for t in op.inputs) and not any(t in valued for t in op.inputs):
            counts.update(t for t in op.outputs if t not in rows)
    return counts


# Ops whose output is the sum of their inputs (or a view of its one input): a sum of the rows' sums is one, so the
# micro-batch run may compute it and the accumulators hold the fewer bytes.
_SUMS = ("AddN", "Add", "AddV2", "Identity")


def _of_merged_sums(order: list[Operation], fetches: list, valued: set[Tensor], after: set[Operation],
                    rows: set[Tensor], batch_dep: set[Tensor]) -> set[Operation]:
    """The ops computed from the batch's sums over its rows (no rows in or out; `valued`: the tensors computed
    from the values of the batch's rows) only for the updates or the fetches, past the sums of sums (_SUMS): run
    once on the merged sums, they are the unsplit step's. (A weight decay's gradient reads the loss's seed, a
    shape's ones: it stays where it is; so does an op that reads a number from the micro-batch's shape, a summed
    loss's scale B / m: the update run has no micro-batch.)"""
    fetched = {f.op if isinstance(f, Tensor) else f for f in fetches}
    consumers: dict[Tensor, list[Operation]] = {}
    for op in order:
        for t in op.inputs:
            consumers.setdefault(t, []).append(op)
    # a shape-only op of a tensor without rows (clip_by_norm's zeros_like of a gradient's squared norm) gives the
    # same number in every micro-batch: no micro-batch's shape
    fixed = {t for op in order if has_tag(op.type, "shape_only") and not any(u in rows for u in op.inputs)
             for t in op.outputs}
    late: set[Operation] = set()
    for op in reversed(order):
        if op in after or not any(t in valued for t in op.inputs) or \
                any(t in rows for t in list(op.inputs) + list(op.outputs)) or \
                any(t in batch_dep and t not in valued and t not in fixed for t in op.inputs):
            continue
        if all(c in after or c in late for t in op.outputs for c in consumers.get(t, ())) and \
                (op in fetched or any(consumers.get(t) for t in op.outputs)):
            late.add(op)
    # a sum of sums whose inputs are all sums stays in the micro-batch run
    early = set()
    for op in order:
        if op in late and (op.type in _SUMS or has_tag(op.type, "view")) and \
                all(t.op not in late or t.op in early for t in op.inputs):
            early.add(op)
    return late - early


def _not_sparse(t: Tensor, grads: list[Tensor], rows: set[Tensor], after: set) -> str:
    """Why update input `t`, with rows of the batch, is not a sparse gradient's values or indices ('' if it is):
    every update op that reads it names rows by an input 'indices' that is the batch's too, as the sparse updates do
    (ops/sparse_training_ops.py)."""
    for op in t.consumers():
        if op not in after:
            continue
        names = op.op_def.inputs
        if "indices" not in names:
            return f"{op.type} '{op.name}' reads it and takes no indices"
        indices = op.inputs[names.index("indices")]
        if indices not in grads or indices not in rows:
            return f"{op.type} '{op.name}' reads it with indices '{indices.name}' that do not depend on the batch"
    return ""
