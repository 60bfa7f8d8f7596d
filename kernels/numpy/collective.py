"""MpiAllreduce on the host: MPI_Allreduce (sum) over MPI_COMM_WORLD of one contiguous buffer."""
from __future__ import annotations

import numpy as np

from tfplus.registry import register_kernel


@register_kernel("MpiAllreduce", "cpu", ("float32", "float64"))
def _mpi_allreduce(ctx, ins, outs, attrs):
    # NOTE: imported when the kernel runs: mpi4py is the optional `mpi` extra, and importing it initializes MPI.
    from mpi4py import MPI
    MPI.COMM_WORLD.Allreduce(np.ascontiguousarray(ins[0]), outs[0], op=MPI.SUM)
