"""OpenCLRuntime: one OpenCL device behind tfplus.runtime.base.Runtime (buffers, copies, kernel launches, tapes,
fallback to the cpu kernels, statistics). NOTE: run() is the hot path of a GPU step: keep it inline."""
from __future__ import annotations

import collections
import contextlib
import os
import sys
import time
from typing import Any

import numpy as np

from tfplus import debug
from tfplus.runtime.base import Runtime
from tfplus.runtime.opencl.build import CompileNotice
from tfplus.runtime.opencl.device import FORK_REASON, Device, Kernel, refuse_if_forked
from tfplus.runtime.opencl.discovery import cl, cltypes, replay_enabled, select
from tfplus.runtime.opencl.memory import Block, DeviceArray, home
from tfplus.runtime.opencl.tape import Tape, flush_every, taping
from tfplus.units import size_class

# Values at most this big reach the device through the content cache: one device copy per distinct value.
_SMALL_BYTES = 1024
# Fed arrays at least this big (a batch) go up through pinned staging buffers (OpenCLRuntime._staged_upload), a
# ring of this many per size class: an upload of a step reuses the buffer of the upload that many feeds before.
_STAGED_BYTES = 1 << 18
_STAGING_RING = 4
_CLASSES: dict[int, int] = {}  # nbytes -> size_class(nbytes), for allocate


class OpenCLRuntime(Runtime):
    """One OpenCL device (tfplus.runtime.base.Runtime).

    Runtimes of one device share its context, queue, buffer pool and programs; each counts its own traffic:
    `h2d_bytes`, `d2h_bytes` (bytes moved), `allocated_bytes` (bytes handed out by allocate).
    """

    name = "opencl"
    kernel_device = "opencl"
    records_launches = True
    fork_unsafe = FORK_REASON

    def __init__(self, selector: str | None = None):
        if cl is None:
            raise RuntimeError("the opencl device needs pyopencl: pip install pyopencl (and "
                               "pocl-binary-distribution "
                               "for a CPU device)")
        import tfplus.kernels.opencl  # noqa: F401  registers the OpenCL kernels
        flush_every()  # a bad TFPLUS_OPENCL_FLUSH is refused when the device is made, not at a step's replay
        refuse_if_forked()  # before select: NVIDIA's driver fails to list its devices in a forked child
        self.dev = Device.get(select(selector))
        self.queue = self.dev.queue
        self.info = self.dev.info
        self.h2d_bytes = self.d2h_bytes = self.allocated_bytes = 0
        self.arena_alignment = self.dev.align
        self.allow_fallback = os.environ.get("TFPLUS_OPENCL_FALLBACK", "0") not in ("", "0")
        self.fallbacks: dict[str, dict] = {}   # node name -> {"op", "runs", "h2d_bytes", "d2h_bytes"}
        self._consts: dict[int, tuple] = {}    # id(Const value) -> (value, its block)
        self.plans: dict = {}  # launchers' per-shape launch plans (kernel, sizes, scalar arguments)
        self._uploads: collections.deque = collections.deque(maxlen=16)  # events of copy_in's uploads
        self.profile: list | None = [] if os.environ.get("TFPLUS_OPENCL_PROFILE") else None
        self.replay = replay_enabled()
        self.step_lock = self.dev.step_lock  # its device's runtimes share one (base.Runtime)
        # Copies queued behind a user event that a host thread completes (an all-reduce's copy back, run ahead:
        # kernels/opencl/collective.py): key -> deque of (a function that waits, with a timeout, until the thread
        # completed it; the copy's event, kept until then: pyopencl's event of a host copy waits for it when
        # dropped, holding Python's lock, which the thread needs).
        self.gated = self.dev.gated

    # -- the interface the executor uses ---------------------------------------------------------------------
    def allocate(self, shape, dtype) -> DeviceArray:
        a = DeviceArray.__new__(DeviceArray)  # NOTE: the hot path of every op: no validation here
        a.shape, a.dtype = tuple(shape), np.dtype(getattr(dtype, "np", dtype))
        n = a.nbytes
        cap = _CLASSES.get(n) or _CLASSES.setdefault(n, size_class(n))
        a.block = Block(cap, self.dev.pool)
        self.allocated_bytes += n
        return a

    def view(self, buf: DeviceArray, shape) -> DeviceArray:
        return DeviceArray(shape, buf.dtype, buf.block)

    def copy_in(self, array: np.ndarray) -> DeviceArray:
        array = np.asarray(array, order="C")  # NOTE: not ascontiguousarray, which makes 0-d arrays 1-d
        a = self.allocate(array.shape, array.dtype)
        if array.nbytes >= _STAGED_BYTES:  # a batch: through pinned memory, and no host copy kept
            b = a.block
            b.buf = self.dev.pool.take(b.cap)
            self._staged_upload(b.buf, array, b.cap)
            return a
        # Uploaded without waiting, so that feeding step k+1 does not wait for step k to finish (a blocking
        # write on an in-order queue would); small feeds too, or a batch's labels make every step a sync. Our
        # own copy: the caller may refill its array meanwhile.
        # NOTE: pyopencl's event holds the host array and waits for the copy when dropped: keep the last few.
        b = a.block
        b.host = np.array(array, copy=True)
        b.buf = self.dev.pool.take(b.cap)
        self._upload(b.buf, b.host, blocking=False)
        return a

    def _staged_upload(self, buf, array: np.ndarray, cap: int) -> None:
        """Uploads `array` into `buf` without waiting, through one of a few pinned host buffers of its size
        class (CL_MEM_ALLOC_HOST_PTR, mapped once): one copy into pinned memory, then a DMA. From pageable
        memory the driver stages the bytes itself inside the enqueue call, which took a step's host ~0.2 ms
        for a 1.5 MB batch on the H100 (before any kernel of the step could start)."""
        ring = self.dev.staging.setdefault(cap, collections.deque())
        if len(ring) < _STAGING_RING:
            self.settle()  # NOTE: the blocking map below waits for every gated copy back queued before it
            pinned = cl.Buffer(self.dev.ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR, cap)
            view, _ = cl.enqueue_map_buffer(self.queue, pinned, cl.map_flags.WRITE, 0, (cap,), np.uint8,
                                            is_blocking=True)
            entry = [pinned, view, None]
        else:
            entry = ring.popleft()
            if entry[2].command_execution_status != cl.command_execution_status.COMPLETE:
                self.settle()  # NOTE: as a blocking call: the upload may wait for gated copy backs
            entry[2].wait()  # its last upload (steps ago) must be done before its bytes are overwritten
        host = entry[1][:array.nbytes].view(array.dtype).reshape(array.shape)
        np.copyto(host, array)
        entry[2] = cl.enqueue_copy(self.queue, buf, host, is_blocking=False)
        ring.append(entry)
        self.h2d_bytes += array.nbytes

    def pinned_array(self, key, shape, dtype) -> np.ndarray:
        """A host array in pinned memory (CL_MEM_ALLOC_HOST_PTR, mapped once), the same one for `key` while its
        shape and dtype stay: a non-blocking copy between it and the device is a DMA the host does not wait for.
        Into pageable memory NVIDIA's driver returns from a "non-blocking" read only once the queue has reached
        it, so the host could not queue the rest of the step meanwhile."""
        held = self.dev.pinned.get(key)
        if held is None or held.shape != tuple(shape) or held.dtype != dtype:
            held = self.dev.pinned[key] = self.pinned_host(shape, dtype)
        return held

    def pinned_host(self, shape, dtype) -> np.ndarray:
        """A new host array in pinned memory (CL_MEM_ALLOC_HOST_PTR, mapped for the array's life: its map holds
        the buffer), outside the device ledger: a paged optimizer slot's home (tfplus.engine.paging)."""
        self.settle()  # NOTE: the blocking map below waits for every gated copy back queued before it
        nbytes = max(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize, 1)
        buf = cl.Buffer(self.dev.ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR, nbytes)
        view, _ = cl.enqueue_map_buffer(self.queue, buf, cl.map_flags.READ | cl.map_flags.WRITE, 0, tuple(shape),
                                        dtype, is_blocking=True)
        return view

    def settle(self) -> None:
        """Before a blocking call: waits until the host threads completed the user events of every gated copy
        (`gated`), each wait with its timeout, so that the call waits for the device alone, never for ever."""
        for held in self.gated.values():
            for finish, _ in held:
                finish()

    def copy_out(self, buf: DeviceArray) -> np.ndarray:
        if buf.block.host is not None:
            return np.array(buf.host, copy=True)
        out = np.empty(buf.shape, buf.dtype)
        if taping.tape is not None:
            taping.tape.refuse("a kernel read a device value on the host")
        if out.nbytes:
            self.settle()
            t0 = time.perf_counter()
            cl.enqueue_copy(self.queue, out, self.buffer(buf), src_offset=buf.block.off, is_blocking=True)
            self.d2h_bytes += out.nbytes
            if self.on_transfer is not None:
                self.on_transfer("d2h", out.nbytes, t0, time.perf_counter())
        return out

    def synchronize(self) -> None:
        self.settle()
        self.queue.finish()

    def profiling_queue(self):
        """A queue of this device with event profiling on, for traced runs (tfplus.profiler); the usual one
        has it off unless TFPLUS_OPENCL_PROFILE is set."""
        dev = self.dev
        if dev.profiling_queue is None:
            dev.profiling_queue = cl.CommandQueue(dev.ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
        return dev.profiling_queue

    @contextlib.contextmanager
    def timing(self):
        """Launches inside the block go to the profiling queue; yields the list of (kernel name, event) they
        add, all complete when the block ends (autotuning times by the GPU's clock: the host's would time the
        launches of a short kernel)."""
        queue, profile = self.queue, self.profile
        self.synchronize()  # the work queued before finishes on the old queue first
        self.queue, self.profile = self.profiling_queue(), []
        try:
            yield self.profile
        finally:
            self.synchronize()
            self.queue, self.profile = queue, profile

    @property
    def compiling(self) -> CompileNotice:
        """What compiling this device's programs cost this process (build.CompileNotice; shared by its runtimes)."""
        return self.dev.compiling

    def describe(self) -> str:
        i = self.info
        return f"opencl ({i['platform']} / {i['name']}, {i['opencl_version']}, driver {i['driver_version']})"

    # -- planner hooks: one arena, tensors at aligned offsets in it ------------------------------------------
    def allocate_arena(self, nbytes: int, alignment: int | None = None) -> DeviceArray:  # starts aligned
        a = DeviceArray((nbytes,), np.uint8, Block(nbytes, self.dev.pool))  # its exact size: no size class
        self.buffer(a)
        self.allocated_bytes += nbytes
        return a

    def sub_buffer(self, arena: DeviceArray, offset: int, shape, dtype) -> DeviceArray:
        """A view of `arena` at byte `offset`: the arena's buffer and that offset, no cl sub-buffer (NVIDIA
        charges ~87 us per launch on overlapping sub-buffers, and the spec leaves a command using two of
        them undefined)."""
        dt = np.dtype(getattr(dtype, "np", dtype))
        if offset % self.dev.align:
            # The planner aligns every slot to arena_alignment; kernels may rely on it (see common.cl).
            raise ValueError(f"arena offset {offset} is not a multiple of the arena alignment {self.dev.align}")
        a = DeviceArray(shape, dt, None)
        self.buffer(arena)
        a.block = Block(a.nbytes, parent=arena.block, offset=offset)
        return a

    # -- micro-batching (tfplus.engine.memory) --------------------------------------------------------------
    def copy_rows(self, dst: DeviceArray, dst_row: int, src: DeviceArray, src_row: int, rows: int) -> None:
        """dst[dst_row:dst_row + rows] = src[src_row:src_row + rows] on the device (same row size)."""
        if rows:
            self.copy(dst[dst_row:dst_row + rows], src[src_row:src_row + rows])

    def add_into(self, acc: DeviceArray, x: DeviceArray) -> None:
        """acc += x (same shape)."""
        from tfplus.kernels.opencl.elementwise import binary
        binary(self, "add", acc, acc, x)

    def scale(self, acc: DeviceArray, factor: float) -> None:
        """acc *= factor."""
        from tfplus.kernels.opencl.elementwise import scale
        scale(self, acc, factor)

    def accumulate(self, accs: list, xs: list | None, how: str, factor: float = 1.0) -> None:
        """copy / add_into / scale / add_into then scale ("copy", "add", "scale", "add_scale") of many tensors
        at once: one launch when they share a buffer (a plan's arena), else a launch per eight."""
        from tfplus.kernels.opencl.fused import multi_accumulate
        multi_accumulate(self, accs, xs, how, factor)

    def accumulation(self, accs: list, xs: list | None, how: str, factor: float = 1.0):
        """accumulate(...) now, recorded: the callable it returns, given the next merge's (accs, xs), repeats the
        launches with a bare enqueue each when those are views of the same memory, and says whether it did (a
        micro-batched step's merges, tfplus.engine.replay.Merges); None when this runtime does not record now
        (as tape_begin)."""
        if not self.tape_begin([], []):
            self.accumulate(accs, xs, how, factor)
            return None
        try:
            self.accumulate(accs, xs, how, factor)
        finally:
            tape = self.tape_end([])
        if isinstance(tape, str):
            return None
        self.tape_ready(tape)
        where = _places(accs, xs)

        def again(accs: list, xs: list | None) -> bool:
            if _places(accs, xs) != where:
                return False
            tape.play([])
            return True
        return again

    # -- tapes (tfplus.engine.executor replays a planned program's launches) -----------------------------------------
    def tape_begin(self, feeds: list, fixed: list) -> bool:
        """Starts recording this thread's launches on a tape; `feeds`: the run's fed buffers, `fixed`: buffers
        that must stay where they are for a replay (variables). False when this runtime does not record now
        (a profiled queue, TFPLUS_OPENCL_REPLAY=0, a tape already recording)."""
        if self.profile is not None or not self.replay or taping.tape is not None:
            return False
        tape = taping.tape = Tape([(self.buffer(f), f.block.off, f.nbytes) for f in feeds])
        tape.fixed = self._places(fixed)
        return True

    def tape_end(self, fetched: list) -> Tape | str:
        """The tape recorded since tape_begin, or why it cannot be replayed. `fetched`: the buffers the run
        returns, which must not be fed ones (a replay returns the recorded buffers). NOTE: by bytes, not by
        buffer: a planned step's feeds and fetches are views of one arena."""
        tape, taping.tape = taping.tape, None
        fed: dict[int, list] = {}
        for b, off, n in tape.feeds:
            fed.setdefault(id(b), []).append((off, off + n))
        for f in fetched:
            if f is None:
                continue
            start = f.block.off
            if any(start < end and begin < start + f.nbytes for begin, end in fed.get(id(f.block.buf), ())):
                tape.refuse("the run returns a fed value")
                break
        return tape if tape.why is None else tape.why

    @staticmethod
    def tape_recording() -> bool:
        """Whether this thread's launches go on a tape now (a replay then would enqueue past it)."""
        return taping.tape is not None

    @staticmethod
    def tape_refuse(why: str) -> None:
        """Marks the tape being recorded (if any) as not replayable, e.g. for a random op's draw."""
        if taping.tape is not None:
            taping.tape.refuse(why)

    @staticmethod
    def tape_host(work, sig: tuple) -> None:
        """Puts host work on the tape being recorded (if any): `work()`, which the kernel has just done, repeats it
        on the same buffers, and a replay calls it at this point among the launches; `sig` says what it does (two
        recordings must agree on it)."""
        if taping.tape is not None:
            taping.tape.host(work, sig)

    @staticmethod
    def tape_vary(n: int, args, sig: tuple) -> None:
        """Makes the last n arguments of the launch just made (scalars) `args()` in each replay of the tape being
        recorded (if any), set just before it is enqueued (a random draw's run: kernels/opencl/random.py); `sig`
        says what they are, in place of their recorded values (two recordings must agree on it)."""
        if taping.tape is not None:
            taping.tape.vary(n, args, sig)

    def tape_ready(self, tape: Tape) -> None:
        """Makes `tape` replayable (a kernel object per launch, its arguments set)."""
        tape.compile(self.queue, polls=self.dev.polls)

    def tape_play(self, tape: Tape, feeds: list, fixed: list | None) -> bool:
        """Replays a ready `tape` with the run's `feeds`; False (nothing done) when a `fixed` buffer moved
        (None: the caller knows none did)."""
        if fixed is not None and self._places(fixed) != tape.fixed:
            return False
        tape.play([(self.buffer(f), f.block.off) for f in feeds])
        return True

    def _places(self, arrays: list) -> list:
        return [(id(self.buffer(a)), a.block.off) for a in arrays]

    # -- kernels ---------------------------------------------------------------------------------------------
    def kernel(self, files, name: str, options: str = "") -> Kernel:
        """Kernel `name` of the program built from `files` (a .cl name or a tuple, after common.cl)."""
        return self.dev.kernel(files if isinstance(files, tuple) else (files,), name, options)

    def run(self, k: Kernel, gsize: tuple, lsize: tuple | None, *args) -> None:
        """Enqueues kernel `k` over `gsize` work-items (rounded up to `lsize` multiples by the caller).
        DeviceArray arguments become their buffers; scalars must be NumPy scalars."""
        if 0 in gsize:
            return
        if not k.typed:
            k.type_args(args)
        flat: list = []
        add = flat.append
        for a in args:  # NOTE: the hot path of every launch: (buffer, offset) per DeviceArray, inline
            if type(a) is DeviceArray:
                b = a.block
                if b.buf is None:
                    self._materialize(b)
                add(b.buf)
                add(b.off)
            elif a is None:
                add(None)
                add(0)
            else:
                add(a)
        ev = k.k(self.queue, gsize, lsize, *flat)
        tape = taping.tape
        if tape is not None:
            tape.launch(k, gsize, lsize, flat)
        if self.profile is not None:
            self.profile.append((k.name, ev))
        for poll in self.dev.polls:  # a step not replayed moves the all-reduces on here (a replay: at its flushes)
            poll()

    def run1d(self, k: Kernel, n: int, *args, local: int = 256) -> None:
        """`k` over n work-items in groups of `local` (the kernel checks i < n)."""
        self.run(k, *self.grid1d(n, local), *args)

    def grid1d(self, n: int, local: int = 256) -> tuple[tuple, tuple]:
        """(global, local) sizes of n work-items in groups of `local` (at most the device's limit)."""
        local = min(local, self.dev.max_wg)
        return (-(-n // local) * local,), (local,)

    def buffer(self, a: DeviceArray):
        """The cl.Buffer holding `a` (at byte a.block.off), made (and filled from its host copy) on first use."""
        b = a.block
        if b.buf is None:
            self._materialize(b)
        return b.buf

    def _materialize(self, b: Block) -> None:
        host = b.host
        small = host is not None and b.derived and host.nbytes <= _SMALL_BYTES
        if b.parent is not None:  # in another block's memory: an arena slot, rows of an array
            if small:  # a host value (set_host), read by a kernel now: the cached copy waits for nothing
                b.buf, b.off = self._small(host), 0
                return
            p = b.parent
            if p.buf is None:
                self._materialize(p)
            b.buf, b.off = p.buf, p.off + b.offset
            if host is not None:
                if taping.tape is not None:  # a replay would not write it, and later ops reuse the slot
                    taping.tape.refuse("a host value was written into a planned buffer")
                self._upload(b.buf, host, b.off)
            return
        if host is None:
            b.buf = self.dev.pool.take(b.cap)
            return
        if small:  # constants and shapes: few distinct values
            b.buf, b.pool = self._small(host), None  # shared and read-only: never back to the pool
            return
        b.buf = self.dev.pool.take(b.cap, cache=b.pool is None)  # no pool to go back to: kept for good
        self._upload(b.buf, host)

    def _small(self, host: np.ndarray):
        """The device's read-only copy of a small derived value (constants, shapes), uploaded once."""
        key = (host.dtype.str, host.tobytes())
        buf = self.dev.small.get(key)
        if buf is None:
            buf = self.dev.small[key] = cl.Buffer(self.dev.ctx, cl.mem_flags.READ_WRITE, max(host.nbytes, 4))
            self._upload(buf, host)
        return buf

    def _upload(self, buf, host: np.ndarray, off: int = 0, blocking: bool = True) -> None:
        if host.nbytes:
            if blocking:
                self.settle()
            t0 = time.perf_counter()
            ev = cl.enqueue_copy(self.queue, buf, np.asarray(host, order="C"), dst_offset=off, is_blocking=blocking)
            if not blocking:
                self._uploads.append(ev)
            self.h2d_bytes += host.nbytes
            if self.on_transfer is not None:  # every upload but a staged batch's (feeds, constants, fallbacks)
                self.on_transfer("h2d", host.nbytes, t0, time.perf_counter())

    def constant(self, value: np.ndarray) -> Block:
        """The block of a graph constant: one per value for the runtime's life, uploaded at first use."""
        hit = self._consts.get(id(value))
        if hit is None or hit[0] is not value:
            hit = self._consts[id(value)] = (value, Block(size_class(value.nbytes), None, host=value,
                                                           derived=True))
        return hit[1]

    def table(self, key, make) -> DeviceArray:
        """A read-only table for kernels (e.g. convolution tap offsets): `make()` builds it on the host once
        per device and key; it is uploaded on first use and kept."""
        t = self.dev.tables.get(key)
        if t is None:
            host = np.asarray(make(), order="C")
            t = self.dev.tables[key] = DeviceArray(host.shape, host.dtype, Block(
                size_class(host.nbytes), None, host=host, derived=True))
        return t

    def set_host(self, a: DeviceArray, value: np.ndarray, derived: bool = True) -> None:
        """Makes `a` hold `value`, computed on the host (from constants and shapes alone if `derived`); it
        goes to the device only if a device kernel reads it."""
        value = np.asarray(value, a.dtype, order="C").reshape(a.shape)
        if not derived and taping.tape is not None:
            taping.tape.refuse("a kernel computed a value on the host")
        b = a.block
        if b.parent is not None:
            # A planned arena slot stays where the plan put it; like any host value, it is written to the
            # device only if a device kernel reads it (buffer()), so host readers (shapes, axes) never wait.
            b.buf, b.host, b.derived = None, value, derived
            return
        a.block = Block(b.cap, self.dev.pool, host=value, derived=derived)

    @staticmethod
    def held_apart(a: DeviceArray) -> bool:
        """Whether `a`'s value lives apart from any planned arena, so that later ops writing the arena leave it
        alone: a block of its own (a constant), or a small host value, which kernels read through the content
        cache (_materialize), never from the arena slot."""
        b = a.block
        return b.parent is None or (b.host is not None and b.derived and b.host.nbytes <= _SMALL_BYTES)

    @staticmethod
    def fresh(a: DeviceArray) -> DeviceArray:
        """A planned arena slot about to be written again (tfplus.engine.memory): what it held is forgotten."""
        b = a.block
        p = b.parent
        if p is not None:
            b.buf, b.off, b.host, b.derived = p.buf, p.off + b.offset, None, False
        return a

    def copy(self, dst: DeviceArray, src: DeviceArray) -> None:
        """dst[...] = src on the device (same number of bytes); nothing when dst is src's memory (a plan's
        in-place output)."""
        if src.nbytes and not self.same_memory(dst, src):
            d, s = self.buffer(dst), self.buffer(src)
            cl.enqueue_copy(self.queue, d, s, byte_count=src.nbytes, src_offset=src.block.off,
                            dst_offset=dst.block.off)
            tape = taping.tape
            if tape is not None:
                tape.copy(d, dst.block.off, s, src.block.off, src.nbytes)

    def page(self, a: DeviceArray, host: np.ndarray, into_device: bool) -> None:
        """Queues a copy of a paged optimizer slot (tfplus.engine.paging) between its host array `host` and its
        staging view `a`, without waiting: in when `into_device`, else back out. On the tape being recorded (if any)
        as host work, so a replay makes the same copy in its place; the in-order queue keeps it between the update
        kernels around it. NOTE: `host` is written by the queue: read it only after synchronize()."""
        buf, off = self.buffer(a), a.block.off

        def copy():
            if into_device:
                cl.enqueue_copy(self.queue, buf, host, dst_offset=off, is_blocking=False)
                self.h2d_bytes += host.nbytes
            else:
                cl.enqueue_copy(self.queue, host, buf, src_offset=off, is_blocking=False)
                self.d2h_bytes += host.nbytes
        copy()
        self.tape_host(copy, ("page", into_device, off, host.nbytes))

    @staticmethod
    def same_memory(a: DeviceArray, b: DeviceArray) -> bool:
        """Whether a and b start at the same device memory: one block, or one offset of one block's memory
        (a plan's output written over its input is another view of the input's arena slot)."""
        x, y = a.block, b.block
        return x is y or home(x) == home(y)

    def upload_into(self, a: DeviceArray, value: np.ndarray) -> None:
        """Writes host `value` into `a`'s device buffer now (counted in h2d_bytes)."""
        if taping.tape is not None:
            taping.tape.refuse("a host value was written into a device buffer")
        self._upload(self.buffer(a), np.asarray(value, a.dtype, order="C"), a.block.off)

    # -- fallback to the NumPy kernels ----------------------------------------------------------------------
    def fallback_kernel(self, op_type: str, dtype):
        """A kernel running op_type's cpu kernel on host copies, if fallback is enabled and one exists."""
        if not self.allow_fallback:
            return None
        from tfplus.registry import find_kernel
        cpu = find_kernel(op_type, "cpu", dtype)
        if cpu is None:
            return None
        from tfplus.kernels.opencl._common import run_on_host

        def kernel(ctx, ins, outs, attrs):
            before = (self.h2d_bytes, self.d2h_bytes)
            run_on_host(ctx, cpu, ins, outs, attrs, upload=True)
            rec = self.fallbacks.setdefault(ctx.op.name, {"op": op_type, "runs": 0, "h2d_bytes": 0,
                                                          "d2h_bytes": 0})
            if rec["runs"] == 0 and debug.level() >= 1:
                print(f"tfplus: {op_type} '{ctx.op.name}' has no opencl kernel: running its cpu kernel",
                      file=sys.stderr)
            rec["runs"] += 1
            rec["h2d_bytes"] += self.h2d_bytes - before[0]
            rec["d2h_bytes"] += self.d2h_bytes - before[1]
        return kernel

    def placement_report(self) -> str:
        """Every op that ran on the host instead of the device, with the bytes its copies moved."""
        if not self.fallbacks:
            return f"all ops ran on {self.describe()}"
        lines = [f"ops that fell back to the cpu (on {self.describe()}):",
                 f"{'node':40s} {'op':28s} {'runs':>5s} {'h2d bytes':>12s} {'d2h bytes':>12s}"]
        for name, r in sorted(self.fallbacks.items()):
            lines.append(f"{name:40s} {r['op']:28s} {r['runs']:5d} {r['h2d_bytes']:12d} {r['d2h_bytes']:12d}")
        return "\n".join(lines)

    # -- statistics ------------------------------------------------------------------------------------------
    @property
    def device_allocations(self) -> int:
        """clCreateBuffer calls made by the device's pool so far (flat in a steady state)."""
        return self.dev.pool.allocations

    @property
    def pool_bytes(self) -> int:
        return self.dev.pool.held_bytes

    @property
    def in_use_bytes(self) -> int:
        """Device memory the device's tensors hold now (pool size classes; the planner's arena exactly)."""
        return self.dev.pool.in_use_bytes

    def reset_peak(self) -> int:
        """Starts a new peak of in_use_bytes (read it from peak_bytes); returns the previous peak."""
        pool = self.dev.pool
        peak, pool.peak_in_use_bytes = pool.peak_in_use_bytes, pool.in_use_bytes
        return peak

    @property
    def peak_bytes(self) -> int:
        """The most device memory the tensors held at once since the last reset_peak()."""
        return self.dev.pool.peak_in_use_bytes

    @property
    def cache_bytes(self) -> int:
        """Device memory the runtime keeps for good beside the tensors: graph constants and kernels' index
        tables above the small-value cache's size (not in in_use_bytes)."""
        return self.dev.pool.cache_bytes

    def trim(self) -> int:
        """Gives the device's free pooled buffers back to the driver; returns the bytes freed."""
        return self.dev.pool.trim()

    def profile_report(self) -> dict[str, tuple[int, float]]:
        """With TFPLUS_OPENCL_PROFILE=1: {kernel name: (launches, total ms)} since the last call."""
        if self.profile is None:
            raise RuntimeError("set TFPLUS_OPENCL_PROFILE=1 before the runtime is made to profile kernels")
        self.synchronize()
        out: dict[str, Any] = {}
        for name, ev in self.profile:
            n, ms = out.get(name, (0, 0.0))
            out[name] = (n + 1, ms + (ev.profile.end - ev.profile.start) * 1e-6)
        self.profile.clear()
        return out


def record(runtime: OpenCLRuntime, name: str) -> None:
    """Keeps the programs `runtime`'s device was first asked for since prebuild(..., name) as `name`'s list in
    cache_dir(), for the next prebuild of `name` (`tfplus train` records "train-<model>" after its first step, what
    that step needs, and "eval-<model>" after its first evaluation, what the evaluation added)."""
    runtime.dev.record_programs(name)


_INT8 = None if cl is None else cltypes.int8


def int8(values) -> Any:
    """An OpenCL int8 vector argument holding up to 8 ints (the rest 0): shapes and strides for kernels."""
    v = list(values) + [0] * (8 - len(values))
    if len(v) > 8:
        raise ValueError(f"at most 8 dims after merging, got {len(values)}")
    return np.array(tuple(v), _INT8)


def _places(accs: list, xs: list | None) -> list:
    """Where a merge's buffers are (device buffer, offset, size): a recorded merge repeats only on the same."""
    return [(v.block.buf, v.block.off, v.size) for v in accs + (xs or []) if v is not None]
