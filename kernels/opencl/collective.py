"""MPI collectives on the opencl device: MPI reads and writes host memory (NCCL cannot take OpenCL buffers).

MpiAllreduce copies the packed buffer out, reduces it by the cpu kernel and copies it back, all blocking.
MpiAllreduceStart enqueues a non-blocking copy into pinned host memory (runtime.pinned_array) and hands the buffer
to the communication thread (kernels/numpy/collective.py), which waits for the copy, then sums it over the ranks
while the queue goes on with the rest of the backward pass; MpiAllreduceWait waits for the sum and enqueues its
copy back, non-blocking.
Both put their host work on the tape (runtime.tape_host), so a planned step keeps replaying its launches.
"""
from __future__ import annotations

import numpy as np

from tfplus.kernels.numpy.collective import reducer
from tfplus.kernels.opencl._common import run_on_host
from tfplus.registry import find_kernel, register_kernel
from tfplus.runtime.opencl.discovery import cl


@register_kernel("MpiAllreduce", "opencl", ("float32", "float64"))
def _mpi_allreduce(ctx, ins, outs, attrs):
    run_on_host(ctx, find_kernel("MpiAllreduce", "cpu", attrs["T"]), ins, outs, attrs, upload=True)


@register_kernel("MpiAllreduceStart", "opencl", ("float32", "float64"))
def _mpi_allreduce_start(ctx, ins, outs, attrs):
    rt, a, key = ctx.runtime, ins[0], attrs["key"]
    host = rt.pinned_array(("allreduce", key), a.shape, a.dtype)
    if a.host is not None:  # a value the host holds (computed there): nothing to copy out
        rt.tape_refuse(f"MpiAllreduceStart '{ctx.node_name}' reduces a value computed on the host")
        np.copyto(host, a.host)
        reducer.start(key, host)
        return
    buf, off, queue = rt.buffer(a), a.block.off, rt.queue

    def start():
        ready = cl.enqueue_copy(queue, host, buf, src_offset=off, is_blocking=False).wait if host.nbytes else None
        rt.d2h_bytes += host.nbytes
        reducer.start(key, host, ready)
    start()
    rt.tape_host(start, ("MpiAllreduceStart", key, id(buf), off))


@register_kernel("MpiAllreduceWait", "opencl", ("float32", "float64"))
def _mpi_allreduce_wait(ctx, ins, outs, attrs):
    rt, o, key = ctx.runtime, outs[0], attrs["key"]
    buf, off, queue = rt.buffer(o), o.block.off, rt.queue

    # NOTE: the host waits for the sum, then queues its copy back. Not a copy that waits on the device for an event
    # the communication thread completes: PoCL's enqueue of such a copy blocks until the event completes, holding
    # Python's lock, which the communication thread needs to complete it (a deadlock); tried on two H200s (NVIDIA's
    # driver), the ranks hung too (stop 42, not diagnosed).
    def wait():
        host = reducer.wait(key)
        if host.nbytes:
            # NOTE: non-blocking: `host` is written again only by the next step's copy out, queued after this one.
            cl.enqueue_copy(queue, buf, host, dst_offset=off, is_blocking=False)
        rt.h2d_bytes += host.nbytes
        reducer.mark(f"bucket {key} copy back queued")
    wait()
    rt.tape_host(wait, ("MpiAllreduceWait", key, id(buf), off))
