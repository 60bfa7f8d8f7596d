"""Kernels of the control-flow ops If and While, shared by every device: they run their sub-graphs through
the executor (ctx.run_subgraph) on the session's device and keep the loop bookkeeping (the predicate, the
iteration count, which buffers hold the loop variables) on the host."""
from __future__ import annotations

import numpy as np

from tfplus.registry import register_kernel


def _truth(rt, buf) -> bool:
    return bool(np.asarray(rt.copy_out(buf)).reshape(()))


def if_kernel(ctx, ins, outs, attrs):
    rt, n_then = ctx.runtime, attrs["n_then"]
    branch, args = (attrs["then_branch"], ins[1:1 + n_then]) if _truth(rt, ins[0]) else \
        (attrs["else_branch"], ins[1 + n_then:])
    outs[:] = ctx.run_subgraph(branch, dict(zip(branch.all_inputs, args)), branch.outputs)


def while_kernel(ctx, ins, outs, attrs):
    rt, cond, body = ctx.runtime, attrs["cond"], attrs["body"]
    n, n_cond = len(attrs["T"]), attrs["n_cond"]
    values = list(ins[:n])
    cond_caps, body_caps = ins[n:n + n_cond], ins[n + n_cond:]
    record = [bool(t.consumers()) for t in ctx.op.outputs[n:2 * n]]  # only a gradient reads the history
    history: list[list] = [[] for _ in range(n)]
    count = 0
    while True:
        [c] = ctx.run_subgraph(cond, dict(zip(cond.all_inputs, values + list(cond_caps))), cond.outputs)
        if not _truth(rt, c):
            break
        for k in range(n):
            if record[k]:
                history[k].append(values[k])
        values = ctx.run_subgraph(body, dict(zip(body.all_inputs, values + list(body_caps))), body.outputs)
        count += 1
    stacked = []
    for k in range(n):
        shape = tuple(ins[k].shape)
        later = {tuple(v.shape) for v in history[k][1:] + [values[k]]}
        if shape == (0,) and len(history[k]) > 1 and len(later) == 1:
            # NOTE: a tf.TensorArray with no element_shape enters a loop as an empty flow that its first write
            # shapes and fills with zeros, and keeps that shape after; entering as those zeros runs the body the
            # same, so the gradient replays the first iteration from them. (A variable that grows changes
            # shape again, and stays an error.)
            shape = later.pop()
            history[k][0] = rt.copy_in(np.zeros(shape, ctx.op.outputs[k].dtype.as_numpy_dtype))
        if any(tuple(v.shape) != shape for v in history[k]):
            raise ValueError(f"loop variable {k} changes shape across iterations "
                             f"({sorted({tuple(v.shape) for v in history[k]})}); the gradient of a "
                             "tf.while_loop needs fixed shapes (a tf.TensorArray written in the loop needs its "
                             "element_shape, and no dynamic_size)")
        buf = rt.allocate((len(history[k]),) + shape, ctx.op.outputs[k].dtype)
        for i, v in enumerate(history[k]):
            rt.copy_rows(buf, i, rt.view(v, (1,) + shape), 0, 1)
        stacked.append(buf)
    outs[:] = values + stacked + [rt.copy_in(np.array(count, np.int32))]


register_kernel("If", "cpu")(if_kernel)
register_kernel("While", "cpu")(while_kernel)


def _shown(value: np.ndarray, n: int) -> str:
    """One data entry of a failed Assert: a string scalar as its text in brackets (TF1's), else the first n
    values."""
    if value.dtype == object and value.size == 1:
        text = value.reshape(())[()]
        return "[" + (text.decode(errors="replace") if isinstance(text, bytes) else str(text)) + "]"
    return np.array2string(value.reshape(-1)[:n], separator=", ")


@register_kernel("Assert", "cpu")
def assert_kernel(ctx, ins, outs, attrs):
    if not bool(np.asarray(ins[0]).reshape(())):
        n = attrs["summarize"]
        shown = ", ".join(_shown(np.asarray(d), n) for d in ins[1:])
        raise ValueError(f"assertion failed: [{shown}]")
