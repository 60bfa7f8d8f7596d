"""Paged optimizer slots (planner.paging) on a device runtime: each slot's value lives in a pinned host array, and
its update op runs in packs of groups, each pack's slots copied into their views of the op's staging buffer (a
workspace of the plan's arena, live while the op runs), updated by the op's kernel and copied back (runtime.page,
on the in-order queue). To the user a paged slot stays an ordinary variable: a fetch, Session.variable_value and the
Saver read the host array, an Assign (initializer, restore) writes it.

The executor's entry for a paged slot (Executor.vars) is its staging view, which only the plan that pages (the
`owner` Bound) may write, within its update op: another program updating the slot stages it in buffers of its own
(pooled), a read gets a copy of the host array, an Assign a buffer of its own that then goes home.
"""
from __future__ import annotations

import numpy as np

from tfplus.ops.fused_ops import on_groups, slot_positions


class Paged:
    """An executor's paged slots: each one's host array and its staging view of the arena of `owner`, the bound plan
    that pages them (tfplus.engine.memory.Bound)."""

    def __init__(self, runtime, owner):
        self.runtime, self.owner = runtime, owner
        self.packs = owner.plan.paging.packs
        self.host: dict[str, np.ndarray] = {}
        self.views: dict = {}

    def value(self, name: str) -> np.ndarray:
        """The slot's value (the queued copies back finished first)."""
        self.runtime.synchronize()
        return self.host[name]

    def take(self, name: str, buf) -> None:
        """Slot `name` holds what device buffer `buf` holds (an Assign's output, or its buffer before paging)."""
        value = self.runtime.copy_out(buf)  # (blocking: the queued copies into the host arrays are done)
        if name not in self.host:
            self.host[name] = self.runtime.pinned_host(value.shape, value.dtype)  # DMA, no driver copy
        np.copyto(self.host[name], value)


def page_slots(executor, bound, views: dict) -> None:
    """Pages the slots of `bound`'s plan, staged in `views` ({slot name: its view of the arena}); those already made
    move to host memory (their device buffers go back to the pool). The slots stay paged for the session's life;
    the latest plan to page them (or, its arena grown, to bind again) stages them."""
    paged = executor.paged
    if paged is None or paged.owner is not bound:
        old = paged
        paged = Paged(executor.runtime, bound)
        if old is not None:
            executor.runtime.synchronize()  # the copies back into the host arrays finish before they change hands
            paged.host.update(old.host)
    for name in views:
        if name not in paged.host and name in executor.vars:
            paged.take(name, executor.vars[name])
    paged.views = views
    for name, view in views.items():
        if name in paged.host:
            executor.vars[name] = view
    executor.var_epoch += 1
    executor.var_version += 1
    executor.paged = paged


def kernel(executor, op, kernel, alloc):
    """`kernel` of update op `op` in a program of allocator `alloc`, which pages the slots it updates when they are
    paged: each pack of its groups copied in, the kernel on the pack, copied out; `kernel` itself for other ops."""
    positions = slot_positions(op)
    if not positions:
        return kernel
    names = [[op.inputs[k].op.name for k in g] for g in positions]
    fused = op.type == "_FusedApply"

    def run(ctx, ins, outs, attrs):
        paged = executor.paged
        if paged is None or names[0][0] not in paged.host:
            return kernel(ctx, ins, outs, attrs)
        rt, host = executor.runtime, paged.host
        owner = paged.owner is alloc
        # another program (or an op the plan named otherwise): a group at a time, the others in buffers of their own
        for pack in (paged.packs.get(op.name) if owner else None) or [(j,) for j in range(len(names))]:
            part, bufs = list(ins), {}
            for j in pack:
                for k, n in zip(positions[j], names[j]):
                    if owner:
                        rt.page(paged.views[n], host[n], True)
                    else:
                        part[k] = bufs[n] = rt.copy_in(paged.value(n))
            part, sub = on_groups(part, attrs, pack) if fused and len(pack) < len(names) else (part, attrs)
            kernel(ctx, part, outs, sub)
            for j in pack:
                for n in names[j]:
                    rt.page(paged.views[n] if owner else bufs[n], host[n], False)
    return run
