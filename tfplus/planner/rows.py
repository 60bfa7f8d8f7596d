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

One op that picks rows by index is row by row in effect and stays allowed (own_picks): taking each example's own
entry, the idiom tf.gather_nd(probs, tf.stack([tf.range(tf.shape(x)[0]), labels], 1)), and its gradient.

    >>> import tfplus as tf
    >>> x = tf.placeholder(tf.float32, [None, 20])
    >>> half = tf.reduce_mean(x[:25])
    >>> why_not(half.graph.get_operations(), {x}, {x: (50, 20)}, {x})  # doctest: +ELLIPSIS
    "StridedSlice 'strided_slice' takes rows :25 of the batch ..."
"""
from __future__ import annotations

from tfplus.framework import Operation, Tensor
from tfplus.ops.row_rules import Rows, const
from tfplus.planner.liveness import PlanError, phase_of, static_specs
from tfplus.registry import has_tag

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
    scaled = _scaled_by_count(order, rows, batch_feeds)
    if scaled:
        return scaled
    own = own_picks(order, rows)
    for op in order:
        # An update (ref inputs) runs after the micro-batches on their merged gradients (planner.batch.split_step
        # checks those); a shape-only op reads no values; an op without inputs makes no rows (a placeholder is fed).
        if not op.inputs or op in own or op.op_def.ref_inputs or has_tag(op.type, "shape_only") or \
                not any(t in rows for t in (*op.inputs, *op.outputs)):
            continue
        rule = op.op_def.rows
        why = rule(op, rows) if rule is not None else (
            "declares no rule for the batch's rows (registry.register_rows), so it may move, pick or mix them")
        if why:
            return f"{op.type} '{op.name}' {why}; {ADVICE}"
    return None


def batch_axes(order: list[Operation], feed_shapes: dict, batch_feeds: set[Tensor]) -> Rows | str:
    """The step's tensors with rows of the batch, each with the axis that holds them: the one axis whose length
    follows the batch size, from the step's shapes at the fed batch and at the batch over its smallest prime
    factor. Why not, where a tensor has the batch along two axes (pairs the examples: a distance matrix between
    them). Where the shapes at the other size cannot be inferred, the graph's static shapes tell (_open_axes)."""
    batch = next((feed_shapes[t][0] for t in batch_feeds), None)
    if batch is None or batch < 2:
        return Rows({t: 0 for t in batch_feeds})
    other = batch // next(p for p in range(2, batch + 1) if batch % p == 0)
    try:
        specs = [static_specs(order, shapes) for shapes in
                 (feed_shapes, {t: (other, *s[1:]) if t in batch_feeds else s for t, s in feed_shapes.items()})]
    except PlanError:  # a shape fixed to the batch's (an update of a variable shaped like it, a tf.cond's outputs)
        return _open_axes(order, batch_feeds)
    rows = Rows({t: 0 for t in batch_feeds}, {t: sp.shape for t, sp in specs[0].items()})
    for op in order:
        for t in op.outputs:
            a, b = (sp[t].shape if t in sp else None for sp in specs)
            if a is None or b is None or len(a) != len(b):
                continue
            axes = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
            if len(axes) > 1 and not has_tag(op.type, "shape_only"):
                return (f"{op.type} '{op.name}' pairs the batch's examples with each other (its output '{t.name}' of "
                        f"shape {a} has the batch along {len(axes)} axes): each micro-batch would pair its own only")
            if axes:
                rows[t] = axes[0]
    return rows


# Ops whose second input divides the first: a sum over the rows divided by their count is a mean, which micro-batches
# average exactly.
DIVISIONS = ("RealDiv", "Div", "TrueDiv", "FloorDiv", "DivNoNan")


def _scaled_by_count(order: list[Operation], rows: Rows, batch_feeds: set[Tensor]) -> str | None:
    """The first forward op that combines a value computed from the batch with the batch's number of rows
    (tf.shape(x)[0] or tf.size(x) of a tensor with rows, cast as it may be) other than by dividing by it: a loss
    scaled by the batch size. Each micro-batch's count is its own (k times smaller), so the product would be too, with
    no error; a mean written as a sum divided by the count is exact."""
    counts = row_counts(order, rows)
    values = set(batch_feeds)
    for op in order:
        if has_tag(op.type, "shape_only") or not any(t in values for t in op.inputs):
            continue
        values.update(op.outputs)
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
    shapes: dict[Tensor, int] = {}  # Shape of a tensor with rows -> the axis that holds them
    for op in order:
        if op.type == "Shape" and op.inputs[0] in rows:
            shapes[op.outputs[0]] = rows[op.inputs[0]]
        elif op.type == "Size" and op.inputs[0] in rows:
            counts.add(op.outputs[0])
        elif op.type == "StridedSlice" and op.inputs[0] in shapes and op.attrs.get("shrink_axis_mask") == 1:
            begin = const(op.inputs[1])
            if begin is not None and int(begin.reshape(-1)[0]) == shapes[op.inputs[0]]:
                counts.add(op.outputs[0])
        elif op.type in ("Cast", "Identity") and op.inputs[0] in counts:
            counts.add(op.outputs[0])
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


def own_picks(order: list[Operation], rows: set[Tensor]) -> set[Operation]:
    """The ops of tf.gather_nd(params, tf.stack([tf.range(n), labels], 1)) that pick each row's own entry of params
    (n = tf.shape(x)[0], x with rows), and of its gradient: the range over the batch and the gathers and scatters
    of the row numbers gather_nd makes of it (each row's range value times params' entries per row, plus the label's
    offset: an entry of its own row, as gather_nd's indices are in range). A micro-batch numbers its rows from 0
    and holds those rows of params. Their rules would refuse them; anything else reading the range refuses it."""
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


def _counts_rows(r: Operation, rows: set[Tensor]) -> bool:
    """Whether Range `r` is 0, 1, ..., n - 1 with n the batch's rows (tf.shape(x)[0], x with rows)."""
    start, delta, n = const(r.inputs[0]), const(r.inputs[2]), r.inputs[1]
    while n.op.type == "Cast":
        n = n.op.inputs[0]
    first = const(n.op.inputs[1]) if n.op.type == "StridedSlice" else None
    return start is not None and delta is not None and start == 0 and delta == 1 and first is not None and \
        n.op.inputs[0].op.type == "Shape" and rows.get(n.op.inputs[0].op.inputs[0]) == 0 and \
        n.op.attrs.get("shrink_axis_mask", 0) & 1 and first.reshape(-1)[0] == 0


def _follow(op: Operation, t: Tensor, kind: str, strides: Tensor | None, rows: set[Tensor]):
    """What reader `op` of `t` (a range over the rows, 'range'; a stack with it as the first column, 'stacked';
    that times gather_nd's strides, 'scaled'; gather_nd's row numbers, 'picks') makes of it: (kind, strides) of its
    output, 'done' where it picks or scatters each row's own entries, None where it is anything else."""
    if op.type in ("Cast", "Identity"):
        return kind, strides
    if kind == "range" and op.type == "Pack" and op.inputs[0] is t and \
            op.attrs.get("axis") in (-1, len(t._shape or ())):
        return "stacked", None
    if kind == "stacked" and op.type == "Mul" and op.inputs[0] is t and op.inputs[1] not in rows:
        return "scaled", op.inputs[1]
    if kind == "scaled" and op.type == "Sum" and const(op.inputs[1]) is not None and \
            int(const(op.inputs[1]).reshape(-1)[0]) in (-1, 1) and not op.attrs.get("keep_dims"):
        return "picks", strides
    if kind == "picks" and op.type == "Reshape" and const(op.inputs[1]) is not None and \
            const(op.inputs[1]).tolist() == [-1]:
        return kind, strides
    if kind == "picks" and op.type in ("GatherV2", "Gather") and op.inputs[1] is t and \
            (op.type == "Gather" or const(op.inputs[2]) == 0):
        # params: gather_nd's flattening of a tensor with rows whose shape made the strides
        flat = op.inputs[0]
        source = flat.op.inputs[0] if flat.op.type == "Reshape" else None
        return "done" if source in rows and _shape_of(strides, source) else None
    if kind == "picks" and op.type == "UnsortedSegmentSum" and op.inputs[1] is t and op.inputs[0] in rows:
        return "done"
    return None


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
