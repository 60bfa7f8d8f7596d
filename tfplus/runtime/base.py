"""The device interface: what the engine (session, executor, memory plans, replay) may ask of a device runtime.

Every runtime derives from `Runtime`. The abstract methods are what each device must do; every optional
capability is declared here with the answer of a device that lacks it (no tape, no fallback, views that remember
nothing), so the engine calls and reads these names as they are and never probes a runtime for them.
"""
from __future__ import annotations

import abc
import contextlib
import threading

import numpy as np

# The alignment of a host (NumPy) arena's buffers, in bytes: a cache line, and AVX-512's vector width.
HOST_ALIGNMENT = 64


class Runtime(abc.ABC):
    """One device: its buffers, host-device copies, kernels and optional recording of launches.

    Counters every runtime keeps: `h2d_bytes` and `d2h_bytes` (what copy_in and copy_out moved) and
    `allocated_bytes` (what allocate and allocate_arena handed out). `step_lock` is what a session's steps hold
    (one per runtime on the cpu, one per device where runtimes of a device share state)."""

    name: str = "device"
    kernel_device: str = "cpu"  # the registry's device name of the kernels it runs (tfplus.registry)

    # -- declared capabilities (class or instance attributes; the defaults are a device that lacks them) --------
    records_launches: bool = False  # can record a planned step's launches and replay them (the tape_* methods)
    replay: bool = False  # whether sessions replay their repeated steps (records_launches, and not switched off)
    allow_fallback: bool = False  # runs ops it has no kernel for by the cpu kernel (fallback_kernel)
    arena_alignment: int = HOST_ALIGNMENT  # bytes: where a planned arena's buffers may start
    info: dict = {}  # what the device says of itself (OpenCL: name, platform, compute_units, ...)
    # view -> view: forgets the host value a view remembers before the view is written again (OpenCL's
    # set_host); None on devices whose views remember nothing. An attribute, not a method: the executor's
    # fast loop tests it once per program, not once per output.
    fresh = None
    # view -> bool: whether a value lives apart from any planned arena (a constant's own block); None on
    # devices that keep none apart.
    held_apart = None
    # None: usable in a process forked from the one that made it (the cpu's NumPy); else why not (an OpenCL
    # driver's threads stay in the parent: a forked child's first launch waits for them for ever).
    fork_unsafe: str | None = None

    def __init__(self):
        self.h2d_bytes = self.d2h_bytes = self.allocated_bytes = 0
        self.step_lock = threading.RLock()

    # -- what every device does ---------------------------------------------------------------------------------
    @abc.abstractmethod
    def allocate(self, shape, dtype):
        """A new buffer of `shape` and tfplus DType `dtype`."""

    @abc.abstractmethod
    def view(self, buf, shape):
        """`buf`'s memory seen with another shape of the same size."""

    @abc.abstractmethod
    def copy_in(self, array: np.ndarray):
        """A device buffer holding the host array's value."""

    @abc.abstractmethod
    def copy_out(self, buf) -> np.ndarray:
        """A host copy of the buffer's value (after the work queued before it)."""

    @abc.abstractmethod
    def synchronize(self) -> None:
        """Returns when the work queued so far is done."""

    @abc.abstractmethod
    def describe(self) -> str:
        """One line naming the device (`tfplus devices`, logs)."""

    @abc.abstractmethod
    def copy(self, dst, src) -> None:
        """dst[...] = src (buffers of the same size)."""

    @abc.abstractmethod
    def copy_rows(self, dst, dst_row: int, src, src_row: int, rows: int) -> None:
        """dst[dst_row:dst_row + rows] = src[src_row:src_row + rows] along the first axis."""

    @abc.abstractmethod
    def add_into(self, acc, x) -> None:
        """acc += x."""

    @abc.abstractmethod
    def scale(self, acc, factor: float) -> None:
        """acc *= factor."""

    @abc.abstractmethod
    def allocate_arena(self, nbytes: int, alignment: int | None = None):
        """One buffer of `nbytes` for a memory plan's tensors, its start aligned to `alignment` bytes (default
        arena_alignment)."""

    @abc.abstractmethod
    def sub_buffer(self, arena, offset: int, shape, dtype):
        """The view of `arena` at byte `offset` with `shape` and tfplus DType `dtype`."""

    # -- optional, with the answer of a device that lacks them ------------------------------------------------
    def accumulate(self, accs: list, xs: list | None, how: str, factor: float = 1.0) -> None:
        """Merges micro-batch results: per pair, acc = x ("copy"), acc += x ("add"), acc *= factor ("scale", xs
        None) or acc = (acc + x) * factor ("add_scale"). A device may do all pairs in a few launches."""
        for k, acc in enumerate(accs):
            if how != "scale":
                (self.copy if how == "copy" else self.add_into)(acc, xs[k])
            if how in ("scale", "add_scale"):
                self.scale(acc, factor)

    def accumulation(self, accs: list, xs: list | None, how: str, factor: float = 1.0):
        """accumulate(), returning a function `again(accs, xs) -> bool` that repeats it without the host work of
        finding its launches again when the next merge's buffers are where these were (False: they are not, and
        it did nothing); None where there is nothing to save."""
        self.accumulate(accs, xs, how, factor)
        return None

    def fallback_kernel(self, op_type: str, dtype):
        """A kernel that runs `op_type` by the cpu kernel on host copies, when allow_fallback; else None."""
        return None

    def trim(self) -> int:
        """Gives cached free device memory back; returns the bytes freed."""
        return 0

    @property
    def pool_bytes(self) -> int:
        """Device memory the runtime's buffer pool holds, in use or free (0: no pool)."""
        return 0

    # -- recording launches (replay: True) ----------------------------------------------------------------------
    @staticmethod
    def tape_recording() -> bool:
        """Whether launches are being recorded in this thread now."""
        return False

    @staticmethod  # noqa: B027  a device that records nothing has nothing to refuse
    def tape_refuse(why: str) -> None:
        """Marks the recording under way as not replayable, saying why (a random op draws anew each run)."""

    @staticmethod  # noqa: B027  a device that records nothing has nothing to put on a tape
    def tape_host(work, sig: tuple) -> None:
        """Puts host work on the recording under way (if any): `work()`, which the kernel has just done, repeats
        it on the same buffers, and a replay calls it at this point among the launches; `sig` (hashable) says
        what it does, for comparing recordings. For kernels whose host part is a fixed function of their
        buffers (a collective's copy out and hand-over), instead of tape_refuse."""

    def tape_begin(self, feeds: list, fixed: list) -> bool:
        """Starts recording launches; False when the device cannot (then tape_end is not called)."""
        return False

    def tape_end(self, fetched: list):
        """Ends the recording: the tape, or a string saying why it cannot be replayed."""
        raise NotImplementedError(f"{self.name} records no launches")

    def tape_ready(self, tape) -> None:
        """Prepares a tape that two recordings agreed on for replay."""
        raise NotImplementedError(f"{self.name} records no launches")

    def tape_play(self, tape, feeds: list, fixed: list | None) -> bool:
        """Replays a ready tape with the run's fed buffers; False when `fixed` buffers moved (record again)."""
        raise NotImplementedError(f"{self.name} records no launches")

    # -- tracing (tfplus.profiler) --------------------------------------------------------------------------------
    # (direction "h2d" or "d2h", bytes, start, end in time.perf_counter() seconds) -> None: told of each copy
    # between host and device while set (a traced run sets it, and sets it back to None after).
    on_transfer = None

    @contextlib.contextmanager
    def timing(self):
        """Times the kernels launched inside the block by the device's clock: yields the list that gets a (kernel
        name, event) per launch, all complete when the block ends; None on a device that times no kernels apart
        from the host's clock (the cpu)."""
        yield None

    @property
    def compiling(self):
        """What compiling kernels cost this process (`.summary()`: one line, or None when nothing was compiled);
        None on a device that compiles nothing."""
        return None
