"""The job's collectives on the host, through its backend (tfplus.runtime.comm: MPI or gloo): MpiAllreduce (the sum
over every rank of one contiguous buffer), and MpiAllreduceStart / MpiAllreduceWait, which hand a buffer to the
process's communication thread and take its sum back, so that the step computes on while the ranks exchange it
(Horovod's background thread, in small); on one host's MPI opencl ranks the main thread moves the exchanges on itself
between its launches instead (Reducer.post, poll). The ops keep their MPI names: a graph saved under one backend
runs under the other."""
from __future__ import annotations

import atexit
import collections
import math
import os
import queue
import sys
import threading
import time

import numpy as np

from tfplus.registry import register_kernel
from tfplus.runtime.comm import MAX, SUM, world


@register_kernel("MpiAllreduce", "cpu", ("float32", "float64"))
def _mpi_allreduce(ctx, ins, outs, attrs):
    reducer.settle()
    reducer.count += 1
    # Started and waited for by polls: a blocking all-reduce waited for ever where another rank stalls (a rank that
    # ran a step fewer and now waits in another collective, one stuck reading its data)
    np.copyto(outs[0], ins[0])
    comm = world()
    request = comm.iallreduce(outs[0])
    if request.Test():
        return
    # gloo's collectives fail by themselves after the timeout, with what the other rank did: this is MPI's bound,
    # and only a backstop under gloo
    wait = allreduce_timeout() * (1 if comm.name == "mpi" else 2)
    deadline, spin = time.monotonic() + wait, time.perf_counter() + 1e-4
    while not request.Test():
        if time.monotonic() > deadline:
            raise timed_out(comm.rank, f"{ctx.op.type} '{ctx.op.name}'", wait)
        if time.perf_counter() > spin:
            time.sleep(2e-5)


def _positive(name: str, default: str, what: str) -> float:
    value = os.environ.get(name, default)
    try:
        number = float(value)
    except ValueError:
        number = 0.0
    if not number > 0:
        raise ValueError(f"{name}={value!r}: give {what}, a number above 0")
    return number


def allreduce_timeout() -> float:
    """Seconds the host waits for an all-reduce before it gives up (TFPLUS_ALLREDUCE_TIMEOUT, default 300)."""
    return _positive("TFPLUS_ALLREDUCE_TIMEOUT", "300", "the seconds the host waits for an all-reduce before it ends "
                     "the job with an error")


def timed_out(rank: int, what: str, timeout: float) -> TimeoutError:
    """The error of rank `rank`'s wait for the all-reduce of `what` that gave up after `timeout` seconds."""
    return TimeoutError(
        f"rank {rank}: the all-reduce of {what} did not finish within {timeout:g} s (TFPLUS_ALLREDUCE_TIMEOUT): "
        "another rank died, hangs, or runs different steps; check the other ranks' output, or raise the timeout if "
        "a rank is that slow on purpose (a first step's builds)")


def parts(shapes) -> list[slice]:
    """Where each of a bucket's tensors (of `shapes`) lies in its flat buffer: one after the other, in order."""
    ends = np.cumsum([math.prod(s) for s in shapes], dtype=np.int64).tolist()
    return [slice(a, b) for a, b in zip([0] + ends[:-1], ends)]


def shared_ranks() -> int:
    """How many ranks sum each bucket on their devices from host shared memory (kernels/opencl/collective.py): the
    world's size where every rank runs on this host, else 0 (MPI_Allreduce sums on the host). TFPLUS_ALLREDUCE_SHM=0
    forces MPI_Allreduce, =1 shared memory, the devices copying to and from the window (the default on a CPU device),
    =pinned shared memory, the devices copying to and from pinned memory and the communication thread moving each
    bucket between it and the window (the default on a GPU: reducer.staged); 1 or pinned is an error where the ranks
    span hosts. Under gloo, 0: the windows are MPI's."""
    if reducer.shared is None:
        value = os.environ.get("TFPLUS_ALLREDUCE_SHM", "").strip()
        if value not in ("", "0", "1", "pinned"):
            raise ValueError(f"TFPLUS_ALLREDUCE_SHM={value!r}: give 1 (sum on the devices through host shared "
                             "memory), pinned (the same, the devices copying through pinned memory), 0 "
                             "(MPI_Allreduce) or leave it unset (pinned on a GPU, 1 on a CPU device, where every "
                             "rank runs on one host)")
        reducer.staged = {"1": False, "pinned": True}.get(value)
        if world().name != "mpi":
            if value not in ("", "0"):
                raise ValueError(f"TFPLUS_ALLREDUCE_SHM={value}: the ranks' shared memory is MPI's (MPI-3 windows) "
                                 f"and this job runs on {world().name}; unset it, or run the job under mpiexec")
            reducer.shared = 0
            return 0
        here, ranks = reducer.host().Get_size(), world().size
        if value not in ("", "0") and here != ranks:
            raise ValueError(f"TFPLUS_ALLREDUCE_SHM={value}: only {here} of the {ranks} ranks run on this host; "
                             "unset it to sum by MPI_Allreduce")
        reducer.shared = here if here == ranks and value != "0" else 0
    return reducer.shared


def polling(gpu: bool) -> bool:
    """Whether the main thread moves a step's shared-memory exchanges on itself between its launches
    (TFPLUS_ALLREDUCE_POLL=1) instead of handing each to the communication thread (0): Reducer.poll. Unset: not on a
    GPU. On PoCL it took the thread's 3-5 hand-offs a step to none and a waiting rank's all-reduce from 13.5-26.9 ms to
    0.05-0.28 ms (BENCHMARKS.md, mpihost); on a GPU it moves the pinned copies onto the main thread and has not been
    timed there, where the thread path ran two H200 ranks of Mentee at 1.22-1.24x one GPU."""
    value = os.environ.get("TFPLUS_ALLREDUCE_POLL", "").strip()
    if not value:
        return not gpu
    if value not in ("0", "1"):
        raise ValueError(f"TFPLUS_ALLREDUCE_POLL={value!r}: give 1 (the main thread moves a step's shared-memory "
                         "exchanges on between its launches) or 0 (the communication thread does), or leave it unset "
                         "(0 on a GPU, 1 on a CPU device)")
    return value == "1"


class _Job:
    __slots__ = ("key", "host", "ready", "release", "done", "error", "times", "largest", "scale", "shared", "probe",
                 "request")

    def __init__(self, key: int, host: np.ndarray, ready, largest: bool = False, release=None, scale: float = 1.0,
                 shared: tuple | None = None):
        self.key, self.host, self.ready, self.done, self.error = key, host, ready, threading.Event(), None
        self.largest = largest  # MPI_MAX instead of MPI_SUM
        # (turn, rank): `host` is that turn of shared_slots, or pinned memory of its shape whose row `rank` is copied
        # into the turn before the ranks meet at a barrier and the others' rows from it after; the devices sum
        self.shared = shared
        self.release = release  # called by the communication thread after the sum: release(ok)
        self.scale = scale  # the sum times this (1 / ranks: an average), on the thread, before release
        self.times = [time.perf_counter(), 0.0, 0.0, 0.0, 0.0]  # started, copied out, reduced, waited, taken
        self.probe = None  # polled jobs (Reducer.post): whether ready() would return at once
        self.request = None  # polled jobs: the barrier's MPI request, once started


class Reducer:
    """The communication thread: sums host buffers over the ranks in place, one all-reduce each, in the order
    they were started (so every rank makes the same calls in the same order), on a communicator of its own (so
    that the main thread's collectives between steps, such as max_over_ranks, never interleave with its own).

    `start(key, host, ready, release, scale)`: reduce `host` once `ready()` returned (None: it holds its value
    already; OpenCL: the wait for its copies from the device), multiply the sum by `scale`, then call `release(ok)`
    (OpenCL: completes the user event its copies back wait for on the device); `take(key)`: that job, without
    waiting; `finish(job)`: its summed buffer, once done; `wait(key)`: both. Every wait of the host gives up after
    TFPLUS_ALLREDUCE_TIMEOUT seconds with an error naming the bucket (another rank died or hangs), and at exit the
    host waits for the jobs it started.
    `largest(value)`: the ranks' largest value, in its turn among the jobs, with no call of MPI on the caller's
    thread (an MPI_Iallreduce started between steps cost the host 0.3 ms on a loaded machine); with
    TFPLUS_ALLREDUCE_POLL=1 (polling) an MPI_Iallreduce that the main thread's polls complete, since the thread's
    two returns to Python a step (its wake, MPI) each wait for Python's lock and take it from the main thread.
    `buffer(key, shape, dtype)`: the host buffer a key reuses from step to step (its last sum was taken by then:
    each step waits for all it started). `shared_slots(key, n, dtype)`: a bucket's next turn of host shared memory,
    a slot of n per rank (see there); its job (`start(..., shared=(turn, rank))`) only waits until every rank
    wrote its slot; `post(...)` makes such a job one the main thread moves on (`poll()`, at the replay's flushes;
    every wait above pumps the polls) with no hand-off to the thread, and `settle()` finishes those before a blocking
    collective of the main thread. With TFPLUS_ALLREDUCE_TRACE=1 it reports at exit, per bucket, where the time went
    (see _report)."""

    def __init__(self):
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.started: dict[int, _Job] = {}
        self.buffers: dict[int, np.ndarray] = {}
        self.thread = self.failed = None
        self.rank = 0  # in the job, for the trace's report
        self.device = ""  # the device whose buffers this rank reduces, for the trace's report (opencl: its PCI bus)
        self.trace: dict[int, list] | None = None  # TFPLUS_ALLREDUCE_TRACE=1: key -> jobs' times
        self.timeline: list[tuple[str, float]] = []  # TFPLUS_ALLREDUCE_TRACE=1: the host's events, in order
        # The all-reduces this process started (the kernels' and this thread's jobs), equal on every rank of a job
        # whose ranks run the same steps: tfplus.distributed compares them when a rank finishes.
        self.count = 0
        self.timeout = allreduce_timeout()
        self.last: _Job | None = None  # the job started last (drain)
        self.shared: int | None = None  # shared_ranks(), once known
        self.staged: bool | None = None  # TFPLUS_ALLREDUCE_SHM=pinned (True) or 1 (False); unset: by the device
        self.gpu = False  # whether the ranks' devices are GPUs (polling), once a bucket knows
        self.host_comm = None  # the MPI communicator of this host's ranks (host())
        self.windows: dict[int, list] = {}  # bucket key -> [its MPI window, its slots (3, ranks, n), the next turn]
        self.polled: collections.deque = collections.deque()  # jobs the main thread moves on (post), in order
        self.poll_comm = self.poll_world = None  # the polled jobs': MPI's of this host's ranks, the world's Comm
        self.polling = threading.Lock()  # held by the thread in poll(): another thread's poll meanwhile returns
        self.wakes = 0  # the communication thread's returns from a call that released Python's lock (hand-offs)

    def host(self):
        """The MPI communicator of this host's ranks (MPI_COMM_TYPE_SHARED), made once (the MPI backend's only)."""
        if self.host_comm is None:
            from mpi4py import MPI
            # NOTE: collective, made on the main thread in the same place of every rank's calls (the first start).
            self.host_comm = world().mpi.Split_type(MPI.COMM_TYPE_SHARED)
        return self.host_comm

    def shared_slots(self, key: int, n: int, dtype) -> np.ndarray:
        """Bucket `key`'s next turn (of 3, in turn) of an MPI-3 shared-memory window of this host's ranks: (ranks, n),
        row r rank r's slot, contiguous. A rank writes its row, the job's barrier, then every rank reads all rows.
        Three turns, so that no rank writes a row while another may still read it, with no second barrier: a rank
        copies into turn t % 3 at step t once its step t-1 (waiting) or t-2 (running ahead: the bound of
        kernels/opencl/collective.py) passed its barrier, that is once every rank finished its copy out of that step,
        queued after its copy back of step t-3, the last read of that turn (each rank's queue runs in order). Through
        pinned memory the communication thread writes and reads the turn, in its jobs' order: the same holds."""
        held = self.windows.get(key)
        if held is None:
            from mpi4py import MPI
            comm, itemsize = self.host(), np.dtype(dtype).itemsize
            size = 3 * comm.Get_size() * max(n, 1) * itemsize  # one piece, held by rank 0: every turn contiguous
            # NOTE: collective, on the main thread in the same place of every rank's calls (a bucket's first start).
            win = MPI.Win.Allocate_shared(size if comm.Get_rank() == 0 else 0, itemsize, comm=comm)
            memory, _ = win.Shared_query(0)
            slots = np.ndarray((3, comm.Get_size(), max(n, 1)), dtype, buffer=memory)[:, :, :n]
            held = self.windows[key] = [win, slots, 0]
        if held[1].shape[2] != n or held[1].dtype != dtype:
            raise RuntimeError(f"MpiAllreduceStart key {key}: a bucket of {n} {np.dtype(dtype).name} after one of "
                               f"{held[1].shape[2]} {held[1].dtype.name}: each bucket's key must be unique")
        turn = held[2]
        held[2] = (turn + 1) % 3
        return held[1][turn]

    def buffer(self, key: int, shape, dtype) -> np.ndarray:
        buf = self.buffers.get(key)
        if buf is None or buf.shape != tuple(shape) or buf.dtype != dtype:
            buf = self.buffers[key] = np.empty(shape, dtype)
        return buf

    def start(self, key: int, host: np.ndarray, ready=None, release=None, scale: float = 1.0,
              shared: tuple | None = None) -> None:
        self._check()
        self._running()
        job = self.last = self.started[key] = _Job(key, host, ready, release=release, scale=scale, shared=shared)
        self.count += 1
        self.jobs.put(job)
        self.mark(f"bucket {key} started")

    def post(self, key: int, host: np.ndarray, ready, probe, release, shared: tuple) -> None:
        """start()'s shared-memory job for the main thread to move on (poll) instead of the communication thread:
        `probe()` says, without blocking, whether `ready()` (the wait for this rank's copy out; None: none) would
        return at once; `release` may be None (the host waits for the sum). Run ahead, each hand-off to the thread
        cost the gate a wait for Python's lock after its copy's wait, its memcpys and its barrier (up to the switch
        interval each, the device idle behind the gate meanwhile) and the main thread as many forced switches;
        waiting, a wake of the thread and one of the main thread a bucket (BENCHMARKS.md, mpihost)."""
        self._check()
        self._running()
        job = self.started[key] = _Job(key, host, ready, release=release, shared=shared)
        job.probe = probe
        self.count += 1
        self.polled.append(job)
        self.mark(f"bucket {key} started")

    def poll(self) -> None:
        """Moves the polled jobs on as far as they go without blocking, the oldest first and each only after the one
        before it, so that every rank starts its barriers in the same order: once a job's copy out is done, this
        rank's row goes into the turn (through pinned memory) and a non-blocking barrier starts; once the barrier is
        complete, the other rows come out and the job is released (its gate opened). Called at the replay's
        flushes (OpenCLRuntime.polls) and by every wait of the host while jobs are polled."""
        if not self.polled or not self.polling.acquire(blocking=False):  # none, or another thread is polling
            return
        try:
            self._poll()
        finally:
            self.polling.release()

    def _poll(self) -> None:
        while self.polled:
            job = self.polled[0]
            try:
                if job.request is None:
                    if job.ready is not None:
                        if not job.probe():
                            return
                        job.ready()  # at once: raises if the copy failed
                    job.times[1] = time.perf_counter()
                    turn, me = job.shared
                    if turn is not job.host:
                        np.copyto(turn[me], job.host[me])
                    job.request = self.poll_comm.Ibarrier()
                if not job.request.Test():
                    return
                turn, me = job.shared or (job.host, 0)  # no shared memory: the signal check's all-reduce
                for q in range(len(turn)) if turn is not job.host else ():
                    if q != me:
                        np.copyto(job.host[q], turn[q])
                job.times[2] = time.perf_counter()
            except BaseException as e:  # noqa: BLE001  the step's next collective kernel raises it
                self.failed = self.failed or e
            self.polled.popleft()
            try:
                if job.release is not None:
                    job.release(self.failed is None)
            except BaseException as e:  # noqa: BLE001
                self.failed = self.failed or e
            job.done.set()

    def settle(self) -> None:
        """Finishes every polled job: before a blocking call of MPI on the main thread that another rank may reach
        while it waits in a polled job's barrier for this one (rank 0 alone saving a checkpoint, then
        tfplus.distributed.barrier), or the two ranks would wait for each other."""
        for job in list(self.polled):
            self.finish(job)

    def _pump(self, job: _Job, deadline: float) -> bool:
        """Blocks until `job` is done or `deadline` (time.monotonic()), moving the polled jobs on meanwhile (another
        rank may wait in a barrier for this one's): False at the deadline."""
        spin = time.perf_counter() + 1e-4  # a sleep takes ~60 us at least: the barrier is tested 0.1 ms first
        while not job.done.is_set():
            self.poll()
            if job.done.is_set() or time.monotonic() > deadline:
                break
            head = self.polled[0] if self.polled else None
            if head is not None and head.request is None:  # poll() starts a job with no copy to wait for
                try:
                    head.ready()  # the device's copy out; Python's lock released
                except BaseException:  # noqa: BLE001  poll() records it and releases the job
                    pass
            elif head is not None and time.perf_counter() > spin:
                time.sleep(2e-5)  # the other ranks' barrier
            elif head is None:
                job.done.wait(1e-3)  # a job of the communication thread's
        return job.done.is_set()

    def largest(self, value: int):
        """A function that waits for the largest `value` any rank passed and gives it (every rank must call this
        in the same order among its starts)."""
        self._check()
        self._running()
        job = _Job(-1, np.array([value], np.int64), None, largest=True)
        self.count += 1
        if polling(self.gpu):  # started now, on a communicator of its own, and read by the main thread's polls
            job.request = self.poll_world.iallreduce(job.host, MAX)
            self.polled.append(job)
        else:
            self.last = job
            self.jobs.put(job)

        def result() -> int:
            return int(self.finish(job)[0])
        return result

    def _running(self) -> None:
        """Starts the communication thread, once."""
        if self.thread is not None:
            return
        ranks, host = world(), None
        if ranks.name == "mpi":
            from mpi4py import MPI
            if MPI.Query_thread() != MPI.THREAD_MULTIPLE:
                raise RuntimeError("MpiAllreduceStart reduces on a thread of its own, which needs MPI initialized "
                                   "with MPI_THREAD_MULTIPLE (mpi4py's default; mpi4py.rc.thread_level = 'multiple')")
            host, self.poll_comm = self.host().Dup(), self.host().Dup()  # the shared-memory barriers'
        # NOTE: made here, by the main thread, in the same place of every rank's calls (dup is collective).
        comm, self.poll_world = ranks.dup(), ranks.dup()
        # A daemon: it blocks only in jobs.get() between steps, so it never keeps a finished rank alive.
        self.thread = threading.Thread(target=self._loop, args=(comm, host), name="tfplus-allreduce", daemon=True)
        self.thread.start()
        # NOTE: the thread needs Python's lock after each of its waits (a copy out, MPI) and to release a copy back;
        # a thread waiting for the lock gets it from a busy one (the main thread queuing launches) only after the
        # switch interval, 5 ms by default: on a GPU step of 2 ms that delay is the step's. Measured on PoCL with the
        # main thread launching kernels: a waking thread got the lock after a median 1.5-5.9 ms at 5 ms, 0.24-0.44
        # ms at 0.1 ms. TFPLUS_ALLREDUCE_SWITCH_MS sets it (default 0.2; never raised).
        ms = _positive("TFPLUS_ALLREDUCE_SWITCH_MS", "0.2", "the milliseconds Python lets a thread hold its lock "
                       "while the communication thread waits for it")
        sys.setswitchinterval(min(sys.getswitchinterval(), ms / 1e3))
        self.rank = ranks.rank
        if os.environ.get("TFPLUS_ALLREDUCE_TRACE", "") not in ("", "0"):
            self.trace = {}
            atexit.register(self._report)
        # NOTE: registered after mpi4py's MPI_Finalize (and tfplus.distributed's end of the gloo group), so it runs
        # before it: a host that ran ahead of its last all-reduce (kernels/opencl/collective.py) must not end the
        # backend while the thread is inside it.
        atexit.register(self.drain)

    def take(self, key: int) -> _Job:
        self._check()
        job = self.started.pop(key, None)
        if job is None:
            raise RuntimeError(f"MpiAllreduceWait key {key}: no MpiAllreduceStart of that key ran in this step "
                               "(build the pair with tfplus.ops.collective_ops.mpi_allreduce_split)")
        if self.trace is not None:  # the wait ends now unless wait() blocks on
            job.times[3] = job.times[4] = time.perf_counter()
            self.trace.setdefault(key, []).append(job.times)
        return job

    def finish(self, job: _Job) -> np.ndarray:
        """`job`'s summed buffer, once the communication thread is done with it; raises if it failed, or if it is
        not done within the timeout (naming the bucket and what to look at), never waiting for ever."""
        done = self._pump(job, time.monotonic() + self.timeout) if self.polled else job.done.wait(self.timeout)
        if not done:
            raise timed_out(self.rank, "the ranks' signal check" if job.largest else f"gradient bucket {job.key}",
                            self.timeout)
        self._check()
        return job.host

    def wait(self, key: int) -> np.ndarray:
        job = self.take(key)
        self.finish(job)
        job.times[4] = time.perf_counter()
        self.mark(f"bucket {key} waited")
        return job.host

    def drain(self) -> None:
        """Waits (at most the timeout) for every job started so far: they run in order, so for the last one."""
        deadline = time.monotonic() + self.timeout
        for job in [self.last, *self.polled]:
            if job is not None and self.failed is None:
                self._pump(job, deadline)

    def mark(self, label: str) -> None:
        """With TFPLUS_ALLREDUCE_TRACE=1, notes that the host reached `label` now (the report times the host's
        path from a step's last wait to the next step's first start through the labels noted between them)."""
        if self.trace is not None:
            self.timeline.append((label, time.perf_counter()))

    def _report(self) -> None:
        """Where each bucket's time went, medians over the steps (ms): the copy out (from the start, so also the
        device's work queued before it), the all-reduce, and how long the step's wait blocked the host. Written in
        one piece, each line naming the rank: the ranks share mpiexec's standard error."""
        who = f"rank {self.rank}"
        lines = [f"tfplus all-reduce, {who}: device {self.device}"] if self.device else []
        lines.append(f"tfplus all-reduce, {who}: buckets summed " + (
            f"on the devices from host shared memory{' through pinned memory' * bool(self.staged)}, {self.shared} "
            "ranks (all-reduce below: the barrier)" if self.shared else f"by {world().name}'s all-reduce"))
        for key, rows in sorted(self.trace.items()):
            t = np.array(rows[1:]) * 1e3
            if len(t):
                lines.append(f"tfplus all-reduce bucket {key}, {who}: {len(t)} steps, median ms: copy out "
                             f"{np.median(t[:, 1] - t[:, 0]):.3f}, all-reduce {np.median(t[:, 2] - t[:, 1]):.3f}, "
                             f"host blocked in the wait {np.median(t[:, 4] - t[:, 3]):.3f}, start to sum "
                             f"{np.median(t[:, 2] - t[:, 0]):.3f}")
        if len(self.trace) > 1 and len({len(rows) for rows in self.trace.values()}) == 1:
            first, last = (np.array(self.trace[k]) * 1e3 for k in (min(self.trace), max(self.trace)))
            lines.append(f"tfplus all-reduce, {who}: median ms from the host's last wait of a step to the next "
                         f"step's first start {np.median(first[2:, 0] - last[1:-1, 4]):.3f}, step to step "
                         f"{np.median(np.diff(first[1:, 0])):.3f}")
        steps = max((len(rows) for rows in self.trace.values()), default=0)
        if steps:
            lines.append(f"tfplus all-reduce, {who}: the communication thread returned to Python {self.wakes} times, "
                         f"{self.wakes / steps:.1f} a step (each a hand-off of Python's lock)")
        between = self._between(min(self.trace), max(self.trace)) if self.trace else None
        if between:
            lines.append(f"tfplus all-reduce, {who}: the host between steps, median / mean ms: {between}")
        sys.stderr.write("".join(line + "\n" for line in lines))
        sys.stderr.flush()

    def _between(self, first: int, last: int) -> str:
        """The host's path between steps, segment by segment (median / mean ms): from bucket `last`'s wait through
        the labels mark() noted to the next step's start of bucket `first`, while the device may have nothing
        queued."""
        segments: dict[str, list[float]] = {}
        begin, end, prev = f"bucket {last} waited", f"bucket {first} started", None
        for label, t in self.timeline:
            if label == begin:
                prev = (label, t)
            elif prev is not None:
                segments.setdefault(f"{prev[0]} -> {label}", []).append(t - prev[1])
                prev = None if label == end else (label, t)
        # The first steps plan and build: skipped. Means too: they add up to the path's mean (medians do not).
        return "; ".join(f"{name} {1e3 * np.median(ts[2:] or ts):.3f} / {1e3 * np.mean(ts[2:] or ts):.3f}"
                         for name, ts in segments.items())

    def _check(self) -> None:
        if self.failed is not None:
            e = self.failed
            raise RuntimeError(f"an all-reduce failed on the communication thread: {type(e).__name__}: {e}") from e

    def _loop(self, comm, host) -> None:
        while True:
            job = self.jobs.get()
            self.wakes += 1
            try:
                if job.ready is not None:
                    job.ready()
                    self.wakes += 1
                job.times[1] = time.perf_counter()
                if job.shared is not None:
                    turn, me = job.shared
                    staged = turn is not job.host
                    if staged:
                        np.copyto(turn[me], job.host[me])
                    host.Barrier()  # every rank's slot written (x86 hosts keep the window coherent; MPI orders)
                    for q in range(len(turn)) if staged else ():
                        if q != me:
                            np.copyto(job.host[q], turn[q])
                    self.wakes += 1 + staged * len(turn)  # the barrier; NumPy's copies release the lock
                else:
                    comm.allreduce(job.host, MAX if job.largest else SUM)
                    self.wakes += 1
                if job.scale != 1.0:  # NOTE: float32 times the scale cast to float32, as a device Mul by a constant
                    np.multiply(job.host, job.scale, out=job.host)
                job.times[2] = time.perf_counter()
            except BaseException as e:  # noqa: BLE001  the step's next collective kernel raises it
                self.failed = e
            if job.release is not None:  # before done: a host that saw done may block on what it releases
                try:
                    job.release(self.failed is None)
                except BaseException as e:  # noqa: BLE001
                    self.failed = self.failed or e
            job.done.set()


reducer = Reducer()  # the process's one communication thread


@register_kernel("MpiAllreduceStart", "cpu", ("float32", "float64"))
def _mpi_allreduce_start(ctx, ins, outs, attrs):
    where = parts([x.shape for x in ins])
    host = reducer.buffer(attrs["key"], (where[-1].stop,), ins[0].dtype)
    for x, at in zip(ins, where):
        host[at] = x.ravel()
    reducer.start(attrs["key"], host, scale=attrs["scale"])


@register_kernel("MpiAllreduceWait", "cpu", ("float32", "float64"))
def _mpi_allreduce_wait(ctx, ins, outs, attrs):
    host = reducer.wait(attrs["key"])
    for out, at in zip(outs, parts([o.shape for o in outs])):
        np.copyto(out, host[at].reshape(out.shape))
