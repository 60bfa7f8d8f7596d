"""Device memory: a Block of device memory (or a view into another's), the DeviceArray tensors that kernels take,
and the Pool of freed buffers by size class that a steady-state step allocates nothing from."""
from __future__ import annotations

import numpy as np

from tfplus.runtime.opencl.discovery import cl
from tfplus.runtime.opencl.tape import taping


class Block:
    """Device memory behind one or more DeviceArrays (reshaped views share it). Kernels see it as (`buf`,
    `off`): a cl.Buffer and the byte offset of the first byte in it (see common.cl: GLOBAL, SHIFT). `buf` is
    made on first device use. A block with a `parent` owns no memory: it lies at byte `offset` of the parent's
    (a planned arena slot; rows of another array), which it keeps alive. `host` is a host copy of the contents
    when they came from the host (feeds, constants, shapes) — device kernels never write such a block, so the
    copy stays valid. `derived` marks contents computed without any fed value (constants, shapes, arithmetic
    on them): ops on such values may run on the host. `pool` gets `buf` back when the block dies."""

    __slots__ = ("buf", "off", "host", "derived", "cap", "pool", "parent", "offset", "__weakref__")

    def __init__(self, cap: int, pool=None, buf=None, host=None, parent=None, derived=False, offset=0):
        self.buf, self.host, self.cap, self.pool, self.parent = buf, host, cap, pool, parent
        self.derived, self.offset, self.off = derived, offset, 0
        if parent is not None and parent.buf is not None and host is None:
            self.buf, self.off = parent.buf, parent.off + offset

    def __del__(self):
        if self.pool is not None and self.buf is not None:
            self.pool.give(self.cap, self.buf)


def home(b: Block) -> tuple[Block, int]:
    """The block owning b's memory and b's byte offset in it."""
    off = 0
    while b.parent is not None:
        off, b = off + b.offset, b.parent
    return b, off


class DeviceArray:
    """A tensor in device memory: .shape, .dtype (NumPy), .nbytes, and the Block holding its bytes.
    Copy it to the host with `runtime.copy_out(a)`."""

    __slots__ = ("shape", "dtype", "block")

    def __init__(self, shape, dtype, block: Block):
        self.shape, self.dtype, self.block = tuple(int(d) for d in shape), np.dtype(dtype), block

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def host(self) -> np.ndarray | None:
        """The host copy of the contents, when they were computed on the host; else None."""
        b = self.block
        h = b.host
        if h is not None and not b.derived and taping.tape is not None:
            taping.tape.refuse("a kernel read a fed or computed value on the host")  # it may differ next run
        return None if h is None else h.reshape(self.shape)

    def __array__(self, dtype=None, copy=None):
        raise TypeError("a DeviceArray lives in OpenCL memory; copy it to the host with runtime.copy_out(a)")

    def __getitem__(self, index: slice) -> DeviceArray:
        """Rows `index` (a slice of the first axis, step 1) as a view of the same device memory: no copy.
        Used for batch slices (micro-batches, convolution chunks); its contents live on the device only.

            >>> rt.copy_out(rt.copy_in(np.arange(6.0).reshape(3, 2))[1:])   # doctest: +SKIP
            array([[2., 3.], [4., 5.]])
        """
        if not isinstance(index, slice) or not self.shape:
            raise TypeError(f"a DeviceArray of shape {self.shape} takes one slice of its rows (a[i:j]), "
                            f"not {index!r}")
        start, stop, step = index.indices(self.shape[0])
        if step != 1:
            raise ValueError(f"a DeviceArray row view needs step 1 (got {step}): rows must be contiguous")
        rows = max(stop - start, 0)
        row = self.nbytes // self.shape[0] if self.shape[0] else 0
        return DeviceArray((rows,) + self.shape[1:], self.dtype,
                           Block(rows * row, parent=self.block, offset=start * row))

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype})"


class Pool:
    """Freed device buffers by size class; reused before anything new is allocated."""

    def __init__(self, ctx):
        self.ctx, self.free = ctx, {}
        self.held_bytes = 0     # all buffers the pool made (in use or free)
        self.allocations = 0    # clCreateBuffer calls
        # The ledger of device memory in use by tensors (taken and not given back), and its peak; what the
        # runtime keeps for its life (graph constants, kernels' index tables) is counted apart, in cache_bytes.
        self.in_use_bytes = self.peak_in_use_bytes = self.cache_bytes = 0

    def take(self, cap: int, cache: bool = False):
        if cache:
            self.cache_bytes += cap
        else:
            self.in_use_bytes += cap
            self.peak_in_use_bytes = max(self.peak_in_use_bytes, self.in_use_bytes)
        bufs = self.free.get(cap)
        if bufs:
            return bufs.pop()
        self.allocations += 1
        self.held_bytes += cap
        # OpenCL has no empty buffers; a plan's arena is empty when no output needs one (a lone Identity).
        return cl.Buffer(self.ctx, cl.mem_flags.READ_WRITE, max(cap, 1))

    def give(self, cap: int, buf) -> None:
        self.in_use_bytes -= cap
        self.free.setdefault(cap, []).append(buf)

    def trim(self) -> int:
        """Releases every free buffer; returns the bytes released."""
        n = sum(cap * len(b) for cap, b in self.free.items())
        self.free.clear()
        self.held_bytes -= n
        return n
