"""The cpu device: buffers are NumPy arrays; kernels are the NumPy kernels in tfplus.kernels.numpy."""
from __future__ import annotations

import ctypes
import os
import time

import numpy as np

from tfplus.runtime.base import Runtime


class CPURuntime(Runtime):
    """The host as a device (tfplus.runtime.base.Runtime): buffers are NumPy arrays, a memory plan's arena one
    byte array viewed at its offsets."""

    name = "cpu"
    kernel_device = "cpu"

    def __init__(self):
        import tfplus.kernels.numpy  # noqa: F401  registers the NumPy kernels
        _keep_freed_memory()
        super().__init__()

    def allocate(self, shape, dtype) -> np.ndarray:
        buf = np.empty(shape, dtype=dtype.np)
        self.allocated_bytes += buf.nbytes
        return buf

    def view(self, buf: np.ndarray, shape) -> np.ndarray:
        return buf.reshape(shape)

    def copy_in(self, array: np.ndarray) -> np.ndarray:
        self.h2d_bytes += array.nbytes
        if self.on_transfer is not None and array.nbytes:
            now = time.perf_counter()
            self.on_transfer("h2d", array.nbytes, now, now)
        return array

    def copy_out(self, buf: np.ndarray) -> np.ndarray:
        t0 = time.perf_counter()
        out = np.array(buf, copy=True)
        self.d2h_bytes += buf.nbytes
        if self.on_transfer is not None and buf.nbytes:
            self.on_transfer("d2h", buf.nbytes, t0, time.perf_counter())
        return out

    def synchronize(self) -> None:
        pass

    def describe(self) -> str:
        return "cpu (NumPy)"

    # -- memory plans: one arena, tensors at aligned offsets in it ----------------------------------------------
    def allocate_arena(self, nbytes: int, alignment: int | None = None) -> np.ndarray:
        alignment = alignment or self.arena_alignment
        raw = np.empty(nbytes + alignment, np.uint8)
        shift = (-raw.ctypes.data) % alignment  # offsets are aligned relative to the arena; align its start too
        self.allocated_bytes += raw.nbytes
        return raw[shift:shift + nbytes]

    def sub_buffer(self, arena: np.ndarray, offset: int, shape, dtype) -> np.ndarray:
        n = dtype.size
        for d in shape:
            n *= d
        return arena[offset:offset + n].view(dtype.np).reshape(shape)

    # -- micro-batching (tfplus.engine.memory) --------------------------------------------------------------
    def copy(self, dst: np.ndarray, src: np.ndarray) -> None:
        np.copyto(dst, src)

    def copy_rows(self, dst: np.ndarray, dst_row: int, src: np.ndarray, src_row: int, rows: int) -> None:
        np.copyto(dst[dst_row:dst_row + rows], src[src_row:src_row + rows])

    def add_into(self, acc: np.ndarray, x: np.ndarray) -> None:
        np.add(acc, x, out=acc)

    def scale(self, acc: np.ndarray, factor: float) -> None:
        np.multiply(acc, factor, out=acc, dtype=acc.dtype)


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
_malloc_tuned = []


def _keep_freed_memory() -> None:
    """Makes glibc's malloc keep the memory that kernels free (their outputs and scratch, all freed again within
    the step) for the next allocation, instead of handing it back to the system and page-faulting it in again,
    zeroed by the kernel, on the next step. By default buffers of a few MB and up are mmap'ed and unmapped
    each time, and the heap's top is trimmed past twice the largest freed one: with the convolutions' scratch
    split per intra-op thread, that doubled a Mentee step's CPU time at 16 shards, and the page faults contend
    on the process's memory map lock across threads. Once per process; MALLOC_MMAP_THRESHOLD_ or
    MALLOC_TRIM_THRESHOLD_ in the environment (glibc's own) win; a no-op on other C libraries."""
    if _malloc_tuned or "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return
    _malloc_tuned.append(True)
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # no mallopt (macOS, Windows)
        return
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    mallopt(_M_MMAP_THRESHOLD, 32 << 20)  # glibc's largest on 64-bit: buffers up to 32 MB come from the heap
    mallopt(_M_TRIM_THRESHOLD, 1 << 30)  # and the heap keeps up to 1 GB freed at its top (a step's peak, reused)
