"""Whether a step computes each row of the batch from that row alone, as micro-batches and the workers assume.

Micro-batches (a memory budget) and the cpu workers run a step on slices of the fed batch's rows and put the
slices' results together: concatenated rows, gradients averaged (planner.batch). That is the step's result only
where every op between the fed rows and the results keeps them row by row along axis 0, or reduces over them into
a statistic that planner.crossbatch and planner.batch.merges know how to merge. An op that moves, picks or mixes
rows (x[:25] of a tower, tf.concat([real, fake], 0) sliced back, a gather of rows by index, a time-major
transpose, a cumsum over the batch) would see its micro-batch's rows only: a wrong result, silently (issue 34).

Each op says which it is at registration (registry.register_rows; the rules in ops/, helpers in ops/row_rules.py),
reading its attributes and constant inputs, and an op that says nothing is refused where it meets the rows, so a
new op cannot break a split step. `rows` are the tensors with rows of the batch: the planner's are those whose shapes
follow the batch size at two batch sizes (batch_axes), each with the axis that holds them, which rules read: a
time-major RNN's transpose moves the rows to axis 1, and its per-step slices of axis 0 keep them.

Picking rows by index is row by row where each row picks its own entries by the row index, tf.range over the batch
(own_picks): tf.gather_nd(probs, tf.stack([tf.range(tf.shape(x)[0]), labels], 1)), an RNN's last relevant output,
tf.reverse_sequence, tf.gather(..., batch_dims=1), and their gradients.

    >>> import tfplus as tf
    >>> x = tf.placeholder(tf.float32, [None, 20])
    >>> half = tf.reduce_mean(x[:25])
    >>> why_not(half.graph.get_operations(), {x}, {x: (50, 20)}, {x})  # doctest: +ELLIPSIS
    "StridedSlice 'strided_slice' takes rows :25 of the batch ..."
"""
from __future__ import annotations

import numpy as np

from tfplus.framework import Graph, Operation, Tensor, needed_ops, topo_order
from tfplus.ops.row_rules import ONE_ROW, Rows, const
from tfplus.planner import maps
from tfplus.planner.liveness import PlanError, _fold, phase_of, static_specs
from tfplus.registry import TensorSpec, has_tag

# What a refusal adds: how to run such a step.
ADVICE = ("feed such parts as placeholders of their own (a tower's slice, a GAN's real and fake batches) or give a "
          "budget the unsplit step fits")


def why_not(order: list[Operation], feeds: set[Tensor], feed_shapes: dict, batch_feeds: set[Tensor]) -> str | None:
    """Why the step (its ops in `order`, fed `feed_shapes`) does not keep the rows of its batch (`batch_feeds`: the
    fed tensors with them on axis 0) row by row: the first op whose rule (registry.register_rows) refuses, or that
    declares none, with what it does; None if every op that meets the rows keeps them or reduces over them."""
    rows = batch_axes(order, feed_shapes, batch_feeds)
    if isinstance(rows, str):
        return rows
    rows.valued.update(batch_feeds)
    _spread(order, rows.valued, _values_flow(set(feed_shapes)))
    _spread(order, rows.counts, _counts_flow(rows))
    rows.sized.update(rows.counts)
    # (not through a shape: tf.shape(x)[1] of a tensor whose rows a count laid out is its time axis)
    _spread(order, rows.sized, lambda op, found: not has_tag(op.type, "shape_only") and
            any(t in found for t in op.inputs))
    scaled = _scaled_by_count(order, rows)
    if scaled:
        return f"{scaled}; {ADVICE}"
    # a loop over the rows first: the gathers of its elements before it would be refused less tellingly
    found = next(((op, _trips(op, rows)) for op in order if op.type == "While" and _trips(op, rows)), None) or \
        _refusal(order, rows, None)
    if found is None:
        return None
    op, why = found  # a control-flow op's says how to write it
    return f"{op.type} '{op.name}' {why}; " + ("or give a budget the unsplit step fits" if op.type in CONTROL_FLOW
                                               else ADVICE)


def _refusal(order: list[Operation], rows: Rows, phase: str | None) -> tuple[Operation, str] | None:
    """The first op of `order` whose rule refuses the rows, and what it does. `phase`: that of the control-flow op
    whose sub-graph `order` is (None for the step's own ops): in a forward one, a reduction over the rows (or a
    training-mode batch norm: tag cross_batch) is a statistic of the batch that neither planner.crossbatch nor the
    micro-batches' merges see."""
    own = own_picks(order, rows)
    sizing = _read_for_shapes(order)
    for op in order:
        # An update (ref inputs) runs after the micro-batches on their merged gradients (planner.batch.split_step
        # checks those); a shape-only op reads no values; an op without inputs makes no rows (a placeholder is fed).
        # A control-flow op that reads the batch's values without rows may still branch or loop on them.
        # (A copy of a map of the rows unrolled for micro-batches of its rows was checked as the loop: maps.)
        if not op.inputs or op in own or op.op_def.ref_inputs or has_tag(op.type, "shape_only") or \
                op.attrs.get("_row_map") or \
                not any(t in rows for t in (*op.inputs, *op.outputs)) and \
                not (op.type in CONTROL_FLOW and any(t in rows.valued for t in op.inputs)):
            continue
        if op.type in CONTROL_FLOW and op not in rows.inner:
            rows.inner[op] = _control(op, rows, phase or phase_of(op))
        rule = op.op_def.rows
        why = rule(op, rows) if rule is not None else (
            "declares no rule for the batch's rows (registry.register_rows), so it may move, pick or mix them")
        if not why and phase == "forward" and op.outputs and (not any(t in rows for t in op.outputs) or (
                has_tag(op.type, "cross_batch") and op.attrs.get("is_training", True))):
            why = ("reduces over the batch's rows inside control flow (a batch norm's statistics, a mean): each "
                   "micro-batch would use its own rows' statistic there; compute it outside the tf.cond or "
                   "tf.while_loop, or feed the tf.cond's predicate to a Session with a memory budget (which plans the "
                   "branch it takes as straight-line ops, planner.crossbatch included)")
        # (one row whose values only shape-only ops read, tf.map_fn's first row telling its outputs' shapes where
        # they are not static: every row of a tensor has the same shape, in any micro-batch)
        if why and not (op in sizing and why.startswith(ONE_ROW)):
            return op, why
    return None


def _read_for_shapes(order: list[Operation]) -> set[Operation]:
    """The ops whose outputs only shape-only ops read, directly or through other such ops."""
    readers: dict[Tensor, list[Operation]] = {}
    for op in order:
        for t in op.inputs:
            readers.setdefault(t, []).append(op)
    out: set[Operation] = set()
    for op in reversed(order):
        consumers = [c for t in op.outputs for c in readers.get(t, ())]
        if op.outputs and consumers and all(has_tag(c.type, "shape_only") or c in out for c in consumers):
            out.add(op)
    return out


# The control-flow ops, which run sub-graphs (ops/control_flow_ops.py): their rows are those of the ops inside.
CONTROL_FLOW = ("If", "While")


def subgraphs(op: Operation) -> list[tuple[str, Graph, list[Tensor]]]:
    """The sub-graphs control-flow op `op` runs: (what it is, the graph, the op's inputs that its placeholders,
    all_inputs, take)."""
    if op.type == "If":
        n, ins = op.attrs["n_then"], op.inputs[1:]
        return [("branch true_fn", op.attrs["then_branch"], ins[:n]), ("branch false_fn", op.attrs["else_branch"],
                                                                         ins[n:])]
    n, n_cond = len(op.attrs["T"]), op.attrs["n_cond"]
    loop = op.inputs[:n]
    return [("loop condition", op.attrs["cond"], loop + op.inputs[n:n + n_cond]),
            ("loop body", op.attrs["body"], loop + op.inputs[n + n_cond:])]


def _order(g: Graph) -> list[Operation]:
    """The ops a run of sub-graph `g` runs, in order."""
    return topo_order(needed_ops(g.outputs, set(g.all_inputs)))


def _control(op: Operation, rows: Rows, phase: str) -> str | None:
    """Why control-flow op `op` does not keep the rows (its rule's verdict: row_rules.subgraphs), None if it does."""
    if op.type == "If" and op.inputs[0] in rows.valued:
        return (f"branches on '{op.inputs[0].name}', computed from the values of the batch's rows (a data-dependent "
                "tf.cond): each micro-batch would take the branch of its own rows; compute the predicate from fed "
                "scalars or variables (tf.cond(is_training, ...)), or compute both branches and pick per row with "
                "tf.where")
    if op.type == "While" and _trips(op, rows):
        return _trips(op, rows)
    if op.type == "While" and op.attrs["cond"].outputs[0] in rows.sized:  # a map of the rows: planner.maps checked
        return None
    for what, g, _ in subgraphs(op):
        why = _scaled_by_count(_order(g), rows)
        found = None if why else _refusal(_order(g), rows, phase)
        why = why or found and f"{found[0].type} '{found[0].name}' {found[1]}"
        if why:
            return f"runs a {what} ('{g.name}') in which {why}"
    return None


def _trips(op: Operation, rows: Rows) -> str | None:
    """Why the trip count of While `op` is not the same in every micro-batch, if it is not."""
    stop = op.attrs["cond"].outputs[0]
    if stop in rows.valued:
        return (f"loops while '{stop.name}', computed from the values of the batch's rows: each micro-batch would "
                "loop as long as its own rows say; bound the loop by fed or constant values")
    why = stop in rows.sized and maps.why_not(op, rows)
    if why:
        return (f"loops while '{stop.name}', computed from the batch's number of rows (tf.map_fn, tf.scan or "
                "tf.foldl over the batch's axis: each iteration one row), but it is no map of the rows one by one "
                f"(planner.maps): it {why}; apply the function to the whole batch (ops that keep rows row by row), "
                "or loop over another axis")
    return None


def _spread(order: list[Operation], found: set[Tensor], flows) -> None:
    """Adds to `found` the tensors of `order`'s ops, and of their sub-graphs', that `flows(op, found)` (whether
    op's outputs join) says follow from it: a control-flow op's placeholders follow their inputs, a loop body's
    outputs its next iteration's variables, and its outputs what they return (an If's all of them, as its
    predicate picks them)."""
    for op in order:
        if op.type not in CONTROL_FLOW:
            if flows(op, found):
                found.update(op.outputs)
            continue
        subs = subgraphs(op)
        for _, g, outer in subs:
            found.update(ph for ph, t in zip(g.all_inputs, outer) if t in found)
        grown = True
        while grown:
            for _, g, _ in subs:
                _spread(_order(g), found, flows)
            grown = False
            if op.type == "While":  # an iteration's result is the next one's variable
                cond, body = op.attrs["cond"], op.attrs["body"]
                for k, y in enumerate(body.outputs):
                    if y in found and body.inputs[k] not in found:
                        found.update((body.inputs[k], cond.inputs[k]))
                        grown = True
        if op.type == "If":
            then, other = op.attrs["then_branch"].outputs, op.attrs["else_branch"].outputs
            found.update(t for t, a, b in zip(op.outputs, then, other)
                         if op.inputs[0] in found or a in found or b in found)
        else:
            n, body = len(op.attrs["T"]), op.attrs["body"]
            found.update(t for k, ph in enumerate(body.inputs) if ph in found for t in (op.outputs[k],
                                                                                         op.outputs[n + k]))
            if op.attrs["cond"].outputs[0] in found:
                found.add(op.outputs[2 * n])


def _values_flow(feeds: set[Tensor]):
    """_spread's rule for the tensors computed from the values of the batch's rows (not their shapes alone)."""
    return lambda op, found: not has_tag(op.type, "shape_only") and any(t in found for t in op.inputs) and \
        not any(t in feeds for t in op.outputs)


def _counts_flow(rows: Rows):
    """_spread's rule for the batch's number of rows: tf.shape(x)[0] or tf.size(x) of a tensor x with rows (the
    index of its batch's axis), cast as it may be."""
    def flows(op: Operation, found: set[Tensor]) -> bool:
        if op.type == "Size":
            return op.inputs[0] in rows
        if op.type in ("Cast", "Identity"):
            return op.inputs[0] in found
        shape = op.inputs[0].op if op.type == "StridedSlice" else None
        if shape is None or shape.type != "Shape" or shape.inputs[0] not in rows or \
                op.attrs.get("shrink_axis_mask") != 1:
            return False
        begin = const(op.inputs[1])
        return begin is not None and int(begin.reshape(-1)[0]) == rows[shape.inputs[0]]
    return flows


def batch_axes(order: list[Operation], feed_shapes: dict, batch_feeds: set[Tensor]) -> Rows | str:
    """The step's tensors with rows of the batch, each with the axis that holds them: the one axis whose length
    follows the batch size, from the step's shapes at the fed batch and at the batch over its smallest prime
    factor. Why not, where a tensor has the batch along two axes (pairs the examples: a distance matrix between
    them). Where the shapes at the other size cannot be inferred, the graph's static shapes tell (_open_axes)."""
    batch = next((feed_shapes[t][0] for t in batch_feeds), None)
    if batch is None or batch < 2:
        return Rows({t: 0 for t in batch_feeds})
    other = batch // next(p for p in range(2, batch + 1) if batch % p == 0)
    specs, unsure = [], {}
    try:
        for shapes in (feed_shapes, {t: (other, *s[1:]) if t in batch_feeds else s for t, s in feed_shapes.items()}):
            found: dict[Tensor, TensorSpec] = {}
            found.update(static_specs(order, shapes, control_specs(found, unsure)))
            specs.append(found)
    except PlanError:  # a shape fixed to the batch's (an update of a variable shaped like it)
        return _open_axes(order, batch_feeds)
    rows = Rows({t: 0 for t in batch_feeds}, {t: sp.shape for t, sp in specs[0].items()})
    rows.fold = lambda t: _fold(t, specs[0]) if t in specs[0] else None
    rows.inner.update(unsure)
    for t, sp in specs[0].items():  # the step's tensors and its sub-graphs'
        a, b = sp.shape, specs[1][t].shape if t in specs[1] else None
        if b is None or len(a) != len(b):
            continue
        axes = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
        if len(axes) > 1 and not has_tag(t.op.type, "shape_only"):
            return (f"{t.op.type} '{t.op.name}' pairs the batch's examples with each other (its output '{t.name}' of "
                    f"shape {a} has the batch along {len(axes)} axes): each micro-batch would pair its own only")
        if axes:
            rows[t] = axes[0]
    return rows


def control_specs(found: dict, unsure: dict):
    """static_specs' `inner`: a control-flow op's output specs from its sub-graphs' (static_specs of each on the
    op's input specs), which it adds to `found`. An If's outputs are its true_fn's, a While's its loop variables'
    (the body's must match them) and their per-iteration history, as if the loop ran once. Where the branches'
    shapes differ, or the body changes a variable's shape, `unsure` gets the op and why."""
    def inner(op: Operation, given: dict[Tensor, TensorSpec]) -> list[TensorSpec]:
        if op.type not in CONTROL_FLOW:  # a py_func: its shapes are known once it has run
            raise PlanError(f"{op.type} '{op.name}' sizes its outputs only as it runs")
        ins = [given[t] for t in op.inputs]
        outs = []
        for _, g, outer in subgraphs(op):
            specs = static_specs(_order(g), {ph: given[t] for ph, t in zip(g.all_inputs, outer)}, inner)
            found.update(specs)
            outs.append([specs[y] for y in g.outputs])
        if op.type == "If":
            for k, (a, b) in enumerate(zip(*outs)):
                if a.shape != b.shape:
                    unsure[op] = (f"returns output {k} of shape {a.shape} from its true_fn but {b.shape} from its "
                                  "false_fn, so the rows it holds are not known")
            return [TensorSpec(s.shape, s.dtype) for s in outs[0]]
        n = len(op.attrs["T"])
        for k, (x, y) in enumerate(zip(ins[:n], outs[1])):
            if x.shape != y.shape:
                unsure[op] = (f"changes loop variable {k} from shape {x.shape} to {y.shape} in its body, so the rows "
                              "it holds are not known")
        finals = [TensorSpec(x.shape, x.dtype) for x in ins[:n]]
        return finals + [TensorSpec((1, *x.shape), x.dtype) for x in ins[:n]] + [TensorSpec((), op.outputs[-1].dtype)]
    return inner


# Ops whose second input divides the first: a sum over the rows divided by their count is a mean, which micro-batches
# average exactly.
DIVISIONS = ("RealDiv", "Div", "TrueDiv", "FloorDiv", "DivNoNan")


def _scaled_by_count(order: list[Operation], rows: Rows) -> str | None:
    """The first forward op that combines a value computed from the batch (Rows.valued) with the batch's number of
    rows (Rows.counts: tf.shape(x)[0] or tf.size(x) of a tensor with rows, cast as it may be) other than by dividing
    by it: a loss scaled by the batch size. Each micro-batch's count is its own (k times smaller), so the product
    would be too, with no error; a mean written as a sum divided by the count is exact. (A control-flow op's
    sub-graphs are looked into by its rule.)"""
    counts, values = rows.counts, rows.valued
    for op in order:
        if op.type in CONTROL_FLOW or op.attrs.get("_row_map") or not any(t in values for t in op.inputs):
            continue
        by = [t for t in op.inputs if t in counts]
        if by and phase_of(op) == "forward" and not (op.type in DIVISIONS and op.inputs[0] not in counts):
            return (f"{op.type} '{op.name}' scales a value of the batch by its number of rows ('{by[0].name}'): each "
                    "micro-batch's count is its own, so the result would be k times smaller; divide by a fed batch "
                    "size instead, or give a budget the unsplit step fits")
    return None


def row_counts(order: list[Operation], rows: dict[Tensor, int]) -> set[Tensor]:
    """The batch's number of rows as the step computes it: tf.shape(x)[axis of x's rows] or tf.size(x) of a tensor
    x with rows, cast as it may be (not another axis's length: a label smoothing's class count)."""
    counts: set[Tensor] = set()
    _spread(order, counts, _counts_flow(rows))
    return counts


def _open_axes(order: list[Operation], batch_feeds: set[Tensor]) -> Rows:
    """The tensors with rows by the graph's static shapes: each with its first dimension left open (None) where the
    fed batch's is, as planner.crossbatch.open_rows finds them."""
    rows = Rows({t: 0 for t in batch_feeds})
    for op in order:
        for t in op.outputs:
            if t._shape is not None and None in t._shape:
                rows[t] = t._shape.index(None)
    return rows


def own_picks(order: list[Operation], rows: Rows) -> set[Operation]:
    """The ops that take each row's own entries of a tensor with rows by the row index, and of their gradients.
    The row index is tf.range(n), n = tf.shape(x)[0] of a tensor x with rows: a micro-batch numbers its own rows
    from 0 and holds those rows of the tensor it indexes, so it picks the same entries. Two ways of indexing:
    tf.gather_nd(params, tf.stack([index, per-row values], -1)), the index laid out along the rows' other axes
    first (tf.expand_dims, tf.broadcast_to, tf.tile) as tf.reverse_sequence and tf.gather(..., batch_dims=1) do
    (each example's label's probability, an RNN's last relevant output); and, written by hand,
    tf.gather(tf.reshape(params, [-1, ...]), index * steps + offsets) with steps params' entries per row. Both
    make row numbers of params flattened (the index times the entries per row, plus an offset within the row:
    gather_nd's indices are in range, a constant offset is checked), which the gathers and their gradients'
    scatters (unsorted_segment_sum) read. Their rules would refuse them; anything else reading the range
    refuses it."""
    step = set(order)
    readers: dict[Tensor, list[Operation]] = {}
    for op in order:
        for t in op.inputs:
            readers.setdefault(t, []).append(op)
    own: set[Operation] = set()
    for r in order:
        if r.type != "Range" or r.outputs[0] not in rows or not _counts_rows(r, rows):
            continue
        found, ok = {r}, True
        todo: list[tuple[Tensor, str, Tensor | None]] = [(r.outputs[0], "range", None)]
        while todo and ok:
            t, kind, strides = todo.pop()
            for op in readers.get(t, ()):
                if op not in step or has_tag(op.type, "shape_only"):
                    continue
                nxt = _follow(op, t, kind, strides, rows)
                if nxt is None:
                    ok = False
                    break
                found.add(op)
                if nxt != "done":
                    todo.append((op.outputs[0], *nxt))
        if ok:
            own |= found
    return own


def _counts_rows(r: Operation, rows: Rows) -> bool:
    """Whether Range `r` is 0, 1, ..., n - 1 with n the batch's rows (tf.shape(x)[0], x with rows)."""
    start, delta, n = const(r.inputs[0]), const(r.inputs[2]), r.inputs[1]
    while n.op.type == "Cast":
        n = n.op.inputs[0]
    first = const(n.op.inputs[1]) if n.op.type == "StridedSlice" else None
    return start is not None and delta is not None and start == 0 and delta == 1 and first is not None and \
        n.op.inputs[0].op.type == "Shape" and rows.get(n.op.inputs[0].op.inputs[0]) == 0 and \
        n.op.attrs.get("shrink_axis_mask", 0) & 1 and first.reshape(-1)[0] == 0


# The ops that lay the row index out along a row's other axes, each entry of a row still its row's number.
_LAYOUTS = ("ExpandDims", "BroadcastTo", "Tile")


def _follow(op: Operation, t: Tensor, kind: str, strides: Tensor | None, rows: Rows):
    """What reader `op` of `t` makes of it: (kind, strides) of its output, 'done' where it picks or scatters each
    row's own entries, None where it is anything else. Kinds: 'range' the row index; 'stacked' the first column
    of gather_nd's indices; 'scaled' that times gather_nd's strides; 'based' the index times `strides`, a scalar
    (written by hand); 'picks' row numbers of params flattened, each the index times the entries per row plus an
    offset within it."""
    out = op.outputs[0] if op.outputs else None
    if op.type in ("Cast", "Identity"):
        return kind, strides
    if kind == "range" and op.type in _LAYOUTS and op.inputs[0] is t and out in rows and not op.op_def.rows(op, rows):
        return kind, strides
    if kind == "range" and op.type == "Pack" and op.inputs[0] is t and \
            op.attrs.get("axis") in (-1, len(rows.shape(t) or ())) and out in rows and \
            all(rows.get(u, rows[t]) == rows[t] for u in op.inputs):
        return "stacked", None
    if kind == "stacked" and op.type == "Mul" and op.inputs[0] is t and op.inputs[1] not in rows:
        return "scaled", op.inputs[1]
    if kind == "scaled" and op.type == "Sum" and const(op.inputs[1]) is not None and \
            int(const(op.inputs[1]).reshape(-1)[0]) in (-1, 1) and not op.attrs.get("keep_dims"):
        return "picks", strides
    other = op.inputs[op.inputs[0] is t] if len(op.inputs) == 2 else None
    if kind == "range" and op.type == "Mul" and rows.shape(other) == () and other not in rows.sized:
        return "based", other  # (a micro-batch's count of rows would scale its own index otherwise)
    if kind == "based" and op.type in ("Add", "AddV2") and out in rows and not op.op_def.rows(op, rows):
        offset, steps = rows.value(other), rows.value(strides)
        inside = offset is None or steps is not None and bool(np.all((0 <= offset) & (offset < steps)))
        return ("picks", strides) if inside else None
    if kind == "picks" and op.type == "Reshape" and const(op.inputs[1]) is not None and \
            const(op.inputs[1]).tolist() == [-1]:
        return kind, strides
    if kind == "picks" and op.type in ("GatherV2", "Gather") and op.inputs[1] is t and \
            (op.type == "Gather" or const(op.inputs[2]) == 0):
        # params: a flattening of a tensor with rows on axis 0, whose entries per row the index was scaled by
        flat = op.inputs[0]
        source = flat.op.inputs[0] if flat.op.type == "Reshape" else None
        return "done" if rows.get(source) == 0 and _per_row(strides, flat, source, rows) else None
    if kind == "picks" and op.type == "UnsortedSegmentSum" and op.inputs[1] is t and op.inputs[0] in rows:
        return "done"
    return None


def _per_row(strides: Tensor | None, flat: Tensor, source: Tensor, rows: Rows) -> bool:
    """Whether `strides` scaled the row index by the entries per row of `source` in `flat` (its flattening):
    gather_nd's strides, computed from tf.shape(source), or a scalar of that value."""
    if strides is None:
        return False
    if rows.shape(strides) == ():
        a, b, steps = rows.shape(source), rows.shape(flat), rows.value(strides)
        return a is not None and b is not None and None not in a + b and steps is not None and \
            int(np.prod(a[1:])) == int(steps) * int(np.prod(b[1:]))
    return _shape_of(strides, source)


def _shape_of(strides: Tensor | None, source: Tensor) -> bool:
    """Whether `strides` (no rows) is computed from tf.shape(source): gather_nd's strides of params' axes."""
    todo, seen = [strides] if strides is not None else [], set()
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        if t.op.type == "Shape" and t.op.inputs[0] is source:
            return True
        todo.extend(t.op.inputs)
    return False
