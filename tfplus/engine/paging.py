"""Paged optimizer slots (planner.paging) on a device runtime: each slot's value lives in a host array, and its
update op runs in packs of groups, each pack's slots copied into their views of one staging buffer, updated by the
op's kernel, and copied back (runtime.page, on the in-order queue, so a pack's copies wait for nothing the host
does). To the user a paged slot stays an ordinary variable: a fetch, Session.variable_value and the Saver read the
host array, an Assign (initializer, restore) writes it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tfplus.ops.fused_ops import on_groups, slot_refs

if TYPE_CHECKING:
    from tfplus.planner.paging import Paging


class Paged:
    """An executor's paged slots: the staging buffer, each slot's view of it and its host array."""

    def __init__(self, runtime, pg: Paging):
        self.runtime, self.packs = runtime, pg.packs
        self.staging = runtime.allocate_arena(pg.staging_bytes)
        self.views = {name: runtime.sub_buffer(self.staging, off, shape, dtype)
                      for name, (off, shape, dtype) in pg.slots.items()}
        self.host: dict[str, np.ndarray] = {}

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
        self.runtime.fresh(self.views[name])  # the view forgets any host value a kernel left: the host holds it


def page_slots(executor, pg: Paging) -> None:
    """Moves the slots of `pg` to host memory (those already made: their device buffers go back to the pool).
    A plan that pages binds this once; the slots then stay paged for the session's life, whichever plan or
    program runs their update (kernel())."""
    paged = executor.paged
    if paged is not None and set(paged.views) >= set(pg.slots) and paged.packs == pg.packs:
        return
    old = paged.host if paged is not None else {}
    if old:
        executor.runtime.synchronize()  # the copies back into the host arrays finish before they change hands
    paged = Paged(executor.runtime, pg)
    for name in pg.slots:
        if name in old:
            paged.host[name] = old[name]
        elif name in executor.vars:
            paged.take(name, executor.vars[name])
        if name in paged.host:
            executor.vars[name] = paged.views[name]  # (its device buffer goes back to the pool)
    executor.var_epoch += 1
    executor.var_version += 1
    executor.paged = paged


def kernel(executor, op, kernel):
    """`kernel` of update op `op`, which pages the slots it updates when they are paged (each pack of its groups:
    copies in, the kernel on the pack, copies out); `kernel` itself for any other op."""
    names = [[t.op.name for t in g] for g in slot_refs(op)]
    if not names:
        return kernel
    fused = op.type == "_FusedApply"

    def run(ctx, ins, outs, attrs):
        paged = executor.paged
        if paged is None or names[0][0] not in paged.views:
            return kernel(ctx, ins, outs, attrs)
        page, views, host = executor.runtime.page, paged.views, paged.host
        # a program's op of another plan: a group at a time (one group's slots never share staging bytes)
        for pack in paged.packs.get(op.name) or [(j,) for j in range(len(names))]:
            for j in pack:
                for n in names[j]:
                    page(views[n], host[n], True)
            part, sub = on_groups(ins, attrs, pack) if fused and len(pack) < len(names) else (ins, attrs)
            kernel(ctx, part, outs, sub)
            for j in pack:
                for n in names[j]:
                    page(views[n], host[n], False)
    return run
