"""Collective ops across the processes of an MPI job (tfplus.distributed): MpiAllreduce.

The kernel calls MPI on the host, on both devices (the opencl kernel copies the buffer out and back), so a
data-parallel training step stays one Session.run: gradients -> one packed buffer -> MpiAllreduce -> updates.
Every rank must run the same step, whose MpiAllreduce ops run in the same order, or the ranks wait on each other.
"""
from __future__ import annotations

from tfplus import flops as _flops
from tfplus.framework import apply_op
from tfplus.registry import not_differentiable, register_op
from tfplus.tensor_shape import same_as_input

__all__: list[str] = []  # reached through tfplus.distributed.allreduce


# -- MpiAllreduce --------------------------------------------------------------------------------------------
# Stateful: it talks to the other ranks, so the planner and the executor must run it exactly once per step (never
# fold it to a constant, recompute it, split it over micro-batches or hand it to a forked cpu worker).
register_op("MpiAllreduce", inputs=("input",), outputs=("output",), attrs={"T": "type"},
            shape_fn=same_as_input(0), stateful=True, flops=_flops.per_output)
# Gradients are what it reduces; a loss is never differentiated through it (Horovod's is, by another allreduce).
not_differentiable("MpiAllreduce")


def mpi_allreduce(tensor, name=None):
    """The elementwise sum of `tensor` over every rank of MPI_COMM_WORLD (see tfplus.distributed.allreduce)."""
    return apply_op("MpiAllreduce", [tensor], name=name or "MpiAllreduce")
