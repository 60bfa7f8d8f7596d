"""Collective ops across the processes of a data-parallel job (tfplus.distributed, on MPI or gloo): MpiAllreduce,
and the split pair MpiAllreduceStart / MpiAllreduceWait that overlaps an all-reduce with the work between them. The
names are MPI's, whichever backend runs them: a graph saved under one runs under the other.

The kernels call the job's backend (tfplus.runtime.comm) on the host, on both devices (the opencl kernels copy the
buffer out and back), so a data-parallel training step stays one Session.run: gradients -> packed buckets ->
all-reduces -> updates.
Every rank must run the same step, whose collectives start in the same order, or the ranks wait on each other.
"""
from __future__ import annotations

import itertools

from tfplus import flops as _flops
from tfplus.framework import apply_op
from tfplus.ops.row_rules import keeps
from tfplus.registry import not_differentiable, register_op, register_rows
from tfplus.tensor_shape import same_as_input, spec

__all__: list[str] = []  # reached through tfplus.distributed.allreduce and DistributedOptimizer


# -- MpiAllreduce --------------------------------------------------------------------------------------------
# Stateful: it talks to the other ranks, so the planner and the executor must run it exactly once per step (never
# fold it to a constant, recompute it, split it over micro-batches or hand it to a forked cpu worker).
register_op("MpiAllreduce", inputs=("input",), outputs=("output",), attrs={"T": "type"},
            shape_fn=same_as_input(0), stateful=True, flops=_flops.per_output)
# Gradients are what it reduces; a loss is never differentiated through it (Horovod's is, by another allreduce).
not_differentiable("MpiAllreduce")


def mpi_allreduce(tensor, name=None):
    """The elementwise sum of `tensor` over every rank of the job (see tfplus.distributed.allreduce)."""
    return apply_op("MpiAllreduce", [tensor], name=name or "MpiAllreduce")


# -- MpiAllreduceStart, MpiAllreduceWait -----------------------------------------------------------------------
# Start hands its inputs, a bucket of gradients, to the process's communication thread (kernels/numpy/collective.py),
# which sums them over the ranks, as one flat buffer, while the step goes on; Wait, given Start's output (a view of
# input 0: what makes Wait run after Start), blocks until that sum, times Start's attr `scale` (1 / ranks: an
# average; Wait has the same `scale`: on opencl ranks of one host their devices sum and scale, see
# kernels/opencl/collective.py), is done and writes each input's part of it to its outputs, shaped as the inputs
# (attr `shapes`). The
# kernels gather the inputs into the flat host buffer and scatter the sums from it themselves: no packed copy of a
# bucket on the device (a ConcatV2 and a SplitV cost a Mentee step 30 copy kernels, BENCHMARKS.md, mpi1). The pair
# shares attr `key`, unique in the process. The communication thread reduces in the order the Starts ran: the caller
# orders them alike on every rank (DistributedOptimizer chains them by control inputs) and runs every Wait after the
# last Start.
register_op("MpiAllreduceStart", inputs=("input*",), outputs=("started",),
            attrs={"T": "type", "N": "int", "key": "int", "scale": "float"}, shape_fn=same_as_input(0), aliases={0: 0},
            stateful=True, flops=_flops.per_output)


def _wait_shape(ins, attrs):
    return [spec(tuple(s), ins[0].dtype) for s in attrs["shapes"]]


register_op("MpiAllreduceWait", inputs=("started",), outputs=("output",),
            attrs={"T": "type", "key": "int", "shapes": "list(shape)", "scale": "float"},
            shape_fn=_wait_shape, stateful=True, flops=_flops.per_output)
not_differentiable("MpiAllreduceStart", "MpiAllreduceWait")
# elementwise across the processes: each row the processes' same row's
register_rows(keeps, "MpiAllreduce", "MpiAllreduceStart", "MpiAllreduceWait")

_keys = itertools.count(1)


def mpi_allreduce_split(tensors, scale: float = 1.0, name=None):
    """(start, sums): the Start op of `tensors` (a list, of one dtype and fully known shapes) and the Wait op's
    outputs, each tensor's elementwise sum over every rank of the job times `scale`, computed between them
    (see the comment above for the order they must run in)."""
    key = next(_keys)
    shapes = []
    for t in tensors:
        shape = t.get_shape().as_list()
        if None in shape:
            raise ValueError(f"MpiAllreduceStart: {t.name} has shape {shape}; a bucket needs every tensor's full "
                             "shape (the Wait writes each sum into a buffer of that shape)")
        shapes.append(shape)
    started = apply_op("MpiAllreduceStart", [list(tensors)], {"key": key, "scale": float(scale)},
                       name=f"{name or 'MpiAllreduce'}/Start")
    sums = apply_op("MpiAllreduceWait", [started], {"key": key, "shapes": shapes, "scale": float(scale)},
                    name=f"{name or 'MpiAllreduce'}/Wait")
    return started.op, list(sums) if isinstance(sums, tuple) else [sums]
