"""Paging the optimizer's slots: momentum's accumulators and Adam's m and v kept in host memory, each update op's
slots uploaded into a staging buffer of the arena, updated there by the op's kernel and copied back (POET, ICML 2022:
rematerialization plus paging). The staging buffer is a workspace of the update op (STAGING names it), live only
while the op runs, after the forward and backward passes: the room the slots leave goes to activations, fewer
recomputations and micro-batches.

    >>> import tfplus as tf
    >>> from tfplus import planner
    >>> from tfplus.runtime.facts import device_facts
    >>> x = tf.placeholder(tf.float32, [None, 64]); w = tf.Variable(tf.zeros([64, 64]))
    >>> loss = tf.reduce_sum(tf.matmul(x, w))
    >>> train = tf.train.MomentumOptimizer(0.1, 0.9).minimize(loss)
    >>> p = planner.plan([train], {x: (8, 64)}, device_facts("opencl"), page=True)
    >>> sorted(p.paging.slots) == ["Variable/Momentum"]
    True

Only on a device whose memory is not the host's (opencl; on the cpu the host is the device and paging would move
bytes for nothing). A staging buffer holds the largest update group's slots (a variable's, aligned) at most; groups
are packed into it in their order, each pack one call of the update kernel between its copies in and out
(planner.plan prices the copies by DeviceFacts.host_bandwidth and a launch per copy and per extra call). The executor
(tfplus.engine.paging) runs it; the slots stay ordinary variables to the user (fetches, Saver, checkpoints read the
host copy).
"""
from __future__ import annotations

import os
from typing import NamedTuple

from tfplus.framework import Operation
from tfplus.ops.fused_ops import slot_refs

# Whether the planner may choose paging by cost (else only plan(..., page=True) pages); None: TFPLUS_PAGE_SLOTS
# decides (chosen()). Off unless TFPLUS_PAGE_SLOTS=1: its copies are priced at a bandwidth not yet timed on a GPU
# (BENCHMARKS.md, "The optimizer's slots paged to host memory"), and chosen by cost on PoCL it displaced the
# micro-batched plans of small steps.
PAGE: bool | None = None


def chosen() -> bool:
    """PAGE, else whether TFPLUS_PAGE_SLOTS=1 (read when a step is planned: a bad value is a ValueError naming it)."""
    if PAGE is not None:
        return PAGE
    value = os.environ.get("TFPLUS_PAGE_SLOTS", "").strip() or "0"
    if value not in ("0", "1"):
        raise ValueError(f"TFPLUS_PAGE_SLOTS={value!r}: give 1 (the planner may page the optimizer's slots to the host "
                         "where that is cheaper) or 0 (never: the default)")
    return value == "1"
# Host<->device copies of a device whose facts do not say (bytes per second): pageable host memory over PCIe
# (the H200 measured 12-15 GB/s pageable, 53 GB/s pinned: BENCHMARKS.md, bench_paging.py).
DEFAULT_HOST_BANDWIDTH = 12e9
# The suffix of the workspace name of an update op's staging buffer (the op's last workspace).
STAGING = "/paged_staging"


class Paging(NamedTuple):
    """Where the paged slots go on the device, and how each update op runs over them."""
    slots: dict[str, tuple]                # slot variable name -> (byte offset in its op's staging, shape, dtype)
    packs: dict[str, tuple[tuple[int, ...], ...]]  # update op name -> its groups (apply_groups' indices) per call
    staging: dict[str, int]                # update op name -> its staging buffer's bytes (aligned)
    paged_bytes: int                       # the slots' bytes, each copied in and out once a step
    copies: int                            # copies a step makes (in and out, one per slot)
    calls: int                             # extra update kernel calls (packs beyond one per op)


def page(ops: list[Operation], nbytes, alignment: int, trainable: set) -> Paging | None:
    """The Paging of the update ops among `ops` (their slots' sizes by `nbytes(tensor)`), None when none pages.
    An update op pages all its slots or none: none where one is trainable or read by another op of the step."""
    def up(n: int) -> int:
        return -(-n // alignment) * alignment
    readers: dict = {}
    for op in ops:
        for t in op.inputs:
            if t.op.type == "VariableV2":
                readers.setdefault(t.op.name, set()).add(op)
    updates = [(op, refs) for op in ops if (refs := slot_refs(op)) and
               all(t.op.type == "VariableV2" and t.op not in trainable and readers.get(t.op.name) == {op}
                   for g in refs for t in g)]
    if not updates:
        return None
    cap = max(sum(up(nbytes(t)) for t in g) for _, refs in updates for g in refs)
    slots, packs, staging, paged, calls = {}, {}, {}, 0, 0
    for op, refs in updates:
        op_packs, pack, used, most = [], [], 0, 0
        for j, g in enumerate(refs):
            if pack and used + sum(up(nbytes(t)) for t in g) > cap:
                op_packs.append(tuple(pack))
                pack, used = [], 0
            for t in g:
                slots[t.op.name] = (used, tuple(t.op.attrs["shape"]), t.op.attrs["dtype"].name)
                used += up(nbytes(t))
                paged += nbytes(t)
            pack.append(j)
            most = max(most, used)
        op_packs.append(tuple(pack))
        packs[op.name], staging[op.name] = tuple(op_packs), most
        calls += len(op_packs) - 1
    return Paging(slots, packs, staging, paged, 2 * len(slots), calls)


def staged(op: Operation, pg: Paging) -> int:
    """The bytes of update op `op`'s staging buffer under `pg` (0: it pages nothing), by its slots' names (a planning
    copy of the step, planner.recompute, keeps them)."""
    refs = slot_refs(op)
    if not refs or refs[0][0].op.name not in pg.slots:
        return 0
    return pg.staging.get(op.name) or max(pg.staging.values())
