"""Collective ops across the processes of an MPI job (tfplus.distributed): MpiAllreduce, and the split pair
MpiAllreduceStart / MpiAllreduceWait that overlaps an all-reduce with the work between them.

The kernels call MPI on the host, on both devices (the opencl kernels copy the buffer out and back), so a
data-parallel training step stays one Session.run: gradients -> packed buckets -> all-reduces -> updates.
Every rank must run the same step, whose collectives start in the same order, or the ranks wait on each other.
"""
from __future__ import annotations

import itertools

from tfplus import flops as _flops
from tfplus.framework import apply_op
from tfplus.ops.row_rules import keeps
from tfplus.registry import not_differentiable, register_op, register_rows
from tfplus.tensor_shape import same_as_input

__all__: list[str] = []  # reached through tfplus.distributed.allreduce and DistributedOptimizer


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


# -- MpiAllreduceStart, MpiAllreduceWait -----------------------------------------------------------------------
# Start hands its input to the process's communication thread (kernels/numpy/collective.py), which sums it over
# the ranks while the step goes on; Wait, given Start's output (a view of the input: what makes Wait run after
# Start), blocks until that sum is done and writes it out. The pair shares attr `key`, unique in the process.
# The communication thread reduces in the order the Starts ran: the caller orders them alike on every rank
# (DistributedOptimizer chains them by control inputs) and runs every Wait after the last Start.
register_op("MpiAllreduceStart", inputs=("input",), outputs=("started",), attrs={"T": "type", "key": "int"},
            shape_fn=same_as_input(0), aliases={0: 0}, stateful=True, flops=_flops.per_output)
register_op("MpiAllreduceWait", inputs=("started",), outputs=("output",), attrs={"T": "type", "key": "int"},
            shape_fn=same_as_input(0), stateful=True, flops=_flops.per_output)
not_differentiable("MpiAllreduceStart", "MpiAllreduceWait")
# elementwise across the processes: each row the processes' same row's
register_rows(keeps, "MpiAllreduce", "MpiAllreduceStart", "MpiAllreduceWait")

_keys = itertools.count(1)


def mpi_allreduce_split(tensor, name=None):
    """(start, sum): the Start op and the Wait op's output, the elementwise sum of `tensor` over every rank,
    computed between them (see the comment above for the order they must run in)."""
    key = next(_keys)
    started = apply_op("MpiAllreduceStart", [tensor], {"key": key}, name=f"{name or 'MpiAllreduce'}/Start")
    return started.op, apply_op("MpiAllreduceWait", [started], {"key": key}, name=f"{name or 'MpiAllreduce'}/Wait")
