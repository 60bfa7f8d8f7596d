"""Device runtimes. Each is one file behind one small interface (see cpu.py's CPURuntime)."""
from __future__ import annotations


def get_runtime(device: str):
    """'cpu' -> the NumPy runtime; 'opencl', 'opencl:N' or 'opencl:<name>' -> an OpenCL device."""
    kind, _, index = (device or "cpu").partition(":")
    kind = kind.lower()
    if kind == "cpu":
        if index not in ("", "0"):
            raise ValueError(f"device {device!r}: there is one cpu device, 'cpu'")
        from tfplus.runtime.cpu import CPURuntime
        return CPURuntime()
    if kind in ("opencl", "gpu", "cl"):
        from tfplus.runtime.opencl import OpenCLRuntime
        return OpenCLRuntime(index or None)
    raise ValueError(f"unknown device {device!r}; use 'cpu', 'opencl' or 'opencl:N' (tfplus devices lists them)")


def size_class(nbytes: int) -> int:
    """The opencl buffer pool's size class of a request: a multiple of 256 bytes at most 1/8 above it, so like
    sizes share buffers. The memory planner counts tensors held outside its arena (variables, slots, the fed
    batch) in these units on opencl, as the device holds them."""
    step = 1 << max(8, nbytes.bit_length() - 4)
    return max(step, -(-nbytes // step) * step)
