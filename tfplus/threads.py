"""The cpu device's threads: TensorFlow's intra-op pool, and BLAS held to one thread while a step runs.

A cpu kernel splits its work (images, rows, elements) into at most `current()` shards and runs them with `run`:
the calling thread takes the first shard, a pool of `current() - 1` workers the rest. Kernels whose shards'
results do not depend on the thread running them split into a few tasks per thread instead (`tasks`) and share
them out (`run_shared`): each thread takes the next task when it is free, so a thread slowed by another process
does not hold up the call. NumPy releases the GIL in its loops and in BLAS, so plain threads run in parallel.
The pool owns every thread: while a session runs, BLAS is set to one thread (threadpoolctl), so pool x BLAS
never exceeds the thread count.

Shards and tasks depend only on the work's size and the thread count, and kernels combine partial results in a
fixed order, so a result is bit-for-bit the same for a fixed thread count (and equal within rounding across counts).

    >>> from tfplus import threads
    >>> with threads.using(2):
    ...     threads.split(10)
    [(0, 5), (5, 10)]
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import sys
import threading
from typing import Callable, Iterable

ENV = "TFPLUS_NUM_THREADS"
# Elements per shard below which splitting costs more than it saves. A shard costs a dispatch and a wake-up
# (~10-30 us) plus a GIL hand-off per NumPy call, which grow with the shard count; a NumPy loop over 256K
# float32 elements takes ~0.1-0.3 ms, so that is the least a shard gets. Kernels whose work is not one pass
# per element (GEMMs, convolutions) scale it by their operations per element (flop_grain).
GRAIN = 1 << 18
# Tasks per thread of the kernels that share their work out (run_shared): on a busy machine (another process on
# some cores, or cores of different speeds) one equal shard per thread makes every call as slow as its slowest
# thread, and the others idle meanwhile; with 2 tasks each, a held-back thread can leave half its work to the
# others. Not more: a task costs its thread ~50-150 us of Python and NumPy dispatch holding the GIL (a
# convolution's), which at 16 threads is already a good part of a layer's wall time.
OVERSPLIT = 2
# Floating-point operations per shard of a GEMM-like kernel: 64 per GRAIN element, ~16 MFLOP, about 0.5 ms on
# one core.
FLOP_SCALE = 64

_local = threading.local()  # the running session's thread count, per Python thread; 1 in pool workers
_default = {"threads": None}  # the process's default when set (tfplus train/eval/profile --threads)
_pools: dict[int, _Pool] = {}
_pools_lock = threading.Lock()


def available_cores() -> int:
    """The cores this process may run on (its affinity mask, which containers and taskset narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def parse_threads(value, where: str) -> int:
    """A thread count from a flag, variable or config field; `where` names it in the error."""
    try:
        n = int(str(value).strip())
    except ValueError:
        n = 0
    if n < 1 or isinstance(value, bool):
        raise ValueError(f"{where}={value!r}: the number of threads must be a positive integer, e.g. 4")
    return n


def default_threads() -> int:
    """The thread count of a session whose config sets none: `default(n)`'s (the CLI's --threads), else
    $TFPLUS_NUM_THREADS, else the cores this process may run on."""
    if _default["threads"] is not None:
        return _default["threads"]
    value = os.environ.get(ENV, "").strip()
    return parse_threads(value, ENV) if value else available_cores()


@contextlib.contextmanager
def default(n: int):
    """Sessions created inside (any thread) default to `n` threads."""
    previous, _default["threads"] = _default["threads"], parse_threads(n, "threads")
    try:
        yield
    finally:
        _default["threads"] = previous


def resolve(requested: int | None) -> int:
    """A session's thread count: `requested` (TF1's 0 or None meaning the default) or the default."""
    return parse_threads(requested, "intra_op_parallelism_threads") if requested else default_threads()


def current() -> int:
    """The thread count kernels split their work for: the running session's, else the default."""
    n = getattr(_local, "threads", None)
    return n if n is not None else default_threads()


@contextlib.contextmanager
def using(n: int):
    """Kernels run in this thread split their work for `n` threads (nests; restores the previous count)."""
    previous = getattr(_local, "threads", None)
    _local.threads = n
    try:
        yield
    finally:
        _local.threads = previous


def flop_grain(flops_per_item: float) -> int:
    """The grain (items per shard) of a kernel whose items each cost `flops_per_item`: GRAIN * FLOP_SCALE
    operations per shard at least, so that a shard's compute dwarfs its dispatch and GIL hand-offs."""
    return max(1, -(-GRAIN * FLOP_SCALE // max(int(flops_per_item), 1)))


def split(n: int, grain: int = 1) -> list[tuple[int, int]]:
    """[lo, hi) ranges covering range(n): at most current() of them, each at least `grain` long (one range if
    n is below 2 * grain), as equal as can be."""
    shards = max(1, min(current(), n // max(grain, 1)))
    return [(n * i // shards, n * (i + 1) // shards) for i in range(shards)]


class _Pool:
    """n - 1 daemon workers, each with its own queue; a call puts a job on the queues of the workers it needs and
    runs the job itself as slot 0, then collects one completion per worker. C-level queues (SimpleQueue) keep the
    caller's dispatch, which holds the GIL, to a few microseconds per worker."""

    def __init__(self, n: int):
        self._call = threading.Lock()  # one call at a time (sessions in two Python threads take turns)
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        self._inboxes = [queue.SimpleQueue() for _ in range(n - 1)]
        for i, inbox in enumerate(self._inboxes):
            threading.Thread(target=self._work, args=(inbox,), name=f"tfplus-intra-op-{n}-{i + 1}",
                             daemon=True).start()

    def _work(self, inbox: queue.SimpleQueue) -> None:
        _local.threads = 1  # a kernel called inside a shard runs whole: no nested pools
        while True:
            job, slot, errors = inbox.get()
            try:
                job(slot)
            except BaseException as e:  # re-raised by the caller
                errors[slot] = e
            # NOTE: not kept while waiting for the next: a job's closure holds its kernel's arrays (views of a
            # memory plan's arena, which a grown arena's old memory then could not be freed behind).
            job = errors = None
            self._done.put(slot)

    def spread(self, job: Callable[[int], None], slots: int) -> None:
        """job(slot) for slot in range(slots), slot 0 on this thread; returns when all are done, raising the
        lowest slot's error if any raised."""
        errors: list = [None] * slots
        with self._call:
            for slot in range(1, slots):
                self._inboxes[slot - 1].put((job, slot, errors))
            previous, _local.threads = getattr(_local, "threads", None), 1  # slot 0 runs whole too
            try:
                job(0)
            except BaseException as e:
                errors[0] = e
            finally:
                _local.threads = previous
                # Every slot's completion, also when a signal handler raises meanwhile (a second Ctrl-C): the
                # others still write into the kernel's buffers, and a completion left queued would end the next
                # call before its own slots are done.
                pending, interrupted = slots - 1, None
                while pending:
                    try:
                        self._done.get()
                        pending -= 1
                    except BaseException as e:  # raised once all are done
                        interrupted = interrupted or e
                if interrupted is not None:
                    raise interrupted
        for e in errors:
            if e is not None:
                raise e

    def run(self, fn: Callable, items: list) -> list:
        """[fn(item) for item in items] (at most n items), item i on slot i."""
        results: list = [None] * len(items)

        def job(i: int) -> None:
            results[i] = fn(items[i])
        self.spread(job, len(items))
        return results


def _pool(n: int) -> _Pool:
    with _pools_lock:
        pool = _pools.get(n)
        if pool is None:
            pool = _pools[n] = _Pool(n)
    return pool


if hasattr(os, "register_at_fork"):  # a forked child has none of the parent's workers: it starts its own
    os.register_at_fork(after_in_child=_pools.clear)


def run(fn: Callable, items: Iterable) -> list:
    """[fn(item) for item in items], the first on this thread and the others on the pool (at most current()
    items). Every call has finished when this returns, also when one raised."""
    items = list(items)
    if len(items) <= 1:
        return [fn(item) for item in items]
    n = current()
    if len(items) > n:
        raise ValueError(f"{len(items)} shards for {n} threads: use threads.split")
    return _pool(n).run(fn, items)


def tasks(n: int, grain: int = 1) -> list[tuple[int, int]]:
    """[lo, hi) ranges covering range(n) for run_shared: OVERSPLIT per thread (one range on one thread), each at
    least `grain` long, as equal as can be (so at most two lengths)."""
    t = current()
    shards = max(1, min(t if t == 1 else OVERSPLIT * t, n // max(grain, 1)))
    return [(n * i // shards, n * (i + 1) // shards) for i in range(shards)]


def slots(items: int) -> int:
    """The threads run_shared runs `items` items on (a kernel's per-thread scratch sets)."""
    return max(1, min(current(), items))


def run_shared(fn: Callable[[int, object], object], items: Iterable) -> list:
    """[fn(slot, item) for item in items] on slots(len(items)) threads, this one and the pool's, each taking the
    next item when it gets free: a thread that another process or a slower core holds back takes fewer items
    instead of holding up the call, as one equal shard per thread would. `slot` (0 <= slot < slots) names the
    thread running the item, for its scratch; which thread runs which item varies, so an item's result must
    depend on the item alone. Every call has finished when this returns, also when one raised."""
    items = list(items)
    k = slots(len(items))
    if k == 1:
        return [fn(0, item) for item in items]
    results: list = [None] * len(items)
    order = iter(range(len(items)))  # shared by the threads: next() on it is atomic under the GIL

    def job(slot: int) -> None:
        for i in order:
            results[i] = fn(slot, items[i])
    _pool(current()).spread(job, k)
    return results


def parallel_for(n: int, body: Callable[[int, int], None], grain: int | None = None) -> None:
    """body(lo, hi) over the ranges of tasks(n, grain) (grain: GRAIN by default), shared out by run_shared."""
    run_shared(lambda _, r: body(*r), tasks(n, GRAIN if grain is None else grain))


def sharded(body: Callable, out, *ins) -> None:
    """body(out, *ins) over shards of `out`: flat element ranges when every operand of out's shape is
    contiguous and the rest are scalars, else ranges of out's first axis (operands that broadcast along it are
    passed whole). A shard has at least GRAIN elements."""
    n, grain = out.size, GRAIN
    if current() == 1 or n < 2 * grain:
        body(out, *ins)
        return
    full = [getattr(a, "shape", ()) == out.shape for a in ins]
    if out.flags.c_contiguous and all(a.flags.c_contiguous if f else getattr(a, "size", 1) == 1
                                      for a, f in zip(ins, full)):
        flat = [a.reshape(-1) if f else a for a, f in zip(ins, full)]
        o = out.reshape(-1)
        parallel_for(n, lambda lo, hi: body(o[lo:hi], *(a[lo:hi] if f else a for a, f in zip(flat, full))),
                     grain)
        return
    if out.ndim == 0:
        body(out, *ins)
        return
    rows = out.shape[0]
    along = [getattr(a, "ndim", 0) == out.ndim and a.shape[0] == rows for a in ins]
    parallel_for(rows, lambda lo, hi: body(out[lo:hi], *(a[lo:hi] if s else a for a, s in zip(ins, along))),
                 max(1, -(-grain * rows // n)))


# -- BLAS ------------------------------------------------------------------------------------------------------
_blas_lock = threading.Lock()
_blas = {"depth": 0, "limiter": None, "controller": None, "modules": 0, "local": []}


def _openblas_local(controller) -> list:
    """The openblas_set_num_threads_local functions (OpenBLAS 0.3.27+: the calling thread's count; returns the
    previous one) of the OpenBLAS libraries `controller` found."""
    found = []
    for lib in controller.lib_controllers:
        f = getattr(getattr(lib, "dynlib", None), "openblas_set_num_threads_local", None) \
            if lib.internal_api == "openblas" else None
        if f is not None:
            f.restype, f.argtypes = ctypes.c_int, [ctypes.c_int]
            found.append(f)
    return found


@contextlib.contextmanager
def blas_single_threaded():
    """BLAS on one thread inside (the pool parallelizes GEMMs by splitting them); restored when the last
    session run that asked leaves."""
    with _blas_lock:
        if _blas["depth"] == 0:
            # A BLAS loaded since the last look (scipy's own OpenBLAS, imported by the planner's MILP) comes with
            # a new extension module: look again then, not every run (a scan costs milliseconds).
            if _blas["controller"] is None or _blas["modules"] != len(sys.modules):
                from threadpoolctl import ThreadpoolController
                _blas["controller"], _blas["modules"] = ThreadpoolController(), len(sys.modules)
                _blas["local"] = _openblas_local(_blas["controller"])
            _blas["limiter"] = _blas["controller"].limit(limits=1, user_api="blas")
        _blas["depth"] += 1
        local = _blas["local"]
    # NOTE: and this thread's own count: OpenBLAS (numpy's 0.3.31) ignores a process-wide count set from a thread
    # other than the main one once the main one has set one, so a step run from another thread ran its GEMMs on
    # every core, with other rounding than the same step run from the main thread.
    previous = [f(1) for f in local]
    try:
        yield
    finally:
        for f, n in zip(local, previous):
            f(n)
        with _blas_lock:
            _blas["depth"] -= 1
            if _blas["depth"] == 0:
                _blas["limiter"].restore_original_limits()
                _blas["limiter"] = None


@contextlib.contextmanager
def step(n: int):
    """What a session run on the cpu holds: kernels split for `n` threads, BLAS on one."""
    with using(n), blas_single_threaded():
        yield
