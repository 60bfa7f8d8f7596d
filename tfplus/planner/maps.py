"""Loops that map the batch's rows one by one: tf.map_fn over the batch (a per-example augmentation or loss) and its
gradient, a tf.while_loop whose trip count is the batch's number of rows (planner.rows).

Such a loop is row by row when each iteration reads the rows of the batch's tensors at the loop's counter alone
(tf.gather(x, i)), writes its result to row i of its output arrays alone (TensorArray.write: a select of row i) and
carries nothing else from row to row. Then a micro-batch of m rows is the same loop over its own m rows: a budgeted
step unrolls it for m rows (engine.step.resolve_static) and is planned in micro-batches of m rows only (its copies
carry attr _row_map = m, which planner.plan holds it to); a random op's copies draw their rows' numbers of the loop
(KernelContext.random_draw). A loop that reads another row (elems[0] for every row), its accumulated output (a
reduction over the TensorArray), the counter as a value, or runs another stateful op is refused, naming the op.

    >>> import tfplus as tf
    >>> x = tf.placeholder(tf.float32, [None, 3])
    >>> y = tf.map_fn(lambda r: r * x[0], x)  # every row times the batch's first  # doctest: +SKIP
"""
from __future__ import annotations

from tfplus.framework import Operation
from tfplus.ops.row_rules import Rows, const
from tfplus.registry import has_tag

# Ops an iteration may read a row of the batch with, at the counter
GATHERS = ("Gather", "GatherV2")
ADDS = ("Add", "AddV2")


def why_not(op: Operation, rows: Rows) -> str | None:
    """Why While `op`, whose trip count is the batch's number of rows, is not a map of the rows one by one; None
    where it is (or is the gradient of one)."""
    if op.grad_of is not None and op.grad_of.type == "While":  # a map's gradient loop: the map's
        why = why_not(op.grad_of, rows)
        return why and f"is the gradient of While '{op.grad_of.name}', which {why}"
    cond, body = op.attrs["cond"], op.attrs["body"]
    n, n_cond = len(op.attrs["T"]), op.attrs["n_cond"]
    stop = cond.outputs[0].op
    outer_cond = dict(zip(cond.all_inputs, op.inputs[:n + n_cond]))
    if stop.type != "Less" or stop.inputs[0] not in cond.inputs[:n] or \
            outer_cond.get(stop.inputs[1]) not in rows.counts:
        return "loops on a condition other than its counter below the batch's number of rows"
    p = cond.inputs.index(stop.inputs[0])
    counter = body.inputs[p]
    step = body.outputs[p].op
    start = const(op.inputs[p])
    if start is None or int(start) != 0 or step.type not in ADDS or step.inputs[0] is not counter or \
            const(step.inputs[1]) is None or int(const(step.inputs[1])) != 1:
        return "does not count its iterations from 0 by 1"
    ops = body.get_operations()
    readers: dict = {}
    for b in ops:
        for t in b.inputs:
            readers.setdefault(t, []).append(b)
        if b.op_def.allocates_outputs:
            return f"runs control flow ({b.type} '{b.name}') in its body"
        if b.op_def.stateful and not has_tag(b.type, "random"):  # (a random op's copies draw its row's numbers)
            return f"runs the stateful {b.type} '{b.name}' for each row"
    outer = dict(zip(body.all_inputs, op.inputs[:n] + op.inputs[n + n_cond:]))
    uses = {step}
    for k, ph in enumerate(body.all_inputs):
        if ph is counter:
            continue
        if rows.get(outer[ph]) != 0:
            if k < n and body.outputs[k] is not ph:
                return (f"carries loop variable {k} ('{outer[ph].name}') from row to row (a tf.scan's accumulator): "
                        "each micro-batch would start it over")
            continue
        for r in readers.get(ph, ()):
            if has_tag(r.type, "shape_only"):
                continue
            why = _write(r, ph, counter, body, k) if k < n else _gather(r, ph, counter, outer[ph].name)
            if why:
                return f"{r.type} '{r.name}' {why}"
            uses |= {r} if k >= n else {r, r.inputs[0].op}
    for r in readers.get(counter, ()):
        if r not in uses:
            return (f"{r.type} '{r.name}' reads the loop's counter, the row's number in the batch, which a "
                    "micro-batch counts from its own first row")
    return None


def _gather(r: Operation, ph, counter, name: str) -> str | None:
    """Why reader `r` of a captured tensor with rows (`ph`, tensor `name` outside) is not the gather of the
    counter's row."""
    if r.type in GATHERS and r.inputs[0] is ph and r.inputs[1] is counter and \
            (r.type == "Gather" or const(r.inputs[2]) is not None and int(const(r.inputs[2])) == 0):
        return None
    return (f"reads rows of '{name}' other than the loop's own row (a row of the batch for every row, elems[0]): "
            "each micro-batch would read its own")


def _write(r: Operation, ph, counter, body, k: int) -> str | None:
    """Why reader `r` of an output array with rows (loop variable `ph`, the k-th) is not its write of the
    counter's row (TensorArray.write: select(range(rows) == counter, value, array))."""
    pick = r.inputs[0].op if r.type == "Select" and len(r.inputs) == 3 else None
    if pick is not None and r.inputs[2] is ph and r.inputs[1] is not ph and body.outputs[k] is r.outputs[0] and \
            pick.type == "Equal" and pick.inputs[1] is counter and pick.inputs[0].op.type == "Range":
        return None
    return ("reads the rows the loop has written (a reduction over its TensorArray): each micro-batch would read "
            "its own rows only")
