"""The ranks of a data-parallel job and their collectives, behind one small interface for its two backends:
MPI (mpi4py, under mpiexec) and torch.distributed's gloo process groups (under torchrun). tfplus.distributed.init
picks one and sets it as the job's world(); the all-reduce kernels and the communication thread
(kernels/numpy/collective.py) call it, never a backend's module.

A Comm is a group of the job's ranks: `name` ("mpi" or "gloo"), `rank`, `size`, `allreduce(buf, op)` (in place,
blocking, of a contiguous NumPy array: SUM or MAX), `iallreduce(buf, op)` (the same, started: a request whose
Test() says whether it is done, as mpi4py's), `barrier()`, `dup()` (a new group of the same ranks for another
thread's calls, so that two threads' collectives never interleave: collective, every rank at the same place in its
calls) and `abort(code)` (ends this rank so that the launcher ends the job). What only MPI has (MPI-3 shared-memory
windows between a host's ranks) stays on MpiComm's `mpi`, the communicator.
"""
from __future__ import annotations

import datetime
import os
import sys

import numpy as np

SUM, MAX = "sum", "max"

_world: list = []  # the job's Comm, once tfplus.distributed.init set it


def world():
    """The Comm of every rank of the job (tfplus.distributed.init sets it)."""
    if not _world:
        raise RuntimeError("call tfplus.distributed.init() before rank(), size() or running distributed ops")
    return _world[0]


def set_world(comm) -> None:
    _world[:] = [comm]


class MpiComm:
    """A communicator of mpi4py's (MPI.COMM_WORLD for the world)."""

    name = "mpi"

    def __init__(self, comm):
        from mpi4py import MPI
        self.mpi, self._MPI = comm, MPI
        self.rank, self.size = comm.Get_rank(), comm.Get_size()

    def _op(self, op: str):
        return self._MPI.MAX if op == MAX else self._MPI.SUM

    def allreduce(self, buf: np.ndarray, op: str = SUM) -> None:
        self.mpi.Allreduce(self._MPI.IN_PLACE, buf, op=self._op(op))

    def iallreduce(self, buf: np.ndarray, op: str = SUM):
        return self.mpi.Iallreduce(self._MPI.IN_PLACE, buf, op=self._op(op))

    def barrier(self) -> None:
        self.mpi.Barrier()

    def dup(self) -> MpiComm:
        return MpiComm(self.mpi.Dup())

    def abort(self, code: int) -> None:
        self.mpi.Abort(code)  # mpiexec ends every rank


class _Work:
    """A gloo operation started (async_op=True), answering Test() as mpi4py's requests do; its error, if any,
    raises there."""

    def __init__(self, work, failed):
        self.work, self.failed = work, failed

    def Test(self) -> bool:  # noqa: N802  mpi4py's name: Reducer._poll tests either backend's requests
        if not self.work.is_completed():
            return False
        try:
            self.work.wait()
        except RuntimeError as e:
            raise self.failed(e) from None
        return True


class GlooComm:
    """A torch.distributed process group of the gloo backend (None: the default group, the world). The buffers
    travel as tensors on the NumPy arrays' memory (torch.from_numpy), with no copies. `timeout_s`: how long a
    collective of the groups dup() makes waits for the other ranks before it raises."""

    name = "gloo"

    def __init__(self, group=None, timeout_s: float = 300.0):
        import torch
        import torch.distributed as dist
        self.group, self.timeout_s, self._torch, self._dist = group, timeout_s, torch, dist
        self.rank, self.size = dist.get_rank(group), dist.get_world_size(group)

    def _op(self, op: str):
        return self._dist.ReduceOp.MAX if op == MAX else self._dist.ReduceOp.SUM

    def allreduce(self, buf: np.ndarray, op: str = SUM) -> None:
        try:
            self._dist.all_reduce(self._torch.from_numpy(buf), op=self._op(op), group=self.group)
        except RuntimeError as e:
            raise self._failed("all-reduce", e) from None

    def iallreduce(self, buf: np.ndarray, op: str = SUM) -> _Work:
        return _Work(self._dist.all_reduce(self._torch.from_numpy(buf), op=self._op(op), group=self.group,
                                           async_op=True), lambda e: self._failed("all-reduce", e))

    def barrier(self) -> None:
        try:
            self._dist.barrier(group=self.group)
        except RuntimeError as e:
            raise self._failed("barrier", e) from None

    def _failed(self, what: str, e: RuntimeError) -> RuntimeError:
        """gloo's error (its socket's, or its timeout's), saying what it means here."""
        return RuntimeError(f"rank {self.rank}: gloo's {what} failed: another rank died, was stopped, finished its "
                            f"steps, or did not join within {self.timeout_s:g} s (TFPLUS_ALLREDUCE_TIMEOUT) while "
                            "this one waits (every rank must run the same steps); see the other ranks' output. "
                            f"gloo: {str(e).strip()}")

    def dup(self) -> GlooComm:
        timeout = datetime.timedelta(seconds=self.timeout_s)
        return GlooComm(self._dist.new_group(backend="gloo", timeout=timeout), self.timeout_s)

    def abort(self, code: int) -> None:
        # NOTE: gloo has no job-wide abort: this rank ends, torchrun's agent then stops the others, and any rank
        # waiting in a collective with this one gets gloo's "Connection closed by peer" meanwhile.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
