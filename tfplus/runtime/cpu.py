"""The cpu device: buffers are NumPy arrays; kernels are the NumPy kernels in tfplus.kernels.numpy."""
from __future__ import annotations

import numpy as np


class CPURuntime:
    """The device runtime interface: allocate, view, copy in, copy out, synchronize.

    Every runtime counts what it moves between host and device (`h2d_bytes`, `d2h_bytes`) and what it
    allocates (`allocated_bytes`), so run metadata and the memory planner can report them.
    """

    name = "cpu"
    kernel_device = "cpu"

    def __init__(self):
        import tfplus.kernels.numpy  # noqa: F401  registers the NumPy kernels
        self.h2d_bytes = self.d2h_bytes = self.allocated_bytes = 0

    def allocate(self, shape, dtype) -> np.ndarray:
        buf = np.empty(shape, dtype=dtype.np)
        self.allocated_bytes += buf.nbytes
        return buf

    def view(self, buf: np.ndarray, shape) -> np.ndarray:
        return buf.reshape(shape)

    def copy_in(self, array: np.ndarray) -> np.ndarray:
        self.h2d_bytes += array.nbytes
        return array

    def copy_out(self, buf: np.ndarray) -> np.ndarray:
        self.d2h_bytes += buf.nbytes
        return np.array(buf, copy=True)

    def synchronize(self) -> None:
        pass

    def describe(self) -> str:
        return "cpu (NumPy)"

    # -- micro-batching (tfplus.planner.execute) --------------------------------------------------------------
    def copy(self, dst: np.ndarray, src: np.ndarray) -> None:
        np.copyto(dst, src)

    def copy_rows(self, dst: np.ndarray, dst_row: int, src: np.ndarray, src_row: int, rows: int) -> None:
        np.copyto(dst[dst_row:dst_row + rows], src[src_row:src_row + rows])

    def add_into(self, acc: np.ndarray, x: np.ndarray) -> None:
        np.add(acc, x, out=acc)

    def scale(self, acc: np.ndarray, factor: float) -> None:
        np.multiply(acc, factor, out=acc, dtype=acc.dtype)
