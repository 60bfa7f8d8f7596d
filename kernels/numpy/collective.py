"""MPI collectives on the host: MpiAllreduce (MPI_Allreduce, sum, over MPI_COMM_WORLD, of one contiguous buffer), and
MpiAllreduceStart / MpiAllreduceWait, which hand a buffer to the process's communication thread and take its sum
back, so that the step computes on while the ranks exchange it (Horovod's background thread, in small)."""
from __future__ import annotations

import queue
import threading

import numpy as np

from tfplus.registry import register_kernel


@register_kernel("MpiAllreduce", "cpu", ("float32", "float64"))
def _mpi_allreduce(ctx, ins, outs, attrs):
    # NOTE: imported when the kernel runs: mpi4py is the optional `mpi` extra, and importing it initializes MPI.
    from mpi4py import MPI
    MPI.COMM_WORLD.Allreduce(np.ascontiguousarray(ins[0]), outs[0], op=MPI.SUM)


class _Job:
    __slots__ = ("host", "ready", "done", "error")

    def __init__(self, host: np.ndarray, ready):
        self.host, self.ready, self.done, self.error = host, ready, threading.Event(), None


class Reducer:
    """The communication thread: sums host buffers over the ranks in place, one MPI_Allreduce each, in the order
    they were started (so every rank makes the same calls in the same order). `start(key, host, ready)`: reduce
    `host` once `ready()` returned (None: it holds its value already; OpenCL: the wait for its copy from the
    device); `wait(key)`: the summed buffer, once done. `buffer(key, shape, dtype)`: the host buffer a key
    reuses from step to step (its last sum was taken by then: each step waits for all it started)."""

    def __init__(self):
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.started: dict[int, _Job] = {}
        self.buffers: dict[int, np.ndarray] = {}
        self.thread = None

    def buffer(self, key: int, shape, dtype) -> np.ndarray:
        buf = self.buffers.get(key)
        if buf is None or buf.shape != tuple(shape) or buf.dtype != dtype:
            buf = self.buffers[key] = np.empty(shape, dtype)
        return buf

    def start(self, key: int, host: np.ndarray, ready=None) -> None:
        if self.thread is None:
            # NOTE: a daemon: it blocks only in jobs.get() between steps, so it never keeps a finished rank alive.
            self.thread = threading.Thread(target=self._loop, name="tfplus-allreduce", daemon=True)
            self.thread.start()
        job = self.started[key] = _Job(host, ready)
        self.jobs.put(job)

    def wait(self, key: int) -> np.ndarray:
        job = self.started.pop(key, None)
        if job is None:
            raise RuntimeError(f"MpiAllreduceWait key {key}: no MpiAllreduceStart of that key ran in this step "
                               "(build the pair with tfplus.ops.collective_ops.mpi_allreduce_split)")
        job.done.wait()
        if job.error is not None:
            raise RuntimeError(f"the all-reduce of key {key} failed on the communication thread: "
                               f"{type(job.error).__name__}: {job.error}") from job.error
        return job.host

    def _loop(self) -> None:
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        while True:
            job = self.jobs.get()
            try:
                if job.ready is not None:
                    job.ready()
                comm.Allreduce(MPI.IN_PLACE, job.host, op=MPI.SUM)
            except BaseException as e:  # noqa: BLE001  handed to the step, which raises it naming the op
                job.error = e
            job.done.set()


reducer = Reducer()  # the process's one communication thread


@register_kernel("MpiAllreduceStart", "cpu", ("float32", "float64"))
def _mpi_allreduce_start(ctx, ins, outs, attrs):
    host = reducer.buffer(attrs["key"], ins[0].shape, ins[0].dtype)
    np.copyto(host, ins[0])
    reducer.start(attrs["key"], host)


@register_kernel("MpiAllreduceWait", "cpu", ("float32", "float64"))
def _mpi_allreduce_wait(ctx, ins, outs, attrs):
    np.copyto(outs[0], reducer.wait(attrs["key"]))
