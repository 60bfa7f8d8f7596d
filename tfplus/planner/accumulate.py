"""Gradients added into their accumulators by the op that makes them, in a micro-batched step.

Plain, the micro-batch run fetches every weight gradient: each holds a buffer of its own until the run ends, when the
executor adds them into their accumulators (engine.memory), so the run peaks at the end with a second copy of every
gradient beside the accumulators. Accumulated, the op that makes a gradient writes the accumulator itself: on the
first micro-batch its kernel as usual, then its "accumulate" variant (tfplus.registry.register_variant: the cpu
MatMul's, kernels/numpy/math.py), which adds the product in through a buffer of a few rows (`Site.piece`); the
accumulators are divided by the micro-batch count after the last. The gradient has no buffer of its own. Exact: the
variant's row blocks are the kernel's, its add the merge's (runtime.add_into), the division the merge's scale.

    >>> piece_rows((2048, 256), 4)     # a 2.1 MB gradient goes through a buffer of 256 rows (262 kB)
    256
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from tfplus.framework import Operation, Tensor
from tfplus.registry import kernel_facts

# A gradient goes through a piece buffer of about 1/PIECES of its bytes, and at least MIN_PIECE_BYTES (more pieces
# of a small gradient would add kernel calls for bytes that do not matter).
PIECES = 8
MIN_PIECE_BYTES = 64 * 1024


@dataclass(eq=False)
class Site:
    """One gradient (of `shape`) its op adds into its accumulator through a buffer of `rows` of its rows."""
    op: Operation
    grad: Tensor
    shape: tuple
    rows: int

    @property
    def piece(self) -> tuple:
        """The piece buffer's shape."""
        return (self.rows,) + tuple(self.shape[1:])

    @property
    def pieces(self) -> int:
        """The variant's kernel calls (a product and an add each) per micro-batch after the first."""
        return -(-self.shape[0] // self.rows)


def piece_rows(shape: tuple, itemsize: int) -> int:
    """The rows of a gradient of `shape` that one piece holds."""
    rows, row_bytes = shape[0], math.prod(shape[1:]) * itemsize
    return min(rows, max(-(-rows // PIECES), -(-MIN_PIECE_BYTES // max(row_bytes, 1))))


def sites(order: list[Operation], specs, grads: list[Tensor], fetched: list[Tensor], device: str) -> list[Site]:
    """The gradients among `grads` (the micro-batch run's, planner.batch.Split) that their op in `order` may add into
    their accumulators: output 0 of an op whose kernel on `device` has an "accumulate" variant, of two dimensions,
    read by no op of the run and not fetched by the user (a fetched value is merged as it comes)."""
    in_run = set(order)
    found = []
    for g in grads:
        op = g.op
        if op not in in_run or g.value_index or "accumulate" not in kernel_facts(op.type, device).variants or \
                g in fetched or len(specs[g].shape) != 2 or any(c in in_run for c in g.consumers()):
            continue
        shape = specs[g].shape
        found.append(Site(op, g, shape, piece_rows(shape, specs[g].dtype.size)))
    return found
