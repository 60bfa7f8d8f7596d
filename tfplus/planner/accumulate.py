"""Gradients added into their accumulators as they are made, in a micro-batched step.

Plain, the micro-batch run fetches every weight gradient: each holds a buffer of its own until the run ends, when
the executor adds them into their accumulators (engine.memory), so the run peaks at the end with a second copy of
the gradients beside the accumulators. Accumulated, a gradient is written into its accumulator by the op that makes
it on the first micro-batch; on the later ones its op writes it into a workspace of its own (`Site.piece`), live
only while the op runs, which the executor then adds into the accumulator (runtime.add_into) -- or, where the op's
kernel has an "accumulate" variant (tfplus.registry.register_variant: the cpu MatMul's, kernels/numpy/math.py), that
variant adds its product in a few rows at a time through a piece of that many rows. The accumulators are divided by
the micro-batch count after the last. Exact up to float32 rounding: the kernels' own arithmetic, the merge's add and
scale, but a product made a few rows at a time may round differently from the whole product where the BLAS blocks
its sums by the operands' shapes (OpenBLAS's Haswell kernels do; its SkylakeX ones do not). Gradients smaller than
MIN_PIECE_BYTES are merged after the run as before: their buffers are no bigger than a piece, and each site costs
calls.

    >>> piece_rows((2048, 256), 4)     # a 2.1 MB gradient goes through a buffer of 256 rows (262 kB)
    256
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from tfplus.framework import Operation, Tensor
from tfplus.planner.liveness import alias_root, nbytes
from tfplus.registry import kernel_facts

# A gradient goes through a piece buffer of about 1/PIECES of its bytes, and at least MIN_PIECE_BYTES (more pieces
# of a small gradient would add kernel calls for bytes that do not matter).
PIECES = 8
MIN_PIECE_BYTES = 64 * 1024


@dataclass(eq=False)
class Site:
    """One gradient (output `grad` of `op`, of `shape`) written into its accumulator; from the second micro-batch on
    through a piece of `rows` of its rows, by the op's "accumulate" variant (`variant`), else whole and then added."""
    op: Operation
    grad: Tensor
    shape: tuple
    rows: int
    variant: bool

    @property
    def piece(self) -> tuple:
        """The piece buffer's shape."""
        return (self.rows,) + tuple(self.shape[1:])

    @property
    def calls(self) -> int:
        """The kernel calls this site adds to a micro-batch after the first: per piece a product and an add, where
        the op made one product; else the add."""
        return 2 * -(-self.shape[0] // self.rows) - 1 if self.variant else 1


def piece_rows(shape: tuple, itemsize: int) -> int:
    """The rows of a gradient of `shape` that one piece of an "accumulate" variant holds."""
    rows, row_bytes = shape[0], math.prod(shape[1:]) * itemsize
    return min(rows, max(-(-rows // PIECES), -(-MIN_PIECE_BYTES // max(row_bytes, 1))))


def sites(order: list[Operation], specs, grads: list[Tensor], fetched: list[Tensor], feeds: set[Tensor], device: str
          ) -> list[Site]:
    """The gradients among `grads` (the micro-batch run's, planner.batch.Split) of at least MIN_PIECE_BYTES that
    their ops in `order` may write into their accumulators on `device` (the cpu): an op's own output (no alias) that
    no op of the run reads and the user does not fetch (a fetched value is merged as it comes)."""
    if device != "cpu":
        # NOTE: an opencl program replays the launches it recorded, the same on every micro-batch; an op that writes
        # its accumulator on the first and adds into it on the others would need a recording of each.
        return []
    in_run = set(order)
    found = []
    for g in grads:
        op, spec = g.op, specs[g]
        if op not in in_run or alias_root(g, feeds) is not g or g in fetched or nbytes(spec) < MIN_PIECE_BYTES or \
                any(c in in_run for c in g.consumers()) or any(x.op is op for x in found):  # one per op
            continue
        shape = spec.shape
        variant = not g.value_index and len(shape) == 2 and "accumulate" in kernel_facts(op.type, device).variants
        found.append(Site(op, g, shape, piece_rows(shape, spec.dtype.size) if variant else shape[0], variant))
    return found
